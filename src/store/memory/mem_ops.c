/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem_ops.c -- the memory store behind the store interface (store.h): every operation
 * answers before it returns, on the calling thread; the lane is the sluice_store.
 */
#include <string.h>

#include "algo/limiter.h"
#include "store/store.h"

static void m_decide(void *lane, const sl_sitem *items, size_t n, unsigned flags,
                     sluice_time now, sl_store_cb cb, void *ud) {
    sl_sresult r;
    int rc = sl_mem_decide(lane, items, n, flags, now, &r);
    cb(ud, rc, rc == SLUICE_OK ? &r : NULL);
}

/* An answer of one item: only what the callers read (a zeroed sl_sresult is ~3 KiB). */
static void one_result(sl_sresult *r) {
    r->allowed = 1;
    r->groups_ok = 0;
    r->local = false;
    r->n = 1;
    memset(&r->r[0], 0, sizeof(r->r[0]));
    r->x[0].kind = 0;
}

static void m_settle(void *lane, const sl_sitem *it, uint64_t actual, sluice_time reserved_at,
                     sluice_time now, sl_store_cb cb, void *ud) {
    sl_sresult r;
    one_result(&r);
    int rc = sluice_settle_at(lane, it->lim, it->key, it->key_len, it->cost, actual, reserved_at,
                              now, &r.r[0]);
    cb(ud, rc, rc == SLUICE_OK ? &r : NULL);
}

static void m_release(void *lane, const sl_sitem *it, uint64_t lease, sluice_time now,
                      sl_store_cb cb, void *ud) {
    sl_sresult r;
    one_result(&r);
    int rc = sl_mem_release(lane, it->lim, it->key, it->key_len, lease, (it->cap & SL_SIC_SAMPLE) != 0,
                            it->latency_ns, it->outcome, now, &r.x[0]);
    if (rc == SLUICE_ENOTFOUND) { /* expired already: an answer, not a failure */
        r.allowed = 0;
        rc = SLUICE_OK;
    }
    r.r[0].allowed = r.allowed;
    cb(ud, rc, rc == SLUICE_OK ? &r : NULL);
}

static void m_reset(void *lane, const sl_sitem *items, size_t n, sluice_time now, sl_store_cb cb,
                    void *ud) {
    (void)now;
    sl_sresult r = {.allowed = 1, .n = n};
    int first = SLUICE_OK;
    for (size_t i = 0; i < n; i++) {
        int rc = sluice_reset(lane, items[i].lim, items[i].key, items[i].key_len);
        if (rc != SLUICE_OK && rc != SLUICE_ENOTFOUND && first == SLUICE_OK) first = rc;
    }
    cb(ud, first, first == SLUICE_OK ? &r : NULL);
}

static int m_decide_batch(void *lane, const sluice_item *items, size_t n, sluice_time now,
                          sluice_result *out) {
    return sluice_decide_batch(lane, items, n, now, out);
}

const sl_store_ops sl_memory_ops = {
    .name = "memory",
    .immediate = true,
    .shared = false,
    .decide = m_decide,
    .settle = m_settle,
    .release = m_release,
    .reset = m_reset,
    .claim = NULL,
    .decide_batch = m_decide_batch,
};
