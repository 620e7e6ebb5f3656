/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_cmds.c -- the RESP command table and its dispatch: every command listed once (name,
 * arity, handler, role, reply room), and what all handlers share (errors, arguments, the
 * continuation and its reply buffer). The handlers live by concern beside it: resp_sl.c
 * (SL.* decisions and tokens), resp_sl_admin.c (SL.RESET, SL.CLOCK, SL.OVERRIDE),
 * resp_throttle.c (CL.THROTTLE), resp_base.c (Redis's own commands and AUTH), resp_batch.c
 * (pipelined SL.CHECK decided together).
 * Replies are written straight into the connection's output buffer; the decision
 * commands allocate nothing and read the server clock once.
 */
#include <stdio.h>
#include <string.h>

#include "api/resp/resp_cmds.h"

void sl__resp_err_arity(resp_ctx *x) {
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

/* Copies argument i into a NUL-terminated buffer (policy names, tokens). */
int sl__resp_arg_cstr(const sl_resp_cmd *cmd, size_t i, char *buf, size_t len) {
    if (i >= cmd->argc || cmd->argl[i] >= len) return -1;
    memcpy(buf, cmd->argv[i], cmd->argl[i]);
    buf[cmd->argl[i]] = '\0';
    return 0;
}

/* Runs `fn` writing one reply into c's output (the continuations' replies: the handler's
 * own buffer may be gone). */
void sl__resp_with_wbuf(sl_conn *c, size_t need, void (*fn)(sl_conn *c, sl_wbuf *wb, void *arg),
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
void sl__resp_finish(sl_pending *p, int rc, bool later, size_t need,
                     void (*fn)(sl_conn *c, sl_wbuf *wb, void *arg)) {
    p->rc = rc;
    sl__resp_with_wbuf(p->c, need, fn, p);
    if (later) sl_conn_resume(p->c);
}

bool sl__resp_unknown_policy(sl_wbuf *wb, int rc, const sl_verdict *v, const char *policy) {
    if (rc != SLUICE_ENOTFOUND || v->action != SL_ERROR) return false;
    char m[320];
    snprintf(m, sizeof(m), "ERR unknown policy '%.100s'", policy ? policy : "");
    sl_resp_error(wb, m);
    return true;
}

/* A continuation for this command, or an error reply when the worker has too many
 * waiting. The handler's buffer is committed first: the answer may come before the
 * handler returns, and must follow what the handler wrote. */
sl_pending *sl__resp_take(resp_ctx *x, sl_pending_fn finish) {
    sl_pending *p = sl_pending_get(x->c->w, x->c, finish);
    if (p == NULL) {
        sl_resp_error(&x->wb, "ERR too many requests are waiting for the store");
        return NULL;
    }
    sl_conn_commit(x->c, &x->wb);
    x->handed = true;
    return p;
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
    CMD("SL.CHECK", 3, 8, sl__resp_cmd_check, ROLE_DECISION, 0),
    CMD("SL.PEEK", 3, 4, sl__resp_cmd_peek, ROLE_DECISION, 0),
    CMD("SL.CHECKREQ", 1, 0, sl__resp_cmd_checkreq, ROLE_DECISION, 0),
    CMD("SL.SETTLE", 3, 4, sl__resp_cmd_settle, ROLE_DECISION, 0),
    CMD("SL.ACQUIRE", 3, 5, sl__resp_cmd_acquire, ROLE_DECISION, 0),
    CMD("SL.RELEASE", 2, 6, sl__resp_cmd_release, ROLE_DECISION, 0),
    CMD("SL.PASS", 3, 3, sl__resp_cmd_pass, ROLE_DECISION, 0),
    CMD("SL.EXPLAIN", 1, 0, sl__resp_cmd_explain, ROLE_DECISION, 0),
    CMD("SL.RESET", 3, 3, sl__resp_cmd_reset, ROLE_ADMIN, 0),
    CMD("SL.CLOCK", 1, 0, sl__resp_cmd_clock, ROLE_ADMIN, 0),
    CMD("SL.OVERRIDE", 1, 0, sl__resp_cmd_override, ROLE_ADMIN, 16384), /* its JSON */
    CMD("CL.THROTTLE", 1, 0, sl__resp_cmd_throttle, ROLE_DECISION, 0),
    CMD("PING", 1, 2, sl__resp_cmd_ping, ROLE_BASE, 0),
    CMD("ECHO", 2, 2, sl__resp_cmd_echo, ROLE_BASE, 0),
    CMD("QUIT", 1, 0, sl__resp_cmd_quit, ROLE_BASE, 0),
    CMD("HELLO", 1, 0, sl__resp_cmd_hello, ROLE_BASE, 0),
    CMD("CONFIG", 1, 0, sl__resp_cmd_config, ROLE_BASE, 0),
    CMD("COMMAND", 1, 0, sl__resp_cmd_command, ROLE_BASE, 0),
    CMD("INFO", 1, 0, sl__resp_cmd_info, ROLE_BASE, 0),
    CMD("CLIENT", 1, 0, sl__resp_cmd_client, ROLE_BASE, 0),
    CMD("SELECT", 2, 2, sl__resp_cmd_select, ROLE_BASE, 0),
    CMD("AUTH", 2, 3, sl__resp_cmd_auth, ROLE_BASE, 0),
    CMD("RESET", 1, 0, sl__resp_cmd_reset_conn, ROLE_BASE, 0),
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
    else if (cmd->argc < rc->min || (rc->max && cmd->argc > rc->max)) sl__resp_err_arity(&x);
    else rc->fn(&x);
    if (x.handed) return; /* committed before the decision; its reply is the continuation's */
    if (x.wb.overflow) {
        /* cannot happen with the reserve above; never send half a reply */
        sl_wbuf_init(&x.wb, c->wbuf + c->wlen, c->wcap - c->wlen);
        sl_resp_error(&x.wb, "ERR reply too large");
    }
    sl_conn_commit(c, &x.wb);
}
