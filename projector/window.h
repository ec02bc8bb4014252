/* Time windows of a leaderboard, chosen by the event's own time in UTC.
 *
 * A window is identified by its kind and an integer id (the day number for
 * daily, the day number of the ISO week's Monday for weekly, year*12+month-1
 * for monthly, 0 for alltime). The id is what the planner groups by; the
 * label ("2026-05-04", "2026-W18", "2026-05") is only formatted once per key.
 * Nothing here reads the wall clock, so a replay computes the same windows as
 * the live run did.
 */
#ifndef LB_WINDOW_H
#define LB_WINDOW_H

#include <stddef.h>
#include <stdint.h>

enum lb_window_kind {
    LB_WINDOW_ALLTIME = 0,
    LB_WINDOW_DAILY,
    LB_WINDOW_WEEKLY,
    LB_WINDOW_MONTHLY,
    LB_WINDOW_CUSTOM, /* keyed by the value of one dims entry */
};

#define LB_MS_PER_DAY INT64_C(86400000)

struct lb_window_span {
    int64_t id;
    int64_t start_ms; /* first millisecond inside the window */
    int64_t end_ms;   /* first millisecond after it; INT64_MAX when unbounded */
};

/* Fills 'span' with the window of 'kind' that contains 'ts_ms'. For
 * LB_WINDOW_ALLTIME and LB_WINDOW_CUSTOM the span is unbounded and the id 0. */
void lb_window_span(enum lb_window_kind kind, int64_t ts_ms, struct lb_window_span *span);

/* The span of the window of 'kind' whose id is 'id'. */
void lb_window_span_of(enum lb_window_kind kind, int64_t id, struct lb_window_span *span);

/* Writes the window's label ("2026-05-04", "2026-W18", "2026-05", "alltime"
 * as applicable) NUL-terminated into 'out'; returns its length. 'cap' must be
 * at least LB_WINDOW_LABEL_MAX. */
#define LB_WINDOW_LABEL_MAX 32
size_t lb_window_label(enum lb_window_kind kind, int64_t id, char *out, size_t cap);

/* The window of 'kind' (daily, weekly or monthly) whose label is exactly
 * 'label', as lb_window_label writes it ("2026-05-04", "2026-W18",
 * "2026-05"): 0 and its id, or -1 for any other text, days and weeks that do
 * not exist included. */
int lb_window_label_parse(enum lb_window_kind kind, const char *label, int64_t *id);

/* A calendar window's name as keys carry it ("daily:2026-05-04",
 * "weekly:2026-W18", "monthly:2026-05"): 0 with its kind and id, or -1. */
int lb_window_name_parse(const char *name, enum lb_window_kind *kind, int64_t *id);

/* The kind's name as used in keys and configuration ("daily", ...). */
const char *lb_window_kind_name(enum lb_window_kind kind);
/* Parses a kind name; returns -1 when unknown. */
int lb_window_kind_parse(const char *name);

/* Proleptic Gregorian calendar helpers, exposed for the tools and tests.
 * Day 0 is 1970-01-01. */
int64_t lb_days_from_civil(int64_t year, unsigned month, unsigned day);
void lb_civil_from_days(int64_t days, int64_t *year, unsigned *month, unsigned *day);
/* ISO 8601 week-numbering year and week (1..53) of a day. */
void lb_iso_week(int64_t days, int64_t *iso_year, unsigned *week);

static inline int64_t lb_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

#endif
