/* SPDX-License-Identifier: Apache-2.0 */
/*
 * openloop.c -- a paced (open-loop) load generator for tail latency, free of coordinated
 * omission: request i is due at t0 + i/rate whatever the answers do, and its latency is
 * counted from that intended moment to its answer (a stalled server is charged for every
 * request that queued behind the stall, as wrk2 does). Also a closed-loop mode to find the
 * peak first. Protocols: HTTP/1.1 keep-alive (pipelined when a connection is busy), RESP
 * (pipelined), gRPC over h2c (one stream per request, HPACK literals only, so every
 * HEADERS block is independent of the compression state). One thread, epoll.
 *   openloop http|resp|grpc HOST PORT RATE|peak SECONDS CONNS [KEYS] [TARGET]
 *     RATE: requests/s (open loop) or "peak" (closed loop: each connection keeps DEPTH
 *     requests in flight, env OPENLOOP_DEPTH, default 1 for http/grpc, 8 for resp)
 *     TARGET: http: a path (/v1/auth); resp: a command's words, comma-separated, with
 *     KKKKKK where the key number goes (SL.CHECK,bench,k:KKKKKK); grpc: the RLS domain
 *     (the request's one descriptor is k=vKKKKKK)
 *   Keys cycle through KEYS (default 100000, 6 digits). The first second is a warm-up
 *   (sent, not recorded). Output, one line: "rate R sent S done D errors E achieved A/s
 *   p50 X p99 Y p999 Z max M us" (latencies in microseconds).
 * Not a general tool: answers are framed just enough to count them (HTTP needs a
 * Content-Length; RESP any reply; h2 END_STREAM or RST_STREAM per stream).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { HTTP, RESP, GRPC };
#define RING 65536 /* outstanding requests per connection (intended times) */

typedef struct {
    int fd;
    char *out;
    size_t olen, ocap, ooff;
    char *in;
    size_t ilen, icap;
    int64_t *due; /* http/resp: FIFO of intended times; grpc: by (stream id - 1) / 2 */
    uint64_t head, tail; /* FIFO */
    uint32_t next_sid;   /* grpc */
    int64_t recv_unacked; /* grpc: DATA bytes since the last WINDOW_UPDATE */
    int inflight;
} conn;

static int proto;
static char tmpl[4096];
static size_t tmpl_len, key_at[8];
static int nkey_at;
static long nkeys = 100000, key_seq;
static int64_t *lat;
static size_t nlat, caplat;
static int64_t warm_until;
static long sent, done, errors;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *m) {
    perror(m);
    exit(2);
}

static void put(conn *c, const void *p, size_t n) {
    if (c->olen + n > c->ocap) {
        if (c->ooff > 0) { /* compact */
            memmove(c->out, c->out + c->ooff, c->olen - c->ooff);
            c->olen -= c->ooff, c->ooff = 0;
        }
        while (c->olen + n > c->ocap) c->ocap = c->ocap ? c->ocap * 2 : 65536;
        c->out = realloc(c->out, c->ocap);
        if (c->out == NULL) die("realloc");
    }
    memcpy(c->out + c->olen, p, n);
    c->olen += n;
}

/* the template with the next key's 6 digits in place */
static const char *next_request(void) {
    long k = key_seq++ % nkeys;
    for (int i = 0; i < nkey_at; i++) {
        long v = k;
        for (int d = 5; d >= 0; d--) tmpl[key_at[i] + (size_t)d] = (char)('0' + v % 10), v /= 10;
    }
    return tmpl;
}

static void find_keys(void) {
    nkey_at = 0;
    for (size_t i = 0; i + 6 <= tmpl_len && nkey_at < 8; i++)
        if (memcmp(tmpl + i, "KKKKKK", 6) == 0) key_at[nkey_at++] = i, i += 5;
}

/* ---- h2 framing (gRPC) ------------------------------------------------------------- */

static size_t frame_head(unsigned char *p, size_t len, int type, int flags, uint32_t sid) {
    p[0] = (unsigned char)(len >> 16), p[1] = (unsigned char)(len >> 8), p[2] = (unsigned char)len;
    p[3] = (unsigned char)type, p[4] = (unsigned char)flags;
    p[5] = (unsigned char)(sid >> 24) & 0x7f, p[6] = (unsigned char)(sid >> 16), p[7] = (unsigned char)(sid >> 8),
    p[8] = (unsigned char)sid;
    return 9;
}

static unsigned char hblock[1024];
static size_t hblock_len;

static void hpack_lit(const char *name, const char *value) { /* literal, not indexed, new name */
    size_t nl = strlen(name), vl = strlen(value);
    hblock[hblock_len++] = 0x00;
    hblock[hblock_len++] = (unsigned char)nl;
    memcpy(hblock + hblock_len, name, nl), hblock_len += nl;
    hblock[hblock_len++] = (unsigned char)vl;
    memcpy(hblock + hblock_len, value, vl), hblock_len += vl;
}

static void grpc_setup(const char *host, const char *domain) {
    hpack_lit(":method", "POST");
    hpack_lit(":scheme", "http");
    hpack_lit(":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
    hpack_lit(":authority", host);
    hpack_lit("content-type", "application/grpc");
    hpack_lit("te", "trailers");
    /* RateLimitRequest{domain, descriptors: [{entries: [{key: "k", value: "vKKKKKK"}]}]} */
    unsigned char msg[256];
    size_t m = 0, dl = strlen(domain);
    msg[m++] = 0x0a, msg[m++] = (unsigned char)dl;
    memcpy(msg + m, domain, dl), m += dl;
    static const unsigned char entry[] = {0x0a, 0x03, 'k', 0x12, 0x07, 'v', 'K', 'K', 'K', 'K', 'K', 'K'};
    msg[m++] = 0x12, msg[m++] = (unsigned char)(sizeof(entry) + 2); /* descriptor */
    msg[m++] = 0x0a, msg[m++] = (unsigned char)sizeof(entry);       /* its entry */
    memcpy(msg + m, entry, sizeof(entry)), m += sizeof(entry);
    /* the DATA frame's payload: gRPC prefix (uncompressed, length) + message */
    tmpl[0] = 0, tmpl[1] = 0, tmpl[2] = 0, tmpl[3] = (char)(m >> 8), tmpl[4] = (char)m;
    memcpy(tmpl + 5, msg, m);
    tmpl_len = 5 + m;
    find_keys();
}

static void grpc_preface(conn *c) {
    static const char pre[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    put(c, pre, sizeof(pre) - 1);
    unsigned char f[64];
    size_t n = frame_head(f, 12, 4, 0, 0); /* SETTINGS: window 1 GiB, 1000 streams */
    static const unsigned char s[12] = {0, 4, 0x40, 0, 0, 0, 0, 3, 0, 0, 0x03, 0xe8};
    memcpy(f + n, s, 12), n += 12;
    put(c, f, n);
    n = frame_head(f, 4, 8, 0, 0); /* connection WINDOW_UPDATE */
    f[n++] = 0x3f, f[n++] = 0xff, f[n++] = 0, f[n++] = 0;
    put(c, f, n);
    c->next_sid = 1;
}

/* ---- sending ---------------------------------------------------------------------- */

static int64_t late_sum, late_max; /* how late requests left against their due time */

static void send_one(conn *c, int64_t due) {
    const char *req = next_request();
    int64_t late = now_ns() - due;
    late_sum += late;
    if (late > late_max) late_max = late;
    if (proto == GRPC) {
        uint32_t sid = c->next_sid;
        c->next_sid += 2;
        unsigned char f[16];
        put(c, f, frame_head(f, hblock_len, 1, 0x4, sid)); /* HEADERS, END_HEADERS */
        put(c, hblock, hblock_len);
        put(c, f, frame_head(f, tmpl_len, 0, 0x1, sid)); /* DATA, END_STREAM */
        put(c, req, tmpl_len);
        c->due[((sid - 1) / 2) % RING] = due;
    } else {
        put(c, req, tmpl_len);
        c->due[c->tail++ % RING] = due;
    }
    c->inflight++;
    sent++;
}

static void record(int64_t due, int64_t at) {
    done++;
    if (due < warm_until) return;
    if (nlat == caplat) {
        caplat = caplat ? caplat * 2 : 1 << 20;
        lat = realloc(lat, caplat * sizeof(*lat));
        if (lat == NULL) die("realloc");
    }
    lat[nlat++] = at - due;
}

static void flush_out(conn *c) {
    while (c->ooff < c->olen) {
        ssize_t w = write(c->fd, c->out + c->ooff, c->olen - c->ooff);
        if (w < 0) {
            if (errno == EAGAIN) return;
            die("write");
        }
        c->ooff += (size_t)w;
    }
    c->ooff = c->olen = 0;
}

/* ---- answers ---------------------------------------------------------------------- */

/* one RESP value at p: its length, 0 when incomplete */
static size_t resp_len(const char *p, size_t n) {
    if (n < 3) return 0;
    const char *e = memmem(p, n, "\r\n", 2);
    if (e == NULL) return 0;
    size_t hl = (size_t)(e - p) + 2;
    long v = atol(p + 1);
    switch (p[0]) {
    case '+': case '-': case ':': return hl;
    case '$':
        if (v < 0) return hl;
        return n >= hl + (size_t)v + 2 ? hl + (size_t)v + 2 : 0;
    case '*': {
        size_t at = hl;
        for (long i = 0; i < v; i++) {
            size_t l = resp_len(p + at, n - at);
            if (l == 0) return 0;
            at += l;
        }
        return at;
    }
    default: errors++; return n; /* unframeable: drop it */
    }
}

static size_t http_len(const char *p, size_t n) {
    const char *e = memmem(p, n, "\r\n\r\n", 4);
    if (e == NULL) return 0;
    size_t hl = (size_t)(e - p) + 4;
    const char *cl = memmem(p, hl, "ontent-Length:", 14);
    if (cl == NULL) cl = memmem(p, hl, "ontent-length:", 14);
    size_t bl = cl ? (size_t)atol(cl + 14) : 0;
    if (n < hl + bl) return 0;
    if (!(hl > 12 && p[9] == '2')) { /* non-2xx: counted (a 429 is an answer too), the first one shown */
        if (errors++ == 0) fprintf(stderr, "openloop: first non-2xx answer: %.*s\n", (int)(hl > 40 ? 40 : hl), p);
    }
    return hl + bl;
}

static void on_answers(conn *c, int64_t at) {
    size_t off = 0;
    for (;;) {
        const char *p = c->in + off;
        size_t n = c->ilen - off;
        if (proto == GRPC) {
            if (n < 9) break;
            const unsigned char *u = (const unsigned char *)p;
            size_t len = ((size_t)u[0] << 16) | ((size_t)u[1] << 8) | u[2];
            if (n < 9 + len) break;
            int type = u[3], flags = u[4];
            uint32_t sid = ((uint32_t)(u[5] & 0x7f) << 24) | ((uint32_t)u[6] << 16) | ((uint32_t)u[7] << 8) | u[8];
            unsigned char f[16];
            if (type == 4 && !(flags & 1)) { /* SETTINGS: ack */
                put(c, f, frame_head(f, 0, 4, 1, 0));
            } else if (type == 6 && !(flags & 1)) { /* PING: ack */
                put(c, f, frame_head(f, 8, 6, 1, 0));
                put(c, p + 9, 8);
            } else if (type == 7) { /* GOAWAY */
                fprintf(stderr, "openloop: GOAWAY\n");
                exit(3);
            }
            if (type == 0) c->recv_unacked += (int64_t)len;
            if (sid != 0 && ((type == 0 || type == 1) && (flags & 1))) {
                record(c->due[((sid - 1) / 2) % RING], at);
                c->inflight--;
            } else if (sid != 0 && type == 3) { /* RST_STREAM */
                errors++;
                record(c->due[((sid - 1) / 2) % RING], at);
                c->inflight--;
            }
            off += 9 + len;
            continue;
        }
        size_t l = proto == RESP ? resp_len(p, n) : http_len(p, n);
        if (l == 0) break;
        if (proto == RESP && p[0] == '-') errors++;
        off += l;
        record(c->due[c->head++ % RING], at);
        c->inflight--;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->ilen - off);
        c->ilen -= off;
    }
    if (proto == GRPC && c->recv_unacked > (1 << 28)) { /* keep the connection window open */
        unsigned char f[16];
        size_t n = frame_head(f, 4, 8, 0, 0);
        uint32_t inc = (uint32_t)c->recv_unacked;
        f[n++] = (unsigned char)(inc >> 24), f[n++] = (unsigned char)(inc >> 16), f[n++] = (unsigned char)(inc >> 8),
        f[n++] = (unsigned char)inc;
        put(c, f, n);
        c->recv_unacked = 0;
    }
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: openloop http|resp|grpc HOST PORT RATE|peak SECONDS CONNS [KEYS] [TARGET]\n");
        return 2;
    }
    proto = strcmp(argv[1], "resp") == 0 ? RESP : strcmp(argv[1], "grpc") == 0 ? GRPC : HTTP;
    const char *host = argv[2];
    int port = atoi(argv[3]);
    int closed = strcmp(argv[4], "peak") == 0;
    double rate = closed ? 0 : atof(argv[4]);
    double secs = atof(argv[5]);
    int nc = atoi(argv[6]);
    if (argc > 7) nkeys = atol(argv[7]);
    const char *target = argc > 8 ? argv[8] : NULL;
    int depth = getenv("OPENLOOP_DEPTH") ? atoi(getenv("OPENLOOP_DEPTH")) : (proto == RESP ? 8 : 1);
    if (nc < 1 || secs <= 0 || (!closed && rate <= 0) || nkeys < 1 || nkeys > 1000000) return 2;
    if (proto == HTTP) {
        tmpl_len = (size_t)snprintf(tmpl, sizeof(tmpl), "GET %s HTTP/1.1\r\nHost: %s\r\nX-Api-Key: user:KKKKKK\r\n\r\n",
                                    target ? target : "/v1/auth", host);
        find_keys();
    } else if (proto == RESP) {
        char words[1024];
        snprintf(words, sizeof(words), "%s", target ? target : "SL.CHECK,bench,k:KKKKKK");
        int nw = 1;
        for (char *q = words; *q; q++) nw += *q == ',';
        size_t n = (size_t)snprintf(tmpl, sizeof(tmpl), "*%d\r\n", nw);
        for (char *w = strtok(words, ","); w; w = strtok(NULL, ","))
            n += (size_t)snprintf(tmpl + n, sizeof(tmpl) - n, "$%zu\r\n%s\r\n", strlen(w), w);
        tmpl_len = n;
        find_keys();
    } else {
        grpc_setup(host, target ? target : "bench");
    }
    int ep = epoll_create1(0);
    conn *cs = calloc((size_t)nc, sizeof(conn));
    for (int i = 0; i < nc; i++) {
        conn *c = &cs[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, host, &sa.sin_addr);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) die("connect");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        c->due = calloc(RING, sizeof(int64_t));
        c->icap = 1 << 20;
        c->in = malloc(c->icap);
        if (proto == GRPC) grpc_preface(c);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    /* the next due moment wakes the loop through a timerfd (ns precision, 1 ns slack): a
     * late wake-up is charged to the server's latency, so it must be small */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
    int64_t t0 = now_ns();
    warm_until = t0 + 1000000000;
    int64_t end = warm_until + (int64_t)(secs * 1e9);
    double interval = closed ? 0 : 1e9 / rate;
    long i_sched = 0;
    int rr = 0;
    if (closed)
        for (int i = 0; i < nc; i++)
            for (int d = 0; d < depth; d++) send_one(&cs[i], t0);
    struct epoll_event evs[64];
    int64_t drain_by = end + 2000000000; /* after the end: answers still awaited, up to 2 s */
    for (;;) {
        int64_t now = now_ns();
        long inflight = 0;
        for (int i = 0; i < nc; i++) inflight += cs[i].inflight;
        if (now >= end && (closed || inflight == 0 || now >= drain_by)) break;
        if (!closed && now < end) {
            while (1) { /* every request due by now goes, on the next connection in turn */
                int64_t due = t0 + (int64_t)((double)i_sched * interval);
                if (due > now) break;
                send_one(&cs[rr], due);
                rr = (rr + 1) % nc;
                i_sched++;
            }
        }
        for (int i = 0; i < nc; i++)
            if (cs[i].olen > cs[i].ooff) flush_out(&cs[i]);
        int timeout_ms = 100;
        if (!closed && now < end) {
            int64_t due = t0 + (int64_t)((double)i_sched * interval);
            struct itimerspec its = {.it_value = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000}};
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        }
        int n = epoll_wait(ep, evs, 64, timeout_ms);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        int64_t at = now_ns();
        for (int e = 0; e < n; e++) {
            conn *c = evs[e].data.ptr;
            if (c == NULL) {
                uint64_t x;
                if (read(tfd, &x, sizeof(x)) < 0) { /* EAGAIN: nothing to clear */
                }
                continue;
            }
            for (;;) {
                if (c->ilen == c->icap) {
                    c->icap *= 2;
                    c->in = realloc(c->in, c->icap);
                }
                ssize_t r = read(c->fd, c->in + c->ilen, c->icap - c->ilen);
                if (r < 0 && errno == EAGAIN) break;
                if (r <= 0) {
                    fprintf(stderr, "openloop: connection closed by the server\n");
                    return 3;
                }
                c->ilen += (size_t)r;
            }
            int before = c->inflight;
            on_answers(c, at);
            if (closed && at < end) /* as many sent as answered, due now */
                for (int k = c->inflight; k < before; k++) send_one(c, at);
        }
    }
    double measured = secs;
    long lost = 0; /* never answered: reported, and counted as errors */
    for (int i = 0; i < nc; i++) lost += cs[i].inflight;
    if (!closed) errors += lost;
    if (nlat == 0) {
        printf("rate %.0f sent %ld done %ld errors %ld achieved 0/s (no answers)\n", rate, sent, done, errors);
        return 1;
    }
    qsort(lat, nlat, sizeof(*lat), cmp64);
#define PCT(q) (lat[(size_t)((double)(nlat - 1) * (q))] / 1000.0)
    printf("rate %.0f sent %ld done %ld errors %ld achieved %.0f/s p50 %.1f p99 %.1f p999 %.1f max %.1f us\n",
           closed ? 0.0 : rate, sent, done, errors, (double)nlat / measured, PCT(0.5), PCT(0.99), PCT(0.999),
           lat[nlat - 1] / 1000.0);
    if (!closed) /* the generator's own lateness (included in the figures above) */
        printf("  sent late by %.1f us on average, %.1f at most\n", (double)late_sum / (double)sent / 1000.0,
               (double)late_max / 1000.0);
    return 0;
}
