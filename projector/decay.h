/* Decaying boards: the after-tax score of a submission from an older patch.
 *
 * A board's submissions are kept per patch; an overall board ranks them all
 * by an after-tax score: a submission 'age' patches behind the current one
 * is taxed 'tax' per patch, linear (factor 1 + tax·age) or compound
 * ((1 + tax)^age), the age capped at 'max_age'. Lower-is-better boards
 * multiply the raw score by the factor, higher-is-better ones divide it.
 *
 * Everything is exact: the tax is a decimal of at most four places held as
 * an integer, the factor a reduced fraction, the product computed in 128-bit
 * integers and rounded once, half up (to the nearest unit of the taxed
 * score, halves towards +infinity), to 1/'scale' of a raw unit (scale 100:
 * hundredths). The tie-break is never part of it: the composite of a taxed
 * score is built from the taxed integer and the submission's own tie.
 */
#ifndef LB_DECAY_H
#define LB_DECAY_H

#include <stddef.h>
#include <stdint.h>

enum lb_decay_stacking { LB_DECAY_LINEAR = 0, LB_DECAY_COMPOUND };

/* Taxes are decimals with at most this many places: held in 1/10^4. */
#define LB_DECAY_TAX_PLACES 4
#define LB_DECAY_TAX_ONE    10000

struct lb_decay {
    enum lb_decay_stacking stacking;
    int64_t tax;   /* per patch behind, in 1/10^4 (0.1 is 1000), >= 0 */
    int max_age;   /* patches behind after which the tax stops growing, >= 0 */
    int64_t scale; /* taxed units per raw unit (100: hundredths), >= 1 */
    int desc;      /* higher is better: the factor divides */
};

/* Parses a tax such as "0.1", "0.0125" or "1": 0 and '*tax' in 1/10^4, or
 * -1 (negative, more than four places, above 100, or not a number). */
int lb_decay_parse_tax(const char *text, int64_t *tax);

/* The after-tax score of 'raw' submitted 'age' patches before the current
 * one (age < 0 is taken as 0). 0 and '*taxed', or -1 when a 128-bit
 * intermediate or the int64 result would overflow (lb_decay_check, at load,
 * refuses profiles where that can happen). */
int lb_decay_taxed(const struct lb_decay *d, int64_t raw, int age, int64_t *taxed);

/* Checks at load that every raw score in [raw_min, raw_max] at every age
 * is computed exactly and its taxed score lies within [-limit, limit] (the
 * board's budget: 2^53 over the tie bits), that raw_min >= 0 (a negative
 * score would gain from the tax), and, on desc boards, that the factor at
 * max_age is at most the scale (distinct raw scores keep distinct taxed
 * ones). 0, or -1 with one line in 'err' saying what to change. */
int lb_decay_check(const struct lb_decay *d, int64_t raw_min, int64_t raw_max, int64_t limit,
                   char *err, size_t errlen);

/* Patch names are ordered as versions: dot-separated parts, a number
 * (digits only) by value and before any other part, other parts bytewise,
 * a prefix first: 1.2 < 1.2.1 < 1.9 < 1.10 < 1.29 < 1.x < 2.0 < beta.
 *
 * lb_version_key writes a key whose bytewise order is that order (what a
 * sorted set of keys with equal scores keeps in order for Redis): each
 * part as N<2-digit length><digits without leading zeros> or S<text>,
 * parts separated by 0x01. Returns its length, 0 when it does not fit
 * 'cap' (4 × the name's length + 8 always does). */
#define LB_VERSION_MAX 128 /* the longest name lb_version_cmp orders as a version */
size_t lb_version_key(const char *name, char *out, size_t cap);
/* <0, 0 or >0 like strcmp, in that order (bytewise beyond LB_VERSION_MAX). */
int lb_version_cmp(const char *a, const char *b);

#endif
