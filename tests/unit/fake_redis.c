/* A scripted fake Redis node; see fake_redis.h. */
#include "fake_redis.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 16

struct fake_redis {
    int listener;
    int port;
    int wake[2]; /* a pipe to stop the thread */
    pthread_t thread;
    pthread_mutex_t lock;
    char *log;
    size_t loglen;
    fake_handler handler;
    void *ctx;
    int paused;            /* under 'lock': no connection is read */
    const size_t *argvlen; /* the command being handled's */
    size_t replylen;       /* the handler's reply's; 0: up to its NUL */
};

static void record(struct fake_redis *f, int argc, char **argv)
{
    size_t need = 1;
    for (int i = 0; i < argc; i++)
        need += strlen(argv[i]) + 1;
    pthread_mutex_lock(&f->lock);
    char *grown = realloc(f->log, f->loglen + need + 1);
    if (grown) {
        f->log = grown;
        for (int i = 0; i < argc; i++) {
            size_t n = strlen(argv[i]);
            memcpy(f->log + f->loglen, argv[i], n);
            f->loglen += n;
            f->log[f->loglen++] = i + 1 < argc ? ' ' : '\n';
        }
        f->log[f->loglen] = '\0';
    }
    pthread_mutex_unlock(&f->lock);
}

/* Serves the complete commands buffered in 'reader'. Returns -1 to close. */
static int serve(struct fake_redis *f, int fd, redisReader *reader)
{
    void *parsed;
    while (redisReaderGetReply(reader, &parsed) == REDIS_OK && parsed) {
        redisReply *cmd = parsed;
        size_t n = cmd->type == REDIS_REPLY_ARRAY ? cmd->elements : 0;
        char **argv = calloc(n + 1, sizeof(*argv));
        size_t *argvlen = calloc(n + 1, sizeof(*argvlen));
        int argc = 0;
        for (size_t i = 0; argv && argvlen && i < n; i++) {
            argvlen[argc] = cmd->element[i]->len;
            argv[argc++] = cmd->element[i]->str;
        }
        record(f, argc, argv);
        f->argvlen = argvlen;
        f->replylen = 0;
        const char *reply = argv && argvlen ? f->handler(f, argc, argv, f->ctx) : NULL;
        f->argvlen = NULL;
        free(argv);
        free(argvlen);
        freeReplyObject(cmd);
        if (!reply)
            return -1;
        int then_close = reply[0] == FAKE_REDIS_THEN_CLOSE[0];
        reply += then_close;
        size_t len = f->replylen ? f->replylen : strlen(reply), sent = 0;
        while (sent < len) {
            /* a client may be gone (freed mid-call): no SIGPIPE for the test */
            ssize_t w = send(fd, reply + sent, len - sent, MSG_NOSIGNAL);
            if (w <= 0)
                return -1;
            sent += (size_t)w;
        }
        if (then_close)
            return -1;
    }
    return 0;
}

static void *run(void *arg)
{
    struct fake_redis *f = arg;
    struct pollfd pfds[MAX_CONNS + 2];
    redisReader *readers[MAX_CONNS + 2] = {0};
    nfds_t n = 2;
    pfds[0] = (struct pollfd){.fd = f->wake[0], .events = POLLIN};
    pfds[1] = (struct pollfd){.fd = f->listener, .events = POLLIN};

    for (;;) {
        pthread_mutex_lock(&f->lock);
        int paused = f->paused;
        pthread_mutex_unlock(&f->lock);
        for (nfds_t i = 2; i < n; i++)
            pfds[i].events = paused ? 0 : POLLIN;
        if (poll(pfds, n, -1) < 0)
            continue;
        if (pfds[0].revents) {
            char why = 'x';
            if (read(f->wake[0], &why, 1) != 1 || why == 'x')
                break; /* stopped */
            continue;  /* paused or resumed */
        }
        if (pfds[1].revents & POLLIN) {
            int fd = accept(f->listener, NULL, NULL);
            /* a fixed receive buffer (64 KiB, which Linux doubles): what a
             * paused node takes is bounded */
            int rcvbuf = 65536;
            if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
            if (fd >= 0 && n < MAX_CONNS + 2) {
                pfds[n] = (struct pollfd){.fd = fd, .events = POLLIN};
                readers[n++] = redisReaderCreate();
            } else if (fd >= 0) {
                close(fd);
            }
        }
        for (nfds_t i = 2; i < n; i++) {
            if (!pfds[i].revents)
                continue;
            /* paused, nothing is read; a client that hung up is let go */
            int gone = paused && (pfds[i].revents & (POLLHUP | POLLERR));
            if (paused && !gone)
                continue;
            char buf[16384];
            ssize_t got = gone ? 0 : read(pfds[i].fd, buf, sizeof(buf));
            if (got <= 0 || redisReaderFeed(readers[i], buf, (size_t)got) != REDIS_OK ||
                serve(f, pfds[i].fd, readers[i]) != 0) {
                close(pfds[i].fd);
                redisReaderFree(readers[i]);
                pfds[i] = pfds[n - 1];
                readers[i] = readers[n - 1];
                n--;
                i--;
            }
        }
    }
    for (nfds_t i = 2; i < n; i++) {
        close(pfds[i].fd);
        redisReaderFree(readers[i]);
    }
    return NULL;
}

struct fake_redis *fake_redis_start(fake_handler handler, void *ctx)
{
    struct fake_redis *f = calloc(1, sizeof(*f));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    if (!f)
        return NULL;
    f->handler = handler;
    f->ctx = ctx;
    pthread_mutex_init(&f->lock, NULL);
    f->listener = socket(AF_INET, SOCK_STREAM, 0);
    if (f->listener < 0 || bind(f->listener, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(f->listener, 16) != 0 ||
        getsockname(f->listener, (struct sockaddr *)&addr, &len) != 0 || pipe(f->wake) != 0 ||
        pthread_create(&f->thread, NULL, run, f) != 0) {
        if (f->listener >= 0)
            close(f->listener);
        free(f);
        return NULL;
    }
    f->port = ntohs(addr.sin_port);
    return f;
}

void fake_redis_stop(struct fake_redis *f)
{
    if (!f)
        return;
    ssize_t ignored = write(f->wake[1], "x", 1);
    (void)ignored;
    pthread_join(f->thread, NULL);
    close(f->listener);
    close(f->wake[0]);
    close(f->wake[1]);
    pthread_mutex_destroy(&f->lock);
    free(f->log);
    free(f);
}

int fake_redis_port(const struct fake_redis *f)
{
    return f->port;
}

char *fake_redis_log(struct fake_redis *f)
{
    pthread_mutex_lock(&f->lock);
    char *copy = strdup(f->log ? f->log : "");
    pthread_mutex_unlock(&f->lock);
    return copy;
}

void fake_redis_clear_log(struct fake_redis *f)
{
    pthread_mutex_lock(&f->lock);
    f->loglen = 0;
    if (f->log)
        f->log[0] = '\0';
    pthread_mutex_unlock(&f->lock);
}

const size_t *fake_redis_argvlen(const struct fake_redis *f)
{
    return f->argvlen;
}

void fake_redis_reply_len(struct fake_redis *f, size_t len)
{
    f->replylen = len;
}

void fake_redis_pause(struct fake_redis *f, int paused)
{
    pthread_mutex_lock(&f->lock);
    f->paused = paused;
    pthread_mutex_unlock(&f->lock);
    ssize_t ignored = write(f->wake[1], "p", 1);
    (void)ignored;
}
