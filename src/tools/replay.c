/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c -- `sluice replay -c CONFIG TRACE...`: the user's config over recorded traffic
 * on a virtual clock (the trace's own times), through the same engine as `sluice serve`
 * on a memory store, as fast as it decides. Requests held by a delay reaction are checked
 * again when the hold ends; concurrency leases are released when the logged request
 * ended; settled costs are settled with the logged cost. Bounded memory (see replay.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "core/hash.h"
#include "core/tz.h"
#include "cli/opts.h"
#include "replay.h"

#define NS INT64_C(1000000000)
#define MAX_RECHECKS 16

/* ---- generic min-heap of pointers by time ------------------------------------------------ */

typedef struct tq_item {
    int64_t at;
    uint64_t seq;
    void *p;
} tq_item;

typedef struct tq {
    tq_item *v;
    size_t n, cap;
    uint64_t seq;
} tq;

static bool tq_before(const tq_item *a, const tq_item *b) {
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static bool tq_push(tq *q, int64_t at, void *p) {
    if (q->n == q->cap) {
        size_t nc = q->cap ? q->cap * 2 : 256;
        tq_item *nv = realloc(q->v, nc * sizeof(*nv));
        if (nv == NULL) return false;
        q->v = nv;
        q->cap = nc;
    }
    tq_item it = {at, q->seq++, p};
    size_t i = q->n++;
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!tq_before(&it, &q->v[par])) break;
        q->v[i] = q->v[par];
        i = par;
    }
    q->v[i] = it;
    return true;
}

static void *tq_pop(tq *q, int64_t *at) {
    if (q->n == 0) return NULL;
    tq_item top = q->v[0], last = q->v[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && tq_before(&q->v[c + 1], &q->v[c])) c++;
        if (!tq_before(&q->v[c], &last)) break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n > 0) q->v[i] = last;
    if (at) *at = top.at;
    return top.p;
}

/* ---- per-key peaks ----------------------------------------------------------------------- */

/* 64 bytes, aligned to a cache line: one miss per key and window. */
struct rp_key {
    uint64_t h;          /* keyed hash of the composed key; 0 = empty slot */
    uint32_t win;
    uint32_t last_s;     /* second (since t0) of the latest request: eviction order */
    uint64_t peak;
    uint32_t rejected;
    union {
        uint32_t inflight; /* INFLIGHT: requests in flight now */
        uint32_t last_sub; /* SLIDING: sub-window of the latest request */
    };
    union {
        uint32_t ring[RP_SUB]; /* SLIDING: units per sub-window */
        struct {         /* FIXED */
            int64_t id;
            uint64_t count;
        } f;
        __int128 tat;    /* BUCKET: theoretical arrival time, in ns x rate_limit */
    } u;
};
_Static_assert(sizeof(struct rp_key) == 64, "one cache line per entry");

static void key_finalise(rp_run *r, const rp_key *k) {
    rp_win *w = r->win[k->win];
    rp_hist_add(&w->peaks, k->peak);
    w->keys++;
    if (k->rejected) w->keys_touched++;
}

/* Linear probing with backward-shift deletion, so a table that is full keeps working:
 * a victim among the next 16 slots from a rotating cursor (the least recently seen) is
 * finalised into its window's histogram and removed. */
static void key_remove(rp_run *r, uint64_t slot) {
    uint64_t mask = r->keys_cap - 1, i = slot;
    r->keys[i].h = 0;
    for (uint64_t j = (i + 1) & mask; r->keys[j].h != 0; j = (j + 1) & mask) {
        uint64_t home = r->keys[j].h & mask;
        /* move j back into i when its home is not in (i, j] (cyclically) */
        bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            r->keys[i] = r->keys[j];
            r->keys[j].h = 0;
            i = j;
        }
    }
    r->keys_used--;
}

static bool keys_grow(rp_run *r) {
    uint64_t nc = r->keys_cap ? r->keys_cap * 2 : 4096;
    rp_key *nk = aligned_alloc(64, nc * sizeof(*nk));
    if (nk == NULL) return false;
    memset(nk, 0, nc * sizeof(*nk));
    for (uint64_t i = 0; i < r->keys_cap; i++) {
        if (r->keys[i].h == 0) continue;
        uint64_t s = r->keys[i].h & (nc - 1);
        while (nk[s].h != 0) s = (s + 1) & (nc - 1);
        nk[s] = r->keys[i];
    }
    free(r->keys);
    r->keys = nk;
    r->keys_cap = nc;
    return true;
}

static rp_key *key_find(rp_run *r, uint64_t h, uint32_t win, bool create) {
    if (h == 0) h = 1;
    if (r->keys_cap == 0 && !keys_grow(r)) return NULL;
    uint64_t mask = r->keys_cap - 1;
    /* the home slot ignores the window: the windows of one key (several limits, several
     * policies keyed alike) sit side by side, one cache miss for all of them */
    for (uint64_t s = h & mask;; s = (s + 1) & mask) {
        rp_key *k = &r->keys[s];
        if (k->h == 0) break;
        if (k->h == h && k->win == win) return k;
    }
    if (!create) return NULL;
    /* the table stays at most 3/4 full: grow while the cap allows, else evict */
    while ((r->keys_used + 1) * 4 > r->keys_cap * 3) {
        if (r->keys_cap * 3 / 4 < r->max_keys) {
            if (!keys_grow(r)) return NULL;
            mask = r->keys_cap - 1;
            continue;
        }
        uint64_t victim = UINT64_MAX;
        for (int tries = 0; tries < 64 && victim == UINT64_MAX; tries++) {
            uint32_t oldest = UINT32_MAX;
            for (int i = 0; i < 16; i++) {
                uint64_t s = (r->evict_cursor + (uint64_t)i) & mask;
                if (r->keys[s].h != 0 && r->keys[s].last_s < oldest) {
                    oldest = r->keys[s].last_s;
                    victim = s;
                }
            }
            r->evict_cursor = (r->evict_cursor + 16) & mask;
        }
        if (victim == UINT64_MAX) return NULL;
        key_finalise(r, &r->keys[victim]);
        r->keys_evicted++;
        key_remove(r, victim);
    }
    uint64_t s = h & mask;
    while (r->keys[s].h != 0) s = (s + 1) & mask;
    rp_key *k = &r->keys[s];
    memset(k, 0, sizeof(*k));
    k->h = h;
    k->win = win;
    r->keys_used++;
    return k;
}

/* Months since year 0 of the UTC date at wall_ns (y * 12 + m). */
static int64_t month_index(int64_t wall_ns) {
    int64_t days = wall_ns / NS / 86400;
    if (wall_ns < 0 && (wall_ns / NS) % 86400 != 0) days--;
    int64_t y;
    unsigned m, d;
    sl_civil_from_days(days, &y, &m, &d);
    return y * 12 + m;
}

/* The aligned window of a FIXED peak: multiples of w since the epoch (as fixed windows
 * align), calendar hours, days, ISO weeks and months for quotas (in UTC: a quota kept in
 * another time zone is measured against UTC days, an approximation of a few hours). */
static int64_t fixed_id(const rp_win *w, int64_t wall_ns) {
    int64_t s = wall_ns / NS - (wall_ns % NS < 0);
    switch (w->quota_period) {
    case SLUICE_PERIOD_HOUR: return s / 3600;
    case SLUICE_PERIOD_DAY: return s / 86400;
    case SLUICE_PERIOD_WEEK: return (s / 86400 + 3) / 7; /* 1970-01-01 was a Thursday */
    case SLUICE_PERIOD_MONTH: return month_index(wall_ns);
    default: return wall_ns / w->w_ns;
    }
}

/* One request of `units` for key k at wall time `wall` (rel: since t0). */
static void key_count(rp_key *k, const rp_win *w, int64_t wall, int64_t rel, uint64_t units) {
    switch (w->peak_kind) {
    case RP_PEAK_BUCKET: {
        /* a GCRA without a burst limit: how far ahead of now the theoretical arrival time
         * runs, in units, is the burst this key needed at the configured rate */
        typedef __int128 i128;
        i128 now = (i128)rel * w->rate_limit;
        i128 tat = k->u.tat > now ? k->u.tat : now;
        tat += (i128)units * w->w_ns;
        k->u.tat = tat;
        i128 need = (tat - now + w->w_ns - 1) / w->w_ns;
        uint64_t n = need > (i128)UINT64_MAX ? UINT64_MAX : (uint64_t)need;
        if (n > k->peak) k->peak = n;
        break;
    }
    case RP_PEAK_FIXED: {
        int64_t id = fixed_id(w, wall);
        if (k->u.f.count == 0 || id != k->u.f.id) {
            if (k->u.f.count != 0 && id < k->u.f.id) id = k->u.f.id; /* late record */
            else k->u.f.count = 0;
            k->u.f.id = id;
        }
        k->u.f.count += units;
        if (k->u.f.count > k->peak) k->peak = k->u.f.count;
        break;
    }
    case RP_PEAK_SLIDING: {
        /* units in the busiest stretch of w, counted in RP_SUB sub-windows: exact to
         * within one sub-window (w/RP_SUB) of the true sliding maximum */
        int64_t sub_ns = w->w_ns / RP_SUB;
        if (sub_ns <= 0) sub_ns = 1;
        uint32_t sub = (uint32_t)(rel / sub_ns);
        if (sub > k->last_sub) {
            uint32_t steps = sub - k->last_sub;
            if (steps >= RP_SUB) {
                memset(k->u.ring, 0, sizeof(k->u.ring));
            } else {
                for (uint32_t i = 1; i <= steps; i++) k->u.ring[(k->last_sub + i) % RP_SUB] = 0;
            }
            k->last_sub = sub;
        }
        uint32_t *slot = &k->u.ring[k->last_sub % RP_SUB];
        *slot += units > UINT32_MAX - *slot ? UINT32_MAX - *slot : (uint32_t)units;
        uint64_t sum = 0;
        for (int i = 0; i < RP_SUB; i++) sum += k->u.ring[i];
        if (sum > k->peak) k->peak = sum;
        break;
    }
    default: break;
    }
}

/* ---- windows and policies ------------------------------------------------------------------ */

typedef struct winmap {
    const sl_window_info **k;
    uint32_t *v;
    size_t cap, n;
} winmap;

static uint32_t policy_of(rp_run *r, const char *name) {
    for (size_t i = 0; i < r->npol; i++)
        if (r->pol[i].name == name || strcmp(r->pol[i].name, name) == 0) return (uint32_t)i;
    /* a name the config did not list (an envoy rule, say): add it */
    rp_policy *np = realloc(r->pol, (r->npol + 1) * sizeof(*np));
    if (np == NULL) return 0;
    r->pol = np;
    memset(&r->pol[r->npol], 0, sizeof(rp_policy));
    r->pol[r->npol].name = name;
    return (uint32_t)r->npol++;
}

static rp_series *series_for(rp_run *r, uint32_t p) {
    if (r->pol[p].series != NULL) return r->pol[p].series;
    size_t with = 0;
    for (size_t i = 0; i < r->npol; i++) with += r->pol[i].series != NULL;
    if (with >= RP_SERIES_POLICIES) return r->other;
    r->pol[p].series = calloc(1, sizeof(rp_series));
    return r->pol[p].series ? r->pol[p].series : r->other;
}

static int64_t window_ns(const sl_window_info *info) {
    if (info->window_s > 0) return info->window_s * NS;
    return 30 * 86400 * NS; /* calendar months state no w: count over 30 days */
}

static uint32_t win_of(rp_run *r, const sl_window_info *info) {
    winmap *m = r->winmap;
    if (m->cap == 0 || (m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        const sl_window_info **nk = calloc(nc, sizeof(*nk));
        uint32_t *nv = calloc(nc, sizeof(*nv));
        if (nk == NULL || nv == NULL) {
            free(nk);
            free(nv);
            return UINT32_MAX;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->k[i] == NULL) continue;
            size_t s = ((uintptr_t)m->k[i] >> 4) & (nc - 1);
            while (nk[s] != NULL) s = (s + 1) & (nc - 1);
            nk[s] = m->k[i];
            nv[s] = m->v[i];
        }
        free(m->k);
        free(m->v);
        m->k = nk;
        m->v = nv;
        m->cap = nc;
    }
    size_t s = ((uintptr_t)info >> 4) & (m->cap - 1);
    for (; m->k[s] != NULL; s = (s + 1) & (m->cap - 1))
        if (m->k[s] == info) return m->v[s];
    if (r->nwin == r->capwin) {
        size_t nc = r->capwin ? r->capwin * 2 : 16;
        rp_win **nw = realloc(r->win, nc * sizeof(*nw));
        if (nw == NULL) return UINT32_MAX;
        r->win = nw;
        r->capwin = nc;
    }
    rp_win *w = calloc(1, sizeof(*w));
    if (w == NULL) return UINT32_MAX;
    w->info = info;
    w->policy = policy_of(r, info->policy ? info->policy : "?");
    w->concurrency = info->qu == SL_QU_CONCURRENT;
    w->w_ns = window_ns(info);
    w->peak_kind = RP_PEAK_NONE;
    if (info->limiter != NULL) {
        const sluice_limit_spec *sp = sluice_limiter_spec(info->limiter);
        switch (sp->algo) {
        case SLUICE_TOKEN_BUCKET:
        case SLUICE_GCRA:
        case SLUICE_LEAKY_BUCKET:
            if (sp->limit > 0 && sp->period_ns > 0) {
                w->peak_kind = RP_PEAK_BUCKET;
                w->rate_limit = sp->limit;
                w->w_ns = sp->period_ns;
            }
            break;
        case SLUICE_FIXED_WINDOW:
            w->peak_kind = RP_PEAK_FIXED;
            if (sp->period_ns > 0) w->w_ns = sp->period_ns;
            break;
        case SLUICE_QUOTA:
            w->peak_kind = RP_PEAK_FIXED;
            w->quota_period = (int)sp->quota_period;
            break;
        case SLUICE_SLIDING_WINDOW:
        case SLUICE_SLIDING_LOG:
            w->peak_kind = RP_PEAK_SLIDING;
            if (sp->period_ns > 0) w->w_ns = sp->period_ns;
            break;
        case SLUICE_CONCURRENCY:
        case SLUICE_ADAPTIVE_CONCURRENCY: w->peak_kind = RP_PEAK_INFLIGHT; break;
        }
    }
    uint32_t id = (uint32_t)r->nwin;
    r->win[r->nwin++] = w;
    m->k[s] = info;
    m->v[s] = id;
    m->n++;
    return id;
}

/* ---- series ---------------------------------------------------------------------------------- */

static void series_fold(rp_series *s, uint32_t n) {
    if (s == NULL) return;
    for (int k = 0; k < RP_NSERIES; k++) {
        for (uint32_t i = 0; i < n / 2 + n % 2; i++)
            s->v[k][i] = s->v[k][2 * i] + (2 * i + 1 < n ? s->v[k][2 * i + 1] : 0);
        for (uint32_t i = n / 2 + n % 2; i < RP_SERIES_MAX; i++) s->v[k][i] = 0;
    }
}

/* The bucket of time t, doubling the bucket width while the trace outgrows the series. */
static uint32_t bucket_of(rp_run *r, int64_t t) {
    int64_t rel = t - r->t0_ns;
    if (rel < 0) rel = 0;
    while (rel / r->bucket_ns >= RP_SERIES_MAX) {
        series_fold(r->all, r->nbuckets);
        series_fold(r->other, r->nbuckets);
        for (size_t i = 0; i < r->npol; i++) series_fold(r->pol[i].series, r->nbuckets);
        r->nbuckets = r->nbuckets / 2 + r->nbuckets % 2;
        r->bucket_ns *= 2;
    }
    uint32_t b = (uint32_t)(rel / r->bucket_ns);
    if (b + 1 > r->nbuckets) r->nbuckets = b + 1;
    return b;
}

/* ---- concurrency releases ------------------------------------------------------------------- */

typedef struct pend {
    const sluice_limiter *lim;
    uint64_t lease;
    uint64_t h;
    uint32_t win;
    bool release;   /* an admitted lease to give back (else only the in-flight count) */
    uint16_t key_len;
    unsigned char key[];
} pend;

#define PENDING_MAX 1000000

static void pend_run(rp_run *r, pend *p, int64_t at) {
    if (p->release) {
        sluice_time now = {at - r->t0_ns + NS, at};
        if (sluice_release(r->store, p->lim, p->key, p->key_len, p->lease, now) == SLUICE_OK)
            r->released++;
        else
            r->release_failed++; /* the lease had expired first */
    }
    rp_key *k = key_find(r, p->h, p->win, false);
    if (k != NULL && k->inflight > 0) k->inflight--;
    free(p);
}

static void pend_until(rp_run *r, int64_t t) {
    tq *q = r->pending;
    while (q->n > 0 && (q->v[0].at <= t || q->n > PENDING_MAX)) {
        int64_t at;
        pend *p = tq_pop(q, &at);
        pend_run(r, p, at <= t ? at : t);
    }
}

/* ---- one request ------------------------------------------------------------------------------ */

static sl_hash_key g_salt; /* from rp_run.salt, set once per run */

static uint64_t key_hash(const rp_run *r, const void *key, size_t len) {
    (void)r;
    uint64_t h = sl_hash128_of(&g_salt, key, len).lo;
    return h ? h : 1; /* 0 marks an empty slot */
}

static void top_add(rp_win *w, uint64_t h, const unsigned char *key, size_t len) {
    size_t min = 0;
    for (size_t i = 0; i < w->ntop; i++) {
        if (w->top[i].h == h) {
            w->top[i].count++;
            return;
        }
        if (w->top[i].count < w->top[min].count) min = i;
    }
    rp_top *t;
    uint64_t base = 0;
    if (w->ntop < RP_TOPK) {
        t = &w->top[w->ntop++];
    } else {
        t = &w->top[min];
        base = t->count; /* Space-Saving: the newcomer inherits the evicted count */
    }
    t->h = h;
    t->count = base + 1;
    t->key_len = (uint16_t)(len < sizeof(t->key) ? len : sizeof(t->key));
    memcpy(t->key, key, t->key_len);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* A decided request whose statistics are still to be counted: the run keeps one such
 * request in hand while it decides the next, so the key-table lines it needs (hashed and
 * prefetched at decision time) arrive while the engine works, instead of one cache miss
 * after the other. Everything that changes what the engine sees next (holds, leases,
 * settles) happens at decision time, in order; only counting is deferred. */
typedef struct acct {
    sl_trace_rec *rec;      /* NULL: nothing in hand */
    sl_verdict *v;
    int rc;
    int64_t t;
    bool first;
    uint64_t h[SLUICE_MAX_ITEMS]; /* each item's key hash */
} acct;

static void hash_items(rp_run *r, const sl_verdict *v, uint64_t *h) {
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        /* windows of one policy (and policies keyed alike) share the key's bytes */
        if (i > 0 && it->key_off == v->items[i - 1].key_off && it->key_len == v->items[i - 1].key_len)
            h[i] = h[i - 1];
        else
            h[i] = key_hash(r, v->keys + it->key_off, it->key_len);
        if (r->keys_cap > 0) __builtin_prefetch(&r->keys[h[i] & (r->keys_cap - 1)], 1);
    }
}

/* Decides `rec` at `t`. Returns true when the request was held (rec now belongs to the
 * retry queue); false when it is decided: then *a holds it for accounting. */
static bool decide_one(rp_run *r, sl_trace_rec *rec, int64_t t, sl_verdict *v, acct *a) {
    sl_request req = {.method = rec->method, .path = rec->path, .host = rec->host,
                      .client_ip = rec->client_ip, .route = rec->route,
                      .headers = rec->headers, .n_headers = rec->n_headers,
                      .has_body_bytes = rec->has_body_bytes, .body_bytes = rec->body_bytes};
    sluice_time now = {t - r->t0_ns + NS, t};
    int rc = sl_engine_check(r->engine, &req, now, v);
    bool first = rec->rechecks == 0;
    if (rc == SLUICE_OK && v->action == SL_DELAY && v->recheck) {
        if (rec->rechecks < MAX_RECHECKS) {
            /* a delay reaction: nothing consumed; the gateway holds it and asks again */
            if (first) {
                /* count the offered load once, at arrival */
                for (size_t i = 0; i < v->n; i++) {
                    uint32_t wi = win_of(r, v->items[i].info);
                    if (wi == UINT32_MAX) continue;
                    rp_win *w = r->win[wi];
                    uint64_t h = key_hash(r, v->keys + v->items[i].key_off, v->items[i].key_len);
                    rp_key *k = key_find(r, h, wi, true);
                    if (k != NULL && !w->concurrency) {
                        k->last_s = (uint32_t)((t - r->t0_ns) / NS);
                        key_count(k, w, t, t - r->t0_ns, v->items[i].cost);
                    }
                }
            }
            r->rechecks++;
            rec->rechecks++;
            int64_t d = v->delay_ns > 0 ? v->delay_ns : 1;
            rec->held_ns += d;
            rec->t_ns = t + d;
            return tq_push(r->retry, rec->t_ns, rec);
        }
        r->rechecks_exhausted++;
    }
    a->rec = rec;
    a->v = v;
    a->rc = rc;
    a->t = t;
    a->first = first;
    if (rc != SLUICE_OK) return false;
    hash_items(r, v, a->h);
    int action = v->action == SL_DELAY && v->recheck ? SL_REJECT : (int)v->action;
    bool admitted = action == SL_ALLOW || action == SL_DELAY;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->info->qu != SL_QU_CONCURRENT) continue;
        /* the slot is given back when the logged request ended; the key's in-flight count
         * (admitted or not: what it asked for) drops then too */
        int64_t dur = rec->duration_ns >= 0 ? rec->duration_ns : r->hold_ns;
        pend *p = malloc(sizeof(pend) + it->key_len);
        if (p == NULL) continue;
        p->lim = it->info->limiter;
        p->lease = it->result.lease;
        p->h = a->h[i];
        p->win = win_of(r, it->info);
        p->release = admitted && it->consumed && it->result.lease != 0 && it->info->limiter;
        p->key_len = it->key_len;
        memcpy(p->key, v->keys + it->key_off, it->key_len);
        if (!tq_push(r->pending, t + dur, p)) free(p);
    }
    if (admitted && rec->has_cost) {
        bool settle = false;
        for (size_t i = 0; i < v->n; i++) settle |= v->items[i].settle && v->items[i].consumed;
        if (settle && sl_engine_settle(r->engine, v, rec->cost, now) == SLUICE_OK) r->settled++;
    }
    return false;
}

/* Counts a decided request (see acct) and frees it. */
static void account(rp_run *r, acct *a) {
    sl_trace_rec *rec = a->rec;
    if (rec == NULL) return;
    a->rec = NULL;
    const sl_verdict *v = a->v;
    int rc = a->rc;
    int64_t t = a->t;
    bool first = a->first;
    /* ---- final outcome ---- */
    if (!r->started) {
        r->started = true;
        r->first_ns = rec->first_t_ns;
    }
    r->last_ns = max64(r->last_ns, t);
    r->requests++;
    int action = rc == SLUICE_OK ? (int)v->action : SL_ERROR;
    if (action == SL_DELAY && v->recheck) action = SL_REJECT; /* held too many times */
    bool admitted = action == SL_ALLOW || action == SL_DELAY;
    int64_t delay = rec->held_ns + (action == SL_DELAY ? v->delay_ns : 0);
    if (admitted) r->admitted++;
    if (action == SL_REJECT) r->rejected++;
    if (action == SL_FAIL) r->failed++;
    if (action == SL_ERROR) r->errors++;
    if (admitted && delay > 0) r->delayed++;
    uint32_t b = bucket_of(r, rec->first_t_ns);
    r->all->v[admitted ? (delay > 0 ? RP_DELAYED : RP_ADMITTED) : RP_REJECTED][b]++;
    if (r->decisions != NULL) {
        /* file:line names the request without repeating its key */
        static const char *const names[] = {"admitted", "delayed", "rejected", "failed", "error"};
        const char *outcome = admitted && delay > 0 ? names[1] : names[action == SL_DELAY ? 0 : action];
        const char *pol = "";
        if (rc == SLUICE_OK && v->deciding >= 0 && (size_t)v->deciding < v->n && v->items[v->deciding].info->policy)
            pol = v->items[v->deciding].info->policy;
        fprintf(r->decisions, "%" PRId64 ".%03" PRId64 ",%s,%" PRIu64 ",%s,%s,%" PRId64 "\n",
                rec->first_t_ns / NS, rec->first_t_ns % NS / 1000000,
                r->reader ? sl_trace_file_name(r->reader, rec->file) : "", rec->line, outcome, pol,
                delay / 1000000);
    }
    if (rc != SLUICE_OK) {
        sl_trace_rec_free(rec);
        return;
    }
    if (v->missing_key_policy != NULL) {
        r->missing_key++;
        r->pol[policy_of(r, v->missing_key_policy)].missing_key++;
    }
    if (v->n == 0) r->unmatched++;
    bool shadow_any = false;
    /* per policy: what happened to this request there (once per policy) */
    uint32_t seen[SLUICE_MAX_ITEMS];
    size_t nseen = 0;
    uint8_t pol_rej[SLUICE_MAX_ITEMS] = {0}, pol_shadow[SLUICE_MAX_ITEMS] = {0};
    uint8_t pol_delay[SLUICE_MAX_ITEMS] = {0};
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        uint32_t wi = win_of(r, it->info);
        if (wi == UINT32_MAX) continue;
        rp_win *w = r->win[wi];
        size_t ps = 0;
        while (ps < nseen && seen[ps] != w->policy) ps++;
        if (ps == nseen) seen[nseen++] = w->policy;
        const unsigned char *key = v->keys + it->key_off;
        uint64_t h = a->h[i];
        rp_key *k = key_find(r, h, wi, true);
        if (k != NULL) k->last_s = (uint32_t)((t - r->t0_ns) / NS);
        w->requests++;
        w->units += it->cost;
        /* a held request was counted in its key's peak when it arrived */
        if (first && k != NULL && !w->concurrency) key_count(k, w, t, t - r->t0_ns, it->cost);
        if (w->concurrency && k != NULL) {
            /* the key's requests in flight, admitted or not: what it asked for */
            k->inflight++;
            if (k->inflight > k->peak) k->peak = k->inflight;
        }
        if (admitted) {
            w->admitted++;
            int64_t d = rec->held_ns + it->result.delay_ns;
            if (d > 0) {
                w->delayed++;
                w->delay_ns += d;
                pol_delay[ps] = 1;
            }
        } else if (action == SL_REJECT && it->would_limit && !it->shadow) {
            w->rejected++;
            pol_rej[ps] = 1;
            if (k != NULL) k->rejected++;
            top_add(w, h, key, it->key_len);
        } else if (action == SL_FAIL || action == SL_ERROR) {
            w->errors++;
        } else {
            w->rejected_other++;
        }
        if (it->shadow && it->would_limit) {
            w->shadow++;
            pol_shadow[ps] = 1;
            shadow_any = true;
        }
    }
    if (shadow_any) r->all->v[RP_SHADOW][b]++;
    for (size_t i = 0; i < nseen; i++) {
        rp_policy *p = &r->pol[seen[i]];
        p->requests++;
        rp_series *s = series_for(r, seen[i]);
        int kind;
        if (admitted) {
            p->admitted++;
            kind = pol_delay[i] ? RP_DELAYED : RP_ADMITTED;
            if (pol_delay[i]) p->delayed++;
        } else if (pol_rej[i]) {
            p->rejected++;
            kind = RP_REJECTED;
        } else {
            p->rejected_other++;
            kind = RP_OTHER;
        }
        if (pol_shadow[i]) p->shadow++;
        if (s != NULL) {
            if (kind >= 0) s->v[kind][b]++;
            if (pol_shadow[i]) s->v[RP_SHADOW][b]++;
        }
    }
    sl_trace_rec_free(rec);
}


/* ---- the run ------------------------------------------------------------------------------------ */

static int run_open(rp_run *r, char *err, size_t errlen) {
    static sl_diag_list dl;
    int rc = sl_config_load(r->config_path, &r->cfg, &dl);
    if (rc != SLUICE_OK) {
        if (dl.n > 0) sl_diag_format(&dl, 0, err, errlen);
        else snprintf(err, errlen, "%s: %s", r->config_path, sluice_strerror(rc));
        return -1;
    }
    const sl_settings *st = sl_config_settings(r->cfg);
    /* the config's memory store as configured (its evictions are part of what the config
     * does); a Redis-backed config replays on a memory store of 1,000,000 keys */
    uint64_t cap = r->store_keys ? r->store_keys
                 : st->store.type == SL_STORE_MEMORY ? st->store.max_keys : 1000000;
    sluice_store_options so = {.max_keys = cap, .on_full = st->store.on_full,
                               .shards = st->store.shards};
    int e = 0;
    r->store = sluice_store_create(&so, &e);
    if (r->store == NULL) {
        snprintf(err, errlen, "memory store: %s", sluice_strerror(e));
        return -1;
    }
    r->engine = sl_engine_create(r->cfg, r->store, &e, err, errlen);
    if (r->engine == NULL) return -1;
    r->npol = sl_config_policy_count(r->cfg);
    r->pol = calloc(r->npol ? r->npol : 1, sizeof(rp_policy));
    r->all = calloc(1, sizeof(rp_series));
    r->other = calloc(1, sizeof(rp_series));
    r->pending = calloc(1, sizeof(tq));
    r->retry = calloc(1, sizeof(tq));
    r->winmap = calloc(1, sizeof(winmap));
    if (r->pol == NULL || r->all == NULL || r->other == NULL || r->pending == NULL ||
        r->retry == NULL || r->winmap == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < r->npol; i++) r->pol[i].name = sl_config_policy_name(r->cfg, i);
    r->bucket_ns = NS;
    /* a random salt per run: the key labels in reports cannot be looked up in a table */
    sl_hash_key k;
    if (sl_hash_random_key(&k) != 0) {
        snprintf(err, errlen, "no random numbers from the kernel");
        return -1;
    }
    sl_hash_key_to_bytes(&k, r->salt);
    g_salt = k;
    return 0;
}

static void run_close(rp_run *r) {
    if (r->pending) {
        tq *q = r->pending;
        void *p;
        while ((p = tq_pop(q, NULL)) != NULL) free(p);
        free(q->v);
        free(q);
    }
    if (r->retry) {
        tq *q = r->retry;
        void *p;
        while ((p = tq_pop(q, NULL)) != NULL) sl_trace_rec_free(p);
        free(q->v);
        free(q);
    }
    if (r->winmap) {
        winmap *m = r->winmap;
        free(m->k);
        free(m->v);
        free(m);
    }
    for (size_t i = 0; i < r->nwin; i++) free(r->win[i]);
    free(r->win);
    for (size_t i = 0; i < r->npol; i++) free(r->pol[i].series);
    free(r->pol);
    free(r->all);
    free(r->other);
    free(r->keys);
    sl_engine_destroy(r->engine);
    sluice_store_destroy(r->store);
    sl_config_destroy(r->cfg);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of this thread: on shared cores, time spent descheduled is not replay's cost
 * (--bench reports it, as lib_bench reports its "cpu" figure). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Every record in time order (late ones at the time already reached), held ones again
 * when their hold ends, leases released as the log says the requests ended. */
static void run_loop(rp_run *r, sl_trace_rec *(*next)(void *), void *ctx) {
    static sl_verdict v[2];
    acct a[2] = {{0}};
    int cur = 0;
    int64_t clock = INT64_MIN;
    sl_trace_rec *in = next(ctx);
    tq *retry = r->retry;
    while (in != NULL || retry->n > 0) {
        sl_trace_rec *rec;
        /* a request held until t goes before one that arrives at t: it was there first */
        if (in != NULL && (retry->n == 0 || in->t_ns < retry->v[0].at)) {
            rec = in;
            in = next(ctx);
        } else {
            rec = tq_pop(retry, NULL);
        }
        if (clock == INT64_MIN) {
            clock = rec->t_ns;
            r->t0_ns = rec->t_ns - ((rec->t_ns % NS) + NS) % NS;
        }
        int64_t t = rec->t_ns > clock ? rec->t_ns : clock; /* the clock never goes back */
        clock = t;
        tq *pq = r->pending;
        if (pq->n > 0 && pq->v[0].at <= t) {
            /* a release changes in-flight counts: count the request in hand first */
            account(r, &a[cur ^ 1]);
            pend_until(r, t);
        }
        if (!decide_one(r, rec, t, &v[cur], &a[cur])) {
            account(r, &a[cur ^ 1]); /* the previous one, while this one's lines arrive */
            cur ^= 1;
        }
    }
    account(r, &a[cur ^ 1]);
    account(r, &a[cur]);
    pend_until(r, INT64_MAX);
    sluice_store_stats_get(r->store, &r->store_stats);
    /* every key still in the table goes into its window's distribution */
    for (uint64_t i = 0; i < r->keys_cap; i++)
        if (r->keys[i].h != 0) key_finalise(r, &r->keys[i]);
}

static sl_trace_rec *next_from_reader(void *ctx) { return sl_trace_next(ctx); }

typedef struct mem_src {
    sl_trace_rec **v;
    size_t n, i;
} mem_src;

static sl_trace_rec *next_from_memory(void *ctx) {
    mem_src *m = ctx;
    return m->i < m->n ? m->v[m->i++] : NULL;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: sluice replay -c CONFIG [options] TRACE...\n"
        "  runs CONFIG's policies over recorded traffic on the trace's own clock and reports\n"
        "  what they would have done (docs/replay.md). TRACE: nginx access logs (combined or\n"
        "  --log-format), JSON lines (nginx escape=json, Envoy), CSV with a header; gzip or\n"
        "  plain; '-' is standard input; several files are merged in time order.\n"
        "options:\n"
        "  -c, --config FILE     the policies (sluice or envoyproxy/ratelimit format)\n"
        "  --format F            auto (default), nginx, json or csv\n"
        "  --log-format 'FMT'    the nginx log_format of the files (default: combined)\n"
        "  --map ATTR=$FIELD     take ATTR from a log field (ATTR: time, duration[:ms], method,\n"
        "                        path, host, client_ip, route, body_bytes, cost, request,\n"
        "                        header.NAME); ATTR=VALUE a constant; ATTR= no default\n"
        "  --reorder DUR         records may be this much out of order (default 60s)\n"
        "  --reorder-mem BYTES   memory for that (default 64M)\n"
        "  --hold DUR            how long a request lasts when the log does not say (0s)\n"
        "  --suggest             print per window the limit that keeps rejections under\n"
        "  --target PCT          ... this share of keys (default 0.1%%)\n"
        "  --top N               most affected keys shown per window (default 5)\n"
        "  --raw-keys            show keys as they are (they are personal data: hashed by\n"
        "                        default, with a random salt per run)\n"
        "  --max-keys N          per-key statistics kept at once (default 1000000)\n"
        "  --store-keys N        the memory store's capacity (default: the config's max_keys)\n"
        "  --json                the report as JSON on standard output\n"
        "  --svg DIR             write replay-traffic.svg and replay-peaks.svg into DIR\n"
        "  --html FILE           one offline page with the plots and the tables\n"
        "  --decisions FILE      one CSV line per request: time,file,line,outcome,policy,delay_ms\n"
        "  --show-bad N          unparsable lines reported (default 5; content with --raw-keys)\n"
        "  --bench               read everything first, then time the decisions alone\n");
}

/* "60s", "500ms", "2m", "1h" */
static bool parse_dur(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return false;
    int64_t unit;
    if (strcmp(end, "ms") == 0) unit = INT64_C(1000000);
    else if (strcmp(end, "s") == 0 || *end == '\0') unit = NS;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0) unit = 60 * NS;
    else if (strcmp(end, "h") == 0) unit = 3600 * NS;
    else if (strcmp(end, "us") == 0) unit = 1000;
    else return false;
    *out = (int64_t)(v * (double)unit);
    return true;
}

static bool parse_bytes(const char *s, size_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return false;
    size_t m = 1;
    if (*end == 'k' || *end == 'K') m = 1024, end++;
    else if (*end == 'm' || *end == 'M') m = (size_t)1 << 20, end++;
    else if (*end == 'g' || *end == 'G') m = (size_t)1 << 30, end++;
    if (*end == 'i' || *end == 'B' || *end == 'b') end++;
    if (*end == 'B') end++;
    if (*end != '\0' || v == 0) return false;
    *out = (size_t)v * m;
    return true;
}

int sl_cli_replay(int argc, char **argv) {
    static rp_run run;
    rp_run *r = &run;
    memset(r, 0, sizeof(*r));
    r->target = 0.001;
    r->top = 5;
    r->max_keys = 1000000;
    static sl_trace_map map;
    sl_trace_options to = {.format = SL_TF_AUTO, .map = &map, .show_bad = 5};
    bool json = false, bench = false;
    const char *svg_dir = NULL, *html = NULL, *decisions = NULL;
    char **files = calloc((size_t)argc + 1, sizeof(char *));
    size_t nfiles = 0;
    char err[1024];
    if (files == NULL) return 1;
    enum { O_FORMAT = 256, O_LOG_FORMAT, O_MAP, O_REORDER, O_HOLD, O_REORDER_MEM, O_SUGGEST,
           O_TARGET, O_TOP, O_MAX_KEYS, O_SHOW_BAD, O_STORE_KEYS, O_RAW, O_JSON, O_SVG, O_HTML,
           O_DECISIONS, O_BENCH };
    static const struct option lo[] = {
        {"config", required_argument, NULL, 'c'}, {"format", required_argument, NULL, O_FORMAT},
        {"log-format", required_argument, NULL, O_LOG_FORMAT}, {"map", required_argument, NULL, O_MAP},
        {"reorder", required_argument, NULL, O_REORDER}, {"hold", required_argument, NULL, O_HOLD},
        {"reorder-mem", required_argument, NULL, O_REORDER_MEM},
        {"suggest", no_argument, NULL, O_SUGGEST}, {"target", required_argument, NULL, O_TARGET},
        {"top", required_argument, NULL, O_TOP}, {"max-keys", required_argument, NULL, O_MAX_KEYS},
        {"show-bad", required_argument, NULL, O_SHOW_BAD},
        {"store-keys", required_argument, NULL, O_STORE_KEYS},
        {"raw-keys", no_argument, NULL, O_RAW}, {"json", no_argument, NULL, O_JSON},
        {"svg", required_argument, NULL, O_SVG}, {"html", required_argument, NULL, O_HTML},
        {"decisions", required_argument, NULL, O_DECISIONS}, {"bench", no_argument, NULL, O_BENCH},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    sl_opts op;
    sl_opts_init(&op, "replay", lo, "c:h", false);
    for (;;) {
        const char *v;
        int ch = sl_opts_next(&op, argc, argv, &v);
        if (ch == SL_OPT_END) break;
        const char *a = op.from;
        int bad = 0;
        switch (ch) {
        case SL_OPT_ERR: bad = 1; break;
        case 'h':
            usage(stdout);
            free(files);
            return 0;
        case 'c': r->config_path = v; break;
        case O_FORMAT:
            if (strcmp(v, "auto") == 0) to.format = SL_TF_AUTO;
            else if (strcmp(v, "nginx") == 0) to.format = SL_TF_NGINX;
            else if (strcmp(v, "json") == 0 || strcmp(v, "envoy") == 0) to.format = SL_TF_JSON;
            else if (strcmp(v, "csv") == 0) to.format = SL_TF_CSV;
            else bad = fprintf(stderr, "sluice replay: --format is auto, nginx, json or csv, got '%s'\n", v);
            break;
        case O_LOG_FORMAT: to.log_format = v; break;
        case O_MAP:
            if (sl_trace_map_add(&map, v, err, sizeof(err)) != 0)
                bad = fprintf(stderr, "sluice replay: %s\n", err);
            break;
        case O_REORDER:
        case O_HOLD: {
            int64_t d;
            if (!parse_dur(v, &d))
                bad = fprintf(stderr, "sluice replay: %s expects a duration (60s, 500ms), got '%s'\n", a, v);
            else if (ch == O_REORDER) to.reorder_ns = d > 0 ? d : 1;
            else r->hold_ns = d;
            break;
        }
        case O_REORDER_MEM:
            if (!parse_bytes(v, &to.reorder_bytes))
                bad = fprintf(stderr, "sluice replay: --reorder-mem expects a size (64M), got '%s'\n", v);
            break;
        case O_SUGGEST: r->suggest = true; break;
        case O_TARGET: {
            char *end;
            double p = strtod(v, &end);
            if (end == v || (*end != '\0' && strcmp(end, "%") != 0) || p < 0 || p >= 100) {
                bad = fprintf(stderr, "sluice replay: --target expects a percentage (0.1%%), got '%s'\n", v);
                break;
            }
            r->target = p / 100.0;
            r->suggest = true;
            break;
        }
        case O_TOP:
        case O_MAX_KEYS:
        case O_SHOW_BAD:
        case O_STORE_KEYS: {
            char *end;
            unsigned long long n = strtoull(v, &end, 10);
            if (*end != '\0' || end == v || *v == '-') {
                bad = fprintf(stderr, "sluice replay: %s expects a number, got '%s'\n", a, v);
                break;
            }
            if (ch == O_TOP) r->top = (unsigned)(n > RP_TOPK ? RP_TOPK : n);
            else if (ch == O_MAX_KEYS) r->max_keys = n ? n : 1;
            else if (ch == O_STORE_KEYS) r->store_keys = n;
            else to.show_bad = (unsigned)n;
            break;
        }
        case O_RAW:
            r->raw_keys = true;
            to.show_bad_content = true;
            break;
        case O_JSON: json = true; break;
        case O_SVG: svg_dir = v; break;
        case O_HTML: html = v; break;
        case O_DECISIONS: decisions = v; break;
        case O_BENCH: bench = true; break;
        default: bad = 1; break;
        }
        if (bad) {
            free(files);
            return 2;
        }
    }
    for (int i = optind; i < argc; i++) files[nfiles++] = argv[i];
    if (r->config_path == NULL || nfiles == 0) {
        usage(stderr);
        free(files);
        return 2;
    }
    if (run_open(r, err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice replay: %s\n", err);
        run_close(r);
        free(files);
        return 1;
    }
    sl_trace_reader *tr = sl_trace_open(files, nfiles, &to, err, sizeof(err));
    if (tr == NULL) {
        fprintf(stderr, "sluice replay: %s\n", err);
        run_close(r);
        free(files);
        return 1;
    }
    r->reader = tr;
    if (decisions != NULL) {
        r->decisions = strcmp(decisions, "-") == 0 ? stdout : fopen(decisions, "w");
        if (r->decisions == NULL) {
            fprintf(stderr, "sluice replay: %s: %s\n", decisions, strerror(errno));
            sl_trace_close(tr);
            run_close(r);
            free(files);
            return 1;
        }
        fprintf(r->decisions, "time,file,line,outcome,policy,delay_ms\n");
    }
    double t0 = now_s(), c0 = cpu_s();
    if (bench) {
        /* parse everything first, then time the decisions alone (make bench) */
        mem_src m = {0};
        size_t cap = 0;
        sl_trace_rec *rec;
        while ((rec = sl_trace_next(tr)) != NULL) {
            if (m.n == cap) {
                cap = cap ? cap * 2 : 65536;
                sl_trace_rec **nv = realloc(m.v, cap * sizeof(*nv));
                if (nv == NULL) break;
                m.v = nv;
            }
            m.v[m.n++] = rec;
        }
        double t1 = now_s(), c1 = cpu_s();
        r->bench_records = m.n;
        run_loop(r, next_from_memory, &m);
        r->decide_seconds = now_s() - t1;
        r->decide_cpu_seconds = cpu_s() - c1;
        r->seconds = t1 - t0;
        r->read_cpu_seconds = c1 - c0;
        free(m.v);
    } else {
        run_loop(r, next_from_reader, tr);
        r->seconds = now_s() - t0;
    }
    int rc = 0;
    if (json) rp_report_json(r, tr, stdout);
    else rp_report_text(r, tr, stdout);
    if (svg_dir != NULL && rp_report_svg(r, svg_dir) != 0) {
        fprintf(stderr, "sluice replay: cannot write the plots into %s: %s\n", svg_dir, strerror(errno));
        rc = 1;
    }
    if (html != NULL && rp_report_html(r, tr, html) != 0) {
        fprintf(stderr, "sluice replay: cannot write %s: %s\n", html, strerror(errno));
        rc = 1;
    }
    const sl_trace_stats *ts = sl_trace_stats_get(tr);
    if (ts->read_errors > 0) rc = 1;
    if (r->decisions != NULL && r->decisions != stdout && fclose(r->decisions) != 0) {
        fprintf(stderr, "sluice replay: %s: %s\n", decisions, strerror(errno));
        rc = 1;
    }
    sl_trace_close(tr);
    run_close(r);
    free(files);
    return rc;
}
