/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_conc.c -- concurrency: random acquire/release/lose traffic against a
 * reference that tracks every lease on its own (the limit on leases within their lease
 * time is never exceeded; the count stays between "every live lease" and "every lease
 * younger than lease + w"); leaked leases reclaimed within (lease, lease + w]; expired
 * leases refused without a change; exact retry-after and reset-after; settle, rebase,
 * carry and validation; a peek (cost 0) never takes a slot, whichever way it is asked.
 */
#include "algo.h"
#include "algo_impl.h"
#include "t.h"

#include "sluice.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

/* The documented bound: w = ceil(lease / (SL_CONC_BUCKETS - 1)). */
static int64_t doc_w(int64_t lease) { return (lease + SL_CONC_BUCKETS - 2) / (SL_CONC_BUCKETS - 1); }

static sl_limit mk(uint64_t limit, int64_t lease_ns) {
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_CONCURRENCY;
    spec.name = "conc";
    spec.limit = limit;
    spec.lease_ns = lease_ns;
    sl_limit lim;
    char msg[256];
    if (sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)) != SLUICE_OK) T_FAIL("sl_limit_init: %s", msg);
    return lim;
}

static sluice_time at(int64_t mono_ns) {
    sluice_time t = {mono_ns, INT64_C(1700000000) * S}; /* wall time is not used */
    return t;
}

/* Slots in flight as the limiter sees them at t (a peek on a copy). */
static uint64_t in_flight(const sl_limit *lim, const sl_conc_state *st, int64_t t) {
    sl_conc_state copy = *st, next;
    sl_result r;
    T_CHECK(!sl_conc_decide(lim, &copy, &next, at(t), 0, &r));
    T_CHECK(memcmp(&copy, st, sizeof(copy)) == 0);
    return lim->limit - r.remaining;
}

static bool admits(const sl_limit *lim, const sl_conc_state *st, int64_t t, uint64_t cost) {
    sl_conc_state copy = *st, next;
    sl_result r;
    sl_conc_decide(lim, &copy, &next, at(t), cost, &r);
    return r.allowed;
}

/* A lost release is reclaimed more than `lease` and at most lease + w after the
 * acquisition, wherever in its bucket the acquisition fell. */
static void test_leak_bound(void) {
    static const int64_t leases[] = {1, 2, 5, 6, 7, 11, 29, 30, 31, 1000003, 30 * S};
    for (size_t i = 0; i < sizeof(leases) / sizeof(leases[0]); i++) {
        int64_t lease = leases[i], w = doc_w(lease);
        sl_limit lim = mk(4, lease);
        for (int64_t k = 0; k < 3 * w; k += (w > 10 ? w / 3 : 1)) {
            int64_t a = 1 * S + k;
            sl_conc_state st;
            sl_result r;
            T_CHECK(sl_conc_decide(&lim, NULL, &st, at(a), 4, &r));
            T_CHECK(r.allowed && r.lease != 0);
            /* still held at a + lease: the limit protects work running its full lease */
            T_CHECK(!admits(&lim, &st, a + lease, 1));
            T_EQ_U(in_flight(&lim, &st, a + lease), 4);
            /* free at a + lease + w */
            T_CHECK(admits(&lim, &st, a + lease + w, 4));
            /* exactly when: reset_after says it, and it is inside the bound */
            int64_t free_at = a + r.reset_after_ns;
            T_CHECK(free_at > a + lease && free_at <= a + lease + w);
            T_EQ_U(in_flight(&lim, &st, free_at - 1), 4);
            T_EQ_U(in_flight(&lim, &st, free_at), 0);
            T_EQ_I(sl_conc_fresh_at(&lim, &st, at(a)), free_at);
            /* retry-after of a full limit is that instant too */
            sl_conc_state next;
            T_CHECK(!sl_conc_decide(&lim, &st, &next, at(a + 1), 1, &r));
            T_EQ_I(r.retry_after_ns, free_at - (a + 1));
        }
    }
}

static void test_release(void) {
    sl_limit lim = mk(3, 10 * S);
    int64_t t = 100 * S, w = doc_w(10 * S);
    sl_conc_state st, before;
    sl_result r;
    T_CHECK(sl_conc_decide(&lim, NULL, &st, at(t), 2, &r));
    uint64_t l1 = r.lease;
    T_EQ_U(r.remaining, 1);
    T_EQ_U(r.limit, 3);
    T_EQ_I(r.retry_after_ns, 0);
    T_CHECK(sl_conc_decide(&lim, &st, &st, at(t + 3 * S), 1, &r));
    uint64_t l2 = r.lease;
    T_CHECK(l1 != l2);
    T_CHECK(!sl_conc_decide(&lim, &st, &st, at(t + 3 * S), 1, &r));
    /* rejected: retry when the 2 slots of t expire, not before */
    T_CHECK(r.retry_after_ns > 7 * S && r.retry_after_ns <= 7 * S + w);
    /* release the first: 2 back */
    T_CHECK(sl_conc_release(&lim, &st, &st, at(t + 4 * S), l1));
    T_EQ_U(in_flight(&lim, &st, t + 4 * S), 1);
    /* a second release of the same lease finds its bucket empty: refused */
    before = st;
    T_CHECK(!sl_conc_release(&lim, &st, &st, at(t + 4 * S), l1));
    T_CHECK(memcmp(&before, &st, sizeof(st)) == 0);
    /* an expired lease is refused and changes nothing */
    before = st;
    sl_conc_state next;
    memset(&next, 0xa5, sizeof(next));
    T_CHECK(!sl_conc_release(&lim, &st, &next, at(t + 3 * S + 10 * S + w), l2));
    T_CHECK(memcmp(&before, &st, sizeof(st)) == 0);
    T_CHECK(memcmp(&before, &next, sizeof(st)) == 0);
    /* garbage, zero and fresh-key releases are refused */
    T_CHECK(!sl_conc_release(&lim, &st, &next, at(t + 4 * S), 0));
    T_CHECK(!sl_conc_release(&lim, &st, &next, at(t + 4 * S), UINT64_C(0xdeadbeef00000001)));
    T_CHECK(!sl_conc_release(&lim, NULL, &next, at(t + 4 * S), l2));
    /* a release never drives a count below zero: a lease claiming more slots than its
     * bucket holds (a caller's bug) empties the bucket, nothing more */
    sl_conc_state one;
    T_CHECK(sl_conc_decide(&lim, NULL, &one, at(t), 1, &r));
    T_CHECK(sl_conc_release(&lim, &one, &one, at(t), r.lease + 2));
    T_EQ_U(in_flight(&lim, &one, t), 0);
    /* cost 0 is a peek: no lease, nothing taken */
    T_CHECK(!sl_conc_decide(&lim, &one, &one, at(t), 0, &r));
    T_EQ_U(r.lease, 0);
    T_CHECK(r.allowed);
    /* cost above the limit: never */
    T_CHECK(!sl_conc_decide(&lim, &one, &next, at(t), 4, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
    T_EQ_U(r.lease, 0);
}

typedef struct lease_ref {
    int64_t at;
    uint64_t slots, lease;
    int state; /* 0 held, 1 released, 2 lost */
} lease_ref;

#define MAX_LEASES 4096

/* Random acquire/release/lose traffic against a model that keeps each lease. */
static void test_property(void) {
    uint64_t seed = t_seed();
    static lease_ref lr[MAX_LEASES];
    for (int round = 0; round < 60; round++) {
        uint64_t L = 1 + t_rand(&seed) % 12;
        int64_t lease;
        switch (t_rand(&seed) % 3) {
        case 0: lease = 1 + (int64_t)(t_rand(&seed) % 40); break;             /* a few ns: rounding */
        case 1: lease = 1 * MS + (int64_t)(t_rand(&seed) % (100 * MS)); break; /* odd widths */
        default: lease = 30 * S; break;
        }
        int64_t w = doc_w(lease);
        sl_limit lim = mk(L, lease);
        sl_conc_state st;
        bool have = false;
        size_t n = 0;
        int64_t t = 1 * S + (int64_t)(t_rand(&seed) % (uint64_t)(7 * w));
        int bad = 0;
        for (int step = 0; step < 3000 && n < MAX_LEASES && bad < 5; step++) {
            /* clients that overran their lease are treated as lost */
            uint64_t must = 0, may = 0;
            for (size_t i = 0; i < n; i++) {
                if (lr[i].state == 0 && t - lr[i].at >= lease) lr[i].state = 2;
                if (lr[i].state == 1) continue;
                int64_t age = t - lr[i].at;
                if (age <= lease) must += lr[i].slots;
                if (age < lease + w) may += lr[i].slots;
            }
            /* the invariant: leases within their lease never exceed the limit */
            if (must > L) {
                T_FAIL("round %d: %llu slots in flight within their lease, limit %llu", round,
                       (unsigned long long)must, (unsigned long long)L);
                bad++;
            }
            uint64_t seen = have ? in_flight(&lim, &st, t) : 0;
            if (seen < must || seen > may) {
                T_FAIL("round %d t=%lld: limiter counts %llu, reference between %llu and %llu", round,
                       (long long)t, (unsigned long long)seen, (unsigned long long)must,
                       (unsigned long long)may);
                bad++;
            }
            uint64_t op = t_rand(&seed) % 10;
            if (op < 5) { /* acquire */
                uint64_t cost = t_rand(&seed) % (L + 2);
                sl_result r;
                sl_conc_state next;
                bool changed = sl_conc_decide(&lim, have ? &st : NULL, &next, at(t), cost, &r);
                bool fits = cost <= L && seen + cost <= L;
                if (r.allowed != fits || changed != (fits && cost > 0) || r.remaining != L - seen - (fits ? cost : 0)) {
                    T_FAIL("round %d: cost %llu seen %llu: allowed %d changed %d remaining %llu", round,
                           (unsigned long long)cost, (unsigned long long)seen, r.allowed, changed,
                           (unsigned long long)r.remaining);
                    bad++;
                }
                if (!fits && cost <= L) {
                    /* exact retry-after: still refused a nanosecond before, admitted at it */
                    T_CHECK(r.retry_after_ns > 0);
                    T_CHECK(!admits(&lim, &next, t + r.retry_after_ns - 1, cost));
                    T_CHECK(admits(&lim, &next, t + r.retry_after_ns, cost));
                } else if (!fits) {
                    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
                }
                /* reset-after: empty exactly then */
                if (r.reset_after_ns > 0) {
                    T_CHECK(in_flight(&lim, &next, t + r.reset_after_ns - 1) > 0);
                    T_EQ_U(in_flight(&lim, &next, t + r.reset_after_ns), 0);
                }
                T_EQ_I(sl_conc_fresh_at(&lim, &next, at(t)), t + r.reset_after_ns);
                if (fits && cost > 0) {
                    T_CHECK(r.lease != 0);
                    lr[n++] = (lease_ref){t, cost, r.lease, 0};
                }
                st = next, have = true;
            } else if (op < 8 && n > 0) { /* a client finishes and releases */
                size_t i = (size_t)(t_rand(&seed) % n);
                if (lr[i].state == 0) {
                    uint64_t before = in_flight(&lim, &st, t);
                    if (!sl_conc_release(&lim, &st, &st, at(t), lr[i].lease)) {
                        T_FAIL("round %d: release of a live lease refused", round);
                        bad++;
                    }
                    T_EQ_U(in_flight(&lim, &st, t), before - lr[i].slots);
                    lr[i].state = 1;
                } else if (lr[i].state == 2 && t - lr[i].at >= lease + w) {
                    /* a late release of a reclaimed lease: refused, nothing changed */
                    sl_conc_state copy = st, next;
                    T_CHECK(!sl_conc_release(&lim, &copy, &next, at(t), lr[i].lease));
                    T_CHECK(memcmp(&copy, &next, sizeof(copy)) == 0);
                }
            } else if (n > 0) { /* a client loses its lease */
                size_t i = (size_t)(t_rand(&seed) % n);
                if (lr[i].state == 0) lr[i].state = 2;
            }
            /* time moves: mostly a fraction of a bucket, sometimes a lot */
            uint64_t k = t_rand(&seed) % 10;
            t += k < 7 ? (int64_t)(t_rand(&seed) % (uint64_t)w) : k < 9 ? w + (int64_t)(t_rand(&seed) % (uint64_t)lease)
                                                              : 2 * lease;
        }
    }
}

static void test_settle(void) {
    int64_t lease = 10 * S, w = doc_w(lease), t = 50 * w;
    sl_limit lim = mk(10, lease);
    sl_conc_state st;
    sl_result r;
    T_CHECK(sl_conc_decide(&lim, NULL, &st, at(t), 3, &r));
    T_CHECK(sl_conc_decide(&lim, &st, &st, at(t + 2 * w), 2, &r));
    /* a refund of 3 takes the newest first: 2 from t+2w, 1 from t */
    sl_conc_settle(&lim, &st, &st, at(t + 2 * w), -3, &r);
    T_EQ_U(r.remaining, 8);
    T_CHECK(r.allowed);
    T_EQ_U(in_flight(&lim, &st, t + lease + w - 1), 2); /* what is left belongs to t */
    T_EQ_U(in_flight(&lim, &st, t + lease + w), 0);
    /* never below zero */
    sl_conc_settle(&lim, &st, &st, at(t + 2 * w), -100, &r);
    T_EQ_U(r.remaining, 10);
    T_EQ_U(in_flight(&lim, &st, t + 2 * w), 0);
    /* a charge may go past the limit; nothing fits until it expires */
    sl_conc_settle(&lim, &st, &st, at(t + 2 * w), 12, &r);
    T_EQ_U(r.remaining, 0);
    T_CHECK(!admits(&lim, &st, t + 2 * w, 0));
    T_CHECK(admits(&lim, &st, t + 3 * w + lease, 10));
    sl_conc_settle(&lim, &st, &st, at(t + 2 * w), INT64_MIN, &r);
    T_EQ_U(r.remaining, 10);
}

static void test_rebase_carry(void) {
    int64_t lease = 6 * S, w = doc_w(lease), t = 1000 * S + 17;
    sl_limit lim = mk(5, lease);
    sl_conc_state st, moved;
    sl_result r;
    T_CHECK(sl_conc_decide(&lim, NULL, &st, at(t), 4, &r));
    int64_t free_at = t + r.reset_after_ns;
    /* rebase: the same slots, shifted, never expiring earlier than shifted */
    for (int64_t d = -7 * S - 3; d <= 9 * S; d += 3 * S + 1) {
        moved = st;
        sl_conc_rebase(&lim, &moved, d);
        T_EQ_U(in_flight(&lim, &moved, t + d), 4);
        T_EQ_U(in_flight(&lim, &moved, free_at + d - 1), 4);
        T_CHECK(in_flight(&lim, &moved, free_at + d + w) == 0);
    }
    /* carry: a new limit keeps the slots in flight as they are */
    sl_conc_state next;
    sl_limit more = mk(8, lease), less = mk(2, lease);
    sl_conc_carry(&lim, &st, &more, &next, at(t + S));
    T_EQ_U(in_flight(&more, &next, t + S), 4);
    sl_conc_carry(&lim, &st, &less, &next, at(t + S));
    T_CHECK(!admits(&less, &next, t + S, 0)); /* 4 in flight over a limit of 2 */
    sl_conc_state back;
    sl_conc_carry(&less, &next, &more, &back, at(t + S));
    T_EQ_U(in_flight(&more, &back, t + S), 4);
    sl_algo_carry(&lim, &st, &more, &next, at(t + S));
    T_EQ_U(in_flight(&more, &next, t + S), 4);
    /* a longer lease keeps them at least as long; a shorter one at most its length */
    sl_limit longer = mk(5, 60 * S), shorter = mk(5, 1 * S);
    sl_conc_carry(&lim, &st, &longer, &next, at(t + S));
    T_EQ_U(in_flight(&longer, &next, free_at - 1), 4);
    T_EQ_U(in_flight(&longer, &next, t + S + 60 * S + doc_w(60 * S)), 0);
    sl_conc_carry(&lim, &st, &shorter, &next, at(t + S));
    T_EQ_U(in_flight(&shorter, &next, t + S), 4);
    T_EQ_U(in_flight(&shorter, &next, t + S + 1 * S + doc_w(1 * S)), 0);
    sl_conc_carry(&lim, NULL, &more, &next, at(t));
    T_EQ_U(in_flight(&more, &next, t), 0);
}

static void test_init(void) {
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_CONCURRENCY;
    spec.name = "c";
    sl_limit lim;
    char msg[256];
    spec.limit = 0, spec.lease_ns = S;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    spec.limit = 1u << 24, spec.lease_ns = S;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_ERANGE);
    spec.limit = 10, spec.lease_ns = 0;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    spec.lease_ns = -5;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    spec.lease_ns = INT64_MAX;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_ERANGE);
    spec.limit = (1u << 24) - 1, spec.lease_ns = 30 * S;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_OK);
    T_EQ_U(lim.capacity, (1u << 24) - 1);
    T_EQ_U(lim.state_size, sizeof(sl_conc_state));
    /* the biggest acquisition round-trips through its lease */
    sl_conc_state st;
    sl_result r;
    T_CHECK(sl_algo_decide(&lim, NULL, &st, at(5 * S), lim.limit, &r));
    T_CHECK(sl_conc_release(&lim, &st, &st, at(6 * S), r.lease));
    T_EQ_U(in_flight(&lim, &st, 6 * S), 0);
}

/* Peeks (cost 0) take no slot: three of them, alone, in a multi-limit decision or in a
 * batch, leave a max-3 tenant its three slots, and report what is in flight. */
static void test_peek_takes_no_slot(void) {
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_CONCURRENCY;
    spec.name = "tenant";
    spec.limit = 3;
    spec.lease_ns = 60 * S;
    sluice_limit_spec other = {0};
    other.algo = SLUICE_TOKEN_BUCKET;
    other.name = "rate";
    other.limit = 100;
    other.period_ns = S;
    int err = 0;
    sluice_limiter *l = sluice_limiter_create(&spec, &err, NULL, 0);
    sluice_limiter *r = sluice_limiter_create(&other, &err, NULL, 0);
    sluice_store *st = sluice_store_create(NULL, &err);
    T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
    T_EQ_I(sluice_store_register(st, r), SLUICE_OK);
    sluice_time now = {10 * S, INT64_C(1764633600) * S};
    sluice_item peek = {l, "t", 1, 0}, both[2] = {{r, "t", 1, 0}, {l, "t", 1, 0}};
    sluice_decision d;
    sluice_result br[3];
    sluice_item batch[3] = {peek, peek, peek};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++) {
            T_EQ_I(sluice_decide(st, &peek, 1, now, &d), SLUICE_OK);
            T_CHECK(d.allowed);
            T_EQ_U(d.results[0].lease, 0);
            T_EQ_I(sluice_decide(st, both, 2, now, &d), SLUICE_OK);
            T_CHECK(d.allowed);
            T_EQ_U(d.results[1].lease, 0);
        }
        T_EQ_I(sluice_decide_batch(st, batch, 3, now, br), 3);
        for (int i = 0; i < 3; i++) T_EQ_U(br[i].lease, 0);
        T_EQ_U(br[2].remaining, round == 0 ? 3 : 0);
        if (round == 1) break;
        /* the three slots are all still there */
        uint64_t lease[3];
        sluice_item take = {l, "t", 1, 1};
        for (int i = 0; i < 3; i++) {
            T_EQ_I(sluice_decide(st, &take, 1, now, &d), SLUICE_OK);
            T_CHECK(d.allowed);
            lease[i] = d.results[0].lease;
        }
        T_EQ_I(sluice_decide(st, &take, 1, now, &d), SLUICE_OK);
        T_CHECK(!d.allowed);
        (void)lease;
    }
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
    sluice_limiter_destroy(r);
}

int main(void) {
    T_RUN(test_leak_bound);
    T_RUN(test_release);
    T_RUN(test_property);
    T_RUN(test_settle);
    T_RUN(test_rebase_carry);
    T_RUN(test_init);
    T_RUN(test_peek_takes_no_slot);
    return T_DONE();
}
