/* Which offsets replay reads: per partition, from --from (default: the
 * oldest retained) to --to (default: the end at start), with the live
 * group's committed offsets for the plan it prints. */
#include "replay.h"

static void group_digits(int64_t v, char *out, size_t cap)
{
    char digits[32];
    int n = snprintf(digits, sizeof(digits), "%lld", (long long)(v < 0 ? -v : v));
    size_t o = 0;
    if (v < 0 && o + 1 < cap)
        out[o++] = '-';
    for (int i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
}

/* Resolves "earliest", "latest", "committed", an RFC 3339 time or an offset
 * for one partition; -1 with a message on failure. */
int64_t replay_resolve(rd_kafka_t *rk, const struct part *p, const char *spec, int is_from,
                       char *err, size_t errlen)
{
    int64_t ms;
    char *end;
    if (strcmp(spec, "earliest") == 0)
        return p->low;
    if (strcmp(spec, "latest") == 0)
        return p->high;
    if (strcmp(spec, "committed") == 0) {
        if (p->committed < 0)
            return is_from ? p->low : p->high;
        return p->committed;
    }
    long long offset = strtoll(spec, &end, 10);
    if (*end == '\0' && end != spec)
        return offset < 0 ? 0 : offset > p->high ? p->high : offset;
    if (lb_time_parse(spec, &ms) != 0) {
        snprintf(err, errlen,
                 "'%s' is not earliest, latest, committed, an offset or an RFC 3339 time", spec);
        return -1;
    }
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, p->topic, p->partition)->offset = ms;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, list, KAFKA_TIMEOUT_MS);
    int64_t result = list->elems[0].offset;
    if (!e)
        e = list->elems[0].err;
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
        snprintf(err, errlen, "offsets for time %s on %s [%d]: %s", spec, p->topic, p->partition,
                 rd_kafka_err2str(e));
        return -1;
    }
    return result < 0 ? p->high : result; /* -1: no event at or after the time */
}

int replay_make_plan(rd_kafka_t *meta, const struct lb_config *config, const struct options *o,
                     struct plan *plan)
{
    char err[512];
    for (size_t t = 0; t < config->ntopics; t++) {
        rd_kafka_topic_t *topic = rd_kafka_topic_new(meta, config->topics[t], NULL);
        const struct rd_kafka_metadata *md;
        rd_kafka_resp_err_t e = rd_kafka_metadata(meta, 0, topic, &md, KAFKA_TIMEOUT_MS);
        rd_kafka_topic_destroy(topic);
        if (e || md->topic_cnt != 1 || md->topics[0].err) {
            const char *why = lb_kafka_auth_trouble(meta, err, sizeof(err));
            fprintf(stderr,
                    "replay: cannot read the partitions of topic %s from Kafka (%s) within "
                    "%d s: %s\n",
                    config->topics[t], config->brokers, KAFKA_TIMEOUT_MS / 1000,
                    why ? why
                        : rd_kafka_err2str(e               ? e
                                           : md->topic_cnt ? md->topics[0].err
                                                           : e));
            if (!e)
                rd_kafka_metadata_destroy(md);
            return -1;
        }
        int n = md->topics[0].partition_cnt;
        struct part *grown = realloc(plan->parts, (plan->count + (size_t)n) * sizeof(*grown));
        if (!grown && plan->count + (size_t)n > 0) {
            fprintf(stderr, "replay: out of memory planning %d partition(s) of topic %s\n", n,
                    config->topics[t]);
            rd_kafka_metadata_destroy(md);
            return -1;
        }
        plan->parts = grown;
        for (int i = 0; i < n; i++) {
            struct part *p = &plan->parts[plan->count++];
            memset(p, 0, sizeof(*p));
            p->topic = config->topics[t];
            p->partition = md->topics[0].partitions[i].id;
            lb_marker_field(p->topic, p->partition, p->field, sizeof(p->field));
        }
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new((int)plan->count ? (int)plan->count : 1);
    for (size_t i = 0; i < plan->count; i++) {
        struct part *p = &plan->parts[i];
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(
            meta, p->topic, p->partition, &p->low, &p->high, KAFKA_TIMEOUT_MS);
        if (e) {
            fprintf(stderr, "replay: watermarks of %s [%d]: %s\n", p->topic, p->partition,
                    rd_kafka_err2str(e));
            rd_kafka_topic_partition_list_destroy(list);
            return -1;
        }
        rd_kafka_topic_partition_list_add(list, p->topic, p->partition);
    }
    rd_kafka_resp_err_t e = rd_kafka_committed(meta, list, KAFKA_TIMEOUT_MS);
    if (e) {
        fprintf(stderr, "replay: committed offsets of group %s: %s\n", config->group,
                rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(list);
        return -1;
    }
    for (size_t i = 0; i < plan->count; i++) {
        struct part *p = &plan->parts[i];
        p->committed = list->elems[i].err ? -1 : list->elems[i].offset;
        if (p->committed < 0)
            p->committed = -1;
        p->from = replay_resolve(meta, p, o->from, 1, err, sizeof(err));
        p->end = p->from < 0 ? -1 : replay_resolve(meta, p, o->to, 0, err, sizeof(err));
        if (p->from < 0 || p->end < 0) {
            fprintf(stderr, "replay: %s\n", err);
            rd_kafka_topic_partition_list_destroy(list);
            return -1;
        }
        if (p->end < p->from)
            p->end = p->from;
        /* Asked for events Kafka no longer has: a retention gap. */
        p->gap = p->low > 0 && p->from <= p->low && p->end > p->from;
        if (p->from < p->low)
            p->from = p->low;
        p->read_to = p->from;
    }
    rd_kafka_topic_partition_list_destroy(list);
    return 0;
}

int replay_print_plan(const struct plan *plan, const struct options *o, const char *group)
{
    int64_t total = 0;
    int gaps = 0;
    char a[32], b[32], n[32];
    printf("replay plan: --from %s --to %s (live group '%s')\n", o->from, o->to, group);
    for (size_t i = 0; i < plan->count; i++) {
        const struct part *p = &plan->parts[i];
        group_digits(p->from, a, sizeof(a));
        group_digits(p->end, b, sizeof(b));
        group_digits(p->end - p->from, n, sizeof(n));
        printf("  %s [%d]: offsets %s..%s, %s events to read\n", p->topic, p->partition, a, b, n);
        total += p->end - p->from;
        if (p->gap) {
            group_digits(p->low, a, sizeof(a));
            printf("  %s [%d]: events before offset %s were deleted by retention; boards in the "
                   "selection may be incomplete\n",
                   p->topic, p->partition, a);
            gaps++;
        }
    }
    group_digits(total, n, sizeof(n));
    printf("  total: %s events from %zu partition(s)%s\n", n, plan->count,
           gaps ? ", with a retention gap" : "");
    fflush(stdout);
    return gaps;
}
