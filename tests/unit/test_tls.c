/* TLS to Redis (redis.tls): the cluster client against a real redis-server
 * with a TLS port, certificates from test_pki. Each failure must come as one
 * message naming the node and the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"
#include "redis_server.h"
#include "test_pki.h"
#include "tls.h"

static const char *pki;

static int setup(void **state)
{
    (void)state;
    pki = test_pki_make();
    /* the default: a write to a node that hung up must not kill us */
    signal(SIGPIPE, SIG_DFL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    test_pki_remove();
    return 0;
}

static char *path(const char *name)
{
    static char buf[4][300];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", pki, name);
    return p;
}

/* A TLS context from options; fails the test if the files do not load. */
static struct lb_tls *tls_of(const struct lb_tls_options *o)
{
    char err[400];
    struct lb_tls *t = lb_tls_new(o, err, sizeof(err));
    if (!t)
        fail_msg("lb_tls_new: %s", err);
    return t;
}

static struct lb_cluster *client(int port, struct lb_tls *tls)
{
    struct lb_host seed = {.host = (char *)"127.0.0.1", .port = port};
    struct lb_cluster_options o = {.seeds = &seed,
                                   .nseeds = 1,
                                   .tls = tls,
                                   .connect_timeout_ms = 2000,
                                   .command_timeout_ms = 3000,
                                   .wait_replicas = 0};
    struct lb_cluster *cl = lb_cluster_new(&o);
    assert_non_null(cl);
    lb_tls_free(tls); /* the client holds its own reference */
    return cl;
}

/* A client that trusts the test CA and verifies, without a certificate. */
static struct lb_cluster *trusting(int port)
{
    return client(port, tls_of(&(struct lb_tls_options){.ca_file = path("ca.crt"), .verify = 1}));
}

static redisReply *command(struct lb_cluster *cl, int argc, const char **argv, const size_t *len)
{
    return lb_cluster_command(cl, 0, argc, argv, len);
}

/* The same, which must succeed. */
static redisReply *command_ok(struct lb_cluster *cl, int argc, const char **argv, const size_t *len)
{
    redisReply *r = command(cl, argc, argv, len);
    if (!r)
        fail_msg("%s failed: %s", argv[0], lb_cluster_error(cl));
    return r;
}

/* The refresh fails, and its message names the node and contains 'why'. */
static void expect_refused(struct lb_cluster *cl, int port, const char *why)
{
    char node[64];
    snprintf(node, sizeof(node), "127.0.0.1:%d", port);
    assert_int_equal(lb_cluster_refresh(cl), -1);
    const char *msg = lb_cluster_error(cl);
    if (!strstr(msg, node) || !strstr(msg, why))
        fail_msg("expected an error naming %s with '%s', got: %s", node, why, msg);
    assert_null(strchr(msg, '\n'));
}

static struct redis_server *server(const char *cert, const char *auth_clients)
{
    struct redis_server_tls tls = {.dir = pki, .cert = cert, .auth_clients = auth_clients};
    return redis_server_start_tls(1, &tls);
}

/* A value of 'len' bytes SET and read back through the client: writes and
 * reads of many TLS records each. */
static void set_get(struct lb_cluster *cl, size_t len)
{
    char *value = malloc(len);
    const char *key = "{t}big";
    assert_non_null(value);
    for (size_t i = 0; i < len; i++)
        value[i] = (char)('a' + i % 23);
    const char *set[] = {"SET", key, value};
    size_t setlen[] = {3, strlen(key), len};
    redisReply *r = command_ok(cl, 3, set, setlen);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    const char *get[] = {"GET", key};
    size_t getlen[] = {3, strlen(key)};
    r = command_ok(cl, 2, get, getlen);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, len);
    assert_memory_equal(r->str, value, len);
    freeReplyObject(r);
    free(value);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct redis_server *s = server("server", "no");
    struct lb_cluster *cl = trusting(redis_server_tls_port(s));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    /* the slot map names the node by its TLS port */
    char expect[64];
    snprintf(expect, sizeof(expect), "127.0.0.1:%d", redis_server_tls_port(s));
    assert_non_null(lb_cluster_slot_owner(cl, 0));
    assert_string_equal(lb_cluster_slot_owner(cl, 0), expect);
    set_get(cl, 3 << 20); /* on the connection the refresh opened (blocking handshake) */
    /* the node closes it: the next command notices (a peek at the idle
     * connection sees its end), reconnects without blocking and does the
     * handshake in the I/O loop */
    freeReplyObject(redis_server_command(s, "CLIENT KILL TYPE normal"));
    set_get(cl, 3 << 20);
    assert_int_equal(lb_cluster_stats(cl)->connection_errors, 1);
    /* the connection is kept between commands: a peek at an idle TLS
     * connection (SSL_peek) finds nothing and reconnects nothing */
    const char *ping[] = {"PING"};
    size_t pinglen[] = {4};
    for (int i = 0; i < 20; i++) {
        redisReply *r = command_ok(cl, 1, ping, pinglen);
        assert_string_equal(r->str, "PONG");
        freeReplyObject(r);
    }
    assert_int_equal(lb_cluster_stats(cl)->connection_errors, 1);
    lb_cluster_free(cl);
    redis_server_stop(s);
}

/* A node that announces a hostname is verified against it once the slot
 * map says so: the seed (an IP) passes on the IP SAN of a certificate that
 * names no host, the next connection to the same node checks "localhost"
 * and is refused. */
static void test_announced_hostname_is_checked(void **state)
{
    (void)state;
    struct redis_server_tls tls = {
        .dir = pki, .cert = "iponly", .auth_clients = "no", .announce_hostname = "localhost"};
    struct redis_server *s = redis_server_start_tls(1, &tls);
    struct lb_cluster *cl = trusting(redis_server_tls_port(s));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    freeReplyObject(redis_server_command(s, "CLIENT KILL TYPE normal"));
    const char *ping[] = {"PING"};
    size_t pinglen[] = {4};
    assert_null(command(cl, 1, ping, pinglen));
    char node[64];
    snprintf(node, sizeof(node), "127.0.0.1:%d", redis_server_tls_port(s));
    const char *msg = lb_cluster_error(cl);
    if (!strstr(msg, node) || !strstr(msg, "certificate verify failed: hostname mismatch"))
        fail_msg("expected a hostname mismatch on %s, got: %s", node, msg);
    lb_cluster_free(cl);
    redis_server_stop(s);
}

static void test_certificate_refused(void **state)
{
    (void)state;
    struct redis_server *s = server("server", "no");
    int port = redis_server_tls_port(s);
    /* a CA that signed nothing of the server's */
    struct lb_cluster *cl = client(
        port, tls_of(&(struct lb_tls_options){.ca_file = path("other-ca.crt"), .verify = 1}));
    expect_refused(cl, port,
                   "certificate verify failed: self-signed certificate in certificate chain");
    lb_cluster_free(cl);
    /* verify: false accepts it (tests only) */
    cl = client(port, tls_of(&(struct lb_tls_options){.ca_file = path("other-ca.crt")}));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    lb_cluster_free(cl);
    redis_server_stop(s);

    s = server("expired", "no");
    port = redis_server_tls_port(s);
    cl = trusting(port);
    expect_refused(cl, port, "certificate verify failed: certificate has expired");
    lb_cluster_free(cl);
    redis_server_stop(s);
}

static void test_name_checked(void **state)
{
    (void)state;
    /* a certificate for another name: the node's IP is not in it */
    struct redis_server *s = server("elsewhere", "no");
    int port = redis_server_tls_port(s);
    struct lb_cluster *cl = trusting(port);
    expect_refused(cl, port, "certificate verify failed: IP address mismatch");
    lb_cluster_free(cl);
    /* with server_name, every node is checked against that name */
    cl = client(port, tls_of(&(struct lb_tls_options){.ca_file = path("ca.crt"),
                                                      .server_name = "redis.elsewhere.test",
                                                      .verify = 1}));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    set_get(cl, 100);
    lb_cluster_free(cl);
    cl = client(port, tls_of(&(struct lb_tls_options){
                          .ca_file = path("ca.crt"), .server_name = "other.test", .verify = 1}));
    expect_refused(cl, port, "certificate verify failed: hostname mismatch");
    lb_cluster_free(cl);
    redis_server_stop(s);
}

static void test_wrong_kind_of_port(void **state)
{
    (void)state;
    struct redis_server *s = server("server", "no");
    /* TLS to the plain port */
    struct lb_cluster *cl = trusting(redis_server_port(s));
    expect_refused(cl, redis_server_port(s), "TLS handshake with Redis");
    lb_cluster_free(cl);
    /* plain text to the TLS port */
    cl = client(redis_server_tls_port(s), NULL);
    expect_refused(cl, redis_server_tls_port(s), "(a TLS port? see redis.tls)");
    lb_cluster_free(cl);
    redis_server_stop(s);
}

static void test_mutual(void **state)
{
    (void)state;
    struct redis_server *s = server("server", "yes");
    int port = redis_server_tls_port(s);
    struct lb_cluster *cl = trusting(port);
    /* TLS 1.3: the client's handshake ends before the server checks its
     * certificate; the refusal (an alert, or a reset) comes at the first read */
    expect_refused(cl, port, "redis.tls.cert_file");
    lb_cluster_free(cl);
    cl = client(port, tls_of(&(struct lb_tls_options){.ca_file = path("ca.crt"),
                                                      .cert_file = path("client.crt"),
                                                      .key_file = path("client.key"),
                                                      .verify = 1}));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    set_get(cl, 1 << 20);
    lb_cluster_free(cl);
    redis_server_stop(s);

    s = server("server", "optional");
    cl = trusting(redis_server_tls_port(s));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    set_get(cl, 100);
    lb_cluster_free(cl);
    redis_server_stop(s);
}

/* A node killed while the client writes megabytes to it: the request fails
 * with an error naming the node, and the client goes on. The node is
 * stopped first, so that the socket fills and the write is still under way
 * when it dies. (Its reset gives ECONNRESET, not EPIPE: test_no_sigpipe is
 * the one that would die of SIGPIPE.) */
static void test_node_gone_mid_write(void **state)
{
    (void)state;
    struct redis_server *s = server("server", "no");
    struct lb_cluster *cl = trusting(redis_server_tls_port(s));
    assert_int_equal(lb_cluster_refresh(cl), 0);
    set_get(cl, 100);
    size_t len = 32 << 20;
    char *bytes = malloc(len + 64);
    assert_non_null(bytes);
    int head = snprintf(bytes, 64, "*3\r\n$3\r\nSET\r\n$6\r\n{t}big\r\n$%zu\r\n", len);
    memset(bytes + head, 'x', len);
    memcpy(bytes + head + len, "\r\n", 2);
    struct lb_request req = {
        .slot = 0, .writes = 1, .ncommands = 1, .bytes = bytes, .len = (size_t)head + len + 2};
    redis_server_pause(s, 1);
    lb_cluster_start(cl, &req, 1); /* writes what the socket takes, then stops */
    redis_server_stop(s);          /* SIGKILL: the rest meets a reset connection */
    assert_int_equal(lb_cluster_finish(cl), 1);
    assert_false(req.ok);
    assert_non_null(strstr(req.error, "127.0.0.1:"));
    free(bytes);
    lb_cluster_free(cl);
}

/* The same at the lowest level, deterministic: the peer is gone before the
 * ClientHello is written (a stream socket whose other end is closed). */
static void test_no_sigpipe(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[1]);
    struct lb_tls *tls = tls_of(&(struct lb_tls_options){.ca_file = path("ca.crt"), .verify = 1});
    lb_tls_conn *conn = lb_tls_wrap(tls, sv[0], "127.0.0.1");
    assert_non_null(conn);
    char why[200] = "";
    short want = 0;
    assert_int_equal(lb_tls_handshake(conn, &want, why, sizeof(why)), LB_TLS_FAILED);
    assert_string_equal(why, "Broken pipe");
    lb_tls_conn_free(conn);
    lb_tls_free(tls);
    close(sv[0]);
}

static void test_files_refused(void **state)
{
    (void)state;
    char err[400];
    assert_null(lb_tls_new(&(struct lb_tls_options){.ca_file = "/nonexistent/ca.crt", .verify = 1},
                           err, sizeof(err)));
    assert_non_null(strstr(err, "ca_file /nonexistent/ca.crt: "));
    /* a key that is not the certificate's */
    assert_null(lb_tls_new(&(struct lb_tls_options){.ca_file = path("ca.crt"),
                                                    .cert_file = path("client.crt"),
                                                    .key_file = path("server.key"),
                                                    .verify = 1},
                           err, sizeof(err)));
    assert_non_null(strstr(err, "key_file "));
    assert_non_null(strstr(err, "server.key: key values mismatch"));
    /* a certificate file that is a key */
    assert_null(lb_tls_new(&(struct lb_tls_options){.cert_file = path("client.key"),
                                                    .key_file = path("client.key"),
                                                    .verify = 1},
                           err, sizeof(err)));
    assert_non_null(strstr(err, "cert_file "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_certificate_refused),
        cmocka_unit_test(test_name_checked),
        cmocka_unit_test(test_wrong_kind_of_port),
        cmocka_unit_test(test_mutual),
        cmocka_unit_test(test_node_gone_mid_write),
        cmocka_unit_test(test_no_sigpipe),
        cmocka_unit_test(test_files_refused),
        cmocka_unit_test(test_announced_hostname_is_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
