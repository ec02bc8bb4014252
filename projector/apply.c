/* The apply protocol; see apply.h (and apply.lua for the argument layout). */
#include "apply.h"
#include "decay.h"
#include "resp.h"
#include "slot.h"
#include "window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* From the build (apply_lua.c, generated from apply.lua). */
extern const char lb_apply_lua[];
extern const char lb_apply_lua_sha1[];

const char *lb_apply_script(void)
{
    return lb_apply_lua;
}

const char *lb_apply_script_sha(void)
{
    return lb_apply_lua_sha1;
}

/* ---- key layout ------------------------------------------------------------------- */

static char *put(char *p, const char *bytes, size_t len)
{
    memcpy(p, bytes, len);
    return p + len;
}

/* "<prefix>{<board>}:<suffix>[:<more>]"; memcpy, not printf: ids are bytes. */
static size_t build_key(char *out, size_t cap, const char *prefix, struct lb_str board,
                        const char *suffix, size_t suffix_len, const char *more, size_t more_len)
{
    size_t need = strlen(prefix) + board.len + suffix_len + more_len + 5; /* {}:: and NUL */
    if (need > cap)
        return 0;
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

size_t lb_window_name(const struct lb_window_config *window, int64_t window_id,
                      struct lb_str custom_value, char *out, size_t cap)
{
    /* the key without "<prefix>{}:" */
    size_t n = lb_window_key("", (struct lb_str){"", 0}, window, window_id, custom_value, out, cap);
    if (n < 3)
        return 0;
    memmove(out, out + 3, n - 2);
    return n - 3;
}

/* ---- split boards ------------------------------------------------------------------ */

size_t lb_top_key(const char *prefix, struct lb_str board, struct lb_str window, char *out,
                  size_t cap)
{
    return build_key(out, cap, prefix, board, LB_TOP_PREFIX, sizeof(LB_TOP_PREFIX) - 1, window.ptr,
                     window.len);
}

size_t lb_marker_key(const char *prefix, struct lb_str board, char *out, size_t cap)
{
    return build_key(out, cap, prefix, board, "~applied", 8, NULL, 0);
}

size_t lb_marker_zset_key(const char *prefix, struct lb_str board, char *out, size_t cap)
{
    return build_key(out, cap, prefix, board, "~offsets", 8, NULL, 0);
}

size_t lb_fence_key(const char *prefix, struct lb_str board, char *out, size_t cap)
{
    return build_key(out, cap, prefix, board, "~fence", 6, NULL, 0);
}

size_t lb_dedupe_key(const char *prefix, struct lb_str board, char *out, size_t cap)
{
    return build_key(out, cap, prefix, board, "~seen", 5, NULL, 0);
}

size_t lb_board_key(const char *prefix, struct lb_str board, const char *rest, char *out,
                    size_t cap)
{
    return build_key(out, cap, prefix, board, rest, strlen(rest), NULL, 0);
}

size_t lb_intact_key(const char *prefix, uint16_t slot, char *out, size_t cap)
{
    char tag[24];
    size_t tlen = lb_slot_tag(slot, tag, sizeof(tag));
    int n = snprintf(out, cap, "%s%s{%s}", prefix, LB_INTACT_KEY, tag);
    return tlen && n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

size_t lb_final_key(const char *prefix, struct lb_str board, const char *window, char *out,
                    size_t cap)
{
    return build_key(out, cap, prefix, board, LB_FINAL_PREFIX, sizeof(LB_FINAL_PREFIX) - 1, window,
                     strlen(window));
}

/* A patch's member in version order: its lb_version_key, a NUL, its name. */
static size_t version_member(const char *name, size_t len, char *out, size_t cap)
{
    char text[LB_VERSION_MAX + 1];
    size_t n = 0;
    if (len <= LB_VERSION_MAX) {
        memcpy(text, name, len);
        text[len] = '\0';
        if (!memchr(text, '\0', len))
            n = lb_version_key(text, out, cap);
    }
    if (!n) { /* beyond a version's length (or holding a NUL): ordered by its bytes, last */
        if (cap < 2)
            return 0;
        out[0] = 'Z';
        n = 1;
    }
    if (n + 1 + len + 1 > cap)
        return 0;
    out[n] = '\0';
    memcpy(out + n + 1, name, len);
    out[n + 1 + len] = '\0';
    return n + 1 + len;
}

const char *lb_patch_name(const char *member, size_t len, size_t *name_len)
{
    const char *nul = memchr(member, '\0', len);
    if (!nul) { /* a listed patch: the member is its name */
        *name_len = len;
        return member;
    }
    *name_len = len - (size_t)(nul + 1 - member);
    return nul + 1;
}

size_t lb_decay_patch_member(const struct lb_decay_config *decay, const char *name, size_t len,
                             char *out, size_t cap, int64_t *score)
{
    *score = 0;
    if (!decay->npatches)
        return version_member(name, len, out, cap);
    int index = lb_decay_patch_index(decay, name, len);
    if (index < 0 || len + 1 > cap)
        return 0;
    memcpy(out, name, len);
    out[len] = '\0';
    *score = index;
    return len;
}

void lb_decay_ages(const struct lb_decay_config *decay, const int64_t *scores, size_t n, int *ages)
{
    for (size_t i = 0; i < n; i++)
        ages[i] = decay->npatches ? (int)(scores[n - 1] - scores[i]) : (int)(n - 1 - i);
}

size_t lb_decay_rule(const struct lb_decay_config *decay, char *out, size_t cap)
{
    const struct lb_decay *rule = &decay->rule;
    /* the list, by a hash of its names in order with their NULs (FNV-1a
     * from another start than the standard one: rules written by earlier
     * releases must compare equal) */
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < decay->npatches; i++)
        h = lb_fnv1a(h, decay->patches[i], strlen(decay->patches[i]) + 1);
    char order[40] = "versions";
    if (decay->npatches)
        snprintf(order, sizeof(order), "list-%016llx", (unsigned long long)h);
    int n = snprintf(out, cap, "%s/%lld/%d/%lld/%s/%s/%s",
                     rule->stacking == LB_DECAY_COMPOUND ? "compound" : "linear",
                     (long long)rule->tax, rule->max_age, (long long)rule->scale,
                     rule->desc ? "desc" : "asc", decay->key, order);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

void lb_lease_holder(char *out, size_t cap)
{
    char host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, cap, "%s:%ld:%lx", host, (long)getpid(), (unsigned long)ts.tv_nsec);
}

size_t lb_marker_field(const char *topic, int32_t partition, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s:%d", topic, partition);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

int lb_key_parse(const char *prefix, const char *key, size_t len, struct lb_key_parts *parts)
{
    size_t plen = strlen(prefix);
    if (len < plen + 4 || memcmp(key, prefix, plen) != 0 || key[plen] != '{')
        return -1;
    const char *open = key + plen + 1, *end = key + len;
    const char *close = memchr(open, '}', (size_t)(end - open));
    if (!close || close + 1 >= end || close[1] != ':')
        return -1;
    const char *rest = close + 2;
    size_t rlen = (size_t)(end - rest), slen = sizeof(LB_STAMPS_SUFFIX) - 1;
    *parts = (struct lb_key_parts){.kind = LB_KEY_WINDOW,
                                   .board = {open, (uint32_t)(close - open)},
                                   .window = {rest, (uint32_t)rlen}};
    if (rlen == 8 && (memcmp(rest, "~applied", 8) == 0 || memcmp(rest, "~offsets", 8) == 0))
        parts->kind = LB_KEY_MARKER;
    else if (rlen == 6 && memcmp(rest, "~fence", 6) == 0)
        parts->kind = LB_KEY_FENCE;
    else if (rlen == 5 && memcmp(rest, "~seen", 5) == 0)
        parts->kind = LB_KEY_SEEN;
    else if (rlen == sizeof(LB_NEWEST_KEY) - 1 && memcmp(rest, LB_NEWEST_KEY, rlen) == 0)
        parts->kind = LB_KEY_NEWEST;
    else if (rlen > sizeof(LB_TOP_PREFIX) &&
             memcmp(rest, LB_TOP_PREFIX ":", sizeof(LB_TOP_PREFIX)) == 0) {
        parts->kind = LB_KEY_TOP;
        parts->window =
            (struct lb_str){rest + sizeof(LB_TOP_PREFIX), (uint32_t)(rlen - sizeof(LB_TOP_PREFIX))};
    } else if ((rlen > sizeof(LB_FINAL_PREFIX) &&
                memcmp(rest, LB_FINAL_PREFIX ":", sizeof(LB_FINAL_PREFIX)) == 0) ||
               (rlen == sizeof(LB_FINAL_KEY) - 1 && memcmp(rest, LB_FINAL_KEY, rlen) == 0)) {
        parts->kind = LB_KEY_FINAL; /* replay leaves them alone */
    } else if (rlen == sizeof(LB_OPEN_KEY) - 1 && memcmp(rest, LB_OPEN_KEY, rlen) == 0) {
        parts->kind = LB_KEY_OPEN;
    } else if (rlen > slen && memcmp(rest + rlen - slen, LB_STAMPS_SUFFIX, slen) == 0) {
        parts->kind = LB_KEY_STAMPS;
        parts->window.len -= (uint32_t)slen;
    } else if (rlen == 0 || rest[0] == '~')
        parts->kind = LB_KEY_OTHER;
    if (parts->kind == LB_KEY_MARKER || parts->kind == LB_KEY_FENCE || parts->kind == LB_KEY_SEEN ||
        parts->kind == LB_KEY_OPEN || parts->kind == LB_KEY_NEWEST)
        parts->window = (struct lb_str){"", 0};
    return 0;
}

int lb_key_is_window(const char *prefix, const char *key, size_t len)
{
    struct lb_key_parts parts;
    return lb_key_parse(prefix, key, len, &parts) == 0 && parts.kind == LB_KEY_WINDOW;
}

int64_t lb_apply_dedupe_seconds(const struct lb_profile *profile)
{
    return (profile->dedupe_window_ms + 999) / 1000;
}

int lb_apply_seen_forgotten(const struct lb_profile *profile, int64_t newest, int64_t stamp)
{
    int64_t from =
        lb_floor_div(newest, INT64_C(1) << LB_DEDUPE_FP_BITS) - lb_apply_dedupe_seconds(profile);
    return lb_floor_div(stamp, INT64_C(1) << LB_DEDUPE_FP_BITS) < from;
}

/* ---- requests --------------------------------------------------------------------- */

#define KEY_MAX 1024
/* a patch's member in ~patches: its version key (4 bytes per byte of a
 * name, plus 8), a NUL and the name; the custom value is at most a key */
#define LB_PATCH_MEMBER_MAX (6 * KEY_MAX)
#define LB_DECAY_WIDTH      16 /* digits of a packed taxed composite (< 2^53) */
#define STAMP_MAX           40 /* "%015lld:%020lld" */

/* Values per plain entry: best composite, member; latest composite, member
 * (its stamp is its player's newest); sum delta, tie, member. A special
 * entry has its flags first, and a latest one its stamp before the member. */
static size_t plain_width(enum lb_aggregation aggregation)
{
    return aggregation == LB_AGG_SUM ? 3 : 2;
}

static size_t special_width(enum lb_aggregation aggregation)
{
    return aggregation == LB_AGG_LATEST ? 4 : plain_width(aggregation) + 1;
}

static int is_plain(const struct lb_plan_entry *e)
{
    return (e->flags & (LB_ENTRY_RETRACTED | LB_ENTRY_VALUE)) == LB_ENTRY_VALUE;
}

/* A latest board's player in one segment: its entries, and its newest
 * (apply.lua latest()) at 'value' in the encoder's 'values'. */
struct player {
    uint32_t number; /* the segment's */
    struct lb_str id;
    uint32_t first, count; /* its entries in the encoder's 'items' */
    size_t value, value_len;
};

/* One entry of a latest board, for finding its player's others. */
struct item {
    uint32_t number; /* its segment's */
    uint32_t entry;
    uint32_t key;
    uint32_t window; /* its key's window in the profile: names in profile order */
};

struct encoder {
    struct lb_apply_batch *batch;
    struct lb_plan_view v;
    const struct lb_apply_options *options;
    /* per board: segments by number; per key: entries by segment */
    const struct lb_plan_segment **segs;
    uint32_t *counts;        /* [2 * (nseg + 1)]: plain, then special, by segment number */
    uint32_t *order;         /* the key's entries, grouped */
    struct stamped *stamped; /* the board's event ids, by segment, newest first */
    size_t segs_cap, counts_cap, order_cap, stamped_cap;
    /* latest boards: per entry (by its index in the plan) whether it goes
     * plain; the players, by segment number; their newest values */
    int latest;
    uint8_t *plain;
    struct item *items;
    struct player *players;
    char *values;
    uint32_t *per_segment; /* players per segment number */
    size_t plain_cap, items_cap, players_cap, values_cap, values_len, per_segment_cap, nplayers;
};

static int goes_plain(const struct encoder *en, uint32_t e)
{
    return en->latest ? en->plain[e] : is_plain(&en->v.entries[e]);
}

static int grow(void **ptr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *fresh = realloc(*ptr, n * size);
    if (!fresh)
        return -1;
    *ptr = fresh;
    *cap = n;
    return 0;
}

/* An upper bound of what a board's request encodes to. */
static size_t board_size_bound(const struct encoder *en, const struct lb_plan_board *b)
{
    const size_t bulk = LB_RESP_HEADER_MAX + 2;
    size_t size = 16 * (bulk + LB_RESP_INT_MAX) + 3 * (bulk + KEY_MAX);
    for (uint32_t s = b->first_segment; s != LB_PLAN_NONE; s = en->v.segments[s].next)
        size += 4 * (bulk + LB_RESP_INT_MAX) + strlen(en->v.segments[s].topic);
    for (uint32_t i = b->first_seen; i != LB_PLAN_NONE; i = en->v.seen[i].next)
        size += 3 * (bulk + LB_RESP_INT_MAX) + en->v.seen[i].event_id.len;
    if (b->profile->decay) /* its four keys, "D", max_age, the rule, the patches */
        size += 8 * (bulk + KEY_MAX) + LB_DECAY_RULE_MAX;
    size += 4 * (bulk + KEY_MAX); /* final standings' two keys, "F", a count */
    /* latest boards: ~newest, the flag and the keys' start, the players */
    size += 3 * (bulk + KEY_MAX) + (size_t)b->nsegments * (bulk + LB_RESP_INT_MAX) +
            en->values_len + 2 * bulk * en->nplayers;
    for (size_t i = 0; en->latest && i < en->nplayers; i++)
        size += en->players[i].id.len;
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key) {
        size += 8 * bulk + 2 * (bulk + LB_RESP_INT_MAX); /* a transaction's headers; "F" */
        size += 2 * (bulk + KEY_MAX + sizeof(LB_STAMPS_SUFFIX)) + bulk + LB_WINDOW_NAME_MAX +
                (2 + 2 * (size_t)b->nsegments) * (bulk + LB_RESP_INT_MAX);
        const struct lb_decay_config *decay = b->profile->decay;
        size_t per_entry = 4 * (bulk + STAMP_MAX);
        if (decay && en->v.keys[k].window == decay->window) { /* its section too */
            size += 2 * LB_PATCH_MEMBER_MAX + (2 + (size_t)b->nsegments) * (bulk + LB_RESP_INT_MAX);
            per_entry += bulk + LB_DECAY_WIDTH * ((size_t)decay->max_age + 1);
        }
        for (uint32_t e = en->v.keys[k].first_entry; e != LB_PLAN_NONE;
             e = en->v.entries[e].next_entry)
            size += per_entry + 2 * en->v.entries[e].player.len;
    }
    return size;
}

static char *put_window_key(const struct encoder *en, char *p, const struct lb_plan_board *b,
                            const struct lb_plan_key *key, int stamps)
{
    char name[KEY_MAX + sizeof(LB_STAMPS_SUFFIX)];
    size_t len = lb_window_key(en->options->prefix, b->id, &b->profile->windows[key->window],
                               key->window_id, key->custom_value, name, KEY_MAX);
    if (stamps) {
        memcpy(name + len, LB_STAMPS_SUFFIX, sizeof(LB_STAMPS_SUFFIX) - 1);
        len += sizeof(LB_STAMPS_SUFFIX) - 1;
    }
    return lb_resp_bulk(p, name, len);
}

/* A latest entry's stamp: "<ts, 15 digits>:<offset, 20 digits>", so that
 * strings compare as the pairs do. Returns its length (36). */
static size_t put_stamp(char *out, const struct lb_plan_entry *e)
{
    int n = snprintf(out, STAMP_MAX, "%015lld:%020lld", (long long)e->ts, (long long)e->order);
    return n > 0 ? (size_t)n : 0;
}

static char *put_entry(const struct encoder *en, char *p, uint32_t index,
                       enum lb_aggregation aggregation)
{
    const struct lb_plan_entry *e = &en->v.entries[index];
    int plain = goes_plain(en, index);
    if (!plain && !(e->flags & LB_ENTRY_RETRACTED))
        p = lb_resp_bulk(p, "v", 1); /* latest: a value with a stamp of its own */
    else if (!plain)
        p = (e->flags & LB_ENTRY_VALUE) ? lb_resp_bulk(p, "rv", 2) : lb_resp_bulk(p, "r", 1);
    p = lb_resp_bulk_int(p, e->value);
    if (aggregation == LB_AGG_LATEST && !plain) {
        char stamp[STAMP_MAX];
        p = lb_resp_bulk(p, stamp, put_stamp(stamp, e));
    } else if (aggregation == LB_AGG_SUM) {
        p = lb_resp_bulk_int(p, e->ts);
    }
    return lb_resp_bulk(p, e->player.ptr, e->player.len);
}

/* Groups a key's entries by segment number, plain before special, into
 * en->order (a counting sort, stable), and counts them in en->counts:
 * plain ones of segment s at [s], special ones at [nseg + 1 + s]. Returns 0
 * or -1 (memory). */
static int group_entries(struct encoder *en, const struct lb_plan_key *key, uint32_t nseg)
{
    size_t groups = 2 * ((size_t)nseg + 1);
    if (grow((void **)&en->counts, &en->counts_cap, 2 * groups, sizeof(uint32_t)) != 0 ||
        grow((void **)&en->order, &en->order_cap, key->nentries, sizeof(uint32_t)) != 0)
        return -1;
    uint32_t *count = en->counts, *cursor = en->counts + groups;
    memset(count, 0, groups * sizeof(uint32_t));
    for (uint32_t e = key->first_entry; e != LB_PLAN_NONE; e = en->v.entries[e].next_entry) {
        const struct lb_plan_entry *entry = &en->v.entries[e];
        count[(goes_plain(en, e) ? 0 : nseg + 1) + en->v.segments[entry->segment].number]++;
    }
    uint32_t sum = 0;
    for (size_t g = 0; g < groups; g++) {
        cursor[g] = sum;
        sum += count[g];
    }
    for (uint32_t e = key->first_entry; e != LB_PLAN_NONE; e = en->v.entries[e].next_entry) {
        const struct lb_plan_entry *entry = &en->v.entries[e];
        en->order[cursor[(goes_plain(en, e) ? 0 : nseg + 1) +
                         en->v.segments[entry->segment].number]++] = e;
    }
    return 0;
}

struct stamped {
    int64_t stamp;
    uint32_t seen;
};

/* Newest first; the plan's order among equal stamps. */
static int newer_first(const void *a, const void *b)
{
    const struct stamped *x = a, *y = b;
    if (x->stamp != y->stamp)
        return x->stamp > y->stamp ? -1 : 1;
    return x->seen < y->seen ? -1 : x->seen > y->seen;
}

/* Groups a board's event ids by segment number into en->stamped, each
 * segment's newest first (the script finds by bisection those the window
 * has passed: it does not record them), and counts them in
 * en->counts[number]. Returns 0 or -1 (memory). */
static int count_seen(struct encoder *en, const struct lb_plan_board *b, uint32_t nseg)
{
    if (grow((void **)&en->counts, &en->counts_cap, 2 * ((size_t)nseg + 1), sizeof(uint32_t)) !=
            0 ||
        grow((void **)&en->stamped, &en->stamped_cap, b->nseen, sizeof(struct stamped)) != 0)
        return -1;
    uint32_t *count = en->counts, *cursor = en->counts + nseg + 1, sum = 0;
    memset(count, 0, ((size_t)nseg + 1) * sizeof(uint32_t));
    for (uint32_t i = b->first_seen; i != LB_PLAN_NONE; i = en->v.seen[i].next)
        count[en->v.segments[en->v.seen[i].segment].number]++;
    for (uint32_t s = 0; s <= nseg; s++) {
        cursor[s] = sum;
        sum += count[s];
    }
    for (uint32_t i = b->first_seen; i != LB_PLAN_NONE; i = en->v.seen[i].next) {
        const struct lb_plan_seen *seen = &en->v.seen[i];
        en->stamped[cursor[en->v.segments[seen->segment].number]++] =
            (struct stamped){seen->stamp, i};
    }
    for (uint32_t s = 0, at = 0; s <= nseg; at += count[s++])
        if (count[s] > 1)
            qsort(en->stamped + at, count[s], sizeof(struct stamped), newer_first);
    return 0;
}

/* A decaying board's section (apply.lua): "D", max_age, the rule (a
 * change of it starts a rebuild), the number of patches, then per patch key
 * its member in ~patches, its entries' count per segment and the entries,
 * grouped by segment: the taxed composites at ages 0..max_age packed in one
 * argument (LB_DECAY_WIDTH zero-padded digits each: Redis parses one
 * argument, the script cuts out the one it needs), the player. NULL when a
 * score cannot be taxed (the load check rules that out) or memory runs out. */
static char *put_decay(struct encoder *en, char *p, const struct lb_plan_board *b,
                       uint32_t npatches)
{
    const struct lb_decay_config *decay = b->profile->decay;
    unsigned bits = b->profile->scoring.tie_bits;
    uint32_t nseg = b->nsegments;
    char text[LB_DECAY_RULE_MAX];
    size_t tlen = lb_decay_rule(decay, text, sizeof(text));
    p = lb_resp_bulk(p, "D", 1);
    p = lb_resp_bulk_int(p, decay->max_age);
    p = lb_resp_bulk(p, decay->npatches ? "l" : "v", 1);
    p = lb_resp_bulk(p, text, tlen);
    p = lb_resp_bulk_int(p, npatches);
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key) {
        const struct lb_plan_key *key = &en->v.keys[k];
        if (key->window != decay->window)
            continue;
        char member[LB_PATCH_MEMBER_MAX];
        int64_t score;
        size_t len = lb_decay_patch_member(decay, key->custom_value.ptr, key->custom_value.len,
                                           member, sizeof(member), &score);
        if (!len || group_entries(en, key, nseg) != 0)
            return NULL;
        p = lb_resp_bulk(p, member, len);
        p = lb_resp_bulk_int(p, score);
        for (uint32_t s = 1; s <= nseg; s++)
            p = lb_resp_bulk_int(p, en->counts[s]);
        for (uint32_t i = 0; i < key->nentries; i++) {
            const struct lb_plan_entry *e = &en->v.entries[en->order[i]];
            int64_t raw = e->value >> bits; /* arithmetic: the floor, for negative ones too */
            int64_t tie = e->value - raw * (INT64_C(1) << bits);
            char packed[LB_DECAY_WIDTH * (LB_DECAY_MAX_AGE + 1) + 1];
            for (int age = 0; age <= decay->max_age; age++) {
                int64_t taxed;
                if (lb_decay_taxed(&decay->rule, raw, age, &taxed) != 0)
                    return NULL;
                /* >= 0 (score_min >= 0) and < 2^53: 16 digits */
                snprintf(packed + LB_DECAY_WIDTH * age, LB_DECAY_WIDTH + 1, "%016lld",
                         (long long)(taxed * (INT64_C(1) << bits) + tie));
            }
            p = lb_resp_bulk(p, packed, LB_DECAY_WIDTH * ((size_t)decay->max_age + 1));
            p = lb_resp_bulk(p, e->player.ptr, e->player.len);
        }
    }
    return p;
}

/* Orders a latest board's entries by segment, player and window. */
static const struct lb_plan_entry *sort_entries;
static int by_player(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->number != y->number)
        return x->number < y->number ? -1 : 1;
    const struct lb_str *p = &sort_entries[x->entry].player, *q = &sort_entries[y->entry].player;
    if (p->len != q->len)
        return p->len < q->len ? -1 : 1;
    int c = memcmp(p->ptr, q->ptr, p->len);
    if (c)
        return c;
    return (x->window > y->window) - (x->window < y->window);
}

static int same_player(const struct encoder *en, const struct item *x, const struct item *y)
{
    const struct lb_str *p = &en->v.entries[x->entry].player, *q = &en->v.entries[y->entry].player;
    return x->number == y->number && p->len == q->len && memcmp(p->ptr, q->ptr, p->len) == 0;
}

/* A calendar window's name ("monthly:2026-05"), in a player's newest. */
#define CALENDAR_KINDS 4 /* alltime, daily, weekly, monthly */
struct name {
    char text[LB_WINDOW_LABEL_MAX + 16];
    size_t len;
};

static int by_name(const void *a, const void *b)
{
    const struct name *x = a, *y = b;
    int c = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Whether entry 'e' holds a value with exactly the stamp (ts, order). */
static int holds(const struct lb_plan_entry *e, int64_t ts, int64_t order)
{
    return (e->flags & LB_ENTRY_VALUE) && e->ts == ts && e->order == order;
}

/* A latest board's players (apply.lua latest()): per segment each player
 * with an entry, its newest stamp among them and the calendar windows whose
 * entry holds it, "<stamp>|<window>|...|" ("" when none holds a value); an
 * entry holding its player's newest, without a retraction, goes plain (its
 * stamp is its player's). Fills en->plain, en->players, en->values and
 * en->per_segment. Returns 0 or -1 (memory). */
static int latest_players(struct encoder *en, const struct lb_plan_board *b)
{
    const struct lb_profile *profile = b->profile;
    size_t n = 0, top = 0;
    en->nplayers = en->values_len = 0;
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key)
        for (uint32_t e = en->v.keys[k].first_entry; e != LB_PLAN_NONE;
             e = en->v.entries[e].next_entry) {
            if (grow((void **)&en->items, &en->items_cap, n + 1, sizeof(*en->items)) != 0)
                return -1;
            en->items[n++] = (struct item){en->v.segments[en->v.entries[e].segment].number, e, k,
                                           en->v.keys[k].window};
            top = e + 1 > top ? e + 1 : top;
        }
    if (grow((void **)&en->plain, &en->plain_cap, top, 1) != 0 ||
        grow((void **)&en->per_segment, &en->per_segment_cap, (size_t)b->nsegments + 1,
             sizeof(uint32_t)) != 0)
        return -1;
    memset(en->per_segment, 0, ((size_t)b->nsegments + 1) * sizeof(uint32_t));
    sort_entries = en->v.entries;
    qsort(en->items, n, sizeof(*en->items), by_player);
    for (size_t i = 0, j; i < n; i = j) {
        const struct lb_plan_entry *first = &en->v.entries[en->items[i].entry];
        int64_t ts = INT64_MIN, order = INT64_MIN;
        int valued = 0;
        for (j = i; j < n && same_player(en, &en->items[i], &en->items[j]); j++) {
            const struct lb_plan_entry *e = &en->v.entries[en->items[j].entry];
            if ((e->flags & LB_ENTRY_VALUE) &&
                (!valued || e->ts > ts || (e->ts == ts && e->order > order))) {
                ts = e->ts;
                order = e->order;
                valued = 1;
            }
        }
        /* its value: the stamp, then each calendar window holding it */
        size_t need = en->values_len + STAMP_MAX + 1;
        need += CALENDAR_KINDS * (sizeof(((struct name *)0)->text) + 1);
        if (grow((void **)&en->values, &en->values_cap, need, 1) != 0 ||
            grow((void **)&en->players, &en->players_cap, en->nplayers + 1, sizeof(*en->players)) !=
                0)
            return -1;
        size_t at = en->values_len, len = 0;
        if (valued) {
            struct lb_plan_entry stamp = {.ts = ts, .order = order};
            len = put_stamp(en->values + at, &stamp);
            en->values[at + len++] = '|';
        }
        /* the calendar windows holding it (one per kind at most), their
         * names in byte order as the script writes them too */
        struct name names[CALENDAR_KINDS];
        size_t nnames = 0;
        for (size_t x = i; x < j; x++) {
            const struct item *it = &en->items[x];
            const struct lb_plan_entry *e = &en->v.entries[it->entry];
            const struct lb_plan_key *key = &en->v.keys[it->key];
            const struct lb_window_config *w = &profile->windows[key->window];
            int newest = valued && holds(e, ts, order);
            en->plain[it->entry] = (uint8_t)(newest && is_plain(e));
            if (newest && w->kind != LB_WINDOW_CUSTOM && nnames < CALENDAR_KINDS) {
                struct name *nm = &names[nnames++];
                nm->len = lb_window_name(w, key->window_id, key->custom_value, nm->text,
                                         sizeof(nm->text));
            }
        }
        qsort(names, nnames, sizeof(*names), by_name);
        for (size_t x = 0; x < nnames; x++) {
            memcpy(en->values + at + len, names[x].text, names[x].len);
            en->values[at + len + names[x].len] = '|';
            len += names[x].len + 1;
        }
        en->players[en->nplayers++] = (struct player){
            en->items[i].number, first->player, (uint32_t)i, (uint32_t)(j - i), at, len};
        en->values_len += len;
        en->per_segment[en->items[i].number]++;
    }
    return 0;
}

static int has_alltime(const struct lb_profile *profile)
{
    for (size_t i = 0; i < profile->nwindows; i++)
        if (profile->windows[i].kind == LB_WINDOW_ALLTIME)
            return 1;
    return 0;
}

/* Whether a board's batch goes as a plain transaction (see apply.h). */
static int is_transaction(const struct lb_profile *profile)
{
    return profile->aggregation == LB_AGG_BEST && profile->reject_retractions &&
           !profile->dedupe_window_ms && !profile->decay && !lb_profile_has_results(profile);
}

/* A best board that takes no retractions: MULTI, TYPE of the fence, per
 * window key ZADD GT|LT of its entries and its expiry, ZADD GT of the
 * markers, EXEC. Every entry is plain (the planner refused retractions). */
static int encode_transaction(struct encoder *en, const struct lb_plan_board *b,
                              struct lb_apply_request *req)
{
    const struct lb_profile *profile = b->profile;
    struct lb_buf *out = &en->batch->bytes;
    const char *gtlt = profile->scoring.order == LB_ORDER_DESC ? "GT" : "LT";
    char name[KEY_MAX];

    if (lb_buf_reserve(out, board_size_bound(en, b)) != 0)
        return -1;
    char *p = out->data + out->len;
    p = lb_resp_bulk(lb_resp_header(p, '*', 1), "MULTI", 5);
    p = lb_resp_bulk(lb_resp_header(p, '*', 2), "TYPE", 4);
    p = lb_resp_bulk(p, name, lb_fence_key(en->options->prefix, b->id, name, KEY_MAX));
    uint32_t ncommands = 2;
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key) {
        const struct lb_plan_key *key = &en->v.keys[k];
        size_t len = lb_window_key(en->options->prefix, b->id, &profile->windows[key->window],
                                   key->window_id, key->custom_value, name, KEY_MAX);
        p = lb_resp_header(p, '*', 3 + 2 * (uint64_t)key->nentries);
        p = lb_resp_bulk(p, "ZADD", 4);
        p = lb_resp_bulk(p, name, len);
        p = lb_resp_bulk(p, gtlt, 2);
        for (uint32_t e = key->first_entry; e != LB_PLAN_NONE; e = en->v.entries[e].next_entry) {
            p = lb_resp_bulk_int(p, en->v.entries[e].value);
            p = lb_resp_bulk(p, en->v.entries[e].player.ptr, en->v.entries[e].player.len);
        }
        ncommands++;
        if (key->expire == LB_EXPIRE_NONE)
            continue;
        p = lb_resp_header(p, '*', 3);
        p = key->expire == LB_EXPIRE_AT ? lb_resp_bulk(p, "PEXPIREAT", 9)
                                        : lb_resp_bulk(p, "PEXPIRE", 7);
        p = lb_resp_bulk(p, name, len);
        p = lb_resp_bulk_int(p, key->expire_ms);
        ncommands++;
    }
    p = lb_resp_header(p, '*', 3 + 2 * (uint64_t)b->nsegments);
    p = lb_resp_bulk(p, "ZADD", 4);
    p = lb_resp_bulk(p, name, lb_marker_zset_key(en->options->prefix, b->id, name, KEY_MAX));
    p = lb_resp_bulk(p, "GT", 2);
    for (uint32_t s = b->first_segment; s != LB_PLAN_NONE; s = en->v.segments[s].next) {
        const struct lb_plan_segment *seg = &en->v.segments[s];
        char field[LB_MARKER_FIELD_MAX];
        p = lb_resp_bulk_int(p, seg->last);
        p = lb_resp_bulk(p, field,
                         lb_marker_field(seg->topic, seg->partition, field, sizeof(field)));
    }
    p = lb_resp_bulk(lb_resp_header(p, '*', 1), "EXEC", 4);
    out->len = (size_t)(p - out->data);
    req->len = out->len - req->offset;
    req->is_txn = 1;
    req->ncommands = ncommands;
    return 0;
}

static int encode_board(struct encoder *en, const struct lb_plan_board *b,
                        struct lb_apply_request *req)
{
    const struct lb_profile *profile = b->profile;
    struct lb_buf *out = &en->batch->bytes;

    *req = (struct lb_apply_request){
        .slot = b->slot, .offset = out->len, .board = b->id, .ncommands = 1};
    if (!profile || b->first_key == LB_PLAN_NONE)
        return 0; /* every event of the board was rejected or late: nothing to send */
    if (is_transaction(profile))
        return encode_transaction(en, b, req);

    enum lb_aggregation aggregation = profile->aggregation;
    size_t width = plain_width(aggregation), swidth = special_width(aggregation);
    uint32_t nseg = b->nsegments, nkeys = 0;
    int latest = aggregation == LB_AGG_LATEST;
    en->latest = latest;
    en->nplayers = en->values_len = 0;
    if (latest && latest_players(en, b) != 0)
        return -1;
    size_t nargs = 12 + 4 * (size_t)nseg + 3 * (size_t)b->nseen;
    if (latest)
        nargs += nseg + 2 * en->nplayers;
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key) {
        nkeys++;
        nargs += 2 + (size_t)latest + 2 * (size_t)nseg;
        for (uint32_t e = en->v.keys[k].first_entry; e != LB_PLAN_NONE;
             e = en->v.entries[e].next_entry)
            nargs += goes_plain(en, e) ? width : swidth;
    }
    const struct lb_decay_config *decay = profile->decay;
    uint32_t npatches = 0;
    if (decay) {
        nargs += 5;
        for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key)
            if (en->v.keys[k].window == decay->window) {
                npatches++;
                nargs += 2 + nseg + 2 * (size_t)en->v.keys[k].nentries;
            }
    }
    /* final standings: ~open and ~final, the keys of windows that close */
    int results = lb_profile_has_results(profile);
    uint32_t closing = 0;
    if (results) {
        for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key)
            closing += profile->windows[en->v.keys[k].window].results_top >= 0;
        nargs += 2 + 2 * (size_t)closing;
    }
    uint32_t numkeys = 4 + (latest ? 2 * nkeys + 1 : nkeys) + (decay ? 4 : 0) + (results ? 2 : 0);
    if (lb_buf_reserve(out, board_size_bound(en, b)) != 0 ||
        grow((void **)&en->segs, &en->segs_cap, (size_t)nseg + 1, sizeof(*en->segs)) != 0)
        return -1;
    for (uint32_t s = b->first_segment; s != LB_PLAN_NONE; s = en->v.segments[s].next)
        en->segs[en->v.segments[s].number] = &en->v.segments[s];

    char *p = out->data + out->len;
    p = lb_resp_header(p, '*', 3 + numkeys + nargs);
    p = lb_resp_bulk(p, "EVALSHA", 7);
    p = lb_resp_bulk(p, lb_apply_script_sha(), 40);
    p = lb_resp_bulk_int(p, numkeys);
    const char *prefix = en->options->prefix;
    char name[KEY_MAX];
    p = lb_resp_bulk(p, name, lb_marker_key(prefix, b->id, name, KEY_MAX));
    p = lb_resp_bulk(p, name, lb_marker_zset_key(prefix, b->id, name, KEY_MAX));
    p = lb_resp_bulk(p, name, lb_fence_key(prefix, b->id, name, KEY_MAX));
    p = lb_resp_bulk(p, name, lb_dedupe_key(prefix, b->id, name, KEY_MAX));
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key)
        p = put_window_key(en, p, b, &en->v.keys[k], 0);
    if (latest) {
        for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key)
            p = put_window_key(en, p, b, &en->v.keys[k], 1);
        p = lb_resp_bulk(p, name, lb_board_key(prefix, b->id, LB_NEWEST_KEY, name, KEY_MAX));
    }
    if (decay) {
        const char *rest[] = {LB_PATCHES_KEY, LB_DECAY_STATE_KEY, decay->key, LB_DECAY_SHADOW};
        for (size_t i = 0; i < 4; i++)
            p = lb_resp_bulk(p, name, lb_board_key(prefix, b->id, rest[i], name, KEY_MAX));
    }
    if (results) {
        p = lb_resp_bulk(p, name, lb_board_key(prefix, b->id, LB_OPEN_KEY, name, KEY_MAX));
        p = lb_resp_bulk(p, name, lb_board_key(prefix, b->id, LB_FINAL_KEY, name, KEY_MAX));
    }

    static const char mode[] = {[LB_AGG_BEST] = 'b', [LB_AGG_LATEST] = 'l', [LB_AGG_SUM] = 's'};
    p = lb_resp_bulk_int(p, LB_APPLY_VERSION);
    p = lb_resp_bulk(p, &mode[aggregation], 1);
    p = lb_resp_bulk(p, profile->scoring.order == LB_ORDER_DESC ? "d" : "a", 1);
    p = lb_resp_bulk_int(p, profile->scoring.tie_bits);
    p = lb_resp_bulk(p, lb_tie_grows_with_time(&profile->scoring) ? "1" : "0", 1);
    p = lb_resp_bulk_int(p, profile->sum_min);
    p = lb_resp_bulk_int(p, profile->sum_max);
    p = lb_resp_bulk_int(p, nkeys);
    p = lb_resp_bulk_int(p, nseg);
    /* whole seconds, rounded up: the set keeps at least the window */
    p = lb_resp_bulk_int(p, lb_apply_dedupe_seconds(profile));
    /* latest boards: whether the request may start ~newest (not when it
     * keeps per-window stamps only, nor on a board without an all-time
     * window: ~newest never expires), and where the board's keys start */
    const char *stamps = !latest                                               ? "-"
                         : en->options->window_stamps || !has_alltime(profile) ? "w"
                                                                               : "b";
    p = lb_resp_bulk(p, stamps, 1);
    p = lb_resp_bulk(p, name, latest ? lb_board_key(prefix, b->id, "", name, KEY_MAX) : 0);
    if (count_seen(en, b, nseg) != 0)
        return -1;
    for (uint32_t number = 1; number <= nseg; number++) {
        const struct lb_plan_segment *seg = en->segs[number];
        char field[LB_MARKER_FIELD_MAX];
        p = lb_resp_bulk(p, field,
                         lb_marker_field(seg->topic, seg->partition, field, sizeof(field)));
        p = lb_resp_bulk_int(p, seg->first);
        p = lb_resp_bulk_int(p, seg->last);
        p = lb_resp_bulk_int(p, en->counts[number]);
    }
    /* the ids as (stamp, id) pairs, each segment's in one run (for ZADD as
     * they are), then their offsets in the same order */
    for (uint32_t i = 0; i < b->nseen; i++) {
        const struct lb_plan_seen *seen = &en->v.seen[en->stamped[i].seen];
        p = lb_resp_bulk_int(p, seen->stamp);
        p = lb_resp_bulk(p, seen->event_id.ptr, seen->event_id.len);
    }
    for (uint32_t i = 0; i < b->nseen; i++)
        p = lb_resp_bulk_int(p, en->v.seen[en->stamped[i].seen].offset);
    if (latest) { /* the players, ordered by segment number */
        size_t i = 0;
        for (uint32_t number = 1; number <= nseg; number++) {
            p = lb_resp_bulk_int(p, en->per_segment[number]);
            for (; i < en->nplayers && en->players[i].number == number; i++) {
                const struct player *pl = &en->players[i];
                p = lb_resp_bulk(p, pl->id.ptr, pl->id.len);
                p = lb_resp_bulk(p, en->values + pl->value, pl->value_len);
            }
        }
    }
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key) {
        const struct lb_plan_key *key = &en->v.keys[k];
        if (group_entries(en, key, nseg) != 0)
            return -1;
        char kind = key->expire;
        p = lb_resp_bulk(p, &kind, 1);
        p = lb_resp_bulk_int(p, key->expire_ms);
        if (latest) { /* a calendar window's name ("" for a custom one) */
            const struct lb_window_config *w = &profile->windows[key->window];
            char label[LB_WINDOW_NAME_MAX];
            size_t len =
                w->kind == LB_WINDOW_CUSTOM
                    ? 0
                    : lb_window_name(w, key->window_id, key->custom_value, label, sizeof(label));
            p = lb_resp_bulk(p, label, len);
        }
        for (uint32_t s = 1; s <= nseg; s++)
            p = lb_resp_bulk_int(p, en->counts[s]);
        for (uint32_t s = 1; s <= nseg; s++)
            p = lb_resp_bulk_int(p, en->counts[nseg + 1 + s]);
        for (uint32_t i = 0; i < key->nentries; i++)
            p = put_entry(en, p, en->order[i], aggregation);
    }
    if (decay && !(p = put_decay(en, p, b, npatches)))
        return -1;
    if (results) { /* "F", then each closing key's place and when it closes */
        p = lb_resp_bulk(p, "F", 1);
        p = lb_resp_bulk_int(p, closing);
        uint32_t place = 0;
        for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = en->v.keys[k].next_key) {
            const struct lb_window_config *w = &profile->windows[en->v.keys[k].window];
            place++;
            if (w->results_top < 0)
                continue;
            struct lb_window_span span;
            lb_window_span_of(w->kind, en->v.keys[k].window_id, &span);
            p = lb_resp_bulk_int(p, place);
            p = lb_resp_bulk_int(p, span.end_ms + w->results_grace_ms);
        }
    }
    out->len = (size_t)(p - out->data);
    req->len = out->len - req->offset;
    return 0;
}

int lb_apply_encode(struct lb_apply_batch *batch, const struct lb_plan *plan,
                    const struct lb_apply_options *options)
{
    struct encoder en = {.batch = batch, .options = options};
    int rc = 0;
    lb_plan_view(plan, &en.v);
    batch->bytes.len = 0;
    batch->count = 0;
    if (grow((void **)&batch->requests, &batch->cap, en.v.nboards ? en.v.nboards : 1,
             sizeof(*batch->requests)) != 0)
        return -1;
    for (uint32_t i = 0; i < en.v.nboards && rc == 0; i++)
        rc = encode_board(&en, &en.v.boards[i], &batch->requests[i]);
    batch->count = rc == 0 ? en.v.nboards : 0;
    free(en.segs);
    free(en.counts);
    free(en.order);
    free(en.stamped);
    free(en.plain);
    free(en.items);
    free(en.players);
    free(en.values);
    free(en.per_segment);
    return rc;
}

void lb_apply_batch_free(struct lb_apply_batch *batch)
{
    lb_buf_free(&batch->bytes);
    free(batch->requests);
    *batch = (struct lb_apply_batch){0};
}

/* ---- replies ---------------------------------------------------------------------- */

static const char *word(const redisReply *reply, size_t i)
{
    if (!reply || reply->type != REDIS_REPLY_ARRAY || i >= reply->elements ||
        reply->element[i]->type != REDIS_REPLY_STRING)
        return NULL;
    return reply->element[i]->str;
}

enum lb_apply_status lb_apply_parse(const redisReply *reply, struct lb_apply_answer *a)
{
    static const struct {
        const char *word;
        enum lb_apply_status status;
    } words[] = {{"ok", LB_APPLY_OK},
                 {"partial", LB_APPLY_PARTIAL},
                 {"duplicate", LB_APPLY_DUPLICATE},
                 {"overflow", LB_APPLY_OVERFLOW},
                 {"wrongtype", LB_APPLY_WRONGTYPE},
                 {"badarg", LB_APPLY_BADARG},
                 {"fenced", LB_APPLY_FENCED},
                 {"noperm", LB_APPLY_NOPERM},
                 {"protocol", LB_APPLY_PROTOCOL},
                 {"moving", LB_APPLY_MOVING}};
    const char *status = word(reply, 0);
    *a = (struct lb_apply_answer){.status = LB_APPLY_UNKNOWN, .reply = reply};
    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2 &&
        reply->element[0]->type == REDIS_REPLY_STATUS) {
        /* a transaction's EXEC: the fence's TYPE first (replay's is a
         * string; a hash there is a latest board's mark, which a board
         * whose profile changed may keep: not a fence, as for the script);
         * an error inside it (the cluster client fails such a request
         * before anyone parses it) is the wrong type of a key, or not ours */
        const char *fence = reply->element[0]->str;
        a->status = strcmp(fence, "none") != 0 && strcmp(fence, "hash") != 0 ? LB_APPLY_FENCED
                                                                             : LB_APPLY_OK;
        a->key = "";
        for (size_t i = 1; i < reply->elements; i++)
            if (reply->element[i]->type == REDIS_REPLY_ERROR)
                a->status = strncmp(reply->element[i]->str, "WRONGTYPE ", 10) == 0
                                ? LB_APPLY_WRONGTYPE
                                : LB_APPLY_UNKNOWN;
        return a->status;
    }
    for (size_t i = 0; status && i < sizeof(words) / sizeof(words[0]); i++)
        if (strcmp(status, words[i].word) == 0)
            a->status = words[i].status;
    switch (a->status) {
    case LB_APPLY_OK:
        /* {"ok", applied, skipped[, "rebuilding"][, "opened"][, "late",
         * window, its close offsets, ...]}: Lua numbers arrive as integers */
        a->rebuilding =
            reply->elements >= 4 && word(reply, 3) && strcmp(word(reply, 3), "rebuilding") == 0;
        a->late_at = 3 + (size_t)a->rebuilding;
        a->opened = reply->elements > a->late_at && word(reply, a->late_at) &&
                    strcmp(word(reply, a->late_at), "opened") == 0;
        a->late_at += (size_t)a->opened;
        if (reply->elements > a->late_at + 1 && word(reply, a->late_at) &&
            strcmp(word(reply, a->late_at), "late") == 0) {
            a->late = (reply->elements - ++a->late_at) / 2;
            for (size_t i = a->late_at; i < reply->elements; i++)
                if (!word(reply, i))
                    a->status = LB_APPLY_UNKNOWN;
        }
        if (reply->elements != a->late_at + 2 * a->late ||
            reply->element[1]->type != REDIS_REPLY_INTEGER ||
            reply->element[2]->type != REDIS_REPLY_INTEGER)
            a->status = LB_APPLY_UNKNOWN;
        else {
            a->applied = reply->element[1]->integer;
            a->skipped = reply->element[2]->integer;
        }
        break;
    case LB_APPLY_PARTIAL:
    case LB_APPLY_OVERFLOW:
    case LB_APPLY_DUPLICATE: {
        /* pairs, or a duplicate's triples, of strings */
        size_t width = a->status == LB_APPLY_DUPLICATE ? 3 : 2;
        a->npairs = (reply->elements - 1) / width;
        for (size_t i = 1; i < reply->elements; i++)
            if (!word(reply, i))
                a->status = LB_APPLY_UNKNOWN;
        if (a->npairs == 0 || (a->status == LB_APPLY_DUPLICATE && (reply->elements - 1) % 3))
            a->status = LB_APPLY_UNKNOWN;
        break;
    }
    case LB_APPLY_WRONGTYPE:
    case LB_APPLY_BADARG:
    case LB_APPLY_FENCED:
    case LB_APPLY_NOPERM:
    case LB_APPLY_PROTOCOL:
    case LB_APPLY_MOVING:
        a->key = word(reply, 1);
        if (!a->key)
            a->status = LB_APPLY_UNKNOWN;
        break;
    case LB_APPLY_UNKNOWN:
        break;
    }
    return a->status;
}

int lb_apply_duplicate(const struct lb_apply_answer *a, size_t i, const char **field,
                       int64_t *offset, int *conflict)
{
    if (a->status != LB_APPLY_DUPLICATE || i >= a->npairs)
        return -1;
    *field = word(a->reply, 1 + 3 * i);
    *offset = strtoll(word(a->reply, 2 + 3 * i), NULL, 10);
    *conflict = strcmp(word(a->reply, 3 + 3 * i), "c") == 0;
    return 0;
}

const char *lb_apply_late_name(const struct lb_apply_answer *a, size_t w)
{
    return a->status == LB_APPLY_OK && w < a->late ? word(a->reply, a->late_at + 2 * w) : NULL;
}

const char *lb_apply_late(const struct lb_apply_answer *a, size_t w, const char *topic,
                          int32_t partition, int64_t *first_late)
{
    const char *name = lb_apply_late_name(a, w);
    if (!name)
        return NULL;
    char field[LB_MARKER_FIELD_MAX];
    size_t n = lb_marker_field(topic, partition, field, sizeof(field));
    const char *offsets = word(a->reply, a->late_at + 2 * w + 1);
    *first_late = offsets && *offsets ? 0 : -1;
    for (const char *p = offsets; p && *p;) {
        if (strncmp(p, field, n) == 0 && p[n] == '=') {
            *first_late = strtoll(p + n + 1, NULL, 10);
            break;
        }
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return name;
}

int lb_apply_pair(const struct lb_apply_answer *a, size_t i, const char **first,
                  const char **second)
{
    if (i >= a->npairs)
        return -1;
    *first = word(a->reply, 1 + 2 * i);
    *second = word(a->reply, 2 + 2 * i);
    return 0;
}
