/* Certificates for the TLS tests, made with OpenSSL's API into a scratch
 * directory (EC P-256 keys, SHA-256 signatures):
 *
 *   ca.crt                      the test CA
 *   server.crt, server.key      signed by it; SAN IP:127.0.0.1, DNS:localhost
 *   client.crt, client.key      signed by it (mutual TLS)
 *   expired.crt, expired.key    signed by it, expired yesterday
 *   elsewhere.crt, elsewhere.key signed by it; SAN DNS:redis.elsewhere.test only
 *   iponly.crt, iponly.key      signed by it; SAN IP:127.0.0.1 only
 *   other-ca.crt                an unrelated CA, which signed none of them
 */
#ifndef TEST_PKI_H
#define TEST_PKI_H

/* Makes the files in a new directory under TMPDIR; fails the test when it
 * cannot. Returns the directory (static storage). */
const char *test_pki_make(void);
/* Deletes the files and the directory. */
void test_pki_remove(void);

#endif
