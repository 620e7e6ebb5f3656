/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_overrides.c -- the override table and its decisions (store/memory/override.c,
 * engine/override.c): set/replace/remove/expire with tombstones, paging order, the
 * overrides.max bound, the snapshot section (kept, and refused whole when damaged), and
 * PUT/DELETE storms racing decisions (no decision error, counts consistent).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "config/compiled.h"
#include "engine/engine.h"
#include "store/memory/memory.h"
#include "store/memory/override.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S
static const uint8_t SEED[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static sluice_store *mkstore(void) {
    sluice_store_options o = {0};
    o.seed = SEED;
    int err = 0;
    return sluice_store_create(&o, &err);
}

static sl_hash128 hkey(sl_ovr_table *t, const char *policy, const char *key) {
    const void *p[1] = {key};
    size_t l[1] = {strlen(key)};
    return sl_ovr_hash_parts(t, policy, p, l, 1);
}

static sl_ovr_rec *mkrec(sl_ovr_table *t, const char *policy, const char *key, unsigned kind,
                         int64_t expires, const char *label) {
    sl_ovr_rec tm;
    memset(&tm, 0, sizeof(tm));
    tm.h = hkey(t, policy, key);
    tm.kind = (uint8_t)kind;
    tm.expires_ns = expires;
    return sl_ovr_rec_new(&tm, policy, NULL, 0, kind == SL_OVR_PLAN ? "pro" : NULL, "why", label,
                          "ops", NULL);
}

static void table_basics(void) {
    sluice_store *st = mkstore();
    sl_ovr_table *t = sl_store_overrides(st);
    bool created;
    sl_ovr_rec *old;
    T_EQ_I(sl_ovr_put(t, mkrec(t, "api", "a", SL_OVR_BLOCK, 0, "A"), 100, &created, &old), SLUICE_OK);
    T_CHECK(created && old == NULL);
    T_EQ_I(sl_ovr_put(t, mkrec(t, "api", "a", SL_OVR_EXEMPT, 0, "A2"), 100, &created, &old), SLUICE_OK);
    T_CHECK(!created && old != NULL && old->kind == SL_OVR_BLOCK);
    sl_ovr_rec_free(old);
    T_EQ_U(sl_ovr_count(t), 1);
    sl_ovr_rec *g = sl_ovr_get(t, hkey(t, "api", "a"), 100);
    T_CHECK(g != NULL && g->kind == SL_OVR_EXEMPT && strcmp(g->label, "A2") == 0);
    sl_ovr_rec_free(g);
    T_CHECK(sl_ovr_get(t, hkey(t, "other", "a"), 100) == NULL); /* the policy is in the identity */
    /* expiry: gone from get at its time, swept away (its counters never moved) */
    T_EQ_I(sl_ovr_put(t, mkrec(t, "api", "b", SL_OVR_BLOCK, 500, NULL), 100, &created, &old), SLUICE_OK);
    sl_ovr_rec *live = sl_ovr_get(t, hkey(t, "api", "b"), 499);
    T_CHECK(live != NULL);
    sl_ovr_rec_free(live);
    T_CHECK(sl_ovr_get(t, hkey(t, "api", "b"), 500) == NULL);
    T_EQ_I(sl_ovr_del(t, hkey(t, "api", "b"), 500, &old), SLUICE_ENOTFOUND);
    T_EQ_U(sl_ovr_sweep(t, 500), 1);
    T_EQ_U(sl_ovr_count(t), 1);
    T_EQ_U(sl_ovr_slots(t), 1);
    T_EQ_I(sl_ovr_del(t, hkey(t, "api", "a"), 600, &old), SLUICE_OK);
    sl_ovr_rec_free(old);
    T_EQ_U(sl_ovr_count(t), 0);
    T_EQ_U(sl_ovr_slots(t), 0); /* counters never moved: no tombstone */
    T_EQ_I(*sl_ovr_policy_count(t, "api"), 0);
    /* the bound */
    sl_ovr_set_max(t, 3);
    for (int i = 0; i < 3; i++) {
        char k[8];
        snprintf(k, sizeof(k), "m%d", i);
        T_EQ_I(sl_ovr_put(t, mkrec(t, "api", k, SL_OVR_BLOCK, 0, NULL), 1, &created, &old), SLUICE_OK);
    }
    sl_ovr_rec *r4 = mkrec(t, "api", "m3", SL_OVR_BLOCK, 0, NULL);
    T_EQ_I(sl_ovr_put(t, r4, 1, &created, &old), SLUICE_EFULL);
    sl_ovr_rec_free(r4);
    /* replacing one at the bound is fine */
    T_EQ_I(sl_ovr_put(t, mkrec(t, "api", "m1", SL_OVR_EXEMPT, 0, NULL), 1, &created, &old), SLUICE_OK);
    sl_ovr_rec_free(old);
    sluice_store_destroy(st);
}

static void paging_is_ordered_and_complete(void) {
    sluice_store *st = mkstore();
    sl_ovr_table *t = sl_store_overrides(st);
    bool created;
    sl_ovr_rec *old;
    for (int i = 0; i < 1000; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        sl_ovr_put(t, mkrec(t, i % 3 ? "api" : "web", k, SL_OVR_BLOCK, 0, NULL), 1, &created, &old);
    }
    size_t total = 0, pages = 0;
    bool has = false, more = true;
    sl_hash128 cur = {0, 0}, prev = {0, 0};
    while (more && pages < 100) {
        sl_ovr_rec **pg;
        size_t n = sl_ovr_page(t, has, cur, 64, "api", 1, &pg, &more);
        for (size_t i = 0; i < n; i++) {
            T_CHECK(strcmp(pg[i]->policy, "api") == 0);
            bool up = !has && total == 0 ? true
                      : pg[i]->h.hi > prev.hi || (pg[i]->h.hi == prev.hi && pg[i]->h.lo > prev.lo);
            T_CHECK(up);
            prev = pg[i]->h;
            sl_ovr_rec_free(pg[i]);
            total++;
        }
        free(pg);
        cur = prev;
        has = true;
        pages++;
    }
    T_EQ_U(total, 666);
    T_EQ_U(pages, 11);
    sluice_store_destroy(st);
}

static const char *YAML = "policies:\n"
                          "  - name: api\n"
                          "    objective: fairness\n"
                          "    key: [header.x-k]\n"
                          "    algorithm: gcra\n"
                          "    limits: [{rate: 3/min, burst: 3}]\n";

static sl_config *load(const char *yaml) {
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    if (sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &cfg, &dl) != SLUICE_OK) {
        T_FAIL("config");
        return NULL;
    }
    return cfg;
}

/* A limits override of `rate` (burst = its count) on policy api's window 0. */
static sl_ovr_rec *limits_rec(const sl_engine *e, sl_ovr_table *t, const char *key, const char *rate,
                              int n) {
    char txt[96];
    snprintf(txt, sizeof(txt), "{\"rate\": \"%s\", \"burst\": %d}", rate, n);
    sl_cwindow w;
    char label[64], err[256];
    if (sl_config_override_window(txt, strlen(txt), SLUICE_GCRA, &w, label, sizeof(label), err,
                                  sizeof(err)) != SLUICE_OK) {
        T_FAIL("window: %s", err);
        return NULL;
    }
    sl_ovr_rec tm;
    memset(&tm, 0, sizeof(tm));
    const char *names[1] = {NULL};
    char why[200];
    if (sl_engine_ovr_compile(e, "api", &w, names, 1, tm.win, why, sizeof(why)) != SLUICE_OK) {
        T_FAIL("compile: %s", why);
        return NULL;
    }
    tm.nwin = 1;
    tm.kind = SL_OVR_LIMITS;
    tm.h = hkey(t, "api", key);
    return sl_ovr_rec_new(&tm, "api", NULL, 0, NULL, NULL, NULL, NULL, "[]");
}

static sl_verdict V;

static int admitted(sl_engine *e, const char *key, int n, sluice_time now) {
    int ok = 0;
    for (int i = 0; i < n; i++) {
        sl_engine_check_named(e, "api", key, strlen(key), true, 1, now, &V);
        ok += V.action == SL_ALLOW;
    }
    return ok;
}

/* A snapshot keeps overrides and the regime of their counters; a damaged overrides
 * section is refused whole (nothing loaded), as a damaged snapshot is. */
static void snapshot_section(void) {
    sluice_store *st = mkstore();
    sl_config *cfg = load(YAML);
    int err = 0;
    char msg[256];
    sl_engine *e = sl_engine_create(cfg, st, &err, msg, sizeof(msg));
    if (e == NULL) {
        T_FAIL("engine: %s", msg);
        return;
    }
    sl_ovr_table *t = sl_store_overrides(st);
    bool created;
    sl_ovr_rec *old;
    sluice_time now = {INT64_C(1000) * SEC, INT64_C(1767225600) * SEC};
    T_EQ_I(sl_ovr_put(t, limits_rec(e, t, "k", "10/min", 10), now.wall_ns, &created, &old), SLUICE_OK);
    T_EQ_I(admitted(e, "k", 12, now), 10);
    char path[] = "/tmp/sl_ovr_snapXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    T_EQ_I(sluice_store_snapshot(st, path, now), SLUICE_OK);
    sl_engine_destroy(e);
    sluice_store_destroy(st);

    /* restored: the override and its counters (nothing left at 10/min) */
    st = mkstore();
    e = sl_engine_create(cfg, st, &err, msg, sizeof(msg));
    uint64_t skipped = 0;
    T_EQ_I(sluice_store_restore(st, path, now, &skipped, msg, sizeof(msg)), SLUICE_OK);
    t = sl_store_overrides(st);
    T_EQ_U(sl_ovr_count(t), 1);
    T_EQ_I(admitted(e, "k", 1, now), 0);
    /* removed: its counters carry back to 3/min (still nothing left) */
    T_EQ_I(sl_ovr_del(t, hkey(t, "api", "k"), now.wall_ns, &old), SLUICE_OK);
    sl_ovr_rec_free(old);
    T_EQ_I(admitted(e, "k", 1, now), 0);
    T_EQ_U(sl_ovr_slots(t), 0); /* the tombstone went once its counters were back */
    sl_engine_destroy(e);
    sluice_store_destroy(st);

    /* damage one byte of the section's record, reseal the checksum: refused whole */
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    uint8_t *sec = memmem(buf, len, "OVR1", 4);
    T_CHECK(sec != NULL);
    if (sec == NULL) return;
    sec[12 + 40] = 9; /* the record's kind: no such kind */
    sl_snapshot_seal(buf, len);
    st = mkstore();
    e = sl_engine_create(cfg, st, &err, msg, sizeof(msg));
    T_EQ_I(sl_store_restore_buf(st, buf, len, now, &skipped, msg, sizeof(msg)), SLUICE_ECORRUPT);
    T_CHECK(strstr(msg, "overrides") != NULL);
    T_EQ_U(sl_ovr_count(sl_store_overrides(st)), 0);
    T_EQ_I(admitted(e, "k", 3, now), 3); /* nothing was loaded: fresh counters */
    /* truncated inside the section: refused too */
    sec[12 + 40] = SL_OVR_LIMITS;
    size_t cut = (size_t)(sec - buf) + 30;
    memmove(buf + cut, buf + len - 16, 16);
    sl_snapshot_seal(buf, cut + 16);
    sluice_store *st2 = mkstore();
    T_EQ_I(sl_store_restore_buf(st2, buf, cut + 16, now, &skipped, msg, sizeof(msg)), SLUICE_ECORRUPT);
    sluice_store_destroy(st2);
    sl_engine_destroy(e);
    sluice_store_destroy(st);
    sl_config_destroy(cfg);
    unlink(path);
}

/* PUT/DELETE storms while two threads decide the key: no decision error ever. */
typedef struct storm {
    sl_engine *e;
    sl_ovr_table *t;
    atomic_int stop;
    atomic_long errors, decisions;
} storm;

static void *decider(void *ud) {
    storm *s = ud;
    static _Thread_local sl_verdict v;
    sluice_time now = {INT64_C(1000) * SEC, INT64_C(1767225600) * SEC};
    while (!atomic_load(&s->stop)) {
        int rc = sl_engine_check_named(s->e, "api", "hot", 3, true, 1, now, &v);
        if (rc != SLUICE_OK || v.action == SL_ERROR) atomic_fetch_add(&s->errors, 1);
        atomic_fetch_add(&s->decisions, 1);
        now.mono_ns += 1000;
        now.wall_ns += 1000;
    }
    return NULL;
}

static void storms_under_decisions(void) {
    sluice_store *st = mkstore();
    sl_config *cfg = load(YAML);
    int err = 0;
    char msg[256];
    sl_engine *e = sl_engine_create(cfg, st, &err, msg, sizeof(msg));
    storm s = {.e = e, .t = sl_store_overrides(st)};
    atomic_init(&s.stop, 0);
    atomic_init(&s.errors, 0);
    atomic_init(&s.decisions, 0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, decider, &s);
    static const char *const rates[3] = {"10/min", "20/min", "5/min"};
    for (int i = 0; i < 30000; i++) {
        bool created;
        sl_ovr_rec *old = NULL;
        if (i % 4 == 3) {
            sl_ovr_del(s.t, hkey(s.t, "api", "hot"), INT64_C(1767225600) * SEC, &old);
        } else {
            sl_ovr_rec *r = limits_rec(e, s.t, "hot", rates[i % 3], 5 + i % 3 * 5);
            if (r && sl_ovr_put(s.t, r, INT64_C(1767225600) * SEC, &created, &old) != SLUICE_OK)
                sl_ovr_rec_free(r);
        }
        sl_ovr_rec_free(old);
    }
    atomic_store(&s.stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    T_EQ_I(atomic_load(&s.errors), 0);
    T_CHECK(atomic_load(&s.decisions) > 0);
    T_CHECK(sl_ovr_count(s.t) <= 1);
    sl_engine_destroy(e);
    sluice_store_destroy(st);
    sl_config_destroy(cfg);
}

/* The Redis store's table (sl_ovr_set_stateless): no counter regimes, so a removal leaves no
 * tombstone and a lookup always reads the counters under the numbers in force; the policy
 * counter the decision path reads goes back to 0 (the lookup is skipped again). */
static void stateless_table(void) {
    sluice_store *st = mkstore();
    sl_ovr_table *t = sl_store_overrides(st);
    sl_ovr_set_stateless(t, true);
    atomic_int_fast64_t *n = sl_ovr_policy_count(t, "api");
    bool created;
    sl_ovr_rec *old;
    T_EQ_I(sl_ovr_put(t, mkrec(t, "api", "s", SL_OVR_BLOCK, 0, NULL), 100, &created, &old), SLUICE_OK);
    T_EQ_I((int)atomic_load(n), 1);
    sl_ovr_view vw;
    T_CHECK(sl_ovr_lookup(t, hkey(t, "api", "s"), 100, &vw));
    T_CHECK(vw.live && vw.applied == vw.ver); /* no carry to make */
    T_EQ_I(sl_ovr_del(t, hkey(t, "api", "s"), 200, &old), SLUICE_OK);
    sl_ovr_rec_free(old);
    T_EQ_U(sl_ovr_slots(t), 0); /* gone, not a tombstone */
    T_EQ_I((int)atomic_load(n), 0);
    T_CHECK(!sl_ovr_lookup(t, hkey(t, "api", "s"), 200, &vw));
    /* expiry: not live, counters under the policy's numbers, swept away at once */
    T_EQ_I(sl_ovr_put(t, mkrec(t, "api", "e", SL_OVR_BLOCK, 500, NULL), 100, &created, &old), SLUICE_OK);
    T_CHECK(sl_ovr_lookup(t, hkey(t, "api", "e"), 600, &vw));
    T_CHECK(!vw.live && vw.applied == 0);
    T_EQ_U(sl_ovr_sweep(t, 600), 1);
    T_EQ_U(sl_ovr_slots(t), 0);
    sluice_store_destroy(st);
}

int main(void) {
    T_RUN(table_basics);
    T_RUN(stateless_table);
    T_RUN(paging_is_ordered_and_complete);
    T_RUN(snapshot_section);
    T_RUN(storms_under_decisions);
    return T_DONE();
}
