/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override.c -- per-key overrides kept in Redis (override.h): the sync thread, its client,
 * the two scripts (a batch of changes; the changes since a version), the write queue the
 * admin paths wait on. Never on the decision path: decisions read the local copy.
 */
#include <sys/eventfd.h>
#include <sys/random.h>

#include "store/redis/client_int.h"
#include "store/redis/override.h"

#define K_DATA "sl:{sluice-ovr}:data"
#define K_VER "sl:{sluice-ovr}:ver"
#define K_LOG "sl:{sluice-ovr}:log"
#define K_LOW "sl:{sluice-ovr}:low"
#define K_EPOCH "sl:{sluice-ovr}:epoch" /* who made this data set: a new one after a loss */
#define PAGE 2000          /* changes per poll reply */
#define LOG_SLACK "100000" /* removals kept in the log before the oldest are trimmed */

/* KEYS data ver log low epoch; ARGV slack, epoch, then (hash, value) pairs, value "" =
 * removed. Returns the version after the batch. The epoch names the data set: the first
 * script to find none (an empty or a restarted Redis) writes its caller's random id. */
static const char PUT_LUA[] =
    "redis.call('SET', KEYS[5], ARGV[2], 'NX')\n"
    "local v = 0\n"
    "for i = 3, #ARGV - 1, 2 do\n"
    "  v = redis.call('INCR', KEYS[2])\n"
    "  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[1], ARGV[i])\n"
    "  else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end\n"
    "  redis.call('ZADD', KEYS[3], v, ARGV[i])\n"
    "end\n"
    "if redis.call('ZCARD', KEYS[3]) - redis.call('HLEN', KEYS[1]) > tonumber(ARGV[1]) then\n"
    "  local old = redis.call('ZRANGE', KEYS[3], 0, 999, 'WITHSCORES')\n"
    "  for i = 1, #old - 1, 2 do\n"
    "    if redis.call('HEXISTS', KEYS[1], old[i]) == 0 then\n"
    "      redis.call('ZREM', KEYS[3], old[i])\n"
    "      redis.call('SET', KEYS[4], old[i + 1])\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return v\n";

/* KEYS data ver log low epoch; ARGV since, page, epoch. Returns {ver, low, epoch, hash,
 * version, value...} for the changes after `since` (value "" = removed), oldest first. */
static const char POLL_LUA[] =
    "redis.call('SET', KEYS[5], ARGV[3], 'NX')\n"
    "local v = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
    "local low = tonumber(redis.call('GET', KEYS[4]) or '0')\n"
    "local out = {v, low, redis.call('GET', KEYS[5])}\n"
    "if tonumber(ARGV[1]) >= v then return out end\n"
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[1], '+inf', 'WITHSCORES',\n"
    "                       'LIMIT', 0, tonumber(ARGV[2]))\n"
    "for i = 1, #ids - 1, 2 do\n"
    "  out[#out + 1] = ids[i]\n"
    "  out[#out + 1] = ids[i + 1]\n"
    "  out[#out + 1] = redis.call('HGET', KEYS[1], ids[i]) or ''\n"
    "end\n"
    "return out\n";

typedef struct wjob {
    size_t n;
    char **hex, **val;
    int rc;
    uint64_t ver; /* Redis's version after the batch */
    bool done, abandoned;
    int64_t deadline; /* CLOCK_MONOTONIC */
    struct wjob *next;
} wjob;

static struct {
    bool on;
    pthread_t th;
    _Atomic bool stop;
    sl_loop loop;
    sl_redis *r;
    sl_redis_ovr_hooks h;
    int efd;      /* a writer wakes the sync thread (its loop sleeps up to 5 ms otherwise) */
    sl_io eio;
    int64_t poll_ns;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wjob *q; /* handed over by writers (under mu) */
    /* the sync thread's own */
    wjob *ready;
    uint64_t since;
    bool in_full, inflight;
    char my_epoch[33];   /* this process's random id, offered when Redis has none */
    char seen_epoch[33]; /* the data set the copy follows ("" before the first poll) */
    int64_t next_poll;
    _Atomic bool resync;
    /* stats (relaxed) */
    _Atomic uint64_t version, polls, changes, writes, errors, full_passes;
    _Atomic bool synced;
    _Atomic int64_t last_ok;
} G;

static void job_free(wjob *j) {
    for (size_t i = 0; i < j->n; i++) {
        free(j->hex[i]);
        free(j->val[i]);
    }
    free(j->hex);
    free(j->val);
    free(j);
}

static void job_done(wjob *j, int rc) {
    pthread_mutex_lock(&G.mu);
    bool gone = j->abandoned;
    j->rc = rc;
    j->done = true;
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
    if (gone) job_free(j);
}

static sl_redis_node *route(void) {
    static unsigned slot = SL_REDIS_SLOTS;
    if (slot == SL_REDIS_SLOTS) slot = sl_redis_keyslot(K_DATA, strlen(K_DATA));
    sl_redis_node *nd = sl__redis_route(G.r, slot);
    return nd->state == 2 && nd->c != NULL ? nd : NULL;
}

static bool moved(const redisReply *rep) {
    return rep != NULL && rep->type == REDIS_REPLY_ERROR &&
           (strncmp(rep->str, "MOVED", 5) == 0 || strncmp(rep->str, "ASK", 3) == 0 ||
            strncmp(rep->str, "TRYAGAIN", 8) == 0 || strncmp(rep->str, "CLUSTERDOWN", 11) == 0);
}

static void on_put(void *owner, redisReply *rep, void *priv) {
    (void)owner;
    wjob *j = priv;
    if (moved(rep) && mono_now() < j->deadline) { /* again once the map is fresh */
        sl__redis_refresh_topology(G.r, true);
        j->next = G.ready;
        G.ready = j;
        return;
    }
    bool ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER;
    if (ok) j->ver = (uint64_t)rep->integer;
    if (ok) atomic_fetch_add_explicit(&G.writes, j->n, memory_order_relaxed);
    else atomic_fetch_add_explicit(&G.errors, 1, memory_order_relaxed);
    job_done(j, ok ? SLUICE_OK : SLUICE_ESTORE);
    if (ok) G.next_poll = 0; /* this instance's own change: its copy follows at once */
}

static bool send_put(wjob *j) {
    sl_redis_node *nd = route();
    if (nd == NULL) return false;
    size_t argc = 10 + 2 * j->n;
    const char **argv = malloc(argc * sizeof(*argv));
    size_t *lens = malloc(argc * sizeof(*lens));
    if (argv == NULL || lens == NULL) {
        free(argv);
        free(lens);
        return false;
    }
    const char *head[10] = {"EVAL", PUT_LUA, "5", K_DATA, K_VER, K_LOG, K_LOW, K_EPOCH, LOG_SLACK,
                            G.my_epoch};
    for (int i = 0; i < 10; i++) argv[i] = head[i], lens[i] = strlen(head[i]);
    for (size_t i = 0; i < j->n; i++) {
        argv[10 + 2 * i] = j->hex[i];
        lens[10 + 2 * i] = strlen(j->hex[i]);
        argv[11 + 2 * i] = j->val[i] ? j->val[i] : "";
        lens[11 + 2 * i] = j->val[i] ? strlen(j->val[i]) : 0;
    }
    int rc = sl_rconn_command(nd->c, on_put, j, (int)argc, argv, lens);
    free(argv);
    free(lens);
    return rc == 0;
}

static int64_t int_of(const redisReply *e) {
    if (e == NULL) return -1;
    if (e->type == REDIS_REPLY_INTEGER) return e->integer;
    if (e->type == REDIS_REPLY_STRING) return strtoll(e->str, NULL, 10);
    return -1;
}

static void on_poll(void *owner, redisReply *rep, void *priv) {
    (void)owner;
    (void)priv;
    G.inflight = false;
    int64_t t = mono_now();
    G.next_poll = t + G.poll_ns;
    atomic_fetch_add_explicit(&G.polls, 1, memory_order_relaxed);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        (rep->elements - 3) % 3 != 0 || rep->element[2]->type != REDIS_REPLY_STRING) {
        if (moved(rep)) sl__redis_refresh_topology(G.r, true);
        atomic_fetch_add_explicit(&G.errors, 1, memory_order_relaxed);
        return;
    }
    int64_t v = int_of(rep->element[0]), low = int_of(rep->element[1]);
    if (v < 0 || low < 0) {
        atomic_fetch_add_explicit(&G.errors, 1, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&G.last_ok, t, memory_order_relaxed);
    const redisReply *ep = rep->element[2];
    bool new_set = G.seen_epoch[0] != '\0' &&
                   (ep->len != strlen(G.seen_epoch) || memcmp(ep->str, G.seen_epoch, ep->len) != 0);
    snprintf(G.seen_epoch, sizeof(G.seen_epoch), "%.*s", (int)ep->len, ep->str);
    if (new_set) G.in_full = false; /* a pass over the old data set is void: start again */
    if (!G.in_full && (new_set || (uint64_t)v < G.since || G.since < (uint64_t)low ||
                       atomic_exchange(&G.resync, false))) {
        /* behind a trim of removals, or Redis lost its data (another data set, or its
         * version went back: other instances may have written more changes since than
         * this copy had seen), or asked: everything again, and what Redis no longer
         * holds goes */
        G.in_full = true;
        G.since = 0;
        atomic_fetch_add_explicit(&G.full_passes, 1, memory_order_relaxed);
        if (G.h.full_begin) G.h.full_begin(G.h.ud);
        G.next_poll = 0;
        return;
    }
    size_t n = (rep->elements - 3) / 3;
    for (size_t i = 0; i < n; i++) {
        const redisReply *h = rep->element[3 + 3 * i], *val = rep->element[5 + 3 * i];
        int64_t sc = int_of(rep->element[4 + 3 * i]);
        if (h == NULL || h->type != REDIS_REPLY_STRING || sc < 0) continue;
        bool has = val != NULL && val->type == REDIS_REPLY_STRING && val->len > 0;
        G.h.apply(G.h.ud, h->str, has ? val->str : NULL, has ? val->len : 0);
        if ((uint64_t)sc > G.since) G.since = (uint64_t)sc;
    }
    atomic_fetch_add_explicit(&G.changes, n, memory_order_relaxed);
    if (n >= PAGE) {
        G.next_poll = 0; /* more follow */
    } else {
        if ((uint64_t)v > G.since) G.since = (uint64_t)v;
        if (G.in_full) {
            G.in_full = false;
            if (G.h.full_end) G.h.full_end(G.h.ud);
        }
        atomic_store_explicit(&G.synced, true, memory_order_release);
    }
    pthread_mutex_lock(&G.mu); /* writers wait for their change to come back */
    atomic_store_explicit(&G.version, G.in_full ? 0 : G.since, memory_order_relaxed);
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
}

static void send_poll(void) {
    sl_redis_node *nd = route();
    if (nd == NULL) return;
    char since[24], page[24];
    snprintf(since, sizeof(since), "%llu", (unsigned long long)G.since);
    snprintf(page, sizeof(page), "%d", PAGE);
    const char *argv[11] = {"EVAL", POLL_LUA, "5", K_DATA, K_VER, K_LOG, K_LOW, K_EPOCH, since, page,
                            G.my_epoch};
    size_t lens[11];
    for (int i = 0; i < 11; i++) lens[i] = strlen(argv[i]);
    if (sl_rconn_command(nd->c, on_poll, NULL, 11, argv, lens) == 0) G.inflight = true;
}

static void step(void) {
    int64_t t = mono_now();
    pthread_mutex_lock(&G.mu);
    while (G.q != NULL) {
        wjob *j = G.q;
        G.q = j->next;
        j->next = G.ready;
        G.ready = j;
    }
    pthread_mutex_unlock(&G.mu);
    wjob *keep = NULL;
    while (G.ready != NULL) {
        wjob *j = G.ready;
        G.ready = j->next;
        if (t >= j->deadline) {
            job_done(j, SLUICE_ESTORE);
        } else if (!send_put(j)) {
            j->next = keep;
            keep = j;
        }
    }
    G.ready = keep;
    if (!G.inflight && t >= G.next_poll) send_poll();
}

static void on_wake(void *ud, uint32_t ev) {
    (void)ud;
    (void)ev;
    uint64_t n;
    if (read(G.efd, &n, sizeof(n)) < 0) { /* EAGAIN: already drained */
    }
}

static void *sync_main(void *arg) {
    (void)arg;
    while (!atomic_load(&G.stop)) {
        step();
        sl_redis_flush(G.r);
        sl_loop_poll(&G.loop, 5);
        sl_rconn_reap();
    }
    return NULL;
}

int sl_redis_ovr_start(const sl_redis_opts *o, const sl_redis_ovr_hooks *h, int64_t poll_ns,
                       char *err, size_t errlen) {
    if (G.on) return SLUICE_OK;
    memset(&G, 0, sizeof(G));
    G.h = *h;
    G.poll_ns = poll_ns > 0 ? poll_ns : 100 * SLUICE_NS_PER_MS;
    if (sl_loop_init(&G.loop) != 0) {
        snprintf(err, errlen, "overrides: cannot create the sync loop");
        return SLUICE_ENOMEM;
    }
    sl_redis_opts oo = *o;
    oo.timeout_ns = 2 * SLUICE_NS_PER_S; /* a page of a million overrides takes a while */
    oo.lease_slice = 0;
    int e = 0;
    G.r = sl_redis_create(&G.loop, &oo, &e);
    if (G.r == NULL) {
        sl_loop_deinit(&G.loop);
        snprintf(err, errlen, "overrides: cannot create the Redis client: %s", sluice_strerror(e));
        return e ? e : SLUICE_EINVAL;
    }
    pthread_mutex_init(&G.mu, NULL);
    pthread_cond_init(&G.cv, NULL);
    G.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (G.efd >= 0) {
        G.eio = (sl_io){G.efd, on_wake, NULL};
        if (sl_loop_add(&G.loop, &G.eio, EPOLLIN) != 0) {
            close(G.efd);
            G.efd = -1;
        }
    }
    unsigned char rnd[16] = {0};
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) { /* then time and pid */
        int64_t t = mono_now() ^ (int64_t)getpid() << 40;
        memcpy(rnd, &t, sizeof(t));
    }
    for (size_t i = 0; i < sizeof(rnd); i++) snprintf(G.my_epoch + 2 * i, 3, "%02x", rnd[i]);
    G.in_full = true; /* the first pass is a full one */
    atomic_fetch_add_explicit(&G.full_passes, 1, memory_order_relaxed);
    if (G.h.full_begin) G.h.full_begin(G.h.ud);
    if (pthread_create(&G.th, NULL, sync_main, NULL) != 0) {
        sl_redis_destroy(G.r);
        sl_loop_deinit(&G.loop);
        snprintf(err, errlen, "overrides: cannot start the sync thread");
        return SLUICE_ENOMEM;
    }
    G.on = true;
    return SLUICE_OK;
}

void sl_redis_ovr_stop(void) {
    if (!G.on) return;
    atomic_store(&G.stop, true);
    pthread_join(G.th, NULL);
    sl_redis_destroy(G.r); /* in-flight writes are answered (NULL reply: ESTORE) */
    sl_rconn_reap();
    G.r = NULL;
    pthread_mutex_lock(&G.mu); /* writes never sent fail */
    while (G.q != NULL) {
        wjob *j = G.q;
        G.q = j->next;
        j->next = G.ready;
        G.ready = j;
    }
    pthread_mutex_unlock(&G.mu);
    while (G.ready != NULL) {
        wjob *j = G.ready;
        G.ready = j->next;
        job_done(j, SLUICE_ESTORE);
    }
    if (G.efd >= 0) {
        sl_loop_del(&G.loop, &G.eio);
        close(G.efd);
    }
    sl_loop_deinit(&G.loop);
    G.on = false;
}

bool sl_redis_ovr_running(void) { return G.on; }

void sl_redis_ovr_resync(void) {
    if (G.on) atomic_store(&G.resync, true);
}

static struct timespec abs_after(int64_t ns) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t u = (int64_t)until.tv_sec * SLUICE_NS_PER_S + until.tv_nsec + ns;
    until.tv_sec = (time_t)(u / SLUICE_NS_PER_S);
    until.tv_nsec = (long)(u % SLUICE_NS_PER_S);
    return until;
}

bool sl_redis_ovr_wait(uint64_t version, int64_t timeout_ns) {
    if (!G.on) return false;
    struct timespec until = abs_after(timeout_ns);
    pthread_mutex_lock(&G.mu);
    while (atomic_load_explicit(&G.version, memory_order_relaxed) < version)
        if (pthread_cond_timedwait(&G.cv, &G.mu, &until) != 0) break;
    bool ok = atomic_load_explicit(&G.version, memory_order_relaxed) >= version;
    pthread_mutex_unlock(&G.mu);
    return ok;
}

int sl_redis_ovr_write(const char *const *hex, const char *const *val, size_t n,
                       int64_t timeout_ns, uint64_t *version) {
    if (!G.on) return SLUICE_ESTORE;
    if (n == 0) return SLUICE_OK;
    if (n > SL_REDIS_OVR_BATCH) return SLUICE_EINVAL;
    wjob *j = calloc(1, sizeof(*j));
    if (j == NULL) return SLUICE_ENOMEM;
    j->hex = calloc(n, sizeof(char *));
    j->val = calloc(n, sizeof(char *));
    j->n = n;
    bool oom = j->hex == NULL || j->val == NULL;
    for (size_t i = 0; i < n && !oom; i++) {
        j->hex[i] = strdup(hex[i]);
        j->val[i] = val[i] != NULL && val[i][0] ? strdup(val[i]) : NULL;
        oom = j->hex[i] == NULL || (val[i] != NULL && val[i][0] && j->val[i] == NULL);
    }
    if (oom) {
        if (j->hex == NULL || j->val == NULL) j->n = 0;
        job_free(j);
        return SLUICE_ENOMEM;
    }
    j->deadline = mono_now() + timeout_ns;
    /* the thread answers by the deadline; a margin */
    struct timespec until = abs_after(timeout_ns + 100 * SLUICE_NS_PER_MS);
    pthread_mutex_lock(&G.mu);
    j->next = G.q;
    G.q = j;
    if (G.efd >= 0) {
        uint64_t one = 1;
        if (write(G.efd, &one, sizeof(one)) < 0) { /* full: it is awake anyway */
        }
    }
    while (!j->done)
        if (pthread_cond_timedwait(&G.cv, &G.mu, &until) != 0) break;
    bool done = j->done;
    int rc = j->rc;
    if (version != NULL) *version = j->ver;
    if (!done) j->abandoned = true; /* the thread frees it when it answers */
    pthread_mutex_unlock(&G.mu);
    if (!done) return SLUICE_ESTORE;
    job_free(j);
    return rc;
}

void sl_redis_ovr_stats_get(sl_redis_ovr_stats *out) {
    out->version = atomic_load_explicit(&G.version, memory_order_relaxed);
    out->polls = atomic_load_explicit(&G.polls, memory_order_relaxed);
    out->changes = atomic_load_explicit(&G.changes, memory_order_relaxed);
    out->writes = atomic_load_explicit(&G.writes, memory_order_relaxed);
    out->errors = atomic_load_explicit(&G.errors, memory_order_relaxed);
    out->full_passes = atomic_load_explicit(&G.full_passes, memory_order_relaxed);
    out->synced = atomic_load_explicit(&G.synced, memory_order_acquire);
    out->last_ok_ns = atomic_load_explicit(&G.last_ok, memory_order_relaxed);
}
