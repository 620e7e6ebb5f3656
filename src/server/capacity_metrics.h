/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity_metrics.h -- capacity protection's metrics (capacity_metrics.c): counted from
 * the decision path by policy series (observe.c), rendered by /metrics (metrics.c).
 */
#ifndef SL_SERVER_CAPACITY_METRICS_H
#define SL_SERVER_CAPACITY_METRICS_H

#include "core/prom.h"
#include "engine/engine.h"
#include "server/server.h"

/* Items [i, j) of v, one policy's application whose (policy, "") series is pseries. */
void sl_cap_count(sl_worker *w, const sl_verdict *v, size_t i, size_t j, unsigned pseries);
/* sluice_adaptive_limit, sluice_adaptive_noload_seconds, sluice_in_flight,
 * sluice_shed_total and sluice_penalties_total. */
void sl_cap_prom(sl_server *s, sl_prom *p);

#endif
