/* A SCAN of every master for keys matching a pattern, one page per call, so
 * that a large keyspace never holds up the caller's loop: the decaying
 * boards' search for unfinished rebuilds (rebuild.c) and the final
 * standings' search for boards with windows to close (closer.c). Each
 * master is scanned once per sweep, found through the slots it serves in
 * the client's slot map; slots no master serves (a shard lost with its
 * replicas) are passed over, so that a sweep of the others completes.
 */
#ifndef LB_SWEEP_H
#define LB_SWEEP_H

#include "cluster.h"

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct lb_sweep {
    int running;
    uint32_t slot; /* a slot of the master being scanned */
    char cursor[32];
    char (*done)[64]; /* masters scanned in this sweep */
    size_t ndone;
};

/* One page: SCAN <cursor> MATCH 'pattern' COUNT 'count' [TYPE 'type'] on
 * the master being scanned (a sweep starts when none is running); 'each'
 * is called with every key found. Returns 1 when the last master is done
 * (the sweep ends), 0 when more pages are due, -1 when the call failed: the
 * sweep ends, and '*failed' is the answer (the caller frees it) or NULL
 * (lb_cluster_error says why). */
int lb_sweep_page(struct lb_sweep *sweep, struct lb_cluster *cluster, const char *pattern,
                  const char *type, unsigned count, void (*each)(void *ctx, const redisReply *key),
                  void *ctx, redisReply **failed);

void lb_sweep_free(struct lb_sweep *sweep);

#endif
