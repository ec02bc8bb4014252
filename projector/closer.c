/* Final standings of closed windows, the pod's part; see closer.h. */
#include "closer.h"
#include "apply.h"
#include "clock.h"
#include "kafka.h"
#include "log.h"
#include "names.h"
#include "published.h"
#include "results.h"
#include "slot.h"
#include "sweep.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAX 1024
/* Boards whose ~open and ~final one round of reads covers: every master's
 * reads of a round go in one pipeline, not one call each (a sweep reads
 * every known board, and a round trip per board held the pod's loop for
 * as many). */
#define LOOK_BOARDS 256

/* A window being published by this pod. */
struct pub {
    char *board, *window; /* window: "weekly:2026-W48" */
    char *offsets;        /* its close offsets (~final's o:), a header of each record */
    const struct lb_profile *profile;
    const struct lb_window_config *wc;
    uint32_t parts, acked;
    uint32_t produced, lost; /* records produced; of those, not delivered */
    int in_flight;           /* produced: acknowledgements pending */
    int failed;              /* a part was not delivered: claimed again later */
    int64_t done_again;      /* every part acknowledged, "done" failed: tried again then */
};

struct lb_closer {
    struct lb_closer_options o;
    struct lb_cluster *cluster;
    /* the close watermark, read by a thread of its own on a client of its
     * own (the group's commits; it never joins the group), so that the
     * brokers' answers never hold up the batches */
    rd_kafka_t *reader;
    pthread_t thread;
    int started, stopping;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int64_t read_watermark; /* -1 unknown */
    /* what the results topic holds (published.h), read on the same thread */
    struct lb_published *index;
    int index_waited;  /* said that claims wait for it */
    size_t part_bytes; /* a record's bytes at most; 0: the topic's limit not known yet (lock) */
    rd_kafka_t *producer;
    rd_kafka_topic_t *topic;
    char holder[128];
    struct lb_names boards; /* boards with results, known to this pod: every board
                             * request written is looked up in it */
    struct known {
        int64_t due; /* its earliest close instant in ~open (0: not read yet, and its ~final
                      * not either: a window a pod gone left claimed) */
        int again;   /* its ~final read again at the next check: a window's claim or what
                      * follows failed, found another publisher's lease, or waits */
    } * known;       /* each board's, at its place */
    size_t cap_known;
    struct pub **pubs;
    size_t npubs, cap_pubs;
    int64_t next_check, next_sweep;
    struct lb_sweep scan; /* a sweep runs a page per step: first ~open keys, then ~final */
    int scan_final;
    char reopened[200]; /* LB_REOPENED_KEY's "at" as last read */
    int reopened_read;
    size_t round; /* boards read in one round (LOOK_BOARDS; tests set fewer) */
    /* a check starts windows until then (step_ms after its first, which
     * always goes; 0: none started yet); those left are started at the
     * next step, which comes at once (deferred) */
    int64_t starts_until, step_ms; /* LB_CLOSER_STEP_MS; tests set less */
    int deferred;
    int busy;    /* out of memory, or the results topic not read yet: every ~final read again
                  * at the next check */
    int recheck; /* windows due waited for the results topic: read ~open again next check */
    /* the slots' ~intact marks (apply.h), as last read: windows of boards
     * in a slot without one are not claimed */
    uint8_t missing[LB_SLOTS];
    int64_t next_intact; /* read (again) then: 0 at once */
    int intact_seen;     /* read once: a cluster without any mark is no longer taken as new */
    int marking_all;     /* the first read found none: every slot is marked, until done */
    struct lb_closer_stats stats;
    struct lb_ratelimit said, reopening_said, lost_said;
};

static void *watch(void *arg);

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    struct lb_closer *c = opaque;
    struct pub *pub = msg->_private;
    (void)rk;
    if (msg->err) {
        pub->failed = 1;
        pub->lost++;
        c->stats.failures++;
        lb_log_every(&c->said, 10000, LB_LOG_WARN, "results",
                     "final standings of board '%s' window '%s' not delivered: %s; trying again",
                     pub->board, pub->window, rd_kafka_err2str(msg->err));
    } else {
        pub->acked++;
    }
}

/* Every part of a window to the partition of its first part's key: the
 * key up to "#<part>" picks it, as the default partitioner would. */
static int32_t by_window(const rd_kafka_topic_t *rkt, const void *key, size_t len, int32_t n,
                         void *topic_opaque, void *msg_opaque)
{
    const char *close = key ? memchr(key, '}', len) : NULL;
    const char *hash = close ? memchr(close, '#', len - (size_t)(close - (const char *)key)) : NULL;
    if (hash)
        len = (size_t)(hash - (const char *)key);
    return rd_kafka_msg_partitioner_consistent_random(rkt, key, len, n, topic_opaque, msg_opaque);
}

static void closer_callbacks(rd_kafka_conf_t *conf, void *ctx)
{
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, ctx);
}

static rd_kafka_topic_t *results_topic(rd_kafka_t *producer, const char *name)
{
    rd_kafka_topic_conf_t *conf = rd_kafka_topic_conf_new();
    if (!conf)
        return NULL;
    rd_kafka_topic_conf_set_partitioner_cb(conf, by_window);
    rd_kafka_topic_t *t = rd_kafka_topic_new(producer, name, conf);
    if (!t)
        rd_kafka_topic_conf_destroy(conf);
    return t;
}

/* A test's setting from the environment, used when it is at least 'least'
 * and less than the pod's own value 'normal', which is kept otherwise: a
 * test may make the closer smaller, never larger. */
static int test_setting(const char *name, int least, int normal)
{
    const char *v = getenv(name);
    int n = v ? atoi(v) : normal;
    return n >= least && n < normal ? n : normal;
}

struct lb_closer *lb_closer_new(const struct lb_closer_options *options, char *err, size_t errlen,
                                enum lb_error_class *class)
{
    static const char *const defaults[][2] = {{"enable.idempotence", "true"},
                                              {"acks", "all"},
                                              {"linger.ms", "5"},
                                              {"message.max.bytes", "1000000"},
                                              /* a part alone in its batch: the topic's
                                               * max.message.bytes limits a batch */
                                              {"batch.num.messages", "1"},
                                              {"message.timeout.ms", "30000"}};
    struct lb_closer *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->o = *options;
    c->stats.watermark = c->read_watermark = -1;
    c->stats.unrebuilt_slots = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    lb_lease_holder(c->holder, sizeof(c->holder));
    c->round = (size_t)test_setting("LB_FAULT_CLOSER_ROUND", 1, LOOK_BOARDS);   /* a few boards */
    c->step_ms = test_setting("LB_FAULT_CLOSER_STEP_MS", 0, LB_CLOSER_STEP_MS); /* one a step */
    struct lb_kafka_options kafka = lb_config_kafka(options->config);
    struct lb_kafka_client client = {.type = RD_KAFKA_PRODUCER,
                                     .defaults = defaults,
                                     .ndefaults = sizeof(defaults) / sizeof(defaults[0]),
                                     .setup = closer_callbacks,
                                     .ctx = c};
    const char *const group[][2] = {{"group.id", options->config->group},
                                    {"enable.auto.commit", "false"}};
    struct lb_kafka_client reader = {.type = RD_KAFKA_CONSUMER, .fixed = group, .nfixed = 2};
    if (!(c->cluster = lb_cluster_new(options->cluster)) ||
        !(c->producer = lb_kafka_new(&kafka, &client, err, errlen, class)) ||
        !(c->topic = results_topic(c->producer, options->config->results_topic)) ||
        !(c->reader = lb_kafka_new(&kafka, &reader, err, errlen, class)) ||
        !(c->index = lb_published_new(&kafka, options->config->group,
                                      options->config->results_topic, err, errlen)) ||
        pthread_create(&c->thread, NULL, watch, c) != 0) {
        if (!c->cluster)
            snprintf(err, errlen, "out of memory");
        else if (c->producer && !c->topic)
            snprintf(err, errlen, "results topic %s: %s", options->config->results_topic,
                     rd_kafka_err2str(rd_kafka_last_error()));
        else if (c->index)
            snprintf(err, errlen, "cannot start a thread");
        lb_closer_free(c, 0);
        return NULL;
    }
    c->started = 1;
    return c;
}

static void pub_free(struct pub *pub)
{
    free(pub->board);
    free(pub->window);
    free(pub->offsets);
    free(pub);
}

void lb_closer_free(struct lb_closer *c, int timeout_ms)
{
    if (!c)
        return;
    if (c->started) {
        pthread_mutex_lock(&c->lock);
        c->stopping = 1;
        pthread_cond_signal(&c->wake);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->thread, NULL);
    }
    if (c->reader)
        rd_kafka_destroy(c->reader);
    lb_published_free(c->index);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    if (c->producer) {
        rd_kafka_flush(c->producer, timeout_ms);
        /* what is not acknowledged stays claimed: published again later */
        rd_kafka_purge(c->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(c->producer, 0);
    }
    if (c->topic)
        rd_kafka_topic_destroy(c->topic);
    if (c->producer)
        rd_kafka_destroy(c->producer);
    lb_cluster_free(c->cluster);
    lb_sweep_free(&c->scan);
    lb_names_free(&c->boards);
    free(c->known);
    for (size_t i = 0; i < c->npubs; i++)
        pub_free(c->pubs[i]);
    free(c->pubs);
    free(c);
}

void lb_closer_note(struct lb_closer *c, struct lb_str board, int opened)
{
    long known = lb_names_find(&c->boards, board.ptr, board.len);
    if (known >= 0) {
        if (opened)
            c->known[known].due = 0; /* a late event may open a window the watermark passed */
        return;
    }
    if (c->boards.count == c->cap_known) {
        size_t cap = c->cap_known ? 2 * c->cap_known : 16;
        struct known *more = realloc(c->known, cap * sizeof(*more));
        if (!more)
            return; /* the sweep finds it */
        c->known = more;
        c->cap_known = cap;
    }
    long i = lb_names_add(&c->boards, board.ptr, board.len);
    if (i >= 0)
        c->known[i] = (struct known){0, 0};
}

/* The ~final of 'board' read again at the next check (every board's when
 * it is not known). */
static void again(struct lb_closer *c, const char *board)
{
    long i = lb_names_find(&c->boards, board, strlen(board));
    if (i >= 0)
        c->known[i].again = 1;
    else
        c->busy = 1;
}

/* ---- the close watermark ---------------------------------------------------------- */

static int64_t close_watermark(struct lb_closer *c)
{
    static struct lb_ratelimit said;
    const struct lb_config *config = c->o.config;
    int64_t low = -1;
    for (size_t t = 0; t < config->ntopics; t++) {
        struct lb_partition_offsets *po;
        rd_kafka_resp_err_t err;
        const char *what;
        int n = lb_kafka_group_offsets(c->reader, config->topics[t], 5000, &po, &err, &what);
        if (n < 0) {
            lb_log_every(&said, 10000, LB_LOG_WARN, "results",
                         "%s of topic %s: %s; no window closes until it answers", what,
                         config->topics[t], rd_kafka_err2str(err));
            return -1;
        }
        struct lb_partition_mark *marks = calloc((size_t)n, sizeof(*marks));
        int64_t w = -1;
        if (marks) {
            for (int p = 0; p < n; p++)
                marks[p] = (struct lb_partition_mark){po[p].committed, po[p].high, po[p].watermark};
            w = lb_results_watermark(marks, (size_t)n, config->results_idle_ms);
        }
        free(marks);
        free(po);
        if (w < 0)
            return -1;
        if (low < 0 || w < low)
            low = w;
    }
    return low;
}

int lb_closer_check_size(struct lb_closer *c, int timeout_ms, char *err, size_t errlen)
{
    const struct lb_config *config = c->o.config;
    int64_t max = 0;
    int rc =
        lb_kafka_topic_max_bytes(c->producer, config->results_topic, timeout_ms, &max, err, errlen);
    if (rc == 1)
        snprintf(err, errlen,
                 "results topic %s does not exist: create it (lbadmin create-topic, with "
                 "cleanup.policy=compact)",
                 config->results_topic);
    if (rc != 0)
        return 1;
    size_t part = max > LB_CLOSER_FRAMING + 1024 ? (size_t)(max - LB_CLOSER_FRAMING) : 1024;
    if (part > LB_CLOSER_PART_BYTES)
        part = LB_CLOSER_PART_BYTES;
    for (size_t i = 0; i < config->nprofiles; i++)
        for (size_t k = 0; k < config->profiles[i].nwindows; k++) {
            const struct lb_window_config *w = &config->profiles[i].windows[k];
            if (w->results_top <= 0)
                continue; /* none, or all: numbered parts */
            size_t need = lb_results_record_max(w->results_top);
            if (need > part) {
                snprintf(err, errlen,
                         "%s:%d: results.top %lld: one record of it can take %zu bytes, more than "
                         "topic %s takes (max.message.bytes %lld, less %d for the framing): "
                         "lower top, raise the topic's max.message.bytes, or publish all (in "
                         "numbered parts)",
                         config->path, w->results_line, (long long)w->results_top, need,
                         config->results_topic, (long long)max, LB_CLOSER_FRAMING);
                return -1;
            }
        }
    pthread_mutex_lock(&c->lock);
    c->part_bytes = part;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static void *watch(void *arg)
{
    struct lb_closer *c = arg;
    static struct lb_ratelimit said;
    pthread_mutex_lock(&c->lock);
    while (!c->stopping) {
        pthread_mutex_unlock(&c->lock);
        char err[512];
        if (lb_published_read(c->index, 10000, err, sizeof(err)) != 0)
            lb_log_every(&said, 10000, LB_LOG_WARN, "results", "%s; trying again", err);
        pthread_mutex_lock(&c->lock);
        size_t known = c->part_bytes;
        pthread_mutex_unlock(&c->lock);
        int sized = known ? 0 : lb_closer_check_size(c, 10000, err, sizeof(err));
        if (sized != 0)
            lb_log_every(&said, 10000, sized < 0 ? LB_LOG_ERROR : LB_LOG_WARN, "results",
                         "%s; no window closes until it is%s", err, sized < 0 ? " fixed" : "");
        int64_t w = close_watermark(c);
        pthread_mutex_lock(&c->lock);
        c->read_watermark = w;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += LB_CLOSER_CHECK_MS / 1000;
        while (!c->stopping && pthread_cond_timedwait(&c->wake, &c->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* ---- the script's "C" steps --------------------------------------------------------- */

/* A call that failed: counted, and said at most every 10 s (an ACL rule
 * without the command shows here as NOPERM naming it). */
static void call_failed_because(struct lb_closer *c, const char *what, const char *why)
{
    c->stats.failures++;
    lb_log_every(&c->said, 10000, LB_LOG_WARN, "results", "%s failed: %s; trying again", what, why);
}

static void call_failed(struct lb_closer *c, const char *what, const redisReply *r)
{
    call_failed_because(c, what,
                        !r                             ? lb_cluster_error(c->cluster)
                        : r->type == REDIS_REPLY_ERROR ? r->str
                                                       : "unexpected answer");
}

/* One "C" step of 'pub'; NULL when the call failed (logged). */
static redisReply *c_step(struct lb_closer *c, const struct pub *pub, const char *step,
                          const char **extra, const size_t *extralen, size_t nextra)
{
    redisReply *reply =
        lb_final_step(c->cluster, c->o.key_prefix, pub->board, pub->window, step, c->holder,
                      c->o.config->results_lease_ms, extra, extralen, nextra);
    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
        reply->element[0]->type == REDIS_REPLY_STRING)
        return reply;
    char what[LB_ID_MAX_BYTES + 96];
    snprintf(what, sizeof(what), "final standings of board '%s' window '%s': '%s'", pub->board,
             pub->window, step);
    call_failed(c, what, reply);
    if (reply)
        freeReplyObject(reply);
    return NULL;
}

static int is_word(const redisReply *reply, size_t i, const char *word)
{
    return i < reply->elements && reply->element[i]->type == REDIS_REPLY_STRING &&
           strcmp(reply->element[i]->str, word) == 0;
}

static long long integer_of(const redisReply *reply, size_t i)
{
    return i < reply->elements && reply->element[i]->type == REDIS_REPLY_STRING
               ? strtoll(reply->element[i]->str, NULL, 10)
           : i < reply->elements && reply->element[i]->type == REDIS_REPLY_INTEGER
               ? reply->element[i]->integer
               : -1;
}

/* Keeps part 'part' (its bytes, made here) and produces the bytes kept. */
static int keep_and_produce(struct lb_closer *c, struct pub *pub, uint32_t part,
                            const uint8_t *bytes, size_t len)
{
    char number[16];
    const char *extra[] = {number, (const char *)bytes};
    size_t extralen[] = {(size_t)snprintf(number, sizeof(number), "%u", part), len};
    redisReply *reply = c_step(c, pub, "keep", extra, extralen, 2);
    if (!reply)
        return -1;
    int rc = -1;
    if (is_word(reply, 0, "ok") && reply->elements == 2 &&
        reply->element[1]->type == REDIS_REPLY_STRING) {
        char key[KEY_MAX];
        size_t klen = lb_results_record_key(pub->board, pub->window, part, key, sizeof(key));
        const char *offsets = pub->offsets ? pub->offsets : "";
        rd_kafka_resp_err_t e = rd_kafka_producev(
            c->producer, RD_KAFKA_V_RKT(c->topic), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_VALUE(reply->element[1]->str, reply->element[1]->len),
            RD_KAFKA_V_KEY(key, klen),
            RD_KAFKA_V_HEADER(LB_CLOSE_OFFSETS_HEADER, offsets, (ssize_t)strlen(offsets)),
            RD_KAFKA_V_OPAQUE(pub), RD_KAFKA_V_END);
        if (!e) {
            pub->produced++;
            rc = 0;
            if (getenv("LB_FAULT_CRASH_BEFORE_ACK")) { /* tests: a pod lost in between */
                LB_WARN("results",
                        "LB_FAULT_CRASH_BEFORE_ACK: exiting with board '%s' window '%s' "
                        "claimed and its record produced, not acknowledged",
                        pub->board, pub->window);
                _exit(70);
            }
        } else
            lb_log_every(&c->said, 10000, LB_LOG_WARN, "results",
                         "final standings of board '%s' window '%s': %s; trying again", pub->board,
                         pub->window, rd_kafka_err2str(e));
    }
    freeReplyObject(reply);
    return rc;
}

/* Makes the records of the frozen standings in 'frozen' (ZRANGE, best
 * first, with scores) and keeps and produces each. */
static int publish(struct lb_closer *c, struct pub *pub, const redisReply *frozen,
                   int64_t closed_at, int64_t players)
{
    size_t n = frozen->elements / 2;
    pthread_mutex_lock(&c->lock);
    size_t part_bytes = c->part_bytes; /* known: restore() waited for it */
    pthread_mutex_unlock(&c->lock);
    struct lb_standing *e = calloc(n ? n : 1, sizeof(*e));
    uint8_t *buf = malloc(part_bytes);
    int rc = e && buf ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const redisReply *m = frozen->element[2 * i], *s = frozen->element[2 * i + 1];
        e[i] = (struct lb_standing){
            .player = m->str, .len = m->len, .composite = (int64_t)strtod(s->str, NULL)};
    }
    int64_t id;
    struct lb_window_span span = {0};
    const char *label = strchr(pub->window, ':');
    if (rc == 0 && label && lb_window_label_parse(pub->wc->kind, label + 1, &id) == 0)
        lb_window_span_of(pub->wc->kind, id, &span);
    if (rc == 0)
        lb_results_rank(&pub->profile->scoring, e, n, 1, NULL);
    struct lb_result_head head = {.board = pub->board,
                                  .window = pub->window,
                                  .kind = pub->wc->kind,
                                  .start_ms = span.start_ms,
                                  .end_ms = span.end_ms,
                                  .closed_at_ms = closed_at,
                                  .players = players,
                                  .schema_id = (int32_t)c->o.config->results_schema_id};
    /* parts: as many entries as fit each */
    size_t *first = calloc(n + 2, sizeof(*first)), parts = 0, room = 0;
    rc = rc == 0 && first ? 0 : -1;
    for (size_t i = 0; rc == 0 && i <= n; i++) {
        size_t need = i < n ? lb_results_entry_max(e[i].len) : 0;
        if (i == 0 || (i < n && room < need)) {
            first[parts++] = i;
            room = part_bytes - lb_results_head_max(&head);
        }
        room -= need < room ? need : room;
    }
    if (first)
        first[parts] = n;
    pub->parts = (uint32_t)parts;
    pub->acked = pub->produced = pub->lost = 0;
    pub->failed = 0;
    head.parts = (int32_t)parts;
    for (size_t k = 0; rc == 0 && k < parts; k++) {
        head.part = (int32_t)k + 1;
        size_t len =
            lb_results_encode(&head, e + first[k], first[k + 1] - first[k], buf, part_bytes);
        rc = len && keep_and_produce(c, pub, (uint32_t)k + 1, buf, len) == 0 ? 0 : -1;
    }
    /* a part not produced: the window is claimed again later; the parts
     * produced still carry 'pub' (their reports come): it stays until then */
    pub->failed |= rc != 0;
    pub->in_flight = pub->produced > 0;
    free(first);
    free(buf);
    free(e);
    return rc;
}

/* A window due whose board's slot has no ~intact mark. */
static void waits_for_replay(struct lb_closer *c, const char *board, const char *window,
                             uint16_t slot)
{
    lb_log_every(&c->lost_said, 60000, LB_LOG_WARN, "results",
                 "board '%s' window '%s' closed, but slot %u has no %s mark: its node was "
                 "replaced empty or flushed and replay has not rebuilt it; the window "
                 "closes once replay --node (or --slots) has (ops/runbooks/lost-shard.md)",
                 board, window, (unsigned)slot, LB_INTACT_KEY);
}

/* Claims 'pub' (or takes over its claim) and publishes it. 0 in flight or
 * nothing to do (published, another's), -1 failed. */
static int claim(struct lb_closer *c, struct pub *pub, int64_t watermark)
{
    char top[24], at[24];
    int desc = pub->profile->scoring.order == LB_ORDER_DESC;
    const char *extra[] = {top, desc ? "d" : "a", at};
    size_t extralen[] = {
        (size_t)snprintf(top, sizeof(top), "%lld", (long long)pub->wc->results_top), 1,
        (size_t)snprintf(at, sizeof(at), "%lld", (long long)watermark)};
    redisReply *reply = c_step(c, pub, "claim", extra, extralen, 3);
    if (!reply)
        return -1;
    int rc = 0;
    if (is_word(reply, 0, "go") && reply->elements == 4) {
        int64_t closed_at = integer_of(reply, 1), players = integer_of(reply, 2);
        const redisReply *o = reply->element[3];
        c->stats.claimed++;
        free(pub->offsets);
        pub->offsets = strndup(o->type == REDIS_REPLY_STRING ? o->str : "",
                               o->type == REDIS_REPLY_STRING ? o->len : 0);
        if (!pub->offsets) { /* every record carries them */
            call_failed_because(c, "claiming a window", "out of memory");
            freeReplyObject(reply);
            return -1;
        }
        char key[KEY_MAX];
        size_t klen =
            lb_final_key(c->o.key_prefix, (struct lb_str){pub->board, (uint32_t)strlen(pub->board)},
                         pub->window, key, sizeof(key));
        const char *zr[] = {"ZRANGE", key, "0", "-1", desc ? "REV" : "WITHSCORES", "WITHSCORES"};
        size_t zl[] = {6, klen, 1, 2, desc ? 3 : 10, 10};
        redisReply *frozen =
            lb_cluster_command(c->cluster, lb_key_slot(key, klen), desc ? 6 : 5, zr, zl);
        if (frozen && frozen->type == REDIS_REPLY_ARRAY) {
            rc = publish(c, pub, frozen, closed_at, players);
        } else {
            call_failed(c, "reading the final standings", frozen);
            rc = -1;
        }
        if (frozen)
            freeReplyObject(frozen);
    } else if (is_word(reply, 0, "busy")) {
        again(c, pub->board);
    } else if (is_word(reply, 0, "lost")) {
        /* its node came back empty (or was flushed) and replay has not
         * rebuilt it: frozen now, the standings would miss what was lost */
        uint16_t slot = lb_key_slot(pub->board, strlen(pub->board));
        if (!c->missing[slot])
            c->next_intact = 0; /* lost since the last read: the marks read again */
        c->missing[slot] = 1;
        waits_for_replay(c, pub->board, pub->window, slot);
        rc = -1;
    } else if (is_word(reply, 0, "reopening")) {
        /* replay --republish rebuilds it: reopened once done (a sweep
         * finds it then) */
        lb_log_every(&c->reopening_said, 60000, LB_LOG_INFO, "results",
                     "board '%s' window '%s' is being reopened by replay --republish: it "
                     "closes again once replay has rebuilt it",
                     pub->board, pub->window);
    } else if (!is_word(reply, 0, "published")) {
        c->stats.failures++;
        lb_log_every(&c->said, 10000, LB_LOG_ERROR, "results",
                     "final standings of board '%s' window '%s': the script answered %s %s (an "
                     "operator must fix the key or the ACL rule)",
                     pub->board, pub->window, reply->element[0]->str,
                     reply->elements > 1 && reply->element[1]->type == REDIS_REPLY_STRING
                         ? reply->element[1]->str
                         : "");
        rc = -1;
    }
    freeReplyObject(reply);
    return rc;
}

/* Marks 'pub' published once every part was acknowledged; -1 when the
 * call failed (tried again: its records are not sent again). */
static int finish(struct lb_closer *c, struct pub *pub)
{
    const char *extra[] = {c->o.config->results_keep ? "1" : "0"};
    size_t extralen[] = {1};
    redisReply *reply = c_step(c, pub, "done", extra, extralen, 1);
    if (!reply)
        return -1;
    if (is_word(reply, 0, "ok")) {
        c->stats.published++;
        c->stats.records += pub->parts;
        LB_INFO("results", "published the final standings of board '%s' window '%s' (%u record(s))",
                pub->board, pub->window, pub->parts);
    }
    freeReplyObject(reply);
    return 0; /* or stale: another publisher took it over */
}

/* ---- finding windows ---------------------------------------------------------------- */

static int pending(const struct lb_closer *c, const char *board, const char *window)
{
    for (size_t i = 0; i < c->npubs; i++)
        if (strcmp(c->pubs[i]->board, board) == 0 && strcmp(c->pubs[i]->window, window) == 0)
            return 1;
    return 0;
}

/* A window the results topic holds was published: where its board lost
 * ~final (its shard lost), the window is put back as it closed, and not
 * closed again (published.h). 1 restored (or not known yet: nothing to do
 * now), 0 claim as usual, -1 failed. */
static int restore(struct lb_closer *c, struct pub *pub)
{
    pthread_mutex_lock(&c->lock);
    size_t part = c->part_bytes;
    pthread_mutex_unlock(&c->lock);
    if (!lb_published_ready(c->index) || !part) {
        c->recheck = c->busy = 1; /* ~open and ~final read again at the next check */
        if (!c->index_waited++)
            LB_INFO("results",
                    "closing windows waits until results topic %s was read and its "
                    "max.message.bytes known",
                    c->o.config->results_topic);
        return 1;
    }
    if (!lb_published_has(c->index, pub->board, pub->window))
        return 0;
    char err[512];
    struct lb_publication publication;
    int rc = lb_published_fetch(c->index, pub->board, pub->window, &publication, 10000, err,
                                sizeof(err));
    if (rc == 0)
        rc =
            lb_published_restore(c->cluster, c->o.key_prefix, pub->profile, pub->board, pub->window,
                                 &publication, c->o.config->results_keep, err, sizeof(err));
    lb_publication_free(&publication);
    if (rc == 1) {
        c->stats.restored++;
        LB_WARN("results",
                "board '%s' window '%s' was published and its ~final is gone (its shard lost?): "
                "put back from results topic %s as it closed, not closed again",
                pub->board, pub->window, c->o.config->results_topic);
    } else if (rc < 0) {
        c->stats.failures++;
        lb_log_every(&c->said, 10000, LB_LOG_WARN, "results", "%s; trying again", err);
    }
    return rc;
}

/* Starts publishing 'window' of 'board' (claim, then produce). -1 when a
 * claim or what follows it failed: the board's ~final (again()), and its
 * ~open while the window is listed there (look()), are read again at the
 * next check, where the window still is, listed or claimed by this pod.
 * A restore that failed is tried at the next sweep instead: its read of
 * the results topic may wait 10 s. Also -1 when its slot had no ~intact
 * mark at the last read (~open read again, not ~final). */
static int start(struct lb_closer *c, const char *board, const char *window, int64_t watermark)
{
    const struct lb_profile *profile = lb_config_profile_for(c->o.config, board, strlen(board));
    enum lb_window_kind kind;
    int64_t id;
    if (!profile || lb_window_name_parse(window, &kind, &id) != 0 || pending(c, board, window))
        return 0;
    const struct lb_window_config *wc = NULL;
    for (size_t i = 0; i < profile->nwindows; i++)
        if (profile->windows[i].kind == kind && profile->windows[i].results_top >= 0)
            wc = &profile->windows[i];
    if (!wc)
        return 0; /* results taken out of the configuration: left as they are */
    if (c->npubs == c->cap_pubs) {
        size_t cap = c->cap_pubs ? 2 * c->cap_pubs : 8;
        struct pub **more = realloc(c->pubs, cap * sizeof(*more));
        if (more) {
            c->pubs = more;
            c->cap_pubs = cap;
        }
    }
    int rc = -1; /* out of memory unless tried */
    struct pub *pub = c->npubs < c->cap_pubs ? calloc(1, sizeof(*pub)) : NULL;
    if (pub && (pub->board = strdup(board)) && (pub->window = strdup(window))) {
        pub->profile = profile;
        pub->wc = wc;
        uint16_t slot = lb_key_slot(board, strlen(board));
        int restored = restore(c, pub); /* what the results topic says stands anyway */
        if (restored == 0 && c->missing[slot]) {
            /* its slot without a mark as last read: not claimed, nor asked
             * again until the marks are read again */
            waits_for_replay(c, board, window, slot);
            rc = 1;
        } else {
            rc = restored == 0 && claim(c, pub, watermark) != 0 ? -1 : 0;
        }
    }
    if (pub && pub->in_flight) /* until every record produced was reported */
        c->pubs[c->npubs++] = pub;
    else if (pub)
        pub_free(pub);
    if (rc < 0)
        again(c, board);
    return rc ? -1 : 0;
}

/* Whether the check may start one more window: the first always, more
 * for LB_CLOSER_STEP_MS from it (the pod's batches wait meanwhile). When
 * not, the next step checks again. */
static int may_start(struct lb_closer *c)
{
    int64_t now = lb_monotonic_ms();
    if (!c->starts_until) {
        c->starts_until = now + c->step_ms;
    } else if (now >= c->starts_until) {
        c->deferred = 1;
        return 0;
    }
    return 1;
}

/* The windows of 'board' in its ~open ('open') or ~final, as HGETALL
 * answered ('r', freed here): those of ~open whose close instant the
 * watermark reached, and those of ~final claimed and not published, are
 * started while the check may start more. Returns the earliest close
 * instant of those of ~open not started (INT64_MAX: none): at or before
 * the watermark when some that closed wait for the next step. */
static int64_t look(struct lb_closer *c, const char *board, int open, redisReply *r,
                    int64_t watermark)
{
    int64_t due = INT64_MAX;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str, *v = r->element[i + 1]->str;
        int64_t closes = strtoll(v, NULL, 10);
        if (open && watermark >= 0 && closes <= watermark && may_start(c)) {
            if (start(c, board, f, watermark) != 0 && closes < due)
                due = closes; /* ~open read again at the next check */
        } else if (open && closes < due)
            due = closes;
        else if (!open && strncmp(f, "s:", 2) == 0 && strcmp(v, "claimed") == 0) {
            if (may_start(c))
                start(c, board, f + 2, watermark);
            else
                again(c, board); /* its ~final is read at the next check */
        }
    }
    freeReplyObject(r);
    return due;
}

/* One round of a check, from board 'from' on: reads the ~open of each
 * board that is due (the watermark reached its earliest close; every
 * sweep, since a late event may have opened an older window; not read
 * yet), and the ~final of each whose claimed windows may have lost their
 * publisher; then starts what they name. A board whose read failed is read
 * again at the next check. Returns the place after the last board. */
static size_t look_round(struct lb_closer *c, size_t from, int swept, int busy, int recheck,
                         int64_t watermark)
{
    size_t at[2 * LOOK_BOARDS], cmd[2 * LOOK_BOARDS], n = 0, b = from;
    uint16_t slot[2 * LOOK_BOARDS];
    uint8_t open[2 * LOOK_BOARDS];
    struct lb_buf buf = {0};
    int oom = 0;
    for (; b < c->boards.count && b - from < c->round; b++) {
        struct known *k = &c->known[b];
        int first = !k->due;
        int want[2] = {swept || busy || first || k->again, /* ~final */
                       swept || first || recheck || (watermark >= 0 && watermark >= k->due)};
        if (want[0])
            k->again = 0; /* read now */
        const char *name = c->boards.items[b];
        for (int o = 1; o >= 0 && !oom; o--) {
            if (!want[o])
                continue;
            char key[KEY_MAX];
            size_t klen =
                lb_board_key(c->o.key_prefix, (struct lb_str){name, (uint32_t)strlen(name)},
                             o ? LB_OPEN_KEY : LB_FINAL_KEY, key, sizeof(key));
            const char *argv[] = {"HGETALL", key};
            size_t argvlen[] = {7, klen};
            at[n] = b;
            open[n] = (uint8_t)o;
            slot[n] = lb_key_slot(key, klen);
            cmd[n++] = buf.len;
            oom = lb_buf_command(&buf, 2, argv, argvlen) != 0;
        }
    }
    struct lb_request *reqs = n && !oom ? calloc(n, sizeof(*reqs)) : NULL;
    if (n && !reqs) {
        lb_buf_free(&buf);
        call_failed_because(c, "reading the windows to close", "out of memory");
        c->recheck = c->busy = 1; /* every board's ~open and ~final at the next check */
        return b;
    }
    for (size_t i = 0; i < n; i++) /* the buffer has stopped moving */
        reqs[i] = (struct lb_request){.slot = slot[i],
                                      .ncommands = 1,
                                      .bytes = buf.data + cmd[i],
                                      .len = (i + 1 < n ? cmd[i + 1] : buf.len) - cmd[i]};
    if (n)
        lb_cluster_exec(c->cluster, reqs, n);
    for (size_t i = 0; i < n; i++) {
        redisReply *r = reqs[i].reply;
        if (!reqs[i].ok || !r || r->type != REDIS_REPLY_ARRAY) {
            call_failed_because(c, "reading the windows to close (HGETALL)",
                                !reqs[i].ok ? reqs[i].error
                                : r         ? "unexpected answer"
                                            : "no answer");
            if (r)
                freeReplyObject(r);
            if (open[i])
                c->known[at[i]].due = 0;
            else
                c->known[at[i]].again = 1;
            continue;
        }
        int64_t due = look(c, c->boards.items[at[i]], open[i], r, watermark);
        if (open[i])
            c->known[at[i]].due = due;
    }
    free(reqs);
    lb_buf_free(&buf);
    return b;
}

static void sweep_each(void *ctx, const redisReply *key)
{
    struct lb_closer *c = ctx;
    struct lb_key_parts parts;
    if (lb_key_parse(c->o.key_prefix, key->str, key->len, &parts) == 0)
        lb_closer_note(c, parts.board, 0);
}

/* One page of the sweep of every master for boards with an open or a
 * claimed window; 1 when the sweep is over. */
static int sweep_page(struct lb_closer *c, int64_t now_ms)
{
    /* the masters, by the slots they serve */
    if (!c->scan.running && !c->scan_final && lb_cluster_refresh(c->cluster) != 0) {
        call_failed(c, "finding boards with windows to close (the cluster's slots)", NULL);
        c->next_sweep = now_ms + 10000;
        return 0;
    }
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "%s{*}:%s", c->o.key_prefix,
             c->scan_final ? LB_FINAL_KEY : LB_OPEN_KEY);
    redisReply *failed;
    int done = lb_sweep_page(&c->scan, c->cluster, pattern, NULL, 1000, sweep_each, c, &failed);
    if (done < 0) {
        call_failed(c, "finding boards with windows to close (SCAN)", failed);
        if (failed)
            freeReplyObject(failed);
        c->scan_final = 0;
        c->next_sweep = now_ms + 10000;
        return 0;
    }
    if (!done)
        return 0;
    if (!c->scan_final) {
        c->scan_final = 1;
        return 0;
    }
    c->scan_final = 0;
    c->next_sweep = now_ms + LB_CLOSER_SWEEP_MS;
    c->stats.sweeps++;
    return 1;
}

/* Whether replay --republish reopened windows since the last check (it
 * changes LB_REOPENED_KEY's "at"): they are due at once, and a sweep finds
 * them on boards this pod does not know. */
static int reopened(struct lb_closer *c)
{
    char key[KEY_MAX];
    int klen = snprintf(key, sizeof(key), "%s%s", c->o.key_prefix, LB_REOPENED_KEY);
    const char *argv[] = {"HGET", key, "at"};
    size_t argvlen[] = {4, (size_t)klen, 2};
    redisReply *r =
        lb_cluster_command(c->cluster, lb_key_slot(key, (size_t)klen), 3, argv, argvlen);
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
        call_failed(c, "looking for windows replay reopened (HGET)", r);
        if (r)
            freeReplyObject(r);
        return 0;
    }
    const char *at = r->type == REDIS_REPLY_STRING ? r->str : "";
    int changed = c->reopened_read && strncmp(c->reopened, at, sizeof(c->reopened) - 1) != 0;
    snprintf(c->reopened, sizeof(c->reopened), "%s", at);
    c->reopened_read = 1;
    freeReplyObject(r);
    return changed;
}

/* A cluster without any ~intact mark at this pod's first read: 1 new (the
 * results topic holds no publication), or one that ran the previous
 * release (most boards sampled from the topic have their ~final: some may
 * have been deleted since); 0 one that lost every shard (most have not: a
 * replay of some boards, or a restore, may have put a few back already);
 * -1 not known yet (the topic not read, Redis failing). */
#define FRESH_SAMPLE 64
static int fresh_cluster(struct lb_closer *c)
{
    if (!lb_published_ready(c->index))
        return -1;
    char *boards[FRESH_SAMPLE];
    size_t n = lb_published_boards(c->index, boards, FRESH_SAMPLE);
    size_t present = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        char key[KEY_MAX];
        size_t klen =
            lb_board_key(c->o.key_prefix, (struct lb_str){boards[i], (uint32_t)strlen(boards[i])},
                         LB_FINAL_KEY, key, sizeof(key));
        const char *argv[] = {"EXISTS", key};
        size_t argvlen[] = {6, klen};
        redisReply *r =
            !failed ? lb_cluster_command(c->cluster, lb_key_slot(key, klen), 2, argv, argvlen)
                    : NULL;
        if (!r || r->type != REDIS_REPLY_INTEGER)
            failed++;
        else
            present += r->integer == 1;
        if (r)
            freeReplyObject(r);
        free(boards[i]);
    }
    return failed ? -1 : 2 * present >= n;
}

/* Reads the slots' ~intact marks (apply.h) into 'missing': a cluster
 * without any at this pod's first read is new (or has not run this release
 * yet: fresh_cluster), and every slot is marked (the marks still missing, until that
 * succeeded). Slots without one wait for replay, which tells the pods once
 * it marked them (LB_REOPENED_KEY); read again every sweep interval (the
 * gauge), when a claim answers lost, and soon when the read failed. Once
 * read, a cluster without any lost every shard: nothing is marked. */
static void check_intact(struct lb_closer *c, int64_t now_ms)
{
    uint8_t missing[LB_SLOTS];
    char err[256];
    long before = c->stats.unrebuilt_slots;
    long n = lb_intact_missing(c->cluster, c->o.key_prefix, missing, err, sizeof(err), NULL);
    if (n == LB_SLOTS && !c->intact_seen) {
        int fresh = fresh_cluster(c);
        if (fresh < 0) { /* not known yet */
            c->next_intact = now_ms + LB_CLOSER_CHECK_MS;
            return;
        }
        c->marking_all = fresh;
        if (!fresh)
            LB_WARN("results",
                    "no slot has a %s mark, and boards published in results topic %s have no "
                    "~final: every shard lost its data; no window closes until replay --slots "
                    "0-16383 has rebuilt them (ops/runbooks/lost-shard.md)",
                    LB_INTACT_KEY, c->o.config->results_topic);
    }
    if (n >= 0) { /* as read, whatever marking below does */
        memcpy(c->missing, missing, sizeof(missing));
        c->stats.unrebuilt_slots = n;
    }
    if (n > 0 && c->marking_all) {
        char by[200];
        snprintf(by, sizeof(by), "projector %s (no slot had a mark)", c->holder);
        if (lb_intact_mark(c->cluster, c->o.key_prefix, missing, by, err, sizeof(err), NULL) != 0) {
            n = -1;
        } else {
            LB_INFO("results",
                    "no slot had a %s mark (a new cluster, or the first start of this "
                    "release): every slot marked",
                    LB_INTACT_KEY);
            memset(c->missing, 0, sizeof(c->missing));
            c->stats.unrebuilt_slots = n = 0;
            /* pods that read them midway read again (else within a minute) */
            redisReply *r = lb_reopened_touch(c->cluster, c->o.key_prefix, c->holder);
            if (r)
                freeReplyObject(r);
        }
    }
    if (n < 0) {
        c->stats.failures++;
        lb_log_every(&c->said, 10000, LB_LOG_WARN, "results",
                     "reading or writing the slots' %s marks: %s; trying again", LB_INTACT_KEY,
                     err);
        c->next_intact = now_ms + 5 * LB_CLOSER_CHECK_MS;
        return; /* 'missing' and the gauge as last read */
    }
    if (n == 0)
        c->marking_all = 0;
    if (n > 0 && n != before) {
        long first = 0;
        while (!missing[first])
            first++;
        LB_WARN("results",
                "%ld slot(s) have no %s mark (the first: %ld): their node was replaced empty or "
                "flushed; windows of boards there close once replay --node (or --slots) has "
                "rebuilt them (ops/runbooks/lost-shard.md)",
                n, LB_INTACT_KEY, first);
    }
    c->intact_seen = 1;
    c->next_intact = now_ms + LB_CLOSER_SWEEP_MS;
}

void lb_closer_step(struct lb_closer *c, int64_t now_ms)
{
    rd_kafka_poll(c->producer, 0);
    for (size_t i = 0; i < c->npubs;) {
        struct pub *pub = c->pubs[i];
        if ((pub->in_flight && pub->acked + pub->lost < pub->produced) ||
            (pub->done_again && now_ms < pub->done_again)) {
            i++;
            continue;
        }
        if (!pub->failed && getenv("LB_FAULT_CRASH_BEFORE_DONE")) {
            LB_WARN("results",
                    "LB_FAULT_CRASH_BEFORE_DONE: exiting with board '%s' window '%s' "
                    "acknowledged and not marked published",
                    pub->board, pub->window);
            _exit(70);
        }
        if (!pub->failed && finish(c, pub) != 0) { /* kept while its lease lasts */
            pub->done_again = now_ms + LB_CLOSER_CHECK_MS;
            i++;
            continue;
        }
        if (pub->failed)
            again(c, pub->board); /* a record not delivered: claimed again at the next check */
        pub_free(pub);
        c->pubs[i] = c->pubs[--c->npubs];
    }
    int swept = 0, busy = c->busy, recheck = c->recheck;
    if (c->scan.running || c->scan_final || now_ms >= c->next_sweep)
        swept = sweep_page(c, now_ms);
    if (now_ms < c->next_check && !swept)
        return;
    c->next_check = now_ms + LB_CLOSER_CHECK_MS;
    if (reopened(c)) {
        c->next_intact = 0; /* replay marked slots (or reopened windows) */
        if (!c->scan.running && !c->scan_final)
            c->next_sweep = now_ms; /* the sweep starts at the next step */
    }
    c->busy = c->recheck = 0;
    if (now_ms >= c->next_intact)
        check_intact(c, now_ms);
    pthread_mutex_lock(&c->lock);
    int64_t watermark = c->read_watermark;
    pthread_mutex_unlock(&c->lock);
    c->stats.watermark = watermark;
    c->starts_until = 0; /* set by the first start */
    c->deferred = 0;
    for (size_t b = 0; b < c->boards.count;)
        b = look_round(c, b, swept, busy, recheck, watermark);
    if (c->deferred) /* windows closed that this check did not start: at once */
        c->next_check = now_ms;
}

int64_t lb_closer_next_due(const struct lb_closer *c)
{
    if (c->scan.running || c->scan_final) /* a sweep: a page a step */
        return 0;
    int64_t due = c->next_check < c->next_sweep ? c->next_check : c->next_sweep;
    for (size_t i = 0; i < c->npubs; i++) {
        /* acknowledgements to read: every 10 ms, not at once (the broker may
         * take message.timeout.ms to say a record was lost); a "done" to try
         * again */
        int64_t at = c->pubs[i]->done_again ? c->pubs[i]->done_again : lb_monotonic_ms() + 10;
        due = at < due ? at : due;
    }
    return due;
}

const struct lb_closer_stats *lb_closer_stats(const struct lb_closer *c)
{
    return &c->stats;
}
