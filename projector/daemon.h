/* The projector daemon's main loop: consume, project, store, commit.
 *
 * Single-threaded. The loop collects a batch (up to batch.max_events, or
 * what arrived within batch.linger of its first record), projects it through
 * the pipeline, stores the offset after each partition's last durable record
 * and commits stored offsets every kafka.commit_interval. While Redis cannot
 * take a batch, the loop keeps polling Kafka with every partition paused, so
 * the pod stays in its group and resumes by itself.
 */
#ifndef LB_DAEMON_H
#define LB_DAEMON_H

#include "config.h"

#include <signal.h>

/* Exit statuses of the projector (never renumbered). */
enum lb_exit {
    LB_EXIT_OK = 0,      /* stopped by SIGTERM/SIGINT after committing what was durable */
    LB_EXIT_RUNTIME = 1, /* a fatal Kafka error (e.g. fenced static member) */
    LB_EXIT_USAGE = 2,   /* bad command line */
    LB_EXIT_CONFIG = 3,  /* the configuration (or a schema it names) is invalid */
};

/* Runs until '*stop' becomes non-zero (set it from a signal handler) or a
 * fatal error. Returns an lb_exit status; 'config' is borrowed. */
int lb_daemon_run(const struct lb_config *config, volatile sig_atomic_t *stop);

#endif
