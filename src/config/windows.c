/* SPDX-License-Identifier: Apache-2.0 */
/*
 * windows.c -- a policy's windows (`limits:` and each plan's): algorithms, rates, bursts,
 * quotas and their time zones, concurrency maxima and leases, delays; each window's spec
 * validated as the library would (sl__validate_spec), and what a cost may never exceed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algo/algo.h"
#include "config/compiled.h"
#include "core/path.h"
#include "store/memory/memory.h"

#define MAX_WINDOWS 16

static const char *const window_fields[] = {"name", "rate", "burst", "quota", "tz", "max",
                                            "lease", "max_delay", "algorithm", "counts", SL_ADAPTIVE_FIELDS,
                                            NULL};

const char *sl__algo_str(sluice_algo a) {
    const char *n = sluice_algo_name(a);
    return n ? n : "an unknown algorithm";
}

static bool algo_has_burst(sluice_algo a) {
    return a == SLUICE_TOKEN_BUCKET || a == SLUICE_GCRA || a == SLUICE_LEAKY_BUCKET;
}

bool sl__parse_algo(sl__ctx *cx, const sl_ynode *n, sluice_algo *out) {
    if (!sl__is_scalar(n) || sluice_algo_parse(n->s, out) != SLUICE_OK) {
        sl__err(cx, n, "unknown algorithm '%.40s' (expected fixed_window, sliding_window, "
                "sliding_log, token_bucket, gcra, leaky_bucket, concurrency, adaptive_concurrency "
                "or quota)",
                sl__is_scalar(n) ? n->s : "");
        return false;
    }
    return true;
}


bool sl__get_duration(sl__ctx *cx, const sl_ynode *n, int64_t *ns) {
    if (!sl__is_scalar(n) || !sl__parse_duration(n->s, ns)) {
        sl__err(cx, n, "bad duration '%.40s' (expected a number and a unit such as 500ms, "
                "30s, 5m, 1h, 1d; units ns, us, ms, s, sec, second, m, min, minute, h, hour, "
                "d, day, w, week, plurals too)", sl__is_scalar(n) ? n->s : "");
        return false;
    }
    return true;
}

bool sl__parse_window(sl__ctx *cx, const sl_ynode *n, sluice_algo algo, bool algo_set,
                      sl_cwindow *w) {
    memset(w, 0, sizeof(*w));
    if (!sl__check_fields(cx, n, "a limit", window_fields)) return false;
    w->line = n->line;
    w->col = n->col;
    bool ok = true;
    const sl_ynode *rate = sl__get(n, "rate"), *quota = sl__get(n, "quota"),
                   *max = sl__get(n, "max"), *an = sl__get(n, "algorithm");
    const sl_ynode *cn = sl__get(n, "counts"); /* LLM pools (config/llm.c) */
    if (cn != NULL && !sl__parse_counts(cx, cn, w)) return false;
    int kinds = (rate != NULL) + (quota != NULL) + (max != NULL);
    if (kinds != 1) {
        sl__err(cx, n, "%s (expected exactly one of rate: N/unit, quota: N/period, max: N)",
                kinds ? "a limit states one of rate, quota, max" : "a limit needs a size");
        return false;
    }
    sluice_algo a = algo;
    if (an != NULL) {
        if (!sl__parse_algo(cx, an, &a)) return false;
    } else if (quota != NULL) {
        a = SLUICE_QUOTA;
    } else if (max != NULL) {
        a = algo_set && algo == SLUICE_ADAPTIVE_CONCURRENCY ? algo : SLUICE_CONCURRENCY;
    } else if (!algo_set) {
        sl__err(cx, n, "no algorithm for this rate (expected 'algorithm:' on the policy or "
                "the limit)");
        return false;
    }
    w->spec.algo = a;
    if (a == SLUICE_QUOTA) {
        if (quota == NULL) {
            sl__err(cx, n, "the quota algorithm counts per calendar period (expected quota: "
                    "N/hour, N/day, N/week or N/month)");
            return false;
        }
        if (!sl__is_scalar(quota) ||
            !sl__parse_quota(quota->s, &w->spec.limit, &w->spec.quota_period)) {
            sl__err(cx, quota, "bad quota '%.40s' (expected N/hour, N/day, N/week or N/month, "
                    "e.g. 50000/day)", sl__is_scalar(quota) ? quota->s : "");
            ok = false;
        }
    } else if (a == SLUICE_CONCURRENCY || a == SLUICE_ADAPTIVE_CONCURRENCY) {
        if (max == NULL) {
            sl__err(cx, n, "a concurrency limit counts requests in flight (expected max: N)");
            return false;
        }
        ok &= sl__get_count(cx, max, "max", UINT32_MAX, &w->spec.limit);
        w->spec.lease_ns = 60 * SLUICE_NS_PER_S;
    } else {
        if (rate == NULL) {
            sl__err(cx, n, "algorithm %s needs a rate (expected rate: N/unit such as 10/s)",
                    sl__algo_str(a));
            return false;
        }
        if (!sl__is_scalar(rate) || !sl__parse_rate(rate->s, &w->spec.limit, &w->spec.period_ns)) {
            sl__err(cx, rate, "bad rate '%.40s' (expected N/unit with unit ms, s (sec, second), "
                    "min (m, minute), h (hour), day (d) or week (w), plurals too, or N/duration "
                    "such as 100/5m)", sl__is_scalar(rate) ? rate->s : "");
            ok = false;
        } else if (w->spec.limit == 0) {
            sl__err(cx, rate, "rate %.40s admits nothing (expected a limit of at least 1)",
                    rate->s);
            ok = false;
        }
    }
    const sl_ynode *x;
    if ((x = sl__get(n, "burst")) != NULL) {
        if (!algo_has_burst(a)) {
            sl__err(cx, x, "burst applies to token_bucket, gcra and leaky_bucket, not %s "
                    "(expected no burst, or one of those algorithms)", sl__algo_str(a));
            ok = false;
        } else {
            ok &= sl__get_count(cx, x, "burst", UINT32_MAX, &w->spec.burst);
        }
    }
    if ((x = sl__get(n, "tz")) != NULL) {
        if (a != SLUICE_QUOTA) {
            sl__err(cx, x, "tz applies to calendar quotas only (expected quota: N/period)");
            ok = false;
        } else {
            const char *tz = sl__get_str(cx, x, "tz");
            if (tz != NULL && tz[0] == '\0') {
                sl__err(cx, x, "empty time zone (expected an IANA name such as Europe/Madrid, "
                        "or omit tz for UTC)");
                tz = NULL;
            }
            w->spec.tz = tz ? sl__keep(cx, tz) : NULL;
            ok &= tz != NULL;
        }
    }
    if (ok) ok &= a == SLUICE_ADAPTIVE_CONCURRENCY ? sl__parse_adaptive(cx, n, w)
                                                   : sl__no_adaptive_fields(cx, n, a);
    if ((x = sl__get(n, "lease")) != NULL) {
        if (a != SLUICE_CONCURRENCY && a != SLUICE_ADAPTIVE_CONCURRENCY) {
            sl__err(cx, x, "lease applies to concurrency limits only (expected max: N)");
            ok = false;
        } else {
            ok &= sl__get_duration(cx, x, &w->spec.lease_ns);
        }
    }
    if ((x = sl__get(n, "max_delay")) != NULL) {
        if (a != SLUICE_LEAKY_BUCKET) {
            sl__err(cx, x, "max_delay applies to leaky_bucket only (use on_exceed: {delay: "
                    "...} to delay other algorithms)");
            ok = false;
        } else {
            if (!sl__get_duration(cx, x, &w->spec.max_delay_ns)) {
                ok = false;
            } else if (w->spec.max_delay_ns == 0) {
                /* the library reads 0 as "no bound": spelled 0s it looks like the opposite */
                sl__err(cx, x, "max_delay 0s would mean no bound at all (expected a positive "
                        "duration; omit the field for no bound)");
                ok = false;
            } else if (w->spec.max_delay_ns > SL_MAX_DELAY_NS) {
                sl__err(cx, x, "max_delay %.40s is out of range (expected at most 5m: a shaped "
                        "request holds its caller that long)", x->s);
                ok = false;
            }
        }
    }
    if ((x = sl__get(n, "name")) != NULL) {
        const char *s = sl__get_str(cx, x, "a limit name");
        if (s != NULL) {
            bool good = *s != '\0' && strlen(s) < 200;
            for (const char *p = s; *p; p++)
                if (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '\\') good = false;
            if (!good) {
                sl__err(cx, x, "bad limit name '%.40s' (expected printable ASCII without "
                        "spaces or quotes)", s);
                ok = false;
            } else {
                w->label = sl__keep(cx, s);
                w->named = true;
                w->line = x->line;
                w->col = x->col;
            }
        } else {
            ok = false;
        }
    }
    return ok;
}

bool sl__validate_spec(sl__ctx *cx, const sl_ynode *at, sl_cwindow *w, const char *name) {
    if (w->deny_all) return true;
    sluice_limit_spec s = w->spec;
    s.name = name;
    int err = 0;
    char msg[200];
    sluice_limiter *l = sluice_limiter_create(&s, &err, msg, sizeof(msg));
    if (l != NULL) {
        sluice_limiter_destroy(l);
        return true;
    }
    if (err == SLUICE_ENOTFOUND && s.tz != NULL) {
        /* a name that is right but whose database is missing is not the config's fault */
        const char *dir = getenv("TZDIR");
        if (dir == NULL || dir[0] == '\0') dir = "/usr/share/zoneinfo";
        char probe[600];
        snprintf(probe, sizeof(probe), "%s/Europe/Madrid", dir);
        if (access(probe, R_OK) != 0)
            sl__err(cx, sl__get(at, "tz") ? sl__get(at, "tz") : at, "time zone '%.60s' cannot be read: "
                    "the time zone database is not installed in %.200s (expected the tzdata package: "
                    "apt-get install tzdata; or set TZDIR)", s.tz, dir);
        else
            sl__err(cx, sl__get(at, "tz") ? sl__get(at, "tz") : at, "unknown time zone '%.60s' (expected "
                    "an IANA name such as Europe/Madrid)", s.tz);
    }
    else if (err == SLUICE_ENOMEM)
        cx->cfg->arena.oom = true;
    else
        sl__err(cx, at, "invalid limit: %s (expected a limit the algorithm accepts)",
                msg[0] ? msg : sluice_strerror(err));
    return false;
}

/* ---- policies ----------------------------------------------------------------------- */

bool sl__parse_windows(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, sluice_algo algo,
                          bool algo_set, sl_cwindow **out, size_t *nout) {
    if (!sl__is_seq(n) || n->n == 0) {
        sl__err(cx, n, "limits must be a non-empty list (expected - {rate: 10/s, burst: 20})");
        return false;
    }
    if (n->n > MAX_WINDOWS) {
        sl__err(cx, n, "too many limits in one policy (expected at most %d)", MAX_WINDOWS);
        return false;
    }
    sl_cwindow *w = sl__alloc(&cx->cfg->arena, n->n * sizeof(*w));
    if (w == NULL) return false;
    bool ok = true;
    for (size_t i = 0; i < n->n; i++) {
        if (!sl__parse_window(cx, n->v[i], algo, algo_set, &w[i])) {
            ok = false;
            continue;
        }
        /* The identity of a window's counters: its name when it has one (so reordering
         * or inserting windows keeps each one's counters, and a reload carries state to
         * the window of the same name), else its position. Named identities have the top
         * bit set, so they never meet positional ones. */
        w[i].spec.index = (uint32_t)i;
        if (w[i].named) {
            uint32_t h = 2166136261u;
            for (const char *c = w[i].label; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
            w[i].spec.index = 0x80000000u | (h & 0x7fffffffu);
        }
        if (w[i].label == NULL) {
            char lab[256];
            if (n->n == 1) snprintf(lab, sizeof(lab), "%s", p->name ? p->name : "policy");
            else snprintf(lab, sizeof(lab), "%s.%zu", p->name ? p->name : "policy", i);
            w[i].label = sl__keep(cx, lab);
        }
        ok &= sl__validate_spec(cx, n->v[i], &w[i], p->name ? p->name : "policy");
        for (size_t j = 0; j < i; j++) {
            if (w[j].label != NULL && strcmp(w[j].label, w[i].label) == 0) {
                sl__err(cx, sl__get(n->v[i], "name") ? sl__get(n->v[i], "name") : n->v[i],
                        "limit name '%s' is used twice in this list (first at %d:%d; expected "
                        "unique names: clients tell windows apart by them)", w[i].label,
                        w[j].line, w[j].col);
                ok = false;
                break;
            }
            if (w[j].spec.index == w[i].spec.index && w[i].named) {
                sl__err(cx, sl__get(n->v[i], "name"), "limit names '%s' and '%s' hash to one "
                        "counter identity (expected another name for one of them)", w[j].label,
                        w[i].label);
                ok = false;
                break;
            }
        }
    }
    *out = w;
    *nout = n->n;
    return ok;
}

/* The capacity a client could ever get from window w: a cost above it can never be
 * admitted, which is a config error rather than a permanent 429. */
uint64_t sl__window_capacity(const sl_cwindow *w) {
    if (algo_has_burst(w->spec.algo) && w->spec.burst) return w->spec.burst;
    return w->spec.limit;
}

void sl__check_costs(sl__ctx *cx, const sl_ynode *cost_node, const sl_cpolicy *p,
                        const sl_cwindow *w, size_t nw) {
    for (size_t i = 0; i < nw; i++) {
        if (w[i].spec.algo == SLUICE_CONCURRENCY || w[i].spec.algo == SLUICE_ADAPTIVE_CONCURRENCY)
            continue; /* one slot per request, whatever the cost */
        uint64_t cap = sl__window_capacity(&w[i]);
        const char *what = algo_has_burst(w[i].spec.algo) ? "burst" : "limit";
        if (!p->cost_from_set && p->cost_default > cap)
            sl__err(cx, cost_node, "%s %llu of limit '%s' is below the cost %llu: such "
                    "requests could never be admitted (expected %s >= %llu)", what,
                    (unsigned long long)cap, w[i].label, (unsigned long long)p->cost_default,
                    what, (unsigned long long)p->cost_default);
        for (size_t j = 0; j < p->n_ops; j++)
            if (p->ops[j].cost > cap)
                sl__err(cx, cost_node, "%s %llu of limit '%s' is below the cost %llu of '%s "
                        "%s': such requests could never be admitted (expected %s >= %llu)",
                        what, (unsigned long long)cap, w[i].label,
                        (unsigned long long)p->ops[j].cost, p->ops[j].method, p->ops[j].path,
                        what, (unsigned long long)p->ops[j].cost);
    }
}

