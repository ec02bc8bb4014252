/* A set of names (boards, tags), each kept once, in the order added and
 * found by a hash: a name's place (its number from 0) never changes while
 * the set lives, so callers keep what they know of each name in arrays of
 * their own at the same places. Used where a name is looked up once per
 * request or event: the closer's boards (closer.c), replay's boards
 * (replay/).
 */
#ifndef LB_NAMES_H
#define LB_NAMES_H

#include <stddef.h>
#include <stdint.h>

struct lb_names {
    char **items; /* NUL-terminated copies, in the order added */
    size_t count, cap;
    size_t *slots; /* open addressing: place + 1, 0 empty; at most half full */
    size_t nslots;
};

/* The place of 'name', or -1 when the set does not hold it. */
long lb_names_find(const struct lb_names *names, const char *name, size_t len);

/* The place of 'name', added when the set did not hold it; -1 when out of
 * memory (the set is as it was). */
long lb_names_add(struct lb_names *names, const char *name, size_t len);

/* Whether the set holds 'name'. */
static inline int lb_names_has(const struct lb_names *names, const char *name, size_t len)
{
    return lb_names_find(names, name, len) >= 0;
}

void lb_names_free(struct lb_names *names);

#endif
