/* Hash slots: CRC16 and the hash-tag rules of Redis Cluster.
 *
 * The expected slots were obtained from Redis itself (redis-cli CLUSTER
 * KEYSLOT on redis-server 7.0.15), not from this code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "slot.h"

static uint16_t slot_of(const char *key)
{
    return lb_key_slot(key, strlen(key));
}

static void crc16_matches_the_cluster_specification(void **state)
{
    (void)state;
    assert_int_equal(lb_crc16("123456789", 9), 0x31C3);
    assert_int_equal(lb_crc16("", 0), 0);
}

static void plain_keys_hash_whole(void **state)
{
    (void)state;
    assert_int_equal(slot_of("123456789"), 12739);
    assert_int_equal(slot_of("somekey"), 11058);
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of(""), 0);
}

static void hash_tag_is_first_brace_pair_with_content(void **state)
{
    (void)state;
    /* {user1000}.following hashes "user1000" */
    assert_int_equal(slot_of("{user1000}.following"), 3443);
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    assert_int_equal(slot_of("{user1000}.followers"), slot_of("{user1000}.following"));
    /* an empty first tag means no tag: the whole key is hashed */
    assert_int_equal(slot_of("foo{}{bar}"), 8363);
    assert_int_equal(slot_of("foo{}{bar}"), lb_crc16("foo{}{bar}", 10) & 16383);
    /* the tag ends at the first '}' after the first '{' */
    assert_int_equal(slot_of("foo{{bar}}zap"), 4015);
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    /* only the first tag counts */
    assert_int_equal(slot_of("foo{bar}{zap}"), 5061);
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    assert_int_equal(slot_of("a{b}c"), 3300);
    /* an unclosed brace is no tag */
    assert_int_equal(slot_of("{bar"), lb_crc16("{bar", 4) & 16383);
}

static void every_window_of_a_board_shares_its_slot(void **state)
{
    (void)state;
    const char *keys[] = {"lb:{g456}:alltime", "lb:{g456}:daily:2026-05-04",
                          "lb:{g456}:weekly:2026-W18", "lb:{g456}:monthly:2026-05",
                          "lb:{g456}:patch:1.29"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_int_equal(slot_of(keys[i]), slot_of("g456"));
}

/* Each slot's ~intact mark lives under a tag of its own slot (CRC16 as
 * checked above against Redis); tags are short and distinct. */
static void every_slot_has_a_tag_of_its_own(void **state)
{
    (void)state;
    char tag[24], key[40];
    for (uint32_t slot = 0; slot < LB_SLOTS; slot++) {
        size_t n = lb_slot_tag((uint16_t)slot, tag, sizeof(tag));
        assert_true(n >= 3 && n <= 9);
        assert_int_equal(tag[n], '\0');
        snprintf(key, sizeof(key), "lb:~intact{%s}", tag);
        assert_int_equal(slot_of(key), slot);
    }
    /* the smallest number: "~s0" is slot 10320's (redis-cli CLUSTER KEYSLOT '~s0') */
    assert_int_equal(lb_slot_tag(10320, tag, sizeof(tag)), 3);
    assert_string_equal(tag, "~s0");
    assert_int_equal(lb_slot_tag(0, tag, 3), 0); /* does not fit */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc16_matches_the_cluster_specification),
        cmocka_unit_test(plain_keys_hash_whole),
        cmocka_unit_test(hash_tag_is_first_brace_pair_with_content),
        cmocka_unit_test(every_window_of_a_board_shares_its_slot),
        cmocka_unit_test(every_slot_has_a_tag_of_its_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
