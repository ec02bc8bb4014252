/* Per-batch memory.
 *
 * Everything the hot path derives from one batch of Kafka messages (decoded
 * events, dimension lists, planner tables) lives in an arena that is reset,
 * not freed, when the batch is done. After the first few batches the arena
 * has grown to the batch's working set and a batch allocates nothing.
 *
 * A growable byte buffer (lb_buf) is used for encoded Redis commands; it too
 * keeps its capacity between batches.
 */
#ifndef LB_ARENA_H
#define LB_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct lb_arena_chunk;

struct lb_arena {
    struct lb_arena_chunk *head; /* chunk being filled; older chunks follow */
    size_t chunk_size;           /* size of the next chunk to allocate */
    uint64_t chunks_made;        /* mallocs so far: constant once batches settle */
    size_t used;                 /* bytes handed out since the last reset */
};

void lb_arena_init(struct lb_arena *arena, size_t first_chunk_size);
/* Returns 'size' bytes aligned to 16, or NULL when out of memory. The memory
 * stays valid until lb_arena_reset or lb_arena_free. */
void *lb_arena_alloc(struct lb_arena *arena, size_t size);
/* Like lb_arena_alloc but zero-filled. */
void *lb_arena_calloc(struct lb_arena *arena, size_t count, size_t size);
/* Forgets every allocation; keeps the largest chunk for the next batch. */
void lb_arena_reset(struct lb_arena *arena);
void lb_arena_free(struct lb_arena *arena);

/* A string that does not own its bytes (usually it points into a Kafka
 * message payload or into an arena). Not NUL-terminated. */
struct lb_str {
    const char *ptr;
    uint32_t len;
};

struct lb_buf {
    char *data;
    size_t len;
    size_t cap;
};

/* Ensures room for 'extra' more bytes. Returns 0, or -1 when out of memory
 * (the buffer is unchanged). */
int lb_buf_reserve(struct lb_buf *buf, size_t extra);
int lb_buf_append(struct lb_buf *buf, const void *bytes, size_t len);
/* Appends one command in RESP: argv[i] of argvlen[i] bytes (NULL: each a
 * NUL-terminated string). Returns 0, or -1 when out of memory (the buffer
 * is unchanged). */
int lb_buf_command(struct lb_buf *buf, int argc, const char **argv, const size_t *argvlen);
void lb_buf_free(struct lb_buf *buf);

#endif
