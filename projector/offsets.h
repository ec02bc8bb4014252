/* Offset tracking: what a consumer may commit, partition by partition, and
 * which partitions are held back.
 *
 * The projector commits an offset O for a partition only when every record
 * below O is durable (written with every reply checked, or dead-lettered).
 * A record that is not durable (its board's Redis request failed, it waits
 * behind an earlier pending event of the same board, its dead-letter copy
 * was not acknowledged) *holds* its partition at that record: nothing past
 * it is committed. The partition keeps flowing meanwhile (its other boards
 * are written; replays of them are skipped by the markers later), up to a
 * bound of records polled past the hold; then it is paused. After a back-off
 * (doubling per failed attempt, reset by progress) the partition is due for
 * a *rewind*: the consumer seeks it back to the held offset and reads it
 * again, which retries everything that was pending, in order.
 *
 * Each commit also carries the partition's *event-time watermark*: the
 * highest event time (ts) among the records below the committed offset,
 * in the commit's metadata (kafka.h lb_watermark_format). It never moves back; a
 * commit held below the next offset by a floor carries the last one sent.
 *
 * Pure bookkeeping: no Kafka calls, no clock (callers pass the time), so the
 * rules are unit-tested without a broker. Not thread-safe; the consumer's
 * thread owns it.
 */
#ifndef LB_OFFSETS_H
#define LB_OFFSETS_H

#include <stddef.h>
#include <stdint.h>

/* Why a partition is held (the first reason wins until its rewind). */
enum lb_hold_reason {
    LB_HOLD_NONE = 0,
    LB_HOLD_REDIS,    /* a board's request failed and Redis may recover by itself */
    LB_HOLD_BOARD,    /* a board needs an operator (a key of the wrong type, NOPERM, ...) */
    LB_HOLD_DLQ,      /* a rejected record is not (yet) in the dead-letter topic */
    LB_HOLD_STOPPING, /* the projector stopped before the record was done */
    LB_HOLD_REGISTRY, /* its writer schema is in the schema registry, which gave no answer */
    LB_HOLD_TOP,      /* a split board's merged top does not show it yet, past its staleness
                       * (the floor below: reported when no other hold is, never rewound) */
    LB_HOLD__COUNT
};

const char *lb_hold_reason_name(enum lb_hold_reason reason);

/* One partition's progress, for metrics and logs. */
struct lb_partition_progress {
    const char *topic;
    int32_t partition;
    int64_t committed;         /* acknowledged by the broker; -1: none yet */
    int64_t committed_wall_ms; /* when it last moved (or was first known) */
    int64_t next;              /* what the next commit will send; -1: nothing yet */
    int64_t high_at_assign;    /* the high watermark when assigned, or -1 */
    int64_t watermark;         /* the event-time watermark sent with the last commit, or -1 */
    /* The held offset (or -1) and why: from the hold until a durable record
     * at or past it is settled, rewinds in between included. */
    int64_t hold;
    enum lb_hold_reason reason;
    uint64_t waiting; /* records polled past the hold */
    int paused;       /* fetching stopped until the rewind */
};

struct lb_offsets;

/* 'bound': records polled past a hold before the partition is paused;
 * back-off of the rewinds from 'min_ms', doubling to 'max_ms'. Returns NULL
 * when out of memory. */
struct lb_offsets *lb_offsets_new(uint64_t bound, int64_t min_ms, int64_t max_ms);
void lb_offsets_free(struct lb_offsets *offsets);

/* A partition was assigned, with the group's committed offset (-1: none)
 * and its high watermark then (-1: unknown). 'topic' is copied. Returns 0,
 * or -1 when out of memory. */
int lb_offsets_assign(struct lb_offsets *offsets, const char *topic, int32_t partition,
                      int64_t committed, int64_t high, int64_t wall_ms);
/* The event-time watermark the group's commit of the partition carried
 * (read back at the assignment): where its watermark starts. */
void lb_offsets_set_watermark(struct lb_offsets *offsets, const char *topic, int32_t partition,
                              int64_t watermark);

/* A partition was revoked: forgotten. */
void lb_offsets_revoke(struct lb_offsets *offsets, const char *topic, int32_t partition);

/* A record of a finished batch, in offset order within its partition:
 * 'reason' LB_HOLD_NONE when it is durable; 'ts' its event time (0: none,
 * not an event). Returns 1 when it put the partition on hold (it was not
 * held before), else 0. */
int lb_offsets_settle(struct lb_offsets *offsets, const char *topic, int32_t partition,
                      int64_t offset, enum lb_hold_reason reason, int64_t mono_ms, int64_t ts);

/* A record was polled. Returns 1 when its partition is held and has now
 * passed the bound: the caller pauses it (and calls lb_offsets_paused). */
int lb_offsets_polled(struct lb_offsets *offsets, const char *topic, int32_t partition);
void lb_offsets_paused(struct lb_offsets *offsets, const char *topic, int32_t partition);

/* Whether a record of this partition, polled before a rewind of it, must be
 * dropped: records past the held offset are read again after the rewind. */
int lb_offsets_is_held(const struct lb_offsets *offsets, const char *topic, int32_t partition);

/* Calls 'rewind' for every held partition whose back-off has passed, with
 * the offset to read from again and why it was held, and clears its hold
 * (the caller seeks, resumes it if paused, and drops what it holds of it
 * past that offset; a caller that cannot seek holds it again). Returns how
 * many were due. */
size_t lb_offsets_rewind_due(struct lb_offsets *offsets, int64_t mono_ms,
                             void (*rewind)(void *ctx, const char *topic, int32_t partition,
                                            int64_t offset, enum lb_hold_reason reason,
                                            int was_paused),
                             void *ctx);

/* What a partition's commit must stay at or below besides its holds, or
 * -1: the first record a split board's merged top does not show yet
 * (lb_tops_floor). Asked at each commit and for the progress, which shows
 * it as a hold for '*why' (LB_HOLD_NONE: not shown, a wait as usual). */
typedef int64_t (*lb_offsets_floor_fn)(void *ctx, const char *topic, int32_t partition,
                                       enum lb_hold_reason *why);
void lb_offsets_set_floor(struct lb_offsets *offsets, lb_offsets_floor_fn floor, void *ctx);

/* Calls 'each' for every partition whose next offset (at most its floor)
 * is past what was last committed (or sent for commit): what to commit
 * now, with its event-time watermark (-1: none yet). Marks them sent. */
size_t lb_offsets_to_commit(struct lb_offsets *offsets,
                            void (*each)(void *ctx, const char *topic, int32_t partition,
                                         int64_t offset, int64_t watermark),
                            void *ctx);

/* The broker acknowledged (ok) or refused a commit of 'offset'. A refused
 * one is sent again with the next commit. */
void lb_offsets_commit_result(struct lb_offsets *offsets, const char *topic, int32_t partition,
                              int64_t offset, int ok, int64_t wall_ms);

/* Calls 'each' for every assigned partition. */
void lb_offsets_each(const struct lb_offsets *offsets,
                     void (*each)(void *ctx, const struct lb_partition_progress *progress),
                     void *ctx);

#endif
