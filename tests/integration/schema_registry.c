/* test_schema_registry: a small schema registry for the tests, speaking
 * the part of the Confluent Schema Registry API the projector and loadgen
 * use. It is not that registry (it checks no compatibility, knows no
 * schema types but what it is given, keeps no versions beyond an id per
 * subject and schema):
 *
 *   GET  <base>/schemas/ids/<id>          200 {"schema": "..."} or
 *                                         404 {"error_code": 40403, ...}
 *   POST <base>/subjects/<s>/versions     {"schema": "..."} -> 200 {"id": N}
 *                                         (the same schema text: the same id)
 *   GET  <base>/subjects                  ["s", ...]
 *   anything else                         404 {"error_code": 404, ...}
 *
 * Options: --listen HOST:PORT, --base-path /prefix, --user U --password P
 * (basic auth on every request: 401 otherwise), --tls-cert/--tls-key PEM
 * files (https), --first-id N (default 1), --state FILE (registrations are
 * appended there as JSON lines and loaded at start, so a restart keeps the
 * ids). Every request is logged on stdout as "METHOD PATH STATUS".
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <jansson.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BODY_MAX (1 << 20)

struct entry {
    int id;
    char *subject;
    char *schema;
};

static struct entry *entries;
static size_t nentries;
static int next_id = 1;
static const char *base = "";
static const char *user, *password, *state_path;
static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(BODY_MAX + 1);
    size_t n = buf ? fread(buf, 1, BODY_MAX, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static int add_entry(int id, const char *subject, const char *schema)
{
    struct entry *grown = realloc(entries, (nentries + 1) * sizeof(*grown));
    if (!grown)
        return -1;
    entries = grown;
    entries[nentries++] = (struct entry){id, strdup(subject), strdup(schema)};
    if (id >= next_id)
        next_id = id + 1;
    return 0;
}

static void load_state(void)
{
    FILE *f = state_path ? fopen(state_path, "r") : NULL;
    static char line[BODY_MAX];
    while (f && fgets(line, sizeof(line), f)) {
        json_t *o = json_loads(line, 0, NULL);
        int id;
        const char *subject, *schema;
        if (o && json_unpack(o, "{s:i, s:s, s:s}", "id", &id, "subject", &subject, "schema",
                             &schema) == 0)
            add_entry(id, subject, schema);
        json_decref(o);
    }
    if (f)
        fclose(f);
}

static void save_entry(const struct entry *e)
{
    FILE *f = state_path ? fopen(state_path, "a") : NULL;
    json_t *o =
        json_pack("{s:i, s:s, s:s}", "id", e->id, "subject", e->subject, "schema", e->schema);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (f && text)
        fprintf(f, "%s\n", text);
    free(text);
    json_decref(o);
    if (f)
        fclose(f);
}

static enum MHD_Result answer_json(struct MHD_Connection *conn, unsigned status, json_t *body,
                                   const char *method, const char *url)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(body);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(text ? strlen(text) : 0, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/vnd.schemaregistry.v1+json");
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Basic realm=\"registry\"");
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    printf("%s %s %u\n", method, url, status);
    fflush(stdout);
    return rc;
}

static json_t *error_body(int code, const char *message)
{
    return json_pack("{s:i, s:s}", "error_code", code, "message", message);
}

static enum MHD_Result route(struct MHD_Connection *conn, const char *method, const char *url,
                             const char *body)
{
    size_t blen = strlen(base);
    if (strncmp(url, base, blen) != 0)
        return answer_json(conn, 404, error_body(404, "HTTP 404 Not Found"), method, url);
    const char *path = url + blen;
    int id;
    char tail;
    if (strcmp(method, "GET") == 0 && sscanf(path, "/schemas/ids/%d%c", &id, &tail) == 1) {
        for (size_t i = 0; i < nentries; i++)
            if (entries[i].id == id)
                return answer_json(conn, 200, json_pack("{s:s}", "schema", entries[i].schema),
                                   method, url);
        return answer_json(conn, 404, error_body(40403, "Schema not found"), method, url);
    }
    if (strcmp(method, "GET") == 0 && strcmp(path, "/subjects") == 0) {
        json_t *list = json_array();
        for (size_t i = 0; i < nentries; i++)
            json_array_append_new(list, json_string(entries[i].subject));
        return answer_json(conn, 200, list, method, url);
    }
    const char *versions = strstr(path, "/versions");
    if (strcmp(method, "POST") == 0 && strncmp(path, "/subjects/", 10) == 0 && versions &&
        strcmp(versions, "/versions") == 0) {
        char subject[256];
        size_t n = (size_t)(versions - (path + 10));
        json_t *in = json_loads(body ? body : "", 0, NULL);
        const char *schema = NULL;
        if (n == 0 || n >= sizeof(subject) || !in ||
            json_unpack(in, "{s:s}", "schema", &schema) != 0) {
            json_decref(in);
            return answer_json(conn, 422, error_body(42201, "Invalid schema"), method, url);
        }
        memcpy(subject, path + 10, n);
        subject[n] = '\0';
        int found = 0;
        for (size_t i = 0; i < nentries && !found; i++)
            if (strcmp(entries[i].schema, schema) == 0)
                found = entries[i].id;
        int same_subject = 0;
        for (size_t i = 0; i < nentries; i++)
            same_subject |= entries[i].id == found && strcmp(entries[i].subject, subject) == 0;
        if (!found || !same_subject) {
            if (add_entry(found ? found : next_id, subject, schema) != 0) {
                json_decref(in);
                return answer_json(conn, 500, error_body(50001, "out of memory"), method, url);
            }
            found = entries[nentries - 1].id;
            save_entry(&entries[nentries - 1]);
        }
        json_decref(in);
        return answer_json(conn, 200, json_pack("{s:i}", "id", found), method, url);
    }
    return answer_json(conn, 404, error_body(404, "HTTP 404 Not Found"), method, url);
}

struct upload {
    char *data;
    size_t len;
};

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct upload *up = *con_cls;
    if (!up) {
        up = calloc(1, sizeof(*up));
        *con_cls = up;
        return up ? MHD_YES : MHD_NO;
    }
    if (*size) {
        if (up->len + *size > BODY_MAX)
            return MHD_NO;
        char *grown = realloc(up->data, up->len + *size + 1);
        if (!grown)
            return MHD_NO;
        memcpy(grown + up->len, data, *size);
        up->data = grown;
        up->len += *size;
        up->data[up->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    if (user) {
        char *pass = NULL;
        char *who = MHD_basic_auth_get_username_password(conn, &pass);
        int good = who && pass && strcmp(who, user) == 0 && strcmp(pass, password) == 0;
        MHD_free(who);
        MHD_free(pass);
        if (!good)
            return answer_json(conn, 401, error_body(401, "Unauthorized"), method, url);
    }
    return route(conn, method, url, up->data);
}

static void done(void *cls, struct MHD_Connection *conn, void **con_cls,
                 enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)conn;
    (void)code;
    struct upload *up = *con_cls;
    if (up)
        free(up->data);
    free(up);
    *con_cls = NULL;
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8081", *cert = NULL, *key = NULL;
    static const struct option longopts[] = {{"listen", required_argument, NULL, 'l'},
                                             {"base-path", required_argument, NULL, 'b'},
                                             {"user", required_argument, NULL, 'u'},
                                             {"password", required_argument, NULL, 'p'},
                                             {"tls-cert", required_argument, NULL, 'c'},
                                             {"tls-key", required_argument, NULL, 'k'},
                                             {"first-id", required_argument, NULL, 'f'},
                                             {"state", required_argument, NULL, 's'},
                                             {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            listen = optarg;
            break;
        case 'b':
            base = optarg;
            break;
        case 'u':
            user = optarg;
            break;
        case 'p':
            password = optarg;
            break;
        case 'c':
            cert = optarg;
            break;
        case 'k':
            key = optarg;
            break;
        case 'f':
            next_id = atoi(optarg);
            break;
        case 's':
            state_path = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: %s --listen HOST:PORT [--base-path P] [--user U --password P] "
                    "[--tls-cert F --tls-key F] [--first-id N] [--state FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!!user != !!password || !!cert != !!key || next_id < 1) {
        fprintf(stderr, "test_schema_registry: --user needs --password, --tls-cert --tls-key, "
                        "--first-id a positive id\n");
        return 2;
    }
    const char *colon = strrchr(listen, ':');
    struct sockaddr_in addr = {.sin_family = AF_INET};
    char host[64];
    if (!colon || (size_t)(colon - listen) >= sizeof(host)) {
        fprintf(stderr, "test_schema_registry: --listen wants HOST:PORT\n");
        return 2;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "test_schema_registry: %s is not an IPv4 address\n", host);
        return 2;
    }
    load_state();
    char *cert_pem = cert ? slurp(cert) : NULL, *key_pem = key ? slurp(key) : NULL;
    if (cert && (!cert_pem || !key_pem)) {
        fprintf(stderr, "test_schema_registry: cannot read %s or %s\n", cert, key);
        return 1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (cert)
        flags |= MHD_USE_TLS;
    struct MHD_Daemon *daemon =
        cert ? MHD_start_daemon(flags, 0, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &addr,
                                MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_HTTPS_MEM_CERT,
                                cert_pem, MHD_OPTION_HTTPS_MEM_KEY, key_pem, MHD_OPTION_END)
             : MHD_start_daemon(flags, 0, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, &addr,
                                MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_END);
    if (!daemon) {
        fprintf(stderr, "test_schema_registry: cannot listen on %s%s\n", listen,
                cert ? " with TLS" : "");
        return 1;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    printf("listening on %s%s, %zu schema(s), next id %d\n", listen, base, nentries, next_id);
    fflush(stdout);
    while (!stopping)
        pause();
    MHD_stop_daemon(daemon);
    for (size_t i = 0; i < nentries; i++) {
        free(entries[i].subject);
        free(entries[i].schema);
    }
    free(entries);
    free(cert_pem);
    free(key_pem);
    return 0;
}
