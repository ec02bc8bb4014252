/* The projector daemon's main loop: consume, project, store, commit.
 *
 * Single-threaded. The loop collects a batch (up to batch.max_events, or
 * what arrived within batch.linger of its first record), projects it through
 * the pipeline, settles every record with the consumer's offset tracker and
 * commits every kafka.commit_interval. A board Redis cannot take holds only
 * its partitions' commits (and is retried by reading them again); the rest
 * keeps flowing. While Redis cannot take anything, every partition is held
 * and, past a bound, paused; the loop keeps polling so the pod stays in its
 * group, and resumes by itself.
 */
#ifndef LB_DAEMON_H
#define LB_DAEMON_H

#include "config.h"
#include "engine.h"

#include <signal.h>

/* Exit statuses of the projector (never renumbered). */
enum lb_exit {
    LB_EXIT_OK = 0,      /* stopped by SIGTERM/SIGINT after committing what was durable */
    LB_EXIT_RUNTIME = 1, /* a fatal Kafka error (e.g. fenced static member) */
    LB_EXIT_USAGE = 2,   /* bad command line */
    LB_EXIT_CONFIG = 3,  /* the configuration (or a schema it names) is invalid */
    /* 4 and 5 belong to replay (retention gap, differences found) */
    LB_EXIT_DRAIN = 6, /* stopped with something read not written: the drain timeout
                          ended a retry, or a partition was held; it is read again
                          after a restart */
};

/* Runs until '*stop' becomes non-zero (set it from a signal handler) or a
 * fatal error, with 'engine' (lb_engine_open of 'config', which the caller
 * opened to check the configuration before anything connects). Returns an
 * lb_exit status; 'config' is borrowed, 'engine' is the daemon's from here
 * on (closed before it returns). */
int lb_daemon_run(const struct lb_config *config, struct lb_engine *engine,
                  volatile sig_atomic_t *stop);

#endif
