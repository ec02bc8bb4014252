/* Merged tops of split boards; see tops.h. */
#include "tops.h"
#include "apply.h"
#include "clock.h"
#include "log.h"
#include "slot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAX 1024

static const double staleness_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30};

/* Records of a partition waiting for a window's merged top. */
struct gate {
    uint32_t topic; /* in lb_tops.topics */
    int32_t partition;
    int64_t offset; /* the first */
};

/* A noted (board, window); 'since' 0 once its top is current. */
struct window {
    char *board, *name;
    size_t blen, nlen;
    const struct lb_profile *profile;
    int64_t since;      /* the oldest change not yet in the merged top */
    int64_t due;        /* when to refresh it */
    int64_t touched;    /* the last note: windows idle long are forgotten */
    struct gate *gates; /* the records the merged top does not show yet */
    uint32_t ngates, gates_cap;
    /* why its last refresh did not write the top: redis (failed), board
     * (refused: an operator must fix a key or the ACL), top (another
     * refresher's lease); none (not tried yet, or a newer snapshot won) */
    enum lb_hold_reason failed;
};

struct lb_tops {
    struct lb_tops_options o;
    struct lb_cluster *cluster;
    char holder[128];
    struct window *windows;
    size_t count, cap;
    uint32_t *index; /* open addressing: 1 + a window's place, 0 empty */
    size_t index_cap;
    size_t pending;
    size_t cursor; /* where a step starts: after the window the last one stopped at */
    char **topics; /* the gates' topics */
    uint32_t ntopics;
    struct lb_tops_stats stats;
    struct lb_ratelimit failed_said;
};

struct lb_tops *lb_tops_new(const struct lb_tops_options *options)
{
    struct lb_tops *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->o = *options;
    if (!(t->cluster = lb_cluster_new(options->cluster))) {
        free(t);
        return NULL;
    }
    lb_lease_holder(t->holder, sizeof(t->holder));
    lb_histogram_init(&t->stats.staleness, staleness_bounds,
                      sizeof(staleness_bounds) / sizeof(staleness_bounds[0]));
    return t;
}

void lb_tops_free(struct lb_tops *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->count; i++) {
        free(t->windows[i].board);
        free(t->windows[i].name);
        free(t->windows[i].gates);
    }
    free(t->windows);
    for (uint32_t i = 0; i < t->ntopics; i++)
        free(t->topics[i]);
    free(t->topics);
    free(t->index);
    lb_cluster_free(t->cluster);
    free(t);
}

static uint64_t hash_of(const char *board, size_t blen, const char *name, size_t nlen)
{
    return lb_fnv1a(lb_fnv1a(LB_FNV1A_BASIS, board, blen + 1 /* its NUL */), name, nlen);
}

/* The index's slot for (board, name): its window's, or the empty one where
 * it would go. */
static uint32_t *index_slot(struct lb_tops *t, const char *board, size_t blen, const char *name,
                            size_t nlen)
{
    size_t mask = t->index_cap - 1;
    for (size_t pos = hash_of(board, blen, name, nlen) & mask;; pos = (pos + 1) & mask) {
        uint32_t *slot = &t->index[pos];
        if (!*slot)
            return slot;
        const struct window *w = &t->windows[*slot - 1];
        if (w->blen == blen && w->nlen == nlen && memcmp(w->board, board, blen) == 0 &&
            memcmp(w->name, name, nlen) == 0)
            return slot;
    }
}

/* Rebuilds the index at 'cap' slots, forgetting windows current and idle
 * for ten minutes. */
static int reindex(struct lb_tops *t, size_t cap, int64_t now_ms)
{
    uint32_t *index = calloc(cap, sizeof(*index));
    if (!index)
        return -1;
    free(t->index);
    t->index = index;
    t->index_cap = cap;
    size_t kept = 0;
    for (size_t i = 0; i < t->count; i++) {
        struct window *w = &t->windows[i];
        if (!w->since && now_ms - w->touched > 600000) {
            free(w->board);
            free(w->name);
            free(w->gates);
            continue;
        }
        t->windows[kept] = *w;
        *index_slot(t, w->board, w->blen, w->name, w->nlen) = (uint32_t)++kept;
    }
    t->count = kept;
    return 0;
}

/* The index of 'topic' in t->topics, added if new; -1 out of memory. */
static int64_t topic_index(struct lb_tops *t, const char *topic)
{
    for (uint32_t i = 0; i < t->ntopics; i++)
        if (strcmp(t->topics[i], topic) == 0)
            return i;
    char **more = realloc(t->topics, (t->ntopics + 1) * sizeof(*more));
    if (!more)
        return -1;
    t->topics = more;
    if (!(t->topics[t->ntopics] = strdup(topic)))
        return -1;
    return t->ntopics++;
}

/* Adds 'g' to the window's gates: a partition's lowest offset. */
static int gate_add(struct lb_tops *t, struct window *w, const struct lb_tops_gate *g)
{
    int64_t topic = topic_index(t, g->topic);
    if (topic < 0)
        return -1;
    for (uint32_t i = 0; i < w->ngates; i++) {
        struct gate *have = &w->gates[i];
        if (have->topic == topic && have->partition == g->partition) {
            if (g->offset < have->offset)
                have->offset = g->offset;
            return 0;
        }
    }
    if (w->ngates == w->gates_cap) {
        uint32_t cap = w->gates_cap ? 2 * w->gates_cap : 4;
        struct gate *more = realloc(w->gates, cap * sizeof(*more));
        if (!more)
            return -1;
        w->gates = more;
        w->gates_cap = cap;
    }
    w->gates[w->ngates++] = (struct gate){(uint32_t)topic, g->partition, g->offset};
    return 0;
}

int lb_tops_note(struct lb_tops *t, struct lb_str board, const struct lb_profile *profile,
                 struct lb_str name, const struct lb_tops_gate *gates, size_t ngates,
                 int64_t now_ms)
{
    if ((t->count + 1) * 2 > t->index_cap &&
        reindex(t, t->index_cap ? t->index_cap * 2 : 64, now_ms) != 0)
        return -1;
    uint32_t *slot = index_slot(t, board.ptr, board.len, name.ptr, name.len);
    if (!*slot) {
        if (t->count == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 32;
            struct window *more = realloc(t->windows, cap * sizeof(*more));
            if (!more)
                return -1;
            t->windows = more;
            t->cap = cap;
        }
        struct window *w = &t->windows[t->count];
        *w = (struct window){.board = malloc(board.len + 1),
                             .name = malloc(name.len + 1),
                             .blen = board.len,
                             .nlen = name.len,
                             .profile = profile};
        if (!w->board || !w->name) {
            free(w->board);
            free(w->name);
            return -1;
        }
        memcpy(w->board, board.ptr, board.len);
        w->board[board.len] = '\0';
        memcpy(w->name, name.ptr, name.len);
        w->name[name.len] = '\0';
        *slot = (uint32_t)++t->count;
    }
    struct window *w = &t->windows[*slot - 1];
    w->touched = now_ms;
    if (!w->since) {
        w->since = now_ms;
        w->due = now_ms + profile->staleness_ms / 4;
        t->pending++;
    }
    for (size_t i = 0; i < ngates; i++)
        if (gate_add(t, w, &gates[i]) != 0)
            return -1;
    return 0;
}

/* One call of the apply script's "T" step on the board's own tag. */
static redisReply *top_step(struct lb_tops *t, const struct window *w, const char *step,
                            const char **extra, const size_t *extralen, size_t nextra)
{
    struct lb_str id = {w->board, (uint32_t)w->blen};
    char state[KEY_MAX], top[KEY_MAX], lease[24];
    size_t slen = lb_board_key(t->o.key_prefix, id, LB_TOPS_KEY, state, sizeof(state));
    size_t tlen = lb_top_key(t->o.key_prefix, id, (struct lb_str){w->name, (uint32_t)w->nlen}, top,
                             sizeof(top));
    size_t argc = 11 + nextra;
    const char **argv = malloc(argc * sizeof(*argv));
    size_t *argvlen = malloc(argc * sizeof(*argvlen));
    redisReply *reply = NULL;
    if (argv && argvlen && slen && tlen) {
        size_t n = 0;
#define ARG(s, l) (argv[n] = (s), argvlen[n++] = (l))
        ARG("EVALSHA", 7);
        ARG(lb_apply_script_sha(), 40);
        ARG("2", 1);
        ARG(state, slen);
        ARG(top, tlen);
        ARG(LB_APPLY_VERSION_TEXT, sizeof(LB_APPLY_VERSION_TEXT) - 1);
        ARG("T", 1);
        ARG(step, strlen(step));
        ARG(t->holder, strlen(t->holder));
        ARG(lease, (size_t)snprintf(lease, sizeof(lease), "%d", LB_TOPS_LEASE_MS));
        ARG(w->name, w->nlen);
        for (size_t i = 0; i < nextra; i++)
            ARG(extra[i], extralen[i]);
#undef ARG
        reply = lb_cluster_command(t->cluster, lb_key_slot(state, slen), (int)n, argv, argvlen);
    }
    free(argv);
    free(argvlen);
    if (reply && (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
                  reply->element[0]->type != REDIS_REPLY_STRING)) {
        lb_log_every(&t->failed_said, 10000, LB_LOG_WARN, "tops",
                     "merged top of board '%s' window '%s': unexpected answer to '%s'%s%s",
                     w->board, w->name, step, reply->type == REDIS_REPLY_ERROR ? ": " : "",
                     reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        freeReplyObject(reply);
        return NULL;
    }
    if (!reply)
        lb_log_every(&t->failed_said, 10000, LB_LOG_WARN, "tops",
                     "merged top of board '%s' window '%s': %s; trying again", w->board, w->name,
                     lb_cluster_error(t->cluster));
    return reply;
}

struct entry {
    const char *member, *score;
    size_t mlen, slen;
    double value;
};

/* A sorted set's order, low to high: by composite, equal ones by member
 * bytes (a desc board reads it from the high end, as ZREVRANGE does). */
static int entry_cmp(const void *pa, const void *pb)
{
    const struct entry *a = pa, *b = pb;
    int c = a->value < b->value ? -1 : a->value > b->value;
    if (!c) {
        size_t n = a->mlen < b->mlen ? a->mlen : b->mlen;
        c = memcmp(a->member, b->member, n);
        if (!c)
            c = a->mlen < b->mlen ? -1 : a->mlen > b->mlen;
    }
    return c;
}

static int is_answer(const redisReply *reply, const char *word)
{
    return strcmp(reply->element[0]->str, word) == 0;
}

/* An answer of the script other than the step's own: a key of the wrong
 * type ({"wrongtype", key}) or a command the ACL user may not run
 * ({"noperm", command}), which an operator must fix. Logged; -2. */
static int refused(struct lb_tops *t, const struct window *w, const redisReply *reply)
{
    const redisReply *what = reply->elements > 1 ? reply->element[1] : NULL;
    lb_log_every(&t->failed_said, 10000, LB_LOG_WARN, "tops",
                 "merged top of board '%s' window '%s': the script answered %s %s; trying again "
                 "(an operator must fix the key or the ACL rule)",
                 w->board, w->name, reply->element[0]->str,
                 what && what->type == REDIS_REPLY_STRING ? what->str : "");
    return -2;
}

/* A shard read that failed: Redis's error as it said it (a NOPERM names
 * the command), or the client's. -2 when an operator must act (WRONGTYPE,
 * NOPERM), -1 when Redis may recover by itself. */
static int said_refused(struct lb_tops *t, const struct window *w, const char *command,
                        const redisReply *reply)
{
    lb_log_every(&t->failed_said, 10000, LB_LOG_WARN, "tops",
                 "merged top of board '%s' window '%s': %s of a shard failed: %s; trying again",
                 w->board, w->name, command,
                 reply && reply->type == REDIS_REPLY_ERROR ? reply->str
                 : reply                                   ? "an unexpected reply"
                                                           : lb_cluster_error(t->cluster));
    enum lb_redis_error class = !reply ? lb_cluster_error_class(t->cluster)
                                : reply->type == REDIS_REPLY_ERROR ? lb_redis_classify(reply->str)
                                                                   : LB_REDIS_RETRY;
    return class == LB_REDIS_FIX ? -2 : -1;
}

/* Reads the shards of 'w', merges them and writes the merged top under
 * generation 'gen'. 0 written, 1 stale, -1 failed, -2 refused (an
 * operator's). */
static int read_and_write(struct lb_tops *t, const struct window *w, const char *gen)
{
    const struct lb_profile *profile = w->profile;
    uint32_t shards = (uint32_t)profile->shards;
    int desc = profile->scoring.order == LB_ORDER_DESC;
    redisReply **tops = calloc(shards, sizeof(*tops));
    struct entry *all = NULL;
    size_t nall = 0;
    long long expire_at = -2; /* PEXPIRETIME: -2 no key, -1 none, else ms */
    int rc = -1;
    if (!tops)
        return -1;
    char stop[24];
    snprintf(stop, sizeof(stop), "%lld", (long long)profile->top - 1);
    for (uint32_t i = 0; i < shards; i++) {
        char tag[LB_TAG_MAX], key[KEY_MAX];
        size_t tlen = lb_shard_tag(w->board, w->blen, shards, i, tag, sizeof(tag));
        size_t klen = lb_board_key(t->o.key_prefix, (struct lb_str){tag, (uint32_t)tlen}, w->name,
                                   key, sizeof(key));
        uint16_t slot = lb_key_slot(key, klen);
        /* the expiry first: a key that goes between the two reads then
         * adds no entries, never entries without an expiry */
        const char *pt[] = {"PEXPIRETIME", key};
        size_t pl[] = {11, klen};
        redisReply *r = lb_cluster_command(t->cluster, slot, 2, pt, pl);
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            rc = said_refused(t, w, "PEXPIRETIME (Redis 7.0 or later)", r);
            if (r)
                freeReplyObject(r);
            goto out;
        }
        if (r->integer == -1 || expire_at == -1)
            expire_at = -1;
        else if (r->integer > expire_at)
            expire_at = r->integer;
        freeReplyObject(r);
        const char *zr[] = {"ZRANGE", key, "0", stop, desc ? "REV" : "WITHSCORES", "WITHSCORES"};
        size_t zl[] = {6, klen, 1, strlen(stop), desc ? 3 : 10, 10};
        if (!(tops[i] = lb_cluster_command(t->cluster, slot, desc ? 6 : 5, zr, zl)) ||
            tops[i]->type != REDIS_REPLY_ARRAY) {
            rc = said_refused(t, w, "ZRANGE", tops[i]);
            goto out;
        }
        nall += tops[i]->elements / 2;
    }
    all = calloc(nall ? nall : 1, sizeof(*all));
    if (!all)
        goto out;
    nall = 0;
    for (uint32_t i = 0; i < shards; i++)
        for (size_t e = 0; e + 1 < tops[i]->elements; e += 2) {
            const redisReply *m = tops[i]->element[e], *s = tops[i]->element[e + 1];
            all[nall++] = (struct entry){m->str, s->str, m->len, s->len, strtod(s->str, NULL)};
        }
    qsort(all, nall, sizeof(*all), entry_cmp);
    struct entry *best = all;
    if (nall > (size_t)profile->top) {
        if (desc)
            best += nall - (size_t)profile->top;
        nall = (size_t)profile->top;
    }
    size_t nextra = 2 + 2 * nall;
    const char **extra = malloc(nextra * sizeof(*extra));
    size_t *extralen = malloc(nextra * sizeof(*extralen));
    char at[24]; /* expire_at as the script takes it */
    if (extra && extralen) {
        extra[0] = gen;
        extralen[0] = strlen(gen);
        extra[1] = at;
        extralen[1] = (size_t)snprintf(at, sizeof(at), "%lld", expire_at);
        for (size_t i = 0; i < nall; i++) {
            extra[2 + 2 * i] = best[i].score;
            extralen[2 + 2 * i] = best[i].slen;
            extra[3 + 2 * i] = best[i].member;
            extralen[3 + 2 * i] = best[i].mlen;
        }
        redisReply *reply = top_step(t, w, "write", extra, extralen, nextra);
        if (reply) {
            rc = is_answer(reply, "ok") ? 0 : is_answer(reply, "stale") ? 1 : refused(t, w, reply);
            freeReplyObject(reply);
        }
    }
    free(extra);
    free(extralen);
out:
    if (rc < 0)
        t->stats.failures++;
    for (uint32_t i = 0; i < shards; i++)
        if (tops[i])
            freeReplyObject(tops[i]);
    free(tops);
    free(all);
    return rc;
}

/* One refresh of 'w': 0 its merged top is current, 1 not yet (busy, stale
 * or failed: tried again 100 ms after the call). */
static int refresh(struct lb_tops *t, struct window *w)
{
    int64_t since = w->since;
    redisReply *reply = top_step(t, w, "take", NULL, NULL, 0);
    if (!reply) {
        t->stats.failures++;
        w->failed = LB_HOLD_REDIS;
        w->due = lb_monotonic_ms() + LB_TOPS_RETRY_MS; /* from after the call */
        return 1;
    }
    /* the refresh is synchronous: no change is noted while it reads */
    int rc = 1;
    w->failed = LB_HOLD_NONE;
    if (is_answer(reply, "go") && reply->elements > 1) {
        rc = read_and_write(t, w, reply->element[1]->str);
        if (rc < 0)
            w->failed = rc == -2 ? LB_HOLD_BOARD : LB_HOLD_REDIS;
        if (rc == 0) {
            t->stats.refreshed++;
            lb_histogram_observe(&t->stats.staleness, (double)(lb_monotonic_ms() - since) / 1000.0);
            w->since = 0;
            w->ngates = 0; /* what they changed is in the merged top */
        }
        t->stats.stale += rc == 1;
    } else if (is_answer(reply, "busy")) {
        t->stats.busy++;
        w->failed = LB_HOLD_TOP;
    } else {
        t->stats.failures++;
        w->failed = LB_HOLD_BOARD;
        refused(t, w, reply);
    }
    freeReplyObject(reply);
    if (rc)
        w->due = lb_monotonic_ms() + LB_TOPS_RETRY_MS; /* from after the call */
    return rc != 0;
}

/* Refreshes the windows due ('all': every one noted). A step stops at the
 * first window whose Redis failed (a node down or silent can take a
 * command timeout a call): the others due stay due, and the next step
 * starts after it, so that one node gone holds the pod's loop a call a
 * step, not a call for each of its windows, and windows of other nodes
 * still take their turn. */
static size_t run(struct lb_tops *t, int64_t now_ms, int all)
{
    size_t n = t->count, from = t->cursor < n ? t->cursor : 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = (from + k) % n;
        struct window *w = &t->windows[i];
        if (!w->since || (!all && w->due > now_ms))
            continue;
        if (refresh(t, w) == 0) {
            t->pending--;
        } else if (!all && w->failed == LB_HOLD_REDIS) {
            t->cursor = i + 1;
            break;
        }
    }
    return t->pending;
}

size_t lb_tops_step(struct lb_tops *t, int64_t now_ms)
{
    return t->pending ? run(t, now_ms, 0) : 0;
}

size_t lb_tops_drain(struct lb_tops *t, int64_t deadline_ms)
{
    while (t->pending && lb_monotonic_ms() < deadline_ms)
        if (run(t, lb_monotonic_ms(), 1))
            usleep(LB_TOPS_RETRY_MS * 1000);
    return t->pending;
}

int lb_tops_note_known(struct lb_tops *t, struct lb_str board, const struct lb_profile *profile,
                       int64_t now_ms)
{
    char state[KEY_MAX];
    size_t slen = lb_board_key(t->o.key_prefix, board, LB_TOPS_KEY, state, sizeof(state));
    const char *argv[] = {"HKEYS", state};
    size_t argvlen[] = {5, slen};
    redisReply *reply = lb_cluster_command(t->cluster, lb_key_slot(state, slen), 2, argv, argvlen);
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        if (reply)
            freeReplyObject(reply);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < reply->elements && rc == 0; i++) {
        const redisReply *f = reply->element[i];
        if (f->type == REDIS_REPLY_STRING && f->len > 2 && memcmp(f->str, "g:", 2) == 0)
            rc = lb_tops_note(t, board, profile, (struct lb_str){f->str + 2, (uint32_t)f->len - 2},
                              NULL, 0, now_ms);
    }
    freeReplyObject(reply);
    return rc;
}

size_t lb_tops_pending(const struct lb_tops *t)
{
    return t->pending;
}

int64_t lb_tops_floor(const struct lb_tops *t, const char *topic, int32_t partition,
                      enum lb_hold_reason *why)
{
    uint32_t k = 0;
    while (k < t->ntopics && strcmp(t->topics[k], topic) != 0)
        k++;
    int64_t floor = -1, now = lb_monotonic_ms();
    *why = LB_HOLD_NONE;
    for (size_t i = 0; i < t->count && k < t->ntopics; i++) {
        const struct window *w = &t->windows[i];
        for (uint32_t g = 0; g < w->ngates; g++) {
            if (w->gates[g].topic != k || w->gates[g].partition != partition)
                continue;
            if (floor < 0 || w->gates[g].offset < floor)
                floor = w->gates[g].offset;
            /* past its staleness: why its last refresh did not write it
             * (a failure first) */
            if (w->failed && now - w->since > w->profile->staleness_ms &&
                (*why == LB_HOLD_NONE || *why == LB_HOLD_TOP))
                *why = w->failed;
        }
    }
    return floor;
}

int64_t lb_tops_next_due(const struct lb_tops *t)
{
    int64_t due = INT64_MAX;
    for (size_t i = 0; i < t->count && t->pending; i++)
        if (t->windows[i].since && t->windows[i].due < due)
            due = t->windows[i].due;
    return due;
}

const struct lb_tops_stats *lb_tops_stats(const struct lb_tops *t)
{
    return &t->stats;
}
