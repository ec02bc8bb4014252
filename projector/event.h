/* Score events: decoding Kafka message payloads into lb_event.
 *
 * Payloads are Avro binary, either framed the Confluent way (0x00, 4-byte
 * big-endian schema id, body) or bare with one configured writer schema. The
 * writer schemas are compiled once (at start; those from the schema registry
 * when first needed, see registry.h) into a small program resolved
 * against the reader schema leaderboard.v1.ScoreEvent (schemas/score_event.avsc):
 * fields are matched by name, int promotes to long, bytes to string, unknown
 * writer fields are skipped, op and dims take their defaults when the writer
 * lacks them. A writer schema that lacks a field without a default, or gives
 * it an incompatible type, is refused at start, not at the first event.
 *
 * Decoding never allocates per string: the decoded strings point into the
 * payload, which the caller keeps alive for as long as the event is used.
 * Every length and varint is bounds-checked; a payload that is truncated,
 * overlong or otherwise malformed yields a reject reason, never a crash.
 */
#ifndef LB_EVENT_H
#define LB_EVENT_H

#include "arena.h"

#include <stddef.h>
#include <stdint.h>

enum lb_op { LB_OP_SUBMIT = 0, LB_OP_RETRACT = 1 };

struct lb_dim {
    struct lb_str name;
    struct lb_str value;
};

#define LB_ID_MAX_BYTES 128 /* longest accepted board or player id */
#define LB_DIMS_MAX     32  /* most dims entries an event may carry */

struct lb_event {
    struct lb_str event_id;
    struct lb_str board;
    struct lb_str player;
    int64_t score;
    int64_t ts_ms;
    enum lb_op op;
    uint32_t ndims;
    struct lb_dim *dims; /* in the arena passed to lb_decode */
};

/* Why an event cannot be projected. The names are stable: they are metric
 * labels and dead-letter headers. */
enum lb_reject {
    LB_ACCEPT = 0,
    LB_REJECT_BAD_MAGIC,
    LB_REJECT_UNKNOWN_SCHEMA,
    LB_REJECT_MALFORMED,
    LB_REJECT_NULL_FIELD,
    LB_REJECT_UNKNOWN_OP,
    LB_REJECT_TOO_MANY_DIMS,
    LB_REJECT_INVALID_BOARD,
    LB_REJECT_INVALID_PLAYER,
    LB_REJECT_SCORE_RANGE,
    LB_REJECT_TIME_RANGE,
    LB_REJECT_INVALID_DIMS,
    LB_REJECT_SUM_RANGE,
    LB_REJECT_RETRACTION, /* the board's profile says retractions: reject */
    LB_REJECT_INVALID_EVENT_ID,
    LB_REJECT_TS_IN_FUTURE, /* ts further ahead of its record's timestamp than input.max_future */
    /* too late for a closed window (final standings): dead-lettered, its
     * other windows written; counted as lb_late_after_close_total */
    LB_REJECT_WINDOW_CLOSED,
    LB_REJECT__COUNT
};

const char *lb_reject_name(enum lb_reject reason);

enum lb_wire_format { LB_WIRE_CONFLUENT = 0, LB_WIRE_BARE };

struct lb_decoder;

/* Creates an empty decoder for 'format'. Returns NULL when out of memory. */
struct lb_decoder *lb_decoder_new(enum lb_wire_format format);
/* Accepts NULL. */
void lb_decoder_free(struct lb_decoder *decoder);

/* Compiles the writer schema 'json' (Avro JSON) for schema id 'id' (ignored
 * for LB_WIRE_BARE, which takes exactly one schema). Returns 0; -1 with a
 * sentence in 'err' when the schema cannot serve; -2 when out of memory. The
 * decoder does not keep 'json'. */
int lb_decoder_add_schema(struct lb_decoder *decoder, int32_t id, const char *json, size_t len,
                          char *err, size_t errlen);

/* Whether schema id 'id' is known: added, or refused. */
int lb_decoder_has(const struct lb_decoder *decoder, int32_t id);
/* Records of schema id 'id' are rejected as unknown_schema_id with 'why'
 * (copied), e.g. a schema from the registry that cannot serve. Returns 0,
 * or -1 when out of memory. */
int lb_decoder_refuse(struct lb_decoder *decoder, int32_t id, const char *why);
/* Appended to the detail of an id neither added nor refused (copied), e.g.
 * "; the schema registry does not know it either". Returns 0 or -1. */
int lb_decoder_set_unknown_hint(struct lb_decoder *decoder, const char *hint);
/* The schema id of a Confluent-framed payload: 0, or -1 when it has no such
 * frame. */
int lb_payload_schema_id(const void *payload, size_t len, int32_t *id);

/* Decodes one payload into 'event'. Strings in 'event' point into 'payload';
 * the dims array is allocated from 'arena'. Returns LB_ACCEPT or the reject
 * reason, with a short explanation in 'detail' (may be NULL). Decoding does
 * not validate ids or ranges: see lb_event_validate. Thread-compatible: one
 * decoder may be shared by threads that each pass their own arena, as long as
 * none adds or refuses a schema meanwhile. */
enum lb_reject lb_decode(const struct lb_decoder *decoder, const void *payload, size_t len,
                         struct lb_event *event, struct lb_arena *arena, char *detail,
                         size_t detaillen);

/* Checks what holds for every board: event_id, board and player are 1..128
 * bytes of UTF-8, the board has no control bytes (NUL included) and no '{'
 * or '}' (they would break the key's hash tag), every dims value is UTF-8
 * (keys and clients that list them expect text). */
enum lb_reject lb_event_validate(const struct lb_event *event, char *detail, size_t detaillen);

/* Whether 's' can be part of a key: 1..128 bytes of UTF-8, no control
 * bytes. Board ids and the dims values that name custom windows must be. */
int lb_id_is_valid(struct lb_str s);
/* Whether 'len' bytes at 'p' are well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
int lb_utf8_is_valid(const char *p, size_t len);

/* Returns the value of dims entry 'name', or NULL when the event has none. */
const struct lb_str *lb_event_dim(const struct lb_event *event, const char *name, size_t len);

#endif
