/* SPDX-License-Identifier: Apache-2.0 */
/* test_readme.c -- the library example of README.md, kept compiling and behaving as the
 * README says: 10/s with burst 20 admits 20 at once, then reports an exact retry. */
#include "sluice.h"
#include "t.h"

static void test_readme_example(void) {
    sluice_limit_spec spec = {
        .algo = SLUICE_TOKEN_BUCKET, .name = "api",
        .limit = 10, .period_ns = SLUICE_NS_PER_S, .burst = 20,
    };
    int err = 0;
    sluice_limiter *lim = sluice_limiter_create(&spec, &err, NULL, 0);
    T_CHECK(lim != NULL);
    sluice_store *store = sluice_store_create(NULL, &err);
    T_CHECK(store != NULL);
    T_EQ_I(sluice_store_register(store, lim), SLUICE_OK);
    sluice_clock *clock = sluice_clock_create_manual(INT64_C(1700000000) * SLUICE_NS_PER_S);

    sluice_item item = {.limiter = lim, .key = "user:42", .key_len = 7, .cost = 1};
    sluice_decision d;
    sluice_time now = sluice_clock_now(clock);
    for (int i = 0; i < 20; i++) {
        T_EQ_I(sluice_decide(store, &item, 1, now, &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
        T_EQ_U(d.results[0].remaining, 19 - i);
    }
    T_EQ_I(sluice_decide(store, &item, 1, now, &d), SLUICE_OK);
    T_EQ_I(d.allowed, 0);
    T_EQ_I(d.results[0].retry_after_ns, 100 * SLUICE_NS_PER_MS); /* one token at 10/s */
    T_EQ_U(d.results[0].limit, 20);

    /* Exactly at retry-after the same request is admitted. */
    sluice_clock_advance(clock, d.results[0].retry_after_ns);
    T_EQ_I(sluice_decide(store, &item, 1, sluice_clock_now(clock), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);

    sluice_clock_destroy(clock);
    sluice_store_destroy(store);
    sluice_limiter_destroy(lim);
}

int main(void) {
    T_RUN(test_readme_example);
    return T_DONE();
}
