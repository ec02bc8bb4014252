/* The composite score: bit budget, exactness, order and no collisions.
 *
 * The expected values are derived here from the rule in ARCHITECTURE.md
 * (composite = score * 2^T + tie), not taken from the code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "score.h"

#define DAY INT64_C(86400000)

static struct lb_scoring scoring(enum lb_order order, enum lb_tie_break tie, int64_t res,
                                 int64_t span_ms, int64_t min, int64_t max)
{
    struct lb_scoring s = {.order = order,
                           .tie_break = tie,
                           .resolution_ms = res,
                           .epoch_ms = 1000 * DAY,
                           .horizon_ms = 1000 * DAY + span_ms,
                           .score_min = min,
                           .score_max = max};
    return s;
}

static int prepare(struct lb_scoring *s)
{
    char err[512];
    return lb_scoring_prepare(s, "test", err, sizeof(err));
}

static void tie_bits_hold_every_tick(void **state)
{
    (void)state;
    /* 1024 ticks need exactly 10 bits, 1025 need 11 */
    struct lb_scoring s = scoring(LB_ORDER_DESC, LB_TIE_EARLIEST, 1000, 1024 * 1000, 0, 100);
    assert_int_equal(prepare(&s), 0);
    assert_int_equal(s.tie_bits, 10);
    s = scoring(LB_ORDER_DESC, LB_TIE_EARLIEST, 1000, 1024 * 1000 + 1, 0, 100);
    assert_int_equal(prepare(&s), 0);
    assert_int_equal(s.tie_bits, 11);
    s = scoring(LB_ORDER_DESC, LB_TIE_NONE, 1000, 1024 * 1000, 0, 100);
    assert_int_equal(prepare(&s), 0);
    assert_int_equal(s.tie_bits, 0);
}

static void budget_accepts_exactly_up_to_2_pow_53(void **state)
{
    (void)state;
    /* T = 30: the largest score is 2^23 - 1, the composite bound 2^53 - 1 */
    int64_t span = (INT64_C(1) << 30) * 1000;
    struct lb_scoring s =
        scoring(LB_ORDER_DESC, LB_TIE_EARLIEST, 1000, span, 0, (INT64_C(1) << 23) - 1);
    assert_int_equal(prepare(&s), 0);
    assert_int_equal(s.tie_bits, 30);
    s.score_max = INT64_C(1) << 23;
    assert_int_equal(prepare(&s), -1);
    /* negative scores: score_min * 2^30 >= -2^53 */
    s.score_max = 0;
    s.score_min = -(INT64_C(1) << 23);
    assert_int_equal(prepare(&s), 0);
    s.score_min--;
    assert_int_equal(prepare(&s), -1);
    /* no tie bits: the score itself up to 2^53 */
    s = scoring(LB_ORDER_DESC, LB_TIE_NONE, 1000, DAY, -(INT64_C(1) << 53), INT64_C(1) << 53);
    assert_int_equal(prepare(&s), 0);
    s.score_max++;
    assert_int_equal(prepare(&s), -1);
}

static void budget_error_names_profile_and_numbers(void **state)
{
    (void)state;
    char err[512];
    struct lb_scoring s = scoring(LB_ORDER_DESC, LB_TIE_EARLIEST, 1, 365 * DAY, 0, 100000000);
    assert_int_equal(lb_scoring_prepare(&s, "speedrun", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'speedrun'"));
    assert_non_null(strstr(err, "100000000"));
    assert_non_null(strstr(err, "2^53"));
    assert_non_null(strstr(err, "tie_resolution"));
}

/* The composite by the architecture's rule, computed independently. */
static int64_t expected(const struct lb_scoring *s, int64_t score, int64_t ts)
{
    int64_t ticks_total = (s->horizon_ms - s->epoch_ms + s->resolution_ms - 1) / s->resolution_ms;
    unsigned bits = 0;
    while (s->tie_break != LB_TIE_NONE && (INT64_C(1) << bits) < ticks_total)
        bits++;
    int64_t tick = (ts - s->epoch_ms) / s->resolution_ms;
    int64_t reversed = (INT64_C(1) << bits) - 1 - tick;
    int64_t tie = s->tie_break == LB_TIE_NONE                                        ? 0
                  : (s->order == LB_ORDER_DESC) == (s->tie_break == LB_TIE_EARLIEST) ? reversed
                                                                                     : tick;
    return score * (INT64_C(1) << bits) + tie;
}

/* Better: the composite a board's order ranks first. */
static int better(const struct lb_scoring *s, int64_t a, int64_t b)
{
    return s->order == LB_ORDER_DESC ? a > b : a < b;
}

static void composites_are_exact_ordered_and_distinct_at_the_bounds(void **state)
{
    (void)state;
    enum lb_order orders[] = {LB_ORDER_DESC, LB_ORDER_ASC};
    enum lb_tie_break ties[] = {LB_TIE_EARLIEST, LB_TIE_LATEST};
    int64_t span = (INT64_C(1) << 30) * 1000;

    for (int o = 0; o < 2; o++) {
        for (int t = 0; t < 2; t++) {
            struct lb_scoring s = scoring(orders[o], ties[t], 1000, span, -(INT64_C(1) << 23),
                                          (INT64_C(1) << 23) - 1);
            assert_int_equal(prepare(&s), 0);
            int64_t scores[] = {s.score_min, s.score_min + 1, -1,         0,
                                1,           s.score_max - 1, s.score_max};
            int64_t times[] = {s.epoch_ms, s.epoch_ms + 999, s.epoch_ms + 1000, s.horizon_ms - 1001,
                               s.horizon_ms - 1};
            int64_t prev_c = 0;
            for (size_t i = 0; i < sizeof(scores) / sizeof(scores[0]); i++) {
                for (size_t j = 0; j < sizeof(times) / sizeof(times[0]); j++) {
                    int64_t c;
                    assert_int_equal(lb_composite(&s, scores[i], times[j], &c), LB_SCORE_OK);
                    assert_true(c == expected(&s, scores[i], times[j]));
                    /* exact as a double, within the 2^53 bound */
                    assert_true((int64_t)(double)c == c);
                    assert_true(c <= LB_COMPOSITE_LIMIT && c >= -LB_COMPOSITE_LIMIT);
                    /* the composite grows with the raw score whatever the order:
                     * desc boards rank the largest first, asc the smallest */
                    if (i > 0 && j == 0)
                        assert_true(c > prev_c);
                    if (j == 0)
                        prev_c = c;
                    /* within a score, the tie rule picks the winner between ticks */
                    if (j + 1 < sizeof(times) / sizeof(times[0])) {
                        int64_t later;
                        lb_composite(&s, scores[i], times[j + 1], &later);
                        int same_tick =
                            (times[j] - s.epoch_ms) / 1000 == (times[j + 1] - s.epoch_ms) / 1000;
                        if (same_tick)
                            assert_true(later == c);
                        else if (ties[t] == LB_TIE_EARLIEST)
                            assert_true(better(&s, c, later));
                        else
                            assert_true(better(&s, later, c));
                    }
                    /* the raw score and tick round-trip */
                    int64_t back, tick_ms;
                    lb_composite_split(&s, c, &back, &tick_ms);
                    assert_true(back == scores[i]);
                    assert_true(tick_ms == times[j] - (times[j] - s.epoch_ms) % 1000);
                }
            }
        }
    }
}

static void no_two_pairs_collide(void **state)
{
    (void)state;
    /* a small budget, checked exhaustively: 8 ticks x 64 scores */
    struct lb_scoring s = scoring(LB_ORDER_DESC, LB_TIE_EARLIEST, 1, 8, -32, 31);
    assert_int_equal(prepare(&s), 0);
    int64_t seen[64 * 8];
    size_t n = 0;
    for (int64_t score = -32; score <= 31; score++)
        for (int64_t tick = 0; tick < 8; tick++) {
            int64_t c;
            assert_int_equal(lb_composite(&s, score, s.epoch_ms + tick, &c), LB_SCORE_OK);
            for (size_t k = 0; k < n; k++)
                assert_true(seen[k] != c);
            seen[n++] = c;
        }
}

static void out_of_range_is_reported_never_clamped(void **state)
{
    (void)state;
    struct lb_scoring s = scoring(LB_ORDER_DESC, LB_TIE_EARLIEST, 1000, 10 * DAY, 0, 1000);
    int64_t c = 12345;
    assert_int_equal(prepare(&s), 0);
    assert_int_equal(lb_composite(&s, 1001, s.epoch_ms, &c), LB_SCORE_OUT_OF_RANGE);
    assert_int_equal(lb_composite(&s, -1, s.epoch_ms, &c), LB_SCORE_OUT_OF_RANGE);
    assert_int_equal(lb_composite(&s, 5, s.epoch_ms - 1, &c), LB_SCORE_TIME_OUT_OF_RANGE);
    assert_int_equal(lb_composite(&s, 5, s.horizon_ms, &c), LB_SCORE_TIME_OUT_OF_RANGE);
    assert_int_equal(c, 12345);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tie_bits_hold_every_tick),
        cmocka_unit_test(budget_accepts_exactly_up_to_2_pow_53),
        cmocka_unit_test(budget_error_names_profile_and_numbers),
        cmocka_unit_test(composites_are_exact_ordered_and_distinct_at_the_bounds),
        cmocka_unit_test(no_two_pairs_collide),
        cmocka_unit_test(out_of_range_is_reported_never_clamped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
