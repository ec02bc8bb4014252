/* Topology replies into plain data; see topology.h. */
#include "topology.h"

#include <stdlib.h>
#include <string.h>

static void reset(struct lb_topology *t)
{
    for (size_t s = 0; s < LB_SLOTS; s++)
        t->slots[s] = -1;
    for (size_t i = 0; i < t->nnodes; i++) {
        free(t->nodes[i].host);
        free(t->nodes[i].hostname);
    }
    t->nnodes = 0;
}

void lb_topology_free(struct lb_topology *t)
{
    reset(t);
    free(t->nodes);
    t->nodes = NULL;
    t->cap = 0;
}

/* The index of host:port in 't', added if new; -1 when out of memory. */
static int32_t node_index(struct lb_topology *t, const char *host, int port)
{
    if (host && (!*host || strcmp(host, "?") == 0))
        host = NULL; /* the node does not know its own address */
    for (size_t i = 0; i < t->nnodes; i++) {
        const struct lb_topology_node *n = &t->nodes[i];
        if (n->port == port && (n->host && host ? strcmp(n->host, host) == 0 : n->host == host))
            return (int32_t)i;
    }
    if (t->nnodes == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct lb_topology_node *nodes = realloc(t->nodes, cap * sizeof(*nodes));
        if (!nodes)
            return -1;
        t->nodes = nodes;
        t->cap = cap;
    }
    struct lb_topology_node *n = &t->nodes[t->nnodes];
    n->host = host ? strdup(host) : NULL;
    if (host && !n->host)
        return -1;
    n->hostname = NULL;
    n->port = port;
    n->replicas = 0;
    n->unsure = 0;
    return (int32_t)t->nnodes++;
}

static int reply_port(const redisReply *r, int *port)
{
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    if (v <= 0 || v >= 65536)
        return -1;
    *port = (int)v;
    return 0;
}

/* Slot numbers come as integers, or as strings from some Redis 7.0 builds. */
static int reply_slot(const redisReply *r, long long *slot)
{
    char *end;
    if (r->type == REDIS_REPLY_INTEGER)
        *slot = r->integer;
    else if (r->type == REDIS_REPLY_STRING && r->len > 0) {
        *slot = strtoll(r->str, &end, 10);
        if (*end)
            return -1;
    } else
        return -1;
    return *slot >= 0 && *slot < LB_SLOTS ? 0 : -1;
}

static int reply_range(const redisReply *first, const redisReply *last, long long *from,
                       long long *to)
{
    return reply_slot(first, from) == 0 && reply_slot(last, to) == 0 && *from <= *to ? 0 : -1;
}

/* CLUSTER SLOTS: [[first, last, [ip, port, id], [replica...], ...], ...].
 * Failed replicas are not listed, so every listed one counts as healthy. */
enum lb_topology_result lb_topology_from_slots(struct lb_topology *t, const redisReply *reply)
{
    reset(t);
    if (reply->type != REDIS_REPLY_ARRAY)
        return LB_TOPOLOGY_MALFORMED;
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *range = reply->element[i];
        long long first, last;
        int port;
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
            reply_range(range->element[0], range->element[1], &first, &last) != 0)
            return LB_TOPOLOGY_MALFORMED;
        int32_t master = -1;
        for (size_t k = 2; k < range->elements; k++) {
            const redisReply *node = range->element[k];
            if (node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
                node->element[0]->type != REDIS_REPLY_STRING ||
                reply_port(node->element[1], &port) != 0)
                return LB_TOPOLOGY_MALFORMED;
            int32_t index = node_index(t, node->element[0]->str, port);
            if (index < 0)
                return LB_TOPOLOGY_NOMEM;
            if (k == 2)
                master = index; /* replicas are listed to ask them for the map */
        }
        t->nodes[master].replicas = (int)range->elements - 3;
        for (long long slot = first; slot <= last; slot++)
            t->slots[slot] = master;
    }
    return LB_TOPOLOGY_OK;
}

static const redisReply *field(const redisReply *map, const char *name)
{
    if (map->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < map->elements; i += 2)
        if (map->element[i]->type == REDIS_REPLY_STRING && strcmp(map->element[i]->str, name) == 0)
            return map->element[i + 1];
    return NULL;
}

static int field_is(const redisReply *map, const char *name, const char *value)
{
    const redisReply *f = field(map, name);
    return f && f->type == REDIS_REPLY_STRING && strcmp(f->str, value) == 0;
}

/* CLUSTER SHARDS: [{slots: [first, last, ...], nodes: [{ip, endpoint, port,
 * role, health, ...}, ...]}, ...], each map a flat array of name, value. */
enum lb_topology_result lb_topology_from_shards(struct lb_topology *t, const redisReply *reply,
                                                int tls)
{
    reset(t);
    if (reply->type != REDIS_REPLY_ARRAY)
        return LB_TOPOLOGY_MALFORMED;
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *shard = reply->element[i];
        const redisReply *ranges = field(shard, "slots"), *nodes = field(shard, "nodes");
        if (!ranges || !nodes || ranges->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY || ranges->elements % 2)
            return LB_TOPOLOGY_MALFORMED;
        int32_t master = -1;
        /* Redis 7.0 calls a replica "loading" while the offset it last
         * gossiped is 0: a replica in sync that has not said so yet (every
         * replica of a new cluster, one that has just synced), one still
         * syncing, or one that never synced (a master no replica ever
         * reached keeps offset 0 however much is written). Only the master
         * can tell ("unsure"). */
        int healthy = 0, loading = 0;
        for (size_t k = 0; k < nodes->elements; k++) {
            const redisReply *node = nodes->element[k], *addr = field(node, "endpoint");
            const redisReply *port = field(node, tls ? "tls-port" : "port");
            const redisReply *hostname = field(node, "hostname");
            int p;
            if (!addr || addr->type != REDIS_REPLY_STRING || !*addr->str ||
                strcmp(addr->str, "?") == 0)
                addr = field(node, "ip");
            if (!port || reply_port(port, &p) != 0)
                continue; /* no port of the kind we speak: not for us */
            int32_t index =
                node_index(t, addr && addr->type == REDIS_REPLY_STRING ? addr->str : NULL, p);
            if (index < 0)
                return LB_TOPOLOGY_NOMEM;
            if (hostname && hostname->type == REDIS_REPLY_STRING && hostname->len > 0 &&
                !t->nodes[index].hostname && !(t->nodes[index].hostname = strdup(hostname->str)))
                return LB_TOPOLOGY_NOMEM;
            if (field_is(node, "role", "master")) {
                /* Redis 7.0 says "fail" (documented as "failed"): either
                 * way its slots have no master until one is promoted */
                if (!field_is(node, "health", "fail") && !field_is(node, "health", "failed"))
                    master = index;
            } else if (field_is(node, "health", "online")) {
                healthy++;
            } else if (field_is(node, "health", "loading")) {
                loading++;
            }
        }
        for (size_t r = 0; r + 1 < ranges->elements; r += 2) {
            long long first, last;
            if (reply_range(ranges->element[r], ranges->element[r + 1], &first, &last) != 0)
                return LB_TOPOLOGY_MALFORMED;
            for (long long slot = first; master >= 0 && slot <= last; slot++)
                t->slots[slot] = master;
        }
        if (master >= 0) {
            t->nodes[master].replicas = healthy;
            t->nodes[master].unsure = loading;
        }
    }
    return LB_TOPOLOGY_OK;
}

enum lb_topology_result lb_topology_standalone(struct lb_topology *t, int port, int replicas)
{
    reset(t);
    int32_t index = node_index(t, NULL, port);
    if (index < 0)
        return LB_TOPOLOGY_NOMEM;
    t->nodes[index].replicas = replicas;
    for (size_t s = 0; s < LB_SLOTS; s++)
        t->slots[s] = index;
    return LB_TOPOLOGY_OK;
}
