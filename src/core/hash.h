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

#endif /* SL_HASH_H */
