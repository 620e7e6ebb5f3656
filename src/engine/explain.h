/* SPDX-License-Identifier: Apache-2.0 */
/*
 * explain.h -- what the engine can say about itself, off the decision path: why a request
 * gets its answer (explain: every policy considered, matched or not and which condition
 * decided that, the key and its fallback chain, the cost and its source, each window's
 * state from a peek, the answer and the deciding window: nothing consumed), the effective
 * configuration (/v1/policies), the difference between two configs (the audit trail) and
 * the facts metrics label decisions with. Keys appear as "k:" and 16 hex digits of their
 * keyed SipHash (the key the logger and hot-key sketches use) unless raw keys are allowed.
 * Everything here allocates; nothing is called per decision except sl_key_text (only
 * when raw keys are logged).
 */
#ifndef SL_ENGINE_EXPLAIN_H
#define SL_ENGINE_EXPLAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"
#include "engine/engine.h"

/* ---- explain ------------------------------------------------------------------------- */

typedef struct sl_explain sl_explain;

typedef struct sl_explain_opts {
    bool raw_keys;               /* keys (and key-like attributes) shown as they are */
    const sl_hash_key *hash_key; /* the process key of displayed hashes (NULL: zero key) */
    const char *store;           /* the store's name, shown ("memory", "redis") */
} sl_explain_opts;

/* Analyses a request (attributes borrowed for the call only): what sl_engine_prepare
 * would do, with the reasons. NULL only when out of memory. */
sl_explain *sl_explain_request(const sl_engine *e, const sl_request *req);
/* The explicit form (SL.CHECK / {"policy","key"}): the named policy on `key`. */
sl_explain *sl_explain_named(const sl_engine *e, const char *policy, const void *key,
                             size_t key_len, bool has_cost, uint64_t cost);
/* The verdict to decide through the store to read the windows' state: every cost is 0
 * (a peek: nothing consumed, no concurrency slot, no token), no charge. Decide it with
 * sl_engine_decide like any verdict; it must stay where it is until its completion. */
sl_verdict *sl_explain_verdict(sl_explain *x);
/* Once the peek completed with `rc` (or without a peek: pass the verdict's rc anyway):
 * the explanation as one JSON object (malloc'd, NUL-terminated), or NULL (no memory). */
char *sl_explain_render(const sl_explain *x, int rc, const sl_explain_opts *o, size_t *len);
void sl_explain_free(sl_explain *x);

/* ---- effective configuration and changes ------------------------------------------------ */

/* Every policy of the engine's config (file order; Envoy rules included) as a JSON array:
 * windows (algorithm, rate/burst/period/quota/tz, max, lease), scope, key, cost, mode,
 * failure mode, plans, leasing, and `source` ("FILE:LINE"). malloc'd, or NULL. */
char *sl_engine_policies_json(const sl_engine *e, const char *file, size_t *len);

/* What changed between two configs' compiled policies (names are malloc'd copies). */
typedef struct sl_config_change {
    char *policy;
    char *how; /* "limits: 10/s burst 20 -> 20/s burst 40; mode: shadow -> enforce" */
} sl_config_change;

typedef struct sl_config_diff {
    char **added, **removed;
    size_t nadded, nremoved;
    sl_config_change *changed;
    size_t nchanged;
} sl_config_diff;

/* old may be NULL (every policy is added). 0, or SLUICE_ENOMEM. */
int sl_config_diff_make(const sl_config *old, const sl_config *cur, sl_config_diff *d);
void sl_config_diff_free(sl_config_diff *d);

/* ---- facts for metrics and logs ----------------------------------------------------------- */

/* A window in a few characters: "10/s", "1000/min", "100/5min", "50000/day",
 * "10 concurrent"; an Envoy override window by its unit ("override/minute"). */
size_t sl_window_describe(const sl_window_info *info, char *buf, size_t len);

/* How a window's policy reacts, for counting its results. */
typedef struct sl_window_meta {
    const char *policy;   /* the policy (or Envoy rule) name */
    bool shadow;          /* never rejects: mode shadow or on_exceed shadow */
    unsigned rollout_pct; /* 100: enforced for every key */
    bool fail_closed;     /* on_store_error: closed */
    bool delay;           /* on_exceed: delay (a rejection becomes "wait and retry") */
} sl_window_meta;
void sl_window_meta_get(const sl_window_info *info, sl_window_meta *m);

/* Every window an engine can put in a verdict (policies, plans, Envoy unlimited rules and
 * override windows): up to max into out; returns how many there are. */
size_t sl_engine_windows(const sl_engine *e, const sl_window_info **out, size_t max);

/* A composed key as readable text (for raw-key logs and explanations): the explicit form's
 * key as it is; composed parts joined by '|', client addresses as text, Envoy entries as
 * key=value. Returns the length written (NUL-terminated, cut to fit). */
size_t sl_key_text(const void *key, size_t len, char *buf, size_t cap);

/* "k:" and 16 hex digits: the displayed hash of a key (out: at least 19 bytes). */
void sl_key_hash_text(const sl_hash_key *k, const void *key, size_t len, char out[19]);

#endif /* SL_ENGINE_EXPLAIN_H */
