/* SPDX-License-Identifier: Apache-2.0 */
/*
 * penalty.h -- progressive penalties: each violation by the same key (the limit refused it)
 * starts a block that grows geometrically with repeats (first, first x factor, ... up to max)
 * and is forgiven one level per forgive_after of good behaviour. Low levels can answer a
 * challenge (CAPTCHA, step-up) instead of a hard block. Keyed on the offender (address,
 * device, API key), separately from the account it targets, so rotating addresses cannot
 * lock an account's owner out. State: 24 bytes per key. Units: nanoseconds (monotonic),
 * factor in Q16.16. Thread-safety: the caller serialises calls on one state.
 */
#ifndef SL_ALGO_PENALTY_H
#define SL_ALGO_PENALTY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_PENALTY_LEVEL_MAX 255u
#define SL_PENALTY_CHALLENGE_ALL UINT32_MAX

typedef struct sl_penalty_params {
    int64_t first_ns;          /* the first block (default 1 min) */
    uint32_t factor_q16;       /* each repeat multiplies it (default 2.0); within [1, 16] */
    int64_t max_ns;            /* the longest block (default 1 h) */
    int64_t forgive_after_ns;  /* each such span without a violation, counted from the end of
                                  the last block, forgives one level (default 24 h) */
    uint32_t challenge_levels; /* levels 1..challenge_levels answer CHALLENGE, higher ones
                                  BLOCK; 0 = always block, SL_PENALTY_CHALLENGE_ALL = always
                                  challenge (never a hard block) */
} sl_penalty_params;

typedef struct sl_penalty_state {
    int64_t until_ns; /* end of the current block or challenge period (<= now: none) */
    int64_t last_ns;  /* time of the last violation */
    uint32_t level;   /* levels held at the last violation (1 = first block) */
    uint32_t pad;
} sl_penalty_state;

typedef enum sl_penalty_action {
    SL_PENALTY_NONE = 0,     /* not penalised: decide as usual */
    SL_PENALTY_BLOCK = 1,    /* refuse (429 with Retry-After) */
    SL_PENALTY_CHALLENGE = 2 /* refuse with the challenge status/header; a solved challenge
                                (sl_penalty_pass) lifts the period */
} sl_penalty_action;

typedef struct sl_penalty_result {
    uint8_t action;         /* sl_penalty_action */
    uint32_t level;         /* levels held now (after forgiveness) */
    int64_t retry_after_ns; /* until the period ends (0 when none) */
    int64_t period_ns;      /* length of the period the key is in (0 when none) */
} sl_penalty_result;

void sl_penalty_params_default(sl_penalty_params *p);

/* SLUICE_OK, or SLUICE_EINVAL/ERANGE with a reason: 0 < first <= max <= 366 days, factor
 * in [1, 16], forgive_after > 0. */
int sl_penalty_params_check(const sl_penalty_params *p, char *errbuf, size_t errbuf_len);

/* The period a key with `level` levels gets: first x factor^(level-1), at most max. */
int64_t sl_penalty_period(const sl_penalty_params *p, uint32_t level);

/* Whether the key (state NULL = never seen) is penalised at now. Changes nothing. */
void sl_penalty_check(const sl_penalty_params *p, const sl_penalty_state *s, int64_t now_ns,
                      sl_penalty_result *r);

/* Records a violation at now: one level more (after forgiveness) and a new period. A
 * violation reported while a period runs changes nothing (the key is refused by the check
 * before it can reach the limit again; a second report must not double the penalty).
 * `next` may alias `s`. */
void sl_penalty_violation(const sl_penalty_params *p, const sl_penalty_state *s,
                          sl_penalty_state *next, int64_t now_ns, sl_penalty_result *r);

/* A challenge was solved: ends the current challenge period (the level stays, so the next
 * violation escalates). False, and nothing changes, when the key is not in one (a block
 * cannot be solved away). */
bool sl_penalty_pass(const sl_penalty_params *p, const sl_penalty_state *s,
                     sl_penalty_state *next, int64_t now_ns);

/* When the state is equivalent to fresh (every level forgiven, no period), at the earliest
 * now: the store may drop it then. */
int64_t sl_penalty_fresh_at(const sl_penalty_params *p, const sl_penalty_state *s, int64_t now_ns);

void sl_penalty_rebase(sl_penalty_state *s, int64_t delta_ns);

#endif /* SL_ALGO_PENALTY_H */
