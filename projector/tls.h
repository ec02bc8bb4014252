/* TLS for the Redis connections (OpenSSL), non-blocking.
 *
 * One lb_tls per configuration: the CA, the client certificate (mutual TLS)
 * and how peers are verified. Every connection the cluster client opens
 * (seeds, redirection targets, replicas asked for the slot map) wraps its
 * socket with lb_tls_wrap and then moves only through the calls below, which
 * say what the socket must become ready for (POLLIN or POLLOUT) whenever
 * they cannot go on: a read may need the socket writable and a write
 * readable.
 *
 * The peer is verified against the configured server_name, else the name
 * given to lb_tls_wrap (the node's hostname when the cluster announces one,
 * else its address: an IP is checked against the certificate's IP SANs).
 * Bytes go out with send(MSG_NOSIGNAL): a node that hung up never raises
 * SIGPIPE. */
#ifndef LB_TLS_H
#define LB_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct lb_tls_options {
    const char *ca_file;     /* PEM; NULL: the system's CA certificates */
    const char *cert_file;   /* PEM client certificate chain (mutual TLS); NULL: none */
    const char *key_file;    /* its private key (PEM) */
    const char *server_name; /* every node is verified against this name; NULL: its own */
    int verify;              /* 0: accept any certificate (tests, never production) */
};

struct lb_tls;
typedef struct ssl_st lb_tls_conn;

/* Loads the files. Returns NULL with the reason in 'err' (which file, what
 * OpenSSL said). */
struct lb_tls *lb_tls_new(const struct lb_tls_options *options, char *err, size_t errlen);
/* Another owner; lb_tls_free drops one. Both accept NULL. */
struct lb_tls *lb_tls_ref(struct lb_tls *tls);
void lb_tls_free(struct lb_tls *tls);

/* A client connection on the connected socket 'fd' (which stays the
 * caller's to close), verifying the peer as 'name' (an IP or a DNS name,
 * also sent as SNI when it is a name). NULL when out of memory. */
lb_tls_conn *lb_tls_wrap(struct lb_tls *tls, int fd, const char *name);
void lb_tls_conn_free(lb_tls_conn *conn);

/* The calls below return what they did (1: handshake done; bytes moved),
 * LB_TLS_AGAIN with '*want' set to the poll event to wait for, or
 * LB_TLS_FAILED with the reason in 'why'. lb_tls_read returns 0 when the
 * peer closed the connection. */
#define LB_TLS_AGAIN  (-2)
#define LB_TLS_FAILED (-1)
int lb_tls_handshake(lb_tls_conn *conn, short *want, char *why, size_t whylen);
ssize_t lb_tls_read(lb_tls_conn *conn, void *buf, size_t len, short *want, char *why,
                    size_t whylen);
ssize_t lb_tls_write(lb_tls_conn *conn, const void *buf, size_t len, short *want, char *why,
                     size_t whylen);
/* Whether an idle connection holds application data or the peer's close
 * (what a peek at the socket would show without TLS); TLS records that are
 * not data, such as session tickets, are consumed and do not count. */
int lb_tls_went_astray(lb_tls_conn *conn);

#endif
