/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tzif.c -- sl_tz_parse over arbitrary bytes; a zone that parses is then queried
 * (offsets, periods) and must keep the calendar's invariants: a period contains the
 * instant, and the next period starts exactly where this one ends. Aborts otherwise.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tz.h"

static void check_periods(const sl_tz *tz, int64_t t) {
    for (int p = SLUICE_PERIOD_HOUR; p <= SLUICE_PERIOD_MONTH; p++) {
        int64_t s = sl_cal_period_start(tz, (sluice_period)p, t);
        int64_t n = sl_cal_period_next(tz, (sluice_period)p, t);
        if (t > -(INT64_C(1) << 54) && t < (INT64_C(1) << 54)) {
            if (!(s <= t && t < n)) abort();
            if (sl_cal_period_start(tz, (sluice_period)p, n) != n) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int err = 0;
    sl_tz *tz = sl_tz_parse(data, size, "fuzz", &err);
    if (tz == NULL) {
        if (err == 0) abort();
        return 0;
    }
    static const int64_t fixed[] = {INT64_MIN, -(INT64_C(1) << 40), -2208988800, -1, 0,
                                    1000000000, 1774746000, 4102444800, INT64_C(1) << 40, INT64_MAX};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        int32_t off = sl_tz_offset(tz, fixed[i]);
        if (off < -26 * 3600 || off > 26 * 3600) abort();
        check_periods(tz, fixed[i]);
    }
    if (size >= 8) { /* an instant the input chooses, within a few centuries of now */
        int64_t t;
        memcpy(&t, data + size - 8, 8);
        check_periods(tz, t % (INT64_C(1) << 34));
    }
    sl_tz_free(tz);
    return 0;
}
