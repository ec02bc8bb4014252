/* Command-line errors; see usage.h. */
#include "usage.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
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
