/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compiled.h -- the compiled form of a config: what src/config produces and src/engine
 * reads. Everything a config owns lives in its arena and is freed at once by
 * sl_config_destroy; after loading it is immutable, so engines on many threads may read
 * it freely.
 */
#ifndef SL_CONFIG_COMPILED_H
#define SL_CONFIG_COMPILED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "config/config.h"
#include "llm/llm.h"

/* ---- arena ------------------------------------------------------------------------ */

typedef struct sl__arena_blk {
    struct sl__arena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} sl__arena_blk;

typedef struct sl__arena {
    sl__arena_blk *head;
    bool oom;
} sl__arena;

void *sl__alloc(sl__arena *a, size_t n); /* zeroed; NULL (and a->oom) when out of memory */
char *sl__strndup(sl__arena *a, const char *s, size_t n);
void sl__arena_free(sl__arena *a);

/* ---- string set (strset.c): duplicate checks in linear time -------------------------- */

typedef struct sl__set_slot {
    const char *key; /* borrowed; NULL = empty slot */
    size_t len;
    uint64_t hash;
    const void *val;
} sl__set_slot;

typedef struct sl__set {
    sl__set_slot *slot;
    size_t cap, n;
} sl__set; /* zero-initialised = empty */

/* Inserts key -> val: 0 when new, 1 when already there (*prev = its value, nothing
 * changed), -1 when out of memory. */
int sl__set_put(sl__set *s, const char *key, size_t len, const void *val, const void **prev);
void sl__set_free(sl__set *s);

/* ---- YAML tree (temporary, built from libyaml events) ----------------------------- */

typedef enum { SL_YSCALAR, SL_YMAP, SL_YSEQ } sl_ykind;

typedef struct sl_ynode {
    sl_ykind kind;
    int line, col;      /* 1-based */
    bool plain;         /* an unquoted scalar (so `null`/`~` mean null) */
    const char *s;      /* scalar text, NUL-terminated */
    size_t len;
    size_t n;           /* map: pairs; seq: items */
    struct sl_ynode **v;/* map: key0, val0, key1, val1...; seq: items */
} sl_ynode;

/* ---- envoy `metadata` ------------------------------------------------------------- */

/* A descriptor's free-form metadata as envoyproxy/ratelimit reads it (YAML 1.1 scalars:
 * numbers become doubles, yes/no/on/off/true/false booleans, ~/null null), kept in the
 * config's arena and turned into a google.protobuf.Struct when an answer carries it. */
typedef enum { SL_MD_NULL = 0, SL_MD_NUM, SL_MD_STR, SL_MD_BOOL, SL_MD_MAP, SL_MD_LIST } sl_md_kind;

typedef struct sl_mdnode {
    sl_md_kind kind;
    bool b;
    double num;
    const char *s;                  /* SL_MD_STR */
    size_t n;                       /* MAP: pairs, LIST: items */
    const char **keys;              /* MAP */
    const struct sl_mdnode **v;
} sl_mdnode;

/* ---- compiled policy ---------------------------------------------------------------- */

typedef enum {
    SL_PART_CLIENT_IP = 1,
    SL_PART_HEADER,
    SL_PART_METHOD,
    SL_PART_PATH,
    SL_PART_ROUTE,
    SL_PART_HOST,
    SL_PART_DESCRIPTOR, /* descriptor.NAME: the value of entry NAME */
    SL_PART_ENVOY,      /* envoy rule: every entry of the descriptor (key + value) */
    SL_PART_BODY_BYTES, /* costs only */
    SL_PART_LLM_MODEL,  /* llm.model: the request body's model (issue 24, src/llm) */
    SL_PART_LLM_USER    /* llm.user: its user (OpenAI user, Anthropic metadata.user_id) */
} sl_part_kind;

typedef struct sl_part {
    sl_part_kind kind;
    const char *name;   /* header / descriptor entry name (lowercase for headers) */
    size_t name_len;
    unsigned v6_prefix; /* client_ip/N: group IPv6 addresses by their first N bits */
} sl_part;

#define SL_MAX_PARTS 8
#define SL_MAX_CHAINS 4

typedef struct sl_chain {
    size_t n;
    sl_part parts[SL_MAX_PARTS];
} sl_chain;

typedef enum { SL_MISSING_REJECT = 0, SL_MISSING_SKIP = 1 } sl_missing;

typedef struct sl_hdr_cond {
    const char *name;    /* lowercase */
    const char *pattern; /* glob; NULL with `present` */
    bool present;        /* true: must be present; false with pattern NULL: must be absent */
} sl_hdr_cond;

typedef struct sl_op_cost {
    const char *method;  /* uppercase, "*" = any */
    const char *path;    /* glob */
    uint64_t cost;
} sl_op_cost;

typedef enum { SL_PATH_ANY = 0, SL_PATH_EXACT, SL_PATH_GLOB, SL_PATH_PREFIX } sl_path_kind;

typedef enum { SL_REACT_REJECT = 0, SL_REACT_DELAY, SL_REACT_SHADOW } sl_react;

struct sl_adapt_params;

typedef struct sl_cwindow {
    sluice_limit_spec spec;     /* spec.name/index filled per plan by the engine */
    const struct sl_adapt_params *adapt; /* adaptive_concurrency: its controller (capacity.c) */
    const char *label;          /* RateLimit item name */
    bool named;                 /* the label was written (`name:`): the identity follows it */
    int line, col;              /* where the window's name (or the window) is written */
    bool deny_all;              /* envoy requests_per_unit: 0 (block list) */
    int envoy_unit;
    uint32_t requests_per_unit;
    uint8_t counts;             /* sl_llm_count: what an LLM request adds here (0: the cost) */
} sl_cwindow;

/* A policy's `llm:` section (config/llm.c): counting parameters, the answer dialect, and
 * what ext_proc does when less is left than a request's max_tokens. */
typedef enum { SL_DIALECT_IETF = 0, SL_DIALECT_OPENAI, SL_DIALECT_ANTHROPIC } sl_dialect;
typedef struct sl_cllm {
    sl_llm_params params;
    bool reject_short;          /* on_short: reject (429) instead of clamping max_tokens */
    uint64_t min_output;        /* clamping below this rejects instead (default 1) */
} sl_cllm;

typedef struct sl_cplan {
    const char *name;
    size_t nwin;
    sl_cwindow *win;
} sl_cplan;

/* ---- capacity protection (capacity.c; docs/capacity.md) ----------------------------------- */

/* Fields of a limit only adaptive_concurrency accepts. */
#define SL_ADAPTIVE_FIELDS "min", "initial", "controller", "window", "min_samples", "smoothing", \
    "tolerance", "queue", "alpha", "beta", "increase", "backoff", "timeout", "probe_after", "probe_every"

typedef struct sl_cprio_op {
    const char *method; /* uppercase, "*" = any */
    const char *path;   /* glob */
    uint8_t cls;        /* class index */
} sl_cprio_op;

/* A borrowing tier below the root: its key part, its caps and its guaranteed shares (per
 * value of the part, else the default), in the unit of the root's limit. */
typedef struct sl_ctier {
    const char *name;
    sl_part from;
    uint64_t cap;
    bool has_default;
    uint64_t share_default;
    size_t n_shares;
    const char **share_key;
    uint64_t *share_val;
    int line, col, cap_node_line, cap_node_col;
} sl_ctier;

typedef struct sl_ccap {
    /* priority shedding: classes in priority order; a request's class from an attribute
     * (its value names the class) or its operation, else missing_class */
    bool classes;
    sl_shed_params shed;
    const char *class_names[SL_SHED_MAX_CLASSES];
    bool prio_part_set;
    sl_part prio_part;
    size_t n_prio_ops;
    sl_cprio_op *prio_ops;
    uint8_t missing_class;
    /* borrowing: the policy's own limit is the root's budget; tiers below it, parent first */
    bool borrow;
    const char *root_name;
    size_t n_tiers;
    sl_ctier tiers[SL_BORROW_MAX_DEPTH - 1];
    int64_t reclaim_ns;
    /* progressive penalty, keyed on pen_key (else the policy's key) */
    bool penalty;
    sl_penalty_params pen;
    bool pen_key_set;
    sl_chain pen_key;
    int challenge_status;         /* 401 unless configured */
    const char *challenge_header; /* "Name: value", or NULL */
} sl_ccap;

typedef struct sl_cpolicy {
    const char *name;
    const char *objective;
    int line, col;
    bool envoy;                 /* an envoyproxy/ratelimit rule */
    /* match */
    size_t n_methods;
    const char **methods;
    sl_path_kind path_kind;
    const char *path;
    const char *host;           /* glob, lowercase */
    size_t n_hdr;
    sl_hdr_cond *hdr;
    const char *domain;         /* requests with this domain only (descriptor-evaluated) */
    size_t n_desc;
    sl_hdr_cond *desc;          /* descriptor entry conditions */
    /* key */
    size_t n_chains;
    sl_chain chains[SL_MAX_CHAINS];
    sl_missing on_missing;
    /* cost */
    bool cost_explicit;
    uint64_t cost_default;
    bool cost_from_set;
    sl_part cost_from;
    size_t n_ops;
    sl_op_cost *ops;
    bool settle;
    sl_quota_unit qu;
    const char *unit_name;
    /* windows and plans */
    sluice_algo algo;
    size_t nwin;
    sl_cwindow *win;
    bool plan_from_set;
    sl_part plan_from;
    size_t n_plans;
    sl_cplan *plans;
    /* reaction, mode, failure */
    sl_react react;
    int64_t max_delay_ns;
    unsigned rollout_pct;       /* 100 = enforce, 0 = shadow */
    bool fail_closed;
    bool fail_local;            /* on_store_error: local (fail_closed too: when it cannot) */
    uint32_t lease_slice;       /* leasing (shared store, hot keys): units per slice; 0 = off */
    int64_t lease_hold_ns;      /* how long a slice is spent locally before its rest goes back */
    bool headers;               /* render RateLimit fields for this policy */
    bool count_rejected;        /* a rejected request still counts against these windows */
    /* envoy */
    bool unlimited;
    const char *rule_name;      /* rate_limit.name (target of replaces) */
    size_t n_replaces;
    const char **replaces;
    bool detailed_metric, value_to_metric;
    bool quota_mode;            /* envoy quota_mode: over limit only when every quota rule is */
    const struct sl_mdnode *metadata; /* envoy metadata (a map), NULL when none */
    const char *stat_key;       /* envoy: its statistics path (domain.key_value.key...) */
    bool fail_mode_set;         /* on_store_error written (else the compat default: error) */
    sl_ccap *cap;               /* capacity protection, NULL for none */
    const sl_cllm *llm;         /* LLM accounting (`llm:`), NULL for none */
    uint8_t dialect;            /* sl_dialect: `headers: openai|anthropic` */
} sl_cpolicy;

/* One level of an Envoy descriptor tree. Exact key/value entries are found through a
 * hash index (configs with thousands of listed values are common: per-address lists),
 * wildcard and bare-key entries by a scan of `other`, in file order. */
typedef struct sl_elevel {
    struct sl_enode *v;
    size_t n;
    uint32_t *idx;              /* open addressing, cap entries: node index + 1, 0 = empty */
    size_t cap;                 /* a power of two, >= 2n */
    uint32_t *other;            /* indices of wildcard and bare-key nodes */
    size_t n_other;
} sl_elevel;

/* Envoy descriptor tree: one node per `- key:` entry. */
typedef struct sl_enode {
    const char *key;
    const char *value;          /* NULL = any value */
    bool wildcard;              /* value contains '*' */
    bool share_threshold;
    bool value_to_metric;       /* this level's value goes into the rules' metric path */
    int policy;                 /* index into cfg->pol, -1 when the node has no rate_limit */
    sl_elevel children;
} sl_enode;

typedef struct sl_edomain {
    const char *domain;
    sl_elevel roots;
} sl_edomain;

struct sl_config {
    sl__arena arena;
    sl_settings settings;
    bool envoy_format;
    size_t n_pol;
    sl_cpolicy *pol;
    size_t n_domains;
    sl_edomain *domains;
    size_t n_limiters;
};

/* override.c: one window of a per-key override in the config's syntax (JSON is YAML),
 * parsed for a policy of algorithm `algo`; its `name:` into label. SLUICE_EINVAL with the
 * parser's message in err. */
int sl_config_override_window(const char *text, size_t len, sluice_algo algo, sl_cwindow *out,
                              char *label, size_t label_len, char *err, size_t errlen);

/* ---- helpers shared between files ------------------------------------------------- */

/* glob with '*' matching any run of bytes (including '/'); exact otherwise. */
bool sl__glob(const char *pat, const char *s, size_t len);
/* Parses "10/s", "100/5m": limit and period. Returns false on a bad rate. */
bool sl__parse_rate(const char *s, uint64_t *limit, int64_t *period_ns);
/* Parses "30s", "5m", "1h", "500ms", "2d". */
bool sl__parse_duration(const char *s, int64_t *ns);
bool sl__parse_ppm(const char *s, uint64_t max_ppm, uint64_t *out);
/* Parses "50000/day" into a calendar period. */
bool sl__parse_quota(const char *s, uint64_t *limit, sluice_period *p);
uint64_t sl__hash64(const void *a, size_t alen, const void *b, size_t blen);

/* Envoy format: the loader for a `domain:` document (one per file, or each entry of a
 * sluice file's `domains:` list). Reports errors through the loader's context. */
struct sl__ctx;
void sl__envoy_load(struct sl__ctx *cx, const sl_ynode *doc);
/* The node of level `lv` that the descriptor entry (k, v) reaches, or NULL (SPECS §4.2);
 * v NULL or empty matches only bare-key nodes. The engine walks a descriptor with it. */
#define SL_ENVOY_DEPTH 17
const sl_enode *sl__envoy_child(const sl_elevel *lv, const char *k, size_t kl, const char *v,
                                size_t vl);

/* The loader context (config.c) and its diagnostics. */
typedef struct sl__ctx {
    sl_config *cfg;
    sl_diag_list *dl;
    size_t errors;
    sl__arena tmp;              /* the YAML tree */
    /* growable arrays while loading (malloc'd, moved into the arena at the end) */
    sl_cpolicy **pol;           /* each policy lives in the config arena */
    size_t n_pol, cap_pol;
    sl_edomain **dom;
    size_t n_dom, cap_dom;
    sl__set names;              /* policy names -> their sl_cpolicy (duplicate check) */
} sl__ctx;

/* config.c: the steps of one load, for loaders of several documents (dir.c): begin (a
 * config with default settings), each document's root, then end (the checks over
 * everything loaded; the config in *out, or the errors and SLUICE_EINVAL/ENOMEM). */
void sl__load_begin(sl__ctx *cx, sl_config *cfg, sl_diag_list *diags);
void sl__load_root(sl__ctx *cx, const sl_ynode *root);
int sl__load_end(sl__ctx *cx, bool parsed, sl_config **out);

void sl__err(sl__ctx *cx, const sl_ynode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
sl_cpolicy *sl__new_policy(sl__ctx *cx); /* appended; its index is cx->n_pol - 1 */
sl_edomain *sl__new_domain(sl__ctx *cx);
sl_ynode *sl__yaml_parse(sl__ctx *cx, const char *buf, size_t len);
/* Parses a key part ("client_ip/64", "header.x-api-key", ...); false on a bad one. */
bool sl__parse_part(sl__ctx *cx, const sl_ynode *n, bool for_cost, sl_part *out);
const sl_ynode *sl__get(const sl_ynode *map, const char *key);
bool sl__check_fields(sl__ctx *cx, const sl_ynode *map, const char *what,
                      const char *const *allowed);
/* Reports every repeated key of a mapping (linear time); false when there is one. */
bool sl__check_dups(sl__ctx *cx, const sl_ynode *map, const char *what);
bool sl__get_bool(sl__ctx *cx, const sl_ynode *n, bool *out);
/* store_redis.c: the Redis store's connection fields of the `store:` section */
#define SL_STORE_REDIS_FIELDS "username", "password", "password_file", "password_env", "db", "tls", "sentinel"
void sl__parse_store_redis(sl__ctx *cx, const sl_ynode *n, sl_settings *st);
/* store_redis.c: the Redis store's connection fields of the `store:` section */
#define SL_STORE_REDIS_FIELDS "username", "password", "password_file", "password_env", "db", "tls", "sentinel"
void sl__parse_store_redis(struct sl__ctx *cx, const sl_ynode *n, sl_settings *st);
bool sl__get_u64(sl__ctx *cx, const sl_ynode *n, uint64_t max, uint64_t *out);
/* The same for a named field: a negative value is "FIELD must be >= 0, not -1", any error
 * names the field (config.c). */
bool sl__get_count(sl__ctx *cx, const sl_ynode *n, const char *field, uint64_t max, uint64_t *out);
/* The known name a misspelt `word` most likely meant (edit distance, unique and close),
 * or NULL (config.c). */
const char *sl__did_you_mean(const char *word, const char *const *known);
const char *sl__get_str(sl__ctx *cx, const sl_ynode *n, const char *what);
/* Reads one window (a `limits:` entry) of `algo` into w; returns false on an error. */
bool sl__parse_window(sl__ctx *cx, const sl_ynode *n, sluice_algo algo, bool algo_set,
                      sl_cwindow *w);
/* `leasing: {slice: N, hold: 100ms}` (or `off`) of a policy whose windows are parsed:
 * every window must be a rate (gcra, token_bucket, fixed_window, sliding_window) whose
 * capacity holds a slice. */
bool sl__parse_leasing(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p);
/* capacity.c: an adaptive limit's controller fields into w->adapt; the adaptive-only
 * fields refused on any other algorithm; the capacity sections of a policy (classes,
 * borrow, on_exceed's penalty and challenge), after its limits, mode and reaction. */
bool sl__parse_adaptive(sl__ctx *cx, const sl_ynode *n, sl_cwindow *w);
bool sl__no_adaptive_fields(sl__ctx *cx, const sl_ynode *n, sluice_algo a);
bool sl__parse_capacity(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p);

/* Validates w->spec through sluice_limiter_create (reports its message at `at`). */
bool sl__validate_spec(sl__ctx *cx, const sl_ynode *at, sl_cwindow *w, const char *name);


/* ---- shared between the loader's files (config.c, windows.c, policy.c, settings.c) ---- */

static inline bool sl__is_seq(const sl_ynode *n) { return n != NULL && n->kind == SL_YSEQ; }
static inline bool sl__is_scalar(const sl_ynode *n) { return n != NULL && n->kind == SL_YSCALAR; }
const char *sl__algo_str(sluice_algo a);
void sl__check_costs(sl__ctx *cx, const sl_ynode *cost_node, const sl_cpolicy *p, const sl_cwindow *w, size_t nw);
bool sl__get_duration(sl__ctx *cx, const sl_ynode *n, int64_t *ns);
/* llm.c: a policy's `llm:` section, a window's `counts:`, `headers: openai|anthropic`. */
bool sl__parse_llm(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p);
bool sl__parse_counts(sl__ctx *cx, const sl_ynode *n, sl_cwindow *w);
bool sl__parse_headers_opt(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p);
char *sl__keep_lower(sl__ctx *cx, const char *s);
char *sl__keep(sl__ctx *cx, const char *s);
bool sl__parse_algo(sl__ctx *cx, const sl_ynode *n, sluice_algo *out);
bool sl__parse_chain(sl__ctx *cx, const sl_ynode *n, sl_chain *c);
bool sl__parse_policy(sl__ctx *cx, const sl_ynode *n);
void sl__parse_settings(sl__ctx *cx, const sl_ynode *root, sl_settings *st);
bool sl__parse_windows(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, sluice_algo algo, bool algo_set, sl_cwindow **out, size_t *nout);
void sl__settings_defaults(sl_settings *st);
uint64_t sl__window_capacity(const sl_cwindow *w);

/* A whole config file (at most 16 MiB) into a malloc'd buffer; NULL with *why set (a
 * message for a diagnostic) when it cannot be read. */
char *sl__read_file(const char *path, size_t *len, const char **why);

#define SL_MAX_DELAY_NS (300 * SLUICE_NS_PER_S) /* the longest delay a caller is held */

#endif /* SL_CONFIG_COMPILED_H */
