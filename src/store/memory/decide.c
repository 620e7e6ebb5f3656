/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decide.c -- decisions over the memory store: all-or-nothing across up to
 * SLUICE_MAX_ITEMS limits (every item decided into scratch state under the shard locks
 * by sl_group_decide, the states written back only for what the decision keeps),
 * settle, release, reset, and the memory store's operations table (store.h).
 * Invariants: only the shard locks of the keys involved are taken, always in address
 * order (no deadlock between decisions sharing shards); nothing here allocates or reads
 * a clock; a failed call consumes nothing.
 */
#include <stdint.h>
#include <string.h>

#include "algo/algo_impl.h"
#include "store/decision.h"
#include "store/group.h"
#include "store/memory/memory.h"
#include "store/memory/override.h"
#include "store/store.h"

/* Sliding-log states are up to 8 + 8 * SL_SLIDING_LOG_MAX bytes: their scratch comes from
 * one arena of this size per decision (two full-size logs). A decision whose large states
 * do not fit is refused with SLUICE_ERANGE (nothing consumed); small states (<= 32 bytes,
 * every other algorithm) always fit. */
#define BIG_ARENA (2 * (sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX))

/* GCC's SLP vectoriser merges the 8-byte stores and loads of small structs (sluice_time,
 * sl_result) into 16-byte vector moves; reading back with one 16-byte load what was
 * just written with two 8-byte stores defeats store-to-load forwarding, which perf
 * showed costing ~20% of a single-item decision. The hot functions opt out. */
#if defined(__GNUC__) && !defined(__clang__)
#define SL_NO_SLP __attribute__((optimize("no-tree-slp-vectorize")))
#else
#define SL_NO_SLP
#endif

typedef union big_state {
    int64_t align;
    unsigned char b[sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX];
} big_state;

typedef struct item_ctx {
    sl_family *fam;
    sl_lver *ver;
    sl_hash128 h;
    sl_loc loc;
    void *entry;     /* the stored entry, or NULL for a fresh key */
    const void *src; /* the state this item decides on */
    void *dst;       /* its scratch next state */
    int prev;        /* an earlier item with the same limiter family and key, or -1 */
    bool changed;    /* dst must be stored if the decision commits */
    bool writer;     /* the last changed item of its key: the one that stores */
} item_ctx;

SL_NO_SLP static void to_public(const sl_result *r, sluice_result *o) {
    o->allowed = r->allowed ? 1 : 0;
    o->limit = r->limit;
    o->remaining = r->remaining;
    o->reset_after_ns = r->reset_after_ns;
    o->retry_after_ns = r->retry_after_ns;
    o->delay_ns = r->delay_ns;
    o->lease = r->lease;
}

static inline bool same_key(const item_ctx *a, const item_ctx *b) {
    return a->fam == b->fam && a->h.lo == b->h.lo && a->h.hi == b->h.hi;
}

/* Collects the distinct shards of the items, sorted by address, and locks them. */
static size_t lock_shards(item_ctx *c, size_t n, sl_shard **locked) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        sl_shard *sh = c[i].loc.sh;
        size_t j = m;
        bool dup = false;
        for (size_t k = 0; k < m; k++)
            if (locked[k] == sh) dup = true;
        if (dup) continue;
        while (j > 0 && (uintptr_t)locked[j - 1] > (uintptr_t)sh) {
            locked[j] = locked[j - 1];
            j--;
        }
        locked[j] = sh;
        m++;
    }
    for (size_t k = 0; k < m; k++) sl_shard_lock(locked[k]);
    return m;
}

static void unlock_shards(sl_shard **locked, size_t m) {
    for (size_t k = m; k-- > 0;) sl_shard_unlock(locked[k]);
}

static void note_time(sl_shard **locked, size_t m, sluice_time now) {
    for (size_t k = 0; k < m; k++)
        if (now.mono_ns > locked[k]->last_now.mono_ns) locked[k]->last_now = now;
}

/*
 * Locates every item under its family's current parameters and locks the shards. A
 * concurrent re-registration swaps the parameters while holding every shard lock, so
 * re-reading them under our locks tells whether what we located is still current.
 */
static size_t locate_and_lock(item_ctx *c, size_t n, sl_shard **locked) {
    for (;;) {
        for (size_t i = 0; i < n; i++) {
            c[i].ver = sl_family_cur(c[i].fam);
            sl_table_locate(c[i].ver->table, c[i].h, c[i].fam->id, &c[i].loc);
            __builtin_prefetch(c[i].loc.base + (size_t)c[i].loc.hint * c[i].loc.t->esize);
        }
        size_t m = lock_shards(c, n, locked);
        bool stable = true;
        for (size_t i = 0; i < n && stable; i++)
            if (sl_family_cur(c[i].fam) != c[i].ver) stable = false;
        if (stable) return m;
        unlock_shards(locked, m);
    }
}

int sl_decision_deciding(const sluice_decision *out) {
    int best = 0;
    for (size_t i = 1; i < out->n; i++) {
        const sluice_result *r = &out->results[i], *b = &out->results[best];
        if (sl_window_decides_over(r, sl_rank_of(r), b, sl_rank_of(b))) best = (int)i;
    }
    return best;
}

static int prepare(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                   item_ctx *c) {
    if (lim == NULL || (key == NULL && key_len > 0)) return SLUICE_EINVAL;
    c->fam = sl_store_family_of(st, lim);
    if (c->fam == NULL) return SLUICE_EINVAL;
    c->h = sl_family_hash(c->fam, key != NULL ? key : "", key_len);
    return SLUICE_OK;
}

/* The two algorithms of most single-item traffic are called directly: the dispatcher's
 * checks and indirect call are ~15 of the ~430 instructions of a decision. Same
 * functions the dispatcher would call, so the same results. */
static inline bool algo_decide(const sl_limit *l, const void *state, void *next,
                               sluice_time now, uint64_t cost, sl_result *r) {
    if (l->algo == SLUICE_GCRA) return sl_gcra_decide(l, state, next, now, cost, r);
    if (l->algo == SLUICE_TOKEN_BUCKET) return sl_tb_decide(l, state, next, now, cost, r);
    return sl_algo_decide(l, state, next, now, cost, r);
}

/* One single-item decision between its two steps: located (hash known, lines
 * prefetched) and not yet locked. */
typedef struct one_loc {
    sl_family *f;
    sl_lver *v;
    sl_hash128 h;
    sl_loc loc;
} one_loc;

static inline void one_locate(one_loc *p) {
    p->v = sl_family_cur(p->f);
    sl_table_locate(p->v->table, p->h, p->f->id, &p->loc);
    const unsigned char *slot = p->loc.base + (size_t)p->loc.hint * p->loc.t->esize;
    sl_prefetch_w(slot);
    sl_prefetch_w(slot + 64); /* probe runs often cross into the next line */
}

/* Step 1: validates the item, hashes its key, finds its shard and home slot and starts
 * fetching their cache lines (with write intent: the decision writes both). Nothing is
 * locked: in a batch this runs for several items before the first is decided, so the
 * misses of different keys overlap instead of following one another. */
/* (Both steps are forced inline: as a call, one_run cost ~30 instructions of spills.) */
#define SL_INLINE static inline __attribute__((always_inline))

SL_INLINE int one_prep(sluice_store *st, const sluice_item *it, one_loc *p) {
    const sluice_limiter *lim = it->limiter;
    if (lim == NULL || (it->key == NULL && it->key_len > 0)) return SLUICE_EINVAL;
    p->f = sl_store_family_of(st, lim);
    if (p->f == NULL) return SLUICE_EINVAL;
    p->h = sl_family_hash(p->f, it->key != NULL ? it->key : "", it->key_len);
    one_locate(p);
    sl_prefetch_w(p->loc.sh);
    return SLUICE_OK;
}

/*
 * Step 2: locks the shard (re-locating if the family's parameters changed since step 1:
 * a re-registration swaps them while holding every shard lock, so the version read under
 * our lock is current), decides, unlocks. Returns 1 when the item is not for this path
 * (a state above SL_STORE_SMALL_STATE: nothing done), an error (nothing consumed), or
 * SLUICE_OK with *res filled.
 * With one item there is nothing to be atomic with, so a stored key decides straight
 * into its entry (algo.h allows next to alias state; a rejection writes back an
 * equivalent state). Time comes by pointer and is read field by field: a by-value copy
 * was spilled as two 8-byte stores and reloaded as one 16-byte vector load, a
 * store-forwarding stall that perf showed as ~15% of a decision.
 */
SL_NO_SLP SL_INLINE int one_run(sluice_store *st, const sluice_item *it, const sluice_time *nowp,
                                one_loc *p, sluice_result *res) {
    for (;;) {
        sl_shard_lock(p->loc.sh);
        if (sl_family_cur(p->f) == p->v) break;
        sl_shard_unlock(p->loc.sh);
        one_locate(p);
    }
    sl_loc *loc = &p->loc;
    const sl_limit *l = &p->v->lim;
    if (l->state_size > SL_STORE_SMALL_STATE) {
        sl_shard_unlock(loc->sh);
        return 1;
    }
    if (nowp->mono_ns > loc->sh->last_now.mono_ns) {
        loc->sh->last_now.mono_ns = nowp->mono_ns;
        loc->sh->last_now.wall_ns = nowp->wall_ns;
    }
    sl_ehdr *e = sl_table_find(loc);
    sl_result r;
    int rc = SLUICE_OK;
    if (e != NULL) {
        void *s = sl_entry_state(e);
        if (it->cost > 0) {
            algo_decide(l, s, s, *nowp, it->cost, &r);
        } else {
            uint64_t scratch[SL_STORE_SMALL_STATE / 8];
            algo_decide(l, s, scratch, *nowp, 0, &r);
        }
        /* eviction hints: last use, uses, limited, time to fresh */
        sl_entry_touch(e, nowp->mono_ns, r.remaining == 0, r.reset_after_ns);
    } else {
        uint64_t next[SL_STORE_SMALL_STATE / 8];
        bool ch = algo_decide(l, NULL, next, *nowp, it->cost, &r);
        if (ch && it->cost > 0 && r.allowed) {
            sl_keep keep = {loc->k0, loc->k1, loc->fam};
            bool moved = false;
            rc = sl_store_reserve(st, loc, *nowp, &keep, 1, &moved);
            if (rc == SLUICE_OK) {
                void *ne = sl_table_insert(st, loc, *nowp);
                memcpy(sl_entry_state(ne), next, l->state_size);
                sl_entry_touch(ne, nowp->mono_ns, r.remaining == 0, r.reset_after_ns);
            }
        }
    }
    sl_shard_unlock(loc->sh);
    if (rc != SLUICE_OK) return rc;
    to_public(&r, res);
    return SLUICE_OK;
}

/*
 * One item with a small state: the common case, kept free of the general path's arrays
 * (its stack frame, ~20 KiB with the sliding-log arena, costs page probes and cache
 * lines on every call). Same semantics as the general path for n == 1. Returns 1 when
 * the item is not for this path.
 */
SL_NO_SLP static int decide_one(sluice_store *st, const sluice_item *it, const sluice_time *nowp,
                      sluice_decision *out) {
    one_loc p;
    int rc = one_prep(st, it, &p);
    if (rc != SLUICE_OK) return rc;
    rc = one_run(st, it, nowp, &p, &out->results[0]);
    if (rc < 0) out->allowed = 0;
    else if (rc == SLUICE_OK) out->allowed = out->results[0].allowed;
    return rc;
}

/*
 * The general path: every item located and its shard locked, the decision run over the
 * stored states (sl_group_decide), then room reserved for the new keys that must be
 * stored (pressure handling may move entries: then they are found again) and the final
 * states written. A refusal for room (SLUICE_REFUSE_NEW) fails the whole call before
 * anything is written.
 */
static int decide_general(sluice_store *st, const sl_sitem *items, size_t n, unsigned flags,
                          sluice_time now, sl_sresult *out);

SL_NO_SLP int sluice_decide(sluice_store *st, const sluice_item *items, size_t n,
                            sluice_time now, sluice_decision *out) {
    if (st == NULL || out == NULL || (items == NULL && n > 0)) return SLUICE_EINVAL;
    if (n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    out->n = n;
    out->allowed = 1;
    out->deciding = n > 0 ? 0 : -1;
    if (n == 0) return SLUICE_OK;
    if (n == 1) {
        int rc = decide_one(st, items, &now, out);
        if (rc <= 0) return rc;
    }
    sl_sitem si[SLUICE_MAX_ITEMS];
    for (size_t i = 0; i < n; i++)
        si[i] = (sl_sitem){.lim = items[i].limiter, .key = items[i].key,
                           .key_len = items[i].key_len, .cost = items[i].cost};
    sl_sresult r;
    int rc = decide_general(st, si, n, 0, now, &r);
    if (rc != SLUICE_OK) {
        out->allowed = 0;
        return rc;
    }
    out->allowed = r.allowed;
    memcpy(out->results, r.r, n * sizeof(r.r[0]));
    out->deciding = sl_decision_deciding(out);
    return SLUICE_OK;
}

/* How many items of a batch are located (hashed, lines in flight) ahead of the one being
 * decided. Why 8: a DRAM miss (~100 ns) spans about two to three decisions' work, and
 * each item in flight holds two lines; 8 leaves slack for slower memory without
 * filling the core's miss buffers with lines that would wait anyway. */
#define BATCH_AHEAD 8

/* An item the one-item path does not take (a large state): the general path, kept out
 * of line so its frame (a whole sluice_decision) is not part of the batch loop's. */
__attribute__((noinline)) static int batch_general(sluice_store *st, const sluice_item *it,
                                                   sluice_time now, sluice_result *res) {
    sl_sitem si = {.lim = it->limiter, .key = it->key, .key_len = it->key_len, .cost = it->cost};
    sl_sresult r;
    int rc = decide_general(st, &si, 1, 0, now, &r);
    if (rc == SLUICE_OK) *res = r.r[0];
    return rc;
}

/*
 * The batch is a software pipeline over the one-item path: item i + BATCH_AHEAD is
 * located while item i is decided, so each decision finds its lines already cached
 * or on their way. Items are still decided one at a time, in order, each under its own
 * shard lock only (no lock is held across items, so the ordering and deadlock rules of
 * sluice_decide are untouched); a located item is re-checked under its lock.
 */
SL_NO_SLP int sluice_decide_batch(sluice_store *st, const sluice_item *items, size_t n,
                                  sluice_time now, sluice_result *out) {
    if (st == NULL || (n > 0 && (items == NULL || out == NULL)) || n > (size_t)INT32_MAX)
        return SLUICE_EINVAL;
    one_loc ring[BATCH_AHEAD];
    int prc[BATCH_AHEAD];
    size_t ahead = n < BATCH_AHEAD ? n : BATCH_AHEAD;
    for (size_t i = 0; i < ahead; i++) prc[i] = one_prep(st, &items[i], &ring[i]);
    for (size_t i = 0; i < n; i++) {
        size_t k = i % BATCH_AHEAD;
        int rc = prc[k];
        if (rc == SLUICE_OK) rc = one_run(st, &items[i], &now, &ring[k], &out[i]);
        if (rc == 1) rc = batch_general(st, &items[i], now, &out[i]);
        if (rc != SLUICE_OK) return (int)i;
        if (i + BATCH_AHEAD < n) prc[k] = one_prep(st, &items[i + BATCH_AHEAD], &ring[k]);
    }
    return (int)n;
}

static bool ctx_same(const void *ctx, size_t a, size_t b) {
    const item_ctx *c = ctx;
    return same_key(&c[a], &c[b]);
}

static int decide_general(sluice_store *st, const sl_sitem *items, size_t n, unsigned flags,
                          sluice_time now, sl_sresult *out) {
    if (n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    item_ctx c[SLUICE_MAX_ITEMS];
    for (size_t i = 0; i < n; i++) {
        int rc = prepare(st, items[i].lim, items[i].key, items[i].key_len, &c[i]);
        if (rc != SLUICE_OK) return rc;
        if (items[i].limit != 0 && items[i].lim->spec.algo != SLUICE_FIXED_WINDOW)
            return SLUICE_EINVAL; /* a limit override is a fixed window's */
    }
    uint64_t small[SLUICE_MAX_ITEMS + 1][SL_STORE_SMALL_STATE / 8];
    big_state big[3]; /* two full-size logs decided, one peeked at */
    sl_shard *locked[SLUICE_MAX_ITEMS];
    size_t m = locate_and_lock(c, n, locked);
    note_time(locked, m, now);

    const sl_limit *lims[SLUICE_MAX_ITEMS];
    sl_limit ovr[SLUICE_MAX_ITEMS]; /* copies with a limit override (Envoy's, fixed windows) */
    void *work[SLUICE_MAX_ITEMS];
    void *peek = small[SLUICE_MAX_ITEMS];
    uint32_t peek_size = 0;
    size_t big_used = 0;
    for (size_t i = 0; i < n; i++) {
        lims[i] = &c[i].ver->lim;
        if (items[i].limit != 0) {
            ovr[i] = c[i].ver->lim;
            ovr[i].limit = ovr[i].capacity = items[i].limit;
            lims[i] = &ovr[i];
        } else if (items[i].params != NULL) {
            if (items[i].params->state_size != c[i].ver->lim.state_size ||
                items[i].params->algo != c[i].ver->lim.algo) {
                unlock_shards(locked, m);
                return SLUICE_EINVAL; /* an override changes numbers, never the state */
            }
            lims[i] = items[i].params;
        }
        uint32_t ss = lims[i]->state_size;
        if (ss > peek_size) peek_size = ss;
        if (ss <= SL_STORE_SMALL_STATE) {
            work[i] = small[i];
        } else if (big_used + ss <= sizeof(big) - sizeof(big[0])) {
            work[i] = (unsigned char *)big + big_used;
            big_used += (ss + 7) & ~(size_t)7;
        } else {
            unlock_shards(locked, m);
            return SLUICE_ERANGE;
        }
    }
    /* overrides: the claims first (a change since the engine read them: nothing done),
     * then the carries they authorise, written at once whatever the decision says (the
     * state is now in the new regime, as after a reload) */
    const struct sl_ovr_guard *taken[SLUICE_MAX_ITEMS];
    size_t ntaken = 0;
    for (size_t i = 0; i < n; i++) {
        const struct sl_ovr_guard *gd = items[i].guard;
        if (gd == NULL) continue;
        bool seen = false;
        for (size_t k = 0; k < ntaken; k++) seen |= taken[k] == gd;
        if (seen) continue;
        if (sl_ovr_guard_take(gd) != SLUICE_OK) {
            unlock_shards(locked, m);
            return SL_OVR_EAGAIN;
        }
        taken[ntaken++] = gd;
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].carry == NULL) continue;
        void *e = sl_table_find(&c[i].loc);
        if (e == NULL) continue;
        big_state cs;
        sl_algo_carry(items[i].carry, sl_entry_state(e), lims[i], cs.b, now);
        memcpy(sl_entry_state(e), cs.b, lims[i]->state_size);
    }
    if (peek_size > SL_STORE_SMALL_STATE) {
        /* a large state's peek: the arena's third log */
        if (big_used + peek_size <= sizeof(big)) {
            peek = (unsigned char *)big + big_used;
        } else {
            unlock_shards(locked, m);
            return SLUICE_ERANGE;
        }
    }

    uint8_t kidx[SLUICE_MAX_ITEMS];
    size_t nk = sl_group_keys(n, ctx_same, c, kidx);
    const void *stored[SLUICE_MAX_ITEMS];
    size_t first[SLUICE_MAX_ITEMS]; /* per key: its first item */
    for (size_t k = 0; k < nk; k++) first[k] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        unsigned k = kidx[i];
        if (first[k] != SIZE_MAX) {
            c[i].entry = c[first[k]].entry;
            continue;
        }
        first[k] = i;
        c[i].entry = sl_table_find(&c[i].loc);
        stored[k] = c[i].entry != NULL ? sl_entry_state(c[i].entry) : NULL;
    }
    sl_group_run g = {.items = items, .lims = lims, .n = n, .flags = flags, .kidx = kidx,
                      .nkeys = nk, .stored = stored, .work = work, .peek = peek, .now = now,
                      .res = out};
    sl_group_decide(&g);

    /* eviction hints, once per key (its first item's answer) */
    for (size_t k = 0; k < nk; k++) {
        const sluice_result *ri = &out->r[first[k]];
        if (c[first[k]].entry != NULL)
            sl_entry_touch(c[first[k]].entry, now.mono_ns, ri->remaining == 0, ri->reset_after_ns);
    }
    bool any_new = false, any = false;
    for (size_t k = 0; k < nk; k++) {
        if (g.final[k] == stored[k]) continue;
        any = true;
        if (stored[k] == NULL) any_new = true;
    }
    if (!any) {
        unlock_shards(locked, m);
        return SLUICE_OK;
    }

    /* room for new keys */
    if (any_new) {
        sl_keep keep[SLUICE_MAX_ITEMS];
        for (size_t i = 0; i < n; i++) keep[i] = (sl_keep){c[i].loc.k0, c[i].loc.k1, c[i].loc.fam};
        bool moved = false;
        for (size_t k = 0; k < nk; k++) {
            if (stored[k] != NULL || g.final[k] == NULL) continue;
            int rc = sl_store_reserve(st, &c[first[k]].loc, now, keep, n, &moved);
            if (rc != SLUICE_OK) {
                for (size_t j = 0; j < k; j++)
                    if (stored[j] == NULL && g.final[j] != NULL)
                        sl_store_unreserve(st, &c[first[j]].loc);
                unlock_shards(locked, m);
                out->allowed = 0;
                return rc;
            }
        }
        if (moved)
            for (size_t k = 0; k < nk; k++)
                if (stored[k] != NULL) c[first[k]].entry = sl_table_find(&c[first[k]].loc);
    }

    /* commit (updates first: inserts may reuse fresh slots, never move entries) */
    for (size_t k = 0; k < nk; k++) {
        size_t i = first[k];
        if (stored[k] == NULL || g.final[k] == stored[k]) continue;
        memcpy(sl_entry_state(c[i].entry), g.final[k], lims[i]->state_size);
    }
    for (size_t k = 0; k < nk; k++) {
        size_t i = first[k];
        if (stored[k] != NULL || g.final[k] == NULL) continue;
        void *e = sl_table_insert(st, &c[i].loc, now);
        memcpy(sl_entry_state(e), g.final[k], lims[i]->state_size);
        const sluice_result *ri = &out->r[i];
        sl_entry_touch(e, now.mono_ns, ri->remaining == 0, ri->reset_after_ns);
    }
    unlock_shards(locked, m);
    return SLUICE_OK;
}

int sl_mem_decide(sluice_store *st, const sl_sitem *items, size_t n, unsigned flags,
                  sluice_time now, sl_sresult *out) {
    if (st == NULL || out == NULL || (items == NULL && n > 0)) return SLUICE_EINVAL;
    if (n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    out->n = n;
    out->allowed = 1;
    out->groups_ok = 0;
    out->local = false; /* (the Redis store's fallback sets it: store/redis/local.c) */
    if (n == 0) return SLUICE_OK;
    out->x[0].kind = 0;
    if (n == 1 && flags == 0 && items[0].group == 0 && items[0].limit == 0 && items[0].cls == 0 &&
        items[0].cap == 0 && items[0].bpath == 0 && items[0].guard == NULL &&
        items[0].params == NULL) {
        /* the common case: the one-item path (same semantics, no scratch arrays) */
        sluice_item it = {items[0].lim, items[0].key, items[0].key_len, items[0].cost};
        one_loc p;
        int rc = one_prep(st, &it, &p);
        if (rc != SLUICE_OK) return rc;
        rc = one_run(st, &it, &now, &p, &out->r[0]);
        if (rc < 0) return rc;
        if (rc == SLUICE_OK) {
            out->allowed = out->r[0].allowed;
            if (!out->allowed && (items[0].flags & SL_SI_CHARGE) == 0) return SLUICE_OK;
            if (out->allowed) return SLUICE_OK;
        }
    }
    return decide_general(st, items, n, flags, now, out);
}

/* One key under one limiter, its shard locked: the common part of settle/release/reset. */
typedef struct one_ctx {
    item_ctx c;
    sl_shard *locked[1];
    size_t m;
} one_ctx;

static int one_begin(sluice_store *st, const sluice_limiter *lim, const void *key,
                     size_t key_len, sluice_time *now, one_ctx *o) {
    if (st == NULL) return SLUICE_EINVAL;
    int rc = prepare(st, lim, key, key_len, &o->c);
    if (rc != SLUICE_OK) return rc;
    o->m = locate_and_lock(&o->c, 1, o->locked);
    if (now != NULL) note_time(o->locked, o->m, *now);
    o->c.entry = sl_table_find(&o->c.loc);
    return SLUICE_OK;
}

int sluice_settle(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                  uint64_t reserved, uint64_t actual, sluice_time now, sluice_result *out) {
    if (out == NULL) return SLUICE_EINVAL;
    if (reserved > (uint64_t)INT64_MAX || actual > (uint64_t)INT64_MAX) return SLUICE_ERANGE;
    int64_t delta = (int64_t)actual - (int64_t)reserved;
    one_ctx o;
    int rc = one_begin(st, lim, key, key_len, &now, &o);
    if (rc != SLUICE_OK) return rc;
    big_state next;
    sl_result r;
    const sl_limit *l = &o.c.ver->lim;
    sl_ehdr *e = o.c.entry;
    sl_algo_settle(l, e != NULL ? sl_entry_state(e) : NULL, next.b, now, delta, &r);
    if (e != NULL) {
        memcpy(sl_entry_state(e), next.b, l->state_size);
        sl_entry_touch(e, now.mono_ns, r.remaining == 0, r.reset_after_ns);
    } else if (delta > 0) {
        /* a charge on a key with no state (expired, or never decided): store it */
        sl_keep keep = {o.c.loc.k0, o.c.loc.k1, o.c.loc.fam};
        bool moved = false;
        rc = sl_store_reserve(st, &o.c.loc, now, &keep, 1, &moved);
        if (rc == SLUICE_OK) {
            void *ne = sl_table_insert(st, &o.c.loc, now);
            memcpy(sl_entry_state(ne), next.b, l->state_size);
            sl_entry_touch(ne, now.mono_ns, r.remaining == 0, r.reset_after_ns);
        }
    }
    unlock_shards(o.locked, o.m);
    if (rc == SLUICE_OK) to_public(&r, out);
    return rc;
}

/* Releases a lease, with a sample for an adaptive limit's controller when has_sample;
 * x (may be NULL) receives the adaptive view after. */
int sl_mem_release(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                   uint64_t lease, bool has_sample, int64_t latency_ns, unsigned outcome,
                   sluice_time now, sl_cap_info *x) {
    if (x != NULL) x->kind = 0;
    one_ctx o;
    int rc = one_begin(st, lim, key, key_len, &now, &o);
    if (rc != SLUICE_OK) return rc;
    sl_ehdr *e = o.c.entry;
    const sl_limit *l = &o.c.ver->lim;
    rc = SLUICE_ENOTFOUND;
    if (e != NULL && (l->algo == SLUICE_CONCURRENCY || l->algo == SLUICE_ADAPTIVE_CONCURRENCY)) {
        big_state next;
        if (sl_cap_release(l, sl_entry_state(e), next.b, now, lease, has_sample, latency_ns, outcome, x)) {
            memcpy(sl_entry_state(e), next.b, l->state_size);
            sl_entry_touch(e, now.mono_ns, false,
                           sl_algo_fresh_at(l, sl_entry_state(e), now) - now.mono_ns);
            rc = SLUICE_OK;
        }
    }
    unlock_shards(o.locked, o.m);
    return rc;
}

int sluice_release(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                   uint64_t lease, sluice_time now) {
    return sl_mem_release(st, lim, key, key_len, lease, false, -1, 0, now, NULL);
}

int sluice_release_sample(sluice_store *st, const sluice_limiter *lim, const void *key,
                          size_t key_len, uint64_t lease, int64_t latency_ns,
                          sluice_outcome outcome, sluice_time now) {
    if ((unsigned)outcome > SLUICE_OUTCOME_DROPPED) return SLUICE_EINVAL;
    return sl_mem_release(st, lim, key, key_len, lease, true, latency_ns, (unsigned)outcome, now, NULL);
}

int sluice_adaptive_get(sluice_store *st, const sluice_limiter *lim, const void *key,
                        size_t key_len, sluice_time now, sluice_adaptive_state *out) {
    if (out == NULL || lim == NULL || lim->lim.algo != SLUICE_ADAPTIVE_CONCURRENCY) return SLUICE_EINVAL;
    one_ctx o;
    int rc = one_begin(st, lim, key, key_len, NULL, &o);
    if (rc != SLUICE_OK) return rc;
    const sl_limit *l = &o.c.ver->lim;
    sl_aconc_state s;
    sl_result r;
    if (l->algo != SLUICE_ADAPTIVE_CONCURRENCY) {
        unlock_shards(o.locked, o.m);
        return SLUICE_EINVAL;
    }
    sl_algo_decide(l, o.c.entry != NULL ? sl_entry_state(o.c.entry) : NULL, &s, now, 0, &r);
    unlock_shards(o.locked, o.m);
    sl_adapt_view v;
    sl_adapt_view_of(&l->cap.adapt, &s.ad, &v);
    out->limit = v.limit;
    uint64_t f = sl__conc_in_flight(&s.conc);
    out->in_flight = f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
    out->noload_ns = v.noload_ns;
    out->last_avg_ns = v.last_avg_ns;
    out->probing = v.probing ? 1 : 0;
    return SLUICE_OK;
}

/* Forgetting a key that holds no state succeeds too: the outcome is the same. */
int sluice_reset(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len) {
    one_ctx o;
    int rc = one_begin(st, lim, key, key_len, NULL, &o);
    if (rc != SLUICE_OK) return rc;
    if (o.c.entry != NULL) sl_table_remove(st, &o.c.loc, o.c.entry);
    unlock_shards(o.locked, o.m);
    return SLUICE_OK;
}
