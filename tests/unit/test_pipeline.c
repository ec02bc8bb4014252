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
#include <time.h>

#include <cmocka.h>

#include "cluster.h"
#include "config.h"
#include "engine.h"
#include "event.h"
#include "eventgen.h"
#include "log.h"
#include "oom.h"
#include "pipeline.h"
#include "planner.h"
#include "published.h"
#include "redis_relay.h"
#include "redis_server.h"
#include "slot.h"

#define MAY1   INT64_C(1777593600000) /* 2026-05-01 */
#define DAY_MS INT64_C(86400000)

/* ---- events as a producer writes them (bare Avro, by eventgen's encoder) ------------ */

struct event {
    uint8_t bytes[GEN_PAYLOAD_MAX];
    size_t len;
};

static struct event event_at(const char *id, const char *board, const char *player, int64_t score,
                             int op, int64_t ts_ms)
{
    static struct generator *gen;
    struct gen_options bare = {
        .seed = 1, .boards = 1, .players = 1, .zipf = 1.0, .days = 1, .bare = 1};
    struct gen_event ev = {.score = score, .ts_ms = ts_ms, .op = op};
    struct event e;
    if (!gen)
        gen = gen_new(&bare); /* kept for the whole run */
    snprintf(ev.event_id, sizeof(ev.event_id), "%s", id);
    snprintf(ev.board, sizeof(ev.board), "%s", board);
    snprintf(ev.player, sizeof(ev.player), "%s", player);
    e.len = gen_encode(gen, &ev, e.bytes);
    return e;
}

static struct event event_op(const char *id, const char *board, const char *player, int64_t score,
                             int op)
{
    return event_at(id, board, player, score, op, MAY1);
}

static struct event event(const char *id, const char *board, const char *player, int64_t score)
{
    return event_op(id, board, player, score, 0);
}

/* ---- the fixture ------------------------------------------------------------------- */

struct fixture {
    struct redis_server *redis;
    struct redis_server *redis2; /* a second master (slots 8192-16383), or NULL */
    struct redis_relay *relay;   /* between the pipeline and a standalone 'redis', or NULL */
    struct lb_config *config;
    struct lb_decoder *decoder;
    struct lb_cluster *cluster;
    struct lb_pipeline *pipeline;
};

/* The pipeline over 'f->redis' (and f->redis2; through f->relay when there
 * is one), whose client gives up on a silent node after 'timeout'. */
static void open_pipeline(struct fixture *f, const char *timeout, int overlap)
{
    char text[2048], err[512];
    int port = f->relay ? redis_relay_port(f->relay) : redis_server_port(f->redis);
    snprintf(text, sizeof(text),
             "kafka: {brokers: b, topics: [t]}\n"
             "input: {format: bare, writer_schema: %s/schemas/score_event.avsc}\n"
             "redis: {nodes: [127.0.0.1:%d], wait_replicas: 0, command_timeout: %s}\n"
             "profiles:\n"
             "  - name: results\n"
             "    match: \"res*\"\n"
             "    windows: {alltime: {}, daily: {ttl: 3650d, results: {top: 10, grace: 0s}}}\n"
             "  - name: top\n"
             "    match: \"top*\"\n"
             "    retractions: reject\n"
             "    tie_break: none\n"
             "    windows: {alltime: {}}\n"
             "  - name: totals\n"
             "    match: \"*\"\n"
             "    aggregation: sum\n"
             "    tie_break: none\n"
             "    windows: {alltime: {}}\n"
             "results: {topic: r, schema_id: 1}\n",
             getenv("LB_SOURCE_DIR"), port, timeout);
    assert_int_equal(
        lb_config_load_string("test.yaml", text, strlen(text), &f->config, err, sizeof(err)), 0);
    f->decoder = lb_config_decoder(f->config, err, sizeof(err), NULL);
    assert_non_null(f->decoder);
    struct lb_cluster_options options;
    options = lb_engine_cluster_options(f->config);
    f->cluster = lb_cluster_new(&options);
    struct lb_pipeline_options po = {{f->config->profiles, f->config->nprofiles},
                                     f->config->key_prefix,
                                     0,
                                     f->config->max_future_ms};
    f->pipeline = lb_pipeline_new(&po, f->decoder, f->cluster);
    assert_non_null(f->pipeline);
    if (overlap)
        assert_int_equal(lb_pipeline_overlap(f->pipeline, &options), 0);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->redis = redis_server_start(1);
    open_pipeline(f, "5s", 0);
    *state = f;
    return 0;
}

static int setup_pair(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct redis_server *pair[2];
    redis_server_start_masters(pair, 2);
    f->redis = pair[0];
    f->redis2 = pair[1];
    open_pipeline(f, "1s", 1);
    *state = f;
    return 0;
}

/* A standalone server behind a relay that can lose a reply. Its tests
 * time nothing out, and one sends 100,000 events at once: through the
 * relay and the script that takes 1.5 s on an idle 2-core machine. With a
 * timeout of 5 s it failed once in 47 runs beside three integration tests
 * (its batch had not ended once its replies were in: a request failed),
 * and once before beside one. */
static int setup_relay(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->redis = redis_server_start(0);
    f->relay = redis_relay_start(redis_server_port(f->redis));
    open_pipeline(f, "60s", 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_pipeline_free(f->pipeline);
    lb_cluster_free(f->cluster);
    redis_relay_stop(f->relay);
    lb_decoder_free(f->decoder);
    lb_config_free(f->config);
    redis_server_stop(f->redis);
    redis_server_stop(f->redis2);
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

/* Records as read from topic "t", without a Kafka timestamp. */
static void records_of(const struct input *in, size_t n, struct lb_record *records)
{
    for (size_t i = 0; i < n; i++)
        records[i] =
            (struct lb_record){in[i].ev.bytes, in[i].ev.len, "t", in[i].partition, in[i].offset, 0};
}

static int run(struct fixture *f, const struct input *in, size_t n, uint8_t *state)
{
    struct lb_record records[16];
    records_of(in, n, records);
    return lb_pipeline_run(f->pipeline, records, n, MAY1, state, give_up_at_once, NULL);
}

/* The master that holds 'board'. */
static struct redis_server *node_of(const struct fixture *f, const char *board)
{
    return f->redis2 && lb_crc16(board, strlen(board)) % 16384 >= 8192 ? f->redis2 : f->redis;
}

static int64_t total(const struct fixture *f, const char *board, const char *player)
{
    redisReply *r =
        redis_server_command(node_of(f, board), "ZSCORE lb:{%s}:alltime %s", board, player);
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
 * fence is gone; a hash there (the mark a latest board keeps, left by a
 * profile change) is no fence; a key of the wrong type holds it for an
 * operator. */
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

    freeReplyObject(redis_server_command(f->redis, "HSET lb:{top}:~fence apply 5"));
    struct input hashed[] = {{0, 4, event("g5", "top", "b", 6)}};
    assert_int_equal(run(f, hashed, 1, st), 0);
    assert_int_equal(st[0], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "top", "b"), 6);
    freeReplyObject(redis_server_command(f->redis, "DEL lb:{top}:~fence"));

    break_board(f, "top");
    struct input b3[] = {{0, 5, event("g4", "top", "a", 9)}};
    assert_int_equal(run(f, b3, 1, st), 1);
    assert_int_equal(st[0], LB_RECORD_HELD_FIX);
    fix_board(f, "top");
    lb_pipeline_release(f->pipeline, "t", 0);
    assert_int_equal(run(f, b3, 1, st), 0);
    assert_int_equal(total(f, "top", "a"), 9);
}

/* ---- pipelining over two masters ----------------------------------------------------- */

/* A board name (sum board) whose keys live on the first or second master. */
static const char *board_on(const struct fixture *f, int second, char *name, size_t cap)
{
    for (int i = 0;; i++) {
        snprintf(name, cap, "s%d", i);
        if ((node_of(f, name) == f->redis2) == second)
            return name;
    }
}

struct between_attempts {
    struct fixture *f;
    const char *board, *player; /* the total to look at when the first attempt failed */
    int64_t seen;
    int calls;
    void (*then)(struct fixture *f); /* what ends the failure */
};

static int look_then_retry(void *ctx, int64_t backoff_ms)
{
    struct between_attempts *b = ctx;
    (void)backoff_ms;
    if (b->calls++ == 0) {
        b->seen = total(b->f, b->board, b->player);
        b->then(b->f);
    }
    return 0;
}

static void resume_second(struct fixture *f)
{
    redis_server_pause(f->redis2, 0);
}

/* Two batches over board x on the first master and y on the second: the
 * first gives a and b 1 point each, the second a 2 and b 'b_then'. */
struct two_batches {
    char x[16], y[16];
    struct input first[2], second[2];
    struct lb_record r1[2], r2[2];
    uint8_t st1[2], st2[2];
};

static void two_batches(const struct fixture *f, struct two_batches *t, int64_t b_then)
{
    board_on(f, 0, t->x, sizeof(t->x));
    board_on(f, 1, t->y, sizeof(t->y));
    t->first[0] = (struct input){0, 0, event("k0", t->x, "a", 1)};
    t->first[1] = (struct input){0, 1, event("k1", t->y, "b", 1)};
    t->second[0] = (struct input){0, 2, event("k2", t->x, "a", 2)};
    t->second[1] = (struct input){0, 3, event("k3", t->y, "b", b_then)};
    records_of(t->first, 2, t->r1);
    records_of(t->second, 2, t->r2);
}

/* One master stalls while the other answers: the next batch's request for
 * the master that answered goes out before the stalled one's failure is
 * even known, lands after the request it follows, and everything ends
 * exact once the stalled master is back and its request sent again. */
static void a_master_that_answered_gets_the_next_batch_while_another_stalls(void **state)
{
    struct fixture *f = *state;
    struct two_batches t;
    two_batches(f, &t, 4);

    redis_server_pause(f->redis2, 1);
    assert_int_equal(lb_pipeline_prepare(f->pipeline, t.r1, 2, MAY1), 0);
    lb_pipeline_send(f->pipeline);
    assert_int_equal(lb_pipeline_prepare(f->pipeline, t.r2, 2, MAY1), 0);
    struct between_attempts look = {.f = f, .board = t.x, .player = "a", .then = resume_second};
    assert_int_equal(lb_pipeline_complete(f->pipeline, t.st1, look_then_retry, &look), 0);
    assert_int_equal(look.calls, 1);    /* the stalled master's request failed once */
    assert_int_equal(look.seen, 1 + 2); /* the next batch was written by then */
    assert_int_equal(lb_pipeline_stats(f->pipeline)->overlapped, 1); /* not y's: it waited */
    lb_pipeline_send(f->pipeline);
    assert_int_equal(lb_pipeline_complete(f->pipeline, t.st2, give_up_at_once, NULL), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(t.st1[i], LB_RECORD_DURABLE);
        assert_int_equal(t.st2[i], LB_RECORD_DURABLE);
    }
    assert_int_equal(total(f, t.x, "a"), 3);
    /* y's first event once, though the stalled master may have run it too */
    assert_int_equal(total(f, t.y, "b"), 1 + 4);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Sends the prepared batch while its node reads nothing ('stall' on, then
 * off): progress says no reply is in, then, moved on by progress alone, that
 * every reply is, and the batch has an end. */
static void send_past_a_stall(struct fixture *f, void (*stall)(struct fixture *, int))
{
    stall(f, 1);
    lb_pipeline_send(f->pipeline);
    for (int i = 0; i < 50; i++) { /* nothing is read: no reply can be in */
        assert_int_equal(lb_pipeline_progress(f->pipeline), 0);
        sleep_ms(2);
    }
    stall(f, 0);
    int in = 0;
    for (int i = 0; i < 15000 && !in; i++)
        if (!(in = lb_pipeline_progress(f->pipeline)))
            sleep_ms(2);
    assert_true(in);
    assert_true(lb_pipeline_answered_ms(f->pipeline) > 0); /* the batch's end, for the metrics */
}

static void stop_second_master(struct fixture *f, int stopped)
{
    redis_server_pause(f->redis2, stopped);
}

static void pause_relay(struct fixture *f, int paused)
{
    redis_relay_pause(f->relay, paused);
}

/* While the daemon collects the next batch it moves the one in flight on
 * (lb_pipeline_progress): without blocking, it says whether every reply is
 * in, and the batch is written by then; complete checks the replies as
 * usual. */
static void a_batch_in_flight_is_moved_on_without_blocking(void **state)
{
    struct fixture *f = *state;
    struct two_batches t;
    two_batches(f, &t, 2);

    assert_int_equal(lb_pipeline_progress(f->pipeline), 1); /* nothing in flight */
    assert_int_equal(lb_pipeline_prepare(f->pipeline, t.r1, 2, MAY1), 0);
    send_past_a_stall(f, stop_second_master); /* y's master */
    assert_int_equal(total(f, t.x, "a"), 1);
    assert_int_equal(total(f, t.y, "b"), 1);
    assert_int_equal(lb_pipeline_complete(f->pipeline, t.st1, give_up_at_once, NULL), 0);
    assert_int_equal(t.st1[0], LB_RECORD_DURABLE);
    assert_int_equal(t.st1[1], LB_RECORD_DURABLE);
    assert_int_equal(lb_pipeline_progress(f->pipeline), 1);
}

/* The largest send buffer the kernel may give a socket (tcp_wmem's third
 * field). */
static size_t send_buffer_max(void)
{
    unsigned long lo = 0, mid = 0, hi = 0;
    FILE *in = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
    assert_non_null(in);
    assert_int_equal(fscanf(in, "%lu %lu %lu", &lo, &mid, &hi), 3);
    fclose(in);
    return hi;
}

/* A request larger than the sockets take while its node reads nothing
 * (the relay paused: 64 KiB in the node's receive buffer, at most
 * tcp_wmem's largest in the client's send buffer): the rest is written by
 * progress, the way the daemon moves a batch on while it collects the
 * next, without blocking and without complete. */
static void a_request_larger_than_the_sockets_take_is_written_by_progress(void **state)
{
    struct fixture *f = *state;
    /* about 60 bytes of request per event: half as much again as the
     * sockets can take, at least 100,000 events */
    size_t want = (send_buffer_max() + 2 * 65536) * 3 / 2 / 60;
    const int N = want > 100000 ? (int)want : 100000;
    size_t cap = (size_t)N * 128, used = 0;
    uint8_t *payloads = malloc(cap), *st = calloc(N, 1);
    struct lb_record *records = calloc(N, sizeof(*records));
    assert_true(payloads && records && st);
    for (int i = 0; i < N; i++) {
        char id[32], player[32];
        snprintf(id, sizeof(id), "big-%d", i);
        snprintf(player, sizeof(player), "player-%024d", i); /* 31 bytes, the most */
        struct event e = event(id, "big", player, 1 + i % 7);
        assert_true(used + e.len <= cap);
        memcpy(payloads + used, e.bytes, e.len);
        records[i] = (struct lb_record){payloads + used, e.len, "t", 0, i, 0};
        used += e.len;
    }
    /* the client connected and its map read while the relay passes them */
    struct input first[] = {{1, 0, event("big-first", "big", "first", 1)}};
    assert_int_equal(run(f, first, 1, st), 0);
    size_t before = redis_relay_bytes(f->relay);

    assert_int_equal(lb_pipeline_prepare(f->pipeline, records, N, MAY1), 0);
    send_past_a_stall(f, pause_relay);
    /* the request was more than the sockets could take while paused */
    size_t sent = redis_relay_bytes(f->relay) - before;
    if (sent <= send_buffer_max() + 2 * 65536)
        fail_msg("the request (%zu bytes) fits the sockets: make it larger", sent);

    assert_int_equal(lb_pipeline_complete(f->pipeline, st, give_up_at_once, NULL), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "big", "player-000000000000000000000000"), 1);
    char last[32];
    snprintf(last, sizeof(last), "player-%024d", N - 1);
    assert_int_equal(total(f, "big", last), 1 + (N - 1) % 7);
    free(payloads);
    free(records);
    free(st);
}

/* Replies a caller leaves unread for longer than the command timeout (the
 * daemon settling the dead-letter topic, a pipelined batch waiting for the
 * one before it) are read, not taken for a silent node. */
static void replies_read_late_are_not_a_timeout(void **state)
{
    struct fixture *f = *state;
    struct two_batches t;
    two_batches(f, &t, 2);

    assert_int_equal(lb_pipeline_prepare(f->pipeline, t.r1, 2, MAY1), 0);
    lb_pipeline_send(f->pipeline);
    sleep_ms(1500);
    assert_int_equal(lb_pipeline_prepare(f->pipeline, t.r2, 2, MAY1), 0);
    assert_int_equal(lb_pipeline_complete(f->pipeline, t.st1, give_up_at_once, NULL), 0);
    lb_pipeline_send(f->pipeline);
    sleep_ms(1500);
    assert_int_equal(lb_pipeline_complete(f->pipeline, t.st2, give_up_at_once, NULL), 0);
    struct lb_cluster_stats redis;
    lb_pipeline_redis_stats(f->pipeline, &redis);
    assert_int_equal(redis.timeouts, 0);
    assert_int_equal(total(f, t.x, "a"), 3);
    assert_int_equal(total(f, t.y, "b"), 3);
}

static void unfence(struct fixture *f)
{
    char x[16];
    board_on(f, 0, x, sizeof(x));
    freeReplyObject(redis_server_command(f->redis, "DEL lb:{%s}:~fence", x));
}

/* Once a request of the batch in flight failed, nothing of the next batch
 * goes out early, not even to a master that answered: the failed board must
 * be settled (written on a retry, or held) before any later request of it. */
static void nothing_goes_out_early_once_a_request_failed(void **state)
{
    struct fixture *f = *state;
    char x[16], z[16];
    board_on(f, 0, x, sizeof(x));
    snprintf(z, sizeof(z), "%s", x);
    for (int i = 0; strcmp(z, x) == 0 || node_of(f, z) != f->redis; i++)
        snprintf(z, sizeof(z), "t%d", i);
    struct input first[] = {{0, 0, event("i0", x, "a", 1)}};
    struct input second[] = {{1, 0, event("i1", x, "a", 2)}, {1, 1, event("i2", z, "c", 5)}};
    struct lb_record r1[1], r2[2];
    uint8_t st1[1], st2[2];
    records_of(first, 1, r1);
    records_of(second, 2, r2);

    freeReplyObject(redis_server_command(f->redis, "SET lb:{%s}:~fence replay PX 60000", x));
    assert_int_equal(lb_pipeline_prepare(f->pipeline, r1, 1, MAY1), 0);
    lb_pipeline_send(f->pipeline);
    assert_int_equal(lb_pipeline_prepare(f->pipeline, r2, 2, MAY1), 0);
    struct between_attempts look = {.f = f, .board = z, .player = "c", .then = unfence};
    assert_int_equal(lb_pipeline_complete(f->pipeline, st1, look_then_retry, &look), 0);
    assert_int_equal(look.calls, 1);
    assert_int_equal(look.seen, 0); /* z's request waited, though its master had answered */
    assert_int_equal(lb_pipeline_stats(f->pipeline)->overlapped, 0);
    lb_pipeline_send(f->pipeline);
    assert_int_equal(lb_pipeline_complete(f->pipeline, st2, give_up_at_once, NULL), 0);
    assert_int_equal(total(f, x, "a"), 1 + 2);
    assert_int_equal(total(f, z, "c"), 5);
}

/* A batch in flight whose request failed (a fenced board) has all its
 * replies in, but it has not ended: lb_pipeline_answered_ms stays 0, so its
 * events' visibility is taken when complete has written them on a retry,
 * not when the refusal came back. */
static void a_refused_batch_in_flight_has_not_ended(void **state)
{
    struct fixture *f = *state;
    struct two_batches t;
    two_batches(f, &t, 2);

    freeReplyObject(redis_server_command(f->redis, "SET lb:{%s}:~fence replay PX 60000", t.x));
    assert_int_equal(lb_pipeline_prepare(f->pipeline, t.r1, 2, MAY1), 0);
    lb_pipeline_send(f->pipeline);
    int in = 0;
    for (int i = 0; i < 2500 && !in; i++)
        if (!(in = lb_pipeline_progress(f->pipeline)))
            sleep_ms(2);
    assert_true(in);
    assert_int_equal(lb_pipeline_answered_ms(f->pipeline), 0);
    assert_int_equal(total(f, t.x, "a"), 0);
    struct between_attempts look = {.f = f, .board = t.x, .player = "a", .then = unfence};
    assert_int_equal(lb_pipeline_complete(f->pipeline, t.st1, look_then_retry, &look), 0);
    assert_int_equal(look.calls, 1);
    assert_int_equal(t.st1[0], LB_RECORD_DURABLE);
    assert_int_equal(t.st1[1], LB_RECORD_DURABLE);
    assert_int_equal(total(f, t.x, "a"), 1);
    assert_int_equal(total(f, t.y, "b"), 1);
}
/* The records the pipeline rejected: offset and reason of the first 16, in
 * order, and how many in all. */
struct rejects {
    int64_t offset[16];
    enum lb_reject reason[16];
    size_t n;
};

static void note_reject(void *ctx, const struct lb_record *record, enum lb_reject reason,
                        const char *detail)
{
    struct rejects *r = ctx;
    (void)detail;
    if (r->n < 16) {
        r->offset[r->n] = record->offset;
        r->reason[r->n] = reason;
    }
    r->n++; /* counted past the 16 kept */
}

/* The daemon's policy while the drain timeout has not passed: retry. */
static int retry(void *ctx, int64_t backoff_ms)
{
    (void)ctx;
    (void)backoff_ms;
    return 0;
}

/* Events that come after their window closed are named late however their
 * request reaches Redis: the first time; sent again in place after the node
 * applied it and hung up before replying (the answer then says every
 * segment was applied before); and read again (a rewind), beside one event
 * written before the close. Each time, exactly the events at or past their
 * partition's close offset are rejected as window_closed (the daemon
 * dead-letters them; its dead-letter module drops a second copy of one
 * record). */
static void late_events_are_named_however_their_request_reaches_redis(void **state)
{
    struct fixture *f = *state;
    uint8_t st[16];
    struct rejects rejected = {0};
    char err[256];
    lb_pipeline_set_reject_hook(f->pipeline, note_reject, &rejected);
    static uint8_t which[LB_SLOTS]; /* the board's slot: its shard as the projector wrote it */
    which[lb_key_slot("{res}", 5)] = 1;
    if (lb_intact_mark(f->cluster, "lb:", which, "test", err, sizeof(err), NULL) != 0)
        fail_msg("%s", err);

    /* May 1st takes three events, then closes: its close offset is 3 */
    struct input b1[] = {{0, 0, event("h0", "res", "a", 5)},
                         {0, 1, event("h1", "res", "b", 6)},
                         {0, 2, event("h2", "res", "c", 7)}};
    assert_int_equal(run(f, b1, 3, st), 0);
    const char *claim[] = {"10", "d", "1777680000000"};
    size_t claimlen[] = {2, 1, 13};
    redisReply *r = lb_final_step(f->cluster, "lb:", "res", "daily:2026-05-01", "claim", "pod-a",
                                  30000, claim, claimlen, 3);
    assert_non_null(r);
    assert_true(r->type == REDIS_REPLY_ARRAY && r->elements == 4);
    assert_string_equal(r->element[0]->str, "go");
    assert_string_equal(r->element[2]->str, "3"); /* players */
    assert_string_equal(r->element[3]->str, "t:0=3");
    freeReplyObject(r);

    /* two events of May 1st come late, one of May 2nd does not; the node
     * applies the request and hangs up */
    struct input b2[] = {{0, 3, event_at("h3", "res", "d", 8, 0, MAY1 + 3600000)},
                         {0, 4, event_at("h4", "res", "e", 9, 0, MAY1 + 7200000)},
                         {0, 5, event_at("h5", "res", "f", 1, 0, MAY1 + DAY_MS)}};
    struct lb_record records[16];
    records_of(b2, 3, records);
    redis_relay_lose(f->relay, "EVALSHA", NULL);
    int64_t now = MAY1 + 2 * DAY_MS;
    assert_int_equal(lb_pipeline_run(f->pipeline, records, 3, now, st, retry, NULL), 0);
    assert_int_equal(redis_relay_lost(f->relay), 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(rejected.n, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rejected.offset[i], 3 + i);
        assert_int_equal(rejected.reason[i], LB_REJECT_WINDOW_CLOSED);
    }
    assert_int_equal(lb_pipeline_stats(f->pipeline)->late_after_close, 2);
    /* the closed day kept its three; alltime and May 2nd took the others */
    redisReply *day = redis_server_command(f->redis, "ZCARD lb:{res}:daily:2026-05-01");
    assert_int_equal(day->integer, 3);
    freeReplyObject(day);
    assert_true(total(f, "res", "e") > 0);
    assert_true(total(f, "res", "f") > 0);

    /* read again from offset 2: 2 was in the day when it closed */
    struct input b3[] = {b1[2], b2[0], b2[1], b2[2]};
    rejected.n = 0;
    records_of(b3, 4, records);
    assert_int_equal(lb_pipeline_run(f->pipeline, records, 4, now, st, retry, NULL), 0);
    assert_int_equal(rejected.n, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rejected.offset[i], 3 + i);
        assert_int_equal(rejected.reason[i], LB_REJECT_WINDOW_CLOSED);
    }
    assert_int_equal(lb_pipeline_stats(f->pipeline)->late_after_close, 4);

    /* the day put back from a results record without its close offsets:
     * read again, a request whose segments were all applied before names
     * none of its events (which of them came late is not known) */
    freeReplyObject(
        redis_server_command(f->redis, "HSET lb:{res}:~final o:daily:2026-05-01 %s", ""));
    rejected.n = 0;
    assert_int_equal(lb_pipeline_run(f->pipeline, records, 4, now, st, retry, NULL), 0);
    assert_int_equal(rejected.n, 0);
    assert_int_equal(lb_pipeline_stats(f->pipeline)->late_after_close, 4);
}

/* A request whose late events fall in more closed windows than count_late
 * parses once (64): each of 65 closed days names its own late event, the
 * windows past the 64th too, and each day keeps what it closed with. */
static void late_events_of_more_closed_windows_than_are_cached_are_each_named(void **state)
{
    struct fixture *f = *state;
    enum { CLOSED = 65, N = 2 * CLOSED + 2 };
    static struct input in[N];
    struct lb_record records[N];
    uint8_t st[N];
    struct rejects rejected = {0};
    char err[256], window[CLOSED + 1][32];
    lb_pipeline_set_reject_hook(f->pipeline, note_reject, &rejected);
    static uint8_t which[LB_SLOTS];
    which[lb_key_slot("{res}", 5)] = 1;
    if (lb_intact_mark(f->cluster, "lb:", which, "test", err, sizeof(err), NULL) != 0)
        fail_msg("%s", err);
    for (int d = 0; d <= CLOSED; d++) {
        time_t t = (time_t)((MAY1 + d * DAY_MS) / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(window[d], sizeof(window[d]), "daily:%Y-%m-%d", &tm);
    }

    /* one event on each of 66 days (offsets 0 to 65), then 65 days close:
     * each close offset is 66 */
    int64_t now = MAY1 + (CLOSED + 1) * DAY_MS;
    for (int d = 0; d <= CLOSED; d++) {
        char id[16], player[16];
        snprintf(id, sizeof(id), "m%d", d);
        snprintf(player, sizeof(player), "p%d", d);
        in[d] = (struct input){0, d, event_at(id, "res", player, 5, 0, MAY1 + d * DAY_MS)};
    }
    records_of(in, CLOSED + 1, records);
    assert_int_equal(lb_pipeline_run(f->pipeline, records, CLOSED + 1, now, st, retry, NULL), 0);
    const char *claim[] = {"10", "d", "1783296000000"};
    size_t claimlen[] = {2, 1, 13};
    for (int d = 0; d < CLOSED; d++) {
        redisReply *r = lb_final_step(f->cluster, "lb:", "res", window[d], "claim", "pod-a", 30000,
                                      claim, claimlen, 3);
        assert_non_null(r);
        assert_true(r->type == REDIS_REPLY_ARRAY && r->elements == 4);
        assert_string_equal(r->element[0]->str, "go");
        assert_string_equal(r->element[3]->str, "t:0=66");
        freeReplyObject(r);
    }

    /* one late event for each closed day (offsets 66 to 130) and one for
     * the open day, in one request */
    for (int d = 0; d <= CLOSED; d++) {
        char id[16], player[16];
        snprintf(id, sizeof(id), "l%d", d);
        snprintf(player, sizeof(player), "q%d", d);
        in[d] = (struct input){0, CLOSED + 1 + d,
                               event_at(id, "res", player, 9, 0, MAY1 + d * DAY_MS + 3600000)};
    }
    records_of(in, CLOSED + 1, records);
    assert_int_equal(lb_pipeline_run(f->pipeline, records, CLOSED + 1, now, st, retry, NULL), 0);
    for (int i = 0; i <= CLOSED; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(rejected.n, CLOSED);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(rejected.offset[i], CLOSED + 1 + i);
        assert_int_equal(rejected.reason[i], LB_REJECT_WINDOW_CLOSED);
    }
    assert_int_equal(lb_pipeline_stats(f->pipeline)->late_after_close, CLOSED);
    for (int d = 0; d <= CLOSED; d++) {
        redisReply *day = redis_server_command(f->redis, "ZCARD lb:{res}:%s", window[d]);
        assert_int_equal(day->integer, d < CLOSED ? 1 : 2);
        freeReplyObject(day);
    }
    assert_true(total(f, "res", "q0") > 0); /* alltime took every event */
    assert_true(total(f, "res", "q64") > 0);
}
/* input.max_future (5 minutes by default): an event further ahead of its
 * record's timestamp than that is dead-lettered as ts_in_future, one within
 * it is written; a record without a timestamp is compared with the clock,
 * and counted. */
static void events_from_the_future_are_refused_by_their_record_timestamp(void **state)
{
    struct fixture *f = *state;
    const int64_t minute = 60000;
    struct input in[3] = {{0, 0, event_at("f0", "fut", "a", 1, 0, MAY1 + 4 * minute)},
                          {0, 1, event_at("f1", "fut", "b", 1, 0, MAY1 + 6 * minute)},
                          {0, 2, event_at("f2", "fut", "c", 1, 0, MAY1 + 6 * minute)}};
    struct lb_record records[3];
    uint8_t st[3];
    records_of(in, 3, records);
    records[0].timestamp_ms = records[1].timestamp_ms = MAY1; /* f2 has none: the clock, MAY1 */
    assert_int_equal(f->config->max_future_ms, 5 * minute);
    assert_int_equal(lb_pipeline_run(f->pipeline, records, 3, MAY1, st, give_up_at_once, NULL), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE); /* dead-lettered counts as done */
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(f->pipeline);
    assert_int_equal(ps->rejected[LB_REJECT_TS_IN_FUTURE], 2);
    assert_int_equal(ps->no_timestamp, 1);
    assert_int_equal(total(f, "fut", "a"), 1);
    assert_int_equal(total(f, "fut", "b"), 0);
    assert_int_equal(total(f, "fut", "c"), 0);
    /* the same event read later (a replay) with its record's timestamp decides alike */
    records[1].offset = 3;
    assert_int_equal(
        lb_pipeline_run(f->pipeline, &records[1], 1, MAY1 + DAY_MS, st, give_up_at_once, NULL), 0);
    assert_int_equal(ps->rejected[LB_REJECT_TS_IN_FUTURE], 3);
    assert_int_equal(total(f, "fut", "b"), 0);
}

/* A producer's retries (the same event_id in records of their own) count
 * once on a board that dedupes (sum boards do by default): within a batch
 * the planner leaves them out, across batches the script names them and
 * the board is planned again without them. Each is durable (its offset
 * may be committed) and counted, apart from conflicts (another payload). */
static void a_retry_counts_once_within_and_across_batches(void **state)
{
    struct fixture *f = *state;
    uint8_t st[16];
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(f->pipeline);
    uint64_t applied = ps->applied, replans = ps->replans;
    struct input b1[] = {{0, 0, event("r0", "dd", "a", 1)},
                         {0, 1, event("r1", "dd", "a", 2)},
                         {0, 2, event("r0", "dd", "a", 1)},
                         {1, 0, event("r1", "dd", "a", 7)}};
    assert_int_equal(run(f, b1, 4, st), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "dd", "a"), 3);
    assert_int_equal(ps->duplicates, 1);
    assert_int_equal(ps->conflicts, 1);
    assert_int_equal(ps->applied - applied, 2);
    assert_int_equal(ps->replans, replans);

    struct input b2[] = {{0, 3, event("r1", "dd", "a", 2)},
                         {0, 4, event("r2", "dd", "a", 4)},
                         {1, 1, event("r0", "dd", "a", 9)},
                         {1, 2, event("r3", "ee", "b", 5)}};
    assert_int_equal(run(f, b2, 4, st), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "dd", "a"), 3 + 4);
    assert_int_equal(total(f, "ee", "b"), 5);
    assert_int_equal(ps->duplicates, 2);
    assert_int_equal(ps->conflicts, 2);
    assert_int_equal(ps->applied - applied, 4);
    assert_int_equal(ps->replans, replans + 1);
    /* redelivered whole (a crash before the commit): nothing counts again */
    assert_int_equal(run(f, b2, 4, st), 0);
    assert_int_equal(total(f, "dd", "a"), 3 + 4);
    assert_int_equal(total(f, "ee", "b"), 5);
}

/* A topic's name may take Kafka's 249 bytes: a retry read from it is named
 * by its partition's marker field, and left out by it, as on any topic. */
static void a_retry_on_a_topic_of_the_longest_name_counts_once(void **state)
{
    struct fixture *f = *state;
    char topic[250];
    memset(topic, 'x', 249);
    topic[249] = '\0';
    uint8_t st[2];
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(f->pipeline);
    uint64_t duplicates = ps->duplicates, replans = ps->replans;
    struct input in[] = {{0, 0, event("l0", "lt", "a", 2)},
                         {0, 1, event("l0", "lt", "a", 2)},
                         {0, 2, event("l1", "lt", "a", 3)}};
    struct lb_record records[3];
    records_of(in, 3, records);
    for (int i = 0; i < 3; i++)
        records[i].topic = topic;
    assert_int_equal(lb_pipeline_run(f->pipeline, records, 1, MAY1, st, give_up_at_once, NULL), 0);
    assert_int_equal(st[0], LB_RECORD_DURABLE);
    /* the retry, in a batch of its own: the script names it, the board is
     * planned again without it */
    assert_int_equal(lb_pipeline_run(f->pipeline, &records[1], 2, MAY1, st, give_up_at_once, NULL),
                     0);
    assert_int_equal(st[0], LB_RECORD_DURABLE);
    assert_int_equal(st[1], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "lt", "a"), 2 + 3);
    assert_int_equal(ps->duplicates - duplicates, 1);
    assert_int_equal(ps->replans - replans, 1);
}

/* A batch read again after a crash between the writes and the commit,
 * with one event more: a retry of an event on another partition, left out
 * within the batch, still stretched that partition's segment to its
 * offset, which the board's marker has passed. The script says the
 * segment was partly applied; planned again from its planned events alone
 * it is not, and the new event is written. */
static void a_replan_that_only_narrows_a_segment_goes_on(void **state)
{
    struct fixture *f = *state;
    uint8_t st[3];
    struct input in[] = {{0, 0, event("x0", "cp", "a", 2)},
                         {1, 0, event("x0", "cp", "a", 2)},
                         {1, 1, event("x1", "cp", "a", 5)}};
    assert_int_equal(run(f, in, 2, st), 0);
    assert_int_equal(total(f, "cp", "a"), 2);
    assert_int_equal(run(f, in, 3, st), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(st[i], LB_RECORD_DURABLE);
    assert_int_equal(total(f, "cp", "a"), 2 + 5);
}

/* ---- out of memory ----------------------------------------------------------- */

struct oom_pipeline {
    struct fixture *f;
    struct input in[3];
    struct lb_record records[3];
};

/* A new cluster client and pipeline (with its second client) project three
 * sum events over two boards. Whatever allocation fails, the run says so
 * and nothing counts twice: a run that reports every record durable finds
 * the totals exact, however many failed runs came before it. */
static int project_with_a_new_pipeline(void *ctx)
{
    struct oom_pipeline *o = ctx;
    struct lb_cluster_options options;
    options = lb_engine_cluster_options(o->f->config);
    struct lb_cluster *cl = lb_cluster_new(&options);
    const struct lb_config *c = o->f->config;
    struct lb_pipeline_options po = {
        {c->profiles, c->nprofiles}, c->key_prefix, 0, c->max_future_ms};
    struct lb_pipeline *p = cl ? lb_pipeline_new(&po, o->f->decoder, cl) : NULL;
    uint8_t state[3];
    int rc = -1;
    if (p && lb_pipeline_overlap(p, &options) == 0)
        rc = lb_pipeline_run(p, o->records, 3, MAY1, state, give_up_at_once, NULL);
    lb_pipeline_free(p);
    lb_cluster_free(cl);
    if (rc != 0)
        return oom_failed() ? 0 : -1;
    oom_counting(0);
    int exact = total(o->f, "s1", "a") == 3 && total(o->f, "s2", "b") == 5;
    oom_counting(1);
    return exact ? 0 : -1;
}

static void running_out_of_memory_while_projecting_never_counts_twice(void **state)
{
    struct fixture *f = *state;
    struct oom_pipeline o = {.f = f};
    o.in[0] = (struct input){0, 0, event("o0", "s1", "a", 1)};
    o.in[1] = (struct input){0, 1, event("o1", "s2", "b", 5)};
    o.in[2] = (struct input){0, 2, event("o2", "s1", "a", 2)};
    records_of(o.in, 3, o.records);
    assert_true(oom_sweep("pipeline", project_with_a_new_pipeline, &o, 1) > 20);
    uint8_t st[3];
    assert_int_equal(lb_pipeline_run(f->pipeline, o.records, 3, MAY1, st, give_up_at_once, NULL),
                     0);
    assert_int_equal(total(f, "s1", "a"), 3);
    assert_int_equal(total(f, "s2", "b"), 5);
}

int main(void)
{
    lb_log_threshold = LB_LOG_ERROR - 1; /* the holds are logged as errors: expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            events_from_the_future_are_refused_by_their_record_timestamp, setup, teardown),
        cmocka_unit_test_setup_teardown(running_out_of_memory_while_projecting_never_counts_twice,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_retry_counts_once_within_and_across_batches, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_retry_on_a_topic_of_the_longest_name_counts_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_replan_that_only_narrows_a_segment_goes_on, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_held_event_is_never_skipped_and_nothing_else_waits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(releasing_one_partition_keeps_the_others_held, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_board_without_a_script_is_written_held_and_released,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            a_master_that_answered_gets_the_next_batch_while_another_stalls, setup_pair, teardown),
        cmocka_unit_test_setup_teardown(nothing_goes_out_early_once_a_request_failed, setup_pair,
                                        teardown),
        cmocka_unit_test_setup_teardown(replies_read_late_are_not_a_timeout, setup_pair, teardown),
        cmocka_unit_test_setup_teardown(a_refused_batch_in_flight_has_not_ended, setup_pair,
                                        teardown),
        cmocka_unit_test_setup_teardown(late_events_are_named_however_their_request_reaches_redis,
                                        setup_relay, teardown),
        cmocka_unit_test_setup_teardown(
            late_events_of_more_closed_windows_than_are_cached_are_each_named, setup_relay,
            teardown),
        cmocka_unit_test_setup_teardown(
            a_request_larger_than_the_sockets_take_is_written_by_progress, setup_relay, teardown),
        cmocka_unit_test_setup_teardown(a_batch_in_flight_is_moved_on_without_blocking, setup_pair,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
