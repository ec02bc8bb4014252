/* A set of names with stable places; see names.h. */
#include "names.h"
#include "slot.h"

#include <stdlib.h>
#include <string.h>

static size_t first_slot(const struct lb_names *n, const char *name, size_t len)
{
    return (size_t)lb_fnv1a(LB_FNV1A_BASIS, name, len) & (n->nslots - 1);
}

long lb_names_find(const struct lb_names *n, const char *name, size_t len)
{
    if (!n->nslots)
        return -1;
    for (size_t pos = first_slot(n, name, len); n->slots[pos]; pos = (pos + 1) & (n->nslots - 1)) {
        const char *item = n->items[n->slots[pos] - 1];
        if (strnlen(item, len + 1) == len && memcmp(item, name, len) == 0)
            return (long)(n->slots[pos] - 1);
    }
    return -1;
}

static void place(struct lb_names *n, size_t i)
{
    size_t pos = first_slot(n, n->items[i], strlen(n->items[i]));
    while (n->slots[pos])
        pos = (pos + 1) & (n->nslots - 1);
    n->slots[pos] = i + 1;
}

long lb_names_add(struct lb_names *n, const char *name, size_t len)
{
    long found = lb_names_find(n, name, len);
    if (found >= 0)
        return found;
    if (n->count == n->cap) {
        size_t cap = n->cap ? 2 * n->cap : 16;
        char **items = realloc(n->items, cap * sizeof(*items));
        if (!items)
            return -1;
        n->items = items;
        n->cap = cap;
    }
    if ((n->count + 1) * 2 > n->nslots) {
        size_t nslots = n->nslots ? 2 * n->nslots : 32;
        size_t *slots = calloc(nslots, sizeof(*slots));
        if (!slots)
            return -1;
        free(n->slots);
        n->slots = slots;
        n->nslots = nslots;
        for (size_t i = 0; i < n->count; i++)
            place(n, i);
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, name, len);
    copy[len] = '\0';
    n->items[n->count] = copy;
    place(n, n->count);
    return (long)n->count++;
}

void lb_names_free(struct lb_names *n)
{
    for (size_t i = 0; i < n->count; i++)
        free(n->items[i]);
    free(n->items);
    free(n->slots);
    memset(n, 0, sizeof(*n));
}
