/* SPDX-License-Identifier: Apache-2.0 */
/*
 * t.h -- the unit test harness: each tests/unit/test_*.c is one process (ctest gives
 * it a timeout) whose main() runs its cases with T_RUN. A failed check prints the
 * file:line and the values and marks the case failed; the process exits 1 if any did.
 * The last line is "N passed, M failed".
 */
#ifndef SL_T_H
#define SL_T_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed_checks;
static int t_cases_passed, t_cases_failed;

#define T_FAIL(...)                                                   \
    do {                                                              \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);               \
        fprintf(stderr, __VA_ARGS__);                                 \
        fputc('\n', stderr);                                          \
        t_failed_checks++;                                            \
    } while (0)

#define T_CHECK(cond)                                                 \
    do {                                                              \
        if (!(cond)) T_FAIL("check failed: %s", #cond);               \
    } while (0)

#define T_EQ_I(a, b)                                                  \
    do {                                                              \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);       \
        if (t_a_ != t_b_)                                             \
            T_FAIL("%s == %s: %lld != %lld", #a, #b, t_a_, t_b_);     \
    } while (0)

#define T_EQ_U(a, b)                                                            \
    do {                                                                        \
        unsigned long long t_a_ = (unsigned long long)(a),                      \
                           t_b_ = (unsigned long long)(b);                      \
        if (t_a_ != t_b_)                                                       \
            T_FAIL("%s == %s: %llu != %llu", #a, #b, t_a_, t_b_);               \
    } while (0)

#define T_EQ_S(a, b)                                                           \
    do {                                                                       \
        const char *t_a_ = (a), *t_b_ = (b);                                   \
        if (t_a_ == NULL || t_b_ == NULL || strcmp(t_a_, t_b_) != 0)           \
            T_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, t_a_ ? t_a_ : "(null)", \
                   t_b_ ? t_b_ : "(null)");                                    \
    } while (0)

#define T_RUN(fn)                                                     \
    do {                                                              \
        int t_before_ = t_failed_checks;                              \
        fn();                                                         \
        if (t_failed_checks == t_before_) {                           \
            t_cases_passed++;                                         \
            printf("ok   %s\n", #fn);                                 \
        } else {                                                      \
            t_cases_failed++;                                         \
            printf("FAIL %s\n", #fn);                                 \
        }                                                             \
        fflush(stdout);                                               \
    } while (0)

#define T_DONE()                                                      \
    (printf("%d passed, %d failed\n", t_cases_passed, t_cases_failed), \
     t_cases_failed ? 1 : 0)

/* Deterministic PRNG for property tests (xorshift64*); seed from SLUICE_SEED if set. */
static inline uint64_t t_rand(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static inline uint64_t t_seed(void) {
    const char *e = getenv("SLUICE_SEED");
    uint64_t s = e ? strtoull(e, NULL, 0) : UINT64_C(0x5eed5eed12345678);
    return s ? s : 1;
}

#endif /* SL_T_H */
