/* Windows: civil dates, ISO 8601 weeks at year edges, window spans and
 * labels. Besides fixed cases from the ISO calendar, every day from 1900 to
 * 2200 is cross-checked against the C library's own calendar (timegm,
 * gmtime_r and strftime's %G/%V), an implementation independent of ours. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "apply.h"
#include "window.h"

static int64_t day_of(int year, unsigned month, unsigned day)
{
    return lb_days_from_civil(year, month, day);
}

static void label(enum lb_window_kind kind, int64_t ts_ms, char *out)
{
    struct lb_window_span span;
    lb_window_span(kind, ts_ms, &span);
    lb_window_label(kind, span.id, out, LB_WINDOW_LABEL_MAX);
}

static void iso_weeks_at_year_edges(void **state)
{
    (void)state;
    static const struct {
        int year;
        unsigned month, day;
        const char *week;
    } cases[] = {
        {2020, 12, 31, "2020-W53"}, {2021, 1, 3, "2020-W53"},   {2021, 1, 4, "2021-W01"},
        {2024, 12, 29, "2024-W52"}, {2024, 12, 30, "2025-W01"}, {2026, 12, 31, "2026-W53"},
        {2027, 1, 3, "2026-W53"},   {2027, 1, 4, "2027-W01"},   {2026, 5, 4, "2026-W19"},
        {2008, 12, 29, "2009-W01"}, {2010, 1, 3, "2009-W53"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[LB_WINDOW_LABEL_MAX];
        int64_t ms = day_of(cases[i].year, cases[i].month, cases[i].day) * LB_MS_PER_DAY;
        label(LB_WINDOW_WEEKLY, ms + 12 * 3600 * 1000, out);
        assert_string_equal(out, cases[i].week);
        /* the last millisecond of the day is still in the same week */
        label(LB_WINDOW_WEEKLY, ms + LB_MS_PER_DAY - 1, out);
        assert_string_equal(out, cases[i].week);
    }
}

static void every_day_agrees_with_the_c_library(void **state)
{
    (void)state;
    struct tm start = {.tm_year = 0, .tm_mon = 0, .tm_mday = 1}; /* 1900-01-01 */
    time_t t = timegm(&start);
    for (int i = 0; i < 300 * 366; i++, t += 86400) {
        struct tm tm;
        char want[32], got[LB_WINDOW_LABEL_MAX];
        int64_t ms = (int64_t)t * 1000 + 43200000; /* noon */
        gmtime_r(&t, &tm);

        strftime(want, sizeof(want), "%Y-%m-%d", &tm);
        label(LB_WINDOW_DAILY, ms, got);
        assert_string_equal(got, want);
        strftime(want, sizeof(want), "%G-W%V", &tm);
        label(LB_WINDOW_WEEKLY, ms, got);
        assert_string_equal(got, want);
        strftime(want, sizeof(want), "%Y-%m", &tm);
        label(LB_WINDOW_MONTHLY, ms, got);
        assert_string_equal(got, want);

        int64_t y;
        unsigned m, d;
        lb_civil_from_days((int64_t)t / 86400, &y, &m, &d);
        assert_int_equal(lb_days_from_civil(y, m, d), (int64_t)t / 86400);
    }
}

static void spans_cover_exactly_their_window(void **state)
{
    (void)state;
    struct lb_window_span span;
    int64_t may4 = day_of(2026, 5, 4) * LB_MS_PER_DAY; /* a Monday */

    lb_window_span(LB_WINDOW_DAILY, may4 + 5, &span);
    assert_int_equal(span.start_ms, may4);
    assert_int_equal(span.end_ms, may4 + LB_MS_PER_DAY);

    lb_window_span(LB_WINDOW_WEEKLY, may4 + 6 * LB_MS_PER_DAY + 1, &span); /* Sunday */
    assert_int_equal(span.start_ms, may4);
    assert_int_equal(span.end_ms, may4 + 7 * LB_MS_PER_DAY);

    lb_window_span(LB_WINDOW_MONTHLY, day_of(2024, 2, 29) * LB_MS_PER_DAY, &span);
    assert_int_equal(span.start_ms, day_of(2024, 2, 1) * LB_MS_PER_DAY);
    assert_int_equal(span.end_ms, day_of(2024, 3, 1) * LB_MS_PER_DAY);

    lb_window_span(LB_WINDOW_MONTHLY, day_of(2026, 12, 31) * LB_MS_PER_DAY, &span);
    assert_int_equal(span.end_ms, day_of(2027, 1, 1) * LB_MS_PER_DAY);

    lb_window_span(LB_WINDOW_ALLTIME, may4, &span);
    assert_int_equal(span.end_ms, INT64_MAX);

    /* a window's span from its id is the span of any instant in it, for
     * every day of 1969..2031 (months and weeks across years included) */
    for (int64_t d = day_of(1969, 1, 1); d < day_of(2031, 1, 1); d++)
        for (int kind = LB_WINDOW_DAILY; kind <= LB_WINDOW_MONTHLY; kind++) {
            struct lb_window_span of;
            lb_window_span((enum lb_window_kind)kind, d * LB_MS_PER_DAY + 4321, &span);
            lb_window_span_of((enum lb_window_kind)kind, span.id, &of);
            assert_int_equal(of.id, span.id);
            assert_int_equal(of.start_ms, span.start_ms);
            assert_int_equal(of.end_ms, span.end_ms);
        }
}

static void times_before_1970_floor_correctly(void **state)
{
    (void)state;
    char out[LB_WINDOW_LABEL_MAX];
    label(LB_WINDOW_DAILY, -1, out); /* 1969-12-31T23:59:59.999Z */
    assert_string_equal(out, "1969-12-31");
    label(LB_WINDOW_MONTHLY, -1, out);
    assert_string_equal(out, "1969-12");
    label(LB_WINDOW_WEEKLY, -1, out); /* a Wednesday */
    assert_string_equal(out, "1970-W01");
}

static void window_names_parse_back(void **state)
{
    (void)state;
    enum lb_window_kind kind;
    int64_t id;
    assert_int_equal(lb_window_name_parse("weekly:2026-W48", &kind, &id), 0);
    assert_int_equal(kind, LB_WINDOW_WEEKLY);
    char label[LB_WINDOW_LABEL_MAX];
    lb_window_label(kind, id, label, sizeof(label));
    assert_string_equal(label, "2026-W48");
    assert_int_equal(lb_window_name_parse("daily:2026-02-30", &kind, &id), -1);
    assert_int_equal(lb_window_name_parse("hourly:2026-02-01", &kind, &id), -1);
    assert_int_equal(lb_window_name_parse("2026-02-01", &kind, &id), -1);
    assert_int_equal(lb_window_name_parse("alltime", &kind, &id), -1);
}

/* The key layout's parser tells a board's bookkeeping from its windows:
 * replay's swap keeps the live ~open (merged), and leaves ~final alone. */
static void key_kinds(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        enum lb_key_kind kind;
        const char *window;
    } cases[] = {
        {"lb:{b}:~open", LB_KEY_OPEN, ""},
        {"lb:{b}:~final", LB_KEY_FINAL, NULL},
        {"lb:{b}:daily:2026-11-25", LB_KEY_WINDOW, "daily:2026-11-25"},
        {"lb:{b}:~openx", LB_KEY_OTHER, NULL},
        {"lb:{b}:~applied", LB_KEY_MARKER, ""},
        {"lb:{b}:~newest", LB_KEY_NEWEST, ""},
        {"lb:{b}:daily:2026-11-25:~ts", LB_KEY_STAMPS, "daily:2026-11-25"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct lb_key_parts kp;
        assert_int_equal(lb_key_parse("lb:", cases[i].key, strlen(cases[i].key), &kp), 0);
        assert_int_equal(kp.kind, cases[i].kind);
        assert_int_equal(kp.board.len, 1);
        if (cases[i].window) {
            assert_int_equal(kp.window.len, strlen(cases[i].window));
            assert_memory_equal(kp.window.ptr, cases[i].window, kp.window.len);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(iso_weeks_at_year_edges),
        cmocka_unit_test(every_day_agrees_with_the_c_library),
        cmocka_unit_test(spans_cover_exactly_their_window),
        cmocka_unit_test(times_before_1970_floor_correctly),
        cmocka_unit_test(window_names_parse_back),
        cmocka_unit_test(key_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
