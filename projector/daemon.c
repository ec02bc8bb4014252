/* The daemon loop; see daemon.h.
 *
 * Two batches take turns: while one is in Redis (sent, replies not read), the
 * next is collected from Kafka and decoded and planned, so the daemon's own
 * work overlaps Redis'. The next batch is sent once the one in flight is
 * complete, so writes reach Redis in order.
 *
 * Containment. A batch completes even when some boards could not be
 * written: after a short retry in place, the pipeline holds those boards'
 * (board, partition) pairs and withholds later events of them, and the
 * daemon settles every record with the consumer's offset tracker, which
 * stops each partition's commits at its first record that is not durable.
 * Every other board and partition keeps flowing. A held partition is read
 * again from its held offset after a back-off (a rewind): records of it
 * already polled or in the next batch are dropped, and its pairs are
 * released in the pipeline just before the first batch read after the
 * rewind is sent, so the events read again are written in offset order
 * and the markers skip what was written meanwhile.
 *
 * Rebalances: the revoke hook runs inside lb_consumer_poll. Records of
 * revoked partitions that are not yet planned are dropped; those already
 * planned or in flight are still written (harmless: the markers make every
 * write idempotent) but not settled: the partition's new owner starts from
 * the last commit. The revoked partitions' pairs are released, like after a
 * rewind, before the first batch that can hold records of a new
 * assignment: the one being collected when the revoke comes during a
 * collect (a rejoin can assign the partitions again before it ends).
 */
#include "daemon.h"
#include "clock.h"
#include "closer.h"
#include "consumer.h"
#include "dlq.h"
#include "httpd.h"
#include "log.h"
#include "engine.h"
#include "flow.h"
#include "planner.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A held-back write is retried in place this long before it is held (and
 * retried by reading its partition again). */
#define RETRY_IN_PLACE_MS 1000

/* A batch of the conveyor (flow.h) and what the daemon keeps per record. */
struct batch {
    struct lb_batch base; /* first: a struct lb_batch * of ours is a struct batch * */
    uint8_t *skip;        /* its partition was revoked or rewound: not settled */
    uint8_t *dlq;         /* enum lb_dlq_state of each record */
};

static struct batch *batch_of(struct lb_batch *base)
{
    return (struct batch *)(void *)base;
}

/* A partition read again (or revoked) whose held pairs the pipeline keeps
 * until the batches read before are sent. */
struct release {
    char *topic;
    int32_t partition;
    uint64_t seq; /* release before sending batch 'seq' (the first read after) */
};

struct daemon {
    const struct lb_config *config;
    struct lb_consumer *consumer;
    struct lb_engine *engine;
    struct lb_dlq *dlq;         /* NULL: no dead-letter topic configured */
    struct lb_metrics *metrics; /* NULL: no metrics.listen */
    struct lb_histogram batch_events, batch_seconds;
    int64_t batch_sent_ms, last_publish_ms, last_ping_ms;
    int redis_ok;           /* the last write (or ping) reached Redis */
    struct lb_request ping; /* the readiness probe, while ping_pending */
    int ping_pending;
    uint16_t ping_slot;
    int64_t give_up_at;  /* once stopping: when retries end (shutdown.drain_timeout) */
    int drain_cut;       /* the drain timeout ended a retry: something was left unwritten */
    int64_t retry_since; /* when the batch in flight first failed, or 0 */
    volatile sig_atomic_t *stop;

    struct batch batches[2];
    struct lb_flow flow; /* its next (collected, planned) and inflight (in Redis) */
    int collecting;      /* inside collect(): its batch drops what was polled before a revoke */

    rd_kafka_message_t **carry; /* polled while retrying; start of the next batch */
    size_t ncarry, capcarry;

    struct release *releases;
    size_t nreleases, capreleases;

    int64_t last_commit_ms;
    struct lb_ratelimit dlq_said, ping_said;

    /* Fault injection for the tests (LB_FAULT_CRASH_AFTER_BATCHES=N): die
     * with _exit right after the Nth batch is in Redis, before its offsets
     * are stored: the crash between EXEC and commit, on demand. */
    uint64_t crash_after_batches;
    uint64_t batches_written;
};

static struct batch *next_batch(struct daemon *d)
{
    return batch_of(d->flow.next);
}

/* NULL when nothing is in Redis. */
static struct batch *inflight_batch(struct daemon *d)
{
    return d->flow.inflight ? batch_of(d->flow.inflight) : NULL;
}

static int in_list(const rd_kafka_topic_partition_list_t *list, const rd_kafka_message_t *msg)
{
    return rd_kafka_topic_partition_list_find(list, rd_kafka_topic_name(msg->rkt),
                                              msg->partition) != NULL;
}

static int is_partition(const rd_kafka_message_t *msg, const char *topic, int32_t partition)
{
    const char *name = rd_kafka_topic_name(msg->rkt);
    return msg->partition == partition && name && topic && strcmp(name, topic) == 0;
}

/* Remembers to release the partition's held pairs before the first batch
 * collected from now on is sent. */
static void release_later(struct daemon *d, const char *topic, int32_t partition)
{
    if (d->nreleases == d->capreleases) {
        size_t cap = d->capreleases ? d->capreleases * 2 : 16;
        struct release *grown = realloc(d->releases, cap * sizeof(*grown));
        if (!grown)
            goto oom;
        d->releases = grown;
        d->capreleases = cap;
    }
    char *name = strdup(topic);
    if (!name)
        goto oom;
    /* The first batch that can hold records read again (from the commit
     * after a revoke, from the hold after a rewind): the one being collected
     * if we are in collect(), whose records polled before are dropped
     * (skip) before it is planned; else the next, since the one collected
     * last is planned already and must still withhold what is held. A
     * revoke and the new assignment can both come while one batch is
     * collected (a rejoin after a Kafka outage): released only with the
     * next batch, holds made by its records (read from the new
     * assignment's commit) would be released without a rewind, and the
     * later events of a failed board written past its failed ones. */
    d->releases[d->nreleases++] = (struct release){
        name, partition, d->collecting ? d->flow.collected : d->flow.collected + 1};
    return;
oom:
    /* its events would stay withheld: stop rather than stall silently */
    LB_ERROR("daemon", "out of memory releasing %s [%d]; stopping", topic, partition);
    *d->stop = 1;
}

/* Releases, before batch 'b' is sent, what was read again before it. */
static void release_due(struct daemon *d, const struct batch *b)
{
    size_t kept = 0;
    for (size_t i = 0; i < d->nreleases; i++) {
        struct release *r = &d->releases[i];
        if (r->seq <= b->base.seq) {
            lb_pipeline_release(d->engine->pipeline, r->topic, r->partition);
            free(r->topic);
        } else {
            d->releases[kept++] = *r;
        }
    }
    d->nreleases = kept;
}

/* Drops the polled records of one partition (or of several: 'partitions')
 * that were not collected into a batch yet. */
static void drop_carried(struct daemon *d, const rd_kafka_topic_partition_list_t *partitions,
                         const char *topic, int32_t partition)
{
    size_t kept = 0;
    for (size_t i = 0; i < d->ncarry; i++) {
        if (partitions ? in_list(partitions, d->carry[i])
                       : is_partition(d->carry[i], topic, partition))
            rd_kafka_message_destroy(d->carry[i]);
        else
            d->carry[kept++] = d->carry[i];
    }
    d->ncarry = kept;
}

static void on_revoke(void *ctx, const rd_kafka_topic_partition_list_t *partitions)
{
    struct daemon *d = ctx;
    for (int b = 0; b < 2; b++)
        for (size_t i = 0; i < d->batches[b].base.n; i++)
            if (in_list(partitions, d->batches[b].base.msgs[i]))
                d->batches[b].skip[i] = 1;
    drop_carried(d, partitions, NULL, 0);
    for (int i = 0; i < partitions->cnt; i++) {
        release_later(d, partitions->elems[i].topic, partitions->elems[i].partition);
        lb_flow_unwait(&d->flow, partitions->elems[i].topic, partitions->elems[i].partition);
    }
}

/* The consumer read a held partition again from its held offset: what was
 * polled of it before is read again, so it is not settled or collected. */
static void on_rewind(void *ctx, const char *topic, int32_t partition, int64_t offset)
{
    struct daemon *d = ctx;
    (void)offset;
    for (int b = 0; b < 2; b++)
        for (size_t i = 0; i < d->batches[b].base.n; i++)
            if (is_partition(d->batches[b].base.msgs[i], topic, partition))
                d->batches[b].skip[i] = 1;
    drop_carried(d, NULL, topic, partition);
    release_later(d, topic, partition);
    lb_flow_unwait(&d->flow, topic, partition);
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

/* A committed partition is never read again below its commit by this
 * group: the dead-letter module can forget its records there. */
static void forget_committed(void *ctx, const struct lb_partition_progress *pp)
{
    if (pp->committed >= 0)
        lb_dlq_forget_below(ctx, pp->topic, pp->partition, pp->committed);
}

static int64_t tops_floor(void *tops, const char *topic, int32_t partition,
                          enum lb_hold_reason *why)
{
    return lb_tops_floor(tops, topic, partition, why);
}

static void count_held(void *ctx, const struct lb_partition_progress *pp)
{
    *(size_t *)ctx += pp->hold >= 0;
}

static void maybe_commit(struct daemon *d)
{
    int64_t now = lb_monotonic_ms();
    if (now - d->last_commit_ms < d->config->commit_interval_ms)
        return;
    lb_consumer_commit(d->consumer, 1);
    d->last_commit_ms = now;
    if (d->dlq)
        lb_consumer_progress(d->consumer, forget_committed, d->dlq);
}

/* Fills 'b': carried-over records first, then polled ones, until it is
 * full, batch.linger has passed since its first record, a stop is
 * requested, or the loop has a rebuild, a merged top or final standings to
 * see to. With 'wait' zero (a batch is in Redis) it does not wait for a
 * first record: with none there, the batch in Redis is seen to first. A
 * batch begun waits out its linger either way, so a pod keeping up with its
 * topic sends a linger's worth of events per request, not what came in
 * during one round trip (each request has a fixed cost to Redis: README
 * "Performance", "Batches while tailing"); meanwhile the batch in Redis is
 * moved on (its requests written as its sockets take them, its replies
 * read) every millisecond until all its replies are in. */
static void publish(struct daemon *d, int now);
static void ping_if_idle(struct daemon *d);
static void reload_log_level(const struct lb_config *config);

static int64_t linger_end(const struct daemon *d, int64_t due)
{
    int64_t end = lb_monotonic_ms() + d->config->batch_linger_ms;
    return end < due ? end : due;
}

static void collect(struct daemon *d, struct batch *b, int wait)
{
    size_t max = (size_t)d->config->batch_max_events;

    size_t take = d->ncarry < max ? d->ncarry : max;
    if (take) {
        memcpy(b->base.msgs, d->carry, take * sizeof(*b->base.msgs));
        memmove(d->carry, d->carry + take, (d->ncarry - take) * sizeof(*d->carry));
        d->ncarry -= take;
    }
    b->base.n = take;
    lb_flow_begin(&d->flow);
    d->collecting = 1;
    memset(b->skip, 0, max);

    /* a rebuild to step: back to the loop every 10 ms (while nothing comes,
     * or when a batch has waited that long); a merged top due: back by
     * then */
    int64_t start = lb_monotonic_ms();
    int stepping = d->engine->rebuild && lb_rebuild_busy(d->engine->rebuild, start);
    int64_t top_due = d->engine->tops ? lb_tops_next_due(d->engine->tops) : INT64_MAX;
    int rebuilding = stepping || top_due != INT64_MAX;
    /* final standings to look for: back by then */
    int64_t closer_due = d->engine->closer ? lb_closer_next_due(d->engine->closer) : INT64_MAX;
    int64_t due = top_due < closer_due ? top_due : closer_due;
    if (stepping && start + 10 < due)
        due = start + 10;
    /* a batch begun waits until then, or until its linger ends */
    int64_t until = b->base.n ? linger_end(d, due) : INT64_MAX;
    int answered = wait; /* every reply of the batch in Redis is in */
    int64_t moved = 0;   /* when it was last moved on: once a millisecond */
    while (b->base.n < max && !*d->stop && !lb_consumer_fatal(d->consumer)) {
        int64_t now = lb_monotonic_ms(), timeout = rebuilding ? 10 : 200;
        if (due - now < timeout)
            timeout = due > now ? due - now : 0;
        if (b->base.n) {
            timeout = until > now ? until - now : 0;
            if (!answered && timeout > 1)
                timeout = 1;
        } else if (!wait) {
            timeout = 0;
        }
        rd_kafka_message_t *msg = lb_consumer_poll(d->consumer, (int)timeout);
        if (!answered && (!msg || lb_monotonic_ms() != moved)) {
            answered = lb_flow_progress(&d->flow);
            moved = lb_monotonic_ms();
        }
        if (msg) {
            b->base.msgs[b->base.n++] = msg;
            if (b->base.n == 1)
                until = linger_end(d, due);
            continue;
        }
        if (b->base.n ? lb_monotonic_ms() >= until : !wait)
            break;
        if (!b->base.n) { /* idle */
            maybe_commit(d);
            if (d->engine->registry &&
                lb_registry_progress(d->engine->registry, d->engine->decoder, lb_monotonic_ms()))
                *d->stop = 1; /* out of memory: what is not committed is read again */
            lb_consumer_rewind_due(d->consumer, on_rewind, d);
            publish(d, 0);
            ping_if_idle(d);
            if (lb_log_reload)
                reload_log_level(d->config);
            if (rebuilding || lb_monotonic_ms() >= due)
                break;
        }
    }
    d->collecting = 0;
}

/* Drops records whose partition was revoked or read again while the batch
 * was collected. */
static void drop_skipped(struct batch *b)
{
    size_t kept = 0;
    for (size_t i = 0; i < b->base.n; i++) {
        if (b->skip[i]) {
            rd_kafka_message_destroy(b->base.msgs[i]);
            continue;
        }
        b->base.msgs[kept] = b->base.msgs[i];
        b->skip[kept++] = 0;
    }
    b->base.n = kept;
}

static void destroy_messages(struct batch *b)
{
    if (b->dlq)
        memset(b->dlq, 0, b->base.n);
    lb_flow_done(&b->base);
}

/* Whether the drain timeout has ended retrying: only once stopping, so a
 * short outage during a rolling restart still lets the batch in hand land
 * and be committed. */
static int drain_over(struct daemon *d)
{
    if (!*d->stop)
        return 0;
    if (!d->give_up_at)
        d->give_up_at = lb_monotonic_ms() + d->config->drain_timeout_ms;
    return lb_monotonic_ms() >= d->give_up_at;
}

/* Between retries in place: poll so the group keeps us, hold on to what is
 * polled, and say when to stop retrying and hold what failed: after
 * RETRY_IN_PLACE_MS (or, when stopping, the drain timeout), or when every
 * record of the batch has lost its partition. */
static int wait_for_redis(void *ctx, int64_t backoff_ms)
{
    struct daemon *d = ctx;
    int64_t now = lb_monotonic_ms(), deadline = now + backoff_ms;

    const struct lb_pipeline_failure *f = lb_pipeline_last_failure(d->engine->pipeline);
    if (!d->retry_since)
        d->retry_since = now;
    d->redis_ok = !f->transient;
    /* what failed needs an operator (a key of the wrong type, a missing
     * permission): retrying in place would only slow every other board */
    if (!f->transient && !*d->stop)
        return 1;
    for (;;) {
        size_t live = 0;
        for (size_t i = 0; i < inflight_batch(d)->base.n; i++)
            live += !inflight_batch(d)->skip[i];
        if (lb_consumer_fatal(d->consumer) || live == 0)
            return 1;
        if (*d->stop && drain_over(d)) {
            d->drain_cut = 1;
            return 1;
        }
        if (!*d->stop && lb_monotonic_ms() - d->retry_since >= RETRY_IN_PLACE_MS)
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

struct progress_page {
    struct daemon *d;
    struct lb_text *t;
    int pass; /* which family is being written */
    int held, paused;
};

/* One partition's series of one family: lag from the committed offset (0 on
 * an idle, caught-up partition from the first scrape after a restart), the
 * time its commit last moved, and whether it is held, with why. */
static void progress_series(void *ctx, const struct lb_partition_progress *pp)
{
    struct progress_page *pg = ctx;
    rd_kafka_t *rk = lb_consumer_handle(pg->d->consumer);
    int64_t low, high;
    switch (pg->pass) {
    case 0:
        /* the watermarks librdkafka last fetched (no network call here), or
         * before the first fetch, those read at the assignment */
        if (rd_kafka_get_watermark_offsets(rk, pp->topic, pp->partition, &low, &high) || high < 0) {
            high = pp->high_at_assign;
            low = 0;
        }
        if (high < 0)
            return;
        int64_t from = pp->committed >= 0 ? pp->committed : low;
        lb_text_printf(pg->t, "lb_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n", pp->topic,
                       pp->partition, (long long)(high > from ? high - from : 0));
        break;
    case 1:
        lb_text_printf(pg->t,
                       "lb_partition_last_commit_timestamp_seconds{topic=\"%s\",partition=\"%d\"} "
                       "%.3f\n",
                       pp->topic, pp->partition, (double)pp->committed_wall_ms / 1000.0);
        break;
    case 2:
        pg->held += pp->hold >= 0;
        pg->paused += pp->paused;
        for (int r = LB_HOLD_REDIS; r < LB_HOLD__COUNT; r++)
            lb_text_printf(pg->t,
                           "lb_partition_held{topic=\"%s\",partition=\"%d\",reason=\"%s\"} %d\n",
                           pp->topic, pp->partition, lb_hold_reason_name((enum lb_hold_reason)r),
                           pp->hold >= 0 && pp->reason == (enum lb_hold_reason)r);
        break;
    }
}

static void render_partitions(struct daemon *d, struct lb_text *t)
{
    struct progress_page pg = {.d = d, .t = t};
    gauge(
        t, "lb_consumer_lag",
        "Events in the partition after the group's committed offset (high watermark - committed).");
    lb_consumer_progress(d->consumer, progress_series, &pg);
    pg.pass = 1;
    gauge(t, "lb_partition_last_commit_timestamp_seconds",
          "When the partition's committed offset last moved (or was read at assignment).");
    lb_consumer_progress(d->consumer, progress_series, &pg);
    pg.pass = 2;
    gauge(t, "lb_partition_held",
          "1 while the partition's commits stop at a record that is not durable yet, by reason: "
          "redis (Redis failing), board (a board needs an operator), dlq (the dead-letter topic "
          "failing), registry (the schema registry not answering), top (a split board's merged "
          "top does not show it past its staleness: another refresher holds its lease), "
          "stopping.");
    lb_consumer_progress(d->consumer, progress_series, &pg);
    gauge(t, "lb_partitions_held", "Assigned partitions whose commits are held.");
    lb_text_printf(t, "lb_partitions_held %d\n", pg.held);
    gauge(t, "lb_partitions_paused",
          "Assigned partitions not fetched while their held events wait (read again later).");
    lb_text_printf(t, "lb_partitions_paused %d\n", pg.paused);
}

/* The daemon's counters at one moment, gathered from their modules. */
struct totals {
    uint64_t consumed, applied, rejected, dead_lettered, late_windows, late_after_close,
        member_updates, batches, write_failures, replans, skipped_segments, overlapped,
        no_timestamp, duplicates, conflicts;
    uint64_t schemas_fetched, schemas_unknown, schemas_unusable, registry_failures;
    uint64_t requests, moved, ask, retry_later, command_errors, connection_errors, timeouts,
        refreshes, wait_shortfalls, unwaited;
};

static void gather(const struct daemon *d, struct totals *t)
{
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(d->engine->pipeline);
    struct lb_cluster_stats cs;
    lb_pipeline_redis_stats(d->engine->pipeline, &cs);
    *t = (struct totals){.consumed = ps->records,
                         .applied = ps->applied,
                         .dead_lettered = d->dlq ? lb_dlq_stats(d->dlq)->delivered : 0,
                         .late_windows = ps->late_windows,
                         .late_after_close = ps->late_after_close,
                         .member_updates = ps->member_updates,
                         .batches = ps->batches,
                         .write_failures = ps->write_failures,
                         .replans = ps->replans,
                         .skipped_segments = ps->skipped_segments,
                         .overlapped = ps->overlapped,
                         .no_timestamp = ps->no_timestamp,
                         .duplicates = ps->duplicates,
                         .conflicts = ps->conflicts,
                         .requests = cs.requests,
                         .moved = cs.moved,
                         .ask = cs.ask,
                         .retry_later = cs.retry_later,
                         .command_errors = cs.command_errors,
                         .connection_errors = cs.connection_errors,
                         .timeouts = cs.timeouts,
                         .refreshes = cs.refreshes,
                         .wait_shortfalls = cs.wait_shortfalls,
                         .unwaited = cs.unwaited};
    for (int r = 1; r < LB_REJECT__COUNT; r++)
        t->rejected += ps->rejected[r];
    if (d->engine->registry) {
        const struct lb_registry_stats *rs = lb_registry_stats(d->engine->registry);
        t->schemas_fetched = rs->fetched;
        t->schemas_unknown = rs->unknown;
        t->schemas_unusable = rs->unusable;
        t->registry_failures = rs->failures;
    }
}

/* Every counter of struct totals, defined once: its series on /metrics (a
 * family's HELP with its first series; no family: the log only) and its
 * key in the totals logged at exit (none: /metrics only). */
#define TOTAL(field) offsetof(struct totals, field)
static const struct counter_def {
    const char *family, *help, *label, *log;
    size_t offset;
} counters[] = {
    {"lb_events_total", "Events read from Kafka and what became of them.", "outcome=\"consumed\"",
     "records", TOTAL(consumed)},
    {"lb_events_total", NULL, "outcome=\"applied\"", "applied", TOTAL(applied)},
    {"lb_events_total", NULL, "outcome=\"rejected\"", "rejected", TOTAL(rejected)},
    {"lb_events_total", NULL, "outcome=\"dead_lettered\"", NULL, TOTAL(dead_lettered)},
    {"lb_events_total", NULL, "outcome=\"duplicate\"", "duplicates", TOTAL(duplicates)},
    {"lb_events_total", NULL, "outcome=\"conflict\"", "conflicts", TOTAL(conflicts)},
    {NULL, NULL, NULL, "member_updates", TOTAL(member_updates)},
    {"lb_late_window_writes_total",
     "Window writes skipped because the window had expired (late events).", NULL, "late_windows",
     TOTAL(late_windows)},
    {"lb_late_after_close_total",
     "Events that came after a window they fall in had closed (final standings): not written to "
     "it.",
     NULL, "late_after_close", TOTAL(late_after_close)},
    {NULL, NULL, NULL, "batches", TOTAL(batches)},
    {"lb_redis_requests_total", "Requests sent to Redis (one per board per batch).", NULL,
     "redis_requests", TOTAL(requests)},
    {"lb_redis_requests_pipelined_total",
     "Board requests sent to a master that had answered the batch ahead, before the rest of "
     "that batch was checked.",
     NULL, "overlapped", TOTAL(overlapped)},
    {"lb_redis_redirections_total", "Cluster redirections followed, by kind.", "kind=\"moved\"",
     "moved", TOTAL(moved)},
    {"lb_redis_redirections_total", NULL, "kind=\"ask\"", "ask", TOTAL(ask)},
    {"lb_redis_errors_total", "Redis failures, by kind; the batch is retried.",
     "kind=\"retry_later\"", "retry_later", TOTAL(retry_later)},
    {"lb_redis_errors_total", NULL, "kind=\"command\"", "command_errors", TOTAL(command_errors)},
    {"lb_redis_errors_total", NULL, "kind=\"connection\"", "connection_errors",
     TOTAL(connection_errors)},
    {"lb_redis_errors_total", NULL, "kind=\"timeout\"", "timeouts", TOTAL(timeouts)},
    {"lb_redis_errors_total", NULL, "kind=\"wait_shortfall\"", "wait_shortfalls",
     TOTAL(wait_shortfalls)},
    {"lb_redis_writes_without_wait_total",
     "Rounds of writes to a master sent without WAIT because it had no healthy replica "
     "(redis.wait_replicas: auto): a failover can lose them until replay rebuilds them.",
     NULL, "unwaited", TOTAL(unwaited)},
    {NULL, NULL, NULL, "slot_map_refreshes", TOTAL(refreshes)},
    {"lb_redis_retries_total", "Board requests written again after a failure.", NULL,
     "write_failures", TOTAL(write_failures)},
    {"lb_redis_replans_total",
     "Board requests planned again because part of them was applied before.", NULL, "replans",
     TOTAL(replans)},
    {NULL, NULL, NULL, "skipped_segments", TOTAL(skipped_segments)},
    {"lb_records_without_timestamp_total",
     "Records without a Kafka timestamp: input.max_future compared their events with the clock.",
     NULL, "no_timestamp", TOTAL(no_timestamp)},
    {"lb_schema_registry_requests_total",
     "Requests to the schema registry (input.registry), by result: fetched, unknown (404 "
     "40403: dead-lettered), unusable (not a readable Avro writer: dead-lettered), failed (no "
     "answer: the records wait).",
     "result=\"fetched\"", "schemas_fetched", TOTAL(schemas_fetched)},
    {"lb_schema_registry_requests_total", NULL, "result=\"unknown\"", "schemas_unknown",
     TOTAL(schemas_unknown)},
    {"lb_schema_registry_requests_total", NULL, "result=\"unusable\"", "schemas_unusable",
     TOTAL(schemas_unusable)},
    {"lb_schema_registry_requests_total", NULL, "result=\"failed\"", "registry_failures",
     TOTAL(registry_failures)},
};
#undef TOTAL

static uint64_t counter_value(const struct totals *t, const struct counter_def *c)
{
    return *(const uint64_t *)(const void *)((const char *)t + c->offset);
}

/* Renders every metric (all counters live in this thread) and publishes
 * the page with the readiness, at most once a second unless 'now'. */
static void publish(struct daemon *d, int now)
{
    if (!d->metrics || (!now && lb_monotonic_ms() - d->last_publish_ms < 1000))
        return;
    d->last_publish_ms = lb_monotonic_ms();
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(d->engine->pipeline);
    const struct lb_consumer_stats *ks = lb_consumer_stats(d->consumer);
    struct lb_text t = {0};
    struct totals totals;
    gather(d, &totals);

    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        const struct counter_def *c = &counters[i];
        if (!c->family)
            continue;
        if (c->help)
            counter(&t, c->family, c->help);
        lb_text_printf(&t, c->label ? "%s{%s} %llu\n" : "%s%s %llu\n", c->family,
                       c->label ? c->label : "", (unsigned long long)counter_value(&totals, c));
    }
    counter(&t, "lb_rejected_events_total", "Events that could not be projected, by reason.");
    for (int r = 1; r < LB_REJECT__COUNT; r++)
        if (r != LB_REJECT_WINDOW_CLOSED) /* written elsewhere: lb_late_after_close_total */
            lb_text_printf(&t, "lb_rejected_events_total{reason=\"%s\"} %llu\n",
                           lb_reject_name((enum lb_reject)r), (unsigned long long)ps->rejected[r]);
    counter(&t, "lb_dlq_records_total", "Records produced to the dead-letter topic, by result.");
    if (d->dlq) {
        const struct lb_dlq_stats *ds = lb_dlq_stats(d->dlq);
        lb_text_printf(&t,
                       "lb_dlq_records_total{result=\"sent\"} %llu\n"
                       "lb_dlq_records_total{result=\"delivered\"} %llu\n"
                       "lb_dlq_records_total{result=\"failed\"} %llu\n"
                       "lb_dlq_records_total{result=\"by_reference\"} %llu\n",
                       (unsigned long long)ds->sent, (unsigned long long)ds->delivered,
                       (unsigned long long)ds->failed, (unsigned long long)ds->by_reference);
    }
    counter(&t, "lb_dlq_failures_total",
            "Dead-letter records refused or lost, by kind: too_large (sent again by reference), "
            "unauthorized, topic_missing, timeout, other.");
    for (int k = 0; k < LB_DLQ_FAILURE__COUNT; k++)
        lb_text_printf(&t, "lb_dlq_failures_total{kind=\"%s\"} %llu\n",
                       lb_dlq_failure_name((enum lb_dlq_failure)k),
                       (unsigned long long)(d->dlq ? lb_dlq_stats(d->dlq)->failures[k] : 0));
    lb_text_histogram(&t, "lb_batch_events", "Events per batch.", &d->batch_events);
    lb_text_histogram(&t, "lb_batch_seconds", "From sending a batch to Redis to its last reply.",
                      &d->batch_seconds);
    lb_text_histogram(&t, "lb_commit_seconds", "From an offset commit to the broker's answer.",
                      &ks->commit_latency);
    lb_text_histogram(&t, "lb_event_visible_seconds",
                      "From an event's time to its write being acknowledged by Redis.",
                      &ps->visible);
    render_partitions(d, &t);
    gauge(&t, "lb_partitions_assigned", "Partitions assigned to this pod.");
    lb_text_printf(&t, "lb_partitions_assigned %d\n", ks->assigned);
    gauge(&t, "lb_held_board_partitions",
          "(board, partition) pairs whose events are withheld behind a held event.");
    lb_text_printf(&t, "lb_held_board_partitions %zu\n", lb_pipeline_held(d->engine->pipeline));
    if (d->engine->rebuild) {
        const struct lb_rebuild_stats *rs = lb_rebuild_stats(d->engine->rebuild);
        gauge(&t, "lb_decay_rebuilds_pending",
              "Decaying boards whose overall board this pod has still to rebuild.");
        lb_text_printf(&t, "lb_decay_rebuilds_pending %zu\n",
                       lb_rebuild_pending(d->engine->rebuild));
        counter(&t, "lb_decay_rebuilds_total",
                "Overall-board rebuilds by this pod: started (lease taken), finished (swapped in), "
                "restarted (a newer patch or a lost lease), failed steps, busy (another pod holds "
                "the lease).");
        lb_text_printf(&t,
                       "lb_decay_rebuilds_total{state=\"started\"} %llu\n"
                       "lb_decay_rebuilds_total{state=\"finished\"} %llu\n"
                       "lb_decay_rebuilds_total{state=\"restarted\"} %llu\n"
                       "lb_decay_rebuilds_total{state=\"failed\"} %llu\n"
                       "lb_decay_rebuilds_total{state=\"busy\"} %llu\n",
                       (unsigned long long)rs->started, (unsigned long long)rs->finished,
                       (unsigned long long)rs->restarts, (unsigned long long)rs->failures,
                       (unsigned long long)rs->busy);
        counter(&t, "lb_decay_rebuild_members_total",
                "Patch-board members taxed into a rebuilt overall board.");
        lb_text_printf(&t, "lb_decay_rebuild_members_total %llu\n",
                       (unsigned long long)rs->members);
    }
    if (d->engine->tops) {
        const struct lb_tops_stats *ts = lb_tops_stats(d->engine->tops);
        gauge(&t, "lb_top_windows_pending",
              "Windows of split boards changed by this pod whose merged top is not yet current.");
        lb_text_printf(&t, "lb_top_windows_pending %zu\n", lb_tops_pending(d->engine->tops));
        counter(&t, "lb_top_refreshes_total",
                "Merged-top refreshes by this pod: written, busy (another refresher holds the "
                "window's lease), stale (a newer snapshot got there first), failed.");
        lb_text_printf(&t,
                       "lb_top_refreshes_total{result=\"written\"} %llu\n"
                       "lb_top_refreshes_total{result=\"busy\"} %llu\n"
                       "lb_top_refreshes_total{result=\"stale\"} %llu\n"
                       "lb_top_refreshes_total{result=\"failed\"} %llu\n",
                       (unsigned long long)ts->refreshed, (unsigned long long)ts->busy,
                       (unsigned long long)ts->stale, (unsigned long long)ts->failures);
        lb_text_histogram(&t, "lb_top_staleness_seconds",
                          "From a split board's write being applied to its merged top showing it.",
                          &ts->staleness);
    }
    if (d->engine->closer) {
        const struct lb_closer_stats *cs = lb_closer_stats(d->engine->closer);
        counter(&t, "lb_results_windows_total",
                "Closed windows whose final standings this pod froze (claimed), published "
                "(every record acknowledged), or put back from the results topic (restored: "
                "the board's ~final was lost).");
        lb_text_printf(&t,
                       "lb_results_windows_total{result=\"claimed\"} %llu\n"
                       "lb_results_windows_total{result=\"published\"} %llu\n"
                       "lb_results_windows_total{result=\"restored\"} %llu\n",
                       (unsigned long long)cs->claimed, (unsigned long long)cs->published,
                       (unsigned long long)cs->restored);
        counter(&t, "lb_results_failures_total",
                "Steps of final standings that failed (Redis, Kafka): tried again.");
        lb_text_printf(&t, "lb_results_failures_total %llu\n", (unsigned long long)cs->failures);
        counter(&t, "lb_results_sweeps_total",
                "Sweeps of every master for boards with windows to close or claimed that "
                "completed (at the start, then every minute).");
        lb_text_printf(&t, "lb_results_sweeps_total %llu\n", (unsigned long long)cs->sweeps);
        gauge(&t, "lb_results_unrebuilt_slots",
              "Slots without an ~intact mark as last read (their node replaced empty or flushed, "
              "not rebuilt by replay yet: their windows do not close), or -1.");
        lb_text_printf(&t, "lb_results_unrebuilt_slots %ld\n", cs->unrebuilt_slots);
        gauge(&t, "lb_results_watermark_seconds",
              "The close watermark last read (event time the whole topic has committed), or -1.");
        lb_text_printf(&t, "lb_results_watermark_seconds %.3f\n",
                       cs->watermark < 0 ? -1.0 : (double)cs->watermark / 1000.0);
    }
    gauge(&t, "lb_last_commit_timestamp_seconds", "When offsets were last committed (0: never).");
    lb_text_printf(&t, "lb_last_commit_timestamp_seconds %.3f\n",
                   (double)ks->last_commit_ms / 1000.0);
    gauge(&t, "lb_redis_up", "1 when the last write or ping reached Redis.");
    lb_text_printf(&t, "lb_redis_up %d\n", d->redis_ok);
    gauge(&t, "lb_schema_registry_up",
          "1 when the last request to the schema registry that finished got an answer (also "
          "before the first), 0 when it got none; absent without input.registry.");
    if (d->engine->registry)
        lb_text_printf(&t, "lb_schema_registry_up %d\n",
                       lb_registry_stats(d->engine->registry)->up);
    gauge(&t, "lb_kafka_brokers_up",
          "Kafka brokers connected at the last statistics (-1 before the first).");
    lb_text_printf(&t, "lb_kafka_brokers_up %d\n", ks->brokers_up);
    /* ready: in the group with partitions, Redis answering, a broker reachable */
    lb_metrics_publish(d->metrics, &t, d->redis_ok && ks->assigned > 0 && ks->brokers_up != 0);
    lb_text_free(&t);
}

/* While idle, a PING tells /readyz whether Redis is still there, without
 * the loop ever waiting for it: it is started here and its reply picked up
 * on a later turn (lb_cluster_progress); a batch to send finishes it first. */
static void finish_ping(struct daemon *d)
{
    if (!d->ping_pending)
        return;
    lb_cluster_finish(d->engine->cluster);
    d->redis_ok = d->ping.ok && d->ping.reply && d->ping.reply->type == REDIS_REPLY_STATUS;
    int refused = d->ping.reply && d->ping.reply->type == REDIS_REPLY_ERROR;
    if (refused || (!d->ping.ok && d->ping.error_class == LB_REDIS_FIX))
        lb_log_every(&d->ping_said, 10000, LB_LOG_WARN, "redis",
                     "the readiness PING was refused: %.200s (/readyz says not ready)",
                     refused ? d->ping.reply->str : d->ping.error);
    if (d->ping.reply)
        freeReplyObject(d->ping.reply);
    d->ping.reply = NULL;
    d->ping_pending = 0;
}

static void ping_if_idle(struct daemon *d)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    if (d->ping_pending) {
        if (lb_cluster_progress(d->engine->cluster, 0))
            finish_ping(d);
        return;
    }
    if (!d->metrics || inflight_batch(d) || lb_monotonic_ms() - d->last_ping_ms < 1000)
        return;
    d->last_ping_ms = lb_monotonic_ms();
    /* a different master each time, over the slot ranges */
    d->ping_slot = (uint16_t)((d->ping_slot + 5461) % 16384);
    d->ping = (struct lb_request){.slot = d->ping_slot,
                                  .ncommands = 1,
                                  .no_refresh = 1,
                                  .bytes = ping,
                                  .len = sizeof(ping) - 1};
    lb_cluster_start(d->engine->cluster, &d->ping, 1);
    d->ping_pending = 1;
}

/* The pipeline could not project a record: dead-letter it. */
static void on_reject(void *ctx, const struct lb_record *r, enum lb_reject reason,
                      const char *detail)
{
    struct daemon *d = ctx;
    struct batch *candidates[2] = {next_batch(d), inflight_batch(d)};
    for (int k = 0; k < 2; k++) {
        struct batch *b = candidates[k];
        if (b && r >= b->base.records && r < b->base.records + b->base.n) {
            size_t i = (size_t)(r - b->base.records);
            b->dlq[i] = (uint8_t)lb_dlq_send(d->dlq, b->base.msgs[i], reason, detail);
            return;
        }
    }
}

/* Waits a little for the records of 'b' sent to the dead-letter topic to be
 * acknowledged, sending again what failed. What is still not there after
 * that (a second; the drain timeout when stopping) holds its partition at
 * it: the partition is read again later, and the record sent again. The
 * rest of the stream does not wait for it. Every record is looked up, not
 * only those rejected in this batch: one read again after a hold is not
 * always rejected again (the apply script skips what its markers hold,
 * and decides some rejects there), and its copy is as much in flight. */
static void settle_dlq(struct daemon *d, struct batch *b)
{
    int64_t now = lb_monotonic_ms(), until = now + 1000, backoff = 100, retry_at = now;
    if (*d->stop) {
        drain_over(d);
        until = d->give_up_at;
    }
    for (;;) {
        size_t pending = 0, failed = 0;
        for (size_t i = 0; i < b->base.n; i++) {
            enum lb_dlq_state st = lb_dlq_state(d->dlq, b->base.msgs[i]);
            if (st != LB_DLQ_NONE || b->dlq[i] != LB_DLQ_FAILED) /* failed: out of memory */
                b->dlq[i] = (uint8_t)st;
            pending += b->dlq[i] == LB_DLQ_PENDING;
            failed += b->dlq[i] == LB_DLQ_FAILED;
        }
        if (!pending && !failed)
            return;
        now = lb_monotonic_ms();
        if (now >= until || lb_consumer_fatal(d->consumer)) {
            lb_log_every(&d->dlq_said, 5000, LB_LOG_WARN, "dlq",
                         "%zu event(s) not in the dead-letter topic '%s' yet (%zu failed, %zu "
                         "waiting for the broker): their partitions hold there and are read again "
                         "later (is the topic there and writable?)",
                         pending + failed, d->config->dlq_topic, failed, pending);
            if (*d->stop)
                d->drain_cut = 1;
            return;
        }
        if (failed && now >= retry_at) {
            for (size_t i = 0; i < b->base.n; i++) {
                enum lb_dlq_state st = b->dlq[i] == LB_DLQ_FAILED
                                           ? lb_dlq_send_again(d->dlq, b->base.msgs[i])
                                           : LB_DLQ_NONE;
                if (st != LB_DLQ_NONE) /* none: not noted (out of memory), stays failed */
                    b->dlq[i] = (uint8_t)st;
            }
            retry_at = now + backoff;
            backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
        }
        lb_dlq_poll(d->dlq, 50);
    }
}

/* The offset tracker's view of record 'i' of a finished batch. */
static enum lb_hold_reason hold_reason(const struct batch *b, size_t i)
{
    if (i >= b->base.n - b->base.waiting)
        return LB_HOLD_REGISTRY;
    if (b->dlq[i] == LB_DLQ_PENDING || b->dlq[i] == LB_DLQ_FAILED)
        return LB_HOLD_DLQ;
    switch ((enum lb_record_state)b->base.state[i]) {
    case LB_RECORD_DURABLE:
        return LB_HOLD_NONE;
    case LB_RECORD_HELD_FIX:
        return LB_HOLD_BOARD;
    case LB_RECORD_WITHHELD_FIX:
        return LB_HOLD_BOARD;
    case LB_RECORD_HELD_RETRY:
    case LB_RECORD_WITHHELD:
        return LB_HOLD_REDIS;
    case LB_RECORD_NOT_DONE:
        break;
    }
    return LB_HOLD_STOPPING;
}

/* Settles every record of 'b' with the offset tracker: each partition's
 * commits advance over its durable records up to its first one that is not,
 * their event times moving its watermark. */
static void settle(struct daemon *d, const struct batch *b)
{
    for (size_t i = 0; i < b->base.n; i++)
        if (!b->skip[i])
            lb_consumer_settle(d->consumer, b->base.msgs[i], hold_reason(b, i),
                               lb_pipeline_event_time(d->engine->pipeline, i));
}

/* Fetches the writer schemas the batch needs from the registry (what
 * cannot be had now waits: its partition holds), then decodes and plans
 * it. Returns -1 when out of memory. */
static int prepare_next(struct daemon *d)
{
    struct lb_engine *e = d->engine;
    if ((e->registry &&
         lb_flow_resolve(&d->flow, e->registry, e->decoder, lb_monotonic_ms()) != 0) ||
        lb_flow_prepare(&d->flow, lb_wall_ms()) != 0) {
        LB_ERROR("daemon", "out of memory projecting a batch of %zu records; stopping",
                 d->flow.next->n);
        return -1;
    }
    return 0;
}

/* Sends the next batch; it becomes the batch in flight. */
static void send_next(struct daemon *d)
{
    finish_ping(d); /* one call into the cluster at a time */
    d->batch_sent_ms = lb_monotonic_ms();
    release_due(d, next_batch(d));
    lb_flow_send(&d->flow);
}

/* Waits for the batch in flight (retrying in place for a moment, then
 * holding what still fails), sends the next one if it is ready (so Redis is
 * not kept waiting for our bookkeeping), settles the finished batch's
 * records, reads held partitions again when due, and lets the batch go.
 * Returns -1 when out of memory. */
static int complete_inflight(struct daemon *d, int send_ready)
{
    struct lb_batch *base;
    d->retry_since = 0;
    int written = lb_flow_complete(&d->flow, wait_for_redis, d, &base);
    struct batch *done = batch_of(base);
    int64_t answered = lb_pipeline_answered_ms(d->engine->pipeline);
    lb_histogram_observe(&d->batch_seconds,
                         (double)((answered ? answered : lb_monotonic_ms()) - d->batch_sent_ms) /
                             1000.0);
    lb_histogram_observe(&d->batch_events, (double)done->base.n);
    /* Redis is up unless it failed for a reason of its own: a board that
     * needs an operator is not Redis being down. A batch that sent nothing
     * (its events all held back or dead-lettered) says nothing either way. */
    const struct lb_pipeline_failure *f = lb_pipeline_last_failure(d->engine->pipeline);
    if (f->sent)
        d->redis_ok = written == 0 || !f->transient;
    d->last_ping_ms = lb_monotonic_ms();
    if (d->crash_after_batches && ++d->batches_written == d->crash_after_batches) {
        LB_WARN("daemon",
                "LB_FAULT_CRASH_AFTER_BATCHES: exiting after writing batch %llu, "
                "before storing its offsets",
                (unsigned long long)d->batches_written);
        _exit(70);
    }
    if (send_ready && next_batch(d)->base.n && written >= 0)
        send_next(d);
    if (d->dlq)
        settle_dlq(d, done);
    settle(d, done);
    if (!*d->stop)
        lb_consumer_rewind_due(d->consumer, on_rewind, d);
    destroy_messages(done);
    maybe_commit(d);
    if (written < 0)
        LB_ERROR("daemon", "out of memory writing a batch; stopping (what is not committed is "
                           "redelivered)");
    return written < 0 ? -1 : 0;
}

static void log_totals(const struct daemon *d)
{
    struct totals totals;
    struct lb_text line = {0};
    gather(d, &totals);
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
        if (counters[i].log)
            lb_text_printf(&line, " %s=%llu", counters[i].log,
                           (unsigned long long)counter_value(&totals, &counters[i]));
    LB_INFO("daemon", "totals:%s", line.data && !line.oom ? line.data : " (out of memory)");
    lb_text_free(&line);
}

int lb_daemon_run(const struct lb_config *config, struct lb_engine *engine,
                  volatile sig_atomic_t *stop)
{
    struct daemon d = {.config = config, .stop = stop, .engine = engine};
    size_t max = (size_t)config->batch_max_events;
    char err[1024];
    int status = LB_EXIT_OK;
    enum lb_error_class class;
    int allocated =
        lb_flow_init(&d.flow, d.engine->pipeline, &d.batches[0].base, &d.batches[1].base, max) == 0;
    for (int b = 0; b < 2; b++) {
        d.batches[b].skip = calloc(max, 1);
        d.batches[b].dlq = calloc(max, 1);
        allocated = allocated && d.batches[b].skip && d.batches[b].dlq;
    }
    if (!allocated) {
        LB_ERROR("daemon", "out of memory");
        status = LB_EXIT_RUNTIME;
        goto done;
    }
    if (config->dlq_topic) {
        struct lb_dlq_options options = {lb_config_kafka(config), config->dlq_topic};
        d.dlq = lb_dlq_new(&options, err, sizeof(err), &class);
        if (!d.dlq) {
            LB_ERROR("daemon", "dead-letter producer: %s", err);
            status = class == LB_ERROR_CONFIG ? LB_EXIT_CONFIG : LB_EXIT_RUNTIME;
            goto done;
        }
        lb_pipeline_set_reject_hook(d.engine->pipeline, on_reject, &d);
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
    if (lb_cluster_refresh(d.engine->cluster) != 0)
        LB_WARN("redis", "%s; will keep trying", lb_cluster_error(d.engine->cluster));
    else
        LB_INFO("redis", "slot map loaded%s",
                lb_cluster_is_standalone(d.engine->cluster) ? " (standalone Redis)" : "");
    struct lb_consumer_options consumer = lb_config_consumer(config);
    d.consumer = lb_consumer_new(&consumer, on_revoke, &d, err, sizeof(err), &class);
    if (!d.consumer) {
        LB_ERROR("daemon", "%s", err);
        status = class == LB_ERROR_CONFIG ? LB_EXIT_CONFIG : LB_EXIT_RUNTIME;
        goto done;
    }
    LB_INFO("daemon", "consuming %zu topic(s) as group '%s'", config->ntopics, config->group);
    if (d.engine->tops) /* a record is committed once the merged tops show it */
        lb_consumer_set_floor(d.consumer, tops_floor, d.engine->tops);
    if (config->results_topic) {
        struct lb_closer_options co = {config, config->key_prefix, &d.engine->cluster_options};
        if (!(d.engine->closer = lb_closer_new(&co, err, sizeof(err), &class))) {
            LB_ERROR("daemon", "final standings: %s", err);
            status = class == LB_ERROR_CONFIG ? LB_EXIT_CONFIG : LB_EXIT_RUNTIME;
            goto done;
        }
        int sized = lb_closer_check_size(d.engine->closer, 5000, err, sizeof(err));
        if (sized < 0) {
            LB_ERROR("daemon", "%s", err);
            status = LB_EXIT_CONFIG;
            goto done;
        }
        if (sized > 0)
            LB_WARN("daemon", "final standings: %s; no window closes until it is known", err);
        LB_INFO("daemon", "final standings of closed windows go to topic '%s'",
                config->results_topic);
    }
    d.last_commit_ms = lb_monotonic_ms();
    if (d.engine->rebuild)
        lb_rebuild_sweep(d.engine->rebuild);
    if (getenv("LB_FAULT_CRASH_AFTER_BATCHES"))
        d.crash_after_batches = strtoull(getenv("LB_FAULT_CRASH_AFTER_BATCHES"), NULL, 10);

    while (!*stop) {
        if (lb_log_reload)
            reload_log_level(config);
        publish(&d, 0);
        ping_if_idle(&d);
        collect(&d, next_batch(&d), inflight_batch(&d) == NULL);
        if (lb_consumer_fatal(d.consumer)) {
            status = LB_EXIT_RUNTIME;
            break;
        }
        drop_skipped(next_batch(&d));
        if (d.engine->rebuild)
            lb_rebuild_step(d.engine->rebuild, lb_monotonic_ms());
        if (d.engine->tops)
            lb_tops_step(d.engine->tops, lb_monotonic_ms());
        if (d.engine->closer)
            lb_closer_step(d.engine->closer, lb_monotonic_ms());
        if (next_batch(&d)->base.n && prepare_next(&d) != 0) {
            status = LB_EXIT_RUNTIME;
            break;
        }
        if (inflight_batch(&d)) {
            if (complete_inflight(&d, 1) != 0) {
                status = LB_EXIT_RUNTIME;
                break;
            }
        } else if (next_batch(&d)->base.n) {
            send_next(&d);
        }
    }
    /* Finish what is in Redis (if Redis is down, the wait gives up at once
     * now that stop is set) so its durable offsets are committed. */
    while (inflight_batch(&d) && status == LB_EXIT_OK)
        if (complete_inflight(&d, 0) != 0)
            status = LB_EXIT_RUNTIME;
    /* merged tops of what this pod wrote: their records' commit waits */
    if (d.engine->tops && lb_tops_drain(d.engine->tops, lb_monotonic_ms() + 2000))
        LB_WARN("daemon",
                "%zu merged top(s) of split boards not refreshed at shutdown: the records "
                "that changed them are not committed, and are read again after a restart",
                lb_tops_pending(d.engine->tops));
    size_t held = 0;
    lb_consumer_progress(d.consumer, count_held, &held);
    if (status == LB_EXIT_OK && (d.drain_cut || held)) {
        status = LB_EXIT_DRAIN;
        if (d.drain_cut)
            LB_WARN("daemon",
                    "shutdown.drain_timeout (%lld ms) ended before everything read was "
                    "written; what is not committed is read again after a restart",
                    (long long)config->drain_timeout_ms);
        if (held)
            LB_WARN("daemon",
                    "%zu partition(s) held at shutdown: their records from the held "
                    "offset on are read again after a restart",
                    held);
    }
    LB_INFO("daemon", "stopping: committing durable offsets and leaving the group");

done:
    /* Messages must be gone before the consumer is destroyed; the counts are
     * cleared because closing revokes, and on_revoke walks every list. */
    for (int b = 0; b < 2; b++)
        destroy_messages(&d.batches[b]);
    for (size_t i = 0; i < d.ncarry; i++)
        rd_kafka_message_destroy(d.carry[i]);
    d.ncarry = 0;
    if (d.engine)
        finish_ping(&d);
    lb_metrics_stop(d.metrics);
    if (d.engine) { /* a record in flight is sent again later */
        lb_closer_free(d.engine->closer, 2000);
        d.engine->closer = NULL;
    }
    lb_consumer_close(d.consumer);
    /* before the batches go: late delivery reports write into them; within
     * what is left of shutdown.drain_timeout once it started counting (what
     * is not delivered was not committed either) */
    int64_t left = d.give_up_at ? d.give_up_at - lb_monotonic_ms() : 5000;
    lb_dlq_free(d.dlq, left <= 0 ? 0 : left < 5000 ? (int)left : 5000);
    d.dlq = NULL;
    if (d.engine)
        log_totals(&d);
    lb_engine_close(d.engine);
    lb_flow_free(&d.flow);
    for (int b = 0; b < 2; b++) {
        free(d.batches[b].skip);
        free(d.batches[b].dlq);
    }
    free(d.carry);
    for (size_t i = 0; i < d.nreleases; i++)
        free(d.releases[i].topic);
    free(d.releases);
    return status;
}
