/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/embed/embed.c -- the policy engine embedded in a C program through sluice.h
 * only (link: -lsluice, or pkg-config --libs sluice). It loads a configuration, decides
 * requests from their attributes and by policy/key, prints each answer (status, header
 * pairs, the deciding window's numbers), settles a reservation, gives one key a plan by
 * override, reloads keeping counters and lists the overrides.
 *
 *   embed [CONFIG]     (default: policy.yaml beside this file; a manual clock is used so
 *                       the output is the same on every run)
 *
 * Exit status 0 when every step behaved as the comments say (the test checks it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice.h>

#define STR(s) ((sluice_str){(s), sizeof(s) - 1})

static int failures;

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "embed: FAILED: %s\n", what);
        failures++;
    }
}

static void show(const char *what, const sluice_answer *a) {
    static const char *const act[] = {"allow", "delay", "reject", "fail", "error"};
    printf("%s: %s %d", what, act[a->action], a->status);
    if (a->window != NULL)
        printf(" (policy %s, window %s%s%s: limit %llu, remaining %llu, reset %lld ms)", a->policy,
               a->window, a->plan ? ", plan " : "", a->plan ? a->plan : "",
               (unsigned long long)a->limit, (unsigned long long)a->remaining,
               (long long)(a->reset_ns / SLUICE_NS_PER_MS));
    if (a->action == SLUICE_ACTION_REJECT && a->retry_after_ns >= 0)
        printf(" retry after %lld ms", (long long)(a->retry_after_ns / SLUICE_NS_PER_MS));
    printf("\n");
    for (size_t i = 0; i < a->n_headers; i++) /* pairs: pointer + length */
        printf("  %.*s: %.*s\n", (int)a->headers[i].name.len, a->headers[i].name.p,
               (int)a->headers[i].value.len, a->headers[i].value.p);
    if (a->body.len > 0) printf("  body (%s): %.*s\n", a->content_type, (int)a->body.len, a->body.p);
}

static int list_one(void *ud, const sluice_override_info *o) {
    (void)ud;
    printf("  override %s/%s: kind %d plan %s label %s\n", o->policy, o->key_hash, (int)o->kind,
           o->plan ? o->plan : "-", o->label ? o->label : "-");
    return 0;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "policy.yaml";
    char err[2048];
    int rc;
    /* 1. load (errors are `sluice config check`'s file:line:col lines) */
    sluice_engine *e = sluice_engine_load_file(path, &rc, err, sizeof(err));
    if (e == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    sluice_engine *bad = sluice_engine_load_string("policies:\n  - name: x\n    limits: 7\n", 33,
                                                   "pasted.yaml", &rc, err, sizeof(err));
    expect(bad == NULL && strncmp(err, "pasted.yaml:", 12) == 0, "a bad config names file:line:col");
    printf("bad config: %s\n", err);

    /* one verdict per thread (or request in flight), reused: deciding allocates nothing */
    sluice_verdict *v = sluice_verdict_create();
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * SLUICE_NS_PER_S);
    if (v == NULL || clk == NULL) return 1;

    /* 2. a request by its attributes, as a proxy module sees it */
    sluice_header hdrs[] = {{STR("X-Api-Key"), STR("k-42")}};
    sluice_request req = {0};
    req.method = STR("GET");
    req.path = STR("/api/orders");
    req.headers = hdrs;
    req.n_headers = 1;
    const sluice_answer *a = NULL;
    for (int i = 0; i < 6; i++) {
        rc = sluice_engine_decide(e, &req, sluice_clock_now(clk), v);
        a = sluice_verdict_answer(v);
    }
    expect(rc == SLUICE_OK && a->action == SLUICE_ACTION_REJECT && a->status == 429,
           "the 6th request in a minute on 5/min is rejected");
    show("request 6 of k-42", a);

    /* 3. the policy/key form (its keys are a namespace of their own: "k-7" here is not
     *    the header-composed k-7 of the request form) */
    rc = sluice_engine_decide_key(e, "api", "k-7", 3, 0, 0, sluice_clock_now(clk), v);
    a = sluice_verdict_answer(v);
    expect(rc == SLUICE_OK && a->action == SLUICE_ACTION_ALLOW && a->remaining == 4,
           "policy/key form: first request of k-7 leaves 4");
    show("api/k-7", a);

    /* 4. reserve 1000 tokens, settle to the 120 really used */
    sluice_request llm = {0};
    llm.method = STR("POST");
    llm.path = STR("/llm/complete");
    llm.headers = hdrs;
    llm.n_headers = 1;
    rc = sluice_engine_decide(e, &llm, sluice_clock_now(clk), v);
    a = sluice_verdict_answer(v);
    expect(rc == SLUICE_OK && a->action == SLUICE_ACTION_ALLOW && a->remaining == 9000,
           "1000 tokens reserved of 10000");
    rc = sluice_engine_settle(e, v, 120, sluice_clock_now(clk));
    expect(rc == SLUICE_OK, "settle");
    llm.has_cost = 1; /* a stated cost of 0: a peek, nothing consumed */
    llm.cost = 0;
    rc = sluice_engine_decide(e, &llm, sluice_clock_now(clk), v);
    a = sluice_verdict_answer(v);
    expect(rc == SLUICE_OK && a->remaining == 9880, "after settling, 120 were charged");
    show("llm-tokens/k-42 after settle", a);

    /* 5. an override: k-42 gets the enterprise plan (counters carry over) */
    sluice_override o = {0};
    o.kind = SLUICE_OVERRIDE_PLAN;
    o.plan = "enterprise";
    o.label = "ACME Corp";
    int created = 0;
    rc = sluice_override_set(e, "api", "k-42", 4, &o, sluice_clock_now(clk), &created, err,
                             sizeof(err));
    expect(rc == SLUICE_OK && created, err);
    rc = sluice_engine_decide(e, &req, sluice_clock_now(clk), v);
    a = sluice_verdict_answer(v);
    expect(rc == SLUICE_OK && a->action == SLUICE_ACTION_ALLOW && a->overridden && a->limit == 100,
           "the enterprise plan admits k-42");
    show("k-42 under its override", a);
    sluice_override_info *info = NULL;
    rc = sluice_override_get(e, "api", "k-42", 4, sluice_clock_now(clk), &info);
    expect(rc == SLUICE_OK && info->kind == SLUICE_OVERRIDE_PLAN && strcmp(info->plan, "enterprise") == 0,
           "override get");
    sluice_override_info_free(info); /* the caller's */

    /* 6. reload: the same windows keep their counters */
    rc = sluice_engine_reload_file(e, path, err, sizeof(err));
    expect(rc == SLUICE_OK && sluice_engine_generation(e) == 1, "reload");
    rc = sluice_engine_decide_key(e, "api", "k-7", 3, 0, 0, sluice_clock_now(clk), v);
    a = sluice_verdict_answer(v);
    expect(rc == SLUICE_OK && a->remaining == 3, "k-7 kept its counter across the reload");
    show("api/k-7 after reload", a);

    printf("overrides:\n");
    int n = sluice_override_each(e, NULL, sluice_clock_now(clk), list_one, NULL);
    expect(n == 1, "one override listed");
    rc = sluice_override_remove(e, "api", "k-42", 4, sluice_clock_now(clk));
    expect(rc == SLUICE_OK, "override removed");

    sluice_verdict_destroy(v);
    sluice_clock_destroy(clk);
    sluice_engine_destroy(e);
    printf("%s\n", failures ? "embed: FAILED" : "embed: ok");
    return failures ? 1 : 0;
}
