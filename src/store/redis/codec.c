/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec.c -- what travels to and from Redis: the composed script and its SHA1, the key
 * names (keyed hashes, never raw keys), the per-algorithm script parameters and the
 * stored state strings parsed back into the C algorithms' states. Pure functions; the
 * script is composed once per process (pthread_once) and never changes afterwards.
 * Ranges: the scripts compute in doubles, exactly for integers below 2^53; parameters are
 * refused (SLUICE_ERANGE) when a value or a product the scripts form could exceed 2^52.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "algo/algo.h"
#include "core/tz.h"
#include "algo/limiter.h"
#include "store/redis/redis.h"

extern const char sl_lua_common[];
extern const char sl_lua_gcra[];
extern const char sl_lua_token_bucket[];
extern const char sl_lua_fixed_window[];
extern const char sl_lua_sliding_window[];
extern const char sl_lua_concurrency[];
extern const char sl_lua_quota[];
extern const char sl_lua_leaky_bucket[];
extern const char sl_lua_sliding_log[];
extern const char sl_lua_envoy_counter[];
extern const char sl_lua_capacity[];
extern const char sl_lua_fast[];
extern const char sl_lua_main[];

#define EXACT_MAX (INT64_C(1) << 52)

/* The script picks a state's code by number (ALGO[n]): the pseudo-algorithms beyond the
 * public ones must not share one (the penalty's and the envoy counter's once did, and the
 * later definition replaced the earlier). */
_Static_assert(SL_REDIS_ALGO_ENVOY != (int)SL_ALGO_PENALTY, "one script algorithm per number");

/* ---- SHA1, only to name the script for EVALSHA ------------------------------------- */

/* OpenSSL's (libcrypto is linked for TLS and the config audit hashes already): the name
 * must be exactly what Redis computes over the same bytes, hex in lower case. Computed
 * once per process (compose below). */
void sl_redis_sha1_hex(const void *p, size_t len, char out[41]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(p, len, md, &n, EVP_sha1(), NULL) != 1 || n != 20) {
        out[0] = '\0'; /* no digest: EVALSHA then finds no script and falls back to EVAL */
        return;
    }
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 20; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[40] = '\0';
}

/* ---- the script ------------------------------------------------------------------- */

static char *g_script;
static size_t g_script_len;
static char g_sha[41];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void compose(void) {
    const char *parts[] = {sl_lua_common, sl_lua_gcra, sl_lua_token_bucket, sl_lua_fixed_window,
                           sl_lua_sliding_window, sl_lua_concurrency, sl_lua_quota, sl_lua_leaky_bucket, sl_lua_sliding_log,
                           sl_lua_envoy_counter, sl_lua_capacity, sl_lua_fast, sl_lua_main};
    size_t total = 0;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) total += strlen(parts[i]) + 1;
    g_script = malloc(total + 1);
    if (g_script == NULL) return;
    size_t off = 0;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        size_t n = strlen(parts[i]);
        memcpy(g_script + off, parts[i], n);
        off += n;
        g_script[off++] = '\n';
    }
    g_script[off] = '\0';
    g_script_len = off;
    sl_redis_sha1_hex(g_script, g_script_len, g_sha);
}

/* The same code as a Redis 7 function library: "#!lua name=L", the files up to
 * capacity.lua at the library's top level (run once, at FUNCTION LOAD: the ~75 closures
 * and tables the EVAL script makes again at every call), then main.lua as the body of
 * the one registered function (KEYS and ARGV become its parameters). The library and
 * the function are named after the script's SHA1 (sluice_<16 hex>): instances of two
 * versions sharing a Redis (a rolling upgrade) load two libraries and never replace each
 * other's code; an old version's library stays until FUNCTION DELETE (docs/scaling.md). */
static char *g_lib;
static size_t g_lib_len;
static char g_fname[24];

static void compose_lib(void) {
    if (g_script == NULL) return;
    snprintf(g_fname, sizeof(g_fname), "sluice_%.16s", g_sha);
    size_t main_len = strlen(sl_lua_main);
    size_t body = g_script_len - main_len - 1; /* everything before main.lua */
    char head[64], reg[128];
    int hl = snprintf(head, sizeof(head), "#!lua name=%s\n", g_fname);
    int rl = snprintf(reg, sizeof(reg), "redis.register_function('%s', function(KEYS, ARGV)\n", g_fname);
    static const char tail[] = "\nend)\n";
    size_t total = (size_t)hl + body + (size_t)rl + main_len + sizeof(tail);
    g_lib = malloc(total);
    if (g_lib == NULL) return;
    size_t off = 0;
    memcpy(g_lib + off, head, (size_t)hl), off += (size_t)hl;
    memcpy(g_lib + off, g_script, body), off += body;
    memcpy(g_lib + off, reg, (size_t)rl), off += (size_t)rl;
    memcpy(g_lib + off, sl_lua_main, main_len), off += main_len;
    memcpy(g_lib + off, tail, sizeof(tail)), off += sizeof(tail) - 1;
    g_lib_len = off;
}

static void compose_all(void) {
    compose();
    compose_lib();
}

const char *sl_redis_script(size_t *len) {
    pthread_once(&g_once, compose_all);
    if (len) *len = g_script_len;
    return g_script;
}

const char *sl_redis_script_sha(void) {
    pthread_once(&g_once, compose_all);
    return g_sha;
}

const char *sl_redis_library(size_t *len) {
    pthread_once(&g_once, compose_all);
    if (len) *len = g_lib_len;
    return g_lib;
}

const char *sl_redis_function_name(void) {
    pthread_once(&g_once, compose_all);
    return g_fname;
}

/* ---- keys ------------------------------------------------------------------------- */

/* Without a configured secret every instance uses this one (documented; the server warns
 * at start): identities are still not stored raw, but anyone can recompute the hashes. */
static const char default_secret[] = "sluice default redis key secret";

sl_hash_key sl_redis_secret_key(const void *secret, size_t len) {
    if (secret == NULL || len == 0) secret = default_secret, len = sizeof(default_secret) - 1;
    sl_hash_key zero = {UINT64_C(0x736c7569636552), UINT64_C(0x6b65792d646572)};
    sl_hash128 h = sl_hash128_of(&zero, secret, len);
    return (sl_hash_key){h.lo, h.hi};
}

size_t sl_redis_key(const sl_hash_key *sk, const sluice_limiter *lim, const void *key,
                    size_t key_len, char out[SL_REDIS_KEY_MAX]) {
    sl_sip s;
    sl_sip_init(&s, sk);
    /* name, a NUL separator, then the key: absorbed as one message */
    const char *name = lim->spec.name;
    size_t nl = strlen(name);
    unsigned char buf[320];
    sl_hash128 h;
    if (nl + 1 + key_len <= sizeof(buf)) {
        memcpy(buf, name, nl);
        buf[nl] = 0;
        if (key_len) memcpy(buf + nl + 1, key, key_len);
        h = sl_sip_finish(&s, buf, nl + 1 + key_len, SL_HASH_C, SL_HASH_D);
    } else {
        /* long keys: hash the key first, then (name NUL keyhash) */
        sl_hash128 kh = sl_hash128_of(sk, key, key_len);
        memcpy(buf, name, nl);
        buf[nl] = 0;
        memcpy(buf + nl + 1, &kh, sizeof(kh));
        h = sl_sip_finish(&s, buf, nl + 1 + sizeof(kh), SL_HASH_C, SL_HASH_D);
    }
    /* "sl:{" hi lo "}:" index "." algo, written by hand (once per item per decision) */
    static const char hex[16] = "0123456789abcdef";
    char *p = out;
    memcpy(p, "sl:{", 4), p += 4;
    for (int i = 60; i >= 0; i -= 4) *p++ = hex[(h.hi >> i) & 0xF];
    for (int i = 60; i >= 0; i -= 4) *p++ = hex[(h.lo >> i) & 0xF];
    memcpy(p, "}:", 2), p += 2;
    p = sl_redis_put_u64(p, lim->spec.index);
    *p++ = '.';
    p = sl_redis_put_u64(p, (uint64_t)lim->spec.algo);
    *p = '\0';
    return (size_t)(p - out);
}

/* ---- envoyproxy/ratelimit's counters (compat mode) ------------------------------------ */

static int parse_ints(const char *s, size_t len, int64_t *v, int want);

size_t sl_redis_envoy_key(const char *prefix, const void *key, size_t key_len, int64_t window_s,
                          char *out, size_t cap) {
    const unsigned char *k = key;
    if (key_len < 2 || k[0] != SL_REDIS_ENVOY_TAG) return 0;
    const unsigned char *z = memchr(k + 1, 0, key_len - 1);
    size_t tl = z ? (size_t)(z - k) - 1 : key_len - 1;
    size_t pl = strlen(prefix);
    char num[24];
    size_t nl = (size_t)(sl_redis_put_i64(num, window_s) - num);
    if (pl + tl + nl >= cap) return 0;
    memcpy(out, prefix, pl);
    memcpy(out + pl, k + 1, tl);
    memcpy(out + pl + tl, num, nl);
    out[pl + tl + nl] = '\0';
    return pl + tl + nl;
}

int sl_redis_envoy_state_parse(const char *s, size_t len, int64_t window_start_ns, void *state) {
    int64_t v;
    if (len == 0) return 0;
    if (parse_ints(s, len, &v, 1) < 0 || v < 0) return -1;
    sl_fixed_state *f = state;
    f->window_start_ns = window_start_ns;
    f->count = (uint64_t)v;
    return 1;
}

char *sl_redis_put_u64(char *p, uint64_t v) {
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0) *p++ = tmp[--n];
    return p;
}

char *sl_redis_put_i64(char *p, int64_t v) {
    if (v >= 0) return sl_redis_put_u64(p, (uint64_t)v);
    *p++ = '-';
    return sl_redis_put_u64(p, (uint64_t)0 - (uint64_t)v);
}

/* ---- parameters ------------------------------------------------------------------- */

static bool small(uint64_t v) { return v < (uint64_t)EXACT_MAX; }
static bool small_prod(uint64_t a, uint64_t b) {
    return (unsigned __int128)a * b < (unsigned __int128)EXACT_MAX;
}

static int64_t floor_s(int64_t ns) {
    int64_t q = ns / SLUICE_NS_PER_S;
    return (ns % SLUICE_NS_PER_S < 0) ? q - 1 : q;
}

int sl_redis_params(const sluice_limiter *limiter, sluice_time now, int64_t p[4]) {
    return sl_redis_params_of(&limiter->lim, now, p);
}

int sl_redis_params_of(const sl_limit *l, sluice_time now, int64_t p[4]) {
    p[0] = p[1] = p[2] = p[3] = 0;
    switch (l->algo) {
    case SLUICE_FIXED_WINDOW:
    case SLUICE_SLIDING_WINDOW:
        if (!small(l->limit) || !small((uint64_t)l->period_ns) || !small_prod(2, (uint64_t)l->period_ns))
            return SLUICE_ERANGE;
        p[0] = (int64_t)l->limit, p[1] = l->period_ns;
        return SLUICE_OK;
    case SLUICE_TOKEN_BUCKET:
        if (!small_prod(l->limit, SL_MICRO) || !small_prod(l->capacity, SL_MICRO) ||
            !small((uint64_t)l->period_ns))
            return SLUICE_ERANGE;
        p[0] = (int64_t)l->limit, p[1] = l->period_ns, p[2] = (int64_t)l->capacity;
        return SLUICE_OK;
    case SLUICE_LEAKY_BUCKET:
        if (!small_prod(l->limit, SL_MICRO) || !small_prod(l->capacity, SL_MICRO) ||
            !small((uint64_t)l->period_ns) || !small((uint64_t)l->max_delay_ns))
            return SLUICE_ERANGE;
        p[0] = (int64_t)l->limit, p[1] = l->period_ns, p[2] = (int64_t)l->capacity, p[3] = l->max_delay_ns;
        return SLUICE_OK;
    case SLUICE_GCRA:
        if (!small_prod(l->capacity, (uint64_t)l->emission_ns)) return SLUICE_ERANGE;
        p[0] = l->emission_ns, p[1] = (int64_t)l->capacity;
        return SLUICE_OK;
    case SLUICE_CONCURRENCY: {
        int64_t w = (l->lease_ns + (SL_CONC_BUCKETS - 1) - 1) / (SL_CONC_BUCKETS - 1);
        if (w < 1000 || !small((uint64_t)l->lease_ns)) return SLUICE_ERANGE;
        p[0] = (int64_t)l->limit, p[1] = l->lease_ns, p[2] = w;
        return SLUICE_OK;
    }
    case SLUICE_QUOTA: {
        if (!small(l->limit)) return SLUICE_ERANGE;
        int64_t t = floor_s(now.wall_ns);
        p[0] = (int64_t)l->limit;
        p[1] = sl_cal_period_start(l->tz, l->quota_period, t);
        p[2] = sl_cal_period_next(l->tz, l->quota_period, t);
        return SLUICE_OK;
    }
    case SLUICE_SLIDING_LOG:
        if (!small((uint64_t)l->period_ns)) return SLUICE_ERANGE;
        p[0] = (int64_t)l->limit, p[1] = l->period_ns;
        return SLUICE_OK;
    default:
        return sl_redis_cap_params(l, now, p); /* capcodec.c */
    }
}

/* ---- stored states ---------------------------------------------------------------- */

/* Whole numbers separated by spaces (a stored state): how many (at most max), -1 when
 * malformed. */
int sl_redis_ints(const char *s, size_t len, int64_t *v, int max) {
    int n = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && s[i] == ' ') i++;
        if (i >= len) break;
        if (n >= max) return -1;
        bool neg = false;
        if (s[i] == '-') neg = true, i++;
        size_t d = 0;
        int64_t x = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (x > (INT64_MAX - 9) / 10) return -1;
            x = x * 10 + (s[i++] - '0');
            d++;
        }
        if (d == 0 || (i < len && s[i] != ' ')) return -1;
        v[n++] = neg ? -x : x;
    }
    return n;
}

static int parse_ints(const char *s, size_t len, int64_t *v, int want) {
    return sl_redis_ints(s, len, v, want) == want ? want : -1;
}

static bool pair_ns(int64_t s, int64_t n, int64_t *out) {
    int64_t a;
    if (__builtin_mul_overflow(s, SLUICE_NS_PER_S, &a) || __builtin_add_overflow(a, n, out)) return false;
    return true;
}

int sl_redis_state_parse(const sluice_limiter *limiter, const char *s, size_t len, void *state) {
    if (sl_redis_cap_state(limiter)) return sl_redis_cap_state_parse(limiter, s, len, state);
    const sl_limit *l = &limiter->lim;
    int64_t v[7];
    if (len == 0) return 0;
    if (l->algo == SLUICE_FIXED_WINDOW || l->algo == SLUICE_CONCURRENCY) {
        /* tails a previous configuration with classes or borrowing left (the script drops
         * them at its next write): only the own part is this limit's state */
        int64_t all[1 + SL_CONC_BUCKETS + SL_SHED_MAX_CLASSES + 4];
        int n = sl_redis_ints(s, len, all, (int)(sizeof(all) / sizeof(all[0])));
        if (n < 0) return -1;
        int own = sl_redis_own_len((int)l->algo, n);
        if (own < n) {
            size_t at = 0;
            for (int k = 0; k < own; k++) {
                while (at < len && s[at] == ' ') at++;
                while (at < len && s[at] != ' ') at++;
            }
            len = at;
        }
    }
    switch (l->algo) {
    case SLUICE_GCRA: {
        sl_gcra_state *g = state;
        if (parse_ints(s, len, v, 2) < 0 || !pair_ns(v[0], v[1], &g->tat_ns)) return -1;
        return 1;
    }
    case SLUICE_TOKEN_BUCKET: {
        sl_tb_state *t = state;
        if (parse_ints(s, len, v, 3) < 0 || !pair_ns(v[0], v[1], &t->last_ns)) return -1;
        t->tokens_u = v[2];
        return 1;
    }
    case SLUICE_LEAKY_BUCKET: {
        sl_leaky_state *k = state;
        if (parse_ints(s, len, v, 3) < 0 || !pair_ns(v[0], v[1], &k->last_ns)) return -1;
        k->level_u = v[2];
        return 1;
    }
    case SLUICE_FIXED_WINDOW: {
        sl_fixed_state *f = state;
        if (parse_ints(s, len, v, 3) < 0 || v[2] < 0 || !pair_ns(v[0], v[1], &f->window_start_ns)) return -1;
        f->count = (uint64_t)v[2];
        return 1;
    }
    case SLUICE_SLIDING_WINDOW: {
        sl_sliding_state *w = state;
        if (parse_ints(s, len, v, 4) < 0 || v[2] < 0 || v[3] < 0 ||
            !pair_ns(v[0], v[1], &w->window_start_ns))
            return -1;
        w->cur = (uint64_t)v[2], w->prev = (uint64_t)v[3];
        return 1;
    }
    case SLUICE_CONCURRENCY: {
        sl_conc_state *c = state;
        int64_t w = (l->lease_ns + (SL_CONC_BUCKETS - 1) - 1) / (SL_CONC_BUCKETS - 1);
        if (parse_ints(s, len, v, 1 + SL_CONC_BUCKETS) < 0 || __builtin_mul_overflow(v[0], w, &c->base_ns))
            return -1;
        for (int i = 0; i < SL_CONC_BUCKETS; i++) {
            if (v[1 + i] < 0 || v[1 + i] > UINT32_MAX) return -1;
            c->counts[i] = (uint32_t)v[1 + i];
        }
        return 1;
    }
    case SLUICE_QUOTA: {
        sl_quota_state *q = state;
        if (parse_ints(s, len, v, 2) < 0 || v[1] < 0) return -1;
        q->period_start_s = v[0], q->used = (uint64_t)v[1];
        return 1;
    }
    case SLUICE_SLIDING_LOG: {
        /* "s n s n ...": oldest first, at most `limit` entries */
        sl_log_state *g = state;
        g->head = 0;
        g->count = 0;
        size_t i = 0;
        while (i < len) {
            int64_t pr[2];
            for (int k = 0; k < 2; k++) {
                while (i < len && s[i] == ' ') i++;
                size_t j = i;
                while (j < len && s[j] != ' ') j++;
                if (j == i || parse_ints(s + i, j - i, &pr[k], 1) < 0) return -1;
                i = j;
            }
            if (g->count >= l->limit || !pair_ns(pr[0], pr[1], &g->ts[g->count])) return -1;
            g->count++;
            while (i < len && s[i] == ' ') i++;
        }
        return 1;
    }
    default:
        return -1;
    }
}

void sl_redis_state_unstep(const sluice_limiter *limiter, void *state, int64_t now_ns) {
    switch ((int)limiter->lim.algo) {
    case SLUICE_TOKEN_BUCKET: {
        sl_tb_state *t = state;
        if (t->last_ns > now_ns) t->last_ns = now_ns;
        break;
    }
    case SLUICE_LEAKY_BUCKET: {
        sl_leaky_state *k = state;
        if (k->last_ns > now_ns) k->last_ns = now_ns;
        break;
    }
    case SLUICE_SLIDING_LOG: {
        sl_log_state *g = state; /* as parsed: oldest first from 0 */
        if (g->count == 0 || g->ts[g->count - 1] <= now_ns) break;
        int64_t d = g->ts[g->count - 1] - now_ns;
        for (uint32_t i = 0; i < g->count; i++) g->ts[i] -= d;
        break;
    }
    case SL_ALGO_PENALTY: {
        sl_penalty_state *p = state;
        if (p->last_ns == INT64_MIN || p->last_ns <= now_ns) break;
        int64_t d = p->last_ns - now_ns;
        if (p->until_ns != INT64_MIN) p->until_ns -= d;
        p->last_ns = now_ns;
        break;
    }
    default:
        break;
    }
}
