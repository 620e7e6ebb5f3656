/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decision.h -- rules shared by every store's decisions (memory in decide.c, Redis in
 * src/store/redis/request.c), so both name the same deciding limit.
 */
#ifndef SL_DECISION_H
#define SL_DECISION_H

#include "sluice.h"

/* The deciding item of a filled decision: on rejection the rejecting item with the
 * longest retry-after (SLUICE_NEVER longest of all); on admission the one with the
 * smallest remaining/limit share. */
int sl_decision_deciding(const sluice_decision *d);

#endif /* SL_DECISION_H */
