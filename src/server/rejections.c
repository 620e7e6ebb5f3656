/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rejections.c -- the default rejection summary (see rejections.h). Per worker, per policy
 * series, two banks indexed by the interval's parity: a count, a 64-register HyperLogLog
 * of the keys' keyed hashes (distinct keys, about +-13 %), and two 4-entry space-saving
 * sketches (top keys by hash, top client addresses). Invariants: only the worker writes its
 * banks (relaxed single-writer stores); the timer reads a bank one tick (~100 ms) after the
 * interval closed, while workers write the other bank, and a bank is reset by its worker
 * when it first writes in a new interval. Nothing here allocates after sl_rej_worker_new.
 */
#include "server/rejections.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "core/log.h"
#include "server/observe.h"
#include "server/server.h"

#define REJ_SLOTS SL_OBS_SERIES
#define REJ_REG 64 /* HyperLogLog registers: standard error 1.04 / sqrt(64) = 13 % */
#define REJ_TOP 4
#define REJ_ADDR 48

typedef struct rej_top {
    _Atomic uint64_t h, c;
} rej_top;

typedef struct rej_addr {
    _Atomic uint64_t h, c;
    char a[REJ_ADDR];
} rej_addr;

typedef struct rej_slot {
    _Atomic uint64_t epoch; /* the interval these counters belong to */
    _Atomic uint64_t count;
    _Atomic uint8_t reg[REJ_REG];
    rej_top keys[REJ_TOP];
    rej_addr addrs[REJ_TOP];
} rej_slot;

struct sl_rej_w {
    rej_slot s[2][REJ_SLOTS];
};

/* The open interval (0: the summary is off). Written by the main thread only. The first
 * is open from the start (refusals before the first tick count in it); the first tick
 * sets its end, or turns the summary off. */
static _Atomic uint64_t g_epoch = 1;
static uint64_t g_last_epoch = 1, g_to_read;
static int64_t g_next_ns, g_read_every_ns, g_open_ns; /* g_open_ns: when the open one began */

static _Thread_local const char *tls_addr;
static _Thread_local size_t tls_addr_len;

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

sl_rej_w *sl_rej_worker_new(void) { return calloc(1, sizeof(sl_rej_w)); }
void sl_rej_worker_free(sl_rej_w *r) { free(r); }

void sl_rej_client_set(const char *addr, size_t len) {
    tls_addr = addr && len > 0 && len < REJ_ADDR ? addr : NULL;
    tls_addr_len = tls_addr ? len : 0;
}

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * UINT64_C(1099511628211);
    return h ? h : 1;
}

/* Space-saving: the entry of h gains one; else a free entry takes it; else the smallest
 * is replaced and its count carried (so counts are upper bounds, heavy hitters stay). */
static int top_pick(rej_top *t, uint64_t h) {
    int min = 0;
    for (int i = 0; i < REJ_TOP; i++) {
        uint64_t c = LD(t[i].c);
        if (c != 0 && LD(t[i].h) == h) return i;
        if (c == 0) return ST(t[i].h, h), i;
        if (c < LD(t[min].c)) min = i;
    }
    ST(t[min].h, h);
    return min;
}

static int addr_pick(rej_addr *t, uint64_t h, const char *a, size_t n) {
    int min = 0, k = -1;
    for (int i = 0; i < REJ_TOP && k < 0; i++) {
        uint64_t c = LD(t[i].c);
        if (c != 0 && LD(t[i].h) == h) return i;
        if (c == 0) k = i;
        else if (c < LD(t[min].c)) min = i;
    }
    if (k < 0) k = min;
    memcpy(t[k].a, a, n);
    t[k].a[n] = '\0';
    ST(t[k].h, h);
    return k;
}

bool sl_rej_enabled(void) { return LD(g_epoch) != 0; }

void sl_rej_count(sl_worker *w, unsigned pslot, uint64_t key_hash) {
    sl_rej_w *r = w->obs ? w->obs->rej : NULL;
    uint64_t e = LD(g_epoch);
    if (r == NULL || e == 0 || pslot == 0 || pslot >= REJ_SLOTS) return;
    rej_slot *s = &r->s[e & 1][pslot];
    if (LD(s->epoch) != e) { /* first refusal of this interval: the bank starts afresh */
        ST(s->count, 0);
        for (int i = 0; i < REJ_REG; i++) ST(s->reg[i], 0);
        for (int i = 0; i < REJ_TOP; i++) ST(s->keys[i].c, 0), ST(s->addrs[i].c, 0);
        ST(s->epoch, e);
    }
    ST(s->count, LD(s->count) + 1);
    uint64_t rest = key_hash >> 6;
    uint8_t rank = (uint8_t)(rest ? __builtin_ctzll(rest) + 1 : 59);
    unsigned idx = (unsigned)(key_hash & (REJ_REG - 1));
    if (rank > LD(s->reg[idx])) ST(s->reg[idx], rank);
    int k = top_pick(s->keys, key_hash);
    ST(s->keys[k].c, LD(s->keys[k].c) + 1);
    if (tls_addr != NULL) {
        int a = addr_pick(s->addrs, fnv(tls_addr, tls_addr_len), tls_addr, tls_addr_len);
        ST(s->addrs[a].c, LD(s->addrs[a].c) + 1);
    }
}

/* ---- the timer (main thread) ------------------------------------------------------------ */

/* HyperLogLog's estimate with the small-range correction (linear counting while registers
 * are empty): exact enough for "3 keys or 3000". */
static uint64_t hll_estimate(const uint8_t *reg) {
    double sum = 0;
    unsigned zeros = 0;
    for (int i = 0; i < REJ_REG; i++) {
        sum += ldexp(1.0, -(int)reg[i]);
        if (reg[i] == 0) zeros++;
    }
    double m = REJ_REG, e = 0.709 * m * m / sum;
    if (e <= 2.5 * m && zeros > 0) e = m * log(m / zeros);
    return (uint64_t)(e + 0.5);
}

typedef struct agg {
    char name[REJ_ADDR + 8];
    uint64_t h, c;
} agg;

static void agg_add(agg *a, size_t *n, size_t cap, uint64_t h, const char *name, uint64_t c) {
    for (size_t i = 0; i < *n; i++)
        if (a[i].h == h) {
            a[i].c += c;
            return;
        }
    if (*n == cap) return;
    a[*n].h = h;
    a[*n].c = c;
    snprintf(a[*n].name, sizeof(a[*n].name), "%s", name ? name : "");
    (*n)++;
}

static int agg_cmp(const void *x, const void *y) {
    const agg *a = x, *b = y;
    return a->c < b->c ? 1 : a->c > b->c ? -1 : strcmp(a->name, b->name);
}

/* A client address as shown: its network (IPv4 /24, IPv6 /48) unless raw keys are
 * allowed, because a policy keyed on client_ip has the address as its key. */
static void show_addr(const char *a, bool raw, char *out, size_t cap) {
    unsigned char b[16];
    char t[INET6_ADDRSTRLEN];
    if (raw) {
        snprintf(out, cap, "%s", a);
    } else if (inet_pton(AF_INET, a, b) == 1) {
        b[3] = 0;
        snprintf(out, cap, "%s/24", inet_ntop(AF_INET, b, t, sizeof(t)) ? t : "?");
    } else if (inet_pton(AF_INET6, a, b) == 1) {
        memset(b + 6, 0, 10);
        snprintf(out, cap, "%s/48", inet_ntop(AF_INET6, b, t, sizeof(t)) ? t : "?");
    } else {
        snprintf(out, cap, "(not an address)");
    }
}

static void emit(sl_server *s, uint64_t epoch, int64_t every_ns, unsigned top) {
    sl_obs *o = s->obs;
    unsigned ns = atomic_load(&o->nseries);
    bool raw = atomic_load(&o->raw_keys) != 0;
    if (ns > REJ_SLOTS) ns = REJ_SLOTS;
    for (unsigned p = 1; p < ns; p++) {
        if (o->series[p].window[0] != '\0') continue; /* policy series only */
        uint64_t count = 0;
        uint8_t reg[REJ_REG] = {0};
        agg keys[REJ_TOP * SL_MAX_WORKERS], addrs[REJ_TOP * SL_MAX_WORKERS];
        size_t nk = 0, na = 0;
        for (unsigned wi = 0; wi < s->nworkers; wi++) {
            sl_rej_w *r = s->workers[wi]->obs ? s->workers[wi]->obs->rej : NULL;
            if (r == NULL) continue;
            rej_slot *sl = &r->s[epoch & 1][p];
            if (LD(sl->epoch) != epoch) continue;
            count += LD(sl->count);
            for (int i = 0; i < REJ_REG; i++) {
                uint8_t v = LD(sl->reg[i]);
                if (v > reg[i]) reg[i] = v;
            }
            for (int i = 0; i < REJ_TOP; i++) {
                uint64_t c = LD(sl->keys[i].c);
                if (c == 0) continue;
                char hx[24];
                snprintf(hx, sizeof(hx), "k:%016llx", (unsigned long long)LD(sl->keys[i].h));
                agg_add(keys, &nk, sizeof(keys) / sizeof(keys[0]), LD(sl->keys[i].h), hx, c);
            }
            for (int i = 0; i < REJ_TOP; i++) {
                uint64_t c = LD(sl->addrs[i].c);
                if (c == 0) continue;
                char shown[REJ_ADDR + 8];
                show_addr(sl->addrs[i].a, raw, shown, sizeof(shown));
                agg_add(addrs, &na, sizeof(addrs) / sizeof(addrs[0]), fnv(shown, strlen(shown)),
                        shown, c);
            }
        }
        if (count == 0) continue;
        qsort(keys, nk, sizeof(keys[0]), agg_cmp);
        qsort(addrs, na, sizeof(addrs[0]), agg_cmp);
        char tk[256] = "", ta[512] = "";
        size_t lk = 0, la = 0;
        for (size_t i = 0; i < nk && i < top; i++)
            lk += (size_t)snprintf(tk + lk, sizeof(tk) - lk, "%s%s=%llu", i ? " " : "", keys[i].name,
                                   (unsigned long long)keys[i].c);
        for (size_t i = 0; i < na && i < top && la < sizeof(ta); i++)
            la += (size_t)snprintf(ta + la, sizeof(ta) - la, "%s%s=%llu", i ? " " : "", addrs[i].name,
                                   (unsigned long long)addrs[i].c);
        uint64_t distinct = hll_estimate(reg);
        if (distinct == 0) distinct = 1;
        if (distinct > count) distinct = count; /* never more keys than refusals */
        char msg[320];
        snprintf(msg, sizeof(msg), "policy %.128s refused %llu requests from about %llu key%s",
                 o->series[p].policy, (unsigned long long)count, (unsigned long long)distinct,
                 distinct == 1 ? "" : "s");
        sl_log_field f[6];
        size_t n = 0;
        f[n++] = SL_LOG_STR("policy", o->series[p].policy);
        f[n++] = SL_LOG_UINT("rejected", count);
        f[n++] = SL_LOG_UINT("distinct_keys", distinct);
        f[n++] = SL_LOG_STR("top_keys", tk);
        if (na > 0) f[n++] = SL_LOG_STR("top_clients", ta);
        f[n++] = SL_LOG_DUR("interval", every_ns);
        sl_log_write(o->log, SL_LOG_WARN, "rejections", msg, f, n);
    }
}

void sl_rej_tick(sl_server *s, int64_t now_ns) {
    sl_obs *o = s->obs;
    sl_gen *g = atomic_load(&s->gen);
    if (o == NULL || g == NULL) return;
    const sl_settings *st = sl_config_settings(g->cfg);
    int64_t every = st->log.rejections_every_ns;
    if (g_to_read != 0) { /* closed on the previous tick: its workers have moved on */
        emit(s, g_to_read, g_read_every_ns, st->log.rejections_top ? st->log.rejections_top : 3);
        g_to_read = 0;
    }
    uint64_t e = atomic_load(&g_epoch);
    if (every <= 0) { /* off (a reload may turn it off): the open interval is dropped */
        atomic_store(&g_epoch, 0);
        return;
    }
    if (e == 0) { /* (re)starting: a new interval */
        atomic_store(&g_epoch, ++g_last_epoch);
        g_next_ns = now_ns + every;
        g_open_ns = now_ns;
        return;
    }
    if (g_next_ns == 0) { /* the first tick: the interval open since the start ends then */
        g_next_ns = now_ns + every;
        g_open_ns = now_ns;
        return;
    }
    if (now_ns >= g_next_ns) {
        g_to_read = e;
        g_read_every_ns = now_ns - g_open_ns; /* what the line says: the interval's length */
        atomic_store(&g_epoch, ++g_last_epoch);
        g_next_ns = now_ns + every;
        g_open_ns = now_ns;
    }
}

void sl_rej_flush(sl_server *s) {
    sl_obs *o = s->obs;
    sl_gen *g = atomic_load(&s->gen);
    if (o == NULL || g == NULL) return;
    const sl_settings *st = sl_config_settings(g->cfg);
    unsigned top = st->log.rejections_top ? st->log.rejections_top : 3;
    if (g_to_read != 0) emit(s, g_to_read, g_read_every_ns, top);
    g_to_read = 0;
    uint64_t e = atomic_exchange(&g_epoch, 0);
    int64_t now = sl_clock_mono_ns();
    if (e != 0) emit(s, e, g_open_ns && now > g_open_ns ? now - g_open_ns : st->log.rejections_every_ns, top);
}
