/* After-tax scores of decaying boards (projector/decay.c). The expected
 * values are worked out by hand from the rule in decay.h, not taken from
 * the code under test. */
#include "decay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static int64_t taxed(const struct lb_decay *d, int64_t raw, int age)
{
    int64_t t = 0;
    assert_int_equal(lb_decay_taxed(d, raw, age, &t), 0);
    return t;
}

static void taxes_are_decimals_of_four_places(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int64_t tax;
    } good[] = {{"0.1", 1000}, {"0.0125", 125}, {"1", 10000},
                {"0", 0},      {"2.5", 25000},  {"100", 1000000}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int64_t tax = -1;
        assert_int_equal(lb_decay_parse_tax(good[i].text, &tax), 0);
        assert_int_equal(tax, good[i].tax);
    }
    static const char *const bad[] = {"0.00001", "-0.1",   "",     ".5", "1.",
                                      "0.1x",    "100.01", "1e-2", "0,1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t tax;
        if (lb_decay_parse_tax(bad[i], &tax) != -1)
            fail_msg("'%s' was accepted as a tax", bad[i]);
    }
}

/* The write-up's example: a 109-day run two patches old at 10% a patch,
 * linear, ranks as 130.8 days (109 × 1.2); compound it is 109 × 1.21 =
 * 131.89. In hundredths of a day: 13080 and 13189, exactly. */
static void the_write_ups_example_is_exact(void **state)
{
    (void)state;
    struct lb_decay linear = {
        .stacking = LB_DECAY_LINEAR, .tax = 1000, .max_age = 10, .scale = 100};
    struct lb_decay compound = linear;
    compound.stacking = LB_DECAY_COMPOUND;
    assert_int_equal(taxed(&linear, 109, 0), 10900);
    assert_int_equal(taxed(&linear, 109, 2), 13080);
    assert_int_equal(taxed(&compound, 109, 2), 13189);
    /* 20% a patch, two behind: 109 × 1.4 = 152.6 linear, 109 × 1.44 = 156.96 compound */
    linear.tax = compound.tax = 2000;
    assert_int_equal(taxed(&linear, 109, 2), 15260);
    assert_int_equal(taxed(&compound, 109, 2), 15696);
}

/* 30 patches compound at 10%: 1.1^30 = 11^30 / 10^30 exactly, so 109 days
 * are 109 × 17449402268886407318558803753801 / 10^28 hundredths =
 * 190198.484...: 190198. Doubles would drift in the last digits. */
static void no_drift_over_thirty_patches(void **state)
{
    (void)state;
    struct lb_decay d = {.stacking = LB_DECAY_COMPOUND, .tax = 1000, .max_age = 30, .scale = 100};
    assert_int_equal(taxed(&d, 109, 30), 190198);
    assert_int_equal(taxed(&d, 109, 31), 190198); /* capped at max_age */
    d.max_age = 3;
    assert_int_equal(taxed(&d, 109, 30), 14508); /* 109 × 1.331 = 145.079 */
}

/* Rounding: once, to the nearest unit, halves up (towards +infinity). */
static void rounding_is_once_and_half_up(void **state)
{
    (void)state;
    struct lb_decay d = {.stacking = LB_DECAY_LINEAR, .tax = 5000, .max_age = 5, .scale = 1};
    assert_int_equal(taxed(&d, 5, 1), 8);   /* 7.5 -> 8 */
    assert_int_equal(taxed(&d, -5, 1), -7); /* -7.5 -> -7 */
    assert_int_equal(taxed(&d, 3, 1), 5);   /* 4.5 -> 5 */
    assert_int_equal(taxed(&d, -3, 1), -4); /* -4.5 -> -4 */
    assert_int_equal(taxed(&d, -109, 0), -109);
    /* desc boards divide: 1000 / 1.331 = 751.31... -> 751; 1000 / 1.5 = 666.67 -> 667 */
    struct lb_decay desc = {
        .stacking = LB_DECAY_COMPOUND, .tax = 1000, .max_age = 5, .scale = 1, .desc = 1};
    assert_int_equal(taxed(&desc, 1000, 3), 751);
    desc.stacking = LB_DECAY_LINEAR;
    desc.tax = 5000;
    assert_int_equal(taxed(&desc, 1000, 1), 667);
    assert_int_equal(taxed(&desc, 1000, -2), 1000); /* a newer patch than current: no tax */
}

/* The load check: 128-bit intermediates and the board's budget. */
static void the_load_check_bounds_arithmetic_and_budget(void **state)
{
    (void)state;
    char err[256];
    struct lb_decay d = {.stacking = LB_DECAY_COMPOUND, .tax = 1000, .max_age = 10, .scale = 1000};
    const int64_t limit = (INT64_C(1) << 53) >> 20; /* 20 tie bits: 8589934592 */
    assert_int_equal(lb_decay_check(&d, 0, 1000, limit, err, sizeof(err)), 0);
    /* 5·10^6 fits untaxed (5·10^9 thousandths), not taxed: 5·10^9 × 1.1^10 =
     * 12968712300.5, rounded up */
    assert_int_equal(lb_decay_check(&d, 0, 5000000, limit, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is 12968712301, beyond the 8589934592 the tie bits leave"));
    /* negative scores would gain from the tax */
    assert_int_equal(lb_decay_check(&d, -1, 0, limit, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "decay needs score_min >= 0, not -1"));
    /* desc boards divide: at most a factor of 1/precision, or two scores one
     * apart could tax to one value (1.1^10 = 2.59 > 1 at whole units) */
    struct lb_decay desc = {
        .stacking = LB_DECAY_COMPOUND, .tax = 1000, .max_age = 10, .scale = 1, .desc = 1};
    assert_int_equal(lb_decay_check(&desc, 0, 1000, limit, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "different scores would tax to one value"));
    desc.scale = 10; /* tenths: 2.59 <= 10 */
    assert_int_equal(lb_decay_check(&desc, 0, 1000, limit, err, sizeof(err)), 0);
    int64_t a, b;
    for (int64_t raw = 0; raw < 1000; raw++) { /* strictly monotone, every score */
        assert_int_equal(lb_decay_taxed(&desc, raw, 10, &a), 0);
        assert_int_equal(lb_decay_taxed(&desc, raw + 1, 10, &b), 0);
        assert_true(b > a);
    }
    /* 0.1234 a patch: 11234/10000 = 5617/5000, whose 60th power overflows 128 bits */
    d.tax = 1234;
    d.max_age = 60;
    d.scale = 100;
    assert_int_equal(lb_decay_check(&d, 0, 10, limit, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "does not fit 128-bit arithmetic; lower decay.max_age"));
    int64_t t;
    assert_int_equal(lb_decay_taxed(&d, 10, 60, &t), -1);
}

static void patches_order_as_versions(void **state)
{
    (void)state;
    static const char *const ordered[] = {"1",    "1.2", "1.2.1", "1.9",  "1.10",
                                          "1.29", "1.x", "2.0",   "10.0", "beta"};
    size_t n = sizeof(ordered) / sizeof(ordered[0]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            int c = lb_version_cmp(ordered[i], ordered[j]);
            int want = i < j ? -1 : i > j;
            if ((c > 0) - (c < 0) != want)
                fail_msg("'%s' vs '%s': %d, want %d", ordered[i], ordered[j], c, want);
        }
    assert_int_equal(lb_version_cmp("1.09", "1.9"), 0); /* numeric parts by value */
    /* mixed parts: a number before any text, whatever its bytes */
    assert_true(lb_version_cmp("1.10", "1.0a") < 0);
    assert_true(lb_version_cmp("1.99", "1.-a") < 0);
    /* the key is what a sorted set orders */
    char key[64];
    assert_int_equal(lb_version_key("1.010.x", key, sizeof(key)), 13);
    assert_memory_equal(key, "N011\x01N0210\x01Sx", 13);
    assert_int_equal(lb_version_key("1.2.3", key, 8), 0); /* does not fit */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(taxes_are_decimals_of_four_places),
        cmocka_unit_test(the_write_ups_example_is_exact),
        cmocka_unit_test(no_drift_over_thirty_patches),
        cmocka_unit_test(rounding_is_once_and_half_up),
        cmocka_unit_test(the_load_check_bounds_arithmetic_and_budget),
        cmocka_unit_test(patches_order_as_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
