/* The Redis Cluster client against scripted fake nodes: every redirection
 * and error a cluster can answer a transaction with, and the exact commands
 * the client sends in response. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "clock.h"
#include "cluster.h"
#include "fake_redis.h"
#include "log.h"
#include "oom.h"
#include "sweep.h"

/* How a fake node behaves; the handler below reads it. */
struct script {
    int port;                 /* this node's port */
    char shards[2][1 << 18];  /* CLUSTER SHARDS replies: before and after 'moved' */
    int moved;                /* 0 until this node has answered MOVED */
    const char *slots;        /* CLUSTER SLOTS reply, or NULL: unknown */
    const char *queued_reply; /* reply to commands inside MULTI (default +QUEUED) */
    const char *exec_reply;   /* reply to EXEC (default one :1) */
    const char *wait_reply;   /* reply to WAIT (default :1) */
    const char *auth_reply;   /* reply to AUTH (default +OK) */
    int close_on_exec;        /* drop the connection instead of answering EXEC */
    int close_on_wait;        /* drop the connection instead of answering WAIT */
    int wait_delay_ms;        /* sleep this long before answering WAIT */
    int queued_error;         /* an error was answered inside the current MULTI */
    int once;                 /* the special replies apply to the first transaction only */
    int transactions;
    int script_cached;         /* SCRIPT LOAD was answered (a fresh node has no script) */
    const char *load_reply;    /* reply to SCRIPT LOAD (default: the SHA1) */
    int close_after_shards;    /* hang up right after answering CLUSTER SHARDS */
    int close_on_ping;         /* hang up instead of answering PING */
    const char *evalsha_reply; /* reply to EVALSHA once the script is cached */
    const char *scan_reply;    /* reply to SCAN (default: cursor 0, no key) */
};

#define SCRIPT     "return 1"
#define SCRIPT_SHA "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"

static const char *handler(struct fake_redis *fake, int argc, char **argv, void *ctx)
{
    struct script *s = ctx;
    (void)fake;
    if (argc == 0)
        return "-ERR empty\r\n";
    int special = !s->once || s->transactions == 0;
    if (strcmp(argv[0], "CLUSTER") == 0 && argc > 1 && strcmp(argv[1], "SHARDS") == 0) {
        if (!s->shards[s->moved][0])
            return "-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n";
        if (s->close_after_shards) {
            static char reply[sizeof(s->shards[0]) + 1];
            snprintf(reply, sizeof(reply), FAKE_REDIS_THEN_CLOSE "%s", s->shards[s->moved]);
            return reply;
        }
        return s->shards[s->moved];
    }
    if (strcmp(argv[0], "CLUSTER") == 0 && argc > 1 && strcmp(argv[1], "SLOTS") == 0)
        return s->slots ? s->slots : "-ERR This instance has cluster support disabled\r\n";
    if (strcmp(argv[0], "PING") == 0 && s->close_on_ping)
        return NULL;
    if (strcmp(argv[0], "ROLE") == 0)
        return "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n";
    if (strcmp(argv[0], "AUTH") == 0)
        return s->auth_reply ? s->auth_reply : "+OK\r\n";
    if (strcmp(argv[0], "SCRIPT") == 0) {
        if (s->load_reply)
            return s->load_reply;
        s->script_cached = 1;
        return "$40\r\n" SCRIPT_SHA "\r\n";
    }
    if (strcmp(argv[0], "EVALSHA") == 0)
        return !s->script_cached  ? "-NOSCRIPT No matching script. Please use EVAL.\r\n"
               : s->evalsha_reply ? s->evalsha_reply
                                  : ":1\r\n";
    if (strcmp(argv[0], "ASKING") == 0 || strcmp(argv[0], "MULTI") == 0) {
        s->queued_error = 0;
        return "+OK\r\n";
    }
    if (strcmp(argv[0], "SCAN") == 0)
        return s->scan_reply ? s->scan_reply : "*2\r\n$1\r\n0\r\n*0\r\n";
    if (strcmp(argv[0], "WAIT") == 0) {
        if (s->wait_delay_ms)
            usleep((useconds_t)s->wait_delay_ms * 1000);
        return s->close_on_wait ? NULL : s->wait_reply ? s->wait_reply : ":1\r\n";
    }
    if (strcmp(argv[0], "EXEC") == 0) {
        s->transactions++;
        if (s->close_on_exec && special)
            return NULL;
        if (s->queued_error)
            return "-EXECABORT Transaction discarded because of previous errors.\r\n";
        return s->exec_reply && special ? s->exec_reply : "*1\r\n:1\r\n";
    }
    if (s->queued_reply && special) {
        if (s->queued_reply[0] == '-')
            s->queued_error = 1;
        if (strncmp(s->queued_reply, "-MOVED", 6) == 0)
            s->moved = 1;
        return s->queued_reply;
    }
    return "+QUEUED\r\n";
}

/* A CLUSTER SHARDS reply with one shard holding every slot, its master on
 * 'port' with 'replicas' online replicas; slot numbers as strings if asked. */
static void shards_reply(char *out, size_t cap, int port, int replicas, int string_slots)
{
    int n = snprintf(out, cap,
                     "*1\r\n*4\r\n$5\r\nslots\r\n%s$5\r\nnodes\r\n*%d\r\n"
                     "*10\r\n$2\r\nid\r\n$1\r\nm\r\n$4\r\nport\r\n:%d\r\n$2\r\nip\r\n"
                     "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n"
                     "$6\r\nonline\r\n",
                     string_slots ? "*2\r\n$1\r\n0\r\n$5\r\n16383\r\n" : "*2\r\n:0\r\n:16383\r\n",
                     1 + replicas, port);
    for (int r = 0; r < replicas; r++)
        n += snprintf(out + n, cap - (size_t)n,
                      "*10\r\n$2\r\nid\r\n$1\r\nr\r\n$4\r\nport\r\n:%d\r\n$2\r\nip\r\n"
                      "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$6\r\nhealth\r\n"
                      "$6\r\nonline\r\n",
                      port + 1000 + r);
}

static const char txn_bytes[] = "*1\r\n$5\r\nMULTI\r\n"
                                "*5\r\n$4\r\nZADD\r\n$1\r\nk\r\n$2\r\nGT\r\n$1\r\n1\r\n$1\r\nm\r\n"
                                "*1\r\n$4\r\nEXEC\r\n";
static const char txn_log[] = "MULTI\nZADD k GT 1 m\nEXEC\n";

struct nodes {
    struct script a, b;
    char redirect[64]; /* A's reply inside MULTI, see redirect_to_b */
    struct fake_redis *fa, *fb;
    struct lb_cluster *cl;
    struct lb_host seed;
};

/* Starts nodes A and B; A serves every slot, and after it has answered
 * MOVED its map says B does. */
static void start_nodes(struct nodes *n, int wait_replicas, const char *password)
{
    memset(n, 0, sizeof(*n));
    n->fa = fake_redis_start(handler, &n->a);
    n->fb = fake_redis_start(handler, &n->b);
    assert_non_null(n->fa);
    assert_non_null(n->fb);
    n->a.port = fake_redis_port(n->fa);
    n->b.port = fake_redis_port(n->fb);
    shards_reply(n->a.shards[0], sizeof(n->a.shards[0]), n->a.port, 0, 0);
    shards_reply(n->a.shards[1], sizeof(n->a.shards[1]), n->b.port, 0, 0);
    shards_reply(n->b.shards[0], sizeof(n->b.shards[0]), n->b.port, 0, 0);
    n->seed = (struct lb_host){.host = (char *)"127.0.0.1", .port = n->a.port};
    struct lb_cluster_options options = {.seeds = &n->seed,
                                         .nseeds = 1,
                                         .user = password ? "projector" : NULL,
                                         .password = password,
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 2000,
                                         .wait_replicas = wait_replicas,
                                         .wait_timeout_ms = 100};
    n->cl = lb_cluster_new(&options);
    assert_non_null(n->cl);
}

/* A answers commands inside MULTI with "MOVED|ASK 1 <B>" (the first
 * transaction only, if 'once'). */
static void redirect_to_b(struct nodes *n, const char *kind, int once)
{
    snprintf(n->redirect, sizeof(n->redirect), "-%s 1 127.0.0.1:%d\r\n", kind, n->b.port);
    n->a.queued_reply = n->redirect;
    n->a.once = once;
}

static void stop_nodes(struct nodes *n)
{
    lb_cluster_free(n->cl);
    fake_redis_stop(n->fa);
    fake_redis_stop(n->fb);
}

static struct lb_request txn(void)
{
    return (struct lb_request){
        .slot = 1, .is_txn = 1, .ncommands = 1, .bytes = txn_bytes, .len = sizeof(txn_bytes) - 1};
}

/* lb_cluster_exec of one request whose reply (EXEC's array, for a
 * transaction) the test does not look at. */
static size_t exec_one(struct lb_cluster *cl, struct lb_request *req)
{
    size_t failed = lb_cluster_exec(cl, req, 1);
    if (req->reply) {
        freeReplyObject(req->reply);
        req->reply = NULL;
    }
    return failed;
}

static void expect_log(struct fake_redis *fake, const char *want)
{
    char *got = fake_redis_log(fake);
    if (strcmp(got, want) != 0)
        fail_msg("expected the node to receive:\n%s\ngot:\n%s", want, got);
    free(got);
    fake_redis_clear_log(fake);
}

static void a_clean_transaction_is_one_pipeline(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    assert_true(req.ok);
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n");
    stop_nodes(&n);
}

static void moved_resends_the_whole_transaction_at_the_new_owner(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    redirect_to_b(&n, "MOVED", 0);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    assert_true(req.ok);
    /* A: the map, the refused transaction, then the map again (MOVED refreshes) */
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\nCLUSTER SHARDS\n");
    expect_log(n.fb, txn_log);
    assert_int_equal(lb_cluster_stats(n.cl)->moved, 1);
    char owner[64];
    snprintf(owner, sizeof(owner), "127.0.0.1:%d", n.b.port);
    assert_string_equal(lb_cluster_slot_owner(n.cl, 1), owner);
    stop_nodes(&n);
}

static void ask_sends_asking_with_the_transaction_and_keeps_the_map(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    redirect_to_b(&n, "ASK", 1);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    assert_true(req.ok);
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n");
    expect_log(n.fb, "ASKING\nMULTI\nZADD k GT 1 m\nEXEC\n");
    assert_int_equal(lb_cluster_stats(n.cl)->ask, 1);
    /* the slot still belongs to A: the next transaction goes there */
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, txn_log);
    expect_log(n.fb, "");
    stop_nodes(&n);
}

static void tryagain_fails_the_request_for_a_later_retry(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.queued_reply = "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_false(req.ok);
    assert_non_null(strstr(req.error, "TRYAGAIN"));
    assert_int_equal(lb_cluster_stats(n.cl)->retry_later, 1);
    /* sent once, not resent by the client, and no map refresh */
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n");
    n.a.queued_reply = NULL;
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, txn_log);
    stop_nodes(&n);
}

static void clusterdown_fails_and_reloads_the_map_first_next_time(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.queued_reply = "-CLUSTERDOWN The cluster is down\r\n";
    n.a.once = 1;
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "CLUSTERDOWN"));
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n");
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n");
    stop_nodes(&n);
}

static void a_queued_error_is_reported_not_execabort(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.queued_reply = "-ERR wrong number of arguments for 'zadd' command\r\n";
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "wrong number of arguments"));
    assert_null(strstr(req.error, "EXECABORT"));
    assert_int_equal(lb_cluster_stats(n.cl)->command_errors, 1);
    stop_nodes(&n);
}

static void an_error_inside_exec_fails_the_whole_request(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.exec_reply = "*1\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_false(req.ok);
    assert_non_null(strstr(req.error, "WRONGTYPE"));
    stop_nodes(&n);
}

/* Error replies are told apart by their code, the word before the first
 * space, never by the rest of the text. */
static void error_replies_are_classified_by_their_code(void **state)
{
    (void)state;
    static const struct {
        const char *reply;
        enum lb_redis_action action;
        enum lb_redis_error class;
    } cases[] = {
        {"MOVED 3999 127.0.0.1:6381", LB_REDIS_MOVED, LB_REDIS_RETRY},
        {"ASK 3999 127.0.0.1:6381", LB_REDIS_ASK, LB_REDIS_RETRY},
        {"NOSCRIPT No matching script. Please use EVAL.", LB_REDIS_LOAD_SCRIPT, LB_REDIS_FIX},
        {"EXECABORT Transaction discarded", LB_REDIS_FOLLOWS, LB_REDIS_FIX},
        {"TRYAGAIN Multiple keys request during rehashing", LB_REDIS_LATER, LB_REDIS_RETRY},
        {"LOADING Redis is loading the dataset in memory", LB_REDIS_LATER, LB_REDIS_RETRY},
        {"BUSY Redis is busy running a script", LB_REDIS_LATER, LB_REDIS_RETRY},
        {"MASTERDOWN Link with MASTER is down", LB_REDIS_LATER, LB_REDIS_RETRY},
        {"NOREPLICAS Not enough good replicas to write.", LB_REDIS_LATER, LB_REDIS_RETRY},
        {"CLUSTERDOWN The cluster is down", LB_REDIS_LATER_REMAP, LB_REDIS_RETRY},
        {"READONLY You can't write against a read only replica.", LB_REDIS_READONLY,
         LB_REDIS_RETRY},
        {"WRONGTYPE Operation against a key holding the wrong kind of value", LB_REDIS_OPERATOR,
         LB_REDIS_FIX},
        {"NOPERM this user has no permissions to run the 'zadd' command", LB_REDIS_OPERATOR,
         LB_REDIS_FIX},
        {"OOM command not allowed when used memory > 'maxmemory'.", LB_REDIS_OPERATOR,
         LB_REDIS_FIX},
        {"ERR Error running script: TRYAGAIN inside", LB_REDIS_OPERATOR, LB_REDIS_FIX},
        {"BUSYKEY Target key name already exists.", LB_REDIS_OPERATOR, LB_REDIS_FIX},
        {"MOVEDX 1 a:1", LB_REDIS_OPERATOR, LB_REDIS_FIX},
        {"TRYAGAIN", LB_REDIS_LATER, LB_REDIS_RETRY},
        {"", LB_REDIS_OPERATOR, LB_REDIS_FIX},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        print_message("%s\n", cases[i].reply);
        assert_int_equal(lb_redis_action(cases[i].reply), cases[i].action);
        assert_int_equal(lb_redis_classify(cases[i].reply), cases[i].class);
    }
}

/* READONLY is a failover the map has not caught up with, until the map,
 * read again, keeps naming the node for the patience (400 ms here, 10 s by
 * default): then an operator must look. A write the node accepts ends the
 * streak, and so does a pause longer than the patience. */
static int readonly_write(struct nodes *n, long sleep_ms)
{
    struct timespec pause = {0, sleep_ms * 1000000L};
    nanosleep(&pause, NULL);
    struct lb_request req = txn();
    req.writes = 1;
    if (exec_one(n->cl, &req) == 0)
        return -1;
    assert_non_null(strstr(req.error, "READONLY"));
    return req.error_class;
}

static void readonly_that_outlasts_a_refresh_needs_an_operator(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    lb_cluster_free(n.cl);
    struct lb_cluster_options options = {.seeds = &n.seed,
                                         .nseeds = 1,
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 2000,
                                         .wait_replicas = -1,
                                         .readonly_patience_ms = 400};
    n.cl = lb_cluster_new(&options);
    n.a.queued_reply = "-READONLY You can't write against a read only replica.\r\n";
    assert_int_equal(readonly_write(&n, 0), LB_REDIS_RETRY);   /* a failover, maybe */
    assert_int_equal(readonly_write(&n, 250), LB_REDIS_RETRY); /* 250 ms: patience */
    struct lb_request req = txn();
    struct timespec pause = {0, 250 * 1000000L};
    nanosleep(&pause, NULL);
    req.writes = 1;
    assert_int_equal(exec_one(n.cl, &req), 1); /* 500 ms, the map read again between */
    assert_int_equal(req.error_class, LB_REDIS_FIX);
    assert_non_null(strstr(req.error, "names it the master"));
    assert_int_equal(readonly_write(&n, 600), LB_REDIS_RETRY); /* left alone: a new streak */
    n.a.queued_reply = NULL; /* fixed: it writes, which ends any streak */
    req = txn();
    req.writes = 1;
    assert_int_equal(exec_one(n.cl, &req), 0);
    n.a.queued_reply = "-READONLY You can't write against a read only replica.\r\n";
    assert_int_equal(readonly_write(&n, 0), LB_REDIS_RETRY);
    assert_int_equal(readonly_write(&n, 250), LB_REDIS_RETRY);
    n.a.queued_reply = NULL;
    stop_nodes(&n);
}

/* A reply of the wrong shape means replies can no longer be paired with
 * requests: the connection is closed, the request fails to be retried, and
 * the next one goes out on a new connection. */
static void a_short_exec_reply_closes_the_connection_and_fails_for_a_retry(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.exec_reply = "*0\r\n";
    n.a.once = 1;
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "0 replies for 1 commands; closing the connection"));
    assert_int_equal(req.error_class, LB_REDIS_RETRY);
    assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 1);
    req = txn(); /* on a new connection: a fresh MAP read and the transaction */
    assert_int_equal(exec_one(n.cl, &req), 0);
    n.a.once = 0;
    n.a.queued_reply = "+OK\r\n"; /* not +QUEUED */
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "expected +QUEUED inside MULTI"));
    assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 2);
    n.a.queued_reply = NULL;
    n.a.exec_reply = "*-1\r\n"; /* a nil EXEC: aborted */
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "aborted"));
    stop_nodes(&n);
}

/* Hostile or corrupted replies: an array header announcing 2^31 elements
 * (hiredis 0.14 would calloc 16 GiB for it), one nested, more than 64 MiB of
 * a reply not parsed yet: each a protocol error on that node, retriable, the
 * connection closed, the next request served on a new one. */
static void hostile_reply_headers_are_protocol_errors_not_allocations(void **state)
{
    (void)state;
    size_t big = (size_t)65 << 20;
    char *huge = malloc(big + 32);
    assert_non_null(huge);
    int head = snprintf(huge, 32, "$%zu\r\n", big);
    memset(huge + head, 'x', big);
    huge[head + big] = '\0';
    const char *replies[] = {"*2147483647\r\n", "*1\r\n*2000000\r\n", huge};
    const char *whys[] = {"a reply announces 2147483647 elements (at most 1048576",
                          "a reply announces 2000000 elements",
                          "more than 64 MiB of a reply unparsed"};
    for (size_t k = 0; k < 3; k++) {
        struct nodes n;
        start_nodes(&n, -1, NULL);
        n.a.exec_reply = replies[k];
        n.a.once = 1;
        struct lb_request req = txn();
        assert_int_equal(exec_one(n.cl, &req), 1);
        if (!strstr(req.error, whys[k]) || !strstr(req.error, "closing the connection"))
            fail_msg("reply %zu: error \"%s\"", k, req.error);
        assert_int_equal(req.error_class, LB_REDIS_RETRY);
        assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 1);
        req = txn();
        assert_int_equal(exec_one(n.cl, &req), 0);
        stop_nodes(&n);
    }
    free(huge);
}

/* A reply nobody asked for (a desynchronised or hostile node) is never
 * taken for the answer to a later request: the connection is closed and
 * the next request goes out on a new one. */
static void a_reply_nobody_asked_for_closes_the_connection(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.exec_reply = "*1\r\n:1\r\n*1\r\n:7\r\n"; /* EXEC's answer, then one more */
    n.a.once = 1;
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    assert_true(req.ok);
    fake_redis_clear_log(n.fa);
    req = txn();
    lb_cluster_exec(n.cl, &req, 1);
    assert_true(req.ok);
    assert_non_null(req.reply);
    assert_int_equal(req.reply->element[0]->integer, 1); /* not the stray 7 */
    freeReplyObject(req.reply);
    assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 1);
    stop_nodes(&n);
}

static void wait_follows_the_writes_when_the_master_has_a_replica(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 1, 0);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    /* a shortfall fails the request and reloads the map */
    n.a.wait_reply = ":0\r\n";
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "WAIT: 0 of 1 replica(s)"));
    assert_int_equal(lb_cluster_stats(n.cl)->wait_shortfalls, 1);
    expect_log(n.fa, "MULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    req = txn();
    exec_one(n.cl, &req);
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    stop_nodes(&n);
}

/* A pipelined call: deferred requests stay out of lb_cluster_start; each
 * lb_cluster_dispatch sends what the caller released, with a WAIT of its
 * own; one still deferred when the call ends fails, never half-sent. */
static void deferred_requests_go_out_when_released_each_with_a_wait(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 1, 0);
    struct lb_request reqs[3] = {txn(), txn(), txn()};
    reqs[1].defer = reqs[2].defer = 1;
    lb_cluster_start(n.cl, reqs, 3);
    while (!lb_cluster_progress(n.cl, 100))
        ;
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    assert_int_equal(lb_cluster_busy_nodes(n.cl), 0);
    assert_true(lb_cluster_call_clean(n.cl));
    assert_non_null(lb_cluster_settled_owner(n.cl, 1));
    reqs[1].defer = 0;
    lb_cluster_dispatch(n.cl);
    assert_int_equal(lb_cluster_finish(n.cl), 1);
    expect_log(n.fa, "MULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    assert_true(reqs[0].ok);
    assert_true(reqs[1].ok);
    assert_false(reqs[2].ok);
    assert_non_null(strstr(reqs[2].error, "still deferred"));
    for (int i = 0; i < 3; i++)
        if (reqs[i].reply)
            freeReplyObject(reqs[i].reply);

    /* a shortfall of the second pass's WAIT fails what it covered */
    reqs[0] = reqs[1] = txn();
    reqs[1].defer = 1;
    lb_cluster_start(n.cl, reqs, 2);
    while (!lb_cluster_progress(n.cl, 100))
        ;
    n.a.wait_reply = ":0\r\n";
    reqs[1].defer = 0;
    lb_cluster_dispatch(n.cl);
    while (!lb_cluster_progress(n.cl, 100))
        ;
    assert_false(lb_cluster_call_clean(n.cl)); /* nothing may follow it early now */
    assert_int_equal(lb_cluster_finish(n.cl), 1);
    assert_true(reqs[0].ok);
    assert_false(reqs[1].ok);
    assert_non_null(strstr(reqs[1].error, "WAIT: 0 of 1 replica(s)"));
    if (reqs[0].reply)
        freeReplyObject(reqs[0].reply);
    stop_nodes(&n);
}

static void writes_whose_wait_never_answered_are_not_durable(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 1, 0);
    n.a.close_on_wait = 1; /* the master dies while its replicas catch up */
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_false(req.ok);
    assert_non_null(strstr(req.error, "connection to Redis"));
    stop_nodes(&n);
}

static void no_wait_without_replicas_or_when_disabled(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, 0, NULL); /* wait_replicas: 0 */
    shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 2, 0);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n");
    stop_nodes(&n);
    start_nodes(&n, 2, NULL); /* wait_replicas: 2, asked for explicitly */
    shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 2, 0);
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1); /* the fake's WAIT says 1 */
    expect_log(n.fa, "CLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\nWAIT 2 100\n");
    stop_nodes(&n);
}

/* With wait_replicas auto, a replica the map calls loading (a new
 * cluster's, one that has just synced, or one that never will) counts only
 * as its master's WAIT 0 0 says. A master that answers 0, refuses the
 * question, hangs up or stays silent past the map read's time counts none:
 * the map still stands, and its writes go without WAIT, counted, instead of
 * stalling on a WAIT nobody answers. */
static void loading_replicas_count_as_their_master_answers(void **state)
{
    (void)state;
    static const struct {
        const char *wait_reply; /* to WAIT 0 0; NULL: hang up */
        int delay_ms;           /* before answering: past the 2 s command timeout */
        int counted;
    } cases[] = {
        {":1\r\n", 0, 1},
        {":0\r\n", 0, 0},
        {"-NOPERM User projector has no permissions to run the 'wait' command\r\n", 0, 0},
        {NULL, 0, 0},
        {":1\r\n", 2200, 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct nodes n;
        start_nodes(&n, -1, NULL);
        shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 1, 0);
        char *health = strstr(n.a.shards[0], "replica\r\n$6\r\nhealth\r\n$6\r\nonline\r\n");
        assert_non_null(health);
        strcpy(health, "replica\r\n$6\r\nhealth\r\n$7\r\nloading\r\n");
        n.a.wait_reply = cases[c].wait_reply;
        n.a.close_on_wait = cases[c].wait_reply == NULL;
        n.a.wait_delay_ms = cases[c].delay_ms;
        assert_int_equal(lb_cluster_refresh(n.cl), 0);
        expect_log(n.fa, "CLUSTER SHARDS\nWAIT 0 0\n");
        n.a.wait_reply = NULL; /* the WAIT after a write, if any, is answered 1 */
        n.a.close_on_wait = n.a.wait_delay_ms = 0;
        struct lb_request req = txn();
        assert_int_equal(exec_one(n.cl, &req), 0);
        assert_true(req.ok);
        expect_log(n.fa, cases[c].counted ? "MULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n"
                                          : "MULTI\nZADD k GT 1 m\nEXEC\n");
        assert_int_equal(lb_cluster_stats(n.cl)->unwaited, cases[c].counted ? 0 : 1);
        assert_int_equal(lb_cluster_stats(n.cl)->wait_shortfalls, 0);
        stop_nodes(&n);
    }
}

static void maps_come_from_shards_with_string_slots_or_from_slots(void **state)
{
    (void)state;
    struct nodes n;
    char slots[256];
    start_nodes(&n, -1, NULL);
    shards_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 0, 1);
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    assert_non_null(lb_cluster_slot_owner(n.cl, 16383));
    stop_nodes(&n);

    /* a Redis without CLUSTER SHARDS: CLUSTER SLOTS, then only that */
    start_nodes(&n, -1, NULL);
    n.a.shards[0][0] = '\0';
    snprintf(slots, sizeof(slots),
             "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$1\r\nm\r\n", n.a.port);
    n.a.slots = slots;
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    expect_log(n.fa, "CLUSTER SHARDS\nCLUSTER SLOTS\nCLUSTER SLOTS\n");
    assert_false(lb_cluster_is_standalone(n.cl));
    stop_nodes(&n);
}

static void a_standalone_redis_takes_every_slot(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    strcpy(n.a.shards[0], "-ERR This instance has cluster support disabled\r\n");
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    assert_true(lb_cluster_is_standalone(n.cl));
    struct lb_request req = txn();
    req.slot = 9999;
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "CLUSTER SHARDS\nROLE\nMULTI\nZADD k GT 1 m\nEXEC\n");
    stop_nodes(&n);
}

static void a_connection_lost_mid_transaction_fails_it_and_reconnects(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    n.a.close_on_exec = 1;
    n.a.once = 1;
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "connection to Redis"));
    assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 1);
    req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    stop_nodes(&n);
}

static void every_connection_authenticates_and_the_password_stays_secret(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, "s3cret-pw");
    redirect_to_b(&n, "MOVED", 0);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "AUTH projector s3cret-pw\nCLUSTER SHARDS\nMULTI\nZADD k GT 1 m\nEXEC\n"
                     "CLUSTER SHARDS\n");
    /* the redirection target authenticates on its new connection too */
    expect_log(n.fb, "AUTH projector s3cret-pw\nMULTI\nZADD k GT 1 m\nEXEC\n");
    stop_nodes(&n);

    start_nodes(&n, -1, "s3cret-pw");
    n.a.auth_reply = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    assert_int_equal(lb_cluster_refresh(n.cl), -1);
    assert_non_null(strstr(lb_cluster_error(n.cl), "WRONGPASS"));
    assert_null(strstr(lb_cluster_error(n.cl), "s3cret-pw"));
    stop_nodes(&n);
}

/* EVALSHA with one key, for slot 'slot' of board 'board'. */
static struct lb_request evalsha(char *buf, size_t cap, const char *board, uint16_t slot)
{
    char key[32];
    int klen = snprintf(key, sizeof(key), "{%s}k", board);
    int len = snprintf(buf, cap, "*4\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n",
                       SCRIPT_SHA, klen, key);
    return (struct lb_request){
        .slot = slot, .writes = 1, .ncommands = 1, .bytes = buf, .len = (size_t)len};
}

static struct lb_cluster *script_client(struct nodes *n, const char *script)
{
    struct lb_cluster_options options = {.seeds = &n->seed,
                                         .nseeds = 1,
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 2000,
                                         .wait_replicas = 0,
                                         .script = script,
                                         .script_sha = script ? SCRIPT_SHA : NULL};
    lb_cluster_free(n->cl);
    n->cl = lb_cluster_new(&options);
    assert_non_null(n->cl);
    return n->cl;
}

static void noscript_loads_the_script_and_resends_the_round_in_order(void **state)
{
    (void)state;
    struct nodes n;
    char b1[128], b2[128], b3[128];
    start_nodes(&n, 0, NULL);
    script_client(&n, SCRIPT);
    /* the node has never seen the script (a node replaced empty, a replica
     * promoted, a SCRIPT FLUSH); connecting does not load it */
    struct lb_request reqs[3] = {evalsha(b1, sizeof(b1), "a", 1), evalsha(b2, sizeof(b2), "b", 2),
                                 evalsha(b3, sizeof(b3), "a", 1)};
    assert_int_equal(lb_cluster_exec(n.cl, reqs, 3), 0);
    for (int i = 0; i < 3; i++) {
        assert_true(reqs[i].ok);
        assert_non_null(reqs[i].reply);
        assert_int_equal(reqs[i].reply->type, REDIS_REPLY_INTEGER);
        freeReplyObject(reqs[i].reply);
    }
    const char *evals = "EVALSHA " SCRIPT_SHA " 1 {a}k\nEVALSHA " SCRIPT_SHA
                        " 1 {b}k\nEVALSHA " SCRIPT_SHA " 1 {a}k\n";
    char want[1024];
    snprintf(want, sizeof(want), "CLUSTER SHARDS\n%sSCRIPT LOAD " SCRIPT "\n%s", evals, evals);
    expect_log(n.fa, want);
    assert_int_equal(lb_cluster_stats(n.cl)->script_loads, 1);
    assert_int_equal(lb_cluster_stats(n.cl)->command_errors, 0);
    assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 0);
    /* the next call finds the script: one round trip */
    reqs[0] = evalsha(b1, sizeof(b1), "a", 1);
    assert_int_equal(lb_cluster_exec(n.cl, reqs, 1), 0);
    freeReplyObject(reqs[0].reply);
    expect_log(n.fa, "EVALSHA " SCRIPT_SHA " 1 {a}k\n");
    stop_nodes(&n);
}

/* Redis 7.0 refuses a command the script calls (ACL) without naming it,
 * only the script's line: the error names the command from that line. */
static void a_command_the_script_may_not_call_is_named(void **state)
{
    (void)state;
    struct nodes n;
    char b1[128];
    start_nodes(&n, 0, NULL);
    script_client(&n, "local k = KEYS[1]\nif redis.call('EXISTS', k) == 0 then\n"
                      "  redis.pcall(k == 'x' and 'ZMSCORE' or 'HMGET', k, 'm')\nend\n");
    n.a.script_cached = 1;
    static const char *const lines[] = {"2", "3", "1"};
    static const char *const want[] = {
        "NOPERM this user may not run 'exists' (the apply script calls it)",
        "NOPERM this user may not run 'zmscore' or 'hmget' (the apply script calls it)",
        "ERR The user executing the script can't run this command"};
    static char reply[256]; /* the fake's thread reads it */
    for (int k = 0; k < 3; k++) {
        snprintf(reply, sizeof(reply),
                 "-ERR The user executing the script can't run this command or subcommand "
                 "script: %s, on @user_script:%s.\r\n",
                 SCRIPT_SHA, lines[k]);
        n.a.evalsha_reply = reply;
        struct lb_request req = evalsha(b1, sizeof(b1), "a", 1);
        assert_int_equal(lb_cluster_exec(n.cl, &req, 1), 1);
        if (!strstr(req.error, want[k]))
            fail_msg("line %s: \"%s\"", lines[k], req.error);
        assert_int_equal(req.error_class, LB_REDIS_FIX);
        if (req.reply)
            freeReplyObject(req.reply);
    }
    stop_nodes(&n);
}

static void a_script_load_refused_or_of_another_script_fails_the_requests(void **state)
{
    (void)state;
    struct nodes n;
    char b1[128], b2[128];
    start_nodes(&n, 0, NULL);
    script_client(&n, SCRIPT);
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    /* a node whose SHA1 of the script is not ours (another script under the
     * same name, a broken build): never run what it loaded */
    n.a.load_reply = "$40\r\n0000000000000000000000000000000000000000\r\n";
    struct lb_request other[1] = {evalsha(b1, sizeof(b1), "a", 1)};
    assert_int_equal(lb_cluster_exec(n.cl, other, 1), 1);
    assert_non_null(strstr(other[0].error, "SHA1 of the script differs from ours"));
    assert_int_equal(other[0].error_class, LB_REDIS_FIX);
    n.a.load_reply = "-NOPERM this user has no permissions to run the 'script|load' command\r\n";
    fake_redis_clear_log(n.fa);
    struct lb_request reqs[2] = {evalsha(b1, sizeof(b1), "a", 1), evalsha(b2, sizeof(b2), "b", 2)};
    assert_int_equal(lb_cluster_exec(n.cl, reqs, 2), 2);
    for (int i = 0; i < 2; i++)
        assert_non_null(strstr(reqs[i].error, "SCRIPT LOAD failed: NOPERM"));
    /* loaded once, not in a loop */
    char *log = fake_redis_log(n.fa);
    int loads = 0;
    for (const char *p = log; (p = strstr(p, "SCRIPT LOAD")); p++)
        loads++;
    free(log);
    assert_int_equal(loads, 1); /* once after NOSCRIPT */
    stop_nodes(&n);
}

/* A node that accepts connections and never answers (a frozen process: the
 * kernel still completes the handshake). Returns the listening socket. */
static int silent_node(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void a_refresh_among_silent_nodes_blocks_one_command_timeout_in_all(void **state)
{
    (void)state;
    struct lb_host seeds[3];
    int fds[3], ports[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = silent_node(&ports[i]);
        seeds[i] = (struct lb_host){.host = (char *)"127.0.0.1", .port = ports[i]};
    }
    struct lb_cluster_options options = {.seeds = seeds,
                                         .nseeds = 3,
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 1000,
                                         .wait_replicas = 0};
    struct lb_cluster *cl = lb_cluster_new(&options);
    assert_non_null(cl);
    /* node by node it would take 3 s; the refresh has one budget */
    int64_t start = lb_monotonic_ms();
    assert_int_equal(lb_cluster_refresh(cl), -1);
    int64_t took = lb_monotonic_ms() - start;
    assert_true(took >= 900 && took < 2500);
    assert_non_null(strstr(lb_cluster_error(cl), "no Redis node could serve the slot map"));
    assert_int_equal(lb_cluster_error_class(cl), LB_REDIS_RETRY);
    lb_cluster_free(cl);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

static void a_call_during_a_started_one_is_refused_and_the_first_completes(void **state)
{
    (void)state;
    struct nodes n;
    char b1[128], b2[128];
    start_nodes(&n, 0, NULL);
    script_client(&n, SCRIPT);
    struct lb_request first = evalsha(b1, sizeof(b1), "a", 1);
    lb_cluster_start(n.cl, &first, 1);
    struct lb_request second = evalsha(b2, sizeof(b2), "b", 2);
    assert_int_equal(lb_cluster_exec(n.cl, &second, 1), 1);
    assert_false(second.ok);
    assert_null(second.reply);
    assert_non_null(strstr(second.error, "another call is in progress"));
    assert_int_equal(lb_cluster_finish(n.cl), 0);
    assert_true(first.ok);
    assert_int_equal(first.reply->type, REDIS_REPLY_INTEGER);
    freeReplyObject(first.reply);
    stop_nodes(&n);
}

static void noscript_without_a_script_to_load_is_an_error(void **state)
{
    (void)state;
    struct nodes n;
    char b1[128];
    start_nodes(&n, 0, NULL);
    script_client(&n, NULL);
    struct lb_request req = evalsha(b1, sizeof(b1), "a", 1);
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "NOSCRIPT"));
    expect_log(n.fa, "CLUSTER SHARDS\nEVALSHA " SCRIPT_SHA " 1 {a}k\n");
    stop_nodes(&n);
}

/* A CLUSTER SHARDS reply with 'masters' shards of 'replicas' online
 * replicas each, slots split evenly; the last shard's master is the fake
 * node on 'port', the others at addresses from 'first_port' on (nothing
 * listens there). Returns a malloc'ed string. */
static char *many_shards(int masters, int replicas, int port, int first_port)
{
    size_t cap = (size_t)masters * (size_t)(1 + replicas) * 200 + 64, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    len += (size_t)snprintf(out + len, cap - len, "*%d\r\n", masters);
    for (int m = 0; m < masters; m++) {
        int first = m * 16384 / masters, last = (m + 1) * 16384 / masters - 1;
        len += (size_t)snprintf(out + len, cap - len,
                                "*4\r\n$5\r\nslots\r\n*2\r\n:%d\r\n:%d\r\n$5\r\nnodes\r\n*%d\r\n",
                                first, last, 1 + replicas);
        for (int k = 0; k <= replicas; k++) {
            int p = m == masters - 1 && k == 0 ? port : first_port + m * (1 + replicas) + k;
            len += (size_t)snprintf(
                out + len, cap - len,
                "*8\r\n$4\r\nport\r\n:%d\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n%s"
                "$6\r\nhealth\r\n$6\r\nonline\r\n",
                p, k == 0 ? "$6\r\nmaster\r\n" : "$7\r\nreplica\r\n");
        }
    }
    return out;
}

static void wait_covers_masters_past_the_first_256_nodes(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    /* B, the seed, describes the cluster; A is the master of its last shard,
     * the 900th node the client learns of */
    char *shards = many_shards(300, 2, n.a.port, 30000);
    assert_true(strlen(shards) < sizeof(n.b.shards[0]));
    strcpy(n.b.shards[0], shards);
    free(shards);
    n.seed.port = n.b.port;
    struct lb_cluster_options options = {.seeds = &n.seed,
                                         .nseeds = 1,
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 2000,
                                         .wait_replicas = -1,
                                         .wait_timeout_ms = 100};
    lb_cluster_free(n.cl);
    n.cl = lb_cluster_new(&options);
    assert_non_null(n.cl);
    struct lb_request req = txn();
    req.slot = 16383;
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "MULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    assert_true(lb_cluster_known_nodes(n.cl) >= 900);
    stop_nodes(&n);
}

static void nodes_that_left_the_cluster_are_forgotten(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    /* the fake node's two replicas come back at new addresses 300 times */
    for (int round = 0; round < 300; round++) {
        char *shards = many_shards(1, 2, n.a.port, 31000 + 2 * round);
        strcpy(n.a.shards[0], shards);
        free(shards);
        assert_int_equal(lb_cluster_refresh(n.cl), 0);
        struct lb_request req = txn();
        assert_int_equal(exec_one(n.cl, &req), 0);
        assert_true(lb_cluster_known_nodes(n.cl) <= 3);
    }
    /* and the master still counts its replicas: WAIT follows the writes */
    fake_redis_clear_log(n.fa);
    struct lb_request req = txn();
    assert_int_equal(exec_one(n.cl, &req), 0);
    expect_log(n.fa, "MULTI\nZADD k GT 1 m\nEXEC\nWAIT 1 100\n");
    stop_nodes(&n);
}

static void a_node_hanging_up_mid_write_fails_the_requests_without_sigpipe(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, 0, NULL);
    /* the node hangs up while the connection is idle (CLIENT KILL, a
     * restart, its timeout): noticed before the next request is written,
     * which goes out on a new connection */
    n.a.close_after_shards = 1;
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    n.a.close_after_shards = 0;
    /* the fake's close() follows its reply on its own thread: let the FIN
     * arrive (it takes microseconds on loopback), so that the check before
     * the write has it to see */
    usleep(300 * 1000);
    struct lb_request small = {
        .slot = 1, .ncommands = 1, .bytes = "*1\r\n$4\r\nECHO\r\n", .len = 14};
    assert_int_equal(exec_one(n.cl, &small), 0);
    assert_int_equal(lb_cluster_stats(n.cl)->connection_errors, 1);
    /* it hangs up while the next request, 16 MiB, is being written, which
     * the kernel answers with SIGPIPE unless told otherwise */
    n.a.close_on_ping = 1;
    size_t big_len = 16u << 20;
    char *big = malloc(big_len + 64);
    assert_non_null(big);
    int head = snprintf(big, 64, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", big_len);
    memset(big + head, 'x', big_len);
    memcpy(big + head + big_len, "\r\n", 2);
    struct lb_request reqs[2] = {
        {.slot = 1, .ncommands = 1, .bytes = "*1\r\n$4\r\nPING\r\n", .len = 14},
        {.slot = 1, .ncommands = 1, .bytes = big, .len = (size_t)head + big_len + 2}};
    assert_int_equal(lb_cluster_exec(n.cl, reqs, 2), 2);
    for (int i = 0; i < 2; i++) {
        if (!strstr(reqs[i].error, "connection to Redis") &&
            !strstr(reqs[i].error, "writing to Redis"))
            fail_msg("request %d: \"%s\"", i, reqs[i].error);
        if (reqs[i].reply)
            freeReplyObject(reqs[i].reply);
    }
    free(big);
    stop_nodes(&n);
}

/* As Redis 7.0.15 answers CLUSTER SHARDS once a master and its replica
 * are gone: the dead master is still listed, with health "fail". Its
 * shard holds slots 8192-16383, or 0-8191 when 'lost_first'; the master
 * on 'port' the others. */
static void lost_shard_reply(char *out, size_t cap, int port, int lost_first)
{
    const char *low = "*2\r\n:0\r\n:8191\r\n", *high = "*2\r\n:8192\r\n:16383\r\n";
    snprintf(out, cap,
             "*2\r\n"
             "*4\r\n$5\r\nslots\r\n%s$5\r\nnodes\r\n*1\r\n"
             "*8\r\n$4\r\nport\r\n:%d\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n"
             "$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
             "*4\r\n$5\r\nslots\r\n%s$5\r\nnodes\r\n*1\r\n"
             "*8\r\n$4\r\nport\r\n:1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n"
             "$6\r\nmaster\r\n$6\r\nhealth\r\n$4\r\nfail\r\n",
             lost_first ? high : low, port, lost_first ? low : high);
}

static void a_failed_master_serves_nothing(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    lost_shard_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, 0);
    assert_int_equal(lb_cluster_refresh(n.cl), 0);
    assert_null(lb_cluster_slot_owner(n.cl, 9000));
    assert_non_null(lb_cluster_slot_owner(n.cl, 100));
    struct lb_request req = txn();
    req.slot = 9000;
    assert_int_equal(exec_one(n.cl, &req), 1);
    assert_non_null(strstr(req.error, "no Redis master serves slot 9000"));
    stop_nodes(&n);
}

static void count_key(void *ctx, const redisReply *key)
{
    (void)key;
    (*(int *)ctx)++;
}

/* The closer's and the rebuilds' sweeps while a shard is lost: the masters
 * left are scanned and the sweep completes, whether the lost slots come
 * after the first master's or before. */
static void a_sweep_passes_over_the_slots_of_a_lost_shard(void **state)
{
    (void)state;
    for (int lost_first = 0; lost_first < 2; lost_first++) {
        struct nodes n;
        start_nodes(&n, -1, NULL);
        lost_shard_reply(n.a.shards[0], sizeof(n.a.shards[0]), n.a.port, lost_first);
        n.a.scan_reply = "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nlb:k\r\n";
        assert_int_equal(lb_cluster_refresh(n.cl), 0);
        struct lb_sweep sweep = {0};
        redisReply *failed = NULL;
        int keys = 0, rc, pages = 0;
        while ((rc = lb_sweep_page(&sweep, n.cl, "lb:*", NULL, 100, count_key, &keys, &failed)) ==
                   0 &&
               ++pages < 10)
            ;
        if (failed)
            freeReplyObject(failed);
        assert_int_equal(rc, 1);
        assert_int_equal(keys, 1);
        expect_log(n.fa, "CLUSTER SHARDS\nSCAN 0 MATCH lb:* COUNT 100\n");
        lb_sweep_free(&sweep);
        stop_nodes(&n);
    }
}

/* ---- out of memory ----------------------------------------------------------- */

/* A new client (AUTH, a script) sends a transaction that meets MOVED and a
 * script call that meets NOSCRIPT (on the first run; later runs find the
 * map moved and the script loaded). Whatever allocation fails: no crash,
 * no leak, and a request fails only when memory ran out. */
static int exec_with_a_new_client(void *ctx)
{
    struct nodes *n = ctx;
    static const char evalsha[] = "*3\r\n$7\r\nEVALSHA\r\n$40\r\n" SCRIPT_SHA "\r\n$1\r\n0\r\n";
    struct lb_cluster_options options = {.seeds = &n->seed,
                                         .nseeds = 1,
                                         .user = "projector",
                                         .password = "secret",
                                         .connect_timeout_ms = 1000,
                                         .command_timeout_ms = 2000,
                                         .wait_replicas = -1,
                                         .wait_timeout_ms = 100,
                                         .script = SCRIPT,
                                         .script_sha = SCRIPT_SHA};
    struct lb_cluster *cl = lb_cluster_new(&options);
    if (!cl)
        return oom_failed() ? 0 : -1;
    struct lb_request req[2] = {
        txn(), {.slot = 1, .ncommands = 1, .bytes = evalsha, .len = sizeof(evalsha) - 1}};
    size_t failed = lb_cluster_exec(cl, req, 2);
    for (int i = 0; i < 2; i++)
        if (req[i].reply)
            freeReplyObject(req[i].reply);
    lb_cluster_free(cl);
    return failed == 0 || oom_failed() ? 0 : -1;
}

static void running_out_of_memory_in_the_client_fails_requests_cleanly(void **state)
{
    (void)state;
    struct nodes n;
    start_nodes(&n, -1, NULL);
    redirect_to_b(&n, "MOVED", 1);
    assert_true(oom_sweep("cluster client", exec_with_a_new_client, &n, 1) > 20);
    assert_int_equal(n.b.script_cached, 1);
    stop_nodes(&n);
}

int main(void)
{
    lb_log_threshold = LB_LOG_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_clean_transaction_is_one_pipeline),
        cmocka_unit_test(moved_resends_the_whole_transaction_at_the_new_owner),
        cmocka_unit_test(ask_sends_asking_with_the_transaction_and_keeps_the_map),
        cmocka_unit_test(tryagain_fails_the_request_for_a_later_retry),
        cmocka_unit_test(clusterdown_fails_and_reloads_the_map_first_next_time),
        cmocka_unit_test(a_queued_error_is_reported_not_execabort),
        cmocka_unit_test(an_error_inside_exec_fails_the_whole_request),
        cmocka_unit_test(error_replies_are_classified_by_their_code),
        cmocka_unit_test(readonly_that_outlasts_a_refresh_needs_an_operator),
        cmocka_unit_test(running_out_of_memory_in_the_client_fails_requests_cleanly),
        cmocka_unit_test(a_short_exec_reply_closes_the_connection_and_fails_for_a_retry),
        cmocka_unit_test(hostile_reply_headers_are_protocol_errors_not_allocations),
        cmocka_unit_test(a_reply_nobody_asked_for_closes_the_connection),
        cmocka_unit_test(wait_follows_the_writes_when_the_master_has_a_replica),
        cmocka_unit_test(deferred_requests_go_out_when_released_each_with_a_wait),
        cmocka_unit_test(writes_whose_wait_never_answered_are_not_durable),
        cmocka_unit_test(no_wait_without_replicas_or_when_disabled),
        cmocka_unit_test(loading_replicas_count_as_their_master_answers),
        cmocka_unit_test(maps_come_from_shards_with_string_slots_or_from_slots),
        cmocka_unit_test(a_standalone_redis_takes_every_slot),
        cmocka_unit_test(a_connection_lost_mid_transaction_fails_it_and_reconnects),
        cmocka_unit_test(every_connection_authenticates_and_the_password_stays_secret),
        cmocka_unit_test(noscript_loads_the_script_and_resends_the_round_in_order),
        cmocka_unit_test(a_refresh_among_silent_nodes_blocks_one_command_timeout_in_all),
        cmocka_unit_test(a_call_during_a_started_one_is_refused_and_the_first_completes),
        cmocka_unit_test(a_script_load_refused_or_of_another_script_fails_the_requests),
        cmocka_unit_test(a_command_the_script_may_not_call_is_named),
        cmocka_unit_test(noscript_without_a_script_to_load_is_an_error),
        cmocka_unit_test(wait_covers_masters_past_the_first_256_nodes),
        cmocka_unit_test(nodes_that_left_the_cluster_are_forgotten),
        cmocka_unit_test(a_node_hanging_up_mid_write_fails_the_requests_without_sigpipe),
        cmocka_unit_test(a_failed_master_serves_nothing),
        cmocka_unit_test(a_sweep_passes_over_the_slots_of_a_lost_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
