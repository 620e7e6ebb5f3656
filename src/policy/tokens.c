/*
 * tokens.c -- the table of outstanding settle/release tokens: what makes a token single
 * use. A bounded, sharded, thread-safe set of 64-bit ids, each with the operations still
 * pending (settle, release) and an expiry on the monotonic clock (the reservation's window
 * or the lease). Fixed capacity, allocated once: nothing here allocates after creation.
 * One table lives as long as the store it accompanies, across engines (reloads).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "internal.h"

#define TOK_SHARDS 64
#define TOK_WAYS 8 /* an id lives in one bucket of TOK_WAYS slots of its shard */

typedef struct tok_slot {
    uint64_t id;     /* 0 = free */
    int64_t expires; /* monotonic ns */
    unsigned pending;
} tok_slot;

typedef struct tok_shard {
    pthread_mutex_t mu;
    tok_slot *slot;  /* nbuckets * TOK_WAYS */
    size_t nbuckets; /* a power of two */
    char pad[64];
} tok_shard;

struct sl_token_table {
    tok_shard shard[TOK_SHARDS];
    sl_hash_key key;       /* ids are keyed hashes of a counter: unpredictable, unique */
    _Atomic uint64_t next; /* counter */
    size_t capacity;
};

sl_token_table *sl_token_table_create(size_t capacity, int *err) {
    if (capacity == 0) capacity = SL_TOKENS_DEFAULT;
    sl_token_table *t = calloc(1, sizeof(*t));
    if (t == NULL || sl_hash_random_key(&t->key) != 0) {
        free(t);
        if (err) *err = t == NULL ? SLUICE_ENOMEM : SLUICE_EIO;
        return NULL;
    }
    size_t per = (capacity + TOK_SHARDS - 1) / TOK_SHARDS;
    size_t nb = 1;
    while (nb * TOK_WAYS < per) nb *= 2;
    t->capacity = nb * TOK_WAYS * TOK_SHARDS;
    for (int i = 0; i < TOK_SHARDS; i++) {
        pthread_mutex_init(&t->shard[i].mu, NULL);
        t->shard[i].nbuckets = nb;
        t->shard[i].slot = calloc(nb * TOK_WAYS, sizeof(tok_slot));
        if (t->shard[i].slot == NULL) {
            sl_token_table_destroy(t);
            if (err) *err = SLUICE_ENOMEM;
            return NULL;
        }
    }
    if (err) *err = SLUICE_OK;
    return t;
}

void sl_token_table_destroy(sl_token_table *t) {
    if (t == NULL) return;
    for (int i = 0; i < TOK_SHARDS; i++) {
        free(t->shard[i].slot);
        pthread_mutex_destroy(&t->shard[i].mu);
    }
    free(t);
}

size_t sl_token_table_capacity(const sl_token_table *t) { return t ? t->capacity : 0; }

static tok_slot *bucket(sl_token_table *t, uint64_t id, tok_shard **sh) {
    *sh = &t->shard[id % TOK_SHARDS];
    size_t b = (size_t)(id / TOK_SHARDS) & ((*sh)->nbuckets - 1);
    return (*sh)->slot + b * TOK_WAYS;
}

/* Why refuse rather than evict when a bucket is full of live ids: evicting would make a
 * legitimate holder's settle fail anyway; refusing leaves the reservation charged and the
 * lease to expire on its own, both of which err on the side of limiting. */
uint64_t sl__token_id(sl_token_table *t) {
    if (t == NULL) return 0;
    uint64_t n = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    sl_hash128 h = sl_siphash128(&t->key, &n, sizeof(n), 2, 4);
    return h.lo ? h.lo : 1;
}

uint64_t sl__token_issue(sl_token_table *t, unsigned pending, int64_t expires, int64_t now) {
    if (t == NULL || pending == 0) return 0;
    uint64_t id = sl__token_id(t);
    tok_shard *sh;
    tok_slot *b = bucket(t, id, &sh);
    uint64_t got = 0;
    pthread_mutex_lock(&sh->mu);
    for (int i = 0; i < TOK_WAYS; i++)
        if (b[i].id == 0 || b[i].expires <= now) {
            b[i] = (tok_slot){id, expires, pending};
            got = id;
            break;
        }
    pthread_mutex_unlock(&sh->mu);
    return got;
}

/* Takes operation `op` of `id`: true exactly once per operation while the id is live. */
bool sl__token_take(sl_token_table *t, uint64_t id, unsigned op, int64_t now) {
    if (t == NULL || id == 0) return false;
    tok_shard *sh;
    tok_slot *b = bucket(t, id, &sh);
    bool ok = false;
    pthread_mutex_lock(&sh->mu);
    for (int i = 0; i < TOK_WAYS; i++)
        if (b[i].id == id) {
            if (b[i].expires > now && (b[i].pending & op)) {
                b[i].pending &= ~op;
                ok = true;
            }
            if (b[i].pending == 0 || b[i].expires <= now) b[i].id = 0;
            break;
        }
    pthread_mutex_unlock(&sh->mu);
    return ok;
}
