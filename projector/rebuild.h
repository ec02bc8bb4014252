/* Rebuilds of decaying boards' overall boards (decay.h, apply.h).
 *
 * When a board sees a patch it had not seen, every older patch's age moves,
 * so its overall board must be taxed again from the per-patch boards. The
 * apply script starts that (the board's gen + 1, a rebuild flag, an empty
 * shadow key, every write from then on to the live board and the shadow)
 * and says so in its answer; whoever hears it notes the board here, and
 * lb_rebuild_step does the work in small steps between batches:
 *
 *   take    a lease in the board's ~decay hash (one holder per board,
 *           renewed by every step; a holder that died loses it when it
 *           runs out, and the next one starts over: every write is ZADD
 *           GT|LT, so starting over is harmless), and the patches in order;
 *   chunk   a page of one patch's board, best first (a write moves a member
 *           only towards the front, so paging by rank never skips one that
 *           the write did not copy to the shadow itself), taxed at that
 *           patch's age in C (decay.c, the one implementation), added to
 *           the shadow;
 *   finish  RENAME of the shadow over the overall board: readers see the
 *           old board or the new one, never a mix.
 *
 * A step that finds the gen moved on (a newer patch arrived meanwhile) or
 * its lease gone starts over from take. Steps are synchronous calls on a
 * client of their own; at most one per LB_REBUILD_INTERVAL_MS, each of at
 * most LB_REBUILD_CHUNK members, so a rebuild takes a bounded share of the
 * node's CPU.
 */
#ifndef LB_REBUILD_H
#define LB_REBUILD_H

#include "cluster.h"
#include "config.h"
#include "event.h"

#include <stddef.h>
#include <stdint.h>

#define LB_REBUILD_CHUNK       1000 /* members per step */
#define LB_REBUILD_INTERVAL_MS 5    /* between steps */
#define LB_REBUILD_LEASE_MS    5000

struct lb_rebuild_options {
    const struct lb_config *config; /* the profiles (borrowed) */
    const char *key_prefix;         /* the keyspace (borrowed) */
    /* the client's options (borrowed): lb_rebuild_new opens a client of its
     * own from them, which the rebuild owns and closes */
    const struct lb_cluster_options *cluster;
    /* between steps, ms; 0: LB_REBUILD_INTERVAL_MS (tests slow it down) */
    int64_t interval_ms;
};

struct lb_rebuild_stats {
    uint64_t started;  /* rebuilds taken on (a lease taken, from the start) */
    uint64_t finished; /* overall boards swapped in */
    uint64_t members;  /* patch-board members taxed into a shadow */
    uint64_t restarts; /* steps that found the gen moved on or the lease lost */
    uint64_t failures; /* steps that failed (Redis down): tried again later */
    uint64_t busy;     /* takes that found another holder's lease */
};

struct lb_rebuild;

/* NULL when out of memory. */
struct lb_rebuild *lb_rebuild_new(const struct lb_rebuild_options *options);
void lb_rebuild_free(struct lb_rebuild *rebuild);

/* Notes that 'board''s overall board is being rebuilt (the apply script
 * said so). Noting it again changes nothing. */
void lb_rebuild_note(struct lb_rebuild *rebuild, struct lb_str board);

/* Also finds rebuilds nobody is doing (their holder died and no event of
 * the board came since): a sweep of every master's keys for the boards'
 * ~decay hashes (SCAN, a page per step), at the first step and every
 * LB_REBUILD_SWEEP_MS after; a board found is noted when its rebuild is
 * flagged or its rule is not this pod's (settings changed while it got no
 * event: its "take" starts the rebuild). The daemon turns it on. */
#define LB_REBUILD_SWEEP_MS (10 * 60000)
void lb_rebuild_sweep(struct lb_rebuild *rebuild);

/* Runs at most one step (of one board whose turn it is at 'now_ms',
 * monotonic, or of the sweep). Returns the boards still to do. */
size_t lb_rebuild_step(struct lb_rebuild *rebuild, int64_t now_ms);

/* Runs steps until every noted board is done or 'deadline_ms' (monotonic)
 * passed; for replay, which rebuilds its staging boards before swapping
 * them in. Returns the boards still to do. */
size_t lb_rebuild_drain(struct lb_rebuild *rebuild, int64_t deadline_ms);

size_t lb_rebuild_pending(const struct lb_rebuild *rebuild);
/* Whether a step has work at 'now_ms': a board noted, or the sweep due. */
int lb_rebuild_busy(const struct lb_rebuild *rebuild, int64_t now_ms);
const struct lb_rebuild_stats *lb_rebuild_stats(const struct lb_rebuild *rebuild);

#endif
