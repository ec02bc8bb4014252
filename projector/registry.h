/* A client of a Confluent-compatible schema registry: the writer schemas of
 * schema ids that input.schemas does not map, fetched once each
 * (GET <url>/schemas/ids/<id>) and kept for the life of the process (an id
 * names one schema forever).
 *
 * Three answers matter to the caller, who must never dead-letter a record
 * because the registry was out of reach:
 *
 *   the schema      compiled into the decoder (or refused there for good,
 *                   with the reason, when it is not an Avro ScoreEvent
 *                   writer the projector can read);
 *   unknown id      the registry answered 404 with error_code 40403: records
 *                   of the id are dead-lettered as unknown_schema_id; the id
 *                   is asked for again 10 s later;
 *   no answer       unreachable, timed out, 5xx, credentials refused, a 404
 *                   without 40403 (a wrong base path), a body that is not the
 *                   documented JSON: the record waits, and the registry is not
 *                   asked again before a back-off (1 s doubling to 30 s) has
 *                   passed.
 *
 * One request at a time (libcurl, one connection kept alive), one per id, not
 * per record. A request is waited for at most 200 ms; one that takes longer
 * (a registry that drops packets, up to the configured timeout) runs on in
 * the background, moved along by every later call, while its records wait:
 * the caller's loop is never stalled for longer than that. Not thread-safe:
 * the daemon's (or replay's) thread owns it.
 */
#ifndef LB_REGISTRY_H
#define LB_REGISTRY_H

#include "event.h"

#include <stddef.h>
#include <stdint.h>

struct lb_registry_options {
    const char *url;      /* http(s)://host:port[/base/path] */
    const char *user;     /* basic auth, or NULL */
    const char *password; /* with user */
    const char *ca_file;  /* https: the CA bundle (PEM), or NULL: the system's */
    int64_t timeout_ms;   /* one request, connecting included */
};

struct lb_registry;

/* Returns NULL with a sentence in 'err' when out of memory or libcurl cannot
 * start. Opens no connection. */
struct lb_registry *lb_registry_new(const struct lb_registry_options *options, char *err,
                                    size_t errlen);
/* Accepts NULL. */
void lb_registry_free(struct lb_registry *registry);

/* Whether 'decoder' can decide now about records of schema id 'id': 1 when
 * it can (it has the schema or refuses it, or the registry does not know the
 * id, or the id is negative, which no registry gives: such records are
 * rejected), 0 when not now (no answer yet, or no answer
 * at all: the records must wait), -1 when out of memory. Starts a request
 * only when none is in flight and the registry is not backed off. 'mono_ms'
 * is the monotonic clock. */
int lb_registry_resolve(struct lb_registry *registry, struct lb_decoder *decoder, int32_t id,
                        int64_t mono_ms);

/* Moves the request in flight along without waiting, settling its answer
 * into 'decoder' if it has come. Returns -1 when out of memory. */
int lb_registry_progress(struct lb_registry *registry, struct lb_decoder *decoder, int64_t mono_ms);

struct lb_registry_stats {
    uint64_t fetched;  /* schemas fetched and compiled */
    uint64_t unknown;  /* 404 answers (error_code 40403) */
    uint64_t unusable; /* schemas fetched that the decoder refused */
    uint64_t failures; /* requests without an answer (see above) */
    int up;            /* the last request finished got an answer (1 before the first) */
    int64_t retry_at;  /* monotonic ms before which nothing is asked; 0: now */
    char why[320];     /* the last failure, naming the registry */
};
const struct lb_registry_stats *lb_registry_stats(const struct lb_registry *registry);

#endif
