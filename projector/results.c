/* Final standings: the pure rules; see results.h. */
#include "results.h"
#include "event.h"

#include <stdio.h>
#include <string.h>

int64_t lb_results_watermark(const struct lb_partition_mark *marks, size_t n, int64_t idle_ms)
{
    int64_t highest = -1;
    for (size_t i = 0; i < n; i++)
        if (marks[i].watermark > highest)
            highest = marks[i].watermark;
    if (highest < 0)
        return -1;
    int64_t low = highest;
    for (size_t i = 0; i < n; i++) {
        const struct lb_partition_mark *m = &marks[i];
        int caught = m->committed >= m->high || (m->committed < 0 && m->high <= 0);
        int64_t w = m->watermark;
        if (caught && (w < 0 || highest - w >= idle_ms))
            w = highest; /* idle long enough in the topic's event time */
        if (w < 0)
            return -1;
        if (w < low)
            low = w;
    }
    return low;
}

void lb_results_rank(const struct lb_scoring *scoring, struct lb_standing *entries, size_t n,
                     int64_t first, const struct lb_standing *prev)
{
    for (size_t i = 0; i < n; i++) {
        struct lb_standing *e = &entries[i];
        lb_composite_split(scoring, e->composite, &e->score, &e->achieved_at_ms);
        e->position = first + (int64_t)i;
        if (prev && prev->score == e->score) {
            e->rank = prev->rank;
            e->dense_rank = prev->dense_rank;
        } else {
            e->rank = e->position;
            e->dense_rank = prev ? prev->dense_rank + 1 : 1;
        }
        prev = e;
    }
}

/* Avro binary: a long as a zigzag varint, a string as its length then its
 * bytes. 'p' may run past 'end': the caller checks once at the end. */
struct out {
    uint8_t *p, *end;
};

static void put_byte(struct out *o, uint8_t b)
{
    if (o->p < o->end)
        *o->p = b;
    o->p++;
}

static void put_long(struct out *o, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z > 0x7f) {
        put_byte(o, (uint8_t)(z | 0x80));
        z >>= 7;
    }
    put_byte(o, (uint8_t)z);
}

static void put_string(struct out *o, const char *s, size_t len)
{
    put_long(o, (int64_t)len);
    for (size_t i = 0; i < len; i++)
        put_byte(o, (uint8_t)s[i]);
}

size_t lb_results_encode(const struct lb_result_head *head, const struct lb_standing *entries,
                         size_t n, uint8_t *buf, size_t cap)
{
    struct out o = {buf, buf + cap};
    put_byte(&o, 0); /* the Confluent frame */
    for (int shift = 24; shift >= 0; shift -= 8)
        put_byte(&o, (uint8_t)((uint32_t)head->schema_id >> shift));
    put_string(&o, head->board, strlen(head->board));
    put_string(&o, head->window, strlen(head->window));
    put_long(&o, head->kind - LB_WINDOW_DAILY); /* DAILY, WEEKLY, MONTHLY */
    put_long(&o, head->start_ms);
    put_long(&o, head->end_ms);
    put_long(&o, head->closed_at_ms);
    put_long(&o, head->players);
    put_long(&o, head->part);
    put_long(&o, head->parts);
    if (n) { /* one block of n entries */
        put_long(&o, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
            const struct lb_standing *e = &entries[i];
            put_string(&o, e->player, e->len);
            put_long(&o, e->score);
            put_long(&o, e->achieved_at_ms);
            put_long(&o, e->position);
            put_long(&o, e->rank);
            put_long(&o, e->dense_rank);
        }
    }
    put_long(&o, 0); /* the end of the array */
    return o.p <= o.end ? (size_t)(o.p - buf) : 0;
}

/* Reading: 'bad' once anything ran past the end or made no sense. */
struct in {
    const uint8_t *p, *end;
    int bad;
};

static int64_t get_long(struct in *in)
{
    uint64_t z = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (in->p >= in->end)
            break;
        uint8_t b = *in->p++;
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    }
    in->bad = 1;
    return 0;
}

static const char *get_string(struct in *in, size_t *len)
{
    int64_t n = get_long(in);
    if (in->bad || n < 0 || n > in->end - in->p) {
        in->bad = 1;
        *len = 0;
        return "";
    }
    const char *s = (const char *)in->p;
    in->p += n;
    *len = (size_t)n;
    return s;
}

int lb_results_decode(const uint8_t *bytes, size_t len, struct lb_result_view *v,
                      lb_result_entry_fn entry, void *ctx)
{
    if (len < 5 || bytes[0] != 0)
        return -1;
    struct in in = {bytes + 5, bytes + len, 0};
    v->schema_id = (int32_t)((uint32_t)bytes[1] << 24 | (uint32_t)bytes[2] << 16 |
                             (uint32_t)bytes[3] << 8 | bytes[4]);
    v->board = get_string(&in, &v->board_len);
    v->window = get_string(&in, &v->window_len);
    v->kind = get_long(&in);
    v->start_ms = get_long(&in);
    v->end_ms = get_long(&in);
    v->closed_at_ms = get_long(&in);
    v->players = get_long(&in);
    v->part = get_long(&in);
    v->parts = get_long(&in);
    if (in.bad || v->kind < 0 || v->kind > 2 || v->part < 1 || v->part > v->parts)
        return -1;
    for (int64_t count; !in.bad && (count = get_long(&in)) != 0;) {
        if (count < 0) { /* a block that gives its size in bytes too */
            count = -count;
            (void)get_long(&in);
        }
        for (int64_t i = 0; i < count && !in.bad; i++) {
            struct lb_standing e = {0};
            e.player = get_string(&in, &e.len);
            e.score = get_long(&in);
            e.achieved_at_ms = get_long(&in);
            e.position = get_long(&in);
            e.rank = get_long(&in);
            e.dense_rank = get_long(&in);
            if (!in.bad && entry && entry(ctx, &e) != 0)
                return -1;
        }
    }
    return in.bad || in.p != in.end ? -1 : 0;
}

size_t lb_results_head_max(const struct lb_result_head *head)
{
    /* frame, two strings, seven longs, the array's block count and end */
    return 5 + 2 * 10 + strlen(head->board) + strlen(head->window) + 7 * 10 + 2 * 10;
}

size_t lb_results_entry_max(size_t len)
{
    return 10 + len + 5 * 10;
}

size_t lb_results_record_max(int64_t top)
{
    char board[LB_ID_MAX_BYTES + 1], window[32]; /* "monthly:2026-11" and the like */
    memset(board, 'b', sizeof(board) - 1);
    board[sizeof(board) - 1] = '\0';
    memset(window, 'w', sizeof(window) - 1);
    window[sizeof(window) - 1] = '\0';
    struct lb_result_head head = {.board = board, .window = window};
    return lb_results_head_max(&head) + (size_t)top * lb_results_entry_max(LB_ID_MAX_BYTES);
}

size_t lb_results_record_key(const char *board, const char *window, int64_t part, char *out,
                             size_t cap)
{
    int n = part > 1 ? snprintf(out, cap, "{%s}:%s#%lld", board, window, (long long)part)
                     : snprintf(out, cap, "{%s}:%s", board, window);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
