/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_observe_config.c -- the observability settings of a config file (log, observe,
 * audit, admin.tokens): defaults, every field read, and each mistake reported at its
 * line with what was expected, never ignored.
 */
#include "config/config.h"
#include "server/observe.h"
#include "store/store.h"
#include "t.h"

static const char *POLICY = "policies:\n  - name: p\n    objective: cost\n    key: []\n"
                            "    algorithm: gcra\n    limits: [ {rate: 1/s} ]\n";

static sl_config *load(const char *settings, sl_diag_list *dl) {
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s%s", settings, POLICY);
    sl_config *cfg = NULL;
    memset(dl, 0, sizeof(*dl));
    sl_config_load_buffer(buf, strlen(buf), "t.yaml", &cfg, dl);
    return cfg;
}

static void defaults(void) {
    static sl_diag_list dl;
    sl_config *c = load("", &dl);
    T_CHECK(c != NULL);
    if (c == NULL) return;
    const sl_settings *st = sl_config_settings(c);
    T_EQ_I(st->log.level, 2);
    T_EQ_I(st->log.format, 0);
    T_EQ_S(st->log.file, "");
    T_CHECK(!st->log.decisions && st->log.decisions_rejections_only);
    T_EQ_U(st->log.decisions_sample_ppm, 1000000);
    T_EQ_U(st->log.decisions_per_s, 100);
    T_CHECK(!st->log_raw_keys);
    T_EQ_U(st->observe.near_limit_ppm, 800000);
    T_EQ_U(st->observe.hot_counters, 64);
    T_EQ_I(st->observe.hot_interval_ns, 10 * SLUICE_NS_PER_S);
    T_EQ_U(st->observe.hot_top, 5);
    T_EQ_S(st->audit.file, "");
    T_EQ_U(st->audit.keep, 64);
    T_EQ_U(st->n_admin_tokens, 0);
    sl_config_destroy(c);
}

static void every_field(void) {
    static sl_diag_list dl;
    sl_config *c = load("log:\n  level: debug\n  format: json\n  file: /tmp/s.log\n  raw_keys: true\n"
                        "  decisions: { enabled: true, rejections_only: false, sample: 0.125,\n"
                        "               max_per_s: 50, burst: 10 }\n"
                        "observe:\n  near_limit: 90%\n"
                        "  hot_keys: { counters: 256, interval: 30s, top: 3 }\n"
                        "audit: { file: /tmp/a.jsonl, keep: 8 }\n"
                        "admin:\n  token: t0\n  tokens:\n    - { name: deploy-bot, token: t1 }\n"
                        "    - { name: alice, token: t2 }\n",
                        &dl);
    T_CHECK(c != NULL);
    if (c == NULL) return;
    const sl_settings *st = sl_config_settings(c);
    T_EQ_I(st->log.level, 3);
    T_EQ_I(st->log.format, 1);
    T_EQ_S(st->log.file, "/tmp/s.log");
    T_CHECK(st->log_raw_keys && st->log.decisions && !st->log.decisions_rejections_only);
    T_EQ_U(st->log.decisions_sample_ppm, 125000);
    T_EQ_U(st->log.decisions_per_s, 50);
    T_EQ_U(st->log.decisions_burst, 10);
    T_EQ_U(st->observe.near_limit_ppm, 900000);
    T_EQ_U(st->observe.hot_counters, 256);
    T_EQ_I(st->observe.hot_interval_ns, 30 * SLUICE_NS_PER_S);
    T_EQ_U(st->observe.hot_top, 3);
    T_EQ_S(st->audit.file, "/tmp/a.jsonl");
    T_EQ_U(st->audit.keep, 8);
    T_EQ_S(st->admin_token, "t0");
    T_EQ_U(st->n_admin_tokens, 2);
    T_EQ_S(st->admin_tokens[0].name, "deploy-bot");
    T_EQ_S(st->admin_tokens[1].token, "t2");
    sl_config_destroy(c);
    /* hot keys off */
    c = load("observe: { hot_keys: off }\n", &dl);
    T_CHECK(c != NULL && sl_config_settings(c)->observe.hot_counters == 0);
    sl_config_destroy(c);
}

/* Each mistake: refused, at its line, saying what was expected. */
static void mistakes(void) {
    static const struct {
        const char *yaml;
        int line;
        const char *says;
    } cases[] = {
        {"log: { level: loud }\n", 1, "expected error, warn, info or debug"},
        {"log: { format: xml }\n", 1, "expected text or json"},
        {"log:\n  decisions: { sample: 1.5 }\n", 2, "expected a fraction from 0 to 1"},
        {"log:\n  decisions: { max_per_s: 0 }\n", 2, "expected at least 1"},
        {"log:\n  decisions: { enable: true }\n", 2, "unknown field 'enable'"},
        {"observe: { near_limit: 0 }\n", 1, "would count every admission"},
        {"observe:\n  hot_keys: { counters: 4 }\n", 2, "8 to 4096"},
        {"observe:\n  hot_keys: { top: 50 }\n", 2, "at most 20"},
        {"audit: { fil: x }\n", 1, "unknown field 'fil'"},
        {"admin:\n  tokens:\n    - { name: a, token: x }\n    - { name: a, token: y }\n", 4,
         "used twice"},
        {"admin:\n  tokens:\n    - { name: a }\n", 3, "needs a name and a token"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        static sl_diag_list dl;
        sl_config *c = load(cases[i].yaml, &dl);
        if (c != NULL) {
            T_FAIL("case %zu loaded: %s", i, cases[i].yaml);
            sl_config_destroy(c);
            continue;
        }
        T_CHECK(dl.n >= 1);
        if (dl.n < 1) continue;
        if (dl.items[0].line != cases[i].line || strstr(dl.items[0].msg, cases[i].says) == NULL)
            T_FAIL("case %zu: %d: %s (want line %d, '%s')", i, dl.items[0].line, dl.items[0].msg,
                   cases[i].line, cases[i].says);
    }
}

/* The store operations wrapped for latency keep every operation the store has, the batch
 * one included (without it pipelined RESP checks lost their batching: 0.6x INCR). */
static void wrapped_store_keeps_its_operations(void) {
    const sl_store_ops *w = sl_obs_wrap_ops(&sl_memory_ops);
    T_CHECK(w->decide != NULL && w->settle != NULL && w->release != NULL && w->reset != NULL);
    T_CHECK((w->decide_batch != NULL) == (sl_memory_ops.decide_batch != NULL));
    T_CHECK(w->immediate == sl_memory_ops.immediate && w->shared == sl_memory_ops.shared);
}

int main(void) {
    T_RUN(defaults);
    T_RUN(wrapped_store_keeps_its_operations);
    T_RUN(every_field);
    T_RUN(mistakes);
    return T_DONE();
}
