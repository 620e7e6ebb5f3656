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
