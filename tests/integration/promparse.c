/* promparse: a strict parser of the Prometheus text exposition format
 * (version 0.0.4), for the tests: they parse /metrics with it instead of
 * grepping for one line.
 *
 * Reads a page on stdin and checks: every line is a comment, blank, or a
 * sample "name{label="value",...} value [timestamp]"; names and label names
 * are valid; label values are properly escaped; values are numbers (or
 * +Inf, -Inf, NaN); every sample belongs to a family whose "# TYPE" came
 * first (histograms: name_bucket/_sum/_count), no family is declared twice,
 * and a histogram's buckets are cumulative, end with le="+Inf", and that
 * bucket equals _count. Prints each sample as "name{labels} value", labels
 * in page order, and exits 0; on the first error prints "line N: why" to
 * stderr and exits 1.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAMILIES 256

struct family {
    char name[128];
    char type[16];
};

static struct family families[MAX_FAMILIES];
static int nfamilies;
static int lineno;

static void fail(const char *why, const char *line)
{
    fprintf(stderr, "line %d: %s: %s", lineno, why, line);
    exit(1);
}

static int name_char(int c, int first)
{
    return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

static const struct family *family_of(const char *sample)
{
    for (int i = 0; i < nfamilies; i++) {
        size_t n = strlen(families[i].name);
        if (strncmp(sample, families[i].name, n) != 0)
            continue;
        const char *rest = sample + n;
        if (*rest == '\0')
            return &families[i];
        if (strcmp(families[i].type, "histogram") == 0 &&
            (strcmp(rest, "_bucket") == 0 || strcmp(rest, "_sum") == 0 ||
             strcmp(rest, "_count") == 0))
            return &families[i];
    }
    return NULL;
}

static int parse_value(const char *text, double *v)
{
    char *end;
    if (strcmp(text, "+Inf") == 0) {
        *v = INFINITY;
        return 0;
    }
    if (strcmp(text, "-Inf") == 0) {
        *v = -INFINITY;
        return 0;
    }
    if (strcmp(text, "NaN") == 0) {
        *v = NAN;
        return 0;
    }
    *v = strtod(text, &end);
    return end != text && *end == '\0' ? 0 : -1;
}

/* histogram state of the family being read */
static char hist_name[128];
static double hist_last_bucket = -1;
static double hist_inf = -1;

int main(void)
{
    char line[8192];
    while (fgets(line, sizeof(line), stdin)) {
        lineno++;
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n')
            fail("line not terminated by a newline", line);
        if (line[0] == '\n')
            continue;
        if (line[0] == '#') {
            char kind[8], name[128], rest[64];
            if (sscanf(line, "# %7s %127s %63s", kind, name, rest) >= 2 &&
                strcmp(kind, "TYPE") == 0) {
                if (sscanf(line, "# TYPE %127s %63s", name, rest) != 2)
                    fail("malformed TYPE", line);
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
                    strcmp(rest, "summary") && strcmp(rest, "untyped"))
                    fail("unknown type", line);
                for (int i = 0; i < nfamilies; i++)
                    if (strcmp(families[i].name, name) == 0)
                        fail("family declared twice", line);
                if (nfamilies == MAX_FAMILIES)
                    fail("too many families", line);
                snprintf(families[nfamilies].name, sizeof(families[0].name), "%s", name);
                snprintf(families[nfamilies].type, sizeof(families[0].type), "%.15s", rest);
                nfamilies++;
            }
            continue;
        }
        /* a sample */
        const char *p = line;
        char name[128], labels[4096] = "";
        size_t n = 0, l = 0;
        if (!name_char(*p, 1))
            fail("bad metric name", line);
        while (name_char(*p, 0) && n + 1 < sizeof(name))
            name[n++] = *p++;
        name[n] = '\0';
        char le[64] = "";
        if (*p == '{') {
            p++;
            while (*p != '}') {
                char lname[128], lvalue[1024];
                size_t ln = 0, lv = 0;
                if (!name_char(*p, 1))
                    fail("bad label name", line);
                while (name_char(*p, 0) && ln + 1 < sizeof(lname))
                    lname[ln++] = *p++;
                lname[ln] = '\0';
                if (p[0] != '=' || p[1] != '"')
                    fail("label without =\"value\"", line);
                p += 2;
                while (*p != '"') {
                    if (*p == '\n' || *p == '\0')
                        fail("unterminated label value", line);
                    if (*p == '\\') {
                        p++;
                        if (*p != '\\' && *p != '"' && *p != 'n')
                            fail("bad escape in label value", line);
                    }
                    if (lv + 1 < sizeof(lvalue))
                        lvalue[lv++] = *p;
                    p++;
                }
                lvalue[lv] = '\0';
                p++;
                if (strcmp(lname, "le") == 0)
                    snprintf(le, sizeof(le), "%.63s", lvalue);
                l += (size_t)snprintf(labels + l, sizeof(labels) - l, "%s%s=\"%s\"", l ? "," : "",
                                      lname, lvalue);
                if (*p == ',')
                    p++;
                else if (*p != '}')
                    fail("expected , or } after a label", line);
            }
            p++;
        }
        if (*p != ' ')
            fail("expected a space before the value", line);
        p++;
        char value[128];
        size_t v = 0;
        while (*p && *p != ' ' && *p != '\n' && v + 1 < sizeof(value))
            value[v++] = *p++;
        value[v] = '\0';
        double number;
        if (parse_value(value, &number) != 0)
            fail("bad value", line);
        if (*p == ' ') { /* optional timestamp */
            char *end;
            strtoll(p + 1, &end, 10);
            p = end;
        }
        if (*p != '\n')
            fail("trailing characters", line);
        const struct family *f = family_of(name);
        if (!f)
            fail("sample before its # TYPE", line);
        if (strcmp(f->type, "histogram") == 0) {
            if (strcmp(hist_name, f->name) != 0) {
                snprintf(hist_name, sizeof(hist_name), "%s", f->name);
                hist_last_bucket = -1;
                hist_inf = -1;
            }
            size_t fn = strlen(f->name);
            if (strcmp(name + fn, "_bucket") == 0) {
                if (!le[0])
                    fail("bucket without le", line);
                if (number < hist_last_bucket)
                    fail("buckets not cumulative", line);
                hist_last_bucket = number;
                if (strcmp(le, "+Inf") == 0)
                    hist_inf = number;
            } else if (strcmp(name + fn, "_count") == 0) {
                if (hist_inf < 0)
                    fail("histogram without an le=\"+Inf\" bucket", line);
                if (number != hist_inf)
                    fail("_count differs from the +Inf bucket", line);
            }
        }
        printf("%s{%s} %s\n", name, labels, value);
    }
    return 0;
}
