/* Calendar arithmetic on day numbers.
 *
 * Dates are converted with the era-based (400-year cycle) method: shift the
 * year to start in March so the leap day is the last day of the year, then
 * count whole eras, years of era and days of year. This is exact for every
 * proleptic Gregorian date and needs no tables, no time zone and no libc.
 * ISO weeks follow from one fact: a week belongs to the year that contains
 * its Thursday.
 */
#include "window.h"

#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {"alltime", "daily", "weekly", "monthly", "custom"};

const char *lb_window_kind_name(enum lb_window_kind kind)
{
    return kind_names[kind];
}

int lb_window_kind_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof(kind_names) / sizeof(kind_names[0])); i++)
        if (strcmp(name, kind_names[i]) == 0)
            return i;
    return -1;
}

int lb_window_name_parse(const char *name, enum lb_window_kind *kind, int64_t *id)
{
    const char *colon = strchr(name, ':');
    char kind_name[16];
    if (!colon || (size_t)(colon - name) >= sizeof(kind_name))
        return -1;
    memcpy(kind_name, name, (size_t)(colon - name));
    kind_name[colon - name] = '\0';
    int k = lb_window_kind_parse(kind_name);
    if (k < 0 || lb_window_label_parse((enum lb_window_kind)k, colon + 1, id) != 0)
        return -1;
    *kind = (enum lb_window_kind)k;
    return 0;
}

int64_t lb_days_from_civil(int64_t year, unsigned month, unsigned day)
{
    year -= month <= 2;
    int64_t era = lb_floor_div(year, 400);
    unsigned year_of_era = (unsigned)(year - era * 400);
    unsigned march_month = month > 2 ? month - 3 : month + 9; /* March = 0 */
    unsigned day_of_year = (153 * march_month + 2) / 5 + day - 1;
    unsigned day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + (int64_t)day_of_era - 719468; /* 719468: 0000-03-01 to 1970-01-01 */
}

void lb_civil_from_days(int64_t days, int64_t *year, unsigned *month, unsigned *day)
{
    days += 719468;
    int64_t era = lb_floor_div(days, 146097);
    unsigned day_of_era = (unsigned)(days - era * 146097);
    unsigned year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
    unsigned day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    unsigned march_month = (5 * day_of_year + 2) / 153;
    *day = day_of_year - (153 * march_month + 2) / 5 + 1;
    *month = march_month < 10 ? march_month + 3 : march_month - 9;
    *year = (int64_t)year_of_era + era * 400 + (*month <= 2);
}

/* Monday = 0 ... Sunday = 6; day 0 (1970-01-01) was a Thursday. */
static int64_t weekday(int64_t days)
{
    return days - lb_floor_div(days + 3, 7) * 7 + 3;
}

void lb_iso_week(int64_t days, int64_t *iso_year, unsigned *week)
{
    int64_t thursday = days - weekday(days) + 3;
    int64_t year;
    unsigned month, day;
    lb_civil_from_days(thursday, &year, &month, &day);
    *iso_year = year;
    *week = (unsigned)((thursday - lb_days_from_civil(year, 1, 1)) / 7 + 1);
}

void lb_window_span(enum lb_window_kind kind, int64_t ts_ms, struct lb_window_span *span)
{
    int64_t days = lb_floor_div(ts_ms, LB_MS_PER_DAY);
    int64_t year;
    unsigned month, day;

    switch (kind) {
    case LB_WINDOW_DAILY:
        span->id = days;
        span->start_ms = days * LB_MS_PER_DAY;
        span->end_ms = span->start_ms + LB_MS_PER_DAY;
        return;
    case LB_WINDOW_WEEKLY:
        span->id = days - weekday(days);
        span->start_ms = span->id * LB_MS_PER_DAY;
        span->end_ms = span->start_ms + 7 * LB_MS_PER_DAY;
        return;
    case LB_WINDOW_MONTHLY:
        lb_civil_from_days(days, &year, &month, &day);
        span->id = year * 12 + (month - 1);
        span->start_ms = lb_days_from_civil(year, month, 1) * LB_MS_PER_DAY;
        span->end_ms = (month == 12 ? lb_days_from_civil(year + 1, 1, 1)
                                    : lb_days_from_civil(year, month + 1, 1)) *
                       LB_MS_PER_DAY;
        return;
    case LB_WINDOW_ALLTIME:
    case LB_WINDOW_CUSTOM:
        break;
    }
    span->id = 0;
    span->start_ms = INT64_MIN;
    span->end_ms = INT64_MAX;
}

void lb_window_span_of(enum lb_window_kind kind, int64_t id, struct lb_window_span *span)
{
    int64_t start = id; /* daily: the day; weekly: its Monday */
    if (kind == LB_WINDOW_MONTHLY)
        start = lb_days_from_civil(lb_floor_div(id, 12),
                                   (unsigned)(id - 12 * lb_floor_div(id, 12)) + 1, 1);
    lb_window_span(kind, start * LB_MS_PER_DAY, span);
}

size_t lb_window_label(enum lb_window_kind kind, int64_t id, char *out, size_t cap)
{
    int64_t year;
    unsigned month, day, week;
    int n;

    switch (kind) {
    case LB_WINDOW_DAILY:
        lb_civil_from_days(id, &year, &month, &day);
        n = snprintf(out, cap, "%04lld-%02u-%02u", (long long)year, month, day);
        break;
    case LB_WINDOW_WEEKLY:
        lb_iso_week(id, &year, &week);
        n = snprintf(out, cap, "%04lld-W%02u", (long long)year, week);
        break;
    case LB_WINDOW_MONTHLY:
        n = snprintf(out, cap, "%04lld-%02u", (long long)lb_floor_div(id, 12),
                     (unsigned)(id - lb_floor_div(id, 12) * 12) + 1);
        break;
    default:
        n = snprintf(out, cap, "%s", kind_names[kind]);
        break;
    }
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

int lb_window_label_parse(enum lb_window_kind kind, const char *label, int64_t *id)
{
    /* field widths keep every number small: no overflow below */
    char again[LB_WINDOW_LABEL_MAX], tail;
    long long year;
    unsigned a, b;
    if (kind == LB_WINDOW_DAILY && sscanf(label, "%6lld-%2u-%2u%c", &year, &a, &b, &tail) == 3 &&
        a >= 1 && a <= 12 && b >= 1 && b <= 31) {
        *id = lb_days_from_civil(year, a, b);
    } else if (kind == LB_WINDOW_WEEKLY && sscanf(label, "%6lld-W%2u%c", &year, &a, &tail) == 2 &&
               a >= 1 && a <= 53) {
        int64_t jan4 = lb_days_from_civil(year, 1, 4); /* always in ISO week 1 */
        int64_t monday = jan4 - (jan4 + 3 - lb_floor_div(jan4 + 3, 7) * 7);
        *id = monday + 7 * (int64_t)(a - 1);
    } else if (kind == LB_WINDOW_MONTHLY && sscanf(label, "%6lld-%2u%c", &year, &a, &tail) == 2 &&
               a >= 1 && a <= 12) {
        *id = year * 12 + a - 1;
    } else {
        return -1;
    }
    /* 2026-02-31 or 2026-W53 parse, but label another window */
    lb_window_label(kind, *id, again, sizeof(again));
    return strcmp(again, label) == 0 ? 0 : -1;
}
