/* A Redis Cluster client for batches of single-slot requests (the
 * projector's are one EVALSHA per board; MULTI/EXEC transactions work too).
 *
 * hiredis 0.14 parses RESP for us (redisReader) but knows nothing of
 * clusters, so the rest is here: the slot map (read with CLUSTER SHARDS or
 * CLUSTER SLOTS, parsed by topology.c, or every slot on one node for a
 * standalone Redis), one non-blocking TCP
 * connection per node, and an executor that writes every request of a batch
 * to its slot's master, all nodes at once, then reads and checks every reply:
 * MULTI's +OK, each +QUEUED, and every element of EXEC's array. A request
 * redirected with MOVED is resent, whole, to the new owner in the next round.
 *
 * Requests are not retried forever here: what is still failing after a few
 * rounds is reported to the caller, which owns the retry policy (back off,
 * keep the consumer alive, never commit). The client is single-threaded:
 * one thread owns an lb_cluster and everything it returns.
 */
#ifndef LB_CLUSTER_H
#define LB_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct lb_tls;

struct lb_host {
    char *host;
    int port;
};

struct lb_cluster_options {
    const struct lb_host *seeds; /* copied */
    size_t nseeds;
    const char *user;     /* copied; NULL: AUTH with password only */
    const char *password; /* copied; NULL: no AUTH */
    /* TLS on every connection (seeds, redirections, replicas); NULL: plain
     * TCP. The client keeps a reference (lb_tls_ref). */
    struct lb_tls *tls;
    int64_t connect_timeout_ms;
    int64_t command_timeout_ms;
    /* Durability: after each round of writes, WAIT on every node written
     * until this many replicas acknowledged; -1 (the default in the
     * configuration) means one when the master has a healthy replica, else
     * none. A shortfall fails that node's requests of the round. */
    int wait_replicas;
    int64_t wait_timeout_ms;
    /* A master the slot map keeps naming, map read again or not, that
     * answers READONLY for this long is not failing over: an operator must
     * look (a replica listed as master, a read-only master). 0: 10 s. */
    int64_t readonly_patience_ms;
    /* A Lua script (copied; NULL: none), run with EVALSHA. A node that
     * answers NOSCRIPT (it never saw the script: new, replaced empty,
     * promoted, or its cache flushed) gets SCRIPT LOAD on the same
     * connection, then every request it answered so is resent there, in
     * the original order: no reconnect, no failure counted. */
    const char *script;
    const char *script_sha; /* what SCRIPT LOAD must answer (40 hex digits) */
};

/* What a failed request needs, decided once, here: from an error reply's
 * code (the word before its first space, which Redis 7.0 keeps for errors
 * raised inside scripts) or from the I/O failure. */
enum lb_redis_error {
    LB_REDIS_OK = 0,
    /* Transient: a connection lost or refused, a timeout, a protocol error,
     * TRYAGAIN, CLUSTERDOWN, LOADING, BUSY, MASTERDOWN, READONLY, a WAIT
     * shortfall, no master for the slot. Send it again later. */
    LB_REDIS_RETRY,
    /* An operator must act: WRONGTYPE, NOPERM, OOM, a script Redis refused,
     * any other error reply. Retrying alone will not help. */
    LB_REDIS_FIX,
    /* This process ran out of memory. */
    LB_REDIS_NOMEM,
};

/* What an error reply asks of the client, decided by its code alone. */
enum lb_redis_action {
    LB_REDIS_OPERATOR = 0, /* an operator must act: fail, class LB_REDIS_FIX */
    LB_REDIS_MOVED,        /* the slot moved: update the map, resend there */
    LB_REDIS_ASK,          /* the slot is migrating: resend there after ASKING */
    LB_REDIS_LOAD_SCRIPT,  /* NOSCRIPT: load the script, resend on the same connection */
    LB_REDIS_FOLLOWS,      /* EXECABORT: the consequence of an error already met */
    LB_REDIS_LATER,        /* transient: fail, class LB_REDIS_RETRY */
    LB_REDIS_LATER_REMAP,  /* transient, and the map is stale: refresh it first */
    LB_REDIS_READONLY,     /* a replica: refresh; an operator's once it lasts (see options) */
};

/* The action for an error reply's text ("WRONGTYPE Operation ..."): one
 * table of codes, matched on the word before the first space. Codes not in
 * it (ERR, WRONGTYPE, NOPERM, OOM, ...) ask for an operator. */
enum lb_redis_action lb_redis_action(const char *message);
/* The class of the failure an error reply causes when it is not followed:
 * LB_REDIS_RETRY for the transient codes and a redirection that could not
 * be followed, LB_REDIS_FIX for the rest (NOSCRIPT where no script can be
 * loaded, EXECABORT without the error it follows). */
enum lb_redis_error lb_redis_classify(const char *message);
const char *lb_redis_error_name(enum lb_redis_error class);

/* hiredis' reader as the client reads a node with it: an array header of
 * more than a million elements is refused before anything is allocated (a
 * hostile or broken node cannot make it allocate gigabytes). NULL when out
 * of memory; free it with redisReaderFree. */
redisReader *lb_reply_reader_new(void);

/* One request: a run of RESP commands for one slot. A transaction
 * (is_txn) is MULTI, 'ncommands' commands, EXEC; otherwise 'ncommands' plain
 * commands, the last one's reply handed back. A request that 'writes' is
 * covered by the round's WAIT. */
struct lb_request {
    uint16_t slot;
    uint8_t is_txn;
    uint8_t writes;
    uint8_t no_refresh; /* a probe: never block on a slot map refresh for it */
    uint8_t defer;      /* not sent by lb_cluster_start: the caller clears it and calls
                           lb_cluster_dispatch (pipelining); still set at finish: fails */
    uint32_t ncommands;
    const char *bytes; /* not owned; must stay valid during lb_cluster_exec */
    size_t len;
    /* out: */
    int ok;
    uint8_t error_class; /* enum lb_redis_error, when !ok */
    redisReply *reply;   /* the last command's reply (a transaction's: EXEC's array),
                            owned by the caller */
    char error[160];     /* why it failed, when !ok */
};

/* Counters only, all uint64_t: lb_pipeline_redis_stats sums two clients'
 * field by field as an array. */
struct lb_cluster_stats {
    uint64_t requests;       /* requests sent, resends included */
    uint64_t moved;          /* MOVED redirections followed */
    uint64_t ask;            /* ASK redirections followed */
    uint64_t retry_later;    /* TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN */
    uint64_t command_errors; /* errors inside a transaction or from a command */
    uint64_t connection_errors;
    uint64_t timeouts;
    uint64_t refreshes;       /* slot map reloads */
    uint64_t wait_shortfalls; /* WAITs that fewer replicas than needed acknowledged */
    uint64_t unwaited;        /* writes to a master without WAIT: auto, and no healthy replica */
    uint64_t script_loads;    /* SCRIPT LOADs after a NOSCRIPT */
};

struct lb_cluster;

/* Creates a client; does not connect. Returns NULL when out of memory. */
struct lb_cluster *lb_cluster_new(const struct lb_cluster_options *options);
/* Closes every connection. Accepts NULL. */
void lb_cluster_free(struct lb_cluster *cluster);

/* Reloads the slot map from any reachable node (seeds and every node seen
 * so far). Returns 0, or -1 with the reason in lb_cluster_error(). */
int lb_cluster_refresh(struct lb_cluster *cluster);

/* Sends every request to its slot's master and checks every reply, following
 * MOVED and ASK. Returns the number of requests that did not succeed; each
 * request's 'ok' and 'error' say which and why. One call at a time: during
 * lb_cluster_start .. lb_cluster_finish every request fails at once (use a
 * second client for work that must not wait for the call in progress). */
size_t lb_cluster_exec(struct lb_cluster *cluster, struct lb_request *requests, size_t count);

/* lb_cluster_exec in two halves, so the caller can work while Redis does:
 * lb_cluster_start queues every request on its node and writes what the
 * sockets take without blocking; lb_cluster_finish waits for and checks the
 * replies, follows redirections, and returns the number that failed. Between
 * the two, the caller must not touch 'requests' or call into the cluster. */
void lb_cluster_start(struct lb_cluster *cluster, struct lb_request *requests, size_t count);
size_t lb_cluster_finish(struct lb_cluster *cluster);

/* Between start and finish: does the I/O that is ready within 'timeout_ms'
 * (0: only what is ready now) and returns 1 once every reply of the first
 * round is in (finish then returns without waiting, unless a redirection
 * sends something again), 0 otherwise. Connections open without blocking
 * (AUTH and SCRIPT LOAD travel in the same pipeline as the requests), so a
 * caller that polls this never waits on a node that stopped answering. */
int lb_cluster_progress(struct lb_cluster *cluster, int timeout_ms);

/* Between start and finish: sends the requests whose 'defer' the caller has
 * cleared since, and writes what the sockets take without blocking. */
void lb_cluster_dispatch(struct lb_cluster *cluster);
/* For a caller that pipelines a second call, on a second client, behind the
 * call in progress here (see lb_pipeline_overlap): masters with replies of
 * this call still outstanding (0 once all are in); whether the call met no
 * failure, redirection, slot map change or reason to reload it so far; the
 * master that serves 'slot' if it has answered everything this call sent
 * it, its WAIT included (NULL otherwise). */
size_t lb_cluster_busy_nodes(const struct lb_cluster *cluster);
int lb_cluster_call_clean(const struct lb_cluster *cluster);
const char *lb_cluster_settled_owner(const struct lb_cluster *cluster, uint16_t slot);
/* The master that serves 'slot' by the slot map, or NULL when it is
 * unknown or the map is due for a reload. */
const char *lb_cluster_route(const struct lb_cluster *cluster, uint16_t slot);
/* Runs one command (argv/argvlen as in hiredis) on the master of 'slot';
 * returns its reply (caller frees with freeReplyObject) or NULL with the
 * reason in lb_cluster_error(). For tools, not for the hot path. */
redisReply *lb_cluster_command(struct lb_cluster *cluster, uint16_t slot, int argc,
                               const char **argv, const size_t *argvlen);

/* Runs one command on every master; calls 'each' with each reply (owned by
 * the client, valid during the call). Returns 0 or -1. */
int lb_cluster_each_master(struct lb_cluster *cluster, int argc, const char **argv,
                           const size_t *argvlen,
                           void (*each)(void *ctx, const char *node, const redisReply *reply),
                           void *ctx);

/* "host:port" of the master serving 'slot', or NULL when unknown. */
const char *lb_cluster_slot_owner(const struct lb_cluster *cluster, uint16_t slot);
int lb_cluster_is_standalone(const struct lb_cluster *cluster);
/* Nodes the client knows now: seeds and those the last slot map named. */
size_t lb_cluster_known_nodes(const struct lb_cluster *cluster);
const char *lb_cluster_error(const struct lb_cluster *cluster);
/* The class of the last lb_cluster_command failure (refresh failures are
 * LB_REDIS_RETRY). */
enum lb_redis_error lb_cluster_error_class(const struct lb_cluster *cluster);
const struct lb_cluster_stats *lb_cluster_stats(const struct lb_cluster *cluster);

#endif
