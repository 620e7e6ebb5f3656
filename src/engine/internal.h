/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h -- what the files of src/engine share: the compiled engine (windows, policies,
 * the override windows) and the steps of the pipeline each file implements.
 * An engine is immutable after sl_engine_create: any number of threads may use it.
 */
#ifndef SL_ENGINE_INTERNAL_H
#define SL_ENGINE_INTERNAL_H

#include "algo/limiter.h"
#include "config/compiled.h"
#include "engine/engine.h"

struct sl__epol;

/* One window of one policy (or plan) as an engine runs it; `info` comes first so the
 * info pointer a verdict item carries leads back here. */
typedef struct sl__ewin {
    sl_window_info info;
    const sl_cwindow *cw;       /* NULL for an envoy `unlimited` pseudo-window */
    const sl_cpolicy *cp;
    struct sl__epol *ep;
    sluice_limiter *lim;        /* NULL for deny_all and unlimited */
} sl__ewin;

typedef struct sl__epol {
    const sl_cpolicy *cp;
    sl__ewin *win;   /* default windows (nwin), or the one `unlimited` pseudo-window */
    size_t nwin;
    sl__ewin **plan_win; /* per plan */
    /* capacity protection (capacity.c): the borrowing tiers below the root (parent first),
     * then the penalty window; their compiled windows live in cap_cw */
    sl__ewin *cap_win;
    size_t n_tier_win;
    bool has_pen_win;
    sl_cwindow *cap_cw;
    void *cap_names;     /* their labels and limiter names */
    uint64_t tok_owner;  /* hash of the policy's name: whose share its tokens count in */
    atomic_int_fast64_t *ovr_n; /* overrides of this policy (store/memory/override.c): 0 = no lookup */
} sl__epol;

/* prepare.c's key composition, shared with capacity.c */
typedef struct sl__kbuf {
    unsigned char *p;
    size_t len, cap;
    bool overflow;
} sl__kbuf;

typedef struct sl__ctxreq {
    const sl_request *req;
    const sl_descriptor *desc;
    const struct sl_enode **epath; /* envoy: node per level */
    sl_str path;                   /* normalised path (path_norm) */
    const struct sl_envoy_settings *compat; /* envoy compat mode, else NULL */
} sl__ctxreq;

/* Appends part `pt` of the request (false: the request does not carry it); appends one
 * tagged, length-prefixed value. */
bool sl__put_part(sl__kbuf *k, const sl__ctxreq *c, const sl_cpolicy *cp, const sl_part *pt);
void sl__kput(sl__kbuf *k, unsigned char tag, const void *b, size_t n);

static inline const sl__ewin *sl__item_win(const sl_verdict_item *it) {
    return (const sl__ewin *)(const void *)it->info;
}

/* Envoy descriptor limit overrides: one fixed window limiter per RateLimitUnit (1 SECOND
 * .. 6 YEAR), decided with the override's own limit (sl_sitem.limit), so every override of
 * one descriptor and unit shares one counter whatever its limit, as envoyproxy/ratelimit
 * counts them. */
#define SL__OVR_UNITS (SL_ENVOY_UNIT_MAX + 1) /* one override window per Envoy unit */

struct sl_engine {
    const sl_config *cfg;
    sluice_store *store;        /* the limiter registry (and the memory store's state) */
    const sl_store_ops *ops;    /* where decisions go */
    sl_token_table *tokens;
    bool shared_tokens;         /* from the per-store registry (sl_engine_create): drop a ref */
    size_t tok_share;           /* live tokens one policy may hold: capacity / policies
                                   issuing tokens */
    size_t n_pol;
    sl__epol *pol;
    size_t n_all;
    sl__ewin **all;             /* every window, for token lookups */
    sl_cpolicy ovr_pol;
    sl__epol ovr_ep;
    sl_cwindow ovr_cw[SL__OVR_UNITS];
    sl__ewin ovr[SL__OVR_UNITS];
};

/* prepare.c */
void sl__verdict_init(sl_verdict *v);
/* The engine's answer for a request it could not decide (not a store failure). */
int sl__fail(sl_verdict *v, int rc);

/* prepare.c: explain hooks, the steps of a decision with their reasons (explain.c) */
enum { SL_XM_OK = 0, SL_XM_METHOD, SL_XM_PATH, SL_XM_HOST, SL_XM_HEADER, SL_XM_DESCRIPTOR };
enum { SL_XC_DEFAULT = 0, SL_XC_OPERATION, SL_XC_ATTRIBUTE, SL_XC_HITS_ADDEND, SL_XC_CALLER };
int sl__xmatch_http(const sl_cpolicy *cp, const sl_request *r, sl_str path, size_t *which);
int sl__xmatch_desc(const sl_cpolicy *cp, const sl_descriptor *d, size_t *which);
/* Per key chain: the index of the first part the request lacks (-1: complete); returns
 * the chain the key is composed from (-1: none). */
int sl__xkey_chains(const sl_cpolicy *cp, const sl_request *r, const sl_descriptor *d,
                    sl_str path, int missing[SL_MAX_CHAINS]);
uint64_t sl__xcost(const sl_cpolicy *cp, const sl_request *r, const sl_descriptor *d,
                   sl_str path, int *src, size_t *opi);
const char *sl__xplan(const sl_cpolicy *cp, const sl_request *r, const sl_descriptor *d,
                      sl_str path);
bool sl__xin_rollout(const sl_cpolicy *cp, const void *key, size_t len);

/* decide.c */
bool sl__admitted(const sl_verdict *v);
/* The end of an operation on v: the next operation of a token, else v's completion. */
void sl__complete(sl_verdict *v, int rc);
/* How long a token's operation on window w stays valid after the decision. */
int64_t sl__item_life(const sl__ewin *w, bool settle, bool lease);
/* Settles/releases the items of v (a verdict, or a token loaded into one) through the
 * store, then calls v's completion with the first error. */
void sl__apply(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now);

/* capacity.c */
/* The capacity parameters a window of cp is created with (NULL: none). */
const sl_cap *sl__cap_window(const sl_cpolicy *cp, const sl_cwindow *cw, sl_cap *buf);
/* Creates and registers ep's tier and penalty windows (appended to e->all). */
int sl__cap_windows(sl_engine *e, sl__epol *ep, char *errbuf, size_t errlen);
void sl__cap_windows_free(sl__epol *ep);
/* After add_items placed the policy's nw windows at v->items[first..]: their class, the
 * borrowing tiers and the penalty item (capacity protection). */
int sl__cap_items(const sl__epol *ep, sl_verdict *v, size_t first, size_t koff, size_t klen,
                  const sl__ctxreq *c, const char *cls);
/* The store answered: the reaction of a refusal by a penalty (challenge status). */
void sl__cap_answer(sl_verdict *v);
/* A key in a penalty's block or challenge: the windows of its policy answer as the block
 * (refused, remaining 0, retry-after at least the block's remaining time). */
void sl__cap_penalty_results(sl_verdict *v);
/* engine.c: a window of ep created with capacity parameters (NULL: none). */
int sl__make_win(sl_engine *e, sl__epol *ep, sl__ewin *w, const sl_cwindow *cw, const char *limname,
                 const char *plan, const sl_cap *cap, char *errbuf, size_t errlen);

/* override.c: a (policy, key) whose items add_items placed at v->items[first..+n] may
 * have an override: noted here, resolved when the verdict is decided. */
void sl__ovr_note(const sl__epol *ep, sl_verdict *v, size_t first, size_t n, int base_plan,
                  size_t koff, size_t klen, uint64_t cost, bool shadow);
/* Resolves the noted overrides at `now`: rewrites their items (plan, numbers, block,
 * exempt) and the carries/guards. Returns SLUICE_OK or an engine error. */
int sl__ovr_apply(const sl_engine *e, sl_verdict *v, sluice_time now);

/* tokens.c */
#define SL_TOK_SETTLE 1u
#define SL_TOK_RELEASE 2u
/* A new live id with `pending` operations until `expires` (monotonic ns), counted in no
 * policy's share; 0 when the table is full. */
uint64_t sl__token_issue(sl_token_table *t, unsigned pending, int64_t expires, int64_t now);
/* A live id held for a decision the store has not answered yet, counted in the share of
 * policy `owner` (a hash of its name) which may hold at most `share` (0: the whole
 * table); 0 when that share or the table is full (counted as refused). Then either
 * sl__token_commit (admitted, with what it holds) or sl__token_drop. */
uint64_t sl__token_reserve(sl_token_table *t, uint64_t owner, size_t share, int64_t expires,
                           int64_t now);
bool sl__token_commit(sl_token_table *t, uint64_t id, unsigned pending, int64_t expires);
void sl__token_drop(sl_token_table *t, uint64_t id);
/* A fresh id, not recorded (tokens shared between instances: their single use is
 * claimed in the shared store instead). */
uint64_t sl__token_id(sl_token_table *t);
/* Operation `op` of `id`, once: false when unknown, expired or already taken. */
bool sl__token_take(sl_token_table *t, uint64_t id, unsigned op, int64_t now);
/* Whether tokens are shared between instances (sl_engine_tokens_shared was called). */
bool sl__tokens_shared(void);
/* Records the single-use id of an admitted verdict holding something to settle or
 * release. */
void sl__issue_token(const sl_engine *e, sl_verdict *v, sluice_time now);
/* Takes operation `op` of v's token (v->run.tok_*), then applies v (sl__apply); with
 * shared tokens the take is a claim in the store. */
void sl__take_and_apply(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now);

#endif /* SL_ENGINE_INTERNAL_H */
