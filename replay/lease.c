/* The replay lease and journal; see lease.h.
 *
 * The lease value names its owner by host and pid, so a run that finds the
 * lease of a process that died on this host (SIGKILL, OOM killer) need not
 * wait for the TTL; a lease from another host is only ever waited out.
 * Renewal and release compare the value first, in one script, so a run
 * never extends or deletes a lease another run has taken since.
 */
#include "lease.h"
#include "apply.h"
#include "clock.h"
#include "published.h"
#include "slot.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char renew_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "end\n"
    "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 2 or 0\n";

static const char release_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                     "  return redis.call('DEL', KEYS[1])\n"
                                     "end\n"
                                     "return 0\n";

/* The lease still ours (not taken again: see draw_epoch): 1, else 0. */
static const char confirm_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                     "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                     "end\n"
                                     "return 0\n";

/* The next epoch: the counter's next number, or the server's time in ms if
 * that is larger (a counter lost with its master, or rolled back by a
 * failover, still gives numbers above those drawn before). */
static const char draw_script[] =
    "local n = redis.call('INCR', KEYS[1])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "if n < now then\n"
    "  redis.call('SET', KEYS[1], string.format('%.0f', now))\n"
    "  n = now\n"
    "end\n"
    "return n\n";

/* Takes over a dead run's lease; ours already (this script sent again
 * after its reply was lost) answers taken too. */
static const char takeover_script[] = "local v = redis.call('GET', KEYS[1])\n"
                                      "if v == ARGV[1] or v == ARGV[2] then\n"
                                      "  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
                                      "  return 1\n"
                                      "end\n"
                                      "return 0\n";

/* Runs one command on the master of 'key', sent up to 'tries' times over
 * about three seconds when the failure is transient (a node hanging up or
 * failing over): every command here can be sent twice. */
static redisReply *command_tries(struct lb_cluster *cl, const char *key, int argc,
                                 const char **argv, int tries)
{
    size_t argvlen[12];
    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    for (int attempt = 1;; attempt++) {
        redisReply *reply =
            lb_cluster_command(cl, lb_key_slot(key, strlen(key)), argc, argv, argvlen);
        if (reply || attempt >= tries || lb_cluster_error_class(cl) != LB_REDIS_RETRY)
            return reply;
        usleep((useconds_t)(100000 << (attempt < 4 ? attempt - 1 : 3)));
    }
}

static redisReply *command(struct lb_cluster *cl, const char *key, int argc, const char **argv)
{
    return command_tries(cl, key, argc, argv, 6);
}

static redisReply *eval(struct lb_cluster *cl, const char *script, const char *key,
                        const char *arg1, const char *arg2, const char *arg3)
{
    const char *argv[] = {"EVAL", script, "1", key, arg1, arg2, arg3};
    return command(cl, key, 4 + (arg1 != NULL) + (arg2 != NULL) + (arg3 != NULL), argv);
}

static int reply_integer(redisReply *reply, long long *value)
{
    int ok = reply && reply->type == REDIS_REPLY_INTEGER;
    if (ok)
        *value = reply->integer;
    if (reply)
        freeReplyObject(reply);
    return ok ? 0 : -1;
}

static void owner_name(char *out, size_t cap)
{
    char host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == ' ')
            *p = '_';
    snprintf(out, cap, "%s %ld %lld", host, (long)getpid(), (long long)lb_wall_ms());
}

/* Whether 'owner' is a process of this host that no longer runs. */
static int owner_is_dead_here(const char *owner)
{
    char host[64] = "", mine[64] = "?";
    long pid = 0;
    gethostname(mine, sizeof(mine) - 1);
    mine[sizeof(mine) - 1] = '\0';
    for (char *p = mine; *p; p++)
        if (*p == ' ')
            *p = '_';
    if (sscanf(owner, "%63s %ld", host, &pid) != 2 || pid <= 0 || strcmp(host, mine) != 0)
        return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static void describe_owner(const char *owner, char *out, size_t cap)
{
    char host[64] = "?";
    long pid = 0;
    long long started = 0;
    if (sscanf(owner, "%63s %ld %lld", host, &pid, &started) != 3) {
        snprintf(out, cap, "'%.100s'", owner);
        return;
    }
    time_t secs = (time_t)(started / 1000);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&secs, &tm))
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(out, cap, "pid %ld on host %s, started %s", pid, host, when);
}

/* Draws the held lease's epoch, then checks the lease is still ours: a
 * run that takes it from then on draws a larger number. A lease found
 * expired then is not taken again (renew() would): another run may have
 * had it and drawn a larger one meanwhile. 0 done, 1 the lease went to
 * another run meanwhile, -1 Redis failed. */
static int draw_epoch(struct replay_lease *lease, char *why, size_t whylen)
{
    char ttl[24];
    const char *key = lease->epoch_key;
    snprintf(ttl, sizeof(ttl), "%d", lease->ttl_ms);
    long long epoch = 0, ours = 0;
    int rc = reply_integer(eval(lease->cluster, draw_script, key, NULL, NULL, NULL), &epoch);
    if (rc != 0) {
        snprintf(why, whylen, "cannot draw the replay epoch %s: %s", key,
                 lb_cluster_error(lease->cluster));
    } else if (reply_integer(
                   eval(lease->cluster, confirm_script, lease->key, lease->owner, ttl, NULL),
                   &ours) != 0) {
        rc = -1;
        snprintf(why, whylen, "cannot renew the replay lease %s: %s", lease->key,
                 lb_cluster_error(lease->cluster));
    } else if (ours != 1) {
        rc = 1;
        lease->held = 0;
        snprintf(why, whylen,
                 "the replay lease %s went to another run while this one was taking it; try "
                 "again",
                 lease->key);
    }
    if (rc != 0) {
        replay_lease_release(lease);
        return rc;
    }
    lease->epoch = epoch;
    lease->renewed_ms = lb_monotonic_ms();
    lease->renewed_wall_ms = lb_wall_ms();
    return 0;
}

/* The lease is ours: holds it (draw_epoch gives it back on failure, and
 * notes when it was confirmed) and draws its epoch. */
static int hold(struct replay_lease *lease, char *why, size_t whylen)
{
    lease->held = 1;
    return draw_epoch(lease, why, whylen);
}

int replay_lease_take(struct replay_lease *lease, struct lb_cluster *cluster, const char *prefix,
                      char *why, size_t whylen)
{
    char ttl[24];
    memset(lease, 0, sizeof(*lease));
    lease->cluster = cluster;
    snprintf(lease->key, sizeof(lease->key), "%s~replay-lease", prefix);
    snprintf(lease->journal, sizeof(lease->journal), "%s~replay-journal", prefix);
    snprintf(lease->reopening, sizeof(lease->reopening), "%s~replay-reopening", prefix);
    snprintf(lease->epoch_key, sizeof(lease->epoch_key), "%s~replay-epoch", prefix);
    owner_name(lease->owner, sizeof(lease->owner));
    const char *fault = getenv("LB_FAULT_LEASE_TTL_MS"); /* tests: a lease that runs out soon */
    lease->ttl_ms = fault && atoi(fault) > 0 ? atoi(fault) : LB_LEASE_TTL_MS;
    snprintf(ttl, sizeof(ttl), "%d", lease->ttl_ms);

    for (int attempt = 0; attempt < 2; attempt++) {
        const char *set[] = {"SET", lease->key, lease->owner, "NX", "PX", ttl};
        redisReply *reply = command(cluster, lease->key, 6, set);
        if (!reply) {
            snprintf(why, whylen, "cannot take the replay lease %s: %s", lease->key,
                     lb_cluster_error(cluster));
            return -1;
        }
        int taken = reply->type == REDIS_REPLY_STATUS;
        freeReplyObject(reply);
        if (taken)
            return hold(lease, why, whylen);
        const char *get[] = {"GET", lease->key};
        reply = command(cluster, lease->key, 2, get);
        if (!reply || (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_NIL)) {
            snprintf(why, whylen, "cannot read the replay lease %s: %s", lease->key,
                     reply ? "unexpected reply" : lb_cluster_error(cluster));
            if (reply)
                freeReplyObject(reply);
            return -1;
        }
        if (reply->type == REDIS_REPLY_NIL) { /* expired meanwhile: try again */
            freeReplyObject(reply);
            continue;
        }
        char holder[160];
        snprintf(holder, sizeof(holder), "%s", reply->str);
        freeReplyObject(reply);
        if (strcmp(holder, lease->owner) == 0) {
            /* ours: a command of ours was applied but its reply lost (the
             * node hung up), and command() sent it again */
            return hold(lease, why, whylen);
        }
        if (owner_is_dead_here(holder)) {
            long long swapped = 0;
            if (reply_integer(eval(cluster, takeover_script, lease->key, holder, lease->owner, ttl),
                              &swapped) == 0 &&
                swapped == 1)
                return hold(lease, why, whylen);
            continue;
        }
        char who[200];
        describe_owner(holder, who, sizeof(who));
        snprintf(why, whylen,
                 "another replay is running on this keyspace (%s); wait for it to finish (its "
                 "lease %s expires %d s after that run stops)",
                 who, lease->key, lease->ttl_ms / 1000);
        return 1;
    }
    snprintf(why, whylen, "the replay lease %s keeps changing hands; try again", lease->key);
    return 1;
}

/* Whether the journal still names us: a lease we took again after it
 * expired was nobody's meanwhile only if no run started its own journal
 * (a run that finished deleted it, one that failed left its own). */
static int journal_ours(struct replay_lease *lease)
{
    const char *argv[] = {"HGET", lease->journal, "owner"};
    redisReply *reply = command_tries(lease->cluster, lease->journal, 3, argv, 1);
    int ours = reply && reply->type == REDIS_REPLY_STRING && strcmp(reply->str, lease->owner) == 0;
    if (reply)
        freeReplyObject(reply);
    return ours;
}

/* Whether the last epoch drawn is still ours: no run took the lease since. */
static int epoch_ours(struct replay_lease *lease)
{
    const char *argv[] = {"GET", lease->epoch_key};
    redisReply *reply = command_tries(lease->cluster, lease->epoch_key, 2, argv, 1);
    int ours = reply && reply->type == REDIS_REPLY_STRING && atoll(reply->str) == lease->epoch;
    if (reply)
        freeReplyObject(reply);
    return ours;
}

/* Renews the held lease now, in one try (the callers try again, each in
 * its own time): 0 when it is ours (again, if it had expired and nobody
 * took it), 1 when another run holds it or held it meanwhile (no longer
 * held), -1 when Redis failed (lb_cluster_error says why). */
static int renew(struct replay_lease *lease)
{
    char ttl[24];
    long long renewed = 0;
    if (!lease->held)
        return 1;
    snprintf(ttl, sizeof(ttl), "%d", lease->ttl_ms);
    const char *argv[] = {"EVAL", renew_script, "1", lease->key, lease->owner, ttl};
    if (reply_integer(command_tries(lease->cluster, lease->key, 6, argv, 1), &renewed) != 0) {
        lease->unsure = 1; /* it may have taken the lease again, its reply lost */
        return -1;
    }
    /* taken again: nobody may have drawn an epoch since ours (a run that
     * took the lease meanwhile did, and may have cleared and rebuilt while
     * we were stalled), and once our journal began it must still be ours
     * (a failure to read either counts as a loss too: stopping is safe,
     * going on may not be) */
    if ((renewed == 2 || (renewed && lease->unsure)) &&
        (!epoch_ours(lease) || (lease->journaled && !journal_ours(lease)))) {
        replay_lease_release(lease);
        renewed = 0;
    }
    if (!renewed) {
        lease->held = 0;
        return 1;
    }
    lease->unsure = 0;
    lease->renewed_ms = lb_monotonic_ms();
    lease->renewed_wall_ms = lb_wall_ms();
    return 0;
}

int replay_lease_keep(struct replay_lease *lease)
{
    if (lease->lost)
        return -1;
    int64_t mono = lb_monotonic_ms() - lease->renewed_ms,
            wall = lb_wall_ms() - lease->renewed_wall_ms, due = lease->ttl_ms / 3;
    if (!lease->held || (mono < due && wall >= 0 && wall < due))
        return 0;
    return renew(lease) == 1 ? -1 : 0; /* Redis failing: the next call tries again */
}

/* A script found a later run's state: that run holds the lease, and
 * replay_lease_keep stops this one at its next write. */
static void lost_to_later_run(struct replay_lease *lease)
{
    lease->held = 0;
    lease->lost = 1;
}

void replay_lease_mark(const struct replay_lease *lease, char *out, size_t cap)
{
    snprintf(out, cap, "%lld %s", lease->epoch, lease->owner);
}

void replay_lease_release(struct replay_lease *lease)
{
    long long ignored;
    if (!lease->held)
        return;
    reply_integer(eval(lease->cluster, release_script, lease->key, lease->owner, NULL, NULL),
                  &ignored);
    lease->held = 0;
}

/* Appends 'text' to the list of examples 'list' (the first five). */
static void add_example(char *list, size_t cap, size_t count, const char *text)
{
    size_t used = strlen(list);
    if (count <= 5 && used + strlen(text) + 3 < cap)
        snprintf(list + used, cap - used, "%s%s", used ? ", " : "", text);
}

static void journal_field(struct replay_leftover *out, const char *name, const char *value)
{
    out->found = 1;
    if (strcmp(name, "owner") == 0)
        describe_owner(value, out->owner, sizeof(out->owner));
    else if (strcmp(name, "started") == 0)
        snprintf(out->started, sizeof(out->started), "%s", value);
    else if (strcmp(name, "selection") == 0)
        snprintf(out->selection, sizeof(out->selection), "%s", value);
    else if (strncmp(name, "swapped:", 8) == 0)
        add_example(out->examples, sizeof(out->examples), ++out->swapped, name + 8);
}

static int journal_eval(struct replay_lease *lease, const char *key, const char *script,
                        const char *a, const char *b, const char *c);
extern const char lb_note_lua[]; /* from the build (note_lua.c, from replay/note.lua) */

/* "<window> <board>": named when its ~final still says reopening (or could
 * not be read); otherwise the note is stale (a run killed just before its
 * reopen step or just after handing the window back) and, with 'tidy' (our
 * lease, held), deleted unless it is a later run's (note.lua: one that
 * took the lease while we were stalled, and noted it since we read). */
static void reopening_field(struct lb_cluster *cluster, const char *prefix, const char *key,
                            const char *name, struct replay_lease *tidy,
                            struct replay_leftover *out)
{
    const char *space = strchr(name, ' ');
    char text[300], final[600], field[300];
    if (!space)
        return;
    snprintf(field, sizeof(field), "s:%.*s", (int)(space - name), name);
    lb_board_key(prefix, (struct lb_str){space + 1, (uint32_t)strlen(space + 1)}, LB_FINAL_KEY,
                 final, sizeof(final));
    const char *hget[] = {"HGET", final, field};
    redisReply *reply = command(cluster, final, 3, hget);
    int stale = reply && (reply->type == REDIS_REPLY_NIL ||
                          (reply->type == REDIS_REPLY_STRING && strcmp(reply->str, "reopening")));
    if (reply)
        freeReplyObject(reply);
    if (stale) {
        char mark[200];
        if (tidy) {
            replay_lease_mark(tidy, mark, sizeof(mark));
            journal_eval(tidy, key, lb_note_lua, mark, name, "del");
        }
        return;
    }
    snprintf(text, sizeof(text), "%.*s of %s", (int)(space - name), name, space + 1);
    add_example(out->reopening_examples, sizeof(out->reopening_examples), ++out->reopening, text);
}

int replay_journal_read(struct lb_cluster *cluster, const char *prefix, struct replay_lease *tidy,
                        struct replay_leftover *out)
{
    char keys[2][256];
    memset(out, 0, sizeof(*out));
    snprintf(keys[0], sizeof(keys[0]), "%s~replay-journal", prefix);
    snprintf(keys[1], sizeof(keys[1]), "%s~replay-reopening", prefix);
    for (int k = 0; k < 2; k++) {
        char cursor[32] = "0";
        do {
            const char *argv[] = {"HSCAN", keys[k], cursor, "COUNT", "500"};
            redisReply *reply = command(cluster, keys[k], 5, argv);
            if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
                reply->element[0]->type != REDIS_REPLY_STRING ||
                reply->element[1]->type != REDIS_REPLY_ARRAY) {
                if (reply)
                    freeReplyObject(reply);
                return -1;
            }
            snprintf(cursor, sizeof(cursor), "%s", reply->element[0]->str);
            const redisReply *fields = reply->element[1];
            for (size_t i = 0; i + 1 < fields->elements; i += 2) {
                const char *name = fields->element[i]->str, *value = fields->element[i + 1]->str;
                if (name && value && k == 0)
                    journal_field(out, name, value);
                else if (name && k == 1)
                    reopening_field(cluster, prefix, keys[1], name, tidy, out);
            }
            freeReplyObject(reply);
        } while (strcmp(cursor, "0") != 0);
    }
    return 0;
}

/* The journal's entries, written by the run whose epoch it holds only, and
 * the journal deleted unless a later run's: a run that froze past its
 * lease, between its last renewal and one of these writes, leaves a later
 * run's alone (the reopening notes: note.lua). ARGV[1] our epoch, [2] a
 * field and [3] its value, or [2] "" to delete the journal; 0 when it is a
 * later run's, 2 when it is not ours to write (none, or an earlier run's:
 * our start failed, and said so; deleted at our end all the same, as our
 * start would have replaced it). */
static const char journal_entry_script[] =
    "local e = redis.call('HGET', KEYS[1], 'epoch')\n"
    "if e and (tonumber(e) or 0) > tonumber(ARGV[1]) then return 0 end\n"
    "if ARGV[2] == '' then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "if e ~= ARGV[1] then return 2 end\n"
    "redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])\n"
    "return 1\n";

/* Whether 'reply' (to a script on 'key' that answers an integer) is a
 * failure: said if so. */
static int update_failed(struct replay_lease *lease, const char *key, const redisReply *reply)
{
    if (reply && reply->type == REDIS_REPLY_INTEGER)
        return 0;
    fprintf(stderr, "replay: updating %s failed: %s\n", key,
            !reply                             ? lb_cluster_error(lease->cluster)
            : reply->type == REDIS_REPLY_ERROR ? reply->str
                                               : "unexpected reply");
    return 1;
}

/* Runs 'script' on 'key' (the journal or the notes) with 'a', 'b', 'c': 0
 * done (or no journal to write), 1 left alone (another run's, said), -1
 * failed (said). */
static int journal_eval(struct replay_lease *lease, const char *key, const char *script,
                        const char *a, const char *b, const char *c)
{
    if (!lease->held) { /* another run's now */
        fprintf(stderr, "replay: %s not updated: the replay lease is another run's\n", key);
        return -1;
    }
    redisReply *reply = eval(lease->cluster, script, key, a, b, c);
    if (update_failed(lease, key, reply)) {
        if (reply)
            freeReplyObject(reply);
        return -1;
    }
    int left = reply->integer == 0;
    freeReplyObject(reply);
    if (left) {
        fprintf(stderr,
                "replay: %s not updated: it is a later run's (the replay lease went to another "
                "run while this one was stalled)\n",
                key);
        lost_to_later_run(lease);
    }
    return left;
}

/* A new journal, unless it is a later run's (its epoch above ours): 1, or 0. */
static const char journal_script[] =
    "if (tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') or 0) > tonumber(ARGV[1]) then\n"
    "  return 0\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'started', ARGV[3], 'selection', ARGV[4],\n"
    "           'epoch', ARGV[1])\n"
    "return 1\n";

int replay_journal_start(struct replay_lease *lease, const char *selection)
{
    char started[40], epoch[24];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(started, sizeof(started), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(epoch, sizeof(epoch), "%lld", lease->epoch);
    const char *argv[] = {"EVAL", journal_script, "1",     lease->journal,
                          epoch,  lease->owner,   started, selection};
    lease->journaled = 1; /* begun, or failed: a lease taken again is checked against it */
    if (!lease->held)
        return 1;
    redisReply *reply = command(lease->cluster, lease->journal, 8, argv);
    long long begun = update_failed(lease, lease->journal, reply) || reply->integer;
    if (reply)
        freeReplyObject(reply);
    if (begun)
        return 0;
    lost_to_later_run(lease); /* its journal */
    return 1;
}

/* An entry of our journal: 'field' set to 'value', or the journal deleted
 * (field ""). */
static void journal_entry(struct replay_lease *lease, const char *field, const char *value)
{
    char epoch[24];
    snprintf(epoch, sizeof(epoch), "%lld", lease->epoch);
    journal_eval(lease, lease->journal, journal_entry_script, epoch, field, value);
}

void replay_journal_swapped(struct replay_lease *lease, const char *board)
{
    char field[300], when[24];
    snprintf(field, sizeof(field), "swapped:%s", board);
    snprintf(when, sizeof(when), "%lld", (long long)lb_wall_ms());
    journal_entry(lease, field, when);
}

void replay_journal_finish(struct replay_lease *lease)
{
    journal_entry(lease, "", "");
}

int replay_journal_reopening(struct replay_lease *lease, const char *board, const char *window,
                             int on)
{
    char field[600], mark[200];
    snprintf(field, sizeof(field), "%s %s", window, board);
    replay_lease_mark(lease, mark, sizeof(mark));
    return journal_eval(lease, lease->reopening, lb_note_lua, mark, field, on ? "set" : "del") ? -1
                                                                                               : 0;
}

void replay_fault_stop(const char *name)
{
    if (!getenv(name))
        return;
    fprintf(stderr, "replay: %s: stopping\n", name);
    raise(SIGSTOP);
}

/* The state a step sets, which the step sent again after its reply was
 * lost finds there: stale, and done. Only that state: a reopened window
 * found claimed or published could also be one a failover took back to
 * reopened or published before the reopen, and a pod then claimed while
 * replay rebuilt it (its standings frozen from the old key). Not done is
 * safe: replay exits 1, and a run again reopens it afresh. An unreopen
 * found published is what it asks for either way (pods do not move a
 * reopening window). */
static int step_done_before(const char *step, const char *state)
{
    if (strcmp(step, "reopened") == 0)
        return strcmp(state, "reopened") == 0;
    return strcmp(step, "unreopen") == 0 && strcmp(state, "published") == 0;
}

const char *replay_answer_word(const redisReply *reply, const char **second)
{
    int words = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
                reply->element[0]->type == REDIS_REPLY_STRING;
    if (second)
        *second = words && reply->elements > 1 && reply->element[1]->type == REDIS_REPLY_STRING
                      ? reply->element[1]->str
                      : "";
    return words ? reply->element[0]->str : NULL;
}

redisReply *replay_final_step(struct replay_lease *lease, const char *prefix, const char *board,
                              const char *window, const char *step,
                              int (*pause)(void *ctx, const char *why, int attempt), void *ctx,
                              int *done)
{
    redisReply *reply = NULL;
    int sent = 0; /* a try went out, and may have been applied */
    for (int attempt = 1;; attempt++) {
        /* the lease confirmed ours first: after an outage longer than its
         * TTL, another run may have taken it and be reopening this window */
        int held = renew(lease);
        if (held == 1)
            break;
        char why[300];
        const char *stop = getenv("LB_FAULT_STEP_STOP");
        if (held == 0 && !sent && stop && strcmp(stop, step) == 0)
            replay_fault_stop("LB_FAULT_STEP_STOP");
        if (held == 0) {
            char mark[200];
            replay_lease_mark(lease, mark, sizeof(mark));
            reply =
                lb_final_step(lease->cluster, prefix, board, window, step, mark, 0, NULL, NULL, 0);
            if (reply)
                break;
            sent = 1;
            snprintf(why, sizeof(why), "%s", lb_cluster_error(lease->cluster));
        } else {
            snprintf(why, sizeof(why), "renewing the replay lease %s: %s", lease->key,
                     lb_cluster_error(lease->cluster));
        }
        if (lb_cluster_error_class(lease->cluster) != LB_REDIS_RETRY ||
            pause(ctx, why, attempt) != 0)
            break;
    }
    const char *state;
    const char *word = replay_answer_word(reply, &state);
    if (word && strcmp(word, "taken") == 0)
        lost_to_later_run(lease); /* it reopened the window */
    *done = word && (strcmp(word, "ok") == 0 ||
                     (sent && strcmp(word, "stale") == 0 && step_done_before(step, state)));
    return reply;
}
