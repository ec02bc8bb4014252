/* Composite score encoding; see score.h for the contract.
 *
 * All arithmetic is on int64_t: the composite is built and checked as an
 * integer and only becomes a double when Redis parses it, where every integer
 * of magnitude <= 2^53 is exact. */
#include "score.h"
#include "window.h"

#include <stdio.h>
#include <string.h>

int64_t lb_resolution_parse(const char *name)
{
    static const struct {
        const char *name;
        int64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"min", 60000}, {"h", 3600000}, {"d", 86400000}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(name, units[i].name) == 0)
            return units[i].ms;
    return 0;
}

static int64_t tick_count(const struct lb_scoring *s)
{
    int64_t span = s->horizon_ms - s->epoch_ms;
    return span / s->resolution_ms + (span % s->resolution_ms != 0);
}

int lb_scoring_prepare(struct lb_scoring *s, const char *profile, char *err, size_t errlen)
{
    return lb_scoring_prepare_range(s, profile, "score", err, errlen);
}

int lb_scoring_prepare_range(struct lb_scoring *s, const char *profile, const char *what, char *err,
                             size_t errlen)
{
    if (s->resolution_ms <= 0) {
        snprintf(err, errlen, "profile '%s': tie resolution must be positive", profile);
        return -1;
    }
    if (s->horizon_ms <= s->epoch_ms) {
        snprintf(err, errlen, "profile '%s': horizon must be after epoch", profile);
        return -1;
    }
    if (s->score_min > s->score_max) {
        snprintf(err, errlen, "profile '%s': %s_min %lld is above %s_max %lld", profile, what,
                 (long long)s->score_min, what, (long long)s->score_max);
        return -1;
    }
    unsigned bits = 0;
    if (s->tie_break != LB_TIE_NONE) {
        int64_t ticks = tick_count(s);
        while (bits < 62 && (INT64_C(1) << bits) < ticks)
            bits++;
    }
    /* composite_max = (score_max + 1) * 2^T - 1 <= 2^53, composite_min = score_min * 2^T >=
     * -2^53. Both bounds are checked by dividing, so nothing here can overflow. */
    int64_t max_allowed = bits > 53   ? -1
                          : bits == 0 ? LB_COMPOSITE_LIMIT
                                      : (INT64_C(1) << (53 - bits)) - 1;
    int64_t min_allowed = bits > 53 ? 1 : -(INT64_C(1) << (53 - bits));
    if (s->score_max > max_allowed || s->score_min < min_allowed) {
        snprintf(err, errlen,
                 "profile '%s': %s range [%lld, %lld] with %u tie bits (%lld ticks of %lld ms "
                 "between epoch and horizon) can exceed 2^53, where doubles stop being exact; "
                 "the range that fits is [%lld, %lld]: narrow %s_min/%s_max, use a coarser "
                 "tie_resolution, or move epoch and horizon closer together",
                 profile, what, (long long)s->score_min, (long long)s->score_max, bits,
                 (long long)(s->tie_break == LB_TIE_NONE ? 0 : tick_count(s)),
                 (long long)s->resolution_ms, (long long)(bits > 53 ? 0 : min_allowed),
                 (long long)(bits > 53 ? 0 : max_allowed), what, what);
        return -1;
    }
    s->tie_bits = bits;
    return 0;
}

/* Whether a later tick must produce a larger tie value. */
static int later_is_larger(const struct lb_scoring *s)
{
    /* desc + latest and asc + earliest: the better event has the larger tick
     * in desc (larger composite) or the smaller tick in asc (smaller composite). */
    return (s->order == LB_ORDER_DESC) == (s->tie_break == LB_TIE_LATEST);
}

int lb_tie_grows_with_time(const struct lb_scoring *s)
{
    return later_is_larger(s);
}

enum lb_score_result lb_tie(const struct lb_scoring *s, int64_t ts_ms, int64_t *tie)
{
    if (ts_ms < s->epoch_ms || ts_ms >= s->horizon_ms)
        return LB_SCORE_TIME_OUT_OF_RANGE;
    *tie = 0;
    if (s->tie_bits > 0) {
        int64_t tick = (ts_ms - s->epoch_ms) / s->resolution_ms;
        *tie = later_is_larger(s) ? tick : ((INT64_C(1) << s->tie_bits) - 1) - tick;
    }
    return LB_SCORE_OK;
}

enum lb_score_result lb_composite(const struct lb_scoring *s, int64_t score, int64_t ts_ms,
                                  int64_t *composite)
{
    int64_t tie;
    if (score < s->score_min || score > s->score_max)
        return LB_SCORE_OUT_OF_RANGE;
    if (lb_tie(s, ts_ms, &tie) != LB_SCORE_OK)
        return LB_SCORE_TIME_OUT_OF_RANGE;
    *composite = score * (INT64_C(1) << s->tie_bits) + tie;
    return LB_SCORE_OK;
}

void lb_composite_split(const struct lb_scoring *s, int64_t composite, int64_t *score,
                        int64_t *tick_start_ms)
{
    int64_t scale = INT64_C(1) << s->tie_bits;
    *score = lb_floor_div(composite, scale);
    int64_t tie = composite - *score * scale;
    int64_t tick = later_is_larger(s) ? tie : (scale - 1) - tie;
    *tick_start_ms = s->tie_bits ? s->epoch_ms + tick * s->resolution_ms : 0;
}
