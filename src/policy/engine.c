/*
 * engine.c -- the decision pipeline over a loaded config: match -> key -> plan -> cost ->
 * mode, then ONE all-or-nothing sluice_decide over every enforced window, then the
 * reaction. Immutable after creation (any number of threads may check at once); the check
 * path allocates nothing: keys are composed into the caller's verdict.
 * Key encoding: one byte naming the chain that produced the key, then per part a tag
 * byte, a 2-byte big-endian length and the bytes, so no two part lists collide.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/hash.h"
#include "engine/limiter.h"
#include "internal.h"

/* The calling thread's store hooks (policy.h); NULL = the memory store. */
static __thread const sl_store_hooks *tl_hooks;

void sl_engine_thread_hooks(const sl_store_hooks *h) { tl_hooks = h; }

int sl_store_decide(sluice_store *st, const sluice_item *items, size_t n, sluice_time now,
                    sluice_decision *out) {
    if (tl_hooks != NULL) return tl_hooks->decide(tl_hooks->ctx, items, n, now, out);
    return sluice_decide(st, items, n, now, out);
}

int sl_store_reset(sluice_store *st, const sluice_item *items, size_t n, sluice_time now) {
    if (tl_hooks != NULL && tl_hooks->reset != NULL) return tl_hooks->reset(tl_hooks->ctx, items, n, now);
    int first = SLUICE_OK;
    for (size_t i = 0; i < n; i++) {
        int rc = sluice_reset(st, items[i].limiter, items[i].key, items[i].key_len);
        if (rc != SLUICE_OK && rc != SLUICE_ENOTFOUND && first == SLUICE_OK) first = rc;
    }
    return first;
}

static int st_settle(sluice_store *st, const sluice_limiter *lim, const void *key, size_t kl,
                     uint64_t reserved, uint64_t actual, sluice_time now, sluice_result *out) {
    if (tl_hooks != NULL) return tl_hooks->settle(tl_hooks->ctx, lim, key, kl, reserved, actual, now, out);
    return sluice_settle(st, lim, key, kl, reserved, actual, now, out);
}

/* sluice_settle_at through the hooks: a refund whose window or period has passed is
 * void (judged on the caller's clock), so a shared store never gets one either. */
static int st_settle_at(sluice_store *st, const sluice_limiter *lim, const void *key, size_t kl,
                        uint64_t reserved, uint64_t actual, sluice_time reserved_at, sluice_time now,
                        sluice_result *out) {
    if (tl_hooks == NULL) return sluice_settle_at(st, lim, key, kl, reserved, actual, reserved_at, now, out);
    if (actual < reserved && !sl_algo_refundable(&lim->lim, reserved_at, now)) actual = reserved;
    if (actual == reserved) { /* nothing to move: no round trip */
        if (out != NULL) memset(out, 0, sizeof(*out));
        return SLUICE_OK;
    }
    return st_settle(st, lim, key, kl, reserved, actual, now, out);
}

static int st_release(sluice_store *st, const sluice_limiter *lim, const void *key, size_t kl,
                      uint64_t lease, sluice_time now) {
    if (tl_hooks != NULL) return tl_hooks->release(tl_hooks->ctx, lim, key, kl, lease, now);
    return sluice_release(st, lim, key, kl, lease, now);
}

typedef sl__ewin e_win;

typedef struct sl__epol {
    const sl_cpolicy *cp;
    e_win *win;       /* default windows (nwin), or the one `unlimited` pseudo-window */
    size_t nwin;
    e_win **plan_win; /* per plan */
} e_pol;

/* Envoy descriptor limit overrides: one fixed window per RateLimitUnit, counting up to
 * UINT32_MAX (the largest requests_per_unit), compared with the override's value after
 * the decision. Indexed by unit, 1 (SECOND) .. 6 (YEAR). */
#define OVR_UNITS 7

struct sl_engine {
    const sl_config *cfg;
    sluice_store *store;
    sl_token_table *tokens;
    bool shared_tokens; /* from the per-store registry (sl_engine_create): drop a ref */
    size_t n_pol;
    e_pol *pol;
    size_t n_all;
    e_win **all; /* every window, for token lookups */
    sl_cpolicy ovr_pol;
    e_pol ovr_ep;
    sl_cwindow ovr_cw[OVR_UNITS];
    e_win ovr[OVR_UNITS];
};

static int fail(sl_verdict *v, int rc);
static bool is_store_failure(int rc);

static const int64_t ovr_secs[OVR_UNITS] = {0, 1, 60, 3600, 86400, 2592000, 31536000};
static const char *const ovr_names[OVR_UNITS] = {"", "second", "minute", "hour",
                                                 "day", "month", "year"};
/* RateLimitUnit (type/v3) -> RateLimitResponse.RateLimit.Unit: the same numbers 1..6 */

/* ---- create ------------------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/* The `w` a client is told: for buckets the time a full burst takes to refill, for
 * windows their length, for calendar quotas the nominal period (none for months). */
static int64_t window_seconds(const sl_cwindow *cw, uint64_t capacity) {
    const sluice_limit_spec *s = &cw->spec;
    switch (s->algo) {
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_GCRA:
    case SLUICE_LEAKY_BUCKET: {
        if (s->limit == 0) return ceil_div(s->period_ns, SLUICE_NS_PER_S);
        unsigned __int128 ns = (unsigned __int128)s->period_ns * capacity / s->limit;
        int64_t r = ceil_div((int64_t)(ns > (unsigned __int128)INT64_MAX ? INT64_MAX : ns),
                             SLUICE_NS_PER_S);
        return r < 1 ? 1 : r;
    }
    case SLUICE_QUOTA:
        switch (s->quota_period) {
        case SLUICE_PERIOD_HOUR: return 3600;
        case SLUICE_PERIOD_DAY: return 86400;
        case SLUICE_PERIOD_WEEK: return 604800;
        default: return 0;
        }
    case SLUICE_CONCURRENCY: return 0;
    default: {
        int64_t r = ceil_div(s->period_ns, SLUICE_NS_PER_S);
        return r < 1 ? 1 : r;
    }
    }
}

static int make_win(sl_engine *e, e_pol *ep, e_win *w, const sl_cwindow *cw, const char *limname,
                    const char *plan, char *errbuf, size_t errlen) {
    const sl_cpolicy *cp = ep->cp;
    w->cw = cw;
    w->cp = cp;
    w->ep = ep;
    w->info.name = cw->label;
    w->info.policy = cp->name;
    w->info.plan = plan;
    w->info.qu = cp->qu;
    w->info.unit_name = cp->unit_name;
    w->info.index = cw->spec.index;
    w->info.envoy_unit = cw->envoy_unit;
    w->info.requests_per_unit = cw->requests_per_unit;
    w->info.objective = cp->objective;
    w->info.detailed_metric = cp->detailed_metric || cp->value_to_metric;
    if (cw->spec.algo == SLUICE_CONCURRENCY) w->info.qu = SL_QU_CONCURRENT;
    if (cw->deny_all) {
        w->info.quota = 0;
        w->info.window_s = window_seconds(cw, 0);
        return SLUICE_OK;
    }
    sluice_limit_spec s = cw->spec;
    s.name = limname;
    int err = 0;
    w->lim = sluice_limiter_create(&s, &err, errbuf, errlen);
    if (w->lim == NULL) return err ? err : SLUICE_EINVAL;
    w->lim->lease_slice = cp->lease_slice;
    w->lim->lease_hold_ns = cp->lease_hold_ns;
    err = sluice_store_register(e->store, w->lim);
    if (err != SLUICE_OK) {
        snprintf(errbuf, errlen, "registering limit '%s' with the store: %s", limname,
                 sluice_strerror(err));
        return err;
    }
    w->info.limiter = w->lim;
    w->info.quota = sluice_limiter_capacity(w->lim);
    w->info.window_s = window_seconds(cw, w->info.quota);
    return SLUICE_OK;
}

/* The token table of each store with live engines made by sl_engine_create: a reload
 * that creates the new engine before destroying the old one keeps the table (and the
 * outstanding tokens). Create/destroy only take this lock, never a check. */
typedef struct tok_reg {
    struct tok_reg *next;
    const sluice_store *store;
    sl_token_table *table;
    size_t refs;
} tok_reg;
static tok_reg *tok_regs;
static pthread_mutex_t tok_reg_mu = PTHREAD_MUTEX_INITIALIZER;

static sl_token_table *tok_ref(const sluice_store *st, size_t capacity, int *err) {
    pthread_mutex_lock(&tok_reg_mu);
    tok_reg *r = tok_regs;
    while (r != NULL && r->store != st) r = r->next;
    if (r == NULL && (r = calloc(1, sizeof(*r))) != NULL) {
        r->table = sl_token_table_create(capacity, err);
        if (r->table == NULL) {
            free(r);
            r = NULL;
        } else {
            r->store = st;
            r->next = tok_regs;
            tok_regs = r;
        }
    } else if (r == NULL && err) {
        *err = SLUICE_ENOMEM;
    }
    if (r != NULL) r->refs++;
    pthread_mutex_unlock(&tok_reg_mu);
    return r ? r->table : NULL;
}

static void tok_unref(sl_token_table *t) {
    pthread_mutex_lock(&tok_reg_mu);
    for (tok_reg **pp = &tok_regs; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->table == t) {
            tok_reg *r = *pp;
            if (--r->refs == 0) {
                *pp = r->next;
                sl_token_table_destroy(r->table);
                free(r);
            }
            break;
        }
    pthread_mutex_unlock(&tok_reg_mu);
}

void sl_engine_destroy(sl_engine *e) {
    if (e == NULL) return;
    if (e->shared_tokens && e->tokens != NULL) tok_unref(e->tokens);
    for (int u = 1; u < OVR_UNITS; u++) sluice_limiter_destroy(e->ovr[u].lim);
    for (size_t i = 0; i < e->n_all; i++)
        if (e->all[i] != NULL) sluice_limiter_destroy(e->all[i]->lim);
    for (size_t i = 0; i < e->n_pol; i++) {
        free(e->pol[i].win);
        if (e->pol[i].plan_win != NULL)
            for (size_t j = 0; j < e->pol[i].cp->n_plans; j++) free(e->pol[i].plan_win[j]);
        free(e->pol[i].plan_win);
    }
    free(e->pol);
    free(e->all);
    free(e);
}

sl_engine *sl_engine_create(const sl_config *cfg, sluice_store *store, int *err, char *errbuf,
                            size_t errbuf_len) {
    if (cfg == NULL || store == NULL)
        return sl_engine_create_with(cfg, store, NULL, err, errbuf, errbuf_len);
    int terr = 0;
    sl_token_table *t = tok_ref(store, (size_t)cfg->settings.store.max_tokens, &terr);
    if (t == NULL) {
        if (err) *err = terr ? terr : SLUICE_ENOMEM;
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "token table: %s",
                                           sluice_strerror(terr ? terr : SLUICE_ENOMEM));
        return NULL;
    }
    sl_engine *e = sl_engine_create_with(cfg, store, t, err, errbuf, errbuf_len);
    if (e == NULL) tok_unref(t);
    else e->shared_tokens = true;
    return e;
}

sl_engine *sl_engine_create_with(const sl_config *cfg, sluice_store *store,
                                 sl_token_table *tokens, int *err, char *errbuf,
                                 size_t errbuf_len) {
    char scratch[8];
    if (errbuf == NULL || errbuf_len == 0) {
        errbuf = scratch;
        errbuf_len = sizeof(scratch);
    }
    errbuf[0] = '\0';
    int rc = SLUICE_ENOMEM;
    if (cfg == NULL || store == NULL || tokens == NULL) {
        if (err) *err = SLUICE_EINVAL;
        snprintf(errbuf, errbuf_len, "no config, no store or no token table");
        return NULL;
    }
    sl_engine *e = calloc(1, sizeof(*e));
    if (e == NULL) goto fail;
    e->cfg = cfg;
    e->store = store;
    e->tokens = tokens;
    e->pol = calloc(cfg->n_pol ? cfg->n_pol : 1, sizeof(*e->pol));
    e->all = calloc(cfg->n_limiters + cfg->n_pol + 1, sizeof(*e->all));
    if (e->pol == NULL || e->all == NULL) goto fail;
    e->n_pol = cfg->n_pol;
    /* override windows: registered whether or not the config has envoy domains, since an
     * override bypasses the config */
    e->ovr_pol.name = "envoy-override";
    e->ovr_pol.objective = "protection";
    e->ovr_pol.envoy = true;
    e->ovr_pol.headers = true;
    e->ovr_pol.rollout_pct = 100;
    e->ovr_ep.cp = &e->ovr_pol;
    for (int u = 1; u < OVR_UNITS; u++) {
        sl_cwindow *cw = &e->ovr_cw[u];
        cw->spec.algo = SLUICE_FIXED_WINDOW;
        cw->spec.limit = UINT32_MAX;
        cw->spec.period_ns = ovr_secs[u] * SLUICE_NS_PER_S;
        cw->envoy_unit = u;
        cw->label = ovr_names[u];
        char lname[64];
        snprintf(lname, sizeof(lname), "envoy#override.%s", ovr_names[u]);
        rc = make_win(e, &e->ovr_ep, &e->ovr[u], cw, lname, NULL, errbuf, errbuf_len);
        if (rc != SLUICE_OK) goto fail;
        rc = SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < cfg->n_pol; i++) {
        const sl_cpolicy *cp = &cfg->pol[i];
        e_pol *ep = &e->pol[i];
        ep->cp = cp;
        if (cp->unlimited) {
            ep->win = calloc(1, sizeof(*ep->win));
            if (ep->win == NULL) goto fail;
            ep->nwin = 0;
            ep->win->cp = cp;
            ep->win->ep = ep;
            ep->win->info.name = cp->rule_name ? cp->rule_name : cp->name;
            ep->win->info.policy = cp->name;
            ep->win->info.objective = cp->objective;
            ep->win->info.detailed_metric = cp->detailed_metric || cp->value_to_metric;
            continue;
        }
        ep->win = calloc(cp->nwin ? cp->nwin : 1, sizeof(*ep->win));
        if (ep->win == NULL) goto fail;
        ep->nwin = cp->nwin;
        for (size_t j = 0; j < cp->nwin; j++) {
            rc = make_win(e, ep, &ep->win[j], &cp->win[j], cp->name, NULL, errbuf, errbuf_len);
            e->all[e->n_all++] = &ep->win[j];
            if (rc != SLUICE_OK) goto fail;
        }
        if (cp->n_plans > 0) {
            ep->plan_win = calloc(cp->n_plans, sizeof(*ep->plan_win));
            if (ep->plan_win == NULL) goto fail;
            for (size_t k = 0; k < cp->n_plans; k++) {
                const sl_cplan *pl = &cp->plans[k];
                ep->plan_win[k] = calloc(pl->nwin ? pl->nwin : 1, sizeof(e_win));
                if (ep->plan_win[k] == NULL) goto fail;
                char lname[256];
                snprintf(lname, sizeof(lname), "%s@%s", cp->name, pl->name);
                for (size_t j = 0; j < pl->nwin; j++) {
                    rc = make_win(e, ep, &ep->plan_win[k][j], &pl->win[j], lname, pl->name,
                                  errbuf, errbuf_len);
                    e->all[e->n_all++] = &ep->plan_win[k][j];
                    if (rc != SLUICE_OK) goto fail;
                }
            }
        }
        rc = SLUICE_ENOMEM;
    }
    if (err) *err = SLUICE_OK;
    return e;
fail:
    if (err) *err = rc;
    if (rc == SLUICE_ENOMEM && errbuf[0] == '\0') snprintf(errbuf, errbuf_len, "out of memory");
    sl_engine_destroy(e);
    return NULL;
}

const sl_config *sl_engine_config(const sl_engine *e) { return e ? e->cfg : NULL; }

/* ---- attributes --------------------------------------------------------------------- */

static bool ieq(sl_str a, const char *b, size_t blen) {
    return a.p != NULL && a.len == blen && strncasecmp(a.p, b, blen) == 0;
}

static sl_str find_header(const sl_request *r, const char *name, size_t nlen) {
    for (size_t i = 0; i < r->n_headers; i++)
        if (ieq(r->headers[i].name, name, nlen)) return r->headers[i].value;
    return (sl_str){NULL, 0};
}

static sl_str find_entry(const sl_descriptor *d, const char *name, size_t nlen) {
    if (d == NULL) return (sl_str){NULL, 0};
    for (size_t i = 0; i < d->n; i++)
        if (d->entries[i].key.p != NULL && d->entries[i].key.len == nlen &&
            memcmp(d->entries[i].key.p, name, nlen) == 0)
            return d->entries[i].value;
    return (sl_str){NULL, 0};
}

static size_t path_len(sl_str p) {
    if (p.p == NULL) return 0;
    for (size_t i = 0; i < p.len; i++)
        if (p.p[i] == '?' || p.p[i] == '#') return i;
    return p.len;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool unreserved(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

/*
 * The path as policies see it: without query or fragment, percent-encoded unreserved
 * characters decoded (and other escapes' hex upper-cased), runs of '/' collapsed, "."
 * and ".." segments resolved (RFC 3986 section 6.2.2). Why: a limit on /login must
 * also hold for //login, /./login, /x/../login and /%6Cogin, which the backend treats as
 * the same resource; otherwise a client could side-step it by rewriting the path.
 * A trailing '/' is kept (it may name another resource). Paths not starting with '/'
 * are used as they are (query still removed). `out` holds at least path_len(in) bytes:
 * the output is never longer than the input (an escape stays 3 bytes or becomes 1, and
 * segment resolution only removes), so any length is normalised.
 * Shared with the config loader (sl__path_norm) so config paths compare like requests.
 */
static sl_str path_norm(sl_str in, char *out) {
    size_t n = path_len(in);
    if (in.p == NULL || n == 0 || in.p[0] != '/') return (sl_str){in.p, n};
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in.p[i];
        if (c == '%' && i + 2 < n && hexval(in.p[i + 1]) >= 0 && hexval(in.p[i + 2]) >= 0) {
            int v = hexval(in.p[i + 1]) * 16 + hexval(in.p[i + 2]);
            if (unreserved(v)) {
                out[o++] = (char)v;
            } else {
                out[o++] = '%';
                out[o++] = "0123456789ABCDEF"[v >> 4];
                out[o++] = "0123456789ABCDEF"[v & 15];
            }
            i += 2;
            continue;
        }
        out[o++] = c;
    }
    /* segments, in place: the write position never passes the read position */
    size_t r = 0, w = 0;
    bool dir = false; /* the path ends as a directory ("/", "/." or "/..") */
    while (r < o) {
        if (out[r] == '/') {
            r++;
            dir = true;
            continue;
        }
        size_t st = r;
        while (r < o && out[r] != '/') r++;
        size_t len = r - st;
        if (len == 1 && out[st] == '.') {
            dir = true;
            continue;
        }
        if (len == 2 && out[st] == '.' && out[st + 1] == '.') {
            while (w > 0 && out[w - 1] != '/') w--;
            if (w > 0) w--;
            dir = true;
            continue;
        }
        out[w++] = '/';
        memmove(out + w, out + st, len);
        w += len;
        dir = false;
    }
    if (w == 0 || dir) out[w++] = '/';
    return (sl_str){out, w};
}

size_t sl__path_norm(const char *in, size_t len, char *out) {
    sl_str r = path_norm((sl_str){in, len}, out);
    if (r.p != out) memmove(out, r.p, r.len);
    return r.len;
}

/* Host without port and trailing dot, as a span of the request (any length: a long Host
 * must not count as absent); its length is 0 when absent. Compared case-insensitively. */
static sl_str host_span(sl_str h) {
    if (h.p == NULL || h.len == 0) return (sl_str){NULL, 0};
    size_t n = h.len;
    if (h.p[0] == '[') {
        const char *rb = memchr(h.p, ']', h.len);
        if (rb != NULL) n = (size_t)(rb - h.p) + 1;
    } else {
        const char *c = memchr(h.p, ':', h.len);
        if (c != NULL && memchr(c + 1, ':', h.len - (size_t)(c - h.p) - 1) == NULL)
            n = (size_t)(c - h.p);
    }
    if (n > 1 && h.p[n - 1] == '.') n--; /* "example.com." is example.com */
    return (sl_str){n ? h.p : NULL, n};
}

static char lower_c(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch; }

/* sl__glob over a host compared case-insensitively (the pattern is lowercase): '*'
 * matches any run. Iterative with one backtrack point, so linear-ish on long hosts. */
static bool host_glob(const char *pat, const char *s, size_t len) {
    size_t i = 0;
    const char *star = NULL;
    size_t star_i = 0;
    while (i < len) {
        if (*pat == '*') {
            star = pat++;
            star_i = i;
        } else if (*pat != '\0' && *pat == lower_c(s[i])) {
            pat++;
            i++;
        } else if (star != NULL) {
            pat = star + 1;
            i = ++star_i;
        } else {
            return false;
        }
    }
    while (*pat == '*') pat++;
    return *pat == '\0';
}

/* Client address in binary (4 or 16 bytes), IPv6 masked to `prefix` bits so one /64 is
 * one client; IPv4-mapped IPv6 addresses count as IPv4. 0 when absent or unparsable. */
static size_t client_ip(sl_str ip, unsigned prefix, unsigned char out[16]) {
    char buf[64];
    if (ip.p == NULL || ip.len == 0 || ip.len >= sizeof(buf)) return 0;
    size_t n = ip.len;
    const char *p = ip.p;
    if (p[0] == '[' && n > 2 && p[n - 1] == ']') {
        p++;
        n -= 2;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *pct = strchr(buf, '%');
    if (pct != NULL) *pct = '\0';
    if (inet_pton(AF_INET, buf, out) == 1) return 4;
    if (inet_pton(AF_INET6, buf, out) != 1) return 0;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(out, mapped, 12) == 0) {
        memmove(out, out + 12, 4);
        return 4;
    }
    if (prefix < 128) {
        for (unsigned bit = prefix; bit < 128; bit++) out[bit / 8] &= (unsigned char)~(0x80u >> (bit % 8));
    }
    return 16;
}

/* ---- key composition ---------------------------------------------------------------- */

typedef struct kbuf {
    unsigned char *p;
    size_t len, cap;
    bool overflow;
} kbuf;

static void kput(kbuf *k, unsigned char tag, const void *b, size_t n) {
    if (n > 0xffff || k->len + 3 + n > k->cap) {
        k->overflow = true;
        return;
    }
    k->p[k->len++] = tag;
    k->p[k->len++] = (unsigned char)(n >> 8);
    k->p[k->len++] = (unsigned char)n;
    if (n) memcpy(k->p + k->len, b, n);
    k->len += n;
}

typedef struct sl_ctxreq {
    const sl_request *req;
    const sl_descriptor *desc;
    const sl_enode **epath; /* envoy: node per level */
    sl_str path;            /* normalised path (path_norm) */
} ctxreq;

/* Appends part `pt` of the request; false when the request does not carry it. An empty
 * value counts as missing: "" must not become one bucket shared by every such client. */
static bool put_part(kbuf *k, const ctxreq *c, const sl_cpolicy *cp, const sl_part *pt) {
    const sl_request *r = c->req;
    switch (pt->kind) {
    case SL_PART_CLIENT_IP: {
        unsigned char ip[16];
        size_t n = client_ip(r->client_ip, pt->v6_prefix, ip);
        if (n == 0) return false;
        kput(k, 'i', ip, n);
        return true;
    }
    case SL_PART_HEADER: {
        sl_str v = find_header(r, pt->name, pt->name_len);
        if (v.p == NULL || v.len == 0) return false;
        kput(k, 'h', v.p, v.len);
        return true;
    }
    case SL_PART_METHOD:
        if (r->method.p == NULL || r->method.len == 0) return false;
        kput(k, 'm', r->method.p, r->method.len);
        return true;
    case SL_PART_PATH:
        if (c->path.p == NULL || c->path.len == 0) return false;
        kput(k, 'p', c->path.p, c->path.len);
        return true;
    case SL_PART_ROUTE:
        if (r->route.p != NULL && r->route.len > 0) {
            kput(k, 'r', r->route.p, r->route.len);
            return true;
        }
        if (cp->path != NULL) {
            kput(k, 'r', cp->path, strlen(cp->path));
            return true;
        }
        return false;
    case SL_PART_HOST: {
        sl_str h = host_span(r->host);
        if (h.len == 0) return false;
        size_t at = k->len + 3;
        kput(k, 'o', h.p, h.len);
        if (!k->overflow)
            for (size_t i = 0; i < h.len; i++) k->p[at + i] = (unsigned char)lower_c(h.p[i]);
        return true;
    }
    case SL_PART_DESCRIPTOR: {
        sl_str v = find_entry(c->desc, pt->name, pt->name_len);
        if (v.p == NULL || v.len == 0) return false; /* "" would be one shared bucket */
        kput(k, 'd', v.p, v.len);
        return true;
    }
    case SL_PART_ENVOY:
        if (c->desc == NULL) return false;
        for (size_t i = 0; i < c->desc->n; i++) {
            const sl_entry *en = &c->desc->entries[i];
            kput(k, 'k', en->key.p, en->key.len);
            const sl_enode *node = c->epath ? c->epath[i] : NULL;
            /* share_threshold: every value matching the pattern shares one counter */
            if (node != NULL && node->share_threshold && node->value != NULL)
                kput(k, 'w', node->value, strlen(node->value));
            else
                kput(k, 'v', en->value.p, en->value.len);
        }
        return true;
    case SL_PART_BODY_BYTES: return false;
    }
    return false;
}

/* Tries each chain in order; returns the chain used, -1 when none is complete. */
static int compose_key(kbuf *k, const ctxreq *c, const sl_cpolicy *cp) {
    size_t start = k->len;
    for (size_t ch = 0; ch < cp->n_chains; ch++) {
        k->len = start;
        if (k->len >= k->cap) {
            k->overflow = true;
            return -1;
        }
        k->p[k->len++] = (unsigned char)ch;
        bool complete = true;
        for (size_t i = 0; i < cp->chains[ch].n && complete; i++)
            complete = put_part(k, c, cp, &cp->chains[ch].parts[i]);
        if (complete || k->overflow) return k->overflow ? -1 : (int)ch;
    }
    k->len = start;
    return -1;
}

static bool parse_cost_str(sl_str v, uint64_t *out) {
    if (v.p == NULL || v.len == 0 || v.len > 19) return false;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') return false;
        n = n * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = n;
    return true;
}

/* Per-operation cost first ("POST /export": 50), then the attribute, then the default;
 * descriptor requests without a stated cost use Envoy's hits_addend. */
static uint64_t request_cost(const ctxreq *c, const sl_cpolicy *cp) {
    const sl_request *r = c->req;
    if (c->desc != NULL && !cp->cost_explicit) {
        if (c->desc->has_hits_addend) return c->desc->hits_addend;
        return r->hits_addend ? r->hits_addend : 1;
    }
    for (size_t i = 0; i < cp->n_ops; i++) {
        const sl_op_cost *op = &cp->ops[i];
        if (op->method[0] != '*' &&
            !(r->method.p && r->method.len == strlen(op->method) &&
              memcmp(r->method.p, op->method, r->method.len) == 0))
            continue;
        if (c->path.p != NULL && sl__glob(op->path, c->path.p, c->path.len)) return op->cost;
    }
    if (cp->cost_from_set) {
        uint64_t v;
        /* A header or the body size is the client's to choose: 0 would turn its request
         * into a peek that consumes nothing, so such a cost is at least 1. */
        switch (cp->cost_from.kind) {
        case SL_PART_BODY_BYTES:
            if (r->has_body_bytes) return r->body_bytes ? r->body_bytes : 1;
            break;
        case SL_PART_HEADER:
            if (parse_cost_str(find_header(r, cp->cost_from.name, cp->cost_from.name_len), &v))
                return v ? v : 1;
            break;
        case SL_PART_DESCRIPTOR:
            if (parse_cost_str(find_entry(c->desc, cp->cost_from.name, cp->cost_from.name_len),
                               &v))
                return v;
            break;
        default: break;
        }
    }
    return cp->cost_default;
}

/* ---- matching ----------------------------------------------------------------------- */

static bool cond_ok(const sl_hdr_cond *c, sl_str v) {
    if (c->pattern == NULL) return c->present ? v.p != NULL : v.p == NULL;
    return v.p != NULL && sl__glob(c->pattern, v.p, v.len);
}

static bool match_http(const sl_cpolicy *cp, const sl_request *r, sl_str path) {
    if (cp->n_methods > 0) {
        bool any = false;
        for (size_t i = 0; i < cp->n_methods && !any; i++)
            any = r->method.p && r->method.len == strlen(cp->methods[i]) &&
                  memcmp(r->method.p, cp->methods[i], r->method.len) == 0;
        if (!any) return false;
    }
    if (cp->path_kind != SL_PATH_ANY) {
        if (path.p == NULL) return false;
        size_t pl = path.len, n = strlen(cp->path);
        switch (cp->path_kind) {
        case SL_PATH_EXACT:
            if (pl != n || memcmp(path.p, cp->path, n) != 0) return false;
            break;
        case SL_PATH_PREFIX:
            if (pl < n || memcmp(path.p, cp->path, n) != 0) return false;
            break;
        default:
            if (!sl__glob(cp->path, path.p, pl)) return false;
        }
    }
    if (cp->host != NULL) {
        sl_str h = host_span(r->host);
        if (h.len == 0 || !host_glob(cp->host, h.p, h.len)) return false;
    }
    for (size_t i = 0; i < cp->n_hdr; i++)
        if (!cond_ok(&cp->hdr[i], find_header(r, cp->hdr[i].name, strlen(cp->hdr[i].name))))
            return false;
    return true;
}

static bool match_desc(const sl_cpolicy *cp, const sl_descriptor *d) {
    for (size_t i = 0; i < cp->n_desc; i++)
        if (!cond_ok(&cp->desc[i], find_entry(d, cp->desc[i].name, strlen(cp->desc[i].name))))
            return false;
    return true;
}

/* ---- building a verdict ------------------------------------------------------------- */

static void verdict_init(sl_verdict *v) {
    v->action = SL_ALLOW;
    v->status = 200;
    v->recheck = false;
    v->shadow_limited = false;
    v->store_error = false;
    v->error = 0;
    v->delay_ns = 0;
    v->retry_after_ns = 0;
    v->deciding = -1;
    v->n = 0;
    v->keys_used = 0;
    v->missing_key_policy = NULL;
    v->token_id = 0;
    v->decided_at = (sluice_time){0, 0};
}

static bool in_rollout(const sl_cpolicy *cp, const unsigned char *key, size_t len) {
    if (cp->rollout_pct >= 100) return true;
    if (cp->rollout_pct == 0) return false;
    return sl__hash64(cp->name, strlen(cp->name), key, len) % 100 < cp->rollout_pct;
}

static const sl_cplan *pick_plan(const ctxreq *c, const sl_cpolicy *cp, size_t *idx) {
    if (!cp->plan_from_set || c == NULL) return NULL;
    unsigned char buf[600];
    kbuf k = {buf, 0, sizeof(buf), false};
    if (!put_part(&k, c, cp, &cp->plan_from) || k.overflow || k.len < 3) return NULL;
    const char *val = (const char *)buf + 3;
    size_t vl = k.len - 3;
    for (size_t i = 0; i < cp->n_plans; i++)
        if (strlen(cp->plans[i].name) == vl && memcmp(cp->plans[i].name, val, vl) == 0) {
            *idx = i;
            return &cp->plans[i];
        }
    return NULL;
}

/* Adds the windows of `ep` for the key already at v->keys[koff..koff+klen). */
static int add_items(const e_pol *ep, sl_verdict *v, size_t koff, size_t klen, uint64_t cost,
                     int desc, const ctxreq *c) {
    const sl_cpolicy *cp = ep->cp;
    bool shadow = cp->react == SL_REACT_SHADOW || !in_rollout(cp, v->keys + koff, klen);
    e_win *wins = ep->win;
    size_t nw = ep->nwin;
    size_t pi;
    if (pick_plan(c, cp, &pi) != NULL) {
        wins = ep->plan_win[pi];
        nw = cp->plans[pi].nwin;
    }
    if (cp->unlimited) {
        if (v->n >= SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
        sl_verdict_item *it = &v->items[v->n++];
        memset(it, 0, sizeof(*it));
        it->info = &ep->win[0].info;
        it->descriptor = desc;
        it->unlimited = true;
        it->key_off = (uint16_t)koff;
        it->key_len = (uint16_t)klen;
        it->result.allowed = 1;
        it->result.remaining = UINT32_MAX;
        return SLUICE_OK;
    }
    if (v->n + nw > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    for (size_t i = 0; i < nw; i++) {
        sl_verdict_item *it = &v->items[v->n++];
        memset(it, 0, sizeof(*it));
        it->info = &wins[i].info;
        it->descriptor = desc;
        it->key_off = (uint16_t)koff;
        it->key_len = (uint16_t)klen;
        it->cost = wins[i].cw->spec.algo == SLUICE_CONCURRENCY ? 1 : cost;
        it->shadow = shadow;
        it->settle = cp->settle && wins[i].cw->spec.algo != SLUICE_CONCURRENCY;
    }
    return SLUICE_OK;
}

static int add_policy(const e_pol *ep, sl_verdict *v, const ctxreq *c, int desc) {
    const sl_cpolicy *cp = ep->cp;
    kbuf k = {v->keys + v->keys_used, 0, SL_VERDICT_KEYS - v->keys_used, false};
    int ch = compose_key(&k, c, cp);
    if (k.overflow) return SLUICE_ERANGE;
    if (ch < 0) {
        if (cp->on_missing == SL_MISSING_SKIP || cp->rollout_pct == 0 ||
            cp->react == SL_REACT_SHADOW)
            return SLUICE_OK;
        if (v->missing_key_policy == NULL) v->missing_key_policy = cp->name;
        return SLUICE_OK;
    }
    size_t koff = v->keys_used;
    v->keys_used += k.len;
    return add_items(ep, v, koff, k.len, request_cost(c, cp), desc, c);
}

static const e_win *item_win(const sl_verdict_item *it) { return sl__item_win(it); }

/* Envoy `replaces`: a matched rule naming another rule drops that rule's items, so the
 * replaced counter is neither checked nor consumed. */
static void apply_replaces(sl_verdict *v) {
    size_t out = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_cpolicy *pi = item_win(&v->items[i])->cp;
        bool drop = false;
        if (pi->rule_name != NULL)
            for (size_t j = 0; j < v->n && !drop; j++) {
                const sl_cpolicy *pj = item_win(&v->items[j])->cp;
                if (pj == pi) continue;
                for (size_t r = 0; r < pj->n_replaces && !drop; r++)
                    drop = strcmp(pj->replaces[r], pi->rule_name) == 0;
            }
        if (!drop) v->items[out++] = v->items[i];
    }
    v->n = out;
}

static bool later_retry(int64_t a, int64_t b) {
    if (a == SLUICE_NEVER) return b != SLUICE_NEVER;
    if (b == SLUICE_NEVER) return false;
    return a > b;
}

/* remaining/limit of a below that of b (cross-multiplied: exact, no division) */
static bool less_share(const sluice_result *a, const sluice_result *b) {
    return (unsigned __int128)a->remaining * (b->limit ? b->limit : 1) <
           (unsigned __int128)b->remaining * (a->limit ? a->limit : 1);
}

static void deny_result(const sl_verdict_item *it, sluice_time now, sluice_result *r) {
    memset(r, 0, sizeof(*r));
    int64_t per = item_win(it)->cw->spec.period_ns;
    r->allowed = 0;
    r->retry_after_ns = SLUICE_NEVER;
    r->reset_after_ns = per > 0 ? per - (now.wall_ns % per) : 0;
}

/* Decides `idx` (indices into v->items) all-or-nothing; `peek` decides with cost 0. */
static int decide_group(const sl_engine *e, sl_verdict *v, const size_t *idx, size_t n,
                        bool peek, sluice_time now, bool *allowed, int *deciding) {
    sluice_item items[SLUICE_MAX_ITEMS];
    size_t map[SLUICE_MAX_ITEMS], m = 0;
    bool deny = false;
    for (size_t i = 0; i < n; i++) {
        sl_verdict_item *it = &v->items[idx[i]];
        const e_win *w = item_win(it);
        if (w->cw != NULL && w->cw->deny_all) {
            deny_result(it, now, &it->result);
            deny = true;
            continue;
        }
        items[m].limiter = w->lim;
        items[m].key = v->keys + it->key_off;
        items[m].key_len = it->key_len;
        items[m].cost = peek ? 0 : it->cost;
        map[m++] = idx[i];
    }
    *allowed = !deny;
    *deciding = -1;
    if (m > 0) {
        if (deny && !peek) {
            /* a block-list rule rejects the request: report the others without consuming */
            for (size_t i = 0; i < m; i++) items[i].cost = 0;
        }
        sluice_decision dec;
        int rc = sl_store_decide(e->store, items, m, now, &dec);
        if (rc != SLUICE_OK) return rc;
        for (size_t i = 0; i < m && i < dec.n; i++) v->items[map[i]].result = dec.results[i];
        if (!dec.allowed && !peek && !deny) {
            /* sluice_decide reports, for the windows that would have admitted, what would
             * remain had the request gone through; nothing was consumed, so the client
             * must be told the real state: peek again (rejections only, so the fast path
             * stays one call). */
            for (size_t i = 0; i < m; i++) {
                items[i].cost = 0;
                v->items[map[i]].result.lease = 0; /* nothing was acquired */
                v->items[map[i]].result.delay_ns = 0;
            }
            sluice_decision pk;
            if (sl_store_decide(e->store, items, m, now, &pk) == SLUICE_OK)
                for (size_t i = 0; i < m && i < pk.n; i++)
                    if (v->items[map[i]].result.allowed) {
                        v->items[map[i]].result.remaining = pk.results[i].remaining;
                        v->items[map[i]].result.reset_after_ns = pk.results[i].reset_after_ns;
                    }
        }
        if (!dec.allowed) *allowed = false;
        if (dec.deciding >= 0 && (size_t)dec.deciding < m) *deciding = (int)map[dec.deciding];
    }
    return SLUICE_OK;
}

/*
 * Override windows count up to UINT32_MAX, so the store admits them; the override's own
 * requests_per_unit is applied here. When one is exceeded after the decision consumed,
 * everything that decision took is given back (settled to 0, leases released).
 * Trade-off: consume-then-refund, so a concurrent decision may briefly see those units
 * taken (it errs on the side of limiting); the alternative, a peek first, would let two
 * racing requests both pass the last unit.
 */
static void overrides(const sl_engine *e, sl_verdict *v, const size_t *enf, size_t ne,
                      sluice_time now, bool *allowed) {
    bool any = false, over = false;
    for (size_t i = 0; i < ne; i++) {
        sl_verdict_item *it = &v->items[enf[i]];
        if (!it->override) continue;
        any = true;
        sluice_result *r = &it->result;
        uint64_t used = r->limit - r->remaining; /* includes this cost if it was consumed */
        uint64_t before = *allowed ? used - it->cost : used;
        bool ok = before + it->cost <= it->override_limit;
        over |= !ok;
        r->limit = it->override_limit;
        r->allowed = ok;
        if (ok) {
            r->remaining = it->override_limit - before - (*allowed ? it->cost : 0);
            r->retry_after_ns = 0;
        } else {
            r->remaining = 0;
            r->retry_after_ns = it->cost > it->override_limit ? SLUICE_NEVER : r->reset_after_ns;
        }
    }
    if (!any || !over) return;
    if (*allowed)
        for (size_t i = 0; i < ne; i++) {
            sl_verdict_item *it = &v->items[enf[i]];
            const e_win *w = item_win(it);
            if (w->lim == NULL) continue;
            if (it->result.lease != 0) {
                st_release(e->store, w->lim, v->keys + it->key_off, it->key_len,
                               it->result.lease, now);
                it->result.lease = 0;
            } else if (it->cost > 0) {
                sluice_result r;
                st_settle(e->store, w->lim, v->keys + it->key_off, it->key_len, it->cost, 0,
                              now, &r);
                if (!it->override) it->result.remaining = r.remaining;
            }
        }
    *allowed = false;
}

/*
 * After count_rejected charged a rejected attempt, another window may now be full too
 * (the charge counts there as well), so the Retry-After reported before the charge could
 * be too early. The state is read again (a peek per window) and, for each window that can
 * no longer take the cost, its retry is the end of its window or period: count_rejected
 * is restricted to fixed_window and quota, whose room comes back only then, so this is
 * exact. The largest retry decides.
 */
static void recompute_retry(const sl_engine *e, sl_verdict *v, const size_t *enf, size_t ne,
                            sluice_time now) {
    int dec = v->deciding;
    for (size_t i = 0; i < ne; i++) {
        sl_verdict_item *it = &v->items[enf[i]];
        const e_win *w = item_win(it);
        if (w->lim == NULL || it->cost == 0) continue;
        sluice_item pk = {w->lim, v->keys + it->key_off, it->key_len, 0};
        sluice_decision d;
        if (sl_store_decide(e->store, &pk, 1, now, &d) != SLUICE_OK) continue;
        it->result.remaining = d.results[0].remaining;
        it->result.reset_after_ns = d.results[0].reset_after_ns;
        if (d.results[0].remaining >= it->cost) continue;
        int64_t ra = it->cost > d.results[0].limit ? SLUICE_NEVER : d.results[0].reset_after_ns;
        if (it->result.allowed || later_retry(ra, it->result.retry_after_ns))
            it->result.retry_after_ns = ra;
        it->result.allowed = 0;
        it->would_limit = true;
        if (dec < 0 || later_retry(it->result.retry_after_ns, v->items[dec].result.retry_after_ns))
            dec = (int)enf[i];
    }
    v->deciding = dec;
    if (dec >= 0) v->retry_after_ns = v->items[dec].result.retry_after_ns;
}

/* The second half of every check: one decision over the enforced items, shadow policies
 * each on their own (a shadow rule never blocks another rule's counting), then the
 * reaction of the policies that rejected. */
/* Records the single-use token id of an admitted verdict that holds something to settle
 * or release, alive until the longest of its windows (a reservation can be settled while
 * the window or period that counted it lasts) and leases. */
/* Tokens shared between instances (sl_engine_tokens_shared): set once, before workers. */
static bool g_tokens_shared;

/* How long a token's operation on window w stays valid after the decision: the window or
 * calendar period (a charge may still come in the next one), the lease, or the time a
 * bucket takes to refill whole. */
static int64_t item_life(const e_win *w, bool settle, bool lease) {
    const sluice_limit_spec *sp = &w->cw->spec;
    int64_t life = SLUICE_NS_PER_S;
    if (settle) {
        if (sp->period_ns > life) life = sp->period_ns;
        if (w->info.window_s > 0 && w->info.window_s * SLUICE_NS_PER_S > life)
            life = w->info.window_s * SLUICE_NS_PER_S;
        uint64_t cap = sluice_limiter_capacity(w->lim);
        if (sp->limit > 0 && cap > sp->limit) {
            unsigned __int128 refill = (unsigned __int128)cap * (uint64_t)sp->period_ns / sp->limit;
            if (refill > (unsigned __int128)life) life = refill > INT64_MAX ? INT64_MAX : (int64_t)refill;
        }
    }
    if (lease && sp->lease_ns > life) life = sp->lease_ns;
    return life;
}

static void issue_token(const sl_engine *e, sl_verdict *v, sluice_time now) {
    unsigned pending = 0;
    int64_t life = SLUICE_NS_PER_S;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        const e_win *w = item_win(it);
        if (it->unlimited || !it->consumed || w->lim == NULL) continue;
        if (it->settle) pending |= SL_TOK_SETTLE;
        if (it->result.lease != 0) pending |= SL_TOK_RELEASE;
        if (it->settle && it->result.reset_after_ns > life) life = it->result.reset_after_ns;
        int64_t l = item_life(w, it->settle, it->result.lease != 0);
        if (l > life) life = l;
    }
    if (pending == 0) return;
    if (g_tokens_shared) { /* single use is claimed in the shared store */
        v->token_id = sl__token_id(e->tokens);
        return;
    }
    int64_t exp = now.mono_ns > INT64_MAX - life ? INT64_MAX : now.mono_ns + life;
    v->token_id = sl__token_issue(e->tokens, pending, exp, now.mono_ns);
}

/* The single use of operation `op` of token `id` (decided at `at`, valid for `life`):
 * this process's table, or, with shared tokens, a claim in the shared store (which may
 * answer later: SL_REDIS_PENDING-like codes pass through). */
static int take_token(const sl_engine *e, uint64_t id, unsigned op, sluice_time at, int64_t life,
                      sluice_time now) {
    if (!g_tokens_shared || tl_hooks == NULL || tl_hooks->claim == NULL)
        return sl__token_take(e->tokens, id, op, now.mono_ns) ? SLUICE_OK : SLUICE_ENOTFOUND;
    /* instances share only the wall clock */
    int64_t age = now.wall_ns - at.wall_ns;
    if (age > life) return SLUICE_ENOTFOUND; /* expired */
    if (age < 0) age = 0;
    return tl_hooks->claim(tl_hooks->ctx, id, op, life - age + SLUICE_NS_PER_S, now);
}

static int decide(const sl_engine *e, sl_verdict *v, sluice_time now) {
    v->decided_at = now;
    if (v->missing_key_policy != NULL) {
        v->action = SL_REJECT;
        v->status = 400;
        return SLUICE_OK;
    }
    size_t enf[SLUICE_MAX_ITEMS], ne = 0;
    for (size_t i = 0; i < v->n; i++)
        if (!v->items[i].shadow && !v->items[i].unlimited) enf[ne++] = i;
    bool allowed = true;
    int dummy;
    int rc = ne ? decide_group(e, v, enf, ne, false, now, &allowed, &dummy) : SLUICE_OK;
    if (rc != SLUICE_OK && !is_store_failure(rc)) return fail(v, rc);
    if (rc != SLUICE_OK) {
        bool closed = false;
        for (size_t i = 0; i < ne; i++) closed |= item_win(&v->items[enf[i]])->cp->fail_closed;
        v->store_error = true;
        v->error = rc;
        v->action = closed ? SL_FAIL : SL_ALLOW;
        v->status = closed ? 503 : 200;
        return SLUICE_OK;
    }
    if (ne > 0) overrides(e, v, enf, ne, now, &allowed);
    /* shadow policies: counted as if enforced when the request goes through */
    for (size_t i = 0; i < v->n; i++) {
        if (!v->items[i].shadow || v->items[i].unlimited) continue;
        const e_pol *ep = item_win(&v->items[i])->ep;
        bool first = true;
        for (size_t j = 0; j < i; j++)
            if (v->items[j].shadow && item_win(&v->items[j])->ep == ep &&
                v->items[j].key_off == v->items[i].key_off)
                first = false;
        if (!first) continue;
        size_t grp[SLUICE_MAX_ITEMS], ng = 0;
        for (size_t j = i; j < v->n; j++)
            if (v->items[j].shadow && item_win(&v->items[j])->ep == ep &&
                v->items[j].key_off == v->items[i].key_off)
                grp[ng++] = j;
        bool ok;
        if (decide_group(e, v, grp, ng, !allowed, now, &ok, &dummy) != SLUICE_OK) continue;
        for (size_t j = 0; j < ng; j++) {
            v->items[grp[j]].consumed = allowed && ok;
            if (!v->items[grp[j]].result.allowed) {
                v->items[grp[j]].would_limit = true;
                v->shadow_limited = true;
            }
        }
    }
    /* deciding item among the enforced ones */
    int dec = -1;
    for (size_t i = 0; i < ne; i++) {
        sl_verdict_item *it = &v->items[enf[i]];
        it->would_limit = !it->result.allowed;
        if (dec < 0) {
            dec = (int)enf[i];
            continue;
        }
        const sluice_result *a = &it->result, *b = &v->items[dec].result;
        if (!allowed) {
            if (!a->allowed && (b->allowed || later_retry(a->retry_after_ns, b->retry_after_ns)))
                dec = (int)enf[i];
        } else if (less_share(a, b)) {
            dec = (int)enf[i];
        }
    }
    v->deciding = dec;
    for (size_t i = 0; i < ne; i++) v->items[enf[i]].consumed = allowed;
    if (allowed) {
        int64_t delay = 0;
        for (size_t i = 0; i < ne; i++)
            if (v->items[enf[i]].result.delay_ns > delay) delay = v->items[enf[i]].result.delay_ns;
        if (delay > 0) {
            v->action = SL_DELAY;
            v->delay_ns = delay;
        }
        issue_token(e, v, now);
        return SLUICE_OK;
    }
    /* Delay instead of reject only when every rejecting policy allows a delay that long:
     * then the caller waits and checks again (nothing was consumed). */
    bool can_delay = true;
    int64_t wait = 0;
    for (size_t i = 0; i < ne; i++) {
        const sl_verdict_item *it = &v->items[enf[i]];
        if (it->result.allowed) continue;
        const sl_cpolicy *cp = item_win(it)->cp;
        if (cp->react != SL_REACT_DELAY || it->result.retry_after_ns == SLUICE_NEVER ||
            it->result.retry_after_ns > cp->max_delay_ns)
            can_delay = false;
        else if (it->result.retry_after_ns > wait)
            wait = it->result.retry_after_ns;
    }
    if (can_delay) {
        v->action = SL_DELAY;
        v->recheck = true;
        v->delay_ns = wait > 0 ? wait : 1;
        return SLUICE_OK;
    }
    v->action = SL_REJECT;
    v->status = 429;
    v->retry_after_ns = dec >= 0 ? v->items[dec].result.retry_after_ns : SLUICE_NEVER;
    /* count_rejected: the attempt is charged anyway (even past the limit), so a client
     * that keeps hammering stays limited until the window or period ends. */
    bool charged = false;
    for (size_t i = 0; i < ne; i++) {
        sl_verdict_item *it = &v->items[enf[i]];
        const e_win *w = item_win(it);
        if (!w->cp->count_rejected || w->lim == NULL || it->cost == 0) continue;
        sluice_result r;
        if (st_settle(e->store, w->lim, v->keys + it->key_off, it->key_len, 0, it->cost, now,
                          &r) == SLUICE_OK) {
            it->result.remaining = r.remaining;
            it->consumed = true; /* charged, not reserved: settle/release leave it alone */
            it->settle = false;
            charged = true;
        }
    }
    if (charged) recompute_retry(e, v, enf, ne, now);
    return SLUICE_OK;
}

static const sl_edomain *find_domain(const sl_config *cfg, sl_str d) {
    for (size_t i = 0; i < cfg->n_domains; i++)
        if (strlen(cfg->domains[i].domain) == d.len &&
            memcmp(cfg->domains[i].domain, d.p, d.len) == 0)
            return &cfg->domains[i];
    return NULL;
}

/* A request the engine could not decide (not a store failure): an error answered 500,
 * never admitted, whatever on_store_error says. */
static int fail(sl_verdict *v, int rc) {
    v->action = SL_ERROR;
    v->status = rc == SLUICE_ENOTFOUND ? 404 : 500; /* an unknown policy name */
    v->store_error = false;
    v->error = rc;
    return rc;
}

/* Failures of the shared state itself, to which on_store_error applies; every other
 * error of a decision (ERANGE, ETOOMANY, EINVAL, ...) is the engine's and answered 500. */
static bool is_store_failure(int rc) {
    return rc == SLUICE_ESTORE || rc == SLUICE_EFULL || rc == SLUICE_ENOMEM || rc == SLUICE_EIO;
}

/* A descriptor carrying its own limit: counted under domain + entries in the unit's
 * override window, with Envoy's hits_addend as the cost. */
static int add_override(const sl_engine *e, sl_verdict *v, const sl_request *req,
                        const sl_descriptor *desc, int d) {
    if (v->n >= SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    kbuf k = {v->keys + v->keys_used, 0, SL_VERDICT_KEYS - v->keys_used, false};
    if (k.cap == 0) return SLUICE_ERANGE;
    k.p[k.len++] = 0;
    kput(&k, 'D', req->domain.p, req->domain.len);
    for (size_t i = 0; i < desc->n; i++) {
        kput(&k, 'k', desc->entries[i].key.p, desc->entries[i].key.len);
        kput(&k, 'v', desc->entries[i].value.p, desc->entries[i].value.len);
    }
    if (k.overflow) return SLUICE_ERANGE;
    sl_verdict_item *it = &v->items[v->n++];
    memset(it, 0, sizeof(*it));
    it->info = &e->ovr[desc->limit_unit].info;
    it->descriptor = d;
    it->key_off = (uint16_t)v->keys_used;
    it->key_len = (uint16_t)k.len;
    v->keys_used += k.len;
    it->cost = desc->has_hits_addend ? desc->hits_addend
                                     : (req->hits_addend ? req->hits_addend : 1);
    it->override = true;
    it->override_limit = desc->limit_requests_per_unit;
    return SLUICE_OK;
}

int sl_engine_check(const sl_engine *e, const sl_request *req, sluice_time now, sl_verdict *out) {
    if (out == NULL) return SLUICE_EINVAL;
    verdict_init(out);
    if (e == NULL || req == NULL) return fail(out, SLUICE_EINVAL);
    int rc = SLUICE_OK;
    /* one normalised path for both kinds of request (keys, per-operation costs, match) */
    char np[SL_PATH_NORM_STACK];
    char *buf = np;
    size_t pl = path_len(req->path);
    if (pl > sizeof(np)) {
        if (req->path_scratch == NULL || req->path_scratch_len < pl)
            return fail(out, SLUICE_ERANGE); /* never matched raw */
        buf = req->path_scratch;
    }
    sl_str npath = path_norm(req->path, buf);
    if (req->domain.p != NULL) {
        const sl_edomain *dom = find_domain(e->cfg, req->domain);
        for (size_t d = 0; d < req->n_descriptors && rc == SLUICE_OK; d++) {
            const sl_descriptor *desc = &req->descriptors[d];
            const sl_enode *path[SL_ENVOY_DEPTH];
            ctxreq c = {req, desc, path, npath};
            if (desc->has_limit && desc->limit_unit > 0 && desc->limit_unit < OVR_UNITS) {
                rc = add_override(e, out, req, desc, (int)d);
                continue; /* the config is bypassed for this descriptor */
            }
            const sl_enode *hit = sl__envoy_match(dom, desc, path);
            if (hit != NULL && hit->policy >= 0)
                rc = add_policy(&e->pol[hit->policy], out, &c, (int)d);
            for (size_t i = 0; i < e->n_pol && rc == SLUICE_OK; i++) {
                const sl_cpolicy *cp = e->pol[i].cp;
                if (cp->envoy || cp->domain == NULL || strlen(cp->domain) != req->domain.len ||
                    memcmp(cp->domain, req->domain.p, req->domain.len) != 0 ||
                    !match_desc(cp, desc))
                    continue;
                ctxreq c2 = {req, desc, NULL, npath};
                rc = add_policy(&e->pol[i], out, &c2, (int)d);
            }
        }
        if (rc == SLUICE_OK) apply_replaces(out);
    } else {
        ctxreq c = {req, NULL, NULL, npath};
        for (size_t i = 0; i < e->n_pol && rc == SLUICE_OK; i++) {
            const sl_cpolicy *cp = e->pol[i].cp;
            if (cp->envoy || cp->domain != NULL || !match_http(cp, req, c.path)) continue;
            rc = add_policy(&e->pol[i], out, &c, -1);
        }
    }
    if (rc != SLUICE_OK) return fail(out, rc);
    return decide(e, out, now);
}

static const e_pol *find_policy(const sl_engine *e, const char *name) {
    if (name == NULL) return NULL;
    for (size_t i = 0; i < e->n_pol; i++)
        if (strcmp(e->pol[i].cp->name, name) == 0) return &e->pol[i];
    return NULL;
}

int sl_engine_check_named(const sl_engine *e, const char *policy, const void *key,
                          size_t key_len, bool has_cost, uint64_t cost, sluice_time now,
                          sl_verdict *out) {
    if (out == NULL) return SLUICE_EINVAL;
    verdict_init(out);
    if (e == NULL || (key == NULL && key_len > 0)) return fail(out, SLUICE_EINVAL);
    const e_pol *ep = find_policy(e, policy);
    if (ep == NULL) return fail(out, SLUICE_ENOTFOUND);
    /* The explicit form has its own key namespace (chain byte 0xff): a caller naming keys
     * cannot collide with keys composed from request attributes. */
    kbuf k = {out->keys, 0, SL_VERDICT_KEYS, false};
    k.p[k.len++] = 0xff;
    kput(&k, 'x', key, key_len);
    if (k.overflow) return fail(out, SLUICE_ERANGE);
    out->keys_used = k.len;
    uint64_t c = has_cost ? cost : ep->cp->cost_default;
    int rc = add_items(ep, out, 0, k.len, c, -1, NULL);
    if (rc != SLUICE_OK) return fail(out, rc);
    return decide(e, out, now);
}

int sl_engine_acquire(const sl_engine *e, const char *policy, const void *key, size_t key_len,
                      sluice_time now, sl_verdict *out) {
    return sl_engine_check_named(e, policy, key, key_len, true, 1, now, out);
}

static bool admitted(const sl_verdict *v) {
    return (v->action == SL_ALLOW || (v->action == SL_DELAY && !v->recheck)) && !v->store_error;
}

static int64_t verdict_life(const sl_verdict *v) {
    int64_t life = SLUICE_NS_PER_S;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->unlimited || !it->consumed || item_win(it)->lim == NULL) continue;
        int64_t l = item_life(item_win(it), it->settle, it->result.lease != 0);
        if (l > life) life = l;
    }
    return life;
}

int sl_engine_release(const sl_engine *e, const sl_verdict *v, sluice_time now) {
    if (e == NULL || v == NULL) return SLUICE_EINVAL;
    if (!admitted(v)) return SLUICE_OK;
    bool any = false;
    for (size_t i = 0; i < v->n; i++)
        any |= v->items[i].result.lease != 0 && !v->items[i].unlimited && v->items[i].consumed;
    if (!any) return SLUICE_OK;
    int tk = take_token(e, v->token_id, SL_TOK_RELEASE, v->decided_at, verdict_life(v), now);
    if (tk != SLUICE_OK) return tk; /* released already (or its token was) */
    int first = SLUICE_OK;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->result.lease == 0 || it->unlimited || !it->consumed) continue;
        int rc = st_release(e->store, item_win(it)->lim, v->keys + it->key_off, it->key_len,
                                it->result.lease, now);
        if (rc != SLUICE_OK && first == SLUICE_OK) first = rc;
    }
    return first;
}

int sl_engine_settle(const sl_engine *e, const sl_verdict *v, uint64_t actual, sluice_time now) {
    if (e == NULL || v == NULL) return SLUICE_EINVAL;
    if (!admitted(v)) return SLUICE_EINVAL; /* nothing was reserved */
    bool any = false;
    for (size_t i = 0; i < v->n; i++)
        any |= v->items[i].settle && !v->items[i].unlimited && v->items[i].consumed;
    if (!any) return SLUICE_EINVAL;
    int tk = take_token(e, v->token_id, SL_TOK_SETTLE, v->decided_at, verdict_life(v), now);
    if (tk != SLUICE_OK) return tk; /* settled already (or its token was) */
    int first = SLUICE_OK;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!it->settle || it->unlimited || !it->consumed || item_win(it)->lim == NULL) continue;
        sluice_result r;
        int rc = st_settle_at(e->store, item_win(it)->lim, v->keys + it->key_off,
                              it->key_len, it->cost, actual, v->decided_at, now, &r);
        if (rc != SLUICE_OK && first == SLUICE_OK) first = rc;
    }
    return first;
}

/* ---- tokens ------------------------------------------------------------------------- */

static const char hexd[] = "0123456789abcdef";

static bool put_hex(char *buf, size_t len, size_t *off, const void *p, size_t n) {
    const unsigned char *b = p;
    if (*off + 2 * n >= len) return false;
    for (size_t i = 0; i < n; i++) {
        buf[(*off)++] = hexd[b[i] >> 4];
        buf[(*off)++] = hexd[b[i] & 15];
    }
    return true;
}

static bool put_fmt(char *buf, size_t len, size_t *off, const char *fmt, unsigned long long a) {
    int w = snprintf(buf + *off, len - *off, fmt, a);
    if (w < 0 || (size_t)w >= len - *off) return false;
    *off += (size_t)w;
    return true;
}

/* Tokens are authenticated with SipHash-2-4-128 under a per-process random key: a client
 * handed a token cannot forge one that refunds or releases another client's budget. The
 * key is process-wide (not per engine) so a token survives a reload; it does not survive
 * a restart, which only loses pending settlements (reservations stand as charged). */
static sl_hash_key token_key;
static int token_key_ok;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;
static void token_key_init(void) { token_key_ok = sl_hash_random_key(&token_key) == 0; }

void sl_engine_tokens_shared(const void *secret, size_t len) {
    pthread_once(&token_once, token_key_init);
    /* domain-separated from the store's key hashing, which uses the same secret */
    static const sl_hash_key tokens = {UINT64_C(0x736c75696365746f), UINT64_C(0x6b656e73206b6579)};
    sl_hash128 h = sl_siphash128(&tokens, secret, len, 2, 4);
    token_key = (sl_hash_key){h.lo, h.hi};
    token_key_ok = 1;
    g_tokens_shared = true;
}

static sl_hash128 token_mac(const char *p, size_t n) {
    pthread_once(&token_once, token_key_init);
    return sl_siphash128(&token_key, p, n, 2, 4);
}

/* Format: "t2,ID,MONO,WALL" (the single-use id and the decision time, decimal), then per
 * item to settle or release ";NAMEHEX,INDEX,KEYHEX,COST,LEASE,S", then ".MAC" (32 hex
 * digits).
 * Why names rather than indices: a token must stay meaningful across a reload, and the
 * limiter identity (name + index) is exactly what survives one. */
int sl_verdict_token(const sl_verdict *v, char *buf, size_t len) {
    if (v == NULL || buf == NULL || len < 3) return SLUICE_ERANGE;
    size_t off = 0;
    buf[off++] = 't';
    buf[off++] = '2';
    if (!put_fmt(buf, len, &off, ",%llu", v->token_id) ||
        !put_fmt(buf, len, &off, ",%llu", (unsigned long long)(uint64_t)v->decided_at.mono_ns) ||
        !put_fmt(buf, len, &off, ",%llu", (unsigned long long)(uint64_t)v->decided_at.wall_ns))
        return SLUICE_ERANGE;
    if (admitted(v))
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            const e_win *w = item_win(it);
            if (it->unlimited || !it->consumed || w->lim == NULL ||
                (!it->settle && it->result.lease == 0))
                continue;
            const char *name = sluice_limiter_spec(w->lim)->name;
            if (off + 1 >= len) return SLUICE_ERANGE;
            buf[off++] = ';';
            if (!put_hex(buf, len, &off, name, strlen(name)) ||
                !put_fmt(buf, len, &off, ",%llu,", sluice_limiter_spec(w->lim)->index) ||
                !put_hex(buf, len, &off, v->keys + it->key_off, it->key_len) ||
                !put_fmt(buf, len, &off, ",%llu", it->cost) ||
                !put_fmt(buf, len, &off, ",%llu", it->result.lease) ||
                !put_fmt(buf, len, &off, ",%llu", it->settle ? 1u : 0u))
                return SLUICE_ERANGE;
        }
    sl_hash128 mac = token_mac(buf, off);
    if (!token_key_ok) return SLUICE_EIO;
    uint64_t w[2] = {mac.lo, mac.hi};
    if (off + 1 >= len) return SLUICE_ERANGE;
    buf[off++] = '.';
    if (!put_hex(buf, len, &off, w, sizeof(w))) return SLUICE_ERANGE;
    buf[off] = '\0';
    return (int)off;
}

static int unhex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static size_t get_hex(const char *s, size_t n, unsigned char *out, size_t cap, bool *ok) {
    if (n % 2 || n / 2 > cap) {
        *ok = false;
        return 0;
    }
    for (size_t i = 0; i < n / 2; i++) {
        int a = unhex(s[2 * i]), b = unhex(s[2 * i + 1]);
        if (a < 0 || b < 0) {
            *ok = false;
            return 0;
        }
        out[i] = (unsigned char)(a << 4 | b);
    }
    return n / 2;
}

/* A decimal uint64 (token fields: ids and times use the whole 64-bit range). */
static bool get_num(const char *s, size_t n, uint64_t *out) {
    if (n == 0 || n > 20) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

typedef int (*token_fn)(const sl_engine *e, const e_win *w, const unsigned char *key,
                        size_t klen, uint64_t cost, uint64_t lease, bool settle, uint64_t actual,
                        sluice_time reserved_at, sluice_time now);

/* Reads the token's "t2,ID,MONO,WALL" head; returns the offset of its first item, 0 when
 * the head is malformed. */
static size_t token_head(const char *t, size_t len, uint64_t *id, sluice_time *at) {
    uint64_t f[3];
    size_t i = 2;
    for (int k = 0; k < 3; k++) {
        if (i >= len || t[i] != ',') return 0;
        size_t st = ++i;
        while (i < len && t[i] != ',' && t[i] != ';') i++;
        if (!get_num(t + st, i - st, &f[k])) return 0;
    }
    *id = f[0];
    at->mono_ns = (int64_t)f[1];
    at->wall_ns = (int64_t)f[2];
    return i;
}

/* Authenticates token t and walks its items; with fn NULL only checks them (syntax, every
 * limiter known) and reports in *ops which operations the token holds. */
static int walk_items(const sl_engine *e, const char *t, size_t len, uint64_t actual,
                      sluice_time now, token_fn fn, uint64_t *id, unsigned *ops, sluice_time *at,
                      int64_t *life) {
    if (e == NULL || t == NULL || len < 2 + 33 || t[0] != 't' || t[1] != '2') return SLUICE_EINVAL;
    /* authenticate before interpreting anything */
    size_t body = len - 33;
    if (t[body] != '.') return SLUICE_EINVAL;
    sl_hash128 mac = token_mac(t, body);
    if (!token_key_ok) return SLUICE_EIO;
    uint64_t w[2] = {mac.lo, mac.hi};
    unsigned char want[16], got[16];
    memcpy(want, w, 16);
    bool hex_ok = true;
    get_hex(t + body + 1, 32, got, sizeof(got), &hex_ok);
    unsigned char diff = hex_ok ? 0 : 1;
    for (int k = 0; k < 16; k++) diff |= (unsigned char)(want[k] ^ got[k]);
    if (diff != 0) return SLUICE_EINVAL;
    len = body;
    sluice_time reserved_at;
    size_t i = token_head(t, len, id, &reserved_at);
    if (i == 0) return SLUICE_EINVAL;
    if (at != NULL) *at = reserved_at;
    if (life != NULL) *life = SLUICE_NS_PER_S;
    *ops = 0;
    int first = SLUICE_OK;
    while (i < len) {
        if (t[i] != ';') return SLUICE_EINVAL;
        i++;
        const char *f[6];
        size_t fl[6], nf = 0;
        size_t start = i;
        while (i <= len && nf < 6) {
            if (i == len || t[i] == ',' || t[i] == ';') {
                f[nf] = t + start;
                fl[nf++] = i - start;
                if (i == len || t[i] == ';') break;
                start = i + 1;
            }
            i++;
        }
        if (nf != 6) return SLUICE_EINVAL;
        unsigned char name[256], key[SL_VERDICT_KEYS];
        bool ok = true;
        size_t nl = get_hex(f[0], fl[0], name, sizeof(name) - 1, &ok);
        size_t kl = get_hex(f[2], fl[2], key, sizeof(key), &ok);
        uint64_t idx, cost, lease, settle;
        if (!ok || !get_num(f[1], fl[1], &idx) || !get_num(f[3], fl[3], &cost) ||
            !get_num(f[4], fl[4], &lease) || !get_num(f[5], fl[5], &settle))
            return SLUICE_EINVAL;
        name[nl] = '\0';
        const e_win *win = NULL;
        for (size_t j = 0; j < e->n_all && win == NULL; j++) {
            const sluice_limit_spec *s = sluice_limiter_spec(e->all[j]->lim);
            if (s != NULL && s->index == idx && strcmp(s->name, (const char *)name) == 0)
                win = e->all[j];
        }
        if (settle) *ops |= SL_TOK_SETTLE;
        if (lease) *ops |= SL_TOK_RELEASE;
        if (life != NULL && win != NULL) {
            int64_t l = item_life(win, settle != 0, lease != 0);
            if (l > *life) *life = l;
        }
        if (fn == NULL) continue;
        int rc = win ? fn(e, win, key, kl, cost, lease, settle != 0, actual, reserved_at, now)
                     : SLUICE_ENOTFOUND;
        if (rc != SLUICE_OK && first == SLUICE_OK) first = rc;
    }
    return first;
}

/* Why two passes: the whole token is checked (MAC, syntax) before its single use is
 * taken, so a malformed token does not burn the id; the use is taken before anything is
 * applied, so two racing replays cannot both refund or release. A token holding nothing
 * for `op` is a no-op (as before); one whose use was taken already is SLUICE_ENOTFOUND. */
static int walk_token(const sl_engine *e, const char *t, size_t len, uint64_t actual,
                      sluice_time now, token_fn fn, unsigned op) {
    uint64_t id = 0;
    unsigned ops = 0;
    sluice_time at;
    int64_t life;
    int rc = walk_items(e, t, len, actual, now, NULL, &id, &ops, &at, &life);
    if (rc != SLUICE_OK) return rc;
    if ((ops & op) == 0) return SLUICE_OK;
    rc = take_token(e, id, op, at, life, now);
    if (rc != SLUICE_OK) return rc;
    /* shared tokens come from any instance: only the wall clocks compare */
    if (g_tokens_shared) now.mono_ns = now.wall_ns;
    return walk_items(e, t, len, actual, now, fn, &id, &ops, NULL, NULL);
}

static int tok_settle(const sl_engine *e, const e_win *w, const unsigned char *key, size_t klen,
                      uint64_t cost, uint64_t lease, bool settle, uint64_t actual,
                      sluice_time reserved_at, sluice_time now) {
    (void)lease;
    if (!settle) return SLUICE_OK;
    sluice_result r;
    return st_settle_at(e->store, w->lim, key, klen, cost, actual, reserved_at, now, &r);
}

static int tok_release(const sl_engine *e, const e_win *w, const unsigned char *key,
                       size_t klen, uint64_t cost, uint64_t lease, bool settle, uint64_t actual,
                       sluice_time reserved_at, sluice_time now) {
    (void)cost;
    (void)settle;
    (void)actual;
    (void)reserved_at;
    if (lease == 0) return SLUICE_OK;
    return st_release(e->store, w->lim, key, klen, lease, now);
}

int sl_engine_settle_token(const sl_engine *e, const char *token, size_t len, uint64_t actual,
                           sluice_time now) {
    return walk_token(e, token, len, actual, now, tok_settle, SL_TOK_SETTLE);
}

int sl_engine_release_token(const sl_engine *e, const char *token, size_t len, sluice_time now) {
    return walk_token(e, token, len, 0, now, tok_release, SL_TOK_RELEASE);
}
