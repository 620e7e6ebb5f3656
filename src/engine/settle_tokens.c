/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tokens.c -- the table of outstanding settle/release tokens: what makes a token single
 * use. A bounded, sharded, thread-safe set of 64-bit ids, each with the operations still
 * pending (settle, release) and an expiry on the monotonic clock (the reservation's window
 * or the lease). Fixed capacity (store.max_tokens live ids, each policy an equal share),
 * allocated once: nothing here allocates after creation. An id is reserved before the
 * store decides, so a full share refuses the request instead of admitting it with a
 * token nobody can use. One table lives as long as its store, across engines (reloads).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "core/hash.h"
#include "engine/internal.h"

#define TOK_SHARDS 64
#define TOK_WAYS 8    /* an id lives in one bucket of TOK_WAYS slots of its shard */
#define TOK_TRIES 8   /* ids tried (each its own bucket) before a reservation gives up */
#define TOK_OWNERS 1024 /* policies whose outstanding tokens are counted apart; + 1 overflow */
#define TOK_RESERVED 4u /* pending: the store has not answered yet */
#define TOK_SWEEP_NS (SLUICE_NS_PER_S / 10) /* a full sweep of expired ids at most this often */

typedef struct tok_slot {
    uint64_t id;     /* 0 = free */
    int64_t expires; /* monotonic ns */
    uint32_t pending;
    uint32_t owner;  /* index into owner[] */
} tok_slot;

typedef struct tok_shard {
    pthread_mutex_t mu;
    tok_slot *slot;  /* nbuckets * TOK_WAYS */
    size_t nbuckets; /* a power of two */
    char pad[64];
} tok_shard;

/* A policy's count of live ids (its share is checked against it). */
typedef struct tok_owner {
    _Atomic uint64_t name; /* hash of the policy name; 0 = unused */
    _Atomic int64_t held;
} tok_owner;

/*
 * Why a stated bound with a share per policy: every live id is a lease or a reservation
 * some client holds, and one client on its own keys can hold tens of thousands. The table
 * holds exactly `capacity` (store.max_tokens) live ids; each policy at most `share` of
 * them (the engine's capacity / policies that issue tokens, so every policy's share fits
 * at once); a request that would go beyond either is refused before the store is asked
 * (nothing charged, SL_ETOKENS_FULL), never admitted with a token that cannot be used. The
 * slots are twice the bound so that a random id's bucket is almost never full.
 */
struct sl_token_table {
    tok_shard shard[TOK_SHARDS];
    sl_hash_key key;       /* ids are keyed hashes of a counter: unpredictable, unique */
    _Atomic uint64_t next; /* counter */
    size_t capacity;       /* the bound on live ids */
    _Atomic int64_t held;  /* live ids, all policies */
    _Atomic uint64_t refused;
    _Atomic int64_t swept_at;
    tok_owner owner[TOK_OWNERS + 1];
};

sl_token_table *sl_token_table_create(size_t capacity, int *err) {
    if (capacity == 0) capacity = SL_TOKENS_DEFAULT;
    sl_token_table *t = calloc(1, sizeof(*t));
    if (t == NULL || sl_hash_random_key(&t->key) != 0) {
        free(t);
        if (err) *err = t == NULL ? SLUICE_ENOMEM : SLUICE_EIO;
        return NULL;
    }
    size_t per = (2 * capacity + TOK_SHARDS - 1) / TOK_SHARDS;
    size_t nb = 1;
    while (nb * TOK_WAYS < per) nb *= 2;
    t->capacity = capacity;
    atomic_init(&t->swept_at, INT64_MIN);
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

void sl_token_table_stats(sl_token_table *t, uint64_t *held, uint64_t *refused) {
    int64_t h = t ? atomic_load(&t->held) : 0;
    if (held) *held = h > 0 ? (uint64_t)h : 0;
    if (refused) *refused = t ? atomic_load(&t->refused) : 0;
}

static tok_slot *bucket(sl_token_table *t, uint64_t id, tok_shard **sh) {
    *sh = &t->shard[id % TOK_SHARDS];
    size_t b = (size_t)(id / TOK_SHARDS) & ((*sh)->nbuckets - 1);
    return (*sh)->slot + b * TOK_WAYS;
}

/* The counter of policy `name` (a hash; found or claimed, lock-free); the overflow one
 * once TOK_OWNERS policies have been seen. */
static uint32_t owner_of(sl_token_table *t, uint64_t name) {
    if (name == 0) name = 1;
    for (uint32_t k = 0; k < TOK_OWNERS; k++) {
        uint32_t i = (uint32_t)((name + k) % TOK_OWNERS);
        uint64_t cur = atomic_load(&t->owner[i].name);
        if (cur == name) return i;
        if (cur == 0) {
            uint64_t zero = 0;
            if (atomic_compare_exchange_strong(&t->owner[i].name, &zero, name) || zero == name) return i;
        }
    }
    return TOK_OWNERS;
}

/* A live slot leaves the table (caller holds its shard's lock). */
static void slot_free(sl_token_table *t, tok_slot *s) {
    s->id = 0;
    atomic_fetch_sub(&t->owner[s->owner].held, 1);
    atomic_fetch_sub(&t->held, 1);
}

/* Frees every expired id, at most every TOK_SWEEP_NS: ids nobody settles or releases
 * would otherwise count against their policy until their slot happens to be reused.
 * One shard's lock at a time. */
static void sweep(sl_token_table *t, int64_t now) {
    int64_t last = atomic_load(&t->swept_at);
    if (last != INT64_MIN && now - last < TOK_SWEEP_NS && now >= last) return;
    if (!atomic_compare_exchange_strong(&t->swept_at, &last, now)) return;
    for (int i = 0; i < TOK_SHARDS; i++) {
        tok_shard *sh = &t->shard[i];
        pthread_mutex_lock(&sh->mu);
        for (size_t j = 0; j < sh->nbuckets * TOK_WAYS; j++)
            if (sh->slot[j].id != 0 && sh->slot[j].expires <= now) slot_free(t, &sh->slot[j]);
        pthread_mutex_unlock(&sh->mu);
    }
}

/* One more for counter c when below `bound`. */
static bool count_in(_Atomic int64_t *c, int64_t bound) {
    if (atomic_fetch_add(c, 1) < bound) return true;
    atomic_fetch_sub(c, 1);
    return false;
}

uint64_t sl__token_id(sl_token_table *t) {
    if (t == NULL) return 0;
    uint64_t n = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    sl_hash128 h = sl_siphash128(&t->key, &n, sizeof(n), 2, 4);
    return h.lo ? h.lo : 1;
}

uint64_t sl__token_reserve(sl_token_table *t, uint64_t owner, size_t share, int64_t expires,
                           int64_t now) {
    if (t == NULL) return 0;
    if (share == 0 || share > t->capacity) share = t->capacity;
    uint32_t o = owner_of(t, owner);
    bool in = false;
    for (int attempt = 0; attempt < 2 && !in; attempt++) {
        if (attempt == 1) sweep(t, now);
        if (count_in(&t->owner[o].held, (int64_t)share)) {
            if (count_in(&t->held, (int64_t)t->capacity)) in = true;
            else atomic_fetch_sub(&t->owner[o].held, 1);
        }
    }
    if (!in) {
        atomic_fetch_add(&t->refused, 1);
        return 0;
    }
    for (int k = 0; k < TOK_TRIES; k++) {
        uint64_t id = sl__token_id(t);
        tok_shard *sh;
        tok_slot *b = bucket(t, id, &sh);
        pthread_mutex_lock(&sh->mu);
        for (int i = 0; i < TOK_WAYS; i++)
            if (b[i].id == 0 || b[i].expires <= now) {
                if (b[i].id != 0) slot_free(t, &b[i]);
                b[i] = (tok_slot){id, expires, TOK_RESERVED, o};
                pthread_mutex_unlock(&sh->mu);
                return id;
            }
        pthread_mutex_unlock(&sh->mu);
    }
    /* TOK_TRIES full buckets at half load: not seen in practice, still refused cleanly */
    atomic_fetch_sub(&t->owner[o].held, 1);
    atomic_fetch_sub(&t->held, 1);
    atomic_fetch_add(&t->refused, 1);
    return 0;
}

/* The slot of live id `id` (caller holds *sh's lock), or NULL. */
static tok_slot *find(sl_token_table *t, uint64_t id, tok_shard **sh) {
    tok_slot *b = bucket(t, id, sh);
    pthread_mutex_lock(&(*sh)->mu);
    for (int i = 0; i < TOK_WAYS; i++)
        if (b[i].id == id) return &b[i];
    return NULL;
}

bool sl__token_commit(sl_token_table *t, uint64_t id, unsigned pending, int64_t expires) {
    if (t == NULL || id == 0) return false;
    tok_shard *sh;
    tok_slot *s = find(t, id, &sh);
    if (s != NULL) {
        s->pending = pending;
        s->expires = expires;
    }
    pthread_mutex_unlock(&sh->mu);
    return s != NULL;
}

void sl__token_drop(sl_token_table *t, uint64_t id) {
    if (t == NULL || id == 0) return;
    tok_shard *sh;
    tok_slot *s = find(t, id, &sh);
    if (s != NULL) slot_free(t, s);
    pthread_mutex_unlock(&sh->mu);
}

uint64_t sl__token_issue(sl_token_table *t, unsigned pending, int64_t expires, int64_t now) {
    if (t == NULL || pending == 0) return 0;
    uint64_t id = sl__token_reserve(t, 0, 0, expires, now);
    if (id != 0) sl__token_commit(t, id, pending, expires);
    return id;
}

/* Takes operation `op` of `id`: true exactly once per operation while the id is live. */
bool sl__token_take(sl_token_table *t, uint64_t id, unsigned op, int64_t now) {
    if (t == NULL || id == 0) return false;
    tok_shard *sh;
    tok_slot *s = find(t, id, &sh);
    bool ok = false;
    if (s != NULL && !(s->pending & TOK_RESERVED)) {
        if (s->expires > now && (s->pending & op)) {
            s->pending &= ~op;
            ok = true;
        }
        if (s->pending == 0 || s->expires <= now) slot_free(t, s);
    }
    pthread_mutex_unlock(&sh->mu);
    return ok;
}

/* ---- tokens ------------------------------------------------------------------------- */

/* Tokens are authenticated with SipHash-2-4-128 under a per-process random key: a client
 * handed a token cannot forge one that refunds or releases another client's budget. The
 * key is process-wide (not per engine) so a token survives a reload; it does not survive
 * a restart, which only loses pending settlements (reservations stand as charged). */
static sl_hash_key token_key;
static int token_key_ok;
/* Tokens shared between instances (sl_engine_tokens_shared): set once, before workers. */
static bool g_tokens_shared;

bool sl__tokens_shared(void) { return g_tokens_shared; }
static pthread_once_t token_once = PTHREAD_ONCE_INIT;
/* The AEAD key of "t4" tokens (ChaCha20-Poly1305): 32 random bytes per process, or
 * derived from the shared secret (sl_engine_tokens_shared) so that every instance and
 * every restart with that secret reads the others' tokens. */
static unsigned char aead_key[32];
static pthread_key_t aead_tls; /* each thread's cipher context, made once, freed at exit */
static bool aead_tls_ok;

static void ctx_free(void *p) { EVP_CIPHER_CTX_free(p); }

static void token_key_init(void) {
    token_key_ok = sl_hash_random_key(&token_key) == 0 && RAND_bytes(aead_key, sizeof(aead_key)) == 1;
    aead_tls_ok = pthread_key_create(&aead_tls, ctx_free) == 0;
}

void sl_engine_tokens_shared(const void *secret, size_t len) {
    pthread_once(&token_once, token_key_init);
    /* domain-separated from the store's key hashing, which uses the same secret */
    static const sl_hash_key tokens = {UINT64_C(0x736c75696365746f), UINT64_C(0x6b656e73206b6579)};
    sl_hash128 h = sl_siphash128(&tokens, secret, len, 2, 4);
    token_key = (sl_hash_key){h.lo, h.hi};
    static const char label[] = "sluice token aead key v1";
    unsigned int ol = 0;
    bool ok = HMAC(EVP_sha256(), secret, (int)len, (const unsigned char *)label, sizeof(label) - 1,
                   aead_key, &ol) != NULL && ol == sizeof(aead_key);
    token_key_ok = ok ? 1 : 0;
    g_tokens_shared = true;
}

static EVP_CIPHER_CTX *aead_ctx(void) {
    pthread_once(&token_once, token_key_init);
    if (!aead_tls_ok || !token_key_ok) return NULL;
    EVP_CIPHER_CTX *c = pthread_getspecific(aead_tls);
    if (c == NULL && (c = EVP_CIPHER_CTX_new()) != NULL && pthread_setspecific(aead_tls, c) != 0) {
        EVP_CIPHER_CTX_free(c);
        c = NULL;
    }
    return c;
}

#define AEAD_NONCE 12
#define AEAD_TAG 16
static const unsigned char aead_ad[] = "t4"; /* the format is authenticated too */

/* nonce || ciphertext || tag of pt[0, n) into out (n + 28 bytes); false on failure. */
static bool aead_seal(const unsigned char *pt, size_t n, unsigned char *out) {
    EVP_CIPHER_CTX *c = aead_ctx();
    int l = 0, l2 = 0;
    if (c == NULL || RAND_bytes(out, AEAD_NONCE) != 1 ||
        EVP_EncryptInit_ex(c, EVP_chacha20_poly1305(), NULL, aead_key, out) != 1 ||
        EVP_EncryptUpdate(c, NULL, &l, aead_ad, 2) != 1 ||
        EVP_EncryptUpdate(c, out + AEAD_NONCE, &l, pt, (int)n) != 1 ||
        EVP_EncryptFinal_ex(c, out + AEAD_NONCE + l, &l2) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, AEAD_TAG, out + AEAD_NONCE + n) != 1)
        return false;
    return (size_t)(l + l2) == n;
}

/* The plaintext of sealed in[0, n) into pt (n - 28 bytes); false when it was not sealed
 * under this instance's key (altered, forged, another instance's, before a restart). */
static bool aead_open(const unsigned char *in, size_t n, unsigned char *pt) {
    if (n < AEAD_NONCE + AEAD_TAG) return false;
    size_t cl = n - AEAD_NONCE - AEAD_TAG;
    EVP_CIPHER_CTX *c = aead_ctx();
    int l = 0, l2 = 0;
    unsigned char tag[AEAD_TAG];
    memcpy(tag, in + AEAD_NONCE + cl, AEAD_TAG);
    if (c == NULL || EVP_DecryptInit_ex(c, EVP_chacha20_poly1305(), NULL, aead_key, in) != 1 ||
        EVP_DecryptUpdate(c, NULL, &l, aead_ad, 2) != 1 ||
        EVP_DecryptUpdate(c, pt, &l, in + AEAD_NONCE, (int)cl) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, AEAD_TAG, tag) != 1)
        return false;
    return EVP_DecryptFinal_ex(c, pt + l, &l2) == 1 && (size_t)(l + l2) == cl;
}

static sl_hash128 token_mac(const char *p, size_t n) {
    pthread_once(&token_once, token_key_init);
    return sl_siphash128(&token_key, p, n, 2, 4);
}

/*
 * Why a token's keys are encrypted: the token travels through gateways, logs and clients
 * (X-Sluice-Token), and a key may be an API key or a user's identity. Each key is XORed
 * with a keystream of SipHash-2-4-128 blocks (a PRF under a key derived from the token
 * key, domain-separated) over (token id, decision times, item, block): the id and times
 * make every token's stream its own. The MAC covers the encrypted text, so a changed
 * byte is refused before anything is decrypted.
 */
static void token_crypt(unsigned char *b, size_t n, uint64_t id, sluice_time at, size_t item) {
    pthread_once(&token_once, token_key_init);
    static const char label[] = "sluice token keys";
    sl_hash128 dk = sl_siphash128(&token_key, label, sizeof(label) - 1, 2, 4);
    sl_hash_key ek = {dk.lo, dk.hi};
    for (size_t blk = 0, off = 0; off < n; blk++) {
        uint64_t in[5] = {id, (uint64_t)at.mono_ns, (uint64_t)at.wall_ns, (uint64_t)item, (uint64_t)blk};
        sl_hash128 ks = sl_siphash128(&ek, in, sizeof(in), 2, 4);
        unsigned char stream[16];
        memcpy(stream, &ks.lo, 8);
        memcpy(stream + 8, &ks.hi, 8);
        for (size_t k = 0; k < 16 && off < n; k++, off++) b[off] ^= stream[k];
    }
}

/* Little-endian fields of the sealed plaintext. */
static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#define TOK_RAW_MAX ((SL_TOKEN_MAX - 2) / 4 * 3) /* sealed bytes a token's base64 holds */

/*
 * Format "t4" + base64(nonce 12 | ciphertext | tag 16): ChaCha20-Poly1305 (OpenSSL's
 * libcrypto) under the instance's key (see aead_key) with "t4" as associated data. The
 * plaintext, little-endian: id 8, decision time mono 8 and wall 8, then per item to
 * settle or release: name length 1, limiter name, window index 4, key length 2, key,
 * reserved cost 8, lease 8, settle 1. So a token shows nothing but its length: not the
 * policy, the key, the amount or the time; a changed byte, a forged token or another
 * instance's fails to open and is refused as invalid before anything is used. ("t2" and
 * "t3" tokens, MAC'd with the policy and amounts in clear, are still read: an upgrade
 * does not void the tokens handed out just before it.)
 * Why names rather than indices: a token must stay meaningful across a reload, and the
 * limiter identity (name + index) is exactly what survives one.
 */
int sl_verdict_token(const sl_verdict *v, char *buf, size_t len) {
    if (v == NULL || buf == NULL || len < 3) return SLUICE_ERANGE;
    unsigned char pt[TOK_RAW_MAX], sealed[TOK_RAW_MAX + AEAD_NONCE + AEAD_TAG];
    size_t n = 0;
    put_le(pt, v->token_id, 8);
    put_le(pt + 8, (uint64_t)v->decided_at.mono_ns, 8);
    put_le(pt + 16, (uint64_t)v->decided_at.wall_ns, 8);
    n = 24;
    if (sl__admitted(v))
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            const sl__ewin *w = sl__item_win(it);
            if (it->unlimited || !it->consumed || w->lim == NULL ||
                (!it->settle && it->result.lease == 0))
                continue;
            const sluice_limit_spec *sp = sluice_limiter_spec(w->lim);
            size_t nl = strlen(sp->name);
            if (nl > 255 || n + 1 + nl + 4 + 2 + it->key_len + 17 + AEAD_NONCE + AEAD_TAG > TOK_RAW_MAX)
                return SLUICE_ERANGE;
            pt[n++] = (unsigned char)nl;
            memcpy(pt + n, sp->name, nl);
            n += nl;
            put_le(pt + n, sp->index, 4);
            put_le(pt + n + 4, it->key_len, 2);
            n += 6;
            memcpy(pt + n, v->keys + it->key_off, it->key_len);
            n += it->key_len;
            put_le(pt + n, it->cost, 8);
            put_le(pt + n + 8, it->result.lease, 8);
            pt[n + 16] = it->settle ? 1 : 0;
            n += 17;
        }
    size_t sl = n + AEAD_NONCE + AEAD_TAG;
    if (2 + (sl + 2) / 3 * 4 + 1 > len) return SLUICE_ERANGE;
    if (!aead_seal(pt, n, sealed)) return SLUICE_EIO;
    buf[0] = 't';
    buf[1] = '4';
    int bl = EVP_EncodeBlock((unsigned char *)buf + 2, sealed, (int)sl);
    if (bl <= 0) return SLUICE_EIO;
    /* URL-safe (RFC 4648 section 5, no padding): a token may travel in a query string */
    while (bl > 0 && buf[2 + bl - 1] == '=') bl--;
    for (int i = 2; i < 2 + bl; i++) buf[i] = buf[i] == '+' ? '-' : buf[i] == '/' ? '_' : buf[i];
    buf[2 + bl] = '\0';
    return 2 + bl;
}

static int unhex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static size_t get_hex(const char *s, size_t n, unsigned char *out, size_t cap, bool *ok) {
    if (n % 2 || n / 2 > cap) {
        *ok = false;
        return 0;
    }
    for (size_t i = 0; i < n / 2; i++) {
        int a = unhex(s[2 * i]), b = unhex(s[2 * i + 1]);
        if (a < 0 || b < 0) {
            *ok = false;
            return 0;
        }
        out[i] = (unsigned char)(a << 4 | b);
    }
    return n / 2;
}

/* A decimal uint64 (token fields: ids and times use the whole 64-bit range). */
static bool get_num(const char *s, size_t n, uint64_t *out) {
    if (n == 0 || n > 20) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Reads the token's "t2,ID,MONO,WALL" head; returns the offset of its first item, 0 when
 * the head is malformed. */
static size_t token_head(const char *t, size_t len, uint64_t *id, sluice_time *at) {
    uint64_t f[3];
    size_t i = 2;
    for (int k = 0; k < 3; k++) {
        if (i >= len || t[i] != ',') return 0;
        size_t st = ++i;
        while (i < len && t[i] != ',' && t[i] != ';') i++;
        if (!get_num(t + st, i - st, &f[k])) return 0;
    }
    *id = f[0];
    at->mono_ns = (int64_t)f[1];
    at->wall_ns = (int64_t)f[2];
    return i;
}

/*
 * Authenticates token t and loads it into v: one item per window it names (its window
 * found by limiter name and index, which survive a reload), marked consumed, with its key,
 * reserved cost, lease and settle flag; v->token_id and v->decided_at from its head.
 * Returns SLUICE_OK, SLUICE_EINVAL (forged or malformed) or SLUICE_ENOTFOUND (a window
 * this config no longer has). Why the whole token is checked before anything is used: a
 * malformed token must not burn its single use.
 */
/* One item of a loaded token: its window found by limiter name and index (*missing set
 * when this config no longer has it). SLUICE_EINVAL when v cannot hold it. */
static int load_item(const sl_engine *e, sl_verdict *v, const char *name, uint64_t idx,
                     const unsigned char *key, size_t kl, uint64_t cost, uint64_t lease,
                     bool settle, int *missing) {
    if (v->n >= SLUICE_MAX_ITEMS || kl > SL_VERDICT_KEYS - v->keys_used || kl > 0xffff)
        return SLUICE_EINVAL;
    const sl__ewin *win = NULL;
    for (size_t j = 0; j < e->n_all && win == NULL; j++) {
        const sluice_limit_spec *s = sluice_limiter_spec(e->all[j]->lim);
        if (s != NULL && s->index == idx && strcmp(s->name, name) == 0) win = e->all[j];
    }
    if (win == NULL) {
        *missing = SLUICE_ENOTFOUND;
        return SLUICE_OK;
    }
    sl_verdict_item *it = &v->items[v->n++];
    memset(it, 0, sizeof(*it));
    it->info = &win->info;
    it->descriptor = -1;
    it->key_off = (uint16_t)v->keys_used;
    it->key_len = (uint16_t)kl;
    if (key != v->keys + v->keys_used) memmove(v->keys + v->keys_used, key, kl);
    v->keys_used += kl;
    it->cost = cost;
    it->result.lease = lease;
    it->settle = settle;
    it->consumed = true;
    return SLUICE_OK;
}

/* A "t4" token (see sl_verdict_token): opened, then every item loaded. */
static int token_load4(const sl_engine *e, const char *t, size_t len, sl_verdict *v) {
    size_t b64 = len - 2;
    enum { SEALED_MAX = TOK_RAW_MAX + AEAD_NONCE + AEAD_TAG };
    if (b64 == 0 || b64 % 4 == 1 || b64 > (SEALED_MAX + 2) / 3 * 4) return SLUICE_EINVAL;
    char text[(SEALED_MAX + 2) / 3 * 4 + 4];
    unsigned char sealed[SEALED_MAX + 3], pt[SEALED_MAX];
    for (size_t i = 0; i < b64; i++) { /* back from the URL-safe alphabet, checked */
        char ch = t[2 + i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_'))
            return SLUICE_EINVAL;
        text[i] = ch == '-' ? '+' : ch == '_' ? '/' : ch;
    }
    size_t pad = (4 - b64 % 4) % 4;
    for (size_t i = 0; i < pad; i++) text[b64 + i] = '=';
    int dl = EVP_DecodeBlock(sealed, (const unsigned char *)text, (int)(b64 + pad));
    if (dl <= 0 || (size_t)dl < pad) return SLUICE_EINVAL;
    size_t n = (size_t)dl - pad; /* EVP_DecodeBlock counts the padding as zero bytes */
    if (!aead_open(sealed, n, pt)) return SLUICE_EINVAL;
    n -= AEAD_NONCE + AEAD_TAG;
    if (n < 24) return SLUICE_EINVAL;
    sl__verdict_init(v);
    v->token_id = get_le(pt, 8);
    v->decided_at.mono_ns = (int64_t)get_le(pt + 8, 8);
    v->decided_at.wall_ns = (int64_t)get_le(pt + 16, 8);
    int missing = SLUICE_OK;
    for (size_t i = 24; i < n;) {
        size_t nl = pt[i];
        if (i + 1 + nl + 6 > n) return SLUICE_EINVAL;
        char name[256];
        memcpy(name, pt + i + 1, nl);
        name[nl] = '\0';
        i += 1 + nl;
        uint64_t idx = get_le(pt + i, 4);
        size_t kl = (size_t)get_le(pt + i + 4, 2);
        i += 6;
        if (i + kl + 17 > n) return SLUICE_EINVAL;
        const unsigned char *key = pt + i;
        i += kl;
        uint64_t cost = get_le(pt + i, 8), lease = get_le(pt + i + 8, 8);
        bool settle = pt[i + 16] != 0;
        i += 17;
        if (load_item(e, v, name, idx, key, kl, cost, lease, settle, &missing) != SLUICE_OK)
            return SLUICE_EINVAL;
    }
    return missing;
}

static int token_load(const sl_engine *e, const char *t, size_t len, sl_verdict *v) {
    if (e != NULL && t != NULL && len > 2 && t[0] == 't' && t[1] == '4') return token_load4(e, t, len, v);
    if (e == NULL || t == NULL || len < 2 + 33 || t[0] != 't' || (t[1] != '2' && t[1] != '3'))
        return SLUICE_EINVAL;
    bool encrypted = t[1] == '3';
    size_t body = len - 33;
    if (t[body] != '.') return SLUICE_EINVAL;
    sl_hash128 mac = token_mac(t, body);
    if (!token_key_ok) return SLUICE_EIO;
    uint64_t w[2] = {mac.lo, mac.hi};
    unsigned char want[16], got[16];
    memcpy(want, w, 16);
    bool hex_ok = true;
    get_hex(t + body + 1, 32, got, sizeof(got), &hex_ok);
    unsigned char diff = hex_ok ? 0 : 1;
    for (int k = 0; k < 16; k++) diff |= (unsigned char)(want[k] ^ got[k]);
    if (diff != 0) return SLUICE_EINVAL;
    len = body;
    sl__verdict_init(v);
    size_t i = token_head(t, len, &v->token_id, &v->decided_at);
    if (i == 0) return SLUICE_EINVAL;
    int missing = SLUICE_OK;
    size_t nitem = 0;
    while (i < len) {
        if (t[i] != ';') return SLUICE_EINVAL;
        i++;
        const char *f[6];
        size_t fl[6], nf = 0;
        size_t start = i;
        while (i <= len && nf < 6) {
            if (i == len || t[i] == ',' || t[i] == ';') {
                f[nf] = t + start;
                fl[nf++] = i - start;
                if (i == len || t[i] == ';') break;
                start = i + 1;
            }
            i++;
        }
        if (nf != 6) return SLUICE_EINVAL;
        unsigned char name[256];
        bool ok = true;
        size_t nl = get_hex(f[0], fl[0], name, sizeof(name) - 1, &ok);
        uint64_t idx, cost, lease, settle;
        if (!ok || !get_num(f[1], fl[1], &idx) || !get_num(f[3], fl[3], &cost) ||
            !get_num(f[4], fl[4], &lease) || !get_num(f[5], fl[5], &settle))
            return SLUICE_EINVAL;
        name[nl] = '\0';
        if (v->n >= SLUICE_MAX_ITEMS || fl[2] / 2 > SL_VERDICT_KEYS - v->keys_used)
            return SLUICE_EINVAL;
        size_t kl = get_hex(f[2], fl[2], v->keys + v->keys_used, SL_VERDICT_KEYS - v->keys_used, &ok);
        if (!ok || kl > 0xffff) return SLUICE_EINVAL;
        if (encrypted) token_crypt(v->keys + v->keys_used, kl, v->token_id, v->decided_at, nitem);
        nitem++;
        const sl__ewin *win = NULL;
        for (size_t j = 0; j < e->n_all && win == NULL; j++) {
            const sluice_limit_spec *s = sluice_limiter_spec(e->all[j]->lim);
            if (s != NULL && s->index == idx && strcmp(s->name, (const char *)name) == 0)
                win = e->all[j];
        }
        if (win == NULL) {
            missing = SLUICE_ENOTFOUND;
            continue;
        }
        sl_verdict_item *it = &v->items[v->n++];
        memset(it, 0, sizeof(*it));
        it->info = &win->info;
        it->descriptor = -1;
        it->key_off = (uint16_t)v->keys_used;
        it->key_len = (uint16_t)kl;
        v->keys_used += kl;
        it->cost = cost;
        it->result.lease = lease;
        it->settle = settle != 0;
        it->consumed = true;
    }
    return missing;
}

void sl__issue_token(const sl_engine *e, sl_verdict *v, sluice_time now) {
    unsigned pending = 0;
    int64_t life = SLUICE_NS_PER_S;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        const sl__ewin *w = sl__item_win(it);
        if (it->unlimited || !it->consumed || w->lim == NULL) continue;
        if (it->settle) pending |= SL_TOK_SETTLE;
        if (it->result.lease != 0) pending |= SL_TOK_RELEASE;
        if (it->settle && it->result.reset_after_ns > life) life = it->result.reset_after_ns;
        int64_t l = sl__item_life(w, it->settle, it->result.lease != 0);
        if (l > life) life = l;
    }
    if (pending == 0) return;
    if (g_tokens_shared) { /* single use is claimed in the shared store */
        v->token_id = sl__token_id(e->tokens);
        return;
    }
    int64_t exp = now.mono_ns > INT64_MAX - life ? INT64_MAX : now.mono_ns + life;
    if (v->run.tok_resv != 0) { /* reserved before the store was asked (decide.c) */
        v->token_id = sl__token_commit(e->tokens, v->run.tok_resv, pending, exp) ? v->run.tok_resv : 0;
        v->run.tok_resv = 0;
        return;
    }
    v->token_id = sl__token_issue(e->tokens, pending, exp, now.mono_ns);
}

bool sl_verdict_needs_token(const sl_verdict *v) {
    if (!sl__admitted(v)) return false;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->consumed && !it->unlimited && (it->settle || it->result.lease)) return true;
    }
    return false;
}

static void complete_token(sl_verdict *v, int rc) { sl__complete(v, rc); }

static void on_claimed(void *ud, int rc, const sl_sresult *res) {
    sl_verdict *v = ud;
    if (rc != SLUICE_OK) {
        complete_token(v, rc);
        return;
    }
    if (res == NULL || !res->allowed) {
        complete_token(v, SLUICE_ENOTFOUND); /* taken already, by this or another instance */
        return;
    }
    sluice_time now = {.mono_ns = v->run.actual_now, .wall_ns = v->run.actual_now};
    sl__apply(v->run.e, v->run.lane, v, now);
}

/*
 * The single use of v's token for v->run.tok_op: this process's table or, with shared
 * tokens, a claim in the shared store (answered later); then the operation is applied.
 * With shared tokens only the wall clocks of instances compare, so `now` is the wall
 * clock on both sides.
 */
void sl__take_and_apply(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now) {
    unsigned op = v->run.tok_op;
    if (!g_tokens_shared || e->ops->claim == NULL) {
        if (!sl__token_take(e->tokens, v->token_id, op, now.mono_ns)) {
            complete_token(v, SLUICE_ENOTFOUND);
            return;
        }
        sl__apply(e, lane, v, now);
        return;
    }
    int64_t life = v->run.tok_life;
    int64_t age = now.wall_ns - v->decided_at.wall_ns;
    if (age > life) {
        complete_token(v, SLUICE_ENOTFOUND); /* expired */
        return;
    }
    if (age < 0) age = 0;
    v->decided_at.mono_ns = v->decided_at.wall_ns;
    v->run.actual_now = now.wall_ns;
    e->ops->claim(lane, v->token_id, op, life - age + SLUICE_NS_PER_S, now, on_claimed, v);
}

void sl_engine_token(const sl_engine *e, void *lane, const char *token, size_t len,
                     unsigned op, uint64_t actual, sluice_time now, sl_verdict *v,
                     sl_engine_done done, void *ud) {
    sl_engine_token_sample(e, lane, token, len, op, actual, false, 0, SLUICE_OUTCOME_OK, now, v, done, ud);
}

static void token_apply(const sl_engine *e, void *lane, const char *token, size_t len,
                        unsigned op, uint64_t actual, bool has_latency, int64_t latency_ns,
                        unsigned outcome, const sl_llm_usage *u, sluice_time now, sl_verdict *v,
                        sl_engine_done done, void *ud);

void sl_engine_token_sample(const sl_engine *e, void *lane, const char *token, size_t len,
                            unsigned op, uint64_t actual, bool has_latency, int64_t latency_ns,
                            unsigned outcome, sluice_time now, sl_verdict *v,
                            sl_engine_done done, void *ud) {
    token_apply(e, lane, token, len, op, actual, has_latency, latency_ns, outcome, NULL, now, v, done, ud);
}

void sl_engine_token_usage(const sl_engine *e, void *lane, const char *token, size_t len, unsigned op,
                           const sl_llm_usage *u, sluice_time now, sl_verdict *v,
                           sl_engine_done done, void *ud) {
    token_apply(e, lane, token, len, op, 0, false, 0, SLUICE_OUTCOME_OK, u, now, v, done, ud);
}

static void token_apply(const sl_engine *e, void *lane, const char *token, size_t len,
                        unsigned op, uint64_t actual, bool has_latency, int64_t latency_ns,
                        unsigned outcome, const sl_llm_usage *u, sluice_time now, sl_verdict *v,
                        sl_engine_done done, void *ud) {
    int rc = token_load(e, token, len, v);
    v->run.has_latency = has_latency;
    v->run.latency_ns = latency_ns;
    v->run.outcome = (uint8_t)outcome;
    v->run.e = e;
    v->run.done = done;
    v->run.ud = ud;
    v->run.lane = lane;
    v->run.actual = actual;
    if (u != NULL) { /* issue 24: per-window actuals (decide.c sl__apply) */
        v->run.has_llm = true;
        v->run.llm = *u;
    }
    v->run.tok_rest = 0;
    v->run.chain_rc = SLUICE_OK;
    v->run.apply_now = now;
    if (rc != SLUICE_OK) {
        complete_token(v, rc);
        return;
    }
    unsigned held = 0;
    int64_t life = SLUICE_NS_PER_S;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->settle) held |= SL_TOK_SETTLE;
        if (it->result.lease != 0) held |= SL_TOK_RELEASE;
        int64_t l = sl__item_life(sl__item_win(it), it->settle, it->result.lease != 0);
        if (l > life) life = l;
    }
    unsigned ops = op & held & (SL_TOK_SETTLE | SL_TOK_RELEASE);
    if (ops == 0) { /* nothing for this operation: a mistake when it holds something else */
        complete_token(v, held != 0 ? SL_ETOKEN_OP : SLUICE_OK);
        return;
    }
    v->run.tok_op = (ops & SL_TOK_SETTLE) ? SL_TOK_SETTLE : SL_TOK_RELEASE;
    v->run.tok_rest = ops & ~v->run.tok_op;
    v->run.tok_life = life;
    sl__take_and_apply(e, lane, v, now);
}
