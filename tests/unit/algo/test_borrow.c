/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_borrow.c -- borrowing between tiers (platform > product > tenant) on a fake clock:
 * path checks; random traffic over a tree against a reference decision and the invariants
 * (no tier above its cap, the root within its budget, `lent` exact, an owner refused only
 * when borrowed units fill the tier that refused it); a tier idle then busy gets its share
 * back within one window while its sibling never exceeds its cap; the same with concurrency
 * (borrowed slots flow back as they are released); reclaim expiry; all-or-nothing.
 * SLUICE_SEED varies the traffic.
 */
#include "sim/sim_borrow.h"
#include "t.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

static void test_path_check(void) {
    char err[200];
    sl_borrow_tier ok[3] = {{10, 30}, {50, 80}, {100, 100}};
    T_EQ_I(sl_borrow_path_check(ok, 3, err, sizeof(err)), SLUICE_OK);
    sl_borrow_tier bad1[2] = {{40, 30}, {100, 100}};
    T_EQ_I(sl_borrow_path_check(bad1, 2, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "share above cap") != NULL);
    sl_borrow_tier bad2[2] = {{10, 30}, {100, 120}};
    T_EQ_I(sl_borrow_path_check(bad2, 2, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "root") != NULL);
    sl_borrow_tier bad3[2] = {{10, 130}, {100, 100}};
    T_EQ_I(sl_borrow_path_check(bad3, 2, NULL, 0), SLUICE_EINVAL);
    T_EQ_I(sl_borrow_path_check(ok, 0, NULL, 0), SLUICE_EINVAL);
    T_EQ_I(sl_borrow_path_check(ok, SL_BORROW_MAX_DEPTH + 1, NULL, 0), SLUICE_EINVAL);
    T_EQ_U(sizeof(sl_borrow_state), 40);
}

/* ---- a tree: root, NP products, NT tenants per product --------------------------- */

#define NP 2
#define NT 3

typedef struct tree {
    sl_borrow_tier root, product[NP], tenant[NP][NT];
    sl_borrow_state sroot, sproduct[NP], stenant[NP][NT];
} tree;

static unsigned path(tree *t, int p, int k, sl_borrow_tier *tiers, sl_borrow_state **st) {
    tiers[0] = t->tenant[p][k];
    tiers[1] = t->product[p];
    tiers[2] = t->root;
    st[0] = &t->stenant[p][k];
    st[1] = &t->sproduct[p];
    st[2] = &t->sroot;
    return 3;
}

static void tree_init(tree *t, uint64_t *seed) {
    memset(t, 0, sizeof(*t));
    t->root.share = t->root.cap = 60 + t_rand(seed) % 100;
    for (int p = 0; p < NP; p++) {
        t->product[p].share = t->root.share / NP - t_rand(seed) % 5;
        t->product[p].cap = t->product[p].share + t_rand(seed) % (t->root.share - t->product[p].share + 1);
        for (int k = 0; k < NT; k++) {
            t->tenant[p][k].share = t->product[p].share / NT - t_rand(seed) % 3;
            t->tenant[p][k].cap =
                t->tenant[p][k].share + t_rand(seed) % (t->product[p].cap - t->tenant[p][k].share + 1);
        }
    }
    t->sroot.mark = (sl_borrow_mark){INT64_MIN, INT64_MIN};
    for (int p = 0; p < NP; p++) {
        t->sproduct[p].mark = t->sroot.mark;
        for (int k = 0; k < NT; k++) t->stenant[p][k].mark = t->sroot.mark;
    }
}

/* The reference decision: every tier within its cap, and no tier going beyond its share
 * while its parent reclaims. */
static bool ref_admit(const sl_borrow_tier *tiers, const uint64_t *use, const sl_borrow_mark *marks,
                      unsigned depth, int64_t now, uint64_t cost) {
    for (unsigned i = 0; i < depth; i++)
        if (use[i] + cost > tiers[i].cap) return false;
    for (unsigned i = 0; i + 1 < depth; i++)
        if (use[i] + cost > tiers[i].share && now < marks[i + 1].reclaim_until_ns) return false;
    return true;
}

/* Use of a state at now as the module counts it (rate: per window). */
static uint64_t use_at(const sl_borrow_params *bp, const sl_borrow_state *s, int64_t now) {
    if (bp->window_ns > 0) {
        int64_t w = now / bp->window_ns * bp->window_ns;
        if (s->window_start_ns != w) return 0;
    }
    return s->use;
}

static uint64_t over(uint64_t u, uint64_t share) {
    return u > share ? u - share : 0;
}

static void run_random(bool rate) {
    uint64_t seed = t_seed() + (rate ? 1 : 0);
    for (int round = 0; round < 200; round++) {
        tree t;
        tree_init(&t, &seed);
        sl_borrow_params bp = {rate ? 1 * S : 0, (int64_t)(t_rand(&seed) % 3) * 500 * MS};
        int64_t now = 10 * S;
        /* held units per tenant (concurrency: to release later) */
        uint64_t held[NP][NT] = {{0}};
        for (int step = 0; step < 3000; step++) {
            now += (int64_t)(t_rand(&seed) % (20 * MS));
            int p = (int)(t_rand(&seed) % NP), k = (int)(t_rand(&seed) % NT);
            sl_borrow_tier tiers[3];
            sl_borrow_state *st[3];
            unsigned d = path(&t, p, k, tiers, st);
            if (!rate && held[p][k] > 0 && t_rand(&seed) % 2) {
                uint64_t n = 1 + t_rand(&seed) % held[p][k];
                sl_borrow_release(&bp, tiers, st, d, now, n);
                held[p][k] -= n;
                continue;
            }
            uint64_t cost = 1 + t_rand(&seed) % 3, use[3];
            sl_borrow_mark marks[3];
            for (unsigned i = 0; i < d; i++) {
                use[i] = use_at(&bp, st[i], now);
                marks[i] = st[i]->mark;
            }
            sl_borrow_verdict v;
            sl_borrow_check(&bp, tiers, (const sl_borrow_state *const *)st, d, now, cost, &v);
            bool want = ref_admit(tiers, use, marks, d, now, cost);
            if (v.admit != want) {
                T_FAIL("seed %llu round %d step %d: admit %d, reference %d", (unsigned long long)seed, round, step,
                       v.admit, want);
                return;
            }
            if (!v.admit && v.reclaim_level >= 0) {
                /* an owner refused: borrowed units fill the refusing tier */
                const sl_borrow_state *rs = st[v.reclaim_level];
                if (use_at(&bp, rs, now) > 0 && rs->lent == 0) {
                    T_FAIL("owner refused at level %d with nothing lent", v.reclaim_level);
                    return;
                }
            }
            sl_borrow_apply(&bp, tiers, st, d, now, cost, &v);
            if (v.admit) held[p][k] += cost;
            /* invariants over the whole tree */
            uint64_t ur = use_at(&bp, &t.sroot, now), sum_p = 0, lent_root = 0;
            T_CHECK(ur <= t.root.share);
            for (int q = 0; q < NP; q++) {
                uint64_t up = use_at(&bp, &t.sproduct[q], now), sum_t = 0, lent_p = 0;
                if (up > t.product[q].cap) {
                    T_FAIL("product %d above its cap: %llu > %llu", q, (unsigned long long)up,
                           (unsigned long long)t.product[q].cap);
                    return;
                }
                for (int j = 0; j < NT; j++) {
                    uint64_t ut = use_at(&bp, &t.stenant[q][j], now);
                    if (ut > t.tenant[q][j].cap) {
                        T_FAIL("tenant above its cap");
                        return;
                    }
                    sum_t += ut;
                    lent_p += over(ut, t.tenant[q][j].share);
                }
                T_EQ_U(up, sum_t);
                if (up > 0) T_EQ_U(t.sproduct[q].lent, lent_p);
                sum_p += up;
                lent_root += over(up, t.product[q].share);
            }
            T_EQ_U(ur, sum_p);
            if (ur > 0) T_EQ_U(t.sroot.lent, lent_root);
            if (t_failed_checks) return;
        }
    }
}

static void test_random_rate(void) {
    run_random(true);
}

static void test_random_concurrency(void) {
    run_random(false);
}

/* sim_borrow.h: B borrows A's idle share up to its cap; A wakes up mid-window: from the
 * next window on it gets its whole share, every window; B never holds more than 80. */
static void test_idle_then_busy_gets_share_back_within_a_window(void) {
    static sim_borrow_run r;
    sim_borrow_default(&r);
    sim_borrow(&r);
    for (int w = 0; w < 5; w++) {
        T_EQ_U(r.got_a[w], 0);
        T_EQ_U(r.got_b[w], 80); /* B borrows A's idle share up to its cap */
    }
    T_CHECK(r.got_a[5] >= 20); /* what was left of the window */
    T_CHECK(r.refused_a_owner > 0);
    /* A waited for its share at most until the end of the window it woke up in: no
     * refusal within its share after that boundary */
    T_CHECK(r.first_owner_refusal_ns >= r.a_from_ns);
    T_CHECK(r.last_owner_refusal_ns < (r.a_from_ns / S + 1) * S);
    for (int w = 0; w < SIM_BORROW_WINDOWS; w++) {
        if (w >= 6 && r.got_a[w] < 50) T_FAIL("window %d: A got %llu < its share 50", w, (unsigned long long)r.got_a[w]);
        T_CHECK(r.max_use_b[w] <= 80);
        T_CHECK(r.got_a[w] + r.got_b[w] <= 100);
        if (w >= 6) T_CHECK(r.got_b[w] >= 20);
    }
}

/* Concurrency: B holds 80 slots (30 borrowed); A needs 50. Its refusal stops B from
 * borrowing, so B's released slots flow to A: A holds its 50 once B's borrowed requests
 * finished, even though B keeps asking. Then the reclaim mark expires. */
static void test_concurrency_reclaim(void) {
    sl_borrow_params bp = {0, 500 * MS};
    sl_borrow_tier a[2] = {{50, 80}, {100, 100}}, b[2] = {{50, 80}, {100, 100}};
    sl_borrow_state sa = {0, 0, 0, {INT64_MIN, INT64_MIN}}, sb = sa, sroot = sa;
    sl_borrow_state *pa[2] = {&sa, &sroot}, *pb[2] = {&sb, &sroot};
    sl_borrow_verdict v;
    int64_t now = 1 * S;
    for (int i = 0; i < 80; i++) {
        sl_borrow_check(&bp, b, (const sl_borrow_state *const *)pb, 2, now, 1, &v);
        sl_borrow_apply(&bp, b, pb, 2, now, 1, &v);
    }
    T_EQ_U(sb.use, 80);
    T_EQ_U(sroot.lent, 30);
    for (int i = 0; i < 20; i++) {
        sl_borrow_check(&bp, a, (const sl_borrow_state *const *)pa, 2, now, 1, &v);
        sl_borrow_apply(&bp, a, pa, 2, now, 1, &v);
    }
    T_EQ_U(sa.use, 20);
    sl_borrow_check(&bp, a, (const sl_borrow_state *const *)pa, 2, now, 1, &v);
    T_CHECK(!v.admit);
    T_EQ_I(v.reason, SL_BORROW_FULL);
    T_EQ_I(v.reclaim_level, 1);
    sl_borrow_apply(&bp, a, pa, 2, now, 1, &v);
    T_EQ_I(sroot.mark.reclaim_until_ns, now + 500 * MS);
    T_EQ_I(sa.mark.owed_until_ns, now + 500 * MS);
    T_EQ_U(sa.use, 20); /* a refusal takes nothing */
    /* B releases one slot at a time and asks again at once; A asks after each. */
    for (int i = 0; i < 40; i++) {
        now += 1 * MS;
        sl_borrow_release(&bp, b, pb, 2, now, 1);
        sl_borrow_check(&bp, b, (const sl_borrow_state *const *)pb, 2, now, 1, &v);
        if (sb.use >= 50) {
            T_CHECK(!v.admit); /* beyond its share while the root reclaims */
            T_EQ_I(v.reason, SL_BORROW_RECLAIM);
        }
        sl_borrow_apply(&bp, b, pb, 2, now, 1, &v);
        sl_borrow_check(&bp, a, (const sl_borrow_state *const *)pa, 2, now, 1, &v);
        sl_borrow_apply(&bp, a, pa, 2, now, 1, &v);
    }
    T_EQ_U(sa.use, 50);
    T_EQ_U(sb.use, 50);
    T_EQ_U(sroot.lent, 0);
    /* A finishes 20 requests and asks no more: while the mark lasts B cannot borrow them;
     * reclaim_ns after A's last in-share request it may again. */
    sl_borrow_release(&bp, a, pa, 2, now, 20);
    sl_borrow_check(&bp, b, (const sl_borrow_state *const *)pb, 2, now, 1, &v);
    T_CHECK(!v.admit);
    T_EQ_I(v.reason, SL_BORROW_RECLAIM);
    now = sroot.mark.reclaim_until_ns;
    sl_borrow_check(&bp, b, (const sl_borrow_state *const *)pb, 2, now, 1, &v);
    T_CHECK(v.admit);
    T_EQ_I(v.borrow_level, 0);
    T_EQ_U(v.borrowed, 1);
}

/* A refusal at the root changes no tier's use (all or nothing); the retry-after of a rate
 * budget is the end of the window; fresh_at lets the store drop idle tiers. */
static void test_all_or_nothing_and_expiry(void) {
    sl_borrow_params bp = {1 * S, 1 * S};
    sl_borrow_tier path3[3] = {{10, 40}, {30, 40}, {40, 40}};
    sl_borrow_state s0 = {0, 0, 0, {INT64_MIN, INT64_MIN}}, s1 = s0, s2 = s0;
    sl_borrow_state *st[3] = {&s0, &s1, &s2};
    sl_borrow_verdict v;
    int64_t now = 3 * S + 250 * MS;
    sl_borrow_check(&bp, path3, (const sl_borrow_state *const *)st, 3, now, 41, &v);
    T_CHECK(!v.admit);
    T_EQ_I(v.level, 0);
    T_EQ_I(v.reason, SL_BORROW_CAP);
    T_EQ_I(v.retry_after_ns, 750 * MS);
    sl_borrow_apply(&bp, path3, st, 3, now, 41, &v);
    T_EQ_U(s0.use + s1.use + s2.use, 0);
    sl_borrow_check(&bp, path3, (const sl_borrow_state *const *)st, 3, now, 40, &v);
    T_CHECK(v.admit);
    T_EQ_I(v.borrow_level, 0);
    T_EQ_U(v.borrowed, 30);
    sl_borrow_apply(&bp, path3, st, 3, now, 40, &v);
    T_EQ_U(s0.use, 40);
    T_EQ_U(s2.use, 40);
    T_EQ_I(sl_borrow_fresh_at(&bp, &s0, now), 4 * S);
    T_EQ_I(sl_borrow_fresh_at(&bp, NULL, now), now);
    /* next window: everything reads empty again */
    sl_borrow_check(&bp, path3, (const sl_borrow_state *const *)st, 3, 4 * S, 40, &v);
    T_CHECK(v.admit);
    sl_borrow_params conc = {0, 1 * S};
    T_EQ_I(sl_borrow_fresh_at(&conc, &s0, now), INT64_MAX); /* held slots */
}

int main(void) {
    T_RUN(test_path_check);
    T_RUN(test_random_rate);
    T_RUN(test_random_concurrency);
    T_RUN(test_idle_then_busy_gets_share_back_within_a_window);
    T_RUN(test_concurrency_reclaim);
    T_RUN(test_all_or_nothing_and_expiry);
    return T_DONE();
}
