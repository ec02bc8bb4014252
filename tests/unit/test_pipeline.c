/* The pipeline's containment, end to end without a server: the real
 * decoder, planner, pipeline and cluster client, writing to a scripted fake
 * Redis node that runs the in-memory model of the apply script (and can
 * refuse one board, as a key of the wrong type under its tag would).
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

#include "apply_model.h"
#include "cluster.h"
#include "config.h"
#include "event.h"
#include "eventgen.h"
#include "fake_redis.h"
#include "log.h"
#include "pipeline.h"
#include "planner.h"
#include "resp.h"

#define MAY1 INT64_C(1777593600000) /* 2026-05-01 */

/* ---- the fake node: Redis running the apply script, in memory ---------------------- */

struct node {
    struct model *model;
    const char *broken_board; /* its requests answer "wrongtype" while set */
    char shards[512];
    char reply[4096];
    int requests;
};

static size_t encode(char *out, int argc, char **argv)
{
    char *p = lb_resp_header(out, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++)
        p = lb_resp_bulk(p, argv[i], strlen(argv[i]));
    return (size_t)(p - out);
}

static const char *evalsha(struct node *n, int argc, char **argv)
{
    n->requests++;
    if (n->broken_board && argc > 3) {
        char tag[64];
        snprintf(tag, sizeof(tag), "{%s}", n->broken_board);
        if (strstr(argv[3], tag)) {
            snprintf(n->reply, sizeof(n->reply), "*2\r\n$9\r\nwrongtype\r\n$%zu\r\n%s\r\n",
                     strlen(argv[3]), argv[3]);
            return n->reply;
        }
    }
    size_t need = 64;
    for (int i = 0; i < argc; i++)
        need += strlen(argv[i]) + 32;
    char *bytes = malloc(need);
    struct model_partial partial[16];
    char overflow[16][128];
    size_t np = 0, no = 0;
    enum model_answer a =
        model_apply(n->model, bytes, encode(bytes, argc, argv), partial, &np, overflow, &no, 16);
    free(bytes);
    if (a == MODEL_OK)
        return "*3\r\n$2\r\nok\r\n:1\r\n:0\r\n";
    if (a == MODEL_PARTIAL) {
        int len = snprintf(n->reply, sizeof(n->reply), "*%zu\r\n$7\r\npartial\r\n", 1 + 2 * np);
        for (size_t i = 0; i < np; i++) {
            char marker[24];
            snprintf(marker, sizeof(marker), "%lld", (long long)partial[i].marker);
            len += snprintf(n->reply + len, sizeof(n->reply) - (size_t)len,
                            "$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(partial[i].field),
                            partial[i].field, strlen(marker), marker);
        }
        return n->reply;
    }
    return "-ERR the model could not run this request\r\n";
}

static const char *handler(struct fake_redis *fake, int argc, char **argv, void *ctx)
{
    struct node *n = ctx;
    (void)fake;
    if (argc >= 2 && strcmp(argv[0], "CLUSTER") == 0)
        return n->shards;
    if (argc >= 1 && strcmp(argv[0], "SCRIPT") == 0) {
        snprintf(n->reply, sizeof(n->reply), "$40\r\n%s\r\n", lb_apply_script_sha());
        return n->reply;
    }
    if (argc >= 1 && strcmp(argv[0], "EVALSHA") == 0)
        return evalsha(n, argc, argv);
    return "-ERR unknown command\r\n";
}

/* ---- events as a producer writes them (bare Avro, by eventgen's encoder) ------------ */

struct event {
    uint8_t bytes[GEN_PAYLOAD_MAX];
    size_t len;
};

static struct event event(const char *id, const char *board, const char *player, int64_t score)
{
    static struct generator *gen;
    struct gen_options bare = {
        .seed = 1, .boards = 1, .players = 1, .zipf = 1.0, .days = 1, .bare = 1};
    struct gen_event ev = {.score = score, .ts_ms = MAY1};
    struct event e;
    if (!gen)
        gen = gen_new(&bare); /* kept for the whole run */
    snprintf(ev.event_id, sizeof(ev.event_id), "%s", id);
    snprintf(ev.board, sizeof(ev.board), "%s", board);
    snprintf(ev.player, sizeof(ev.player), "%s", player);
    e.len = gen_encode(gen, &ev, e.bytes);
    return e;
}

/* ---- the fixture ------------------------------------------------------------------- */

struct fixture {
    struct node node;
    struct fake_redis *fake;
    struct lb_config *config;
    struct lb_decoder *decoder;
    struct lb_cluster *cluster;
    struct lb_pipeline *pipeline;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    char text[2048], err[512];
    f->node.model = model_new();
    f->fake = fake_redis_start(handler, &f->node);
    int port = fake_redis_port(f->fake);
    snprintf(f->node.shards, sizeof(f->node.shards),
             "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
             "*8\r\n$4\r\nport\r\n:%d\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n"
             "$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
             port);
    snprintf(text, sizeof(text),
             "kafka: {brokers: b, topics: [t]}\n"
             "input: {format: bare, writer_schema: %s/schemas/score_event.avsc}\n"
             "redis: {nodes: [127.0.0.1:%d], wait_replicas: 0}\n"
             "profiles:\n"
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
    fake_redis_stop(f->fake);
    model_free(f->node.model);
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
    char key[64];
    int64_t score = -1;
    snprintf(key, sizeof(key), "lb:{%s}:alltime", board);
    if (!model_score(f->node.model, key, player, &score))
        return 0;
    return score;
}

static void a_held_event_is_never_skipped_and_nothing_else_waits(void **state)
{
    struct fixture *f = *state;
    uint8_t st[16];

    /* 1. board x refuses its writes (a key of the wrong type): its events
     *    are held, board y's are written */
    f->node.broken_board = "x";
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
    f->node.broken_board = NULL;
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
    f->node.broken_board = "z";
    struct input b1[] = {{0, 10, event("f0", "z", "a", 1)}, {1, 10, event("f1", "z", "b", 1)}};
    assert_int_equal(run(f, b1, 2, st), 1);
    assert_int_equal(lb_pipeline_held(f->pipeline), 2);
    f->node.broken_board = NULL;
    lb_pipeline_release(f->pipeline, "t", 0);
    assert_int_equal(lb_pipeline_held(f->pipeline), 1);
    struct input b2[] = {{0, 11, event("f2", "z", "a", 1)}, {1, 11, event("f3", "z", "b", 1)}};
    assert_int_equal(run(f, b2, 2, st), 1);
    assert_int_equal(st[0], LB_RECORD_DURABLE);
    assert_int_equal(st[1], LB_RECORD_WITHHELD_FIX);
}

int main(void)
{
    lb_log_threshold = LB_LOG_ERROR - 1; /* the holds are logged as errors: expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_held_event_is_never_skipped_and_nothing_else_waits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(releasing_one_partition_keeps_the_others_held, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
