/* CRC16 with polynomial 0x1021, initial value 0, no reflection (XMODEM), as
 * Redis Cluster specifies. A bit-at-a-time loop: slots are computed once per
 * board per batch, never per event, so a table would buy nothing. */
#include "slot.h"

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
