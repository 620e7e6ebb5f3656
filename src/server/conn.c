/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c -- connections: accept, bounded read and write buffers, request framing for
 * both protocols (pipelined requests are answered in order, in one write when possible),
 * output backpressure, timeouts and draining.
 * Bounds: the read buffer grows only as far as one request may need (HTTP head + body
 * limits; RESP SL_CONN_RESP_MAX) and the output buffer to SL_CONN_WMAX; a peer that sends
 * faster than it reads stops being read (EPOLLOUT only) until its output drains.
 * Timeouts: a started request must complete within read_timeout (not refreshed by more
 * bytes: a slowloris client cannot keep it alive), an idle keep-alive connection lives
 * idle_timeout, stalled output write_timeout.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "server/grpc_conn.h"
#include "server/pending.h"
#include "server/observe.h"
#include "server/server.h"
#include "server/tls.h"

/* Idle buffers are sized for the common case (a request head, a decision's answer) and
 * grow on demand; a read buffer grown for one large request shrinks back once it is
 * consumed, a write buffer once it is sent. Every buffer's bytes count in the server's
 * `buffered`, which opt.max_buffered bounds (issue 27: 300 connections each stalled
 * inside a 1 MiB RESP request held 303 MB; at --max-conns 10000 that was 10 GB). */
#define SL_CONN_RINIT 8192
#define SL_CONN_WINIT 8192
#define SL_CONN_WMAX (4u << 20)
#define SL_CONN_RESP_MAX (1u << 20)
/* Stop parsing more pipelined requests while this much output is unsent. */
#define SL_CONN_WHIGH (256u << 10)

static int conn_catch_up(sl_conn *c);
static void conn_io(void *ud, uint32_t events);

/* A kind of connection's own steps (conn_ops, below): process frames and answers what
 * the read buffer holds and returns the bytes consumed; the others are optional. */
typedef struct sl_conn_ops {
    const char *name;
    size_t (*process)(sl_conn *c, bool draining);
    void (*output)(sl_conn *c);       /* the session's queued output, once there is room */
    void (*tick)(sl_conn *c);         /* every worker tick: the session's own deadlines */
    void (*drain)(sl_conn *c);        /* the server drains: say so to the client (GOAWAY) */
    void (*read_timeout)(sl_conn *c); /* a request was not received in time: answer it */
    void (*free)(sl_conn *c);         /* the protocol's state, when the connection closes */
} sl_conn_ops;
static const sl_conn_ops conn_ops[SL_KINDS];

static void conn_close(sl_conn *c) {
    sl_worker *w = c->w;
    sl_pending_conn_gone(c); /* its requests waiting for the store answer nobody */
    for (unsigned i = 0; c->flush_queued && i < w->nflushq; i++)
        if (w->flushq[i] == c) w->flushq[i] = w->flushq[--w->nflushq], c->flush_queued = false;
    sl_loop_del(&w->loop, &c->io);
    close(c->io.fd);
    sl_dnode_disarm(&c->timer);
    if (c->prev_all)
        c->prev_all->next_all = c->next_all;
    else
        w->conns = c->next_all;
    if (c->next_all) c->next_all->prev_all = c->prev_all;
    w->nconns--;
    if (c->kind == SL_KIND_GRPC) w->ngrpc--;
    if (c->hold_until_ns) w->nheld--;
    if (conn_ops[c->kind].free) conn_ops[c->kind].free(c);
    sl_ovr_stream_free(c->ovr_imp);
    c->ovr_imp = NULL;
    sl_ovr_export_free(c->ovr_exp);
    c->ovr_exp = NULL;
    sl_tls_free(c->tls);
    c->tls = NULL;
    atomic_fetch_sub(c->listener == SL_KIND_ADMIN ? &w->srv->nconns_admin : &w->srv->nconns, 1);
    atomic_fetch_sub(&w->srv->buffered, (uint64_t)(c->rcap + c->wcap));
    free(c->rbuf);
    free(c->wbuf);
    c->rbuf = c->wbuf = NULL;
    c->rcap = c->wcap = 0;
    /* Why not free(c) now: this loop turn's batch of events may still hold c (a resumed
     * or another connection's callback closed it); it is freed when the turn ends. */
    c->closed = true;
    c->next_dead = w->dead;
    w->dead = c;
}

void sl_worker_reap(sl_worker *w) {
    while (w->dead != NULL) {
        sl_conn *c = w->dead;
        w->dead = c->next_dead;
        free(c);
    }
}

void sl_conn_accept(sl_worker *w, int lfd, sl_conn_kind kind) {
    sl_server *s = w->srv;
    for (int i = 0; i < 32; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if ((errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) &&
                w->listening && w->accept_paused_until == 0) {
                /* out of descriptors: a level-triggered listener would spin, so stop
                 * accepting for 100 ms (the backlog waits; the tick resumes) */
                for (int k = 0; k < SL_LISTENERS; k++)
                    if (s->lfd[k] >= 0) sl_loop_del(&w->loop, &w->listen_io[k]);
                w->accept_paused_until = w->now_ns + 100 * SLUICE_NS_PER_MS;
            }
            return; /* EAGAIN: nothing more to accept */
        }
        if (atomic_load(&s->draining)) {
            close(fd);
            continue;
        }
        /* Why the admin listener has its own budget: probes and operators must get in
         * while the data listeners are full (10,000 idle clients must not lock out
         * /healthz). */
        _Atomic unsigned *cnt = kind == SL_KIND_ADMIN ? &s->nconns_admin : &s->nconns;
        unsigned cap = kind == SL_KIND_ADMIN ? SL_ADMIN_MAX_CONNS : s->opt.max_conns;
        unsigned n = atomic_fetch_add(cnt, 1);
        if (n >= cap) {
            atomic_fetch_sub(cnt, 1);
            sl_met_inc(&w->met->conns_refused, 1);
            sl_obs_conn_refused(w, kind); /* by listener, and summarised in the log */
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        sl_conn *c = calloc(1, sizeof(*c));
        if (c) {
            c->rbuf = malloc(SL_CONN_RINIT);
            c->wbuf = malloc(SL_CONN_WINIT);
        }
        if (c == NULL || c->rbuf == NULL || c->wbuf == NULL) {
            if (c) {
                free(c->rbuf);
                free(c->wbuf);
                free(c);
            }
            atomic_fetch_sub(cnt, 1);
            close(fd);
            continue;
        }
        if (kind == SL_KIND_GRPC && s->grpc_tls != NULL && (c->tls = sl_tls_accept(s->grpc_tls, fd)) == NULL) {
            free(c->rbuf);
            free(c->wbuf);
            free(c);
            atomic_fetch_sub(cnt, 1);
            close(fd);
            continue;
        }
        c->rcap = SL_CONN_RINIT;
        c->wcap = SL_CONN_WINIT;
        c->w = w;
        c->kind = kind;
        c->listener = kind;
        c->proto = 2;
        c->io = (sl_io){.fd = fd, .cb = conn_io, .ud = c};
        sl_dnode_init(&c->timer);
        if (ss.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->peer_ip, sizeof(c->peer_ip));
        else if (ss.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->peer_ip,
                      sizeof(c->peer_ip));
        if (sl_loop_add(&w->loop, &c->io, EPOLLIN | EPOLLRDHUP) != 0) {
            atomic_fetch_sub(cnt, 1);
            sl_tls_free(c->tls);
            close(fd);
            free(c->rbuf);
            free(c->wbuf);
            free(c);
            continue;
        }
        if (kind == SL_KIND_GRPC) w->ngrpc++;
        c->next_all = w->conns;
        if (w->conns) w->conns->prev_all = c;
        w->conns = c;
        w->nconns++;
        atomic_fetch_add(&s->buffered, (uint64_t)(c->rcap + c->wcap));
        /* a new connection must start a request within the read timeout: one that never
         * sends a byte is not an idle keep-alive connection and does not get its time */
        sl_dlist_arm(&w->tl[SL_TL_READ], &c->timer, w->now_ns);
    }
}

int sl_conn_reserve(sl_conn *c, size_t n) {
    if (c->woff > 0 && c->woff == c->wlen) c->woff = c->wlen = 0;
    if (c->wcap - c->wlen >= n) return 0;
    if (c->woff > 0) {
        memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
        c->wlen -= c->woff;
        c->woff = 0;
        if (c->wcap - c->wlen >= n) return 0;
    }
    size_t need = c->wlen + n;
    if (need > SL_CONN_WMAX) return -1;
    size_t cap = c->wcap;
    while (cap < need) cap *= 2;
    if (cap > SL_CONN_WMAX) cap = SL_CONN_WMAX;
    char *p = realloc(c->wbuf, cap);
    if (p == NULL) return -1;
    c->wbuf = p;
    atomic_fetch_add(&c->w->srv->buffered, (uint64_t)(cap - c->wcap));
    c->wcap = cap;
    return 0;
}

void sl_conn_wbuf(sl_conn *c, sl_wbuf *wb) { sl_wbuf_init(wb, c->wbuf + c->wlen, c->wcap - c->wlen); }

void sl_conn_commit(sl_conn *c, const sl_wbuf *wb) {
    if (!wb->overflow) c->wlen += wb->len;
}

void sl_conn_hold(sl_conn *c, int64_t delay_ns) {
    if (delay_ns <= 0) return;
    int64_t until = sl_clock_mono_ns() + delay_ns;
    if (c->hold_until_ns == 0) c->w->nheld++;
    if (until > c->hold_until_ns) c->hold_until_ns = until;
}

/* Writes pending output; returns 0, or -1 when the connection is broken. */
static int conn_flush(sl_conn *c) {
    if (c->hold_until_ns) return 0; /* a delayed reply waits for its time */
    while (c->woff < c->wlen) {
        ssize_t n = c->tls ? sl_tls_send(c->tls, c->wbuf + c->woff, c->wlen - c->woff)
                           : send(c->io.fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
        if (n > 0) {
            c->woff += (size_t)n;
            if (c->timer.list == SL_TL_WRITE)
                sl_dlist_arm(&c->w->tl[SL_TL_WRITE], &c->timer, c->w->now_ns);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
    c->woff = c->wlen = 0;
    if (c->wcap > 4 * SL_CONN_WINIT) { /* give back a buffer grown for one big reply */
        char *p = realloc(c->wbuf, SL_CONN_WINIT);
        if (p) {
            c->wbuf = p;
            atomic_fetch_sub(&c->w->srv->buffered, (uint64_t)(c->wcap - SL_CONN_WINIT));
            c->wcap = SL_CONN_WINIT;
        }
    }
    return 0;
}

static void raw_reply(sl_conn *c, const char *s) {
    size_t n = strlen(s);
    if (sl_conn_reserve(c, n) == 0) {
        memcpy(c->wbuf + c->wlen, s, n);
        c->wlen += n;
    }
}

void sl_http_raw(sl_conn *c, const char *s) { raw_reply(c, s); }

/* Closes the worker's oldest stalled connection holding a grown read buffer (the READ
 * list is in the order requests started: its head has waited longest for the rest of
 * its request), other than `keep`. Returns false when there is none. Only this worker's
 * connections: another worker's belong to its thread. */
static bool evict_stalled(sl_worker *w, const sl_conn *keep) {
    sl_dnode *head = &w->tl[SL_TL_READ].head;
    for (sl_dnode *n = head->next; n != head; n = n->next) {
        sl_conn *v = (sl_conn *)((char *)n - offsetof(sl_conn, timer));
        if (v == keep || v->rcap <= SL_CONN_RINIT) continue;
        sl_server *s = w->srv;
        uint64_t held = v->rcap;
        atomic_fetch_add(&s->evicted, 1);
        sl_log *log = s->obs ? s->obs->log : NULL;
        SL_LOG(log, SL_LOG_WARN, "conn_evicted",
               "closed the oldest stalled connection: buffered request bytes at their budget",
               SL_LOG_STR("listener", conn_ops[v->kind].name), SL_LOG_UINT("held_bytes", held),
               SL_LOG_UINT("buffered_bytes", atomic_load(&s->buffered)),
               SL_LOG_UINT("max_buffered", s->opt.max_buffered));
        conn_close(v);
        return true;
    }
    return false;
}

/* Room for `more` bytes of buffers within the server's budget, closing the oldest stalled
 * connections of this worker as needed; false when they do not free enough. */
static bool budget_room(sl_conn *c, size_t more) {
    sl_server *s = c->w->srv;
    if (s->opt.max_buffered == 0) return true;
    while (atomic_load(&s->buffered) + more > s->opt.max_buffered)
        if (!evict_stalled(c->w, c)) return false;
    return true;
}

/* -1: at `max`; -2: over the memory budget (nothing to evict); else 0. */
static int grow_rbuf(sl_conn *c, size_t max) {
    if (c->rcap >= max) return -1;
    size_t cap = c->rcap * 2;
    if (cap > max) cap = max;
    if (!budget_room(c, cap - c->rcap)) return -2;
    char *p = realloc(c->rbuf, cap);
    if (p == NULL) return -1;
    c->rbuf = p;
    atomic_fetch_add(&c->w->srv->buffered, (uint64_t)(cap - c->rcap));
    c->rcap = cap;
    return 0;
}

/* A read buffer grown for one large request goes back to its idle size once what is left
 * in it fits (a client sending large requests over and over grows it again). */
static void shrink_rbuf(sl_conn *c) {
    if (c->rcap <= SL_CONN_RINIT || c->rlen > SL_CONN_RINIT) return;
    char *p = realloc(c->rbuf, SL_CONN_RINIT);
    if (p == NULL) return;
    c->rbuf = p;
    atomic_fetch_sub(&c->w->srv->buffered, (uint64_t)(c->rcap - SL_CONN_RINIT));
    c->rcap = SL_CONN_RINIT;
}

static size_t http_rmax(const sl_server *s) {
    return s->opt.http_limits.max_head + s->opt.http_limits.max_body + 4096;
}

/* Whether the next request of the read buffer may be handled now: not while the output
 * is backed up (backpressure), an answer is held (answers leave in order) or the shared
 * store has not answered the previous one. */
static bool conn_may_go_on(const sl_conn *c) {
    return c->wlen - c->woff <= SL_CONN_WHIGH && !c->hold_until_ns && !c->suspended &&
           c->ovr_exp == NULL;
}

/* A streamed export (GET /v1/overrides/export): more of it whenever the output drained,
 * until the socket is full (EPOLLOUT brings us back) or the export ends. */
static int export_pump(sl_conn *c) {
    while (c->ovr_exp != NULL) {
        sl_ovr_export_more(c);
        if (conn_flush(c) != 0) return -1;
        if (c->woff < c->wlen) break;
    }
    return 0;
}

/* RESP: commands framed and answered in order; consecutive SL.CHECK/SL.PEEK go through
 * one batch (resp_cmds.c). Returns the bytes consumed. */
static size_t resp_process(sl_conn *c, bool draining) {
    sl_worker *w = c->w;
    size_t off = 0;
    while (off < c->rlen && !c->close_after && conn_may_go_on(c)) {
        /* latency is sampled (1 request in 16) so the clock is not read per request */
        bool sample = (w->seq++ & 15) == 0;
        int64_t t0 = sample ? sl_clock_mono_ns() : 0;
        static _Thread_local sl_resp_cmd cmd;
        int rc = sl_resp_parse(c->rbuf + off, c->rlen - off, &cmd, w->scratch, sizeof(w->scratch));
        if (rc == SL_RESP_INCOMPLETE) {
            int g = off == 0 && c->rlen == c->rcap ? grow_rbuf(c, SL_CONN_RESP_MAX) : 0;
            if (g != 0) {
                raw_reply(c, g == -2 ? "-ERR server busy: buffered request bytes at their budget\r\n"
                                     : "-ERR Protocol error: request too large\r\n");
                c->close_after = true;
                off = c->rlen;
            }
            break;
        }
        if (rc < 0) {
            sl_resp_batch_flush(c); /* the answers before the error, in order */
            char line[128];
            snprintf(line, sizeof(line), "-ERR %s\r\n", cmd.err);
            raw_reply(c, line);
            sl_met_inc(&w->met->bad_requests, 1);
            c->close_after = true;
            off = c->rlen;
            break;
        }
        off += (size_t)rc;
        if (cmd.argc > 0) {
            sl_met_inc(&w->met->resp_commands, 1);
            if (sl_resp_batch_take(c, &cmd)) continue; /* decided with the others */
            sl_resp_batch_flush(c);
            sl_resp_handle(c, &cmd);
            if (c->suspended) break; /* its answer comes from the store later */
        }
        if (sample) sl_server_observe_latency(w, sl_clock_mono_ns() - t0);
        if (draining) c->close_after = true;
    }
    sl_resp_batch_flush(c); /* its keys are in rbuf */
    return off;
}

/* HTTP/1.1 (data and admin listeners): requests framed and answered in order, with
 * 100-continue, growth of the read buffer up to the limits, and 408/413/4xx answers. */
static size_t http_process(sl_conn *c, bool draining) {
    sl_worker *w = c->w;
    sl_server *s = w->srv;
    size_t off = 0;
    while (off < c->rlen && !c->close_after && conn_may_go_on(c)) {
        if (c->ovr_imp != NULL) { /* a streamed import's body: taken as it comes */
            off += sl_ovr_stream_feed(c, c->rbuf + off, c->rlen - off);
            if (c->ovr_imp != NULL) break;
            continue;
        }
        bool sample = (w->seq++ & 15) == 0;
        int64_t t0 = sample ? sl_clock_mono_ns() : 0;
        sl_http_req req;
        int rc = sl_http1_parse(c->rbuf + off, c->rlen - off, &s->opt.http_limits, &req,
                                w->body_buf, s->opt.http_limits.max_body);
        if ((rc == SL_HTTP_INCOMPLETE || rc == -413) && req.head_done && c->kind == SL_KIND_ADMIN &&
            sl_ovr_stream_begin(c, &req)) {
            /* POST /v1/overrides/import: its head is consumed, its body streamed */
            const char *end = memmem(c->rbuf + off, c->rlen - off, "\r\n\r\n", 4);
            off = (size_t)(end + 4 - c->rbuf);
            sl_met_inc(&w->met->http_requests, 1);
            continue; /* the stream closes the connection after its answer if asked to */
        }
        if (rc == SL_HTTP_INCOMPLETE) {
            if (req.head_done && req.expect_continue && !c->sent_continue) {
                raw_reply(c, req.minor == 0 ? "HTTP/1.0 100 Continue\r\n\r\n"
                                            : "HTTP/1.1 100 Continue\r\n\r\n");
                c->sent_continue = true;
            }
            if (c->rlen - off == c->rcap || (off == 0 && c->rlen == c->rcap)) {
                int g = grow_rbuf(c, http_rmax(s));
                if (g != 0) {
                    if (g == -2) sl_http_error(c, 1, 503, "buffered request bytes at the server's budget");
                    else sl_http_error(c, 1, 413, "request too large");
                    c->close_after = true;
                    off = c->rlen;
                }
            }
            break;
        }
        if (rc < 0) {
            sl_met_inc(&w->met->bad_requests, 1);
            sl_http_error(c, req.minor, -rc, NULL);
            c->close_after = true;
            off = c->rlen;
            break;
        }
        off += (size_t)rc;
        c->sent_continue = false;
        sl_met_inc(&w->met->http_requests, 1);
        if (!req.keep_alive || draining) c->close_after = true;
        sl_http_handle(c, &req);
        if (c->suspended) break; /* its answer comes from the store later */
        if (sample) sl_server_observe_latency(w, sl_clock_mono_ns() - t0);
        if (draining) c->close_after = true;
    }
    return off;
}

/* gRPC: the bytes go to the HTTP/2 session, which consumes them itself. */
static size_t grpc_process(sl_conn *c, bool draining) {
    (void)draining; /* GOAWAY is the session's (grpc_drain) */
    if (sl_grpc_conn_feed(c, &c->h2) != 0) c->broken = true;
    return 0;
}

static void grpc_output(sl_conn *c) { sl_grpc_conn_output(c, c->h2); }
static void grpc_tick(sl_conn *c) { sl_grpc_conn_tick(c, c->h2); }
static void grpc_drain(sl_conn *c) { sl_grpc_conn_drain(c, c->h2); }
static void grpc_free(sl_conn *c) {
    sl_grpc_conn_free(c->h2);
    c->h2 = NULL;
}

/* A read timeout on a half-received HTTP request is answered 408 (best effort). */
static void http_read_timeout(sl_conn *c) {
    if (c->rlen > 0 && c->woff == c->wlen) {
        sl_http_error(c, 1, 408, "the request was not received in time");
        (void)conn_flush(c); /* never waits */
    }
}

/* What differs between the kinds of connection: everything else (accept, buffers,
 * timeouts, holds, suspension, flushing, closing) is the same code for all. */
static const sl_conn_ops conn_ops[SL_KINDS] = {
    [SL_KIND_HTTP] = {.name = "http", .process = http_process, .read_timeout = http_read_timeout},
    [SL_KIND_RESP] = {.name = "resp", .process = resp_process},
    [SL_KIND_ADMIN] = {.name = "admin", .process = http_process, .read_timeout = http_read_timeout},
    [SL_KIND_GRPC] = {.name = "grpc", .process = grpc_process, .output = grpc_output,
                      .tick = grpc_tick, .drain = grpc_drain, .free = grpc_free},
};

/* Frames and answers every complete request in the read buffer. */
static void conn_process(sl_conn *c) {
    sl_worker *w = c->w;
    bool draining = atomic_load_explicit(&w->srv->draining, memory_order_relaxed);
    w->have_batch_now = false; /* one decision time per read: see sl_worker_now */
    if (c->kind == SL_KIND_HTTP && !c->proto_known && c->rlen > 0) {
        /* h2c with prior knowledge on the HTTP port: the connection becomes gRPC */
        int p = sl_grpc_preface(c->rbuf, c->rlen);
        if (p < 0) return; /* a prefix of the preface: wait for more */
        c->proto_known = true;
        if (p == 1) {
            c->kind = SL_KIND_GRPC;
            w->ngrpc++;
        }
    }
    size_t off = conn_ops[c->kind].process(c, draining);
    if (off > 0) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
        shrink_rbuf(c);
        /* a request completed: what is left is a new request, whose read deadline
         * starts now (a client that never completes one is never re-armed) */
        if (c->timer.list == SL_TL_READ) sl_dnode_disarm(&c->timer);
    }
}

/* Chooses the interest set and the timeout list from the connection's state. */
static void conn_settle_state(sl_conn *c) {
    sl_worker *w = c->w;
    if (c->hold_until_ns || c->suspended) { /* nothing to do until the hold ends or the store answers */
        if (!c->held_armed) {
            sl_loop_mod(&w->loop, &c->io, 0);
            c->held_armed = true;
        }
        sl_dnode_disarm(&c->timer); /* bounded by the policy's max delay */
        return;
    }
    bool pending = c->woff < c->wlen;
    if (pending != c->want_out || c->held_armed) {
        sl_loop_mod(&w->loop, &c->io, pending ? EPOLLOUT : (EPOLLIN | EPOLLRDHUP));
        c->want_out = pending;
        c->held_armed = false;
    }
    if (pending) {
        if (c->timer.list != SL_TL_WRITE) sl_dlist_arm(&w->tl[SL_TL_WRITE], &c->timer, w->now_ns);
    } else if (c->rlen > 0) {
        if (c->timer.list != SL_TL_READ) sl_dlist_arm(&w->tl[SL_TL_READ], &c->timer, w->now_ns);
    } else {
        sl_dlist_arm(&w->tl[SL_TL_IDLE], &c->timer, w->now_ns);
    }
}

static void conn_io(void *ud, uint32_t events) {
    sl_conn *c = ud;
    if (c->closed) return; /* an event of this turn's batch for a connection closed in it */
    bool eof = false;
    if ((events & EPOLLERR) ||
        ((c->hold_until_ns || c->suspended) && (events & (EPOLLHUP | EPOLLRDHUP)))) {
        conn_close(c); /* (a held client that went away gets nothing) */
        return;
    }
    if (events & EPOLLOUT) {
        if (conn_flush(c) != 0) {
            conn_close(c);
            return;
        }
        if (c->woff == c->wlen && c->ovr_exp != NULL && export_pump(c) != 0) {
            conn_close(c);
            return;
        }
        if (c->woff == c->wlen && c->h2 && conn_ops[c->kind].output) {
            conn_ops[c->kind].output(c); /* the session's queued output, now that there is room */
            if (conn_flush(c) != 0) {
                conn_close(c);
                return;
            }
        }
        if (c->woff == c->wlen && c->rlen > 0 && !c->close_after) conn_process(c);
    }
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) && !c->want_out) {
        for (int k = 0; k < 4 && c->rlen < c->rcap; k++) {
            ssize_t n = c->tls ? sl_tls_recv(c->tls, c->rbuf + c->rlen, c->rcap - c->rlen)
                               : recv(c->io.fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
            if (n > 0) {
                c->rlen += (size_t)n;
                /* TLS: decrypted bytes may wait inside with no socket event to say so */
                if (c->rlen < c->rcap && !(c->tls && sl_tls_pending(c->tls))) break;
                if (c->rlen < c->rcap) continue;
                conn_process(c); /* make room: a full buffer may hold many requests */
                if (c->rlen == c->rcap || c->close_after) break;
                continue;
            }
            if (n == 0) {
                eof = true;
                break;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            conn_close(c);
            return;
        }
        if (!c->close_after) conn_process(c);
    }
    if (c->broken || conn_flush(c) != 0 ||
        (c->ovr_exp != NULL && c->woff == c->wlen && export_pump(c) != 0) ||
        conn_catch_up(c) != 0) {
        conn_close(c);
        return;
    }
    if (c->suspended) { /* a half-close is seen again once resumed */
        conn_settle_state(c);
        return;
    }
    if ((c->close_after || eof) && c->woff == c->wlen) {
        conn_close(c);
        return;
    }
    if (eof) {
        /* peer half-closed with output pending: finish writing, then close */
        c->close_after = true;
        c->rlen = 0;
    }
    conn_settle_state(c);
}

/* After the server pushed output outside an I/O event (ticks, drain): write it, and
 * close when the connection is finished. Returns false when c was closed. */
/* Why: processing stops at the output's high mark with complete requests still in the
 * read buffer; once that output has left, nothing else will wake the connection for them
 * (the client may have sent everything already), so go on with them now, as long as each
 * round consumes something. 0, or -1 when the connection must close. */
static int conn_catch_up(sl_conn *c) {
    while (c->woff == c->wlen && c->rlen > 0 && !c->close_after && !c->suspended &&
           !c->hold_until_ns && !c->broken) {
        size_t before = c->rlen;
        conn_process(c);
        if (conn_flush(c) != 0) return -1;
        if (c->rlen == before) break; /* an incomplete request: its rest will come as input */
    }
    return c->broken ? -1 : 0;
}

static bool conn_after_push(sl_conn *c) {
    if (c->broken || conn_flush(c) != 0 || conn_catch_up(c) != 0 || (c->close_after && c->woff == c->wlen)) {
        conn_close(c);
        return false;
    }
    conn_settle_state(c);
    return true;
}

void sl_conn_resume(sl_conn *c) {
    if (c->closed || !c->suspended) return;
    c->suspended = false;
    c->w->now_ns = sl_clock_mono_ns();
    conn_process(c);
    conn_after_push(c);
}

void sl_conn_flush_later(sl_conn *c) {
    if (c->closed || c->flush_queued) return;
    if (c->w->nflushq == sizeof(c->w->flushq) / sizeof(c->w->flushq[0])) {
        conn_after_push(c);
        return;
    }
    c->flush_queued = true;
    c->w->flushq[c->w->nflushq++] = c;
}

void sl_worker_flush_resumed(sl_worker *w) {
    while (w->nflushq > 0) {
        sl_conn *c = w->flushq[--w->nflushq];
        c->flush_queued = false;
        conn_after_push(c);
    }
}

void sl_worker_tick(sl_worker *w) {
    sl_dnode *n;
    if (w->accept_paused_until && w->now_ns >= w->accept_paused_until) {
        w->accept_paused_until = 0;
        if (w->listening && !atomic_load(&w->srv->draining))
            for (int k = 0; k < SL_LISTENERS; k++)
                if (w->srv->lfd[k] >= 0)
                    sl_loop_add(&w->loop, &w->listen_io[k], EPOLLIN | EPOLLEXCLUSIVE);
    }
    if (w->nheld > 0) { /* release delayed replies whose time has come */
        for (sl_conn *c = w->conns, *next; c; c = next) {
            next = c->next_all;
            if (c->hold_until_ns == 0 || c->hold_until_ns > w->now_ns) continue;
            c->hold_until_ns = 0;
            w->nheld--;
            if (conn_flush(c) != 0) {
                conn_close(c);
                continue;
            }
            if (c->woff == c->wlen && c->rlen > 0 && !c->close_after) conn_process(c);
            conn_after_push(c);
        }
    }
    if (w->ngrpc > 0) { /* gRPC deadlines (grpc-timeout) are the session's own */
        for (sl_conn *c = w->conns, *next; c; c = next) {
            next = c->next_all;
            if (conn_ops[c->kind].tick && c->h2) {
                conn_ops[c->kind].tick(c);
                conn_after_push(c);
            }
        }
    }
    for (int l = 0; l < 3; l++) {
        while ((n = sl_dlist_expired(&w->tl[l], w->now_ns)) != NULL) {
            sl_conn *c = (sl_conn *)((char *)n - offsetof(sl_conn, timer));
            if (l == SL_TL_READ) {
                sl_met_inc(&w->met->timeouts, 1);
                if (conn_ops[c->kind].read_timeout) conn_ops[c->kind].read_timeout(c);
            } else if (l == SL_TL_WRITE) {
                sl_met_inc(&w->met->timeouts, 1);
            }
            conn_close(c);
        }
    }
}

void sl_worker_drain(sl_worker *w) {
    sl_conn *c = w->conns;
    while (c) {
        sl_conn *next = c->next_all;
        if (conn_ops[c->kind].drain && c->h2) {
            if (!c->goaway_sent) { /* GOAWAY once; calls in flight finish */
                c->goaway_sent = true;
                conn_ops[c->kind].drain(c);
                conn_after_push(c);
            }
        } else if (c->rlen == 0 && c->woff == c->wlen) {
            conn_close(c);
        }
        c = next;
    }
}

void sl_worker_close_all(sl_worker *w) {
    while (w->conns) conn_close(w->conns);
    sl_worker_reap(w);
}
