/* Final standings of closed windows (README "Final standings"): the rules
 * that do not touch Redis or Kafka, so that they are tested alone.
 *
 * When a window closes. Each commit carries its partition's event-time
 * watermark W_p (offsets.h). The topic's close watermark is the lowest
 * over its partitions, where a partition caught up (committed = high
 * watermark) whose W_p is at least 'idle' behind the highest W of the
 * topic (or that has none: no event ever) counts as that highest W: it has
 * been idle that long in the topic's own event time, and holds nothing
 * back. A partition not caught up and without a watermark makes it
 * unknown. A window closes when the close watermark reaches its end plus
 * its grace. Only values recorded in Kafka are read, never a clock.
 *
 * Ranks. The standings are a window's first entries in the board's order
 * (composite, then member bytes). Position is the 1-based place; the
 * competition rank and the dense rank tie on the raw score (1, 1, 3 and
 * 1, 1, 2), as lbread shows them.
 *
 * The record. leaderboard.v1.WindowResult (schemas/window_result.avsc),
 * Avro binary behind the Confluent frame (magic byte 0, the schema id, 4
 * bytes big-endian): the same standings always encode to the same bytes.
 */
#ifndef LB_RESULTS_H
#define LB_RESULTS_H

#include "score.h"
#include "window.h"

#include <stddef.h>
#include <stdint.h>

struct lb_partition_mark {
    int64_t committed; /* the group's committed offset; -1: none */
    int64_t high;      /* the partition's high watermark */
    int64_t watermark; /* the event-time watermark its commit carries; -1: none */
};

/* The close watermark of a topic's partitions, or -1 when not known. */
int64_t lb_results_watermark(const struct lb_partition_mark *marks, size_t n, int64_t idle_ms);

struct lb_standing {
    const char *player;
    size_t len;
    int64_t composite;
    /* filled by lb_results_rank */
    int64_t score, achieved_at_ms, position, rank, dense_rank;
};

/* Fills the raw score, its instant (the tie's tick) and the three ranks of
 * 'entries', given best first; 'first' is the position of entries[0] and
 * 'prev' the one before it (NULL: none), so that parts rank alike. */
void lb_results_rank(const struct lb_scoring *scoring, struct lb_standing *entries, size_t n,
                     int64_t first, const struct lb_standing *prev);

struct lb_result_head {
    const char *board, *window; /* window: "weekly:2026-W48" */
    enum lb_window_kind kind;   /* daily, weekly or monthly */
    int64_t start_ms, end_ms, closed_at_ms, players;
    int32_t part, parts;
    int32_t schema_id;
};

/* A record's key: "{board}:window" for part 1, "{board}:window#<part>"
 * after it (a compacted topic keeps the last record of each part; the
 * producer sends them all to the first part's partition). */
size_t lb_results_record_key(const char *board, const char *window, int64_t part, char *out,
                             size_t cap);

/* The bytes of one record: at most 'cap'; returns the length, or 0 when
 * 'cap' is too small. */
size_t lb_results_encode(const struct lb_result_head *head, const struct lb_standing *entries,
                         size_t n, uint8_t *out, size_t cap);

/* A record read back: its head (strings point into the bytes, not
 * terminated) and, through 'entry' (may be NULL), each entry in order
 * (entry->player likewise; a nonzero return stops the reading). */
struct lb_result_view {
    int32_t schema_id;
    const char *board, *window;
    size_t board_len, window_len;
    int64_t kind; /* 0 daily, 1 weekly, 2 monthly */
    int64_t start_ms, end_ms, closed_at_ms, players, part, parts;
};
typedef int (*lb_result_entry_fn)(void *ctx, const struct lb_standing *entry);

/* 0; -1 when the bytes are not a framed WindowResult (or 'entry' stopped). */
int lb_results_decode(const uint8_t *bytes, size_t len, struct lb_result_view *view,
                      lb_result_entry_fn entry, void *ctx);

/* An upper bound of the encoded size of the head and of one entry whose
 * player has 'len' bytes. */
size_t lb_results_head_max(const struct lb_result_head *head);
size_t lb_results_entry_max(size_t len);
/* The most one record of a window's first 'top' entries can take: the
 * longest board and player ids (event.h) and window name. */
size_t lb_results_record_max(int64_t top);

#endif
