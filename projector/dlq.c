/* The dead-letter topic; see dlq.h.
 *
 * Every record asked for is an entry in a small hash table keyed by its
 * source (topic, partition, offset). Delivery reports point at the entry
 * (entries never move), so they never write into the caller's batch, which
 * may be gone by then: a hold lets the daemon move on before the broker
 * answers. An entry is freed once its source offset is committed and no
 * delivery of it is in flight.
 */
#include "dlq.h"
#include "clock.h"

#include "kafka.h"
#include "log.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct entry {
    struct entry *next; /* in its bucket */
    char *topic;
    int32_t partition;
    int64_t offset;
    uint8_t state;        /* enum lb_dlq_state */
    uint8_t by_reference; /* 0: whole; 1: without the value; 2: without key and value */
    uint8_t alone;        /* the broker refused its batch as too large: sent alone in one */
    uint8_t forgotten;    /* committed: free once nothing is in flight */
    uint8_t reason;       /* enum lb_reject, and 'detail': what a copy sent again says */
    char *detail;
    unsigned in_flight; /* deliveries whose report is still to come */
};

/* Two producers: records go batched; one whose batch the broker refused as
 * larger than the topic's max.message.bytes goes again alone in a batch of
 * its own (batch.num.messages 1), and by reference only if refused alone
 * too: a small record batched with others is never cut for their size.
 * Every record goes alone after the first such refusal: each refusal makes
 * the idempotent producer bump its epoch, which has a limit. */
enum { BATCHED, ALONE, PRODUCERS };

struct lb_dlq {
    rd_kafka_t *producers[PRODUCERS];
    rd_kafka_topic_t *topics[PRODUCERS];
    struct entry **buckets;
    size_t nbuckets, count;
    int all_alone; /* a batch was refused as too large: every record goes alone */
    struct lb_dlq_stats stats;
    struct lb_ratelimit said[LB_DLQ_FAILURE__COUNT];
};

const char *lb_dlq_failure_name(enum lb_dlq_failure kind)
{
    static const char *const names[LB_DLQ_FAILURE__COUNT] = {
        [LB_DLQ_TOO_LARGE] = "too_large",
        [LB_DLQ_UNAUTHORIZED] = "unauthorized",
        [LB_DLQ_TOPIC_MISSING] = "topic_missing",
        [LB_DLQ_TIMEOUT] = "timeout",
        [LB_DLQ_OTHER] = "other",
    };
    return kind < LB_DLQ_FAILURE__COUNT ? names[kind] : "?";
}

static enum lb_dlq_failure classify(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        return LB_DLQ_TOO_LARGE;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        return LB_DLQ_UNAUTHORIZED;
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
        return LB_DLQ_TOPIC_MISSING;
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
        return LB_DLQ_TIMEOUT;
    default:
        return LB_DLQ_OTHER;
    }
}

/* ---- the entries ------------------------------------------------------------------------ */

static size_t bucket_of(const struct lb_dlq *dlq, const char *topic, int32_t partition,
                        int64_t offset)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (const char *t = topic; *t; t++)
        h = (h ^ (unsigned char)*t) * UINT64_C(0x100000001b3);
    h = (h ^ (uint32_t)partition) * UINT64_C(0x100000001b3);
    h = (h ^ (uint64_t)offset) * UINT64_C(0x100000001b3);
    return (size_t)(h ^ (h >> 29)) & (dlq->nbuckets - 1);
}

static struct entry *lookup(const struct lb_dlq *dlq, const char *topic, int32_t partition,
                            int64_t offset)
{
    for (struct entry *e = dlq->buckets[bucket_of(dlq, topic, partition, offset)]; e; e = e->next)
        if (e->offset == offset && e->partition == partition && strcmp(e->topic, topic) == 0)
            return e;
    return NULL;
}

static void grow(struct lb_dlq *dlq)
{
    size_t n = dlq->nbuckets * 2;
    struct entry **buckets = calloc(n, sizeof(*buckets));
    if (!buckets)
        return; /* longer chains, still correct */
    struct entry **old = dlq->buckets;
    size_t oldn = dlq->nbuckets;
    dlq->buckets = buckets;
    dlq->nbuckets = n;
    for (size_t b = 0; b < oldn; b++)
        for (struct entry *e = old[b], *next; e; e = next) {
            next = e->next;
            size_t at = bucket_of(dlq, e->topic, e->partition, e->offset);
            e->next = buckets[at];
            buckets[at] = e;
        }
    free(old);
}

static struct entry *entry_for(struct lb_dlq *dlq, const char *topic, int32_t partition,
                               int64_t offset)
{
    struct entry *e = lookup(dlq, topic, partition, offset);
    if (e)
        return e;
    if (dlq->count >= dlq->nbuckets * 2)
        grow(dlq);
    if (!(e = calloc(1, sizeof(*e))) || !(e->topic = strdup(topic))) {
        free(e);
        return NULL;
    }
    e->partition = partition;
    e->offset = offset;
    size_t at = bucket_of(dlq, topic, partition, offset);
    e->next = dlq->buckets[at];
    dlq->buckets[at] = e;
    dlq->count++;
    return e;
}

static void free_entry(struct lb_dlq *dlq, struct entry *e)
{
    struct entry **link = &dlq->buckets[bucket_of(dlq, e->topic, e->partition, e->offset)];
    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    dlq->count--;
    free(e->topic);
    free(e->detail);
    free(e);
}

void lb_dlq_forget_below(struct lb_dlq *dlq, const char *topic, int32_t partition, int64_t offset)
{
    for (size_t b = 0; b < dlq->nbuckets; b++)
        for (struct entry *e = dlq->buckets[b], *next; e; e = next) {
            next = e->next;
            if (e->partition != partition || e->offset >= offset || strcmp(e->topic, topic) != 0)
                continue;
            if (e->in_flight)
                e->forgotten = 1;
            else
                free_entry(dlq, e);
        }
}

/* ---- producing --------------------------------------------------------------------------- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    struct lb_dlq *dlq = opaque;
    struct entry *e = msg->_private;
    (void)rk;
    if (!e)
        return;
    e->in_flight--;
    if (msg->err) {
        enum lb_dlq_failure kind = classify(msg->err);
        dlq->stats.failed++;
        dlq->stats.failures[kind]++;
        const char *next = "; its partition holds there";
        if (kind == LB_DLQ_TOO_LARGE && !e->alone) {
            e->alone = 1; /* perhaps its batch's size, not its own */
            next = "; it is sent again alone in its batch";
            if (!dlq->all_alone)
                LB_WARN("dlq",
                        "the dead-letter topic %s refused a batch as too large: from now on "
                        "every record goes alone in a batch (raise the topic's "
                        "max.message.bytes to batch again)",
                        rd_kafka_topic_name(msg->rkt));
            dlq->all_alone = 1;
        } else if (kind == LB_DLQ_TOO_LARGE && e->by_reference < 2) {
            e->by_reference++;
            next = "; it is sent again by reference";
        }
        lb_log_every(&dlq->said[kind], 5000, LB_LOG_ERROR, "dlq",
                     "dead-lettering the record %s [%d] @ %lld to the dead-letter topic %s "
                     "failed: %s (%s)%s",
                     e->topic, e->partition, (long long)e->offset, rd_kafka_topic_name(msg->rkt),
                     rd_kafka_err2str(msg->err), lb_dlq_failure_name(kind), next);
        if (e->state == LB_DLQ_PENDING && !e->in_flight)
            e->state = LB_DLQ_FAILED;
    } else {
        dlq->stats.delivered++;
        dlq->stats.by_reference += e->by_reference > 0;
        e->state = LB_DLQ_DONE;
    }
    if (e->forgotten && !e->in_flight)
        free_entry(dlq, e);
}

static void dlq_callbacks(rd_kafka_conf_t *conf, void *ctx)
{
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, ctx);
}

struct lb_dlq *lb_dlq_new(const struct lb_dlq_options *options, char *err, size_t errlen,
                          enum lb_error_class *class)
{
    /* defaults, which the kafka: section may override */
    static const char *const defaults[][2] = {{"enable.idempotence", "true"},
                                              {"acks", "all"},
                                              {"linger.ms", "5"},
                                              {"message.timeout.ms", "30000"},
                                              {"reconnect.backoff.max.ms", "1000"}};
    static const char *const alone[][2] = {{"batch.num.messages", "1"}};
    enum lb_error_class ignored;
    if (!class)
        class = &ignored;
    *class = LB_ERROR_RUNTIME;
    struct lb_dlq *dlq = calloc(1, sizeof(*dlq));
    if (!dlq || !(dlq->buckets = calloc(64, sizeof(*dlq->buckets)))) {
        snprintf(err, errlen, "out of memory");
        free(dlq);
        return NULL;
    }
    dlq->nbuckets = 64;
    for (int i = 0; i < PRODUCERS; i++) {
        struct lb_kafka_client client = {.type = RD_KAFKA_PRODUCER,
                                         .defaults = defaults,
                                         .ndefaults = sizeof(defaults) / sizeof(defaults[0]),
                                         .fixed = i == ALONE ? alone : NULL,
                                         .nfixed = i == ALONE,
                                         .setup = dlq_callbacks,
                                         .ctx = dlq};
        if (!(dlq->producers[i] = lb_kafka_new(&options->kafka, &client, err, errlen, class)))
            break;
        if (!(dlq->topics[i] = rd_kafka_topic_new(dlq->producers[i], options->topic, NULL))) {
            snprintf(err, errlen, "dead-letter topic %s: %s", options->topic,
                     rd_kafka_err2str(rd_kafka_last_error()));
            *class = LB_ERROR_RUNTIME;
            break;
        }
    }
    if (dlq->topics[ALONE])
        return dlq;
    for (int i = 0; i < PRODUCERS; i++) {
        if (dlq->topics[i])
            rd_kafka_topic_destroy(dlq->topics[i]);
        if (dlq->producers[i])
            rd_kafka_destroy(dlq->producers[i]);
    }
    free(dlq->buckets);
    free(dlq);
    return NULL;
}

void lb_dlq_free(struct lb_dlq *dlq, int timeout_ms)
{
    if (!dlq)
        return;
    int64_t until = lb_monotonic_ms() + timeout_ms;
    for (int i = 0; i < PRODUCERS; i++) {
        int64_t left = until - lb_monotonic_ms();
        if (rd_kafka_flush(dlq->producers[i], left > 0 ? (int)left : 0) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
            LB_WARN("dlq",
                    "%d dead-letter record(s) undelivered at exit; their offsets were not "
                    "committed",
                    rd_kafka_outq_len(dlq->producers[i]));
            /* purge: their delivery reports (failed) are served by the poll */
            rd_kafka_purge(dlq->producers[i], RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
            rd_kafka_poll(dlq->producers[i], 0);
        }
        rd_kafka_topic_destroy(dlq->topics[i]);
        rd_kafka_destroy(dlq->producers[i]);
    }
    for (size_t b = 0; b < dlq->nbuckets; b++)
        for (struct entry *e = dlq->buckets[b], *next; e; e = next) {
            next = e->next;
            free(e->topic);
            free(e->detail);
            free(e);
        }
    free(dlq->buckets);
    free(dlq);
}

static void sha256_hex(const void *bytes, size_t len, char out[65])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    static const char hex[] = "0123456789abcdef";
    if (!EVP_Digest(bytes, len, digest, &n, EVP_sha256(), NULL))
        n = 0;
    for (unsigned int i = 0; i < n && i < 32; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[n < 32 ? 2 * n : 64] = '\0';
}

/* Produces one copy of 'msg' as 'e' says (whole or by reference). Returns
 * the local error (0 when queued). */
static rd_kafka_resp_err_t produce(struct lb_dlq *dlq, struct entry *e,
                                   const rd_kafka_message_t *msg, enum lb_reject reason,
                                   const char *detail)
{
    char partition[16], offset[24], when[40], vsize[24], ksize[24], vsha[65], ksha[65];
    const char *source = rd_kafka_topic_name(msg->rkt), *reason_name = lb_reject_name(reason);
    int no_value = e->by_reference >= 1, no_key = e->by_reference >= 2;
    int via = e->alone || dlq->all_alone ? ALONE : BATCHED;
    const char *by_reference = no_key ? "key,value" : "value";
    snprintf(partition, sizeof(partition), "%d", msg->partition);
    snprintf(offset, sizeof(offset), "%lld", (long long)msg->offset);
    snprintf(vsize, sizeof(vsize), "%zu", msg->len);
    snprintf(ksize, sizeof(ksize), "%zu", msg->key_len);
    lb_utc_format(lb_wall_ms(), when, sizeof(when));
    rd_kafka_headers_t *h = rd_kafka_headers_new(12);
    rd_kafka_header_add(h, "lb.reason", -1, reason_name, -1);
    rd_kafka_header_add(h, "lb.detail", -1, detail, -1);
    rd_kafka_header_add(h, "lb.source.topic", -1, source, -1);
    rd_kafka_header_add(h, "lb.source.partition", -1, partition, -1);
    rd_kafka_header_add(h, "lb.source.offset", -1, offset, -1);
    rd_kafka_header_add(h, "lb.rejected.at", -1, when, -1);
    if (no_value) {
        sha256_hex(msg->payload ? msg->payload : "", msg->len, vsha);
        rd_kafka_header_add(h, "lb.by_reference", -1, by_reference, -1);
        rd_kafka_header_add(h, "lb.value.size", -1, vsize, -1);
        rd_kafka_header_add(h, "lb.value.sha256", -1, vsha, -1);
    }
    if (no_key) {
        sha256_hex(msg->key ? msg->key : "", msg->key_len, ksha);
        rd_kafka_header_add(h, "lb.key.size", -1, ksize, -1);
        rd_kafka_header_add(h, "lb.key.sha256", -1, ksha, -1);
    }
    rd_kafka_resp_err_t err =
        rd_kafka_producev(dlq->producers[via], RD_KAFKA_V_RKT(dlq->topics[via]),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(no_key ? NULL : msg->key, no_key ? 0 : msg->key_len),
                          RD_KAFKA_V_VALUE(no_value ? NULL : msg->payload, no_value ? 0 : msg->len),
                          RD_KAFKA_V_OPAQUE(e), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
    if (err)
        rd_kafka_headers_destroy(h); /* not taken over on failure */
    else {
        e->in_flight++;
        dlq->stats.sent++;
    }
    return err;
}

/* Produces the copy of 'msg' that entry 'e' stands for, by reference when
 * the producer finds it too large. */
static enum lb_dlq_state send_entry(struct lb_dlq *dlq, struct entry *e,
                                    const rd_kafka_message_t *msg)
{
    const char *source = rd_kafka_topic_name(msg->rkt);
    for (;;) {
        rd_kafka_resp_err_t err =
            produce(dlq, e, msg, (enum lb_reject)e->reason, e->detail ? e->detail : "");
        if (!err) {
            e->state = LB_DLQ_PENDING;
            break;
        }
        enum lb_dlq_failure kind = classify(err);
        dlq->stats.failed++;
        dlq->stats.failures[kind]++;
        if (kind == LB_DLQ_TOO_LARGE && e->by_reference < 2) {
            e->by_reference++; /* larger than the producer's message.max.bytes */
            lb_log_every(&dlq->said[kind], 5000, LB_LOG_WARN, "dlq",
                         "the record %s [%d] at offset %lld is too large for the dead-letter "
                         "producer (%s, too_large): sent by reference, without its %s",
                         source, msg->partition, (long long)msg->offset, rd_kafka_err2str(err),
                         e->by_reference == 1 ? "value" : "key and value");
            continue;
        }
        lb_log_every(&dlq->said[kind], 5000, LB_LOG_ERROR, "dlq",
                     "cannot queue the record %s [%d] at offset %lld for the dead-letter topic: "
                     "%s (%s); its partition holds there",
                     source, msg->partition, (long long)msg->offset, rd_kafka_err2str(err),
                     lb_dlq_failure_name(kind));
        e->state = LB_DLQ_FAILED;
        break;
    }
    return (enum lb_dlq_state)e->state;
}

enum lb_dlq_state lb_dlq_send(struct lb_dlq *dlq, const rd_kafka_message_t *msg,
                              enum lb_reject reason, const char *detail)
{
    const char *source = rd_kafka_topic_name(msg->rkt);
    struct entry *e = entry_for(dlq, source, msg->partition, msg->offset);
    if (!e) {
        LB_ERROR("dlq", "out of memory dead-lettering %s [%d] at offset %lld; its partition holds",
                 source, msg->partition, (long long)msg->offset);
        return LB_DLQ_FAILED;
    }
    if (e->state == LB_DLQ_DONE || e->state == LB_DLQ_PENDING)
        return (enum lb_dlq_state)e->state; /* read again: not a second copy */
    if (e->state == LB_DLQ_NONE) {
        e->reason = (uint8_t)reason;
        e->detail = strdup(detail ? detail : ""); /* NULL: sent without it */
    }
    return send_entry(dlq, e, msg);
}

enum lb_dlq_state lb_dlq_send_again(struct lb_dlq *dlq, const rd_kafka_message_t *msg)
{
    struct entry *e = lookup(dlq, rd_kafka_topic_name(msg->rkt), msg->partition, msg->offset);
    if (!e || e->state != LB_DLQ_FAILED)
        return e ? (enum lb_dlq_state)e->state : LB_DLQ_NONE;
    return send_entry(dlq, e, msg);
}

enum lb_dlq_state lb_dlq_state(const struct lb_dlq *dlq, const rd_kafka_message_t *msg)
{
    if (!dlq->count) /* the common case: nothing dead-lettered that is not committed */
        return LB_DLQ_NONE;
    const struct entry *e = lookup(dlq, rd_kafka_topic_name(msg->rkt), msg->partition, msg->offset);
    return e ? (enum lb_dlq_state)e->state : LB_DLQ_NONE;
}

void lb_dlq_poll(struct lb_dlq *dlq, int timeout_ms)
{
    if (!rd_kafka_outq_len(dlq->producers[ALONE])) {
        rd_kafka_poll(dlq->producers[BATCHED], timeout_ms);
        return;
    }
    /* both in turn, until one served a report or the time is up */
    int64_t until = lb_monotonic_ms() + timeout_ms;
    for (;;) {
        int64_t left = until - lb_monotonic_ms();
        if (rd_kafka_poll(dlq->producers[BATCHED], 0) +
                    rd_kafka_poll(dlq->producers[ALONE], left > 5   ? 5
                                                         : left > 0 ? (int)left
                                                                    : 0) >
                0 ||
            left <= 0)
            return;
    }
}

const struct lb_dlq_stats *lb_dlq_stats(const struct lb_dlq *dlq)
{
    return &dlq->stats;
}
