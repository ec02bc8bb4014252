/* The batch planner: decoded events in, per-board, per-key member updates
 * out. Pure merging: no I/O, no clock (the caller passes 'now'), no global
 * state, and nothing of the wire: apply.h turns a plan into requests.
 *
 * For each event it finds the board's profile, computes the composite
 * score, and fans the event out to the key of every window the profile
 * defines. Within a batch, the updates of one member of one key from one
 * partition are merged according to the board's aggregation:
 *
 *   best    the best composite submitted since the member's last retraction
 *   latest  the submission with the greatest (event time, offset)
 *   sum     the scores submitted since the last retraction, added up, with
 *           the latest event time (the moment the total was reached)
 *
 * and a retraction in between is kept as "remove, then apply the rest".
 *
 * Per board, events are grouped into segments, one per topic-partition,
 * with the first and last offset the batch holds for that board; since a
 * player's events share a partition (the message key), a segment's merged
 * updates stand for exactly its events, and the apply script can skip a
 * segment applied before without touching the others.
 *
 * Memory: everything lives in the planner's arena, reset by lb_plan_reset;
 * the planner does not own the events' strings, which must stay valid until
 * the requests have been sent.
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

struct lb_plan_stats {
    uint64_t member_updates; /* (key, member, segment) updates, after merging */
    uint64_t late;           /* window writes skipped because the window expired */
    uint64_t closed; /* window writes left out: at or past a closed window's close offsets */
};

/* What lb_plan_add made of an accepted event. */
enum lb_plan_added {
    LB_PLAN_ADDED = 0,
    LB_PLAN_DUPLICATE, /* its board dedupes and the batch holds its event_id already */
    LB_PLAN_CONFLICT,  /* the same, with another payload: the first one counts */
};

struct lb_plan;

struct lb_plan_options {
    /* a board's profile: the first whose patterns match its id (borrowed;
     * must outlive the planner) */
    const struct lb_profile *profiles;
    size_t nprofiles;
};

/* Creates a planner. Returns NULL when out of memory. */
struct lb_plan *lb_plan_new(const struct lb_plan_options *options);
void lb_plan_free(struct lb_plan *plan);

/* Forgets the previous batch, keeping memory for the next. If memory runs
 * out here, the next lb_plan_add says so. */
void lb_plan_reset(struct lb_plan *plan);

/* Adds one validated event read at 'pos'. Events of one partition must come
 * in offset order. Stores in '*reason' LB_ACCEPT, or why the event cannot be
 * planned (score or time out of the board's range, a bad custom window
 * value, no profile: it is then planned nothing of). An accepted event's
 * board index goes to '*txn' (its request's index once encoded); the event
 * is durable exactly when that request succeeded. 'now_ms' decides which
 * windows have already expired. On a board that dedupes, an event whose
 * event_id the batch already holds for the board is planned nothing of
 * either: it returns LB_PLAN_DUPLICATE or LB_PLAN_CONFLICT (its txn set,
 * its reason LB_ACCEPT). Returns LB_PLAN_ADDED otherwise, or -1 when out of
 * memory (the plan is then only fit for lb_plan_reset). */
int lb_plan_add(struct lb_plan *plan, const struct lb_event *event, const struct lb_position *pos,
                int64_t now_ms, uint32_t *txn, enum lb_reject *reason);

/* Whether window 'window_id' of 'window' (one with results:) of 'board' had
 * closed before the event at 'pos': its write is then left out (README
 * "Final standings"). Replay sets it; the projector leaves closed windows
 * to the apply script. */
typedef int (*lb_plan_closed_fn)(void *ctx, struct lb_str board,
                                 const struct lb_window_config *window, int64_t window_id,
                                 const struct lb_position *pos);
void lb_plan_set_closed(struct lb_plan *plan, lb_plan_closed_fn closed, void *ctx);

const struct lb_plan_stats *lb_plan_stats(const struct lb_plan *plan);
/* How many chunks the planner's memory took from malloc so far: it stops
 * growing once batches of one size have settled the arena. */
uint64_t lb_plan_chunks_made(const struct lb_plan *plan);

/* ---- the plan, read-only, for the apply module ------------------------------------- */

#define LB_PLAN_NONE      UINT32_MAX /* no such item: the end of a list */
#define LB_PLAN_KEY_CACHE 8

/* Lists are singly linked by index into the view's arrays. */
struct lb_plan_board {
    struct lb_str id;   /* its hash tag: the board, or a split board's shard (apply.h) */
    struct lb_str base; /* the board (a split board's own id: nothing to write under it) */
    uint32_t shard;
    uint32_t *shards;                 /* a split board: its shards' indexes (the planner's own) */
    const struct lb_profile *profile; /* NULL: no profile matched; nothing to write */
    uint16_t slot;
    uint32_t first_key, last_key; /* its window keys, in first-use order */
    uint32_t first_segment;       /* newest first; 'number' says the order */
    uint32_t nsegments;
    uint32_t first_seen, last_seen; /* dedupe: its events' ids, in the order planned */
    uint32_t nseen;
    uint32_t last_segment;                  /* the planner's own */
    uint32_t recent_key[LB_PLAN_KEY_CACHE]; /* the planner's own */
};

struct lb_plan_segment {
    const char *topic;
    int32_t partition;
    uint32_t number; /* 1-based, within the board */
    int64_t first, last;
    uint32_t next;
};

/* Dedupe: one event of a board that dedupes. The apply script drops the
 * board's events whose id it holds already (lb_apply_parse says which),
 * and records the others with the board's writes. */
struct lb_plan_seen {
    uint32_t board;
    uint32_t segment;
    struct lb_str event_id;
    int64_t offset;
    int64_t stamp; /* lb_dedupe_stamp */
    uint32_t next;
};

/* Event time in whole seconds times 2^20, plus a 20-bit fingerprint of the
 * rest of the event (player, score, op, ts, dims): stored per event id, it
 * orders the ids by event time and tells a conflict (same id, another
 * payload) from a plain duplicate. Exact in a double for |ts| < 2^33 s. */
#define LB_DEDUPE_FP_BITS 20
int64_t lb_dedupe_stamp(const struct lb_event *event);

enum lb_expire_kind { LB_EXPIRE_NONE = 'n', LB_EXPIRE_AT = 'a', LB_EXPIRE_AFTER = 't' };

struct lb_plan_key {
    uint32_t board;
    uint32_t window; /* index into the board profile's windows */
    int64_t window_id;
    struct lb_str custom_value;
    char expire;       /* enum lb_expire_kind */
    int64_t expire_ms; /* PEXPIREAT instant, or PEXPIRE ttl */
    uint32_t next_key;
    uint32_t first_entry, last_entry, nentries;
};

#define LB_ENTRY_RETRACTED 1u /* the member is removed, then 'value' applied if set */
#define LB_ENTRY_VALUE     2u

/* One member of one key from one segment, merged. */
struct lb_plan_entry {
    uint32_t key;
    uint32_t segment; /* index into the segments */
    struct lb_str player;
    uint32_t flags;
    int64_t value; /* best, latest: composite; sum: the scores added up */
    int64_t ts;    /* latest: event time; sum: the tie of the latest event time */
    int64_t order; /* latest: offset, breaking equal event times */
    uint32_t next_entry;
};

struct lb_plan_view {
    const struct lb_plan_board *boards; /* a board's index is what lb_plan_add returned */
    uint32_t nboards;
    const struct lb_plan_segment *segments;
    const struct lb_plan_key *keys;
    const struct lb_plan_entry *entries;
    const struct lb_plan_seen *seen;
};

/* Valid until the next lb_plan_add or lb_plan_reset. */
void lb_plan_view(const struct lb_plan *plan, struct lb_plan_view *view);

#endif
