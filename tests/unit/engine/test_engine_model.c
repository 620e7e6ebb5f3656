/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_model.c -- the engine against an obviously-correct model over random
 * traffic: three rules (global, per tenant, per tenant+user) with per-operation costs,
 * counted in hour-long fixed windows at one instant, so each window is a plain counter.
 * The model admits a request iff every counter has room for its cost and only then adds
 * the cost to all three: all-or-nothing across rules, nothing consumed on rejection.
 */
#include "engine/engine.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static const char *CFG =
    "policies:\n"
    "  - { name: global, objective: protection, key: [], algorithm: fixed_window,\n"
    "      cost: { default: 1, \"POST /export\": 7 }, limits: [{rate: 400/h}] }\n"
    "  - { name: tenant, objective: fairness, key: [header.x-tenant], algorithm: fixed_window,\n"
    "      cost: { default: 1, \"POST /export\": 7 }, limits: [{rate: 60/h}] }\n"
    "  - { name: user, objective: fairness, key: [header.x-tenant, header.x-user],\n"
    "      algorithm: fixed_window, cost: { default: 1, \"POST /export\": 7 },\n"
    "      limits: [{rate: 25/h}] }\n";

static sl_str S(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

static void against_model(void) {
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    T_EQ_I(sl_config_load_buffer(CFG, strlen(CFG), "m.yaml", &cfg, &dl), SLUICE_OK);
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *e = cfg ? sl_engine_create(cfg, st, &err, NULL, 0) : NULL;
    T_CHECK(e != NULL);
    if (e == NULL) return;
    enum { TENANTS = 4, USERS = 5 };
    uint64_t global = 0, tenant[TENANTS] = {0}, user[TENANTS][USERS] = {{0}};
    uint64_t rng = t_seed();
    /* one instant, well inside an hour window whatever its alignment */
    sluice_time now = {3600 * SEC + 1, INT64_C(1767225600) * SEC};
    static sl_verdict v;
    int admitted = 0, rejected = 0;
    for (int i = 0; i < 3000; i++) {
        int t = (int)(t_rand(&rng) % TENANTS), u = (int)(t_rand(&rng) % USERS);
        bool exp = t_rand(&rng) % 6 == 0;
        uint64_t cost = exp ? 7 : 1;
        char ts[8], us[8];
        snprintf(ts, sizeof(ts), "t%d", t);
        snprintf(us, sizeof(us), "u%d", u);
        sl_header h[2] = {{S("x-tenant"), S(ts)}, {S("x-user"), S(us)}};
        sl_request r = {.method = S(exp ? "POST" : "GET"), .path = S(exp ? "/export" : "/read"),
                        .headers = h, .n_headers = 2};
        T_EQ_I(sl_engine_check(e, &r, now, &v), SLUICE_OK);
        bool model = global + cost <= 400 && tenant[t] + cost <= 60 && user[t][u] + cost <= 25;
        if (model) {
            global += cost;
            tenant[t] += cost;
            user[t][u] += cost;
        }
        if ((v.action == SL_ALLOW) != model) {
            T_FAIL("request %d (t%d u%d cost %llu): engine %d, model %d", i, t, u,
                   (unsigned long long)cost, v.action, model);
            break;
        }
        admitted += model;
        rejected += !model;
        /* what clients are told matches the model's counters */
        for (size_t k = 0; k < v.n; k++) {
            const char *n = v.items[k].info->name;
            uint64_t used = !strcmp(n, "global") ? global
                            : !strcmp(n, "tenant") ? tenant[t]
                                                   : user[t][u];
            uint64_t lim = !strcmp(n, "global") ? 400 : !strcmp(n, "tenant") ? 60 : 25;
            if (model || v.items[k].result.allowed)
                T_EQ_U(v.items[k].result.remaining, lim - used);
        }
    }
    T_CHECK(admitted > 100 && rejected > 100); /* both sides were exercised */
    sl_engine_destroy(e);
    sl_config_destroy(cfg);
    sluice_store_destroy(st);
}

int main(void) {
    T_RUN(against_model);
    return T_DONE();
}
