/* Rebuilds of decaying boards' overall boards; see rebuild.h. */
#include "rebuild.h"
#include "apply.h"
#include "clock.h"
#include "decay.h"
#include "log.h"
#include "slot.h"
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAX 1024

enum phase { TAKE, PAGE, FINISH };

struct job {
    char *board;
    size_t len;
    uint16_t slot;
    const struct lb_profile *profile;
    enum phase phase;
    char gen[32];
    char **patches; /* names, in their order */
    int *ages;      /* each one's age */
    size_t npatches;
    size_t patch;   /* the patch being read */
    int64_t offset; /* the next rank to read in its board */
    int64_t next_ms, started_ms;
    uint64_t members;
    int taken; /* the lease was taken at least once */
};

/* The sweep for rebuilds nobody is doing. */
struct sweep {
    int on;
    struct lb_sweep scan;
    int64_t next_ms;
};

struct lb_rebuild {
    struct lb_rebuild_options o;
    struct sweep sweep;
    struct lb_cluster *cluster;
    char holder[128];
    struct job *jobs;
    size_t count, cap, turn;
    int64_t last_step_ms;
    struct lb_rebuild_stats stats;
    struct lb_ratelimit failed_said;
};

struct lb_rebuild *lb_rebuild_new(const struct lb_rebuild_options *options)
{
    struct lb_rebuild *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->o = *options;
    if (!r->o.interval_ms)
        r->o.interval_ms = LB_REBUILD_INTERVAL_MS;
    if (!(r->cluster = lb_cluster_new(options->cluster))) {
        free(r);
        return NULL;
    }
    lb_lease_holder(r->holder, sizeof(r->holder));
    return r;
}

static void job_forget_patches(struct job *j)
{
    for (size_t i = 0; i < j->npatches; i++)
        free(j->patches[i]);
    free(j->patches);
    free(j->ages);
    j->patches = NULL;
    j->ages = NULL;
    j->npatches = 0;
}

static void job_remove(struct lb_rebuild *r, size_t i)
{
    job_forget_patches(&r->jobs[i]);
    free(r->jobs[i].board);
    r->jobs[i] = r->jobs[--r->count];
}

void lb_rebuild_free(struct lb_rebuild *r)
{
    if (!r)
        return;
    while (r->count)
        job_remove(r, r->count - 1);
    free(r->jobs);
    lb_cluster_free(r->cluster);
    lb_sweep_free(&r->sweep.scan);
    free(r);
}

void lb_rebuild_sweep(struct lb_rebuild *r)
{
    r->sweep.on = 1;
}

/* Whether the board of a ~decay hash the sweep found has work: a rebuild
 * flagged (its holder may be gone), or a rule other than this pod's (the
 * settings changed; the board may get no event to notice). A read that
 * failed finds it too: its first step (take) reads the same and answers
 * done when there is nothing to do, and is tried again while it fails. */
static int sweep_finds(struct lb_rebuild *r, const redisReply *key, struct lb_str board)
{
    const struct lb_profile *profile = lb_config_profile_for(r->o.config, board.ptr, board.len);
    if (!profile || !profile->decay)
        return 0;
    char rule[LB_DECAY_RULE_MAX];
    size_t rlen = lb_decay_rule(profile->decay, rule, sizeof(rule));
    const char *argv[] = {"HMGET", key->str, "rebuilding", "rule"};
    size_t argvlen[] = {5, key->len, 10, 4};
    redisReply *got =
        lb_cluster_command(r->cluster, lb_key_slot(key->str, key->len), 4, argv, argvlen);
    int finds = !got || got->type != REDIS_REPLY_ARRAY || got->elements != 2 ||
                (got->element[0]->type == REDIS_REPLY_STRING ||
                 got->element[1]->type != REDIS_REPLY_STRING || got->element[1]->len != rlen ||
                 memcmp(got->element[1]->str, rule, rlen) != 0);
    if (got)
        freeReplyObject(got);
    return finds;
}

static void sweep_each(void *ctx, const redisReply *key)
{
    struct lb_rebuild *r = ctx;
    struct lb_key_parts parts;
    if (lb_key_parse(r->o.key_prefix, key->str, key->len, &parts) == 0 &&
        sweep_finds(r, key, parts.board))
        lb_rebuild_note(r, parts.board);
}

/* One page of the sweep: 50 keys, each found costs an HMGET. */
static void sweep_step(struct lb_rebuild *r, int64_t now_ms)
{
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "%s{*}:%s", r->o.key_prefix, LB_DECAY_STATE_KEY);
    redisReply *failed;
    int done =
        lb_sweep_page(&r->sweep.scan, r->cluster, pattern, "hash", 50, sweep_each, r, &failed);
    if (done < 0) {
        r->stats.failures++;
        lb_log_every(&r->failed_said, 10000, LB_LOG_WARN, "decay",
                     "looking for unfinished rebuilds: %s; trying again in 10 s",
                     !failed                             ? lb_cluster_error(r->cluster)
                     : failed->type == REDIS_REPLY_ERROR ? failed->str
                                                         : "unexpected answer to SCAN");
        if (failed)
            freeReplyObject(failed);
        r->sweep.next_ms = now_ms + 10000;
    } else if (done) {
        r->sweep.next_ms = now_ms + LB_REBUILD_SWEEP_MS;
    }
}

void lb_rebuild_note(struct lb_rebuild *r, struct lb_str board)
{
    for (size_t i = 0; i < r->count; i++)
        if (r->jobs[i].len == board.len && memcmp(r->jobs[i].board, board.ptr, board.len) == 0)
            return;
    const struct lb_profile *profile = lb_config_profile_for(r->o.config, board.ptr, board.len);
    if (!profile || !profile->decay)
        return;
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        struct job *jobs = realloc(r->jobs, cap * sizeof(*jobs));
        if (!jobs)
            return; /* the next answer of the board notes it again */
        r->jobs = jobs;
        r->cap = cap;
    }
    char *copy = malloc(board.len + 1);
    if (!copy)
        return;
    memcpy(copy, board.ptr, board.len);
    copy[board.len] = '\0';
    char key[KEY_MAX];
    size_t klen = lb_board_key(r->o.key_prefix, board, LB_DECAY_STATE_KEY, key, sizeof(key));
    r->jobs[r->count++] = (struct job){
        .board = copy, .len = board.len, .slot = lb_key_slot(key, klen), .profile = profile};
}

/* Runs one step of the rebuild script (apply.lua, ARGV[2] "R") with 'extra'
 * arguments after the common ones; NULL when the call failed. */
static redisReply *script_step(struct lb_rebuild *r, struct job *j, const char *step, size_t nextra,
                               const char **extra, const size_t *extralen)
{
    struct lb_str id = {j->board, (uint32_t)j->len};
    const struct lb_decay_config *decay = j->profile->decay;
    const char *rest[] = {LB_DECAY_STATE_KEY, LB_DECAY_SHADOW, decay->key, LB_PATCHES_KEY};
    char keys[4][KEY_MAX], lease[24];
    size_t argc = 3 + 4 + 5 + nextra;
    const char **argv = malloc(argc * sizeof(*argv));
    size_t *argvlen = malloc(argc * sizeof(*argvlen));
    if (!argv || !argvlen) {
        free(argv);
        free(argvlen);
        return NULL;
    }
    size_t n = 0;
#define ARG(s, l) (argv[n] = (s), argvlen[n++] = (l))
    ARG("EVALSHA", 7);
    ARG(lb_apply_script_sha(), 40);
    ARG("4", 1);
    for (size_t i = 0; i < 4; i++)
        ARG(keys[i], lb_board_key(r->o.key_prefix, id, rest[i], keys[i], KEY_MAX));
    ARG(LB_APPLY_VERSION_TEXT, sizeof(LB_APPLY_VERSION_TEXT) - 1);
    ARG("R", 1);
    ARG(step, strlen(step));
    ARG(r->holder, strlen(r->holder));
    ARG(lease, (size_t)snprintf(lease, sizeof(lease), "%d", LB_REBUILD_LEASE_MS));
    for (size_t i = 0; i < nextra; i++)
        ARG(extra[i], extralen[i]);
#undef ARG
    redisReply *reply = lb_cluster_command(r->cluster, j->slot, (int)n, argv, argvlen);
    free(argv);
    free(argvlen);
    if (!reply) {
        r->stats.failures++;
        lb_log_every(&r->failed_said, 10000, LB_LOG_WARN, "decay",
                     "rebuild of board '%s': %s; trying again", j->board,
                     lb_cluster_error(r->cluster));
    } else if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
               reply->element[0]->type != REDIS_REPLY_STRING) {
        r->stats.failures++;
        lb_log_every(&r->failed_said, 10000, LB_LOG_WARN, "decay",
                     "rebuild of board '%s': unexpected answer to '%s'%s%s", j->board, step,
                     reply->type == REDIS_REPLY_ERROR ? ": " : "",
                     reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        freeReplyObject(reply);
        reply = NULL;
    }
    return reply;
}

static int is_word(const redisReply *reply, const char *word)
{
    return strcmp(reply->element[0]->str, word) == 0;
}

/* The answer named neither ok nor stale: wrongtype or noperm, which an
 * operator must fix. Logged; the step is tried again later. */
static void refused(struct lb_rebuild *r, struct job *j, const redisReply *reply, const char *step)
{
    const char *what = reply->elements > 1 && reply->element[1]->type == REDIS_REPLY_STRING
                           ? reply->element[1]->str
                           : "";
    r->stats.failures++;
    if (strcmp(reply->element[0]->str, "noperm") == 0)
        lb_log_every(&r->failed_said, 10000, LB_LOG_ERROR, "decay",
                     "NOPERM this user may not run '%s' (the rebuild of board '%s' calls it): see "
                     "ops/deploy/redis-acl.conf",
                     what, j->board);
    else
        lb_log_every(&r->failed_said, 10000, LB_LOG_ERROR, "decay",
                     "rebuild of board '%s': '%s' answered %s %s (a key of the wrong type under "
                     "the board's tag: an operator must fix it)",
                     j->board, step, reply->element[0]->str, what);
}

/* Writes ~patches as this pod's configuration orders them: the patches
 * 'names', each with its member and score (lb_decay_patch_member); with a
 * list, those it does not name are left out. A new gen: 0, or -1. */
static int rekey(struct lb_rebuild *r, struct job *j, char **names, size_t n)
{
    const struct lb_decay_config *decay = j->profile->decay;
    const char **extra = calloc(1 + 2 * n, sizeof(*extra));
    size_t *extralen = calloc(1 + 2 * n, sizeof(*extralen));
    char(*members)[LB_ID_MAX_BYTES * 6 + 16] = calloc(n ? n : 1, sizeof(*members));
    char(*scores)[24] = calloc(n ? n : 1, sizeof(*scores));
    int rc = extra && extralen && members && scores ? 0 : -1;
    size_t k = 1;
    if (rc == 0) {
        extra[0] = j->gen;
        extralen[0] = strlen(j->gen);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int64_t score;
        size_t len = lb_decay_patch_member(decay, names[i], strlen(names[i]), members[i],
                                           sizeof(members[i]), &score);
        if (!len)
            continue; /* not in the list any more: out of the board's patches */
        extra[k] = scores[i];
        extralen[k++] = (size_t)snprintf(scores[i], sizeof(scores[i]), "%lld", (long long)score);
        extra[k] = members[i];
        extralen[k++] = len;
    }
    redisReply *reply = rc == 0 ? script_step(r, j, "rekey", k, extra, extralen) : NULL;
    free(extra);
    free(extralen);
    free(members);
    free(scores);
    if (!reply)
        return -1;
    rc = is_word(reply, "ok") || is_word(reply, "stale") ? 0 : -1;
    if (rc == 0 && is_word(reply, "ok"))
        LB_INFO("decay", "ordered the patches of '%s' as the configuration says (decay.patches)",
                j->board);
    else if (rc != 0)
        refused(r, j, reply, "rekey");
    freeReplyObject(reply);
    return rc;
}

/* Reads the patches of a "go" answer (member, score pairs in order) into
 * the job with their ages. 0; 1 when they were not ordered as this pod's
 * configuration says and were written anew (take again); -1. */
static int take_patches(struct lb_rebuild *r, struct job *j, const redisReply *reply)
{
    const struct lb_decay_config *decay = j->profile->decay;
    size_t n = (reply->elements - 2) / 2;
    int64_t *scores = calloc(n ? n : 1, sizeof(*scores));
    int stale = 0;
    job_forget_patches(j);
    j->patches = calloc(n ? n : 1, sizeof(char *));
    j->ages = calloc(n ? n : 1, sizeof(int));
    if (!scores || !j->patches || !j->ages) {
        free(scores);
        job_forget_patches(j);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = reply->element[2 + 2 * i], *sc = reply->element[3 + 2 * i];
        size_t len = 0;
        const char *name = m->type == REDIS_REPLY_STRING && sc->type == REDIS_REPLY_STRING
                               ? lb_patch_name(m->str, m->len, &len)
                               : NULL;
        if (!name || !(j->patches[i] = malloc(len + 1))) {
            free(scores);
            job_forget_patches(j);
            return -1;
        }
        j->npatches = i + 1;
        memcpy(j->patches[i], name, len);
        j->patches[i][len] = '\0';
        scores[i] = (int64_t)strtod(sc->str, NULL);
        char want[LB_ID_MAX_BYTES * 6 + 16];
        int64_t want_score;
        size_t wlen = lb_decay_patch_member(decay, name, len, want, sizeof(want), &want_score);
        stale |=
            !wlen || wlen != m->len || memcmp(want, m->str, wlen) != 0 || want_score != scores[i];
    }
    int rc = 0;
    if (stale)
        rc = rekey(r, j, j->patches, j->npatches) == 0 ? 1 : -1;
    else
        lb_decay_ages(decay, scores, n, j->ages);
    free(scores);
    if (rc != 0)
        job_forget_patches(j);
    return rc;
}

static int take(struct lb_rebuild *r, struct job *j, int64_t now_ms)
{
    char rule[LB_DECAY_RULE_MAX];
    const char *extra[] = {rule};
    size_t extralen[] = {lb_decay_rule(j->profile->decay, rule, sizeof(rule))};
    redisReply *reply = script_step(r, j, "take", 1, extra, extralen);
    if (!reply)
        return -1;
    int rc = 0;
    if (is_word(reply, "done")) {
        rc = 1;
    } else if (is_word(reply, "busy") && reply->elements == 3) {
        int64_t wait = strtoll(reply->element[2]->str, NULL, 10);
        j->next_ms = now_ms + (wait < 1000 ? wait + 10 : 1000);
        r->stats.busy++;
    } else if (is_word(reply, "go") && reply->elements >= 2 && reply->elements % 2 == 0 &&
               reply->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(j->gen, sizeof(j->gen), "%s", reply->element[1]->str);
        rc = take_patches(r, j, reply);
        if (rc == 0) {
            j->phase = PAGE;
            j->patch = 0;
            j->offset = 0;
            j->members = 0;
            j->started_ms = now_ms;
            if (!j->taken)
                r->stats.started++;
            j->taken = 1;
            LB_INFO("decay", "rebuilding the overall board of '%s' (gen %s, %zu patches)", j->board,
                    j->gen, j->npatches);
        } else if (rc == 1) { /* ~patches ordered anew: a new gen, taken again at once */
            rc = 0;
        }
    } else {
        refused(r, j, reply, "take");
        rc = -1;
    }
    freeReplyObject(reply);
    return rc;
}

/* Reads one page of the current patch's board and adds it, taxed, to the
 * shadow. 0, 1 when the gen or lease moved on (start over), -1. */
static int page(struct lb_rebuild *r, struct job *j)
{
    const struct lb_profile *profile = j->profile;
    const struct lb_decay_config *decay = profile->decay;
    const char *name = j->patches[j->patch];
    char key[KEY_MAX], from[24], to[24];
    struct lb_str id = {j->board, (uint32_t)j->len};
    struct lb_str value = {name, (uint32_t)strlen(name)};
    size_t klen = lb_window_key(r->o.key_prefix, id, &profile->windows[decay->window], 0, value,
                                key, KEY_MAX);
    int desc = profile->scoring.order == LB_ORDER_DESC;
    const char *argv[] = {"ZRANGE", key, from, to, "WITHSCORES", "REV"};
    size_t argvlen[] = {
        6,
        klen,
        (size_t)snprintf(from, sizeof(from), "%lld", (long long)j->offset),
        (size_t)snprintf(to, sizeof(to), "%lld", (long long)(j->offset + LB_REBUILD_CHUNK - 1)),
        10,
        3};
    /* best first: a write moves a member only towards the front */
    redisReply *got = lb_cluster_command(r->cluster, j->slot, desc ? 6 : 5, argv, argvlen);
    if (!got || got->type != REDIS_REPLY_ARRAY || got->elements % 2) {
        r->stats.failures++;
        lb_log_every(&r->failed_said, 10000, LB_LOG_WARN, "decay",
                     "rebuild of board '%s': reading %s: %s; trying again", j->board, key,
                     got ? (got->type == REDIS_REPLY_ERROR ? got->str : "unexpected reply")
                         : lb_cluster_error(r->cluster));
        if (got)
            freeReplyObject(got);
        return -1;
    }
    size_t m = got->elements / 2;
    if (m == 0) {
        freeReplyObject(got);
        j->patch++;
        j->offset = 0;
        return 0;
    }
    unsigned bits = profile->scoring.tie_bits;
    int age = j->ages[j->patch];
    size_t nextra = 2 + 2 * m;
    const char **extra = malloc(nextra * sizeof(*extra));
    size_t *extralen = malloc(nextra * sizeof(*extralen));
    char(*numbers)[24] = malloc(m * sizeof(*numbers));
    int rc = extra && extralen && numbers ? 0 : -1;
    if (rc == 0) {
        extra[0] = j->gen;
        extralen[0] = strlen(j->gen);
        extra[1] = desc ? "GT" : "LT";
        extralen[1] = 2;
    }
    for (size_t i = 0; rc == 0 && i < m; i++) {
        const redisReply *member = got->element[2 * i], *score = got->element[2 * i + 1];
        int64_t composite = (int64_t)strtod(score->str, NULL), taxed;
        int64_t raw = composite >> bits; /* arithmetic: the floor */
        int64_t tie = composite - raw * (INT64_C(1) << bits);
        if (lb_decay_taxed(&decay->rule, raw, age, &taxed) != 0) {
            rc = -2; /* the load check rules this out for scores within the profile's */
            break;
        }
        extra[2 + 2 * i] = numbers[i];
        extralen[2 + 2 * i] = (size_t)snprintf(numbers[i], sizeof(numbers[i]), "%lld",
                                               (long long)(taxed * (INT64_C(1) << bits) + tie));
        extra[3 + 2 * i] = member->str;
        extralen[3 + 2 * i] = member->len;
    }
    if (rc != 0) {
        r->stats.failures++;
        lb_log_every(&r->failed_said, 10000, LB_LOG_ERROR, "decay",
                     "rebuild of board '%s': %s; trying again", j->board,
                     rc == -2 ? "a score of its boards cannot be taxed within 64 bits (written "
                                "under other settings?)"
                              : "out of memory");
        rc = -1;
    }
    redisReply *reply = rc == 0 ? script_step(r, j, "chunk", nextra, extra, extralen) : NULL;
    free(extra);
    free(extralen);
    free(numbers);
    freeReplyObject(got);
    if (!reply)
        return -1;
    if (is_word(reply, "ok")) {
        r->stats.members += m;
        j->members += m;
        j->offset += (int64_t)m;
        if (m < LB_REBUILD_CHUNK) {
            j->patch++;
            j->offset = 0;
        }
    } else if (is_word(reply, "stale")) {
        rc = 1;
    } else {
        refused(r, j, reply, "chunk");
        rc = -1;
    }
    freeReplyObject(reply);
    return rc;
}

static int finish(struct lb_rebuild *r, struct job *j, int64_t now_ms)
{
    const char *extra[] = {j->gen};
    size_t extralen[] = {strlen(j->gen)};
    redisReply *reply = script_step(r, j, "finish", 1, extra, extralen);
    if (!reply)
        return -1;
    int rc = 0;
    if (is_word(reply, "ok")) {
        r->stats.finished++;
        LB_INFO("decay",
                "rebuilt the overall board of '%s' (gen %s): %zu patches, %llu members in %lld ms",
                j->board, j->gen, j->npatches, (unsigned long long)j->members,
                (long long)(now_ms - j->started_ms));
    } else if (is_word(reply, "stale")) {
        rc = 1;
    } else {
        refused(r, j, reply, "finish");
        rc = -1;
    }
    freeReplyObject(reply);
    return rc == 0 ? 2 : rc;
}

/* One step of job 'i'. Returns 1 when the job is done. */
static int step(struct lb_rebuild *r, size_t i, int64_t now_ms)
{
    struct job *j = &r->jobs[i];
    int rc = 0;
    switch (j->phase) {
    case TAKE:
        rc = take(r, j, now_ms);
        if (rc == 1)
            return 1;
        break;
    case PAGE:
        rc = j->patch == j->npatches ? (j->phase = FINISH, 0) : page(r, j);
        break;
    case FINISH:
        rc = finish(r, j, now_ms);
        if (rc == 2)
            return 1;
        break;
    }
    if (rc == 1) { /* the gen moved on, or the lease went: from the start */
        r->stats.restarts++;
        j->phase = TAKE;
    } else if (rc < 0) {
        j->next_ms = now_ms + 1000;
    }
    return 0;
}

size_t lb_rebuild_step(struct lb_rebuild *r, int64_t now_ms)
{
    if (now_ms - r->last_step_ms < r->o.interval_ms)
        return r->count;
    for (size_t k = 0; k < r->count; k++) {
        size_t i = (r->turn + k) % r->count;
        if (r->jobs[i].next_ms > now_ms)
            continue;
        r->last_step_ms = now_ms;
        r->turn = i + 1;
        if (step(r, i, now_ms))
            job_remove(r, i);
        return r->count;
    }
    if (r->sweep.on && (r->sweep.scan.running || now_ms >= r->sweep.next_ms)) {
        r->last_step_ms = now_ms;
        sweep_step(r, now_ms);
    }
    return r->count;
}

int lb_rebuild_busy(const struct lb_rebuild *r, int64_t now_ms)
{
    return r->count || (r->sweep.on && (r->sweep.scan.running || now_ms >= r->sweep.next_ms));
}

size_t lb_rebuild_drain(struct lb_rebuild *r, int64_t deadline_ms)
{
    int64_t now;
    while (r->count && (now = lb_monotonic_ms()) < deadline_ms) {
        size_t before = r->stats.failures + r->stats.busy;
        lb_rebuild_step(r, now);
        if (r->stats.failures + r->stats.busy != before)
            usleep(50000);
        else if (r->o.interval_ms)
            usleep((useconds_t)(r->o.interval_ms * 1000));
    }
    return r->count;
}

size_t lb_rebuild_pending(const struct lb_rebuild *r)
{
    return r->count;
}

const struct lb_rebuild_stats *lb_rebuild_stats(const struct lb_rebuild *r)
{
    return &r->stats;
}
