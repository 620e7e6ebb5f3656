/* SPDX-License-Identifier: Apache-2.0 */
/*
 * settle.c -- settling a reservation with the time it was made, so a refund never lands in
 * a window or calendar period other than the one that counted the reservation.
 */
#include "limiter.h"
#include "sluice.h"

int sluice_settle_at(sluice_store *st, const sluice_limiter *lim, const void *key,
                     size_t key_len, uint64_t reserved, uint64_t actual, sluice_time reserved_at,
                     sluice_time now, sluice_result *out) {
    if (lim == NULL) return SLUICE_EINVAL;
    /* A refund whose window has passed is void: settle "to what was reserved", which
     * charges nothing and refunds nothing but still reports the current state. */
    if (actual < reserved && !sl_algo_refundable(&lim->lim, reserved_at, now)) actual = reserved;
    return sluice_settle(st, lim, key, key_len, reserved, actual, now, out);
}
