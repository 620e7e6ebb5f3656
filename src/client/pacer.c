/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pacer.c -- a client's model of the server's limits, to send no request the server would
 * refuse: per published policy a token bucket (q units, refilled at q per w s) in
 * milli-units, re-synchronised by every response's r, plus the draft's cap "at most r
 * units within t seconds", plus Retry-After. Integer arithmetic; time passed in (ns).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sluice_client.h"

#define NS_PER_S INT64_C(1000000000)
#define SLOTS SLUICE_CLIENT_MAX_POLICIES

typedef struct slot {
    bool used;
    char name[SLUICE_CLIENT_NAME_MAX];
    char partition[SLUICE_CLIENT_NAME_MAX];
    uint64_t quota;      /* q; 0 = no policy known for this name (only the cap applies) */
    int64_t window_s;    /* w */
    __int128 tokens_m;   /* milli-units at `last_ns`; may be negative (sent despite a wait) */
    int64_t last_ns;
    bool capped;         /* the r-within-t rule is in force until cap_until_ns */
    uint64_t cap_units;
    uint64_t sent_since; /* units sent since the cap was set */
    int64_t cap_until_ns;
} slot;

struct sluice_client_pacer {
    slot s[SLOTS];
    int64_t blocked_until_ns; /* Retry-After */
    bool blocked;
    uint64_t in_flight;       /* requests sent and not yet answered */
    uint64_t in_flight_units;
};

typedef __int128 i128;

sluice_client_pacer *sluice_client_pacer_create(int *err) {
    sluice_client_pacer *p = calloc(1, sizeof(*p));
    if (err != NULL) *err = p ? SLUICE_OK : SLUICE_ENOMEM;
    return p;
}

void sluice_client_pacer_destroy(sluice_client_pacer *p) { free(p); }

static bool has_rate(const slot *s) { return s->quota > 0 && s->window_s > 0; }

/* Tokens (milli-units) at now: refilled at q per w seconds, never above q. */
static i128 tokens_at(const slot *s, int64_t now_ns) {
    if (!has_rate(s)) return s->tokens_m;
    i128 full = (i128)s->quota * 1000;
    int64_t dt = now_ns - s->last_ns;
    if (dt <= 0 || s->tokens_m >= full) return s->tokens_m < full ? s->tokens_m : full;
    i128 add = (i128)dt * s->quota * 1000 / ((i128)s->window_s * NS_PER_S);
    i128 t = s->tokens_m + add;
    return t < full ? t : full;
}

static slot *find(sluice_client_pacer *p, const char *name, const char *partition,
                  bool create) {
    slot *fresh = NULL;
    for (size_t i = 0; i < SLOTS; i++) {
        slot *s = &p->s[i];
        if (!s->used) {
            if (fresh == NULL) fresh = s;
            continue;
        }
        if (strcmp(s->name, name) == 0 && strcmp(s->partition, partition) == 0) return s;
    }
    if (!create || fresh == NULL) return NULL;
    memset(fresh, 0, sizeof(*fresh));
    fresh->used = true;
    strcpy(fresh->name, name);
    strcpy(fresh->partition, partition);
    return fresh;
}

static int64_t clamp_ns(i128 v) {
    if (v > INT64_MAX) return INT64_MAX;
    return v < 0 ? 0 : (int64_t)v;
}

int64_t sluice_client_pacer_wait(const sluice_client_pacer *p, uint64_t cost, int64_t now_ns) {
    if (p == NULL) return 0;
    int64_t wait = 0;
    if (p->blocked && p->blocked_until_ns > now_ns) wait = p->blocked_until_ns - now_ns;
    for (size_t i = 0; i < SLOTS; i++) {
        const slot *s = &p->s[i];
        if (!s->used) continue;
        if (has_rate(s)) {
            /* more than the whole bucket can never be saved up: wait for a full one */
            i128 need = (i128)(cost < s->quota ? cost : s->quota) * 1000;
            i128 have = tokens_at(s, now_ns);
            if (have < need) {
                i128 per = (i128)s->quota * 1000; /* milli-units per window */
                i128 ns = ((need - have) * s->window_s * NS_PER_S + per - 1) / per;
                int64_t w = clamp_ns(ns);
                if (w > wait) wait = w;
            }
        }
        if (s->capped && now_ns < s->cap_until_ns && s->sent_since + cost > s->cap_units) {
            int64_t w = s->cap_until_ns - now_ns;
            if (w > wait) wait = w;
        }
    }
    return wait;
}

void sluice_client_pacer_sent(sluice_client_pacer *p, uint64_t cost, int64_t now_ns) {
    if (p == NULL) return;
    p->in_flight++;
    p->in_flight_units += cost;
    for (size_t i = 0; i < SLOTS; i++) {
        slot *s = &p->s[i];
        if (!s->used) continue;
        if (has_rate(s)) {
            s->tokens_m = tokens_at(s, now_ns) - (i128)cost * 1000;
            /* a debt deeper than one bucket only follows from ignoring the waits */
            if (s->tokens_m < -(i128)s->quota * 1000) s->tokens_m = -(i128)s->quota * 1000;
            s->last_ns = now_ns;
        }
        if (s->capped && now_ns < s->cap_until_ns) s->sent_since += cost;
    }
}

void sluice_client_pacer_update(sluice_client_pacer *p, int status,
                                const sluice_ratelimit_info *info, int64_t now_ns) {
    if (p == NULL) return;
    uint64_t unit = p->in_flight ? p->in_flight_units / p->in_flight : 0;
    if (p->in_flight > 0) {
        p->in_flight--;
        p->in_flight_units -= unit <= p->in_flight_units ? unit : p->in_flight_units;
    }
    if (status == 0) return;
    bool told_when = false;
    if (info != NULL) {
        for (size_t i = 0; i < info->n_policies; i++) {
            const sluice_ratelimit_policy *pol = &info->policies[i];
            slot *s = find(p, pol->name, pol->partition, true);
            if (s == NULL) break;
            bool was_known = has_rate(s);
            if (!was_known || s->quota != pol->quota || s->window_s != pol->window_s) {
                s->quota = pol->quota;
                s->window_s = pol->window_s;
                /* a new policy starts full (the item below corrects it); a changed one
                 * keeps what it had, within the new capacity */
                if (!was_known) s->tokens_m = (i128)pol->quota * 1000;
                if (s->tokens_m > (i128)pol->quota * 1000) s->tokens_m = (i128)pol->quota * 1000;
                s->last_ns = now_ns;
            }
        }
        for (size_t i = 0; i < info->n_items; i++) {
            const sluice_ratelimit_item *it = &info->items[i];
            slot *s = find(p, it->name, it->partition, true);
            if (s == NULL) break;
            /* r was true when the server decided; requests sent since then are not in it */
            uint64_t left = it->remaining > p->in_flight_units ? it->remaining - p->in_flight_units
                                                               : 0;
            /* With a known rate the local bucket only ever comes down to r: an answer
             * that overtook an older one must not hand back units already spent (the
             * refill brings the bucket up again). Without one, r is all there is. */
            i128 r_m = (i128)left * 1000;
            if (!has_rate(s) || tokens_at(s, now_ns) > r_m) s->tokens_m = r_m;
            else s->tokens_m = tokens_at(s, now_ns);
            s->last_ns = now_ns;
            if (it->reset_s > 0) {
                s->capped = true;
                s->cap_units = left;
                s->sent_since = 0;
                s->cap_until_ns = now_ns + clamp_ns((i128)it->reset_s * NS_PER_S);
                if (left == 0) told_when = true;
            } else {
                s->capped = false;
            }
        }
        if (info->has_retry_after) {
            p->blocked = true;
            p->blocked_until_ns = now_ns + info->retry_after_ns;
            told_when = true;
        }
    }
    if ((status == 429 || status == 503) && !told_when) {
        /* refused without being told for how long: hold one second */
        p->blocked = true;
        p->blocked_until_ns = now_ns + NS_PER_S;
    }
}
