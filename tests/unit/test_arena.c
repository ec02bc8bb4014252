/* The per-batch arena and the growable buffer (commands in RESP). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "arena.h"

static void allocations_are_aligned_and_distinct(void **state)
{
    (void)state;
    struct lb_arena arena;
    lb_arena_init(&arena, 4096);
    char *a = lb_arena_alloc(&arena, 3);
    char *b = lb_arena_alloc(&arena, 100000); /* larger than a chunk */
    char *c = lb_arena_calloc(&arena, 10, 8);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal((uintptr_t)a % 16, 0);
    assert_int_equal((uintptr_t)b % 16, 0);
    assert_int_equal((uintptr_t)c % 16, 0);
    memset(b, 0xaa, 100000);
    for (int i = 0; i < 80; i++)
        assert_int_equal(c[i], 0);
    assert_null(lb_arena_calloc(&arena, SIZE_MAX / 2, 4));
    lb_arena_free(&arena);
}

static void reset_keeps_one_chunk_for_the_next_batch(void **state)
{
    (void)state;
    struct lb_arena arena;
    lb_arena_init(&arena, 4096);
    for (int i = 0; i < 100; i++)
        assert_non_null(lb_arena_alloc(&arena, 1000));
    lb_arena_reset(&arena);
    assert_non_null(arena.head);
    char *first = lb_arena_alloc(&arena, 1000);
    lb_arena_reset(&arena);
    assert_ptr_equal(lb_arena_alloc(&arena, 1000), first);
    lb_arena_free(&arena);
}

static void buffer_grows_and_keeps_content(void **state)
{
    (void)state;
    struct lb_buf buf = {0};
    for (int i = 0; i < 10000; i++)
        assert_int_equal(lb_buf_append(&buf, "abc", 3), 0);
    assert_int_equal(buf.len, 30000);
    assert_memory_equal(buf.data + 29997, "abc", 3);
    lb_buf_free(&buf);
    assert_null(buf.data);
}

/* Commands appended in RESP, as the Redis protocol spells them: arguments
 * by their lengths (bytes after a NUL included) or, without lengths, as
 * strings. */
static void commands_are_appended_in_resp(void **state)
{
    (void)state;
    struct lb_buf buf = {0};
    const char *get[] = {"HGETALL", "lb:{b}:~open"};
    assert_int_equal(lb_buf_command(&buf, 2, get, NULL), 0);
    const char *set[] = {"SET", "k\0x"};
    size_t setlen[] = {3, 3};
    assert_int_equal(lb_buf_command(&buf, 2, set, setlen), 0);
    static const char want[] = "*2\r\n$7\r\nHGETALL\r\n$12\r\nlb:{b}:~open\r\n"
                               "*2\r\n$3\r\nSET\r\n$3\r\nk\0x\r\n";
    assert_int_equal(buf.len, sizeof(want) - 1);
    assert_memory_equal(buf.data, want, sizeof(want) - 1);
    lb_buf_free(&buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocations_are_aligned_and_distinct),
        cmocka_unit_test(reset_keeps_one_chunk_for_the_next_batch),
        cmocka_unit_test(buffer_grows_and_keeps_content),
        cmocka_unit_test(commands_are_appended_in_resp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
