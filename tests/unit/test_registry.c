/* The schema registry client against an HTTP server in the test process
 * (libmicrohttpd) that gives each schema id a canned answer: a schema, 404
 * with and without error_code 40403, 500, a body that is not JSON, schema
 * types and references the projector cannot read, credentials. */
#include "event.h"
#include "registry.h"

#include <microhttpd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static int hits[16];
static char paths[16][128];
static int port;
static struct MHD_Daemon *server;

/* A body of more than 1 MiB. */
static const char *big(void)
{
    static char text[1200001];
    if (!text[0])
        memset(text, 'x', sizeof(text) - 1);
    return text;
}

/* What the registry answers for id 'id' (under the base path /base). */
static unsigned canned(int id, const char **body)
{
    switch (id) {
    case 10:
        *body = big();
        return 200;
    case 11: /* a proxy's error page */
        *body = big();
        return 503;
    case 1:
        *body = "{\"schema\": \"{\\\"type\\\": \\\"record\\\", \\\"name\\\": \\\"ScoreEvent\\\", "
                "\\\"namespace\\\": \\\"leaderboard.v1\\\", \\\"fields\\\": [{\\\"name\\\": "
                "\\\"event_id\\\", \\\"type\\\": \\\"string\\\"}, {\\\"name\\\": \\\"board\\\", "
                "\\\"type\\\": \\\"string\\\"}, {\\\"name\\\": \\\"player\\\", \\\"type\\\": "
                "\\\"string\\\"}, {\\\"name\\\": \\\"score\\\", \\\"type\\\": \\\"long\\\"}, "
                "{\\\"name\\\": \\\"ts\\\", \\\"type\\\": \\\"long\\\"}]}\", \"schemaType\": "
                "\"AVRO\", \"references\": []}";
        return 200;
    case 2:
        *body = "{\"error_code\": 40403, \"message\": \"Schema not found\"}";
        return 404;
    case 3:
        *body = "<html>Not Found</html>";
        return 404;
    case 4:
        *body = "{\"error_code\": 50001, \"message\": \"Error in the backend data store\"}";
        return 500;
    case 5:
        *body = "{\"schema\": \"syntax = \\\"proto3\\\";\", \"schemaType\": \"PROTOBUF\"}";
        return 200;
    case 6:
        *body = "{\"schema\": \"{\\\"type\\\": \\\"record\\\", \\\"name\\\": \\\"E\\\", "
                "\\\"fields\\\": []}\", \"references\": [{\"name\": \"x\", \"subject\": \"y\", "
                "\"version\": 1}]}";
        return 200;
    case 7:
        *body = "this is not json";
        return 200;
    case 9: /* slow: answers after 600 ms */
        usleep(600 * 1000);
        return canned(1, body);
    case 8: /* no board: a writer the reader cannot take */
        *body = "{\"schema\": \"{\\\"type\\\": \\\"record\\\", \\\"name\\\": \\\"ScoreEvent\\\", "
                "\\\"fields\\\": [{\\\"name\\\": \\\"event_id\\\", \\\"type\\\": "
                "\\\"string\\\"}]}\"}";
        return 200;
    default:
        *body = "{\"error_code\": 40403, \"message\": \"Schema not found\"}";
        return 404;
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **con_cls)
{
    (void)cls;
    (void)method;
    (void)version;
    (void)data;
    (void)size;
    (void)con_cls;
    int id = 0, authed = 1;
    const char *body = "{\"error_code\": 404}";
    unsigned status = 404;
    const char *rest = url;
    if (strncmp(url, "/auth/", 6) == 0) { /* basic auth lb:pw required */
        char *pass = NULL, *who = MHD_basic_auth_get_username_password(conn, &pass);
        authed = who && pass && strcmp(who, "lb") == 0 && strcmp(pass, "pw") == 0;
        MHD_free(who);
        MHD_free(pass);
        rest = url + 5;
    } else if (strncmp(url, "/base/", 6) == 0) {
        rest = url + 5;
    }
    if (sscanf(rest, "/schemas/ids/%d", &id) == 1 && id >= 0 && id < 16) {
        hits[id]++;
        snprintf(paths[id], sizeof(paths[id]), "%s", url);
        status = canned(id, &body);
    }
    if (!authed) {
        status = 401;
        body = "{\"error_code\": 401, \"message\": \"Unauthorized\"}";
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static int start_server(void **state)
{
    (void)state;
    server = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handle, NULL,
                              MHD_OPTION_END);
    if (!server)
        return -1;
    port = MHD_get_daemon_info(server, MHD_DAEMON_INFO_BIND_PORT)->port;
    return 0;
}

static int stop_server(void **state)
{
    (void)state;
    MHD_stop_daemon(server);
    return 0;
}

static struct lb_registry *open_registry(const char *path, const char *user, const char *password)
{
    char url[128], err[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    struct lb_registry_options o = {
        .url = url, .user = user, .password = password, .timeout_ms = 2000};
    struct lb_registry *r = lb_registry_new(&o, err, sizeof(err));
    if (!r)
        fail_msg("lb_registry_new: %s", err);
    memset(hits, 0, sizeof(hits));
    return r;
}

/* Decodes a Confluent frame of 'id' with an empty body: the answer says
 * what the decoder knows of the id. */
static enum lb_reject decode_id(struct lb_decoder *d, int32_t id, char *detail, size_t len)
{
    uint8_t frame[6] = {
        0, (uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id, 0};
    struct lb_arena arena;
    struct lb_event ev;
    lb_arena_init(&arena, 1024);
    enum lb_reject r = lb_decode(d, frame, sizeof(frame), &ev, &arena, detail, len);
    lb_arena_free(&arena);
    return r;
}

static void a_fetched_schema_serves_and_is_asked_for_once(void **state)
{
    (void)state;
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry *r = open_registry("/base/", NULL, NULL); /* a base path, a trailing '/' */
    assert_int_equal(lb_registry_resolve(r, d, 1, 1000), 1);
    assert_true(lb_decoder_has(d, 1));
    assert_string_equal(paths[1], "/base/schemas/ids/1");
    for (int i = 0; i < 5; i++)
        assert_int_equal(lb_registry_resolve(r, d, 1, 2000 + i), 1);
    assert_int_equal(hits[1], 1);
    /* compiled like a local one: an empty body is malformed, not unknown */
    char detail[200];
    assert_int_equal(decode_id(d, 1, detail, sizeof(detail)), LB_REJECT_MALFORMED);
    assert_int_equal(lb_registry_stats(r)->fetched, 1);
    assert_int_equal(lb_registry_stats(r)->up, 1);
    lb_registry_free(r);
    lb_decoder_free(d);
}

static void an_unknown_id_is_rejected_and_asked_for_again_later(void **state)
{
    (void)state;
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry *r = open_registry("/base", NULL, NULL);
    char detail[200];
    assert_int_equal(lb_decoder_set_unknown_hint(d, "; the registry does not know it"), 0);
    assert_int_equal(lb_registry_resolve(r, d, 2, 1000), 1);
    assert_false(lb_decoder_has(d, 2));
    assert_int_equal(decode_id(d, 2, detail, sizeof(detail)), LB_REJECT_UNKNOWN_SCHEMA);
    assert_non_null(strstr(detail, "schema id 2 is not in input.schemas; the registry does not"));
    assert_int_equal(lb_registry_resolve(r, d, 2, 10999), 1);
    assert_int_equal(hits[2], 1); /* remembered for 10 s */
    assert_int_equal(lb_registry_resolve(r, d, 2, 11000), 1);
    assert_int_equal(hits[2], 2);
    assert_int_equal(lb_registry_stats(r)->unknown, 2);
    assert_int_equal(lb_registry_stats(r)->up, 1);
    lb_registry_free(r);
    lb_decoder_free(d);
}

/* A negative id off the wire (00 FF FF FF FF ...): no registry gives one,
 * so its records are rejected at once, nothing is asked, and the next id is
 * asked for as usual. */
static void a_negative_id_is_rejected_without_asking(void **state)
{
    (void)state;
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry *r = open_registry("/base", NULL, NULL);
    char detail[200];
    assert_int_equal(lb_registry_resolve(r, d, -1, 1000), 1);
    assert_int_equal(lb_registry_resolve(r, d, INT32_MIN, 1000), 1);
    assert_int_equal(decode_id(d, -1, detail, sizeof(detail)), LB_REJECT_UNKNOWN_SCHEMA);
    assert_int_equal(lb_registry_resolve(r, d, 1, 1001), 1);
    assert_true(lb_decoder_has(d, 1));
    assert_int_equal(lb_registry_stats(r)->fetched, 1);
    assert_int_equal(lb_registry_stats(r)->unknown, 0);
    lb_registry_free(r);
    lb_decoder_free(d);
}

static void no_answer_makes_records_wait_with_back_off(void **state)
{
    (void)state;
    static const int ids[] = {3, 4, 7, 11}; /* 404 without 40403, 500, not JSON, a big 503 */
    static const char *const whys[] = {"without error_code 40403", "HTTP 500", "not {\"schema\"",
                                       "(HTTP 503) was over 1 MiB"};
    for (size_t k = 0; k < 4; k++) {
        struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
        struct lb_registry *r = open_registry("/base", NULL, NULL);
        int id = ids[k];
        assert_int_equal(lb_registry_resolve(r, d, id, 1000), 0);
        assert_false(lb_decoder_has(d, id));
        assert_int_equal(lb_registry_stats(r)->up, 0);
        assert_non_null(strstr(lb_registry_stats(r)->why, whys[k]));
        assert_int_equal(lb_registry_stats(r)->retry_at, 2000);
        /* not asked again before the back-off, for this id or another */
        assert_int_equal(lb_registry_resolve(r, d, id, 1999), 0);
        assert_int_equal(lb_registry_resolve(r, d, 1, 1999), 0);
        assert_int_equal(hits[id] + hits[1], 1);
        assert_int_equal(lb_registry_resolve(r, d, id, 2000), 0);
        assert_int_equal(lb_registry_stats(r)->retry_at, 4000); /* doubled */
        /* an answer resets it: the good id is fetched */
        assert_int_equal(lb_registry_resolve(r, d, 1, 4000), 1);
        assert_int_equal(lb_registry_stats(r)->up, 1);
        assert_int_equal(lb_registry_stats(r)->retry_at, 0);
        assert_int_equal(lb_registry_stats(r)->failures, 2);
        lb_registry_free(r);
        lb_decoder_free(d);
    }
    /* nothing listening */
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry_options o = {.url = "http://127.0.0.1:1", .timeout_ms = 1000};
    char err[256];
    struct lb_registry *r = lb_registry_new(&o, err, sizeof(err));
    assert_non_null(r);
    assert_int_equal(lb_registry_resolve(r, d, 1, 1000), 0);
    assert_non_null(strstr(lb_registry_stats(r)->why, "http://127.0.0.1:1"));
    lb_registry_free(r);
    lb_decoder_free(d);
}

static void schemas_that_cannot_serve_are_refused_for_good(void **state)
{
    (void)state;
    static const int ids[] = {5, 6, 8, 10};
    static const char *const whys[] = {"PROTOBUF schema", "schema references", "board",
                                       "(HTTP 200) was over 1 MiB"};
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry *r = open_registry("/base", NULL, NULL);
    for (size_t k = 0; k < 4; k++) {
        char detail[200];
        int id = ids[k];
        assert_int_equal(lb_registry_resolve(r, d, id, 1000), 1);
        assert_true(lb_decoder_has(d, id));
        assert_int_equal(lb_registry_resolve(r, d, id, 100000), 1);
        assert_int_equal(hits[id], 1);
        assert_int_equal(decode_id(d, id, detail, sizeof(detail)), LB_REJECT_UNKNOWN_SCHEMA);
        if (!strstr(detail, "the registry's schema cannot be read") || !strstr(detail, whys[k]))
            fail_msg("id %d: detail \"%s\"", id, detail);
    }
    assert_int_equal(lb_registry_stats(r)->unusable, 4);
    assert_int_equal(lb_registry_stats(r)->failures, 0);
    lb_registry_free(r);
    lb_decoder_free(d);
}

static void a_slow_answer_runs_on_while_its_records_wait(void **state)
{
    (void)state;
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry *r = open_registry("/base", NULL, NULL);
    /* it returns before the answer: the records wait, the caller goes on */
    assert_int_equal(lb_registry_resolve(r, d, 9, 1000), 0);
    assert_false(lb_decoder_has(d, 9));
    /* one request at a time: another id waits without a request of its own */
    assert_int_equal(lb_registry_resolve(r, d, 1, 1001), 0);
    usleep(800 * 1000);
    assert_int_equal(lb_registry_progress(r, d, 1900), 0);
    assert_true(lb_decoder_has(d, 9));
    assert_int_equal(lb_registry_resolve(r, d, 9, 1901), 1);
    assert_int_equal(lb_registry_resolve(r, d, 1, 1902), 1); /* its turn now */
    assert_int_equal(hits[9] + hits[1], 2);
    assert_int_equal(lb_registry_stats(r)->failures, 0);
    lb_registry_free(r);
    lb_decoder_free(d);
}

static void credentials_are_sent_and_a_refusal_waits(void **state)
{
    (void)state;
    struct lb_decoder *d = lb_decoder_new(LB_WIRE_CONFLUENT);
    struct lb_registry *r = open_registry("/auth", "lb", "wrong");
    assert_int_equal(lb_registry_resolve(r, d, 1, 1000), 0);
    assert_non_null(strstr(lb_registry_stats(r)->why, "refused the credentials (HTTP 401)"));
    lb_registry_free(r);
    r = open_registry("/auth", "lb", "pw");
    assert_int_equal(lb_registry_resolve(r, d, 1, 1000), 1);
    assert_true(lb_decoder_has(d, 1));
    lb_registry_free(r);
    lb_decoder_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_fetched_schema_serves_and_is_asked_for_once),
        cmocka_unit_test(an_unknown_id_is_rejected_and_asked_for_again_later),
        cmocka_unit_test(a_negative_id_is_rejected_without_asking),
        cmocka_unit_test(no_answer_makes_records_wait_with_back_off),
        cmocka_unit_test(schemas_that_cannot_serve_are_refused_for_good),
        cmocka_unit_test(a_slow_answer_runs_on_while_its_records_wait),
        cmocka_unit_test(credentials_are_sent_and_a_refusal_waits),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
