/* The two-batch conveyor; see flow.h. */
#include "flow.h"

#include <stdlib.h>
#include <string.h>

int lb_flow_init(struct lb_flow *f, struct lb_pipeline *pipeline, struct lb_batch *a,
                 struct lb_batch *b, size_t cap)
{
    *f = (struct lb_flow){.pipeline = pipeline, .batches = {a, b}, .next = a, .cap = cap};
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        struct lb_batch *k = f->batches[i];
        *k = (struct lb_batch){.msgs = calloc(cap, sizeof(*k->msgs)),
                               .records = calloc(cap, sizeof(*k->records)),
                               .state = calloc(cap, 1)};
        ok = ok && k->msgs && k->records && k->state;
    }
    f->scratch = calloc(cap ? cap : 1, sizeof(*f->scratch));
    return ok && f->scratch ? 0 : -1;
}

void lb_flow_free(struct lb_flow *f)
{
    for (int i = 0; i < 2; i++) {
        struct lb_batch *k = f->batches[i];
        if (!k)
            continue;
        if (k->msgs)
            lb_flow_done(k);
        free(k->msgs);
        free(k->records);
        free(k->state);
        *k = (struct lb_batch){0};
    }
    f->next = f->inflight = NULL;
    lb_flow_unwait(f, NULL, 0);
    free(f->waits);
    free(f->scratch);
    f->waits = NULL;
    f->scratch = NULL;
}

static int waits(const struct lb_flow *f, const rd_kafka_message_t *msg)
{
    const char *topic = rd_kafka_topic_name(msg->rkt);
    for (size_t i = 0; i < f->nwaits; i++)
        if (f->waits[i].partition == msg->partition && strcmp(f->waits[i].topic, topic) == 0)
            return 1;
    return 0;
}

static int add_wait(struct lb_flow *f, const rd_kafka_message_t *msg)
{
    if (f->nwaits == f->capwaits) {
        size_t cap = f->capwaits ? f->capwaits * 2 : 8;
        struct lb_flow_wait *grown = realloc(f->waits, cap * sizeof(*grown));
        if (!grown)
            return -1;
        f->waits = grown;
        f->capwaits = cap;
    }
    char *topic = strdup(rd_kafka_topic_name(msg->rkt));
    if (!topic)
        return -1;
    f->waits[f->nwaits++] = (struct lb_flow_wait){topic, msg->partition};
    return 0;
}

void lb_flow_unwait(struct lb_flow *f, const char *topic, int32_t partition)
{
    size_t kept = 0;
    for (size_t i = 0; i < f->nwaits; i++) {
        struct lb_flow_wait *w = &f->waits[i];
        if (!topic || (w->partition == partition && strcmp(w->topic, topic) == 0))
            free(w->topic);
        else
            f->waits[kept++] = *w;
    }
    f->nwaits = kept;
}

int lb_flow_resolve(struct lb_flow *f, struct lb_registry *registry, struct lb_decoder *decoder,
                    int64_t mono_ms)
{
    struct lb_batch *b = f->next;
    size_t kept = 0, waiting = 0;
    if (lb_registry_progress(registry, decoder, mono_ms) != 0)
        return -1;
    for (size_t i = 0; i < b->n; i++) {
        rd_kafka_message_t *msg = b->msgs[i];
        int32_t id;
        int wait = waits(f, msg);
        if (!wait && lb_payload_schema_id(msg->payload, msg->len, &id) == 0) {
            int rc = lb_registry_resolve(registry, decoder, id, mono_ms);
            if (rc < 0 || (rc == 0 && add_wait(f, msg) != 0)) {
                /* every message once in msgs again (i == kept + waiting) */
                memcpy(b->msgs + kept, f->scratch, waiting * sizeof(*b->msgs));
                b->waiting = 0;
                return -1;
            }
            wait = rc == 0;
        }
        if (wait)
            f->scratch[waiting++] = msg;
        else
            b->msgs[kept++] = msg;
    }
    memcpy(b->msgs + kept, f->scratch, waiting * sizeof(*b->msgs));
    b->waiting = waiting;
    return 0;
}

void lb_flow_begin(struct lb_flow *f)
{
    f->next->seq = ++f->collected;
}

int lb_flow_prepare(struct lb_flow *f, int64_t now_ms)
{
    struct lb_batch *b = f->next;
    for (size_t i = 0; i < b->n; i++) {
        const rd_kafka_message_t *msg = b->msgs[i];
        int64_t ts = rd_kafka_message_timestamp(msg, NULL); /* -1: none */
        b->records[i] = (struct lb_record){.payload = msg->payload,
                                           .len = msg->len,
                                           .topic = rd_kafka_topic_name(msg->rkt),
                                           .partition = msg->partition,
                                           .offset = msg->offset,
                                           .timestamp_ms = ts > 0 ? ts : 0};
    }
    return lb_pipeline_prepare(f->pipeline, b->records, b->n - b->waiting, now_ms);
}

void lb_flow_send(struct lb_flow *f)
{
    if (f->inflight)
        return;
    lb_pipeline_send(f->pipeline);
    f->inflight = f->next;
    f->next = f->next == f->batches[0] ? f->batches[1] : f->batches[0];
}

int lb_flow_progress(struct lb_flow *f)
{
    return !f->inflight || lb_pipeline_progress(f->pipeline);
}

int lb_flow_complete(struct lb_flow *f, lb_pipeline_wait_fn wait, void *ctx, struct lb_batch **done)
{
    struct lb_batch *b = f->inflight;
    *done = b;
    if (!b)
        return 0;
    int rc = lb_pipeline_complete(f->pipeline, b->state, wait, ctx);
    f->inflight = NULL;
    return rc;
}

void lb_flow_done(struct lb_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        rd_kafka_message_destroy(b->msgs[i]);
    b->n = 0;
    b->waiting = 0;
}
