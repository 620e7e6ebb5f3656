/*
 * admin_api.c -- the admin listener's endpoints: /healthz, /readyz, /metrics,
 * /v1/policies, /v1/clock, /v1/reload. Every one but the probes requires the bearer
 * token when one is configured. Not on the decision path: bodies are built with jansson.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/server.h"

typedef struct http_ctx {
    sl_conn *c;
    const sl_http_req *req;
    const char *path;
    size_t path_len;
    int is_head;
} http_ctx;

#define reply sl_http_reply
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


static int admin_authorized(http_ctx *x) {
    const char *tok = x->c->w->gen->admin_token;
    if (tok[0] == '\0') return 1;
    const sl_http_header *h = sl_http1_header(x->req, "authorization");
    size_t n = strlen(tok);
    if (h == NULL || h->value_len != 7 + n || strncasecmp(h->value, "Bearer ", 7) != 0) return 0;
    /* constant-time comparison */
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(h->value[7 + i] ^ tok[i]);
    return d == 0;
}

static void handle_policies(http_ctx *x) {
    sl_gen *g = x->c->w->gen;
    json_t *o = json_object();
    json_t *a = json_array();
    size_t n = sl_config_policy_count(g->cfg);
    for (size_t i = 0; i < n; i++) {
        const char *name = sl_config_policy_name(g->cfg, i);
        if (name) json_array_append_new(a, json_string(name));
    }
    json_object_set_new(o, "generation", json_integer((json_int_t)g->id));
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
        if (set && json_is_integer(set))
            rc = sluice_clock_set_wall(s->clock, json_integer_value(set) * SLUICE_NS_PER_MS);
        else if (adv && json_is_integer(adv))
            rc = sluice_clock_advance(s->clock, json_integer_value(adv) * SLUICE_NS_PER_MS);
        else
            rc = SLUICE_EINVAL;
        json_decref(j);
    } else if (method_is(x, "POST")) {
        rc = SLUICE_EINVAL;
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

static void handle_reload(http_ctx *x) {
    sl_server *s = x->c->w->srv;
    static _Thread_local char err[8192];
    char notes[256];
    if (sl_server_reload_ex(s, err, sizeof(err), notes, sizeof(notes)) == 0) {
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
        char body[512];
        int status = sl_server_readiness(s, c->w->gen, body, sizeof(body));
        reply(c, x->req->minor, status, NULL, "text/plain", body, strlen(body), !x->is_head);
        return;
    }
    if (!admin_authorized(x)) {
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
    } else if (path_is(x, "/v1/policies") && get) {
        handle_policies(x);
    } else if (path_is(x, "/v1/clock") && (method_is(x, "POST") || get)) {
        handle_clock(x);
    } else if (path_is(x, "/v1/reload") && method_is(x, "POST")) {
        handle_reload(x);
    } else {
        problem(c, x->req->minor, 404, "no such endpoint on the admin listener", !x->is_head);
    }
}

