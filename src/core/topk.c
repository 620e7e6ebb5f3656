/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topk.c -- the hot-key sketch (see topk.h): weighted space-saving over k fixed counters,
 * a min-heap of counters by weight (the one to replace is at the root) and an open-addressed
 * index from key hash to counter, twice: the current epoch and the previous one.
 * Invariants: in one epoch the counters' weights sum to the epoch's total weight; a key
 * holds at most one counter; nothing allocates after sl_topk_create. Only the writer
 * touches the heap and the index; counters and totals are stored with relaxed atomic
 * stores and a counter whose key changes is bracketed by its sequence number, so a reader
 * on another thread never sees one key with another key's weight.
 */
#include "core/topk.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

#define EPOCH_NONE INT64_MIN         /* never written */
#define EPOCH_CLEARING (INT64_MIN + 1) /* being emptied for a new epoch */

typedef struct tk_slot {
    uint64_t seq; /* odd while the writer gives this counter to another key */
    uint64_t key, weight, error, rejected;
    uint64_t raw_len; /* bytes, | 1 << 32 when the key was cut */
} tk_slot;

typedef struct tk_heap {
    uint64_t weight; /* the writer's copy, next to the heap for locality */
    uint32_t slot, pad;
} tk_heap;

typedef struct tk_idx {
    uint64_t key;
    uint32_t slot1; /* slot + 1; 0: empty */
    uint32_t pad;
} tk_idx;

typedef struct tk_bank {
    int64_t epoch; /* epoch number (now / interval), or EPOCH_* */
    uint64_t used, total_w, total_rej, updates;
    tk_slot *slots;
    uint64_t *raw; /* k * raw_words */
    tk_heap *heap; /* used entries, min-heap on weight */
    uint32_t *pos; /* slot -> heap position */
    tk_idx *idx;   /* idx_mask + 1 entries */
} tk_bank;

struct sl_topk {
    uint32_t k, raw_bytes, raw_words, idx_mask;
    int idx_shift;
    int64_t interval;
    int64_t cur_end; /* writer: end of the current epoch (ns) */
    unsigned cur;    /* writer: which bank is current */
    size_t bytes;
    tk_bank bank[2];
};

static uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t s = a + b;
    return s < a ? UINT64_MAX : s;
}

uint64_t sl_topk_key_hash(const sl_hash_key *k, const void *key, size_t len) {
    return sl_hash128_of(k, key, len).lo;
}

/* ---- lifetime --------------------------------------------------------------------------- */

int sl_topk_create(sl_topk **out, const sl_topk_config *c) {
    *out = NULL;
    if (c == NULL || c->counters < SL_TOPK_MIN || c->counters > SL_TOPK_MAX || c->interval_ns <= 0 ||
        c->raw_key_bytes > SL_TOPK_RAW_MAX)
        return SLUICE_EINVAL;
    sl_topk *t = calloc(1, sizeof(*t));
    if (t == NULL) return SLUICE_ENOMEM;
    t->k = c->counters;
    t->raw_bytes = c->raw_key_bytes;
    t->raw_words = (c->raw_key_bytes + 7) / 8;
    uint32_t isz = 16;
    while (isz < 2 * t->k) isz <<= 1;
    t->idx_mask = isz - 1;
    t->idx_shift = 64 - __builtin_ctz(isz);
    t->interval = c->interval_ns;
    t->cur_end = INT64_MIN;
    t->bytes = sizeof(*t);
    for (int b = 0; b < 2; b++) {
        tk_bank *bk = &t->bank[b];
        bk->epoch = EPOCH_NONE;
        bk->slots = calloc(t->k, sizeof(tk_slot));
        bk->heap = calloc(t->k, sizeof(tk_heap));
        bk->pos = calloc(t->k, sizeof(uint32_t));
        bk->idx = calloc(isz, sizeof(tk_idx));
        bk->raw = t->raw_words ? calloc((size_t)t->k * t->raw_words, 8) : NULL;
        if (!bk->slots || !bk->heap || !bk->pos || !bk->idx || (t->raw_words && !bk->raw)) {
            sl_topk_destroy(t);
            return SLUICE_ENOMEM;
        }
        t->bytes += t->k * (sizeof(tk_slot) + sizeof(tk_heap) + sizeof(uint32_t) + 8 * t->raw_words) +
                    isz * sizeof(tk_idx);
    }
    *out = t;
    return 0;
}

void sl_topk_destroy(sl_topk *t) {
    if (t == NULL) return;
    for (int b = 0; b < 2; b++) {
        free(t->bank[b].slots);
        free(t->bank[b].heap);
        free(t->bank[b].pos);
        free(t->bank[b].idx);
        free(t->bank[b].raw);
    }
    free(t);
}

size_t sl_topk_bytes(const sl_topk *t) {
    return t->bytes;
}

/* ---- the writer: index, heap, epochs --------------------------------------------------- */

static uint32_t idx_home(const sl_topk *t, uint64_t key) {
    return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> t->idx_shift);
}

static uint32_t idx_find(const sl_topk *t, const tk_bank *b, uint64_t key, uint32_t *at) {
    for (uint32_t i = idx_home(t, key);; i = (i + 1) & t->idx_mask) {
        const tk_idx *e = &b->idx[i];
        if (e->slot1 == 0) return *at = i, 0;
        if (e->key == key) return *at = i, e->slot1;
    }
}

/* Linear probing without tombstones: a deleted entry's followers that would no longer
 * be found from their home are shifted back into the hole. Returns the one position
 * left empty. */
static uint32_t idx_del(const sl_topk *t, tk_bank *b, uint32_t i) {
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & t->idx_mask;
        if (b->idx[j].slot1 == 0) break;
        uint32_t h = idx_home(t, b->idx[j].key);
        int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays) continue;
        b->idx[i] = b->idx[j];
        i = j;
    }
    b->idx[i].slot1 = 0;
    return i;
}

/* The heap is 4-ary (half the levels of a binary heap, the four children of a node share
 * a cache line) and moves a hole rather than swapping: each level costs one compare
 * chain and one write, the moved entry is written once at its place. */
static void sift_up(tk_bank *b, uint32_t i) {
    tk_heap x = b->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 4;
        if (b->heap[p].weight <= x.weight) break;
        b->heap[i] = b->heap[p];
        b->pos[b->heap[i].slot] = i;
        i = p;
    }
    b->heap[i] = x;
    b->pos[x.slot] = i;
}

static void sift_down(tk_bank *b, uint32_t i, uint32_t n) {
    tk_heap x = b->heap[i];
    for (;;) {
        uint32_t c = 4 * i + 1;
        if (c >= n) break;
        uint32_t m;
        uint64_t wm;
        if (c + 4 <= n) { /* all four children: a tournament the compiler turns into cmovs */
            const tk_heap *h = &b->heap[c];
            uint32_t a = h[1].weight < h[0].weight, d = 2 + (h[3].weight < h[2].weight);
            m = h[d].weight < h[a].weight ? d : a;
            wm = h[m].weight;
            m += c;
        } else {
            m = c;
            for (uint32_t j = c + 1; j < n; j++) m = b->heap[j].weight < b->heap[m].weight ? j : m;
            wm = b->heap[m].weight;
        }
        if (x.weight <= wm) break;
        b->heap[i] = b->heap[m];
        b->pos[b->heap[i].slot] = i;
        i = m;
    }
    b->heap[i] = x;
    b->pos[x.slot] = i;
}

/* Empties a bank for epoch e. Readers see EPOCH_CLEARING (or a new epoch number) around
 * it and drop what they read of this bank. O(k): once per interval per sketch. */
static void bank_clear(const sl_topk *t, tk_bank *b, int64_t e) {
    ST(&b->epoch, EPOCH_CLEARING);
    atomic_thread_fence(memory_order_release);
    ST(&b->used, 0);
    ST(&b->total_w, 0);
    ST(&b->total_rej, 0);
    ST(&b->updates, 0);
    memset(b->idx, 0, (size_t)(t->idx_mask + 1) * sizeof(tk_idx)); /* writer-only */
    __atomic_store_n(&b->epoch, e, __ATOMIC_RELEASE);
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static void rotate(sl_topk *t, int64_t now) {
    int64_t e = floor_div(now, t->interval);
    tk_bank *c = &t->bank[t->cur];
    if (c->epoch == e - 1) { /* the current epoch ended: it becomes the previous one */
        t->cur ^= 1;
        bank_clear(t, &t->bank[t->cur], e);
    } else { /* idle for two epochs or more (or the first update) */
        bank_clear(t, &t->bank[t->cur ^ 1], e - 1);
        bank_clear(t, c, e);
    }
    t->cur_end = (e + 1) * t->interval;
}

static void store_raw(const sl_topk *t, tk_bank *b, tk_slot *s, uint32_t slot, const void *raw,
                      size_t raw_len) {
    if (t->raw_words == 0) return;
    size_t n = raw && raw_len ? raw_len : 0;
    uint64_t trunc = n > t->raw_bytes;
    if (trunc) n = t->raw_bytes;
    uint64_t *dst = b->raw + (size_t)slot * t->raw_words;
    for (uint32_t w = 0; w < t->raw_words; w++) {
        uint64_t v = 0;
        size_t off = (size_t)w * 8;
        if (off < n) memcpy(&v, (const char *)raw + off, n - off < 8 ? n - off : 8);
        ST(&dst[w], v);
    }
    ST(&s->raw_len, (uint64_t)n | trunc << 32);
}

/* The update. A tracked key grows in place (its heap entry only moves down, towards
 * heavier entries); an untracked key takes a free counter or the lightest one, inheriting
 * its weight as error (the space-saving rule, which keeps every key heavier than total/k). */
void sl_topk_add(sl_topk *t, int64_t now_ns, uint64_t key_hash, const void *raw, size_t raw_len,
                 uint64_t weight, int rejected) {
    if (now_ns >= t->cur_end) rotate(t, now_ns);
    tk_bank *b = &t->bank[t->cur];
    uint64_t rej = rejected ? 1 : 0;
    ST(&b->total_w, sat_add(b->total_w, weight));
    ST(&b->total_rej, b->total_rej + rej);
    ST(&b->updates, b->updates + 1);
    uint32_t at, slot1 = idx_find(t, b, key_hash, &at);
    uint32_t used = (uint32_t)b->used;
    if (slot1 != 0) {
        tk_slot *s = &b->slots[slot1 - 1];
        ST(&s->weight, sat_add(s->weight, weight));
        if (rej) ST(&s->rejected, s->rejected + 1);
        uint32_t p = b->pos[slot1 - 1];
        b->heap[p].weight = s->weight;
        sift_down(b, p, used);
        return;
    }
    uint32_t slot;
    uint64_t base;
    if (used < t->k) {
        slot = used;
        base = 0;
        b->heap[used] = (tk_heap){weight, slot, 0};
        b->pos[slot] = used;
    } else {
        slot = b->heap[0].slot;
        base = b->heap[0].weight;
        uint32_t old;
        idx_find(t, b, b->slots[slot].key, &old);
        uint32_t hole = idx_del(t, b, old);
        /* Every position from the new key's home up to `at` was taken; if the one just
         * emptied is among them, the new key's probe now stops there. */
        uint32_t home = idx_home(t, key_hash);
        if (((hole - home) & t->idx_mask) < ((at - home) & t->idx_mask)) at = hole;
    }
    tk_slot *s = &b->slots[slot];
    uint64_t seq = s->seq;
    ST(&s->seq, seq + 1);
    atomic_thread_fence(memory_order_release);
    ST(&s->key, key_hash);
    ST(&s->weight, sat_add(base, weight));
    ST(&s->error, base);
    ST(&s->rejected, rej);
    store_raw(t, b, s, slot, raw, raw_len);
    __atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
    b->idx[at] = (tk_idx){key_hash, slot + 1, 0};
    if (used < t->k) {
        ST(&b->used, (uint64_t)used + 1);
        sift_up(b, used);
    } else {
        b->heap[0].weight = s->weight;
        sift_down(b, 0, used);
    }
}

/* ---- readers ------------------------------------------------------------------------------ */

typedef struct rd_entry {
    uint64_t key, weight, error, rejected, raw_len;
    uint32_t bank;
    char raw[SL_TOPK_RAW_MAX];
} rd_entry;

typedef struct rd_bank {
    uint64_t min_if_full; /* a key absent from a full bank may have weighed up to this */
} rd_bank;

/* One counter, consistently (its sequence number unchanged and even around the copy). */
static int read_slot(const sl_topk *t, const tk_bank *b, uint32_t i, rd_entry *e) {
    const tk_slot *s = &b->slots[i];
    for (int tries = 0; tries < 64; tries++) {
        uint64_t s1 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1) continue;
        e->key = LD(&s->key);
        e->weight = LD(&s->weight);
        e->error = LD(&s->error);
        e->rejected = LD(&s->rejected);
        e->raw_len = t->raw_words ? LD(&s->raw_len) : 0;
        for (uint32_t w = 0; w < t->raw_words; w++) {
            uint64_t v = LD(&b->raw[(size_t)i * t->raw_words + w]);
            memcpy(e->raw + 8 * w, &v, 8);
        }
        atomic_thread_fence(memory_order_acquire);
        if (LD(&s->seq) == s1) return 1;
    }
    return 0;
}

static int cmp_key_bank(const void *a, const void *b) {
    const rd_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->bank < y->bank ? -1 : x->bank > y->bank;
}

static int cmp_weight(const void *a, const void *b) {
    const sl_topk_entry *x = a, *y = b;
    if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
    return x->key_hash < y->key_hash ? -1 : x->key_hash > y->key_hash;
}

int sl_topk_read(sl_topk *const *sk, size_t n, int64_t now_ns, sl_topk_entry *out, size_t max,
                 sl_topk_totals *tot) {
    memset(tot, 0, sizeof(*tot));
    tot->from_ns = now_ns;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) cap += 2 * (size_t)sk[i]->k;
    rd_entry *all = malloc((cap ? cap : 1) * sizeof(rd_entry));
    rd_bank *banks = malloc((n ? 2 * n : 1) * sizeof(rd_bank));
    if (all == NULL || banks == NULL) {
        free(all);
        free(banks);
        return SLUICE_ENOMEM;
    }
    size_t na = 0, nb = 0;
    uint64_t full_min_sum = 0;
    for (size_t i = 0; i < n; i++) {
        const sl_topk *t = sk[i];
        int64_t e_now = floor_div(now_ns, t->interval);
        for (int bi = 0; bi < 2; bi++) {
            const tk_bank *b = &t->bank[bi];
            for (int attempt = 0; attempt < 4; attempt++) {
                int64_t ep = __atomic_load_n(&b->epoch, __ATOMIC_ACQUIRE);
                if (ep != e_now && ep != e_now - 1) break; /* stale, never used, or clearing */
                uint64_t used = LD(&b->used), tw = LD(&b->total_w), tr = LD(&b->total_rej),
                         up = LD(&b->updates);
                if (used > t->k) used = t->k;
                size_t start = na;
                uint64_t mn = UINT64_MAX;
                for (uint32_t s = 0; s < used; s++) {
                    rd_entry *e = &all[na];
                    if (!read_slot(t, b, s, e)) continue;
                    e->bank = (uint32_t)nb;
                    if (e->weight < mn) mn = e->weight;
                    na++;
                }
                atomic_thread_fence(memory_order_acquire);
                if (LD(&b->epoch) != ep) { /* cleared under us: read it again */
                    na = start;
                    continue;
                }
                banks[nb].min_if_full = used == t->k ? mn : 0;
                full_min_sum += banks[nb].min_if_full;
                nb++;
                tot->weight = sat_add(tot->weight, tw);
                tot->rejected += tr;
                tot->updates += up;
                if (ep * t->interval < tot->from_ns) tot->from_ns = ep * t->interval;
                break;
            }
        }
    }
    qsort(all, na, sizeof(rd_entry), cmp_key_bank);
    /* Groups of one key: the same bank twice (the key was replaced and came back during
     * the scan) keeps the larger count; different banks add up. */
    size_t nout = 0;
    sl_topk_entry *res = malloc((na ? na : 1) * sizeof(sl_topk_entry));
    if (res == NULL) {
        free(all);
        free(banks);
        return SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < na;) {
        size_t j = i;
        sl_topk_entry r;
        memset(&r, 0, sizeof(r));
        r.key_hash = all[i].key;
        uint64_t lo = 0, present_full_min = 0;
        while (j < na && all[j].key == all[i].key) {
            const rd_entry *e = &all[j];
            size_t k = j + 1;
            while (k < na && all[k].key == e->key && all[k].bank == e->bank) {
                if (all[k].weight > e->weight) e = &all[k];
                k++;
            }
            r.weight = sat_add(r.weight, e->weight);
            lo = sat_add(lo, e->weight - (e->error < e->weight ? e->error : e->weight));
            r.rejected += e->rejected;
            present_full_min += banks[e->bank].min_if_full;
            if (r.raw_len == 0 && (e->raw_len & 0xffffffffu) != 0) {
                r.raw_len = (uint32_t)(e->raw_len & 0xffffffffu);
                r.raw_truncated = (int)(e->raw_len >> 32);
                memcpy(r.raw, e->raw, r.raw_len);
            }
            j = k;
        }
        r.weight_min = lo;
        r.weight_max = sat_add(r.weight, full_min_sum - present_full_min);
        res[nout++] = r;
        i = j;
    }
    qsort(res, nout, sizeof(sl_topk_entry), cmp_weight);
    size_t m = nout < max ? nout : max;
    if (m) memcpy(out, res, m * sizeof(sl_topk_entry));
    free(res);
    free(all);
    free(banks);
    return (int)m;
}
