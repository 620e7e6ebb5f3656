/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h -- monotonic and wall clocks. The decision path reads the clock at most once
 * (sluice_clock_now) and passes the reading down; nothing below reads it again.
 */
#ifndef SL_CLOCK_H
#define SL_CLOCK_H

#include <stdint.h>

#include "sluice.h"

int64_t sl_clock_mono_ns(void);
int64_t sl_clock_wall_ns(void);

#endif /* SL_CLOCK_H */
