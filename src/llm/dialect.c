/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dialect.c -- see dialect.h. Integer arithmetic; the wall time is the caller's (the
 * decision's), never read here.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "llm/dialect.h"
#include "llm/llm.h"

size_t sl_llm_go_duration(int64_t ns, char *out, size_t cap) {
    if (ns <= 0) return (size_t)snprintf(out, cap, "0s");
    int64_t ms = (ns + 999999) / 1000000;
    if (ms < 1000) return (size_t)snprintf(out, cap, "%lldms", (long long)ms);
    int64_t h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, f = ms % 1000;
    char sec[24];
    if (f == 0) {
        snprintf(sec, sizeof(sec), "%llds", (long long)s);
    } else {
        char fr[8];
        snprintf(fr, sizeof(fr), "%03lld", (long long)f);
        size_t l = strlen(fr);
        while (l > 0 && fr[l - 1] == '0') fr[--l] = 0;
        snprintf(sec, sizeof(sec), "%lld.%ss", (long long)s, fr);
    }
    if (h > 0) return (size_t)snprintf(out, cap, "%lldh%lldm%s", (long long)h, (long long)m, sec);
    if (m > 0) return (size_t)snprintf(out, cap, "%lldm%s", (long long)m, sec);
    return (size_t)snprintf(out, cap, "%s", sec);
}

size_t sl_llm_rfc3339(int64_t wall_ns, char *out, size_t cap) {
    time_t t = (time_t)((wall_ns + 999999999) / 1000000000); /* the reset is never early */
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) return (size_t)snprintf(out, cap, "1970-01-01T00:00:00Z");
    return strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The most restrictive (least remaining, ties: the first) window matching `want`. */
static const sl_llm_dwin *pick(const sl_llm_dwin *w, size_t n, int want) {
    const sl_llm_dwin *best = NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned c = w[i].counts;
        bool tok = c == SL_LLM_COUNT_INPUT || c == SL_LLM_COUNT_OUTPUT || c == SL_LLM_COUNT_TOTAL ||
                   c == SL_LLM_COUNT_CACHED_INPUT || c == SL_LLM_COUNT_NONE;
        bool ok = want < 0 ? tok : c == (unsigned)want;
        if (ok && (best == NULL || w[i].remaining < best->remaining)) best = &w[i];
    }
    return best;
}

static bool put_u(sl_llm_add_fn add, void *ctx, const char *name, uint64_t v) {
    char b[24];
    int l = snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
    return add(ctx, name, strlen(name), b, (size_t)l);
}

void sl_llm_dialect_pairs(int dialect, const sl_llm_dwin *w, size_t n, int64_t now_wall_ns,
                          sl_llm_add_fn add, void *ctx) {
    char b[40];
    if (dialect == SL_LLM_DIALECT_OPENAI) {
        static const char *const names[2][3] = {
            {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
            {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}};
        for (int k = 0; k < 2; k++) {
            const sl_llm_dwin *x = pick(w, n, k == 0 ? SL_LLM_COUNT_REQUESTS : -1);
            if (x == NULL) continue;
            if (!put_u(add, ctx, names[k][0], x->limit) || !put_u(add, ctx, names[k][1], x->remaining))
                return;
            size_t l = sl_llm_go_duration(x->reset_ns, b, sizeof(b));
            if (!add(ctx, names[k][2], strlen(names[k][2]), b, l)) return;
        }
        return;
    }
    if (dialect != SL_LLM_DIALECT_ANTHROPIC) return;
    static const char *const fam[4] = {"requests", "tokens", "input-tokens", "output-tokens"};
    static const int want[4] = {SL_LLM_COUNT_REQUESTS, -1, SL_LLM_COUNT_INPUT, SL_LLM_COUNT_OUTPUT};
    for (int k = 0; k < 4; k++) {
        const sl_llm_dwin *x = pick(w, n, want[k]);
        if (x == NULL) continue;
        char name[64];
        snprintf(name, sizeof(name), "anthropic-ratelimit-%s-limit", fam[k]);
        if (!put_u(add, ctx, name, x->limit)) return;
        snprintf(name, sizeof(name), "anthropic-ratelimit-%s-remaining", fam[k]);
        if (!put_u(add, ctx, name, x->remaining)) return;
        snprintf(name, sizeof(name), "anthropic-ratelimit-%s-reset", fam[k]);
        size_t l = sl_llm_rfc3339(now_wall_ns + (x->reset_ns > 0 ? x->reset_ns : 0), b, sizeof(b));
        if (!add(ctx, name, strlen(name), b, l)) return;
    }
}
