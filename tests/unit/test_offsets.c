/* The offset tracker's rules: what is committed, where a partition holds,
 * when it pauses, when and from where it is read again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kafka.h"
#include "offsets.h"

struct commits {
    int n;
    char topic[8][16];
    int32_t partition[8];
    int64_t offset[8];
    int64_t watermark[8];
};

static void record_commit(void *ctx, const char *topic, int32_t partition, int64_t offset,
                          int64_t watermark)
{
    struct commits *c = ctx;
    strcpy(c->topic[c->n], topic);
    c->partition[c->n] = partition;
    c->watermark[c->n] = watermark;
    c->offset[c->n++] = offset;
}

static struct commits commit(struct lb_offsets *o)
{
    struct commits c = {0};
    lb_offsets_to_commit(o, record_commit, &c);
    return c;
}

struct rewinds {
    int n;
    int32_t partition[8];
    int64_t offset[8];
    int paused[8];
    enum lb_hold_reason reason[8];
};

static void record_rewind(void *ctx, const char *topic, int32_t partition, int64_t offset,
                          enum lb_hold_reason reason, int was_paused)
{
    struct rewinds *r = ctx;
    (void)topic;
    r->partition[r->n] = partition;
    r->offset[r->n] = offset;
    r->reason[r->n] = reason;
    r->paused[r->n++] = was_paused;
}

static void durable_records_advance_the_commit(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(10, 100, 5000);
    assert_int_equal(lb_offsets_assign(o, "s", 0, 40, -1, 1000), 0);
    assert_int_equal(commit(o).n, 0); /* nothing new since the group's commit */
    for (int64_t off = 40; off < 45; off++)
        lb_offsets_settle(o, "s", 0, off, LB_HOLD_NONE, 0, 0);
    struct commits c = commit(o);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.offset[0], 45);
    assert_int_equal(commit(o).n, 0); /* sent once */
    lb_offsets_free(o);
}

static void a_partition_commits_no_further_than_its_first_record_not_durable(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(10, 100, 5000);
    lb_offsets_assign(o, "s", 0, -1, -1, 1000);
    lb_offsets_assign(o, "s", 1, 7, -1, 1000);
    assert_int_equal(lb_offsets_settle(o, "s", 0, 0, LB_HOLD_NONE, 0, 0), 0);
    assert_int_equal(lb_offsets_settle(o, "s", 0, 1, LB_HOLD_BOARD, 0, 0), 1);
    /* later records, durable or not, do not move it */
    assert_int_equal(lb_offsets_settle(o, "s", 0, 2, LB_HOLD_NONE, 0, 0), 0);
    assert_int_equal(lb_offsets_settle(o, "s", 0, 3, LB_HOLD_REDIS, 0, 0), 0);
    /* the other partition flows */
    lb_offsets_settle(o, "s", 1, 7, LB_HOLD_NONE, 0, 0);
    lb_offsets_settle(o, "s", 1, 8, LB_HOLD_NONE, 0, 0);
    struct commits c = commit(o);
    assert_int_equal(c.n, 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(c.offset[i], c.partition[i] == 0 ? 1 : 9);
    assert_true(lb_offsets_is_held(o, "s", 0));
    assert_false(lb_offsets_is_held(o, "s", 1));
    lb_offsets_free(o);
}

static void a_held_partition_pauses_past_the_bound(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(3, 100, 5000);
    lb_offsets_assign(o, "s", 0, 0, -1, 1000);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 0); /* not held: never */
    lb_offsets_settle(o, "s", 0, 0, LB_HOLD_DLQ, 0, 0);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 0);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 0);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 0);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 1); /* the fourth past the hold */
    lb_offsets_paused(o, "s", 0);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 0); /* said once */
    lb_offsets_free(o);
}

static void a_held_partition_is_read_again_from_its_hold_after_a_growing_back_off(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(1, 100, 400);
    struct rewinds r = {0};
    lb_offsets_assign(o, "s", 0, 10, -1, 1000);
    lb_offsets_settle(o, "s", 0, 10, LB_HOLD_NONE, 0, 0);
    lb_offsets_settle(o, "s", 0, 11, LB_HOLD_REDIS, 1000, 0);
    lb_offsets_polled(o, "s", 0);
    assert_int_equal(lb_offsets_polled(o, "s", 0), 1);
    lb_offsets_paused(o, "s", 0);
    assert_int_equal(lb_offsets_rewind_due(o, 1099, record_rewind, &r), 0);
    assert_int_equal(lb_offsets_rewind_due(o, 1100, record_rewind, &r), 1);
    assert_int_equal(r.offset[0], 11);
    assert_int_equal(r.reason[0], LB_HOLD_REDIS);
    assert_true(r.paused[0]);
    assert_false(lb_offsets_is_held(o, "s", 0));
    /* read again and it fails again: held again, the back-off doubled */
    lb_offsets_settle(o, "s", 0, 11, LB_HOLD_REDIS, 2000, 0);
    assert_int_equal(lb_offsets_rewind_due(o, 2199, record_rewind, &r), 0);
    assert_int_equal(lb_offsets_rewind_due(o, 2200, record_rewind, &r), 1);
    lb_offsets_settle(o, "s", 0, 11, LB_HOLD_REDIS, 3000, 0);
    assert_int_equal(lb_offsets_rewind_due(o, 3399, record_rewind, &r), 0);
    assert_int_equal(lb_offsets_rewind_due(o, 3400, record_rewind, &r), 1);
    lb_offsets_settle(o, "s", 0, 11, LB_HOLD_REDIS, 4000, 0); /* capped at 400 */
    assert_int_equal(lb_offsets_rewind_due(o, 4400, record_rewind, &r), 1);
    /* progress past the hold resets the back-off */
    lb_offsets_settle(o, "s", 0, 11, LB_HOLD_NONE, 5000, 0);
    lb_offsets_settle(o, "s", 0, 12, LB_HOLD_NONE, 5000, 0);
    lb_offsets_settle(o, "s", 0, 13, LB_HOLD_REDIS, 6000, 0);
    assert_int_equal(lb_offsets_rewind_due(o, 6100, record_rewind, &r), 1);
    assert_int_equal(r.offset[r.n - 1], 13);
    assert_int_equal(commit(o).offset[0], 13);
    lb_offsets_free(o);
}

static void a_refused_commit_is_sent_again_and_an_acknowledged_one_moves_committed(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(10, 100, 5000);
    lb_offsets_assign(o, "s", 3, 5, -1, 1000);
    lb_offsets_settle(o, "s", 3, 5, LB_HOLD_NONE, 0, 0);
    assert_int_equal(commit(o).offset[0], 6);
    lb_offsets_commit_result(o, "s", 3, 6, 0, 2000);
    assert_int_equal(commit(o).offset[0], 6); /* again */
    lb_offsets_commit_result(o, "s", 3, 6, 1, 3000);
    assert_int_equal(commit(o).n, 0);
    lb_offsets_free(o);
}

static void seen(void *ctx, const struct lb_partition_progress *pp)
{
    *(struct lb_partition_progress *)ctx = *pp;
}

static void progress_shows_the_commit_and_the_hold_with_its_reason(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(10, 100, 5000);
    struct lb_partition_progress pp;
    lb_offsets_assign(o, "s", 2, 100, -1, 1000);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.committed, 100);
    assert_int_equal(pp.committed_wall_ms, 1000);
    assert_int_equal(pp.hold, -1);
    lb_offsets_settle(o, "s", 2, 100, LB_HOLD_NONE, 0, 0);
    lb_offsets_settle(o, "s", 2, 101, LB_HOLD_DLQ, 0, 0);
    commit(o);
    lb_offsets_commit_result(o, "s", 2, 101, 1, 5000);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.committed, 101);
    assert_int_equal(pp.committed_wall_ms, 5000);
    assert_int_equal(pp.hold, 101);
    assert_int_equal(pp.reason, LB_HOLD_DLQ);
    assert_string_equal(lb_hold_reason_name(pp.reason), "dlq");
    /* read again: still shown as held (its commit has not moved) until the
     * held record is durable */
    struct rewinds r = {0};
    assert_int_equal(lb_offsets_rewind_due(o, 1000000, record_rewind, &r), 1);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.hold, 101);
    assert_int_equal(pp.reason, LB_HOLD_DLQ);
    lb_offsets_settle(o, "s", 2, 101, LB_HOLD_NONE, 0, 0);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.hold, -1);
    assert_int_equal(pp.reason, LB_HOLD_NONE);
    lb_offsets_revoke(o, "s", 2);
    pp.partition = -1;
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.partition, -1); /* forgotten */
    lb_offsets_free(o);
}

static int64_t floor_of(void *ctx, const char *topic, int32_t partition, enum lb_hold_reason *why)
{
    const int64_t *floors = ctx; /* per partition of topic "s" */
    *why = LB_HOLD_TOP;
    return strcmp(topic, "s") == 0 ? floors[partition] : -1;
}

/* A floor (the merged tops: tops.h) keeps the commit at or below it, and
 * shows as a hold for "top" while it is below the next offset; once it
 * lifts, the rest is committed. */
static void a_floor_keeps_the_commit_at_or_below_it(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(10, 100, 5000);
    int64_t floors[2] = {-1, -1};
    struct lb_partition_progress pp;
    lb_offsets_set_floor(o, floor_of, floors);
    lb_offsets_assign(o, "s", 0, 10, -1, 1000);
    lb_offsets_assign(o, "s", 1, 0, -1, 1000);
    floors[0] = 12; /* records 12.. changed a window whose top is not written */
    for (int64_t off = 10; off < 15; off++)
        lb_offsets_settle(o, "s", 0, off, LB_HOLD_NONE, 0, 0);
    lb_offsets_settle(o, "s", 1, 0, LB_HOLD_NONE, 0, 0);
    struct commits c = commit(o);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.offset[0], 12);
    assert_int_equal(c.offset[1], 1);
    lb_offsets_commit_result(o, "s", 0, 12, 1, 2000);
    lb_offsets_each(o, seen, &pp); /* the last partition: 1, not held */
    assert_int_equal(pp.hold, -1);
    lb_offsets_revoke(o, "s", 1);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.committed, 12);
    assert_int_equal(pp.hold, 12);
    assert_string_equal(lb_hold_reason_name(pp.reason), "top");
    assert_int_equal(commit(o).n, 0); /* nothing more while the floor stays */
    floors[0] = -1;                   /* the top is written */
    c = commit(o);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.offset[0], 15);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.hold, -1);
    /* record 15 waits for a top and 16 fails: the hold is what shows */
    floors[0] = 15;
    lb_offsets_settle(o, "s", 0, 15, LB_HOLD_NONE, 0, 0);
    lb_offsets_settle(o, "s", 0, 16, LB_HOLD_REDIS, 0, 0);
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.hold, 16);
    assert_int_equal(pp.reason, LB_HOLD_REDIS);
    assert_int_equal(commit(o).n, 0);
    lb_offsets_free(o);
    o = lb_offsets_new(10, 100, 5000);
    lb_offsets_set_floor(o, floor_of, floors);
    lb_offsets_assign(o, "s", 0, 15, -1, 1000);
    /* record 15 waits for a top; a floor at the next offset changes nothing */
    floors[0] = 15;
    lb_offsets_settle(o, "s", 0, 15, LB_HOLD_NONE, 0, 0);
    assert_int_equal(commit(o).n, 0);
    floors[0] = 16;
    c = commit(o);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.offset[0], 16);
    lb_offsets_free(o);
}

/* The watermark: the highest event time below the commit, never moving
 * back; held records and those past a floor do not count; it starts from
 * the group's (read back at the assignment). */
static void a_commit_carries_the_highest_event_time_below_it(void **state)
{
    (void)state;
    struct lb_offsets *o = lb_offsets_new(10, 100, 5000);
    int64_t floors[1] = {-1};
    lb_offsets_set_floor(o, floor_of, floors);
    lb_offsets_assign(o, "s", 0, 10, -1, 1000);
    assert_int_equal(commit(o).n, 0);
    lb_offsets_set_watermark(o, "s", 0, 5000); /* the group's commit said so */
    lb_offsets_settle(o, "s", 0, 10, LB_HOLD_NONE, 0, 9000);
    lb_offsets_settle(o, "s", 0, 11, LB_HOLD_NONE, 0, 0);    /* no event time */
    lb_offsets_settle(o, "s", 0, 12, LB_HOLD_NONE, 0, 7000); /* older: no step back */
    struct commits c = commit(o);
    assert_int_equal(c.offset[0], 13);
    assert_int_equal(c.watermark[0], 9000);
    lb_offsets_settle(o, "s", 0, 13, LB_HOLD_NONE, 0, 9500);
    lb_offsets_settle(o, "s", 0, 14, LB_HOLD_REDIS, 0, 99000); /* held: not below the commit */
    c = commit(o);
    assert_int_equal(c.offset[0], 14);
    assert_int_equal(c.watermark[0], 9500);
    struct lb_partition_progress pp;
    lb_offsets_each(o, seen, &pp);
    assert_int_equal(pp.watermark, 9500);
    lb_offsets_free(o);

    /* a commit held by a floor carries the last watermark sent */
    o = lb_offsets_new(10, 100, 5000);
    lb_offsets_set_floor(o, floor_of, floors);
    lb_offsets_assign(o, "s", 0, 0, -1, 1000);
    lb_offsets_settle(o, "s", 0, 0, LB_HOLD_NONE, 0, 3000);
    assert_int_equal(commit(o).watermark[0], 3000);
    floors[0] = 2;
    lb_offsets_settle(o, "s", 0, 1, LB_HOLD_NONE, 0, 4000);
    lb_offsets_settle(o, "s", 0, 2, LB_HOLD_NONE, 0, 8000);
    c = commit(o);
    assert_int_equal(c.offset[0], 2);
    assert_int_equal(c.watermark[0], 3000); /* 4000 is below 2, but not known apart */
    floors[0] = -1;
    c = commit(o);
    assert_int_equal(c.offset[0], 3);
    assert_int_equal(c.watermark[0], 8000);
    lb_offsets_free(o);
}

static void the_watermark_travels_as_commit_metadata(void **state)
{
    (void)state;
    char text[32];
    size_t n = lb_watermark_format(text, sizeof(text), INT64_C(1795384326204));
    assert_string_equal(text, "wm=1795384326204");
    assert_int_equal(lb_watermark_parse(text, n), INT64_C(1795384326204));
    assert_int_equal(lb_watermark_parse("wm=", 3), -1);
    assert_int_equal(lb_watermark_parse("wm=12x", 6), -1);
    assert_int_equal(lb_watermark_parse("other", 5), -1);
    assert_int_equal(lb_watermark_parse(NULL, 0), -1);
    assert_int_equal(lb_watermark_parse("wm=99999999999999999999", 23), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(durable_records_advance_the_commit),
        cmocka_unit_test(a_partition_commits_no_further_than_its_first_record_not_durable),
        cmocka_unit_test(a_held_partition_pauses_past_the_bound),
        cmocka_unit_test(a_held_partition_is_read_again_from_its_hold_after_a_growing_back_off),
        cmocka_unit_test(a_refused_commit_is_sent_again_and_an_acknowledged_one_moves_committed),
        cmocka_unit_test(progress_shows_the_commit_and_the_hold_with_its_reason),
        cmocka_unit_test(a_floor_keeps_the_commit_at_or_below_it),
        cmocka_unit_test(a_commit_carries_the_highest_event_time_below_it),
        cmocka_unit_test(the_watermark_travels_as_commit_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
