/* loadgen: produces deterministic, valid score events to Kafka.
 *
 * The same seed and flags always produce the same events in the same order
 * (see eventgen.h): the demo, the integration tests and the benchmark all
 * rely on that, and the tests use --dry-run to get the event list without
 * Kafka.
 *
 * Every wait on the brokers (and the schema registry) ends after --timeout
 * seconds without an answer, saying so in one line.
 *
 * stdout: the events (--dry-run) as TSV; stderr: progress and errors.
 * Exit status (README, "Exit codes"): 0 ok, 1 failure, 2 usage.
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "usage.h"
#include "config.h" /* lb_time_parse */
#include "kafka.h"
#include "eventgen.h"

struct options {
    const char *brokers;
    const char *topic;
    uint64_t count;
    double rate; /* events per second; 0: as fast as possible */
    int dry_run;
    const char *events_out;
    const char *deliveries_out;
    int32_t partition;   /* --partition; RD_KAFKA_PARTITION_UA: by key */
    uint64_t huge_every; /* every Nth event is a huge record (--huge-bytes) */
    size_t huge_bytes;
    const char *registry;   /* register the writer schemas there (--registry) */
    int evolve;             /* writers v1, v2, v3 in turn (--evolve) */
    int timeout_s;          /* a wait on the brokers or the registry ends by then */
    struct lb_kv props[64]; /* -X key=value */
    int nprops;
    struct gen_options gen;
};

/* ---- the schema registry ------------------------------------------------------ */

static size_t collect_body(char *data, size_t size, size_t n, void *ctx)
{
    char **body = ctx;
    size_t old = *body ? strlen(*body) : 0, bytes = size * n;
    char *grown = realloc(*body, old + bytes + 1);
    if (!grown)
        return 0;
    memcpy(grown + old, data, bytes);
    grown[old + bytes] = '\0';
    *body = grown;
    return bytes;
}

/* Registers 'schema' under 'subject' (POST /subjects/<s>/versions), as a
 * producer's serializer does, and stores the id the registry gives it.
 * Returns 0, or -1 after saying why. */
static int register_schema(const char *url, const char *subject, const char *schema, int timeout_s,
                           int32_t *id)
{
    char endpoint[2048], *body = NULL, errbuf[CURL_ERROR_SIZE] = "";
    json_t *request = json_pack("{s:s}", "schema", schema);
    char *text = request ? json_dumps(request, JSON_COMPACT) : NULL;
    CURL *c = curl_easy_init();
    struct curl_slist *headers =
        curl_slist_append(NULL, "Content-Type: application/vnd.schemaregistry.v1+json");
    long status = 0;
    int rc = -1;
    json_decref(request);
    snprintf(endpoint, sizeof(endpoint), "%s/subjects/%s/versions", url, subject);
    if (!text || !c || !headers) {
        fprintf(stderr, "loadgen: out of memory\n");
        goto done;
    }
    curl_easy_setopt(c, CURLOPT_URL, endpoint);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)timeout_s);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    json_t *answer = body ? json_loads(body, 0, NULL) : NULL;
    json_int_t got = 0;
    if (cc != CURLE_OK)
        fprintf(stderr, "loadgen: registering with %s: %s\n", endpoint,
                *errbuf ? errbuf : curl_easy_strerror(cc));
    else if (status != 200 || !answer || json_unpack(answer, "{s:I}", "id", &got) != 0 || got < 0 ||
             got > INT32_MAX)
        fprintf(stderr, "loadgen: registering with %s: HTTP %ld %s\n", endpoint, status,
                body ? body : "");
    else {
        *id = (int32_t)got;
        rc = 0;
    }
    json_decref(answer);
done:
    free(text);
    free(body);
    curl_slist_free_all(headers);
    if (c)
        curl_easy_cleanup(c);
    return rc;
}

/* --registry: the writers' ids, from the registry (subject <topic>-value,
 * the TopicNameStrategy). */
static int register_writers(struct options *o)
{
    char subject[512];
    int n = o->evolve ? 3 : 1;
    snprintf(subject, sizeof(subject), "%s-value", o->topic);
    for (int w = 0; w < n; w++) {
        int32_t id;
        if (register_schema(o->registry, subject, gen_writer_schemas[w], o->timeout_s, &id) != 0)
            return -1;
        if (o->evolve)
            o->gen.evolve_ids[w] = id;
        else
            o->gen.schema_id = id;
        fprintf(stderr, "loadgen: writer v%d is schema id %d under %s\n", w + 1, (int)id, subject);
    }
    return 0;
}

/* --schema-ids A,B,C: the three writers' ids without a registry. */
static int parse_ids(const char *text, int32_t ids[3])
{
    char tail;
    int a, b, c;
    if (sscanf(text, "%d,%d,%d%c", &a, &b, &c, &tail) != 3 || a < 0 || b < 0 || c < 0)
        return -1;
    ids[0] = a;
    ids[1] = b;
    ids[2] = c;
    return 0;
}

/* ---- producing --------------------------------------------------------------- */

static uint64_t delivered, failed;
static double last_ack; /* when the brokers last answered, or the queue was last empty */
static int giving_up;   /* purging what is left: its failures are not news */
static volatile sig_atomic_t stopping; /* SIGTERM or SIGINT: produce no more */
static FILE *deliveries;               /* --deliveries-out */

static void on_stop_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void delivery_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    (void)rk;
    (void)opaque;
    last_ack = now_s();
    if (msg->err) {
        if (failed++ < 5 && !giving_up)
            fprintf(stderr, "loadgen: delivery failed: %s\n", rd_kafka_err2str(msg->err));
    } else {
        delivered++;
        if (deliveries && msg->_private)
            fprintf(deliveries, "%d\t%lld\t%s\n", msg->partition, (long long)msg->offset,
                    (const char *)msg->_private);
    }
    free(msg->_private);
}

static void producer_callbacks(rd_kafka_conf_t *conf, void *ctx)
{
    (void)ctx;
    rd_kafka_conf_set_dr_msg_cb(conf, delivery_cb);
}

/* The producer, or NULL after saying why; '*status' is 2 when -X is to
 * blame, 1 otherwise. */
static rd_kafka_t *make_producer(const struct options *o, int *status)
{
    char err[512];
    static const char *const defaults[][2] = {
        {"linger.ms", "5"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.messages", "500000"},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        /* errors only: a fresh broker's "coordinator load in progress" is noise */
        {"log_level", "3"}};
    struct lb_kafka_options options = {
        .brokers = o->brokers, .props = o->props, .nprops = (size_t)o->nprops};
    struct lb_kafka_client client = {.type = RD_KAFKA_PRODUCER,
                                     .defaults = defaults,
                                     .ndefaults = sizeof(defaults) / sizeof(defaults[0]),
                                     .setup = producer_callbacks};
    enum lb_error_class class;
    rd_kafka_t *rk = lb_kafka_new(&options, &client, err, sizeof(err), &class);
    if (!rk) {
        fprintf(stderr, "loadgen: %s%s\n", class == LB_ERROR_CONFIG ? "-X: " : "", err);
        *status = class == LB_ERROR_CONFIG ? 2 : 1;
    }
    return rk;
}

/* Says that the brokers did not answer within --timeout, with the reason
 * of an authentication or TLS failure if there was one. */
static void say_unreachable(rd_kafka_t *rk, const struct options *o, const char *why)
{
    char buf[512];
    const char *auth = lb_kafka_auth_trouble(rk, buf, sizeof(buf));
    fprintf(stderr,
            "loadgen: cannot reach the Kafka brokers %s within %d s (%s); check --brokers, -X "
            "and that Kafka runs\n",
            o->brokers, o->timeout_s, auth ? auth : why);
}

/* Waits at most --timeout for a broker to answer. 0, or -1 (said). */
static int reach_brokers(rd_kafka_t *rk, const struct options *o)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, o->timeout_s * 1000);
    if (e) {
        say_unreachable(rk, o, rd_kafka_err2str(e));
        return -1;
    }
    rd_kafka_metadata_destroy(md);
    last_ack = now_s();
    return 0;
}

/* Whether events have waited for the brokers longer than --timeout: no
 * delivery report since the queue last had nothing in it. */
static int stalled(rd_kafka_t *rk, const struct options *o)
{
    if (rd_kafka_outq_len(rk) == 0)
        last_ack = now_s();
    if (now_s() - last_ack <= o->timeout_s)
        return 0;
    /* the brokers answered (reach_brokers): the topic, a leader or the
     * brokers themselves since then */
    fprintf(stderr,
            "loadgen: the Kafka brokers %s acknowledged no event of topic %s for %d s (does the "
            "topic exist? are the brokers still up?); %d event(s) not delivered\n",
            o->brokers, o->topic, o->timeout_s, rd_kafka_outq_len(rk));
    return 1;
}

static int produce_all(const struct options *o, const struct generator *gen, rd_kafka_t *rk,
                       FILE *log)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
    uint8_t buf[1024];
    double start = now_s(), last_report = start;
    int status = 0;

    uint64_t produced = 0;
    for (uint64_t i = 0; i < o->count && status == 0 && !stopping; i++) {
        struct gen_event ev;
        gen_event(gen, i, &ev);
        size_t len = gen_encode(gen, &ev, buf);
        uint8_t *payload = buf;
        char *huge_player = NULL;
        const char *key = ev.player;
        size_t key_len = strlen(ev.player);
        if (o->huge_every && i % o->huge_every == o->huge_every - 1) {
            /* the projector rejects it as invalid_player; too large for most
             * dead-letter topics */
            ev.poison = GEN_POISON_INVALID_PLAYER;
            ev.player[0] = '\0';
            if (!(payload = gen_encode_huge(gen, &ev, o->huge_bytes, &len, &huge_player))) {
                fprintf(stderr, "loadgen: out of memory\n");
                status = -1;
                break;
            }
            key = huge_player;
            key_len = o->huge_bytes;
        }
        char *where = NULL; /* "event_id board", for --deliveries-out */
        if (deliveries) {
            size_t n = strlen(ev.event_id) + strlen(ev.board) + 2;
            if ((where = malloc(n)))
                snprintf(where, n, "%s\t%s", ev.event_id, ev.board);
        }
        if (rd_kafka_outq_len(rk) == 0)
            last_ack = now_s(); /* nothing was waiting: the wait starts now */
        while (rd_kafka_produce(rkt, o->partition, RD_KAFKA_MSG_F_COPY, payload, len, key, key_len,
                                where) != 0) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "loadgen: produce failed: %s\n",
                        rd_kafka_err2str(rd_kafka_last_error()));
                status = -1;
            }
            rd_kafka_poll(rk, 10);
            if (status == 0 && stalled(rk, o))
                status = -1;
            if (status != 0) {
                free(where);
                break;
            }
        }
        if (huge_player) {
            free(payload);
            free(huge_player);
        }
        if (status != 0)
            break;
        produced++;
        if (log)
            gen_print(log, &ev);
        rd_kafka_poll(rk, 0);
        if (stalled(rk, o)) {
            status = -1;
            break;
        }
        if (o->rate > 0 && i == 0) {
            /* the pace starts once the first event is acknowledged: what a
             * producer queues while it connects would otherwise arrive as
             * one burst */
            rd_kafka_flush(rk, o->timeout_s * 1000);
            start = now_s();
        }
        if (o->rate > 0) {
            double due = start + (double)(i + 1) / o->rate;
            double wait = due - now_s();
            if (wait > 0.0005)
                usleep((useconds_t)(wait * 1e6));
        }
        if (now_s() - last_report >= 5) {
            last_report = now_s();
            fprintf(stderr, "loadgen: %llu/%llu events produced (%.0f/s)\n",
                    (unsigned long long)(i + 1), (unsigned long long)o->count,
                    (double)(i + 1) / (last_report - start));
        }
    }
    rd_kafka_topic_destroy(rkt);
    /* every event acknowledged, or none for --timeout */
    while (status == 0 && rd_kafka_outq_len(rk) > 0) {
        rd_kafka_flush(rk, 100);
        if (stalled(rk, o))
            status = -1;
    }
    if (status != 0) {
        /* what is left fails now: its delivery reports free what they hold */
        giving_up = 1;
        rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(rk, 0);
    }
    double took = now_s() - start;
    if (stopping)
        fprintf(stderr, "loadgen: stopped by a signal after %llu of %llu events\n",
                (unsigned long long)produced, (unsigned long long)o->count);
    fprintf(stderr, "loadgen: %llu events delivered, %llu failed, in %.2f s (%.0f/s), cpu %.2f s\n",
            (unsigned long long)delivered, (unsigned long long)failed, took,
            took > 0 ? (double)delivered / took : 0.0, (double)clock() / CLOCKS_PER_SEC);
    return status != 0 || failed || delivered != produced ? -1 : 0;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: loadgen [options]\n"
                 "\n"
                 "Produces deterministic score events (Avro, Confluent framing by default).\n"
                 "\n"
                 "  -b, --brokers LIST      bootstrap servers (default 127.0.0.1:9092)\n"
                 "  -t, --topic NAME        topic (default scores)\n"
                 "  -n, --count N           number of events (default 10000)\n"
                 "  -s, --seed N            seed (default 1)\n"
                 "      --boards N          number of boards (default 10)\n"
                 "      --board-prefix S    board id prefix (default g); \"a-,b-\" alternates\n"
                 "      --players N         number of players (default 1000)\n"
                 "      --zipf S            Zipf exponent of player activity (default 1.1)\n"
                 "      --score-max N       scores are uniform in [0, N] (default 100000)\n"
                 "      --start TIME        first event time, RFC 3339 (default: DAYS days\n"
                 "                          before now, so every event time is in the past)\n"
                 "      --days N            event times spread over N days (default 1)\n"
                 "      --hours N           event times spread over N hours (instead of days)\n"
                 "      --ts-now            event time = the wall clock when produced (for\n"
                 "                          freshness measurements; not deterministic)\n"
                 "  -r, --rate N            events per second, paced from the first event's\n"
                 "                          acknowledgement (default: as fast as possible)\n"
                 "      --dim NAME          add dims {NAME: vK}, K uniform in [0, --dim-values)\n"
                 "      --dim-values N      (default 3)\n"
                 "      --dim-list A,B,...  the dim's values: one of these, uniform (instead\n"
                 "                          of vK)\n"
                 "      --retract-every N   make every Nth event a RETRACT (default never)\n"
                 "      --retry-every N     make every Nth record a producer's retry of one of\n"
                 "                          the 200 events before it (same event_id and key;\n"
                 "                          every third with another score: a conflict)\n"
                 "      --poison-every N    make every Nth event one the projector must\n"
                 "                          dead-letter, each kind in turn (default never)\n"
                 "      --bare              bare Avro instead of the Confluent framing\n"
                 "      --schema-id N       Confluent schema id (default 1)\n"
                 "      --registry URL      register the writer schema (or, with --evolve, the\n"
                 "                          three) in the schema registry at URL under the\n"
                 "                          subject <topic>-value and produce with its ids\n"
                 "      --evolve            schema evolution: event i is written by writer v1,\n"
                 "                          v2 (an optional field more) or v3 (no dims) in\n"
                 "                          turn; their ids from --registry or --schema-ids\n"
                 "      --schema-ids A,B,C  the ids of v1, v2 and v3 without a registry\n"
                 "      --events-out FILE   also write every produced event to FILE as TSV\n"
                 "      --huge-every N      make every Nth event a record of --huge-bytes\n"
                 "                          (its player id, also its key, that long): one\n"
                 "                          the projector dead-letters as invalid_player\n"
                 "      --huge-bytes N      (default 10485760)\n"
                 "      --deliveries-out FILE  write where each event landed, as delivered:\n"
                 "                          partition offset event_id board (TSV)\n"
                 "      --partition N       produce every event to partition N (default: the\n"
                 "                          partitioner's choice by key), e.g. to leave\n"
                 "                          another partition idle\n"
                 "      --dry-run           print the events as TSV to stdout; no Kafka\n"
                 "      --timeout S         give up when the brokers (or the registry) answer\n"
                 "                          nothing for S seconds (default 10)\n"
                 "  -X key=value            librdkafka producer property\n"
                 "  -h, --help              show this help\n"
                 "\n"
                 "TSV columns: event_id board player score ts_ms op dim_value\n"
                 "\n"
                 "SIGTERM or SIGINT stops it early: no more events are produced, those\n"
                 "produced are delivered (and written by --events-out and --deliveries-out).\n"
                 "\n"
                 "Exit status: 0 every event produced was delivered; 1 failure (the brokers\n"
                 "not reached or silent for --timeout, a delivery failed, the registry\n"
                 "refused); 2 usage error (a bad command line, including a -X librdkafka\n"
                 "refuses).\n"
                 "\n"
                 "Example:\n"
                 "  loadgen -n 100000 --boards 20 --players 5000 --days 30 --rate 20000\n");
}

/* The name of option 'opt' as typed in full, for messages. */
static const char *option_name(const struct option *longopts, int opt)
{
    static char name[64];
    for (; longopts->name; longopts++)
        if (longopts->val == opt) {
            snprintf(name, sizeof(name), "--%s", longopts->name);
            return name;
        }
    snprintf(name, sizeof(name), "-%c", opt);
    return name;
}

int main(int argc, char **argv)
{
    lb_usage_program = "loadgen";
    enum {
        O_BOARDS = 256,
        O_PLAYERS,
        O_ZIPF,
        O_SCORE_MAX,
        O_START,
        O_DAYS,
        O_HOURS,
        O_BARE,
        O_SCHEMA_ID,
        O_EVENTS_OUT,
        O_DRY_RUN,
        O_BOARD_PREFIX,
        O_DIM,
        O_DIM_VALUES,
        O_DIM_LIST,
        O_RETRACT,
        O_RETRY,
        O_POISON,
        O_TS_NOW,
        O_DELIVERIES_OUT,
        O_PARTITION,
        O_HUGE_EVERY,
        O_HUGE_BYTES,
        O_REGISTRY,
        O_EVOLVE,
        O_SCHEMA_IDS,
        O_TIMEOUT
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, 'b'},
        {"topic", required_argument, NULL, 't'},
        {"count", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"rate", required_argument, NULL, 'r'},
        {"boards", required_argument, NULL, O_BOARDS},
        {"players", required_argument, NULL, O_PLAYERS},
        {"zipf", required_argument, NULL, O_ZIPF},
        {"score-max", required_argument, NULL, O_SCORE_MAX},
        {"start", required_argument, NULL, O_START},
        {"days", required_argument, NULL, O_DAYS},
        {"hours", required_argument, NULL, O_HOURS},
        {"bare", no_argument, NULL, O_BARE},
        {"schema-id", required_argument, NULL, O_SCHEMA_ID},
        {"events-out", required_argument, NULL, O_EVENTS_OUT},
        {"dry-run", no_argument, NULL, O_DRY_RUN},
        {"board-prefix", required_argument, NULL, O_BOARD_PREFIX},
        {"dim", required_argument, NULL, O_DIM},
        {"dim-values", required_argument, NULL, O_DIM_VALUES},
        {"dim-list", required_argument, NULL, O_DIM_LIST},
        {"retract-every", required_argument, NULL, O_RETRACT},
        {"retry-every", required_argument, NULL, O_RETRY},
        {"poison-every", required_argument, NULL, O_POISON},
        {"ts-now", no_argument, NULL, O_TS_NOW},
        {"deliveries-out", required_argument, NULL, O_DELIVERIES_OUT},
        {"partition", required_argument, NULL, O_PARTITION},
        {"huge-every", required_argument, NULL, O_HUGE_EVERY},
        {"huge-bytes", required_argument, NULL, O_HUGE_BYTES},
        {"registry", required_argument, NULL, O_REGISTRY},
        {"evolve", no_argument, NULL, O_EVOLVE},
        {"schema-ids", required_argument, NULL, O_SCHEMA_IDS},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    struct options o = {.brokers = "127.0.0.1:9092",
                        .topic = "scores",
                        .count = 10000,
                        .huge_bytes = 10485760,
                        .timeout_s = 10,
                        .gen = {.seed = 1,
                                .boards = 10,
                                .players = 1000,
                                .zipf = 1.1,
                                .score_max = 100000,
                                .days = 1,
                                .schema_id = 1,
                                .board_prefix = "g",
                                .dim_values = 3,
                                .start_ms = -1},
                        .partition = RD_KAFKA_PARTITION_UA};
    int opt, have_ids = 0;

#define NUMBER(dst, min, max)                                                                      \
    do {                                                                                           \
        double v_;                                                                                 \
        if (lb_usage_number(optarg, (min), (max), 0, &v_) != 0)                                    \
            return lb_usage_error("%s wants a number from %.15g to %.15g, not '%s'",               \
                                  option_name(longopts, opt), (double)(min), (double)(max),        \
                                  optarg);                                                         \
        (dst) = v_;                                                                                \
    } while (0)

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":b:t:n:s:r:X:h", longopts, NULL)) != -1) {
        double v;
        switch (opt) {
        case 'b':
            o.brokers = optarg;
            break;
        case 't':
            o.topic = optarg;
            break;
        case 'n':
            NUMBER(v, 0, 1e12);
            o.count = (uint64_t)v;
            break;
        case 's':
            NUMBER(v, 0, 1e15);
            o.gen.seed = (uint64_t)v;
            break;
        case 'r':
            NUMBER(o.rate, 0, 1e9);
            break;
        case O_BOARDS:
            NUMBER(v, 1, 1e7);
            o.gen.boards = (uint32_t)v;
            break;
        case O_PLAYERS:
            NUMBER(v, 1, 1e8);
            o.gen.players = (uint32_t)v;
            break;
        case O_ZIPF:
            NUMBER(o.gen.zipf, 0, 10);
            break;
        case O_SCORE_MAX:
            NUMBER(v, 0, 4e15);
            o.gen.score_max = (int64_t)v;
            break;
        case O_DAYS:
            NUMBER(v, 1, 3650);
            o.gen.days = (int)v;
            break;
        case O_HOURS:
            NUMBER(v, 1, 87600);
            o.gen.hours = (int)v;
            break;
        case O_SCHEMA_ID:
            NUMBER(v, 0, 2147483647.0);
            o.gen.schema_id = (int32_t)v;
            break;
        case O_DIM_VALUES:
            NUMBER(v, 1, 1e6);
            o.gen.dim_values = (uint32_t)v;
            break;
        case O_RETRACT:
            NUMBER(v, 0, 1e9);
            o.gen.retract_every = (int)v;
            break;
        case O_RETRY:
            NUMBER(v, 0, 1e9);
            o.gen.retry_every = (int)v;
            break;
        case O_POISON:
            NUMBER(v, 0, 1e9);
            o.gen.poison_every = (int)v;
            break;
        case O_HUGE_EVERY:
            NUMBER(v, 0, 1e12);
            o.huge_every = (uint64_t)v;
            break;
        case O_HUGE_BYTES:
            NUMBER(v, 1, 1e9);
            o.huge_bytes = (size_t)v;
            break;
        case O_TIMEOUT:
            NUMBER(v, 1, 86400);
            o.timeout_s = (int)v;
            break;
        case O_START:
            if (lb_time_parse(optarg, &o.gen.start_ms) != 0)
                return lb_usage_error("--start wants an RFC 3339 time like 2026-05-04T00:00:00Z, "
                                      "not '%s'",
                                      optarg);
            break;
        case O_BARE:
            o.gen.bare = 1;
            break;
        case O_TS_NOW:
            o.gen.ts_now = 1;
            break;
        case O_EVENTS_OUT:
            o.events_out = optarg;
            break;
        case O_DELIVERIES_OUT:
            o.deliveries_out = optarg;
            break;
        case O_PARTITION:
            NUMBER(v, 0, 1e6);
            o.partition = (int32_t)v;
            break;
        case O_DRY_RUN:
            o.dry_run = 1;
            break;
        case O_REGISTRY:
            o.registry = optarg;
            break;
        case O_EVOLVE:
            o.evolve = 1;
            break;
        case O_SCHEMA_IDS:
            have_ids = 1;
            if (parse_ids(optarg, o.gen.evolve_ids) != 0)
                return lb_usage_error("--schema-ids wants three ids like 1,2,3, not '%s'", optarg);
            break;
        case O_BOARD_PREFIX:
            o.gen.board_prefix = optarg;
            break;
        case O_DIM:
            o.gen.dim_name = optarg;
            break;
        case O_DIM_LIST:
            if (!*optarg || strstr(optarg, ",,") || optarg[strlen(optarg) - 1] == ',' ||
                optarg[0] == ',' || strlen(optarg) > 1000)
                return lb_usage_error("--dim-list wants values like 1.9,1.10, not '%s'", optarg);
            o.gen.dim_list = optarg;
            break;
        case 'X':
            if (o.nprops == 64)
                return lb_usage_error("-X %s: at most 64 properties", optarg);
            if (lb_kafka_property_arg(optarg, &o.props[o.nprops]) != 0)
                return lb_usage_error("-X wants key=value, not '%s'", optarg);
            o.nprops++;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return lb_bad_option(opt, argv);
        }
    }
#undef NUMBER
    if (optind != argc)
        return lb_usage_error("unexpected argument '%s'", argv[optind]);
    if (o.evolve && !o.registry && !have_ids)
        return lb_usage_error("--evolve needs --registry URL or --schema-ids A,B,C");
    if (o.registry && (o.gen.bare || o.dry_run))
        return lb_usage_error("--registry is for Confluent-framed records sent to Kafka, not with "
                              "%s",
                              o.gen.bare ? "--bare" : "--dry-run");
    /* librdkafka's errors are logged at info: this tool says what failed */
    lb_kafka_log_quiet = 1;
    int status = 0;
    rd_kafka_t *rk = NULL; /* made first: a -X it refuses is a usage error */
    if (!o.dry_run && !(rk = make_producer(&o, &status)))
        return status;
    if (o.registry && register_writers(&o) != 0) {
        rd_kafka_destroy(rk);
        return 1;
    }
    o.gen.evolve = o.evolve;
    /* the last DAYS days (or HOURS hours), up to the second before now:
     * events are drawn from [start, start + the span), so none is in the
     * future */
    if (o.gen.start_ms < 0)
        o.gen.start_ms = ((int64_t)time(NULL) - (o.gen.hours ? (int64_t)o.gen.hours * 3600
                                                             : (int64_t)o.gen.days * 86400)) *
                         1000;
    struct generator *gen = gen_new(&o.gen);
    if (!gen) {
        fprintf(stderr, "loadgen: out of memory\n");
        if (rk)
            rd_kafka_destroy(rk);
        return 1;
    }
    if (o.dry_run) {
        for (uint64_t i = 0; i < o.count; i++) {
            struct gen_event ev;
            gen_event(gen, i, &ev);
            gen_print(stdout, &ev);
        }
    } else {
        FILE *log = o.events_out ? fopen(o.events_out, "w") : NULL;
        deliveries = o.deliveries_out ? fopen(o.deliveries_out, "w") : NULL;
        /* line by line: tests read both while events are still produced */
        if (log)
            setvbuf(log, NULL, _IOLBF, 0);
        if (deliveries)
            setvbuf(deliveries, NULL, _IOLBF, 0);
        if ((o.events_out && !log) || (o.deliveries_out && !deliveries)) {
            fprintf(stderr, "loadgen: cannot write %s: %s\n",
                    o.events_out && !log ? o.events_out : o.deliveries_out, strerror(errno));
            status = 1;
        } else {
            struct sigaction sa = {.sa_handler = on_stop_signal};
            sigemptyset(&sa.sa_mask);
            sigaction(SIGTERM, &sa, NULL);
            sigaction(SIGINT, &sa, NULL);
            status = reach_brokers(rk, &o) == 0 && produce_all(&o, gen, rk, log) == 0 ? 0 : 1;
        }
        rd_kafka_destroy(rk);
        if (log && fclose(log) != 0)
            status = 1;
        if (deliveries && fclose(deliveries) != 0)
            status = 1;
    }
    gen_free(gen);
    return status;
}
