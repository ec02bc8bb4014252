/* replay: rebuilds lost leaderboards from the events Kafka still retains,
 * beside the live projector.
 *
 * How it stays correct while the projector keeps writing the same boards:
 *
 *  1. It reads every partition of the configured topics with its own
 *     assignment (never joining or committing for the live group) and runs
 *     the selected boards' events through the projector's own engine
 *     (decoder, profiles, planner, apply script, cluster client) into
 *     staging keys: the same keys under the prefix "<prefix>~replay:", so
 *     "lb:~replay:{B}:daily:2026-05-04" shares board B's hash tag and slot.
 *     The staging copy has its own applied-offset markers, so retries and
 *     redeliveries inside the replay count once, as in the projector.
 *
 *  2. Per board, one atomic swap script then moves the staging keys over the
 *     live ones and deletes live keys the events do not produce, provided
 *     the live projector has not applied anything past what replay read:
 *     for every partition, the live marker must be <= the last offset replay
 *     read. It then sets the live markers to that offset, so the projector
 *     skips what replay applied and applies everything after it: no event is
 *     lost or counted twice, for best, latest and sum boards alike. If the
 *     projector got ahead, replay reads further and tries again.
 *
 *  3. With --window, only some keys of a board are replaced while its other
 *     keys (and its markers) stay live, so markers cannot move: the swap
 *     then requires the staging copy to hold exactly the events the live
 *     projector applied to the board: per partition, replay's last event of
 *     the board <= the live marker <= the last offset replay read (no event
 *     of the board lies between), and retries until that holds.
 *
 *  --verify builds the same staging copy and compares it with the live keys
 *  instead of swapping (when the live projector has applied exactly what
 *  replay read, per the markers and committed offsets), then deletes it.
 *
 * Exit codes: 0 done (or verified equal), 1 Kafka or Redis failure, 2 usage,
 * 3 configuration, 4 retention gap (refused without --allow-gap), 5 verify
 * found differences.
 */
#include "clock.h"
#include "cluster.h"
#include "config.h"
#include "kafka.h"
#include "event.h"
#include "lease.h"
#include "log.h"
#include "apply.h"
#include "engine.h"
#include "resp.h"
#include "slot.h"

#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    EXIT_OK = 0,
    EXIT_BROKEN = 1,
    EXIT_USAGE = 2,
    EXIT_CONFIG = 3,
    EXIT_GAP = 4,
    EXIT_DIFFERENT = 5,
};

#define STAGING_INFIX    "~replay:"
#define SWAP_ATTEMPTS    30
#define KAFKA_TIMEOUT_MS 10000
#define FENCE_TTL_MS     60000

/* The swap, atomically per board (see the top of the file).
 * KEYS: [1] live marker hash, [2] live marker sorted set, [3] staging
 *       marker hash, [4] staging marker sorted set, [5] the board's fence,
 *       then n staging keys, then their n live names, then live keys to
 *       delete.
 * ARGV: [1] n, [2] mode "advance" or "exact", [3] field count f, then f
 *       pairs (marker field, last offset read from there).
 * A swap that happens also lifts the fence, if replay had set one. Staging
 * keys always come with their marker hash (the apply script writes both),
 * so staging keys listed without it mean the swap was done already: the
 * script then answers {"gone"} and changes nothing, which makes sending it
 * again after a lost reply safe. */
/* From the build (swap_lua.c, generated from replay/swap.lua). */
extern const char lb_swap_lua[];

/* ---- small containers ---------------------------------------------------------------- */

struct strings {
    char **items;
    size_t count, cap;
};

static void strings_add(struct strings *s, const char *text, size_t len)
{
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->items = realloc(s->items, s->cap * sizeof(*s->items));
        if (!s->items) {
            fprintf(stderr, "replay: out of memory\n");
            exit(EXIT_BROKEN);
        }
    }
    s->items[s->count] = strndup(text, len);
    if (!s->items[s->count]) {
        fprintf(stderr, "replay: out of memory\n");
        exit(EXIT_BROKEN);
    }
    s->count++;
}

/* Appends one command in RESP to 'buf'. */
static int encode_command(struct lb_buf *buf, int argc, const char **argv)
{
    size_t need = LB_RESP_HEADER_MAX;
    for (int i = 0; i < argc; i++)
        need += LB_RESP_HEADER_MAX + strlen(argv[i]) + 2;
    if (lb_buf_reserve(buf, need) != 0)
        return -1;
    char *p = lb_resp_header(buf->data + buf->len, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++)
        p = lb_resp_bulk(p, argv[i], strlen(argv[i]));
    buf->len = (size_t)(p - buf->data);
    return 0;
}

static void strings_free(struct strings *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->items[i]);
    free(s->items);
    memset(s, 0, sizeof(*s));
}

/* A set of board ids (open addressing). */
struct board_set {
    char **slots;
    size_t cap, count;
};

static uint64_t hash_text(const char *p, size_t len)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211u;
    return h;
}

static void board_set_add(struct board_set *set, const char *id, size_t len)
{
    if ((set->count + 1) * 2 > set->cap) {
        struct board_set bigger = {.cap = set->cap ? set->cap * 2 : 64};
        bigger.slots = calloc(bigger.cap, sizeof(char *));
        if (!bigger.slots) {
            fprintf(stderr, "replay: out of memory\n");
            exit(EXIT_BROKEN);
        }
        for (size_t i = 0; i < set->cap; i++)
            if (set->slots[i])
                board_set_add(&bigger, set->slots[i], strlen(set->slots[i]));
        for (size_t i = 0; i < set->cap; i++)
            free(set->slots[i]);
        free(set->slots);
        *set = bigger;
    }
    size_t pos = hash_text(id, len) & (set->cap - 1);
    while (set->slots[pos]) {
        if (strlen(set->slots[pos]) == len && memcmp(set->slots[pos], id, len) == 0)
            return;
        pos = (pos + 1) & (set->cap - 1);
    }
    set->slots[pos] = strndup(id, len);
    set->count++;
}

static int board_set_contains(const struct board_set *set, const char *id, size_t len)
{
    if (!set->cap)
        return 0;
    size_t pos = hash_text(id, len) & (set->cap - 1);
    for (; set->slots[pos]; pos = (pos + 1) & (set->cap - 1))
        if (strlen(set->slots[pos]) == len && memcmp(set->slots[pos], id, len) == 0)
            return 1;
    return 0;
}

static void board_set_free(struct board_set *set)
{
    for (size_t i = 0; i < set->cap; i++)
        free(set->slots[i]);
    free(set->slots);
}

/* ---- the selection -------------------------------------------------------------------- */

struct selection {
    uint8_t slots[LB_SLOTS]; /* 1: the slot is selected */
    int any_slots;           /* --slots or --node given */
    struct strings boards;   /* --board patterns */
    struct strings windows;  /* --window suffixes */
    struct board_set seen;   /* selected boards that had events */
    struct board_set done;   /* boards already swapped: no more staging writes */
};

static int board_selected(const struct selection *sel, const char *board, size_t len)
{
    uint16_t slot = lb_crc16(board, len) & (LB_SLOTS - 1);
    if (sel->any_slots && !sel->slots[slot])
        return 0;
    if (!sel->boards.count)
        return 1;
    char id[LB_ID_MAX_BYTES + 1];
    snprintf(id, sizeof(id), "%.*s", (int)len, board);
    for (size_t i = 0; i < sel->boards.count; i++)
        if (fnmatch(sel->boards.items[i], id, 0) == 0)
            return 1;
    return 0;
}

static int filter_event(void *ctx, const struct lb_event *ev)
{
    struct selection *sel = ctx;
    if (!board_selected(sel, ev->board.ptr, ev->board.len) ||
        board_set_contains(&sel->done, ev->board.ptr, ev->board.len))
        return 0;
    board_set_add(&sel->seen, ev->board.ptr, ev->board.len);
    return 1;
}

/* "0-5460,12000" */
static int parse_slots(const char *text, struct selection *sel)
{
    const char *p = text;
    while (*p) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p)
            return -1;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1)
                return -1;
            p = end;
        }
        if (lo < 0 || hi >= LB_SLOTS || lo > hi)
            return -1;
        for (long s = lo; s <= hi; s++)
            sel->slots[s] = 1;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    sel->any_slots = 1;
    return 0;
}

/* ---- the plan ------------------------------------------------------------------------- */

struct part {
    const char *topic;
    int32_t partition;
    int64_t low, high; /* watermarks */
    int64_t from, end; /* read [from, end) */
    int64_t committed; /* the live group's, or -1 */
    int64_t read_to;   /* next offset to read */
    int gap;           /* events in the range were deleted by retention */
    uint64_t consumed; /* messages read */
    char field[300];   /* its applied-marker field */
};

struct plan {
    struct part *parts;
    size_t count;
};

struct options {
    const char *config_path;
    const char *from, *to, *node;
    int dry_run, allow_gap, verify, verbose;
    double max_rate;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double mono_s(void)
{
    return (double)lb_monotonic_ms() / 1000.0;
}

static void group_digits(int64_t v, char *out, size_t cap)
{
    char digits[32];
    int n = snprintf(digits, sizeof(digits), "%lld", (long long)(v < 0 ? -v : v));
    size_t o = 0;
    if (v < 0 && o + 1 < cap)
        out[o++] = '-';
    for (int i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
}

/* Resolves "earliest", "latest", "committed", an RFC 3339 time or an offset
 * for one partition; -1 with a message on failure. */
static int64_t resolve(rd_kafka_t *rk, const struct part *p, const char *spec, int is_from,
                       char *err, size_t errlen)
{
    int64_t ms;
    char *end;
    if (strcmp(spec, "earliest") == 0)
        return p->low;
    if (strcmp(spec, "latest") == 0)
        return p->high;
    if (strcmp(spec, "committed") == 0) {
        if (p->committed < 0)
            return is_from ? p->low : p->high;
        return p->committed;
    }
    long long offset = strtoll(spec, &end, 10);
    if (*end == '\0' && end != spec)
        return offset < 0 ? 0 : offset > p->high ? p->high : offset;
    if (lb_time_parse(spec, &ms) != 0) {
        snprintf(err, errlen,
                 "'%s' is not earliest, latest, committed, an offset or an RFC 3339 time", spec);
        return -1;
    }
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, p->topic, p->partition)->offset = ms;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, list, KAFKA_TIMEOUT_MS);
    int64_t result = list->elems[0].offset;
    if (!e)
        e = list->elems[0].err;
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
        snprintf(err, errlen, "offsets for time %s on %s [%d]: %s", spec, p->topic, p->partition,
                 rd_kafka_err2str(e));
        return -1;
    }
    return result < 0 ? p->high : result; /* -1: no event at or after the time */
}

static int make_plan(rd_kafka_t *meta, const struct lb_config *config, const struct options *o,
                     struct plan *plan)
{
    char err[512];
    for (size_t t = 0; t < config->ntopics; t++) {
        rd_kafka_topic_t *topic = rd_kafka_topic_new(meta, config->topics[t], NULL);
        const struct rd_kafka_metadata *md;
        rd_kafka_resp_err_t e = rd_kafka_metadata(meta, 0, topic, &md, KAFKA_TIMEOUT_MS);
        rd_kafka_topic_destroy(topic);
        if (e || md->topic_cnt != 1 || md->topics[0].err) {
            fprintf(stderr,
                    "replay: cannot read the partitions of topic %s from Kafka (%s) within "
                    "%d s: %s\n",
                    config->topics[t], config->brokers, KAFKA_TIMEOUT_MS / 1000,
                    rd_kafka_err2str(e               ? e
                                     : md->topic_cnt ? md->topics[0].err
                                                     : e));
            if (!e)
                rd_kafka_metadata_destroy(md);
            return -1;
        }
        int n = md->topics[0].partition_cnt;
        plan->parts = realloc(plan->parts, (plan->count + (size_t)n) * sizeof(*plan->parts));
        for (int i = 0; i < n; i++) {
            struct part *p = &plan->parts[plan->count++];
            memset(p, 0, sizeof(*p));
            p->topic = config->topics[t];
            p->partition = md->topics[0].partitions[i].id;
            lb_marker_field(p->topic, p->partition, p->field, sizeof(p->field));
        }
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new((int)plan->count ? (int)plan->count : 1);
    for (size_t i = 0; i < plan->count; i++) {
        struct part *p = &plan->parts[i];
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(
            meta, p->topic, p->partition, &p->low, &p->high, KAFKA_TIMEOUT_MS);
        if (e) {
            fprintf(stderr, "replay: watermarks of %s [%d]: %s\n", p->topic, p->partition,
                    rd_kafka_err2str(e));
            rd_kafka_topic_partition_list_destroy(list);
            return -1;
        }
        rd_kafka_topic_partition_list_add(list, p->topic, p->partition);
    }
    rd_kafka_resp_err_t e = rd_kafka_committed(meta, list, KAFKA_TIMEOUT_MS);
    if (e) {
        fprintf(stderr, "replay: committed offsets of group %s: %s\n", config->group,
                rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(list);
        return -1;
    }
    for (size_t i = 0; i < plan->count; i++) {
        struct part *p = &plan->parts[i];
        p->committed = list->elems[i].err ? -1 : list->elems[i].offset;
        if (p->committed < 0)
            p->committed = -1;
        p->from = resolve(meta, p, o->from, 1, err, sizeof(err));
        p->end = p->from < 0 ? -1 : resolve(meta, p, o->to, 0, err, sizeof(err));
        if (p->from < 0 || p->end < 0) {
            fprintf(stderr, "replay: %s\n", err);
            rd_kafka_topic_partition_list_destroy(list);
            return -1;
        }
        if (p->end < p->from)
            p->end = p->from;
        /* Asked for events Kafka no longer has: a retention gap. */
        p->gap = p->low > 0 && p->from <= p->low && p->end > p->from;
        if (p->from < p->low)
            p->from = p->low;
        p->read_to = p->from;
    }
    rd_kafka_topic_partition_list_destroy(list);
    return 0;
}

static int print_plan(const struct plan *plan, const struct options *o, const char *group)
{
    int64_t total = 0;
    int gaps = 0;
    char a[32], b[32], n[32];
    printf("replay plan: --from %s --to %s (live group '%s')\n", o->from, o->to, group);
    for (size_t i = 0; i < plan->count; i++) {
        const struct part *p = &plan->parts[i];
        group_digits(p->from, a, sizeof(a));
        group_digits(p->end, b, sizeof(b));
        group_digits(p->end - p->from, n, sizeof(n));
        printf("  %s [%d]: offsets %s..%s, %s events to read\n", p->topic, p->partition, a, b, n);
        total += p->end - p->from;
        if (p->gap) {
            group_digits(p->low, a, sizeof(a));
            printf("  %s [%d]: events before offset %s were deleted by retention; boards in the "
                   "selection may be incomplete\n",
                   p->topic, p->partition, a);
            gaps++;
        }
    }
    group_digits(total, n, sizeof(n));
    printf("  total: %s events from %zu partition(s)%s\n", n, plan->count,
           gaps ? ", with a retention gap" : "");
    fflush(stdout);
    return gaps;
}

/* ---- reading ---------------------------------------------------------------------------- */

struct replay {
    struct options o;
    struct replay_lease lease;
    struct board_set fenced; /* boards whose fence replay set */
    char selection[400];     /* the selection as given, for the journal */
    struct lb_config *config;
    char staging_prefix[128];
    struct lb_engine *engine;         /* writes under staging_prefix */
    struct lb_cluster *lease_cluster; /* the lease's and journal's own connections */
    rd_kafka_t *meta, *reader;
    struct plan plan;
    struct selection sel;
    uint64_t read, applied_batches;
    double started, last_progress;
    int tty;
};

static struct part *part_of(struct replay *r, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < r->plan.count; i++)
        if (r->plan.parts[i].partition == partition && strcmp(r->plan.parts[i].topic, topic) == 0)
            return &r->plan.parts[i];
    return NULL;
}

static int64_t remaining(const struct replay *r)
{
    int64_t left = 0;
    for (size_t i = 0; i < r->plan.count; i++)
        left += r->plan.parts[i].end - r->plan.parts[i].read_to;
    return left;
}

/* Events per second and seconds left for one partition. */
static double part_eta(const struct part *p, double elapsed, double *rate)
{
    *rate = (double)p->consumed / (elapsed > 0.001 ? elapsed : 0.001);
    int64_t left = p->end - p->read_to;
    return left <= 0 ? 0.0 : *rate > 0 ? (double)left / *rate : -1.0;
}

/* A progress bar on a terminal, a line every 5 s otherwise: events read,
 * rate, and the ETA of the slowest partition (all of them with --verbose). */
static void keep_lease(struct replay *r)
{
    if (replay_lease_keep(&r->lease) != 0 && !interrupted) {
        fprintf(stderr, "replay: another run took the replay lease %s; stopping\n", r->lease.key);
        interrupted = 1;
    }
}

static void progress(struct replay *r, int final)
{
    double t = mono_s(), elapsed = t - r->started;
    keep_lease(r);
    if (!final && t - r->last_progress < (r->tty ? 0.25 : 5.0))
        return;
    r->last_progress = t;
    double rate = r->read / (elapsed > 0.001 ? elapsed : 0.001), slowest = 0, prate;
    const struct part *last = NULL;
    for (size_t i = 0; i < r->plan.count; i++) {
        double eta = part_eta(&r->plan.parts[i], elapsed, &prate);
        if (eta < 0 || eta > slowest) {
            slowest = eta < 0 ? 1e9 : eta;
            last = &r->plan.parts[i];
        }
    }
    char eta[64] = "done";
    if (last && slowest >= 1e9)
        snprintf(eta, sizeof(eta), "%s [%d] not started", last->topic, last->partition);
    else if (last)
        snprintf(eta, sizeof(eta), "ETA %.0f s (%s [%d])", slowest, last->topic, last->partition);
    if (r->tty) {
        int64_t left = remaining(r), all = (int64_t)r->read + left;
        int width = 30, done = all ? (int)((double)r->read / (double)all * width) : width;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %llu events read, %.0f/s, %s   ", bar, (unsigned long long)r->read,
                rate, eta);
        if (final)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "replay: %llu events read, %lld left, %.0f events/s, %s\n",
                (unsigned long long)r->read, (long long)remaining(r), rate, eta);
    }
    for (size_t i = 0; i < r->plan.count && r->o.verbose; i++) {
        const struct part *p = &r->plan.parts[i];
        double e = part_eta(p, elapsed, &prate);
        fprintf(stderr, "  %s [%d]: at %lld of %lld, %.0f/s, ETA %s%.0f s\n", p->topic,
                p->partition, (long long)p->read_to, (long long)p->end, prate, e < 0 ? ">" : "",
                e < 0 ? 0.0 : e);
    }
}

/* Always "ready": replay retries a failing batch until it is written (Redis
 * failing over, a node being replaced), saying why at every failed round,
 * rate-limited; an interrupt gives up. */
static int wait_between_retries(void *ctx, int64_t backoff_ms)
{
    struct replay *r = ctx;
    static struct lb_ratelimit said;
    const struct lb_pipeline_failure *f = lb_pipeline_last_failure(r->engine->pipeline);
    uint64_t suppressed;
    keep_lease(r);
    if (interrupted)
        return -1;
    if (lb_ratelimit_allow(&said, 5000, &suppressed))
        fprintf(stderr,
                "replay: writing to Redis failed (attempt %u, %zu board request(s)): %s; "
                "retrying in %lld ms%s\n",
                f->attempt, f->requests, f->reason, (long long)backoff_ms,
                suppressed ? " (earlier failures suppressed)" : "");
    usleep((useconds_t)backoff_ms * 1000);
    return interrupted ? -1 : 0;
}

/* Batches are double-buffered like the projector's: while one is in Redis,
 * the next is read from Kafka, decoded and planned. */
struct batch {
    rd_kafka_message_t **msgs;
    struct lb_record *records;
    uint8_t *durable;
    size_t n;
};

static void batch_release(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        rd_kafka_message_destroy(b->msgs[i]);
    b->n = 0;
}

/* Waits for the batch in Redis, if any. */
static int finish_inflight(struct replay *r, struct batch **inflight)
{
    if (!*inflight)
        return 0;
    int rc =
        lb_pipeline_complete(r->engine->pipeline, (*inflight)->durable, wait_between_retries, r);
    if (rc < 0)
        fprintf(stderr, "replay: out of memory writing a batch\n");
    batch_release(*inflight);
    *inflight = NULL;
    r->applied_batches++;
    return rc == 0 ? 0 : -1;
}

/* Plans 'b', waits for the batch before it, and sends 'b'. */
static int flush_batch(struct replay *r, struct batch *b, struct batch **inflight)
{
    for (size_t i = 0; i < b->n; i++)
        b->records[i] = (struct lb_record){b->msgs[i]->payload, b->msgs[i]->len,
                                           rd_kafka_topic_name(b->msgs[i]->rkt),
                                           b->msgs[i]->partition, b->msgs[i]->offset};
    if (lb_pipeline_prepare(r->engine->pipeline, b->records, b->n, lb_wall_ms()) != 0) {
        fprintf(stderr, "replay: out of memory\n");
        return -1;
    }
    int rc = finish_inflight(r, inflight);
    lb_pipeline_send(r->engine->pipeline);
    *inflight = b;
    return rc;
}

/* Offsets without a message (transaction markers, compacted records) never
 * arrive: when the consumer's position has passed the last offsets wanted
 * and nothing comes, the partition is done. */
static void skip_gaps(struct replay *r)
{
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new((int)r->plan.count ? (int)r->plan.count : 1);
    for (size_t i = 0; i < r->plan.count; i++)
        if (r->plan.parts[i].read_to < r->plan.parts[i].end)
            rd_kafka_topic_partition_list_add(list, r->plan.parts[i].topic,
                                              r->plan.parts[i].partition);
    if (list->cnt && rd_kafka_position(r->reader, list) == RD_KAFKA_RESP_ERR_NO_ERROR)
        for (int i = 0; i < list->cnt; i++) {
            struct part *p = part_of(r, list->elems[i].topic, list->elems[i].partition);
            if (p && list->elems[i].offset >= p->end)
                p->read_to = p->end;
        }
    rd_kafka_topic_partition_list_destroy(list);
}

static int retry_pause(struct replay *r, const char *what, const char *why, int attempt,
                       int64_t since_ms);

/* Says what went wrong reading Kafka: once and stop when 'broken', else at
 * most every 5 s while librdkafka reconnects. */
static void kafka_trouble(struct replay *r, const rd_kafka_message_t *m, int broken)
{
    static struct lb_ratelimit said;
    uint64_t suppressed;
    (void)r;
    if (broken)
        fprintf(stderr, "replay: reading %s [%d] from Kafka failed: %s\n",
                m->rkt ? rd_kafka_topic_name(m->rkt) : "?", m->partition,
                rd_kafka_message_errstr(m));
    else if (lb_ratelimit_allow(&said, 5000, &suppressed))
        fprintf(stderr, "replay: Kafka: %s; waiting for the brokers%s\n",
                rd_kafka_message_errstr(m), suppressed ? " (earlier messages suppressed)" : "");
}

/* Reads every partition from read_to up to end, applying as it goes. */
static int read_until_end(struct replay *r)
{
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new((int)r->plan.count ? (int)r->plan.count : 1);
    for (size_t i = 0; i < r->plan.count; i++) {
        struct part *p = &r->plan.parts[i];
        if (p->read_to < p->end)
            rd_kafka_topic_partition_list_add(list, p->topic, p->partition)->offset = p->read_to;
    }
    if (list->cnt == 0) {
        rd_kafka_topic_partition_list_destroy(list);
        return 0;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(r->reader, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
        fprintf(stderr, "replay: assign: %s\n", rd_kafka_err2str(e));
        return -1;
    }
    size_t cap = (size_t)r->config->batch_max_events;
    struct batch batches[2], *cur = &batches[0], *inflight = NULL;
    int status = 0;
    for (int i = 0; i < 2; i++) {
        batches[i] = (struct batch){calloc(cap, sizeof(rd_kafka_message_t *)),
                                    calloc(cap, sizeof(struct lb_record)), calloc(cap, 1), 0};
        if (!batches[i].msgs || !batches[i].records || !batches[i].durable)
            status = -1;
    }
    double batch_started = mono_s(), budget_start = mono_s();
    uint64_t budget_read = 0;
    while (status == 0 && remaining(r) > 0 && !interrupted) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->reader, inflight ? 0 : 100);
        if (m && m->err) {
            /* A broker restarting or unreachable is reported here too:
             * librdkafka reconnects by itself, so only what cannot heal
             * (retention deleting what replay still has to read, a fatal
             * client error) stops replay. */
            int broken = m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE ||
                         m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
                         rd_kafka_fatal_error(r->reader, NULL, 0);
            if (broken || m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                kafka_trouble(r, m, broken);
            rd_kafka_message_destroy(m);
            if (broken) {
                status = -1;
                break;
            }
            continue;
        }
        if (!m && inflight) {
            status = finish_inflight(r, &inflight); /* nothing to read: let Redis catch up */
            continue;
        }
        if (!m)
            skip_gaps(r);
        if (m) {
            struct part *p = part_of(r, rd_kafka_topic_name(m->rkt), m->partition);
            if (!p || m->offset >= p->end || m->offset < p->read_to) {
                rd_kafka_message_destroy(m); /* past the end (or before): not ours */
            } else {
                p->read_to = m->offset + 1;
                p->consumed++;
                r->read++;
                budget_read++;
                cur->msgs[cur->n++] = m;
            }
        }
        if (cur->n == cap ||
            (cur->n && (!m || mono_s() - batch_started > 0.05 || remaining(r) == 0))) {
            status = flush_batch(r, cur, &inflight);
            cur = cur == &batches[0] ? &batches[1] : &batches[0];
            batch_started = mono_s();
            progress(r, 0);
        }
        if (r->o.max_rate > 0) {
            double ahead = (double)budget_read / r->o.max_rate - (mono_s() - budget_start);
            if (ahead > 0.001)
                usleep((useconds_t)(ahead * 1e6));
        }
    }
    if (status == 0 && cur->n)
        status = flush_batch(r, cur, &inflight);
    if (finish_inflight(r, &inflight) != 0)
        status = -1;
    for (int i = 0; i < 2; i++) {
        batch_release(&batches[i]);
        free(batches[i].msgs);
        free(batches[i].records);
        free(batches[i].durable);
    }
    rd_kafka_assign(r->reader, NULL);
    if (interrupted && status == 0)
        status = -1;
    return status;
}

/* Moves every partition's end to its current high watermark, waiting out a
 * broker that is restarting. */
static int extend_to_latest(struct replay *r)
{
    for (size_t i = 0; i < r->plan.count; i++) {
        struct part *p = &r->plan.parts[i];
        int64_t low, high, since = lb_monotonic_ms();
        rd_kafka_resp_err_t e;
        for (int attempt = 1;
             (e = rd_kafka_query_watermark_offsets(r->meta, p->topic, p->partition, &low, &high,
                                                   KAFKA_TIMEOUT_MS)) != RD_KAFKA_RESP_ERR_NO_ERROR;
             attempt++)
            if (retry_pause(r, "reading Kafka's watermarks", rd_kafka_err2str(e), attempt, since) !=
                0)
                return -1;
        if (high > p->end)
            p->end = high;
    }
    return 0;
}

/* ---- talking to Redis ---------------------------------------------------------------- */

#define RETRY_FOR_MS 120000 /* how long a transient failure is retried */

/* Waits before the next attempt of 'what' (the back-off doubles from 100 ms
 * to 2 s), saying why, at most every 5 s. Returns -1 when replay must stop
 * instead (interrupted, or transient failures for RETRY_FOR_MS). */
static int retry_pause(struct replay *r, const char *what, const char *why, int attempt,
                       int64_t since_ms)
{
    static struct lb_ratelimit said;
    uint64_t suppressed;
    int64_t backoff = attempt < 5 ? 100 << attempt : 2000;
    keep_lease(r);
    if (interrupted)
        return -1;
    if (lb_monotonic_ms() - since_ms > RETRY_FOR_MS) {
        fprintf(stderr, "replay: %s kept failing for %d s: %s\n", what, RETRY_FOR_MS / 1000, why);
        return -1;
    }
    if (lb_ratelimit_allow(&said, 5000, &suppressed))
        fprintf(stderr, "replay: %s failed (attempt %d): %s; retrying in %lld ms%s\n", what,
                attempt, why, (long long)backoff,
                suppressed ? " (earlier failures suppressed)" : "");
    for (int64_t left = backoff; left > 0 && !interrupted; left -= 50)
        usleep(50000);
    return interrupted ? -1 : 0;
}

/* One command on the master of 'slot', sent again after transient failures
 * (a node hanging up, failing over, or still loading), which is what nodes
 * do during the incidents replay is run for. Only for commands that can be
 * sent twice. Returns the reply, or NULL with the reason printed. '*tries'
 * (if given) says how many attempts were made. */
static redisReply *redis_call(struct replay *r, const char *what, uint16_t slot, int argc,
                              const char **argv, const size_t *argvlen, int *tries)
{
    int64_t since = lb_monotonic_ms();
    for (int attempt = 1;; attempt++) {
        redisReply *reply = lb_cluster_command(r->engine->cluster, slot, argc, argv, argvlen);
        if (tries)
            *tries = attempt;
        if (reply)
            return reply;
        if (lb_cluster_error_class(r->engine->cluster) != LB_REDIS_RETRY) {
            fprintf(stderr, "replay: %s failed: %s\n", what, lb_cluster_error(r->engine->cluster));
            return NULL;
        }
        if (retry_pause(r, what, lb_cluster_error(r->engine->cluster), attempt, since) != 0)
            return NULL;
    }
}

/* lb_cluster_exec for requests that can be sent twice, sending the failed
 * ones again after transient failures. Returns 0 when all succeeded. */
static int exec_retrying(struct replay *r, const char *what, struct lb_request *reqs, size_t n)
{
    int64_t since = lb_monotonic_ms();
    size_t pending = n;
    struct lb_request *todo = reqs;
    for (int attempt = 1; pending; attempt++) {
        lb_cluster_exec(r->engine->cluster, todo, pending);
        size_t still = 0;
        const char *why = NULL;
        int fatal = 0;
        for (size_t i = 0; i < pending; i++) {
            if (todo[i].reply) {
                freeReplyObject(todo[i].reply);
                todo[i].reply = NULL;
            }
            if (todo[i].ok)
                continue;
            fatal |= todo[i].error_class != LB_REDIS_RETRY;
            todo[still++] = todo[i]; /* reqs is ours: compact the failed ones */
            why = todo[still - 1].error;
        }
        pending = still;
        if (!pending)
            break;
        if (fatal) {
            fprintf(stderr, "replay: %s failed: %s\n", what, why);
            return -1;
        }
        if (retry_pause(r, what, why, attempt, since) != 0)
            return -1;
    }
    return 0;
}

/* ---- keys --------------------------------------------------------------------------- */

struct scan_ctx {
    struct replay *r;
    struct strings *live, *staged;
    int all_staged; /* every staging key, whatever board: the leftovers */
};

/* Whether 'key' ("<prefix>{B}:...") belongs to a selected board that had
 * events; 'prefix' is the live or the staging prefix. */
static int key_in_selection(struct replay *r, const char *key, size_t len, const char *prefix)
{
    struct lb_key_parts kp;
    return lb_key_parse(prefix, key, len, &kp) == 0 &&
           board_selected(&r->sel, kp.board.ptr, kp.board.len);
}

static void collect_key(void *ctx, const redisReply *reply)
{
    struct scan_ctx *s = ctx;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
        return;
    const redisReply *keys = reply->element[1];
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        size_t len = keys->element[i]->len;
        size_t sp = strlen(s->r->staging_prefix);
        if (s->all_staged && len > sp && memcmp(k, s->r->staging_prefix, sp) == 0 && k[sp] == '{')
            strings_add(s->staged, k, len);
        else if (key_in_selection(s->r, k, len, s->r->staging_prefix))
            strings_add(s->staged, k, len);
        else if (key_in_selection(s->r, k, len, s->r->config->key_prefix))
            strings_add(s->live, k, len);
    }
}

/* Every key under the prefix on every master, split into live and staging
 * keys of the selection. */
static int scan_keys(struct replay *r, struct strings *live, struct strings *staged, int all_staged)
{
    char pattern[160];
    snprintf(pattern, sizeof(pattern), "%s*", r->config->key_prefix);
    struct scan_ctx ctx = {r, live, staged, all_staged};
    /* one SCAN cursor loop per master, reached through a slot it owns */
    for (uint16_t slot = 0;;) {
        /* One representative slot per master: walk the slot map. */
        const char *owner = lb_cluster_slot_owner(r->engine->cluster, slot);
        uint16_t next = slot;
        while (next < LB_SLOTS - 1 && lb_cluster_slot_owner(r->engine->cluster, next + 1) &&
               owner && strcmp(lb_cluster_slot_owner(r->engine->cluster, next + 1), owner) == 0)
            next++;
        if (owner) {
            int seen_before = 0;
            for (uint16_t s = 0; s < slot && !seen_before; s++) {
                const char *o = lb_cluster_slot_owner(r->engine->cluster, s);
                seen_before = o && strcmp(o, owner) == 0;
            }
            if (!seen_before) {
                char cursor[32] = "0";
                do {
                    const char *a[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
                    size_t al[6];
                    for (int i = 0; i < 6; i++)
                        al[i] = strlen(a[i]);
                    redisReply *reply = redis_call(r, "SCAN", slot, 6, a, al, NULL);
                    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
                        if (reply)
                            fprintf(stderr, "replay: SCAN on %s: unexpected reply\n", owner);
                        if (reply)
                            freeReplyObject(reply);
                        return -1;
                    }
                    snprintf(cursor, sizeof(cursor), "%s", reply->element[0]->str);
                    collect_key(&ctx, reply);
                    freeReplyObject(reply);
                } while (strcmp(cursor, "0") != 0);
            }
        }
        if (next >= LB_SLOTS - 1)
            break;
        slot = next + 1;
    }
    return 0;
}

/* Whether a key's window (its sorted set or its event-time hash) is
 * selected by --window; without --window every key of the board is. */
static int window_selected(const struct replay *r, const struct lb_key_parts *kp)
{
    if (!r->sel.windows.count)
        return 1;
    if (kp->kind != LB_KEY_WINDOW && kp->kind != LB_KEY_STAMPS)
        return 0;
    for (size_t i = 0; i < r->sel.windows.count; i++)
        if (strlen(r->sel.windows.items[i]) == kp->window.len &&
            memcmp(r->sel.windows.items[i], kp->window.ptr, kp->window.len) == 0)
            return 1;
    return 0;
}

/* Whether a live key is a leaderboard (not markers, stamps or a fence). */
static void delete_keys(struct replay *r, const struct strings *keys)
{
    for (size_t i = 0; i < keys->count; i++) {
        const char *argv[] = {"DEL", keys->items[i]};
        size_t argvlen[] = {3, strlen(keys->items[i])};
        redisReply *reply =
            redis_call(r, "deleting a staging key", lb_key_slot(keys->items[i], argvlen[1]), 2,
                       argv, argvlen, NULL);
        if (reply)
            freeReplyObject(reply);
    }
}

/* ---- swap and verify --------------------------------------------------------------- */

/* The keys of one board: staging keys with their live names, and live keys
 * that nothing staged replaces. Marker keys are left out of both lists. */
struct board_keys {
    struct strings staged, targets, extra;
};

static void board_keys_of(struct replay *r, const char *board, size_t blen,
                          const struct strings *live, const struct strings *staged,
                          struct board_keys *bk)
{
    size_t sp = strlen(r->staging_prefix);
    memset(bk, 0, sizeof(*bk));
    for (size_t i = 0; i < staged->count; i++) {
        struct lb_key_parts kp;
        if (lb_key_parse(r->staging_prefix, staged->items[i], strlen(staged->items[i]), &kp) != 0 ||
            kp.board.len != blen || memcmp(kp.board.ptr, board, blen) != 0 ||
            kp.kind == LB_KEY_MARKER || !window_selected(r, &kp))
            continue;
        char target[1024];
        snprintf(target, sizeof(target), "%s%s", r->config->key_prefix, staged->items[i] + sp);
        strings_add(&bk->staged, staged->items[i], strlen(staged->items[i]));
        strings_add(&bk->targets, target, strlen(target));
    }
    for (size_t i = 0; i < live->count; i++) {
        struct lb_key_parts kp;
        if (lb_key_parse(r->config->key_prefix, live->items[i], strlen(live->items[i]), &kp) != 0 ||
            kp.board.len != blen || memcmp(kp.board.ptr, board, blen) != 0 ||
            kp.kind == LB_KEY_MARKER || !window_selected(r, &kp))
            continue;
        int replaced = 0;
        for (size_t j = 0; j < bk->targets.count && !replaced; j++)
            replaced = strcmp(bk->targets.items[j], live->items[i]) == 0;
        if (!replaced)
            strings_add(&bk->extra, live->items[i], strlen(live->items[i]));
    }
}

static void board_keys_free(struct board_keys *bk)
{
    strings_free(&bk->staged);
    strings_free(&bk->targets);
    strings_free(&bk->extra);
}

/* One swap attempt: 0 done, 1 the live projector is ahead (read more), -1
 * failure. */
static int swap_board(struct replay *r, const char *board, const struct board_keys *bk)
{
    size_t blen = strlen(board);
    struct lb_str id = {board, (uint32_t)blen};
    char markers[4][600], fence[600];
    lb_marker_key(r->config->key_prefix, id, markers[0], sizeof(markers[0]));
    lb_marker_zset_key(r->config->key_prefix, id, markers[1], sizeof(markers[1]));
    lb_marker_key(r->staging_prefix, id, markers[2], sizeof(markers[2]));
    lb_marker_zset_key(r->staging_prefix, id, markers[3], sizeof(markers[3]));
    lb_fence_key(r->config->key_prefix, id, fence, sizeof(fence));
    size_t n = bk->staged.count, nkeys = 5 + 2 * n + bk->extra.count;
    size_t argc = 3 + nkeys + 3 + 2 * r->plan.count;
    const char **argv = calloc(argc, sizeof(char *));
    size_t *argvlen = calloc(argc, sizeof(size_t));
    char(*numbers)[24] = calloc(r->plan.count + 3, sizeof(*numbers));
    if (!argv || !argvlen || !numbers) {
        free(argv);
        free(argvlen);
        free(numbers);
        return -1;
    }
    size_t a = 0;
    snprintf(numbers[0], sizeof(numbers[0]), "%zu", nkeys);
    snprintf(numbers[1], sizeof(numbers[1]), "%zu", n);
    snprintf(numbers[2], sizeof(numbers[2]), "%zu", r->plan.count);
    argv[a++] = "EVAL";
    argv[a++] = lb_swap_lua;
    argv[a++] = numbers[0];
    for (size_t i = 0; i < 4; i++)
        argv[a++] = markers[i];
    argv[a++] = fence;
    for (size_t i = 0; i < n; i++)
        argv[a++] = bk->staged.items[i];
    for (size_t i = 0; i < n; i++)
        argv[a++] = bk->targets.items[i];
    for (size_t i = 0; i < bk->extra.count; i++)
        argv[a++] = bk->extra.items[i];
    argv[a++] = numbers[1];
    argv[a++] = r->sel.windows.count ? "exact" : "advance";
    argv[a++] = numbers[2];
    for (size_t i = 0; i < r->plan.count; i++) {
        snprintf(numbers[3 + i], sizeof(numbers[0]), "%lld",
                 (long long)(r->plan.parts[i].read_to - 1));
        argv[a++] = r->plan.parts[i].field;
        argv[a++] = numbers[3 + i];
    }
    for (size_t i = 0; i < a; i++)
        argvlen[i] = strlen(argv[i]);
    /* Sent again after a lost reply: the script answers "gone" when its
     * staging copy has already been swapped in (see swap.lua). */
    int tries = 0;
    redisReply *reply = redis_call(r, "swapping a board", lb_crc16(board, blen) & (LB_SLOTS - 1),
                                   (int)a, argv, argvlen, &tries);
    int rc = -1;
    const char *answer = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
                                 reply->element[0]->type == REDIS_REPLY_STRING
                             ? reply->element[0]->str
                             : NULL;
    if (!reply) {
        /* said by redis_call */
    } else if (answer && strcmp(answer, "gone") == 0 && tries == 1) {
        fprintf(stderr,
                "replay: the staging copy of board '%s' vanished before its swap (deleted by "
                "hand?); run replay again\n",
                board);
    } else if (answer) {
        rc = strcmp(answer, "ok") == 0 || strcmp(answer, "gone") == 0 ? 0 : 1;
    } else {
        fprintf(stderr, "replay: swapping board '%s' failed: %s\n", board,
                reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    }
    if (reply)
        freeReplyObject(reply);
    free(argv);
    free(argvlen);
    free(numbers);
    return rc;
}

struct verify_report {
    size_t keys_checked, keys_differing, missing, extra, different, boards_unverified;
    size_t shown;
};

static void example(struct verify_report *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void example(struct verify_report *v, const char *fmt, ...)
{
    if (v->shown++ >= 10)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("  ", stdout);
    vprintf(fmt, ap);
    fputs("\n", stdout);
    va_end(ap);
}

static redisReply *zrange(struct replay *r, const char *key)
{
    const char *argv[] = {"ZRANGE", key, "0", "-1", "WITHSCORES"};
    size_t argvlen[] = {6, strlen(key), 1, 2, 10};
    return redis_call(r, "reading a key", lb_key_slot(key, argvlen[1]), 5, argv, argvlen, NULL);
}

struct pair {
    const char *member, *score;
};

static int pair_cmp(const void *a, const void *b)
{
    return strcmp(((const struct pair *)a)->member, ((const struct pair *)b)->member);
}

static struct pair *pairs_of(const redisReply *reply, size_t *n)
{
    *n = reply->elements / 2;
    struct pair *p = calloc(*n + 1, sizeof(*p));
    for (size_t i = 0; p && i < *n; i++)
        p[i] = (struct pair){reply->element[2 * i]->str, reply->element[2 * i + 1]->str};
    if (p)
        qsort(p, *n, sizeof(*p), pair_cmp);
    return p;
}

/* Compares the staging copy of one key with the live one. */
static int compare_key(struct replay *r, const char *staged, const char *live,
                       struct verify_report *v)
{
    redisReply *s = zrange(r, staged), *l = zrange(r, live);
    int rc = 0;
    if (!s || !l || s->type != REDIS_REPLY_ARRAY || l->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "replay: reading %s failed\n", live);
        rc = -1;
        goto done;
    }
    v->keys_checked++;
    size_t ns, nl, before = v->missing + v->extra + v->different;
    struct pair *sp = pairs_of(s, &ns), *lp = pairs_of(l, &nl);
    for (size_t i = 0, j = 0; sp && lp && (i < ns || j < nl);) {
        int c = i == ns ? 1 : j == nl ? -1 : strcmp(sp[i].member, lp[j].member);
        if (c < 0) {
            v->missing++;
            example(v, "%s: member %s missing (the events make it %s)", live, sp[i].member,
                    sp[i].score);
            i++;
        } else if (c > 0) {
            v->extra++;
            example(v, "%s: member %s should not be there", live, lp[j].member);
            j++;
        } else {
            if (strcmp(sp[i].score, lp[j].score) != 0) {
                v->different++;
                example(v, "%s: member %s has %s, the events make it %s", live, lp[j].member,
                        lp[j].score, sp[i].score);
            }
            i++;
            j++;
        }
    }
    if (!sp || !lp)
        rc = -1;
    if (v->missing + v->extra + v->different != before)
        v->keys_differing++;
    free(sp);
    free(lp);
done:
    if (s)
        freeReplyObject(s);
    if (l)
        freeReplyObject(l);
    return rc;
}

/* Reads the live group's committed offsets into 'committed' (per part). */
static int live_committed(struct replay *r, int64_t *committed)
{
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new((int)r->plan.count ? (int)r->plan.count : 1);
    for (size_t i = 0; i < r->plan.count; i++)
        rd_kafka_topic_partition_list_add(list, r->plan.parts[i].topic, r->plan.parts[i].partition);
    rd_kafka_resp_err_t e = rd_kafka_committed(r->meta, list, KAFKA_TIMEOUT_MS);
    for (size_t i = 0; !e && i < r->plan.count; i++)
        committed[i] = list->elems[i].err ? -1 : list->elems[i].offset;
    rd_kafka_topic_partition_list_destroy(list);
    if (e)
        fprintf(stderr, "replay: committed offsets: %s\n", rd_kafka_err2str(e));
    return e ? -1 : 0;
}

/* Whether the live projector applied anything of 'board' past what replay
 * read: 1 ahead, 0 not, -1 failure. Both marker keys count (apply.h). */
static int live_ahead(struct replay *r, const char *board)
{
    struct lb_str id = {board, (uint32_t)strlen(board)};
    char hash[600], zset[600];
    lb_marker_key(r->config->key_prefix, id, hash, sizeof(hash));
    lb_marker_zset_key(r->config->key_prefix, id, zset, sizeof(zset));
    const char *reads[2][5] = {{"HGETALL", hash}, {"ZRANGE", zset, "0", "-1", "WITHSCORES"}};
    int argcs[2] = {2, 5}, ahead = 0;
    for (int k = 0; k < 2; k++) {
        size_t argvlen[5];
        for (int i = 0; i < argcs[k]; i++)
            argvlen[i] = strlen(reads[k][i]);
        redisReply *reply =
            redis_call(r, "reading a board's markers", lb_key_slot(reads[k][1], argvlen[1]),
                       argcs[k], reads[k], argvlen, NULL);
        if (!reply || reply->type != REDIS_REPLY_ARRAY) {
            if (reply)
                freeReplyObject(reply);
            return -1;
        }
        for (size_t i = 0; i + 1 < reply->elements; i += 2)
            for (size_t p = 0; p < r->plan.count; p++)
                if (strcmp(reply->element[i]->str, r->plan.parts[p].field) == 0 &&
                    strtod(reply->element[i + 1]->str, NULL) >
                        (double)(r->plan.parts[p].read_to - 1))
                    ahead = 1;
        freeReplyObject(reply);
    }
    return ahead;
}

/* A copy of the set's ids: the set may grow while the list is in use. */
static struct strings boards_of(const struct board_set *set)
{
    struct strings list = {0};
    for (size_t i = 0; i < set->cap; i++)
        if (set->slots[i])
            strings_add(&list, set->slots[i], strlen(set->slots[i]));
    return list;
}

/* Sets (or, with 'lift', deletes) the fence of every board in 'boards' that
 * is not swapped yet, in one pipeline per node. A fenced board takes no
 * writes from the live projector (the apply script answers "fenced" and the
 * projector retries it later), so its markers hold still while replay reads
 * up to the end of every partition and swaps it: the swap then cannot find
 * the projector ahead. A board written without a script (apply.h) is
 * written even when fenced, then held the same way: its markers move once
 * more at most per hold, which replay's next round reads. The TTL bounds the
 * pause if replay dies meanwhile. */
static int fence_boards(struct replay *r, const struct strings *boards, int lift)
{
    struct lb_buf buf = {0};
    struct lb_request *reqs = calloc(boards->count ? boards->count : 1, sizeof(*reqs));
    size_t *at = calloc(boards->count ? boards->count : 1, sizeof(*at)), n = 0;
    int status = reqs && at ? 0 : -1;
    char fence[600], ttl[24];
    snprintf(ttl, sizeof(ttl), "%d", FENCE_TTL_MS);
    for (size_t b = 0; status == 0 && b < boards->count; b++) {
        const char *board = boards->items[b];
        size_t blen = strlen(board);
        if (board_set_contains(&r->sel.done, board, blen) ||
            (lift && !board_set_contains(&r->fenced, board, blen)))
            continue;
        size_t flen = lb_fence_key(r->config->key_prefix, (struct lb_str){board, (uint32_t)blen},
                                   fence, sizeof(fence));
        const char *set[] = {"SET", fence, r->lease.owner, "PX", ttl};
        const char *del[] = {"DEL", fence};
        at[n] = buf.len;
        if (encode_command(&buf, lift ? 2 : 5, lift ? del : set) != 0) {
            status = -1;
            break;
        }
        reqs[n++] = (struct lb_request){.slot = lb_key_slot(fence, flen), .ncommands = 1};
        if (!lift)
            board_set_add(&r->fenced, board, blen);
    }
    for (size_t i = 0; status == 0 && i < n; i++) {
        reqs[i].bytes = buf.data + at[i];
        reqs[i].len = (i + 1 < n ? at[i + 1] : buf.len) - at[i];
    }
    if (status == 0 && n &&
        exec_retrying(r, lift ? "lifting fences" : "setting fences", reqs, n) != 0)
        status = -1;
    if (status == 0 && n && !lift)
        LB_INFO("replay",
                "fenced %zu board(s): the live projector waits while replay catches up "
                "and swaps them",
                n);
    free(reqs);
    free(at);
    lb_buf_free(&buf);
    return status;
}

/* A pause after each swap, for the tests that kill replay between two
 * boards (LB_FAULT_SWAP_PAUSE_MS). */
static void fault_pause_after_swap(void)
{
    const char *ms = getenv("LB_FAULT_SWAP_PAUSE_MS");
    for (long left = ms ? atol(ms) : 0; left > 0 && !interrupted; left -= 50)
        usleep(50000);
}

/* Replaces the live keys of every selected board with the staging copy.
 * Boards first seen while catching up are swapped in a later round. A board
 * the live projector got ahead of is fenced for the next round (except
 * with --window, whose swap needs the projector's markers to match replay's
 * copy exactly, which a fence would not give). */
static int swap_all(struct replay *r, size_t *swapped)
{
    int status = 0;
    *swapped = 0;
    for (int attempt = 0; status == 0 && r->sel.done.count < r->sel.seen.count; attempt++) {
        if (attempt == SWAP_ATTEMPTS) {
            fprintf(stderr,
                    "replay: %zu board(s) not swapped after %d attempts: the live projector "
                    "kept moving past replay (with --window the markers must match exactly); "
                    "run replay again when the input is quieter\n",
                    r->sel.seen.count - r->sel.done.count, attempt);
            status = -1;
            break;
        }
        if (attempt > 0) {
            /* the live projector got ahead: stop it on those boards (or,
             * with --window, give it a moment), then read what it has seen */
            struct strings ahead = boards_of(&r->sel.seen);
            if (r->sel.windows.count)
                usleep(200000);
            else if (fence_boards(r, &ahead, 0) != 0)
                status = -1;
            strings_free(&ahead);
            if (status != 0 || extend_to_latest(r) != 0 || read_until_end(r) != 0) {
                status = -1;
                break;
            }
        }
        struct strings live = {0}, staged = {0}, boards = boards_of(&r->sel.seen);
        if (scan_keys(r, &live, &staged, 0) != 0)
            status = -1;
        for (size_t b = 0; b < boards.count && status == 0; b++) {
            const char *board = boards.items[b];
            if (board_set_contains(&r->sel.done, board, strlen(board)))
                continue;
            keep_lease(r);
            if (interrupted) {
                status = -1;
                break;
            }
            struct board_keys bk;
            board_keys_of(r, board, strlen(board), &live, &staged, &bk);
            int rc = swap_board(r, board, &bk);
            if (rc == 0) {
                board_set_add(&r->sel.done, board, strlen(board));
                (*swapped)++;
                replay_journal_swapped(&r->lease, board);
            }
            LB_INFO("replay",
                    "board '%s': %s (%zu of %zu swapped; %zu staging key(s), %zu live key(s) to "
                    "delete)",
                    board,
                    rc == 0  ? "swapped"
                    : rc > 0 ? "live projector ahead"
                             : "failed",
                    r->sel.done.count, r->sel.seen.count, bk.staged.count, bk.extra.count);
            board_keys_free(&bk);
            if (rc < 0)
                status = -1;
            else if (rc == 0)
                fault_pause_after_swap();
        }
        strings_free(&boards);
        strings_free(&live);
        strings_free(&staged);
    }
    return status;
}

/* Compares the staging copy with the live keys, then deletes it. */
static int verify_all(struct replay *r, struct verify_report *v)
{
    int64_t *committed = calloc(r->plan.count + 1, sizeof(int64_t));
    int status = committed ? 0 : -1;
    for (int attempt = 0; status == 0; attempt++) {
        if (attempt == SWAP_ATTEMPTS) {
            fprintf(stderr, "replay: cannot verify: the live projector has not applied what "
                            "replay read, or keeps moving past it; run --verify again when the "
                            "input is quiet\n");
            status = -1;
            break;
        }
        if (attempt > 0)
            usleep(500000);
        /* the live projector must have applied (committed) what replay read */
        if (live_committed(r, committed) != 0) {
            status = -1;
            break;
        }
        int behind = 0, ahead = 0;
        for (size_t i = 0; i < r->plan.count; i++)
            behind |= committed[i] < r->plan.parts[i].read_to;
        if (behind)
            continue;
        struct strings boards = boards_of(&r->sel.seen);
        for (size_t b = 0; b < boards.count && !ahead; b++) {
            int rc = live_ahead(r, boards.items[b]);
            if (rc < 0)
                status = -1;
            ahead |= rc > 0;
        }
        if (status != 0 || ahead)
            strings_free(&boards);
        if (status != 0)
            break;
        if (ahead) {
            if (extend_to_latest(r) != 0 || read_until_end(r) != 0)
                status = -1;
            continue;
        }
        struct strings live = {0}, staged = {0};
        if (scan_keys(r, &live, &staged, 0) != 0) {
            strings_free(&boards);
            status = -1;
            break;
        }
        memset(v, 0, sizeof(*v));
        for (size_t b = 0; b < boards.count && status == 0; b++) {
            struct board_keys bk;
            board_keys_of(r, boards.items[b], strlen(boards.items[b]), &live, &staged, &bk);
            for (size_t k = 0; k < bk.staged.count && status == 0; k++) {
                const char *t = bk.targets.items[k];
                if (!lb_key_is_window(r->config->key_prefix, t, strlen(t)))
                    continue; /* bookkeeping of latest boards, not a leaderboard */
                status = compare_key(r, bk.staged.items[k], t, v);
            }
            for (size_t k = 0; k < bk.extra.count; k++) {
                const char *t = bk.extra.items[k];
                if (!lb_key_is_window(r->config->key_prefix, t, strlen(t)))
                    continue;
                v->keys_checked++;
                v->keys_differing++;
                v->extra++;
                example(v, "%s: key should not exist", t);
            }
            board_keys_free(&bk);
        }
        /* still valid only if the projector did not move meanwhile */
        int moved = 0;
        for (size_t b = 0; b < boards.count && status == 0 && !moved; b++)
            moved = live_ahead(r, boards.items[b]) != 0;
        strings_free(&boards);
        delete_keys(r, &staged);
        strings_free(&live);
        strings_free(&staged);
        if (!moved || status != 0)
            break;
        if (extend_to_latest(r) != 0 || read_until_end(r) != 0)
            status = -1;
    }
    free(committed);
    return status;
}

/* Deletes every staging key (while we hold the lease, none is another
 * live run's): what a board that was not swapped left, or what an earlier,
 * interrupted run did. */
static int clear_staging(struct replay *r, size_t *deleted)
{
    struct strings live = {0}, staged = {0};
    int rc = scan_keys(r, &live, &staged, 1);
    if (rc == 0)
        delete_keys(r, &staged);
    if (deleted)
        *deleted = staged.count;
    strings_free(&live);
    strings_free(&staged);
    return rc;
}

/* Whether --from/--to 'spec' has a form resolve() understands. */
static int offset_spec_valid(const char *spec)
{
    int64_t ms;
    char *end;
    if (strcmp(spec, "earliest") == 0 || strcmp(spec, "latest") == 0 ||
        strcmp(spec, "committed") == 0 || lb_time_parse(spec, &ms) == 0)
        return 1;
    long long offset = strtoll(spec, &end, 10);
    return *end == '\0' && end != spec && offset >= 0;
}

/* The command line's selection and range, for the journal. */
static void describe_selection(struct replay *r, int argc, char **argv)
{
    size_t used = 0;
    for (int i = 1; i < argc && used + 2 < sizeof(r->selection); i++) {
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--config=", 9) == 0)
            continue;
        int n = snprintf(r->selection + used, sizeof(r->selection) - used, "%s%s", used ? " " : "",
                         argv[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used >= sizeof(r->selection))
        used = sizeof(r->selection) - 1;
    r->selection[used] = '\0';
}

/* Shows, after the plan, what an earlier run that did not finish left: the
 * boards it swapped (they are rebuilt again; the result is the same) and
 * the staging keys that are deleted before reading. */
static int print_leftovers(struct replay *r)
{
    struct replay_leftover old;
    struct strings live = {0}, staged = {0};
    if (replay_journal_read(r->engine->cluster, r->config->key_prefix, &old) != 0 ||
        scan_keys(r, &live, &staged, 1) != 0) {
        fprintf(stderr, "replay: cannot read what an earlier run left in Redis: %s\n",
                lb_cluster_error(r->engine->cluster));
        strings_free(&live);
        strings_free(&staged);
        return -1;
    }
    if (old.found)
        printf("  an earlier replay did not finish: %s, started %s, selection '%s'; it swapped "
               "%zu board(s)%s%s%s\n",
               old.owner, old.started, old.selection, old.swapped, old.swapped ? " (" : "",
               old.examples,
               old.swapped > 5 ? ", ...)"
               : old.swapped   ? ")"
                               : "");
    if (staged.count)
        printf("  %zu staging key(s) left by an earlier run %s\n", staged.count,
               r->o.dry_run ? "would be deleted" : "are deleted before reading");
    if (old.found || staged.count)
        printf("  (this run rebuilds its whole selection; boards swapped before are simply "
               "rebuilt again)\n");
    fflush(stdout);
    strings_free(&live);
    strings_free(&staged);
    return 0;
}

/* The end of a run that holds the lease: on success the journal goes; on
 * failure or interrupt, staging keys and fences this run set are removed
 * (every swap is atomic per board, so nothing is half-swapped), the journal
 * stays for the next run to show, and one line says what was done. */
static int finish(struct replay *r, int status)
{
    if (status == EXIT_GAP) {
        /* refused before writing anything */
    } else if (status == EXIT_OK || status == EXIT_DIFFERENT) {
        clear_staging(r, NULL);
        replay_journal_finish(&r->lease);
    } else {
        struct strings fenced = boards_of(&r->fenced);
        fence_boards(r, &fenced, 1);
        strings_free(&fenced);
        size_t deleted = 0;
        int cleared = clear_staging(r, &deleted) == 0;
        fprintf(stderr,
                "replay: %s: %zu of %zu board(s) swapped (each swap is atomic; the others are "
                "untouched)%s; run replay again to finish\n",
                interrupted ? "interrupted" : "stopped on the error above", r->sel.done.count,
                r->sel.seen.count,
                cleared ? ", staging keys deleted" : ", staging keys left for the next run");
    }
    replay_lease_release(&r->lease);
    return status;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: replay --config FILE (--slots LIST | --node HOST:PORT | --board ID...)\n"
            "              [--window SUFFIX...] [--from SPEC] [--to SPEC]\n"
            "              [--dry-run] [--allow-gap] [--verify] [--max-rate N] [--verbose]\n"
            "\n"
            "Rebuilds the selected leaderboards from the events Kafka retains, through the\n"
            "projector's own engine, beside the running projector (see ops/runbooks).\n"
            "\n"
            "What to rebuild (at least one; together they narrow):\n"
            "  --slots LIST         hash slots, e.g. 0-5460,12000\n"
            "  --node HOST:PORT     the slots that master owns now\n"
            "  --board ID           a board id or a pattern (ach:*); repeatable\n"
            "  --window SUFFIX      only these windows of the boards, e.g. alltime,\n"
            "                       weekly:2026-W18; repeatable\n"
            "What to read (every partition of the configured topics):\n"
            "  --from SPEC          earliest (default), an offset, or an RFC 3339 time\n"
            "  --to SPEC            committed (the live group's offsets; default),\n"
            "                       latest, an offset or an RFC 3339 time\n"
            "How:\n"
            "  --dry-run            print the plan and stop\n"
            "  --allow-gap          run although retention deleted events in the range\n"
            "  --verify             compare the selection with Redis instead of writing it\n"
            "  --max-rate N         read at most N events per second\n"
            "  --verbose            per-partition progress\n"
            "\n"
            "Exit: 0 done, 1 Kafka/Redis failure, 2 usage, 3 configuration,\n"
            "      4 retention gap (refused without --allow-gap), 5 --verify found differences\n"
            "\n"
            "Examples:\n"
            "  replay --config /etc/projector.yaml --node 10.0.0.7:6379 --dry-run\n"
            "  replay --config /etc/projector.yaml --node 10.0.0.7:6379\n"
            "  replay --config /etc/projector.yaml --node 10.0.0.7:6379 --verify\n"
            "  replay --config /etc/projector.yaml --board 'ach:*' --from 2026-05-01T00:00:00Z\n");
}

static int node_slots(struct replay *r, const char *node)
{
    int found = 0;
    for (int s = 0; s < LB_SLOTS; s++) {
        const char *owner = lb_cluster_slot_owner(r->engine->cluster, (uint16_t)s);
        if (owner && strcmp(owner, node) == 0) {
            r->sel.slots[s] = 1;
            found = 1;
        }
    }
    r->sel.any_slots = 1;
    return found ? 0 : -1;
}

int main(int argc, char **argv)
{
    enum { O_ALLOW_GAP = 256, O_MAX_RATE, O_VERBOSE };
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"slots", required_argument, NULL, 's'},
                                             {"node", required_argument, NULL, 'n'},
                                             {"board", required_argument, NULL, 'b'},
                                             {"window", required_argument, NULL, 'w'},
                                             {"from", required_argument, NULL, 'f'},
                                             {"to", required_argument, NULL, 't'},
                                             {"dry-run", no_argument, NULL, 'd'},
                                             {"allow-gap", no_argument, NULL, O_ALLOW_GAP},
                                             {"verify", no_argument, NULL, 'v'},
                                             {"max-rate", required_argument, NULL, O_MAX_RATE},
                                             {"verbose", no_argument, NULL, O_VERBOSE},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    static struct replay r;
    char err[1024], *end;
    int opt, status = EXIT_OK;

    r.o.from = "earliest";
    r.o.to = "committed";
    while ((opt = getopt_long(argc, argv, "c:s:n:b:w:f:t:dvh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            r.o.config_path = optarg;
            break;
        case 's':
            if (parse_slots(optarg, &r.sel) != 0) {
                fprintf(stderr,
                        "replay: --slots wants slots 0..16383 like 0-5460,12000, not "
                        "'%s'\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        case 'n':
            r.o.node = optarg;
            break;
        case 'b':
            strings_add(&r.sel.boards, optarg, strlen(optarg));
            break;
        case 'w':
            strings_add(&r.sel.windows, optarg, strlen(optarg));
            break;
        case 'f':
            r.o.from = optarg;
            break;
        case 't':
            r.o.to = optarg;
            break;
        case 'd':
            r.o.dry_run = 1;
            break;
        case O_ALLOW_GAP:
            r.o.allow_gap = 1;
            break;
        case 'v':
            r.o.verify = 1;
            break;
        case O_MAX_RATE:
            r.o.max_rate = strtod(optarg, &end);
            if (*end || r.o.max_rate <= 0) {
                fprintf(stderr, "replay: --max-rate wants events per second, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case O_VERBOSE:
            r.o.verbose = 1;
            break;
        case 'h':
            usage(stdout);
            return EXIT_OK;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!r.o.config_path || optind != argc ||
        (!r.sel.any_slots && !r.o.node && !r.sel.boards.count)) {
        if (r.o.config_path && optind == argc)
            fprintf(stderr, "replay: say what to rebuild: --slots, --node or --board\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    for (const char *spec = r.o.from, *name = "--from"; spec;
         spec = spec == r.o.from ? r.o.to : NULL, name = "--to") {
        if (!offset_spec_valid(spec)) {
            fprintf(stderr,
                    "replay: %s wants earliest, latest, committed, an offset or an RFC 3339 "
                    "time like 2026-05-04T00:00:00Z, not '%s'\n",
                    name, spec);
            return EXIT_USAGE;
        }
    }
    describe_selection(&r, argc, argv);
    lb_log_threshold = r.o.verbose ? LB_LOG_INFO : LB_LOG_ERROR;
    /* librdkafka's own lines only with --verbose: replay says what failed */
    lb_kafka_log_quiet = !r.o.verbose;
    if (lb_config_load(r.o.config_path, &r.config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return EXIT_CONFIG;
    }
    snprintf(r.staging_prefix, sizeof(r.staging_prefix), "%s%s", r.config->key_prefix,
             STAGING_INFIX);
    enum lb_error_class class;
    struct lb_engine_options eopts = {.key_prefix = r.staging_prefix};
    if (!(r.engine = lb_engine_open(r.config, &eopts, err, sizeof(err), &class))) {
        fprintf(stderr, "%s%s\n", class == LB_ERROR_CONFIG ? "" : "replay: ", err);
        lb_config_free(r.config);
        return class == LB_ERROR_CONFIG ? EXIT_CONFIG : EXIT_BROKEN;
    }
    r.tty = isatty(STDERR_FILENO);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN); /* stdout piped to a pager that quit */

    struct lb_cluster_options copts = r.engine->cluster_options;
    char group[256];
    snprintf(group, sizeof(group), "lb-replay-%ld", (long)getpid());
    if (lb_cluster_refresh(r.engine->cluster) != 0) {
        fprintf(stderr, "replay: cannot reach Redis: %s\n", lb_cluster_error(r.engine->cluster));
        status = EXIT_BROKEN;
        goto out;
    }
    if (r.o.node && node_slots(&r, r.o.node) != 0) {
        fprintf(stderr,
                "replay: %s owns no slots now (masters are named host:port as in "
                "CLUSTER SHARDS)\n",
                r.o.node);
        status = EXIT_USAGE;
        goto out;
    }
    struct lb_kafka_options kafka = lb_config_kafka(r.config);
    if (!(r.meta = lb_kafka_reader(&kafka, r.config->group, err, sizeof(err))) ||
        !(r.reader = lb_kafka_reader(&kafka, group, err, sizeof(err)))) {
        fprintf(stderr, "replay: Kafka: %s\n", err);
        status = EXIT_CONFIG;
        goto out;
    }
    if (make_plan(r.meta, r.config, &r.o, &r.plan) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    /* The lease has its own connections: it is renewed while a batch is in
     * Redis, and a cluster client serves one call at a time. */
    copts.script = copts.script_sha = NULL;
    if (!r.o.dry_run && !(r.lease_cluster = lb_cluster_new(&copts))) {
        fprintf(stderr, "replay: out of memory\n");
        status = EXIT_BROKEN;
        goto out;
    }
    if (!r.o.dry_run) {
        int rc =
            replay_lease_take(&r.lease, r.lease_cluster, r.config->key_prefix, err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "replay: %s\n", err);
            status = EXIT_BROKEN;
            goto out;
        }
    }
    int gaps = print_plan(&r.plan, &r.o, r.config->group);
    if (print_leftovers(&r) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    if (gaps && !r.o.allow_gap) {
        fprintf(stderr,
                "replay: refusing to run with a retention gap in %d partition(s); the "
                "rebuilt boards would lack the deleted events. Run with --allow-gap to "
                "rebuild from what is left.\n",
                gaps);
        status = EXIT_GAP;
        goto out;
    }
    if (r.o.dry_run)
        goto out;

    lb_pipeline_set_filter(r.engine->pipeline, filter_event, &r.sel);
    size_t leftovers = 0;
    if (clear_staging(&r, &leftovers) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    replay_journal_start(&r.lease, r.selection);
    r.started = mono_s();
    if (read_until_end(&r) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    progress(&r, 1);
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(r.engine->pipeline);
    uint64_t rejected = 0;
    for (int i = 0; i < LB_REJECT__COUNT; i++)
        rejected += ps->rejected[i];
    double secs = mono_s() - r.started;
    if (r.o.verify) {
        struct verify_report v = {0};
        if (verify_all(&r, &v) != 0) {
            status = EXIT_BROKEN;
            goto out;
        }
        printf("replay --verify: %zu board(s), %zu key(s) checked, %zu differing; members: %zu "
               "missing, %zu extra, %zu different\n",
               r.sel.seen.count, v.keys_checked, v.keys_differing, v.missing, v.extra, v.different);
        status = v.keys_differing ? EXIT_DIFFERENT : EXIT_OK;
    } else {
        /* Catch up with everything Kafka has now, so the rebuilt keys hold
         * every event the live projector may have applied before the loss. */
        size_t swapped = 0;
        if (extend_to_latest(&r) != 0 || read_until_end(&r) != 0 || swap_all(&r, &swapped) != 0)
            status = EXIT_BROKEN;
        if (status == EXIT_OK)
            printf("replay: %llu events read in %.1f s (%.0f/s), %llu in the selection applied, "
                   "%llu rejected; %zu of %zu board(s) rebuilt\n",
                   (unsigned long long)r.read, secs, secs > 0 ? (double)r.read / secs : 0.0,
                   (unsigned long long)(ps->records - ps->filtered - rejected),
                   (unsigned long long)rejected, swapped, r.sel.seen.count);
    }
out:
    if (interrupted && status != EXIT_USAGE && status != EXIT_CONFIG)
        status = EXIT_BROKEN;
    if (r.lease.held)
        status = finish(&r, status);
    if (r.reader) {
        rd_kafka_consumer_close(r.reader);
        rd_kafka_destroy(r.reader);
    }
    if (r.meta)
        rd_kafka_destroy(r.meta);
    free(r.plan.parts);
    lb_cluster_free(r.lease_cluster);
    lb_engine_close(r.engine);
    lb_config_free(r.config);
    strings_free(&r.sel.boards);
    strings_free(&r.sel.windows);
    board_set_free(&r.sel.seen);
    board_set_free(&r.sel.done);
    board_set_free(&r.fenced);
    return status;
}
