/* verify_state: the integration tests' independent oracle.
 *
 * Reads the events a test produced (loadgen's TSV), computes from the rules
 * in ARCHITECTURE.md what every leaderboard key must hold, then reads every
 * key under the prefix from every master with plain hiredis and compares:
 * keys, members, composite scores (exactly) and expiry times.
 *
 * It deliberately shares no code with the projector: windows come from the C
 * library's calendar (gmtime_r, timegm, strftime's %G-W%V), the composite
 * from the formula, so a bug in the engine cannot hide by being repeated
 * here.
 *
 * Credentials, when the cluster needs them, come from REDIS_USER and
 * REDIS_PASSWORD in the environment (as for ops/services.sh).
 *
 * Exit 0 when Redis matches, 1 on any difference, 2 on usage or I/O errors.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* ---- a string -> int64 hash map ------------------------------------------------- */

struct entry {
    char *key; /* "<redis key>\n<member>" or "<redis key>" */
    int64_t value;
    int64_t aux;
    int seen;
};

struct map {
    struct entry *slots;
    size_t cap, count;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static struct entry *map_get(struct map *m, const char *key, int create);

static void map_free(struct map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
}

static void map_grow(struct map *m)
{
    struct map bigger = {.cap = m->cap ? m->cap * 2 : 1024};
    bigger.slots = calloc(bigger.cap, sizeof(*bigger.slots));
    if (!bigger.slots) {
        fprintf(stderr, "verify_state: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key)
            continue;
        size_t pos = hash(m->slots[i].key) & (bigger.cap - 1);
        while (bigger.slots[pos].key)
            pos = (pos + 1) & (bigger.cap - 1);
        bigger.slots[pos] = m->slots[i];
        bigger.count++;
    }
    free(m->slots);
    *m = bigger;
}

static struct entry *map_get(struct map *m, const char *key, int create)
{
    if (create && (m->count + 1) * 2 > m->cap)
        map_grow(m);
    if (!m->cap)
        return NULL;
    size_t pos = hash(key) & (m->cap - 1);
    while (m->slots[pos].key) {
        if (strcmp(m->slots[pos].key, key) == 0)
            return &m->slots[pos];
        pos = (pos + 1) & (m->cap - 1);
    }
    if (!create)
        return NULL;
    m->slots[pos].key = strdup(key);
    m->count++;
    return &m->slots[pos];
}

/* ---- the rules ------------------------------------------------------------------- */

struct window {
    char kind[16]; /* alltime, daily, weekly, monthly */
    int64_t ttl_ms;
};

struct rules {
    const char *prefix;
    int64_t epoch_ms, horizon_ms, resolution_ms, score_min, score_max, now_ms;
    struct window windows[8];
    int nwindows;
    unsigned tie_bits;
};

static int parse_time(const char *text, int64_t *ms)
{
    struct tm tm = {0};
    const char *end = strptime(text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!end || *end)
        return -1;
    *ms = (int64_t)timegm(&tm) * 1000;
    return 0;
}

static int parse_windows(const char *spec, struct rules *r)
{
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", spec);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (r->nwindows == 8)
            return -1;
        struct window *w = &r->windows[r->nwindows++];
        char *colon = strchr(tok, ':');
        w->ttl_ms = 0;
        if (colon) {
            *colon = '\0';
            char *unit;
            long v = strtol(colon + 1, &unit, 10);
            if (strcmp(unit, "d") != 0)
                return -1;
            w->ttl_ms = v * INT64_C(86400000);
        }
        snprintf(w->kind, sizeof(w->kind), "%s", tok);
    }
    return 0;
}

/* Key suffix and [start, end) of the window of 'kind' holding ts. */
static void window_of(const char *kind, int64_t ts_ms, char *suffix, size_t cap, int64_t *end_ms)
{
    time_t secs = (time_t)(ts_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    struct tm day = tm;
    day.tm_hour = day.tm_min = day.tm_sec = 0;
    char label[32];
    *end_ms = 0;
    if (strcmp(kind, "daily") == 0) {
        strftime(label, sizeof(label), "%Y-%m-%d", &tm);
        *end_ms = ((int64_t)timegm(&day) + 86400) * 1000;
    } else if (strcmp(kind, "weekly") == 0) {
        strftime(label, sizeof(label), "%G-W%V", &tm);
        int since_monday = (tm.tm_wday + 6) % 7;
        *end_ms = ((int64_t)timegm(&day) + (7 - since_monday) * 86400) * 1000;
    } else if (strcmp(kind, "monthly") == 0) {
        strftime(label, sizeof(label), "%Y-%m", &tm);
        struct tm next = {.tm_year = tm.tm_year, .tm_mon = tm.tm_mon + 1, .tm_mday = 1};
        *end_ms = (int64_t)timegm(&next) * 1000;
    } else {
        snprintf(suffix, cap, "%s", kind);
        return;
    }
    snprintf(suffix, cap, "%s:%s", kind, label);
}

static int64_t composite_of(const struct rules *r, int64_t score, int64_t ts)
{
    int64_t scale = INT64_C(1) << r->tie_bits;
    return score * scale + (scale - 1 - (ts - r->epoch_ms) / r->resolution_ms);
}

static size_t load_events(const char *path, const struct rules *r, struct map *members,
                          struct map *keys)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    size_t applied = 0;
    if (!f) {
        fprintf(stderr, "verify_state: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    while (fgets(line, sizeof(line), f)) {
        char id[128], board[256], player[256], op[16], dim[64];
        long long score, ts;
        if (sscanf(line, "%127s %255s %255s %lld %lld %15s %63s", id, board, player, &score, &ts,
                   op, dim) != 7) {
            fprintf(stderr, "verify_state: bad line in %s: %s", path, line);
            exit(2);
        }
        if (strcmp(op, "SUBMIT") != 0)
            continue; /* retractions are not applied by this version */
        if (score < r->score_min || score > r->score_max || ts < r->epoch_ms || ts >= r->horizon_ms)
            continue; /* rejected by the projector */
        int64_t c = composite_of(r, score, ts);
        for (int w = 0; w < r->nwindows; w++) {
            char suffix[64], key[600], mkey[900];
            int64_t end_ms;
            window_of(r->windows[w].kind, ts, suffix, sizeof(suffix), &end_ms);
            int64_t expire = end_ms && r->windows[w].ttl_ms ? end_ms + r->windows[w].ttl_ms : 0;
            if (expire && expire <= r->now_ms)
                continue; /* expired window: not resurrected */
            snprintf(key, sizeof(key), "%s{%s}:%s", r->prefix, board, suffix);
            snprintf(mkey, sizeof(mkey), "%s\n%s", key, player);
            struct entry *k = map_get(keys, key, 1);
            k->aux = expire;
            struct entry *m = map_get(members, mkey, 0);
            if (!m) {
                m = map_get(members, mkey, 1);
                m->value = c;
                k->value++; /* members expected in this key */
            } else if (c > m->value) {
                m->value = c;
            }
        }
        applied++;
    }
    fclose(f);
    return applied;
}

/* ---- comparing with Redis ------------------------------------------------------- */

/* MIGRATE carries a key's TTL as a relative time, so a key that moved to
 * another node expires a few milliseconds off its absolute time; a test that
 * reshards allows that much with --expiry-slack-ms. */
static long long expiry_slack_ms;

struct report {
    size_t keys_found, members_checked, differences;
};

static void difference(struct report *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void difference(struct report *rep, const char *fmt, ...)
{
    if (rep->differences++ < 20) {
        va_list ap;
        va_start(ap, fmt);
        fputs("  difference: ", stdout);
        vprintf(fmt, ap);
        fputs("\n", stdout);
        va_end(ap);
    }
}

static void check_key(redisContext *c, const char *key, struct map *members, struct map *keys,
                      struct report *rep)
{
    struct entry *k = map_get(keys, key, 0);
    if (!k) {
        difference(rep, "unexpected key %s", key);
        return;
    }
    k->seen = 1;
    rep->keys_found++;
    redisReply *z = redisCommand(c, "ZRANGE %s 0 -1 WITHSCORES", key);
    if (!z || z->type != REDIS_REPLY_ARRAY) {
        difference(rep, "%s: not a sorted set", key);
        if (z)
            freeReplyObject(z);
        return;
    }
    size_t found = 0;
    for (size_t i = 0; i + 1 < z->elements; i += 2) {
        char mkey[900];
        snprintf(mkey, sizeof(mkey), "%s\n%s", key, z->element[i]->str);
        struct entry *m = map_get(members, mkey, 0);
        rep->members_checked++;
        char *end;
        double score = strtod(z->element[i + 1]->str, &end);
        if (!m) {
            difference(rep, "%s: unexpected member %s", key, z->element[i]->str);
            continue;
        }
        found++;
        if ((int64_t)score != m->value || (double)m->value != score)
            difference(rep, "%s: %s has %s, expected %lld", key, z->element[i]->str,
                       z->element[i + 1]->str, (long long)m->value);
    }
    if (found != (size_t)k->value)
        difference(rep, "%s: %zu of %lld expected members present", key, found,
                   (long long)k->value);
    freeReplyObject(z);

    redisReply *t = redisCommand(c, "PEXPIRETIME %s", key);
    if (t && t->type == REDIS_REPLY_INTEGER) {
        long long want = k->aux ? (long long)k->aux : -1;
        long long off = t->integer - want;
        if ((want == -1) != (t->integer == -1) || off > expiry_slack_ms || off < -expiry_slack_ms)
            difference(rep, "%s: expires at %lld, expected %lld", key, t->integer, want);
    }
    if (t)
        freeReplyObject(t);
}

static int scan_node(const char *host, int port, const struct rules *r, struct map *members,
                     struct map *keys, struct report *rep)
{
    struct timeval timeout = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, port, timeout);
    if (!c || c->err) {
        /* A dead node serves no slot; keys it should hold show up missing. */
        fprintf(stderr, "verify_state: skipping %s:%d: %s\n", host, port,
                c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return 0;
    }
    redisSetTimeout(c, timeout);
    const char *password = getenv("REDIS_PASSWORD"), *user = getenv("REDIS_USER");
    if (password && *password) {
        redisReply *auth = user && *user ? redisCommand(c, "AUTH %s %s", user, password)
                                         : redisCommand(c, "AUTH %s", password);
        int failed = !auth || auth->type == REDIS_REPLY_ERROR;
        if (auth)
            freeReplyObject(auth);
        if (failed) {
            fprintf(stderr, "verify_state: AUTH failed on %s:%d\n", host, port);
            redisFree(c);
            return -1;
        }
    }
    redisReply *role = redisCommand(c, "ROLE");
    int master = role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
                 strcmp(role->element[0]->str, "master") == 0;
    if (role)
        freeReplyObject(role);
    if (!master) {
        redisFree(c);
        return 0;
    }
    char cursor[32] = "0", pattern[256];
    snprintf(pattern, sizeof(pattern), "%s*", r->prefix);
    do {
        redisReply *s = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!s || s->type != REDIS_REPLY_ARRAY || s->elements != 2) {
            fprintf(stderr, "verify_state: SCAN failed on %s:%d\n", host, port);
            redisFree(c);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", s->element[0]->str);
        for (size_t i = 0; i < s->element[1]->elements; i++)
            check_key(c, s->element[1]->element[i]->str, members, keys, rep);
        freeReplyObject(s);
    } while (strcmp(cursor, "0") != 0);
    redisFree(c);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"events", required_argument, NULL, 'e'},
                                             {"nodes", required_argument, NULL, 'n'},
                                             {"prefix", required_argument, NULL, 'p'},
                                             {"epoch", required_argument, NULL, 'E'},
                                             {"horizon", required_argument, NULL, 'H'},
                                             {"resolution-ms", required_argument, NULL, 'r'},
                                             {"score-min", required_argument, NULL, 'a'},
                                             {"score-max", required_argument, NULL, 'b'},
                                             {"windows", required_argument, NULL, 'w'},
                                             {"expiry-slack-ms", required_argument, NULL, 'S'},
                                             {"now-ms", required_argument, NULL, 'N'},
                                             {NULL, 0, NULL, 0}};
    const char *events = NULL, *nodes = NULL;
    struct rules r = {.prefix = "lb:", .resolution_ms = 1000, .score_max = 8388607};
    struct timeval now;
    int opt;

    gettimeofday(&now, NULL);
    r.now_ms = (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
    parse_time("2025-01-01T00:00:00Z", &r.epoch_ms);
    parse_time("2057-01-01T00:00:00Z", &r.horizon_ms);
    parse_windows("alltime,daily:7d,weekly:28d,monthly:93d", &r);
    int windows_set = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'e':
            events = optarg;
            break;
        case 'n':
            nodes = optarg;
            break;
        case 'p':
            r.prefix = optarg;
            break;
        case 'E':
        case 'H':
            if (parse_time(optarg, opt == 'E' ? &r.epoch_ms : &r.horizon_ms) != 0) {
                fprintf(stderr, "verify_state: bad time %s\n", optarg);
                return 2;
            }
            break;
        case 'r':
            r.resolution_ms = strtoll(optarg, NULL, 10);
            break;
        case 'a':
            r.score_min = strtoll(optarg, NULL, 10);
            break;
        case 'b':
            r.score_max = strtoll(optarg, NULL, 10);
            break;
        case 'N':
            r.now_ms = strtoll(optarg, NULL, 10);
            break;
        case 'S':
            expiry_slack_ms = strtoll(optarg, NULL, 10);
            break;
        case 'w':
            if (!windows_set++)
                r.nwindows = 0;
            if (parse_windows(optarg, &r) != 0) {
                fprintf(stderr, "verify_state: bad --windows %s\n", optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: verify_state --events FILE --nodes H:P,... [rules]\n");
            return 2;
        }
    }
    if (!events || !nodes || r.resolution_ms <= 0) {
        fprintf(stderr, "usage: verify_state --events FILE --nodes H:P,... [rules]\n");
        return 2;
    }
    int64_t ticks = (r.horizon_ms - r.epoch_ms + r.resolution_ms - 1) / r.resolution_ms;
    while ((INT64_C(1) << r.tie_bits) < ticks)
        r.tie_bits++;

    struct map members = {0}, keys = {0};
    size_t applied = load_events(events, &r, &members, &keys);
    struct report rep = {0};
    char copy[1024];
    snprintf(copy, sizeof(copy), "%s", nodes);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon)
            return 2;
        *colon = '\0';
        if (scan_node(tok, atoi(colon + 1), &r, &members, &keys, &rep) != 0)
            return 2;
    }
    for (size_t i = 0; i < keys.cap; i++)
        if (keys.slots[i].key && !keys.slots[i].seen)
            difference(&rep, "missing key %s (%lld members)", keys.slots[i].key,
                       (long long)keys.slots[i].value);
    printf("verify_state: %zu events applied, %zu keys expected, %zu keys found, %zu members "
           "checked, %zu differences\n",
           applied, keys.count, rep.keys_found, rep.members_checked, rep.differences);
    map_free(&members);
    map_free(&keys);
    return rep.differences ? 1 : 0;
}
