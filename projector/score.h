/* The composite score: one double that orders a board by score and, among
 * equal scores, by time.
 *
 *     composite = score * 2^T + tie,   0 <= tie < 2^T
 *
 * 'tie' is the event time counted in ticks of the board's resolution since
 * its epoch, reversed when the earlier event must rank higher. T is the
 * smallest bit count that holds every tick of [epoch, horizon). Composites are
 * exact integers only up to 2^53, so a profile is accepted only if its score
 * range and T can never exceed that: no rounding, ever, and no two distinct
 * (score, tick) pairs share a composite.
 *
 * "Better" means higher for desc boards and lower for asc boards; the tie is
 * arranged so that the better tie always makes the better composite.
 */
#ifndef LB_SCORE_H
#define LB_SCORE_H

#include <stddef.h>
#include <stdint.h>

#define LB_COMPOSITE_LIMIT (INT64_C(1) << 53)

enum lb_order { LB_ORDER_DESC = 0, LB_ORDER_ASC };
enum lb_tie_break { LB_TIE_EARLIEST = 0, LB_TIE_LATEST, LB_TIE_NONE };

struct lb_scoring {
    enum lb_order order;
    enum lb_tie_break tie_break;
    int64_t resolution_ms; /* length of one tick */
    int64_t epoch_ms;      /* first accepted event time */
    int64_t horizon_ms;    /* first rejected event time */
    int64_t score_min;     /* inclusive */
    int64_t score_max;     /* inclusive */
    unsigned tie_bits;     /* T, set by lb_scoring_prepare */
};

/* Validates the parameters and computes tie_bits. On error returns -1 and
 * writes a sentence naming the numbers and the knob to turn into 'err'. */
int lb_scoring_prepare(struct lb_scoring *scoring, const char *profile, char *err, size_t errlen);
/* The same for a range named 'what' ("sum": a sum board's totals, whose
 * knobs are sum_min and sum_max). */
int lb_scoring_prepare_range(struct lb_scoring *scoring, const char *profile, const char *what,
                             char *err, size_t errlen);

enum lb_score_result {
    LB_SCORE_OK = 0,
    LB_SCORE_OUT_OF_RANGE, /* score outside [score_min, score_max] */
    LB_SCORE_TIME_OUT_OF_RANGE,
};

/* Computes the composite of (score, ts_ms). Never rounds: out-of-range input
 * is reported, not clamped. */
enum lb_score_result lb_composite(const struct lb_scoring *scoring, int64_t score, int64_t ts_ms,
                                  int64_t *composite);

/* The tie component alone (0 <= tie < 2^T) of an event at 'ts_ms': what sum
 * boards add to their running total's composite. */
enum lb_score_result lb_tie(const struct lb_scoring *scoring, int64_t ts_ms, int64_t *tie);

/* Whether a later event time gives a larger tie component: the direction in
 * which a sum's "reached at" time moves its tie. */
int lb_tie_grows_with_time(const struct lb_scoring *scoring);

/* Inverse of lb_composite: the raw score and the start of the tick the event
 * time fell in. */
void lb_composite_split(const struct lb_scoring *scoring, int64_t composite, int64_t *score,
                        int64_t *tick_start_ms);

/* Parses a resolution name ("ms", "s", "min", "h", "d") into milliseconds;
 * returns 0 when unknown. */
int64_t lb_resolution_parse(const char *name);

#endif
