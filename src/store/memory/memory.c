/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory.c -- the memory store: creation, the limiter registry, the per-class sharded
 * tables (linear probing, backward-shift deletion), capacity pressure and statistics.
 * Units: times in ns (sluice_time), capacities in entries, sizes in bytes. Table address
 * space is reserved at register time and filled as shards grow: a decision never allocates
 * (a growth copies through the table's reserved scratch; see shard_grow).
 */
#include "store/memory/memory.h"
#include "store/memory/override.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DEFAULT_MAX_KEYS UINT64_C(1000000)
#define DEFAULT_SHARDS 256u
/* Each shard holds at least this many keys on average: fewer shards for small stores,
 * so that the statistical slack of each shard (below) stays a small part of it: at
 * 1000 keys 16 shards (MIN_SHARDS below). */
#define MIN_KEYS_PER_SHARD 512u
/* ... but never fewer than this many (unless `shards` asks for fewer): with one shard,
 * threads deciding on a small hot key set all wait on one lock, and two threads decided
 * slower than one (issue 28). 16 shards give two threads a 1-in-16 chance of meeting on a
 * lock, for ~1.13x the memory per key of one shard at 1,000 keys (GCRA: 50.6 bytes/key
 * against 44.8; bench/lib_bench.c).  */
#define MIN_SHARDS 16u
/* Large states (sliding logs) would make max_keys entries huge: such a class table
 * holds at most this many bytes of entries (at least 1024 entries). */
#define BIG_CLASS_BYTES (UINT64_C(256) << 20)
/* Memory per key of capacity the tables may use for a lower load (target: <= 48). */
#define BYTES_PER_KEY 42

/* ---- locks -------------------------------------------------------------------------- */

/*
 * A test-and-test-and-set spinlock. Why not a mutex: critical sections are a few dozen
 * ns (one lookup and an algorithm step), and an uncontended lock+unlock here costs one
 * atomic exchange instead of two. The cores are shared, so a waiter that spins for long
 * (the holder was preempted) yields the CPU instead of burning its slice.
 */
void sl_shard_lock_slow(sl_shard *sh) {
    for (;;) {
        if (!atomic_exchange_explicit(&sh->lock, 1, memory_order_acquire)) return;
        unsigned spins = 0;
        while (atomic_load_explicit(&sh->lock, memory_order_relaxed)) {
            if (++spins >= 128) {
                sched_yield();
                spins = 0;
            } else {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            }
        }
    }
}

/* Tables are separate allocations; locking them in increasing address order, each
 * table's shards in array order, is the same global address order decisions use. */
static int table_addr_cmp(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)(*(sl_table *const *)a)->shards;
    uintptr_t y = (uintptr_t)(*(sl_table *const *)b)->shards;
    return x < y ? -1 : x > y;
}

static void sorted_tables(sluice_store *st, sl_table **out) {
    memcpy(out, st->tables, st->ntables * sizeof(*out));
    qsort(out, st->ntables, sizeof(*out), table_addr_cmp);
}

void sl_store_lock_all(sluice_store *st) {
    sl_table *t[SL_STORE_MAX_CLASSES];
    sorted_tables(st, t);
    for (unsigned i = 0; i < st->ntables; i++)
        for (uint32_t s = 0; s < t[i]->nshards; s++) sl_shard_lock(&t[i]->shards[s]);
}

void sl_store_unlock_all(sluice_store *st) {
    for (unsigned i = 0; i < st->ntables; i++)
        for (uint32_t s = 0; s < st->tables[i]->nshards; s++)
            sl_shard_unlock(&st->tables[i]->shards[s]);
}

/* ---- hashing -------------------------------------------------------------------------- */

/* The identity of (name, index): a 128-bit keyed hash of len32(name) || name || index32,
 * length-prefixed so that no two (name, index) pairs share an encoding. A key's hash is
 * then SipHash over identity(16 bytes) || key: the identity has a fixed width, so the
 * key's bytes are unambiguous too, and the 16-byte prefix is absorbed once per family. */
static void family_prefix(const sl_hash_key *seed, const char *name, size_t name_len,
                          uint32_t index, sl_sip *out) {
    unsigned char buf[4 + 255 + 4];
    size_t n = name_len > 255 ? 255 : name_len;
    for (int i = 0; i < 4; i++) buf[i] = (unsigned char)((uint32_t)n >> (8 * i));
    memcpy(buf + 4, name, n);
    for (int i = 0; i < 4; i++) buf[4 + n + (size_t)i] = (unsigned char)(index >> (8 * i));
    sl_hash128 id = sl_hash128_of(seed, buf, 8 + n);
    unsigned char idb[16];
    for (int i = 0; i < 8; i++) {
        idb[i] = (unsigned char)(id.lo >> (8 * i));
        idb[8 + i] = (unsigned char)(id.hi >> (8 * i));
    }
    sl_sip_init(out, seed);
    sl_sip_blocks(out, idb, 2, SL_HASH_C);
}

sl_hash128 sl_store_key_hash(const sl_hash_key *seed, const char *name, size_t name_len,
                             uint32_t index, const void *key, size_t key_len) {
    sl_sip s;
    family_prefix(seed, name, name_len, index, &s);
    return sl_sip_finish(&s, key, key_len, SL_HASH_C, SL_HASH_D);
}

void sl_store_reseed(sluice_store *st, const sl_hash_key *seed) {
    st->seed = *seed;
    sl_ovr_reseed(st->ovr, seed);
    for (unsigned i = 1; i <= st->nfams; i++) {
        sl_family *f = sl_store_family(st, (uint16_t)i);
        family_prefix(seed, f->name, f->name_len, f->index, &f->prefix);
    }
}

/* ---- tables ---------------------------------------------------------------------------- */

#define PAGE 4096u
/* A shard starts with room for at least this many entries (and at least one page). */
#define MIN_SHARD_SLOTS 16u

/* Address space for a table at full size, not memory: pages are faulted in by
 * fault_in as shards grow (MAP_NORESERVE: nothing is committed for the untouched part). */
static void *big_alloc(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Writes every page of [p, p + bytes) so that the kernel allocates them here (register
 * time, or a growth), never behind a later decision's first touch. */
static void fault_in(unsigned char *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += PAGE) ((volatile unsigned char *)p)[off] = 0;
    if (bytes > 0) ((volatile unsigned char *)p)[bytes - 1] = 0;
}

/*
 * Sizing. Capacity is exact globally (st->keys vs max_keys); a shard additionally has a
 * hard cap so that its probe lengths stay bounded (load <= 0.85). With uniformly hashed
 * keys a shard's share is binomial, so the hard cap is the mean plus four standard
 * deviations: a shard fills up before the store does with negligible probability, and
 * then pressure is handled in that shard. One shard: the hard cap is max_keys exactly.
 * Memory at full capacity: max(esize * 1.2-1.6, BYTES_PER_KEY) bytes per key (more for
 * small stores, whose shards need relatively more slack). That is the full size; each
 * shard starts at nslots >> shift (about one page) and grows (shard_grow), so an idle
 * store with max_keys 1 M holds ~1 page per shard, not the 40-60 MB its table may reach.
 */
static sl_table *table_create(sluice_store *st, uint32_t ssize) {
    sl_table *t = calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    t->ssize = ssize;
    t->esize = (uint32_t)sizeof(sl_ehdr) + ssize;
    uint64_t cap = st->max_keys;
    if (t->esize > 64) {
        uint64_t big = BIG_CLASS_BYTES / t->esize;
        if (big < 1024) big = 1024;
        if (cap > big) cap = big;
    }
    uint32_t ns = st->shards_opt;
    while (ns > MIN_SHARDS && cap / ns < MIN_KEYS_PER_SHARD) ns >>= 1;
    t->nshards = ns;
    t->shard_mask = ns - 1;
    uint64_t mean = (cap + ns - 1) / ns;
    t->hard_cap = ns == 1 ? cap : mean + (uint64_t)(4.0 * sqrt((double)mean)) + 8;
    t->nslots = (uint64_t)((double)t->hard_cap / 0.85) + 2;
    /* Small entries (GCRA: 24 bytes) would sit at ~0.8 load with the rule above; spend
     * memory up to BYTES_PER_KEY per key of capacity instead, for shorter probe runs
     * (linear probing's successful search is ~(1 + 1/(1 - load)) / 2 slots). */
    uint64_t budget = mean * BYTES_PER_KEY / t->esize;
    if (budget > t->nslots) t->nslots = budget;
    unsigned __int128 total = (unsigned __int128)t->nslots * ns * t->esize;
    /* 64 TiB, or more per shard than its 32-bit counters hold: max_keys is absurd */
    if (total > ((unsigned __int128)1 << 46) || t->hard_cap >= (UINT64_C(1) << 31)) {
        free(t);
        return NULL;
    }
    /* each shard's region starts on a page of its own: a shard's growth faults in only
     * its own pages */
    t->shard_stride = ((size_t)t->nslots * t->esize + PAGE - 1) / PAGE * PAGE;
    t->slots_bytes = t->shard_stride * ns;
    /* the smallest size: room for MIN_SHARD_SLOTS entries and at least one page */
    uint64_t floor = PAGE / t->esize > MIN_SHARD_SLOTS ? PAGE / t->esize : MIN_SHARD_SLOTS;
    uint8_t k0 = 0;
    while (k0 < 62 && (t->nslots >> (k0 + 1)) >= floor) k0++;
    t->slots = big_alloc(t->slots_bytes);
    t->shards = aligned_alloc(64, sizeof(sl_shard) * ns);
    t->shift = calloc(ns, sizeof(*t->shift));
    /* the growth scratch: address space for half a full shard, its pages touched by the
     * first growth that needs them (none for a table that starts at full size) */
    t->grow_bytes = k0 == 0 ? 0 : (size_t)(t->nslots >> 1) * t->esize;
    t->grow_buf = t->grow_bytes ? big_alloc(t->grow_bytes) : NULL;
    atomic_init(&t->grow_lock, 0);
    if (t->slots == NULL || t->shards == NULL || t->shift == NULL ||
        (t->grow_bytes && t->grow_buf == NULL)) {
        if (t->grow_buf != NULL) munmap(t->grow_buf, t->grow_bytes);
        if (t->slots != NULL) munmap(t->slots, t->slots_bytes);
        free(t->shards);
        free((void *)t->shift);
        free(t);
        return NULL;
    }
    memset(t->shards, 0, sizeof(sl_shard) * ns);
    atomic_init(&t->full_shards, k0 == 0 ? ns : 0);
    for (uint32_t s = 0; s < ns; s++) {
        atomic_init(&t->shift[s], k0);
        fault_in(t->slots + (size_t)s * t->shard_stride, (size_t)(t->nslots >> k0) * t->esize);
    }
    return t;
}

static void table_destroy(sl_table *t) {
    if (t->grow_buf != NULL) munmap(t->grow_buf, t->grow_bytes);
    munmap(t->slots, t->slots_bytes);
    free(t->shards);
    free((void *)t->shift);
    free(t);
}

static inline unsigned char *slot_at(const sl_loc *loc, uint64_t i) {
    return loc->base + (size_t)i * loc->t->esize;
}

static inline uint64_t shard_shift(const sl_table *t, uint32_t s) {
    return atomic_load_explicit(&t->shift[s], memory_order_relaxed);
}

/*
 * Doubles loc's shard (its lock held): its entries are copied aside, its slots cleared,
 * and each one inserted again at its home in the doubled size (the region behind was
 * reserved and is zero). False when it is at full size or without memory for the copy:
 * the shard then stays as it is and pressure handling frees room in it (as in a full
 * shard), so a failed growth is never an error.
 * Trade-off: the growth runs inside the decision whose new key needs the room: one copy of
 * at most half a shard (~130 KiB at max_keys 1 M over 256 shards) into the table's scratch
 * (reserved with the table: no allocation on the decision path; issue 28), while the
 * decisions on that shard (1/256 of the keys) wait. Two shards of one table growing at the
 * same moment take the scratch in turn (grow_lock, only ever taken under a shard lock and
 * never while waiting for one: no deadlock); a shard grows ~5 times in the store's life. Each doubling pays for the
 * inserts that filled the half before, so the cost per insert is constant (amortised),
 * and a shard reaches its full size in ~5 doublings. The alternative, growing from a timer
 * ahead of need, would keep decisions free of it but needs a spare thread or a guess of
 * the arrival rate, and a burst of new keys outruns any guess; keys that are never seen
 * cost nothing either way.
 */
static bool shard_grow(sluice_store *st, const sl_loc *loc) {
    (void)st;
    sl_table *t = loc->t;
    uint64_t k = shard_shift(t, loc->s);
    if (k == 0) return false;
    uint64_t n = t->nslots >> k, n2 = t->nslots >> (k - 1);
    size_t bytes = (size_t)n * t->esize;
    if (bytes > t->grow_bytes) return false; /* cannot happen: n <= nslots / 2 */
    unsigned spins = 0;
    while (atomic_exchange_explicit(&t->grow_lock, 1, memory_order_acquire))
        if (++spins % 128 == 0) sched_yield();
    unsigned char *old = t->grow_buf;
    memcpy(old, loc->base, bytes);
    fault_in(loc->base + bytes, (size_t)n2 * t->esize - bytes);
    memset(loc->base, 0, bytes);
    atomic_store_explicit(&t->shift[loc->s], (uint8_t)(k - 1), memory_order_relaxed);
    for (uint64_t j = 0; j < n; j++) {
        const sl_ehdr *e = (const sl_ehdr *)(old + (size_t)j * t->esize);
        if (e->fam == 0) continue;
        uint64_t i = sl_home(e->k0, n2);
        while (((sl_ehdr *)slot_at(loc, i))->fam != 0)
            if (++i == n2) i = 0;
        memcpy(slot_at(loc, i), e, t->esize);
    }
    atomic_store_explicit(&t->grow_lock, 0, memory_order_release);
#ifdef MADV_HUGEPAGE
    /* Once every shard is at full size, transparent huge pages where the system allows
     * them (Debian: "madvise"; khugepaged merges in the background): one TLB entry per
     * 2 MiB matters at millions of keys. Not before: a huge page faulted behind a small
     * shard would hold 2 MiB for it. Failure is harmless. */
    if (k == 1 && atomic_fetch_add_explicit(&t->full_shards, 1, memory_order_relaxed) + 1 ==
                      t->nshards && t->slots_bytes >= (size_t)(4u << 20))
        (void)madvise(t->slots, t->slots_bytes, MADV_HUGEPAGE);
#endif
    return true;
}

/* Grows loc's shard until `more` entries beyond those held and reserved fit under its
 * load; false when they do not (full size, or no memory). *moved when it grew. */
static bool shard_room(sluice_store *st, const sl_loc *loc, uint64_t more, bool *moved) {
    uint64_t used = (uint64_t)loc->sh->count + loc->sh->reserved + more;
    for (;;) {
        uint64_t k = shard_shift(loc->t, loc->s);
        if (used <= (loc->t->hard_cap >> k)) return true;
        if (!shard_grow(st, loc)) return false;
        *moved = true;
    }
}

/* Bytes of slots the shards use now (what grew, not what was reserved). */
static uint64_t table_bytes(const sl_table *t) {
    uint64_t b = 0;
    for (uint32_t s = 0; s < t->nshards; s++) b += (t->nslots >> shard_shift(t, s)) * t->esize;
    return b;
}

/* ---- entries, counts ------------------------------------------------------------------ */

/* Is the entry equivalent to a fresh state at `now` (so dropping it changes nothing)?
 * Asks the algorithm: the hints only say when to ask. */
static bool entry_fresh(sluice_store *st, sl_ehdr *e, sluice_time now) {
    sl_family *f = sl_store_family(st, e->fam);
    if (f == NULL) return true;
    sl_lver *v = sl_family_cur(f);
    return sl_algo_fresh_at(&v->lim, sl_entry_state(e), now) <= now.mono_ns;
}

uint32_t sl_entry_meta(const sl_limit *lim, const void *state, sluice_time now, uint32_t age,
                       uint32_t uses_limited) {
    if (age > SL_STAMP_MASK) age = SL_STAMP_MASK;
    uint32_t stamp = (sl_stamp(now.mono_ns) - age) & SL_STAMP_MASK;
    /* the hint counts from the last use: fresh_at - (now - age units) */
    int64_t fresh_at = sl_algo_fresh_at(lim, state, now), d;
    __int128 since = (__int128)fresh_at - now.mono_ns + ((__int128)age << SL_STAMP_SHIFT);
    d = since > INT64_MAX ? INT64_MAX : since < 0 ? 0 : (int64_t)since;
    return stamp << 9 | (uses_limited & (SL_META_USES | SL_META_LIMITED)) | sl_fresh_bits(d);
}

void sl_store_count(sluice_store *st, uint16_t fam, int delta) {
    sl_family *f = sl_store_family(st, fam);
    if (f == NULL) return;
    int64_t before = atomic_fetch_add_explicit(&f->keys, delta, memory_order_relaxed);
    if (delta > 0 && before == 0)
        atomic_fetch_add_explicit(&st->active_fams, 1, memory_order_relaxed);
    else if (delta < 0 && before + delta == 0)
        atomic_fetch_sub_explicit(&st->active_fams, 1, memory_order_relaxed);
}

static void fam_stat(sluice_store *st, uint16_t fam, atomic_uint_fast64_t *(*pick)(sl_family *)) {
    sl_family *f = sl_store_family(st, fam);
    if (f != NULL) atomic_fetch_add_explicit(pick(f), 1, memory_order_relaxed);
}
static atomic_uint_fast64_t *f_expired(sl_family *f) { return &f->expired; }
static atomic_uint_fast64_t *f_evicted(sl_family *f) { return &f->evicted; }
static atomic_uint_fast64_t *f_refused(sl_family *f) { return &f->refused; }

static bool kept(const sl_ehdr *e, const sl_keep *keep, size_t nkeep) {
    for (size_t i = 0; i < nkeep; i++)
        if (keep[i].k0 == e->k0 && keep[i].k1 == e->k1 && keep[i].fam == e->fam) return true;
    return false;
}

/* Backward-shift deletion: pull later members of the probe run into the hole as long as
 * that keeps each of them at or after its home slot, so lookups never need tombstones. */
static void remove_at(const sl_loc *loc, uint64_t hole) {
    const sl_table *t = loc->t;
    uint64_t n = sl_loc_nslots(loc), j = hole;
    for (;;) {
        if (++j == n) j = 0;
        sl_ehdr *e = (sl_ehdr *)slot_at(loc, j);
        if (e->fam == 0) break;
        uint64_t h = sl_home(e->k0, n);
        bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays) continue;
        memcpy(slot_at(loc, hole), e, t->esize);
        hole = j;
    }
    memset(slot_at(loc, hole), 0, t->esize);
}

/* Removes slot i of loc's shard and every count that held it. */
static void remove_counted(sluice_store *st, const sl_loc *loc, uint64_t i) {
    uint16_t fam = ((sl_ehdr *)slot_at(loc, i))->fam;
    remove_at(loc, i);
    loc->sh->count--;
    atomic_fetch_sub_explicit(&st->keys, 1, memory_order_relaxed);
    sl_store_count(st, fam, -1);
}

void sl_table_remove(sluice_store *st, const sl_loc *loc, void *e) {
    remove_counted(st, loc, (uint64_t)((unsigned char *)e - loc->base) / loc->t->esize);
}

/* Why false: the shard is at its hard cap (only room in this shard helps), or the store
 * is at max_keys (room anywhere helps). */
typedef enum { ROOM_OK, ROOM_SHARD, ROOM_STORE } room;

static room try_reserve(sluice_store *st, const sl_loc *loc, bool *moved) {
    sl_shard *sh = loc->sh;
    if (!shard_room(st, loc, 1, moved)) return ROOM_SHARD;
    uint64_t before = atomic_fetch_add_explicit(&st->keys, 1, memory_order_relaxed);
    if (before >= st->max_keys) {
        atomic_fetch_sub_explicit(&st->keys, 1, memory_order_relaxed);
        return ROOM_STORE;
    }
    sh->reserved++;
    sl_store_count(st, loc->fam, +1);
    return ROOM_OK;
}

void sl_store_unreserve(sluice_store *st, const sl_loc *loc) {
    loc->sh->reserved--;
    atomic_fetch_sub_explicit(&st->keys, 1, memory_order_relaxed);
    sl_store_count(st, loc->fam, -1);
}

/* ---- pressure ------------------------------------------------------------------------- */

/*
 * What a full store does for a new key of family F (the "inserter"):
 *  1. Fresh-equivalent entries of any family are dropped first: forgetting them changes
 *     nothing (hinted by the entry's meta, confirmed by its algorithm).
 *  2. Otherwise one entry is evicted, the cheapest F may take. Shares: each family
 *     holding keys is guaranteed max_keys / (families holding keys) (equal weights);
 *     room beyond that is borrowed. A family at or over its share may evict only its
 *     own entries; one under its share may also evict entries of families over theirs
 *     (the borrowers), and prefers those to its own at equal cost. So a flood on one
 *     limiter never evicts a key of a limiter within its share, and takes back at most a
 *     share's worth from one that borrowed.
 *  3. Cost, cheapest first: a key seen once (what a key flood is made of), then one
 *     used repeatedly but idle for more than SL_RECENT, then one used repeatedly and
 *     recently, and last a limited key (nothing remaining at its last decision); within
 *     a class the one nearest to fresh (least budget consumed, in powers of two of time),
 *     then the least recently used (16.8 ms resolution).
 *  4. With nothing the inserter may take, the new key is refused (SLUICE_EFULL).
 * Sampled: a scan looks at a window of SL_STORE_SCAN slots at a pseudo-random place of
 * the shard; up to SL_STORE_WINDOWS windows while no cheap candidate (class 0, not the
 * inserter's own under its share) has been seen. Why random places and not a sweeping
 * hand: evicting where a hand passes depletes the slots behind it (a window that held
 * only protected keys is skipped, the next one pays), so sparse stretches form in which
 * a protected key is the only candidate; random windows evict uniformly and keep every
 * part of the shard as dense as the rest. A protected key (class 2 or 3) goes only after
 * the whole shard and up to 4 other shards of its table had nothing cheaper. Other
 * shards are taken with a try-lock (decisions hold their locks in address order and must
 * never wait out of order; a shard that is busy or already ours is skipped).
 * Every eviction of a non-fresh entry is counted (shard and family): each is a reset.
 */
#define SL_STORE_WINDOWS 4
#define SL_RECENT 256u           /* stamp units (4.3 s): "recently active" */
#define SCORE_NONE UINT64_MAX
#define SCORE_CHEAP (UINT64_C(1) << 60) /* below: class 0 and not own-under-share */
#define SCORE_PROTECTED (UINT64_C(2) << 61) /* from: recently active or limited */

typedef struct press {
    sluice_store *st;
    sluice_time now;
    uint32_t stamp;
    const sl_keep *keep;
    size_t nkeep;
    uint16_t own;
    bool own_over; /* the inserter is at or over its share: only its own entries */
    bool rank;     /* eviction allowed (on_full = evict): rank candidates */
    uint64_t share;
    unsigned nseen;
    uint16_t seen[8];
    bool seen_over[8];
} press;

static bool fam_over(press *p, uint16_t fam) {
    for (unsigned i = 0; i < p->nseen; i++)
        if (p->seen[i] == fam) return p->seen_over[i];
    sl_family *f = sl_store_family(p->st, fam);
    bool over = f != NULL &&
                (uint64_t)atomic_load_explicit(&f->keys, memory_order_relaxed) > p->share;
    if (p->nseen < 8) p->seen[p->nseen] = fam, p->seen_over[p->nseen++] = over;
    return over;
}

/* Units since the last use, and the hinted bound on units from it to fresh. */
static inline uint32_t age_of(const press *p, uint32_t meta) {
    return (p->stamp - (meta >> 9)) & SL_STAMP_MASK;
}
/* ceil((2^fresh - 1) ns / unit): the state is fresh this many units after its last use
 * at the latest (an age in whole units undercounts by less than one: fresh from + 1). */
static inline uint64_t fresh_units(uint32_t meta) {
    uint32_t b = meta & SL_META_FRESH;
    return b > SL_STAMP_SHIFT ? UINT64_C(1) << (b - SL_STAMP_SHIFT) : 1;
}

/* Lower is evicted first; SCORE_NONE when the inserter may not take it. */
static uint64_t score(press *p, const sl_ehdr *e) {
    bool own = e->fam == p->own;
    if (!own && (p->own_over || !fam_over(p, e->fam))) return SCORE_NONE;
    uint32_t m = e->meta, age = age_of(p, m);
    uint64_t cls = (m & SL_META_LIMITED) ? 3 : (m & SL_META_AGAIN) ? (age < SL_RECENT ? 2 : 1) : 0;
    uint64_t bound = fresh_units(m) + 1;
    uint64_t rem = bound > age ? bound - age : 0;
    uint64_t remb = rem ? 64u - (uint64_t)__builtin_clzll(rem) : 0;
    return cls << 61 | (uint64_t)(own && !p->own_over) << 60 | remb << 24 |
           (uint64_t)(SL_STAMP_MASK - age);
}

/* The entry's hint says it may be fresh; if its algorithm disagrees (the wall clock
 * stepped, or the stamp wrapped), its hint is corrected. */
static bool hinted_fresh(press *p, sl_ehdr *e) {
    if (age_of(p, e->meta) < fresh_units(e->meta) + 1) return false;
    if (entry_fresh(p->st, e, p->now)) return true;
    sl_family *f = sl_store_family(p->st, e->fam);
    if (f != NULL)
        e->meta = sl_entry_meta(&sl_family_cur(f)->lim, sl_entry_state(e), p->now,
                                age_of(p, e->meta), e->meta);
    return false;
}

typedef struct cand {
    uint64_t score;
    sl_keep id;
} cand;

/* A pseudo-random window start in loc's shard: xorshift32 on the shard's `hand`. */
static uint64_t window_at(const sl_loc *loc) {
    uint32_t x = loc->sh->hand ? loc->sh->hand : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    loc->sh->hand = x;
    return (uint64_t)(((unsigned __int128)x << 32) * sl_loc_nslots(loc) >> 64);
}

/*
 * `count` slots of loc's shard from slot `from`: drops every fresh entry (a slot emptied
 * by a removal is looked at again: a later entry may have moved in) and, when ranking,
 * keeps the cheapest candidate in *best (by identity: drops later in the window may move
 * it). Returns how many were dropped.
 */
static unsigned scan_from(press *p, const sl_loc *loc, uint64_t from, uint64_t count, cand *best) {
    uint64_t n = sl_loc_nslots(loc), i = from % n, looked = 0;
    unsigned dropped = 0;
    while (looked < count && looked < n) {
        sl_ehdr *e = (sl_ehdr *)slot_at(loc, i);
        if (e->fam != 0 && !kept(e, p->keep, p->nkeep)) {
            if (hinted_fresh(p, e)) {
                fam_stat(p->st, e->fam, f_expired);
                remove_counted(p->st, loc, i);
                dropped++;
                continue;
            }
            if (p->rank) {
                uint64_t s = score(p, e);
                if (s < best->score) *best = (cand){s, {e->k0, e->k1, e->fam}};
            }
        }
        looked++;
        if (++i == n) i = 0;
    }
    loc->sh->expired += dropped;
    return dropped;
}

/* One window at a random place. */
static unsigned scan(press *p, const sl_loc *loc, cand *best) {
    return scan_from(p, loc, window_at(loc), SL_STORE_SCAN, best);
}

/* Evicts candidate c from loc's shard (if it is still there). An entry whose hint was
 * pessimistic may turn out fresh: it is then counted as expired, not evicted. */
static bool evict(press *p, const sl_loc *loc, const cand *c) {
    sl_loc at = *loc;
    at.k0 = c->id.k0;
    at.k1 = c->id.k1;
    at.fam = c->id.fam;
    sl_ehdr *e = sl_table_find(&at);
    if (e == NULL) return false;
    bool fresh = entry_fresh(p->st, e, p->now);
    fam_stat(p->st, e->fam, fresh ? f_expired : f_evicted);
    if (fresh) loc->sh->expired++;
    else loc->sh->evicted++;
    sl_table_remove(p->st, &at, e);
    return true;
}

/* A shard of another table, or another shard of this one, scanned under a try-lock:
 * fresh entries dropped, else (when ranking) its cheapest candidate evicted if it scores
 * below `limit` (what the inserter would otherwise evict at home). */
static bool elsewhere(press *p, sl_table *t, uint32_t s, uint64_t limit) {
    sl_shard *sh = &t->shards[s];
    if (atomic_exchange_explicit(&sh->lock, 1, memory_order_acquire)) return false;
    sl_loc o = {.t = t, .sh = sh, .s = s, .base = t->slots + (size_t)s * t->shard_stride};
    cand c = {SCORE_NONE, {0, 0, 0}};
    bool rank = p->rank;
    p->rank = rank && limit > 0; /* limit 0: fresh entries only, no ranking */
    bool freed = scan(p, &o, &c) > 0;
    p->rank = rank;
    if (!freed && c.score < limit) freed = evict(p, &o, &c);
    sl_shard_unlock(sh);
    return freed;
}

/* Other tables: one shard each (picked by the new key's hash). */
static bool other_tables(press *p, const sl_loc *loc, uint64_t limit) {
    unsigned nt = __atomic_load_n(&p->st->ntables, __ATOMIC_ACQUIRE);
    for (unsigned ti = 0; ti < nt; ti++) {
        sl_table *t = __atomic_load_n(&p->st->tables[ti], __ATOMIC_ACQUIRE);
        if (t != loc->t && elsewhere(p, t, (uint32_t)(loc->k0 >> 20) & t->shard_mask, limit))
            return true;
    }
    return false;
}

/* Other shards of loc's table: for a family over its share whose entries are elsewhere
 * (limit SCORE_NONE), or a cheaper candidate than a protected one here. */
static bool other_shards(press *p, const sl_loc *loc, uint64_t limit) {
    const sl_table *t = loc->t;
    uint32_t s0 = (uint32_t)(loc->sh - t->shards);
    for (uint32_t j = 1; j <= 4 && j < t->nshards; j++)
        if (elsewhere(p, loc->t, (s0 + j * 0x9e3779b1u) & t->shard_mask, limit)) return true;
    return false;
}

int sl_store_reserve(sluice_store *st, const sl_loc *loc, sluice_time now, const sl_keep *keep,
                     size_t nkeep, bool *moved) {
    room why = try_reserve(st, loc, moved);
    if (why == ROOM_OK) return SLUICE_OK;
    unsigned active = atomic_load_explicit(&st->active_fams, memory_order_relaxed);
    sl_family *f = sl_store_family(st, loc->fam);
    int64_t own_keys = f != NULL ? atomic_load_explicit(&f->keys, memory_order_relaxed) : 0;
    /* the inserter counts among the families holding keys even before its first key:
     * else a newcomer's share would be nothing and a flooder's the whole store, and a
     * flood on one limiter would refuse every other limiter's new keys */
    if (own_keys <= 0) active++;
    press p = {.st = st, .now = now, .stamp = sl_stamp(now.mono_ns), .keep = keep,
               .nkeep = nkeep, .own = loc->fam, .rank = st->on_full == SLUICE_EVICT_LRU,
               .share = st->max_keys / (active ? active : 1)};
    p.own_over = own_keys > 0 && (uint64_t)own_keys >= p.share;
    cand best = {SCORE_NONE, {0, 0, 0}};
    for (int w = 0; w < SL_STORE_WINDOWS; w++) {
        if (scan(&p, loc, &best) > 0) {
            *moved = true;
            if ((why = try_reserve(st, loc, moved)) == ROOM_OK) return SLUICE_OK;
        }
        if (best.score < SCORE_CHEAP) break;
    }
    /* Nothing but protected keys (or nothing at all) sampled: the whole shard. */
    if (best.score >= SCORE_PROTECTED && scan_from(&p, loc, 0, sl_loc_nslots(loc), &best) > 0) {
        *moved = true;
        if ((why = try_reserve(st, loc, moved)) == ROOM_OK) return SLUICE_OK;
    }
    /* Room freed in other tables helps unless this shard itself is full: fresh entries
     * there always go before anything here is evicted, and (with no cheap candidate here)
     * a borrower's entry there cheaper than the best one here. */
    if (why == ROOM_STORE && other_tables(&p, loc, best.score < SCORE_CHEAP ? 0 : best.score) &&
        (why = try_reserve(st, loc, moved)) == ROOM_OK)
        return SLUICE_OK;
    /* Before a protected key goes (or when this shard has nothing the inserter may take):
     * other shards of this table, for anything cheaper. */
    if (p.rank && best.score >= SCORE_PROTECTED && why == ROOM_STORE &&
        other_shards(&p, loc, best.score) && (why = try_reserve(st, loc, moved)) == ROOM_OK)
        return SLUICE_OK;
    if (best.score != SCORE_NONE && evict(&p, loc, &best)) {
        *moved = true;
        if ((why = try_reserve(st, loc, moved)) == ROOM_OK) return SLUICE_OK;
    }
    loc->sh->refused++;
    fam_stat(st, loc->fam, f_refused);
    return SLUICE_EFULL;
}

/* Reusing a fresh-equivalent slot on the probe path is safe for lookups: the slot stays
 * occupied, so no probe run is cut, and the new key is reachable from its home. Only
 * entries untouched for 512 stamp units (~8.6 s) are considered: a key that went fresh
 * a few ms ago is likely to come back, and replacing it would just churn the table
 * (pressure handling still drops any fresh entry when room is short). */
void *sl_table_insert(sluice_store *st, const sl_loc *loc, sluice_time now) {
    uint64_t n = sl_loc_nslots(loc), i = sl_home(loc->k0, n);
    sl_shard *sh = loc->sh;
    uint32_t stamp = sl_stamp(now.mono_ns);
    sh->reserved--;
    for (;;) {
        sl_ehdr *e = (sl_ehdr *)slot_at(loc, i);
        if (e->fam == 0) {
            sh->count++;
            break;
        }
        uint32_t age = (stamp - (e->meta >> 9)) & SL_STAMP_MASK;
        if (age >= 512 && age >= fresh_units(e->meta) + 1 && entry_fresh(st, e, now)) {
            sh->expired++;
            fam_stat(st, e->fam, f_expired);
            sl_store_count(st, e->fam, -1);
            atomic_fetch_sub_explicit(&st->keys, 1, memory_order_relaxed);
            break;
        }
        if (++i == n) i = 0;
    }
    sl_ehdr *e = (sl_ehdr *)slot_at(loc, i);
    e->k0 = loc->k0;
    e->k1 = loc->k1;
    e->fam = loc->fam;
    e->meta = 0;
    return e;
}

bool sl_table_insert_raw(sluice_store *st, sl_table *t, uint64_t k0, uint16_t k1, uint16_t fam,
                         uint32_t meta, const void *state) {
    sl_hash128 h = {.lo = k1, .hi = k0};
    sl_loc loc;
    sl_table_locate(t, h, fam, &loc);
    bool moved = false;
    if (!shard_room(st, &loc, 1, &moved)) return false;
    if (sl_table_find(&loc) != NULL) return false;
    uint64_t n = sl_loc_nslots(&loc), i = sl_home(k0, n);
    while (((sl_ehdr *)slot_at(&loc, i))->fam != 0)
        if (++i == n) i = 0;
    sl_ehdr *e = (sl_ehdr *)slot_at(&loc, i);
    e->k0 = k0;
    e->k1 = k1;
    e->fam = fam;
    e->meta = meta;
    memcpy(sl_entry_state(e), state, t->ssize);
    loc.sh->count++;
    atomic_fetch_add_explicit(&st->keys, 1, memory_order_relaxed);
    sl_store_count(st, fam, +1);
    return true;
}

/* ---- store ------------------------------------------------------------------------------ */

static sl_regmap *regmap_new(uint32_t slots);

sluice_store *sluice_store_create(const sluice_store_options *opt, int *err) {
    int e = SLUICE_OK;
    sluice_store *st = NULL;
    unsigned shards = opt != NULL && opt->shards ? opt->shards : DEFAULT_SHARDS;
    if (opt != NULL && (opt->on_full != SLUICE_EVICT_LRU && opt->on_full != SLUICE_REFUSE_NEW))
        e = SLUICE_EINVAL;
    else if ((shards & (shards - 1)) != 0 || shards > 65536)
        e = SLUICE_EINVAL;
    else if ((st = calloc(1, sizeof(*st))) == NULL)
        e = SLUICE_ENOMEM;
    if (e != SLUICE_OK) {
        if (err != NULL) *err = e;
        return NULL;
    }
    st->max_keys = opt != NULL && opt->max_keys ? opt->max_keys : DEFAULT_MAX_KEYS;
    st->on_full = opt != NULL ? opt->on_full : SLUICE_EVICT_LRU;
    st->shards_opt = shards;
    if (opt != NULL && opt->seed != NULL) {
        st->seed = sl_hash_key_from_bytes(opt->seed);
    } else if (sl_hash_random_key(&st->seed) != 0) {
        free(st);
        if (err != NULL) *err = SLUICE_EIO;
        return NULL;
    }
    atomic_init(&st->keys, 0);
    atomic_init(&st->active_fams, 0);
    sl_regmap *m = regmap_new(64);
    if (m == NULL) {
        free(st);
        if (err != NULL) *err = SLUICE_ENOMEM;
        return NULL;
    }
    atomic_init(&st->regmap, m);
    st->ovr = sl_ovr_table_create(&st->seed);
    if (st->ovr == NULL) {
        free(m);
        free(st);
        if (err != NULL) *err = SLUICE_ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&st->reg_lock, NULL);
    if (err != NULL) *err = SLUICE_OK;
    return st;
}

void sluice_store_destroy(sluice_store *st) {
    if (st == NULL) return;
    sl_ovr_table_destroy(st->ovr);
    for (unsigned i = 0; i < st->ntables; i++) table_destroy(st->tables[i]);
    for (unsigned i = 1; i <= st->nfams; i++) {
        sl_family *f = sl_store_family(st, (uint16_t)i);
        sl_lver *v = f->cur;
        while (v != NULL) {
            sl_lver *o = v->older;
            free(v);
            v = o;
        }
        free(f);
    }
    for (unsigned i = 0; i < sizeof(st->fam_chunks) / sizeof(st->fam_chunks[0]); i++)
        free((void *)st->fam_chunks[i]);
    sl_regmap *m = st->regmap;
    while (m != NULL) {
        sl_regmap *o = m->retired;
        free(m);
        m = o;
    }
    pthread_mutex_destroy(&st->reg_lock);
    free(st->fam_index);
    free(st);
}

void sluice_store_stats_get(sluice_store *st, sluice_store_stats *out) {
    if (out == NULL) return;
    memset(out, 0, sizeof(*out));
    if (st == NULL) return;
    pthread_mutex_lock(&st->reg_lock);
    out->keys = atomic_load_explicit(&st->keys, memory_order_relaxed);
    out->capacity = st->max_keys;
    uint64_t bytes = sizeof(*st);
    for (unsigned i = 0; i < st->ntables; i++) {
        sl_table *t = st->tables[i];
        bytes += table_bytes(t) + (sizeof(sl_shard) + sizeof(*t->shift)) * t->nshards + sizeof(*t);
        for (uint32_t s = 0; s < t->nshards; s++) {
            sl_shard *sh = &t->shards[s];
            sl_shard_lock(sh);
            out->expired += sh->expired;
            out->evicted += sh->evicted;
            out->refused += sh->refused;
            sl_shard_unlock(sh);
        }
    }
    bytes += (uint64_t)st->nfams * (sizeof(sl_family) + sizeof(sl_lver));
    for (sl_regmap *m = st->regmap; m != NULL; m = m->retired)
        bytes += sizeof(*m) + sizeof(sl_reg) * ((uint64_t)m->mask + 1);
    out->bytes = bytes;
    pthread_mutex_unlock(&st->reg_lock);
}

int sluice_store_limiter_stats(sluice_store *st, const sluice_limiter *lim,
                               sluice_limiter_stats *out) {
    if (out != NULL) memset(out, 0, sizeof(*out));
    if (st == NULL || lim == NULL || out == NULL) return SLUICE_EINVAL;
    sl_family *f = sl_store_family_of(st, lim);
    if (f == NULL) return SLUICE_EINVAL;
    int64_t k = atomic_load_explicit(&f->keys, memory_order_relaxed);
    unsigned active = atomic_load_explicit(&st->active_fams, memory_order_relaxed);
    out->keys = k > 0 ? (uint64_t)k : 0;
    out->share = st->max_keys / (active ? active : 1);
    out->evicted = atomic_load_explicit(&f->evicted, memory_order_relaxed);
    out->expired = atomic_load_explicit(&f->expired, memory_order_relaxed);
    out->refused = atomic_load_explicit(&f->refused, memory_order_relaxed);
    return SLUICE_OK;
}

/* ---- registry ---------------------------------------------------------------------------- */

static inline uint32_t reg_hash(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 31;
    x *= UINT64_C(0x9e3779b97f4a7c15);
    return (uint32_t)(x >> 32);
}

static sl_regmap *regmap_new(uint32_t slots) {
    sl_regmap *m = calloc(1, sizeof(*m) + sizeof(sl_reg) * slots);
    if (m != NULL) m->mask = slots - 1;
    return m;
}

/* Lock-free read of the pointer map. The family found is checked against the limiter's
 * index and the first 16 bytes of its name (both zero-padded buffers; a full strcmp cost
 * ~3% of a decision), so a limiter destroyed and another created at the same address
 * without being registered is refused with EINVAL unless its name and index match that
 * far (then it shares that family's state). */
sl_family *sl_store_family_of(sluice_store *st, const sluice_limiter *lim) {
    sl_regmap *m = atomic_load_explicit(&st->regmap, memory_order_acquire);
    uint32_t i = reg_hash(lim) & m->mask;
    for (uint32_t probes = 0; probes <= m->mask; probes++) {
        const sluice_limiter *p = atomic_load_explicit(&m->slots[i].lim, memory_order_acquire);
        if (p == NULL) return NULL;
        if (p == lim) {
            sl_family *f = atomic_load_explicit(&m->slots[i].fam, memory_order_acquire);
            if (f->index != lim->spec.index || memcmp(f->name, lim->name, 16) != 0) return NULL;
            return f;
        }
        i = (i + 1) & m->mask;
    }
    return NULL;
}

static size_t fam_slot_of(const char *name, size_t name_len, uint32_t index, size_t mask) {
    uint64_t h = UINT64_C(14695981039346656037) ^ index;
    for (size_t i = 0; i < name_len; i++) h = (h ^ (unsigned char)name[i]) * UINT64_C(1099511628211);
    return (size_t)(h ^ (h >> 29)) & mask;
}

/* Adds family f to the name index (reg_lock held); false without memory. */
static bool fam_index_add(sluice_store *st, sl_family *f) {
    if ((st->nfams + 1) * 2 > st->fam_index_cap) {
        size_t cap = st->fam_index_cap ? st->fam_index_cap * 2 : 64;
        uint16_t *ix = calloc(cap, sizeof(*ix));
        if (ix == NULL) return false;
        for (size_t i = 0; i < st->fam_index_cap; i++) {
            uint16_t id = st->fam_index[i];
            if (id == 0) continue;
            const sl_family *g = sl_store_family(st, id);
            size_t s = fam_slot_of(g->name, g->name_len, g->index, cap - 1);
            while (ix[s] != 0) s = (s + 1) & (cap - 1);
            ix[s] = id;
        }
        free(st->fam_index);
        st->fam_index = ix;
        st->fam_index_cap = cap;
    }
    size_t s = fam_slot_of(f->name, f->name_len, f->index, st->fam_index_cap - 1);
    while (st->fam_index[s] != 0) s = (s + 1) & (st->fam_index_cap - 1);
    st->fam_index[s] = f->id;
    return true;
}

sl_family *sl_store_family_by_name(sluice_store *st, const char *name, size_t name_len,
                                   uint32_t index) {
    if (st->fam_index_cap == 0) return NULL;
    size_t mask = st->fam_index_cap - 1;
    for (size_t s = fam_slot_of(name, name_len, index, mask);; s = (s + 1) & mask) {
        uint16_t id = st->fam_index[s];
        if (id == 0) return NULL;
        sl_family *f = sl_store_family(st, id);
        if (f->index == index && f->name_len == name_len && memcmp(f->name, name, name_len) == 0)
            return f;
    }
}

bool sl_limit_same(const sl_limit *a, const sl_limit *b) {
    return a->algo == b->algo && a->state_size == b->state_size && a->limit == b->limit &&
           a->capacity == b->capacity && a->period_ns == b->period_ns &&
           a->max_delay_ns == b->max_delay_ns && a->lease_ns == b->lease_ns &&
           a->quota_period == b->quota_period && a->tz == b->tz &&
           a->emission_ns == b->emission_ns && a->cell == b->cell &&
           memcmp(&a->cap, &b->cap, sizeof(a->cap)) == 0;
}

static sl_table *table_for(sluice_store *st, uint32_t ssize) {
    for (unsigned i = 0; i < st->ntables; i++)
        if (st->tables[i]->ssize == ssize) return st->tables[i];
    if (st->ntables == SL_STORE_MAX_CLASSES) return NULL;
    sl_table *t = table_create(st, ssize);
    if (t != NULL) {
        __atomic_store_n(&st->tables[st->ntables], t, __ATOMIC_RELEASE);
        __atomic_store_n(&st->ntables, st->ntables + 1, __ATOMIC_RELEASE);
    }
    return t;
}

static inline unsigned char *slot_of(sl_table *t, uint32_t s, uint64_t i) {
    return t->slots + (size_t)s * t->shard_stride + (size_t)i * t->esize;
}

/*
 * Eager carry-over when a family's parameters change: with every shard of the old and
 * new tables locked (in address order), each entry of the family is carried with
 * sl_algo_carry and rewritten in place or moved to the new size class; then the new
 * version is published. Time: the store reads no clock, so the carry uses the latest
 * time any decision brought to the old table (shard last_now), which lags real time by
 * at most the idle gap before the reload. Cost: a scan of the old table while decisions
 * on it wait (a reload of a changed limit pauses its table for the scan).
 */
static void migrate(sluice_store *st, sl_family *f, sl_lver *old, sl_lver *nv) {
    sl_table *ot = old->table, *nt = nv->table;
    sluice_time t = {0, 0};
    sl_store_lock_all(st);
    for (uint32_t s = 0; s < ot->nshards; s++)
        if (ot->shards[s].last_now.mono_ns > t.mono_ns) t = ot->shards[s].last_now;
    union {
        int64_t align;
        unsigned char b[sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX];
    } next;
    for (uint32_t s = 0; s < ot->nshards; s++) {
        sl_loc oloc = {.t = ot, .sh = &ot->shards[s], .s = s, .base = slot_of(ot, s, 0)};
        for (uint64_t i = 0, n = sl_loc_nslots(&oloc); i < n;) {
            sl_ehdr *e = (sl_ehdr *)slot_of(ot, s, i);
            if (e->fam != f->id) {
                i++;
                continue;
            }
            sl_algo_carry(&old->lim, sl_entry_state(e), &nv->lim, next.b, t);
            if (nt == ot) {
                memcpy(sl_entry_state(e), next.b, nt->ssize);
                i++;
                continue;
            }
            uint64_t k0 = e->k0;
            uint16_t k1 = e->k1;
            uint32_t meta = e->meta;
            remove_counted(st, &oloc, i);
            if (!sl_table_insert_raw(st, nt, k0, k1, f->id, meta, next.b)) {
                nt->shards[k1 & nt->shard_mask].evicted++; /* new class shard full */
                atomic_fetch_add_explicit(&f->evicted, 1, memory_order_relaxed);
            }
        }
    }
    atomic_store_explicit(&f->cur, nv, memory_order_release);
    sl_store_unlock_all(st);
}

static void regmap_put(sl_regmap *m, const sluice_limiter *lim, sl_family *f) {
    uint32_t i = reg_hash(lim) & m->mask;
    for (;;) {
        const sluice_limiter *p = atomic_load_explicit(&m->slots[i].lim, memory_order_relaxed);
        if (p == NULL || p == lim) break;
        i = (i + 1) & m->mask;
    }
    atomic_store_explicit(&m->slots[i].fam, f, memory_order_release);
    atomic_store_explicit(&m->slots[i].lim, lim, memory_order_release);
}

/* Registry lock held. Grows the map (copy, publish, retire the old one) at half load. */
static int reg_add(sluice_store *st, const sluice_limiter *lim, sl_family *f) {
    sl_regmap *m = atomic_load_explicit(&st->regmap, memory_order_relaxed);
    uint32_t i = reg_hash(lim) & m->mask;
    for (;;) {
        const sluice_limiter *p = atomic_load_explicit(&m->slots[i].lim, memory_order_relaxed);
        if (p == lim) {
            atomic_store_explicit(&m->slots[i].fam, f, memory_order_release);
            return SLUICE_OK;
        }
        if (p == NULL) break;
        i = (i + 1) & m->mask;
    }
    if ((uint64_t)(st->nregs + 1) * 2 > (uint64_t)m->mask + 1) {
        if (m->mask >= (UINT32_C(1) << 30)) return SLUICE_ERANGE;
        sl_regmap *g = regmap_new((m->mask + 1) * 2);
        if (g == NULL) return SLUICE_ENOMEM;
        for (uint32_t j = 0; j <= m->mask; j++) {
            const sluice_limiter *p = atomic_load_explicit(&m->slots[j].lim, memory_order_relaxed);
            if (p != NULL)
                regmap_put(g, p, atomic_load_explicit(&m->slots[j].fam, memory_order_relaxed));
        }
        g->retired = m;
        atomic_store_explicit(&st->regmap, g, memory_order_release);
        m = g;
    }
    regmap_put(m, lim, f);
    st->nregs++;
    return SLUICE_OK;
}

int sluice_store_register(sluice_store *st, const sluice_limiter *lim) {
    if (st == NULL || lim == NULL || lim->spec.name == NULL) return SLUICE_EINVAL;
    size_t name_len = strnlen(lim->name, sizeof(lim->name));
    if (name_len == 0 || name_len >= sizeof(lim->name)) return SLUICE_EINVAL;
    int rc = SLUICE_OK;
    pthread_mutex_lock(&st->reg_lock);
    sl_family *f = sl_store_family_by_name(st, lim->name, name_len, lim->spec.index);
    sl_lver *cur = f != NULL ? f->cur : NULL;
    if (cur == NULL || !sl_limit_same(&cur->lim, &lim->lim)) {
        sl_lver *v = calloc(1, sizeof(*v));
        sl_table *t = table_for(st, lim->lim.state_size);
        if (v == NULL || t == NULL) {
            free(v);
            rc = t == NULL && st->ntables == SL_STORE_MAX_CLASSES ? SLUICE_ERANGE : SLUICE_ENOMEM;
            goto out;
        }
        v->lim = lim->lim;
        v->table = t;
        if (f == NULL) {
            /* aligned: the counters sit on their own 64-byte line */
            if (st->nfams == SL_STORE_MAX_FAMILIES ||
                (f = aligned_alloc(64, (sizeof(*f) + 63) & ~(size_t)63)) == NULL) {
                free(v);
                rc = f == NULL && st->nfams < SL_STORE_MAX_FAMILIES ? SLUICE_ENOMEM : SLUICE_ERANGE;
                goto out;
            }
            memset(f, 0, sizeof(*f));
            atomic_init(&f->keys, 0);
            atomic_init(&f->evicted, 0);
            atomic_init(&f->expired, 0);
            atomic_init(&f->refused, 0);
            f->id = (uint16_t)(st->nfams + 1);
            f->index = lim->spec.index;
            f->name_len = name_len;
            memcpy(f->name, lim->name, name_len);
            family_prefix(&st->seed, f->name, name_len, f->index, &f->prefix);
            atomic_init(&f->cur, v);
            unsigned ci = f->id / SL_STORE_FAM_CHUNK;
            _Atomic(sl_family *) *chunk = atomic_load_explicit(&st->fam_chunks[ci], memory_order_relaxed);
            if (chunk == NULL) {
                chunk = calloc(SL_STORE_FAM_CHUNK, sizeof(*chunk));
                if (chunk == NULL) {
                    free(v);
                    free(f);
                    rc = SLUICE_ENOMEM;
                    goto out;
                }
                atomic_store_explicit(&st->fam_chunks[ci], chunk, memory_order_release);
            }
            atomic_store_explicit(&chunk[f->id % SL_STORE_FAM_CHUNK], f, memory_order_release);
            if (!fam_index_add(st, f)) { /* before nfams counts it: nothing refers to it yet */
                atomic_store_explicit(&chunk[f->id % SL_STORE_FAM_CHUNK], NULL, memory_order_release);
                free(v);
                free(f);
                rc = SLUICE_ENOMEM;
                goto out;
            }
            st->nfams++;
        } else {
            v->older = cur;
            migrate(st, f, cur, v);
        }
    }
    rc = reg_add(st, lim, f);
out:
    pthread_mutex_unlock(&st->reg_lock);
    return rc;
}
