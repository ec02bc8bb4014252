/* lbread: shows a board's leaderboards as the projector wrote them.
 *
 * For every window key of the board (or the one given with --window) it
 * prints the top N, or the page around one player, with three ranks, the
 * raw score and the achieved-at time decoded from the composite with the
 * board's profile from the projector's configuration:
 *
 *   rank   unique position: 1, 2, 3, 4 (Redis's order; equal composites are
 *          ordered by member name)
 *   comp   competition ranking, "1224": 1 + members strictly better
 *   dense  dense ranking, "1223": 1 + distinct composites strictly better
 *
 * Two members tie when their composites are equal: the same score and, with
 * a tie-break, the same tick. The dense rank of a page below the top needs
 * the distinct composites above it, which lbread counts by reading the
 * members above in chunks: O(rank), fine for an operator's look.
 *
 * Keys are found with SCAN on the board's node: all of a board's keys share
 * its hash tag, so they all live on that node. The projector's bookkeeping
 * keys (applied-offset markers "<prefix>{B}:~applied" and "~offsets", the event-time
 * stamps "<window key>:~ts" of latest boards) are not windows and are left
 * out.
 *
 * A decaying board's overall board (README "Decaying boards") shows each
 * entry's after-tax score in units of the decay's precision, and the raw
 * score and patch it came from: the patch boards are read (ZMSCORE) newest
 * first for the page's players, and the first whose entry, taxed at that
 * patch's age, is the overall composite is the one.
 *
 * A split board (README "Split boards") shows each window's merged top,
 * <prefix>{B}:~top:<window> (at most split.top entries), and --around gives
 * the player's exact rank across the shards as one key of their union
 * would order it: 1 + per other shard the members with a better composite
 * (ZCOUNT) and those with an equal one ordered before it by member bytes
 * (ZRANGE BYSCORE of that composite), + its place in its own shard
 * (ZREVRANK); its competition rank counts the better composites only.
 * Each is O(log n) per shard: no estimate is needed for the long tail.
 *
 * --final shows a closed window's final standings (README "Final
 * standings"): <prefix>{B}:final:<window>, frozen when the window closed,
 * with the instant it closed, its players then and whether the record is
 * published.
 *
 * --window is checked against the board's profile before Redis is asked:
 * a kind that does not exist, or one the board does not have, is a usage
 * error naming the windows the board has.
 *
 * stdout: the leaderboards; stderr: errors. Exit status (README, "Exit
 * codes"): 0 ok, 1 failure, 2 usage, 3 configuration.
 */
#include "usage.h"
#include "apply.h"
#include "cluster.h"
#include "config.h"
#include "decay.h"
#include "log.h"
#include "score.h"
#include "slot.h"
#include "window.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DENSE_CHUNK 10000

struct keys {
    char **names;
    size_t count, cap;
};

static int add_key(struct keys *keys, const char *name, size_t len)
{
    if (keys->count == keys->cap) {
        size_t cap = keys->cap ? keys->cap * 2 : 32;
        char **grown = realloc(keys->names, cap * sizeof(*grown));
        if (!grown)
            return -1;
        keys->names = grown;
        keys->cap = cap;
    }
    keys->names[keys->count] = strndup(name, len);
    if (!keys->names[keys->count])
        return -1;
    keys->count++;
    return 0;
}

/* Newest window first within each kind (labels sort by time). */
static int newest_first(const void *a, const void *b)
{
    return -strcmp(*(char *const *)a, *(char *const *)b);
}

/* Escapes SCAN MATCH glob characters in a board id. */
static void glob_escape(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    for (; *in && o + 2 < cap; in++) {
        if (strchr("*?[]\\", *in))
            out[o++] = '\\';
        out[o++] = *in;
    }
    out[o] = '\0';
}

static redisReply *command(struct lb_cluster *cl, uint16_t slot, int argc, const char **argv)
{
    size_t argvlen[8];
    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    redisReply *reply = lb_cluster_command(cl, slot, argc, argv, argvlen);
    if (!reply) {
        fprintf(stderr, "lbread: %s %s failed: %s\n", argv[0], argc > 1 ? argv[1] : "",
                lb_cluster_error(cl));
        return NULL;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "lbread: %s %s: %s\n", argv[0], argc > 1 ? argv[1] : "", reply->str);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

static int list_keys(struct lb_cluster *cl, const struct lb_config *config, const char *board,
                     uint16_t slot, struct keys *keys, enum lb_key_kind kind)
{
    char escaped[2 * LB_ID_MAX_BYTES + 8], pattern[3 * LB_ID_MAX_BYTES + 64];
    char cursor[32] = "0";
    glob_escape(board, escaped, sizeof(escaped));
    lb_board_key(config->key_prefix, (struct lb_str){escaped, (uint32_t)strlen(escaped)}, "*",
                 pattern, sizeof(pattern));
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        redisReply *reply = command(cl, slot, 6, argv);
        if (!reply)
            return -1;
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
            fprintf(stderr, "lbread: unexpected SCAN reply\n");
            freeReplyObject(reply);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", reply->element[0]->str);
        for (size_t i = 0; i < reply->element[1]->elements; i++) {
            const redisReply *k = reply->element[1]->element[i];
            struct lb_key_parts kp;
            if (lb_key_parse(config->key_prefix, k->str, k->len, &kp) == 0 && kp.kind == kind &&
                add_key(keys, k->str, k->len) != 0) {
                freeReplyObject(reply);
                return -1;
            }
        }
        freeReplyObject(reply);
    } while (strcmp(cursor, "0") != 0);
    /* alltime first, then each kind with its newest window first */
    char alltime[sizeof(pattern)];
    lb_board_key(config->key_prefix, (struct lb_str){board, (uint32_t)strlen(board)},
                 kind == LB_KEY_TOP ? LB_TOP_PREFIX ":alltime" : "alltime", alltime,
                 sizeof(alltime));
    for (size_t i = 0; i < keys->count; i++)
        if (strcmp(keys->names[i], alltime) == 0) {
            char *first = keys->names[i];
            keys->names[i] = keys->names[0];
            keys->names[0] = first;
        }
    size_t head = keys->count && strcmp(keys->names[0], alltime) == 0;
    qsort(keys->names + head, keys->count - head, sizeof(*keys->names), newest_first);
    return 0;
}

static void format_time(int64_t ms, char *out, size_t cap)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

struct view {
    struct lb_cluster *cl;
    const struct lb_profile *profile;
    uint16_t slot;
    int desc;
    const char *prefix, *board;
    char decayed[1024]; /* a decaying board's overall board: its key, or "" */
};

/* ZRANGE by position in the board's order (best first). */
static redisReply *range(const struct view *v, const char *key, long start, long stop)
{
    char from[32], to[32];
    snprintf(from, sizeof(from), "%ld", start);
    snprintf(to, sizeof(to), "%ld", stop);
    const char *argv[] = {"ZRANGE", key, from, to, "WITHSCORES", "REV"};
    redisReply *reply = command(v->cl, v->slot, v->desc ? 6 : 5, argv);
    if (reply && reply->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "lbread: unexpected ZRANGE reply for %s\n", key);
        freeReplyObject(reply);
        return NULL;
    }
    return reply;
}

/* Members strictly better than 'score' (a composite as Redis printed it). */
static int count_better(const struct view *v, const char *key, const char *score, long *count)
{
    char bound[64];
    snprintf(bound, sizeof(bound), "(%s", score);
    const char *argv[] = {"ZCOUNT", key, v->desc ? bound : "-inf", v->desc ? "+inf" : bound};
    redisReply *reply = command(v->cl, v->slot, 4, argv);
    if (!reply)
        return -1;
    *count = (long)reply->integer;
    freeReplyObject(reply);
    return 0;
}

/* Distinct composites among the first 'n' members. */
static int count_distinct(const struct view *v, const char *key, long n, long *distinct)
{
    char last[64] = "";
    *distinct = 0;
    for (long start = 0; start < n; start += DENSE_CHUNK) {
        long stop = start + DENSE_CHUNK < n ? start + DENSE_CHUNK - 1 : n - 1;
        redisReply *reply = range(v, key, start, stop);
        if (!reply)
            return -1;
        for (size_t i = 0; i + 1 < reply->elements; i += 2)
            if (strcmp(reply->element[i + 1]->str, last) != 0) {
                snprintf(last, sizeof(last), "%s", reply->element[i + 1]->str);
                (*distinct)++;
            }
        freeReplyObject(reply);
    }
    return 0;
}

/* A decaying board's patches, oldest first: names and their boards' keys. */
struct patches {
    char (*names)[LB_ID_MAX_BYTES + 1];
    char (*keys)[1024];
    int *ages;
    size_t n;
};

static int read_patches(const struct view *v, struct patches *pp)
{
    char key[1024];
    struct lb_str id = {v->board, (uint32_t)strlen(v->board)};
    lb_board_key(v->prefix, id, LB_PATCHES_KEY, key, sizeof(key));
    const char *argv[] = {"ZRANGE", key, "0", "-1", "WITHSCORES"};
    redisReply *reply = command(v->cl, v->slot, 5, argv);
    if (!reply)
        return -1;
    size_t n = reply->type == REDIS_REPLY_ARRAY ? reply->elements / 2 : 0;
    pp->names = calloc(n ? n : 1, sizeof(*pp->names));
    pp->keys = calloc(n ? n : 1, sizeof(*pp->keys));
    pp->ages = calloc(n ? n : 1, sizeof(*pp->ages));
    int64_t *scores = calloc(n ? n : 1, sizeof(*scores));
    pp->n = 0;
    const struct lb_decay_config *decay = v->profile->decay;
    for (size_t i = 0; pp->names && pp->keys && pp->ages && scores && i < n; i++) {
        size_t len;
        const redisReply *m = reply->element[2 * i];
        const char *name = lb_patch_name(m->str, m->len, &len);
        if (!name || len > LB_ID_MAX_BYTES)
            continue;
        scores[pp->n] = (int64_t)strtod(reply->element[2 * i + 1]->str, NULL);
        memcpy(pp->names[pp->n], name, len);
        pp->names[pp->n][len] = '\0';
        lb_window_key(v->prefix, id, &v->profile->windows[decay->window], 0,
                      (struct lb_str){name, (uint32_t)len}, pp->keys[pp->n], sizeof(pp->keys[0]));
        pp->n++;
    }
    freeReplyObject(reply);
    int ok = pp->names && pp->keys && pp->ages && scores;
    if (ok)
        lb_decay_ages(decay, scores, pp->n, pp->ages);
    free(scores);
    return ok ? 0 : -1;
}

/* The scores of 'members' (of a page) in 'key': ZMSCORE. */
static redisReply *scores_of(const struct view *v, const char *key, const redisReply *page)
{
    size_t n = page->elements / 2, argc = 2 + n;
    const char **argv = calloc(argc, sizeof(*argv));
    size_t *argvlen = calloc(argc, sizeof(*argvlen));
    redisReply *reply = NULL;
    if (argv && argvlen) {
        argv[0] = "ZMSCORE";
        argv[1] = key;
        for (size_t i = 0; i < n; i++)
            argv[2 + i] = page->element[2 * i]->str;
        for (size_t i = 0; i < argc; i++)
            argvlen[i] = i >= 2 ? page->element[2 * (i - 2)]->len : strlen(argv[i]);
        reply = lb_cluster_command(v->cl, v->slot, (int)argc, argv, argvlen);
        if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
            fprintf(stderr, "lbread: ZMSCORE %s: %s\n", key,
                    !reply                             ? lb_cluster_error(v->cl)
                    : reply->type == REDIS_REPLY_ERROR ? reply->str
                                                       : "unexpected reply");
            if (reply)
                freeReplyObject(reply);
            reply = NULL;
        }
    }
    free(argv);
    free(argvlen);
    return reply;
}

/* Units of the decay's precision as a decimal: 13080 in hundredths is
 * "130.80". */
static void format_units(int64_t units, int64_t scale, char *out, size_t cap)
{
    int places = 0;
    for (int64_t s = scale; s > 1 && places < 4; s /= 10)
        places++;
    uint64_t mag = units < 0 ? (uint64_t)0 - (uint64_t)units : (uint64_t)units;
    if (!places)
        snprintf(out, cap, "%s%llu", units < 0 ? "-" : "", (unsigned long long)mag);
    else
        snprintf(out, cap, "%s%llu.%0*llu", units < 0 ? "-" : "",
                 (unsigned long long)(mag / (uint64_t)scale), places,
                 (unsigned long long)(mag % (uint64_t)scale));
}

/* For each entry of a page of the overall board: the patch it came from
 * (newest first, the one whose entry taxed at its age is the composite)
 * and that entry's raw score. 'patch' and 'raw' have a slot per entry. */
static int sources_of(const struct view *v, const redisReply *page, const struct patches *pp,
                      const char **patch, int64_t *raw)
{
    const struct lb_decay_config *decay = v->profile->decay;
    unsigned bits = v->profile->scoring.tie_bits;
    for (size_t j = pp->n; j-- > 0;) {
        redisReply *got = scores_of(v, pp->keys[j], page);
        if (!got)
            return -1;
        for (size_t i = 0; i < got->elements; i++) {
            const redisReply *r = got->element[i];
            if (patch[i] || r->type != REDIS_REPLY_STRING)
                continue;
            int64_t c = (int64_t)strtod(r->str, NULL), score = c >> bits, taxed;
            int64_t tie = c - score * (INT64_C(1) << bits);
            int64_t want = (int64_t)strtod(page->element[2 * i + 1]->str, NULL);
            if (lb_decay_taxed(&decay->rule, score, pp->ages[j], &taxed) == 0 &&
                taxed * (INT64_C(1) << bits) + tie == want) {
                patch[i] = pp->names[j];
                raw[i] = score;
            }
        }
        freeReplyObject(got);
    }
    return 0;
}

/* Prints positions [start, start + count) of 'key', marking 'player'. */
static int show_page(const struct view *v, const char *key, long start, long count,
                     const char *player)
{
    redisReply *reply = range(v, key, start, start + count - 1);
    if (!reply)
        return -1;
    long competition = 0, dense = 0;
    if (reply->elements >= 2 && start > 0) {
        long better, distinct;
        if (count_better(v, key, reply->element[1]->str, &better) != 0 ||
            count_distinct(v, key, better, &distinct) != 0) {
            freeReplyObject(reply);
            return -1;
        }
        competition = better + 1;
        dense = distinct + 1;
    }
    const struct lb_scoring *scoring = &v->profile->scoring;
    const struct lb_decay_config *decay = v->profile->decay;
    int overall = decay && strcmp(key, v->decayed) == 0;
    struct patches pp = {0};
    size_t n = reply->elements / 2;
    const char **patch = overall ? calloc(n ? n : 1, sizeof(*patch)) : NULL;
    int64_t *raw = overall ? calloc(n ? n : 1, sizeof(*raw)) : NULL;
    int status = 0;
    if (overall &&
        (!patch || !raw || read_patches(v, &pp) != 0 || sources_of(v, reply, &pp, patch, raw))) {
        status = -1;
        goto done;
    }
    printf("%s\n", key);
    if (overall) {
        printf("  after tax: %s per patch behind, %s, at most %d patches, in units of %s; "
               "current patch %s\n",
               decay->tax, decay->stacking == LB_DECAY_COMPOUND ? "compound" : "linear",
               decay->rule.max_age, decay->precision, pp.n ? pp.names[pp.n - 1] : "(none)");
        printf("  %7s %7s %7s  %-24s %16s %12s  %-12s %s\n", "rank", "comp", "dense", "player",
               "after tax", "raw", "patch", scoring->tie_bits ? "achieved" : "");
    } else
        printf("  %7s %7s %7s  %-24s %16s  %s\n", "rank", "comp", "dense", "player", "score",
               scoring->tie_bits ? "achieved" : "");
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        const char *member = reply->element[i]->str, *text = reply->element[i + 1]->str;
        long position = start + (long)i / 2 + 1;
        if (i == 0 || strcmp(text, reply->element[i - 1]->str) != 0) {
            if (i > 0 || start == 0) {
                competition = position;
                dense++;
            }
        }
        int64_t composite = (int64_t)strtod(text, NULL), score, tick_ms;
        char when[32] = "";
        lb_composite_split(scoring, composite, &score, &tick_ms);
        if (scoring->tie_bits)
            format_time(tick_ms, when, sizeof(when));
        char mark = player && strcmp(member, player) == 0 ? '>' : ' ';
        if (overall) {
            char taxed[64], source[24] = "?";
            format_units(score, decay->rule.scale, taxed, sizeof(taxed));
            if (patch[i / 2])
                snprintf(source, sizeof(source), "%lld", (long long)raw[i / 2]);
            printf("%c %7ld %7ld %7ld  %-24s %16s %12s  %-12s %s\n", mark, position, competition,
                   dense, member, taxed, source, patch[i / 2] ? patch[i / 2] : "?", when);
        } else
            printf("%c %7ld %7ld %7ld  %-24s %16lld  %s\n", mark, position, competition, dense,
                   member, (long long)score, when);
    }
    printf("\n");
done:
    free(pp.names);
    free(pp.keys);
    free(pp.ages);
    free(patch);
    free(raw);
    freeReplyObject(reply);
    return status;
}

/* The page of 'top' positions centred on 'player'; *shown = 0 when the
 * player is not in this window. */
static int show_around(const struct view *v, const char *key, const char *player, long top,
                       int *shown)
{
    const char *argv[] = {v->desc ? "ZREVRANK" : "ZRANK", key, player};
    redisReply *reply = command(v->cl, v->slot, 3, argv);
    if (!reply)
        return -1;
    *shown = reply->type == REDIS_REPLY_INTEGER;
    long rank = *shown ? (long)reply->integer : 0;
    freeReplyObject(reply);
    if (!*shown)
        return 0;
    long start = rank - top / 2 > 0 ? rank - top / 2 : 0;
    return show_page(v, key, start, top, player);
}

/* Split boards: one command on the node of 'key'. */
static redisReply *at_key(const struct view *v, int argc, const char **argv)
{
    return command(v->cl, lb_key_slot(argv[1], strlen(argv[1])), argc, argv);
}

/* A split board's window 'window': the player's exact rank across its
 * shards (see the top of the file); *shown = 0 when the player is not in
 * it. */
static int split_rank(const struct view *v, const char *window, const char *player, int *shown)
{
    uint32_t n = (uint32_t)v->profile->shards;
    uint32_t mine = lb_player_shard(player, strlen(player), n);
    char keys[LB_SHARDS_MAX][1024], score[64] = "", bound[72];
    for (uint32_t i = 0; i < n; i++) {
        char tag[LB_TAG_MAX];
        size_t len = lb_shard_tag(v->board, strlen(v->board), n, i, tag, sizeof(tag));
        lb_board_key(v->prefix, (struct lb_str){tag, (uint32_t)len}, window, keys[i],
                     sizeof(keys[i]));
    }
    const char *zs[] = {"ZSCORE", keys[mine], player};
    redisReply *reply = at_key(v, 3, zs);
    if (!reply)
        return -1;
    *shown = reply->type == REDIS_REPLY_STRING;
    if (*shown)
        snprintf(score, sizeof(score), "%s", reply->str);
    freeReplyObject(reply);
    if (!*shown)
        return 0;
    const char *zr[] = {v->desc ? "ZREVRANK" : "ZRANK", keys[mine], player};
    if (!(reply = at_key(v, 3, zr)))
        return -1;
    long rank = reply->type == REDIS_REPLY_INTEGER ? (long)reply->integer : 0, better = 0;
    freeReplyObject(reply);
    snprintf(bound, sizeof(bound), "(%s", score);
    for (uint32_t i = 0; i < n; i++) {
        const char *zc[] = {"ZCOUNT", keys[i], v->desc ? bound : "-inf", v->desc ? "+inf" : bound};
        if (!(reply = at_key(v, 4, zc)))
            return -1;
        long count = reply->type == REDIS_REPLY_INTEGER ? (long)reply->integer : 0;
        freeReplyObject(reply);
        better += count;
        if (i == mine)
            continue;
        rank += count;
        /* equal composites: a desc board reads them from the highest name */
        const char *eq[] = {"ZRANGE", keys[i], score, score, "BYSCORE"};
        if (!(reply = at_key(v, 5, eq)))
            return -1;
        for (size_t e = 0; e < reply->elements; e++) {
            int c = strcmp(reply->element[e]->str, player);
            rank += v->desc ? c > 0 : c < 0;
        }
        freeReplyObject(reply);
    }
    const struct lb_scoring *scoring = &v->profile->scoring;
    int64_t composite = (int64_t)strtod(score, NULL), raw, tick_ms;
    char when[32] = "";
    lb_composite_split(scoring, composite, &raw, &tick_ms);
    if (scoring->tie_bits)
        format_time(tick_ms, when, sizeof(when));
    printf("%s across %u shards\n  %7s %7s  %-24s %16s  %s\n> %7ld %7ld  %-24s %16lld  %s\n\n",
           window, n, "rank", "comp", "player", "score", scoring->tie_bits ? "achieved" : "",
           rank + 1, better + 1, player, (long long)raw, when);
    return 0;
}

/* --shards: each shard's hash tag, slot and master under this configuration
 * (an unsplit board: one, its own id), a tab-separated line each after a
 * title line: a board id may hold spaces. */
static void show_shards(const struct view *v)
{
    uint32_t n = v->profile->shards > 1 ? (uint32_t)v->profile->shards : 1;
    printf("board '%s': %u shard(s)\n", v->board, n);
    for (uint32_t i = 0; i < n; i++) {
        char tag[LB_TAG_MAX];
        size_t len = lb_shard_tag(v->board, strlen(v->board), n, i, tag, sizeof(tag));
        uint16_t slot = lb_crc16(tag, len) & (LB_SLOTS - 1);
        const char *node = lb_cluster_slot_owner(v->cl, slot);
        printf("%u\t%s\tslot %u\t%s\n", i, tag, slot, node ? node : "(no master)");
    }
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: lbread --config FILE --board ID [--window SUFFIX [--final]] [--top N] "
                 "[--around PLAYER] [--shards]\n"
                 "\n"
                 "Prints the top N of each window of a board (or the N positions around one\n"
                 "player) with three ranks, the raw score and the achieved-at time decoded\n"
                 "from the composite scores:\n"
                 "  rank   unique position (1 2 3 4)\n"
                 "  comp   competition ranking: equal composites share a rank (1 2 2 4)\n"
                 "  dense  dense ranking: no gaps after a tie (1 2 2 3)\n"
                 "\n"
                 "  -c, --config FILE      the projector's configuration\n"
                 "  -b, --board ID         the board\n"
                 "  -w, --window SUFFIX    only this window, one the board's profile has:\n"
                 "                         alltime, daily:2026-05-04, weekly:2026-W18,\n"
                 "                         monthly:2026-05, or <dim>:VALUE (custom, e.g.\n"
                 "                         patch:1.29)\n"
                 "  -n, --top N            entries per window (default 10)\n"
                 "  -a, --around PLAYER    the N positions around PLAYER (marked '>') in each\n"
                 "                         window the player is in; on a split board, its\n"
                 "                         exact rank across the shards\n"
                 "  -f, --final            with --window: the closed window's final standings,\n"
                 "                         frozen when it closed (results: in the profile)\n"
                 "  -s, --shards           where the board's keys live: per shard its hash tag,\n"
                 "                         slot and master (split.shards of the configuration;\n"
                 "                         an unsplit board has one, its own id)\n"
                 "  -h, --help             show this help\n"
                 "\n"
                 "Exit status: 0 ok; 1 failure (Redis unreachable or refusing); 2 usage error\n"
                 "(a bad command line, a board no profile matches, a window the board does\n"
                 "not have); 3 invalid configuration.\n"
                 "\n"
                 "Examples:\n"
                 "  lbread --config config/local.yaml --board g1 --top 10\n"
                 "  lbread --config config/local.yaml --board g1 --window weekly:2026-W18 \\\n"
                 "         --around player-42 --top 5\n");
}

/* --final: the window's frozen standings and what ~final says of them. */
static int show_final(const struct view *v, const char *window, long top)
{
    struct lb_str id = {v->board, (uint32_t)strlen(v->board)};
    char key[1024], state[1024], f[3][300];
    lb_final_key(v->prefix, id, window, key, sizeof(key));
    lb_board_key(v->prefix, id, LB_FINAL_KEY, state, sizeof(state));
    for (int i = 0; i < 3; i++)
        snprintf(f[i], sizeof(f[i]), "%c:%s", "scn"[i], window);
    const char *argv[] = {"HMGET", state, f[0], f[1], f[2]};
    redisReply *meta = command(v->cl, v->slot, 5, argv);
    if (!meta || meta->type != REDIS_REPLY_ARRAY || meta->elements != 3) {
        if (meta)
            freeReplyObject(meta);
        return -1;
    }
    int rc = 0;
    if (meta->element[0]->type != REDIS_REPLY_STRING) {
        printf("board '%s' window %s has no final standings: not closed yet\n", v->board, window);
    } else {
        char at[40] = "?";
        if (meta->element[1]->type == REDIS_REPLY_STRING)
            format_time(strtoll(meta->element[1]->str, NULL, 10), at, sizeof(at));
        printf("final standings of board '%s' window %s: closed at %s (event time), %s "
               "player(s), %s\n",
               v->board, window, at,
               meta->element[2]->type == REDIS_REPLY_STRING ? meta->element[2]->str : "?",
               meta->element[0]->str);
        rc = show_page(v, key, 0, top, NULL);
    }
    freeReplyObject(meta);
    return rc;
}

/* With --window: a window the board's profile has but Redis holds no key
 * of (expired, or never written). Says which windows the board has. */
static int say_missing_window(struct lb_cluster *cl, const struct lb_config *config,
                              const char *board, uint16_t slot, const char *window)
{
    struct keys all = {0};
    const struct lb_profile *profile = lb_config_profile_for(config, board, strlen(board));
    int split = profile && profile->shards > 1;
    if (list_keys(cl, config, board, slot, &all, split ? LB_KEY_TOP : LB_KEY_WINDOW) != 0)
        return -1;
    /* "<prefix>{<board>}:", and "~top:" of a merged top */
    size_t skip = strlen(config->key_prefix) + strlen(board) + 3 + (split ? 5 : 0);
    printf("board '%s' has no window %s in Redis (expired, or never written); ", board, window);
    if (!all.count)
        printf("it has no windows at all\n");
    else
        printf("its windows:");
    for (size_t i = 0; i < all.count; i++) {
        printf(" %s", strlen(all.names[i]) > skip ? all.names[i] + skip : all.names[i]);
        free(all.names[i]);
    }
    if (all.count)
        printf("\n");
    free(all.names);
    return 0;
}

int main(int argc, char **argv)
{
    lb_usage_program = "lbread";
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"board", required_argument, NULL, 'b'},
                                             {"window", required_argument, NULL, 'w'},
                                             {"top", required_argument, NULL, 'n'},
                                             {"around", required_argument, NULL, 'a'},
                                             {"shards", no_argument, NULL, 's'},
                                             {"final", no_argument, NULL, 'f'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *path = NULL, *board = NULL, *window = NULL, *player = NULL;
    long top = 10;
    int opt, status = 0, shards = 0, final = 0;
    double number;
    char err[1024];

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":c:b:w:n:a:sfh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case 'b':
            board = optarg;
            break;
        case 'w':
            window = optarg;
            break;
        case 'n':
            if (lb_usage_number(optarg, 1, 100000, 1, &number) != 0)
                return lb_usage_error("--top wants a number from 1 to 100000, not '%s'", optarg);
            top = (long)number;
            break;
        case 'a':
            player = optarg;
            break;
        case 's':
            shards = 1;
            break;
        case 'f':
            final = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return lb_bad_option(opt, argv);
        }
    }
    if (optind != argc)
        return lb_usage_error("unexpected argument '%s'", argv[optind]);
    if (!path || !board)
        return lb_usage_error("%s", !path && !board ? "--config FILE and --board ID are required"
                                    : !path         ? "--config FILE is required"
                                                    : "--board ID is required");
    if (!*board)
        return lb_usage_error("--board wants a board id, not ''");
    if (shards && (window || player))
        return lb_usage_error("--shards lists where the board lives: it takes no %s",
                              window ? "--window" : "--around");
    if (final && (!window || player || shards))
        return lb_usage_error("--final shows one closed window's final standings: it takes "
                              "--window and no %s",
                              !window  ? "other"
                              : player ? "--around"
                                       : "--shards");
    lb_log_threshold = LB_LOG_ERROR;
    struct lb_config *config;
    if (lb_config_load_flags(path, LB_CONFIG_NO_KAFKA, &config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 3;
    }
    const struct lb_profile *profile = lb_config_profile_for(config, board, strlen(board));
    if (!profile) {
        fprintf(stderr, "lbread: no profile of %s matches board '%s'; check --board\n", path,
                board);
        lb_config_free(config);
        return 2;
    }
    if (window) {
        char owner[300], why[1400];
        snprintf(owner, sizeof(owner), "board '%.128s' (profile '%.128s')", board, profile->name);
        if (lb_config_check_window(profile, 1, owner, window, why, sizeof(why)) != 0) {
            fprintf(stderr, "lbread: %s\n", why);
            lb_config_free(config);
            return 2;
        }
    }
    struct lb_cluster_options options;
    options = lb_config_cluster(config);
    options.wait_replicas = 0; /* it only reads: no WAIT, and no master asked about replicas */
    struct view v = {.cl = lb_cluster_new(&options),
                     .profile = profile,
                     .slot = lb_crc16(board, strlen(board)) & (LB_SLOTS - 1),
                     .desc = profile->scoring.order == LB_ORDER_DESC,
                     .prefix = config->key_prefix,
                     .board = board};
    if (profile->decay)
        lb_board_key(config->key_prefix, (struct lb_str){board, (uint32_t)strlen(board)},
                     profile->decay->key, v.decayed, sizeof(v.decayed));
    struct keys keys = {0};
    char key[1024];
    int split = profile->shards > 1;

    if (!v.cl || lb_cluster_refresh(v.cl) != 0) {
        fprintf(stderr, "lbread: %s\n", v.cl ? lb_cluster_error(v.cl) : "out of memory");
        status = 1;
    } else if (shards) {
        show_shards(&v);
    } else if (final) {
        status = show_final(&v, window, top);
    } else if (window) {
        struct lb_str id = {board, (uint32_t)strlen(board)};
        size_t len =
            split ? lb_top_key(config->key_prefix, id,
                               (struct lb_str){window, (uint32_t)strlen(window)}, key, sizeof(key))
                  : lb_board_key(config->key_prefix, id, window, key, sizeof(key));
        /* ZCOUNT, not EXISTS: the reader's ACL rule has it, and a sorted set
         * is never empty, so 0 means no key */
        const char *argv_count[] = {"ZCOUNT", key, "-inf", "+inf"};
        redisReply *reply = len ? command(v.cl, v.slot, 4, argv_count) : NULL;
        if (!reply)
            status = -1;
        else if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0)
            status = say_missing_window(v.cl, config, board, v.slot, window);
        else
            status = add_key(&keys, key, len);
        freeReplyObject(reply);
    } else {
        status = list_keys(v.cl, config, board, v.slot, &keys, split ? LB_KEY_TOP : LB_KEY_WINDOW);
        if (status == 0 && keys.count == 0)
            printf("board '%s' has no %s under %s{%s}:*\n", board, split ? "merged tops" : "keys",
                   config->key_prefix, board);
    }
    int found = 0;
    for (size_t i = 0; i < keys.count && status == 0; i++) {
        int shown = 1;
        struct lb_key_parts kp;
        if (player && split &&
            lb_key_parse(config->key_prefix, keys.names[i], strlen(keys.names[i]), &kp) == 0) {
            char name[LB_WINDOW_NAME_MAX];
            snprintf(name, sizeof(name), "%.*s", (int)kp.window.len, kp.window.ptr);
            status = split_rank(&v, name, player, &shown);
        } else if (player)
            status = show_around(&v, keys.names[i], player, top, &shown);
        else
            status = show_page(&v, keys.names[i], 0, top, NULL);
        found |= shown;
    }
    if (status == 0 && player && !found)
        printf("player '%s' is in none of the %zu window(s) shown for board '%s'\n", player,
               keys.count, board);
    for (size_t i = 0; i < keys.count; i++)
        free(keys.names[i]);
    free(keys.names);
    lb_cluster_free(v.cl);
    lb_config_free(config);
    return status == 0 ? 0 : 1;
}
