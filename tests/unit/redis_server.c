/* A real redis-server for a test; see redis_server.h. */
#include "redis_server.h"
#include "apply.h"
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct redis_server {
    pid_t pid;
    int port, bus_port, tls_port;
    char dir[256];
    redisContext *c;
    const struct redis_server_tls *tls; /* the caller's, during the start */
};

static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static pid_t spawn(const struct redis_server *s, int cluster)
{
    char port[16], bus[16], log[300], tls_port[16], cert[300], key[300], ca[300];
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(bus, sizeof(bus), "%d", s->bus_port);
    if (s->tls) {
        snprintf(tls_port, sizeof(tls_port), "%d", s->tls_port);
        snprintf(cert, sizeof(cert), "%s/%s.crt", s->tls->dir, s->tls->cert);
        snprintf(key, sizeof(key), "%s/%s.key", s->tls->dir, s->tls->cert);
        snprintf(ca, sizeof(ca), "%s/ca.crt", s->tls->dir);
    }
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test, whatever ends it */
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    const char *argv[32] = {"redis-server", "--port", port,    "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no",     "--dir", s->dir};
    size_t n = 11;
    if (cluster) {
        const char *more[] = {"--cluster-enabled", "yes",
                              "--cluster-port", /* port + 10000 may be past 65535 */
                              bus};
        memcpy(&argv[n], more, sizeof(more));
        n += sizeof(more) / sizeof(more[0]);
    }
    if (s->tls) { /* the plain port stays, for the test's own connection */
        const char *more[] = {"--tls-port", tls_port, "--tls-cert-file", cert, "--tls-key-file",
                              key, "--tls-ca-cert-file", ca, "--tls-auth-clients",
                              s->tls->auth_clients,
                              /* the cluster announces its TLS port (and its
                               * bus speaks TLS) */
                              "--tls-cluster", cluster ? "yes" : "no"};
        memcpy(&argv[n], more, sizeof(more));
        n += sizeof(more) / sizeof(more[0]);
        if (cluster && s->tls->announce_hostname) {
            argv[n++] = "--cluster-announce-hostname";
            argv[n++] = s->tls->announce_hostname;
        }
    }
    argv[n] = NULL;
    execvp(argv[0], (char *const *)argv);
    dprintf(2, "cannot run redis-server: %s (install Debian's redis-server)\n", strerror(errno));
    _exit(127);
}

/* Waits for the server to answer PING; returns 0, or -1 if it exited or
 * did not answer within 10 s. */
static int connect_to(struct redis_server *s)
{
    for (int i = 0; i < 200; i++) {
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return -1;
        }
        struct timeval tv = {1, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            int up = r && r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
            if (up) {
                s->c = c;
                return 0;
            }
        }
        redisFree(c);
        sleep_ms(50);
    }
    return -1;
}

static void kill_server(struct redis_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGCONT); /* a paused one too */
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

static void add_slots(struct redis_server *s, int first, int last)
{
    redisReply *r = redis_server_command(s, "CLUSTER ADDSLOTSRANGE %d %d", first, last);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("CLUSTER ADDSLOTSRANGE: %s", r->str);
    freeReplyObject(r);
}

/* Waits until 's' says the cluster is ok and its slot map has 'ranges'
 * entries (every master known). */
static void wait_cluster_ok(struct redis_server *s, size_t ranges)
{
    for (int i = 0; i < 400; i++) {
        redisReply *r = redis_server_command(s, "CLUSTER INFO");
        int ok = r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        freeReplyObject(r);
        r = redis_server_command(s, "CLUSTER SLOTS");
        ok = ok && r->type == REDIS_REPLY_ARRAY && r->elements == ranges;
        freeReplyObject(r);
        if (ok)
            return;
        sleep_ms(50);
    }
    fail_msg("the cluster on port %d never reached cluster_state:ok", s->port);
}

static struct redis_server *start_one(int cluster, const struct redis_server_tls *tls);

struct redis_server *redis_server_start(int cluster)
{
    return redis_server_start_tls(cluster, NULL);
}

struct redis_server *redis_server_start_tls(int cluster, const struct redis_server_tls *tls)
{
    struct redis_server *s = start_one(cluster, tls);
    if (cluster) {
        add_slots(s, 0, 16383);
        wait_cluster_ok(s, 1);
    }
    return s;
}

void redis_server_start_masters(struct redis_server **servers, int n)
{
    for (int i = 0; i < n; i++) {
        servers[i] = start_one(1, NULL);
        add_slots(servers[i], i * 16384 / n, (i + 1) * 16384 / n - 1);
    }
    for (int i = 1; i < n; i++) {
        redisReply *r = redis_server_command(servers[0], "CLUSTER MEET 127.0.0.1 %d %d",
                                             servers[i]->port, servers[i]->bus_port);
        if (r->type == REDIS_REPLY_ERROR)
            fail_msg("CLUSTER MEET: %s", r->str);
        freeReplyObject(r);
    }
    for (int i = 0; i < n; i++)
        wait_cluster_ok(servers[i], (size_t)n);
}

void redis_server_pause(struct redis_server *s, int paused)
{
    if (s->pid > 0)
        kill(s->pid, paused ? SIGSTOP : SIGCONT);
}

static struct redis_server *start_one(int cluster, const struct redis_server_tls *tls)
{
    struct redis_server *s = calloc(1, sizeof(*s));
    const char *tmp = getenv("TMPDIR");
    assert_non_null(s);
    snprintf(s->dir, sizeof(s->dir), "%s/lb-redis-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->dir))
        fail_msg("mkdtemp %s: %s", s->dir, strerror(errno));
    /* the free port can be taken between the probe and the bind: try again */
    for (int attempt = 0; attempt < 5 && !s->c; attempt++) {
        s->port = free_port();
        s->bus_port = free_port();
        s->tls_port = tls ? free_port() : 0;
        s->tls = tls;
        s->pid = spawn(s, cluster);
        if (s->pid < 0)
            fail_msg("fork: %s", strerror(errno));
        if (connect_to(s) != 0)
            kill_server(s);
    }
    if (!s->c)
        fail_msg("redis-server did not start (see %s/redis.log)", s->dir);
    const char *script = lb_apply_script();
    redisReply *r = redis_server_command(s, "SCRIPT LOAD %b", script, strlen(script));
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, lb_apply_script_sha()) != 0)
        fail_msg("SCRIPT LOAD answered %s, the build says %s",
                 r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_ERROR ? r->str : "?",
                 lb_apply_script_sha());
    freeReplyObject(r);
    return s;
}

void redis_server_stop(struct redis_server *s)
{
    if (!s)
        return;
    redisFree(s->c);
    kill_server(s);
    char path[300];
    snprintf(path, sizeof(path), "%s/redis.log", s->dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/nodes.conf", s->dir);
    unlink(path);
    rmdir(s->dir);
    free(s);
}

int redis_server_port(const struct redis_server *s)
{
    return s->port;
}

int redis_server_tls_port(const struct redis_server *s)
{
    return s->tls_port;
}

redisReply *redis_server_command(struct redis_server *s, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(s->c, format, ap);
    va_end(ap);
    if (!r)
        fail_msg("redis %s: %s", format, s->c->errstr);
    return r;
}

redisReply *redis_server_send(struct redis_server *s, const char *bytes, size_t len, size_t replies)
{
    void *r = NULL;
    if (redisAppendFormattedCommand(s->c, bytes, len) != REDIS_OK)
        fail_msg("redis: %s", s->c->errstr);
    for (size_t i = 0; i < replies; i++) {
        if (r)
            freeReplyObject(r);
        r = NULL;
        if (redisGetReply(s->c, &r) != REDIS_OK || !r)
            fail_msg("redis: %s", s->c->errstr);
    }
    return r;
}

struct lb_config *redis_server_config(const struct redis_server *server, const char *rest)
{
    char text[4096], err[512];
    struct lb_config *config = NULL;
    int n = snprintf(text, sizeof(text),
                     "kafka: {brokers: b, topics: [t]}\n"
                     "input: {schemas: {1: s.avsc}}\n"
                     "redis: {nodes: [127.0.0.1:%d], wait_replicas: 0, command_timeout: 500ms}\n"
                     "%s",
                     redis_server_port(server), rest);
    assert_true(n > 0 && (size_t)n < sizeof(text));
    if (lb_config_load_string("test.yaml", text, (size_t)n, &config, err, sizeof(err)) != 0)
        fail_msg("the test's configuration: %s", err);
    return config;
}
