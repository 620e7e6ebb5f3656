/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides.h -- per-key overrides as the admin API, SL.OVERRIDE and import see them
 * (docs/overrides.md): a JSON body validated against the policy in force into a store
 * record, records rendered back as JSON, and the audit entry of each change. One place for
 * every protocol, so they accept and answer exactly the same.
 */
#ifndef SL_SERVER_OVERRIDES_H
#define SL_SERVER_OVERRIDES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "store/memory/override.h"

struct sl_server;

/* What went wrong: the HTTP status (400 bad field, 404 unknown policy or override, 507
 * full, 501 a store without overrides), the field it names and why. */
typedef struct sl_ovr_res {
    int status;
    char field[64];
    char detail[320];
} sl_ovr_res;

/* The caller's rights: one function so roles (admin.tokens `role:`) plug in here. */
typedef enum sl_admin_what { SL_ADMIN_READ = 1, SL_ADMIN_OVERRIDES = 2, SL_ADMIN_ALL = 3 } sl_admin_what;
struct sl_gen;
/* Whether the named admin token may do `what` under the tokens of generation g (a token
 * of role read may only read). */
bool sl_admin_may(const struct sl_gen *g, const char *token_name, sl_admin_what what);

/* Sets (policy, key) from `body` (a JSON object: plan | limits | block | exempt, and
 * expires_at, reason, label). `key` is the path's form (parts joined by '|', each
 * percent-encoded); key_hash (32 hex digits) instead names a key whose raw form is not
 * kept (import). On success *out is the stored object and *created whether it is new;
 * otherwise res says why (and 0 is not returned). */
int sl_ovr_set(struct sl_server *s, const sl_engine *e, const char *policy, const char *key,
               size_t key_len, const char *key_hash, json_t *body, const char *who,
               sluice_time now, json_t **out, bool *created, sl_ovr_res *res);
/* A batch of changes (the import on the Redis store): each line is checked as sl_ovr_set
 * checks it and queued; a flush writes them to Redis in one call, waits once for the feed
 * to bring them back, then audits and answers each. */
#define SL_OVR_BATCH 256
typedef struct sl_ovr_batch sl_ovr_batch;
sl_ovr_batch *sl_ovr_batch_new(void);
void sl_ovr_batch_free(sl_ovr_batch *b); /* what is still queued is dropped, not written */
size_t sl_ovr_batch_size(const sl_ovr_batch *b);
/* As sl_ovr_set, without *out. On the Redis store with b: 1 when the change is queued (its
 * outcome comes from the flush), 2 when b must be flushed first (full, or the same key is
 * queued: ask again after the flush); elsewhere (or b NULL) applied at once: 0 or -1. */
int sl_ovr_set_batched(struct sl_server *s, const sl_engine *e, const char *policy,
                       const char *key, size_t key_len, const char *key_hash, json_t *body,
                       const char *who, sluice_time now, sl_ovr_batch *b, uint64_t line,
                       sl_ovr_res *res);
/* Called once per queued change of a flush: why NULL (applied) or "STATUS detail". */
typedef void (*sl_ovr_batch_done)(void *ud, uint64_t line, const char *why);
void sl_ovr_batch_flush(struct sl_server *s, sl_ovr_batch *b, sluice_time now,
                        sl_ovr_batch_done done, void *ud);
/* The live override as JSON (NULL: none; res->status 404). */
json_t *sl_ovr_get_json(struct sl_server *s, const sl_engine *e, const char *policy,
                        const char *key, size_t key_len, const char *key_hash, sluice_time now,
                        sl_ovr_res *res);
/* Removes it: 0, or res (404 none). */
int sl_ovr_remove(struct sl_server *s, const sl_engine *e, const char *policy, const char *key,
                  size_t key_len, const char *key_hash, const char *who, sluice_time now,
                  sl_ovr_res *res);
/* The same with the caller's reason (DELETE's body {"reason": ...}), in the audit entry. */
int sl_ovr_remove_why(struct sl_server *s, const sl_engine *e, const char *policy, const char *key,
                      size_t key_len, const char *key_hash, const char *who, const char *why,
                      sluice_time now, sl_ovr_res *res);
/* A record as the API shows it (export: a re-importable line). */
json_t *sl_ovr_rec_json(const sl_ovr_rec *r, bool with_meta);
/* Whether record r's policy (or plan) is missing from engine e (dormant). */
bool sl_ovr_orphaned(const sl_engine *e, const sl_ovr_rec *r);
/* The hash of (policy, path-form key): sl_ovr_key_hash, engine/engine.h. */
/* 32 hex digits <-> hash. */
void sl_ovr_hash_hex(sl_hash128 h, char out[33]);
bool sl_ovr_hex_hash(const char *s, sl_hash128 *h);

/* The Redis store (store/redis/override.h): overrides live in Redis, each instance follows
 * the feed into its local table. Started by `serve` once the server is created (before its
 * workers; a no-op for the memory store); sl_server_destroy stops it (sl_redis_ovr_stop)
 * and a reload asks for a full pass (sl_redis_ovr_resync). */
int sl_ovr_redis_start(struct sl_server *s, char *err, size_t errlen);
uint64_t sl_ovr_redis_refused(void); /* feed changes this instance's config could not take */

/* Decisions decided under an override, by kind (metrics; never per key). */
extern _Atomic uint64_t sl_ovr_decisions[5];

#endif /* SL_SERVER_OVERRIDES_H */
