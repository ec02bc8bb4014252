/* Kafka clients, created in one place: the projector's consumer, the
 * dead-letter producer, replay's readers and the tools' clients all come
 * from lb_kafka_new, so they log the same way, read the kafka: section the
 * same way and report a bad property with the line that set it.
 *
 * A client is configured in three layers: the caller's defaults (which the
 * kafka: section may override), the section itself (brokers, then each
 * passthrough property; properties librdkafka documents as the other client
 * type's are left out, so session.timeout.ms never reaches a producer), then
 * the caller's fixed properties, which nothing overrides.
 */
#ifndef LB_KAFKA_H
#define LB_KAFKA_H

#include "error.h"

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

/* A property and the line of the configuration file that set it (0: not
 * from a file, e.g. a tool's -X). */
struct lb_kv {
    char *key;
    char *value;
    int line;
    char *source; /* the value as written, when it read ${ENV}; else NULL */
};

/* What the kafka: section says, as every client reads it. */
struct lb_kafka_options {
    const char *path;    /* where the properties were set, for "file:line:"; NULL: nowhere */
    const char *brokers; /* bootstrap.servers, or NULL */
    const struct lb_kv *props;
    size_t nprops;
};

/* The client a caller asks for. */
struct lb_kafka_client {
    rd_kafka_type_t type;
    const char *const (*defaults)[2]; /* before the kafka: section */
    size_t ndefaults;
    const char *const (*fixed)[2]; /* after it */
    size_t nfixed;
    /* callbacks and opaque, on the finished configuration; NULL: none */
    void (*setup)(rd_kafka_conf_t *conf, void *ctx);
    void *ctx;
};

/* Creates the client. On failure returns NULL with one line in 'err'
 * ("file:line: kafka property K: why" for a property librdkafka refuses)
 * and its class in '*class' (may be NULL). */
rd_kafka_t *lb_kafka_new(const struct lb_kafka_options *options,
                         const struct lb_kafka_client *client, char *err, size_t errlen,
                         enum lb_error_class *class);

/* A consumer that reads assigned partitions and never commits, stores or
 * resets an offset on its own ('group' names it to the brokers): replay's
 * readers, the benchmark's. NULL with a message on failure. */
rd_kafka_t *lb_kafka_reader(const struct lb_kafka_options *options, const char *group, char *err,
                            size_t errlen);

/* Applies the layers above to 'conf' (exposed for tests). Returns 0, or -1
 * with a message. */
int lb_kafka_conf_apply(const struct lb_kafka_options *options,
                        const struct lb_kafka_client *client, rd_kafka_conf_t *conf, char *err,
                        size_t errlen);

/* Splits a tool's "-X key=value" in place into 'kv' (pointing into 'arg'):
 * 0, or -1 when it is not key=value. */
int lb_kafka_property_arg(char *arg, struct lb_kv *kv);

/* 'C' (consumers), 'P' (producers), '*' (both) or 0 (not a librdkafka
 * property), per librdkafka's own property table; '?' when that table
 * could not be read (out of memory). */
char lb_kafka_property_scope(const char *name);

/* Checks the kafka: section without making a client: every property is
 * librdkafka's and takes its value, producer-only ones only where there is
 * a producer ('producer' non-zero: the dead-letter one), and none lets
 * librdkafka commit, store offsets or rebalance cooperatively. A
 * <property>_file is read. Returns 0, or -1 with "file:line: why". */
int lb_kafka_check(const struct lb_kafka_options *options, int producer, char *err, size_t errlen);

/* Non-zero for a property whose value is a secret (never printed). */
int lb_kafka_property_secret(const char *name);

/* Non-zero: librdkafka's errors and warnings are logged at info level, for
 * tools that report failures themselves in one line. */
extern int lb_kafka_log_quiet;

/* After a request to 'rk' failed: the reason of the last authentication or
 * TLS failure its error events reported (a wrong SASL password, a refused
 * certificate), copied into 'buf'; NULL when there was none. */
const char *lb_kafka_auth_trouble(rd_kafka_t *rk, char *buf, size_t len);

/* Whether an error is about reaching the brokers (said once, by the
 * consumer's broker state, rather than at every attempt). */
int lb_kafka_is_transport_error(rd_kafka_resp_err_t err);

/* A commit's metadata carries the partition's event-time watermark
 * (offsets.h) as "wm=<ms>". Returns its length (without the NUL). */
size_t lb_watermark_format(char *out, size_t cap, int64_t watermark);
/* The watermark a commit's metadata carries, or -1 (none, or not ours). */
int64_t lb_watermark_parse(const void *metadata, size_t len);

/* Where a consumer group stands on one partition. */
struct lb_partition_offsets {
    int64_t committed; /* -1: nothing committed */
    int64_t low, high; /* the partition's watermarks */
    int64_t watermark; /* the event-time watermark the commit carries; -1: none */
};

/* The topic's max.message.bytes as the brokers describe it, within
 * 'timeout_ms': 0 with '*bytes'; 1 when the topic does not exist; -1 with
 * one line in 'err' (no answer, a refusal). */
int lb_kafka_topic_max_bytes(rd_kafka_t *rk, const char *topic, int timeout_ms, int64_t *bytes,
                             char *err, size_t errlen);

/* Reads, for every partition of 'topic', what the group of 'rk' (its
 * group.id) committed and the partition's watermarks, each call within
 * 'timeout_ms'. Returns the partition count, with the array (the caller
 * frees it) in '*out'; -1 with what failed in '*err' (a missing topic:
 * RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) and '*what'. */
int lb_kafka_group_offsets(rd_kafka_t *rk, const char *topic, int timeout_ms,
                           struct lb_partition_offsets **out, rd_kafka_resp_err_t *err,
                           const char **what);

#endif
