/* The batch planner: decoded events in, one Redis transaction per board out.
 *
 * Pure: no I/O, no clock (the caller passes 'now'), no global state. For
 * each event it finds the board's profile, computes the composite score, and
 * fans the event out to the key of every window the profile defines. Within
 * a batch, updates of one member of one key are merged (only the best
 * composite is sent), and all keys of one board become a single
 *
 *     MULTI, ZADD key GT|LT c1 m1 c2 m2 ..., PEXPIREAT key t, ..., EXEC
 *
 * encoded as RESP into one contiguous buffer. All keys of a board share the
 * hash tag {board}, so the transaction is single-slot and atomic.
 *
 * Memory: everything lives in the planner's arena and buffers, reset by
 * lb_plan_reset; the planner does not own the events' strings, which must stay
 * valid until the transactions have been sent.
 */
#ifndef LB_PLANNER_H
#define LB_PLANNER_H

#include "arena.h"
#include "config.h"
#include "event.h"

#include <stddef.h>
#include <stdint.h>

/* One board's transaction, ready to send. */
struct lb_txn {
    uint16_t slot;      /* hash slot of every key in it */
    uint32_t ncommands; /* commands between MULTI and EXEC */
    size_t offset;      /* bytes [offset, offset + len) of lb_plan_bytes() */
    size_t len;
    struct lb_str board;
};

struct lb_plan_stats {
    uint64_t member_updates; /* (key, member) pairs sent, after merging */
    uint64_t late;           /* window writes skipped because the window expired */
};

struct lb_plan;

/* Creates a planner for 'config' (not owned; must outlive the planner).
 * Returns NULL when out of memory. */
struct lb_plan *lb_plan_new(const struct lb_config *config);
void lb_plan_free(struct lb_plan *plan);

/* Forgets the previous batch, keeping memory for the next. */
void lb_plan_reset(struct lb_plan *plan);

/* Adds one validated event. On success returns LB_ACCEPT and stores in
 * '*txn' the index of the transaction (board) the event belongs to; an event
 * is durable exactly when that transaction succeeded. Otherwise returns the
 * reject reason (score or time out of the board's range) and plans nothing.
 * 'now_ms' decides which windows have already expired. Returns
 * LB_REJECT__COUNT when out of memory. */
enum lb_reject lb_plan_add(struct lb_plan *plan, const struct lb_event *event, int64_t now_ms,
                           uint32_t *txn);

/* Encodes the transactions. After this, lb_plan_txns and lb_plan_bytes are
 * valid until the next reset. Returns 0, or -1 when out of memory. */
int lb_plan_finish(struct lb_plan *plan);

const struct lb_txn *lb_plan_txns(const struct lb_plan *plan, size_t *count);
const char *lb_plan_bytes(const struct lb_plan *plan);
const struct lb_plan_stats *lb_plan_stats(const struct lb_plan *plan);

/* Writes the key of a window ("<prefix>{<board>}:daily:2026-05-04") into
 * 'out' and returns its length, or 0 if it does not fit in 'cap'. For
 * custom windows 'custom_value' is the dims value. Shared with the tools. */
size_t lb_window_key(const char *prefix, struct lb_str board, const struct lb_window_config *window,
                     int64_t window_id, struct lb_str custom_value, char *out, size_t cap);

#endif
