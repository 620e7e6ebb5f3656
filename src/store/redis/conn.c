/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c -- the Redis connection layer (see conn.h): sockets, TLS, handshake, output
 * buffer, reply FIFO. Buffers grow to the largest pipeline seen and are then reused, so a
 * connection in steady state allocates only hiredis's reply trees.
 *
 * Why this split (hiredis's reader + our own I/O + OpenSSL): hiredis 0.14, the version
 * Debian 12 ships, has no TLS (hiredis_ssl arrived in 1.0), and its async context owns the
 * socket, so TLS cannot be slid under it without replacing its I/O anyway (a BIO pair
 * under redisAsyncContext would copy every byte twice and still leave it blind to TLS's
 * own wants: a write that needs a read, data buffered inside OpenSSL that epoll never
 * reports). What hiredis does well and safely is parsing RESP with hard limits (plus our
 * reader guard); what the async context did for us (a socket, a buffer, a callback FIFO)
 * is small. So: hiredis's redisReader parses, OpenSSL (Debian's libssl) does TLS on
 * our non-blocking socket, and this file owns the rest.
 *
 * Handshake, RESP2: AUTH [user] pass when a password is set, else PING (so a server
 * that requires a password answers NOAUTH here, not on the first decision); SELECT db;
 * ROLE when a primary is required (sentinel). Not HELLO 3: hiredis 0.14's reader knows
 * only RESP2 types, and AUTH works on every Redis version. The owner's commands (queued
 * while connecting) leave only after every handshake reply was OK, so nothing runs
 * unauthenticated or in the wrong database.
 */
#include "store/redis/conn.h"

#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK 16384
#define TLS_WRITE_MAX 16384 /* one TLS record per SSL_write */

enum { ST_CONNECTING, ST_TLS, ST_HANDSHAKE, ST_UP, ST_FAILED };
enum { CB_INTERNAL = 1, CB_STICKY = 2 };
enum { HS_AUTH = 1, HS_PING, HS_SELECT, HS_ROLE };

typedef struct cb_ent {
    sl_rconn_reply_fn fn;
    void *priv;
    unsigned flags;
} cb_ent;

struct sl_rconn_tls {
    SSL_CTX *ctx;
    bool verify;
    char server_name[256];
};

struct sl_rconn {
    sl_loop *loop;
    sl_io io;
    int fd;
    uint32_t events;
    bool in_loop;
    int st;
    SSL *ssl;
    size_t tls_wlen;       /* an SSL_write to repeat with this length (0: none) */
    bool tls_write_wants_read;
    bool tls_read_wants_write; /* (TLS may need to send before it can read more) */
    redisReader *rd;
    char *out;
    size_t olen, ooff, ocap;
    size_t hs_end;         /* the handshake's bytes at the start of out */
    int hs_pending;        /* handshake replies still awaited */
    cb_ent *q;             /* ring of reply callbacks */
    size_t qhead, qn, qcap;
    void *owner;
    sl_rconn_state_fn on_state;
    int depth;             /* inside one of our functions that may call out */
    bool closed;
    sl_rconn_tls *tls;      /* started once the socket connects (NULL: plain) */
    char host[256];        /* the name TLS checks when no server_name is set */
    char peer[SL_REDIS_UNIX_MAX + 16]; /* "host:port" or the path, for messages */
    char secret[SL_REDIS_PASS_MAX]; /* to scrub an echo out of error texts */
    struct sl_rconn *next_dead;
};

/* Closed connections of this thread, freed by sl_rconn_reap. Why not free at once: the
 * loop's current batch of events may still name one (another connection's callback
 * closed it, e.g. the sentinel moving the primary), and its sl_io lives inside it. */
static __thread sl_rconn *g_dead;

/* ---- TLS context -------------------------------------------------------------------- */

/* The first queued OpenSSL error as text ("" when none); the queue is emptied (later
 * entries only repeat the cause). */
static void ssl_first_err(char *out, size_t cap) {
    unsigned long e = ERR_get_error();
    if (e == 0) out[0] = '\0';
    else ERR_error_string_n(e, out, cap);
    ERR_clear_error();
}

sl_rconn_tls *sl_rconn_tls_create(const sl_redis_tls *cfg, char *err, size_t errlen) {
    ERR_clear_error();
    sl_rconn_tls *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char why[256];
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (t->ctx == NULL) {
        ssl_first_err(why, sizeof(why));
        snprintf(err, errlen, "TLS: cannot create a context: %s", why);
        free(t);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    t->verify = !cfg->insecure;
    snprintf(t->server_name, sizeof(t->server_name), "%s", cfg->server_name);
    if (t->verify) {
        int ok = cfg->ca_file[0] ? SSL_CTX_load_verify_locations(t->ctx, cfg->ca_file, NULL)
                                 : SSL_CTX_set_default_verify_paths(t->ctx);
        if (ok != 1) {
            ssl_first_err(why, sizeof(why));
            snprintf(err, errlen, "TLS: cannot load the CA certificates from %.200s: %s",
                     cfg->ca_file[0] ? cfg->ca_file : "the system store", why);
            goto fail;
        }
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    }
    if (cfg->cert_file[0]) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert_file) != 1) {
            ssl_first_err(why, sizeof(why));
            snprintf(err, errlen, "TLS: cannot load the client certificate %.200s: %s", cfg->cert_file, why);
            goto fail;
        }
        const char *key = cfg->key_file[0] ? cfg->key_file : cfg->cert_file;
        if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(t->ctx) != 1) {
            ssl_first_err(why, sizeof(why));
            snprintf(err, errlen, "TLS: cannot use the client key %.200s: %s", key, why);
            goto fail;
        }
    } else if (cfg->key_file[0]) {
        snprintf(err, errlen, "TLS: a key_file needs a cert_file");
        goto fail;
    }
    return t;
fail:
    SSL_CTX_free(t->ctx);
    free(t);
    return NULL;
}

void sl_rconn_tls_destroy(sl_rconn_tls *t) {
    if (t == NULL) return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* ---- buffers ------------------------------------------------------------------------ */

static int out_reserve(sl_rconn *c, size_t n) {
    if (c->olen + n <= c->ocap) return 0;
    /* reclaim what was written, unless a TLS write must be repeated from where it is
     * (its bytes may move, not change) or the handshake's boundary still matters */
    if (c->ooff > 0 && c->st == ST_UP && c->tls_wlen == 0) {
        memmove(c->out, c->out + c->ooff, c->olen - c->ooff);
        c->olen -= c->ooff;
        c->ooff = 0;
        if (c->olen + n <= c->ocap) return 0;
    }
    size_t cap = c->ocap ? c->ocap : 4096;
    while (cap < c->olen + n) cap *= 2;
    char *p = realloc(c->out, cap);
    if (p == NULL) return -1;
    c->out = p;
    c->ocap = cap;
    return 0;
}

static int q_push(sl_rconn *c, sl_rconn_reply_fn fn, void *priv, unsigned flags) {
    if (c->qn == c->qcap) {
        size_t cap = c->qcap ? c->qcap * 2 : 64;
        cb_ent *p = malloc(cap * sizeof(*p));
        if (p == NULL) return -1;
        for (size_t i = 0; i < c->qn; i++) p[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = p;
        c->qcap = cap;
        c->qhead = 0;
    }
    c->q[(c->qhead + c->qn) % c->qcap] = (cb_ent){fn, priv, flags};
    c->qn++;
    return 0;
}

static char *put_bulk(char *p, const char *s, size_t n) {
    p += sprintf(p, "$%zu\r\n", n);
    memcpy(p, s, n);
    p += n;
    *p++ = '\r', *p++ = '\n';
    return p;
}

/* Appends one command from arguments to the output buffer (no callback); *at = where
 * it starts. */
static int append_argv(sl_rconn *c, int argc, const char *const *argv, const size_t *lens, size_t *at) {
    size_t need = 16;
    for (int i = 0; i < argc; i++) need += lens[i] + 32;
    if (out_reserve(c, need) != 0) return -1;
    *at = c->olen;
    char *p = c->out + c->olen;
    p += sprintf(p, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) p = put_bulk(p, argv[i], lens[i]);
    c->olen = (size_t)(p - c->out);
    return 0;
}

/* ---- events --------------------------------------------------------------------------- */

static void conn_io(void *ud, uint32_t ev);

static void want(sl_rconn *c, uint32_t events) {
    if (c->fd < 0 || (c->in_loop && events == c->events)) return;
    c->io = (sl_io){c->fd, conn_io, c};
    if (!c->in_loop) {
        if (sl_loop_add(c->loop, &c->io, events) == 0) c->in_loop = true;
    } else {
        sl_loop_mod(c->loop, &c->io, events);
    }
    c->events = events;
}

/* What may be written now: the handshake alone until it is answered. */
static size_t writable_end(const sl_rconn *c) { return c->st == ST_UP ? c->olen : c->hs_end; }

static void update_events(sl_rconn *c) {
    if (c->st == ST_FAILED || c->fd < 0) return;
    uint32_t ev = EPOLLIN;
    if (c->st == ST_CONNECTING) ev |= EPOLLOUT;
    else if (c->st == ST_TLS) ev = c->events; /* set by the handshake step */
    else if ((c->ooff < writable_end(c) && !c->tls_write_wants_read) || c->tls_read_wants_write) ev |= EPOLLOUT;
    want(c, ev);
}

/* Releases everything but the struct, which waits in g_dead (see there). */
static void conn_free(sl_rconn *c) {
    if (c->in_loop) sl_loop_del(c->loop, &c->io);
    c->in_loop = false;
    if (c->ssl) SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    if (c->rd) redisReaderFree(c->rd);
    c->rd = NULL;
    free(c->out);
    free(c->q);
    c->out = NULL;
    c->q = NULL;
    c->qn = c->olen = c->ooff = 0;
    memset(c->secret, 0, sizeof(c->secret));
    c->closed = true;
    c->next_dead = g_dead;
    g_dead = c;
}

void sl_rconn_reap(void) {
    while (g_dead != NULL) {
        sl_rconn *c = g_dead;
        g_dead = c->next_dead;
        free(c);
    }
}

/* Leaves one of our entry points: a close asked for inside it happens now. */
static void leave(sl_rconn *c) {
    if (--c->depth == 0 && c->closed) conn_free(c);
}

static void scrub(const sl_rconn *c, char *s) {
    size_t n = strlen(c->secret);
    if (n == 0) return;
    for (char *p = strstr(s, c->secret); p != NULL; p = strstr(p, c->secret)) {
        memset(p, '*', n);
        p += n;
    }
}

static void fail(sl_rconn *c, sl_rconn_why why, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(sl_rconn *c, sl_rconn_why why, const char *fmt, ...) {
    if (c->st == ST_FAILED || c->closed) return;
    c->st = ST_FAILED;
    char msg[300];
    int n = snprintf(msg, sizeof(msg), "%s: ", c->peer);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    scrub(c, msg);
    if (c->in_loop) sl_loop_del(c->loop, &c->io);
    c->in_loop = false;
    if (c->ssl) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->depth++;
    /* every reply still awaited is lost: its callback hears it (NULL), in order */
    while (c->qn > 0 && !c->closed) {
        cb_ent e = c->q[c->qhead];
        c->qhead = (c->qhead + 1) % c->qcap;
        c->qn--;
        if (!(e.flags & CB_INTERNAL) && e.fn != NULL) e.fn(c->owner, NULL, e.priv);
    }
    if (!c->closed) c->on_state(c->owner, c, false, why, msg);
    leave(c);
}

/* ---- handshake ------------------------------------------------------------------------ */

static void hs_done(sl_rconn *c) {
    c->st = ST_UP;
    c->hs_end = 0;
    c->on_state(c->owner, c, true, 0, NULL);
    if (!c->closed && c->st == ST_UP) sl_rconn_flush(c);
}

/* Errors that mean "these credentials do not let us in" (counted as auth failures). */
static bool is_auth_error(const redisReply *rep) {
    static const char *const pre[] = {"NOAUTH", "WRONGPASS", "NOPERM", "ERR invalid password",
                                      "ERR AUTH", "ERR Client sent AUTH"};
    for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++)
        if (rep->len >= strlen(pre[i]) && memcmp(rep->str, pre[i], strlen(pre[i])) == 0) return true;
    return false;
}

static void hs_reply(sl_rconn *c, redisReply *rep, uintptr_t step) {
    if (rep->type == REDIS_REPLY_ERROR) {
        if (step == HS_AUTH) fail(c, SL_CONN_EAUTH, "AUTH failed: %.200s", rep->str);
        else if (is_auth_error(rep)) fail(c, SL_CONN_EAUTH, "%.200s", rep->str);
        else if (step == HS_SELECT) fail(c, SL_CONN_ESETUP, "SELECT failed: %.200s", rep->str);
        else fail(c, SL_CONN_ESETUP, "%.200s", rep->str);
        return;
    }
    if (step == HS_ROLE) {
        const redisReply *r0 = rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 ? rep->element[0] : NULL;
        bool primary = r0 != NULL && r0->type == REDIS_REPLY_STRING && r0->len == 6 && memcmp(r0->str, "master", 6) == 0;
        if (!primary) {
            fail(c, SL_CONN_EROLE, "not the primary (ROLE %.20s)",
                 r0 != NULL && r0->type == REDIS_REPLY_STRING ? r0->str : "?");
            return;
        }
    }
    if (--c->hs_pending == 0) hs_done(c);
}

static int queue_handshake(sl_rconn *c, const sl_rconn_opts *o) {
    const char *argv[3];
    size_t lens[3];
    size_t at;
    bool user = o->username && o->username[0], pass = o->password && o->password[0];
    if (user || pass) {
        int n = 0;
        argv[n] = "AUTH", lens[n++] = 4;
        if (user) argv[n] = o->username, lens[n++] = strlen(o->username);
        argv[n] = pass ? o->password : "", lens[n++] = pass ? strlen(o->password) : 0;
        if (append_argv(c, n, argv, lens, &at) || q_push(c, NULL, (void *)(uintptr_t)HS_AUTH, CB_INTERNAL)) return -1;
    } else {
        argv[0] = "PING", lens[0] = 4;
        if (append_argv(c, 1, argv, lens, &at) || q_push(c, NULL, (void *)(uintptr_t)HS_PING, CB_INTERNAL)) return -1;
    }
    c->hs_pending++;
    if (o->db > 0) {
        char num[16];
        argv[0] = "SELECT", lens[0] = 6;
        argv[1] = num, lens[1] = (size_t)snprintf(num, sizeof(num), "%u", o->db);
        if (append_argv(c, 2, argv, lens, &at) || q_push(c, NULL, (void *)(uintptr_t)HS_SELECT, CB_INTERNAL)) return -1;
        c->hs_pending++;
    }
    if (o->want_primary) {
        argv[0] = "ROLE", lens[0] = 4;
        if (append_argv(c, 1, argv, lens, &at) || q_push(c, NULL, (void *)(uintptr_t)HS_ROLE, CB_INTERNAL)) return -1;
        c->hs_pending++;
    }
    c->hs_end = c->olen;
    return 0;
}

/* ---- reading and writing -------------------------------------------------------------- */

/* Hands every complete reply to its callback, in order. */
static void dispatch(sl_rconn *c) {
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(c->rd, &reply) != REDIS_OK) {
            fail(c, SL_CONN_EIO, "bad reply: %.100s", c->rd->errstr);
            return;
        }
        if (reply == NULL) return;
        if (c->qn == 0) {
            freeReplyObject(reply);
            fail(c, SL_CONN_EIO, "a reply nobody asked for");
            return;
        }
        cb_ent e = c->q[c->qhead];
        if (!(e.flags & CB_STICKY)) {
            c->qhead = (c->qhead + 1) % c->qcap;
            c->qn--;
        }
        if (e.flags & CB_INTERNAL) hs_reply(c, reply, (uintptr_t)e.priv);
        else if (e.fn != NULL) e.fn(c->owner, reply, e.priv);
        freeReplyObject(reply);
        if (c->closed || c->st == ST_FAILED) return;
    }
}

static void tls_fail(sl_rconn *c, int ret, const char *when) {
    int e = SSL_get_error(c->ssl, ret);
    char why[256] = "";
    long vr = SSL_get_verify_result(c->ssl);
    if (vr != X509_V_OK && c->st == ST_TLS) {
        fail(c, SL_CONN_ETLS, "TLS: certificate verify failed: %s", X509_verify_cert_error_string(vr));
        return;
    }
    if (e == SSL_ERROR_SYSCALL) {
        int saved = errno;
        ssl_first_err(why, sizeof(why));
        /* a server that refuses us (no client certificate) sends an alert and resets: a
         * write then fails with ECONNRESET while the alert, which says why, waits unread */
        if (!why[0] && strcmp(when, "write") == 0) {
            char b[256];
            ERR_clear_error();
            int r2 = SSL_read(c->ssl, b, sizeof(b));
            if (r2 <= 0 && SSL_get_error(c->ssl, r2) == SSL_ERROR_SSL) ssl_first_err(why, sizeof(why));
            ERR_clear_error();
        }
        if (!why[0]) snprintf(why, sizeof(why), "%s", saved ? strerror(saved) : "connection closed");
    } else if (e == SSL_ERROR_ZERO_RETURN) {
        fail(c, SL_CONN_EIO, "connection closed by the server");
        return;
    } else {
        ssl_first_err(why, sizeof(why));
    }
    fail(c, SL_CONN_ETLS, "TLS %s failed: %s", when, why[0] ? why : "unknown error");
}

static void do_read(sl_rconn *c) {
    char buf[READ_CHUNK];
    /* plain: at most 1 MiB per event (level-triggered: the rest comes next turn); TLS:
     * until OpenSSL wants more (a record it holds decrypted is invisible to epoll) */
    for (int i = 0; (c->ssl || i < 64) && c->st != ST_FAILED && !c->closed; i++) {
        ssize_t n;
        if (c->ssl) {
            ERR_clear_error();
            errno = 0;
            int r = SSL_read(c->ssl, buf, sizeof(buf));
            c->tls_read_wants_write = false;
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_READ) return;
                if (e == SSL_ERROR_WANT_WRITE) { /* read again once writable */
                    c->tls_read_wants_write = true;
                    update_events(c);
                    return;
                }
                tls_fail(c, r, "read");
                return;
            }
            n = r;
        } else {
            n = read(c->fd, buf, sizeof(buf));
            if (n == 0) {
                fail(c, SL_CONN_EIO, "connection closed by the server");
                return;
            }
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
                fail(c, SL_CONN_EIO, "read: %s", strerror(errno));
                return;
            }
        }
        if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK) {
            fail(c, SL_CONN_EIO, "bad reply: %.100s", c->rd->errstr);
            return;
        }
        dispatch(c);
        if (!c->ssl && (size_t)n < sizeof(buf)) return;
    }
}

static void do_write(sl_rconn *c) {
    c->tls_write_wants_read = false;
    size_t end = writable_end(c);
    while (c->ooff < end && c->st != ST_FAILED) {
        if (c->ssl) {
            size_t len = c->tls_wlen ? c->tls_wlen : end - c->ooff;
            if (len > TLS_WRITE_MAX) len = TLS_WRITE_MAX;
            ERR_clear_error();
            errno = 0;
            int r = SSL_write(c->ssl, c->out + c->ooff, (int)len);
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                    c->tls_wlen = len;
                    c->tls_write_wants_read = e == SSL_ERROR_WANT_READ;
                    break;
                }
                tls_fail(c, r, "write");
                return;
            }
            c->tls_wlen = 0;
            c->ooff += (size_t)r;
        } else {
            ssize_t n = write(c->fd, c->out + c->ooff, end - c->ooff);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                fail(c, SL_CONN_EIO, "write: %s", strerror(errno));
                return;
            }
            c->ooff += (size_t)n;
        }
    }
    if (c->ooff == c->olen && c->st == ST_UP) c->ooff = c->olen = 0;
    update_events(c);
}

static void tls_step(sl_rconn *c) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_connect(c->ssl);
    if (r == 1) {
        c->st = ST_HANDSHAKE;
        do_write(c);
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) want(c, EPOLLIN);
    else if (e == SSL_ERROR_WANT_WRITE) want(c, EPOLLIN | EPOLLOUT);
    else tls_fail(c, r, "handshake");
}

static bool is_ip(const char *s) {
    unsigned char b[16];
    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

static void tls_start(sl_rconn *c, sl_rconn_tls *t, const char *host) {
    c->ssl = SSL_new(t->ctx);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1) {
        char why[200];
        ssl_first_err(why, sizeof(why));
        fail(c, SL_CONN_ETLS, "TLS: %s", why);
        return;
    }
    const char *name = t->server_name[0] ? t->server_name : host;
    bool ip = is_ip(name);
    if (!ip) SSL_set_tlsext_host_name(c->ssl, name); /* SNI is for names only */
    if (t->verify) {
        int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name) : SSL_set1_host(c->ssl, name);
        if (ok != 1) {
            fail(c, SL_CONN_ETLS, "TLS: cannot check the name '%.100s'", name);
            return;
        }
    }
    c->st = ST_TLS;
    want(c, EPOLLIN | EPOLLOUT);
}

static void conn_io(void *ud, uint32_t ev) {
    sl_rconn *c = ud;
    if (c->closed) return; /* an event of this batch for a connection closed in it */
    c->depth++;
    if (c->st == ST_CONNECTING) {
        int e = 0;
        socklen_t l = sizeof(e);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &l) != 0) e = errno;
        if (e != 0) {
            fail(c, SL_CONN_EIO, "connect: %s", strerror(e));
        } else if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) {
            if (c->tls != NULL) {
                tls_start(c, c->tls, c->host);
                if (c->st == ST_TLS) tls_step(c);
            } else {
                c->st = ST_HANDSHAKE;
                do_write(c);
            }
        }
    } else if (c->st == ST_TLS) {
        tls_step(c);
    } else if (c->st != ST_FAILED) {
        if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) || (c->tls_read_wants_write && (ev & EPOLLOUT))) do_read(c);
        if (c->st != ST_FAILED && !c->closed && (ev & EPOLLOUT)) do_write(c);
        else if (c->st != ST_FAILED && !c->closed && c->tls_write_wants_read) do_write(c);
    }
    leave(c);
}

/* ---- opening ---------------------------------------------------------------------------- */

static void set_peer(sl_rconn *c, const sl_rconn_opts *o) {
    if (o->unix_path && o->unix_path[0]) snprintf(c->peer, sizeof(c->peer), "%s", o->unix_path);
    else if (strchr(o->host, ':')) snprintf(c->peer, sizeof(c->peer), "[%.64s]:%d", o->host, o->port);
    else snprintf(c->peer, sizeof(c->peer), "%.64s:%d", o->host, o->port);
}

sl_rconn *sl_rconn_open(sl_loop *loop, const sl_rconn_opts *o, void *owner, sl_rconn_state_fn on_state,
                      char *err, size_t errlen) {
    sl_rconn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->loop = loop;
    c->fd = -1;
    c->owner = owner;
    c->on_state = on_state;
    c->st = ST_CONNECTING;
    set_peer(c, o);
    if (o->password) snprintf(c->secret, sizeof(c->secret), "%s", o->password);
    c->tls = o->tls;
    c->rd = redisReaderCreate();
    if (c->rd == NULL || queue_handshake(c, o) != 0) {
        snprintf(err, errlen, "%s: out of memory", c->peer);
        goto fail;
    }
    sl_redis_reader_guard(c->rd);
    bool is_unix = o->unix_path && o->unix_path[0];
    if (is_unix) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(o->unix_path) >= sizeof(sa.sun_path)) {
            snprintf(err, errlen, "%s: socket path too long", c->peer);
            goto fail;
        }
        memcpy(sa.sun_path, o->unix_path, strlen(o->unix_path) + 1);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS)) {
            snprintf(err, errlen, "%s: connect: %s", c->peer, strerror(errno));
            goto fail;
        }
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG};
        struct addrinfo *res = NULL;
        char port[8];
        snprintf(port, sizeof(port), "%d", o->port);
        int ge = getaddrinfo(o->host, port, &hints, &res);
        if (ge != 0 || res == NULL) {
            if (ge == EAI_ADDRFAMILY || ge == EAI_NONAME) { /* e.g. ::1 with no global v6 */
                hints.ai_flags = AI_NUMERICSERV;
                ge = getaddrinfo(o->host, port, &hints, &res);
            }
            if (ge != 0 || res == NULL) {
                snprintf(err, errlen, "%s: cannot resolve: %s", c->peer, gai_strerror(ge));
                goto fail;
            }
        }
        unsigned n = 0;
        for (struct addrinfo *a = res; a; a = a->ai_next) n++;
        struct addrinfo *a = res;
        for (unsigned k = o->attempt % n; k > 0; k--) a = a->ai_next;
        c->fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (c->fd >= 0) {
            setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        }
        if (c->fd < 0 || (connect(c->fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS)) {
            int e = errno;
            freeaddrinfo(res);
            snprintf(err, errlen, "%s: connect: %s", c->peer, strerror(e));
            goto fail;
        }
        freeaddrinfo(res);
        snprintf(c->host, sizeof(c->host), "%s", o->host);
    }
    if (c->tls != NULL && is_unix) {
        snprintf(err, errlen, "%s: TLS over a unix socket is not supported", c->peer);
        goto fail;
    }
    want(c, EPOLLIN | EPOLLOUT);
    if (!c->in_loop) {
        snprintf(err, errlen, "%s: cannot watch the socket", c->peer);
        goto fail;
    }
    return c;
fail:
    conn_free(c);
    sl_rconn_reap(); /* (never in the loop: nothing can name it) */
    return NULL;
}

/* ---- commands ------------------------------------------------------------------------ */

/* Registers the callback of the command just appended at offset `at`. */
static int queued(sl_rconn *c, sl_rconn_reply_fn fn, void *priv, unsigned flags, size_t at) {
    if (q_push(c, fn, priv, flags) != 0) {
        c->olen = at;
        return -1;
    }
    /* the first bytes of this turn arm EPOLLOUT: a caller that never flushes still has
     * them sent (one loop turn later) */
    if (c->st >= ST_HANDSHAKE && at == c->ooff) update_events(c);
    return 0;
}

static bool usable(const sl_rconn *c) { return c != NULL && c->st != ST_FAILED && !c->closed; }

int sl_rconn_send(sl_rconn *c, const char *cmd, size_t len, sl_rconn_reply_fn fn, void *priv) {
    if (!usable(c) || out_reserve(c, len) != 0) return -1;
    size_t at = c->olen;
    memcpy(c->out + c->olen, cmd, len);
    c->olen += len;
    return queued(c, fn, priv, 0, at);
}

int sl_rconn_command(sl_rconn *c, sl_rconn_reply_fn fn, void *priv, int argc, const char *const *argv,
                    const size_t *lens) {
    size_t at;
    if (!usable(c) || append_argv(c, argc, argv, lens, &at) != 0) return -1;
    return queued(c, fn, priv, 0, at);
}

int sl_rconn_subscribe(sl_rconn *c, const char *channel, sl_rconn_reply_fn fn, void *priv) {
    const char *argv[2] = {"SUBSCRIBE", channel};
    size_t lens[2] = {9, strlen(channel)}, at;
    if (!usable(c) || append_argv(c, 2, argv, lens, &at) != 0) return -1;
    return queued(c, fn, priv, CB_STICKY, at);
}

void sl_rconn_flush(sl_rconn *c) {
    if (c == NULL || c->closed || (c->st != ST_UP && c->st != ST_HANDSHAKE)) return;
    if (c->ooff >= writable_end(c)) return;
    c->depth++;
    do_write(c);
    leave(c);
}

void sl_rconn_fail(sl_rconn *c, sl_rconn_why why, const char *msg) {
    if (c == NULL || c->closed) return;
    c->depth++;
    fail(c, why, "%s", msg);
    leave(c);
}

void sl_rconn_close(sl_rconn *c) {
    if (c == NULL || c->closed) return;
    c->closed = true;
    if (c->depth == 0) conn_free(c);
}

bool sl_rconn_is_up(const sl_rconn *c) { return c != NULL && c->st == ST_UP && !c->closed; }

size_t sl_rconn_unsent(const sl_rconn *c) { return c == NULL ? 0 : c->olen - c->ooff; }

/* ---- logging ---------------------------------------------------------------------------- */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log_last[8][200];
static int64_t g_log_at[8];
static unsigned g_log_next;

/* The level of one of the client's lines: "warning: ..." (insecure settings), failures
 * (connect, TLS, auth) and a failover ("the primary moved") warn; a node back up is info. */
static sl_log_level redis_line_level(const char *line) {
    size_t n = strlen(line);
    if (n >= 11 && strcmp(line + n - 11, ": connected") == 0) return SL_LOG_INFO;
    return SL_LOG_WARN;
}

void sl_redis_log_stderr(void *ud, const char *line) {
    (void)ud;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec;
    pthread_mutex_lock(&g_log_mu);
    bool seen = false;
    for (int i = 0; i < 8 && !seen; i++)
        if (g_log_at[i] != 0 && now - g_log_at[i] < 10 && strncmp(g_log_last[i], line, sizeof(g_log_last[i]) - 1) == 0)
            seen = true;
    if (!seen) {
        unsigned k = g_log_next++ % 8;
        snprintf(g_log_last[k], sizeof(g_log_last[k]), "%s", line);
        g_log_at[k] = now == 0 ? 1 : now;
        sl_log *lg = sl_log_default();
        if (lg != NULL) {
            /* through the server's logger: its format, level and journal priority */
            sl_log_level lvl = redis_line_level(line);
            const char *msg = strncmp(line, "warning: ", 9) == 0 ? line + 9 : line;
            SL_LOG(lg, lvl, "store_redis", msg, SL_LOG_STR("store", "redis"));
        } else {
            fprintf(stderr, "sluice serve: redis %s\n", line); /* no logger: a command-line tool */
        }
    }
    pthread_mutex_unlock(&g_log_mu);
}
