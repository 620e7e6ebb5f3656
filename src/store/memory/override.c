/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override.c -- the override table (override.h): 256 shards, each an open-addressing array
 * of (hash, record, regime) slots under its own spinlock, grown by doubling at half load
 * on the admin path. The decision path takes one shard lock for one probe and copies what
 * it needs; nothing it reads outlives the lock, so records are freed by whoever unlinks them.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/memory/memory.h"
#include "store/memory/override.h"

#define OVR_SHARDS 256u
#define OVR_POLICIES 1024u /* distinct policy names with a counter (never removed) */

typedef struct oslot {
    uint64_t lo, hi;
    sl_ovr_rec *rec; /* NULL: empty */
    uint64_t applied;
} oslot;

typedef struct oshard {
    _Alignas(64) atomic_uint lock;
    uint32_t used;
    uint32_t cap; /* power of two, or 0 */
    oslot *s;
    /* a filter in front of the slots: two bits of one 64-bit word per slot's hash, set
     * when a slot is placed, remade when the slots grow (a removal leaves its bits: a
     * false positive costs the probe it saves otherwise). cap / 16 words, 4 bits a slot:
     * a key without an override (nearly every decision) reads one word, a few KiB that
     * stay cached, instead of the slot array (tens of MiB at a million overrides). */
    uint64_t *bits;
} oshard;

typedef struct opol {
    char name[256];
    atomic_int_fast64_t n;    /* slots (records and tombstones): decisions look up at > 0 */
    atomic_int_fast64_t live; /* live records (metrics) */
} opol;

struct sl_ovr_table {
    sl_hash_key seed;
    _Atomic uint64_t max;
    atomic_uint_fast64_t live;  /* live records (what overrides.max bounds) */
    atomic_uint_fast64_t ver;
    oshard sh[OVR_SHARDS];
    atomic_uint plock;         /* adding a policy name (readers search without it) */
    _Atomic(opol *) pol[OVR_POLICIES];
    atomic_uint npol;          /* published after pol[npol - 1] (release) */
    bool stateless;            /* no counter regimes kept (the Redis store: docs) */
    atomic_int starving;       /* decisions retried under a change storm (writers wait) */
    opol none; /* the counter of policies beyond OVR_POLICIES: never 0 once used */
};

static void pol_add(sl_ovr_table *t, const char *policy, int slots, int live);

static void slock(atomic_uint *l) {
    while (atomic_exchange_explicit(l, 1, memory_order_acquire))
        while (atomic_load_explicit(l, memory_order_relaxed)) __builtin_ia32_pause();
}
static void sunlock(atomic_uint *l) { atomic_store_explicit(l, 0, memory_order_release); }

void sl_ovr_starving(sl_ovr_table *t, int d) {
    if (t != NULL) atomic_fetch_add_explicit(&t->starving, d, memory_order_acq_rel);
}

/* A change waits while a starving decision is retried: 20 us steps, 2 ms at most. */
static void writer_wait(sl_ovr_table *t) {
    struct timespec ts = {0, 20000};
    for (int i = 0; i < 100 && atomic_load_explicit(&t->starving, memory_order_acquire) > 0; i++)
        nanosleep(&ts, NULL);
}

/* ---- records ---------------------------------------------------------------------- */

static size_t slen(const char *s) { return s != NULL ? strlen(s) + 1 : 0; }

static char *scopy(char **at, const char *s, size_t n) {
    if (s == NULL) return NULL;
    char *d = *at;
    memcpy(d, s, n);
    d[n] = '\0';
    *at += n + 1;
    return d;
}

/* The bytes of a record that it uses (see sl_ovr_rec). */
static size_t rec_size(const sl_ovr_rec *r) {
    size_t n = r->nfrom ? offsetof(sl_ovr_rec, from) + r->nfrom * sizeof(sl_ovr_num)
                        : offsetof(sl_ovr_rec, win) + r->nwin * sizeof(sl_ovr_num);
    return (n + 7) & ~(size_t)7;
}

sl_ovr_rec *sl_ovr_rec_new(const sl_ovr_rec *tmpl, const char *policy, const char *key,
                           size_t key_len, const char *plan, const char *reason,
                           const char *label, const char *set_by, const char *body) {
    size_t head = rec_size(tmpl);
    size_t n = head + slen(policy) + (key != NULL ? key_len + 1 : 0) + slen(plan) +
               slen(reason) + slen(label) + slen(set_by) + slen(body);
    sl_ovr_rec *r = malloc(n);
    if (r == NULL) return NULL;
    memcpy(r, tmpl, head);
    char *at = (char *)r + head;
    r->policy = scopy(&at, policy, policy ? strlen(policy) : 0);
    r->key = scopy(&at, key, key_len);
    r->key_len = key != NULL ? key_len : 0;
    r->plan = scopy(&at, plan, plan ? strlen(plan) : 0);
    r->reason = scopy(&at, reason, reason ? strlen(reason) : 0);
    r->label = scopy(&at, label, label ? strlen(label) : 0);
    r->set_by = scopy(&at, set_by, set_by ? strlen(set_by) : 0);
    r->body = scopy(&at, body, body ? strlen(body) : 0);
    return r;
}

sl_ovr_rec *sl_ovr_rec_dup(const sl_ovr_rec *r) {
    if (r == NULL) return NULL;
    return sl_ovr_rec_new(r, r->policy, r->key, r->key_len, r->plan, r->reason, r->label,
                          r->set_by, r->body);
}

void sl_ovr_rec_free(sl_ovr_rec *r) { free(r); }

/* ---- the table -------------------------------------------------------------------- */

sl_ovr_table *sl_ovr_table_create(const sl_hash_key *seed) {
    sl_ovr_table *t = aligned_alloc(64, (sizeof(*t) + 63) & ~(size_t)63);
    if (t == NULL) return NULL;
    memset(t, 0, sizeof(*t));
    t->seed = *seed;
    atomic_init(&t->max, SL_OVR_DEFAULT_MAX);
    atomic_init(&t->live, 0);
    atomic_init(&t->ver, 0);
    atomic_init(&t->plock, 0);
    atomic_init(&t->starving, 0);
    atomic_init(&t->none.n, 0);
    for (unsigned i = 0; i < OVR_SHARDS; i++) atomic_init(&t->sh[i].lock, 0);
    return t;
}

void sl_ovr_table_destroy(sl_ovr_table *t) {
    if (t == NULL) return;
    for (unsigned i = 0; i < OVR_SHARDS; i++) {
        oshard *s = &t->sh[i];
        for (uint32_t j = 0; j < s->cap; j++) free(s->s[j].rec);
        free(s->s);
        free(s->bits);
    }
    for (unsigned i = 0; i < atomic_load(&t->npol); i++) free(atomic_load(&t->pol[i]));
    free(t);
}

sl_ovr_table *sl_store_overrides(sluice_store *st) { return st != NULL ? st->ovr : NULL; }

void sl_ovr_set_max(sl_ovr_table *t, uint64_t max) {
    atomic_store(&t->max, max ? max : SL_OVR_DEFAULT_MAX);
}
uint64_t sl_ovr_max(const sl_ovr_table *t) { return atomic_load(&((sl_ovr_table *)t)->max); }
uint64_t sl_ovr_count(const sl_ovr_table *t) { return atomic_load(&((sl_ovr_table *)t)->live); }
uint64_t sl_ovr_slots(const sl_ovr_table *t) {
    uint64_t n = 0;
    for (unsigned i = 0; i < OVR_SHARDS; i++) n += ((sl_ovr_table *)t)->sh[i].used;
    return n;
}

void sl_ovr_clear(sl_ovr_table *t) {
    for (unsigned i = 0; i < OVR_SHARDS; i++) {
        oshard *s = &t->sh[i];
        slock(&s->lock);
        for (uint32_t j = 0; j < s->cap; j++) {
            sl_ovr_rec *r = s->s[j].rec;
            if (r == NULL) continue;
            if (r->kind != SL_OVR_NONE) atomic_fetch_sub(&t->live, 1);
            pol_add(t, r->policy, -1, r->kind != SL_OVR_NONE ? -1 : 0);
            free(r);
            s->s[j].rec = NULL;
        }
        if (s->cap) memset(s->bits, 0, s->cap / 16 * sizeof(*s->bits));
        s->used = 0;
        sunlock(&s->lock);
    }
}

void sl_ovr_reseed(sl_ovr_table *t, const sl_hash_key *seed) { t->seed = *seed; }

/* ---- hashing ---------------------------------------------------------------------- */

static void hput(sl_ovr_hasher *hs, const void *p, size_t n) {
    if (hs->overflow || hs->len + n > sizeof(hs->buf)) {
        hs->overflow = true;
        return;
    }
    memcpy(hs->buf + hs->len, p, n);
    hs->len += n;
}

static void hput_len(sl_ovr_hasher *hs, size_t n) {
    unsigned char b[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    hput(hs, b, 4);
}

void sl_ovr_hash_begin(sl_ovr_hasher *hs, const char *policy, size_t policy_len) {
    hs->len = 0;
    hs->overflow = false;
    hput_len(hs, policy_len);
    hput(hs, policy, policy_len);
}

void sl_ovr_hash_part(sl_ovr_hasher *hs, const void *p, size_t n) {
    hput_len(hs, n);
    hput(hs, p, n);
}

sl_hash128 sl_ovr_hash_end(const sl_ovr_table *t, const sl_ovr_hasher *hs) {
    return sl_hash128_of(&t->seed, hs->buf, hs->len);
}

sl_hash128 sl_ovr_hash_parts(const sl_ovr_table *t, const char *policy, const void *const *parts,
                             const size_t *lens, size_t nparts) {
    size_t pl = strlen(policy), n = 4 + pl;
    for (size_t i = 0; i < nparts; i++) n += 4 + lens[i];
    unsigned char *b = malloc(n ? n : 1);
    if (b == NULL) return (sl_hash128){0, 0};
    size_t at = 0;
    for (size_t i = 0; i <= nparts; i++) {
        size_t l = i == 0 ? pl : lens[i - 1];
        const void *p = i == 0 ? (const void *)policy : parts[i - 1];
        b[at++] = (unsigned char)(l >> 24);
        b[at++] = (unsigned char)(l >> 16);
        b[at++] = (unsigned char)(l >> 8);
        b[at++] = (unsigned char)l;
        if (l) memcpy(b + at, p, l);
        at += l;
    }
    sl_hash128 h = sl_hash128_of(&t->seed, b, at);
    free(b);
    return h;
}

/* Lock-free for a name already known (what every decision-path caller asks: a record's
 * policy was registered when the record was stored); the lock only serialises adding. */
static atomic_int_fast64_t *pol_find(sl_ovr_table *t, const char *policy, unsigned from,
                                     unsigned *n) {
    *n = atomic_load_explicit(&t->npol, memory_order_acquire);
    for (unsigned i = from; i < *n; i++) {
        opol *p = atomic_load_explicit(&t->pol[i], memory_order_relaxed);
        if (strcmp(p->name, policy) == 0) return &p->n;
    }
    return NULL;
}

atomic_int_fast64_t *sl_ovr_policy_count(sl_ovr_table *t, const char *policy) {
    unsigned n;
    atomic_int_fast64_t *c = pol_find(t, policy, 0, &n);
    if (c != NULL) return c;
    slock(&t->plock);
    c = pol_find(t, policy, n, &n);
    if (c == NULL && n < OVR_POLICIES && strlen(policy) < 256) {
        opol *p = calloc(1, sizeof(*p));
        if (p != NULL) {
            memcpy(p->name, policy, strlen(policy));
            atomic_init(&p->n, 0);
            atomic_init(&p->live, 0);
            atomic_store_explicit(&t->pol[n], p, memory_order_relaxed);
            atomic_store_explicit(&t->npol, n + 1, memory_order_release);
            c = &p->n;
        }
    }
    sunlock(&t->plock);
    if (c == NULL) { /* beyond the bound: one shared counter, never back to 0 */
        atomic_store(&t->none.n, 1);
        c = &t->none.n;
    }
    return c;
}

void sl_ovr_policy_each(sl_ovr_table *t, void (*fn)(void *ud, const char *policy, int64_t n),
                        void *ud) {
    unsigned n = atomic_load_explicit(&t->npol, memory_order_acquire);
    for (unsigned i = 0; i < n; i++) {
        opol *p = atomic_load_explicit(&t->pol[i], memory_order_relaxed);
        fn(ud, p->name, atomic_load(&p->live));
    }
}

void sl_ovr_set_stateless(sl_ovr_table *t, bool on) { t->stateless = on; }

static void pol_add(sl_ovr_table *t, const char *policy, int slots, int live) {
    if (policy == NULL) return;
    atomic_int_fast64_t *c = sl_ovr_policy_count(t, policy);
    if (c == &t->none.n) return;
    opol *p = (opol *)(void *)((char *)c - offsetof(opol, n));
    atomic_fetch_add(&p->n, slots);
    atomic_fetch_add(&p->live, live);
}

/* ---- slots ------------------------------------------------------------------------ */

static oshard *shard_of(sl_ovr_table *t, sl_hash128 h) { return &t->sh[h.lo & (OVR_SHARDS - 1)]; }

/* The filter word and bits of hash h in a shard of cap slots (bits the shard index and
 * the slot index do not use). */
static uint64_t *fword(uint64_t *bits, uint32_t cap, uint64_t hi) {
    return &bits[(uint32_t)(hi >> 32) & (cap / 16 - 1)];
}
static uint64_t fmask(uint64_t lo) { return 1ull << (lo >> 8 & 63) | 1ull << (lo >> 14 & 63); }

static oslot *find(oshard *s, sl_hash128 h) {
    if (s->cap == 0) return NULL;
    uint64_t fm = fmask(h.lo);
    if ((*fword(s->bits, s->cap, h.hi) & fm) != fm) return NULL;
    uint32_t m = s->cap - 1, i = (uint32_t)h.hi & m;
    for (;;) {
        oslot *o = &s->s[i];
        if (o->rec == NULL) return NULL;
        if (o->lo == h.lo && o->hi == h.hi) return o;
        i = (i + 1) & m;
    }
}

static void place(oslot *arr, uint64_t *bits, uint32_t cap, const oslot *src) {
    uint32_t m = cap - 1, i = (uint32_t)src->hi & m;
    while (arr[i].rec != NULL) i = (i + 1) & m;
    arr[i] = *src;
    *fword(bits, cap, src->hi) |= fmask(src->lo);
}

/* Room for one more slot (allocates: admin path only). */
static bool grow(oshard *s) {
    if ((uint64_t)(s->used + 1) * 2 <= s->cap) return true;
    uint32_t nc = s->cap ? s->cap * 2 : 16;
    if (nc == 0) return false;
    oslot *n = calloc(nc, sizeof(*n));
    uint64_t *nb = calloc(nc / 16, sizeof(*nb));
    if (n == NULL || nb == NULL) {
        free(n);
        free(nb);
        return false;
    }
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->s[i].rec != NULL) place(n, nb, nc, &s->s[i]);
    free(s->s);
    free(s->bits);
    s->s = n;
    s->bits = nb;
    s->cap = nc;
    return true;
}

/* Backward-shift deletion: the probe runs stay unbroken. */
static void unlink_slot(oshard *s, oslot *o) {
    uint32_t m = s->cap - 1, i = (uint32_t)(o - s->s), j = i;
    s->s[i].rec = NULL;
    for (;;) {
        j = (j + 1) & m;
        if (s->s[j].rec == NULL) break;
        uint32_t home = (uint32_t)s->s[j].hi & m;
        bool move = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (move) {
            s->s[i] = s->s[j];
            s->s[j].rec = NULL;
            i = j;
        }
    }
    s->used--;
}

/* The regime numbers of slot o's counters (from a record about to be replaced). */
static void regime_of(const oslot *o, sl_ovr_rec *into) {
    const sl_ovr_rec *old = o->rec;
    into->from_ver = o->applied;
    into->nfrom = 0;
    if (o->applied == 0) return;
    if (o->applied == old->ver && old->kind == SL_OVR_LIMITS) {
        into->nfrom = old->nwin;
        memcpy(into->from, old->win, old->nwin * sizeof(old->win[0]));
    } else if (o->applied == old->from_ver) {
        into->nfrom = old->nfrom;
        memcpy(into->from, old->from, old->nfrom * sizeof(old->from[0]));
    } else {
        into->from_ver = 0; /* not reached: applied is always one of the two */
    }
}

int sl_ovr_put(sl_ovr_table *t, sl_ovr_rec *rec, int64_t now_wall, bool *created,
               sl_ovr_rec **old) {
    *old = NULL;
    *created = true;
    writer_wait(t);
    oshard *s = shard_of(t, rec->h);
    slock(&s->lock);
    oslot *o = find(s, rec->h);
    bool was_live = o != NULL && sl_ovr_live(o->rec, now_wall);
    bool counted = o != NULL && o->rec->kind != SL_OVR_NONE; /* live or expired, not a tomb */
    if (!counted && atomic_load(&t->live) >= atomic_load(&t->max)) {
        sunlock(&s->lock);
        return SLUICE_EFULL;
    }
    if (o == NULL && !grow(s)) {
        sunlock(&s->lock);
        return SLUICE_ENOMEM;
    }
    rec->ver = atomic_fetch_add(&t->ver, 1) + 1;
    if (o == NULL) {
        oslot n = {rec->h.lo, rec->h.hi, rec, 0};
        rec->from_ver = 0;
        rec->nfrom = 0;
        place(s->s, s->bits, s->cap, &n);
        s->used++;
    } else {
        /* the counters' regime goes with the new record: it was allocated without room
         * for those numbers, so it is made again with them when there are some */
        sl_ovr_rec tmp;
        memcpy(&tmp, rec, rec_size(rec));
        regime_of(o, &tmp);
        if (tmp.nfrom > 0) {
            sl_ovr_rec *nr = sl_ovr_rec_new(&tmp, rec->policy, rec->key, rec->key_len, rec->plan,
                                            rec->reason, rec->label, rec->set_by, rec->body);
            if (nr == NULL) {
                sunlock(&s->lock);
                return SLUICE_ENOMEM; /* rec not taken */
            }
            free(rec);
            rec = nr;
        } else {
            rec->from_ver = tmp.from_ver;
            rec->nfrom = 0;
        }
        sl_ovr_rec *prev = o->rec;
        o->rec = rec;
        if (was_live) {
            *created = false;
            *old = prev;
        } else {
            free(prev);
        }
    }
    sunlock(&s->lock);
    if (!counted) {
        atomic_fetch_add(&t->live, 1);
        pol_add(t, rec->policy, o == NULL ? 1 : 0, 1);
    }
    return SLUICE_OK;
}

sl_ovr_rec *sl_ovr_get(sl_ovr_table *t, sl_hash128 h, int64_t now_wall) {
    oshard *s = shard_of(t, h);
    slock(&s->lock);
    oslot *o = find(s, h);
    sl_ovr_rec *r = o != NULL && sl_ovr_live(o->rec, now_wall) ? sl_ovr_rec_dup(o->rec) : NULL;
    sunlock(&s->lock);
    return r;
}

/* Turns slot o into a tombstone of its counters' regime, or drops it when they never moved
 * from the policy's numbers. Returns the record unlinked (the caller frees), or NULL when
 * out of memory (nothing changed). Shard locked. */
static sl_ovr_rec *bury(sl_ovr_table *t, oshard *s, oslot *o, int64_t now_wall) {
    sl_ovr_rec *prev = o->rec;
    bool o_gone = o->applied == 0 || t->stateless;
    if (o_gone) {
        unlink_slot(s, o);
    } else {
        sl_ovr_rec tm;
        memset(&tm, 0, sizeof(tm));
        tm.h = prev->h;
        tm.kind = SL_OVR_NONE;
        tm.dead_at_ns = now_wall;
        tm.ver = atomic_fetch_add(&t->ver, 1) + 1;
        regime_of(o, &tm);
        sl_ovr_rec *tomb = sl_ovr_rec_new(&tm, prev->policy, NULL, 0, NULL, NULL, NULL, NULL, NULL);
        if (tomb == NULL) return NULL;
        o->rec = tomb;
    }
    if (prev->kind != SL_OVR_NONE) atomic_fetch_sub(&t->live, 1);
    pol_add(t, prev->policy, o_gone ? -1 : 0, prev->kind != SL_OVR_NONE ? -1 : 0);
    return prev;
}

int sl_ovr_del(sl_ovr_table *t, sl_hash128 h, int64_t now_wall, sl_ovr_rec **old) {
    *old = NULL;
    writer_wait(t);
    oshard *s = shard_of(t, h);
    slock(&s->lock);
    oslot *o = find(s, h);
    if (o == NULL || !sl_ovr_live(o->rec, now_wall)) {
        sunlock(&s->lock);
        return SLUICE_ENOTFOUND;
    }
    sl_ovr_rec *prev = bury(t, s, o, now_wall);
    sunlock(&s->lock);
    if (prev == NULL) return SLUICE_ENOMEM;
    *old = prev;
    return SLUICE_OK;
}

static void copy_label(char *dst, const char *src) {
    size_t n = src != NULL ? strlen(src) : 0;
    if (n > 63) n = 63;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

bool sl_ovr_lookup(sl_ovr_table *t, sl_hash128 h, int64_t now_wall, sl_ovr_view *out) {
    oshard *s = shard_of(t, h);
    slock(&s->lock);
    oslot *o = find(s, h);
    if (o == NULL) {
        sunlock(&s->lock);
        out->found = false;
        return false;
    }
    const sl_ovr_rec *r = o->rec;
    out->found = true;
    out->live = sl_ovr_live(r, now_wall);
    out->kind = r->kind;
    out->ver = r->ver;
    /* stateless: the counters are always read under the numbers in force (no carry) */
    out->applied = t->stateless ? (out->live ? r->ver : 0) : o->applied;
    out->nwin = r->nwin;
    out->from_ver = r->from_ver;
    out->nfrom = r->nfrom;
    if (r->kind == SL_OVR_LIMITS) memcpy(out->win, r->win, sizeof(r->win[0]) * r->nwin);
    if (r->nfrom) memcpy(out->from, r->from, sizeof(r->from[0]) * r->nfrom);
    copy_label(out->plan, r->plan);
    copy_label(out->label, r->label);
    sunlock(&s->lock);
    return true;
}

int sl_ovr_guard_take(const sl_ovr_guard *g) {
    oshard *s = shard_of(g->t, g->h);
    slock(&s->lock);
    oslot *o = find(s, g->h);
    if (o == NULL || o->rec->ver != g->ver || o->applied != g->applied) {
        sunlock(&s->lock);
        return SL_OVR_EAGAIN;
    }
    o->applied = g->next;
    sl_ovr_rec *drop = NULL;
    if (g->next == 0 && o->rec->kind == SL_OVR_NONE) {
        drop = o->rec;
        unlink_slot(s, o);
    }
    sunlock(&s->lock);
    if (drop != NULL) pol_add(g->t, drop->policy, -1, 0);
    free(drop);
    return SLUICE_OK;
}

size_t sl_ovr_sweep(sl_ovr_table *t, int64_t now_wall) {
    size_t changed = 0;
    writer_wait(t);
    for (unsigned i = 0; i < OVR_SHARDS; i++) {
        oshard *s = &t->sh[i];
        slock(&s->lock);
        for (uint32_t j = 0; j < s->cap;) {
            oslot *o = &s->s[j];
            sl_ovr_rec *r = o->rec;
            if (r == NULL) {
                j++;
                continue;
            }
            sl_ovr_rec *gone = NULL;
            if (r->kind != SL_OVR_NONE && r->expires_ns != 0 && r->expires_ns <= now_wall) {
                gone = bury(t, s, o, r->expires_ns);
            } else if (r->kind == SL_OVR_NONE && now_wall - r->dead_at_ns > SL_OVR_TOMB_NS) {
                gone = r;
                unlink_slot(s, o);
                pol_add(t, r->policy, -1, 0);
            }
            if (gone != NULL) {
                free(gone);
                changed++;
                continue; /* slot j may hold a shifted entry now */
            }
            j++;
        }
        sunlock(&s->lock);
    }
    return changed;
}

static int hcmp(uint64_t ahi, uint64_t alo, uint64_t bhi, uint64_t blo) {
    if (ahi != bhi) return ahi < bhi ? -1 : 1;
    if (alo != blo) return alo < blo ? -1 : 1;
    return 0;
}

static int rec_cmp(const void *a, const void *b) {
    const sl_ovr_rec *x = *(sl_ovr_rec *const *)a, *y = *(sl_ovr_rec *const *)b;
    return hcmp(x->h.hi, x->h.lo, y->h.hi, y->h.lo);
}

size_t sl_ovr_page(sl_ovr_table *t, bool has_cursor, sl_hash128 cursor, size_t limit,
                   const char *policy, int64_t now_wall, sl_ovr_rec ***out, bool *more) {
    *out = NULL;
    *more = false;
    if (limit == 0) limit = 1;
    /* the `limit + 1` smallest hashes above the cursor: a bounded max-heap would do; a
     * sorted array with insertion is enough for pages of at most 1000 */
    size_t cap = limit + 1, n = 0;
    sl_ovr_rec **best = calloc(cap, sizeof(*best));
    if (best == NULL) return 0;
    for (unsigned i = 0; i < OVR_SHARDS; i++) {
        oshard *s = &t->sh[i];
        slock(&s->lock);
        for (uint32_t j = 0; j < s->cap; j++) {
            const sl_ovr_rec *r = s->s[j].rec;
            if (r == NULL || !sl_ovr_live(r, now_wall)) continue;
            if (policy != NULL && strcmp(r->policy, policy) != 0) continue;
            if (has_cursor && hcmp(r->h.hi, r->h.lo, cursor.hi, cursor.lo) <= 0) continue;
            if (n == cap && hcmp(r->h.hi, r->h.lo, best[n - 1]->h.hi, best[n - 1]->h.lo) >= 0)
                continue;
            sl_ovr_rec *c = sl_ovr_rec_dup(r);
            if (c == NULL) continue;
            size_t k = n < cap ? n++ : n - 1;
            if (k == n - 1 && n == cap && best[k] != NULL) free(best[k]);
            while (k > 0 && rec_cmp(&best[k - 1], &c) > 0) {
                best[k] = best[k - 1];
                k--;
            }
            best[k] = c;
        }
        sunlock(&s->lock);
    }
    if (n > limit) {
        free(best[limit]);
        n = limit;
        *more = true;
    }
    *out = best;
    return n;
}

void sl_ovr_each(sl_ovr_table *t, int64_t now_wall, void (*fn)(void *ud, const sl_ovr_rec *r),
                 void *ud) {
    for (unsigned i = 0; i < OVR_SHARDS; i++) {
        oshard *s = &t->sh[i];
        for (uint32_t j = 0;; j++) {
            slock(&s->lock);
            if (j >= s->cap) {
                sunlock(&s->lock);
                break;
            }
            const sl_ovr_rec *r = s->s[j].rec;
            sl_ovr_rec *c = r != NULL && sl_ovr_live(r, now_wall) ? sl_ovr_rec_dup(r) : NULL;
            sunlock(&s->lock);
            if (c != NULL) fn(ud, c);
            free(c);
        }
    }
}

bool sl_ovr_scan(sl_ovr_table *t, unsigned *shard, uint32_t *slot, size_t max, int64_t now_wall,
                 void (*fn)(void *ud, const sl_ovr_rec *r), void *ud) {
    size_t done = 0;
    while (*shard < OVR_SHARDS && done < max) {
        oshard *s = &t->sh[*shard];
        sl_ovr_rec *batch[64];
        size_t nb = 0;
        slock(&s->lock);
        while (*slot < s->cap && nb < 64 && done + nb < max) {
            const sl_ovr_rec *r = s->s[*slot].rec;
            (*slot)++;
            if (r != NULL && sl_ovr_live(r, now_wall)) {
                sl_ovr_rec *c = sl_ovr_rec_dup(r);
                if (c != NULL) batch[nb++] = c;
            }
        }
        bool end = *slot >= s->cap;
        sunlock(&s->lock);
        for (size_t i = 0; i < nb; i++) {
            fn(ud, batch[i]);
            free(batch[i]);
        }
        done += nb;
        if (end) {
            (*shard)++;
            *slot = 0;
        }
    }
    return *shard < OVR_SHARDS;
}

/* ---- snapshot section ---------------------------------------------------------------
 * u32 "OVR1" u64 slots, then per slot: u64 lo u64 hi u64 ver u64 applied u64 from_ver
 * u8 kind u8 nwin u8 nfrom u8 0 i64 expires i64 set_at i64 dead_at, (nwin + nfrom) numbers
 * (u8 target u32 algo u32 state_size u32 quota_period u64 limit u64 capacity i64 period
 * i64 max_delay i64 lease i64 emission), then u32 key_len (0xffffffff: none) and key,
 * u32-length strings policy plan reason label set_by body (0xffffffff: NULL). */

void sl_ovr_wput(sl_ovr_wbuf *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n) cap *= 2;
        unsigned char *p = realloc(w->p, cap);
        if (p == NULL) {
            w->oom = true;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

void sl_ovr_wu(sl_ovr_wbuf *w, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    sl_ovr_wput(w, b, (size_t)bytes);
}

static void wstr(sl_ovr_wbuf *w, const char *s, size_t n) {
    if (s == NULL) {
        sl_ovr_wu(w, 0xffffffffu, 4);
        return;
    }
    sl_ovr_wu(w, n, 4);
    sl_ovr_wput(w, s, n);
}

static void wnum(sl_ovr_wbuf *w, const sl_ovr_num *n) {
    sl_ovr_wu(w, n->target, 1);
    sl_ovr_wu(w, n->algo, 4);
    sl_ovr_wu(w, n->state_size, 4);
    sl_ovr_wu(w, n->quota_period, 4);
    sl_ovr_wu(w, n->limit, 8);
    sl_ovr_wu(w, n->capacity, 8);
    sl_ovr_wu(w, (uint64_t)n->period_ns, 8);
    sl_ovr_wu(w, (uint64_t)n->max_delay_ns, 8);
    sl_ovr_wu(w, (uint64_t)n->lease_ns, 8);
    sl_ovr_wu(w, (uint64_t)n->emission_ns, 8);
}

static void enc_rec(sl_ovr_wbuf *w, const sl_ovr_rec *r, uint64_t applied) {
    sl_ovr_wu(w, r->h.lo, 8);
    sl_ovr_wu(w, r->h.hi, 8);
    sl_ovr_wu(w, r->ver, 8);
    sl_ovr_wu(w, applied, 8);
    sl_ovr_wu(w, r->from_ver, 8);
    sl_ovr_wu(w, r->kind, 1);
    sl_ovr_wu(w, r->nwin, 1);
    sl_ovr_wu(w, r->nfrom, 1);
    sl_ovr_wu(w, 0, 1);
    sl_ovr_wu(w, (uint64_t)r->expires_ns, 8);
    sl_ovr_wu(w, (uint64_t)r->set_at_ns, 8);
    sl_ovr_wu(w, (uint64_t)r->dead_at_ns, 8);
    for (unsigned i = 0; i < r->nwin; i++) wnum(w, &r->win[i]);
    for (unsigned i = 0; i < r->nfrom; i++) wnum(w, &r->from[i]);
    wstr(w, r->key, r->key_len);
    const char *s[6] = {r->policy, r->plan, r->reason, r->label, r->set_by, r->body};
    for (int i = 0; i < 6; i++) wstr(w, s[i], s[i] ? strlen(s[i]) : 0);
}

void sl_ovr_encode(sl_ovr_table *t, sl_ovr_wbuf *w) {
    sl_ovr_wput(w, "OVR1", 4);
    size_t count_at = w->len;
    sl_ovr_wu(w, 0, 8);
    uint64_t n = 0;
    for (unsigned i = 0; i < OVR_SHARDS; i++) {
        oshard *s = &t->sh[i];
        slock(&s->lock);
        for (uint32_t j = 0; j < s->cap; j++)
            if (s->s[j].rec != NULL) {
                enc_rec(w, s->s[j].rec, s->s[j].applied);
                n++;
            }
        sunlock(&s->lock);
    }
    if (!w->oom)
        for (int i = 0; i < 8; i++) w->p[count_at + (size_t)i] = (unsigned char)(n >> (8 * i));
}

typedef struct rd {
    const unsigned char *p;
    size_t len, off;
    bool bad;
} rd;

static uint64_t ru(rd *r, int bytes) {
    if (r->bad || r->len - r->off < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->off + (size_t)i] << (8 * i);
    r->off += (size_t)bytes;
    return v;
}

static const char *rstr(rd *r, size_t *n, bool *null) {
    uint64_t l = ru(r, 4);
    *null = l == 0xffffffffu;
    *n = 0;
    if (r->bad || *null) return NULL;
    if (r->len - r->off < l) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)r->p + r->off;
    r->off += l;
    *n = (size_t)l;
    return s;
}

static void rnum(rd *r, sl_ovr_num *n) {
    n->target = (uint8_t)ru(r, 1);
    n->algo = (uint32_t)ru(r, 4);
    n->state_size = (uint32_t)ru(r, 4);
    n->quota_period = (uint32_t)ru(r, 4);
    n->limit = ru(r, 8);
    n->capacity = ru(r, 8);
    n->period_ns = (int64_t)ru(r, 8);
    n->max_delay_ns = (int64_t)ru(r, 8);
    n->lease_ns = (int64_t)ru(r, 8);
    n->emission_ns = (int64_t)ru(r, 8);
}

static int dfail(char *eb, size_t ebn, const char *why, uint64_t i) {
    if (eb != NULL && ebn > 0) {
        size_t n = strlen("snapshot overrides section, record ");
        (void)n;
        char num[24];
        int k = 0;
        char tmp[24];
        do {
            tmp[k++] = (char)('0' + i % 10);
            i /= 10;
        } while (i && k < 23);
        for (int j = 0; j < k; j++) num[j] = tmp[k - 1 - j];
        num[k] = '\0';
        size_t at = 0;
        const char *parts[4] = {"snapshot overrides section, record ", num, ": ", why};
        for (int j = 0; j < 4; j++)
            for (const char *c = parts[j]; *c && at + 1 < ebn; c++) eb[at++] = *c;
        eb[at] = '\0';
    }
    return SLUICE_ECORRUPT;
}

/* Copies a string read from the file into a NUL-terminated temporary (strings may hold
 * no NUL: the record's would end early). */
static char *tdup(const char *s, size_t n, bool null, bool *bad) {
    if (null) return NULL;
    if (memchr(s, '\0', n) != NULL) {
        *bad = true;
        return NULL;
    }
    char *d = malloc(n + 1);
    if (d == NULL) {
        *bad = true;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

int sl_ovr_decode(sl_ovr_table *t, const unsigned char *p, size_t len, char *eb, size_t ebn) {
    rd r = {p, len, 0, false};
    if (len < 12 || memcmp(p, "OVR1", 4) != 0) return dfail(eb, ebn, "bad section header", 0);
    r.off = 4;
    uint64_t n = ru(&r, 8);
    if (n > (len - 12) / 80) return dfail(eb, ebn, "count exceeds the section", 0);
    uint64_t maxver = 0;
    int rc = SLUICE_OK;
    for (uint64_t i = 0; i < n && rc == SLUICE_OK; i++) {
        sl_ovr_rec tm;
        memset(&tm, 0, sizeof(tm));
        tm.h.lo = ru(&r, 8);
        tm.h.hi = ru(&r, 8);
        tm.ver = ru(&r, 8);
        uint64_t applied = ru(&r, 8);
        tm.from_ver = ru(&r, 8);
        tm.kind = (uint8_t)ru(&r, 1);
        tm.nwin = (uint8_t)ru(&r, 1);
        tm.nfrom = (uint8_t)ru(&r, 1);
        uint64_t pad = ru(&r, 1);
        tm.expires_ns = (int64_t)ru(&r, 8);
        tm.set_at_ns = (int64_t)ru(&r, 8);
        tm.dead_at_ns = (int64_t)ru(&r, 8);
        if (r.bad) return dfail(eb, ebn, "truncated", i);
        if (tm.kind > SL_OVR_EXEMPT || tm.nwin > SL_OVR_MAX_WIN || tm.nfrom > SL_OVR_MAX_WIN ||
            pad != 0 || tm.ver == 0 || (tm.kind != SL_OVR_LIMITS && tm.nwin != 0) ||
            (applied != 0 && applied != tm.ver && applied != tm.from_ver))
            return dfail(eb, ebn, "invalid fields", i);
        for (unsigned k = 0; k < tm.nwin; k++) rnum(&r, &tm.win[k]);
        for (unsigned k = 0; k < tm.nfrom; k++) rnum(&r, &tm.from[k]);
        for (unsigned k = 0; k < tm.nwin + tm.nfrom; k++) {
            const sl_ovr_num *x = k < tm.nwin ? &tm.win[k] : &tm.from[k - tm.nwin];
            if (x->target >= SLUICE_MAX_ITEMS || x->limit == 0 || x->algo > 64)
                return dfail(eb, ebn, "invalid window numbers", i);
        }
        size_t kl;
        bool knull;
        const char *k = rstr(&r, &kl, &knull);
        const char *s[6];
        size_t sl[6];
        bool sn[6];
        for (int j = 0; j < 6; j++) s[j] = rstr(&r, &sl[j], &sn[j]);
        if (r.bad) return dfail(eb, ebn, "truncated", i);
        if (sn[0]) return dfail(eb, ebn, "no policy", i);
        bool bad = false;
        char *d[6];
        for (int j = 0; j < 6; j++) d[j] = tdup(s[j], sl[j], sn[j], &bad);
        sl_ovr_rec *rec = bad ? NULL
                              : sl_ovr_rec_new(&tm, d[0], knull ? NULL : k, kl, d[1], d[2], d[3],
                                               d[4], d[5]);
        for (int j = 0; j < 6; j++) free(d[j]);
        if (rec == NULL) return dfail(eb, ebn, "invalid strings", i);
        if (t == NULL) { /* validation only */
            free(rec);
            continue;
        }
        oshard *sh = shard_of(t, rec->h);
        slock(&sh->lock);
        bool dup = find(sh, rec->h) != NULL;
        bool ok = !dup && grow(sh);
        if (ok) {
            oslot o = {rec->h.lo, rec->h.hi, rec, applied};
            place(sh->s, sh->bits, sh->cap, &o);
            sh->used++;
        }
        sunlock(&sh->lock);
        if (!ok) {
            free(rec);
            rc = dfail(eb, ebn, dup ? "duplicate" : "out of memory", i);
            break;
        }
        if (rec->ver > maxver) maxver = rec->ver;
        if (rec->kind != SL_OVR_NONE) atomic_fetch_add(&t->live, 1);
        pol_add(t, rec->policy, 1, rec->kind != SL_OVR_NONE ? 1 : 0);
    }
    if (rc == SLUICE_OK && r.off != len) rc = dfail(eb, ebn, "bytes after the last record", n);
    if (t != NULL && atomic_load(&t->ver) < maxver) atomic_store(&t->ver, maxver);
    return rc;
}
