/* Offset tracking; see offsets.h for the rules.
 *
 * A pod owns a few dozen partitions at most, so the table is a plain array
 * searched linearly, with the last hit tried first: the records of a batch
 * come in runs of one partition.
 */
#include "offsets.h"

#include <stdlib.h>
#include <string.h>

struct part {
    char *topic;
    int32_t partition;
    int64_t committed, committed_wall_ms, high_at_assign;
    int64_t sent; /* last offset sent for commit (or committed) */
    int64_t next;
    int64_t hold;
    enum lb_hold_reason reason;
    uint64_t waiting;
    int paused;
    int64_t backoff_ms, retry_at_ms;
    int64_t last_hold;           /* offset of the last hold, to see progress past it */
    int64_t wm;                  /* the highest event time below next, or -1 */
    int64_t wm_sent;             /* the watermark sent with the last commit, or -1 */
    enum lb_hold_reason stalled; /* held, or read again since, and not past it yet */
};

struct lb_offsets {
    struct part *parts;
    size_t count, cap, last;
    uint64_t bound;
    int64_t min_ms, max_ms;
    lb_offsets_floor_fn floor;
    void *floor_ctx;
};

const char *lb_hold_reason_name(enum lb_hold_reason reason)
{
    static const char *const names[LB_HOLD__COUNT] = {
        [LB_HOLD_NONE] = "none", [LB_HOLD_REDIS] = "redis",       [LB_HOLD_BOARD] = "board",
        [LB_HOLD_DLQ] = "dlq",   [LB_HOLD_STOPPING] = "stopping", [LB_HOLD_REGISTRY] = "registry",
        [LB_HOLD_TOP] = "top",
    };
    return reason >= 0 && reason < LB_HOLD__COUNT ? names[reason] : "?";
}

struct lb_offsets *lb_offsets_new(uint64_t bound, int64_t min_ms, int64_t max_ms)
{
    struct lb_offsets *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->bound = bound;
    o->min_ms = min_ms;
    o->max_ms = max_ms;
    return o;
}

void lb_offsets_free(struct lb_offsets *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->count; i++)
        free(o->parts[i].topic);
    free(o->parts);
    free(o);
}

static struct part *find(const struct lb_offsets *o, const char *topic, int32_t partition)
{
    struct lb_offsets *m = (struct lb_offsets *)o; /* the cache is not state */
    if (m->last < m->count && m->parts[m->last].partition == partition &&
        strcmp(m->parts[m->last].topic, topic) == 0)
        return &m->parts[m->last];
    for (size_t i = 0; i < m->count; i++)
        if (m->parts[i].partition == partition && strcmp(m->parts[i].topic, topic) == 0) {
            m->last = i;
            return &m->parts[i];
        }
    return NULL;
}

int lb_offsets_assign(struct lb_offsets *o, const char *topic, int32_t partition, int64_t committed,
                      int64_t high, int64_t wall_ms)
{
    struct part *p = find(o, topic, partition);
    if (!p) {
        if (o->count == o->cap) {
            size_t cap = o->cap ? o->cap * 2 : 16;
            struct part *grown = realloc(o->parts, cap * sizeof(*grown));
            if (!grown)
                return -1;
            o->parts = grown;
            o->cap = cap;
        }
        char *name = strdup(topic);
        if (!name)
            return -1;
        p = &o->parts[o->count++];
        memset(p, 0, sizeof(*p));
        p->topic = name;
        p->partition = partition;
    }
    p->committed = committed < 0 ? -1 : committed;
    p->sent = p->next = p->committed;
    p->committed_wall_ms = wall_ms;
    p->high_at_assign = high;
    p->hold = p->last_hold = -1;
    p->reason = p->stalled = LB_HOLD_NONE;
    p->waiting = 0;
    p->paused = 0;
    p->backoff_ms = o->min_ms;
    p->wm = p->wm_sent = -1;
    return 0;
}

void lb_offsets_set_watermark(struct lb_offsets *o, const char *topic, int32_t partition,
                              int64_t watermark)
{
    struct part *p = find(o, topic, partition);
    if (p && watermark > p->wm_sent)
        p->wm = p->wm_sent = watermark;
}

void lb_offsets_revoke(struct lb_offsets *o, const char *topic, int32_t partition)
{
    struct part *p = find(o, topic, partition);
    if (!p)
        return;
    free(p->topic);
    *p = o->parts[--o->count];
    o->last = 0;
}

int lb_offsets_settle(struct lb_offsets *o, const char *topic, int32_t partition, int64_t offset,
                      enum lb_hold_reason reason, int64_t mono_ms, int64_t ts)
{
    struct part *p = find(o, topic, partition);
    if (!p || p->hold >= 0 || (p->next >= 0 && offset < p->next))
        return 0; /* not ours, held already (nothing past a hold counts), or seen */
    if (reason == LB_HOLD_NONE) {
        p->next = offset + 1;
        if (ts > 0 && ts > p->wm)
            p->wm = ts;
        if (offset >= p->last_hold) { /* progress past the last hold */
            p->backoff_ms = o->min_ms;
            p->stalled = LB_HOLD_NONE;
        }
        return 0;
    }
    p->hold = p->last_hold = offset;
    p->reason = p->stalled = reason;
    p->waiting = 0;
    p->retry_at_ms = mono_ms + p->backoff_ms;
    p->backoff_ms = p->backoff_ms * 2 > o->max_ms ? o->max_ms : p->backoff_ms * 2;
    return 1;
}

int lb_offsets_polled(struct lb_offsets *o, const char *topic, int32_t partition)
{
    struct part *p = find(o, topic, partition);
    if (!p || p->hold < 0 || p->paused)
        return 0;
    return ++p->waiting > o->bound;
}

void lb_offsets_paused(struct lb_offsets *o, const char *topic, int32_t partition)
{
    struct part *p = find(o, topic, partition);
    if (p)
        p->paused = 1;
}

int lb_offsets_is_held(const struct lb_offsets *o, const char *topic, int32_t partition)
{
    const struct part *p = find(o, topic, partition);
    return p && p->hold >= 0;
}

size_t lb_offsets_rewind_due(struct lb_offsets *o, int64_t mono_ms,
                             void (*rewind)(void *ctx, const char *topic, int32_t partition,
                                            int64_t offset, enum lb_hold_reason reason,
                                            int was_paused),
                             void *ctx)
{
    size_t due = 0;
    for (size_t i = 0; i < o->count; i++) {
        struct part *p = &o->parts[i];
        if (p->hold < 0 || mono_ms < p->retry_at_ms)
            continue;
        int64_t from = p->hold;
        int was_paused = p->paused;
        enum lb_hold_reason reason = p->reason;
        p->hold = -1;
        p->reason = LB_HOLD_NONE;
        p->waiting = 0;
        p->paused = 0;
        due++;
        rewind(ctx, p->topic, p->partition, from, reason, was_paused);
    }
    return due;
}

void lb_offsets_set_floor(struct lb_offsets *o, lb_offsets_floor_fn floor, void *ctx)
{
    o->floor = floor;
    o->floor_ctx = ctx;
}

/* The partition's floor when it is below its next offset, else -1; '*why'
 * how it shows. */
static int64_t floor_below(const struct lb_offsets *o, const struct part *p,
                           enum lb_hold_reason *why)
{
    *why = LB_HOLD_NONE;
    int64_t floor =
        o->floor && p->next >= 0 ? o->floor(o->floor_ctx, p->topic, p->partition, why) : -1;
    return floor >= 0 && floor < p->next ? floor : -1;
}

size_t lb_offsets_to_commit(struct lb_offsets *o,
                            void (*each)(void *ctx, const char *topic, int32_t partition,
                                         int64_t offset, int64_t watermark),
                            void *ctx)
{
    size_t n = 0;
    for (size_t i = 0; i < o->count; i++) {
        struct part *p = &o->parts[i];
        enum lb_hold_reason why;
        int64_t floor = floor_below(o, p, &why), next = floor >= 0 ? floor : p->next;
        if (next < 0 || next <= p->sent)
            continue;
        p->sent = next;
        /* below next, the highest event time there is not known: the last
         * one sent is (the watermark never moves back) */
        if (next == p->next && p->wm > p->wm_sent)
            p->wm_sent = p->wm;
        each(ctx, p->topic, p->partition, next, p->wm_sent);
        n++;
    }
    return n;
}

void lb_offsets_commit_result(struct lb_offsets *o, const char *topic, int32_t partition,
                              int64_t offset, int ok, int64_t wall_ms)
{
    struct part *p = find(o, topic, partition);
    if (!p)
        return;
    if (!ok) {
        if (p->sent == offset)
            p->sent = p->committed; /* send it again next time */
        return;
    }
    if (offset > p->committed) {
        p->committed = offset;
        p->committed_wall_ms = wall_ms;
    }
}

void lb_offsets_each(const struct lb_offsets *o,
                     void (*each)(void *ctx, const struct lb_partition_progress *progress),
                     void *ctx)
{
    for (size_t i = 0; i < o->count; i++) {
        const struct part *p = &o->parts[i];
        /* a hold is shown first (an operator may have to act); a floor
         * when nothing else stops the commit and it is more than a wait */
        enum lb_hold_reason why = LB_HOLD_NONE;
        int64_t floor = p->stalled ? -1 : floor_below(o, p, &why);
        if (why == LB_HOLD_NONE)
            floor = -1;
        struct lb_partition_progress pp = {.topic = p->topic,
                                           .partition = p->partition,
                                           .committed = p->committed,
                                           .committed_wall_ms = p->committed_wall_ms,
                                           .next = p->next,
                                           .high_at_assign = p->high_at_assign,
                                           .watermark = p->wm_sent,
                                           .hold = floor >= 0   ? floor
                                                   : p->stalled ? p->last_hold
                                                                : -1,
                                           .reason = floor >= 0 ? why : p->stalled,
                                           .waiting = p->waiting,
                                           .paused = p->paused};
        each(ctx, &pp);
    }
}
