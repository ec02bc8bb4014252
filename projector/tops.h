/* Merged tops of split boards (profile split:, apply.h "Split boards").
 *
 * A split board's window lives in N shard keys; readers want its top in
 * one key. After a board's request is applied, the pipeline notes each of
 * its windows here; lb_tops_step refreshes a noted window once its oldest
 * change is a quarter of split.staleness old (changes arriving meanwhile
 * ride along):
 *
 *   take    the window's lease in <prefix>{B}:~tops (apply.lua "T"): one
 *           refresher per (board, window) at a time, any pod; it answers
 *           the window's generation;
 *   read    each shard's first split.top entries (ZRANGE, best first) and
 *           its expiry (PEXPIRETIME);
 *   write   the merged first split.top entries replace <prefix>{B}:~top:
 *           <window> (expiring with the last shard key to go), the
 *           generation + 1, the lease dropped: only if the generation is
 *           still the one taken and the lease still this refresher's, so
 *           an older snapshot never overwrites a newer one.
 *
 * A player lives in one shard, so the merge never shows a player twice,
 * and every score it shows is one a shard held. The top K of the union is
 * the merge of each shard's top K, ordered as one key would order it
 * (composite, then member bytes: ZREVRANGE's order on a desc board). A
 * window whose lease another refresher holds, or whose refresh failed,
 * stays noted and is tried again: a refresh that started after a change
 * always shows it.
 *
 * A note carries the records that made the change (per partition, the
 * first offset): until the window's merged top shows them, their
 * partitions' commits stay below them (lb_tops_floor). A pod killed
 * between an apply and the refresh thus leaves the records uncommitted,
 * and whoever reads them again notes the window again.
 */
#ifndef LB_TOPS_H
#define LB_TOPS_H

#include "cluster.h"
#include "config.h"
#include "event.h"
#include "metrics.h"
#include "offsets.h"

#include <stddef.h>
#include <stdint.h>

#define LB_TOPS_LEASE_MS 5000
#define LB_TOPS_RETRY_MS 100 /* after a busy lease or a failure */

struct lb_tops_options {
    const char *key_prefix; /* the keyspace (borrowed) */
    /* the client's options (borrowed): lb_tops_new opens a client of its
     * own from them, which it owns and closes */
    const struct lb_cluster_options *cluster;
};

struct lb_tops_stats {
    uint64_t refreshed;            /* merged tops written */
    uint64_t busy;                 /* takes that found another refresher's lease */
    uint64_t stale;                /* writes refused: a newer snapshot got there first */
    uint64_t failures;             /* refreshes that failed (Redis down): tried again */
    struct lb_histogram staleness; /* seconds from a change's apply to its merged top */
};

struct lb_tops;

/* NULL when out of memory. */
struct lb_tops *lb_tops_new(const struct lb_tops_options *options);
void lb_tops_free(struct lb_tops *tops);

/* Records that changed a window: their partition's commit waits for the
 * merged top (lb_tops_floor). */
struct lb_tops_gate {
    const char *topic; /* copied */
    int32_t partition;
    int64_t offset; /* the first of them */
};

/* Window 'window' ("daily:2026-05-04") of split board 'board' changed at
 * 'now_ms' (monotonic) by the records 'gates' (none: replay, which commits
 * nothing). Returns 0, or -1 when out of memory. */
int lb_tops_note(struct lb_tops *tops, struct lb_str board, const struct lb_profile *profile,
                 struct lb_str window, const struct lb_tops_gate *gates, size_t ngates,
                 int64_t now_ms);

/* The lowest offset of the partition that changed a window whose merged
 * top does not show it yet: what its commit must stay at or below; -1
 * when none waits. '*why', for such a window past its staleness, is why
 * its last refresh did not write it: LB_HOLD_REDIS (failed), LB_HOLD_BOARD
 * (a key or the ACL refused), LB_HOLD_TOP (another refresher's lease);
 * otherwise LB_HOLD_NONE (waiting as usual). */
int64_t lb_tops_floor(const struct lb_tops *tops, const char *topic, int32_t partition,
                      enum lb_hold_reason *why);

/* Refreshes the noted windows that are due at 'now_ms'; returns the
 * windows still noted. */
size_t lb_tops_step(struct lb_tops *tops, int64_t now_ms);
/* Refreshes every noted window, due or not, until none is left or
 * 'deadline_ms' passed (replay, after its swap). Returns those left. */
size_t lb_tops_drain(struct lb_tops *tops, int64_t deadline_ms);
/* Notes every window whose merged top <prefix>{B}:~tops knows (replay,
 * which rebuilt some of the board's shards). Returns 0, or -1 (Redis
 * unreachable, out of memory). */
int lb_tops_note_known(struct lb_tops *tops, struct lb_str board, const struct lb_profile *profile,
                       int64_t now_ms);

size_t lb_tops_pending(const struct lb_tops *tops);
/* The earliest instant a noted window is due, or INT64_MAX. */
int64_t lb_tops_next_due(const struct lb_tops *tops);
const struct lb_tops_stats *lb_tops_stats(const struct lb_tops *tops);

#endif
