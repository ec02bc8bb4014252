/* lbadmin: the small Kafka chores of the scripts, tests and runbooks.
 *
 *   create-topic   create a topic (succeeds if it already exists) and wait
 *                  until every partition has a leader
 *   offsets        per partition: committed offset of a group, low and high
 *                  watermarks, lag
 *   wait-caught-up wait until a group has committed the high watermark of
 *                  every partition (exit 0) or the timeout passes (exit 1)
 *   dump           every record of a topic up to its high watermarks, one
 *                  line each: partition, offset, key, value size, headers
 *                  (name=value), e.g. to inspect the dead-letter topic
 *   redrive        produces the dead-letter records (optionally only those
 *                  of one lb.reason) back to the topic they came from, key
 *                  and bytes unchanged, once the cause is fixed; records
 *                  dead-lettered by reference (without their bytes) are
 *                  refused, named, and make the exit status 1
 *
 * stdout: results; stderr: errors. Exit 0 ok, 1 failure, 2 usage.
 */
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kafka.h"

struct options {
    const char *brokers;
    const char *topic;
    const char *group;
    const char *reason;
    int partitions;
    int timeout_s;
    struct lb_kv props[32]; /* -X key=value */
    int nprops;
    char *topic_configs[16]; /* create-topic --config key=value */
    int ntopic_configs;
};

static rd_kafka_t *make_client(const struct options *o, rd_kafka_type_t type)
{
    char err[512];
    /* errors only: a fresh broker's "coordinator load in progress" is noise */
    static const char *const defaults[][2] = {{"log_level", "3"}};
    const char *const group[][2] = {{"group.id", o->group}};
    struct lb_kafka_options options = {
        .brokers = o->brokers, .props = o->props, .nprops = (size_t)o->nprops};
    struct lb_kafka_client client = {.type = type,
                                     .defaults = defaults,
                                     .ndefaults = 1,
                                     .fixed = group,
                                     .nfixed = o->group ? 1 : 0};
    rd_kafka_t *rk = lb_kafka_new(&options, &client, err, sizeof(err), NULL);
    if (!rk)
        fprintf(stderr, "lbadmin: %s\n", err);
    return rk;
}

/* Returns the number of partitions of 'topic' that have a leader, or -1. */
static int leaders_ready(rd_kafka_t *rk, const char *topic, int *partitions)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    int ready = -1;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && !md->topics[0].err) {
            ready = 0;
            *partitions = md->topics[0].partition_cnt;
            for (int p = 0; p < md->topics[0].partition_cnt; p++)
                ready += md->topics[0].partitions[p].leader >= 0;
        }
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(rkt);
    return ready;
}

static int create_topic(const struct options *o)
{
    char err[512];
    rd_kafka_t *rk = make_client(o, RD_KAFKA_PRODUCER);
    if (!rk)
        return 1;
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(o->topic, o->partitions, 1, err, sizeof(err));
    if (!nt) {
        fprintf(stderr, "lbadmin: %s\n", err);
        rd_kafka_destroy(rk);
        return 1;
    }
    for (int i = 0; i < o->ntopic_configs; i++) {
        char *eq = strchr(o->topic_configs[i], '=');
        rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR__INVALID_ARG;
        if (eq) {
            *eq = '\0';
            e = rd_kafka_NewTopic_set_config(nt, o->topic_configs[i], eq + 1);
        }
        if (e) {
            fprintf(stderr, "lbadmin: --config wants topic-property=value, not '%s'\n",
                    o->topic_configs[i]);
            rd_kafka_NewTopic_destroy(nt);
            rd_kafka_destroy(rk);
            return 2;
        }
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, o->timeout_s * 1000);
    int status = 1;
    if (!ev) {
        fprintf(stderr, "lbadmin: CreateTopics timed out after %d s\n", o->timeout_s);
    } else if (rd_kafka_event_error(ev)) {
        fprintf(stderr, "lbadmin: CreateTopics failed: %s\n", rd_kafka_event_error_string(ev));
    } else {
        size_t n;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        rd_kafka_resp_err_t terr =
            n ? rd_kafka_topic_result_error(res[0]) : RD_KAFKA_RESP_ERR__FAIL;
        if (terr == RD_KAFKA_RESP_ERR_NO_ERROR) {
            printf("created topic %s with %d partitions\n", o->topic, o->partitions);
            status = 0;
        } else if (terr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            printf("topic %s already exists\n", o->topic);
            status = 0;
        } else {
            fprintf(stderr, "lbadmin: creating %s: %s\n", o->topic,
                    rd_kafka_topic_result_error_string(res[0]));
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    /* Wait until every partition has a leader, so producers can start. */
    for (int waited = 0; status == 0; waited++) {
        int partitions = 0, ready = leaders_ready(rk, o->topic, &partitions);
        if (ready > 0 && ready == partitions)
            break;
        if (waited >= o->timeout_s * 10) {
            fprintf(stderr, "lbadmin: %s has partitions without a leader after %d s\n", o->topic,
                    o->timeout_s);
            status = 1;
        }
        usleep(100000);
    }
    rd_kafka_destroy(rk);
    return status;
}

struct partition_offsets {
    int32_t partition;
    int64_t committed; /* -1001 (RD_KAFKA_OFFSET_INVALID) when none */
    int64_t low, high;
};

/* Reads committed offsets and watermarks for every partition of the topic.
 * Returns the partition count, or -1. */
static int read_offsets(rd_kafka_t *rk, const struct options *o, struct partition_offsets **out)
{
    int partitions = 0;
    if (leaders_ready(rk, o->topic, &partitions) < 0 || partitions <= 0) {
        fprintf(stderr, "lbadmin: topic %s not found\n", o->topic);
        return -1;
    }
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(list, o->topic, p);
    rd_kafka_resp_err_t err = rd_kafka_committed(rk, list, 10000);
    if (err) {
        fprintf(stderr, "lbadmin: reading committed offsets of group %s: %s\n", o->group,
                rd_kafka_err2str(err));
        rd_kafka_topic_partition_list_destroy(list);
        return -1;
    }
    struct partition_offsets *po = calloc((size_t)partitions, sizeof(*po));
    for (int p = 0; po && p < partitions; p++) {
        po[p].partition = p;
        po[p].committed = list->elems[p].offset;
        err = rd_kafka_query_watermark_offsets(rk, o->topic, p, &po[p].low, &po[p].high, 10000);
        if (err) {
            fprintf(stderr, "lbadmin: watermarks of %s/%d: %s\n", o->topic, p,
                    rd_kafka_err2str(err));
            free(po);
            po = NULL;
        }
    }
    rd_kafka_topic_partition_list_destroy(list);
    *out = po;
    return po ? partitions : -1;
}

static int64_t lag_of(const struct partition_offsets *p)
{
    int64_t from = p->committed >= 0 ? p->committed : p->low;
    return p->high - from;
}

static int show_offsets(const struct options *o)
{
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER);
    struct partition_offsets *po;
    if (!rk)
        return 1;
    int n = read_offsets(rk, o, &po);
    rd_kafka_destroy(rk);
    if (n < 0)
        return 1;
    int64_t total = 0;
    printf("%-24s %9s %12s %12s %12s %10s\n", "topic", "partition", "committed", "low", "high",
           "lag");
    for (int p = 0; p < n; p++) {
        char committed[32];
        if (po[p].committed >= 0)
            snprintf(committed, sizeof(committed), "%lld", (long long)po[p].committed);
        else
            snprintf(committed, sizeof(committed), "-");
        printf("%-24s %9d %12s %12lld %12lld %10lld\n", o->topic, p, committed,
               (long long)po[p].low, (long long)po[p].high, (long long)lag_of(&po[p]));
        total += lag_of(&po[p]);
    }
    printf("total lag %lld\n", (long long)total);
    free(po);
    return 0;
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for lag 0. Also times the drain as seen from outside: from the first
 * poll at which the group's committed total had moved to the poll at which
 * it reached the end (the benchmark's drain rate). */
static int wait_caught_up(const struct options *o)
{
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER);
    double deadline = monotonic_s() + o->timeout_s, moved_at = 0;
    int64_t lag = -1, initial = -1, moved_from = 0;
    if (!rk)
        return 1;
    while (monotonic_s() <= deadline) {
        struct partition_offsets *po;
        int n = read_offsets(rk, o, &po);
        if (n > 0) {
            int64_t committed = 0;
            lag = 0;
            for (int p = 0; p < n; p++) {
                lag += po[p].committed >= 0 || po[p].high > po[p].low ? lag_of(&po[p]) : 0;
                committed += po[p].committed >= 0 ? po[p].committed - po[p].low : 0;
            }
            free(po);
            double now = monotonic_s();
            if (initial < 0)
                initial = committed;
            else if (!moved_at && committed != initial) {
                moved_at = now;
                moved_from = committed;
            }
            if (lag == 0) {
                printf("group %s has committed the end of every partition of %s\n", o->group,
                       o->topic);
                if (moved_at)
                    printf("drain events=%lld seconds=%.3f\n", (long long)(committed - moved_from),
                           now - moved_at);
                rd_kafka_destroy(rk);
                return 0;
            }
        }
        usleep(100000);
    }
    fprintf(stderr, "lbadmin: group %s still lags %lld events on %s after %d s\n", o->group,
            (long long)lag, o->topic, o->timeout_s);
    rd_kafka_destroy(rk);
    return 1;
}

/* Assigns every partition of o->topic from its low watermark; stores each
 * partition's high watermark in '*high' (owned by the caller) and the
 * number of records up to them in '*left'. Returns 0 or 1 (failure). */
static int assign_whole_topic(rd_kafka_t *rk, const struct options *o, int64_t **high,
                              int64_t *left)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *topic = rd_kafka_topic_new(rk, o->topic, NULL);
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, topic, &md, 10000);
    rd_kafka_topic_destroy(topic);
    if (e || md->topics[0].err) {
        fprintf(stderr, "lbadmin: topic %s: %s\n", o->topic,
                rd_kafka_err2str(e ? e : md->topics[0].err));
        if (!e)
            rd_kafka_metadata_destroy(md);
        return 1;
    }
    int n = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n ? n : 1);
    *high = calloc((size_t)n + 1, sizeof(**high));
    *left = 0;
    for (int p = 0; *high && p < n; p++) {
        int64_t low;
        if (rd_kafka_query_watermark_offsets(rk, o->topic, p, &low, &(*high)[p], 10000) != 0)
            (*high)[p] = low = 0;
        rd_kafka_topic_partition_list_add(list, o->topic, p)->offset = low;
        *left += (*high)[p] - low;
    }
    e = *high ? rd_kafka_assign(rk, list) : RD_KAFKA_RESP_ERR__FAIL;
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
        fprintf(stderr, "lbadmin: reading %s: %s\n", o->topic, rd_kafka_err2str(e));
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

static int dump(const struct options *o)
{
    rd_kafka_t *rk = make_client(o, RD_KAFKA_CONSUMER);
    if (!rk)
        return 1;
    int64_t *high = NULL, left = 0;
    if (assign_whole_topic(rk, o, &high, &left) != 0) {
        free(high);
        rd_kafka_destroy(rk);
        return 1;
    }
    double deadline = monotonic_s() + o->timeout_s;
    while (left > 0 && monotonic_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err && m->offset < high[m->partition]) {
            left--;
            printf("%d %lld key=", m->partition, (long long)m->offset);
            print_escaped(m->key ? m->key : "", m->key_len);
            printf(" bytes=%zu", m->len);
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
        fprintf(stderr, "lbadmin: %lld record(s) of %s not read within %d s\n", (long long)left,
                o->topic, o->timeout_s);
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
    rd_kafka_t *consumer = make_client(o, RD_KAFKA_CONSUMER);
    rd_kafka_t *producer = make_client(o, RD_KAFKA_PRODUCER);
    if (!consumer || !producer) {
        if (consumer)
            rd_kafka_destroy(consumer);
        if (producer)
            rd_kafka_destroy(producer);
        return 1;
    }
    int64_t *high = NULL, left = 0, sent = 0, skipped = 0, by_reference = 0;
    if (assign_whole_topic(consumer, o, &high, &left) != 0) {
        free(high);
        rd_kafka_destroy(consumer);
        rd_kafka_destroy(producer);
        return 1;
    }
    double deadline = monotonic_s() + o->timeout_s;
    int status = 0;
    while (left > 0 && monotonic_s() < deadline && status == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 200);
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
    if (rd_kafka_flush(producer, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "lbadmin: %d record(s) not acknowledged\n", rd_kafka_outq_len(producer));
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
           "%lld refused (dead-lettered by reference)\n",
           (long long)sent, (long long)skipped, (long long)by_reference);
    return by_reference ? 1 : status;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: lbadmin create-topic   --topic T [--partitions N] [--config K=V]...\n"
                 "                              [--brokers B]\n"
                 "       lbadmin offsets        --topic T --group G [--brokers B]\n"
                 "       lbadmin wait-caught-up --topic T --group G [--timeout S] [--brokers B]\n"
                 "       lbadmin dump           --topic T [--timeout S] [--brokers B]\n"
                 "       lbadmin redrive        --topic DLQ [--reason R] [--brokers B]\n"
                 "\n"
                 "  -b, --brokers LIST   bootstrap servers (default 127.0.0.1:9092)\n"
                 "  -t, --topic NAME     topic\n"
                 "  -g, --group ID       consumer group\n"
                 "  -p, --partitions N   partitions of a new topic (default 6)\n"
                 "      --config K=V     a topic property of a new topic, e.g.\n"
                 "                       max.message.bytes=16777216; repeatable\n"
                 "      --timeout S      seconds to wait (default 60)\n"
                 "      --reason R       redrive: only records with lb.reason R\n"
                 "  -X key=value         librdkafka property\n"
                 "\n"
                 "Example:\n"
                 "  lbadmin offsets --topic scores --group leaderboard-projector\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"brokers", required_argument, NULL, 'b'},
                                             {"topic", required_argument, NULL, 't'},
                                             {"group", required_argument, NULL, 'g'},
                                             {"partitions", required_argument, NULL, 'p'},
                                             {"timeout", required_argument, NULL, 'T'},
                                             {"reason", required_argument, NULL, 'R'},
                                             {"config", required_argument, NULL, 'C'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct options o = {.brokers = "127.0.0.1:9092", .partitions = 6, .timeout_s = 60};
    int opt;

    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *command = argv[1];
    optind = 2;
    while ((opt = getopt_long(argc, argv, "b:t:g:p:X:h", longopts, NULL)) != -1) {
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
            o.partitions = atoi(optarg);
            break;
        case 'T':
            o.timeout_s = atoi(optarg);
            break;
        case 'R':
            o.reason = optarg;
            break;
        case 'X':
            if (o.nprops == 32 || lb_kafka_property_arg(optarg, &o.props[o.nprops]) != 0) {
                fprintf(stderr, "lbadmin: -X %s: %s\n", optarg,
                        o.nprops == 32 ? "at most 32 properties" : "expected key=value");
                return 2;
            }
            o.nprops++;
            break;
        case 'C':
            if (o.ntopic_configs < 16)
                o.topic_configs[o.ntopic_configs++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!o.topic || optind != argc || o.partitions < 1 || o.timeout_s < 1) {
        usage(stderr);
        return 2;
    }
    if (strcmp(command, "create-topic") == 0)
        return create_topic(&o);
    if (strcmp(command, "redrive") == 0) {
        o.group = "lbadmin-redrive"; /* needed by the consumer; nothing is committed */
        return redrive(&o);
    }
    if (strcmp(command, "dump") == 0) {
        o.group = "lbadmin-dump"; /* needed by the consumer; nothing is committed */
        return dump(&o);
    }
    if (!o.group) {
        fprintf(stderr, "lbadmin: %s needs --group\n", command);
        return 2;
    }
    if (strcmp(command, "offsets") == 0)
        return show_offsets(&o);
    if (strcmp(command, "wait-caught-up") == 0)
        return wait_caught_up(&o);
    fprintf(stderr, "lbadmin: unknown command '%s'\n", command);
    usage(stderr);
    return 2;
}
