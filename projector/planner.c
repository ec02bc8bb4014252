/* Batch planner; see planner.h for the contract.
 *
 * Four tables, all in the per-batch arena, turn a stream of events into
 * merged updates without sorting and without per-event allocation:
 *
 *   boards    board id                   -> board   (profile, slot, keys, segments)
 *   segments  (board, topic, partition)  -> segment (first and last offset)
 *   keys      (board, window)            -> key     (expiry, entries)
 *   entries   (key, player, segment)     -> entry   (the member's merged update)
 *   seen      (board, event_id)          -> seen    (dedupe: the batch's event ids)
 *
 * Each table but segments (a board has one per partition, a short list) is
 * an open-addressing index (struct index) of 32-bit entry numbers over an
 * entry array; lookups compare a stored hash first. Merging in the planner
 * matters: leaderboards are skewed, the same top players post again and
 * again, and every duplicate we drop is work Redis does not have to do.
 */
#include "planner.h"
#include "slot.h"

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

/* ---- plan entries --------------------------------------------------------------- */

#define NONE LB_PLAN_NONE

/* A growable array in the arena; growing copies (amortised O(1)). */
#define ARRAY(type)                                                                                \
    struct {                                                                                       \
        type *items;                                                                               \
        uint32_t count, cap;                                                                       \
    }

struct lb_plan {
    struct lb_plan_options options;
    lb_plan_closed_fn closed;
    void *closed_ctx;
    struct lb_arena arena;
    struct index board_index, key_index, entry_index, seen_index;
    int ready; /* the indexes exist: 0 after a reset or an add ran out of memory */
    ARRAY(struct lb_plan_board) boards;
    ARRAY(struct lb_plan_segment) segments;
    ARRAY(struct lb_plan_key) keys;
    ARRAY(struct lb_plan_entry) entries;
    ARRAY(struct lb_plan_seen) seen;
    struct lb_plan_stats stats;
    /* table sizes of the last batch, so the next starts big enough */
    uint32_t peak_boards, peak_keys, peak_entries, peak_seen;
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

struct lb_plan *lb_plan_new(const struct lb_plan_options *options)
{
    struct lb_plan *plan = calloc(1, sizeof(*plan));
    if (!plan)
        return NULL;
    plan->options = *options;
    lb_arena_init(&plan->arena, 1 << 20);
    lb_plan_reset(plan);
    if (!plan->ready) {
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
    if (plan->seen.count > plan->peak_seen)
        plan->peak_seen = plan->seen.count;
    lb_arena_reset(&plan->arena);
    memset(&plan->boards, 0, sizeof(plan->boards));
    memset(&plan->segments, 0, sizeof(plan->segments));
    memset(&plan->keys, 0, sizeof(plan->keys));
    memset(&plan->entries, 0, sizeof(plan->entries));
    memset(&plan->seen, 0, sizeof(plan->seen));
    memset(&plan->stats, 0, sizeof(plan->stats));
    plan->span_day = INT64_MIN;
    plan->ready = index_init(&plan->board_index, &plan->arena, plan->peak_boards + 256) == 0 &&
                  index_init(&plan->key_index, &plan->arena, plan->peak_keys + 1024) == 0 &&
                  index_init(&plan->entry_index, &plan->arena, plan->peak_entries + 4096) == 0 &&
                  index_init(&plan->seen_index, &plan->arena, plan->peak_seen + 256) == 0;
}

/* Grows 'ix' before it is more than half full. */
static int index_make_room(struct lb_plan *plan, struct index *ix)
{
    if ((ix->count + 1) * 2 <= ix->mask + 1)
        return 0;
    return index_grow(ix, &plan->arena);
}

/* A new board of the plan under tag 'id', with nothing planned yet. */
static struct lb_plan_board *new_board(struct lb_plan *plan, struct lb_str id)
{
    struct lb_plan_board *b = ARRAY_PUSH(plan, plan->boards);
    if (!b)
        return NULL;
    *b = (struct lb_plan_board){.id = id,
                                .slot = lb_crc16(id.ptr, id.len) & (LB_SLOTS - 1),
                                .first_key = NONE,
                                .last_key = NONE,
                                .first_segment = NONE,
                                .last_segment = NONE,
                                .first_seen = NONE,
                                .last_seen = NONE};
    for (int i = 0; i < LB_PLAN_KEY_CACHE; i++)
        b->recent_key[i] = NONE;
    return b;
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

    struct lb_plan_board *b = new_board(plan, ev->board);
    if (!b)
        return NONE;
    const struct lb_profile *profile = lb_profile_for(
        plan->options.profiles, plan->options.nprofiles, ev->board.ptr, ev->board.len);
    struct lb_str base;
    uint32_t shard;
    /* a board named like a shard of a split board would write its keys:
     * refused (as a board no profile takes) */
    if (memchr(ev->board.ptr, '#', ev->board.len) &&
        lb_shard_parse(plan->options.profiles, plan->options.nprofiles, ev->board, &base, &shard))
        profile = NULL;
    b->base = ev->board;
    b->profile = profile;
    slot->entry = plan->boards.count;
    slot->hash = (uint32_t)h;
    plan->board_index.count++;
    return plan->boards.count - 1;
}

/* A split board's shard for the event's player: a board of the plan of its
 * own, under the shard's tag. */
static uint32_t shard_board(struct lb_plan *plan, uint32_t board, const struct lb_event *ev)
{
    struct lb_plan_board *b = &plan->boards.items[board];
    uint32_t shards = (uint32_t)b->profile->shards,
             shard = lb_player_shard(ev->player.ptr, ev->player.len, shards);
    if (!b->shards) {
        if (!(b->shards = lb_arena_alloc(&plan->arena, shards * sizeof(*b->shards))))
            return NONE;
        for (uint32_t i = 0; i < shards; i++)
            b->shards[i] = NONE;
    }
    if (b->shards[shard] != NONE)
        return b->shards[shard];
    char tag[LB_ID_MAX_BYTES + 24];
    size_t len = lb_shard_tag(b->id.ptr, b->id.len, shards, shard, tag, sizeof(tag));
    char *copy = len ? lb_arena_alloc(&plan->arena, len + 1) : NULL;
    if (!copy)
        return NONE;
    memcpy(copy, tag, len + 1);
    struct lb_plan_board *sb = new_board(plan, (struct lb_str){copy, (uint32_t)len});
    if (!sb)
        return NONE;
    b = &plan->boards.items[board]; /* the push may have moved it */
    sb->base = b->id;
    sb->shard = shard;
    sb->profile = b->profile;
    b->shards[shard] = plan->boards.count - 1;
    return b->shards[shard];
}

static int same_topic(const char *a, const char *b)
{
    return a == b || strcmp(a, b) == 0;
}

/* The board's segment for the event's topic-partition, extended to its
 * offset. */
static uint32_t segment_for(struct lb_plan *plan, uint32_t board, const struct lb_position *pos)
{
    struct lb_plan_board *b = &plan->boards.items[board];
    uint32_t s = b->last_segment;
    if (s == NONE || plan->segments.items[s].partition != pos->partition ||
        !same_topic(plan->segments.items[s].topic, pos->topic)) {
        for (s = b->first_segment; s != NONE; s = plan->segments.items[s].next)
            if (plan->segments.items[s].partition == pos->partition &&
                same_topic(plan->segments.items[s].topic, pos->topic))
                break;
    }
    if (s == NONE) {
        struct lb_plan_segment *seg = ARRAY_PUSH(plan, plan->segments);
        if (!seg)
            return NONE;
        b = &plan->boards.items[board];
        *seg = (struct lb_plan_segment){.topic = pos->topic,
                                        .partition = pos->partition,
                                        .number = ++b->nsegments,
                                        .first = pos->offset,
                                        .last = pos->offset,
                                        .next = b->first_segment};
        s = plan->segments.count - 1;
        b->first_segment = s;
    }
    struct lb_plan_segment *seg = &plan->segments.items[s];
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

    struct lb_plan_key *k = ARRAY_PUSH(plan, plan->keys);
    if (!k)
        return NONE;
    *k = (struct lb_plan_key){.board = board,
                              .window = window,
                              .window_id = window_id,
                              .custom_value = custom_value,
                              .expire = expire,
                              .expire_ms = expire_ms,
                              .next_key = NONE,
                              .first_entry = NONE,
                              .last_entry = NONE};
    uint32_t index = plan->keys.count - 1;
    struct lb_plan_board *b = &plan->boards.items[board];
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
    uint32_t *recent =
        window < LB_PLAN_KEY_CACHE ? &plan->boards.items[board].recent_key[window] : NULL;
    if (recent && *recent != NONE) {
        const struct lb_plan_key *k = &plan->keys.items[*recent];
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

static struct lb_plan_entry *find_entry(struct lb_plan *plan, uint32_t key, uint32_t segment,
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
    struct lb_plan_entry *e = ARRAY_PUSH(plan, plan->entries);
    if (!e)
        return NULL;
    *e = (struct lb_plan_entry){
        .key = key, .segment = segment, .player = player, .next_entry = NONE};
    uint32_t index = plan->entries.count - 1;
    struct lb_plan_key *k = &plan->keys.items[key];
    if (k->last_entry == NONE)
        k->first_entry = index;
    else
        plan->entries.items[k->last_entry].next_entry = index;
    k->last_entry = index;
    k->nentries++;
    plan->stats.member_updates++;
    slot->entry = index + 1;
    slot->hash = (uint32_t)h;
    plan->entry_index.count++;
    return e;
}

int64_t lb_dedupe_stamp(const struct lb_event *ev)
{
    uint64_t h = hash_bytes(HASH_SEED, ev->player.ptr, ev->player.len);
    int64_t numbers[3] = {ev->score, ev->ts_ms, ev->op};
    h = hash_bytes(h, numbers, sizeof(numbers));
    for (uint32_t i = 0; i < ev->ndims; i++) {
        uint32_t lens[2] = {ev->dims[i].name.len, ev->dims[i].value.len};
        h = hash_bytes(h, lens, sizeof(lens));
        h = hash_bytes(h, ev->dims[i].name.ptr, ev->dims[i].name.len);
        h = hash_bytes(h, ev->dims[i].value.ptr, ev->dims[i].value.len);
    }
    h ^= h >> 32;
    int64_t fp = (int64_t)(h & ((UINT64_C(1) << LB_DEDUPE_FP_BITS) - 1));
    return lb_floor_div(ev->ts_ms, 1000) * (INT64_C(1) << LB_DEDUPE_FP_BITS) + fp;
}

/* Dedupe within the batch: LB_PLAN_ADDED and the event's id recorded for
 * the apply script, or whether an earlier event of the batch had its id. */
static int see_event(struct lb_plan *plan, uint32_t board, uint32_t segment,
                     const struct lb_event *ev, const struct lb_position *pos)
{
    uint64_t h = hash_bytes(hash_bytes(HASH_SEED, &board, sizeof(board)), ev->event_id.ptr,
                            ev->event_id.len);
    int64_t stamp = lb_dedupe_stamp(ev);
    struct index_slot *slot;
    if (index_make_room(plan, &plan->seen_index) != 0)
        return -1;
    INDEX_FIND(&plan->seen_index, h,
               plan->seen.items[entry_].event_id.len == ev->event_id.len &&
                   memcmp(plan->seen.items[entry_].event_id.ptr, ev->event_id.ptr,
                          ev->event_id.len) == 0 &&
                   plan->seen.items[entry_].board == board,
               slot);
    if (slot->entry)
        return plan->seen.items[slot->entry - 1].stamp == stamp ? LB_PLAN_DUPLICATE
                                                                : LB_PLAN_CONFLICT;
    struct lb_plan_seen *seen = ARRAY_PUSH(plan, plan->seen);
    if (!seen)
        return -1;
    *seen = (struct lb_plan_seen){.board = board,
                                  .segment = segment,
                                  .event_id = ev->event_id,
                                  .offset = pos->offset,
                                  .stamp = stamp,
                                  .next = NONE};
    uint32_t index = plan->seen.count - 1;
    struct lb_plan_board *b = &plan->boards.items[board];
    if (b->last_seen == NONE)
        b->first_seen = index;
    else
        plan->seen.items[b->last_seen].next = index;
    b->last_seen = index;
    b->nseen++;
    slot->entry = index + 1;
    slot->hash = (uint32_t)h;
    plan->seen_index.count++;
    return LB_PLAN_ADDED;
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

static void merge(struct lb_plan_entry *e, const struct lb_profile *profile, const struct update *u)
{
    if (u->op == LB_OP_RETRACT) {
        e->flags = LB_ENTRY_RETRACTED; /* forget what came before it */
        return;
    }
    int first = !(e->flags & LB_ENTRY_VALUE);
    e->flags |= LB_ENTRY_VALUE;
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
        /* a decaying board with a list of patches takes those only */
        const struct lb_decay_config *decay = profile->decay;
        if (value && decay && decay->npatches && decay->window == w &&
            lb_decay_patch_index(decay, value->ptr, value->len) < 0)
            return LB_REJECT_INVALID_DIMS;
    }
    if (ev->op == LB_OP_RETRACT && profile->reject_retractions)
        return LB_REJECT_RETRACTION;
    if (ev->op == LB_OP_RETRACT)
        return LB_ACCEPT; /* only its time (and dims) matter: they name the windows */
    if (ev->score < scoring->score_min || ev->score > scoring->score_max)
        return LB_REJECT_SCORE_RANGE;
    u->score = ev->score;
    lb_composite(scoring, ev->score, ev->ts_ms, &u->composite);
    return LB_ACCEPT;
}

/* An add that ran out of memory leaves a half-planned event: nothing more
 * is planned until the next reset. */
static int out_of_memory(struct lb_plan *plan)
{
    plan->ready = 0;
    return -1;
}

int lb_plan_add(struct lb_plan *plan, const struct lb_event *ev, const struct lb_position *pos,
                int64_t now_ms, uint32_t *txn, enum lb_reject *reason)
{
    struct update u;
    if (!plan->ready)
        return -1;
    uint32_t board = find_board(plan, ev);
    if (board == NONE)
        return out_of_memory(plan);
    const struct lb_profile *profile = plan->boards.items[board].profile;
    *reason = profile ? evaluate(profile, ev, pos, &u)
                      : LB_REJECT_INVALID_BOARD; /* no profile matches and no catch-all */
    if (*reason != LB_ACCEPT)
        return 0;
    if (profile->shards > 1 && (board = shard_board(plan, board, ev)) == NONE)
        return out_of_memory(plan);

    *txn = board;
    uint32_t segment = segment_for(plan, board, pos);
    if (segment == NONE)
        return out_of_memory(plan);
    if (profile->dedupe_window_ms) {
        int seen = see_event(plan, board, segment, ev, pos);
        if (seen < 0)
            return out_of_memory(plan);
        if (seen != LB_PLAN_ADDED)
            return seen;
    }
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
        char expire = LB_EXPIRE_NONE;
        int64_t expire_ms = 0;

        if (window->kind == LB_WINDOW_CUSTOM) {
            const struct lb_str *value = lb_event_dim(ev, window->dim, strlen(window->dim));
            if (!value || value->len == 0)
                continue; /* the event does not belong to this custom window */
            custom_value = *value;
            if (window->ttl_ms) {
                expire = LB_EXPIRE_AFTER;
                expire_ms = window->ttl_ms;
            }
        } else {
            span = plan->spans[window->kind];
            if (window->ttl_ms && span.end_ms != INT64_MAX) {
                expire = LB_EXPIRE_AT;
                /* saturating: ttl is capped at load, but never trust a sum */
                expire_ms = span.end_ms > INT64_MAX - window->ttl_ms ? INT64_MAX
                                                                     : span.end_ms + window->ttl_ms;
                if (expire_ms <= now_ms) {
                    plan->stats.late++;
                    continue; /* never resurrect an expired window */
                }
            }
            if (window->results_top >= 0 && plan->closed &&
                plan->closed(plan->closed_ctx, ev->board, window, span.id, pos)) {
                plan->stats.closed++;
                continue; /* its final standings stand */
            }
        }
        uint32_t key = key_for(plan, board, w, span.id, custom_value, expire, expire_ms);
        struct lb_plan_entry *e =
            key == NONE ? NULL : find_entry(plan, key, segment, ev->player, player_hash);
        if (!e)
            return out_of_memory(plan);
        merge(e, profile, &u);
    }
    return LB_PLAN_ADDED;
}

void lb_plan_set_closed(struct lb_plan *plan, lb_plan_closed_fn closed, void *ctx)
{
    plan->closed = closed;
    plan->closed_ctx = ctx;
}

void lb_plan_view(const struct lb_plan *plan, struct lb_plan_view *view)
{
    *view = (struct lb_plan_view){.boards = plan->boards.items,
                                  .nboards = plan->boards.count,
                                  .segments = plan->segments.items,
                                  .keys = plan->keys.items,
                                  .entries = plan->entries.items,
                                  .seen = plan->seen.items};
}

const struct lb_plan_stats *lb_plan_stats(const struct lb_plan *plan)
{
    return &plan->stats;
}

uint64_t lb_plan_chunks_made(const struct lb_plan *plan)
{
    return plan->arena.chunks_made;
}
