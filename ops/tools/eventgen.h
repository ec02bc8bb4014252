/* Deterministic score events for loadgen and lbbench.
 *
 * Event i depends only on the seed, the options and i: its own random stream
 * is seeded from (seed, i), so flags that change one field leave the others
 * alone and any subset of the sequence can be regenerated. Players follow a
 * Zipf distribution (a few hot players post most scores, as on real boards),
 * boards are uniform, times uniform over [start, start + days), scores
 * uniform in [0, score_max].
 *
 * The Avro encoder is written by hand from schemas/score_event.avsc and
 * shares no code with the projector's decoder, so tests exercise the decoder
 * against an independent encoder.
 */
#ifndef LB_EVENTGEN_H
#define LB_EVENTGEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct gen_options {
    uint64_t seed;
    uint32_t boards;
    uint32_t players;
    double zipf;
    int64_t score_max;
    int64_t start_ms;
    int days;
    int hours;                /* if set, the span in hours instead of days */
    int ts_now;               /* event time = the wall clock when generated (not deterministic) */
    const char *board_prefix; /* or several, comma-separated, taken in turn */
    const char *dim_name;     /* optional: add dims {name: value} */
    uint32_t dim_values;
    const char *dim_list; /* optional: "A,B,C": the values, instead of vK */
    int retract_every;    /* every Nth event is a RETRACT */
    int retry_every;      /* every Nth event is a retry of an earlier one (its event_id) */
    int poison_every;     /* every Nth event is a poison event, of each kind in turn */
    int bare;             /* bare Avro instead of the Confluent framing */
    int32_t schema_id;
    /* Schema evolution: when 'evolve' is set, event i is written by
     * writer i mod 3 under that id: GEN_WRITER_V1 (schemas/score_event.avsc),
     * GEN_WRITER_V2 (plus an optional field with a default) or GEN_WRITER_V3
     * (no dims: its events carry none). Poison events keep schema_id. */
    int evolve;
    int32_t evolve_ids[3];
};

enum { GEN_WRITER_V1 = 0, GEN_WRITER_V2, GEN_WRITER_V3 };
/* The writer schemas of the evolution, as a producer registers them. */
extern const char *const gen_writer_schemas[3];

struct gen_event {
    char event_id[48];
    char board[64];
    char player[32];
    int64_t score;
    int64_t ts_ms;
    int op; /* 0 SUBMIT, 1 RETRACT */
    char dim_value[32];
    int poison; /* 0, or the kind of poison (GEN_POISON_*) */
    int writer; /* GEN_WRITER_* */
};

/* Events the projector must dead-letter, one of each reason it can see in
 * an otherwise well-formed stream. */
enum {
    GEN_POISON_BAD_MAGIC = 1,
    GEN_POISON_UNKNOWN_SCHEMA,
    GEN_POISON_MALFORMED,
    GEN_POISON_SCORE_RANGE,
    GEN_POISON_INVALID_BOARD,
    GEN_POISON_INVALID_PLAYER,
    GEN_POISON_UNKNOWN_OP, /* op BAN under schema id 2, a writer the projector
                            * must be configured with but cannot apply */
    GEN_POISON_BOARD_NOT_UTF8,
    GEN_POISON_EVENT_ID_NOT_UTF8,
    GEN_POISON_TS_IN_FUTURE, /* an hour ahead of the clock, so of the record's timestamp */
    GEN_POISON__COUNT
};

#define GEN_PAYLOAD_MAX 512

struct generator;

/* Prepares the Zipf table. Returns NULL when out of memory. 'options' is
 * copied. */
struct generator *gen_new(const struct gen_options *options);
void gen_free(struct generator *gen);

/* Fills 'ev' with event number 'index'. */
void gen_event(const struct generator *gen, uint64_t index, struct gen_event *ev);

/* Encodes 'ev' (Confluent framing unless options.bare) into 'buf', which
 * holds GEN_PAYLOAD_MAX bytes; returns the length. */
size_t gen_encode(const struct generator *gen, const struct gen_event *ev, uint8_t *buf);

/* 'ev' with its player id replaced by 'player_bytes' bytes ('p' repeated):
 * a record larger than most topics allow, which the projector rejects as
 * invalid_player. Returns the payload (malloc'ed, '*len' bytes) and stores
 * the player id, also the record's key, in '*player' (malloc'ed); NULL when
 * out of memory. */
uint8_t *gen_encode_huge(const struct generator *gen, const struct gen_event *ev,
                         size_t player_bytes, size_t *len, char **player);

/* One TSV line: event_id board player score ts_ms op dim_value, where op is
 * SUBMIT, RETRACT or POISON:<the reason the projector must give>. */
void gen_print(FILE *out, const struct gen_event *ev);

#endif
