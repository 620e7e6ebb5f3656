/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_penalty.c -- progressive penalties on a fake clock: escalation (1m, 2m, 4m, ... up to
 * 1h), no double counting during a block, forgiveness one level per 24h of good behaviour
 * counted from the end of the block, challenge levels and solving them, a random sequence
 * against a slow reference, and the attack the design is for: an attacker rotating
 * addresses against one account cannot lock out its owner coming from elsewhere, while the
 * same penalty keyed on the account would. SLUICE_SEED varies the random sequence.
 */
#include <math.h>

#include "sim/sim_penalty.h"
#include "t.h"

#define S SLUICE_NS_PER_S
#define MIN (60 * S)
#define HOUR (3600 * S)
#define DAY (24 * HOUR)

static sl_penalty_params defaults(void) {
    sl_penalty_params p;
    sl_penalty_params_default(&p);
    char err[200];
    if (sl_penalty_params_check(&p, err, sizeof(err)) != SLUICE_OK) T_FAIL("%s", err);
    return p;
}

static void test_params(void) {
    sl_penalty_params p = defaults();
    char err[200];
    T_EQ_I(p.first_ns, MIN);
    T_EQ_I(p.max_ns, HOUR);
    T_EQ_I(p.forgive_after_ns, DAY);
    T_EQ_U(p.factor_q16, 2u << 16);
    p.max_ns = 30 * S;
    T_EQ_I(sl_penalty_params_check(&p, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "max") != NULL);
    p = defaults();
    p.factor_q16 = (1u << 16) - 1;
    T_EQ_I(sl_penalty_params_check(&p, err, sizeof(err)), SLUICE_ERANGE);
    p = defaults();
    p.first_ns = 0;
    T_EQ_I(sl_penalty_params_check(&p, NULL, 0), SLUICE_EINVAL);
    p = defaults();
    p.forgive_after_ns = 0;
    T_EQ_I(sl_penalty_params_check(&p, NULL, 0), SLUICE_ERANGE);
    T_EQ_U(sizeof(sl_penalty_state), 24);
}

/* Each violation right after the previous block ends doubles the block, up to the max. */
static void test_escalation(void) {
    sl_penalty_params p = defaults();
    sl_penalty_state s;
    sl_penalty_result r;
    int64_t now = 5 * S, want = MIN;
    sl_penalty_check(&p, NULL, now, &r);
    T_EQ_U(r.action, SL_PENALTY_NONE);
    for (int i = 0; i < 10; i++) {
        sl_penalty_violation(&p, i == 0 ? NULL : &s, &s, now, &r);
        T_EQ_U(r.action, SL_PENALTY_BLOCK);
        T_EQ_I(r.period_ns, want);
        T_EQ_I(r.retry_after_ns, want);
        sl_penalty_check(&p, &s, now + want - 1, &r);
        T_EQ_U(r.action, SL_PENALTY_BLOCK);
        T_EQ_I(r.retry_after_ns, 1);
        sl_penalty_check(&p, &s, now + want, &r);
        T_EQ_U(r.action, SL_PENALTY_NONE);
        now += want;
        want = want * 2 > HOUR ? HOUR : want * 2;
    }
    T_EQ_U(s.level, 7); /* 64 min >= 1 h: levels beyond would only slow forgiveness */
}

/* A factor of 1: every block is `first`, and one clean forgive_after forgives it all. */
static void test_factor_one(void) {
    sl_penalty_params p = defaults();
    p.factor_q16 = 1u << 16;
    sl_penalty_state s;
    sl_penalty_result r;
    int64_t now = 0;
    for (int i = 0; i < 5; i++) {
        sl_penalty_violation(&p, i ? &s : NULL, &s, now, &r);
        T_EQ_I(r.period_ns, MIN);
        now += MIN;
    }
    T_EQ_U(s.level, 1);
    sl_penalty_check(&p, &s, now + DAY, &r);
    T_EQ_U(r.level, 0);
}

/* A violation reported while a block runs (a retry that reached the limit anyway, or two
 * reports of one request) does not escalate. */
static void test_no_double_count_during_block(void) {
    sl_penalty_params p = defaults();
    sl_penalty_state s, before;
    sl_penalty_result r;
    sl_penalty_violation(&p, NULL, &s, 0, &r);
    before = s;
    sl_penalty_violation(&p, &s, &s, 30 * S, &r);
    T_CHECK(memcmp(&s, &before, sizeof(s)) == 0);
    T_EQ_U(r.action, SL_PENALTY_BLOCK);
    T_EQ_I(r.retry_after_ns, 30 * S);
    T_EQ_U(r.level, 1);
}

/* Forgiveness: one level per 24 h without a violation, counted from the end of the block. */
static void test_forgiveness(void) {
    sl_penalty_params p = defaults();
    sl_penalty_state s;
    sl_penalty_result r;
    int64_t now = 0;
    for (int i = 0; i < 3; i++) { /* levels 1, 2, 3: blocks 1, 2, 4 min */
        sl_penalty_violation(&p, i ? &s : NULL, &s, now, &r);
        now += r.period_ns;
    }
    T_EQ_U(s.level, 3);
    int64_t end = s.until_ns;
    sl_penalty_check(&p, &s, end + DAY - 1, &r);
    T_EQ_U(r.level, 3);
    sl_penalty_check(&p, &s, end + DAY, &r);
    T_EQ_U(r.level, 2);
    T_EQ_U(r.action, SL_PENALTY_NONE);
    /* two days after the block: level 1 left, so the next violation is level 2 (2 min) */
    sl_penalty_violation(&p, &s, &s, end + 2 * DAY, &r);
    T_EQ_U(r.level, 2);
    T_EQ_I(r.period_ns, 2 * MIN);
    /* fully forgiven after level x 24 h: the state is as good as fresh */
    end = s.until_ns;
    T_EQ_I(sl_penalty_fresh_at(&p, &s, end), end + 2 * DAY);
    sl_penalty_violation(&p, &s, &s, end + 2 * DAY, &r);
    T_EQ_U(r.level, 1);
    T_EQ_I(r.period_ns, MIN);
    T_EQ_I(sl_penalty_fresh_at(&p, NULL, 77), 77);
}

/* Levels up to challenge_levels answer a challenge; solving it lifts the period but keeps
 * the level; a block cannot be solved away. */
static void test_challenge(void) {
    sl_penalty_params p = defaults();
    p.challenge_levels = 2;
    sl_penalty_state s;
    sl_penalty_result r;
    sl_penalty_violation(&p, NULL, &s, 0, &r);
    T_EQ_U(r.action, SL_PENALTY_CHALLENGE);
    T_CHECK(sl_penalty_pass(&p, &s, &s, 10 * S));
    sl_penalty_check(&p, &s, 10 * S, &r);
    T_EQ_U(r.action, SL_PENALTY_NONE);
    T_EQ_U(r.level, 1);
    T_CHECK(!sl_penalty_pass(&p, &s, &s, 11 * S)); /* nothing to solve */
    sl_penalty_violation(&p, &s, &s, 20 * S, &r);
    T_EQ_U(r.action, SL_PENALTY_CHALLENGE);
    T_EQ_U(r.level, 2);
    T_EQ_I(r.period_ns, 2 * MIN);
    T_CHECK(sl_penalty_pass(&p, &s, &s, 30 * S));
    sl_penalty_violation(&p, &s, &s, 40 * S, &r);
    T_EQ_U(r.action, SL_PENALTY_BLOCK); /* level 3 */
    T_CHECK(!sl_penalty_pass(&p, &s, &s, 50 * S));
    sl_penalty_check(&p, &s, 50 * S, &r);
    T_EQ_U(r.action, SL_PENALTY_BLOCK);
    p.challenge_levels = SL_PENALTY_CHALLENGE_ALL;
    sl_penalty_check(&p, &s, 50 * S, &r);
    T_EQ_U(r.action, SL_PENALTY_CHALLENGE);
    T_CHECK(!sl_penalty_pass(&p, NULL, &s, 0));
}

/* ---- a slow reference: every day of forgiveness subtracted one at a time, periods in
 * floating point ---------------------------------------------------------------------- */

typedef struct ref_pen {
    int level;
    int64_t until, last;
} ref_pen;

static int ref_level(const sl_penalty_params *p, const ref_pen *m, int64_t now) {
    int level = m->level;
    int64_t t = m->until > m->last ? m->until : m->last;
    while (level > 0 && t + p->forgive_after_ns <= now) {
        t += p->forgive_after_ns;
        level--;
    }
    return level;
}

static double ref_period(const sl_penalty_params *p, int level) {
    double d = (double)p->first_ns * pow(p->factor_q16 / 65536.0, level - 1);
    return d > (double)p->max_ns ? (double)p->max_ns : d;
}

static void test_random_against_reference(void) {
    uint64_t seed = t_seed();
    for (int round = 0; round < 200; round++) {
        sl_penalty_params p;
        sl_penalty_params_default(&p);
        p.first_ns = (1 + (int64_t)(t_rand(&seed) % 120)) * S;
        p.factor_q16 = t_rand(&seed) % 8 == 0 ? 1u << 16 : (1u << 16) + (uint32_t)(t_rand(&seed) % (3u << 16));
        p.max_ns = p.first_ns * (1 + (int64_t)(t_rand(&seed) % 100));
        p.forgive_after_ns = (1 + (int64_t)(t_rand(&seed) % 48)) * HOUR;
        p.challenge_levels = (uint32_t)(t_rand(&seed) % 4);
        T_EQ_I(sl_penalty_params_check(&p, NULL, 0), SLUICE_OK);
        int cap = 1;
        while (cap < 255 && ref_period(&p, cap) < (double)p.max_ns) cap++;
        if (p.factor_q16 == (1u << 16)) cap = 1;
        sl_penalty_state s;
        ref_pen m = {0, 0, 0};
        bool fresh = true;
        int64_t now = 0;
        for (int step = 0; step < 300; step++) {
            now += (int64_t)(t_rand(&seed) % (uint64_t)(t_rand(&seed) % 2 ? 2 * p.max_ns : p.forgive_after_ns));
            sl_penalty_result r;
            int want_level = ref_level(&p, &m, now);
            bool blocked = m.level > 0 && now < m.until;
            sl_penalty_check(&p, fresh ? NULL : &s, now, &r);
            T_EQ_U(r.level, (unsigned)want_level);
            T_EQ_U(r.action != SL_PENALTY_NONE, blocked);
            if (t_rand(&seed) % 2) continue;
            sl_penalty_violation(&p, fresh ? NULL : &s, &s, now, &r);
            fresh = false;
            if (!blocked) {
                m.level = want_level + 1 > cap ? cap : want_level + 1;
                double d = ref_period(&p, m.level);
                m.until = now + (int64_t)d;
                m.last = now;
                if (fabs((double)r.period_ns - d) > 1.0 + d * 1e-9 * m.level) {
                    T_FAIL("seed %llu: level %d period %lld, reference %.0f", (unsigned long long)seed, m.level,
                           (long long)r.period_ns, d);
                    return;
                }
                m.until = now + r.period_ns; /* keep the models in step past rounding */
            }
            T_EQ_U(r.level, (unsigned)m.level);
            T_EQ_U(r.action, m.level <= (int)p.challenge_levels ? SL_PENALTY_CHALLENGE : SL_PENALTY_BLOCK);
            if (t_failed_checks) return;
        }
    }
}

/* The attack of sim_penalty.h: 1000 rotating addresses against one account for 10 hours,
 * the owner logging in every 10 minutes from her own address. */
static void test_rotating_addresses_cannot_lock_out_the_owner(void) {
    static sim_attack a;
    sim_attack_setup(&a, false);
    sim_attack_run(&a);
    T_EQ_U(a.owner_refused, 0);
    T_CHECK(a.owner_logins >= 60);
    T_CHECK(a.attacker_refused * 10 > a.attacker_attempts * 8); /* the attack was slowed */
    T_CHECK(a.account_state.level > 0);
    /* The anti-pattern: the same progressive block keyed on the account locks the owner out
     * for most of the attack. */
    sim_attack_setup(&a, true);
    sim_attack_run(&a);
    T_CHECK(a.owner_refused * 2 > a.owner_logins);
}

static void test_rebase(void) {
    sl_penalty_params p = defaults();
    sl_penalty_state s;
    sl_penalty_result r;
    sl_penalty_violation(&p, NULL, &s, 100 * S, &r);
    sl_penalty_rebase(&s, -50 * S);
    sl_penalty_check(&p, &s, 50 * S + MIN - 1, &r);
    T_EQ_U(r.action, SL_PENALTY_BLOCK);
    sl_penalty_check(&p, &s, 50 * S + MIN, &r);
    T_EQ_U(r.action, SL_PENALTY_NONE);
    s.until_ns = INT64_MAX - 5;
    sl_penalty_rebase(&s, INT64_MAX);
    T_CHECK(s.until_ns > 0);
}

int main(void) {
    T_RUN(test_params);
    T_RUN(test_escalation);
    T_RUN(test_factor_one);
    T_RUN(test_no_double_count_during_block);
    T_RUN(test_forgiveness);
    T_RUN(test_challenge);
    T_RUN(test_random_against_reference);
    T_RUN(test_rotating_addresses_cannot_lock_out_the_owner);
    T_RUN(test_rebase);
    return T_DONE();
}
