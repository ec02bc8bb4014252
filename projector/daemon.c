/* The daemon loop; see daemon.h.
 *
 * Two batches take turns: while one is in Redis (sent, replies not read), the
 * next is collected from Kafka and decoded and planned, so the daemon's own
 * work overlaps Redis'. The next batch is sent only once the one in flight is
 * complete, so writes reach Redis in order and offsets are stored in order.
 *
 * Offsets: messages of one partition arrive in offset order, so after a
 * batch the offset to store for a partition is the offset of its first record
 * that is not durable, or the last record's offset + 1 when all are. A record
 * that is not durable is only left behind when the daemon is stopping (or the
 * partition was revoked): at every other time the pipeline keeps retrying, so
 * the consumer's position never runs ahead of what is stored by more than
 * the batches in hand.
 *
 * Rebalances: the revoke hook runs inside lb_consumer_poll. Records of
 * revoked partitions that are not yet planned are dropped; those already
 * planned or in flight are still written (harmless: every write is
 * idempotent) but their offsets are not stored: the partition's new owner
 * starts from the last commit.
 */
#include "daemon.h"
#include "clock.h"
#include "consumer.h"
#include "dlq.h"
#include "metrics.h"
#include "log.h"
#include "pipeline.h"
#include "planner.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct partition_mark {
    rd_kafka_topic_t *rkt;
    int32_t partition;
    int64_t next;
    int blocked; /* a record of this partition is not durable: stop advancing */
};

#define DETAIL_MAX 200

struct batch {
    rd_kafka_message_t **msgs; /* owned: destroyed when the batch is done */
    size_t n;
    uint8_t *revoked; /* the record's partition was revoked meanwhile */
    uint8_t *durable;
    uint8_t *dlq;    /* enum lb_dlq_state of each record */
    uint8_t *reason; /* enum lb_reject of each dead-lettered record */
    char (*detail)[DETAIL_MAX];
    struct lb_record *records;
};

struct daemon {
    const struct lb_config *config;
    struct lb_consumer *consumer;
    struct lb_cluster *cluster;
    struct lb_decoder *decoder;
    struct lb_pipeline *pipeline;
    struct lb_dlq *dlq;         /* NULL: no dead-letter topic configured */
    struct lb_metrics *metrics; /* NULL: no metrics.listen */
    struct lb_histogram batch_events, batch_seconds;
    int64_t batch_sent_ms, last_publish_ms, last_ping_ms;
    int redis_ok;       /* the last write (or ping) reached Redis */
    int64_t give_up_at; /* once stopping: when retries end (shutdown.drain_timeout) */
    volatile sig_atomic_t *stop;

    struct batch batches[2];
    struct batch *next;     /* being collected and planned */
    struct batch *inflight; /* sent to Redis and not complete, or NULL */

    rd_kafka_message_t **carry; /* polled while retrying; start of the next batch */
    size_t ncarry, capcarry;

    struct partition_mark *marks; /* scratch for store_durable, one per partition */
    size_t capmarks;

    int64_t last_commit_ms;

    /* Fault injection for the tests (LB_FAULT_CRASH_AFTER_BATCHES=N): die
     * with _exit right after the Nth batch is in Redis, before its offsets
     * are stored: the crash between EXEC and commit, on demand. */
    uint64_t crash_after_batches;
    uint64_t batches_written;
};

static int in_list(const rd_kafka_topic_partition_list_t *list, const rd_kafka_message_t *msg)
{
    return rd_kafka_topic_partition_list_find(list, rd_kafka_topic_name(msg->rkt),
                                              msg->partition) != NULL;
}

static void on_revoke(void *ctx, const rd_kafka_topic_partition_list_t *partitions)
{
    struct daemon *d = ctx;
    size_t kept = 0;

    for (int b = 0; b < 2; b++)
        for (size_t i = 0; i < d->batches[b].n; i++)
            if (in_list(partitions, d->batches[b].msgs[i]))
                d->batches[b].revoked[i] = 1;
    for (size_t i = 0; i < d->ncarry; i++) {
        if (in_list(partitions, d->carry[i]))
            rd_kafka_message_destroy(d->carry[i]);
        else
            d->carry[kept++] = d->carry[i];
    }
    d->ncarry = kept;
}

static void carry_push(struct daemon *d, rd_kafka_message_t *msg)
{
    if (d->ncarry == d->capcarry) {
        size_t cap = d->capcarry ? d->capcarry * 2 : 256;
        rd_kafka_message_t **grown = realloc(d->carry, cap * sizeof(*grown));
        if (!grown) {
            /* Dropping it here would skip it; better to stop than to lose it. */
            LB_ERROR("daemon", "out of memory holding polled messages; stopping");
            rd_kafka_message_destroy(msg);
            *d->stop = 1;
            return;
        }
        d->carry = grown;
        d->capcarry = cap;
    }
    d->carry[d->ncarry++] = msg;
}

static void maybe_commit(struct daemon *d)
{
    int64_t now = lb_monotonic_ms();
    if (now - d->last_commit_ms < d->config->commit_interval_ms)
        return;
    lb_consumer_commit(d->consumer, 1);
    d->last_commit_ms = now;
}

/* Fills 'b': carried-over records first, then polled ones, until it is
 * full, batch.linger has passed since its first record, or a stop is
 * requested. With 'wait' zero (a batch is in Redis and must not be kept
 * waiting) it takes only what has already arrived. */
static void publish(struct daemon *d, int now);
static void ping_if_idle(struct daemon *d);
static void reload_log_level(const struct lb_config *config);

static void collect(struct daemon *d, struct batch *b, int wait)
{
    size_t max = (size_t)d->config->batch_max_events;
    int64_t deadline = 0;

    size_t take = d->ncarry < max ? d->ncarry : max;
    if (take) {
        memcpy(b->msgs, d->carry, take * sizeof(*b->msgs));
        memmove(d->carry, d->carry + take, (d->ncarry - take) * sizeof(*d->carry));
        d->ncarry -= take;
    }
    b->n = take;
    memset(b->revoked, 0, max);
    if (b->n)
        deadline = lb_monotonic_ms() + d->config->batch_linger_ms;

    while (b->n < max && !*d->stop && !lb_consumer_fatal(d->consumer)) {
        int64_t timeout = 200;
        if (!wait)
            timeout = 0;
        else if (b->n) {
            timeout = deadline - lb_monotonic_ms();
            if (timeout < 0)
                timeout = 0;
        }
        rd_kafka_message_t *msg = lb_consumer_poll(d->consumer, (int)timeout);
        if (msg) {
            b->msgs[b->n++] = msg;
            if (b->n == 1)
                deadline = lb_monotonic_ms() + d->config->batch_linger_ms;
            continue;
        }
        if (!wait || (b->n && lb_monotonic_ms() >= deadline))
            break;
        if (!b->n) { /* idle */
            maybe_commit(d);
            publish(d, 0);
            ping_if_idle(d);
            if (lb_log_reload)
                reload_log_level(d->config);
        }
    }
}

/* Drops records whose partition was revoked while the batch was collected. */
static void drop_revoked(struct batch *b)
{
    size_t kept = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->revoked[i]) {
            rd_kafka_message_destroy(b->msgs[i]);
            continue;
        }
        b->msgs[kept] = b->msgs[i];
        b->revoked[kept++] = 0;
    }
    b->n = kept;
}

static void destroy_messages(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        rd_kafka_message_destroy(b->msgs[i]);
    memset(b->dlq, 0, b->n);
    b->n = 0;
}

/* Whether retrying (Redis, the DLQ) must end: only once stopping, and then
 * only after shutdown.drain_timeout, so a short outage during a rolling
 * restart still lets the batch in hand land and be committed. */
static int give_up(struct daemon *d)
{
    if (!*d->stop)
        return 0;
    if (!d->give_up_at)
        d->give_up_at = lb_monotonic_ms() + d->config->drain_timeout_ms;
    return lb_monotonic_ms() >= d->give_up_at;
}

/* Between retries: poll (partitions paused) so the group keeps us, hold on
 * to anything polled, give up only when stopping or when every record of the
 * batch has lost its partition. */
static int wait_for_redis(void *ctx, int64_t backoff_ms)
{
    struct daemon *d = ctx;
    int64_t deadline = lb_monotonic_ms() + backoff_ms;

    lb_consumer_pause(d->consumer, 1);
    d->redis_ok = 0;
    publish(d, 0);
    for (;;) {
        size_t live = 0;
        for (size_t i = 0; i < d->inflight->n; i++)
            live += !d->inflight->revoked[i];
        if (give_up(d) || lb_consumer_fatal(d->consumer) || live == 0)
            return 1;
        publish(d, 0);
        int64_t left = deadline - lb_monotonic_ms();
        if (left <= 0)
            return 0;
        rd_kafka_message_t *msg = lb_consumer_poll(d->consumer, (int)(left < 100 ? left : 100));
        if (msg)
            carry_push(d, msg);
    }
}

/* SIGHUP: the log level from the file as it is now (nothing else changes
 * while running). */
static void reload_log_level(const struct lb_config *config)
{
    struct lb_config *fresh;
    char err[1024];
    lb_log_reload = 0;
    if (lb_config_load(config->path, &fresh, err, sizeof(err)) != 0) {
        LB_ERROR("daemon", "SIGHUP: %s; keeping log level %s", err,
                 lb_log_level_name((enum lb_log_level)lb_log_threshold));
        return;
    }
    lb_log_threshold = fresh->log_level;
    lb_config_free(fresh);
    LB_WARN("daemon", "SIGHUP: log level is now %s",
            lb_log_level_name((enum lb_log_level)lb_log_threshold));
}

/* ---- metrics ---------------------------------------------------------------- */

static void counter(struct lb_text *t, const char *name, const char *help)
{
    lb_text_printf(t, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
}

static void gauge(struct lb_text *t, const char *name, const char *help)
{
    lb_text_printf(t, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

static void render_lag(struct daemon *d, struct lb_text *t)
{
    rd_kafka_t *rk = lb_consumer_handle(d->consumer);
    rd_kafka_topic_partition_list_t *list = NULL;
    gauge(t, "lb_consumer_lag", "Events in the partition after the consumer's position.");
    if (rd_kafka_assignment(rk, &list) != RD_KAFKA_RESP_ERR_NO_ERROR || !list)
        return;
    if (rd_kafka_position(rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR)
        for (int i = 0; i < list->cnt; i++) {
            int64_t low, high, pos = list->elems[i].offset;
            if (rd_kafka_get_watermark_offsets(rk, list->elems[i].topic, list->elems[i].partition,
                                               &low, &high) ||
                high < 0)
                continue;
            if (pos < 0)
                pos = low; /* nothing consumed yet in this assignment */
            lb_text_printf(t, "lb_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n",
                           list->elems[i].topic, list->elems[i].partition,
                           (long long)(high > pos ? high - pos : 0));
        }
    rd_kafka_topic_partition_list_destroy(list);
}

/* Renders every metric (all counters live in this thread) and publishes
 * the page with the readiness, at most once a second unless 'now'. */
static void publish(struct daemon *d, int now)
{
    if (!d->metrics || (!now && lb_monotonic_ms() - d->last_publish_ms < 1000))
        return;
    d->last_publish_ms = lb_monotonic_ms();
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(d->pipeline);
    const struct lb_cluster_stats *cs = lb_cluster_stats(d->cluster);
    const struct lb_consumer_stats *ks = lb_consumer_stats(d->consumer);
    struct lb_text t = {0};
    uint64_t rejected = 0;
    for (int r = 1; r < LB_REJECT__COUNT; r++)
        rejected += ps->rejected[r];

    counter(&t, "lb_events_total", "Events read from Kafka and what became of them.");
    lb_text_printf(&t, "lb_events_total{outcome=\"consumed\"} %llu\n",
                   (unsigned long long)ps->records);
    lb_text_printf(&t, "lb_events_total{outcome=\"applied\"} %llu\n",
                   (unsigned long long)ps->applied);
    lb_text_printf(&t, "lb_events_total{outcome=\"rejected\"} %llu\n",
                   (unsigned long long)rejected);
    lb_text_printf(&t, "lb_events_total{outcome=\"dead_lettered\"} %llu\n",
                   (unsigned long long)(d->dlq ? lb_dlq_stats(d->dlq)->delivered : 0));
    counter(&t, "lb_rejected_events_total", "Events that could not be projected, by reason.");
    for (int r = 1; r < LB_REJECT__COUNT; r++)
        lb_text_printf(&t, "lb_rejected_events_total{reason=\"%s\"} %llu\n",
                       lb_reject_name((enum lb_reject)r), (unsigned long long)ps->rejected[r]);
    counter(&t, "lb_late_window_writes_total",
            "Window writes skipped because the window had expired (late events).");
    lb_text_printf(&t, "lb_late_window_writes_total %llu\n", (unsigned long long)ps->late_windows);
    counter(&t, "lb_dlq_records_total", "Records produced to the dead-letter topic, by result.");
    if (d->dlq) {
        const struct lb_dlq_stats *ds = lb_dlq_stats(d->dlq);
        lb_text_printf(&t,
                       "lb_dlq_records_total{result=\"sent\"} %llu\n"
                       "lb_dlq_records_total{result=\"delivered\"} %llu\n"
                       "lb_dlq_records_total{result=\"failed\"} %llu\n",
                       (unsigned long long)ds->sent, (unsigned long long)ds->delivered,
                       (unsigned long long)ds->failed);
    }
    counter(&t, "lb_redis_requests_total", "Requests sent to Redis (one per board per batch).");
    lb_text_printf(&t, "lb_redis_requests_total %llu\n", (unsigned long long)cs->requests);
    counter(&t, "lb_redis_redirections_total", "Cluster redirections followed, by kind.");
    lb_text_printf(&t,
                   "lb_redis_redirections_total{kind=\"moved\"} %llu\n"
                   "lb_redis_redirections_total{kind=\"ask\"} %llu\n",
                   (unsigned long long)cs->moved, (unsigned long long)cs->ask);
    counter(&t, "lb_redis_errors_total", "Redis failures, by kind; the batch is retried.");
    lb_text_printf(&t,
                   "lb_redis_errors_total{kind=\"retry_later\"} %llu\n"
                   "lb_redis_errors_total{kind=\"command\"} %llu\n"
                   "lb_redis_errors_total{kind=\"connection\"} %llu\n"
                   "lb_redis_errors_total{kind=\"timeout\"} %llu\n"
                   "lb_redis_errors_total{kind=\"wait_shortfall\"} %llu\n",
                   (unsigned long long)cs->retry_later, (unsigned long long)cs->command_errors,
                   (unsigned long long)cs->connection_errors, (unsigned long long)cs->timeouts,
                   (unsigned long long)cs->wait_shortfalls);
    counter(&t, "lb_redis_retries_total", "Board requests written again after a failure.");
    lb_text_printf(&t, "lb_redis_retries_total %llu\n", (unsigned long long)ps->write_failures);
    counter(&t, "lb_redis_replans_total",
            "Board requests planned again because part of them was applied before.");
    lb_text_printf(&t, "lb_redis_replans_total %llu\n", (unsigned long long)ps->replans);
    lb_text_histogram(&t, "lb_batch_events", "Events per batch.", &d->batch_events);
    lb_text_histogram(&t, "lb_batch_seconds", "From sending a batch to Redis to its last reply.",
                      &d->batch_seconds);
    lb_text_histogram(&t, "lb_commit_seconds", "From an offset commit to the broker's answer.",
                      &ks->commit_latency);
    lb_text_histogram(&t, "lb_event_visible_seconds",
                      "From an event's time to its write being acknowledged by Redis.",
                      &ps->visible);
    render_lag(d, &t);
    gauge(&t, "lb_partitions_assigned", "Partitions assigned to this pod.");
    lb_text_printf(&t, "lb_partitions_assigned %d\n", ks->assigned);
    gauge(&t, "lb_partitions_paused", "Assigned partitions paused while Redis or the DLQ waits.");
    lb_text_printf(&t, "lb_partitions_paused %d\n", ks->paused ? ks->assigned : 0);
    gauge(&t, "lb_last_commit_timestamp_seconds", "When offsets were last committed (0: never).");
    lb_text_printf(&t, "lb_last_commit_timestamp_seconds %.3f\n",
                   (double)ks->last_commit_ms / 1000.0);
    gauge(&t, "lb_redis_up", "1 when the last write or ping reached Redis.");
    lb_text_printf(&t, "lb_redis_up %d\n", d->redis_ok);
    lb_metrics_publish(d->metrics, &t, d->redis_ok && ks->assigned > 0);
    lb_text_free(&t);
}

/* While idle, a PING tells /readyz whether Redis is still there. */
static void ping_if_idle(struct daemon *d)
{
    if (!d->metrics || d->inflight || lb_monotonic_ms() - d->last_ping_ms < 1000)
        return;
    d->last_ping_ms = lb_monotonic_ms();
    const char *argv[] = {"PING"};
    size_t argvlen[] = {4};
    redisReply *reply = lb_cluster_command(d->cluster, 0, 1, argv, argvlen);
    d->redis_ok = reply && reply->type == REDIS_REPLY_STATUS;
    if (reply)
        freeReplyObject(reply);
}

/* The pipeline could not project a record: dead-letter it. */
static void on_reject(void *ctx, const struct lb_record *r, enum lb_reject reason,
                      const char *detail)
{
    struct daemon *d = ctx;
    struct batch *candidates[2] = {d->next, d->inflight};
    for (int k = 0; k < 2; k++) {
        struct batch *b = candidates[k];
        if (b && r >= b->records && r < b->records + b->n) {
            size_t i = (size_t)(r - b->records);
            b->reason[i] = (uint8_t)reason;
            snprintf(b->detail[i], sizeof(b->detail[i]), "%s", detail);
            lb_dlq_send(d->dlq, b->msgs[i], reason, detail, &b->dlq[i]);
            return;
        }
    }
}

/* Waits until every record of 'b' sent to the dead-letter topic is there,
 * sending again what failed, with back-off, while the consumer is paused
 * (the group keeps us). A record that never makes it is not durable: its
 * partition stops there. Gives up only when stopping. */
static void settle_dlq(struct daemon *d, struct batch *b)
{
    int64_t backoff = 100, since = lb_monotonic_ms(), warned = since;
    for (;;) {
        size_t pending = 0, failed = 0;
        for (size_t i = 0; i < b->n; i++) {
            pending += b->dlq[i] == LB_DLQ_PENDING;
            failed += b->dlq[i] == LB_DLQ_FAILED;
        }
        if (!pending && !failed)
            return;
        if (give_up(d) || lb_consumer_fatal(d->consumer)) {
            lb_dlq_poll(d->dlq, pending ? 2000 : 0);
            for (size_t i = 0; i < b->n; i++)
                if (b->dlq[i] == LB_DLQ_PENDING || b->dlq[i] == LB_DLQ_FAILED)
                    b->durable[i] = 0;
            return;
        }
        if (pending) {
            lb_dlq_poll(d->dlq, 100);
            if (lb_monotonic_ms() - warned >= 5000) {
                warned = lb_monotonic_ms();
                LB_WARN("dlq",
                        "%zu event(s) waiting %lld s for the dead-letter topic '%s'; their "
                        "partitions wait (is the topic there and writable?)",
                        pending, (long long)((warned - since) / 1000), d->config->dlq_topic);
            }
            continue;
        }
        LB_WARN("dlq",
                "%zu event(s) could not be dead-lettered; retrying in %lld ms, their "
                "partitions wait",
                failed, (long long)backoff);
        lb_consumer_pause(d->consumer, 1);
        int64_t until = lb_monotonic_ms() + backoff;
        while (!*d->stop && lb_monotonic_ms() < until) {
            rd_kafka_message_t *msg = lb_consumer_poll(d->consumer, 100);
            if (msg)
                carry_push(d, msg);
        }
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
        for (size_t i = 0; i < b->n; i++)
            if (b->dlq[i] == LB_DLQ_FAILED)
                lb_dlq_send(d->dlq, b->msgs[i], (enum lb_reject)b->reason[i], b->detail[i],
                            &b->dlq[i]);
    }
}

/* Stores, per partition, the offset after its last durable record: records
 * of a partition are in offset order, so that is the offset of its first
 * record that is not durable, or the last offset + 1 when all are. */
static int store_durable(struct daemon *d, const struct batch *b)
{
    size_t nmarks = 0, last = 0;

    for (size_t i = 0; i < b->n; i++) {
        const rd_kafka_message_t *msg = b->msgs[i];
        if (b->revoked[i])
            continue;
        struct partition_mark *m = NULL;
        if (nmarks && d->marks[last].rkt == msg->rkt && d->marks[last].partition == msg->partition)
            m = &d->marks[last];
        for (size_t k = 0; k < nmarks && !m; k++)
            if (d->marks[k].rkt == msg->rkt && d->marks[k].partition == msg->partition) {
                m = &d->marks[k];
                last = k;
            }
        if (!m) {
            if (nmarks == d->capmarks) {
                size_t cap = d->capmarks ? d->capmarks * 2 : 64;
                struct partition_mark *grown = realloc(d->marks, cap * sizeof(*grown));
                if (!grown)
                    return -1; /* nothing stored: the batch will be redelivered */
                d->marks = grown;
                d->capmarks = cap;
            }
            last = nmarks;
            m = &d->marks[nmarks++];
            *m = (struct partition_mark){
                .rkt = msg->rkt, .partition = msg->partition, .next = msg->offset};
        }
        if (m->blocked)
            continue;
        if (b->durable[i])
            m->next = msg->offset + 1;
        else
            m->blocked = 1;
    }
    for (size_t k = 0; k < nmarks; k++)
        lb_consumer_store(d->consumer, rd_kafka_topic_name(d->marks[k].rkt), d->marks[k].partition,
                          d->marks[k].next);
    return 0;
}

/* Decodes and plans d->next. Returns -1 when out of memory. */
static int prepare_next(struct daemon *d)
{
    struct batch *b = d->next;
    for (size_t i = 0; i < b->n; i++) {
        const rd_kafka_message_t *msg = b->msgs[i];
        b->records[i] = (struct lb_record){.payload = msg->payload,
                                           .len = msg->len,
                                           .topic = rd_kafka_topic_name(msg->rkt),
                                           .partition = msg->partition,
                                           .offset = msg->offset};
    }
    if (lb_pipeline_prepare(d->pipeline, b->records, b->n, lb_wall_ms()) != 0) {
        LB_ERROR("daemon", "out of memory projecting a batch of %zu records; stopping", b->n);
        return -1;
    }
    return 0;
}

/* Sends d->next; it becomes the batch in flight. */
static void send_next(struct daemon *d)
{
    d->batch_sent_ms = lb_monotonic_ms();
    lb_pipeline_send(d->pipeline);
    d->inflight = d->next;
    d->next = d->next == &d->batches[0] ? &d->batches[1] : &d->batches[0];
}

/* Waits for the batch in flight (retrying as long as it takes), sends the
 * next one if it is ready (so Redis is not kept waiting for our
 * bookkeeping), then stores the finished batch's durable offsets and lets
 * it go. Returns -1 when out of memory. */
static int complete_inflight(struct daemon *d, int send_ready)
{
    struct batch *done = d->inflight;
    int written = lb_pipeline_complete(d->pipeline, done->durable, wait_for_redis, d);
    lb_histogram_observe(&d->batch_seconds,
                         (double)(lb_monotonic_ms() - d->batch_sent_ms) / 1000.0);
    lb_histogram_observe(&d->batch_events, (double)done->n);
    d->redis_ok = written == 0;
    d->last_ping_ms = lb_monotonic_ms();
    if (d->crash_after_batches && ++d->batches_written == d->crash_after_batches) {
        LB_WARN("daemon",
                "LB_FAULT_CRASH_AFTER_BATCHES: exiting after writing batch %llu, "
                "before storing its offsets",
                (unsigned long long)d->batches_written);
        _exit(70);
    }
    d->inflight = NULL;
    if (send_ready && d->next->n)
        send_next(d);
    if (d->dlq)
        settle_dlq(d, done);
    int rc = store_durable(d, done);
    if (rc != 0)
        LB_ERROR("daemon", "out of memory storing offsets; stopping (the batch will be "
                           "redelivered)");
    lb_consumer_pause(d->consumer, 0);
    destroy_messages(done);
    maybe_commit(d);
    return rc;
}

static void log_totals(const struct daemon *d)
{
    const struct lb_pipeline_stats *s = lb_pipeline_stats(d->pipeline);
    const struct lb_cluster_stats *c = lb_cluster_stats(d->cluster);
    uint64_t rejected = 0;
    for (int r = 0; r < LB_REJECT__COUNT; r++)
        rejected += s->rejected[r];
    LB_INFO("daemon",
            "totals: records=%llu applied=%llu rejected=%llu member_updates=%llu late_windows=%llu "
            "batches=%llu write_failures=%llu redis_requests=%llu moved=%llu ask=%llu "
            "retry_later=%llu command_errors=%llu connection_errors=%llu timeouts=%llu "
            "slot_map_refreshes=%llu wait_shortfalls=%llu replans=%llu "
            "skipped_segments=%llu",
            (unsigned long long)s->records, (unsigned long long)s->applied,
            (unsigned long long)rejected, (unsigned long long)s->member_updates,
            (unsigned long long)s->late_windows, (unsigned long long)s->batches,
            (unsigned long long)s->write_failures, (unsigned long long)c->requests,
            (unsigned long long)c->moved, (unsigned long long)c->ask,
            (unsigned long long)c->retry_later, (unsigned long long)c->command_errors,
            (unsigned long long)c->connection_errors, (unsigned long long)c->timeouts,
            (unsigned long long)c->refreshes, (unsigned long long)c->wait_shortfalls,
            (unsigned long long)s->replans, (unsigned long long)s->skipped_segments);
}

int lb_daemon_run(const struct lb_config *config, volatile sig_atomic_t *stop)
{
    struct daemon d = {.config = config, .stop = stop};
    size_t max = (size_t)config->batch_max_events;
    char err[1024];
    int status = LB_EXIT_OK;

    struct lb_cluster_options options;
    lb_pipeline_cluster_options(config, &options);

    d.decoder = lb_config_decoder(config, err, sizeof(err));
    if (!d.decoder) {
        LB_ERROR("daemon", "%s", err);
        return LB_EXIT_CONFIG;
    }
    int allocated = 1;
    for (int b = 0; b < 2; b++) {
        d.batches[b].msgs = calloc(max, sizeof(*d.batches[b].msgs));
        d.batches[b].revoked = calloc(max, 1);
        d.batches[b].durable = calloc(max, 1);
        d.batches[b].dlq = calloc(max, 1);
        d.batches[b].reason = calloc(max, 1);
        d.batches[b].detail = calloc(max, sizeof(*d.batches[b].detail));
        d.batches[b].records = calloc(max, sizeof(*d.batches[b].records));
        allocated = allocated && d.batches[b].msgs && d.batches[b].revoked &&
                    d.batches[b].durable && d.batches[b].dlq && d.batches[b].reason &&
                    d.batches[b].detail && d.batches[b].records;
    }
    d.next = &d.batches[0];
    d.cluster = lb_cluster_new(&options);
    d.pipeline = d.cluster ? lb_pipeline_new(config, d.decoder, d.cluster) : NULL;
    if (!allocated || !d.pipeline) {
        LB_ERROR("daemon", "out of memory");
        status = LB_EXIT_RUNTIME;
        goto done;
    }
    if (config->dlq_topic) {
        d.dlq = lb_dlq_new(config, err, sizeof(err));
        if (!d.dlq) {
            LB_ERROR("daemon", "dead-letter producer: %s", err);
            status = LB_EXIT_CONFIG;
            goto done;
        }
        lb_pipeline_set_reject_hook(d.pipeline, on_reject, &d);
        LB_INFO("daemon", "events that cannot be projected go to topic '%s'", config->dlq_topic);
    } else {
        LB_WARN("daemon", "no kafka.dlq_topic: events that cannot be projected are only logged "
                          "and counted");
    }
    lb_histogram_init(&d.batch_events, lb_size_bounds, lb_size_nbounds);
    lb_histogram_init(&d.batch_seconds, lb_latency_bounds, lb_latency_nbounds);
    if (config->metrics_listen) {
        d.metrics = lb_metrics_start(config->metrics_listen, err, sizeof(err));
        if (!d.metrics) {
            LB_ERROR("daemon", "%s", err);
            status = LB_EXIT_CONFIG;
            goto done;
        }
        LB_INFO("daemon", "metrics on http://%s/metrics, probes on /healthz and /readyz",
                config->metrics_listen);
    }
    if (lb_cluster_refresh(d.cluster) != 0)
        LB_WARN("redis", "%s; will keep trying", lb_cluster_error(d.cluster));
    else
        LB_INFO("redis", "slot map loaded%s",
                lb_cluster_is_standalone(d.cluster) ? " (standalone Redis)" : "");
    d.consumer = lb_consumer_new(config, on_revoke, &d, err, sizeof(err));
    if (!d.consumer) {
        LB_ERROR("daemon", "%s", err);
        status =
            strchr(err, ':') && strstr(err, "kafka property") ? LB_EXIT_CONFIG : LB_EXIT_RUNTIME;
        goto done;
    }
    LB_INFO("daemon", "consuming %zu topic(s) as group '%s'", config->ntopics, config->group);
    d.last_commit_ms = lb_monotonic_ms();
    if (getenv("LB_FAULT_CRASH_AFTER_BATCHES"))
        d.crash_after_batches = strtoull(getenv("LB_FAULT_CRASH_AFTER_BATCHES"), NULL, 10);

    while (!*stop) {
        if (lb_log_reload)
            reload_log_level(config);
        publish(&d, 0);
        ping_if_idle(&d);
        collect(&d, d.next, d.inflight == NULL);
        if (lb_consumer_fatal(d.consumer)) {
            status = LB_EXIT_RUNTIME;
            break;
        }
        drop_revoked(d.next);
        if (d.next->n && prepare_next(&d) != 0) {
            status = LB_EXIT_RUNTIME;
            break;
        }
        if (d.inflight) {
            if (complete_inflight(&d, 1) != 0) {
                status = LB_EXIT_RUNTIME;
                break;
            }
        } else if (d.next->n) {
            send_next(&d);
        }
    }
    /* Finish what is in Redis (if Redis is down, the wait gives up at once
     * now that stop is set) so its durable offsets are committed. */
    while (d.inflight && status == LB_EXIT_OK)
        if (complete_inflight(&d, 0) != 0)
            status = LB_EXIT_RUNTIME;
    LB_INFO("daemon", "stopping: committing durable offsets and leaving the group");

done:
    /* Messages must be gone before the consumer is destroyed; the counts are
     * cleared because closing revokes, and on_revoke walks every list. */
    for (int b = 0; b < 2; b++)
        destroy_messages(&d.batches[b]);
    for (size_t i = 0; i < d.ncarry; i++)
        rd_kafka_message_destroy(d.carry[i]);
    d.ncarry = 0;
    lb_metrics_stop(d.metrics);
    lb_consumer_close(d.consumer);
    /* before the batches go: late delivery reports write into them */
    lb_dlq_free(d.dlq, 5000);
    if (d.pipeline)
        log_totals(&d);
    lb_pipeline_free(d.pipeline);
    lb_cluster_free(d.cluster);
    lb_decoder_free(d.decoder);
    for (int b = 0; b < 2; b++) {
        free(d.batches[b].msgs);
        free(d.batches[b].revoked);
        free(d.batches[b].durable);
        free(d.batches[b].dlq);
        free(d.batches[b].reason);
        free(d.batches[b].detail);
        free(d.batches[b].records);
    }
    free(d.carry);
    free(d.marks);
    return status;
}
