/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.h -- keyed 128-bit hashing (SipHash-c-d with the 128-bit output variant) for the
 * memory store, plus the per-process random seed. Invariants: the same 16-byte key and
 * message always give the same 128 bits; messages are hashed as bytes, little-endian words.
 * A state can be stopped after whole 8-byte blocks and finished later, so a fixed prefix
 * (a limiter's identity) is absorbed once and each key only pays for its own bytes.
 */
#ifndef SL_HASH_H
#define SL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct sl_hash_key {
    uint64_t k0, k1;
} sl_hash_key;

typedef struct sl_hash128 {
    uint64_t lo, hi; /* the two output words in SipHash's order (lo first) */
} sl_hash128;

/* SipHash state between blocks: v0..v3 and the number of bytes absorbed so far. */
typedef struct sl_sip {
    uint64_t v0, v1, v2, v3;
    uint64_t len;
} sl_sip;

/* The variant the store uses: SipHash-1-3 (see hash.c for the measurement and why). */
#define SL_HASH_C 1
#define SL_HASH_D 3

void sl_sip_init(sl_sip *s, const sl_hash_key *key);
/* Absorbs `nblocks` whole 8-byte blocks with `c` compression rounds. */
void sl_sip_blocks(sl_sip *s, const void *p, size_t nblocks, int c);
/* Absorbs the remaining `len` bytes (any length) and returns the 128-bit digest; `s` is
 * not modified, so one prefix state can finish many messages. */
sl_hash128 sl_sip_finish(const sl_sip *s, const void *p, size_t len, int c, int d);

/* The store's variant, inlined for the decision path (same result as sl_sip_finish with
 * SL_HASH_C, SL_HASH_D). */
static inline sl_hash128 sl_sip_finish_store(const sl_sip *s, const void *p, size_t len);

/* One-shot SipHash-c-d-128 of (key, message). */
sl_hash128 sl_siphash128(const sl_hash_key *key, const void *p, size_t len, int c, int d);
/* The store's variant (SL_HASH_C, SL_HASH_D). */
sl_hash128 sl_hash128_of(const sl_hash_key *key, const void *p, size_t len);

/* Fills `out` with 16 random bytes from getrandom(2). Returns 0, or -1 when the kernel
 * cannot supply them (the caller then refuses to build a store: no weak fallback). */
int sl_hash_random_key(sl_hash_key *out);

/* Little-endian load of a 16-byte seed. */
sl_hash_key sl_hash_key_from_bytes(const uint8_t b[16]);
void sl_hash_key_to_bytes(const sl_hash_key *k, uint8_t b[16]);

/* ---- inline implementation of the finishing step ------------------------------------ */

static inline uint64_t sl__rotl(uint64_t x, int b) {
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t sl__load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#define SL__SIPROUND(v0, v1, v2, v3)                                                       \
    do {                                                                                 \
        v0 += v1, v1 = sl__rotl(v1, 13), v1 ^= v0, v0 = sl__rotl(v0, 32);                \
        v2 += v3, v3 = sl__rotl(v3, 16), v3 ^= v2;                                       \
        v0 += v3, v3 = sl__rotl(v3, 21), v3 ^= v0;                                       \
        v2 += v1, v1 = sl__rotl(v1, 17), v1 ^= v2, v2 = sl__rotl(v2, 32);                \
    } while (0)

/* Absorbs the tail (whole blocks, then the length-tagged last block) and runs the
 * 128-bit finalisation. c and d are compile-time constants at every call site. */
static inline __attribute__((always_inline)) sl_hash128
sl__sip_finish(const sl_sip *s, const void *p, size_t len, int c, int d) {
    const unsigned char *b = p;
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    uint64_t total = s->len + len;
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = sl__load64(b + i);
        v3 ^= m;
        for (int r = 0; r < c; r++) SL__SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = total << 56;
    const unsigned char *t = b + whole;
    size_t rest = len & 7;
    /* A message of 8 bytes or more: its last 8 bytes are readable, so one load shifted
     * right leaves exactly the tail bytes in place (t[0] lowest), the same word the
     * byte-wise switch builds, without an indirect jump that mispredicts when key
     * lengths vary. Shorter messages take the byte-wise path (no read outside them). */
    if (len >= 8) {
        if (rest != 0) last |= sl__load64(b + len - 8) >> (64 - 8 * rest);
    } else {
        switch (rest) {
        case 7: last |= (uint64_t)t[6] << 48; /* fall through */
        case 6: last |= (uint64_t)t[5] << 40; /* fall through */
        case 5: last |= (uint64_t)t[4] << 32; /* fall through */
        case 4: last |= (uint64_t)t[3] << 24; /* fall through */
        case 3: last |= (uint64_t)t[2] << 16; /* fall through */
        case 2: last |= (uint64_t)t[1] << 8;  /* fall through */
        case 1: last |= (uint64_t)t[0]; break;
        default: break;
        }
    }
    v3 ^= last;
    for (int r = 0; r < c; r++) SL__SIPROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xee;
    for (int r = 0; r < d; r++) SL__SIPROUND(v0, v1, v2, v3);
    sl_hash128 h;
    h.lo = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    for (int r = 0; r < d; r++) SL__SIPROUND(v0, v1, v2, v3);
    h.hi = v0 ^ v1 ^ v2 ^ v3;
    return h;
}

static inline sl_hash128 sl_sip_finish_store(const sl_sip *s, const void *p, size_t len) {
    return sl__sip_finish(s, p, len, SL_HASH_C, SL_HASH_D);
}

#endif /* SL_HASH_H */
