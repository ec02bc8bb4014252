/* The two clocks the engine reads: the wall clock (event times, expiry,
 * what operators see) and the monotonic clock (timeouts, durations). */
#ifndef LB_CLOCK_H
#define LB_CLOCK_H

#include <stdint.h>
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

/* Milliseconds on a clock that never jumps. */
static inline int64_t lb_monotonic_ms(void)
{
    return lb_clock_ms(CLOCK_MONOTONIC);
}

#endif
