/* The engine, assembled once: the event decoder, the Redis Cluster client
 * (the apply script loaded on every connection) and the pipeline that writes
 * through it, pipelining across batches on a second client. The daemon,
 * replay and the tools open it the same way, so none of them can forget a
 * part (replay once ran without the script).
 */
#ifndef LB_ENGINE_H
#define LB_ENGINE_H

#include "cluster.h"
#include "config.h"
#include "error.h"
#include "event.h"
#include "pipeline.h"
#include "rebuild.h"
#include "tops.h"
#include "registry.h"

#include <stddef.h>

struct lb_engine_options {
    /* the keyspace the pipeline writes (borrowed: must outlive the engine);
     * NULL: the configuration's prefix */
    const char *key_prefix;
    /* latest boards keep per-window stamps only (lb_apply_options; replay
     * --window) */
    int window_stamps;
    /* called with each board request applied (replay: what it wrote
     * into staging); NULL: none */
    lb_pipeline_applied_fn applied;
    void *applied_ctx;
};

struct lb_engine {
    struct lb_decoder *decoder;
    struct lb_registry *registry; /* NULL: no input.registry */
    struct lb_cluster *cluster; /* the pipeline's first client; tools may call it between batches */
    struct lb_pipeline *pipeline;
    /* decaying boards' rebuilds, on a client of their own; NULL when no
     * profile decays. The daemon steps it between batches, replay drains it
     * before swapping. */
    struct lb_rebuild *rebuild;
    /* split boards' merged tops, on a client of their own; NULL when no
     * profile splits or the pipeline writes another keyspace (replay). The
     * daemon steps it between batches. */
    struct lb_tops *tops;
    /* final standings (closer.h): set by the daemon, which owns it; NULL in
     * replay and the tools. Boards written with results are noted to it. */
    struct lb_closer *closer;
    /* what the clients were made from, for more clients of the same cluster */
    struct lb_cluster_options cluster_options;
    lb_pipeline_applied_fn applied; /* lb_engine_options' */
    void *applied_ctx;
};

/* The cluster options of every program that writes through the pipeline:
 * the redis: section of 'config' (borrowed) and the apply script, which the
 * client loads on every connection and again wherever a node answers
 * NOSCRIPT. */
struct lb_cluster_options lb_engine_cluster_options(const struct lb_config *config);

/* Opens the engine for 'config' (borrowed: it must outlive the engine).
 * Opens no connection: the cluster client connects on first use. On failure
 * returns NULL with one line in 'err' and its class in '*class' (may be
 * NULL): LB_ERROR_CONFIG for a schema that does not load. */
struct lb_engine *lb_engine_open(const struct lb_config *config,
                                 const struct lb_engine_options *options, char *err, size_t errlen,
                                 enum lb_error_class *class);
/* Accepts NULL. */
void lb_engine_close(struct lb_engine *engine);

#endif
