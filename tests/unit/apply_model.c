/* An in-memory model of Redis running the apply script; see apply_model.h.
 *
 * Written from the protocol in apply_script.h, not from the Lua: two
 * independent readings of one contract. Objects live in small arrays found by
 * linear search; the tests keep them small. */
#include "apply_model.h"

#include <hiredis/hiredis.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct field {
    char *name;
    int64_t score; /* sorted sets */
    char *value;   /* hashes */
};

struct object {
    char *key;
    int is_hash;
    struct field *fields;
    size_t count, cap;
};

struct model {
    struct object *objects;
    size_t count, cap;
};

struct model *model_new(void)
{
    return calloc(1, sizeof(struct model));
}

void model_free(struct model *m)
{
    for (size_t i = 0; m && i < m->count; i++) {
        for (size_t f = 0; f < m->objects[i].count; f++) {
            free(m->objects[i].fields[f].name);
            free(m->objects[i].fields[f].value);
        }
        free(m->objects[i].fields);
        free(m->objects[i].key);
    }
    if (m)
        free(m->objects);
    free(m);
}

static struct object *lookup(const struct model *m, const char *key)
{
    for (size_t i = 0; i < m->count; i++)
        if (strcmp(m->objects[i].key, key) == 0)
            return &m->objects[i];
    return NULL;
}

static struct object *create(struct model *m, const char *key, int is_hash)
{
    struct object *o = lookup(m, key);
    if (o)
        return o;
    if (m->count == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->objects = realloc(m->objects, m->cap * sizeof(*m->objects));
    }
    o = &m->objects[m->count++];
    *o = (struct object){.key = strdup(key), .is_hash = is_hash};
    return o;
}

static struct field *find_field(const struct object *o, const char *name)
{
    for (size_t i = 0; o && i < o->count; i++)
        if (strcmp(o->fields[i].name, name) == 0)
            return &o->fields[i];
    return NULL;
}

static struct field *add_field(struct object *o, const char *name)
{
    struct field *f = find_field(o, name);
    if (f)
        return f;
    if (o->count == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 16;
        o->fields = realloc(o->fields, o->cap * sizeof(*o->fields));
    }
    f = &o->fields[o->count++];
    *f = (struct field){.name = strdup(name)};
    return f;
}

static void remove_field(struct object *o, const char *name)
{
    struct field *f = find_field(o, name);
    if (!f)
        return;
    free(f->name);
    free(f->value);
    *f = o->fields[--o->count];
}

/* ---- the script, in C ------------------------------------------------------------ */

struct request {
    redisReply *parsed;
    int nkeys_total;
    const char **keys;
    const char **args; /* args[1] is ARGV[1] */
    size_t nargs;
};

static int parse(const char *bytes, size_t len, struct request *req)
{
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;
    redisReaderFeed(reader, bytes, len);
    int rc = redisReaderGetReply(reader, &reply);
    redisReaderFree(reader);
    if (rc != REDIS_OK || !reply)
        return -1;
    redisReply *r = reply;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || strcmp(r->element[0]->str, "EVALSHA")) {
        freeReplyObject(r);
        return -1;
    }
    req->parsed = r;
    req->nkeys_total = atoi(r->element[2]->str);
    req->keys = calloc((size_t)req->nkeys_total + 2, sizeof(char *));
    for (int i = 0; i < req->nkeys_total; i++)
        req->keys[i + 1] = r->element[3 + i]->str; /* 1-based like Lua */
    req->nargs = r->elements - 3 - (size_t)req->nkeys_total;
    req->args = calloc(req->nargs + 2, sizeof(char *));
    for (size_t i = 0; i < req->nargs; i++)
        req->args[i + 1] = r->element[3 + (size_t)req->nkeys_total + i]->str;
    return 0;
}

struct outcome {
    int removed;
    int has_value;
    int64_t score;
    char stamp[64];
};

enum model_answer model_apply(struct model *m, const char *bytes, size_t len,
                              struct model_partial *partial, size_t *npartial,
                              char (*overflow)[128], size_t *noverflow, size_t max)
{
    struct request q = {0};
    *npartial = *noverflow = 0;
    if (parse(bytes, len, &q) != 0)
        return MODEL_BAD_REQUEST;
    const char **A = q.args;
    char mode = A[2][0], order = A[3][0];
    int T = atoi(A[4]), later_larger = A[5][0] == '1';
    int64_t smin = strtoll(A[6], NULL, 10), smax = strtoll(A[7], NULL, 10);
    int nkeys = atoi(A[8]), nseg = atoi(A[9]);
    size_t pos = 10;
    int apply[64] = {0};
    const char *seg_field[64];
    int64_t seg_last[64];
    const char *marker_key = q.keys[1];
    enum model_answer answer = MODEL_OK;

    for (int s = 1; s <= nseg; s++, pos += 3) {
        int64_t lo = strtoll(A[pos + 1], NULL, 10), hi = strtoll(A[pos + 2], NULL, 10);
        int64_t mark = model_marker(m, marker_key, A[pos]);
        seg_field[s] = A[pos];
        seg_last[s] = hi;
        if (mark >= hi)
            apply[s] = 0;
        else if (mark < lo)
            apply[s] = 1;
        else if (*npartial < max) {
            snprintf(partial[*npartial].field, sizeof(partial[0].field), "%s", A[pos]);
            partial[(*npartial)++].marker = mark;
            answer = MODEL_PARTIAL;
        }
    }
    if (answer == MODEL_PARTIAL)
        goto done;

    size_t width = mode == 'b' ? 4 : 5;
    double scale = ldexp(1.0, T);
    /* pass 1: every key's outcome per member, in entry order */
    struct plan {
        const char *member;
        struct outcome out;
    } * plans[64] = {0};
    size_t nplans[64] = {0};
    const char *expire[64], *expire_at[64];
    for (int k = 1; k <= nkeys; k++) {
        expire[k] = A[pos];
        expire_at[k] = A[pos + 1];
        size_t n = (size_t)atoi(A[pos + 2]);
        pos += 3;
        plans[k] = calloc(n + 1, sizeof(*plans[k]));
        const struct object *zset = lookup(m, q.keys[2 + k]);
        const struct object *stamps = mode == 'l' ? lookup(m, q.keys[2 + nkeys + k]) : NULL;
        for (size_t e = 0; e < n; e++, pos += width) {
            if (!apply[atoi(A[pos])])
                continue;
            const char *flags = A[pos + 1], *member = A[pos + width - 1];
            struct plan *p = NULL;
            for (size_t i = 0; i < nplans[k]; i++)
                if (strcmp(plans[k][i].member, member) == 0)
                    p = &plans[k][i];
            if (!p) {
                p = &plans[k][nplans[k]++];
                p->member = member;
                /* the current state, as the script reads it */
                const struct field *z = find_field(zset, member);
                const struct field *st = find_field(stamps, member);
                if (mode != 'b' && z) {
                    p->out.has_value = 1;
                    p->out.score = z->score;
                    if (st)
                        snprintf(p->out.stamp, sizeof(p->out.stamp), "%s", st->value);
                }
            }
            if (strchr(flags, 'r')) {
                p->out.removed = 1;
                p->out.has_value = 0;
                p->out.stamp[0] = '\0';
            }
            if (!strchr(flags, 'v'))
                continue;
            int64_t v = strtoll(A[pos + 2], NULL, 10);
            if (mode == 'b') {
                if (!p->out.has_value || (order == 'd' ? v > p->out.score : v < p->out.score))
                    p->out.score = v;
                p->out.has_value = 1;
            } else if (mode == 'l') {
                const char *stamp = A[pos + 3];
                if (!p->out.stamp[0] || strcmp(stamp, p->out.stamp) > 0) {
                    p->out.score = v;
                    snprintf(p->out.stamp, sizeof(p->out.stamp), "%s", stamp);
                    p->out.has_value = 1;
                }
            } else {
                int64_t tie = strtoll(A[pos + 3], NULL, 10), sum = 0;
                if (p->out.has_value) {
                    sum = (int64_t)floor((double)p->out.score / scale);
                    int64_t old = p->out.score - (int64_t)(sum * scale);
                    if (later_larger ? old > tie : old < tie)
                        tie = old;
                }
                sum += v;
                if ((sum < smin || sum > smax) && *noverflow < max) {
                    snprintf(overflow[(*noverflow)++], 128, "%s", member);
                    answer = MODEL_OVERFLOW;
                }
                p->out.score = (int64_t)(sum * scale) + tie;
                p->out.has_value = 1;
            }
        }
    }
    if (answer == MODEL_OVERFLOW)
        goto free_plans;
    /* pass 2: write */
    for (int k = 1; k <= nkeys; k++) {
        /* create both before holding either: creating may move the array */
        create(m, q.keys[2 + k], 0);
        struct object *stamps = mode == 'l' ? create(m, q.keys[2 + nkeys + k], 1) : NULL;
        struct object *zset = lookup(m, q.keys[2 + k]);
        for (size_t i = 0; i < nplans[k]; i++) {
            const struct plan *p = &plans[k][i];
            if (p->out.removed) {
                remove_field(zset, p->member);
                if (stamps)
                    remove_field(stamps, p->member);
            }
            if (!p->out.has_value)
                continue;
            struct field *f = find_field(zset, p->member);
            if (mode == 'b' && f && !p->out.removed &&
                (order == 'd' ? p->out.score <= f->score : p->out.score >= f->score))
                continue; /* ZADD GT / LT */
            add_field(zset, p->member)->score = p->out.score;
            if (stamps) {
                struct field *s = add_field(stamps, p->member);
                free(s->value);
                s->value = strdup(p->out.stamp);
            }
        }
        (void)expire;
        (void)expire_at;
    }
    {
        struct object *markers = create(m, marker_key, 1);
        for (int s = 1; s <= nseg; s++) {
            if (!apply[s])
                continue;
            char text[32];
            snprintf(text, sizeof(text), "%lld", (long long)seg_last[s]);
            struct field *f = add_field(markers, seg_field[s]);
            free(f->value);
            f->value = strdup(text);
        }
    }
free_plans:
    for (int k = 1; k <= nkeys; k++)
        free(plans[k]);
done:
    free(q.keys);
    free(q.args);
    freeReplyObject(q.parsed);
    return answer;
}

int model_score(const struct model *m, const char *key, const char *member, int64_t *score)
{
    const struct field *f = find_field(lookup(m, key), member);
    if (!f)
        return 0;
    *score = f->score;
    return 1;
}

void model_each(const struct model *m,
                void (*each)(void *ctx, const char *key, const char *member, int64_t score),
                void *ctx)
{
    for (size_t i = 0; i < m->count; i++)
        if (!m->objects[i].is_hash)
            for (size_t f = 0; f < m->objects[i].count; f++)
                each(ctx, m->objects[i].key, m->objects[i].fields[f].name,
                     m->objects[i].fields[f].score);
}

int64_t model_marker(const struct model *m, const char *key, const char *field)
{
    const struct field *f = find_field(lookup(m, key), field);
    return f && f->value ? strtoll(f->value, NULL, 10) : -1;
}
