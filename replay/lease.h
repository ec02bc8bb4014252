/* One replay at a time per keyspace, and what an interrupted one left.
 *
 * Two keys beside the keyspace (no hash tag, so any slot):
 *
 *   <prefix>~replay-lease    "<host> <pid> <started ms>" with a TTL, taken
 *                            with SET NX and renewed while the run lives.
 *                            A run that finds it held by a live run refuses
 *                            to start; one held by a dead process on the same
 *                            host is taken over at once (its TTL would
 *                            expire anyway). A run that finds its own
 *                            value there took it already: its SET was
 *                            applied, the reply lost, and the SET sent again.
 *   <prefix>~replay-epoch    a counter: each run that takes the lease draws
 *                            the next number (INCR; the server's time in
 *                            ms if that is larger, should the counter be
 *                            lost), then checks the lease is still its own
 *                            (not taken again), so a run that takes the
 *                            lease later always draws a larger one. The
 *                            fences a run sets carry it ("<epoch> <lease
 *                            value>", fence.lua): a run that froze past its
 *                            lease finds a later run's fence and stops
 *                            instead of overwriting or swapping under it,
 *                            and leaves it when lifting its own.
 *   <prefix>~replay-journal  a hash: owner, started, selection, epoch, and
 *                            one "swapped:<board>" field per board swapped.
 *                            It is deleted when a run finishes, so a journal
 *                            found at start is the record of a run that did
 *                            not. A run never replaces a later run's (a
 *                            larger epoch).
 *   <prefix>~replay-reopening a hash, one field "<window> <board>" per closed
 *                            window a --republish reopened and has not yet
 *                            handed back to the pods (README "Final
 *                            standings"). It outlives the runs: one killed
 *                            meanwhile leaves its windows there, no pod
 *                            closes them, and every later run names them
 *                            until a --republish of them completes.
 *
 * Because only the lease holder writes staging keys, every staging key of
 * an earlier run (replay.h: its prefix names the run's epoch) found while
 * holding the lease is a leftover, never a live run's key.
 *
 * Single-threaded; every function talks to Redis through 'cluster'.
 */
#ifndef LB_REPLAY_LEASE_H
#define LB_REPLAY_LEASE_H

#include "cluster.h"

#include <stddef.h>
#include <stdint.h>

#define LB_LEASE_TTL_MS 30000

struct replay_lease {
    struct lb_cluster *cluster; /* borrowed */
    char key[256], journal[256], reopening[256], epoch_key[256];
    char owner[160]; /* our lease value */
    int held;
    int lost;        /* a script found a later run's state: that run holds the lease */
    int ttl_ms;      /* LB_LEASE_TTL_MS (tests: LB_FAULT_LEASE_TTL_MS) */
    int journaled;   /* our journal begun: the staging keys are ours to write */
    int unsure;      /* a renewal failed since the last one that did not */
    long long epoch; /* drawn from <prefix>~replay-epoch once taken */
    int64_t renewed_ms, renewed_wall_ms; /* monotonic, and the wall clock */
};

/* What the journal of a run that did not finish says. */
struct replay_leftover {
    int found;
    char owner[160], started[40], selection[300];
    size_t swapped;               /* boards it swapped */
    char examples[300];           /* the first few of them */
    size_t reopening;             /* windows left reopening (by any run) */
    char reopening_examples[300]; /* the first few, "<window> of <board>" */
};

/* Takes the lease for the keyspace under 'prefix' and draws its epoch.
 * Returns 0 when held, 1 when another live run holds it ('why' names it),
 * -1 when Redis failed ('why' says how). */
int replay_lease_take(struct replay_lease *lease, struct lb_cluster *cluster, const char *prefix,
                      char *why, size_t whylen);

/* Renews the lease when a third of its TTL has passed, by the monotonic
 * clock or by the wall clock (a paused VM's monotonic clock may not count
 * the pause; its wall clock is set right once it runs again), or the wall
 * clock went back. Returns 0, or -1 when another run holds it now, or held
 * it since our journal began (we stop): a lease that expired and that
 * nobody took is taken again, unless the journal is no longer ours; also
 * -1 once a script found a later run's journal, note or mark (lease->lost).
 * A Redis failure is not a loss: renewal is tried again on the next call. */
int replay_lease_keep(struct replay_lease *lease);

/* What this run writes where a later run must find it stands for a later
 * run: "<epoch> <lease value>", in its fences, its reopening notes and the
 * e:<window> of the windows it reopens. */
void replay_lease_mark(const struct replay_lease *lease, char *out, size_t cap);

/* Gives the lease up if it is still ours. Accepts a lease never taken. */
void replay_lease_release(struct replay_lease *lease);

/* Reads an earlier run's journal into 'out' (out->found = 0 when none),
 * and the windows left reopening whose ~final still says so (out->reopening;
 * with 'tidy', our lease, held, the notes of the others are deleted, but
 * never a later run's). */
int replay_journal_read(struct lb_cluster *cluster, const char *prefix, struct replay_lease *tidy,
                        struct replay_leftover *out);

/* Starts our journal (replacing an old one, but never a later run's: one
 * whose epoch is above ours); records a swapped board; deletes the journal
 * once the run has finished. Failures are reported and ignored: the journal
 * is what an operator reads, not what makes replay exact. The start returns
 * 1 when a later run's journal is there (the lease went to that run while
 * this one was stalled; no longer held), else 0. */
int replay_journal_start(struct replay_lease *lease, const char *selection);
void replay_journal_swapped(struct replay_lease *lease, const char *board);
void replay_journal_finish(struct replay_lease *lease);

/* Notes that 'window' of 'board' is being reopened ('on': before the
 * reopen step, which must not go ahead when this fails) or is not (0: handed
 * back to the pods, or not reopened). -1 when it failed, or found a later
 * run's note there (the lease lost), said either way. */
int replay_journal_reopening(struct replay_lease *lease, const char *board, const char *window,
                             int on);

/* For the tests: a run frozen (a VM paused) at this point, by SIGSTOP to
 * itself, when the environment variable 'name' is set:
 * LB_FAULT_READ_STOP (read.c, once a batch was applied, a record in hand),
 * LB_FAULT_FENCE_STOP (swap.c, between its lease check and its first
 * fences), LB_FAULT_START_STOP (main.c, before clearing the leftovers at
 * its start), LB_FAULT_FINISH_STOP (main.c, its work done, before its
 * journal goes), LB_FAULT_STEP_STOP=<step> (replay_final_step, between the
 * renewal and that step of --republish). */
void replay_fault_stop(const char *name);

/* The first word of a script's answer (an array of strings), or NULL; with
 * 'second', the word after it there ("" when none). Both point into 'reply'. */
const char *replay_answer_word(const redisReply *reply, const char **second);

/* One step of --republish on a window's ~final under 'prefix': "reopen",
 * "reopened" or "unreopen" (the apply script's; README "Final standings"),
 * sent with our mark (replay_lease_mark), which reopen keeps in the
 * window's e:<window>. Sent again after transient failures for as long
 * as 'pause' (called with why and the attempt that failed) returns 0. A step
 * whose reply was lost may have been applied: "reopen" sent again applies
 * again, while "reopened" and "unreopen" find the state they set and answer
 * stale, which counts as done (only after a try that went out). Each try
 * goes out only once the lease was renewed (confirmed ours); a step that
 * still finds a later run's mark there (we stalled past our lease between
 * the renewal and the step) changes nothing and answers taken. Returns the
 * reply (the caller frees it), or NULL; lease->held is 0 when another run
 * holds the lease (or answered taken), else a NULL reply's reason is in
 * lb_cluster_error. '*done' is 1 when the step took effect. */
redisReply *replay_final_step(struct replay_lease *lease, const char *prefix, const char *board,
                              const char *window, const char *step,
                              int (*pause)(void *ctx, const char *why, int attempt), void *ctx,
                              int *done);

#endif
