/* The Kafka side of the daemon: the group consumer and its offsets.
 *
 * Offsets are never stored or committed by librdkafka on its own
 * (enable.auto.commit and enable.auto.offset.store are off). The daemon
 * settles every record of a finished batch here; the offset tracker
 * (offsets.h) keeps, per partition, the offset after the last durable record
 * and any hold, and the consumer commits those offsets as explicit lists:
 * periodically, when partitions are revoked, and at close. So a committed
 * offset always means "everything below is in Redis or dead-lettered". A
 * held partition is paused once enough records wait behind its hold, and
 * read again from the held offset after a back-off.
 *
 * The assignor is eager (range) by default: the cooperative-sticky assignor
 * of librdkafka 2.0.2 has known crash and hang bugs.
 */
#ifndef LB_CONSUMER_H
#define LB_CONSUMER_H

#include "kafka.h"
#include "metrics.h"
#include "offsets.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>

struct lb_consumer;

/* Called from inside lb_consumer_poll when partitions are taken away, before
 * their offsets are committed for the last time: the daemon stores what is
 * durable and forgets what is not. */
typedef void (*lb_revoke_fn)(void *ctx, const rd_kafka_topic_partition_list_t *partitions);

/* What the consumer is made from (lb_config_consumer fills it from the
 * configuration, which must outlive the consumer). */
struct lb_consumer_options {
    struct lb_kafka_options kafka; /* brokers and the kafka: properties */
    const char *group;
    char *const *topics;
    size_t ntopics;
    /* records a held partition may keep waiting before it is paused: a few
     * batches' worth */
    uint64_t hold_limit;
};

/* Creates the consumer and subscribes to the topics. On error returns NULL
 * with "file:line: message" (for a bad kafka property) or a plain sentence
 * in 'err', and whether the configuration or the world is to blame in
 * '*class' (may be NULL). */
struct lb_consumer *lb_consumer_new(const struct lb_consumer_options *options,
                                    lb_revoke_fn on_revoke, void *ctx, char *err, size_t errlen,
                                    enum lb_error_class *class);

/* Commits what is stored, leaves the group and frees. Accepts NULL. */
void lb_consumer_close(struct lb_consumer *consumer);

/* Returns the next message (owned by the caller: rd_kafka_message_destroy),
 * or NULL after 'timeout_ms' or when only an event was served. Errors are
 * logged here; a fatal one sets lb_consumer_fatal. */
rd_kafka_message_t *lb_consumer_poll(struct lb_consumer *consumer, int timeout_ms);

/* Non-zero after a fatal error (e.g. a fenced static member). */
int lb_consumer_fatal(const struct lb_consumer *consumer);

/* Settles one record of a finished batch (records of a partition in offset
 * order): durable (LB_HOLD_NONE) or holding its partition for 'reason'
 * (offsets.h); 'ts' its event time (0: not an event), for the watermark its
 * commit carries. Returns 1 when it put the partition on hold. */
int lb_consumer_settle(struct lb_consumer *consumer, const rd_kafka_message_t *msg,
                       enum lb_hold_reason reason, int64_t ts);

/* What each partition's commit must stay at or below besides its holds
 * (offsets.h lb_offsets_set_floor). */
void lb_consumer_set_floor(struct lb_consumer *consumer, lb_offsets_floor_fn floor, void *ctx);

/* Whether the partition is held (its records polled now will be read again). */
int lb_consumer_is_held(const struct lb_consumer *consumer, const char *topic, int32_t partition);

/* Reads every held partition whose back-off has passed again from its held
 * offset (seek, resume), then calls 'fn' for it: the caller drops what it
 * holds of that partition and releases it in the pipeline. Returns how
 * many. */
typedef void (*lb_rewind_fn)(void *ctx, const char *topic, int32_t partition, int64_t offset);
size_t lb_consumer_rewind_due(struct lb_consumer *consumer, lb_rewind_fn fn, void *ctx);

/* Per-partition progress (committed offset, hold, pause), for metrics. */
void lb_consumer_progress(const struct lb_consumer *consumer,
                          void (*each)(void *ctx, const struct lb_partition_progress *progress),
                          void *ctx);

/* Commits what is durable and not committed yet, as an explicit offset
 * list: asynchronously if 'async', else waits. Returns 0 or -1. */
int lb_consumer_commit(struct lb_consumer *consumer, int async);

rd_kafka_t *lb_consumer_handle(struct lb_consumer *consumer);

struct lb_consumer_stats {
    int assigned;                       /* partitions assigned now */
    int brokers_up;                     /* brokers connected now; -1 until known */
    int64_t last_commit_ms;             /* wall clock of the last acknowledged commit, or 0 */
    struct lb_histogram commit_latency; /* seconds from commit to the broker's answer */
};
const struct lb_consumer_stats *lb_consumer_stats(const struct lb_consumer *consumer);

#endif
