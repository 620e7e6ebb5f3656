/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.h -- server-side TLS for a listener (tls.c, OpenSSL): a context from files at start,
 * one SSL per connection, reads and writes shaped like recv/send (bytes, 0 at the end, -1
 * with errno EAGAIN when the socket must become ready first).
 */
#ifndef SL_SERVER_TLS_H
#define SL_SERVER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct sl_tls_ctx sl_tls_ctx;
typedef struct sl_tls sl_tls;

/* NULL with err when a file cannot be read or the key does not match. With client_ca,
 * clients must present a certificate that chains to it (and names client_san, if given). */
sl_tls_ctx *sl_tls_server_ctx(const char *cert, const char *key, const char *client_ca,
                              const char *client_san, char *err, size_t errlen);
void sl_tls_ctx_free(sl_tls_ctx *t);

sl_tls *sl_tls_accept(sl_tls_ctx *t, int fd);
ssize_t sl_tls_recv(sl_tls *t, void *buf, size_t n);
ssize_t sl_tls_send(sl_tls *t, const void *buf, size_t n);
bool sl_tls_pending(sl_tls *t); /* decrypted bytes wait inside (no socket event will say) */
void sl_tls_free(sl_tls *t);

#endif /* SL_SERVER_TLS_H */
