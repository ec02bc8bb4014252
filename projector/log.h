/* Leveled logging to stderr.
 *
 * Every line is one record in logfmt (ts=... level=... component=...
 * msg="...") or, with lb_log_json, one JSON object with the same fields, so
 * that a log shipper can parse it and a human can read it. The macros test the level
 * before evaluating their arguments, so a debug line costs one comparison when
 * debug is off. Never pass secrets to these functions: nothing here masks them.
 */
#ifndef LB_LOG_H
#define LB_LOG_H

enum lb_log_level { LB_LOG_ERROR = 0, LB_LOG_WARN, LB_LOG_INFO, LB_LOG_DEBUG };

#include <signal.h>
#include <stdint.h>

extern int lb_log_threshold;
extern int lb_log_json; /* non-zero: JSON lines instead of logfmt */

/* Set by the daemon's SIGHUP handler: re-read log.level from the file. */
extern volatile sig_atomic_t lb_log_reload;

/* Writes one record; use the macros below instead. 'component' names the
 * subsystem ("kafka", "redis", ...). Thread-safe: one write(2) per record. */
void lb_log_write(enum lb_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses "error", "warn", "info", "debug". Returns -1 for anything else. */
int lb_log_level_parse(const char *name);
const char *lb_log_level_name(enum lb_log_level level);

#define lb_log(level, component, ...)                                                              \
    do {                                                                                           \
        if ((int)(level) <= lb_log_threshold)                                                      \
            lb_log_write((level), (component), __VA_ARGS__);                                       \
    } while (0)

#define LB_ERROR(component, ...) lb_log(LB_LOG_ERROR, component, __VA_ARGS__)
#define LB_WARN(component, ...)  lb_log(LB_LOG_WARN, component, __VA_ARGS__)
#define LB_INFO(component, ...)  lb_log(LB_LOG_INFO, component, __VA_ARGS__)
#define LB_DEBUG(component, ...) lb_log(LB_LOG_DEBUG, component, __VA_ARGS__)

/* A repeating message, logged at most once per interval. Every retry loop
 * logs through one of these, so an outage of any length writes a bounded
 * number of lines; the next line that gets through says how many were
 * suppressed. Not thread-safe: one per thread and call site. */
struct lb_ratelimit {
    int64_t next_ms;     /* monotonic time before which messages are suppressed */
    uint64_t suppressed; /* messages dropped since the last one written */
};

/* Returns 1 when a message may be written now and moves the window on,
 * storing in '*suppressed' how many were dropped before it; 0 (and counts
 * the message) otherwise. */
int lb_ratelimit_allow(struct lb_ratelimit *rl, int64_t interval_ms, uint64_t *suppressed);

/* Logs like lb_log, at most once per 'interval_ms' for 'rl', with
 * " (suppressed N similar)" appended when some were dropped. */
#define lb_log_every(rl, interval_ms, level, component, fmt, ...)                                  \
    do {                                                                                           \
        uint64_t lb_suppressed_;                                                                   \
        if ((int)(level) <= lb_log_threshold &&                                                    \
            lb_ratelimit_allow((rl), (interval_ms), &lb_suppressed_)) {                            \
            if (lb_suppressed_)                                                                    \
                lb_log_write((level), (component), fmt " (suppressed %llu similar)", __VA_ARGS__,  \
                             (unsigned long long)lb_suppressed_);                                  \
            else                                                                                   \
                lb_log_write((level), (component), fmt, __VA_ARGS__);                              \
        }                                                                                          \
    } while (0)

#endif
