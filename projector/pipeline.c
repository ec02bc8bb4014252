/* Batch projection; see pipeline.h.
 *
 * Every record is decoded and validated before anything is written, so a
 * bad record never leaves a half-planned batch behind. Records map to
 * transactions many-to-one (one transaction per board); after writing, a
 * record's durability is simply its transaction's outcome. Failed
 * transactions are resent as they were encoded: ZADD GT/LT and PEXPIREAT to a
 * window-derived time are idempotent, so a transaction that was applied but
 * whose reply was lost does no harm when it is applied again.
 */
#include "pipeline.h"
#include "log.h"
#include "planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000

struct lb_pipeline {
    const struct lb_config *config;
    const struct lb_decoder *decoder;
    struct lb_cluster *cluster;
    struct lb_plan *plan;
    struct lb_arena arena; /* decoded dims */
    uint32_t *txn_of;      /* per record: its transaction, or UINT32_MAX when rejected */
    size_t cap_records;
    struct lb_request *requests;
    uint32_t *request_txn; /* per request: the transaction it carries */
    uint8_t *txn_ok;
    size_t cap_txns;
    struct lb_pipeline_stats stats;
    uint64_t jitter;
};

struct lb_pipeline *lb_pipeline_new(const struct lb_config *config,
                                    const struct lb_decoder *decoder, struct lb_cluster *cluster)
{
    struct lb_pipeline *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->config = config;
    p->decoder = decoder;
    p->cluster = cluster;
    p->jitter = 0x9e3779b97f4a7c15u;
    lb_arena_init(&p->arena, 1 << 16);
    p->plan = lb_plan_new(config);
    if (!p->plan) {
        free(p);
        return NULL;
    }
    return p;
}

void lb_pipeline_free(struct lb_pipeline *p)
{
    if (!p)
        return;
    lb_plan_free(p->plan);
    lb_arena_free(&p->arena);
    free(p->txn_of);
    free(p->requests);
    free(p->request_txn);
    free(p->txn_ok);
    free(p);
}

static int reserve(void **ptr, size_t count, size_t size)
{
    void *grown = realloc(*ptr, count * size);
    if (!grown)
        return -1;
    *ptr = grown;
    return 0;
}

static int ensure_capacity(struct lb_pipeline *p, size_t records, size_t txns)
{
    if (records > p->cap_records) {
        if (reserve((void **)&p->txn_of, records, sizeof(*p->txn_of)) != 0)
            return -1;
        p->cap_records = records;
    }
    if (txns > p->cap_txns) {
        if (reserve((void **)&p->requests, txns, sizeof(*p->requests)) != 0 ||
            reserve((void **)&p->request_txn, txns, sizeof(*p->request_txn)) != 0 ||
            reserve((void **)&p->txn_ok, txns, sizeof(*p->txn_ok)) != 0)
            return -1;
        p->cap_txns = txns;
    }
    return 0;
}

static void log_reject(const struct lb_record *r, enum lb_reject reason, const char *detail)
{
    LB_WARN("pipeline", "skipping event at %s/%d@%lld: %s%s%s", r->topic, r->partition,
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
                 "a dims value naming a custom window must be 1..%d bytes "
                 "without control bytes",
                 LB_ID_MAX_BYTES);
        break;
    case LB_REJECT_INVALID_BOARD:
        snprintf(detail, len, "no profile matches board '%.*s'", (int)ev->board.len, ev->board.ptr);
        break;
    default:
        break;
    }
}

/* Decodes, validates and plans every record. Returns -1 when out of memory. */
static int plan_records(struct lb_pipeline *p, const struct lb_record *records, size_t count,
                        int64_t now_ms)
{
    lb_plan_reset(p->plan);
    lb_arena_reset(&p->arena);
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
            reason =
                lb_decode(p->decoder, r->payload, r->len, &ev, &p->arena, detail, sizeof(detail));
        }
        if (reason == LB_ACCEPT)
            reason = lb_event_validate(&ev, detail, sizeof(detail));
        if (reason == LB_ACCEPT && ev.op == LB_OP_RETRACT) {
            /* Retractions arrive with the aggregation modes; until then they
             * are reported, never silently applied as submissions. */
            reason = LB_REJECT_UNKNOWN_OP;
            snprintf(detail, sizeof(detail), "RETRACT is not supported by this version");
        }
        if (reason == LB_ACCEPT) {
            reason = lb_plan_add(p->plan, &ev, now_ms, &txn);
            if (reason == LB_REJECT__COUNT)
                return -1;
            if (reason != LB_ACCEPT)
                describe_plan_reject(&ev, reason, detail, sizeof(detail));
        }
        p->txn_of[i] = txn;
        p->stats.records++;
        if (reason != LB_ACCEPT) {
            p->stats.rejected[reason]++;
            log_reject(r, reason, detail);
        }
    }
    return lb_plan_finish(p->plan);
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

int lb_pipeline_run(struct lb_pipeline *p, const struct lb_record *records, size_t count,
                    int64_t now_ms, uint8_t *durable, lb_pipeline_wait_fn wait, void *ctx)
{
    size_t ntxns, pending = 0;
    int64_t backoff = BACKOFF_MIN_MS;
    int gave_up = 0;

    if (ensure_capacity(p, count, 1) != 0 || plan_records(p, records, count, now_ms) != 0)
        return -1;
    const struct lb_txn *txns = lb_plan_txns(p->plan, &ntxns);
    const char *bytes = lb_plan_bytes(p->plan);
    if (ensure_capacity(p, count, ntxns) != 0)
        return -1;
    p->stats.batches++;
    p->stats.member_updates += lb_plan_stats(p->plan)->member_updates;
    p->stats.late_windows += lb_plan_stats(p->plan)->late;

    for (size_t t = 0; t < ntxns; t++) {
        p->txn_ok[t] = 0;
        p->request_txn[pending] = (uint32_t)t;
        p->requests[pending++] = (struct lb_request){.slot = txns[t].slot,
                                                     .is_txn = 1,
                                                     .ncommands = txns[t].ncommands,
                                                     .bytes = bytes + txns[t].offset,
                                                     .len = txns[t].len};
    }
    while (pending) {
        lb_cluster_exec(p->cluster, p->requests, pending);
        size_t still = 0;
        for (size_t k = 0; k < pending; k++) {
            if (p->requests[k].ok) {
                p->txn_ok[p->request_txn[k]] = 1;
                continue;
            }
            const struct lb_txn *txn = &txns[p->request_txn[k]];
            if (strstr(p->requests[k].error, "WRONGTYPE"))
                /* Not transient: someone wrote a non-sorted-set value under our
                 * prefix. Retrying keeps the events safe until it is fixed. */
                LB_ERROR("pipeline",
                         "board '%.*s': a key under its hash tag is not a sorted set; delete or "
                         "rename it, the batch is retried until then: %s",
                         (int)txn->board.len, txn->board.ptr, p->requests[k].error);
            else if (still == 0)
                LB_WARN("pipeline", "writing board '%.*s' failed, retrying in ~%lld ms: %s",
                        (int)txn->board.len, txn->board.ptr, (long long)backoff,
                        p->requests[k].error);
            p->stats.write_failures++;
            p->request_txn[still] = p->request_txn[k];
            p->requests[still++] = p->requests[k];
        }
        pending = still;
        if (!pending)
            break;
        if (!wait || wait(ctx, backoff) != 0) {
            gave_up = 1;
            break;
        }
        backoff = next_backoff(p, backoff);
    }

    for (size_t i = 0; i < count; i++) {
        uint32_t txn = p->txn_of[i];
        durable[i] = txn == UINT32_MAX || p->txn_ok[txn];
        if (txn != UINT32_MAX && durable[i])
            p->stats.applied++;
    }
    return gave_up;
}

const struct lb_pipeline_stats *lb_pipeline_stats(const struct lb_pipeline *p)
{
    return &p->stats;
}
