/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rejections.h -- the default rejection summary (log.rejections): every interval, one
 * `rejections` line per policy that refused: how many, an estimate of the distinct keys,
 * the top keys (keyed hashes) and the top client addresses. Counting is per worker and
 * single writer (no lock, no allocation, no clock read); the main thread's timer merges.
 */
#ifndef SL_SERVER_REJECTIONS_H
#define SL_SERVER_REJECTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sl_server;
struct sl_worker;

typedef struct sl_rej_w sl_rej_w;

/* A worker's counters (calloc'd once; pages are touched only by policies that refuse). */
sl_rej_w *sl_rej_worker_new(void);
void sl_rej_worker_free(sl_rej_w *r);

/* One refusal by policy series `pslot` for the key whose keyed hash is `key_hash`: worker
 * thread only. The client address comes from sl_rej_client_set (NULL: unknown). */
void sl_rej_count(struct sl_worker *w, unsigned pslot, uint64_t key_hash);

/* Whether the summary counts now (off: the caller skips the key's hash). One relaxed load. */
bool sl_rej_enabled(void);

/* The client address of the request being counted on this thread (HTTP handlers set it
 * around their count call; NULL clears). Not copied: valid until cleared. */
void sl_rej_client_set(const char *addr, size_t len);

/* Main thread, every tick: closes an interval every `every` (settings), writes the lines
 * of the one closed on the previous tick (so no worker is still writing into it). */
void sl_rej_tick(struct sl_server *s, int64_t now_ns);

/* At stop (workers stopped): the lines of the intervals not written yet. */
void sl_rej_flush(struct sl_server *s);

#endif /* SL_SERVER_REJECTIONS_H */
