/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides.c -- the override service behind PUT/GET/DELETE /v1/overrides, import and
 * SL.OVERRIDE (overrides.h): validation against the policy in force (numbers only, in the
 * config's syntax; a known plan; an expiry in the future), the store record, the JSON an
 * operator sees and the audit entry of every change. Not on the decision path.
 */
#define _DEFAULT_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/compiled.h"
#include "core/audit.h"
#include "store/redis/override.h"
#include "store/redis/store.h"
#include "server/observe.h"
#include "api/admin/overrides.h"
#include "server/server.h"

_Atomic uint64_t sl_ovr_decisions[5];

bool sl_admin_may(const sl_gen *g, const char *token_name, sl_admin_what what) {
    if (g == NULL || token_name == NULL || token_name[0] == '\0' || (what & SL_ADMIN_OVERRIDES) == 0)
        return true;
    const sl_settings *st = sl_config_settings(g->cfg);
    for (unsigned i = 0; i < st->n_admin_tokens; i++)
        if (strcmp(st->admin_tokens[i].name, token_name) == 0) return !st->admin_tokens[i].read_only;
    return true; /* admin.token ("admin"): role act */
}

static void resf(sl_ovr_res *r, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void resf(sl_ovr_res *r, int status, const char *field, const char *fmt, ...) {
    r->status = status;
    snprintf(r->field, sizeof(r->field), "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
    va_end(ap);
}

/* ---- keys ------------------------------------------------------------------------- */

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

void sl_ovr_hash_hex(sl_hash128 h, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}

bool sl_ovr_hex_hash(const char *s, sl_hash128 *h) {
    if (s == NULL || strlen(s) != 32) return false;
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        int v = hexv(s[i]);
        if (v < 0) return false;
        w[i / 16] = w[i / 16] << 4 | (uint64_t)v;
    }
    h->hi = w[0];
    h->lo = w[1];
    return true;
}

/* ---- times ------------------------------------------------------------------------ */

static bool digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* RFC 3339: 2026-12-04T10:00:00Z, with fractions and a ±HH:MM offset. */
static bool parse_rfc3339(const char *s, int64_t *ns) {
    int Y, M, D, h, m, sec;
    size_t n = strlen(s);
    if (n < 20 || !digits(s, 4, &Y) || s[4] != '-' || !digits(s + 5, 2, &M) || s[7] != '-' ||
        !digits(s + 8, 2, &D) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &m) || s[16] != ':' ||
        !digits(s + 17, 2, &sec))
        return false;
    if (Y < 1970 || Y > 9999 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return false;
    const char *p = s + 19;
    int64_t frac = 0;
    if (*p == '.') {
        p++;
        int k = 0;
        while (*p >= '0' && *p <= '9') {
            if (k < 9) frac = frac * 10 + (*p - '0');
            k++;
            p++;
        }
        if (k == 0) return false;
        for (; k < 9; k++) frac *= 10;
    }
    int64_t off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        off = (int64_t)(oh * 60 + om) * 60 * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return false;
    }
    if (*p != '\0') return false;
    struct tm tm = {0};
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1) return false;
    *ns = ((int64_t)t - off) * SLUICE_NS_PER_S + frac;
    return true;
}

static void fmt_rfc3339(int64_t ns, char out[40]) {
    time_t t = (time_t)(ns / SLUICE_NS_PER_S);
    int64_t ms = (ns % SLUICE_NS_PER_S) / SLUICE_NS_PER_MS;
    struct tm tm;
    gmtime_r(&t, &tm);
    char b[32];
    strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
    if (ms) snprintf(out, 40, "%s.%03lldZ", b, (long long)ms);
    else snprintf(out, 40, "%sZ", b);
}

/* ---- records as JSON ---------------------------------------------------------------- */

static const char *kind_name(unsigned k) {
    switch (k) {
    case SL_OVR_PLAN: return "plan";
    case SL_OVR_LIMITS: return "limits";
    case SL_OVR_BLOCK: return "block";
    case SL_OVR_EXEMPT: return "exempt";
    default: return "none";
    }
}

json_t *sl_ovr_rec_json(const sl_ovr_rec *r, bool with_meta) {
    json_t *o = json_object();
    if (o == NULL) return NULL;
    char hx[33];
    sl_ovr_hash_hex(r->h, hx);
    json_object_set_new(o, "policy", json_string(r->policy));
    if (r->key != NULL) json_object_set_new(o, "key", json_stringn(r->key, r->key_len));
    if (r->key == NULL || with_meta) json_object_set_new(o, "key_hash", json_string(hx));
    if (r->kind == SL_OVR_PLAN) {
        json_object_set_new(o, "plan", json_string(r->plan));
    } else if (r->kind == SL_OVR_LIMITS) {
        json_error_t e;
        json_t *l = r->body ? json_loads(r->body, 0, &e) : NULL;
        json_object_set_new(o, "limits", l ? l : json_array());
    } else if (r->kind == SL_OVR_BLOCK) {
        json_object_set_new(o, "block", json_true());
    } else if (r->kind == SL_OVR_EXEMPT) {
        json_object_set_new(o, "exempt", json_true());
    }
    char t[40];
    if (r->expires_ns) {
        fmt_rfc3339(r->expires_ns, t);
        json_object_set_new(o, "expires_at", json_string(t));
    }
    if (r->reason) json_object_set_new(o, "reason", json_string(r->reason));
    if (r->label) json_object_set_new(o, "label", json_string(r->label));
    if (with_meta) {
        json_object_set_new(o, "kind", json_string(kind_name(r->kind)));
        json_object_set_new(o, "set_by", r->set_by ? json_string(r->set_by) : json_null());
        fmt_rfc3339(r->set_at_ns, t);
        json_object_set_new(o, "set_at", json_string(t));
    }
    return o;
}

bool sl_ovr_orphaned(const sl_engine *e, const sl_ovr_rec *r) {
    int k = sl_engine_ovr_policy(e, r->policy, r->kind == SL_OVR_PLAN ? r->plan : NULL, NULL);
    return k != 1;
}

/* ---- audit ------------------------------------------------------------------------ */

static void audit_why(sl_server *s, const char *who, const char *policy, sl_hash128 h,
                      const char *label, json_t *before, json_t *after, const char *why) {
    if (s == NULL || s->obs == NULL || s->obs->audit == NULL) return;
    char hx[33];
    sl_ovr_hash_hex(h, hx);
    char *b = before ? json_dumps(before, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *a = after ? json_dumps(after, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    size_t n = strlen(hx) + (label ? strlen(label) : 0) + (b ? strlen(b) : 4) + (a ? strlen(a) : 4) +
               (why ? strlen(why) : 0) + 80;
    char *how = malloc(n);
    if (how != NULL) {
        snprintf(how, n, "override %s%s%s%s: %s -> %s%s%s", hx, label ? " (" : "", label ? label : "",
                 label ? ")" : "", b ? b : "none", a ? a : "none", why ? "; reason: " : "",
                 why ? why : "");
        sl_audit_change ch = {policy, how};
        sl_audit_event ev = {.source = SL_AUDIT_OVERRIDE, .caller = who && who[0] ? who : NULL,
                             .changed = &ch, .nchanged = 1, .ok = 1};
        sl_gen *g = atomic_load(&s->gen);
        if (g != NULL) ev.generation = g->id;
        sl_audit_record(s->obs->audit, &ev);
    }
    free(how);
    free(b);
    free(a);
}

static void audit(sl_server *s, const char *who, const char *policy, sl_hash128 h,
                  const char *label, json_t *before, json_t *after) {
    audit_why(s, who, policy, h, label, before, after, NULL);
}

/* ---- set / get / remove ----------------------------------------------------------- */

static const sl_cpolicy *find_cpolicy(const sl_engine *e, const char *name) {
    const sl_config *cfg = sl_engine_config(e);
    for (size_t i = 0; i < cfg->n_pol; i++)
        if (strcmp(cfg->pol[i].name, name) == 0) return &cfg->pol[i];
    return NULL;
}

/* The table of the server's store (with Redis: the local copy, see store/redis/override.h). */
static sl_ovr_table *table_of(sl_server *s, sl_ovr_res *res) {
    sl_ovr_table *t = sl_store_overrides(s->store);
    if (t == NULL) resf(res, 501, "", "this store keeps no overrides");
    return t;
}

/* ---- the Redis store: what Redis holds for one override --------------------------- */

#define REDIS_WRITE_NS (2 * SLUICE_NS_PER_S)

/* The stored form: the re-importable line plus who set it and when (sorted keys, so an
 * instance recognises its own change when the feed brings it back). */
static char *redis_value(const sl_ovr_rec *r) {
    json_t *o = sl_ovr_rec_json(r, false);
    if (o == NULL) return NULL;
    char t[40];
    fmt_rfc3339(r->set_at_ns, t);
    json_object_set_new(o, "set_at", json_string(t));
    if (r->set_by) json_object_set_new(o, "set_by", json_string(r->set_by));
    char *v = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return v;
}

/* Writes n changes to Redis in one call, then waits for the feed to bring them into the
 * local table: every change reaches the table in Redis's order (a concurrent change on
 * another instance cannot be overwritten here by an older one). res says why not. */
static int redis_write(sl_ovr_res *res, const char *const *hex, const char *const *val, size_t n) {
    uint64_t ver = 0;
    int rc = sl_redis_ovr_write(hex, val, n, REDIS_WRITE_NS, &ver);
    if (rc == SLUICE_OK && !sl_redis_ovr_wait(ver, REDIS_WRITE_NS)) {
        resf(res, 503, "", "Redis took the change but this instance's copy did not follow "
             "within %d s: it applies once the copy catches up", (int)(REDIS_WRITE_NS / SLUICE_NS_PER_S));
        return SLUICE_ESTORE;
    }
    if (rc != SLUICE_OK)
        resf(res, 503, "", "the Redis store did not confirm the change within %d s (%s): it "
             "was not applied here; retry", (int)(REDIS_WRITE_NS / SLUICE_NS_PER_S),
             sluice_strerror(rc));
    return rc;
}

static int redis_put(sl_ovr_res *res, sl_hash128 h, const char *val) {
    char hx[33];
    sl_ovr_hash_hex(h, hx);
    const char *hp = hx;
    return redis_write(res, &hp, &val, 1);
}

static bool hash_of(sl_ovr_table *t, const char *policy, const char *key, size_t key_len,
                    const char *key_hash, sl_hash128 *h, sl_ovr_res *res) {
    if (key_hash != NULL) {
        if (!sl_ovr_hex_hash(key_hash, h)) {
            resf(res, 400, "key_hash", "key_hash: 32 hexadecimal digits");
            return false;
        }
        return true;
    }
    if (key == NULL || key_len == 0) {
        resf(res, 400, "key", "key: a key is required (its parts joined by '|', each percent-encoded)");
        return false;
    }
    if (!sl_ovr_key_hash(t, policy, key, key_len, h)) {
        resf(res, 400, "key", "key: bad percent-encoding or more than %d parts", SL_MAX_PARTS);
        return false;
    }
    return true;
}

static bool get_str(json_t *body, const char *k, size_t max, const char **out, sl_ovr_res *res) {
    json_t *v = json_object_get(body, k);
    *out = NULL;
    if (v == NULL || json_is_null(v)) return true;
    if (!json_is_string(v) || json_string_length(v) > max) {
        resf(res, 400, k, "%s: a string of at most %zu bytes", k, max);
        return false;
    }
    *out = json_string_value(v);
    return true;
}

/* sync: a change another instance made, as the Redis feed brings it (no write back, no
 * audit: the instance that made it audited it; set_by and set_at are the line's). */
static int set_impl(sl_server *s, const sl_engine *e, const char *policy, const char *key,
                    size_t key_len, const char *key_hash, json_t *body, const char *who,
                    sluice_time now, json_t **out, bool *created, sl_ovr_res *res, bool sync,
                    sl_ovr_batch *batch, uint64_t line);

int sl_ovr_set(sl_server *s, const sl_engine *e, const char *policy, const char *key,
               size_t key_len, const char *key_hash, json_t *body, const char *who,
               sluice_time now, json_t **out, bool *created, sl_ovr_res *res) {
    return set_impl(s, e, policy, key, key_len, key_hash, body, who, now, out, created, res, false,
                    NULL, 0);
}

/* ---- batches (the import on the Redis store) ---------------------------------------- */

/* One queued change: what its write, its audit entry and its answer need. */
typedef struct bent {
    sl_hash128 h;
    char hex[33];
    char *val;         /* the stored form */
    sl_ovr_rec *ex;    /* what this instance had before (the audit's before) */
    char *policy, *label, *who;
    uint64_t line;
} bent;

struct sl_ovr_batch {
    bent e[SL_OVR_BATCH];
    size_t n, fresh; /* queued, of which new keys (overrides.max counts them) */
};

sl_ovr_batch *sl_ovr_batch_new(void) { return calloc(1, sizeof(sl_ovr_batch)); }

static void bent_clear(bent *b) {
    free(b->val);
    sl_ovr_rec_free(b->ex);
    free(b->policy);
    free(b->label);
    free(b->who);
    memset(b, 0, sizeof(*b));
}

size_t sl_ovr_batch_size(const sl_ovr_batch *b) { return b != NULL ? b->n : 0; }

static bool batch_has(const sl_ovr_batch *b, sl_hash128 h) {
    for (size_t i = 0; i < b->n; i++)
        if (b->e[i].h.lo == h.lo && b->e[i].h.hi == h.hi) return true;
    return false;
}

void sl_ovr_batch_flush(sl_server *s, sl_ovr_batch *b, sluice_time now, sl_ovr_batch_done done,
                        void *ud) {
    if (b == NULL || b->n == 0) return;
    const char *hex[SL_OVR_BATCH], *val[SL_OVR_BATCH];
    for (size_t i = 0; i < b->n; i++) hex[i] = b->e[i].hex, val[i] = b->e[i].val;
    sl_ovr_res res = {0};
    bool seen = redis_write(&res, hex, val, b->n) == SLUICE_OK;
    char why[sizeof(res.detail) + 8];
    snprintf(why, sizeof(why), "%d %s", res.status, res.detail);
    sl_ovr_table *t = sl_store_overrides(s->store);
    for (size_t i = 0; i < b->n; i++) {
        bent *x = &b->e[i];
        if (seen && t != NULL) {
            sl_ovr_rec *cur = sl_ovr_get(t, x->h, now.wall_ns);
            json_t *before = x->ex ? sl_ovr_rec_json(x->ex, false) : NULL;
            json_t *after = cur ? sl_ovr_rec_json(cur, false) : NULL;
            audit(s, x->who, x->policy, x->h, x->label, before, after);
            json_decref(before);
            json_decref(after);
            sl_ovr_rec_free(cur);
        }
        done(ud, x->line, seen ? NULL : why);
        bent_clear(x);
    }
    b->n = b->fresh = 0;
}

void sl_ovr_batch_free(sl_ovr_batch *b) {
    if (b == NULL) return;
    for (size_t i = 0; i < b->n; i++) bent_clear(&b->e[i]);
    free(b);
}

int sl_ovr_set_batched(sl_server *s, const sl_engine *e, const char *policy, const char *key,
                       size_t key_len, const char *key_hash, json_t *body, const char *who,
                       sluice_time now, sl_ovr_batch *b, uint64_t line, sl_ovr_res *res) {
    json_t *out = NULL;
    bool created;
    bool redis = s != NULL && s->redis && b != NULL;
    int rc = set_impl(s, e, policy, key, key_len, key_hash, body, who, now, &out, &created, res,
                      false, redis ? b : NULL, line);
    json_decref(out);
    return rc;
}

static int set_impl(sl_server *s, const sl_engine *e, const char *policy, const char *key,
                    size_t key_len, const char *key_hash, json_t *body, const char *who,
                    sluice_time now, json_t **out, bool *created, sl_ovr_res *res, bool sync,
                    sl_ovr_batch *batch, uint64_t line) {
    *out = NULL;
    *created = false;
    res->status = 0;
    sl_ovr_table *t = table_of(s, res);
    if (t == NULL) return -1;
    sl_ovr_set_max(t, sl_config_settings(sl_engine_config(e))->overrides_max);
    if (!json_is_object(body)) {
        resf(res, 400, "", "the body is a JSON object such as {\"plan\": \"enterprise\"}");
        return -1;
    }
    int pk = sl_engine_ovr_policy(e, policy, NULL, NULL);
    const sl_cpolicy *cp = find_cpolicy(e, policy);
    if (pk == 0 || cp == NULL) {
        resf(res, 404, "policy", "no policy %.128s in the configuration in force", policy);
        return -1;
    }
    if (pk == -2) {
        resf(res, 400, "policy", "policy %.128s cannot take overrides (capacity protection or an "
             "envoy rule)", policy);
        return -1;
    }
    static const char *const fields[] = {"plan", "limits", "block", "exempt", "expires_at",
                                         "reason", "label", "policy", "key", "key_hash",
                                         "set_by", "set_at", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        bool known = false;
        for (int i = 0; fields[i] && !known; i++) known = strcmp(fields[i], k) == 0;
        if (!known) {
            resf(res, 400, k, "%.60s: unknown field (expected plan, limits, block, exempt, "
                 "expires_at, reason, label)", k);
            return -1;
        }
    }
    json_t *jp = json_object_get(body, "plan"), *jl = json_object_get(body, "limits"),
           *jb = json_object_get(body, "block"), *je = json_object_get(body, "exempt");
    int nk = (jp != NULL) + (jl != NULL) + (jb != NULL) + (je != NULL);
    if (nk != 1) {
        resf(res, 400, nk ? "plan" : "limits", "exactly one of plan, limits, block, exempt");
        return -1;
    }
    sl_ovr_rec tm;
    memset(&tm, 0, sizeof(tm));
    const char *plan = NULL;
    char *body_text = NULL;
    if (jp != NULL) {
        if (!json_is_string(jp) || (plan = json_string_value(jp))[0] == '\0') {
            resf(res, 400, "plan", "plan: the name of one of the policy's plans");
            return -1;
        }
        if (sl_engine_ovr_policy(e, policy, plan, NULL) == -3) {
            resf(res, 400, "plan", "plan: policy %.100s has no plan %.60s", policy, plan);
            return -1;
        }
        tm.kind = SL_OVR_PLAN;
    } else if (jb != NULL || je != NULL) {
        if (!json_is_true(jb ? jb : je)) {
            resf(res, 400, jb ? "block" : "exempt", "%s: true (or leave it out)", jb ? "block" : "exempt");
            return -1;
        }
        tm.kind = jb ? SL_OVR_BLOCK : SL_OVR_EXEMPT;
    } else {
        if (!json_is_array(jl) || json_array_size(jl) == 0 || json_array_size(jl) > SL_OVR_MAX_WIN) {
            resf(res, 400, "limits", "limits: a list of 1 to %d windows such as [{\"rate\": \"3000/min\"}]",
                 SL_OVR_MAX_WIN);
            return -1;
        }
        size_t n = json_array_size(jl);
        sl_cwindow w[SL_OVR_MAX_WIN];
        char labels[SL_OVR_MAX_WIN][128];
        const char *names[SL_OVR_MAX_WIN];
        for (size_t i = 0; i < n; i++) {
            json_t *wi = json_array_get(jl, i);
            char field[32];
            snprintf(field, sizeof(field), "limits[%zu]", i);
            if (!json_is_object(wi)) {
                resf(res, 400, field, "%s: an object such as {\"rate\": \"3000/min\"}", field);
                return -1;
            }
            char *txt = json_dumps(wi, JSON_COMPACT);
            char err[256];
            int rc = txt ? sl_config_override_window(txt, strlen(txt), cp->algo, &w[i], labels[i],
                                                     sizeof(labels[i]), err, sizeof(err))
                         : SLUICE_ENOMEM;
            free(txt);
            if (rc != SLUICE_OK) {
                /* name the field the parser complained about when it says which */
                const char *sub = strstr(err, "rate") ? "rate" : strstr(err, "quota") ? "quota"
                                  : strstr(err, "burst") ? "burst" : strstr(err, "algorithm") ? "algorithm" : NULL;
                char f2[64];
                snprintf(f2, sizeof(f2), "%s%s%s", field, sub ? "." : "", sub ? sub : "");
                resf(res, 400, f2, "%s: %s", f2, rc == SLUICE_ENOMEM ? "out of memory" : err);
                return -1;
            }
            names[i] = labels[i][0] ? labels[i] : NULL;
        }
        char why[256];
        int rc = sl_engine_ovr_compile(e, policy, w, names, n, tm.win, why, sizeof(why));
        if (rc != SLUICE_OK) {
            char f2[64] = "limits";
            const char *colon = strchr(why, ':');
            if (strncmp(why, "limits", 6) == 0 && colon != NULL && (size_t)(colon - why) < sizeof(f2))
                snprintf(f2, sizeof(f2), "%.*s", (int)(colon - why), why);
            resf(res, 400, f2, "%s", why);
            return -1;
        }
        tm.nwin = (uint8_t)n;
        tm.kind = SL_OVR_LIMITS;
        body_text = json_dumps(jl, JSON_COMPACT);
        if (body_text == NULL) {
            resf(res, 500, "", "out of memory");
            return -1;
        }
    }
    const char *exp = NULL, *reason = NULL, *label = NULL;
    if (!get_str(body, "expires_at", 64, &exp, res) || !get_str(body, "reason", 1024, &reason, res) ||
        !get_str(body, "label", 256, &label, res)) {
        free(body_text);
        return -1;
    }
    if (exp != NULL) {
        if (!parse_rfc3339(exp, &tm.expires_ns)) {
            resf(res, 400, "expires_at", "expires_at: an RFC 3339 time such as 2026-12-31T23:59:59Z");
            free(body_text);
            return -1;
        }
        if (tm.expires_ns <= now.wall_ns) {
            resf(res, 400, "expires_at", "expires_at: %.40s is in the past (the server's clock says "
                 "otherwise)", exp);
            free(body_text);
            return -1;
        }
    }
    if (!hash_of(t, policy, key, key_len, key_hash, &tm.h, res)) {
        free(body_text);
        return -1;
    }
    tm.set_at_ns = now.wall_ns;
    const sl_settings *st = sl_config_settings(sl_engine_config(e));
    bool keep_raw = st->log_raw_keys && (key_hash == NULL || (sync && key != NULL));
    if (sync) {
        const char *sa = NULL;
        if (get_str(body, "set_at", 64, &sa, res) && sa != NULL) parse_rfc3339(sa, &tm.set_at_ns);
        if (!get_str(body, "set_by", 256, &who, res)) who = NULL;
    }
    sl_ovr_rec *rec = sl_ovr_rec_new(&tm, policy, keep_raw ? key : NULL, keep_raw ? key_len : 0,
                                     plan, reason, label, who && who[0] ? who : NULL, body_text);
    free(body_text);
    if (rec == NULL) {
        resf(res, 500, "", "out of memory");
        return -1;
    }
    sl_ovr_rec *ex = NULL; /* Redis: what this instance had before the change */
    bool redis_first = s != NULL && s->redis && !sync;
    if (redis_first) {
        /* Redis first: a change is answered once every instance can see it */
        if (batch != NULL && (batch->n == SL_OVR_BATCH || batch_has(batch, tm.h))) {
            sl_ovr_rec_free(rec);
            return 2; /* the caller flushes the batch and asks again */
        }
        ex = sl_ovr_get(t, tm.h, now.wall_ns);
        bool full = ex == NULL && sl_ovr_count(t) + (batch ? batch->fresh : 0) >= sl_ovr_max(t);
        if (full) {
            sl_ovr_rec_free(ex);
            sl_ovr_rec_free(rec);
            resf(res, 507, "", "overrides.max (%llu) overrides are set: remove some first",
                 (unsigned long long)sl_ovr_max(t));
            return -1;
        }
        char *val = redis_value(rec);
        if (batch != NULL) { /* queued: written, audited and answered by the flush */
            bent *x = &batch->e[batch->n];
            x->policy = strdup(policy);
            x->label = label ? strdup(label) : NULL;
            x->who = who ? strdup(who) : NULL;
            if (val == NULL || x->policy == NULL || (label && x->label == NULL) ||
                (who && x->who == NULL)) {
                free(val);
                bent_clear(x);
                sl_ovr_rec_free(ex);
                sl_ovr_rec_free(rec);
                resf(res, 500, "", "out of memory");
                return -1;
            }
            x->h = tm.h;
            sl_ovr_hash_hex(tm.h, x->hex);
            x->val = val;
            x->ex = ex;
            x->line = line;
            batch->fresh += ex == NULL;
            batch->n++;
            sl_ovr_rec_free(rec);
            return 1;
        }
        int wrc = val != NULL ? redis_put(res, tm.h, val) : SLUICE_ENOMEM;
        free(val);
        if (wrc != SLUICE_OK) {
            if (wrc == SLUICE_ENOMEM) resf(res, 500, "", "out of memory");
            sl_ovr_rec_free(ex);
            sl_ovr_rec_free(rec);
            return -1;
        }
    }
    sl_ovr_rec *old = NULL;
    int rc;
    if (redis_first) { /* the feed has put it in the table (redis_put) */
        sl_ovr_rec_free(rec);
        *created = ex == NULL;
        old = ex;
        rc = SLUICE_OK;
    } else {
        rc = sl_ovr_put(t, rec, now.wall_ns, created, &old);
    }
    if (rc == SLUICE_EFULL) {
        sl_ovr_rec_free(rec);
        resf(res, 507, "", "overrides.max (%llu) overrides are set: remove some first",
             (unsigned long long)sl_ovr_max(t));
        return -1;
    }
    if (rc != SLUICE_OK) {
        sl_ovr_rec_free(rec);
        resf(res, 500, "", "out of memory");
        return -1;
    }
    /* rec is the table's now: render from a copy */
    sl_ovr_rec *cur = sl_ovr_get(t, tm.h, now.wall_ns);
    *out = cur ? sl_ovr_rec_json(cur, true) : json_object();
    json_t *before = old ? sl_ovr_rec_json(old, false) : NULL;
    json_t *after = cur ? sl_ovr_rec_json(cur, false) : NULL;
    if (!sync) audit(s, who, policy, tm.h, label, before, after);
    json_decref(before);
    json_decref(after);
    sl_ovr_rec_free(old);
    sl_ovr_rec_free(cur);
    return 0;
}

json_t *sl_ovr_get_json(sl_server *s, const sl_engine *e, const char *policy, const char *key,
                        size_t key_len, const char *key_hash, sluice_time now, sl_ovr_res *res) {
    res->status = 0;
    sl_ovr_table *t = table_of(s, res);
    if (t == NULL) return NULL;
    if (sl_engine_ovr_policy(e, policy, NULL, NULL) == 0) {
        /* a dormant override of a removed policy is still found by its name */
    }
    sl_hash128 h;
    if (!hash_of(t, policy, key, key_len, key_hash, &h, res)) return NULL;
    sl_ovr_rec *r = sl_ovr_get(t, h, now.wall_ns);
    if (r == NULL) {
        resf(res, 404, "", "no override for this key of policy %.128s", policy);
        return NULL;
    }
    json_t *o = sl_ovr_rec_json(r, true);
    if (sl_ovr_orphaned(e, r)) json_object_set_new(o, "orphaned", json_true());
    sl_ovr_rec_free(r);
    return o;
}

int sl_ovr_remove(sl_server *s, const sl_engine *e, const char *policy, const char *key,
                  size_t key_len, const char *key_hash, const char *who, sluice_time now,
                  sl_ovr_res *res) {
    return sl_ovr_remove_why(s, e, policy, key, key_len, key_hash, who, NULL, now, res);
}

int sl_ovr_remove_why(sl_server *s, const sl_engine *e, const char *policy, const char *key,
                      size_t key_len, const char *key_hash, const char *who, const char *why,
                      sluice_time now, sl_ovr_res *res) {
    (void)e;
    res->status = 0;
    sl_ovr_table *t = table_of(s, res);
    if (t == NULL) return -1;
    sl_hash128 h;
    if (!hash_of(t, policy, key, key_len, key_hash, &h, res)) return -1;
    sl_ovr_rec *ex = NULL;
    if (s != NULL && s->redis) {
        ex = sl_ovr_get(t, h, now.wall_ns);
        if (ex == NULL) {
            resf(res, 404, "", "no override for this key of policy %.128s", policy);
            return -1;
        }
        if (redis_put(res, h, NULL) != SLUICE_OK) {
            sl_ovr_rec_free(ex);
            return -1;
        }
    }
    sl_ovr_rec *old = ex; /* Redis: the feed has removed it here (redis_put) */
    int rc = ex != NULL ? SLUICE_OK : sl_ovr_del(t, h, now.wall_ns, &old);
    if (rc == SLUICE_ENOTFOUND) {
        resf(res, 404, "", "no override for this key of policy %.128s", policy);
        return -1;
    }
    if (rc != SLUICE_OK) {
        resf(res, 500, "", "out of memory");
        return -1;
    }
    json_t *before = sl_ovr_rec_json(old, false);
    audit_why(s, who, policy, h, old->label, before, NULL, why);
    json_decref(before);
    sl_ovr_rec_free(old);
    return 0;
}

/* ---- the Redis store: the feed of other instances' changes ------------------------- */

static struct {
    sl_server *s;
    sl_hash128 *seen; /* a full pass: the overrides Redis holds */
    size_t nseen, capseen;
    bool full;
    _Atomic uint64_t refused; /* changes this instance could not apply (its config) */
} R;

static sl_gen *pin_gen(sl_server *s) {
    pthread_mutex_lock(&s->reload_mu);
    sl_gen *g = atomic_load(&s->gen);
    if (g != NULL) atomic_fetch_add(&g->refs, 1);
    pthread_mutex_unlock(&s->reload_mu);
    return g;
}

static void drop_local(sl_ovr_table *t, sl_hash128 h, int64_t now) {
    sl_ovr_rec *old = NULL;
    if (sl_ovr_del(t, h, now, &old) == SLUICE_OK) sl_ovr_rec_free(old);
}

static void r_apply(void *ud, const char *hex, const char *val, size_t len) {
    sl_server *s = ud;
    sl_ovr_table *t = sl_store_overrides(s->store);
    sl_hash128 h;
    if (t == NULL || !sl_ovr_hex_hash(hex, &h)) return;
    sluice_time now = sluice_clock_now(s->clock);
    if (val == NULL) {
        drop_local(t, h, now.wall_ns);
        return;
    }
    if (R.full) {
        if (R.nseen == R.capseen) {
            size_t nc = R.capseen ? R.capseen * 2 : 4096;
            sl_hash128 *n = realloc(R.seen, nc * sizeof(*n));
            if (n != NULL) R.seen = n, R.capseen = nc;
        }
        if (R.nseen < R.capseen) R.seen[R.nseen++] = h;
    }
    sl_ovr_rec *cur = sl_ovr_get(t, h, now.wall_ns);
    if (cur != NULL) {
        char *mine = redis_value(cur);
        bool same = mine != NULL && strlen(mine) == len && memcmp(mine, val, len) == 0;
        free(mine);
        sl_ovr_rec_free(cur);
        if (same) return; /* this instance's own change, or one it has */
    }
    json_error_t je;
    json_t *body = json_loadb(val, len, 0, &je);
    json_t *jp = body ? json_object_get(body, "policy") : NULL;
    json_t *jk = body ? json_object_get(body, "key") : NULL;
    sl_ovr_res res = {0};
    int rc = -1;
    if (json_is_string(jp)) {
        sl_gen *g = pin_gen(s);
        json_t *out = NULL;
        bool created = false;
        if (g != NULL)
            rc = set_impl(s, g->engine, json_string_value(jp), json_is_string(jk) ? json_string_value(jk) : NULL,
                          json_is_string(jk) ? json_string_length(jk) : 0, hex, body, NULL, now, &out,
                          &created, &res, true, NULL, 0);
        json_decref(out);
        sl_gen_release(g);
    }
    json_decref(body);
    if (rc != 0) {
        /* not applicable here (its policy or plan is not in this instance's config, it
         * expired, this copy is full): none here, as on a reload that removed it */
        drop_local(t, h, now.wall_ns);
        atomic_fetch_add(&R.refused, 1);
    }
}

static void r_full_begin(void *ud) {
    (void)ud;
    R.full = true;
    R.nseen = 0;
}

static int cmp_hash(const void *a, const void *b) {
    const sl_hash128 *x = a, *y = b;
    if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return 0;
}

typedef struct gone_ctx {
    sl_hash128 *v;
    size_t n, cap;
} gone_ctx;

static void collect_gone(void *ud, const sl_ovr_rec *r) {
    gone_ctx *g = ud;
    if (R.nseen > 0 && bsearch(&r->h, R.seen, R.nseen, sizeof(R.seen[0]), cmp_hash) != NULL) return;
    if (g->n == g->cap) {
        size_t nc = g->cap ? g->cap * 2 : 256;
        sl_hash128 *n = realloc(g->v, nc * sizeof(*n));
        if (n == NULL) return;
        g->v = n, g->cap = nc;
    }
    g->v[g->n++] = r->h;
}

static void r_full_end(void *ud) {
    sl_server *s = ud;
    sl_ovr_table *t = sl_store_overrides(s->store);
    R.full = false;
    if (t == NULL) return;
    if (R.nseen > 0) qsort(R.seen, R.nseen, sizeof(R.seen[0]), cmp_hash);
    sluice_time now = sluice_clock_now(s->clock);
    gone_ctx g = {0};
    sl_ovr_each(t, now.wall_ns, collect_gone, &g);
    for (size_t i = 0; i < g.n; i++) drop_local(t, g.v[i], now.wall_ns);
    free(g.v);
    free(R.seen);
    R.seen = NULL;
    R.nseen = R.capseen = 0;
}

int sl_ovr_redis_start(sl_server *s, char *err, size_t errlen) {
    const sl_redis_opts *o = sl_redis_store_opts();
    sl_ovr_table *t = sl_store_overrides(s->store);
    if (!s->redis || o == NULL || t == NULL) return 0;
    /* every instance hashes keys alike: the key from the shared store secret */
    char buf[300];
    int n = snprintf(buf, sizeof(buf), "sluice overrides\n%.*s", (int)o->secret_len,
                     o->secret ? (const char *)o->secret : "");
    sl_hash_key k = sl_redis_secret_key(buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
    sl_ovr_reseed(t, &k);
    sl_ovr_set_stateless(t, true);
    R.s = s;
    const char *poll = getenv("SLUICE_OVERRIDES_POLL_MS"); /* tests: a slower feed */
    int64_t poll_ns = poll != NULL ? strtoll(poll, NULL, 10) * SLUICE_NS_PER_MS : 0;
    sl_redis_ovr_hooks h = {s, r_apply, r_full_begin, r_full_end};
    return sl_redis_ovr_start(o, &h, poll_ns, err, errlen) == SLUICE_OK ? 0 : -1;
}

uint64_t sl_ovr_redis_refused(void) { return atomic_load(&R.refused); }
