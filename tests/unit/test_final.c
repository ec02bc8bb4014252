/* A window's final standings step by step (the apply script's "C" steps,
 * published.h lb_final_step) against a real redis-server: claim, keep and
 * done close a window once; replay --republish's reopen and reopened open
 * it again and have the next claim freeze it afresh, while a claim, a
 * restore or a keep in between change nothing. The keys are written by
 * hand, the answers and the state read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "apply.h"
#include "config.h"
#include "engine.h"
#include "published.h"
#include "redis_server.h"
#include "slot.h"

#define WINDOW "daily:2026-11-22"

struct fixture {
    struct redis_server *redis;
    struct lb_config *config;
    struct lb_cluster *cluster;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->redis = redis_server_start(1);
    f->config = redis_server_config(f->redis, "");
    struct lb_cluster_options options = lb_engine_cluster_options(f->config);
    f->cluster = lb_cluster_new(&options);
    assert_non_null(f->cluster);
    char err[256];
    if (lb_intact_mark(f->cluster, "lb:", NULL, "test", err, sizeof(err), NULL) != 0)
        fail_msg("%s", err); /* every slot's shard as the projector wrote it */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lb_cluster_free(f->cluster);
    lb_config_free(f->config);
    redis_server_stop(f->redis);
    free(f);
    return 0;
}

static void run(struct fixture *f, const char *format, const char *arg)
{
    freeReplyObject(redis_server_command(f->redis, format, arg));
}

/* One step by 'holder'; the answer's words joined by spaces. */
static void step(struct fixture *f, const char *name, const char *holder, const char **extra,
                 size_t nextra, const char *want)
{
    size_t extralen[8] = {0};
    for (size_t i = 0; i < nextra; i++)
        extralen[i] = strlen(extra[i]);
    redisReply *r = lb_final_step(f->cluster, "lb:", "fb", WINDOW, name, holder, 30000, extra,
                                  extralen, nextra);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", name, r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    char got[512] = "";
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        char word[128];
        if (e->type == REDIS_REPLY_INTEGER)
            snprintf(word, sizeof(word), "%lld", e->integer);
        else
            snprintf(word, sizeof(word), "%s", e->type == REDIS_REPLY_STRING ? e->str : "?");
        strncat(got, i ? " " : "", sizeof(got) - strlen(got) - 1);
        strncat(got, word, sizeof(got) - strlen(got) - 1);
    }
    freeReplyObject(r);
    if (strcmp(got, want) != 0)
        fail_msg("%s answered '%s', not '%s'", name, got, want);
}

/* replay runs' marks (replay/lease.h), the second's epoch larger */
#define RUN1 "41 host 11 1000"
#define RUN2 "42 host 12 2000"

static void assert_field(struct fixture *f, const char *key, const char *field, const char *want)
{
    redisReply *r = redis_server_command(f->redis, "HGET %s %s", key, field);
    if (want)
        assert_string_equal(r->type == REDIS_REPLY_STRING ? r->str : "(nil)", want);
    else
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
}

/* The final key's members, best first. */
static void assert_final(struct fixture *f, const char *want)
{
    redisReply *r = redis_server_command(f->redis, "ZRANGE lb:{fb}:final:" WINDOW " 0 -1 REV");
    char got[256] = "";
    for (size_t i = 0; i < r->elements; i++) {
        strncat(got, i ? " " : "", sizeof(got) - strlen(got) - 1);
        strncat(got, r->element[i]->str, sizeof(got) - strlen(got) - 1);
    }
    freeReplyObject(r);
    assert_string_equal(got, want);
}

static void a_window_closes_reopens_and_closes_again(void **state)
{
    struct fixture *f = *state;
    run(f, "ZADD lb:{fb}:%s 30 a 20 b 10 c", WINDOW);
    run(f, "HSET %s scores:0 41", "lb:{fb}:~applied");
    run(f, "HSET lb:{fb}:~open %s 900", WINDOW);
    const char *claim[] = {"2", "d", "1000"}, *keep[] = {"1", "bytes"}, *done[] = {"1"};
    step(f, "claim", "pod-a", claim, 3, "go 1000 3 scores:0=42");
    assert_field(f, "lb:{fb}:~open", WINDOW, NULL);
    assert_final(f, "a b");
    step(f, "keep", "pod-a", keep, 2, "ok bytes");
    step(f, "done", "pod-a", done, 1, "ok");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "published");
    /* sent again, its reply lost: done, as the first time; nothing changes */
    step(f, "done", "pod-a", done, 1, "ok");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "published");
    assert_field(f, "lb:{fb}:~final", "p:" WINDOW, "pod-a");
    assert_final(f, "a b");
    /* a publisher whose lease ran out while pod-a finished: stale */
    step(f, "done", "pod-b", done, 1, "stale");

    /* replay --republish: reopened, nothing closes it, restore leaves it */
    step(f, "reopen", RUN1, NULL, 0, "ok");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "reopening");
    assert_field(f, "lb:{fb}:~final", "p:" WINDOW, NULL);
    run(f, "HSET lb:{fb}:~open %s 900", WINDOW); /* a pod wrote an event there */
    step(f, "claim", "pod-a", claim, 3, "reopening");
    assert_field(f, "lb:{fb}:~open", WINDOW, "900");
    step(f, "keep", "pod-a", keep, 2, "stale");
    const char *restore[] = {"1000", "3", "scores:0=42", "1", "30", "a"};
    step(f, "restore", "-", restore, 6, "present reopening");
    assert_final(f, "a b"); /* the standings published stand until the next claim */

    /* rebuilt with a late event (d) and more read: due at once, frozen afresh */
    run(f, "ZADD lb:{fb}:%s 40 d", WINDOW);
    run(f, "HSET %s scores:0 50", "lb:{fb}:~applied");
    step(f, "reopened", RUN1, NULL, 0, "ok");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "reopened");
    assert_field(f, "lb:{fb}:~open", WINDOW, "1000"); /* when it closed: the watermark passed */
    const char *claim2[] = {"2", "d", "2000"};
    step(f, "claim", "pod-b", claim2, 3, "go 2000 4 scores:0=51");
    assert_final(f, "d a");
    assert_field(f, "lb:{fb}:~open", WINDOW, NULL);
    /* pod-b's lease runs out before its records are acknowledged: pod-c
     * takes the window over and publishes it; pod-b's done is stale */
    run(f, "HSET lb:{fb}:~final u:%s 0", WINDOW);
    step(f, "claim", "pod-c", claim2, 3, "go 2000 4 scores:0=51");
    step(f, "keep", "pod-c", keep, 2, "ok bytes");
    step(f, "done", "pod-c", done, 1, "ok");
    step(f, "done", "pod-b", done, 1, "stale");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "published");
    assert_field(f, "lb:{fb}:~final", "p:" WINDOW, "pod-c");
    step(f, "reopened", RUN1, NULL, 0, "stale published");
}

static void only_published_windows_reopen(void **state)
{
    struct fixture *f = *state;
    step(f, "reopen", RUN1, NULL, 0, "open"); /* not closed: nothing to reopen */
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, NULL);
    run(f, "ZADD lb:{fb}:%s 30 a", WINDOW);
    const char *claim[] = {"0", "d", "1000"};
    step(f, "claim", "pod-a", claim, 3, "go 1000 1 ");
    step(f, "reopen", RUN1, NULL, 0, "claimed pod-a"); /* being published */
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "claimed");
    step(f, "reopened", RUN1, NULL, 0, "stale claimed");
}

/* A window left reopening whose live key expired (replay --republish
 * killed, not run again within the ttl): unreopen puts it back published,
 * as it closed, out of ~open; only a reopening one. */
static void a_window_left_reopening_is_put_back_as_published(void **state)
{
    struct fixture *f = *state;
    run(f, "ZADD lb:{fb}:%s 30 a 20 b", WINDOW);
    const char *claim[] = {"0", "d", "1000"}, *done[] = {"1"};
    step(f, "claim", "pod-a", claim, 3, "go 1000 2 ");
    step(f, "unreopen", RUN1, NULL, 0, "stale claimed");
    step(f, "done", "pod-a", done, 1, "ok");
    step(f, "unreopen", RUN1, NULL, 0, "stale published");
    step(f, "reopen", RUN1, NULL, 0, "ok");
    run(f, "HSET lb:{fb}:~open %s 900", WINDOW); /* a pod wrote an event there */
    run(f, "DEL lb:{fb}:%s", WINDOW);            /* its ttl */
    step(f, "unreopen", RUN2, NULL, 0, "ok");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "published");
    assert_field(f, "lb:{fb}:~open", WINDOW, NULL);
    assert_final(f, "a b");
    step(f, "claim", "pod-a", claim, 3, "published");
}

/* A replay run stalled past its lease, woken after a later run reopened
 * the window (or handed it back): none of its steps changes anything, and
 * each names the later run; the later run's own steps go on. An earlier
 * release's run (a lease value alone: epoch 0) counts as earlier. */
static void a_stalled_runs_steps_leave_a_later_runs_window_alone(void **state)
{
    struct fixture *f = *state;
    run(f, "ZADD lb:{fb}:%s 30 a 20 b", WINDOW);
    const char *claim[] = {"0", "d", "1000"}, *done[] = {"1"};
    step(f, "claim", "pod-a", claim, 3, "go 1000 2 ");
    step(f, "done", "pod-a", done, 1, "ok");
    step(f, "reopen", "host 10 500", NULL, 0, "ok");
    step(f, "reopen", RUN1, NULL, 0, "ok");
    step(f, "reopen", RUN2, NULL, 0, "ok");
    const char *steps[] = {"reopen", "reopened", "unreopen"};
    const char *stalled[] = {RUN1, "42 host 13 3000", "host 10 500", "123 10 500"};
    for (size_t i = 0; i < 3; i++)
        for (size_t k = 0; k < 4; k++)
            step(f, steps[i], stalled[k], NULL, 0, "taken " RUN2);
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "reopening");
    assert_field(f, "lb:{fb}:~open", WINDOW, NULL);
    step(f, "reopened", RUN2, NULL, 0, "ok");
    step(f, "claim", "pod-b", claim, 3, "go 1000 2 ");
    step(f, "done", "pod-b", done, 1, "ok");
    /* published again: the stalled run's late reopen would hold it from
     * the pods, its late unreopen or reopened would be stale anyway */
    for (size_t k = 0; k < 4; k++)
        step(f, "reopen", stalled[k], NULL, 0, "taken " RUN2);
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, "published");
    /* a run after both reopens it */
    step(f, "reopen", "43 host 14 4000", NULL, 0, "ok");
    assert_field(f, "lb:{fb}:~final", "e:" WINDOW, "43 host 14 4000");
}

/* The node of the board's slot replaced empty or flushed (its ~intact
 * mark gone with it) and the pods writing it again: a claim freezes
 * nothing until replay rebuilt the slot and marked it. */
static void a_claim_waits_for_a_lost_slot_to_be_rebuilt(void **state)
{
    struct fixture *f = *state;
    run(f, "FLUSHALL%s", "");
    run(f, "ZADD lb:{fb}:%s 30 a", WINDOW); /* written again after the loss */
    run(f, "HSET lb:{fb}:~open %s 900", WINDOW);
    char err[256];
    uint8_t missing[LB_SLOTS];
    assert_int_equal(lb_intact_missing(f->cluster, "lb:", missing, err, sizeof(err), NULL),
                     LB_SLOTS);
    uint8_t board_slot[LB_SLOTS] = {0};
    uint16_t slot = lb_key_slot("{fb}", 4);
    board_slot[slot] = 1;
    assert_int_equal(lb_intact_mark(f->cluster, "lb:", board_slot, "test", err, sizeof(err), NULL),
                     0);
    assert_int_equal(lb_intact_missing(f->cluster, "lb:", missing, err, sizeof(err), NULL),
                     LB_SLOTS - 1);
    assert_int_equal(missing[slot], 0);
    board_slot[slot] = 0;
    board_slot[(slot + 1) % LB_SLOTS] = 1; /* its neighbour's mark does not count */
    run(f, "FLUSHALL%s", "");
    run(f, "ZADD lb:{fb}:%s 30 a", WINDOW);
    run(f, "HSET lb:{fb}:~open %s 900", WINDOW);
    assert_int_equal(lb_intact_mark(f->cluster, "lb:", board_slot, "test", err, sizeof(err), NULL),
                     0);
    const char *claim[] = {"0", "d", "1000"};
    step(f, "claim", "pod-a", claim, 3, "lost");
    assert_field(f, "lb:{fb}:~open", WINDOW, "900");
    assert_field(f, "lb:{fb}:~final", "s:" WINDOW, NULL);
    assert_field(f, "lb:{fb}:~final", "h:" WINDOW, NULL);
    redisReply *r = redis_server_command(f->redis, "EXISTS lb:{fb}:final:" WINDOW);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    /* replay rebuilt it (a member the loss took) and marked the slot */
    run(f, "ZADD lb:{fb}:%s 40 z", WINDOW);
    board_slot[slot] = 1;
    assert_int_equal(lb_intact_mark(f->cluster, "lb:", board_slot, "test", err, sizeof(err), NULL),
                     0);
    step(f, "claim", "pod-a", claim, 3, "go 1000 2 ");
    assert_final(f, "z a");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_window_closes_reopens_and_closes_again, setup, teardown),
        cmocka_unit_test_setup_teardown(only_published_windows_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(a_window_left_reopening_is_put_back_as_published, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_stalled_runs_steps_leave_a_later_runs_window_alone, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_claim_waits_for_a_lost_slot_to_be_rebuilt, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
