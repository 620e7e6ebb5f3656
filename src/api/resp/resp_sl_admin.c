/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_sl_admin.c -- the SL.* commands that change or read more than the caller's own
 * decision: SL.RESET (a key's counters), SL.CLOCK (the test clock), SL.OVERRIDE (per-key
 * overrides, api/admin/overrides.c). Each needs the admin token when one is set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/admin/overrides.h"
#include "api/resp/resp_cmds.h"

static void write_reset(sl_conn *c, sl_wbuf *wb, void *arg) {
    (void)c;
    sl_pending *p = arg;
    if (sl__resp_unknown_policy(wb, p->rc, &p->v, p->text)) return;
    if (p->rc != SLUICE_OK) {
        sl_resp_error(wb, p->rc == SLUICE_ESTORE ? "ERR the shared store is unreachable"
                                                 : "ERR reset failed");
    } else {
        sl_resp_int(wb, (int64_t)p->v.n);
    }
}

static void finish_reset(sl_pending *p, int rc, bool later) {
    sl__resp_finish(p, rc, later, 512, write_reset);
}

/* SL.RESET <policy> <key>: forgets the key under every window of the policy. Replies
 * with the number of windows reset. */
void sl__resp_cmd_reset(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_worker *w = x->c->w;
    char policy[256];
    if (cmd->argc != 3) {
        sl__resp_err_arity(x);
        return;
    }
    if (sl__resp_arg_cstr(cmd, 1, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR policy name too long");
        return;
    }
    if (!sl__resp_authorized(x)) return;
    sl_pending *p = sl__resp_take(x, finish_reset);
    if (p == NULL) return;
    memcpy(p->text, policy, strlen(policy) + 1);
    const sl_engine *e = w->gen->engine;
    sl_engine_prepare_named(e, policy, cmd->argv[2], cmd->argl[2], true, 0, &p->v);
    sl_pending_submit(p);
    sl_engine_reset(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

void sl__resp_cmd_clock(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_server *s = x->c->w->srv;
    if (!s->opt.test_clock) {
        sl_resp_error(&x->wb, "ERR SL.CLOCK needs a server started with --test-clock");
        return;
    }
    if (!sl__resp_authorized(x)) return;
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
void sl__resp_cmd_override(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    sl_server *s = x->c->w->srv;
    if (!sl__resp_authorized(x)) return;
    bool set = cmd->argc == 5 && sl_resp_arg_is(cmd, 1, "SET");
    bool get = cmd->argc == 4 && sl_resp_arg_is(cmd, 1, "GET");
    bool del = cmd->argc == 4 && sl_resp_arg_is(cmd, 1, "DEL");
    char policy[256];
    if ((!set && !get && !del) || sl__resp_arg_cstr(cmd, 2, policy, sizeof(policy)) != 0) {
        sl_resp_error(&x->wb, "ERR syntax: SL.OVERRIDE SET <policy> <key> <json> | SL.OVERRIDE "
                              "GET <policy> <key> | SL.OVERRIDE DEL <policy> <key>");
        return;
    }
    const char *who = sl__resp_auth_required(x->c->w->gen) ? x->c->auth_name : "";
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
