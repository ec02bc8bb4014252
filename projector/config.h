/* The projector's configuration: one YAML file, validated whole at start.
 *
 * Every key is described once in a table in config.c (name, type, default,
 * documentation); the same table drives parsing, rejects unknown keys and
 * prints the effective configuration. Errors are reported as
 * "file:line: what is wrong and what to do". Scalars may use ${ENV_VAR}.
 *
 * A loaded lb_config is immutable and owned by the caller; free it with
 * lb_config_free.
 */
#ifndef LB_CONFIG_H
#define LB_CONFIG_H

#include "cluster.h"
#include "consumer.h"
#include "decay.h"
#include "error.h"

#include "event.h"
#include "kafka.h"
#include "score.h"
#include "window.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum lb_aggregation { LB_AGG_BEST = 0, LB_AGG_LATEST, LB_AGG_SUM };

/* Longest key prefix and custom window dim name: with 128-byte ids, every
 * key stays well under 1 KiB. */
#define LB_NAME_MAX 64

/* The longest window ttl a configuration may give: 10 years. Longer ones
 * would overflow the expiry arithmetic (Redis refuses them). */
#define LB_TTL_MAX_MS (3650 * INT64_C(86400000))

/* The longest dedupe window: a year (the state it keeps grows with it). */
#define LB_DEDUPE_MAX_MS     (366 * INT64_C(86400000))
#define LB_DEDUPE_DEFAULT_MS (24 * INT64_C(3600000))

struct lb_window_config {
    enum lb_window_kind kind;
    int64_t ttl_ms; /* time windows: kept this long after the window closes; 0 = no expiry */
    char *dim;      /* LB_WINDOW_CUSTOM: the dims key whose value names the window */
    /* results: final standings published once the window closed (results.h;
     * daily, weekly and monthly only): its first 'results_top' entries (0:
     * all; -1: no results), closed 'results_grace_ms' after its end */
    int64_t results_top;
    int64_t results_grace_ms;
    int results_line;
};

#define LB_RESULTS_TOP_MAX 100000 /* results.top */

struct lb_profile;
/* Whether a window of the profile publishes final standings. */
int lb_profile_has_results(const struct lb_profile *profile);

/* decay: a decaying board (decay.h). Each event also updates an overall
 * board of after-tax scores across the patches that one custom window's dim
 * names; see README "Decaying boards". */
struct lb_decay_config {
    char *dim;       /* the custom window whose dim names the patch */
    char *tax;       /* as written: a decimal of at most four places */
    int stacking;    /* enum lb_decay_stacking */
    int64_t max_age; /* patches behind after which the tax stops growing */
    char *precision; /* as written: 1, 0.1, 0.01, 0.001 or 0.0001 */
    char *key;       /* the overall board: <prefix>{B}:<key> */
    char **patches;  /* the patches in order, oldest first; none: version order */
    size_t npatches;
    struct lb_decay rule; /* the above, parsed (desc from the profile's order) */
    uint32_t window;      /* the dim's window: its index in the profile's windows */
    int line;
};

#define LB_DECAY_MAX_AGE 64   /* the request carries a taxed score per age up to max_age */
#define LB_DECAY_PATCHES 1000 /* the longest decay.patches list */

/* A patch's place in decay.patches (0 oldest), or -1 when the list does
 * not name it (or there is no list). */
int lb_decay_patch_index(const struct lb_decay_config *decay, const char *name, size_t len);

struct lb_profile {
    char *name;
    char **match; /* shell-style patterns (fnmatch) on the board id */
    size_t nmatch;
    enum lb_aggregation aggregation;
    int reject_retractions;    /* retractions: reject (dead-lettered) */
    struct lb_scoring scoring; /* score_min/score_max bound each event's score */
    int64_t sum_min;           /* sum boards: the range a player's total may take */
    int64_t sum_max;
    /* Each event counts once, by (board, event_id), among the events whose
     * ts lies within this much of the board's latest applied ts; 0: off.
     * Default: 24h for sum boards and boards that take retractions. */
    int64_t dedupe_window_ms;
    struct lb_window_config *windows;
    size_t nwindows;
    struct lb_decay_config *decay; /* NULL: not a decaying board */
    /* split: a hot board over 'shards' hash tags by player (1: not split),
     * with a merged top of 'top' entries per window refreshed within
     * 'staleness' of a change (apply.h: lb_shard_tag, lb_top_key). */
    int64_t shards;
    int64_t top;
    int64_t staleness_ms;
    int split_line;
    int line;
};

#define LB_SHARDS_MAX 64    /* split.shards */
#define LB_TOP_MAX    10000 /* split.top */

struct lb_schema_ref {
    int32_t id;
    char *path; /* resolved against the configuration file's directory */
    int line;
};

struct lb_config {
    char *path;

    /* kafka: */
    char *brokers;
    char *group;
    char **topics;
    size_t ntopics;
    struct lb_kv *kafka_props; /* librdkafka properties passed through verbatim */
    size_t nkafka_props;
    int64_t commit_interval_ms;
    char *dlq_topic; /* NULL: rejected events are logged and skipped */
    int kafka_line;

    /* results: where final standings go (windows' results:) */
    char *results_topic;       /* NULL: no window has results */
    int64_t results_schema_id; /* the Confluent frame's id of leaderboard.v1.WindowResult */
    int64_t results_idle_ms;   /* a caught-up partition this far behind holds no close back */
    int64_t results_lease_ms;  /* a publisher's lease: claim to done */
    int results_keep;          /* keep <prefix>{B}:final:<window> after publishing */
    int results_line;          /* 0: no results: section */

    /* input: */
    int input_line;        /* 0: no input: section */
    int wire_format;       /* enum lb_wire_format */
    int64_t max_future_ms; /* input.max_future; 0: no bound */
    struct lb_schema_ref *schemas;
    size_t nschemas;
    /* input.registry: (registry_url NULL: none) */
    char *registry_url;
    char *registry_user;
    char *registry_password;
    char *registry_password_source; /* as written, when it read ${ENV} */
    char *registry_password_file;
    char *registry_ca_file;
    int64_t registry_timeout_ms;
    int registry_line;

    /* redis: */
    struct lb_host *redis_nodes;
    size_t nredis_nodes;
    char *key_prefix;
    char *redis_user;
    char *redis_password;
    char *redis_password_source; /* as written, when it read ${ENV} */
    int redis_line;
    /* redis.tls: */
    int redis_tls_enabled;
    char *redis_tls_ca_file, *redis_tls_cert_file, *redis_tls_key_file;
    char *redis_tls_server_name;
    int redis_tls_verify;
    int redis_tls_line;
    struct lb_tls *redis_tls; /* its files loaded, when enabled */
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    int wait_replicas; /* -1: auto (one when the master has a healthy replica) */
    int64_t wait_timeout_ms;

    /* batch: */
    int64_t batch_max_events;
    int64_t batch_linger_ms;

    /* log: */
    int log_level;
    int log_json; /* 0 logfmt, 1 json */

    /* shutdown: */
    int64_t drain_timeout_ms;

    /* metrics: */
    char *metrics_listen; /* NULL: no HTTP server */

    struct lb_profile *profiles;
    size_t nprofiles;
};

/* Loads and validates 'path'. On success returns 0 and stores a new config in
 * '*out' (owned by the caller). On failure returns -1 and writes
 * "path:line: message" into 'err'. */
int lb_config_load(const char *path, struct lb_config **out, char *err, size_t errlen);
/* Same, for a program that never talks to Kafka (lbread): the kafka:
 * section's properties are not checked (nor their files read). */
#define LB_CONFIG_NO_KAFKA 1u
int lb_config_load_flags(const char *path, unsigned flags, struct lb_config **out, char *err,
                         size_t errlen);
/* Same, from a string; 'name' is used in error messages (NULL:
 * "<config>"); relative paths stay relative to the working directory. */
int lb_config_load_string(const char *name, const char *text, size_t len, struct lb_config **out,
                          char *err, size_t errlen);
/* Accepts NULL. */
void lb_config_free(struct lb_config *config);

/* The kafka: section, as lb_kafka_new reads it (points into .config.). */
struct lb_kafka_options lb_config_kafka(const struct lb_config *config);
/* The redis: section, for lb_cluster_new (it borrows from 'config'; no
 * script: the writer adds its own). */
struct lb_cluster_options lb_config_cluster(const struct lb_config *config);
/* The group consumer's options: the kafka: section, the group and topics. */
struct lb_consumer_options lb_config_consumer(const struct lb_config *config);

/* The profile for 'board': the first of 'profiles' whose patterns match,
 * or NULL; lb_config_profile_for looks among the configuration's. */
const struct lb_profile *lb_profile_for(const struct lb_profile *profiles, size_t nprofiles,
                                        const char *board, size_t len);
const struct lb_profile *lb_config_profile_for(const struct lb_config *config, const char *board,
                                               size_t len);
/* 1 when 'tag' is a shard of a split board (the first profile matching the
 * name before its last '#' splits it, and the tag is exactly that shard's
 * tag: slot.h), with the board and the shard; else 0, the board being
 * 'tag' itself. */
int lb_shard_parse(const struct lb_profile *profiles, size_t nprofiles, struct lb_str tag,
                   struct lb_str *board, uint32_t *shard);

/* Checks a window as the tools take it (--window) against the windows of
 * 'profiles': "alltime", "daily:2026-05-04", "weekly:2026-W18",
 * "monthly:2026-05" or "<dim>:<value>". 0, or -1 with a message naming the
 * windows 'owner' (e.g. "board 'g1'") has. */
int lb_config_check_window(const struct lb_profile *profiles, size_t nprofiles, const char *owner,
                           const char *window, char *err, size_t errlen);

/* Prints the effective configuration as YAML: see config.c. */
void lb_config_print(const struct lb_config *config, FILE *out);

/* Builds a decoder from the input: section (reads the schema files). Returns
 * NULL with "path:line: message" in 'err' on failure, and in '*class' (may
 * be NULL) LB_ERROR_CONFIG, or LB_ERROR_RUNTIME when out of memory. */
struct lb_decoder *lb_config_decoder(const struct lb_config *config, char *err, size_t errlen,
                                     enum lb_error_class *class);

/* Parses "500ms", "2s", "5m", "1h", "7d", "2w" into milliseconds; -1 when
 * malformed. */
int64_t lb_duration_parse(const char *text);
/* Parses an RFC 3339 UTC time ("2026-05-04T10:00:00Z", "2026-05-04T10:00:00.5Z",
 * "2026-05-04T12:00:00+02:00") or a bare date; returns 0 and the time in
 * milliseconds since the epoch, or -1. */
int lb_time_parse(const char *text, int64_t *ms);

#endif
