/* The engine's assembly; see engine.h. */
#include "engine.h"
#include "apply.h"
#include "clock.h"
#include "closer.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The registry client of input.registry (a password_file read now). */
static int open_registry(struct lb_engine *e, const struct lb_config *config, char *err,
                         size_t errlen, enum lb_error_class *class)
{
    char password[1024] = "";
    struct lb_registry_options options = {.url = config->registry_url,
                                          .user = config->registry_user,
                                          .password = config->registry_password,
                                          .ca_file = config->registry_ca_file,
                                          .timeout_ms = config->registry_timeout_ms};
    if (config->registry_password_file) {
        FILE *f = fopen(config->registry_password_file, "r");
        size_t n = f ? fread(password, 1, sizeof(password) - 1, f) : 0;
        int too_long = f && n == sizeof(password) - 1;
        if (f)
            fclose(f);
        password[n] = '\0';
        password[strcspn(password, "\r\n")] = '\0';
        if (!f || !*password || too_long) {
            snprintf(err, errlen, "%s:%d: input.registry.password_file %s: %s", config->path,
                     config->registry_line, config->registry_password_file,
                     !f         ? strerror(errno)
                     : too_long ? "longer than 1022 bytes"
                                : "empty");
            *class = LB_ERROR_CONFIG;
            return -1;
        }
        options.password = password;
    }
    if (config->registry_ca_file && access(config->registry_ca_file, R_OK) != 0) {
        snprintf(err, errlen, "%s:%d: input.registry.ca_file %s: %s", config->path,
                 config->registry_line, config->registry_ca_file, strerror(errno));
        *class = LB_ERROR_CONFIG;
        return -1;
    }
    e->registry = lb_registry_new(&options, err, errlen);
    memset(password, 0, sizeof(password));
    if (!e->registry) {
        *class = LB_ERROR_RUNTIME;
        return -1;
    }
    if (lb_decoder_set_unknown_hint(e->decoder,
                                    " and the schema registry does not know it (404, error_code "
                                    "40403)") != 0) {
        snprintf(err, errlen, "out of memory");
        *class = LB_ERROR_RUNTIME;
        return -1;
    }
    return 0;
}

struct lb_cluster_options lb_engine_cluster_options(const struct lb_config *config)
{
    struct lb_cluster_options options = lb_config_cluster(config);
    options.script = lb_apply_script();
    options.script_sha = lb_apply_script_sha();
    return options;
}

static void on_applied(void *ctx, const struct lb_plan_view *plan, uint32_t board,
                       const struct lb_apply_answer *answer, int replanned)
{
    struct lb_engine *e = ctx;
    const struct lb_plan_board *b = &plan->boards[board];
    if (e->applied)
        e->applied(e->applied_ctx, plan, board, answer, replanned);
    if (answer->rebuilding && e->rebuild)
        lb_rebuild_note(e->rebuild, b->id);
    if (e->closer && b->profile && lb_profile_has_results(b->profile))
        lb_closer_note(e->closer, b->base, answer->opened);
    if (!e->tops || !b->profile || b->profile->shards <= 1)
        return;
    /* its records: their partitions' commits wait for the merged tops */
    struct lb_tops_gate *gates = malloc((b->nsegments ? b->nsegments : 1) * sizeof(*gates));
    size_t ngates = 0;
    for (uint32_t s = b->first_segment; gates && s != LB_PLAN_NONE; s = plan->segments[s].next)
        gates[ngates++] = (struct lb_tops_gate){
            plan->segments[s].topic, plan->segments[s].partition, plan->segments[s].first};
    int64_t now = lb_monotonic_ms();
    for (uint32_t k = b->first_key; k != LB_PLAN_NONE; k = plan->keys[k].next_key) {
        const struct lb_plan_key *key = &plan->keys[k];
        char name[LB_WINDOW_NAME_MAX];
        size_t len = lb_window_name(&b->profile->windows[key->window], key->window_id,
                                    key->custom_value, name, sizeof(name));
        if (len &&
            (!gates || lb_tops_note(e->tops, b->base, b->profile,
                                    (struct lb_str){name, (uint32_t)len}, gates, ngates, now) != 0))
            LB_WARN("tops",
                    "out of memory: window '%s' of board '%.*s': its merged top may show "
                    "this batch only once the window changes again, and its partitions' "
                    "commits may not wait for it",
                    name, (int)b->base.len, b->base.ptr);
    }
    free(gates);
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
    if (!e->decoder || (config->registry_url && open_registry(e, config, err, errlen, class))) {
        lb_engine_close(e);
        return NULL;
    }
    /* replay writes under its staging prefix */
    const char *prefix = options && options->key_prefix ? options->key_prefix : config->key_prefix;
    if (options) {
        e->applied = options->applied;
        e->applied_ctx = options->applied_ctx;
    }
    struct lb_pipeline_options pipeline = {{config->profiles, config->nprofiles},
                                           prefix,
                                           options && options->window_stamps,
                                           config->max_future_ms};
    if (!(e->cluster = lb_cluster_new(&e->cluster_options)) ||
        !(e->pipeline = lb_pipeline_new(&pipeline, e->decoder, e->cluster)) ||
        lb_pipeline_overlap(e->pipeline, &e->cluster_options) != 0)
        goto nomem;
    for (size_t i = 0; i < config->nprofiles; i++) {
        if (config->profiles[i].decay && !e->rebuild) {
            struct lb_rebuild_options rebuild = {config, prefix, &e->cluster_options, 0};
            const char *slow = getenv("LB_FAULT_REBUILD_INTERVAL_MS"); /* tests: a slow rebuild */
            rebuild.interval_ms = slow ? strtoll(slow, NULL, 10) : 0;
            if (!(e->rebuild = lb_rebuild_new(&rebuild)))
                goto nomem;
        }
        /* merged tops follow the live keys only: replay refreshes them
         * itself once it swapped its staging keys in */
        if (config->profiles[i].shards > 1 && !e->tops && prefix == config->key_prefix) {
            struct lb_tops_options tops = {prefix, &e->cluster_options};
            if (!(e->tops = lb_tops_new(&tops)))
                goto nomem;
        }
    }
    /* rebuilds and merged tops to note; boards with final standings for
     * the daemon's closer, set later */
    lb_pipeline_set_applied_hook(e->pipeline, on_applied, e);
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
    lb_rebuild_free(e->rebuild);
    lb_tops_free(e->tops);
    lb_pipeline_free(e->pipeline);
    lb_cluster_free(e->cluster);
    lb_registry_free(e->registry);
    lb_decoder_free(e->decoder);
    free(e);
}
