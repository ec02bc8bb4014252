/* libFuzzer: a writer schema as an upstream team registers it (.avsc JSON)
 * compiled for the canonical reader; when it compiles, a fixed payload is
 * decoded with it. Seeds: schemas/, tests/unit/schemas/ and
 * tests/fuzz/findings/ (ops/fuzz.sh).
 *
 * avro-c leaks what it built when it refuses some schemas (a named type
 * defined twice; tests/fuzz/findings/avsc-type-defined-twice.avsc): no
 * caller can free it. So a schema avro-c refuses is compiled with leak
 * detection off, and every schema it accepts with it on, where a schema
 * our decoder forgets to release is caught. */
#include "fuzz.h"

#include "arena.h"
#include "event.h"

#include <avro.h>
#include <sanitizer/lsan_interface.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* id 1; event "e", board "b", player "p", score 2, ts 3, op SUBMIT, no dims */
    static const uint8_t payload[] = {0, 0, 0, 0, 1, 2, 'e', 2, 'b', 2, 'p', 4, 6, 0, 0};
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    char err[512];
    if (!d)
        return 0;
    avro_schema_t schema;
    __lsan_disable();
    int accepted = avro_schema_from_json_length((const char *)data, size, &schema) == 0;
    if (accepted)
        avro_schema_decref(schema);
    else
        lb_decoder_add_schema(d, 1, (const char *)data, size, err, sizeof(err));
    __lsan_enable();
    if (accepted && lb_decoder_add_schema(d, 1, (const char *)data, size, err, sizeof(err)) == 0) {
        struct lb_arena arena;
        struct lb_event ev;
        lb_arena_init(&arena, 1024);
        lb_decode(d, payload, sizeof(payload), &ev, &arena, err, sizeof(err));
        lb_arena_free(&arena);
    }
    lb_decoder_free(d);
    return 0;
}
