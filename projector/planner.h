/* The batch planner: decoded events in, one Redis request per board out.
 *
 * Pure: no I/O, no clock (the caller passes 'now'), no global state. For
 * each event it finds the board's profile, computes the composite score, and
 * fans the event out to the key of every window the profile defines. Within
 * a batch, the updates of one member of one key from one partition are
 * merged according to the board's aggregation:
 *
 *   best    the best composite submitted since the member's last retraction
 *   latest  the submission with the greatest (event time, offset)
 *   sum     the scores submitted since the last retraction, added up, with
 *           the latest event time (the moment the total was reached)
 *
 * and a retraction in between is kept as "remove, then apply the rest". A
 * board's merged updates become one EVALSHA of the apply script (see
 * apply_script.h), which checks the board's applied-offset markers and
 * writes everything atomically: each event is applied at most once, whatever
 * is redelivered, replayed, or written by a pod that lost its partition.
 *
 * Per board, events are grouped into segments, one per topic-partition,
 * with the first and last offset the batch holds for that board; since a
 * player's events share a partition (the message key), a segment's merged
 * updates stand for exactly its events.
 *
 * Memory: everything lives in the planner's arena and buffers, reset by
 * lb_plan_reset; the planner does not own the events' strings, which must
 * stay valid until the requests have been sent.
 */
#ifndef LB_PLANNER_H
#define LB_PLANNER_H

#include "arena.h"
#include "config.h"
#include "event.h"

#include <stddef.h>
#include <stdint.h>

/* Where an event was read: the applied-offset marker is per topic-partition. */
struct lb_position {
    const char *topic; /* borrowed; must outlive the plan */
    int32_t partition;
    int64_t offset;
};

/* One board's request, ready to send: EVALSHA of the apply script. */
struct lb_txn {
    uint16_t slot; /* hash slot of every key in it */
    size_t offset; /* bytes [offset, offset + len) of lb_plan_bytes() */
    size_t len;    /* 0: nothing to send (every event rejected or late) */
    struct lb_str board;
};

struct lb_plan_stats {
    uint64_t member_updates; /* (key, member) updates sent, after merging */
    uint64_t late;           /* window writes skipped because the window expired */
};

struct lb_plan;

/* The SHA1 of the apply script, as EVALSHA wants it (40 hex digits). */
const char *lb_apply_script_sha(void);
const char *lb_apply_script(void);

/* Creates a planner for 'config' (not owned; must outlive the planner).
 * Returns NULL when out of memory. */
struct lb_plan *lb_plan_new(const struct lb_config *config);
void lb_plan_free(struct lb_plan *plan);

/* Forgets the previous batch, keeping memory for the next. */
void lb_plan_reset(struct lb_plan *plan);

/* Adds one validated event read at 'pos'. Events of one partition must come
 * in offset order. On success returns LB_ACCEPT and stores in '*txn' the
 * index of the request (board) the event belongs to; the event is durable
 * exactly when that request succeeded. Otherwise returns the reject reason
 * (score or time out of the board's range, a bad custom window value, no
 * profile) and plans nothing of the event. 'now_ms' decides which windows
 * have already expired. Returns LB_REJECT__COUNT when out of memory. */
enum lb_reject lb_plan_add(struct lb_plan *plan, const struct lb_event *event,
                           const struct lb_position *pos, int64_t now_ms, uint32_t *txn);

/* Encodes the requests. After this, lb_plan_txns and lb_plan_bytes are valid
 * until the next reset. Returns 0, or -1 when out of memory. */
int lb_plan_finish(struct lb_plan *plan);

const struct lb_txn *lb_plan_txns(const struct lb_plan *plan, size_t *count);
const char *lb_plan_bytes(const struct lb_plan *plan);
const struct lb_plan_stats *lb_plan_stats(const struct lb_plan *plan);

/* Writes the key of a window ("<prefix>{<board>}:daily:2026-05-04"),
 * NUL-terminated, into 'out' and returns its length, or 0 if it does not fit
 * in 'cap'. For
 * custom windows 'custom_value' is the dims value. Shared with the tools. */
size_t lb_window_key(const char *prefix, struct lb_str board, const struct lb_window_config *window,
                     int64_t window_id, struct lb_str custom_value, char *out, size_t cap);

/* "<prefix>{<board>}:~applied" (NUL-terminated, like the field), the
 * board's applied-offset marker hash, and
 * its field "<topic>:<partition>" holding the last offset applied from
 * there. */
size_t lb_marker_key(const char *prefix, struct lb_str board, char *out, size_t cap);
size_t lb_marker_field(const char *topic, int32_t partition, char *out, size_t cap);

/* "<prefix>{<board>}:~fence": set by replay (with a TTL) while it swaps the
 * board; the apply script writes nothing to a fenced board. */
size_t lb_fence_key(const char *prefix, struct lb_str board, char *out, size_t cap);

/* What the apply script answered, parsed. */
enum lb_apply_status {
    LB_APPLY_OK = 0,
    LB_APPLY_PARTIAL,   /* some segments were partly applied before: plan again without them */
    LB_APPLY_OVERFLOW,  /* some sums would leave [sum_min, sum_max]: reject those events */
    LB_APPLY_WRONGTYPE, /* a key holds something else: an operator must fix it */
    LB_APPLY_UNKNOWN,   /* not a reply of the apply script */
};

#endif
