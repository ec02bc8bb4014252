/* The engine's assembly; see engine.h. */
#include "engine.h"
#include "apply.h"

#include <stdio.h>
#include <stdlib.h>

struct lb_cluster_options lb_engine_cluster_options(const struct lb_config *config)
{
    struct lb_cluster_options options = lb_config_cluster(config);
    options.script = lb_apply_script();
    options.script_sha = lb_apply_script_sha();
    return options;
}

struct lb_engine *lb_engine_open(const struct lb_config *config,
                                 const struct lb_engine_options *options, char *err, size_t errlen,
                                 enum lb_error_class *class)
{
    enum lb_error_class ignored;
    if (!class)
        class = &ignored;
    struct lb_engine *e = calloc(1, sizeof(*e));
    if (!e)
        goto nomem;
    e->cluster_options = lb_engine_cluster_options(config);
    e->decoder = lb_config_decoder(config, err, errlen, class);
    if (!e->decoder) {
        lb_engine_close(e);
        return NULL;
    }
    /* replay writes under its staging prefix */
    const char *prefix = options && options->key_prefix ? options->key_prefix : config->key_prefix;
    struct lb_pipeline_options pipeline = {
        {config->profiles, config->nprofiles}, prefix, config->max_future_ms};
    if (!(e->cluster = lb_cluster_new(&e->cluster_options)) ||
        !(e->pipeline = lb_pipeline_new(&pipeline, e->decoder, e->cluster)) ||
        lb_pipeline_overlap(e->pipeline, &e->cluster_options) != 0)
        goto nomem;
    *class = LB_ERROR_NONE;
    return e;
nomem:
    snprintf(err, errlen, "out of memory");
    *class = LB_ERROR_RUNTIME;
    lb_engine_close(e);
    return NULL;
}

void lb_engine_close(struct lb_engine *e)
{
    if (!e)
        return;
    lb_pipeline_free(e->pipeline);
    lb_cluster_free(e->cluster);
    lb_decoder_free(e->decoder);
    free(e);
}
