/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api.c -- the policy engine as libsluice's public API (include/sluice.h, "the policy
 * engine"): a configuration loaded into generations over one memory store, decisions into
 * caller-owned verdicts whose answer is built once per decision, settle/release, reloads
 * that keep counters, and per-key overrides (the memory store's table, store/override.c).
 *
 * Generations: the engine in force is an atomic pointer; a decision takes a reference on
 * it (atomic adds, no lock) and its verdict keeps that reference until it decides again
 * or is destroyed, so a settle or release runs on the generation that decided. A reload
 * swaps the pointer under the engine's reload mutex (reloads only) and retires the old
 * generation; retired generations are freed by a later reload (or destroy) once no
 * reference is held and no reader is between loading the pointer and taking its
 * reference (`acquiring`, all sequentially consistent: a reader counted there may hold a
 * retired pointer, so nothing is freed; a reader counted after the check loads the new
 * pointer, never a retired one).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/compiled.h"
#include "config/config.h"
#include "engine/answer.h"
#include "engine/engine.h"
#include "sluice.h"
#include "store/memory/override.h"

typedef struct gen {
    sl_config *cfg;
    sl_engine *eng;
    atomic_long refs;
    struct gen *next; /* retired list */
} gen;

struct sluice_engine {
    _Atomic(gen *) cur;
    sluice_store *store;
    pthread_mutex_t reload_mu; /* reloads only: never decisions */
    gen *retired;
    atomic_uint_fast64_t generation;
    atomic_long acquiring; /* readers between loading `cur` and holding a reference */
};

#define ANS_BODY_BUF 2048

/* The public answer is a view of the engine's one answer (engine/answer.h, built once per
 * decision): its pairs point into sa.text, its numbers are sa's and the deciding item's. */
_Static_assert(SLUICE_ANSWER_HEADERS == SL_ANSWER_MAX_HEADERS, "answer pairs");
struct sluice_verdict {
    gen *g; /* the generation that decided (a reference), or NULL */
    sluice_answer ans;
    sluice_header hdr[SLUICE_ANSWER_HEADERS];
    sl_answer sa;
    char body[ANS_BODY_BUF];
    sl_verdict v;
};

/* ---- generations ------------------------------------------------------------------- */

static gen *gen_acquire(sluice_engine *e) {
    atomic_fetch_add(&e->acquiring, 1);
    gen *g = atomic_load(&e->cur);
    atomic_fetch_add(&g->refs, 1);
    atomic_fetch_sub(&e->acquiring, 1);
    return g;
}

static void gen_release(gen *g) {
    if (g != NULL) atomic_fetch_sub(&g->refs, 1);
}

static void gen_free(gen *g) {
    sl_engine_destroy(g->eng);
    sl_config_destroy(g->cfg);
    free(g);
}

/* Frees retired generations nobody holds (reload_mu held). */
static void reap(sluice_engine *e) {
    if (atomic_load(&e->acquiring) != 0) return; /* one may be taking a retired pointer */
    gen **pp = &e->retired;
    while (*pp != NULL) {
        gen *g = *pp;
        if (atomic_load(&g->refs) == 0) {
            *pp = g->next;
            gen_free(g);
        } else {
            pp = &g->next;
        }
    }
}

/* ---- loading ------------------------------------------------------------------------- */

static void diag_text(const sl_diag_list *dl, int rc, const char *name, char *eb, size_t ebn) {
    if (eb == NULL || ebn == 0) return;
    eb[0] = '\0';
    size_t o = 0;
    for (size_t i = 0; i < dl->n && o + 1 < ebn; i++) {
        char line[SL_DIAG_MSG + 300];
        sl_diag_format(dl, i, line, sizeof(line));
        int w = snprintf(eb + o, ebn - o, "%s%s", o ? "\n" : "", line);
        if (w < 0) break;
        o += (size_t)w;
    }
    if (dl->n == 0) snprintf(eb, ebn, "%s: %s", name, sluice_strerror(rc));
    else if (dl->dropped && o + 1 < ebn)
        snprintf(eb + o, ebn - o, "\n%s: ... and %zu more errors", name, dl->dropped);
}

static void seterr(char *eb, size_t ebn, const char *fmt, const char *a, const char *b) {
    if (eb != NULL && ebn > 0) snprintf(eb, ebn, fmt, a, b);
}

/* path != NULL: a file or directory; else text. */
static int load_cfg(const char *path, const char *text, size_t len, const char *name,
                    sl_config **out, char *eb, size_t ebn) {
    sl_diag_list *dl = calloc(1, sizeof(*dl)); /* large: off the stack */
    if (dl == NULL) return SLUICE_ENOMEM;
    int rc = path ? sl_config_load(path, out, dl) : sl_config_load_buffer(text, len, name, out, dl);
    if (rc != SLUICE_OK) diag_text(dl, rc, path ? path : name, eb, ebn);
    free(dl);
    if (rc != SLUICE_OK) return rc;
    if (sl_config_settings(*out)->store.type != SL_STORE_MEMORY) {
        seterr(eb, ebn, "%s: store: the library decides on its memory store (store: memory:); "
               "the Redis store is the server's%s", path ? path : name, "");
        sl_config_destroy(*out);
        *out = NULL;
        return SLUICE_EINVAL;
    }
    return SLUICE_OK;
}

static gen *gen_new(sl_config *cfg, sluice_store *st, int *err, char *eb, size_t ebn) {
    gen *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        *err = SLUICE_ENOMEM;
        return NULL;
    }
    g->eng = sl_engine_create(cfg, st, err, eb, ebn);
    if (g->eng == NULL) {
        free(g);
        return NULL;
    }
    g->cfg = cfg;
    atomic_init(&g->refs, 0);
    sl_ovr_table *t = sl_store_overrides(st);
    if (t != NULL) sl_ovr_set_max(t, sl_config_settings(cfg)->overrides_max);
    return g;
}

static sluice_engine *load(const char *path, const char *text, size_t len, const char *name,
                           int *err, char *eb, size_t ebn) {
    int dummy;
    if (err == NULL) err = &dummy;
    if (eb != NULL && ebn > 0) eb[0] = '\0';
    if ((path == NULL && text == NULL)) {
        *err = SLUICE_EINVAL;
        return NULL;
    }
    sl_config *cfg = NULL;
    int rc = load_cfg(path, text, len, name, &cfg, eb, ebn);
    if (rc != SLUICE_OK) {
        *err = rc;
        return NULL;
    }
    const sl_settings *st = sl_config_settings(cfg);
    sluice_store_options so = {0};
    so.max_keys = st->store.max_keys;
    so.on_full = st->store.on_full;
    so.shards = st->store.shards;
    sluice_engine *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        sl_config_destroy(cfg);
        *err = SLUICE_ENOMEM;
        return NULL;
    }
    e->store = sluice_store_create(&so, err);
    if (e->store == NULL) {
        seterr(eb, ebn, "%s: store: %s", path ? path : name, sluice_strerror(*err));
        sl_config_destroy(cfg);
        free(e);
        return NULL;
    }
    gen *g = gen_new(cfg, e->store, err, eb, ebn);
    if (g == NULL) {
        sl_config_destroy(cfg);
        sluice_store_destroy(e->store);
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->reload_mu, NULL);
    atomic_init(&e->cur, g);
    atomic_init(&e->generation, 0);
    atomic_init(&e->acquiring, 0);
    *err = SLUICE_OK;
    return e;
}

sluice_engine *sluice_engine_load_file(const char *path, int *err, char *errbuf,
                                       size_t errbuf_len) {
    if (path == NULL) {
        if (err) *err = SLUICE_EINVAL;
        return NULL;
    }
    return load(path, NULL, 0, NULL, err, errbuf, errbuf_len);
}

sluice_engine *sluice_engine_load_string(const char *text, size_t len, const char *name,
                                         int *err, char *errbuf, size_t errbuf_len) {
    if (text == NULL) {
        if (err) *err = SLUICE_EINVAL;
        return NULL;
    }
    return load(NULL, text, len, name ? name : "config", err, errbuf, errbuf_len);
}

static int reload(sluice_engine *e, const char *path, const char *text, size_t len,
                  const char *name, char *eb, size_t ebn) {
    if (e == NULL) return SLUICE_EINVAL;
    if (eb != NULL && ebn > 0) eb[0] = '\0';
    sl_config *cfg = NULL;
    int rc = load_cfg(path, text, len, name, &cfg, eb, ebn);
    if (rc != SLUICE_OK) return rc;
    pthread_mutex_lock(&e->reload_mu);
    int err = 0;
    gen *g = gen_new(cfg, e->store, &err, eb, ebn);
    if (g == NULL) {
        pthread_mutex_unlock(&e->reload_mu);
        sl_config_destroy(cfg);
        return err ? err : SLUICE_EINVAL;
    }
    reap(e); /* generations retired by earlier reloads */
    gen *old = atomic_exchange(&e->cur, g);
    old->next = e->retired;
    e->retired = old;
    atomic_fetch_add_explicit(&e->generation, 1, memory_order_relaxed);
    pthread_mutex_unlock(&e->reload_mu);
    return SLUICE_OK;
}

int sluice_engine_reload_file(sluice_engine *e, const char *path, char *errbuf,
                              size_t errbuf_len) {
    if (path == NULL) return SLUICE_EINVAL;
    return reload(e, path, NULL, 0, NULL, errbuf, errbuf_len);
}

int sluice_engine_reload_string(sluice_engine *e, const char *text, size_t len,
                                const char *name, char *errbuf, size_t errbuf_len) {
    if (text == NULL) return SLUICE_EINVAL;
    return reload(e, NULL, text, len, name ? name : "config", errbuf, errbuf_len);
}

void sluice_engine_destroy(sluice_engine *e) {
    if (e == NULL) return;
    gen *g = atomic_load(&e->cur);
    gen_free(g);
    while (e->retired != NULL) {
        gen *r = e->retired;
        e->retired = r->next;
        gen_free(r);
    }
    sluice_store_destroy(e->store);
    pthread_mutex_destroy(&e->reload_mu);
    free(e);
}

sluice_store *sluice_engine_store(sluice_engine *e) {
    return e ? e->store : NULL;
}

uint64_t sluice_engine_generation(const sluice_engine *e) {
    return e ? (uint64_t)atomic_load_explicit(&((sluice_engine *)e)->generation, memory_order_relaxed) : 0;
}

/* ---- verdicts and answers ------------------------------------------------------------ */

static void answer_error(sluice_verdict *sv, int rc) {
    memset(&sv->ans, 0, sizeof(sv->ans));
    sv->ans.action = SLUICE_ACTION_ERROR;
    sv->ans.status = 500;
    sv->ans.error = rc;
    sv->ans.headers = sv->hdr;
}

sluice_verdict *sluice_verdict_create(void) {
    sluice_verdict *v = calloc(1, sizeof(*v));
    if (v != NULL) answer_error(v, SLUICE_EINVAL);
    return v;
}

void sluice_verdict_destroy(sluice_verdict *v) {
    if (v == NULL) return;
    gen_release(v->g);
    free(v);
}

const sluice_answer *sluice_verdict_answer(const sluice_verdict *v) {
    return v ? &v->ans : NULL;
}

static void build_answer(sluice_verdict *sv, int rc) {
    sl_verdict *v = &sv->v;
    sluice_answer *a = &sv->ans;
    sl_answer *sa = &sv->sa;
    memset(a, 0, sizeof(*a));
    a->headers = sv->hdr;
    sl_answer_build(sa, v, 0);
    a->action = (sluice_action)v->action;
    a->status = v->status ? v->status : 200;
    a->error = rc != SLUICE_OK ? rc : v->error;
    a->delay_ns = v->action == SL_DELAY ? v->delay_ns : 0;
    a->recheck = v->action == SL_DELAY && v->recheck;
    a->shadow_limited = v->shadow_limited;
    a->n_windows = v->n;
    if (v->action == SL_REJECT) a->retry_after_ns = v->retry_after_ns;
    a->overridden = sl_verdict_override(v) != NULL;
    /* the window a client counts in: the answer's (the deciding one among those the
     * headers show), else the engine's deciding window */
    int d = sa->has_window ? sa->deciding : v->deciding;
    if (d >= 0 && (size_t)d < v->n) {
        const sl_verdict_item *it = &v->items[d];
        /* the quota RateLimit-Policy states: a per-key override's numbers when it has them
         * (sl_answer's limit, like legacy X-RateLimit-Limit, is the policy's quota there) */
        const sl_limit *ol = it->ovr_g && it->ovr_p >= 0 ? &v->ovr[it->ovr_g - 1].lim[it->ovr_p]
                                                         : NULL;
        a->limit = it->override ? it->override_limit : ol ? ol->capacity : it->info->quota;
        a->remaining = sa->has_window ? sa->remaining : it->result.remaining;
        a->reset_ns = it->result.reset_after_ns;
        a->policy = it->info->policy;
        a->window = it->info->name;
        a->window_index = it->info->index;
        a->plan = it->info->plan;
    }
    if (!sa->overflow) {
        for (size_t i = 0; i < sa->nh && a->n_headers < SLUICE_ANSWER_HEADERS; i++) {
            if (!sl_answer_has_value(sa, i)) continue;
            sluice_header *h = &sv->hdr[a->n_headers++];
            h->name.p = sl_answer_name(sa, i, &h->name.len);
            h->value.p = sl_answer_value(sa, i, &h->value.len);
        }
    }
    if (v->action == SL_REJECT || v->action == SL_FAIL || v->action == SL_ERROR) {
        sl_wbuf w;
        sl_wbuf_init(&w, sv->body, sizeof(sv->body));
        int bl = sl_answer_problem(v, a->status, NULL, &w);
        if (bl > 0 && !w.overflow) {
            a->body.p = sv->body;
            a->body.len = (size_t)bl;
            a->content_type = "application/problem+json";
        }
    }
}

static void take(sluice_verdict *sv, gen *g) {
    gen_release(sv->g);
    sv->g = g;
}

static sl_str s2(sluice_str s) {
    sl_str r = {s.p, s.len};
    return r;
}

int sluice_engine_decide(sluice_engine *e, const sluice_request *req, sluice_time now,
                         sluice_verdict *sv) {
    if (sv == NULL) return SLUICE_EINVAL;
    if (e == NULL || req == NULL || (req->n_headers > 0 && req->headers == NULL)) {
        answer_error(sv, SLUICE_EINVAL);
        return SLUICE_EINVAL;
    }
    /* sluice_header and sl_header have the same layout (two pointer+length strings) */
    _Static_assert(sizeof(sluice_header) == sizeof(sl_header), "header layout");
    sl_request r;
    memset(&r, 0, sizeof(r));
    r.method = s2(req->method);
    r.path = s2(req->path);
    r.host = s2(req->host);
    r.client_ip = s2(req->client_ip);
    r.route = s2(req->route);
    r.headers = (const sl_header *)(const void *)req->headers;
    r.n_headers = req->n_headers;
    r.has_body_bytes = req->has_body_bytes != 0;
    r.body_bytes = req->body_bytes;
    r.has_cost = req->has_cost != 0;
    r.cost = req->cost;
    gen *g = gen_acquire(e);
    take(sv, g);
    int rc = sl_engine_check(g->eng, &r, now, &sv->v);
    build_answer(sv, rc);
    return rc;
}

int sluice_engine_decide_key(sluice_engine *e, const char *policy, const void *key,
                             size_t key_len, int has_cost, uint64_t cost, sluice_time now,
                             sluice_verdict *sv) {
    if (sv == NULL) return SLUICE_EINVAL;
    if (e == NULL || policy == NULL || (key == NULL && key_len > 0)) {
        answer_error(sv, SLUICE_EINVAL);
        return SLUICE_EINVAL;
    }
    gen *g = gen_acquire(e);
    take(sv, g);
    int rc = sl_engine_check_named(g->eng, policy, key ? key : "", key_len, has_cost != 0, cost,
                                   now, &sv->v);
    build_answer(sv, rc);
    if (rc == SLUICE_ENOTFOUND) sv->ans.status = 404;
    return rc;
}

int sluice_engine_settle(sluice_engine *e, sluice_verdict *sv, uint64_t actual, sluice_time now) {
    if (e == NULL || sv == NULL || sv->g == NULL) return SLUICE_EINVAL;
    return sl_engine_settle(sv->g->eng, &sv->v, actual, now);
}

int sluice_engine_release(sluice_engine *e, sluice_verdict *sv, sluice_time now) {
    if (e == NULL || sv == NULL || sv->g == NULL) return SLUICE_EINVAL;
    return sl_engine_release(sv->g->eng, &sv->v, now);
}

int sluice_verdict_token(const sluice_verdict *sv, char *buf, size_t len) {
    if (sv == NULL || buf == NULL || len == 0) return SLUICE_EINVAL;
    buf[0] = '\0';
    if (sv->g == NULL || !sl_verdict_needs_token(&sv->v)) return 0;
    return sl_verdict_token(&sv->v, buf, len);
}

int sluice_engine_settle_token(sluice_engine *e, const char *token, size_t len, uint64_t actual,
                               sluice_time now) {
    if (e == NULL || token == NULL) return SLUICE_EINVAL;
    gen *g = gen_acquire(e);
    int rc = sl_engine_settle_token(g->eng, token, len, actual, now);
    gen_release(g);
    return rc;
}

int sluice_engine_release_token(sluice_engine *e, const char *token, size_t len,
                                sluice_time now) {
    if (e == NULL || token == NULL) return SLUICE_EINVAL;
    gen *g = gen_acquire(e);
    int rc = sl_engine_release_token(g->eng, token, len, now);
    gen_release(g);
    return rc;
}

/* ---- overrides -------------------------------------------------------------------------- */

/* The identity hash of a path-form key: the admin API's own (sl_ovr_key_hash). */
static int key_hash(const sl_ovr_table *t, const char *policy, const char *key, size_t key_len,
                    sl_hash128 *h) {
    if (key == NULL) return SLUICE_EINVAL;
    return sl_ovr_key_hash(t, policy, key, key_len, h) ? SLUICE_OK : SLUICE_EINVAL;
}

static const sl_cpolicy *find_cpolicy(const sl_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_pol; i++)
        if (strcmp(cfg->pol[i].name, name) == 0) return &cfg->pol[i];
    return NULL;
}

static int set_locked(gen *g, sl_ovr_table *t, const char *policy, const char *key,
                      size_t key_len, const sluice_override *o, sluice_time now, int *created,
                      char *eb, size_t ebn) {
    int pk = sl_engine_ovr_policy(g->eng, policy, NULL, NULL);
    const sl_cpolicy *cp = find_cpolicy(g->cfg, policy);
    if (pk == 0 || cp == NULL) {
        seterr(eb, ebn, "policy: no policy %.128s in the configuration in force%s", policy, "");
        return SLUICE_ENOTFOUND;
    }
    if (pk == -2) {
        seterr(eb, ebn, "policy: policy %.128s cannot take overrides (capacity protection or "
               "an envoy rule)%s", policy, "");
        return SLUICE_EINVAL;
    }
    sl_ovr_rec tm;
    memset(&tm, 0, sizeof(tm));
    const char *plan = NULL;
    char *body = NULL;
    switch (o->kind) {
    case SLUICE_OVERRIDE_PLAN:
        if (o->plan == NULL || o->plan[0] == '\0' ||
            sl_engine_ovr_policy(g->eng, policy, o->plan, NULL) == -3) {
            seterr(eb, ebn, "plan: policy %.100s has no plan %.60s", policy, o->plan ? o->plan : "");
            return SLUICE_EINVAL;
        }
        plan = o->plan;
        tm.kind = SL_OVR_PLAN;
        break;
    case SLUICE_OVERRIDE_BLOCK:
        tm.kind = SL_OVR_BLOCK;
        break;
    case SLUICE_OVERRIDE_EXEMPT:
        tm.kind = SL_OVR_EXEMPT;
        break;
    case SLUICE_OVERRIDE_LIMITS: {
        if (o->limits == NULL || o->n_limits == 0 || o->n_limits > SL_OVR_MAX_WIN) {
            seterr(eb, ebn, "limits: a list of 1 to 4 windows such as {\"rate\": \"3000/min\"}%s%s",
                   "", "");
            return SLUICE_EINVAL;
        }
        sl_cwindow w[SL_OVR_MAX_WIN];
        char labels[SL_OVR_MAX_WIN][128];
        const char *names[SL_OVR_MAX_WIN];
        size_t blen = 3;
        for (size_t i = 0; i < o->n_limits; i++) {
            if (o->limits[i] == NULL) {
                seterr(eb, ebn, "limits: a window is NULL%s%s", "", "");
                return SLUICE_EINVAL;
            }
            char err[256];
            int rc = sl_config_override_window(o->limits[i], strlen(o->limits[i]), cp->algo, &w[i],
                                               labels[i], sizeof(labels[i]), err, sizeof(err));
            if (rc != SLUICE_OK) {
                if (eb != NULL && ebn > 0) snprintf(eb, ebn, "limits[%zu]: %s", i, err);
                return rc;
            }
            names[i] = labels[i][0] ? labels[i] : NULL;
            blen += strlen(o->limits[i]) + 1;
        }
        char why[256];
        int rc = sl_engine_ovr_compile(g->eng, policy, w, names, o->n_limits, tm.win, why,
                                       sizeof(why));
        if (rc != SLUICE_OK) {
            seterr(eb, ebn, "%s%s", why, "");
            return rc;
        }
        tm.nwin = (uint8_t)o->n_limits;
        tm.kind = SL_OVR_LIMITS;
        body = malloc(blen);
        if (body == NULL) return SLUICE_ENOMEM;
        size_t bo = 0;
        body[bo++] = '[';
        for (size_t i = 0; i < o->n_limits; i++) {
            size_t l = strlen(o->limits[i]);
            if (i) body[bo++] = ',';
            memcpy(body + bo, o->limits[i], l);
            bo += l;
        }
        body[bo++] = ']';
        body[bo] = '\0';
        break;
    }
    default:
        seterr(eb, ebn, "kind: plan, limits, block or exempt%s%s", "", "");
        return SLUICE_EINVAL;
    }
    if ((o->reason && strlen(o->reason) > 1024) || (o->label && strlen(o->label) > 256)) {
        seterr(eb, ebn, "%s: too long%s", o->reason && strlen(o->reason) > 1024 ? "reason" : "label", "");
        free(body);
        return SLUICE_EINVAL;
    }
    if (o->expires_wall_ns != 0) {
        if (o->expires_wall_ns <= now.wall_ns) {
            seterr(eb, ebn, "expires_at: in the past%s%s", "", "");
            free(body);
            return SLUICE_EINVAL;
        }
        tm.expires_ns = o->expires_wall_ns;
    }
    int rc = key_hash(t, policy, key, key_len, &tm.h);
    if (rc != SLUICE_OK) {
        seterr(eb, ebn, "key: %s%s", rc == SLUICE_ENOMEM ? "out of memory"
               : "a key is required (its parts joined by '|', each percent-encoded)", "");
        free(body);
        return rc;
    }
    tm.set_at_ns = now.wall_ns;
    bool keep_raw = sl_config_settings(g->cfg)->log_raw_keys;
    sl_ovr_rec *rec = sl_ovr_rec_new(&tm, policy, keep_raw ? key : NULL, keep_raw ? key_len : 0,
                                     plan, o->reason, o->label, NULL, body);
    free(body);
    if (rec == NULL) return SLUICE_ENOMEM;
    bool cr = false;
    sl_ovr_rec *old = NULL;
    rc = sl_ovr_put(t, rec, now.wall_ns, &cr, &old);
    if (rc != SLUICE_OK) {
        sl_ovr_rec_free(rec);
        if (rc == SLUICE_EFULL && eb != NULL && ebn > 0)
            snprintf(eb, ebn, "overrides.max (%llu) overrides are set: remove some first",
                     (unsigned long long)sl_ovr_max(t));
        return rc;
    }
    sl_ovr_rec_free(old);
    if (created) *created = cr;
    return SLUICE_OK;
}

int sluice_override_set(sluice_engine *e, const char *policy, const char *key, size_t key_len,
                        const sluice_override *o, sluice_time now, int *created, char *errbuf,
                        size_t errbuf_len) {
    if (errbuf != NULL && errbuf_len > 0) errbuf[0] = '\0';
    if (created) *created = 0;
    if (e == NULL || policy == NULL || o == NULL) return SLUICE_EINVAL;
    sl_ovr_table *t = sl_store_overrides(e->store);
    if (t == NULL) return SLUICE_EINVAL;
    gen *g = gen_acquire(e);
    int rc = set_locked(g, t, policy, key, key_len, o, now, created, errbuf, errbuf_len);
    gen_release(g);
    return rc;
}

static sluice_override_info *info_of(const sl_ovr_rec *r) {
    size_t sz = sizeof(sluice_override_info);
    const char *strs[] = {r->policy, r->plan, r->body, r->reason, r->label};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) sz += strs[i] ? strlen(strs[i]) + 1 : 0;
    sz += r->key ? r->key_len + 1 : 0;
    sluice_override_info *in = calloc(1, sz);
    if (in == NULL) return NULL;
    char *p = (char *)(in + 1);
#define CP(dst, src)                                                                             \
    do {                                                                                         \
        if ((src) != NULL) {                                                                     \
            size_t l_ = strlen(src);                                                             \
            memcpy(p, (src), l_ + 1);                                                            \
            (dst) = p;                                                                           \
            p += l_ + 1;                                                                         \
        }                                                                                        \
    } while (0)
    CP(in->policy, r->policy);
    CP(in->plan, r->plan);
    if (r->kind == SL_OVR_LIMITS) CP(in->limits, r->body);
    CP(in->reason, r->reason);
    CP(in->label, r->label);
#undef CP
    if (r->key != NULL) {
        memcpy(p, r->key, r->key_len);
        p[r->key_len] = '\0';
        in->key = p;
        in->key_len = r->key_len;
    }
    snprintf(in->key_hash, sizeof(in->key_hash), "%016llx%016llx", (unsigned long long)r->h.hi,
             (unsigned long long)r->h.lo);
    in->kind = (sluice_override_kind)r->kind;
    in->expires_wall_ns = r->expires_ns;
    in->set_wall_ns = r->set_at_ns;
    return in;
}

int sluice_override_get(sluice_engine *e, const char *policy, const char *key, size_t key_len,
                        sluice_time now, sluice_override_info **out) {
    if (out != NULL) *out = NULL;
    if (e == NULL || policy == NULL || out == NULL) return SLUICE_EINVAL;
    sl_ovr_table *t = sl_store_overrides(e->store);
    if (t == NULL) return SLUICE_EINVAL;
    sl_hash128 h;
    int rc = key_hash(t, policy, key, key_len, &h);
    if (rc != SLUICE_OK) return rc;
    sl_ovr_rec *r = sl_ovr_get(t, h, now.wall_ns);
    if (r == NULL) return SLUICE_ENOTFOUND;
    *out = info_of(r);
    sl_ovr_rec_free(r);
    return *out ? SLUICE_OK : SLUICE_ENOMEM;
}

void sluice_override_info_free(sluice_override_info *info) {
    free(info);
}

int sluice_override_remove(sluice_engine *e, const char *policy, const char *key, size_t key_len,
                           sluice_time now) {
    if (e == NULL || policy == NULL) return SLUICE_EINVAL;
    sl_ovr_table *t = sl_store_overrides(e->store);
    if (t == NULL) return SLUICE_EINVAL;
    sl_hash128 h;
    int rc = key_hash(t, policy, key, key_len, &h);
    if (rc != SLUICE_OK) return rc;
    sl_ovr_rec *old = NULL;
    rc = sl_ovr_del(t, h, now.wall_ns, &old);
    sl_ovr_rec_free(old);
    return rc;
}

typedef struct each_ctx {
    const char *policy;
    int (*fn)(void *, const sluice_override_info *);
    void *ud;
    int seen;
    bool stop, oom;
} each_ctx;

static void each_one(void *ud, const sl_ovr_rec *r) {
    each_ctx *c = ud;
    if (c->stop) return;
    if (c->policy != NULL && (r->policy == NULL || strcmp(r->policy, c->policy) != 0)) return;
    sluice_override_info *in = info_of(r);
    if (in == NULL) {
        c->oom = c->stop = true;
        return;
    }
    c->seen++;
    if (c->fn(c->ud, in) != 0) c->stop = true;
    free(in);
}

int sluice_override_each(sluice_engine *e, const char *policy, sluice_time now,
                         int (*fn)(void *ud, const sluice_override_info *info), void *ud) {
    if (e == NULL || fn == NULL) return SLUICE_EINVAL;
    sl_ovr_table *t = sl_store_overrides(e->store);
    if (t == NULL) return SLUICE_EINVAL;
    each_ctx c = {policy, fn, ud, 0, false, false};
    unsigned shard = 0;
    uint32_t slot = 0;
    while (!c.stop && sl_ovr_scan(t, &shard, &slot, 256, now.wall_ns, each_one, &c)) {
    }
    return c.oom ? SLUICE_ENOMEM : c.seen;
}
