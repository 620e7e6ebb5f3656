/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cell.c -- CL.THROTTLE's limiters: one GCRA limiter per distinct (max_burst, count,
 * period), burst = max_burst + 1 as redis-cell counts it, created on first use and cached.
 * Lookups are lock-free (open addressing, entries published with a release store and
 * never removed); only creating a new parameter set takes the cache mutex, so a decision
 * for known parameters takes no lock beyond the store's shard lock.
 * Bounds (docs/operations.md, "What an attacker can fill"): each client address may have
 * SL_CELL_SHARE sets in use (used within SL_CELL_IDLE_S); a new set beyond its share is
 * refused for that client only, and sets it stops using leave its share after
 * SL_CELL_IDLE_S. A set, once made, answers everyone until the process ends (never
 * evicted: another client's counters stay whole). The process makes at most SL_CELL_MAX
 * sets, because each is a family of the store and the store frees none.
 * The limiters are GCRA in redis-cell mode (sl_gcra_cell_init: T and `remaining` as
 * redis-cell computes them); the reply's seconds are rounded here (sl_cell_round_s).
 * Differences from redis-cell that remain are listed in docs/algorithms.md; the one made
 * here: state is per key *and* parameter set, so calling one key with two different
 * rates keeps two counters (redis-cell would share one TAT).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/limiter.h"
#include "server/server.h"

/* A sluice_limiter holding redis-cell-mode GCRA parameters (what sluice_limiter_create
 * builds from a spec, with the CL.THROTTLE arithmetic; freed by sluice_limiter_destroy). */
static sluice_limiter *cell_limiter(const char *name, int64_t max_burst, int64_t count,
                                    int64_t period_s, int *err) {
    sluice_limiter *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        *err = SLUICE_ENOMEM;
        return NULL;
    }
    size_t n = strnlen(name, sizeof(l->name) - 1);
    memcpy(l->name, name, n);
    *err = sl_gcra_cell_init(&l->lim, max_burst, count, period_s, NULL, 0);
    if (*err != SLUICE_OK) {
        free(l);
        return NULL;
    }
    l->spec.algo = SLUICE_GCRA;
    l->spec.name = l->name;
    l->spec.limit = l->lim.limit;
    l->spec.period_ns = l->lim.period_ns;
    l->spec.burst = l->lim.capacity;
    atomic_init(&l->refs, 1); /* as sluice_limiter_create: destroy drops this reference */
    return l;
}

void sl_cell_init(sl_cell_cache *cc) {
    memset(cc, 0, sizeof(*cc));
    pthread_mutex_init(&cc->mu, NULL);
}

void sl_cell_deinit(sl_cell_cache *cc) {
    for (size_t i = 0; i < SL_CELL_CAP; i++) {
        const sluice_limiter *l = atomic_load(&cc->e[i].lim);
        if (l) sluice_limiter_destroy((sluice_limiter *)l);
    }
    pthread_mutex_destroy(&cc->mu);
}

static size_t cell_hash(int64_t b, int64_t c, int64_t p) {
    uint64_t h = (uint64_t)b * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)c + 0x7f4a7c159e3779b9ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)p * 0xc2b2ae3d27d4eb4full + (h << 6) + (h >> 2);
    return (size_t)(h ^ (h >> 29)) & (SL_CELL_CAP - 1);
}

/* Probes for the set; returns its entry, or NULL with *slot at the first free entry. */
static sl_cell_entry *probe(sl_cell_cache *cc, int64_t b, int64_t c, int64_t p, size_t *slot) {
    size_t h = cell_hash(b, c, p);
    for (size_t k = 0; k < SL_CELL_CAP; k++) {
        sl_cell_entry *e = &cc->e[(h + k) & (SL_CELL_CAP - 1)];
        const sluice_limiter *l = atomic_load_explicit(&e->lim, memory_order_acquire);
        if (l == NULL) {
            *slot = (h + k) & (SL_CELL_CAP - 1);
            return NULL;
        }
        if (e->burst == b && e->count == c && e->period == p) return e;
    }
    *slot = SL_CELL_CAP;
    return NULL;
}

static uint64_t addr_hash(const char *a) {
    uint64_t h = UINT64_C(14695981039346656037);
    for (; a != NULL && *a; a++) h = (h ^ (unsigned char)*a) * UINT64_C(1099511628211);
    return h ? h : 1;
}

/* The owner record of client `addr` (caller holds the mutex); the shared overflow one
 * once SL_CELL_OWNERS addresses are known. */
static sl_cell_owner *owner_of(sl_cell_cache *cc, uint64_t addr) {
    for (size_t k = 0; k < SL_CELL_OWNERS; k++) {
        sl_cell_owner *o = &cc->owners[(addr + k) % SL_CELL_OWNERS];
        if (o->addr == addr) return o;
        if (o->addr == 0) {
            o->addr = addr;
            o->recount_s = INT64_MIN;
            return o;
        }
    }
    return &cc->owners[SL_CELL_OWNERS];
}

/* Why a recount rather than a count kept on every use: the lookups take no lock and
 * write one relaxed timestamp; whether a client's sets are still in use is only asked
 * when it creates one, at most once a second per client (refusals in between are O(1)). */
static void recount(sl_cell_cache *cc, sl_cell_owner *o, int64_t now_s) {
    if (o->recount_s != INT64_MIN && now_s - o->recount_s < 1 && now_s >= o->recount_s) return;
    unsigned live = 0;
    bool overflow = o == &cc->owners[SL_CELL_OWNERS];
    for (size_t i = 0; i < SL_CELL_CAP; i++) {
        const sl_cell_entry *e = &cc->e[i];
        if (atomic_load_explicit(&e->lim, memory_order_relaxed) == NULL) continue;
        bool mine = overflow ? owner_of(cc, e->owner) == o : e->owner == o->addr;
        if (mine && now_s - atomic_load_explicit(&e->used_s, memory_order_relaxed) < SL_CELL_IDLE_S)
            live++;
    }
    o->live = live;
    o->recount_s = now_s;
}

const sluice_limiter *sl_cell_get(sl_server *s, const char *client, int64_t max_burst,
                                  int64_t count, int64_t period_s, int64_t now_ns, int *err,
                                  int *why) {
    sl_cell_cache *cc = &s->cell;
    int64_t now_s = now_ns / SLUICE_NS_PER_S;
    size_t slot;
    *why = 0;
    sl_cell_entry *e = probe(cc, max_burst, count, period_s, &slot);
    if (e != NULL) {
        if (atomic_load_explicit(&e->used_s, memory_order_relaxed) != now_s)
            atomic_store_explicit(&e->used_s, now_s, memory_order_relaxed);
        return atomic_load_explicit(&e->lim, memory_order_acquire);
    }
    const sluice_limiter *l = NULL;
    pthread_mutex_lock(&cc->mu);
    e = probe(cc, max_burst, count, period_s, &slot);
    if (e != NULL) {
        l = atomic_load_explicit(&e->lim, memory_order_acquire);
        pthread_mutex_unlock(&cc->mu);
        return l;
    }
    uint64_t addr = addr_hash(client);
    sl_cell_owner *o = owner_of(cc, addr);
    recount(cc, o, now_s);
    if (o->live >= SL_CELL_SHARE) {
        *err = SLUICE_EFULL;
        *why = 1;
    } else if (slot >= SL_CELL_CAP || cc->used >= SL_CELL_MAX) {
        *err = SLUICE_EFULL;
        *why = 2;
    } else {
        char name[96];
        snprintf(name, sizeof(name), "cl.throttle/%lld/%lld/%lld", (long long)max_burst,
                 (long long)count, (long long)period_s);
        sluice_limiter *nl = cell_limiter(name, max_burst, count, period_s, err);
        if (nl && (*err = sluice_store_register(s->store, nl)) != 0) {
            sluice_limiter_destroy(nl);
            nl = NULL;
        }
        if (nl) {
            e = &cc->e[slot];
            e->burst = max_burst;
            e->count = count;
            e->period = period_s;
            e->owner = addr;
            atomic_store_explicit(&e->used_s, now_s, memory_order_relaxed);
            atomic_store_explicit(&e->lim, nl, memory_order_release);
            cc->used++;
            o->live++;
            l = nl;
        }
    }
    if (l == NULL && *err == SLUICE_EFULL) atomic_fetch_add(&cc->refused, 1);
    pthread_mutex_unlock(&cc->mu);
    return l;
}

uint64_t sl_cell_refused(sl_server *s) { return atomic_load(&s->cell.refused); }

/* A reply's whole seconds as redis-cell 0.4+ rounds them (lib.rs): `as_seconds_f64() as
 * i64`, plus 1 when `subsec_milliseconds() > 0`, i.e. up only when at least 1 ms is left
 * over (redis-cell 0.3.1 added 1 whenever the duration was >= 1 ms, earlier versions
 * truncated). Durations here are >= 0 (a negative or zero one answers 0); from 2^24 s (194
 * days) on, redis-cell's f64 may round .999999999 up once more: not reproduced. */
int64_t sl_cell_round_s(int64_t ns) {
    if (ns <= 0) return 0;
    int64_t s = ns / SLUICE_NS_PER_S;
    if (ns % SLUICE_NS_PER_S >= SLUICE_NS_PER_MS) s++;
    return s;
}
