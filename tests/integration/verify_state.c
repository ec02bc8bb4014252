/* verify_state: the integration tests' independent oracle.
 *
 * Reads the events a test produced (loadgen's TSV), computes from the rules
 * in ARCHITECTURE.md what every leaderboard key must hold, then reads every
 * key under the prefix from every master with plain hiredis and compares:
 * keys, members, composite scores (exactly) and expiry times.
 *
 * Boards follow profiles given as --profile PREFIX=MODE/ORDER/TIE[/noretract]
 * (best, latest or sum; desc or asc; earliest, latest or none; noretract:
 * the profile rejects retractions), the rest best/desc/earliest.
 * Retractions remove the player from the windows of their time, and a sum
 * starts again from zero after one; where refused, they change nothing.
 * Each event counts once by (board, event_id), its first record, on boards
 * that dedupe (as the projector's default: all but best boards refusing
 * retractions, which take every record); the tests give the projector a
 * dedupe window longer than their events' span. Custom windows are named by
 * their dim (--windows alltime,daily:7d,patch).
 *
 * It deliberately shares no code with the projector: windows come from the C
 * library's calendar (gmtime_r, timegm, strftime's %G-W%V), the composite
 * from the formula, so a bug in the engine cannot hide by being repeated
 * here.
 *
 * Decaying boards (--decay PREFIX=DIM/TAX/STACKING/MAX_AGE/PRECISION/KEY,
 * e.g. top-1=patch/0.1/linear/5/0.01/decayed, and an optional /A,B,C: the
 * configured patches in order) also have an overall board:
 * per player the best over the board's patches (the values of the DIM
 * window) of the after-tax score of that patch's entry, its tie unchanged.
 * A patch's age is the number of the board's patches after it in version
 * order (dot-separated parts, numbers by value and before words, a prefix
 * first; equal versions by their bytes), or with a list the distance from
 * the newest listed patch written (events naming an unlisted patch are
 * refused whole), at most MAX_AGE; the factor is
 * 1 + TAX*age (linear) or (1 + TAX)^age (compound), multiplying the raw
 * score on asc boards and dividing it on desc ones; the result, in units of
 * PRECISION, rounded half up. A rebuild running on a board (its ~decay hash
 * says rebuilding) before or after the keys are read, or one that ran
 * between (its gen moved), makes the state unsettled: exit 3.
 *
 * Split boards (--split PREFIX=SHARDS/TOP): a board's keys live under one
 * tag per player shard, "B#<i>.<k>" for shard i (FNV-1a 64 of the player
 * modulo SHARDS), k the smallest whose tag's slot (CRC16 XMODEM, written
 * here again) lies in the middle half of the i-th SHARDS-th of the slots;
 * and each window has a merged top, <prefix>{B}:~top:<window>: the TOP
 * best members of the window's shards together, as one key orders them
 * (composite, then member bytes), expiring with the last shard key. Merged
 * tops are refreshed within the profile's staleness: when they are the only
 * difference, the state is unsettled (exit 3). --rank B/WINDOW/PLAYER
 * prints a player's expected rank across the window's shards (1 the
 * first) and its composite, and reads no node; given more than once, one
 * line per player, in the order given (the events are read once).
 * --tag B/PLAYER prints the hash tag of the keys PLAYER's events on board B
 * go to (B itself unless B is split), and reads nothing.
 *
 * Final standings (--results PREFIX=KIND/TOP/GRACE_MS[,...], e.g.
 * res-=daily/20/3600000,weekly/0/3600000; TOP 0: all): the windows that
 * closed are read from each board's <prefix>{B}:~final (s:, c:, n:, and o:,
 * each partition's close offset for --topic, default scores). Which window
 * closed when is the projector's decision; what follows from it is
 * checked: an event whose record (--deliveries: loadgen's
 * --deliveries-out lines, a retry's records in order) is at or past its
 * partition's close offset is left out of the closed window, still counting
 * for the others; the window closed at or after its end plus GRACE and no
 * later than the latest event plus --idle-ms (default 600000); ~final
 * counted its players; <prefix>{B}:final:<window> holds exactly its first
 * TOP entries. A window that closed, or was reopened, while the keys were
 * read (~final read again after them) makes the state unsettled: exit 3.
 * --final B/WINDOW prints the expected standings of a closed window with
 * raw scores, instants and ranks (lbadmin results prints the published
 * ones alike).
 *
 * Credentials, when the cluster needs them, come from REDIS_USER and
 * REDIS_PASSWORD in the environment (as for ops/services.sh); --tls-dir DIR
 * reads a TLS-only cluster (REDIS_TLS=1) over blocking OpenSSL connections
 * with DIR's ca.crt, client.crt and client.key.
 *
 * Exit 0 when Redis matches, 1 on any difference, 2 on usage or I/O errors,
 * 3 when the state is not settled (a rebuild running, merged tops not
 * refreshed yet, a window closing).
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <unistd.h>
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
    void *data; /* owned */
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
    for (size_t i = 0; i < m->cap; i++) {
        free(m->slots[i].key);
        free(m->slots[i].data);
    }
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
    char kind[16]; /* alltime, daily, weekly, monthly, or a custom dim name */
    int64_t ttl_ms;
};

/* What a board's profile decides, for the boards whose id starts with
 * 'prefix' (--profile PREFIX=MODE/ORDER/TIE[/noretract]; the longest prefix wins, the
 * rest are best/desc/earliest like the projector's default profile). */
struct profile {
    char prefix[64];
    char mode;  /* b best, l latest, s sum */
    char order; /* d desc, a asc */
    char tie;   /* e earliest, l latest, n none */
    int no_retractions;
};

/* --decay: boards whose id starts with 'prefix' decay. */
struct decay {
    char prefix[64], dim[64], key[64];
    char list[1024]; /* ",a,b,c,": the configured patches in order; "": version order */
    __int128 tax;    /* in 1/10000 */
    int compound;
    int max_age;
    __int128 scale; /* units per raw unit */
};

/* --split: boards whose id starts with 'prefix' are split. */
struct split {
    char prefix[64];
    int shards, top;
};

/* --results PREFIX=KIND/TOP/GRACE_MS[,KIND/TOP/GRACE_MS]: boards whose id
 * starts with 'prefix' publish final standings of their 'kind' windows
 * (TOP 0: all). */
struct result_rule {
    char prefix[64], kind[16];
    int64_t top, grace_ms;
};

struct rules {
    struct result_rule results[16];
    int nresults;
    int64_t idle_ms;       /* --idle-ms: results.idle */
    const char *topic;     /* --topic: the close offsets' topic */
    struct map *closed;    /* window key -> struct closed, from the boards' ~final */
    struct map *delivered; /* "<event_id>\t<board>" -> struct deliveries */
    struct decay decays[8];
    int ndecays;
    struct split splits[8];
    int nsplits;
    const char *prefix;
    int64_t epoch_ms, horizon_ms, resolution_ms, score_min, score_max, now_ms;
    struct window windows[8];
    int nwindows;
    unsigned tie_bits; /* of a profile with a tie-break */
    struct profile profiles[16];
    int nprofiles;
};

static const struct profile default_profile = {"", 'b', 'd', 'e', 0};

static const struct profile *profile_of(const struct rules *r, const char *board)
{
    const struct profile *best = &default_profile;
    for (int i = 0; i < r->nprofiles; i++) {
        size_t n = strlen(r->profiles[i].prefix);
        if (strncmp(board, r->profiles[i].prefix, n) == 0 && n >= strlen(best->prefix))
            best = &r->profiles[i];
    }
    return best;
}

/* "sum-=sum/desc/earliest" */
static int parse_profile(const char *spec, struct rules *r)
{
    char mode[16], order[16], tie[16], retractions[16] = "";
    if (r->nprofiles == 16)
        return -1;
    struct profile *p = &r->profiles[r->nprofiles];
    const char *eq = strchr(spec, '=');
    if (!eq || (size_t)(eq - spec) >= sizeof(p->prefix) ||
        sscanf(eq + 1, "%15[a-z]/%15[a-z]/%15[a-z]/%15[a-z]", mode, order, tie, retractions) < 3)
        return -1;
    snprintf(p->prefix, sizeof(p->prefix), "%.*s", (int)(eq - spec), spec);
    p->mode = strcmp(mode, "best") == 0     ? 'b'
              : strcmp(mode, "latest") == 0 ? 'l'
              : strcmp(mode, "sum") == 0    ? 's'
                                            : 0;
    p->order = strcmp(order, "desc") == 0 ? 'd' : strcmp(order, "asc") == 0 ? 'a' : 0;
    p->tie = strcmp(tie, "earliest") == 0 ? 'e'
             : strcmp(tie, "latest") == 0 ? 'l'
             : strcmp(tie, "none") == 0   ? 'n'
                                          : 0;
    p->no_retractions = strcmp(retractions, "noretract") == 0;
    if (!p->mode || !p->order || !p->tie || (retractions[0] && !p->no_retractions))
        return -1;
    r->nprofiles++;
    return 0;
}

/* "top-1=patch/0.1/linear/5/0.01/decayed" */
static int parse_decay(const char *spec, struct rules *r)
{
    char tax[32], stacking[16], precision[16];
    int max_age;
    if (r->ndecays == 8)
        return -1;
    struct decay *d = &r->decays[r->ndecays];
    const char *eq = strchr(spec, '=');
    if (!eq || (size_t)(eq - spec) >= sizeof(d->prefix) ||
        sscanf(eq + 1, "%63[^/]/%31[0-9.]/%15[a-z]/%d/%15[0-9.]/%63[^/]", d->dim, tax, stacking,
               &max_age, precision, d->key) != 6)
        return -1;
    /* an optional list: /a,b,c */
    const char *list = eq + 1;
    for (int slashes = 0; *list && slashes < 6; list++)
        slashes += *list == '/';
    d->list[0] = '\0';
    if (*list)
        snprintf(d->list, sizeof(d->list), ",%s,", list);
    snprintf(d->prefix, sizeof(d->prefix), "%.*s", (int)(eq - spec), spec);
    /* the tax in ten-thousandths: digits before and up to four after the point */
    const char *dot = strchr(tax, '.');
    size_t places = dot ? strlen(dot + 1) : 0;
    if (places > 4)
        return -1;
    d->tax = (__int128)strtoll(tax, NULL, 10) * 10000;
    if (dot) {
        long long frac = places ? strtoll(dot + 1, NULL, 10) : 0;
        for (size_t i = places; i < 4; i++)
            frac *= 10;
        d->tax += frac;
    }
    d->scale = 1;
    if (strcmp(precision, "1") != 0) {
        if (strncmp(precision, "0.", 2) != 0 || precision[strspn(precision + 2, "0") + 2] != '1' ||
            precision[strspn(precision + 2, "0") + 3] != '\0')
            return -1;
        for (size_t i = 2; precision[i]; i++)
            d->scale *= 10;
    }
    d->compound = strcmp(stacking, "compound") == 0;
    d->max_age = max_age;
    /* (20000)^age times a raw score must fit 128 bits */
    if ((!d->compound && strcmp(stacking, "linear") != 0) || max_age < 0 ||
        (d->compound && max_age > 4))
        return -1;
    r->ndecays++;
    return 0;
}

/* The place of 'patch' in a decay's list (0 oldest), or -1. */
static int list_index(const struct decay *d, const char *patch)
{
    char needle[256];
    snprintf(needle, sizeof(needle), ",%s,", patch);
    const char *at = strstr(d->list, needle);
    if (!at)
        return -1;
    int index = 0;
    for (const char *c = d->list + 1; c < at + 1; c++)
        index += *c == ',';
    return index;
}

static const struct decay *decay_of(const struct rules *r, const char *board)
{
    const struct decay *best = NULL;
    for (int i = 0; i < r->ndecays; i++) {
        size_t n = strlen(r->decays[i].prefix);
        if (strncmp(board, r->decays[i].prefix, n) == 0 && (!best || n >= strlen(best->prefix)))
            best = &r->decays[i];
    }
    return best;
}

/* Version order of patch names: see the header comment. */
static int version_cmp(const char *a, const char *b)
{
    const char *sa = a, *sb = b;
    for (;;) {
        if (!*a || !*b) {
            if (*a || *b)
                return *a ? 1 : -1;
            return strcmp(sa, sb);
        }
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        int na = la > 0 && strspn(a, "0123456789") >= la;
        int nb = lb > 0 && strspn(b, "0123456789") >= lb;
        int c;
        if (na && nb) {
            while (la > 1 && *a == '0')
                a++, la--;
            while (lb > 1 && *b == '0')
                b++, lb--;
            c = la != lb ? (la < lb ? -1 : 1) : memcmp(a, b, la);
        } else if (na != nb) {
            c = na ? -1 : 1;
        } else {
            c = memcmp(a, b, la < lb ? la : lb);
            if (!c && la != lb)
                c = la < lb ? -1 : 1;
        }
        if (c)
            return c;
        a += la;
        b += lb;
        if (*a == '.')
            a++;
        if (*b == '.')
            b++;
    }
}

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

/* Key suffix and end of the window of 'kind' holding ts; a custom window
 * (any other kind) is "<dim>:<value>", or nothing when the event has no
 * such dim (returns 0). */
static int window_of(const char *kind, int64_t ts_ms, const char *dim, char *suffix, size_t cap,
                     int64_t *end_ms)
{
    time_t secs = (time_t)(ts_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    struct tm day = tm;
    day.tm_hour = day.tm_min = day.tm_sec = 0;
    char label[32];
    *end_ms = 0;
    if (strcmp(kind, "alltime") == 0) {
        snprintf(suffix, cap, "alltime");
        return 1;
    } else if (strcmp(kind, "daily") == 0) {
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
        if (strcmp(dim, "-") == 0)
            return 0;
        snprintf(suffix, cap, "%s:%s", kind, dim);
        return 1;
    }
    snprintf(suffix, cap, "%s:%s", kind, label);
    return 1;
}

/* The composite rule of ARCHITECTURE.md: score * 2^T + tie, where the tie
 * grows with time when (desc and latest-wins) or (asc and earliest-wins). */
static unsigned bits_of(const struct rules *r, const struct profile *p)
{
    return p->tie == 'n' ? 0 : r->tie_bits;
}

static int64_t tie_of(const struct rules *r, const struct profile *p, int64_t ts)
{
    unsigned bits = bits_of(r, p);
    if (!bits)
        return 0;
    int64_t tick = (ts - r->epoch_ms) / r->resolution_ms;
    int grows = (p->order == 'd') == (p->tie == 'l');
    return grows ? tick : (INT64_C(1) << bits) - 1 - tick;
}

static int64_t composite_of(const struct rules *r, const struct profile *p, int64_t score,
                            int64_t ts)
{
    return score * (INT64_C(1) << bits_of(r, p)) + tie_of(r, p, ts);
}

/* A member's state while the events are applied:
 *   value  best, latest: the composite; sum: the total
 *   ts     best, latest: the counting event's time; sum: the latest event time
 *   raw    best, latest: the counting event's raw score (ts: its time)
 *   seq    latest: the winning event's line, breaking equal times (a
 *          player's events share a partition, so lines are in offset order)
 *   present  0 after a retraction */
struct member {
    int64_t value, ts, seq;
    int64_t raw; /* best, latest: the counting event's raw score */
    int present;
};

/* ---- split boards ------------------------------------------------------------------ */

static const struct split *split_of(const struct rules *r, const char *board)
{
    const struct split *best = NULL;
    for (int i = 0; i < r->nsplits; i++) {
        size_t n = strlen(r->splits[i].prefix);
        if (strncmp(board, r->splits[i].prefix, n) == 0 && (!best || n >= strlen(best->prefix)))
            best = &r->splits[i];
    }
    return best;
}

static unsigned crc16_xmodem(const char *s, size_t n)
{
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

/* The tag of 'player''s shard of 'board' (the board itself when not split). */
static void tag_of(const struct rules *r, const char *board, const char *player, char *out,
                   size_t cap)
{
    const struct split *sp = split_of(r, board);
    snprintf(out, cap, "%s", board);
    if (!sp || sp->shards < 2)
        return;
    uint64_t h = 14695981039346656037u;
    for (const char *c = player; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211u;
    unsigned i = (unsigned)(h % (unsigned)sp->shards), n = (unsigned)sp->shards;
    unsigned lo = i * 16384 / n, hi = (i + 1) * 16384 / n, q = (hi - lo) / 4;
    for (unsigned k = 0;; k++) {
        snprintf(out, cap, "%s#%u.%u", board, i, k);
        unsigned slot = crc16_xmodem(out, strlen(out)) % 16384;
        if (slot >= lo + q && slot < hi - q)
            return;
    }
}

/* "B#3.17" -> "B" when it is the tag of a shard of a split board B. */
static int base_of(const struct rules *r, const char *tag, char *board, size_t cap)
{
    const char *hash = strrchr(tag, '#');
    if (!hash || (size_t)(hash - tag) >= cap)
        return 0;
    snprintf(board, cap, "%.*s", (int)(hash - tag), tag);
    const struct split *sp = split_of(r, board);
    return sp && sp->shards > 1;
}

/* One member of a merged top, and the one-key order of a sorted set read
 * low to high: composite, then member bytes. */
struct top_item {
    int64_t value;
    char *member;
};
struct top_list {
    struct top_item *items;
    size_t n, cap;
    int64_t expire; /* the latest expiry of its shard keys; 0: one never expires */
    int shard_keys;
};

static int by_set_order(const void *x, const void *y)
{
    const struct top_item *a = x, *b = y;
    if (a->value != b->value)
        return a->value < b->value ? -1 : 1;
    return strcmp(a->member, b->member);
}

/* qsort of a list that may be empty: no items, no array (qsort must not be
 * given NULL even for none) */
static void sort_items(struct top_item *items, size_t n, int (*cmp)(const void *, const void *))
{
    if (n)
        qsort(items, n, sizeof(*items), cmp);
}

static int64_t expected_value(const struct rules *r, const struct profile *p,
                              const struct member *m)
{
    return p->mode == 's' ? m->value * (INT64_C(1) << bits_of(r, p)) + tie_of(r, p, m->ts)
                          : m->value;
}

static struct member *member_of(struct entry *e)
{
    if (!e->data)
        e->data = calloc(1, sizeof(struct member));
    if (!e->data) {
        fprintf(stderr, "verify_state: out of memory\n");
        exit(2);
    }
    return e->data;
}

/* ---- final standings ------------------------------------------------------------- */

/* "res-=daily/20/3600000,weekly/0/3600000" */
static int parse_results(const char *spec, struct rules *r)
{
    const char *eq = strchr(spec, '=');
    if (!eq || (size_t)(eq - spec) >= sizeof(r->results[0].prefix))
        return -1;
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", eq + 1);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (r->nresults == 16)
            return -1;
        struct result_rule *rr = &r->results[r->nresults];
        long long top, grace;
        if (sscanf(tok, "%15[a-z]/%lld/%lld", rr->kind, &top, &grace) != 3 || top < 0 || grace < 0)
            return -1;
        snprintf(rr->prefix, sizeof(rr->prefix), "%.*s", (int)(eq - spec), spec);
        rr->top = top;
        rr->grace_ms = grace;
        r->nresults++;
    }
    return 0;
}

static const struct result_rule *result_rule_of(const struct rules *r, const char *board,
                                                const char *kind)
{
    const struct result_rule *best = NULL;
    for (int i = 0; i < r->nresults; i++) {
        size_t n = strlen(r->results[i].prefix);
        if (strncmp(board, r->results[i].prefix, n) == 0 && strcmp(kind, r->results[i].kind) == 0 &&
            (!best || n >= strlen(best->prefix)))
            best = &r->results[i];
    }
    return best;
}

/* A closed window as its board's ~final records it (s:, c:, n:, o:), its
 * final key as read, and what the events say it must hold. */
struct closed {
    char state[16]; /* claimed, published */
    int64_t closed_at, players;
    int nparts;
    int32_t part[64];
    int64_t offset[64]; /* the partition's close offset: events from it on are late */
    struct top_list frozen, expected;
    int64_t end_ms;
    int has_events;
    int expired; /* its live key expired: its members are not known here */
    size_t late; /* events left out of it */
};

/* Where each record of an event landed, in delivery order. */
struct deliveries {
    int32_t *part;
    int64_t *offset;
    size_t n, cap, used;
};

static void *grow(void *p, size_t n, size_t size)
{
    void *q = realloc(p, n * size);
    if (!q) {
        fprintf(stderr, "verify_state: out of memory\n");
        exit(2);
    }
    return q;
}

static void top_push(struct top_list *l, int64_t value, const char *member)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->items = grow(l->items, l->cap, sizeof(*l->items));
    }
    l->items[l->n].value = value;
    l->items[l->n++].member = strdup(member);
}

/* loadgen's --deliveries-out lines: partition, offset, event id, board */
static void load_deliveries(const char *path, struct map *delivered)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    if (!f) {
        fprintf(stderr, "verify_state: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    while (fgets(line, sizeof(line), f)) {
        int part;
        long long offset;
        char id[128], board[256], key[400];
        if (sscanf(line, "%d\t%lld\t%127s\t%255s", &part, &offset, id, board) != 4) {
            fprintf(stderr, "verify_state: bad line in %s: %s", path, line);
            exit(2);
        }
        snprintf(key, sizeof(key), "%s\t%s", id, board);
        struct entry *e = map_get(delivered, key, 1);
        if (!e->data)
            e->data = calloc(1, sizeof(struct deliveries));
        struct deliveries *d = e->data;
        if (!d) {
            fprintf(stderr, "verify_state: out of memory\n");
            exit(2);
        }
        if (d->n == d->cap) {
            d->cap = d->cap ? 2 * d->cap : 2;
            d->part = grow(d->part, d->cap, sizeof(*d->part));
            d->offset = grow(d->offset, d->cap, sizeof(*d->offset));
        }
        d->part[d->n] = part;
        d->offset[d->n++] = offset;
    }
    fclose(f);
}

static void deliveries_free(struct map *delivered)
{
    for (size_t i = 0; i < delivered->cap; i++) {
        struct deliveries *d = delivered->slots[i].key ? delivered->slots[i].data : NULL;
        if (d) {
            free(d->part);
            free(d->offset);
        }
    }
    map_free(delivered);
}

static void top_list_clear(struct top_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].member);
    free(l->items);
}

static void closed_free(struct map *closed)
{
    for (size_t i = 0; i < closed->cap; i++) {
        struct closed *cl = closed->slots[i].key ? closed->slots[i].data : NULL;
        if (cl) {
            top_list_clear(&cl->frozen);
            top_list_clear(&cl->expected);
        }
    }
    map_free(closed);
}

/* An event is too late for a closed window when its offset is at or past
 * its partition's close offset (a partition not listed: the board had no
 * event from it before the close, so every one is). */
static int is_late(const struct closed *cl, int32_t part, int64_t offset)
{
    for (int i = 0; i < cl->nparts; i++)
        if (cl->part[i] == part)
            return offset >= cl->offset[i];
    return 1;
}

static int64_t max_ts = INT64_MIN; /* of every event read */

static size_t load_events(const char *path, const struct rules *r, struct map *members,
                          struct map *keys)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    size_t applied = 0, retries = 0;
    struct map ids = {0}; /* "<board>\n<event_id>" counted */
    int64_t seq = 0;
    if (!f) {
        fprintf(stderr, "verify_state: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    while (fgets(line, sizeof(line), f)) {
        char id[128], board[256], player[256], op[16], dim[64];
        long long score, ts;
        seq++;
        if (sscanf(line, "%127s %255s %255s %lld %lld %15s %63s", id, board, player, &score, &ts,
                   op, dim) != 7) {
            fprintf(stderr, "verify_state: bad line in %s: %s", path, line);
            exit(2);
        }
        /* where this record landed: its event's next delivery (a retry's
         * records share a partition: lines and deliveries in offset order) */
        int32_t part = -1;
        int64_t offset = -1;
        if (r->delivered) {
            char dkey[400];
            snprintf(dkey, sizeof(dkey), "%s\t%s", id, board);
            struct entry *de = map_get(r->delivered, dkey, 0);
            struct deliveries *d = de ? de->data : NULL;
            if (d && d->used < d->n) {
                part = d->part[d->used];
                offset = d->offset[d->used++];
            }
        }
        if (ts > max_ts)
            max_ts = ts;
        int retract = strcmp(op, "RETRACT") == 0;
        if (!retract && strcmp(op, "SUBMIT") != 0)
            continue; /* POISON:<reason>: dead-lettered, never applied */
        if ((!retract && (score < r->score_min || score > r->score_max)) || ts < r->epoch_ms ||
            ts >= r->horizon_ms)
            continue; /* rejected by the projector (a retraction has no score to check) */
        const struct profile *p = profile_of(r, board);
        if (retract && p->no_retractions)
            continue; /* dead-lettered (retraction_refused) */
        const struct decay *listed = decay_of(r, board);
        if (listed && listed->list[0] && strcmp(dim, "-") != 0 && list_index(listed, dim) < 0)
            continue; /* a patch its decay.patches does not name: invalid_dims */
        struct member *targets[8];
        int64_t expires[8];
        char mkeys[8][900];
        int n = 0, refused = 0;
        /* a sum board's default range: totals whose composites fit 2^53 */
        int64_t sum_max = (INT64_C(1) << (53 - bits_of(r, p))) - 1;
        for (int w = 0; w < r->nwindows; w++) {
            char suffix[128], key[600];
            int64_t end_ms;
            if (!window_of(r->windows[w].kind, ts, dim, suffix, sizeof(suffix), &end_ms))
                continue;
            char tag[320];
            tag_of(r, board, player, tag, sizeof(tag));
            snprintf(key, sizeof(key), "%s{%s}:%s", r->prefix, tag, suffix);
            struct entry *ce = r->closed ? map_get(r->closed, key, 0) : NULL;
            if (ce) { /* final standings: a window that closed */
                struct closed *cl = ce->data;
                cl->end_ms = end_ms;
                cl->has_events = 1;
                if (part < 0) {
                    fprintf(stderr,
                            "verify_state: %s closed, and no --deliveries line says where "
                            "event %s landed\n",
                            key, id);
                    exit(2);
                }
                if (is_late(cl, part, offset)) {
                    cl->late++;
                    continue; /* after the close: not written there */
                }
            }
            int64_t expire = end_ms && r->windows[w].ttl_ms ? end_ms + r->windows[w].ttl_ms : 0;
            if (expire && expire <= r->now_ms) {
                if (ce)
                    ((struct closed *)ce->data)->expired = 1;
                continue; /* expired window: not resurrected */
            }
            snprintf(mkeys[n], sizeof(mkeys[n]), "%s\n%s", key, player);
            expires[n] = expire;
            targets[n] = member_of(map_get(members, mkeys[n], 1));
            /* a sum leaving its range refuses the whole event */
            int64_t total = targets[n]->present ? targets[n]->value + score : score;
            refused |= !retract && p->mode == 's' && (total < 0 || total > sum_max);
            n++;
        }
        if (refused)
            continue;
        if (!(p->mode == 'b' && p->no_retractions)) {
            char idkey[600];
            snprintf(idkey, sizeof(idkey), "%s\n%s", board, id);
            struct entry *seen = map_get(&ids, idkey, 1);
            if (seen->seen) {
                retries++;
                continue;
            }
            seen->seen = 1;
        }
        for (int i = 0; i < n; i++) {
            struct member *m = targets[i];
            char *nl = strchr(mkeys[i], '\n');
            *nl = '\0';
            map_get(keys, mkeys[i], 1)->value = expires[i];
            if (retract) {
                m->present = 0;
                continue;
            }
            int64_t c = composite_of(r, p, score, ts);
            if (p->mode == 'b') {
                if (!m->present || (p->order == 'd' ? c > m->value : c < m->value)) {
                    m->value = c;
                    m->raw = score;
                    m->ts = ts;
                }
            } else if (p->mode == 'l') {
                if (!m->present || ts > m->ts || (ts == m->ts && seq > m->seq)) {
                    m->value = c;
                    m->raw = score;
                    m->ts = ts;
                    m->seq = seq;
                }
            } else {
                m->value = m->present ? m->value + score : score;
                m->ts = m->present && m->ts > ts ? m->ts : ts;
            }
            m->present = 1;
        }
        applied++;
    }
    fclose(f);
    map_free(&ids);
    if (retries)
        printf("%zu retried events counted once\n", retries);
    /* members expected per key */
    for (size_t i = 0; i < members->cap; i++) {
        struct entry *e = &members->slots[i];
        if (!e->key || !((struct member *)e->data)->present)
            continue;
        char key[900];
        snprintf(key, sizeof(key), "%s", e->key);
        *strchr(key, '\n') = '\0';
        map_get(keys, key, 0)->aux++;
    }
    return applied;
}

/* Every split board's merged tops: per window key of a shard, its members
 * join the board's top of that window; each top is then cut to its TOP
 * best (sorted low to high, as ZRANGE reads a set). */
static void add_tops(const struct rules *r, struct map *members, struct map *keys, struct map *tops)
{
    for (size_t i = 0; i < members->cap; i++) {
        const struct entry *e = &members->slots[i];
        const struct member *m = e->key ? e->data : NULL;
        const char *open = e->key ? strchr(e->key, '{') : NULL;
        const char *close = open ? strchr(open, '}') : NULL;
        char tag[320], board[320], topkey[900];
        if (!m || !m->present || !close || (size_t)(close - open) >= sizeof(tag))
            continue;
        snprintf(tag, sizeof(tag), "%.*s", (int)(close - open - 1), open + 1);
        if (!base_of(r, tag, board, sizeof(board)))
            continue;
        const char *nl = strchr(close, '\n');
        snprintf(topkey, sizeof(topkey), "%s{%s}:~top:%.*s", r->prefix, board,
                 (int)(nl - close - 2), close + 2);
        struct entry *t = map_get(tops, topkey, 1);
        if (!t->data && !(t->data = calloc(1, sizeof(struct top_list))))
            exit(2);
        struct top_list *l = t->data;
        if (l->n == l->cap) {
            l->cap = l->cap ? l->cap * 2 : 64;
            if (!(l->items = realloc(l->items, l->cap * sizeof(*l->items))))
                exit(2);
        }
        l->items[l->n++] =
            (struct top_item){expected_value(r, profile_of(r, tag), m), strdup(nl + 1)};
    }
    for (size_t i = 0; i < tops->cap; i++) {
        struct top_list *l = tops->slots[i].key ? tops->slots[i].data : NULL;
        if (!l)
            continue;
        char board[320];
        const char *open = strchr(tops->slots[i].key, '{');
        snprintf(board, sizeof(board), "%.*s", (int)(strchr(open, '}') - open - 1), open + 1);
        const struct split *sp = split_of(r, board);
        const struct profile *p = profile_of(r, board);
        sort_items(l->items, l->n, by_set_order);
        size_t keep = l->n < (size_t)sp->top ? l->n : (size_t)sp->top;
        size_t from = p->order == 'd' ? l->n - keep : 0; /* the best: the high end on desc */
        for (size_t j = 0; j < l->n; j++)
            if (j < from || j >= from + keep)
                free(l->items[j].member);
        memmove(l->items, l->items + from, keep * sizeof(*l->items));
        l->n = keep;
    }
    /* each top expires with the last of its shard keys */
    for (size_t i = 0; i < keys->cap; i++) {
        const struct entry *k = &keys->slots[i];
        const char *open = k->key ? strchr(k->key, '{') : NULL;
        const char *close = open ? strchr(open, '}') : NULL;
        char tag[320], board[320], topkey[900];
        if (!close || !k->aux || (size_t)(close - open) >= sizeof(tag))
            continue;
        snprintf(tag, sizeof(tag), "%.*s", (int)(close - open - 1), open + 1);
        if (!base_of(r, tag, board, sizeof(board)))
            continue;
        snprintf(topkey, sizeof(topkey), "%s{%s}:~top:%s", r->prefix, board, close + 2);
        struct entry *t = map_get(tops, topkey, 0);
        struct top_list *l = t ? t->data : NULL;
        if (!l)
            continue;
        if (!l->shard_keys++ || (l->expire && (!k->value || k->value > l->expire)))
            l->expire = k->value;
    }
}

static void tops_free(struct map *tops)
{
    for (size_t i = 0; i < tops->cap; i++) {
        struct top_list *l = tops->slots[i].key ? tops->slots[i].data : NULL;
        for (size_t j = 0; l && j < l->n; j++)
            free(l->items[j].member);
        if (l)
            free(l->items);
    }
    map_free(tops);
}

/* --rank B/WINDOW/PLAYER: the player's place among the members of the
 * window's shards, in the board's order (desc: the highest composite first,
 * equal ones by member bytes from the highest, as ZREVRANGE reads them). */
static int print_rank(const struct rules *r, struct map *members, const char *spec)
{
    char board[256], window[256], player[256];
    if (sscanf(spec, "%255[^/]/%255[^/]/%255s", board, window, player) != 3)
        return 2;
    char tag[320], mine[900];
    tag_of(r, board, player, tag, sizeof(tag));
    snprintf(mine, sizeof(mine), "%s{%s}:%s\n%s", r->prefix, tag, window, player);
    const struct entry *me = map_get(members, mine, 0);
    const struct member *pm = me ? me->data : NULL;
    if (!pm || !pm->present) {
        printf("no %s in %s of %s\n", player, window, board);
        return 1;
    }
    const struct profile *p = profile_of(r, board);
    struct top_item self = {expected_value(r, p, pm), player};
    long long before = 0;
    for (size_t i = 0; i < members->cap; i++) {
        const struct entry *e = &members->slots[i];
        const struct member *m = e->key ? e->data : NULL;
        if (!m || !m->present)
            continue;
        const char *open = strchr(e->key, '{'), *close = strchr(open, '}');
        const char *nl = strchr(close, '\n');
        char etag[320], ebase[320];
        snprintf(etag, sizeof(etag), "%.*s", (int)(close - open - 1), open + 1);
        if (!base_of(r, etag, ebase, sizeof(ebase)))
            snprintf(ebase, sizeof(ebase), "%s", etag);
        if (strcmp(ebase, board) != 0 || strlen(window) != (size_t)(nl - close - 2) ||
            strncmp(close + 2, window, strlen(window)) != 0)
            continue;
        struct top_item other = {expected_value(r, p, m), (char *)(nl + 1)};
        int c = by_set_order(&other, &self);
        before += p->order == 'd' ? c > 0 : c < 0;
    }
    printf("rank %lld composite %lld\n", before + 1, (long long)self.value);
    return 0;
}

/* floor(n / d) for d > 0 */
static __int128 floor_div(__int128 n, __int128 d)
{
    __int128 q = n / d;
    return (n % d != 0 && n < 0) ? q - 1 : q;
}

/* The after-tax composite of 'composite' (a patch board's) 'age' patches
 * behind: the raw score times (asc) or over (desc) the factor, in units of
 * the precision, rounded half up; the tie kept. */
static int64_t taxed_of(const struct rules *r, const struct profile *p, const struct decay *d,
                        int64_t composite, int age)
{
    int64_t one = INT64_C(1) << bits_of(r, p);
    int64_t raw = (int64_t)floor_div(composite, one), tie = composite - raw * one;
    if (age > d->max_age)
        age = d->max_age;
    __int128 num = 1, den = 1;
    if (d->compound)
        for (int i = 0; i < age; i++) {
            num *= 10000 + d->tax;
            den *= 10000;
        }
    else {
        num = 10000 + d->tax * age;
        den = 10000;
    }
    __int128 n = (__int128)raw * d->scale * (p->order == 'a' ? num : den);
    __int128 m = p->order == 'a' ? den : num;
    int64_t units = (int64_t)floor_div(2 * n + m, 2 * m);
    return units * one + tie;
}

/* Adds every decaying board's overall board to the expected state, from the
 * patch boards' expected entries. */
struct patch_entry {
    char board[256], patch[128], player[256];
    int64_t composite;
    const struct decay *decay;
};

static int by_board_patch(const void *x, const void *y)
{
    const struct patch_entry *a = x, *b = y;
    int c = strcmp(a->board, b->board);
    if (c || !a->decay->list[0])
        return c ? c : version_cmp(a->patch, b->patch);
    return list_index(a->decay, a->patch) - list_index(b->decay, b->patch);
}

static void add_decayed(const struct rules *r, struct map *members, struct map *keys)
{
    struct patch_entry *all = NULL;
    size_t n = 0, cap = 0;
    size_t plen = strlen(r->prefix);
    for (size_t i = 0; i < members->cap; i++) {
        const struct entry *e = &members->slots[i];
        const struct member *m = e->key ? e->data : NULL;
        if (!m || !m->present || strncmp(e->key, r->prefix, plen) != 0 || e->key[plen] != '{')
            continue;
        const char *open = e->key + plen + 1, *close = strchr(open, '}');
        const char *nl = strchr(e->key, '\n');
        if (!close || !nl || close[1] != ':')
            continue;
        char board[256];
        snprintf(board, sizeof(board), "%.*s", (int)(close - open), open);
        const struct decay *d = decay_of(r, board);
        size_t dlen = d ? strlen(d->dim) : 0;
        if (!d || strncmp(close + 2, d->dim, dlen) != 0 || close[2 + dlen] != ':')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            all = realloc(all, cap * sizeof(*all));
            if (!all) {
                fprintf(stderr, "verify_state: out of memory\n");
                exit(2);
            }
        }
        struct patch_entry *pe = &all[n++];
        snprintf(pe->board, sizeof(pe->board), "%s", board);
        snprintf(pe->patch, sizeof(pe->patch), "%.*s", (int)(nl - (close + 3 + dlen)),
                 close + 3 + dlen);
        snprintf(pe->player, sizeof(pe->player), "%s", nl + 1);
        pe->composite = m->value;
        pe->decay = d;
    }
    if (n)
        qsort(all, n, sizeof(*all), by_board_patch);
    for (size_t from = 0; from < n;) {
        size_t to = from, patches = 0;
        while (to < n && strcmp(all[to].board, all[from].board) == 0) {
            if (to == from || strcmp(all[to].patch, all[to - 1].patch) != 0)
                patches++;
            to++;
        }
        const struct profile *p = profile_of(r, all[from].board);
        size_t index = 0;
        /* with a list: the distance to the newest patch written, in the list */
        int newest = all[from].decay->list[0] ? list_index(all[from].decay, all[to - 1].patch) : 0;
        for (size_t i = from; i < to; i++) {
            if (i > from && strcmp(all[i].patch, all[i - 1].patch) != 0)
                index++;
            const struct decay *d = all[i].decay;
            int age =
                d->list[0] ? newest - list_index(d, all[i].patch) : (int)(patches - 1 - index);
            int64_t c = taxed_of(r, p, d, all[i].composite, age);
            char key[600], mkey[900];
            snprintf(key, sizeof(key), "%s{%s}:%s", r->prefix, all[i].board, d->key);
            snprintf(mkey, sizeof(mkey), "%s\n%s", key, all[i].player);
            struct member *m = member_of(map_get(members, mkey, 1));
            if (!m->present) {
                map_get(keys, key, 1)->aux++;
                m->value = c;
                m->present = 1;
            } else if (p->order == 'd' ? c > m->value : c < m->value) {
                m->value = c;
            }
        }
        from = to;
    }
    free(all);
}

/* ---- comparing with Redis ------------------------------------------------------- */

/* MIGRATE carries a key's TTL as a relative time, so a key that moved to
 * another node expires a few milliseconds off its absolute time; a test that
 * reshards allows that much with --expiry-slack-ms. */
static long long expiry_slack_ms;

struct report {
    size_t keys_found, members_checked, differences, meta_keys, rebuilding, closing;
    size_t tops_checked, top_differences; /* merged tops of split boards */
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

/* ---- final standings, checked --------------------------------------------------- */

static int by_set_order_rev(const void *x, const void *y)
{
    return by_set_order(y, x);
}

/* The expected standings of every closed window: its members, in the
 * board's order (desc: ZRANGE REV's, the highest composite first, equal
 * ones from the highest member bytes). */
static void add_expected(const struct rules *r, struct map *members)
{
    for (size_t i = 0; i < members->cap; i++) {
        const struct entry *e = &members->slots[i];
        const struct member *m = e->key ? e->data : NULL;
        if (!m || !m->present)
            continue;
        const char *nl = strchr(e->key, '\n');
        char key[900], board[256] = "";
        snprintf(key, sizeof(key), "%.*s", (int)(nl - e->key), e->key);
        struct entry *ce = map_get(r->closed, key, 0);
        if (!ce)
            continue;
        const char *open = strchr(key, '{'), *close = strchr(key, '}');
        snprintf(board, sizeof(board), "%.*s", (int)(close - open - 1), open + 1);
        top_push(&((struct closed *)ce->data)->expected, expected_value(r, profile_of(r, board), m),
                 nl + 1);
    }
    for (size_t i = 0; i < r->closed->cap; i++) {
        struct closed *cl = r->closed->slots[i].key ? r->closed->slots[i].data : NULL;
        if (!cl)
            continue;
        const char *open = strchr(r->closed->slots[i].key, '{');
        const char *close = strchr(open, '}');
        char board[256];
        snprintf(board, sizeof(board), "%.*s", (int)(close - open - 1), open + 1);
        sort_items(cl->expected.items, cl->expected.n,
                   profile_of(r, board)->order == 'd' ? by_set_order_rev : by_set_order);
    }
}

/* Each closed window: a results rule names it; it closed at or after its
 * end plus the grace and no later than the events' time allows (the
 * latest event's plus results.idle); ~final counted its players; its final
 * key holds exactly its first TOP expected entries (no late event among
 * them: those were left out above). */
static size_t closed_late; /* late writes left out of closed windows */

static size_t check_closed(const struct rules *r, struct report *rep)
{
    size_t checked = 0, late = 0;
    for (size_t i = 0; i < r->closed->cap; i++) {
        const char *key = r->closed->slots[i].key;
        struct closed *cl = key ? r->closed->slots[i].data : NULL;
        if (!cl)
            continue;
        checked++;
        late += cl->late;
        const char *open = strchr(key, '{'), *close = strchr(key, '}');
        char board[256], kind[16];
        snprintf(board, sizeof(board), "%.*s", (int)(close - open - 1), open + 1);
        snprintf(kind, sizeof(kind), "%.*s", (int)strcspn(close + 2, ":"), close + 2);
        const struct result_rule *rr = result_rule_of(r, board, kind);
        if (!rr) {
            difference(rep, "%s closed, and no results rule names its board and kind", key);
            continue;
        }
        if (strcmp(cl->state, "claimed") != 0 && strcmp(cl->state, "published") != 0)
            difference(rep, "%s: state '%s' in ~final", key, cl->state);
        if (!cl->has_events) {
            difference(rep, "%s closed, and no event falls in it", key);
            continue;
        }
        if (cl->closed_at < cl->end_ms + rr->grace_ms || cl->closed_at > max_ts + r->idle_ms)
            difference(rep,
                       "%s closed at %lld: not within [end + grace %lld, last event + idle %lld]",
                       key, (long long)cl->closed_at, (long long)(cl->end_ms + rr->grace_ms),
                       (long long)(max_ts + r->idle_ms));
        if (cl->expired)
            continue; /* its final key outlives the window: nothing to compare it with */
        if (cl->players != (int64_t)cl->expected.n)
            difference(rep, "%s: ~final counts %lld players, expected %zu", key,
                       (long long)cl->players, cl->expected.n);
        size_t want =
            rr->top && (size_t)rr->top < cl->expected.n ? (size_t)rr->top : cl->expected.n;
        struct top_list w = {.items = cl->expected.items, .n = want};
        sort_items(w.items, want, by_set_order);
        sort_items(cl->frozen.items, cl->frozen.n, by_set_order);
        int same = cl->frozen.n == want;
        for (size_t j = 0; same && j < want; j++)
            same = w.items[j].value == cl->frozen.items[j].value &&
                   strcmp(w.items[j].member, cl->frozen.items[j].member) == 0;
        if (!same)
            difference(rep, "%s: the final standings hold %zu entries, not the %zu expected%s", key,
                       cl->frozen.n, want,
                       cl->frozen.n == want ? " (members or scores differ)" : "");
        /* back in the board's order, for --final */
        sort_items(w.items, want,
                   profile_of(r, board)->order == 'd' ? by_set_order_rev : by_set_order);
    }
    closed_late = late;
    return checked;
}

/* --final B/WINDOW: the window's expected final standings, one line per
 * entry: position, player, raw score, achieved at (ms, at the tie
 * resolution), competition rank, dense rank (tab-separated, as lbadmin
 * results prints them). */
static int print_final(const struct rules *r, struct map *members, const char *spec)
{
    char board[256], window[256], key[900];
    if (sscanf(spec, "%255[^/]/%255s", board, window) != 2)
        return 2;
    snprintf(key, sizeof(key), "%s{%s}:%s", r->prefix, board, window);
    const struct entry *ce = map_get(r->closed, key, 0);
    if (!ce) {
        printf("%s is not closed\n", key);
        return 1;
    }
    const struct closed *cl = ce->data;
    const struct profile *p = profile_of(r, board);
    char kind[16];
    snprintf(kind, sizeof(kind), "%.*s", (int)strcspn(window, ":"), window);
    const struct result_rule *rr = result_rule_of(r, board, kind);
    size_t n = rr && rr->top && (size_t)rr->top < cl->expected.n ? (size_t)rr->top : cl->expected.n;
    int64_t prev = 0, rank = 0, dense = 0;
    for (size_t i = 0; i < n; i++) {
        char mkey[1200];
        snprintf(mkey, sizeof(mkey), "%s\n%s", key, cl->expected.items[i].member);
        const struct member *m = map_get(members, mkey, 0)->data;
        int64_t raw = p->mode == 's' ? m->value : m->raw;
        int64_t at = r->epoch_ms + (m->ts - r->epoch_ms) / r->resolution_ms * r->resolution_ms;
        if (i == 0 || raw != prev) {
            rank = (int64_t)i + 1;
            dense++;
        }
        prev = raw;
        printf("%zu\t%s\t%lld\t%lld\t%lld\t%lld\n", i + 1, cl->expected.items[i].member,
               (long long)raw, (long long)at, (long long)rank, (long long)dense);
    }
    return 0;
}

/* ---- one node: plain hiredis, or blocking TLS ---------------------------------- */

static SSL_CTX *tls_ctx; /* --tls-dir */

struct conn {
    redisContext *c; /* plain */
    SSL *ssl;        /* TLS: commands formatted by hiredis, replies parsed by its reader */
    int fd;
    redisReader *reader;
};

static int tls_init(const char *dir)
{
    char ca[400], cert[400], key[400];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/client.crt", dir);
    snprintf(key, sizeof(key), "%s/client.key", dir);
    tls_ctx = SSL_CTX_new(TLS_client_method());
    if (!tls_ctx || SSL_CTX_load_verify_locations(tls_ctx, ca, NULL) != 1 ||
        SSL_CTX_use_certificate_chain_file(tls_ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls_ctx, key, SSL_FILETYPE_PEM) != 1) {
        fprintf(stderr, "verify_state: cannot load the TLS files of %s\n", dir);
        return -1;
    }
    SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_PEER, NULL);
    return 0;
}

static void conn_close(struct conn *k)
{
    if (k->c)
        redisFree(k->c);
    SSL_free(k->ssl);
    if (k->reader)
        redisReaderFree(k->reader);
    if (k->fd > 0)
        close(k->fd);
    memset(k, 0, sizeof(*k));
}

/* Connects; returns 0, or -1 with the reason printed. */
static int conn_open(struct conn *k, const char *host, int port)
{
    memset(k, 0, sizeof(*k));
    struct timeval timeout = {5, 0};
    if (!tls_ctx) {
        k->c = redisConnectWithTimeout(host, port, timeout);
        if (!k->c || k->c->err) {
            fprintf(stderr, "verify_state: skipping %s:%d: %s\n", host, port,
                    k->c ? k->c->errstr : "out of memory");
            conn_close(k);
            return -1;
        }
        redisSetTimeout(k->c, timeout);
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(host, service, &hints, &ai) != 0) {
        fprintf(stderr, "verify_state: skipping %s:%d: cannot resolve it\n", host, port);
        return -1;
    }
    k->fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int connected = k->fd >= 0 && connect(k->fd, ai->ai_addr, ai->ai_addrlen) == 0;
    freeaddrinfo(ai);
    if (!connected) {
        fprintf(stderr, "verify_state: skipping %s:%d: %s\n", host, port, strerror(errno));
        conn_close(k);
        return -1;
    }
    setsockopt(k->fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(k->fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    k->ssl = SSL_new(tls_ctx);
    k->reader = redisReaderCreate();
    if (!k->ssl || !k->reader || SSL_set_fd(k->ssl, k->fd) != 1 ||
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(k->ssl), host) != 1 ||
        SSL_connect(k->ssl) != 1) {
        char why[200] = "out of memory";
        unsigned long e = ERR_get_error();
        if (e)
            ERR_error_string_n(e, why, sizeof(why));
        fprintf(stderr, "verify_state: TLS to %s:%d failed: %s\n", host, port, why);
        conn_close(k);
        return -1;
    }
    return 0;
}

/* A command (hiredis' format); NULL on an I/O error. */
static redisReply *command(struct conn *k, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    if (k->c) {
        void *r = redisvCommand(k->c, format, ap);
        va_end(ap);
        return r;
    }
    char *bytes;
    int len = redisvFormatCommand(&bytes, format, ap);
    va_end(ap);
    if (len < 0)
        return NULL;
    int sent = SSL_write(k->ssl, bytes, len);
    free(bytes);
    if (sent != len)
        return NULL;
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(k->reader, &reply) != REDIS_OK)
            return NULL;
        if (reply)
            return reply;
        char buf[16384];
        int got = SSL_read(k->ssl, buf, sizeof(buf));
        if (got <= 0 || redisReaderFeed(k->reader, buf, (size_t)got) != REDIS_OK)
            return NULL;
    }
}

/* A merged top against the expected one: the same members with the same
 * composites, expiring with the last of its shard keys. */
static void check_top(struct conn *c, const char *key, struct map *tops, struct report *rep)
{
    struct entry *t = map_get(tops, key, 0);
    const struct top_list *l = t ? t->data : NULL;
    if (!l) {
        rep->top_differences++;
        difference(rep, "unexpected merged top %s", key);
        return;
    }
    t->seen = 1;
    rep->tops_checked++;
    redisReply *z = command(c, "ZRANGE %s 0 -1 WITHSCORES", key);
    if (!z || z->type != REDIS_REPLY_ARRAY) {
        rep->top_differences++;
        difference(rep, "%s: not a sorted set", key);
    } else {
        size_t n = z->elements / 2, bad = n != l->n;
        for (size_t i = 0; i < n && !bad; i++) {
            double v = strtod(z->element[2 * i + 1]->str, NULL);
            bad = strcmp(z->element[2 * i]->str, l->items[i].member) != 0 ||
                  (double)l->items[i].value != v;
        }
        if (bad) {
            rep->top_differences++;
            difference(rep, "%s: %zu members (first %s), expected %zu (first %s)", key, n,
                       n ? z->element[0]->str : "-", l->n, l->n ? l->items[0].member : "-");
        }
    }
    if (z)
        freeReplyObject(z);
    redisReply *e = command(c, "PEXPIRETIME %s", key);
    if (e && e->type == REDIS_REPLY_INTEGER) {
        long long want = l->expire ? (long long)l->expire : -1, off = e->integer - want;
        long long slack = expiry_slack_ms; /* set from the shards' PEXPIRETIME: exact */
        if ((want == -1) != (e->integer == -1) || off > slack || off < -slack) {
            rep->top_differences++;
            difference(rep, "%s: expires at %lld, expected %lld", key, e->integer, want);
        }
    }
    if (e)
        freeReplyObject(e);
}

static void check_key(struct conn *c, const struct rules *r, const char *key, struct map *members,
                      struct map *keys, struct map *tops, struct report *rep)
{
    if (strstr(key, "}:~top:")) {
        check_top(c, key, tops, rep);
        return;
    }
    size_t plen = strlen(r->prefix);
    if (strstr(key, "}:~") || strstr(key, ":~ts") ||
        (strncmp(key, r->prefix, plen) == 0 &&
         (strcmp(key + plen, "~reopened") == 0 || strncmp(key + plen, "~intact{", 8) == 0 ||
          strcmp(key + plen, "~replay-epoch") == 0))) {
        /* the projector's markers and event-time hashes, replay's words and
         * its runs' counter */
        rep->meta_keys++;
        return;
    }
    const char *final = strstr(key, "}:final:");
    if (final) { /* a closed window's final standings (check_closed) */
        char window[900];
        snprintf(window, sizeof(window), "%.*s%s", (int)(final + 1 - key), key, final + 7);
        if (!map_get(r->closed, window, 0))
            difference(rep, "unexpected key %s (no closed window in ~final)", key);
        rep->meta_keys++;
        return;
    }
    struct entry *k = map_get(keys, key, 0);
    if (!k || k->aux == 0) {
        difference(rep, "unexpected key %s", key);
        return;
    }
    k->seen = 1;
    rep->keys_found++;
    char board[256] = "";
    const char *open = strchr(key, '{'), *close = open ? strchr(open, '}') : NULL;
    if (open && close)
        snprintf(board, sizeof(board), "%.*s", (int)(close - open - 1), open + 1);
    const struct profile *p = profile_of(r, board);
    redisReply *z = command(c, "ZRANGE %s 0 -1 WITHSCORES", key);
    if (!z || z->type != REDIS_REPLY_ARRAY) {
        difference(rep, "%s: not a sorted set", key);
        if (z)
            freeReplyObject(z);
        return;
    }
    long long found = 0;
    for (size_t i = 0; i + 1 < z->elements; i += 2) {
        char mkey[900];
        snprintf(mkey, sizeof(mkey), "%s\n%s", key, z->element[i]->str);
        struct entry *e = map_get(members, mkey, 0);
        const struct member *m = e ? e->data : NULL;
        rep->members_checked++;
        double score = strtod(z->element[i + 1]->str, NULL);
        if (!m || !m->present) {
            difference(rep, "%s: unexpected member %s%s", key, z->element[i]->str,
                       m ? " (retracted)" : "");
            continue;
        }
        found++;
        e->seen = 1;
        int64_t want = expected_value(r, p, m);
        if ((int64_t)score != want || (double)want != score)
            difference(rep, "%s: %s has %s, expected %lld", key, z->element[i]->str,
                       z->element[i + 1]->str, (long long)want);
    }
    if (found != k->aux)
        difference(rep, "%s: %lld of %lld expected members present", key, found, (long long)k->aux);
    freeReplyObject(z);

    redisReply *t = command(c, "PEXPIRETIME %s", key);
    if (t && t->type == REDIS_REPLY_INTEGER) {
        long long want = k->value ? (long long)k->value : -1;
        long long off = t->integer - want;
        if ((want == -1) != (t->integer == -1) || off > expiry_slack_ms || off < -expiry_slack_ms)
            difference(rep, "%s: expires at %lld, expected %lld", key, t->integer, want);
    }
    if (t)
        freeReplyObject(t);
}

/* Opens a master: 1; 0 when the node is dead or a replica (it serves no
 * slot: keys it should hold show up missing); -1 when AUTH failed. */
static int master_open(struct conn *c, const char *host, int port)
{
    if (conn_open(c, host, port) != 0)
        return 0;
    const char *password = getenv("REDIS_PASSWORD"), *user = getenv("REDIS_USER");
    if (password && *password) {
        redisReply *auth = user && *user ? command(c, "AUTH %s %s", user, password)
                                         : command(c, "AUTH %s", password);
        int failed = !auth || auth->type == REDIS_REPLY_ERROR;
        if (auth)
            freeReplyObject(auth);
        if (failed) {
            fprintf(stderr, "verify_state: AUTH failed on %s:%d\n", host, port);
            conn_close(c);
            return -1;
        }
    }
    redisReply *role = command(c, "ROLE");
    int master = role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
                 strcmp(role->element[0]->str, "master") == 0;
    if (role)
        freeReplyObject(role);
    if (!master)
        conn_close(c);
    return master;
}

/* Calls 'each' for every key matching 'pattern' on a master: 0; 0 for a
 * dead node or a replica; -1 when AUTH or SCAN failed. */
static int scan_node(const char *host, int port, const char *pattern,
                     void (*each)(struct conn *c, const char *key, void *ctx), void *ctx)
{
    struct conn conn, *c = &conn;
    int open = master_open(c, host, port);
    if (open <= 0)
        return open;
    char cursor[32] = "0";
    struct map seen = {0}; /* SCAN may return a key twice: each is given once */
    do {
        redisReply *s = command(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!s || s->type != REDIS_REPLY_ARRAY || s->elements != 2) {
            fprintf(stderr, "verify_state: SCAN failed on %s:%d\n", host, port);
            map_free(&seen);
            conn_close(c);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", s->element[0]->str);
        for (size_t i = 0; i < s->element[1]->elements; i++) {
            const char *key = s->element[1]->element[i]->str;
            if (!map_get(&seen, key, 1)->seen++)
                each(c, key, ctx);
        }
        freeReplyObject(s);
    } while (strcmp(cursor, "0") != 0);
    map_free(&seen);
    conn_close(c);
    return 0;
}

static int64_t field_int(const redisReply *h, const char *field, int64_t otherwise)
{
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, field) == 0)
            return strtoll(h->element[i + 1]->str, NULL, 10);
    return otherwise;
}

static const char *field_str(const redisReply *h, const char *field)
{
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, field) == 0)
            return h->element[i + 1]->str;
    return NULL;
}

/* Every s:<window> of a board's ~final: a closed window, with its final
 * key as it is (same tag, same node). */
static void add_closed(struct conn *c, const char *key, void *ctx)
{
    const struct rules *r = ctx;
    const char *close = strstr(key, "}:~final");
    redisReply *h = command(c, "HGETALL %s", key);
    if (!close || !h || h->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "verify_state: cannot read %s\n", key);
        exit(2);
    }
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const char *f = h->element[i]->str;
        if (strncmp(f, "s:", 2) != 0)
            continue;
        char wkey[900], field[300], fkey[900];
        snprintf(wkey, sizeof(wkey), "%.*s:%s", (int)(close + 1 - key), key, f + 2);
        snprintf(fkey, sizeof(fkey), "%.*s:final:%s", (int)(close + 1 - key), key, f + 2);
        struct entry *e = map_get(r->closed, wkey, 1);
        struct closed *cl = e->data = calloc(1, sizeof(struct closed));
        if (!cl) {
            fprintf(stderr, "verify_state: out of memory\n");
            exit(2);
        }
        snprintf(cl->state, sizeof(cl->state), "%s", h->element[i + 1]->str);
        snprintf(field, sizeof(field), "c:%s", f + 2);
        cl->closed_at = field_int(h, field, -1);
        snprintf(field, sizeof(field), "n:%s", f + 2);
        cl->players = field_int(h, field, -1);
        snprintf(field, sizeof(field), "o:%s", f + 2);
        const char *offsets = field_str(h, field);
        /* "<topic>:<partition>=<offset>,...": this topic's */
        for (const char *p = offsets; p && *p && cl->nparts < 64;) {
            const char *next = strchr(p, ',');
            size_t tl = strlen(r->topic);
            int part;
            long long off;
            if (strncmp(p, r->topic, tl) == 0 && p[tl] == ':' &&
                sscanf(p + tl + 1, "%d=%lld", &part, &off) == 2) {
                cl->part[cl->nparts] = part;
                cl->offset[cl->nparts++] = off;
            }
            p = next ? next + 1 : NULL;
        }
        redisReply *z = command(c, "ZRANGE %s 0 -1 WITHSCORES", fkey);
        for (size_t j = 0; z && z->type == REDIS_REPLY_ARRAY && j + 1 < z->elements; j += 2)
            top_push(&cl->frozen, (int64_t)strtod(z->element[j + 1]->str, NULL),
                     z->element[j]->str);
        if (z)
            freeReplyObject(z);
    }
    freeReplyObject(h);
}

/* The rebuild state of the decaying boards: a sum of hashes of each ~decay
 * key with its gen and rebuilding flag (order-free), and how many are
 * rebuilding. The same sum before and after the keys were read, none
 * running: no overall board was swapped while they were. */
struct decay_state {
    uint64_t sum;
    size_t running;
};

static void add_decay_state(struct conn *c, const char *key, void *ctx)
{
    struct decay_state *ds = ctx;
    redisReply *st = command(c, "HMGET %s gen rebuilding", key);
    int ok = st && st->type == REDIS_REPLY_ARRAY && st->elements == 2;
    int rebuilding = ok && st->element[1]->type == REDIS_REPLY_STRING;
    char line[1200];
    snprintf(line, sizeof(line), "%s\n%s\n%d", key,
             ok && st->element[0]->type == REDIS_REPLY_STRING ? st->element[0]->str : "-",
             rebuilding);
    if (st)
        freeReplyObject(st);
    ds->running += (size_t)rebuilding;
    ds->sum += hash(line);
}

/* The closed windows of a map add_closed filled, as ~final said at one
 * moment: each window's key, state (claimed and published alike: done
 * changes nothing read here) and closing time (a window reopened and closed
 * again has another), hashed and summed, order-free. The sum of a second
 * look after the keys were read differs from the first when a window
 * closed, or replay reopened one, while they were. */
static uint64_t closed_sum(const struct map *closed)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < closed->cap; i++) {
        const struct closed *cl = closed->slots[i].key ? closed->slots[i].data : NULL;
        if (!cl)
            continue;
        char line[1000];
        snprintf(line, sizeof(line), "%s\n%s\n%lld", closed->slots[i].key,
                 strcmp(cl->state, "published") == 0 ? "claimed" : cl->state,
                 (long long)cl->closed_at);
        sum += hash(line);
    }
    return sum;
}

struct check {
    const struct rules *r;
    struct map *members, *keys, *tops;
    struct report *rep;
};

static void check_one(struct conn *c, const char *key, void *ctx)
{
    struct check *k = ctx;
    check_key(c, k->r, key, k->members, k->keys, k->tops, k->rep);
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
                                             {"profile", required_argument, NULL, 'P'},
                                             {"tls-dir", required_argument, NULL, 'T'},
                                             {"decay", required_argument, NULL, 'D'},
                                             {"split", required_argument, NULL, 'L'},
                                             {"rank", required_argument, NULL, 'R'},
                                             {"tag", required_argument, NULL, 'G'},
                                             {"results", required_argument, NULL, 'F'},
                                             {"idle-ms", required_argument, NULL, 'I'},
                                             {"topic", required_argument, NULL, 'O'},
                                             {"deliveries", required_argument, NULL, 'V'},
                                             {"final", required_argument, NULL, 'Z'},
                                             {NULL, 0, NULL, 0}};
    const char *events = NULL, *nodes = NULL, *tag = NULL, *deliveries = NULL;
    const char *rank[64];
    size_t nranks = 0;
    const char *final = NULL;
    struct map closed = {0}, delivered = {0};
    struct rules r = {.prefix = "lb:",
                      .resolution_ms = 1000,
                      .score_max = 8388607,
                      .idle_ms = 600000,
                      .topic = "scores",
                      .closed = &closed};
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
        case 'T':
            if (tls_init(optarg) != 0)
                return 2;
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
        case 'P':
            if (parse_profile(optarg, &r) != 0) {
                fprintf(stderr, "verify_state: bad --profile %s (want PREFIX=MODE/ORDER/TIE)\n",
                        optarg);
                return 2;
            }
            break;
        case 'D':
            if (parse_decay(optarg, &r) != 0) {
                fprintf(stderr,
                        "verify_state: bad --decay %s (want "
                        "PREFIX=DIM/TAX/linear|compound/MAX_AGE/PRECISION/KEY; compound: "
                        "MAX_AGE <= 4)\n",
                        optarg);
                return 2;
            }
            break;
        case 'L': {
            struct split *sp = &r.splits[r.nsplits];
            const char *eq = strchr(optarg, '=');
            if (r.nsplits == 8 || !eq || (size_t)(eq - optarg) >= sizeof(sp->prefix) ||
                sscanf(eq + 1, "%d/%d", &sp->shards, &sp->top) != 2 || sp->shards < 1 ||
                sp->top < 1) {
                fprintf(stderr, "verify_state: bad --split %s (want PREFIX=SHARDS/TOP)\n", optarg);
                return 2;
            }
            snprintf(sp->prefix, sizeof(sp->prefix), "%.*s", (int)(eq - optarg), optarg);
            r.nsplits++;
            break;
        }
        case 'R':
            if (nranks == sizeof(rank) / sizeof(rank[0])) {
                fprintf(stderr, "verify_state: more than %zu --rank\n", nranks);
                return 2;
            }
            rank[nranks++] = optarg;
            break;
        case 'G':
            tag = optarg;
            break;
        case 'F':
            if (parse_results(optarg, &r) != 0) {
                fprintf(stderr,
                        "verify_state: bad --results %s (want PREFIX=KIND/TOP/GRACE_MS[,...])\n",
                        optarg);
                return 2;
            }
            break;
        case 'I':
            r.idle_ms = strtoll(optarg, NULL, 10);
            break;
        case 'O':
            r.topic = optarg;
            break;
        case 'V':
            deliveries = optarg;
            break;
        case 'Z':
            final = optarg;
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
    if (tag) { /* the rules alone: no events, no node */
        char board[256], player[256], out[320];
        if (sscanf(tag, "%255[^/]/%255s", board, player) != 2) {
            fprintf(stderr, "verify_state: bad --tag %s (want BOARD/PLAYER)\n", tag);
            return 2;
        }
        tag_of(&r, board, player, out, sizeof(out));
        printf("%s\n", out);
        return 0;
    }
    if (!events || (!nodes && !nranks) || (final && !nodes) || r.resolution_ms <= 0) {
        fprintf(stderr, "usage: verify_state --events FILE --nodes H:P,... [rules]\n");
        return 2;
    }
    int64_t ticks = (r.horizon_ms - r.epoch_ms + r.resolution_ms - 1) / r.resolution_ms;
    while ((INT64_C(1) << r.tie_bits) < ticks)
        r.tie_bits++;

    char copy[1024];
    snprintf(copy, sizeof(copy), "%s", nodes ? nodes : "");
    char *node[64];
    int port[64];
    size_t nnodes = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && nnodes < 64;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon)
            return 2;
        *colon = '\0';
        node[nnodes] = tok;
        port[nnodes++] = atoi(colon + 1);
    }
    /* the windows that closed (final standings), before the events: an
     * event at or past a closed window's close offset is left out of it */
    char finals[256];
    snprintf(finals, sizeof(finals), "%s*:~final", r.prefix);
    for (size_t i = 0; i < nnodes; i++)
        if (scan_node(node[i], port[i], finals, add_closed, &r) != 0)
            return 2;
    if (deliveries) {
        load_deliveries(deliveries, &delivered);
        r.delivered = &delivered;
    }

    struct map members = {0}, keys = {0};
    size_t applied = load_events(events, &r, &members, &keys);
    deliveries_free(&delivered);
    r.delivered = NULL;
    add_decayed(&r, &members, &keys);
    if (nranks) {
        int rc = 0;
        for (size_t i = 0; i < nranks; i++) {
            int one = print_rank(&r, &members, rank[i]);
            rc = one > rc ? one : rc;
        }
        map_free(&members);
        map_free(&keys);
        closed_free(&closed);
        return rc;
    }
    add_expected(&r, &members);
    struct report rep = {0};
    if (final) {
        check_closed(&r, &rep);
        int rc = rep.differences ? 1 : print_final(&r, &members, final);
        map_free(&members);
        map_free(&keys);
        closed_free(&closed);
        return rc;
    }
    struct map tops = {0};
    add_tops(&r, &members, &keys, &tops);
    /* a rebuild that ran, started or ended while the keys were read
     * leaves old and new overall boards mixed in what was read: unsettled */
    struct decay_state before = {0}, after = {0};
    struct check check = {&r, &members, &keys, &tops, &rep};
    char all[256], decay[256];
    snprintf(all, sizeof(all), "%s*", r.prefix);
    snprintf(decay, sizeof(decay), "%s*:~decay", r.prefix);
    for (size_t i = 0; i < nnodes; i++)
        if (scan_node(node[i], port[i], decay, add_decay_state, &before) != 0)
            return 2;
    for (size_t i = 0; i < nnodes; i++)
        if (scan_node(node[i], port[i], all, check_one, &check) != 0)
            return 2;
    for (size_t i = 0; i < nnodes; i++)
        if (scan_node(node[i], port[i], decay, add_decay_state, &after) != 0)
            return 2;
    rep.rebuilding = before.running || after.running || before.sum != after.sum;
    struct map closed_again = {0};
    struct rules again = r;
    again.closed = &closed_again;
    for (size_t i = 0; i < nnodes; i++)
        if (scan_node(node[i], port[i], finals, add_closed, &again) != 0)
            return 2;
    rep.closing = closed_sum(&closed_again) != closed_sum(&closed);
    closed_free(&closed_again);
    size_t expected = 0;
    for (size_t i = 0; i < keys.cap; i++) {
        if (!keys.slots[i].key || keys.slots[i].aux == 0)
            continue; /* every member retracted: the key is gone */
        expected++;
        if (!keys.slots[i].seen)
            difference(&rep, "missing key %s (%lld members)", keys.slots[i].key,
                       (long long)keys.slots[i].aux);
    }
    for (size_t i = 0; i < members.cap; i++) {
        const struct entry *e = &members.slots[i];
        const struct member *m = e->key ? e->data : NULL;
        if (!m || !m->present || e->seen)
            continue;
        const char *nl = strchr(e->key, '\n');
        char key[900];
        snprintf(key, sizeof(key), "%.*s", (int)(nl - e->key), e->key);
        const struct entry *k = map_get(&keys, key, 0);
        if (k && k->seen) /* a missing key is reported as such */
            difference(&rep, "%s: member %s missing (expected %lld)", key, nl + 1,
                       (long long)m->value);
    }
    for (size_t i = 0; i < tops.cap; i++)
        if (tops.slots[i].key && !tops.slots[i].seen &&
            ((struct top_list *)tops.slots[i].data)->n) {
            rep.top_differences++;
            difference(&rep, "missing merged top %s", tops.slots[i].key);
        }
    size_t closed_checked = check_closed(&r, &rep);
    printf("verify_state: %zu closed windows checked (final standings), %zu late writes left out\n",
           closed_checked, closed_late);
    printf("verify_state: %zu events applied, %zu keys expected, %zu keys found, %zu members "
           "checked, %zu merged tops checked, %zu differences\n",
           applied, expected, rep.keys_found, rep.members_checked, rep.tops_checked,
           rep.differences);
    map_free(&members);
    map_free(&keys);
    tops_free(&tops);
    closed_free(&closed);
    if (rep.differences && rep.differences == rep.top_differences) {
        printf("verify_state: only merged tops differ: not refreshed yet (not settled)\n");
        return 3;
    }
    if (rep.rebuilding) {
        printf("verify_state: a decaying board was rebuilt while the keys were read, or is "
               "being rebuilt: not settled\n");
        return 3;
    }
    if (rep.closing) {
        printf("verify_state: a window closed or was reopened while the keys were read: not "
               "settled\n");
        return 3;
    }
    return rep.differences ? 1 : 0;
}
