/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_cmds.c -- the RESP commands: SL.* decisions, CL.THROTTLE (redis-cell's reply and
 * rounding), and the base commands redis-cli, redis-benchmark and redis-py send
 * (PING, ECHO, HELLO, QUIT, CONFIG GET, COMMAND, INFO, CLIENT, SELECT).
 * Replies are written straight into the connection's output buffer; the decision
 * commands allocate nothing and read the server clock once.
 * Times in SL.* replies are milliseconds, rounded up (waiting that long is enough).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "engine/explain.h"
#include "server/observe.h"
#include "api/admin/overrides.h"
#include "server/pending.h"
#include "server/server.h"

#define REPLY_RESERVE 4096

typedef struct resp_ctx {
    sl_conn *c;
    const sl_resp_cmd *cmd;
    sl_wbuf wb;
    bool handed; /* the reply is written by a continuation, not into wb */
} resp_ctx;

static int64_t ceil_ms(int64_t ns) {
    if (ns <= 0) return ns < 0 ? -1 : 0;
    return (ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS;
}

static void err_arity(resp_ctx *x) {
    char m[160];
    int n = (int)(x->cmd->argl[0] < 40 ? x->cmd->argl[0] : 40);
    char name[41];
    for (int i = 0; i < n; i++) {
        char ch = x->cmd->argv[0][i];
        name[i] = (char)((ch >= 'A' && ch <= 'Z') ? ch + 32 : ch);
    }
    name[n] = '\0';
    snprintf(m, sizeof(m), "ERR wrong number of arguments for '%s' command", name);
    sl_resp_error(&x->wb, m);
}

static void err_unknown(resp_ctx *x) {
    char m[700];
    sl_wbuf w;
    sl_wbuf_init(&w, m, sizeof(m) - 1);
    sl_wbuf_printf(&w, "ERR unknown command '%.*s', with args beginning with: ",
                   (int)(x->cmd->argl[0] > 128 ? 128 : x->cmd->argl[0]), x->cmd->argv[0]);
    for (size_t i = 1; i < x->cmd->argc && i < 4 && !w.overflow; i++)
        sl_wbuf_printf(&w, "'%.*s' ", (int)(x->cmd->argl[i] > 64 ? 64 : x->cmd->argl[i]),
                       x->cmd->argv[i]);
    if (w.overflow) w.len = w.cap;
    m[w.len] = '\0';
    sl_resp_error(&x->wb, m);
}

/* Whether `given` is the admin token, in time independent of where they differ. */
static bool token_ok(const char *tok, const char *given, size_t len) {
    size_t n = strlen(tok);
    unsigned char d = (unsigned char)(n != len);
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(tok[i] ^ (i < len ? given[i] : 0));
    return d == 0;
}

/*
 * Commands that change more than the caller's own decision (SL.RESET erases anyone's
 * counters, SL.CLOCK moves time for everyone) need the admin token when one is set:
 * `AUTH <token>` or `AUTH <user> <token>` (redis-cli -a, any Redis client), or HELLO's
 * AUTH. Decisions, settles and releases carry their own authority (a key, a MAC'd token).
 */
/* Whether any admin token is configured (admin.token, the command line's, admin.tokens). */
static bool auth_required(const sl_gen *g) {
    return g->admin_token[0] != '\0' || sl_config_settings(g->cfg)->n_admin_tokens > 0;
}

/* A keyed hash of an admin token under a per-process random key: what a connection keeps
 * of the token it authenticated with (never the token itself). */
static sl_hash_key auth_key;
static pthread_once_t auth_once = PTHREAD_ONCE_INIT;
static void auth_key_init(void) {
    if (sl_hash_random_key(&auth_key) != 0) auth_key = (sl_hash_key){UINT64_C(0x6175746873616c74), 0};
}

static void auth_tag(const char *tok, size_t len, uint64_t out[2]) {
    pthread_once(&auth_once, auth_key_init);
    sl_hash128 h = sl_siphash128(&auth_key, tok, len, 2, 4);
    out[0] = h.lo;
    out[1] = h.hi;
}

/* Whether the token the connection authenticated with is one in force now. */
static bool auth_in_force(const sl_gen *g, const uint64_t tag[2]) {
    const sl_settings *st = sl_config_settings(g->cfg);
    uint64_t t[2];
    bool ok = false;
    if (g->admin_token[0] != '\0') {
        auth_tag(g->admin_token, strlen(g->admin_token), t);
        ok |= t[0] == tag[0] && t[1] == tag[1];
    }
    for (unsigned i = 0; i < st->n_admin_tokens; i++) {
        auth_tag(st->admin_tokens[i].token, strlen(st->admin_tokens[i].token), t);
        ok |= t[0] == tag[0] && t[1] == tag[1];
    }
    return ok;
}

/* Why at each command, against the tokens of the generation in force: AUTH happened
 * under the config of its time, and a reload that removes or changes a token must end
 * what it allowed on connections already open (HTTP checks each request's header). */
static bool authorized(resp_ctx *x) {
    const sl_gen *g = x->c->w->gen;
    if (!auth_required(g)) return true;
    if (x->c->authed && auth_in_force(g, x->c->auth_tag)) return true;
    if (x->c->authed) {
        x->c->authed = false;
        sl_resp_error(&x->wb, "NOAUTH the token this connection authenticated with is no longer in "
                              "force (a reload changed the admin tokens): AUTH again");
        return false;
    }
    sl_resp_error(&x->wb, "NOAUTH Authentication required.");
    return false;
}

/* AUTH [user] password, or HELLO's AUTH user password: true when accepted (reply
 * written only on failure, or when `reply_ok`). */
static bool do_auth(resp_ctx *x, size_t at, size_t n, bool reply_ok) {
    const sl_gen *g = x->c->w->gen;
    const char *tok = g->admin_token;
    const sl_settings *st = sl_config_settings(g->cfg);
    const sl_resp_cmd *cmd = x->cmd;
    if (!auth_required(g)) {
        sl_resp_error(&x->wb, "ERR AUTH <password> called without any password configured for the "
                              "default user. Are you sure your configuration is correct?");
        return false;
    }
    size_t pw = at + n - 1; /* the password is the last argument; a user name is ignored */
    bool ok = tok[0] != '\0' && token_ok(tok, cmd->argv[pw], cmd->argl[pw]);
    if (ok) snprintf(x->c->auth_name, sizeof(x->c->auth_name), "admin");
    for (unsigned i = 0; i < st->n_admin_tokens; i++) /* named tokens (admin.tokens) too */
        if (token_ok(st->admin_tokens[i].token, cmd->argv[pw], cmd->argl[pw]) && !ok) {
            ok = true;
            snprintf(x->c->auth_name, sizeof(x->c->auth_name), "%s", st->admin_tokens[i].name);
        }
    if (!ok) {
        x->c->authed = false;
        sl_resp_error(&x->wb, "WRONGPASS invalid username-password pair or user is disabled.");
        return false;
    }
    x->c->authed = true;
    auth_tag(cmd->argv[pw], cmd->argl[pw], x->c->auth_tag);
    if (reply_ok) sl_resp_simple(&x->wb, "OK");
    return true;
}

/* Copies argument i into a NUL-terminated buffer (policy names, tokens). */
static int arg_cstr(const sl_resp_cmd *cmd, size_t i, char *buf, size_t len) {
    if (i >= cmd->argc || cmd->argl[i] >= len) return -1;
    memcpy(buf, cmd->argv[i], cmd->argl[i]);
    buf[cmd->argl[i]] = '\0';
    return 0;
}

/* Runs `fn` writing one reply into c's output (the continuations' replies: the handler's
 * own buffer may be gone). */
static void with_wbuf(sl_conn *c, size_t need, void (*fn)(sl_conn *c, sl_wbuf *wb, void *arg),
                      void *arg) {
    if (sl_conn_reserve(c, need) != 0) {
        c->close_after = true;
        return;
    }
    sl_wbuf wb;
    sl_conn_wbuf(c, &wb);
    fn(c, &wb, arg);
    if (wb.overflow) { /* cannot happen with the reserve above; never send half a reply */
        sl_conn_wbuf(c, &wb);
        sl_resp_error(&wb, "ERR reply too large");
    }
    sl_conn_commit(c, &wb);
}

/* How an SL.CHECK is answered: the full reply (a map of named fields), or, with a
 * trailing COMPACT argument, five integers as CL.THROTTLE answers (limited, limit,
 * remaining, retry_after_ms (-1 when admitted), reset_after_ms): a client that reads
 * fields by position parses less, and the reply is a fifth of the bytes. */
typedef enum reply_form { REPLY_FULL = 0, REPLY_COMPACT = 1 } reply_form;

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
static void verdict_reply(sl_conn *c, sl_wbuf *wb, int rc, sl_verdict *v, const char *policy, reply_form form) {
    sl_worker *w = c->w;
    sl_server_count_verdict(w, rc, v);
    if (rc == SLUICE_ENOTFOUND && v->action == SL_ERROR) {
        char m[320];
        snprintf(m, sizeof(m), "ERR unknown policy '%.100s'", policy ? policy : "");
        sl_resp_error(wb, m);
        return;
    }
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
    verdict_reply(c, wb, p->rc, &p->v, p->text, (reply_form)p->op);
}

static void finish_verdict(sl_pending *p, int rc, bool later) {
    p->rc = rc;
    with_wbuf(p->c, REPLY_RESERVE + SL_TOKEN_MAX, write_verdict, p);
    if (later) sl_conn_resume(p->c);
}

/* A continuation for this command, or an error reply when the worker has too many
 * waiting. The handler's buffer is committed first: the answer may come before the
 * handler returns, and must follow what the handler wrote. */
static sl_pending *take(resp_ctx *x, sl_pending_fn finish) {
    sl_pending *p = sl_pending_get(x->c->w, x->c, finish);
    if (p == NULL) {
        sl_resp_error(&x->wb, "ERR too many requests are waiting for the store");
        return NULL;
    }
    sl_conn_commit(x->c, &x->wb);
    x->handed = true;
    return p;
}

static void decide(resp_ctx *x, sl_pending *p) {
    sl_worker *w = x->c->w;
    sl_pending_submit(p);
    sl_engine_decide(w->gen->engine, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

/* A trailing COMPACT (SL.CHECK, SL.PEEK): the compact reply; *argc without it. */
static reply_form reply_form_of(const sl_resp_cmd *cmd, size_t *argc) {
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
    reply_form form = pass ? REPLY_FULL : reply_form_of(cmd, &argc);
    if (pass) argc = cmd->argc;
    if (argc < 3 || (peek && argc != 3) || argc % 2 == 0 || argc > 7) {
        err_arity(x);
        return;
    }
    if (arg_cstr(cmd, 1, policy, sizeof(policy)) != 0) {
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
        } else if (sl_resp_arg_is(cmd, i, "CLASS") && !has_cls && arg_cstr(cmd, i + 1, cls, sizeof(cls)) == 0) {
            has_cls = true;
        } else {
            sl_resp_error(&x->wb, "ERR syntax error (expected [COST n] [CLASS name])");
            return;
        }
    }
    sl_pending *p = take(x, pass ? finish_pass : finish_verdict);
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

static void cmd_check(resp_ctx *x) { cmd_check_mode(x, CHECK_DECIDE); }
static void cmd_peek(resp_ctx *x) { cmd_check_mode(x, CHECK_PEEK); }
static void cmd_pass(resp_ctx *x) { cmd_check_mode(x, CHECK_PASS); }

static void write_pass(sl_conn *c, sl_wbuf *wb, void *arg) {
    (void)c;
    sl_pending *p = arg;
    if (p->rc == SLUICE_ENOTFOUND && p->v.action == SL_ERROR) {
        char m[320];
        snprintf(m, sizeof(m), "ERR unknown policy '%.100s'", p->text);
        sl_resp_error(wb, m);
    } else if (p->rc != 0) {
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
    p->rc = rc;
    with_wbuf(p->c, 512, write_pass, p);
    if (later) sl_conn_resume(p->c);
}

/* ---- pipelined SL.CHECK: decided together -------------------------------------------- */

typedef struct rb_entry {
    char policy[256];
    const char *key; /* in the connection's read buffer: valid until the batch is flushed */
    size_t key_len;
    bool has_cost;
    uint64_t cost;
    reply_form form;
} rb_entry;

struct sl_resp_batch {
    size_t n;
    rb_entry e[SL_ENGINE_BATCH];
    sl_verdict v[SL_ENGINE_BATCH];
    sl_verdict *vp[SL_ENGINE_BATCH];
    int rc[SL_ENGINE_BATCH];
};

sl_resp_batch *sl_resp_batch_create(void) {
    sl_resp_batch *b = calloc(1, sizeof(*b));
    if (b != NULL)
        for (size_t i = 0; i < SL_ENGINE_BATCH; i++) b->vp[i] = &b->v[i];
    return b;
}

void sl_resp_batch_destroy(sl_resp_batch *b) { free(b); }

/*
 * Why pipelined checks wait for each other: a client that pipelines 32 SL.CHECK gets
 * them decided in one pass over the store, each key's memory fetched while the previous
 * ones are decided (sl_engine_decide_batch), and their replies written together. Only
 * with a store that answers at once, and only for the plain forms (SL.CHECK policy key
 * [COST n], SL.PEEK policy key); anything else is handled in its place after the batch.
 */
bool sl_resp_batch_take(sl_conn *c, const sl_resp_cmd *cmd) {
    sl_worker *w = c->w;
    sl_resp_batch *b = w->rbatch;
    if (b == NULL || !sl_engine_ops(w->gen->engine)->immediate || cmd->inline_form) return false;
    bool peek = false;
    if (cmd->argl[0] == 8 && sl_resp_arg_is(cmd, 0, "SL.CHECK")) peek = false;
    else if (cmd->argl[0] == 7 && sl_resp_arg_is(cmd, 0, "SL.PEEK")) peek = true;
    else return false;
    size_t argc;
    reply_form form = reply_form_of(cmd, &argc);
    if (!(argc == 3 || (argc == 5 && !peek))) return false;
    if (cmd->argl[1] >= sizeof(b->e[0].policy)) return false;
    rb_entry *e = &b->e[b->n];
    e->has_cost = peek;
    e->cost = 0;
    if (argc == 5) {
        int64_t v;
        if (!sl_resp_arg_is(cmd, 3, "COST") || sl_resp_arg_i64(cmd, 4, &v) != 0 || v < 0) return false;
        e->has_cost = true;
        e->cost = (uint64_t)v;
    }
    if (b->n == SL_ENGINE_BATCH) sl_resp_batch_flush(c);
    e = &b->e[b->n];
    memcpy(e->policy, cmd->argv[1], cmd->argl[1]);
    e->policy[cmd->argl[1]] = '\0';
    e->key = cmd->argv[2];
    e->key_len = cmd->argl[2];
    e->form = form;
    if (argc == 5) {
        int64_t v = 0;
        sl_resp_arg_i64(cmd, 4, &v);
        e->has_cost = true;
        e->cost = (uint64_t)v;
    } else {
        e->has_cost = peek;
        e->cost = 0;
    }
    b->n++;
    return true;
}

static void write_batch_reply(sl_conn *c, sl_wbuf *wb, void *arg) {
    size_t i = *(size_t *)arg;
    sl_resp_batch *b = c->w->rbatch;
    verdict_reply(c, wb, b->rc[i], &b->v[i], b->e[i].policy, b->e[i].form);
}

void sl_resp_batch_flush(sl_conn *c) {
    sl_worker *w = c->w;
    sl_resp_batch *b = w->rbatch;
    if (b == NULL || b->n == 0) return;
    const sl_engine *e = w->gen->engine;
    for (size_t i = 0; i < b->n; i++)
        sl_engine_prepare_named(e, b->e[i].policy, b->e[i].key, b->e[i].key_len, b->e[i].has_cost,
                                b->e[i].cost, &b->v[i]);
    sl_engine_decide_batch(e, w->lane, b->vp, b->n, sl_worker_now(w), b->rc);
    for (size_t i = 0; i < b->n; i++) with_wbuf(c, REPLY_RESERVE + SL_TOKEN_MAX, write_batch_reply, &i);
    b->n = 0;
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
static void cmd_checkreq(resp_ctx *x) {
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
    sl_pending *p = take(x, finish_verdict);
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
    with_wbuf(p->c, o.n + 64, write_explain, &o);
    free(json);
    if (later) sl_conn_resume(p->c);
}

/* SL.EXPLAIN <policy> <key> [COST n] (SL.CHECK's form) or SL.EXPLAIN [METHOD m] [PATH p]
 * ... (SL.CHECKREQ's): a JSON bulk string saying why the answer would be what it is.
 * Nothing is consumed or counted. */
static void cmd_explain(resp_ctx *x) {
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
        if (arg_cstr(cmd, 1, policy, sizeof(policy)) != 0 ||
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
    sl_pending *p = take(x, finish_explain);
    if (p == NULL) {
        sl_explain_free(ex);
        return;
    }
    if (sl_obs_explain_start(p, ex) != 0) {
        sl_explain_free(ex);
        sl_pending_put(p);
        xout o = {NULL, 1};
        with_wbuf(x->c, 128, write_explain, &o);
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
    with_wbuf(p->c, 256, write_token, &rc);
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
        err_arity(x);
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
        sl_pending *p = take(x, finish_token);
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
    sl_pending *p = take(x, finish_token);
    if (p == NULL) return;
    sl_pending_submit(p);
    sl_engine_token_sample(w->gen->engine, w->lane, cmd->argv[1], cmd->argl[1],
                           settle ? SL_TOKEN_SETTLE : SL_TOKEN_RELEASE, (uint64_t)actual, has_lat, lat,
                           outcome, sl_worker_now(w), &p->v, sl_pending_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

/* SL.ACQUIRE <policy> <key> [CLASS c] */
static void cmd_acquire(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    char policy[256], cls[64];
    if (cmd->argc != 3 && cmd->argc != 5) {
        err_arity(x);
        return;
    }
    if (arg_cstr(cmd, 1, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR policy name too long");
        return;
    }
    if (cmd->argc == 5 && (!sl_resp_arg_is(cmd, 3, "CLASS") || arg_cstr(cmd, 4, cls, sizeof(cls)) != 0)) {
        sl_resp_error(&x->wb, "ERR syntax error (expected SL.ACQUIRE policy key [CLASS name])");
        return;
    }
    sl_pending *p = take(x, finish_verdict);
    if (p == NULL) return;
    p->op = REPLY_FULL;
    memcpy(p->text, policy, strlen(policy) + 1);
    sl_engine_prepare_named_class(w->gen->engine, policy, cmd->argv[2], cmd->argl[2], true, 1,
                                  cmd->argc == 5 ? cls : NULL, &p->v);
    decide(x, p);
}

static void write_reset(sl_conn *c, sl_wbuf *wb, void *arg) {
    (void)c;
    sl_pending *p = arg;
    if (p->rc == SLUICE_ENOTFOUND && p->v.action == SL_ERROR) {
        char m[320];
        snprintf(m, sizeof(m), "ERR unknown policy '%.100s'", p->text);
        sl_resp_error(wb, m);
    } else if (p->rc != SLUICE_OK) {
        sl_resp_error(wb, p->rc == SLUICE_ESTORE ? "ERR the shared store is unreachable"
                                                 : "ERR reset failed");
    } else {
        sl_resp_int(wb, (int64_t)p->v.n);
    }
}

static void finish_reset(sl_pending *p, int rc, bool later) {
    p->rc = rc;
    with_wbuf(p->c, 512, write_reset, p);
    if (later) sl_conn_resume(p->c);
}

/* SL.RESET <policy> <key>: forgets the key under every window of the policy. Replies
 * with the number of windows reset. */
static void cmd_reset(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    char policy[256];
    if (cmd->argc != 3) {
        err_arity(x);
        return;
    }
    if (arg_cstr(cmd, 1, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR policy name too long");
        return;
    }
    if (!authorized(x)) return;
    sl_pending *p = take(x, finish_reset);
    if (p == NULL) return;
    memcpy(p->text, policy, strlen(policy) + 1);
    const sl_engine *e = w->gen->engine;
    sl_engine_prepare_named(e, policy, cmd->argv[2], cmd->argl[2], true, 0, &p->v);
    sl_pending_submit(p);
    sl_engine_reset(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

static void cmd_clock(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_server *s = x->c->w->srv;
    if (!s->opt.test_clock) {
        sl_resp_error(&x->wb, "ERR SL.CLOCK needs a server started with --test-clock");
        return;
    }
    if (!authorized(x)) return;
    int64_t v = 0;
    int rc = 0;
    /* range-checked before any conversion (sluice_clock_*_ms) */
    if (cmd->argc == 3 && sl_resp_arg_is(cmd, 1, "SET")) {
        if (sl_resp_arg_i64(cmd, 2, &v) != 0) goto bad;
        rc = sluice_clock_set_wall_ms(s->clock, v);
    } else if (cmd->argc == 3 && sl_resp_arg_is(cmd, 1, "ADVANCE")) {
        if (sl_resp_arg_i64(cmd, 2, &v) != 0 || v < 0) goto bad;
        rc = sluice_clock_advance_ms(s->clock, v);
    } else if (cmd->argc == 2 && sl_resp_arg_is(cmd, 1, "GET")) {
        rc = 0;
    } else {
        goto bad;
    }
    if (rc == SLUICE_ERANGE) {
        sl_resp_error(&x->wb, "ERR out of range: the clock accepts 1970-01-01 to 2200-01-01 UTC "
                              "(0 to 7258118400000 ms); it did not move");
        return;
    }
    if (rc != 0) goto bad;
    x->c->w->have_batch_now = false; /* later commands of this batch see the new time */
    sl_resp_int(&x->wb, sluice_clock_now(s->clock).wall_ns / SLUICE_NS_PER_MS);
    return;
bad:
    sl_resp_error(&x->wb, "ERR syntax: SL.CLOCK SET <unix_ms> | SL.CLOCK ADVANCE <ms> | SL.CLOCK GET");
}

/* ---- SL.OVERRIDE SET|GET|DEL <policy> <key> [JSON] (per-key overrides, overrides.c) ----
 * The key is the admin API's path form (parts joined by '|', each percent-encoded). */
static void cmd_override(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_server *s = x->c->w->srv;
    if (!authorized(x)) return;
    bool set = cmd->argc == 5 && sl_resp_arg_is(cmd, 1, "SET");
    bool get = cmd->argc == 4 && sl_resp_arg_is(cmd, 1, "GET");
    bool del = cmd->argc == 4 && sl_resp_arg_is(cmd, 1, "DEL");
    char policy[256];
    if ((!set && !get && !del) || arg_cstr(cmd, 2, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR syntax: SL.OVERRIDE SET <policy> <key> <json> | SL.OVERRIDE "
                              "GET <policy> <key> | SL.OVERRIDE DEL <policy> <key>");
        return;
    }
    const char *who = auth_required(x->c->w->gen) ? x->c->auth_name : "";
    if (!sl_admin_may(x->c->w->gen, who, set || del ? SL_ADMIN_OVERRIDES : SL_ADMIN_READ)) {
        sl_resp_error(&x->wb, "NOPERM this token may not do that with overrides");
        return;
    }
    const sl_engine *e = x->c->w->gen->engine;
    sluice_time now = sluice_clock_now(s->clock);
    sl_ovr_res res = {0};
    json_t *out = NULL;
    if (set) {
        json_error_t jerr;
        json_t *body = json_loadb(cmd->argv[4], cmd->argl[4], 0, &jerr);
        bool created = false;
        if (body == NULL) {
            snprintf(res.detail, sizeof(res.detail), "the JSON does not parse: %s", jerr.text);
            res.status = 400;
        } else if (sl_ovr_set(s, e, policy, cmd->argv[3], cmd->argl[3], NULL, body, who, now, &out,
                              &created, &res) == 0) {
            res.status = 0;
        }
        json_decref(body);
    } else if (get) {
        out = sl_ovr_get_json(s, e, policy, cmd->argv[3], cmd->argl[3], NULL, now, &res);
    } else if (sl_ovr_remove(s, e, policy, cmd->argv[3], cmd->argl[3], NULL, who, now, &res) == 0) {
        sl_resp_int(&x->wb, 1);
        return;
    }
    if (out == NULL) {
        if (res.status == 404 && get) {
            sl_resp_null(&x->wb, x->c->proto);
        } else if (res.status == 404 && del) {
            sl_resp_int(&x->wb, 0);
        } else {
            char m[420];
            snprintf(m, sizeof(m), "ERR %s%s%s", res.field[0] ? res.field : "", res.field[0] ? ": " : "",
                     res.detail);
            for (char *c = m; *c; c++)
                if (*c == '\r' || *c == '\n') *c = ' ';
            sl_resp_error(&x->wb, m);
        }
        return;
    }
    char *txt = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (txt == NULL) {
        sl_resp_error(&x->wb, "ERR out of memory");
        return;
    }
    sl_resp_bulk_str(&x->wb, txt);
    free(txt);
}

static void write_throttle(sl_conn *c, sl_wbuf *wb, void *arg) {
    sl_pending *p = arg;
    sl_worker *w = c->w;
    sl_server *s = w->srv;
    if (p->rc != 0) {
        char m[128];
        snprintf(m, sizeof(m), "ERR %s", sluice_strerror(p->rc));
        sl_resp_error(wb, m);
        sl_server_count(w, s->cell_slot, SL_MET_ERROR);
        return;
    }
    const sluice_result *r = &p->sres.r[0];
    sl_server_count(w, s->cell_slot, r->allowed ? SL_MET_ALLOWED : SL_MET_LIMITED);
    sl_resp_array(wb, 5);
    sl_resp_int(wb, r->allowed ? 0 : 1);
    sl_resp_int(wb, (int64_t)r->limit);
    sl_resp_int(wb, (int64_t)r->remaining);
    sl_resp_int(wb, (r->allowed || r->retry_after_ns == SLUICE_NEVER) ? -1 : sl_cell_round_s(r->retry_after_ns));
    sl_resp_int(wb, sl_cell_round_s(r->reset_after_ns));
}

static void finish_throttle(sl_pending *p, int rc, bool later) {
    p->rc = rc;
    with_wbuf(p->c, 256, write_throttle, p);
    if (later) sl_conn_resume(p->c);
}

/* CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>] (SPECS §5): one
 * GCRA item straight to the store (no policy). */
static void cmd_throttle(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    sl_server *s = w->srv;
    if (cmd->argc != 5 && cmd->argc != 6) {
        sl_resp_error(&x->wb, "ERR Usage: CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]");
        return;
    }
    int64_t burst, count, period, qty = 1;
    if (sl_resp_arg_i64(cmd, 2, &burst) != 0 || sl_resp_arg_i64(cmd, 3, &count) != 0 ||
        sl_resp_arg_i64(cmd, 4, &period) != 0 || (cmd->argc == 6 && sl_resp_arg_i64(cmd, 5, &qty) != 0)) {
        sl_resp_error(&x->wb, "ERR value is not an integer or out of range");
        return;
    }
    if (count == 0 || period == 0) {
        sl_resp_error(&x->wb, "ERR Zero rates are not supported");
        return;
    }
    if (burst < 0 || count < 0 || period < 0 || qty < 0 || period > INT64_MAX / SLUICE_NS_PER_S ||
        burst == INT64_MAX) {
        sl_resp_error(&x->wb, "ERR value is not an integer or out of range");
        return;
    }
    int e = 0, why = 0;
    const sluice_limiter *lim = sl_cell_get(s, x->c->peer_ip, burst, count, period,
                                            sl_worker_now(w).mono_ns, &e, &why);
    if (lim == NULL) {
        char m[240];
        if (why == 1)
            snprintf(m, sizeof(m), "ERR this client has its share of CL.THROTTLE parameter sets in use "
                     "(%d; a set it has not used for %d s leaves its share): a new set is refused",
                     SL_CELL_SHARE, SL_CELL_IDLE_S);
        else if (why == 2)
            snprintf(m, sizeof(m), "ERR this process has made its %d CL.THROTTLE parameter sets "
                     "(the sets made answer on; a restart clears them): a new set is refused", SL_CELL_MAX);
        else
            snprintf(m, sizeof(m), "ERR rate not supported (period/count below 1 ns or burst too large)");
        sl_resp_error(&x->wb, m);
        sl_server_count(w, s->cell_slot, SL_MET_ERROR);
        return;
    }
    if (cmd->argl[1] > sizeof(((sl_pending *)0)->v.keys)) {
        sl_resp_error(&x->wb, "ERR key too long");
        return;
    }
    sl_pending *p = take(x, finish_throttle);
    if (p == NULL) return;
    memcpy(p->v.keys, cmd->argv[1], cmd->argl[1]); /* the key must outlive the command */
    p->item = (sl_sitem){.lim = lim, .key = p->v.keys, .key_len = cmd->argl[1], .cost = (uint64_t)qty};
    sl_pending_submit(p);
    sl_engine_ops(w->gen->engine)->decide(w->lane, &p->item, 1, 0, sl_worker_now(w),
                                          sl_pending_store_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

/* ---- base protocol ---- */

static void cmd_hello(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    int proto = x->c->proto;
    if (cmd->argc >= 2) {
        int64_t v;
        if (sl_resp_arg_i64(cmd, 1, &v) != 0) {
            sl_resp_error(&x->wb, "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (v != 2 && v != 3) {
            sl_resp_error(&x->wb, "NOPROTO unsupported protocol version");
            return;
        }
        for (size_t i = 2; i < cmd->argc;) {
            if (sl_resp_arg_is(cmd, i, "AUTH") && i + 2 < cmd->argc) {
                /* with an admin token, HELLO's credentials must be it; without one any
                 * are accepted (there is no user to check them against) */
                if (auth_required(x->c->w->gen) && !do_auth(x, i + 1, 2, false)) return;
                i += 3;
            } else if (sl_resp_arg_is(cmd, i, "SETNAME") && i + 1 < cmd->argc) {
                i += 2;
            } else {
                char m[160];
                snprintf(m, sizeof(m), "ERR Syntax error in HELLO option '%.64s'", cmd->argv[i]);
                sl_resp_error(&x->wb, m);
                return;
            }
        }
        proto = (int)v;
    }
    x->c->proto = proto;
    sl_resp_map(&x->wb, proto, 7);
    sl_resp_bulk_str(&x->wb, "server");
    sl_resp_bulk_str(&x->wb, "sluice");
    sl_resp_bulk_str(&x->wb, "version");
    sl_resp_bulk_str(&x->wb, sluice_version());
    sl_resp_bulk_str(&x->wb, "proto");
    sl_resp_int(&x->wb, proto);
    sl_resp_bulk_str(&x->wb, "id");
    sl_resp_int(&x->wb, (int64_t)(uintptr_t)x->c % 1000000);
    sl_resp_bulk_str(&x->wb, "mode");
    sl_resp_bulk_str(&x->wb, "standalone");
    sl_resp_bulk_str(&x->wb, "role");
    sl_resp_bulk_str(&x->wb, "master");
    sl_resp_bulk_str(&x->wb, "modules");
    sl_resp_array(&x->wb, 0);
}

static void cmd_config(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc < 2) {
        err_arity(x);
        return;
    }
    if (!sl_resp_arg_is(cmd, 1, "GET")) {
        if (sl_resp_arg_is(cmd, 1, "SET") || sl_resp_arg_is(cmd, 1, "RESETSTAT")) {
            sl_resp_simple(&x->wb, "OK");
            return;
        }
        char m[160];
        snprintf(m, sizeof(m), "ERR unknown subcommand '%.64s'. Try CONFIG HELP.", cmd->argv[1]);
        sl_resp_error(&x->wb, m);
        return;
    }
    if (cmd->argc < 3) {
        err_arity(x);
        return;
    }
    /* redis-benchmark asks for save and appendonly; nothing is persisted the Redis way */
    size_t pairs = 0;
    for (size_t i = 2; i < cmd->argc; i++)
        if (sl_resp_arg_is(cmd, i, "save") || sl_resp_arg_is(cmd, i, "appendonly")) pairs++;
    sl_resp_map(&x->wb, x->c->proto, pairs);
    for (size_t i = 2; i < cmd->argc; i++) {
        if (sl_resp_arg_is(cmd, i, "save")) {
            sl_resp_bulk_str(&x->wb, "save");
            sl_resp_bulk_str(&x->wb, "");
        } else if (sl_resp_arg_is(cmd, i, "appendonly")) {
            sl_resp_bulk_str(&x->wb, "appendonly");
            sl_resp_bulk_str(&x->wb, "no");
        }
    }
}

static void cmd_info(resp_ctx *x) {
    sl_server *s = x->c->w->srv;
    char b[1024];
    sluice_store_stats st;
    sluice_store_stats_get(s->store, &st);
    int n = snprintf(b, sizeof(b),
                     "# Server\r\nredis_version:7.2.0\r\nsluice_version:%s\r\nredis_mode:standalone\r\n"
                     "process_id:%ld\r\nuptime_in_seconds:%lld\r\n\r\n# Clients\r\nconnected_clients:%u\r\n"
                     "\r\n# Keyspace\r\nkeys_held:%llu\r\n",
                     sluice_version(), (long)getpid(),
                     (long long)((sluice_clock_now(s->clock).wall_ns - s->started_wall_ns) / SLUICE_NS_PER_S),
                     atomic_load(&s->nconns), (unsigned long long)st.keys);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof(b)) n = (int)sizeof(b) - 1;
    sl_resp_verbatim(&x->wb, x->c->proto, b, (size_t)n);
}

static void cmd_client(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc < 2) {
        err_arity(x);
        return;
    }
    if (sl_resp_arg_is(cmd, 1, "SETNAME") && cmd->argc >= 3) {
        /* as Redis: a name would show in CLIENT LIST, one line per client */
        for (size_t i = 0; i < cmd->argl[2]; i++)
            if ((unsigned char)cmd->argv[2][i] <= ' ' || (unsigned char)cmd->argv[2][i] >= 0x7f) {
                sl_resp_error(&x->wb, "ERR Client names cannot contain spaces, newlines or special characters.");
                return;
            }
        sl_resp_simple(&x->wb, "OK");
    } else if (sl_resp_arg_is(cmd, 1, "SETINFO") || sl_resp_arg_is(cmd, 1, "SETNAME") ||
               sl_resp_arg_is(cmd, 1, "TRACKING") || sl_resp_arg_is(cmd, 1, "REPLY")) {
        sl_resp_simple(&x->wb, "OK");
    } else if (sl_resp_arg_is(cmd, 1, "GETNAME")) {
        sl_resp_null(&x->wb, x->c->proto);
    } else if (sl_resp_arg_is(cmd, 1, "ID")) {
        sl_resp_int(&x->wb, (int64_t)(uintptr_t)x->c % 1000000);
    } else {
        char m[160];
        snprintf(m, sizeof(m), "ERR unknown subcommand '%.64s'. Try CLIENT HELP.", cmd->argv[1]);
        sl_resp_error(&x->wb, m);
    }
}

static void cmd_settle(resp_ctx *x) { cmd_token(x, 1); }
static void cmd_release(resp_ctx *x) { cmd_token(x, 0); }

static void cmd_ping(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc == 2) sl_resp_bulk(&x->wb, cmd->argv[1], cmd->argl[1]);
    else sl_resp_simple(&x->wb, "PONG");
}

static void cmd_echo(resp_ctx *x) { sl_resp_bulk(&x->wb, x->cmd->argv[1], x->cmd->argl[1]); }

static void cmd_quit(resp_ctx *x) {
    sl_resp_simple(&x->wb, "OK");
    x->c->close_after = true;
}

static void cmd_command(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc >= 2 && sl_resp_arg_is(cmd, 1, "COUNT")) sl_resp_int(&x->wb, 0);
    else if (cmd->argc >= 2 && sl_resp_arg_is(cmd, 1, "DOCS")) sl_resp_map(&x->wb, x->c->proto, 0);
    else sl_resp_array(&x->wb, 0);
}

static void cmd_select(resp_ctx *x) {
    int64_t db;
    if (sl_resp_arg_i64(x->cmd, 1, &db) != 0) sl_resp_error(&x->wb, "ERR value is not an integer or out of range");
    else if (db != 0) sl_resp_error(&x->wb, "ERR DB index is out of range");
    else sl_resp_simple(&x->wb, "OK");
}

static void cmd_auth(resp_ctx *x) { do_auth(x, 1, x->cmd->argc - 1, true); }

static void cmd_reset_conn(resp_ctx *x) {
    x->c->proto = 2;
    sl_resp_simple(&x->wb, "RESET");
}

/* What a command is for (documentation, and the reply buffer it may need). */
typedef enum cmd_role {
    ROLE_DECISION, /* decides or settles: the engine's commands */
    ROLE_ADMIN,    /* changes or reads the limiter's state (overrides, reset, clock) */
    ROLE_BASE,     /* Redis's own commands, for clients and tools that expect them */
} cmd_role;

/* The commands, listed once: name, arity (argc including the name: at least min, at most
 * max, 0 for no bound; a handler checks finer forms itself, with the same error), handler,
 * role, and the reply room beyond REPLY_RESERVE. SL.CHECK first: the hot path. */
typedef struct resp_command {
    const char *name;
    uint8_t name_len;
    uint8_t min, max;
    void (*fn)(resp_ctx *x);
    cmd_role role;
    uint16_t extra;
} resp_command;

#define CMD(n, lo, hi, f, r, x) {n, sizeof(n) - 1, lo, hi, f, r, x}
static const resp_command commands[] = {
    CMD("SL.CHECK", 3, 8, cmd_check, ROLE_DECISION, 0),
    CMD("SL.PEEK", 3, 4, cmd_peek, ROLE_DECISION, 0),
    CMD("SL.CHECKREQ", 1, 0, cmd_checkreq, ROLE_DECISION, 0),
    CMD("SL.SETTLE", 3, 4, cmd_settle, ROLE_DECISION, 0),
    CMD("SL.ACQUIRE", 3, 5, cmd_acquire, ROLE_DECISION, 0),
    CMD("SL.RELEASE", 2, 6, cmd_release, ROLE_DECISION, 0),
    CMD("SL.PASS", 3, 3, cmd_pass, ROLE_DECISION, 0),
    CMD("SL.EXPLAIN", 1, 0, cmd_explain, ROLE_DECISION, 0),
    CMD("SL.RESET", 3, 3, cmd_reset, ROLE_ADMIN, 0),
    CMD("SL.CLOCK", 1, 0, cmd_clock, ROLE_ADMIN, 0),
    CMD("SL.OVERRIDE", 1, 0, cmd_override, ROLE_ADMIN, 16384), /* its JSON */
    CMD("CL.THROTTLE", 1, 0, cmd_throttle, ROLE_DECISION, 0),
    CMD("PING", 1, 2, cmd_ping, ROLE_BASE, 0),
    CMD("ECHO", 2, 2, cmd_echo, ROLE_BASE, 0),
    CMD("QUIT", 1, 0, cmd_quit, ROLE_BASE, 0),
    CMD("HELLO", 1, 0, cmd_hello, ROLE_BASE, 0),
    CMD("CONFIG", 1, 0, cmd_config, ROLE_BASE, 0),
    CMD("COMMAND", 1, 0, cmd_command, ROLE_BASE, 0),
    CMD("INFO", 1, 0, cmd_info, ROLE_BASE, 0),
    CMD("CLIENT", 1, 0, cmd_client, ROLE_BASE, 0),
    CMD("SELECT", 2, 2, cmd_select, ROLE_BASE, 0),
    CMD("AUTH", 2, 3, cmd_auth, ROLE_BASE, 0),
    CMD("RESET", 1, 0, cmd_reset_conn, ROLE_BASE, 0),
};
#undef CMD

static const resp_command *command_of(const sl_resp_cmd *cmd) {
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (commands[i].name_len == cmd->argl[0] && sl_resp_arg_is(cmd, 0, commands[i].name)) return &commands[i];
    return NULL;
}

void sl_resp_handle(sl_conn *c, const sl_resp_cmd *cmd) {
    const resp_command *rc = command_of(cmd);
    size_t need = REPLY_RESERVE + (rc ? rc->extra : 0);
    for (size_t i = 1; i < cmd->argc && i < 3; i++) need += cmd->argl[i]; /* ECHO, PING msg */
    if (sl_conn_reserve(c, need + SL_TOKEN_MAX) != 0) {
        c->close_after = true;
        return;
    }
    resp_ctx x = {.c = c, .cmd = cmd, .handed = false};
    sl_conn_wbuf(c, &x.wb);
    if (rc == NULL) err_unknown(&x);
    else if (cmd->argc < rc->min || (rc->max && cmd->argc > rc->max)) err_arity(&x);
    else rc->fn(&x);
    if (x.handed) return; /* committed before the decision; its reply is the continuation's */
    if (x.wb.overflow) {
        /* cannot happen with the reserve above; never send half a reply */
        sl_wbuf_init(&x.wb, c->wbuf + c->wlen, c->wcap - c->wlen);
        sl_resp_error(&x.wb, "ERR reply too large");
    }
    sl_conn_commit(c, &x.wb);
}
