/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.c -- TLS on the server side of a connection (OpenSSL), for the gRPC listener: a
 * context built once at start from a certificate chain and key (and, for mutual TLS, the
 * CA client certificates must chain to, optionally a DNS SAN they must carry), and one
 * non-blocking SSL object per connection under conn.c's reads and writes. ALPN offers
 * "h2" (gRPC clients require it). The handshake happens inside the first reads.
 * Limits: certificates are read at start (a restart picks up new ones); a handshake whose
 * output does not fit the socket's send buffer waits for the client's next bytes.
 */
#include "server/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_tls_ctx {
    SSL_CTX *ctx;
};

static void last_error(char *err, size_t errlen, const char *what, const char *path) {
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(err, errlen, "%s %s: %s", what, path, buf[0] ? buf : "failed");
    ERR_clear_error();
}

static int alpn_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                   unsigned int inlen, void *arg) {
    (void)ssl;
    (void)arg;
    for (unsigned i = 0; i + 1 <= inlen;) {
        unsigned l = in[i];
        if (i + 1 + l > inlen) break;
        if (l == 2 && memcmp(in + i + 1, "h2", 2) == 0) {
            *out = in + i + 1;
            *outlen = 2;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + l;
    }
    return SSL_TLSEXT_ERR_NOACK; /* a client without ALPN still gets its handshake */
}

sl_tls_ctx *sl_tls_server_ctx(const char *cert, const char *key, const char *client_ca,
                              const char *client_san, char *err, size_t errlen) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        last_error(err, errlen, "TLS certificate", cert);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        last_error(err, errlen, "TLS key", key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        last_error(err, errlen, "TLS key does not match the certificate", cert);
        goto fail;
    }
    if (client_ca != NULL && client_ca[0] != '\0') {
        if (SSL_CTX_load_verify_locations(ctx, client_ca, NULL) != 1) {
            last_error(err, errlen, "TLS client CA", client_ca);
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
        if (names != NULL) SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        if (client_san != NULL && client_san[0] != '\0' &&
            X509_VERIFY_PARAM_set1_host(SSL_CTX_get0_param(ctx), client_san, 0) != 1) {
            last_error(err, errlen, "TLS client SAN", client_san);
            goto fail;
        }
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_h2, NULL);
    sl_tls_ctx *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    t->ctx = ctx;
    return t;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

void sl_tls_ctx_free(sl_tls_ctx *t) {
    if (t == NULL) return;
    SSL_CTX_free(t->ctx);
    free(t);
}

sl_tls *sl_tls_accept(sl_tls_ctx *t, int fd) {
    SSL *ssl = SSL_new(t->ctx);
    if (ssl == NULL) return NULL;
    if (SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_accept_state(ssl);
    return (sl_tls *)ssl;
}

/* An SSL result as recv/send report theirs: bytes, 0 at the end, -1 with errno (EAGAIN:
 * try again when the socket is ready; EPROTO: the peer broke TLS or failed the checks). */
static ssize_t result(SSL *ssl, int r) {
    if (r > 0) return r;
    int e = SSL_get_error(ssl, r);
    ERR_clear_error();
    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_SYSCALL:
        if (errno == 0) return 0; /* the peer closed without close_notify */
        return -1;
    default:
        errno = EPROTO;
        return -1;
    }
}

ssize_t sl_tls_recv(sl_tls *t, void *buf, size_t n) {
    SSL *ssl = (SSL *)t;
    ERR_clear_error();
    errno = 0;
    return result(ssl, SSL_read(ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n));
}

ssize_t sl_tls_send(sl_tls *t, const void *buf, size_t n) {
    SSL *ssl = (SSL *)t;
    ERR_clear_error();
    errno = 0;
    return result(ssl, SSL_write(ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n));
}

bool sl_tls_pending(sl_tls *t) { return SSL_pending((SSL *)t) > 0; }

void sl_tls_free(sl_tls *t) {
    if (t == NULL) return;
    SSL *ssl = (SSL *)t;
    if (SSL_is_init_finished(ssl)) (void)SSL_shutdown(ssl); /* close_notify, never waits */
    ERR_clear_error();
    SSL_free(ssl);
}
