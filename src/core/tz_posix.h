/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tz_posix.h -- POSIX TZ rule strings ("CET-1CEST,M3.5.0,M10.5.0/3"), as found in the
 * footer of TZif v2+ files (RFC 8536 3.3, including its extension of rule times to
 * -167..167 hours). Exposed on its own for tz.c and the fuzz target. Offsets are
 * seconds east of UTC (the POSIX string's sign is the opposite); instants UTC seconds.
 */
#ifndef SL_TZ_POSIX_H
#define SL_TZ_POSIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_tz_rule {
    char kind;       /* 'J': Julian day 1..365, Feb 29 never counted;
                        'D': zero-based day 0..365, Feb 29 counted in leap years;
                        'M': month.week.weekday (week 5 = the last one) */
    uint16_t day;    /* 'J' and 'D' */
    uint8_t month;   /* 'M': 1..12 */
    uint8_t week;    /* 'M': 1..5 */
    uint8_t wday;    /* 'M': 0 (Sunday) .. 6 */
    int32_t time_s;  /* local wall time of the change on that day, -167h..167h */
} sl_tz_rule;

typedef struct sl_tz_posix {
    int32_t std_utoff; /* standard time, seconds east of UTC */
    int32_t dst_utoff; /* daylight time (std + 1 h unless given) */
    bool has_dst;
    sl_tz_rule start;  /* into DST, given in standard local time */
    sl_tz_rule end;    /* out of DST, given in daylight local time */
} sl_tz_posix;

/* Parses exactly `len` bytes of `s` (no NUL needed). Returns 0, or -1 on anything that
 * is not a complete, valid rule string. A DST name without rules gets the rules of
 * tzcode's default, ",M3.2.0,M11.1.0". */
int sl_tz_posix_parse(const char *s, size_t len, sl_tz_posix *out);

/* Offset in effect at `utc_s`. */
int32_t sl_tz_posix_offset(const sl_tz_posix *p, int64_t utc_s);

/* The first instant > utc_s at which the rule changes the offset or DST flag, or
 * INT64_MAX when it never does. */
int64_t sl_tz_posix_next(const sl_tz_posix *p, int64_t utc_s);

#endif /* SL_TZ_POSIX_H */
