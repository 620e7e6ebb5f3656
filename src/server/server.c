/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c -- `sluice serve` as a process: listeners, worker threads, the policy
 * generation that reload swaps, signals (SIGTERM/SIGINT drain, SIGHUP reload), snapshots.
 * Generation lifetime: a worker publishes the generation it uses in its hazard slot
 * (refreshed every loop turn, so at most one poll interval stale); a reload publishes
 * the new one and retires the old, which the main thread frees once no hazard names it.
 * Nothing here is on the decision path except sl_worker_pin (two atomic loads, a store).
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "clock.h"
#include "store/redis/local.h"
#include "store/redis/override.h"
#include "store/redis/store.h"
#include "server/grpc_conn.h"
#include "server/observe.h"
#include "server/pending.h"
#include "server/series.h"
#include "server/statsd.h"
#include "server/tls.h"
#include "server/watch.h"

void sl_server_opts_default(sl_server_opts *o) {
    memset(o, 0, sizeof(*o));
    o->read_timeout_ns = 10 * SLUICE_NS_PER_S;
    o->idle_timeout_ns = 60 * SLUICE_NS_PER_S;
    o->write_timeout_ns = 10 * SLUICE_NS_PER_S;
    o->drain_timeout_ns = 10 * SLUICE_NS_PER_S;
    o->max_conns = 10000;
    o->max_buffered = (uint64_t)256 << 20; /* a 1 GB host: 10,000 idle connections take 160 MB of it */
    o->auth_deny_status = 0; /* 0: the config's value */
    sl_http1_limits_default(&o->http_limits);
}

/* ---- addresses and listeners ---- */

/* "host:port", "[v6]:port" or ":port" (loopback) into a socket address. */
static int parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *sl) {
    char host[SL_ADDR_MAX];
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon[1] == '\0') return -1;
    size_t hl = (size_t)(colon - s);
    if (hl >= sizeof(host)) return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) return -1;
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    if (host[0] == '\0') strcpy(host, "127.0.0.1");
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *sl = sizeof(*a4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *sl = sizeof(*a6);
        return 0;
    }
    if (strcmp(host, "localhost") == 0) {
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a4->sin_port = htons((uint16_t)port);
        *sl = sizeof(*a4);
        return 0;
    }
    return -1;
}

/* A unix socket listener ("unix:/path", envoy compat GRPC_UDS): a stale socket file left
 * by an earlier run is replaced, anything else at that path is an error. */
static int sl_listen_unix(const char *what, const char *path, char *err, size_t errlen) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "invalid %s unix socket path '%s' (expected an absolute path of at "
                 "most %zu bytes)", what, path, sizeof(sa.sun_path) - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0) {
        snprintf(err, errlen, "cannot listen on %s unix socket %s: %s", what, path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* One listening socket shared by every worker (EPOLLEXCLUSIVE wakes one of them).
 * Trade-off: SO_REUSEPORT per worker would spread accepts more evenly, but it would
 * also let a second server bind the same port silently; one socket keeps "port in use"
 * an error. */
static int open_listener(const char *what, const char *addr, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    socklen_t sl;
    if (strncmp(addr, "unix:", 5) == 0) return sl_listen_unix(what, addr + 5, err, errlen);
    if (parse_addr(addr, &ss, &sl) != 0) {
        snprintf(err, errlen, "invalid %s address '%s' (expected HOST:PORT)", what, addr);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s listener %s: %s", what, addr, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on %s address %s: %s", what, addr,
                 e == EADDRINUSE ? "address already in use" : strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- generations ---- */

void sl_gen_release(sl_gen *g) {
    if (g != NULL) atomic_fetch_sub_explicit(&g->refs, 1, memory_order_release);
}

static void gen_destroy(sl_gen *g) {
    if (g == NULL) return;
    sl_obs_gen_destroy(g->obs);
    sl_engine_destroy(g->engine);
    sl_config_destroy(g->cfg);
    free(g);
}

/* Formats every diagnostic of a failed load, one per line. */
static void format_diags(const sl_diag_list *dl, int rc, const char *path, char *err,
                         size_t errlen) {
    size_t off = 0;
    err[0] = '\0';
    for (size_t i = 0; i < dl->n && off + 1 < errlen; i++) {
        char line[SL_DIAG_MSG + 300];
        sl_diag_format(dl, i, line, sizeof(line));
        int n = snprintf(err + off, errlen - off, "%s%s", off ? "\n" : "", line);
        if (n < 0) break;
        off += (size_t)n < errlen - off ? (size_t)n : errlen - off - 1;
    }
    if (off == 0) snprintf(err, errlen, "%s: %s", path, sluice_strerror(rc));
}

static void hash_seen(void *ud, const char *buf, size_t len) {
    if (sl_audit_sha256_hex(buf, len, ud) != 0) ((char *)ud)[0] = '\0';
}

static sl_gen *gen_create(sl_server *s, char *err, size_t errlen) {
    static sl_diag_list dl; /* large; loads are serialised by reload_mu or startup */
    memset(&dl, 0, sizeof(dl));
    sl_config *cfg = NULL;
    /* the checksum the audit trail names: of the bytes this load parsed (a file that a
     * deploy rewrites at any moment, hashed again later, would name the next version) */
    char sha[65] = "";
    int rc = sl_config_load_seen(s->opt.config_path, &cfg, &dl, hash_seen, sha);
    if (rc != 0 || cfg == NULL) {
        format_diags(&dl, rc, s->opt.config_path, err, errlen);
        return NULL;
    }
    sl_gen *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        sl_config_destroy(cfg);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->cfg = cfg;
    memcpy(g->sha256, sha, sizeof(g->sha256));
    int e = 0;
    char ebuf[512] = "";
    g->engine = sl_engine_create_ops(cfg, s->store, s->ops, &e, ebuf, sizeof(ebuf));
    if (g->engine == NULL) {
        snprintf(err, errlen, "%s: %s", s->opt.config_path, ebuf[0] ? ebuf : sluice_strerror(e));
        gen_destroy(g);
        return NULL;
    }
    g->obs = sl_obs_gen_create(s, g->engine); /* metric series of its windows */
    if (g->obs == NULL) {
        snprintf(err, errlen, "out of memory");
        gen_destroy(g);
        return NULL;
    }
    /* the settings a reload may change; the command line's values win */
    const sl_settings *st = sl_config_settings(cfg);
    snprintf(g->admin_token, sizeof(g->admin_token), "%s",
             s->opt.admin_token[0] ? s->opt.admin_token : st->admin_token);
    g->auth_deny_status = s->opt.auth_deny_status ? s->opt.auth_deny_status : st->auth_deny_status;
    if (g->auth_deny_status < 400 || g->auth_deny_status > 599) g->auth_deny_status = 429;
    g->legacy_headers = s->opt.legacy_headers || st->legacy_headers;
    g->id = ++s->next_gen_id;
    return g;
}

sl_gen *sl_worker_pin(sl_worker *w) {
    sl_gen *g;
    do {
        g = atomic_load(&w->srv->gen);
        atomic_store(&w->hazard, g);
    } while (g != atomic_load(&w->srv->gen));
    w->gen = g;
    return g;
}

/* The settings a running server reads only at start, that differ between two configs:
 * "listen.http, store" into out (comma separated); 0 when none. */
static size_t start_only_changes(const sl_settings *a, const sl_settings *b, char *out, size_t len) {
    struct {
        const char *name;
        bool differs;
    } f[] = {
        {"listen.http", strcmp(a->listen_http, b->listen_http) != 0},
        {"listen.resp", strcmp(a->listen_resp, b->listen_resp) != 0},
        {"listen.grpc", strcmp(a->listen_grpc, b->listen_grpc) != 0},
        {"listen.admin", strcmp(a->listen_admin, b->listen_admin) != 0},
        {"workers", a->workers != b->workers},
        {"observe.series", a->observe.series_seconds != b->observe.series_seconds ||
                               a->observe.series_max != b->observe.series_max},
        {"store", memcmp(&a->store, &b->store, sizeof(a->store)) != 0},
    };
    size_t off = 0;
    if (len > 0) out[0] = '\0';
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (!f[i].differs) continue;
        int n = snprintf(out + off, len > off ? len - off : 0, "%s%s", off ? ", " : "", f[i].name);
        if (n > 0) off += (size_t)n < len - off ? (size_t)n : len - off - 1;
    }
    return off;
}

int sl_server_reload_from(sl_server *s, int source, const char *caller, char *err, size_t errlen,
                          char *notes, size_t noteslen) {
    int64_t t0 = sl_clock_mono_ns();
    char own[256];
    if (notes == NULL || noteslen == 0) notes = own, noteslen = sizeof(own);
    notes[0] = '\0';
    pthread_mutex_lock(&s->reload_mu);
    sl_gen *g = gen_create(s, err, errlen);
    if (g == NULL) {
        atomic_fetch_add(&s->reloads_failed, 1);
        sl_obs_reload(s, (sl_audit_source)source, caller, atomic_load(&s->gen), NULL, err, t0);
        pthread_mutex_unlock(&s->reload_mu);
        return -1;
    }
    sl_gen *old = atomic_exchange(&s->gen, g);
    /* policies, tokens, deny status and headers follow the reload; listeners, workers and
     * the store are the process's: a change there waits for the next start (said so) */
    start_only_changes(sl_config_settings(old->cfg), sl_config_settings(g->cfg), notes, noteslen);
    old->retired_next = s->retired;
    s->retired = old;
    atomic_fetch_add(&s->reloads_ok, 1);
    /* logged and audited under the lock: `old` is not freed before (reap takes it) */
    sl_obs_reload(s, (sl_audit_source)source, caller, old, g, NULL, t0);
    if (notes[0] != '\0')
        sl_log_printf(s->obs->log, SL_LOG_WARN, "reload",
                      "changed settings that take effect at the next start: %s", notes);
    pthread_mutex_unlock(&s->reload_mu);
    if (s->redis) sl_redis_ovr_resync(); /* overrides of a policy that came back */
    return 0;
}

int sl_server_reload(sl_server *s, char *err, size_t errlen) {
    return sl_server_reload_from(s, SL_AUDIT_ADMIN_API, NULL, err, errlen, NULL, 0);
}

/* Frees retired generations that no worker's hazard names any more. */
static void reap_retired(sl_server *s, bool all) {
    pthread_mutex_lock(&s->reload_mu);
    sl_gen **pp = &s->retired;
    while (*pp) {
        sl_gen *g = *pp;
        /* in use: a worker's current generation, or one a waiting request holds */
        bool used = atomic_load_explicit(&g->refs, memory_order_acquire) > 0 && !all;
        for (unsigned i = 0; i < s->nworkers && !all; i++)
            if (atomic_load(&s->workers[i]->hazard) == g) used = true;
        if (used) {
            pp = &g->retired_next;
        } else {
            *pp = g->retired_next;
            gen_destroy(g);
        }
    }
    pthread_mutex_unlock(&s->reload_mu);
}

/* ---- workers ---- */

static void accept_cb(void *ud, uint32_t events) {
    (void)events;
    sl_listen_ctx *lc = ud;
    sl_conn_accept(lc->w, lc->fd, lc->kind);
}

static void stop_listening(sl_worker *w) {
    if (!w->listening) return;
    for (int k = 0; k < SL_LISTENERS; k++)
        if (w->srv->lfd[k] >= 0) sl_loop_del(&w->loop, &w->listen_io[k]);
    w->listening = false;
    atomic_store(&w->listening_flag, false);
}

/* The HTTP Date header, formatted once a second rather than per response (the real
 * wall clock: it says when the response was sent, whatever the test clock says). */
static void refresh_date(sl_worker *w) {
    if (w->date[0] != '\0' && w->now_ns - w->date_at_ns < SLUICE_NS_PER_S) return;
    static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t t = (time_t)(sl_clock_wall_ns() / SLUICE_NS_PER_S);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(w->date, sizeof(w->date), "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
             days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
             tm.tm_hour, tm.tm_min, tm.tm_sec);
    w->date_at_ns = w->now_ns;
}

/* Why pin on waking too: a reload answered while this worker slept must apply to the
 * requests that wake it (a client that saw "reloaded" sends the next one). */
static void pin_on_wake(void *ud) { sl_worker_pin(ud); }

static void *worker_main(void *arg) {
    sl_worker *w = arg;
    w->loop.on_wake = pin_on_wake;
    w->loop.wake_ud = w;
    sl_server *s = w->srv;
    int64_t drain_deadline = 0;
    sl_obs_thread_attach(w); /* sampled store latency is counted in this thread */
    /* the store's handle for this thread: the memory store itself, or this worker's
     * Redis client (on a private loop this one watches) */
    w->lane = s->redis ? sl_redis_lane_start(w->id, &w->loop) : (void *)s->store;
    for (;;) {
        sl_worker_pin(w);
        w->now_ns = sl_clock_mono_ns();
        if (atomic_load(&s->stop_now)) break;
        if (atomic_load(&s->draining)) {
            if (drain_deadline == 0) {
                drain_deadline = w->now_ns + s->opt.drain_timeout_ns;
                stop_listening(w);
            }
            sl_worker_drain(w);
            if (w->nconns == 0 || w->now_ns >= drain_deadline) break;
        }
        sl_loop_poll(&w->loop, w->nheld > 0 ? 2 : 50); /* held replies: ~2 ms resolution */
        w->now_ns = sl_clock_mono_ns();
        refresh_date(w);
        sl_worker_run_ready(w);     /* answers the store gave during this turn */
        sl_worker_flush_resumed(w);
        sl_worker_tick(w);
        if (s->redis) sl_redis_lane_flush(w->lane); /* the turn's commands leave before we sleep */
        sl_worker_reap(w);
    }
    stop_listening(w);
    sl_worker_close_all(w);
    /* the client answers what is still in flight (to nobody: the connections are gone),
     * which gives back the generations those requests held */
    if (s->redis) sl_redis_lane_stop(w->lane);
    sl_worker_run_ready(w);
    sl_pending_pool_free(w);
    w->lane = NULL;
    atomic_store(&w->hazard, NULL);
    w->done = true;
    return NULL;
}

static sl_worker *worker_create(sl_server *s, unsigned id, char *err, size_t errlen) {
    sl_worker *w = calloc(1, sizeof(*w));
    if (w == NULL) goto oom;
    w->met = calloc(1, sizeof(*w->met));
    w->obs = sl_obs_worker_new();
    w->series = sl_series_worker_new(s->series_seconds, s->series_max);
    w->rbatch = sl_resp_batch_create();
    w->pmax = SL_PENDING_MAX;
    w->body_buf = malloc(s->opt.http_limits.max_body + 1);
    if (w->met == NULL || w->obs == NULL || w->body_buf == NULL || w->rbatch == NULL ||
        (w->series == NULL && s->series_seconds > 0))
        goto oom;
    w->srv = s;
    w->id = id;
    if (sl_loop_init(&w->loop) != 0) {
        snprintf(err, errlen, "epoll: %s", strerror(errno));
        goto fail;
    }
    sl_dlist_init(&w->tl[SL_TL_READ], SL_TL_READ, s->opt.read_timeout_ns);
    sl_dlist_init(&w->tl[SL_TL_IDLE], SL_TL_IDLE, s->opt.idle_timeout_ns);
    sl_dlist_init(&w->tl[SL_TL_WRITE], SL_TL_WRITE, s->opt.write_timeout_ns);
    for (int k = 0; k < SL_LISTENERS; k++) {
        if (s->lfd[k] < 0) continue;
        sl_conn_kind kind = k < SL_KINDS ? (sl_conn_kind)k : SL_KIND_ADMIN; /* SL_LISTEN_PROM */
        w->lctx[k] = (sl_listen_ctx){.w = w, .kind = kind, .fd = s->lfd[k]};
        w->listen_io[k] = (sl_io){.fd = s->lfd[k], .cb = accept_cb, .ud = &w->lctx[k]};
        if (sl_loop_add(&w->loop, &w->listen_io[k], EPOLLIN | EPOLLEXCLUSIVE) != 0) {
            snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
            goto fail;
        }
    }
    w->listening = true;
    atomic_store(&w->listening_flag, true);
    w->now_ns = sl_clock_mono_ns();
    refresh_date(w);
    return w;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    if (w) {
        sl_loop_deinit(&w->loop);
        free(w->met);
        sl_obs_worker_free(w->obs);
        sl_series_worker_free(w->series);
        free(w->body_buf);
        sl_resp_batch_destroy(w->rbatch);
        free(w);
    }
    return NULL;
}

static void worker_destroy(sl_worker *w) {
    if (w == NULL) return;
    sl_loop_deinit(&w->loop);
    free(w->met);
    sl_obs_worker_free(w->obs);
    sl_series_worker_free(w->series);
    free(w->body_buf);
    sl_resp_batch_destroy(w->rbatch);
    free(w);
}

/* ---- store ---- */

static int open_store(sl_server *s, const sl_settings *st, char *err, size_t errlen) {
    const char *url = s->opt.store_url;
    if (url[0] == '\0') url = st->store.type == SL_STORE_MEMORY ? "memory:" : "redis:";
    s->ops = &sl_memory_ops;
    if (sl_redis_store_url(url)) {
        static sl_settings with; /* the config's settings with the command's connection over them */
        if (s->opt.store_conn_set) {
            with = *st;
            with.store.redis = s->opt.store_conn;
            st = &with;
        }
        if (sl_redis_store_config(url, st, s->opt.test_clock, err, errlen) != 0) return -1;
        if (sl_redis_store_default_secret() && !st->envoy.compat) /* compat keys are not hashed */
            sl_log_printf(s->obs->log, SL_LOG_WARN, "store_secret",
                          "no store.key_secret: Redis keys use the documented default secret, and "
                          "settle/release tokens are valid only on the instance that issued them "
                          "(set one secret shared by every instance)");
        else /* tokens any instance can verify, single use claimed in Redis */
            sl_engine_tokens_shared(st->store.redis_key_secret, strlen(st->store.redis_key_secret));
        SL_LOG(s->obs->log, SL_LOG_INFO, "store", "redis store",
               SL_LOG_STR("seeds", sl_redis_store_seeds())); /* no credentials */
        s->redis = true;
        s->ops = &sl_redis_ops;
        /* the memory store still holds the limiter registry; decisions go to Redis */
        int e = 0;
        s->store = sluice_store_create(NULL, &e);
        if (s->store == NULL) {
            snprintf(err, errlen, "cannot create the limiter registry: %s", sluice_strerror(e));
            return -1;
        }
        sl_redis_local_attach(s->store); /* on_store_error: local decides in it */
        return 0;
    }
    if (strncmp(url, "memory:", 7) != 0) {
        /* only the scheme: the rest may hold a password */
        snprintf(err, errlen, "unknown store '%.*s' (expected memory:, redis://, rediss://, unix://, "
                 "redis-cluster:// or redis-sentinel://; see docs/redis.md)", (int)strcspn(url, ":/@"), url);
        return -1;
    }
    sluice_store_options so = {0};
    so.max_keys = st->store.max_keys;
    so.on_full = st->store.on_full;
    so.shards = st->store.shards;
    int e = 0;
    s->store = sluice_store_create(&so, &e);
    if (s->store == NULL) {
        snprintf(err, errlen, "cannot create the memory store: %s", sluice_strerror(e));
        return -1;
    }
    snprintf(s->snapshot_path, sizeof(s->snapshot_path), "%s", st->store.snapshot_path);
    s->snapshot_every_ns = st->store.snapshot_every_ns;
    s->snapshot_start_empty = st->store.snapshot_start_empty;
    return 0;
}

bool sl_server_store_ready(const sl_server *s) { return !s->redis || sl_redis_store_ready(); }

/*
 * Ready when every policy can be answered as configured. A store that is down leaves
 * fail-open policies answering (degraded, still ready: a readiness probe that took every
 * instance out of service at once would turn a store blip into an outage) and fail-closed
 * ones answering 503, which is unready only when the config says readiness follows the
 * store (store.unready_when_down).
 */
static size_t snapshot_readiness(sl_server *s, char *buf, size_t len);

int sl_server_readiness(const sl_server *s, const sl_gen *g, char *body, size_t len) {
    if (atomic_load(&s->draining)) {
        snprintf(body, len, "draining\n");
        return 503;
    }
    char snap[800];
    size_t sn = snapshot_readiness((sl_server *)s, snap, sizeof(snap));
    if (sl_server_store_ready(s)) {
        /* serving as configured; what a snapshot problem put at risk is said, not hidden */
        if (sn > 0) snprintf(body, len, "degraded: the memory store's snapshots need attention\n%s", snap);
        else snprintf(body, len, "ready\n");
        return 200;
    }
    size_t open = 0, closed = 0, n = sl_config_policy_count(g->cfg);
    for (size_t i = 0; i < n; i++) {
        if (sl_config_policy_fails_closed(g->cfg, i)) closed++;
        else open++;
    }
    bool unready = closed > 0 && sl_config_settings(g->cfg)->store.unready_when_down;
    int w = snprintf(body, len,
                     "%s: the %s store is unavailable; %zu policies fail open (admitting), %zu fail "
                     "closed (answering 503)%s\n",
                     unready ? "unready" : "degraded", s->ops->name, open, closed,
                     unready ? "; store.unready_when_down is set" : "");
    /* then why: one line per Redis node that is not up (addresses, never a credential) */
    if (s->redis && w > 0 && (size_t)w < len) sl_redis_store_health(body + w, len - (size_t)w);
    size_t bl = strlen(body);
    if (sn > 0 && bl + 1 < len) snprintf(body + bl, len - bl, "%s", snap);
    return unready ? 503 : 200;
}

/* ---- lifecycle ---- */

/*
 * The snapshot at start. Why a damaged one stops the start by default: starting empty
 * hands every quota out again, silently; the operator decides (store.snapshot.on_damaged:
 * start_empty). Refusing leaves the file in place (every restart refuses again until
 * someone looks); starting empty moves a damaged file aside, never overwriting it, so it
 * can be examined (an unreadable one, permissions or a directory, stays). Either way the
 * reason is logged and counted; when the server starts empty, /readyz says so.
 */
static int restore_snapshot(sl_server *s, char *err, size_t errlen) {
    int e = 0;
    char msg[256] = "";
    if (sluice_snapshot_check_dir(s->snapshot_path, &e, msg, sizeof(msg)) != SLUICE_OK) {
        snprintf(err, errlen, "snapshots cannot be written at '%.200s': %s", s->snapshot_path, msg);
        return -1;
    }
    if (access(s->snapshot_path, F_OK) != 0) return 0; /* first start */
    uint64_t skipped = 0;
    msg[0] = '\0';
    int r = sluice_store_restore(s->store, s->snapshot_path, sluice_clock_now(s->clock), &skipped, msg,
                                 sizeof(msg));
    if (r == SLUICE_OK) {
        SL_LOG(s->obs->log, SL_LOG_INFO, "snapshot_restored", "snapshot restored",
               SL_LOG_STR("path", s->snapshot_path), SL_LOG_UINT("skipped", skipped));
        return 0;
    }
    const char *why = msg[0] ? msg : sluice_strerror(r);
    char aside[SL_PATH_MAX + 64] = "", where[SL_PATH_MAX + 128] = "";
    if (r == SLUICE_ECORRUPT) s->snap_damaged++;
    /* refusing leaves the file where it is: moved aside, the next start (systemd restarts
     * it) would find none and start empty after all */
    if (r == SLUICE_ECORRUPT && s->snapshot_start_empty) {
        int ae = 0;
        if (sluice_snapshot_move_aside(s->snapshot_path, sl_clock_wall_ns() / SLUICE_NS_PER_S, aside,
                                       sizeof(aside), &ae) == SLUICE_OK)
            snprintf(where, sizeof(where), "; moved to %s", aside);
        else
            snprintf(where, sizeof(where), "; it could not be moved aside: %s", strerror(ae));
    }
    SL_LOG(s->obs->log, SL_LOG_ERROR, "snapshot_restore_failed",
           r == SLUICE_ECORRUPT ? "snapshot damaged" : "snapshot unreadable",
           SL_LOG_STR("path", s->snapshot_path), SL_LOG_STR("error", why), SL_LOG_STR("moved_to", aside),
           SL_LOG_STR("on_damaged", s->snapshot_start_empty ? "start_empty" : "refuse"));
    const char *what = r == SLUICE_ECORRUPT ? "damaged" : "unreadable";
    if (!s->snapshot_start_empty) {
        snprintf(err, errlen,
                 "the snapshot '%.200s' is %s: %.200s; not starting without the state it held (to "
                 "start with no state, move the file away, or set store.snapshot.on_damaged: "
                 "start_empty, which moves it aside)",
                 s->snapshot_path, what, why);
        return -1;
    }
    snprintf(s->snap_started_empty, sizeof(s->snap_started_empty),
             "started with no state: the snapshot was %s (%.150s)%.200s", what, why, where);
    return 0;
}

int sl_server_create(const sl_server_opts *opt, sl_server **out, char *err, size_t errlen) {
    *out = NULL;
    sl_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->opt = *opt;
    for (int k = 0; k < SL_LISTENERS; k++) s->lfd[k] = -1;
    pthread_mutex_init(&s->reload_mu, NULL);
    pthread_mutex_init(&s->snap_mu, NULL);
    sl_cell_init(&s->cell);
    s->started_wall_ns = sl_clock_wall_ns();

    /* Settings come from the config file; flags already in opt win. */
    static sl_diag_list dl;
    memset(&dl, 0, sizeof(dl));
    sl_config *cfg = NULL;
    int rc = sl_config_load(opt->config_path, &cfg, &dl);
    if (rc != 0 || cfg == NULL) {
        format_diags(&dl, rc, opt->config_path, err, errlen);
        goto fail;
    }
    const sl_settings *st = sl_config_settings(cfg);
    if (s->opt.http[0] == '\0') snprintf(s->opt.http, sizeof(s->opt.http), "%s", st->listen_http);
    if (s->opt.resp[0] == '\0') snprintf(s->opt.resp, sizeof(s->opt.resp), "%s", st->listen_resp);
    if (s->opt.admin[0] == '\0')
        snprintf(s->opt.admin, sizeof(s->opt.admin), "%s", st->listen_admin);
    if (s->opt.workers == 0) s->opt.workers = st->workers;
    s->series_seconds = st->observe.series_seconds; /* the ring's size is fixed at start */
    s->series_max = st->observe.series_max;
    /* gRPC: the flag, else listen.grpc (127.0.0.1:8081 unless the file says otherwise, also
     * for an envoyproxy/ratelimit file, whose port it is, so such a file is a drop-in) */
    if (s->opt.grpc[0] == '\0') snprintf(s->opt.grpc, sizeof(s->opt.grpc), "%s", st->listen_grpc);
    char *addrs_all[SL_KINDS] = {s->opt.http, s->opt.resp, s->opt.admin, s->opt.grpc};
    for (int k = 0; k < SL_KINDS; k++)
        if (strcmp(addrs_all[k], "-") == 0) addrs_all[k][0] = '\0'; /* "off" on the command line */
    /* the logger, metric series and audit trail, before anything logs */
    if (sl_obs_create(s, st, err, errlen) != 0) {
        sl_config_destroy(cfg);
        goto fail;
    }
    if (open_store(s, st, err, errlen) != 0) {
        sl_config_destroy(cfg);
        goto fail;
    }
    sl_config_destroy(cfg);
    s->inner_ops = s->ops;
    s->ops = sl_obs_wrap_ops(s->ops); /* sampled store latency */

    s->clock = opt->test_clock ? sluice_clock_create_manual(sl_clock_wall_ns())
                               : sluice_clock_create_system();
    if (s->clock == NULL) {
        snprintf(err, errlen, "cannot create the clock");
        goto fail;
    }
    sl_gen *g = gen_create(s, err, errlen);
    if (g == NULL) goto fail;
    atomic_store(&s->gen, g);

    if (s->snapshot_path[0] != '\0' && restore_snapshot(s, err, errlen) != 0) goto fail;

    if (s->opt.grpc_tls_cert[0] != '\0' && s->opt.grpc[0] != '\0' &&
        (s->grpc_tls = sl_tls_server_ctx(s->opt.grpc_tls_cert, s->opt.grpc_tls_key,
                                         s->opt.grpc_tls_client_ca, s->opt.grpc_tls_client_san,
                                         err, errlen)) == NULL)
        goto fail;
    const char *addrs[SL_LISTENERS] = {s->opt.http, s->opt.resp, s->opt.admin, s->opt.grpc, s->opt.prom};
    const char *names[SL_LISTENERS] = {"http", "resp", "admin", "grpc", "prometheus"};
    for (int k = 0; k < SL_LISTENERS; k++) {
        if (addrs[k][0] == '\0') continue;
        s->lfd[k] = open_listener(names[k], addrs[k], err, errlen);
        if (s->lfd[k] < 0) goto fail;
    }
    unsigned nw = s->opt.workers;
    if (nw == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nw = n > 0 ? (unsigned)n : 1;
    }
    if (nw > SL_MAX_WORKERS) nw = SL_MAX_WORKERS;
    for (unsigned i = 0; i < nw; i++) {
        s->workers[i] = worker_create(s, i, err, errlen);
        if (s->workers[i] == NULL) goto fail;
        s->nworkers = i + 1;
    }
    *out = s;
    return 0;
fail:
    sl_server_destroy(s);
    return -1;
}

void sl_server_destroy(sl_server *s) {
    if (s == NULL) return;
    for (unsigned i = 0; i < s->nworkers; i++) worker_destroy(s->workers[i]);
    const char *addrs[SL_LISTENERS] = {s->opt.http, s->opt.resp, s->opt.admin, s->opt.grpc, s->opt.prom};
    for (int k = 0; k < SL_LISTENERS; k++)
        if (s->lfd[k] >= 0) {
            close(s->lfd[k]);
            if (strncmp(addrs[k], "unix:", 5) == 0) unlink(addrs[k] + 5); /* ours: we bound it */
        }
    sl_tls_ctx_free(s->grpc_tls);
    sl_redis_ovr_stop(); /* overrides in Redis: before the generations and the table go */
    reap_retired(s, true);
    gen_destroy(atomic_load(&s->gen));
    sl_cell_deinit(&s->cell);
    if (s->store) sluice_store_destroy(s->store);
    if (s->clock) sluice_clock_destroy(s->clock);
    pthread_mutex_destroy(&s->reload_mu);
    pthread_mutex_destroy(&s->snap_mu);
    sl_obs_destroy(s); /* the logger last: everything before may log */
    free(s);
}

static void write_snapshot(sl_server *s, const char *why) {
    if (s->snapshot_path[0] == '\0') return;
    int e = 0;
    char msg[256] = "";
    int r = sluice_store_snapshot_ex(s->store, s->snapshot_path, sluice_clock_now(s->clock), &e, msg,
                                     sizeof(msg));
    pthread_mutex_lock(&s->snap_mu);
    bool was_failing = s->snap_error[0] != '\0';
    if (r == SLUICE_OK) {
        s->snap_ok++;
        s->snap_last_ok_wall_ns = sl_clock_wall_ns();
        s->snap_error[0] = '\0';
    } else {
        s->snap_failed++;
        snprintf(s->snap_error, sizeof(s->snap_error), "%s", msg[0] ? msg : sluice_strerror(r));
    }
    pthread_mutex_unlock(&s->snap_mu);
    if (r != SLUICE_OK)
        SL_LOG(s->obs->log, SL_LOG_ERROR, "snapshot_failed", "snapshot not written",
               SL_LOG_STR("why", why), SL_LOG_STR("path", s->snapshot_path),
               SL_LOG_STR("error", msg[0] ? msg : sluice_strerror(r)), SL_LOG_STR("errno", e ? strerror(e) : ""));
    else if (was_failing)
        SL_LOG(s->obs->log, SL_LOG_INFO, "snapshot_recovered", "snapshot written again",
               SL_LOG_STR("path", s->snapshot_path));
}

/* Lines for /readyz about snapshots (none when all is well); bytes written. */
static size_t snapshot_readiness(sl_server *s, char *buf, size_t len) {
    size_t off = 0;
    pthread_mutex_lock(&s->snap_mu);
    if (s->snap_started_empty[0] != '\0') {
        int n = snprintf(buf, len, "snapshot: %s\n", s->snap_started_empty);
        if (n > 0) off = (size_t)n < len ? (size_t)n : len - 1;
    }
    if (s->snap_error[0] != '\0' && off < len) {
        int n = snprintf(buf + off, len - off, "snapshot: the last write failed: %s\n", s->snap_error);
        if (n > 0) off += (size_t)n < len - off ? (size_t)n : len - off - 1;
    }
    pthread_mutex_unlock(&s->snap_mu);
    return off;
}

int sl_server_run(sl_server *s) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);               /* reopen the log file (logrotate) */
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* workers inherit the mask */
    signal(SIGPIPE, SIG_IGN);
    unsigned started = 0;
    for (unsigned i = 0; i < s->nworkers; i++) {
        if (pthread_create(&s->workers[i]->th, NULL, worker_main, s->workers[i]) != 0) {
            SL_LOG(s->obs->log, SL_LOG_ERROR, "start_failed", "cannot start worker threads",
                   SL_LOG_STR("error", strerror(errno)));
            atomic_store(&s->stop_now, 1);
            break;
        }
        started++;
    }
    if (started == s->nworkers) sl_obs_started(s); /* the start line and the startup audit */
    char xerr[256];
    if (sl_watch_start(s, xerr, sizeof(xerr)) != 0) /* config directory: reload on change */
        sl_log_printf(s->obs->log, SL_LOG_WARN, "watch_failed", "%s", xerr);
    if (sl_statsd_start(s, xerr, sizeof(xerr)) != 0) /* envoy compat statistics */
        sl_log_printf(s->obs->log, SL_LOG_WARN, "statsd_failed", "%s", xerr);
    int64_t next_snap = s->snapshot_every_ns > 0 ? sl_clock_mono_ns() + s->snapshot_every_ns : 0;
    while (started == s->nworkers && !atomic_load(&s->draining)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            atomic_store(&s->draining, 1);
            /* Refuse new connections at once (instead of leaving them in the backlog):
             * once every worker has dropped the listeners from its epoll set, shut them
             * down, which makes the kernel reset further connection attempts. */
            for (int tries = 0; tries < 40; tries++) {
                bool all = true;
                for (unsigned i = 0; i < started; i++)
                    if (atomic_load(&s->workers[i]->listening_flag)) all = false;
                if (all) break;
                struct timespec d = {0, 10 * 1000 * 1000};
                nanosleep(&d, NULL);
            }
            for (int k = 0; k < SL_LISTENERS; k++)
                if (s->lfd[k] >= 0) shutdown(s->lfd[k], SHUT_RDWR);
        } else if (sig == SIGHUP) {
            char err[4096];
            sl_server_reload_from(s, SL_AUDIT_SIGHUP, NULL, err, sizeof(err), NULL, 0); /* logged */
        } else if (sig == SIGUSR1) {
            sl_log_reopen_request(s->obs->log);
        }
        sl_obs_tick(s);
        reap_retired(s, false);
        if (next_snap && sl_clock_mono_ns() >= next_snap) {
            write_snapshot(s, "periodic");
            next_snap = sl_clock_mono_ns() + s->snapshot_every_ns;
        }
    }
    for (unsigned i = 0; i < started; i++) pthread_join(s->workers[i]->th, NULL);
    sl_watch_stop();
    sl_statsd_stop();
    write_snapshot(s, "shutdown");
    sl_obs_stopped(s);
    return started == s->nworkers ? 0 : 1;
}
