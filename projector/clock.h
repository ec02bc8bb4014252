/* The two clocks the engine reads: the wall clock (event times, expiry,
 * what operators see) and the monotonic clock (timeouts, durations). */
#ifndef LB_CLOCK_H
#define LB_CLOCK_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline int64_t lb_clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds since the Unix epoch. */
static inline int64_t lb_wall_ms(void)
{
    return lb_clock_ms(CLOCK_REALTIME);
}

/* 'ms' since the epoch as "2026-11-23T10:00:00.000Z". */
static inline void lb_utc_format(int64_t ms, char *out, size_t cap)
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n)
        snprintf(out + n, cap - n, ".%03dZ", (int)(ms - (int64_t)secs * 1000));
}

/* Milliseconds on a clock that never jumps. */
static inline int64_t lb_monotonic_ms(void)
{
    return lb_clock_ms(CLOCK_MONOTONIC);
}

#endif
