/* The pipeline's containment, end to end without Kafka: the real decoder,
 * planner, pipeline and cluster client, writing to a real redis-server (a
 * single-node cluster the test starts) that runs the apply script; a board
 * is broken the way it happens, by a key of the wrong type under its tag.
 *
 * What it pins down: when a board is held, its later events from the same
 * partition are withheld (never written ahead of the held ones, whose marker
 * they would move past), its events from other partitions and every other
 * board keep flowing, and once the partition is read again every event
 * counts exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster.h"
#include "config.h"
#include "event.h"
#include "eventgen.h"
#include "log.h"
#include "pipeline.h"
#include "planner.h"
#include "redis_server.h"

#define MAY1 INT64_C(1777593600000) /* 2026-05-01 */

/* ---- events as a producer writes them (bare Avro, by eventgen's encoder) ------------ */

struct event {
    uint8_t bytes[GEN_PAYLOAD_MAX];
    size_t len;
};

static struct event event_op(const char *id, const char *board, const char *player, int64_t score,
                             int op)
{
    static struct generator *gen;
    struct gen_options bare = {
        .seed = 1, .boards = 1, .players = 1, .zipf = 1.0, .days = 1, .bare = 1};
    struct gen_event ev = {.score = score, .ts_ms = MAY1, .op = op};
    struct event e;
    if (!gen)
        gen = gen_new(&bare); /* kept for the whole run */
    snprintf(ev.event_id, sizeof(ev.event_id), "%s", id);
    snprintf(ev.board, sizeof(ev.board), "%s", board);
    snprintf(ev.player, sizeof(ev.player), "%s", player);
    e.len = gen_encode(gen, &ev, e.bytes);
    return e;
}

static struct event event(const char *id, const char *board, const char *player, int64_t score)
{
    return event_op(id, board, player, score, 0);
}

/* ---- the fixture ------------------------------------------------------------------- */

struct fixture {
    struct redis_server *redis;
    struct lb_config *config;
    struct lb_decoder *decoder;
    struct lb_cluster *cluster;
    struct lb_pipeline *pipeline;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    char text[2048], err[512];
    f->redis = redis_server_start(1);
    int port = redis_server_port(f->redis);
    snprintf(text, sizeof(text),
             "kafka: {brokers: b, topics: [t]}\n"
             "input: {format: bare, writer_schema: %s/schemas/score_event.avsc}\n"
             "redis: {nodes: [127.0.0.1:%d], wait_replicas: 0}\n"
             "profiles:\n"
             "  - name: top\n"
             "    match: \"top*\"\n"
             "    retractions: reject\n"
             "    tie_break: none\n"
             "    windows: {alltime: {}}\n"
             "  - name: totals\n"
             "    match: \"*\"\n"
             "    aggregation: sum\n"
             "    tie_break: none\n"
             "    windows: {alltime: {}}\n",
             getenv("LB_SOURCE_DIR"), port);
    assert_int_equal(
        lb_config_load_string("test.yaml", text, strlen(text), &f->config, err, sizeof(err)), 0);
    f->decoder = lb_config_decoder(f->config, err, sizeof(err));
    assert_non_null(f->decoder);
    struct lb_cluster_options options;
    lb_pipeline_cluster_options(f->config, &options);
    f->cluster = lb_cluster_new(&options);
    f->pipeline = lb_pipeline_new(f->config, f->decoder, f->cluster);
    assert_non_null(f->pipeline);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_pipeline_free(f->pipeline);
    lb_cluster_free(f->cluster);
    lb_decoder_free(f->decoder);
    lb_config_free(f->config);
    redis_server_stop(f->redis);
    free(f);
    return 0;
}

/* The daemon's policy once a failure outlived its retry in place: hold. */
static int give_up_at_once(void *ctx, int64_t backoff_ms)
{
    (void)ctx;
    (void)backoff_ms;
    return 1;
}

struct input {
    int32_t partition;
    int64_t offset;
    struct event ev;
};

static int run(struct fixture *f, const struct input *in, size_t n, uint8_t *state)
{
    struct lb_record records[16];
    for (size_t i = 0; i < n; i++)
        records[i] =
            (struct lb_record){in[i].ev.bytes, in[i].ev.len, "t", in[i].partition, in[i].offset};
    return lb_pipeline_run(f->pipeline, records, n, MAY1, state, give_up_at_once, NULL);
}

static int64_t total(const struct fixture *f, const char *board, const char *player)
{
    redisReply *r = redis_server_command(f->redis, "ZSCORE lb:{%s}:alltime %s", board, player);
    int64_t score = r->type == REDIS_REPLY_STRING ? (int64_t)strtod(r->str, NULL) : 0;
    freeReplyObject(r);
    return score;
}

/* Breaks a board the way it happens: a key of another type under its tag. */
static void break_board(const struct fixture *f, const char *board)
{
    freeReplyObject(redis_server_command(f->redis, "SET lb:{%s}:alltime oops", board));
}

static void fix_board(const struct fixture *f, const char *board)
{
    freeReplyObject(redis_server_command(f->redis, "DEL lb:{%s}:alltime", board));
}

static void a_held_event_is_never_skipped_and_nothing_else_waits(void **state)
{
    struct fixture *f = *state;
    uint8_t st[16];

    /* 1. board x refuses its writes (a key of the wrong type): its events
     *    are held, board y's are written */
    break_board(f, "x");
    struct input b1[] = {{0, 0, event("e0", "x", "a", 1)},
                         {0, 1, event("e1", "x", "a", 2)},
                         {0, 2, event("e2", "y", "b", 5)},
                         {0, 3, event("e3", "x", "a", 3)}};
    assert_int_equal(run(f, b1, 4, st), 1);
    assert_int_equal(st[0], LB_RECORD_HELD_FIX);
    assert_int_equal(st[1], LB_RECORD_HELD_FIX);
    assert_int_equal(st[2], LB_RECORD_DURABLE);
    assert_int_equal(st[3], LB_RECORD_HELD_FIX);
    assert_int_equal(lb_pipeline_held(f->pipeline), 1);
    assert_int_equal(total(f, "y", "b"), 5);

    /* 2. the key is fixed, but partition 0 has not been read again yet:
     *    x's next event from partition 0 must wait (its marker would pass
     *    the held ones); x's event from partition 1 and y's are written */
    fix_board(f, "x");
    struct input b2[] = {{0, 4, event("e4", "x", "a", 10)},
                         {1, 0, event("e5", "x", "c", 100)},
                         {0, 5, event("e6", "y", "b", 1)}};
    assert_int_equal(run(f, b2, 3, st), 1);
    assert_int_equal(st[0], LB_RECORD_WITHHELD_FIX);
    assert_int_equal(st[1], LB_RECORD_DURABLE);
    assert_int_equal(st[2], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "x", "a"), 0);
    assert_int_equal(total(f, "x", "c"), 100);
    assert_int_equal(total(f, "y", "b"), 6);

    /* 3. partition 0 is read again from its held offset: every event of x
     *    counts once, y's are not counted again */
    lb_pipeline_release(f->pipeline, "t", 0);
    assert_int_equal(lb_pipeline_held(f->pipeline), 0);
    struct input b3[] = {b1[0], b1[1], b1[2], b1[3], b2[0], b2[2]};
    assert_int_equal(run(f, b3, 6, st), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "x", "a"), 1 + 2 + 3 + 10);
    assert_int_equal(total(f, "x", "c"), 100);
    assert_int_equal(total(f, "y", "b"), 6);
}

static void releasing_one_partition_keeps_the_others_held(void **state)
{
    struct fixture *f = *state;
    uint8_t st[16];
    break_board(f, "z");
    struct input b1[] = {{0, 10, event("f0", "z", "a", 1)}, {1, 10, event("f1", "z", "b", 1)}};
    assert_int_equal(run(f, b1, 2, st), 1);
    assert_int_equal(lb_pipeline_held(f->pipeline), 2);
    fix_board(f, "z");
    lb_pipeline_release(f->pipeline, "t", 0);
    assert_int_equal(lb_pipeline_held(f->pipeline), 1);
    struct input b2[] = {{0, 11, event("f2", "z", "a", 1)}, {1, 11, event("f3", "z", "b", 1)}};
    assert_int_equal(run(f, b2, 2, st), 1);
    assert_int_equal(st[0], LB_RECORD_DURABLE);
    assert_int_equal(st[1], LB_RECORD_WITHHELD_FIX);
    assert_int_equal(lb_pipeline_last_failure(f->pipeline)->sent, 1);

    /* a batch of held-back events only never reaches Redis, and says so:
     * the daemon must not take it for Redis being up (or down) */
    struct input b3[] = {{1, 12, event("f4", "z", "b", 1)}};
    assert_int_equal(run(f, b3, 1, st), 1);
    assert_int_equal(st[0], LB_RECORD_WITHHELD_FIX);
    assert_int_equal(lb_pipeline_last_failure(f->pipeline)->sent, 0);
    assert_int_equal(lb_pipeline_last_failure(f->pipeline)->transient, 0);
}

/* A board without a script (best, retractions rejected) through the real
 * cluster client: its transaction is written and checked like the script's
 * request; a retraction is rejected and its offset advances; a fenced board
 * is held (its writes landed: harmless, ZADD GT) and goes through once the
 * fence is gone; a key of the wrong type holds it for an operator. */
static void a_board_without_a_script_is_written_held_and_released(void **state)
{
    struct fixture *f = *state;
    uint8_t st[16];
    struct input b1[] = {{0, 0, event("g0", "top", "a", 5)},
                         {0, 1, event_op("g1", "top", "a", 0, 1)},
                         {0, 2, event("g2", "top", "a", 4)}};
    assert_int_equal(run(f, b1, 3, st), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "top", "a"), 5); /* the retraction removed nothing */
    redisReply *r = redis_server_command(f->redis, "ZSCORE lb:{top}:~offsets t:0");
    assert_string_equal(r->str, "2");
    freeReplyObject(r);

    freeReplyObject(redis_server_command(f->redis, "SET lb:{top}:~fence replay PX 60000"));
    struct input b2[] = {{0, 3, event("g3", "top", "a", 8)}};
    assert_int_equal(run(f, b2, 1, st), 1);
    assert_int_equal(st[0], LB_RECORD_HELD_RETRY);
    freeReplyObject(redis_server_command(f->redis, "DEL lb:{top}:~fence"));
    lb_pipeline_release(f->pipeline, "t", 0);
    assert_int_equal(run(f, b2, 1, st), 0);
    assert_int_equal(st[0], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "top", "a"), 8);

    break_board(f, "top");
    struct input b3[] = {{0, 4, event("g4", "top", "a", 9)}};
    assert_int_equal(run(f, b3, 1, st), 1);
    assert_int_equal(st[0], LB_RECORD_HELD_FIX);
    fix_board(f, "top");
    lb_pipeline_release(f->pipeline, "t", 0);
    assert_int_equal(run(f, b3, 1, st), 0);
    assert_int_equal(total(f, "top", "a"), 9);
}

int main(void)
{
    lb_log_threshold = LB_LOG_ERROR - 1; /* the holds are logged as errors: expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_held_event_is_never_skipped_and_nothing_else_waits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(releasing_one_partition_keeps_the_others_held, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_board_without_a_script_is_written_held_and_released,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
