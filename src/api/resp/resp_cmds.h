/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_cmds.h -- what the RESP command files share (private to src/api/resp): the handler's
 * context, the reply forms, the helpers every handler uses and the handlers the command
 * table (resp_cmds.c) lists. sl__ names: shared between the files of this folder only.
 */
#ifndef SLUICE_API_RESP_CMDS_H
#define SLUICE_API_RESP_CMDS_H

#include "server/pending.h"
#include "server/server.h"

#define REPLY_RESERVE 4096

typedef struct resp_ctx {
    sl_conn *c;
    const sl_resp_cmd *cmd;
    sl_wbuf wb;
    bool handed; /* the reply is written by a continuation, not into wb */
} resp_ctx;

/* How an SL.CHECK is answered: the full reply (a map of named fields), or, with a
 * trailing COMPACT argument, five integers as CL.THROTTLE answers (limited, limit,
 * remaining, retry_after_ms (-1 when admitted), reset_after_ms): a client that reads
 * fields by position parses less, and the reply is a fifth of the bytes. */
typedef enum reply_form { REPLY_FULL = 0, REPLY_COMPACT = 1 } reply_form;

/* resp_cmds.c: errors, arguments, replies written by continuations */
void sl__resp_err_arity(resp_ctx *x);
int sl__resp_arg_cstr(const sl_resp_cmd *cmd, size_t i, char *buf, size_t len);
void sl__resp_with_wbuf(sl_conn *c, size_t need, void (*fn)(sl_conn *c, sl_wbuf *wb, void *arg), void *arg);
sl_pending *sl__resp_take(resp_ctx *x, sl_pending_fn finish);
/* A continuation's end: p->rc = rc, the reply written by fn(p) in a buffer of `need`
 * bytes, and the connection resumed when the answer came later than the command. */
void sl__resp_finish(sl_pending *p, int rc, bool later, size_t need,
                     void (*fn)(sl_conn *c, sl_wbuf *wb, void *arg));
/* "ERR unknown policy '<policy>'" when rc and v say the policy is not configured: true
 * when written. */
bool sl__resp_unknown_policy(sl_wbuf *wb, int rc, const sl_verdict *v, const char *policy);

/* resp_sl.c: the decision reply, and a trailing COMPACT */
void sl__resp_verdict_reply(sl_conn *c, sl_wbuf *wb, int rc, sl_verdict *v, const char *policy, reply_form form);
reply_form sl__resp_reply_form_of(const sl_resp_cmd *cmd, size_t *argc);

/* resp_base.c: the admin token */
bool sl__resp_auth_required(const sl_gen *g);
bool sl__resp_authorized(resp_ctx *x);

/* the handlers (the table in resp_cmds.c) */
void sl__resp_cmd_check(resp_ctx *x);
void sl__resp_cmd_peek(resp_ctx *x);
void sl__resp_cmd_checkreq(resp_ctx *x);
void sl__resp_cmd_settle(resp_ctx *x);
void sl__resp_cmd_acquire(resp_ctx *x);
void sl__resp_cmd_release(resp_ctx *x);
void sl__resp_cmd_pass(resp_ctx *x);
void sl__resp_cmd_explain(resp_ctx *x);
void sl__resp_cmd_reset(resp_ctx *x);
void sl__resp_cmd_clock(resp_ctx *x);
void sl__resp_cmd_override(resp_ctx *x);
void sl__resp_cmd_throttle(resp_ctx *x);
void sl__resp_cmd_ping(resp_ctx *x);
void sl__resp_cmd_echo(resp_ctx *x);
void sl__resp_cmd_quit(resp_ctx *x);
void sl__resp_cmd_hello(resp_ctx *x);
void sl__resp_cmd_config(resp_ctx *x);
void sl__resp_cmd_command(resp_ctx *x);
void sl__resp_cmd_info(resp_ctx *x);
void sl__resp_cmd_client(resp_ctx *x);
void sl__resp_cmd_select(resp_ctx *x);
void sl__resp_cmd_auth(resp_ctx *x);
void sl__resp_cmd_reset_conn(resp_ctx *x);

#endif
