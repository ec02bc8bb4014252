/* The conveyor that the projector and replay both run: two batches of Kafka
 * messages take turns, so that while one is in Redis the next is
 * collected, decoded and planned.
 *
 *   collect (the caller fills next->msgs) → lb_flow_prepare → lb_flow_send
 *   → lb_flow_complete (every reply checked, states set) → lb_flow_done
 *
 * What happens around it (polling, dead letters, offsets, progress) is the
 * caller's. A caller that keeps more per batch embeds struct lb_batch in
 * its own and passes both of its batches to lb_flow_init. */
#ifndef LB_FLOW_H
#define LB_FLOW_H

#include "pipeline.h"
#include "registry.h"

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

struct lb_batch {
    rd_kafka_message_t **msgs; /* owned until lb_flow_done */
    struct lb_record *records; /* the pipeline's view of msgs, set by lb_flow_prepare */
    uint8_t *state;            /* enum lb_record_state of each, set by lb_flow_complete */
    size_t n;
    /* the last 'waiting' of msgs wait for their writer schema (lb_flow_resolve):
     * not projected, no state */
    size_t waiting;
    uint64_t seq; /* the how-manieth batch collected (lb_flow_begin), from 1 */
};

struct lb_flow_wait {
    char *topic;
    int32_t partition;
};

struct lb_flow {
    struct lb_pipeline *pipeline;
    struct lb_batch *batches[2];
    struct lb_batch *next;     /* being collected, then prepared */
    struct lb_batch *inflight; /* sent and not complete, or NULL */
    size_t cap;                /* messages a batch holds */
    uint64_t collected;
    /* partitions whose records wait for a writer schema (lb_flow_resolve) */
    struct lb_flow_wait *waits;
    size_t nwaits, capwaits;
    rd_kafka_message_t **scratch;
};

/* Makes 'a' and 'b' the two batches, with room for 'cap' messages each.
 * Returns 0, or -1 when out of memory (lb_flow_free still applies). */
int lb_flow_init(struct lb_flow *flow, struct lb_pipeline *pipeline, struct lb_batch *a,
                 struct lb_batch *b, size_t cap);
/* Destroys the messages left and what lb_flow_init allocated. */
void lb_flow_free(struct lb_flow *flow);

/* Starts collecting into flow->next (numbering it); its messages, if any
 * are left from before, stay. */
void lb_flow_begin(struct lb_flow *flow);
/* Asks 'registry' for the writer schemas of flow->next's records that
 * 'decoder' lacks (lb_registry_resolve). A record whose schema cannot be had
 * now waits, and so does every later record of its partition until
 * lb_flow_unwait (its board is unknown, so none of the partition's events
 * may pass it): they are moved, in order, to the end of msgs and counted in
 * next->waiting. The caller holds those partitions at their first waiting
 * record. Returns 0, or -1 when out of memory. */
int lb_flow_resolve(struct lb_flow *flow, struct lb_registry *registry, struct lb_decoder *decoder,
                    int64_t mono_ms);
/* The partition's records no longer wait (it is read again from its held
 * offset, or was revoked); NULL 'topic': every partition's. */
void lb_flow_unwait(struct lb_flow *flow, const char *topic, int32_t partition);

/* Decodes and plans flow->next (no I/O). Returns -1 when out of memory. */
int lb_flow_prepare(struct lb_flow *flow, int64_t now_ms);
/* Sends the prepared flow->next: it is in flight, and the other batch is
 * next. Only when nothing is in flight. */
void lb_flow_send(struct lb_flow *flow);
/* Moves the batch in flight on without blocking (lb_pipeline_progress).
 * Returns 1 when all its replies are in or nothing is in flight. */
int lb_flow_progress(struct lb_flow *flow);
/* Waits for the batch in flight (see lb_pipeline_complete: 'wait' between
 * retries), sets its states and hands it back in '*done' (its messages are
 * still the caller's until lb_flow_done); nothing is in flight after.
 * Returns as lb_pipeline_complete. */
int lb_flow_complete(struct lb_flow *flow, lb_pipeline_wait_fn wait, void *ctx,
                     struct lb_batch **done);
/* Destroys the messages of 'batch': it is empty. */
void lb_flow_done(struct lb_batch *batch);

#endif
