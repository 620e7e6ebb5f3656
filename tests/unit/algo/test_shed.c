/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shed.c -- priority shedding as a pure function: parameter checks, the default
 * shares, each decision against a reference written from the invariants (after admitting,
 * the budget holds, the others' unused reserves are still free, and the class is within its
 * fill share or its own reserve) over random budgets, reserves never consumed by other
 * classes along random traffic, the reasons a rejection gives, and rate budgets (no
 * per-class use). Overload behaviour is in test_shed_sim.c.
 */
#include "algo/shed.h"
#include "sluice.h"
#include "t.h"

static void test_params(void) {
    sl_shed_params p;
    char err[200];
    sl_shed_params_default(&p, 4);
    T_EQ_I(sl_shed_params_check(&p, err, sizeof(err)), SLUICE_OK);
    T_EQ_U(p.nclasses, 4);
    /* critical, default, sheddable, batch: 100, 90, 70, 50 % */
    T_EQ_U(p.cls[0].fill_ppm, SL_PPM);
    T_CHECK(p.cls[1].fill_ppm == 900000 && p.cls[2].fill_ppm == 700000 && p.cls[3].fill_ppm == 500000);
    p.cls[3].fill_ppm = 800000; /* batch above sheddable: a lower class outliving a higher one */
    T_EQ_I(sl_shed_params_check(&p, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "class 3") != NULL);
    sl_shed_params_default(&p, 2);
    p.cls[0].reserve_ppm = 600000;
    p.cls[1].reserve_ppm = 500000;
    T_EQ_I(sl_shed_params_check(&p, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "reserves") != NULL);
    p.nclasses = 0;
    T_EQ_I(sl_shed_params_check(&p, NULL, 0), SLUICE_EINVAL);
    p.nclasses = SL_SHED_MAX_CLASSES + 1;
    T_EQ_I(sl_shed_params_check(&p, NULL, 0), SLUICE_EINVAL);
    sl_shed_params_default(&p, 1);
    p.cls[0].fill_ppm = SL_PPM + 1;
    T_EQ_I(sl_shed_params_check(&p, NULL, 0), SLUICE_EINVAL);
    T_EQ_U(sizeof(sl_shed_use), 32);
}

/* The reference: admitting `cost` must leave a state where the budget holds, every other
 * class's unused reserve is still free, and the class is within its fill share or within
 * its own reserve. Written with the shares as exact fractions (x * 1e6 <= cap * ppm). */
static bool ref_admit(const sl_shed_params *p, uint64_t cap, uint64_t used, const sl_shed_use *use,
                      uint32_t c, uint64_t cost) {
    unsigned __int128 after = (unsigned __int128)used + cost;
    if (after > cap) return false;
    unsigned __int128 others = 0;
    for (uint32_t j = 0; j < p->nclasses; j++) {
        if (j == c) continue;
        uint64_t r = 0; /* the largest r with r * 1e6 <= cap * reserve */
        while ((unsigned __int128)(r + 1) * SL_PPM <= (unsigned __int128)cap * p->cls[j].reserve_ppm) r++;
        uint64_t u = use ? use->by_class[j] : 0;
        others += r > u ? r - u : 0;
    }
    if (after + others > cap) return false;
    if (after * SL_PPM <= (unsigned __int128)cap * p->cls[c].fill_ppm) return true;
    if (use == NULL) return false;
    return ((unsigned __int128)use->by_class[c] + cost) * SL_PPM <= (unsigned __int128)cap * p->cls[c].reserve_ppm;
}

static void random_params(uint64_t *seed, sl_shed_params *p) {
    memset(p, 0, sizeof(*p));
    p->nclasses = 1 + (uint32_t)(t_rand(seed) % SL_SHED_MAX_CLASSES);
    uint32_t fill = SL_PPM, left = SL_PPM;
    for (uint32_t i = 0; i < p->nclasses; i++) {
        if (i > 0) fill -= (uint32_t)(t_rand(seed) % (fill / 3 + 1));
        p->cls[i].fill_ppm = fill;
        if (t_rand(seed) % 3 == 0) {
            uint32_t r = (uint32_t)(t_rand(seed) % (left / 2 + 1));
            p->cls[i].reserve_ppm = r;
            left -= r;
        }
    }
}

static void test_decide_matches_reference(void) {
    uint64_t seed = t_seed();
    for (int i = 0; i < 20000; i++) {
        sl_shed_params p;
        random_params(&seed, &p);
        T_EQ_I(sl_shed_params_check(&p, NULL, 0), SLUICE_OK);
        uint64_t cap = t_rand(&seed) % 300;
        sl_shed_use use;
        uint64_t used = 0;
        for (uint32_t j = 0; j < SL_SHED_MAX_CLASSES; j++) {
            use.by_class[j] = j < p.nclasses ? (uint32_t)(t_rand(&seed) % (cap / 2 + 2)) : 0;
            used += use.by_class[j];
        }
        if (t_rand(&seed) % 4 == 0) used += t_rand(&seed) % 20; /* untracked use */
        uint32_t c = (uint32_t)(t_rand(&seed) % p.nclasses);
        uint64_t cost = 1 + t_rand(&seed) % 8;
        bool with_use = t_rand(&seed) % 2;
        sl_shed_verdict v;
        sl_shed_decide(&p, cap, used, with_use ? &use : NULL, c, cost, &v);
        bool want = ref_admit(&p, cap, used, with_use ? &use : NULL, c, cost);
        if (v.admit != want) {
            T_FAIL("seed %llu case %d: cap %llu used %llu class %u cost %llu: admit %d, reference %d",
                   (unsigned long long)seed, i, (unsigned long long)cap, (unsigned long long)used, c,
                   (unsigned long long)cost, v.admit, want);
            return;
        }
        /* room is the largest cost that would be admitted */
        T_CHECK(v.room == 0 || ref_admit(&p, cap, used, with_use ? &use : NULL, c, v.room));
        T_CHECK(!ref_admit(&p, cap, used, with_use ? &use : NULL, c, v.room + 1));
        T_EQ_U(v.room, sl_shed_room(&p, cap, used, with_use ? &use : NULL, c));
        T_EQ_U(v.cls, c);
        T_EQ_U(v.reason == SL_SHED_ADMIT, v.admit);
    }
}

/* Along random traffic admitted only through the shedder: the unused reserves are always
 * free, and a class asking within its reserve is never refused, whoever came first. */
static void test_reserves_never_consumed(void) {
    uint64_t seed = t_seed();
    for (int round = 0; round < 300; round++) {
        sl_shed_params p;
        random_params(&seed, &p);
        uint64_t cap = 10 + t_rand(&seed) % 200, used = 0;
        sl_shed_use use;
        memset(&use, 0, sizeof(use));
        for (int step = 0; step < 2000; step++) {
            uint32_t c = (uint32_t)(t_rand(&seed) % p.nclasses);
            if (t_rand(&seed) % 3 == 0 && use.by_class[c] > 0) {
                uint32_t n = 1 + (uint32_t)(t_rand(&seed) % use.by_class[c]);
                sl_shed_give(&use, c, n);
                used -= n;
                continue;
            }
            uint64_t cost = 1 + t_rand(&seed) % 4;
            sl_shed_verdict v;
            sl_shed_decide(&p, cap, used, &use, c, cost, &v);
            uint64_t res = cap * p.cls[c].reserve_ppm / SL_PPM;
            if (use.by_class[c] + cost <= res && !v.admit) {
                T_FAIL("class %u refused within its reserve (%u + %llu <= %llu)", c, use.by_class[c],
                       (unsigned long long)cost, (unsigned long long)res);
                return;
            }
            if (v.admit) {
                sl_shed_take(&use, c, (uint32_t)cost);
                used += cost;
            }
            uint64_t unused = 0;
            for (uint32_t j = 0; j < p.nclasses; j++) {
                uint64_t r = cap * p.cls[j].reserve_ppm / SL_PPM;
                unused += r > use.by_class[j] ? r - use.by_class[j] : 0;
            }
            if (used > cap || cap - used < unused) {
                T_FAIL("reserves taken: cap %llu used %llu unused reserves %llu", (unsigned long long)cap,
                       (unsigned long long)used, (unsigned long long)unused);
                return;
            }
        }
    }
}

/* As the budget fills, classes drop out lowest first: batch above 50 %, sheddable above
 * 70 %, default above 90 %, critical at 100 %; without reserves a lower class is never
 * admitted where a higher one is refused. */
static void test_fill_order(void) {
    sl_shed_params p;
    sl_shed_params_default(&p, 4);
    uint32_t last_admitted_at[4] = {0};
    for (uint64_t used = 0; used < 100; used++)
        for (uint32_t c = 0; c < 4; c++) {
            sl_shed_verdict v;
            sl_shed_decide(&p, 100, used, NULL, c, 1, &v);
            if (v.admit) last_admitted_at[c] = (uint32_t)used;
            if (c > 0 && v.admit) {
                sl_shed_verdict hi;
                sl_shed_decide(&p, 100, used, NULL, c - 1, 1, &hi);
                T_CHECK(hi.admit);
            }
        }
    T_EQ_U(last_admitted_at[0], 99); /* critical takes the last slot */
    T_EQ_U(last_admitted_at[1], 89);
    T_EQ_U(last_admitted_at[2], 69);
    T_EQ_U(last_admitted_at[3], 49);
}

/* The reasons: priority (its share is filled), reserved (what is left is another class's
 * reserve), full (nothing left for anyone). The fill is reported in ppm. */
static void test_reasons(void) {
    sl_shed_params p;
    sl_shed_params_default(&p, 4);
    p.cls[0].reserve_ppm = 300000;
    sl_shed_use use;
    memset(&use, 0, sizeof(use));
    use.by_class[2] = 60;
    sl_shed_verdict v;
    sl_shed_decide(&p, 100, 60, &use, 3, 1, &v); /* batch at 60 % */
    T_CHECK(!v.admit);
    T_EQ_U(v.reason, SL_SHED_PRIORITY);
    T_EQ_U(v.fill_ppm, 600000);
    use.by_class[1] = 10;
    sl_shed_decide(&p, 100, 70, &use, 1, 1, &v); /* default: 30 free, all critical's reserve */
    T_CHECK(!v.admit);
    T_EQ_U(v.reason, SL_SHED_RESERVED);
    sl_shed_decide(&p, 100, 70, &use, 0, 30, &v); /* critical takes its reserve */
    T_CHECK(v.admit);
    T_EQ_U(v.room, 30);
    sl_shed_decide(&p, 100, 100, &use, 0, 1, &v);
    T_CHECK(!v.admit);
    T_EQ_U(v.reason, SL_SHED_FULL);
    T_EQ_U(v.fill_ppm, SL_PPM);
    sl_shed_decide(&p, 0, 0, NULL, 0, 1, &v); /* no budget at all */
    T_CHECK(!v.admit);
    T_EQ_U(v.reason, SL_SHED_FULL);
    sl_shed_decide(&p, 50, 80, &use, 0, 1, &v); /* an adaptive limit that shrank under use */
    T_CHECK(!v.admit);
    T_EQ_U(v.room, 0);
    sl_shed_decide(&p, 100, 0, NULL, 99, 1, &v); /* unknown class: the lowest */
    T_EQ_U(v.cls, 3);
}

/* A rate budget (no per-class use): a reserve is a floor the others cannot take, and the
 * class itself reaches it through its fill share. */
static void test_rate_budget_floors(void) {
    sl_shed_params p;
    sl_shed_params_default(&p, 3);
    p.cls[2].fill_ppm = SL_PPM; /* sheddable may fill to 100 %... */
    p.cls[1].fill_ppm = SL_PPM;
    p.cls[0].reserve_ppm = 200000; /* ...but the last 20 tokens are critical's */
    T_EQ_U(sl_shed_room(&p, 100, 0, NULL, 2), 80);
    T_EQ_U(sl_shed_room(&p, 100, 79, NULL, 2), 1);
    T_EQ_U(sl_shed_room(&p, 100, 80, NULL, 2), 0);
    T_EQ_U(sl_shed_room(&p, 100, 80, NULL, 0), 20);
    T_EQ_U(sl_shed_room(&p, 100, 100, NULL, 0), 0);
}

int main(void) {
    T_RUN(test_params);
    T_RUN(test_decide_matches_reference);
    T_RUN(test_reserves_never_consumed);
    T_RUN(test_fill_order);
    T_RUN(test_reasons);
    T_RUN(test_rate_budget_floors);
    return T_DONE();
}
