/* What the results topic holds; see published.h. */
#include "published.h"
#include "apply.h"
#include "clock.h"
#include "slot.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_MAX 1024

struct start {
    char *key; /* "{B}:<window>" */
    int32_t partition;
    int64_t offset; /* of the last part 1 */
};

struct lb_published {
    rd_kafka_t *rk;      /* reads the index */
    rd_kafka_t *fetcher; /* fetches a publication (another thread may read meanwhile) */
    char *topic;
    pthread_mutex_t lock;
    struct start *starts; /* sorted by key */
    size_t n, cap;
    int64_t *next; /* per partition: where the next read starts */
    int npartitions;
    int ready;
};

struct lb_published *lb_published_new(const struct lb_kafka_options *kafka, const char *group,
                                      const char *topic, char *err, size_t errlen)
{
    struct lb_published *p = calloc(1, sizeof(*p));
    if (!p || !(p->topic = strdup(topic))) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    /* never commits; says when a partition's end is reached (a compacted
     * topic has gaps: counting records would never end) */
    const char *const fixed[][2] = {{"group.id", group},
                                    {"enable.auto.commit", "false"},
                                    {"enable.auto.offset.store", "false"},
                                    {"auto.offset.reset", "earliest"},
                                    {"enable.partition.eof", "true"},
                                    /* a fetch of one publication: at once, not 500 ms later */
                                    {"fetch.wait.max.ms", "10"}};
    struct lb_kafka_client client = {
        .type = RD_KAFKA_CONSUMER, .fixed = fixed, .nfixed = sizeof(fixed) / sizeof(fixed[0])};
    if (!(p->rk = lb_kafka_new(kafka, &client, err, errlen, NULL)) ||
        !(p->fetcher = lb_kafka_new(kafka, &client, err, errlen, NULL))) {
        lb_published_free(p);
        return NULL;
    }
    return p;
}

void lb_published_free(struct lb_published *p)
{
    if (!p)
        return;
    if (p->rk)
        rd_kafka_destroy(p->rk);
    if (p->fetcher)
        rd_kafka_destroy(p->fetcher);
    for (size_t i = 0; i < p->n; i++)
        free(p->starts[i].key);
    free(p->starts);
    free(p->next);
    free(p->topic);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* The first start whose key is not below 'key' (under the lock). */
static size_t lower_bound(const struct lb_published *p, const char *key, size_t len)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *k = p->starts[mid].key;
        size_t kl = strlen(k);
        int c = memcmp(k, key, kl < len ? kl : len);
        if (c < 0 || (c == 0 && kl < len))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int note_start(struct lb_published *p, const char *key, size_t len, int32_t partition,
                      int64_t offset)
{
    pthread_mutex_lock(&p->lock);
    size_t at = lower_bound(p, key, len);
    int rc = 0;
    if (at < p->n && strlen(p->starts[at].key) == len && memcmp(p->starts[at].key, key, len) == 0) {
        p->starts[at].partition = partition;
        p->starts[at].offset = offset;
    } else {
        char *copy = strndup(key, len);
        if (p->n == p->cap) {
            size_t cap = p->cap ? 2 * p->cap : 256;
            struct start *more = copy ? realloc(p->starts, cap * sizeof(*more)) : NULL;
            if (more) {
                p->starts = more;
                p->cap = cap;
            }
        }
        if (copy && p->n < p->cap) {
            memmove(&p->starts[at + 1], &p->starts[at], (p->n - at) * sizeof(*p->starts));
            p->starts[at] = (struct start){copy, partition, offset};
            p->n++;
        } else {
            free(copy);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* The topic's partitions now: their count, 0 for a topic that does not
 * exist, -1 when the brokers did not say. */
static int partitions_of(struct lb_published *p, int timeout_ms, rd_kafka_resp_err_t *e)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(p->rk, p->topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    *e = t ? rd_kafka_metadata(p->rk, 0, t, &md, timeout_ms) : rd_kafka_last_error();
    int n = -1;
    if (!*e && md->topic_cnt == 1) {
        rd_kafka_resp_err_t te = md->topics[0].err;
        if (te == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            n = 0;
        else if (te)
            *e = te;
        else
            n = md->topics[0].partition_cnt;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    if (t)
        rd_kafka_topic_destroy(t);
    return n;
}

/* The next message or event of 'rk', waiting at most until 'deadline'
 * (monotonic ms) in steps of 200 ms; NULL with *e set once it passed. */
static rd_kafka_message_t *poll_until(rd_kafka_t *rk, int64_t deadline, rd_kafka_resp_err_t *e)
{
    for (;;) {
        int64_t ms = deadline - lb_monotonic_ms();
        if (ms <= 0) {
            *e = RD_KAFKA_RESP_ERR__TIMED_OUT;
            return NULL;
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, ms < 200 ? (int)ms : 200);
        if (m)
            return m;
    }
}

int lb_published_read(struct lb_published *p, int timeout_ms, char *err, size_t errlen)
{
    int64_t deadline = lb_monotonic_ms() + timeout_ms;
    rd_kafka_resp_err_t e;
    int n = partitions_of(p, timeout_ms, &e);
    if (n < 0) {
        snprintf(err, errlen, "results topic %s: %s", p->topic, rd_kafka_err2str(e));
        return -1;
    }
    if (n > p->npartitions) {
        int64_t *more = realloc(p->next, (size_t)n * sizeof(*more));
        if (!more) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (int i = p->npartitions; i < n; i++)
            more[i] = -1; /* from its low watermark */
        p->next = more;
        p->npartitions = n;
    }
    int64_t *high = calloc((size_t)(n ? n : 1), sizeof(*high)), left = 0; /* partitions */
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n ? n : 1);
    e = high && list ? RD_KAFKA_RESP_ERR_NO_ERROR : RD_KAFKA_RESP_ERR__FAIL;
    for (int i = 0; !e && i < n; i++) {
        int64_t low;
        int64_t ms = deadline - lb_monotonic_ms();
        e = rd_kafka_query_watermark_offsets(p->rk, p->topic, i, &low, &high[i],
                                             ms > 0 ? (int)ms : 1);
        if (!e && p->next[i] < low)
            p->next[i] = low; /* compacted or deleted below: nothing to read there */
        if (!e && p->next[i] < high[i]) {
            rd_kafka_topic_partition_list_add(list, p->topic, i)->offset = p->next[i];
            left++;
        }
    }
    if (!e && left)
        e = rd_kafka_assign(p->rk, list);
    rd_kafka_message_t *m;
    while (!e && left > 0 && (m = poll_until(p->rk, deadline, &e))) {
        int32_t i = m->partition;
        int was_left = i >= 0 && i < n && p->next[i] < high[i];
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (was_left && m->offset >= high[i])
                p->next[i] = m->offset;
        } else if (m->err) {
            e = m->err;
        } else if (was_left && m->offset >= p->next[i]) {
            struct lb_result_view v;
            /* a record that is not a WindowResult names no window */
            if (m->key && !memchr(m->key, '#', m->key_len) &&
                lb_results_decode(m->payload, m->len, &v, NULL, NULL) == 0 && v.part == 1 &&
                note_start(p, m->key, m->key_len, i, m->offset) != 0)
                e = RD_KAFKA_RESP_ERR__FAIL; /* out of memory */
            p->next[i] = m->offset + 1;
        }
        if (was_left && p->next[i] >= high[i])
            left--;
        rd_kafka_message_destroy(m);
    }
    rd_kafka_assign(p->rk, NULL);
    if (list)
        rd_kafka_topic_partition_list_destroy(list);
    free(high);
    if (e) {
        snprintf(err, errlen, "reading results topic %s: %s", p->topic, rd_kafka_err2str(e));
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    p->ready = 1;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int lb_published_ready(const struct lb_published *p)
{
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    int ready = p->ready;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    return ready;
}

/* Where "{board}:window" last started: 1, or 0 when never published. */
static int find(const struct lb_published *p, const char *board, const char *window,
                int32_t *partition, int64_t *offset)
{
    char key[KEY_MAX];
    size_t len = lb_results_record_key(board, window, 1, key, sizeof(key));
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    size_t at = lower_bound(p, key, len);
    int found = at < p->n && strcmp(p->starts[at].key, key) == 0;
    if (found) {
        *partition = p->starts[at].partition;
        *offset = p->starts[at].offset;
    }
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    return found;
}

int lb_published_has(const struct lb_published *p, const char *board, const char *window)
{
    int32_t partition;
    int64_t offset;
    return find(p, board, window, &partition, &offset);
}

void lb_published_windows(const struct lb_published *p, const char *board,
                          void (*fn)(void *ctx, const char *window), void *ctx)
{
    char prefix[KEY_MAX];
    size_t len = lb_results_record_key(board, "", 1, prefix, sizeof(prefix));
    char **windows = NULL;
    size_t n = 0;
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    size_t at = lower_bound(p, prefix, len), end = at;
    while (end < p->n && strncmp(p->starts[end].key, prefix, len) == 0)
        end++;
    if (end > at && (windows = calloc(end - at, sizeof(*windows))))
        for (size_t i = at; i < end; i++)
            if ((windows[n] = strdup(p->starts[i].key + len)))
                n++;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    for (size_t i = 0; i < n; i++) {
        fn(ctx, windows[i]);
        free(windows[i]);
    }
    free(windows);
}

size_t lb_published_boards(const struct lb_published *p, char **boards, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    for (size_t i = 0; i < p->n && n < max; i++) {
        const char *key = p->starts[i].key, *close = strchr(key, '}');
        if (key[0] != '{' || !close)
            continue;
        size_t len = (size_t)(close - key - 1);
        if (n && strlen(boards[n - 1]) == len && memcmp(boards[n - 1], key + 1, len) == 0)
            continue; /* sorted: a board's windows in a row */
        if ((boards[n] = strndup(key + 1, len)))
            n++;
    }
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    return n;
}

/* Fetching: each part's entries appended to the publication. */
struct gather {
    struct lb_publication *out;
    size_t cap, arena_len, arena_cap;
};

static int gather_entry(void *ctx, const struct lb_standing *e)
{
    struct gather *g = ctx;
    struct lb_publication *out = g->out;
    if (out->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        struct lb_standing *more = realloc(out->entries, cap * sizeof(*more));
        if (!more)
            return -1;
        out->entries = more;
        g->cap = cap;
    }
    if (g->arena_len + e->len > g->arena_cap) {
        size_t cap = g->arena_cap ? 2 * g->arena_cap : 4096;
        while (cap < g->arena_len + e->len)
            cap *= 2;
        char *more = realloc(out->arena, cap);
        if (!more)
            return -1;
        out->arena = more;
        g->arena_cap = cap;
    }
    memcpy(out->arena + g->arena_len, e->player, e->len);
    /* the arena may move: its offset now, made a pointer once all are in */
    out->entries[out->n] = *e;
    out->entries[out->n].player = (const char *)(uintptr_t)g->arena_len;
    out->n++;
    g->arena_len += e->len;
    return 0;
}

int lb_published_fetch(struct lb_published *p, const char *board, const char *window,
                       struct lb_publication *out, int timeout_ms, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    int32_t partition;
    int64_t offset;
    if (!find(p, board, window, &partition, &offset))
        return 1;
    char key[KEY_MAX];
    size_t klen = lb_results_record_key(board, window, 1, key, sizeof(key));
    int64_t deadline = lb_monotonic_ms() + timeout_ms;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, p->topic, partition)->offset = offset;
    rd_kafka_resp_err_t e = rd_kafka_assign(p->fetcher, list);
    rd_kafka_topic_partition_list_destroy(list);
    struct gather g = {out, 0, 0, 0};
    int64_t want = 1, parts = -1;
    rd_kafka_message_t *m;
    while (!e && (parts < 0 || want <= parts) && (m = poll_until(p->fetcher, deadline, &e))) {
        struct lb_result_view v;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            e = RD_KAFKA_RESP_ERR__PARTITION_EOF; /* a part missing */
        } else if (m->err) {
            e = m->err;
        } else if (m->key_len >= klen && memcmp(m->key, key, klen) == 0 &&
                   (m->key_len == klen || ((const char *)m->key)[klen] == '#') &&
                   lb_results_decode(m->payload, m->len, &v, NULL, NULL) == 0 && v.part == want &&
                   (parts < 0 || v.parts == parts)) {
            if (want == 1) {
                parts = v.parts;
                out->closed_at_ms = v.closed_at_ms;
                out->players = v.players;
                rd_kafka_headers_t *h;
                const void *value = NULL;
                size_t size = 0;
                if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
                    rd_kafka_header_get_last(h, LB_CLOSE_OFFSETS_HEADER, &value, &size);
                out->offsets = strndup(value ? value : "", value ? size : 0);
            }
            if (!out->offsets || lb_results_decode(m->payload, m->len, &v, gather_entry, &g) != 0)
                e = RD_KAFKA_RESP_ERR__FAIL;
            want++;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_assign(p->fetcher, NULL);
    for (size_t i = 0; i < out->n; i++)
        out->entries[i].player = out->arena + (uintptr_t)out->entries[i].player;
    if (e) {
        snprintf(err, errlen, "fetching %s from results topic %s: %s", key, p->topic,
                 rd_kafka_err2str(e));
        lb_publication_free(out);
        return -1;
    }
    return 0;
}

void lb_publication_free(struct lb_publication *pub)
{
    free(pub->offsets);
    free(pub->entries);
    free(pub->arena);
    memset(pub, 0, sizeof(*pub));
}

redisReply *lb_final_step(struct lb_cluster *cluster, const char *prefix, const char *board,
                          const char *window, const char *step, const char *holder, int lease_ms,
                          const char *const *extra, const size_t *extralen, size_t nextra)
{
    struct lb_str id = {board, (uint32_t)strlen(board)};
    char keys[7][KEY_MAX], lease[24];
    size_t klen[7], n = 0;
    klen[0] = lb_marker_key(prefix, id, keys[0], KEY_MAX);
    klen[1] = lb_marker_zset_key(prefix, id, keys[1], KEY_MAX);
    klen[2] = lb_board_key(prefix, id, LB_OPEN_KEY, keys[2], KEY_MAX);
    klen[3] = lb_board_key(prefix, id, LB_FINAL_KEY, keys[3], KEY_MAX);
    klen[4] = lb_board_key(prefix, id, window, keys[4], KEY_MAX);
    klen[5] = lb_final_key(prefix, id, window, keys[5], KEY_MAX);
    klen[6] = lb_intact_key(prefix, lb_key_slot(keys[3], klen[3]), keys[6], KEY_MAX);
    const char **argv = malloc((16 + nextra) * sizeof(*argv));
    size_t *argvlen = malloc((16 + nextra) * sizeof(*argvlen));
    if (!argv || !argvlen) {
        free(argv);
        free(argvlen);
        return NULL;
    }
#define ARG(s, l) (argv[n] = (s), argvlen[n++] = (l))
    ARG("EVALSHA", 7);
    ARG(lb_apply_script_sha(), 40);
    ARG("7", 1);
    for (size_t i = 0; i < 7; i++)
        ARG(keys[i], klen[i]);
    ARG(LB_APPLY_VERSION_TEXT, sizeof(LB_APPLY_VERSION_TEXT) - 1);
    ARG("C", 1);
    ARG(step, strlen(step));
    ARG(holder, strlen(holder));
    ARG(lease, (size_t)snprintf(lease, sizeof(lease), "%d", lease_ms));
    ARG(window, strlen(window));
    for (size_t i = 0; i < nextra; i++)
        ARG(extra[i], extralen[i]);
#undef ARG
    redisReply *reply =
        lb_cluster_command(cluster, lb_key_slot(keys[3], klen[3]), (int)n, argv, argvlen);
    free(argv);
    free(argvlen);
    return reply;
}

redisReply *lb_reopened_touch(struct lb_cluster *cluster, const char *prefix, const char *who)
{
    char key[KEY_MAX], at[300];
    int klen = snprintf(key, sizeof(key), "%s%s", prefix, LB_REOPENED_KEY);
    const char *argv[] = {"HSET", key, "at", at};
    size_t argvlen[] = {4, (size_t)klen, 2,
                        (size_t)snprintf(at, sizeof(at), "%s %lld", who, (long long)lb_wall_ms())};
    return lb_cluster_command(cluster, lb_key_slot(key, (size_t)klen), 4, argv, argvlen);
}

/* One command per slot of 'which' (every slot when NULL), built by 'fn'
 * with its mark's key; the replies in 'reqs' (LB_SLOTS, calloc'ed by the
 * caller, replies freed by it). The number that failed (the first's
 * reason in 'err', and in '*eclass' LB_REDIS_RETRY when every failure was
 * transient), or -1 out of memory. */
static long intact_each(struct lb_cluster *cluster, const char *prefix, const uint8_t *which,
                        int writes, int (*fn)(struct lb_buf *, const char *, size_t, void *),
                        void *ctx, struct lb_request *reqs, char *err, size_t errlen,
                        enum lb_redis_error *eclass)
{
    *eclass = LB_REDIS_FIX;
    struct lb_buf buf = {0};
    size_t at[LB_SLOTS], n = 0;
    uint16_t slots[LB_SLOTS];
    for (uint32_t slot = 0; slot < LB_SLOTS; slot++) {
        if (which && !which[slot])
            continue;
        char key[KEY_MAX];
        size_t klen = lb_intact_key(prefix, (uint16_t)slot, key, sizeof(key));
        at[n] = buf.len;
        slots[n++] = (uint16_t)slot;
        if (!klen || fn(&buf, key, klen, ctx) != 0) {
            lb_buf_free(&buf);
            snprintf(err, errlen, klen ? "out of memory" : "key prefix too long");
            return -1;
        }
    }
    for (size_t i = 0; i < n; i++) /* the buffer has stopped moving */
        reqs[i] = (struct lb_request){.slot = slots[i],
                                      .writes = (uint8_t)writes, /* WAITed for, as configured */
                                      .ncommands = 1,
                                      .bytes = buf.data + at[i],
                                      .len = (i + 1 < n ? at[i + 1] : buf.len) - at[i]};
    long failed = n ? (long)lb_cluster_exec(cluster, reqs, n) : 0;
    *eclass = failed ? LB_REDIS_RETRY : LB_REDIS_OK;
    for (size_t i = n; i-- > 0 && failed;) /* the first failure's reason, the worst class */
        if (!reqs[i].ok) {
            snprintf(err, errlen, "slot %u: %s", (unsigned)reqs[i].slot, reqs[i].error);
            if (reqs[i].error_class != LB_REDIS_RETRY)
                *eclass = (enum lb_redis_error)reqs[i].error_class;
        }
    lb_buf_free(&buf);
    return failed;
}

static int exists_command(struct lb_buf *buf, const char *key, size_t klen, void *ctx)
{
    (void)ctx;
    const char *argv[] = {"EXISTS", key};
    size_t argvlen[] = {6, klen};
    return lb_buf_command(buf, 2, argv, argvlen);
}

static int mark_command(struct lb_buf *buf, const char *key, size_t klen, void *ctx)
{
    const char *const *what = ctx;
    const char *argv[] = {"HSET", key, "by", what[0], "at", what[1]};
    size_t argvlen[] = {4, klen, 2, strlen(what[0]), 2, strlen(what[1])};
    return lb_buf_command(buf, 6, argv, argvlen);
}

static void free_replies(struct lb_request *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i].reply)
            freeReplyObject(reqs[i].reply);
    free(reqs);
}

long lb_intact_missing(struct lb_cluster *cluster, const char *prefix, uint8_t *missing, char *err,
                       size_t errlen, enum lb_redis_error *eclass)
{
    enum lb_redis_error ignored;
    eclass = eclass ? eclass : &ignored;
    struct lb_request *reqs = calloc(LB_SLOTS, sizeof(*reqs));
    if (!reqs) {
        snprintf(err, errlen, "out of memory");
        *eclass = LB_REDIS_NOMEM;
        return -1;
    }
    long rc =
        intact_each(cluster, prefix, NULL, 0, exists_command, NULL, reqs, err, errlen, eclass);
    for (uint32_t slot = 0; rc == 0 && slot < LB_SLOTS; slot++) {
        const redisReply *r = reqs[slot].reply;
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            snprintf(err, errlen, "slot %u: unexpected answer to EXISTS", (unsigned)slot);
            *eclass = LB_REDIS_FIX;
            rc = -1;
            break;
        }
        missing[slot] = r->integer == 0;
    }
    long count = 0;
    for (uint32_t slot = 0; rc == 0 && slot < LB_SLOTS; slot++)
        count += missing[slot];
    free_replies(reqs, LB_SLOTS);
    return rc == 0 ? count : -1;
}

int lb_intact_mark(struct lb_cluster *cluster, const char *prefix, const uint8_t *which,
                   const char *by, char *err, size_t errlen, enum lb_redis_error *eclass)
{
    enum lb_redis_error ignored;
    eclass = eclass ? eclass : &ignored;
    struct lb_request *reqs = calloc(LB_SLOTS, sizeof(*reqs));
    if (!reqs) {
        snprintf(err, errlen, "out of memory");
        *eclass = LB_REDIS_NOMEM;
        return -1;
    }
    char at[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    const char *what[] = {by, at};
    long rc = intact_each(cluster, prefix, which, 1, mark_command, (void *)what, reqs, err, errlen,
                          eclass);
    free_replies(reqs, LB_SLOTS);
    return rc == 0 ? 0 : -1;
}

int lb_published_restore(struct lb_cluster *cluster, const char *key_prefix,
                         const struct lb_profile *profile, const char *board, const char *window,
                         const struct lb_publication *pub, int keep, char *err, size_t errlen)
{
    size_t nextra = 4 + (keep ? 2 * pub->n : 0);
    const char **extra = calloc(nextra, sizeof(*extra));
    size_t *extralen = calloc(nextra, sizeof(*extralen));
    char(*numbers)[24] = calloc(2 + (keep ? pub->n : 0), sizeof(*numbers));
    int rc = extra && extralen && numbers ? 0 : -1;
    if (rc != 0)
        snprintf(err, errlen, "out of memory");
    size_t k = 0;
#define EXTRA(s, l) (extra[k] = (s), extralen[k++] = (l))
    if (rc == 0) {
        EXTRA(numbers[0], (size_t)snprintf(numbers[0], 24, "%lld", (long long)pub->closed_at_ms));
        EXTRA(numbers[1], (size_t)snprintf(numbers[1], 24, "%lld", (long long)pub->players));
        EXTRA(pub->offsets, strlen(pub->offsets));
        EXTRA(keep ? "1" : "0", 1);
    }
    for (size_t i = 0; rc == 0 && keep && i < pub->n; i++) {
        const struct lb_standing *e = &pub->entries[i];
        int64_t composite;
        if (lb_composite(&profile->scoring, e->score, e->achieved_at_ms, &composite) !=
            LB_SCORE_OK) {
            snprintf(err, errlen,
                     "board '%s' window '%s': the score %lld of '%.*s' does not fit the "
                     "profile's scoring any more",
                     board, window, (long long)e->score, (int)e->len, e->player);
            rc = -1;
            break;
        }
        char *num = numbers[2 + i];
        EXTRA(num, (size_t)snprintf(num, 24, "%lld", (long long)composite));
        EXTRA(e->player, e->len);
    }
#undef EXTRA
    redisReply *reply = rc == 0 ? lb_final_step(cluster, key_prefix, board, window, "restore", "-",
                                                0, extra, extralen, k)
                                : NULL;
    if (rc == 0) {
        if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
            reply->element[0]->type == REDIS_REPLY_STRING) {
            rc = strcmp(reply->element[0]->str, "restored") == 0  ? 1
                 : strcmp(reply->element[0]->str, "present") == 0 ? 0
                                                                  : -1;
            if (rc < 0)
                snprintf(err, errlen, "board '%s' window '%s': the script answered %s", board,
                         window, reply->element[0]->str);
        } else {
            snprintf(err, errlen, "board '%s' window '%s': %s", board, window,
                     !reply                             ? lb_cluster_error(cluster)
                     : reply->type == REDIS_REPLY_ERROR ? reply->str
                                                        : "unexpected answer");
            rc = -1;
        }
    }
    if (reply)
        freeReplyObject(reply);
    free(extra);
    free(extralen);
    free(numbers);
    return rc;
}
