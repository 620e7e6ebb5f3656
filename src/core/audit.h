/* SPDX-License-Identifier: Apache-2.0 */
/*
 * audit.h -- the audit trail of configuration changes: one JSON object per line appended to
 * a file (time, source, admin caller's token NAME, config checksum, what changed, outcome),
 * plus a ring of the most recent entries in memory for GET /v1/audit. Durability: each
 * entry is one write(2) on a descriptor opened O_APPEND for that entry, then fdatasync(2),
 * then close, before sl_audit_record returns; config changes are rare, so each costs a
 * disk flush and survives a crash, and a rotated file is simply created again.
 * Thread-safe (a mutex: never on the decision path).
 */
#ifndef SL_AUDIT_H
#define SL_AUDIT_H

#include <stddef.h>
#include <stdint.h>

typedef enum sl_audit_source {
    SL_AUDIT_STARTUP = 0,
    SL_AUDIT_SIGHUP = 1,
    SL_AUDIT_ADMIN_API = 2,
    SL_AUDIT_FILE_CHANGE = 3,
    SL_AUDIT_OVERRIDE = 4 /* a per-key override set or removed (changed: "override ...") */
} sl_audit_source;

/* One changed policy: its name and how it changed, in words the lead composes from the
 * two configs, e.g. "limits: 10/s burst 20 -> 20/s burst 40; mode: shadow -> enforce". */
typedef struct sl_audit_change {
    const char *policy;
    const char *how;
} sl_audit_change;

/* What one change attempt was. Every pointer is borrowed for the call; NULL/0 when
 * unknown. The summary lists come from diffing the old and the new config. */
typedef struct sl_audit_event {
    sl_audit_source source;
    const char *caller;      /* admin API: the token's NAME (never the token); else NULL */
    const char *path;        /* the config file */
    char sha256[65];         /* hex checksum of the file read ("" unknown): sl_audit_sha256_hex */
    uint64_t generation;     /* the config generation now in force */
    const char *const *added;   /* policy names */
    size_t nadded;
    const char *const *removed;
    size_t nremoved;
    const sl_audit_change *changed;
    size_t nchanged;
    int ok;              /* 1: applied; 0: refused, old config kept */
    const char *error;   /* why it was refused */
    /* An operator's action on state rather than config (NULL: a config change, rendered
     * as before): "reset" (POST /v1/state/reset); then policy, the key's hash (never the
     * raw key unless raw keys are allowed: the caller decides), the operator's reason and
     * a detail ("3 windows reset") are rendered instead of the config's lists. */
    const char *action;
    const char *policy;
    const char *key;
    const char *reason;
    const char *detail;
} sl_audit_event;

typedef struct sl_audit sl_audit;

typedef struct sl_audit_config {
    const char *path;   /* the JSON-lines file; NULL: memory only */
    unsigned ring;      /* recent entries kept in memory (default 64, at most 4096) */
    int64_t (*wall_ns)(void *ud); /* tests; NULL: CLOCK_REALTIME */
    void *clock_ud;
} sl_audit_config;

/* 0, or -EINVAL / -ENOMEM. The file is not opened here (see above). */
int sl_audit_create(sl_audit **out, const sl_audit_config *c);
void sl_audit_destroy(sl_audit *a);

/* Records one entry: renders it (lists longer than 256 names and texts longer than 512
 * bytes are cut, saying how many were left out), keeps it in the ring and appends it to
 * the file. 0, or -errno when the file could not be written and synced (the entry is
 * still in the ring, marked "persisted":false there). */
int sl_audit_record(sl_audit *a, const sl_audit_event *e);

/* The recent entries as JSON: {"total":N,"entries":[...newest first, at most max...]}
 * (malloc'ed, NUL-terminated, *len without it), or NULL without memory. */
char *sl_audit_render(sl_audit *a, size_t max, size_t *len);

/* Entries recorded since creation, and file writes that failed. */
uint64_t sl_audit_total(sl_audit *a);
uint64_t sl_audit_write_errors(sl_audit *a);

/* SHA-256 as 64 lowercase hex digits + NUL, of a buffer or of a whole file (libcrypto).
 * 0, or -1 (the file cannot be read: errno kept). */
int sl_audit_sha256_hex(const void *p, size_t n, char out[65]);
int sl_audit_sha256_file(const char *path, char out[65]);

const char *sl_audit_source_name(sl_audit_source s); /* startup|sighup|admin-api|file-change */

#endif /* SL_AUDIT_H */
