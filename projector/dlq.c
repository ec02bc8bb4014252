/* The dead-letter topic; see dlq.h. */
#include "dlq.h"

#include "consumer.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct lb_dlq {
    rd_kafka_t *producer;
    rd_kafka_topic_t *topic;
    struct lb_dlq_stats stats;
};

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
    struct lb_dlq *dlq = opaque;
    uint8_t *state = msg->_private;
    (void)rk;
    if (msg->err) {
        dlq->stats.failed++;
        LB_ERROR("dlq", "dead-lettering the event from %s failed: %s; its partition waits",
                 rd_kafka_topic_name(dlq->topic), rd_kafka_err2str(msg->err));
    } else {
        dlq->stats.delivered++;
    }
    if (state)
        *state = msg->err ? LB_DLQ_FAILED : LB_DLQ_DONE;
}

struct lb_dlq *lb_dlq_new(const struct lb_config *config, char *err, size_t errlen)
{
    struct lb_dlq *dlq = calloc(1, sizeof(*dlq));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!dlq || !conf) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* Defaults first, so the kafka: section can override them. */
    static const char *const defaults[][2] = {{"enable.idempotence", "true"},
                                              {"acks", "all"},
                                              {"linger.ms", "5"},
                                              {"message.timeout.ms", "30000"}};
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
        if (rd_kafka_conf_set(conf, defaults[i][0], defaults[i][1], err, errlen) !=
            RD_KAFKA_CONF_OK)
            goto fail;
    if (lb_kafka_conf_apply(config, conf, err, errlen) != 0)
        goto fail;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, dlq);
    dlq->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
    if (!dlq->producer)
        goto fail;
    conf = NULL; /* owned by the producer now */
    dlq->topic = rd_kafka_topic_new(dlq->producer, config->dlq_topic, NULL);
    if (!dlq->topic) {
        snprintf(err, errlen, "dead-letter topic %s: %s", config->dlq_topic,
                 rd_kafka_err2str(rd_kafka_last_error()));
        goto fail;
    }
    return dlq;
fail:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (dlq && dlq->producer)
        rd_kafka_destroy(dlq->producer);
    free(dlq);
    return NULL;
}

void lb_dlq_free(struct lb_dlq *dlq, int timeout_ms)
{
    if (!dlq)
        return;
    if (rd_kafka_flush(dlq->producer, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        LB_WARN("dlq",
                "%d dead-letter record(s) undelivered at exit; their offsets were not "
                "stored",
                rd_kafka_outq_len(dlq->producer));
        /* purge: their delivery reports (failed) are served by the poll */
        rd_kafka_purge(dlq->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(dlq->producer, 0);
    }
    rd_kafka_topic_destroy(dlq->topic);
    rd_kafka_destroy(dlq->producer);
    free(dlq);
}

static void now_rfc3339(char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

void lb_dlq_send(struct lb_dlq *dlq, const rd_kafka_message_t *msg, enum lb_reject reason,
                 const char *detail, uint8_t *state)
{
    char partition[16], offset[24], when[40];
    const char *source = rd_kafka_topic_name(msg->rkt);
    snprintf(partition, sizeof(partition), "%d", msg->partition);
    snprintf(offset, sizeof(offset), "%lld", (long long)msg->offset);
    now_rfc3339(when, sizeof(when));
    const char *reason_name = lb_reject_name(reason);

    *state = LB_DLQ_PENDING;
    dlq->stats.sent++;
    rd_kafka_resp_err_t e = rd_kafka_producev(
        dlq->producer, RD_KAFKA_V_RKT(dlq->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(msg->key, msg->key_len), RD_KAFKA_V_VALUE(msg->payload, msg->len),
        RD_KAFKA_V_OPAQUE(state),
        RD_KAFKA_V_HEADER("lb.reason", reason_name, (ssize_t)strlen(reason_name)),
        RD_KAFKA_V_HEADER("lb.detail", detail, (ssize_t)strlen(detail)),
        RD_KAFKA_V_HEADER("lb.source.topic", source, (ssize_t)strlen(source)),
        RD_KAFKA_V_HEADER("lb.source.partition", partition, (ssize_t)strlen(partition)),
        RD_KAFKA_V_HEADER("lb.source.offset", offset, (ssize_t)strlen(offset)),
        RD_KAFKA_V_HEADER("lb.rejected.at", when, (ssize_t)strlen(when)), RD_KAFKA_V_END);
    if (e) {
        LB_ERROR("dlq", "cannot queue the event from %s/%d@%lld for the dead-letter topic: %s",
                 source, msg->partition, (long long)msg->offset, rd_kafka_err2str(e));
        dlq->stats.failed++;
        *state = LB_DLQ_FAILED;
    }
}

void lb_dlq_poll(struct lb_dlq *dlq, int timeout_ms)
{
    rd_kafka_poll(dlq->producer, timeout_ms);
}

const struct lb_dlq_stats *lb_dlq_stats(const struct lb_dlq *dlq)
{
    return &dlq->stats;
}
