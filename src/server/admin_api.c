/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_api.c -- the admin listener's endpoints: /healthz, /readyz, /metrics,
 * /v1/policies (the effective configuration), /v1/top (hot keys), /v1/audit, /v1/clock,
 * /v1/reload. Every one but the probes requires a bearer token when one is configured
 * (admin.token, named "admin", or one of admin.tokens: its name is the caller the audit
 * trail records). Not on the decision path: bodies are built with jansson or the engine's
 * JSON writer.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/explain.h"
#include "server/observe.h"
#include "server/server.h"

typedef struct http_ctx {
    sl_conn *c;
    const sl_http_req *req;
    const char *path;
    size_t path_len;
    int is_head;
} http_ctx;

#define reply sl_http_reply

static int sl_hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
#define problem sl_http_problem

static int path_is(const http_ctx *x, const char *p) {
    return strlen(p) == x->path_len && memcmp(x->path, p, x->path_len) == 0;
}

static int method_is(const http_ctx *x, const char *m) {
    return strlen(m) == x->req->method_len && memcmp(x->req->method, m, x->req->method_len) == 0;
}

static void reply_json(http_ctx *x, int status, const char *hdrs, const char *body, size_t n) {
    reply(x->c, x->req->minor, status, hdrs, "application/json", body, n, !x->is_head);
}

static json_t *parse_body(http_ctx *x) {
    if (x->req->body_len == 0) return NULL;
    json_error_t err;
    json_t *j = json_loadb(x->req->body, x->req->body_len, 0, &err);
    if (j && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}


/* Whether the bearer token is `tok` (constant time in the token's bytes). */
static int bearer_is(const sl_http_header *h, const char *tok) {
    size_t n = strlen(tok);
    if (h == NULL || h->value_len != 7 + n || strncasecmp(h->value, "Bearer ", 7) != 0) return 0;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(h->value[7 + i] ^ tok[i]);
    return d == 0;
}

/* The caller's token name ("admin" for admin.token, a name from admin.tokens), "" when
 * no token is configured, NULL when the request is not authorized. Tokens of
 * admin.tokens come from the configuration in force (a reload changes them). */
static const char *admin_caller(http_ctx *x) {
    const char *tok = x->c->w->gen->admin_token; /* the command line's, or the config's */
    const sl_settings *st = sl_config_settings(x->c->w->gen->cfg);
    if (tok[0] == '\0' && st->n_admin_tokens == 0) return "";
    const sl_http_header *h = sl_http1_header(x->req, "authorization");
    const char *who = NULL;
    if (tok[0] != '\0' && bearer_is(h, tok)) who = "admin";
    for (unsigned i = 0; i < st->n_admin_tokens; i++)
        if (bearer_is(h, st->admin_tokens[i].token) && who == NULL) who = st->admin_tokens[i].name;
    return who;
}

static void handle_policies(http_ctx *x) {
    sl_server *s = x->c->w->srv;
    sl_gen *g = x->c->w->gen;
    size_t plen = 0;
    char *pols = sl_engine_policies_json(g->engine, s->opt.config_path, &plen);
    json_error_t jerr;
    json_t *a = pols ? json_loadb(pols, plen, 0, &jerr) : NULL;
    free(pols);
    if (a == NULL) {
        problem(x->c, x->req->minor, 500, "out of memory", 1);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "generation", json_integer((json_int_t)g->id));
    json_object_set_new(o, "file", json_string(s->opt.config_path));
    json_object_set_new(o, "format", json_string(sl_config_is_envoy(g->cfg) ? "envoy" : "sluice"));
    json_object_set_new(o, "limiters", json_integer((json_int_t)sl_config_limiter_count(g->cfg)));
    json_object_set_new(o, "policies", a);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (out) {
        reply_json(x, 200, NULL, out, strlen(out));
        free(out);
    }
}

/* Looks up `name=` in the query string (percent-decoded into out); -1 when absent. */
static int query_get(const sl_http_req *req, const char *name, char *out, size_t cap) {
    const char *q = memchr(req->target, '?', req->target_len);
    if (q == NULL) return -1;
    const char *p = q + 1, *end = req->target + req->target_len;
    size_t nl = strlen(name);
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        if ((size_t)(e - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t o = 0;
            for (const char *v = p + nl + 1; v < e && o + 1 < cap; v++) {
                int hi, lo;
                if (*v == '%' && e - v >= 3 && (hi = sl_hexval(v[1])) >= 0 && (lo = sl_hexval(v[2])) >= 0) {
                    out[o++] = (char)(hi * 16 + lo);
                    v += 2;
                } else {
                    out[o++] = *v == '+' ? ' ' : *v;
                }
            }
            out[o] = '\0';
            return (int)o;
        }
        p = amp ? amp + 1 : end;
    }
    return -1;
}

static void handle_top(http_ctx *x) {
    char policy[256], nbuf[16];
    if (query_get(x->req, "policy", policy, sizeof(policy)) <= 0) {
        problem(x->c, x->req->minor, 400, "expected /v1/top?policy=NAME[&n=10]", 1);
        return;
    }
    size_t n = 10;
    if (query_get(x->req, "n", nbuf, sizeof(nbuf)) > 0) n = (size_t)strtoul(nbuf, NULL, 10);
    int status = 500;
    size_t len = 0;
    char *out = sl_obs_top_json(x->c->w->srv, policy, n, &status, &len);
    if (out == NULL) {
        problem(x->c, x->req->minor, status,
                status == 404   ? "no such policy"
                : status == 409 ? "hot keys are off (observe.hot_keys.counters: 0)"
                                : "out of memory",
                1);
        return;
    }
    reply_json(x, 200, NULL, out, len);
    free(out);
}

static void handle_audit(http_ctx *x) {
    char nbuf[16];
    size_t n = 64;
    if (query_get(x->req, "n", nbuf, sizeof(nbuf)) > 0) n = (size_t)strtoul(nbuf, NULL, 10);
    size_t len = 0;
    char *out = sl_audit_render(x->c->w->srv->obs->audit, n ? n : 64, &len);
    if (out == NULL) {
        problem(x->c, x->req->minor, 500, "out of memory", 1);
        return;
    }
    reply_json(x, 200, NULL, out, len);
    free(out);
}

static void handle_clock(http_ctx *x) {
    sl_server *s = x->c->w->srv;
    if (!s->opt.test_clock) {
        problem(x->c, x->req->minor, 403, "the clock can only be moved with --test-clock", 1);
        return;
    }
    json_t *j = parse_body(x);
    int rc = 0;
    if (j) {
        json_t *set = json_object_get(j, "set_ms"), *adv = json_object_get(j, "advance_ms");
        /* range-checked before any conversion: a client's integer as it came */
        if (set && json_is_integer(set))
            rc = sluice_clock_set_wall_ms(s->clock, json_integer_value(set));
        else if (adv && json_is_integer(adv))
            rc = sluice_clock_advance_ms(s->clock, json_integer_value(adv));
        else
            rc = SLUICE_EINVAL;
        json_decref(j);
    } else if (method_is(x, "POST")) {
        rc = SLUICE_EINVAL;
    }
    if (rc == SLUICE_ERANGE) {
        problem(x->c, x->req->minor, 400,
                "the clock accepts 1970-01-01 to 2200-01-01 UTC (set_ms 0 to 7258118400000); the "
                "clock did not move", 1);
        return;
    }
    if (rc != 0) {
        problem(x->c, x->req->minor, 400, "expected {\"set_ms\": UNIX_MS} or {\"advance_ms\": MS >= 0}", 1);
        return;
    }
    x->c->w->have_batch_now = false;
    sluice_time t = sluice_clock_now(s->clock);
    char b[128];
    int n = snprintf(b, sizeof(b), "{\"wall_ms\":%lld,\"mono_ms\":%lld}",
                     (long long)(t.wall_ns / SLUICE_NS_PER_MS), (long long)(t.mono_ns / SLUICE_NS_PER_MS));
    reply_json(x, 200, NULL, b, (size_t)n);
}

static void handle_reload(http_ctx *x, const char *caller) {
    sl_server *s = x->c->w->srv;
    static _Thread_local char err[8192];
    char notes[256];
    if (sl_server_reload_from(s, SL_AUDIT_ADMIN_API, caller[0] ? caller : NULL, err, sizeof(err), notes,
                              sizeof(notes)) == 0) {
        sl_gen *g = atomic_load(&s->gen);
        json_t *o = json_object();
        json_object_set_new(o, "reloaded", json_true());
        json_object_set_new(o, "generation", json_integer((json_int_t)g->id));
        json_t *a = json_array();
        for (char *tok = strtok(notes, ", "); tok != NULL; tok = strtok(NULL, ", "))
            json_array_append_new(a, json_string(tok));
        json_object_set_new(o, "restart_needed", a);
        char *out = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (out) {
            reply_json(x, 200, NULL, out, strlen(out));
            free(out);
        }
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("about:blank"));
    json_object_set_new(o, "title", json_string("Unprocessable Content"));
    json_object_set_new(o, "status", json_integer(422));
    json_object_set_new(o, "detail", json_string("invalid configuration: the old one is kept"));
    json_t *a = json_array();
    char *line = err;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        json_array_append_new(a, json_string(line));
        line = nl ? nl + 1 : NULL;
    }
    json_object_set_new(o, "errors", a);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (out) {
        reply(x->c, x->req->minor, 422, NULL, "application/problem+json", out, strlen(out), 1);
        free(out);
    }
}

void sl_admin_handle(sl_conn *c, const sl_http_req *req, const char *path, size_t path_len,
                     bool is_head) {
    http_ctx xx = {.c = c, .req = req, .path = path, .path_len = path_len, .is_head = is_head};
    http_ctx *x = &xx;
    sl_server *s = c->w->srv;
    int get = method_is(x, "GET") || x->is_head;
    if (path_is(x, "/healthz")) {
        reply(c, x->req->minor, 200, NULL, "text/plain", "ok\n", 3, !x->is_head);
        return;
    }
    if (path_is(x, "/readyz")) {
        char body[4096];
        int status = sl_server_readiness(s, c->w->gen, body, sizeof(body));
        reply(c, x->req->minor, status, NULL, "text/plain", body, strlen(body), !x->is_head);
        return;
    }
    const char *caller = admin_caller(x);
    if (caller == NULL) {
        problem(c, x->req->minor, 401, "a valid bearer token is required", !x->is_head);
        return;
    }
    if ((path_is(x, "/metrics") || (s->opt.prom_path[0] && path_is(x, s->opt.prom_path))) && get) {
        size_t n = 0;
        char *m = sl_metrics_render(s, &n);
        if (m == NULL) {
            problem(c, x->req->minor, 500, "out of memory", 1);
            return;
        }
        reply(c, x->req->minor, 200, NULL, "text/plain; version=0.0.4", m, n, !x->is_head);
        free(m);
    } else if (path_is(x, "/rlconfig") && get) {
        /* envoyproxy/ratelimit's debug endpoint: the loaded rules, one line each */
        size_t n = 0;
        char *t = sl_config_envoy_dump(c->w->gen->cfg, &n);
        if (t == NULL) {
            problem(c, x->req->minor, 500, "out of memory", 1);
            return;
        }
        reply(c, x->req->minor, 200, NULL, "text/plain; charset=utf-8", t, n, !x->is_head);
        free(t);
    } else if (path_is(x, "/v1/policies") && get) {
        handle_policies(x);
    } else if (path_is(x, "/v1/top") && get) {
        handle_top(x);
    } else if (path_is(x, "/v1/audit") && get) {
        handle_audit(x);
    } else if (path_is(x, "/v1/clock") && (method_is(x, "POST") || get)) {
        handle_clock(x);
    } else if (path_is(x, "/v1/reload") && method_is(x, "POST")) {
        handle_reload(x, caller);
    } else {
        problem(c, x->req->minor, 404, "no such endpoint on the admin listener", !x->is_head);
    }
}

