/* Decaying boards against a real redis-server running the apply script: the
 * engine as the daemon opens it (decoder, pipeline, the rebuild on its own
 * client), events with a patch dim, the overall board read back.
 *
 * The expected after-tax scores are worked out by hand from README
 * "Decaying boards" (10% per patch behind, linear, hundredths): 109 one
 * patch behind is 119.90, two behind 130.80. The tie of each entry is the
 * one its patch board holds: never scaled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "apply.h"
#include "clock.h"
#include "engine.h"
#include "event.h"
#include "eventgen.h"
#include "redis_relay.h"
#include "redis_server.h"

#define MAY1 INT64_C(1777593600000) /* 2026-05-01 */

struct fixture {
    struct redis_server *redis;
    struct redis_relay *relay; /* between the engine and a standalone 'redis', or NULL */
    struct lb_config *config;
    struct lb_engine *engine;
    int64_t offset;
};

/* An engine (a pod) on 'port' with its own configuration in '*config'. */
static struct lb_engine *engine_on(int port, const char *decay, struct lb_config **config)
{
    char text[2048], err[512];
    snprintf(text, sizeof(text),
             "kafka: {brokers: b, topics: [t]}\n"
             "input: {format: bare, writer_schema: %s/schemas/score_event.avsc}\n"
             "redis: {nodes: [127.0.0.1:%d], wait_replicas: 0, command_timeout: 500ms}\n"
             "profiles:\n"
             "  - name: runs\n"
             "    order: asc\n"
             "    retractions: reject\n"
             "    score_max: 40000\n"
             "    windows: {alltime: {}, custom: [{dim: patch}]}\n"
             "    decay: {dim: patch, max_age: 5, precision: 0.01, %s}\n",
             getenv("LB_SOURCE_DIR"), port, decay);
    assert_int_equal(
        lb_config_load_string("test.yaml", text, strlen(text), config, err, sizeof(err)), 0);
    struct lb_engine *engine = lb_engine_open(*config, NULL, err, sizeof(err), NULL);
    assert_non_null(engine);
    assert_non_null(engine->rebuild);
    return engine;
}

static void open_engine(struct fixture *f, const char *decay)
{
    f->engine = engine_on(f->relay ? redis_relay_port(f->relay) : redis_server_port(f->redis),
                          decay, &f->config);
}

static void close_engine(struct fixture *f)
{
    lb_engine_close(f->engine);
    lb_config_free(f->config);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->redis = redis_server_start(1);
    open_engine(f, "tax: 0.1");
    *state = f;
    return 0;
}

/* A standalone server behind a relay that can lose a reply. */
static int setup_relay(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->redis = redis_server_start(0);
    f->relay = redis_relay_start(redis_server_port(f->redis));
    open_engine(f, "tax: 0.1");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    close_engine(f);
    redis_relay_stop(f->relay);
    redis_server_stop(f->redis);
    free(f);
    return 0;
}

static int give_up(void *ctx, int64_t backoff_ms)
{
    (void)ctx;
    (void)backoff_ms;
    return 1;
}

/* Projects one submission of 'player' on board "ach" in 'patch'. */
static void submit(struct fixture *f, const char *player, int64_t score, const char *patch,
                   int64_t ts_ms)
{
    static struct generator *gen;
    struct gen_options bare = {.seed = 1,
                               .boards = 1,
                               .players = 1,
                               .zipf = 1.0,
                               .days = 1,
                               .bare = 1,
                               .dim_name = "patch",
                               .dim_values = 1};
    if (!gen)
        gen = gen_new(&bare); /* kept for the whole run */
    struct gen_event ev = {.score = score, .ts_ms = ts_ms};
    snprintf(ev.event_id, sizeof(ev.event_id), "e%lld", (long long)f->offset);
    snprintf(ev.board, sizeof(ev.board), "ach");
    snprintf(ev.player, sizeof(ev.player), "%s", player);
    snprintf(ev.dim_value, sizeof(ev.dim_value), "%s", patch);
    uint8_t bytes[GEN_PAYLOAD_MAX];
    size_t len = gen_encode(gen, &ev, bytes);
    struct lb_record record = {bytes, len, "t", 0, f->offset++, 0};
    uint8_t done;
    assert_int_equal(lb_pipeline_run(f->engine->pipeline, &record, 1, MAY1, &done, give_up, NULL),
                     0);
}

static int64_t zscore(struct fixture *f, const char *key, const char *member)
{
    redisReply *r = redis_server_command(f->redis, "ZSCORE %s %s", key, member);
    int64_t v = r->type == REDIS_REPLY_STRING ? (int64_t)strtod(r->str, NULL) : -1;
    freeReplyObject(r);
    return v;
}

/* The composite the overall board must hold for 'player': 'units' (the
 * after-tax score in hundredths) with the tie of its entry in 'patch'. */
static int64_t expected(struct fixture *f, const char *player, const char *patch, int64_t raw,
                        int64_t units)
{
    char key[128];
    snprintf(key, sizeof(key), "lb:{ach}:patch:%s", patch);
    int64_t composite = zscore(f, key, player);
    int64_t one = INT64_C(1) << f->config->profiles[0].scoring.tie_bits;
    assert_true(composite >= raw * one && composite < (raw + 1) * one);
    return units * one + (composite - raw * one);
}

static int64_t overall(struct fixture *f, const char *player)
{
    return zscore(f, "lb:{ach}:decayed", player);
}

static void drain(struct fixture *f);

/* ann's 109 in 1.9, rebuilt; then bob's 150 in 2.0, which starts a rebuild
 * that nobody steps yet. */
static void ann_then_bob_in_2_0(struct fixture *f)
{
    submit(f, "ann", 109, "1.9", MAY1);
    drain(f);
    submit(f, "bob", 150, "2.0", MAY1 + 1000);
}

static void drain(struct fixture *f)
{
    assert_int_equal(lb_rebuild_drain(f->engine->rebuild, lb_monotonic_ms() + 10000), 0);
}

static int exists(struct fixture *f, const char *key)
{
    redisReply *r = redis_server_command(f->redis, "EXISTS %s", key);
    int n = (int)r->integer;
    freeReplyObject(r);
    return n;
}

static void a_new_patch_retaxes_every_older_entry(void **state)
{
    struct fixture *f = *state;
    submit(f, "ann", 109, "1.9", MAY1);
    submit(f, "bob", 125, "1.9", MAY1 + 1000);
    drain(f);
    /* one patch: no tax */
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 10900));
    /* 1.10 comes after 1.9 (versions, not text) */
    submit(f, "bob", 121, "1.10", MAY1 + 2000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990));
    /* bob: 125 one behind is 137.50, 121 in the current patch wins */
    assert_int_equal(overall(f, "bob"), expected(f, "bob", "1.10", 121, 12100));
    submit(f, "cat", 200, "1.29", MAY1 + 3000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080));
    /* bob: 121 one behind is 133.10; 125 two behind 150.00 */
    assert_int_equal(overall(f, "bob"), expected(f, "bob", "1.10", 121, 13310));
    /* an event of an older patch is taxed at that patch's age at once */
    submit(f, "dan", 100, "1.9", MAY1 + 4000);
    assert_int_equal(overall(f, "dan"), expected(f, "dan", "1.9", 100, 12000));
    assert_int_equal(lb_rebuild_pending(f->engine->rebuild), 0);
    assert_false(exists(f, "lb:{ach}:~decay:new"));
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->finished, 3);
}

static void events_during_a_rebuild_reach_both_boards(void **state)
{
    struct fixture *f = *state;
    ann_then_bob_in_2_0(f);
    assert_int_equal(lb_rebuild_pending(f->engine->rebuild), 1);
    /* the live board still shows ann untaxed (the old board), bob already */
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 10900));
    submit(f, "cat", 140, "2.0", MAY1 + 2000);
    assert_int_equal(zscore(f, "lb:{ach}:~decay:new", "cat"),
                     expected(f, "cat", "2.0", 140, 14000));
    assert_int_equal(overall(f, "cat"), expected(f, "cat", "2.0", 140, 14000));
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990));
    assert_int_equal(overall(f, "cat"), expected(f, "cat", "2.0", 140, 14000));
    assert_int_equal(overall(f, "bob"), expected(f, "bob", "2.0", 150, 15000));
}

/* A newer patch while a rebuild runs: the running one finds its gen gone
 * and starts over for the new set of patches. */
static void a_patch_arriving_mid_rebuild_restarts_it(void **state)
{
    struct fixture *f = *state;
    ann_then_bob_in_2_0(f);
    usleep(20000);                                          /* past the interval between steps */
    lb_rebuild_step(f->engine->rebuild, lb_monotonic_ms()); /* take */
    submit(f, "cat", 150, "3.0", MAY1 + 2000);
    drain(f);
    assert_true(lb_rebuild_stats(f->engine->rebuild)->restarts >= 1);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080));
    assert_int_equal(overall(f, "bob"), expected(f, "bob", "2.0", 150, 16500));
    assert_int_equal(overall(f, "cat"), expected(f, "cat", "3.0", 150, 15000));
}

/* Another pod's lease: this one waits until it runs out, then finishes. */
static void a_lease_held_elsewhere_is_waited_for(void **state)
{
    struct fixture *f = *state;
    ann_then_bob_in_2_0(f);
    redisReply *r = redis_server_command(f->redis, "TIME");
    long long until = atoll(r->element[0]->str) * 1000 + 1500;
    freeReplyObject(r);
    freeReplyObject(
        redis_server_command(f->redis, "HSET lb:{ach}:~decay holder gone until %lld", until));
    /* this pod has other settings (20%): it waits all the same, and the
     * holder's gen stays until the lease runs out */
    close_engine(f);
    open_engine(f, "tax: 0.2");
    lb_rebuild_note(f->engine->rebuild, (struct lb_str){"ach", 3});
    usleep(20000);
    lb_rebuild_step(f->engine->rebuild, lb_monotonic_ms());
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->busy, 1);
    redisReply *gen = redis_server_command(f->redis, "HGET lb:{ach}:~decay gen");
    assert_string_equal(gen->str, "2");
    freeReplyObject(gen);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080));
}

/* The tax changed in the configuration: the next event of the board starts
 * a rebuild at the new rate, though it brings no new patch. */
static void a_changed_tax_retaxes_the_board(void **state)
{
    struct fixture *f = *state;
    submit(f, "ann", 109, "1.9", MAY1);
    submit(f, "bob", 150, "2.0", MAY1 + 1000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990));
    close_engine(f);
    open_engine(f, "tax: 0.2");
    submit(f, "cat", 160, "2.0", MAY1 + 2000);
    assert_int_equal(lb_rebuild_pending(f->engine->rebuild), 1);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080));
    submit(f, "dan", 100, "1.9", MAY1 + 3000); /* the same rule: no rebuild */
    assert_int_equal(lb_rebuild_pending(f->engine->rebuild), 0);
    assert_int_equal(overall(f, "dan"), expected(f, "dan", "1.9", 100, 12000));
}

/* ann in 1.9, bob in 2.0, taxed 10%; then a pod whose settings tax 20%
 * (the engine opened again), which no event reaches. */
static void an_idle_board_taxed_anew(struct fixture *f)
{
    submit(f, "ann", 109, "1.9", MAY1);
    submit(f, "bob", 150, "2.0", MAY1 + 1000);
    drain(f);
    close_engine(f);
    open_engine(f, "tax: 0.2");
}

/* A sweep, stepped until it noted a board (at most 200 ms); how many are
 * pending then. */
static size_t sweep(struct fixture *f)
{
    lb_rebuild_sweep(f->engine->rebuild);
    for (int i = 0; i < 20 && lb_rebuild_pending(f->engine->rebuild) == 0; i++) {
        usleep(10000);
        lb_rebuild_step(f->engine->rebuild, lb_monotonic_ms());
    }
    return lb_rebuild_pending(f->engine->rebuild);
}

/* The same change on a board that gets no event: the sweep of a pod with
 * the new settings finds its rule stale and rebuilds it. */
static void a_changed_tax_reaches_an_idle_board_through_the_sweep(void **state)
{
    struct fixture *f = *state;
    an_idle_board_taxed_anew(f);
    assert_int_equal(sweep(f), 1);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080));
    /* swept again: nothing left to do */
    close_engine(f);
    open_engine(f, "tax: 0.2");
    assert_int_equal(sweep(f), 0);
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->started, 0);
}

/* The same, while the pod's rule may not read the board's state (HMGET
 * refused a moment): the sweep notes the board all the same, and it is
 * rebuilt once it can be read. */
static void an_idle_board_the_sweep_could_not_read_is_rebuilt(void **state)
{
    struct fixture *f = *state;
    an_idle_board_taxed_anew(f);
    freeReplyObject(redis_server_command(f->redis, "ACL SETUSER default -hmget"));
    size_t pending = sweep(f);
    freeReplyObject(redis_server_command(f->redis, "ACL SETUSER default +hmget"));
    assert_int_equal(pending, 1);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080));
}

/* ops/runbooks/decaying-boards.md, "A patch that should not exist": the
 * same commands take a mistyped patch out, and the next event rebuilds. */
static void a_mistyped_patch_is_taken_out_as_the_runbook_says(void **state)
{
    struct fixture *f = *state;
    submit(f, "ann", 109, "1.9", MAY1);
    submit(f, "bob", 150, "1.10", MAY1 + 1000);
    submit(f, "eve", 300, "1.100", MAY1 + 2000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 13080)); /* two behind */
    freeReplyObject(redis_server_command(f->redis, "DEL lb:{ach}:patch:1.100"));
    freeReplyObject(redis_server_command(
        f->redis, "EVAL %s 2 lb:{ach}:~patches lb:{ach}:~decay 1.100",
        "for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do\n"
        "  if m:sub(-#ARGV[1] - 1) == '\\0' .. ARGV[1] then redis.call('ZREM', KEYS[1], m) end\n"
        "end\n"
        "return redis.call('HSET', KEYS[2], 'rule', 'changed')"));
    submit(f, "cat", 120, "1.10", MAY1 + 3000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990)); /* one behind */
    assert_int_equal(overall(f, "bob"), expected(f, "bob", "1.10", 150, 15000));
    assert_int_equal(overall(f, "eve"), -1); /* gone with its patch */
}

/* decay.patches: the list orders the patches, a patch's age is its
 * distance in the list (patches nobody wrote count), others are refused;
 * a changed list orders ~patches anew and rebuilds. */
static void a_configured_list_orders_and_limits_the_patches(void **state)
{
    struct fixture *f = *state;
    close_engine(f);
    open_engine(f, "tax: 0.1, patches: [\"1.0\", \"1.1\", \"1.2\", \"2.0\"]");
    submit(f, "ann", 109, "1.0", MAY1);
    submit(f, "bob", 150, "1.2", MAY1 + 1000);
    drain(f);
    /* 1.0 is two behind 1.2, though nobody wrote 1.1 */
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.0", 109, 13080));
    submit(f, "eve", 100, "1.05", MAY1 + 2000); /* not listed: refused whole */
    assert_int_equal(lb_pipeline_stats(f->engine->pipeline)->rejected[LB_REJECT_INVALID_DIMS], 1);
    assert_int_equal(overall(f, "eve"), -1);
    assert_false(exists(f, "lb:{ach}:patch:1.05"));
    /* 1.1, between the two written: no age moves, no rebuild */
    submit(f, "fay", 100, "1.1", MAY1 + 2500);
    assert_int_equal(lb_rebuild_pending(f->engine->rebuild), 0);
    assert_int_equal(overall(f, "fay"), expected(f, "fay", "1.1", 100, 11000));
    /* 1.1 taken out of the list: 1.0 is one behind 1.2 now */
    close_engine(f);
    open_engine(f, "tax: 0.1, patches: [\"1.0\", \"1.2\", \"2.0\"]");
    submit(f, "cat", 120, "1.2", MAY1 + 3000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.0", 109, 11990));
    assert_int_equal(overall(f, "cat"), expected(f, "cat", "1.2", 120, 12000));
    assert_int_equal(overall(f, "fay"), -1); /* 1.1 is no patch any more */
    /* back to version order: the same patches, seen ones counted */
    close_engine(f);
    open_engine(f, "tax: 0.1");
    submit(f, "dan", 130, "2.0", MAY1 + 4000);
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.0", 109, 13080)); /* two behind */
}

/* Redis stops answering while a rebuild is due: the step fails, is
 * counted and tried again later (nothing swapped half-way); once Redis
 * answers again the rebuild ends exact. */
static void a_stalled_redis_holds_the_rebuild_until_it_answers(void **state)
{
    struct fixture *f = *state;
    ann_then_bob_in_2_0(f);
    redis_server_pause(f->redis, 1);
    usleep(20000);
    lb_rebuild_step(f->engine->rebuild, lb_monotonic_ms());
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->failures, 1);
    assert_int_equal(lb_rebuild_pending(f->engine->rebuild), 1);
    redis_server_pause(f->redis, 0);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 10900)); /* the old board */
    drain(f);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990));
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->finished, 2);
}

/* The node applies the rebuild's finish and hangs up before replying: the
 * finish sent again finds this gen rebuilt and says so; the rebuild is
 * counted finished, not started over. */
static void a_finish_whose_reply_was_lost_has_finished(void **state)
{
    struct fixture *f = *state;
    ann_then_bob_in_2_0(f);
    redis_relay_lose(f->relay, "EVALSHA", "finish");
    drain(f);
    assert_int_equal(redis_relay_lost(f->relay), 1);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990));
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->finished, 2);
    assert_int_equal(lb_rebuild_stats(f->engine->rebuild)->restarts, 0);

    /* the same finish from a holder whose lease ran out while this pod
     * finished is stale: the gen was finished once, by this pod (both
     * answers come from ~decay alone: the other keys are only named) */
    redisReply *st = redis_server_command(f->redis, "HMGET lb:{ach}:~decay gen finished");
    assert_true(st->element[0]->type == REDIS_REPLY_STRING &&
                st->element[1]->type == REDIS_REPLY_STRING);
    const char *gen = st->element[0]->str, *finished = st->element[1]->str; /* "<gen> <holder>" */
    size_t glen = strlen(gen);
    assert_true(strncmp(finished, gen, glen) == 0 && finished[glen] == ' ');
    const char *who[] = {"gone", finished + glen + 1}, *want[] = {"stale", "ok"};
    for (int i = 0; i < 2; i++) {
        redisReply *r = redis_server_command(f->redis,
                                             "EVALSHA %s 4 lb:{ach}:" LB_DECAY_STATE_KEY
                                             " lb:{ach}:" LB_DECAY_SHADOW
                                             " lb:{ach}:overall lb:{ach}:" LB_PATCHES_KEY
                                             " " LB_APPLY_VERSION_TEXT " R finish %s 30000 %s",
                                             lb_apply_script_sha(), who[i], gen);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_string_equal(r->element[0]->str, want[i]);
        freeReplyObject(r);
    }
    freeReplyObject(st);
}

/* A real takeover: pod A (this fixture's engine, through the relay) has
 * taxed every member into the shadow, its finish still to send, when its
 * lease runs out; pod B takes the rebuild over and finishes it. A's finish
 * then answers stale: A starts over, finds the gen rebuilt and is done, and
 * the rebuild is counted finished once, by B. */
static void a_finish_after_another_pod_took_over_is_stale(void **state)
{
    struct fixture *f = *state;
    ann_then_bob_in_2_0(f);
    struct lb_rebuild *a = f->engine->rebuild;
    const struct lb_rebuild_stats *as = lb_rebuild_stats(a);
    uint64_t a_finished = as->finished, a_members = as->members;
    /* A finished gen 1 (ann alone): "1 <A's holder>" */
    redisReply *fin = redis_server_command(f->redis, "HGET lb:{ach}:~decay finished");
    assert_int_equal(fin->type, REDIS_REPLY_STRING);
    assert_true(strncmp(fin->str, "1 ", 2) == 0);
    char a_holder[128];
    snprintf(a_holder, sizeof(a_holder), "%s", fin->str + 2);
    freeReplyObject(fin);
    int64_t now = lb_monotonic_ms();
    /* A's last write with its lease is the chunk that taxes bob: what it
     * sends after that is its finish */
    for (int i = 0; i < 100 && as->members < a_members + 2; i++)
        lb_rebuild_step(a, now += 10);
    assert_int_equal(as->members, a_members + 2);
    assert_int_equal(lb_rebuild_pending(a), 1);
    /* A's lease runs out (its "until" reached, as when its steps stop for
     * longer than LB_REBUILD_LEASE_MS) */
    redisReply *t = redis_server_command(f->redis, "TIME");
    long long past = atoll(t->element[0]->str) * 1000 - 1;
    freeReplyObject(t);
    freeReplyObject(redis_server_command(f->redis, "HSET lb:{ach}:~decay until %lld", past));

    struct lb_config *b_config;
    struct lb_engine *b = engine_on(redis_server_port(f->redis), "tax: 0.1", &b_config);
    lb_rebuild_note(b->rebuild, (struct lb_str){"ach", 3});
    assert_int_equal(lb_rebuild_drain(b->rebuild, lb_monotonic_ms() + 10000), 0);
    assert_int_equal(lb_rebuild_stats(b->rebuild)->started, 1);
    assert_int_equal(lb_rebuild_stats(b->rebuild)->finished, 1);
    /* gen 2, finished by another holder than A */
    fin = redis_server_command(f->redis, "HGET lb:{ach}:~decay finished");
    assert_int_equal(fin->type, REDIS_REPLY_STRING);
    assert_true(strncmp(fin->str, "2 ", 2) == 0);
    assert_string_not_equal(fin->str + 2, a_holder);
    char b_finished[256];
    snprintf(b_finished, sizeof(b_finished), "%s", fin->str);
    freeReplyObject(fin);

    for (int i = 0; i < 100 && lb_rebuild_pending(a); i++)
        lb_rebuild_step(a, now += 10);
    assert_int_equal(lb_rebuild_pending(a), 0);
    assert_int_equal(as->finished, a_finished); /* stale: not counted by A */
    assert_true(as->restarts >= 1);
    fin = redis_server_command(f->redis, "HGET lb:{ach}:~decay finished");
    assert_int_equal(fin->type, REDIS_REPLY_STRING);
    assert_string_equal(fin->str, b_finished); /* still B's */
    freeReplyObject(fin);
    assert_int_equal(overall(f, "ann"), expected(f, "ann", "1.9", 109, 11990));
    assert_int_equal(overall(f, "bob"), expected(f, "bob", "2.0", 150, 15000));
    lb_engine_close(b);
    lb_config_free(b_config);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_new_patch_retaxes_every_older_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(events_during_a_rebuild_reach_both_boards, setup, teardown),
        cmocka_unit_test_setup_teardown(a_patch_arriving_mid_rebuild_restarts_it, setup, teardown),
        cmocka_unit_test_setup_teardown(a_lease_held_elsewhere_is_waited_for, setup, teardown),
        cmocka_unit_test_setup_teardown(a_stalled_redis_holds_the_rebuild_until_it_answers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_finish_whose_reply_was_lost_has_finished, setup_relay,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_finish_after_another_pod_took_over_is_stale, setup_relay,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_changed_tax_retaxes_the_board, setup, teardown),
        cmocka_unit_test_setup_teardown(a_configured_list_orders_and_limits_the_patches, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_mistyped_patch_is_taken_out_as_the_runbook_says, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(an_idle_board_the_sweep_could_not_read_is_rebuilt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_changed_tax_reaches_an_idle_board_through_the_sweep,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
