/* Histograms and the Prometheus text format; see metrics.h. */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double lb_latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                    0.25,  0.5,    1,     2.5,  5,     10,   30};
const size_t lb_latency_nbounds = sizeof(lb_latency_bounds) / sizeof(lb_latency_bounds[0]);
const double lb_size_bounds[] = {1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000};
const size_t lb_size_nbounds = sizeof(lb_size_bounds) / sizeof(lb_size_bounds[0]);

void lb_histogram_init(struct lb_histogram *h, const double *bounds, size_t nbounds)
{
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->nbounds = nbounds < LB_HISTOGRAM_MAX_BUCKETS ? nbounds : LB_HISTOGRAM_MAX_BUCKETS;
}

void lb_histogram_observe(struct lb_histogram *h, double value)
{
    size_t b = 0;
    while (b < h->nbounds && value > h->bounds[b])
        b++;
    h->counts[b]++;
    h->count++;
    h->sum += value;
}

void lb_text_printf(struct lb_text *t, const char *fmt, ...)
{
    va_list ap;
    for (int attempt = 0; attempt < 2 && !t->oom; attempt++) {
        va_start(ap, fmt);
        int n =
            vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->data && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap <= t->len + (size_t)n)
            cap *= 2;
        char *grown = realloc(t->data, cap);
        if (!grown) {
            t->oom = 1;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
}

void lb_text_free(struct lb_text *t)
{
    free(t->data);
    memset(t, 0, sizeof(*t));
}

void lb_text_histogram(struct lb_text *t, const char *name, const char *help,
                       const struct lb_histogram *h)
{
    uint64_t cumulative = 0;
    lb_text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t b = 0; b < h->nbounds; b++) {
        cumulative += h->counts[b];
        lb_text_printf(t, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[b],
                       (unsigned long long)cumulative);
    }
    lb_text_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                   (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}
