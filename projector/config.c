/* Configuration loading.
 *
 * libyaml's document API gives us a node tree with line numbers. The tree is
 * walked against static tables of key definitions (struct key_def): one table
 * per mapping, each row naming a key, its type, where it is stored, its
 * default and its documentation. Unknown keys, wrong types, out-of-range
 * numbers and missing required keys are all reported with the line they are
 * on (or the line of the mapping that lacks them), and the first error stops
 * the load: a half-valid configuration never starts a projector.
 *
 * Cross-field rules (a score range that does not fit the composite's 53 bits,
 * a bare input without a writer schema, ...) are checked after the walk, with
 * the line of the section they concern.
 */
#include "config.h"
#include "log.h"
#include "slot.h"
#include "tls.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct parser {
    const char *name; /* for messages */
    unsigned flags;   /* LB_CONFIG_* */
    char *dir;        /* for relative paths */
    yaml_document_t doc;
    char *err;
    size_t errlen;
};

static int fail(struct parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, int line, const char *fmt, ...)
{
    va_list ap;
    /* line 0: the file as a whole (out of memory, an empty file) */
    int n = line > 0 ? snprintf(p->err, p->errlen, "%s:%d: ", p->name, line)
                     : snprintf(p->err, p->errlen, "%s: ", p->name);
    if (n < 0 || (size_t)n >= p->errlen)
        return -1;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int line_of(const yaml_node_t *node)
{
    return (int)node->start_mark.line + 1;
}

/* ---- scalars ------------------------------------------------------------ */

/* Returns a malloc'd copy of a scalar with ${VAR} replaced from the
 * environment, or NULL after reporting the error. */
static char *expand(struct parser *p, int line, const char *text)
{
    size_t cap = strlen(text) + 1, len = 0;
    char *out = malloc(cap);
    if (!out) {
        fail(p, line, "out of memory");
        return NULL;
    }
    char name[128]; /* outlives the loop body: 'value' may point into it */
    for (const char *s = text; *s;) {
        const char *value = NULL;
        size_t vlen = 1;
        if (s[0] == '$' && s[1] == '{') {
            const char *close = strchr(s, '}');
            if (!close) {
                fail(p, line, "unterminated ${ in \"%s\"", text);
                goto error;
            }
            /* ${NAME} or ${NAME:-default} */
            size_t nlen = (size_t)(close - s - 2);
            if (nlen == 0 || nlen >= sizeof(name)) {
                fail(p, line, "bad environment variable reference in \"%s\"", text);
                goto error;
            }
            memcpy(name, s + 2, nlen);
            name[nlen] = '\0';
            char *fallback = strstr(name, ":-");
            if (fallback) {
                *fallback = '\0';
                fallback += 2;
            }
            value = getenv(name);
            if (!value || (fallback && !*value))
                value = fallback;
            if (!value) {
                fail(p, line,
                     "environment variable %s is not set (referenced as ${%s}; write "
                     "${%s:-default} for a default)",
                     name, name, name);
                goto error;
            }
            vlen = strlen(value);
            s = close + 1;
        } else {
            value = s++;
        }
        if (len + vlen + 1 > cap) {
            cap = (len + vlen + 1) * 2;
            char *grown = realloc(out, cap);
            if (!grown) {
                fail(p, line, "out of memory");
                goto error;
            }
            out = grown;
        }
        memcpy(out + len, value, vlen);
        len += vlen;
    }
    out[len] = '\0';
    return out;
error:
    free(out);
    return NULL;
}

static const char *scalar_text(const yaml_node_t *node)
{
    return (const char *)node->data.scalar.value;
}

static int parse_int(const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end)
        return -1;
    *out = v;
    return 0;
}

int64_t lb_duration_parse(const char *text)
{
    static const struct {
        const char *suffix;
        int64_t ms;
    } units[] = {{"ms", 1},      {"s", 1000},     {"m", 60000},
                 {"h", 3600000}, {"d", 86400000}, {"w", 7 * INT64_C(86400000)}};
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || v < 0 || !isdigit((unsigned char)text[0]))
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].suffix) == 0)
            return v > INT64_MAX / units[i].ms ? -1 : v * units[i].ms;
    return -1;
}

static int digits(const char **s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++, (*s)++) {
        if (!isdigit((unsigned char)**s))
            return -1;
        v = v * 10 + (**s - '0');
    }
    *out = v;
    return 0;
}

int lb_time_parse(const char *text, int64_t *ms)
{
    const char *s = text;
    int year, month, day, hour = 0, minute = 0, second = 0, frac_ms = 0, offset_min = 0;

    if (digits(&s, 4, &year) || *s++ != '-' || digits(&s, 2, &month) || *s++ != '-' ||
        digits(&s, 2, &day))
        return -1;
    int64_t y;
    unsigned m, d;
    /* a date that does not exist (2025-02-31) does not round-trip */
    lb_civil_from_days(lb_days_from_civil(year, (unsigned)month, (unsigned)day), &y, &m, &d);
    if (month < 1 || month > 12 || day < 1 || y != year || m != (unsigned)month ||
        d != (unsigned)day)
        return -1;
    if (*s == 'T' || *s == 't' || *s == ' ') {
        s++;
        if (digits(&s, 2, &hour) || *s++ != ':' || digits(&s, 2, &minute) || *s++ != ':' ||
            digits(&s, 2, &second) || hour > 23 || minute > 59 || second > 60)
            return -1;
        if (*s == '.') {
            int scale = 100;
            for (s++; isdigit((unsigned char)*s); s++, scale /= 10)
                frac_ms += (*s - '0') * scale;
        }
        if (*s == 'Z' || *s == 'z') {
            s++;
        } else if (*s == '+' || *s == '-') {
            int sign = *s++ == '-' ? -1 : 1, oh, om;
            if (digits(&s, 2, &oh) || *s++ != ':' || digits(&s, 2, &om))
                return -1;
            offset_min = sign * (oh * 60 + om);
        } else {
            return -1; /* a time without a zone is ambiguous */
        }
    }
    if (*s)
        return -1;
    int64_t days = lb_days_from_civil(year, (unsigned)month, (unsigned)day);
    *ms =
        ((days * 24 + hour) * 60 + minute - offset_min) * INT64_C(60000) + second * 1000 + frac_ms;
    return 0;
}

/* ---- key tables ---------------------------------------------------------- */

enum key_type {
    KT_STRING,
    KT_SECRET, /* a string never printed */
    KT_PATH,   /* a string resolved against the configuration's directory */
    KT_INT,
    KT_DURATION,
    KT_TIME,
    KT_CHOICE, /* stored as int: index into 'choices' */
    KT_STRINGS,
    KT_SECTION, /* a nested mapping filling the same object */
    KT_CUSTOM,
};

#define F_REQUIRED    1u
#define F_PASSTHROUGH 2u /* KT_SECTION: dotted keys are librdkafka properties */
#define F_LINE        4u /* KT_SECTION: its key's line is kept at 'line_offset' (an int) */
#define F_EMPTY       8u /* KT_STRING: may be empty */

/* What --check-config prints for a secret written in the file itself, and
 * what the loader refuses where a secret belongs. */
#define REDACTED "<redacted>"

struct key_def {
    const char *name;
    enum key_type type;
    size_t offset;
    const char *def; /* default, in the same syntax as the file; NULL: none */
    unsigned flags;
    int64_t min, max;
    const char *const *choices;
    const struct key_def *section;
    size_t line_offset;   /* F_LINE */
    size_t source_offset; /* KT_SECRET: a char * keeping the text as written if it read ${ENV} */
    const char *file_key; /* KT_SECRET: the key that reads it from a file instead, if any */
    int (*custom)(struct parser *p, yaml_node_t *node, void *obj);
    /* KT_CUSTOM: prints the key and its value at 'indent' */
    void (*print)(const void *obj, FILE *out, int indent);
    const char *doc;
};

#define FIELD(type, member) offsetof(type, member)

static int parse_node(struct parser *p, const struct key_def *def, yaml_node_t *node, void *obj,
                      int key_line);
static int parse_mapping(struct parser *p, const struct key_def *table, yaml_node_t *node, int line,
                         void *obj, const char *where, unsigned flags);

/* Stores the scalar 'text' (already expanded) as 'def' says. */
static int store_scalar(struct parser *p, const struct key_def *def, int line, const char *text,
                        void *obj)
{
    char *field = (char *)obj + def->offset;
    int64_t v;

    switch (def->type) {
    case KT_STRING:
    case KT_SECRET:
    case KT_PATH: {
        char *copy;
        if (!*text && !(def->flags & F_EMPTY))
            return fail(p, line, "%s is empty; give it a value or remove the key", def->name);
        if (def->type == KT_PATH && text[0] != '/' && p->dir) {
            size_t n = strlen(p->dir) + strlen(text) + 2;
            copy = malloc(n);
            if (copy)
                snprintf(copy, n, "%s/%s", p->dir, text);
        } else {
            copy = strdup(text);
        }
        if (!copy)
            return fail(p, line, "out of memory");
        free(*(char **)field);
        *(char **)field = copy;
        return 0;
    }
    case KT_INT:
        if (parse_int(text, &v) != 0)
            return fail(p, line, "%s: \"%s\" is not an integer", def->name, text);
        goto range;
    case KT_DURATION:
        v = lb_duration_parse(text);
        if (v < 0)
            return fail(p, line,
                        "%s: \"%s\" is not a duration (write a number and a unit: ms, s, m, h, "
                        "d or w, e.g. 500ms or 7d)",
                        def->name, text);
        goto range;
    case KT_TIME:
        if (lb_time_parse(text, &v) != 0)
            return fail(p, line, "%s: \"%s\" is not an RFC 3339 time such as 2025-01-01T00:00:00Z",
                        def->name, text);
        /* in UTC, as --check-config prints it, a year of four digits */
        if (v < lb_days_from_civil(0, 1, 1) * 86400000 ||
            v >= lb_days_from_civil(10000, 1, 1) * 86400000)
            return fail(p, line, "%s: %s is outside the years 0000 to 9999 in UTC", def->name,
                        text);
        *(int64_t *)field = v;
        return 0;
    case KT_CHOICE:
        for (int i = 0; def->choices[i]; i++) {
            if (strcmp(text, def->choices[i]) == 0) {
                *(int *)field = i;
                return 0;
            }
        }
        {
            char known[256] = "";
            for (int i = 0; def->choices[i]; i++) {
                strncat(known, i ? ", " : "", sizeof(known) - strlen(known) - 1);
                strncat(known, def->choices[i], sizeof(known) - strlen(known) - 1);
            }
            return fail(p, line, "%s: \"%s\" is not one of: %s", def->name, text, known);
        }
    default:
        return fail(p, line, "%s: internal error: not a scalar key", def->name);
    }
range:
    if (v < def->min || v > def->max)
        return fail(p, line, "%s: %s is out of range [%" PRId64 ", %" PRId64 "]%s", def->name, text,
                    def->min, def->max, def->type == KT_DURATION ? " (milliseconds)" : "");
    *(int64_t *)field = v;
    return 0;
}

/* A plain ~ or null is YAML's null: an empty value here. */
static const char *scalar_or_empty(const yaml_node_t *node)
{
    const char *text = scalar_text(node);
    if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (strcmp(text, "~") == 0 || strcmp(text, "null") == 0 || strcmp(text, "Null") == 0 ||
         strcmp(text, "NULL") == 0))
        return "";
    return text;
}

/* A secret as written: "<redacted>" is refused, and a value read from the
 * environment is kept as written in 'source' (NULL: it was not), which is
 * what --check-config prints instead of the secret. */
static int keep_source(struct parser *p, const char *what, const char *file_key, int line,
                       const char *text, char **source)
{
    if (strcmp(text, REDACTED) == 0)
        return fail(p, line,
                    "%s: \"" REDACTED "\" stands for a secret --check-config does not print; "
                    "write the secret as ${ENV_VAR}%s%s%s",
                    what, file_key ? " or give a file with " : "", file_key ? file_key : "",
                    file_key ? ": FILE" : "");
    free(*source);
    *source = NULL;
    if (strstr(text, "${") && !(*source = strdup(text)))
        return fail(p, line, "out of memory");
    return 0;
}

static int parse_scalar_node(struct parser *p, const struct key_def *def, yaml_node_t *node,
                             void *obj)
{
    if (node->type != YAML_SCALAR_NODE)
        return fail(p, line_of(node), "%s: expected a single value, not a %s", def->name,
                    node->type == YAML_MAPPING_NODE ? "mapping" : "list");
    if (def->type == KT_SECRET &&
        keep_source(p, def->name, def->file_key, line_of(node), scalar_text(node),
                    (char **)((char *)obj + def->source_offset)) != 0)
        return -1;
    char *text = expand(p, line_of(node), scalar_or_empty(node));
    if (!text)
        return -1;
    int rc = store_scalar(p, def, line_of(node), text, obj);
    free(text);
    return rc;
}

/* KT_STRINGS stores into a 'char **list' immediately followed by its
 * 'size_t count'; every such pair is checked here. */
#define STRINGS_PAIR(type, list, count)                                                            \
    _Static_assert(offsetof(type, count) == offsetof(type, list) + sizeof(char **),                \
                   #type "." #count " must follow " #list)
STRINGS_PAIR(struct lb_config, topics, ntopics);
STRINGS_PAIR(struct lb_profile, match, nmatch);

/* A list of strings; a single scalar is accepted as a list of one. */
static int parse_strings(struct parser *p, const struct key_def *def, yaml_node_t *node, void *obj)
{
    char ***list = (char ***)((char *)obj + def->offset);
    size_t *count = (size_t *)((char *)obj + def->offset + sizeof(char **));
    yaml_node_item_t *items = NULL;
    size_t n;

    if (node->type == YAML_MAPPING_NODE)
        return fail(p, line_of(node), "%s: expected a list of values, not a mapping", def->name);
    if (node->type == YAML_SCALAR_NODE) {
        n = 1;
    } else {
        items = node->data.sequence.items.start;
        n = (size_t)(node->data.sequence.items.top - items);
    }
    for (size_t i = 0; i < *count; i++)
        free((*list)[i]);
    free(*list);
    *count = 0;
    *list = calloc(n ? n : 1, sizeof(char *));
    if (!*list)
        return fail(p, line_of(node), "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = items ? yaml_document_get_node(&p->doc, items[i]) : node;
        if (item->type != YAML_SCALAR_NODE)
            return fail(p, line_of(item), "%s: every item must be a single value", def->name);
        char *text = expand(p, line_of(item), scalar_or_empty(item));
        if (!text)
            return -1;
        (*list)[(*count)++] = text;
        if (!*text)
            return fail(p, line_of(item), "%s: an item is empty", def->name);
    }
    return 0;
}

static int parse_node(struct parser *p, const struct key_def *def, yaml_node_t *node, void *obj,
                      int key_line)
{
    switch (def->type) {
    case KT_STRINGS:
        return parse_strings(p, def, node, obj);
    case KT_SECTION:
        if (def->flags & F_LINE)
            *(int *)((char *)obj + def->line_offset) = key_line;
        /* a section left empty ("input:") is an empty mapping */
        if (node->type == YAML_SCALAR_NODE && !*scalar_or_empty(node))
            node = NULL;
        return parse_mapping(p, def->section, node, key_line, obj, def->name, def->flags);
    case KT_CUSTOM:
        return def->custom(p, node, obj);
    default:
        return parse_scalar_node(p, def, node, obj);
    }
}

/* Applies the default of a key the file did not set. */
static int apply_default(struct parser *p, const struct key_def *def, int line, void *obj,
                         const char *where)
{
    if (def->flags & F_REQUIRED)
        return fail(p, line, "%s%s'%s' is required (%s)", where ? where : "", where ? ": " : "",
                    def->name, def->doc);
    if (def->type == KT_SECTION)
        return parse_mapping(p, def->section, NULL, line, obj, def->name, def->flags);
    if (!def->def)
        return 0;
    if (def->type == KT_STRINGS) {
        char ***list = (char ***)((char *)obj + def->offset);
        size_t *count = (size_t *)((char *)obj + def->offset + sizeof(char **));
        *list = calloc(1, sizeof(char *));
        if (!*list || !((*list)[0] = strdup(def->def)))
            return fail(p, line, "out of memory");
        *count = 1;
        return 0;
    }
    return store_scalar(p, def, line, def->def, obj);
}

/* Passthrough of librdkafka properties: any key with a dot in a section
 * flagged F_PASSTHROUGH. librdkafka itself validates them at start. */
static int add_kafka_property(struct parser *p, struct lb_config *config, const char *key,
                              yaml_node_t *value)
{
    if (value->type != YAML_SCALAR_NODE)
        return fail(p, line_of(value), "%s: librdkafka properties take a single value", key);
    struct lb_kv *props = realloc(config->kafka_props, (config->nkafka_props + 1) * sizeof(*props));
    if (!props)
        return fail(p, line_of(value), "out of memory");
    config->kafka_props = props;
    struct lb_kv *kv = &props[config->nkafka_props];
    *kv = (struct lb_kv){.line = line_of(value)};
    char file_key[160];
    snprintf(file_key, sizeof(file_key), "%.150s_file", key);
    if (lb_kafka_property_secret(key) &&
        keep_source(p, key, file_key, kv->line, scalar_text(value), &kv->source) != 0)
        return -1;
    kv->key = strdup(key);
    kv->value = expand(p, kv->line, scalar_or_empty(value));
    if (!kv->key || !kv->value) {
        free(kv->key);
        free(kv->source);
        int oom = kv->value != NULL;
        free(kv->value);
        return oom ? fail(p, kv->line, "out of memory") : -1;
    }
    config->nkafka_props++;
    return 0;
}

static int parse_mapping(struct parser *p, const struct key_def *table, yaml_node_t *node, int line,
                         void *obj, const char *where, unsigned flags)
{
    unsigned seen = 0; /* tables have fewer than 32 rows */
    size_t rows = 0;
    while (table[rows].name)
        rows++;

    if (node && node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node), "%s: expected a mapping of keys to values",
                    where ? where : "top level");
    if (node) {
        for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
             pair < node->data.mapping.pairs.top; pair++) {
            yaml_node_t *key = yaml_document_get_node(&p->doc, pair->key);
            yaml_node_t *value = yaml_document_get_node(&p->doc, pair->value);
            if (key->type != YAML_SCALAR_NODE)
                return fail(p, line_of(key), "keys must be plain names");
            const char *name = scalar_text(key);
            size_t i;
            for (i = 0; i < rows; i++)
                if (strcmp(table[i].name, name) == 0)
                    break;
            if (i == rows) {
                if (strchr(name, '.') && (flags & F_PASSTHROUGH)) {
                    if (add_kafka_property(p, obj, name, value) != 0)
                        return -1;
                    continue;
                }
                char known[512] = "";
                for (size_t k = 0; k < rows; k++) {
                    strncat(known, k ? ", " : "", sizeof(known) - strlen(known) - 1);
                    strncat(known, table[k].name, sizeof(known) - strlen(known) - 1);
                }
                return fail(p, line_of(key), "unknown key '%s'%s%s (known keys: %s)", name,
                            where ? " in " : "", where ? where : "", known);
            }
            if (seen & (1u << i))
                return fail(p, line_of(key), "'%s' is set twice", name);
            seen |= 1u << i;
            if (parse_node(p, &table[i], value, obj, line_of(key)) != 0)
                return -1;
        }
    }
    for (size_t i = 0; i < rows; i++)
        if (!(seen & (1u << i)) && apply_default(p, &table[i], line, obj, where) != 0)
            return -1;
    return 0;
}

/* ---- the tables ------------------------------------------------------------ */

static const char *const wire_choices[] = {"confluent", "bare", NULL};
static const char *const order_choices[] = {"desc", "asc", NULL};
static const char *const aggregation_choices[] = {"best", "latest", "sum", NULL};
static const char *const tie_choices[] = {"earliest", "latest", "none", NULL};
static const char *const retraction_choices[] = {"allow", "reject", NULL};
static const char *const level_choices[] = {"error", "warn", "info", "debug", NULL};

static int parse_schemas(struct parser *p, yaml_node_t *node, void *obj);
static int parse_hosts(struct parser *p, yaml_node_t *node, void *obj);
static int parse_profiles(struct parser *p, yaml_node_t *node, void *obj);
static int parse_windows(struct parser *p, yaml_node_t *node, void *obj);
static int parse_dedupe(struct parser *p, yaml_node_t *node, void *obj);
static int parse_resolution(struct parser *p, yaml_node_t *node, void *obj);
static int parse_wait_replicas(struct parser *p, yaml_node_t *node, void *obj);
static int parse_listen(struct parser *p, yaml_node_t *node, void *obj);
static int parse_registry(struct parser *p, yaml_node_t *node, void *obj);
static void print_schemas(const void *obj, FILE *out, int indent);
static void print_writer_schema(const void *obj, FILE *out, int indent);
static void print_registry(const void *obj, FILE *out, int indent);
static void print_nodes(const void *obj, FILE *out, int indent);
static void print_redis_tls(const void *obj, FILE *out, int indent);
static void print_wait_replicas(const void *obj, FILE *out, int indent);
static void print_listen(const void *obj, FILE *out, int indent);
static void print_profiles(const void *obj, FILE *out, int indent);
static void print_resolution(const void *obj, FILE *out, int indent);
static void print_dedupe(const void *obj, FILE *out, int indent);
static void print_windows(const void *obj, FILE *out, int indent);
static int parse_decay(struct parser *p, yaml_node_t *node, void *obj);
static void print_table(const struct key_def *table, const void *obj, FILE *out, int indent);
static void print_decay(const void *obj, FILE *out, int indent);

#define C(member) FIELD(struct lb_config, member)

static const struct key_def kafka_keys[] = {
    {.name = "brokers",
     .type = KT_STRING,
     .offset = C(brokers),
     .flags = F_REQUIRED,
     .doc = "bootstrap servers, host:port[,host:port...]"},
    {.name = "group",
     .type = KT_STRING,
     .offset = C(group),
     .def = "leaderboard-projector",
     .doc = "consumer group id shared by every projector pod"},
    {.name = "topics",
     .type = KT_STRINGS,
     .offset = C(topics),
     .flags = F_REQUIRED,
     .doc = "topics carrying score events"},
    {.name = "commit_interval",
     .type = KT_DURATION,
     .offset = C(commit_interval_ms),
     .def = "1s",
     .min = 0,
     .max = 60000,
     .doc = "how often durable offsets are committed (0: after every batch)"},
    {.name = "dlq_topic",
     .type = KT_STRING,
     .offset = C(dlq_topic),
     .doc = "dead-letter topic for events that cannot be projected (unset: log and skip)"},
    {0}};

static const struct key_def registry_keys[] = {
    {.name = "url",
     .type = KT_STRING,
     .offset = C(registry_url),
     .doc = "http(s)://host:port[/base/path] of a Confluent-compatible schema registry"},
    {.name = "user",
     .type = KT_STRING,
     .offset = C(registry_user),
     .doc = "basic auth user (with password or password_file)"},
    {.name = "password",
     .type = KT_SECRET,
     .offset = C(registry_password),
     .source_offset = C(registry_password_source),
     .file_key = "password_file",
     .doc = "basic auth password; use ${ENV_VAR} or password_file"},
    {.name = "password_file",
     .type = KT_PATH,
     .offset = C(registry_password_file),
     .doc = "file holding the basic auth password (read at start; a trailing newline is dropped)"},
    {.name = "ca_file",
     .type = KT_PATH,
     .offset = C(registry_ca_file),
     .doc = "https: CA certificates (PEM) that sign the registry's certificate (default: the "
            "system's)"},
    {.name = "timeout",
     .type = KT_DURATION,
     .offset = C(registry_timeout_ms),
     .def = "5s",
     .min = 100,
     .max = 60000,
     .doc = "time allowed for one request to the registry"},
    {0}};

static const struct key_def input_keys[] = {
    {.name = "format",
     .type = KT_CHOICE,
     .offset = C(wire_format),
     .def = "confluent",
     .choices = wire_choices,
     .doc = "confluent (0x00 + schema id + Avro) or bare (Avro with writer_schema)"},
    {.name = "schemas",
     .type = KT_CUSTOM,
     .custom = parse_schemas,
     .print = print_schemas,
     .doc = "confluent: mapping of schema id to writer schema file (.avsc)"},
    {.name = "writer_schema",
     .type = KT_CUSTOM,
     .custom = parse_schemas,
     .print = print_writer_schema,
     .doc = "bare: the writer schema file (.avsc)"},
    {.name = "registry",
     .type = KT_CUSTOM,
     .custom = parse_registry,
     .print = print_registry,
     .doc = "confluent: a schema registry that supplies writer schemas input.schemas lacks"},
    {.name = "max_future",
     .type = KT_DURATION,
     .offset = C(max_future_ms),
     .def = "5m",
     .min = 0,
     .max = INT64_C(31536000000),
     .doc = "how far an event's ts may be ahead of its Kafka record's timestamp; 0: no bound"},
    {0}};

static const char *const bool_choices[] = {"false", "true", NULL};

static const struct key_def redis_tls_keys[] = {
    {.name = "enabled",
     .type = KT_CHOICE,
     .offset = C(redis_tls_enabled),
     .def = "false",
     .choices = bool_choices,
     .doc = "TLS on every Redis connection (the nodes' tls-port)"},
    {.name = "ca_file",
     .type = KT_PATH,
     .offset = C(redis_tls_ca_file),
     .doc = "CA certificates (PEM) that sign the nodes' certificates (default: the system's)"},
    {.name = "cert_file",
     .type = KT_PATH,
     .offset = C(redis_tls_cert_file),
     .doc = "client certificate chain (PEM), for nodes that require one (tls-auth-clients)"},
    {.name = "key_file",
     .type = KT_PATH,
     .offset = C(redis_tls_key_file),
     .doc = "private key (PEM) of cert_file"},
    {.name = "server_name",
     .type = KT_STRING,
     .offset = C(redis_tls_server_name),
     .doc = "name every node's certificate is verified against, and sent as SNI (default: the "
            "node's announced hostname, else its IP address)"},
    {.name = "verify",
     .type = KT_CHOICE,
     .offset = C(redis_tls_verify),
     .def = "true",
     .choices = bool_choices,
     .doc = "verify the nodes' certificates; false only for tests"},
    {0}};

static int parse_redis_tls(struct parser *p, yaml_node_t *node, void *obj);

static const struct key_def results_keys[] = {
    {.name = "topic",
     .type = KT_STRING,
     .offset = C(results_topic),
     .doc = "the Kafka topic final standings are published to, keyed by {board}:window"},
    {.name = "schema_id",
     .type = KT_INT,
     .offset = C(results_schema_id),
     .min = 1,
     .max = INT32_MAX,
     .doc = "the schema id written in each record's Confluent frame: leaderboard.v1.WindowResult "
            "(schemas/window_result.avsc) as registered for the topic"},
    {.name = "idle",
     .type = KT_DURATION,
     .offset = C(results_idle_ms),
     .def = "5m",
     .min = 0,
     .max = INT64_C(2592000000),
     .doc = "a partition with nothing left to read whose watermark is this far behind the "
            "topic's highest holds no window open"},
    {.name = "lease",
     .type = KT_DURATION,
     .offset = C(results_lease_ms),
     .def = "30s",
     .min = 1000,
     .max = INT64_C(3600000),
     .doc = "how long a pod that claimed a closed window has to publish it: one that dies "
            "holding it delays that window's publication this long (another pod then publishes "
            "the same bytes)"},
    {.name = "keep",
     .type = KT_CHOICE,
     .offset = C(results_keep),
     .def = "true",
     .choices = bool_choices,
     .doc = "keep the frozen standings in <prefix>{board}:final:<window> (no expiry) once "
            "published"},
    {0}};

static int parse_results(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_config *config = obj;
    if (node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node),
                    "results: expected a mapping such as {topic: T, schema_id: N}");
    config->results_line = line_of(node);
    return parse_mapping(p, results_keys, node, line_of(node), config, "results", 0);
}

static void print_results(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (!config->results_line) {
        fprintf(out, "%*s# results: not set (no window publishes final standings)\n", indent, "");
        return;
    }
    fprintf(out, "%*sresults:\n", indent, "");
    print_table(results_keys, config, out, indent + 2);
}

static const struct key_def redis_keys[] = {
    {.name = "nodes",
     .type = KT_CUSTOM,
     .custom = parse_hosts,
     .print = print_nodes,
     .flags = F_REQUIRED,
     .doc = "seed nodes, host:port; any subset of the cluster"},
    {.name = "key_prefix",
     .type = KT_STRING,
     .offset = C(key_prefix),
     .def = "lb:",
     .flags = F_EMPTY,
     .doc = "prefix of every key written"},
    {.name = "user",
     .type = KT_STRING,
     .offset = C(redis_user),
     .doc = "ACL user for AUTH (with password)"},
    {.name = "password",
     .type = KT_SECRET,
     .offset = C(redis_password),
     .source_offset = C(redis_password_source),
     .doc = "password for AUTH; use ${ENV_VAR}"},
    {.name = "tls",
     .type = KT_CUSTOM,
     .custom = parse_redis_tls,
     .print = print_redis_tls,
     .doc = "TLS to the nodes: enabled, ca_file, cert_file and key_file (mutual TLS), "
            "server_name, verify; files are read at start (a restart picks up new ones)"},
    {.name = "connect_timeout",
     .type = KT_DURATION,
     .offset = C(connect_timeout_ms),
     .def = "1s",
     .min = 1,
     .max = 60000,
     .doc = "TCP connect timeout"},
    {.name = "wait_replicas",
     .type = KT_CUSTOM,
     .custom = parse_wait_replicas,
     .print = print_wait_replicas,
     .doc = "replicas a batch's writes must reach before their offsets advance: auto or a "
            "number"},
    {.name = "wait_timeout",
     .type = KT_DURATION,
     .offset = C(wait_timeout_ms),
     .def = "1s",
     .min = 1,
     .max = 60000,
     .doc = "how long WAIT may take before the batch is retried"},
    {.name = "command_timeout",
     .type = KT_DURATION,
     .offset = C(command_timeout_ms),
     .def = "5s",
     .min = 1,
     .max = 600000,
     .doc = "time allowed for a pipeline's replies"},
    {0}};

static const struct key_def batch_keys[] = {
    {.name = "max_events",
     .type = KT_INT,
     .offset = C(batch_max_events),
     .def = "5000",
     .min = 1,
     .max = 1000000,
     .doc = "most events projected in one batch"},
    {.name = "linger",
     .type = KT_DURATION,
     .offset = C(batch_linger_ms),
     .def = "20ms",
     .min = 0,
     .max = 10000,
     .doc = "how long a batch waits to fill before it is written"},
    {0}};

static const char *const log_format_choices[] = {"logfmt", "json", NULL};

static const struct key_def log_keys[] = {{.name = "level",
                                           .type = KT_CHOICE,
                                           .offset = C(log_level),
                                           .def = "info",
                                           .choices = level_choices,
                                           .doc = "error, warn, info or debug; SIGHUP re-reads it"},
                                          {.name = "format",
                                           .type = KT_CHOICE,
                                           .offset = C(log_json),
                                           .def = "logfmt",
                                           .choices = log_format_choices,
                                           .doc = "logfmt or json (one object per line)"},
                                          {0}};

static const struct key_def metrics_keys[] = {
    {.name = "listen",
     .type = KT_CUSTOM,
     .custom = parse_listen,
     .print = print_listen,
     .doc = "host:port of /metrics, /healthz and /readyz (unset: no server)"},
    {0}};

static const struct key_def shutdown_keys[] = {
    {.name = "drain_timeout",
     .type = KT_DURATION,
     .offset = C(drain_timeout_ms),
     .def = "20s",
     .min = 0,
     .max = 3600000,
     .doc = "after SIGTERM, how long the batch in hand may keep retrying Redis or the DLQ "
            "before the projector exits without committing it"},
    {0}};

static const struct key_def top_keys[] = {
    {.name = "kafka",
     .type = KT_SECTION,
     .section = kafka_keys,
     .flags = F_REQUIRED | F_PASSTHROUGH | F_LINE,
     .line_offset = C(kafka_line),
     .doc = "the source topics and consumer group"},
    {.name = "input",
     .type = KT_SECTION,
     .section = input_keys,
     .flags = F_LINE,
     .line_offset = C(input_line),
     .doc = "the wire format of the events"},
    {.name = "redis",
     .type = KT_SECTION,
     .section = redis_keys,
     .flags = F_REQUIRED | F_LINE,
     .line_offset = C(redis_line),
     .doc = "the Redis Cluster (or standalone Redis) written to"},
    {.name = "batch", .type = KT_SECTION, .section = batch_keys, .doc = "batching"},
    {.name = "log", .type = KT_SECTION, .section = log_keys, .doc = "logging"},
    {.name = "shutdown", .type = KT_SECTION, .section = shutdown_keys, .doc = "stopping"},
    {.name = "metrics",
     .type = KT_SECTION,
     .section = metrics_keys,
     .doc = "the metrics and health endpoints"},
    {.name = "results",
     .type = KT_CUSTOM,
     .custom = parse_results,
     .print = print_results,
     .doc = "where final standings of closed windows go (README \"Final standings\")"},
    {.name = "profiles",
     .type = KT_CUSTOM,
     .custom = parse_profiles,
     .print = print_profiles,
     .doc = "board profiles: scoring and windows, matched by board id"},
    {0}};

#define P(member) FIELD(struct lb_profile, member)

static const struct key_def split_keys[] = {
    {.name = "shards",
     .type = KT_INT,
     .offset = P(shards),
     .def = "1",
     .min = 1,
     .max = LB_SHARDS_MAX,
     .doc = "hash tags the board is split over by player (1: one tag, not split)"},
    {.name = "top",
     .type = KT_INT,
     .offset = P(top),
     .def = "100",
     .min = 1,
     .max = LB_TOP_MAX,
     .doc = "entries of each window's merged top, <prefix>{<board>}:top:<window>"},
    {.name = "staleness",
     .type = KT_DURATION,
     .offset = P(staleness_ms),
     .def = "1s",
     .min = 40,
     .max = 600000,
     .doc = "a change shows in the merged top within this (a refresh waits a quarter of it to "
            "gather changes)"},
    {0}};

static const struct key_def profile_keys[] = {
    {.name = "name",
     .type = KT_STRING,
     .offset = P(name),
     .flags = F_REQUIRED,
     .doc = "the profile's name, used in messages"},
    {.name = "match",
     .type = KT_STRINGS,
     .offset = P(match),
     .def = "*",
     .doc = "board id patterns (shell wildcards); the first matching profile wins"},
    {.name = "order",
     .type = KT_CHOICE,
     .offset = P(scoring.order),
     .def = "desc",
     .choices = order_choices,
     .doc = "desc: higher is better; asc: lower is better"},
    {.name = "aggregation",
     .type = KT_CHOICE,
     .offset = P(aggregation),
     .def = "best",
     .choices = aggregation_choices,
     .doc = "best: keep each player's best score"},
    {.name = "retractions",
     .type = KT_CHOICE,
     .offset = P(reject_retractions),
     .def = "allow",
     .choices = retraction_choices,
     .doc = "reject: dead-letter RETRACT events (best boards then go without a script)"},
    {.name = "tie_break",
     .type = KT_CHOICE,
     .offset = P(scoring.tie_break),
     .def = "earliest",
     .choices = tie_choices,
     .doc = "who ranks first among equal scores"},
    {.name = "tie_resolution",
     .type = KT_CUSTOM,
     .custom = parse_resolution,
     .print = print_resolution,
     .doc = "tick of the tie-breaker: ms, s, min, h or d (default s)"},
    {.name = "epoch",
     .type = KT_TIME,
     .offset = P(scoring.epoch_ms),
     .def = "2025-01-01T00:00:00Z",
     .doc = "earliest accepted event time"},
    {.name = "horizon",
     .type = KT_TIME,
     .offset = P(scoring.horizon_ms),
     .def = "2057-01-01T00:00:00Z",
     .doc = "first event time no longer accepted"},
    {.name = "score_min",
     .type = KT_INT,
     .offset = P(scoring.score_min),
     .def = "0",
     .min = INT64_MIN,
     .max = INT64_MAX,
     .doc = "lowest accepted raw score"},
    {.name = "score_max",
     .type = KT_INT,
     .offset = P(scoring.score_max),
     .def = "8388607",
     .min = INT64_MIN,
     .max = INT64_MAX,
     .doc = "highest accepted raw score (the default is the largest that fits the default ties)"},
    {.name = "sum_min",
     .type = KT_INT,
     .offset = P(sum_min),
     .def = "0",
     .min = INT64_MIN,
     .max = INT64_MAX,
     .doc = "sum boards: the lowest total a player may reach"},
    {.name = "sum_max",
     .type = KT_INT,
     .offset = P(sum_max),
     .min = INT64_MIN,
     .max = INT64_MAX,
     .doc = "sum boards: the highest total (default: the largest the tie bits leave room for)"},
    {.name = "dedupe",
     .type = KT_CUSTOM,
     .custom = parse_dedupe,
     .print = print_dedupe,
     .doc = "count each event_id once: {window: DURATION} or off (default: {window: 24h} for "
            "sum boards and boards that take retractions, off otherwise)"},
    {.name = "windows",
     .type = KT_CUSTOM,
     .custom = parse_windows,
     .print = print_windows,
     .doc = "windows and their retention (default: alltime, daily, weekly, monthly)"},
    {.name = "split",
     .type = KT_SECTION,
     .section = split_keys,
     .flags = F_LINE,
     .line_offset = P(split_line),
     .doc = "a hot board over several hash tags (README \"Split boards\")"},
    {.name = "decay",
     .type = KT_CUSTOM,
     .custom = parse_decay,
     .print = print_decay,
     .doc = "a decaying board: {dim, tax, stacking, max_age, precision, key} (default: none)"},
    {0}};

/* ---- custom keys -------------------------------------------------------------- */

static int parse_resolution(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_profile *profile = obj;
    if (node->type != YAML_SCALAR_NODE ||
        !(profile->scoring.resolution_ms = lb_resolution_parse(scalar_text(node))))
        return fail(p, line_of(node), "tie_resolution: expected ms, s, min, h or d");
    return 0;
}

static int parse_wait_replicas(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_config *config = obj;
    int64_t n;
    if (node->type == YAML_SCALAR_NODE && strcmp(scalar_text(node), "auto") == 0) {
        config->wait_replicas = -1;
        return 0;
    }
    if (node->type != YAML_SCALAR_NODE || parse_int(scalar_text(node), &n) != 0 || n < 0 || n > 16)
        return fail(p, line_of(node), "wait_replicas: expected auto or a number from 0 to 16");
    config->wait_replicas = (int)n;
    return 0;
}

/* metrics.listen: "host:port" with an IPv4 host (or none: every
 * interface), checked here so a typo stops the start with its line. */
static int parse_listen(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_config *config = obj;
    if (node->type != YAML_SCALAR_NODE)
        return fail(p, line_of(node), "listen: expected host:port, e.g. 0.0.0.0:9464");
    char *text = expand(p, line_of(node), scalar_text(node));
    if (!text)
        return -1;
    const char *colon = strrchr(text, ':');
    char host[64];
    struct in_addr addr;
    int64_t port;
    if (!colon || (size_t)(colon - text) >= sizeof(host) || parse_int(colon + 1, &port) != 0 ||
        port < 1 || port > 65535) {
        free(text);
        return fail(p, line_of(node), "listen: expected host:port, e.g. 0.0.0.0:9464");
    }
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    if (host[0] && inet_pton(AF_INET, host, &addr) != 1) {
        free(text);
        return fail(p, line_of(node), "listen: '%s' is not an IPv4 address", host);
    }
    free(config->metrics_listen);
    config->metrics_listen = text;
    return 0;
}

/* Returns 0, -1 when 'text' is not host:port, -2 when out of memory. */
static int parse_host(const char *text, struct lb_host *host)
{
    const char *colon = strrchr(text, ':');
    int64_t port;
    if (!colon || colon == text || parse_int(colon + 1, &port) != 0 || port < 1 || port > 65535)
        return -1;
    const char *start = text, *end = colon;
    if (*start == '[' && end[-1] == ']') {
        start++;
        end--;
    }
    host->host = strndup(start, (size_t)(end - start));
    host->port = (int)port;
    return host->host ? 0 : -2;
}

static int parse_hosts(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_config *config = obj;
    struct key_def def = {.name = "nodes", .type = KT_STRINGS, .offset = 0};
    struct {
        char **list;
        size_t count;
    } strings = {0};
    int rc = parse_strings(p, &def, node, &strings);
    if (rc == 0 && strings.count == 0)
        rc = fail(p, line_of(node), "nodes: list at least one Redis node as host:port");
    if (rc == 0) {
        config->redis_nodes = calloc(strings.count, sizeof(*config->redis_nodes));
        if (!config->redis_nodes)
            rc = fail(p, line_of(node), "out of memory");
    }
    for (size_t i = 0; rc == 0 && i < strings.count; i++) {
        int bad = parse_host(strings.list[i], &config->redis_nodes[i]);
        if (bad == -2)
            rc = fail(p, line_of(node), "out of memory");
        else if (bad)
            rc = fail(p, line_of(node), "nodes: \"%s\" is not host:port", strings.list[i]);
        else
            config->nredis_nodes++;
    }
    for (size_t i = 0; i < strings.count; i++)
        free(strings.list[i]);
    free(strings.list);
    return rc;
}

static int add_schema(struct parser *p, struct lb_config *config, int32_t id, yaml_node_t *value)
{
    struct key_def def = {.name = "schema file", .type = KT_PATH, .offset = 0};
    char *path = NULL;
    for (size_t i = 0; i < config->nschemas; i++)
        if (config->schemas[i].id == id)
            return fail(p, line_of(value), "schema id %d is mapped twice", id);
    if (value->type == YAML_SCALAR_NODE && !*scalar_or_empty(value)) {
        if (id < 0)
            return fail(p, line_of(value), "writer_schema: give the writer schema's .avsc file");
        return fail(p, line_of(value), "schemas: give schema id %d's .avsc file", id);
    }
    if (parse_scalar_node(p, &def, value, &path) != 0)
        return -1;
    struct lb_schema_ref *refs = realloc(config->schemas, (config->nschemas + 1) * sizeof(*refs));
    if (!refs) {
        free(path);
        return fail(p, line_of(value), "out of memory");
    }
    config->schemas = refs;
    refs[config->nschemas++] =
        (struct lb_schema_ref){.id = id, .path = path, .line = line_of(value)};
    return 0;
}

/* input.registry, remembering its line for the checks made later. */
static int parse_registry(struct parser *p, yaml_node_t *node, void *obj)
{
    ((struct lb_config *)obj)->registry_line = line_of(node);
    return parse_mapping(p, registry_keys, node, line_of(node), obj, "registry", 0);
}

/* redis.tls, remembering its line for the checks made later. */
static int parse_redis_tls(struct parser *p, yaml_node_t *node, void *obj)
{
    ((struct lb_config *)obj)->redis_tls_line = line_of(node);
    return parse_mapping(p, redis_tls_keys, node, line_of(node), obj, "tls", 0);
}

/* 'schemas' (id -> file) and 'writer_schema' (one file, id -1) share storage;
 * which one the format needs is checked after the walk. */
static int parse_schemas(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_config *config = obj;
    if (node->type == YAML_SCALAR_NODE)
        return add_schema(p, config, -1, node);
    if (node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node), "schemas: expected a mapping of schema id to .avsc file");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(&p->doc, pair->key);
        int64_t id;
        if (key->type != YAML_SCALAR_NODE || parse_int(scalar_text(key), &id) != 0 || id < 0 ||
            id > INT32_MAX)
            return fail(p, line_of(key), "schemas: keys are schema registry ids (integers)");
        if (add_schema(p, config, (int32_t)id, yaml_document_get_node(&p->doc, pair->value)) != 0)
            return -1;
    }
    return 0;
}

#define W(member) FIELD(struct lb_window_config, member)

static int parse_results_top(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_window_config *w = obj;
    const char *text = node->type == YAML_SCALAR_NODE ? scalar_text(node) : "";
    char *end;
    long long n = strtoll(text, &end, 10);
    if (strcmp(text, "all") == 0)
        w->results_top = 0;
    else if (*text && !*end && n >= 1 && n <= LB_RESULTS_TOP_MAX)
        w->results_top = n;
    else
        return fail(p, line_of(node), "results.top: expected 1 to %d entries, or all, not '%s'",
                    LB_RESULTS_TOP_MAX, text);
    return 0;
}

static const struct key_def window_results_keys[] = {
    {.name = "top",
     .type = KT_CUSTOM,
     .custom = parse_results_top,
     .doc = "the entries published: 1..100000, or all (in numbered parts)"},
    {.name = "grace",
     .type = KT_DURATION,
     .offset = W(results_grace_ms),
     .def = "1h",
     .min = 0,
     .max = INT64_C(2592000000),
     .doc = "how long after its end, in event time, the window takes late events"},
    {0}};

static int parse_window_results(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_window_config *w = obj;
    if (node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node), "results: expected a mapping such as {top: 1000, grace: 1h}");
    w->results_top = 1000;
    w->results_line = line_of(node);
    return parse_mapping(p, window_results_keys, node, line_of(node), w, "results", 0);
}

static const struct key_def window_keys[] = {
    {.name = "ttl",
     .type = KT_DURATION,
     .offset = W(ttl_ms),
     .min = 0,
     .max = LB_TTL_MAX_MS, /* Redis refuses expiry times past this, and end + ttl must fit */
     .doc = "time windows: how long a key is kept after its window closes; custom: after its "
            "last write"},
    {.name = "dim", .type = KT_STRING, .offset = W(dim), .doc = "custom: the dims key"},
    {.name = "results",
     .type = KT_CUSTOM,
     .custom = parse_window_results,
     .doc = "daily, weekly, monthly: final standings once the window closed, {top, grace}"},
    {0}};

static const int64_t default_ttl_ms[] = {
    [LB_WINDOW_ALLTIME] = 0,
    [LB_WINDOW_DAILY] = 7 * INT64_C(86400000),
    [LB_WINDOW_WEEKLY] = 28 * INT64_C(86400000),
    [LB_WINDOW_MONTHLY] = 93 * INT64_C(86400000),
    [LB_WINDOW_CUSTOM] = 0,
};

static struct lb_window_config *add_window(struct lb_profile *profile, enum lb_window_kind kind)
{
    struct lb_window_config *w = realloc(profile->windows, (profile->nwindows + 1) * sizeof(*w));
    if (!w)
        return NULL;
    profile->windows = w;
    w = &w[profile->nwindows++];
    *w = (struct lb_window_config){.kind = kind, .ttl_ms = default_ttl_ms[kind], .results_top = -1};
    return w;
}

static int parse_one_window(struct parser *p, struct lb_profile *profile, enum lb_window_kind kind,
                            yaml_node_t *settings)
{
    struct lb_window_config *w = add_window(profile, kind);
    if (!w)
        return fail(p, line_of(settings), "out of memory");
    int null_value = settings->type == YAML_SCALAR_NODE && !*scalar_or_empty(settings);
    if (settings->type == YAML_SCALAR_NODE && !null_value) {
        /* shorthand: "daily: 7d" */
        struct key_def ttl = window_keys[0];
        if (kind == LB_WINDOW_ALLTIME)
            return fail(p, line_of(settings), "alltime has no ttl; write 'alltime: {}'");
        if (kind == LB_WINDOW_CUSTOM)
            return fail(p, line_of(settings),
                        "custom windows need 'dim': write {dim: NAME, ttl: DURATION}");
        return parse_scalar_node(p, &ttl, settings, w);
    }
    if (!null_value && parse_mapping(p, window_keys, settings, line_of(settings), w,
                                     lb_window_kind_name(kind), 0) != 0)
        return -1;
    if (kind == LB_WINDOW_CUSTOM && (!w->dim || !*w->dim))
        return fail(p, line_of(settings), "custom windows need 'dim', the dims key to window by");
    if (kind != LB_WINDOW_CUSTOM && w->dim)
        return fail(p, line_of(settings), "'dim' applies only to custom windows");
    if (kind == LB_WINDOW_ALLTIME && w->ttl_ms)
        return fail(p, line_of(settings), "alltime keys never expire; remove its ttl");
    if (w->results_top >= 0 && (kind == LB_WINDOW_ALLTIME || kind == LB_WINDOW_CUSTOM))
        return fail(p, w->results_line,
                    "results: %s windows never close; final standings are for daily, weekly and "
                    "monthly windows",
                    lb_window_kind_name(kind));
    if (w->results_top >= 0 && w->ttl_ms && w->ttl_ms <= w->results_grace_ms)
        return fail(p, w->results_line,
                    "results: the %s keys expire %lld s after the window ends, before it closes "
                    "(grace %lld s): raise its ttl well past the grace",
                    lb_window_kind_name(kind), (long long)(w->ttl_ms / 1000),
                    (long long)(w->results_grace_ms / 1000));
    if (w->dim && (lb_window_kind_parse(w->dim) >= 0 || strpbrk(w->dim, "{}:") ||
                   w->dim[0] == '~' || strcmp(w->dim, "final") == 0 || /* apply.h LB_FINAL_PREFIX */
                   strlen(w->dim) > LB_NAME_MAX))
        return fail(p, line_of(settings),
                    "custom window dim \"%s\" must be at most %d bytes, not a window kind name "
                    "nor \"final\", not start with '~' (kept for the projector's own keys), and "
                    "contain no '{', '}' or ':'",
                    w->dim, LB_NAME_MAX);
    return 0;
}

static int parse_windows(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_profile *profile = obj;
    if (node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node),
                    "windows: expected a mapping such as "
                    "{alltime: {}, daily: {ttl: 7d}}");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(&p->doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(&p->doc, pair->value);
        int kind = key->type == YAML_SCALAR_NODE ? lb_window_kind_parse(scalar_text(key)) : -1;
        if (kind < 0)
            return fail(p, line_of(key),
                        "unknown window '%s' (known: alltime, daily, weekly, monthly, custom)",
                        key->type == YAML_SCALAR_NODE ? scalar_text(key) : "?");
        for (size_t i = 0; i < profile->nwindows; i++)
            if (kind != LB_WINDOW_CUSTOM && profile->windows[i].kind == (enum lb_window_kind)kind)
                return fail(p, line_of(key), "window '%s' is listed twice", scalar_text(key));
        if (kind == LB_WINDOW_CUSTOM) {
            if (value->type != YAML_SEQUENCE_NODE)
                return fail(p, line_of(value),
                            "custom: expected a list such as "
                            "[{dim: patch, ttl: 90d}]");
            for (yaml_node_item_t *item = value->data.sequence.items.start;
                 item < value->data.sequence.items.top; item++)
                if (parse_one_window(p, profile, LB_WINDOW_CUSTOM,
                                     yaml_document_get_node(&p->doc, *item)) != 0)
                    return -1;
            continue;
        }
        if (parse_one_window(p, profile, (enum lb_window_kind)kind, value) != 0)
            return -1;
    }
    if (profile->nwindows == 0)
        return fail(p, line_of(node), "windows: a profile needs at least one window");
    return 0;
}

static const struct key_def dedupe_keys[] = {
    {.name = "window",
     .type = KT_DURATION,
     .offset = P(dedupe_window_ms),
     .flags = F_REQUIRED,
     .min = 1000,
     .max = LB_DEDUPE_MAX_MS,
     .doc = "how far behind the board's latest event time a duplicate is still caught"},
    {0}};

static int parse_dedupe(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_profile *profile = obj;
    if (node->type == YAML_SCALAR_NODE && strcmp(scalar_text(node), "off") == 0) {
        profile->dedupe_window_ms = 0;
        return 0;
    }
    if (node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node), "dedupe: expected {window: DURATION} (e.g. 24h) or off");
    return parse_mapping(p, dedupe_keys, node, line_of(node), profile, "dedupe", 0);
}

static const char *const stacking_choices[] = {"linear", "compound", NULL};

#define D(member) FIELD(struct lb_decay_config, member)

static const struct key_def decay_keys[] = {
    {.name = "dim",
     .type = KT_STRING,
     .offset = D(dim),
     .flags = F_REQUIRED,
     .doc = "the dim of a custom window (without ttl) whose value names the patch"},
    {.name = "tax",
     .type = KT_STRING,
     .offset = D(tax),
     .flags = F_REQUIRED,
     .doc = "the tax per patch behind: a decimal of at most four places (0.1: 10%)"},
    {.name = "stacking",
     .type = KT_CHOICE,
     .offset = D(stacking),
     .def = "linear",
     .choices = stacking_choices,
     .doc = "linear: factor 1 + tax*age; compound: (1 + tax)^age"},
    {.name = "max_age",
     .type = KT_INT,
     .offset = D(max_age),
     .def = "10",
     .min = 0,
     .max = LB_DECAY_MAX_AGE,
     .doc = "patches behind after which the tax stops growing"},
    {.name = "precision",
     .type = KT_STRING,
     .offset = D(precision),
     .def = "0.01",
     .doc = "the unit the after-tax score is rounded to (half up): 1, 0.1, 0.01, 0.001 or "
            "0.0001 of a raw score"},
    {.name = "key",
     .type = KT_STRING,
     .offset = D(key),
     .def = "decayed",
     .doc = "the overall board's key: <prefix>{<board>}:<key>"},
    {.name = "patches",
     .type = KT_STRINGS,
     .offset = D(patches),
     .doc = "the patches in order, oldest first: a patch's age is its distance to the newest "
            "one written; events naming another are dead-lettered (default: every value seen, "
            "in version order, the age counting the patches seen after it)"},
    {0}};

int lb_decay_patch_index(const struct lb_decay_config *decay, const char *name, size_t len)
{
    for (size_t i = 0; i < decay->npatches; i++)
        if (strlen(decay->patches[i]) == len && memcmp(decay->patches[i], name, len) == 0)
            return (int)i;
    return -1;
}

static void free_strings(char **list, size_t n);

static void decay_free(struct lb_decay_config *decay)
{
    if (!decay)
        return;
    free(decay->dim);
    free(decay->tax);
    free(decay->precision);
    free(decay->key);
    free_strings(decay->patches, decay->npatches);
    free(decay);
}

static int parse_decay(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_profile *profile = obj;
    if (node->type != YAML_MAPPING_NODE)
        return fail(p, line_of(node), "decay: expected a mapping such as {dim: patch, tax: 0.1}");
    struct lb_decay_config *decay = calloc(1, sizeof(*decay));
    if (!decay)
        return fail(p, line_of(node), "out of memory");
    decay_free(profile->decay);
    profile->decay = decay;
    decay->line = line_of(node);
    return parse_mapping(p, decay_keys, node, line_of(node), decay, "decay", 0);
}

/* The precision as taxed units per raw unit: 0.01 is 100. 0, or -1. */
static int parse_precision(const char *text, int64_t *scale)
{
    static const char *const known[] = {"1", "0.1", "0.01", "0.001", "0.0001"};
    for (size_t i = 0, s = 1; i < sizeof(known) / sizeof(known[0]); i++, s *= 10)
        if (strcmp(text, known[i]) == 0) {
            *scale = (int64_t)s;
            return 0;
        }
    return -1;
}

/* A decaying board's rules, once the rest of its profile is known. */
static int check_decay(struct parser *p, struct lb_profile *profile)
{
    struct lb_decay_config *decay = profile->decay;
    struct lb_decay *rule = &decay->rule;
    char err[512];
    if (profile->aggregation != LB_AGG_BEST || !profile->reject_retractions)
        return fail(p, decay->line,
                    "profile '%s': decay needs aggregation: best and retractions: reject (a "
                    "retraction would have to take the player's entry out of every patch's "
                    "after-tax score)",
                    profile->name);
    if (lb_decay_parse_tax(decay->tax, &rule->tax) != 0)
        return fail(p, decay->line,
                    "decay.tax: \"%s\" is not a decimal between 0 and 100 with at most %d "
                    "places (0.1 is 10%% per patch)",
                    decay->tax, LB_DECAY_TAX_PLACES);
    if (parse_precision(decay->precision, &rule->scale) != 0)
        return fail(p, decay->line,
                    "decay.precision: \"%s\" is not one of 1, 0.1, 0.01, 0.001, 0.0001",
                    decay->precision);
    rule->stacking = (enum lb_decay_stacking)decay->stacking;
    rule->max_age = (int)decay->max_age;
    rule->desc = profile->scoring.order == LB_ORDER_DESC;
    size_t w = 0;
    while (w < profile->nwindows && !(profile->windows[w].kind == LB_WINDOW_CUSTOM &&
                                      strcmp(profile->windows[w].dim, decay->dim) == 0))
        w++;
    if (w == profile->nwindows)
        return fail(p, decay->line,
                    "decay.dim '%s' is not the dim of one of the profile's custom windows; add "
                    "custom: [{dim: %s}] to its windows",
                    decay->dim, decay->dim);
    if (profile->windows[w].ttl_ms)
        return fail(p, decay->line,
                    "decay.dim '%s': its window has a ttl; the overall board is computed from "
                    "every patch's board, which must not expire: remove the ttl",
                    decay->dim);
    decay->window = (uint32_t)w;
    int clash = lb_window_kind_parse(decay->key) >= 0 || strpbrk(decay->key, "{}:") ||
                decay->key[0] == '~' || strlen(decay->key) > LB_NAME_MAX;
    for (size_t i = 0; i < profile->nwindows && !clash; i++)
        clash = profile->windows[i].dim && strcmp(profile->windows[i].dim, decay->key) == 0;
    if (clash)
        return fail(p, decay->line,
                    "decay.key \"%s\" must be at most %d bytes, not a window's name or dim, not "
                    "start with '~', and contain no '{', '}' or ':'",
                    decay->key, LB_NAME_MAX);
    if (decay->npatches > LB_DECAY_PATCHES)
        return fail(p, decay->line, "decay.patches: %zu patches; at most %d", decay->npatches,
                    LB_DECAY_PATCHES);
    for (size_t i = 0; i < decay->npatches; i++) {
        const char *name = decay->patches[i];
        if (!lb_id_is_valid((struct lb_str){name, (uint32_t)strlen(name)}))
            return fail(p, decay->line,
                        "decay.patches: \"%s\" is not a patch name (1..%d bytes of UTF-8 "
                        "without control bytes)",
                        name, LB_ID_MAX_BYTES);
        if (lb_decay_patch_index(decay, name, strlen(name)) != (int)i)
            return fail(p, decay->line, "decay.patches: \"%s\" is listed twice", name);
    }
    unsigned bits = profile->scoring.tie_bits;
    int64_t limit = bits >= 53 ? 0 : (INT64_C(1) << (53 - bits)) - 1;
    if (lb_decay_check(rule, profile->scoring.score_min, profile->scoring.score_max, limit, err,
                       sizeof(err)) != 0)
        return fail(p, decay->line, "profile '%s': decay: %s", profile->name, err);
    return 0;
}

static void print_decay(const void *obj, FILE *out, int indent)
{
    const struct lb_profile *profile = obj;
    if (!profile->decay) {
        fprintf(out, "%*s# decay: not set (a decaying board: {dim, tax, ...})\n", indent, "");
        return;
    }
    fprintf(out, "%*sdecay:\n", indent, "");
    print_table(decay_keys, profile->decay, out, indent + 2);
}

/* Sum boards store totals, so the 2^53 budget applies to [sum_min, sum_max]
 * rather than to one event's score range (which still bounds each event). */
static int check_sum_budget(struct parser *p, struct lb_profile *profile, int sum_max_set)
{
    char err[512];
    struct lb_scoring totals = profile->scoring;
    if (!sum_max_set)
        profile->sum_max = profile->scoring.tie_bits >= 53
                               ? 0
                               : (INT64_C(1) << (53 - profile->scoring.tie_bits)) - 1;
    totals.score_min = profile->sum_min;
    totals.score_max = profile->sum_max;
    if (lb_scoring_prepare_range(&totals, profile->name, "sum", err, sizeof(err)) != 0)
        return fail(p, profile->line, "%s", err);
    return 0;
}

static int check_profile(struct parser *p, struct lb_profile *profile, int sum_max_set,
                         int dedupe_set)
{
    char err[512];
    if (!dedupe_set)
        profile->dedupe_window_ms =
            profile->aggregation == LB_AGG_SUM || !profile->reject_retractions
                ? LB_DEDUPE_DEFAULT_MS
                : 0;
    if (!profile->scoring.resolution_ms)
        profile->scoring.resolution_ms = 1000;
    if (lb_scoring_prepare(&profile->scoring, profile->name, err, sizeof(err)) != 0)
        return fail(p, profile->line, "%s", err);
    /* the dedupe stamp keeps event time in whole seconds above 20 bits */
    if (profile->dedupe_window_ms && (profile->scoring.epoch_ms <= -(INT64_C(1000) << 33) ||
                                      profile->scoring.horizon_ms >= INT64_C(1000) << 33))
        return fail(p, profile->line,
                    "profile '%s': dedupe needs epoch and horizon within 2242 years of 1970; "
                    "narrow them or set dedupe: off",
                    profile->name);
    if (profile->aggregation == LB_AGG_SUM && check_sum_budget(p, profile, sum_max_set) != 0)
        return -1;
    if (!profile->windows) {
        static const enum lb_window_kind defaults[] = {LB_WINDOW_ALLTIME, LB_WINDOW_DAILY,
                                                       LB_WINDOW_WEEKLY, LB_WINDOW_MONTHLY};
        for (size_t i = 0; i < 4; i++)
            if (!add_window(profile, defaults[i]))
                return fail(p, profile->line, "out of memory");
    }
    for (size_t i = 0; i < profile->nwindows && profile->shards > 1; i++)
        if (profile->windows[i].results_top >= 0)
            return fail(p, profile->windows[i].results_line,
                        "profile '%s': final standings of split boards are not supported yet; "
                        "use split.shards: 1 or drop results",
                        profile->name);
    if (profile->shards > 1 && profile->decay)
        return fail(p, profile->split_line,
                    "profile '%s': a split board cannot decay (its overall board would need every "
                    "shard's patches); use split.shards: 1 or drop decay",
                    profile->name);
    return profile->decay ? check_decay(p, profile) : 0;
}

/* Whether the mapping 'node' sets 'name'. */
static int has_key(struct parser *p, yaml_node_t *node, const char *name)
{
    if (node->type != YAML_MAPPING_NODE)
        return 0;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
         pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(&p->doc, pair->key);
        if (key->type == YAML_SCALAR_NODE && strcmp(scalar_text(key), name) == 0)
            return 1;
    }
    return 0;
}

static int parse_profiles(struct parser *p, yaml_node_t *node, void *obj)
{
    struct lb_config *config = obj;
    if (node->type != YAML_SEQUENCE_NODE)
        return fail(p, line_of(node), "profiles: expected a list of profiles");
    size_t n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (n == 0)
        return fail(p, line_of(node), "profiles: the list is empty");
    config->profiles = calloc(n, sizeof(*config->profiles));
    if (!config->profiles)
        return fail(p, line_of(node), "out of memory");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = yaml_document_get_node(&p->doc, node->data.sequence.items.start[i]);
        struct lb_profile *profile = &config->profiles[i];
        profile->line = line_of(item);
        config->nprofiles++;
        if (parse_mapping(p, profile_keys, item, line_of(item), profile, "profile", 0) != 0 ||
            check_profile(p, profile, has_key(p, item, "sum_max"), has_key(p, item, "dedupe")) != 0)
            return -1;
        for (size_t j = 0; j < i; j++) {
            const struct lb_profile *earlier = &config->profiles[j];
            if (strcmp(earlier->name, profile->name) == 0)
                return fail(p, profile->line, "profile name '%s' is used twice", profile->name);
            for (size_t k = 0; k < earlier->nmatch; k++)
                if (strcmp(earlier->match[k], "*") == 0)
                    return fail(p, profile->line,
                                "profile '%s' can never match: profile '%s' (line %d) matches "
                                "every board before it; move the catch-all profile last",
                                profile->name, earlier->name, earlier->line);
        }
    }
    return 0;
}

/* ---- whole-file checks ------------------------------------------------------ */

static int check_registry(struct parser *p, const struct lb_config *config)
{
    int line = config->registry_line;
    if (!config->registry_url)
        return line ? fail(p, line, "input.registry needs 'url': the registry's base URL") : 0;
    if (strncmp(config->registry_url, "http://", 7) != 0 &&
        strncmp(config->registry_url, "https://", 8) != 0)
        return fail(p, line, "input.registry.url: \"%s\" is not an http:// or https:// URL",
                    config->registry_url);
    const char *host = strstr(config->registry_url, "//") + 2;
    const char *at = strchr(host, '@');
    if (at && at < host + strcspn(host, "/?#"))
        return fail(p, line,
                    "input.registry.url carries credentials; give them as user and password or "
                    "password_file (they would be logged with the url)");
    if (config->registry_password && config->registry_password_file)
        return fail(p, line, "input.registry: give password or password_file, not both");
    int has_password = config->registry_password || config->registry_password_file;
    if (!!config->registry_user != has_password)
        return fail(p, line,
                    config->registry_user ? "input.registry: user needs password or password_file"
                                          : "input.registry: a password needs a user");
    return 0;
}

/* redis.tls: the files are loaded now, so that a wrong one stops the start
 * (and --check-config) with its line. */
static int check_redis_tls(struct parser *p, struct lb_config *config)
{
    int line = config->redis_tls_line;
    if (!config->redis_tls_enabled) {
        if (config->redis_tls_ca_file || config->redis_tls_cert_file ||
            config->redis_tls_key_file || config->redis_tls_server_name)
            return fail(p, line, "redis.tls has settings but not 'enabled: true'");
        return 0;
    }
    if (!!config->redis_tls_cert_file != !!config->redis_tls_key_file)
        return fail(p, line, "redis.tls: cert_file and key_file go together (mutual TLS)");
    char err[400];
    struct lb_tls_options options = {.ca_file = config->redis_tls_ca_file,
                                     .cert_file = config->redis_tls_cert_file,
                                     .key_file = config->redis_tls_key_file,
                                     .server_name = config->redis_tls_server_name,
                                     .verify = config->redis_tls_verify};
    if (!(config->redis_tls = lb_tls_new(&options, err, sizeof(err))))
        return fail(p, line, "redis.tls.%s", err);
    return 0;
}

static int check_config(struct parser *p, struct lb_config *config, int root_line)
{
    int input_line = config->input_line ? config->input_line : root_line;
    if (config->wire_format == LB_WIRE_CONFLUENT) {
        for (size_t i = 0; i < config->nschemas; i++)
            if (config->schemas[i].id < 0)
                return fail(p, config->schemas[i].line,
                            "writer_schema is for format: bare; confluent input maps schema ids "
                            "under 'schemas'");
        int rc = check_registry(p, config);
        if (rc != 0)
            return rc;
        if (config->nschemas == 0 && !config->registry_url)
            return fail(p, input_line,
                        "input: confluent input needs 'schemas' (schema id: file) or 'registry' "
                        "(url: ...)");
    } else {
        if (config->registry_url)
            return fail(p, config->registry_line,
                        "input.registry is for format: confluent (bare records carry no schema "
                        "id)");
        if (config->nschemas != 1 || config->schemas[0].id >= 0)
            return fail(p, config->nschemas ? config->schemas[0].line : input_line,
                        "input: bare input needs exactly one 'writer_schema' and no 'schemas'");
    }
    if (strpbrk(config->key_prefix, "{}") || strlen(config->key_prefix) > LB_NAME_MAX)
        return fail(p, config->redis_line,
                    "redis.key_prefix must be at most %d bytes without '{' or '}'", LB_NAME_MAX);
    if (config->ntopics == 0)
        return fail(p, config->kafka_line, "kafka.topics: list at least one topic");
    struct lb_kafka_options kafka = lb_config_kafka(config);
    if (!(p->flags & LB_CONFIG_NO_KAFKA) &&
        lb_kafka_check(&kafka, config->dlq_topic != NULL, p->err, p->errlen) != 0)
        return -1;
    int tls_rc = check_redis_tls(p, config);
    if (tls_rc != 0)
        return tls_rc;
    for (size_t i = 0; i < config->nprofiles; i++) {
        const struct lb_profile *profile = &config->profiles[i];
        int64_t biggest = profile->scoring.score_max > -profile->scoring.score_min
                              ? profile->scoring.score_max
                              : -profile->scoring.score_min,
                total;
        if (profile->aggregation == LB_AGG_SUM &&
            __builtin_mul_overflow(biggest, config->batch_max_events, &total))
            return fail(p, profile->line,
                        "profile '%s': a batch of %lld events of score up to %lld can overflow a "
                        "64-bit total; lower score_max or batch.max_events",
                        profile->name, (long long)config->batch_max_events, (long long)biggest);
    }
    if (config->results_line && (!config->results_topic || !config->results_schema_id))
        return fail(p, config->results_line, "results: '%s' is required",
                    !config->results_topic ? "topic" : "schema_id");
    for (size_t i = 0; i < config->nprofiles; i++)
        for (size_t k = 0; k < config->profiles[i].nwindows; k++)
            if (config->profiles[i].windows[k].results_top >= 0 && !config->results_topic)
                return fail(p, config->profiles[i].windows[k].results_line,
                            "results: final standings need the top-level 'results: {topic, "
                            "schema_id}' saying where they go");
    if (config->nprofiles == 0) {
        /* No profiles: one catch-all with every default. */
        yaml_node_t empty = {.type = YAML_MAPPING_NODE};
        empty.start_mark.line = (size_t)root_line - 1;
        config->profiles = calloc(1, sizeof(*config->profiles));
        if (!config->profiles)
            return fail(p, root_line, "out of memory");
        config->nprofiles = 1;
        config->profiles[0].line = root_line;
        if (parse_mapping(p, profile_keys + 1, &empty, root_line, &config->profiles[0], "profile",
                          0) != 0 ||
            !(config->profiles[0].name = strdup("default")) ||
            check_profile(p, &config->profiles[0], 0, 0) != 0)
            return -1;
    }
    return 0;
}

static int load(struct parser *p, const unsigned char *text, size_t len, struct lb_config **out)
{
    yaml_parser_t yp;
    struct lb_config *config = calloc(1, sizeof(*config));
    int rc = -1, have_doc = 0;

    *out = NULL;
    if (!config || !yaml_parser_initialize(&yp)) {
        free(config);
        return fail(p, 0, "out of memory");
    }
    yaml_parser_set_input_string(&yp, text, len);
    if (!yaml_parser_load(&yp, &p->doc)) {
        fail(p, (int)yp.problem_mark.line + 1, "YAML syntax error: %s%s%s",
             yp.problem ? yp.problem : "unknown", yp.context ? " " : "",
             yp.context ? yp.context : "");
        goto done;
    }
    have_doc = 1;
    yaml_node_t *root = yaml_document_get_root_node(&p->doc);
    if (!root) {
        fail(p, 1, "the file is empty; start from config/projector.example.yaml");
        goto done;
    }
    config->wait_replicas = -1; /* auto unless the file says otherwise */
    if (!(config->path = strdup(p->name))) {
        fail(p, 0, "out of memory");
        goto done;
    }
    if (parse_mapping(p, top_keys, root, line_of(root), config, NULL, 0) != 0 ||
        check_config(p, config, line_of(root)) != 0)
        goto done;
    *out = config;
    config = NULL;
    rc = 0;
done:
    if (have_doc)
        yaml_document_delete(&p->doc);
    yaml_parser_delete(&yp);
    lb_config_free(config);
    return rc;
}

int lb_config_load_string(const char *name, const char *text, size_t len, struct lb_config **out,
                          char *err, size_t errlen)
{
    /* relative paths stay relative: to the working directory */
    struct parser p = {.name = name ? name : "<config>", .dir = NULL, .err = err, .errlen = errlen};
    return load(&p, (const unsigned char *)text, len, out);
}

int lb_config_load(const char *path, struct lb_config **out, char *err, size_t errlen)
{
    return lb_config_load_flags(path, 0, out, err, errlen);
}

int lb_config_load_flags(const char *path, unsigned flags, struct lb_config **out, char *err,
                         size_t errlen)
{
    struct parser p = {.name = path, .flags = flags, .err = err, .errlen = errlen};
    FILE *f = fopen(path, "rb");
    char *text = NULL, *copy = NULL;
    long size;
    int rc = -1;

    *out = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(text = malloc((size_t)size + 1)) || fread(text, 1, (size_t)size, f) != (size_t)size) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
        goto done;
    }
    if (!(copy = strdup(path))) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }
    /* schema and certificate paths are kept absolute: --check-config prints
     * them, and its output is loadable from anywhere */
    if (!(p.dir = realpath(dirname(copy), NULL))) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    rc = load(&p, (const unsigned char *)text, (size_t)size, out);
done:
    free(p.dir);
    free(copy);
    free(text);
    fclose(f);
    return rc;
}

static void free_strings(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void lb_config_free(struct lb_config *config)
{
    if (!config)
        return;
    free(config->path);
    free(config->brokers);
    free(config->group);
    free(config->dlq_topic);
    free(config->metrics_listen);
    free(config->results_topic);
    free_strings(config->topics, config->ntopics);
    for (size_t i = 0; i < config->nkafka_props; i++) {
        free(config->kafka_props[i].key);
        free(config->kafka_props[i].value);
        free(config->kafka_props[i].source);
    }
    free(config->kafka_props);
    for (size_t i = 0; i < config->nschemas; i++)
        free(config->schemas[i].path);
    free(config->schemas);
    for (size_t i = 0; i < config->nredis_nodes; i++)
        free(config->redis_nodes[i].host);
    free(config->redis_nodes);
    free(config->key_prefix);
    free(config->redis_user);
    free(config->redis_password);
    free(config->redis_password_source);
    free(config->redis_tls_ca_file);
    free(config->redis_tls_cert_file);
    free(config->redis_tls_key_file);
    free(config->redis_tls_server_name);
    lb_tls_free(config->redis_tls);
    free(config->registry_url);
    free(config->registry_user);
    free(config->registry_password);
    free(config->registry_password_source);
    free(config->registry_password_file);
    free(config->registry_ca_file);
    for (size_t i = 0; i < config->nprofiles; i++) {
        struct lb_profile *profile = &config->profiles[i];
        free(profile->name);
        free_strings(profile->match, profile->nmatch);
        for (size_t w = 0; w < profile->nwindows; w++)
            free(profile->windows[w].dim);
        free(profile->windows);
        decay_free(profile->decay);
    }
    free(config->profiles);
    free(config);
}

struct lb_consumer_options lb_config_consumer(const struct lb_config *config)
{
    return (struct lb_consumer_options){.kafka = lb_config_kafka(config),
                                        .group = config->group,
                                        .topics = config->topics,
                                        .ntopics = config->ntopics,
                                        .hold_limit = (uint64_t)config->batch_max_events * 5};
}

struct lb_cluster_options lb_config_cluster(const struct lb_config *config)
{
    return (struct lb_cluster_options){.seeds = config->redis_nodes,
                                       .nseeds = config->nredis_nodes,
                                       .user = config->redis_user,
                                       .password = config->redis_password,
                                       .tls = config->redis_tls,
                                       .connect_timeout_ms = config->connect_timeout_ms,
                                       .command_timeout_ms = config->command_timeout_ms,
                                       .wait_replicas = config->wait_replicas,
                                       .wait_timeout_ms = config->wait_timeout_ms};
}

struct lb_kafka_options lb_config_kafka(const struct lb_config *config)
{
    return (struct lb_kafka_options){.path = config->path,
                                     .brokers = config->brokers,
                                     .props = config->kafka_props,
                                     .nprops = config->nkafka_props};
}

const struct lb_profile *lb_profile_for(const struct lb_profile *profiles, size_t nprofiles,
                                        const char *board, size_t len)
{
    char id[LB_ID_MAX_BYTES + 1];
    if (len > LB_ID_MAX_BYTES)
        return NULL;
    memcpy(id, board, len);
    id[len] = '\0';
    for (size_t i = 0; i < nprofiles; i++)
        for (size_t k = 0; k < profiles[i].nmatch; k++)
            if (fnmatch(profiles[i].match[k], id, 0) == 0)
                return &profiles[i];
    return NULL;
}

int lb_shard_parse(const struct lb_profile *profiles, size_t nprofiles, struct lb_str tag,
                   struct lb_str *board, uint32_t *shard)
{
    *board = tag;
    *shard = 0;
    const char *hash = NULL;
    for (uint32_t i = tag.len; i > 0 && !hash; i--)
        if (tag.ptr[i - 1] == '#')
            hash = tag.ptr + i - 1;
    if (!hash || hash == tag.ptr)
        return 0;
    struct lb_str base = {tag.ptr, (uint32_t)(hash - tag.ptr)};
    const struct lb_profile *profile = lb_profile_for(profiles, nprofiles, base.ptr, base.len);
    char *end;
    unsigned long i = strtoul(hash + 1, &end, 10);
    if (!profile || profile->shards <= 1 || end == hash + 1 || *end != '.' ||
        i >= (unsigned long)profile->shards)
        return 0;
    char again[LB_ID_MAX_BYTES + 24];
    size_t n = lb_shard_tag(base.ptr, base.len, (uint32_t)profile->shards, (uint32_t)i, again,
                            sizeof(again));
    if (n != tag.len || memcmp(again, tag.ptr, n) != 0)
        return 0;
    *board = base;
    *shard = (uint32_t)i;
    return 1;
}

const struct lb_profile *lb_config_profile_for(const struct lb_config *config, const char *board,
                                               size_t len)
{
    return lb_profile_for(config->profiles, config->nprofiles, board, len);
}

struct lb_decoder *lb_config_decoder(const struct lb_config *config, char *err, size_t errlen,
                                     enum lb_error_class *class)
{
    enum lb_error_class ignored;
    if (!class)
        class = &ignored;
    *class = LB_ERROR_RUNTIME;
    struct lb_decoder *decoder = lb_decoder_new((enum lb_wire_format)config->wire_format);
    if (!decoder) {
        snprintf(err, errlen, "%s: out of memory", config->path);
        return NULL;
    }
    *class = LB_ERROR_CONFIG;
    for (size_t i = 0; i < config->nschemas; i++) {
        const struct lb_schema_ref *ref = &config->schemas[i];
        char why[400];
        FILE *f = fopen(ref->path, "rb");
        char json[65536];
        size_t n = f ? fread(json, 1, sizeof(json), f) : 0;
        int too_big = f && n == sizeof(json);
        if (f)
            fclose(f);
        if (!f || too_big) {
            snprintf(err, errlen, "%s:%d: schema file %s: %s", config->path, ref->line, ref->path,
                     too_big ? "larger than 64 KiB" : strerror(errno));
            goto error;
        }
        int rc = lb_decoder_add_schema(decoder, ref->id, json, n, why, sizeof(why));
        if (rc != 0) {
            snprintf(err, errlen, "%s:%d: schema file %s: %s", config->path, ref->line, ref->path,
                     why);
            if (rc == -2)
                *class = LB_ERROR_RUNTIME;
            goto error;
        }
    }
    *class = LB_ERROR_NONE;
    return decoder;
error:
    lb_decoder_free(decoder);
    return NULL;
}

/* ---- --window ---------------------------------------------------------------- */

/* How a window of 'w' is written: "daily:YYYY-MM-DD", "patch:VALUE", ... */
static void window_form(const struct lb_window_config *w, char *out, size_t cap)
{
    static const char *const forms[] = {[LB_WINDOW_ALLTIME] = "alltime",
                                        [LB_WINDOW_DAILY] = "daily:YYYY-MM-DD",
                                        [LB_WINDOW_WEEKLY] = "weekly:YYYY-Www",
                                        [LB_WINDOW_MONTHLY] = "monthly:YYYY-MM"};
    if (w->kind == LB_WINDOW_CUSTOM)
        snprintf(out, cap, "%s:VALUE", w->dim);
    else
        snprintf(out, cap, "%s", forms[w->kind]);
}

/* Whether 'item' is one of the comma-separated items of 'list'. */
static int listed(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; (p = strstr(p, item)) != NULL; p++)
        if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ','))
            return 1;
    return 0;
}

int lb_config_check_window(const struct lb_profile *profiles, size_t nprofiles, const char *owner,
                           const char *window, char *err, size_t errlen)
{
    char has[1024] = "", name[LB_NAME_MAX + 1], form[LB_NAME_MAX + 16], want[LB_NAME_MAX + 16];
    const char *colon = strchr(window, ':'), *label = colon ? colon + 1 : NULL;
    size_t len = colon ? (size_t)(colon - window) : strlen(window), used = 0;
    snprintf(name, sizeof(name), "%.*s", (int)len, window);
    int kind = len <= LB_NAME_MAX ? lb_window_kind_parse(name) : -1, known = 0, ok = 0;
    int64_t id;
    for (size_t p = 0; p < nprofiles; p++) {
        const struct lb_profile *profile = &profiles[p];
        for (size_t i = 0; i < profile->nwindows; i++) {
            const struct lb_window_config *w = &profile->windows[i];
            window_form(w, form, sizeof(form));
            if (!listed(has, form) && used + 1 < sizeof(has)) {
                int n = snprintf(has + used, sizeof(has) - used, "%s%s", used ? ", " : "", form);
                used += n > 0 ? (size_t)n : 0;
            }
            if (w->kind == LB_WINDOW_CUSTOM ? strcmp(w->dim, name) != 0
                                            : (int)w->kind != kind || kind == LB_WINDOW_CUSTOM)
                continue;
            if (!known)
                snprintf(want, sizeof(want), "%s", form);
            known = 1;
            ok |= w->kind == LB_WINDOW_ALLTIME ? !label
                  : w->kind == LB_WINDOW_CUSTOM
                      ? label && *label
                      : label && lb_window_label_parse(w->kind, label, &id) == 0;
        }
        /* a decaying board's overall board, named by its key alone */
        const struct lb_decay_config *decay = profile->decay;
        if (decay && !listed(has, decay->key) && used + 1 < sizeof(has)) {
            int n = snprintf(has + used, sizeof(has) - used, "%s%s", used ? ", " : "", decay->key);
            used += n > 0 ? (size_t)n : 0;
        }
        if (decay && strcmp(window, decay->key) == 0)
            return 0;
    }
    if (ok)
        return 0;
    if (known)
        snprintf(err, errlen,
                 "--window '%s': %s windows are written %s%s; the windows of %s are %s", window,
                 name, want,
                 kind > LB_WINDOW_ALLTIME && kind < LB_WINDOW_CUSTOM
                     ? " (zero-padded; a day, ISO 8601 week or month that exists)"
                     : "",
                 owner, has);
    else if (kind == LB_WINDOW_CUSTOM)
        snprintf(err, errlen,
                 "--window '%s': custom windows are named by their dim, not 'custom'; the "
                 "windows of %s are %s",
                 window, owner, has);
    else if (kind >= 0)
        snprintf(err, errlen, "--window '%s': %s has no %s windows; it has %s", window, owner, name,
                 has);
    else
        snprintf(err, errlen,
                 "--window '%s': there is no window kind '%s'; the kinds are alltime, daily, "
                 "weekly, monthly and custom ones named by their dim; the windows of %s are %s",
                 window, name, owner, has);
    return -1;
}

/* ---- printing ---------------------------------------------------------------- */

/* --check-config prints the effective configuration in the file's own
 * structure and units, from the tables above: what it prints loads as is
 * and prints the same again. */

static void print_string(FILE *out, const char *text)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(out, "\\x%02x", *c);
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

static void print_duration(FILE *out, int64_t ms)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
    size_t i = 0;
    while (ms != 0 && ms % units[i].ms != 0)
        i++;
    if (ms == 0)
        i = 3;
    fprintf(out, "%" PRId64 "%s", ms / units[i].ms, units[i].unit);
}

static void print_time(FILE *out, int64_t ms)
{
    int64_t days = ms / 86400000, rest = ms % 86400000, year;
    unsigned month, day;
    if (rest < 0) {
        days--;
        rest += 86400000;
    }
    lb_civil_from_days(days, &year, &month, &day);
    fprintf(out, "%04" PRId64 "-%02u-%02uT%02d:%02d:%02d", year, month, day, (int)(rest / 3600000),
            (int)(rest / 60000 % 60), (int)(rest / 1000 % 60));
    if (rest % 1000)
        fprintf(out, ".%03d", (int)(rest % 1000));
    fputc('Z', out);
}

/* A secret: as written when it came from ${ENV}, else the placeholder. */
static void print_secret(FILE *out, const char *source)
{
    if (source)
        print_string(out, source);
    else
        fputs(REDACTED, out);
}

static void print_kafka_properties(const struct lb_config *config, FILE *out, int indent)
{
    for (size_t i = 0; i < config->nkafka_props; i++) {
        const struct lb_kv *kv = &config->kafka_props[i];
        fprintf(out, "%*s%s: ", indent, "", kv->key);
        if (lb_kafka_property_secret(kv->key))
            print_secret(out, kv->source);
        else
            print_string(out, kv->value);
        fputc('\n', out);
    }
}

static void print_key(const struct key_def *def, const void *obj, FILE *out, int indent)
{
    const char *field = (const char *)obj + def->offset;
    int is_text = def->type == KT_STRING || def->type == KT_PATH || def->type == KT_SECRET;
    int is_number = def->type == KT_INT || def->type == KT_DURATION || def->type == KT_TIME;
    const char *text = is_text ? *(char *const *)field : NULL;
    int64_t number = is_number ? *(const int64_t *)field : 0;

    if (def->type == KT_CUSTOM) {
        def->print(obj, out, indent);
        return;
    }
    if (is_text && !text) {
        fprintf(out, "%*s# %s: not set (%s)\n", indent, "", def->name, def->doc);
        return;
    }
    fprintf(out, "%*s%s:", indent, "", def->name);
    switch (def->type) {
    case KT_STRING:
    case KT_PATH:
        fputc(' ', out);
        print_string(out, text);
        break;
    case KT_SECRET:
        fputc(' ', out);
        print_secret(out, *(char *const *)((const char *)obj + def->source_offset));
        break;
    case KT_INT:
        fprintf(out, " %" PRId64, number);
        break;
    case KT_DURATION:
        fputc(' ', out);
        print_duration(out, number);
        break;
    case KT_TIME:
        fputc(' ', out);
        print_time(out, number);
        break;
    case KT_CHOICE:
        fprintf(out, " %s", def->choices[*(const int *)field]);
        break;
    case KT_STRINGS: {
        char *const *list = *(char *const *const *)field;
        size_t n = *(const size_t *)(field + sizeof(char **));
        fputs(" [", out);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ", " : "", out);
            print_string(out, list[i]);
        }
        fputc(']', out);
        break;
    }
    case KT_SECTION:
        fputc('\n', out);
        print_table(def->section, obj, out, indent + 2);
        if (def->flags & F_PASSTHROUGH)
            print_kafka_properties(obj, out, indent + 2);
        return;
    case KT_CUSTOM:
        break;
    }
    fputc('\n', out);
}

static void print_table(const struct key_def *table, const void *obj, FILE *out, int indent)
{
    for (const struct key_def *def = table; def->name; def++)
        print_key(def, obj, out, indent);
}

static void print_schemas(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (config->wire_format != LB_WIRE_CONFLUENT || !config->nschemas)
        return;
    fprintf(out, "%*sschemas:\n", indent, "");
    for (size_t i = 0; i < config->nschemas; i++) {
        fprintf(out, "%*s%d: ", indent + 2, "", config->schemas[i].id);
        print_string(out, config->schemas[i].path);
        fputc('\n', out);
    }
}

static void print_writer_schema(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (config->wire_format != LB_WIRE_BARE || !config->nschemas)
        return;
    fprintf(out, "%*swriter_schema: ", indent, "");
    print_string(out, config->schemas[0].path);
    fputc('\n', out);
}

static void print_registry(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (!config->registry_url)
        return;
    fprintf(out, "%*sregistry:\n", indent, "");
    print_table(registry_keys, config, out, indent + 2);
}

static void print_nodes(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    fprintf(out, "%*snodes: [", indent, "");
    for (size_t i = 0; i < config->nredis_nodes; i++) {
        const struct lb_host *h = &config->redis_nodes[i];
        int v6 = strchr(h->host, ':') != NULL;
        char node[300];
        snprintf(node, sizeof(node), "%s%.255s%s:%d", v6 ? "[" : "", h->host, v6 ? "]" : "",
                 h->port);
        fputs(i ? ", " : "", out);
        print_string(out, node);
    }
    fputs("]\n", out);
}

static void print_redis_tls(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (!config->redis_tls_line && !config->redis_tls_enabled) {
        fprintf(out, "%*s# tls: not set (plain TCP)\n", indent, "");
        return;
    }
    fprintf(out, "%*stls:\n", indent, "");
    print_table(redis_tls_keys, config, out, indent + 2);
}

static void print_wait_replicas(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (config->wait_replicas < 0)
        fprintf(out, "%*swait_replicas: auto\n", indent, "");
    else
        fprintf(out, "%*swait_replicas: %d\n", indent, "", config->wait_replicas);
}

static void print_listen(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    if (!config->metrics_listen) {
        fprintf(out, "%*s# listen: not set (no metrics or health endpoints)\n", indent, "");
        return;
    }
    fprintf(out, "%*slisten: ", indent, "");
    print_string(out, config->metrics_listen);
    fputc('\n', out);
}

static void print_resolution(const void *obj, FILE *out, int indent)
{
    static const char *const names[] = {"ms", "s", "min", "h", "d"};
    const struct lb_profile *profile = obj;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (lb_resolution_parse(names[i]) == profile->scoring.resolution_ms)
            fprintf(out, "%*stie_resolution: %s\n", indent, "", names[i]);
}

static void print_dedupe(const void *obj, FILE *out, int indent)
{
    const struct lb_profile *profile = obj;
    fprintf(out, "%*sdedupe: ", indent, "");
    if (!profile->dedupe_window_ms) {
        fputs("off\n", out);
        return;
    }
    fputs("{window: ", out);
    print_duration(out, profile->dedupe_window_ms);
    fputs("}\n", out);
}

static void print_windows(const void *obj, FILE *out, int indent)
{
    const struct lb_profile *profile = obj;
    int customs = 0;
    fprintf(out, "%*swindows:\n", indent, "");
    for (size_t i = 0; i < profile->nwindows; i++) {
        const struct lb_window_config *w = &profile->windows[i];
        if (w->kind == LB_WINDOW_CUSTOM) {
            customs++;
            continue;
        }
        fprintf(out, "%*s%s: {", indent + 2, "", lb_window_kind_name(w->kind));
        if (w->kind != LB_WINDOW_ALLTIME) {
            fputs("ttl: ", out);
            print_duration(out, w->ttl_ms);
        }
        if (w->results_top > 0)
            fprintf(out, ", results: {top: %lld, grace: ", (long long)w->results_top);
        else if (w->results_top == 0)
            fputs(", results: {top: all, grace: ", out);
        if (w->results_top >= 0) {
            print_duration(out, w->results_grace_ms);
            fputs("}", out);
        }
        fputs("}\n", out);
    }
    if (!customs)
        return;
    fprintf(out, "%*scustom:\n", indent + 2, "");
    for (size_t i = 0; i < profile->nwindows; i++) {
        const struct lb_window_config *w = &profile->windows[i];
        if (w->kind != LB_WINDOW_CUSTOM)
            continue;
        fprintf(out, "%*s- {dim: ", indent + 4, "");
        print_string(out, w->dim);
        fputs(", ttl: ", out);
        print_duration(out, w->ttl_ms);
        fputs("}\n", out);
    }
}

static void print_profiles(const void *obj, FILE *out, int indent)
{
    const struct lb_config *config = obj;
    fprintf(out, "%*sprofiles:\n", indent, "");
    for (size_t i = 0; i < config->nprofiles; i++) {
        /* "- " then the first key on the same line, the others under it */
        fprintf(out, "%*s- ", indent + 2, "");
        print_key(&profile_keys[0], &config->profiles[i], out, 0);
        print_table(profile_keys + 1, &config->profiles[i], out, indent + 4);
    }
}

void lb_config_print(const struct lb_config *config, FILE *out)
{
    fputs("# The effective configuration (projector --check-config): every key with the\n"
          "# value in force, defaults included. It loads as is; a secret written in the\n"
          "# file itself shows as " REDACTED " (write it as ${ENV_VAR} or in a file).\n",
          out);
    print_table(top_keys, config, out, 0);
}

int lb_profile_has_results(const struct lb_profile *profile)
{
    for (size_t i = 0; i < profile->nwindows; i++)
        if (profile->windows[i].results_top >= 0)
            return 1;
    return 0;
}
