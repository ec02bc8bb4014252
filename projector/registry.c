/* The schema registry client; see registry.h. */
#include "registry.h"
#include "clock.h"
#include "log.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BODY_MAX           (1 << 20) /* a larger answer is not a schema we can use */
#define ASK_BUDGET_MS      200       /* a request is waited for this long, then runs on */
#define BACKOFF_MIN_MS     1000
#define BACKOFF_MAX_MS     30000
#define UNKNOWN_RECHECK_MS 10000 /* a 40403 id is asked for again after this */
#define UNKNOWN_MAX        64    /* 40403 ids remembered; the oldest is asked again first */

struct unknown {
    int32_t id;
    int64_t until; /* monotonic ms */
};

struct lb_registry {
    CURLM *multi;
    CURL *curl;
    int32_t asking; /* the id of the request in flight, if 'in_flight' */
    int in_flight;
    char *base; /* the url without a trailing '/' */
    struct curl_slist *headers;
    char errbuf[CURL_ERROR_SIZE];
    char *body;
    size_t len;
    int too_big;
    int64_t backoff_ms;
    struct unknown unknown[UNKNOWN_MAX];
    size_t nunknown;
    struct lb_registry_stats stats;
};

/* What one request came to. */
enum answer { A_FOUND, A_UNKNOWN, A_UNUSABLE, A_DOWN, A_NOMEM };

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct lb_registry *r = ctx;
    size_t bytes = size * n;
    if (r->len + bytes > BODY_MAX) {
        r->too_big = 1;
        return 0; /* libcurl stops the transfer */
    }
    char *grown = realloc(r->body, r->len + bytes + 1);
    if (!grown)
        return 0;
    memcpy(grown + r->len, data, bytes);
    r->body = grown;
    r->len += bytes;
    r->body[r->len] = '\0';
    return bytes;
}

struct lb_registry *lb_registry_new(const struct lb_registry_options *o, char *err, size_t errlen)
{
    static int curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            snprintf(err, errlen, "schema registry: libcurl cannot start");
            return NULL;
        }
        curl_ready = 1;
    }
    struct lb_registry *r = calloc(1, sizeof(*r));
    if (!r || !(r->base = strdup(o->url)) || !(r->curl = curl_easy_init()) ||
        !(r->multi = curl_multi_init()))
        goto nomem;
    size_t n = strlen(r->base);
    while (n > 0 && r->base[n - 1] == '/')
        r->base[--n] = '\0';
    r->headers =
        curl_slist_append(NULL, "Accept: application/vnd.schemaregistry.v1+json, application/json");
    if (!r->headers)
        goto nomem;
    CURL *c = r->curl;
    int bad = 0;
    bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_MAXREDIRS, 3L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_WRITEDATA, r) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_USERAGENT, "leaderboard-projector") != CURLE_OK;
    if (o->user) {
        bad |= curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC) != CURLE_OK;
        bad |= curl_easy_setopt(c, CURLOPT_USERNAME, o->user) != CURLE_OK;
        bad |= curl_easy_setopt(c, CURLOPT_PASSWORD, o->password ? o->password : "") != CURLE_OK;
    }
    if (o->ca_file)
        bad |= curl_easy_setopt(c, CURLOPT_CAINFO, o->ca_file) != CURLE_OK;
    if (bad) {
        snprintf(err, errlen,
                 "schema registry %s: libcurl refuses an option (libcurl 7.85 or later with "
                 "https is needed)",
                 o->url);
        lb_registry_free(r);
        return NULL;
    }
    r->stats.up = 1;
    r->backoff_ms = BACKOFF_MIN_MS;
    return r;
nomem:
    snprintf(err, errlen, "schema registry: out of memory");
    lb_registry_free(r);
    return NULL;
}

void lb_registry_free(struct lb_registry *r)
{
    if (!r)
        return;
    if (r->multi && r->in_flight)
        curl_multi_remove_handle(r->multi, r->curl);
    if (r->multi)
        curl_multi_cleanup(r->multi);
    if (r->curl)
        curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    free(r->base);
    free(r->body);
    free(r);
}

const struct lb_registry_stats *lb_registry_stats(const struct lb_registry *r)
{
    return &r->stats;
}

/* A 200 answer: {"schema": "...", "schemaType": "AVRO" (or absent),
 * "references": [] (or absent)}. Returns A_FOUND with the schema in
 * '*schema' (malloc'ed), A_UNUSABLE or A_DOWN with a sentence in 'why'. */
static enum answer read_schema(const char *body, char **schema, char *why, size_t whylen)
{
    json_error_t jerr;
    json_t *root = json_loads(body, 0, &jerr);
    const char *type = NULL, *text = NULL;
    json_t *refs = NULL;
    if (!root || json_unpack_ex(root, &jerr, 0, "{s:s, s?s, s?o}", "schema", &text, "schemaType",
                                &type, "references", &refs) != 0) {
        snprintf(why, whylen, "answered 200 with a body that is not {\"schema\": \"...\"}: %.100s",
                 jerr.text);
        json_decref(root);
        return A_DOWN;
    }
    enum answer a = A_FOUND;
    if (type && strcmp(type, "AVRO") != 0) {
        snprintf(why, whylen, "the registry holds a %.40s schema under this id, not Avro", type);
        a = A_UNUSABLE;
    } else if (refs && (!json_is_array(refs) || json_array_size(refs) > 0)) {
        snprintf(why, whylen,
                 "the schema uses schema references, which the projector does not resolve");
        a = A_UNUSABLE;
    } else if (!(*schema = strdup(text))) {
        a = A_NOMEM;
    }
    json_decref(root);
    return a;
}

/* A 404: the id is unknown only when the registry says so (40403); any
 * other 404 (a proxy's, a wrong base path) is no answer. */
static enum answer read_not_found(const char *body, char *why, size_t whylen)
{
    json_t *root = body ? json_loads(body, 0, NULL) : NULL;
    json_int_t code = 0;
    if (root && json_unpack(root, "{s:I}", "error_code", &code) != 0)
        code = 0;
    json_decref(root);
    if (code == 40403) {
        snprintf(why, whylen, "the registry does not know it (404, error_code 40403)");
        return A_UNKNOWN;
    }
    snprintf(why, whylen,
             "answered 404 without error_code 40403 (is the base path of input.registry.url "
             "right?)");
    return A_DOWN;
}

/* Starts the request for schema 'id'. Returns 0, or -1 when libcurl cannot. */
static int start(struct lb_registry *r, int32_t id)
{
    char url[2048];
    snprintf(url, sizeof(url), "%s/schemas/ids/%d", r->base, id);
    free(r->body);
    r->body = NULL;
    r->len = 0;
    r->too_big = 0;
    r->errbuf[0] = '\0';
    if (curl_easy_setopt(r->curl, CURLOPT_URL, url) != CURLE_OK ||
        curl_multi_add_handle(r->multi, r->curl) != CURLM_OK)
        return -1;
    r->asking = id;
    r->in_flight = 1;
    return 0;
}

/* What the finished request's answer says. */
static enum answer read_answer(struct lb_registry *r, CURLcode rc, char **schema, char *why,
                               size_t whylen)
{
    long status = 0;
    if (r->too_big) { /* a schema that big cannot serve; an error page says nothing */
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
        snprintf(why, whylen, "its answer (HTTP %ld) was over 1 MiB", status);
        return status == 200 ? A_UNUSABLE : A_DOWN;
    }
    if (rc != CURLE_OK) {
        snprintf(why, whylen, "%.150s", *r->errbuf ? r->errbuf : curl_easy_strerror(rc));
        return rc == CURLE_WRITE_ERROR ? A_NOMEM : A_DOWN;
    }
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
    switch (status) {
    case 200:
        return read_schema(r->body ? r->body : "", schema, why, whylen);
    case 404:
        return read_not_found(r->body, why, whylen);
    case 401:
    case 403:
        snprintf(why, whylen,
                 "refused the credentials (HTTP %ld): check input.registry.user and password",
                 status);
        return A_DOWN;
    default:
        snprintf(why, whylen, "answered HTTP %ld", status);
        return A_DOWN;
    }
}

static struct unknown *find_unknown(const struct lb_registry *r, int32_t id)
{
    for (size_t i = 0; i < r->nunknown; i++)
        if (r->unknown[i].id == id)
            return (struct unknown *)&r->unknown[i];
    return NULL;
}

static void remember_unknown(struct lb_registry *r, int32_t id, int64_t until)
{
    struct unknown *u = find_unknown(r, id);
    if (!u && r->nunknown < UNKNOWN_MAX)
        u = &r->unknown[r->nunknown++];
    if (!u) { /* full: replace the one due soonest */
        u = &r->unknown[0];
        for (size_t i = 1; i < r->nunknown; i++)
            if (r->unknown[i].until < u->until)
                u = &r->unknown[i];
    }
    *u = (struct unknown){id, until};
}

/* What the answer about 'id' means for its records: the decoder gets the
 * schema or refuses the id, or the id is remembered as unknown, or the
 * registry is backed off. Returns -1 when out of memory. */
static int settle(struct lb_registry *r, struct lb_decoder *decoder, int32_t id, enum answer a,
                  const char *schema, char *why, size_t whylen, int64_t mono_ms)
{
    if (a == A_FOUND) {
        char err[400];
        int rc = lb_decoder_add_schema(decoder, id, schema, strlen(schema), err, sizeof(err));
        if (rc == -2)
            return -1;
        if (rc == 0) {
            r->stats.fetched++;
            LB_INFO("registry", "schema id %d fetched from %s", id, r->base);
        } else {
            snprintf(why, whylen, "%.180s", err);
            a = A_UNUSABLE;
        }
    }
    if (a == A_NOMEM)
        return -1;
    if (a == A_DOWN) {
        r->stats.failures++;
        r->stats.up = 0;
        r->stats.retry_at = mono_ms + r->backoff_ms;
        snprintf(r->stats.why, sizeof(r->stats.why), "schema registry %.60s: %.190s", r->base, why);
        LB_WARN("registry",
                "%s; records of schema id %d wait (their partitions hold there), next try in %lld "
                "ms",
                r->stats.why, id, (long long)r->backoff_ms);
        r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
        return 0;
    }
    if (!r->stats.up)
        LB_INFO("registry", "schema registry %s answers again", r->base);
    r->stats.up = 1;
    r->stats.retry_at = 0;
    r->backoff_ms = BACKOFF_MIN_MS;
    if (a == A_UNKNOWN) {
        r->stats.unknown++;
        remember_unknown(r, id, mono_ms + UNKNOWN_RECHECK_MS);
        LB_WARN("registry", "schema id %d: %s; its records are dead-lettered as unknown_schema_id",
                id, why);
    } else if (a == A_UNUSABLE) {
        char full[256];
        r->stats.unusable++;
        snprintf(full, sizeof(full), "the registry's schema cannot be read: %.190s", why);
        if (lb_decoder_refuse(decoder, id, full) != 0)
            return -1;
        LB_ERROR("registry", "schema id %d: %s; its records are dead-lettered as unknown_schema_id",
                 id, full);
    }
    return 0;
}

/* Lets the request in flight run for up to 'budget_ms' and settles its
 * answer once it has one. Returns -1 when out of memory. */
static int drive(struct lb_registry *r, struct lb_decoder *decoder, int64_t mono_ms, int budget_ms)
{
    int64_t until = lb_monotonic_ms() + budget_ms;
    while (r->in_flight) {
        int running = 0, left = 0, done = 0;
        CURLcode rc = CURLE_OK;
        CURLMsg *msg;
        curl_multi_perform(r->multi, &running);
        while ((msg = curl_multi_info_read(r->multi, &left))) {
            if (msg->msg == CURLMSG_DONE) {
                rc = msg->data.result;
                done = 1;
            }
        }
        if (done) {
            char why[192] = "", *schema = NULL;
            int32_t id = r->asking;
            curl_multi_remove_handle(r->multi, r->curl);
            r->in_flight = 0;
            enum answer a = read_answer(r, rc, &schema, why, sizeof(why));
            int status = settle(r, decoder, id, a, schema, why, sizeof(why), mono_ms);
            free(schema);
            return status;
        }
        int64_t now = lb_monotonic_ms();
        if (now >= until)
            break;
        curl_multi_poll(r->multi, NULL, 0, (int)(until - now), NULL);
    }
    return 0;
}

int lb_registry_progress(struct lb_registry *r, struct lb_decoder *decoder, int64_t mono_ms)
{
    return drive(r, decoder, mono_ms, 0);
}

/* Whether the decoder can decide about 'id' now, without asking. */
static int decided(const struct lb_registry *r, const struct lb_decoder *decoder, int32_t id,
                   int64_t mono_ms)
{
    if (lb_decoder_has(decoder, id)) /* every record's question: the common answer first */
        return 1;
    const struct unknown *u = find_unknown(r, id);
    return u && mono_ms < u->until;
}

int lb_registry_resolve(struct lb_registry *r, struct lb_decoder *decoder, int32_t id,
                        int64_t mono_ms)
{
    if (id < 0 || decided(r, decoder, id, mono_ms)) /* no registry id is negative */
        return 1;
    if (drive(r, decoder, mono_ms, 0) != 0)
        return -1;
    if (!r->in_flight && mono_ms >= r->stats.retry_at && !decided(r, decoder, id, mono_ms)) {
        if (start(r, id) != 0)
            return -1;
        if (drive(r, decoder, mono_ms, ASK_BUDGET_MS) != 0)
            return -1;
    }
    return decided(r, decoder, id, mono_ms);
}
