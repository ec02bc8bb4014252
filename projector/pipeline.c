/* Batch projection; see pipeline.h.
 *
 * Two batch slots let the daemon overlap its own work with Redis': while one
 * batch is in flight (sent, replies not yet read), the next is decoded and
 * planned into the other slot. Only one batch is ever in flight, so writes
 * reach Redis in batch order.
 *
 * Every record is decoded and validated before anything is written, so a
 * bad record never leaves a half-planned batch behind. Records map to
 * transactions many-to-one (one transaction per board); after writing, a
 * record's durability is simply its transaction's outcome. Failed
 * transactions are resent as they were encoded: the apply script skips
 * what an earlier attempt applied, so a lost reply does no harm.
 *
 * Held pairs (see pipeline.h) live in a small hash set of (board,
 * partition). At send time, each board request with events from a held
 * pair is planned again without them (the same mechanism that leaves out
 * events the markers say were applied); a board left with nothing is not
 * sent at all. The set is empty in normal operation, so the check costs one
 * comparison per batch.
 */
#include "pipeline.h"
#include "apply.h"
#include "clock.h"
#include "log.h"
#include "planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000

/* Why a record left its board's request. */
enum record_fate {
    FATE_PLANNED = 0,
    FATE_APPLIED_BEFORE, /* an earlier attempt applied it: the marker says so */
    FATE_REJECTED,       /* its sum would leave [sum_min, sum_max] */
    FATE_WITHHELD,       /* its (board, partition) is held */
    FATE_DUPLICATE,      /* its board counted its event_id before (dedupe) */
    FATE_CONFLICT,       /* the same, with another payload */
};

/* What to leave out of a board's request when planning it again. */
enum exclusion_kind {
    EXCLUDE_APPLIED,   /* a partition's events up to 'marker': applied before */
    EXCLUDE_MEMBER,    /* a member whose sum would overflow */
    EXCLUDE_PARTITION, /* every event of a partition: its pair is held */
    EXCLUDE_DUPLICATE, /* the event at offset 'marker' of a partition: counted before */
    EXCLUDE_CONFLICT,  /* the same, with another payload */
};

struct exclusion {
    uint32_t txn;
    uint8_t kind;                   /* enum exclusion_kind */
    char what[LB_MARKER_FIELD_MAX]; /* a marker field ("<topic>:<partition>") or a member */
    int64_t marker; /* EXCLUDE_APPLIED: the last offset already applied; duplicates: theirs */
};

/* A (board, partition) whose events are held back. */
struct held_pair {
    char *board;
    uint32_t board_len;
    char *topic;
    int32_t partition;
    uint32_t hash;
    int needs_fix; /* held for a failure an operator must fix */
};

struct held_set {
    struct held_pair *pairs;
    size_t count, cap;
    uint32_t *index; /* open addressing: pair number + 1, 0 empty */
    size_t mask;
};

struct slot {
    struct lb_plan *plan;
    struct lb_plan *rebuilt; /* boards planned again after the script's answer */
    struct lb_apply_batch encoded, encoded_rebuilt; /* their requests */
    struct lb_arena arena;                          /* decoded dims */
    const struct lb_record *records;
    size_t count;
    uint32_t *txn_of; /* per record: its request (board), or UINT32_MAX when rejected */
    uint8_t *fate;    /* per record: enum record_fate */
    int64_t *ts;      /* per record: the event time, for the visibility latency */
    size_t cap_records;
    struct lb_request *requests;
    uint32_t *request_txn; /* per request: the transaction it carries */
    uint8_t *txn_ok;
    uint8_t *txn_rebuilt; /* per transaction: its bytes come from 'rebuilt' */
    uint8_t *txn_class;   /* per transaction: enum lb_redis_error of its last failure */
    size_t cap_txns;
    int64_t now_ms; /* the wall clock the batch was planned with */
    size_t pending; /* requests not yet written successfully */
    int oom;        /* preparing the send ran out of memory (nothing more was sent) */
    int early;      /* some requests went out while the batch ahead was answered */
    struct exclusion *exclusions;
    size_t nexclusions, cap_exclusions;
};

struct lb_pipeline {
    int64_t max_future_ms;
    const char *key_prefix; /* the keyspace written */
    struct lb_apply_options apply;
    const struct lb_decoder *decoder;
    struct lb_cluster *clusters[2]; /* slot i's; the same one unless overlapping */
    struct lb_cluster *own;         /* the second, created by lb_pipeline_overlap */
    /* when lb_pipeline_progress found every reply of the batch in flight in
     * and all of them OK (monotonic ms; 0: not seen so): the batch's end,
     * unless complete has to send anything again */
    int64_t answered_ms;
    int own_mapped; /* it was asked for the slot map (at the first send) */
    struct slot slots[2];
    int prepared;  /* slot planned but not sent, or -1 */
    int inflight;  /* slot sent but not completed, or -1 */
    int completed; /* the slot completed last, or -1 */
    struct lb_pipeline_stats stats;
    struct lb_pipeline_failure failure;
    uint64_t jitter;
    struct held_set held;
    struct lb_ratelimit retry_said, held_said, reject_said;
    lb_pipeline_filter_fn filter;
    void *filter_ctx;
    lb_pipeline_reject_fn on_reject;
    void *reject_ctx;
    lb_pipeline_applied_fn on_applied;
    void *applied_ctx;
};

void lb_pipeline_set_applied_hook(struct lb_pipeline *p, lb_pipeline_applied_fn fn, void *ctx)
{
    p->on_applied = fn;
    p->applied_ctx = ctx;
}

void lb_pipeline_set_reject_hook(struct lb_pipeline *p, lb_pipeline_reject_fn fn, void *ctx)
{
    p->on_reject = fn;
    p->reject_ctx = ctx;
}

void lb_pipeline_set_filter(struct lb_pipeline *p, lb_pipeline_filter_fn filter, void *ctx)
{
    p->filter = filter;
    p->filter_ctx = ctx;
}

void lb_pipeline_set_closed(struct lb_pipeline *p, lb_plan_closed_fn closed, void *ctx)
{
    for (int i = 0; i < 2; i++) {
        lb_plan_set_closed(p->slots[i].plan, closed, ctx);
        lb_plan_set_closed(p->slots[i].rebuilt, closed, ctx);
    }
}

struct lb_pipeline *lb_pipeline_new(const struct lb_pipeline_options *options,
                                    const struct lb_decoder *decoder, struct lb_cluster *cluster)
{
    struct lb_pipeline *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->key_prefix = options->key_prefix;
    p->apply = (struct lb_apply_options){options->key_prefix, options->window_stamps};
    p->max_future_ms = options->max_future_ms;
    p->decoder = decoder;
    p->clusters[0] = p->clusters[1] = cluster;
    p->jitter = 0x9e3779b97f4a7c15u;
    p->prepared = p->inflight = p->completed = -1;
    lb_histogram_init(&p->stats.visible, lb_latency_bounds, lb_latency_nbounds);
    for (int i = 0; i < 2; i++) {
        lb_arena_init(&p->slots[i].arena, 1 << 16);
        if (!(p->slots[i].plan = lb_plan_new(&options->plan)) ||
            !(p->slots[i].rebuilt = lb_plan_new(&options->plan))) {
            lb_pipeline_free(p);
            return NULL;
        }
    }
    return p;
}

void lb_pipeline_free(struct lb_pipeline *p)
{
    if (!p)
        return;
    for (int i = 0; i < 2; i++) {
        struct slot *s = &p->slots[i];
        for (size_t k = 0; k < s->pending; k++)
            if (s->requests[k].reply) /* of requests that went out early */
                freeReplyObject(s->requests[k].reply);
        lb_plan_free(s->plan);
        lb_plan_free(s->rebuilt);
        lb_apply_batch_free(&s->encoded);
        lb_apply_batch_free(&s->encoded_rebuilt);
        lb_arena_free(&s->arena);
        free(s->txn_of);
        free(s->fate);
        free(s->ts);
        free(s->requests);
        free(s->request_txn);
        free(s->txn_ok);
        free(s->txn_rebuilt);
        free(s->txn_class);
        free(s->exclusions);
    }
    for (size_t i = 0; i < p->held.count; i++) {
        free(p->held.pairs[i].board);
        free(p->held.pairs[i].topic);
    }
    free(p->held.pairs);
    free(p->held.index);
    lb_cluster_free(p->own);
    free(p);
}

int lb_pipeline_overlap(struct lb_pipeline *p, const struct lb_cluster_options *options)
{
    if (p->own)
        return 0;
    if (!(p->own = lb_cluster_new(options)))
        return -1;
    p->clusters[1] = p->own; /* connects, and reads the slot map, when first used */
    return 0;
}

void lb_pipeline_redis_stats(const struct lb_pipeline *p, struct lb_cluster_stats *sum)
{
    _Static_assert(sizeof(struct lb_cluster_stats) % sizeof(uint64_t) == 0,
                   "struct lb_cluster_stats holds uint64_t counters only");
    *sum = *lb_cluster_stats(p->clusters[0]);
    if (!p->own)
        return;
    uint64_t *to = (uint64_t *)(void *)sum;
    const uint64_t *from = (const uint64_t *)(const void *)lb_cluster_stats(p->own);
    for (size_t i = 0; i < sizeof(*sum) / sizeof(uint64_t); i++)
        to[i] += from[i];
}

/* ---- held pairs -------------------------------------------------------------- */

static uint32_t pair_hash(const char *board, size_t blen, const char *topic, int32_t partition)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < blen; i++)
        h = (h ^ (unsigned char)board[i]) * UINT64_C(0x100000001b3);
    for (const char *t = topic; *t; t++)
        h = (h ^ (unsigned char)*t) * UINT64_C(0x100000001b3);
    h ^= (uint32_t)partition;
    h *= UINT64_C(0x100000001b3);
    return (uint32_t)(h ^ (h >> 32));
}

static int pair_is(const struct held_pair *pair, const char *board, size_t blen, const char *topic,
                   int32_t partition)
{
    return pair->partition == partition && pair->board_len == blen &&
           memcmp(pair->board, board, blen) == 0 && strcmp(pair->topic, topic) == 0;
}

/* The index slot of the pair, or of the empty slot where it belongs. */
static size_t held_slot(const struct held_set *set, const char *board, size_t blen,
                        const char *topic, int32_t partition, uint32_t hash)
{
    size_t i = hash & set->mask;
    while (set->index[i] && !pair_is(&set->pairs[set->index[i] - 1], board, blen, topic, partition))
        i = (i + 1) & set->mask;
    return i;
}

static const struct held_pair *held_find(const struct held_set *set, const char *board, size_t blen,
                                         const char *topic, int32_t partition)
{
    if (!set->count)
        return NULL;
    uint32_t hash = pair_hash(board, blen, topic, partition);
    uint32_t at = set->index[held_slot(set, board, blen, topic, partition, hash)];
    return at ? &set->pairs[at - 1] : NULL;
}

static int held_contains(const struct held_set *set, const char *board, size_t blen,
                         const char *topic, int32_t partition)
{
    return held_find(set, board, blen, topic, partition) != NULL;
}

/* Puts every pair in the index again (of 'slots' entries: a new one when
 * the size changes, else the same one cleared, which cannot fail). */
static int held_reindex(struct held_set *set, size_t slots)
{
    if (!set->index || slots != set->mask + 1) {
        uint32_t *index = calloc(slots, sizeof(*index));
        if (!index)
            return -1;
        free(set->index);
        set->index = index;
        set->mask = slots - 1;
    } else {
        memset(set->index, 0, slots * sizeof(*set->index));
    }
    for (size_t n = 0; n < set->count; n++) {
        const struct held_pair *pair = &set->pairs[n];
        size_t i = pair->hash & set->mask;
        while (set->index[i])
            i = (i + 1) & set->mask;
        set->index[i] = (uint32_t)n + 1;
    }
    return 0;
}

static int held_add(struct held_set *set, const char *board, size_t blen, const char *topic,
                    int32_t partition, int needs_fix)
{
    if (held_contains(set, board, blen, topic, partition))
        return 0;
    if (set->count == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        struct held_pair *pairs = realloc(set->pairs, cap * sizeof(*pairs));
        if (!pairs)
            return -1;
        set->pairs = pairs;
        set->cap = cap;
    }
    struct held_pair *pair = &set->pairs[set->count];
    *pair = (struct held_pair){.board = malloc(blen ? blen : 1),
                               .board_len = (uint32_t)blen,
                               .topic = strdup(topic),
                               .partition = partition,
                               .hash = pair_hash(board, blen, topic, partition),
                               .needs_fix = needs_fix};
    if (!pair->board || !pair->topic) {
        free(pair->board);
        free(pair->topic);
        return -1;
    }
    memcpy(pair->board, board, blen);
    set->count++;
    if (!set->index || set->count * 2 > set->mask + 1) {
        if (held_reindex(set, set->index ? (set->mask + 1) * 2 : 64) != 0) {
            set->count--; /* not indexed: not held */
            free(pair->board);
            free(pair->topic);
            return -1;
        }
        return 0;
    }
    set->index[held_slot(set, board, blen, topic, partition, pair->hash)] = (uint32_t)set->count;
    return 0;
}

void lb_pipeline_release(struct lb_pipeline *p, const char *topic, int32_t partition)
{
    struct held_set *set = &p->held;
    size_t kept = 0;
    for (size_t n = 0; n < set->count; n++) {
        struct held_pair *pair = &set->pairs[n];
        if (pair->partition == partition && strcmp(pair->topic, topic) == 0) {
            free(pair->board);
            free(pair->topic);
            continue;
        }
        set->pairs[kept++] = *pair;
    }
    if (kept == set->count)
        return;
    set->count = kept;
    held_reindex(set, set->mask + 1); /* the same size: cannot fail */
}

size_t lb_pipeline_held(const struct lb_pipeline *p)
{
    return p->held.count;
}

static int reserve(void **ptr, size_t count, size_t size)
{
    void *grown = realloc(*ptr, count * size);
    if (!grown)
        return -1;
    *ptr = grown;
    return 0;
}

static int ensure_capacity(struct slot *s, size_t records, size_t txns)
{
    if (records > s->cap_records) {
        if (reserve((void **)&s->txn_of, records, sizeof(*s->txn_of)) != 0 ||
            reserve((void **)&s->fate, records, sizeof(*s->fate)) != 0 ||
            reserve((void **)&s->ts, records, sizeof(*s->ts)) != 0)
            return -1;
        s->cap_records = records;
    }
    if (txns > s->cap_txns) {
        if (reserve((void **)&s->requests, txns, sizeof(*s->requests)) != 0 ||
            reserve((void **)&s->request_txn, txns, sizeof(*s->request_txn)) != 0 ||
            reserve((void **)&s->txn_ok, txns, sizeof(*s->txn_ok)) != 0 ||
            reserve((void **)&s->txn_rebuilt, txns, sizeof(*s->txn_rebuilt)) != 0 ||
            reserve((void **)&s->txn_class, txns, sizeof(*s->txn_class)) != 0)
            return -1;
        s->cap_txns = txns;
    }
    return 0;
}

/* At most one line a second: every rejected event is counted by reason and
 * (with a dead-letter topic) kept there with its reason and detail, and a
 * partition read again after a hold meets its rejects again. */
static void log_reject(struct lb_pipeline *p, const struct lb_record *r, enum lb_reject reason,
                       const char *detail)
{
    lb_log_every(&p->reject_said, 1000, LB_LOG_WARN, "pipeline",
                 "skipping event at %s/%d@%lld: %s%s%s", r->topic, r->partition,
                 (long long)r->offset, lb_reject_name(reason), detail[0] ? ": " : "", detail);
}

static void describe_plan_reject(const struct lb_event *ev, enum lb_reject reason, char *detail,
                                 size_t len)
{
    switch (reason) {
    case LB_REJECT_SCORE_RANGE:
        snprintf(detail, len, "score %lld is outside the profile's score_min..score_max",
                 (long long)ev->score);
        break;
    case LB_REJECT_TIME_RANGE:
        snprintf(detail, len, "ts %lld is outside the profile's epoch..horizon",
                 (long long)ev->ts_ms);
        break;
    case LB_REJECT_INVALID_DIMS:
        snprintf(detail, len,
                 "a dims value naming a custom window must be 1..%d bytes of UTF-8 "
                 "without control bytes (and a decaying board's patch one of its "
                 "decay.patches, when it lists them)",
                 LB_ID_MAX_BYTES);
        break;
    case LB_REJECT_INVALID_BOARD:
        snprintf(detail, len, "no profile matches board '%.*s'", (int)ev->board.len, ev->board.ptr);
        break;
    case LB_REJECT_SUM_RANGE:
        snprintf(detail, len, "player '%.*s' would leave the board's sum_min..sum_max",
                 (int)ev->player.len, ev->player.ptr);
        break;
    case LB_REJECT_RETRACTION:
        snprintf(detail, len,
                 "board '%.*s' takes no retractions (its profile says retractions: reject)",
                 (int)ev->board.len, ev->board.ptr);
        break;
    default:
        break;
    }
}

/* Events from the future: compared with the record's timestamp (what the
 * producer or the broker stamped), so that the live run and a later replay
 * decide alike; a record without one is compared with the clock. */
static enum lb_reject check_future(struct lb_pipeline *p, const struct lb_record *r,
                                   const struct lb_event *ev, int64_t now_ms, char *detail,
                                   size_t detaillen)
{
    int64_t base = r->timestamp_ms > 0 ? r->timestamp_ms : now_ms;
    if (r->timestamp_ms <= 0)
        p->stats.no_timestamp++;
    if (ev->ts_ms <= base || ev->ts_ms - base <= p->max_future_ms)
        return LB_ACCEPT;
    snprintf(detail, detaillen,
             "ts %lld is %lld ms ahead of its %s %lld (input.max_future: %lld ms)",
             (long long)ev->ts_ms, (long long)(ev->ts_ms - base),
             r->timestamp_ms > 0 ? "record's timestamp" : "clock (the record has no timestamp)",
             (long long)base, (long long)p->max_future_ms);
    return LB_REJECT_TS_IN_FUTURE;
}

/* A producer's retry: done (its offset may advance) without a write. */
static int is_retry(uint8_t fate)
{
    return fate == FATE_DUPLICATE || fate == FATE_CONFLICT;
}

static void count_duplicate(struct lb_pipeline *p, enum record_fate fate)
{
    if (fate == FATE_DUPLICATE)
        p->stats.duplicates++;
    if (fate == FATE_CONFLICT)
        p->stats.conflicts++;
}

/* Decodes, validates and plans every record. Returns -1 when out of memory. */
static int plan_records(struct lb_pipeline *p, struct slot *slot, const struct lb_record *records,
                        size_t count, int64_t now_ms)
{
    lb_plan_reset(slot->plan);
    lb_arena_reset(&slot->arena);
    for (size_t i = 0; i < count; i++) {
        const struct lb_record *r = &records[i];
        struct lb_event ev;
        char detail[200] = "";
        uint32_t txn = UINT32_MAX;
        enum lb_reject reason;

        if (!r->payload) {
            reason = LB_REJECT_MALFORMED;
            snprintf(detail, sizeof(detail), "empty message (tombstone)");
        } else {
            reason = lb_decode(p->decoder, r->payload, r->len, &ev, &slot->arena, detail,
                               sizeof(detail));
        }
        if (reason == LB_ACCEPT)
            reason = lb_event_validate(&ev, detail, sizeof(detail));
        if (reason == LB_ACCEPT && p->max_future_ms)
            reason = check_future(p, r, &ev, now_ms, detail, sizeof(detail));
        if (reason == LB_ACCEPT && p->filter && !p->filter(p->filter_ctx, &ev)) {
            slot->txn_of[i] = UINT32_MAX; /* not ours to write: done, like a reject */
            slot->fate[i] = FATE_PLANNED;
            p->stats.records++;
            p->stats.filtered++;
            continue;
        }
        slot->ts[i] = reason == LB_ACCEPT ? ev.ts_ms : 0;
        enum record_fate fate = FATE_PLANNED;
        if (reason == LB_ACCEPT) {
            struct lb_position pos = {r->topic, r->partition, r->offset};
            int added = lb_plan_add(slot->plan, &ev, &pos, now_ms, &txn, &reason);
            if (added < 0)
                return -1;
            fate = added == LB_PLAN_DUPLICATE  ? FATE_DUPLICATE
                   : added == LB_PLAN_CONFLICT ? FATE_CONFLICT
                                               : FATE_PLANNED;
            count_duplicate(p, fate);
            if (reason != LB_ACCEPT)
                describe_plan_reject(&ev, reason, detail, sizeof(detail));
        }
        slot->txn_of[i] = txn;
        slot->fate[i] = (uint8_t)fate;
        p->stats.records++;
        if (reason != LB_ACCEPT) {
            p->stats.rejected[reason]++;
            log_reject(p, r, reason, detail);
            if (p->on_reject)
                p->on_reject(p->reject_ctx, r, reason, detail);
        }
    }
    return lb_apply_encode(&slot->encoded, slot->plan, &p->apply);
}

static int64_t next_backoff(struct lb_pipeline *p, int64_t backoff)
{
    /* Exponential with +-25% jitter (xorshift), so pods do not retry in step. */
    p->jitter ^= p->jitter << 13;
    p->jitter ^= p->jitter >> 7;
    p->jitter ^= p->jitter << 17;
    int64_t next = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    return next - next / 4 + (int64_t)(p->jitter % (uint64_t)(next / 2 + 1));
}

int lb_pipeline_prepare(struct lb_pipeline *p, const struct lb_record *records, size_t count,
                        int64_t now_ms)
{
    size_t ntxns;
    if (p->prepared >= 0)
        return -1; /* the caller must send what it prepared first */
    int index = p->inflight == 0 ? 1 : 0;
    struct slot *slot = &p->slots[index];

    if (ensure_capacity(slot, count, 1) != 0 || plan_records(p, slot, records, count, now_ms) != 0)
        return -1;
    const struct lb_apply_request *txns = slot->encoded.requests;
    const char *bytes = slot->encoded.bytes.data;
    ntxns = slot->encoded.count;
    if (ensure_capacity(slot, count, ntxns) != 0)
        return -1;
    slot->records = records;
    slot->count = count;
    slot->pending = 0;
    slot->nexclusions = 0;
    for (size_t t = 0; t < ntxns; t++) {
        slot->txn_ok[t] = 0;
        slot->txn_rebuilt[t] = 0;
        slot->request_txn[slot->pending] = (uint32_t)t;
        slot->requests[slot->pending++] = (struct lb_request){.slot = txns[t].slot,
                                                              .is_txn = txns[t].is_txn,
                                                              .writes = 1,
                                                              .ncommands = txns[t].ncommands,
                                                              .bytes = bytes + txns[t].offset,
                                                              .len = txns[t].len};
    }
    slot->now_ms = now_ms;
    p->stats.batches++;
    p->stats.member_updates += lb_plan_stats(slot->plan)->member_updates;
    p->stats.late_windows += lb_plan_stats(slot->plan)->late;
    p->stats.closed_left_out += lb_plan_stats(slot->plan)->closed;
    p->prepared = index;
    return 0;
}

static int add_exclusion(struct slot *slot, uint32_t txn, enum exclusion_kind kind,
                         const char *what, int64_t marker)
{
    if (slot->nexclusions == slot->cap_exclusions) {
        size_t cap = slot->cap_exclusions ? slot->cap_exclusions * 2 : 16;
        if (reserve((void **)&slot->exclusions, cap, sizeof(*slot->exclusions)) != 0)
            return -1;
        slot->cap_exclusions = cap;
    }
    struct exclusion *x = &slot->exclusions[slot->nexclusions++];
    x->txn = txn;
    x->kind = (uint8_t)kind;
    snprintf(x->what, sizeof(x->what), "%s", what);
    x->marker = marker;
    return 0;
}

/* The windows of a late answer, each parsed once when asked for (the first
 * LATE_CACHED; any more, each time). */
enum { LATE_CACHED = 64 };
struct late_windows {
    const struct lb_apply_answer *a;
    enum lb_window_kind kind[LATE_CACHED];
    int64_t id[LATE_CACHED];
    int8_t parsed[LATE_CACHED]; /* 0 not yet, 1 parsed, -1 not a window name */
};

/* Late window 'w' as a kind and id: 0, or -1 when its name is not a window's. */
static int late_window(struct late_windows *lw, size_t w, enum lb_window_kind *kind, int64_t *id)
{
    if (w >= LATE_CACHED)
        return lb_window_name_parse(lb_apply_late_name(lw->a, w), kind, id);
    if (!lw->parsed[w]) {
        const char *name = lb_apply_late_name(lw->a, w);
        lw->parsed[w] = lb_window_name_parse(name, &lw->kind[w], &lw->id[w]) == 0 ? 1 : -1;
    }
    *kind = lw->kind[w];
    *id = lw->id[w];
    return lw->parsed[w] == 1 ? 0 : -1;
}

/* The script named the closed windows board request 'txn' has events for
 * (README "Final standings"), with their close offsets: an event for one of
 * them at or past its partition's close offset came too late. Those events
 * (each once) are counted, logged and dead-lettered; their other windows
 * were written. The offsets decide, not whether a segment was applied now:
 * a request sent again after its reply was lost, or records read again,
 * name their late events as the first time. A window whose close offsets
 * are not known (a ~final put back from a results record without them)
 * takes the events of a request that applied every segment, as before. */
static void count_late(struct lb_pipeline *p, const struct slot *slot, uint32_t txn,
                       const struct lb_apply_answer *a)
{
    static struct lb_ratelimit said;
    struct late_windows lw = {.a = a};
    uint64_t n = 0;
    const char *named = NULL; /* the first late event's window */
    int others = 0;           /* events late for another */
    for (size_t i = 0; i < slot->count; i++) {
        if (slot->txn_of[i] != txn || !slot->ts[i] || slot->fate[i] != FATE_PLANNED)
            continue;
        const struct lb_record *r = &slot->records[i];
        const char *late = NULL;
        for (size_t w = 0; w < a->late && !late; w++) {
            enum lb_window_kind kind;
            int64_t id, first_late;
            struct lb_window_span span;
            if (late_window(&lw, w, &kind, &id) != 0)
                continue;
            lb_window_span(kind, slot->ts[i], &span);
            if (span.id != id)
                continue;
            const char *name = lb_apply_late(a, w, r->topic, r->partition, &first_late);
            if (first_late < 0 ? !a->skipped : r->offset >= first_late)
                late = name;
        }
        if (!late)
            continue;
        n++;
        others |= named && strcmp(named, late) != 0;
        named = named ? named : late;
        if (p->on_reject) { /* dead-lettered: a record of what the closed window did not take */
            char detail[200];
            snprintf(detail, sizeof(detail),
                     "came after window '%s' closed: not written there, its final standings "
                     "stand; its other windows were written",
                     late);
            p->on_reject(p->reject_ctx, r, LB_REJECT_WINDOW_CLOSED, detail);
        }
    }
    if (!n)
        return;
    p->stats.late_after_close += n;
    lb_log_every(&said, 10000, LB_LOG_WARN, "pipeline",
                 "%llu event(s) came after window '%s'%s closed: not written to it, its final "
                 "standings stand; their other windows were written",
                 (unsigned long long)n, named, others ? " (and others)" : "");
}

/* Reads the apply script's answer: 0 when the board's events are written, 1
 * when the script asked for them again without some events (recorded in
 * slot->exclusions), -1 when the request failed (req->error says why). */
static int read_answer(struct lb_pipeline *p, struct slot *slot, uint32_t txn,
                       struct lb_request *req)
{
    struct lb_apply_answer a;
    switch (lb_apply_parse(req->reply, &a)) {
    case LB_APPLY_OK:
        p->stats.skipped_segments += (uint64_t)a.skipped;
        if (a.late)
            count_late(p, slot, txn, &a);
        if (p->on_applied) {
            /* the first plan: a board planned again holds fewer windows */
            struct lb_plan_view view;
            lb_plan_view(slot->plan, &view);
            p->on_applied(p->applied_ctx, &view, txn, &a, slot->txn_rebuilt[txn]);
        }
        return 0;
    case LB_APPLY_PARTIAL:
    case LB_APPLY_OVERFLOW:
    case LB_APPLY_DUPLICATE:
        break;
    case LB_APPLY_WRONGTYPE:
        snprintf(req->error, sizeof(req->error),
                 "WRONGTYPE: key %.90s under the board's hash tag holds another type", a.key);
        req->error_class = LB_REDIS_FIX;
        return -1;
    case LB_APPLY_BADARG:
        snprintf(req->error, sizeof(req->error),
                 "the apply script refused the expiry time of key %.90s (nothing written)", a.key);
        req->error_class = LB_REDIS_FIX;
        return -1;
    case LB_APPLY_NOPERM:
        snprintf(req->error, sizeof(req->error),
                 "NOPERM this user may not run '%.40s' (the apply script calls it; nothing "
                 "written): see ops/deploy/redis-acl.conf",
                 a.key);
        req->error_class = LB_REDIS_FIX;
        return -1;
    case LB_APPLY_FENCED:
        snprintf(req->error, sizeof(req->error),
                 "fenced: replay is swapping the board in; the board is held until it is done");
        req->error_class = LB_REDIS_RETRY;
        return -1;
    case LB_APPLY_MOVING:
        snprintf(req->error, sizeof(req->error),
                 "key %.50s is not on this node now (a slot migration): nothing "
                 "written, the board is held and retried",
                 a.key);
        req->error_class = LB_REDIS_RETRY;
        return -1;
    case LB_APPLY_PROTOCOL:
        snprintf(req->error, sizeof(req->error),
                 "the apply script on the node speaks protocol %.20s, this projector %d: "
                 "the node runs a script of another release under our SHA1",
                 a.key, LB_APPLY_VERSION);
        req->error_class = LB_REDIS_FIX;
        return -1;
    case LB_APPLY_UNKNOWN:
        snprintf(req->error, sizeof(req->error), "unexpected answer from the apply script");
        req->error_class = LB_REDIS_RETRY;
        return -1;
    }
    int members = a.status == LB_APPLY_OVERFLOW, conflict, rc = 0;
    const char *first, *second;
    int64_t offset;
    if (a.status == LB_APPLY_DUPLICATE)
        for (size_t i = 0; rc == 0 && lb_apply_duplicate(&a, i, &first, &offset, &conflict) == 0;
             i++)
            rc = add_exclusion(slot, txn, conflict ? EXCLUDE_CONFLICT : EXCLUDE_DUPLICATE, first,
                               offset);
    else
        for (size_t i = 0; rc == 0 && lb_apply_pair(&a, i, &first, &second) == 0; i++)
            rc = add_exclusion(slot, txn, members ? EXCLUDE_MEMBER : EXCLUDE_APPLIED,
                               members ? second : first, members ? 0 : strtoll(second, NULL, 10));
    if (rc != 0) {
        snprintf(req->error, sizeof(req->error), "out of memory");
        req->error_class = LB_REDIS_NOMEM;
        return -1;
    }
    p->stats.replans++;
    return 1;
}

/* Whether record 'i' of transaction 'txn' must now stay out of it. */
static enum record_fate fate_of(const struct slot *slot, uint32_t txn, const struct lb_record *r,
                                const struct lb_event *ev)
{
    char field[LB_MARKER_FIELD_MAX];
    lb_marker_field(r->topic, r->partition, field, sizeof(field));
    for (size_t x = 0; x < slot->nexclusions; x++) {
        const struct exclusion *e = &slot->exclusions[x];
        if (e->txn != txn)
            continue;
        if (e->kind == EXCLUDE_APPLIED && r->offset <= e->marker && strcmp(e->what, field) == 0)
            return FATE_APPLIED_BEFORE;
        if (e->kind == EXCLUDE_PARTITION && strcmp(e->what, field) == 0)
            return FATE_WITHHELD;
        if ((e->kind == EXCLUDE_DUPLICATE || e->kind == EXCLUDE_CONFLICT) &&
            r->offset == e->marker && strcmp(e->what, field) == 0)
            return e->kind == EXCLUDE_CONFLICT ? FATE_CONFLICT : FATE_DUPLICATE;
        if (e->kind == EXCLUDE_MEMBER && strlen(e->what) == ev->player.len &&
            memcmp(e->what, ev->player.ptr, ev->player.len) == 0)
            return FATE_REJECTED;
    }
    return FATE_PLANNED;
}

/* Plans again, in slot->rebuilt, every board with exclusions or that was
 * planned again before (its bytes live there), leaving out the excluded
 * events. Exclusions that leave nothing out would send the same requests
 * again, to get the same answers, forever: that fails the run. */
static int rebuild(struct lb_pipeline *p, struct slot *slot)
{
    int64_t now_ms = slot->now_ms;
    lb_plan_reset(slot->rebuilt);
    /* progress: a board planned again for the first time (its request is
     * made of its planned events alone: one left out within the batch, a
     * retry, no longer stretches its segment), or an event left out */
    size_t progress = 0;
    for (size_t x = 0; x < slot->nexclusions; x++) {
        progress += !slot->txn_rebuilt[slot->exclusions[x].txn];
        slot->txn_rebuilt[slot->exclusions[x].txn] = 1;
    }
    uint32_t *map = calloc(slot->count ? slot->count : 1, sizeof(*map));
    if (!map)
        return -1;
    for (size_t i = 0; i < slot->count; i++) {
        uint32_t txn = slot->txn_of[i], again = UINT32_MAX;
        const struct lb_record *r = &slot->records[i];
        struct lb_event ev;
        map[i] = UINT32_MAX;
        if (txn == UINT32_MAX || !slot->txn_rebuilt[txn] || slot->fate[i] != FATE_PLANNED)
            continue;
        /* it was accepted once: decoding cannot fail now */
        lb_decode(p->decoder, r->payload, r->len, &ev, &slot->arena, NULL, 0);
        slot->fate[i] = fate_of(slot, txn, r, &ev);
        if (slot->fate[i] == FATE_REJECTED) {
            char detail[200];
            describe_plan_reject(&ev, LB_REJECT_SUM_RANGE, detail, sizeof(detail));
            p->stats.rejected[LB_REJECT_SUM_RANGE]++;
            log_reject(p, r, LB_REJECT_SUM_RANGE, detail);
            if (p->on_reject)
                p->on_reject(p->reject_ctx, r, LB_REJECT_SUM_RANGE, detail);
        }
        if (slot->fate[i] == FATE_WITHHELD)
            p->stats.withheld++;
        count_duplicate(p, slot->fate[i]);
        if (slot->fate[i] != FATE_PLANNED) {
            progress++;
            continue;
        }
        struct lb_position pos = {r->topic, r->partition, r->offset};
        enum lb_reject reason;
        if (lb_plan_add(slot->rebuilt, &ev, &pos, now_ms, &again, &reason) < 0 ||
            reason != LB_ACCEPT) {
            free(map);
            return -1; /* it was accepted by the same planner before */
        }
        map[i] = again;
    }
    if (!progress) {
        const struct exclusion *x = &slot->exclusions[slot->nexclusions - 1];
        LB_ERROR("pipeline",
                 "internal error: the apply script named events to leave out ('%s', %lld) "
                 "that match none of the batch's records; stopping rather than sending the "
                 "same requests forever",
                 x->what, (long long)x->marker);
        free(map);
        return -1;
    }
    if (lb_apply_encode(&slot->encoded_rebuilt, slot->rebuilt, &p->apply) != 0) {
        free(map);
        return -1;
    }
    const struct lb_apply_request *txns = slot->encoded_rebuilt.requests;
    const char *bytes = slot->encoded_rebuilt.bytes.data;
    /* point every pending rebuilt board at its new bytes; a board left with
     * nothing to apply gets an empty request, which succeeds at once */
    for (size_t k = 0; k < slot->pending; k++) {
        uint32_t txn = slot->request_txn[k];
        if (!slot->txn_rebuilt[txn])
            continue;
        slot->requests[k].bytes = bytes;
        slot->requests[k].len = 0;
        slot->requests[k].is_txn = 0;
        slot->requests[k].ncommands = 1;
        for (size_t i = 0; i < slot->count; i++)
            if (slot->txn_of[i] == txn && map[i] != UINT32_MAX) {
                slot->requests[k].bytes = bytes + txns[map[i]].offset;
                slot->requests[k].len = txns[map[i]].len;
                slot->requests[k].is_txn = txns[map[i]].is_txn;
                slot->requests[k].ncommands = txns[map[i]].ncommands;
                break;
            }
    }
    free(map);
    return 0;
}

/* Plans again without the events of held (board, partition) pairs. Returns
 * -1 when out of memory. */
static int withhold(struct lb_pipeline *p, struct slot *slot)
{
    size_t before = slot->nexclusions;
    if (!p->held.count)
        return 0;
    const struct lb_apply_request *txns = slot->encoded.requests;
    for (size_t i = 0; i < slot->count; i++) {
        uint32_t txn = slot->txn_of[i];
        const struct lb_record *r = &slot->records[i];
        if (txn == UINT32_MAX || slot->fate[i] != FATE_PLANNED ||
            !held_contains(&p->held, txns[txn].board.ptr, txns[txn].board.len, r->topic,
                           r->partition))
            continue;
        char field[LB_MARKER_FIELD_MAX];
        lb_marker_field(r->topic, r->partition, field, sizeof(field));
        int known = 0;
        for (size_t x = before; x < slot->nexclusions && !known; x++)
            known = slot->exclusions[x].txn == txn && strcmp(slot->exclusions[x].what, field) == 0;
        if (!known && add_exclusion(slot, txn, EXCLUDE_PARTITION, field, 0) != 0)
            return -1;
    }
    return slot->nexclusions > before ? rebuild(p, slot) : 0;
}

static int answers_ok(const struct slot *slot);

int lb_pipeline_progress(struct lb_pipeline *p)
{
    if (p->inflight < 0 || p->answered_ms)
        return 1;
    struct lb_cluster *cluster = p->clusters[p->inflight];
    if (!lb_cluster_progress(cluster, 0))
        return 0;
    if (lb_cluster_call_clean(cluster) && answers_ok(&p->slots[p->inflight]))
        p->answered_ms = lb_monotonic_ms();
    return 1;
}

int64_t lb_pipeline_answered_ms(const struct lb_pipeline *p)
{
    return p->answered_ms;
}

void lb_pipeline_send(struct lb_pipeline *p)
{
    if (p->prepared < 0 || p->inflight >= 0)
        return;
    if (p->own && !p->own_mapped) {
        /* Sending early needs the second client's slot map: read it now,
         * once, before anything is in flight (never while opening). */
        p->own_mapped = 1;
        if (lb_cluster_refresh(p->own) != 0)
            LB_DEBUG("pipeline", "second Redis client: %s (its first batch loads the slot map)",
                     lb_cluster_error(p->own));
    }
    struct slot *slot = &p->slots[p->prepared];
    struct lb_cluster *cluster = p->clusters[p->prepared];
    p->inflight = p->prepared;
    p->prepared = -1;
    p->answered_ms = 0;
    slot->nexclusions = 0;
    for (size_t k = 0; k < slot->pending; k++)
        slot->requests[k].defer = 0;
    /* What went out early was for boards that are not held (see overlap):
     * excluding the newly held ones rebuilds only requests not sent yet. */
    if (withhold(p, slot) != 0) {
        slot->oom = 1; /* nothing more is sent; complete reports it */
        return;
    }
    if (slot->early)
        lb_cluster_dispatch(cluster);
    else
        lb_cluster_start(cluster, slot->requests, slot->pending);
}

/* Whether every request of 'slot' that was answered so far succeeded: the
 * script (or transaction) said OK, nothing to plan again, nothing fenced. */
static int answers_ok(const struct slot *slot)
{
    struct lb_apply_answer a;
    for (size_t k = 0; k < slot->pending; k++) {
        const struct lb_request *req = &slot->requests[k];
        if (req->len && req->reply && lb_apply_parse(req->reply, &a) != LB_APPLY_OK)
            return 0;
    }
    return 1;
}

/* Sends the requests of 'next' whose master has answered all of the batch
 * in flight, cleanly, on the second client; returns how many. Its map must
 * agree with the first client's on the master. */
static size_t send_settled(struct lb_pipeline *p, struct slot *next, struct lb_cluster *a,
                           struct lb_cluster *b)
{
    size_t released = 0;
    for (size_t k = 0; k < next->pending; k++) {
        struct lb_request *req = &next->requests[k];
        if (!req->defer)
            continue;
        const char *settled = lb_cluster_settled_owner(a, req->slot);
        const char *route = lb_cluster_route(b, req->slot);
        if (settled && route && strcmp(settled, route) == 0) {
            req->defer = 0;
            released++;
        }
    }
    if (!released)
        return 0;
    if (next->early) {
        lb_cluster_dispatch(b);
    } else {
        lb_cluster_start(b, next->requests, next->pending);
        next->early = 1;
    }
    p->stats.overlapped += released;
    return released;
}

/* Pipelining: while the batch in flight is answered, the prepared batch's
 * requests go out, on the second client, to each master as soon as it has
 * answered everything of the batch in flight. A board's requests thus reach
 * its master in batch order. Nothing goes out early once anything of the
 * batch in flight failed, was redirected or must be planned again, nor
 * while pairs are held: a board whose request fails is then held before
 * any later request of it is sent (lb_pipeline_send withholds it). */
static void overlap(struct lb_pipeline *p)
{
    if (!p->own || p->prepared < 0 || p->held.count)
        return;
    struct slot *cur = &p->slots[p->inflight], *next = &p->slots[p->prepared];
    struct lb_cluster *a = p->clusters[p->inflight], *b = p->clusters[p->prepared];
    size_t waiting = 0, busy = SIZE_MAX;
    for (size_t k = 0; k < next->pending; k++) {
        next->requests[k].defer = next->requests[k].len > 0;
        waiting += next->requests[k].defer;
    }
    while (waiting) {
        /* short waits once something went out: its socket may want writing */
        int all_in = lb_cluster_progress(a, next->early ? 2 : 50);
        size_t now_busy = lb_cluster_busy_nodes(a);
        if (now_busy < busy) {
            busy = now_busy;
            if (!lb_cluster_call_clean(a) || !answers_ok(cur))
                break;
            waiting -= send_settled(p, next, a, b);
        }
        if (next->early)
            lb_cluster_progress(b, 0);
        if (all_in)
            break;
    }
}

/* Keeps the failed requests of 'slot' for a retry and notes why in
 * p->failure. Returns the number of requests the apply script asked to plan
 * again. */
static size_t keep_failed(struct lb_pipeline *p, struct slot *slot)
{
    size_t still = 0, again = 0;
    const struct lb_apply_request *txns = slot->encoded.requests;
    slot->nexclusions = 0;
    p->failure.requests = 0;
    p->failure.attempt++;
    for (size_t k = 0; k < slot->pending; k++) {
        struct lb_request *req = &slot->requests[k];
        uint32_t txn = slot->request_txn[k];
        int answer = req->ok ? (req->len ? read_answer(p, slot, txn, req) : 0) : -1;
        if (req->reply) {
            freeReplyObject(req->reply);
            req->reply = NULL;
        }
        if (answer == 0) {
            slot->txn_ok[txn] = 1;
            continue;
        }
        if (answer > 0) {
            again++;
        } else {
            const struct lb_apply_request *t = &txns[txn];
            slot->txn_class[txn] = req->error_class;
            /* an operator's problem outranks a transient one in the message */
            if (!p->failure.requests++ || req->error_class == LB_REDIS_FIX)
                snprintf(p->failure.reason, sizeof(p->failure.reason), "board '%.*s': %s",
                         (int)t->board.len, t->board.ptr, req->error);
            if (req->error_class == LB_REDIS_FIX)
                p->failure.needs_fix = 1;
            else
                p->failure.transient = 1;
            p->stats.write_failures++;
        }
        slot->request_txn[still] = txn;
        slot->requests[still++] = *req;
    }
    slot->pending = still;
    return again;
}

/* Holds what still failed when 'wait' gave up: every (board, partition) of
 * the failed requests, so that later events of those pairs are withheld. */
static int hold_failed(struct lb_pipeline *p, struct slot *slot)
{
    const struct lb_apply_request *txns = slot->encoded.requests;
    for (size_t i = 0; i < slot->count; i++) {
        uint32_t txn = slot->txn_of[i];
        if (txn == UINT32_MAX || slot->fate[i] != FATE_PLANNED || slot->txn_ok[txn])
            continue;
        if (held_add(&p->held, txns[txn].board.ptr, txns[txn].board.len, slot->records[i].topic,
                     slot->records[i].partition, slot->txn_class[txn] == LB_REDIS_FIX) != 0)
            return -1;
    }
    p->stats.held_requests += slot->pending;
    lb_log_every(&p->held_said, 5000, p->failure.needs_fix ? LB_LOG_ERROR : LB_LOG_WARN, "pipeline",
                 "holding %zu board request(s) after %u attempt(s)%s: their partitions commit no "
                 "further and are read again later; %s",
                 slot->pending, p->failure.attempt,
                 p->failure.needs_fix ? ", an operator must fix this" : "", p->failure.reason);
    return 0;
}

/* The state of record 'i' once its batch is complete. */
static enum lb_record_state record_state(const struct lb_pipeline *p, const struct slot *slot,
                                         size_t i, int gave_up)
{
    uint32_t txn = slot->txn_of[i];
    if (txn == UINT32_MAX || slot->fate[i] == FATE_REJECTED ||
        slot->fate[i] == FATE_APPLIED_BEFORE || is_retry(slot->fate[i]))
        return LB_RECORD_DURABLE;
    if (slot->fate[i] == FATE_WITHHELD) {
        const struct lb_apply_request *t = &slot->encoded.requests[txn];
        const struct held_pair *pair =
            held_find(&p->held, t->board.ptr, t->board.len, slot->records[i].topic,
                      slot->records[i].partition);
        return pair && pair->needs_fix ? LB_RECORD_WITHHELD_FIX : LB_RECORD_WITHHELD;
    }
    if (slot->txn_ok[txn])
        return LB_RECORD_DURABLE;
    if (gave_up < 0)
        return LB_RECORD_NOT_DONE;
    return slot->txn_class[txn] == LB_REDIS_FIX ? LB_RECORD_HELD_FIX : LB_RECORD_HELD_RETRY;
}

/* Sends the pending requests of the batch in flight again and waits for
 * their replies: until those are read, the batch has not been answered. */
static void resend(struct lb_pipeline *p, struct lb_cluster *cluster, struct slot *slot)
{
    p->answered_ms = 0;
    lb_cluster_exec(cluster, slot->requests, slot->pending);
}

int lb_pipeline_complete(struct lb_pipeline *p, uint8_t *state, lb_pipeline_wait_fn wait, void *ctx)
{
    int64_t backoff = BACKOFF_MIN_MS;
    int gave_up = 0;
    if (p->inflight < 0)
        return 0;
    struct slot *slot = &p->slots[p->inflight];

    struct lb_cluster *cluster = p->clusters[p->inflight];
    p->failure = (struct lb_pipeline_failure){0};
    for (size_t k = 0; k < slot->pending && !slot->oom; k++)
        p->failure.sent += slot->requests[k].len > 0; /* an empty one never leaves */
    if (slot->oom) {
        slot->oom = 0;
        gave_up = -1;
        if (slot->early)
            lb_cluster_finish(cluster); /* what went out early is read, not left on the wire */
    } else {
        overlap(p);
        lb_cluster_finish(cluster);
    }
    slot->early = 0;
    while (gave_up == 0) {
        size_t again = keep_failed(p, slot);
        if (!slot->pending)
            break;
        if (again) {
            /* Not a failure: the script told us what to leave out. Send
             * what remains right away (with whatever failed beside it,
             * which is only ever held after a round of failures alone). */
            if (rebuild(p, slot) != 0) {
                gave_up = -1;
                break;
            }
            resend(p, cluster, slot);
            continue;
        }
        lb_log_every(
            &p->retry_said, 5000, p->failure.needs_fix ? LB_LOG_ERROR : LB_LOG_WARN, "pipeline",
            "writing %zu board request(s) failed (attempt %u), retrying in ~%lld ms: %s",
            p->failure.requests, p->failure.attempt, (long long)backoff, p->failure.reason);
        if (!wait || wait(ctx, backoff) != 0) {
            gave_up = hold_failed(p, slot) == 0 ? 1 : -1;
            break;
        }
        backoff = next_backoff(p, backoff);
        resend(p, cluster, slot);
    }
    int64_t now_ms = lb_wall_ms();
    if (p->answered_ms) /* its replies were read while the next batch was collected */
        now_ms -= lb_monotonic_ms() - p->answered_ms;
    int all = 1;
    for (size_t i = 0; i < slot->count; i++) {
        state[i] = (uint8_t)record_state(p, slot, i, gave_up);
        all &= state[i] == LB_RECORD_DURABLE;
        if (slot->txn_of[i] != UINT32_MAX && state[i] == LB_RECORD_DURABLE &&
            slot->fate[i] != FATE_REJECTED && !is_retry(slot->fate[i])) {
            p->stats.applied++;
            if (slot->fate[i] == FATE_PLANNED && now_ms >= slot->ts[i])
                lb_histogram_observe(&p->stats.visible, (double)(now_ms - slot->ts[i]) / 1000.0);
        }
    }
    for (size_t k = 0; k < slot->pending; k++)
        if (slot->requests[k].reply) {
            freeReplyObject(slot->requests[k].reply);
            slot->requests[k].reply = NULL;
        }
    p->completed = p->inflight;
    p->inflight = -1;
    return gave_up < 0 ? -1 : all ? 0 : 1;
}

int64_t lb_pipeline_event_time(const struct lb_pipeline *p, size_t i)
{
    const struct slot *slot = p->completed >= 0 ? &p->slots[p->completed] : NULL;
    return slot && i < slot->count ? slot->ts[i] : 0;
}

int lb_pipeline_run(struct lb_pipeline *p, const struct lb_record *records, size_t count,
                    int64_t now_ms, uint8_t *state, lb_pipeline_wait_fn wait, void *ctx)
{
    if (lb_pipeline_prepare(p, records, count, now_ms) != 0)
        return -1;
    lb_pipeline_send(p);
    return lb_pipeline_complete(p, state, wait, ctx);
}

const struct lb_pipeline_stats *lb_pipeline_stats(const struct lb_pipeline *p)
{
    return &p->stats;
}

const struct lb_pipeline_failure *lb_pipeline_last_failure(const struct lb_pipeline *p)
{
    return &p->failure;
}
