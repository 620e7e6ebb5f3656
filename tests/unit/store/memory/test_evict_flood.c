/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_evict_flood.c -- a key flood is never a way to reset a victim's counters: with
 * max_keys 100,000 and 10,000,000 rotating attacker keys (1,500,000 under sanitizers, or
 * SLUICE_FLOOD_KEYS) at a million decisions a (fake) second, on two of four limiters,
 * every decision of keys that are exhausted or active at 1 request/s is compared with the
 * same decision on a store that never saw the flood: they must agree every time (0
 * resets), the store's memory must not move and stay under 48 bytes per key of capacity
 * per state size, and the limiters not flooded must lose nothing (per-limiter shares).
 * The figures are printed. Keys first seen during the flood are measured too but not
 * asserted (a key used once is what a flood is made of; see docs/algorithms.md).
 */
#include "t.h"

#include "store/memory/memory.h"

#define S SLUICE_NS_PER_S
#define MAX_KEYS 100000

static sluice_limiter *mk(sluice_algo algo, const char *name, uint64_t limit, int64_t period_ns,
                          uint64_t burst) {
    sluice_limit_spec s;
    memset(&s, 0, sizeof(s));
    s.algo = algo;
    s.name = name;
    s.limit = limit;
    s.period_ns = period_ns;
    s.burst = burst;
    if (algo == SLUICE_QUOTA) s.period_ns = 0, s.quota_period = SLUICE_PERIOD_DAY;
    int err = 0;
    sluice_limiter *l = sluice_limiter_create(&s, &err, NULL, 0);
    if (l == NULL) T_FAIL("limiter %s: %d", name, err);
    return l;
}

static sluice_store *mkstore(uint64_t max_keys) {
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = max_keys;
    o.on_full = SLUICE_EVICT_LRU;
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    return st;
}

enum { LOGIN, API, QUOTA, WINDOW, NLIM };
static sluice_limiter *L[NLIM];
static const char *lname[NLIM] = {"login 3/h (gcra)", "api 1800/h b3600 (t. bucket)",
                                  "quota 100/day", "window 120/min (fixed)"};

/* A victim: a key under one limiter, deciding `cost` every `every` ns from `next`. */
typedef struct victim {
    int lim;
    char key[24];
    uint64_t cost;
    int64_t next, every;
    int kind; /* 0 exhausted, 1 active at 1/s, 2 first seen during the flood */
} victim;

typedef struct tally {
    uint64_t decisions, resets;
} tally;

static int64_t base_wall;

static sluice_time at(int64_t t) {
    sluice_time n = {1000 * S + t, base_wall + t};
    return n;
}

/* Decides on both stores; a different answer is a reset of the flooded store's key. */
static void decide_both(sluice_store *a, sluice_store *ref, const victim *v, int64_t t,
                        tally *ty) {
    sluice_item it = {L[v->lim], v->key, strlen(v->key), v->cost};
    sluice_decision da, db;
    int ra = sluice_decide(a, &it, 1, at(t), &da), rb = sluice_decide(ref, &it, 1, at(t), &db);
    ty->decisions++;
    if (ra != SLUICE_OK || rb != SLUICE_OK || da.allowed != db.allowed ||
        da.results[0].remaining != db.results[0].remaining ||
        da.results[0].retry_after_ns != db.results[0].retry_after_ns)
        ty->resets++;
}

static uint64_t flood_keys(void) {
    const char *e = getenv("SLUICE_FLOOD_KEYS");
    if (e != NULL) return strtoull(e, NULL, 10);
#if defined(__SANITIZE_ADDRESS__)
    return 1500000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 1500000;
#endif
#endif
    return 10000000;
}

static void test_flood(void) {
    base_wall = INT64_C(1764633600) * S; /* a midnight UTC: the quota's day starts here */
    L[LOGIN] = mk(SLUICE_GCRA, "login", 3, 3600 * S, 3);
    /* refilled at half the victims' pace: their usage builds up, so a reset shows */
    L[API] = mk(SLUICE_TOKEN_BUCKET, "api", 1800, 3600 * S, 3600);
    L[QUOTA] = mk(SLUICE_QUOTA, "quota", 100, 0, 0);
    L[WINDOW] = mk(SLUICE_FIXED_WINDOW, "window", 120, 60 * S, 0);
    sluice_store *st = mkstore(MAX_KEYS), *ref = mkstore(1000000);
    for (int i = 0; i < NLIM; i++) {
        T_EQ_I(sluice_store_register(st, L[i]), SLUICE_OK);
        T_EQ_I(sluice_store_register(ref, L[i]), SLUICE_OK);
    }

    /* The victims, their phases spread over a second. */
    enum { NV = 3600 };
    static victim v[NV];
    uint64_t rs = t_seed();
    int nv = 0;
    for (int i = 0; i < 400; i++, nv++) /* exhausted before the flood, then retrying */
        v[nv] = (victim){LOGIN, "", 1, 0, S, 0}, snprintf(v[nv].key, 24, "alice%d", i);
    for (int i = 0; i < 1200; i++, nv++) /* active at 1/s, never exhausted */
        v[nv] = (victim){API, "", 1, 0, S, 1}, snprintf(v[nv].key, 24, "app%d", i);
    for (int i = 0; i < 400; i++, nv++) /* a day's budget spent, then retrying */
        v[nv] = (victim){QUOTA, "", 1, 0, S, 0}, snprintf(v[nv].key, 24, "plan%d", i);
    for (int i = 0; i < 400; i++, nv++) /* active at 1/s on an unflooded limiter */
        v[nv] = (victim){WINDOW, "", 1, 0, S, 1}, snprintf(v[nv].key, 24, "win%d", i);
    for (int i = 0; i < 400; i++, nv++) /* 1/s on the flooded 3/h: soon limited, retrying */
        v[nv] = (victim){LOGIN, "", 1, 0, S, 1}, snprintf(v[nv].key, 24, "bob%d", i);
    int first_new = nv;
    for (int i = 0; i < 400; i++, nv++) /* first seen 2 s into the flood, then 1/s */
        v[nv] = (victim){API, "", 1, 0, S, 2}, snprintf(v[nv].key, 24, "late%d", i);
    for (int i = 0; i < nv; i++) v[i].next = (int64_t)(t_rand(&rs) % (uint64_t)S);

    /* Before the flood (t in [0, 2 s)): exhausted keys spend everything, active ones are
     * used twice, 1 s apart. */
    tally pre = {0, 0};
    for (int i = 0; i < first_new; i++) {
        victim x = v[i];
        if (x.kind == 0) {
            x.cost = x.lim == QUOTA ? 100 : 1;
            for (int k = 0; k < (x.lim == QUOTA ? 1 : 5); k++) decide_both(st, ref, &x, x.next, &pre);
        } else {
            decide_both(st, ref, &x, x.next, &pre);
            decide_both(st, ref, &x, x.next + S, &pre);
        }
        v[i].next += 2 * S;
    }
    for (int i = first_new; i < nv; i++) v[i].next += 4 * S;
    T_EQ_U(pre.resets, 0);
    sluice_store_stats s0;
    sluice_store_stats_get(st, &s0);

    /* The flood: attacker key n at t = 2 s + n us, each used once, alternating login/api. */
    uint64_t nflood = flood_keys();
    tally ty[3] = {{0, 0}, {0, 0}, {0, 0}};
    int64_t t = 2 * S;
    char key[32];
    int vi = 0;
    /* victims in time order: a simple scan for the next due one each microsecond would be
     * slow; instead keep them sorted by `next` (insertion into a small sorted ring). */
    static int order[NV];
    for (int i = 0; i < nv; i++) order[i] = i;
    for (int i = 1; i < nv; i++) /* insertion sort by next */
        for (int j = i; j > 0 && v[order[j]].next < v[order[j - 1]].next; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    uint64_t attacker_allowed = 0;
    for (uint64_t n = 0; n < nflood; n++, t += 1000) {
        while (v[order[vi]].next <= t) {
            victim *x = &v[order[vi]];
            decide_both(st, ref, x, x->next, &ty[x->kind]);
            x->next += x->every;
            /* move it to its place (it is now the latest or nearly) */
            int j = vi;
            while (j + 1 < nv && v[order[j + 1]].next < x->next) {
                int tmp = order[j];
                order[j] = order[j + 1];
                order[j + 1] = tmp;
                j++;
            }
            if (j == vi) break; /* still first: due again only later */
        }
        int lim = (n & 1) ? API : LOGIN;
        size_t kl = (size_t)snprintf(key, sizeof(key), "atk:%llu", (unsigned long long)n);
        sluice_item it = {L[lim], key, kl, 1};
        sluice_decision d;
        if (sluice_decide(st, &it, 1, at(t), &d) == SLUICE_OK) attacker_allowed += (uint64_t)d.allowed;
    }

    sluice_store_stats s1;
    sluice_store_stats_get(st, &s1);
    printf("   flood: %llu attacker keys over %.1f s (fake time), max_keys %d, %llu admitted\n",
           (unsigned long long)nflood, (double)(t - 2 * S) / 1e9, MAX_KEYS,
           (unsigned long long)attacker_allowed);
    printf("   victims exhausted: %llu decisions, %llu resets; active at 1/s: %llu decisions, "
           "%llu resets\n",
           (unsigned long long)ty[0].decisions, (unsigned long long)ty[0].resets,
           (unsigned long long)ty[1].decisions, (unsigned long long)ty[1].resets);
    printf("   keys first seen during the flood (not asserted): %llu decisions, %llu differ\n",
           (unsigned long long)ty[2].decisions, (unsigned long long)ty[2].resets);
    printf("   store: keys %llu, evicted %llu, expired %llu, refused %llu, bytes %llu before "
           "and %llu after (%.1f per key of capacity)\n",
           (unsigned long long)s1.keys, (unsigned long long)s1.evicted,
           (unsigned long long)s1.expired, (unsigned long long)s1.refused,
           (unsigned long long)s0.bytes, (unsigned long long)s1.bytes,
           (double)s1.bytes / MAX_KEYS);
    for (int i = 0; i < NLIM; i++) {
        sluice_limiter_stats ls;
        T_EQ_I(sluice_store_limiter_stats(st, L[i], &ls), SLUICE_OK);
        printf("   %-26s keys %6llu share %6llu evicted %8llu expired %8llu refused %llu\n",
               lname[i], (unsigned long long)ls.keys, (unsigned long long)ls.share,
               (unsigned long long)ls.evicted, (unsigned long long)ls.expired,
               (unsigned long long)ls.refused);
        if (i == QUOTA || i == WINDOW) T_EQ_U(ls.evicted, 0); /* not flooded: untouched */
    }
    T_EQ_U(ty[0].resets, 0);
    T_EQ_U(ty[1].resets, 0);
    T_CHECK(ty[0].decisions > 0 && ty[1].decisions > 0);
    T_CHECK(s1.evicted + s1.expired >= nflood / 2); /* the store really was under pressure */
    T_EQ_U(s1.refused, 0);                           /* evict mode: every key had room */
    T_CHECK(s1.keys <= MAX_KEYS);
    /* memory grew with the keys held (shards double on demand), never past the bound */
    T_CHECK(s1.bytes > s0.bytes);
    /* two state sizes in use (8 bytes: gcra; 16: the others): <= 48 bytes per key each */
    T_CHECK(s1.bytes <= 2 * 48 * (uint64_t)MAX_KEYS);
    sluice_store_destroy(st);
    sluice_store_destroy(ref);
    for (int i = 0; i < NLIM; i++) sluice_limiter_destroy(L[i]);
}

int main(void) {
    T_RUN(test_flood);
    return T_DONE();
}
