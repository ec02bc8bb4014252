/* The projection of one batch: records in, durable records out.
 *
 * decode -> validate -> plan (score, windows, merge) -> write to Redis
 *
 * The pipeline is shared by the daemon and by replay; neither Kafka nor the
 * offset bookkeeping lives here. A record is durable when every key it
 * targets has been written with every reply checked, or when it was rejected
 * (and, once a dead-letter sink is configured, accepted by it).
 *
 * Failures are contained per board. Requests that fail are retried, whole,
 * after a back-off, as long as the caller's 'wait' callback says so (it
 * spends the back-off polling Kafka and decides when to stop). What still
 * fails then is *held*: its records are not durable, and each (board,
 * partition) pair of the failed request is remembered, so that later events
 * of that board from that partition are withheld from Redis too (writing
 * them would move the board's applied-offset marker past the held events,
 * which a later attempt would then skip as applied). Every other board, and
 * the same board's events from other partitions, keep flowing. The caller
 * retries held events by reading their partition again from the held
 * offset; once it has, it releases the partition here.
 */
#ifndef LB_PIPELINE_H
#define LB_PIPELINE_H

#include "apply.h"
#include "cluster.h"
#include "event.h"
#include "metrics.h"
#include "planner.h"

#include <stddef.h>
#include <stdint.h>

/* One input message, borrowed from the caller for the duration of a run. */
struct lb_record {
    const void *payload;
    size_t len;
    const char *topic;
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms; /* the Kafka record's timestamp; 0: none (the clock stands in) */
};

struct lb_pipeline_stats {
    uint64_t batches;
    uint64_t records;
    uint64_t applied;
    uint64_t rejected[LB_REJECT__COUNT];
    uint64_t member_updates;
    uint64_t late_windows;
    uint64_t late_after_close;   /* events too late for a closed window (written to its others) */
    uint64_t closed_left_out;    /* replay: window writes left out at a closed window's close */
    uint64_t write_failures;     /* requests that failed and were retried */
    uint64_t replans;            /* boards planned again without events already applied */
    uint64_t filtered;           /* left out by the filter (replay's selection) */
    struct lb_histogram visible; /* seconds from an event's time to its write in Redis */
    uint64_t skipped_segments;   /* a board's events from one partition found applied before */
    uint64_t held_requests;      /* board requests given up on and held */
    uint64_t withheld;           /* records kept from Redis behind a held event */
    uint64_t overlapped;         /* requests sent before the batch ahead was complete */
    uint64_t no_timestamp;       /* records without a Kafka timestamp (input.max_future) */
    uint64_t duplicates;         /* events whose board counted their event_id before (dedupe) */
    uint64_t conflicts;          /* the same, with another payload (the first one counts) */
};

/* What the last attempt to write the batch in flight met, for the caller's
 * messages between retries. */
struct lb_pipeline_failure {
    size_t sent;      /* board requests the batch sent (0: it never reached Redis,
                         so nothing here says whether Redis is up) */
    size_t requests;  /* board requests that failed */
    unsigned attempt; /* 1 for the first write, 2 for the first retry, ... */
    int needs_fix;    /* one of them needs an operator (WRONGTYPE, NOPERM, ...) */
    int transient;    /* one of them failed for a reason Redis recovers from (down, failing over) */
    char reason[200]; /* a failed request's reason (one needing a fix first), naming its node */
};

/* Called with each board of a batch whose request was applied: board
 * 'board' of 'plan' (its windows), with the script's answer (rebuilding: its
 * decaying overall board is being rebuilt, rebuild.h; opened: a window of
 * it will close, closer.h); 'replanned': the request written was planned
 * again without some of its events (the script named them), so the
 * board's segments in 'plan' may reach past what its markers now say. */
typedef void (*lb_pipeline_applied_fn)(void *ctx, const struct lb_plan_view *plan, uint32_t board,
                                       const struct lb_apply_answer *answer, int replanned);

/* Called between retries: spend up to 'backoff_ms' (polling Kafka, say) and
 * return 0 to retry, or non-zero to give up on what is still failing. */
typedef int (*lb_pipeline_wait_fn)(void *ctx, int64_t backoff_ms);

struct lb_pipeline;

struct lb_pipeline_options {
    struct lb_plan_options plan; /* the profiles */
    const char *key_prefix;      /* the keyspace written (borrowed) */
    int window_stamps;           /* see lb_apply_options: replay --window */
    /* An event whose ts is further ahead than this of its record's
     * timestamp (of the clock, for a record without one) is rejected as
     * ts_in_future; 0: no bound. */
    int64_t max_future_ms;
};

/* Creates a pipeline. What 'options' points to, 'decoder' and 'cluster' are
 * borrowed and must outlive it. Returns NULL when out of memory. */
struct lb_pipeline *lb_pipeline_new(const struct lb_pipeline_options *options,
                                    const struct lb_decoder *decoder, struct lb_cluster *cluster);
void lb_pipeline_free(struct lb_pipeline *pipeline);
/* Pipelining across batches: a second client (made from 'options', owned by
 * the pipeline) carries every other batch, so that while one batch is
 * answered, the next one's requests go to each master that has answered
 * all of it, cleanly (see lb_pipeline_complete). Costs one more connection
 * per master. Returns 0, or -1 when out of memory. */
int lb_pipeline_overlap(struct lb_pipeline *pipeline, const struct lb_cluster_options *options);
/* The Redis client counters of the pipeline's clients, summed. */
void lb_pipeline_redis_stats(const struct lb_pipeline *pipeline, struct lb_cluster_stats *sum);

/* What became of a record, after complete. */
enum lb_record_state {
    LB_RECORD_NOT_DONE = 0, /* out of memory before it was written */
    LB_RECORD_DURABLE,      /* written with every reply checked, or rejected */
    LB_RECORD_HELD_RETRY,   /* its board's request failed, Redis may recover by itself */
    LB_RECORD_HELD_FIX,     /* its board needs an operator (WRONGTYPE, NOPERM, ...) */
    LB_RECORD_WITHHELD,     /* an earlier event of its board from its partition is held */
    LB_RECORD_WITHHELD_FIX, /* the same, held for a reason an operator must fix */
};

/* Projects 'count' records and sets state[i] (enum lb_record_state) for
 * each. Returns 0 when all are durable, 1 when some are held, -1 when out of
 * memory (nothing was written). 'now_ms' is the wall clock, for expiry.
 * Equivalent to prepare, send and complete in a row. */
int lb_pipeline_run(struct lb_pipeline *pipeline, const struct lb_record *records, size_t count,
                    int64_t now_ms, uint8_t *state, lb_pipeline_wait_fn wait, void *ctx);

/* The same in three steps, so that the next batch can be decoded and
 * planned while the previous one is in Redis:
 *
 *   prepare   decodes, validates and plans a batch (no I/O). At most one
 *             batch may be prepared and one in flight; -1 when out of memory
 *             or when a prepared batch has not been sent yet.
 *   send      starts writing the prepared batch, its held (board,
 *             partition) pairs withheld; its replies are not read yet.
 *             Sends nothing while a batch is still in flight.
 *   complete  reads and checks the in-flight batch's replies, retries what
 *             failed (calling 'wait' between attempts), holds what still
 *             fails when 'wait' gives up, and fills 'state' for its records.
 *             Returns as lb_pipeline_run. With lb_pipeline_overlap, the
 *             prepared batch's requests go out while this one is answered,
 *             master by master (none once anything here failed, or while a
 *             pair is held); send then sends the rest.
 *
 * The records (and what their payloads point into) of a batch must stay
 * valid from prepare until its complete returns. */
int lb_pipeline_prepare(struct lb_pipeline *pipeline, const struct lb_record *records, size_t count,
                        int64_t now_ms);
void lb_pipeline_send(struct lb_pipeline *pipeline);
/* Moves the batch in flight on without blocking: writes what its sockets
 * take, reads the replies that have come. Returns 1 when every reply is in
 * (or nothing is in flight), else 0; lb_pipeline_complete still checks
 * them, redirects and retries. */
int lb_pipeline_progress(struct lb_pipeline *pipeline);
/* When progress found every reply of the batch in flight (or completed
 * last) in and OK, monotonic ms; 0 when it did not, or complete had to send
 * anything again. The batch's end for the metrics. */
int64_t lb_pipeline_answered_ms(const struct lb_pipeline *pipeline);
int lb_pipeline_complete(struct lb_pipeline *pipeline, uint8_t *state, lb_pipeline_wait_fn wait,
                         void *ctx);

/* The event time of record 'i' of the batch completed last (0: not an
 * event that could be projected); valid until the next prepare. */
int64_t lb_pipeline_event_time(const struct lb_pipeline *pipeline, size_t i);

/* The caller will read 'topic'/'partition' again from its held offset: its
 * held pairs are forgotten, so the events read again are written. Call it
 * after the last batch read before the rewind was sent, and before the first
 * batch read after it is. */
void lb_pipeline_release(struct lb_pipeline *pipeline, const char *topic, int32_t partition);

/* (board, partition) pairs held now. */
size_t lb_pipeline_held(const struct lb_pipeline *pipeline);

const struct lb_pipeline_stats *lb_pipeline_stats(const struct lb_pipeline *pipeline);
/* Valid during a 'wait' callback: what the attempt before it met. */
const struct lb_pipeline_failure *lb_pipeline_last_failure(const struct lb_pipeline *pipeline);

/* Called for every record that cannot be projected (undecodable, invalid,
 * out of range, a sum leaving its range), with the reason and a sentence;
 * during prepare, or during complete for sums. The record counts as done
 * for the pipeline; the daemon dead-letters it. */
typedef void (*lb_pipeline_reject_fn)(void *ctx, const struct lb_record *record,
                                      enum lb_reject reason, const char *detail);
void lb_pipeline_set_reject_hook(struct lb_pipeline *pipeline, lb_pipeline_reject_fn fn, void *ctx);

/* Only events for which 'filter' returns non-zero are planned; the others
 * count as done (durable) without a write. For replay's selection. */
typedef int (*lb_pipeline_filter_fn)(void *ctx, const struct lb_event *event);
void lb_pipeline_set_applied_hook(struct lb_pipeline *pipeline, lb_pipeline_applied_fn fn,
                                  void *ctx);
void lb_pipeline_set_filter(struct lb_pipeline *pipeline, lb_pipeline_filter_fn filter, void *ctx);
/* Closed windows' writes the planners leave out (planner.h). */
void lb_pipeline_set_closed(struct lb_pipeline *pipeline, lb_plan_closed_fn closed, void *ctx);

#endif
