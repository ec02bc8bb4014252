/* See oom.h. */
#include "oom.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <execinfo.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang's way of saying it */
#define LB_OOM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(LB_OOM_ASAN)
#include <sanitizer/lsan_interface.h>
#define LEAK_CHECK() __lsan_do_recoverable_leak_check()
#else
#define LEAK_CHECK() 0
#endif

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t count, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static _Thread_local int counting; /* this thread runs a sweep */
static size_t made, fail_at, failed;

/* Whether this allocation is the one to fail. */
static int fail_now(void)
{
    if (!counting)
        return 0;
    if (++made != fail_at)
        return 0;
    failed++;
    if (getenv("LB_OOM_TRACE")) { /* where it failed, to debug a finding */
        void *frames[16];
        counting = 0;
        backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
        counting = 1;
    }
    return 1;
}

void *__wrap_malloc(size_t size)
{
    return fail_now() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t count, size_t size)
{
    return fail_now() ? NULL : __real_calloc(count, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    return fail_now() ? NULL : __real_realloc(p, size);
}

char *__wrap_strdup(const char *s)
{
    return fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now() ? NULL : __real_strndup(s, n);
}

int oom_failed(void)
{
    return failed > 0;
}

void oom_counting(int on)
{
    counting = on;
}

size_t oom_sweep(const char *what, int (*scenario)(void *ctx), void *ctx, size_t stride)
{
    const char *env = getenv("LB_OOM_STRIDE");
    if (env && atoi(env) > 0)
        stride = (size_t)atoi(env);
    size_t runs = 0;
    for (fail_at = 1;; fail_at += stride) {
        made = failed = 0;
        counting = 1;
        int rc = scenario(ctx);
        counting = 0;
        runs++;
        if (rc != 0)
            fail_msg("%s: allocation %zu failed: wrong result", what, fail_at);
        if (LEAK_CHECK())
            fail_msg("%s: allocation %zu failed: a leak (above)", what, fail_at);
        if (made < fail_at)
            break; /* it no longer reaches the allocation to fail */
    }
    print_message("%s: %zu allocations, %zu runs (stride %zu)\n", what, made, runs, stride);
    return runs;
}
