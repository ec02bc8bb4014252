/* TLS for the Redis connections; see tls.h. */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct lb_tls {
    SSL_CTX *ctx;
    char *server_name;
    atomic_int refs;
};

/* ---- a socket BIO that never raises SIGPIPE ---------------------------------------------- */

/* OpenSSL's socket BIO writes with write(2): a node that hung up would kill
 * the process with SIGPIPE. This one is the same with send(MSG_NOSIGNAL). */
static BIO_METHOD *nosig_method;

static int nosig_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int nosig_write(BIO *b, const char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t w = send(nosig_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)w;
}

static int nosig_read(BIO *b, char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t got = recv(nosig_fd(b), buf, (size_t)len, 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    if (got == 0) /* what BIO_CTRL_EOF reports: the end of the stream */
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    return (int)got;
}

static long nosig_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num, (void)ptr;
    if (cmd == BIO_CTRL_EOF) /* SSL_OP_IGNORE_UNEXPECTED_EOF asks this */
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int nosig_init(void)
{
    if (nosig_method)
        return 0;
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "lb-socket");
    if (!m || !BIO_meth_set_write(m, nosig_write) || !BIO_meth_set_read(m, nosig_read) ||
        !BIO_meth_set_ctrl(m, nosig_ctrl)) {
        BIO_meth_free(m);
        return -1;
    }
    nosig_method = m; /* kept for the life of the process */
    return 0;
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* OpenSSL's reason for the last failure, without its error-code prefix. */
static void openssl_reason(char *why, size_t whylen, const char *otherwise)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    snprintf(why, whylen, "%s", reason ? reason : otherwise);
    ERR_clear_error();
}

/* What an SSL_* call's return 'rc' means: LB_TLS_AGAIN with '*want', 0 for
 * the peer's close, or LB_TLS_FAILED with 'why'. */
static int outcome(lb_tls_conn *conn, int rc, short *want, char *why, size_t whylen)
{
    int err = SSL_get_error(conn, rc);
    switch (err) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return LB_TLS_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return LB_TLS_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        ERR_clear_error();
        return 0;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_last_error()) {
            openssl_reason(why, whylen, "TLS failure");
            return LB_TLS_FAILED;
        }
        if (errno == 0) /* an end of stream OpenSSL took for a clean close */
            return 0;
        snprintf(why, whylen, "%s", strerror(errno));
        return LB_TLS_FAILED;
    default: {
        /* with verify: false the result is never OK, and never the reason */
        long verified =
            SSL_get_verify_mode(conn) != SSL_VERIFY_NONE ? SSL_get_verify_result(conn) : X509_V_OK;
        if (verified != X509_V_OK) {
            snprintf(why, whylen, "certificate verify failed: %s",
                     X509_verify_cert_error_string(verified));
            ERR_clear_error();
        } else {
            openssl_reason(why, whylen, "TLS failure");
        }
        return LB_TLS_FAILED;
    }
    }
}

/* ---- the context -------------------------------------------------------------------------- */

struct lb_tls *lb_tls_new(const struct lb_tls_options *o, char *err, size_t errlen)
{
    char reason[200];
    struct lb_tls *t = calloc(1, sizeof(*t));
    if (!t || nosig_init() != 0 || !(t->ctx = SSL_CTX_new(TLS_client_method())) ||
        (o->server_name && !(t->server_name = strdup(o->server_name)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    atomic_init(&t->refs, 1);
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    /* a write may be retried with its buffer moved or grown, and a big
     * pipeline goes out a record at a time */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* RESP delimits its own replies: a peer that closes without
     * close_notify is simply a closed connection */
    SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(t->ctx, o->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (o->ca_file ? SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) != 1
                   : SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        openssl_reason(reason, sizeof(reason), "unreadable");
        snprintf(err, errlen, "ca_file %s: %s", o->ca_file ? o->ca_file : "(system default)",
                 reason);
        goto fail;
    }
    if (o->cert_file && SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) != 1) {
        openssl_reason(reason, sizeof(reason), "unreadable");
        snprintf(err, errlen, "cert_file %s: %s", o->cert_file, reason);
        goto fail;
    }
    if (o->key_file && (SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file, SSL_FILETYPE_PEM) != 1 ||
                        SSL_CTX_check_private_key(t->ctx) != 1)) {
        openssl_reason(reason, sizeof(reason), "unreadable");
        snprintf(err, errlen, "key_file %s: %s", o->key_file, reason);
        goto fail;
    }
    return t;
fail:
    ERR_clear_error();
    lb_tls_free(t);
    return NULL;
}

struct lb_tls *lb_tls_ref(struct lb_tls *t)
{
    if (t)
        atomic_fetch_add(&t->refs, 1);
    return t;
}

void lb_tls_free(struct lb_tls *t)
{
    if (!t || (t->ctx && atomic_fetch_sub(&t->refs, 1) > 1))
        return;
    SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}

/* ---- connections --------------------------------------------------------------------------- */

static int is_ip(const char *name)
{
    unsigned char addr[16];
    return inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
}

lb_tls_conn *lb_tls_wrap(struct lb_tls *t, int fd, const char *name)
{
    SSL *ssl = SSL_new(t->ctx);
    BIO *bio = BIO_new(nosig_method);
    if (!ssl || !bio)
        goto fail;
    BIO_set_data(bio, (void *)(intptr_t)fd);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl, bio, bio);
    bio = NULL; /* the SSL owns it now */
    const char *check = t->server_name ? t->server_name : name;
    if (is_ip(check)) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), check) != 1)
            goto fail;
    } else {
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (SSL_set1_host(ssl, check) != 1 || SSL_set_tlsext_host_name(ssl, check) != 1)
            goto fail;
    }
    SSL_set_connect_state(ssl);
    return ssl;
fail:
    ERR_clear_error();
    BIO_free(bio);
    SSL_free(ssl);
    return NULL;
}

void lb_tls_conn_free(lb_tls_conn *conn)
{
    SSL_free(conn);
}

int lb_tls_handshake(lb_tls_conn *conn, short *want, char *why, size_t whylen)
{
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(conn);
    if (rc == 1)
        return 1;
    rc = outcome(conn, rc, want, why, whylen);
    if (rc == 0) { /* closed during the handshake: a failure all the same */
        snprintf(why, whylen, "closed by the server during the TLS handshake");
        return LB_TLS_FAILED;
    }
    return rc;
}

ssize_t lb_tls_read(lb_tls_conn *conn, void *buf, size_t len, short *want, char *why, size_t whylen)
{
    size_t got = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_read_ex(conn, buf, len, &got);
    return rc == 1 ? (ssize_t)got : outcome(conn, rc, want, why, whylen);
}

ssize_t lb_tls_write(lb_tls_conn *conn, const void *buf, size_t len, short *want, char *why,
                     size_t whylen)
{
    size_t put = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_write_ex(conn, buf, len, &put);
    if (rc == 1)
        return (ssize_t)put;
    rc = outcome(conn, rc, want, why, whylen);
    if (rc == 0) {
        snprintf(why, whylen, "closed by the server");
        return LB_TLS_FAILED;
    }
    return rc;
}

int lb_tls_went_astray(lb_tls_conn *conn)
{
    char byte, why[256]; /* not read: only whether it went astray */
    size_t got = 0;
    short want = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_peek_ex(conn, &byte, 1, &got);
    if (rc == 1)
        return 1; /* data nobody asked for */
    return outcome(conn, rc, &want, why, sizeof(why)) != LB_TLS_AGAIN;
}
