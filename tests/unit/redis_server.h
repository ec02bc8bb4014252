/* A real redis-server for the tests labelled "redis": started by the test
 * on a free loopback port, in a scratch directory, and stopped by its PID
 * (also when the test process dies: the server gets SIGKILL with it).
 *
 * The apply script is loaded, and its SHA1 checked against the build's.
 */
#ifndef REDIS_SERVER_H
#define REDIS_SERVER_H

#include <hiredis/hiredis.h>
#include <stddef.h>

struct redis_server;

/* Starts a server; with 'cluster', a single-node cluster owning every slot
 * (what lb_cluster needs). Fails the test when it cannot. */
struct redis_server *redis_server_start(int cluster);
void redis_server_stop(struct redis_server *server);

/* The same with TLS on a second port (redis_server_tls_port) beside the
 * plain one (the test's own connection): certificates from test_pki. */
struct redis_server_tls {
    const char *dir;               /* test_pki_make's directory */
    const char *cert;              /* the server's certificate: "server", "expired", "elsewhere" */
    const char *auth_clients;      /* tls-auth-clients: "yes", "no" or "optional" */
    const char *announce_hostname; /* cluster-announce-hostname; NULL: none */
};
struct redis_server *redis_server_start_tls(int cluster, const struct redis_server_tls *tls);
int redis_server_tls_port(const struct redis_server *server);

/* 'n' masters of one cluster, the slots split evenly in order (two:
 * 0-8191 on servers[0], 8192-16383 on servers[1]). Each is stopped with
 * redis_server_stop. */
void redis_server_start_masters(struct redis_server **servers, int n);

/* Stops (SIGSTOP) or resumes (SIGCONT) the server: a node that stalls. */
void redis_server_pause(struct redis_server *server, int paused);

int redis_server_port(const struct redis_server *server);

/* A command on the test's own connection; fails the test on an I/O error.
 * The reply is the caller's (freeReplyObject). */
redisReply *redis_server_command(struct redis_server *server, const char *format, ...);

/* Sends request bytes as encoded (one or more RESP arrays) and returns the
 * last of their 'replies' replies (the others are read and dropped). */
redisReply *redis_server_send(struct redis_server *server, const char *bytes, size_t len,
                              size_t replies);

/* A configuration of this server (one node, no WAIT, 500 ms replies, schema
 * id 1) followed by 'rest' (more YAML: profiles, ...; "" for none). Fails
 * the test when it does not load. The caller frees it (lb_config_free). */
struct lb_config;
struct lb_config *redis_server_config(const struct redis_server *server, const char *rest);

#endif
