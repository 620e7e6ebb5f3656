/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_posix_tz.c -- the POSIX TZ rule parser (TZif footers) over arbitrary bytes; a rule
 * that parses must give one of its two offsets everywhere, and its next change must lie
 * strictly after the instant asked about. Aborts otherwise.
 */
#include <stdint.h>
#include <stdlib.h>

#include "tz_posix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_tz_posix p;
    if (sl_tz_posix_parse((const char *)data, size, &p) != 0) return 0;
    static const int64_t at[] = {INT64_MIN, -(INT64_C(1) << 40), -1, 0, 951782400,
                                 1774746000, 4102444800, INT64_C(1) << 40, INT64_MAX};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        int32_t off = sl_tz_posix_offset(&p, at[i]);
        if (off != p.std_utoff && !(p.has_dst && off == p.dst_utoff)) abort();
        int64_t n = sl_tz_posix_next(&p, at[i]);
        if (n <= at[i] && n != INT64_MAX) abort();
        if (!p.has_dst && n != INT64_MAX) abort();
    }
    /* walk a few years change by change */
    int64_t t = 1700000000;
    for (int k = 0; k < 12; k++) {
        int64_t n = sl_tz_posix_next(&p, t);
        if (n == INT64_MAX) break;
        if (n <= t) abort();
        t = n;
    }
    return 0;
}
