/* Property tests of the leaderboard semantics: random event sequences
 * (seeded, many) through the pure planner and the apply requests into a
 * real redis-server running the real apply script, delivered the way Kafka and a crashing,
 * rebalancing consumer deliver them (random batch boundaries, redelivery
 * after crashes, stale batches from a zombie pod), compared with a reference
 * computed here from the events, each applied exactly once. Every
 * aggregation x order x tie-break. Some events are sent again as records of
 * their own (a producer's retry: the same event_id, some with another
 * payload); the reference counts each event_id once on boards that dedupe
 * and every record on the one kind that does not (best without
 * retractions, where a retry of the same payload changes nothing).
 *
 * The reference takes its windows from the C library's calendar and its
 * composites from the rule in ARCHITECTURE.md; it shares no code with the
 * planner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "apply.h"
#include "config.h"
#include "plan_event.h"
#include "planner.h"
#include "redis_server.h"
#include "slot.h"

/* requests under "lb:", latest boards free to keep ~newest */
static const struct lb_apply_options apply_lb = {"lb:", 0};

#define EPOCH   INT64_C(1735689600000) /* 2025-01-01, the default */
#define HORIZON INT64_C(2745532800000) /* 2057-01-01 */
#define MAY1    INT64_C(1777593600000) /* 2026-05-01 */

/* best, latest, sum, and best without retractions (a transaction, no script) */
static const char modes[] = "blsf";
static const char orders[] = "da"; /* desc, asc */
static const char ties[] = "eln";  /* earliest, latest, none */
static const char *const mode_names[] = {"best", "latest", "sum", "best"};
static const char *const order_names[] = {"desc", "asc"};
static const char *const tie_names[] = {"earliest", "latest", "none"};

/* One profile per combination, matched by a board prefix like "l-a-e-";
 * with 'results', the calendar windows publish final standings, so they
 * close (README "Final standings"). */
static char *config_text(int results)
{
    static char text[32768];
    const char *r = results ? ", results: {top: all}" : "";
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "kafka: {brokers: b, topics: [t]}\n"
                                "input: {schemas: {1: s.avsc}}\n"
                                "redis: {nodes: [a:1]}\n"
                                "%s"
                                "profiles:\n",
                                results ? "results: {topic: r, schema_id: 3}\n" : "");
    for (int m = 0; m < 4; m++)
        for (int o = 0; o < 2; o++)
            for (int t = 0; t < 3; t++)
                n += (size_t)snprintf(
                    text + n, sizeof(text) - n,
                    "  - name: %c%c%c\n"
                    "    match: \"%c-%c-%c-*\"\n"
                    "    aggregation: %s\n"
                    "    order: %s\n"
                    "    tie_break: %s\n"
                    "    retractions: %s\n"
                    "%s"
                    "    windows:\n"
                    "      alltime: {}\n"
                    "      daily: {ttl: 0s%s}\n"
                    "      weekly: {ttl: 0s%s}\n"
                    "      monthly: {ttl: 0s%s}\n"
                    "      custom: [{dim: patch}]\n",
                    modes[m], orders[o], ties[t], modes[m], orders[o], ties[t], mode_names[m],
                    order_names[o], tie_names[t], modes[m] == 'f' ? "reject" : "allow",
                    modes[m] == 'f' ? "" : "    dedupe: {window: 30d}\n", r, r, r);
    return text;
}

/* ---- events ------------------------------------------------------------------------ */

#define PARTITIONS 3
#define MAX_EVENTS 400

struct event {
    char id[16];
    char board[32];
    char player[16];
    char patch[8]; /* "" when the event has no patch dim */
    int64_t score, ts;
    enum lb_op op;
    int32_t partition;
    int64_t offset;
};

struct sequence {
    struct event events[MAX_EVENTS];
    size_t count;
    /* per partition: the events in offset order */
    size_t order[PARTITIONS][MAX_EVENTS];
    size_t length[PARTITIONS];
};

static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static unsigned pick(uint64_t *state, unsigned n)
{
    return (unsigned)(next_random(state) % n);
}

/* The corpus: events on 10 boards of random profiles, 7 players, 15% of
 * them retractions ('retract' percent when not 0), retries among them.
 * Each player's events come from one partition (the player is the message
 * key), or with 'spread' from any (producers that do not key by player):
 * then without retractions, and at distinct times, which order a player's
 * events whatever partition they come from. */
static void generate(uint64_t seed, size_t count, int spread, unsigned retract,
                     struct sequence *seq)
{
    uint64_t rng = seed;
    char boards[10][32];
    for (int b = 0; b < 10; b++)
        snprintf(boards[b], sizeof(boards[b]), "%c-%c-%c-%d", modes[pick(&rng, 4)],
                 orders[pick(&rng, 2)], ties[pick(&rng, 3)], b);
    memset(seq, 0, sizeof(*seq));
    seq->count = count;
    for (size_t i = 0; i < count; i++) {
        struct event *e = &seq->events[i];
        if (i > 0 && pick(&rng, 100) < 15) {
            /* a retry: an earlier event again (same key, so same partition),
             * a third of them with another score (a conflict) */
            *e = seq->events[pick(&rng, (unsigned)i)];
            if (pick(&rng, 3) == 0)
                e->score = (e->score + 1 + (int64_t)pick(&rng, 30)) % 40;
            e->offset = (int64_t)seq->length[e->partition];
            seq->order[e->partition][seq->length[e->partition]++] = i;
            continue;
        }
        snprintf(e->id, sizeof(e->id), "e%u", (unsigned)i);
        unsigned player = pick(&rng, 7);
        snprintf(e->board, sizeof(e->board), "%s", boards[pick(&rng, 10)]);
        snprintf(e->player, sizeof(e->player), "p%u", player);
        e->partition = spread ? (int32_t)pick(&rng, PARTITIONS) : (int32_t)(player % PARTITIONS);
        unsigned retracted = pick(&rng, 100) < (retract ? retract : 15);
        e->op = retracted && !spread ? LB_OP_RETRACT : LB_OP_SUBMIT;
        e->score = (int64_t)pick(&rng, 40); /* few values: equal scores happen */
        /* 9 days from 2026-04-27, on whole minutes: a month and an ISO week
         * end among them; equal times happen too (but spread) */
        e->ts = MAY1 - 4 * INT64_C(86400000) + (int64_t)pick(&rng, 9 * 24 * 60) * 60000 +
                (spread ? (int64_t)i : (int64_t)pick(&rng, 3));
        static const char *const patches[] = {"", "1.1", "1.2"};
        snprintf(e->patch, sizeof(e->patch), "%s", patches[pick(&rng, 3)]);
        e->offset = (int64_t)seq->length[e->partition];
        seq->order[e->partition][seq->length[e->partition]++] = i;
    }
}

/* ---- the reference ---------------------------------------------------------------- */

struct cell {
    char key[128];
    char member[16];
    char mode, order, tie; /* the board's profile */
    int present;
    int64_t score, ts, offset; /* best/latest: score, (ts, offset); sum: total, max ts */
};

/* A window that closed (its final standings claimed) while the sequence
 * was delivered: events of its board from 'from' on, in each partition,
 * come too late for it (its close offsets: the board's markers + 1). */
struct closing {
    char board[32];
    char window[32]; /* "daily:2026-04-27" */
    int64_t from[PARTITIONS];
};

#define MAX_CLOSINGS 128

struct reference {
    struct cell cells[8192];
    size_t count;
    char ids[MAX_EVENTS][16]; /* event_ids counted, on boards that dedupe */
    size_t nids;
    struct closing closings[MAX_CLOSINGS];
    size_t nclosings;
};

/* Whether key 'key' of e's board had closed before e. */
static int too_late(const struct reference *ref, const struct event *e, const char *key)
{
    const char *window = strstr(key, "}:") + 2;
    for (size_t i = 0; i < ref->nclosings; i++) {
        const struct closing *c = &ref->closings[i];
        if (strcmp(c->board, e->board) == 0 && strcmp(c->window, window) == 0 &&
            e->offset >= c->from[e->partition])
            return 1;
    }
    return 0;
}

static unsigned tie_bits(char tie)
{
    if (tie == 'n')
        return 0;
    int64_t ticks = (HORIZON - EPOCH) / 1000;
    unsigned bits = 0;
    while ((INT64_C(1) << bits) < ticks)
        bits++;
    return bits;
}

static int64_t tie_of(char order, char tie, int64_t ts)
{
    unsigned bits = tie_bits(tie);
    if (!bits)
        return 0;
    int64_t tick = (ts - EPOCH) / 1000;
    int larger_later = (order == 'd') == (tie == 'l');
    return larger_later ? tick : (INT64_C(1) << bits) - 1 - tick;
}

static int64_t composite_of(char order, char tie, int64_t score, int64_t ts)
{
    return score * (INT64_C(1) << tie_bits(tie)) + tie_of(order, tie, ts);
}

static struct cell *cell(struct reference *ref, const struct event *e, const char *key,
                         const char *member)
{
    for (size_t i = 0; i < ref->count; i++)
        if (strcmp(ref->cells[i].key, key) == 0 && strcmp(ref->cells[i].member, member) == 0)
            return &ref->cells[i];
    struct cell *c = &ref->cells[ref->count++];
    memset(c, 0, sizeof(*c));
    snprintf(c->key, sizeof(c->key), "%.*s", (int)sizeof(c->key) - 1, key);
    snprintf(c->member, sizeof(c->member), "%s", member);
    c->mode = e->board[0];
    c->order = e->board[2];
    c->tie = e->board[4];
    return c;
}

static void apply_reference(struct reference *ref, const struct event *e)
{
    char mode = e->board[0], order = e->board[2], tie = e->board[4];
    if (mode == 'f' && e->op == LB_OP_RETRACT)
        return; /* refused by the profile: dead-lettered */
    if (mode != 'f') {
        /* dedupe: the first record of an event_id counts (its retries are
         * later in the same partition) */
        for (size_t i = 0; i < ref->nids; i++)
            if (strcmp(ref->ids[i], e->id) == 0)
                return;
        assert_true(ref->nids < MAX_EVENTS);
        snprintf(ref->ids[ref->nids++], sizeof(ref->ids[0]), "%s", e->id);
    }
    char keys[5][96];
    int nkeys = 0;
    time_t secs = (time_t)(e->ts / 1000);
    struct tm tm;
    char label[32];
    gmtime_r(&secs, &tm);
    snprintf(keys[nkeys++], sizeof(keys[0]), "lb:{%s}:alltime", e->board);
    strftime(label, sizeof(label), "%Y-%m-%d", &tm);
    snprintf(keys[nkeys++], sizeof(keys[0]), "lb:{%s}:daily:%s", e->board, label);
    strftime(label, sizeof(label), "%G-W%V", &tm);
    snprintf(keys[nkeys++], sizeof(keys[0]), "lb:{%s}:weekly:%s", e->board, label);
    strftime(label, sizeof(label), "%Y-%m", &tm);
    snprintf(keys[nkeys++], sizeof(keys[0]), "lb:{%s}:monthly:%s", e->board, label);
    if (e->patch[0])
        snprintf(keys[nkeys++], sizeof(keys[0]), "lb:{%s}:patch:%s", e->board, e->patch);
    for (int k = 0; k < nkeys; k++) {
        if (too_late(ref, e, keys[k]))
            continue; /* its final standings stand */
        struct cell *c = cell(ref, e, keys[k], e->player);
        if (e->op == LB_OP_RETRACT) {
            c->present = 0;
            continue;
        }
        if (mode == 'b' || mode == 'f') {
            int64_t v = composite_of(order, tie, e->score, e->ts);
            if (!c->present || (order == 'd' ? v > c->score : v < c->score))
                c->score = v;
        } else if (mode == 'l') {
            if (!c->present || e->ts > c->ts || (e->ts == c->ts && e->offset > c->offset)) {
                c->score = composite_of(order, tie, e->score, e->ts);
                c->ts = e->ts;
                c->offset = e->offset;
            }
        } else {
            c->score = c->present ? c->score + e->score : e->score;
            c->ts = c->present && c->ts > e->ts ? c->ts : e->ts;
        }
        c->present = 1;
    }
}

static int64_t reference_value(const struct cell *c)
{
    if (c->mode == 's') /* the total, tied by when it was reached */
        return c->score * (INT64_C(1) << tie_bits(c->tie)) + tie_of(c->order, c->tie, c->ts);
    return c->score;
}

/* ---- driving the planner into a real redis-server ---------------------------------- */

/* What an answer said to leave out: a "partial" answer's marker (events
 * at or below it were applied), or one event a "duplicate" answer named. */
struct skip {
    char field[128];
    int64_t marker;
    int exact; /* a duplicate: the event at offset 'marker' */
};

#define MAX_SKIPS 128

struct harness {
    struct lb_config *config;
    struct lb_plan *plan;
    struct lb_apply_batch batch;
    struct redis_server *redis;
    char overflow[4][128]; /* the members of the last "overflow" answer */
    size_t noverflow;
    size_t conflicts; /* of the last "duplicate" answer */
    char noperm[64];  /* the command of the last "noperm" answer */
    /* latest boards' stamps: 0 free to keep ~newest; 1 per-window stamps
     * only (replay --window); 2 per-window for the first half of a
     * sequence, then free (boards of the previous release, upgraded); 3
     * free, then per-window (~newest kept by requests that do not start it) */
    int stamps;
    int window_stamps; /* what the requests say now */
    int spread;        /* the corpus: see generate() */
    unsigned retract;
    int closes; /* calendar windows close while the sequence is delivered */
};

/* The harness of configuration 'text' on what Redis holds (a pod restarted
 * with new settings). */
static void harness_load(struct harness *h, const char *text, struct redis_server *redis)
{
    char err[1024];
    memset(h, 0, sizeof(*h));
    if (lb_config_load_string("t.yaml", text, strlen(text), &h->config, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    h->plan = lb_plan_new(&(struct lb_plan_options){h->config->profiles, h->config->nprofiles});
    assert_non_null(h->plan);
    h->redis = redis;
}

static void harness_open(struct harness *h, const char *text, struct redis_server *redis)
{
    harness_load(h, text, redis);
    redisReply *r = redis_server_command(redis, "FLUSHALL");
    freeReplyObject(r);
}

static void harness_close(struct harness *h)
{
    lb_apply_batch_free(&h->batch);
    lb_plan_free(h->plan);
    lb_config_free(h->config);
}

static struct lb_event as_event(const struct event *e, struct lb_dim *dim)
{
    struct lb_event ev = {.event_id = {e->id, (uint32_t)strlen(e->id)},
                          .board = {e->board, (uint32_t)strlen(e->board)},
                          .player = {e->player, (uint32_t)strlen(e->player)},
                          .score = e->score,
                          .ts_ms = e->ts,
                          .op = e->op};
    if (e->patch[0]) {
        *dim = (struct lb_dim){{"patch", 5}, {e->patch, (uint32_t)strlen(e->patch)}};
        ev.dims = dim;
        ev.ndims = 1;
    }
    return ev;
}

/* Plans 'batch' (indices into seq) for board 'only' (every board when
 * NULL), leaving out events of a partition at or below its 'skip' marker,
 * and encodes the requests. */
static void plan(struct harness *h, const struct sequence *seq, const size_t *batch, size_t n,
                 const char *only, const struct skip *skip, size_t nskip)
{
    lb_plan_reset(h->plan);
    for (size_t i = 0; i < n; i++) {
        const struct event *e = &seq->events[batch[i]];
        char field[64];
        int excluded = 0;
        uint32_t txn;
        if (only && strcmp(e->board, only) != 0)
            continue;
        snprintf(field, sizeof(field), "t:%d", e->partition);
        for (size_t s = 0; s < nskip; s++)
            excluded |= strcmp(skip[s].field, field) == 0 &&
                        (skip[s].exact ? e->offset == skip[s].marker : e->offset <= skip[s].marker);
        if (excluded)
            continue;
        struct lb_dim dim;
        struct lb_event ev = as_event(e, &dim);
        struct lb_position pos = {"t", e->partition, e->offset};
        int refused = e->board[0] == 'f' && e->op == LB_OP_RETRACT;
        enum lb_reject reason = LB_REJECT__COUNT;
        /* a retry within the batch is left out by the planner itself */
        assert_true(lb_plan_add(h->plan, &ev, &pos, MAY1, &txn, &reason) >= 0);
        assert_int_equal(reason, refused ? LB_REJECT_RETRACTION : LB_ACCEPT);
    }
    assert_int_equal(
        lb_apply_encode(&h->batch, h->plan, &(struct lb_apply_options){"lb:", h->window_stamps}),
        0);
}

/* Sends request 'i' of the batch to the server and reads the script's
 * answer: the markers of a "partial" and the events of a "duplicate" added
 * to 'skip', the members of an "overflow" into h->overflow. */
static enum lb_apply_status apply(struct harness *h, size_t i, struct skip *skip, size_t *nskip)
{
    const struct lb_apply_request *req = &h->batch.requests[i];
    redisReply *r = redis_server_send(h->redis, h->batch.bytes.data + req->offset, req->len,
                                      req->is_txn ? req->ncommands + 2 : 1);
    struct lb_apply_answer a;
    enum lb_apply_status status = lb_apply_parse(r, &a);
    const char *first, *second;
    if (status == LB_APPLY_UNKNOWN)
        fail_msg("unexpected answer from the script: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "(not an error)");
    if (status == LB_APPLY_NOPERM)
        snprintf(h->noperm, sizeof(h->noperm), "%s", a.key);
    if (status == LB_APPLY_PARTIAL)
        for (size_t k = 0; lb_apply_pair(&a, k, &first, &second) == 0; k++) {
            assert_true(*nskip < MAX_SKIPS);
            skip[*nskip] = (struct skip){.marker = strtoll(second, NULL, 10)};
            snprintf(skip[(*nskip)++].field, sizeof(skip[0].field), "%s", first);
        }
    int64_t offset;
    int conflict;
    h->conflicts = 0;
    if (status == LB_APPLY_DUPLICATE)
        for (size_t k = 0; lb_apply_duplicate(&a, k, &first, &offset, &conflict) == 0; k++) {
            assert_true(*nskip < MAX_SKIPS);
            skip[*nskip] = (struct skip){.marker = offset, .exact = 1};
            snprintf(skip[(*nskip)++].field, sizeof(skip[0].field), "%s", first);
            h->conflicts += (size_t)conflict;
        }
    if (status == LB_APPLY_OVERFLOW)
        for (h->noverflow = 0;
             h->noverflow < 4 && lb_apply_pair(&a, h->noverflow, &first, &second) == 0;
             h->noverflow++)
            snprintf(h->overflow[h->noverflow], sizeof(h->overflow[0]), "%s", second);
    freeReplyObject(r);
    return status;
}

/* Delivers one batch as the pipeline does: every board's request; a board
 * answering "partial" or "duplicate" is planned again without the events
 * already applied or counted, until it goes through. */
static void deliver(struct harness *h, const struct sequence *seq, const size_t *batch, size_t n)
{
    char again[16][32];
    static struct skip skips[16][MAX_SKIPS];
    size_t nskips[16] = {0}, nagain = 0;

    plan(h, seq, batch, n, NULL, NULL, 0);
    for (size_t t = 0; t < h->batch.count; t++) {
        const struct lb_apply_request *req = &h->batch.requests[t];
        if (!req->len)
            continue;
        assert_true(nagain < 16);
        nskips[nagain] = 0;
        enum lb_apply_status status = apply(h, t, skips[nagain], &nskips[nagain]);
        if (status == LB_APPLY_PARTIAL || status == LB_APPLY_DUPLICATE) {
            assert_true(nagain < 16);
            snprintf(again[nagain++], sizeof(again[0]), "%.*s", (int)req->board.len,
                     req->board.ptr);
        } else {
            assert_int_equal(status, LB_APPLY_OK);
        }
    }
    for (size_t b = 0; b < nagain; b++) {
        for (int attempt = 0;; attempt++) {
            assert_true(attempt < 6);
            plan(h, seq, batch, n, again[b], skips[b], nskips[b]);
            /* none left (every event counted before): no request at all */
            assert_true(h->batch.count <= 1);
            if (!h->batch.count || !h->batch.requests[0].len ||
                apply(h, 0, skips[b], &nskips[b]) == LB_APPLY_OK)
                break;
        }
    }
}

/* ---- reading the server back ------------------------------------------------------- */

static int64_t as_integer(const redisReply *r)
{
    /* composites are integers below 2^53: Redis prints them exactly */
    return (int64_t)strtod(r->str, NULL);
}

/* The score of 'member' in 'key'; returns 0 when absent. */
static int score_of(struct redis_server *redis, const char *key, const char *member, int64_t *score)
{
    redisReply *r = redis_server_command(redis, "ZSCORE %s %s", key, member);
    int found = r->type == REDIS_REPLY_STRING;
    if (found)
        *score = as_integer(r);
    else if (r->type != REDIS_REPLY_NIL)
        fail_msg("ZSCORE %s: %s", key, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    return found;
}

/* The marker of 'field' of a board, or -1: the larger of its hash and its
 * sorted set (apply.h). */
static int64_t marker_of(struct redis_server *redis, const char *board, const char *field)
{
    redisReply *r = redis_server_command(redis, "HGET lb:{%s}:~applied %s", board, field);
    int64_t marker = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    r = redis_server_command(redis, "ZSCORE lb:{%s}:~offsets %s", board, field);
    if (r->type == REDIS_REPLY_STRING && as_integer(r) > marker)
        marker = as_integer(r);
    freeReplyObject(r);
    return marker;
}

/* Calls 'each' for every member of every window key. */
static void each_member(struct redis_server *redis,
                        void (*each)(void *ctx, const char *key, const char *member, int64_t score),
                        void *ctx)
{
    char cursor[32] = "0";
    do {
        redisReply *r = redis_server_command(redis, "SCAN %s MATCH lb:* COUNT 1000", cursor);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *k = r->element[1]->element[i];
            if (!lb_key_is_window("lb:", k->str, k->len))
                continue;
            redisReply *z = redis_server_command(redis, "ZRANGE %s 0 -1 WITHSCORES", k->str);
            assert_int_equal(z->type, REDIS_REPLY_ARRAY);
            for (size_t m = 0; m + 1 < z->elements; m += 2)
                each(ctx, k->str, z->element[m]->str, as_integer(z->element[m + 1]));
            freeReplyObject(z);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

struct compare {
    const struct reference *ref;
    size_t seen;
    char first_error[512];
};

static void check_member(void *ctx, const char *key, const char *member, int64_t score)
{
    struct compare *c = ctx;
    c->seen++;
    for (size_t i = 0; i < c->ref->count; i++) {
        const struct cell *cell = &c->ref->cells[i];
        if (strcmp(cell->key, key) || strcmp(cell->member, member))
            continue;
        if (!cell->present && !c->first_error[0])
            snprintf(c->first_error, sizeof(c->first_error), "%s %s: retracted, yet present", key,
                     member);
        else if (reference_value(cell) != score && !c->first_error[0])
            snprintf(c->first_error, sizeof(c->first_error), "%s %s: %lld, expected %lld", key,
                     member, (long long)score, (long long)reference_value(cell));
        return;
    }
    if (!c->first_error[0])
        snprintf(c->first_error, sizeof(c->first_error), "%s %s: never submitted", key, member);
}

/* Delivers the sequence like a consumer group would, with crashes before
 * commits (redelivery) and stale batches replayed by a zombie. */
/* Closes day 'day' of the sequence's 9 (and the month or the ISO week it
 * ends) on every board, as a pod's claim does (apply.lua "C"): ~final
 * calls it claimed, and the board's markers then are its close offsets. */
static void close_windows(struct harness *h, const struct sequence *seq, int day,
                          struct reference *ref)
{
    if (day >= 9)
        return;
    char windows[3][32];
    int nwindows = 0;
    time_t secs = (time_t)((MAY1 - 4 * INT64_C(86400000)) / 1000 + day * 86400);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(windows[nwindows++], sizeof(windows[0]), "daily:%Y-%m-%d", &tm);
    if (day == 3)
        snprintf(windows[nwindows++], sizeof(windows[0]), "monthly:2026-04");
    if (day == 6)
        snprintf(windows[nwindows++], sizeof(windows[0]), "weekly:2026-W18");
    for (size_t i = 0; i < seq->count; i++) {
        const char *board = seq->events[i].board;
        int known = 0;
        for (size_t c = 0; c < ref->nclosings && !known; c++)
            known = strcmp(ref->closings[c].board, board) == 0 &&
                    strcmp(ref->closings[c].window, windows[0]) == 0;
        for (int w = 0; w < nwindows && !known; w++) {
            assert_true(ref->nclosings < MAX_CLOSINGS);
            struct closing *c = &ref->closings[ref->nclosings++];
            snprintf(c->board, sizeof(c->board), "%s", board);
            snprintf(c->window, sizeof(c->window), "%s", windows[w]);
            for (int p = 0; p < PARTITIONS; p++) {
                char field[16];
                snprintf(field, sizeof(field), "t:%d", p);
                c->from[p] = marker_of(h->redis, board, field) + 1;
            }
            redisReply *r = redis_server_command(h->redis, "HSET lb:{%s}:~final s:%s claimed",
                                                 board, windows[w]);
            assert_int_equal(r->type, REDIS_REPLY_INTEGER);
            freeReplyObject(r);
        }
    }
}

static void run_sequence(struct harness *h, uint64_t seed, size_t count)
{
    static struct sequence seq;
    static struct reference ref;
    uint64_t rng = seed * 31 + 7;
    size_t position[PARTITIONS] = {0}, committed[PARTITIONS] = {0};
    size_t old_batches[16][64], old_sizes[16] = {0}, nold = 0;

    generate(seed, count, h->spread, h->retract, &seq);
    ref.count = 0;
    ref.nids = 0;
    ref.nclosings = 0;
    int next_close = 0;

    redisReply *r = redis_server_command(h->redis, "FLUSHALL");
    freeReplyObject(r);
    for (size_t sent = 0;; sent++) {
        size_t batch[64], n = 0, want = 1 + pick(&rng, 40);
        int second_half = sent * 40 > count; /* batches hold 20 events on average */
        h->window_stamps =
            h->stamps == 1 || (h->stamps == 2 && !second_half) || (h->stamps == 3 && second_half);
        while (n < want) {
            int p = (int)pick(&rng, PARTITIONS), tried = 0;
            while (position[p] >= seq.length[p] && tried++ < PARTITIONS)
                p = (p + 1) % PARTITIONS;
            if (position[p] >= seq.length[p])
                break;
            batch[n++] = seq.order[p][position[p]++];
        }
        if (n == 0)
            break;
        deliver(h, &seq, batch, n);
        memcpy(old_batches[nold % 16], batch, n * sizeof(*batch));
        old_sizes[nold++ % 16] = n;
        unsigned fate = pick(&rng, 100);
        if (fate < 20) {
            /* crash after writing, before committing: redelivered from the
             * last commit, possibly in different batches */
            memcpy(position, committed, sizeof(position));
        } else {
            memcpy(committed, position, sizeof(committed));
        }
        if (fate >= 90 && nold > 1) {
            /* a zombie pod writes a batch it held from before */
            size_t old = pick(&rng, nold < 16 ? (unsigned)nold : 16);
            deliver(h, &seq, old_batches[old], old_sizes[old]);
        }
        /* the nine days close one by one as the sequence goes on (each at
         * a tenth more of it delivered): the month with the fourth, the
         * ISO week with the seventh, writes before and after each */
        size_t delivered = 0;
        for (int p = 0; p < PARTITIONS; p++)
            delivered += position[p];
        while (h->closes && next_close < 9 && (size_t)(next_close + 1) * count <= 10 * delivered)
            close_windows(h, &seq, next_close++, &ref);
    }
    if (h->closes) /* every day closed, the month and the week among them */
        assert_int_equal(next_close, 9);
    for (int p = 0; p < PARTITIONS; p++)
        for (size_t i = 0; i < seq.length[p]; i++)
            apply_reference(&ref, &seq.events[seq.order[p][i]]);
    struct compare c = {.ref = &ref};
    each_member(h->redis, check_member, &c);
    size_t expected = 0;
    for (size_t i = 0; i < ref.count; i++)
        expected += ref.cells[i].present;
    for (size_t i = 0; i < ref.count && !c.first_error[0]; i++) {
        int64_t score;
        if (ref.cells[i].present &&
            !score_of(h->redis, ref.cells[i].key, ref.cells[i].member, &score))
            snprintf(c.first_error, sizeof(c.first_error), "%s %s: missing", ref.cells[i].key,
                     ref.cells[i].member);
    }
    if (!c.first_error[0] && c.seen != expected)
        snprintf(c.first_error, sizeof(c.first_error), "%zu members in Redis, %zu expected", c.seen,
                 expected);
    if (c.first_error[0])
        fail_msg("seed %llu: %s", (unsigned long long)seed, c.first_error);
}

static struct redis_server *redis;

static int start_redis(void **state)
{
    (void)state;
    redis = redis_server_start(0);
    return 0;
}

static int stop_redis(void **state)
{
    (void)state;
    redis_server_stop(redis);
    return 0;
}

static void random_sequences_match_the_reference_in_every_mode(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, config_text(0), redis);
    for (uint64_t seed = 1; seed <= 300; seed++)
        run_sequence(&h, seed, 60 + seed % 240);
    harness_close(&h);
}

/* The same sequences where latest boards keep per-window stamps (replay
 * --window; boards of the previous release), then where requests of both
 * kinds write one board: a board that started per-window stays so, one
 * that keeps ~newest keeps it. */
static void latest_boards_are_exact_with_stamps_of_either_kind(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, config_text(0), redis);
    for (h.stamps = 1; h.stamps <= 3; h.stamps++)
        for (uint64_t seed = 301; seed <= 400; seed++)
            run_sequence(&h, seed, 60 + seed % 240);
    harness_close(&h);
}

/* Players whose events come from any partition, in a request and from
 * one to the next (the general path's "twice"), and sequences with 40%
 * retractions, in every mode and with either kind of stamps. */
static void players_in_any_partition_and_many_retractions_match_the_reference(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, config_text(0), redis);
    for (h.stamps = 0; h.stamps <= 3; h.stamps++) {
        h.spread = 1;
        for (uint64_t seed = 1001; seed <= 1040; seed++)
            run_sequence(&h, seed, 60 + seed % 240);
        h.spread = 0;
        h.retract = 40;
        for (uint64_t seed = 2001; seed <= 2040; seed++)
            run_sequence(&h, seed, 60 + seed % 240);
        h.retract = 0;
    }
    harness_close(&h);
}

/* Calendar windows that close while the sequence is delivered (a day, then
 * the month and the ISO week it ends), with crashes and zombies around the
 * close: a closed window takes no write, the others still take every
 * event. Latest boards with either kind of stamps, players in one
 * partition or in any. */
static void closed_windows_take_no_write_and_the_others_stay_exact(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, config_text(1), redis);
    h.closes = 1;
    for (h.stamps = 0; h.stamps <= 3; h.stamps++)
        for (uint64_t seed = 3001; seed <= 3040; seed++) {
            h.spread = seed % 2 == 0;
            run_sequence(&h, seed, 60 + seed % 240);
        }
    harness_close(&h);
}

/* ---- single cases ------------------------------------------------------------------ */

#define BASE_CONFIG                                                                                \
    "kafka: {brokers: b, topics: [t]}\n"                                                           \
    "input: {schemas: {1: s.avsc}}\n"                                                              \
    "redis: {nodes: [a:1]}\n"

/* Plans 'n' events read at 'pos' as one batch and applies its one request,
 * to keys under 'prefix'. */
static enum lb_apply_status apply_events_under(struct harness *h, const char *prefix,
                                               const struct lb_event *evs,
                                               const struct lb_position *pos, size_t n)
{
    struct skip skip[MAX_SKIPS];
    size_t nskip = 0;
    uint32_t txn;
    char ids[16][32];
    lb_plan_reset(h->plan);
    for (size_t i = 0; i < n; i++) {
        struct lb_event ev = evs[i];
        if (!ev.event_id.len) { /* an id of its own, unless the case gives one */
            assert_true(i < 16);
            int len = snprintf(ids[i], sizeof(ids[i]), "%s:%d:%lld", pos[i].topic, pos[i].partition,
                               (long long)pos[i].offset);
            ev.event_id = (struct lb_str){ids[i], (uint32_t)len};
        }
        assert_int_equal(plan_event(h->plan, &ev, &pos[i], MAY1, &txn), LB_ACCEPT);
    }
    assert_int_equal(
        lb_apply_encode(&h->batch, h->plan, &(struct lb_apply_options){prefix, h->window_stamps}),
        0);
    assert_int_equal(h->batch.count, 1);
    return apply(h, 0, skip, &nskip);
}

static enum lb_apply_status apply_events(struct harness *h, const struct lb_event *evs,
                                         const struct lb_position *pos, size_t n)
{
    return apply_events_under(h, "lb:", evs, pos, n);
}

static void a_sum_leaving_its_range_is_refused_whole(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h,
                 BASE_CONFIG "profiles:\n"
                             "  - {name: xp, aggregation: sum, score_max: 100, sum_max: 150,\n"
                             "     windows: {alltime: {}, daily: {ttl: 0s}}}\n",
                 redis);
    for (int round = 0; round < 2; round++) {
        struct lb_event ev = {.board = {"x", 1}, .player = {"ann", 3}, .score = 80, .ts_ms = MAY1};
        struct lb_position pos = {"t", 0, round};
        /* 80 fits; 160 would not: nothing of the second is written */
        assert_int_equal(apply_events(&h, &ev, &pos, 1),
                         round == 0 ? LB_APPLY_OK : LB_APPLY_OVERFLOW);
    }
    assert_string_equal(h.overflow[0], "ann");
    int64_t score = 0;
    assert_true(score_of(redis, "lb:{x}:alltime", "ann", &score));
    assert_true(score >> 30 == 80);
    assert_int_equal(marker_of(redis, "x", "t:0"), 0);
    harness_close(&h);
}

/* More players leaving the range in one request than Lua's unpack takes
 * at once (4,500 pairs, 9,000 values): the answer names as many as it can
 * (the pipeline plans the board again without them, and the rest come in
 * the next answer), and nothing is written. */
static void a_request_with_thousands_leaving_the_range_is_refused_whole(void **state)
{
    (void)state;
    enum { N = 4500 };
    struct harness h;
    harness_open(&h,
                 BASE_CONFIG "profiles:\n"
                             "  - {name: xp, aggregation: sum, score_max: 100, sum_max: 150,\n"
                             "     dedupe: off, windows: {alltime: {}}}\n",
                 redis);
    static char names[N][16];
    static struct lb_event evs[N];
    static struct lb_position pos[N];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            int len = snprintf(names[i], sizeof(names[i]), "p%d", i);
            evs[i] = (struct lb_event){.event_id = {names[i], (uint32_t)len},
                                       .board = {"x", 1},
                                       .player = {names[i], (uint32_t)len},
                                       .score = 80,
                                       .ts_ms = MAY1 + round};
            pos[i] = (struct lb_position){"t", 0, (int64_t)round * N + i};
        }
        assert_int_equal(apply_events(&h, evs, pos, N),
                         round == 0 ? LB_APPLY_OK : LB_APPLY_OVERFLOW);
    }
    int64_t score = 0;
    assert_true(score_of(redis, "lb:{x}:alltime", "p4499", &score));
    assert_true(score >> 30 == 80);
    assert_int_equal(marker_of(redis, "x", "t:0"), N - 1);
    harness_close(&h);
}

static void ties_at_equal_score_and_time_keep_both_members(void **state)
{
    (void)state;
    /* Equal composites are legal: Redis orders them by member name, and the
     * planner must not merge two players because they tie. */
    struct harness h;
    harness_open(&h, BASE_CONFIG, redis);
    struct lb_event evs[] = {
        {.board = {"g", 1}, .player = {"amy", 3}, .score = 5, .ts_ms = MAY1},
        {.board = {"g", 1}, .player = {"bea", 3}, .score = 5, .ts_ms = MAY1},
    };
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 1, 0}};
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK);
    int64_t sa, sb;
    assert_true(score_of(redis, "lb:{g}:alltime", "amy", &sa));
    assert_true(score_of(redis, "lb:{g}:alltime", "bea", &sb));
    assert_true(sa == sb);
    harness_close(&h);
}

/* A key of the wrong type at the board's last window key (2026-05-01 is in
 * ISO week 18). Through the script nothing at all is written (Redis would
 * keep a script's earlier writes) and no marker moves. Without a script
 * (retractions: reject) nothing is checked before the writes: the key's
 * own command fails, the others and the marker are written, harmless where
 * ZADD GT makes every write idempotent. Either way, once the key is fixed
 * the batch goes through and the board is exact. */
static void wrong_type_at_the_last_window_key(const char *aggregation, const char *retractions)
{
    char text[1024];
    snprintf(text, sizeof(text),
             BASE_CONFIG "profiles:\n"
                         "  - {name: p, aggregation: %s, retractions: %s, tie_break: none,\n"
                         "     windows: {alltime: {}, daily: {ttl: 0s}, weekly: {ttl: 0s}}}\n",
             aggregation, retractions);
    int script = strcmp(retractions, "allow") == 0;
    static const char *const keys[] = {"lb:{w}:alltime", "lb:{w}:daily:2026-05-01",
                                       "lb:{w}:weekly:2026-W18"};
    struct harness h;
    harness_open(&h, text, redis);
    redisReply *r = redis_server_command(redis, "SET %s oops", keys[2]);
    freeReplyObject(r);

    struct lb_event evs[] = {{.board = {"w", 1}, .player = {"ann", 3}, .score = 7, .ts_ms = MAY1},
                             {.board = {"w", 1}, .player = {"bob", 3}, .score = 9, .ts_ms = MAY1}};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}};
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_WRONGTYPE);
    int64_t score;
    for (int k = 0; k < 2; k++)
        assert_int_equal(score_of(redis, keys[k], "ann", &score), !script);
    assert_int_equal(marker_of(redis, "w", "t:0"), script ? -1 : 1);

    /* the operator removes the key; the same batch goes through, once */
    r = redis_server_command(redis, "DEL %s", keys[2]);
    freeReplyObject(r);
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK);
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK); /* redelivered */
    assert_int_equal(apply_events(&h, evs, pos, 1), LB_APPLY_OK); /* a zombie's */
    for (int k = 0; k < 3; k++) {
        assert_true(score_of(redis, keys[k], "ann", &score));
        assert_int_equal(score, 7);
        assert_true(score_of(redis, keys[k], "bob", &score));
        assert_int_equal(score, 9);
    }
    assert_int_equal(marker_of(redis, "w", "t:0"), 1);
    harness_close(&h);
}

/* ---- latest boards' ~newest (apply.lua latest()) --------------------------------- */

#define LATEST_CONFIG                                                                              \
    BASE_CONFIG "profiles:\n"                                                                      \
                "  - {name: l, aggregation: latest, tie_break: none, dedupe: off,\n"               \
                "     windows: {alltime: {}, daily: {ttl: 0s}, weekly: {ttl: 0s}}}\n"

#define HOUR INT64_C(3600000)

/* One request of 'n' events of board 'board', a player each (p0 ..), read
 * from three partitions at offsets from 'offset' on, each its own id. */
static enum lb_apply_status apply_many(struct harness *h, const char *board, int n, enum lb_op op,
                                       int64_t score, int64_t ts, int64_t offset)
{
    static char ids[9000][32], players[9000][16];
    uint32_t txn;
    assert_true(n <= 9000);
    lb_plan_reset(h->plan);
    for (int i = 0; i < n; i++) {
        int plen = snprintf(players[i], sizeof(players[i]), "p%d", i);
        int ilen = snprintf(ids[i], sizeof(ids[i]), "%s-%lld", board, (long long)(offset + i));
        struct lb_event ev = {.event_id = {ids[i], (uint32_t)ilen},
                              .board = {board, (uint32_t)strlen(board)},
                              .player = {players[i], (uint32_t)plen},
                              .score = score,
                              .ts_ms = ts,
                              .op = op};
        struct lb_position pos = {"t", i % 3, offset + i};
        assert_int_equal(plan_event(h->plan, &ev, &pos, MAY1, &txn), LB_ACCEPT);
    }
    assert_int_equal(
        lb_apply_encode(&h->batch, h->plan, &(struct lb_apply_options){"lb:", h->window_stamps}),
        0);
    assert_int_equal(h->batch.count, 1);
    struct skip skip[MAX_SKIPS];
    size_t nskip = 0;
    return apply(h, 0, skip, &nskip);
}

static int64_t score_of_player(const char *key, const char *player)
{
    int64_t score = -1;
    return score_of(redis, key, player, &score) ? score : -1;
}

/* Requests larger than Lua's unpack takes at once (9,000 players over
 * three partitions; the script passes at most 6,000 values per call), so
 * that every run crosses a chunk boundary: latest boards whose players move
 * to a newer day, then older events that read the day they left, a
 * retraction and the events after it; sum boards adding up; dedupe ids. */
static void requests_larger_than_unpack_takes_are_exact(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h,
                 BASE_CONFIG
                 "profiles:\n"
                 "  - {name: l, match: \"l*\", aggregation: latest, tie_break: none,\n"
                 "     dedupe: {window: 30d}, windows: {alltime: {}, daily: {ttl: 0s}}}\n"
                 "  - {name: s, match: \"s*\", aggregation: sum, tie_break: none,\n"
                 "     dedupe: {window: 30d}, windows: {alltime: {}, daily: {ttl: 0s}}}\n",
                 redis);
    enum { N = 9000 };
    const char *may1 = "lb:{lb}:daily:2026-05-01", *may3 = "lb:{lb}:daily:2026-05-03";
    assert_int_equal(apply_many(&h, "lb", N, LB_OP_SUBMIT, 1, MAY1 + HOUR, 0), LB_APPLY_OK);
    /* a newer day: the first day keeps its entry, and its stamp moves */
    assert_int_equal(apply_many(&h, "lb", N, LB_OP_SUBMIT, 2, MAY1 + 50 * HOUR, N), LB_APPLY_OK);
    /* newer than the first day's entry, older than the player's newest */
    assert_int_equal(apply_many(&h, "lb", N, LB_OP_SUBMIT, 3, MAY1 + 2 * HOUR, 2 * N), LB_APPLY_OK);
    /* older than both in the first day */
    assert_int_equal(apply_many(&h, "lb", N, LB_OP_SUBMIT, 9, MAY1 + HOUR + 1, 3 * N), LB_APPLY_OK);
    for (int i = 0; i < N; i += N / 3 - 1) {
        char player[16];
        snprintf(player, sizeof(player), "p%d", i);
        assert_int_equal(score_of_player(may1, player), 3);
        assert_int_equal(score_of_player(may3, player), 2);
        assert_int_equal(score_of_player("lb:{lb}:alltime", player), 2);
    }
    /* the newest retracted: out of its windows; an older event counts again */
    assert_int_equal(apply_many(&h, "lb", N, LB_OP_RETRACT, 0, MAY1 + 50 * HOUR, 4 * N),
                     LB_APPLY_OK);
    assert_int_equal(score_of_player("lb:{lb}:alltime", "p8999"), -1);
    assert_int_equal(score_of_player(may3, "p8999"), -1);
    assert_int_equal(apply_many(&h, "lb", N, LB_OP_SUBMIT, 4, MAY1 + 3 * HOUR, 5 * N), LB_APPLY_OK);
    assert_int_equal(score_of_player("lb:{lb}:alltime", "p8999"), 4);
    assert_int_equal(score_of_player(may1, "p0"), 4);

    assert_int_equal(apply_many(&h, "sb", N, LB_OP_SUBMIT, 5, MAY1 + HOUR, 0), LB_APPLY_OK);
    assert_int_equal(apply_many(&h, "sb", N, LB_OP_SUBMIT, 7, MAY1 + HOUR, N), LB_APPLY_OK);
    assert_int_equal(score_of_player("lb:{sb}:alltime", "p4500"), 12);
    redisReply *r = redis_server_command(redis, "ZCARD lb:{sb}:~seen");
    assert_int_equal(r->integer, 2 * N);
    freeReplyObject(r);
    harness_close(&h);
}

static struct lb_event latest_event(const char *board, int64_t score, int64_t ts)
{
    return (struct lb_event){.board = {board, (uint32_t)strlen(board)},
                             .player = {"ann", 3},
                             .score = score,
                             .ts_ms = ts};
}

static int64_t score_in(const char *key)
{
    int64_t score = -1;
    assert_true(score_of(redis, key, "ann", &score));
    return score;
}

static char *text_of(const char *fmt, const char *key, const char *field)
{
    static char text[256];
    redisReply *r = redis_server_command(redis, fmt, key, field);
    int text_reply = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
    snprintf(text, sizeof(text), "%s", text_reply ? r->str : "(none)");
    freeReplyObject(r);
    return text;
}

/* replay --window swaps one window's keys: where its copy was built with
 * per-window stamps, the window's hash holds the player's stamp although
 * the live ~newest (from an event the copy never read, beyond retention)
 * names other windows; a later, older event of that day still loses. */
static void a_window_swapped_in_alone_carries_its_own_stamps(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, LATEST_CONFIG, redis);
    struct lb_event a = latest_event("s", 10, MAY1 + 4 * 24 * HOUR), /* 2026-05-05 */
        b = latest_event("s", 20, MAY1 + 36 * HOUR),                 /* 2026-05-02, noon */
        c = latest_event("s", 30, MAY1 + 30 * HOUR);                 /* 2026-05-02, 6:00 */
    struct lb_position pa = {"t", 0, 0}, pb = {"t", 0, 1}, pc = {"t", 0, 2};
    assert_int_equal(apply_events(&h, &a, &pa, 1), LB_APPLY_OK);
    assert_int_equal(apply_events(&h, &b, &pb, 1), LB_APPLY_OK);
    /* the copy, from b on (a is gone from the topic) */
    h.window_stamps = 1;
    assert_int_equal(apply_events_under(&h, "lb:~replay:", &b, &pb, 1), LB_APPLY_OK);
    h.window_stamps = 0;
    assert_string_equal(text_of("TYPE %s%s", "lb:~replay:{s}:~newest", ""), "none");
    freeReplyObject(redis_server_command(redis, "RENAME lb:~replay:{s}:daily:2026-05-02 "
                                                "lb:{s}:daily:2026-05-02"));
    freeReplyObject(redis_server_command(redis, "RENAME lb:~replay:{s}:daily:2026-05-02:~ts "
                                                "lb:{s}:daily:2026-05-02:~ts"));
    assert_int_equal(apply_events(&h, &c, &pc, 1), LB_APPLY_OK);
    assert_int_equal(score_in("lb:{s}:daily:2026-05-02"), 20);
    assert_int_equal(score_in("lb:{s}:alltime"), 10);
    harness_close(&h);
}

/* A player whose events come from two partitions (its producers did not
 * key by player): each window keeps the greatest stamp, in one request and
 * the next. */
static void a_player_in_two_partitions_keeps_the_newest_in_each_window(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, LATEST_CONFIG, redis);
    struct lb_event evs[] = {latest_event("p", 1, MAY1 + 10 * HOUR),
                             latest_event("p", 2, MAY1 + 12 * HOUR),
                             latest_event("p", 3, MAY1 + 2 * 24 * HOUR)};
    struct lb_position pos[] = {{"t", 0, 5}, {"t", 1, 3}, {"t", 0, 6}};
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK);
    assert_int_equal(score_in("lb:{p}:alltime"), 2);
    assert_int_equal(score_in("lb:{p}:daily:2026-05-01"), 2);
    struct lb_event late = latest_event("p", 4, MAY1 + 11 * HOUR);
    struct lb_position plate[] = {{"t", 1, 4}, {"t", 0, 6}};
    struct lb_event two[] = {late, evs[2]};
    assert_int_equal(apply_events(&h, two, plate, 2), LB_APPLY_OK);
    assert_int_equal(score_in("lb:{p}:daily:2026-05-01"), 2);
    assert_int_equal(score_in("lb:{p}:daily:2026-05-03"), 3);
    assert_int_equal(score_in("lb:{p}:alltime"), 3);
    /* the day it left keeps its stamp: an older event of that day loses */
    struct lb_event older = latest_event("p", 5, MAY1 + 11 * HOUR + 1);
    struct lb_position pold = {"t", 1, 5};
    assert_int_equal(apply_events(&h, &older, &pold, 1), LB_APPLY_OK);
    assert_int_equal(score_in("lb:{p}:daily:2026-05-01"), 2);
    harness_close(&h);
}

/* A board that keeps ~newest says so in its fence key (a hash, which the
 * previous release's script takes for replay's fence); a board of the
 * previous release (markers, no ~newest) keeps per-window stamps for every
 * entry, and never starts ~newest. */
static void a_board_keeps_newest_only_when_it_starts_with_it(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, LATEST_CONFIG, redis);
    struct lb_event ev = latest_event("n", 1, MAY1);
    struct lb_position pos = {"t", 0, 0};
    assert_int_equal(apply_events(&h, &ev, &pos, 1), LB_APPLY_OK);
    assert_string_equal(text_of("HGET %s %s", "lb:{n}:~fence", "apply"), "5");
    redisReply *r = redis_server_command(redis, "HGET lb:{n}:~newest %b", "", (size_t)0);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "5"); /* the empty field: no player's */
    freeReplyObject(r);
    assert_string_equal(text_of("TYPE %s%s", "lb:{n}:daily:2026-05-01:~ts", ""), "none");

    freeReplyObject(redis_server_command(redis, "HSET lb:{o}:~applied t:9 0"));
    struct lb_event old[] = {latest_event("o", 1, MAY1), latest_event("o", 2, MAY1 + HOUR)};
    struct lb_position opos[] = {{"t", 0, 0}, {"t", 0, 1}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(apply_events(&h, &old[i], &opos[i], 1), LB_APPLY_OK);
    assert_string_equal(text_of("TYPE %s%s", "lb:{o}:~newest", ""), "none");
    assert_string_equal(text_of("TYPE %s%s", "lb:{o}:~fence", ""), "none");
    assert_string_equal(text_of("HGET %s %s", "lb:{o}:daily:2026-05-01:~ts", "ann"),
                        "001777597200000:00000000000000000001");
    assert_int_equal(score_in("lb:{o}:weekly:2026-W18"), 2);
    harness_close(&h);
}

/* A player's newest leaving a window writes its stamp into that window's
 * hash, a key the request does not name: of the wrong type, it is found
 * before anything is written. */
static void a_wrong_type_where_a_stamp_moves_writes_nothing(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, LATEST_CONFIG, redis);
    struct lb_event first = latest_event("m", 1, MAY1 + 2 * 24 * HOUR), /* 2026-05-03 */
        next = latest_event("m", 2, MAY1 + 9 * 24 * HOUR);              /* 2026-05-10 */
    struct lb_position p0 = {"t", 0, 0}, p1 = {"t", 0, 1};
    assert_int_equal(apply_events(&h, &first, &p0, 1), LB_APPLY_OK);
    freeReplyObject(redis_server_command(redis, "SET lb:{m}:daily:2026-05-03:~ts oops"));
    assert_int_equal(apply_events(&h, &next, &p1, 1), LB_APPLY_WRONGTYPE);
    assert_int_equal(score_in("lb:{m}:alltime"), 1);
    assert_string_equal(text_of("TYPE %s%s", "lb:{m}:daily:2026-05-10", ""), "none");
    assert_int_equal(marker_of(redis, "m", "t:0"), 0);
    freeReplyObject(redis_server_command(redis, "DEL lb:{m}:daily:2026-05-03:~ts"));
    assert_int_equal(apply_events(&h, &next, &p1, 1), LB_APPLY_OK);
    assert_int_equal(score_in("lb:{m}:alltime"), 2);
    /* the day left holds the old stamp, so an older event of it loses */
    assert_string_equal(text_of("HGET %s %s", "lb:{m}:daily:2026-05-03:~ts", "ann"),
                        "001777766400000:00000000000000000000");
    harness_close(&h);
}

/* The key a stamp moves into is not named by the request: during a slot
 * migration it may be on the other node already (or never made), which
 * Redis refuses inside the script; the answer says so and nothing is
 * written, and once the slot is stable the same request goes through. */
static void a_stamp_moving_into_a_key_on_another_node_writes_nothing(void **state)
{
    (void)state;
    struct redis_server *nodes[2];
    redis_server_start_masters(nodes, 2);
    int owner = lb_key_slot("mv", 2) < 8192 ? 0 : 1;
    struct harness h;
    harness_open(&h,
                 BASE_CONFIG "profiles:\n"
                             "  - {name: l, aggregation: latest, tie_break: none,\n"
                             "     windows: {alltime: {}, daily: {ttl: 0s}}}\n",
                 nodes[owner]);
    struct lb_event first = latest_event("mv", 1, MAY1 + 2 * 24 * HOUR), /* 2026-05-03 */
        next = latest_event("mv", 2, MAY1 + 9 * 24 * HOUR);              /* 2026-05-10 */
    struct lb_position p0 = {"t", 0, 0}, p1 = {"t", 0, 1};
    assert_int_equal(apply_events(&h, &first, &p0, 1), LB_APPLY_OK);
    /* every key the next request names exists here (so Redis runs the
     * script on this node while the slot migrates); the stamp's new home,
     * daily:2026-05-03:~ts, does not */
    static const char *const made[] = {
        "ZADD lb:{mv}:~offsets 0 x:0", "ZADD lb:{mv}:daily:2026-05-10 0 zed",
        "HSET lb:{mv}:daily:2026-05-10:~ts zed 0", "HSET lb:{mv}:alltime:~ts zed 0"};
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++)
        freeReplyObject(redis_server_command(nodes[owner], made[i]));
    redisReply *from = redis_server_command(nodes[owner], "CLUSTER MYID");
    redisReply *to = redis_server_command(nodes[1 - owner], "CLUSTER MYID");
    int slot = (int)lb_key_slot("mv", 2);
    freeReplyObject(
        redis_server_command(nodes[1 - owner], "CLUSTER SETSLOT %d IMPORTING %s", slot, from->str));
    freeReplyObject(
        redis_server_command(nodes[owner], "CLUSTER SETSLOT %d MIGRATING %s", slot, to->str));
    freeReplyObject(from);
    freeReplyObject(to);
    struct skip skip[MAX_SKIPS];
    size_t nskip = 0;
    lb_plan_reset(h.plan);
    uint32_t txn;
    next.event_id = (struct lb_str){"n1", 2};
    assert_int_equal(plan_event(h.plan, &next, &p1, MAY1, &txn), LB_ACCEPT);
    assert_int_equal(lb_apply_encode(&h.batch, h.plan, &apply_lb), 0);
    assert_int_equal(apply(&h, 0, skip, &nskip), LB_APPLY_MOVING);
    int64_t score = 0;
    assert_false(score_of(nodes[owner], "lb:{mv}:daily:2026-05-10", "ann", &score));
    assert_true(score_of(nodes[owner], "lb:{mv}:alltime", "ann", &score));
    assert_int_equal(score, 1);
    freeReplyObject(redis_server_command(nodes[owner], "CLUSTER SETSLOT %d STABLE", slot));
    assert_int_equal(apply(&h, 0, skip, &nskip), LB_APPLY_OK);
    assert_true(score_of(nodes[owner], "lb:{mv}:alltime", "ann", &score));
    assert_int_equal(score, 2);
    harness_close(&h);
    redis_server_stop(nodes[0]);
    redis_server_stop(nodes[1]);
}

static void a_wrong_type_at_the_last_key_of_a_sum_board_writes_nothing(void **state)
{
    (void)state;
    wrong_type_at_the_last_window_key("sum", "allow");
}

static void a_wrong_type_at_the_last_key_of_a_latest_board_writes_nothing(void **state)
{
    (void)state;
    wrong_type_at_the_last_window_key("latest", "allow");
}

static void a_wrong_type_at_the_last_key_of_a_best_board_writes_nothing(void **state)
{
    (void)state;
    wrong_type_at_the_last_window_key("best", "allow");
}

static void a_wrong_type_in_a_transaction_fails_it_and_a_resend_is_exact(void **state)
{
    (void)state;
    wrong_type_at_the_last_window_key("best", "reject");
}

/* A board's profile changed from retractions: reject to allow: the script
 * reads the markers the transactions wrote, so a batch that straddles them
 * is planned again without what was applied (a script ignoring them would
 * apply it all). */
static void the_script_reads_the_markers_a_transaction_wrote(void **state)
{
    (void)state;
    struct lb_event evs[4];
    static const char *const ids[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        evs[i] = (struct lb_event){.event_id = {ids[i], 1},
                                   .board = {"s", 1},
                                   .player = {"ann", 3},
                                   .score = 5 + i,
                                   .ts_ms = MAY1};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 0, 2}, {"t", 0, 3}};
    struct harness h;
    harness_open(
        &h, BASE_CONFIG "profiles:\n  - {name: s, retractions: reject, windows: {alltime: {}}}\n",
        redis);
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK);
    harness_close(&h);
    /* the same board, now allowing retractions (harness_open would flush) */
    const char text[] =
        BASE_CONFIG "profiles:\n  - {name: s, retractions: allow, windows: {alltime: {}}}\n";
    struct lb_config *config;
    char err[512];
    assert_int_equal(lb_config_load_string("t.yaml", text, strlen(text), &config, err, sizeof(err)),
                     0);
    struct lb_plan *plan =
        lb_plan_new(&(struct lb_plan_options){config->profiles, config->nprofiles});
    struct lb_apply_batch batch = {0};
    uint32_t txn;
    for (int i = 0; i < 4; i++)
        assert_int_equal(plan_event(plan, &evs[i], &pos[i], MAY1, &txn), LB_ACCEPT);
    assert_int_equal(lb_apply_encode(&batch, plan, &apply_lb), 0);
    assert_int_equal(batch.requests[0].is_txn, 0);
    redisReply *r = redis_server_send(redis, batch.bytes.data + batch.requests[0].offset,
                                      batch.requests[0].len, 1);
    struct lb_apply_answer a;
    assert_int_equal(lb_apply_parse(r, &a), LB_APPLY_PARTIAL);
    const char *field, *marker;
    assert_int_equal(lb_apply_pair(&a, 0, &field, &marker), 0);
    assert_string_equal(field, "t:0");
    assert_string_equal(marker, "1");
    freeReplyObject(r);
    lb_apply_batch_free(&batch);
    lb_plan_free(plan);
    lb_config_free(config);
}

/* replay's swap and fence scripts as the build embeds them (swap_lua.c
 * and fence_lua.c, from replay/swap.lua and fence.lua), and the fence
 * value of the run that sends them ("<epoch> <host> <pid> <ms>": one
 * argument, given with %s, which redis_server_command does not split). */
extern const char lb_swap_lua[], lb_fence_lua[];
#define REPLAY_RUN "1 host 1 1"
static const char *swap_script(void)
{
    return lb_swap_lua;
}

/* The swap on board z's alltime key and its dedupe set: the staging copies
 * under "lb:~replay:" replace the live keys if the live markers are not
 * past 'read' on t:0 and the staging markers hold 'wrote' (what replay
 * wrote there). Returns the script's first word. */
static char *swap_alltime(int64_t read, int64_t wrote)
{
    const char *script = swap_script();
    redisReply *r =
        redis_server_command(redis,
                             "EVAL %s 11 lb:{z}:~applied lb:{z}:~offsets lb:~replay:{z}:~applied "
                             "lb:~replay:{z}:~offsets lb:{z}:~fence lb:{z}:~final lb:{z}:~newest "
                             "lb:~replay:{z}:alltime lb:~replay:{z}:~seen lb:{z}:alltime "
                             "lb:{z}:~seen 2 advance 1 0 %s t:0 %lld %lld",
                             script, REPLAY_RUN, (long long)read, (long long)wrote);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    static char word[32];
    snprintf(word, sizeof(word), "%s", r->element[0]->str);
    freeReplyObject(r);
    return word;
}

/* A zombie pod's batch, older than one applied since, changes nothing: not
 * the scores, and never moves the marker back, so replay's swap, which
 * trusts it, refuses a copy that read less than the live board holds and
 * takes one that read all of it. With and without the script. */
static void zombie_then_swap(const char *profile, int64_t expected, const char *unused_marker)
{
    char text[1024];
    snprintf(text, sizeof(text), BASE_CONFIG "profiles:\n  - %s\n", profile);
    struct harness h;
    harness_open(&h, text, redis);
    struct lb_event evs[4];
    const int64_t scores[] = {5, 6, 9, 7};
    for (int i = 0; i < 4; i++)
        evs[i] = (struct lb_event){
            .board = {"z", 1}, .player = {"ann", 3}, .score = scores[i], .ts_ms = MAY1};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 0, 2}, {"t", 0, 3}};
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK);
    assert_int_equal(apply_events(&h, evs + 2, pos + 2, 2), LB_APPLY_OK);
    assert_int_equal(marker_of(redis, "z", "t:0"), 3);
    assert_int_equal(apply_events(&h, evs, pos, 2), LB_APPLY_OK); /* the zombie's */
    int64_t score;
    assert_true(score_of(redis, "lb:{z}:alltime", "ann", &score));
    assert_int_equal(score, expected);
    assert_int_equal(marker_of(redis, "z", "t:0"), 3);

    /* replay's copy of everything; a swap of what read only offsets 0..1
     * would lose the newer batch: refused while the marker says 3 */
    assert_int_equal(apply_events_under(&h, "lb:~replay:", evs, pos, 4), LB_APPLY_OK);
    freeReplyObject(redis_server_command(redis, "ZADD lb:~replay:{z}:alltime 1 stale"));
    assert_string_equal(swap_alltime(1, 3), "behind");
    /* a copy whose marker is below what replay wrote into it (its node
     * restarted empty, then took replay's later writes) is not swapped */
    assert_string_equal(swap_alltime(3, 4), "lost");
    assert_string_equal(swap_alltime(3, 3), "ok");
    redisReply *r = redis_server_command(redis, "ZRANGE lb:{z}:alltime 0 -1 WITHSCORES");
    assert_int_equal(r->elements, 4); /* ann and the marked staging member */
    freeReplyObject(r);
    assert_true(score_of(redis, "lb:{z}:alltime", "ann", &score));
    assert_int_equal(score, expected);
    assert_true(score_of(redis, "lb:{z}:alltime", "stale", &score));
    assert_int_equal(marker_of(redis, "z", "t:0"), 3);
    r = redis_server_command(redis, "KEYS lb:~replay:*");
    assert_int_equal(r->elements, 1); /* staging keys and markers are gone, */
    assert_string_equal(r->element[0]->str, "lb:~replay:{z}:~applied");
    freeReplyObject(r);
    r = redis_server_command(redis, "HGETALL lb:~replay:{z}:~applied");
    assert_int_equal(r->elements, 2); /* but for the mark of the swap */
    assert_string_equal(r->element[0]->str, "~swapped");
    freeReplyObject(r);
    /* sent again (its reply lost): done already, nothing changes */
    assert_string_equal(swap_alltime(3, 3), "gone");
    assert_true(score_of(redis, "lb:{z}:alltime", "ann", &score));
    assert_int_equal(score, expected);
    assert_int_equal(marker_of(redis, "z", "t:0"), 3);
    /* without the mark (its node restarted empty meanwhile): lost */
    freeReplyObject(redis_server_command(redis, "DEL lb:~replay:{z}:~applied"));
    assert_string_equal(swap_alltime(3, 3), "lost");
    r = redis_server_command(redis, "EXISTS %s", unused_marker);
    assert_int_equal(r->integer, 0); /* the swap kept to the board's marker key */
    freeReplyObject(r);
    harness_close(&h);
}

/* A board whose staging copy is gone whole (its node restarted empty after
 * replay wrote it, before the swap): replay finds no staging key, and the
 * swap, told what replay wrote, changes nothing rather than delete the
 * live keys and move the markers past events it no longer holds. */
static void a_swap_of_a_copy_that_lost_writes_changes_nothing(void **state)
{
    (void)state;
    freeReplyObject(redis_server_command(redis, "FLUSHALL"));
    freeReplyObject(redis_server_command(redis, "ZADD lb:{z}:alltime 7 ann"));
    freeReplyObject(redis_server_command(redis, "HSET lb:{z}:~applied t:0 3"));
    redisReply *r =
        redis_server_command(redis,
                             "EVAL %s 8 lb:{z}:~applied lb:{z}:~offsets lb:~replay:{z}:~applied "
                             "lb:~replay:{z}:~offsets lb:{z}:~fence lb:{z}:~final lb:{z}:~newest "
                             "lb:{z}:alltime 0 advance 1 0 %s t:0 9 8",
                             swap_script(), REPLAY_RUN);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4);
    assert_string_equal(r->element[0]->str, "lost");
    assert_string_equal(r->element[2]->str, "-1");
    assert_string_equal(r->element[3]->str, "8");
    freeReplyObject(r);
    int64_t score;
    assert_true(score_of(redis, "lb:{z}:alltime", "ann", &score));
    assert_int_equal(marker_of(redis, "z", "t:0"), 3);
}

/* replay's fence (a string) on a latest board that keeps ~newest replaces
 * the hash there, which holds pods of the previous release off the board;
 * when replay lifts it (fence.lua) or swaps the board in (swap.lua, here only
 * a window, as replay --window does), the hash is there again, before any
 * write of this release could put it back. A board without ~newest is left
 * without a fence. */
static void a_board_keeping_newest_has_its_hash_fence_after_replay(void **state)
{
    (void)state;
    const char *lift = lb_fence_lua;
    struct harness h;
    harness_open(&h, LATEST_CONFIG, redis);
    struct lb_event ev = latest_event("f", 1, MAY1);
    struct lb_position pos = {"t", 0, 0};
    assert_int_equal(apply_events(&h, &ev, &pos, 1), LB_APPLY_OK);
    assert_string_equal(text_of("TYPE %s%s", "lb:{f}:~fence", ""), "hash");
    freeReplyObject(redis_server_command(redis, "HSET lb:{g}:~applied t:0 0"));

    for (int swapped = 0; swapped < 2; swapped++) {
        for (int b = 0; b < 2; b++) {
            const char *board = b ? "g" : "f";
            freeReplyObject(
                redis_server_command(redis, "SET lb:{%s}:~fence replay-1 PX 60000", board));
            redisReply *r;
            if (!swapped) {
                r = redis_server_command(redis,
                                         "EVAL %s 2 lb:{%s}:~fence lb:{%s}:~newest lift %s 60000",
                                         lift, board, board, REPLAY_RUN);
            } else { /* the copy read as far as the board's marker */
                long long m = (long long)marker_of(redis, board, "t:0");
                freeReplyObject(redis_server_command(
                    redis, "HSET lb:~replay:{%s}:~applied t:0 %lld", board, m));
                freeReplyObject(
                    redis_server_command(redis, "ZADD lb:~replay:{%s}:alltime 1 ann", board));
                r = redis_server_command(
                    redis,
                    "EVAL %s 9 lb:{%s}:~applied lb:{%s}:~offsets lb:~replay:{%s}:~applied "
                    "lb:~replay:{%s}:~offsets lb:{%s}:~fence lb:{%s}:~final lb:{%s}:~newest "
                    "lb:~replay:{%s}:alltime lb:{%s}:alltime 1 exact 1 0 %s t:0 %lld %lld",
                    swap_script(), board, board, board, board, board, board, board, board, board,
                    REPLAY_RUN, m, m);
            }
            assert_true(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ARRAY);
            if (r->type == REDIS_REPLY_ARRAY)
                assert_string_equal(r->element[0]->str, "ok");
            freeReplyObject(r);
            const char *want = b ? "none" : "hash";
            assert_string_equal(text_of("TYPE lb:{%s}:~fence%s", board, ""), want);
        }
        assert_string_equal(text_of("HGET %s %s", "lb:{f}:~fence", "apply"), "5");
        struct lb_event next = latest_event("f", 2 + swapped, MAY1 + (1 + swapped) * HOUR);
        struct lb_position npos = {"t", 0, 1 + swapped};
        assert_int_equal(apply_events(&h, &next, &npos, 1), LB_APPLY_OK);
        assert_int_equal(score_in("lb:{f}:alltime"), 2 + swapped);
    }
    harness_close(&h);
}

/* replay's swap of a board with final standings: the windows its rebuild
 * found open join the live ~open (never replaced, never deleted), less
 * those ~final names closed; the staging ~open goes. */
static void a_swap_merges_the_open_windows_less_the_closed_ones(void **state)
{
    (void)state;
    freeReplyObject(redis_server_command(redis, "FLUSHALL"));
    freeReplyObject(redis_server_command(redis, "HSET lb:{z}:~open daily:2026-05-01 1"));
    freeReplyObject(redis_server_command(
        redis,
        "HSET lb:~replay:{z}:~open daily:2026-05-02 2 daily:2026-05-03 3 daily:2026-05-04 4"));
    freeReplyObject(redis_server_command(
        redis, "HSET lb:{z}:~final s:daily:2026-05-02 published s:daily:2026-05-04 claimed"));
    freeReplyObject(redis_server_command(redis, "HSET lb:~replay:{z}:~applied t:0 3"));
    freeReplyObject(redis_server_command(redis, "ZADD lb:~replay:{z}:alltime 7 ann"));
    redisReply *r =
        redis_server_command(redis,
                             "EVAL %s 11 lb:{z}:~applied lb:{z}:~offsets lb:~replay:{z}:~applied "
                             "lb:~replay:{z}:~offsets lb:{z}:~fence lb:{z}:~final lb:{z}:~newest "
                             "lb:~replay:{z}:alltime lb:~replay:{z}:~open lb:{z}:alltime "
                             "lb:{z}:~open 2 advance 1 2 %s t:0 3 3",
                             swap_script(), REPLAY_RUN);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, "ok");
    freeReplyObject(r);
    r = redis_server_command(redis, "HGETALL lb:{z}:~open");
    assert_int_equal(r->elements, 4);
    freeReplyObject(r);
    r = redis_server_command(redis, "HMGET lb:{z}:~open daily:2026-05-01 daily:2026-05-03");
    assert_string_equal(r->element[0]->str, "1");
    assert_string_equal(r->element[1]->str, "3");
    freeReplyObject(r);
    r = redis_server_command(redis, "EXISTS lb:~replay:{z}:~open");
    assert_int_equal(r->integer, 0); /* the staging ~open went */
    freeReplyObject(r);
    r = redis_server_command(redis, "EXISTS lb:{z}:alltime");
    assert_int_equal(r->integer, 1); /* the window came */
    freeReplyObject(r);
    r = redis_server_command(redis, "HGET lb:{z}:~final s:daily:2026-05-02");
    assert_string_equal(r->str, "published");
    freeReplyObject(r);
}

static void a_zombie_batch_leaves_a_sum_board_and_its_marker_unchanged(void **state)
{
    (void)state;
    zombie_then_swap("{name: xp, aggregation: sum, tie_break: none, windows: {alltime: {}}}",
                     5 + 6 + 9 + 7, "lb:{z}:~offsets");
}

static void a_zombie_transaction_leaves_a_best_board_and_its_marker_unchanged(void **state)
{
    (void)state;
    zombie_then_swap("{name: top, retractions: reject, tie_break: none, windows: {alltime: {}}}", 9,
                     "lb:{z}:~applied");
}

/* A request of a protocol the script does not speak is refused, untouched. */
static void another_protocol_is_refused_and_writes_nothing(void **state)
{
    (void)state;
    redisReply *r = redis_server_command(redis, "FLUSHALL");
    freeReplyObject(r);
    r = redis_server_command(
        redis,
        "EVALSHA %s 5 lb:{p}:~applied lb:{p}:~offsets lb:{p}:~fence lb:{p}:~seen "
        "lb:{p}:alltime 3 b d 0 0 0 0 1 1 0 - - t:0 0 0 n 0 1 0 7 ann",
        lb_apply_script_sha());
    struct lb_apply_answer a;
    assert_int_equal(lb_apply_parse(r, &a), LB_APPLY_PROTOCOL);
    assert_string_equal(a.key, LB_APPLY_VERSION_TEXT);
    freeReplyObject(r);
    r = redis_server_command(redis, "DBSIZE");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
}

/* An expiry Redis would refuse (an instant of 0) is found before any
 * write: the whole request writes nothing. */
static void a_bad_expiry_is_refused_before_any_write(void **state)
{
    (void)state;
    freeReplyObject(redis_server_command(redis, "FLUSHALL"));
    redisReply *r = redis_server_command(
        redis,
        "EVALSHA %s 6 lb:{p}:~applied lb:{p}:~offsets lb:{p}:~fence "
        "lb:{p}:~seen lb:{p}:alltime lb:{p}:daily:2026-05-01 " LB_APPLY_VERSION_TEXT " b d 0 0 0 0 "
        "2 1 60 - - t:0 0 0 1 7 e1 0 n 0 1 0 7 ann a 0 1 0 7 ann",
        lb_apply_script_sha());
    struct lb_apply_answer a;
    assert_int_equal(lb_apply_parse(r, &a), LB_APPLY_BADARG);
    assert_string_equal(a.key, "lb:{p}:daily:2026-05-01");
    freeReplyObject(r);
    r = redis_server_command(redis, "DBSIZE");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
}

/* ---- dedupe ------------------------------------------------------------------------ */

#define DEDUPE_CONFIG                                                                              \
    BASE_CONFIG "profiles:\n"                                                                      \
                "  - {name: xp, aggregation: sum, tie_break: none, dedupe: {window: 1h},\n"        \
                "     windows: {alltime: {}}}\n"

static struct lb_event sum_event(const char *id, int64_t score, int64_t ts)
{
    return (struct lb_event){.event_id = {id, (uint32_t)strlen(id)},
                             .board = {"d", 1},
                             .player = {"ann", 3},
                             .score = score,
                             .ts_ms = ts};
}

static int64_t total_of_ann(void)
{
    int64_t score = -1;
    assert_true(score_of(redis, "lb:{d}:alltime", "ann", &score));
    return score;
}

/* A producer's retry (the same event_id, a record of its own) is refused
 * whole and named: "d" with the same payload, "c" (a conflict) with
 * another, also at an earlier time within the window; the first record's
 * total stands and no marker moves. A record more than the window behind
 * the board's newest is outside the window and counts, even with an id the
 * set holds (the window is 1 h). */
static void a_retry_counts_once_and_another_payload_is_a_conflict(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    struct lb_event first = sum_event("x", 5, MAY1);
    struct lb_event retries[] = {first, sum_event("x", 9, MAY1),
                                 sum_event("x", 9, MAY1 - HOUR + 1000)};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 1, 7}, {"t", 1, 8}};
    assert_int_equal(apply_events(&h, &first, &pos[0], 1), LB_APPLY_OK);
    struct skip skip[MAX_SKIPS];
    for (int i = 0; i < 3; i++) {
        size_t nskip = 0;
        lb_plan_reset(h.plan);
        uint32_t txn;
        plan_event(h.plan, &retries[i], &pos[1 + i], MAY1, &txn);
        assert_int_equal(lb_apply_encode(&h.batch, h.plan, &apply_lb), 0);
        assert_int_equal(apply(&h, 0, skip, &nskip), LB_APPLY_DUPLICATE);
        assert_int_equal(nskip, 1);
        assert_string_equal(skip[0].field, i ? "t:1" : "t:0");
        assert_int_equal(skip[0].marker, pos[1 + i].offset);
        assert_int_equal(skip[0].exact, 1);
        assert_int_equal(h.conflicts, (size_t)(i > 0));
    }
    assert_int_equal(total_of_ann(), 5);
    assert_int_equal(marker_of(redis, "d", "t:0"), 0);
    assert_int_equal(marker_of(redis, "d", "t:1"), -1);
    /* the set holds the first record's stamp */
    int64_t stamp;
    assert_true(score_of(redis, "lb:{d}:~seen", "x", &stamp));
    assert_int_equal(stamp, lb_dedupe_stamp(&first));
    assert_int_not_equal(lb_dedupe_stamp(&first), lb_dedupe_stamp(&retries[1]));
    struct lb_event outside = sum_event("x", 70, MAY1 - HOUR - 1000);
    struct lb_position at9 = {"t", 1, 9};
    assert_int_equal(apply_events(&h, &outside, &at9, 1), LB_APPLY_OK);
    assert_int_equal(total_of_ann(), 5 + 70);
    assert_true(score_of(redis, "lb:{d}:~seen", "x", &stamp));
    assert_int_equal(stamp, lb_dedupe_stamp(&first));
    harness_close(&h);
}

/* The window is in event time: an id is forgotten once the board's newest
 * event time is more than the window past it (a retry that late counts
 * again, as documented); ids within it are kept. The set expires a week
 * past the window after its newest event time: an instant of event time
 * (a replay sets the same), none while that is already past. */
static void the_dedupe_window_follows_event_time(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    struct lb_event evs[] = {sum_event("a", 1, MAY1), sum_event("b", 10, MAY1 + 1800000),
                             sum_event("c", 100, MAY1 + 3601000), sum_event("a", 1000, MAY1),
                             sum_event("b", 10000, MAY1 + 1800000)};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 0, 2}, {"t", 0, 3}, {"t", 0, 4}};
    for (int i = 0; i < 3; i++)
        assert_int_equal(apply_events(&h, &evs[i], &pos[i], 1), LB_APPLY_OK);
    int64_t stamp;
    assert_false(score_of(redis, "lb:{d}:~seen", "a", &stamp)); /* 1 h 1 s behind c */
    assert_true(score_of(redis, "lb:{d}:~seen", "b", &stamp));  /* 30 min 1 s behind */
    assert_int_equal(apply_events(&h, &evs[3], &pos[3], 1), LB_APPLY_OK);
    assert_int_equal(apply_events(&h, &evs[4], &pos[4], 1), LB_APPLY_DUPLICATE);
    assert_int_equal(total_of_ann(), 1 + 10 + 100 + 1000);
    redisReply *r = redis_server_command(redis, "PEXPIRETIME lb:{d}:~seen");
    assert_int_equal(r->integer, -1); /* May 1 + 1 h + 1 week is past */
    freeReplyObject(r);
    int64_t now_s = (int64_t)time(NULL);
    struct lb_event recent = sum_event("n", 1, now_s * 1000);
    struct lb_position at5 = {"t", 0, 5};
    assert_int_equal(apply_events(&h, &recent, &at5, 1), LB_APPLY_OK);
    r = redis_server_command(redis, "PEXPIRETIME lb:{d}:~seen");
    assert_int_equal(r->integer, (now_s + 3600 + 604800) * 1000);
    freeReplyObject(r);
    /* the newest second unchanged (no trim, no new expiry): in one batch an
     * id of that second is recorded, one the window has passed counts and
     * is not, one exactly the window behind is; their retries show it */
    struct lb_event same[] = {sum_event("m", 20, now_s * 1000 + 500),
                              sum_event("o", 300, (now_s - 3601) * 1000),
                              sum_event("p", 4000, (now_s - 3600) * 1000)};
    struct lb_position at6[] = {{"t", 0, 6}, {"t", 0, 7}, {"t", 0, 8}};
    assert_int_equal(apply_events(&h, same, at6, 3), LB_APPLY_OK);
    assert_true(score_of(redis, "lb:{d}:~seen", "m", &stamp));
    assert_false(score_of(redis, "lb:{d}:~seen", "o", &stamp));
    assert_true(score_of(redis, "lb:{d}:~seen", "p", &stamp));
    r = redis_server_command(redis, "PEXPIRETIME lb:{d}:~seen");
    assert_int_equal(r->integer, (now_s + 3600 + 604800) * 1000);
    freeReplyObject(r);
    struct lb_position at9[] = {{"t", 0, 9}, {"t", 0, 10}, {"t", 0, 11}};
    assert_int_equal(apply_events(&h, &same[0], &at9[0], 1), LB_APPLY_DUPLICATE);
    assert_int_equal(apply_events(&h, &same[1], &at9[1], 1), LB_APPLY_OK);
    assert_int_equal(apply_events(&h, &same[2], &at9[2], 1), LB_APPLY_DUPLICATE);
    assert_int_equal(total_of_ann(), 1 + 10 + 100 + 1000 + 1 + 20 + 2 * 300 + 4000);
    harness_close(&h);
}

/* One batch whose ids span more than the window, in two partitions: the
 * ids older than the window behind the batch's newest are forgotten in the
 * same request, the one exactly the window behind (by the second) is kept,
 * and so are the newer ones; a retry of each shows which. */
static void a_batch_wider_than_the_window_keeps_only_its_ids_within_it(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    struct lb_event evs[] = {sum_event("e", 1, MAY1 + 2 * HOUR),
                             sum_event("g", 10, MAY1 + HOUR - 1000),
                             sum_event("f", 100, MAY1 + HOUR), sum_event("h", 1000, MAY1)};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 1, 0}, {"t", 1, 1}};
    assert_int_equal(apply_events(&h, evs, pos, 4), LB_APPLY_OK);
    redisReply *r = redis_server_command(redis, "ZRANGE lb:{d}:~seen 0 -1");
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "f");
    assert_string_equal(r->element[1]->str, "e");
    freeReplyObject(r);
    int64_t stamp;
    assert_true(score_of(redis, "lb:{d}:~seen", "f", &stamp));
    assert_int_equal(stamp, lb_dedupe_stamp(&evs[2]));

    struct lb_position again[] = {{"t", 0, 2}, {"t", 1, 2}, {"t", 0, 3}, {"t", 1, 3}};
    for (int i = 0; i < 4; i++)
        assert_int_equal(apply_events(&h, &evs[i], &again[i], 1),
                         i == 0 || i == 2 ? LB_APPLY_DUPLICATE : LB_APPLY_OK);
    assert_int_equal(total_of_ann(), 1 + 2 * 10 + 100 + 2 * 1000);
    harness_close(&h);
}

/* A duplicate in the second segment of a batch whose first segment holds
 * an id further behind than the window (not looked up): the answer names
 * the duplicate's own partition and offset. */
static void a_duplicate_after_a_cut_run_is_named_by_its_own_offset(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    const int64_t t = MAY1 + 2 * HOUR;
    struct lb_event first = sum_event("y", 5, t);
    struct lb_position at0 = {"t", 1, 0};
    assert_int_equal(apply_events(&h, &first, &at0, 1), LB_APPLY_OK);
    struct lb_event batch[] = {sum_event("o", 70, t - 2 * HOUR), sum_event("n", 900, t - 600000),
                               first};
    struct lb_position pos[] = {{"t", 0, 4}, {"t", 0, 5}, {"t", 1, 9}};
    lb_plan_reset(h.plan);
    uint32_t txn;
    for (int i = 0; i < 3; i++)
        plan_event(h.plan, &batch[i], &pos[i], t, &txn);
    assert_int_equal(lb_apply_encode(&h.batch, h.plan, &apply_lb), 0);
    struct skip skip[MAX_SKIPS];
    size_t nskip = 0;
    assert_int_equal(apply(&h, 0, skip, &nskip), LB_APPLY_DUPLICATE);
    assert_int_equal(nskip, 1);
    assert_string_equal(skip[0].field, "t:1");
    assert_int_equal(skip[0].marker, 9);
    assert_int_equal(h.conflicts, 0);
    assert_int_equal(total_of_ann(), 5);
    /* planned again without it, the others count */
    assert_int_equal(apply_events(&h, batch, pos, 2), LB_APPLY_OK);
    assert_int_equal(total_of_ann(), 5 + 70 + 900);
    harness_close(&h);
}

/* A pod restarted with a smaller window: the window comes with each
 * request, so an id the set holds beyond it counts again at once: a retry
 * further behind than the window is not looked up, and one within it that
 * finds its id held with a stamp the window has passed takes it as
 * forgotten; the set drops those ids when the board's newest event time
 * next moves by a second (only then is the set trimmed). */
static void a_smaller_window_counts_again_and_forgets_when_time_moves(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    const int64_t late = MAY1 + 2000000; /* 2000 s on */
    struct lb_event evs[] = {sum_event("a", 1, MAY1),     sum_event("z", 2, MAY1 + 1000),
                             sum_event("b", 10, late),    sum_event("c", 100, late),
                             sum_event("a", 1000, MAY1),  sum_event("b", 10, late),
                             sum_event("a", 20000, late), sum_event("d", 300000, late + 1000)};
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 0, 2}, {"t", 0, 3},
                                {"t", 0, 4}, {"t", 0, 5}, {"t", 0, 6}, {"t", 0, 7}};
    assert_int_equal(apply_events(&h, evs, pos, 3), LB_APPLY_OK);
    harness_close(&h);
    harness_load(&h,
                 BASE_CONFIG "profiles:\n"
                             "  - {name: xp, aggregation: sum, tie_break: none,\n"
                             "     dedupe: {window: 10m}, windows: {alltime: {}}}\n",
                 redis);
    assert_int_equal(apply_events(&h, &evs[3], &pos[3], 1), LB_APPLY_OK); /* in b's second */
    int64_t stamp;
    assert_true(score_of(redis, "lb:{d}:~seen", "a", &stamp)); /* 2000 s behind: kept so far */
    assert_true(score_of(redis, "lb:{d}:~seen", "z", &stamp));
    assert_int_equal(apply_events(&h, &evs[4], &pos[4], 1), LB_APPLY_OK);        /* a's retry */
    assert_int_equal(apply_events(&h, &evs[5], &pos[5], 1), LB_APPLY_DUPLICATE); /* b's */
    assert_int_equal(apply_events(&h, &evs[6], &pos[6], 1), LB_APPLY_OK);        /* a, reused now */
    assert_int_equal(total_of_ann(), 1 + 2 + 10 + 100 + 1000 + 20000);
    assert_true(score_of(redis, "lb:{d}:~seen", "z", &stamp));
    assert_int_equal(apply_events(&h, &evs[7], &pos[7], 1), LB_APPLY_OK); /* a second on */
    assert_false(score_of(redis, "lb:{d}:~seen", "z", &stamp));
    assert_true(score_of(redis, "lb:{d}:~seen", "a", &stamp));
    assert_int_equal(stamp, lb_dedupe_stamp(&evs[6]));
    assert_true(score_of(redis, "lb:{d}:~seen", "b", &stamp));
    assert_true(score_of(redis, "lb:{d}:~seen", "d", &stamp));
    assert_int_equal(total_of_ann(), 1 + 2 + 10 + 100 + 1000 + 20000 + 300000);
    harness_close(&h);
}

/* A marker that is not a number (written by hand) fails the request with
 * Redis' script error before any write (the projector holds the board for
 * an operator, as for any script error); read as no marker, the batch would
 * be applied again. */
static void a_marker_that_is_not_a_number_fails_before_any_write(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    redisReply *r = redis_server_command(redis, "HSET lb:{d}:~applied t:0 oops");
    freeReplyObject(r);
    struct lb_event ev = sum_event("x", 5, MAY1);
    struct lb_position pos = {"t", 0, 0};
    uint32_t txn;
    lb_plan_reset(h.plan);
    plan_event(h.plan, &ev, &pos, MAY1, &txn);
    assert_int_equal(lb_apply_encode(&h.batch, h.plan, &apply_lb), 0);
    const struct lb_apply_request *req = &h.batch.requests[0];
    r = redis_server_send(redis, h.batch.bytes.data + req->offset, req->len, 1);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "arithmetic"));
    freeReplyObject(r);
    r = redis_server_command(redis, "EXISTS lb:{d}:alltime lb:{d}:~seen");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = redis_server_command(redis, "HGET lb:{d}:~applied t:0");
    assert_string_equal(r->str, "oops");
    freeReplyObject(r);
    harness_close(&h);
}

/* Within one batch the planner leaves a retry out itself; a board without
 * dedupe takes every record. */
static void a_retry_within_a_batch_is_left_out_by_the_planner(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    struct lb_event evs[] = {sum_event("x", 5, MAY1), sum_event("x", 5, MAY1),
                             sum_event("x", 6, MAY1), sum_event("y", 7, MAY1)};
    lb_plan_reset(h.plan);
    static const int expected[] = {LB_PLAN_ADDED, LB_PLAN_DUPLICATE, LB_PLAN_CONFLICT,
                                   LB_PLAN_ADDED};
    for (int i = 0; i < 4; i++) {
        struct lb_position pos = {"t", 0, i};
        uint32_t txn = 99;
        enum lb_reject reason;
        assert_int_equal(lb_plan_add(h.plan, &evs[i], &pos, MAY1, &txn, &reason), expected[i]);
        assert_int_equal(reason, LB_ACCEPT);
        assert_int_equal(txn, 0);
    }
    assert_int_equal(lb_apply_encode(&h.batch, h.plan, &apply_lb), 0);
    struct skip skip[MAX_SKIPS];
    size_t nskip = 0;
    assert_int_equal(apply(&h, 0, skip, &nskip), LB_APPLY_OK);
    assert_int_equal(total_of_ann(), 5 + 7);
    assert_int_equal(marker_of(redis, "d", "t:0"), 3);
    harness_close(&h);

    harness_open(&h,
                 BASE_CONFIG "profiles:\n  - {name: xp, aggregation: sum, tie_break: none, "
                             "dedupe: off, windows: {alltime: {}}}\n",
                 redis);
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 0, 1}, {"t", 0, 2}, {"t", 0, 3}};
    assert_int_equal(apply_events(&h, evs, pos, 4), LB_APPLY_OK);
    assert_int_equal(total_of_ann(), 5 + 5 + 6 + 7);
    redisReply *r = redis_server_command(redis, "EXISTS lb:{d}:~seen");
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    harness_close(&h);
}

/* A dedupe set of the wrong type is found before any write. */
static void a_dedupe_set_of_the_wrong_type_writes_nothing(void **state)
{
    (void)state;
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    freeReplyObject(redis_server_command(redis, "SET lb:{d}:~seen oops"));
    struct lb_event ev = sum_event("x", 5, MAY1);
    struct lb_position pos = {"t", 0, 0};
    assert_int_equal(apply_events(&h, &ev, &pos, 1), LB_APPLY_WRONGTYPE);
    int64_t score;
    assert_false(score_of(redis, "lb:{d}:alltime", "ann", &score));
    assert_int_equal(marker_of(redis, "d", "t:0"), -1);
    harness_close(&h);
}

/* A user whose ACL rule lacks a command the script calls after its first
 * write (Redis would keep the writes before it): refused up front, named,
 * nothing written; one lacking a read the script makes first is named too,
 * not taken for a key of the wrong type. With the rule fixed, the same
 * batch counts once. */
static void a_command_the_user_may_not_run_is_named_and_nothing_written(void **state)
{
    (void)state;
    static const char *const missing[] = {"hset",  "time",   "pexpireat", "zremrangebyscore",
                                          "hmget", "zmscore"};
    struct harness h;
    harness_open(&h, DEDUPE_CONFIG, redis);
    struct lb_event ev = sum_event("x", 5, MAY1);
    struct lb_position pos = {"t", 0, 0};
    for (size_t k = 0; k < sizeof(missing) / sizeof(missing[0]); k++) {
        freeReplyObject(
            redis_server_command(redis, "ACL SETUSER narrow on >pw ~* +@all -%s", missing[k]));
        freeReplyObject(redis_server_command(redis, "AUTH narrow pw"));
        assert_int_equal(apply_events(&h, &ev, &pos, 1), LB_APPLY_NOPERM);
        freeReplyObject(redis_server_command(redis, "AUTH default any"));
        assert_string_equal(h.noperm, missing[k]);
        int64_t score;
        assert_false(score_of(redis, "lb:{d}:alltime", "ann", &score));
        assert_int_equal(marker_of(redis, "d", "t:0"), -1);
        redisReply *r = redis_server_command(redis, "EXISTS lb:{d}:~seen");
        assert_int_equal(r->integer, 0);
        freeReplyObject(r);
    }
    assert_int_equal(apply_events(&h, &ev, &pos, 1), LB_APPLY_OK);
    assert_int_equal(apply_events(&h, &ev, &pos, 1), LB_APPLY_OK); /* redelivered */
    assert_int_equal(total_of_ann(), 5);
    freeReplyObject(redis_server_command(redis, "ACL DELUSER narrow"));
    harness_close(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_sequences_match_the_reference_in_every_mode),
        cmocka_unit_test(latest_boards_are_exact_with_stamps_of_either_kind),
        cmocka_unit_test(players_in_any_partition_and_many_retractions_match_the_reference),
        cmocka_unit_test(closed_windows_take_no_write_and_the_others_stay_exact),
        cmocka_unit_test(a_window_swapped_in_alone_carries_its_own_stamps),
        cmocka_unit_test(a_player_in_two_partitions_keeps_the_newest_in_each_window),
        cmocka_unit_test(a_board_keeps_newest_only_when_it_starts_with_it),
        cmocka_unit_test(a_wrong_type_where_a_stamp_moves_writes_nothing),
        cmocka_unit_test(a_stamp_moving_into_a_key_on_another_node_writes_nothing),
        cmocka_unit_test(a_sum_leaving_its_range_is_refused_whole),
        cmocka_unit_test(a_request_with_thousands_leaving_the_range_is_refused_whole),
        cmocka_unit_test(requests_larger_than_unpack_takes_are_exact),
        cmocka_unit_test(ties_at_equal_score_and_time_keep_both_members),
        cmocka_unit_test(a_wrong_type_at_the_last_key_of_a_sum_board_writes_nothing),
        cmocka_unit_test(a_wrong_type_at_the_last_key_of_a_latest_board_writes_nothing),
        cmocka_unit_test(a_wrong_type_at_the_last_key_of_a_best_board_writes_nothing),
        cmocka_unit_test(a_wrong_type_in_a_transaction_fails_it_and_a_resend_is_exact),
        cmocka_unit_test(a_zombie_batch_leaves_a_sum_board_and_its_marker_unchanged),
        cmocka_unit_test(a_swap_merges_the_open_windows_less_the_closed_ones),
        cmocka_unit_test(a_swap_of_a_copy_that_lost_writes_changes_nothing),
        cmocka_unit_test(a_board_keeping_newest_has_its_hash_fence_after_replay),
        cmocka_unit_test(a_zombie_transaction_leaves_a_best_board_and_its_marker_unchanged),
        cmocka_unit_test(the_script_reads_the_markers_a_transaction_wrote),
        cmocka_unit_test(another_protocol_is_refused_and_writes_nothing),
        cmocka_unit_test(a_bad_expiry_is_refused_before_any_write),
        cmocka_unit_test(a_retry_counts_once_and_another_payload_is_a_conflict),
        cmocka_unit_test(a_command_the_user_may_not_run_is_named_and_nothing_written),
        cmocka_unit_test(the_dedupe_window_follows_event_time),
        cmocka_unit_test(a_batch_wider_than_the_window_keeps_only_its_ids_within_it),
        cmocka_unit_test(a_duplicate_after_a_cut_run_is_named_by_its_own_offset),
        cmocka_unit_test(a_smaller_window_counts_again_and_forgets_when_time_moves),
        cmocka_unit_test(a_marker_that_is_not_a_number_fails_before_any_write),
        cmocka_unit_test(a_retry_within_a_batch_is_left_out_by_the_planner),
        cmocka_unit_test(a_dedupe_set_of_the_wrong_type_writes_nothing),
    };
    return cmocka_run_group_tests(tests, start_redis, stop_redis);
}
