/* lbbench: the measuring halves of ops/bench/bench.sh.
 *
 *   ceiling    the Redis ceiling: the transactions the projector sends for a
 *              topic (read from Kafka first, then planned by the same engine
 *              in the same batches), all encoded, then pushed into the cluster
 *              as fast as it takes them, every node's pipeline written
 *              concurrently, no Kafka in the loop. Prints member updates/s
 *              and Redis CPU seconds (INFO cpu of every master). Then the
 *              floor: the same member updates as plain MULTI / ZADD GT|LT /
 *              PEXPIREAT / EXEC per board, no script and no markers (what
 *              exactly-once is measured against).
 *   freshness  event-time-to-visible latency: produces probe events stamped
 *              with the wall clock and polls Redis until each is visible.
 *              Measured by reading Redis, not by trusting the projector.
 *
 * stdout: key=value result lines; stderr: progress and errors. Exit status
 * (README, "Exit codes"): 0 ok, 1 failure, 2 usage, 3 configuration.
 */
#include "usage.h"
#include "apply.h"
#include "cluster.h"
#include "config.h"
#include "engine.h"
#include "kafka.h"
#include "eventgen.h"
#include "log.h"
#include "pipeline.h"
#include "planner.h"
#include "resp.h"
#include "slot.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct lb_cluster *connect_cluster(const struct lb_config *config)
{
    struct lb_cluster_options options;
    options = lb_engine_cluster_options(config);
    struct lb_cluster *cl = lb_cluster_new(&options);
    if (!cl || lb_cluster_refresh(cl) != 0) {
        fprintf(stderr, "lbbench: %s\n", cl ? lb_cluster_error(cl) : "out of memory");
        lb_cluster_free(cl);
        return NULL;
    }
    return cl;
}

/* ---- ceiling --------------------------------------------------------------------- */

struct encoded {
    struct lb_buf bytes;
    struct lb_request *requests;
    size_t count, cap;
    size_t *offsets; /* requests[i].bytes is set from these once 'bytes' stops moving */
    uint64_t member_updates;
};

static int add_request(struct encoded *enc, const struct lb_request *req, const char *bytes)
{
    if (enc->count == enc->cap) {
        size_t cap = enc->cap ? enc->cap * 2 : 4096;
        struct lb_request *r = realloc(enc->requests, cap * sizeof(*r));
        size_t *o = r ? realloc(enc->offsets, cap * sizeof(*o)) : NULL;
        if (r)
            enc->requests = r;
        if (!o)
            return -1;
        enc->offsets = o;
        enc->cap = cap;
    }
    enc->offsets[enc->count] = enc->bytes.len;
    enc->requests[enc->count++] = *req;
    return lb_buf_append(&enc->bytes, bytes, req->len);
}

static int keep_batch(struct encoded *enc, const struct lb_apply_batch *batch,
                      const struct lb_plan *plan)
{
    const struct lb_apply_request *txns = batch->requests;
    const char *bytes = batch->bytes.data;
    for (size_t t = 0; t < batch->count; t++) {
        struct lb_request req = {.slot = txns[t].slot,
                                 .is_txn = txns[t].is_txn,
                                 .writes = 1,
                                 .ncommands = txns[t].ncommands,
                                 .len = txns[t].len};
        if (txns[t].len && add_request(enc, &req, bytes + txns[t].offset) != 0)
            return -1;
    }
    enc->member_updates += lb_plan_stats(plan)->member_updates;
    return 0;
}

/* The floor: per board of the plan, MULTI, per window key one ZADD GT|LT of
 * every member update and its expiry, EXEC. */
static int keep_floor(struct encoded *floor, const struct lb_plan *plan, const char *prefix)
{
    struct lb_plan_view v;
    struct lb_buf buf = {0};
    lb_plan_view(plan, &v);
    for (uint32_t b = 0; b < v.nboards; b++) {
        const struct lb_plan_board *board = &v.boards[b];
        if (!board->profile || board->first_key == LB_PLAN_NONE)
            continue;
        const char *gtlt = board->profile->scoring.order == LB_ORDER_DESC ? "GT" : "LT";
        struct lb_request req = {.slot = board->slot, .is_txn = 1, .writes = 1};
        buf.len = 0;
        if (lb_buf_reserve(&buf, 64) != 0)
            return -1;
        buf.len = (size_t)(lb_resp_bulk(lb_resp_header(buf.data, '*', 1), "MULTI", 5) - buf.data);
        for (uint32_t k = board->first_key; k != LB_PLAN_NONE; k = v.keys[k].next_key) {
            const struct lb_plan_key *key = &v.keys[k];
            char name[1024];
            size_t len = lb_window_key(prefix, board->id, &board->profile->windows[key->window],
                                       key->window_id, key->custom_value, name, sizeof(name));
            size_t need = 2 * len + 256;
            for (uint32_t e = key->first_entry; e != LB_PLAN_NONE; e = v.entries[e].next_entry)
                need += v.entries[e].player.len + 64;
            if (lb_buf_reserve(&buf, need) != 0)
                return -1;
            char *p = buf.data + buf.len;
            p = lb_resp_header(p, '*', 3 + 2 * (uint64_t)key->nentries);
            p = lb_resp_bulk(p, "ZADD", 4);
            p = lb_resp_bulk(p, name, len);
            p = lb_resp_bulk(p, gtlt, 2);
            for (uint32_t e = key->first_entry; e != LB_PLAN_NONE; e = v.entries[e].next_entry) {
                p = lb_resp_bulk_int(p, v.entries[e].value);
                p = lb_resp_bulk(p, v.entries[e].player.ptr, v.entries[e].player.len);
            }
            req.ncommands++;
            if (key->expire != LB_EXPIRE_NONE) {
                p = lb_resp_header(p, '*', 3);
                p = key->expire == LB_EXPIRE_AT ? lb_resp_bulk(p, "PEXPIREAT", 9)
                                                : lb_resp_bulk(p, "PEXPIRE", 7);
                p = lb_resp_bulk(p, name, len);
                p = lb_resp_bulk_int(p, key->expire_ms);
                req.ncommands++;
            }
            buf.len = (size_t)(p - buf.data);
        }
        if (lb_buf_reserve(&buf, 32) != 0)
            return -1;
        buf.len = (size_t)(lb_resp_bulk(lb_resp_header(buf.data + buf.len, '*', 1), "EXEC", 4) -
                           buf.data);
        req.len = buf.len;
        if (add_request(floor, &req, buf.data) != 0)
            return -1;
    }
    floor->member_updates += lb_plan_stats(plan)->member_updates;
    lb_buf_free(&buf);
    return 0;
}

/* Plans one batch of messages and keeps its transactions. */
static int plan_batch(const struct lb_config *config, const struct lb_decoder *decoder,
                      struct lb_plan *plan, struct lb_apply_batch *batch, struct lb_arena *arena,
                      rd_kafka_message_t **msgs, size_t n, int64_t now, struct encoded *enc,
                      struct encoded *floor)
{
    lb_plan_reset(plan);
    lb_arena_reset(arena);
    for (size_t i = 0; i < n; i++) {
        struct lb_event ev;
        uint32_t txn;
        if (!msgs[i]->payload ||
            lb_decode(decoder, msgs[i]->payload, msgs[i]->len, &ev, arena, NULL, 0) != LB_ACCEPT ||
            lb_event_validate(&ev, NULL, 0) != LB_ACCEPT)
            continue;
        struct lb_position pos = {rd_kafka_topic_name(msgs[i]->rkt), msgs[i]->partition,
                                  msgs[i]->offset};
        enum lb_reject reason;
        if (lb_plan_add(plan, &ev, &pos, now, &txn, &reason) < 0)
            return -1;
    }
    return lb_apply_encode(batch, plan, &(struct lb_apply_options){config->key_prefix, 0}) == 0 &&
                   keep_batch(enc, batch, plan) == 0 &&
                   keep_floor(floor, plan, config->key_prefix) == 0
               ? 0
               : -1;
}

/* Reads the configured topic from its start to its end, in the order a
 * consumer receives it, and plans it in batches of the configured size: the
 * transactions the projector sends when it drains the same topic. */
static int encode_topic(const struct lb_config *config, struct encoded *enc, struct encoded *floor,
                        uint64_t *events)
{
    char err[1024], group[64];
    struct lb_decoder *decoder = lb_config_decoder(config, err, sizeof(err), NULL);
    struct lb_plan *plan =
        lb_plan_new(&(struct lb_plan_options){config->profiles, config->nprofiles});
    struct lb_apply_batch encoded = {0};
    size_t batch = (size_t)config->batch_max_events, n = 0;
    rd_kafka_message_t **msgs = calloc(batch, sizeof(*msgs));
    rd_kafka_t *rk = NULL;
    rd_kafka_topic_partition_list_t *parts = NULL;
    const struct rd_kafka_metadata *md = NULL;
    struct lb_arena arena;
    int64_t now = wall_ms(), remaining = 0;
    int rc = -1;

    lb_arena_init(&arena, 1 << 16);
    snprintf(group, sizeof(group), "lbbench-ceiling-%lld", (long long)now);
    struct lb_kafka_options options = lb_config_kafka(config);
    if (!decoder || !plan || !msgs || !(rk = lb_kafka_reader(&options, group, err, sizeof(err)))) {
        fprintf(stderr, "lbbench: %s\n", !plan || !msgs ? "out of memory" : err);
        goto done;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, config->topics[0], NULL);
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) || md->topic_cnt != 1 || md->topics[0].err) {
        fprintf(stderr, "lbbench: no metadata for topic %s\n", config->topics[0]);
        rd_kafka_topic_destroy(rkt);
        goto done;
    }
    rd_kafka_topic_destroy(rkt);
    parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
    for (int p = 0; p < md->topics[0].partition_cnt; p++) {
        int64_t low, high;
        if (rd_kafka_query_watermark_offsets(rk, config->topics[0], p, &low, &high, 10000)) {
            fprintf(stderr, "lbbench: no watermarks for partition %d\n", p);
            goto done;
        }
        remaining += high - low;
        rd_kafka_topic_partition_list_add(parts, config->topics[0], p)->offset = low;
    }
    rd_kafka_assign(rk, parts);
    *events = (uint64_t)remaining;
    while (remaining > 0) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 1000);
        if (!msg)
            continue;
        if (msg->err) {
            rd_kafka_message_destroy(msg);
            continue;
        }
        msgs[n++] = msg;
        remaining--;
        if (n == batch || remaining == 0) {
            int planned =
                plan_batch(config, decoder, plan, &encoded, &arena, msgs, n, now, enc, floor);
            for (size_t i = 0; i < n; i++)
                rd_kafka_message_destroy(msgs[i]);
            n = 0;
            if (planned != 0)
                goto done;
        }
    }
    for (size_t i = 0; i < enc->count; i++)
        enc->requests[i].bytes = enc->bytes.data + enc->offsets[i];
    for (size_t i = 0; i < floor->count; i++)
        floor->requests[i].bytes = floor->bytes.data + floor->offsets[i];
    rc = 0;
done:
    if (rc != 0 && decoder && plan && msgs)
        fprintf(stderr, "lbbench: could not read and plan the topic\n");
    for (size_t i = 0; i < n; i++)
        rd_kafka_message_destroy(msgs[i]);
    if (md)
        rd_kafka_metadata_destroy(md);
    if (parts)
        rd_kafka_topic_partition_list_destroy(parts);
    if (rk) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    lb_arena_free(&arena);
    free(msgs);
    lb_plan_free(plan);
    lb_apply_batch_free(&encoded);
    lb_decoder_free(decoder);
    return rc;
}

static void ignore_reply(void *ctx, const char *node, const redisReply *reply)
{
    (void)ctx;
    if (reply->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "lbbench: FLUSHALL on %s: %s\n", node, reply->str);
}

static void add_cpu(void *ctx, const char *node, const redisReply *reply)
{
    double *total = ctx;
    (void)node;
    if (reply->type != REDIS_REPLY_STRING)
        return;
    const char *sys = strstr(reply->str, "used_cpu_sys:"),
               *user = strstr(reply->str, "used_cpu_user:");
    if (sys && user)
        *total += strtod(sys + 13, NULL) + strtod(user + 14, NULL);
}

/* CPU seconds every master has used so far, or -1. */
static double redis_cpu(struct lb_cluster *cl)
{
    const char *info[] = {"INFO", "cpu"};
    size_t info_len[] = {4, 3};
    double total = 0;
    return lb_cluster_each_master(cl, 2, info, info_len, add_cpu, &total) == 0 ? total : -1;
}

/* FLUSHALL, then every request of 'enc', 'chunk' per call: every node's
 * pipeline stays deep. Prints one result line. */
static int push(struct lb_cluster *cl, const char *what, int run, const struct encoded *enc,
                uint64_t events, size_t chunk)
{
    const char *flush[] = {"FLUSHALL"};
    size_t flush_len[] = {8};
    if (lb_cluster_each_master(cl, 1, flush, flush_len, ignore_reply, NULL) != 0) {
        fprintf(stderr, "lbbench: FLUSHALL failed: %s\n", lb_cluster_error(cl));
        return -1;
    }
    double cpu = redis_cpu(cl), start = monotonic_s();
    for (size_t first = 0; first < enc->count; first += chunk) {
        size_t n = enc->count - first < chunk ? enc->count - first : chunk;
        size_t failed = lb_cluster_exec(cl, enc->requests + first, n);
        const char *why = "?";
        for (size_t i = first; i < first + n; i++) {
            if (!enc->requests[i].ok && why[0] == '?')
                why = enc->requests[i].error;
            if (enc->requests[i].reply) {
                freeReplyObject(enc->requests[i].reply);
                enc->requests[i].reply = NULL;
            }
        }
        if (failed) {
            fprintf(stderr, "lbbench: %s: a transaction failed: %s\n", what, why);
            return -1;
        }
    }
    double secs = monotonic_s() - start, cpu_after = redis_cpu(cl);
    printf("%s run=%d events=%llu transactions=%zu member_updates=%llu seconds=%.3f "
           "member_updates_per_s=%.0f events_per_s=%.0f redis_cpu_s_per_1m=%.3f\n",
           what, run, (unsigned long long)events, enc->count,
           (unsigned long long)enc->member_updates, secs, (double)enc->member_updates / secs,
           (double)events / secs,
           cpu < 0 || cpu_after < 0 ? -1.0 : (cpu_after - cpu) * 1e6 / (double)events);
    fflush(stdout);
    return 0;
}

static void encoded_free(struct encoded *enc)
{
    lb_buf_free(&enc->bytes);
    free(enc->requests);
    free(enc->offsets);
}

static int run_ceiling(const struct lb_config *config, int runs, size_t chunk)
{
    struct encoded enc = {0}, floor = {0};
    struct lb_cluster *cl = connect_cluster(config);
    uint64_t count = 0;
    int status = 1;

    if (!cl)
        goto done;
    double t = monotonic_s();
    if (encode_topic(config, &enc, &floor, &count) != 0)
        goto done;
    fprintf(stderr,
            "lbbench: read and planned %llu events into %zu transactions (%.1f MB, %llu member "
            "updates; floor %.1f MB) in %.1f s\n",
            (unsigned long long)count, enc.count, (double)enc.bytes.len / 1e6,
            (unsigned long long)enc.member_updates, (double)floor.bytes.len / 1e6,
            monotonic_s() - t);
    for (int run = 1; run <= runs; run++)
        if (push(cl, "ceiling", run, &enc, count, chunk) != 0 ||
            push(cl, "floor", run, &floor, count, chunk) != 0)
            goto done;
    status = 0;
done:
    encoded_free(&enc);
    encoded_free(&floor);
    lb_cluster_free(cl);
    return status;
}

/* ---- freshness ---------------------------------------------------------------------- */

struct probe {
    char player[32];
    int64_t ts_ms;
    int64_t visible_ms; /* 0 while pending */
};

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static rd_kafka_t *probe_producer(const struct lb_config *config)
{
    char err[1024];
    static const char *const fixed[][2] = {{"linger.ms", "0"}};
    struct lb_kafka_options options = lb_config_kafka(config);
    struct lb_kafka_client client = {.type = RD_KAFKA_PRODUCER, .fixed = fixed, .nfixed = 1};
    rd_kafka_t *rk = lb_kafka_new(&options, &client, err, sizeof(err), NULL);
    if (!rk)
        fprintf(stderr, "lbbench: %s\n", err);
    return rk;
}

/* Asks Redis which pending probes are visible: one ZMSCORE of up to 512 of
 * them, so that polling costs Redis about the same however many are
 * pending (a ZSCORE each made a run that fell behind fall further). */
static int poll_visible(struct lb_cluster *cl, const char *key, uint16_t slot, struct probe *probes,
                        size_t nprobes, size_t *pending)
{
    enum { MAX_ASKED = 512 };
    const char *argv[2 + MAX_ASKED];
    size_t len[2 + MAX_ASKED], index[MAX_ASKED], n = 0;
    argv[0] = "ZMSCORE", len[0] = 7;
    argv[1] = key, len[1] = strlen(key);
    for (size_t i = 0; i < nprobes && n < MAX_ASKED; i++) {
        if (probes[i].visible_ms)
            continue;
        argv[2 + n] = probes[i].player, len[2 + n] = strlen(probes[i].player);
        index[n++] = i;
    }
    if (!n)
        return 0;
    struct lb_buf buf = {0};
    if (lb_buf_command(&buf, (int)(2 + n), argv, len) != 0)
        return -1;
    struct lb_request req = {.slot = slot, .ncommands = 1, .bytes = buf.data, .len = buf.len};
    lb_cluster_exec(cl, &req, 1);
    int64_t now = wall_ms();
    const redisReply *r = req.ok ? req.reply : NULL;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < n && k < r->elements; k++) {
        if (r->element[k]->type == REDIS_REPLY_STRING) {
            probes[index[k]].visible_ms = now;
            (*pending)--;
        }
    }
    if (req.reply)
        freeReplyObject(req.reply);
    lb_buf_free(&buf);
    return 0;
}

/* Each probe's send time (ms since the first) and latency, one line each,
 * to see when the slow ones came, to F (opened before the run: a path that
 * cannot be written stops it before anything is measured); closes F. */
static int write_probes(FILE *f, const char *path, const struct probe *probes, size_t nprobes)
{
    fprintf(f, "sent_ms latency_ms\n");
    for (size_t i = 0; i < nprobes; i++)
        fprintf(f, "%lld %lld\n", (long long)(probes[i].ts_ms - probes[0].ts_ms),
                probes[i].visible_ms ? (long long)(probes[i].visible_ms - probes[i].ts_ms) : -1LL);
    if (fclose(f) != 0) {
        fprintf(stderr, "lbbench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int run_freshness(const struct lb_config *config, const char *topic, double duration_s,
                         double probe_rate, const char *board, const char *probes_path)
{
    FILE *out = probes_path ? fopen(probes_path, "w") : NULL;
    if (probes_path && !out) {
        fprintf(stderr, "lbbench: cannot write %s: %s\n", probes_path, strerror(errno));
        return 1;
    }
    size_t max = (size_t)(duration_s * probe_rate) + 1, nprobes = 0, pending = 0, lost = 0;
    struct probe *probes = calloc(max, sizeof(*probes));
    struct gen_options gopts = {
        .players = 1, .boards = 1, .days = 1, .schema_id = 1, .board_prefix = "", .zipf = 1};
    struct generator *gen = gen_new(&gopts);
    struct lb_cluster *cl = connect_cluster(config);
    rd_kafka_t *rk = probe_producer(config);
    int status = 1;
    char key[1024];
    const struct lb_profile *profile = lb_config_profile_for(config, board, strlen(board));

    if (!probes || !gen || !cl || !rk || !profile)
        goto done;
    snprintf(key, sizeof(key), "%s{%s}:alltime", config->key_prefix, board);
    uint16_t slot = lb_key_slot(key, strlen(key));
    double start = monotonic_s(), next = start;
    int64_t run_id = wall_ms();

    while (monotonic_s() - start < duration_s || pending) {
        double now = monotonic_s();
        if (now - start < duration_s && now >= next && nprobes < max) {
            struct probe *p = &probes[nprobes++];
            struct gen_event ev = {.score = 1, .op = 0};
            uint8_t payload[GEN_PAYLOAD_MAX];
            snprintf(p->player, sizeof(p->player), "q%lld-%zu", (long long)(run_id % 100000000),
                     nprobes);
            snprintf(ev.event_id, sizeof(ev.event_id), "probe-%zu", nprobes);
            snprintf(ev.board, sizeof(ev.board), "%s", board);
            memcpy(ev.player, p->player, sizeof(ev.player));
            p->ts_ms = ev.ts_ms = wall_ms();
            size_t len = gen_encode(gen, &ev, payload);
            if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(payload, len),
                                  RD_KAFKA_V_KEY(p->player, strlen(p->player)),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) {
                fprintf(stderr, "lbbench: producing a probe failed\n");
                goto done;
            }
            pending++;
            next += 1.0 / probe_rate;
        }
        rd_kafka_poll(rk, 0);
        if (poll_visible(cl, key, slot, probes, nprobes, &pending) != 0)
            goto done;
        if (now - start > duration_s + 15) {
            lost = pending;
            break;
        }
        usleep(1000);
    }
    rd_kafka_flush(rk, 5000);

    int64_t *lat = calloc(nprobes ? nprobes : 1, sizeof(*lat));
    size_t n = 0;
    for (size_t i = 0; lat && i < nprobes; i++)
        if (probes[i].visible_ms)
            lat[n++] = probes[i].visible_ms - probes[i].ts_ms;
    if (!lat || !n) {
        fprintf(stderr, "lbbench: no probe became visible\n");
        free(lat);
        goto done;
    }
    qsort(lat, n, sizeof(*lat), compare_i64);
    /* its own CPU, the probes' polling included: the bench counts it with
     * the other processes sharing the cores */
    printf("freshness probes=%zu lost=%zu p50_ms=%lld p90_ms=%lld p99_ms=%lld max_ms=%lld "
           "probe_cpu_s=%.2f\n",
           nprobes, lost, (long long)lat[n / 2], (long long)lat[n * 9 / 10],
           (long long)lat[n * 99 / 100], (long long)lat[n - 1], (double)clock() / CLOCKS_PER_SEC);
    free(lat);
    /* written also when probes were lost: that is when they tell most */
    int written = !out || write_probes(out, probes_path, probes, nprobes) == 0;
    out = NULL;
    status = lost || !written ? 1 : 0;
done:
    if (out)
        fclose(out);
    if (rk)
        rd_kafka_destroy(rk);
    lb_cluster_free(cl);
    gen_free(gen);
    free(probes);
    return status;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: lbbench ceiling   --config FILE [--runs R] [--chunk T]\n"
            "   or: lbbench freshness --config FILE --topic T [--duration S] [--probe-rate R] "
            "[--board ID]\n"
            "                         [--probes FILE]\n"
            "\n"
            "ceiling:   reads the configuration's first topic from start to end, plans it in\n"
            "           the configured batches as the projector would, encodes every\n"
            "           transaction, then R times: FLUSHALL and push them all, T transactions\n"
            "           per pipelined round (default 2000), every node at once; then the same\n"
            "           member updates as plain MULTI/ZADD GT|LT/PEXPIREAT/EXEC (the floor).\n"
            "           Prints member updates/s and Redis CPU s per 1M events of both.\n"
            "freshness: produces R probe events per second (default 50) for S seconds\n"
            "           (default 20) to topic T on board ID (default fresh) and polls Redis\n"
            "           until each is visible. --probes writes each probe's send time and\n"
            "           latency (ms, -1 never visible) to FILE, opened before the run.\n"
            "\n"
            "Results go to stdout as key=value lines. Used by ops/bench/bench.sh.\n"
            "\n"
            "Exit status: 0 ok; 1 failure (Kafka or Redis unreachable or refusing, no probe\n"
            "visible, FILE not writable); 2 usage error; 3 invalid configuration.\n");
}

int main(int argc, char **argv)
{
    lb_usage_program = "lbbench";
    enum { O_RUNS = 256, O_CHUNK, O_DURATION, O_PROBE_RATE, O_BOARD, O_TOPIC, O_PROBES };
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"runs", required_argument, NULL, O_RUNS},
                                             {"chunk", required_argument, NULL, O_CHUNK},
                                             {"duration", required_argument, NULL, O_DURATION},
                                             {"probe-rate", required_argument, NULL, O_PROBE_RATE},
                                             {"board", required_argument, NULL, O_BOARD},
                                             {"topic", required_argument, NULL, O_TOPIC},
                                             {"probes", required_argument, NULL, O_PROBES},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *path = NULL, *topic = NULL, *board = "fresh", *probes_path = NULL;
    int runs = 3, opt;
    size_t chunk = 2000;
    double duration = 20, probe_rate = 50, v;

    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2)
        return lb_usage_error("say what to measure: ceiling or freshness");
    if (argv[1][0] == '-')
        return lb_usage_error("unknown option '%s' before the subcommand (ceiling or freshness)",
                              argv[1]);
    if (strcmp(argv[1], "ceiling") != 0 && strcmp(argv[1], "freshness") != 0)
        return lb_usage_error("unknown subcommand '%s'; the subcommands are ceiling and freshness",
                              argv[1]);
    const char *command = argv[1];
    optind = 2;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":c:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case O_RUNS:
            if (lb_usage_number(optarg, 1, 1000, 1, &v) != 0)
                return lb_usage_error("--runs wants a number from 1 to 1000, not '%s'", optarg);
            runs = (int)v;
            break;
        case O_CHUNK:
            if (lb_usage_number(optarg, 1, 1e7, 1, &v) != 0)
                return lb_usage_error("--chunk wants a number from 1 to 10000000, not '%s'",
                                      optarg);
            chunk = (size_t)v;
            break;
        case O_DURATION:
            if (lb_usage_number(optarg, 0.001, 86400, 0, &duration) != 0)
                return lb_usage_error("--duration wants seconds, more than 0, not '%s'", optarg);
            break;
        case O_PROBE_RATE:
            if (lb_usage_number(optarg, 0.001, 1e6, 0, &probe_rate) != 0)
                return lb_usage_error("--probe-rate wants probes per second, more than 0, not '%s'",
                                      optarg);
            break;
        case O_BOARD:
            board = optarg;
            break;
        case O_TOPIC:
            topic = optarg;
            break;
        case O_PROBES:
            probes_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return lb_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return optopt && strncmp(argv[optind - 1], "--", 2) != 0
                       ? lb_usage_error("unknown option '-%c'", optopt)
                       : lb_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc)
        return lb_usage_error("unexpected argument '%s'", argv[optind]);
    if (!path)
        return lb_usage_error("--config FILE is required");
    if (strcmp(command, "freshness") == 0 && !topic)
        return lb_usage_error("freshness needs --topic");
    lb_log_threshold = LB_LOG_ERROR;
    struct lb_config *config;
    char err[1024];
    if (lb_config_load(path, &config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 3;
    }
    int status = strcmp(command, "ceiling") == 0
                     ? run_ceiling(config, runs, chunk)
                     : run_freshness(config, topic, duration, probe_rate, board, probes_path);
    lb_config_free(config);
    return status;
}
