/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.h -- one connection to a Redis server or sentinel on an sl_loop: non-blocking TCP
 * (IPv4/IPv6) or unix socket, TLS through OpenSSL, hiredis's reply reader for parsing,
 * our own output buffer and a FIFO of reply callbacks. A handshake (AUTH or PING,
 * SELECT, ROLE) is answered before any of the owner's commands leave.
 * Invariants: replies reach their callbacks in command order, each exactly once (NULL
 * when the connection failed first), never after sl_rconn_close; nothing blocks except
 * resolving a host name (getaddrinfo; IP literals and /etc/hosts names do not wait).
 */
#ifndef SL_REDIS_CONN_H
#define SL_REDIS_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "core/loop.h"
#include "store/redis/redis.h"

struct redisReply;
typedef struct sl_rconn sl_rconn;
typedef struct sl_rconn_tls sl_rconn_tls;

/* Why a connection failed (its DOWN event). */
typedef enum sl_rconn_why {
    SL_CONN_EIO = 1,  /* refused, reset, closed, timed out, protocol error */
    SL_CONN_ETLS,     /* TLS handshake, certificate, name check, alert from the server */
    SL_CONN_EAUTH,    /* AUTH refused (WRONGPASS, ...), or NOAUTH without a password */
    SL_CONN_EROLE,    /* ROLE says this is not a primary */
    SL_CONN_ESETUP    /* another handshake step failed (SELECT, LOADING...) */
} sl_rconn_why;

/* A reply for `owner` (the connection's), NULL when the connection failed before it
 * came. The reply is freed after the callback returns. */
typedef void (*sl_rconn_reply_fn)(void *owner, struct redisReply *rep, void *priv);
/* The handshake is done (up), or the connection failed (once; msg names the peer and
 * says why, with Redis's or OpenSSL's own text, never a credential). After a failure
 * every pending callback has been called with NULL; the owner then closes it. */
typedef void (*sl_rconn_state_fn)(void *owner, sl_rconn *c, bool up, sl_rconn_why why, const char *msg);

typedef struct sl_rconn_opts {
    const char *host;        /* name or IP literal (no brackets) */
    int port;
    const char *unix_path;   /* non-NULL and non-empty: a unix socket instead */
    unsigned attempt;        /* which of the resolved addresses (tries rotate through them) */
    sl_rconn_tls *tls;        /* NULL: plain text */
    const char *username;    /* borrowed for the call only */
    const char *password;
    unsigned db;
    bool want_primary;       /* ROLE must answer "master" */
} sl_rconn_opts;

/* A TLS client context from the settings (CA, client certificate, verification). NULL
 * with a message when a file cannot be loaded. One per client; shared by its nodes. */
sl_rconn_tls *sl_rconn_tls_create(const sl_redis_tls *cfg, char *err, size_t errlen);
void sl_rconn_tls_destroy(sl_rconn_tls *t);

/* Starts connecting and queues the handshake. NULL with a message when it fails at once
 * (no such host, no socket). */
sl_rconn *sl_rconn_open(sl_loop *loop, const sl_rconn_opts *o, void *owner, sl_rconn_state_fn on_state,
                      char *err, size_t errlen);
/* Queues one command already formatted as RESP (copied). Commands of one loop turn leave
 * together: on sl_rconn_flush, or on the next writable event. -1 when failed or closed. */
int sl_rconn_send(sl_rconn *c, const char *cmd, size_t len, sl_rconn_reply_fn fn, void *priv);
/* The same from arguments. */
int sl_rconn_command(sl_rconn *c, sl_rconn_reply_fn fn, void *priv, int argc, const char *const *argv,
                    const size_t *lens);
/* SUBSCRIBE: fn receives the confirmation and then every message, until the end. */
int sl_rconn_subscribe(sl_rconn *c, const char *channel, sl_rconn_reply_fn fn, void *priv);
/* Writes what is queued now (no-op while connecting). */
void sl_rconn_flush(sl_rconn *c);
/* Fails the connection now (a timeout the owner measured, a protocol surprise): pending
 * callbacks get NULL, then the DOWN event. */
void sl_rconn_fail(sl_rconn *c, sl_rconn_why why, const char *msg);
/* No callback after this; its socket is closed at once or when the callback running now
 * returns, its memory by the next sl_rconn_reap. */
void sl_rconn_close(sl_rconn *c);
/* Frees the connections this thread closed. Call it where no batch of the loop is being
 * dispatched (between sl_loop_poll calls): sl_redis_flush, sl_redis_run and sl_redis_wait
 * do. */
void sl_rconn_reap(void);
bool sl_rconn_is_up(const sl_rconn *c);
/* Commands queued but not yet written (tests). */
size_t sl_rconn_unsent(const sl_rconn *c);

#endif
