/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_throttle.c -- CL.THROTTLE: redis-cell's command, reply and rounding (whole seconds),
 * one GCRA item straight to the store with a limiter per parameter set (cell.c).
 */
#include <stdio.h>

#include "api/resp/resp_cmds.h"

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
    sl__resp_finish(p, rc, later, 256, write_throttle);
}

/* CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>] (SPECS §5): one
 * GCRA item straight to the store (no policy). */
void sl__resp_cmd_throttle(resp_ctx *x) {
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
    sl_pending *p = sl__resp_take(x, finish_throttle);
    if (p == NULL) return;
    memcpy(p->v.keys, cmd->argv[1], cmd->argl[1]); /* the key must outlive the command */
    p->item = (sl_sitem){.lim = lim, .key = p->v.keys, .key_len = cmd->argl[1], .cost = (uint64_t)qty};
    sl_pending_submit(p);
    sl_engine_ops(w->gen->engine)->decide(w->lane, &p->item, 1, 0, sl_worker_now(w),
                                          sl_pending_store_done, p);
    if (sl_pending_park(p)) x->c->suspended = true;
}

