/* loadgen: produces deterministic, valid score events to Kafka.
 *
 * The same seed and flags always produce the same events in the same order:
 * the demo, the integration tests and the benchmark all rely on that, and the
 * tests use --dry-run to get the event list without Kafka. Players follow a
 * Zipf distribution (a few hot players post most scores, as on real boards);
 * boards are uniform; event times are spread uniformly over --days days from
 * --start; scores are uniform in [0, --score-max].
 *
 * The Avro encoding here is written by hand from schemas/score_event.avsc and
 * shares no code with the projector's decoder, so the tests exercise the
 * decoder against an independent encoder.
 *
 * stdout: the events (--dry-run) as TSV; stderr: progress and errors.
 */
#include <errno.h>
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h" /* lb_time_parse */

struct options {
    const char *brokers;
    const char *topic;
    uint64_t seed;
    uint64_t count;
    uint32_t boards;
    uint32_t players;
    double zipf;
    int64_t score_max;
    int64_t start_ms;
    int days;
    double rate; /* events per second; 0: as fast as possible */
    int bare;    /* bare Avro instead of the Confluent framing */
    int32_t schema_id;
    const char *board_prefix;
    const char *dim_name; /* optional: add dims {name: value} */
    uint32_t dim_values;
    int dry_run;
    const char *events_out;
    int retract_every; /* every Nth event is a RETRACT of an earlier submission's player */
};

/* ---- deterministic randomness ----------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state)
{
    return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Cumulative Zipf weights 1/k^s over ranks 1..n, normalised to 1. */
static double *zipf_table(uint32_t n, double s)
{
    double *cdf = malloc(n * sizeof(*cdf));
    double total = 0;
    if (!cdf)
        return NULL;
    for (uint32_t k = 0; k < n; k++) {
        total += 1.0 / pow((double)(k + 1), s);
        cdf[k] = total;
    }
    for (uint32_t k = 0; k < n; k++)
        cdf[k] /= total;
    return cdf;
}

static uint32_t zipf_draw(const double *cdf, uint32_t n, double u)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- events and their Avro encoding ---------------------------------------- */

struct event {
    char event_id[48];
    char board[64];
    char player[32];
    int64_t score;
    int64_t ts_ms;
    int op; /* 0 SUBMIT, 1 RETRACT */
    char dim_value[32];
};

static void generate(const struct options *o, const double *cdf, uint64_t index, struct event *ev)
{
    /* One stream per event: event i does not depend on how many draws earlier
     * events took, so flags that change one field leave the others alone. */
    uint64_t state = o->seed * UINT64_C(0x100000001b3) ^ (index + 1) * UINT64_C(0x9e3779b97f4a7c15);
    uint32_t board = (uint32_t)(splitmix64(&state) % o->boards);
    uint32_t player = zipf_draw(cdf, o->players, uniform01(&state));
    int64_t span_ms = (int64_t)o->days * 86400000;

    snprintf(ev->event_id, sizeof(ev->event_id), "e%llu-%llu", (unsigned long long)o->seed,
             (unsigned long long)index);
    snprintf(ev->board, sizeof(ev->board), "%s%u", o->board_prefix, board);
    snprintf(ev->player, sizeof(ev->player), "p%06u", player);
    ev->score = (int64_t)(splitmix64(&state) % (uint64_t)(o->score_max + 1));
    ev->ts_ms = o->start_ms + (int64_t)(splitmix64(&state) % (uint64_t)span_ms);
    ev->op = o->retract_every > 0 &&
             index % (uint64_t)o->retract_every == (uint64_t)o->retract_every - 1;
    ev->dim_value[0] = '\0';
    if (o->dim_name)
        snprintf(ev->dim_value, sizeof(ev->dim_value), "v%u",
                 (unsigned)(splitmix64(&state) % o->dim_values));
}

static uint8_t *put_long(uint8_t *p, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

static uint8_t *put_string(uint8_t *p, const char *s)
{
    size_t len = strlen(s);
    p = put_long(p, (int64_t)len);
    memcpy(p, s, len);
    return p + len;
}

/* Encodes 'ev' in the field order of score_event.avsc. Returns the length. */
static size_t encode(const struct options *o, const struct event *ev, uint8_t *buf)
{
    uint8_t *p = buf;
    if (!o->bare) {
        *p++ = 0;
        *p++ = (uint8_t)(o->schema_id >> 24);
        *p++ = (uint8_t)(o->schema_id >> 16);
        *p++ = (uint8_t)(o->schema_id >> 8);
        *p++ = (uint8_t)o->schema_id;
    }
    p = put_string(p, ev->event_id);
    p = put_string(p, ev->board);
    p = put_string(p, ev->player);
    p = put_long(p, ev->score);
    p = put_long(p, ev->ts_ms);
    p = put_long(p, ev->op);
    if (ev->dim_value[0]) {
        p = put_long(p, 1); /* one map block of one entry */
        p = put_string(p, o->dim_name);
        p = put_string(p, ev->dim_value);
    }
    p = put_long(p, 0); /* end of map */
    return (size_t)(p - buf);
}

static void print_event(FILE *out, const struct event *ev)
{
    fprintf(out, "%s\t%s\t%s\t%lld\t%lld\t%s\t%s\n", ev->event_id, ev->board, ev->player,
            (long long)ev->score, (long long)ev->ts_ms, ev->op ? "RETRACT" : "SUBMIT",
            ev->dim_value[0] ? ev->dim_value : "-");
}

/* ---- producing --------------------------------------------------------------- */

static uint64_t delivered, failed;

static void delivery_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (msg->err) {
        if (failed++ < 5)
            fprintf(stderr, "loadgen: delivery failed: %s\n", rd_kafka_err2str(msg->err));
    } else {
        delivered++;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static rd_kafka_t *make_producer(const struct options *o, char **props, int nprops)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *defaults[][2] = {
        {"bootstrap.servers", o->brokers},
        {"linger.ms", "5"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.messages", "500000"},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        /* errors only: a fresh broker's "coordinator load in progress" is noise */
        {"log_level", "3"}};
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
        if (rd_kafka_conf_set(conf, defaults[i][0], defaults[i][1], err, sizeof(err))) {
            fprintf(stderr, "loadgen: %s\n", err);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    for (int i = 0; i < nprops; i++) {
        char *eq = strchr(props[i], '=');
        if (!eq) {
            fprintf(stderr, "loadgen: -X expects key=value, got '%s'\n", props[i]);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
        *eq = '\0';
        if (rd_kafka_conf_set(conf, props[i], eq + 1, err, sizeof(err))) {
            fprintf(stderr, "loadgen: %s\n", err);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_conf_set_dr_msg_cb(conf, delivery_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "loadgen: %s\n", err);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

static int produce_all(const struct options *o, const double *cdf, rd_kafka_t *rk, FILE *log)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
    uint8_t buf[1024];
    double start = now_s(), last_report = start;

    for (uint64_t i = 0; i < o->count; i++) {
        struct event ev;
        generate(o, cdf, i, &ev);
        size_t len = encode(o, &ev, buf);
        while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, buf, len,
                                ev.player, strlen(ev.player), NULL) != 0) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "loadgen: produce failed: %s\n",
                        rd_kafka_err2str(rd_kafka_last_error()));
                rd_kafka_topic_destroy(rkt);
                return -1;
            }
            rd_kafka_poll(rk, 10);
        }
        if (log)
            print_event(log, &ev);
        rd_kafka_poll(rk, 0);
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
    while (rd_kafka_outq_len(rk) > 0 && rd_kafka_flush(rk, 1000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        if (now_s() - start > 600)
            break;
    double took = now_s() - start;
    fprintf(stderr, "loadgen: %llu events delivered, %llu failed, in %.2f s (%.0f/s)\n",
            (unsigned long long)delivered, (unsigned long long)failed, took,
            took > 0 ? (double)delivered / took : 0.0);
    return failed || delivered != o->count ? -1 : 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: loadgen [options]\n"
                 "\n"
                 "Produces deterministic score events (Avro, Confluent framing by default).\n"
                 "\n"
                 "  -b, --brokers LIST      bootstrap servers (default 127.0.0.1:9092)\n"
                 "  -t, --topic NAME        topic (default scores)\n"
                 "  -n, --count N           number of events (default 10000)\n"
                 "  -s, --seed N            seed (default 1)\n"
                 "      --boards N          number of boards (default 10)\n"
                 "      --board-prefix S    board id prefix (default g)\n"
                 "      --players N         number of players (default 1000)\n"
                 "      --zipf S            Zipf exponent of player activity (default 1.1)\n"
                 "      --score-max N       scores are uniform in [0, N] (default 100000)\n"
                 "      --start TIME        first event time, RFC 3339 (default: midnight UTC,\n"
                 "                          DAYS-1 days ago)\n"
                 "      --days N            event times spread over N days (default 1)\n"
                 "  -r, --rate N            events per second (default: as fast as possible)\n"
                 "      --dim NAME          add dims {NAME: vK}, K uniform in [0, --dim-values)\n"
                 "      --dim-values N      (default 3)\n"
                 "      --retract-every N   make every Nth event a RETRACT (default never)\n"
                 "      --bare              bare Avro instead of the Confluent framing\n"
                 "      --schema-id N       Confluent schema id (default 1)\n"
                 "      --events-out FILE   also write every produced event to FILE as TSV\n"
                 "      --dry-run           print the events as TSV to stdout; no Kafka\n"
                 "  -X key=value            librdkafka producer property\n"
                 "  -h, --help              show this help\n"
                 "\n"
                 "TSV columns: event_id board player score ts_ms op dim_value\n"
                 "\n"
                 "Example:\n"
                 "  loadgen -n 100000 --boards 20 --players 5000 --days 30 --rate 20000\n");
}

int main(int argc, char **argv)
{
    enum {
        O_BOARDS = 256,
        O_PLAYERS,
        O_ZIPF,
        O_SCORE_MAX,
        O_START,
        O_DAYS,
        O_BARE,
        O_SCHEMA_ID,
        O_EVENTS_OUT,
        O_DRY_RUN,
        O_BOARD_PREFIX,
        O_DIM,
        O_DIM_VALUES,
        O_RETRACT
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
        {"bare", no_argument, NULL, O_BARE},
        {"schema-id", required_argument, NULL, O_SCHEMA_ID},
        {"events-out", required_argument, NULL, O_EVENTS_OUT},
        {"dry-run", no_argument, NULL, O_DRY_RUN},
        {"board-prefix", required_argument, NULL, O_BOARD_PREFIX},
        {"dim", required_argument, NULL, O_DIM},
        {"dim-values", required_argument, NULL, O_DIM_VALUES},
        {"retract-every", required_argument, NULL, O_RETRACT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    struct options o = {.brokers = "127.0.0.1:9092",
                        .topic = "scores",
                        .seed = 1,
                        .count = 10000,
                        .boards = 10,
                        .players = 1000,
                        .zipf = 1.1,
                        .score_max = 100000,
                        .days = 1,
                        .schema_id = 1,
                        .board_prefix = "g",
                        .dim_values = 3,
                        .start_ms = -1};
    char *props[64];
    int nprops = 0, opt;
    char *end;

#define NUMBER(dst, min, max)                                                                      \
    do {                                                                                           \
        errno = 0;                                                                                 \
        double v_ = strtod(optarg, &end);                                                          \
        if (errno || *end || end == optarg || v_ < (min) || v_ > (max)) {                          \
            fprintf(stderr, "loadgen: '%s' is not a number in [%g, %g]\n", optarg, (double)(min),  \
                    (double)(max));                                                                \
            return 1;                                                                              \
        }                                                                                          \
        (dst) = v_;                                                                                \
    } while (0)

    while ((opt = getopt_long(argc, argv, "b:t:n:s:r:X:h", longopts, NULL)) != -1) {
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
            o.seed = (uint64_t)v;
            break;
        case 'r':
            NUMBER(o.rate, 0, 1e9);
            break;
        case O_BOARDS:
            NUMBER(v, 1, 1e7);
            o.boards = (uint32_t)v;
            break;
        case O_PLAYERS:
            NUMBER(v, 1, 1e8);
            o.players = (uint32_t)v;
            break;
        case O_ZIPF:
            NUMBER(o.zipf, 0, 10);
            break;
        case O_SCORE_MAX:
            NUMBER(v, 0, 4e15);
            o.score_max = (int64_t)v;
            break;
        case O_DAYS:
            NUMBER(v, 1, 3650);
            o.days = (int)v;
            break;
        case O_SCHEMA_ID:
            NUMBER(v, 0, 2147483647.0);
            o.schema_id = (int32_t)v;
            break;
        case O_DIM_VALUES:
            NUMBER(v, 1, 1e6);
            o.dim_values = (uint32_t)v;
            break;
        case O_RETRACT:
            NUMBER(v, 0, 1e9);
            o.retract_every = (int)v;
            break;
        case O_START:
            if (lb_time_parse(optarg, &o.start_ms) != 0) {
                fprintf(stderr, "loadgen: --start: '%s' is not an RFC 3339 time\n", optarg);
                return 1;
            }
            break;
        case O_BARE:
            o.bare = 1;
            break;
        case O_EVENTS_OUT:
            o.events_out = optarg;
            break;
        case O_DRY_RUN:
            o.dry_run = 1;
            break;
        case O_BOARD_PREFIX:
            o.board_prefix = optarg;
            break;
        case O_DIM:
            o.dim_name = optarg;
            break;
        case 'X':
            if (nprops == 64) {
                fprintf(stderr, "loadgen: too many -X options\n");
                return 1;
            }
            props[nprops++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 1;
    }
    if (o.start_ms < 0) {
        int64_t today = (int64_t)time(NULL) / 86400;
        o.start_ms = (today - (o.days - 1)) * INT64_C(86400000);
    }

    double *cdf = zipf_table(o.players, o.zipf);
    if (!cdf) {
        fprintf(stderr, "loadgen: out of memory\n");
        return 1;
    }
    int status = 0;
    if (o.dry_run) {
        for (uint64_t i = 0; i < o.count; i++) {
            struct event ev;
            generate(&o, cdf, i, &ev);
            print_event(stdout, &ev);
        }
    } else {
        FILE *log = o.events_out ? fopen(o.events_out, "w") : NULL;
        rd_kafka_t *rk = NULL;
        if (o.events_out && !log) {
            fprintf(stderr, "loadgen: cannot write %s: %s\n", o.events_out, strerror(errno));
            status = 1;
        } else if (!(rk = make_producer(&o, props, nprops))) {
            status = 1;
        } else {
            status = produce_all(&o, cdf, rk, log) == 0 ? 0 : 1;
            rd_kafka_destroy(rk);
        }
        if (log && fclose(log) != 0)
            status = 1;
    }
    free(cdf);
    return status;
}
