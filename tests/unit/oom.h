/* Out-of-memory injection for the unit tests. A test binary that links
 * oom.c with -Wl,--wrap=malloc,calloc,realloc,strdup,strndup (lb_oom_test
 * in tests/CMakeLists.txt) routes every allocation of the project's own
 * code, and of the test, through a counter; the libraries' allocations
 * (hiredis, libyaml, avro-c, librdkafka: shared objects) are not counted.
 * Only the thread that runs the sweep counts: a fake server's thread does
 * not. */
#ifndef LB_TEST_OOM_H
#define LB_TEST_OOM_H

#include <stddef.h>

/* Runs 'scenario' once per allocation it makes, failing that allocation:
 * the 1st, the 1+stride-th, ... until a run makes fewer allocations than
 * the one to fail. 'scenario' returns 0 when it handled what it met (a
 * clean error included), -1 when it saw a wrong result; it must free what
 * it made. After each run, leaks fail the test (under LeakSanitizer). The
 * stride is LB_OOM_STRIDE (default 'stride'; 1: every allocation); with
 * LB_OOM_TRACE set, each failed allocation's stack goes to stderr. Returns
 * the number of runs. */
size_t oom_sweep(const char *what, int (*scenario)(void *ctx), void *ctx, size_t stride);

/* Whether an allocation failed in the run under way. */
int oom_failed(void);
/* Stops (0) or resumes (1) counting on this thread inside a scenario, for
 * the checks it makes itself. */
void oom_counting(int on);

#endif
