/* Configuration: defaults, and every kind of error reported as file:line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "consumer.h"
#include "engine.h"
#include "oom.h"

static const char minimal[] = "kafka:\n"
                              "  brokers: 127.0.0.1:9092\n"
                              "  topics: [scores]\n"
                              "input:\n"
                              "  schemas:\n"
                              "    1: score_event.avsc\n"
                              "redis:\n"
                              "  nodes: [127.0.0.1:7000, \"[::1]:7001\"]\n";

static struct lb_config *load_ok(const char *text)
{
    struct lb_config *config = NULL;
    char err[1024];
    if (lb_config_load_string("test.yaml", text, strlen(text), &config, err, sizeof(err)) != 0)
        fail_msg("unexpected error: %s", err);
    return config;
}

/* Loads 'text', expects failure, and checks the message starts with
 * "test.yaml:<line>:" and contains 'needle'. */
static void expect_error(const char *text, int line, const char *needle)
{
    struct lb_config *config = NULL;
    char err[1024], prefix[64];
    assert_int_equal(
        lb_config_load_string("test.yaml", text, strlen(text), &config, err, sizeof(err)), -1);
    assert_null(config);
    snprintf(prefix, sizeof(prefix), "test.yaml:%d: ", line);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, needle))
        fail_msg("expected \"%s...%s\", got \"%s\"", prefix, needle, err);
}

static void minimal_config_gets_documented_defaults(void **state)
{
    (void)state;
    struct lb_config *c = load_ok(minimal);
    assert_string_equal(c->group, "leaderboard-projector");
    assert_string_equal(c->key_prefix, "lb:");
    assert_int_equal(c->batch_max_events, 5000);
    assert_int_equal(c->batch_linger_ms, 20);
    assert_int_equal(c->nredis_nodes, 2);
    assert_string_equal(c->redis_nodes[1].host, "::1");
    assert_int_equal(c->redis_nodes[1].port, 7001);
    assert_int_equal(c->wait_replicas, -1); /* auto */
    assert_int_equal(c->wait_timeout_ms, 1000);
    assert_int_equal(c->nschemas, 1);
    assert_string_equal(c->schemas[0].path, "score_event.avsc");
    /* one catch-all profile with four windows */
    assert_int_equal(c->nprofiles, 1);
    const struct lb_profile *p = lb_config_profile_for(c, "anything", 8);
    assert_non_null(p);
    assert_int_equal(p->nwindows, 4);
    assert_int_equal(p->scoring.tie_bits, 30);
    assert_int_equal(p->windows[1].kind, LB_WINDOW_DAILY);
    assert_true(p->windows[1].ttl_ms == 7 * INT64_C(86400000));
    lb_config_free(c);
}

static void profiles_match_by_pattern_in_order(void **state)
{
    (void)state;
    char text[2048];
    snprintf(text, sizeof(text),
             "%sprofiles:\n"
             "  - name: speed\n"
             "    match: [\"speed:*\", \"race-?\"]\n"
             "    order: asc\n"
             "    tie_resolution: ms\n"
             "    epoch: 2026-01-01T00:00:00Z\n"
             "    horizon: 2026-02-01T00:00:00+01:00\n"
             "    score_max: 1000000\n"
             "    windows:\n"
             "      alltime: {}\n"
             "      daily: 2d\n"
             "      custom:\n"
             "        - {dim: patch, ttl: 90d}\n"
             "  - name: rest\n",
             minimal);
    struct lb_config *c = load_ok(text);
    const struct lb_profile *p = lb_config_profile_for(c, "speed:1", 7);
    assert_string_equal(p->name, "speed");
    assert_string_equal(lb_config_profile_for(c, "race-7", 6)->name, "speed");
    assert_string_equal(lb_config_profile_for(c, "race-77", 7)->name, "rest");
    assert_int_equal(p->scoring.order, LB_ORDER_ASC);
    assert_true(p->scoring.resolution_ms == 1);
    /* +01:00 is an hour earlier in UTC */
    assert_true(p->scoring.horizon_ms - p->scoring.epoch_ms == 31 * INT64_C(86400000) - 3600000);
    assert_int_equal(p->nwindows, 3);
    assert_int_equal(p->windows[2].kind, LB_WINDOW_CUSTOM);
    assert_string_equal(p->windows[2].dim, "patch");
    lb_config_free(c);
}

static void errors_name_file_and_line(void **state)
{
    (void)state;
    char text[2048];

    expect_error("kafka:\n  brokers: x\n  topics: [t]\n  bogus: 1\n", 4, "unknown key 'bogus'");
    expect_error("kafka: [1, 2]\n", 1, "expected a mapping");
    expect_error("kafka:\n  topics: [t]\nredis:\n  nodes: [a:1]\n", 1,
                 "kafka: 'brokers' is required");
    expect_error("kafka:\n  brokers: b\n  topics: [t]\n", 1, "'redis' is required");

    snprintf(text, sizeof(text), "%sbatch:\n  max_events: lots\n", minimal);
    expect_error(text, 10, "not an integer");
    snprintf(text, sizeof(text), "%sbatch:\n  max_events: 0\n", minimal);
    expect_error(text, 10, "out of range");
    snprintf(text, sizeof(text), "%sbatch:\n  linger: 20\n", minimal);
    expect_error(text, 10, "not a duration");
    snprintf(text, sizeof(text), "%slog:\n  level: loud\n", minimal);
    expect_error(text, 10, "not one of: error, warn, info, debug");
    expect_error("kafka:\n  brokers: b\n  topics: [t]\nredis:\n  nodes: [nowhere]\n", 5,
                 "not host:port");
    expect_error("kafka:\n  brokers: b\n   topics: [t]\n", 3, "YAML syntax error");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: big\n    score_max: 100000000000\n",
             minimal);
    expect_error(text, 10, "profile 'big'");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: a\n  - name: b\n", minimal);
    expect_error(text, 11, "can never match");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: a\n    windows:\n      hourly: {}\n",
             minimal);
    expect_error(text, 12, "unknown window 'hourly'");
    snprintf(text, sizeof(text),
             "%sprofiles:\n  - name: a\n    windows:\n      custom:\n        - {ttl: 1d}\n",
             minimal);
    expect_error(text, 13, "need 'dim'");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: a\n    epoch: yesterday\n", minimal);
    expect_error(text, 11, "RFC 3339");
    expect_error("kafka:\n  brokers: b\n  topics: [t]\ninput:\n  format: bare\n"
                 "redis:\n  nodes: [a:1]\n",
                 4, "input: bare input needs exactly one 'writer_schema'"); /* at input: */
    expect_error("kafka:\n  brokers: b\n  topics: [t]\n  topics: [u]\n", 4, "set twice");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: a\n    windows:\n      custom: [30d]\n",
             minimal);
    expect_error(text, 12, "need 'dim'");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: a\n    epoch: 2025-02-31\n", minimal);
    expect_error(text, 11, "RFC 3339");
    snprintf(text, sizeof(text), "%s  wait_replicas: some\n", minimal);
    expect_error(text, 9, "auto or a number");
    snprintf(text, sizeof(text), "%s  key_prefix: \"%0100d\"\n", minimal, 0);
    expect_error(text, 7, "redis.key_prefix must be at most 64 bytes");
}

static void sum_boards_budget_their_totals(void **state)
{
    (void)state;
    char text[2048];
    /* T = 30 (1 s ticks over 32 years): totals up to 2^23 - 1 by default */
    snprintf(text, sizeof(text), "%sprofiles:\n  - {name: xp, aggregation: sum}\n", minimal);
    struct lb_config *c = load_ok(text);
    assert_int_equal(c->profiles[0].aggregation, LB_AGG_SUM);
    assert_int_equal(c->profiles[0].sum_min, 0);
    assert_int_equal(c->profiles[0].sum_max, (INT64_C(1) << 23) - 1);
    lb_config_free(c);
    /* one step below the limit works, one above is refused with the knobs */
    snprintf(text, sizeof(text), "%sprofiles:\n  - {name: xp, aggregation: sum, sum_max: %lld}\n",
             minimal, (long long)(INT64_C(1) << 23) - 1);
    lb_config_free(load_ok(text));
    snprintf(text, sizeof(text), "%sprofiles:\n  - {name: xp, aggregation: sum, sum_max: %lld}\n",
             minimal, (long long)(INT64_C(1) << 23));
    expect_error(text, 10, "narrow sum_min/sum_max");
    /* without a tie-break the total itself may use all 53 bits */
    snprintf(text, sizeof(text),
             "%sprofiles:\n  - {name: xp, aggregation: sum, tie_break: none, sum_max: %lld}\n",
             minimal, (long long)(INT64_C(1) << 53));
    lb_config_free(load_ok(text));
    snprintf(text, sizeof(text),
             "%sprofiles:\n  - {name: xp, aggregation: sum, tie_break: none, sum_max: %lld}\n",
             minimal, (long long)(INT64_C(1) << 53) + 1);
    expect_error(text, 10, "sum range [0, 9007199254740993]");
    snprintf(text, sizeof(text), "%sprofiles:\n  - {name: xp, aggregation: most}\n", minimal);
    expect_error(text, 10, "not one of: best, latest, sum");
}

/* Dedupe: on (24 h) by default where a retry would count twice (sum boards,
 * boards that take retractions), off for best boards without retractions;
 * a window or off may be set on any profile. */
/* A decaying profile: "%s" is the decay mapping's extra keys, 'rest' more
 * profile keys. */
static void decay_profile(char *text, size_t cap, const char *rest, const char *decay)
{
    snprintf(text, cap,
             "%sprofiles:\n"
             "  - name: runs\n"
             "    order: asc\n"
             "    score_max: 10000\n"
             "%s"
             "    windows: {alltime: {}, custom: [{dim: patch}, {dim: mode, ttl: 1d}]}\n"
             "    decay: {%s}\n",
             minimal, rest, decay);
}

static void decay_profiles_are_checked_at_load(void **state)
{
    (void)state;
    char text[2048];
    decay_profile(text, sizeof(text), "    retractions: reject\n",
                  "dim: patch, tax: 0.125, stacking: compound, max_age: 3, precision: 0.1");
    struct lb_config *c = load_ok(text);
    const struct lb_decay_config *d = c->profiles[0].decay;
    assert_non_null(d);
    assert_int_equal(d->rule.tax, 1250);
    assert_int_equal(d->rule.stacking, LB_DECAY_COMPOUND);
    assert_int_equal(d->rule.max_age, 3);
    assert_int_equal(d->rule.scale, 10);
    assert_false(d->rule.desc);
    assert_int_equal(d->window, 1);
    assert_string_equal(d->key, "decayed");
    lb_config_free(c);
    decay_profile(text, sizeof(text), "    retractions: reject\n", "dim: patch, tax: 0.1");
    c = load_ok(text);
    assert_int_equal(c->profiles[0].decay->rule.stacking, LB_DECAY_LINEAR);
    assert_int_equal(c->profiles[0].decay->rule.max_age, 10);
    assert_int_equal(c->profiles[0].decay->rule.scale, 100);
    assert_int_equal(c->profiles[0].decay->npatches, 0); /* version order */
    lb_config_free(c);
    decay_profile(text, sizeof(text), "    retractions: reject\n",
                  "dim: patch, tax: 0.1, patches: [\"1.8\", \"1.9\", \"1.10\"]");
    c = load_ok(text);
    assert_int_equal(c->profiles[0].decay->npatches, 3);
    assert_int_equal(lb_decay_patch_index(c->profiles[0].decay, "1.10", 4), 2);
    assert_int_equal(lb_decay_patch_index(c->profiles[0].decay, "2.0", 3), -1);
    lb_config_free(c);

    static const struct {
        const char *rest, *decay;
        int line;
        const char *error;
    } bad[] = {
        {"", "dim: patch, tax: 0.1", 14, "retractions: reject"},
        {"    retractions: reject\n    aggregation: sum\n", "dim: patch, tax: 0.1", 16,
         "aggregation: best"},
        {"    retractions: reject\n", "dim: level, tax: 0.1", 15,
         "not the dim of one of the profile's custom windows"},
        {"    retractions: reject\n", "dim: mode, tax: 0.1", 15, "remove the ttl"},
        {"    retractions: reject\n", "dim: patch, tax: 0.12345", 15, "at most 4 places"},
        {"    retractions: reject\n", "dim: patch, tax: -1", 15, "decay.tax"},
        {"    retractions: reject\n", "dim: patch, tax: 0.1, precision: 0.05", 15,
         "decay.precision"},
        {"    retractions: reject\n", "dim: patch, tax: 0.1, max_age: 65", 15, "out of range"},
        {"    retractions: reject\n", "dim: patch, tax: 0.1, key: mode", 15, "decay.key"},
        {"    retractions: reject\n", "dim: patch, tax: 0.1, key: daily", 15, "decay.key"},
        {"    retractions: reject\n", "tax: 0.1", 15, "'dim' is required"},
        {"    retractions: reject\n", "dim: patch, tax: 0.1, patches: [\"1.0\", \"1.1\", \"1.0\"]",
         15, "decay.patches: \"1.0\" is listed twice"},
        /* the overall board's budget: score_max 10000 in hundredths fits the
         * 2^23 that ties of 30 bits leave; doubled 20 times it does not */
        {"    retractions: reject\n", "dim: patch, tax: 1, max_age: 20, stacking: compound", 15,
         "coarsen decay.precision"},
        /* split boards */
        {"    retractions: reject\n    split: {shards: 3}\n", "dim: patch, tax: 0.1", 14,
         "a split board cannot decay"},
        {"    split: {shards: 65}\n", "dim: patch, tax: 0.1", 13, "out of range"},
        {"    split: {shards: 2, top: 0}\n", "dim: patch, tax: 0.1", 13, "out of range"},
        {"    split: {shards: 2, staleness: 10ms}\n", "dim: patch, tax: 0.1", 13, "out of range"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        decay_profile(text, sizeof(text), bad[i].rest, bad[i].decay);
        expect_error(text, bad[i].line, bad[i].error);
    }
}

static void dedupe_defaults_and_errors(void **state)
{
    (void)state;
    char text[2048];
    snprintf(text, sizeof(text),
             "%sprofiles:\n"
             "  - {name: xp, match: \"xp*\", aggregation: sum, retractions: reject}\n"
             "  - {name: fixed, match: \"f*\", retractions: reject}\n"
             "  - {name: short, match: \"s*\", retractions: reject, dedupe: {window: 90s}}\n"
             "  - {name: none, match: \"n*\", aggregation: latest, dedupe: off}\n"
             "  - {name: default}\n",
             minimal);
    struct lb_config *c = load_ok(text);
    static const int64_t windows[] = {86400000, 0, 90000, 0, 86400000};
    assert_int_equal(c->nprofiles, 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(c->profiles[i].dedupe_window_ms, windows[i]);
    lb_config_free(c);
    snprintf(text, sizeof(text), "%sprofiles:\n  - {name: xp, dedupe: yes}\n", minimal);
    expect_error(text, 10, "dedupe: expected {window: DURATION} (e.g. 24h) or off");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: xp\n    dedupe: {window: 0s}\n", minimal);
    expect_error(text, 11, "out of range");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: xp\n    dedupe: {}\n", minimal);
    expect_error(text, 11, "'window' is required");
    snprintf(text, sizeof(text), "%sprofiles:\n  - name: xp\n    dedupe: {window: 1h, ttl: 1h}\n",
             minimal);
    expect_error(text, 11, "unknown key 'ttl'");
}

/* results: per window kind, daily, weekly and monthly only, with the
 * top-level section saying where they go */
static void results_settings_and_errors(void **state)
{
    (void)state;
    char text[2048];
    snprintf(text, sizeof(text),
             "%sresults: {topic: scores-results, schema_id: 12}\n"
             "profiles:\n"
             "  - name: xp\n"
             "    windows:\n"
             "      daily: {ttl: 2d, results: {top: 100, grace: 30m}}\n"
             "      weekly: {results: {top: all}}\n"
             "      monthly: {}\n",
             minimal);
    struct lb_config *c = load_ok(text);
    assert_string_equal(c->results_topic, "scores-results");
    assert_int_equal(c->results_schema_id, 12);
    assert_int_equal(c->results_idle_ms, 300000);
    assert_int_equal(c->results_lease_ms, 30000);
    assert_int_equal(c->results_keep, 1);
    const struct lb_window_config *w = c->profiles[0].windows;
    assert_int_equal(w[0].results_top, 100);
    assert_int_equal(w[0].results_grace_ms, 1800000);
    assert_int_equal(w[1].results_top, 0); /* all */
    assert_int_equal(w[1].results_grace_ms, 3600000);
    assert_int_equal(w[2].results_top, -1);
    lb_config_free(c);
    static const struct {
        const char *windows, *section;
        int line;
        const char *needle;
    } bad[] = {
        {"{alltime: {results: {top: 10}}}", "results: {topic: r, schema_id: 1}", 12,
         "alltime windows never close"},
        {"{custom: [{dim: patch, results: {}}]}", "results: {topic: r, schema_id: 1}", 12,
         "custom windows never close"},
        {"{daily: {ttl: 1h, results: {grace: 2h}}}", "results: {topic: r, schema_id: 1}", 12,
         "expire 3600 s after the window ends, before it closes"},
        {"{daily: {results: {top: 0}}}", "results: {topic: r, schema_id: 1}", 12,
         "results.top: expected 1 to 100000 entries, or all, not '0'"},
        {"{daily: {results: {top: lots}}}", "results: {topic: r, schema_id: 1}", 12, "not 'lots'"},
        {"{daily: {results: 100}}", "results: {topic: r, schema_id: 1}", 12,
         "results: expected a mapping"},
        {"{daily: {results: {}}}", "", 11, "need the top-level 'results: {topic, schema_id}'"},
        {"{daily: {results: {}}}", "results: {topic: r}", 9, "results: 'schema_id' is required"},
        {"{daily: {results: {}}}", "results: {schema_id: 0}", 9, "out of range"},
        {"{daily: {results: {}}}", "results: {topic: r, schema_id: 1, lease: 500ms}", 9,
         "lease: 500ms is out of range"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "%s%s%sprofiles:\n  - name: xp\n    windows: %s\n", minimal,
                 bad[i].section, *bad[i].section ? "\n" : "", bad[i].windows);
        expect_error(text, bad[i].line, bad[i].needle);
    }
    snprintf(text, sizeof(text),
             "%sresults: {topic: r, schema_id: 1}\nprofiles:\n  - name: hot\n"
             "    split: {shards: 3}\n    windows: {daily: {results: {}}}\n",
             minimal);
    expect_error(text, 13, "final standings of split boards are not supported yet");
}

static void registry_settings_and_errors(void **state)
{
    (void)state;
    static const char head[] = "kafka:\n  brokers: localhost:9092\n  topics: [scores]\n"
                               "redis:\n  nodes: [127.0.0.1:7000]\n";
    char text[1024];
    /* a registry alone serves confluent input; the url keeps its base path */
    snprintf(text, sizeof(text),
             "%sinput:\n  registry:\n    url: https://reg.example:8443/apis/ccompat/v7\n"
             "    user: lb\n    password_file: secret/registry\n    ca_file: /etc/ca.pem\n",
             head);
    struct lb_config *c = load_ok(text);
    assert_string_equal(c->registry_url, "https://reg.example:8443/apis/ccompat/v7");
    assert_string_equal(c->registry_password_file, "secret/registry");
    assert_string_equal(c->registry_ca_file, "/etc/ca.pem");
    assert_int_equal(c->registry_timeout_ms, 5000);
    assert_int_equal(c->registry_line, 8);
    assert_int_equal(c->nschemas, 0);
    lb_config_free(c);

    /* the input: section after 'head' (7 lines), the line blamed, the words */
    static const struct {
        const char *input;
        int line;
        const char *needle;
    } bad[] = {
        {"  format: confluent\n", 6, "needs 'schemas' (schema id: file) or 'registry'"},
        {"  registry:\n    url: reg.example:8081\n", 8, "is not an http:// or https:// URL"},
        {"  registry:\n    url: http://r:1\n    user: lb\n", 8,
         "user needs password or password_file"},
        {"  registry:\n    url: http://r:1\n    user: lb\n    password: a\n    password_file: f\n",
         8, "password or password_file, not both"},
        {"  registry:\n    url: http://r:1\n    password: a\n", 8, "a password needs a user"},
        {"  registry:\n    user: lb\n", 8, "input.registry needs 'url'"},
        {"  format: bare\n  writer_schema: w.avsc\n  registry:\n    url: http://r:1\n", 10,
         "input.registry is for format: confluent"},
        {"  registry:\n    url: http://r:1\n    timeout: 10ms\n", 9, "out of range"},
        {"  registry:\n    url: https://lb:pw@r:1/x\n", 8, "url carries credentials"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "%sinput:\n%s", head, bad[i].input);
        expect_error(text, bad[i].line, bad[i].needle);
    }
}

/* redis.tls: the files are loaded at start, so that a wrong one stops it
 * with its line; settings without enabled: true are refused, not ignored. */
static void redis_tls_settings_and_errors(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof(text), "%s  tls:\n    enabled: true\n    verify: false\n", minimal);
    struct lb_config *c = load_ok(text);
    assert_int_equal(c->redis_tls_enabled, 1);
    assert_int_equal(c->redis_tls_verify, 0);
    assert_non_null(c->redis_tls);
    assert_ptr_equal(lb_config_cluster(c).tls, c->redis_tls);
    lb_config_free(c);
    c = load_ok(minimal);
    assert_null(c->redis_tls);
    assert_null(lb_config_cluster(c).tls);
    lb_config_free(c);

    /* after the minimal configuration (8 lines) and "  tls:": the line blamed (its
     * first key), the words */
    static const struct {
        const char *tls;
        int line;
        const char *needle;
    } bad[] = {
        {"  tls:\n    ca_file: /etc/ca.pem\n", 10,
         "redis.tls has settings but not 'enabled: true'"},
        {"  tls:\n    enabled: yes\n", 10, "enabled"},
        {"  tls:\n    enabled: true\n    server_name: \"\"\n", 11, "server_name is empty"},
        {"  tls:\n    enabled: true\n    cert_file: /c.pem\n", 10,
         "cert_file and key_file go together"},
        {"  tls:\n    enabled: true\n    ca_file: /nonexistent/ca.pem\n", 10,
         "redis.tls.ca_file /nonexistent/ca.pem: "},
        {"  tls:\n    enabled: true\n    cert_file: /nonexistent/c.pem\n    key_file: /k.pem\n", 10,
         "redis.tls.cert_file /nonexistent/c.pem: "},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", minimal, bad[i].tls);
        expect_error(text, bad[i].line, bad[i].needle);
    }
}

/* The operability settings, as files on disk: each invalid file is refused
 * with "<its path>:<line>: <what>". */
static void invalid_files_are_refused_with_their_path_and_line(void **state)
{
    (void)state;
    static const struct {
        const char *tail; /* appended to the minimal configuration (9 lines) */
        int line;
        const char *needle;
    } cases[] = {
        {"log:\n  format: xml\n", 10, "not one of: logfmt, json"},
        {"log:\n  level: chatty\n", 10, "not one of: error, warn, info, debug"},
        {"metrics:\n  listen: [1, 2]\n", 10, "listen: expected host:port"},
        {"metrics:\n  listen: 9464\n", 10, "listen: expected host:port"},
        {"metrics:\n  listen: localhost:9464\n", 10, "'localhost' is not an IPv4 address"},
        {"metrics:\n  listen: 0.0.0.0:99999\n", 10, "listen: expected host:port"},
        {"metrics:\n  port: 9464\n", 10, "unknown key 'port'"},
        {"shutdown:\n  drain_timeout: soon\n", 10, "not a duration"},
        {"shutdown:\n  drain_timeout: 2h\n", 10, "out of range"},
        {"shutdown:\n  grace: 1s\n", 10, "unknown key 'grace'"},
        {"bogus_section: {}\n", 9, "unknown key 'bogus_section'"},
        /* a ttl Redis could not take, or whose end + ttl would overflow */
        {"profiles:\n  - name: p\n    windows:\n      daily: {ttl: 3651d}\n", 12,
         "ttl: 3651d is out of range"},
        {"profiles:\n  - name: p\n    windows:\n      custom: [{dim: patch, ttl: 106751991167d}]\n",
         12, "out of range"},
    };
    char dir[] = "/tmp/lb-config-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[64], err[1024], prefix[96];
        snprintf(path, sizeof(path), "%s/case%zu.yaml", dir, i);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f, "%s%s", minimal, cases[i].tail);
        fclose(f);
        struct lb_config *config = NULL;
        assert_int_equal(lb_config_load(path, &config, err, sizeof(err)), -1);
        assert_null(config);
        snprintf(prefix, sizeof(prefix), "%s:%d: ", path, cases[i].line);
        if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, cases[i].needle))
            fail_msg("case %zu: expected \"%s...%s\", got \"%s\"", i, prefix, cases[i].needle, err);
        remove(path);
    }
    rmdir(dir);
}

/* What a start would refuse, the load refuses (so --check-config does):
 * properties that would let librdkafka commit, store offsets or rebalance
 * cooperatively, properties librdkafka does not know or whose value it
 * refuses, producer properties with no producer to take them; each at its
 * line, without any client made. */
static void kafka_properties_are_checked_at_load(void **state)
{
    (void)state;
    static const struct {
        const char *property, *needle;
    } bad[] = {
        {"enable.auto.commit: \"true\"", "enable.auto.commit must stay false"},
        {"enable.auto.offset.store: \"true\"", "enable.auto.offset.store must stay false"},
        {"partition.assignment.strategy: cooperative-sticky",
         "cooperative-sticky is not supported"},
        {"foo.bar: x", "'foo.bar' is not a librdkafka property"},
        {"session.timeout.ms: soon", "Invalid value"},
        {"linger.ms: 5", "kafka.dlq_topic is not set"},
        {"ssl.ca.location: /nonexistent/ca.pem",
         "ssl.ca.location: /nonexistent/ca.pem: No such file"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[1024];
        snprintf(text, sizeof(text),
                 "kafka:\n  brokers: 127.0.0.1:1\n  topics: [t]\n  %s\n"
                 "input: {schemas: {1: s.avsc}}\nredis: {nodes: [a:1]}\n",
                 bad[i].property);
        expect_error(text, 4, bad[i].needle);
    }
    /* the consumer refuses them too, when made from options of its own */
    char key[] = "enable.auto.commit", value[] = "true";
    struct lb_kv kv = {.key = key, .value = value, .line = 7};
    struct lb_consumer_options options = {.kafka = {.path = "x.yaml", .props = &kv, .nprops = 1},
                                          .group = "g"};
    char err[512];
    enum lb_error_class class = LB_ERROR_NONE;
    assert_null(lb_consumer_new(&options, NULL, NULL, err, sizeof(err), &class));
    if (!strstr(err, "x.yaml:7: kafka property enable.auto.commit must stay false"))
        fail_msg("unexpected error: %s", err);
    assert_int_equal(class, LB_ERROR_CONFIG);
}

/* A subscription librdkafka refuses without asking a broker (a topic
 * pattern that is not a regular expression) is the configuration's fault,
 * after the client was made. */
static void topics_librdkafka_cannot_subscribe_to_are_a_configuration_error(void **state)
{
    (void)state;
    char err[1024];
    struct lb_config *c = load_ok("kafka:\n  brokers: 127.0.0.1:1\n  topics: [\"^(unclosed\"]\n"
                                  "input: {schemas: {1: s.avsc}}\nredis: {nodes: [a:1]}\n");
    enum lb_error_class class = LB_ERROR_NONE;
    struct lb_consumer_options options = lb_config_consumer(c);
    assert_null(lb_consumer_new(&options, NULL, NULL, err, sizeof(err), &class));
    if (!strstr(err, "test.yaml: cannot subscribe to the topics (kafka.topics"))
        fail_msg("unexpected error: %s", err);
    assert_int_equal(class, LB_ERROR_CONFIG);
    lb_config_free(c);
}

static char *printed(const struct lb_config *config)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    assert_non_null(out);
    lb_config_print(config, out);
    fclose(out);
    return text;
}

/* --check-config's output is the configuration in the file's own structure
 * and units: loaded back, it prints the same again; secrets read from the
 * environment print as written, inline ones as <redacted>, which the
 * loader refuses with a message saying what to write instead. */
static void the_printed_configuration_loads_back_the_same(void **state)
{
    (void)state;
    setenv("LB_TEST_SECRET", "s3cret", 1);
    static const char *const files[] = {
        "kafka:\n  brokers: b:1\n  topics: [t, u]\n  dlq_topic: d\n  linger.ms: 7\n"
        "  sasl.password: ${LB_TEST_SECRET}\n"
        "input:\n  schemas: {1: s.avsc, 7: /abs/v7.avsc}\n  max_future: 90s\n"
        "  registry: {url: \"http://r:1\", user: u, password: \"${LB_TEST_SECRET}\"}\n"
        "redis:\n  nodes: [\"a:1\", \"[::1]:2\"]\n  key_prefix: \"\"\n  wait_replicas: 1\n"
        "  password: ${LB_TEST_SECRET}\n  user: u\n  tls: {enabled: false}\n"
        "metrics: {listen: \"127.0.0.1:9464\"}\nlog: {level: debug, format: json}\n"
        "results: {topic: done, schema_id: 4, idle: 1m, lease: 10s, keep: false}\n"
        "profiles:\n  - name: fast\n    match: [\"a-*\", \"b \\\"q\\\"\"]\n    order: asc\n"
        "    tie_break: latest\n    tie_resolution: ms\n    epoch: 2026-01-01T00:00:00.250Z\n"
        "    horizon: 2027-01-01T00:00:00Z\n    score_max: 1000\n"
        "    windows: {daily: 36h, custom: [{dim: patch, ttl: 90d}, {dim: season}],"
        " monthly: {ttl: 1w}, weekly: {results: {top: all, grace: 0s}}}\n"
        "  - name: total\n    aggregation: sum\n    dedupe: off\n    retractions: reject\n",
        "kafka: {brokers: b, topics: [t]}\ninput: {format: bare, writer_schema: w.avsc}\n"
        "redis: {nodes: [a:1]}\n",
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        struct lb_config *c = load_ok(files[i]);
        char *first = printed(c);
        lb_config_free(c);
        assert_null(strstr(first, "s3cret"));
        c = load_ok(first);
        char *second = printed(c);
        lb_config_free(c);
        if (strcmp(first, second) != 0)
            fail_msg("printed twice, differently:\n%s\n---\n%s", first, second);
        if (i == 0) {
            static const char *const lines[] = {
                "  sasl.password: \"${LB_TEST_SECRET}\"\n",
                "    password: \"${LB_TEST_SECRET}\"\n",
                "  password: \"${LB_TEST_SECRET}\"\n",
                "  key_prefix: \"\"\n",
                "  nodes: [\"a:1\", \"[::1]:2\"]\n",
                "    7: \"/abs/v7.avsc\"\n",
                "  max_future: 90s\n",
                "  wait_replicas: 1\n",
                "    tie_resolution: ms\n",
                "    epoch: 2026-01-01T00:00:00.250Z\n",
                "      daily: {ttl: 36h}\n",
                "      monthly: {ttl: 7d}\n",
                "        - {dim: \"season\", ttl: 0s}\n",
                "    dedupe: off\n",
                "    match: [\"a-*\", \"b \\\"q\\\"\"]\n",
                "    dedupe: {window: 1d}\n",
            };
            for (size_t k = 0; k < sizeof(lines) / sizeof(lines[0]); k++)
                if (!strstr(first, lines[k]))
                    fail_msg("no line \"%s\" in:\n%s", lines[k], first);
        }
        free(first);
        free(second);
    }

    struct lb_config *c = load_ok("kafka:\n  brokers: b\n  topics: [t]\n  sasl.password: inline\n"
                                  "input: {schemas: {1: s.avsc}}\n"
                                  "redis:\n  nodes: [a:1]\n  password: inline\n");
    char *text = printed(c);
    lb_config_free(c);
    assert_null(strstr(text, "inline"));
    assert_non_null(strstr(text, "  sasl.password: <redacted>\n"));
    struct lb_config *again = NULL;
    char err[1024];
    assert_int_equal(
        lb_config_load_string("printed.yaml", text, strlen(text), &again, err, sizeof(err)), -1);
    if (!strstr(err, "sasl.password: \"<redacted>\" stands for a secret"))
        fail_msg("unexpected error: %s", err);
    free(text);
    expect_error("kafka: {brokers: b, topics: [t]}\ninput: {schemas: {1: s.avsc}}\n"
                 "redis:\n  nodes: [a:1]\n  password: <redacted>\n",
                 5, "password: \"<redacted>\" stands for a secret");
}

/* Required values cannot be empty, nor can lists hold empty items. */
static void empty_values_are_refused(void **state)
{
    (void)state;
    char year[1024];
    snprintf(year, sizeof(year), "%sprofiles:\n  - name: p\n    epoch: 0000-01-01T00:30:00+01:00\n",
             minimal);
    expect_error(year, 11, "epoch: 0000-01-01T00:30:00+01:00 is outside the years 0000 to 9999");
    expect_error("kafka: {brokers, topics}\n", 1, "brokers is empty");
    expect_error("kafka: {brokers: b, topics: [t, ~]}\n", 1, "topics: an item is empty");
    expect_error("kafka: {brokers: b, topics: [t]}\ninput: {schemas: {1}}\n", 2,
                 "schemas: give schema id 1's .avsc file");
    expect_error("kafka: {brokers: b, topics: [t]}\ninput: {format: bare, writer_schema: }\n", 2,
                 "writer_schema: give the writer schema's .avsc file");
    char text[1024];
    snprintf(text, sizeof(text), "%sprofiles:\n  - name:\n    match: x\n", minimal);
    expect_error(text, 10, "name is empty");
    snprintf(text, sizeof(text), "%s  user: null\n", minimal);
    expect_error(text, 9, "user is empty");
}

static void environment_variables_are_interpolated(void **state)
{
    (void)state;
    char text[2048];
    setenv("LB_TEST_PASSWORD", "s3cret", 1);
    snprintf(text, sizeof(text), "%s  password: ${LB_TEST_PASSWORD}\n", minimal);
    struct lb_config *c = load_ok(text);
    assert_string_equal(c->redis_password, "s3cret");
    /* printing masks it */
    char *printed = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&printed, &size);
    lb_config_print(c, out);
    fclose(out);
    assert_null(strstr(printed, "s3cret"));
    assert_non_null(strstr(printed, "password: \"${LB_TEST_PASSWORD}\"")); /* as written */
    free(printed);
    lb_config_free(c);

    unsetenv("LB_TEST_UNSET");
    snprintf(text, sizeof(text), "%s  password: ${LB_TEST_UNSET}\n", minimal);
    expect_error(text, 9, "LB_TEST_UNSET is not set");

    /* defaults: used when unset or empty */
    snprintf(text, sizeof(text),
             "%s  key_prefix: \"${LB_TEST_UNSET:-lb}-${LB_TEST_PASSWORD:-x}:\"\n", minimal);
    c = load_ok(text);
    assert_string_equal(c->key_prefix, "lb-s3cret:");
    lb_config_free(c);
}

static void wait_replicas_takes_auto_or_a_number(void **state)
{
    (void)state;
    char text[2048];
    snprintf(text, sizeof(text), "%s  wait_replicas: 2\n  wait_timeout: 250ms\n", minimal);
    struct lb_config *c = load_ok(text);
    assert_int_equal(c->wait_replicas, 2);
    assert_int_equal(c->wait_timeout_ms, 250);
    lb_config_free(c);
    snprintf(text, sizeof(text), "%s  wait_replicas: auto\n", minimal);
    c = load_ok(text);
    assert_int_equal(c->wait_replicas, -1);
    lb_config_free(c);
}

static void kafka_properties_pass_through(void **state)
{
    (void)state;
    struct lb_config *c = load_ok("kafka:\n  brokers: b\n  topics: [t]\n"
                                  "  session.timeout.ms: 12000\n"
                                  "input:\n  schemas: {1: s.avsc}\nredis:\n  nodes: [a:1]\n");
    assert_int_equal(c->nkafka_props, 1);
    assert_string_equal(c->kafka_props[0].key, "session.timeout.ms");
    assert_string_equal(c->kafka_props[0].value, "12000");
    assert_int_equal(c->kafka_props[0].line, 4);
    lb_config_free(c);
}

/* Each property reaches the client librdkafka says it is for: no consumer
 * property in the dead-letter producer (librdkafka's CONFWARN), none of the
 * producer's in the consumer, shared ones in both; an unknown one is
 * refused with its line. */
static void kafka_properties_go_to_their_client(void **state)
{
    (void)state;
    assert_int_equal(lb_kafka_property_scope("session.timeout.ms"), 'C');
    assert_int_equal(lb_kafka_property_scope("message.timeout.ms"), 'P');
    assert_int_equal(lb_kafka_property_scope("linger.ms"), 'P');
    assert_int_equal(lb_kafka_property_scope("security.protocol"), '*');
    assert_int_equal(lb_kafka_property_scope("no.such.property"), 0);
    struct lb_config *c = load_ok("kafka:\n  brokers: b\n  topics: [t]\n  dlq_topic: d\n"
                                  "  session.timeout.ms: 12000\n"
                                  "  linger.ms: 20\n"
                                  "  client.id: pod-7\n"
                                  "input:\n  schemas: {1: s.avsc}\nredis:\n  nodes: [a:1]\n");
    static const struct {
        rd_kafka_type_t type;
        const char *session, *linger;
    } want[] = {{RD_KAFKA_CONSUMER, "12000", "5"}, {RD_KAFKA_PRODUCER, "45000", "20"}};
    for (size_t i = 0; i < 2; i++) {
        char err[512], value[64];
        size_t len;
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        struct lb_kafka_options options = lb_config_kafka(c);
        struct lb_kafka_client client = {.type = want[i].type};
        assert_int_equal(lb_kafka_conf_apply(&options, &client, conf, err, sizeof(err)), 0);
        len = sizeof(value);
        assert_int_equal(rd_kafka_conf_get(conf, "session.timeout.ms", value, &len),
                         RD_KAFKA_CONF_OK);
        assert_string_equal(value, want[i].session); /* the default where it does not belong */
        len = sizeof(value);
        assert_int_equal(rd_kafka_conf_get(conf, "linger.ms", value, &len), RD_KAFKA_CONF_OK);
        assert_string_equal(value, want[i].linger);
        len = sizeof(value);
        assert_int_equal(rd_kafka_conf_get(conf, "client.id", value, &len), RD_KAFKA_CONF_OK);
        assert_string_equal(value, "pod-7");
        rd_kafka_conf_destroy(conf);
    }
    lb_config_free(c);
}

/* What the engine tests open: the canonical schema, nodes nobody listens on. */
static struct lb_config *engine_config(void)
{
    const char *src = getenv("LB_SOURCE_DIR");
    char text[2048];
    snprintf(text, sizeof(text),
             "kafka: {brokers: 127.0.0.1:1, topics: [t]}\n"
             "input: {schemas: {1: %s/schemas/score_event.avsc}}\n"
             "redis: {nodes: [\"127.0.0.1:1\"]}\n",
             src ? src : ".");
    return load_ok(text);
}

/* The engine opens from the configuration alone (no connection is tried
 * until it is used), and a schema that does not load is the
 * configuration's fault, named in the message. */
static void the_engine_opens_without_connecting_and_blames_a_bad_schema(void **state)
{
    (void)state;
    char err[1024];
    struct lb_config *c = engine_config();
    enum lb_error_class class = LB_ERROR_CONFIG;
    struct lb_engine_options options = {.key_prefix = "staging:"};
    struct lb_engine *e = lb_engine_open(c, &options, err, sizeof(err), &class);
    if (!e)
        fail_msg("lb_engine_open: %s", err);
    assert_int_equal(class, LB_ERROR_NONE);
    assert_non_null(e->decoder);
    assert_non_null(e->pipeline);
    assert_non_null(e->cluster_options.script); /* every client loads the apply script */
    struct lb_cluster_stats cs;
    lb_pipeline_redis_stats(e->pipeline, &cs); /* both of its clients */
    assert_int_equal(cs.connection_errors + cs.refreshes, 0);
    lb_engine_close(e);
    lb_config_free(c);

    c = load_ok("kafka: {brokers: b, topics: [t]}\n"
                "input: {schemas: {1: /nonexistent/score_event.avsc}}\n"
                "redis: {nodes: [a:1]}\n");
    class = LB_ERROR_NONE;
    assert_null(lb_engine_open(c, NULL, err, sizeof(err), &class));
    assert_int_equal(class, LB_ERROR_CONFIG);
    if (!strstr(err, "/nonexistent/score_event.avsc"))
        fail_msg("unexpected error: %s", err);
    lb_config_free(c);

    /* the registry's files are read (password) or checked (CA) at start */
    static const struct {
        const char *registry, *needle;
    } files[] = {
        {"{url: http://r:1, user: u, password_file: /nonexistent/pw}",
         "test.yaml:2: input.registry.password_file /nonexistent/pw: No such file"},
        {"{url: https://r:1, ca_file: /nonexistent/ca.pem}",
         "test.yaml:2: input.registry.ca_file /nonexistent/ca.pem: No such file"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text),
                 "kafka: {brokers: b, topics: [t]}\ninput: {registry: %s}\n"
                 "redis: {nodes: [a:1]}\n",
                 files[i].registry);
        c = load_ok(text);
        class = LB_ERROR_NONE;
        assert_null(lb_engine_open(c, NULL, err, sizeof(err), &class));
        assert_int_equal(class, LB_ERROR_CONFIG);
        if (!strstr(err, files[i].needle))
            fail_msg("expected \"%s\", got \"%s\"", files[i].needle, err);
        lb_config_free(c);
    }
}

/* The caller's defaults give way to the kafka: section, its fixed
 * properties do not; properties librdkafka refuses only together (checked
 * when the client is created) are the configuration's fault too. */
static void kafka_clients_layer_defaults_section_and_fixed(void **state)
{
    (void)state;
    struct lb_config *c = load_ok("kafka:\n  brokers: b\n  topics: [t]\n  dlq_topic: d\n"
                                  "  linger.ms: 20\n  request.required.acks: \"1\"\n"
                                  "input:\n  schemas: {1: s.avsc}\nredis:\n  nodes: [a:1]\n");
    static const char *const defaults[][2] = {{"linger.ms", "5"}, {"batch.size", "4096"}};
    static const char *const fixed[][2] = {{"request.required.acks", "all"}};
    struct lb_kafka_options options = lb_config_kafka(c);
    struct lb_kafka_client client = {.type = RD_KAFKA_PRODUCER,
                                     .defaults = defaults,
                                     .ndefaults = 2,
                                     .fixed = fixed,
                                     .nfixed = 1};
    char err[512], value[64];
    size_t len;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(lb_kafka_conf_apply(&options, &client, conf, err, sizeof(err)), 0);
    static const char *const want[][2] = {{"linger.ms", "20"},
                                          {"batch.size", "4096"},
                                          {"request.required.acks", "-1"},
                                          {"bootstrap.servers", "b"}};
    for (size_t i = 0; i < 4; i++) {
        len = sizeof(value);
        assert_int_equal(rd_kafka_conf_get(conf, want[i][0], value, &len), RD_KAFKA_CONF_OK);
        if (strcmp(value, want[i][1]) != 0)
            fail_msg("%s is %s, expected %s", want[i][0], value, want[i][1]);
    }
    rd_kafka_conf_destroy(conf);
    lb_config_free(c);

    /* SASL PLAIN without credentials: refused only together, as the client
     * is made */
    c = load_ok("kafka:\n  brokers: b\n  topics: [t]\n  security.protocol: sasl_plaintext\n"
                "  sasl.mechanisms: PLAIN\n"
                "input:\n  schemas: {1: s.avsc}\nredis:\n  nodes: [a:1]\n");
    options = lb_config_kafka(c);
    client = (struct lb_kafka_client){.type = RD_KAFKA_CONSUMER};
    enum lb_error_class class = LB_ERROR_NONE;
    assert_null(lb_kafka_new(&options, &client, err, sizeof(err), &class));
    assert_int_equal(class, LB_ERROR_CONFIG);
    if (!strstr(err, "test.yaml: cannot create the Kafka consumer") || !strstr(err, "sasl"))
        fail_msg("unexpected error: %s", err);
    lb_config_free(c);

    /* a tool's -X */
    char arg[] = "client.id=pod-7", bad[] = "client.id";
    struct lb_kv kv;
    assert_int_equal(lb_kafka_property_arg(arg, &kv), 0);
    assert_string_equal(kv.key, "client.id");
    assert_string_equal(kv.value, "pod-7");
    assert_int_equal(lb_kafka_property_arg(bad, &kv), -1);
}

/* <property>_file: the property's value from that file (a password off the
 * configuration and the command line); a missing file names itself and
 * its line; a name that is no property's plus _file stays unknown. */
static void kafka_property_values_from_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/lb-kafka-file-XXXXXX", path[64], text[512], err[512], value[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/password", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    snprintf(text, sizeof(text),
             "kafka:\n  brokers: b\n  topics: [t]\n  sasl.username: lb\n"
             "  sasl.password_file: %s\ninput:\n  schemas: {1: s.avsc}\nredis:\n  nodes: [a:1]\n",
             path);
    struct lb_config *c = load_ok(text);
    struct lb_kafka_options options = lb_config_kafka(c);
    struct lb_kafka_client client = {.type = RD_KAFKA_CONSUMER};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(lb_kafka_conf_apply(&options, &client, conf, err, sizeof(err)), 0);
    size_t len = sizeof(value);
    assert_int_equal(rd_kafka_conf_get(conf, "sasl.password", value, &len), RD_KAFKA_CONF_OK);
    assert_string_equal(value, "s3cret"); /* its newline dropped */
    rd_kafka_conf_destroy(conf);
    /* --check-config prints the file's path, and that loads again */
    char *shown = printed(c);
    char line[160];
    snprintf(line, sizeof(line), "  sasl.password_file: \"%s\"\n", path);
    if (!strstr(shown, line) || strstr(shown, "s3cret"))
        fail_msg("no \"%s\" in:\n%s", line, shown);
    lb_config_free(load_ok(shown));
    free(shown);

    unlink(path);
    rmdir(dir);

    /* gone after the check: the client says so when it is made */
    conf = rd_kafka_conf_new();
    assert_int_equal(lb_kafka_conf_apply(&options, &client, conf, err, sizeof(err)), -1);
    char want[128];
    snprintf(want, sizeof(want), "test.yaml:5: kafka property sasl.password_file: %s: ", path);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("unexpected error: %s", err);
    rd_kafka_conf_destroy(conf);
    lb_config_free(c);
    /* gone before: the check (at load) says so */
    expect_error(text, 5, "kafka property sasl.password_file");
    /* longer than any value librdkafka takes: refused, not cut short */
    assert_int_equal(mkdir(dir, 0700), 0); /* the same name: 'text' names it */
    f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 5000; i++)
        fputc('x', f);
    fclose(f);
    snprintf(want, sizeof(want), "%s: too long", path);
    expect_error(text, 5, want);
    unlink(path);
    rmdir(dir);
    expect_error("kafka:\n  brokers: b\n  topics: [t]\n  no.such.thing_file: /x\n"
                 "input:\n  schemas: {1: s.avsc}\nredis:\n  nodes: [a:1]\n",
                 4, "'no.such.thing_file' is not a librdkafka property");
}

static void durations_and_times_parse(void **state)
{
    (void)state;
    int64_t ms;
    assert_true(lb_duration_parse("500ms") == 500);
    assert_true(lb_duration_parse("2s") == 2000);
    assert_true(lb_duration_parse("5m") == 300000);
    assert_true(lb_duration_parse("1h") == 3600000);
    assert_true(lb_duration_parse("7d") == 604800000);
    assert_true(lb_duration_parse("2w") == 1209600000);
    assert_true(lb_duration_parse("7") == -1);
    assert_true(lb_duration_parse("-1s") == -1);
    assert_true(lb_duration_parse("1y") == -1);
    assert_int_equal(lb_time_parse("1970-01-02T00:00:01.5Z", &ms), 0);
    assert_true(ms == 86401500);
    assert_int_equal(lb_time_parse("1970-01-01", &ms), 0);
    assert_true(ms == 0);
    assert_int_equal(lb_time_parse("1970-01-01T00:00:00", &ms), -1); /* no zone */
    assert_int_equal(lb_time_parse("1970-13-01", &ms), -1);
}

/* ---- out of memory ----------------------------------------------------------- */

struct oom_config {
    char *text; /* config/projector.example.yaml */
};

/* Loading the documented example: a failed allocation anywhere is a clean
 * "out of memory" error, never a configuration missing what failed. */
static int load_example(void *ctx)
{
    const struct oom_config *o = ctx;
    struct lb_config *c = NULL;
    char err[1024] = "";
    if (lb_config_load_string("example.yaml", o->text, strlen(o->text), &c, err, sizeof(err)) ==
        0) {
        lb_config_free(c);
        return oom_failed() ? -1 : 0;
    }
    if (!oom_failed() || !strstr(err, "out of memory")) {
        print_message("error: %s\n", err);
        return -1;
    }
    return 0;
}

/* The engine assembly (decoder, cluster client, pipeline) from a loaded
 * configuration: NULL with a runtime error, or an engine to close. */
static int open_engine(void *ctx)
{
    const struct lb_config *config = ctx;
    char err[1024] = "";
    enum lb_error_class class = LB_ERROR_NONE;
    struct lb_engine_options options = {.key_prefix = "staging:"};
    struct lb_engine *e = lb_engine_open(config, &options, err, sizeof(err), &class);
    if (e) {
        lb_engine_close(e);
        return oom_failed() ? -1 : 0;
    }
    if (!oom_failed() || class != LB_ERROR_RUNTIME || !strstr(err, "out of memory")) {
        print_message("class %d, error: %s\n", class, err);
        return -1;
    }
    return 0;
}

static void running_out_of_memory_while_loading_or_opening_is_a_clean_error(void **state)
{
    (void)state;
    const char *src = getenv("LB_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/config/projector.example.yaml", src ? src : ".");
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    struct oom_config o = {calloc(1, 1 << 16)};
    assert_non_null(o.text);
    assert_true(fread(o.text, 1, (1 << 16) - 1, f) > 0);
    fclose(f);
    assert_true(oom_sweep("config load", load_example, &o, 1) > 50);
    free(o.text);

    struct lb_config *c = engine_config();
    assert_true(oom_sweep("engine open", open_engine, c, 1) > 10);
    lb_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(minimal_config_gets_documented_defaults),
        cmocka_unit_test(running_out_of_memory_while_loading_or_opening_is_a_clean_error),
        cmocka_unit_test(profiles_match_by_pattern_in_order),
        cmocka_unit_test(errors_name_file_and_line),
        cmocka_unit_test(topics_librdkafka_cannot_subscribe_to_are_a_configuration_error),
        cmocka_unit_test(environment_variables_are_interpolated),
        cmocka_unit_test(the_printed_configuration_loads_back_the_same),
        cmocka_unit_test(empty_values_are_refused),
        cmocka_unit_test(wait_replicas_takes_auto_or_a_number),
        cmocka_unit_test(kafka_properties_pass_through),
        cmocka_unit_test(durations_and_times_parse),
        cmocka_unit_test(sum_boards_budget_their_totals),
        cmocka_unit_test(dedupe_defaults_and_errors),
        cmocka_unit_test(decay_profiles_are_checked_at_load),
        cmocka_unit_test(registry_settings_and_errors),
        cmocka_unit_test(results_settings_and_errors),
        cmocka_unit_test(redis_tls_settings_and_errors),
        cmocka_unit_test(kafka_property_values_from_files),
        cmocka_unit_test(invalid_files_are_refused_with_their_path_and_line),
        cmocka_unit_test(kafka_properties_are_checked_at_load),
        cmocka_unit_test(kafka_properties_go_to_their_client),
        cmocka_unit_test(kafka_clients_layer_defaults_section_and_fixed),
        cmocka_unit_test(the_engine_opens_without_connecting_and_blames_a_bad_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
