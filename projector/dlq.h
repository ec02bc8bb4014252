/* The dead-letter topic: events the projector cannot project are produced
 * there with their original key and bytes, and headers saying why and from
 * where:
 *
 *   lb.reason            the reject reason (malformed, unknown_schema,
 *                        score_out_of_range, ...; see lb_reject_name)
 *   lb.detail            a sentence about this event
 *   lb.source.topic      where the event was read
 *   lb.source.partition  (decimal)
 *   lb.source.offset     (decimal)
 *   lb.rejected.at       when the projector rejected it (RFC 3339, UTC, ms)
 *
 * A record too large for the dead-letter topic (its size passes the
 * producer's message.max.bytes, or the topic's max.message.bytes even in
 * a batch of its own: a batch the broker refused is sent again one record
 * per batch, from a second producer, first, and so is every record after
 * it) is dead-lettered *by reference*: without its value, and without its key too
 * if that is still too large, with headers lb.by_reference ("value" or
 * "key,value"), lb.value.size and lb.value.sha256 (and lb.key.size,
 * lb.key.sha256); the original stays in the source topic at the named
 * offset. `lbadmin redrive` refuses such records.
 *
 * The producer is idempotent with acks=all. The module remembers every
 * record it was asked to dead-letter, by source topic, partition and
 * offset, until the caller says the source offset is committed: a record
 * read again (a partition rewound after a hold) is not produced again while
 * its first copy is in flight or once it was delivered. The caller must not
 * commit past a record before lb_dlq_state says LB_DLQ_DONE: an event that
 * cannot be dead-lettered holds its partition instead of being skipped.
 * Delivery is at least once (a record redelivered to the projector after a
 * crash or a rebalance may be dead-lettered twice).
 *
 * Single-threaded: delivery reports are served by lb_dlq_poll on the
 * caller's thread.
 */
#ifndef LB_DLQ_H
#define LB_DLQ_H

#include "kafka.h"
#include "event.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>

enum lb_dlq_state {
    LB_DLQ_NONE = 0, /* not asked */
    LB_DLQ_PENDING,  /* produced, not acknowledged yet */
    LB_DLQ_DONE,     /* acknowledged by the broker */
    LB_DLQ_FAILED,   /* refused or timed out: send it again */
};

/* Why deliveries failed, for metrics. */
enum lb_dlq_failure {
    LB_DLQ_TOO_LARGE = 0, /* larger than the producer or the topic allows: sent by reference */
    LB_DLQ_UNAUTHORIZED,  /* no Write permission on the topic: permanent until an ACL changes */
    LB_DLQ_TOPIC_MISSING, /* the topic does not exist (yet) */
    LB_DLQ_TIMEOUT,       /* not acknowledged within message.timeout.ms */
    LB_DLQ_OTHER,
    LB_DLQ_FAILURE__COUNT
};
const char *lb_dlq_failure_name(enum lb_dlq_failure kind);

struct lb_dlq;

struct lb_dlq_options {
    struct lb_kafka_options kafka; /* brokers and the kafka: properties */
    const char *topic;             /* the dead-letter topic */
};

/* Creates the producer for the dead-letter topic. NULL with a message and
 * its class ('class' may be NULL) on error. */
struct lb_dlq *lb_dlq_new(const struct lb_dlq_options *options, char *err, size_t errlen,
                          enum lb_error_class *class);

/* Waits up to 'timeout_ms' for outstanding deliveries, then frees. Accepts
 * NULL. */
void lb_dlq_free(struct lb_dlq *dlq, int timeout_ms);

/* Dead-letters 'msg' (its key and bytes are copied: the caller may destroy
 * 'msg' at once) with the headers above, unless a copy of the same source
 * record is in flight or delivered already. Returns the record's state. */
enum lb_dlq_state lb_dlq_send(struct lb_dlq *dlq, const rd_kafka_message_t *msg,
                              enum lb_reject reason, const char *detail);

/* Sends the copy of 'msg' again, as lb_dlq_send first described it, when
 * its last attempt failed (a record read again may not be rejected again:
 * the apply script skips what its markers hold, and its reject, decided
 * there, is not made again). Returns the record's state (LB_DLQ_NONE: it
 * was never dead-lettered). */
enum lb_dlq_state lb_dlq_send_again(struct lb_dlq *dlq, const rd_kafka_message_t *msg);

/* The state of the dead-letter copy of source record 'msg'. */
enum lb_dlq_state lb_dlq_state(const struct lb_dlq *dlq, const rd_kafka_message_t *msg);

/* Forgets the records of 'topic'/'partition' below 'offset' (committed:
 * never read again by this group). */
void lb_dlq_forget_below(struct lb_dlq *dlq, const char *topic, int32_t partition, int64_t offset);

/* Serves delivery reports, waiting up to 'timeout_ms' for the first. */
void lb_dlq_poll(struct lb_dlq *dlq, int timeout_ms);

struct lb_dlq_stats {
    uint64_t sent, delivered, failed;
    uint64_t by_reference; /* delivered without their value (or key) */
    uint64_t failures[LB_DLQ_FAILURE__COUNT];
};
const struct lb_dlq_stats *lb_dlq_stats(const struct lb_dlq *dlq);

#endif
