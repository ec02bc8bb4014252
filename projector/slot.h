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

#endif
