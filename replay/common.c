/* The helpers every part of replay uses: small containers, the selection,
 * signals, and calls into Redis retried through transient failures. */
#include "replay.h"

volatile sig_atomic_t replay_interrupted;

void replay_on_signal(int sig)
{
    (void)sig;
    replay_interrupted = 1;
}

double replay_mono_s(void)
{
    return (double)lb_monotonic_ms() / 1000.0;
}

/* Another run took the lease, or had it while this one was stalled: this
 * one stops. */
static void lease_lost(const struct replay *r)
{
    if (!replay_interrupted) {
        fprintf(stderr,
                "replay: the replay lease %s went to another run while this one was stalled; "
                "stopping\n",
                r->lease.key);
        replay_interrupted = 1;
    }
}

/* Renews the replay lease when due; losing it to another run stops this
 * one (-1, as once interrupted). */
int replay_keep_lease(struct replay *r)
{
    if (replay_lease_keep(&r->lease) != 0)
        lease_lost(r);
    return replay_interrupted ? -1 : 0;
}

/* ---- small containers ---------------------------------------------------------------- */

void replay_strings_add(struct strings *s, const char *text, size_t len)
{
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->items = realloc(s->items, s->cap * sizeof(*s->items));
        if (!s->items) {
            fprintf(stderr, "replay: out of memory\n");
            exit(EXIT_BROKEN);
        }
    }
    s->items[s->count] = strndup(text, len);
    if (!s->items[s->count]) {
        fprintf(stderr, "replay: out of memory\n");
        exit(EXIT_BROKEN);
    }
    s->count++;
}

void replay_strings_free(struct strings *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->items[i]);
    free(s->items);
    memset(s, 0, sizeof(*s));
}

void replay_names_add(struct lb_names *set, const char *id, size_t len)
{
    if (lb_names_add(set, id, len) < 0) {
        fprintf(stderr, "replay: out of memory\n");
        exit(EXIT_BROKEN);
    }
}

/* ---- the selection -------------------------------------------------------------------- */

/* Whether --board selects 'board' (a board's id, not a shard's tag). */
static int board_matches(const struct selection *sel, const char *board, size_t len)
{
    if (!sel->boards.count)
        return 1;
    char id[LB_ID_MAX_BYTES + 1];
    snprintf(id, sizeof(id), "%.*s", (int)len, board);
    for (size_t i = 0; i < sel->boards.count; i++)
        if (fnmatch(sel->boards.items[i], id, 0) == 0)
            return 1;
    return 0;
}

int replay_board_selected(const struct selection *sel, const char *tag, size_t len)
{
    uint16_t slot = lb_crc16(tag, len) & (LB_SLOTS - 1);
    if (sel->any_slots && !sel->slots[slot])
        return 0;
    struct lb_str board = {tag, (uint32_t)len};
    uint32_t shard;
    if (sel->config && memchr(tag, '#', len))
        lb_shard_parse(sel->config->profiles, sel->config->nprofiles, board, &board, &shard);
    return board_matches(sel, board.ptr, board.len);
}

/* A split board's event: its windows are noted for their merged tops when
 * the selection covers its shard or the board's own tag (which holds the
 * tops). */
static void note_windows(struct selection *sel, const struct lb_event *ev,
                         const struct lb_profile *profile, uint16_t shard_slot)
{
    uint16_t own = lb_crc16(ev->board.ptr, ev->board.len) & (LB_SLOTS - 1);
    if (!board_matches(sel, ev->board.ptr, ev->board.len) ||
        (sel->any_slots && !sel->slots[shard_slot] && !sel->slots[own]))
        return;
    for (size_t w = 0; w < profile->nwindows; w++) {
        const struct lb_window_config *window = &profile->windows[w];
        struct lb_str value = {"", 0};
        struct lb_window_span span = {0, INT64_MIN, INT64_MAX};
        if (window->kind == LB_WINDOW_CUSTOM) {
            const struct lb_str *v = lb_event_dim(ev, window->dim, strlen(window->dim));
            if (!v || !v->len)
                continue;
            value = *v;
        } else
            lb_window_span(window->kind, ev->ts_ms, &span);
        char name[LB_WINDOW_NAME_MAX];
        size_t n = lb_window_name(window, span.id, value, name, sizeof(name));
        if (n && lb_tops_note(sel->tops, ev->board, profile, (struct lb_str){name, (uint32_t)n},
                              NULL, 0, lb_monotonic_ms()) != 0)
            LB_WARN("replay",
                    "out of memory: the merged top of window '%s' of board '%.*s' is "
                    "not refreshed",
                    name, (int)ev->board.len, ev->board.ptr);
    }
}

int replay_filter_event(void *ctx, const struct lb_event *ev)
{
    struct selection *sel = ctx;
    const struct lb_profile *profile =
        sel->config ? lb_config_profile_for(sel->config, ev->board.ptr, ev->board.len) : NULL;
    char tag[LB_TAG_MAX];
    struct lb_str id = ev->board;
    if (profile && profile->shards > 1) {
        uint32_t shards = (uint32_t)profile->shards;
        size_t len =
            lb_shard_tag(ev->board.ptr, ev->board.len, shards,
                         lb_player_shard(ev->player.ptr, ev->player.len, shards), tag, sizeof(tag));
        id = (struct lb_str){tag, (uint32_t)len};
        if (sel->tops)
            note_windows(sel, ev, profile, lb_crc16(tag, len) & (LB_SLOTS - 1));
    }
    if (!replay_board_selected(sel, id.ptr, id.len) || lb_names_has(&sel->done, id.ptr, id.len))
        return 0;
    replay_names_add(&sel->seen, id.ptr, id.len);
    return 1;
}

/* "0-5460,12000" */
int replay_parse_slots(const char *text, struct selection *sel)
{
    const char *p = text;
    while (*p) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p)
            return -1;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1)
                return -1;
            p = end;
        }
        if (lo < 0 || hi >= LB_SLOTS || lo > hi)
            return -1;
        for (long s = lo; s <= hi; s++)
            sel->slots[s] = 1;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    sel->any_slots = 1;
    return 0;
}

int replay_check_node(const char *node)
{
    const char *colon = strrchr(node, ':');
    char *end;
    if (!colon || colon == node)
        return -1;
    long port = strtol(colon + 1, &end, 10);
    return end == colon + 1 || *end || port < 1 || port > 65535 ? -1 : 0;
}

/* ---- talking to Redis ---------------------------------------------------------------- */

void replay_fault_pause(const char *name)
{
    const char *ms = getenv(name);
    if (ms && atol(ms) > 0)
        fprintf(stderr, "replay: %s: pausing %s ms\n", name, ms);
    for (long left = ms ? atol(ms) : 0; left > 0 && !replay_interrupted; left -= 50)
        usleep(50000);
}

#define RETRY_FOR_MS 120000 /* how long a transient failure is retried */

/* Waits before the next attempt of 'what' (the back-off doubles from 100 ms
 * to 2 s), saying why, at most every 5 s. Returns -1 when replay must stop
 * instead (interrupted, or transient failures for RETRY_FOR_MS). */
int replay_retry_pause(struct replay *r, const char *what, const char *why, int attempt,
                       int64_t since_ms)
{
    static struct lb_ratelimit said;
    uint64_t suppressed;
    int64_t backoff = attempt < 5 ? 100 << attempt : 2000;
    replay_keep_lease(r);
    if (replay_interrupted)
        return -1;
    if (lb_monotonic_ms() - since_ms > RETRY_FOR_MS) {
        fprintf(stderr, "replay: %s kept failing for %d s: %s\n", what, RETRY_FOR_MS / 1000, why);
        return -1;
    }
    if (lb_ratelimit_allow(&said, 5000, &suppressed))
        fprintf(stderr, "replay: %s failed (attempt %d): %s; retrying in %lld ms%s\n", what,
                attempt, why, (long long)backoff,
                suppressed ? " (earlier failures suppressed)" : "");
    for (int64_t left = backoff; left > 0 && !replay_interrupted; left -= 50)
        usleep(50000);
    return replay_interrupted ? -1 : 0;
}

/* One command on the master of 'slot', sent again after transient failures
 * (a node hanging up, failing over, or still loading), which is what nodes
 * do during the incidents replay is run for. Only for commands that can be
 * sent twice. Returns the reply, or NULL with the reason printed. '*tries'
 * (if given) says how many attempts were made. */
redisReply *replay_redis_call(struct replay *r, const char *what, uint16_t slot, int argc,
                              const char **argv, const size_t *argvlen, int *tries)
{
    int64_t since = lb_monotonic_ms();
    for (int attempt = 1;; attempt++) {
        redisReply *reply = lb_cluster_command(r->engine->cluster, slot, argc, argv, argvlen);
        if (tries)
            *tries = attempt;
        if (reply)
            return reply;
        if (lb_cluster_error_class(r->engine->cluster) != LB_REDIS_RETRY) {
            fprintf(stderr, "replay: %s failed: %s\n", what, lb_cluster_error(r->engine->cluster));
            return NULL;
        }
        if (replay_retry_pause(r, what, lb_cluster_error(r->engine->cluster), attempt, since) != 0)
            return NULL;
    }
}

/* lb_cluster_exec for requests that can be sent twice, sending the failed
 * ones again after transient failures. Returns 0 when all succeeded. */
int replay_exec_retrying(struct replay *r, const char *what, struct lb_request *reqs, size_t n)
{
    int64_t since = lb_monotonic_ms();
    size_t pending = n;
    struct lb_request *todo = reqs;
    for (int attempt = 1; pending; attempt++) {
        lb_cluster_exec(r->engine->cluster, todo, pending);
        size_t still = 0;
        const char *why = NULL;
        int fatal = 0;
        for (size_t i = 0; i < pending; i++) {
            if (todo[i].reply) {
                freeReplyObject(todo[i].reply);
                todo[i].reply = NULL;
            }
            if (todo[i].ok)
                continue;
            fatal |= todo[i].error_class != LB_REDIS_RETRY;
            todo[still++] = todo[i]; /* reqs is ours: compact the failed ones */
            why = todo[still - 1].error;
        }
        pending = still;
        if (!pending)
            break;
        if (fatal) {
            fprintf(stderr, "replay: %s failed: %s\n", what, why);
            return -1;
        }
        if (replay_retry_pause(r, what, why, attempt, since) != 0)
            return -1;
    }
    return 0;
}

/* ---- closed windows (README "Final standings") ------------------------------------- */

int replay_closed_unknown(const struct replay *r)
{
    if (!r->restore_failed)
        return 0;
    fprintf(stderr,
            "replay: the closed windows of a board could not be read from its ~final%s%s (see "
            "above): they would be rebuilt open; nothing more was swapped in. Run replay "
            "again.\n",
            r->config->results_topic ? " or put back from results topic " : "",
            r->config->results_topic ? r->config->results_topic : "");
    return 1;
}

/* The close offsets of a board's closed windows, read once from its live
 * ~final: "o:<window>" -> "topic:partition=offset,...". */
struct closed_board {
    const char *board;       /* r->closed_boards' copy */
    redisReply *fields;      /* HGETALL, or NULL: none */
    struct strings reopened; /* --republish: its windows this run reopened, not yet marked */
};

static redisReply *read_final(struct replay *r, struct lb_str board)
{
    char key[1024];
    size_t klen = lb_board_key(r->config->key_prefix, board, LB_FINAL_KEY, key, sizeof(key));
    const char *argv[] = {"HGETALL", key};
    size_t argvlen[] = {7, klen};
    /* the lease's connections: the engine's carry batches in flight;
     * retried while Redis recovers, as every call of replay's */
    redisReply *reply;
    int64_t since = lb_monotonic_ms();
    for (int attempt = 1;; attempt++) {
        reply = lb_cluster_command(r->lease_cluster, lb_key_slot(key, klen), 2, argv, argvlen);
        if (reply || lb_cluster_error_class(r->lease_cluster) != LB_REDIS_RETRY ||
            replay_retry_pause(r, "reading a board's ~final", lb_cluster_error(r->lease_cluster),
                               attempt, since) != 0)
            break;
    }
    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements)
        return reply;
    if (!reply) { /* which windows closed is not known: they could be rebuilt open */
        LB_ERROR("replay", "reading %s: %s", key, lb_cluster_error(r->lease_cluster));
        r->restore_failed = 1;
    } else {
        if (reply->type != REDIS_REPLY_ARRAY) {
            LB_ERROR("replay", "reading %s: %s", key,
                     reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            r->restore_failed = 1;
        }
        freeReplyObject(reply);
    }
    return NULL;
}

struct restoring {
    struct replay *r;
    const char *board;
    const redisReply *fields;
    int any;
};

/* A window the results topic holds and the board's ~final does not name:
 * put back before the board is rebuilt (published.h). */
static void restore_window(void *ctx, const char *window)
{
    struct restoring *rs = ctx;
    struct replay *r = rs->r;
    for (size_t i = 0; rs->fields && i + 1 < rs->fields->elements; i += 2) {
        const char *f = rs->fields->element[i]->str;
        if (strncmp(f, "s:", 2) == 0 && strcmp(f + 2, window) == 0)
            return;
    }
    const struct lb_profile *profile =
        lb_config_profile_for(r->config, rs->board, strlen(rs->board));
    if (!profile)
        return; /* no profile takes the board any more: nothing of it is rebuilt */
    char err[512];
    struct lb_publication pub = {0};
    int fetched =
        lb_published_fetch(r->published, rs->board, window, &pub, 30000, err, sizeof(err));
    int rc = fetched == 0
                 ? lb_published_restore(r->lease_cluster, r->config->key_prefix, profile, rs->board,
                                        window, &pub, r->config->results_keep, err, sizeof(err))
             : fetched == 1 ? 0 /* not published after all */
                            : -1;
    lb_publication_free(&pub);
    if (rc < 0) {
        LB_ERROR("replay", "%s", err);
        r->restore_failed = 1;
        return;
    }
    r->restored += (size_t)rc;
    /* read ~final again whether this put the window back or a pod's closer
     * just did ("present"): the fields read before lack it, and a window
     * filtered by them would be rebuilt open */
    rs->any |= fetched == 0;
}

struct step_retry {
    struct replay *r;
    char what[700];
    int64_t since_ms;
};

static int step_pause(void *ctx, const char *why, int attempt)
{
    struct step_retry *s = ctx;
    return replay_retry_pause(s->r, s->what, why, attempt, s->since_ms);
}

/* One step of --republish on a window's ~final (replay_final_step), retried
 * as every call of replay's; '*done' when it took effect. */
static redisReply *final_step(struct replay *r, const char *board, const char *window,
                              const char *step, int *done)
{
    struct step_retry s = {r, "", lb_monotonic_ms()};
    snprintf(s.what, sizeof(s.what), "the %s step of board '%s' window '%s'", step, board, window);
    redisReply *reply = replay_final_step(&r->lease, r->config->key_prefix, board, window, step,
                                          step_pause, &s, done);
    if (!r->lease.held)
        lease_lost(r);
    return reply;
}

static void say_step_failed(struct replay *r, const char *board, const char *window,
                            const char *step, const redisReply *reply)
{
    const char *what;
    const char *word = replay_answer_word(reply, &what);
    if (word && strcmp(word, "claimed") == 0)
        fprintf(stderr,
                "replay: board '%s' window '%s' is being published now (claimed by %s): run "
                "replay --republish again once it is published (a minute at most)\n",
                board, window, *what ? what : "a pod");
    else if (word && strcmp(word, "taken") == 0)
        fprintf(stderr,
                "replay: board '%s' window '%s': %s: not done, a later replay run reopened it "
                "(%s)\n",
                board, window, step, what);
    else if (word && strcmp(word, "stale") == 0)
        fprintf(stderr,
                "replay: board '%s' window '%s': %s: its ~final says %s, not reopening: run "
                "the same replay again\n",
                board, window, step, *what ? what : "nothing (lost)");
    else
        fprintf(stderr, "replay: board '%s' window '%s': %s: %s%s%s%s\n", board, window, step,
                !reply && !r->lease.held ? "stopped: the replay lease is another run's now"
                : !reply                 ? lb_cluster_error(r->lease_cluster)
                : reply->type == REDIS_REPLY_ERROR ? reply->str
                : word                             ? "the script answered "
                                                   : "unexpected answer",
                word ? word : "", *what ? " " : "", what);
}

/* Whether the live key of 'window' ("daily:2026-05-04") of 'board' has
 * expired (its ttl after the window's end passed): a window rebuilt then
 * would stay empty, and its final standings must stand. */
static int window_expired(const struct replay *r, const char *board, const char *window)
{
    const struct lb_profile *profile = lb_config_profile_for(r->config, board, strlen(board));
    enum lb_window_kind kind;
    int64_t id;
    if (!profile || lb_window_name_parse(window, &kind, &id) != 0)
        return 0;
    struct lb_window_span span;
    lb_window_span_of(kind, id, &span);
    for (size_t i = 0; i < profile->nwindows; i++)
        if (profile->windows[i].kind == kind && profile->windows[i].ttl_ms &&
            span.end_ms <= lb_wall_ms() - profile->windows[i].ttl_ms)
            return 1;
    return 0;
}

/* --republish: a window an earlier run left reopening whose live key has
 * since expired cannot be rebuilt: it is put back as published, as it
 * closed (its final key and its record stand), and its note goes. */
static void put_back(struct replay *r, struct closed_board *cb, const char *window)
{
    int done;
    redisReply *reply = final_step(r, cb->board, window, "unreopen", &done);
    if (done) {
        replay_journal_reopening(&r->lease, cb->board, window, 0);
        fprintf(stderr,
                "replay: board '%s' window '%s' was left reopening and its live key expired "
                "(ttl): not rebuilt, published again as it closed (its final standings stand)\n",
                cb->board, window);
    } else {
        say_step_failed(r, cb->board, window, "unreopen", reply);
        r->reopen_failed = 1;
    }
    if (reply)
        freeReplyObject(reply);
}

/* --republish: the board's closed windows in the selection are reopened
 * before its events are read (the apply script's reopen step): nobody
 * closes them while replay rebuilds them from every event, and the pods
 * write them again meanwhile. 1 when one was. */
static int reopen(struct replay *r, struct closed_board *cb)
{
    int any = 0;
    for (size_t i = 0; cb->fields && i + 1 < cb->fields->elements && r->lease.held; i += 2) {
        const char *f = cb->fields->element[i]->str;
        if (strncmp(f, "s:", 2) != 0)
            continue;
        int selected = !r->sel.windows.count;
        for (size_t k = 0; k < r->sel.windows.count && !selected; k++)
            selected = strcmp(r->sel.windows.items[k], f + 2) == 0;
        if (!selected)
            continue;
        if (window_expired(r, cb->board, f + 2)) {
            const char *state = cb->fields->element[i + 1]->str;
            if (state && strcmp(state, "reopening") == 0)
                put_back(r, cb, f + 2);
            else
                fprintf(stderr,
                        "replay: board '%s' window '%s' not reopened: its live key expired "
                        "(ttl), so its final standings stand as published\n",
                        cb->board, f + 2);
            continue;
        }
        /* noted first: a run killed next leaves it named, never unnamed */
        if (replay_journal_reopening(&r->lease, cb->board, f + 2, 1) != 0) {
            fprintf(stderr, "replay: board '%s' window '%s' not reopened (see above)\n", cb->board,
                    f + 2);
            r->reopen_failed = 1;
            continue;
        }
        int done;
        redisReply *reply = final_step(r, cb->board, f + 2, "reopen", &done);
        const char *word = replay_answer_word(reply, NULL);
        if (done) {
            replay_strings_add(&cb->reopened, f + 2, strlen(f + 2));
            r->reopened++;
            any = 1;
        } else {
            /* not reopening only when the script said so */
            if (word && (strcmp(word, "open") == 0 || strcmp(word, "claimed") == 0))
                replay_journal_reopening(&r->lease, cb->board, f + 2, 0);
            if (!word || strcmp(word, "open") != 0) {
                say_step_failed(r, cb->board, f + 2, "reopen", reply);
                r->reopen_failed = 1;
            }
        }
        if (reply)
            freeReplyObject(reply);
    }
    return any;
}

int replay_mark_reopened(struct replay *r, const char *board)
{
    long at = lb_names_find(&r->closed_boards, board, strlen(board));
    struct closed_board *cb = at >= 0 ? &r->closed[at] : NULL;
    int rc = 0;
    if (cb && cb->reopened.count)
        replay_fault_pause("LB_FAULT_REOPENED_PAUSE_MS");
    for (size_t k = 0; cb && k < cb->reopened.count && r->lease.held; k++) {
        int done;
        redisReply *reply = final_step(r, board, cb->reopened.items[k], "reopened", &done);
        if (done) {
            r->republished++;
            replay_journal_reopening(&r->lease, board, cb->reopened.items[k], 0);
        } else {
            say_step_failed(r, board, cb->reopened.items[k], "reopened", reply);
            rc = -1;
        }
        if (reply)
            freeReplyObject(reply);
    }
    if (cb && rc == 0)
        replay_strings_free(&cb->reopened);
    return rc;
}

/* Whether a step of replay's end that failed by 'eclass' ('why') is tried
 * again: transient failures (a node hanging up, failing over), after the
 * pause of replay_retry_pause, as every call of replay's. */
static int again(struct replay *r, const char *what, enum lb_redis_error eclass, const char *why,
                 int attempt, int64_t since_ms)
{
    return eclass == LB_REDIS_RETRY && replay_retry_pause(r, what, why, attempt, since_ms) == 0;
}

void replay_announce_reopened(struct replay *r)
{
    redisReply *reply;
    replay_fault_pause("LB_FAULT_ANNOUNCE_PAUSE_MS");
    int64_t since = lb_monotonic_ms();
    for (int attempt = 1;; attempt++) {
        reply = lb_reopened_touch(r->lease_cluster, r->config->key_prefix, r->lease.owner);
        if (reply || !again(r, "telling the pods", lb_cluster_error_class(r->lease_cluster),
                            lb_cluster_error(r->lease_cluster), attempt, since))
            break;
    }
    if (!reply || reply->type == REDIS_REPLY_ERROR)
        fprintf(stderr,
                "replay: could not tell the pods (%s%s %s): they find what it changed (windows "
                "reopened, slots marked) within a minute\n",
                r->config->key_prefix, LB_REOPENED_KEY,
                !reply ? lb_cluster_error(r->lease_cluster) : reply->str);
    if (reply)
        freeReplyObject(reply);
}

/* lb_intact_missing and lb_intact_mark, sent again after transient
 * failures (both can be); each after the fault pause, for the tests */
static long missing_retrying(struct replay *r, uint8_t *missing, char *err, size_t errlen)
{
    enum lb_redis_error eclass;
    int64_t since = lb_monotonic_ms();
    replay_fault_pause("LB_FAULT_INTACT_PAUSE_MS");
    for (int attempt = 1;; attempt++) {
        long n = lb_intact_missing(r->lease_cluster, r->config->key_prefix, missing, err, errlen,
                                   &eclass);
        if (n >= 0 || !again(r, "reading the slots' ~intact marks", eclass, err, attempt, since))
            return n;
    }
}

static int mark_retrying(struct replay *r, const uint8_t *which, const char *by, char *err,
                         size_t errlen)
{
    enum lb_redis_error eclass;
    int64_t since = lb_monotonic_ms();
    replay_fault_pause("LB_FAULT_INTACT_PAUSE_MS");
    for (int attempt = 1;; attempt++) {
        int rc = lb_intact_mark(r->lease_cluster, r->config->key_prefix, which, by, err, errlen,
                                &eclass);
        if (rc == 0 || !again(r, "writing the slots' ~intact marks", eclass, err, attempt, since))
            return rc;
    }
}

int replay_mark_intact(struct replay *r)
{
    if (!r->sel.any_slots || r->sel.boards.count || r->sel.windows.count)
        return 0; /* some boards of the slots, not their whole shard */
    uint8_t *which = malloc(LB_SLOTS);
    char err[256], by[300];
    long n = which ? missing_retrying(r, which, err, sizeof(err))
                   : (snprintf(err, sizeof(err), "out of memory"), -1);
    size_t lost = 0, selected = 0;
    for (uint32_t s = 0; s < LB_SLOTS; s++) {
        selected += r->sel.slots[s];
        if (n > 0) {
            which[s] = which[s] && r->sel.slots[s];
            lost += which[s];
        }
    }
    snprintf(by, sizeof(by), "replay %s", r->lease.owner);
    int rc = n < 0 ? -1 : 0;
    if (n < 0 || !lost) {
        /* failed, or every selected slot has its mark */
    } else if (strcmp(r->o.from, "earliest") != 0) {
        printf("replay: %zu slot(s) without a %s mark left so: --from %s rebuilt part of their "
               "events only; their boards' windows close once a replay --node (or --slots) "
               "from the earliest offsets has rebuilt them\n",
               lost, LB_INTACT_KEY, r->o.from);
    } else if (n == LB_SLOTS && selected < LB_SLOTS) {
        /* no pod with final standings has run this release yet: the first
         * to start marks every slot */
        printf("replay: no slot of the cluster has a %s mark: none written (the first pod to "
               "start marks every slot; if every shard was lost, replay --slots 0-16383 marks "
               "them)\n",
               LB_INTACT_KEY);
    } else if ((rc = mark_retrying(r, which, by, err, sizeof(err))) == 0) {
        printf("replay: %zu slot(s) without a %s mark (their node replaced empty or flushed) "
               "marked rebuilt: their boards' windows close again\n",
               lost, LB_INTACT_KEY);
        replay_announce_reopened(r); /* the pods read the marks at once */
    }
    if (rc != 0)
        fprintf(stderr,
                "replay: the rebuilt slots' %s marks not written (%s): closed windows of their "
                "boards wait; run the same replay again\n",
                LB_INTACT_KEY, err);
    free(which);
    return rc;
}

void replay_report_reopening(const struct replay *r)
{
    for (size_t i = 0; i < r->closed_boards.count; i++)
        for (size_t k = 0; k < r->closed[i].reopened.count; k++)
            fprintf(stderr,
                    "replay: board '%s' window '%s' is left reopening: no pod closes it until "
                    "a replay --republish of it completes\n",
                    r->closed[i].board, r->closed[i].reopened.items[k]);
}

static const redisReply *closed_fields(struct replay *r, struct lb_str board)
{
    long at = lb_names_find(&r->closed_boards, board.ptr, board.len);
    if (at >= 0)
        return r->closed[at].fields;
    size_t n = r->closed_boards.count;
    struct closed_board *more = realloc(r->closed, (n + 1) * sizeof(*more));
    if (!more) {
        fprintf(stderr, "replay: out of memory\n");
        exit(EXIT_BROKEN);
    }
    r->closed = more;
    replay_names_add(&r->closed_boards, board.ptr, board.len);
    struct closed_board *cb = &r->closed[n];
    *cb = (struct closed_board){r->closed_boards.items[n], NULL, {0}};
    cb->fields = read_final(r, board);
    if (r->published) {
        struct restoring rs = {r, cb->board, cb->fields, 0};
        lb_published_windows(r->published, cb->board, restore_window, &rs);
        if (rs.any) { /* read again, with what was put back */
            if (cb->fields)
                freeReplyObject(cb->fields);
            cb->fields = read_final(r, board);
        }
    }
    if (r->o.republish && reopen(r, cb)) { /* read again: they are open now */
        freeReplyObject(cb->fields);
        cb->fields = read_final(r, board);
    }
    return cb->fields;
}

int replay_closed_window(void *ctx, struct lb_str board, const struct lb_window_config *window,
                         int64_t window_id, const struct lb_position *pos)
{
    struct replay *r = ctx;
    const redisReply *fields = closed_fields(r, board);
    if (!fields)
        return 0;
    char name[LB_WINDOW_NAME_MAX], field[LB_WINDOW_NAME_MAX + 4], state[LB_WINDOW_NAME_MAX + 4],
        prefix[300];
    size_t n = lb_window_name(window, window_id, (struct lb_str){"", 0}, name, sizeof(name));
    snprintf(field, sizeof(field), "o:%.*s", (int)n, name);
    snprintf(state, sizeof(state), "s:%.*s", (int)n, name);
    int plen = snprintf(prefix, sizeof(prefix), "%s:%d=", pos->topic, pos->partition);
    const char *offsets = NULL;
    int closed = 0; /* claimed or published; reopening and reopened ones are open */
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const char *f = fields->element[i]->str, *v = fields->element[i + 1]->str;
        if (strcmp(f, state) == 0)
            closed = strcmp(v, "claimed") == 0 || strcmp(v, "published") == 0;
        else if (strcmp(f, field) == 0)
            offsets = v;
    }
    if (!closed || !offsets)
        return 0;
    /* closed: the events at or past its close offset of the partition came
     * after; a partition it does not name had none before */
    for (const char *p = offsets; p && *p; p = strchr(p, ',')) {
        if (*p == ',')
            p++;
        if (strncmp(p, prefix, (size_t)plen) == 0)
            return pos->offset >= strtoll(p + plen, NULL, 10);
    }
    return 1;
}

void replay_closed_free(struct replay *r)
{
    for (size_t i = 0; i < r->closed_boards.count; i++) {
        replay_strings_free(&r->closed[i].reopened);
        if (r->closed[i].fields)
            freeReplyObject(r->closed[i].fields);
    }
    free(r->closed);
    r->closed = NULL;
    lb_names_free(&r->closed_boards);
}
