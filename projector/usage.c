/* Command-line errors; see usage.h. */
#include "usage.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lb_usage_program = "projector";

int lb_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", lb_usage_program);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s --help)\n", lb_usage_program);
    return LB_USAGE_EXIT;
}

int lb_bad_option(int opt, char *const *argv)
{
    const char *arg = argv[optind - 1];
    if (opt == ':')
        return lb_usage_error("option '%s' needs a value", arg);
    if (optopt && strncmp(arg, "--", 2) != 0)
        return lb_usage_error("unknown option '-%c'", optopt);
    return lb_usage_error("unknown option '%s'", arg);
}

int lb_usage_number(const char *text, double min, double max, int whole, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min && v <= max) ||
        (whole && v != (double)(long long)v))
        return -1;
    *out = v;
    return 0;
}
