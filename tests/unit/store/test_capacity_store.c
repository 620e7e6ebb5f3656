/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_capacity_store.c -- the capacity rules of one store decision (store/group.c, run by
 * the memory store; the Redis store's script applies the same): priority classes over a
 * fixed concurrency budget, an adaptive one and a token bucket (lower classes shed first,
 * a reserve held for its class, the class carried by the lease), penalties (escalate on
 * repeated violations, refuse without touching the limits, decay, a challenge passed),
 * borrowing between tiers (caps hold, an owner gets its share back within one window).
 * Fake clock; every figure is derived from the parameters.
 */
#include "algo/limiter.h"
#include "store/store.h"
#include "t.h"

#include <unistd.h>

static sluice_store *st;
static sluice_time T0 = {INT64_C(1000) * SLUICE_NS_PER_S, INT64_C(1700000000) * SLUICE_NS_PER_S};

static sluice_time at(int64_t ms) {
    sluice_time t = T0;
    t.mono_ns += ms * SLUICE_NS_PER_MS;
    t.wall_ns += ms * SLUICE_NS_PER_MS;
    return t;
}

static sluice_limiter *make(sluice_limit_spec spec, const sl_cap *cap) {
    int err = 0;
    char msg[200];
    sluice_limiter *l = sl_limiter_create_cap(&spec, cap, &err, msg, sizeof(msg));
    if (l == NULL) {
        T_FAIL("create %s: %s", spec.name, msg);
        return NULL;
    }
    T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
    return l;
}

/* Default classes: critical 100 %, default 90 %, sheddable 70 %, batch 50 %. */
static sl_cap classes(uint32_t critical_reserve_ppm) {
    sl_cap c;
    memset(&c, 0, sizeof(c));
    sl_shed_params_default(&c.shed, 4);
    c.shed.cls[0].reserve_ppm = critical_reserve_ppm;
    return c;
}

static int one(const sluice_limiter *l, const char *key, uint32_t cls, sluice_time now, sl_sresult *r) {
    sl_sitem it = {.lim = l, .key = key, .key_len = strlen(key), .cost = 1, .cls = (uint8_t)cls};
    T_EQ_I(sl_mem_decide(st, &it, 1, 0, now, r), SLUICE_OK);
    return r->allowed;
}

/* How many of `n` requests of class cls are admitted in a row (on key "b"). */
static unsigned fill_key(const sluice_limiter *l, const char *key, uint32_t cls, unsigned n, uint64_t *leases) {
    unsigned ok = 0;
    for (unsigned i = 0; i < n; i++) {
        sl_sresult r;
        if (one(l, key, cls, T0, &r)) {
            if (leases) leases[ok] = r.r[0].lease;
            ok++;
        } else {
            T_EQ_U(r.x[0].kind & SL_CAPI_SHED, SL_CAPI_SHED);
            T_EQ_U(r.x[0].shed_cls, cls - 1);
            T_CHECK(r.x[0].shed_reason != SL_SHED_ADMIT);
            T_CHECK(r.r[0].retry_after_ns > 0);
        }
    }
    return ok;
}

static unsigned fill(const sluice_limiter *l, uint32_t cls, unsigned n, uint64_t *leases) {
    return fill_key(l, "b", cls, n, leases);
}

static void test_classes_shed_lowest_first(void) {
    sl_cap c = classes(0);
    sluice_limiter *l = make((sluice_limit_spec){.algo = SLUICE_CONCURRENCY, .name = "conc", .limit = 100,
                                                 .lease_ns = 60 * SLUICE_NS_PER_S},
                             &c);
    /* each class fills up to its share of the budget, whatever came before */
    T_EQ_U(fill(l, 4, 80, NULL), 50);  /* batch: 50 % */
    T_EQ_U(fill(l, 3, 80, NULL), 20);  /* sheddable: up to 70 % */
    T_EQ_U(fill(l, 2, 80, NULL), 20);  /* default: up to 90 % */
    sl_sresult r;
    T_EQ_I(one(l, "b", 4, T0, &r), 0);
    T_EQ_U(r.x[0].shed_reason, SL_SHED_PRIORITY); /* room left, not for batch */
    T_EQ_U(fill(l, 1, 80, NULL), 10);  /* critical: the rest */
    T_EQ_I(one(l, "b", 1, T0, &r), 0);
    T_EQ_U(r.x[0].shed_reason, SL_SHED_FULL);
    sluice_limiter_destroy(l);
}

/* Critical holds 30 % that sheddable (filling to 100 %) cannot take, even when sheddable
 * arrived first; releases give each class its slots back (the class rides in the lease). */
static void test_reserve_and_release(void) {
    sl_cap c = classes(300000);
    c.shed.cls[2].fill_ppm = SL_PPM; /* sheddable may fill everything but the reserve */
    c.shed.cls[1].fill_ppm = SL_PPM;
    c.shed.cls[3].fill_ppm = SL_PPM;
    sluice_limiter *l = make((sluice_limit_spec){.algo = SLUICE_CONCURRENCY, .name = "conc-r", .limit = 100,
                                                 .lease_ns = 60 * SLUICE_NS_PER_S},
                             &c);
    static uint64_t leases[200];
    T_EQ_U(fill(l, 3, 200, leases), 70);
    sl_sresult r;
    T_EQ_I(one(l, "b", 3, T0, &r), 0);
    T_EQ_U(r.x[0].shed_reason, SL_SHED_RESERVED);
    T_EQ_U(fill(l, 1, 200, NULL), 30); /* critical gets its reserve */
    /* sheddable gives 10 back: only sheddable's own freed slots are usable by it again */
    for (int i = 0; i < 10; i++)
        T_EQ_I(sl_mem_release(st, l, "b", 1, leases[i], false, -1, 0, at(1), NULL), SLUICE_OK);
    T_EQ_U(fill(l, 3, 20, NULL), 10);
    sluice_limiter_destroy(l);
}

/* A rate budget: classes by the fill of the bucket (burst - tokens left). */
static void test_classes_over_a_token_bucket(void) {
    sl_cap c = classes(0);
    sluice_limiter *l = make((sluice_limit_spec){.algo = SLUICE_TOKEN_BUCKET, .name = "tb", .limit = 100,
                                                 .period_ns = SLUICE_NS_PER_S, .burst = 100},
                             &c);
    T_EQ_U(fill(l, 4, 80, NULL), 50);
    T_EQ_U(fill(l, 3, 80, NULL), 20);
    sl_sresult r;
    T_EQ_I(one(l, "b", 4, T0, &r), 0);
    /* batch fits again once 21 tokens came back (70 used -> 49 + 1): 1 token per 10 ms */
    int64_t retry = r.r[0].retry_after_ns;
    T_EQ_I(retry, 21 * 10 * SLUICE_NS_PER_MS);
    T_EQ_I(one(l, "b", 4, at(retry / SLUICE_NS_PER_MS - 1), &r), 0);
    T_EQ_I(one(l, "b", 4, at(retry / SLUICE_NS_PER_MS), &r), 1);
    sluice_limiter_destroy(l);
}

static void test_adaptive_with_classes(void) {
    sl_cap c = classes(0);
    sl_adapt_params_default(&c.adapt, SL_ADAPT_GRADIENT2, 10, 10, 10); /* pinned at 10 */
    sluice_limiter *l = make((sluice_limit_spec){.algo = SLUICE_ADAPTIVE_CONCURRENCY, .name = "ac", .limit = 10,
                                                 .lease_ns = 60 * SLUICE_NS_PER_S},
                             &c);
    T_EQ_U(fill(l, 4, 20, NULL), 5);
    T_EQ_U(fill(l, 1, 20, NULL), 5);
    sl_sresult r;
    T_EQ_I(one(l, "b", 1, T0, &r), 0);
    T_EQ_U(r.x[0].kind & SL_CAPI_ADAPT, SL_CAPI_ADAPT);
    T_EQ_U(r.x[0].limit, 10);
    T_EQ_U(r.x[0].in_flight, 10);
    sluice_limiter_destroy(l);
}

/* ---- penalties ---------------------------------------------------------------------------- */

static sluice_limiter *pen_lim(const char *name, uint32_t challenge) {
    sl_cap c;
    memset(&c, 0, sizeof(c));
    c.pen.first_ns = 60 * SLUICE_NS_PER_S;
    c.pen.factor_q16 = 2 << 16;
    c.pen.max_ns = 3600 * SLUICE_NS_PER_S;
    c.pen.forgive_after_ns = 86400 * SLUICE_NS_PER_S;
    c.pen.challenge_levels = challenge;
    return make((sluice_limit_spec){.algo = SL_ALGO_PENALTY, .name = name}, &c);
}

/* One request: the offender's penalty item and the account's limit, one penalty group. */
static int attempt(const sluice_limiter *pen, const sluice_limiter *lim, const char *who, const char *acct,
                   sluice_time now, sl_sresult *r) {
    sl_sitem it[2] = {{.lim = pen, .key = who, .key_len = strlen(who), .cost = 1, .cap = SL_SIC_PENALTY, .pgrp = 1},
                      {.lim = lim, .key = acct, .key_len = strlen(acct), .cost = 1, .pgrp = 1}};
    T_EQ_I(sl_mem_decide(st, it, 2, 0, now, r), SLUICE_OK);
    return r->allowed;
}

static uint64_t used(const sluice_limiter *lim, const char *key, sluice_time now) {
    sl_sitem it = {.lim = lim, .key = key, .key_len = strlen(key), .cost = 0};
    sl_sresult r;
    sl_mem_decide(st, &it, 1, 0, now, &r);
    return r.r[0].limit - r.r[0].remaining;
}

static void test_penalty_escalates_and_decays(void) {
    sluice_limiter *pen = pen_lim("pen", 0);
    sluice_limiter *lim = make((sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = "login", .limit = 2,
                                                   .period_ns = 3600 * SLUICE_NS_PER_S},
                               NULL);
    sl_sresult r;
    int64_t t = 0;
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 1);
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 1);
    /* the third is refused by the limit: a violation, level 1, blocked for `first` */
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 0);
    T_EQ_I(r.r[1].allowed, 0);
    T_EQ_U(r.x[0].violation, 1);
    T_EQ_U(r.x[0].pen_level, 1);
    T_EQ_U(r.x[0].pen_action, SL_PENALTY_BLOCK);
    T_EQ_I(r.r[0].retry_after_ns, 60 * SLUICE_NS_PER_S);
    /* while blocked the offender is refused by the penalty, the limit untouched */
    uint64_t before = used(lim, "acct", at(t + 1000));
    T_EQ_I(attempt(pen, lim, "ip1", "other", at(t + 1000), &r), 0);
    T_EQ_I(r.r[0].allowed, 0);
    T_EQ_U(r.x[0].violation, 0);
    T_EQ_U(used(lim, "other", at(t + 1000)), 0);
    T_EQ_U(used(lim, "acct", at(t + 1000)), before);
    T_EQ_I(r.r[0].retry_after_ns, 59 * SLUICE_NS_PER_S);
    /* after the block, a repeat doubles it */
    t += 61 * 1000;
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 0);
    T_EQ_U(r.x[0].pen_level, 2);
    T_EQ_I(r.r[0].retry_after_ns, 120 * SLUICE_NS_PER_S);
    t += 121 * 1000;
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 0);
    T_EQ_U(r.x[0].pen_level, 3);
    T_EQ_I(r.r[0].retry_after_ns, 240 * SLUICE_NS_PER_S);
    /* a day clean after the block forgives one level (3 -> 2): the next violation (the
     * hour window has turned: two more pass first) is level 3 again, not 4 */
    t += (240 + 86400) * INT64_C(1000);
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 1);
    T_EQ_U(r.x[0].pen_level, 2);
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 1);
    T_EQ_I(attempt(pen, lim, "ip1", "acct", at(t), &r), 0);
    T_EQ_U(r.x[0].pen_level, 3);
    T_EQ_I(r.r[0].retry_after_ns, 240 * SLUICE_NS_PER_S);
    /* another address is not penalised by ip1's record */
    T_EQ_I(attempt(pen, lim, "ip2", "fresh-account", at(t), &r), 1);
    T_EQ_U(r.x[0].pen_level, 0);
    sluice_limiter_destroy(pen);
    sluice_limiter_destroy(lim);
}

/* A challenge period ends when the challenge is passed (SL_SREQ_PASS); a block does not. */
static void test_challenge_pass(void) {
    sluice_limiter *pen = pen_lim("pen-c", 1);
    sluice_limiter *lim = make((sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = "acct", .limit = 1,
                                                   .period_ns = SLUICE_NS_PER_S},
                               NULL);
    sl_sresult r;
    attempt(pen, lim, "a", "a", at(0), &r);
    T_EQ_I(attempt(pen, lim, "a", "a", at(0), &r), 0);
    T_EQ_U(r.x[0].pen_action, SL_PENALTY_CHALLENGE);
    T_EQ_I(attempt(pen, lim, "a", "a", at(2000), &r), 0); /* still challenged */
    sl_sitem it[2] = {{.lim = pen, .key = "a", .key_len = 1, .cap = SL_SIC_PENALTY, .pgrp = 1},
                      {.lim = lim, .key = "a", .key_len = 1, .pgrp = 1}};
    T_EQ_I(sl_mem_decide(st, it, 2, SL_SREQ_PASS, at(2000), &r), SLUICE_OK);
    T_EQ_I(r.allowed, 1);
    T_EQ_I(attempt(pen, lim, "a", "a", at(2000), &r), 1); /* passed: admitted again */
    /* the level stayed: the next violation is level 2, beyond challenge_levels: a block */
    T_EQ_I(attempt(pen, lim, "a", "a", at(2001), &r), 0);
    T_EQ_U(r.x[0].pen_level, 2);
    T_EQ_U(r.x[0].pen_action, SL_PENALTY_BLOCK);
    T_EQ_I(sl_mem_decide(st, it, 2, SL_SREQ_PASS, at(2002), &r), SLUICE_OK);
    T_EQ_I(r.allowed, 0); /* a block cannot be solved away */
    sluice_limiter_destroy(pen);
    sluice_limiter_destroy(lim);
}

/* ---- borrowing ----------------------------------------------------------------------------- */

static sluice_limiter *tier(const char *name, uint64_t limit) {
    sl_cap c;
    memset(&c, 0, sizeof(c));
    c.tail = SL_TAIL_MARKS;
    c.reclaim_ns = SLUICE_NS_PER_S;
    return make((sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = name, .limit = limit,
                                    .period_ns = SLUICE_NS_PER_S},
                &c);
}

/* Platform 100/s; products A and B: share 50, cap 80 each. */
static int ask(const sluice_limiter *root, const sluice_limiter *prod, const char *p, sluice_time now,
               sl_sresult *r) {
    sl_sitem it[2] = {{.lim = prod, .key = p, .key_len = 1, .cost = 1, .bpath = 1, .blevel = 0, .share = 50},
                      {.lim = root, .key = "", .key_len = 0, .cost = 1, .bpath = 1, .blevel = 1, .share = 100}};
    T_EQ_I(sl_mem_decide(st, it, 2, 0, now, r), SLUICE_OK);
    return r->allowed;
}

static void test_borrowing_returns_within_a_window(void) {
    sluice_limiter *root = tier("platform", 100), *prod = tier("product", 80);
    sl_sresult r;
    /* second 0: B alone borrows up to its cap of 80 */
    unsigned b = 0, a = 0;
    for (int i = 0; i < 200; i++) b += ask(root, prod, "B", at(100), &r);
    T_EQ_U(b, 80);
    T_EQ_U(r.x[0].borrow_reason, SL_BORROW_CAP);
    /* A arrives in the same second: the 20 left are A's (within its share) */
    for (int i = 0; i < 30; i++) a += ask(root, prod, "A", at(500), &r);
    T_EQ_U(a, 20);
    T_EQ_U(r.x[1].borrow_reason, SL_BORROW_FULL);
    /* A was refused within its share: the platform reclaims; from the next second on, B is
     * held to its share while A keeps asking, and A gets its whole share */
    for (int s = 1; s <= 3; s++) {
        a = b = 0;
        for (int i = 0; i < 100; i++) {
            b += ask(root, prod, "B", at(s * 1000 + 10 + i), &r);
            a += ask(root, prod, "A", at(s * 1000 + 10 + i), &r);
        }
        T_EQ_U(a, 50);
        T_EQ_U(b, 50);
    }
    /* A goes idle: after the reclaim lapses B borrows again (never beyond its cap) */
    b = 0;
    for (int i = 0; i < 200; i++) b += ask(root, prod, "B", at(6000 + i), &r);
    T_EQ_U(b, 80);
    sluice_limiter_destroy(root);
    sluice_limiter_destroy(prod);
}

/* ---- reload and snapshots -------------------------------------------------------------------- */

static uint64_t in_flight(const sluice_limiter *l, const char *key, sluice_time now) {
    sl_sitem it = {.lim = l, .key = key, .key_len = strlen(key), .cost = 0};
    sl_sresult r;
    sl_mem_decide(st, &it, 1, 0, now, &r);
    return r.r[0].limit - r.r[0].remaining;
}

/* A concurrency limit that gains classes on reload keeps its slots in flight (their
 * classes unknown: none reserved for them) and releases of the old leases still work;
 * penalties, class counts and borrowing marks survive a snapshot. */
static void test_reload_and_snapshot(void) {
    sluice_limiter *plain = make((sluice_limit_spec){.algo = SLUICE_CONCURRENCY, .name = "grow", .limit = 10,
                                                     .lease_ns = 60 * SLUICE_NS_PER_S},
                                 NULL);
    uint64_t leases[4];
    for (int i = 0; i < 4; i++) {
        sl_sresult r;
        T_EQ_I(one(plain, "k", 0, T0, &r), 1);
        leases[i] = r.r[0].lease;
    }
    sl_cap c = classes(500000); /* critical reserves half */
    sluice_limiter *cls = make((sluice_limit_spec){.algo = SLUICE_CONCURRENCY, .name = "grow", .limit = 10,
                                                   .lease_ns = 60 * SLUICE_NS_PER_S},
                               &c);
    T_EQ_U(in_flight(cls, "k", at(1)), 4);
    /* 4 in flight of unknown classes, critical's 5 reserved: batch (50 % fill) gets 1 */
    T_EQ_U(fill_key(cls, "k", 4, 10, NULL), 1);
    /* an old lease (no class in it) is released */
    T_EQ_I(sl_mem_release(st, cls, "k", 1, leases[0], false, -1, 0, at(2), NULL), SLUICE_OK);
    T_EQ_U(in_flight(cls, "k", at(2)), 4);
    /* a penalty, a class count and a tier's marks through a snapshot */
    sluice_limiter *pen = pen_lim("pen-s", 0);
    sluice_limiter *lim = make((sluice_limit_spec){.algo = SLUICE_FIXED_WINDOW, .name = "acct-s", .limit = 1,
                                                   .period_ns = 3600 * SLUICE_NS_PER_S},
                               NULL);
    sl_sresult r;
    attempt(pen, lim, "x", "x", at(3), &r);
    T_EQ_I(attempt(pen, lim, "x", "x", at(3), &r), 0);
    T_EQ_U(r.x[0].pen_level, 1);
    char path[] = "/tmp/sluice-capsXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    T_EQ_I(sluice_store_snapshot(st, path, at(4)), SLUICE_OK);
    int err;
    sluice_store *saved = st;
    st = sluice_store_create(NULL, &err);
    sluice_store_register(st, cls);
    sluice_store_register(st, pen);
    sluice_store_register(st, lim);
    char msg[200] = "";
    T_EQ_I(sluice_store_restore(st, path, at(5), NULL, msg, sizeof(msg)), SLUICE_OK);
    if (msg[0]) printf("restore: %s\n", msg);
    unlink(path);
    T_EQ_U(in_flight(cls, "k", at(5)), 4);
    T_EQ_U(fill_key(cls, "k", 4, 10, NULL), 1); /* as before the snapshot: batch's 50 % less the 4 held */
    T_EQ_I(attempt(pen, lim, "x", "x", at(6), &r), 0);
    T_EQ_U(r.x[0].pen_action, SL_PENALTY_BLOCK);
    T_EQ_U(r.x[0].violation, 0); /* refused by the restored block, no new violation */
    sluice_store_destroy(st);
    st = saved;
    sluice_limiter_destroy(plain);
    sluice_limiter_destroy(cls);
    sluice_limiter_destroy(pen);
    sluice_limiter_destroy(lim);
}

int main(void) {
    int err;
    st = sluice_store_create(NULL, &err);
    T_RUN(test_classes_shed_lowest_first);
    T_RUN(test_reserve_and_release);
    T_RUN(test_classes_over_a_token_bucket);
    T_RUN(test_adaptive_with_classes);
    T_RUN(test_penalty_escalates_and_decays);
    T_RUN(test_challenge_pass);
    T_RUN(test_borrowing_returns_within_a_window);
    T_RUN(test_reload_and_snapshot);
    sluice_store_destroy(st);
    return T_DONE();
}
