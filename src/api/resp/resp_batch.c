/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_batch.c -- pipelined SL.CHECK and SL.PEEK decided together: one pass over the store,
 * the replies written in order (the same reply as resp_sl.c's).
 */
#include <stdlib.h>
#include <string.h>

#include "api/resp/resp_cmds.h"

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
    reply_form form = sl__resp_reply_form_of(cmd, &argc);
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
    sl__resp_verdict_reply(c, wb, b->rc[i], &b->v[i], b->e[i].policy, b->e[i].form);
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
    for (size_t i = 0; i < b->n; i++) sl__resp_with_wbuf(c, REPLY_RESERVE + SL_TOKEN_MAX, write_batch_reply, &i);
    b->n = 0;
}
