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
 * The producer is idempotent with acks=all. The caller holds a state cell
 * per record and must not store the record's offset before the cell says
 * LB_DLQ_DONE: an event that cannot be dead-lettered stalls its partition
 * instead of being skipped. Delivery is at least once: a record redelivered
 * to the projector (a crash, a rebalance) may be dead-lettered twice.
 */
#ifndef LB_DLQ_H
#define LB_DLQ_H

#include "config.h"
#include "event.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>

enum lb_dlq_state { LB_DLQ_NONE = 0, LB_DLQ_PENDING, LB_DLQ_DONE, LB_DLQ_FAILED };

struct lb_dlq;

/* Creates the producer for config->dlq_topic. NULL with a message on error. */
struct lb_dlq *lb_dlq_new(const struct lb_config *config, char *err, size_t errlen);

/* Waits up to 'timeout_ms' for outstanding deliveries, then frees. Cells of
 * records still undelivered are set to LB_DLQ_FAILED. Accepts NULL. */
void lb_dlq_free(struct lb_dlq *dlq, int timeout_ms);

/* Produces 'msg' (its key and bytes, copied: the caller may destroy 'msg'
 * at once) with the headers above. Sets '*state'
 * to LB_DLQ_PENDING, later (from lb_dlq_poll) to LB_DLQ_DONE or
 * LB_DLQ_FAILED; at once to LB_DLQ_FAILED if it cannot even be queued.
 * 'state' must stay valid until then. */
void lb_dlq_send(struct lb_dlq *dlq, const rd_kafka_message_t *msg, enum lb_reject reason,
                 const char *detail, uint8_t *state);

/* Serves delivery reports, waiting up to 'timeout_ms' for the first. */
void lb_dlq_poll(struct lb_dlq *dlq, int timeout_ms);

struct lb_dlq_stats {
    uint64_t sent, delivered, failed;
};
const struct lb_dlq_stats *lb_dlq_stats(const struct lb_dlq *dlq);

#endif
