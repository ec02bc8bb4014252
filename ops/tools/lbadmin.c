/* lbadmin: the small Kafka chores of the scripts, tests and runbooks.
 *
 *   create-topic   create a topic (succeeds if it already exists) and wait
 *                  until every partition has a leader
 *   offsets        per partition: committed offset of a group, low and high
 *                  watermarks, lag, and the event-time watermark its commit
 *                  carries
 *   wait-caught-up wait until a group has committed the high watermark of
 *                  every partition (exit 0) or the timeout passes (exit 1)
 *   dump           every record of a topic up to its high watermarks, one
 *                  line each: partition, offset, key, value size and SHA-256,
 *                  headers
 *                  (name=value), e.g. to inspect the dead-letter topic
 *   results        the final standings of one closed window (--board,
 *                  --window) as the results topic holds them: the last
 *                  record of each part, decoded (leaderboard.v1.WindowResult)
 *   redrive        produces the dead-letter records (optionally only those
 *                  of one lb.reason) back to the topic they came from, key
 *                  and bytes unchanged, once the cause is fixed; records
 *                  dead-lettered by reference (without their bytes) or as
 *                  window_closed (late for a closed window) are refused,
 *                  named, and make the exit status 1
 *
 * Every wait on the brokers ends by --timeout after the start, so a command
 * against brokers that are down ends within it, saying so in one line.
 *
 * stdout: results; stderr: errors. Exit status (README, "Exit codes"):
 * 0 ok, 1 failure, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <librdkafka/rdkafka.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "usage.h"
#include "clock.h"
#include "kafka.h"
#include "results.h"

struct options {
    const char *command;
    const char *brokers;
    const char *topic;
    const char *group;
    const char *reason;
    const char *board, *window; /* results */
    int partitions;
    int timeout_s;          /* every wait on the brokers ends by then */
    double deadline;        /* monotonic: the start plus timeout_s */
    struct lb_kv props[32]; /* -X key=value */
    int nprops;
    char *topic_configs[16]; /* create-topic --config key=value */
    int ntopic_configs;
};

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Milliseconds left before the deadline: the timeout of every request. */
static int left_ms(const struct options *o)
{
    double left = o->deadline - monotonic_s();
    return left > 0 ? (int)(left * 1000) : 0;
}

/* Why the command failed, said once by main when it gives up: a retrying
 * command (wait-caught-up) keeps only the last reason. */
static char failure[1024];

static void failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof(failure), fmt, ap);
    va_end(ap);
}

/* Returns the client, or NULL with the reason in 'failure' and '*status'
 * set: 2 when the command line's -X is to blame, 1 otherwise. */
static rd_kafka_t *make_client(const struct options *o, rd_kafka_type_t type, int *status)
{
    char err[512];
    /* errors only: a fresh broker's "coordinator load in progress" is noise */
    static const char *const defaults[][2] = {{"log_level", "3"}};
    /* an end-of-partition event: a compacted topic's gaps leave records
     * uncountable (results); dump and redrive pass over it */
    const char *const group[][2] = {{"group.id", o->group}, {"enable.partition.eof", "true"}};
    struct lb_kafka_options options = {
        .brokers = o->brokers, .props = o->props, .nprops = (size_t)o->nprops};
    struct lb_kafka_client client = {.type = type,
                                     .defaults = defaults,
                                     .ndefaults = 1,
                                     .fixed = group,
                                     .nfixed = o->group ? 2 : 0};
    enum lb_error_class class;
    rd_kafka_t *rk = lb_kafka_new(&options, &client, err, sizeof(err), &class);
    if (!rk) {
        failed("%s%s", class == LB_ERROR_CONFIG ? "-X: " : "", err);
        *status = class == LB_ERROR_CONFIG ? 2 : 1;
    }
    return rk;
}

/* Keeps why a request to the brokers failed: an authentication or TLS
 * failure, the brokers out of reach, or the error itself. */
static void request_failed(rd_kafka_t *rk, const struct options *o, const char *what,
                           rd_kafka_resp_err_t e)
{
    char buf[512];
    const char *auth = lb_kafka_auth_trouble(rk, buf, sizeof(buf));
    if (auth || lb_kafka_is_transport_error(e))
        failed("cannot reach the Kafka brokers %s within %d s (%s); check --brokers, -X and "
               "that Kafka runs",
               o->brokers, o->timeout_s, auth ? auth : rd_kafka_err2str(e));
    else
        failed("%s: %s", what, rd_kafka_err2str(e));
}

/* Waits, until the deadline, for a broker to answer. 0, or -1 (failed). */
static int reach_brokers(rd_kafka_t *rk, const struct options *o)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, left_ms(o));
    if (e) {
        request_failed(rk, o, "reading the cluster's metadata", e);
        return -1;
    }
    rd_kafka_metadata_destroy(md);
    return 0;
}

/* The partitions of o->topic and how many have a leader. Returns the
 * broker's error (RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART: no such topic). */
static rd_kafka_resp_err_t describe_topic(rd_kafka_t *rk, const struct options *o, int *partitions,
                                          int *leaders)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, left_ms(o));
    rd_kafka_topic_destroy(rkt);
    *partitions = *leaders = 0;
    if (e)
        return e;
    e = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    if (!e) {
        *partitions = md->topics[0].partition_cnt;
        for (int p = 0; p < *partitions; p++)
            *leaders += md->topics[0].partitions[p].leader >= 0;
    }
    rd_kafka_metadata_destroy(md);
    if (!e && *partitions == 0)
        e = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    return e;
}

/* describe_topic, keeping what failed. Returns the partition count or -1. */
static int topic_partitions(rd_kafka_t *rk, const struct options *o)
{
    int partitions, leaders;
    rd_kafka_resp_err_t e = describe_topic(rk, o, &partitions, &leaders);
    if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        failed("topic %s does not exist on %s; check --topic", o->topic, o->brokers);
    else if (e)
        request_failed(rk, o, o->topic, e);
    return e ? -1 : partitions;
}

/* Sends CreateTopics and waits for its answer. 0 (created or already
 * there), 1 (failed), 2 (a --config the broker refuses as malformed). */
static int send_create(rd_kafka_t *rk, const struct options *o)
{
    char err[512];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(o->topic, o->partitions, 1, err, sizeof(err));
    if (!nt) {
        failed("creating %s: %s", o->topic, err);
        return 1;
    }
    for (int i = 0; i < o->ntopic_configs; i++) {
        char *eq = strchr(o->topic_configs[i], '='); /* main checked it is there */
        *eq = '\0';
        rd_kafka_resp_err_t e = rd_kafka_NewTopic_set_config(nt, o->topic_configs[i], eq + 1);
        *eq = '=';
        if (e) {
            failed("--config %s: %s", o->topic_configs[i], rd_kafka_err2str(e));
            rd_kafka_NewTopic_destroy(nt);
            return 2;
        }
    }
    rd_kafka_AdminOptions_t *options =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    int wait_ms = left_ms(o) + 1;
    /* librdkafka takes at most an hour here */
    rd_kafka_AdminOptions_set_request_timeout(options, wait_ms < 3600000 ? wait_ms : 3600000, NULL,
                                              0);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, options, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, left_ms(o) + 100);
    int status = 1;
    if (!ev) {
        failed("creating %s: no answer from %s within %d s", o->topic, o->brokers, o->timeout_s);
    } else if (rd_kafka_event_error(ev)) {
        failed("creating %s: %s", o->topic, rd_kafka_event_error_string(ev));
    } else {
        size_t n;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        rd_kafka_resp_err_t e = n ? rd_kafka_topic_result_error(res[0]) : RD_KAFKA_RESP_ERR__FAIL;
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            printf("created topic %s with %d partitions\n", o->topic, o->partitions);
        else if (e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
            printf("topic %s already exists\n", o->topic);
        else
            failed("creating %s: %s", o->topic,
                   n ? rd_kafka_topic_result_error_string(res[0]) : rd_kafka_err2str(e));
        status =
            e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS ? 0 : 1;
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_AdminOptions_destroy(options);
    rd_kafka_NewTopic_destroy(nt);
    return status;
}

static int create_topic(const struct options *o)
{
    int status = 1;
    rd_kafka_t *rk = make_client(o, RD_KAFKA_PRODUCER, &status);
    if (!rk)
        return status;
    status = reach_brokers(rk, o) == 0 ? send_create(rk, o) : 1;
    /* Wait until every partition has a leader, so producers can start. */
    while (status == 0) {
        int partitions, leaders;
        if (describe_topic(rk, o, &partitions, &leaders) == 0 && leaders == partitions)
            break;
        if (left_ms(o) == 0) {
            failed("%s has partitions without a leader after %d s", o->topic, o->timeout_s);
            status = 1;
        }
        usleep(100000);
    }
    rd_kafka_destroy(rk);
    return status;
}

/* Reads committed offsets and watermarks for every partition of the topic.
 * Returns the partition count, or -1 with the reason in 'failure'. */
static int read_offsets(rd_kafka_t *rk, const struct options *o, struct lb_partition_offsets **out)
{
    rd_kafka_resp_err_t err;
    const char *what;
    int n = lb_kafka_group_offsets(rk, o->topic, left_ms(o), out, &err, &what);
    if (n >= 0)
        return n;
    if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        failed("topic %s does not exist on %s; check --topic", o->topic, o->brokers);
    else {
        char text[300];
        snprintf(text, sizeof(text), "%s of group %s", what, o->group);
        request_failed(rk, o, text, err);
    }
    return -1;
}

static int64_t lag_of(const struct lb_partition_offsets *p)
{
    int64_t from = p->committed >= 0 ? p->committed : p->low;
    return p->high - from;
}

static int show_offsets(const struct options *o)
{
    int status = 1;
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER, &status);
    struct lb_partition_offsets *po;
    if (!rk)
        return status;
    int n = reach_brokers(rk, o) == 0 ? read_offsets(rk, o, &po) : -1;
    rd_kafka_destroy(rk);
    if (n < 0)
        return 1;
    int64_t total = 0;
    printf("%-24s %9s %12s %12s %12s %10s  %s\n", "topic", "partition", "committed", "low", "high",
           "lag", "watermark");
    for (int p = 0; p < n; p++) {
        char committed[32];
        if (po[p].committed >= 0)
            snprintf(committed, sizeof(committed), "%lld", (long long)po[p].committed);
        else
            snprintf(committed, sizeof(committed), "-");
        char watermark[40] = "-";
        if (po[p].watermark >= 0)
            lb_utc_format(po[p].watermark, watermark, sizeof(watermark));
        printf("%-24s %9d %12s %12lld %12lld %10lld  %s\n", o->topic, p, committed,
               (long long)po[p].low, (long long)po[p].high, (long long)lag_of(&po[p]), watermark);
        total += lag_of(&po[p]);
    }
    printf("total lag %lld\n", (long long)total);
    free(po);
    return 0;
}

/* Waits for lag 0. Also times the drain as seen from outside: from the first
 * poll at which the group's committed total had moved to the poll at which
 * it reached the end (the benchmark's drain rate). */
static int wait_caught_up(const struct options *o)
{
    int status = 1;
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER, &status);
    double moved_at = 0;
    int64_t lag = -1, initial = -1, moved_from = 0;
    char where[160] = ""; /* which partitions lag, and by how much */
    if (!rk)
        return status;
    if (reach_brokers(rk, o) != 0) {
        rd_kafka_destroy(rk);
        return 1;
    }
    while (left_ms(o) > 0) {
        struct lb_partition_offsets *po;
        int n = read_offsets(rk, o, &po);
        if (n < 0) { /* e.g. the coordinator still loading: try again */
            usleep(100000);
            continue;
        }
        int64_t committed = 0;
        size_t at = 0;
        lag = 0;
        for (int p = 0; p < n; p++) {
            int64_t behind = po[p].committed >= 0 || po[p].high > po[p].low ? lag_of(&po[p]) : 0;
            if (behind && at < sizeof(where) - 1) /* truncated past the buffer */
                at += (size_t)snprintf(where + at, sizeof(where) - at, "%s%d: %lld", at ? ", " : "",
                                       p, (long long)behind);
            lag += behind;
            committed += po[p].committed >= 0 ? po[p].committed - po[p].low : 0;
        }
        free(po);
        double now = monotonic_s();
        int first = initial < 0;
        if (first)
            initial = committed;
        else if (!moved_at && committed != initial) {
            moved_at = now;
            moved_from = committed;
        }
        if (lag == 0) {
            printf("group %s has committed the end of every partition of %s%s\n", o->group,
                   o->topic, first ? ": already caught up" : "");
            if (moved_at && committed != moved_from)
                printf("drain events=%lld seconds=%.3f\n", (long long)(committed - moved_from),
                       now - moved_at);
            rd_kafka_destroy(rk);
            return 0;
        }
        usleep(100000);
    }
    if (lag > 0)
        failed("group %s still lags %lld events on %s after %d s (by partition: %s)", o->group,
               (long long)lag, o->topic, o->timeout_s, where);
    rd_kafka_destroy(rk);
    return 1;
}

/* Assigns every partition of o->topic from its low watermark; stores each
 * partition's high watermark in '*high' (owned by the caller) and the
 * number of records up to them in '*left'. Returns 0 or 1 (said why). */
static int assign_whole_topic(rd_kafka_t *rk, const struct options *o, int64_t **high,
                              int64_t *left)
{
    int n = reach_brokers(rk, o) == 0 ? topic_partitions(rk, o) : -1;
    if (n < 0)
        return 1;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    *high = calloc((size_t)n, sizeof(**high));
    *left = 0;
    for (int p = 0; *high && !e && p < n; p++) {
        int64_t low;
        e = rd_kafka_query_watermark_offsets(rk, o->topic, p, &low, &(*high)[p], left_ms(o));
        if (!e) {
            rd_kafka_topic_partition_list_add(list, o->topic, p)->offset = low;
            *left += (*high)[p] - low;
        }
    }
    if (!e)
        e = *high ? rd_kafka_assign(rk, list) : RD_KAFKA_RESP_ERR__FAIL;
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
        request_failed(rk, o, o->topic, e);
        return 1;
    }
    return 0;
}

/* Prints a header value with spaces and control bytes escaped. */
static void print_escaped(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c == '\\' || c >= 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

/* The wait of one poll: at most 200 ms, never past the deadline. */
static int poll_ms(const struct options *o)
{
    int left = left_ms(o);
    return left < 200 ? left : 200;
}

static int dump(const struct options *o)
{
    int status = 1;
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER, &status);
    if (!rk)
        return status;
    int64_t *high = NULL, left = 0;
    if (assign_whole_topic(rk, o, &high, &left) != 0) {
        free(high);
        rd_kafka_destroy(rk);
        return 1;
    }
    while (left > 0 && left_ms(o) > 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, poll_ms(o));
        if (!m)
            continue;
        if (!m->err && m->offset < high[m->partition]) {
            left--;
            printf("%d %lld key=", m->partition, (long long)m->offset);
            print_escaped(m->key ? m->key : "", m->key_len);
            printf(" bytes=%zu sha256=", m->len);
            unsigned char digest[EVP_MAX_MD_SIZE];
            unsigned int dn = 0;
            if (EVP_Digest(m->payload ? m->payload : "", m->len, digest, &dn, EVP_sha256(), NULL))
                for (unsigned int i = 0; i < dn; i++)
                    printf("%02x", digest[i]);
            rd_kafka_headers_t *headers;
            if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                const char *name;
                const void *value;
                size_t size;
                for (size_t i = 0; !rd_kafka_header_get_all(headers, i, &name, &value, &size);
                     i++) {
                    printf(" %s=", name);
                    print_escaped(value ? value : "", value ? size : 0);
                }
            }
            putchar('\n');
        }
        rd_kafka_message_destroy(m);
    }
    free(high);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (left > 0) {
        failed("%lld record(s) of %s not read within %d s", (long long)left, o->topic,
               o->timeout_s);
        return 1;
    }
    return 0;
}

/* The value of header 'name' of 'm', or NULL. */
static const char *header(rd_kafka_message_t *m, const char *name, char *out, size_t cap)
{
    rd_kafka_headers_t *headers;
    const void *value;
    size_t size;
    if (rd_kafka_message_headers(m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        !value)
        return NULL;
    snprintf(out, cap, "%.*s", (int)size, (const char *)value);
    return out;
}

/* Reads the DLQ (o->topic) to its high watermarks and produces each record
 * whose reason matches o->reason (all when NULL) to its lb.source.topic. */
static int redrive(const struct options *o)
{
    int status = 1;
    rd_kafka_t *consumer = make_client(o, RD_KAFKA_CONSUMER, &status), *producer = NULL;
    int64_t *high = NULL, left = 0, sent = 0, skipped = 0, by_reference = 0, closed = 0;
    /* the producer once the brokers answered: one client's lines if not */
    if (!consumer || assign_whole_topic(consumer, o, &high, &left) != 0 ||
        !(producer = make_client(o, RD_KAFKA_PRODUCER, &status))) {
        free(high);
        if (consumer)
            rd_kafka_destroy(consumer);
        return status;
    }
    status = 0;
    /* reading stops early enough to leave the last records a fair wait for
     * their acknowledgement: half the timeout, at most 30 s */
    int reserve_ms = o->timeout_s * 500 < 30000 ? o->timeout_s * 500 : 30000;
    while (left > 0 && left_ms(o) > reserve_ms && status == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, poll_ms(o));
        if (!m)
            continue;
        if (!m->err && m->offset < high[m->partition]) {
            char reason[64], source[256], what[32], offset[32], partition[16];
            left--;
            if (!header(m, "lb.source.topic", source, sizeof(source)) ||
                (o->reason && (!header(m, "lb.reason", reason, sizeof(reason)) ||
                               strcmp(reason, o->reason) != 0))) {
                skipped++;
            } else if (header(m, "lb.by_reference", what, sizeof(what))) {
                /* dead-lettered without its bytes: redriving it would
                 * produce an empty record, not the event */
                fprintf(stderr,
                        "lbadmin: not redriving DLQ record %d/%lld: it was dead-lettered by "
                        "reference (without its %s); the original is %s [%s] at offset %s\n",
                        m->partition, (long long)m->offset, what, source,
                        header(m, "lb.source.partition", partition, sizeof(partition)) ? partition
                                                                                       : "?",
                        header(m, "lb.source.offset", offset, sizeof(offset)) ? offset : "?");
                by_reference++;
            } else if (header(m, "lb.reason", reason, sizeof(reason)) &&
                       strcmp(reason, "window_closed") == 0) {
                /* applied to its board's open windows already; its closed
                 * window would refuse it again: nothing to redrive */
                if (!closed++)
                    fprintf(stderr,
                            "lbadmin: not redriving DLQ records with lb.reason window_closed: "
                            "each came after a window closed, its other windows took it, and "
                            "the closed window's final standings stand (README \"Final "
                            "standings\")\n");
            } else if (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(source),
                                         RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                         RD_KAFKA_V_KEY(m->key, m->key_len),
                                         RD_KAFKA_V_VALUE(m->payload, m->len),
                                         RD_KAFKA_V_END) != RD_KAFKA_RESP_ERR_NO_ERROR) {
                fprintf(stderr, "lbadmin: producing to %s failed\n", source);
                status = 1;
            } else {
                sent++;
            }
        }
        rd_kafka_message_destroy(m);
        rd_kafka_poll(producer, 0);
    }
    /* what is left of the timeout: the reserve at least */
    int flush_ms = left_ms(o);
    if (rd_kafka_flush(producer, flush_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr,
                "lbadmin: %d record(s) not acknowledged by the brokers within the %.1f s left of "
                "--timeout %d (some may have been written: a second redrive can repeat them)\n",
                rd_kafka_outq_len(producer), flush_ms / 1000.0, o->timeout_s);
        rd_kafka_purge(producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        status = 1;
    }
    free(high);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    rd_kafka_destroy(producer);
    if (left > 0) {
        fprintf(stderr, "lbadmin: %lld record(s) of %s not read within %d s\n", (long long)left,
                o->topic, o->timeout_s);
        status = 1;
    }
    printf("redrive: %lld record(s) produced back to their source topic, %lld left alone, "
           "%lld refused (dead-lettered by reference), %lld refused (window_closed)\n",
           (long long)sent, (long long)skipped, (long long)by_reference, (long long)closed);
    return by_reference || closed ? 1 : status;
}

/* ---- results: leaderboard.v1.WindowResult, read back ---------------------------- */

static void print_time(int64_t ms)
{
    char at[40];
    lb_utc_format(ms, at, sizeof(at));
    fputs(at, stdout);
}

static int print_entry(void *ctx, const struct lb_standing *e)
{
    (void)ctx;
    printf("%lld\t%.*s\t%lld\t%lld\t%lld\t%lld\n", (long long)e->position, (int)e->len, e->player,
           (long long)e->score, (long long)e->achieved_at_ms, (long long)e->rank,
           (long long)e->dense_rank);
    return 0;
}

/* Prints one record (a part): the head once (part 1), then its entries. */
static int print_result(const rd_kafka_message_t *m, int head)
{
    static const char *const kinds[] = {"DAILY", "WEEKLY", "MONTHLY"};
    struct lb_result_view v;
    if (lb_results_decode(m->payload, m->len, &v, NULL, NULL) != 0) {
        failed("%s [%d] at %lld: not a WindowResult (schemas/window_result.avsc)",
               rd_kafka_topic_name(m->rkt), m->partition, (long long)m->offset);
        return 1;
    }
    if (head) {
        printf("board %.*s window %.*s kind %s players %lld parts %lld schema %d\nstart ",
               (int)v.board_len, v.board, (int)v.window_len, v.window, kinds[v.kind],
               (long long)v.players, (long long)v.parts, (int)v.schema_id);
        print_time(v.start_ms);
        fputs(" end ", stdout);
        print_time(v.end_ms);
        fputs(" closed at ", stdout);
        print_time(v.closed_at_ms);
        puts("\nposition\tplayer\tscore\tachieved_at_ms\trank\tdense_rank");
    }
    return lb_results_decode(m->payload, m->len, &v, print_entry, NULL) == 0 ? 0 : 1;
}

/* Reads the results topic to its high watermarks, keeps the last record of
 * each part keyed "{board}:window", and prints them in order. */
static int results(const struct options *o)
{
    int status = 1;
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER, &status);
    if (!rk)
        return status;
    int64_t *high = NULL, left = 0, parts = 0;
    if (assign_whole_topic(rk, o, &high, &left) != 0) {
        free(high);
        rd_kafka_destroy(rk);
        return 1;
    }
    char key[1024];
    int klen = (int)lb_results_record_key(o->board, o->window, 1, key, sizeof(key));
    rd_kafka_message_t **last = NULL; /* per part */
    /* partitions not read to their end yet (compaction leaves gaps: records
     * are not counted) */
    int n = topic_partitions(rk, o);
    uint8_t *done = calloc(n > 0 ? (size_t)n : 1, 1);
    left = n > 0 && done ? n : 0;
    status = n >= 0 && done ? 0 : 1;
    while (left > 0 && left_ms(o) > 0 && status == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, poll_ms(o));
        if (!m)
            continue;
        int32_t p = m->partition;
        if (p >= 0 && p < n && !done[p] &&
            (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF ? m->offset >= high[p]
                                                        : !m->err && m->offset + 1 >= high[p])) {
            done[p] = 1;
            left--;
        }
        if (m->err || m->offset >= high[p]) {
            rd_kafka_message_destroy(m);
            continue;
        }
        /* "{B}:<window>", or "{B}:<window>#<part>" after the first */
        if ((int)m->key_len < klen || memcmp(m->key, key, (size_t)klen) != 0 ||
            ((int)m->key_len > klen && ((const char *)m->key)[klen] != '#')) {
            rd_kafka_message_destroy(m);
            continue;
        }
        struct lb_result_view v;
        if (lb_results_decode(m->payload, m->len, &v, NULL, NULL) != 0 || v.parts > 100000) {
            failed("%s [%d] at %lld: not a WindowResult (schemas/window_result.avsc)", o->topic,
                   m->partition, (long long)m->offset);
            rd_kafka_message_destroy(m);
            status = 1;
            break;
        }
        int64_t part = v.part, count = v.parts;
        if (count != parts) { /* published again with another count: start over */
            for (int64_t i = 0; last && i < parts; i++)
                if (last[i])
                    rd_kafka_message_destroy(last[i]);
            free(last);
            parts = count;
            last = calloc((size_t)parts, sizeof(*last));
            if (!last) {
                failed("out of memory");
                rd_kafka_message_destroy(m);
                status = 1;
                break;
            }
        }
        if (last[part - 1])
            rd_kafka_message_destroy(last[part - 1]);
        last[part - 1] = m;
    }
    if (status == 0 && left > 0) {
        failed("%lld partition(s) of %s not read to their end within %d s", (long long)left,
               o->topic, o->timeout_s);
        status = 1;
    }
    free(done);
    if (status == 0 && parts == 0) {
        failed("no result of board '%s' window '%s' in %s (is the window closed? lbread --final "
               "shows its state)",
               o->board, o->window, o->topic);
        status = 1;
    }
    for (int64_t i = 0; status == 0 && i < parts; i++)
        if (!last[i]) {
            failed("part %lld of %lld of board '%s' window '%s' is not in %s", (long long)i + 1,
                   (long long)parts, o->board, o->window, o->topic);
            status = 1;
        }
    for (int64_t i = 0; status == 0 && i < parts; i++)
        status = print_result(last[i], i == 0);
    for (int64_t i = 0; last && i < parts; i++)
        if (last[i])
            rd_kafka_message_destroy(last[i]);
    free(last);
    free(high);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return status;
}

#define COMMANDS "create-topic, offsets, wait-caught-up, dump, results or redrive"

static void usage(FILE *out)
{
    fprintf(out, "Usage: lbadmin create-topic   --topic T [--partitions N] [--config K=V]...\n"
                 "   or: lbadmin offsets        --topic T --group G\n"
                 "   or: lbadmin wait-caught-up --topic T --group G\n"
                 "   or: lbadmin dump           --topic T\n"
                 "   or: lbadmin results        --topic T --board B --window W\n"
                 "   or: lbadmin redrive        --topic DLQ [--reason R]\n"
                 "\n"
                 "Each also takes [--brokers B] [--timeout S] [-X key=value]...\n"
                 "\n"
                 "  -b, --brokers LIST   bootstrap servers (default 127.0.0.1:9092)\n"
                 "  -t, --topic NAME     topic\n"
                 "  -g, --group ID       consumer group\n"
                 "  -p, --partitions N   partitions of a new topic (default 6)\n"
                 "      --config K=V     a topic property of a new topic, e.g.\n"
                 "                       max.message.bytes=16777216; repeatable\n"
                 "      --timeout S      every wait on the brokers ends within S seconds\n"
                 "                       (default 10 for offsets, 60 for the others)\n"
                 "      --reason R       redrive: only records with lb.reason R\n"
                 "      --board B        results: the board\n"
                 "      --window W       results: the window, e.g. weekly:2026-W47\n"
                 "  -X key=value         librdkafka property; repeatable\n"
                 "  -h, --help           show this help\n"
                 "\n"
                 "Exit status: 0 ok; 1 failure (the brokers not reached within the timeout,\n"
                 "a request refused, a group still lagging, records redrive refused);\n"
                 "2 usage error (a bad command line, including a -X librdkafka refuses).\n"
                 "\n"
                 "Example:\n"
                 "  lbadmin offsets --topic scores --group leaderboard-projector\n");
}

int main(int argc, char **argv)
{
    lb_usage_program = "lbadmin";
    static const struct option longopts[] = {{"brokers", required_argument, NULL, 'b'},
                                             {"topic", required_argument, NULL, 't'},
                                             {"group", required_argument, NULL, 'g'},
                                             {"partitions", required_argument, NULL, 'p'},
                                             {"timeout", required_argument, NULL, 'T'},
                                             {"reason", required_argument, NULL, 'R'},
                                             {"config", required_argument, NULL, 'C'},
                                             {"board", required_argument, NULL, 'B'},
                                             {"window", required_argument, NULL, 'W'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    static const char *const commands[] = {"create-topic", "offsets", "wait-caught-up",
                                           "dump",         "results", "redrive"};
    struct options o = {.brokers = "127.0.0.1:9092", .partitions = 6, .timeout_s = -1};
    int opt;
    double v;

    /* the subcommand first, as usage shows it; options may come before it */
    optind = argc > 1 && argv[1][0] != '-' ? 2 : 1;
    if (optind == 2)
        o.command = argv[1];
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":b:t:g:p:X:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            o.brokers = optarg;
            break;
        case 't':
            o.topic = optarg;
            break;
        case 'g':
            o.group = optarg;
            break;
        case 'p':
            if (lb_usage_number(optarg, 1, 100000, 1, &v) != 0)
                return lb_usage_error("--partitions wants a number from 1 to 100000, not '%s'",
                                      optarg);
            o.partitions = (int)v;
            break;
        case 'T':
            if (lb_usage_number(optarg, 1, 86400, 1, &v) != 0)
                return lb_usage_error("--timeout wants seconds from 1 to 86400, not '%s'", optarg);
            o.timeout_s = (int)v;
            break;
        case 'R':
            o.reason = optarg;
            break;
        case 'B':
            o.board = optarg;
            break;
        case 'W':
            o.window = optarg;
            break;
        case 'X':
            if (o.nprops == 32)
                return lb_usage_error("-X %s: at most 32 properties", optarg);
            if (lb_kafka_property_arg(optarg, &o.props[o.nprops]) != 0)
                return lb_usage_error("-X wants key=value, not '%s'", optarg);
            o.nprops++;
            break;
        case 'C':
            if (o.ntopic_configs == 16)
                return lb_usage_error("--config %s: at most 16 topic properties", optarg);
            if (strchr(optarg, '=') == NULL || optarg[0] == '=')
                return lb_usage_error("--config wants topic-property=value, not '%s'", optarg);
            o.topic_configs[o.ntopic_configs++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return lb_bad_option(opt, argv);
        }
    }
    if (!o.command && optind < argc)
        o.command = argv[optind++];
    if (optind < argc)
        return lb_usage_error("unexpected argument '%s'", argv[optind]);
    if (!o.command)
        return lb_usage_error("say what to do: %s", COMMANDS);
    int known = 0;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        known |= strcmp(o.command, commands[i]) == 0;
    if (!known)
        return lb_usage_error("unknown subcommand '%s'; the subcommands are %s", o.command,
                              COMMANDS);
    int needs_group = strcmp(o.command, "offsets") == 0 || strcmp(o.command, "wait-caught-up") == 0;
    if (!o.topic || (needs_group && !o.group))
        return lb_usage_error("%s needs %s", o.command,
                              !o.topic && needs_group && !o.group ? "--topic and --group"
                              : !o.topic                          ? "--topic"
                                                                  : "--group");
    if (o.reason && strcmp(o.command, "redrive") != 0)
        return lb_usage_error("--reason is for redrive, not %s", o.command);
    int is_results = strcmp(o.command, "results") == 0;
    if (is_results && (!o.board || !o.window))
        return lb_usage_error("results needs --board and --window");
    if (!is_results && (o.board || o.window))
        return lb_usage_error("--board and --window are for results, not %s", o.command);
    if (o.ntopic_configs && strcmp(o.command, "create-topic") != 0)
        return lb_usage_error("--config is for create-topic, not %s", o.command);
    if (o.timeout_s < 0)
        o.timeout_s = strcmp(o.command, "offsets") == 0 ? 10 : 60;
    o.deadline = monotonic_s() + o.timeout_s;
    /* librdkafka's errors are logged at info: this tool says what failed */
    lb_kafka_log_quiet = 1;

    int status;
    if (strcmp(o.command, "create-topic") == 0) {
        status = create_topic(&o);
    } else if (strcmp(o.command, "offsets") == 0) {
        status = show_offsets(&o);
    } else if (strcmp(o.command, "wait-caught-up") == 0) {
        status = wait_caught_up(&o);
    } else if (strcmp(o.command, "dump") == 0) {
        o.group = "lbadmin-dump"; /* needed by the consumer; nothing is committed */
        status = dump(&o);
    } else if (is_results) {
        o.group = "lbadmin-results"; /* needed by the consumer; nothing is committed */
        status = results(&o);
    } else {
        o.group = "lbadmin-redrive"; /* needed by the consumer; nothing is committed */
        status = redrive(&o);
    }
    if (status != 0 && failure[0])
        fprintf(stderr, "lbadmin: %s\n", failure);
    return status;
}
