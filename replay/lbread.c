/* lbread: shows a board's leaderboards as the projector wrote them.
 *
 * For every window key of the board (or the one given with --window) it
 * prints the top N with the raw score and the event time decoded from the
 * composite, using the board's profile from the projector's configuration.
 * Keys are found with SCAN on the board's node: all of a board's keys share
 * its hash tag, so they all live on that node.
 *
 * stdout: the leaderboards; stderr: errors. Exit 0 ok, 1 failure, 2 usage.
 */
#include "cluster.h"
#include "config.h"
#include "log.h"
#include "score.h"
#include "slot.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Orders alltime first, then each kind with its newest window first. */
static int key_order(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    int ax = strstr(x, "}:alltime") != NULL, ay = strstr(y, "}:alltime") != NULL;
    if (ax != ay)
        return ay - ax;
    return -strcmp(x, y);
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

static int list_keys(struct lb_cluster *cl, const struct lb_config *config, const char *board,
                     uint16_t slot, struct keys *keys)
{
    char escaped[2 * LB_ID_MAX_BYTES + 8], pattern[3 * LB_ID_MAX_BYTES + 64];
    char cursor[32] = "0";
    glob_escape(board, escaped, sizeof(escaped));
    snprintf(pattern, sizeof(pattern), "%s{%s}:*", config->key_prefix, escaped);
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t argvlen[6];
        for (int i = 0; i < 6; i++)
            argvlen[i] = strlen(argv[i]);
        redisReply *reply = lb_cluster_command(cl, slot, 6, argv, argvlen);
        if (!reply) {
            fprintf(stderr, "lbread: SCAN failed: %s\n", lb_cluster_error(cl));
            return -1;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
            fprintf(stderr, "lbread: unexpected SCAN reply\n");
            freeReplyObject(reply);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", reply->element[0]->str);
        for (size_t i = 0; i < reply->element[1]->elements; i++)
            if (add_key(keys, reply->element[1]->element[i]->str,
                        reply->element[1]->element[i]->len) != 0) {
                freeReplyObject(reply);
                return -1;
            }
        freeReplyObject(reply);
    } while (strcmp(cursor, "0") != 0);
    qsort(keys->names, keys->count, sizeof(*keys->names), key_order);
    return 0;
}

static void format_time(int64_t ms, char *out, size_t cap)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int show_key(struct lb_cluster *cl, const struct lb_profile *profile, const char *key,
                    uint16_t slot, long top)
{
    char stop[32];
    snprintf(stop, sizeof(stop), "%ld", top - 1);
    int desc = profile->scoring.order == LB_ORDER_DESC;
    const char *argv[] = {"ZRANGE", key, "0", stop, "WITHSCORES", "REV"};
    int argc = desc ? 6 : 5;
    size_t argvlen[6];
    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    redisReply *reply = lb_cluster_command(cl, slot, argc, argv, argvlen);
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "lbread: ZRANGE %s failed: %s\n", key,
                reply ? reply->str ? reply->str : "unexpected reply" : lb_cluster_error(cl));
        if (reply)
            freeReplyObject(reply);
        return -1;
    }
    printf("%s\n", key);
    printf("  %5s  %-24s %16s  %s\n", "rank", "player", "score",
           profile->scoring.tie_bits ? "time" : "");
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        int64_t composite = (int64_t)strtod(reply->element[i + 1]->str, NULL);
        int64_t score, tick_ms;
        char when[32] = "";
        lb_composite_split(&profile->scoring, composite, &score, &tick_ms);
        if (profile->scoring.tie_bits)
            format_time(tick_ms, when, sizeof(when));
        printf("  %5zu  %-24s %16lld  %s\n", i / 2 + 1, reply->element[i]->str, (long long)score,
               when);
    }
    printf("\n");
    freeReplyObject(reply);
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: lbread --config FILE --board ID [--window SUFFIX] [--top N]\n"
                 "\n"
                 "Prints the top N of each window of a board, with raw scores and times\n"
                 "decoded from the composite scores.\n"
                 "\n"
                 "  -c, --config FILE    the projector's configuration\n"
                 "  -b, --board ID       the board\n"
                 "  -w, --window SUFFIX  only this window, e.g. alltime, daily:2026-05-04,\n"
                 "                       weekly:2026-W18, monthly:2026-05, patch:1.29\n"
                 "  -n, --top N          entries per window (default 10)\n"
                 "  -h, --help           show this help\n"
                 "\n"
                 "Example:\n"
                 "  lbread --config config/local.yaml --board g1 --top 10\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"board", required_argument, NULL, 'b'},
        {"window", required_argument, NULL, 'w'}, {"top", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *path = NULL, *board = NULL, *window = NULL;
    long top = 10;
    int opt, status = 0;
    char err[1024];

    while ((opt = getopt_long(argc, argv, "c:b:w:n:h", longopts, NULL)) != -1) {
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
            top = strtol(optarg, NULL, 10);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!path || !board || top < 1 || optind != argc) {
        usage(stderr);
        return 2;
    }
    lb_log_threshold = LB_LOG_ERROR;
    struct lb_config *config;
    if (lb_config_load(path, &config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    const struct lb_profile *profile = lb_config_profile_for(config, board, strlen(board));
    if (!profile) {
        fprintf(stderr, "lbread: no profile of %s matches board '%s'\n", path, board);
        lb_config_free(config);
        return 2;
    }
    struct lb_cluster_options options;
    lb_cluster_options_from_config(config, &options);
    struct lb_cluster *cl = lb_cluster_new(&options);
    uint16_t slot = lb_crc16(board, strlen(board)) & (LB_SLOTS - 1);
    struct keys keys = {0};

    if (!cl || lb_cluster_refresh(cl) != 0) {
        fprintf(stderr, "lbread: %s\n", cl ? lb_cluster_error(cl) : "out of memory");
        status = 1;
    } else if (window) {
        char key[1024];
        snprintf(key, sizeof(key), "%s{%s}:%s", config->key_prefix, board, window);
        status = show_key(cl, profile, key, slot, top) == 0 ? 0 : 1;
    } else if (list_keys(cl, config, board, slot, &keys) != 0) {
        status = 1;
    } else {
        if (keys.count == 0)
            printf("board '%s' has no keys under %s{%s}:*\n", board, config->key_prefix, board);
        for (size_t i = 0; i < keys.count && status == 0; i++)
            status = show_key(cl, profile, keys.names[i], slot, top) == 0 ? 0 : 1;
    }
    for (size_t i = 0; i < keys.count; i++)
        free(keys.names[i]);
    free(keys.names);
    lb_cluster_free(cl);
    lb_config_free(config);
    return status;
}
