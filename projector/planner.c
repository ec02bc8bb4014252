/* Batch planner; see planner.h for the contract.
 *
 * Four tables, all in the per-batch arena, turn a stream of events into
 * requests without sorting and without per-event allocation:
 *
 *   boards    board id                   -> board   (profile, slot, keys, segments)
 *   segments  (board, topic, partition)  -> segment (first and last offset)
 *   keys      (board, window)            -> key     (expiry, entries)
 *   entries   (key, player, segment)     -> entry   (the member's merged update)
 *
 * Each table but segments (a board has one per partition, a short list) is
 * an open-addressing index (struct index) of 32-bit entry numbers over an
 * entry array; lookups compare a stored hash first. Merging in the planner
 * matters: leaderboards are skewed, the same top players post again and
 * again, and every duplicate we drop is work Redis does not have to do.
 */
#include "planner.h"
#include "apply_script.h"
#include "resp.h"
#include "slot.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small open-addressing index --------------------------------------- */

struct index_slot {
    uint32_t entry; /* entry number + 1; 0 = empty */
    uint32_t hash;
};

struct index {
    struct index_slot *slots;
    uint32_t mask;
    uint32_t count;
};

static uint64_t hash_bytes(uint64_t h, const void *data, size_t len)
{
    /* FNV-1a: short keys, no alignment needs, good enough spread for ids. */
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

#define HASH_SEED UINT64_C(0xcbf29ce484222325)

static int index_init(struct index *ix, struct lb_arena *arena, uint32_t expected)
{
    uint32_t cap = 16;
    while (cap < expected * 2)
        cap *= 2;
    ix->slots = lb_arena_calloc(arena, cap, sizeof(*ix->slots));
    ix->mask = cap - 1;
    ix->count = 0;
    return ix->slots ? 0 : -1;
}

static int index_grow(struct index *ix, struct lb_arena *arena)
{
    struct index old = *ix;
    if (index_init(ix, arena, (old.mask + 1)) != 0) {
        *ix = old;
        return -1;
    }
    for (uint32_t i = 0; i <= old.mask; i++) {
        if (!old.slots[i].entry)
            continue;
        uint32_t pos = old.slots[i].hash & ix->mask;
        while (ix->slots[pos].entry)
            pos = (pos + 1) & ix->mask;
        ix->slots[pos] = old.slots[i];
    }
    ix->count = old.count;
    return 0;
}

/* Returns the slot holding an entry with 'hash' that 'same' accepts, or the
 * empty slot where such an entry belongs. */
#define INDEX_FIND(ix, h, same_expr, out_slot)                                                     \
    do {                                                                                           \
        uint32_t pos_ = (uint32_t)(h) & (ix)->mask;                                                \
        for (;;) {                                                                                 \
            struct index_slot *s_ = &(ix)->slots[pos_];                                            \
            if (!s_->entry) {                                                                      \
                (out_slot) = s_;                                                                   \
                break;                                                                             \
            }                                                                                      \
            if (s_->hash == (uint32_t)(h)) {                                                       \
                uint32_t entry_ = s_->entry - 1;                                                   \
                if (same_expr) {                                                                   \
                    (out_slot) = s_;                                                               \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
            pos_ = (pos_ + 1) & (ix)->mask;                                                        \
        }                                                                                          \
    } while (0)

/* ---- the apply script ------------------------------------------------------ */

static char script_sha[41];
static pthread_once_t script_sha_once = PTHREAD_ONCE_INIT;

static void compute_script_sha(void)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    static const char hex[] = "0123456789abcdef";
    EVP_Digest(LB_APPLY_SCRIPT, sizeof(LB_APPLY_SCRIPT) - 1, digest, &len, EVP_sha1(), NULL);
    for (unsigned int i = 0; i < len && i < 20; i++) {
        script_sha[2 * i] = hex[digest[i] >> 4];
        script_sha[2 * i + 1] = hex[digest[i] & 15];
    }
}

const char *lb_apply_script_sha(void)
{
    pthread_once(&script_sha_once, compute_script_sha);
    return script_sha;
}

const char *lb_apply_script(void)
{
    return LB_APPLY_SCRIPT;
}

/* ---- plan entries --------------------------------------------------------------- */

#define KEY_CACHE 8 /* windows per board whose last key is remembered */

struct board {
    struct lb_str id;
    const struct lb_profile *profile;
    uint16_t slot;
    uint32_t first_key; /* NONE: none yet */
    uint32_t last_key;
    uint32_t first_segment;
    uint32_t nsegments;
    uint32_t last_segment; /* the segment of the board's last event */
    /* The key each of the first KEY_CACHE windows used last: events of one
     * board in one batch mostly share their day, week and month, so most
     * lookups stop here. */
    uint32_t recent_key[KEY_CACHE];
};

struct segment {
    const char *topic;
    int32_t partition;
    uint32_t number; /* 1-based, within the board: the script's segment number */
    int64_t first, last;
    uint32_t next; /* next segment of the same board */
};

enum expire_kind { EXPIRE_NONE = 'n', EXPIRE_AT = 'a', EXPIRE_AFTER = 't' };

struct key {
    uint32_t board;
    uint32_t window; /* index into the profile's windows */
    int64_t window_id;
    struct lb_str custom_value;
    char expire;       /* enum expire_kind */
    int64_t expire_ms; /* PEXPIREAT target, or PEXPIRE ttl */
    uint32_t next_key; /* next key of the same board */
    uint32_t first_entry;
    uint32_t last_entry;
    uint32_t nentries;
};

#define ENTRY_RETRACTED 1u /* the member is removed, then 'value' applied if set */
#define ENTRY_VALUE     2u

struct entry {
    uint32_t key;
    uint32_t segment; /* index into plan->segments */
    struct lb_str player;
    uint32_t flags;
    int64_t value; /* best, latest: composite; sum: the scores added up */
    int64_t ts;    /* latest: event time; sum: the tie of the latest event time */
    int64_t order; /* latest: offset, breaking equal event times */
    uint32_t next_entry;
};

#define NONE UINT32_MAX

/* A growable array in the arena; growing copies (amortised O(1)). */
#define ARRAY(type)                                                                                \
    struct {                                                                                       \
        type *items;                                                                               \
        uint32_t count, cap;                                                                       \
    }

struct lb_plan {
    const struct lb_config *config;
    struct lb_arena arena;
    struct index board_index, key_index, entry_index;
    ARRAY(struct board) boards;
    ARRAY(struct segment) segments;
    ARRAY(struct key) keys;
    ARRAY(struct entry) entries;
    struct lb_txn *txns;
    struct lb_buf out;
    struct lb_plan_stats stats;
    int ready;
    /* table sizes of the last batch, so the next starts big enough */
    uint32_t peak_boards, peak_keys, peak_entries;
    /* the windows of the last event's day, computed once per day */
    int64_t span_day;
    struct lb_window_span spans[LB_WINDOW_CUSTOM];
};

static int array_reserve(struct lb_arena *arena, void **items, uint32_t *cap, uint32_t count,
                         size_t size)
{
    if (count < *cap)
        return 0;
    uint32_t ncap = *cap ? *cap * 2 : 64;
    void *fresh = lb_arena_alloc(arena, (size_t)ncap * size);
    if (!fresh)
        return -1;
    if (count)
        memcpy(fresh, *items, (size_t)count * size);
    *items = fresh;
    *cap = ncap;
    return 0;
}

#define ARRAY_PUSH(plan, array)                                                                    \
    (array_reserve(&(plan)->arena, (void **)&(array).items, &(array).cap, (array).count,           \
                   sizeof(*(array).items)) == 0                                                    \
         ? &(array).items[(array).count++]                                                         \
         : NULL)

struct lb_plan *lb_plan_new(const struct lb_config *config)
{
    struct lb_plan *plan = calloc(1, sizeof(*plan));
    if (!plan)
        return NULL;
    plan->config = config;
    lb_arena_init(&plan->arena, 1 << 20);
    lb_plan_reset(plan);
    if (!plan->board_index.slots) {
        lb_plan_free(plan);
        return NULL;
    }
    return plan;
}

void lb_plan_free(struct lb_plan *plan)
{
    if (!plan)
        return;
    lb_arena_free(&plan->arena);
    lb_buf_free(&plan->out);
    free(plan);
}

void lb_plan_reset(struct lb_plan *plan)
{
    if (plan->boards.count > plan->peak_boards)
        plan->peak_boards = plan->boards.count;
    if (plan->keys.count > plan->peak_keys)
        plan->peak_keys = plan->keys.count;
    if (plan->entries.count > plan->peak_entries)
        plan->peak_entries = plan->entries.count;
    lb_arena_reset(&plan->arena);
    memset(&plan->boards, 0, sizeof(plan->boards));
    memset(&plan->segments, 0, sizeof(plan->segments));
    memset(&plan->keys, 0, sizeof(plan->keys));
    memset(&plan->entries, 0, sizeof(plan->entries));
    memset(&plan->stats, 0, sizeof(plan->stats));
    plan->txns = NULL;
    plan->out.len = 0;
    plan->ready = 0;
    plan->span_day = INT64_MIN;
    if (index_init(&plan->board_index, &plan->arena, plan->peak_boards + 256) != 0 ||
        index_init(&plan->key_index, &plan->arena, plan->peak_keys + 1024) != 0 ||
        index_init(&plan->entry_index, &plan->arena, plan->peak_entries + 4096) != 0)
        plan->board_index.slots = NULL;
}

/* Grows 'ix' before it is more than half full. */
static int index_make_room(struct lb_plan *plan, struct index *ix)
{
    if ((ix->count + 1) * 2 <= ix->mask + 1)
        return 0;
    return index_grow(ix, &plan->arena);
}

static uint32_t find_board(struct lb_plan *plan, const struct lb_event *ev)
{
    uint64_t h = hash_bytes(HASH_SEED, ev->board.ptr, ev->board.len);
    struct index_slot *slot;
    if (index_make_room(plan, &plan->board_index) != 0)
        return NONE;
    INDEX_FIND(&plan->board_index, h,
               plan->boards.items[entry_].id.len == ev->board.len &&
                   memcmp(plan->boards.items[entry_].id.ptr, ev->board.ptr, ev->board.len) == 0,
               slot);
    if (slot->entry)
        return slot->entry - 1;

    struct board *b = ARRAY_PUSH(plan, plan->boards);
    if (!b)
        return NONE;
    *b =
        (struct board){.id = ev->board,
                       .profile = lb_config_profile_for(plan->config, ev->board.ptr, ev->board.len),
                       .slot = lb_crc16(ev->board.ptr, ev->board.len) & (LB_SLOTS - 1),
                       .first_key = NONE,
                       .last_key = NONE,
                       .first_segment = NONE,
                       .last_segment = NONE};
    for (int i = 0; i < KEY_CACHE; i++)
        b->recent_key[i] = NONE;
    slot->entry = plan->boards.count;
    slot->hash = (uint32_t)h;
    plan->board_index.count++;
    return plan->boards.count - 1;
}

static int same_topic(const char *a, const char *b)
{
    return a == b || strcmp(a, b) == 0;
}

/* The board's segment for the event's topic-partition, extended to its
 * offset. */
static uint32_t segment_for(struct lb_plan *plan, uint32_t board, const struct lb_position *pos)
{
    struct board *b = &plan->boards.items[board];
    uint32_t s = b->last_segment;
    if (s == NONE || plan->segments.items[s].partition != pos->partition ||
        !same_topic(plan->segments.items[s].topic, pos->topic)) {
        for (s = b->first_segment; s != NONE; s = plan->segments.items[s].next)
            if (plan->segments.items[s].partition == pos->partition &&
                same_topic(plan->segments.items[s].topic, pos->topic))
                break;
    }
    if (s == NONE) {
        struct segment *seg = ARRAY_PUSH(plan, plan->segments);
        if (!seg)
            return NONE;
        b = &plan->boards.items[board];
        *seg = (struct segment){.topic = pos->topic,
                                .partition = pos->partition,
                                .number = ++b->nsegments,
                                .first = pos->offset,
                                .last = pos->offset,
                                .next = b->first_segment};
        s = plan->segments.count - 1;
        b->first_segment = s;
    }
    struct segment *seg = &plan->segments.items[s];
    if (pos->offset < seg->first)
        seg->first = pos->offset;
    if (pos->offset > seg->last)
        seg->last = pos->offset;
    b->last_segment = s;
    return s;
}

static uint32_t find_key(struct lb_plan *plan, uint32_t board, uint32_t window, int64_t window_id,
                         struct lb_str custom_value, char expire, int64_t expire_ms)
{
    uint64_t h = hash_bytes(HASH_SEED, &board, sizeof(board));
    h = hash_bytes(h, &window, sizeof(window));
    h = hash_bytes(h, &window_id, sizeof(window_id));
    h = hash_bytes(h, custom_value.ptr, custom_value.len);
    struct index_slot *slot;
    if (index_make_room(plan, &plan->key_index) != 0)
        return NONE;
    INDEX_FIND(&plan->key_index, h,
               plan->keys.items[entry_].board == board &&
                   plan->keys.items[entry_].window == window &&
                   plan->keys.items[entry_].window_id == window_id &&
                   plan->keys.items[entry_].custom_value.len == custom_value.len &&
                   memcmp(plan->keys.items[entry_].custom_value.ptr, custom_value.ptr,
                          custom_value.len) == 0,
               slot);
    if (slot->entry)
        return slot->entry - 1;

    struct key *k = ARRAY_PUSH(plan, plan->keys);
    if (!k)
        return NONE;
    *k = (struct key){.board = board,
                      .window = window,
                      .window_id = window_id,
                      .custom_value = custom_value,
                      .expire = expire,
                      .expire_ms = expire_ms,
                      .next_key = NONE,
                      .first_entry = NONE,
                      .last_entry = NONE};
    uint32_t index = plan->keys.count - 1;
    struct board *b = &plan->boards.items[board];
    if (b->last_key == NONE)
        b->first_key = index;
    else
        plan->keys.items[b->last_key].next_key = index;
    b->last_key = index;
    slot->entry = index + 1;
    slot->hash = (uint32_t)h;
    plan->key_index.count++;
    return index;
}

/* The key of window 'window' of 'board' for this event, from the board's
 * recent keys when it is the same window as last time. */
static uint32_t key_for(struct lb_plan *plan, uint32_t board, uint32_t window, int64_t window_id,
                        struct lb_str custom_value, char expire, int64_t expire_ms)
{
    uint32_t *recent = window < KEY_CACHE ? &plan->boards.items[board].recent_key[window] : NULL;
    if (recent && *recent != NONE) {
        const struct key *k = &plan->keys.items[*recent];
        if (k->window_id == window_id && k->custom_value.len == custom_value.len &&
            memcmp(k->custom_value.ptr, custom_value.ptr, custom_value.len) == 0)
            return *recent;
    }
    uint32_t key = find_key(plan, board, window, window_id, custom_value, expire, expire_ms);
    if (recent)
        *recent = key;
    return key;
}

/* Mixes a key and a segment number into a player's hash (a 64-bit
 * finalizer), so the player's bytes are hashed once per event. */
static uint64_t entry_hash(uint64_t player_hash, uint32_t key, uint32_t segment)
{
    uint64_t h =
        player_hash ^ ((uint64_t)key * UINT64_C(0x9e3779b97f4a7c15)) ^ ((uint64_t)segment << 32);
    h ^= h >> 29;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    return h ^ (h >> 32);
}

static struct entry *find_entry(struct lb_plan *plan, uint32_t key, uint32_t segment,
                                struct lb_str player, uint64_t player_hash)
{
    uint64_t h = entry_hash(player_hash, key, segment);
    struct index_slot *slot;
    if (index_make_room(plan, &plan->entry_index) != 0)
        return NULL;
    INDEX_FIND(&plan->entry_index, h,
               plan->entries.items[entry_].key == key &&
                   plan->entries.items[entry_].segment == segment &&
                   plan->entries.items[entry_].player.len == player.len &&
                   memcmp(plan->entries.items[entry_].player.ptr, player.ptr, player.len) == 0,
               slot);
    if (slot->entry)
        return &plan->entries.items[slot->entry - 1];
    struct entry *e = ARRAY_PUSH(plan, plan->entries);
    if (!e)
        return NULL;
    *e = (struct entry){.key = key, .segment = segment, .player = player, .next_entry = NONE};
    uint32_t index = plan->entries.count - 1;
    struct key *k = &plan->keys.items[key];
    if (k->last_entry == NONE)
        k->first_entry = index;
    else
        plan->entries.items[k->last_entry].next_entry = index;
    k->last_entry = index;
    k->nentries++;
    slot->entry = index + 1;
    slot->hash = (uint32_t)h;
    plan->entry_index.count++;
    return e;
}

/* What one event does to one member of one key, merged with what the batch
 * already holds for them. */
struct update {
    enum lb_op op;
    int64_t composite; /* best, latest */
    int64_t score;     /* sum */
    int64_t tie;       /* sum */
    int64_t ts;        /* latest */
    int64_t offset;    /* latest */
};

static void merge(struct entry *e, const struct lb_profile *profile, const struct update *u)
{
    if (u->op == LB_OP_RETRACT) {
        e->flags = ENTRY_RETRACTED; /* forget what came before it */
        return;
    }
    int first = !(e->flags & ENTRY_VALUE);
    e->flags |= ENTRY_VALUE;
    switch (profile->aggregation) {
    case LB_AGG_BEST:
        if (first || (profile->scoring.order == LB_ORDER_DESC ? u->composite > e->value
                                                              : u->composite < e->value))
            e->value = u->composite;
        break;
    case LB_AGG_LATEST:
        if (first || u->ts > e->ts || (u->ts == e->ts && u->offset > e->order)) {
            e->value = u->composite;
            e->ts = u->ts;
            e->order = u->offset;
        }
        break;
    case LB_AGG_SUM:
        if (first) {
            e->value = u->score;
            e->ts = u->tie;
        } else {
            e->value += u->score; /* cannot overflow: see the batch check in config.c */
            int grows = lb_tie_grows_with_time(&profile->scoring);
            if (grows ? u->tie > e->ts : u->tie < e->ts)
                e->ts = u->tie;
        }
        break;
    }
}

/* Checks the event against its profile and computes what it does. */
static enum lb_reject evaluate(const struct lb_profile *profile, const struct lb_event *ev,
                               const struct lb_position *pos, struct update *u)
{
    const struct lb_scoring *scoring = &profile->scoring;
    *u = (struct update){.op = ev->op, .ts = ev->ts_ms, .offset = pos->offset};
    if (lb_tie(scoring, ev->ts_ms, &u->tie) != LB_SCORE_OK)
        return LB_REJECT_TIME_RANGE;
    /* The whole event is checked before any of its writes is planned. */
    for (uint32_t w = 0; w < profile->nwindows; w++) {
        const struct lb_window_config *window = &profile->windows[w];
        if (window->kind != LB_WINDOW_CUSTOM)
            continue;
        const struct lb_str *value = lb_event_dim(ev, window->dim, strlen(window->dim));
        if (value && !lb_id_is_valid(*value))
            return LB_REJECT_INVALID_DIMS;
    }
    if (ev->op == LB_OP_RETRACT)
        return LB_ACCEPT; /* only its time (and dims) matter: they name the windows */
    if (ev->score < scoring->score_min || ev->score > scoring->score_max)
        return LB_REJECT_SCORE_RANGE;
    u->score = ev->score;
    lb_composite(scoring, ev->score, ev->ts_ms, &u->composite);
    return LB_ACCEPT;
}

enum lb_reject lb_plan_add(struct lb_plan *plan, const struct lb_event *ev,
                           const struct lb_position *pos, int64_t now_ms, uint32_t *txn)
{
    struct update u;
    uint32_t board = find_board(plan, ev);
    if (board == NONE)
        return LB_REJECT__COUNT;
    const struct lb_profile *profile = plan->boards.items[board].profile;
    if (!profile)
        return LB_REJECT_INVALID_BOARD; /* no profile matches and there is no catch-all */
    enum lb_reject reason = evaluate(profile, ev, pos, &u);
    if (reason != LB_ACCEPT)
        return reason;

    uint32_t segment = segment_for(plan, board, pos);
    if (segment == NONE)
        return LB_REJECT__COUNT;
    int64_t day = lb_floor_div(ev->ts_ms, LB_MS_PER_DAY);
    if (day != plan->span_day) {
        for (int kind = 0; kind < LB_WINDOW_CUSTOM; kind++)
            lb_window_span((enum lb_window_kind)kind, ev->ts_ms, &plan->spans[kind]);
        plan->span_day = day;
    }
    uint64_t player_hash = hash_bytes(HASH_SEED, ev->player.ptr, ev->player.len);

    for (uint32_t w = 0; w < profile->nwindows; w++) {
        const struct lb_window_config *window = &profile->windows[w];
        struct lb_window_span span = {0, INT64_MIN, INT64_MAX};
        struct lb_str custom_value = {"", 0};
        char expire = EXPIRE_NONE;
        int64_t expire_ms = 0;

        if (window->kind == LB_WINDOW_CUSTOM) {
            const struct lb_str *value = lb_event_dim(ev, window->dim, strlen(window->dim));
            if (!value || value->len == 0)
                continue; /* the event does not belong to this custom window */
            custom_value = *value;
            if (window->ttl_ms) {
                expire = EXPIRE_AFTER;
                expire_ms = window->ttl_ms;
            }
        } else {
            span = plan->spans[window->kind];
            if (window->ttl_ms && span.end_ms != INT64_MAX) {
                expire = EXPIRE_AT;
                /* saturating: ttl is capped at load, but never trust a sum */
                expire_ms = span.end_ms > INT64_MAX - window->ttl_ms ? INT64_MAX
                                                                     : span.end_ms + window->ttl_ms;
                if (expire_ms <= now_ms) {
                    plan->stats.late++;
                    continue; /* never resurrect an expired window */
                }
            }
        }
        uint32_t key = key_for(plan, board, w, span.id, custom_value, expire, expire_ms);
        struct entry *e =
            key == NONE ? NULL : find_entry(plan, key, segment, ev->player, player_hash);
        if (!e)
            return LB_REJECT__COUNT;
        merge(e, profile, &u);
    }
    *txn = board;
    return LB_ACCEPT;
}

/* ---- encoding ----------------------------------------------------------------------- */

static char *put(char *p, const char *bytes, size_t len)
{
    memcpy(p, bytes, len);
    return p + len;
}

static size_t build_key(char *out, size_t cap, const char *prefix, struct lb_str board,
                        const char *suffix, size_t suffix_len, const char *more, size_t more_len)
{
    size_t need = strlen(prefix) + board.len + suffix_len + more_len + 5; /* {}:: and NUL */
    if (need > cap)
        return 0;
    /* memcpy, not printf: ids are byte strings */
    char *p = put(out, prefix, strlen(prefix));
    *p++ = '{';
    p = put(p, board.ptr, board.len);
    *p++ = '}';
    *p++ = ':';
    p = put(p, suffix, suffix_len);
    if (more_len) {
        *p++ = ':';
        p = put(p, more, more_len);
    }
    *p = '\0';
    return (size_t)(p - out);
}

size_t lb_window_key(const char *prefix, struct lb_str board, const struct lb_window_config *window,
                     int64_t window_id, struct lb_str custom_value, char *out, size_t cap)
{
    char label[LB_WINDOW_LABEL_MAX];
    const char *kind =
        window->kind == LB_WINDOW_CUSTOM ? window->dim : lb_window_kind_name(window->kind);
    if (window->kind == LB_WINDOW_CUSTOM)
        return build_key(out, cap, prefix, board, kind, strlen(kind), custom_value.ptr,
                         custom_value.len);
    if (window->kind == LB_WINDOW_ALLTIME)
        return build_key(out, cap, prefix, board, kind, strlen(kind), NULL, 0);
    size_t label_len = lb_window_label(window->kind, window_id, label, sizeof(label));
    return build_key(out, cap, prefix, board, kind, strlen(kind), label, label_len);
}

size_t lb_marker_key(const char *prefix, struct lb_str board, char *out, size_t cap)
{
    return build_key(out, cap, prefix, board, "~applied", 8, NULL, 0);
}

size_t lb_fence_key(const char *prefix, struct lb_str board, char *out, size_t cap)
{
    return build_key(out, cap, prefix, board, "~fence", 6, NULL, 0);
}

size_t lb_marker_field(const char *topic, int32_t partition, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s:%d", topic, partition);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

#define KEY_MAX   1024
#define STAMP_MAX 40 /* "%015lld:%020lld" */

static const char ts_suffix[] = ":~ts";

/* Arguments each entry takes: segment, flags, value(s), member. */
static size_t entry_width(enum lb_aggregation aggregation)
{
    return aggregation == LB_AGG_BEST ? 4 : 5;
}

/* An upper bound of what a board's request encodes to. */
static size_t board_size_bound(const struct lb_plan *plan, const struct board *b)
{
    const size_t bulk = LB_RESP_HEADER_MAX + 2;
    size_t size = 16 * (bulk + LB_RESP_INT_MAX) + 2 * (bulk + KEY_MAX);
    for (uint32_t s = b->first_segment; s != NONE; s = plan->segments.items[s].next)
        size += 3 * (bulk + LB_RESP_INT_MAX) + strlen(plan->segments.items[s].topic);
    for (uint32_t k = b->first_key; k != NONE; k = plan->keys.items[k].next_key) {
        size += 2 * (bulk + KEY_MAX + sizeof(ts_suffix)) + 3 * (bulk + LB_RESP_INT_MAX);
        for (uint32_t e = plan->keys.items[k].first_entry; e != NONE;
             e = plan->entries.items[e].next_entry)
            size += 5 * (bulk + STAMP_MAX) + plan->entries.items[e].player.len;
    }
    return size;
}

static char *put_window_key(struct lb_plan *plan, char *p, const struct board *b,
                            const struct key *key, int ts)
{
    char name[KEY_MAX + sizeof(ts_suffix)];
    size_t len = lb_window_key(plan->config->key_prefix, b->id, &b->profile->windows[key->window],
                               key->window_id, key->custom_value, name, KEY_MAX);
    if (ts) {
        memcpy(name + len, ts_suffix, sizeof(ts_suffix) - 1);
        len += sizeof(ts_suffix) - 1;
    }
    return lb_resp_bulk(p, name, len);
}

static char *put_entry(char *p, const struct lb_plan *plan, const struct entry *e,
                       enum lb_aggregation aggregation)
{
    static const char *const flag_text[] = {"", "r", "v", "rv"};
    char stamp[STAMP_MAX];
    p = lb_resp_bulk_int(p, plan->segments.items[e->segment].number);
    p = lb_resp_bulk(p, flag_text[e->flags & 3], strlen(flag_text[e->flags & 3]));
    switch (aggregation) {
    case LB_AGG_BEST:
        p = lb_resp_bulk_int(p, e->value);
        break;
    case LB_AGG_LATEST: {
        int n = snprintf(stamp, sizeof(stamp), "%015lld:%020lld", (long long)e->ts,
                         (long long)e->order);
        p = lb_resp_bulk_int(p, e->value);
        p = lb_resp_bulk(p, stamp, (size_t)n);
        break;
    }
    case LB_AGG_SUM:
        p = lb_resp_bulk_int(p, e->value);
        p = lb_resp_bulk_int(p, e->ts);
        break;
    }
    return lb_resp_bulk(p, e->player.ptr, e->player.len);
}

/* Encodes one board's EVALSHA at the end of plan->out. */
static int encode_board(struct lb_plan *plan, const struct board *b, struct lb_txn *txn)
{
    const struct lb_profile *profile = b->profile;
    struct lb_buf *out = &plan->out;

    txn->slot = b->slot;
    txn->board = b->id;
    txn->offset = out->len;
    txn->len = 0;
    if (!profile || b->first_key == NONE)
        return 0; /* every event of the board was rejected or late: nothing to send */

    enum lb_aggregation aggregation = profile->aggregation;
    uint32_t nkeys = 0;
    size_t nargs = 9 + 3 * (size_t)b->nsegments;
    for (uint32_t k = b->first_key; k != NONE; k = plan->keys.items[k].next_key) {
        nkeys++;
        nargs += 3 + entry_width(aggregation) * plan->keys.items[k].nentries;
        plan->stats.member_updates += plan->keys.items[k].nentries;
    }
    uint32_t numkeys = 2 + nkeys * (aggregation == LB_AGG_LATEST ? 2 : 1);
    if (lb_buf_reserve(out, board_size_bound(plan, b)) != 0)
        return -1;

    char *p = out->data + out->len;
    p = lb_resp_header(p, '*', 3 + numkeys + nargs);
    p = lb_resp_bulk(p, "EVALSHA", 7);
    p = lb_resp_bulk(p, lb_apply_script_sha(), 40);
    p = lb_resp_bulk_int(p, numkeys);
    char marker[KEY_MAX];
    p = lb_resp_bulk(p, marker, lb_marker_key(plan->config->key_prefix, b->id, marker, KEY_MAX));
    p = lb_resp_bulk(p, marker, lb_fence_key(plan->config->key_prefix, b->id, marker, KEY_MAX));
    for (uint32_t k = b->first_key; k != NONE; k = plan->keys.items[k].next_key)
        p = put_window_key(plan, p, b, &plan->keys.items[k], 0);
    if (aggregation == LB_AGG_LATEST)
        for (uint32_t k = b->first_key; k != NONE; k = plan->keys.items[k].next_key)
            p = put_window_key(plan, p, b, &plan->keys.items[k], 1);

    static const char mode[] = {[LB_AGG_BEST] = 'b', [LB_AGG_LATEST] = 'l', [LB_AGG_SUM] = 's'};
    p = lb_resp_bulk(p, "1", 1);
    p = lb_resp_bulk(p, &mode[aggregation], 1);
    p = lb_resp_bulk(p, profile->scoring.order == LB_ORDER_DESC ? "d" : "a", 1);
    p = lb_resp_bulk_int(p, profile->scoring.tie_bits);
    p = lb_resp_bulk(p, lb_tie_grows_with_time(&profile->scoring) ? "1" : "0", 1);
    p = lb_resp_bulk_int(p, profile->sum_min);
    p = lb_resp_bulk_int(p, profile->sum_max);
    p = lb_resp_bulk_int(p, nkeys);
    p = lb_resp_bulk_int(p, b->nsegments);
    /* segments in their numbering order: the list is newest first */
    for (uint32_t number = 1; number <= b->nsegments; number++) {
        for (uint32_t s = b->first_segment; s != NONE; s = plan->segments.items[s].next) {
            const struct segment *seg = &plan->segments.items[s];
            if (seg->number != number)
                continue;
            char field[300];
            size_t n = lb_marker_field(seg->topic, seg->partition, field, sizeof(field));
            p = lb_resp_bulk(p, field, n);
            p = lb_resp_bulk_int(p, seg->first);
            p = lb_resp_bulk_int(p, seg->last);
        }
    }
    for (uint32_t k = b->first_key; k != NONE; k = plan->keys.items[k].next_key) {
        const struct key *key = &plan->keys.items[k];
        char kind = key->expire;
        p = lb_resp_bulk(p, &kind, 1);
        p = lb_resp_bulk_int(p, key->expire_ms);
        p = lb_resp_bulk_int(p, key->nentries);
        for (uint32_t e = key->first_entry; e != NONE; e = plan->entries.items[e].next_entry)
            p = put_entry(p, plan, &plan->entries.items[e], aggregation);
    }
    out->len = (size_t)(p - out->data);
    txn->len = out->len - txn->offset;
    return 0;
}

int lb_plan_finish(struct lb_plan *plan)
{
    plan->txns = lb_arena_calloc(&plan->arena, plan->boards.count ? plan->boards.count : 1,
                                 sizeof(*plan->txns));
    if (!plan->txns)
        return -1;
    for (uint32_t i = 0; i < plan->boards.count; i++)
        if (encode_board(plan, &plan->boards.items[i], &plan->txns[i]) != 0)
            return -1;
    plan->ready = 1;
    return 0;
}

const struct lb_txn *lb_plan_txns(const struct lb_plan *plan, size_t *count)
{
    *count = plan->ready ? plan->boards.count : 0;
    return plan->txns;
}

const char *lb_plan_bytes(const struct lb_plan *plan)
{
    return plan->out.data;
}

const struct lb_plan_stats *lb_plan_stats(const struct lb_plan *plan)
{
    return &plan->stats;
}
