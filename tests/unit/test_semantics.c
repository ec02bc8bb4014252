/* Property tests of the leaderboard semantics: random event sequences
 * (seeded, many) through the pure planner into an in-memory model of Redis
 * running the apply script, delivered the way Kafka and a crashing,
 * rebalancing consumer deliver them (random batch boundaries, redelivery
 * after crashes, stale batches from a zombie pod), compared with a reference
 * computed here from the events, each applied exactly once. Every
 * aggregation x order x tie-break.
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

#include "apply_model.h"
#include "config.h"
#include "planner.h"

#define EPOCH   INT64_C(1735689600000) /* 2025-01-01, the default */
#define HORIZON INT64_C(2745532800000) /* 2057-01-01 */
#define MAY1    INT64_C(1777593600000) /* 2026-05-01 */

static const char modes[] = "bls"; /* best, latest, sum */
static const char orders[] = "da"; /* desc, asc */
static const char ties[] = "eln";  /* earliest, latest, none */
static const char *const mode_names[] = {"best", "latest", "sum"};
static const char *const order_names[] = {"desc", "asc"};
static const char *const tie_names[] = {"earliest", "latest", "none"};

/* One profile per combination, matched by a board prefix like "l-a-e-". */
static char *config_text(void)
{
    static char text[16384];
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "kafka: {brokers: b, topics: [t]}\n"
                                "input: {schemas: {1: s.avsc}}\n"
                                "redis: {nodes: [a:1]}\n"
                                "profiles:\n");
    for (int m = 0; m < 3; m++)
        for (int o = 0; o < 2; o++)
            for (int t = 0; t < 3; t++)
                n += (size_t)snprintf(text + n, sizeof(text) - n,
                                      "  - name: %c%c%c\n"
                                      "    match: \"%c-%c-%c-*\"\n"
                                      "    aggregation: %s\n"
                                      "    order: %s\n"
                                      "    tie_break: %s\n"
                                      "    windows:\n"
                                      "      alltime: {}\n"
                                      "      daily: {ttl: 0s}\n"
                                      "      weekly: {ttl: 0s}\n"
                                      "      custom: [{dim: patch}]\n",
                                      modes[m], orders[o], ties[t], modes[m], orders[o], ties[t],
                                      mode_names[m], order_names[o], tie_names[t]);
    return text;
}

/* ---- events ------------------------------------------------------------------------ */

#define PARTITIONS 3
#define MAX_EVENTS 400

struct event {
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

static void generate(uint64_t seed, size_t count, struct sequence *seq)
{
    uint64_t rng = seed;
    char boards[10][32];
    for (int b = 0; b < 10; b++)
        snprintf(boards[b], sizeof(boards[b]), "%c-%c-%c-%d", modes[pick(&rng, 3)],
                 orders[pick(&rng, 2)], ties[pick(&rng, 3)], b);
    memset(seq, 0, sizeof(*seq));
    seq->count = count;
    for (size_t i = 0; i < count; i++) {
        struct event *e = &seq->events[i];
        unsigned player = pick(&rng, 7);
        snprintf(e->board, sizeof(e->board), "%s", boards[pick(&rng, 10)]);
        snprintf(e->player, sizeof(e->player), "p%u", player);
        e->partition = (int32_t)(player % PARTITIONS); /* the player is the message key */
        e->op = pick(&rng, 100) < 15 ? LB_OP_RETRACT : LB_OP_SUBMIT;
        e->score = (int64_t)pick(&rng, 40); /* few values: equal scores happen */
        /* 9 days, on whole minutes: equal times happen too */
        e->ts = MAY1 + (int64_t)pick(&rng, 9 * 24 * 60) * 60000 + (int64_t)pick(&rng, 3);
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

struct reference {
    struct cell cells[8192];
    size_t count;
};

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
    char keys[4][96];
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
    if (e->patch[0])
        snprintf(keys[nkeys++], sizeof(keys[0]), "lb:{%s}:patch:%s", e->board, e->patch);
    for (int k = 0; k < nkeys; k++) {
        struct cell *c = cell(ref, e, keys[k], e->player);
        if (e->op == LB_OP_RETRACT) {
            c->present = 0;
            continue;
        }
        if (mode == 'b') {
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

/* ---- driving the planner into the model -------------------------------------------- */

struct harness {
    struct lb_config *config;
    struct lb_plan *plan;
    struct model *model;
};

static struct lb_event as_event(const struct event *e, struct lb_dim *dim)
{
    struct lb_event ev = {.board = {e->board, (uint32_t)strlen(e->board)},
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
 * NULL), leaving out events of a partition at or below its 'skip' marker. */
static void plan(struct harness *h, const struct sequence *seq, const size_t *batch, size_t n,
                 const char *only, const struct model_partial *skip, size_t nskip)
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
            excluded |= strcmp(skip[s].field, field) == 0 && e->offset <= skip[s].marker;
        if (excluded)
            continue;
        struct lb_dim dim;
        struct lb_event ev = as_event(e, &dim);
        struct lb_position pos = {"t", e->partition, e->offset};
        assert_int_equal(lb_plan_add(h->plan, &ev, &pos, MAY1, &txn), LB_ACCEPT);
    }
    assert_int_equal(lb_plan_finish(h->plan), 0);
}

static enum model_answer apply(struct harness *h, const struct lb_txn *txn,
                               struct model_partial *partial, size_t *npartial)
{
    char overflow[4][128];
    size_t noverflow;
    enum model_answer answer = model_apply(h->model, lb_plan_bytes(h->plan) + txn->offset, txn->len,
                                           partial, npartial, overflow, &noverflow, PARTITIONS);
    assert_int_not_equal(answer, MODEL_BAD_REQUEST);
    assert_int_not_equal(answer, MODEL_OVERFLOW);
    return answer;
}

/* Delivers one batch as the pipeline does: every board's request; a board
 * answering "partial" is planned again without the events already applied,
 * until it goes through. */
static void deliver(struct harness *h, const struct sequence *seq, const size_t *batch, size_t n)
{
    char again[16][32];
    struct model_partial skips[16][PARTITIONS];
    size_t nskips[16], nagain = 0, ntxns;

    plan(h, seq, batch, n, NULL, NULL, 0);
    const struct lb_txn *txns = lb_plan_txns(h->plan, &ntxns);
    for (size_t t = 0; t < ntxns; t++) {
        if (!txns[t].len)
            continue;
        if (apply(h, &txns[t], skips[nagain], &nskips[nagain]) == MODEL_PARTIAL) {
            assert_true(nagain < 16);
            snprintf(again[nagain++], sizeof(again[0]), "%.*s", (int)txns[t].board.len,
                     txns[t].board.ptr);
        }
    }
    for (size_t b = 0; b < nagain; b++) {
        for (int attempt = 0;; attempt++) {
            assert_true(attempt < 4);
            plan(h, seq, batch, n, again[b], skips[b], nskips[b]);
            txns = lb_plan_txns(h->plan, &ntxns);
            assert_int_equal(ntxns, 1);
            if (!txns[0].len || apply(h, &txns[0], skips[b], &nskips[b]) == MODEL_OK)
                break;
        }
    }
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
static void run_sequence(struct harness *h, uint64_t seed, size_t count)
{
    static struct sequence seq;
    static struct reference ref;
    uint64_t rng = seed * 31 + 7;
    size_t position[PARTITIONS] = {0}, committed[PARTITIONS] = {0};
    size_t old_batches[16][64], old_sizes[16] = {0}, nold = 0;

    generate(seed, count, &seq);
    ref.count = 0;
    for (int p = 0; p < PARTITIONS; p++)
        for (size_t i = 0; i < seq.length[p]; i++)
            apply_reference(&ref, &seq.events[seq.order[p][i]]);

    h->model = model_new();
    for (;;) {
        size_t batch[64], n = 0, want = 1 + pick(&rng, 40);
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
    }
    struct compare c = {.ref = &ref};
    model_each(h->model, check_member, &c);
    size_t expected = 0;
    for (size_t i = 0; i < ref.count; i++)
        expected += ref.cells[i].present;
    for (size_t i = 0; i < ref.count && !c.first_error[0]; i++) {
        int64_t score;
        if (ref.cells[i].present &&
            !model_score(h->model, ref.cells[i].key, ref.cells[i].member, &score))
            snprintf(c.first_error, sizeof(c.first_error), "%s %s: missing", ref.cells[i].key,
                     ref.cells[i].member);
    }
    if (!c.first_error[0] && c.seen != expected)
        snprintf(c.first_error, sizeof(c.first_error), "%zu members in the model, %zu expected",
                 c.seen, expected);
    model_free(h->model);
    if (c.first_error[0])
        fail_msg("seed %llu: %s", (unsigned long long)seed, c.first_error);
}

static void random_sequences_match_the_reference_in_every_mode(void **state)
{
    (void)state;
    struct harness h = {0};
    char err[1024];
    char *text = config_text();
    if (lb_config_load_string("t.yaml", text, strlen(text), &h.config, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    h.plan = lb_plan_new(h.config);
    for (uint64_t seed = 1; seed <= 300; seed++)
        run_sequence(&h, seed, 60 + seed % 240);
    lb_plan_free(h.plan);
    lb_config_free(h.config);
}

/* One configuration, its planner and a model, for the single-case tests. */
struct world {
    struct lb_config *config;
    struct lb_plan *plan;
    struct model *model;
    char overflow[4][128];
    size_t noverflow;
};

static void world_open(struct world *w, const char *text)
{
    char err[512];
    memset(w, 0, sizeof(*w));
    if (lb_config_load_string("t.yaml", text, strlen(text), &w->config, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    w->plan = lb_plan_new(w->config);
    w->model = model_new();
}

static void world_close(struct world *w)
{
    model_free(w->model);
    lb_plan_free(w->plan);
    lb_config_free(w->config);
}

/* Plans 'n' events read at 'pos' as one batch and applies its one request. */
static enum model_answer world_apply(struct world *w, const struct lb_event *evs,
                                     const struct lb_position *pos, size_t n)
{
    struct model_partial partial[4];
    size_t npartial, ntxns;
    uint32_t txn;
    lb_plan_reset(w->plan);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(lb_plan_add(w->plan, &evs[i], &pos[i], MAY1, &txn), LB_ACCEPT);
    assert_int_equal(lb_plan_finish(w->plan), 0);
    const struct lb_txn *txns = lb_plan_txns(w->plan, &ntxns);
    assert_int_equal(ntxns, 1);
    return model_apply(w->model, lb_plan_bytes(w->plan) + txns[0].offset, txns[0].len, partial,
                       &npartial, w->overflow, &w->noverflow, 4);
}

static void a_sum_leaving_its_range_is_refused_whole(void **state)
{
    (void)state;
    struct world w;
    world_open(&w, "kafka: {brokers: b, topics: [t]}\n"
                   "input: {schemas: {1: s.avsc}}\n"
                   "redis: {nodes: [a:1]}\n"
                   "profiles:\n"
                   "  - {name: xp, aggregation: sum, score_max: 100, sum_max: 150,\n"
                   "     windows: {alltime: {}, daily: {ttl: 0s}}}\n");
    for (int round = 0; round < 2; round++) {
        struct lb_event ev = {.board = {"x", 1}, .player = {"ann", 3}, .score = 80, .ts_ms = MAY1};
        struct lb_position pos = {"t", 0, round};
        /* 80 fits; 160 would not: nothing of the second is written */
        assert_int_equal(world_apply(&w, &ev, &pos, 1), round == 0 ? MODEL_OK : MODEL_OVERFLOW);
    }
    assert_string_equal(w.overflow[0], "ann");
    int64_t score;
    assert_true(model_score(w.model, "lb:{x}:alltime", "ann", &score));
    assert_true(score >> 30 == 80);
    assert_int_equal(model_marker(w.model, "lb:{x}:~applied", "t:0"), 0);
    world_close(&w);
}

static void ties_at_equal_score_and_time_keep_both_members(void **state)
{
    (void)state;
    /* Equal composites are legal: Redis orders them by member name, and the
     * planner must not merge two players because they tie. */
    struct world w;
    world_open(&w, "kafka: {brokers: b, topics: [t]}\n"
                   "input: {schemas: {1: s.avsc}}\n"
                   "redis: {nodes: [a:1]}\n");
    struct lb_event evs[] = {
        {.board = {"g", 1}, .player = {"amy", 3}, .score = 5, .ts_ms = MAY1},
        {.board = {"g", 1}, .player = {"bea", 3}, .score = 5, .ts_ms = MAY1},
    };
    struct lb_position pos[] = {{"t", 0, 0}, {"t", 1, 0}};
    assert_int_equal(world_apply(&w, evs, pos, 2), MODEL_OK);
    int64_t sa, sb;
    assert_true(model_score(w.model, "lb:{g}:alltime", "amy", &sa));
    assert_true(model_score(w.model, "lb:{g}:alltime", "bea", &sb));
    assert_true(sa == sb);
    world_close(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_sequences_match_the_reference_in_every_mode),
        cmocka_unit_test(a_sum_leaving_its_range_is_refused_whole),
        cmocka_unit_test(ties_at_equal_score_and_time_keep_both_members),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
