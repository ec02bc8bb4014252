/* libFuzzer: a Redis node that answers whatever the input says. The
 * cluster client reads the slot map from it (answered truly, so that every
 * slot is on this node), then sends a transaction and a script call and
 * meets the input's replies: one per command, NUL-separated, in the order
 * the commands arrive (AUTH, SCRIPT LOAD, MULTI, ZADD, EXEC, EVALSHA, WAIT,
 * ... as the client sends them); when they run out the node hangs up.
 * Redirections to other ports meet closed ports on 127.0.0.1. Seeds:
 * tests/fuzz/corpus/node. */
#include "fuzz.h"

#include "cluster.h"
#include "fake_redis.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SCRIPT     "return 1"
#define SCRIPT_SHA "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"

static struct fake_redis *node;
static char shards[512];
/* the input's replies, NUL-terminated each: written by the main thread, read
 * by the node's, which may still be answering the previous input's client */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char replies[1 << 16];
static char reply[1 << 16]; /* the one being answered: a copy, outliving the lock */
static size_t replies_len, next_reply;

static const char *handler(struct fake_redis *fake, int argc, char **argv, void *ctx)
{
    (void)fake;
    (void)ctx;
    if (argc >= 2 && strcmp(argv[0], "CLUSTER") == 0)
        return strcmp(argv[1], "SHARDS") == 0 ? shards : "-ERR unknown subcommand\r\n";
    pthread_mutex_lock(&lock);
    const char *answer = NULL;
    if (next_reply < replies_len) {
        size_t len = strlen(replies + next_reply);
        memcpy(reply, replies + next_reply, len + 1);
        next_reply += len + 1;
        answer = reply;
    }
    pthread_mutex_unlock(&lock);
    return answer;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    node = fake_redis_start(handler, NULL);
    if (!node)
        fuzz_die("the fake node", "cannot listen on 127.0.0.1");
    snprintf(shards, sizeof(shards),
             "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
             "*10\r\n$2\r\nid\r\n$1\r\nm\r\n$4\r\nport\r\n:%d\r\n$2\r\nip\r\n"
             "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
             fake_redis_port(node));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char txn[] = "*1\r\n$5\r\nMULTI\r\n"
                              "*5\r\n$4\r\nZADD\r\n$1\r\nk\r\n$2\r\nGT\r\n$1\r\n1\r\n$1\r\nm\r\n"
                              "*1\r\n$4\r\nEXEC\r\n";
    static const char evalsha[] = "*3\r\n$7\r\nEVALSHA\r\n$40\r\n" SCRIPT_SHA "\r\n$1\r\n0\r\n";
    if (size >= sizeof(replies))
        return 0;
    pthread_mutex_lock(&lock);
    memcpy(replies, data, size);
    replies[size] = '\0';
    replies_len = size + 1;
    next_reply = 0;
    pthread_mutex_unlock(&lock);
    struct lb_host seed = {.host = (char *)"127.0.0.1", .port = fake_redis_port(node)};
    struct lb_cluster_options options = {.seeds = &seed,
                                         .nseeds = 1,
                                         .password = "secret",
                                         .connect_timeout_ms = 20,
                                         .command_timeout_ms = 20,
                                         .wait_replicas = 1,
                                         .wait_timeout_ms = 10,
                                         .script = SCRIPT,
                                         .script_sha = SCRIPT_SHA};
    struct lb_cluster *cl = lb_cluster_new(&options);
    if (!cl)
        return 0;
    struct lb_request req[2] = {
        {.slot = 1, .is_txn = 1, .writes = 1, .ncommands = 1, .bytes = txn, .len = sizeof(txn) - 1},
        {.slot = 2, .writes = 1, .ncommands = 1, .bytes = evalsha, .len = sizeof(evalsha) - 1}};
    lb_cluster_exec(cl, req, 2);
    for (int i = 0; i < 2; i++) {
        if (req[i].ok != 0 && req[i].ok != 1)
            __builtin_trap();
        if (req[i].reply)
            freeReplyObject(req[i].reply);
        fuzz_touch(req[i].error, strnlen(req[i].error, sizeof(req[i].error)));
    }
    lb_cluster_free(cl);
    fake_redis_clear_log(node);
    return 0;
}
