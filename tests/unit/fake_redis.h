/* A scripted fake Redis node for the cluster client's unit tests.
 *
 * It listens on 127.0.0.1 (an ephemeral port), parses every command it
 * receives with hiredis' reader, records it as one line ("MULTI",
 * "ZADD k GT 1 m", ...) and answers with whatever the test's handler
 * returns: this is how the tests produce MOVED, ASK, TRYAGAIN and the other
 * replies a real server will not give on demand. One thread serves every
 * connection of the node.
 */
#ifndef FAKE_REDIS_H
#define FAKE_REDIS_H

#include <stddef.h>

struct fake_redis;

/* Returns the RESP reply to one command (a string literal or a buffer the
 * handler keeps alive), or NULL to close the connection instead; a reply
 * that starts with FAKE_REDIS_THEN_CLOSE is sent without that byte and the
 * connection closed after it. 'argv' are NUL-terminated. Called on the
 * fake's thread. */
#define FAKE_REDIS_THEN_CLOSE "\001"
typedef const char *(*fake_handler)(struct fake_redis *fake, int argc, char **argv, void *ctx);

struct fake_redis *fake_redis_start(fake_handler handler, void *ctx);

/* Stops reading every connection, or reads them again. Paused, commands
 * wait in the sockets, whose receive buffers are fixed at 64 KiB (128 KiB
 * once Linux doubles it), then in the clients'. */
void fake_redis_pause(struct fake_redis *fake, int paused);

/* For a handler of binary commands and replies, during its call: the
 * lengths of 'argv', and the length of the reply it returns (which may then
 * hold NULs; not with FAKE_REDIS_THEN_CLOSE). */
const size_t *fake_redis_argvlen(const struct fake_redis *fake);
void fake_redis_reply_len(struct fake_redis *fake, size_t len);
void fake_redis_stop(struct fake_redis *fake);
int fake_redis_port(const struct fake_redis *fake);

/* The commands received so far, one per line, '\n'-separated; the caller
 * frees the string. */
char *fake_redis_log(struct fake_redis *fake);
void fake_redis_clear_log(struct fake_redis *fake);

#endif
