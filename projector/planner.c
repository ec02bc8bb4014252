/* Batch planner; see planner.h for the contract.
 *
 * Three tables, all in the per-batch arena, turn a stream of events into
 * transactions without sorting and without per-event allocation:
 *
 *   boards   board id          -> board   (profile, slot, list of keys)
 *   keys     (board, window)   -> key     (expiry, list of members)
 *   members  (key, player)     -> member  (best composite so far)
 *
 * Each table is an open-addressing index (struct index) of 32-bit entry
 * numbers over an entry array; lookups compare a stored hash first. Merging
 * members in the planner matters: leaderboards are skewed, the same top
 * players post again and again, and every duplicate we drop is work Redis
 * does not have to do.
 */
#include "planner.h"
#include "resp.h"
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

#define KEY_CACHE 8 /* windows per board whose last key is remembered */

struct board {
    struct lb_str id;
    const struct lb_profile *profile;
    uint16_t slot;
    uint32_t first_key; /* UINT32_MAX: none yet */
    uint32_t last_key;
    /* The key each of the first KEY_CACHE windows used last: events of one
     * board in one batch mostly share their day, week and month, so most
     * lookups stop here. */
    uint32_t recent_key[KEY_CACHE];
};

struct key {
    uint32_t board;
    uint32_t window; /* index into the profile's windows */
    int64_t window_id;
    struct lb_str custom_value;
    int64_t expire_ms; /* PEXPIREAT target for time windows; 0: none */
    uint32_t next_key; /* next key of the same board */
    uint32_t first_member;
    uint32_t last_member;
    uint32_t nmembers;
};

struct member {
    uint32_t key;
    struct lb_str player;
    int64_t composite;
    uint32_t next_member;
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
    struct index board_index, key_index, member_index;
    ARRAY(struct board) boards;
    ARRAY(struct key) keys;
    ARRAY(struct member) members;
    struct lb_txn *txns;
    struct lb_buf out;
    struct lb_plan_stats stats;
    int ready;
    /* table sizes of the last batch, so the next starts big enough */
    uint32_t peak_boards, peak_keys, peak_members;
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
    if (plan->members.count > plan->peak_members)
        plan->peak_members = plan->members.count;
    lb_arena_reset(&plan->arena);
    memset(&plan->boards, 0, sizeof(plan->boards));
    memset(&plan->keys, 0, sizeof(plan->keys));
    memset(&plan->members, 0, sizeof(plan->members));
    memset(&plan->stats, 0, sizeof(plan->stats));
    plan->txns = NULL;
    plan->out.len = 0;
    plan->ready = 0;
    plan->span_day = INT64_MIN;
    if (index_init(&plan->board_index, &plan->arena, plan->peak_boards + 256) != 0 ||
        index_init(&plan->key_index, &plan->arena, plan->peak_keys + 1024) != 0 ||
        index_init(&plan->member_index, &plan->arena, plan->peak_members + 4096) != 0)
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
    b->id = ev->board;
    b->profile = lb_config_profile_for(plan->config, ev->board.ptr, ev->board.len);
    b->slot = lb_crc16(ev->board.ptr, ev->board.len) & (LB_SLOTS - 1);
    b->first_key = b->last_key = NONE;
    for (int i = 0; i < KEY_CACHE; i++)
        b->recent_key[i] = NONE;
    slot->entry = plan->boards.count;
    slot->hash = (uint32_t)h;
    plan->board_index.count++;
    return plan->boards.count - 1;
}

static uint32_t find_key(struct lb_plan *plan, uint32_t board, uint32_t window, int64_t window_id,
                         struct lb_str custom_value, int64_t expire_ms)
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
                      .expire_ms = expire_ms,
                      .next_key = NONE,
                      .first_member = NONE,
                      .last_member = NONE};
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
                        struct lb_str custom_value, int64_t expire_ms)
{
    uint32_t *recent = window < KEY_CACHE ? &plan->boards.items[board].recent_key[window] : NULL;
    if (recent && *recent != NONE) {
        const struct key *k = &plan->keys.items[*recent];
        if (k->window_id == window_id && k->custom_value.len == custom_value.len &&
            memcmp(k->custom_value.ptr, custom_value.ptr, custom_value.len) == 0)
            return *recent;
    }
    uint32_t key = find_key(plan, board, window, window_id, custom_value, expire_ms);
    if (recent)
        *recent = key;
    return key;
}

/* Mixes a key number into a player's hash (a 64-bit finalizer), so the
 * player's bytes are hashed once per event, not once per window. */
static uint64_t member_hash(uint64_t player_hash, uint32_t key)
{
    uint64_t h = player_hash ^ ((uint64_t)key * UINT64_C(0x9e3779b97f4a7c15));
    h ^= h >> 29;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    return h ^ (h >> 32);
}

/* Records 'composite' for the player in key 'key', keeping the better one
 * when the player already has an update in this batch. */
static int merge_member(struct lb_plan *plan, uint32_t key, struct lb_str player,
                        uint64_t player_hash, int64_t composite, enum lb_order order)
{
    uint64_t h = member_hash(player_hash, key);
    struct index_slot *slot;
    if (index_make_room(plan, &plan->member_index) != 0)
        return -1;
    INDEX_FIND(&plan->member_index, h,
               plan->members.items[entry_].key == key &&
                   plan->members.items[entry_].player.len == player.len &&
                   memcmp(plan->members.items[entry_].player.ptr, player.ptr, player.len) == 0,
               slot);
    if (slot->entry) {
        struct member *m = &plan->members.items[slot->entry - 1];
        if (order == LB_ORDER_DESC ? composite > m->composite : composite < m->composite)
            m->composite = composite;
        return 0;
    }
    struct member *m = ARRAY_PUSH(plan, plan->members);
    if (!m)
        return -1;
    *m = (struct member){.key = key, .player = player, .composite = composite, .next_member = NONE};
    uint32_t index = plan->members.count - 1;
    struct key *k = &plan->keys.items[key];
    if (k->last_member == NONE)
        k->first_member = index;
    else
        plan->members.items[k->last_member].next_member = index;
    k->last_member = index;
    k->nmembers++;
    slot->entry = index + 1;
    slot->hash = (uint32_t)h;
    plan->member_index.count++;
    return 0;
}

enum lb_reject lb_plan_add(struct lb_plan *plan, const struct lb_event *ev, int64_t now_ms,
                           uint32_t *txn)
{
    int64_t composite;
    uint32_t board = find_board(plan, ev);
    if (board == NONE)
        return LB_REJECT__COUNT;
    const struct lb_profile *profile = plan->boards.items[board].profile;
    if (!profile)
        return LB_REJECT_INVALID_BOARD; /* no profile matches and there is no catch-all */

    switch (lb_composite(&profile->scoring, ev->score, ev->ts_ms, &composite)) {
    case LB_SCORE_OK:
        break;
    case LB_SCORE_OUT_OF_RANGE:
        return LB_REJECT_SCORE_RANGE;
    case LB_SCORE_TIME_OUT_OF_RANGE:
        return LB_REJECT_TIME_RANGE;
    }
    /* The whole event is checked before any of its writes is planned. */
    for (uint32_t w = 0; w < profile->nwindows; w++) {
        const struct lb_window_config *window = &profile->windows[w];
        if (window->kind != LB_WINDOW_CUSTOM)
            continue;
        const struct lb_str *value = lb_event_dim(ev, window->dim, strlen(window->dim));
        if (value && !lb_id_is_valid(*value))
            return LB_REJECT_INVALID_DIMS;
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
        int64_t expire_ms = 0;

        if (window->kind != LB_WINDOW_CUSTOM)
            span = plan->spans[window->kind];
        if (window->kind == LB_WINDOW_CUSTOM) {
            const struct lb_str *value = lb_event_dim(ev, window->dim, strlen(window->dim));
            if (!value || value->len == 0)
                continue; /* the event does not belong to this custom window */
            custom_value = *value;
        } else if (window->ttl_ms && span.end_ms != INT64_MAX) {
            expire_ms = span.end_ms + window->ttl_ms;
            if (expire_ms <= now_ms) {
                plan->stats.late++;
                continue; /* never resurrect an expired window */
            }
        }
        uint32_t key = key_for(plan, board, w, span.id, custom_value, expire_ms);
        if (key == NONE || merge_member(plan, key, ev->player, player_hash, composite,
                                        profile->scoring.order) != 0)
            return LB_REJECT__COUNT;
    }
    *txn = board;
    return LB_ACCEPT;
}

/* ---- RESP encoding ---------------------------------------------------------------- */

static char *put(char *p, const char *bytes, size_t len)
{
    memcpy(p, bytes, len);
    return p + len;
}

size_t lb_window_key(const char *prefix, struct lb_str board, const struct lb_window_config *window,
                     int64_t window_id, struct lb_str custom_value, char *out, size_t cap)
{
    char label[LB_WINDOW_LABEL_MAX];
    const char *kind =
        window->kind == LB_WINDOW_CUSTOM ? window->dim : lb_window_kind_name(window->kind);
    size_t label_len = 0;
    if (window->kind == LB_WINDOW_CUSTOM) {
        label_len = custom_value.len;
    } else if (window->kind != LB_WINDOW_ALLTIME) {
        label_len = lb_window_label(window->kind, window_id, label, sizeof(label));
    }
    size_t need = strlen(prefix) + board.len + strlen(kind) + label_len + 4;
    if (need > cap)
        return 0;
    /* memcpy, not printf: ids are byte strings */
    char *p = put(out, prefix, strlen(prefix));
    *p++ = '{';
    p = put(p, board.ptr, board.len);
    *p++ = '}';
    *p++ = ':';
    p = put(p, kind, strlen(kind));
    if (window->kind != LB_WINDOW_ALLTIME) {
        *p++ = ':';
        p = window->kind == LB_WINDOW_CUSTOM ? put(p, custom_value.ptr, custom_value.len)
                                             : put(p, label, label_len);
    }
    return (size_t)(p - out);
}

#define KEY_MAX 1024

/* Encodes one board's transaction at the end of plan->out. */
static int encode_board(struct lb_plan *plan, const struct board *b, struct lb_txn *txn)
{
    const struct lb_profile *profile = b->profile;
    struct lb_buf *out = &plan->out;
    uint32_t ncommands = 0;

    txn->slot = b->slot;
    txn->board = b->id;
    txn->offset = out->len;
    if (!profile || b->first_key == NONE) {
        /* Every event of the board was rejected or late: nothing to send. */
        txn->ncommands = 0;
        txn->len = 0;
        return 0;
    }
    const char *mode = profile->scoring.order == LB_ORDER_DESC ? "GT" : "LT";
    if (lb_buf_append(out, "*1\r\n$5\r\nMULTI\r\n", 15) != 0)
        return -1;
    for (uint32_t k = b->first_key; k != NONE; k = plan->keys.items[k].next_key) {
        const struct key *key = &plan->keys.items[k];
        char name[KEY_MAX];
        size_t name_len =
            lb_window_key(plan->config->key_prefix, b->id, &profile->windows[key->window],
                          key->window_id, key->custom_value, name, sizeof(name));
        if (!name_len)
            return -1;
        /* Upper bound of what this key encodes to: ZADD and PEXPIREAT(AT), each a
         * header plus three bulk strings, then two bulk strings per member. */
        const size_t bulk = LB_RESP_HEADER_MAX + 2; /* a bulk string's overhead */
        size_t need = 2 * (LB_RESP_HEADER_MAX + 2 * bulk + 9 + name_len + LB_RESP_INT_MAX);
        for (uint32_t m = key->first_member; m != NONE; m = plan->members.items[m].next_member)
            need += 2 * bulk + LB_RESP_INT_MAX + plan->members.items[m].player.len;
        if (lb_buf_reserve(out, need) != 0)
            return -1;

        char *p = out->data + out->len;
        p = lb_resp_header(p, '*', 3 + 2 * (uint64_t)key->nmembers);
        p = lb_resp_bulk(p, "ZADD", 4);
        p = lb_resp_bulk(p, name, name_len);
        p = lb_resp_bulk(p, mode, 2);
        for (uint32_t m = key->first_member; m != NONE; m = plan->members.items[m].next_member) {
            const struct member *member = &plan->members.items[m];
            p = lb_resp_bulk_int(p, member->composite);
            p = lb_resp_bulk(p, member->player.ptr, member->player.len);
            plan->stats.member_updates++;
        }
        ncommands++;
        const struct lb_window_config *window = &profile->windows[key->window];
        if (key->expire_ms) {
            p = lb_resp_header(p, '*', 3);
            p = lb_resp_bulk(p, "PEXPIREAT", 9);
            p = lb_resp_bulk(p, name, name_len);
            p = lb_resp_bulk_int(p, key->expire_ms);
            ncommands++;
        } else if (window->kind == LB_WINDOW_CUSTOM && window->ttl_ms) {
            p = lb_resp_header(p, '*', 3);
            p = lb_resp_bulk(p, "PEXPIRE", 7);
            p = lb_resp_bulk(p, name, name_len);
            p = lb_resp_bulk_int(p, window->ttl_ms);
            ncommands++;
        }
        out->len = (size_t)(p - out->data);
    }
    if (lb_buf_append(out, "*1\r\n$4\r\nEXEC\r\n", 14) != 0)
        return -1;
    txn->ncommands = ncommands;
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
