/* Redis Cluster key slots: CRC16 (XMODEM) of the key, or of its hash tag,
 * modulo 16384. The hash tag is the part between the first '{' and the first
 * '}' after it, when that part is not empty; this is what puts every window
 * of one board into one slot. */
#ifndef LB_SLOT_H
#define LB_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define LB_SLOTS 16384

uint16_t lb_crc16(const char *bytes, size_t len);
/* The slot Redis Cluster assigns to 'key' (hash-tag rules applied). */
uint16_t lb_key_slot(const char *key, size_t len);

/* FNV-1a 64 of 'len' bytes, continuing from 'h' (LB_FNV1A_BASIS to start). */
#define LB_FNV1A_BASIS UINT64_C(14695981039346656037)
static inline uint64_t lb_fnv1a(uint64_t h, const void *bytes, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)bytes)[i]) * UINT64_C(1099511628211);
    return h;
}

/* Split boards (apply.h has their keys): a player's shard, FNV-1a 64 of
 * its id modulo 'shards'; and shard 'shard''s tag, "B#<i>.<k>" with k the
 * smallest number whose tag's slot lies in the middle half of the i-th
 * 'shards'-th of the slots, NUL-terminated (the board itself when
 * 'shards' is 1). Returns its length, or 0 when it does not fit. */
uint32_t lb_player_shard(const char *player, size_t len, uint32_t shards);
size_t lb_shard_tag(const char *board, size_t len, uint32_t shards, uint32_t shard, char *out,
                    size_t cap);

/* A hash tag whose slot is 'slot': "~s<k>", k the smallest such number,
 * NUL-terminated. Its length, or 0 when it does not fit. */
size_t lb_slot_tag(uint16_t slot, char *out, size_t cap);

#endif
