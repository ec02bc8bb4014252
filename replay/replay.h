/* What the parts of replay share: its state, options and plan, the
 * selection, and the helpers every part uses. The parts (main.c: the
 * command line and exit codes; plan.c: which offsets to read; read.c:
 * reading Kafka into staging keys; swap.c: swapping staging keys in,
 * verifying them, fences; common.c: the helpers) depend on this header,
 * not on each other. */
#ifndef LB_REPLAY_H
#define LB_REPLAY_H

#include "clock.h"
#include "cluster.h"
#include "config.h"
#include "kafka.h"
#include "event.h"
#include "flow.h"
#include "lease.h"
#include "log.h"
#include "apply.h"
#include "engine.h"
#include "tops.h"
#include "resp.h"
#include "slot.h"
#include "names.h"
#include "published.h"

#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    EXIT_OK = 0,
    EXIT_BROKEN = 1,
    EXIT_USAGE = 2,
    EXIT_CONFIG = 3,
    EXIT_GAP = 4,
    EXIT_DIFFERENT = 5,
};

#define STAGING_INFIX    "~replay:" /* staging keys: <prefix>~replay:r<epoch>-<pid>:{B}:... */
#define SWAP_ATTEMPTS    30
#define KAFKA_TIMEOUT_MS 10000
#define FENCE_TTL_MS     60000
#define DELETE_CHUNK     5000 /* staging keys deleted per pipeline */

/* A growable list of owned strings. */
struct strings {
    char **items;
    size_t count, cap;
};

/* What to rebuild: slots (--slots, --node), boards, windows. */
struct selection {
    uint8_t slots[LB_SLOTS];        /* 1: the slot is selected */
    int any_slots;                  /* --slots or --node given */
    struct strings boards;          /* --board patterns */
    struct strings windows;         /* --window suffixes */
    struct lb_names seen;           /* selected boards that had events (a split board's: its
                                     shards' tags) */
    struct lb_names done;           /* boards already swapped: no more staging writes */
    const struct lb_config *config; /* the profiles: split boards' shards */
    /* split boards: the windows of theirs replay read, whose merged tops
     * it refreshes once it swapped (NULL: no profile splits) */
    struct lb_tops *tops;
};

/* One partition of the plan and how far reading it got. */
struct part {
    const char *topic;
    int32_t partition;
    int64_t low, high;               /* watermarks */
    int64_t from, end;               /* read [from, end) */
    int64_t committed;               /* the live group's, or -1 */
    int64_t read_to;                 /* next offset to read */
    int gap;                         /* events in the range were deleted by retention */
    uint64_t consumed;               /* messages read */
    char field[LB_MARKER_FIELD_MAX]; /* its applied-marker field */
};

/* Every partition of the configured topics, in the order read. */
struct plan {
    struct part *parts;
    size_t count;
};

/* The command line. */
struct options {
    const char *config_path;
    const char *from, *to, *node;
    int dry_run, allow_gap, verify, verbose, republish;
    double max_rate;
};

/* One run of replay. */
struct replay {
    struct options o;
    struct replay_lease lease;
    struct lb_names fenced; /* boards whose fence replay set */
    char selection[400];    /* the selection as given, for the journal */
    struct lb_config *config;
    char staging_prefix[128];
    struct lb_engine *engine;         /* writes under staging_prefix */
    struct lb_cluster *lease_cluster; /* the lease's and journal's own connections */
    rd_kafka_t *meta, *reader;
    struct plan plan;
    struct selection sel;
    uint64_t read, applied_batches;
    int read_stop_checked; /* LB_FAULT_READ_STOP looked at (read.c) */
    double started, last_progress;
    int tty;
    struct lb_names closed_boards;  /* boards met whose ~final was read (common.c) */
    struct closed_board *closed;    /* each one's closed windows, at its place */
    struct lb_published *published; /* the results topic (NULL: no results, or --verify) */
    size_t restored;                /* closed windows put back from it */
    int restore_failed;             /* one could not be: the run fails */
    size_t reopened, republished;   /* --republish: windows reopened, marked reopened */
    int reopen_failed;              /* one could not be reopened: the run fails */
    /* What replay wrote into staging (read.c replay_note_written): per
     * board (its tag) at its place in 'written', the last offset of each
     * part (plan order) that its applied requests covered, -1 none. The
     * swap refuses a staging copy whose markers hold less (its node
     * restarted empty meanwhile): swap.lua's 'lost'. */
    struct lb_names written;
    int64_t **wrote;
    size_t cap_wrote;
    int wrote_failed; /* out of memory noting it: no board is swapped */
};

/* What --verify found, for its report and exit code. */
struct verify_report {
    size_t keys_checked, keys_differing, missing, extra, different, boards_unverified;
    size_t shown;
};

/* Set by SIGINT/SIGTERM: replay stops at the next step. */
extern volatile sig_atomic_t replay_interrupted;

/* common.c */
void replay_on_signal(int sig);
double replay_mono_s(void);
int replay_keep_lease(struct replay *r); /* before a batch, a fence, a swap: -1 stop */
void replay_strings_add(struct strings *s, const char *text, size_t len);
void replay_strings_free(struct strings *s);
void replay_names_add(struct lb_names *set, const char *id,
                      size_t len); /* exits when out of memory */
int replay_board_selected(const struct selection *sel, const char *board, size_t len);
int replay_filter_event(void *ctx, const struct lb_event *ev);
/* lb_plan_closed_fn: a window whose final standings were published leaves
 * out the events at or past its close offsets, as the projector did. */
int replay_closed_window(void *ctx, struct lb_str board, const struct lb_window_config *window,
                         int64_t window_id, const struct lb_position *pos);
void replay_closed_free(struct replay *r);
/* Whether a board's closed windows are not known (its ~final could not be
 * read, or a window not put back): said, and nothing may be swapped. */
int replay_closed_unknown(const struct replay *r);
/* --republish: once 'board' was swapped in, its windows this run reopened
 * are marked reopened, for the pods to close and publish again; 0, or -1
 * (said on stderr). */
int replay_mark_reopened(struct replay *r, const char *board);
/* Tells the pods that windows were reopened (--republish) or slots marked
 * (they look at once instead of at their next sweep). */
void replay_announce_reopened(struct replay *r);
/* After a rebuild of whole slots (--slots or --node, no --board or
 * --window): writes their ~intact marks (apply.h), so that their boards'
 * windows close again; none where the cluster has none at all (the first
 * pod to start marks every slot) unless it rebuilt every slot. 0; -1 said
 * on stderr. */
int replay_mark_intact(struct replay *r);
/* --republish, a run that failed: names the windows it left reopening. */
void replay_report_reopening(const struct replay *r);
int replay_parse_slots(const char *text, struct selection *sel);
/* Whether a --node is HOST:PORT: 0, or -1. */
int replay_check_node(const char *node);
/* A pause of the milliseconds environment variable 'name' says, for the
 * tests: after each swap (LB_FAULT_SWAP_PAUSE_MS: replay killed between two
 * boards), before the first swap round (LB_FAULT_SWAP_START_PAUSE_MS: a
 * node restarted empty then), after fencing the boards the projector got
 * ahead of (LB_FAULT_FENCED_PAUSE_MS: fences that cannot be lifted), after
 * a compare of --verify (LB_FAULT_VERIFY_PAUSE_MS: the projector moving
 * then), before reading the ~intact marks and again before writing those of
 * the rebuilt slots (LB_FAULT_INTACT_PAUSE_MS), before --republish's
 * reopened steps (LB_FAULT_REOPENED_PAUSE_MS) and before telling the pods
 * what changed (LB_FAULT_ANNOUNCE_PAUSE_MS): Redis failing for a moment
 * then. */
void replay_fault_pause(const char *name);
int replay_retry_pause(struct replay *r, const char *what, const char *why, int attempt,
                       int64_t since_ms);
redisReply *replay_redis_call(struct replay *r, const char *what, uint16_t slot, int argc,
                              const char **argv, const size_t *argvlen, int *tries);
int replay_exec_retrying(struct replay *r, const char *what, struct lb_request *reqs, size_t n);

/* plan.c */
int64_t replay_resolve(rd_kafka_t *rk, const struct part *p, const char *spec, int is_from,
                       char *err, size_t errlen);
int replay_make_plan(rd_kafka_t *meta, const struct lb_config *config, const struct options *o,
                     struct plan *plan);
int replay_print_plan(const struct plan *plan, const struct options *o, const char *group);

/* read.c */
void replay_progress(struct replay *r, int final);
/* The engine's applied hook (lb_engine_options): notes in r->wrote. */
void replay_note_written(void *ctx, const struct lb_plan_view *plan, uint32_t board,
                         const struct lb_apply_answer *answer, int replanned);
/* The last offset of plan part 'part' written into board 'board''s
 * staging copy, -1 none. */
int64_t replay_written(const struct replay *r, const char *board, size_t part);
void replay_written_free(struct replay *r);
int replay_read_until_end(struct replay *r);
int replay_extend_to_latest(struct replay *r);

/* swap.c */
int replay_scan_keys(struct replay *r, struct strings *live, struct strings *staged,
                     int all_staged);
struct strings replay_boards_of(const struct lb_names *set);
int replay_fence_boards(struct replay *r, const struct strings *boards, int lift);
int replay_swap_all(struct replay *r, size_t *swapped);
int replay_verify_all(struct replay *r, struct verify_report *v);
int replay_clear_staging(struct replay *r, size_t *deleted, int all);

#endif
