/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local.c -- on_store_error: local. While Redis cannot be reached for a key, a decision
 * whose limits all say `local` is decided in this process's memory store (the limiter
 * registry the server keeps beside Redis) at this instance's SHARE of each limit:
 *
 * - shares come from heartbeats: while Redis is up, the heartbeat client (the first
 *   worker's) runs heartbeat.lua every store.local.heartbeat: this instance's identity and
 *   its decisions per policy slot over the demand window (one minute) go into one hash,
 *   and the live entries come back: the view. Share of a slot = max(floor, d_me / D),
 *   normalised by the sum of every instance's max(floor, d_j / D), so that the shares of
 *   one view sum to 1 (floor: store.local.floor, default 1/(2N)). With no view (Redis
 *   down since the start): 1 / store.local.instances, else no share: the policy fails
 *   closed and /readyz says why.
 * - the budget of the window in force when Redis was last seen (fixed windows, quotas) is
 *   the share of what was REMAINING then (the last answer per key, kept in `seen`), not
 *   of the whole limit: a day quota with 100 of 1000 left hands out at most 100.
 * - what was admitted locally (every algorithm but concurrency) is remembered per key and
 *   window (buckets and logs: per key, until it would have drained); when a heartbeat
 *   succeeds again, every entry whose window is still in force is
 *   written into the shared counter (a settle +units, one script call per batch of 32
 *   keys and slot), removed before it is sent: at most once. Nothing waits for it.
 *
 * Off the happy path: nothing here runs while Redis answers except the demand counter
 * (one relaxed atomic add per decision on a local policy) and the `seen` record (a few
 * relaxed stores per fixed-window or quota item of such a policy).
 */
#include "store/redis/local.h"

#include <inttypes.h>

#include "store/redis/client_int.h"
#include "store/store.h"

extern const char sl_lua_heartbeat[];

#define DSLOTS 256        /* policy slots: a hash of the limiter's name */
#define SEEN_SLOTS 16384  /* last answers kept, direct-mapped by key fingerprint */
#define PEND_STRIPES 64
#define PEND_PER 128      /* entries per stripe: 8192 keys admitted locally, then counted */
#define HB_KEY "{sluice-local}:heartbeats"
#define HB_RING 128
#define VIEW_MAX 64       /* instances a view holds */

static struct {
    bool on;
    unsigned instances;
    uint32_t floor_ppm;
    int64_t hb_ns, window_ns;
    sluice_store *mem;
    char id[96];
} g;

static _Atomic bool g_used; /* a decision of a local policy was seen: heartbeats start */
static _Atomic(sl_redis *) g_owner; /* the client that sends heartbeats and reconciles */
static _Atomic uint64_t g_demand[DSLOTS];
static _Atomic uint32_t g_share[DSLOTS]; /* ppm, from the last view */
static _Atomic uint32_t g_view_n;        /* instances in the last view (0: none yet) */
static _Atomic uint32_t g_local_flag[DSLOTS]; /* decided locally since the last heartbeat */
static char g_local_name[DSLOTS][64];
static pthread_mutex_t g_name_mu = PTHREAD_MUTEX_INITIALIZER;

static sl_redis_local_stats g_st;

typedef struct seen_ent {
    _Atomic uint64_t fp;
    _Atomic uint64_t remaining;
    _Atomic int64_t end; /* wall ns: the window or period it was read in ends */
} seen_ent;
static seen_ent g_seen[SEEN_SLOTS];

typedef struct pend_ent {
    uint64_t fp;         /* 0: free */
    int64_t end;         /* wall ns: its window ends (not written after that) */
    const sluice_limiter *lim; /* referenced while here */
    uint64_t units, limit;
    char key[SL_REDIS_KEY_MAX];
    uint8_t klen;
    uint16_t slot;
} pend_ent;
static pend_ent g_pend[PEND_STRIPES][PEND_PER];
static pthread_mutex_t g_pmu[PEND_STRIPES];
static _Atomic uint32_t g_npend;

/* demand ring (heartbeat owner only) */
static uint64_t g_ring[HB_RING][DSLOTS];
static int64_t g_ring_at[HB_RING];
static unsigned g_ring_head;

static void inc_st(_Atomic uint64_t *c, uint64_t v) {
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

void sl_redis_local_setup(unsigned instances, uint32_t floor_ppm, int64_t heartbeat_ns) {
    g.on = true;
    g.instances = instances;
    g.floor_ppm = floor_ppm;
    g.hb_ns = heartbeat_ns > 0 ? heartbeat_ns : SLUICE_NS_PER_S;
    g.window_ns = 60 * SLUICE_NS_PER_S;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(g.id, sizeof(g.id), "%.60s:%ld:%lx", host, (long)getpid(),
             (unsigned long)(ts.tv_nsec ^ ts.tv_sec));
    for (int i = 0; i < PEND_STRIPES; i++) pthread_mutex_init(&g_pmu[i], NULL);
}

void sl_redis_local_attach(sluice_store *mem) { g.mem = mem; }

const sl_redis_local_stats *sl_redis_local_stats_get(void) { return &g_st; }

static unsigned dslot(const sluice_limiter *lim) {
    uint32_t h = 2166136261u;
    for (const char *p = lim->name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return h & (DSLOTS - 1);
}

static bool windowed(const sluice_limiter *lim) {
    return lim->spec.algo == SLUICE_FIXED_WINDOW || lim->spec.algo == SLUICE_QUOTA;
}

/* What a local admission is written back into when Redis returns: every algorithm whose
 * settle adds the units to the shared state (windows and quotas: the window in force;
 * sliding window and log, token and leaky buckets, GCRA: the state now, so a bucket that
 * Redis refilled, or a restarted empty Redis, does not hand the burst out twice).
 * Concurrency leases are released where they were taken; capacity protection never
 * decides locally. */
static bool reconcilable(const sluice_limiter *lim) {
    switch (lim->spec.algo) {
    case SLUICE_FIXED_WINDOW:
    case SLUICE_QUOTA:
    case SLUICE_SLIDING_WINDOW:
    case SLUICE_SLIDING_LOG:
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_LEAKY_BUCKET:
    case SLUICE_GCRA:
        return true;
    default:
        return false;
    }
}

void sl__redis_local_count(sl_redis *r, const rq *b) {
    if (!g.on) return;
    r->last_now = b->now;
    for (int i = 0; i < b->n; i++)
        if (b->it[i].lim->fail_local && b->it[i].sgroup == 0) {
            atomic_fetch_add_explicit(&g_demand[dslot(b->it[i].lim)], 1, memory_order_relaxed);
            if (!atomic_load_explicit(&g_used, memory_order_relaxed))
                atomic_store_explicit(&g_used, true, memory_order_relaxed);
            return; /* one decision */
        }
}

static void reconcile(sl_redis *r);

void sl__redis_local_seen(sl_redis *r, const rq *q) {
    if (!g.on) return;
    /* Redis answers again and local admissions wait to be written: at once (every 64th
     * answer while some wait), not at the next heartbeat, so that the decisions between
     * the two do not hand the budget out again */
    if (atomic_load_explicit(&g_npend, memory_order_relaxed) > 0 && (r->rec_tick++ & 63) == 0) reconcile(r);
    for (int i = 0; i < q->n; i++) {
        const rq_item *it = &q->it[i];
        if (!it->lim->fail_local || !windowed(it->lim) || it->xlen != 0 || it->sgroup != 0) continue;
        const sluice_result *res = &q->res.r[i];
        uint64_t fp = sl__redis_fp_of(it);
        seen_ent *e = &g_seen[fp & (SEEN_SLOTS - 1)];
        atomic_store_explicit(&e->fp, 0, memory_order_relaxed);
        atomic_store_explicit(&e->remaining, res->remaining, memory_order_relaxed);
        atomic_store_explicit(&e->end, q->now.wall_ns + res->reset_after_ns, memory_order_relaxed);
        atomic_store_explicit(&e->fp, fp, memory_order_release);
    }
}

/* What Redis said remained for the key in the window in force at `wall`, or false. */
static bool seen_remaining(uint64_t fp, int64_t wall, uint64_t *rem) {
    seen_ent *e = &g_seen[fp & (SEEN_SLOTS - 1)];
    if (atomic_load_explicit(&e->fp, memory_order_acquire) != fp) return false;
    uint64_t v = atomic_load_explicit(&e->remaining, memory_order_relaxed);
    int64_t end = atomic_load_explicit(&e->end, memory_order_relaxed);
    if (atomic_load_explicit(&e->fp, memory_order_acquire) != fp || wall >= end) return false;
    *rem = v;
    return true;
}

/* x * ppm / 10^6 rounded to the nearest unit (1/3 of 300 is 100, not 99): the shares of
 * one view sum to at most 1 plus half a unit per instance. */
static uint64_t part(uint64_t x, uint32_t ppm) {
    return (uint64_t)(((unsigned __int128)x * ppm + 500000u) / 1000000u);
}

static uint64_t at_least1(uint64_t x) { return x ? x : 1; }

/* The item's limit at `ppm` of it (base: the units the share is taken of). */
static bool scale(const sl_limit *in, uint64_t base, uint32_t ppm, sl_limit *out) {
    *out = *in;
    if (in->cap.tail != 0 || in->cap.shed.nclasses != 0) return false; /* capacity protection: Redis only */
    switch (in->algo) {
    case SLUICE_FIXED_WINDOW:
    case SLUICE_QUOTA:
    case SLUICE_SLIDING_WINDOW:
    case SLUICE_SLIDING_LOG:
    case SLUICE_CONCURRENCY:
        out->limit = out->capacity = part(base, ppm);
        if (in->algo != SLUICE_FIXED_WINDOW && in->algo != SLUICE_QUOTA)
            out->limit = out->capacity = at_least1(out->limit);
        return true;
    case SLUICE_GCRA:
        if (in->cell) return false;
        out->limit = at_least1(part(in->limit, ppm));
        out->capacity = at_least1(part(in->capacity, ppm));
        out->emission_ns = in->period_ns / (int64_t)out->limit;
        return out->emission_ns > 0;
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_LEAKY_BUCKET:
        out->limit = at_least1(part(in->limit, ppm));
        out->capacity = at_least1(part(in->capacity, ppm));
        return true;
    default:
        return false;
    }
}

/* This instance's share of slot s in ppm, 0 when there is none. */
static uint32_t share_of(unsigned s) {
    if (atomic_load_explicit(&g_view_n, memory_order_relaxed) > 0) {
        uint32_t v = atomic_load_explicit(&g_share[s], memory_order_relaxed);
        if (v > 0) return v;
    }
    return g.instances ? 1000000u / g.instances : 0;
}

static void note_local(const sluice_limiter *lim) {
    unsigned s = dslot(lim);
    if (atomic_exchange_explicit(&g_local_flag[s], 1, memory_order_relaxed) == 0) {
        pthread_mutex_lock(&g_name_mu);
        snprintf(g_local_name[s], sizeof(g_local_name[s]), "%.63s", lim->name);
        pthread_mutex_unlock(&g_name_mu);
    }
}

static void pend_add(const rq_item *it, uint64_t units, int64_t end) {
    uint64_t fp = sl__redis_fp_of(it);
    unsigned st = (unsigned)(fp >> 32) & (PEND_STRIPES - 1);
    pthread_mutex_lock(&g_pmu[st]);
    pend_ent *free_e = NULL, *e = NULL;
    for (unsigned k = 0; k < PEND_PER; k++) {
        pend_ent *p = &g_pend[st][(fp + k) & (PEND_PER - 1)];
        /* a window's admissions per window; a bucket's or a log's in one entry that
         * matters until the latest of them has drained (`end`) */
        if (p->fp == fp && p->lim == it->lim && (p->end == end || !windowed(it->lim))) {
            e = p;
            if (end > e->end) e->end = end;
            break;
        }
        if (p->fp == 0 && free_e == NULL) free_e = p;
    }
    if (e == NULL && free_e != NULL) {
        e = free_e;
        e->fp = fp;
        e->end = end;
        e->lim = it->lim;
        sl_limiter_ref(it->lim);
        e->units = 0;
        e->limit = it->limit;
        memcpy(e->key, it->key, it->klen);
        e->klen = it->klen;
        e->slot = it->slot;
        atomic_fetch_add_explicit(&g_npend, 1, memory_order_relaxed);
    }
    if (e != NULL) e->units += units;
    pthread_mutex_unlock(&g_pmu[st]);
    if (e == NULL) inc_st(&g_st.reconcile_dropped, units);
}

bool sl__redis_local_decide(sl_redis *r, rq *q, sl_sresult *out) {
    (void)r;
    if (!g.on || g.mem == NULL || q->op != 'd' || q->n == 0 || (q->flags & SL_SREQ_PASS)) return false;
    sl_sitem items[SLUICE_MAX_ITEMS];
    sl_limit lims[SLUICE_MAX_ITEMS];
    for (int i = 0; i < q->n; i++) {
        const rq_item *it = &q->it[i];
        /* an enforced limit of another failure mode: the engine applies the policies'
         * modes (local counting as closed); shadow limits are decided here too */
        if (!it->lim->fail_local && it->sgroup == 0) return false;
        uint32_t ppm = share_of(dslot(it->lim));
        if (ppm == 0) {
            inc_st(&g_st.no_share, 1);
            return false; /* fails closed: no view, no store.local.instances */
        }
        uint64_t base = it->limit ? it->limit : it->lim->lim.limit, rem = 0;
        if (windowed(it->lim) && it->xlen == 0 && seen_remaining(sl__redis_fp_of(it), q->now.wall_ns, &rem) &&
            rem < base)
            base = rem; /* the window Redis was last seen in: a share of what was left */
        if (!scale(&it->lim->lim, base, ppm, &lims[i])) {
            inc_st(&g_st.no_share, 1);
            return false;
        }
        memset(&items[i], 0, sizeof(items[i]));
        items[i].lim = it->lim;
        items[i].key = it->key;
        items[i].key_len = it->klen;
        /* a leased item's cost is its slice: the caller asked `want` */
        items[i].cost = (uint64_t)(it->lease != LEASE_NONE ? it->want : it->cost);
        items[i].group = it->sgroup;
        items[i].flags = it->sflags;
        items[i].params = &lims[i];
    }
    int rc = sl_mem_decide(g.mem, items, q->n, q->flags, q->now, out);
    if (rc != SLUICE_OK) return false;
    out->local = true;
    out->n = q->n;
    inc_st(out->allowed ? &g_st.local : &g_st.local_limited, 1);
    note_local(q->it[0].lim);
    for (int i = 0; i < q->n; i++) {
        const rq_item *it = &q->it[i];
        bool consumed = it->sgroup == 0 ? (out->allowed || (it->sflags & SL_SI_CHARGE))
                                        : (out->allowed && (out->groups_ok >> it->sgroup & 1u));
        if (consumed && items[i].cost > 0 && reconcilable(it->lim) && it->xlen == 0 && it->lim->fail_local)
            pend_add(it, items[i].cost, q->now.wall_ns + out->r[i].reset_after_ns);
    }
    return true;
}

/* ---- heartbeats --------------------------------------------------------------------- */

static uint64_t g_vd[VIEW_MAX][DSLOTS]; /* the view being read (owner thread only) */

static void apply_view(const redisReply *rep) {
    int n = 0, me = -1;
    memset(g_vd, 0, sizeof(g_vd));
    for (size_t i = 0; i + 1 < rep->elements && n < VIEW_MAX; i += 2) {
        const redisReply *id = rep->element[i], *v = rep->element[i + 1];
        if (id->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
        if (id->len == strlen(g.id) && memcmp(id->str, g.id, id->len) == 0) me = n;
        const char *p = strchr(v->str, ' ');
        while (p != NULL && *p) {
            char *end;
            unsigned long s = strtoul(p + 1, &end, 10);
            if (*end != ':') break;
            unsigned long long c = strtoull(end + 1, &end, 10);
            if (s < DSLOTS) g_vd[n][s] = c;
            p = end;
        }
        n++;
    }
    if (n == 0 || me < 0) return;
    uint32_t floor = g.floor_ppm ? g.floor_ppm : 1000000u / (2u * (unsigned)n);
    for (unsigned s = 0; s < DSLOTS; s++) {
        unsigned __int128 d = 0;
        for (int j = 0; j < n; j++) d += g_vd[j][s];
        uint32_t share;
        if (d == 0) {
            share = 1000000u / (unsigned)n;
        } else {
            uint64_t sum = 0, mine = 0;
            for (int j = 0; j < n; j++) {
                uint64_t x = (uint64_t)((unsigned __int128)g_vd[j][s] * 1000000u / d);
                if (x < floor) x = floor;
                sum += x;
                if (j == me) mine = x;
            }
            share = (uint32_t)(mine * 1000000u / sum);
        }
        atomic_store_explicit(&g_share[s], share ? share : 1, memory_order_relaxed);
    }
    atomic_store_explicit(&g_view_n, (uint32_t)n, memory_order_relaxed);
}

static void on_heartbeat(void *owner, redisReply *rep, void *priv) {
    (void)owner;
    sl_redis *r = priv;
    r->hb_inflight = false;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        inc_st(&g_st.heartbeat_errors, 1);
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "MOVED", 5) == 0)
            sl__redis_refresh_topology(r, true);
        return;
    }
    inc_st(&g_st.heartbeats, 1);
    apply_view(rep);
    for (unsigned s = 0; s < DSLOTS; s++) atomic_store_explicit(&g_local_flag[s], 0, memory_order_relaxed);
    if (atomic_load_explicit(&g_npend, memory_order_relaxed) > 0) reconcile(r);
}

static void send_heartbeat(sl_redis *r, int64_t t) {
    /* the demand over the window: the counters now minus the oldest snapshot within it */
    unsigned h = g_ring_head % HB_RING;
    for (unsigned s = 0; s < DSLOTS; s++) g_ring[h][s] = atomic_load_explicit(&g_demand[s], memory_order_relaxed);
    g_ring_at[h] = t;
    unsigned old = h;
    for (unsigned k = 1; k < HB_RING && k <= g_ring_head; k++) {
        unsigned j = (g_ring_head - k) % HB_RING;
        if (t - g_ring_at[j] > g.window_ns) break;
        old = j;
    }
    g_ring_head++;
    /* published as a RATE (decisions per 1000 s over the window so far), not a count:
     * the views mix heartbeats read up to a period apart, and a count still growing would
     * make every instance's own (fresher) number the larger, its share too big */
    static char payload[DSLOTS * 28];
    size_t pl = 0;
    int64_t el = t - g_ring_at[old];
    for (unsigned s = 0; s < DSLOTS && el > 0; s++) {
        uint64_t d = g_ring[h][s] - g_ring[old][s];
        d = (uint64_t)((unsigned __int128)d * 1000u * (uint64_t)SLUICE_NS_PER_S / (uint64_t)el);
        if (d == 0) continue;
        pl += (size_t)snprintf(payload + pl, sizeof(payload) - pl, "%s%u:%" PRIu64, pl ? " " : "", s, d);
    }
    unsigned slot = sl_redis_keyslot(HB_KEY, strlen(HB_KEY));
    sl_redis_node *nd = sl__redis_route(r, slot);
    if (nd == NULL || nd->state != 2 || nd->c == NULL) {
        inc_st(&g_st.heartbeat_errors, 1);
        return;
    }
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%" PRId64, 3 * g.hb_ns / SLUICE_NS_PER_MS);
    const char *argv[7] = {"EVAL", sl_lua_heartbeat, "1", HB_KEY, g.id, ttl, payload};
    size_t lens[7] = {4, strlen(sl_lua_heartbeat), 1, strlen(HB_KEY), strlen(g.id), strlen(ttl), pl};
    if (sl_rconn_command(nd->c, on_heartbeat, r, 7, argv, lens) == 0) {
        r->hb_inflight = true;
        r->hb_sent = t;
        sl_rconn_flush(nd->c);
    } else {
        inc_st(&g_st.heartbeat_errors, 1);
    }
}

int64_t sl__redis_local_tick(sl_redis *r, int64_t t) {
    if (!g.on) return 0;
    if (!atomic_load_explicit(&g_used, memory_order_relaxed)) {
        /* no local policy decided yet: look again in a heartbeat (every client: the
         * first to see one becomes the heartbeat client) */
        return t + g.hb_ns;
    }
    sl_redis *own = atomic_load(&g_owner);
    if (own == NULL) {
        sl_redis *expect = NULL;
        if (atomic_compare_exchange_strong(&g_owner, &expect, r)) own = r;
        else own = expect;
    }
    if (own != r) return 0;
    if (r->hb_inflight && t - r->hb_sent > 3 * g.hb_ns) r->hb_inflight = false;
    if (t >= r->hb_next) {
        r->hb_next = t + g.hb_ns;
        if (!r->hb_inflight) send_heartbeat(r, t);
    }
    return r->hb_next;
}

void sl__redis_local_forget(sl_redis *r) {
    sl_redis *expect = r;
    atomic_compare_exchange_strong(&g_owner, &expect, NULL);
}

/* ---- reconciliation ------------------------------------------------------------------ */

static void on_reconciled(void *ud, int rc, const sl_sresult *res) {
    uint64_t units = (uint64_t)(uintptr_t)ud;
    if (rc == SLUICE_OK && res != NULL && res->allowed) {
        inc_st(&g_st.reconcile_calls, 1);
        inc_st(&g_st.reconcile_units, units);
    } else {
        inc_st(&g_st.reconcile_errors, 1);
        inc_st(&g_st.reconcile_dropped, units);
    }
}

/* One settle call of up to SLUICE_MAX_ITEMS entries (+units each, the window in force). */
static void send_batch(sl_redis *r, pend_ent *b, int n) {
    uint64_t units = 0;
    for (int i = 0; i < n; i++) units += b[i].units;
    rq *q = sl__redis_rq_get(r);
    if (q == NULL) {
        inc_st(&g_st.reconcile_errors, 1);
        inc_st(&g_st.reconcile_dropped, units);
        for (int i = 0; i < n; i++) sl_limiter_unref(b[i].lim);
        return;
    }
    q->op = 's';
    q->cb = on_reconciled;
    q->ud = (void *)(uintptr_t)units;
    q->n = (uint8_t)n;
    q->now = r->last_now;
    q->flags = 0;
    q->xk_used = 0;
    q->res.n = (size_t)n;
    q->res.allowed = 1;
    q->res.groups_ok = 0;
    for (int i = 0; i < n; i++) {
        rq_item *it = &q->it[i];
        memset(it, 0, sizeof(*it));
        it->lim = b[i].lim;
        it->cost = (int64_t)(b[i].units > (uint64_t)EXACT_COST_MAX ? (uint64_t)EXACT_COST_MAX : b[i].units);
        it->limit = b[i].limit;
        sl_limit l = b[i].lim->lim;
        if (b[i].limit) l.limit = l.capacity = b[i].limit;
        if (sl_redis_params_of(&l, q->now, it->p) != SLUICE_OK) memset(it->p, 0, sizeof(it->p));
        memcpy(it->key, b[i].key, b[i].klen);
        it->klen = b[i].klen;
        it->slot = b[i].slot;
        it->prev = -1;
        it->lease = LEASE_NONE;
        it->want = it->cost;
    }
    q->held = true; /* the entries' references pass to the request */
    sl__redis_regroup(r, q);
    sl__redis_launch(r, q);
}

static void reconcile(sl_redis *r) {
    int64_t wall = r->last_now.wall_ns;
    pend_ent b[SLUICE_MAX_ITEMS];
    int n = 0;
    for (unsigned st = 0; st < PEND_STRIPES; st++) {
        pthread_mutex_lock(&g_pmu[st]);
        for (unsigned k = 0; k < PEND_PER; k++) {
            pend_ent *e = &g_pend[st][k];
            if (e->fp == 0) continue;
            /* its node must answer again (breaker closed) or it waits for a later heartbeat:
             * a heartbeat answered late (SIGSTOP) comes while decisions still time out */
            sl_redis_node *nd = sl__redis_route(r, e->slot);
            if (e->end > wall && (nd == NULL || nd->state != 2 || nd->open_until != 0)) continue;
            atomic_fetch_sub_explicit(&g_npend, 1, memory_order_relaxed);
            if (e->end <= wall) { /* its window is over: nothing to balance */
                sl_limiter_unref(e->lim);
                e->fp = 0;
                continue;
            }
            b[n++] = *e;
            e->fp = 0;
            if (n == SLUICE_MAX_ITEMS) {
                pthread_mutex_unlock(&g_pmu[st]);
                send_batch(r, b, n);
                n = 0;
                pthread_mutex_lock(&g_pmu[st]);
            }
        }
        pthread_mutex_unlock(&g_pmu[st]);
    }
    if (n > 0) send_batch(r, b, n);
}

/* ---- readiness ------------------------------------------------------------------------ */

int sl_redis_local_health(char *buf, size_t cap) {
    if (!g.on || cap == 0) return 0;
    size_t w = 0;
    bool any = false;
    pthread_mutex_lock(&g_name_mu);
    for (unsigned s = 0; s < DSLOTS; s++) {
        if (!atomic_load_explicit(&g_local_flag[s], memory_order_relaxed)) continue;
        int k = snprintf(buf + w, cap - w, "%s%s", any ? ", " : "deciding locally (on_store_error: local): ",
                         g_local_name[s]);
        if (k < 0 || (size_t)k >= cap - w) break;
        w += (size_t)k;
        any = true;
    }
    pthread_mutex_unlock(&g_name_mu);
    if (any && w + 2 < cap) buf[w++] = '\n', buf[w] = 0;
    uint64_t ns = atomic_load_explicit(&g_st.no_share, memory_order_relaxed);
    if (ns > 0 && atomic_load_explicit(&g_view_n, memory_order_relaxed) == 0 && g.instances == 0 && w < cap) {
        int k = snprintf(buf + w, cap - w, "on_store_error: local fails closed: no heartbeat view "
                         "yet and no store.local.instances\n");
        if (k > 0 && (size_t)k < cap - w) w += (size_t)k;
    }
    return (int)w;
}

unsigned sl_redis_local_view(void) { return atomic_load_explicit(&g_view_n, memory_order_relaxed); }
