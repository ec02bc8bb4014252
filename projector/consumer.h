/* The Kafka side of the daemon: the group consumer and its offsets.
 *
 * Offsets are never stored or committed by librdkafka on its own
 * (enable.auto.commit and enable.auto.offset.store are off). The daemon
 * stores, per partition, the offset after the last durable record, and the
 * consumer commits what is stored: periodically, when partitions are revoked,
 * and at close. So a committed offset always means "everything below is in
 * Redis or dead-lettered".
 *
 * The assignor is eager (range) by default: the cooperative-sticky assignor
 * of librdkafka 2.0.2 has known crash and hang bugs.
 */
#ifndef LB_CONSUMER_H
#define LB_CONSUMER_H

#include "config.h"
#include "metrics.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>

struct lb_consumer;

/* Called from inside lb_consumer_poll when partitions are taken away, before
 * their offsets are committed for the last time: the daemon stores what is
 * durable and forgets what is not. */
typedef void (*lb_revoke_fn)(void *ctx, const rd_kafka_topic_partition_list_t *partitions);

/* Creates the consumer and subscribes to the configured topics. On error
 * returns NULL with "file:line: message" (for a bad kafka property) or a
 * plain sentence in 'err'. 'config' must outlive the consumer. */
struct lb_consumer *lb_consumer_new(const struct lb_config *config, lb_revoke_fn on_revoke,
                                    void *ctx, char *err, size_t errlen);

/* Commits what is stored, leaves the group and frees. Accepts NULL. */
void lb_consumer_close(struct lb_consumer *consumer);

/* Returns the next message (owned by the caller: rd_kafka_message_destroy),
 * or NULL after 'timeout_ms' or when only an event was served. Errors are
 * logged here; a fatal one sets lb_consumer_fatal. */
rd_kafka_message_t *lb_consumer_poll(struct lb_consumer *consumer, int timeout_ms);

/* Non-zero after a fatal error (e.g. a fenced static member). */
int lb_consumer_fatal(const struct lb_consumer *consumer);

/* Pauses, or resumes, every assigned partition (fetching stops; polling
 * goes on so the group membership stays alive). */
void lb_consumer_pause(struct lb_consumer *consumer, int pause);

/* Stores 'next_offset' as the position to commit for the partition. */
void lb_consumer_store(struct lb_consumer *consumer, const char *topic, int32_t partition,
                       int64_t next_offset);

/* Commits stored offsets: asynchronously if 'async', else waits. Does
 * nothing when nothing new was stored. Returns 0 or -1. */
int lb_consumer_commit(struct lb_consumer *consumer, int async);

rd_kafka_t *lb_consumer_handle(struct lb_consumer *consumer);

struct lb_consumer_stats {
    int assigned;                       /* partitions assigned now */
    int paused;                         /* fetching paused (waiting for Redis or the DLQ) */
    int64_t last_commit_ms;             /* wall clock of the last acknowledged commit, or 0 */
    struct lb_histogram commit_latency; /* seconds from commit to the broker's answer */
};
const struct lb_consumer_stats *lb_consumer_stats(const struct lb_consumer *consumer);

/* Shared by the tools: applies the kafka: section (brokers and passthrough
 * properties) to 'conf'. Returns 0, or -1 with "file:line: message". */
int lb_kafka_conf_apply(const struct lb_config *config, rd_kafka_conf_t *conf, char *err,
                        size_t errlen);
/* Non-zero: librdkafka's errors and warnings are logged at info level, for
 * tools that report failures themselves in one line. */
extern int lb_kafka_log_quiet;
/* Routes librdkafka's logs through lb_log. */
void lb_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

#endif
