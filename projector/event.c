/* Avro decoding of score events.
 *
 * avro-c parses and validates the writer schema JSON; we then compile it
 * into a flat table of types (struct avro_type) that the decoder walks. Doing
 * our own walk rather than using avro-c's generic values buys three things
 * the hot path needs: strings are not copied (they point into the payload),
 * nothing is allocated per event, and every length is checked against the
 * bytes actually left before anything is touched, so a hostile payload cannot
 * make us allocate or loop more than its own size allows.
 *
 * Schema resolution follows the Avro specification for the cases a producer
 * of this event can meet: matching by field name, int->long and
 * bytes->string promotion, writer unions resolved per value, enum symbols by
 * name, writer-only fields skipped, reader defaults for op and dims.
 */
#include "event.h"

#include <avro.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const reject_names[LB_REJECT__COUNT] = {
    [LB_ACCEPT] = "accepted",
    [LB_REJECT_BAD_MAGIC] = "bad_magic",
    [LB_REJECT_UNKNOWN_SCHEMA] = "unknown_schema_id",
    [LB_REJECT_MALFORMED] = "malformed_avro",
    [LB_REJECT_NULL_FIELD] = "null_field",
    [LB_REJECT_UNKNOWN_OP] = "unknown_op",
    [LB_REJECT_TOO_MANY_DIMS] = "too_many_dims",
    [LB_REJECT_INVALID_BOARD] = "invalid_board",
    [LB_REJECT_INVALID_PLAYER] = "invalid_player",
    [LB_REJECT_SCORE_RANGE] = "score_out_of_range",
    [LB_REJECT_TIME_RANGE] = "ts_out_of_range",
    [LB_REJECT_INVALID_DIMS] = "invalid_dims",
    [LB_REJECT_SUM_RANGE] = "sum_out_of_range",
    [LB_REJECT_RETRACTION] = "retraction_refused",
    [LB_REJECT_INVALID_EVENT_ID] = "invalid_event_id",
    [LB_REJECT_TS_IN_FUTURE] = "ts_in_future",
    [LB_REJECT_WINDOW_CLOSED] = "window_closed",
};

const char *lb_reject_name(enum lb_reject reason)
{
    return (unsigned)reason < LB_REJECT__COUNT ? reject_names[reason] : "unknown";
}

/* ---- compiled writer schemas ------------------------------------------ */

enum kind {
    K_NULL,
    K_BOOLEAN,
    K_INT,
    K_LONG,
    K_FLOAT,
    K_DOUBLE,
    K_BYTES,
    K_STRING,
    K_FIXED,
    K_ENUM,
    K_ARRAY,
    K_MAP,
    K_UNION,
    K_RECORD
};

struct avro_type {
    uint8_t kind;
    uint32_t count; /* fields, branches, symbols, or the fixed size */
    uint32_t first; /* children (record, union: index into links; array, map: the item type
                       itself) or, for enums, the index of the first symbol in 'symbols' */
};

/* The reader fields a writer field can feed. */
enum target { T_SKIP = 0, T_EVENT_ID, T_BOARD, T_PLAYER, T_SCORE, T_TS, T_OP, T_DIMS, T__COUNT };

static const char *const target_names[T__COUNT] = {
    [T_EVENT_ID] = "event_id", [T_BOARD] = "board", [T_SCORE] = "score",
    [T_PLAYER] = "player",     [T_TS] = "ts",       [T_OP] = "op",
    [T_DIMS] = "dims",
};

struct schema_prog {
    int32_t id;
    struct avro_type *types;
    size_t ntypes, captypes;
    uint32_t *links;
    size_t nlinks, caplinks;
    int8_t *symbols; /* enum symbol -> enum lb_op, or -1 when the reader has no such symbol */
    size_t nsymbols, capsymbols;
    uint32_t root;    /* the top-level record */
    uint8_t *targets; /* per field of the root record */
    /* named types seen while compiling, to resolve recursion */
    avro_schema_t *named;
    uint32_t *named_index;
    size_t nnamed, capnamed;
    const char *bad; /* why compiling failed, when not for memory */
    char *refused;   /* lb_decoder_refuse: why no record of this id can be read */
};

struct lb_decoder {
    enum lb_wire_format format;
    struct schema_prog *progs;
    size_t nprogs, capprogs;
    char *unknown_hint; /* appended to "schema id N is not in input.schemas" */
};

#define GROW(ptr, n, cap) ((n) < (cap) ? 0 : grow_array((void **)&(ptr), &(cap), sizeof(*(ptr))))

static int grow_array(void **ptr, size_t *cap, size_t elem)
{
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = realloc(*ptr, ncap * elem);
    if (!p)
        return -1;
    *ptr = p;
    *cap = ncap;
    return 0;
}

static void prog_free(struct schema_prog *prog)
{
    free(prog->types);
    free(prog->links);
    free(prog->symbols);
    free(prog->targets);
    free(prog->named);
    free(prog->named_index);
    free(prog->refused);
}

#define COMPILE_ERROR UINT32_MAX

static uint32_t compile_type(struct schema_prog *prog, avro_schema_t schema, int depth);

static uint32_t new_type(struct schema_prog *prog, uint8_t kind, uint32_t count)
{
    if (GROW(prog->types, prog->ntypes, prog->captypes) != 0)
        return COMPILE_ERROR;
    prog->types[prog->ntypes] = (struct avro_type){.kind = kind, .count = count, .first = 0};
    return (uint32_t)prog->ntypes++;
}

static int remember_named(struct schema_prog *prog, avro_schema_t schema, uint32_t index)
{
    if (GROW(prog->named, prog->nnamed, prog->capnamed) != 0)
        return -1;
    size_t cap = prog->capnamed;
    uint32_t *idx = realloc(prog->named_index, cap * sizeof(*idx));
    if (!idx)
        return -1;
    prog->named_index = idx;
    prog->named[prog->nnamed] = schema;
    prog->named_index[prog->nnamed++] = index;
    return 0;
}

/* Reserves 'count' consecutive link slots; returns the first. */
static int reserve_links(struct schema_prog *prog, uint32_t count, uint32_t *first)
{
    while (prog->caplinks - prog->nlinks < count)
        if (grow_array((void **)&prog->links, &prog->caplinks, sizeof(*prog->links)) != 0)
            return -1;
    *first = (uint32_t)prog->nlinks;
    prog->nlinks += count;
    return 0;
}

static uint32_t compile_children(struct schema_prog *prog, avro_schema_t schema, uint32_t index,
                                 int depth)
{
    avro_type_t type = avro_typeof(schema);
    uint32_t count = prog->types[index].count, first;

    if (type == AVRO_ARRAY || type == AVRO_MAP) {
        avro_schema_t item =
            type == AVRO_ARRAY ? avro_schema_array_items(schema) : avro_schema_map_values(schema);
        uint32_t child = compile_type(prog, item, depth + 1);
        if (child == COMPILE_ERROR)
            return COMPILE_ERROR;
        prog->types[index].first = child;
        return index;
    }
    if (reserve_links(prog, count, &first) != 0)
        return COMPILE_ERROR;
    prog->types[index].first = first;
    for (uint32_t i = 0; i < count; i++) {
        avro_schema_t child_schema = type == AVRO_RECORD
                                         ? avro_schema_record_field_get_by_index(schema, (int)i)
                                         : avro_schema_union_branch(schema, (int)i);
        uint32_t child = compile_type(prog, child_schema, depth + 1);
        if (child == COMPILE_ERROR)
            return COMPILE_ERROR;
        prog->links[first + i] = child;
    }
    return index;
}

static uint32_t compile_enum(struct schema_prog *prog, avro_schema_t schema, uint32_t index)
{
    uint32_t count = prog->types[index].count;
    prog->types[index].first = (uint32_t)prog->nsymbols;
    for (uint32_t i = 0; i < count; i++) {
        if (GROW(prog->symbols, prog->nsymbols, prog->capsymbols) != 0)
            return COMPILE_ERROR;
        const char *symbol = avro_schema_enum_get(schema, (int)i);
        int8_t op = -1;
        if (strcmp(symbol, "SUBMIT") == 0)
            op = LB_OP_SUBMIT;
        else if (strcmp(symbol, "RETRACT") == 0)
            op = LB_OP_RETRACT;
        prog->symbols[prog->nsymbols++] = op;
    }
    return index;
}

/* Compiles 'schema' into prog->types and returns its index. Named types are
 * compiled once, so recursive schemas terminate. */
static uint32_t compile_type(struct schema_prog *prog, avro_schema_t schema, int depth)
{
    if (depth > 64) {
        prog->bad = "the writer schema is nested more than 64 deep";
        return COMPILE_ERROR;
    }
    if (avro_typeof(schema) == AVRO_LINK)
        schema = avro_schema_link_target(schema);
    for (size_t i = 0; i < prog->nnamed; i++)
        if (prog->named[i] == schema)
            return prog->named_index[i];

    uint32_t index;
    switch (avro_typeof(schema)) {
    case AVRO_NULL:
        return new_type(prog, K_NULL, 0);
    case AVRO_BOOLEAN:
        return new_type(prog, K_BOOLEAN, 0);
    case AVRO_INT32:
        return new_type(prog, K_INT, 0);
    case AVRO_INT64:
        return new_type(prog, K_LONG, 0);
    case AVRO_FLOAT:
        return new_type(prog, K_FLOAT, 0);
    case AVRO_DOUBLE:
        return new_type(prog, K_DOUBLE, 0);
    case AVRO_BYTES:
        return new_type(prog, K_BYTES, 0);
    case AVRO_STRING:
        return new_type(prog, K_STRING, 0);
    case AVRO_FIXED:
        index = new_type(prog, K_FIXED, (uint32_t)avro_schema_fixed_size(schema));
        if (index != COMPILE_ERROR && remember_named(prog, schema, index) != 0)
            return COMPILE_ERROR;
        return index;
    case AVRO_ENUM:
        index = new_type(prog, K_ENUM, (uint32_t)avro_schema_enum_number_of_symbols(schema));
        if (index == COMPILE_ERROR || remember_named(prog, schema, index) != 0)
            return COMPILE_ERROR;
        return compile_enum(prog, schema, index);
    case AVRO_RECORD:
        index = new_type(prog, K_RECORD, (uint32_t)avro_schema_record_size(schema));
        if (index == COMPILE_ERROR || remember_named(prog, schema, index) != 0)
            return COMPILE_ERROR;
        return compile_children(prog, schema, index, depth);
    case AVRO_UNION:
        index = new_type(prog, K_UNION, (uint32_t)avro_schema_union_size(schema));
        return index == COMPILE_ERROR ? index : compile_children(prog, schema, index, depth);
    case AVRO_ARRAY:
    case AVRO_MAP:
        index = new_type(prog, avro_typeof(schema) == AVRO_ARRAY ? K_ARRAY : K_MAP, 0);
        return index == COMPILE_ERROR ? index : compile_children(prog, schema, index, depth);
    case AVRO_LINK:
        break;
    }
    prog->bad = "the writer schema has a type the decoder does not know"; /* a link to a link */
    return COMPILE_ERROR;
}

/* Whether a value of writer type 'kind' can feed reader field 'target'. */
static int kind_fits(const struct schema_prog *prog, const struct avro_type *type,
                     enum target target)
{
    switch (target) {
    case T_EVENT_ID:
    case T_BOARD:
    case T_PLAYER:
        return type->kind == K_STRING || type->kind == K_BYTES;
    case T_SCORE:
    case T_TS:
        return type->kind == K_INT || type->kind == K_LONG;
    case T_OP:
        return type->kind == K_ENUM;
    case T_DIMS: {
        if (type->kind != K_MAP)
            return 0;
        uint8_t values = prog->types[type->first].kind;
        return values == K_STRING || values == K_BYTES;
    }
    default:
        return 1;
    }
}

/* A writer field fits when its type fits or, for a union, when at least one
 * branch fits (the other branches are rejected per event). */
static int field_fits(const struct schema_prog *prog, uint32_t type_index, enum target target)
{
    const struct avro_type *type = &prog->types[type_index];
    if (type->kind != K_UNION)
        return kind_fits(prog, type, target);
    for (uint32_t i = 0; i < type->count; i++)
        if (kind_fits(prog, &prog->types[prog->links[type->first + i]], target))
            return 1;
    return 0;
}

static int resolve_fields(struct schema_prog *prog, avro_schema_t record, char *err, size_t errlen)
{
    const struct avro_type *root = &prog->types[prog->root];
    unsigned seen = 0;

    prog->targets = calloc(root->count ? root->count : 1, sizeof(*prog->targets));
    if (!prog->targets) {
        snprintf(err, errlen, "out of memory");
        return -2;
    }
    for (uint32_t i = 0; i < root->count; i++) {
        const char *name = avro_schema_record_field_name(record, (int)i);
        for (int t = T_EVENT_ID; t < T__COUNT; t++) {
            if (strcmp(name, target_names[t]) != 0)
                continue;
            if (!field_fits(prog, prog->links[root->first + i], (enum target)t)) {
                snprintf(err, errlen,
                         "field '%s' has a type that cannot be read as the %s of "
                         "leaderboard.v1.ScoreEvent",
                         name,
                         t == T_OP                     ? "enum Op"
                         : t == T_DIMS                 ? "map<string>"
                         : (t == T_SCORE || t == T_TS) ? "long"
                                                       : "string");
                return -1;
            }
            prog->targets[i] = (uint8_t)t;
            seen |= 1u << t;
        }
    }
    for (int t = T_EVENT_ID; t <= T_TS; t++) {
        if (!(seen & (1u << t))) {
            snprintf(err, errlen,
                     "the writer schema has no field '%s', which "
                     "leaderboard.v1.ScoreEvent requires (it has no default)",
                     target_names[t]);
            return -1;
        }
    }
    return 0;
}

struct lb_decoder *lb_decoder_new(enum lb_wire_format format)
{
    struct lb_decoder *decoder = calloc(1, sizeof(*decoder));
    if (decoder)
        decoder->format = format;
    return decoder;
}

void lb_decoder_free(struct lb_decoder *decoder)
{
    if (!decoder)
        return;
    for (size_t i = 0; i < decoder->nprogs; i++)
        prog_free(&decoder->progs[i]);
    free(decoder->progs);
    free(decoder->unknown_hint);
    free(decoder);
}

int lb_decoder_has(const struct lb_decoder *decoder, int32_t id)
{
    for (size_t i = 0; i < decoder->nprogs; i++)
        if (decoder->progs[i].id == id)
            return 1;
    return 0;
}

int lb_decoder_refuse(struct lb_decoder *decoder, int32_t id, const char *why)
{
    struct schema_prog prog = {.id = id, .refused = strdup(why)};
    if (!prog.refused || GROW(decoder->progs, decoder->nprogs, decoder->capprogs) != 0) {
        free(prog.refused);
        return -1;
    }
    decoder->progs[decoder->nprogs++] = prog;
    return 0;
}

int lb_decoder_set_unknown_hint(struct lb_decoder *decoder, const char *hint)
{
    char *copy = strdup(hint);
    if (!copy)
        return -1;
    free(decoder->unknown_hint);
    decoder->unknown_hint = copy;
    return 0;
}

int lb_payload_schema_id(const void *payload, size_t len, int32_t *id)
{
    const uint8_t *bytes = payload;
    if (!payload || len < 5 || bytes[0] != 0)
        return -1;
    *id = (int32_t)((uint32_t)bytes[1] << 24 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 8 |
                    bytes[4]);
    return 0;
}

int lb_decoder_add_schema(struct lb_decoder *decoder, int32_t id, const char *json, size_t len,
                          char *err, size_t errlen)
{
    avro_schema_t schema = NULL;
    struct schema_prog prog = {.id = id};
    int rc = -1;

    if (decoder->format == LB_WIRE_BARE && decoder->nprogs > 0) {
        snprintf(err, errlen, "bare Avro input takes exactly one writer schema");
        return -1;
    }
    for (size_t i = 0; i < decoder->nprogs; i++) {
        if (decoder->progs[i].id == id) {
            snprintf(err, errlen, "schema id %d is mapped twice", id);
            return -1;
        }
    }
    if (avro_schema_from_json_length(json, len, &schema) != 0) {
        snprintf(err, errlen, "not a valid Avro schema: %s", avro_strerror());
        return -1;
    }
    if (avro_typeof(schema) != AVRO_RECORD) {
        snprintf(err, errlen, "the writer schema must be a record, not %s",
                 avro_schema_type_name(schema));
        goto error;
    }
    prog.root = compile_type(&prog, schema, 0);
    if (prog.root == COMPILE_ERROR) {
        snprintf(err, errlen, "%s", prog.bad ? prog.bad : "out of memory");
        rc = prog.bad ? -1 : -2;
        goto error;
    }
    if ((rc = resolve_fields(&prog, schema, err, errlen)) != 0)
        goto error;
    if (GROW(decoder->progs, decoder->nprogs, decoder->capprogs) != 0) {
        snprintf(err, errlen, "out of memory");
        rc = -2;
        goto error;
    }
    decoder->progs[decoder->nprogs++] = prog;
    avro_schema_decref(schema);
    return 0;

error:
    prog_free(&prog);
    avro_schema_decref(schema);
    return rc;
}

/* ---- decoding ---------------------------------------------------------- */

struct cursor {
    const uint8_t *pos;
    const uint8_t *end;
    int64_t fuel; /* bounds the work a payload can cause; see skip_value */
};

static int read_long(struct cursor *c, int64_t *out)
{
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->pos == c->end)
            return -1;
        uint8_t byte = *c->pos++;
        if (shift == 63 && (byte & 0x7e))
            return -1; /* more than 64 bits */
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 0;
        }
    }
    return -1;
}

/* Reads a length prefix and checks that many bytes remain. */
static int read_span(struct cursor *c, struct lb_str *out)
{
    int64_t len;
    if (read_long(c, &len) != 0 || len < 0 || len > c->end - c->pos || len > UINT32_MAX)
        return -1;
    out->ptr = (const char *)c->pos;
    out->len = (uint32_t)len;
    c->pos += len;
    return 0;
}

static int skip_bytes(struct cursor *c, int64_t n)
{
    if (n < 0 || n > c->end - c->pos)
        return -1;
    c->pos += n;
    return 0;
}

static int skip_value(const struct schema_prog *prog, uint32_t type_index, struct cursor *c,
                      int depth);

/* Arrays and maps come in blocks: a count, negative when followed by the
 * block's size in bytes (which lets us skip it at once), and 0 at the end. */
static int skip_blocks(const struct schema_prog *prog, const struct avro_type *type,
                       struct cursor *c, int depth)
{
    for (;;) {
        int64_t count, size;
        if (read_long(c, &count) != 0)
            return -1;
        if (count == 0)
            return 0;
        if (count < 0) {
            if (count == INT64_MIN || read_long(c, &size) != 0 || skip_bytes(c, size) != 0)
                return -1;
            continue;
        }
        for (int64_t i = 0; i < count; i++) {
            /* Every item costs fuel, so items that encode to zero bytes
             * cannot make a short payload loop for long. */
            if (--c->fuel < 0)
                return -1;
            if (type->kind == K_MAP) {
                struct lb_str key;
                if (read_span(c, &key) != 0)
                    return -1;
            }
            if (skip_value(prog, type->first, c, depth + 1) != 0)
                return -1;
        }
    }
}

static int skip_value(const struct schema_prog *prog, uint32_t type_index, struct cursor *c,
                      int depth)
{
    const struct avro_type *type = &prog->types[type_index];
    struct lb_str span;
    int64_t value;

    if (depth > 64 || --c->fuel < 0)
        return -1;
    switch (type->kind) {
    case K_NULL:
        return 0;
    case K_BOOLEAN:
        return skip_bytes(c, 1);
    case K_INT:
    case K_LONG:
    case K_ENUM:
        return read_long(c, &value);
    case K_FLOAT:
        return skip_bytes(c, 4);
    case K_DOUBLE:
        return skip_bytes(c, 8);
    case K_BYTES:
    case K_STRING:
        return read_span(c, &span);
    case K_FIXED:
        return skip_bytes(c, type->count);
    case K_ARRAY:
    case K_MAP:
        return skip_blocks(prog, type, c, depth);
    case K_UNION:
        if (read_long(c, &value) != 0 || value < 0 || value >= type->count)
            return -1;
        return skip_value(prog, prog->links[type->first + value], c, depth + 1);
    case K_RECORD:
        for (uint32_t i = 0; i < type->count; i++)
            if (skip_value(prog, prog->links[type->first + i], c, depth + 1) != 0)
                return -1;
        return 0;
    }
    return -1;
}

struct decode_ctx {
    const struct schema_prog *prog;
    struct cursor cursor;
    struct lb_event *event;
    struct lb_arena *arena;
    char *detail;
    size_t detaillen;
    uint32_t dims_cap; /* entries ev->dims has room for */
};

static enum lb_reject malformed(struct decode_ctx *ctx, const char *what)
{
    if (ctx->detail)
        snprintf(ctx->detail, ctx->detaillen, "truncated or malformed Avro %s", what);
    return LB_REJECT_MALFORMED;
}

static enum lb_reject read_dims(struct decode_ctx *ctx)
{
    struct lb_event *ev = ctx->event;
    struct cursor *c = &ctx->cursor;

    for (;;) {
        int64_t count, size;
        if (read_long(c, &count) != 0)
            return malformed(ctx, "in dims");
        if (count == 0)
            return LB_ACCEPT;
        if (count < 0 && (count == INT64_MIN || read_long(c, &size) != 0))
            return malformed(ctx, "in dims");
        if (count < 0)
            count = -count;
        /* Each entry needs at least two bytes; a larger count is a lie. */
        if (count > (c->end - c->pos) / 2)
            return malformed(ctx, "in dims");
        if (ev->ndims + count > LB_DIMS_MAX) {
            if (ctx->detail)
                snprintf(ctx->detail, ctx->detaillen, "dims has more than %d entries", LB_DIMS_MAX);
            return LB_REJECT_TOO_MANY_DIMS;
        }
        /* One block (the usual map): room for its entries. A map written in
         * more blocks gets, at its second, room for as many entries as the
         * rest of the payload could hold: one copy at most, so the memory a
         * payload costs does not depend on how its producer split the map. */
        if (ev->ndims + count > ctx->dims_cap) {
            int64_t cap = ev->ndims ? ev->ndims + (c->end - c->pos) / 2 : count;
            if (cap > LB_DIMS_MAX)
                cap = LB_DIMS_MAX;
            struct lb_dim *dims = lb_arena_alloc(ctx->arena, (size_t)cap * sizeof(*dims));
            if (!dims)
                return malformed(ctx, "(out of memory)");
            if (ev->ndims)
                memcpy(dims, ev->dims, ev->ndims * sizeof(*dims));
            ev->dims = dims;
            ctx->dims_cap = (uint32_t)cap;
        }
        for (int64_t i = 0; i < count; i++) {
            struct lb_dim *dim = &ev->dims[ev->ndims++];
            if (read_span(c, &dim->name) != 0 || read_span(c, &dim->value) != 0)
                return malformed(ctx, "in dims");
        }
    }
}

static enum lb_reject read_target(struct decode_ctx *ctx, uint32_t type_index, enum target target)
{
    const struct schema_prog *prog = ctx->prog;
    const struct avro_type *type = &prog->types[type_index];
    struct lb_event *ev = ctx->event;
    struct cursor *c = &ctx->cursor;
    int64_t value;

    if (type->kind == K_UNION) {
        if (read_long(c, &value) != 0 || value < 0 || value >= type->count)
            return malformed(ctx, "union index");
        const struct avro_type *branch = &prog->types[prog->links[type->first + value]];
        if (branch->kind == K_NULL && (target == T_OP || target == T_DIMS))
            return LB_ACCEPT; /* the reader default applies */
        if (!kind_fits(prog, branch, target)) {
            if (ctx->detail)
                snprintf(ctx->detail, ctx->detaillen, "field '%s' is %s", target_names[target],
                         branch->kind == K_NULL ? "null" : "of an unusable union branch");
            return LB_REJECT_NULL_FIELD;
        }
        return read_target(ctx, prog->links[type->first + value], target);
    }

    switch (target) {
    case T_EVENT_ID:
    case T_BOARD:
    case T_PLAYER: {
        struct lb_str *dst = target == T_EVENT_ID ? &ev->event_id
                             : target == T_BOARD  ? &ev->board
                                                  : &ev->player;
        return read_span(c, dst) == 0 ? LB_ACCEPT : malformed(ctx, target_names[target]);
    }
    case T_SCORE:
    case T_TS:
        if (read_long(c, &value) != 0)
            return malformed(ctx, target_names[target]);
        if (type->kind == K_INT && (value < INT32_MIN || value > INT32_MAX))
            return malformed(ctx, target_names[target]);
        *(target == T_SCORE ? &ev->score : &ev->ts_ms) = value;
        return LB_ACCEPT;
    case T_OP:
        if (read_long(c, &value) != 0 || value < 0 || value >= type->count)
            return malformed(ctx, "op");
        if (prog->symbols[type->first + value] < 0) {
            if (ctx->detail)
                snprintf(ctx->detail, ctx->detaillen,
                         "op symbol #%lld is neither SUBMIT nor RETRACT", (long long)value);
            return LB_REJECT_UNKNOWN_OP;
        }
        ev->op = (enum lb_op)prog->symbols[type->first + value];
        return LB_ACCEPT;
    case T_DIMS:
        return read_dims(ctx);
    default:
        return skip_value(prog, type_index, c, 1) == 0 ? LB_ACCEPT : malformed(ctx, "field");
    }
}

static const struct schema_prog *find_prog(const struct lb_decoder *decoder, int32_t id)
{
    for (size_t i = 0; i < decoder->nprogs; i++)
        if (decoder->progs[i].id == id)
            return &decoder->progs[i];
    return NULL;
}

enum lb_reject lb_decode(const struct lb_decoder *decoder, const void *payload, size_t len,
                         struct lb_event *event, struct lb_arena *arena, char *detail,
                         size_t detaillen)
{
    const uint8_t *bytes = payload;
    struct decode_ctx ctx = {
        .event = event, .arena = arena, .detail = detail, .detaillen = detaillen};

    memset(event, 0, sizeof(*event));
    if (decoder->format == LB_WIRE_CONFLUENT) {
        if (len < 5 || bytes[0] != 0) {
            if (detail && len < 5)
                snprintf(detail, detaillen,
                         "payload of %zu bytes is shorter than the 5-byte Confluent header", len);
            else if (detail)
                snprintf(detail, detaillen,
                         "first byte is 0x%02x, not the Confluent magic byte 0x00", bytes[0]);
            return LB_REJECT_BAD_MAGIC;
        }
        int32_t id;
        lb_payload_schema_id(payload, len, &id);
        ctx.prog = find_prog(decoder, id);
        if (!ctx.prog || ctx.prog->refused) {
            if (detail && ctx.prog)
                snprintf(detail, detaillen, "schema id %d: %s", id, ctx.prog->refused);
            else if (detail)
                snprintf(detail, detaillen, "schema id %d is not in input.schemas%s", id,
                         decoder->unknown_hint ? decoder->unknown_hint : "");
            return LB_REJECT_UNKNOWN_SCHEMA;
        }
        bytes += 5;
        len -= 5;
    } else {
        ctx.prog = decoder->nprogs ? &decoder->progs[0] : NULL;
        if (!ctx.prog)
            return LB_REJECT_UNKNOWN_SCHEMA;
    }

    ctx.cursor = (struct cursor){.pos = bytes, .end = bytes + len, .fuel = 4 * (int64_t)len + 64};
    const struct avro_type *root = &ctx.prog->types[ctx.prog->root];
    for (uint32_t i = 0; i < root->count; i++) {
        enum lb_reject r =
            read_target(&ctx, ctx.prog->links[root->first + i], (enum target)ctx.prog->targets[i]);
        if (r != LB_ACCEPT)
            return r;
    }
    if (ctx.cursor.pos != ctx.cursor.end) {
        if (detail)
            snprintf(detail, detaillen, "%zu bytes left over after the record; wrong schema id?",
                     (size_t)(ctx.cursor.end - ctx.cursor.pos));
        return LB_REJECT_MALFORMED;
    }
    return LB_ACCEPT;
}

int lb_utf8_is_valid(const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    while (p < end) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        size_t more;
        unsigned min, cp;
        if (c >= 0xc2 && c <= 0xdf) {
            more = 1, min = 0x80, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2, min = 0x800, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3, min = 0x10000, cp = c & 0x07;
        } else {
            return 0; /* a continuation byte first, 0xc0/0xc1 (overlong), or past 0xf4 */
        }
        if ((size_t)(end - p) < more)
            return 0;
        for (size_t k = 0; k < more; k++) {
            if ((p[k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[k] & 0x3f);
        }
        p += more;
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0; /* overlong, too large, or a surrogate */
    }
    return 1;
}

int lb_id_is_valid(struct lb_str s)
{
    if (s.len < 1 || s.len > LB_ID_MAX_BYTES)
        return 0;
    for (uint32_t i = 0; i < s.len; i++)
        if ((unsigned char)s.ptr[i] < 0x20 || s.ptr[i] == 0x7f)
            return 0;
    return lb_utf8_is_valid(s.ptr, s.len);
}

static int text_is_valid(struct lb_str s)
{
    return s.len >= 1 && s.len <= LB_ID_MAX_BYTES && lb_utf8_is_valid(s.ptr, s.len);
}

enum lb_reject lb_event_validate(const struct lb_event *ev, char *detail, size_t detaillen)
{
    if (!text_is_valid(ev->event_id)) {
        if (detail)
            snprintf(detail, detaillen, "event_id must be 1..%d bytes of UTF-8 (got %u bytes)",
                     LB_ID_MAX_BYTES, ev->event_id.len);
        return LB_REJECT_INVALID_EVENT_ID;
    }
    if (!lb_id_is_valid(ev->board) || memchr(ev->board.ptr, '{', ev->board.len) ||
        memchr(ev->board.ptr, '}', ev->board.len)) {
        if (detail)
            snprintf(detail, detaillen,
                     "board id must be 1..%d bytes of UTF-8 without control bytes, '{' or '}' "
                     "(got %u bytes)",
                     LB_ID_MAX_BYTES, ev->board.len);
        return LB_REJECT_INVALID_BOARD;
    }
    if (!text_is_valid(ev->player)) {
        if (detail)
            snprintf(detail, detaillen, "player id must be 1..%d bytes of UTF-8 (got %u bytes)",
                     LB_ID_MAX_BYTES, ev->player.len);
        return LB_REJECT_INVALID_PLAYER;
    }
    for (uint32_t i = 0; i < ev->ndims; i++) {
        if (!lb_utf8_is_valid(ev->dims[i].value.ptr, ev->dims[i].value.len)) {
            if (detail)
                snprintf(detail, detaillen, "dims value of '%.*s' is not UTF-8",
                         (int)(ev->dims[i].name.len < 64 ? ev->dims[i].name.len : 64),
                         ev->dims[i].name.ptr);
            return LB_REJECT_INVALID_DIMS;
        }
    }
    return LB_ACCEPT;
}

const struct lb_str *lb_event_dim(const struct lb_event *ev, const char *name, size_t len)
{
    for (uint32_t i = 0; i < ev->ndims; i++)
        if (ev->dims[i].name.len == len && memcmp(ev->dims[i].name.ptr, name, len) == 0)
            return &ev->dims[i].value;
    return NULL;
}
