/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shed.c -- priority shedding over one budget (see shed.h for the contract).
 * Class c may take k units when both hold:
 *   used + k <= capacity x fill_c                      (its priority's share of the fill)
 *   used + k + unused reserves of the others <= capacity (reserves are never lent)
 * or, whatever the fill, when its own use stays within its reserve (used_c + k <= res_c):
 * the second rule guarantees those units are free. Shares are ppm of capacity, floored
 * (a share never rounds up into units it does not own); products in unsigned __int128.
 */
#include "shed.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "algo/algo_impl.h"

void sl_shed_params_default(sl_shed_params *p, uint32_t n) {
    static const uint32_t fill[4] = {SL_PPM, 900000, 700000, 500000};
    memset(p, 0, sizeof(*p));
    if (n < 1) n = 1;
    if (n > 4) n = 4;
    p->nclasses = n;
    for (uint32_t i = 0; i < n; i++) p->cls[i].fill_ppm = fill[i];
}

int sl_shed_params_check(const sl_shed_params *p, char *errbuf, size_t errbuf_len) {
    if (p->nclasses < 1 || p->nclasses > SL_SHED_MAX_CLASSES)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "shed: between 1 and %d classes", SL_SHED_MAX_CLASSES);
    uint64_t reserves = 0;
    for (uint32_t i = 0; i < p->nclasses; i++) {
        const sl_shed_class *c = &p->cls[i];
        if (c->fill_ppm > SL_PPM || c->reserve_ppm > SL_PPM)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "shed: class %u: shares must be within [0, 100%%]", i);
        if (i > 0 && c->fill_ppm > p->cls[i - 1].fill_ppm)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                        "shed: class %u fills to more than class %u above it (lower priority sheds first)", i,
                        i - 1);
        reserves += c->reserve_ppm;
    }
    if (reserves > SL_PPM) return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "shed: reserves add up to more than 100%%");
    return SLUICE_OK;
}

static uint64_t share(uint64_t capacity, uint32_t ppm) {
    return (uint64_t)(((unsigned __int128)capacity * ppm) / SL_PPM);
}

/* Unused reserves of every class but `cls`: what `cls` must leave free. Without per-class
 * use every reserve counts as unused. */
static uint64_t others_unused(const sl_shed_params *p, uint64_t capacity, const sl_shed_use *use,
                              uint32_t cls) {
    uint64_t sum = 0;
    for (uint32_t j = 0; j < p->nclasses; j++) {
        if (j == cls) continue;
        uint64_t r = share(capacity, p->cls[j].reserve_ppm);
        if (use != NULL) r = use->by_class[j] >= r ? 0 : r - use->by_class[j];
        sum += r; /* <= capacity: reserves sum to <= 100 % */
    }
    return sum;
}

typedef struct rooms {
    uint64_t free, hard, shared, own;
} rooms;

static void compute(const sl_shed_params *p, uint64_t capacity, uint64_t used, const sl_shed_use *use,
                    uint32_t cls, rooms *r) {
    uint64_t limit = share(capacity, p->cls[cls].fill_ppm);
    uint64_t others = others_unused(p, capacity, use, cls);
    r->free = used >= capacity ? 0 : capacity - used;
    r->hard = r->free > others ? r->free - others : 0;
    uint64_t by_fill = used >= limit ? 0 : limit - used;
    r->shared = by_fill < r->hard ? by_fill : r->hard;
    r->own = 0;
    if (use != NULL) {
        uint64_t res = share(capacity, p->cls[cls].reserve_ppm);
        r->own = use->by_class[cls] >= res ? 0 : res - use->by_class[cls];
        if (r->own > r->hard) r->own = r->hard;
    }
}

static uint32_t class_of(const sl_shed_params *p, uint32_t cls) {
    uint32_t n = p->nclasses < 1 ? 1 : p->nclasses > SL_SHED_MAX_CLASSES ? SL_SHED_MAX_CLASSES : p->nclasses;
    return cls < n ? cls : n - 1;
}

uint64_t sl_shed_room(const sl_shed_params *p, uint64_t capacity, uint64_t used,
                      const sl_shed_use *use, uint32_t cls) {
    rooms r;
    compute(p, capacity, used, use, class_of(p, cls), &r);
    return r.shared > r.own ? r.shared : r.own;
}

void sl_shed_decide(const sl_shed_params *p, uint64_t capacity, uint64_t used,
                    const sl_shed_use *use, uint32_t cls, uint64_t cost, sl_shed_verdict *v) {
    rooms r;
    cls = class_of(p, cls);
    compute(p, capacity, used, use, cls, &r);
    v->cls = (uint8_t)cls;
    v->room = r.shared > r.own ? r.shared : r.own;
    v->fill_ppm = capacity == 0 || used >= capacity
                      ? SL_PPM
                      : (uint32_t)(((unsigned __int128)used * SL_PPM) / capacity);
    v->admit = cost <= v->room;
    if (v->admit) v->reason = SL_SHED_ADMIT;
    else if (cost > r.free) v->reason = SL_SHED_FULL;
    else if (cost > r.hard) v->reason = SL_SHED_RESERVED;
    else v->reason = SL_SHED_PRIORITY;
}

void sl_shed_take(sl_shed_use *use, uint32_t cls, uint32_t n) {
    if (cls >= SL_SHED_MAX_CLASSES) cls = SL_SHED_MAX_CLASSES - 1;
    use->by_class[cls] = use->by_class[cls] > UINT32_MAX - n ? UINT32_MAX : use->by_class[cls] + n;
}

void sl_shed_give(sl_shed_use *use, uint32_t cls, uint32_t n) {
    if (cls >= SL_SHED_MAX_CLASSES) cls = SL_SHED_MAX_CLASSES - 1;
    use->by_class[cls] = use->by_class[cls] > n ? use->by_class[cls] - n : 0;
}
