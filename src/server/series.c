/* SPDX-License-Identifier: Apache-2.0 */
/*
 * series.c -- the console's per-second ring and recent rejections (see series.h), and
 * their endpoints GET /v1/series and GET /v1/rejections. The writer is a worker's
 * thread; readers (admin requests on any worker) check a row's stamp before and after
 * reading it (a row reclaimed meanwhile is read as zero), and an entry's sequence number.
 * Units: the ring's seconds are whole seconds of the server's wall clock.
 */
#include "server/series.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/topk.h"
#include "engine/explain.h"
#include "server/observe.h"

#define NR SL_MET_RESULTS

size_t sl_series_bytes(unsigned seconds, unsigned nser) {
    return sizeof(sl_series_w) + (size_t)seconds * sizeof(int64_t) +
           (size_t)seconds * nser * NR * sizeof(uint32_t);
}

sl_series_w *sl_series_worker_new(unsigned seconds, unsigned nser) {
    if (seconds == 0 || nser == 0) return NULL;
    sl_series_w *sw = calloc(1, sizeof(*sw));
    if (sw == NULL) return NULL;
    sw->seconds = seconds;
    sw->nser = nser;
    sw->stamp = calloc(seconds, sizeof(*sw->stamp));
    sw->cnt = calloc((size_t)seconds * nser * NR, sizeof(*sw->cnt));
    if (sw->stamp == NULL || sw->cnt == NULL) {
        sl_series_worker_free(sw);
        return NULL;
    }
    for (unsigned i = 0; i < seconds; i++) atomic_init(&sw->stamp[i], -1);
    sw->from_ns = 1; /* empty: the first decision rolls */
    sw->to_ns = 0;
    return sw;
}

void sl_series_worker_free(sl_series_w *sw) {
    if (sw == NULL) return;
    free((void *)sw->stamp);
    free((void *)sw->cnt);
    free(sw);
}

/* Why floor division by hand: a wall clock before 1970 (a test clock) must not pick a
 * negative row. */
static int64_t sec_of(int64_t ns) {
    int64_t s = ns / SLUICE_NS_PER_S;
    return (ns % SLUICE_NS_PER_S < 0) ? s - 1 : s;
}

static size_t row_of(const sl_series_w *sw, int64_t sec) {
    int64_t r = sec % (int64_t)sw->seconds;
    return (size_t)(r < 0 ? r + (int64_t)sw->seconds : r);
}

/* A decision in another second than the cached one: its row, cleared first when it held
 * another second (same row, other stamp: at least a ring's length apart, so nothing of
 * the current window is lost). Once a second per worker, or on a clock jump. */
void sl_series_roll(sl_series_w *sw, int64_t wall_ns) {
    int64_t sec = sec_of(wall_ns);
    size_t row = row_of(sw, sec);
    _Atomic uint32_t *cnt = &sw->cnt[row * sw->nser * NR];
    if (atomic_load_explicit(&sw->stamp[row], memory_order_relaxed) != sec) {
        atomic_store_explicit(&sw->stamp[row], -1, memory_order_release);
        atomic_thread_fence(memory_order_release);
        for (size_t i = 0; i < (size_t)sw->nser * NR; i++)
            atomic_store_explicit(&cnt[i], 0, memory_order_relaxed);
        atomic_store_explicit(&sw->stamp[row], sec, memory_order_release);
    }
    sw->row = cnt;
    sw->from_ns = sec * SLUICE_NS_PER_S;
    sw->to_ns = sw->from_ns + SLUICE_NS_PER_S;
}

void sl_series_reject(sl_worker *w, const sl_verdict *v, size_t first, size_t dec, unsigned slot,
                      unsigned r) {
    sl_obs *o = w->srv->obs;
    sl_series_w *sw = w->series;
    if (o == NULL || !atomic_load_explicit(&o->dec_on, memory_order_relaxed)) return;
    const sl_verdict_item *it = &v->items[first];
    const sluice_result *dr = &v->items[dec].result;
    uint64_t nth = sw->rej_next++;
    sl_rej *e = &sw->rej[nth % SL_REJ_RING];
    uint32_t q = atomic_load_explicit(&e->seq, memory_order_relaxed);
    atomic_store_explicit(&e->seq, q + 1, memory_order_relaxed); /* odd: being written */
    atomic_thread_fence(memory_order_release);
    const unsigned char *key = v->keys + it->key_off;
    e->nth = nth;
    e->series = (uint16_t)slot;
    e->result = (uint8_t)r;
    e->wall_ms = v->decided_at.wall_ns / SLUICE_NS_PER_MS;
    e->remaining = dr->remaining;
    e->limit = v->items[dec].override ? v->items[dec].override_limit : dr->limit;
    e->retry_after_ns = dr->retry_after_ns;
    /* Why the key and not its hash: hashing is most of an entry's cost, and a reader can
     * hash the kept bytes as well (a long key is hashed here: its bytes are cut). The raw
     * bytes leave only when log.raw_keys allows. */
    size_t n = it->key_len < SL_REJ_KEY ? it->key_len : SL_REJ_KEY;
    memcpy(e->key, key, n);
    e->key_len = (uint8_t)n;
    e->full_len = it->key_len;
    e->hashed = it->key_len > SL_REJ_KEY;
    e->text = false;
    if (e->hashed) {
        e->key_hash = sl_topk_key_hash(&o->hkey, key, it->key_len);
        /* cut bytes of a composed key do not parse: keep the start of its text instead */
        if (atomic_load_explicit(&o->raw_keys, memory_order_relaxed)) {
            char t[SL_REJ_KEY + 1];
            size_t tl = sl_key_text(key, it->key_len, t, sizeof(t));
            memcpy(e->key, t, tl);
            e->key_len = (uint8_t)tl;
            e->text = true;
        }
    }
    atomic_store_explicit(&e->seq, q + 2, memory_order_release);
}

void sl_series_read(sl_series_w *const *ws, unsigned nw, unsigned slot, int64_t end_s, unsigned n,
                    uint64_t *out) {
    memset(out, 0, (size_t)n * NR * sizeof(*out));
    for (unsigned k = 0; k < nw; k++) {
        const sl_series_w *sw = ws[k];
        if (sw == NULL || slot >= sw->nser) continue;
        unsigned m = n < sw->seconds ? n : sw->seconds;
        for (unsigned i = 0; i < m; i++) {
            int64_t sec = end_s - (int64_t)i;
            size_t row = row_of(sw, sec);
            if (atomic_load_explicit(&sw->stamp[row], memory_order_acquire) != sec) continue;
            uint32_t c[NR];
            const _Atomic uint32_t *src = &sw->cnt[(row * sw->nser + slot) * NR];
            for (unsigned r = 0; r < NR; r++) c[r] = atomic_load_explicit(&src[r], memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&sw->stamp[row], memory_order_relaxed) != sec) continue;
            uint64_t *dst = &out[(size_t)(n - 1 - i) * NR];
            for (unsigned r = 0; r < NR; r++) dst[r] += c[r];
        }
    }
}

/* ---- the endpoints ----------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* `name=` of the query string, percent-decoded into out; -1 when absent, -2 too long. */
static int qget(const sl_http_req *req, const char *name, char *out, size_t cap) {
    const char *q = memchr(req->target, '?', req->target_len);
    if (q == NULL) return -1;
    const char *p = q + 1, *end = req->target + req->target_len;
    size_t nl = strlen(name);
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        if ((size_t)(e - p) >= nl + 1 && memcmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t o = 0;
            for (const char *v = p + nl + 1; v < e; v++) {
                int hi, lo;
                if (o + 1 >= cap) return -2;
                if (*v == '%' && e - v >= 3 && (hi = hexval(v[1])) >= 0 && (lo = hexval(v[2])) >= 0) {
                    out[o++] = (char)(hi * 16 + lo);
                    v += 2;
                } else {
                    out[o++] = *v == '+' ? ' ' : *v;
                }
            }
            out[o] = '\0';
            return (int)o;
        }
        p = amp ? amp + 1 : end;
    }
    return -1;
}

/* A positive decimal count; above `max` is max (a huge `seconds` is what the ring holds);
 * -1 when not a number. */
static long long qcount(const char *s, long long max) {
    if (*s == '\0') return -1;
    long long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (v <= max) v = v * 10 + (*p - '0');
    }
    return v > max ? max : v;
}

/* The series of (policy, window), -1 when never seen (no allocation, no new series). */
static int find_series(sl_obs *o, const char *policy, const char *window) {
    int r = -1;
    pthread_mutex_lock(&o->mu);
    unsigned n = atomic_load(&o->nseries);
    for (unsigned i = 1; i < n && r < 0; i++)
        if (strcmp(o->series[i].policy, policy) == 0 && strcmp(o->series[i].window, window) == 0)
            r = (int)i;
    pthread_mutex_unlock(&o->mu);
    return r;
}

static void reply_json(sl_conn *c, const sl_http_req *req, json_t *o) {
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (out == NULL) {
        sl_http_problem(c, req->minor, 500, "out of memory", 1);
        return;
    }
    sl_http_reply(c, req->minor, 200, "Cache-Control: no-store\r\n", "application/json", out,
                  strlen(out), 1);
    free(out);
}

void sl_series_http(sl_conn *c, const sl_http_req *req) {
    sl_server *s = c->w->srv;
    char policy[256], window[128], sec[256];
    int pl = qget(req, "policy", policy, sizeof(policy));
    if (pl <= 0) {
        sl_http_problem(c, req->minor, 400,
                        pl == -2 ? "policy: too long (a policy's name is at most 255 bytes)"
                                 : "expected /v1/series?policy=NAME[&window=W][&seconds=900]",
                        1);
        return;
    }
    int wl = qget(req, "window", window, sizeof(window));
    if (wl == -2 || wl == 0) {
        sl_http_problem(c, req->minor, 400, "window: expected a window's name as the metrics label it "
                        "(e.g. api.0)", 1);
        return;
    }
    unsigned ring = s->series_seconds;
    long long want = 900;
    int sl = qget(req, "seconds", sec, sizeof(sec));
    if (sl == -2 || sl == 0 || (sl > 0 && (want = qcount(sec, 1LL << 40)) <= 0)) {
        sl_http_problem(c, req->minor, 400, "seconds: expected a whole number of seconds above 0", 1);
        return;
    }
    sl_gen *g = c->w->gen;
    if (!sl_obs_in_config(g->cfg, policy)) {
        sl_http_problem(c, req->minor, 404, "no such policy", 1);
        return;
    }
    if (ring == 0) {
        sl_http_problem(c, req->minor, 409, "the series ring is off (observe.series.seconds: 0)", 1);
        return;
    }
    unsigned n = want > (long long)ring ? ring : (unsigned)want;
    /* the policy's windows as the metrics name them (plans' too), each once */
    size_t nwin = sl_engine_windows(g->engine, NULL, 0);
    const sl_window_info **all = calloc(nwin + 1, sizeof(*all));
    uint64_t *buf = malloc((size_t)n * NR * sizeof(uint64_t));
    json_t *wins = json_array();
    if (all == NULL || buf == NULL || wins == NULL) {
        free(all);
        free(buf);
        json_decref(wins);
        sl_http_problem(c, req->minor, 500, "out of memory", 1);
        return;
    }
    sl_engine_windows(g->engine, all, nwin);
    sluice_time now = sluice_clock_now(s->clock);
    int64_t end_s = sec_of(now.wall_ns);
    sl_series_w *ws[SL_MAX_WORKERS];
    for (unsigned k = 0; k < s->nworkers; k++) ws[k] = s->workers[k]->series;
    char seen[SLUICE_MAX_ITEMS * 2][128];
    size_t nseen = 0;
    bool matched = wl < 0;
    for (size_t i = 0; i < nwin; i++) {
        if (all[i]->policy == NULL || strcmp(all[i]->policy, policy) != 0) continue;
        char lab[128];
        sl_obs_window_label(all[i], lab, sizeof(lab));
        bool dup = false;
        for (size_t k = 0; k < nseen && !dup; k++) dup = strcmp(seen[k], lab) == 0;
        if (dup || (wl > 0 && strcmp(lab, window) != 0)) continue;
        if (nseen < sizeof(seen) / sizeof(seen[0])) snprintf(seen[nseen++], sizeof(seen[0]), "%s", lab);
        matched = true;
        int slot = find_series(s->obs, policy, lab);
        if (slot >= 0) sl_series_read(ws, s->nworkers, (unsigned)slot, end_s, n, buf);
        else memset(buf, 0, (size_t)n * NR * sizeof(uint64_t));
        json_t *ser = json_object();
        for (unsigned r = 0; r < NR; r++) {
            json_t *a = json_array();
            for (unsigned t = 0; t < n; t++) json_array_append_new(a, json_integer((json_int_t)buf[t * NR + r]));
            json_object_set_new(ser, sl_obs_result_names[r], a);
        }
        json_t *wo = json_object();
        json_object_set_new(wo, "window", json_string(lab));
        json_object_set_new(wo, "series", ser);
        json_array_append_new(wins, wo);
    }
    free(all);
    free(buf);
    if (!matched) {
        json_decref(wins);
        sl_http_problem(c, req->minor, 404, "no such window in this policy", 1);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "policy", json_string(policy));
    json_object_set_new(o, "step_ms", json_integer(1000));
    json_object_set_new(o, "end_ms", json_integer((json_int_t)((end_s + 1) * 1000)));
    json_object_set_new(o, "windows", wins);
    reply_json(c, req, o);
}

typedef struct rej_out {
    sl_rej e;
    unsigned worker;
} rej_out;

static int rej_newer(const void *a, const void *b) {
    const rej_out *x = a, *y = b;
    if (x->e.wall_ms != y->e.wall_ms) return x->e.wall_ms < y->e.wall_ms ? 1 : -1;
    return x->e.nth < y->e.nth ? 1 : x->e.nth > y->e.nth ? -1 : 0; /* one worker's order */
}

void sl_rejections_http(sl_conn *c, const sl_http_req *req) {
    sl_server *s = c->w->srv;
    sl_obs *o = s->obs;
    char policy[256] = "", nbuf[256];
    int pl = qget(req, "policy", policy, sizeof(policy));
    if (pl == -2) {
        sl_http_problem(c, req->minor, 400, "policy: too long", 1);
        return;
    }
    long long want = 50;
    int nl = qget(req, "n", nbuf, sizeof(nbuf));
    if (nl == -2 || nl == 0 || (nl > 0 && (want = qcount(nbuf, 1LL << 40)) <= 0)) {
        sl_http_problem(c, req->minor, 400, "n: expected a whole number above 0", 1);
        return;
    }
    if (pl > 0 && !sl_obs_in_config(c->w->gen->cfg, policy)) {
        sl_http_problem(c, req->minor, 404, "no such policy", 1);
        return;
    }
    if (!atomic_load(&o->dec_on)) {
        sl_http_problem(c, req->minor, 409, "the decision log is off (log.decisions: true keeps "
                        "the recent rejections)", 1);
        return;
    }
    if (s->series_seconds == 0) {
        sl_http_problem(c, req->minor, 409, "the series ring is off (observe.series.seconds: 0)", 1);
        return;
    }
    size_t cap = (size_t)s->nworkers * SL_REJ_RING, m = 0;
    rej_out *all = calloc(cap ? cap : 1, sizeof(*all));
    if (all == NULL) {
        sl_http_problem(c, req->minor, 500, "out of memory", 1);
        return;
    }
    for (unsigned k = 0; k < s->nworkers; k++) {
        sl_series_w *sw = s->workers[k]->series;
        if (sw == NULL) continue;
        for (unsigned i = 0; i < SL_REJ_RING; i++) {
            sl_rej *e = &sw->rej[i];
            uint32_t q1 = atomic_load_explicit(&e->seq, memory_order_acquire);
            if (q1 == 0 || (q1 & 1)) continue;
            rej_out r;
            memset(&r, 0, sizeof(r));
            r.e.series = e->series;
            r.e.result = e->result;
            r.e.key_len = e->key_len;
            r.e.full_len = e->full_len;
            r.e.hashed = e->hashed;
            r.e.text = e->text;
            r.e.wall_ms = e->wall_ms;
            r.e.nth = e->nth;
            r.e.key_hash = e->key_hash;
            r.e.remaining = e->remaining;
            r.e.limit = e->limit;
            r.e.retry_after_ns = e->retry_after_ns;
            memcpy(r.e.key, e->key, sizeof(r.e.key));
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&e->seq, memory_order_relaxed) != q1) continue;
            r.worker = k;
            all[m++] = r;
        }
    }
    qsort(all, m, sizeof(*all), rej_newer);
    bool raw = atomic_load(&o->raw_keys) != 0;
    json_t *a = json_array();
    for (size_t i = 0; i < m && (long long)json_array_size(a) < want; i++) {
        const sl_rej *e = &all[i].e;
        char pol[128], win[128];
        pthread_mutex_lock(&o->mu);
        snprintf(pol, sizeof(pol), "%s", o->series[e->series].policy);
        snprintf(win, sizeof(win), "%s", o->series[e->series].window);
        pthread_mutex_unlock(&o->mu);
        if (pl > 0 && strcmp(pol, policy) != 0) continue;
        json_t *x = json_object();
        char h[24];
        uint64_t kh = e->hashed ? e->key_hash : sl_topk_key_hash(&o->hkey, e->key, e->key_len);
        snprintf(h, sizeof(h), "k:%016llx", (unsigned long long)kh);
        json_object_set_new(x, "at_ms", json_integer((json_int_t)e->wall_ms));
        json_object_set_new(x, "policy", json_string(pol));
        json_object_set_new(x, "window", win[0] ? json_string(win) : json_null());
        json_object_set_new(x, "verdict", json_string(sl_obs_result_names[e->result % NR]));
        json_object_set_new(x, "key_hash", json_string(h));
        if (raw && e->key_len > 0) {
            char t[512];
            size_t tl = e->text ? e->key_len : sl_key_text(e->key, e->key_len, t, sizeof(t));
            if (e->text) memcpy(t, e->key, tl);
            json_t *ks = json_stringn(t, tl);
            json_object_set_new(x, "key", ks ? ks : json_null());
            if (e->full_len > SL_REJ_KEY) json_object_set_new(x, "key_truncated", json_true());
        }
        json_object_set_new(x, "remaining", json_integer((json_int_t)e->remaining));
        json_object_set_new(x, "limit", json_integer((json_int_t)e->limit));
        json_object_set_new(x, "retry_after_ms",
                            e->retry_after_ns < 0 ? json_null()
                                                  : json_integer((json_int_t)(e->retry_after_ns / SLUICE_NS_PER_MS)));
        json_array_append_new(a, x);
    }
    free(all);
    json_t *out = json_object();
    json_object_set_new(out, "raw_keys", json_boolean(raw));
    json_object_set_new(out, "rejections", a);
    reply_json(c, req, out);
}
