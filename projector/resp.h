/* RESP request encoding into caller-sized memory.
 *
 * The encoders write without bounds checks: callers reserve room first,
 * using LB_RESP_HEADER_MAX per header and the payload lengths. Keeping them
 * inline and unchecked is what lets the planner encode a batch at memcpy
 * speed. */
#ifndef LB_RESP_H
#define LB_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LB_RESP_HEADER_MAX 24 /* '*' or '$', up to 20 digits, CR LF */
#define LB_RESP_INT_MAX    24 /* digits of an int64 with sign */

static inline char *lb_resp_uint(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static inline char *lb_resp_int(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return lb_resp_uint(p, (uint64_t)0 - (uint64_t)v);
    }
    return lb_resp_uint(p, (uint64_t)v);
}

/* "*<n>\r\n" (type '*') or "$<n>\r\n" (type '$'). */
static inline char *lb_resp_header(char *p, char type, uint64_t n)
{
    *p++ = type;
    p = lb_resp_uint(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static inline char *lb_resp_bulk(char *p, const char *bytes, size_t len)
{
    p = lb_resp_header(p, '$', len);
    memcpy(p, bytes, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static inline char *lb_resp_bulk_int(char *p, int64_t v)
{
    char digits[LB_RESP_INT_MAX];
    return lb_resp_bulk(p, digits, (size_t)(lb_resp_int(digits, v) - digits));
}

#endif
