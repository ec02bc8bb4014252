/* Final standings' rules (results.h): when a window closes, the ranks, and
 * the record's bytes, read back by avro-c with schemas/window_result.avsc
 * (the contract consumers use), not by the encoder's own code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avro.h>
#include <cmocka.h>

#include "results.h"

/* committed, high, watermark per partition */
static void the_close_watermark_is_the_lowest_partition_idle_ones_aside(void **state)
{
    (void)state;
    const int64_t idle = 300000; /* 5 min */
    struct lb_partition_mark busy[] = {{100, 120, 5000000}, {50, 50, 4000000}, {7, 9, 4500000}};
    /* a caught-up partition less than idle behind: its own watermark */
    struct lb_partition_mark near[] = {{100, 120, 5000000}, {50, 50, 4800000}};
    assert_int_equal(lb_results_watermark(near, 2, idle), 4800000);
    /* caught up and 1000 s behind: idle, it counts as the highest */
    assert_int_equal(lb_results_watermark(busy, 3, idle), 4500000);
    /* not caught up: it holds, however far behind */
    busy[2].committed = 9;
    assert_int_equal(lb_results_watermark(busy, 3, idle), 5000000);
    busy[1].committed = 40;
    assert_int_equal(lb_results_watermark(busy, 3, idle), 4000000);
    /* a partition that never had an event: nothing to wait for */
    struct lb_partition_mark empty[] = {{100, 100, 5000000}, {-1, 0, -1}};
    assert_int_equal(lb_results_watermark(empty, 2, idle), 5000000);
    /* records not committed yet and no watermark: unknown */
    struct lb_partition_mark unknown[] = {{100, 100, 5000000}, {-1, 10, -1}};
    assert_int_equal(lb_results_watermark(unknown, 2, idle), -1);
    struct lb_partition_mark none[] = {{-1, 0, -1}};
    assert_int_equal(lb_results_watermark(none, 1, idle), -1);
}

static struct lb_scoring scoring(void)
{
    struct lb_scoring s = {.order = LB_ORDER_DESC,
                           .tie_break = LB_TIE_EARLIEST,
                           .resolution_ms = 1000,
                           .epoch_ms = INT64_C(1735689600000), /* 2025-01-01 */
                           .horizon_ms = INT64_C(2114380800000),
                           .score_min = 0,
                           .score_max = 1000000};
    char err[256];
    assert_int_equal(lb_scoring_prepare(&s, "t", err, sizeof(err)), 0);
    return s;
}

/* Positions follow the composite; competition and dense ranks tie on the
 * raw score (equal scores at different times share a rank); a second
 * part continues the first. */
static void ranks_tie_on_the_raw_score(void **state)
{
    (void)state;
    struct lb_scoring s = scoring();
    static const int64_t scores[] = {100, 100, 90, 90, 90, 80};
    const int64_t at = INT64_C(1795000000000);
    struct lb_standing e[6];
    for (int i = 0; i < 6; i++) {
        e[i] = (struct lb_standing){.player = "p", .len = 1};
        assert_int_equal(lb_composite(&s, scores[i], at + i * 1000, &e[i].composite), LB_SCORE_OK);
    }
    lb_results_rank(&s, e, 4, 1, NULL);
    lb_results_rank(&s, e + 4, 2, 5, &e[3]); /* the second part */
    static const int64_t rank[] = {1, 1, 3, 3, 3, 6}, dense[] = {1, 1, 2, 2, 2, 3};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(e[i].position, i + 1);
        assert_int_equal(e[i].rank, rank[i]);
        assert_int_equal(e[i].dense_rank, dense[i]);
        assert_int_equal(e[i].score, scores[i]);
        assert_int_equal(e[i].achieved_at_ms, at + i * 1000);
    }
}

static avro_schema_t load_schema(void)
{
    const char *src = getenv("LB_SOURCE_DIR");
    char path[1024], text[8192];
    snprintf(path, sizeof(path), "%s/schemas/window_result.avsc", src ? src : ".");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof(text), f);
    fclose(f);
    avro_schema_t schema;
    assert_int_equal(avro_schema_from_json_length(text, n, &schema), 0);
    return schema;
}

static const char *string_of(avro_value_t *record, const char *name)
{
    avro_value_t v;
    const char *s;
    size_t len;
    assert_int_equal(avro_value_get_by_name(record, name, &v, NULL), 0);
    assert_int_equal(avro_value_get_string(&v, &s, &len), 0);
    return s;
}

static int64_t long_of(avro_value_t *record, const char *name)
{
    avro_value_t v;
    int64_t l;
    int32_t i;
    assert_int_equal(avro_value_get_by_name(record, name, &v, NULL), 0);
    if (avro_value_get_type(&v) == AVRO_INT32) {
        assert_int_equal(avro_value_get_int(&v, &i), 0);
        return i;
    }
    assert_int_equal(avro_value_get_long(&v, &l), 0);
    return l;
}

/* The bytes: the Confluent frame, then a WindowResult that avro-c reads
 * with the published schema, every field as given; the same input makes
 * the same bytes; a buffer too small makes none. */
static void the_record_reads_back_with_the_published_schema(void **state)
{
    (void)state;
    struct lb_scoring s = scoring();
    struct lb_standing e[3] = {{.player = "alice", .len = 5},
                               {.player = "b\xc3\xa9", .len = 3},
                               {.player = "carol", .len = 5}};
    assert_int_equal(lb_composite(&s, 70, INT64_C(1795000000000), &e[0].composite), 0);
    assert_int_equal(lb_composite(&s, 70, INT64_C(1795000005000), &e[1].composite), 0);
    assert_int_equal(lb_composite(&s, -0, INT64_C(1795000009000), &e[2].composite), 0);
    lb_results_rank(&s, e, 3, 1, NULL);
    struct lb_result_head head = {.board = "game-1",
                                  .window = "weekly:2026-W48",
                                  .kind = LB_WINDOW_WEEKLY,
                                  .start_ms = INT64_C(1795392000000),
                                  .end_ms = INT64_C(1795996800000),
                                  .closed_at_ms = INT64_C(1796000400000),
                                  .players = 1234567,
                                  .part = 1,
                                  .parts = 2,
                                  .schema_id = 0x01020304};
    uint8_t buf[1024], again[1024];
    size_t n = lb_results_encode(&head, e, 3, buf, sizeof(buf));
    assert_true(n > 5);
    assert_true(n <= lb_results_head_max(&head) + 3 * lb_results_entry_max(5));
    assert_int_equal(lb_results_encode(&head, e, 3, again, sizeof(again)), n);
    assert_memory_equal(buf, again, n);
    assert_int_equal(lb_results_encode(&head, e, 3, again, n - 1), 0);
    static const uint8_t frame[] = {0, 1, 2, 3, 4};
    assert_memory_equal(buf, frame, 5);

    avro_schema_t schema = load_schema();
    avro_value_iface_t *iface = avro_generic_class_from_schema(schema);
    avro_value_t record;
    assert_int_equal(avro_generic_value_new(iface, &record), 0);
    avro_reader_t reader = avro_reader_memory((const char *)buf + 5, (int64_t)(n - 5));
    assert_int_equal(avro_value_read(reader, &record), 0);
    assert_string_equal(string_of(&record, "board"), "game-1");
    assert_string_equal(string_of(&record, "window"), "weekly:2026-W48");
    avro_value_t kind;
    int symbol;
    assert_int_equal(avro_value_get_by_name(&record, "kind", &kind, NULL), 0);
    assert_int_equal(avro_value_get_enum(&kind, &symbol), 0);
    assert_string_equal(avro_schema_enum_get(avro_value_get_schema(&kind), symbol), "WEEKLY");
    assert_int_equal(long_of(&record, "start"), head.start_ms);
    assert_int_equal(long_of(&record, "end"), head.end_ms);
    assert_int_equal(long_of(&record, "closed_at"), head.closed_at_ms);
    assert_int_equal(long_of(&record, "players"), 1234567);
    assert_int_equal(long_of(&record, "part"), 1);
    assert_int_equal(long_of(&record, "parts"), 2);
    avro_value_t entries, entry;
    size_t count;
    assert_int_equal(avro_value_get_by_name(&record, "entries", &entries, NULL), 0);
    assert_int_equal(avro_value_get_size(&entries, &count), 0);
    assert_int_equal(count, 3);
    for (size_t i = 0; i < count; i++) {
        assert_int_equal(avro_value_get_by_index(&entries, i, &entry, NULL), 0);
        assert_string_equal(string_of(&entry, "player"), e[i].player);
        assert_int_equal(long_of(&entry, "score"), e[i].score);
        assert_int_equal(long_of(&entry, "achieved_at"), e[i].achieved_at_ms);
        assert_int_equal(long_of(&entry, "position"), (int64_t)i + 1);
        assert_int_equal(long_of(&entry, "rank"), i < 2 ? 1 : 3);
        assert_int_equal(long_of(&entry, "dense_rank"), i < 2 ? 1 : 2);
    }
    avro_reader_free(reader);
    avro_value_decref(&record);
    avro_value_iface_decref(iface);
    avro_schema_decref(schema);
}

static void set_long(avro_value_t *record, const char *name, int64_t v)
{
    avro_value_t f;
    assert_int_equal(avro_value_get_by_name(record, name, &f, NULL), 0);
    if (avro_value_get_type(&f) == AVRO_INT32)
        assert_int_equal(avro_value_set_int(&f, (int32_t)v), 0);
    else
        assert_int_equal(avro_value_set_long(&f, v), 0);
}

static void set_string(avro_value_t *record, const char *name, const char *v)
{
    avro_value_t f;
    assert_int_equal(avro_value_get_by_name(record, name, &f, NULL), 0);
    assert_int_equal(avro_value_set_string(&f, v), 0);
}

struct seen {
    char players[4][16];
    int64_t score[4], at[4], position[4], rank[4], dense[4];
    int n;
};

static int see(void *ctx, const struct lb_standing *e)
{
    struct seen *s = ctx;
    if (s->n == 4)
        return -1;
    snprintf(s->players[s->n], sizeof(s->players[0]), "%.*s", (int)e->len, e->player);
    s->score[s->n] = e->score;
    s->at[s->n] = e->achieved_at_ms;
    s->position[s->n] = e->position;
    s->rank[s->n] = e->rank;
    s->dense[s->n] = e->dense_rank;
    s->n++;
    return 0;
}

/* Reading back (what replay and the closer restore a lost board's final
 * standings from): a record avro-c wrote with the published schema decodes
 * to every field it holds; cut short, or with a byte more, it is refused. */
static void a_record_avro_c_wrote_reads_back(void **state)
{
    (void)state;
    avro_schema_t schema = load_schema();
    avro_value_iface_t *iface = avro_generic_class_from_schema(schema);
    avro_value_t record, f, entries, entry;
    assert_int_equal(avro_generic_value_new(iface, &record), 0);
    set_string(&record, "board", "game-\xc3\xa9");
    set_string(&record, "window", "monthly:2026-11");
    assert_int_equal(avro_value_get_by_name(&record, "kind", &f, NULL), 0);
    assert_int_equal(avro_value_set_enum(&f, 2), 0);
    set_long(&record, "start", INT64_C(1793491200000));
    set_long(&record, "end", INT64_C(1796083200000));
    set_long(&record, "closed_at", INT64_C(1796086800000));
    set_long(&record, "players", 77);
    set_long(&record, "part", 2);
    set_long(&record, "parts", 3);
    assert_int_equal(avro_value_get_by_name(&record, "entries", &entries, NULL), 0);
    static const char *const names[] = {"zed", "amy", "bo"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(avro_value_append(&entries, &entry, NULL), 0);
        set_string(&entry, "player", names[i]);
        set_long(&entry, "score", i == 2 ? -5 : 900 - i);
        set_long(&entry, "achieved_at", INT64_C(1795000000000) + i);
        set_long(&entry, "position", 1001 + i);
        set_long(&entry, "rank", 1001 + i);
        set_long(&entry, "dense_rank", 40 + i);
    }
    uint8_t buf[512] = {0, 0, 0, 0, 7};
    avro_writer_t writer = avro_writer_memory((char *)buf + 5, sizeof(buf) - 5);
    assert_int_equal(avro_value_write(writer, &record), 0);
    size_t n = 5 + (size_t)avro_writer_tell(writer);

    struct lb_result_view v;
    struct seen seen = {0};
    assert_int_equal(lb_results_decode(buf, n, &v, see, &seen), 0);
    assert_int_equal(v.schema_id, 7);
    assert_int_equal(v.board_len, 7);
    assert_memory_equal(v.board, "game-\xc3\xa9", 7);
    assert_int_equal(v.window_len, 15);
    assert_memory_equal(v.window, "monthly:2026-11", 15);
    assert_int_equal(v.kind, 2);
    assert_int_equal(v.start_ms, INT64_C(1793491200000));
    assert_int_equal(v.end_ms, INT64_C(1796083200000));
    assert_int_equal(v.closed_at_ms, INT64_C(1796086800000));
    assert_int_equal(v.players, 77);
    assert_int_equal(v.part, 2);
    assert_int_equal(v.parts, 3);
    assert_int_equal(seen.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(seen.players[i], names[i]);
        assert_int_equal(seen.score[i], i == 2 ? -5 : 900 - i);
        assert_int_equal(seen.at[i], INT64_C(1795000000000) + i);
        assert_int_equal(seen.position[i], 1001 + i);
        assert_int_equal(seen.rank[i], 1001 + i);
        assert_int_equal(seen.dense[i], 40 + i);
    }
    for (size_t cut = 0; cut < n; cut++)
        assert_int_equal(lb_results_decode(buf, cut, &v, NULL, NULL), -1);
    assert_int_equal(lb_results_decode(buf, n + 1, &v, NULL, NULL), -1);
    buf[0] = 1; /* not the Confluent frame */
    assert_int_equal(lb_results_decode(buf, n, &v, NULL, NULL), -1);
    avro_writer_free(writer);
    avro_value_decref(&record);
    avro_value_iface_decref(iface);
    avro_schema_decref(schema);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_close_watermark_is_the_lowest_partition_idle_ones_aside),
        cmocka_unit_test(ranks_tie_on_the_raw_score),
        cmocka_unit_test(the_record_reads_back_with_the_published_schema),
        cmocka_unit_test(a_record_avro_c_wrote_reads_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
