/* Keys, swap and verify: the staging keys found by SCAN, swapped over the
 * live ones board by board (swap.lua), compared instead with --verify,
 * fences against a busy projector, staging left-overs cleared. */

#include "replay.h"

/* The swap, atomically per board (see the top of the file).
 * KEYS: [1] live marker hash, [2] live marker sorted set, [3] staging
 *       marker hash, [4] staging marker sorted set, [5] the board's fence,
 *       [6] its ~final, [7] its ~newest, then n staging keys, then their n
 *       live names, then live keys to delete.
 * ARGV: [1] n, [2] mode "advance" or "exact", [3] field count f, [4] which
 *       of the staging keys is ~open (1..n, 0: none), [5] the run's fence
 *       value ("<epoch> <lease value>", lease.h), then f triples (marker
 *       field, last offset read from there, last offset replay wrote into
 *       this board's staging copy from there or -1).
 * A staging ~open (final standings: the windows to close) is merged into
 * the live one, less the windows ~final names closed, instead of replacing
 * it; the live ~open is never deleted.
 * A swap that happens also lifts the fence, if replay had set one; a latest
 * board keeping ~newest has the hash there again (apply.h), whether the
 * copy brought both or only windows were rebuilt. Staging
 * keys always come with their marker hash (the apply script writes both):
 * staging keys listed without it, where replay wrote nothing, were deleted
 * by hand, and the script answers {"vanished"}. A swap leaves in place of the staging
 * marker hash one field, "~swapped" (deleted after the round, or expiring
 * in 5 minutes): a resend after a lost reply answers {"gone"} and changes
 * nothing. A staging marker below what replay wrote (the node restarted
 * empty, or failed over without the writes, since) answers {"lost", field,
 * staged, written}: the copy lacks events, nothing is swapped and the run
 * fails. A later run's fence (fence.lua) answers {"taken", its value}:
 * this run lost its lease while it was stalled (between its last renewal
 * and this swap), nothing is swapped and the run stops. */
/* From the build (swap_lua.c, generated from replay/swap.lua). */
extern const char lb_swap_lua[];
/* From the build (fence_lua.c, from replay/fence.lua): a fence set, or
 * lifted from a board not swapped. */
extern const char lb_fence_lua[];

/* ---- keys --------------------------------------------------------------------------- */

struct scan_ctx {
    struct replay *r;
    struct strings *live, *staged;
    int all_staged; /* every staging key, whatever board: the leftovers */
};

/* Whether 'key' ("<prefix>{B}:...") belongs to a selected board that had
 * events; 'prefix' is the live or the staging prefix. */
static int key_in_selection(struct replay *r, const char *key, size_t len, const char *prefix)
{
    struct lb_key_parts kp;
    return lb_key_parse(prefix, key, len, &kp) == 0 &&
           replay_board_selected(&r->sel, kp.board.ptr, kp.board.len);
}

/* Whether 'key' is a staging key of any run: this one's, an earlier one's
 * ("<prefix>~replay:<run>:{B}:..."), or one of a release that staged every
 * run under "<prefix>~replay:{B}:...". */
static int is_staging_key(const struct replay *r, const char *key, size_t len)
{
    size_t pl = strlen(r->config->key_prefix), il = strlen(STAGING_INFIX);
    return len > pl + il && memcmp(key, r->config->key_prefix, pl) == 0 &&
           memcmp(key + pl, STAGING_INFIX, il) == 0 && memchr(key + pl + il, '{', len - pl - il);
}

/* Whether a staging key (is_staging_key) is an earlier run's: its run's
 * epoch, in "<prefix>~replay:r<epoch>-<pid>:{...", is below ours, or it is
 * of an earlier layout (":<hex ms>-<pid>:{" or ":{"; no epoch). A later
 * run's keys are not leftovers even for a run that lost its lease
 * unawares: it took the lease after this one. Before the lease, every
 * staging key counts (the plan of --dry-run). */
static int earlier_run(const struct replay *r, const char *key)
{
    const char *run = key + strlen(r->config->key_prefix) + strlen(STAGING_INFIX);
    char *end;
    long long epoch = *run == 'r' ? strtoll(run + 1, &end, 10) : 0;
    if (*run == 'r' && *end != '-')
        epoch = 0;
    return r->lease.epoch == 0 || epoch < r->lease.epoch;
}

static void collect_key(void *ctx, const redisReply *reply)
{
    struct scan_ctx *s = ctx;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
        return;
    const redisReply *keys = reply->element[1];
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        size_t len = keys->element[i]->len;
        if (s->all_staged && is_staging_key(s->r, k, len)) {
            if (earlier_run(s->r, k))
                replay_strings_add(s->staged, k, len);
        } else if (key_in_selection(s->r, k, len, s->r->staging_prefix)) {
            replay_strings_add(s->staged, k, len);
        } else if (key_in_selection(s->r, k, len, s->r->config->key_prefix)) {
            replay_strings_add(s->live, k, len);
        }
    }
}

/* Every key under the prefix on every master, split into live and staging
 * keys of the selection. */
int replay_scan_keys(struct replay *r, struct strings *live, struct strings *staged, int all_staged)
{
    char pattern[160];
    snprintf(pattern, sizeof(pattern), "%s*", r->config->key_prefix);
    struct scan_ctx ctx = {r, live, staged, all_staged};
    /* one SCAN cursor loop per master, reached through a slot it owns */
    for (uint16_t slot = 0;;) {
        /* One representative slot per master: walk the slot map. */
        const char *owner = lb_cluster_slot_owner(r->engine->cluster, slot);
        uint16_t next = slot;
        while (next < LB_SLOTS - 1 && lb_cluster_slot_owner(r->engine->cluster, next + 1) &&
               owner && strcmp(lb_cluster_slot_owner(r->engine->cluster, next + 1), owner) == 0)
            next++;
        if (owner) {
            int seen_before = 0;
            for (uint16_t s = 0; s < slot && !seen_before; s++) {
                const char *o = lb_cluster_slot_owner(r->engine->cluster, s);
                seen_before = o && strcmp(o, owner) == 0;
            }
            if (!seen_before) {
                char cursor[32] = "0";
                do {
                    const char *a[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
                    size_t al[6];
                    for (int i = 0; i < 6; i++)
                        al[i] = strlen(a[i]);
                    redisReply *reply = replay_redis_call(r, "SCAN", slot, 6, a, al, NULL);
                    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
                        if (reply)
                            fprintf(stderr, "replay: SCAN on %s: unexpected reply\n", owner);
                        if (reply)
                            freeReplyObject(reply);
                        return -1;
                    }
                    snprintf(cursor, sizeof(cursor), "%s", reply->element[0]->str);
                    collect_key(&ctx, reply);
                    freeReplyObject(reply);
                } while (strcmp(cursor, "0") != 0);
            }
        }
        if (next >= LB_SLOTS - 1)
            break;
        slot = next + 1;
    }
    return 0;
}

/* Whether a key's window (its sorted set or its event-time hash) is
 * selected by --window; without --window every key of the board is. */
static int window_selected(const struct replay *r, const struct lb_key_parts *kp)
{
    if (!r->sel.windows.count)
        return 1;
    if (kp->kind != LB_KEY_WINDOW && kp->kind != LB_KEY_STAMPS)
        return 0;
    for (size_t i = 0; i < r->sel.windows.count; i++)
        if (strlen(r->sel.windows.items[i]) == kp->window.len &&
            memcmp(r->sel.windows.items[i], kp->window.ptr, kp->window.len) == 0)
            return 1;
    return 0;
}

/* ---- swap and verify --------------------------------------------------------------- */

/* The keys a scan found, parsed once and ordered by board, so that a board's
 * own keys are found by a binary search: a replay of many boards does not
 * parse every key again for every board. */
struct indexed_key {
    struct lb_key_parts kp;
    const char *key;
};
struct key_index {
    struct indexed_key *keys;
    size_t count;
};

static int board_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static int by_board(const void *a, const void *b)
{
    const struct indexed_key *x = a, *y = b;
    int c = board_cmp(x->kp.board.ptr, x->kp.board.len, y->kp.board.ptr, y->kp.board.len);
    return c ? c : strcmp(x->key, y->key);
}

/* The keys of 'keys' under 'prefix' (those that parse), by board. Returns
 * -1 when out of memory. */
static int key_index_build(struct key_index *ix, const char *prefix, const struct strings *keys)
{
    ix->count = 0;
    ix->keys = malloc((keys->count ? keys->count : 1) * sizeof(*ix->keys));
    if (!ix->keys)
        return -1;
    for (size_t i = 0; i < keys->count; i++) {
        struct indexed_key *k = &ix->keys[ix->count];
        k->key = keys->items[i];
        ix->count += lb_key_parse(prefix, k->key, strlen(k->key), &k->kp) == 0;
    }
    qsort(ix->keys, ix->count, sizeof(*ix->keys), by_board);
    return 0;
}

/* The first of the board's keys in 'ix'; they run up to the first of
 * another board. */
static const struct indexed_key *key_index_first(const struct key_index *ix, const char *board,
                                                 size_t blen)
{
    size_t lo = 0, hi = ix->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct lb_str *b = &ix->keys[mid].kp.board;
        if (board_cmp(b->ptr, b->len, board, blen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return &ix->keys[lo];
}

static int of_board(const struct key_index *ix, const struct indexed_key *k, const char *board,
                    size_t blen)
{
    return k < ix->keys + ix->count && k->kp.board.len == blen &&
           memcmp(k->kp.board.ptr, board, blen) == 0;
}

static void key_index_free(struct key_index *ix)
{
    free(ix->keys);
    ix->keys = NULL;
    ix->count = 0;
}

/* A scan's live and staging keys, indexed: ix[0] live, ix[1] staging.
 * Returns -1 when out of memory (said); key_index_free both either way. */
static int index_scan(const struct replay *r, const struct strings *live,
                      const struct strings *staged, struct key_index ix[2])
{
    if (key_index_build(&ix[0], r->config->key_prefix, live) == 0 &&
        key_index_build(&ix[1], r->staging_prefix, staged) == 0)
        return 0;
    fprintf(stderr, "replay: out of memory indexing %zu keys by board\n",
            live->count + staged->count);
    return -1;
}

/* The keys of one board: staging keys with their live names, and live keys
 * that nothing staged replaces. Marker keys are left out of both lists. */
struct board_keys {
    struct strings staged, targets, extra;
    size_t open; /* staged ~open: its place in 'staged' from 1, 0 none */
};

static void board_keys_of(struct replay *r, const char *board, size_t blen,
                          const struct key_index *live, const struct key_index *staged,
                          struct board_keys *bk)
{
    size_t sp = strlen(r->staging_prefix);
    memset(bk, 0, sizeof(*bk));
    for (const struct indexed_key *k = key_index_first(staged, board, blen);
         of_board(staged, k, board, blen); k++) {
        if (k->kp.kind == LB_KEY_MARKER || k->kp.kind == LB_KEY_FINAL ||
            !window_selected(r, &k->kp))
            continue;
        char target[1024];
        snprintf(target, sizeof(target), "%s%s", r->config->key_prefix, k->key + sp);
        replay_strings_add(&bk->staged, k->key, strlen(k->key));
        if (k->kp.kind == LB_KEY_OPEN)
            bk->open = bk->staged.count;
        replay_strings_add(&bk->targets, target, strlen(target));
    }
    for (const struct indexed_key *k = key_index_first(live, board, blen);
         of_board(live, k, board, blen); k++) {
        if (k->kp.kind == LB_KEY_MARKER || k->kp.kind == LB_KEY_FINAL ||
            !window_selected(r, &k->kp))
            continue;
        if (k->kp.kind == LB_KEY_OPEN)
            continue; /* merged with the staging copy's, never dropped (swap.lua) */
        int replaced = 0;
        for (size_t j = 0; j < bk->targets.count && !replaced; j++)
            replaced = strcmp(bk->targets.items[j], k->key) == 0;
        if (!replaced)
            replay_strings_add(&bk->extra, k->key, strlen(k->key));
    }
}

static void board_keys_free(struct board_keys *bk)
{
    replay_strings_free(&bk->staged);
    replay_strings_free(&bk->targets);
    replay_strings_free(&bk->extra);
}

/* One swap attempt: 0 done, 1 the live projector is ahead (read more), -1
 * failure. */
static int swap_board(struct replay *r, const char *board, const struct board_keys *bk)
{
    size_t blen = strlen(board);
    struct lb_str id = {board, (uint32_t)blen};
    char markers[4][600], fence[600], final[600], newest[600];
    lb_marker_key(r->config->key_prefix, id, markers[0], sizeof(markers[0]));
    lb_marker_zset_key(r->config->key_prefix, id, markers[1], sizeof(markers[1]));
    lb_marker_key(r->staging_prefix, id, markers[2], sizeof(markers[2]));
    lb_marker_zset_key(r->staging_prefix, id, markers[3], sizeof(markers[3]));
    lb_fence_key(r->config->key_prefix, id, fence, sizeof(fence));
    lb_board_key(r->config->key_prefix, id, LB_FINAL_KEY, final, sizeof(final));
    lb_board_key(r->config->key_prefix, id, LB_NEWEST_KEY, newest, sizeof(newest));
    size_t n = bk->staged.count, nkeys = 7 + 2 * n + bk->extra.count;
    size_t argc = 3 + nkeys + 5 + 3 * r->plan.count;
    const char **argv = calloc(argc, sizeof(char *));
    size_t *argvlen = calloc(argc, sizeof(size_t));
    char(*numbers)[24] = calloc(2 * r->plan.count + 4, sizeof(*numbers));
    char value[200];
    replay_lease_mark(&r->lease, value, sizeof(value));
    if (!argv || !argvlen || !numbers) {
        free(argv);
        free(argvlen);
        free(numbers);
        return -1;
    }
    size_t a = 0;
    snprintf(numbers[0], sizeof(numbers[0]), "%zu", nkeys);
    snprintf(numbers[1], sizeof(numbers[1]), "%zu", n);
    snprintf(numbers[2], sizeof(numbers[2]), "%zu", r->plan.count);
    snprintf(numbers[3], sizeof(numbers[3]), "%zu", bk->open);
    argv[a++] = "EVAL";
    argv[a++] = lb_swap_lua;
    argv[a++] = numbers[0];
    for (size_t i = 0; i < 4; i++)
        argv[a++] = markers[i];
    argv[a++] = fence;
    argv[a++] = final;
    argv[a++] = newest;
    for (size_t i = 0; i < n; i++)
        argv[a++] = bk->staged.items[i];
    for (size_t i = 0; i < n; i++)
        argv[a++] = bk->targets.items[i];
    for (size_t i = 0; i < bk->extra.count; i++)
        argv[a++] = bk->extra.items[i];
    argv[a++] = numbers[1];
    argv[a++] = r->sel.windows.count ? "exact" : "advance";
    argv[a++] = numbers[2];
    argv[a++] = numbers[3];
    argv[a++] = value;
    for (size_t i = 0; i < r->plan.count; i++) {
        char *read = numbers[4 + 2 * i], *wrote = numbers[5 + 2 * i];
        snprintf(read, sizeof(numbers[0]), "%lld", (long long)(r->plan.parts[i].read_to - 1));
        snprintf(wrote, sizeof(numbers[0]), "%lld", (long long)replay_written(r, board, i));
        argv[a++] = r->plan.parts[i].field;
        argv[a++] = read;
        argv[a++] = wrote;
    }
    for (size_t i = 0; i < a; i++)
        argvlen[i] = strlen(argv[i]);
    /* Sent again after a lost reply: the script answers "gone" when its
     * staging copy has already been swapped in (see swap.lua). */
    redisReply *reply = replay_redis_call(
        r, "swapping a board", lb_crc16(board, blen) & (LB_SLOTS - 1), (int)a, argv, argvlen, NULL);
    int rc = -1;
    const char *answer = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
                                 reply->element[0]->type == REDIS_REPLY_STRING
                             ? reply->element[0]->str
                             : NULL;
    if (!reply) {
        /* said by replay_redis_call */
    } else if (answer && strcmp(answer, "vanished") == 0) {
        fprintf(stderr,
                "replay: the staging copy of board '%s' vanished before its swap (deleted by "
                "hand?); run replay again\n",
                board);
    } else if (answer && strcmp(answer, "lost") == 0 && reply->elements == 4) {
        fprintf(stderr,
                "replay: the staging copy of board '%s' lacks events replay wrote into it (%s: "
                "it holds them up to offset %s, replay wrote up to %s): its node restarted "
                "empty or failed over without them; nothing was swapped for it; run replay "
                "again\n",
                board, reply->element[1]->str, reply->element[2]->str, reply->element[3]->str);
    } else if (answer && strcmp(answer, "taken") == 0 && reply->elements == 2) {
        fprintf(stderr,
                "replay: board '%s' is fenced by a later replay run (%s): this run lost its "
                "lease while it was stalled; nothing was swapped for it; stopping\n",
                board, reply->element[1]->str);
    } else if (answer) {
        rc = strcmp(answer, "ok") == 0 || strcmp(answer, "gone") == 0 ? 0 : 1;
    } else {
        fprintf(stderr, "replay: swapping board '%s' failed: %s\n", board,
                reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    }
    if (reply)
        freeReplyObject(reply);
    free(argv);
    free(argvlen);
    free(numbers);
    return rc;
}

static void example(struct verify_report *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void example(struct verify_report *v, const char *fmt, ...)
{
    if (v->shown++ >= 10)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("  ", stdout);
    vprintf(fmt, ap);
    fputs("\n", stdout);
    va_end(ap);
}

struct pair {
    const char *member, *score;
};

static int pair_cmp(const void *a, const void *b)
{
    return strcmp(((const struct pair *)a)->member, ((const struct pair *)b)->member);
}

/* Every (member, score) of a sorted set, or (field, value) of a hash, read
 * in chunks (ZSCAN or HSCAN: no reply is ever the whole key) and sorted by
 * member, the elements a scan returned twice once. The pairs point into the
 * replies kept in 'chunks'. */
struct pairs {
    struct pair *items;
    size_t count, cap;
    redisReply **chunks;
    size_t nchunks;
};

static void pairs_free(struct pairs *p)
{
    for (size_t i = 0; i < p->nchunks; i++)
        freeReplyObject(p->chunks[i]);
    free(p->chunks);
    free(p->items);
    *p = (struct pairs){0};
}

static int read_pairs(struct replay *r, const char *scan, const char *key, struct pairs *out)
{
    char cursor[32] = "0";
    *out = (struct pairs){0};
    do {
        const char *argv[] = {scan, key, cursor, "COUNT", "1000"};
        size_t argvlen[] = {5, strlen(key), strlen(cursor), 5, 4};
        redisReply *reply = replay_redis_call(r, "reading a key", lb_key_slot(key, argvlen[1]), 5,
                                              argv, argvlen, NULL);
        redisReply **chunks =
            reply ? realloc(out->chunks, (out->nchunks + 1) * sizeof(*chunks)) : NULL;
        if (!chunks) {
            if (reply)
                freeReplyObject(reply);
            pairs_free(out);
            return -1;
        }
        out->chunks = chunks;
        out->chunks[out->nchunks++] = reply;
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
            reply->element[1]->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "replay: unexpected %s reply for %s\n", scan, key);
            pairs_free(out);
            return -1;
        }
        const redisReply *items = reply->element[1];
        if (out->count + items->elements / 2 > out->cap) {
            size_t cap = (out->count + items->elements / 2) * 2 + 16;
            struct pair *grown = realloc(out->items, cap * sizeof(*grown));
            if (!grown) {
                pairs_free(out);
                return -1;
            }
            out->items = grown;
            out->cap = cap;
        }
        for (size_t i = 0; i + 1 < items->elements; i += 2)
            out->items[out->count++] =
                (struct pair){items->element[i]->str, items->element[i + 1]->str};
        snprintf(cursor, sizeof(cursor), "%s", reply->element[0]->str);
    } while (strcmp(cursor, "0") != 0);
    if (out->count)
        qsort(out->items, out->count, sizeof(*out->items), pair_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < out->count; i++)
        if (kept == 0 || strcmp(out->items[kept - 1].member, out->items[i].member) != 0)
            out->items[kept++] = out->items[i];
    out->count = kept;
    return 0;
}

/* Leaves out of a live dedupe set the ids the script takes as forgotten
 * (a window made smaller since its last trim): a replay never holds them. */
static void drop_forgotten(struct pairs *set, const struct lb_profile *profile)
{
    int64_t newest = INT64_MIN;
    for (size_t i = 0; i < set->count; i++) {
        int64_t stamp = (int64_t)strtod(set->items[i].score, NULL);
        if (stamp > newest)
            newest = stamp;
    }
    size_t kept = 0;
    for (size_t i = 0; i < set->count; i++)
        if (!lb_apply_seen_forgotten(profile, newest, (int64_t)strtod(set->items[i].score, NULL)))
            set->items[kept++] = set->items[i];
    set->count = kept;
}

/* Compares the staging copy of one key with the live one; 'seen' is the
 * board's profile when the key is its dedupe set. */
static int compare_key(struct replay *r, const char *staged, const char *live,
                       const struct lb_profile *seen, struct verify_report *v)
{
    struct pairs staging, current;
    if (read_pairs(r, "ZSCAN", staged, &staging) != 0) {
        fprintf(stderr, "replay: reading %s failed\n", staged);
        return -1;
    }
    if (read_pairs(r, "ZSCAN", live, &current) != 0) {
        fprintf(stderr, "replay: reading %s failed\n", live);
        pairs_free(&staging);
        return -1;
    }
    if (seen)
        drop_forgotten(&current, seen);
    v->keys_checked++;
    size_t ns = staging.count, nl = current.count, before = v->missing + v->extra + v->different;
    const struct pair *sp = staging.items, *lp = current.items;
    for (size_t i = 0, j = 0; i < ns || j < nl;) {
        int c = i == ns ? 1 : j == nl ? -1 : strcmp(sp[i].member, lp[j].member);
        if (c < 0) {
            v->missing++;
            example(v, "%s: member %s missing (the events make it %s)", live, sp[i].member,
                    sp[i].score);
            i++;
        } else if (c > 0) {
            v->extra++;
            example(v, "%s: member %s should not be there", live, lp[j].member);
            j++;
        } else {
            if (strcmp(sp[i].score, lp[j].score) != 0) {
                v->different++;
                example(v, "%s: member %s has %s, the events make it %s", live, lp[j].member,
                        lp[j].score, sp[i].score);
            }
            i++;
            j++;
        }
    }
    if (v->missing + v->extra + v->different != before)
        v->keys_differing++;
    pairs_free(&staging);
    pairs_free(&current);
    return 0;
}

/* Whether --verify compares a live key: a leaderboard, or the board's
 * dedupe set (which ids count, and when they happened). */
static int compared(const struct replay *r, const char *key)
{
    struct lb_key_parts kp;
    return lb_key_parse(r->config->key_prefix, key, strlen(key), &kp) == 0 &&
           (kp.kind == LB_KEY_WINDOW || kp.kind == LB_KEY_SEEN);
}

/* The profile of the board whose dedupe set 'key' is; NULL for another key. */
static const struct lb_profile *seen_profile(const struct replay *r, const char *key)
{
    struct lb_key_parts kp;
    if (lb_key_parse(r->config->key_prefix, key, strlen(key), &kp) != 0 || kp.kind != LB_KEY_SEEN)
        return NULL;
    const struct lb_profile *profile = lb_config_profile_for(r->config, kp.board.ptr, kp.board.len);
    return profile && profile->dedupe_window_ms ? profile : NULL;
}

/* Whether 'board' decays and its live overall board (its key into
 * 'overall') is being rebuilt: old values until the rebuild's RENAME, which
 * replay's staging copy (rebuilt already) would differ from. */
static int live_rebuilding(struct replay *r, const char *board, char *overall, size_t cap)
{
    size_t blen = strlen(board);
    const struct lb_profile *profile = lb_config_profile_for(r->config, board, blen);
    if (!profile || !profile->decay)
        return 0;
    struct lb_str id = {board, (uint32_t)blen};
    char state[1024];
    lb_board_key(r->config->key_prefix, id, profile->decay->key, overall, cap);
    size_t len = lb_board_key(r->config->key_prefix, id, LB_DECAY_STATE_KEY, state, sizeof(state));
    const char *argv[] = {"HGET", state, "rebuilding"};
    size_t argvlen[] = {4, len, 10};
    redisReply *reply = replay_redis_call(r, "reading a decaying board's state",
                                          lb_key_slot(state, len), 3, argv, argvlen, NULL);
    int rebuilding = reply && reply->type == REDIS_REPLY_STRING;
    if (reply)
        freeReplyObject(reply);
    return rebuilding;
}

/* Reads the live group's committed offsets into 'committed' (per part). */
static int live_committed(struct replay *r, int64_t *committed)
{
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new((int)r->plan.count ? (int)r->plan.count : 1);
    for (size_t i = 0; i < r->plan.count; i++)
        rd_kafka_topic_partition_list_add(list, r->plan.parts[i].topic, r->plan.parts[i].partition);
    rd_kafka_resp_err_t e = rd_kafka_committed(r->meta, list, KAFKA_TIMEOUT_MS);
    for (size_t i = 0; !e && i < r->plan.count; i++)
        committed[i] = list->elems[i].err ? -1 : list->elems[i].offset;
    rd_kafka_topic_partition_list_destroy(list);
    if (e)
        fprintf(stderr, "replay: committed offsets: %s\n", rd_kafka_err2str(e));
    return e ? -1 : 0;
}

/* Whether the live projector applied anything of 'board' past what replay
 * read: 1 ahead, 0 not, -1 failure. Both marker keys count (apply.h). */
static int live_ahead(struct replay *r, const char *board)
{
    struct lb_str id = {board, (uint32_t)strlen(board)};
    char hash[600], zset[600];
    lb_marker_key(r->config->key_prefix, id, hash, sizeof(hash));
    lb_marker_zset_key(r->config->key_prefix, id, zset, sizeof(zset));
    const char *scans[2][2] = {{"HSCAN", hash}, {"ZSCAN", zset}};
    int ahead = 0;
    for (int k = 0; k < 2; k++) {
        struct pairs markers;
        if (read_pairs(r, scans[k][0], scans[k][1], &markers) != 0)
            return -1;
        for (size_t i = 0; i < markers.count; i++)
            for (size_t p = 0; p < r->plan.count; p++)
                if (strcmp(markers.items[i].member, r->plan.parts[p].field) == 0 &&
                    strtod(markers.items[i].score, NULL) > (double)(r->plan.parts[p].read_to - 1))
                    ahead = 1;
        pairs_free(&markers);
    }
    return ahead;
}

/* A copy of the set's ids: the set may grow while the list is in use. */
struct strings replay_boards_of(const struct lb_names *set)
{
    struct strings list = {0};
    for (size_t i = 0; i < set->count; i++)
        replay_strings_add(&list, set->items[i], strlen(set->items[i]));
    return list;
}

/* One command per item of 'items' (boards, or keys), pipelined and retried
 * while Redis recovers: 'make' appends item i's command to 'buf' and says
 * its slot, or answers 1 to leave the item out (-1: out of memory).
 * Returns 0, or -1 when the commands could not all be done ('what' said
 * why); '*sent' the items sent. */
typedef int (*item_command_fn)(struct replay *r, const char *item, size_t len, struct lb_buf *buf,
                               uint16_t *slot);

static int per_item(struct replay *r, const struct strings *items, const char *what,
                    item_command_fn make, size_t *sent)
{
    struct lb_buf buf = {0};
    struct lb_request *reqs = calloc(items->count ? items->count : 1, sizeof(*reqs));
    size_t *at = calloc(items->count ? items->count : 1, sizeof(*at)), n = 0;
    int status = reqs && at ? 0 : -1;
    for (size_t i = 0; status == 0 && i < items->count; i++) {
        at[n] = buf.len;
        int rc = make(r, items->items[i], strlen(items->items[i]), &buf, &reqs[n].slot);
        if (rc < 0)
            status = -1;
        else if (rc == 0)
            reqs[n++].ncommands = 1;
    }
    for (size_t i = 0; status == 0 && i < n; i++) {
        reqs[i].bytes = buf.data + at[i];
        reqs[i].len = (i + 1 < n ? at[i + 1] : buf.len) - at[i];
    }
    if (status == 0 && n && replay_exec_retrying(r, what, reqs, n) != 0)
        status = -1;
    *sent = n;
    free(reqs);
    free(at);
    lb_buf_free(&buf);
    return status;
}

static int delete_key(struct replay *r, const char *key, size_t len, struct lb_buf *buf,
                      uint16_t *slot)
{
    (void)r;
    const char *del[] = {"DEL", key};
    *slot = lb_key_slot(key, len);
    return lb_buf_command(buf, 2, del, NULL) != 0 ? -1 : 0;
}

/* Deletes 'keys', pipelined per node, DELETE_CHUNK at a time; -1 when one
 * could not be deleted (said why). */
static int delete_keys(struct replay *r, const struct strings *keys)
{
    size_t sent;
    for (size_t from = 0; from < keys->count; from += DELETE_CHUNK) {
        size_t n = keys->count - from < DELETE_CHUNK ? keys->count - from : DELETE_CHUNK;
        struct strings chunk = {keys->items + from, n, n};
        if (per_item(r, &chunk, "deleting staging keys", delete_key, &sent) != 0)
            return -1;
    }
    return 0;
}

/* fence.lua's 'step' (set or lift) on a board's fence, appended to 'buf'. */
static int fence_command(struct replay *r, const char *board, size_t blen, const char *step,
                         struct lb_buf *buf, uint16_t *slot)
{
    char fence[600], newest[600], value[200], ttl[24];
    struct lb_str id = {board, (uint32_t)blen};
    size_t flen = lb_fence_key(r->config->key_prefix, id, fence, sizeof(fence));
    lb_board_key(r->config->key_prefix, id, LB_NEWEST_KEY, newest, sizeof(newest));
    replay_lease_mark(&r->lease, value, sizeof(value));
    snprintf(ttl, sizeof(ttl), "%d", FENCE_TTL_MS);
    const char *argv[] = {"EVAL", lb_fence_lua, "2", fence, newest, step, value, ttl};
    *slot = lb_key_slot(fence, flen);
    return lb_buf_command(buf, 8, argv, NULL);
}

static int set_fence(struct replay *r, const char *board, size_t blen, struct lb_buf *buf,
                     uint16_t *slot)
{
    if (lb_names_has(&r->sel.done, board, blen))
        return 1;
    if (fence_command(r, board, blen, "set", buf, slot) != 0)
        return -1;
    replay_names_add(&r->fenced, board, blen);
    return 0;
}

static int lift_fence(struct replay *r, const char *board, size_t blen, struct lb_buf *buf,
                      uint16_t *slot)
{
    if (lb_names_has(&r->sel.done, board, blen) || !lb_names_has(&r->fenced, board, blen))
        return 1;
    return fence_command(r, board, blen, "lift", buf, slot) != 0 ? -1 : 0;
}

/* The "~swapped" mark a swap left in place of the staging markers. */
static int delete_swap_mark(struct replay *r, const char *board, size_t blen, struct lb_buf *buf,
                            uint16_t *slot)
{
    char key[600];
    size_t klen =
        lb_marker_key(r->staging_prefix, (struct lb_str){board, (uint32_t)blen}, key, sizeof(key));
    const char *del[] = {"DEL", key};
    *slot = lb_key_slot(key, klen);
    return lb_buf_command(buf, 2, del, NULL) != 0 ? -1 : 0;
}

/* Sets (or, with 'lift', deletes) the fence of every board in 'boards' that
 * is not swapped yet, in one pipeline per node. A fenced board takes no
 * writes from the live projector (the apply script answers "fenced" and the
 * projector retries it later), so its markers hold still while replay reads
 * up to the end of every partition and swaps it: the swap then cannot find
 * the projector ahead. A board written without a script (apply.h) is
 * written even when fenced, then held the same way: its markers move once
 * more at most per hold, which replay's next round reads. The TTL bounds the
 * pause if replay dies meanwhile. */
int replay_fence_boards(struct replay *r, const struct strings *boards, int lift)
{
    size_t n = 0;
    int status = per_item(r, boards, lift ? "lifting fences" : "setting fences",
                          lift ? lift_fence : set_fence, &n);
    if (status == 0 && n && !lift)
        LB_INFO("replay",
                "fenced %zu board(s): the live projector waits while replay catches up "
                "and swaps them",
                n);
    return status;
}

/* replay_fault_stop before the first fences. Returns 0. */
static int fault_stop(int attempt)
{
    if (attempt == 1)
        replay_fault_stop("LB_FAULT_FENCE_STOP");
    return 0;
}

/* Replaces the live keys of every selected board with the staging copy.
 * Boards first seen while catching up are swapped in a later round. A board
 * the live projector got ahead of is fenced for the next round (except
 * with --window, whose swap needs the projector's markers to match replay's
 * copy exactly, which a fence would not give). */
int replay_swap_all(struct replay *r, size_t *swapped)
{
    int status = 0;
    *swapped = 0;
    if (r->wrote_failed) { /* nothing could check its staging copy */
        fprintf(stderr, "replay: out of memory noting what was written; nothing swapped\n");
        return -1;
    }
    replay_fault_pause("LB_FAULT_SWAP_START_PAUSE_MS");
    for (int attempt = 0; status == 0 && r->sel.done.count < r->sel.seen.count; attempt++) {
        if (attempt == SWAP_ATTEMPTS) {
            fprintf(stderr,
                    "replay: %zu board(s) not swapped after %d attempts: the live projector "
                    "kept moving past replay (with --window the markers must match exactly); "
                    "run replay again when the input is quieter\n",
                    r->sel.seen.count - r->sel.done.count, attempt);
            status = -1;
            break;
        }
        if (attempt > 0) {
            /* the live projector got ahead: stop it on those boards (or,
             * with --window, give it a moment), then read what it has seen */
            struct strings ahead = replay_boards_of(&r->sel.seen);
            if (r->sel.windows.count)
                usleep(200000);
            else if (replay_keep_lease(r) != 0 || fault_stop(attempt) ||
                     replay_fence_boards(r, &ahead, 0) != 0)
                status = -1;
            else
                replay_fault_pause("LB_FAULT_FENCED_PAUSE_MS");
            replay_strings_free(&ahead);
            if (status != 0 || replay_extend_to_latest(r) != 0 || replay_read_until_end(r) != 0) {
                status = -1;
                break;
            }
        }
        if (replay_closed_unknown(r)) { /* a board first met while catching up */
            status = -1;
            break;
        }
        struct strings live = {0}, staged = {0}, boards = replay_boards_of(&r->sel.seen);
        struct strings marked = {0}; /* swapped in this round: their "~swapped" marks */
        struct key_index ix[2] = {{0}};
        if (replay_scan_keys(r, &live, &staged, 0) != 0 || index_scan(r, &live, &staged, ix) != 0)
            status = -1;
        for (size_t b = 0; b < boards.count && status == 0; b++) {
            const char *board = boards.items[b];
            if (lb_names_has(&r->sel.done, board, strlen(board)))
                continue;
            if (replay_keep_lease(r) != 0) {
                status = -1;
                break;
            }
            struct board_keys bk;
            board_keys_of(r, board, strlen(board), &ix[0], &ix[1], &bk);
            int rc = swap_board(r, board, &bk);
            if (rc == 0 && replay_mark_reopened(r, board) != 0)
                status = -1; /* swapped, but not closed again */
            if (rc == 0) {
                replay_names_add(&r->sel.done, board, strlen(board));
                replay_strings_add(&marked, board, strlen(board));
                (*swapped)++;
                replay_journal_swapped(&r->lease, board);
            }
            LB_INFO("replay",
                    "board '%s': %s (%zu of %zu swapped; %zu staging key(s), %zu live key(s) to "
                    "delete)",
                    board,
                    rc == 0  ? "swapped"
                    : rc > 0 ? "live projector ahead"
                             : "failed",
                    r->sel.done.count, r->sel.seen.count, bk.staged.count, bk.extra.count);
            board_keys_free(&bk);
            if (rc < 0)
                status = -1;
            else if (rc == 0)
                replay_fault_pause("LB_FAULT_SWAP_PAUSE_MS");
        }
        size_t deleted;
        per_item(r, &marked, "deleting the swaps' marks", delete_swap_mark, &deleted);
        replay_strings_free(&marked); /* those left expire in 5 minutes */
        key_index_free(&ix[0]);
        key_index_free(&ix[1]);
        replay_strings_free(&boards);
        replay_strings_free(&live);
        replay_strings_free(&staged);
    }
    return status;
}

/* Compares the staging copy with the live keys, then deletes it. */
int replay_verify_all(struct replay *r, struct verify_report *v)
{
    int64_t *committed = calloc(r->plan.count + 1, sizeof(int64_t));
    int status = committed ? 0 : -1;
    for (int attempt = 0; status == 0; attempt++) {
        if (attempt == SWAP_ATTEMPTS) {
            fprintf(stderr, "replay: cannot verify: the live projector has not applied what "
                            "replay read, or keeps moving past it; run --verify again when the "
                            "input is quiet\n");
            status = -1;
            break;
        }
        if (attempt > 0)
            usleep(500000);
        /* the live projector must have applied (committed) what replay read */
        if (live_committed(r, committed) != 0) {
            status = -1;
            break;
        }
        int behind = 0, ahead = 0;
        for (size_t i = 0; i < r->plan.count; i++)
            behind |= committed[i] < r->plan.parts[i].read_to;
        if (behind)
            continue;
        struct strings boards = replay_boards_of(&r->sel.seen);
        for (size_t b = 0; b < boards.count && !ahead; b++) {
            int rc = live_ahead(r, boards.items[b]);
            if (rc < 0)
                status = -1;
            ahead |= rc > 0;
        }
        if (status != 0 || ahead)
            replay_strings_free(&boards);
        if (status != 0)
            break;
        if (ahead) {
            if (replay_extend_to_latest(r) != 0 || replay_read_until_end(r) != 0)
                status = -1;
            continue;
        }
        struct strings live = {0}, staged = {0};
        struct key_index ix[2] = {{0}};
        if (replay_scan_keys(r, &live, &staged, 0) != 0 || index_scan(r, &live, &staged, ix) != 0) {
            key_index_free(&ix[0]);
            key_index_free(&ix[1]);
            replay_strings_free(&boards);
            replay_strings_free(&live);
            replay_strings_free(&staged);
            status = -1;
            break;
        }
        memset(v, 0, sizeof(*v));
        for (size_t b = 0; b < boards.count && status == 0; b++) {
            struct board_keys bk;
            board_keys_of(r, boards.items[b], strlen(boards.items[b]), &ix[0], &ix[1], &bk);
            char overall[1024];
            int rebuilding = live_rebuilding(r, boards.items[b], overall, sizeof(overall));
            if (rebuilding) {
                v->boards_unverified++;
                example(v, "%s: being rebuilt by the projector (a new patch); not compared",
                        overall);
            }
            for (size_t k = 0; k < bk.staged.count && status == 0; k++) {
                const char *t = bk.targets.items[k];
                if (!compared(r, t) || (rebuilding && strcmp(t, overall) == 0))
                    continue; /* bookkeeping of latest boards, not a leaderboard */
                status = compare_key(r, bk.staged.items[k], t, seen_profile(r, t), v);
            }
            for (size_t k = 0; k < bk.extra.count; k++) {
                const char *t = bk.extra.items[k];
                if (!compared(r, t))
                    continue;
                v->keys_checked++;
                v->keys_differing++;
                v->extra++;
                example(v, "%s: key should not exist", t);
            }
            board_keys_free(&bk);
        }
        /* still valid only if the projector did not move meanwhile */
        replay_fault_pause("LB_FAULT_VERIFY_PAUSE_MS");
        int moved = 0;
        for (size_t b = 0; b < boards.count && status == 0 && !moved; b++)
            moved = live_ahead(r, boards.items[b]) != 0;
        replay_strings_free(&boards);
        key_index_free(&ix[0]);
        key_index_free(&ix[1]);
        /* moved: the copy is read on, from where it is, and compared again */
        if (!moved || status != 0)
            delete_keys(r, &staged);
        replay_strings_free(&live);
        replay_strings_free(&staged);
        if (!moved || status != 0)
            break;
        if (replay_extend_to_latest(r) != 0 || replay_read_until_end(r) != 0)
            status = -1;
    }
    free(committed);
    return status;
}

/* Deletes this run's staging keys (what a board that was not swapped
 * left), or with 'all' every run's (at the start: what earlier, interrupted
 * runs left). While we hold the lease no other run writes any: one stalled
 * past its lease stops when it wakes, before its next batch, and what it
 * had on its way went under its own prefix. A run ending deletes only its
 * own: if it stalled past its lease just before, another run's are not
 * leftovers. */
int replay_clear_staging(struct replay *r, size_t *deleted, int all)
{
    struct strings live = {0}, staged = {0};
    int rc = replay_scan_keys(r, &live, &staged, all);
    if (rc == 0 && delete_keys(r, &staged) != 0) {
        /* a marker left without its data would have events skipped, data
         * without its marker events applied twice */
        fprintf(stderr, "replay: staging keys of an earlier run could not all be deleted; "
                        "run replay again once Redis answers\n");
        rc = -1;
    }
    if (deleted)
        *deleted = staged.count;
    replay_strings_free(&live);
    replay_strings_free(&staged);
    return rc;
}
