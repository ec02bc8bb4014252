/* The apply protocol: everything about how a board's batch reaches Redis.
 *
 * This module owns the key layout (formatted and parsed here only), the
 * apply script (projector/apply.lua, embedded at build time with its SHA1),
 * the requests (one EVALSHA per board, encoded from a plan) and the
 * script's replies (parsed into a status). Every write of board state goes
 * through this request, atomically per board.
 *
 * Keys, under the board's hash tag so one board is one slot:
 *
 *   <prefix>{B}:alltime | :daily:2026-05-04 | :weekly:2026-W18 |
 *     :monthly:2026-05 | :<dim>:<value>        window sorted sets
 *   <window key>:~ts                           latest boards: per member the
 *                                              winning "<ts ms, 15 digits>:
 *                                              <offset, 20 digits>", where
 *                                              ~newest does not name the
 *                                              window (apply.lua latest())
 *   <prefix>{B}:~newest                        latest boards (protocol 5 on):
 *                                              per member its newest stamp
 *                                              and the calendar windows
 *                                              holding it, "<stamp>|<window>|
 *                                              ...|"; field "" is "5"
 *   <prefix>{B}:~applied                       per "<topic>:<partition>" the
 *                                              last offset applied (hash,
 *                                              written by the script)
 *   <prefix>{B}:~offsets                       the same, as a sorted set
 *                                              written with ZADD GT (boards
 *                                              without a script); a board's
 *                                              marker is the larger of both
 *   <prefix>{B}:~fence                         replay's fence while it swaps
 *                                              (a string with a TTL); a hash
 *                                              on a latest board that keeps
 *                                              ~newest, which fences only
 *                                              releases before protocol 5
 *   <prefix>{B}:<decay.key>                    decaying boards: the overall
 *                                              board of after-tax scores
 *   <prefix>{B}:~patches                       the patches seen (sorted set
 *                                              of lb_decay_patch_member:
 *                                              scores 0, or places in the
 *                                              list of decay.patches)
 *   <prefix>{B}:~decay                         the rebuild state (hash: gen,
 *                                              rebuilding, holder, until)
 *   <prefix>{B}:~decay:new                     the overall board being rebuilt
 *   <prefix>{B}:~seen                          dedupe: the board's event ids
 *                                              (sorted set, scored by
 *                                              lb_dedupe_stamp), those
 *                                              within the window behind the
 *                                              newest event time
 *
 * The request, protocol 5 (apply.lua has the exact argument layout): the
 * marker fields with each segment's first and last offset, the event ids of
 * a board that dedupes (with their offsets and stamps, each segment's
 * newest first), a latest board's
 * players per segment with their newest stamp and windows, then per window
 * key its expiry (a latest board's: its name too) and its entries grouped
 * by segment, "plain" ones (a value only) apart from "special" ones (a
 * retraction first; a latest board's value with a stamp of its own). A
 * best board's plain entries are composite, member pairs that the script
 * hands to `ZADD key GT|LT` straight from its arguments, and so are a latest
 * board's, whose stamp is their player's newest. The script:
 *
 *   - refuses a protocol it does not speak: {"protocol", "5", got};
 *   - writes nothing to a fenced board: {"fenced", key};
 *   - writes nothing when a key it must touch but the request does not name
 *     (a latest board's stamps of a window a player's newest leaves) is on
 *     another node while its slot migrates: {"moving", key};
 *   - skips a segment whose marker is at or past its last offset (applied
 *     before); one whose marker is inside its range (a previous attempt
 *     ended mid-way) makes it write nothing: {"partial", field, marker, ...}
 *     and the caller plans the board again without what was applied;
 *   - dedupe: an event whose id the board's set holds makes it write
 *     nothing (a request holds an id once: the planner leaves a retry
 *     within the batch out): {"duplicate", field,
 *     offset, "d" (the same stamp) or "c" (another: a conflict), ...}, and
 *     the caller plans the board again without those events; otherwise
 *     the ids are recorded with the writes and the set trimmed to the
 *     window behind its newest event time (it expires a week past the
 *     window after its newest event time). An event more than the window
 *     behind the set's newest is outside it: it counts, its id neither
 *     looked up nor recorded. The set is trimmed and its expiry set only
 *     when its newest second moves (ids a window made smaller left until
 *     then count as forgotten: lb_apply_seen_forgotten);
 *   - refuses a sum leaving [sum_min, sum_max]: {"overflow", key number,
 *     member, ...}, nothing written;
 *   - a key of the wrong type: {"wrongtype", key}; an expiry Redis would
 *     refuse: {"badarg", key}; both found before the first write (Redis
 *     keeps a script's earlier writes when a later call fails), so nothing
 *     is written;
 *   - a command the caller's ACL user may not run: {"noperm", command},
 *     nothing written (before the first write, Redis 7's acl_check_cmd for
 *     every command called after it; a refused read before it is named
 *     too);
 *   - otherwise writes everything, moves the applied segments' markers to
 *     their last offsets, and answers {"ok", applied, skipped}.
 *
 * Decaying boards (decay.h; README "Decaying boards") add a section: the
 * order (versions, or a list), the rule, then per patch of the request its
 * member in ~patches with its score and, per entry of its window key, the
 * taxed composites at ages 0..max_age (packed in one argument, 16 digits
 * each) and the player. The script registers the patches its applied
 * segments name; a patch not seen before, or another rule, starts a rebuild
 * (gen + 1, rebuilding set, the shadow emptied). The age of a patch is the
 * number of patches seen after it in their order, or with a list the
 * newest one's place minus its own (capped at max_age); each entry goes to
 * the overall board with ZADD GT|LT at its age, and to the shadow too
 * while a rebuild runs, when the answer is {"ok", applied, skipped,
 * "rebuilding"}.
 *
 * A rebuild (rebuild.h) steps through the same script with ARGV[2] "R":
 * "take" (a lease in ~decay naming its holder, until an instant of Redis's
 * clock; {"go", gen, member, score, ...}, {"busy", holder, ms} or
 * {"done"}; a rule other than the caller's starts a rebuild first, as a
 * request would), "chunk" (ZADD GT|LT of taxed composites into the shadow,
 * the lease renewed), "rekey" (~patches written anew as the caller's
 * configuration orders them: a new gen) and "finish" (RENAME of the shadow
 * over the overall board, the flag cleared, the gen and holder noted as
 * finished), each answering {"stale"} when its gen or lease is no longer
 * current (a finish sent again by the holder that finished: {"ok"}).
 *
 * Best boards whose profile rejects retractions, does not dedupe and does
 * not decay need no script: ZADD GT|LT
 * is idempotent, so applying a batch twice, or a zombie's stale batch
 * after a newer one, changes nothing. Their request is a transaction:
 * MULTI, TYPE of the fence (a string: replay's; a hash is a latest board's
 * mark, not a fence), per window key ZADD GT|LT and its expiry, ZADD GT of
 * the markers into the sorted set (markers never move backwards), EXEC.
 * Nothing is checked before the writes: a key of the wrong type fails its
 * command only (the others, markers included, are written; the batch is
 * sent again once an operator fixed the key, which rewrites the same), and
 * a fenced board is written too (the answer says fenced, so the projector
 * holds the board back and replay's next round reads what was written).
 *
 * Protocols 1 and 2 kept markers in the hash only, which this script
 * still reads and writes; pods of both releases can write the same boards
 * during a rolling deploy. Latest boards started by protocol 4 or before
 * keep per-window stamps (their markers exist, ~newest does not), which
 * both releases read and write; those protocol 5 started refuse the
 * releases before it through their fence key (README "Upgrades").
 */
#ifndef LB_APPLY_H
#define LB_APPLY_H

#include "arena.h"
#include "event.h"
#include "planner.h"

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#define LB_APPLY_VERSION      5 /* the protocol this release speaks */
#define LB_APPLY_TEXT_(v)     #v
#define LB_APPLY_TEXT(v)      LB_APPLY_TEXT_(v)
#define LB_APPLY_VERSION_TEXT LB_APPLY_TEXT(LB_APPLY_VERSION) /* "5", as requests carry it */

/* The script's text and its SHA1 (40 hex digits), both from the build. */
const char *lb_apply_script(void);
const char *lb_apply_script_sha(void);

/* ---- key layout ------------------------------------------------------------------- */

/* Each writes the key NUL-terminated into 'out' and returns its length, or
 * 0 if it does not fit in 'cap'. */
size_t lb_window_key(const char *prefix, struct lb_str board, const struct lb_window_config *window,
                     int64_t window_id, struct lb_str custom_value, char *out, size_t cap);
size_t lb_marker_key(const char *prefix, struct lb_str board, char *out, size_t cap);
size_t lb_marker_zset_key(const char *prefix, struct lb_str board, char *out, size_t cap);
size_t lb_fence_key(const char *prefix, struct lb_str board, char *out, size_t cap);
size_t lb_dedupe_key(const char *prefix, struct lb_str board, char *out, size_t cap);
/* "<prefix>{<board>}:<rest>": any key under the board's tag (a window
 * named by its label, a SCAN pattern). */
size_t lb_board_key(const char *prefix, struct lb_str board, const char *rest, char *out,
                    size_t cap);
/* Decaying boards' keys. */
#define LB_PATCHES_KEY     "~patches"
#define LB_DECAY_STATE_KEY "~decay"
#define LB_DECAY_SHADOW    "~decay:new"
/* Final standings' keys (README "Final standings"): the windows that will
 * close (hash: window -> when, ms of event time), the closed ones' state
 * (hash, apply.lua "C"), and "<prefix>{B}:final:<window>" each one's frozen
 * standings (sorted set, no expiry). */
#define LB_OPEN_KEY     "~open"
#define LB_FINAL_KEY    "~final"
#define LB_FINAL_PREFIX "final"
/* "<prefix>~reopened" (beside the keyspace, no hash tag): a hash whose
 * "at" replay changes once it reopened windows (--republish) or marked
 * slots rebuilt (LB_INTACT_KEY); the closers read it at each check and
 * look at once. */
#define LB_REOPENED_KEY "~reopened"
/* "<prefix>~intact{<tag>}", one per slot (lb_slot_tag; a hash: "by" and
 * "at"): the slot's shard holds what the projector wrote, not a node
 * replaced empty or flushed since. Written once for every slot when the
 * cluster holds none (a new deployment), and by replay for the slots it
 * rebuilt; a claim of a window whose board's slot has none waits
 * (apply.lua "C", published.h lb_intact_*). */
#define LB_INTACT_KEY "~intact"
size_t lb_intact_key(const char *prefix, uint16_t slot, char *out, size_t cap);
/* "<prefix>{<board>}:final:<window>" */
size_t lb_final_key(const char *prefix, struct lb_str board, const char *window, char *out,
                    size_t cap);
/* A decaying board's rule as the script keeps it in ~decay ("rule"):
 * stacking, tax, max_age, scale, order and key; a request or a sweep that
 * finds another one starts a rebuild. Returns its length. */
#define LB_DECAY_RULE_MAX (LB_NAME_MAX + 96)
size_t lb_decay_rule(const struct lb_decay_config *decay, char *out, size_t cap);
/* A patch's member in ~patches and its score there: with decay.patches
 * its name and its place in the list, else its lb_version_key, a NUL and
 * its name (so the set's order is the patches') and 0. Returns
 * the member's length, 0 when it does not fit or the list does not name
 * it (the planner refuses such events). */
size_t lb_decay_patch_member(const struct lb_decay_config *decay, const char *name, size_t len,
                             char *out, size_t cap, int64_t *score);
/* The ages of a board's patches, given their scores in ~patches in its
 * order: with decay.patches the newest one's place minus each one's, else
 * the number of patches after each (capped at max_age by the tax). */
void lb_decay_ages(const struct lb_decay_config *decay, const int64_t *scores, size_t n, int *ages);
/* The name in a member of ~patches: after its NUL, or all of it (a listed
 * patch). */
const char *lb_patch_name(const char *member, size_t len, size_t *name_len);

/* A window's name in its keys: "alltime", "daily:2026-05-04", "<dim>:<value>". */
#define LB_WINDOW_NAME_MAX 512
size_t lb_window_name(const struct lb_window_config *window, int64_t window_id,
                      struct lb_str custom_value, char *out, size_t cap);

/* Split boards (profile split: shards N > 1; README "Split boards"): board
 * B's keys live under N tags, lb_shard_tag's "B#<i>.<k>" (a pure function
 * of B, N and i), a player in shard lb_player_shard; each shard is a board
 * of its own for the write protocol (markers, dedupe, fence, expiry), and
 * lb_shard_parse tells a shard's tag from a board's. Under B's own tag:
 *
 *   <prefix>{B}:~top:<window>   the merged top of the window's shards
 *                               (sorted set; tops.h)
 *   <prefix>{B}:~tops           its state (hash: per window its generation,
 *                               and the refresher's lease) */
#define LB_TAG_MAX    (LB_ID_MAX_BYTES + 24) /* a board's tag, a shard's suffix, NUL */
#define LB_TOP_PREFIX "~top"
#define LB_TOPS_KEY   "~tops"
size_t lb_top_key(const char *prefix, struct lb_str board, struct lb_str window, char *out,
                  size_t cap);

/* This process's name in the leases the script keeps (a rebuild's, a
 * merged top's): "<host>:<pid>:<nanoseconds>", unique per client made. */
void lb_lease_holder(char *out, size_t cap);

/* The marker's field for a topic-partition: "<topic>:<partition>", in
 * LB_MARKER_FIELD_MAX bytes at most: a Kafka topic name is 249 bytes at
 * most. */
#define LB_MARKER_FIELD_MAX (249 + 1 + 11 + 1)
size_t lb_marker_field(const char *topic, int32_t partition, char *out, size_t cap);

#define LB_STAMPS_SUFFIX ":~ts"
/* "<prefix>{B}:~newest": a latest board's players' newest stamps and the
 * calendar windows holding them (apply.lua latest()). */
#define LB_NEWEST_KEY "~newest"

enum lb_key_kind {
    LB_KEY_WINDOW = 1, /* a window's sorted set */
    LB_KEY_STAMPS,     /* a latest window's event-time hash */
    LB_KEY_MARKER,
    LB_KEY_FENCE,
    LB_KEY_SEEN,   /* the board's dedupe set */
    LB_KEY_NEWEST, /* a latest board's ~newest */
    LB_KEY_TOP,    /* a split board's merged top of a window (window: its name) */
    LB_KEY_FINAL,  /* final standings: ~final, or a closed window's frozen copy */
    LB_KEY_OPEN,   /* final standings: the windows still to close (~open) */
    LB_KEY_OTHER,  /* under the board's tag, but none of ours */
};

struct lb_key_parts {
    enum lb_key_kind kind;
    struct lb_str board;  /* into the key */
    struct lb_str window; /* window and stamps keys: "daily:2026-05-04", "alltime", ... */
};

/* Splits a key under 'prefix' into its parts. Returns 0, or -1 when the key
 * is not "<prefix>{<board>}:..." at all. */
int lb_key_parse(const char *prefix, const char *key, size_t len, struct lb_key_parts *parts);
/* Whether 'key' is a window's sorted set under 'prefix' (not bookkeeping). */
int lb_key_is_window(const char *prefix, const char *key, size_t len);

/* The dedupe window a request carries, in whole seconds (0: off). */
int64_t lb_apply_dedupe_seconds(const struct lb_profile *profile);
/* Whether an id a board's ~seen holds with 'stamp' counts as forgotten
 * while the set's newest is 'newest' (both lb_dedupe_stamp values): more
 * than the profile's window behind the newest second. The script drops
 * such ids when the newest second moves; until then (a window made smaller
 * since the last trim) it takes them as absent. */
int lb_apply_seen_forgotten(const struct lb_profile *profile, int64_t newest, int64_t stamp);

/* ---- requests --------------------------------------------------------------------- */

/* One board's request: bytes [offset, offset + len) of the batch's buffer;
 * len 0 when there is nothing to send (every event rejected or late). As
 * struct lb_request has them: one EVALSHA, or (is_txn) a transaction of
 * 'ncommands' commands between MULTI and EXEC. */
struct lb_apply_request {
    uint16_t slot;
    uint8_t is_txn;
    uint32_t ncommands;
    size_t offset, len;
    struct lb_str board;
};

struct lb_apply_batch {
    struct lb_buf bytes;
    struct lb_apply_request *requests; /* one per board of the plan, in its order */
    size_t count, cap;
};

/* How requests are made. */
struct lb_apply_options {
    const char *prefix; /* the keyspace written (borrowed) */
    /* latest boards: keep per-window stamps only and never start ~newest
     * (replay --window, which swaps single windows: their hashes must carry
     * their own stamps); a board that keeps ~newest still keeps it */
    int window_stamps;
};

/* Encodes one request per board of 'plan' into 'batch', replacing what it
 * held. Returns 0, or -1 when out of memory. */
int lb_apply_encode(struct lb_apply_batch *batch, const struct lb_plan *plan,
                    const struct lb_apply_options *options);
void lb_apply_batch_free(struct lb_apply_batch *batch);

/* ---- replies ---------------------------------------------------------------------- */

enum lb_apply_status {
    LB_APPLY_OK = 0,
    LB_APPLY_PARTIAL,   /* pairs: marker field, marker; plan again without those events */
    LB_APPLY_DUPLICATE, /* see lb_apply_duplicate; plan again without those events */
    LB_APPLY_OVERFLOW,  /* pairs: key number, member; reject those members' events */
    LB_APPLY_WRONGTYPE, /* 'key' holds another type: an operator must fix it */
    LB_APPLY_BADARG,    /* 'key''s expiry was refused: nothing written */
    LB_APPLY_FENCED,    /* replay is swapping the board in: try again later */
    LB_APPLY_NOPERM,    /* the ACL user may not run 'key' (a command): nothing written */
    LB_APPLY_PROTOCOL,  /* the script speaks another protocol version */
    LB_APPLY_MOVING,  /* 'key', not named by the request, is not on the node now (its slot is being
                         migrated): nothing written, try again later */
    LB_APPLY_UNKNOWN, /* not a reply of the apply script */
};

struct lb_apply_answer {
    enum lb_apply_status status;
    long long applied, skipped; /* LB_APPLY_OK: segments */
    int rebuilding;             /* LB_APPLY_OK: a decaying board's rebuild is due */
    int opened;                 /* LB_APPLY_OK: ~open lists a window more (final standings) */
    size_t late;                /* LB_APPLY_OK: closed windows the request's events are for... */
    size_t late_at;  /* ...the w-th named by the reply's element late_at + 2w, and its close
                        offsets ("<marker field>=<first late offset>,...") by the next */
    const char *key; /* wrongtype, badarg, fenced; the command for noperm; the script's version for
                        protocol */
    const redisReply *reply; /* the pairs, from element 1 on */
    size_t npairs;           /* pairs, or a duplicate answer's triples */
};

/* Reads the script's reply, or a transaction's EXEC array (OK, or FENCED
 * with the writes done: see above); the answer points into 'reply'. */
enum lb_apply_status lb_apply_parse(const redisReply *reply, struct lb_apply_answer *answer);

/* Duplicate 'i' of a duplicate answer: the event at 'offset' of marker
 * field 'field' has an id the board counted already ('conflict': with
 * another payload). Returns 0, or -1 past the end. */
int lb_apply_duplicate(const struct lb_apply_answer *answer, size_t i, const char **field,
                       int64_t *offset, int *conflict);

/* Late window 'w' of an ok answer: its name, and in '*first_late' the first
 * offset of 'topic' 'partition' whose events came too late for it (the
 * partition's close offset; 0 when it had written nothing to the board by
 * then: every event of it is late; -1 when the window's close offsets are
 * not known). NULL past the end. */
const char *lb_apply_late(const struct lb_apply_answer *answer, size_t w, const char *topic,
                          int32_t partition, int64_t *first_late);

/* The name of late window 'w' alone; NULL past the end. */
const char *lb_apply_late_name(const struct lb_apply_answer *answer, size_t w);

/* Pair 'i' of a partial or overflow answer; returns 0, or -1 past the end. */
int lb_apply_pair(const struct lb_apply_answer *answer, size_t i, const char **first,
                  const char **second);

#endif
