/* Deterministic score events; see eventgen.h. */
#include "eventgen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct generator {
    struct gen_options o;
    double *cdf; /* cumulative Zipf weights of player ranks */
};

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state)
{
    return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Cumulative Zipf weights 1/k^s over ranks 1..n, normalised to 1. */
static double *zipf_table(uint32_t n, double s)
{
    double *cdf = malloc(n * sizeof(*cdf));
    double total = 0;
    if (!cdf)
        return NULL;
    for (uint32_t k = 0; k < n; k++) {
        total += 1.0 / pow((double)(k + 1), s);
        cdf[k] = total;
    }
    for (uint32_t k = 0; k < n; k++)
        cdf[k] /= total;
    return cdf;
}

static uint32_t zipf_draw(const double *cdf, uint32_t n, double u)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct generator *gen_new(const struct gen_options *options)
{
    struct generator *gen = calloc(1, sizeof(*gen));
    if (!gen)
        return NULL;
    gen->o = *options;
    gen->cdf = zipf_table(options->players, options->zipf);
    if (!gen->cdf) {
        free(gen);
        return NULL;
    }
    return gen;
}

void gen_free(struct generator *gen)
{
    if (gen)
        free(gen->cdf);
    free(gen);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define WRITER_HEAD                                                                                \
    "{\"type\": \"record\", \"name\": \"ScoreEvent\", \"namespace\": \"leaderboard.v1\", "         \
    "\"fields\": [{\"name\": \"event_id\", \"type\": \"string\"}, {\"name\": \"board\", "          \
    "\"type\": "                                                                                   \
    "\"string\"}, {\"name\": \"player\", \"type\": \"string\"}, {\"name\": \"score\", \"type\": "  \
    "\"long\"}, {\"name\": \"ts\", \"type\": {\"type\": \"long\", \"logicalType\": "               \
    "\"timestamp-millis\"}}, {\"name\": \"op\", \"type\": {\"type\": \"enum\", \"name\": \"Op\", " \
    "\"symbols\": [\"SUBMIT\", \"RETRACT\"]}, \"default\": \"SUBMIT\"}"
#define WRITER_DIMS                                                                                \
    ", {\"name\": \"dims\", \"type\": {\"type\": \"map\", \"values\": \"string\"}, \"default\": "  \
    "{}}"

const char *const gen_writer_schemas[3] = {
    [GEN_WRITER_V1] = WRITER_HEAD WRITER_DIMS "]}",
    [GEN_WRITER_V2] = WRITER_HEAD WRITER_DIMS
    ", {\"name\": \"platform\", \"type\": [\"null\", \"string\"], \"default\": null}]}",
    [GEN_WRITER_V3] = WRITER_HEAD "]}",
};

void gen_event(const struct generator *gen, uint64_t index, struct gen_event *ev)
{
    const struct gen_options *o = &gen->o;
    /* One stream per event: event i does not depend on how many draws earlier
     * events took. */
    uint64_t state = o->seed * UINT64_C(0x100000001b3) ^ (index + 1) * UINT64_C(0x9e3779b97f4a7c15);
    if (o->retry_every > 1 && index > 0 &&
        index % (uint64_t)o->retry_every == (uint64_t)o->retry_every - 1) {
        /* a producer's retry: one of the 200 events before, again (never a
         * retry itself); every third with another score, a conflict */
        uint64_t back = 1 + splitmix64(&state) % (index < 200 ? index : 200);
        uint64_t original = index - back;
        if (original % (uint64_t)o->retry_every == (uint64_t)o->retry_every - 1)
            original--; /* retry_every > 1 leaves the one before a first record */
        gen_event(gen, original, ev);
        if ((index / (uint64_t)o->retry_every) % 3 == 0)
            ev->score = ev->score == 0 ? 1 : ev->score - 1;
        return;
    }
    uint32_t board = (uint32_t)(splitmix64(&state) % o->boards);
    uint32_t player = zipf_draw(gen->cdf, o->players, uniform01(&state));
    int64_t span_ms = o->hours ? (int64_t)o->hours * 3600000 : (int64_t)o->days * 86400000;

    snprintf(ev->event_id, sizeof(ev->event_id), "e%llu-%llu", (unsigned long long)o->seed,
             (unsigned long long)index);
    /* "a,b,c": board n takes the (n mod 3)th prefix */
    const char *prefix = o->board_prefix;
    size_t nprefix = 1, len;
    for (const char *c = prefix; *c; c++)
        nprefix += *c == ',';
    for (uint32_t skip = board % (uint32_t)nprefix; skip > 0; skip--)
        prefix = strchr(prefix, ',') + 1;
    len = strcspn(prefix, ",");
    snprintf(ev->board, sizeof(ev->board), "%.*s%u", (int)len, prefix, board);
    snprintf(ev->player, sizeof(ev->player), "p%06u", player);
    ev->score = (int64_t)(splitmix64(&state) % (uint64_t)(o->score_max + 1));
    ev->ts_ms = o->start_ms + (int64_t)(splitmix64(&state) % (uint64_t)span_ms);
    if (o->ts_now)
        ev->ts_ms = wall_ms();
    ev->op = o->retract_every > 0 &&
             index % (uint64_t)o->retract_every == (uint64_t)o->retract_every - 1;
    ev->dim_value[0] = '\0';
    ev->poison = 0;
    if (o->poison_every > 0 && index % (uint64_t)o->poison_every == (uint64_t)o->poison_every - 1)
        ev->poison = 1 + (int)((index / (uint64_t)o->poison_every) % (GEN_POISON__COUNT - 1));
    if (ev->poison == GEN_POISON_SCORE_RANGE) {
        ev->score = INT64_C(1) << 40;
        ev->op = 0; /* a retraction's score is not checked: it would be valid */
    } else if (ev->poison == GEN_POISON_INVALID_BOARD)
        snprintf(ev->board, sizeof(ev->board), "bad{%u}", board);
    else if (ev->poison == GEN_POISON_INVALID_PLAYER)
        ev->player[0] = '\0';
    else if (ev->poison == GEN_POISON_UNKNOWN_OP)
        ev->op = 2; /* BAN, in the writer schema with id 2 (tests/integration/schemas) */
    else if (ev->poison == GEN_POISON_BOARD_NOT_UTF8)
        snprintf(ev->board, sizeof(ev->board), "amb-\xff\xfe%u", board);
    else if (ev->poison == GEN_POISON_EVENT_ID_NOT_UTF8)
        ev->event_id[0] = (char)0xc0; /* an overlong form's first byte, before the id */
    else if (ev->poison == GEN_POISON_TS_IN_FUTURE)
        ev->ts_ms = wall_ms() + 3600000;
    if (o->dim_name && o->dim_list) {
        size_t n = 1;
        for (const char *c = o->dim_list; *c; c++)
            n += *c == ',';
        const char *v = o->dim_list;
        for (size_t skip = splitmix64(&state) % n; skip > 0; skip--)
            v = strchr(v, ',') + 1;
        snprintf(ev->dim_value, sizeof(ev->dim_value), "%.*s", (int)strcspn(v, ","), v);
    } else if (o->dim_name)
        snprintf(ev->dim_value, sizeof(ev->dim_value), "v%u",
                 (unsigned)(splitmix64(&state) % o->dim_values));
    ev->writer = o->evolve && !ev->poison ? (int)(index % 3) : GEN_WRITER_V1;
    if (ev->writer == GEN_WRITER_V3)
        ev->dim_value[0] = '\0'; /* v3 has no dims: the reader's default {} */
}

static uint8_t *put_long(uint8_t *p, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

static uint8_t *put_string(uint8_t *p, const char *s)
{
    size_t len = strlen(s);
    p = put_long(p, (int64_t)len);
    memcpy(p, s, len);
    return p + len;
}

size_t gen_encode(const struct generator *gen, const struct gen_event *ev, uint8_t *buf)
{
    const struct gen_options *o = &gen->o;
    uint8_t *p = buf;
    if (!o->bare) {
        int32_t id = ev->poison == GEN_POISON_UNKNOWN_SCHEMA ? 99
                     : ev->poison == GEN_POISON_UNKNOWN_OP   ? 2
                     : o->evolve                             ? o->evolve_ids[ev->writer]
                                                             : o->schema_id;
        *p++ = ev->poison == GEN_POISON_BAD_MAGIC ? 7 : 0;
        *p++ = (uint8_t)(id >> 24);
        *p++ = (uint8_t)(id >> 16);
        *p++ = (uint8_t)(id >> 8);
        *p++ = (uint8_t)id;
    }
    if (ev->poison == GEN_POISON_MALFORMED) {
        p = put_long(p, 100); /* an event_id of 100 bytes that are not there */
        *p++ = 'x';
        return (size_t)(p - buf);
    }
    /* the field order of score_event.avsc */
    p = put_string(p, ev->event_id);
    p = put_string(p, ev->board);
    p = put_string(p, ev->player);
    p = put_long(p, ev->score);
    p = put_long(p, ev->ts_ms);
    p = put_long(p, ev->op);
    if (ev->writer == GEN_WRITER_V3)
        return (size_t)(p - buf);
    if (ev->dim_value[0]) {
        p = put_long(p, 1); /* one map block of one entry */
        p = put_string(p, o->dim_name);
        p = put_string(p, ev->dim_value);
    }
    p = put_long(p, 0);                /* end of map */
    if (ev->writer == GEN_WRITER_V2) { /* platform: null or a string, in turn */
        int has = ev->score % 2 == 0;
        p = put_long(p, has);
        if (has)
            p = put_string(p, "pc");
    }
    return (size_t)(p - buf);
}

void gen_print(FILE *out, const struct gen_event *ev)
{
    static const char *const poison_reasons[GEN_POISON__COUNT] = {
        [GEN_POISON_BAD_MAGIC] = "bad_magic",
        [GEN_POISON_UNKNOWN_SCHEMA] = "unknown_schema_id",
        [GEN_POISON_MALFORMED] = "malformed_avro",
        [GEN_POISON_SCORE_RANGE] = "score_out_of_range",
        [GEN_POISON_INVALID_BOARD] = "invalid_board",
        [GEN_POISON_INVALID_PLAYER] = "invalid_player",
        [GEN_POISON_UNKNOWN_OP] = "unknown_op",
        [GEN_POISON_BOARD_NOT_UTF8] = "invalid_board",
        [GEN_POISON_EVENT_ID_NOT_UTF8] = "invalid_event_id",
        [GEN_POISON_TS_IN_FUTURE] = "ts_in_future",
    };
    char op[48];
    if (ev->poison)
        snprintf(op, sizeof(op), "POISON:%s", poison_reasons[ev->poison]);
    else
        snprintf(op, sizeof(op), "%s", ev->op ? "RETRACT" : "SUBMIT");
    fprintf(out, "%s\t%s\t%s\t%lld\t%lld\t%s\t%s\n", ev->event_id, ev->board,
            ev->player[0] ? ev->player : "-", (long long)ev->score, (long long)ev->ts_ms, op,
            ev->dim_value[0] ? ev->dim_value : "-");
}

uint8_t *gen_encode_huge(const struct generator *gen, const struct gen_event *ev,
                         size_t player_bytes, size_t *len, char **player)
{
    uint8_t *buf = malloc(GEN_PAYLOAD_MAX + player_bytes);
    char *id = malloc(player_bytes + 1);
    if (!buf || !id) {
        free(buf);
        free(id);
        return NULL;
    }
    memset(id, 'p', player_bytes);
    id[player_bytes] = '\0';
    uint8_t *p = buf;
    if (!gen->o.bare) {
        int32_t sid = gen->o.schema_id;
        *p++ = 0;
        *p++ = (uint8_t)(sid >> 24);
        *p++ = (uint8_t)(sid >> 16);
        *p++ = (uint8_t)(sid >> 8);
        *p++ = (uint8_t)sid;
    }
    p = put_string(p, ev->event_id);
    p = put_string(p, ev->board);
    p = put_string(p, id);
    p = put_long(p, ev->score);
    p = put_long(p, ev->ts_ms);
    p = put_long(p, 0);
    p = put_long(p, 0);
    *len = (size_t)(p - buf);
    *player = id;
    return buf;
}
