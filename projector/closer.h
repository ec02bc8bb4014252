/* Final standings of closed windows (README "Final standings"): the pod's
 * part, stepped by the daemon between batches.
 *
 * Every few seconds it reads, for each source topic, what the group
 * committed on every partition with the commits' event-time watermarks
 * and the partitions' ends, and works out the close watermark
 * (results.h). Windows that will close are listed by the apply script in
 * their board's <prefix>{B}:~open (window -> end plus grace); the closer
 * knows the boards this pod wrote and, from a sweep of the masters at the
 * start and every minute, every board with an open or unpublished window.
 * A window whose close instant the watermark has reached is published in
 * steps of the apply script ("C"), any pod, once:
 *
 *   claim   freezes its standings (the first results.top entries) into
 *           <prefix>{B}:final:<window>, no expiry, with the players, the
 *           close watermark and each partition's close offset (the board's
 *           markers + 1: from there on an event is too late for it, which
 *           the apply script enforces), and takes the publisher's lease;
 *           or takes the lease of one claimed but not published (its
 *           publisher died); or says it is published, or another's;
 *   keep    stores each record's bytes, made from the frozen copy alone;
 *           the first kept stay (a publisher taking over sends the same);
 *   produce to results.topic, keyed by "{B}:<window>", idempotent;
 *   done    once the broker acknowledged every part: published by this
 *           holder (the bytes dropped; the final key kept unless
 *           results.keep is false); sent again by it, ok again; by a
 *           holder whose lease ran out meanwhile, stale.
 *
 * A crash anywhere in between leaves the window claimed: the next claim
 * (another pod's once the lease ran out) sends the same bytes again.
 */
#ifndef LB_CLOSER_H
#define LB_CLOSER_H

#include "cluster.h"
#include "config.h"
#include "error.h"
#include "event.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#define LB_CLOSER_CHECK_MS   2000   /* the watermark and the boards' open windows */
#define LB_CLOSER_SWEEP_MS   60000  /* every master, for boards this pod does not know */
#define LB_CLOSER_STEP_MS    50     /* a check starts windows for this long; the rest next step */
#define LB_CLOSER_PART_BYTES 900000 /* a record's bytes, at most (Kafka's default 1 MB) */
#define LB_CLOSER_FRAMING    4096   /* what a record batch adds to the bytes */

struct lb_closer_options {
    const struct lb_config *config;           /* borrowed */
    const char *key_prefix;                   /* borrowed */
    const struct lb_cluster_options *cluster; /* borrowed: a client of its own is made */
    /* the close watermark is read on a client of its own, of the group */
};

struct lb_closer_stats {
    uint64_t claimed;     /* windows frozen by this pod */
    uint64_t published;   /* windows whose every part the broker acknowledged */
    uint64_t records;     /* records (parts) acknowledged */
    uint64_t failures;    /* steps that failed (tried again) */
    uint64_t restored;    /* windows put back from the results topic (~final lost) */
    uint64_t sweeps;      /* sweeps of every master that completed */
    int64_t watermark;    /* the close watermark last read, -1 unknown */
    long unrebuilt_slots; /* slots without an ~intact mark as last read, -1 unknown */
};

struct lb_closer;

/* NULL with one line in 'err' (the producer could not be made). */
struct lb_closer *lb_closer_new(const struct lb_closer_options *options, char *err, size_t errlen,
                                enum lb_error_class *class);
/* Waits up to 'timeout_ms' for records in flight. Accepts NULL. */
void lb_closer_free(struct lb_closer *closer, int timeout_ms);

/* Checks the results topic's max.message.bytes (README "Final
 * standings"): each window's results.top must fit one record, and parts of
 * 'all' are cut to it. 0 fits; 1 not known yet (with why in 'err': the
 * brokers did not answer, or the topic does not exist), no window closes
 * until a later check (every few seconds) knows; -1 a top that cannot fit,
 * with "file:line: ..." in 'err'. */
int lb_closer_check_size(struct lb_closer *closer, int timeout_ms, char *err, size_t errlen);

/* Board 'board' (of a profile with results) was written; 'opened': its
 * ~open lists a window more, read at the next check. */
void lb_closer_note(struct lb_closer *closer, struct lb_str board, int opened);

/* Does what is due at 'now_ms' (monotonic). */
void lb_closer_step(struct lb_closer *closer, int64_t now_ms);

/* When lb_closer_step next has something to do (monotonic ms; at once
 * while a sweep runs, 10 ms on while records are in flight, and when a
 * failed "done" is tried again). */
int64_t lb_closer_next_due(const struct lb_closer *closer);

const struct lb_closer_stats *lb_closer_stats(const struct lb_closer *closer);

#endif
