/* CRC16 with polynomial 0x1021, initial value 0, no reflection (XMODEM), as
 * Redis Cluster specifies. A bit-at-a-time loop: slots are computed once per
 * board per batch, never per event, so a table would buy nothing. */
#include "slot.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

uint16_t lb_crc16(const char *bytes, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)bytes[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

uint16_t lb_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return lb_crc16(open + 1, (size_t)(close - open - 1)) & (LB_SLOTS - 1);
    }
    return lb_crc16(key, len) & (LB_SLOTS - 1);
}

uint32_t lb_player_shard(const char *player, size_t len, uint32_t shards)
{
    return shards > 1 ? (uint32_t)(lb_fnv1a(LB_FNV1A_BASIS, player, len) % shards) : 0;
}

size_t lb_shard_tag(const char *board, size_t len, uint32_t shards, uint32_t shard, char *out,
                    size_t cap)
{
    if (shards <= 1) {
        if (len + 1 > cap)
            return 0;
        memcpy(out, board, len);
        out[len] = '\0';
        return len;
    }
    /* the middle half of the shard's N-th of the slots: evenly split
     * masters own it whichever way they round their edges */
    uint32_t lo = shard * LB_SLOTS / shards, hi = (shard + 1) * LB_SLOTS / shards;
    uint32_t from = lo + (hi - lo) / 4, to = hi - (hi - lo) / 4;
    for (uint32_t k = 0; k < (1u << 20); k++) {
        int n = snprintf(out, cap, "%.*s#%u.%u", (int)len, board, shard, k);
        if (n < 0 || (size_t)n >= cap)
            return 0;
        uint16_t slot = lb_crc16(out, (size_t)n) & (LB_SLOTS - 1);
        if (slot >= from && slot < to)
            return (size_t)n;
    }
    return 0; /* no CRC16 misses a range that wide so long */
}

/* The smallest k of each slot's tag "~s<k>": every slot is hit before k
 * reaches about 170,000, once per process (about 25 ms). */
static uint32_t slot_tag_k[LB_SLOTS];
static pthread_once_t slot_tags_once = PTHREAD_ONCE_INIT;

static void slot_tags_fill(void)
{
    char tag[24];
    size_t left = LB_SLOTS;
    for (uint32_t k = 0; left; k++) {
        int n = snprintf(tag, sizeof(tag), "~s%u", k);
        uint16_t slot = lb_crc16(tag, (size_t)n) & (LB_SLOTS - 1);
        if (!slot_tag_k[slot] && (slot_tag_k[slot] = k + 1))
            left--;
    }
}

size_t lb_slot_tag(uint16_t slot, char *out, size_t cap)
{
    pthread_once(&slot_tags_once, slot_tags_fill);
    int n = snprintf(out, cap, "~s%u", slot_tag_k[slot & (LB_SLOTS - 1)] - 1);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}
