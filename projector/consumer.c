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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct lb_consumer {
    rd_kafka_t *rk;
    lb_revoke_fn on_revoke;
    void *ctx;
    int fatal;
    uint64_t stored;    /* stores since start */
    uint64_t committed; /* value of 'stored' at the last commit */
    int commit_failed;  /* an asynchronous commit failed: commit again even if idle */
    int64_t commit_started_ms;
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

int lb_kafka_log_quiet;

void lb_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug */
    enum lb_log_level ours = level <= 3   ? LB_LOG_ERROR
                             : level == 4 ? LB_LOG_WARN
                             : level <= 6 ? LB_LOG_INFO
                                          : LB_LOG_DEBUG;
    if (lb_kafka_log_quiet && ours < LB_LOG_INFO)
        ours = LB_LOG_INFO;
    lb_log(ours, "kafka", "%s: %s", fac, buf);
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, const char *file,
                    int line, char *err, size_t errlen)
{
    char why[256];
    if (rd_kafka_conf_set(conf, key, value, why, sizeof(why)) == RD_KAFKA_CONF_OK)
        return 0;
    snprintf(err, errlen, "%s:%d: kafka property %s: %s", file, line, key, why);
    return -1;
}

int lb_kafka_conf_apply(const struct lb_config *config, rd_kafka_conf_t *conf, char *err,
                        size_t errlen)
{
    if (conf_set(conf, "bootstrap.servers", config->brokers, config->path, 0, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < config->nkafka_props; i++) {
        const struct lb_kv *kv = &config->kafka_props[i];
        if (conf_set(conf, kv->key, kv->value, config->path, kv->line, err, errlen) != 0)
            return -1;
    }
    rd_kafka_conf_set_log_cb(conf, lb_kafka_log_cb);
    return 0;
}

static void assign(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions)
{
    rd_kafka_resp_err_t err = rd_kafka_assign(rk, partitions);
    if (err)
        LB_ERROR("kafka", "%s failed: %s", partitions ? "assign" : "unassign",
                 rd_kafka_err2str(err));
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque)
{
    struct lb_consumer *c = opaque;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        LB_INFO("kafka", "assigned %d partition(s)", partitions->cnt);
        assign(rk, partitions);
        c->stats.assigned = partitions->cnt;
        /* An application pause outlives unassign/assign in librdkafka, so
         * set the state we want on the new assignment explicitly: paused
         * while the daemon waits for Redis, fetching otherwise. */
        if (partitions->cnt) {
            rd_kafka_resp_err_t perr = c->stats.paused ? rd_kafka_pause_partitions(rk, partitions)
                                                       : rd_kafka_resume_partitions(rk, partitions);
            if (perr)
                LB_WARN("kafka", "%s the new assignment: %s",
                        c->stats.paused ? "pausing" : "resuming", rd_kafka_err2str(perr));
        }
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        LB_INFO("kafka", "revoking %d partition(s)", partitions->cnt);
        if (c->on_revoke)
            c->on_revoke(c->ctx, partitions);
        /* Last chance to commit for these partitions in this generation. */
        if (!rd_kafka_assignment_lost(rk))
            lb_consumer_commit(c, 0);
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
    (void)rk;
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return;
    if (err) {
        c->commit_failed = 1;
        LB_WARN("kafka", "offset commit failed: %s (will retry with the next commit)",
                rd_kafka_err2str(err));
        return;
    }
    commit_done(c);
    for (int i = 0; offsets && i < offsets->cnt; i++)
        if (offsets->elems[i].err)
            LB_WARN("kafka", "offset commit for %s/%d failed: %s", offsets->elems[i].topic,
                    offsets->elems[i].partition, rd_kafka_err2str(offsets->elems[i].err));
}

struct lb_consumer *lb_consumer_new(const struct lb_config *config, lb_revoke_fn on_revoke,
                                    void *ctx, char *err, size_t errlen)
{
    struct lb_consumer *c = calloc(1, sizeof(*c));
    if (c)
        lb_histogram_init(&c->stats.commit_latency, lb_latency_bounds, lb_latency_nbounds);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_topic_partition_list_t *topics = NULL;
    char why[512];

    if (!c || !conf) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    c->on_revoke = on_revoke;
    c->ctx = ctx;
    /* Our defaults first, so that a kafka: property can override them. */
    if (conf_set(conf, "group.id", config->group, config->path, 0, err, errlen) != 0 ||
        conf_set(conf, "enable.auto.commit", "false", config->path, 0, err, errlen) != 0 ||
        conf_set(conf, "enable.auto.offset.store", "false", config->path, 0, err, errlen) != 0 ||
        conf_set(conf, "auto.offset.reset", "earliest", config->path, 0, err, errlen) != 0 ||
        conf_set(conf, "partition.assignment.strategy", "range", config->path, 0, err, errlen) !=
            0 ||
        /* librdkafka 2.0.2 refills a prefetch queue that reached its threshold
         * only when its broker thread next wakes up (up to a second later), so
         * a backlog drains in bursts unless the queue holds about a second of
         * consumption. 300000 messages cost ~150 MB of RSS while draining a
         * backlog, nothing when tailing; lower it for memory, raise it for
         * faster catch-up. */
        conf_set(conf, "queued.min.messages", "300000", config->path, 0, err, errlen) != 0 ||
        lb_kafka_conf_apply(config, conf, err, errlen) != 0)
        goto error;
    /* Offsets must only ever come from us: refuse overrides that would let
     * librdkafka commit or store on its own. And the rebalance callback
     * speaks the eager protocol: cooperative-sticky has known crash and hang
     * bugs in librdkafka 2.0.2 anyway. */
    for (size_t i = 0; i < config->nkafka_props; i++) {
        const struct lb_kv *kv = &config->kafka_props[i];
        if ((strcmp(kv->key, "enable.auto.commit") == 0 ||
             strcmp(kv->key, "enable.auto.offset.store") == 0) &&
            strcmp(kv->value, "false") != 0) {
            snprintf(err, errlen,
                     "%s:%d: kafka property %s must stay false: the projector commits only what "
                     "is durable in Redis",
                     config->path, kv->line, kv->key);
            goto error;
        }
        if (strcmp(kv->key, "partition.assignment.strategy") == 0 &&
            strstr(kv->value, "cooperative")) {
            snprintf(err, errlen,
                     "%s:%d: kafka property %s: cooperative-sticky is not supported (librdkafka "
                     "2.0.2 has known crash and hang bugs in it); use range or roundrobin",
                     config->path, kv->line, kv->key);
            goto error;
        }
    }
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, commit_cb);
    rd_kafka_conf_set_opaque(conf, c);

    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why));
    if (!c->rk) {
        snprintf(err, errlen, "cannot create the Kafka consumer: %s", why);
        goto error;
    }
    conf = NULL; /* owned by c->rk now */
    rd_kafka_poll_set_consumer(c->rk);

    topics = rd_kafka_topic_partition_list_new((int)config->ntopics);
    for (size_t i = 0; i < config->ntopics; i++)
        rd_kafka_topic_partition_list_add(topics, config->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rc = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (rc) {
        snprintf(err, errlen, "cannot subscribe: %s", rd_kafka_err2str(rc));
        goto error;
    }
    return c;

error:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (c && c->rk)
        rd_kafka_destroy(c->rk);
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
    free(c);
}

rd_kafka_message_t *lb_consumer_poll(struct lb_consumer *c, int timeout_ms)
{
    rd_kafka_message_t *msg = rd_kafka_consumer_poll(c->rk, timeout_ms);
    if (!msg || !msg->err)
        return msg;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        /* not an error */
    } else if (msg->err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(c->rk, why, sizeof(why));
        LB_ERROR("kafka", "fatal consumer error %s: %s", rd_kafka_err2name(orig), why);
        c->fatal = 1;
    } else {
        LB_WARN("kafka", "consumer: %s%s%s", rd_kafka_message_errstr(msg),
                msg->rkt ? " on topic " : "", msg->rkt ? rd_kafka_topic_name(msg->rkt) : "");
    }
    rd_kafka_message_destroy(msg);
    return NULL;
}

int lb_consumer_fatal(const struct lb_consumer *c)
{
    return c->fatal;
}

void lb_consumer_pause(struct lb_consumer *c, int pause)
{
    rd_kafka_topic_partition_list_t *assigned = NULL;
    /* stats.paused is the wanted state; rebalance_cb applies it to every new
     * assignment, so it is only ever changed here. */
    if (c->stats.paused == pause || rd_kafka_assignment(c->rk, &assigned) != 0)
        return;
    if (assigned->cnt) {
        rd_kafka_resp_err_t err = pause ? rd_kafka_pause_partitions(c->rk, assigned)
                                        : rd_kafka_resume_partitions(c->rk, assigned);
        if (err)
            LB_WARN("kafka", "%s partitions: %s", pause ? "pausing" : "resuming",
                    rd_kafka_err2str(err));
        else
            LB_INFO("kafka", "%s %d partition(s)%s", pause ? "paused" : "resumed", assigned->cnt,
                    pause ? " until Redis takes writes again" : "");
    }
    c->stats.paused = pause;
    rd_kafka_topic_partition_list_destroy(assigned);
}

void lb_consumer_store(struct lb_consumer *c, const char *topic, int32_t partition,
                       int64_t next_offset)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = next_offset;
    rd_kafka_resp_err_t err = rd_kafka_offsets_store(c->rk, list);
    /* A partition revoked meanwhile cannot be stored; that is fine, its next
     * owner starts from the last commit. */
    if (err && err != RD_KAFKA_RESP_ERR__STATE && err != RD_KAFKA_RESP_ERR__INVALID_ARG)
        LB_WARN("kafka", "storing offset %lld for %s/%d: %s", (long long)next_offset, topic,
                partition, rd_kafka_err2str(err));
    else if (!err)
        c->stored++;
    rd_kafka_topic_partition_list_destroy(list);
}

int lb_consumer_commit(struct lb_consumer *c, int async)
{
    if (c->stored == c->committed && !c->commit_failed)
        return 0;
    uint64_t stored = c->stored;
    c->commit_failed = 0;
    c->commit_started_ms = lb_monotonic_ms();
    rd_kafka_resp_err_t err = rd_kafka_commit(c->rk, NULL, async);
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        LB_WARN("kafka", "offset commit failed: %s", rd_kafka_err2str(err));
        c->commit_failed = 1;
        return -1;
    }
    c->committed = stored; /* commit_cb counts it (sync commits call it too) */
    return 0;
}

rd_kafka_t *lb_consumer_handle(struct lb_consumer *c)
{
    return c->rk;
}
