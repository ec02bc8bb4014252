/* Topology replies parsed without a socket: CLUSTER SHARDS and CLUSTER
 * SLOTS as a real Redis 7.0 cluster (3 masters, 1 replica each) answered
 * them, the same cluster with a master just failed, and the shapes a reply
 * must not have. The captured replies are in tests/unit/topology/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "topology.h"

/* Parses RESP bytes into one reply, as the client's reader does. */
static redisReply *parse(const char *bytes, size_t len)
{
    redisReader *reader = redisReaderCreate();
    void *reply = NULL;
    assert_non_null(reader);
    assert_int_equal(redisReaderFeed(reader, bytes, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(reader, &reply), REDIS_OK);
    assert_non_null(reply);
    redisReaderFree(reader);
    return reply;
}

static redisReply *captured(const char *name)
{
    char path[1024], bytes[16384];
    const char *root = getenv("LB_SOURCE_DIR");
    snprintf(path, sizeof(path), "%s/tests/unit/topology/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    size_t n = fread(bytes, 1, sizeof(bytes), f);
    fclose(f);
    assert_true(n > 0 && n < sizeof(bytes));
    return parse(bytes, n);
}

static redisReply *literal(const char *resp)
{
    return parse(resp, strlen(resp));
}

static int port_of(const struct lb_topology *t, int32_t index)
{
    assert_true(index >= 0 && (size_t)index < t->nnodes);
    return t->nodes[index].port;
}

/* The three masters of the captured cluster own 0-5460, 5461-10922 and
 * 10923-16383; each has one replica three ports up. */
static void check_three_masters(const struct lb_topology *t, int third_master_up)
{
    assert_int_equal(t->nnodes, 6); /* replicas are named too: they can serve the map */
    assert_int_equal(port_of(t, t->slots[0]), 27100);
    assert_int_equal(port_of(t, t->slots[5460]), 27100);
    assert_int_equal(port_of(t, t->slots[5461]), 27101);
    assert_int_equal(port_of(t, t->slots[10922]), 27101);
    if (third_master_up) {
        assert_int_equal(port_of(t, t->slots[10923]), 27102);
        assert_int_equal(port_of(t, t->slots[16383]), 27102);
    } else {
        assert_int_equal(t->slots[10923], -1);
        assert_int_equal(t->slots[16383], -1);
    }
    for (size_t i = 0; i < t->nnodes; i++) {
        assert_string_equal(t->nodes[i].host, "127.0.0.1");
        int master = t->nodes[i].port < 27103;
        assert_int_equal(t->nodes[i].replicas, master && (third_master_up || i != 2) ? 1 : 0);
    }
}

/* The same cluster read both ways gives the same topology. */
static void shards_and_slots_of_a_real_cluster(void **state)
{
    (void)state;
    struct lb_topology t = {0};
    redisReply *r = captured("shards-3-masters-1-replica-each.resp");
    assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_OK);
    check_three_masters(&t, 1);
    freeReplyObject(r);
    r = captured("slots-3-masters-1-replica-each.resp");
    assert_int_equal(lb_topology_from_slots(&t, r), LB_TOPOLOGY_OK);
    check_three_masters(&t, 1);
    freeReplyObject(r);
    lb_topology_free(&t);
}

/* A TLS-only cluster (port 0, tls-port, tls-cluster yes, announcing the
 * hostname localhost) as ops/services.sh starts it with REDIS_TLS=1: SHARDS
 * lists "tls-port" and no "port". A TLS client finds every master on its
 * TLS port, with the hostname to verify; a plain one finds nobody. SLOTS,
 * asked over TLS, already answers with the TLS ports. */
static void a_tls_only_cluster(void **state)
{
    (void)state;
    struct lb_topology t = {0};
    redisReply *r = captured("shards-tls-only.resp");
    assert_int_equal(lb_topology_from_shards(&t, r, 1), LB_TOPOLOGY_OK);
    assert_int_equal(t.nnodes, 6);
    assert_int_equal(port_of(&t, t.slots[0]), 18480);
    assert_int_equal(port_of(&t, t.slots[5461]), 18481);
    assert_int_equal(port_of(&t, t.slots[16383]), 18482);
    for (size_t i = 0; i < t.nnodes; i++) {
        assert_string_equal(t.nodes[i].host, "127.0.0.1");
        assert_string_equal(t.nodes[i].hostname, "localhost");
        assert_int_equal(t.nodes[i].replicas, t.nodes[i].port < 18483 ? 1 : 0);
    }
    assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_OK);
    assert_int_equal(t.nnodes, 0);
    for (size_t s = 0; s < LB_SLOTS; s++)
        assert_int_equal(t.slots[s], -1);
    freeReplyObject(r);
    r = captured("slots-tls-only.resp");
    assert_int_equal(lb_topology_from_slots(&t, r), LB_TOPOLOGY_OK);
    assert_int_equal(port_of(&t, t.slots[0]), 18480);
    assert_int_equal(port_of(&t, t.slots[16383]), 18482);
    freeReplyObject(r);
    lb_topology_free(&t);
}

/* Its master SIGKILLed, before the replica was promoted: the shard's slots
 * have nobody to write to, and its replica still counts for nothing. */
static void a_failed_master_leaves_its_slots_unowned(void **state)
{
    (void)state;
    struct lb_topology t = {0};
    redisReply *r = captured("shards-a-master-failed.resp");
    assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_OK);
    assert_int_equal(port_of(&t, 2), 27102); /* still named, in the reply's order */
    check_three_masters(&t, 0);
    freeReplyObject(r);
    /* parsing again into the same topology replaces what it held */
    r = captured("shards-3-masters-1-replica-each.resp");
    assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_OK);
    check_three_masters(&t, 1);
    freeReplyObject(r);
    lb_topology_free(&t);
}

/* A node that does not know its address says "?" or nothing: the node
 * asked (host NULL). Slot numbers as strings (some 7.0 builds). A node
 * listed with only a tls-port is left out. */
static void unknown_addresses_string_slots_and_tls_only_nodes(void **state)
{
    (void)state;
    struct lb_topology t = {0};
    redisReply *r = literal("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n$1\r\n0\r\n$5\r\n16383\r\n"
                            "$5\r\nnodes\r\n*3\r\n"
                            "*10\r\n$2\r\nid\r\n$1\r\nm\r\n$4\r\nport\r\n:7000\r\n"
                            "$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                            "$6\r\nhealth\r\n$6\r\nonline\r\n"
                            "*10\r\n$2\r\nid\r\n$1\r\nt\r\n$8\r\ntls-port\r\n:7443\r\n"
                            "$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
                            "$6\r\nhealth\r\n$6\r\nonline\r\n"
                            "*10\r\n$2\r\nid\r\n$1\r\nr\r\n$4\r\nport\r\n$4\r\n7001\r\n"
                            "$2\r\nip\r\n$3\r\n::1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
                            "$6\r\nhealth\r\n$7\r\nloading\r\n");
    assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_OK);
    assert_int_equal(t.nnodes, 2);
    assert_null(t.nodes[0].host);
    assert_int_equal(t.nodes[0].port, 7000);
    assert_int_equal(t.nodes[0].replicas, 0); /* the loading one is not healthy yet */
    assert_int_equal(t.nodes[0].unsure, 1);   /* but unsure: its master may know better */
    assert_string_equal(t.nodes[1].host, "::1");
    assert_int_equal(t.nodes[1].port, 7001);
    for (size_t s = 0; s < 16384; s++)
        assert_int_equal(t.slots[s], 0);
    freeReplyObject(r);
    assert_int_equal(lb_topology_standalone(&t, 6379, 2), LB_TOPOLOGY_OK);
    assert_int_equal(t.nnodes, 1);
    assert_null(t.nodes[0].host);
    assert_int_equal(t.nodes[0].replicas, 2);
    assert_int_equal(t.slots[16383], 0);
    lb_topology_free(&t);
}

/* A replica Redis 7.0 calls "loading" (the offset it gossiped is 0) is
 * "unsure", not healthy, whatever its master's offset: in sync and not yet
 * said so (a new cluster, a replica that has just synced), syncing, or
 * never synced (its master then keeps offset 0 however much is written);
 * the cluster client asks the master which. */
static void a_loading_replica_is_unsure(void **state)
{
    (void)state;
    for (int written = 0; written < 2; written++) {
        struct lb_topology t = {0};
        char text[1024];
        snprintf(text, sizeof(text),
                 "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"
                 "$5\r\nnodes\r\n*2\r\n"
                 "*10\r\n$4\r\nport\r\n:7000\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                 "$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:%d\r\n"
                 "$6\r\nhealth\r\n$6\r\nonline\r\n"
                 "*10\r\n$4\r\nport\r\n:7001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                 "$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:0\r\n"
                 "$6\r\nhealth\r\n$7\r\nloading\r\n",
                 written ? 50 : 0);
        redisReply *r = literal(text);
        assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_OK);
        assert_int_equal(t.nnodes, 2);
        assert_int_equal(t.nodes[0].port, 7000);
        assert_int_equal(t.nodes[0].replicas, 0);
        assert_int_equal(t.nodes[0].unsure, 1);
        freeReplyObject(r);
        lb_topology_free(&t);
    }
}

static void replies_of_the_wrong_shape_are_refused(void **state)
{
    (void)state;
    static const char *const shards[] = {
        "+OK\r\n",
        "*1\r\n:1\r\n",
        "*1\r\n*2\r\n$5\r\nslots\r\n*1\r\n:0\r\n",                            /* no nodes */
        "*1\r\n*4\r\n$5\r\nslots\r\n*1\r\n:0\r\n$5\r\nnodes\r\n*0\r\n",       /* odd slots */
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:5\r\n:4\r\n$5\r\nnodes\r\n*0\r\n", /* backwards */
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16384\r\n$5\r\nnodes\r\n*0\r\n",
        "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n$2\r\n1x\r\n:3\r\n$5\r\nnodes\r\n*0\r\n",
    };
    static const char *const slots[] = {
        "$3\r\nabc\r\n",
        "*1\r\n*2\r\n:0\r\n:1\r\n",                            /* no master */
        "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$1\r\nh\r\n",           /* no port */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n",     /* port 0 */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:7000\r\n",       /* host not a string */
        "*1\r\n*3\r\n:-1\r\n:1\r\n*2\r\n$1\r\nh\r\n:7000\r\n", /* negative slot */
    };
    struct lb_topology t = {0};
    for (size_t i = 0; i < sizeof(shards) / sizeof(shards[0]); i++) {
        redisReply *r = literal(shards[i]);
        assert_int_equal(lb_topology_from_shards(&t, r, 0), LB_TOPOLOGY_MALFORMED);
        freeReplyObject(r);
    }
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
        redisReply *r = literal(slots[i]);
        assert_int_equal(lb_topology_from_slots(&t, r), LB_TOPOLOGY_MALFORMED);
        freeReplyObject(r);
    }
    lb_topology_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shards_and_slots_of_a_real_cluster),
        cmocka_unit_test(a_failed_master_leaves_its_slots_unowned),
        cmocka_unit_test(a_tls_only_cluster),
        cmocka_unit_test(unknown_addresses_string_slots_and_tls_only_nodes),
        cmocka_unit_test(a_loading_replica_is_unsure),
        cmocka_unit_test(replies_of_the_wrong_shape_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
