/* The two-batch conveyor; see flow.h. */
#include "flow.h"

#include <stdlib.h>

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
    return ok ? 0 : -1;
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
    return lb_pipeline_prepare(f->pipeline, b->records, b->n, now_ms);
}

void lb_flow_send(struct lb_flow *f)
{
    if (f->inflight)
        return;
    lb_pipeline_send(f->pipeline);
    f->inflight = f->next;
    f->next = f->next == f->batches[0] ? f->batches[1] : f->batches[0];
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
}
