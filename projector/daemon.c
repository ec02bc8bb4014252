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
#include "consumer.h"
#include "dlq.h"
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
    struct lb_dlq *dlq; /* NULL: no dead-letter topic configured */
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

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    int64_t now = monotonic_ms();
    if (now - d->last_commit_ms < d->config->commit_interval_ms)
        return;
    lb_consumer_commit(d->consumer, 1);
    d->last_commit_ms = now;
}

/* Fills 'b': carried-over records first, then polled ones, until it is
 * full, batch.linger has passed since its first record, or a stop is
 * requested. With 'wait' zero (a batch is in Redis and must not be kept
 * waiting) it takes only what has already arrived. */
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
        deadline = monotonic_ms() + d->config->batch_linger_ms;

    while (b->n < max && !*d->stop && !lb_consumer_fatal(d->consumer)) {
        int64_t timeout = 200;
        if (!wait)
            timeout = 0;
        else if (b->n) {
            timeout = deadline - monotonic_ms();
            if (timeout < 0)
                timeout = 0;
        }
        rd_kafka_message_t *msg = lb_consumer_poll(d->consumer, (int)timeout);
        if (msg) {
            b->msgs[b->n++] = msg;
            if (b->n == 1)
                deadline = monotonic_ms() + d->config->batch_linger_ms;
            continue;
        }
        if (!wait || (b->n && monotonic_ms() >= deadline))
            break;
        if (!b->n)
            maybe_commit(d);
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

/* Between retries: poll (partitions paused) so the group keeps us, hold on
 * to anything polled, give up only when stopping or when every record of the
 * batch has lost its partition. */
static int wait_for_redis(void *ctx, int64_t backoff_ms)
{
    struct daemon *d = ctx;
    int64_t deadline = monotonic_ms() + backoff_ms;

    lb_consumer_pause(d->consumer, 1);
    for (;;) {
        size_t live = 0;
        for (size_t i = 0; i < d->inflight->n; i++)
            live += !d->inflight->revoked[i];
        if (*d->stop || lb_consumer_fatal(d->consumer) || live == 0)
            return 1;
        int64_t left = deadline - monotonic_ms();
        if (left <= 0)
            return 0;
        rd_kafka_message_t *msg = lb_consumer_poll(d->consumer, (int)(left < 100 ? left : 100));
        if (msg)
            carry_push(d, msg);
    }
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
    int64_t backoff = 100, since = monotonic_ms(), warned = since;
    for (;;) {
        size_t pending = 0, failed = 0;
        for (size_t i = 0; i < b->n; i++) {
            pending += b->dlq[i] == LB_DLQ_PENDING;
            failed += b->dlq[i] == LB_DLQ_FAILED;
        }
        if (!pending && !failed)
            return;
        if (*d->stop || lb_consumer_fatal(d->consumer)) {
            lb_dlq_poll(d->dlq, pending ? 2000 : 0);
            for (size_t i = 0; i < b->n; i++)
                if (b->dlq[i] == LB_DLQ_PENDING || b->dlq[i] == LB_DLQ_FAILED)
                    b->durable[i] = 0;
            return;
        }
        if (pending) {
            lb_dlq_poll(d->dlq, 100);
            if (monotonic_ms() - warned >= 5000) {
                warned = monotonic_ms();
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
        int64_t until = monotonic_ms() + backoff;
        while (!*d->stop && monotonic_ms() < until) {
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
    if (lb_pipeline_prepare(d->pipeline, b->records, b->n, wall_ms()) != 0) {
        LB_ERROR("daemon", "out of memory projecting a batch of %zu records; stopping", b->n);
        return -1;
    }
    return 0;
}

/* Sends d->next; it becomes the batch in flight. */
static void send_next(struct daemon *d)
{
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
    lb_pipeline_complete(d->pipeline, done->durable, wait_for_redis, d);
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
    lb_cluster_options_from_config(config, &options);
    options.script = lb_apply_script();
    options.script_sha = lb_apply_script_sha();

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
    d.last_commit_ms = monotonic_ms();
    if (getenv("LB_FAULT_CRASH_AFTER_BATCHES"))
        d.crash_after_batches = strtoull(getenv("LB_FAULT_CRASH_AFTER_BATCHES"), NULL, 10);

    while (!*stop) {
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
