/*
 * hash.c -- SipHash-c-d with 128-bit output (Aumasson & Bernstein; the "-128" variant:
 * v1 ^= 0xee at init, v2 ^= 0xee before the first finalisation, v1 ^= 0xdd before the
 * second). Written from the paper's description; tests/unit/test_hash.c checks it against
 * the paper's published SipHash-2-4 vector through an independent slow model.
 *
 * Choice of variant: the store uses SipHash-1-3 (SL_HASH_C/D in hash.h). For the keys the
 * store sees (a 16-byte limiter prefix absorbed once, then ~10-30 key bytes), the
 * finalisation dominates: 1-3 runs 2-3 compression rounds + 6 finalisation rounds per key,
 * 2-4 runs 4-6 + 8. bench/lib_bench.c prints both ("hash" lines); on the 2-core VM 1-3
 * was about 30% cheaper. 1-3 is what Rust's std HashMap and Python's str hash use against
 * hash flooding; it is not meant as a MAC, which the store does not need (the seed is
 * secret, the output is never shown to clients).
 */
#include "hash.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

static inline uint64_t rotl(uint64_t x, int b) {
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#define SIPROUND(v0, v1, v2, v3) \
    do {                         \
        v0 += v1;                \
        v1 = rotl(v1, 13);       \
        v1 ^= v0;                \
        v0 = rotl(v0, 32);       \
        v2 += v3;                \
        v3 = rotl(v3, 16);       \
        v3 ^= v2;                \
        v0 += v3;                \
        v3 = rotl(v3, 21);       \
        v3 ^= v0;                \
        v2 += v1;                \
        v1 = rotl(v1, 17);       \
        v1 ^= v2;                \
        v2 = rotl(v2, 32);       \
    } while (0)

void sl_sip_init(sl_sip *s, const sl_hash_key *key) {
    s->v0 = key->k0 ^ UINT64_C(0x736f6d6570736575);
    s->v1 = key->k1 ^ UINT64_C(0x646f72616e646f6d) ^ 0xee;
    s->v2 = key->k0 ^ UINT64_C(0x6c7967656e657261);
    s->v3 = key->k1 ^ UINT64_C(0x7465646279746573);
    s->len = 0;
}

void sl_sip_blocks(sl_sip *s, const void *p, size_t nblocks, int c) {
    const unsigned char *b = p;
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    for (size_t i = 0; i < nblocks; i++, b += 8) {
        uint64_t m = load64(b);
        v3 ^= m;
        for (int r = 0; r < c; r++) SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    s->v0 = v0, s->v1 = v1, s->v2 = v2, s->v3 = v3;
    s->len += (uint64_t)nblocks * 8;
}

/* Inlined into both callers below so that c and d are constants for the store's case. */
static inline __attribute__((always_inline)) sl_hash128
finish(const sl_sip *s, const void *p, size_t len, int c, int d) {
    const unsigned char *b = p;
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    uint64_t total = s->len + len;
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = load64(b + i);
        v3 ^= m;
        for (int r = 0; r < c; r++) SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = total << 56;
    size_t left = len & 7;
    const unsigned char *t = b + whole;
    switch (left) {
    case 7: last |= (uint64_t)t[6] << 48; /* fall through */
    case 6: last |= (uint64_t)t[5] << 40; /* fall through */
    case 5: last |= (uint64_t)t[4] << 32; /* fall through */
    case 4: last |= (uint64_t)t[3] << 24; /* fall through */
    case 3: last |= (uint64_t)t[2] << 16; /* fall through */
    case 2: last |= (uint64_t)t[1] << 8;  /* fall through */
    case 1: last |= (uint64_t)t[0]; break;
    default: break;
    }
    v3 ^= last;
    for (int r = 0; r < c; r++) SIPROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xee;
    for (int r = 0; r < d; r++) SIPROUND(v0, v1, v2, v3);
    sl_hash128 h;
    h.lo = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    for (int r = 0; r < d; r++) SIPROUND(v0, v1, v2, v3);
    h.hi = v0 ^ v1 ^ v2 ^ v3;
    return h;
}

sl_hash128 sl_sip_finish(const sl_sip *s, const void *p, size_t len, int c, int d) {
    if (c == SL_HASH_C && d == SL_HASH_D) return finish(s, p, len, SL_HASH_C, SL_HASH_D);
    if (c == 2 && d == 4) return finish(s, p, len, 2, 4);
    return finish(s, p, len, c, d);
}

sl_hash128 sl_siphash128(const sl_hash_key *key, const void *p, size_t len, int c, int d) {
    sl_sip s;
    sl_sip_init(&s, key);
    return sl_sip_finish(&s, p, len, c, d);
}

sl_hash128 sl_hash128_of(const sl_hash_key *key, const void *p, size_t len) {
    sl_sip s;
    sl_sip_init(&s, key);
    return finish(&s, p, len, SL_HASH_C, SL_HASH_D);
}

/* getrandom(2) blocks only until the kernel pool is initialised at boot, and never fails
 * for 16 bytes afterwards except on EINTR (retried) or a kernel without the syscall. */
int sl_hash_random_key(sl_hash_key *out) {
    uint8_t b[16];
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        got += (size_t)n;
    }
    *out = sl_hash_key_from_bytes(b);
    memset(b, 0, sizeof(b));
    return 0;
}

sl_hash_key sl_hash_key_from_bytes(const uint8_t b[16]) {
    sl_hash_key k;
    k.k0 = load64(b);
    k.k1 = load64(b + 8);
    return k;
}

void sl_hash_key_to_bytes(const sl_hash_key *k, uint8_t b[16]) {
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(k->k0 >> (8 * i));
        b[8 + i] = (uint8_t)(k->k1 >> (8 * i));
    }
}
