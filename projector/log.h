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

#endif
