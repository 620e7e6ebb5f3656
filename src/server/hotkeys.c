/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hotkeys.c -- the hot keys' reports (docs/observability.md "Hot keys"): GET /v1/top as
 * JSON (the workers' sketches merged, with each key's remaining budget peeked from the
 * memory store), sluice_hot_key_share, and the per-family key counts of the memory
 * store's tables (sluice_keys). The sketches are fed on the decision path (observe.c).
 */
#include "server/observe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "clock.h"
#include "engine/explain.h"
#include "store/decision.h"
#include "store/memory/famstats.h"

static int read_top(sl_server *s, int pslot, sl_topk_entry *out, size_t max, sl_topk_totals *tot) {
    sl_obs *o = s->obs;
    sl_topk **sk = atomic_load_explicit(&o->topk[pslot], memory_order_acquire);
    if (sk == NULL) return -1;
    return sl_topk_read(sk, o->nworkers, sluice_clock_now(s->clock).mono_ns, out, max, tot);
}

/* The policy's default windows in the current generation (to peek at a key's state). */
static size_t policy_windows(const sl_engine *e, const char *policy, const sl_window_info **out,
                             size_t max) {
    size_t n = sl_engine_windows(e, NULL, 0), k = 0;
    const sl_window_info **all = calloc(n + 1, sizeof(*all));
    if (all == NULL) return 0;
    sl_engine_windows(e, all, n);
    for (size_t i = 0; i < n && k < max; i++)
        if (all[i]->policy && strcmp(all[i]->policy, policy) == 0 && all[i]->plan == NULL &&
            all[i]->limiter != NULL)
            out[k++] = all[i];
    free(all);
    return k;
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    if (*buf == NULL) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        char *nb = realloc(*buf, *cap * 2 + (size_t)n);
        if (nb == NULL) {
            free(*buf);
            *buf = NULL;
            return;
        }
        *buf = nb;
        *cap = *cap * 2 + (size_t)n;
    }
}

/* A JSON string of arbitrary bytes (control bytes and bytes >= 0x80 escaped as \u00XX:
 * raw keys are bytes, not text). */
static void append_json_bytes(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    append(buf, len, cap, "\"");
    for (size_t i = 0; i < n && *buf;) {
        char u[SL_JSON_UNIT_MAX];
        size_t adv, k = sl_json_unit(s + i, n - i, SL_JSON_BYTES, u, &adv);
        append(buf, len, cap, "%.*s", (int)k, u);
        i += adv;
    }
    append(buf, len, cap, "\"");
}

char *sl_obs_top_json(sl_server *s, const char *policy, size_t max, int *status, size_t *len) {
    sl_obs *o = s->obs;
    int pslot = sl_obs_policy_series(o, policy);
    if (pslot < 0) {
        *status = 404;
        return NULL;
    }
    if (o->hot_counters == 0) {
        *status = 409;
        return NULL;
    }
    if (max == 0 || max > 100) max = 10;
    sl_topk_entry *e = calloc(max, sizeof(*e));
    sl_topk_totals tot;
    int n = e ? read_top(s, pslot, e, max, &tot) : -1;
    if (n < 0) {
        free(e);
        *status = e ? 404 : 500;
        return NULL;
    }
    sl_gen *g = sl_obs_gen_now(s);
    const sl_window_info *wins[SLUICE_MAX_ITEMS];
    size_t nw = s->redis ? 0 : policy_windows(g->engine, policy, wins, SLUICE_MAX_ITEMS);
    bool raw = atomic_load(&o->raw_keys) != 0;
    sluice_time now = sluice_clock_now(s->clock);
    size_t cap = 4096, l = 0;
    char *b = malloc(cap);
    append(&b, &l, &cap, "{\"policy\":");
    append_json_bytes(&b, &l, &cap, policy, strlen(policy));
    append(&b, &l, &cap,
           ",\"interval_ms\":%lld,\"since_ms\":%lld,\"total_cost\":%llu,\"total_rejected\":%llu,"
           "\"counters\":%u,\"workers\":%u,\"keys\":[",
           (long long)(o->hot_interval_ns / SLUICE_NS_PER_MS),
           (long long)((now.mono_ns - tot.from_ns) / SLUICE_NS_PER_MS), (unsigned long long)tot.weight,
           (unsigned long long)tot.rejected, o->hot_counters, o->nworkers);
    for (int i = 0; i < n; i++) {
        double share = tot.weight ? (double)e[i].weight / (double)tot.weight : 0;
        double lo = tot.weight ? (double)e[i].weight_min / (double)tot.weight : 0;
        double hi = tot.weight ? (double)e[i].weight_max / (double)tot.weight : 0;
        append(&b, &l, &cap,
               "%s{\"rank\":%d,\"key_hash\":\"k:%016llx\",\"share\":%.6f,\"share_min\":%.6f,"
               "\"share_max\":%.6f,\"cost\":%llu,\"cost_min\":%llu,\"cost_max\":%llu,"
               "\"rejections\":%llu",
               i ? "," : "", i + 1, (unsigned long long)e[i].key_hash, share, lo, hi,
               (unsigned long long)e[i].weight, (unsigned long long)e[i].weight_min,
               (unsigned long long)e[i].weight_max, (unsigned long long)e[i].rejected);
        if (raw && e[i].raw_len > 0) {
            char t[512];
            size_t tl = sl_key_text(e[i].raw, e[i].raw_len, t, sizeof(t));
            append(&b, &l, &cap, ",\"key\":");
            append_json_bytes(&b, &l, &cap, t, tl);
            if (e[i].raw_truncated) append(&b, &l, &cap, ",\"key_truncated\":true");
        }
        /* the key's state now in each of the policy's windows (memory store: a peek) */
        if (nw > 0 && e[i].raw_len > 0 && !e[i].raw_truncated) {
            sl_sitem it[SLUICE_MAX_ITEMS];
            for (size_t k = 0; k < nw; k++)
                it[k] = (sl_sitem){.lim = wins[k]->limiter, .key = e[i].raw, .key_len = e[i].raw_len};
            sl_sresult res;
            if (sl_mem_decide(s->store, it, nw, 0, now, &res) == SLUICE_OK) {
                append(&b, &l, &cap, ",\"remaining\":[");
                for (size_t k = 0; k < nw; k++) {
                    char lab[48];
                    sl_window_describe(wins[k], lab, sizeof(lab));
                    append(&b, &l, &cap, "%s{\"window\":", k ? "," : "");
                    append_json_bytes(&b, &l, &cap, lab, strlen(lab));
                    append(&b, &l, &cap, ",\"remaining\":%llu,\"limit\":%llu}",
                           (unsigned long long)res.r[k].remaining, (unsigned long long)res.r[k].limit);
                }
                append(&b, &l, &cap, "]");
            }
        } else {
            append(&b, &l, &cap, ",\"remaining\":null");
        }
        append(&b, &l, &cap, "}");
    }
    append(&b, &l, &cap, "]}");
    free(e);
    if (b == NULL) {
        *status = 500;
        return NULL;
    }
    *status = 200;
    *len = l;
    return b;
}

void sl_obs_prom_hot_keys(sl_server *s, sl_prom *p) {
    sl_obs *o = s->obs;
    sl_prom_family(p, "sluice_hot_key_share", SL_PROM_GAUGE,
                   "Share of the policy's cost taken by each of its top keys over the recent "
                   "interval (rank 1 is the heaviest; keys as keyed hashes).");
    if (o->hot_counters == 0 || o->hot_top == 0) return;
    unsigned n = atomic_load(&o->nseries);
    sl_topk_entry e[20];
    for (unsigned i = 1; i < n; i++) {
        if (o->series[i].window[0] != '\0') continue;
        sl_topk_totals tot;
        int k = read_top(s, (int)i, e, o->hot_top < 20 ? o->hot_top : 20, &tot);
        for (int r = 0; r < k; r++) {
            if (tot.weight == 0) break;
            char rank[12], key[24];
            snprintf(rank, sizeof(rank), "%d", r + 1);
            snprintf(key, sizeof(key), "k:%016llx", (unsigned long long)e[r].key_hash);
            const char *l[] = {"policy", o->series[i].policy, "rank", rank, "key", key, NULL};
            sl_prom_fixed(p, l, (int64_t)((unsigned __int128)e[r].weight * 1000000 / tot.weight),
                          1000000);
        }
    }
}

/* Entries per policy from a census of the memory store (at most one walk per 10 s: it
 * reads every slot). A family's name is its policy, or "policy@plan". */
/* Whether store family `fn` belongs to policy `pol` (the policy, or one of its plans). */
static bool family_of(const char *fn, const char *pol, size_t pl) {
    return strncmp(fn, pol, pl) == 0 && (fn[pl] == '\0' || fn[pl] == '@');
}

void sl_obs_prom_keys(sl_server *s, sl_prom *p) {
    sl_obs *o = s->obs;
    sl_prom_family(p, "sluice_keys", SL_PROM_GAUGE,
                   "State entries the memory store holds for the policy (one per key and "
                   "window).");
    if (s->redis) return;
    pthread_mutex_lock(&o->census_mu); /* one scrape at a time owns the buffer */
    int n = sl_store_family_counts(s->store, NULL, 0);
    if (n > o->ncensus_cap) {
        sl_fam_count *c = realloc(o->census, (size_t)n * sizeof(*c));
        if (c != NULL) o->census = c, o->ncensus_cap = n;
    }
    o->ncensus = sl_store_family_counts(s->store, o->census, (size_t)o->ncensus_cap);
    if (o->ncensus > o->ncensus_cap) o->ncensus = o->ncensus_cap;
    /* per policy: the sum over its families (windows, plans) */
    unsigned ns = atomic_load(&o->nseries);
    const sl_config *cfg = sl_obs_gen_now(s)->cfg;
    for (unsigned i = 1; i < ns; i++) {
        if (o->series[i].window[0] != '\0') continue;
        const char *pol = o->series[i].policy;
        size_t pl = strlen(pol);
        uint64_t t = 0;
        for (int k = 0; k < o->ncensus; k++)
            if (family_of(o->census[k].name, pol, pl)) t += o->census[k].entries;
        if (t == 0 && !sl_obs_in_config(cfg, pol)) continue;
        const char *l[] = {"policy", pol, NULL};
        sl_prom_u64(p, l, t);
    }
    /* Every forced eviction of a live key is a reset of that key: counted per policy
     * (kind lru), beside the harmless ones (fresh) and the keys refused room (refused). */
    sl_prom_family(p, "sluice_evictions_total", SL_PROM_COUNTER,
                   "Keys the memory store dropped under pressure, by policy: fresh (state "
                   "equal to a new key: no behaviour change), lru (live state evicted: that "
                   "key starts afresh), refused (a new key refused at capacity).");
    for (unsigned i = 1; i < ns; i++) {
        if (o->series[i].window[0] != '\0') continue;
        const char *pol = o->series[i].policy;
        size_t pl = strlen(pol);
        uint64_t v[3] = {0, 0, 0};
        for (int k = 0; k < o->ncensus; k++) {
            if (!family_of(o->census[k].name, pol, pl)) continue;
            v[0] += o->census[k].expired;
            v[1] += o->census[k].evicted;
            v[2] += o->census[k].refused;
        }
        if (v[0] + v[1] + v[2] == 0 && !sl_obs_in_config(cfg, pol)) continue;
        static const char *const kinds[3] = {"fresh", "lru", "refused"};
        for (int k = 0; k < 3; k++) {
            const char *l[] = {"policy", pol, "kind", kinds[k], NULL};
            sl_prom_u64(p, l, v[k]);
        }
    }
    pthread_mutex_unlock(&o->census_mu);
}
