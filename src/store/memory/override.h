/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override.h -- per-key overrides as store state (docs/overrides.md): a sharded hash table
 * of records keyed by the keyed hash of (policy, identity), never limiters. Each slot also
 * records the regime the key's counters were last written under (`applied`), so a change,
 * removal or expiry carries them over lazily and exactly: the first decision under a new
 * regime carries the stored state, and a guard checked under the state's shard locks makes
 * that carry happen once. Times are wall nanoseconds.
 */
#ifndef SL_STORE_OVERRIDE_H
#define SL_STORE_OVERRIDE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "core/hash.h"
#include "sluice.h"

#define SL_OVR_MAX_WIN 4           /* windows of one `limits` override */
#define SL_OVR_DEFAULT_MAX 1000000 /* overrides.max */
#define SL_OVR_EAGAIN (-102)       /* a guard saw the override change: prepare it again */
#define SL_OVR_TOMB_NS (INT64_C(32) * 86400 * 1000000000) /* a tombstone's longest life */

typedef enum sl_ovr_kind {
    SL_OVR_NONE = 0, /* a tombstone: removed or expired, counters still under its numbers */
    SL_OVR_PLAN = 1,
    SL_OVR_LIMITS = 2,
    SL_OVR_BLOCK = 3,
    SL_OVR_EXEMPT = 4
} sl_ovr_kind;

/* The numbers of one override window: what replaces the policy window `target`'s. */
typedef struct sl_ovr_num {
    uint8_t target; /* the policy window (index) whose identity (counters) it keeps */
    uint32_t algo, state_size, quota_period;
    uint64_t limit, capacity;
    int64_t period_ns, max_delay_ns, lease_ns, emission_ns;
} sl_ovr_num;

/* One override. Strings live in the same allocation (sl_ovr_rec_new); key is NULL when
 * the raw key is not kept. Immutable once in the table; readers copy what they need
 * under the shard lock, so a record is freed by whoever removes it. */
typedef struct sl_ovr_rec {
    sl_hash128 h;
    uint64_t ver;        /* unique per table, increasing */
    uint8_t kind;        /* sl_ovr_kind */
    uint8_t nwin, nfrom;
    int64_t expires_ns;  /* 0: never */
    int64_t set_at_ns;
    int64_t dead_at_ns;  /* tombstones: when it was removed or expired */
    uint64_t from_ver;   /* the regime `from` describes (0: the policy's own numbers) */
    size_t key_len;
    char *policy, *key, *plan, *reason, *label, *set_by, *body;
    /* last: a stored record is allocated only up to what it uses (win[nwin], or from[nfrom]
     * when it has any), so a plan, block or one-window override does not pay for eight */
    sl_ovr_num win[SL_OVR_MAX_WIN];
    sl_ovr_num from[SL_OVR_MAX_WIN];
} sl_ovr_rec;

/* Strings copied into one allocation with the record (NULL stays NULL; key has key_len). */
sl_ovr_rec *sl_ovr_rec_new(const sl_ovr_rec *tmpl, const char *policy, const char *key,
                           size_t key_len, const char *plan, const char *reason,
                           const char *label, const char *set_by, const char *body);
sl_ovr_rec *sl_ovr_rec_dup(const sl_ovr_rec *r);
void sl_ovr_rec_free(sl_ovr_rec *r);
/* Whether a record applies at wall time now (a record, not a tombstone, not expired). */
static inline bool sl_ovr_live(const sl_ovr_rec *r, int64_t now_wall) {
    return r != NULL && r->kind != SL_OVR_NONE && (r->expires_ns == 0 || r->expires_ns > now_wall);
}

typedef struct sl_ovr_table sl_ovr_table;

/* Created with its store (sluice_store_create); max 0 = SL_OVR_DEFAULT_MAX. */
sl_ovr_table *sl_ovr_table_create(const sl_hash_key *seed);
void sl_ovr_table_destroy(sl_ovr_table *t);
sl_ovr_table *sl_store_overrides(sluice_store *st);
void sl_ovr_set_max(sl_ovr_table *t, uint64_t max);
uint64_t sl_ovr_max(const sl_ovr_table *t);
void sl_ovr_reseed(sl_ovr_table *t, const sl_hash_key *seed);
/* A table whose store keeps the counters elsewhere (Redis): no regimes, no tombstones; a
 * removed or expired override goes at once and the counters are read under the numbers
 * in force (what Redis does on a reload). Set before the first record. */
void sl_ovr_set_stateless(sl_ovr_table *t, bool on);

/* The identity hash: the policy name, then each part of the key (decoded bytes). */
typedef struct sl_ovr_hasher {
    unsigned char buf[8192];
    size_t len;
    bool overflow;
} sl_ovr_hasher;
void sl_ovr_hash_begin(sl_ovr_hasher *hs, const char *policy, size_t policy_len);
void sl_ovr_hash_part(sl_ovr_hasher *hs, const void *p, size_t n);
sl_hash128 sl_ovr_hash_end(const sl_ovr_table *t, const sl_ovr_hasher *hs);
/* Whole identity in one buffer (admin paths, any length): parts as len-prefixed list. */
sl_hash128 sl_ovr_hash_parts(const sl_ovr_table *t, const char *policy, const void *const *parts,
                             const size_t *lens, size_t nparts);

/* Live overrides (and tombstones) of a policy: the decision path skips the lookup at 0. */
atomic_int_fast64_t *sl_ovr_policy_count(sl_ovr_table *t, const char *policy);
uint64_t sl_ovr_count(const sl_ovr_table *t);
/* Each policy name that ever had an override, with its live count (scrape time). */
void sl_ovr_policy_each(sl_ovr_table *t, void (*fn)(void *ud, const char *policy, int64_t n),
                        void *ud);
uint64_t sl_ovr_slots(const sl_ovr_table *t); /* records and tombstones (admin paths) */
void sl_ovr_clear(sl_ovr_table *t);

/*
 * Stores `rec` (taken over on SLUICE_OK): *created true when there was no live override;
 * *old receives the record it replaced (the caller frees it; NULL when none or a
 * tombstone). SLUICE_EFULL beyond overrides.max (rec not taken).
 */
int sl_ovr_put(sl_ovr_table *t, sl_ovr_rec *rec, int64_t now_wall, bool *created,
               sl_ovr_rec **old);
/* A copy of the live override, or NULL (none, expired). */
sl_ovr_rec *sl_ovr_get(sl_ovr_table *t, sl_hash128 h, int64_t now_wall);
/* Removes the live override: SLUICE_OK with *old (caller frees), SLUICE_ENOTFOUND. Its
 * counters' regime stays as a tombstone until a decision carries them back. */
int sl_ovr_del(sl_ovr_table *t, sl_hash128 h, int64_t now_wall, sl_ovr_rec **old);

/* What a decision copies out (under the shard lock; nothing is held after). */
typedef struct sl_ovr_view {
    bool found;        /* a slot exists (record or tombstone) */
    bool live;         /* it applies now */
    uint8_t kind;
    uint64_t ver, applied;
    uint8_t nwin, nfrom;
    uint64_t from_ver;
    sl_ovr_num win[SL_OVR_MAX_WIN];
    sl_ovr_num from[SL_OVR_MAX_WIN]; /* numbers of regime `applied` when it is not ver/0 */
    char plan[64];
    char label[64];
} sl_ovr_view;
bool sl_ovr_lookup(sl_ovr_table *t, sl_hash128 h, int64_t now_wall, sl_ovr_view *out);

/* A decision's claim: the slot still holds record `ver` with counters in regime
 * `applied`; if so they move to `next` (0: the policy's own numbers) and a tombstone whose
 * counters are back is dropped. Taken under the state's shard locks (store/decide.c), so
 * the carry it authorises happens exactly once. SL_OVR_EAGAIN when the slot changed. */
typedef struct sl_ovr_guard {
    sl_ovr_table *t;
    sl_hash128 h;
    uint64_t ver, applied, next;
} sl_ovr_guard;
int sl_ovr_guard_take(const sl_ovr_guard *g);

/* A decision that lost its claim several times in a row counts itself in (+1) until it
 * ends (-1): while any is counted, changes (put, del, sweep) wait for it, at most 2 ms
 * each, so a change storm on one key cannot starve its decisions. NULL t: nothing. */
void sl_ovr_starving(sl_ovr_table *t, int d);

/* Expired records become tombstones (or go, when their counters never moved); old
 * tombstones go. Returns how many records changed. */
size_t sl_ovr_sweep(sl_ovr_table *t, int64_t now_wall);

/* Every live override in hash order after `cursor` (has_cursor false: from the start), at
 * most `limit`, optionally of one policy; each copied into out (caller frees each and
 * the array). Returns the number; *more when others follow. */
size_t sl_ovr_page(sl_ovr_table *t, bool has_cursor, sl_hash128 cursor, size_t limit,
                   const char *policy, int64_t now_wall, sl_ovr_rec ***out, bool *more);
/* Calls fn for each live override (a copy under no lock: slot by slot). */
void sl_ovr_each(sl_ovr_table *t, int64_t now_wall, void (*fn)(void *ud, const sl_ovr_rec *r),
                 void *ud);

/* Resumable walk in table order from (*shard, *slot): calls fn for at most `max` live
 * overrides (copies) and moves the position on; false once the table is walked. Not a
 * snapshot: an override set or removed meanwhile may be seen or not (a shard that grows
 * meanwhile may be walked in its new order). */
bool sl_ovr_scan(sl_ovr_table *t, unsigned *shard, uint32_t *slot, size_t max, int64_t now_wall,
                 void (*fn)(void *ud, const sl_ovr_rec *r), void *ud);

/* Snapshot section (store/snapshot.c): appends/reads every slot, tombstones included. */
typedef struct sl_ovr_wbuf {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} sl_ovr_wbuf;
/* Appends n bytes (on out of memory: oom set, later appends ignored); an unsigned number
 * in `bytes` little-endian bytes. The snapshot's own sections are written with them too. */
void sl_ovr_wput(sl_ovr_wbuf *w, const void *src, size_t n);
void sl_ovr_wu(sl_ovr_wbuf *w, uint64_t v, int bytes);
void sl_ovr_encode(sl_ovr_table *t, sl_ovr_wbuf *w);
/* Validates and loads a section (the table must be empty; t NULL: validates only):
 * SLUICE_ECORRUPT with a reason. */
int sl_ovr_decode(sl_ovr_table *t, const unsigned char *p, size_t len, char *eb, size_t ebn);

#endif /* SL_STORE_OVERRIDE_H */
