/* libFuzzer: bytes a Redis node might send, through hiredis' reader as the
 * cluster client reads them, then every parser of ours that takes a reply:
 * CLUSTER SHARDS, CLUSTER SLOTS, the apply script's answer and its pairs,
 * and the error-code table. Seeds: corpus/reply (the captured topology
 * replies of tests/unit/topology/ and script answers). */
#include "fuzz.h"

#include "apply.h"
#include "cluster.h"
#include "topology.h"

#include <stdlib.h>
#include <string.h>

static struct lb_topology *topology;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    topology = calloc(1, sizeof(*topology));
    if (!topology)
        fuzz_die("the topology", "out of memory");
    return 0;
}

/* Every slot names a node the reply listed, or none. */
static void check(const struct lb_topology *t)
{
    for (size_t s = 0; s < LB_SLOTS; s++)
        if (t->slots[s] < -1 || t->slots[s] >= (int32_t)t->nnodes)
            abort();
}

static void parse(const redisReply *r)
{
    lb_topology_from_shards(topology, r, 0);
    check(topology);
    lb_topology_from_shards(topology, r, 1); /* tls-port, hostname */
    check(topology);
    lb_topology_from_slots(topology, r);
    check(topology);
    struct lb_apply_answer answer;
    if (lb_apply_parse(r, &answer) != LB_APPLY_UNKNOWN) {
        if (answer.key)
            fuzz_touch(answer.key, strlen(answer.key));
        const char *first, *second;
        for (size_t i = 0; lb_apply_pair(&answer, i, &first, &second) == 0; i++) {
            fuzz_touch(first, strlen(first));
            fuzz_touch(second, strlen(second));
        }
        int64_t offset;
        int conflict;
        for (size_t i = 0; lb_apply_duplicate(&answer, i, &first, &offset, &conflict) == 0; i++)
            fuzz_touch(first, strlen(first));
    }
    if (r->type == REDIS_REPLY_ERROR)
        lb_redis_classify(r->str);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    redisReader *reader = lb_reply_reader_new();
    void *reply;
    if (!reader)
        return 0;
    if (redisReaderFeed(reader, (const char *)data, size) == REDIS_OK)
        while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
            parse(reply);
            freeReplyObject(reply);
        }
    redisReaderFree(reader);
    return 0;
}
