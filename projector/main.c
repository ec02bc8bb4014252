/* projector: the leaderboard projector daemon.
 *
 * stdout is for data (--check-config prints the effective configuration);
 * everything else goes to stderr as logfmt or JSON lines. SIGTERM/SIGINT
 * drain and stop; SIGHUP re-reads log.level from the configuration file. */
#include "config.h"
#include "daemon.h"
#include "engine.h"
#include "log.h"
#include "usage.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        lb_log_reload = 1;
    else
        stop_requested = 1;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: projector --config FILE [--log-level LEVEL]\n"
                 "   or: projector --check-config FILE\n"
                 "\n"
                 "Consumes Avro score events from Kafka and projects them into Redis Cluster\n"
                 "sorted sets, committing offsets only for what is durably written.\n"
                 "\n"
                 "  -c, --config FILE        run with this configuration\n"
                 "      --check-config FILE  check FILE as a start would (without connecting),\n"
                 "                           print the effective configuration (loadable as\n"
                 "                           is; inline secrets as <redacted>) and exit\n"
                 "  -l, --log-level LEVEL    error, warn, info or debug (overrides log.level)\n"
                 "  -h, --help               show this help\n"
                 "\n"
                 "Exit status: 0 stopped cleanly, 1 fatal runtime error, 2 usage error,\n"
                 "3 invalid configuration, 6 stopped before everything read was written\n"
                 "(the drain timeout ended, or a partition was held; it is read again\n"
                 "after a restart).\n"
                 "\n"
                 "Example:\n"
                 "  projector --config config/local.yaml\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {{"config", required_argument, NULL, 'c'},
                                            {"check-config", required_argument, NULL, 'k'},
                                            {"log-level", required_argument, NULL, 'l'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    const char *path = NULL, *check_path = NULL, *level = NULL;
    int opt;

    opterr = 0; /* the messages below name the argument */
    while ((opt = getopt_long(argc, argv, ":c:l:h", options, NULL)) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case 'k':
            check_path = optarg;
            break;
        case 'l':
            level = optarg;
            break;
        case 'h':
            usage(stdout);
            return LB_EXIT_OK;
        default:
            return lb_bad_option(opt, argv);
        }
    }
    if (optind < argc)
        return lb_usage_error("unexpected argument '%s'", argv[optind]);
    if (path && check_path)
        return lb_usage_error("give --config FILE to run or --check-config FILE to check, not "
                              "both");
    int check = check_path != NULL;
    if (check)
        path = check_path;
    if (!path)
        return lb_usage_error("--config FILE is required");
    if (level && lb_log_level_parse(level) < 0)
        return lb_usage_error("unknown log level '%s' (error, warn, info, debug)", level);

    struct lb_config *config;
    char err[1024];
    if (lb_config_load(path, &config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return LB_EXIT_CONFIG;
    }
    lb_log_threshold = level ? lb_log_level_parse(level) : config->log_level;
    lb_log_json = config->log_json;
    /* and what the engine reads at start (schemas, the registry's files),
     * before anything connects (opening it connects nowhere): a start
     * refuses what --check-config refuses, and the other way round */
    enum lb_error_class class = LB_ERROR_NONE;
    struct lb_engine *engine = lb_engine_open(config, NULL, err, sizeof(err), &class);
    if (!engine) {
        fprintf(stderr, "%s%s\n", class == LB_ERROR_CONFIG ? "" : "projector: ", err);
        lb_config_free(config);
        return class == LB_ERROR_CONFIG ? LB_EXIT_CONFIG : LB_EXIT_RUNTIME;
    }
    if (check) {
        lb_engine_close(engine);
        lb_config_print(config, stdout);
        lb_config_free(config);
        return LB_EXIT_OK;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = lb_daemon_run(config, engine, &stop_requested); /* closes the engine */
    lb_config_free(config);
    return status;
}
