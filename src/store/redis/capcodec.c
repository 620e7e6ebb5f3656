/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capcodec.c -- what capacity protection sends to and reads from the Redis script
 * (src/store/redis/lua/capacity.lua): the parameters of adaptive concurrency and penalties,
 * each item's x argument (class and shedding shares, penalty group, borrowing tier,
 * controller and penalty parameters, a release's sample), and the stored states of those
 * algorithms and of the tails (per-class slots, borrowing marks). Pure functions.
 * Ranges: the script computes in doubles, so durations are refused at 2^52 ns and above;
 * absolute times travel as (seconds, nanoseconds) pairs; "never" is the pair (-1, -1).
 */
#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/limiter.h"
#include "store/redis/redis.h"

#define EXACT_MAX (INT64_C(1) << 52)

static bool small(int64_t v) { return v >= 0 && v < EXACT_MAX; }

static int64_t bucket_w(const sl_limit *l) {
    return (l->lease_ns + (SL_CONC_BUCKETS - 1) - 1) / (SL_CONC_BUCKETS - 1);
}

int sl_redis_cap_params(const sl_limit *l, sluice_time now, int64_t p[4]) {
    (void)now;
    p[0] = p[1] = p[2] = p[3] = 0;
    if (l->algo == SLUICE_ADAPTIVE_CONCURRENCY) {
        const sl_adapt_params *a = &l->cap.adapt;
        int64_t w = bucket_w(l);
        if (w < 1000 || !small(l->lease_ns) || !small(a->window_ns) || !small(a->timeout_ns) ||
            !small(a->probe_every_ns) || !small(2 * a->window_ns * 10))
            return SLUICE_ERANGE;
        p[0] = (int64_t)l->limit, p[1] = l->lease_ns, p[2] = w;
        return SLUICE_OK;
    }
    if (l->algo == SL_ALGO_PENALTY) {
        const sl_penalty_params *q = &l->cap.pen;
        if (!small(q->first_ns) || !small(q->max_ns) || !small(q->forgive_after_ns)) return SLUICE_ERANGE;
        return SLUICE_OK;
    }
    return SLUICE_EINVAL;
}

typedef struct xw {
    char *p;
    size_t n, cap;
    bool over;
} xw;

static void put(xw *w, int64_t v) {
    char num[24];
    char *e = sl_redis_put_i64(num, v);
    size_t k = (size_t)(e - num);
    if (w->over || w->n + k + 1 >= w->cap) {
        w->over = true;
        return;
    }
    if (w->n > 0) w->p[w->n++] = ' ';
    memcpy(w->p + w->n, num, k);
    w->n += k;
}

/* "F T ..." with F: 1 shed, 2 penalty group, 4 borrowing tier, 8 adaptive controller, 16
 * penalty parameters, 32 release sample, 64 the penalty item; T: the state's tails. */
size_t sl_redis_cap_x(const sl_limit *l, const sl_redis_capx *cx, char *out, size_t cap) {
    unsigned f = 0;
    if (cx->cls != 0 && l->cap.shed.nclasses != 0) f |= 1;
    if (cx->pgrp != 0) f |= 2;
    if (cx->bpath != 0) f |= 4;
    if (l->algo == SLUICE_ADAPTIVE_CONCURRENCY) f |= 8;
    if (l->algo == SL_ALGO_PENALTY) f |= 16;
    if (cx->cap & SL_SIC_SAMPLE) f |= 32;
    if (cx->cap & SL_SIC_PENALTY) f |= 64;
    if (f == 0 && l->cap.tail == 0) {
        if (cap > 0) out[0] = '\0';
        return 0;
    }
    xw w = {out, 0, cap, false};
    put(&w, f);
    put(&w, l->cap.tail);
    if (f & 1) {
        put(&w, cx->cls);
        put(&w, l->cap.shed.nclasses);
        for (uint32_t i = 0; i < l->cap.shed.nclasses; i++) {
            put(&w, l->cap.shed.cls[i].fill_ppm);
            put(&w, l->cap.shed.cls[i].reserve_ppm);
        }
    }
    if (f & 2) put(&w, cx->pgrp);
    if (f & 4) {
        put(&w, cx->bpath);
        put(&w, cx->blevel);
        put(&w, (int64_t)(cx->share > (uint64_t)EXACT_MAX ? (uint64_t)EXACT_MAX : cx->share));
        put(&w, l->cap.reclaim_ns);
    }
    if (f & 8) {
        const sl_adapt_params *a = &l->cap.adapt;
        int64_t v[] = {a->ctl, a->min, a->max, a->initial, a->window_ns, a->min_samples, a->smoothing_q16,
                       a->tolerance_q16, a->queue, a->alpha_min, a->alpha_pct, a->beta_min, a->beta_pct,
                       a->increase, a->backoff_q16, a->timeout_ns, a->probe_after, a->probe_every_ns};
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) put(&w, v[i]);
    }
    if (f & 16) {
        const sl_penalty_params *q = &l->cap.pen;
        put(&w, q->first_ns);
        put(&w, q->factor_q16);
        put(&w, q->max_ns);
        put(&w, q->forgive_after_ns);
        put(&w, q->challenge_levels);
    }
    if (f & 32) {
        int64_t lat = cx->latency_ns;
        if (lat > SL_ADAPT_LATENCY_MAX) lat = SL_ADAPT_LATENCY_MAX;
        put(&w, lat < 0 ? -1 : lat);
        put(&w, cx->outcome);
    }
    if (w.over) {
        out[0] = '\0';
        return 0;
    }
    out[w.n] = '\0';
    return w.n;
}

/* The numbers of an algorithm's own part in a stored state of n numbers; the rest are
 * tails. Only fixed windows and concurrency limits have tails (class slots, borrowing
 * marks); the others are all own. */
int sl_redis_own_len(int algo, int n) {
    if (algo == SLUICE_FIXED_WINDOW) return n < 3 ? n : 3;
    if (algo == SLUICE_CONCURRENCY) return n < 1 + SL_CONC_BUCKETS ? n : 1 + SL_CONC_BUCKETS;
    return n;
}

bool sl_redis_cap_state(const sluice_limiter *lim) {
    const sl_limit *l = &lim->lim;
    return l->cap.tail != 0 || l->algo == SLUICE_ADAPTIVE_CONCURRENCY || l->algo == SL_ALGO_PENALTY;
}

/* (s, n) as ns; (-1, -1) is "never" (INT64_MIN). */
static bool pair(int64_t s, int64_t n, int64_t *out) {
    if (s == -1 && n == -1) {
        *out = INT64_MIN;
        return true;
    }
    int64_t a;
    if (n < 0 || n >= SLUICE_NS_PER_S || __builtin_mul_overflow(s, SLUICE_NS_PER_S, &a) ||
        __builtin_add_overflow(a, n, out))
        return false;
    return true;
}

static bool counts(const int64_t *v, uint32_t *c, int n) {
    for (int i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] > UINT32_MAX) return false;
        c[i] = (uint32_t)v[i];
    }
    return true;
}

static bool conc_part(const sl_limit *l, const int64_t *v, sl_conc_state *c) {
    return !__builtin_mul_overflow(v[0], bucket_w(l), &c->base_ns) && counts(v + 1, c->counts, SL_CONC_BUCKETS);
}

int sl_redis_cap_state_parse(const sluice_limiter *lim, const char *s, size_t len, void *state) {
    const sl_limit *l = &lim->lim;
    int64_t v[64];
    if (len == 0) return 0;
    int n = sl_redis_ints(s, len, v, 64);
    if (n < 0) return -1;
    /* The tails stored are read from the length (capacity.lua's cap_split): a reload that
     * added or removed classes or borrowing left a state with other tails than this
     * limit's; one it lacks starts fresh, one it no longer has is ignored. */
    int own = sl_redis_own_len(l->algo, n), k = 0;
    int extra = n - own;
    bool has_use = extra == SL_SHED_MAX_CLASSES || extra == SL_SHED_MAX_CLASSES + 4;
    bool has_marks = extra == 4 || extra == SL_SHED_MAX_CLASSES + 4;
    unsigned char *st = state;
    switch ((int)l->algo) {
    case SLUICE_ADAPTIVE_CONCURRENCY: {
        /* base c1..c6 | limit noload last_avg ws_s ws_n sum probe_s probe_n ok drops max_inflight
         * stuck probing flags | u1..u8 | fast_sum fast_ok (31; a state of 29 from before
         * issue 27 has none: 0) */
        if (own != 29 && own != 31) return -1;
        sl_aconc_state *a = state;
        sl_adapt_state *d = &a->ad;
        if (!conc_part(l, v, &a->conc)) return -1;
        k = 7;
        for (int i = 0; i < 22; i++)
            if (v[k + i] < 0) return -1;
        d->limit_q16 = (uint64_t)v[k];
        d->noload_ns = v[k + 1];
        d->last_avg_ns = v[k + 2];
        if (!pair(v[k + 3], v[k + 4], &d->window_start_ns)) return -1;
        d->sum_ns = (uint64_t)v[k + 5];
        if (!pair(v[k + 6], v[k + 7], &d->probe_ns)) return -1;
        if (v[k + 8] > UINT32_MAX || v[k + 9] > UINT32_MAX || v[k + 10] > UINT32_MAX || v[k + 11] > UINT16_MAX ||
            v[k + 12] > 1 || v[k + 13] > 255)
            return -1;
        d->ok = (uint32_t)v[k + 8];
        d->drops = (uint32_t)v[k + 9];
        d->max_inflight = (uint32_t)v[k + 10];
        d->stuck = (uint16_t)v[k + 11];
        d->probing = (uint8_t)v[k + 12];
        d->flags = (uint8_t)v[k + 13];
        if (!counts(v + k + 14, a->use.by_class, SL_SHED_MAX_CLASSES)) return -1;
        d->fast_sum_ns = 0;
        d->fast_ok = 0;
        d->pad = 0;
        if (own == 31) {
            if (v[29] < 0 || v[30] < 0 || v[30] > v[k + 8] || v[29] > v[k + 5]) return -1;
            d->fast_sum_ns = (uint64_t)v[29];
            d->fast_ok = (uint32_t)v[30];
        }
        k = own;
        break;
    }
    case SL_ALGO_PENALTY: {
        if (own != 5) return -1;
        sl_penalty_state *p = state;
        if (!pair(v[0], v[1], &p->until_ns) || !pair(v[2], v[3], &p->last_ns) || v[4] < 0 || v[4] > 255) return -1;
        p->level = (uint32_t)v[4];
        p->pad = 0;
        k = own;
        break;
    }
    case SLUICE_CONCURRENCY: {
        if (own != 1 + SL_CONC_BUCKETS || !conc_part(l, v, state)) return -1;
        k = own;
        break;
    }
    case SLUICE_FIXED_WINDOW: {
        sl_fixed_state *f = state;
        if (own != 3 || v[2] < 0 || !pair(v[0], v[1], &f->window_start_ns)) return -1;
        f->count = (uint64_t)v[2];
        k = own;
        break;
    }
    default:
        return -1;
    }
    if (l->cap.tail & SL_TAIL_SHED) {
        sl_shed_use *u = (sl_shed_use *)(st + l->cap.base_size);
        memset(u, 0, sizeof(*u));
        if (has_use && !counts(v + k, u->by_class, SL_SHED_MAX_CLASSES)) return -1;
    }
    if (has_use) k += SL_SHED_MAX_CLASSES;
    if (l->cap.tail & SL_TAIL_MARKS) {
        sl_borrow_mark *m = sl_cap_marks(l, state);
        m->reclaim_until_ns = m->owed_until_ns = INT64_MIN;
        if (has_marks && (!pair(v[k], v[k + 1], &m->reclaim_until_ns) || !pair(v[k + 2], v[k + 3], &m->owed_until_ns)))
            return -1;
    }
    return 1;
}
