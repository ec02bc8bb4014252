/* The planner and the requests apply.c encodes from its plans: fan-out to
 * windows, merging per aggregation, retractions, segments, expiry, and the
 * EVALSHA of protocol 3 or the transaction of a board without a script (parsed back with hiredis'
 * reader: a request is an array of bulk strings, which the reader parses like a reply). What the
 * script does with a request is tested against a real redis-server in
 * test_semantics and test_apply. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <hiredis/hiredis.h>

#include "apply.h"
#include "oom.h"
#include "config.h"
#include "plan_event.h"
#include "planner.h"
#include "slot.h"

/* requests under "lb:", latest boards free to keep ~newest */
static const struct lb_apply_options apply_lb = {"lb:", 0};

#define DAY INT64_C(86400000)
/* 2026-05-04T10:00:00Z, a Monday */
#define MAY4     INT64_C(1777852800000)
#define MAY4_10H (MAY4 + 10 * 3600000)
#define EPOCH    INT64_C(1735689600000) /* 2025-01-01, the default */

static const char config_text[] = "kafka: {brokers: b, topics: [t]}\n"
                                  "input: {schemas: {1: s.avsc}}\n"
                                  "redis: {nodes: [a:1]}\n"
                                  "profiles:\n"
                                  "  - name: low\n"
                                  "    match: \"golf*\"\n"
                                  "    order: asc\n"
                                  "    tie_break: none\n"
                                  "    windows: {alltime: {}}\n"
                                  "  - name: last\n"
                                  "    match: \"last*\"\n"
                                  "    aggregation: latest\n"
                                  "    windows: {alltime: {}}\n"
                                  "  - name: recent\n"
                                  "    match: \"now*\"\n"
                                  "    aggregation: latest\n"
                                  "    windows: {alltime: {}, daily: 2d, custom: [{dim: patch}]}\n"
                                  "  - name: xp\n"
                                  "    match: \"xp*\"\n"
                                  "    aggregation: sum\n"
                                  "    score_max: 1000\n"
                                  "    windows: {alltime: {}}\n"
                                  "  - name: fixed\n"
                                  "    match: \"top*\"\n"
                                  "    retractions: reject\n"
                                  "    windows: {alltime: {}, daily: 2d}\n"
                                  "  - name: default\n"
                                  "    windows:\n"
                                  "      alltime: {}\n"
                                  "      daily: 2d\n"
                                  "      weekly: 7d\n"
                                  "      monthly: 31d\n"
                                  "      custom: [{dim: patch, ttl: 90d}]\n";

struct fixture {
    struct lb_config *config;
    struct lb_plan *plan;
    struct lb_apply_batch batch;
};

static int setup(void **state)
{
    static struct fixture f;
    char err[1024];
    if (lb_config_load_string("t.yaml", config_text, strlen(config_text), &f.config, err,
                              sizeof(err)) != 0)
        fail_msg("%s", err);
    f.plan = lb_plan_new(&(struct lb_plan_options){f.config->profiles, f.config->nprofiles});
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_plan_free(f->plan);
    lb_apply_batch_free(&f->batch);
    lb_config_free(f->config);
    return 0;
}

/* An event with an id of its own (a ring of ids: the planner borrows them
 * until the request is built). */
static struct lb_event event(const char *board, const char *player, int64_t score, int64_t ts)
{
    static char ids[1 << 14][12];
    static unsigned next;
    char *id = ids[next++ % (1 << 14)];
    snprintf(id, sizeof(ids[0]), "e%u", next);
    struct lb_event ev = {.event_id = {id, (uint32_t)strlen(id)},
                          .board = {board, (uint32_t)strlen(board)},
                          .player = {player, (uint32_t)strlen(player)},
                          .score = score,
                          .ts_ms = ts};
    return ev;
}

static struct lb_position at(int32_t partition, int64_t offset)
{
    return (struct lb_position){"scores", partition, offset};
}

static void encode(struct fixture *f)
{
    assert_int_equal(lb_apply_encode(&f->batch, f->plan, &apply_lb), 0);
}

/* Plans events 0..n-1 of 'evs' read at consecutive offsets from 'first' of
 * 'partition', as one batch; returns their (one) board's request. */
static uint32_t plan_batch(struct fixture *f, const struct lb_event *evs, size_t n,
                           int32_t partition, int64_t first)
{
    uint32_t txn = 0;
    lb_plan_reset(f->plan);
    for (size_t i = 0; i < n; i++) {
        struct lb_position pos = at(partition, first + (int64_t)i);
        assert_int_equal(plan_event(f->plan, &evs[i], &pos, MAY4_10H, &txn), LB_ACCEPT);
    }
    encode(f);
    return txn;
}

/* A request parsed back: keys and arguments, 1-based as the script sees them. */
struct request {
    redisReply *parsed;
    int numkeys;
    const char *keys[64];
    const char *args[512];
    size_t nargs;
};

static void parse(struct fixture *f, size_t txn, struct request *q)
{
    assert_true(txn < f->batch.count);
    const struct lb_apply_request *req = &f->batch.requests[txn];
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;
    redisReaderFeed(reader, f->batch.bytes.data + req->offset, req->len);
    assert_int_equal(redisReaderGetReply(reader, &reply), REDIS_OK);
    redisReaderFree(reader);
    assert_non_null(reply);
    q->parsed = reply;
    assert_string_equal(q->parsed->element[0]->str, "EVALSHA");
    assert_string_equal(q->parsed->element[1]->str, lb_apply_script_sha());
    q->numkeys = atoi(q->parsed->element[2]->str);
    for (int i = 0; i < q->numkeys; i++)
        q->keys[i + 1] = q->parsed->element[3 + i]->str;
    q->nargs = q->parsed->elements - 3 - (size_t)q->numkeys;
    for (size_t i = 0; i < q->nargs; i++)
        q->args[i + 1] = q->parsed->element[3 + (size_t)q->numkeys + i]->str;
}

static void release(struct request *q)
{
    freeReplyObject(q->parsed);
}

/* Where a latest board's players are (1-based): per segment their count,
 * then player, newest pairs. */
static size_t players_at(const struct request *q)
{
    size_t nseg = (size_t)atoi(q->args[9]), pos = 13 + 4 * nseg;
    for (size_t s = 1; s <= nseg; s++)
        pos += 3 * (size_t)atoi(q->args[12 + 4 * s]); /* the segment's event ids */
    return pos;
}

/* Where window key k's arguments are (1-based): its expiry kind at 'at'
 * (a latest board's window name after it), then the counts per segment, its
 * plain entries from 'plain' and its special ones from 'special'. */
struct key_args {
    size_t at, plain, nplain, special, nspecial;
};

static struct key_args key_args(const struct request *q, int k)
{
    char mode = q->args[2][0];
    size_t nseg = (size_t)atoi(q->args[9]), width = mode == 's' ? 3 : 2;
    size_t swidth = mode == 'l' ? 4 : width + 1, head = mode == 'l' ? 3 : 2;
    size_t pos = players_at(q);
    for (size_t s = 1; mode == 'l' && s <= nseg; s++)
        pos += 1 + 2 * (size_t)atoi(q->args[pos]);
    struct key_args a = {0};
    for (int i = 1; i <= k; i++) {
        a = (struct key_args){.at = pos, .plain = pos + head + 2 * nseg};
        for (size_t s = 0; s < nseg; s++) {
            a.nplain += (size_t)atoi(q->args[pos + head + s]);
            a.nspecial += (size_t)atoi(q->args[pos + head + nseg + s]);
        }
        a.special = a.plain + width * a.nplain;
        pos = a.special + swidth * a.nspecial;
    }
    return a;
}

static void expect(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        fail_msg("expected \"%s\", got \"%s\"", want, got);
}

/* Composite for the default profile (T = 30, 1 s ticks, earliest wins),
 * from the rule, independently of score.c. */
static long long composite(int64_t score, int64_t ts)
{
    return (long long)(score * (INT64_C(1) << 30) + ((INT64_C(1) << 30) - 1 - (ts - EPOCH) / 1000));
}

static const char *num(long long v)
{
    static char buf[8][32];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, 32, "%lld", v);
    return b;
}

static void one_event_fans_out_to_every_window_in_one_request(void **state)
{
    struct fixture *f = *state;
    struct lb_event ev = event("g456", "alice", 700, MAY4_10H);
    struct lb_dim dim = {{"patch", 5}, {"1.29", 4}};
    struct lb_position pos = at(3, 41);
    uint32_t txn = 99;
    struct request q;

    ev.dims = &dim;
    ev.ndims = 1;
    lb_plan_reset(f->plan);
    assert_int_equal(plan_event(f->plan, &ev, &pos, MAY4_10H, &txn), LB_ACCEPT);
    assert_int_equal(txn, 0);
    encode(f);
    assert_int_equal(f->batch.count, 1);
    assert_int_equal(f->batch.requests[0].slot, lb_key_slot("g456", 4));
    parse(f, 0, &q);

    static const char *const keys[] = {"lb:{g456}:alltime", "lb:{g456}:daily:2026-05-04",
                                       "lb:{g456}:weekly:2026-W19", "lb:{g456}:monthly:2026-05",
                                       "lb:{g456}:patch:1.29"};
    assert_int_equal(q.numkeys, 9);
    expect(q.keys[1], "lb:{g456}:~applied");
    expect(q.keys[2], "lb:{g456}:~offsets");
    expect(q.keys[3], "lb:{g456}:~fence");
    expect(q.keys[4], "lb:{g456}:~seen");
    for (int k = 0; k < 5; k++)
        expect(q.keys[5 + k], keys[k]);
    /* protocol, best, desc, 30 tie bits, earlier wins, 5 keys, 1 segment,
     * dedupe over 24 h (the default of a board that takes retractions) */
    expect(q.args[1], LB_APPLY_VERSION_TEXT);
    expect(q.args[2], "b");
    expect(q.args[3], "d");
    expect(q.args[4], "30");
    expect(q.args[5], "0");
    expect(q.args[8], "5");
    expect(q.args[9], "1");
    expect(q.args[10], "86400");
    expect(q.args[11], "-"); /* latest boards only: ~newest, the keys' start */
    expect(q.args[12], "");
    expect(q.args[13], "scores:3");
    expect(q.args[14], "41");
    expect(q.args[15], "41");
    expect(q.args[16], "1");
    /* the event's id: event time in seconds * 2^20 + fingerprint, id; then
     * its offset */
    long long stamp = atoll(q.args[17]);
    expect(q.args[18], ev.event_id.ptr);
    expect(q.args[19], "41");
    assert_int_equal(stamp >> 20, MAY4_10H / 1000);
    assert_int_equal(stamp, lb_dedupe_stamp(&ev));
    /* expiry: window end + ttl for time windows, a sliding ttl for custom */
    static const char expire[] = {'n', 'a', 'a', 'a', 't'};
    const char *expire_at[] = {"0", num(MAY4 + 1 * DAY + 2 * DAY), num(MAY4 + 7 * DAY + 7 * DAY),
                               num(INT64_C(1780272000000) + 31 * DAY), "7776000000"};
    for (int k = 1; k <= 5; k++) {
        struct key_args a = key_args(&q, k);
        assert_int_equal(a.nplain, 1);
        assert_int_equal(a.nspecial, 0);
        assert_int_equal(q.args[a.at][0], expire[k - 1]);
        expect(q.args[a.at + 1], expire_at[k - 1]);
        /* a best board's plain entry: composite, member, for ZADD as is */
        expect(q.args[a.plain], num(composite(700, MAY4_10H)));
        expect(q.args[a.plain + 1], "alice");
    }
    assert_int_equal(q.nargs, 19 + 5 * (2 + 2 + 2));
    release(&q);
}

static void duplicates_merge_to_the_best_and_boards_split(void **state)
{
    struct fixture *f = *state;
    struct lb_event evs[] = {
        event("g1", "bob", 10, MAY4_10H),        event("g1", "bob", 30, MAY4_10H + 5000),
        event("g1", "bob", 30, MAY4_10H + 9000), event("g1", "carol", 5, MAY4_10H),
        event("golf1", "dan", 70, MAY4_10H),     event("golf1", "dan", 68, MAY4_10H + 1),
    };
    uint32_t txn[6];
    struct request q;
    lb_plan_reset(f->plan);
    for (size_t i = 0; i < 6; i++) {
        struct lb_position pos = at(0, (int64_t)i);
        assert_int_equal(plan_event(f->plan, &evs[i], &pos, MAY4_10H, &txn[i]), LB_ACCEPT);
    }
    assert_int_equal(txn[0], txn[3]);
    assert_int_not_equal(txn[0], txn[4]);
    encode(f);
    assert_int_equal(f->batch.count, 2);

    /* g1: bob's best is 30 at the earlier time; carol follows */
    parse(f, txn[0], &q);
    expect(q.args[14], "0"); /* segment: offsets 0..3 */
    expect(q.args[15], "3");
    struct key_args a = key_args(&q, 1);
    assert_int_equal(a.nplain, 2);
    expect(q.args[a.plain], num(composite(30, MAY4_10H + 5000)));
    expect(q.args[a.plain + 1], "bob");
    expect(q.args[a.plain + 2], num(composite(5, MAY4_10H)));
    expect(q.args[a.plain + 3], "carol");
    release(&q);

    /* golf1 (asc, no ties): the lowest raw score, no expiry */
    parse(f, txn[4], &q);
    expect(q.args[3], "a");
    expect(q.args[4], "0");
    a = key_args(&q, 1);
    assert_int_equal(a.nplain, 1);
    expect(q.args[a.at], "n");
    expect(q.args[a.plain], "68");
    expect(q.args[a.plain + 1], "dan");
    release(&q);
    /* g1: bob and carol in four windows (no patch dim); golf1: dan in one */
    assert_int_equal(lb_plan_stats(f->plan)->member_updates, 2 * 4 + 1);
}

static void a_retraction_keeps_its_place_in_the_sequence(void **state)
{
    struct fixture *f = *state;
    struct lb_event evs[] = {event("g5", "eve", 90, MAY4_10H), event("g5", "eve", 10, MAY4_10H),
                             event("g5", "eve", 20, MAY4_10H + 1000),
                             event("g5", "fay", 50, MAY4_10H), event("g5", "fay", 50, MAY4_10H)};
    evs[1].op = LB_OP_RETRACT;
    evs[4].op = LB_OP_RETRACT;
    struct request q;
    uint32_t txn = plan_batch(f, evs, 5, 1, 100);
    parse(f, txn, &q);
    struct key_args a = key_args(&q, 1);
    assert_int_equal(a.nplain, 0);
    assert_int_equal(a.nspecial, 2);
    /* eve: removed, then 20 (the 90 before the retraction is forgotten) */
    expect(q.args[a.special], "rv");
    expect(q.args[a.special + 1], num(composite(20, MAY4_10H + 1000)));
    expect(q.args[a.special + 2], "eve");
    /* fay: removed, nothing after */
    expect(q.args[a.special + 3], "r");
    expect(q.args[a.special + 5], "fay");
    release(&q);
}

static void latest_keeps_the_greatest_event_time_whatever_the_order(void **state)
{
    struct fixture *f = *state;
    struct lb_event evs[] = {event("last1", "gus", 5, MAY4_10H + 3000),
                             event("last1", "gus", 9, MAY4_10H + 1000),
                             event("last1", "gus", 7, MAY4_10H + 3000)};
    struct request q;
    uint32_t txn = plan_batch(f, evs, 3, 0, 7);
    parse(f, txn, &q);
    expect(q.args[2], "l");
    /* keys: markers, fence, dedupe set, the window, its event-time hash,
     * the board's ~newest */
    assert_int_equal(q.numkeys, 7);
    expect(q.keys[6], "lb:{last1}:alltime:~ts");
    expect(q.keys[7], "lb:{last1}:~newest");
    expect(q.args[11], "b");
    expect(q.args[12], "lb:{last1}:");
    /* the player's newest: equal times, the later offset (9, score 7) wins
     * over the earlier (7); the window holding it */
    size_t players = players_at(&q);
    expect(q.args[players], "1");
    expect(q.args[players + 1], "gus");
    char newest[64];
    snprintf(newest, sizeof(newest), "%015lld:%020d|alltime|", (long long)(MAY4_10H + 3000), 9);
    expect(q.args[players + 2], newest);
    struct key_args a = key_args(&q, 1);
    expect(q.args[a.at + 2], "alltime");
    /* a plain entry: the composite, the player (its stamp is its newest's) */
    assert_int_equal(a.nplain, 1);
    expect(q.args[a.plain], num(composite(7, MAY4_10H + 3000)));
    expect(q.args[a.plain + 1], "gus");
    release(&q);
}

/* A latest board's request names each player once per segment with its
 * newest stamp and the calendar windows holding it (custom ones never);
 * an entry holding it goes plain (composite, player), an older one as a
 * special with its own stamp, a retraction as before. */
static void latest_requests_name_each_players_newest_once(void **state)
{
    struct fixture *f = *state;
    struct lb_event evs[] = {
        event("now1", "amy", 1, MAY4_10H), event("now1", "amy", 2, MAY4_10H - DAY),
        event("now1", "bo", 3, MAY4_10H), event("now1", "bo", 0, MAY4_10H + 1000)};
    struct lb_dim dim = {{"patch", 5}, {"1.2", 3}};
    evs[0].dims = &dim;
    evs[0].ndims = 1;
    evs[3].op = LB_OP_RETRACT;
    struct request q;
    uint32_t txn = plan_batch(f, evs, 4, 0, 20);
    parse(f, txn, &q);
    assert_int_equal(q.numkeys, 4 + 2 * 4 + 1);
    expect(q.keys[13], "lb:{now1}:~newest");
    size_t players = players_at(&q);
    expect(q.args[players], "2");
    expect(q.args[players + 1], "bo"); /* retracted: nothing to hold */
    expect(q.args[players + 2], "");
    expect(q.args[players + 3], "amy");
    char stamp[64], newest[96];
    snprintf(stamp, sizeof(stamp), "%015lld:%020d", (long long)MAY4_10H, 20);
    snprintf(newest, sizeof(newest), "%s|alltime|daily:2026-05-04|", stamp);
    expect(q.args[players + 4], newest);
    static const char *const names[] = {"alltime", "daily:2026-05-04", "", "daily:2026-05-03"};
    static const size_t nplain[] = {1, 1, 1, 0}, nspecial[] = {1, 1, 0, 1};
    for (int k = 1; k <= 4; k++) {
        struct key_args a = key_args(&q, k);
        expect(q.args[a.at + 2], names[k - 1]);
        assert_int_equal(a.nplain, nplain[k - 1]);
        assert_int_equal(a.nspecial, nspecial[k - 1]);
        if (a.nplain) {
            expect(q.args[a.plain], num(composite(1, MAY4_10H)));
            expect(q.args[a.plain + 1], "amy");
        }
        if (k <= 2) { /* bo: removed, nothing after */
            expect(q.args[a.special], "r");
            expect(q.args[a.special + 3], "bo");
        }
    }
    /* amy's older event, the one of May 3: a value with its own stamp */
    struct key_args a = key_args(&q, 4);
    expect(q.args[a.special], "v");
    expect(q.args[a.special + 1], num(composite(2, MAY4_10H - DAY)));
    snprintf(stamp, sizeof(stamp), "%015lld:%020d", (long long)(MAY4_10H - DAY), 21);
    expect(q.args[a.special + 2], stamp);
    expect(q.args[a.special + 3], "amy");
    release(&q);
}

static void sum_adds_scores_and_keeps_the_latest_time_as_the_tie(void **state)
{
    struct fixture *f = *state;
    struct lb_event evs[] = {event("xp1", "hal", 100, MAY4_10H + 5000),
                             event("xp1", "hal", 250, MAY4_10H + 2000),
                             event("xp1", "hal", -50, MAY4_10H + 9000)};
    uint32_t txn;
    struct request q;
    lb_plan_reset(f->plan);
    /* a score below score_min (0) is rejected, not added */
    struct lb_position pos = at(0, 1);
    assert_int_equal(plan_event(f->plan, &evs[2], &pos, MAY4_10H, &txn), LB_REJECT_SCORE_RANGE);
    for (size_t i = 0; i < 2; i++) {
        pos = at(0, 2 + (int64_t)i);
        assert_int_equal(plan_event(f->plan, &evs[i], &pos, MAY4_10H, &txn), LB_ACCEPT);
    }
    encode(f);
    parse(f, txn, &q);
    expect(q.args[2], "s");
    expect(q.args[6], "0");
    expect(q.args[7], num((INT64_C(1) << 23) - 1)); /* the largest total T = 30 leaves */
    struct key_args a = key_args(&q, 1);
    assert_int_equal(a.nplain, 1);
    expect(q.args[a.plain], "350");
    expect(q.args[a.plain + 2], "hal");
    /* earliest-wins desc: the total was reached at the later time, whose tie
     * is the smaller one */
    expect(q.args[a.plain + 1], num((INT64_C(1) << 30) - 1 - (MAY4_10H + 5000 - EPOCH) / 1000));
    release(&q);
}

static void each_partition_is_a_segment_with_its_offsets(void **state)
{
    struct fixture *f = *state;
    uint32_t txn;
    struct request q;
    lb_plan_reset(f->plan);
    static const int32_t partitions[] = {2, 5, 2, 5, 2};
    static const int64_t offsets[] = {10, 70, 11, 90, 15};
    char players[5][8]; /* the planner borrows them until the request is built */
    for (size_t i = 0; i < 5; i++) {
        snprintf(players[i], sizeof(players[i]), "p%zu", i);
        /* one second apart, so the ids' order by event time is known */
        struct lb_event ev = event("g9", players[i], 1, MAY4_10H + (int64_t)i * 1000);
        struct lb_position pos = at(partitions[i], offsets[i]);
        assert_int_equal(plan_event(f->plan, &ev, &pos, MAY4_10H, &txn), LB_ACCEPT);
    }
    encode(f);
    parse(f, txn, &q);
    expect(q.args[9], "2");
    expect(q.args[13], "scores:2");
    expect(q.args[14], "10");
    expect(q.args[15], "15");
    expect(q.args[16], "3");
    expect(q.args[17], "scores:5");
    expect(q.args[18], "70");
    expect(q.args[19], "90");
    expect(q.args[20], "2");
    /* the event ids come grouped by segment too, each segment's newest
     * first (the script bisects them by event time), as (stamp, id) pairs,
     * then their offsets in the same order */
    static const char *const offsets_grouped[] = {"15", "11", "10", "90", "70"};
    static const int event_of[] = {4, 2, 0, 3, 1}; /* i of the loop above */
    for (size_t i = 0; i < 5; i++) {
        expect(q.args[21 + 2 * 5 + i], offsets_grouped[i]);
        long long seconds = atoll(q.args[21 + 2 * i]) >> LB_DEDUPE_FP_BITS;
        assert_int_equal(seconds, (MAY4_10H + event_of[i] * 1000) / 1000);
    }
    /* each id with its own stamp: the events' ids were given in order */
    assert_int_equal(atoi(q.args[22] + 1) - atoi(q.args[22 + 2 * 2] + 1), 4);
    assert_int_equal(atoi(q.args[22 + 2 * 3] + 1) - atoi(q.args[22 + 2 * 4] + 1), 2);
    /* each key's entries come grouped by segment (counts 3 and 2), so the
     * script can hand any applied segment's run to ZADD as it is */
    struct key_args a = key_args(&q, 1);
    expect(q.args[a.at + 2], "3");
    expect(q.args[a.at + 3], "2");
    static const char *const grouped[] = {"p0", "p2", "p4", "p1", "p3"};
    for (size_t i = 0; i < 5; i++)
        expect(q.args[a.plain + 2 * i + 1], grouped[i]);
    release(&q);
}

static void expired_windows_are_not_resurrected(void **state)
{
    struct fixture *f = *state;
    /* fifteen days later: the daily window (ends + 2d) is gone, weekly (+7d)
     * is gone too, monthly (+31d) and alltime are alive */
    struct lb_event ev = event("g2", "erin", 1, MAY4_10H);
    struct lb_position pos = at(0, 0);
    uint32_t txn;
    struct request q;
    lb_plan_reset(f->plan);
    assert_int_equal(plan_event(f->plan, &ev, &pos, MAY4_10H + 15 * DAY, &txn), LB_ACCEPT);
    encode(f);
    assert_int_equal(lb_plan_stats(f->plan)->late, 2);
    parse(f, 0, &q);
    assert_int_equal(q.numkeys, 6);
    expect(q.keys[5], "lb:{g2}:alltime");
    expect(q.keys[6], "lb:{g2}:monthly:2026-05");
    release(&q);
}

static void out_of_range_events_are_rejected_and_plan_nothing(void **state)
{
    struct fixture *f = *state;
    struct lb_event high = event("g3", "x", 8388608, MAY4_10H);
    struct lb_event early = event("g3", "x", 1, INT64_C(1000));
    struct lb_position pos = at(0, 0);
    uint32_t txn;
    lb_plan_reset(f->plan);
    assert_int_equal(plan_event(f->plan, &high, &pos, MAY4_10H, &txn), LB_REJECT_SCORE_RANGE);
    assert_int_equal(plan_event(f->plan, &early, &pos, MAY4_10H, &txn), LB_REJECT_TIME_RANGE);
    encode(f);
    assert_int_equal(f->batch.count, 1);
    assert_int_equal(f->batch.requests[0].len, 0); /* nothing to send for g3 */
}

static void a_bad_custom_dim_rejects_the_whole_event(void **state)
{
    struct fixture *f = *state;
    char long_value[200];
    memset(long_value, 'v', sizeof(long_value));
    struct lb_dim dims[] = {{{"patch", 5}, {long_value, 129}}, {{"patch", 5}, {"1.2\n", 4}}};
    struct lb_position pos = at(0, 0);
    uint32_t txn;
    for (size_t i = 0; i < 2; i++) {
        struct lb_event ev = event("g4", "x", 1, MAY4_10H);
        ev.dims = &dims[i];
        ev.ndims = 1;
        ev.op = i ? LB_OP_RETRACT : LB_OP_SUBMIT; /* a retraction too */
        lb_plan_reset(f->plan);
        assert_int_equal(plan_event(f->plan, &ev, &pos, MAY4_10H, &txn), LB_REJECT_INVALID_DIMS);
        encode(f);
        assert_int_equal(f->batch.requests[0].len, 0); /* no window written */
        assert_int_equal(lb_plan_stats(f->plan)->member_updates, 0);
    }
}

static void a_board_without_a_profile_is_rejected(void **state)
{
    (void)state;
    static const char no_catch_all[] = "kafka: {brokers: b, topics: [t]}\n"
                                       "input: {schemas: {1: s.avsc}}\n"
                                       "redis: {nodes: [a:1]}\n"
                                       "profiles:\n"
                                       "  - {name: only, match: \"g*\"}\n";
    struct lb_config *config;
    char err[512];
    uint32_t txn;
    struct lb_apply_batch batch = {0};
    assert_int_equal(lb_config_load_string("t.yaml", no_catch_all, strlen(no_catch_all), &config,
                                           err, sizeof(err)),
                     0);
    struct lb_plan *plan =
        lb_plan_new(&(struct lb_plan_options){config->profiles, config->nprofiles});
    struct lb_event stray = event("x1", "p", 1, MAY4_10H), fine = event("g1", "p", 1, MAY4_10H);
    struct lb_position pos = at(0, 0);
    assert_int_equal(plan_event(plan, &stray, &pos, MAY4_10H, &txn), LB_REJECT_INVALID_BOARD);
    assert_int_equal(plan_event(plan, &fine, &pos, MAY4_10H, &txn), LB_ACCEPT);
    assert_int_equal(lb_apply_encode(&batch, plan, &apply_lb), 0);
    assert_int_equal(batch.count, 2);
    assert_int_equal(batch.requests[0].len, 0);
    assert_true(batch.requests[txn].len > 0);
    lb_apply_batch_free(&batch);
    lb_plan_free(plan);
    lb_config_free(config);
}

/* A split board: each player's events go to its shard's tag (FNV-1a 64 of
 * the player modulo 3: the standard test vector "a" is 0xaf63dc4c8601ec8c),
 * each shard a request of its own under a tag whose slot lies in the middle
 * half of its third of the slots; the board's own entry writes nothing; a
 * board named like one of its shards is refused. */
static void a_split_board_writes_each_player_to_its_shard(void **state)
{
    (void)state;
    static const char text[] = "kafka: {brokers: b, topics: [t]}\n"
                               "input: {schemas: {1: s.avsc}}\n"
                               "redis: {nodes: [a:1]}\n"
                               "profiles:\n"
                               "  - {name: hot, match: \"h*\", split: {shards: 3}, "
                               "windows: {alltime: {}}}\n";
    struct lb_config *config;
    char err[512], tags[3][64];
    assert_int_equal(lb_config_load_string("t.yaml", text, strlen(text), &config, err, sizeof(err)),
                     0);
    assert_int_equal(config->profiles[0].shards, 3);
    assert_int_equal(lb_player_shard("a", 1, 3), UINT64_C(0xaf63dc4c8601ec8c) % 3);
    for (uint32_t i = 0; i < 3; i++) {
        size_t n = lb_shard_tag("h1", 2, 3, i, tags[i], sizeof(tags[i]));
        assert_true(n > 4 && strncmp(tags[i], "h1#", 3) == 0);
        uint16_t slot = lb_crc16(tags[i], n) & (LB_SLOTS - 1);
        uint32_t lo = i * LB_SLOTS / 3, hi = (i + 1) * LB_SLOTS / 3;
        assert_true(slot >= lo + (hi - lo) / 4 && slot < hi - (hi - lo) / 4);
        struct lb_str board;
        uint32_t shard = 9;
        assert_int_equal(lb_shard_parse(config->profiles, 1, (struct lb_str){tags[i], (uint32_t)n},
                                        &board, &shard),
                         1);
        assert_int_equal(shard, i);
        assert_int_equal(board.len, 2);
    }
    struct lb_str board;
    uint32_t shard;
    assert_int_equal(
        lb_shard_parse(config->profiles, 1, (struct lb_str){"h1#0.999999", 11}, &board, &shard),
        0); /* not the tag shard 0 has */
    struct lb_plan *plan =
        lb_plan_new(&(struct lb_plan_options){config->profiles, config->nprofiles});
    struct lb_apply_batch batch = {0};
    static const char *const players[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    uint32_t txn_of[8];
    for (int i = 0; i < 8; i++) {
        struct lb_event ev = event("h1", players[i], 10 + i, MAY4_10H);
        struct lb_position pos = at(0, i);
        assert_int_equal(plan_event(plan, &ev, &pos, MAY4_10H, &txn_of[i]), LB_ACCEPT);
    }
    struct lb_event named = event(tags[1], "a", 1, MAY4_10H);
    struct lb_position pos = at(0, 8);
    uint32_t txn;
    assert_int_equal(plan_event(plan, &named, &pos, MAY4_10H, &txn), LB_REJECT_INVALID_BOARD);
    assert_int_equal(lb_apply_encode(&batch, plan, &apply_lb), 0);
    struct lb_plan_view v;
    lb_plan_view(plan, &v);
    for (int i = 0; i < 8; i++) {
        const struct lb_plan_board *b = &v.boards[txn_of[i]];
        uint32_t want = lb_player_shard(players[i], 1, 3);
        assert_int_equal(b->shard, want);
        assert_int_equal(b->id.len, strlen(tags[want]));
        assert_memory_equal(b->id.ptr, tags[want], b->id.len);
        assert_int_equal(b->slot, lb_crc16(tags[want], strlen(tags[want])) & (LB_SLOTS - 1));
        assert_true(batch.requests[txn_of[i]].len > 0);
        assert_memory_equal(b->base.ptr, "h1", 2);
    }
    assert_int_equal(batch.requests[0].len, 0); /* h1 itself: nothing under its own tag */
    lb_apply_batch_free(&batch);
    lb_plan_free(plan);
    lb_config_free(config);
}

/* Batches of one size settle the arena on one chunk: after the first few,
 * planning a batch takes nothing from malloc. */
static void many_events_reuse_the_arena(void **state)
{
    struct fixture *f = *state;
    char players[3000][8];
    uint64_t settled = 0;
    for (int round = 0; round < 6; round++) {
        lb_plan_reset(f->plan);
        for (int i = 0; i < 3000; i++) {
            uint32_t txn;
            struct lb_position pos = at(0, i);
            snprintf(players[i], sizeof(players[i]), "p%d", i);
            struct lb_event ev = event(i % 2 ? "a" : "b", players[i], i, MAY4_10H + i * 1000);
            assert_int_equal(plan_event(f->plan, &ev, &pos, MAY4_10H, &txn), LB_ACCEPT);
        }
        encode(f);
        assert_int_equal(lb_plan_stats(f->plan)->member_updates, 3000 * 4);
        if (round == 3)
            settled = lb_plan_chunks_made(f->plan);
        if (round > 3)
            assert_int_equal(lb_plan_chunks_made(f->plan), settled);
    }
    assert_true(settled > 0);
}

/* projector/'name' from the source tree (LB_SOURCE_DIR), NUL-terminated. */
static char *read_source(const char *name)
{
    char path[4096], *text = NULL;
    const char *src = getenv("LB_SOURCE_DIR");
    snprintf(path, sizeof(path), "%s/projector/%s", src ? src : ".", name);
    FILE *in = fopen(path, "rb");
    if (!in)
        fail_msg("cannot open %s (set LB_SOURCE_DIR)", path);
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), in)) > 0)
        fwrite(chunk, 1, got, out);
    fclose(in);
    fclose(out);
    return text;
}

/* The SHA1 the build embedded is the SHA1 of the embedded text (what
 * EVALSHA names), and the text is apply.lua's with mark.lua in place of its
 * line "-- include mark.lua", byte for byte. */
static void the_script_sha_is_the_sha1_of_the_script(void **state)
{
    (void)state;
    const char *script = lb_apply_script();
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    assert_true(EVP_Digest(script, strlen(script), digest, &n, EVP_sha1(), NULL));
    assert_int_equal(n, 20);
    char hex[41];
    for (unsigned i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    assert_string_equal(lb_apply_script_sha(), hex);

    char *apply = read_source("apply.lua"), *mark = read_source("mark.lua"), *text = NULL;
    static const char line[] = "-- include mark.lua\n";
    char *at = strstr(apply, line);
    assert_non_null(at);
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    fprintf(out, "%.*s%s%s", (int)(at - apply), apply, mark, at + strlen(line));
    fclose(out);
    free(apply);
    free(mark);
    assert_string_equal(script, text);
    free(text);
}

/* A best board whose profile rejects retractions goes as a transaction:
 * the fence looked at, ZADD GT per window with its expiry, the markers by
 * ZADD GT into their sorted set. */
static void a_board_without_retractions_is_a_plain_transaction(void **state)
{
    struct fixture *f = *state;
    struct lb_event ev = event("top1", "ann", 9, MAY4_10H);
    struct lb_position pos = at(3, 41);
    uint32_t txn;
    lb_plan_reset(f->plan);
    struct lb_event retract = ev;
    retract.op = LB_OP_RETRACT;
    assert_int_equal(plan_event(f->plan, &retract, &pos, MAY4_10H, &txn), LB_REJECT_RETRACTION);
    assert_string_equal(lb_reject_name(LB_REJECT_RETRACTION), "retraction_refused");
    assert_int_equal(plan_event(f->plan, &ev, &pos, MAY4_10H, &txn), LB_ACCEPT);
    encode(f);
    const struct lb_apply_request *req = &f->batch.requests[0];
    assert_int_equal(req->is_txn, 1);
    assert_int_equal(req->ncommands, 5);

    const char *want[][6] = {
        {"MULTI"},
        {"TYPE", "lb:{top1}:~fence"},
        {"ZADD", "lb:{top1}:alltime", "GT", num(composite(9, MAY4_10H)), "ann"},
        {"ZADD", "lb:{top1}:daily:2026-05-04", "GT", num(composite(9, MAY4_10H)), "ann"},
        {"PEXPIREAT", "lb:{top1}:daily:2026-05-04", num(MAY4 + 3 * DAY)},
        {"ZADD", "lb:{top1}:~offsets", "GT", "41", "scores:3"},
        {"EXEC"},
    };
    redisReader *reader = redisReaderCreate();
    redisReaderFeed(reader, f->batch.bytes.data + req->offset, req->len);
    for (size_t c = 0; c < sizeof(want) / sizeof(want[0]); c++) {
        void *got = NULL;
        assert_int_equal(redisReaderGetReply(reader, &got), REDIS_OK);
        assert_non_null(got);
        redisReply *cmd = got;
        size_t n = 0;
        while (n < 6 && want[c][n])
            n++;
        assert_int_equal(cmd->elements, n);
        for (size_t i = 0; i < n; i++)
            expect(cmd->element[i]->str, want[c][i]);
        freeReplyObject(got);
    }
    void *rest = NULL;
    assert_int_equal(redisReaderGetReply(reader, &rest), REDIS_OK);
    assert_null(rest); /* nothing after EXEC */
    redisReaderFree(reader);
}

/* The script's rule for an id a dedupe set holds, as replay --verify reads
 * it: forgotten when its second is more than the window (whole seconds,
 * rounded up) behind the newest one's; its fingerprint does not count. */
static void an_id_more_than_the_window_behind_counts_as_forgotten(void **state)
{
    (void)state;
    struct lb_profile hour = {.dedupe_window_ms = 3600000}, odd = {.dedupe_window_ms = 1500};
    const int64_t fp = (INT64_C(1) << LB_DEDUPE_FP_BITS) - 1, t = INT64_C(1777593600);
    int64_t newest = t << LB_DEDUPE_FP_BITS;
    assert_false(lb_apply_seen_forgotten(&hour, newest, newest));
    assert_false(lb_apply_seen_forgotten(&hour, newest + fp, (t - 3600) << LB_DEDUPE_FP_BITS));
    assert_true(lb_apply_seen_forgotten(&hour, newest, ((t - 3601) << LB_DEDUPE_FP_BITS) + fp));
    assert_int_equal(lb_apply_dedupe_seconds(&odd), 2);
    assert_false(lb_apply_seen_forgotten(&odd, newest, (t - 2) << LB_DEDUPE_FP_BITS));
    assert_true(lb_apply_seen_forgotten(&odd, newest, ((t - 3) << LB_DEDUPE_FP_BITS) + fp));
    /* before 1970: seconds round down */
    int64_t early = -(INT64_C(10) << LB_DEDUPE_FP_BITS) + 5;
    assert_false(lb_apply_seen_forgotten(&odd, early, -(INT64_C(12) << LB_DEDUPE_FP_BITS)));
    assert_true(lb_apply_seen_forgotten(&odd, early, -(INT64_C(12) << LB_DEDUPE_FP_BITS) - 1));
}

/* The script's "duplicate" answer: triples of strings (marker field,
 * offset, d or c); any other shape is not an answer of the script. */
static void a_duplicate_answer_is_read_in_triples(void **state)
{
    (void)state;
    static const char *const replies[] = {
        "*7\r\n$9\r\nduplicate\r\n$3\r\nt:0\r\n$1\r\n5\r\n$1\r\nd\r\n"
        "$3\r\nt:2\r\n$2\r\n17\r\n$1\r\nc\r\n",
        "*3\r\n$9\r\nduplicate\r\n$3\r\nt:0\r\n$1\r\n5\r\n",       /* a triple cut short */
        "*1\r\n$9\r\nduplicate\r\n",                               /* nothing named */
        "*4\r\n$9\r\nduplicate\r\n$3\r\nt:0\r\n:5\r\n$1\r\nd\r\n", /* not a string */
    };
    for (size_t k = 0; k < 4; k++) {
        redisReader *reader = redisReaderCreate();
        void *reply = NULL;
        redisReaderFeed(reader, replies[k], strlen(replies[k]));
        assert_int_equal(redisReaderGetReply(reader, &reply), REDIS_OK);
        redisReaderFree(reader);
        struct lb_apply_answer a;
        const char *field;
        int64_t offset;
        int conflict;
        assert_int_equal(lb_apply_parse(reply, &a), k == 0 ? LB_APPLY_DUPLICATE : LB_APPLY_UNKNOWN);
        if (k == 0) {
            assert_int_equal(lb_apply_duplicate(&a, 0, &field, &offset, &conflict), 0);
            assert_string_equal(field, "t:0");
            assert_int_equal(offset, 5);
            assert_int_equal(conflict, 0);
            assert_int_equal(lb_apply_duplicate(&a, 1, &field, &offset, &conflict), 0);
            assert_string_equal(field, "t:2");
            assert_int_equal(offset, 17);
            assert_int_equal(conflict, 1);
        }
        assert_int_equal(lb_apply_duplicate(&a, k == 0 ? 2 : 0, &field, &offset, &conflict), -1);
        freeReplyObject(reply);
    }
}

/* The script's "ok" answer: applied and skipped, then optionally
 * "rebuilding", "opened" (in that order) and "late" with the closed windows
 * named, each with its close offsets; anything else is not an answer of the
 * script. */
static void an_ok_answer_names_rebuilding_opened_and_late(void **state)
{
    (void)state;
    static const struct {
        const char *reply;
        enum lb_apply_status status;
        int rebuilding, opened;
        size_t late;
    } cases[] = {
        {"*3\r\n$2\r\nok\r\n:4\r\n:1\r\n", LB_APPLY_OK, 0, 0, 0},
        {"*4\r\n$2\r\nok\r\n:4\r\n:0\r\n$6\r\nopened\r\n", LB_APPLY_OK, 0, 1, 0},
        {"*5\r\n$2\r\nok\r\n:4\r\n:0\r\n$10\r\nrebuilding\r\n$6\r\nopened\r\n", LB_APPLY_OK, 1, 1,
         0},
        {"*9\r\n$2\r\nok\r\n:4\r\n:0\r\n$6\r\nopened\r\n$4\r\nlate\r\n"
         "$16\r\ndaily:2026-11-23\r\n$13\r\nt:1=40,t:10=7\r\n"
         "$15\r\nweekly:2026-W48\r\n$0\r\n\r\n",
         LB_APPLY_OK, 0, 1, 2},
        {"*8\r\n$2\r\nok\r\n:4\r\n:0\r\n$6\r\nopened\r\n$4\r\nlate\r\n"
         "$16\r\ndaily:2026-11-23\r\n$6\r\nt:1=40\r\n$15\r\nweekly:2026-W48\r\n",
         LB_APPLY_UNKNOWN, 0, 0, 0}, /* a window without its close offsets */
        {"*5\r\n$2\r\nok\r\n:4\r\n:0\r\n$6\r\nopened\r\n$10\r\nrebuilding\r\n", LB_APPLY_UNKNOWN, 0,
         0, 0}, /* out of order */
        {"*4\r\n$2\r\nok\r\n:4\r\n:0\r\n$6\r\nopen!!\r\n", LB_APPLY_UNKNOWN, 0, 0, 0},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        redisReader *reader = redisReaderCreate();
        void *reply = NULL;
        redisReaderFeed(reader, cases[k].reply, strlen(cases[k].reply));
        assert_int_equal(redisReaderGetReply(reader, &reply), REDIS_OK);
        redisReaderFree(reader);
        struct lb_apply_answer a;
        assert_int_equal(lb_apply_parse(reply, &a), cases[k].status);
        if (cases[k].status == LB_APPLY_OK) {
            assert_int_equal(a.applied, 4);
            assert_int_equal(a.rebuilding, cases[k].rebuilding);
            assert_int_equal(a.opened, cases[k].opened);
            assert_int_equal(a.late, cases[k].late);
        }
        if (cases[k].late) { /* each partition's close offset; 0 for one not named */
            int64_t first_late = -1;
            assert_string_equal(lb_apply_late(&a, 0, "t", 10, &first_late), "daily:2026-11-23");
            assert_int_equal(first_late, 7);
            lb_apply_late(&a, 0, "t", 1, &first_late);
            assert_int_equal(first_late, 40);
            lb_apply_late(&a, 0, "t", 2, &first_late);
            assert_int_equal(first_late, 0);
            /* close offsets not known (put back from a record without them) */
            assert_string_equal(lb_apply_late(&a, 1, "t", 1, &first_late), "weekly:2026-W48");
            assert_int_equal(first_late, -1);
            assert_null(lb_apply_late(&a, 2, "t", 1, &first_late));
            assert_string_equal(lb_apply_late_name(&a, 1), "weekly:2026-W48");
            assert_null(lb_apply_late_name(&a, 2));
        }
        freeReplyObject(reply);
    }
}

/* ---- out of memory ----------------------------------------------------------- */

/* Two batches of many boards, players and windows, planned and encoded by a
 * new planner: every failed allocation is reported (-1 from lb_plan_new,
 * lb_plan_add or lb_apply_encode), including one in the reset between the
 * batches, after which nothing is planned until the next reset. */
static int plan_two_batches(void *ctx)
{
    const struct lb_config *config = ctx;
    struct lb_plan *plan =
        lb_plan_new(&(struct lb_plan_options){config->profiles, config->nprofiles});
    struct lb_apply_batch batch = {0};
    int failed = !plan;
    char boards[64][16], players[64][16];
    for (int i = 0; i < 64; i++) {
        snprintf(boards[i], sizeof(boards[i]), "%s%d", i % 2 ? "top" : "g", i);
        snprintf(players[i], sizeof(players[i]), "p%d", i * 7);
    }
    for (int round = 0; round < 2 && !failed; round++) {
        lb_plan_reset(plan);
        for (int i = 0; i < 3000 && !failed; i++) {
            struct lb_event ev = event(boards[(i * 13) % 64], players[(i * 29) % 64], i,
                                       MAY4_10H + (int64_t)(i % 40) * DAY);
            struct lb_dim patch = {{"patch", 5}, {"1.2", 3}};
            ev.dims = &patch;
            ev.ndims = 1;
            struct lb_position pos = at(i % 4, round * 3000 + i);
            uint32_t txn;
            enum lb_reject reason;
            failed = lb_plan_add(plan, &ev, &pos, MAY4_10H, &txn, &reason) < 0;
        }
        failed = failed || lb_apply_encode(&batch, plan, &apply_lb) != 0;
    }
    lb_apply_batch_free(&batch);
    lb_plan_free(plan);
    return failed == oom_failed() ? 0 : -1;
}

static void running_out_of_memory_anywhere_in_planning_is_reported(void **state)
{
    struct fixture *f = *state;
    assert_true(oom_sweep("planner", plan_two_batches, f->config, 1) > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_event_fans_out_to_every_window_in_one_request),
        cmocka_unit_test(running_out_of_memory_anywhere_in_planning_is_reported),
        cmocka_unit_test(duplicates_merge_to_the_best_and_boards_split),
        cmocka_unit_test(a_retraction_keeps_its_place_in_the_sequence),
        cmocka_unit_test(latest_keeps_the_greatest_event_time_whatever_the_order),
        cmocka_unit_test(latest_requests_name_each_players_newest_once),
        cmocka_unit_test(sum_adds_scores_and_keeps_the_latest_time_as_the_tie),
        cmocka_unit_test(each_partition_is_a_segment_with_its_offsets),
        cmocka_unit_test(expired_windows_are_not_resurrected),
        cmocka_unit_test(out_of_range_events_are_rejected_and_plan_nothing),
        cmocka_unit_test(a_bad_custom_dim_rejects_the_whole_event),
        cmocka_unit_test(a_board_without_a_profile_is_rejected),
        cmocka_unit_test(a_split_board_writes_each_player_to_its_shard),
        cmocka_unit_test(many_events_reuse_the_arena),
        cmocka_unit_test(the_script_sha_is_the_sha1_of_the_script),
        cmocka_unit_test(a_board_without_retractions_is_a_plain_transaction),
        cmocka_unit_test(a_duplicate_answer_is_read_in_triples),
        cmocka_unit_test(an_id_more_than_the_window_behind_counts_as_forgotten),
        cmocka_unit_test(an_ok_answer_names_rebuilding_opened_and_late),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
