/* SPDX-License-Identifier: Apache-2.0 */
/*
 * series.h -- the console's per-second ring (GET /v1/series) and its recent rejections
 * (GET /v1/rejections). Per worker, single writer, fed from the decision path without a
 * lock, an allocation or a clock read (the verdict's decision time picks the second).
 * Memory is fixed at start: workers x seconds x series x 9 results x 4 bytes, plus
 * SL_REJ_RING entries per worker; it never depends on keys.
 */
#ifndef SL_SERVER_SERIES_H
#define SL_SERVER_SERIES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server.h"

#define SL_REJ_RING 128 /* recent rejections kept per worker */
#define SL_REJ_KEY 64   /* raw key bytes kept (shown only when log.raw_keys allows) */

/* One recent rejection; `seq` is odd while its writer fills it (a reader retries). */
typedef struct sl_rej {
    _Atomic uint32_t seq;
    uint16_t series;      /* the (policy, window) series of its deciding window */
    uint8_t result;       /* sl_met_result */
    uint8_t key_len;      /* raw bytes in key (at most SL_REJ_KEY) */
    int64_t wall_ms;
    uint64_t nth;         /* the worker's rejection count when kept (order within a ms) */
    uint16_t full_len;    /* the key's length (above SL_REJ_KEY: key is its start) */
    bool hashed;          /* key_hash set (a long key); else the reader hashes key */
    bool text;            /* key holds the start of the key's text (a long key, raw keys
                             allowed), not its bytes */
    uint64_t key_hash;    /* as /v1/top's key_hash */
    uint64_t remaining, limit;
    int64_t retry_after_ns; /* -1: none (SLUICE_NEVER: never) */
    char key[SL_REJ_KEY];
} sl_rej;

/* One worker's ring: counts[row][series][result], row = second % seconds. */
typedef struct sl_series_w {
    unsigned seconds, nser;
    _Atomic int64_t *stamp;   /* [seconds] the second a row holds; -1 while it is cleared */
    _Atomic uint32_t *cnt;    /* [seconds * nser * SL_MET_RESULTS] */
    /* the writer's current second, cached: [from_ns, to_ns) of wall time, its row */
    int64_t from_ns, to_ns;
    _Atomic uint32_t *row;
    uint64_t rej_next;
    sl_rej rej[SL_REJ_RING];
} sl_series_w;


/* A worker's ring (seconds 0: NULL, the ring is off; NULL without memory too). */
sl_series_w *sl_series_worker_new(unsigned seconds, unsigned nser);
void sl_series_worker_free(sl_series_w *sw);
/* Bytes one worker's ring holds (the fixed cost of observe.series). */
size_t sl_series_bytes(unsigned seconds, unsigned nser);

/* The slow parts of sl_series_note: a new second (clears its row), a rejection kept. */
void sl_series_roll(sl_series_w *sw, int64_t wall_ns);
void sl_series_reject(sl_worker *w, const sl_verdict *v, size_t first, size_t dec,
                      unsigned slot, unsigned r);

/* The decision path (observe.c count_run): one policy application of v (items from
 * `first`, items[dec] deciding) counted as result `r` under series `slot`; a rejection is
 * kept among the recent ones while the decision log is on. Why inline: the common case is
 * two compares and one relaxed single-writer store. */
static inline void sl_series_count(sl_series_w *sw, int64_t wall_ns, unsigned slot, unsigned r) {
    if (wall_ns < sw->from_ns || wall_ns >= sw->to_ns) sl_series_roll(sw, wall_ns);
    if (slot < sw->nser && r < SL_MET_RESULTS) {
        _Atomic uint32_t *c = &sw->row[slot * SL_MET_RESULTS + r];
        atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    }
}

static inline void sl_series_note(sl_worker *w, const sl_verdict *v, size_t first, size_t dec,
                                  unsigned slot, unsigned r, bool rejected) {
    sl_series_w *sw = w->series;
    if (sw == NULL) return;
    sl_series_count(sw, v->decided_at.wall_ns, slot, r);
    if (rejected) sl_series_reject(w, v, first, dec, slot, r);
}

/* Sums every worker's counts of series `slot` for the seconds [end_s - n + 1, end_s] into
 * out[n * SL_MET_RESULTS] (oldest first; zero where no worker holds the second). */
void sl_series_read(sl_series_w *const *ws, unsigned nw, unsigned slot, int64_t end_s,
                    unsigned n, uint64_t *out);

/* GET /v1/series and GET /v1/rejections on the admin listener (admin_api.c routes). */
void sl_series_http(sl_conn *c, const sl_http_req *req);
void sl_rejections_http(sl_conn *c, const sl_http_req *req);

#endif /* SL_SERVER_SERIES_H */
