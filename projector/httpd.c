/* Metrics and health over HTTP; see httpd.h. */
#include "httpd.h"

#include "log.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lb_metrics {
    struct MHD_Daemon *http;
    pthread_mutex_t lock;
    char *page;
    size_t len;
    int ready;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
    struct lb_metrics *m = cls;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", strdup("GET only\n"), 9);
    if (strcmp(url, "/metrics") == 0) {
        pthread_mutex_lock(&m->lock);
        char *copy = malloc(m->len + 1);
        size_t len = m->len;
        if (copy)
            memcpy(copy, m->page ? m->page : "", m->len);
        pthread_mutex_unlock(&m->lock);
        if (!copy)
            return MHD_NO;
        return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", copy, len);
    }
    if (strcmp(url, "/healthz") == 0)
        return reply(conn, MHD_HTTP_OK, "text/plain", strdup("ok\n"), 3);
    if (strcmp(url, "/readyz") == 0) {
        pthread_mutex_lock(&m->lock);
        int ready = m->ready;
        pthread_mutex_unlock(&m->lock);
        return ready ? reply(conn, MHD_HTTP_OK, "text/plain", strdup("ready\n"), 6)
                     : reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                             strdup("not ready\n"), 10);
    }
    return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                 strdup("not found: try /metrics, /healthz, /readyz\n"), 43);
}

struct lb_metrics *lb_metrics_start(const char *listen, char *err, size_t errlen)
{
    char host[256] = "";
    const char *colon = strrchr(listen, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || *end || port < 1 || port > 65535 || (size_t)(colon - listen) >= sizeof(host)) {
        snprintf(err, errlen, "metrics.listen '%s' is not host:port", listen);
        return NULL;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (host[0] && inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "metrics.listen '%s': the host must be an IPv4 address", listen);
        return NULL;
    }
    struct lb_metrics *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->http =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
                         NULL, handle, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!m->http) {
        snprintf(err, errlen, "cannot listen on %s for metrics (in use?)", listen);
        pthread_mutex_destroy(&m->lock);
        free(m);
        return NULL;
    }
    return m;
}

void lb_metrics_publish(struct lb_metrics *m, const struct lb_text *page, int ready)
{
    char *copy = page->oom ? NULL : malloc(page->len + 1);
    if (copy)
        memcpy(copy, page->data ? page->data : "", page->len);
    pthread_mutex_lock(&m->lock);
    if (copy) {
        free(m->page);
        m->page = copy;
        m->len = page->len;
    }
    m->ready = ready;
    pthread_mutex_unlock(&m->lock);
}

void lb_metrics_stop(struct lb_metrics *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->http);
    pthread_mutex_destroy(&m->lock);
    free(m->page);
    free(m);
}
