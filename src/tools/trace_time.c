/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_time.c -- the time forms access logs write ($msec, $time_local, $time_iso8601,
 * RFC 3339 with a zone), durations and counts; nothing is allocated.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/tz.h"
#include "trace_int.h"

/* ---- time ----------------------------------------------------------------------------- */

static bool num(const char *s, size_t n, int *out) {
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int month_of(const char *s) {
    static const char m[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int i = 0; i < 12; i++)
        if (memcmp(s, m + 3 * i, 3) == 0) return i + 1;
    return 0;
}

/* "+HHMM", "+HH:MM", "Z" (or nothing): offset east of UTC in seconds */
static bool zone(const char *s, size_t n, int64_t *off) {
    *off = 0;
    if (n == 0 || (n == 1 && (s[0] == 'Z' || s[0] == 'z'))) return true;
    if (s[0] != '+' && s[0] != '-') return false;
    int h, m;
    if (n == 5 && num(s + 1, 2, &h) && num(s + 3, 2, &m)) {
    } else if (n == 6 && s[3] == ':' && num(s + 1, 2, &h) && num(s + 4, 2, &m)) {
    } else if (n == 3 && num(s + 1, 2, &h)) {
        m = 0;
    } else {
        return false;
    }
    *off = (int64_t)(h * 3600 + m * 60) * (s[0] == '-' ? -1 : 1);
    return true;
}

static bool civil_ok(int y, int mo, int d, int h, int mi, int s) {
    return y >= 1970 && y <= 9999 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 &&
           mi <= 59 && s <= 60;
}

/* seconds since the epoch (at most 9999-12-31 plus a zone: no overflow in seconds) and a
 * fraction as nanoseconds, if the sum fits: int64 nanoseconds end in April 2262, and a
 * later time (a year 9999 typo, a hostile log) is unparsable, never wrapped around. */
static bool civil_ns(int64_t secs, int64_t frac, int64_t *out_ns) {
    int64_t ns;
    if (__builtin_mul_overflow(secs, (int64_t)NS, &ns) || __builtin_add_overflow(ns, frac, &ns)) return false;
    *out_ns = ns;
    return true;
}

bool sl_trace_parse_time(const char *s, size_t len, int64_t *out_ns) {
    while (len > 0 && (*s == ' ' || *s == '"')) s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '"')) len--;
    if (len == 0) return false;
    /* epoch number: seconds, ms, us or ns by magnitude, with an optional fraction */
    if (s[0] >= '0' && s[0] <= '9') {
        size_t i = 0;
        uint64_t ip = 0;
        int idig = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (++idig > 19) return false;
            ip = ip * 10 + (uint64_t)(s[i++] - '0');
        }
        if (i == len || s[i] == '.') {
            int64_t frac_ns = 0, scale = NS;
            uint64_t unit;
            if (ip >= UINT64_C(100000000000000000)) unit = 1;
            else if (ip >= UINT64_C(100000000000000)) unit = 1000;
            else if (ip >= UINT64_C(100000000000)) unit = 1000000;
            else unit = (uint64_t)NS;
            if (i < len) {
                i++;
                if (i == len) return false;
                scale = (int64_t)unit;
                while (i < len && s[i] >= '0' && s[i] <= '9') {
                    scale /= 10;
                    frac_ns += (s[i++] - '0') * scale;
                }
                if (i != len) return false;
            }
            if (ip > (uint64_t)INT64_MAX / unit) return false;
            *out_ns = (int64_t)(ip * unit) + frac_ns;
            return true;
        }
        /* ISO 8601: 2024-01-01T00:00:00[.123][Z|+01:00] (a space instead of T too) */
        if (len >= 19 && s[4] == '-' && s[7] == '-' && (s[10] == 'T' || s[10] == ' ') &&
            s[13] == ':' && s[16] == ':') {
            int y, mo, d, h, mi, sec;
            if (!num(s, 4, &y) || !num(s + 5, 2, &mo) || !num(s + 8, 2, &d) ||
                !num(s + 11, 2, &h) || !num(s + 14, 2, &mi) || !num(s + 17, 2, &sec) ||
                !civil_ok(y, mo, d, h, mi, sec))
                return false;
            size_t j = 19;
            int64_t frac = 0, scale = NS;
            if (j < len && (s[j] == '.' || s[j] == ',')) {
                j++;
                size_t start = j;
                while (j < len && s[j] >= '0' && s[j] <= '9') {
                    if (scale > 1) {
                        scale /= 10;
                        frac += (s[j] - '0') * scale;
                    }
                    j++;
                }
                if (j == start) return false;
            }
            int64_t off;
            if (!zone(s + j, len - j, &off)) return false;
            return civil_ns(sl_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec - off,
                           frac, out_ns);
        }
        /* nginx $time_local: 10/Oct/2000:13:55:36 -0700 */
        if (len >= 20 && s[2] == '/' && s[6] == '/' && s[11] == ':' && s[14] == ':' &&
            s[17] == ':') {
            int y, mo = month_of(s + 3), d, h, mi, sec;
            if (mo == 0 || !num(s, 2, &d) || !num(s + 7, 4, &y) || !num(s + 12, 2, &h) ||
                !num(s + 15, 2, &mi) || !num(s + 18, 2, &sec) || !civil_ok(y, mo, d, h, mi, sec))
                return false;
            size_t j = 20;
            while (j < len && s[j] == ' ') j++;
            int64_t off;
            if (!zone(s + j, len - j, &off)) return false;
            return civil_ns(sl_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec - off, 0,
                           out_ns);
        }
    }
    return false;
}

/* seconds with a fraction ("0.123") or an integer in `unit_ns` units */
bool sl__trace_duration(const char *s, size_t len, int64_t unit_ns, int64_t *out) {
    if (len == 0 || len > 24) return false;
    int64_t ip = 0, frac = 0, scale = unit_ns;
    size_t i = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9') ip = ip * 10 + (s[i++] - '0');
    if (i == 0) return false;
    if (i < len && s[i] == '.') {
        i++;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            scale /= 10;
            frac += (s[i++] - '0') * scale;
        }
    }
    if (i != len || ip > INT64_MAX / unit_ns / 2) return false;
    *out = ip * unit_ns + frac;
    return true;
}

bool sl__trace_u64(const char *s, size_t len, uint64_t *out) {
    if (len == 0 || len > 19) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}
