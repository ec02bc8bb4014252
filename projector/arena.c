/* A bump allocator over a list of chunks. Chunks double in size until one is
 * large enough for a whole batch; reset keeps only that one, so a steady
 * stream of batches settles on a single chunk and no malloc at all. */
#include "arena.h"
#include "resp.h"

#include <stdlib.h>
#include <string.h>

struct lb_arena_chunk {
    struct lb_arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    _Alignas(16) unsigned char bytes[];
};

void lb_arena_init(struct lb_arena *arena, size_t first_chunk_size)
{
    arena->head = NULL;
    arena->chunks_made = 0;
    arena->used = 0;
    arena->chunk_size = first_chunk_size < 4096 ? 4096 : first_chunk_size;
}

static struct lb_arena_chunk *chunk_new(size_t size)
{
    struct lb_arena_chunk *chunk = malloc(sizeof(*chunk) + size);
    if (!chunk)
        return NULL;
    chunk->next = NULL;
    chunk->size = size;
    chunk->used = 0;
    return chunk;
}

void *lb_arena_alloc(struct lb_arena *arena, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    struct lb_arena_chunk *chunk = arena->head;
    if (!chunk || chunk->size - chunk->used < size) {
        size_t want = arena->chunk_size;
        while (want < size)
            want *= 2;
        struct lb_arena_chunk *fresh = chunk_new(want);
        if (!fresh)
            return NULL;
        fresh->next = chunk;
        arena->head = fresh;
        arena->chunks_made++;
        arena->chunk_size = want * 2;
        chunk = fresh;
    }
    void *p = chunk->bytes + chunk->used;
    chunk->used += size;
    arena->used += size;
    return p;
}

void *lb_arena_calloc(struct lb_arena *arena, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    void *p = lb_arena_alloc(arena, count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void lb_arena_reset(struct lb_arena *arena)
{
    struct lb_arena_chunk *keep = NULL;
    struct lb_arena_chunk *chunk = arena->head;
    while (chunk) {
        struct lb_arena_chunk *next = chunk->next;
        if (!keep || chunk->size > keep->size) {
            free(keep);
            keep = chunk;
        } else {
            free(chunk);
        }
        chunk = next;
    }
    if (keep) {
        keep->next = NULL;
        keep->used = 0;
    }
    arena->head = keep;
    arena->used = 0;
}

void lb_arena_free(struct lb_arena *arena)
{
    while (arena->head) {
        struct lb_arena_chunk *next = arena->head->next;
        free(arena->head);
        arena->head = next;
    }
}

int lb_buf_reserve(struct lb_buf *buf, size_t extra)
{
    if (buf->cap - buf->len >= extra)
        return 0;
    size_t cap = buf->cap ? buf->cap : 4096;
    while (cap - buf->len < extra)
        cap *= 2;
    char *data = realloc(buf->data, cap);
    if (!data)
        return -1;
    buf->data = data;
    buf->cap = cap;
    return 0;
}

int lb_buf_append(struct lb_buf *buf, const void *bytes, size_t len)
{
    if (lb_buf_reserve(buf, len) != 0)
        return -1;
    memcpy(buf->data + buf->len, bytes, len);
    buf->len += len;
    return 0;
}

void lb_buf_free(struct lb_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

int lb_buf_command(struct lb_buf *buf, int argc, const char **argv, const size_t *argvlen)
{
    size_t need = LB_RESP_HEADER_MAX;
    for (int i = 0; i < argc; i++)
        need += LB_RESP_HEADER_MAX + (argvlen ? argvlen[i] : strlen(argv[i])) + 2;
    if (lb_buf_reserve(buf, need) != 0)
        return -1;
    char *p = lb_resp_header(buf->data + buf->len, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++)
        p = lb_resp_bulk(p, argv[i], argvlen ? argvlen[i] : strlen(argv[i]));
    buf->len = (size_t)(p - buf->data);
    return 0;
}
