/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_sl.c -- the SL.* decision commands: SL.CHECK, SL.PEEK, SL.PASS, SL.CHECKREQ,
 * SL.EXPLAIN, SL.ACQUIRE, SL.SETTLE and SL.RELEASE, and the decision reply they share with
 * the batch (resp_batch.c). Times in SL.* replies are milliseconds, rounded up (waiting
 * that long is enough).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/explain.h"
#include "server/observe.h"
#include "api/resp/resp_cmds.h"

static int64_t ceil_ms(int64_t ns) {
    if (ns <= 0) return ns < 0 ? -1 : 0;
    return (ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS;
}

/* The compact reply: the same numbers as the full one's fields of the same names. */
static void compact_reply(sl_wbuf *wb, const sl_verdict *v) {
    const sl_verdict_item *it = (v->deciding >= 0 && (size_t)v->deciding < v->n) ? &v->items[v->deciding] : NULL;
    bool allowed = v->action == SL_ALLOW || (v->action == SL_DELAY && !v->recheck);
    sl_wbuf_put(wb, allowed ? "*5\r\n:0\r\n" : "*5\r\n:1\r\n", 8);
    sl_resp_int(wb, it ? (int64_t)it->result.limit : 0);
    sl_resp_int(wb, it ? (int64_t)it->result.remaining : 0);
    sl_resp_int(wb, allowed ? -1 : ceil_ms(v->action == SL_DELAY ? v->delay_ns : v->retry_after_ns));
    sl_resp_int(wb, it ? ceil_ms(it->result.reset_after_ns) : 0);
}

/* The SL.* decision reply: a map (RESP3) or flat array (RESP2) with a fixed shape. */
void sl__resp_verdict_reply(sl_conn *c, sl_wbuf *wb, int rc, sl_verdict *v, const char *policy, reply_form form) {
    sl_worker *w = c->w;
    sl_server_count_verdict(w, rc, v);
    if (sl__resp_unknown_policy(wb, rc, v, policy)) return;
    if (rc != 0) {
        char m[200];
        snprintf(m, sizeof(m), "ERR %s", sl_engine_error_text(rc));
        sl_resp_error(wb, m);
        return;
    }
    if (form == REPLY_COMPACT) {
        compact_reply(wb, v);
        return;
    }
    int p = c->proto;
    const sl_verdict_item *it = (v->deciding >= 0 && (size_t)v->deciding < v->n) ? &v->items[v->deciding] : NULL;
    bool allowed = v->action == SL_ALLOW || (v->action == SL_DELAY && !v->recheck);
    /* capacity protection adds fields (only to the replies of such policies): the adaptive
     * limit, no-load latency and slots in flight; the class shed; the penalty */
    sl_cap_info ax;
    bool adaptive = sl_verdict_adaptive(v, &ax, NULL);
    const char *shed_reason = NULL, *shed = v->action == SL_REJECT ? sl_verdict_shed(v, &shed_reason) : NULL;
    unsigned plevel = 0;
    const char *paction = NULL;
    bool penalty = v->action == SL_REJECT && sl_verdict_penalty(v, &plevel, &paction, NULL);
    int extra = (adaptive ? 3 : 0) + (shed ? 2 : 0) + (penalty ? 2 : 0);
    /* the field names are pre-encoded bulk strings: this reply is on the hot path */
#define LIT(w, s) sl_wbuf_put((w), s, sizeof(s) - 1)
    /* + shadow_limited, always last: the fields before it keep their places */
    if (extra > 0) {
        if (p == 3) sl_wbuf_printf(wb, "%%%d\r\n$7\r\nallowed\r\n", 10 + extra);
        else sl_wbuf_printf(wb, "*%d\r\n$7\r\nallowed\r\n", 20 + 2 * extra);
    } else if (p == 3)
        LIT(wb, "%10\r\n$7\r\nallowed\r\n");
    else
        LIT(wb, "*20\r\n$7\r\nallowed\r\n");
    sl_resp_bool(wb, p, allowed);
    LIT(wb, "$6\r\naction\r\n");
    switch (v->action) {
    case SL_ALLOW: LIT(wb, "$5\r\nallow\r\n"); break;
    case SL_DELAY:
        /* a shaped admission (consumed: forward after the delay) and a recheck (nothing
         * consumed: ask again after it) are different answers */
        if (v->recheck) LIT(wb, "$7\r\nrecheck\r\n");
        else LIT(wb, "$5\r\ndelay\r\n");
        break;
    case SL_REJECT:
        /* a request without the key a policy needs (on_missing_key: reject) is not a
         * limit: said apart, with that policy's name */
        if (v->missing_key_policy != NULL && v->status == 400) LIT(wb, "$11\r\nmissing_key\r\n");
        else LIT(wb, "$6\r\nreject\r\n");
        break;
    default: LIT(wb, "$4\r\nfail\r\n"); break;
    }
    LIT(wb, "$6\r\npolicy\r\n");
    if (it && it->info && it->info->policy)
        sl_resp_bulk_str(wb, it->info->policy);
    else if (v->missing_key_policy != NULL)
        sl_resp_bulk_str(wb, v->missing_key_policy);
    else
        sl_resp_null(wb, p);
    LIT(wb, "$5\r\nlimit\r\n");
    sl_resp_int(wb, it ? (int64_t)it->result.limit : 0);
    LIT(wb, "$9\r\nremaining\r\n");
    sl_resp_int(wb, it ? (int64_t)it->result.remaining : 0);
    LIT(wb, "$14\r\nretry_after_ms\r\n");
    sl_resp_int(wb, allowed ? 0 : ceil_ms(v->action == SL_DELAY ? v->delay_ns : v->retry_after_ns));
    LIT(wb, "$14\r\nreset_after_ms\r\n");
    sl_resp_int(wb, it ? ceil_ms(it->result.reset_after_ns) : 0);
    LIT(wb, "$8\r\ndelay_ms\r\n");
    sl_resp_int(wb, v->action == SL_DELAY ? ceil_ms(v->delay_ns) : 0);
    LIT(wb, "$5\r\ntoken\r\n");
#undef LIT
    char tok[SL_TOKEN_MAX + 1];
    int tl = (allowed && sl_verdict_needs_token(v)) ? sl_verdict_token(v, tok, sizeof(tok)) : -1;
    if (tl > 0)
        sl_resp_bulk(wb, tok, (size_t)tl);
    else
        sl_resp_null(wb, p);
    if (adaptive) {
        sl_resp_bulk_str(wb, "adaptive_limit");
        sl_resp_int(wb, ax.limit);
        sl_resp_bulk_str(wb, "noload_us"); /* integers: microseconds */
        sl_resp_int(wb, ax.noload_ns / 1000);
        sl_resp_bulk_str(wb, "in_flight");
        sl_resp_int(wb, ax.in_flight);
    }
    if (shed) {
        sl_resp_bulk_str(wb, "shed_class");
        sl_resp_bulk_str(wb, shed);
        sl_resp_bulk_str(wb, "shed_reason");
        sl_resp_bulk_str(wb, shed_reason);
    }
    if (penalty) {
        sl_resp_bulk_str(wb, "penalty_level");
        sl_resp_int(wb, plevel);
        sl_resp_bulk_str(wb, "penalty_action");
        sl_resp_bulk_str(wb, paction);
    }
    /* a shadow policy (or a rollout's unenforced share) would have refused: /v1/check's
     * shadow_limited, appended so that clients reading fields by position keep working */
    sl_wbuf_put(wb, "$14\r\nshadow_limited\r\n", 21);
    sl_resp_bool(wb, p, v->shadow_limited);
}

static void write_verdict(sl_conn *c, sl_wbuf *wb, void *arg) {
    sl_pending *p = arg;
    sl__resp_verdict_reply(c, wb, p->rc, &p->v, p->text, (reply_form)p->op);
}

static void finish_verdict(sl_pending *p, int rc, bool later) {
    sl__resp_finish(p, rc, later, REPLY_RESERVE + SL_TOKEN_MAX, write_verdict);
}

static void decide(resp_ctx *x, sl_pending *p) {
    sl_worker *w = x->c->w;
    sl_pending_submit(p);
    sl_engine_decide(w->gen->engine, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

/* A trailing COMPACT (SL.CHECK, SL.PEEK): the compact reply; *argc without it. */
reply_form sl__resp_reply_form_of(const sl_resp_cmd *cmd, size_t *argc) {
    *argc = cmd->argc;
    if (cmd->argc >= 4 && sl_resp_arg_is(cmd, cmd->argc - 1, "COMPACT")) {
        (*argc)--;
        return REPLY_COMPACT;
    }
    return REPLY_FULL;
}

typedef enum check_mode { CHECK_DECIDE = 0, CHECK_PEEK = 1, CHECK_PASS = 2 } check_mode;

/* SL.CHECK <policy> <key> [COST n] [CLASS c] [COMPACT], SL.PEEK <policy> <key> [COMPACT]
 * and SL.PASS <policy> <key> (a solved challenge: +OK, or an error when none was running) */
static void finish_pass(sl_pending *p, int rc, bool later);
static void cmd_check_mode(resp_ctx *x, check_mode peek) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    char policy[256], cls[64];
    bool pass = peek == CHECK_PASS;
    size_t argc;
    reply_form form = pass ? REPLY_FULL : sl__resp_reply_form_of(cmd, &argc);
    if (pass) argc = cmd->argc;
    if (argc < 3 || (peek && argc != 3) || argc % 2 == 0 || argc > 7) {
        sl__resp_err_arity(x);
        return;
    }
    if (sl__resp_arg_cstr(cmd, 1, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR policy name too long");
        return;
    }
    bool has_cost = peek == 1, has_cls = false;
    uint64_t cost = 0;
    for (size_t i = 3; i + 1 < argc; i += 2) {
        int64_t v;
        if (sl_resp_arg_is(cmd, i, "COST") && !has_cost) {
            if (sl_resp_arg_i64(cmd, i + 1, &v) != 0 || v < 0) {
                sl_resp_error(&x->wb, "ERR COST must be a non-negative integer");
                return;
            }
            has_cost = true;
            cost = (uint64_t)v;
        } else if (sl_resp_arg_is(cmd, i, "CLASS") && !has_cls && sl__resp_arg_cstr(cmd, i + 1, cls, sizeof(cls)) == 0) {
            has_cls = true;
        } else {
            sl_resp_error(&x->wb, "ERR syntax error (expected [COST n] [CLASS name])");
            return;
        }
    }
    sl_pending *p = sl__resp_take(x, pass ? finish_pass : finish_verdict);
    if (p == NULL) return;
    p->op = form;
    memcpy(p->text, policy, strlen(policy) + 1);
    sl_engine_prepare_named_class(w->gen->engine, policy, cmd->argv[2], cmd->argl[2], has_cost, cost,
                                  has_cls ? cls : NULL, &p->v);
    if (pass) {
        sl_pending_submit(p);
        sl_engine_pass(w->gen->engine, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
        if (sl_pending_park(p)) x->c->suspended = true;
        return;
    }
    decide(x, p);
}

void sl__resp_cmd_check(resp_ctx *x) { cmd_check_mode(x, CHECK_DECIDE); }
void sl__resp_cmd_peek(resp_ctx *x) { cmd_check_mode(x, CHECK_PEEK); }
void sl__resp_cmd_pass(resp_ctx *x) { cmd_check_mode(x, CHECK_PASS); }

static void write_pass(sl_conn *c, sl_wbuf *wb, void *arg) {
    (void)c;
    sl_pending *p = arg;
    if (sl__resp_unknown_policy(wb, p->rc, &p->v, p->text)) return;
    if (p->rc != 0) {
        char m[160];
        snprintf(m, sizeof(m), "ERR %s", sluice_strerror(p->rc));
        sl_resp_error(wb, m);
    } else if (p->v.action == SL_ALLOW) {
        sl_resp_simple(wb, "OK");
    } else {
        sl_resp_error(wb, "ERR no challenge to pass for this key (none running, or a block)");
    }
}

static void finish_pass(sl_pending *p, int rc, bool later) {
    sl__resp_finish(p, rc, later, 512, write_pass);
}

#define REQ_HEADERS (SL_RESP_MAX_ARGS / 3 + 1)

/* SL.CHECKREQ's (and SL.EXPLAIN's) attributes into r (hdrs: REQ_HEADERS entries);
 * 0, or -1 on a syntax error. */
static _Thread_local char llm_err[160]; /* why an LLM body was refused (req_args: -2) */

static int req_args(const sl_resp_cmd *cmd, sl_request *r, sl_header *hdrs) {
    memset(r, 0, sizeof(*r));
    size_t nh = 0;
    for (size_t i = 1; i < cmd->argc;) {
        sl_str val = {NULL, 0};
        if (i + 1 < cmd->argc) val = (sl_str){cmd->argv[i + 1], cmd->argl[i + 1]};
        if (val.p == NULL) return -1;
        if (sl_resp_arg_is(cmd, i, "HEADER")) {
            if (i + 2 >= cmd->argc || nh >= REQ_HEADERS) return -1;
            hdrs[nh].name = val;
            hdrs[nh].value = (sl_str){cmd->argv[i + 2], cmd->argl[i + 2]};
            nh++;
            i += 3;
            continue;
        }
        if (sl_resp_arg_is(cmd, i, "LLM")) { /* issue 24: the LLM request body (src/llm) */
            static _Thread_local sl_llm_request lrq; /* read while the verdict is prepared */
            if (sl_llm_parse_request(val.p, val.len, SL_LLM_API_UNKNOWN, &lrq, llm_err, sizeof(llm_err)) != 0)
                return -2;
            r->llm = &lrq;
        } else if (sl_resp_arg_is(cmd, i, "METHOD")) r->method = val;
        else if (sl_resp_arg_is(cmd, i, "PATH")) r->path = val;
        else if (sl_resp_arg_is(cmd, i, "HOST")) r->host = val;
        else if (sl_resp_arg_is(cmd, i, "IP")) r->client_ip = val;
        else if (sl_resp_arg_is(cmd, i, "ROUTE")) r->route = val;
        else if (sl_resp_arg_is(cmd, i, "BYTES") || sl_resp_arg_is(cmd, i, "COST")) {
            int64_t v;
            if (sl_resp_arg_i64(cmd, i + 1, &v) != 0 || v < 0) return -1;
            if (sl_resp_arg_is(cmd, i, "BYTES")) {
                r->has_body_bytes = true;
                r->body_bytes = (uint64_t)v;
            } else {
                r->has_cost = true; /* COST 0: a check that takes nothing */
                r->cost = r->hits_addend = (uint64_t)v;
            }
        } else {
            return -1;
        }
        i += 2;
    }
    r->headers = hdrs;
    r->n_headers = nh;
    return 0;
}

/* SL.CHECKREQ [METHOD m] [PATH p] [HOST h] [IP a] [ROUTE r] [BYTES n] [COST n]
 *             [HEADER name value]... : the whole matching pipeline. */
void sl__resp_cmd_checkreq(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    sl_request r;
    sl_header hdrs[REQ_HEADERS];
    int ra = req_args(cmd, &r, hdrs);
    if (ra == -2) {
        char e[200];
        snprintf(e, sizeof(e), "ERR LLM body: %s", llm_err);
        sl_resp_error(&x->wb, e);
        return;
    }
    if (ra != 0) goto syntax;
    sl_pending *p = sl__resp_take(x, finish_verdict);
    if (p == NULL) return;
    p->op = REPLY_FULL;
    sl_engine_prepare(w->gen->engine, &r, &p->v);
    decide(x, p);
    return;
syntax:
    sl_resp_error(&x->wb, "ERR syntax error: SL.CHECKREQ [METHOD m] [PATH p] [HOST h] [IP addr] "
                          "[ROUTE r] [BYTES n] [COST n] [LLM body] [HEADER name value]...");
}

/* ---- SL.EXPLAIN (observe: the explanation comes from src/server/explain_api.c) ---- */

typedef struct xout {
    const char *s;
    size_t n;
} xout;

static void write_explain(sl_conn *c, sl_wbuf *wb, void *arg) {
    (void)c;
    const xout *o = arg;
    if (o->s != NULL) sl_resp_bulk(wb, o->s, o->n);
    else sl_resp_error(wb, o->n ? "ERR too many explanations in progress on this worker"
                                : "ERR out of memory");
}

static void finish_explain(sl_pending *p, int rc, bool later) {
    xout o = {NULL, 0};
    char *json = sl_obs_explain_finish(p, rc, &o.n);
    o.s = json;
    sl__resp_with_wbuf(p->c, o.n + 64, write_explain, &o);
    free(json);
    if (later) sl_conn_resume(p->c);
}

/* SL.EXPLAIN <policy> <key> [COST n] (SL.CHECK's form) or SL.EXPLAIN [METHOD m] [PATH p]
 * ... (SL.CHECKREQ's): a JSON bulk string saying why the answer would be what it is.
 * Nothing is consumed or counted. */
void sl__resp_cmd_explain(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    static const char *const kw[] = {"METHOD", "PATH", "HOST", "IP", "ROUTE", "BYTES", "COST",
                                     "HEADER", NULL};
    bool keyword = false;
    for (int k = 0; kw[k] && cmd->argc > 1; k++) keyword |= sl_resp_arg_is(cmd, 1, kw[k]);
    bool named = !keyword && (cmd->argc == 3 || (cmd->argc == 5 && sl_resp_arg_is(cmd, 3, "COST")));
    const sl_engine *e = x->c->w->gen->engine;
    sl_explain *ex;
    if (named) {
        char policy[256];
        int64_t cost = 0;
        if (sl__resp_arg_cstr(cmd, 1, policy, sizeof(policy)) != 0 ||
            (cmd->argc == 5 && (sl_resp_arg_i64(cmd, 4, &cost) != 0 || cost < 0))) {
            sl_resp_error(&x->wb, "ERR syntax: SL.EXPLAIN <policy> <key> [COST n]");
            return;
        }
        ex = sl_explain_named(e, policy, cmd->argv[2], cmd->argl[2], cmd->argc == 5, (uint64_t)cost);
    } else {
        sl_request r;
        sl_header hdrs[REQ_HEADERS];
        if (req_args(cmd, &r, hdrs) != 0) {
            sl_resp_error(&x->wb, "ERR syntax: SL.EXPLAIN <policy> <key> [COST n] | SL.EXPLAIN "
                                  "[METHOD m] [PATH p] [HOST h] [IP addr] [ROUTE r] [BYTES n] "
                                  "[COST n] [HEADER name value]...");
            return;
        }
        ex = sl_explain_request(e, &r);
    }
    if (ex == NULL) {
        sl_resp_error(&x->wb, "ERR out of memory");
        return;
    }
    sl_pending *p = sl__resp_take(x, finish_explain);
    if (p == NULL) {
        sl_explain_free(ex);
        return;
    }
    if (sl_obs_explain_start(p, ex) != 0) {
        sl_explain_free(ex);
        sl_pending_put(p);
        xout o = {NULL, 1};
        sl__resp_with_wbuf(x->c, 128, write_explain, &o);
        return;
    }
    if (sl_pending_park(p)) x->c->suspended = true;
}

static void write_token(sl_conn *c, sl_wbuf *wb, void *arg) {
    (void)c;
    int rc = *(const int *)arg;
    if (rc == 0)
        sl_resp_simple(wb, "OK");
    else if (rc == SLUICE_ENOTFOUND)
        sl_resp_error(wb, "ERR token already used, expired or unknown");
    else if (rc == SLUICE_EINVAL)
        sl_resp_error(wb, "ERR invalid token (altered, forged, or sealed by another instance or "
                          "before a restart: only a shared store.key_secret carries tokens over)");
    else if (rc == SL_ETOKEN_OP)
        sl_resp_error(wb, "ERR this token holds nothing for that operation (SL.SETTLE: a reservation, "
                          "SL.RELEASE: a lease)");
    else {
        char m[128];
        snprintf(m, sizeof(m), "ERR %s", sluice_strerror(rc));
        sl_resp_error(wb, m);
    }
}

static void finish_token(sl_pending *p, int rc, bool later) {
    sl_server_count_settle(p->c->w, rc, &p->v); /* units charged above a reservation */
    sl__resp_with_wbuf(p->c, 256, write_token, &rc);
    if (later) sl_conn_resume(p->c);
}

/* A latency in milliseconds, fractions allowed ("12.5"), as whole ns (no floating point). */
static bool arg_ms(const sl_resp_cmd *cmd, size_t i, int64_t *ns) {
    const char *p = cmd->argv[i], *end = p + cmd->argl[i];
    int64_t whole = 0, frac = 0, scale = SLUICE_NS_PER_MS;
    bool digits = false;
    while (p < end && *p >= '0' && *p <= '9' && whole < INT64_C(1000000000)) whole = whole * 10 + (*p++ - '0'), digits = true;
    if (p < end && *p == '.') {
        p++;
        while (p < end && *p >= '0' && *p <= '9') {
            if (scale > 1) {
                scale /= 10;
                frac += (*p - '0') * scale;
            }
            p++;
        }
    }
    if (!digits || p != end) return false;
    *ns = whole * SLUICE_NS_PER_MS + frac;
    return true;
}

/* SL.SETTLE <token> <actual> | SL.RELEASE <token> [LATENCY ms] [OUTCOME ok|error|dropped] */
static void cmd_token(resp_ctx *x, int settle) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    bool usage = settle && cmd->argc == 4u && sl_resp_arg_is(cmd, 2, "USAGE");
    if (settle ? cmd->argc != 3u && !usage : (cmd->argc < 2u || cmd->argc > 6u || cmd->argc % 2 != 0)) {
        sl__resp_err_arity(x);
        return;
    }
    if (usage) { /* SL.SETTLE token USAGE json: the provider's usage object as is (issue 24) */
        sl_llm_usage u = {0};
        char why[128], e[200];
        int ur = sl_llm_parse_usage(cmd->argv[3], cmd->argl[3], &u, why, sizeof(why));
        if (ur <= 0) {
            snprintf(e, sizeof(e), "ERR usage: %s", ur < 0 ? why : "no token counts found");
            sl_resp_error(&x->wb, e);
            return;
        }
        sl_pending *p = sl__resp_take(x, finish_token);
        if (p == NULL) return;
        sl_pending_submit(p);
        sl_engine_token_usage(w->gen->engine, w->lane, cmd->argv[1], cmd->argl[1], SL_TOKEN_SETTLE, &u,
                              sl_worker_now(w), &p->v, sl_pending_done, p);
        if (sl_pending_park(p)) x->c->suspended = true;
        return;
    }
    int64_t actual = 0;
    if (settle && (sl_resp_arg_i64(cmd, 2, &actual) != 0 || actual < 0)) {
        sl_resp_error(&x->wb, "ERR actual cost must be a non-negative integer");
        return;
    }
    bool has_lat = false, has_oc = false;
    int64_t lat = 0;
    unsigned outcome = SLUICE_OUTCOME_OK;
    for (size_t i = 2; !settle && i + 1 < cmd->argc; i += 2) {
        if (sl_resp_arg_is(cmd, i, "LATENCY") && !has_lat) {
            if (!arg_ms(cmd, i + 1, &lat)) {
                sl_resp_error(&x->wb, "ERR LATENCY must be milliseconds (e.g. 12.5)");
                return;
            }
            has_lat = true;
        } else if (sl_resp_arg_is(cmd, i, "OUTCOME") && !has_oc) {
            if (sl_resp_arg_is(cmd, i + 1, "ok")) outcome = SLUICE_OUTCOME_OK;
            else if (sl_resp_arg_is(cmd, i + 1, "error")) outcome = SLUICE_OUTCOME_ERROR;
            else if (sl_resp_arg_is(cmd, i + 1, "dropped")) outcome = SLUICE_OUTCOME_DROPPED;
            else {
                sl_resp_error(&x->wb, "ERR OUTCOME must be ok, error or dropped");
                return;
            }
            has_oc = true;
        } else {
            sl_resp_error(&x->wb, "ERR syntax error (expected SL.RELEASE token [LATENCY ms] [OUTCOME ok|error|dropped])");
            return;
        }
    }
    sl_pending *p = sl__resp_take(x, finish_token);
    if (p == NULL) return;
    sl_pending_submit(p);
    sl_engine_token_sample(w->gen->engine, w->lane, cmd->argv[1], cmd->argl[1],
                           settle ? SL_TOKEN_SETTLE : SL_TOKEN_RELEASE, (uint64_t)actual, has_lat, lat,
                           outcome, sl_worker_now(w), &p->v, sl_pending_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

/* SL.ACQUIRE <policy> <key> [CLASS c] */
void sl__resp_cmd_acquire(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    char policy[256], cls[64];
    if (cmd->argc != 3 && cmd->argc != 5) {
        sl__resp_err_arity(x);
        return;
    }
    if (sl__resp_arg_cstr(cmd, 1, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR policy name too long");
        return;
    }
    if (cmd->argc == 5 && (!sl_resp_arg_is(cmd, 3, "CLASS") || sl__resp_arg_cstr(cmd, 4, cls, sizeof(cls)) != 0)) {
        sl_resp_error(&x->wb, "ERR syntax error (expected SL.ACQUIRE policy key [CLASS name])");
        return;
    }
    sl_pending *p = sl__resp_take(x, finish_verdict);
    if (p == NULL) return;
    p->op = REPLY_FULL;
    memcpy(p->text, policy, strlen(policy) + 1);
    sl_engine_prepare_named_class(w->gen->engine, policy, cmd->argv[2], cmd->argl[2], true, 1,
                                  cmd->argc == 5 ? cls : NULL, &p->v);
    decide(x, p);
}

void sl__resp_cmd_settle(resp_ctx *x) { cmd_token(x, 1); }
void sl__resp_cmd_release(resp_ctx *x) { cmd_token(x, 0); }
