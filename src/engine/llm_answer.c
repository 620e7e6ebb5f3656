/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llm_answer.c -- the provider dialect pairs of an answer (issue 24): the visible windows
 * of a verdict whose policy asks `headers: openai|anthropic`, handed to src/llm/dialect.c
 * with what each counts. Called once per answer from sl_answer_build; no allocation.
 */
#include "engine/answer.h"
#include "engine/internal.h"
#include "llm/dialect.h"

static bool add_pair(void *ctx, const char *name, size_t nl, const char *value, size_t vl) {
    return sl_answer_add((sl_answer *)ctx, name, nl, value, vl);
}

void sl__answer_dialect(sl_answer *a, const sl_verdict *v) {
    sl_llm_dwin w[SLUICE_MAX_ITEMS];
    size_t n = 0;
    int dialect = 0;
    for (size_t i = 0; i < a->nvis; i++) {
        const sl_verdict_item *it = &v->items[a->vis[i]];
        const sl__ewin *ew = sl__item_win(it);
        if (ew->cp == NULL || ew->cp->dialect == 0 || ew->cw == NULL) continue;
        if (dialect == 0) dialect = ew->cp->dialect;
        if (ew->cp->dialect != dialect) continue;
        const sluice_result *r = &it->result;
        w[n].counts = ew->cw->counts;
        w[n].limit = it->override ? it->override_limit : it->info->quota;
        w[n].remaining = r->allowed ? r->remaining : 0;
        w[n].reset_ns = !r->allowed && r->retry_after_ns != SLUICE_NEVER ? r->retry_after_ns : r->reset_after_ns;
        n++;
    }
    if (n == 0) return;
    sl_llm_dialect_pairs(dialect == SL_DIALECT_OPENAI ? SL_LLM_DIALECT_OPENAI : SL_LLM_DIALECT_ANTHROPIC, w, n,
                         v->decided_at.wall_ns, add_pair, a);
}
