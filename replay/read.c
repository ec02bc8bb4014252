/* Reading: every planned partition, from its own assignment, through the
 * projector's engine into staging keys, batches double-buffered like the
 * projector's, with progress and retries. */
#include "replay.h"

static struct part *part_of(struct replay *r, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < r->plan.count; i++)
        if (r->plan.parts[i].partition == partition && strcmp(r->plan.parts[i].topic, topic) == 0)
            return &r->plan.parts[i];
    return NULL;
}

void replay_note_written(void *ctx, const struct lb_plan_view *plan, uint32_t board,
                         const struct lb_apply_answer *answer, int replanned)
{
    struct replay *r = ctx;
    const struct lb_plan_board *b = &plan->boards[board];
    (void)answer;
    if (replanned || r->o.verify) /* its plan may reach past what was written; --verify swaps
                                   * nothing */
        return;
    long at = lb_names_add(&r->written, b->id.ptr, b->id.len);
    if (at >= 0 && (size_t)at >= r->cap_wrote) {
        size_t cap = r->cap_wrote ? 2 * r->cap_wrote : 64;
        int64_t **more = realloc(r->wrote, cap * sizeof(*more));
        if (more) {
            memset(more + r->cap_wrote, 0, (cap - r->cap_wrote) * sizeof(*more));
            r->wrote = more;
            r->cap_wrote = cap;
        }
    }
    if (at < 0 || (size_t)at >= r->cap_wrote) {
        r->wrote_failed = 1;
        return;
    }
    if (!r->wrote[at]) {
        if (!(r->wrote[at] = malloc((r->plan.count ? r->plan.count : 1) * sizeof(int64_t)))) {
            r->wrote_failed = 1;
            return;
        }
        for (size_t i = 0; i < r->plan.count; i++)
            r->wrote[at][i] = -1;
    }
    for (uint32_t s = b->first_segment; s != LB_PLAN_NONE; s = plan->segments[s].next) {
        const struct lb_plan_segment *seg = &plan->segments[s];
        struct part *p = part_of(r, seg->topic, seg->partition);
        if (p && seg->last > r->wrote[at][p - r->plan.parts])
            r->wrote[at][p - r->plan.parts] = seg->last;
    }
}

int64_t replay_written(const struct replay *r, const char *board, size_t part)
{
    long at = lb_names_find(&r->written, board, strlen(board));
    return at >= 0 && (size_t)at < r->cap_wrote && r->wrote[at] && part < r->plan.count
               ? r->wrote[at][part]
               : -1;
}

void replay_written_free(struct replay *r)
{
    for (size_t i = 0; i < r->written.count && i < r->cap_wrote; i++)
        free(r->wrote[i]);
    free(r->wrote);
    lb_names_free(&r->written);
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

/* "1 event", "2 events". */
static const char *events(uint64_t n)
{
    return n == 1 ? "event" : "events";
}

/* A progress bar on a terminal, a line every 5 s otherwise: events read,
 * rate, and the ETA of the slowest partition (all of them with --verbose).
 * Rates and ETAs only once a second has passed: before, they would be
 * guesses from a single batch. */
void replay_progress(struct replay *r, int final)
{
    double t = replay_mono_s(), elapsed = t - r->started;
    replay_keep_lease(r);
    if (!final && t - r->last_progress < (r->tty ? 0.25 : 5.0))
        return;
    r->last_progress = t;
    int timed = elapsed >= 1.0;
    double slowest = 0, prate;
    const struct part *last = NULL;
    for (size_t i = 0; i < r->plan.count; i++) {
        double eta = part_eta(&r->plan.parts[i], elapsed, &prate);
        if (eta < 0 || eta > slowest) {
            slowest = eta < 0 ? 1e9 : eta;
            last = &r->plan.parts[i];
        }
    }
    char rate[48] = "", eta[80] = "done";
    if (timed)
        snprintf(rate, sizeof(rate), ", %.0f events/s", (double)r->read / elapsed);
    if (last && !timed)
        snprintf(eta, sizeof(eta), "rate and ETA after the first second");
    else if (last && slowest >= 1e9)
        snprintf(eta, sizeof(eta), "%s [%d] not started", last->topic, last->partition);
    else if (last)
        snprintf(eta, sizeof(eta), "ETA %.0f s (%s [%d])", slowest, last->topic, last->partition);
    int64_t left = remaining(r);
    if (r->tty) {
        int64_t all = (int64_t)r->read + left;
        int width = 30, done = all ? (int)((double)r->read / (double)all * width) : width;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %llu %s read%s, %s   ", bar, (unsigned long long)r->read,
                events(r->read), rate, eta);
        if (final)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "replay: %llu %s read, %lld left%s, %s\n", (unsigned long long)r->read,
                events(r->read), (long long)left, rate, eta);
    }
    for (size_t i = 0; i < r->plan.count && r->o.verbose; i++) {
        const struct part *p = &r->plan.parts[i];
        double e = part_eta(p, elapsed, &prate);
        if (timed)
            fprintf(stderr, "  %s [%d]: at %lld of %lld, %.0f/s, ETA %s%.0f s\n", p->topic,
                    p->partition, (long long)p->read_to, (long long)p->end, prate, e < 0 ? ">" : "",
                    e < 0 ? 0.0 : e);
        else
            fprintf(stderr, "  %s [%d]: at %lld of %lld\n", p->topic, p->partition,
                    (long long)p->read_to, (long long)p->end);
    }
}

/* Between retries of a failing batch: replay retries until it is written
 * while Redis recovers by itself (failing over, a node being replaced),
 * saying why at every failed round, rate-limited; an interrupt gives up,
 * and so does an error an operator must fix (WRONGTYPE, NOPERM, OOM),
 * saying what it is. */
static int wait_between_retries(void *ctx, int64_t backoff_ms)
{
    struct replay *r = ctx;
    static struct lb_ratelimit said;
    const struct lb_pipeline_failure *f = lb_pipeline_last_failure(r->engine->pipeline);
    uint64_t suppressed;
    replay_keep_lease(r);
    if (replay_interrupted)
        return -1;
    if (f->needs_fix) { /* retrying will not help: the operator's, now */
        fprintf(stderr,
                "replay: writing to Redis failed: %s (a key of another type, the ACL rule, "
                "maxmemory); fix it and run replay again\n",
                f->reason);
        return -1;
    }
    if (lb_ratelimit_allow(&said, 5000, &suppressed))
        fprintf(stderr,
                "replay: writing to Redis failed (attempt %u, %zu board request(s)): %s; "
                "retrying in %lld ms%s\n",
                f->attempt, f->requests, f->reason, (long long)backoff_ms,
                suppressed ? " (earlier failures suppressed)" : "");
    usleep((useconds_t)backoff_ms * 1000);
    return replay_interrupted ? -1 : 0;
}

/* Waits for the batch in Redis, if any. */
static int finish_inflight(struct replay *r, struct lb_flow *flow)
{
    struct lb_batch *done;
    if (!flow->inflight)
        return 0;
    int rc = lb_flow_complete(flow, wait_between_retries, r, &done);
    if (rc < 0)
        fprintf(stderr, "replay: out of memory writing a batch\n");
    lb_flow_done(done);
    r->applied_batches++;
    return rc == 0 ? 0 : -1;
}

/* Fetches the writer schemas the batch needs from the schema registry:
 * replay waits for its answers as it waits for Redis (an interrupt gives
 * up), saying why every 5 s. Returns -1 when out of memory or interrupted. */
static int resolve_schemas(struct replay *r, struct lb_flow *flow)
{
    static struct lb_ratelimit said;
    struct lb_engine *e = r->engine;
    while (e->registry) {
        uint64_t suppressed;
        lb_flow_unwait(flow, NULL, 0);
        if (lb_flow_resolve(flow, e->registry, e->decoder, lb_monotonic_ms()) != 0) {
            fprintf(stderr, "replay: out of memory\n");
            return -1;
        }
        if (!flow->next->waiting)
            return 0;
        if (lb_ratelimit_allow(&said, 5000, &suppressed))
            fprintf(stderr, "replay: %s; %zu record(s) wait for their writer schema%s\n",
                    lb_registry_stats(e->registry)->why, flow->next->waiting,
                    suppressed ? " (earlier messages suppressed)" : "");
        replay_keep_lease(r);
        if (replay_interrupted)
            return -1;
        usleep(200 * 1000);
    }
    return 0;
}

/* Plans the batch collected, waits for the one before it, and sends it:
 * double-buffered like the projector (flow.h). */
static int flush_batch(struct replay *r, struct lb_flow *flow)
{
    if (resolve_schemas(r, flow) != 0)
        return -1;
    /* a batch goes out only under the lease: a run that was frozen past it
     * (another run took it, or had it meanwhile) stops here, its batch
     * unsent */
    if (replay_keep_lease(r) != 0)
        return -1;
    if (lb_flow_prepare(flow, lb_wall_ms()) != 0) {
        fprintf(stderr, "replay: out of memory\n");
        return -1;
    }
    /* planning it met closed windows: a --republish step or note there may
     * have found a later run's (the lease lost), and the batch stays unsent
     * too */
    if (replay_keep_lease(r) != 0)
        return -1;
    int rc = finish_inflight(r, flow);
    lb_flow_send(flow);
    lb_flow_begin(flow);
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

/* Says what went wrong reading Kafka: once and stop when 'broken', else at
 * most every 5 s while librdkafka reconnects. */
static void kafka_trouble(struct replay *r, const rd_kafka_message_t *m, int broken)
{
    static struct lb_ratelimit said;
    uint64_t suppressed;
    (void)r;
    if (broken)
        fprintf(stderr, "replay: reading %s [%d] from Kafka failed: %s%s\n",
                m->rkt ? rd_kafka_topic_name(m->rkt) : "?", m->partition,
                rd_kafka_message_errstr(m),
                m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
                    ? " (replay's Kafka user needs Read on the topic: ops/runbooks/kafka-acl.md)"
                    : "");
    else if (lb_ratelimit_allow(&said, 5000, &suppressed))
        fprintf(stderr, "replay: Kafka: %s; waiting for the brokers%s\n",
                rd_kafka_message_errstr(m), suppressed ? " (earlier messages suppressed)" : "");
}

/* Reads every partition from read_to up to end, applying as it goes. */
/* Decaying boards: the staging overall boards are rebuilt (rebuild.h)
 * before anything compares or swaps them. */
static int finish_rebuilds(struct replay *r, int status)
{
    struct lb_rebuild *rebuild = r->engine->rebuild;
    if (status != 0 || !rebuild || !lb_rebuild_pending(rebuild))
        return status;
    /* in slices of a second: the lease renewed, an interrupt heard */
    size_t left = lb_rebuild_pending(rebuild);
    for (int64_t until = lb_monotonic_ms() + 10 * 60000;
         left && !replay_interrupted && lb_monotonic_ms() < until;) {
        left = lb_rebuild_drain(rebuild, lb_monotonic_ms() + 1000);
        replay_keep_lease(r);
    }
    if (left == 0)
        return 0;
    if (replay_interrupted)
        return -1;
    fprintf(stderr,
            "replay: %zu decaying board(s) whose overall board could not be rebuilt in 10 "
            "minutes (see the log); nothing was swapped for them\n",
            left);
    return -1;
}

static int read_until_end(struct replay *r);

int replay_read_until_end(struct replay *r)
{
    return finish_rebuilds(r, read_until_end(r));
}

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
    struct lb_batch batches[2];
    struct lb_flow flow;
    int status = lb_flow_init(&flow, r->engine->pipeline, &batches[0], &batches[1], cap);
    lb_flow_begin(&flow);
    double batch_started = replay_mono_s(), budget_start = replay_mono_s();
    uint64_t budget_read = 0;
    while (status == 0 && remaining(r) > 0 && !replay_interrupted) {
        /* also while Kafka gives nothing (a call every 10 s); once stopped,
         * not even what is in flight is finished (below) */
        if (replay_keep_lease(r) != 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->reader, flow.inflight ? 0 : 100);
        if (m && m->err) {
            /* A broker restarting or unreachable is reported here too:
             * librdkafka reconnects by itself, so only what cannot heal
             * (retention deleting what replay still has to read, a topic
             * this Kafka user may not read, a fatal client error) stops
             * replay. */
            int broken = m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE ||
                         m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
                         m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
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
        if (!m && flow.inflight) {
            status = finish_inflight(r, &flow); /* nothing to read: let Redis catch up */
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
                flow.next->msgs[flow.next->n++] = m;
                if (!r->read_stop_checked && r->applied_batches) {
                    r->read_stop_checked = 1;
                    replay_fault_stop("LB_FAULT_READ_STOP");
                }
            }
        }
        size_t n = flow.next->n;
        if (n == cap ||
            (n && (!m || replay_mono_s() - batch_started > 0.05 || remaining(r) == 0))) {
            status = flush_batch(r, &flow);
            batch_started = replay_mono_s();
            replay_progress(r, 0);
        }
        if (r->o.max_rate > 0) {
            double ahead = (double)budget_read / r->o.max_rate - (replay_mono_s() - budget_start);
            if (ahead > 0.001)
                usleep((useconds_t)(ahead * 1e6));
        }
    }
    /* interrupted: what was read and not yet sent stays unsent (nothing is
     * swapped now); with the lease lost, what is in flight is not finished
     * either: a request half written is dropped as the connections close */
    if (status == 0 && flow.next->n && !replay_interrupted)
        status = flush_batch(r, &flow);
    if (r->lease.held && finish_inflight(r, &flow) != 0)
        status = -1;
    lb_flow_free(&flow);
    rd_kafka_assign(r->reader, NULL);
    if (replay_interrupted && status == 0)
        status = -1;
    return status;
}

/* Moves every partition's end to its current high watermark, waiting out a
 * broker that is restarting. */
int replay_extend_to_latest(struct replay *r)
{
    for (size_t i = 0; i < r->plan.count; i++) {
        struct part *p = &r->plan.parts[i];
        int64_t low, high, since = lb_monotonic_ms();
        rd_kafka_resp_err_t e;
        for (int attempt = 1;
             (e = rd_kafka_query_watermark_offsets(r->meta, p->topic, p->partition, &low, &high,
                                                   KAFKA_TIMEOUT_MS)) != RD_KAFKA_RESP_ERR_NO_ERROR;
             attempt++)
            if (replay_retry_pause(r, "reading Kafka's watermarks", rd_kafka_err2str(e), attempt,
                                   since) != 0)
                return -1;
        if (high > p->end)
            p->end = high;
    }
    return 0;
}
