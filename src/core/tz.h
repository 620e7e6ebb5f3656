/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tz.h -- IANA time zones from the system's TZif files (tzdata) and calendar periods.
 * All instants are UTC seconds since the Unix epoch; offsets are seconds east of UTC.
 * A period (hour, day, ISO week, month) starts at the first instant whose local time
 * is at or after local 00:00 of its first day (or hh:00 for hours), so days that
 * lose or gain an hour to DST are 23 or 25 hours long and nothing is skipped.
 */
#ifndef SL_TZ_H
#define SL_TZ_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

typedef struct sl_tz sl_tz;

/* The zone `name` ("Europe/Madrid", "UTC"), loaded from the zoneinfo directory once
 * and cached for the life of the process (thread-safe). NULL and *err = SLUICE_ENOTFOUND
 * for an unknown or unsafe name (absolute path, ".."), SLUICE_ECORRUPT for a bad file. */
/* Civil dates, proleptic Gregorian (Howard Hinnant's algorithms): days since 1970-01-01
 * of y-m-d (m 1..12, d 1..31), and back. Integers only, any year. */
int64_t sl_days_from_civil(int64_t y, unsigned m, unsigned d);
void sl_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

const sl_tz *sl_tz_get(const char *name, int *err);

/* Parses TZif bytes (versions 1-4, including the POSIX TZ footer used for instants past
 * the table). Returns NULL with *err set on malformed input. Used by sl_tz_get and the
 * fuzz target. */
sl_tz *sl_tz_parse(const uint8_t *buf, size_t len, const char *name, int *err);
void sl_tz_free(sl_tz *tz);
const char *sl_tz_name(const sl_tz *tz);

/* UTC offset in effect at `utc_s`. A NULL zone is UTC. */
int32_t sl_tz_offset(const sl_tz *tz, int64_t utc_s);

/* Start of the calendar period containing `utc_s`, and start of the one after it. */
int64_t sl_cal_period_start(const sl_tz *tz, sluice_period p, int64_t utc_s);
int64_t sl_cal_period_next(const sl_tz *tz, sluice_period p, int64_t utc_s);

#endif /* SL_TZ_H */
