/* Kafka clients; see kafka.h.
 *
 * librdkafka's own threads call the log and error callbacks below: they
 * only format and hand the line to lb_log, which is thread-safe.
 */
#include "kafka.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lb_kafka_log_quiet;

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug */
    enum lb_log_level ours = level <= 3   ? LB_LOG_ERROR
                             : level == 4 ? LB_LOG_WARN
                             : level <= 6 ? LB_LOG_INFO
                                          : LB_LOG_DEBUG;
    if (lb_kafka_log_quiet && ours < LB_LOG_INFO)
        ours = LB_LOG_INFO;
    /* "Connect to ... failed" and its kin repeat what the error callback and
     * the consumer's broker state already say, once: keep them for info */
    if (strcmp(fac, "FAIL") == 0 && ours < LB_LOG_INFO)
        ours = LB_LOG_INFO;
    lb_log(ours, "kafka", "%s: %s", fac, buf);
}

int lb_kafka_is_transport_error(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
           err == RD_KAFKA_RESP_ERR__RESOLVE || err == RD_KAFKA_RESP_ERR__TIMED_OUT;
}

/* The last authentication or TLS failure an error event reported: what a
 * tool says instead of librdkafka's "Broker transport failure". */
static pthread_mutex_t trouble_lock = PTHREAD_MUTEX_INITIALIZER;
static char trouble[512];

const char *lb_kafka_auth_trouble(rd_kafka_t *rk, char *buf, size_t len)
{
    rd_kafka_poll(rk, 0); /* serve the error events queued meanwhile */
    pthread_mutex_lock(&trouble_lock);
    snprintf(buf, len, "%s", trouble);
    pthread_mutex_unlock(&trouble_lock);
    return *buf ? buf : NULL;
}

/* librdkafka's error events: without this callback it would also log each
 * one itself, a second line for what its log callback already said. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    static struct lb_ratelimit said;
    (void)opaque;
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL) {
        pthread_mutex_lock(&trouble_lock);
        snprintf(trouble, sizeof(trouble), "%s", reason);
        pthread_mutex_unlock(&trouble_lock);
    }
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof(why));
        LB_ERROR("kafka", "fatal error %s: %s", rd_kafka_err2name(orig), why);
        return;
    }
    if (lb_kafka_is_transport_error((rd_kafka_resp_err_t)err)) {
        LB_DEBUG("kafka", "%s", reason);
        return;
    }
    lb_log_every(&said, 5000, lb_kafka_log_quiet ? LB_LOG_INFO : LB_LOG_WARN, "kafka", "%s: %s",
                 rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* Which clients a librdkafka property is for, from librdkafka's own table
 * (rd_kafka_conf_properties_show: a column 'C/P' of C, P or *), read once:
 * once it was read whole (out of memory, it is tried again next time). */
struct scope_entry {
    char *name;
    char scope;
};
static struct scope_entry *scopes;
static size_t nscopes;
static int scopes_read;
static pthread_mutex_t scopes_lock = PTHREAD_MUTEX_INITIALIZER;

static void forget_scopes(void)
{
    for (size_t i = 0; i < nscopes; i++)
        free(scopes[i].name);
    free(scopes);
    scopes = NULL;
    nscopes = 0;
}

static int read_scopes(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out)
        return -1;
    rd_kafka_conf_properties_show(out);
    if (fclose(out) != 0 || !text) {
        free(text);
        return -1;
    }
    int rc = 0;
    for (char *line = text, *end; line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        if (end)
            *end = '\0';
        char name[128], scope[8];
        if (sscanf(line, "%127s | %7s |", name, scope) != 2 || strlen(scope) != 1 ||
            !strchr("CP*", scope[0]))
            continue;
        struct scope_entry *grown = realloc(scopes, (nscopes + 1) * sizeof(*grown));
        if (grown)
            scopes = grown;
        char *copy = grown ? strdup(name) : NULL;
        if (!copy) {
            rc = -1;
            break;
        }
        scopes[nscopes++] = (struct scope_entry){copy, scope[0]};
    }
    free(text);
    if (rc != 0 || nscopes == 0) {
        forget_scopes();
        return -1;
    }
    return 0;
}

char lb_kafka_property_scope(const char *name)
{
    char scope = 0;
    pthread_mutex_lock(&scopes_lock);
    if (!scopes_read && read_scopes() == 0)
        scopes_read = 1;
    if (!scopes_read)
        scope = '?';
    for (size_t i = 0; i < nscopes && !scope; i++)
        if (strcmp(scopes[i].name, name) == 0)
            scope = scopes[i].scope;
    pthread_mutex_unlock(&scopes_lock);
    return scope;
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, const char *file,
                    int line, char *err, size_t errlen)
{
    char why[256];
    if (rd_kafka_conf_set(conf, key, value, why, sizeof(why)) == RD_KAFKA_CONF_OK)
        return 0;
    if (file)
        snprintf(err, errlen, "%s:%d: kafka property %s: %s", file, line, key, why);
    else
        snprintf(err, errlen, "kafka property %s: %s", key, why);
    return -1;
}

static int set_all(rd_kafka_conf_t *conf, const char *const (*kv)[2], size_t n, char *err,
                   size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (conf_set(conf, kv[i][0], kv[i][1], NULL, 0, err, errlen) != 0)
            return -1;
    return 0;
}

/* "<property>_file: PATH" sets <property> to the contents of PATH (one
 * trailing newline dropped), read now: a password stays out of the
 * configuration file, the command line and the environment. 'name' gets the
 * property's name. Returns 1 if kv is such a key (0 if not), -1 with 'err'
 * set when the file cannot be read. */
static int value_from_file(const struct lb_kv *kv, const char *path, int line, char *name,
                           size_t namelen, char *value, size_t valuelen, char *err, size_t errlen)
{
    size_t len = strlen(kv->key);
    if (len <= 5 || len - 5 >= namelen || strcmp(kv->key + len - 5, "_file") != 0)
        return 0;
    snprintf(name, namelen, "%.*s", (int)(len - 5), kv->key);
    if (!lb_kafka_property_scope(name))
        return 0; /* not a librdkafka property's: librdkafka says so */
    FILE *f = fopen(kv->value, "r");
    size_t got = f ? fread(value, 1, valuelen, f) : 0;
    int failed = !f || ferror(f) || got == valuelen;
    const char *why = !f ? strerror(errno) : got == valuelen ? "too long" : "cannot be read";
    if (f)
        fclose(f);
    if (failed && path)
        snprintf(err, errlen, "%s:%d: kafka property %s: %s: %s", path, line, kv->key, kv->value,
                 why);
    else if (failed)
        snprintf(err, errlen, "kafka property %s: %s: %s", kv->key, kv->value, why);
    if (failed)
        return -1;
    if (got && value[got - 1] == '\n')
        got--;
    value[got] = '\0';
    return 1;
}

/* One property as librdkafka takes it: its name and value, a <property>_file
 * read into 'value' (which the caller wipes), and its scope. 0, or -1 with
 * 'err' (an unreadable file; the scope table lost to out of memory). */
struct property {
    char name[128], value[4096];
    const char *key, *v;
    char scope;
};

static int resolve(const struct lb_kafka_options *o, const struct lb_kv *kv, struct property *pr,
                   char *err, size_t errlen)
{
    int from_file = value_from_file(kv, o->path, kv->line, pr->name, sizeof(pr->name), pr->value,
                                    sizeof(pr->value), err, errlen);
    if (from_file < 0)
        return -1;
    pr->key = from_file ? pr->name : kv->key;
    pr->v = from_file ? pr->value : kv->value;
    if ((pr->scope = lb_kafka_property_scope(pr->key)) == '?') {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int lb_kafka_property_secret(const char *name)
{
    size_t len = strlen(name);
    if (len > 5 && strcmp(name + len - 5, "_file") == 0)
        return 0; /* a path: the secret is in the file */
    return strstr(name, "password") || strstr(name, "secret") || strcmp(name, "ssl.key.pem") == 0 ||
           strcmp(name, "sasl.oauthbearer.config") == 0;
}

int lb_kafka_check(const struct lb_kafka_options *o, int producer, char *err, size_t errlen)
{
    const char *path = o->path ? o->path : "<config>";
    rd_kafka_conf_t *scratch = rd_kafka_conf_new(); /* values checked here; no client made */
    int rc = scratch ? 0 : -1;
    if (!scratch)
        snprintf(err, errlen, "out of memory");
    for (size_t i = 0; rc == 0 && i < o->nprops; i++) {
        const struct lb_kv *kv = &o->props[i];
        struct property pr;
        if (resolve(o, kv, &pr, err, errlen) != 0) {
            memset(pr.value, 0, sizeof(pr.value));
            rc = -1;
            break;
        }
        const char *key = pr.key, *v = pr.v;
        if (!pr.scope) {
            snprintf(err, errlen,
                     "%s:%d: kafka: '%s' is not a librdkafka property (dotted keys in kafka: "
                     "are passed to librdkafka; see its CONFIGURATION.md)",
                     path, kv->line, kv->key);
            rc = -1;
        } else if (pr.scope == 'P' && !producer) {
            snprintf(err, errlen,
                     "%s:%d: kafka property %s is a producer's, and the only producer is the "
                     "dead-letter one: kafka.dlq_topic is not set (remove the property or set "
                     "dlq_topic)",
                     path, kv->line, key);
            rc = -1;
        } else if ((strcmp(key, "enable.auto.commit") == 0 ||
                    strcmp(key, "enable.auto.offset.store") == 0) &&
                   strcmp(v, "false") != 0) {
            snprintf(err, errlen,
                     "%s:%d: kafka property %s must stay false: the projector commits only what "
                     "is durable in Redis",
                     path, kv->line, key);
            rc = -1;
        } else if (strcmp(key, "partition.assignment.strategy") == 0 && strstr(v, "cooperative")) {
            snprintf(err, errlen,
                     "%s:%d: kafka property %s: cooperative-sticky is not supported (librdkafka "
                     "2.0.2 has known crash and hang bugs in it); use range or roundrobin",
                     path, kv->line, key);
            rc = -1;
        } else if (strstr(key, ".location") && *v && strcmp(v, "probe") != 0 &&
                   access(v, R_OK) != 0) {
            /* librdkafka reads it only when the client is made */
            snprintf(err, errlen, "%s:%d: kafka property %s: %s: %s", path, kv->line, key, v,
                     strerror(errno));
            rc = -1;
        } else {
            rc = conf_set(scratch, key, v, path, kv->line, err, errlen);
        }
        memset(pr.value, 0, sizeof(pr.value));
    }
    if (scratch)
        rd_kafka_conf_destroy(scratch);
    return rc;
}

int lb_kafka_conf_apply(const struct lb_kafka_options *o, const struct lb_kafka_client *client,
                        rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    char mine = client->type == RD_KAFKA_CONSUMER ? 'C' : 'P';
    if (set_all(conf, client->defaults, client->ndefaults, err, errlen) != 0)
        return -1;
    if (o->brokers && conf_set(conf, "bootstrap.servers", o->brokers, o->path, 0, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < o->nprops; i++) {
        const struct lb_kv *kv = &o->props[i];
        struct property pr;
        int rc = resolve(o, kv, &pr, err, errlen);
        if (rc == 0 && pr.scope && pr.scope != '*' && pr.scope != mine) {
            memset(pr.value, 0, sizeof(pr.value));
            continue; /* the other client's: e.g. session.timeout.ms is no producer's */
        }
        if (rc == 0)
            rc = conf_set(conf, pr.key, pr.v, o->path, kv->line, err, errlen);
        memset(pr.value, 0, sizeof(pr.value));
        if (rc != 0)
            return -1;
    }
    if (set_all(conf, client->fixed, client->nfixed, err, errlen) != 0)
        return -1;
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (client->setup)
        client->setup(conf, client->ctx);
    return 0;
}

rd_kafka_t *lb_kafka_new(const struct lb_kafka_options *o, const struct lb_kafka_client *client,
                         char *err, size_t errlen, enum lb_error_class *class)
{
    enum lb_error_class ignored;
    if (!class)
        class = &ignored;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        snprintf(err, errlen, "out of memory");
        *class = LB_ERROR_RUNTIME;
        return NULL;
    }
    if (lb_kafka_conf_apply(o, client, conf, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        *class = LB_ERROR_CONFIG;
        return NULL;
    }
    char why[512];
    /* on success the client owns 'conf'; on failure it is still ours */
    rd_kafka_t *rk = rd_kafka_new(client->type, conf, why, sizeof(why));
    if (!rk) {
        /* librdkafka checks the properties against each other here (a SASL
         * mechanism without credentials, a certificate it cannot read) */
        snprintf(err, errlen, "%s%scannot create the Kafka %s: %s", o->path ? o->path : "",
                 o->path ? ": " : "", client->type == RD_KAFKA_CONSUMER ? "consumer" : "producer",
                 why);
        rd_kafka_conf_destroy(conf);
        *class = LB_ERROR_CONFIG;
        return NULL;
    }
    *class = LB_ERROR_NONE;
    return rk;
}

int lb_kafka_property_arg(char *arg, struct lb_kv *kv)
{
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return -1;
    *eq = '\0';
    *kv = (struct lb_kv){.key = arg, .value = eq + 1, .line = 0};
    return 0;
}

rd_kafka_t *lb_kafka_reader(const struct lb_kafka_options *o, const char *group, char *err,
                            size_t errlen)
{
    /* the projector's prefetch (see consumer.c), which the kafka: section
     * may override */
    static const char *const defaults[][2] = {{"queued.min.messages", "300000"}};
    /* never commit, never store, never skip silently */
    const char *const fixed[][2] = {{"group.id", group},
                                    {"enable.auto.commit", "false"},
                                    {"enable.auto.offset.store", "false"},
                                    {"auto.offset.reset", "error"},
                                    {"enable.partition.eof", "false"}};
    struct lb_kafka_client client = {.type = RD_KAFKA_CONSUMER,
                                     .defaults = defaults,
                                     .ndefaults = 1,
                                     .fixed = fixed,
                                     .nfixed = sizeof(fixed) / sizeof(fixed[0])};
    return lb_kafka_new(o, &client, err, errlen, NULL);
}

size_t lb_watermark_format(char *out, size_t cap, int64_t watermark)
{
    int n = snprintf(out, cap, "wm=%lld", (long long)watermark);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

int64_t lb_watermark_parse(const void *metadata, size_t len)
{
    const char *s = metadata;
    if (!s || len < 4 || len > 23 || memcmp(s, "wm=", 3) != 0)
        return -1;
    int64_t v = 0;
    for (size_t i = 3; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

int lb_kafka_group_offsets(rd_kafka_t *rk, const char *topic, int timeout_ms,
                           struct lb_partition_offsets **out, rd_kafka_resp_err_t *err,
                           const char **what)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    *out = NULL;
    *what = "reading the topic's partitions";
    if (!rkt) {
        *err = rd_kafka_last_error();
        return -1;
    }
    *err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    rd_kafka_topic_destroy(rkt);
    if (*err)
        return -1;
    int partitions = 0;
    *err = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    if (!*err)
        partitions = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    if (!*err && partitions == 0)
        *err = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    if (*err)
        return -1;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(list, topic, p);
    *what = "reading the committed offsets";
    struct lb_partition_offsets *po = NULL;
    if (!(*err = rd_kafka_committed(rk, list, timeout_ms)) &&
        !(po = calloc((size_t)partitions, sizeof(*po))))
        *err = RD_KAFKA_RESP_ERR__NOENT;
    for (int p = 0; po && p < partitions; p++) {
        const rd_kafka_topic_partition_t *tp = &list->elems[p];
        po[p].committed = tp->err || tp->offset < 0 ? -1 : tp->offset;
        po[p].watermark = lb_watermark_parse(tp->metadata, tp->metadata_size);
        *what = "reading the watermarks";
        if ((*err = rd_kafka_query_watermark_offsets(rk, topic, p, &po[p].low, &po[p].high,
                                                     timeout_ms))) {
            free(po);
            po = NULL;
        }
    }
    rd_kafka_topic_partition_list_destroy(list);
    *out = po;
    return po ? partitions : -1;
}

int lb_kafka_topic_max_bytes(rd_kafka_t *rk, const char *topic, int timeout_ms, int64_t *bytes,
                             char *err, size_t errlen)
{
    rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    int rc = -1;
    snprintf(err, errlen, "topic %s: out of memory", topic);
    if (res && opt && q &&
        rd_kafka_AdminOptions_set_request_timeout(opt, timeout_ms, NULL, 0) ==
            RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_DescribeConfigs(rk, &res, 1, opt, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms + 500);
        const rd_kafka_DescribeConfigs_result_t *r =
            ev ? rd_kafka_event_DescribeConfigs_result(ev) : NULL;
        size_t n = 0, nconf = 0;
        const rd_kafka_ConfigResource_t **rs =
            r && !rd_kafka_event_error(ev) ? rd_kafka_DescribeConfigs_result_resources(r, &n)
                                           : NULL;
        rd_kafka_resp_err_t e = n ? rd_kafka_ConfigResource_error(rs[0]) : RD_KAFKA_RESP_ERR__FAIL;
        if (!ev)
            snprintf(err, errlen, "describing topic %s: no answer within %d ms", topic, timeout_ms);
        else if (rd_kafka_event_error(ev))
            snprintf(err, errlen, "describing topic %s: %s", topic,
                     rd_kafka_event_error_string(ev));
        else if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            rc = 1;
        else if (e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
            snprintf(err, errlen,
                     "describing topic %s: %s (this Kafka user needs DescribeConfigs on the "
                     "topic: ops/runbooks/kafka-acl.md)",
                     topic, rd_kafka_err2str(e));
        else if (e)
            snprintf(err, errlen, "describing topic %s: %s", topic,
                     n && rd_kafka_ConfigResource_error_string(rs[0])
                         ? rd_kafka_ConfigResource_error_string(rs[0])
                         : rd_kafka_err2str(e));
        else {
            const rd_kafka_ConfigEntry_t **entries = rd_kafka_ConfigResource_configs(rs[0], &nconf);
            for (size_t i = 0; i < nconf && rc < 0; i++) {
                const char *value = rd_kafka_ConfigEntry_value(entries[i]);
                if (strcmp(rd_kafka_ConfigEntry_name(entries[i]), "max.message.bytes") == 0 &&
                    value) {
                    *bytes = strtoll(value, NULL, 10);
                    rc = 0;
                }
            }
            if (rc < 0)
                snprintf(err, errlen, "describing topic %s: no max.message.bytes", topic);
        }
        if (ev)
            rd_kafka_event_destroy(ev);
    }
    if (q)
        rd_kafka_queue_destroy(q);
    if (opt)
        rd_kafka_AdminOptions_destroy(opt);
    if (res)
        rd_kafka_ConfigResource_destroy(res);
    return rc;
}
