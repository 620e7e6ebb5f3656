/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter.c -- sluice_limiter: a validated, immutable copy of a sluice_limit_spec (its
 * strings included) and the compiled sl_limit the algorithms run on. Quotas resolve
 * their IANA zone here, once, so decisions never touch the zoneinfo files.
 */
#include <stdlib.h>

#include "algo_impl.h"
#include "limiter.h"
#include "tz.h"

static sluice_limiter *fail(int *err, int code) {
    if (err != NULL) *err = code;
    return NULL;
}

sluice_limiter *sluice_limiter_create(const sluice_limit_spec *spec, int *err, char *errbuf,
                                      size_t errbuf_len) {
    if (spec != NULL && spec->algo == SL_ALGO_PENALTY) /* internal: not in the public API */
        return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "unknown algorithm %d",
                                       (int)spec->algo));
    return sl_limiter_create_cap(spec, NULL, err, errbuf, errbuf_len);
}

sluice_limiter *sl_limiter_create_cap(const sluice_limit_spec *spec, const sl_cap *cap, int *err,
                                      char *errbuf, size_t errbuf_len) {
    if (errbuf != NULL && errbuf_len > 0) errbuf[0] = '\0';
    if (spec == NULL)
        return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                       "no limit specification"));
    if (spec->name == NULL || spec->name[0] == '\0')
        return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                       "a limit needs a name"));
    size_t name_len = strnlen(spec->name, sizeof(((sluice_limiter *)0)->name));
    if (name_len >= sizeof(((sluice_limiter *)0)->name))
        return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                       "limit name is longer than 255 bytes"));
    size_t tz_len = 0;
    if (spec->tz != NULL) {
        tz_len = strnlen(spec->tz, sizeof(((sluice_limiter *)0)->tz_name));
        if (tz_len >= sizeof(((sluice_limiter *)0)->tz_name))
            return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                           "limit '%s': time zone name is longer than %zu bytes",
                                           spec->name,
                                           sizeof(((sluice_limiter *)0)->tz_name) - 1));
    }

    const struct sl_tz *tz = NULL;
    if (spec->algo == SLUICE_QUOTA && spec->tz != NULL && spec->tz[0] != '\0') {
        int tz_err = SLUICE_ENOTFOUND;
        tz = sl_tz_get(spec->tz, &tz_err);
        if (tz == NULL)
            return fail(err, sl_algo_error(errbuf, errbuf_len, tz_err ? tz_err : SLUICE_ENOTFOUND,
                                           "limit '%s': time zone '%s': %s", spec->name,
                                           spec->tz,
                                           sluice_strerror(tz_err ? tz_err : SLUICE_ENOTFOUND)));
    }

    sluice_limiter *lim = calloc(1, sizeof(*lim));
    if (lim == NULL)
        return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_ENOMEM, "out of memory"));
    lim->spec = *spec;
    memcpy(lim->name, spec->name, name_len);
    lim->spec.name = lim->name;
    if (spec->tz != NULL) {
        memcpy(lim->tz_name, spec->tz, tz_len);
        lim->spec.tz = lim->tz_name;
    }
    int rc = sl_limit_init(&lim->lim, &lim->spec, tz, errbuf, errbuf_len);
    if (rc == SLUICE_OK && cap != NULL) {
        char msg[200];
        rc = sl_cap_init(&lim->lim, &lim->spec, cap, msg, sizeof(msg));
        if (rc != SLUICE_OK) sl_algo_error(errbuf, errbuf_len, rc, "limit '%s': %s", spec->name, msg);
    }
    if (rc != SLUICE_OK) {
        free(lim);
        return fail(err, rc);
    }
    atomic_init(&lim->refs, 1);
    if (err != NULL) *err = SLUICE_OK;
    return lim;
}

/* The counter is the only field that changes after creation: a const limiter may be
 * referenced by anyone who uses it. */
void sl_limiter_ref(const sluice_limiter *lim) {
    if (lim != NULL)
        atomic_fetch_add_explicit(&((sluice_limiter *)lim)->refs, 1, memory_order_relaxed);
}

void sl_limiter_unref(const sluice_limiter *lim) {
    if (lim == NULL) return;
    sluice_limiter *l = (sluice_limiter *)lim;
    if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1) free(l);
}

void sluice_limiter_destroy(sluice_limiter *lim) { sl_limiter_unref(lim); }

const sluice_limit_spec *sluice_limiter_spec(const sluice_limiter *lim) {
    return lim ? &lim->spec : NULL;
}

uint64_t sluice_limiter_capacity(const sluice_limiter *lim) {
    return lim ? lim->lim.capacity : 0;
}

/* The public form of an adaptive limit: ppm and "0 = default" fields turned into the
 * controller's Q16.16 parameters. */
sluice_limiter *sluice_limiter_create_adaptive(const sluice_limit_spec *spec,
                                               const sluice_adaptive_spec *a, int *err,
                                               char *errbuf, size_t errbuf_len) {
    if (spec == NULL || a == NULL || spec->algo != SLUICE_ADAPTIVE_CONCURRENCY)
        return fail(err, sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                       "an adaptive limit needs algo SLUICE_ADAPTIVE_CONCURRENCY"));
    sl_cap cap;
    memset(&cap, 0, sizeof(cap));
    sl_adapt_ctl ctl = a->controller == 0 ? SL_ADAPT_GRADIENT2 : (sl_adapt_ctl)a->controller;
    sl_adapt_params *p = &cap.adapt;
    sl_adapt_params_default(p, ctl, a->min, a->max, a->initial);
    p->ctl = ctl;
#define PPM_Q16(v) ((uint32_t)(((uint64_t)(v) * SL_Q16 + 500000) / 1000000))
    if (a->window_ns) p->window_ns = a->window_ns;
    if (a->min_samples) p->min_samples = a->min_samples;
    if (a->smoothing_ppm) p->smoothing_q16 = PPM_Q16(a->smoothing_ppm);
    if (a->tolerance_ppm) p->tolerance_q16 = PPM_Q16(a->tolerance_ppm);
    p->queue = a->queue;
    if (a->alpha_min) p->alpha_min = a->alpha_min;
    if (a->alpha_pct) p->alpha_pct = a->alpha_pct;
    if (a->beta_min) p->beta_min = a->beta_min;
    if (a->beta_pct) p->beta_pct = a->beta_pct;
    if (a->increase) p->increase = a->increase;
    if (a->backoff_ppm) p->backoff_q16 = PPM_Q16(a->backoff_ppm);
    p->timeout_ns = a->timeout_ns;
    if (a->probe_after == SLUICE_NO_PROBE) p->probe_after = 0;
    else if (a->probe_after) p->probe_after = a->probe_after;
    if (a->probe_every_ns < 0) p->probe_every_ns = 0;
    else if (a->probe_every_ns) p->probe_every_ns = a->probe_every_ns;
#undef PPM_Q16
    sluice_limit_spec s = *spec;
    if (s.limit == 0 || s.limit < a->max) s.limit = a->max; /* the algorithm's own checks */
    return sl_limiter_create_cap(&s, &cap, err, errbuf, errbuf_len);
}
