/* An in-memory model of Redis running the apply script, for unit tests.
 *
 * It parses a board's EVALSHA request (the bytes the planner produced) and
 * executes what apply_script.h specifies on in-memory sorted sets, hashes
 * and markers, so the planner's output can be checked without a server:
 * the property tests drive random event sequences through the planner into
 * this model and compare it with a reference computed from the events. The
 * real script runs against real Redis in the integration tests.
 */
#ifndef APPLY_MODEL_H
#define APPLY_MODEL_H

#include <stddef.h>
#include <stdint.h>

struct model;

struct model *model_new(void);
void model_free(struct model *model);

/* The outcome of one request, as the script answers. */
enum model_answer { MODEL_OK, MODEL_PARTIAL, MODEL_OVERFLOW, MODEL_BAD_REQUEST };

struct model_partial {
    char field[128];
    int64_t marker;
};

/* Executes one EVALSHA request ('bytes', 'len'). For MODEL_PARTIAL fills up
 * to 'max' of 'partial' and '*npartial'; for MODEL_OVERFLOW the members in
 * 'overflow' (up to 'max', 128 bytes each). */
enum model_answer model_apply(struct model *model, const char *bytes, size_t len,
                              struct model_partial *partial, size_t *npartial,
                              char (*overflow)[128], size_t *noverflow, size_t max);

/* The score of 'member' in sorted set 'key'; returns 0 when absent. */
int model_score(const struct model *model, const char *key, const char *member, int64_t *score);

/* Calls 'each' for every member of every sorted set. */
void model_each(const struct model *model,
                void (*each)(void *ctx, const char *key, const char *member, int64_t score),
                void *ctx);

/* The marker of 'field' in hash 'key', or -1. */
int64_t model_marker(const struct model *model, const char *key, const char *field);

#endif
