/* replay: rebuilds lost leaderboards from the events Kafka still retains,
 * beside the live projector.
 *
 * How it stays correct while the projector keeps writing the same boards:
 *
 *  1. It reads every partition of the configured topics with its own
 *     assignment (never joining or committing for the live group) and runs
 *     the selected boards' events through the projector's own engine
 *     (decoder, profiles, planner, apply script, cluster client) into
 *     staging keys: the same keys under the run's own prefix
 *     "<prefix>~replay:r<epoch>-<pid>:", so "lb:~replay:r1796089537885-4711:{B}:daily:2026-05-04"
 *     shares board B's hash tag and slot, and no other run writes it.
 *     The staging copy has its own applied-offset markers, so retries and
 *     redeliveries inside the replay count once, as in the projector.
 *
 *  2. Per board, one atomic swap script then moves the staging keys over the
 *     live ones and deletes live keys the events do not produce, provided
 *     the live projector has not applied anything past what replay read:
 *     for every partition, the live marker must be <= the last offset replay
 *     read. It then sets the live markers to that offset, so the projector
 *     skips what replay applied and applies everything after it: no event is
 *     lost or counted twice, for best, latest and sum boards alike. If the
 *     projector got ahead, replay reads further and tries again.
 *
 *  3. With --window, only some keys of a board are replaced while its other
 *     keys (and its markers) stay live, so markers cannot move: the swap
 *     then requires the staging copy to hold exactly the events the live
 *     projector applied to the board: per partition, replay's last event of
 *     the board <= the live marker <= the last offset replay read (no event
 *     of the board lies between), and retries until that holds.
 *
 *  --verify builds the same staging copy and compares it with the live keys
 *  instead of swapping (when the live projector has applied exactly what
 *  replay read, per the markers and committed offsets), then deletes it.
 *
 * Exit codes (README, "Exit codes"): 0 done (or verified equal), 1 Kafka or
 * Redis failure, 2 usage, 3 configuration, 4 retention gap (refused without
 * --allow-gap), 5 verify found differences. The command line, --window
 * against the profiles and the syntax of --node are checked before Kafka or
 * Redis is contacted.
 */
#include "usage.h"
#include "replay.h"

/* Whether --from/--to 'spec' has a form replay_resolve() understands. */
static int offset_spec_valid(const char *spec)
{
    int64_t ms;
    char *end;
    if (strcmp(spec, "earliest") == 0 || strcmp(spec, "latest") == 0 ||
        strcmp(spec, "committed") == 0 || lb_time_parse(spec, &ms) == 0)
        return 1;
    long long offset = strtoll(spec, &end, 10);
    return *end == '\0' && end != spec && offset >= 0;
}

/* The command line's selection and range, for the journal. */
static void describe_selection(struct replay *r, int argc, char **argv)
{
    size_t used = 0;
    for (int i = 1; i < argc && used + 2 < sizeof(r->selection); i++) {
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--config=", 9) == 0)
            continue;
        int n = snprintf(r->selection + used, sizeof(r->selection) - used, "%s%s", used ? " " : "",
                         argv[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used >= sizeof(r->selection))
        used = sizeof(r->selection) - 1;
    r->selection[used] = '\0';
}

/* Shows, after the plan, what an earlier run that did not finish left: the
 * boards it swapped (they are rebuilt again; the result is the same) and
 * the staging keys that are deleted before reading. */
static int print_leftovers(struct replay *r)
{
    struct replay_leftover old;
    struct strings live = {0}, staged = {0};
    if (replay_journal_read(r->engine->cluster, r->config->key_prefix,
                            r->o.dry_run ? NULL : &r->lease, &old) != 0 ||
        replay_scan_keys(r, &live, &staged, 1) != 0) {
        fprintf(stderr, "replay: cannot read what an earlier run left in Redis: %s\n",
                lb_cluster_error(r->engine->cluster));
        replay_strings_free(&live);
        replay_strings_free(&staged);
        return -1;
    }
    if (old.found)
        printf("  an earlier replay did not finish: %s, selection '%s'; it swapped "
               "%zu board(s)%s%s%s\n",
               old.owner, old.selection, old.swapped, old.swapped ? " (" : "", old.examples,
               old.swapped > 5 ? ", ...)"
               : old.swapped   ? ")"
                               : "");
    if (old.reopening)
        printf("  %zu closed window(s) left reopening by a replay --republish that did not "
               "finish (%s%s): no pod publishes them until a replay --republish of them "
               "completes\n",
               old.reopening, old.reopening_examples, old.reopening > 5 ? ", ..." : "");
    if (staged.count)
        printf("  %zu staging key(s) left by an earlier run %s\n", staged.count,
               r->o.dry_run ? "would be deleted" : "are deleted before reading");
    if (old.found || staged.count)
        printf("  (this run rebuilds its whole selection; boards swapped before are simply "
               "rebuilt again)\n");
    if (!r->o.dry_run)
        printf("  this run stages its copy under %s{<board>}:...\n", r->staging_prefix);
    fflush(stdout);
    replay_strings_free(&live);
    replay_strings_free(&staged);
    return 0;
}

/* The end of a run that holds the lease: on success the journal goes; on
 * failure or interrupt, staging keys and fences this run set are removed
 * (every swap is atomic per board, so nothing is half-swapped), the journal
 * stays for the next run to show, and one line says what was done. */
static int finish(struct replay *r, int status)
{
    if (status == EXIT_GAP) {
        /* refused before writing anything */
    } else if (status == EXIT_OK || status == EXIT_DIFFERENT) {
        replay_fault_stop("LB_FAULT_FINISH_STOP");
        replay_clear_staging(r, NULL, 0);
        replay_journal_finish(&r->lease);
    } else {
        struct strings fenced = replay_boards_of(&r->fenced);
        if (fenced.count && replay_fence_boards(r, &fenced, 1) != 0)
            fprintf(stderr,
                    "replay: the fences this run set could not all be lifted: the live "
                    "projector holds those boards until their fences expire (%d s at most)\n",
                    FENCE_TTL_MS / 1000);
        replay_strings_free(&fenced);
        size_t deleted = 0;
        int cleared = replay_clear_staging(r, &deleted, 0) == 0;
        fprintf(stderr,
                "replay: %s: %zu of %zu board(s) swapped (each swap is atomic; the others are "
                "untouched)%s; run replay again to finish\n",
                replay_interrupted ? "interrupted" : "stopped on the error above",
                r->sel.done.count, r->sel.seen.count,
                cleared ? ", staging keys deleted" : ", staging keys left for the next run");
    }
    replay_lease_release(&r->lease);
    return status;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: replay --config FILE (--slots LIST | --node HOST:PORT | --board ID...) "
            "[OPTION]...\n"
            "\n"
            "Rebuilds the selected leaderboards from the events Kafka retains, through the\n"
            "projector's own engine, beside the running projector (see ops/runbooks).\n"
            "\n"
            "What to rebuild (at least one; together they narrow):\n"
            "  --slots LIST         hash slots, e.g. 0-5460,12000\n"
            "  --node HOST:PORT     the slots that master owns now\n"
            "  --board ID           a board id or a pattern (ach:*); repeatable\n"
            "  --window SUFFIX      only these windows of the boards: alltime,\n"
            "                       daily:2026-05-04, weekly:2026-W18, monthly:2026-05 or\n"
            "                       <dim>:VALUE of a custom window; repeatable\n"
            "What to read (every partition of the configured topics):\n"
            "  --from SPEC          earliest (default), an offset, or an RFC 3339 time\n"
            "  --to SPEC            committed (the live group's offsets; default),\n"
            "                       latest, an offset or an RFC 3339 time\n"
            "How:\n"
            "  --dry-run            print the plan and stop\n"
            "  --allow-gap          run although retention deleted events in the range\n"
            "  --verify             compare the selection with Redis instead of writing it\n"
            "  --max-rate N         read at most N events per second\n"
            "  --verbose            per-partition progress\n"
            "  --republish          reopen the selection's closed windows (final\n"
            "                       standings), rebuild them from every event, and have\n"
            "                       the pods close and publish them again\n"
            "\n"
            "Exit status: 0 done (or --verify found no difference); 1 failure (Kafka or\n"
            "Redis, interrupted, another replay running); 2 usage error (a bad command\n"
            "line, a --window no profile has, a --node that owns no slots); 3 invalid\n"
            "configuration; 4 retention gap (refused without --allow-gap); 5 --verify\n"
            "found differences.\n"
            "\n"
            "Examples:\n"
            "  replay --config /etc/projector.yaml --node 10.0.0.7:6379 --dry-run\n"
            "  replay --config /etc/projector.yaml --node 10.0.0.7:6379\n"
            "  replay --config /etc/projector.yaml --node 10.0.0.7:6379 --verify\n"
            "  replay --config /etc/projector.yaml --board 'ach:*' --from 2026-05-01T00:00:00Z\n");
}

static int node_slots(struct replay *r, const char *node)
{
    int found = 0;
    for (int s = 0; s < LB_SLOTS; s++) {
        const char *owner = lb_cluster_slot_owner(r->engine->cluster, (uint16_t)s);
        if (owner && strcmp(owner, node) == 0) {
            r->sel.slots[s] = 1;
            found = 1;
        }
    }
    r->sel.any_slots = 1;
    return found ? 0 : -1;
}

/* Whether a profile's boards can be among the selection: every board when
 * no --board was given, else when a --board pattern and one of the
 * profile's patterns match each other as text. */
static int profile_selected(const struct lb_profile *profile, const struct strings *boards)
{
    if (!boards->count)
        return 1;
    /* either pattern may be the broader one: "run:*" and "*" meet */
    for (size_t b = 0; b < boards->count; b++)
        for (size_t m = 0; m < profile->nmatch; m++)
            if (fnmatch(profile->match[m], boards->items[b], 0) == 0 ||
                fnmatch(boards->items[b], profile->match[m], 0) == 0)
                return 1;
    return 0;
}

/* Whether --window 'window' is the patch window or the overall board of a
 * decaying profile whose boards may be selected (with the reason in 'err'):
 * those are replayed whole, since the overall board is a function of every
 * patch board and of ~patches. */
static int decaying_window(const struct lb_config *config, const struct strings *boards,
                           const char *window, char *err, size_t errlen)
{
    size_t len = strcspn(window, ":");
    for (size_t p = 0; p < config->nprofiles; p++) {
        const struct lb_decay_config *decay = config->profiles[p].decay;
        if (decay && profile_selected(&config->profiles[p], boards) &&
            (strcmp(window, decay->key) == 0 ||
             (strlen(decay->dim) == len && strncmp(window, decay->dim, len) == 0))) {
            snprintf(err, errlen,
                     "--window %s: profile '%s' decays; its patch windows and overall board '%s' "
                     "are replayed with the whole board (drop --window): the overall board is "
                     "computed from every patch board",
                     window, config->profiles[p].name, decay->key);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    lb_usage_program = "replay";
    enum { O_ALLOW_GAP = 256, O_MAX_RATE, O_VERBOSE, O_REPUBLISH };
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"slots", required_argument, NULL, 's'},
                                             {"node", required_argument, NULL, 'n'},
                                             {"board", required_argument, NULL, 'b'},
                                             {"window", required_argument, NULL, 'w'},
                                             {"from", required_argument, NULL, 'f'},
                                             {"to", required_argument, NULL, 't'},
                                             {"dry-run", no_argument, NULL, 'd'},
                                             {"allow-gap", no_argument, NULL, O_ALLOW_GAP},
                                             {"verify", no_argument, NULL, 'v'},
                                             {"max-rate", required_argument, NULL, O_MAX_RATE},
                                             {"verbose", no_argument, NULL, O_VERBOSE},
                                             {"republish", no_argument, NULL, O_REPUBLISH},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    static struct replay r;
    char err[1024], *end;
    int opt, status = EXIT_OK;

    r.o.from = "earliest";
    r.o.to = "committed";
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":c:s:n:b:w:f:t:dvh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            r.o.config_path = optarg;
            break;
        case 's':
            if (replay_parse_slots(optarg, &r.sel) != 0)
                return lb_usage_error("--slots wants slots 0..16383 like 0-5460,12000, not '%s'",
                                      optarg);
            break;
        case 'n':
            if (replay_check_node(optarg) != 0)
                return lb_usage_error("--node wants the HOST:PORT of a master, like "
                                      "10.0.0.7:6379, not '%s'",
                                      optarg);
            r.o.node = optarg;
            break;
        case 'b':
            replay_strings_add(&r.sel.boards, optarg, strlen(optarg));
            break;
        case 'w':
            replay_strings_add(&r.sel.windows, optarg, strlen(optarg));
            break;
        case 'f':
            r.o.from = optarg;
            break;
        case 't':
            r.o.to = optarg;
            break;
        case 'd':
            r.o.dry_run = 1;
            break;
        case O_ALLOW_GAP:
            r.o.allow_gap = 1;
            break;
        case 'v':
            r.o.verify = 1;
            break;
        case O_MAX_RATE:
            r.o.max_rate = strtod(optarg, &end);
            if (*end || end == optarg || !(r.o.max_rate > 0))
                return lb_usage_error("--max-rate wants events per second, not '%s'", optarg);
            break;
        case O_VERBOSE:
            r.o.verbose = 1;
            break;
        case O_REPUBLISH:
            r.o.republish = 1;
            break;
        case 'h':
            usage(stdout);
            return EXIT_OK;
        default:
            return lb_bad_option(opt, argv);
        }
    }
    if (optind != argc)
        return lb_usage_error("unexpected argument '%s'", argv[optind]);
    if (!r.o.config_path)
        return lb_usage_error("--config FILE is required");
    if (!r.sel.any_slots && !r.o.node && !r.sel.boards.count)
        return lb_usage_error("say what to rebuild: --slots, --node or --board");
    for (const char *spec = r.o.from, *name = "--from"; spec;
         spec = spec == r.o.from ? r.o.to : NULL, name = "--to") {
        if (!offset_spec_valid(spec))
            return lb_usage_error("%s wants earliest, latest, committed, an offset or an RFC 3339 "
                                  "time like 2026-05-04T00:00:00Z, not '%s'",
                                  name, spec);
    }
    if (r.o.republish && (r.o.verify || strcmp(r.o.from, "earliest") != 0))
        return lb_usage_error("--republish rebuilds closed windows from every event: it takes "
                              "no --verify and no --from");
    describe_selection(&r, argc, argv);
    lb_log_threshold = r.o.verbose ? LB_LOG_INFO : LB_LOG_ERROR;
    /* librdkafka's own lines only with --verbose: replay says what failed */
    lb_kafka_log_quiet = !r.o.verbose;
    if (lb_config_load(r.o.config_path, &r.config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return EXIT_CONFIG;
    }
    if (r.o.republish && !r.config->results_topic) {
        lb_config_free(r.config);
        return lb_usage_error("--republish: %s names no results topic (no window has final "
                              "standings)",
                              r.o.config_path);
    }
    for (size_t i = 0; i < r.sel.windows.count; i++) {
        if (lb_config_check_window(r.config->profiles, r.config->nprofiles, r.config->path,
                                   r.sel.windows.items[i], err, sizeof(err)) != 0 ||
            decaying_window(r.config, &r.sel.boards, r.sel.windows.items[i], err, sizeof(err))) {
            lb_config_free(r.config);
            return lb_usage_error("%s", err);
        }
    }
    /* this run's own: a run that lost the lease while frozen and goes on
     * writing for a moment writes keys no other run reads (named by the
     * run's epoch below, once it holds the lease) */
    snprintf(r.staging_prefix, sizeof(r.staging_prefix), "%s%s%llx-%ld:", r.config->key_prefix,
             STAGING_INFIX, (unsigned long long)lb_wall_ms(), (long)getpid());
    enum lb_error_class class;
    struct lb_engine_options eopts = {
        .key_prefix = r.staging_prefix,
        /* --window swaps single windows: latest boards' stamps go with them */
        .window_stamps = r.sel.windows.count > 0,
        .applied = replay_note_written,
        .applied_ctx = &r};
    if (!(r.engine = lb_engine_open(r.config, &eopts, err, sizeof(err), &class))) {
        fprintf(stderr, "%s%s\n", class == LB_ERROR_CONFIG ? "" : "replay: ", err);
        lb_config_free(r.config);
        return class == LB_ERROR_CONFIG ? EXIT_CONFIG : EXIT_BROKEN;
    }
    r.tty = isatty(STDERR_FILENO);
    signal(SIGINT, replay_on_signal);
    signal(SIGTERM, replay_on_signal);
    signal(SIGPIPE, SIG_IGN); /* stdout piped to a pager that quit */

    struct lb_cluster_options copts = r.engine->cluster_options;
    if (lb_cluster_refresh(r.engine->cluster) != 0) {
        fprintf(stderr, "replay: cannot reach Redis: %s\n", lb_cluster_error(r.engine->cluster));
        status = EXIT_BROKEN;
        goto out;
    }
    if (r.o.node && node_slots(&r, r.o.node) != 0) {
        fprintf(stderr,
                "replay: %s owns no slots now (masters are named host:port as in "
                "CLUSTER SHARDS)\n",
                r.o.node);
        status = EXIT_USAGE;
        goto out;
    }
    struct lb_kafka_options kafka = lb_config_kafka(r.config);
    /* The reader carries the live group's id too: it assigns absolute
     * offsets and never subscribes, stores or commits, so the group never
     * hears of it, and librdkafka's coordinator lookup for it needs no more
     * than the Describe on that group that --to committed needs anyway. */
    if (!(r.meta = lb_kafka_reader(&kafka, r.config->group, err, sizeof(err))) ||
        !(r.reader = lb_kafka_reader(&kafka, r.config->group, err, sizeof(err)))) {
        fprintf(stderr, "replay: Kafka: %s\n", err);
        status = EXIT_CONFIG;
        goto out;
    }
    if (replay_make_plan(r.meta, r.config, &r.o, &r.plan) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    /* The lease has its own connections: it is renewed while a batch is in
     * Redis, and a cluster client serves one call at a time. They also put
     * back closed windows (the apply script's restore step: loaded where a
     * node that came back empty answers NOSCRIPT) and read ~final. */
    if (!r.o.dry_run && !(r.lease_cluster = lb_cluster_new(&copts))) {
        fprintf(stderr, "replay: out of memory\n");
        status = EXIT_BROKEN;
        goto out;
    }
    if (!r.o.dry_run) {
        int rc =
            replay_lease_take(&r.lease, r.lease_cluster, r.config->key_prefix, err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "replay: %s\n", err);
            status = EXIT_BROKEN;
            goto out;
        }
        /* the run's own prefix names its epoch: its start deletes the
         * staging keys of earlier runs only (swap.c); nothing was staged
         * under the first one (the engine keeps a pointer to it) */
        snprintf(r.staging_prefix, sizeof(r.staging_prefix), "%s%sr%lld-%ld:", r.config->key_prefix,
                 STAGING_INFIX, r.lease.epoch, (long)getpid());
    }
    int gaps = replay_print_plan(&r.plan, &r.o, r.config->group);
    if (print_leftovers(&r) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    if (gaps && !r.o.allow_gap) {
        fprintf(stderr,
                "replay: refusing to run with a retention gap in %d partition(s); the "
                "rebuilt boards would lack the deleted events. Run with --allow-gap to "
                "rebuild from what is left.\n",
                gaps);
        status = EXIT_GAP;
        goto out;
    }
    if (r.o.dry_run)
        goto out;

    r.sel.config = r.config;
    for (size_t i = 0; i < r.config->nprofiles && !r.sel.tops; i++)
        if (r.config->profiles[i].shards > 1 && !r.o.verify) {
            struct lb_tops_options tops = {r.config->key_prefix, &r.engine->cluster_options};
            if (!(r.sel.tops = lb_tops_new(&tops))) {
                status = EXIT_BROKEN;
                goto out;
            }
        }
    lb_pipeline_set_filter(r.engine->pipeline, replay_filter_event, &r.sel);
    lb_pipeline_set_closed(r.engine->pipeline, replay_closed_window, &r);
    /* what was published: a board whose ~final was lost with its shard
     * gets its closed windows back from there before they are rebuilt */
    if (r.config->results_topic && !r.o.verify &&
        (!(r.published = lb_published_new(&kafka, r.config->group, r.config->results_topic, err,
                                          sizeof(err))) ||
         lb_published_read(r.published, 60000, err, sizeof(err)) != 0)) {
        fprintf(stderr,
                "replay: %s; without it a lost board's closed windows would be rebuilt open "
                "(final standings: README). Try again once the topic can be read.\n",
                err);
        status = EXIT_BROKEN;
        goto out;
    }
    size_t leftovers = 0;
    replay_fault_stop("LB_FAULT_START_STOP");
    if (replay_clear_staging(&r, &leftovers, 1) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    if (replay_journal_start(&r.lease, r.selection) != 0) {
        fprintf(stderr,
                "replay: the replay journal %s is a later run's: the replay lease went to "
                "another run while this one was stalled; stopping\n",
                r.lease.journal);
        status = EXIT_BROKEN;
        goto out;
    }
    r.started = replay_mono_s();
    if (replay_read_until_end(&r) != 0) {
        status = EXIT_BROKEN;
        goto out;
    }
    if (replay_closed_unknown(&r)) {
        status = EXIT_BROKEN;
        goto out;
    }
    if (r.reopen_failed) { /* said which */
        fprintf(stderr, "replay: nothing was swapped in. Run replay --republish again.\n");
        status = EXIT_BROKEN;
        goto out;
    }
    replay_progress(&r, 1);
    const struct lb_pipeline_stats *ps = lb_pipeline_stats(r.engine->pipeline);
    uint64_t rejected = 0;
    for (int i = 0; i < LB_REJECT__COUNT; i++)
        rejected += ps->rejected[i];
    double secs = replay_mono_s() - r.started;
    if (r.o.verify) {
        struct verify_report v = {0};
        if (replay_verify_all(&r, &v) != 0) {
            status = EXIT_BROKEN;
            goto out;
        }
        printf("replay --verify: %zu board(s), %zu key(s) checked, %zu differing; members: %zu "
               "missing, %zu extra, %zu different\n",
               r.sel.seen.count, v.keys_checked, v.keys_differing, v.missing, v.extra, v.different);
        if (v.boards_unverified)
            printf("replay --verify: %zu overall board(s) of decaying boards not compared: the "
                   "projector is rebuilding them; run --verify again once it is done\n",
                   v.boards_unverified);
        status = v.keys_differing ? EXIT_DIFFERENT : EXIT_OK;
    } else {
        /* Catch up with everything Kafka has now, so the rebuilt keys hold
         * every event the live projector may have applied before the loss. */
        size_t swapped = 0;
        if (replay_extend_to_latest(&r) != 0 || replay_read_until_end(&r) != 0 ||
            replay_swap_all(&r, &swapped) != 0)
            status = EXIT_BROKEN;
        /* split boards: their merged tops from the shards as they are now */
        size_t tops = r.sel.tops ? lb_tops_pending(r.sel.tops) : 0;
        if (status == EXIT_OK && tops &&
            lb_tops_drain(r.sel.tops, lb_monotonic_ms() + 60000) != 0) {
            fprintf(stderr,
                    "replay: %zu merged top(s) of split boards not refreshed (Redis refused or "
                    "another refresher held them for a minute); the projector refreshes each "
                    "at the window's next event\n",
                    lb_tops_pending(r.sel.tops));
            status = EXIT_BROKEN;
        } else if (status == EXIT_OK && tops)
            printf("replay: %zu merged top(s) of split boards refreshed\n", tops);
        if (status == EXIT_OK && replay_mark_intact(&r) != 0)
            status = EXIT_BROKEN;
        if (status == EXIT_OK && r.restored)
            printf("replay: %zu closed window(s) put back from results topic %s (their board's "
                   "~final was gone): published as they closed, not reopened\n",
                   r.restored, r.config->results_topic);
        if (status == EXIT_OK && r.republished) {
            replay_announce_reopened(&r);
            printf("replay: %zu closed window(s) reopened and rebuilt from every event "
                   "(--republish): the pods close them and publish their final standings "
                   "again\n",
                   r.republished);
        }
        if (status == EXIT_OK && r.closed_boards.count)
            printf("replay: closed windows (final standings) not reopened: %llu window "
                   "write(s) at or past their close left out; final standings untouched\n",
                   (unsigned long long)ps->closed_left_out);
        if (status == EXIT_OK)
            printf("replay: %llu events read in %.1f s (%.0f/s), %llu in the selection applied, "
                   "%llu rejected; %zu of %zu board(s) rebuilt\n",
                   (unsigned long long)r.read, secs, secs > 0 ? (double)r.read / secs : 0.0,
                   (unsigned long long)(ps->records - ps->filtered - rejected),
                   (unsigned long long)rejected, swapped, r.sel.seen.count);
    }
out:
    if (replay_interrupted && status != EXIT_USAGE && status != EXIT_CONFIG)
        status = EXIT_BROKEN;
    if (status != EXIT_OK)
        replay_report_reopening(&r);
    if (r.lease.held)
        status = finish(&r, status);
    if (r.reader) {
        rd_kafka_consumer_close(r.reader);
        rd_kafka_destroy(r.reader);
    }
    if (r.meta)
        rd_kafka_destroy(r.meta);
    free(r.plan.parts);
    replay_closed_free(&r);
    lb_published_free(r.published);
    lb_cluster_free(r.lease_cluster);
    lb_tops_free(r.sel.tops);
    lb_engine_close(r.engine);
    lb_config_free(r.config);
    replay_strings_free(&r.sel.boards);
    replay_strings_free(&r.sel.windows);
    lb_names_free(&r.sel.seen);
    lb_names_free(&r.sel.done);
    lb_names_free(&r.fenced);
    replay_written_free(&r);
    return status;
}
