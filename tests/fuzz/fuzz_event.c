/* libFuzzer: one Kafka record value decoded and validated as the projector
 * does, Confluent-framed (schema id 7: score_event.avsc; id 3: the evolved
 * writer schema of the unit tests) and bare. Seeds: corpus/event, written
 * by the unit tests (LB_FUZZ_SEEDS, see tests/unit/test_event.c). */
#include "fuzz.h"

#include "arena.h"
#include "event.h"

#include <stdlib.h>

static struct lb_decoder *confluent, *bare;
static struct lb_arena arena;

static struct lb_decoder *decoder(enum lb_wire_format format)
{
    struct lb_decoder *d = lb_decoder_new(format);
    char err[512];
    size_t len;
    char *canonical = fuzz_read_source("schemas/score_event.avsc", &len);
    if (!d || lb_decoder_add_schema(d, 7, canonical, len, err, sizeof(err)) != 0)
        fuzz_die("schemas/score_event.avsc", err);
    free(canonical);
    if (format == LB_WIRE_CONFLUENT) {
        char *evolved = fuzz_read_source("tests/unit/schemas/evolved_score_event.avsc", &len);
        if (lb_decoder_add_schema(d, 3, evolved, len, err, sizeof(err)) != 0)
            fuzz_die("the evolved schema", err);
        free(evolved);
    }
    return d;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    confluent = decoder(LB_WIRE_CONFLUENT);
    bare = decoder(LB_WIRE_BARE);
    lb_arena_init(&arena, 4096);
    return 0;
}

static void decode(const struct lb_decoder *d, const uint8_t *data, size_t size)
{
    struct lb_event ev;
    char detail[200];
    lb_arena_reset(&arena);
    if (lb_decode(d, data, size, &ev, &arena, detail, sizeof(detail)) == LB_ACCEPT) {
        lb_event_validate(&ev, detail, sizeof(detail));
        for (size_t i = 0; i < ev.ndims; i++) { /* every dim must be readable */
            fuzz_touch(ev.dims[i].name.ptr, ev.dims[i].name.len);
            fuzz_touch(ev.dims[i].value.ptr, ev.dims[i].value.len);
        }
        fuzz_touch(ev.board.ptr, ev.board.len);
        fuzz_touch(ev.player.ptr, ev.player.len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode(confluent, data, size);
    decode(bare, data, size);
    return 0;
}
