/* The set of names with stable places (names.h): places in the order added,
 * found again through growth, names that share a prefix or differ only in
 * length told apart, and out of memory leaving the set as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "names.h"
#include "oom.h"

static void places_are_stable_through_growth(void **state)
{
    (void)state;
    struct lb_names n = {0};
    char name[32];
    for (int i = 0; i < 5000; i++) {
        int len = snprintf(name, sizeof(name), "res-%d", i);
        assert_int_equal(lb_names_add(&n, name, (size_t)len), i);
    }
    assert_int_equal(n.count, 5000);
    for (int i = 0; i < 5000; i++) {
        int len = snprintf(name, sizeof(name), "res-%d", i);
        assert_int_equal(lb_names_find(&n, name, (size_t)len), i);
        assert_string_equal(n.items[i], name);
        assert_int_equal(lb_names_add(&n, name, (size_t)len), i); /* held: not added again */
    }
    assert_int_equal(n.count, 5000);
    assert_int_equal(lb_names_find(&n, "res-5000", 8), -1);
    assert_false(lb_names_has(&n, "res-", 4));
    lb_names_free(&n);
    assert_int_equal(lb_names_find(&n, "res-1", 5), -1);
}

static void prefixes_and_lengths_are_told_apart(void **state)
{
    (void)state;
    struct lb_names n = {0};
    assert_int_equal(lb_names_add(&n, "res-10", 5), 0); /* "res-1" */
    assert_int_equal(lb_names_add(&n, "res-10", 6), 1);
    assert_int_equal(lb_names_find(&n, "res-1", 5), 0);
    assert_int_equal(lb_names_find(&n, "res-10", 6), 1);
    assert_int_equal(lb_names_find(&n, "res-100", 7), -1);
    /* a name with a NUL inside is not the name it starts with */
    assert_int_equal(lb_names_find(&n, "res-1\0x", 7), -1);
    assert_int_equal(lb_names_add(&n, "", 0), 2);
    assert_int_equal(lb_names_find(&n, "", 0), 2);
    lb_names_free(&n);
}

static int add_many(void *ctx)
{
    (void)ctx;
    struct lb_names n = {0};
    char name[32];
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++) {
        int len = snprintf(name, sizeof(name), "b%d", i);
        size_t before = n.count;
        long at = lb_names_add(&n, name, (size_t)len);
        if (at < 0) {
            /* the set is as it was: every name added before is still found */
            rc = n.count == before ? 0 : -1;
            for (int k = 0; k < i && rc == 0; k++) {
                len = snprintf(name, sizeof(name), "b%d", k);
                rc = lb_names_find(&n, name, (size_t)len) == k ? 0 : -1;
            }
            break;
        }
        rc = at == i ? 0 : -1;
    }
    lb_names_free(&n);
    return rc;
}

static void out_of_memory_leaves_the_set_as_it_was(void **state)
{
    (void)state;
    assert_true(oom_sweep("adding 100 names", add_many, NULL, 1) > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(places_are_stable_through_growth),
        cmocka_unit_test(prefixes_and_lengths_are_told_apart),
        cmocka_unit_test(out_of_memory_leaves_the_set_as_it_was),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
