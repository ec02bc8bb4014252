/* A relay in front of a real redis-server (tests/unit/redis_server.h),
 * built on the fake node (fake_redis.h): it passes every command on, over
 * one connection of its own, and the server's reply back. On request it
 * loses one reply: the command reaches the server and is applied, then the
 * client's connection is closed before the reply comes back, as when a node
 * or a proxy hangs up mid-request. For a standalone server only (a
 * cluster's slot map would send the client past the relay); one command
 * at a time (no MULTI from two clients at once).
 */
#ifndef REDIS_RELAY_H
#define REDIS_RELAY_H

#include <stddef.h>

struct redis_relay;

/* Relays to 127.0.0.1:'port'; fails the test when it cannot. */
struct redis_relay *redis_relay_start(int port);
void redis_relay_stop(struct redis_relay *relay);
int redis_relay_port(const struct redis_relay *relay);

/* The next command named 'command' ("EVALSHA") is applied and its reply
 * lost; with 'arg', the next such command with an argument 'arg'. */
void redis_relay_lose(struct redis_relay *relay, const char *command, const char *arg);

/* Replies lost so far. */
int redis_relay_lost(struct redis_relay *relay);

/* The names of the commands relayed since the last call, space-separated
 * ("SET GET EVAL"), into 'out'. */
void redis_relay_names(struct redis_relay *relay, char *out, size_t cap);

/* Stops passing commands on (they wait in the sockets: fake_redis_pause),
 * or passes them on again. */
void redis_relay_pause(struct redis_relay *relay, int paused);

/* Bytes of the commands' arguments passed on so far. */
size_t redis_relay_bytes(struct redis_relay *relay);

#endif
