/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_penalty.h -- the attack progressive penalties are designed against, shared by
 * tests/unit/algo/test_penalty.c (asserts) and tests/sim/capacity_sim.c (figures). Fake clock.
 *
 * One account; an attacker sends wrong passwords from 1000 rotating addresses, one attempt
 * every 6 s, 6 from each address, for 10 hours; the owner logs in from her own address
 * every 10 minutes. Login failures are limited per address (5 per 15 min) and per account
 * (20 per hour), both fixed windows of libsluice's own algorithm; a refusal by either is a
 * violation. The right design keys a progressive block on the address and only a
 * challenge on the account; the anti-pattern (account_blocks) blocks the account.
 */
#ifndef SL_SIM_PENALTY_H
#define SL_SIM_PENALTY_H

#include <stdbool.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/penalty.h"
#include "sluice.h"

#define SIM_ADDRS 1001 /* 0..999 the attacker's, 1000 the owner's */
#define SIM_MIN (60 * SLUICE_NS_PER_S)
#define SIM_HOUR (3600 * SLUICE_NS_PER_S)

typedef struct sim_attack {
    sl_limit per_addr, per_account;
    sl_penalty_params addr_pen, account_pen;
    sl_fixed_state addr_win[SIM_ADDRS], account_win;
    bool addr_seen[SIM_ADDRS], account_seen;
    sl_penalty_state addr_state[SIM_ADDRS], account_state;
    bool addr_pen_seen[SIM_ADDRS], account_pen_seen;
    /* outputs */
    uint64_t attacker_attempts, attacker_refused, attacker_challenged, attacker_tries_checked;
    uint64_t owner_logins, owner_refused, owner_challenged;
} sim_attack;

static inline sl_limit sim_window_limit(uint64_t limit, int64_t period) {
    sluice_limit_spec spec;
    sl_limit lim;
    char err[128];
    memset(&spec, 0, sizeof(spec));
    spec.algo = SLUICE_FIXED_WINDOW;
    spec.name = "login";
    spec.limit = limit;
    spec.period_ns = period;
    memset(&lim, 0, sizeof(lim));
    sl_limit_init(&lim, &spec, NULL, err, sizeof(err));
    return lim;
}

static inline void sim_attack_setup(sim_attack *a, bool account_blocks) {
    memset(a, 0, sizeof(*a));
    a->per_addr = sim_window_limit(5, 15 * SIM_MIN);
    a->per_account = sim_window_limit(20, SIM_HOUR);
    sl_penalty_params_default(&a->addr_pen);
    sl_penalty_params_default(&a->account_pen);
    if (!account_blocks) a->account_pen.challenge_levels = SL_PENALTY_CHALLENGE_ALL;
}

typedef enum { SIM_LOGIN_ANSWERED, SIM_LOGIN_BLOCKED, SIM_LOGIN_CHALLENGED } sim_login;

/* One login attempt from `addr`: a wrong password (the attacker) or the right one (the
 * owner, who can solve a challenge; the attacker's bot cannot). */
static inline sim_login sim_attempt(sim_attack *a, int addr, int64_t now, bool wrong) {
    sluice_time t = {now, now};
    sl_penalty_result r;
    sl_result res;
    sl_penalty_check(&a->addr_pen, a->addr_pen_seen[addr] ? &a->addr_state[addr] : NULL, now, &r);
    if (r.action == SL_PENALTY_BLOCK) return SIM_LOGIN_BLOCKED;
    sl_penalty_check(&a->account_pen, a->account_pen_seen ? &a->account_state : NULL, now, &r);
    if (r.action == SL_PENALTY_BLOCK) return SIM_LOGIN_BLOCKED;
    if (r.action == SL_PENALTY_CHALLENGE) {
        if (wrong) return SIM_LOGIN_CHALLENGED;
        sl_penalty_pass(&a->account_pen, &a->account_state, &a->account_state, now);
        a->owner_challenged++;
    }
    if (!wrong) return SIM_LOGIN_ANSWERED;
    a->attacker_tries_checked++; /* the password was actually tried */
    sl_algo_decide(&a->per_addr, a->addr_seen[addr] ? &a->addr_win[addr] : NULL, &a->addr_win[addr], t, 1, &res);
    a->addr_seen[addr] = true;
    if (!res.allowed) {
        sl_penalty_violation(&a->addr_pen, a->addr_pen_seen[addr] ? &a->addr_state[addr] : NULL,
                             &a->addr_state[addr], now, &r);
        a->addr_pen_seen[addr] = true;
    }
    sl_algo_decide(&a->per_account, a->account_seen ? &a->account_win : NULL, &a->account_win, t, 1, &res);
    a->account_seen = true;
    if (!res.allowed) {
        sl_penalty_violation(&a->account_pen, a->account_pen_seen ? &a->account_state : NULL, &a->account_state,
                             now, &r);
        a->account_pen_seen = true;
    }
    return SIM_LOGIN_ANSWERED;
}

static inline void sim_attack_run(sim_attack *a) {
    for (int64_t now = 0; now < 10 * SIM_HOUR; now += 6 * SLUICE_NS_PER_S) {
        int addr = (int)((now / (6 * SLUICE_NS_PER_S)) / 6) % 1000;
        sim_login l = sim_attempt(a, addr, now, true);
        a->attacker_attempts++;
        if (l != SIM_LOGIN_ANSWERED) a->attacker_refused++;
        if (l == SIM_LOGIN_CHALLENGED) a->attacker_challenged++;
        if (now % (10 * SIM_MIN) == 0) {
            a->owner_logins++;
            if (sim_attempt(a, 1000, now + 1, false) == SIM_LOGIN_BLOCKED) a->owner_refused++;
        }
    }
}

#endif /* SL_SIM_PENALTY_H */
