/* Redis Cluster client; see cluster.h for the contract.
 *
 * Shape of one lb_cluster_exec call:
 *
 *   round:  for each pending request, pick its node (the ASK target, else the
 *           slot's master), connect if needed, append its bytes to the node's
 *           output buffer and its index to the node's queue.
 *   I/O:    poll() every node with work: write what is unsent, read what
 *           arrived, feed hiredis' reader, and match replies to the queue in
 *           order (Redis answers a connection's commands in order).
 *   settle: requests that met MOVED or ASK go to the next round (MOVED also
 *           updates the slot map and schedules a full refresh); everything
 *           else is final, success or failure.
 *
 * A connection that fails, or that is still owed replies at the deadline, is
 * closed: after a lost reply we can no longer tell which reply answers which
 * command. Its requests fail with the reason; since every write we send is
 * idempotent, the caller can simply send them again.
 */
#include "cluster.h"
#include "arena.h"
#include "clock.h"
#include "log.h"
#include "resp.h"
#include "slot.h"
#include "tls.h"
#include "topology.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS  6
#define WAIT_MARK   UINT32_MAX       /* a node queue entry for the WAIT that ends a round */
#define SCRIPT_MARK (UINT32_MAX - 1) /* one for a SCRIPT LOAD (new connection, or NOSCRIPT) */
#define AUTH_MARK   (UINT32_MAX - 2) /* one for the AUTH of a new connection */

/* What a reply may take before the node counts as broken (a protocol
 * error): hiredis 0.14 allocates an array as soon as it reads its header, so
 * a forged or corrupted "*2147483647" would make it calloc 16 GiB. No reply
 * to what the projector, replay or the tools send comes near either bound:
 * whole keys are read in chunks. */
#define REPLY_ELEMENTS_MAX 1048576
#define REPLY_UNPARSED_MAX ((size_t)64 << 20)

struct node {
    char *host;
    char *hostname; /* what the cluster announces as its hostname (TLS verifies it); NULL */
    int port;
    char name[300]; /* host:port, for messages and lookups */
    int fd;         /* -1: not connected */
    lb_tls_conn *tls;
    int handshaking; /* TLS: the handshake is under way */
    short want;      /* the poll event the connection waits for to go on */
    int heard;       /* the connection has received something */
    redisReader *reader;
    struct lb_buf out;
    size_t sent;
    uint32_t *queue; /* request indices awaiting replies, in send order */
    size_t qhead, qlen, qcap;
    uint32_t replies;          /* replies already matched to queue[qhead] */
    int64_t deadline;          /* when the node is given up on if it stays silent */
    int replicas;              /* healthy replicas of this master, at the last refresh */
    int unsure;                /* and replicas only the master can vouch for (topology.h) */
    int wait_needed;           /* replicas the last WAIT queued here must reach */
    int wrote;                 /* a transaction was queued in this round */
    int load_script;           /* SCRIPT LOAD before the next request queued here */
    int connecting;            /* a non-blocking connect is under way */
    int in_topology;           /* named by the last slot map read (or new since) */
    uint64_t failed_in;        /* exec call in which connecting failed (0: never) */
    uint64_t script_failed_in; /* exec call in which SCRIPT LOAD failed here */
    char script_error[200];    /* why, for the requests that needed it */
    enum lb_redis_error script_class;
    char failure[200];                     /* why, for the other requests of that call */
    int64_t readonly_since, readonly_last; /* the first and last READONLY of a streak */
    uint64_t readonly_map;                 /* map_changes at its first */
};

/* Why a request goes out again in the next round of the same call. */
enum redirect {
    REDIRECT_NONE = 0,
    REDIRECT_MOVED,
    REDIRECT_ASK,
    REDIRECT_NOSCRIPT, /* the node's script cache lacks our script: load it, resend */
};

/* Per-request state of one lb_cluster_exec call. */
struct run {
    int32_t node;
    uint8_t round;  /* the round it was last sent in */
    uint8_t asking; /* ASKING precedes the request in this round */
    uint8_t done;
    uint8_t queued;     /* sent in the first round (a deferred one is not yet) */
    uint8_t replicated; /* a WAIT after it was answered in full (pipelined passes) */
    uint8_t redirect;
    uint8_t eclass; /* enum lb_redis_error, with 'error' */
    int32_t redirect_node;
    char error[160];
};

struct lb_cluster {
    struct node **nodes; /* individually allocated: pointers stay valid as nodes are added */
    size_t nnodes, capnodes;
    int32_t slots[LB_SLOTS]; /* node index, -1 when unknown */
    uint64_t map_changes;    /* bumped whenever 'slots' changes */
    uint64_t map_at_start;   /* map_changes when the call in progress started */
    size_t nseeds;
    char *user, *password;
    struct lb_tls *tls; /* NULL: plain TCP */
    int64_t connect_timeout_ms, command_timeout_ms;
    int standalone;
    int no_shards; /* the cluster does not know CLUSTER SHARDS: use CLUSTER SLOTS */
    int need_refresh;
    int64_t mapped_ms; /* when the map was last read, or found with a replica per master */
    int wait_replicas; /* -1: one when the master has a healthy replica */
    int64_t wait_timeout_ms;
    int64_t readonly_patience_ms;
    int64_t call_deadline; /* 0, or when the blocking call under way must end */
    char *script;          /* loaded where a node answers NOSCRIPT */
    char script_sha[41];
    size_t last_good; /* node that answered the last refresh */
    struct run *runs;
    size_t capruns;
    struct pollfd *pfds; /* one per node, for run_io */
    int32_t *pfd_node;
    size_t cappfds;
    uint64_t exec_calls;
    struct lb_request *requests; /* of the call in progress */
    size_t nrequests;
    int started;       /* lb_cluster_start called, lb_cluster_finish not yet */
    int in_call;       /* inside start .. the end of finish: node indices are in use */
    int oom;           /* the call in progress could not even start */
    size_t round_sent; /* requests queued by lb_cluster_start */
    int round;         /* of the call in progress */
    struct lb_cluster_stats stats;
    struct lb_ratelimit abort_said, refresh_said, unwaited_said;
    int no_refresh;               /* the call in progress must not block on a slot map refresh */
    enum lb_redis_error errclass; /* of errstr, for lb_cluster_command */
    char errstr[640];
    char ioerr[200]; /* why the last read or write failed */
    char readbuf[65536];
};

static void set_error(struct lb_cluster *cl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct lb_cluster *cl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cl->errstr, sizeof(cl->errstr), fmt, ap);
    va_end(ap);
}

/* ---- nodes ------------------------------------------------------------------ */

static int32_t find_node(struct lb_cluster *cl, const char *host, int port)
{
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return (int32_t)i;
    return -1;
}

static int32_t add_node(struct lb_cluster *cl, const char *host, int port)
{
    int32_t found = find_node(cl, host, port);
    if (found >= 0)
        return found;
    if (cl->nnodes == cl->capnodes) {
        size_t cap = cl->capnodes ? cl->capnodes * 2 : 8;
        struct node **nodes = realloc(cl->nodes, cap * sizeof(*nodes));
        if (!nodes)
            return -1;
        cl->nodes = nodes;
        cl->capnodes = cap;
    }
    struct node *n = calloc(1, sizeof(*n));
    if (!n || !(n->host = strdup(host))) {
        free(n);
        return -1;
    }
    cl->nodes[cl->nnodes] = n;
    n->port = port;
    n->fd = -1;
    n->in_topology = 1; /* until a slot map says otherwise */
    snprintf(n->name, sizeof(n->name), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    return (int32_t)cl->nnodes++;
}

static void node_close(struct lb_cluster *cl, struct node *n)
{
    (void)cl;
    lb_tls_conn_free(n->tls);
    n->tls = NULL;
    n->handshaking = 0;
    n->want = 0;
    n->heard = 0;
    if (n->fd >= 0)
        close(n->fd);
    n->fd = -1;
    if (n->reader)
        redisReaderFree(n->reader);
    n->reader = NULL;
    n->out.len = 0;
    n->sent = 0;
    n->qhead = n->qlen = 0;
    n->replies = 0;
    n->load_script = 0; /* a new connection meets NOSCRIPT again if it must */
    n->connecting = 0;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - lb_monotonic_ms();
        if (left <= 0)
            return 0;
        struct pollfd pfd = {.fd = fd, .events = events};
        int rc = poll(&pfd, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        return rc;
    }
}

static void tune_socket(int fd)
{
    int one = 1, idle = 30, interval = 10, count = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

static int node_call(struct lb_cluster *cl, struct node *n, const char *bytes, size_t len,
                     redisReply **reply);
static int start_tls(struct lb_cluster *cl, struct node *n);
static int handshake_step(struct lb_cluster *cl, struct node *n);
static int encode_argv(struct lb_buf *buf, int argc, const char **argv, const size_t *argvlen);

/* The deadline of a blocking step that may take 'ms': sooner when the
 * whole call has a budget (a slot map refresh blocks the caller at most
 * command_timeout in all, however many nodes are silent). */
static int64_t budget(const struct lb_cluster *cl, int64_t ms)
{
    int64_t deadline = lb_monotonic_ms() + ms;
    return cl->call_deadline && cl->call_deadline < deadline ? cl->call_deadline : deadline;
}

/* hiredis' reader with REPLY_ELEMENTS_MAX: its own functions, but an
 * array header above the bound is refused before anything is allocated
 * (the reader then fails, and reader_trouble says why). */
static redisReplyObjectFunctions limited_functions;
static void *(*plain_create_array)(const redisReadTask *, int);
static _Thread_local long long refused_elements;

static void *create_array_limited(const redisReadTask *task, int elements)
{
    if (elements > REPLY_ELEMENTS_MAX) {
        refused_elements = elements;
        return NULL;
    }
    return plain_create_array(task, elements);
}

redisReader *lb_reply_reader_new(void)
{
    redisReader *r = redisReaderCreate();
    if (!r)
        return NULL;
    if (!plain_create_array) { /* hiredis' own table, from the first reader */
        limited_functions = *r->fn;
        plain_create_array = limited_functions.createArray;
        limited_functions.createArray = create_array_limited;
    }
    r->fn = &limited_functions;
    return r;
}

/* Why the node's reader cannot go on, for the message that closes it. */
static void reader_trouble(const struct node *n, char *why, size_t len)
{
    if (refused_elements)
        snprintf(why, len, "a reply announces %lld elements (at most %d are accepted)",
                 refused_elements, REPLY_ELEMENTS_MAX);
    else if (n->reader && n->reader->len - n->reader->pos > REPLY_UNPARSED_MAX)
        snprintf(why, len, "more than %zu MiB of a reply unparsed", REPLY_UNPARSED_MAX >> 20);
    else if (n->reader && n->reader->err)
        snprintf(why, len, "%s", n->reader->errstr);
    else
        snprintf(why, len, "unreadable reply");
    refused_elements = 0;
}

/* Bytes the reader holds that no complete reply has taken yet. */
static size_t unparsed(const struct node *n)
{
    return n->reader->len - n->reader->pos;
}

/* Opens a connection within the connect timeout (and the call's budget,
 * cl->call_deadline), then authenticates; the script is loaded when a node
 * answers NOSCRIPT. Returns 0 or -1 with cl->errstr set. */
static int node_connect(struct lb_cluster *cl, struct node *n)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    char port[16];
    int64_t deadline = budget(cl, cl->connect_timeout_ms);
    int err = 0;

    if (n->fd >= 0)
        return 0;
    snprintf(port, sizeof(port), "%d", n->port);
    int rc = getaddrinfo(n->host, port, &hints, &res);
    if (rc != 0) {
        set_error(cl, "cannot resolve %s: %s", n->name, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
            err = errno;
            close(fd);
            continue;
        }
        socklen_t errlen = sizeof(err);
        if (wait_fd(fd, POLLOUT, deadline) <= 0) {
            err = ETIMEDOUT;
            close(fd);
            continue;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errlen) != 0 || err != 0) {
            close(fd);
            continue;
        }
        n->fd = fd;
        break;
    }
    freeaddrinfo(res);
    if (n->fd < 0) {
        cl->stats.connection_errors++;
        set_error(cl, "cannot connect to Redis %s: %s", n->name,
                  strerror(err ? err : ECONNREFUSED));
        return -1;
    }
    tune_socket(n->fd);
    n->reader = lb_reply_reader_new();
    if (!n->reader || start_tls(cl, n) != 0) {
        node_close(cl, n);
        set_error(cl, "out of memory");
        return -1;
    }
    while (n->handshaking) {
        int step = handshake_step(cl, n);
        if (step == 0 && wait_fd(n->fd, n->want, deadline) <= 0) {
            cl->stats.timeouts++;
            set_error(cl, "TLS handshake with Redis %s did not finish in time", n->name);
            step = -1;
        }
        if (step < 0) {
            node_close(cl, n);
            return -1;
        }
    }
    if (cl->password) {
        const char *argv[3] = {"AUTH", cl->user ? cl->user : cl->password, cl->password};
        int argc = cl->user ? 3 : 2;
        char cmd[1024], *p = lb_resp_header(cmd, '*', (uint64_t)argc);
        redisReply *reply = NULL;
        for (int i = 0; i < argc; i++) {
            size_t len = strlen(argv[i]);
            if (len > 400) {
                node_close(cl, n);
                set_error(cl, "Redis user or password longer than 400 bytes");
                return -1;
            }
            p = lb_resp_bulk(p, argv[i], len);
        }
        if (node_call(cl, n, cmd, (size_t)(p - cmd), &reply) != 0)
            return -1;
        if (reply->type == REDIS_REPLY_ERROR) {
            /* The server's message never contains the password. */
            set_error(cl, "AUTH on %s failed: %s", n->name, reply->str);
            freeReplyObject(reply);
            node_close(cl, n);
            return -1;
        }
        freeReplyObject(reply);
    }
    LB_DEBUG("redis", "connected to %s", n->name);
    return 0;
}

static int queue_push(struct node *n, uint32_t request);
static int queue_script_load(struct lb_cluster *cl, struct node *n);

/* Starts a non-blocking connect to 'n' and queues AUTH ahead of the
 * requests that follow: they travel in one pipeline, and the
 * I/O loop finishes the connect, so opening a connection never blocks the
 * caller. Their replies are checked like any other (on_reply). Returns 0,
 * or -1 with cl->errstr set when not even the connect could start. */
static int node_open(struct lb_cluster *cl, struct node *n)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    char port[16];
    int err = ECONNREFUSED;

    snprintf(port, sizeof(port), "%d", n->port);
    int rc = getaddrinfo(n->host, port, &hints, &res);
    if (rc != 0) {
        set_error(cl, "cannot resolve %s: %s", n->name, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai && n->fd < 0; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            n->connecting = 0;
        } else if (errno == EINPROGRESS) {
            n->connecting = 1;
        } else {
            err = errno;
            close(fd);
            continue;
        }
        n->fd = fd;
    }
    freeaddrinfo(res);
    if (n->fd < 0) {
        cl->stats.connection_errors++;
        set_error(cl, "cannot connect to Redis %s: %s", n->name, strerror(err));
        return -1;
    }
    if (!(n->reader = lb_reply_reader_new()))
        goto oom;
    if (!n->connecting) {
        tune_socket(n->fd);
        if (start_tls(cl, n) != 0)
            goto oom;
    }
    if (cl->password) {
        const char *argv[3] = {"AUTH", cl->user ? cl->user : cl->password, cl->password};
        size_t argvlen[3] = {4, strlen(argv[1]), strlen(argv[2])};
        int argc = cl->user ? 3 : 2;
        if (argc == 2)
            argvlen[1] = strlen(argv[1]);
        if (encode_argv(&n->out, argc, argv, argvlen) != 0 || queue_push(n, AUTH_MARK) != 0)
            goto oom;
    }
    n->deadline = lb_monotonic_ms() + cl->connect_timeout_ms + cl->command_timeout_ms;
    return 0;
oom:
    node_close(cl, n);
    set_error(cl, "out of memory");
    return -1;
}

/* A plain read(2) or send(2) that failed: -2 when it must wait for 'want',
 * else -1 with cl->ioerr saying why. */
static ssize_t syscall_failed(struct lb_cluster *cl, struct node *n, short want)
{
    int err = errno;
    n->want = want;
    if (err == EAGAIN || err == EINTR)
        return -2;
    snprintf(cl->ioerr, sizeof(cl->ioerr), "%s", strerror(err));
    return -1;
}

/* Feeds what the connection has into the reader. Returns bytes read, 0 on
 * EOF, -1 on error (cl->ioerr says why), -2 when it must wait for n->want,
 * -3 on a protocol error (reader_trouble says why). */
static ssize_t node_read(struct lb_cluster *cl, struct node *n)
{
    ssize_t got;
    if (n->tls) {
        got = lb_tls_read(n->tls, cl->readbuf, sizeof(cl->readbuf), &n->want, cl->ioerr,
                          sizeof(cl->ioerr));
    } else if ((got = read(n->fd, cl->readbuf, sizeof(cl->readbuf))) < 0) {
        return syscall_failed(cl, n, POLLIN);
    }
    if (got == 0)
        snprintf(cl->ioerr, sizeof(cl->ioerr), "closed by the server");
    n->heard |= got > 0;
    if (got > 0 && (redisReaderFeed(n->reader, cl->readbuf, (size_t)got) != REDIS_OK ||
                    unparsed(n) > REPLY_UNPARSED_MAX))
        return -3;
    return got;
}

/* Sends what the connection takes of 'len' bytes. Returns bytes sent, -2
 * when it must wait for n->want, -1 on error (cl->ioerr says why). Never
 * SIGPIPE: a node that hung up must not kill the tool. */
static ssize_t node_send(struct lb_cluster *cl, struct node *n, const char *bytes, size_t len)
{
    if (n->tls)
        return lb_tls_write(n->tls, bytes, len, &n->want, cl->ioerr, sizeof(cl->ioerr));
    ssize_t w = send(n->fd, bytes, len, MSG_NOSIGNAL);
    return w >= 0 ? w : syscall_failed(cl, n, POLLOUT);
}

/* TLS on the connected socket of 'n': the handshake is driven by whoever
 * waits on the connection next (node_connect, or the I/O loop). */
static int start_tls(struct lb_cluster *cl, struct node *n)
{
    if (!cl->tls)
        return 0;
    if (!(n->tls = lb_tls_wrap(cl->tls, n->fd, n->hostname ? n->hostname : n->host))) {
        set_error(cl, "out of memory");
        return -1;
    }
    n->handshaking = 1;
    n->want = POLLOUT;
    return 0;
}

/* One step of the TLS handshake of 'n': 1 done, 0 to be continued when
 * n->want is ready, -1 failed (cl->errstr says why). */
static int handshake_step(struct lb_cluster *cl, struct node *n)
{
    int rc = lb_tls_handshake(n->tls, &n->want, cl->ioerr, sizeof(cl->ioerr));
    if (rc == LB_TLS_AGAIN)
        return 0;
    if (rc == LB_TLS_FAILED) {
        cl->stats.connection_errors++;
        set_error(cl, "TLS handshake with Redis %s failed: %s", n->name, cl->ioerr);
        return -1;
    }
    n->handshaking = 0;
    n->want = 0;
    return 1;
}

/* A blocking round trip on an idle connection, for AUTH and CLUSTER SLOTS.
 * On failure closes the connection and returns -1 with cl->errstr set. */
static int node_call(struct lb_cluster *cl, struct node *n, const char *bytes, size_t len,
                     redisReply **reply)
{
    int64_t start = lb_monotonic_ms(), deadline = budget(cl, cl->command_timeout_ms);
    size_t sent = 0;
    void *r = NULL;

    while (sent < len) {
        ssize_t w = node_send(cl, n, bytes + sent, len - sent);
        if (w > 0) {
            sent += (size_t)w;
        } else if (w == -2) {
            if (wait_fd(n->fd, n->want, deadline) <= 0)
                goto timeout;
        } else {
            goto broken;
        }
    }
    for (;;) {
        if (redisReaderGetReply(n->reader, &r) != REDIS_OK)
            goto protocol;
        if (r && unparsed(n)) { /* more than the one reply asked for */
            freeReplyObject(r);
            cl->stats.connection_errors++;
            set_error(cl, "Redis %s sent a reply nobody asked for; closing the connection",
                      n->name);
            node_close(cl, n);
            return -1;
        }
        if (r) {
            *reply = r;
            return 0;
        }
        ssize_t got = node_read(cl, n);
        if (got == -2) {
            if (wait_fd(n->fd, n->want, deadline) <= 0)
                goto timeout;
        } else if (got == -3) {
            goto protocol;
        } else if (got <= 0) {
            goto broken;
        }
    }
protocol : {
    char why[200];
    reader_trouble(n, why, sizeof(why));
    cl->stats.connection_errors++;
    set_error(cl, "protocol error from Redis %s: %s; closing the connection", n->name, why);
    node_close(cl, n);
    return -1;
}
timeout:
    cl->stats.timeouts++;
    set_error(cl, "Redis %s did not answer within %lld ms", n->name, (long long)(deadline - start));
    node_close(cl, n);
    return -1;
broken:
    cl->stats.connection_errors++;
    /* a TLS port closes on the first plain-text command without a word */
    set_error(cl, "connection to Redis %s lost: %s%s", n->name, cl->ioerr,
              n->heard   ? ""
              : !cl->tls ? " before it said anything (a TLS port? see redis.tls)"
                         : " before it said anything (does it require a client certificate? see "
                           "redis.tls.cert_file)");
    node_close(cl, n);
    return -1;
}

/* ---- the slot map --------------------------------------------------------------- */

/* ROLE of a standalone master: ["master", offset, [[ip, port, offset], ...]]. */
static int standalone_replicas(struct lb_cluster *cl, struct node *n)
{
    static const char cmd[] = "*1\r\n$4\r\nROLE\r\n";
    redisReply *reply = NULL;
    int count = 0;
    if (node_call(cl, n, cmd, sizeof(cmd) - 1, &reply) != 0)
        return 0;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements >= 3 &&
        reply->element[2]->type == REDIS_REPLY_ARRAY)
        count = (int)reply->element[2]->elements;
    freeReplyObject(reply);
    return count;
}

/* Makes 't', as node 'asked' described it, the current topology. Nodes it
 * does not name (and that are not seeds) are forgotten at the next
 * opportunity (forget_departed). Returns -1 when out of memory. */
static int install(struct lb_cluster *cl, const struct lb_topology *t, size_t asked)
{
    int32_t *index = malloc((t->nnodes ? t->nnodes : 1) * sizeof(*index));
    if (!index)
        return -1;
    for (size_t k = 0; k < t->nnodes; k++) {
        const char *host = t->nodes[k].host ? t->nodes[k].host : cl->nodes[asked]->host;
        if ((index[k] = add_node(cl, host, t->nodes[k].port)) < 0) {
            free(index);
            return -1;
        }
        struct node *n = cl->nodes[index[k]];
        const char *hostname = t->nodes[k].hostname;
        if (hostname && (!n->hostname || strcmp(n->hostname, hostname) != 0)) {
            /* verified at the next connection, as the cluster now names it */
            free(n->hostname);
            if (!(n->hostname = strdup(hostname))) {
                free(index);
                return -1;
            }
        }
    }
    for (size_t s = 0; s < LB_SLOTS; s++)
        cl->slots[s] = t->slots[s] >= 0 ? index[t->slots[s]] : -1;
    cl->map_changes++;
    for (size_t i = 0; i < cl->nnodes; i++) {
        cl->nodes[i]->replicas = cl->nodes[i]->unsure = 0;
        cl->nodes[i]->in_topology = i < cl->nseeds;
    }
    for (size_t k = 0; k < t->nnodes; k++) {
        cl->nodes[index[k]]->in_topology = 1;
        cl->nodes[index[k]]->replicas = t->nodes[k].replicas;
        cl->nodes[index[k]]->unsure = t->nodes[k].unsure;
    }
    free(index);
    return 0;
}

/* Drops nodes that left the topology: a long-running client meets new node
 * addresses after every restart of a pod or node, and would otherwise keep
 * every one it ever saw. Only between calls (no request refers to a node
 * index then); seeds stay. */
static void forget_departed(struct lb_cluster *cl)
{
    size_t kept = 0, departed = 0;
    int32_t *moved_to;
    for (size_t i = cl->nseeds; i < cl->nnodes; i++)
        departed += !cl->nodes[i]->in_topology;
    if (!departed || cl->in_call)
        return;
    if (!(moved_to = malloc(cl->nnodes * sizeof(*moved_to))))
        return; /* try again next time */
    for (size_t i = 0; i < cl->nnodes; i++) {
        struct node *n = cl->nodes[i];
        if (n->in_topology || n->qlen || i < cl->nseeds) {
            moved_to[i] = (int32_t)kept;
            cl->nodes[kept++] = n;
            continue;
        }
        moved_to[i] = -1;
        LB_DEBUG("redis", "forgetting %s: no longer in the cluster", n->name);
        node_close(cl, n);
        free(n->host);
        free(n->hostname);
        free(n->queue);
        lb_buf_free(&n->out);
        free(n);
    }
    for (size_t s = 0; s < LB_SLOTS; s++)
        if (cl->slots[s] >= 0)
            cl->slots[s] = moved_to[cl->slots[s]];
    cl->last_good = moved_to[cl->last_good] >= 0 ? (size_t)moved_to[cl->last_good] : 0;
    cl->nnodes = kept;
    free(moved_to);
}

/* Asks node 'i' for the topology. Returns 0 when it was installed. */
static int refresh_from(struct lb_cluster *cl, size_t i, struct lb_topology *t, char *first_error,
                        size_t errlen)
{
    static const char shards[] = "*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n";
    static const char slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    struct node *n = cl->nodes[i];
    redisReply *reply = NULL;

    if (node_connect(cl, n) != 0 ||
        node_call(cl, n, cl->no_shards ? slots : shards,
                  cl->no_shards ? sizeof(slots) - 1 : sizeof(shards) - 1, &reply) != 0) {
        if (!first_error[0])
            snprintf(first_error, errlen, "%s", cl->errstr);
        return -1;
    }
    enum lb_topology_result rc;
    int standalone = 0;
    if (reply->type == REDIS_REPLY_ERROR && strstr(reply->str, "cluster support disabled")) {
        freeReplyObject(reply);
        reply = NULL;
        rc = lb_topology_standalone(t, n->port, standalone_replicas(cl, n));
        standalone = 1;
    } else if (reply->type == REDIS_REPLY_ERROR && !cl->no_shards &&
               (strstr(reply->str, "unknown subcommand") ||
                strstr(reply->str, "Unknown subcommand"))) {
        /* Redis before 7.0: CLUSTER SLOTS it is, from now on */
        freeReplyObject(reply);
        cl->no_shards = 1;
        return refresh_from(cl, i, t, first_error, errlen);
    } else if (reply->type == REDIS_REPLY_ERROR) {
        rc = LB_TOPOLOGY_MALFORMED;
    } else {
        rc = cl->no_shards ? lb_topology_from_slots(t, reply)
                           : lb_topology_from_shards(t, reply, cl->tls != NULL);
    }
    if (rc == LB_TOPOLOGY_OK && install(cl, t, i) != 0)
        rc = LB_TOPOLOGY_NOMEM;
    if (rc == LB_TOPOLOGY_NOMEM)
        snprintf(first_error, errlen, "out of memory reading the topology");
    else if (rc != LB_TOPOLOGY_OK && !first_error[0])
        snprintf(first_error, errlen, "unexpected topology reply from %s%s%.200s", n->name,
                 reply->type == REDIS_REPLY_ERROR ? ": " : "",
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "");
    if (reply)
        freeReplyObject(reply);
    if (rc != LB_TOPOLOGY_OK)
        return -1;
    if (standalone && !cl->standalone)
        LB_INFO("redis",
                "%s is a standalone Redis (cluster support disabled); every slot goes to it",
                n->name);
    cl->standalone = standalone;
    return 0;
}

/* With wait_replicas auto, a master with replicas the map cannot vouch
 * for ("unsure": loading, offset 0) is asked WAIT 0 0, which answers at
 * once how many replicas are online there and have acknowledged this
 * connection's writes: those of a new cluster, or one that has just synced,
 * in sync; not one still syncing, nor one that never synced, so that such a
 * master is written without WAIT as documented instead of stalling on a
 * WAIT nobody can answer. A master busy with requests, or that does not
 * answer, is taken to have none (read again within REPLICA_RECHECK_MS). */
static void ask_masters(struct lb_cluster *cl)
{
    static const char cmd[] = "*3\r\n$4\r\nWAIT\r\n$1\r\n0\r\n$1\r\n0\r\n";
    if (cl->wait_replicas >= 0)
        return; /* a fixed count: nobody asked */
    for (size_t i = 0; i < cl->nnodes; i++) {
        struct node *n = cl->nodes[i];
        redisReply *reply = NULL;
        if (!n->unsure || n->qlen)
            continue;
        int late = lb_monotonic_ms() >= cl->call_deadline;
        if (late || node_connect(cl, n) != 0 ||
            node_call(cl, n, cmd, sizeof(cmd) - 1, &reply) != 0) {
            LB_DEBUG("redis", "%s: not asked about its replicas (%s): none counted", n->name,
                     late ? "no time left" : cl->errstr);
            cl->errstr[0] = '\0'; /* the map was read: no error to report */
            continue;
        }
        if (reply->type == REDIS_REPLY_INTEGER && reply->integer > 0)
            n->replicas += reply->integer < n->unsure ? (int)reply->integer : n->unsure;
        LB_DEBUG("redis", "%s: %d replica(s) online by its own count, of %d the map calls loading",
                 n->name, n->replicas, n->unsure);
        freeReplyObject(reply);
    }
}

int lb_cluster_refresh(struct lb_cluster *cl)
{
    struct lb_topology *t = calloc(1, sizeof(*t));
    char first_error[sizeof(cl->errstr)] = "";

    if (!t) {
        set_error(cl, "out of memory");
        return -1;
    }
    cl->stats.refreshes++;
    /* The node that answered last time first, then every known node:
     * seeds, masters and replicas alike, within one budget. */
    cl->call_deadline = lb_monotonic_ms() + cl->command_timeout_ms;
    int rc = -1;
    for (size_t k = 0; k < cl->nnodes && lb_monotonic_ms() < cl->call_deadline; k++) {
        size_t i = (cl->last_good + k) % cl->nnodes;
        if (cl->nodes[i]->qlen)
            continue; /* busy inside an exec round; not used here */
        if (refresh_from(cl, i, t, first_error, sizeof(first_error)) == 0) {
            ask_masters(cl);
            cl->need_refresh = 0;
            cl->mapped_ms = lb_monotonic_ms();
            cl->last_good = i;
            rc = 0;
            break;
        }
    }
    cl->call_deadline = 0;
    lb_topology_free(t);
    free(t);
    if (rc == 0) {
        forget_departed(cl);
        return 0;
    }
    /* the next refresh starts elsewhere: a silent node does not eat every budget */
    cl->last_good = (cl->last_good + 1) % cl->nnodes;
    cl->errclass = LB_REDIS_RETRY;
    set_error(cl, "no Redis node could serve the slot map%s%s",
              first_error[0] ? "; first error: " : "", first_error);
    return -1;
}

/* ---- executing requests ------------------------------------------------------------ */

static int queue_push(struct node *n, uint32_t request)
{
    if (n->qhead + n->qlen == n->qcap) {
        if (n->qhead > 0) {
            memmove(n->queue, n->queue + n->qhead, n->qlen * sizeof(*n->queue));
            n->qhead = 0;
        } else {
            size_t cap = n->qcap ? n->qcap * 2 : 64;
            uint32_t *q = realloc(n->queue, cap * sizeof(*q));
            if (!q)
                return -1;
            n->queue = q;
            n->qcap = cap;
        }
    }
    n->queue[n->qhead + n->qlen++] = request;
    return 0;
}

static void fail_run(struct run *run, enum lb_redis_error class, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_run(struct run *run, enum lb_redis_error class, const char *fmt, ...)
{
    va_list ap;
    if (run->error[0])
        return; /* keep the first reason */
    run->eclass = (uint8_t) class;
    va_start(ap, fmt);
    vsnprintf(run->error, sizeof(run->error), fmt, ap);
    va_end(ap);
}

/* Parses "MOVED 3999 127.0.0.1:6381" / "ASK ..." into a node index. */
static int32_t redirect_target(struct lb_cluster *cl, const char *msg)
{
    const char *addr = strchr(msg, ' ');
    addr = addr ? strchr(addr + 1, ' ') : NULL;
    if (!addr)
        return -1;
    addr++;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return -1;
    char host[256];
    size_t hlen = (size_t)(colon - addr);
    if (addr[0] == '[' && colon[-1] == ']') {
        addr++;
        hlen -= 2;
    }
    if (hlen >= sizeof(host))
        return -1;
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    int port = atoi(colon + 1);
    if (port <= 0 || port > 65535)
        return -1;
    return add_node(cl, host, port);
}

/* Every error code the client treats other than "an operator must act". */
static const struct {
    const char *code;
    enum lb_redis_action action;
} error_codes[] = {
    {"MOVED", LB_REDIS_MOVED},          {"ASK", LB_REDIS_ASK},
    {"NOSCRIPT", LB_REDIS_LOAD_SCRIPT}, {"EXECABORT", LB_REDIS_FOLLOWS},
    {"TRYAGAIN", LB_REDIS_LATER},       {"LOADING", LB_REDIS_LATER},
    {"BUSY", LB_REDIS_LATER},           {"MASTERDOWN", LB_REDIS_LATER},
    {"NOREPLICAS", LB_REDIS_LATER},     {"CLUSTERDOWN", LB_REDIS_LATER_REMAP},
    {"READONLY", LB_REDIS_READONLY},
};

enum lb_redis_action lb_redis_action(const char *msg)
{
    size_t len = strcspn(msg, " ");
    for (size_t i = 0; i < sizeof(error_codes) / sizeof(error_codes[0]); i++)
        if (strlen(error_codes[i].code) == len && memcmp(msg, error_codes[i].code, len) == 0)
            return error_codes[i].action;
    return LB_REDIS_OPERATOR;
}

enum lb_redis_error lb_redis_classify(const char *msg)
{
    switch (lb_redis_action(msg)) {
    case LB_REDIS_MOVED:
    case LB_REDIS_ASK:
    case LB_REDIS_LATER:
    case LB_REDIS_LATER_REMAP:
    case LB_REDIS_READONLY:
        return LB_REDIS_RETRY;
    case LB_REDIS_LOAD_SCRIPT: /* met where no script can be loaded */
    case LB_REDIS_FOLLOWS:     /* met without the error it follows */
    case LB_REDIS_OPERATOR:
        break;
    }
    return LB_REDIS_FIX;
}

const char *lb_redis_error_name(enum lb_redis_error class)
{
    switch (class) {
    case LB_REDIS_OK:
        return "ok";
    case LB_REDIS_RETRY:
        return "retry";
    case LB_REDIS_FIX:
        return "fix";
    case LB_REDIS_NOMEM:
        return "out of memory";
    }
    return "?";
}

/* READONLY from 'n': a failover the map has not caught up with, unless the
 * map, read again since the first READONLY of this streak, still names 'n'
 * and the streak has lasted the patience: then it fails the request as an
 * operator's to fix, and returns 1. A write 'n' accepts ends the streak, and
 * so does a pause longer than the patience (the node was left alone: a
 * READONLY after that is a new failover). */
static int readonly_for_good(struct lb_cluster *cl, struct run *run, struct node *n)
{
    int64_t now = lb_monotonic_ms();
    int64_t last = n->readonly_last;
    n->readonly_last = now;
    if (!n->readonly_since || now - last > cl->readonly_patience_ms) {
        n->readonly_since = now;
        n->readonly_map = cl->map_changes;
        return 0;
    }
    if (cl->map_changes == n->readonly_map || now - n->readonly_since < cl->readonly_patience_ms)
        return 0;
    cl->stats.command_errors++;
    fail_run(run, LB_REDIS_FIX,
             "%s answers READONLY for %lld s although the slot map, read again, names it the "
             "master: a replica listed as master, or a read-only master?",
             n->name, (long long)((now - n->readonly_since) / 1000));
    return 1;
}

/* Acts on an error reply met by a request. */
/* Redis 7.0 refuses a command a script calls, by ACL, with "ERR The user
 * executing the script can't run this command or subcommand script: <sha>,
 * on @user_script:<line>." without naming it: the command names quoted on
 * that line of 'script' ("'exists'", "'zmscore' or 'hmget'") go to 'named'.
 * Returns 1 when 'msg' is such a refusal and a name was found. */
static int script_refusal(const char *script, const char *msg, char *named, size_t len)
{
    const char *at = strstr(msg, "@user_script:");
    if (!script || !at || !strstr(msg, "can't run this command"))
        return 0;
    long line = strtol(at + 13, NULL, 10);
    const char *p = script;
    for (long k = 1; k < line && p; k++)
        if ((p = strchr(p, '\n')))
            p++;
    if (line < 1 || !p)
        return 0;
    size_t used = 0, end = strcspn(p, "\n");
    named[0] = '\0';
    for (size_t i = 0; i < end; i++) {
        size_t w = 0;
        if (p[i] != '\'')
            continue;
        while (i + 1 + w < end && p[i + 1 + w] >= 'A' && p[i + 1 + w] <= 'Z')
            w++;
        if (w < 3 || i + 1 + w >= end || p[i + 1 + w] != '\'' || used + w + 8 >= len)
            continue;
        used += (size_t)snprintf(named + used, len - used, "%s'", used ? " or " : "");
        for (size_t c = 0; c < w; c++)
            named[used++] = (char)(p[i + 1 + c] - 'A' + 'a');
        named[used++] = '\'';
        named[used] = '\0';
        i += w + 1;
    }
    return used > 0;
}

static void note_error(struct lb_cluster *cl, struct run *run, struct node *n, const redisReply *r)
{
    const char *msg = r->str;
    enum lb_redis_action action = lb_redis_action(msg);
    switch (action) {
    case LB_REDIS_MOVED:
    case LB_REDIS_ASK: {
        if (run->redirect || run->error[0])
            return;
        int32_t target = redirect_target(cl, msg);
        if (target < 0) {
            fail_run(run, LB_REDIS_RETRY, "unparsable redirection from %s: %.80s", n->name, msg);
            return;
        }
        run->redirect = action == LB_REDIS_MOVED ? REDIRECT_MOVED : REDIRECT_ASK;
        run->redirect_node = target;
        return;
    }
    case LB_REDIS_FOLLOWS:
        if (run->redirect || run->error[0])
            return; /* the consequence of an error already noted */
        break;
    case LB_REDIS_LOAD_SCRIPT:
        if (!cl->script || run->redirect || run->error[0])
            break;
        /* A node that never saw the script (a new or promoted node, a
         * flushed cache): load it on this connection and resend, in order,
         * every request it answered so. Not a failure. */
        if (n->script_failed_in == cl->exec_calls) {
            fail_run(run, n->script_class, "%s: %s", n->name, n->script_error);
            return;
        }
        run->redirect = REDIRECT_NOSCRIPT;
        run->redirect_node = -1; /* resent to the slot's owner, as before */
        n->load_script = 1;
        return;
    case LB_REDIS_READONLY:
        if (readonly_for_good(cl, run, n))
            return;
        cl->need_refresh = 1; /* failed over: read the map again */
        break;
    case LB_REDIS_LATER_REMAP:
        cl->need_refresh = 1; /* failing over, or failed over: read the map again */
        break;
    case LB_REDIS_LATER:
    case LB_REDIS_OPERATOR:
        break;
    }
    enum lb_redis_error class = lb_redis_classify(msg);
    if (class == LB_REDIS_RETRY)
        cl->stats.retry_later++;
    else
        cl->stats.command_errors++;
    char named[64];
    if (script_refusal(cl->script, msg, named, sizeof(named)))
        fail_run(run, LB_REDIS_FIX,
                 "%s: NOPERM this user may not run %s (the apply script calls it)", n->name, named);
    else
        fail_run(run, class, "%s: %.120s", n->name, msg);
}

static uint32_t replies_expected(const struct lb_request *req, const struct run *run)
{
    return run->asking + (req->is_txn ? req->ncommands + 2 : req->ncommands);
}

/* Matches one reply to the request at the head of the node's queue. Takes
 * ownership of 'r'. */
/* The reply to the WAIT that closed this round on 'n': if fewer replicas
 * than needed acknowledged, the round's writes on 'n' are not durable, and
 * the requests fail (to be sent again, WAIT included). */
/* Fails the requests of this round that 'n' answered: their writes are not
 * known to have reached the replicas the round's WAIT asked for. */
static void fail_unreplicated(struct lb_cluster *cl, struct node *n, const char *why)
{
    cl->need_refresh = 1; /* a replica may have gone: its master may now have none */
    for (size_t i = 0; i < cl->nrequests; i++) {
        struct run *run = &cl->runs[i];
        if (run->node >= 0 && cl->nodes[run->node] == n && run->round == cl->round && run->done &&
            !run->redirect && !run->replicated)
            fail_run(run, LB_REDIS_RETRY, "%s", why);
    }
}

static void on_wait_reply(struct lb_cluster *cl, struct node *n, const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= n->wait_needed) {
        /* a later WAIT's shortfall (a pipelined pass) does not undo this one */
        for (size_t i = 0; i < cl->nrequests; i++) {
            struct run *run = &cl->runs[i];
            if (run->node >= 0 && cl->nodes[run->node] == n && run->round == cl->round && run->done)
                run->replicated = 1;
        }
        return;
    }
    char why[480];
    if (r->type == REDIS_REPLY_INTEGER)
        snprintf(why, sizeof(why), "%s: WAIT: %lld of %d replica(s) acknowledged within %lld ms",
                 n->name, r->integer, n->wait_needed, (long long)cl->wait_timeout_ms);
    else
        snprintf(why, sizeof(why), "%s: WAIT failed: %.100s", n->name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    cl->stats.wait_shortfalls++;
    fail_unreplicated(cl, n, why);
}

static void node_abort_as(struct lb_cluster *cl, struct node *n, const char *why,
                          enum lb_redis_error class);

/* The reply to a SCRIPT LOAD queued after NOSCRIPT. If it failed, the
 * requests resent behind it will meet NOSCRIPT again: they fail with this
 * reason instead of looping. */
static void on_script_reply(struct lb_cluster *cl, struct node *n, const redisReply *r)
{
    if (r->type == REDIS_REPLY_STRING &&
        (!cl->script_sha[0] || strcmp(r->str, cl->script_sha) == 0)) {
        cl->stats.script_loads++;
        LB_INFO("redis", "loaded the script into %s (its script cache did not have it)", n->name);
        return;
    }
    snprintf(n->script_error, sizeof(n->script_error), "SCRIPT LOAD failed: %.150s",
             r->type == REDIS_REPLY_ERROR    ? r->str
             : r->type == REDIS_REPLY_STRING ? "the node's SHA1 of the script differs from ours"
                                             : "unexpected reply");
    n->script_failed_in = cl->exec_calls;
    n->script_class = r->type == REDIS_REPLY_ERROR ? lb_redis_classify(r->str) : LB_REDIS_FIX;
    cl->stats.command_errors++;
}

/* A reply of a shape the protocol does not allow where it came: replies on
 * this connection can no longer be paired with requests. Frees 'r', closes
 * the connection; every request on it fails, to be sent again. */
static void node_desync(struct lb_cluster *cl, struct node *n, redisReply *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void node_desync(struct lb_cluster *cl, struct node *n, redisReply *r, const char *fmt, ...)
{
    char what[200], why[sizeof(what) + sizeof(n->name) + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(why, sizeof(why), "%s: %s; closing the connection", n->name, what);
    freeReplyObject(r);
    cl->stats.connection_errors++;
    node_abort_as(cl, n, why, LB_REDIS_RETRY);
}

static void on_reply(struct lb_cluster *cl, struct node *n, redisReply *r)
{
    uint32_t index = n->queue[n->qhead];
    if (index == WAIT_MARK || index == SCRIPT_MARK || index == AUTH_MARK) {
        n->qhead++;
        n->qlen--;
        if (index == WAIT_MARK)
            on_wait_reply(cl, n, r);
        else if (index == SCRIPT_MARK)
            on_script_reply(cl, n, r);
        else if (r->type == REDIS_REPLY_ERROR) {
            /* the server's message never contains the password */
            char why[560];
            enum lb_redis_error class = lb_redis_classify(r->str);
            snprintf(why, sizeof(why), "AUTH on %s failed: %.200s", n->name, r->str);
            freeReplyObject(r);
            node_abort_as(cl, n, why, class);
            return;
        }
        freeReplyObject(r);
        return;
    }
    struct lb_request *req = &cl->requests[index];
    struct run *run = &cl->runs[index];
    uint32_t k = n->replies++;
    uint32_t total = replies_expected(req, run);
    int keep = 0;

    if (run->asking && k == 0) {
        if (r->type == REDIS_REPLY_ERROR)
            note_error(cl, run, n, r);
    } else if (req->is_txn) {
        uint32_t j = k - run->asking;
        if (j <= req->ncommands) { /* MULTI's +OK, then +QUEUED each */
            const char *want = j == 0 ? "OK" : "QUEUED";
            if (r->type == REDIS_REPLY_ERROR)
                note_error(cl, run, n, r);
            else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0) {
                node_desync(cl, n, r, "expected +%s inside MULTI, got a reply of type %d", want,
                            r->type);
                return;
            }
        } else if (r->type == REDIS_REPLY_ARRAY) { /* EXEC */
            if (r->elements != req->ncommands) {
                node_desync(cl, n, r, "EXEC returned %zu replies for %u commands", r->elements,
                            req->ncommands);
                return;
            }
            for (size_t e = 0; e < r->elements; e++)
                if (r->element[e]->type == REDIS_REPLY_ERROR) {
                    cl->stats.command_errors++;
                    fail_run(run, lb_redis_classify(r->element[e]->str),
                             "%s: command %zu of the transaction failed: %.100s", n->name, e + 1,
                             r->element[e]->str);
                }
            if (!run->redirect && !run->error[0]) {
                if (req->reply)
                    freeReplyObject(req->reply);
                req->reply = r;
                keep = 1;
            }
        } else if (r->type == REDIS_REPLY_ERROR) {
            note_error(cl, run, n, r);
        } else {
            fail_run(run, LB_REDIS_RETRY, "%s: the transaction was aborted (EXEC returned nil)",
                     n->name);
        }
    } else {
        if (r->type == REDIS_REPLY_ERROR)
            note_error(cl, run, n, r);
        if (k + 1 == total && !run->redirect) {
            if (req->reply)
                freeReplyObject(req->reply);
            req->reply = r;
            keep = 1;
        }
    }
    if (!keep)
        freeReplyObject(r);
    if (n->replies == total) {
        if (req->writes && !run->error[0] && !run->redirect)
            n->readonly_since = 0; /* it wrote: whatever READONLY was is over */
        run->done = 1;
        n->replies = 0;
        n->qhead++;
        n->qlen--;
    }
}

/* Fails every request still queued on 'n' and closes it. If the round's
 * WAIT had not answered yet, the requests already answered fail too: their
 * writes may not have reached a replica. */
static void node_abort_as(struct lb_cluster *cl, struct node *n, const char *why,
                          enum lb_redis_error class)
{
    for (size_t i = 0; i < n->qlen; i++) {
        uint32_t index = n->queue[n->qhead + i];
        if (index == WAIT_MARK) {
            fail_unreplicated(cl, n, why);
            continue;
        }
        if (index == SCRIPT_MARK || index == AUTH_MARK)
            continue;
        struct run *run = &cl->runs[index];
        run->redirect = REDIRECT_NONE;
        fail_run(run, class, "%s", why);
        run->done = 1;
    }
    lb_log_every(&cl->abort_said, 5000, LB_LOG_WARN, "redis", "%s", why);
    node_close(cl, n);
    cl->need_refresh = 1;
}

static void node_abort(struct lb_cluster *cl, struct node *n, const char *why)
{
    node_abort_as(cl, n, why, LB_REDIS_RETRY);
}

static int grow_pollfds(struct lb_cluster *cl)
{
    if (cl->cappfds >= cl->nnodes)
        return 0;
    struct pollfd *pfds = realloc(cl->pfds, cl->nnodes * sizeof(*pfds));
    if (!pfds)
        return -1;
    cl->pfds = pfds;
    int32_t *which = realloc(cl->pfd_node, cl->nnodes * sizeof(*which));
    if (!which)
        return -1;
    cl->pfd_node = which;
    cl->cappfds = cl->nnodes;
    return 0;
}

/* Writes what is unsent and reads what arrived on one ready node. */
static void node_io(struct lb_cluster *cl, struct node *n, short revents)
{
    char why[400];
    if (n->connecting) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
            return;
        int err = 0;
        socklen_t errlen = sizeof(err);
        if (getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) != 0)
            err = errno;
        if (err) {
            cl->stats.connection_errors++;
            snprintf(why, sizeof(why), "cannot connect to Redis %s: %s", n->name, strerror(err));
            node_abort(cl, n, why);
            return;
        }
        n->connecting = 0;
        tune_socket(n->fd);
        if (start_tls(cl, n) != 0) {
            node_abort(cl, n, cl->errstr);
            return;
        }
    }
    if (n->handshaking) {
        int rc = handshake_step(cl, n);
        if (rc < 0)
            node_abort(cl, n, cl->errstr);
        if (rc <= 0)
            return;
        revents |= POLLOUT | POLLIN; /* whatever waited for the handshake goes now */
    }
    /* TLS: any readiness may be what a stalled write or read waited for
     * (a read can need a write and the other way round), and a record
     * goes at a time: both run until the connection would block */
    if (n->tls ? n->sent < n->out.len : (revents & POLLOUT)) {
        ssize_t w;
        do {
            w = node_send(cl, n, n->out.data + n->sent, n->out.len - n->sent);
            if (w == -1) {
                cl->stats.connection_errors++;
                snprintf(why, sizeof(why), "writing to Redis %.200s failed: %.150s", n->name,
                         cl->ioerr);
                node_abort(cl, n, why);
                return;
            }
            if (w > 0)
                n->sent += (size_t)w;
        } while (n->tls && w > 0 && n->sent < n->out.len);
        if (n->sent == n->out.len)
            n->out.len = n->sent = 0;
    }
    if (!n->tls && !(revents & (POLLIN | POLLERR | POLLHUP)))
        return;
    /* Plain: one read per readiness. TLS: reads until OpenSSL wants more,
     * as poll() cannot see what it has already taken off the socket; each
     * read's replies are matched before the next, so the reader never
     * holds more than one read's worth beyond a reply. */
    for (;;) {
        ssize_t got = node_read(cl, n);
        if (got == -3)
            goto protocol;
        if (got == -2)
            return;
        if (got <= 0) {
            cl->stats.connection_errors++;
            snprintf(why, sizeof(why), "connection to Redis %.200s lost: %.150s", n->name,
                     cl->ioerr);
            node_abort(cl, n, why);
            return;
        }
        /* The timeout counts silence, not the length of a big pipeline. */
        n->deadline = lb_monotonic_ms() + cl->command_timeout_ms;
        void *reply = NULL;
        while (n->qlen) {
            if (redisReaderGetReply(n->reader, &reply) != REDIS_OK)
                goto protocol;
            if (!reply)
                break;
            on_reply(cl, n, reply);
            if (n->fd < 0) /* the reply closed the connection */
                return;
        }
        if (!n->qlen && unparsed(n)) { /* nothing is awaited: a desynchronised node */
            cl->stats.connection_errors++;
            snprintf(why, sizeof(why),
                     "Redis %s sent a reply nobody asked for; closing the connection", n->name);
            node_abort(cl, n, why);
            return;
        }
        if (!n->tls)
            return;
    }
protocol : {
    char trouble[200];
    reader_trouble(n, trouble, sizeof(trouble));
    cl->stats.connection_errors++;
    snprintf(why, sizeof(why), "protocol error from Redis %.200s: %.140s; closing the connection",
             n->name, trouble);
    node_abort(cl, n, why);
}
}

/* Gives up on 'n', silent past its deadline. */
static void node_timeout(struct lb_cluster *cl, struct node *n)
{
    char why[400];
    cl->stats.timeouts++;
    snprintf(why, sizeof(why), "Redis %s did not answer within %lld ms", n->name,
             (long long)cl->command_timeout_ms);
    node_abort(cl, n, why);
}

/* One step of every node's I/O: waits at most 'max_wait_ms' (and never past
 * a node's deadline) for sockets to be ready, serves them, and gives up on
 * nodes silent past their deadline: silent means nothing to read even now
 * (a caller may have left replies unread for a while: a pipelined call
 * waits for the call before it). Returns 1 when no node has anything
 * queued. */
static int io_step(struct lb_cluster *cl, int64_t max_wait_ms)
{
    if (grow_pollfds(cl) != 0) {
        for (size_t i = 0; i < cl->nnodes; i++)
            if (cl->nodes[i]->qlen)
                node_abort(cl, cl->nodes[i], "out of memory");
        return 1;
    }
    nfds_t count = 0;
    int64_t now = lb_monotonic_ms(), wake = now + max_wait_ms;
    for (size_t i = 0; i < cl->nnodes; i++) {
        struct node *n = cl->nodes[i];
        if (!n->qlen)
            continue;
        if (n->deadline < wake)
            wake = n->deadline;
        short events = POLLIN;
        if (n->handshaking)
            events = n->want;
        else if (n->sent < n->out.len || n->connecting || (n->tls && n->want == POLLOUT))
            events |= POLLOUT;
        cl->pfds[count] = (struct pollfd){.fd = n->fd, .events = events};
        cl->pfd_node[count++] = (int32_t)i;
    }
    if (!count)
        return 1;
    int rc = poll(cl->pfds, count, wake > now ? (int)(wake - now) : 0);
    if (rc < 0 && errno != EINTR)
        rc = 0; /* treat like a timeout: the deadlines decide */
    now = lb_monotonic_ms();
    for (nfds_t k = 0; k < count; k++) {
        struct node *n = cl->nodes[cl->pfd_node[k]];
        if (rc > 0 && cl->pfds[k].revents)
            node_io(cl, n, cl->pfds[k].revents);
        else if (rc >= 0 && n->qlen && n->deadline <= now)
            node_timeout(cl, n);
    }
    return 0;
}

/* Drives every node's I/O until all queues are empty. A node that stays
 * silent for the command timeout is given up on. */
static void run_io(struct lb_cluster *cl)
{
    while (!io_step(cl, INT32_MAX))
        ;
}

int lb_cluster_progress(struct lb_cluster *cl, int timeout_ms)
{
    if (!cl->started)
        return 1;
    if (io_step(cl, timeout_ms))
        return 1;
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->qlen)
            return 0;
    return 1;
}

/* Queues SCRIPT LOAD on 'n' ahead of the requests a NOSCRIPT sends again. */
static int queue_script_load(struct lb_cluster *cl, struct node *n)
{
    const char *argv[] = {"SCRIPT", "LOAD", cl->script};
    size_t argvlen[] = {6, 4, strlen(cl->script)};
    size_t mark = n->out.len;
    if (encode_argv(&n->out, 3, argv, argvlen) != 0 || queue_push(n, SCRIPT_MARK) != 0) {
        n->out.len = mark;
        return -1;
    }
    if (n->qlen == 1)
        n->deadline = lb_monotonic_ms() + cl->command_timeout_ms;
    n->load_script = 0;
    return 0;
}

static int32_t target_node(struct lb_cluster *cl, const struct lb_request *req, struct run *run)
{
    if (run->redirect == REDIRECT_ASK) {
        run->asking = 1;
        return run->redirect_node;
    }
    run->asking = 0;
    return cl->slots[req->slot];
}

/* Queues a request on its node. Returns 0, or -1 when it failed at once. */
/* Whether an idle connection has something to read: a reply nobody asked
 * for (a desynchronised or hostile peer), or the end of the stream. */
static int node_went_astray(const struct node *n)
{
    char byte;
    if (unparsed(n) > 0)
        return 1;
    /* TLS: a session ticket is not data; only what a peek at the
     * decrypted stream shows counts */
    return n->tls ? !n->handshaking && lb_tls_went_astray(n->tls)
                  : recv(n->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

static int dispatch(struct lb_cluster *cl, uint32_t index)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    struct lb_request *req = &cl->requests[index];
    struct run *run = &cl->runs[index];
    int32_t node = target_node(cl, req, run);

    run->redirect = REDIRECT_NONE;
    run->done = 0;
    run->queued = 1;
    run->replicated = 0;
    if (node < 0) {
        fail_run(run, LB_REDIS_RETRY, "no Redis master serves slot %u", req->slot);
        cl->need_refresh = 1;
        return -1;
    }
    struct node *n = cl->nodes[node];
    if (n->failed_in == cl->exec_calls) {
        /* one connect attempt per node per call, not one per request */
        fail_run(run, LB_REDIS_RETRY, "%s", n->failure);
        return -1;
    }
    if (n->fd >= 0 && !n->connecting && n->qlen == 0 && node_went_astray(n)) {
        /* what it sent would be taken for the answer to what we send now */
        cl->stats.connection_errors++;
        LB_WARN("redis", "Redis %s sent data nobody asked for, or hung up; reconnecting", n->name);
        node_close(cl, n);
    }
    if (n->fd < 0 && node_open(cl, n) != 0) {
        n->failed_in = cl->exec_calls;
        snprintf(n->failure, sizeof(n->failure), "%.199s", cl->errstr);
        fail_run(run, LB_REDIS_RETRY, "%s", cl->errstr);
        cl->need_refresh = 1;
        return -1;
    }
    if (n->load_script && queue_script_load(cl, n) != 0) {
        fail_run(run, LB_REDIS_NOMEM, "out of memory");
        return -1;
    }
    size_t mark = n->out.len;
    if ((run->asking && lb_buf_append(&n->out, asking, sizeof(asking) - 1) != 0) ||
        lb_buf_append(&n->out, req->bytes, req->len) != 0 || queue_push(n, index) != 0) {
        n->out.len = mark; /* nothing half-queued: replies must match requests */
        fail_run(run, LB_REDIS_NOMEM, "out of memory");
        return -1;
    }
    if (n->qlen == 1) /* the first request of this call on this node */
        n->deadline = lb_monotonic_ms() + cl->command_timeout_ms +
                      (n->connecting ? cl->connect_timeout_ms : 0);
    run->node = node;
    run->round = (uint8_t)cl->round;
    n->wrote |= req->is_txn | req->writes;
    cl->stats.requests++;
    return 0;
}

/* Dispatches the requests of a round: every pending one in round 0, the
 * redirected ones after. Returns how many were queued. */
/* Replicas a WAIT on 'n' must reach: the configured count, or, by default,
 * one when the master has a healthy replica. */
static int wait_needed(const struct lb_cluster *cl, const struct node *n)
{
    if (cl->wait_replicas >= 0)
        return cl->wait_replicas;
    return n->replicas > 0 ? 1 : 0;
}

/* Ends the round on every node that got requests with WAIT, in the same
 * pipeline: one round trip covers the writes and their replication. */
static void queue_waits(struct lb_cluster *cl, const size_t *queued_before, size_t nodes)
{
    for (size_t i = 0; i < nodes; i++) {
        struct node *n = cl->nodes[i];
        int wrote = n->wrote;
        n->wrote = 0;
        if (!wrote || n->qlen == queued_before[i])
            continue; /* reads need no WAIT (and a WAIT queued before keeps its count) */
        if (wait_needed(cl, n) == 0) {
            if (cl->wait_replicas < 0) {
                cl->stats.unwaited++;
                lb_log_every(&cl->unwaited_said, 60000, LB_LOG_WARN, "redis",
                             "writing to %s without WAIT: it has no healthy replica "
                             "(wait_replicas: auto; a failover now can lose committed events, "
                             "which replay rebuilds; looked at again every 10 s)",
                             n->name);
            }
            continue;
        }
        char cmd[96], replicas[16], timeout[24];
        int rl = snprintf(replicas, sizeof(replicas), "%d", wait_needed(cl, n));
        int tl = snprintf(timeout, sizeof(timeout), "%lld", (long long)cl->wait_timeout_ms);
        int len = snprintf(cmd, sizeof(cmd), "*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", rl,
                           replicas, tl, timeout);
        size_t mark = n->out.len;
        if (lb_buf_append(&n->out, cmd, (size_t)len) != 0 || queue_push(n, WAIT_MARK) != 0) {
            /* No WAIT, no durability claim: fail the round's requests here. */
            n->out.len = mark;
            node_abort(cl, n, "out of memory queueing WAIT");
            continue;
        }
        n->wait_needed = wait_needed(cl, n);
        n->deadline += cl->wait_timeout_ms;
    }
}

/* Dispatches the requests of a round: every pending one in round 0, the
 * redirected ones after. Returns how many were queued. */
static size_t dispatch_round(struct lb_cluster *cl, int round)
{
    size_t sent = 0;
    if (cl->need_refresh && !cl->no_refresh && lb_cluster_refresh(cl) != 0)
        lb_log_every(&cl->refresh_said, 5000, LB_LOG_WARN, "redis", "slot map refresh failed: %s",
                     cl->errstr);
    if (!cl->round_sent && round == 0)
        cl->map_at_start = cl->map_changes; /* nothing of the call went out by another map */
    /* after the refresh, which may have met new nodes */
    size_t known = cl->nnodes;
    size_t *queued_before = calloc(known ? known : 1, sizeof(*queued_before));
    cl->round = round;
    for (size_t i = 0; queued_before && i < known; i++)
        queued_before[i] = cl->nodes[i]->qlen;
    for (size_t i = 0; i < cl->nrequests; i++) {
        struct run *run = &cl->runs[i];
        if (run->error[0] || (round > 0 ? !run->redirect : run->queued || cl->requests[i].defer))
            continue;
        if (cl->requests[i].len == 0) {
            run->done = 1;
            continue;
        }
        if (!queued_before) {
            fail_run(run, LB_REDIS_NOMEM, "out of memory");
            continue;
        }
        if (dispatch(cl, (uint32_t)i) == 0)
            sent++;
    }
    if (queued_before && sent)
        queue_waits(cl, queued_before, known); /* dispatching meets no new node */
    free(queued_before);
    return sent;
}

/* Writes what every node's socket takes now, without waiting. */
static void flush_nonblocking(struct lb_cluster *cl)
{
    for (size_t i = 0; i < cl->nnodes; i++) {
        struct node *n = cl->nodes[i];
        if (n->qlen && n->sent < n->out.len && !n->connecting)
            node_io(cl, n, POLLOUT);
    }
}

/* With wait_replicas auto, a master the map shows without a healthy replica
 * is written without WAIT; its replica may have come back (restarted,
 * synced) since, with nothing failing to make us read the map again. So
 * the map is read again every REPLICA_RECHECK_MS while such a master owns
 * slots. */
#define REPLICA_RECHECK_MS 10000
static void recheck_replicas(struct lb_cluster *cl)
{
    int64_t now = lb_monotonic_ms();
    if (cl->wait_replicas >= 0 || cl->need_refresh || !cl->mapped_ms ||
        now - cl->mapped_ms < REPLICA_RECHECK_MS)
        return;
    for (size_t s = 0; s < LB_SLOTS; s++)
        if (cl->slots[s] >= 0 && cl->nodes[cl->slots[s]]->replicas == 0) {
            cl->need_refresh = 1;
            return;
        }
    cl->mapped_ms = now; /* every master has one: look again later */
}

void lb_cluster_start(struct lb_cluster *cl, struct lb_request *requests, size_t count)
{
    forget_departed(cl);
    recheck_replicas(cl);
    cl->in_call = 1;
    cl->requests = requests;
    cl->nrequests = count;
    cl->started = 1;
    cl->round_sent = 0;
    for (size_t i = 0; i < count; i++) {
        requests[i].ok = 0;
        requests[i].error[0] = '\0';
        requests[i].error_class = LB_REDIS_OK;
    }
    if (count > cl->capruns) {
        struct run *runs = realloc(cl->runs, count * sizeof(*runs));
        if (!runs) {
            cl->oom = 1;
            return;
        }
        cl->runs = runs;
        cl->capruns = count;
    }
    cl->oom = 0;
    cl->no_refresh = 1;
    for (size_t i = 0; i < count; i++)
        cl->no_refresh &= requests[i].no_refresh;
    if (count) /* a batch whose records all wait or were rejected sends nothing */
        memset(cl->runs, 0, count * sizeof(*cl->runs));
    cl->exec_calls++;
    cl->round_sent = dispatch_round(cl, 0);
    flush_nonblocking(cl);
}

void lb_cluster_dispatch(struct lb_cluster *cl)
{
    if (!cl->started || cl->oom)
        return;
    cl->round_sent += dispatch_round(cl, 0);
    flush_nonblocking(cl);
}

size_t lb_cluster_busy_nodes(const struct lb_cluster *cl)
{
    size_t busy = 0;
    for (size_t i = 0; i < cl->nnodes; i++)
        busy += cl->nodes[i]->qlen > 0;
    return busy;
}

int lb_cluster_call_clean(const struct lb_cluster *cl)
{
    /* a map that changed during the call may route a slot elsewhere than
     * where its request went: an idle master then says nothing about it */
    if (!cl->started || cl->oom || cl->need_refresh || cl->map_changes != cl->map_at_start)
        return 0;
    for (size_t i = 0; i < cl->nrequests; i++)
        if (cl->runs[i].error[0] || cl->runs[i].redirect)
            return 0;
    return 1;
}

const char *lb_cluster_route(const struct lb_cluster *cl, uint16_t slot)
{
    int32_t owner = cl->slots[slot & (LB_SLOTS - 1)];
    return owner < 0 || cl->need_refresh ? NULL : cl->nodes[owner]->name;
}

const char *lb_cluster_settled_owner(const struct lb_cluster *cl, uint16_t slot)
{
    const char *owner = lb_cluster_route(cl, slot);
    return owner && !cl->nodes[cl->slots[slot & (LB_SLOTS - 1)]]->qlen ? owner : NULL;
}

size_t lb_cluster_finish(struct lb_cluster *cl)
{
    struct lb_request *requests = cl->requests;
    size_t count = cl->nrequests, failed = 0;

    if (!cl->started)
        return 0;
    cl->started = 0;
    if (cl->oom) {
        for (size_t i = 0; i < count; i++) {
            snprintf(requests[i].error, sizeof(requests[i].error), "out of memory");
            requests[i].error_class = LB_REDIS_NOMEM;
        }
        cl->requests = NULL;
        cl->in_call = 0;
        return count;
    }
    size_t sent = cl->round_sent;
    for (int round = 0; sent && round < MAX_ROUNDS; round++) {
        if (round > 0)
            sent = dispatch_round(cl, round);
        if (!sent)
            break;
        run_io(cl);
        size_t redirected = 0;
        for (size_t i = 0; i < count; i++) {
            struct run *run = &cl->runs[i];
            if (run->redirect == REDIRECT_MOVED) {
                cl->stats.moved++;
                cl->slots[requests[i].slot] = run->redirect_node;
                cl->map_changes++;
                cl->need_refresh = 1;
                redirected++;
            } else if (run->redirect == REDIRECT_ASK) {
                cl->stats.ask++;
                redirected++;
            } else if (run->redirect == REDIRECT_NOSCRIPT) {
                redirected++;
            }
        }
        sent = redirected;
    }
    /* run_io returns only with every queue empty; anything else would leave
     * replies on the wire that the next call would misattribute. */
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->qlen)
            node_abort(cl, cl->nodes[i], "internal error: requests left queued");
    for (size_t i = 0; i < count; i++) {
        struct run *run = &cl->runs[i];
        if (run->redirect && !run->error[0])
            fail_run(run, LB_REDIS_RETRY, "still redirected after %d rounds", MAX_ROUNDS);
        if (!run->queued && requests[i].defer && !run->error[0])
            fail_run(run, LB_REDIS_RETRY, "not sent: still deferred when the call ended");
        requests[i].ok = run->done && !run->error[0];
        if (!requests[i].ok) {
            if (!run->error[0])
                fail_run(run, LB_REDIS_RETRY, "no reply");
            snprintf(requests[i].error, sizeof(requests[i].error), "%s", run->error);
            requests[i].error_class = run->eclass;
            if (requests[i].reply) {
                freeReplyObject(requests[i].reply);
                requests[i].reply = NULL;
            }
            failed++;
        }
    }
    cl->requests = NULL;
    cl->in_call = 0;
    return failed;
}

size_t lb_cluster_exec(struct lb_cluster *cl, struct lb_request *requests, size_t count)
{
    if (cl->started) {
        /* a caller's bug: the call in progress owns the queues and the
         * request indices in them; fail this one instead of mixing them */
        LB_ERROR("redis", "internal error: a call into the cluster client while another is "
                          "in progress; refused");
        for (size_t i = 0; i < count; i++) {
            requests[i].ok = 0;
            requests[i].reply = NULL;
            snprintf(requests[i].error, sizeof(requests[i].error),
                     "internal error: another call is in progress on this client");
            requests[i].error_class = LB_REDIS_FIX;
        }
        return count;
    }
    lb_cluster_start(cl, requests, count);
    return lb_cluster_finish(cl);
}

/* ---- lifecycle and tools ------------------------------------------------------------- */

struct lb_cluster *lb_cluster_new(const struct lb_cluster_options *options)
{
    struct lb_cluster *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return NULL;
    for (size_t s = 0; s < LB_SLOTS; s++)
        cl->slots[s] = -1;
    cl->connect_timeout_ms = options->connect_timeout_ms > 0 ? options->connect_timeout_ms : 1000;
    cl->command_timeout_ms = options->command_timeout_ms > 0 ? options->command_timeout_ms : 5000;
    cl->need_refresh = 1;
    cl->wait_replicas = options->wait_replicas;
    if (options->script && !(cl->script = strdup(options->script)))
        goto oom;
    if (options->script_sha)
        snprintf(cl->script_sha, sizeof(cl->script_sha), "%s", options->script_sha);
    cl->wait_timeout_ms = options->wait_timeout_ms > 0 ? options->wait_timeout_ms : 1000;
    cl->readonly_patience_ms =
        options->readonly_patience_ms > 0 ? options->readonly_patience_ms : 10000;
    cl->tls = lb_tls_ref(options->tls);
    if ((options->user && !(cl->user = strdup(options->user))) ||
        (options->password && !(cl->password = strdup(options->password))))
        goto oom;
    for (size_t i = 0; i < options->nseeds; i++)
        if (add_node(cl, options->seeds[i].host, options->seeds[i].port) < 0)
            goto oom;
    cl->nseeds = options->nseeds;
    return cl;
oom:
    lb_cluster_free(cl);
    return NULL;
}

void lb_cluster_free(struct lb_cluster *cl)
{
    if (!cl)
        return;
    for (size_t i = 0; i < cl->nnodes; i++) {
        node_close(cl, cl->nodes[i]);
        free(cl->nodes[i]->host);
        free(cl->nodes[i]->hostname);
        free(cl->nodes[i]->queue);
        lb_buf_free(&cl->nodes[i]->out);
        free(cl->nodes[i]);
    }
    free(cl->nodes);
    free(cl->runs);
    free(cl->pfds);
    free(cl->pfd_node);
    if (cl->password)
        memset(cl->password, 0, strlen(cl->password));
    free(cl->password);
    free(cl->user);
    free(cl->script);
    lb_tls_free(cl->tls);
    free(cl);
}

static int encode_argv(struct lb_buf *buf, int argc, const char **argv, const size_t *argvlen)
{
    size_t need = LB_RESP_HEADER_MAX;
    for (int i = 0; i < argc; i++)
        need += LB_RESP_HEADER_MAX + argvlen[i] + 2;
    if (lb_buf_reserve(buf, need) != 0)
        return -1;
    char *p = lb_resp_header(buf->data + buf->len, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++)
        p = lb_resp_bulk(p, argv[i], argvlen[i]);
    buf->len = (size_t)(p - buf->data);
    return 0;
}

redisReply *lb_cluster_command(struct lb_cluster *cl, uint16_t slot, int argc, const char **argv,
                               const size_t *argvlen)
{
    struct lb_buf buf = {0};
    struct lb_request req = {.slot = slot, .ncommands = 1};
    if (encode_argv(&buf, argc, argv, argvlen) != 0) {
        set_error(cl, "out of memory");
        return NULL;
    }
    req.bytes = buf.data;
    req.len = buf.len;
    lb_cluster_exec(cl, &req, 1);
    lb_buf_free(&buf);
    cl->errclass = req.ok ? LB_REDIS_OK : (enum lb_redis_error)req.error_class;
    if (!req.ok)
        set_error(cl, "%s", req.error);
    return req.ok ? req.reply : NULL;
}

int lb_cluster_each_master(struct lb_cluster *cl, int argc, const char **argv,
                           const size_t *argvlen,
                           void (*each)(void *ctx, const char *node, const redisReply *reply),
                           void *ctx)
{
    struct lb_buf buf = {0};
    int rc = 0;

    if ((cl->need_refresh && lb_cluster_refresh(cl) != 0) ||
        encode_argv(&buf, argc, argv, argvlen) != 0)
        return -1;
    for (size_t i = 0; i < cl->nnodes && rc == 0; i++) {
        int serves = 0;
        for (size_t s = 0; s < LB_SLOTS && !serves; s++)
            serves = cl->slots[s] == (int32_t)i;
        if (!serves)
            continue;
        struct node *n = cl->nodes[i];
        redisReply *reply = NULL;
        if (node_connect(cl, n) != 0 || node_call(cl, n, buf.data, buf.len, &reply) != 0) {
            rc = -1;
            break;
        }
        each(ctx, cl->nodes[i]->name, reply);
        freeReplyObject(reply);
    }
    lb_buf_free(&buf);
    return rc;
}

const char *lb_cluster_slot_owner(const struct lb_cluster *cl, uint16_t slot)
{
    int32_t node = cl->slots[slot & (LB_SLOTS - 1)];
    return node < 0 ? NULL : cl->nodes[node]->name;
}

int lb_cluster_is_standalone(const struct lb_cluster *cl)
{
    return cl->standalone;
}

size_t lb_cluster_known_nodes(const struct lb_cluster *cl)
{
    return cl->nnodes;
}

const char *lb_cluster_error(const struct lb_cluster *cl)
{
    return cl->errstr;
}

enum lb_redis_error lb_cluster_error_class(const struct lb_cluster *cl)
{
    return cl->errclass;
}

const struct lb_cluster_stats *lb_cluster_stats(const struct lb_cluster *cl)
{
    return &cl->stats;
}
