/* Kafka consumer; see consumer.h.
 *
 * Everything runs on the daemon's thread: the rebalance callback is served
 * from inside rd_kafka_consumer_poll, so the revoke hook can touch the
 * daemon's batch without locks. librdkafka's own threads only ever call
 * lb_kafka_log_cb, which is thread-safe.
 */
#include "consumer.h"
#include "clock.h"
#include "log.h"
#include "kafka.h"
#include "offsets.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct lb_consumer {
    rd_kafka_t *rk;
    lb_revoke_fn on_revoke;
    void *ctx;
    int fatal;
    struct lb_offsets *offsets; /* what may be committed, holds, pauses */
    int64_t commit_started_ms;
    struct lb_ratelimit held_said, paused_said, error_said;
    int brokers_up;          /* brokers reachable at the last statistics, -1 before */
    int64_t brokers_lost_ms; /* when every broker became unreachable (monotonic) */
    struct lb_consumer_stats stats;
};

/* A commit the broker acknowledged: its latency and time. */
static void commit_done(struct lb_consumer *c)
{
    lb_histogram_observe(&c->stats.commit_latency,
                         (double)(lb_monotonic_ms() - c->commit_started_ms) / 1000.0);
    c->stats.last_commit_ms = lb_wall_ms();
}

const struct lb_consumer_stats *lb_consumer_stats(const struct lb_consumer *c)
{
    return &c->stats;
}

static void assign(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions)
{
    rd_kafka_resp_err_t err = rd_kafka_assign(rk, partitions);
    if (err)
        LB_ERROR("kafka", "%s failed: %s", partitions ? "assign" : "unassign",
                 rd_kafka_err2str(err));
}

/* The group's committed offsets of a new assignment, so that lag and the
 * offsets to commit start from what the broker holds (not from the fetch
 * position, which a caught-up restarted pod does not have yet). */
static void track_assignment(struct lb_consumer *c, const rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_copy(parts);
    rd_kafka_resp_err_t err = rd_kafka_committed(c->rk, list, 10000);
    if (err)
        LB_WARN("kafka",
                "reading the committed offsets of the new assignment: %s (lag is "
                "unknown until the first commit)",
                rd_kafka_err2str(err));
    for (int i = 0; i < list->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &list->elems[i];
        int64_t committed = err || tp->err || tp->offset < 0 ? -1 : tp->offset;
        /* and its end, so lag is right before the first fetch answers */
        int64_t low, high = -1;
        if (rd_kafka_query_watermark_offsets(c->rk, tp->topic, tp->partition, &low, &high, 5000))
            high = -1;
        if (lb_offsets_assign(c->offsets, tp->topic, tp->partition, committed, high,
                              lb_wall_ms()) != 0)
            c->fatal = 1; /* out of memory: stop rather than commit blindly */
        else if (committed >= 0)
            lb_offsets_set_watermark(c->offsets, tp->topic, tp->partition,
                                     lb_watermark_parse(tp->metadata, tp->metadata_size));
    }
    rd_kafka_topic_partition_list_destroy(list);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque)
{
    struct lb_consumer *c = opaque;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        LB_INFO("kafka", "assigned %d partition(s)", partitions->cnt);
        track_assignment(c, partitions);
        /* A pause outlives unassign/assign in librdkafka: a new assignment
         * starts fetching, whatever an earlier one was doing. The resume
         * goes first: librdkafka 2.0 drops a partition's operation older
         * than the last one it served, and the fetch start of an assignment
         * is made on its own thread once the committed offsets come back,
         * so a resume sent after assign() could be served first and leave
         * that partition never fetched, without a word. */
        if (partitions->cnt) {
            rd_kafka_resp_err_t perr = rd_kafka_resume_partitions(rk, partitions);
            if (perr)
                LB_WARN("kafka", "resuming the new assignment: %s", rd_kafka_err2str(perr));
        }
        assign(rk, partitions);
        c->stats.assigned = partitions->cnt;
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        LB_INFO("kafka", "revoking %d partition(s)", partitions->cnt);
        if (c->on_revoke)
            c->on_revoke(c->ctx, partitions);
        /* Last chance to commit for these partitions in this generation. */
        if (!rd_kafka_assignment_lost(rk))
            lb_consumer_commit(c, 0);
        for (int i = 0; i < partitions->cnt; i++)
            lb_offsets_revoke(c->offsets, partitions->elems[i].topic,
                              partitions->elems[i].partition);
        assign(rk, NULL);
        c->stats.assigned = 0;
        return;
    }
    LB_ERROR("kafka", "rebalance error: %s", rd_kafka_err2str(err));
    assign(rk, NULL);
}

static void commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    struct lb_consumer *c = opaque;
    static struct lb_ratelimit said;
    (void)rk;
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return;
    if (!err)
        commit_done(c);
    else
        lb_log_every(&said, 5000, LB_LOG_WARN, "kafka",
                     "offset commit failed: %s (sent again with the next commit)",
                     rd_kafka_err2str(err));
    for (int i = 0; offsets && i < offsets->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &offsets->elems[i];
        int ok = !err && !tp->err;
        if (!err && tp->err)
            lb_log_every(&said, 5000, LB_LOG_WARN, "kafka",
                         "offset commit for %s [%d] failed: %s (sent again with the next commit)",
                         tp->topic, tp->partition, rd_kafka_err2str(tp->err));
        lb_offsets_commit_result(c->offsets, tp->topic, tp->partition, tp->offset, ok,
                                 lb_wall_ms());
    }
}

/* The statistics librdkafka emits every second, read for one thing: how
 * many brokers (of those learned from the cluster, not the bootstrap list)
 * are connected. Losing all and getting one back is logged once each. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    struct lb_consumer *c = opaque;
    int up = 0, known = 0;
    (void)rk;
    (void)len;
    for (const char *p = json; (p = strstr(p, "\"nodeid\":")); p++) {
        int id = atoi(p + 9);
        const char *state = strstr(p, "\"state\":\"");
        if (id < 0 || !state)
            continue;
        known++;
        up += strncmp(state + 9, "UP\"", 3) == 0;
    }
    if (known) {
        if (up == 0 && c->brokers_up != 0) {
            c->brokers_lost_ms = lb_monotonic_ms();
            LB_WARN("kafka", "no Kafka broker reachable (%d known); consuming and committing wait",
                    known);
        } else if (up > 0 && c->brokers_up == 0) {
            LB_WARN("kafka", "Kafka brokers reachable again after %.1f s (%d of %d up)",
                    (double)(lb_monotonic_ms() - c->brokers_lost_ms) / 1000.0, up, known);
        }
        c->brokers_up = up;
        c->stats.brokers_up = up;
    }
    return 0; /* librdkafka frees 'json' */
}

static void consumer_callbacks(rd_kafka_conf_t *conf, void *ctx)
{
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, commit_cb);
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_opaque(conf, ctx);
}

struct lb_consumer *lb_consumer_new(const struct lb_consumer_options *options,
                                    lb_revoke_fn on_revoke, void *ctx, char *err, size_t errlen,
                                    enum lb_error_class *class)
{
    /* Our defaults, which a kafka: property may override. */
    const char *const defaults[][2] = {
        {"group.id", options->group},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "earliest"},
        {"partition.assignment.strategy", "range"},
        /* librdkafka 2.0.2 refills a prefetch queue that reached its
         * threshold only when its broker thread next wakes up (up to a second
         * later), so a backlog drains in bursts unless the queue holds about a
         * second of consumption. 300000 messages cost ~150 MB of RSS while
         * draining a backlog, nothing when tailing; lower it for memory,
         * raise it for faster catch-up. */
        {"queued.min.messages", "300000"},
        /* a broker back after an outage is reconnected to within a second,
         * not after librdkafka's default 10 s back-off */
        {"reconnect.backoff.max.ms", "1000"},
        {"statistics.interval.ms", "1000"},
    };
    rd_kafka_topic_partition_list_t *topics = NULL;
    enum lb_error_class ignored;
    if (!class)
        class = &ignored;
    *class = LB_ERROR_CONFIG;
    if (lb_kafka_check(&options->kafka, 1, err, errlen) != 0)
        return NULL;
    *class = LB_ERROR_RUNTIME;
    struct lb_consumer *c = calloc(1, sizeof(*c));
    if (c) {
        lb_histogram_init(&c->stats.commit_latency, lb_latency_bounds, lb_latency_nbounds);
        /* a held partition is paused after a few batches' worth of records:
         * enough to keep its other boards flowing through a short fault,
         * little to read again at the rewind */
        c->offsets = lb_offsets_new(options->hold_limit, 100, 5000);
        c->brokers_up = c->stats.brokers_up = -1;
    }
    if (!c || !c->offsets) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    c->on_revoke = on_revoke;
    c->ctx = ctx;
    struct lb_kafka_client client = {.type = RD_KAFKA_CONSUMER,
                                     .defaults = defaults,
                                     .ndefaults = sizeof(defaults) / sizeof(defaults[0]),
                                     .setup = consumer_callbacks,
                                     .ctx = c};
    c->rk = lb_kafka_new(&options->kafka, &client, err, errlen, class);
    if (!c->rk)
        goto error;
    rd_kafka_poll_set_consumer(c->rk);

    topics = rd_kafka_topic_partition_list_new((int)options->ntopics);
    for (size_t i = 0; i < options->ntopics; i++)
        rd_kafka_topic_partition_list_add(topics, options->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rc = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (rc) {
        /* refused before any broker is asked: the topics themselves (a
         * pattern that is not a valid regular expression, an empty name) */
        int ours = rc == RD_KAFKA_RESP_ERR__INVALID_ARG;
        snprintf(err, errlen, "%s%scannot subscribe to the topics%s: %s",
                 ours && options->kafka.path ? options->kafka.path : "",
                 ours && options->kafka.path ? ": " : "",
                 ours ? " (kafka.topics: an invalid ^pattern or an empty name?)" : "",
                 rd_kafka_err2str(rc));
        *class = ours ? LB_ERROR_CONFIG : LB_ERROR_RUNTIME;
        goto error;
    }
    return c;

error:
    if (c && c->rk)
        rd_kafka_destroy(c->rk);
    if (c)
        lb_offsets_free(c->offsets);
    free(c);
    return NULL;
}

void lb_consumer_close(struct lb_consumer *c)
{
    if (!c)
        return;
    lb_consumer_commit(c, 0);
    rd_kafka_resp_err_t err = rd_kafka_consumer_close(c->rk);
    if (err)
        LB_WARN("kafka", "closing the consumer: %s", rd_kafka_err2str(err));
    rd_kafka_destroy(c->rk);
    lb_offsets_free(c->offsets);
    free(c);
}

/* Pauses one partition (fetching stops, the group membership stays). */
static void pause_one(struct lb_consumer *c, const char *topic, int32_t partition, int pause)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition);
    rd_kafka_resp_err_t err =
        pause ? rd_kafka_pause_partitions(c->rk, list) : rd_kafka_resume_partitions(c->rk, list);
    if (err)
        LB_WARN("kafka", "%s %s [%d]: %s", pause ? "pausing" : "resuming", topic, partition,
                rd_kafka_err2str(err));
    rd_kafka_topic_partition_list_destroy(list);
}

rd_kafka_message_t *lb_consumer_poll(struct lb_consumer *c, int timeout_ms)
{
    rd_kafka_message_t *msg = rd_kafka_consumer_poll(c->rk, timeout_ms);
    if (msg && !msg->err) {
        const char *topic = rd_kafka_topic_name(msg->rkt);
        if (lb_offsets_polled(c->offsets, topic, msg->partition)) {
            pause_one(c, topic, msg->partition, 1);
            lb_offsets_paused(c->offsets, topic, msg->partition);
            lb_log_every(&c->paused_said, 5000, LB_LOG_INFO, "kafka",
                         "paused %s [%d]: its held events wait and it is read again from there",
                         topic, msg->partition);
        }
    }
    if (!msg || !msg->err)
        return msg;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        /* not an error */
    } else if (msg->err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(c->rk, why, sizeof(why));
        LB_ERROR("kafka", "fatal consumer error %s: %s", rd_kafka_err2name(orig), why);
        c->fatal = 1;
    } else if (!lb_kafka_is_transport_error(msg->err)) {
        lb_log_every(&c->error_said, 5000, LB_LOG_WARN, "kafka", "consumer: %s%s%s",
                     rd_kafka_message_errstr(msg), msg->rkt ? " on topic " : "",
                     msg->rkt ? rd_kafka_topic_name(msg->rkt) : "");
    }
    rd_kafka_message_destroy(msg);
    return NULL;
}

int lb_consumer_fatal(const struct lb_consumer *c)
{
    return c->fatal;
}

int lb_consumer_settle(struct lb_consumer *c, const rd_kafka_message_t *msg,
                       enum lb_hold_reason reason, int64_t ts)
{
    const char *topic = rd_kafka_topic_name(msg->rkt);
    if (!lb_offsets_settle(c->offsets, topic, msg->partition, msg->offset, reason,
                           lb_monotonic_ms(), ts))
        return 0;
    lb_log_every(&c->held_said, 5000, reason == LB_HOLD_BOARD ? LB_LOG_ERROR : LB_LOG_WARN, "kafka",
                 "%s [%d] held at offset %lld (%s): nothing past it is committed until it is "
                 "written; the partition is read again from there",
                 topic, msg->partition, (long long)msg->offset, lb_hold_reason_name(reason));
    return 1;
}

struct rewind_ctx {
    struct lb_consumer *c;
    lb_rewind_fn fn;
    void *ctx;
};

static void rewind_one(void *ctx, const char *topic, int32_t partition, int64_t offset,
                       enum lb_hold_reason reason, int was_paused)
{
    struct rewind_ctx *r = ctx;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset;
    /* asynchronous, so the loop never waits on it: the version barrier it
     * sets at once keeps messages fetched before it from being served */
    rd_kafka_error_t *error = rd_kafka_seek_partitions(r->c->rk, list, 0);
    if (!error && list->elems[0].err && list->elems[0].err != RD_KAFKA_RESP_ERR__IN_PROGRESS)
        LB_WARN("kafka", "seeking %s [%d] to %lld: %s", topic, partition, (long long)offset,
                rd_kafka_err2str(list->elems[0].err));
    rd_kafka_topic_partition_list_destroy(list);
    if (error) {
        /* not read again: the fetch position is past the hold, so it is held
         * again at once, for the same reason, and nothing is released (what
         * is read past the hold must keep waiting behind it); the seek is
         * tried again with the next rewind */
        LB_WARN("kafka", "seeking %s [%d] to %lld: %s; trying again later", topic, partition,
                (long long)offset, rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
        lb_offsets_settle(r->c->offsets, topic, partition, offset, reason, lb_monotonic_ms(), 0);
        if (was_paused)
            lb_offsets_paused(r->c->offsets, topic, partition);
        return;
    }
    if (was_paused)
        pause_one(r->c, topic, partition, 0);
    LB_DEBUG("kafka", "reading %s [%d] again from offset %lld", topic, partition,
             (long long)offset);
    r->fn(r->ctx, topic, partition, offset);
}

size_t lb_consumer_rewind_due(struct lb_consumer *c, lb_rewind_fn fn, void *ctx)
{
    struct rewind_ctx r = {c, fn, ctx};
    return lb_offsets_rewind_due(c->offsets, lb_monotonic_ms(), rewind_one, &r);
}

void lb_consumer_set_floor(struct lb_consumer *c, lb_offsets_floor_fn floor, void *ctx)
{
    lb_offsets_set_floor(c->offsets, floor, ctx);
}

int lb_consumer_is_held(const struct lb_consumer *c, const char *topic, int32_t partition)
{
    return lb_offsets_is_held(c->offsets, topic, partition);
}

void lb_consumer_progress(const struct lb_consumer *c,
                          void (*each)(void *ctx, const struct lb_partition_progress *progress),
                          void *ctx)
{
    lb_offsets_each(c->offsets, each, ctx);
}

/* Each partition's offset, its event-time watermark as the metadata (sent
 * because the list goes to rd_kafka_commit itself). */
static void add_commit(void *ctx, const char *topic, int32_t partition, int64_t offset,
                       int64_t watermark)
{
    rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_add(ctx, topic, partition);
    tp->offset = offset;
    if (watermark >= 0) {
        char text[32];
        size_t len = lb_watermark_format(text, sizeof(text), watermark);
        if ((tp->metadata = malloc(len)) != NULL) { /* the list frees it */
            memcpy(tp->metadata, text, len);
            tp->metadata_size = len;
        }
    }
}

int lb_consumer_commit(struct lb_consumer *c, int async)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(16);
    if (!lb_offsets_to_commit(c->offsets, add_commit, list)) {
        rd_kafka_topic_partition_list_destroy(list);
        return 0;
    }
    c->commit_started_ms = lb_monotonic_ms();
    /* An explicit list: what is durable, never the fetch position. The
     * result comes to commit_cb either way: served by the consumer's poll
     * when asynchronous, inside the call when not (a temporary queue). */
    rd_kafka_resp_err_t err = async ? rd_kafka_commit(c->rk, list, 1)
                                    : rd_kafka_commit_queue(c->rk, list, NULL, commit_cb, c);
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        static struct lb_ratelimit said;
        lb_log_every(&said, 5000, LB_LOG_WARN, "kafka", "offset commit failed: %s",
                     rd_kafka_err2str(err));
        for (int i = 0; i < list->cnt; i++) /* commit_cb will not say: send them again */
            lb_offsets_commit_result(c->offsets, list->elems[i].topic, list->elems[i].partition,
                                     list->elems[i].offset, 0, 0);
        rd_kafka_topic_partition_list_destroy(list);
        return -1;
    }
    rd_kafka_topic_partition_list_destroy(list);
    return 0;
}

rd_kafka_t *lb_consumer_handle(struct lb_consumer *c)
{
    return c->rk;
}
