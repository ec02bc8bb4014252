/* What the results topic holds (README "Final standings"). The topic is the
 * record of every window ever published, and outlives the Redis copy: when
 * the shard of a board is lost, its ~final goes with it, and the board
 * would otherwise close its windows again (with the events left after the
 * loss) and publish other standings under the same key. So before a window
 * is claimed, and when replay meets a board, what the topic says the
 * window closed with is put back instead ("restore"): published, its
 * closed-at, players, each partition's close offset (the records' header
 * lb.close.offsets) and its final key.
 *
 * An index of the topic: per record key "{B}:<window>", where its last
 * publication starts (partition and offset of its last part 1). Read to
 * the high watermarks, then on from there at each read. A consumer of its
 * own, assigned by hand (it never joins a group or commits).
 *
 * Thread-safe: one thread reads and fetches, any may find.
 */
#ifndef LB_PUBLISHED_H
#define LB_PUBLISHED_H

#include "cluster.h"
#include "config.h"
#include "kafka.h"
#include "results.h"

#include <stddef.h>
#include <stdint.h>

#define LB_CLOSE_OFFSETS_HEADER "lb.close.offsets"

struct lb_published;

/* NULL with one line in 'err'. */
struct lb_published *lb_published_new(const struct lb_kafka_options *kafka, const char *group,
                                      const char *topic, char *err, size_t errlen);
void lb_published_free(struct lb_published *p);

/* Reads what the topic holds past the last read, to its high watermarks
 * now. 0; -1 with 'err' (the brokers, within 'timeout_ms'). A topic that
 * does not exist holds nothing. */
int lb_published_read(struct lb_published *p, int timeout_ms, char *err, size_t errlen);

/* Whether a read completed once: until then nothing is known. */
int lb_published_ready(const struct lb_published *p);

/* Whether "{board}:window" was published. */
int lb_published_has(const struct lb_published *p, const char *board, const char *window);

/* Calls 'fn' with each window of 'board' published (in key order). */
void lb_published_windows(const struct lb_published *p, const char *board,
                          void (*fn)(void *ctx, const char *window), void *ctx);

/* Up to 'max' boards with a publication (the first in key order), each
 * malloc'ed into 'boards'; how many. */
size_t lb_published_boards(const struct lb_published *p, char **boards, size_t max);

/* A publication as fetched back: every part's entries in order. */
struct lb_publication {
    int64_t closed_at_ms, players;
    char *offsets; /* "topic:partition=offset,...", "" when none */
    struct lb_standing *entries;
    size_t n;
    char *arena; /* the players' bytes */
};

/* Fetches the last publication of "{board}:window". 0; 1 when not
 * published; -1 with 'err'. */
int lb_published_fetch(struct lb_published *p, const char *board, const char *window,
                       struct lb_publication *out, int timeout_ms, char *err, size_t errlen);
void lb_publication_free(struct lb_publication *pub);

/* One "C" step of the apply script (claim, keep, done, restore; replay
 * --republish's reopen, reopened, unreopen) for 'window'
 * ("weekly:2026-W48") of 'board'; 'holder' and 'lease_ms' name the
 * publisher (replay's steps: its mark, projector/mark.lua; a later run's
 * mark there answers taken). The reply, or NULL (lb_cluster_error says
 * why). */
redisReply *lb_final_step(struct lb_cluster *cluster, const char *prefix, const char *board,
                          const char *window, const char *step, const char *holder, int lease_ms,
                          const char *const *extra, const size_t *extralen, size_t nextra);

/* Changes the "at" of LB_REOPENED_KEY (apply.h) to 'who' and now, so that
 * every pod looks at its next check. NULL when the call failed (with
 * lb_cluster_error), else the reply (an error reply too), for the caller
 * to free. */
redisReply *lb_reopened_touch(struct lb_cluster *cluster, const char *prefix, const char *who);

/* The slots' "~intact" marks (apply.h LB_INTACT_KEY): sets 'missing'
 * (LB_SLOTS bytes) to 1 for each slot without its mark and returns how
 * many; -1 with 'err' (a node down, refused) and, when 'eclass' is not NULL,
 * '*eclass' (LB_REDIS_RETRY: every failure transient, worth asking again). */
long lb_intact_missing(struct lb_cluster *cluster, const char *prefix, uint8_t *missing, char *err,
                       size_t errlen, enum lb_redis_error *eclass);
/* Writes the mark of each slot whose byte in 'which' is 1 (every slot when
 * NULL): "by" 'by', "at" now. 0; -1 with 'err' and '*eclass', as above
 * (writing them again is harmless). */
int lb_intact_mark(struct lb_cluster *cluster, const char *prefix, const uint8_t *which,
                   const char *by, char *err, size_t errlen, enum lb_redis_error *eclass);

/* Puts back a closed window of 'board' from 'pub' through the apply
 * script (its ~final: published, closed-at, players, close offsets; its
 * final key, composites made again with the profile's scoring, when
 * 'keep'), unless ~final already names the window. 1 restored, 0 present
 * already, -1 failed (with 'err'). */
int lb_published_restore(struct lb_cluster *cluster, const char *key_prefix,
                         const struct lb_profile *profile, const char *board, const char *window,
                         const struct lb_publication *pub, int keep, char *err, size_t errlen);

#endif
