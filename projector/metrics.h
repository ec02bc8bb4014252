/* Metrics, kept where they are counted: histograms with fixed bounds and
 * the Prometheus text format (version 0.0.4) they are rendered in. The
 * daemon serves the page over HTTP (httpd.h).
 */
#ifndef LB_METRICS_H
#define LB_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* A cumulative histogram with fixed upper bounds (seconds or counts). */
#define LB_HISTOGRAM_MAX_BUCKETS 16
struct lb_histogram {
    const double *bounds; /* ascending; +Inf is implicit */
    size_t nbounds;
    uint64_t counts[LB_HISTOGRAM_MAX_BUCKETS + 1]; /* per bucket, not cumulative */
    uint64_t count;
    double sum;
};

void lb_histogram_init(struct lb_histogram *h, const double *bounds, size_t nbounds);
void lb_histogram_observe(struct lb_histogram *h, double value);

/* Bounds shared by the daemon: latencies in seconds, batch sizes in events. */
extern const double lb_latency_bounds[];
extern const size_t lb_latency_nbounds;
extern const double lb_size_bounds[];
extern const size_t lb_size_nbounds;

/* A growing text buffer for rendering a page. */
struct lb_text {
    char *data;
    size_t len, cap;
    int oom;
};

void lb_text_printf(struct lb_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lb_text_free(struct lb_text *t);

/* "# HELP"/"# TYPE" and the series of one histogram (no labels). */
void lb_text_histogram(struct lb_text *t, const char *name, const char *help,
                       const struct lb_histogram *h);

#endif
