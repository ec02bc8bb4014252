/* A relay that can lose a reply; see redis_relay.h. */
#include "redis_relay.h"
#include "fake_redis.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

struct redis_relay {
    struct fake_redis *fake;
    redisContext *to; /* the server; used on the fake's thread only */
    pthread_mutex_t lock;
    char lose[32], lose_arg[32]; /* "": none */
    int lost;
    size_t bytes;     /* of the arguments relayed */
    char names[1024]; /* the commands relayed, by name, space-separated */
    char *out;        /* the reply in RESP 2 */
    size_t used, cap;
};

static int put(struct redis_relay *r, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(r->out + r->used, r->cap - r->used, fmt, ap);
        va_end(ap);
        if (n < 0)
            return -1;
        if ((size_t)n < r->cap - r->used) {
            r->used += (size_t)n;
            return 0;
        }
        size_t cap = 2 * (r->cap + (size_t)n);
        char *grown = realloc(r->out, cap);
        if (!grown)
            return -1;
        r->out = grown;
        r->cap = cap;
    }
}

/* Appends 'reply' in RESP 2; -1 for a type not passed on. */
static int encode(struct redis_relay *r, const redisReply *reply)
{
    switch (reply->type) {
    case REDIS_REPLY_STATUS:
        return put(r, "+%s\r\n", reply->str);
    case REDIS_REPLY_ERROR:
        return put(r, "-%s\r\n", reply->str);
    case REDIS_REPLY_INTEGER:
        return put(r, ":%lld\r\n", reply->integer);
    case REDIS_REPLY_NIL:
        return put(r, "$-1\r\n");
    case REDIS_REPLY_STRING: /* its bytes as they are, NULs too */
        if (put(r, "$%zu\r\n%*s\r\n", reply->len, (int)reply->len, "") != 0)
            return -1;
        memcpy(r->out + r->used - 2 - reply->len, reply->str, reply->len);
        return 0;
    case REDIS_REPLY_ARRAY:
        if (put(r, "*%zu\r\n", reply->elements) != 0)
            return -1;
        for (size_t i = 0; i < reply->elements; i++)
            if (encode(r, reply->element[i]) != 0)
                return -1;
        return 0;
    default:
        return -1;
    }
}

static const char *relay(struct fake_redis *fake, int argc, char **argv, void *ctx)
{
    struct redis_relay *r = ctx;
    redisReply *reply =
        redisCommandArgv(r->to, argc, (const char **)argv, fake_redis_argvlen(fake));
    if (!reply)
        return NULL; /* the server is gone: so is the connection */
    r->used = 0;
    int ok = encode(r, reply) == 0;
    freeReplyObject(reply);
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < argc; i++)
        r->bytes += fake_redis_argvlen(fake)[i];
    size_t used = strlen(r->names);
    snprintf(r->names + used, sizeof(r->names) - used, "%s%s", used ? " " : "",
             argc > 0 ? argv[0] : "?");
    int lose = argc > 0 && r->lose[0] && strcasecmp(argv[0], r->lose) == 0;
    if (lose && r->lose_arg[0]) {
        lose = 0;
        for (int i = 1; i < argc && !lose; i++)
            lose = strcmp(argv[i], r->lose_arg) == 0;
    }
    if (lose) {
        r->lose[0] = '\0';
        r->lost++;
    }
    pthread_mutex_unlock(&r->lock);
    fake_redis_reply_len(fake, r->used);
    return ok && !lose ? r->out : NULL; /* NULL: applied; the client never hears of it */
}

struct redis_relay *redis_relay_start(int port)
{
    struct redis_relay *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    pthread_mutex_init(&r->lock, NULL);
    r->cap = 4096;
    r->out = malloc(r->cap);
    assert_non_null(r->out);
    r->to = redisConnect("127.0.0.1", port);
    assert_true(r->to && !r->to->err);
    r->fake = fake_redis_start(relay, r);
    assert_non_null(r->fake);
    return r;
}

void redis_relay_stop(struct redis_relay *r)
{
    if (!r)
        return;
    fake_redis_stop(r->fake); /* its thread first: it uses 'to' */
    redisFree(r->to);
    pthread_mutex_destroy(&r->lock);
    free(r->out);
    free(r);
}

int redis_relay_port(const struct redis_relay *r)
{
    return fake_redis_port(r->fake);
}

void redis_relay_lose(struct redis_relay *r, const char *command, const char *arg)
{
    pthread_mutex_lock(&r->lock);
    snprintf(r->lose, sizeof(r->lose), "%s", command);
    snprintf(r->lose_arg, sizeof(r->lose_arg), "%s", arg ? arg : "");
    pthread_mutex_unlock(&r->lock);
}

int redis_relay_lost(struct redis_relay *r)
{
    pthread_mutex_lock(&r->lock);
    int lost = r->lost;
    pthread_mutex_unlock(&r->lock);
    return lost;
}

void redis_relay_names(struct redis_relay *r, char *out, size_t cap)
{
    pthread_mutex_lock(&r->lock);
    snprintf(out, cap, "%s", r->names);
    r->names[0] = '\0';
    pthread_mutex_unlock(&r->lock);
}

void redis_relay_pause(struct redis_relay *r, int paused)
{
    fake_redis_pause(r->fake, paused);
}

size_t redis_relay_bytes(struct redis_relay *r)
{
    pthread_mutex_lock(&r->lock);
    size_t bytes = r->bytes;
    pthread_mutex_unlock(&r->lock);
    return bytes;
}
