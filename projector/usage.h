/* Command-line errors, the same in every program: one line naming the bad
 * argument, "<program>: <what> (see <program> --help)", and exit status 2
 * (the usage row of the README's exit-code table). */
#ifndef LB_USAGE_H
#define LB_USAGE_H

#define LB_USAGE_EXIT 2

/* The program's name in the messages; main sets it first thing. */
extern const char *lb_usage_program;

/* Prints the message; returns LB_USAGE_EXIT. */
int lb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What getopt_long refused (opterr 0, an optstring starting with ':'): an
 * unknown option or one missing its value. Returns LB_USAGE_EXIT. */
int lb_bad_option(int opt, char *const *argv);

/* An option's number: 0 and '*out' when 'text' is a number in [min, max]
 * (a whole one if 'whole'), else -1 for the caller to name the option. */
int lb_usage_number(const char *text, double min, double max, int whole, double *out);

#endif
