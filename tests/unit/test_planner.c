/* The planner: fan-out to windows, merging, expiry and the RESP it emits.
 * The emitted bytes are parsed back with hiredis' reader (RESP requests are
 * arrays of bulk strings, which the reader parses like replies). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "config.h"
#include "planner.h"
#include "slot.h"

#define DAY INT64_C(86400000)
/* 2026-05-04T10:00:00Z, a Monday */
#define MAY4_10H (INT64_C(1777852800000) + 10 * 3600000)

static const char config_text[] = "kafka: {brokers: b, topics: [t]}\n"
                                  "input: {schemas: {1: s.avsc}}\n"
                                  "redis: {nodes: [a:1]}\n"
                                  "profiles:\n"
                                  "  - name: low\n"
                                  "    match: \"golf*\"\n"
                                  "    order: asc\n"
                                  "    tie_break: none\n"
                                  "    windows: {alltime: {}}\n"
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
};

static int setup(void **state)
{
    static struct fixture f;
    char err[1024];
    if (lb_config_load_string("t.yaml", config_text, strlen(config_text), &f.config, err,
                              sizeof(err)) != 0)
        fail_msg("%s", err);
    f.plan = lb_plan_new(f.config);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_plan_free(f->plan);
    lb_config_free(f->config);
    return 0;
}

static struct lb_event event(const char *board, const char *player, int64_t score, int64_t ts)
{
    struct lb_event ev = {.board = {board, (uint32_t)strlen(board)},
                          .player = {player, (uint32_t)strlen(player)},
                          .score = score,
                          .ts_ms = ts};
    return ev;
}

/* Parses a transaction back into replies: MULTI, the commands, EXEC. */
static redisReply **parse(const char *bytes, size_t len, size_t *count)
{
    redisReader *reader = redisReaderCreate();
    redisReply **commands = calloc(256, sizeof(*commands));
    void *reply;
    *count = 0;
    redisReaderFeed(reader, bytes, len);
    while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply)
        commands[(*count)++] = reply;
    redisReaderFree(reader);
    return commands;
}

static void free_commands(redisReply **commands, size_t count)
{
    for (size_t i = 0; i < count; i++)
        freeReplyObject(commands[i]);
    free(commands);
}

static int arg_is(const redisReply *cmd, size_t i, const char *want)
{
    return i < cmd->elements && strcmp(cmd->element[i]->str, want) == 0;
}

/* Composite for the default profile (T = 30, epoch 2025-01-01, 1 s ticks,
 * earliest wins), from the rule, independently of score.c. */
static long long composite(int64_t score, int64_t ts)
{
    int64_t epoch = INT64_C(1735689600000);
    return (long long)(score * (INT64_C(1) << 30) + ((INT64_C(1) << 30) - 1 - (ts - epoch) / 1000));
}

static void one_event_fans_out_to_every_window_in_one_transaction(void **state)
{
    struct fixture *f = *state;
    struct lb_event ev = event("g456", "alice", 700, MAY4_10H);
    struct lb_dim dim = {{"patch", 5}, {"1.29", 4}};
    uint32_t txn = 99;
    size_t ntxns, ncmds;
    char want[32];

    ev.dims = &dim;
    ev.ndims = 1;
    lb_plan_reset(f->plan);
    assert_int_equal(lb_plan_add(f->plan, &ev, MAY4_10H, &txn), LB_ACCEPT);
    assert_int_equal(txn, 0);
    assert_int_equal(lb_plan_finish(f->plan), 0);
    const struct lb_txn *txns = lb_plan_txns(f->plan, &ntxns);
    assert_int_equal(ntxns, 1);
    assert_int_equal(txns[0].slot, lb_key_slot("g456", 4));
    redisReply **cmds = parse(lb_plan_bytes(f->plan) + txns[0].offset, txns[0].len, &ncmds);
    assert_int_equal(ncmds, txns[0].ncommands + 2);
    assert_true(arg_is(cmds[0], 0, "MULTI"));
    assert_true(arg_is(cmds[ncmds - 1], 0, "EXEC"));

    snprintf(want, sizeof(want), "%lld", composite(700, MAY4_10H));
    static const char *const keys[] = {"lb:{g456}:alltime", "lb:{g456}:daily:2026-05-04",
                                       "lb:{g456}:weekly:2026-W19", "lb:{g456}:monthly:2026-05",
                                       "lb:{g456}:patch:1.29"};
    /* expiry: window end + ttl, in ms, for time windows; a sliding TTL for custom */
    static const long long expire_at[] = {0, 1777852800000LL + 1 * DAY + 2 * DAY,
                                          1777852800000LL + 7 * DAY + 7 * DAY,
                                          1780272000000LL + 31 * DAY, 0};
    size_t c = 1;
    for (size_t k = 0; k < 5; k++) {
        assert_true(arg_is(cmds[c], 0, "ZADD"));
        assert_true(arg_is(cmds[c], 1, keys[k]));
        assert_true(arg_is(cmds[c], 2, "GT"));
        assert_true(arg_is(cmds[c], 3, want));
        assert_true(arg_is(cmds[c], 4, "alice"));
        c++;
        if (expire_at[k]) {
            char at[32];
            snprintf(at, sizeof(at), "%lld", expire_at[k]);
            assert_true(arg_is(cmds[c], 0, "PEXPIREAT"));
            assert_true(arg_is(cmds[c], 1, keys[k]));
            assert_true(arg_is(cmds[c], 2, at));
            c++;
        } else if (k == 4) {
            assert_true(arg_is(cmds[c], 0, "PEXPIRE"));
            assert_true(arg_is(cmds[c], 2, "7776000000"));
            c++;
        }
    }
    assert_int_equal(c, ncmds - 1);
    free_commands(cmds, ncmds);
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
    size_t ntxns, ncmds;
    lb_plan_reset(f->plan);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(lb_plan_add(f->plan, &evs[i], MAY4_10H, &txn[i]), LB_ACCEPT);
    assert_int_equal(txn[0], txn[3]);
    assert_int_not_equal(txn[0], txn[4]);
    assert_int_equal(lb_plan_finish(f->plan), 0);
    const struct lb_txn *txns = lb_plan_txns(f->plan, &ntxns);
    assert_int_equal(ntxns, 2);

    /* g1: bob's best is 30 at the earlier time; carol follows */
    redisReply **cmds =
        parse(lb_plan_bytes(f->plan) + txns[txn[0]].offset, txns[txn[0]].len, &ncmds);
    char bob[32], carol[32];
    snprintf(bob, sizeof(bob), "%lld", composite(30, MAY4_10H + 5000));
    snprintf(carol, sizeof(carol), "%lld", composite(5, MAY4_10H));
    assert_int_equal(cmds[1]->elements, 3 + 2 * 2);
    assert_true(arg_is(cmds[1], 3, bob) && arg_is(cmds[1], 4, "bob"));
    assert_true(arg_is(cmds[1], 5, carol) && arg_is(cmds[1], 6, "carol"));
    free_commands(cmds, ncmds);

    /* golf1 (asc, no ties): the lowest raw score, ZADD LT, no expiry */
    cmds = parse(lb_plan_bytes(f->plan) + txns[txn[4]].offset, txns[txn[4]].len, &ncmds);
    assert_int_equal(ncmds, 3);
    assert_true(arg_is(cmds[1], 1, "lb:{golf1}:alltime") && arg_is(cmds[1], 2, "LT"));
    assert_true(arg_is(cmds[1], 3, "68") && arg_is(cmds[1], 4, "dan"));
    free_commands(cmds, ncmds);
    /* g1: bob and carol in four windows (no patch dim); golf1: dan in one */
    assert_int_equal(lb_plan_stats(f->plan)->member_updates, 2 * 4 + 1);
}

static void expired_windows_are_not_resurrected(void **state)
{
    struct fixture *f = *state;
    /* ten days later: the daily window (ends + 2d) is gone, weekly (+7d)
     * is gone too, monthly (+31d) and alltime are alive */
    struct lb_event ev = event("g2", "erin", 1, MAY4_10H);
    uint32_t txn;
    size_t ntxns, ncmds;
    lb_plan_reset(f->plan);
    assert_int_equal(lb_plan_add(f->plan, &ev, MAY4_10H + 15 * DAY, &txn), LB_ACCEPT);
    assert_int_equal(lb_plan_finish(f->plan), 0);
    const struct lb_txn *txns = lb_plan_txns(f->plan, &ntxns);
    redisReply **cmds = parse(lb_plan_bytes(f->plan) + txns[0].offset, txns[0].len, &ncmds);
    assert_int_equal(lb_plan_stats(f->plan)->late, 2);
    for (size_t i = 0; i < ncmds; i++) {
        assert_false(arg_is(cmds[i], 1, "lb:{g2}:daily:2026-05-04"));
        assert_false(arg_is(cmds[i], 1, "lb:{g2}:weekly:2026-W19"));
    }
    assert_true(arg_is(cmds[1], 1, "lb:{g2}:alltime"));
    assert_true(arg_is(cmds[2], 1, "lb:{g2}:monthly:2026-05"));
    free_commands(cmds, ncmds);
}

static void out_of_range_events_are_rejected_and_plan_nothing(void **state)
{
    struct fixture *f = *state;
    struct lb_event high = event("g3", "x", 8388608, MAY4_10H);
    struct lb_event early = event("g3", "x", 1, INT64_C(1000));
    uint32_t txn;
    size_t ntxns;
    lb_plan_reset(f->plan);
    assert_int_equal(lb_plan_add(f->plan, &high, MAY4_10H, &txn), LB_REJECT_SCORE_RANGE);
    assert_int_equal(lb_plan_add(f->plan, &early, MAY4_10H, &txn), LB_REJECT_TIME_RANGE);
    assert_int_equal(lb_plan_finish(f->plan), 0);
    const struct lb_txn *txns = lb_plan_txns(f->plan, &ntxns);
    assert_int_equal(ntxns, 1);
    assert_int_equal(txns[0].len, 0); /* nothing to send for g3 */
}

static void a_bad_custom_dim_rejects_the_whole_event(void **state)
{
    struct fixture *f = *state;
    char long_value[200];
    memset(long_value, 'v', sizeof(long_value));
    struct lb_dim dims[] = {{{"patch", 5}, {long_value, 129}}, {{"patch", 5}, {"1.2\n", 4}}};
    uint32_t txn;
    size_t ntxns;
    for (size_t i = 0; i < 2; i++) {
        struct lb_event ev = event("g4", "x", 1, MAY4_10H);
        ev.dims = &dims[i];
        ev.ndims = 1;
        lb_plan_reset(f->plan);
        assert_int_equal(lb_plan_add(f->plan, &ev, MAY4_10H, &txn), LB_REJECT_INVALID_DIMS);
        assert_int_equal(lb_plan_finish(f->plan), 0);
        lb_plan_txns(f->plan, &ntxns);
        assert_int_equal(lb_plan_txns(f->plan, &ntxns)[0].len, 0); /* no window written */
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
    size_t ntxns;
    assert_int_equal(lb_config_load_string("t.yaml", no_catch_all, strlen(no_catch_all), &config,
                                           err, sizeof(err)),
                     0);
    struct lb_plan *plan = lb_plan_new(config);
    struct lb_event stray = event("x1", "p", 1, MAY4_10H), fine = event("g1", "p", 1, MAY4_10H);
    assert_int_equal(lb_plan_add(plan, &stray, MAY4_10H, &txn), LB_REJECT_INVALID_BOARD);
    assert_int_equal(lb_plan_add(plan, &fine, MAY4_10H, &txn), LB_ACCEPT);
    assert_int_equal(lb_plan_finish(plan), 0);
    const struct lb_txn *txns = lb_plan_txns(plan, &ntxns);
    assert_int_equal(ntxns, 2);
    assert_int_equal(txns[0].len, 0);
    assert_int_equal(txns[txn].ncommands, 7); /* 4 ZADD + 3 PEXPIREAT */
    lb_plan_free(plan);
    lb_config_free(config);
}

static void many_events_reuse_the_arena(void **state)
{
    struct fixture *f = *state;
    char players[3000][8];
    for (int round = 0; round < 3; round++) {
        lb_plan_reset(f->plan);
        for (int i = 0; i < 3000; i++) {
            uint32_t txn;
            snprintf(players[i], sizeof(players[i]), "p%d", i);
            struct lb_event ev = event(i % 2 ? "a" : "b", players[i], i, MAY4_10H + i * 1000);
            assert_int_equal(lb_plan_add(f->plan, &ev, MAY4_10H, &txn), LB_ACCEPT);
        }
        assert_int_equal(lb_plan_finish(f->plan), 0);
        assert_int_equal(lb_plan_stats(f->plan)->member_updates, 3000 * 4);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_event_fans_out_to_every_window_in_one_transaction),
        cmocka_unit_test(duplicates_merge_to_the_best_and_boards_split),
        cmocka_unit_test(expired_windows_are_not_resurrected),
        cmocka_unit_test(out_of_range_events_are_rejected_and_plan_nothing),
        cmocka_unit_test(a_bad_custom_dim_rejects_the_whole_event),
        cmocka_unit_test(a_board_without_a_profile_is_rejected),
        cmocka_unit_test(many_events_reuse_the_arena),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
