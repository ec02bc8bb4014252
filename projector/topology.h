/* A Redis Cluster's topology as its nodes describe it: CLUSTER SHARDS
 * (Redis 7.0+) or CLUSTER SLOTS parsed into plain data (which nodes the
 * reply names, which one masters each slot, how many healthy replicas each
 * master has). No sockets and no client state: the cluster client turns
 * the result into connections. */
#ifndef LB_TOPOLOGY_H
#define LB_TOPOLOGY_H

#include "slot.h"

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct lb_topology_node {
    char *host;     /* NULL: the reply does not know it ("" or "?"): the node that answered */
    char *hostname; /* CLUSTER SHARDS' hostname, when the node announces one; else NULL */
    int port;
    int replicas; /* healthy replicas, when it masters slots */
    /* replicas "loading" (offset 0): in sync and not yet said so, syncing,
     * or never synced; the master knows (WAIT 0 0) */
    int unsure;
};

struct lb_topology {
    int32_t slots[LB_SLOTS];        /* the master: an index into 'nodes', or -1 */
    struct lb_topology_node *nodes; /* each host:port once */
    size_t nnodes, cap;
};

enum lb_topology_result {
    LB_TOPOLOGY_OK = 0,
    LB_TOPOLOGY_MALFORMED, /* not a reply of the expected shape */
    LB_TOPOLOGY_NOMEM,
};

/* Each replaces what 't' held (keeping its memory). A shard whose master
 * failed, or that has none yet, leaves its slots at -1: nobody to write to
 * until a replica is promoted. CLUSTER SHARDS lists a node's plain-TCP port
 * as "port" (absent when the node listens for TLS only) and its TLS port as
 * "tls-port": 'tls' says which one the client connects to; a node without
 * it is left out. CLUSTER SLOTS (and MOVED) already answer with the port of
 * the asking connection's kind. */
enum lb_topology_result lb_topology_from_shards(struct lb_topology *t, const redisReply *reply,
                                                int tls);
enum lb_topology_result lb_topology_from_slots(struct lb_topology *t, const redisReply *reply);
/* A standalone Redis: every slot on one node (host NULL: the one asked). */
enum lb_topology_result lb_topology_standalone(struct lb_topology *t, int port, int replicas);

void lb_topology_free(struct lb_topology *t);

#endif
