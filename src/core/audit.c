/* SPDX-License-Identifier: Apache-2.0 */
/*
 * audit.c -- the audit trail (see audit.h). An entry is rendered once into one line of
 * JSON (strings escaped by the logger's escaper, so invalid UTF-8 cannot break the
 * file), appended with one O_APPEND write and synced, and kept in a ring of the last
 * `ring` entries. Invariants: a line holds no credential (only what the caller passes:
 * the token's name); the ring never holds more than `ring` entries.
 */
#include "core/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/redact.h"

#define LIST_MAX 256 /* names per list in one entry */
#define TEXT_MAX 512 /* bytes per free text (error, how) */

typedef struct ring_entry {
    char *json;
} ring_entry;

struct sl_audit {
    pthread_mutex_t mu;
    char *path;
    unsigned cap;
    ring_entry *ring;
    uint64_t total, write_errors;
    int64_t (*wall_fn)(void *);
    void *clock_ud;
};

/* ---- a growing string ----------------------------------------------------------------- */

typedef struct dstr {
    char *p;
    size_t len, cap;
    int oom;
} dstr;

static int ds_reserve(dstr *d, size_t more) {
    if (d->oom) return -1;
    if (more + 1 <= d->cap - d->len) return 0;
    size_t nc = d->cap ? d->cap : 512;
    while (more + 1 > nc - d->len) nc *= 2;
    char *np = realloc(d->p, nc);
    if (np == NULL) return d->oom = 1, -1;
    d->p = np, d->cap = nc;
    return 0;
}

static void ds_put(dstr *d, const char *s, size_t n) {
    if (ds_reserve(d, n) != 0) return;
    memcpy(d->p + d->len, s, n);
    d->len += n;
    d->p[d->len] = 0;
}

static void ds_puts(dstr *d, const char *s) {
    ds_put(d, s, strlen(s));
}

/* A JSON string of at most `max` input bytes (cut at a character, "..." appended). */
static void ds_json(dstr *d, const char *s, size_t max) {
    if (s == NULL) {
        ds_puts(d, "null");
        return;
    }
    size_t n = strlen(s);
    int cut = 0;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--; /* not inside a character */
        cut = 1;
    }
    if (ds_reserve(d, 6 * n + 8) != 0) return;
    sl_lbuf b = {d->p + d->len, 0, d->cap - d->len - 1, 0};
    sl_log_json_str(&b, s, n);
    if (cut && b.len > 0) { /* reopen the string to mark the cut */
        b.len--;
        memcpy(b.p + b.len, "...\"", 4);
        b.len += 4;
    }
    d->len += b.len;
    d->p[d->len] = 0;
}

static void ds_u64(dstr *d, uint64_t v) {
    char t[24];
    snprintf(t, sizeof(t), "%llu", (unsigned long long)v);
    ds_puts(d, t);
}

/* ---- checksums ------------------------------------------------------------------------- */

static void to_hex(const unsigned char *md, unsigned n, char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < n && i < 32; i++) out[2 * i] = hex[md[i] >> 4], out[2 * i + 1] = hex[md[i] & 15];
    out[64] = 0;
}

int sl_audit_sha256_hex(const void *p, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_Digest(p, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32) return -1;
    to_hex(md, len, out);
    return 0;
}

int sl_audit_sha256_file(const char *path, char out[65]) {
    FILE *f = fopen(path, "rbe");
    if (f == NULL) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = -1;
    if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
        char buf[16384];
        size_t n;
        int ok = 1;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            if (EVP_DigestUpdate(ctx, buf, n) != 1) ok = 0;
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        if (ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32) {
            to_hex(md, len, out);
            rc = 0;
        }
    }
    int e = errno;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    errno = e;
    return rc;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

const char *sl_audit_source_name(sl_audit_source s) {
    switch (s) {
    case SL_AUDIT_STARTUP: return "startup";
    case SL_AUDIT_SIGHUP: return "sighup";
    case SL_AUDIT_ADMIN_API: return "admin-api";
    case SL_AUDIT_FILE_CHANGE: return "file-change";
    case SL_AUDIT_OVERRIDE: return "override";
    }
    return "unknown";
}

int sl_audit_create(sl_audit **out, const sl_audit_config *c) {
    *out = NULL;
    if (c == NULL || c->ring > 4096) return -EINVAL;
    sl_audit *a = calloc(1, sizeof(*a));
    if (a == NULL) return -ENOMEM;
    a->cap = c->ring ? c->ring : 64;
    a->ring = calloc(a->cap, sizeof(ring_entry));
    a->path = c->path ? strdup(c->path) : NULL;
    if (a->ring == NULL || (c->path && a->path == NULL)) {
        free(a->ring);
        free(a->path);
        free(a);
        return -ENOMEM;
    }
    a->wall_fn = c->wall_ns;
    a->clock_ud = c->clock_ud;
    pthread_mutex_init(&a->mu, NULL);
    *out = a;
    return 0;
}

void sl_audit_destroy(sl_audit *a) {
    if (a == NULL) return;
    for (unsigned i = 0; i < a->cap; i++) free(a->ring[i].json);
    free(a->ring);
    free(a->path);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* ---- recording ------------------------------------------------------------------------------ */

static void names(dstr *d, const char *key, const char *const *v, size_t n) {
    ds_puts(d, ",\"");
    ds_puts(d, key);
    ds_puts(d, "\":[");
    size_t shown = n < LIST_MAX ? n : LIST_MAX;
    for (size_t i = 0; i < shown; i++) {
        if (i) ds_put(d, ",", 1);
        ds_json(d, v[i] ? v[i] : "", TEXT_MAX);
    }
    ds_put(d, "]", 1);
    if (n > shown) {
        ds_puts(d, ",\"");
        ds_puts(d, key);
        ds_puts(d, "_omitted\":");
        ds_u64(d, n - shown);
    }
}

static int64_t wall_now(const sl_audit *a) {
    if (a->wall_fn) return a->wall_fn(a->clock_ud);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int append_line(const char *path, const char *line, size_t n) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) return -errno;
    int rc = 0;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, line + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            rc = w < 0 ? -errno : -EIO;
            break;
        }
        off += (size_t)w;
    }
    if (rc == 0 && fdatasync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && rc == 0) rc = -errno;
    return rc;
}

int sl_audit_record(sl_audit *a, const sl_audit_event *e) {
    if (a == NULL || e == NULL) return -EINVAL;
    dstr d = {0};
    char ts[28];
    sl_log_time(wall_now(a), ts);
    ds_puts(&d, "{\"ts\":\"");
    ds_puts(&d, ts);
    ds_puts(&d, "\",\"source\":\"");
    ds_puts(&d, sl_audit_source_name(e->source));
    ds_puts(&d, "\",\"caller\":");
    ds_json(&d, e->caller, TEXT_MAX);
    ds_puts(&d, ",\"path\":");
    ds_json(&d, e->path, 4096);
    ds_puts(&d, ",\"sha256\":");
    ds_json(&d, e->sha256[0] ? e->sha256 : NULL, 64);
    ds_puts(&d, ",\"outcome\":\"");
    ds_puts(&d, e->ok ? "ok" : "refused");
    ds_puts(&d, "\"");
    if (!e->ok) {
        ds_puts(&d, ",\"error\":");
        char err[TEXT_MAX + 64]; /* recorded (and fdatasync'd) with no credential in it */
        sl_redact_copy(e->error ? e->error : "", err, sizeof(err));
        ds_json(&d, err, TEXT_MAX);
    }
    if (e->ok) {
        ds_puts(&d, ",\"generation\":");
        ds_u64(&d, e->generation);
    }
    if (e->action != NULL) {
        ds_puts(&d, ",\"action\":");
        ds_json(&d, e->action, TEXT_MAX);
        ds_puts(&d, ",\"policy\":");
        ds_json(&d, e->policy, TEXT_MAX);
        ds_puts(&d, ",\"key\":");
        ds_json(&d, e->key, TEXT_MAX);
        ds_puts(&d, ",\"reason\":");
        ds_json(&d, e->reason, TEXT_MAX);
        ds_puts(&d, ",\"detail\":");
        ds_json(&d, e->detail, TEXT_MAX);
        ds_puts(&d, "}\n");
        goto rendered;
    }
    names(&d, "added", e->added, e->added ? e->nadded : 0);
    names(&d, "removed", e->removed, e->removed ? e->nremoved : 0);
    ds_puts(&d, ",\"changed\":[");
    size_t nc = e->changed ? e->nchanged : 0, shown = nc < LIST_MAX ? nc : LIST_MAX;
    for (size_t i = 0; i < shown; i++) {
        ds_puts(&d, i ? ",{\"policy\":" : "{\"policy\":");
        ds_json(&d, e->changed[i].policy ? e->changed[i].policy : "", TEXT_MAX);
        ds_puts(&d, ",\"how\":");
        ds_json(&d, e->changed[i].how ? e->changed[i].how : "", TEXT_MAX);
        ds_put(&d, "}", 1);
    }
    ds_put(&d, "]", 1);
    if (nc > shown) {
        ds_puts(&d, ",\"changed_omitted\":");
        ds_u64(&d, nc - shown);
    }
    ds_puts(&d, "}\n");
rendered:
    if (d.oom) {
        free(d.p);
        return -ENOMEM;
    }

    pthread_mutex_lock(&a->mu);
    /* The file first, under the lock: lines land in the order of the ring. */
    int rc = a->path ? append_line(a->path, d.p, d.len) : 0;
    if (rc != 0) {
        a->write_errors++;
        d.len -= 2; /* "}\n" */
        d.p[d.len] = 0;
        ds_puts(&d, ",\"persisted\":false}\n");
    }
    if (!d.oom) {
        d.p[d.len - 1] = 0; /* the ring keeps the object without its newline */
        ring_entry *slot = &a->ring[a->total % a->cap];
        free(slot->json);
        slot->json = d.p;
        d.p = NULL;
    }
    a->total++;
    pthread_mutex_unlock(&a->mu);
    free(d.p);
    return rc;
}

char *sl_audit_render(sl_audit *a, size_t max, size_t *len) {
    dstr d = {0};
    pthread_mutex_lock(&a->mu);
    ds_puts(&d, "{\"total\":");
    ds_u64(&d, a->total);
    ds_puts(&d, ",\"entries\":[");
    uint64_t have = a->total < a->cap ? a->total : a->cap;
    if (max < have) have = max;
    for (uint64_t i = 0; i < have; i++) {
        const ring_entry *r = &a->ring[(a->total - 1 - i) % a->cap];
        if (i) ds_put(&d, ",", 1);
        ds_puts(&d, r->json ? r->json : "null");
    }
    pthread_mutex_unlock(&a->mu);
    ds_puts(&d, "]}");
    if (d.oom) {
        free(d.p);
        return NULL;
    }
    *len = d.len;
    return d.p;
}

uint64_t sl_audit_total(sl_audit *a) {
    pthread_mutex_lock(&a->mu);
    uint64_t t = a->total;
    pthread_mutex_unlock(&a->mu);
    return t;
}

uint64_t sl_audit_write_errors(sl_audit *a) {
    pthread_mutex_lock(&a->mu);
    uint64_t t = a->write_errors;
    pthread_mutex_unlock(&a->mu);
    return t;
}
