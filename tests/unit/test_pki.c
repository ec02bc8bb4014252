/* Certificates for the TLS tests; see test_pki.h. */
#include "test_pki.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static const char *const files[] = {"ca.crt",        "server.crt",  "server.key",  "client.crt",
                                    "client.key",    "expired.crt", "expired.key", "elsewhere.crt",
                                    "elsewhere.key", "iponly.crt",  "iponly.key",  "other-ca.crt"};

static void write_pem(const char *name, X509 *cert, EVP_PKEY *key)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    int ok =
        cert ? PEM_write_X509(f, cert) : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    if (fclose(f) != 0 || !ok)
        fail_msg("cannot write %s", path);
}

static void add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    assert_non_null(ext);
    assert_int_equal(X509_add_ext(cert, ext, -1), 1);
    X509_EXTENSION_free(ext);
}

/* A certificate for 'key' named 'cn', valid from 'from' to 'to' seconds
 * from now, signed by issuer/issuer_key (itself when NULL: a CA). */
static X509 *make_cert(EVP_PKEY *key, const char *cn, long from, long to, X509 *issuer,
                       EVP_PKEY *issuer_key, const char *san)
{
    static long serial = 1;
    X509 *cert = X509_new();
    assert_non_null(cert);
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++);
    X509_gmtime_adj(X509_getm_notBefore(cert), from);
    X509_gmtime_adj(X509_getm_notAfter(cert), to);
    X509_set_pubkey(cert, key);
    X509_NAME *name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name);
    X509 *signer = issuer ? issuer : cert;
    if (!issuer) {
        add_ext(cert, signer, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(cert, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(cert, signer, NID_basic_constraints, "CA:FALSE");
        add_ext(cert, signer, NID_ext_key_usage, "serverAuth,clientAuth");
        add_ext(cert, signer, NID_subject_alt_name, san);
    }
    add_ext(cert, signer, NID_subject_key_identifier, "hash");
    assert_true(X509_sign(cert, issuer_key ? issuer_key : key, EVP_sha256()) > 0);
    return cert;
}

static void leaf(const char *name, X509 *ca, EVP_PKEY *ca_key, long from, long to, const char *san)
{
    char file[64];
    EVP_PKEY *key = EVP_EC_gen("P-256");
    assert_non_null(key);
    X509 *cert = make_cert(key, name, from, to, ca, ca_key, san);
    snprintf(file, sizeof(file), "%s.crt", name);
    write_pem(file, cert, NULL);
    snprintf(file, sizeof(file), "%s.key", name);
    write_pem(file, NULL, key);
    X509_free(cert);
    EVP_PKEY_free(key);
}

const char *test_pki_make(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/lb-pki-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        fail_msg("mkdtemp %s: %s", dir, strerror(errno));
    const long day = 86400;
    EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *other_key = EVP_EC_gen("P-256");
    assert_non_null(ca_key);
    assert_non_null(other_key);
    X509 *ca = make_cert(ca_key, "lb test CA", -day, 30 * day, NULL, NULL, NULL);
    X509 *other = make_cert(other_key, "lb unrelated CA", -day, 30 * day, NULL, NULL, NULL);
    write_pem("ca.crt", ca, NULL);
    write_pem("other-ca.crt", other, NULL);
    leaf("server", ca, ca_key, -day, 30 * day, "IP:127.0.0.1,DNS:localhost");
    leaf("client", ca, ca_key, -day, 30 * day, "DNS:projector.test");
    leaf("expired", ca, ca_key, -3 * day, -day, "IP:127.0.0.1,DNS:localhost");
    leaf("elsewhere", ca, ca_key, -day, 30 * day, "DNS:redis.elsewhere.test");
    leaf("iponly", ca, ca_key, -day, 30 * day, "IP:127.0.0.1");
    X509_free(ca);
    X509_free(other);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(other_key);
    return dir;
}

void test_pki_remove(void)
{
    char path[300];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}
