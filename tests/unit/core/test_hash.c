/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hash.c -- the keyed hash: published SipHash known answers, agreement with a slow
 * independent model (byte at a time, array state) for every length, prefix/finish
 * splitting, seed handling, and that the store's composed keys are unambiguous.
 */
#include "t.h"

#include "core/hash.h"
#include "store/memory/memory.h"

/* ---- slow model: state in an array, message consumed one byte at a time ---------- */

static uint64_t m_rotl(uint64_t x, unsigned b) {
    return b == 0 ? x : (x << b) | (x >> (64u - b));
}

static void m_round(uint64_t v[4]) {
    static const unsigned rot[6] = {13, 32, 16, 21, 17, 32};
    v[0] = v[0] + v[1], v[1] = m_rotl(v[1], rot[0]) ^ v[0], v[0] = m_rotl(v[0], rot[1]);
    v[2] = v[2] + v[3], v[3] = m_rotl(v[3], rot[2]) ^ v[2];
    v[0] = v[0] + v[3], v[3] = m_rotl(v[3], rot[3]) ^ v[0];
    v[2] = v[2] + v[1], v[1] = m_rotl(v[1], rot[4]) ^ v[2], v[2] = m_rotl(v[2], rot[5]);
}

/* out[0..1] for 128-bit output, out[0] for 64-bit. */
static void model(const uint8_t key[16], const uint8_t *msg, size_t len, int c, int d,
                  int wide, uint64_t out[2]) {
    uint64_t k[2] = {0, 0};
    for (int i = 15; i >= 0; i--) k[i / 8] = (k[i / 8] << 8) | key[i];
    uint64_t v[4] = {k[0] ^ 0x736f6d6570736575ull, k[1] ^ 0x646f72616e646f6dull,
                     k[0] ^ 0x6c7967656e657261ull, k[1] ^ 0x7465646279746573ull};
    if (wide) v[1] ^= 0xee;
    uint64_t word = 0;
    size_t i;
    for (i = 0; i < len; i++) {
        word |= (uint64_t)msg[i] << (8 * (i % 8));
        if (i % 8 == 7) {
            v[3] ^= word;
            for (int r = 0; r < c; r++) m_round(v);
            v[0] ^= word;
            word = 0;
        }
    }
    word |= (uint64_t)(len % 256) << 56;
    v[3] ^= word;
    for (int r = 0; r < c; r++) m_round(v);
    v[0] ^= word;
    v[2] ^= wide ? 0xee : 0xff;
    for (int r = 0; r < d; r++) m_round(v);
    out[0] = v[0] ^ v[1] ^ v[2] ^ v[3];
    if (!wide) return;
    v[1] ^= 0xdd;
    for (int r = 0; r < d; r++) m_round(v);
    out[1] = v[0] ^ v[1] ^ v[2] ^ v[3];
}

static uint8_t ref_key[16], ref_msg[128];

static void setup_ref(void) {
    for (int i = 0; i < 16; i++) ref_key[i] = (uint8_t)i;
    for (int i = 0; i < 128; i++) ref_msg[i] = (uint8_t)i;
}

static void hex16(const sl_hash128 *h, char out[33]) {
    uint8_t b[16];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(h->lo >> (8 * i)), b[8 + i] = (uint8_t)(h->hi >> (8 * i));
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* The model against the SipHash paper's published 64-bit answers (reference key
 * 00..0f, message 00.. of the given length): anchors the model to the standard. */
static void test_model_matches_published_64(void) {
    uint64_t o[2];
    model(ref_key, ref_msg, 0, 2, 4, 0, o);
    T_EQ_U(o[0], 0x726fdb47dd0e0e31ull);
    model(ref_key, ref_msg, 15, 2, 4, 0, o);
    T_EQ_U(o[0], 0xa129ca6149be45e5ull);
}

/* The fast 128-bit code against published SipHash-2-4-128 answers (as output bytes). */
static void test_published_128(void) {
    static const char *want[3] = {"a3817f04ba25a8e66df67214c7550293",
                                  "da87c1d86b99af44347659119b22fc45",
                                  "8177228da4a45dc7fca38bdef60affe4"};
    sl_hash_key k = sl_hash_key_from_bytes(ref_key);
    for (size_t len = 0; len < 3; len++) {
        sl_hash128 h = sl_siphash128(&k, ref_msg, len, 2, 4);
        char got[33];
        hex16(&h, got);
        T_EQ_S(got, want[len]);
    }
}

/* Fast == model for every length 0..128, both variants, fixed and random keys. */
static void test_fast_matches_model(void) {
    uint64_t seed = t_seed();
    static const int cd[2][2] = {{1, 3}, {2, 4}};
    for (int round = 0; round < 20; round++) {
        uint8_t key[16], msg[128];
        for (int i = 0; i < 16; i++) key[i] = round ? (uint8_t)t_rand(&seed) : ref_key[i];
        for (int i = 0; i < 128; i++) msg[i] = round ? (uint8_t)t_rand(&seed) : ref_msg[i];
        sl_hash_key k = sl_hash_key_from_bytes(key);
        for (int v = 0; v < 2; v++) {
            for (size_t len = 0; len <= 128; len++) {
                uint64_t o[2];
                model(key, msg, len, cd[v][0], cd[v][1], 1, o);
                sl_hash128 h = sl_siphash128(&k, msg, len, cd[v][0], cd[v][1]);
                if (h.lo != o[0] || h.hi != o[1]) {
                    T_FAIL("siphash-%d-%d len %zu differs from the model", cd[v][0], cd[v][1], len);
                    return;
                }
            }
        }
        /* the store's variant is 1-3 */
        uint64_t o[2];
        model(key, msg, 27, 1, 3, 1, o);
        sl_hash128 h = sl_hash128_of(&k, msg, 27);
        T_EQ_U(h.lo, o[0]);
        T_EQ_U(h.hi, o[1]);
    }
}

/* Absorbing a block-aligned prefix once and finishing several tails equals hashing the
 * whole message (what the store does with a limiter's identity). */
static void test_prefix_then_finish(void) {
    uint64_t seed = t_seed();
    uint8_t msg[96];
    for (int i = 0; i < 96; i++) msg[i] = (uint8_t)t_rand(&seed);
    sl_hash_key k = {t_rand(&seed), t_rand(&seed)};
    for (size_t blocks = 0; blocks <= 4; blocks++) {
        sl_sip s;
        sl_sip_init(&s, &k);
        sl_sip_blocks(&s, msg, blocks, SL_HASH_C);
        for (size_t tail = 0; tail <= 40; tail++) {
            sl_hash128 a = sl_sip_finish(&s, msg + 8 * blocks, tail, SL_HASH_C, SL_HASH_D);
            sl_hash128 b = sl_hash128_of(&k, msg, 8 * blocks + tail);
            T_CHECK(a.lo == b.lo && a.hi == b.hi);
        }
    }
}

/* Seeds: the random seed comes from the kernel and differs between calls; the byte
 * conversions round-trip; a different key changes the output. */
static void test_seed(void) {
    sl_hash_key a, b;
    T_EQ_I(sl_hash_random_key(&a), 0);
    T_EQ_I(sl_hash_random_key(&b), 0);
    T_CHECK(a.k0 != b.k0 || a.k1 != b.k1);
    uint8_t bytes[16];
    sl_hash_key_to_bytes(&a, bytes);
    sl_hash_key c = sl_hash_key_from_bytes(bytes);
    T_CHECK(c.k0 == a.k0 && c.k1 == a.k1);
    sl_hash128 ha = sl_hash128_of(&a, "user:1", 6), hb = sl_hash128_of(&b, "user:1", 6);
    T_CHECK(ha.lo != hb.lo || ha.hi != hb.hi);
}

/* The store's identity of (limiter name, index, key) is unambiguous: moving bytes
 * between the parts, or between the name and the index, changes the hash. */
static void test_store_key_unambiguous(void) {
    sl_hash_key k = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    sl_hash128 a = sl_store_key_hash(&k, "a_b", 3, 0, "c", 1);
    sl_hash128 b = sl_store_key_hash(&k, "a", 1, 0, "b_c", 3);
    sl_hash128 c = sl_store_key_hash(&k, "a_b", 3, 1, "c", 1);
    sl_hash128 d = sl_store_key_hash(&k, "a_bc", 4, 0, "", 0);
    sl_hash128 e = sl_store_key_hash(&k, "a_b", 3, 0, "c", 1);
    T_CHECK(a.lo != b.lo || a.hi != b.hi);
    T_CHECK(a.lo != c.lo || a.hi != c.hi);
    T_CHECK(a.lo != d.lo || a.hi != d.hi);
    T_CHECK(b.lo != d.lo || b.hi != d.hi);
    T_CHECK(a.lo == e.lo && a.hi == e.hi);
    /* the name's bytes cannot spill into the index: "x\1\0\0\0" index 0 vs "x" index 1 */
    sl_hash128 f = sl_store_key_hash(&k, "x\1\0\0\0", 5, 0, "k", 1);
    sl_hash128 g = sl_store_key_hash(&k, "x", 1, 1, "k", 1);
    T_CHECK(f.lo != g.lo || f.hi != g.hi);
}

int main(void) {
    setup_ref();
    T_RUN(test_model_matches_published_64);
    T_RUN(test_published_128);
    T_RUN(test_fast_matches_model);
    T_RUN(test_prefix_then_finish);
    T_RUN(test_seed);
    T_RUN(test_store_key_unambiguous);
    return T_DONE();
}
