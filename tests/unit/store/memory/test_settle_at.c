/* SPDX-License-Identifier: Apache-2.0 */
/* test_settle_at.c -- a refund applies only in the window or calendar period that counted
 * the reservation: a reservation made before midnight cannot make room in the next day. */
#include "sluice.h"
#include "t.h"

static const int64_t S = SLUICE_NS_PER_S;

typedef struct fx {
    sluice_limiter *lim;
    sluice_store *st;
    sluice_clock *clk;
} fx;

static void fx_open(fx *f, sluice_limit_spec spec, int64_t wall_s) {
    int err;
    f->lim = sluice_limiter_create(&spec, &err, NULL, 0);
    f->st = sluice_store_create(NULL, &err);
    T_CHECK(f->lim != NULL && f->st != NULL);
    T_EQ_I(sluice_store_register(f->st, f->lim), SLUICE_OK);
    f->clk = sluice_clock_create_manual(wall_s * S);
}

static void fx_close(fx *f) {
    sluice_clock_destroy(f->clk);
    sluice_store_destroy(f->st);
    sluice_limiter_destroy(f->lim);
}

static int take(fx *f, uint64_t cost, sluice_result *r) {
    sluice_item it = {.limiter = f->lim, .key = "k", .key_len = 1, .cost = cost};
    sluice_decision d;
    T_EQ_I(sluice_decide(f->st, &it, 1, sluice_clock_now(f->clk), &d), SLUICE_OK);
    if (r) *r = d.results[0];
    return d.allowed;
}

/* 2026-12-02 23:59:59 UTC */
#define BEFORE_MIDNIGHT INT64_C(1796255999)

static void quota_refund_after_midnight_is_void(void) {
    fx f;
    fx_open(&f, (sluice_limit_spec){.algo = SLUICE_QUOTA, .name = "q", .limit = 1000,
                                    .quota_period = SLUICE_PERIOD_DAY},
            BEFORE_MIDNIGHT);
    sluice_time reserved_at = sluice_clock_now(f.clk);
    T_CHECK(take(&f, 1000, NULL));
    sluice_clock_advance(f.clk, 2 * S); /* the next day */
    T_CHECK(take(&f, 1000, NULL));      /* the new day's whole budget */
    sluice_result r;
    T_EQ_I(sluice_settle_at(f.st, f.lim, "k", 1, 1000, 0, reserved_at, sluice_clock_now(f.clk),
                            &r),
           SLUICE_OK);
    T_EQ_U(r.remaining, 0); /* yesterday's refund did not make room today */
    T_CHECK(!take(&f, 1, NULL));
    fx_close(&f);
}

static void quota_refund_same_day_applies(void) {
    fx f;
    fx_open(&f, (sluice_limit_spec){.algo = SLUICE_QUOTA, .name = "q", .limit = 1000,
                                    .quota_period = SLUICE_PERIOD_DAY},
            BEFORE_MIDNIGHT - 3600);
    sluice_time reserved_at = sluice_clock_now(f.clk);
    T_CHECK(take(&f, 1000, NULL));
    sluice_clock_advance(f.clk, 60 * S);
    sluice_result r;
    T_EQ_I(sluice_settle_at(f.st, f.lim, "k", 1, 1000, 300, reserved_at, sluice_clock_now(f.clk),
                            &r),
           SLUICE_OK);
    T_EQ_U(r.remaining, 700);
    T_CHECK(take(&f, 700, NULL));
    T_CHECK(!take(&f, 1, NULL));
    fx_close(&f);
}

static void fixed_window_refund_only_in_its_window(void) {
    fx f;
    fx_open(&f, (sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = "w", .limit = 10,
                                    .period_ns = 60 * S},
            BEFORE_MIDNIGHT - 1); /* 23:59:58, 2 s before a minute boundary */
    sluice_time reserved_at = sluice_clock_now(f.clk);
    T_CHECK(take(&f, 10, NULL));
    sluice_clock_advance(f.clk, 3 * S);
    T_CHECK(take(&f, 10, NULL));
    sluice_result r;
    sluice_settle_at(f.st, f.lim, "k", 1, 10, 0, reserved_at, sluice_clock_now(f.clk), &r);
    T_EQ_U(r.remaining, 0);
    T_CHECK(!take(&f, 1, NULL));
    /* a charge applies whatever the window: the work was done */
    fx_close(&f);
    fx_open(&f, (sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = "w", .limit = 10,
                                    .period_ns = 60 * S},
            BEFORE_MIDNIGHT - 1);
    reserved_at = sluice_clock_now(f.clk);
    T_CHECK(take(&f, 2, NULL));
    sluice_clock_advance(f.clk, 3 * S);
    sluice_settle_at(f.st, f.lim, "k", 1, 2, 7, reserved_at, sluice_clock_now(f.clk), &r);
    T_EQ_U(r.remaining, 5);
    fx_close(&f);
}

static void bucket_refund_applies_later(void) {
    fx f;
    fx_open(&f, (sluice_limit_spec){.algo = SLUICE_TOKEN_BUCKET, .name = "b", .limit = 1,
                                    .period_ns = 3600 * S, .burst = 10},
            BEFORE_MIDNIGHT);
    sluice_time reserved_at = sluice_clock_now(f.clk);
    T_CHECK(take(&f, 10, NULL));
    sluice_clock_advance(f.clk, 2 * S);
    sluice_result r;
    sluice_settle_at(f.st, f.lim, "k", 1, 10, 4, reserved_at, sluice_clock_now(f.clk), &r);
    T_EQ_U(r.remaining, 6); /* no windows: the refund is valid, capped at capacity */
    fx_close(&f);
}

int main(void) {
    T_RUN(quota_refund_after_midnight_is_void);
    T_RUN(quota_refund_same_day_applies);
    T_RUN(fixed_window_refund_only_in_its_window);
    T_RUN(bucket_refund_applies_later);
    return T_DONE();
}
