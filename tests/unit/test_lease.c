/* replay's lease (replay/lease.c) against a real redis-server, reached
 * through a relay (redis_relay.h) that can lose one reply: the command is
 * applied, then the connection closes before its reply comes back, as when
 * a node or a proxy hangs up mid-request. replay sends the command again;
 * what it finds then is its own write.
 */
#include "apply.h"
#include "lease.h"
#include "redis_relay.h"
#include "redis_server.h"

#include <hiredis/hiredis.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define PREFIX "lb:"
#define LEASE  "lb:~replay-lease"

struct fixture {
    struct redis_server *redis;
    struct redis_relay *relay;
    struct lb_host seed;
    struct lb_cluster *cluster;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->redis = redis_server_start(0); /* standalone: every command goes through the relay */
    f->relay = redis_relay_start(redis_server_port(f->redis));
    f->seed = (struct lb_host){.host = (char *)"127.0.0.1", .port = redis_relay_port(f->relay)};
    struct lb_cluster_options options = {.seeds = &f->seed,
                                         .nseeds = 1,
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 2000,
                                         .wait_replicas = 0};
    f->cluster = lb_cluster_new(&options);
    assert_non_null(f->cluster);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_cluster_free(f->cluster);
    redis_relay_stop(f->relay);
    redis_server_stop(f->redis);
    free(f);
    return 0;
}

/* The lease's value in Redis ("" when there is none). */
static void lease_value(struct fixture *f, char *out, size_t cap)
{
    redisReply *reply = redis_server_command(f->redis, "GET %s", LEASE);
    assert_true(reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_NIL);
    snprintf(out, cap, "%s", reply->type == REDIS_REPLY_STRING ? reply->str : "");
    freeReplyObject(reply);
}

/* This host's name as replay writes it in a lease value. */
static void this_host(char *out, size_t cap)
{
    snprintf(out, cap, "?");
    gethostname(out, cap - 1);
    out[cap - 1] = '\0';
    for (char *p = out; *p; p++)
        if (*p == ' ')
            *p = '_';
}

/* Takes the lease, which must succeed with the commands 'want' (after
 * those that open the connection); checks Redis holds our value, then
 * releases it and checks it is gone. */
static void take_and_release(struct fixture *f, const char *want)
{
    struct replay_lease lease;
    char why[512] = "", value[200], sent[1024];
    int taken = replay_lease_take(&lease, f->cluster, PREFIX, why, sizeof(why));
    assert_int_equal(redis_relay_lost(f->relay), 1);
    if (taken != 0)
        fail_msg("replay_lease_take returned %d: %s", taken, why);
    redis_relay_names(f->relay, sent, sizeof(sent));
    char taking[1024] = "";
    for (char *w = strtok(sent, " "); w; w = strtok(NULL, " "))
        if (strcmp(w, "CLUSTER") != 0 && strcmp(w, "ROLE") != 0)
            snprintf(taking + strlen(taking), sizeof(taking) - strlen(taking), "%s%s",
                     taking[0] ? " " : "", w);
    assert_string_equal(taking, want);
    assert_true(lease.held);
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, lease.owner);
    replay_lease_release(&lease);
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, "");
}

/* SET NX is applied and its reply lost: sent again, it finds the lease
 * taken, by us. Taking it must not refuse the run as "another replay". */
static void a_lost_reply_to_taking_the_lease_leaves_it_ours(void **state)
{
    struct fixture *f = *state;
    redis_relay_lose(f->relay, "SET", NULL);
    take_and_release(f, "SET SET GET EVAL EVAL"); /* then its epoch, confirmed */
}

/* The lease of a run that died on this host is taken over by a script; its
 * reply is lost, and the script sent again finds our value there: taken,
 * with nothing more sent. */
static void a_lost_reply_to_taking_over_a_dead_runs_lease_leaves_it_ours(void **state)
{
    struct fixture *f = *state;
    char host[64], dead[128];
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    this_host(host, sizeof(host));
    snprintf(dead, sizeof(dead), "%s %ld 1700000000000", host, (long)pid);
    freeReplyObject(redis_server_command(f->redis, "SET %s %s PX 30000", LEASE, dead));
    redis_relay_lose(f->relay, "EVAL", NULL);
    take_and_release(f, "SET GET EVAL EVAL EVAL EVAL");
}

/* A live run's lease (this test process, as another run would be) is still
 * refused, naming it. */
static void a_live_runs_lease_is_refused(void **state)
{
    struct fixture *f = *state;
    char host[64], live[128], why[512] = "", value[200];
    this_host(host, sizeof(host));
    snprintf(live, sizeof(live), "%s %ld 1700000000000", host, (long)getppid());
    freeReplyObject(redis_server_command(f->redis, "SET %s %s PX 30000", LEASE, live));
    struct replay_lease lease;
    assert_int_equal(replay_lease_take(&lease, f->cluster, PREFIX, why, sizeof(why)), 1);
    assert_false(lease.held);
    assert_non_null(strstr(why, "another replay is running on this keyspace"));
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %ld", (long)getppid());
    assert_non_null(strstr(why, pid));
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, live);
}

/* --republish's steps on a window's ~final (replay_final_step). */
#define WINDOW "daily:2026-11-01"

static void final_key(char *out, size_t cap, const char *rest)
{
    lb_board_key(PREFIX, (struct lb_str){"b", 1}, rest, out, cap);
}

/* The window's state in ~final ("" when none), and whether ~open lists it. */
static void final_state(struct fixture *f, char *out, size_t cap, int *listed)
{
    char key[256];
    final_key(key, sizeof(key), LB_FINAL_KEY);
    redisReply *reply = redis_server_command(f->redis, "HGET %s s:" WINDOW, key);
    snprintf(out, cap, "%s", reply->type == REDIS_REPLY_STRING ? reply->str : "");
    freeReplyObject(reply);
    final_key(key, sizeof(key), LB_OPEN_KEY);
    reply = redis_server_command(f->redis, "HEXISTS %s " WINDOW, key);
    *listed = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
    freeReplyObject(reply);
}

/* The lease taken as replay takes it, our value in Redis. */
static void take_lease(struct fixture *f, struct replay_lease *lease)
{
    char why[300];
    memset(lease, 0, sizeof(*lease));
    assert_int_equal(replay_lease_take(lease, f->cluster, PREFIX, why, sizeof(why)), 0);
}

static int pauses;

static int count_pause(void *ctx, const char *why, int attempt)
{
    (void)ctx;
    (void)why;
    assert_int_equal(attempt, ++pauses);
    return attempt < 3 ? 0 : -1;
}

/* 'step' on the window as it stands, under a lease taken now: it answers
 * stale and is not done, after 'tries' tries. */
static void stale_not_done(struct fixture *f, const char *step, int tries, const char *lose)
{
    int done = -1;
    struct replay_lease lease;
    take_lease(f, &lease);
    if (lose)
        redis_relay_lose(f->relay, lose, NULL);
    pauses = 0;
    redisReply *reply =
        replay_final_step(&lease, PREFIX, "b", WINDOW, step, count_pause, NULL, &done);
    assert_non_null(reply);
    assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
    assert_string_equal(reply->element[0]->str, "stale");
    freeReplyObject(reply);
    assert_int_equal(done, 0);
    assert_int_equal(pauses, tries - 1);
    assert_true(lease.held);
    replay_lease_release(&lease);
}

/* 'step' on the window in 'state', its reply lost: it was applied, and sent
 * again it must count as done exactly when 'done', leaving 'after'. */
static void lose_step(struct fixture *f, const char *state, const char *step, int done,
                      const char *after, int listed)
{
    char key[256], now[32];
    int was_done = -1, is_listed;
    final_key(key, sizeof(key), LB_FINAL_KEY);
    freeReplyObject(redis_server_command(f->redis, "DEL %s", key));
    freeReplyObject(
        redis_server_command(f->redis, "HSET %s s:" WINDOW " %s c:" WINDOW " 1", key, state));
    struct replay_lease lease;
    take_lease(f, &lease);
    int lost = redis_relay_lost(f->relay);
    redis_relay_lose(f->relay, "EVALSHA", step);
    pauses = 0;
    redisReply *reply =
        replay_final_step(&lease, PREFIX, "b", WINDOW, step, count_pause, NULL, &was_done);
    assert_non_null(reply);
    freeReplyObject(reply);
    assert_int_equal(redis_relay_lost(f->relay), lost + 1);
    assert_int_equal(pauses, 1);
    if (was_done != done)
        fail_msg("%s on a window %s, its reply lost: done %d, expected %d", step, state, was_done,
                 done);
    final_state(f, now, sizeof(now), &is_listed);
    assert_string_equal(now, after);
    assert_int_equal(is_listed, listed);
    replay_lease_release(&lease);
}

static void a_lost_reply_to_a_republish_step_leaves_it_done(void **state)
{
    struct fixture *f = *state;
    lose_step(f, "published", "reopen", 1, "reopening", 0);
    lose_step(f, "reopening", "reopened", 1, "reopened", 1);
    lose_step(f, "reopening", "unreopen", 1, "published", 0);
}

/* reopened on a window that says published or claimed (a failover lost
 * the reopen, and a pod claimed the window while it was rebuilt): not done,
 * whether or not a reply was lost, so the operator runs the replay again. */
static void a_republish_step_finding_another_state_is_not_done(void **state)
{
    struct fixture *f = *state;
    lose_step(f, "claimed", "reopened", 0, "claimed", 0);
    lose_step(f, "published", "reopened", 0, "published", 0);
    char now[32];
    int listed;
    stale_not_done(f, "unreopen", 1, NULL);
    final_state(f, now, sizeof(now), &listed);
    assert_string_equal(now, "published");
    assert_false(listed);
}

/* A step goes out only once the lease was confirmed ours: after an outage
 * longer than its TTL, another run may hold it and be rebuilding the
 * window. One whose lease merely expired takes it again and goes. */
static void a_republish_step_goes_out_only_under_our_lease(void **state)
{
    struct fixture *f = *state;
    char key[256], now[32], value[200];
    int done = -1, listed;
    final_key(key, sizeof(key), LB_FINAL_KEY);
    freeReplyObject(
        redis_server_command(f->redis, "HSET %s s:" WINDOW " published c:" WINDOW " 1", key));
    struct replay_lease lease;
    take_lease(f, &lease);
    freeReplyObject(redis_server_command(f->redis, "SET %s %s", LEASE, "elsewhere 7 1"));
    pauses = 0;
    redisReply *reply =
        replay_final_step(&lease, PREFIX, "b", WINDOW, "reopen", count_pause, NULL, &done);
    assert_null(reply);
    assert_int_equal(done, 0);
    assert_false(lease.held);
    assert_int_equal(pauses, 0);
    final_state(f, now, sizeof(now), &listed);
    assert_string_equal(now, "published");
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, "elsewhere 7 1");

    freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE));
    take_lease(f, &lease);
    freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE)); /* its TTL passed */
    reply = replay_final_step(&lease, PREFIX, "b", WINDOW, "reopen", count_pause, NULL, &done);
    assert_non_null(reply);
    freeReplyObject(reply);
    assert_int_equal(done, 1);
    assert_true(lease.held);
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, lease.owner);
    final_state(f, now, sizeof(now), &listed);
    assert_string_equal(now, "reopening");
}

/* A try whose lease renewal failed (its reply lost) sent no step: the
 * window a later try finds reopened was reopened by someone else, which is
 * not this step done. */
static void a_state_found_before_any_step_went_out_is_not_done(void **state)
{
    struct fixture *f = *state;
    char key[256];
    final_key(key, sizeof(key), LB_FINAL_KEY);
    freeReplyObject(
        redis_server_command(f->redis, "HSET %s s:" WINDOW " reopened c:" WINDOW " 1", key));
    int lost = redis_relay_lost(f->relay);
    stale_not_done(f, "reopened", 2, "EVAL"); /* the renewal's before the step */
    assert_int_equal(redis_relay_lost(f->relay), lost + 1);
}

/* A run stalled past its lease (a paused VM) takes it again on waking only
 * if nobody had it meanwhile: once its journal began, the journal must
 * still name it. Another run that finished (its journal deleted) or failed
 * (its journal left) cleared the staging keys and may have swapped: the
 * stalled run stops, and gives back what it took; also when the renewal
 * that took it again lost its reply, and the next one finds it ours. */
/* replay_lease_keep once a third of the TTL has passed (by the wall
 * clock: the monotonic clock of a paused VM may not count the pause) */
static int keep_after_a_while(struct replay_lease *lease)
{
    lease->renewed_wall_ms -= lease->ttl_ms / 3;
    return replay_lease_keep(lease);
}

static void a_lease_taken_again_after_another_run_had_it_is_lost(void **state)
{
    struct fixture *f = *state;
    char value[200];
    for (int failed = 0; failed < 2; failed++) {
        struct replay_lease lease;
        take_lease(f, &lease);
        replay_journal_start(&lease, "--board b");
        /* its TTL passed, nobody took it (a Redis outage): ours again */
        freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE));
        assert_int_equal(keep_after_a_while(&lease), 0);
        assert_true(lease.held);
        lease_value(f, value, sizeof(value));
        assert_string_equal(value, lease.owner);
        /* another run had it meanwhile and ended */
        freeReplyObject(redis_server_command(f->redis, "SET %s %s", LEASE, "elsewhere 7 1"));
        freeReplyObject(redis_server_command(
            f->redis, "HSET lb:~replay-journal owner %s selection y", "elsewhere 7 1"));
        if (!failed) /* it finished: its journal deleted; one that failed leaves it */
            freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-journal"));
        freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE));
        if (failed) { /* the renewal that takes it again applied, its reply lost */
            int lost = redis_relay_lost(f->relay);
            redis_relay_lose(f->relay, "EVAL", NULL);
            assert_int_equal(keep_after_a_while(&lease), 0); /* a failure, not a loss */
            assert_int_equal(redis_relay_lost(f->relay), lost + 1);
            lease_value(f, value, sizeof(value));
            assert_string_equal(value, lease.owner); /* so the next finds it "ours" */
        }
        assert_int_equal(keep_after_a_while(&lease), -1);
        assert_false(lease.held);
        lease_value(f, value, sizeof(value));
        assert_string_equal(value, ""); /* given back */
        redisReply *reply = redis_server_command(f->redis, "HGET lb:~replay-journal owner");
        if (!failed)
            assert_int_equal(reply->type, REDIS_REPLY_NIL);
        else
            assert_string_equal(reply->str, "elsewhere 7 1");
        freeReplyObject(reply);
        assert_int_equal(keep_after_a_while(&lease), 0); /* not held: nothing to renew */
        freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-journal"));
    }
    /* nobody had it, but the journal cannot be read (its reply lost): not
     * knowing counts as lost, the safe side */
    struct replay_lease lease;
    take_lease(f, &lease);
    replay_journal_start(&lease, "--board b");
    freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE));
    int lost = redis_relay_lost(f->relay);
    redis_relay_lose(f->relay, "HGET", NULL);
    assert_int_equal(keep_after_a_while(&lease), -1);
    assert_int_equal(redis_relay_lost(f->relay), lost + 1);
    assert_false(lease.held);
    freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-journal"));
}

/* A run that takes the lease after another lost it (stalled past its
 * TTL) draws a larger epoch; the stalled one, woken, finds it lost. */
static void a_run_taking_the_lease_later_draws_a_larger_epoch(void **state)
{
    struct fixture *f = *state;
    struct replay_lease stalled, later;
    take_lease(f, &stalled);
    assert_true(stalled.epoch > 0);
    freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE)); /* its TTL passed */
    usleep(5000); /* the same process: a lease value of its own (its ms) */
    take_lease(f, &later);
    assert_true(later.epoch > stalled.epoch);
    assert_int_equal(keep_after_a_while(&stalled), -1);
    assert_false(stalled.held);
    char value[200];
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, later.owner);
    replay_lease_release(&later);
    /* the draw's reply lost: sent again, it draws once more */
    int lost = redis_relay_lost(f->relay);
    redis_relay_lose(f->relay, "EVAL", "lb:~replay-epoch");
    take_lease(f, &stalled);
    assert_int_equal(redis_relay_lost(f->relay), lost + 1);
    assert_true(stalled.epoch > later.epoch);
    long long before = stalled.epoch;
    replay_lease_release(&stalled);
    /* the reply of the check that the lease is still ours lost: sent again */
    redis_relay_lose(f->relay, "EVAL", LEASE);
    take_lease(f, &stalled);
    assert_int_equal(redis_relay_lost(f->relay), lost + 2);
    assert_true(stalled.epoch > before);
    replay_lease_release(&stalled);
    /* the counter lost (its master restarted empty): still larger */
    freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-epoch"));
    take_lease(f, &later);
    assert_true(later.epoch > stalled.epoch);
    replay_lease_release(&later);
    /* no epoch can be drawn: the run does not start, the lease given back */
    freeReplyObject(redis_server_command(f->redis, "SET lb:~replay-epoch not-a-number"));
    char why[300];
    assert_int_equal(replay_lease_take(&stalled, f->cluster, PREFIX, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "cannot draw the replay epoch lb:~replay-epoch"));
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, "");
    /* the lease ran out while it was being taken (50 ms here; the draw's
     * reply lost, sent again 100 ms later): not taken again, since another
     * run may have had it meanwhile; the run does not start */
    freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-epoch"));
    setenv("LB_FAULT_LEASE_TTL_MS", "50", 1);
    redis_relay_lose(f->relay, "EVAL", "lb:~replay-epoch");
    int taken = replay_lease_take(&stalled, f->cluster, PREFIX, why, sizeof(why));
    unsetenv("LB_FAULT_LEASE_TTL_MS");
    assert_int_equal(taken, 1);
    assert_int_equal(redis_relay_lost(f->relay), lost + 3);
    assert_non_null(strstr(why, "went to another run while this one was taking it"));
    assert_false(stalled.held);
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, "");
}

/* A stalled run whose lease ran out is not given it again once another
 * run took it meanwhile, even before its journal began: that run drew a
 * larger epoch (and may have stalled in turn, its lease run out too). */
static void a_lease_another_run_drew_an_epoch_under_is_not_taken_again(void **state)
{
    struct fixture *f = *state;
    struct replay_lease stalled, later;
    take_lease(f, &stalled);
    freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE)); /* its TTL passed */
    usleep(5000); /* the same process: a lease value of its own (its ms) */
    take_lease(f, &later);
    freeReplyObject(redis_server_command(f->redis, "DEL %s", LEASE)); /* and the later's */
    assert_int_equal(keep_after_a_while(&stalled), -1);
    assert_false(stalled.held);
    char value[200];
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, ""); /* given back */
    /* the later one, woken, takes it again: nobody drew since */
    assert_int_equal(keep_after_a_while(&later), 0);
    assert_true(later.held);
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, later.owner);
    replay_lease_release(&later);
}

/* replay's fence scripts (replay/fence.lua, swap.lua) on a board's fence
 * held by runs of different epochs. */
extern const char lb_fence_lua[], lb_swap_lua[];
#define FENCE  "lb:{b}:~fence"
#define NEWEST "lb:{b}:~newest"

/* Fence values: "<epoch> <host> <pid> <ms>" */
#define STALLED "5 host 11 1"
#define LATER   "7 host 12 2"

static redisReply *fence(struct fixture *f, const char *step, const char *value)
{
    return redis_server_command(f->redis, "EVAL %s 2 %s %s %s %s 60000", lb_fence_lua, FENCE,
                                NEWEST, step, value);
}

static void fence_is(struct fixture *f, const char *want)
{
    redisReply *reply = redis_server_command(f->redis, "GET %s", FENCE);
    assert_true(reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_NIL);
    assert_string_equal(reply->type == REDIS_REPLY_STRING ? reply->str : "", want);
    freeReplyObject(reply);
}

static void expect_ok(redisReply *reply)
{
    assert_int_equal(reply->type, REDIS_REPLY_STATUS);
    assert_string_equal(reply->str, "OK");
    freeReplyObject(reply);
}

static void a_later_runs_fence_is_neither_overwritten_nor_lifted(void **state)
{
    struct fixture *f = *state;
    /* a latest board's mark, then earlier releases' fences (one of a host
     * named with digits only): all taken */
    freeReplyObject(redis_server_command(f->redis, "HSET %s apply 5", FENCE));
    expect_ok(fence(f, "set", STALLED));
    fence_is(f, STALLED);
    const char *earlier[] = {"host 12 1700000000000", "123456 12 1700000000000"};
    for (int i = 0; i < 2; i++) {
        freeReplyObject(redis_server_command(f->redis, "SET %s %s", FENCE, earlier[i]));
        expect_ok(fence(f, "set", STALLED));
        fence_is(f, STALLED);
    }
    /* the later run's, over the earlier one's */
    expect_ok(fence(f, "set", LATER));
    fence_is(f, LATER);
    redisReply *ttl = redis_server_command(f->redis, "PTTL %s", FENCE);
    assert_true(ttl->integer > 0 && ttl->integer <= 60000);
    freeReplyObject(ttl);
    /* the stalled run woken: its fence is refused, its lift leaves it; so
     * is one of another run with the same epoch (a counter rolled back) */
    const char *stale[] = {STALLED, "7 host 13 3"};
    for (int i = 0; i < 2; i++) {
        redisReply *reply = fence(f, "set", stale[i]);
        assert_int_equal(reply->type, REDIS_REPLY_ERROR);
        assert_non_null(
            strstr(reply->str, "lease lost: a later replay run holds " FENCE " (" LATER ")"));
        freeReplyObject(reply);
        expect_ok(fence(f, "lift", stale[i]));
        fence_is(f, LATER);
    }
    /* the later run's own: set again (renewed), then lifted: gone, a
     * latest board's mark back */
    expect_ok(fence(f, "set", LATER));
    freeReplyObject(redis_server_command(f->redis, "HSET %s p x", NEWEST));
    expect_ok(fence(f, "lift", LATER));
    redisReply *reply = redis_server_command(f->redis, "HGET %s apply", FENCE);
    assert_string_equal(reply->str, "5");
    freeReplyObject(reply);
}

/* One board's swap (swap.lua) by the run of fence value 'value': its
 * answer's first word. */
static void swap_answer(struct fixture *f, const char *value, char *out, size_t cap)
{
    redisReply *reply = redis_server_command(
        f->redis,
        "EVAL %s 9 lb:{b}:~applied lb:{b}:~offsets s:{b}:~applied s:{b}:~offsets %s "
        "lb:{b}:~final %s s:{b}:alltime lb:{b}:alltime 1 advance 1 0 %s t:0 10 10",
        lb_swap_lua, FENCE, NEWEST, value);
    assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
    snprintf(out, cap, "%s", reply->element[0]->str);
    freeReplyObject(reply);
}

static void a_swap_under_a_later_runs_fence_swaps_nothing(void **state)
{
    struct fixture *f = *state;
    char answer[32];
    freeReplyObject(redis_server_command(f->redis, "HSET s:{b}:~applied t:0 10"));
    freeReplyObject(redis_server_command(f->redis, "ZADD s:{b}:alltime 9 staged"));
    freeReplyObject(redis_server_command(f->redis, "ZADD lb:{b}:alltime 1 live"));
    freeReplyObject(redis_server_command(f->redis, "SET %s %s", FENCE, LATER));
    swap_answer(f, STALLED, answer, sizeof(answer));
    assert_string_equal(answer, "taken");
    redisReply *reply = redis_server_command(f->redis, "ZRANGE lb:{b}:alltime 0 -1");
    assert_int_equal(reply->elements, 1);
    assert_string_equal(reply->element[0]->str, "live");
    freeReplyObject(reply);
    fence_is(f, LATER);
    /* the run that fenced it swaps, and lifts its fence */
    swap_answer(f, LATER, answer, sizeof(answer));
    assert_string_equal(answer, "ok");
    reply = redis_server_command(f->redis, "ZRANGE lb:{b}:alltime 0 -1");
    assert_int_equal(reply->elements, 1);
    assert_string_equal(reply->element[0]->str, "staged");
    freeReplyObject(reply);
    fence_is(f, "");
}

/* Its journal's entries and its reopening notes: a run writes and
 * deletes only its own journal (its epoch), and never a later run's note;
 * a woken run stalled past its lease leaves both to the later run. */
static void hash_field(struct fixture *f, const char *key, const char *field, char *out, size_t cap)
{
    redisReply *reply = redis_server_command(f->redis, "HGET %s %s", key, field);
    assert_true(reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_NIL);
    snprintf(out, cap, "%s", reply->type == REDIS_REPLY_STRING ? reply->str : "");
    freeReplyObject(reply);
}

/* After a write a later run's state refused: the lease is lost (it stops
 * the run), then handed back to the test for the next write. */
static void lost_then_held(struct replay_lease *lease)
{
    assert_false(lease->held);
    assert_int_equal(replay_lease_keep(lease), -1);
    lease->held = 1;
    lease->lost = 0;
}

static void a_later_runs_journal_and_notes_are_left_alone(void **state)
{
    struct fixture *f = *state;
    char value[300], ours[300];
    struct replay_lease lease;
    take_lease(f, &lease);
    assert_int_equal(replay_journal_start(&lease, "--board b"), 0);
    snprintf(ours, sizeof(ours), "%lld %s", lease.epoch, lease.owner);
    /* its own: written; a note of an earlier run or release: taken over */
    replay_journal_swapped(&lease, "b1");
    hash_field(f, "lb:~replay-journal", "swapped:b1", value, sizeof(value));
    assert_true(*value);
    const char *earlier[] = {"", "elsewhere 7 1", "1 elsewhere 7 1"};
    for (int i = 0; i < 3; i++) {
        if (*earlier[i])
            freeReplyObject(redis_server_command(f->redis, "HSET lb:~replay-reopening %s %s", "w b",
                                                 earlier[i]));
        assert_int_equal(replay_journal_reopening(&lease, "b", "w", 1), 0);
        hash_field(f, "lb:~replay-reopening", "w b", value, sizeof(value));
        assert_string_equal(value, ours);
    }
    assert_int_equal(replay_journal_reopening(&lease, "b", "w", 0), 0);
    hash_field(f, "lb:~replay-reopening", "w b", value, sizeof(value));
    assert_string_equal(value, "");
    assert_true(lease.held);
    /* a later run took the lease, began its journal and noted the window
     * (or one of the same epoch: a counter rolled back); each write of
     * ours finds it, changes nothing and loses the lease */
    freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-journal"));
    freeReplyObject(redis_server_command(f->redis, "HSET lb:~replay-journal owner %s epoch %lld",
                                         "elsewhere 7 1", lease.epoch + 1));
    replay_journal_swapped(&lease, "b2");
    lost_then_held(&lease);
    hash_field(f, "lb:~replay-journal", "swapped:b2", value, sizeof(value));
    assert_string_equal(value, "");
    replay_journal_finish(&lease);
    lost_then_held(&lease);
    hash_field(f, "lb:~replay-journal", "owner", value, sizeof(value));
    assert_string_equal(value, "elsewhere 7 1");
    for (long long e = lease.epoch; e <= lease.epoch + 1; e++) {
        char later[300];
        snprintf(later, sizeof(later), "%lld elsewhere 7 1", e);
        freeReplyObject(
            redis_server_command(f->redis, "HSET lb:~replay-reopening %s %s", "w b", later));
        for (int on = 1; on >= 0; on--) {
            assert_int_equal(replay_journal_reopening(&lease, "b", "w", on), -1);
            lost_then_held(&lease);
            hash_field(f, "lb:~replay-reopening", "w b", value, sizeof(value));
            assert_string_equal(value, later);
        }
        /* nor is it deleted by our tidy of the notes, though its window is
         * not reopening (the later run noted it before its reopen step) */
        struct replay_leftover old;
        assert_int_equal(replay_journal_read(f->cluster, PREFIX, &lease, &old), 0);
        lost_then_held(&lease);
        hash_field(f, "lb:~replay-reopening", "w b", value, sizeof(value));
        assert_string_equal(value, later);
    }
    /* an earlier run's stale note is tidied away, the lease kept */
    freeReplyObject(redis_server_command(f->redis, "HSET lb:~replay-reopening %s %s", "w b",
                                         "1 elsewhere 7 1"));
    struct replay_leftover old;
    assert_int_equal(replay_journal_read(f->cluster, PREFIX, &lease, &old), 0);
    assert_true(lease.held);
    hash_field(f, "lb:~replay-reopening", "w b", value, sizeof(value));
    assert_string_equal(value, "");
    /* no journal, or an earlier run's (our start failed): our entries are
     * not written there, quietly; our end deletes an earlier run's, as our
     * start would have replaced it */
    freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-journal"));
    replay_journal_swapped(&lease, "b3");
    redisReply *reply = redis_server_command(f->redis, "EXISTS lb:~replay-journal");
    assert_int_equal(reply->integer, 0);
    freeReplyObject(reply);
    freeReplyObject(redis_server_command(f->redis, "HSET lb:~replay-journal owner %s epoch 1",
                                         "elsewhere 7 1"));
    replay_journal_swapped(&lease, "b3");
    hash_field(f, "lb:~replay-journal", "swapped:b3", value, sizeof(value));
    assert_string_equal(value, "");
    assert_true(lease.held);
    replay_journal_finish(&lease);
    reply = redis_server_command(f->redis, "EXISTS lb:~replay-journal");
    assert_int_equal(reply->integer, 0);
    freeReplyObject(reply);
    /* its own journal, begun again: deleted when the run finishes */
    assert_int_equal(replay_journal_start(&lease, "--board b"), 0);
    replay_journal_finish(&lease);
    reply = redis_server_command(f->redis, "EXISTS lb:~replay-journal");
    assert_int_equal(reply->integer, 0);
    freeReplyObject(reply);
    assert_int_equal(replay_lease_keep(&lease), 0);
    replay_lease_release(&lease);
}

/* A journal or notes key Redis refuses to write (a string there: an
 * operator's mistake): said, the key left as it is, the run going on
 * (the journal is what an operator reads); a note that cannot be written
 * stops its window's reopen (-1). A run without the lease starts no
 * journal. */
static void a_journal_redis_refuses_is_said_and_the_run_goes_on(void **state)
{
    struct fixture *f = *state;
    char value[300];
    struct replay_lease lease;
    take_lease(f, &lease);
    freeReplyObject(redis_server_command(f->redis, "SET lb:~replay-journal x"));
    freeReplyObject(redis_server_command(f->redis, "SET lb:~replay-reopening y"));
    assert_int_equal(replay_journal_start(&lease, "--board b"), 0);
    replay_journal_swapped(&lease, "b1");
    replay_journal_finish(&lease);
    assert_int_equal(replay_journal_reopening(&lease, "b", "w", 1), -1);
    assert_int_equal(replay_journal_reopening(&lease, "b", "w", 0), -1);
    assert_true(lease.held);
    redisReply *reply =
        redis_server_command(f->redis, "MGET lb:~replay-journal lb:~replay-reopening");
    assert_string_equal(reply->element[0]->str, "x");
    assert_string_equal(reply->element[1]->str, "y");
    freeReplyObject(reply);
    lease_value(f, value, sizeof(value));
    assert_string_equal(value, lease.owner);
    replay_lease_release(&lease);
    freeReplyObject(redis_server_command(f->redis, "DEL lb:~replay-journal lb:~replay-reopening"));
    assert_int_equal(replay_journal_start(&lease, "--board b"), 1);
    reply = redis_server_command(f->redis, "EXISTS lb:~replay-journal");
    assert_int_equal(reply->integer, 0);
    freeReplyObject(reply);
}

/* What 'fn' writes to stderr, into 'out'. */
static void stderr_of(void (*fn)(struct replay_lease *), struct replay_lease *lease, char *out,
                      size_t cap)
{
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fileno(tmp), 2), 2);
    fn(lease);
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

static int reopening_said;

static void write_journal_and_note(struct replay_lease *lease)
{
    replay_journal_swapped(lease, "b1");
    reopening_said = replay_journal_reopening(lease, "b", "w", 1);
}

/* A journal or notes update Redis does not answer (its node gone, every
 * try refused): said with the cluster's own error, the note's window not
 * reopened (-1), the lease not taken for lost: the run's next renewal
 * decides whether it goes on. */
static void a_journal_update_redis_does_not_answer_is_said(void **state)
{
    struct fixture *f = *state;
    char said[4096];
    struct replay_lease lease;
    take_lease(f, &lease);
    redis_server_stop(f->redis);
    f->redis = NULL;
    stderr_of(write_journal_and_note, &lease, said, sizeof(said));
    print_message("said: %s", said);
    assert_int_equal(reopening_said, -1);
    assert_non_null(strstr(said, "replay: updating lb:~replay-journal failed: "));
    assert_non_null(strstr(said, "replay: updating lb:~replay-reopening failed: "));
    assert_null(strstr(said, "unexpected reply"));
    assert_null(strstr(said, "later run"));
    assert_true(lease.held);
    assert_false(lease.lost);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_lost_reply_to_taking_the_lease_leaves_it_ours, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            a_lost_reply_to_taking_over_a_dead_runs_lease_leaves_it_ours, setup, teardown),
        cmocka_unit_test_setup_teardown(a_live_runs_lease_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(a_lost_reply_to_a_republish_step_leaves_it_done, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_republish_step_finding_another_state_is_not_done, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_republish_step_goes_out_only_under_our_lease, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_state_found_before_any_step_went_out_is_not_done, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_lease_taken_again_after_another_run_had_it_is_lost, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_run_taking_the_lease_later_draws_a_larger_epoch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_lease_another_run_drew_an_epoch_under_is_not_taken_again,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_later_runs_fence_is_neither_overwritten_nor_lifted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_later_runs_journal_and_notes_are_left_alone, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_journal_redis_refuses_is_said_and_the_run_goes_on, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_journal_update_redis_does_not_answer_is_said, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_swap_under_a_later_runs_fence_swaps_nothing, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
