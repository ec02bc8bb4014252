/* Log records on stderr, logfmt or JSON lines, one write(2) each so
 * concurrent threads (the librdkafka log callback runs on its own threads)
 * never interleave lines. */
#include "log.h"
#include "clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int lb_log_threshold = LB_LOG_INFO;
int lb_log_json;
volatile sig_atomic_t lb_log_reload;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *lb_log_level_name(enum lb_log_level level)
{
    return level_names[level];
}

int lb_log_level_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

/* Appends 'msg' quoted for logfmt, or as a JSON string: backslash, quote
 * and control characters are escaped so one record always stays on one
 * line. */
static size_t append_quoted(char *out, size_t pos, size_t cap, const char *msg)
{
    if (pos < cap)
        out[pos++] = '"';
    for (const unsigned char *p = (const unsigned char *)msg; *p && pos + 8 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[pos++] = '\\';
            out[pos++] = (char)*p;
        } else if (*p == '\n') {
            out[pos++] = '\\';
            out[pos++] = 'n';
        } else if (*p < 0x20) {
            if (lb_log_json)
                pos += (size_t)snprintf(out + pos, cap - pos, "\\u%04x", *p);
            else
                out[pos++] = ' ';
        } else {
            out[pos++] = (char)*p;
        }
    }
    if (pos < cap)
        out[pos++] = '"';
    return pos;
}

void lb_log_write(enum lb_log_level level, const char *component, const char *fmt, ...)
{
    char msg[1024], line[2200];
    struct timespec now;
    struct tm tm;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    int n =
        snprintf(line, sizeof(line),
                 lb_log_json ? "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\","
                               "\"component\":\"%s\",\"msg\":"
                             : "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s component=%s msg=",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 now.tv_nsec / 1000000, level_names[level], component);
    size_t pos = append_quoted(line, (size_t)n, sizeof(line) - 2, msg);
    if (lb_log_json)
        line[pos++] = '}';
    line[pos++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, pos);
    (void)ignored;
}

int lb_ratelimit_allow(struct lb_ratelimit *rl, int64_t interval_ms, uint64_t *suppressed)
{
    int64_t now = lb_monotonic_ms();
    if (rl->next_ms && now < rl->next_ms) {
        rl->suppressed++;
        return 0;
    }
    *suppressed = rl->suppressed;
    rl->suppressed = 0;
    rl->next_ms = now + interval_ms;
    return 1;
}
