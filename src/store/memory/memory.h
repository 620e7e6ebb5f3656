/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory.h -- the memory store's internals, shared by store/memory.c (tables, registry,
 * pressure), engine/decide.c (decisions) and store/snapshot.c. Not public API.
 *
 * Layout: one table per state size ("class"), created when the first limiter of that
 * size registers; each table is split into power-of-two shards, each shard a linear-
 * probing array of fixed-size entries guarded by its own spinlock. An entry is a 16-byte
 * header (80 bits of the key's 128-bit hash, the limiter family, the eviction hints)
 * followed by the algorithm's state. Invariants: an entry's shard is k1 & shard_mask and
 * its home slot is k0 scaled to the shard's current size (nslots >> shift[s]); a slot is
 * empty iff fam == 0, and every slot beyond the current size is zero (never written);
 * every field of a shard's slots, its shift and struct sl_shard is written only under
 * that shard's lock (the shift is read without it only as a prefetch hint).
 * Growth: a shard starts small and doubles (rehashed under its lock, within the region
 * reserved for it at its full size) when an insert would take it past the table's load,
 * so memory follows the keys held, not max_keys (see shard_grow in memory.c).
 */
#ifndef SL_STORE_MEMORY_H
#define SL_STORE_MEMORY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "core/hash.h"
#include "algo/limiter.h"
#include "sluice.h"

#define SL_STORE_MAX_FAMILIES 16383 /* distinct limiter name+index per store */
#define SL_STORE_FAM_CHUNK 256      /* family pointers are allocated in chunks of this many */
#define SL_STORE_MAX_CLASSES 16     /* distinct state sizes */
#define SL_STORE_SCAN 64            /* slots the pressure scan examines per attempt */
#define SL_STORE_SMALL_STATE 32     /* states up to this size get per-item scratch in decide */

/* ---- entries ---------------------------------------------------------------------- */

typedef struct sl_ehdr {
    uint64_t k0;   /* hash word hi: picks the home slot, compared in full */
    uint16_t k1;   /* low 16 bits of hash word lo: its low bits pick the shard */
    uint16_t fam;  /* limiter family id; 0 = empty slot */
    uint32_t meta; /* eviction hints, see SL_META_* */
} sl_ehdr;

/*
 * Eviction hints, rewritten at every decision on the entry (sl_entry_touch), so that
 * pressure handling can rank entries without running their algorithm:
 *   bits 31..9  stamp: last use, monotonic ns >> SL_STAMP_SHIFT (16.8 ms units), mod 2^23
 *               (ages wrap after 39 hours; an entry that old looks younger: it is kept
 *               longer, never dropped as fresh without its algorithm agreeing)
 *   bit  8      limited: the last decision left nothing remaining
 *   bit  7      used again: decided at least twice (a key seen once is what a key flood
 *               is made of)
 *   bit  6      used: decided at least once (0 only between insert and first touch)
 *   bits 5..0   fresh: the bit length of reset_after in ns at that use, so the state is
 *               fresh 2^fresh - 1 ns after it at the latest (an upper bound, at most 2x)
 */
#define SL_STAMP_SHIFT 24
#define SL_STAMP_MASK UINT32_C(0x7FFFFF)
#define SL_META_LIMITED (UINT32_C(1) << 8)
#define SL_META_AGAIN (UINT32_C(1) << 7)
#define SL_META_USED (UINT32_C(1) << 6)
#define SL_META_USES (SL_META_AGAIN | SL_META_USED)
#define SL_META_FRESH UINT32_C(63)

static inline uint32_t sl_stamp(int64_t mono_ns) {
    return (uint32_t)((uint64_t)mono_ns >> SL_STAMP_SHIFT) & SL_STAMP_MASK;
}

/* The bit length of a reset-after in ns, at least 1 (never negative; a negative one would
 * read as 64: pessimistic, never wrong). */
static inline uint32_t sl_fresh_bits(int64_t ns) {
    return 64u - (uint32_t)__builtin_clzll((uint64_t)ns | 1);
}

/* Records a use of entry `e` at `mono_ns` whose decision left the state fresh again
 * reset_after_ns later; `limited` when it left nothing remaining. Why so terse: it runs
 * on every decision (about a dozen instructions, on a line the decision writes anyway):
 * "used again" is the "used" bit moved up, the fresh hint a single bit scan. */
static inline void sl_entry_touch(void *e, int64_t mono_ns, bool limited, int64_t reset_after_ns) {
    sl_ehdr *h = e;
    uint32_t m = h->meta;
    h->meta = ((uint32_t)((uint64_t)mono_ns >> (SL_STAMP_SHIFT - 9)) & ~UINT32_C(0x1FF)) |
              ((uint32_t)limited << 8) | ((m << 1) & SL_META_AGAIN) | SL_META_USED |
              sl_fresh_bits(reset_after_ns);
}

static inline void *sl_entry_state(void *e) {
    return (unsigned char *)e + sizeof(sl_ehdr);
}

/* ---- tables and shards ------------------------------------------------------------ */

typedef struct sl_shard {
    _Alignas(64) atomic_uint lock;
    uint32_t count;    /* entries held */
    uint32_t reserved; /* room promised to inserts of the decision in progress */
    uint32_t hand;     /* pressure scans: state of the generator of window places */
    sluice_time last_now; /* latest time a decision brought here (register's carry) */
    uint64_t expired, evicted, refused; /* evicted: non-fresh entries only */
} sl_shard;

typedef struct sl_table {
    uint32_t ssize;      /* state bytes */
    uint32_t esize;      /* entry bytes: sizeof(sl_ehdr) + ssize */
    uint32_t nshards, shard_mask;
    uint64_t nslots;     /* per shard at its full size (what max_keys needs) */
    size_t shard_stride; /* bytes reserved per shard: nslots * esize rounded up to pages */
    uint64_t hard_cap;   /* per shard at full size: at most this many entries (load <= 0.85);
                          * at size nslots >> k, at most hard_cap >> k before it grows */
    unsigned char *slots; /* nshards regions of shard_stride bytes (address space reserved,
                           * pages faulted in as shards grow), zero = empty */
    size_t slots_bytes;
    _Atomic(uint8_t) *shift; /* per shard: its current size is nslots >> shift[s] */
    atomic_uint full_shards; /* shards grown to full size (huge pages once all are) */
    sl_shard *shards;
    /* growth scratch (shard_grow): room for the largest copy a doubling makes (half a shard
     * at full size), reserved with the table so that a decision never allocates; one per
     * table, taken under grow_lock by the shard that grows (shard lock, then grow_lock) */
    unsigned char *grow_buf;
    size_t grow_bytes;
    atomic_int grow_lock;
} sl_table;

/* One set of parameters of a family (a re-registration with other parameters makes a
 * new version; old ones are kept until the store is destroyed). */
typedef struct sl_lver {
    sl_limit lim;
    sl_table *table;
    struct sl_lver *older;
} sl_lver;

/* A limiter identity: name + index. Its counters sit on their own line: they change on
 * inserts and removals (pressure), never on decisions about stored keys. */
typedef struct sl_family {
    uint16_t id;
    uint32_t index;
    size_t name_len;
    char name[256];
    sl_sip prefix; /* SipHash state after the 16-byte identity of (name, index) */
    _Atomic(sl_lver *) cur;
    _Alignas(64) atomic_int_fast64_t keys; /* entries held + room reserved for it */
    atomic_uint_fast64_t evicted, expired, refused;
} sl_family;

typedef struct sl_reg {
    _Atomic(const sluice_limiter *) lim;
    _Atomic(sl_family *) fam;
} sl_reg;

/* The pointer map from registered limiter objects to families: open addressing, load
 * <= 1/2, replaced by a copy twice the size when it fills (the old copy stays allocated
 * until the store is destroyed, so lock-free readers never see freed memory). */
typedef struct sl_regmap {
    uint32_t mask;
    struct sl_regmap *retired;
    sl_reg slots[];
} sl_regmap;

struct sluice_store {
    sl_hash_key seed;
    uint64_t max_keys;
    sluice_on_full on_full;
    unsigned shards_opt;
    _Alignas(64) atomic_uint_fast64_t keys; /* entries held + reserved, all tables */
    atomic_uint active_fams;                 /* families holding keys (their shares) */
    _Alignas(64) pthread_mutex_t reg_lock;  /* registry changes only, never decisions */
    sl_table *tables[SL_STORE_MAX_CLASSES];
    unsigned ntables;
    _Atomic(_Atomic(sl_family *) *) fam_chunks[SL_STORE_MAX_FAMILIES / SL_STORE_FAM_CHUNK + 1];
    unsigned nfams;
    /* families by (name, index), under reg_lock: open addressing of ids, load <= 1/2
     * (registering 10,000 limiters was quadratic with a scan per name) */
    uint16_t *fam_index;
    size_t fam_index_cap;
    _Atomic(sl_regmap *) regmap;
    unsigned nregs;
    struct sl_ovr_table *ovr; /* per-key overrides (store/override.c) */
};

/* A key's position: which table and shard, where probing starts, what to compare. */
typedef struct sl_loc {
    sl_table *t;
    sl_shard *sh;
    unsigned char *base; /* first slot of the shard */
    uint32_t s;          /* the shard's index in its table */
    uint64_t hint;       /* the home slot as located (unlocked): a prefetch hint only */
    uint64_t k0;
    uint16_t k1;
    uint16_t fam;
} sl_loc;

/* ---- hashing ---------------------------------------------------------------------- */

/* The hash of (name, index, key) exactly as the store computes it (tests, tools). */
sl_hash128 sl_store_key_hash(const sl_hash_key *seed, const char *name, size_t name_len,
                             uint32_t index, const void *key, size_t key_len);

static inline sl_hash128 sl_family_hash(const sl_family *f, const void *key, size_t len) {
    return sl_sip_finish_store(&f->prefix, key, len);
}

/* Recomputes every family's prefix after the seed changed (restore into an empty store). */
void sl_store_reseed(sluice_store *st, const sl_hash_key *seed);

/* ---- registry --------------------------------------------------------------------- */

/* The family of a registered limiter, or NULL. Lock-free; safe against concurrent
 * registration. */
sl_family *sl_store_family_of(sluice_store *st, const sluice_limiter *lim);
sl_family *sl_store_family_by_name(sluice_store *st, const char *name, size_t name_len,
                                   uint32_t index);
/* Same compiled parameters (what decides whether a re-registration carries state). */
bool sl_limit_same(const sl_limit *a, const sl_limit *b);
static inline sl_lver *sl_family_cur(sl_family *f) {
    return atomic_load_explicit(&f->cur, memory_order_acquire);
}
static inline sl_family *sl_store_family(sluice_store *st, uint16_t id) {
    _Atomic(sl_family *) *c =
        atomic_load_explicit(&st->fam_chunks[id / SL_STORE_FAM_CHUNK], memory_order_acquire);
    return c != NULL ? atomic_load_explicit(&c[id % SL_STORE_FAM_CHUNK], memory_order_acquire)
                     : NULL;
}

/* ---- prefetch ---------------------------------------------------------------------- */

/* Starts fetching the line of `p` for writing. Why not __builtin_prefetch(p, 1): without
 * -mprfchw GCC emits a read prefetch, so a line another core holds modified arrives
 * shared and the write that follows (lock exchange, state update) needs a second round
 * trip to take ownership. PREFETCHW exists on every x86-64 CPU that matters here (and
 * older Intel cores execute it as a NOP), so it is used directly. */
static inline void sl_prefetch_w(const void *p) {
#if defined(__x86_64__) && defined(__GNUC__)
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 1);
#endif
}

/* ---- locks ------------------------------------------------------------------------ */

void sl_shard_lock_slow(sl_shard *sh);
/* Inlined fast path: one atomic exchange when the lock is free (see memory.c). */
static inline void sl_shard_lock(sl_shard *sh) {
    if (!atomic_exchange_explicit(&sh->lock, 1, memory_order_acquire)) return;
    sl_shard_lock_slow(sh);
}
static inline void sl_shard_unlock(sl_shard *sh) {
    atomic_store_explicit(&sh->lock, 0, memory_order_release);
}
/* Locks every shard of every table in address order (register, snapshot, restore). */
void sl_store_lock_all(sluice_store *st);
void sl_store_unlock_all(sluice_store *st);

/* ---- table operations (caller holds the shard lock) ------------------------------- */

/* Slot k0 probes from in a shard of n slots (k0 scaled: a doubling maps h to 2h or 2h+1). */
static inline uint64_t sl_home(uint64_t k0, uint64_t n) {
    return (uint64_t)(((unsigned __int128)k0 * n) >> 64);
}

/* The current size of loc's shard (exact under its lock; a hint without it). */
static inline uint64_t sl_loc_nslots(const sl_loc *loc) {
    return loc->t->nslots >> atomic_load_explicit(&loc->t->shift[loc->s], memory_order_relaxed);
}

static inline void sl_table_locate(sl_table *t, sl_hash128 h, uint16_t fam, sl_loc *loc) {
    uint16_t k1 = (uint16_t)h.lo;
    uint32_t s = k1 & t->shard_mask;
    loc->t = t;
    loc->sh = &t->shards[s];
    loc->s = s;
    loc->base = t->slots + (size_t)s * t->shard_stride;
    loc->k0 = h.hi;
    loc->k1 = k1;
    loc->hint = sl_home(h.hi, sl_loc_nslots(loc));
    loc->fam = fam;
}

/* The entry of loc's key, or NULL: linear probing from the home slot to an empty one
 * (the shard's lock held: its size is read here, so a growth since locate is seen). */
static inline void *sl_table_find(const sl_loc *loc) {
    const sl_table *t = loc->t;
    uint64_t n = sl_loc_nslots(loc), i = sl_home(loc->k0, n);
    unsigned char *p = loc->base + (size_t)i * t->esize;
    for (;;) {
        sl_ehdr *e = (sl_ehdr *)p;
        if (e->fam == 0) return NULL;
        if (e->k0 == loc->k0 && e->k1 == loc->k1 && e->fam == loc->fam) return e;
        if (++i == n) {
            i = 0;
            p = loc->base;
        } else {
            p += t->esize;
        }
    }
}

/* Room for one new entry in loc's shard: reserves it (global, family and shard counts),
 * first dropping fresh-equivalent entries, then evicting (the cheapest entry the family
 * may take: see memory.c) or refusing per on_full. Entries matching `keep` (the other
 * keys of the decision) are never dropped. *moved is set when entries of loc's shard
 * moved (pointers from sl_table_find are then stale). SLUICE_OK or SLUICE_EFULL. */
typedef struct sl_keep {
    uint64_t k0;
    uint16_t k1;
    uint16_t fam;
} sl_keep;
int sl_store_reserve(sluice_store *st, const sl_loc *loc, sluice_time now, const sl_keep *keep,
                     size_t nkeep, bool *moved);
void sl_store_unreserve(sluice_store *st, const sl_loc *loc);
/* Inserts (room reserved); returns the entry with its state uninitialised and its hints
 * cleared (the caller writes the state, then calls sl_entry_touch). May reuse a
 * fresh-equivalent slot on the probe path (counted as expired). */
void *sl_table_insert(sluice_store *st, const sl_loc *loc, sluice_time now);
/* Removes the entry `e` (backward-shift deletion: no tombstones). */
void sl_table_remove(sluice_store *st, const sl_loc *loc, void *e);

/* Restore path: inserts without pressure handling (counted for its family); false when
 * the shard is full or the key is there already. */
bool sl_table_insert_raw(sluice_store *st, sl_table *t, uint64_t k0, uint16_t k1, uint16_t fam,
                         uint32_t meta, const void *state);

/* Hints for an entry whose state is `state` at `now`, last used `age` stamp units ago
 * (restore, migration): the limited bit and use count as given, fresh from the algorithm. */
uint32_t sl_entry_meta(const sl_limit *lim, const void *state, sluice_time now, uint32_t age,
                       uint32_t uses_limited);

/* Family counters (insert/remove paths; relaxed atomics). */
void sl_store_count(sluice_store *st, uint16_t fam, int delta);

/* Restore from memory (the fuzz target's entry point; sluice_store_restore reads the
 * file and calls this). Same contract as sluice_store_restore. */
int sl_store_restore_buf(sluice_store *st, const uint8_t *buf, size_t len, sluice_time now,
                         uint64_t *skipped, char *errbuf, size_t errbuf_len);

/* Rewrites the last 16 bytes of a snapshot image with the checksum of the bytes before
 * them (the fuzz target uses it so that mutations reach the parser behind the checksum). */
void sl_snapshot_seal(uint8_t *buf, size_t len);

#endif /* SL_STORE_MEMORY_H */
