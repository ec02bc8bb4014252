/* A paged SCAN of every master; see sweep.h. */
#include "sweep.h"
#include "slot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int swept(const struct lb_sweep *w, const char *owner)
{
    for (size_t i = 0; i < w->ndone; i++)
        if (strcmp(w->done[i], owner) == 0)
            return 1;
    return 0;
}

/* The first slot from 'slot' on served by a master not swept yet in this
 * sweep; slots that no master serves (a shard lost) are passed over: their
 * keys cannot be read, and the other masters' can. LB_SLOTS when none. */
static uint32_t next_slot(const struct lb_sweep *w, struct lb_cluster *cluster, uint32_t slot)
{
    for (const char *owner; slot < LB_SLOTS; slot++)
        if ((owner = lb_cluster_slot_owner(cluster, (uint16_t)slot)) && !swept(w, owner))
            break;
    return slot;
}

int lb_sweep_page(struct lb_sweep *w, struct lb_cluster *cluster, const char *pattern,
                  const char *type, unsigned count, void (*each)(void *ctx, const redisReply *key),
                  void *ctx, redisReply **failed)
{
    *failed = NULL;
    if (!w->running) {
        w->running = 1;
        w->ndone = 0;
        w->slot = next_slot(w, cluster, 0);
        if (w->slot == LB_SLOTS)
            w->slot = 0; /* no map yet: the call loads it, or says why not */
        snprintf(w->cursor, sizeof(w->cursor), "0");
    }
    char n[16];
    snprintf(n, sizeof(n), "%u", count);
    const char *argv[] = {"SCAN", w->cursor, "MATCH", pattern, "COUNT", n, "TYPE", type};
    int argc = type ? 8 : 6;
    size_t argvlen[8];
    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    redisReply *reply = lb_cluster_command(cluster, (uint16_t)w->slot, argc, argv, argvlen);
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
        w->running = 0;
        *failed = reply;
        return -1;
    }
    for (size_t i = 0; i < reply->element[1]->elements; i++)
        if (reply->element[1]->element[i]->type == REDIS_REPLY_STRING)
            each(ctx, reply->element[1]->element[i]);
    snprintf(w->cursor, sizeof(w->cursor), "%s", reply->element[0]->str);
    freeReplyObject(reply);
    if (strcmp(w->cursor, "0") != 0)
        return 0;
    /* this master is done: on to the next slot served by one not swept */
    const char *owner = lb_cluster_slot_owner(cluster, (uint16_t)w->slot);
    if (owner) {
        char(*done)[64] = realloc(w->done, (w->ndone + 1) * sizeof(*done));
        if (done) {
            w->done = done;
            snprintf(w->done[w->ndone++], sizeof(done[0]), "%s", owner);
        }
    }
    w->slot = next_slot(w, cluster, w->slot + 1);
    if (w->slot < LB_SLOTS)
        return 0;
    w->running = 0;
    return 1;
}

void lb_sweep_free(struct lb_sweep *w)
{
    free(w->done);
    w->done = NULL;
    w->ndone = 0;
}
