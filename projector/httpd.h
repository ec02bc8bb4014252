/* Metrics and health over HTTP, for Prometheus and Kubernetes probes.
 *
 * A small embedded server (libmicrohttpd, its own thread) serves:
 *
 *   /metrics  the Prometheus text format (version 0.0.4)
 *   /healthz  200 while the process runs
 *   /readyz   200 when the consumer is in its group with an assignment and
 *             Redis took the last write (or ping), 503 otherwise
 *
 * The daemon renders the whole text in its own thread (every counter lives
 * there, so nothing is shared but the finished page) and publishes it with
 * the readiness; the server only copies the latest page under a mutex.
 */
#ifndef LB_HTTPD_H
#define LB_HTTPD_H

#include "metrics.h"

#include <stddef.h>

struct lb_metrics;

/* Starts the server on "host:port" (":port" or "0.0.0.0:port" for every
 * interface). NULL with a message on failure. */
struct lb_metrics *lb_metrics_start(const char *listen, char *err, size_t errlen);

/* Publishes a rendered page (copied) and the readiness. */
void lb_metrics_publish(struct lb_metrics *metrics, const struct lb_text *page, int ready);

/* Stops the server. Accepts NULL. */
void lb_metrics_stop(struct lb_metrics *metrics);

#endif
