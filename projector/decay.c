/* After-tax scores of decaying boards; see decay.h. */
#include "decay.h"

#include <stdio.h>
#include <string.h>

typedef __int128 i128;

int lb_decay_parse_tax(const char *text, int64_t *tax)
{
    int64_t whole = 0, frac = 0;
    int places = 0, digits = 0;
    const char *s = text;
    for (; *s >= '0' && *s <= '9'; s++, digits++)
        if ((whole = whole * 10 + (*s - '0')) > 100)
            return -1;
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++, places++) {
            if (places == LB_DECAY_TAX_PLACES)
                return -1;
            frac = frac * 10 + (*s - '0');
        }
        if (!places)
            return -1;
    }
    if (*s || !digits)
        return -1;
    for (int p = places; p < LB_DECAY_TAX_PLACES; p++)
        frac *= 10;
    *tax = whole * LB_DECAY_TAX_ONE + frac;
    return *tax > 100 * LB_DECAY_TAX_ONE ? -1 : 0;
}

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The factor at 'age' as a reduced fraction num/den. -1 on overflow. */
static int factor(const struct lb_decay *d, int age, i128 *num, i128 *den)
{
    if (age > d->max_age)
        age = d->max_age;
    if (age < 0)
        age = 0;
    int64_t n, k;
    if (d->stacking == LB_DECAY_LINEAR) {
        n = LB_DECAY_TAX_ONE + d->tax * age; /* tax <= 100, age an int: no overflow */
        k = gcd(n, LB_DECAY_TAX_ONE);
        *num = n / k;
        *den = LB_DECAY_TAX_ONE / k;
        return 0;
    }
    n = LB_DECAY_TAX_ONE + d->tax;
    k = gcd(n, LB_DECAY_TAX_ONE);
    *num = *den = 1;
    for (int i = 0; i < age; i++)
        if (__builtin_mul_overflow(*num, (i128)(n / k), num) ||
            __builtin_mul_overflow(*den, (i128)(LB_DECAY_TAX_ONE / k), den))
            return -1;
    return 0;
}

/* floor(a / b) for b > 0 */
static i128 floor_div(i128 a, i128 b)
{
    i128 q = a / b;
    return a % b != 0 && a < 0 ? q - 1 : q;
}

int lb_decay_taxed(const struct lb_decay *d, int64_t raw, int age, int64_t *taxed)
{
    i128 num, den, top, half;
    if (factor(d, age, &num, &den) != 0)
        return -1;
    if (d->desc) { /* divided by the factor */
        i128 t = num;
        num = den;
        den = t;
    }
    /* round(raw·scale·num/den), halves up: floor((2·raw·scale·num + den) / (2·den)) */
    if (__builtin_mul_overflow((i128)raw, (i128)d->scale, &top) ||
        __builtin_mul_overflow(top, num, &top) || __builtin_mul_overflow(top, (i128)2, &top) ||
        __builtin_add_overflow(top, den, &top) || __builtin_mul_overflow(den, (i128)2, &half))
        return -1;
    i128 r = floor_div(top, half);
    if (r > INT64_MAX || r < INT64_MIN)
        return -1;
    *taxed = (int64_t)r;
    return 0;
}

int lb_decay_check(const struct lb_decay *d, int64_t raw_min, int64_t raw_max, int64_t limit,
                   char *err, size_t errlen)
{
    /* |taxed| grows with |raw| and, for asc boards, with the age; for desc
     * boards the untaxed score is the largest: the bounds at both ends of
     * both ranges decide */
    if (raw_min < 0) {
        snprintf(err, errlen,
                 "decay needs score_min >= 0, not %lld: a negative score taxed would move "
                 "away from zero and rank better the older its patch",
                 (long long)raw_min);
        return -1;
    }
    /* desc boards divide: two raw scores one apart must stay apart once
     * rounded (factor <= scale), or the best run of a patch and a worse one
     * could tax to the same value and the tie, not the score, would decide */
    i128 num, den;
    if (d->desc && factor(d, d->max_age, &num, &den) != 0) {
        snprintf(err, errlen,
                 "the tax at decay.max_age (%d patches) does not fit 128-bit arithmetic; lower "
                 "decay.max_age or decay.tax",
                 d->max_age);
        return -1;
    }
    if (d->desc && (i128)d->scale * den < num) {
        snprintf(err, errlen,
                 "on a desc board the tax at decay.max_age (%d patches) exceeds 1/decay.precision, "
                 "so different scores would tax to one value: use a finer decay.precision, or "
                 "lower decay.max_age or decay.tax",
                 d->max_age);
        return -1;
    }
    const int64_t raws[] = {raw_min, raw_max};
    const int ages[] = {0, d->max_age};
    for (size_t r = 0; r < 2; r++)
        for (size_t a = 0; a < 2; a++) {
            int64_t t;
            if (lb_decay_taxed(d, raws[r], ages[a], &t) != 0) {
                snprintf(err, errlen,
                         "a score of %lld taxed for %d patches does not fit 128-bit arithmetic; "
                         "lower decay.max_age, the decay.precision or the score range",
                         (long long)raws[r], ages[a]);
                return -1;
            }
            if (t > limit || t < -limit) {
                snprintf(
                    err, errlen,
                    "a score of %lld taxed for %d patches is %lld, beyond the %lld the tie "
                    "bits leave; coarsen decay.precision, lower decay.max_age or the score range",
                    (long long)raws[r], ages[a], (long long)t, (long long)limit);
                return -1;
            }
        }
    return 0;
}

size_t lb_version_key(const char *name, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *part = name;; part++) {
        size_t len = strcspn(part, "."), skip = 0;
        int number = len && strspn(part, "0123456789") >= len;
        while (number && len - skip > 1 && part[skip] == '0')
            skip++; /* by value: 010 is 10 */
        number = number && len - skip <= 99;
        if (!number)
            skip = 0;
        char head[24];
        snprintf(head, sizeof(head), number ? "%sN%02zu" : "%sS", part == name ? "" : "\x01",
                 len - skip);
        size_t hlen = strlen(head);
        if (n + hlen + len - skip >= cap)
            return 0;
        memcpy(out + n, head, hlen);
        memcpy(out + n + hlen, part + skip, len - skip);
        n += hlen + len - skip;
        part += len;
        if (!*part)
            break;
    }
    out[n] = '\0';
    return n;
}

int lb_version_cmp(const char *a, const char *b)
{
    char ka[4 * LB_VERSION_MAX + 8], kb[4 * LB_VERSION_MAX + 8];
    size_t la = lb_version_key(a, ka, sizeof(ka)), lb = lb_version_key(b, kb, sizeof(kb));
    if (!la || !lb) /* longer than any patch name: bytewise */
        return strcmp(a, b);
    return strcmp(ka, kb);
}
