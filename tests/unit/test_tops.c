/* Merged tops of split boards (tops.h) against a real redis-server running
 * the apply script: shard keys written by hand, the merged top read back.
 * The expected tops are worked out by hand from one key's order (composite,
 * then member bytes; a desc board read from the high end). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "apply.h"
#include "clock.h"
#include "config.h"
#include "engine.h"
#include "redis_server.h"
#include "slot.h"
#include "tops.h"

struct fixture {
    struct redis_server *redis;
    struct redis_server *masters[3]; /* setup_masters: three, redis the first */
    struct lb_config *config;
    struct lb_cluster_options options;
    struct lb_tops *tops;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->redis = redis_server_start(1);
    f->config = redis_server_config(
        f->redis, "profiles:\n"
                  "  - {name: hi, match: \"hb\", split: {shards: 3, top: 3, staleness: 40ms}}\n"
                  "  - {name: lo, match: \"ha\", order: asc, split: {shards: 3, top: 2}}\n");
    f->options = lb_engine_cluster_options(f->config);
    f->tops = lb_tops_new(&(struct lb_tops_options){"lb:", &f->options});
    assert_non_null(f->tops);
    *state = f;
    return 0;
}

/* Three masters, every board split in two shards. */
static int setup_masters(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    redis_server_start_masters(f->masters, 3);
    f->redis = f->masters[0];
    f->config =
        redis_server_config(f->redis, "profiles:\n"
                                      "  - {name: s, match: \"*\", split: {shards: 2, top: 3}}\n");
    f->options = lb_engine_cluster_options(f->config);
    f->tops = lb_tops_new(&(struct lb_tops_options){"lb:", &f->options});
    assert_non_null(f->tops);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_tops_free(f->tops);
    lb_config_free(f->config);
    if (f->masters[0]) {
        for (int i = 0; i < 3; i++)
            redis_server_stop(f->masters[i]);
    } else {
        redis_server_stop(f->redis);
    }
    free(f);
    return 0;
}

/* "lb:{<board>#<i>.<k>}:alltime" */
static void shard_key(const char *board, uint32_t i, char *out, size_t cap)
{
    char tag[LB_TAG_MAX];
    lb_shard_tag(board, strlen(board), 3, i, tag, sizeof(tag));
    snprintf(out, cap, "lb:{%s}:alltime", tag);
}

static void zadd(struct fixture *f, const char *board, uint32_t i, const char *member, int score)
{
    char key[256];
    shard_key(board, i, key, sizeof(key));
    freeReplyObject(redis_server_command(f->redis, "ZADD %s %d %s", key, score, member));
}

/* Window alltime of 'board' changed by records of partition 0 of topic
 * "s" from 'offset' on (-1: none, as replay notes). */
static void note_from(struct fixture *f, const char *board, int64_t offset)
{
    const struct lb_profile *p = lb_config_profile_for(f->config, board, strlen(board));
    struct lb_tops_gate gate = {"s", 0, offset};
    assert_int_equal(lb_tops_note(f->tops, (struct lb_str){board, (uint32_t)strlen(board)}, p,
                                  (struct lb_str){"alltime", 7}, &gate, offset >= 0,
                                  lb_monotonic_ms()),
                     0);
}

static void note(struct fixture *f, const char *board)
{
    note_from(f, board, -1);
}

/* The merged top, ZRANGE low to high, as "member=score ..." */
static void top_of(struct fixture *f, const char *board, char *out, size_t cap)
{
    redisReply *r =
        redis_server_command(f->redis, "ZRANGE lb:{%s}:~top:alltime 0 -1 WITHSCORES", board);
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        n += (size_t)snprintf(out + n, cap - n, "%s%s=%s", n ? " " : "", r->element[i]->str,
                              r->element[i + 1]->str);
    freeReplyObject(r);
}

static long long integer(struct fixture *f, const char *format, const char *arg)
{
    redisReply *r = redis_server_command(f->redis, format, arg);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -99;
    freeReplyObject(r);
    return v;
}

/* The best K of the shards together, in one key's order: equal composites
 * in different shards by member bytes (a desc board keeps the highest
 * names), expiring with the last shard key; an asc board keeps the lowest. */
static void the_merged_top_is_one_keys_best(void **state)
{
    struct fixture *f = *state;
    char top[512], key[256];
    zadd(f, "hb", 0, "a", 100);
    zadd(f, "hb", 0, "z", 50);
    zadd(f, "hb", 1, "m", 100);
    zadd(f, "hb", 1, "b", 10);
    zadd(f, "hb", 2, "y", 100);
    for (uint32_t i = 0; i < 3; i++) {
        shard_key("hb", i, key, sizeof(key));
        freeReplyObject(
            redis_server_command(f->redis, "PEXPIRE %s %d", key, i == 1 ? 90000 : 30000));
    }
    note(f, "hb");
    assert_int_equal(lb_tops_pending(f->tops), 1);
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    top_of(f, "hb", top, sizeof(top));
    assert_string_equal(top, "a=100 m=100 y=100");
    shard_key("hb", 1, key, sizeof(key)); /* the last shard key to expire */
    long long last = integer(f, "PEXPIRETIME %s", key);
    assert_true(last > 0);
    assert_int_equal(integer(f, "PEXPIRETIME %s", "lb:{hb}:~top:alltime"), last);
    assert_int_equal(lb_tops_stats(f->tops)->refreshed, 1);

    zadd(f, "ha", 0, "c", 7);
    zadd(f, "ha", 1, "b", 7);
    zadd(f, "ha", 2, "a", 9);
    note(f, "ha");
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    top_of(f, "ha", top, sizeof(top));
    assert_string_equal(top, "b=7 c=7");
    assert_int_equal(integer(f, "PTTL %s", "lb:{ha}:~top:alltime"), -1); /* shards never expire */

    /* every shard key gone: so is the merged top, and the window's fields */
    for (uint32_t i = 0; i < 3; i++) {
        shard_key("ha", i, key, sizeof(key));
        freeReplyObject(redis_server_command(f->redis, "DEL %s", key));
    }
    note(f, "ha");
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    assert_int_equal(integer(f, "EXISTS %s", "lb:{ha}:~top:alltime"), 0);
    /* and its generation and lease: the ~tops hash keeps no field of a gone window */
    assert_int_equal(integer(f, "HEXISTS %s g:alltime", "lb:{ha}:~tops"), 0);
    assert_int_equal(integer(f, "HLEN %s", "lb:{ha}:~tops"), 0);
}

/* Another refresher's lease: the window stays noted (busy) and its top is
 * left alone until the lease is gone; then it is written. */
static void a_lease_held_elsewhere_is_waited_for(void **state)
{
    struct fixture *f = *state;
    char top[512];
    zadd(f, "hb", 0, "a", 5);
    freeReplyObject(redis_server_command(f->redis, "HSET lb:{hb}:~tops h:alltime other "
                                                   "u:alltime 99999999999999"));
    note(f, "hb");
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 300), 1);
    assert_true(lb_tops_stats(f->tops)->busy >= 1);
    assert_int_equal(integer(f, "EXISTS %s", "lb:{hb}:~top:alltime"), 0);
    freeReplyObject(redis_server_command(f->redis, "HDEL lb:{hb}:~tops h:alltime u:alltime"));
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    top_of(f, "hb", top, sizeof(top));
    assert_string_equal(top, "a=5");
}

/* The floor of partition 'partition' of topic 'topic', and how it shows. */
static int64_t floor_of(struct fixture *f, const char *topic, int32_t partition,
                        enum lb_hold_reason *why)
{
    return lb_tops_floor(f->tops, topic, partition, why);
}

/* The records that changed a window: their partition's commit stays at
 * their first (the floor) until the window's merged top is written, across
 * refreshes that fail; windows of two boards, the lower first wins. The
 * floor shows as a wait (none) within the staleness, as "top" past it
 * while the lease is another's, as "redis" while a refresh fails. */
static void a_commit_waits_until_the_merged_top_shows_its_records(void **state)
{
    struct fixture *f = *state;
    enum lb_hold_reason why;
    char key[256];
    zadd(f, "hb", 0, "a", 5);
    zadd(f, "ha", 1, "b", 5);
    assert_int_equal(floor_of(f, "s", 0, &why), -1);
    note_from(f, "ha", 110); /* staleness 1 s: a wait */
    assert_int_equal(floor_of(f, "s", 0, &why), 110);
    assert_int_equal(why, LB_HOLD_NONE);
    note_from(f, "hb", 120);
    note_from(f, "hb", 100); /* the same window again: its lowest record */
    assert_int_equal(floor_of(f, "s", 0, &why), 100);
    assert_int_equal(floor_of(f, "s", 1, &why), -1);
    assert_int_equal(floor_of(f, "t", 0, &why), -1);
    /* hb's refresh cannot take the lease: its records still wait, past
     * its staleness of 40 ms */
    freeReplyObject(redis_server_command(f->redis, "HSET lb:{hb}:~tops h:alltime other "
                                                   "u:alltime 99999999999999"));
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 300), 1);
    assert_int_equal(floor_of(f, "s", 0, &why), 100);
    assert_int_equal(why, LB_HOLD_TOP);
    freeReplyObject(redis_server_command(f->redis, "HDEL lb:{hb}:~tops h:alltime u:alltime"));
    /* a shard of another type: the refresh fails, a key to fix */
    shard_key("hb", 2, key, sizeof(key));
    freeReplyObject(redis_server_command(f->redis, "SET %s x", key));
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 300), 1);
    assert_int_equal(floor_of(f, "s", 0, &why), 100);
    assert_int_equal(why, LB_HOLD_BOARD);
    freeReplyObject(redis_server_command(f->redis, "DEL %s", key));
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    assert_int_equal(floor_of(f, "s", 0, &why), -1);
    assert_int_equal(integer(f, "EXISTS %s", "lb:{hb}:~top:alltime"), 1);
    /* noted again after its refresh: from the new records on */
    note_from(f, "ha", 130);
    assert_int_equal(floor_of(f, "s", 0, &why), 130);
}

/* The script's write step for window alltime of board hb as refresher A,
 * snapshot of generation 'gen' expiring at 'at' (-1 never, -2 no shard
 * has the window) with one entry: its answer's first word. */
static void t_write(struct fixture *f, int gen, const char *at, const char *expect)
{
    redisReply *r = redis_server_command(
        f->redis,
        "EVALSHA %s 2 lb:{hb}:~tops lb:{hb}:~top:alltime " LB_APPLY_VERSION_TEXT " T "
        "write A 5000 alltime %d %s 1 old",
        lb_apply_script_sha(), gen, at);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, expect);
    freeReplyObject(r);
}

/* The script's write step refuses a snapshot whose generation moved on
 * after its take (another refresher wrote a newer one), and one whose lease
 * another took: nothing is written. */
static void an_older_snapshot_never_overwrites_a_newer_one(void **state)
{
    struct fixture *f = *state;
    char top[512];
    zadd(f, "hb", 0, "a", 5);
    note(f, "hb"); /* loads the script and writes generation 1 */
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    const char *sha = lb_apply_script_sha();
    redisReply *r = redis_server_command(
        f->redis,
        "EVALSHA %s 2 lb:{hb}:~tops lb:{hb}:~top:alltime " LB_APPLY_VERSION_TEXT
        " T take A 5000 alltime",
        sha);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, "go");
    assert_string_equal(r->element[1]->str, "1");
    freeReplyObject(r);
    freeReplyObject(redis_server_command(f->redis, "HSET lb:{hb}:~tops g:alltime 2"));
    t_write(f, 1, "-1", "stale"); /* the generation moved on */
    freeReplyObject(redis_server_command(f->redis, "HSET lb:{hb}:~tops h:alltime B"));
    t_write(f, 2, "-1", "stale"); /* the lease went to B */
    top_of(f, "hb", top, sizeof(top));
    assert_string_equal(top, "a=5");
}

/* A snapshot of a window no shard holds any more (-2), with an entry a
 * shard held before its key went: the top and the window's fields are
 * deleted, the entry not written. */
static void a_gone_window_leaves_no_top(void **state)
{
    struct fixture *f = *state;
    zadd(f, "hb", 0, "a", 5);
    note(f, "hb"); /* loads the script and writes generation 1 */
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    redisReply *r = redis_server_command(
        f->redis,
        "EVALSHA %s 2 lb:{hb}:~tops lb:{hb}:~top:alltime " LB_APPLY_VERSION_TEXT " T "
        "take A 5000 alltime",
        lb_apply_script_sha());
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, "go");
    freeReplyObject(r);
    t_write(f, 1, "-2", "ok");
    assert_int_equal(integer(f, "EXISTS %s", "lb:{hb}:~top:alltime"), 0);
    assert_int_equal(integer(f, "HLEN %s", "lb:{hb}:~tops"), 0);
}

/* The merged top's key holding another type: the refresh fails, is
 * counted and tried again; once an operator removed the key, it is written. */
static void a_top_key_of_another_type_is_counted_and_retried(void **state)
{
    struct fixture *f = *state;
    char top[512];
    zadd(f, "hb", 2, "q", 8);
    freeReplyObject(redis_server_command(f->redis, "SET lb:{hb}:~top:alltime text"));
    note(f, "hb");
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 300), 1);
    assert_true(lb_tops_stats(f->tops)->failures >= 1);
    freeReplyObject(redis_server_command(f->redis, "DEL lb:{hb}:~top:alltime"));
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    top_of(f, "hb", top, sizeof(top));
    assert_string_equal(top, "q=8");
}

/* Redis silent (each call waits a command timeout): a step makes one call
 * and leaves the other window due, rather than a call for each (a second
 * step makes one more; which window it tries is not told apart here: see
 * the test with three masters below); the records of the first wait for
 * Redis; both tops are written once Redis answers. */
static void a_silent_redis_costs_a_step_one_call(void **state)
{
    struct fixture *f = *state;
    char top[512];
    enum lb_hold_reason why;
    zadd(f, "ha", 0, "p", 5);
    zadd(f, "hb", 1, "q", 8);
    note_from(f, "hb", 100);
    note(f, "ha");
    redis_server_pause(f->redis, 1);
    assert_int_equal(lb_tops_step(f->tops, lb_monotonic_ms() + 10000), 2);
    assert_int_equal(lb_tops_stats(f->tops)->failures, 1);
    /* one call again */
    assert_int_equal(lb_tops_step(f->tops, lb_monotonic_ms() + 10000), 2);
    redis_server_pause(f->redis, 0);
    assert_int_equal(lb_tops_stats(f->tops)->failures, 2);
    assert_int_equal(floor_of(f, "s", 0, &why), 100);
    assert_int_equal(why, LB_HOLD_REDIS);
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    top_of(f, "ha", top, sizeof(top));
    assert_string_equal(top, "p=5");
    top_of(f, "hb", top, sizeof(top));
    assert_string_equal(top, "q=8");
}

/* setup_masters: the master of 'slot' (even thirds). */
static int master_of(uint16_t slot)
{
    return slot < 16384 / 3 ? 0 : slot < 2 * 16384 / 3 ? 1 : 2;
}

/* Whether every key of 'board' (its two shard keys, its merged top and
 * ~tops) is on a master other than 'master'. */
static int avoids(const char *board, int master)
{
    char tag[LB_TAG_MAX];
    for (uint32_t i = 0; i < 2; i++) {
        size_t n = lb_shard_tag(board, strlen(board), 2, i, tag, sizeof(tag));
        if (master_of(lb_crc16(tag, n) & 16383) == master)
            return 0;
    }
    return master_of(lb_crc16(board, strlen(board)) & 16383) != master;
}

static void zadd_split(struct fixture *f, const char *board, uint32_t shard, const char *member,
                       int score)
{
    char tag[LB_TAG_MAX];
    size_t n = lb_shard_tag(board, strlen(board), 2, shard, tag, sizeof(tag));
    freeReplyObject(redis_server_command(f->masters[master_of(lb_crc16(tag, n) & 16383)],
                                         "ZADD lb:{%s}:alltime %d %s", tag, score, member));
}

static void top_on(struct fixture *f, const char *board, char *out, size_t cap)
{
    struct fixture one = *f;
    one.redis = f->masters[master_of(lb_crc16(board, strlen(board)) & 16383)];
    top_of(&one, board, out, cap);
}

/* One master silent, three masters: a step stops at the first window whose
 * Redis failed, and the next step starts after it, so a board whose keys
 * are all on the others still has its merged top written (noted after the
 * one that fails, it would wait behind it at every step otherwise). */
static void a_silent_master_does_not_hold_the_tops_of_the_others(void **state)
{
    struct fixture *f = *state;
    char held[32] = "", free_[32] = "", top[512];
    for (int i = 0; i < 1000 && (!*held || !*free_); i++) {
        char name[32];
        snprintf(name, sizeof(name), "rr%d", i);
        if (!*free_ && avoids(name, 1))
            snprintf(free_, sizeof(free_), "%s", name);
        else if (!*held && !avoids(name, 1))
            snprintf(held, sizeof(held), "%s", name);
    }
    assert_true(*held && *free_);
    zadd_split(f, held, 0, "h", 3);
    zadd_split(f, free_, 0, "p", 5);
    zadd_split(f, free_, 1, "q", 8);
    note(f, held); /* first: every step would try it first */
    note(f, free_);
    redis_server_pause(f->masters[1], 1);
    assert_int_equal(lb_tops_step(f->tops, lb_monotonic_ms() + 10000), 2);
    assert_int_equal(lb_tops_step(f->tops, lb_monotonic_ms() + 10000), 1);
    redis_server_pause(f->masters[1], 0);
    top_on(f, free_, top, sizeof(top));
    assert_string_equal(top, "p=5 q=8");
    top_on(f, held, top, sizeof(top));
    assert_string_equal(top, "");
    assert_int_equal(lb_tops_drain(f->tops, lb_monotonic_ms() + 5000), 0);
    top_on(f, held, top, sizeof(top));
    assert_string_equal(top, "h=3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(the_merged_top_is_one_keys_best, setup, teardown),
        cmocka_unit_test_setup_teardown(a_lease_held_elsewhere_is_waited_for, setup, teardown),
        cmocka_unit_test_setup_teardown(a_commit_waits_until_the_merged_top_shows_its_records,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(an_older_snapshot_never_overwrites_a_newer_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_gone_window_leaves_no_top, setup, teardown),
        cmocka_unit_test_setup_teardown(a_top_key_of_another_type_is_counted_and_retried, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_silent_redis_costs_a_step_one_call, setup, teardown),
        cmocka_unit_test_setup_teardown(a_silent_master_does_not_hold_the_tops_of_the_others,
                                        setup_masters, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
