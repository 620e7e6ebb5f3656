/* SPDX-License-Identifier: Apache-2.0 */
/*
 * snapshot.c -- the memory store to and from a file, so long windows and quotas survive
 * a restart. Format (all integers little-endian), version 2:
 *   header   "SLUICEST" u32 version=2 u32 flags=0 u64 file_len seed[16] i64 save_mono_ns
 *            i64 save_wall_ns u32 nlim u32 0 u64 nentries u64 0                 (80 bytes)
 *   limiter  u16 name_len name u32 index u32 algo u32 state_size u32 quota_period
 *            u64 limit u64 capacity i64 period_ns i64 max_delay_ns i64 lease_ns
 *            i64 emission_ns u16 tz_len tz u32 lflags (1 = CL.THROTTLE mode, 2 = capacity
 *            parameters follow: u32 n, n x u64, see sl_cap_encode)  (x nlim)
 *   entry    u32 lim u32 k1 u64 k0 u32 age u32 hints state[state_size]     (x nentries)
 *   overrides (header flag 1 only) u64 len, then the override table (store/override.c:
 *            every override and tombstone, with the regime its key's counters are in)
 *   trailer  SipHash-2-4-128 under a fixed key of every byte before it
 * Version 1 (64-byte header without file_len, no lflags, entries with a u16 age in 2^32
 * ns units) is still read. Why this checksum: 128 bits make an undetected random
 * corruption (bit flips, a torn or partial write, another file) a 2^-128 event, and the
 * function is already the store's hash (no table, no new code); it is deliberately not
 * keyed: whoever can write the file can write the seed in it too, so a MAC would protect
 * nothing (the file is written 0600 because it holds the seed). file_len in the header
 * lets a truncation be reported as one ("N of M bytes") rather than as a bad checksum.
 *
 * Time: monotonic readings do not survive a reboot, so states are saved with their
 * monotonic timestamps rebased onto the wall clock of the save (sl_algo_rebase by
 * wall - mono) and rebased back onto the restoring process's monotonic clock minus the
 * wall time elapsed since the save. That elapsed time is taken as 0 when the wall clock
 * says the save is in the future (a host whose clock was ahead, or one stepped back
 * since): such states resume exactly as they were saved, so no key waits longer than its
 * own window, instead of for as long as the skew. A host whose clock was behind makes the
 * states look older: they expire early, at most one fresh window per key. Wall-clock
 * states (windows, quotas) are saved as they are; their algorithms clamp a window or
 * period from the future to the one in force (see fixed.c, sliding.c, quota.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tz.h"
#include "store/memory/memory.h"
#include "store/memory/override.h"

#define SNAP_MAGIC "SLUICEST"
#define SNAP_VERSION 2u
#define HEADER_V1 64u
#define HEADER_V2 80u
#define FILE_LEN_AT 16u /* offset of file_len in a version 2 header */
#define ENTRY_HDR 24u
#define TRAILER 16u
#define MAX_STATE (sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX)

static const sl_hash_key checksum_key = {UINT64_C(0x736c756963652d63), UINT64_C(0x6865636b73756d31)};

/* ---- encoding --------------------------------------------------------------------- */

typedef struct rbuf {
    const unsigned char *p;
    size_t len, off;
    bool bad;
} rbuf;

static uint64_t get_u(rbuf *r, int bytes) {
    if (r->bad || r->len - r->off < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->off + (size_t)i] << (8 * i);
    r->off += (size_t)bytes;
    return v;
}

static const unsigned char *get_bytes(rbuf *r, size_t n) {
    if (r->bad || r->len - r->off < n) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *p = r->p + r->off;
    r->off += n;
    return p;
}

static int fail(char *eb, size_t n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *eb, size_t n, int code, const char *fmt, ...) {
    if (eb != NULL && n > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(eb, n, fmt, ap);
        va_end(ap);
    }
    return code;
}

static void put_limit(sl_ovr_wbuf *w, const sl_family *f, const sl_limit *l) {
    sl_ovr_wu(w, f->name_len, 2);
    sl_ovr_wput(w, f->name, f->name_len);
    sl_ovr_wu(w, f->index, 4);
    sl_ovr_wu(w, (uint32_t)l->algo, 4);
    sl_ovr_wu(w, l->state_size, 4);
    sl_ovr_wu(w, (uint32_t)l->quota_period, 4);
    sl_ovr_wu(w, l->limit, 8);
    sl_ovr_wu(w, l->capacity, 8);
    sl_ovr_wu(w, (uint64_t)l->period_ns, 8);
    sl_ovr_wu(w, (uint64_t)l->max_delay_ns, 8);
    sl_ovr_wu(w, (uint64_t)l->lease_ns, 8);
    sl_ovr_wu(w, (uint64_t)l->emission_ns, 8);
    const char *tz = l->tz != NULL ? sl_tz_name(l->tz) : "";
    size_t tzl = tz != NULL ? strnlen(tz, 127) : 0;
    sl_ovr_wu(w, tzl, 2);
    sl_ovr_wput(w, tz, tzl);
    bool cap = sl_cap_present(l);
    sl_ovr_wu(w, (l->cell ? 1u : 0u) | (cap ? 2u : 0u), 4);
    if (cap) {
        uint64_t cw[SL_CAP_WORDS];
        size_t n = sl_cap_encode(l, cw);
        sl_ovr_wu(w, n, 4);
        for (size_t i = 0; i < n; i++) sl_ovr_wu(w, cw[i], 8);
    }
}

/* ---- snapshot ----------------------------------------------------------------------- */

/* The directory part of `path` ("." when it has none), in a malloc'ed string. */
static char *dir_of(const char *path) {
    char *dir = strdup(path);
    if (dir == NULL) return NULL;
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = '\0';
    else if (slash != NULL) *slash = '\0';
    else strcpy(dir, ".");
    return dir;
}

/* Records a failed system call: its errno in *sys_errno and "what: strerror" in eb. */
static int sys_fail(int *sys_errno, int e, char *eb, size_t ebn, const char *what,
                    const char *name) {
    if (sys_errno != NULL) *sys_errno = e;
    fail(eb, ebn, SLUICE_EIO, "%s %s: %s", what, name, strerror(e));
    errno = e;
    return SLUICE_EIO;
}

/* Writes `w` to path via a temporary file in the same directory: fsync, rename, fsync
 * of the directory, so a crash leaves either the old snapshot or the new one. Every
 * failure names its step and keeps its errno. */
static int write_atomically(const char *path, const sl_ovr_wbuf *w, int *sys_errno, char *eb,
                            size_t ebn) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    char *dir = dir_of(path);
    if (tmp == NULL || dir == NULL) {
        free(tmp);
        free(dir);
        return fail(eb, ebn, SLUICE_ENOMEM, "out of memory writing snapshot %s", path);
    }
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp.XXXXXX", 12);
    int rc = SLUICE_OK;
    int fd = mkstemp(tmp); /* mode 0600: the file holds the hash seed */
    if (fd < 0) {
        rc = sys_fail(sys_errno, errno, eb, ebn, "cannot create a temporary file in", dir);
        goto out;
    }
    size_t off = 0;
    while (off < w->len) {
        ssize_t k = write(fd, w->p + off, w->len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rc = sys_fail(sys_errno, k < 0 ? errno : EIO, eb, ebn, "cannot write", tmp);
            break;
        }
        off += (size_t)k;
    }
    if (rc == SLUICE_OK && fsync(fd) != 0)
        rc = sys_fail(sys_errno, errno, eb, ebn, "cannot sync", tmp);
    if (close(fd) != 0 && rc == SLUICE_OK)
        rc = sys_fail(sys_errno, errno, eb, ebn, "cannot close", tmp);
    if (rc == SLUICE_OK && rename(tmp, path) != 0)
        rc = sys_fail(sys_errno, errno, eb, ebn, "cannot rename the temporary file to", path);
    if (rc != SLUICE_OK) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        goto out;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0) rc = sys_fail(sys_errno, errno, eb, ebn, "cannot sync directory", dir);
        close(dfd);
    }
out:
    free(tmp);
    free(dir);
    return rc;
}

/*
 * Consistency: each shard is copied under its own lock, one after another, so the file is
 * consistent per key (and per shard), not a global instant: decisions running meanwhile
 * land in the snapshot or not depending on their shard. Registration is held off.
 */
int sluice_store_snapshot_ex(sluice_store *st, const char *path, sluice_time now,
                             int *sys_errno, char *errbuf, size_t errbuf_len) {
    if (sys_errno != NULL) *sys_errno = 0;
    if (errbuf != NULL && errbuf_len > 0) errbuf[0] = '\0';
    if (st == NULL || path == NULL)
        return fail(errbuf, errbuf_len, SLUICE_EINVAL, "no store or no path");
    sl_ovr_wbuf w = {0};
    pthread_mutex_lock(&st->reg_lock);
    sl_ovr_wput(&w, SNAP_MAGIC, 8);
    sl_ovr_wu(&w, SNAP_VERSION, 4);
    sl_ovr_wu(&w, 0, 4);
    sl_ovr_wu(&w, 0, 8); /* file_len, written last */
    uint8_t seed[16];
    sl_hash_key_to_bytes(&st->seed, seed);
    sl_ovr_wput(&w, seed, 16);
    sl_ovr_wu(&w, (uint64_t)now.mono_ns, 8);
    sl_ovr_wu(&w, (uint64_t)now.wall_ns, 8);
    sl_ovr_wu(&w, st->nfams, 4);
    sl_ovr_wu(&w, 0, 4);
    size_t count_at = w.len;
    sl_ovr_wu(&w, 0, 8);
    sl_ovr_wu(&w, 0, 8);
    for (unsigned i = 1; i <= st->nfams; i++) {
        sl_family *f = sl_store_family(st, (uint16_t)i);
        if (f != NULL) put_limit(&w, f, &sl_family_cur(f)->lim);
    }
    uint64_t n = 0;
    int64_t to_wall = now.wall_ns - now.mono_ns;
    uint32_t stamp = sl_stamp(now.mono_ns);
    union {
        int64_t align;
        unsigned char b[MAX_STATE];
    } tmp;
    for (unsigned ti = 0; ti < st->ntables && !w.oom; ti++) {
        sl_table *t = st->tables[ti];
        for (uint32_t s = 0; s < t->nshards; s++) {
            sl_shard_lock(&t->shards[s]);
            unsigned char *base = t->slots + (size_t)s * t->shard_stride;
            uint64_t ns = t->nslots >> atomic_load_explicit(&t->shift[s], memory_order_relaxed);
            for (uint64_t i = 0; i < ns; i++) {
                sl_ehdr *e = (sl_ehdr *)(base + i * t->esize);
                sl_family *f = e->fam != 0 ? sl_store_family(st, e->fam) : NULL;
                if (f == NULL) continue;
                const sl_limit *l = &sl_family_cur(f)->lim;
                memcpy(tmp.b, sl_entry_state(e), t->ssize);
                sl_algo_rebase(l, tmp.b, to_wall);
                sl_ovr_wu(&w, (uint32_t)(e->fam - 1), 4);
                sl_ovr_wu(&w, e->k1, 4);
                sl_ovr_wu(&w, e->k0, 8);
                sl_ovr_wu(&w, (stamp - (e->meta >> 9)) & SL_STAMP_MASK, 4);
                sl_ovr_wu(&w, e->meta & (SL_META_USES | SL_META_LIMITED), 4);
                sl_ovr_wput(&w, tmp.b, t->ssize);
                n++;
            }
            sl_shard_unlock(&t->shards[s]);
        }
    }
    /* the overrides section (flag 1): u64 its length, then sl_ovr_encode's bytes */
    if (!w.oom && sl_ovr_count(st->ovr) + sl_ovr_slots(st->ovr) > 0) {
        sl_ovr_wbuf ow = {0};
        sl_ovr_encode(st->ovr, &ow);
        if (ow.oom) w.oom = true;
        sl_ovr_wu(&w, ow.len, 8);
        sl_ovr_wput(&w, ow.p, ow.len);
        free(ow.p);
        if (!w.oom) w.p[12] = 1;
    }
    pthread_mutex_unlock(&st->reg_lock);
    if (w.oom) {
        free(w.p);
        return fail(errbuf, errbuf_len, SLUICE_ENOMEM, "out of memory building snapshot %s", path);
    }
    for (int i = 0; i < 8; i++) w.p[count_at + (size_t)i] = (unsigned char)(n >> (8 * i));
    uint64_t total = w.len + TRAILER;
    for (int i = 0; i < 8; i++) w.p[FILE_LEN_AT + (size_t)i] = (unsigned char)(total >> (8 * i));
    sl_hash128 h = sl_siphash128(&checksum_key, w.p, w.len, 2, 4);
    sl_ovr_wu(&w, h.lo, 8);
    sl_ovr_wu(&w, h.hi, 8);
    int rc = w.oom ? fail(errbuf, errbuf_len, SLUICE_ENOMEM, "out of memory building snapshot %s",
                          path)
                   : write_atomically(path, &w, sys_errno, errbuf, errbuf_len);
    free(w.p);
    return rc;
}

int sluice_store_snapshot(sluice_store *st, const char *path, sluice_time now) {
    return sluice_store_snapshot_ex(st, path, now, NULL, NULL, 0);
}

/* ---- restore ------------------------------------------------------------------------ */

typedef struct file_lim {
    char name[256];
    size_t name_len;
    uint32_t index;
    sl_limit lim;   /* as saved, re-derived through sl_limit_init */
    char tz[128];
    sl_family *fam; /* registered family, or NULL (entries skipped) */
    bool carry;     /* registered with other parameters: carry each state over */
    uint32_t file_state_size; /* bytes of each entry's state in the file: lim.state_size, or
                                 ADAPT_GROWN fewer for an adaptive state written before
                                 issue 27 (grow_adapt) */
} file_lim;

/* The adaptive controller's state grew by fast_sum_ns, fast_ok and pad (issue 27), at its
 * end: a state written before reads with them 0 (no fast sample in the open window). */
#define ADAPT_AT (offsetof(sl_aconc_state, ad) + offsetof(sl_adapt_state, fast_sum_ns))
#define ADAPT_GROWN (sizeof(sl_adapt_state) - offsetof(sl_adapt_state, fast_sum_ns))

static void grow_adapt(const file_lim *f, unsigned char *b) {
    if (f->file_state_size == f->lim.state_size) return;
    memmove(b + ADAPT_AT + ADAPT_GROWN, b + ADAPT_AT, f->file_state_size - ADAPT_AT);
    memset(b + ADAPT_AT, 0, ADAPT_GROWN);
}

/* Rebuilds the saved limit through sl_limit_init (or sl_gcra_cell_init) and checks it
 * matches what the file says (so a state size or derived value that does not belong to
 * its algorithm is corruption, not something to feed to the algorithm). */
static int parse_limit(rbuf *r, file_lim *fl, uint32_t version, char *eb, size_t ebn,
                       uint32_t li) {
    fl->name_len = get_u(r, 2);
    const unsigned char *name = get_bytes(r, fl->name_len);
    if (r->bad) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in limiter %u", li);
    if (fl->name_len == 0 || fl->name_len > 255)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: bad name length", li);
    memcpy(fl->name, name, fl->name_len);
    fl->name[fl->name_len] = '\0';
    if (strlen(fl->name) != fl->name_len)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: NUL in name", li);
    fl->index = (uint32_t)get_u(r, 4);
    sl_limit want;
    memset(&want, 0, sizeof(want));
    want.algo = (sluice_algo)get_u(r, 4);
    want.state_size = (uint32_t)get_u(r, 4);
    want.quota_period = (sluice_period)get_u(r, 4);
    want.limit = get_u(r, 8);
    want.capacity = get_u(r, 8);
    want.period_ns = (int64_t)get_u(r, 8);
    want.max_delay_ns = (int64_t)get_u(r, 8);
    want.lease_ns = (int64_t)get_u(r, 8);
    want.emission_ns = (int64_t)get_u(r, 8);
    size_t tzl = get_u(r, 2);
    const unsigned char *tz = get_bytes(r, tzl);
    uint32_t lflags = version >= 2 ? (uint32_t)get_u(r, 4) : 0;
    if (r->bad) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in limiter %u", li);
    if (tzl >= sizeof(fl->tz))
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: bad time zone", li);
    if (lflags > 3)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: unknown flags %u", li, lflags);
    sl_cap cap;
    bool has_cap = (lflags & 2) != 0;
    if (has_cap) {
        uint64_t cw[SL_CAP_WORDS];
        size_t n = get_u(r, 4);
        if (n != SL_CAP_WORDS) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: bad capacity parameters", li);
        for (size_t i = 0; i < n; i++) cw[i] = get_u(r, 8);
        if (r->bad) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in limiter %u", li);
        if (sl_cap_decode(cw, n, &cap) != SLUICE_OK)
            return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: bad capacity parameters", li);
    }
    memcpy(fl->tz, tz, tzl);
    fl->tz[tzl] = '\0';
    if (sluice_algo_name(want.algo) == NULL && !(want.algo == SL_ALGO_PENALTY && has_cap))
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %s: unknown algorithm %u",
                    fl->name, (unsigned)want.algo);
    want.cell = lflags & 1;
    char why[160] = "";
    if (want.cell) {
        /* CL.THROTTLE mode: rebuilt from (max_burst, count, period in s) */
        if (want.algo != SLUICE_GCRA || want.capacity == 0 || want.capacity > INT64_MAX ||
            want.limit > INT64_MAX || want.period_ns % SLUICE_NS_PER_S != 0 ||
            sl_gcra_cell_init(&fl->lim, (int64_t)want.capacity - 1, (int64_t)want.limit,
                              want.period_ns / SLUICE_NS_PER_S, why, sizeof(why)) != SLUICE_OK)
            return fail(eb, ebn, SLUICE_ECORRUPT,
                        "snapshot limiter %s: invalid CL.THROTTLE parameters (%s)", fl->name, why);
    } else {
        sluice_limit_spec spec;
        memset(&spec, 0, sizeof(spec));
        spec.algo = want.algo;
        spec.name = fl->name;
        spec.index = fl->index;
        spec.limit = want.limit;
        spec.period_ns = want.period_ns;
        spec.burst = want.capacity != want.limit ? want.capacity : 0;
        spec.max_delay_ns = want.max_delay_ns;
        spec.lease_ns = want.lease_ns;
        spec.quota_period = want.quota_period;
        spec.tz = tzl ? fl->tz : NULL;
        const sl_tz *z = NULL;
        if (tzl && want.algo == SLUICE_QUOTA) {
            int e = 0;
            z = sl_tz_get(fl->tz, &e);
            if (z == NULL)
                return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %s: time zone %s unknown",
                            fl->name, fl->tz);
        }
        if (sl_limit_init(&fl->lim, &spec, z, why, sizeof(why)) != SLUICE_OK ||
            (has_cap && sl_cap_init(&fl->lim, &spec, &cap, why, sizeof(why)) != SLUICE_OK))
            return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %s: invalid parameters (%s)",
                        fl->name, why);
    }
    want.tz = fl->lim.tz;
    want.cap = fl->lim.cap; /* rebuilt and checked by sl_cap_init from what the file says */
    fl->file_state_size = want.state_size;
    if (want.algo == SLUICE_ADAPTIVE_CONCURRENCY && want.state_size >= ADAPT_AT &&
        (size_t)want.state_size + ADAPT_GROWN == fl->lim.state_size)
        want.state_size = fl->lim.state_size; /* written before issue 27: grow_adapt */
    if (!sl_limit_same(&fl->lim, &want))
        return fail(eb, ebn, SLUICE_ECORRUPT,
                    "snapshot limiter %s: parameters inconsistent (state size %u for %s)",
                    fl->name, want.state_size, sluice_algo_name(want.algo));
    return SLUICE_OK;
}

static void wipe(sluice_store *st) {
    for (unsigned ti = 0; ti < st->ntables; ti++) {
        sl_table *t = st->tables[ti];
        /* the used part of each shard only: the rest is zero, and clearing it would
         * fault in the table's full size */
        for (uint32_t s = 0; s < t->nshards; s++) {
            uint64_t ns = t->nslots >> atomic_load_explicit(&t->shift[s], memory_order_relaxed);
            memset(t->slots + (size_t)s * t->shard_stride, 0, (size_t)ns * t->esize);
            t->shards[s].count = 0;
        }
    }
    for (unsigned i = 1; i <= st->nfams; i++) {
        sl_family *f = sl_store_family(st, (uint16_t)i);
        if (f != NULL) atomic_store(&f->keys, 0);
    }
    atomic_store(&st->active_fams, 0);
    atomic_store(&st->keys, 0);
}

static int64_t sat64(__int128 v) {
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

/*
 * The first checks, each with its own message: what a damaged file looks like from the
 * outside (empty, foreign, from a newer sluice, truncated, appended to, bit errors).
 * Returns SLUICE_OK with *version and *hlen set, or SLUICE_ECORRUPT.
 */
static int check_envelope(const uint8_t *buf, size_t len, uint32_t *version, size_t *hlen,
                          char *eb, size_t ebn) {
    if (len == 0) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot is empty (0 bytes)");
    if (len < 8 || memcmp(buf, SNAP_MAGIC, 8) != 0)
        return fail(eb, ebn, SLUICE_ECORRUPT,
                    "not a sluice snapshot (no SLUICEST signature in its first 8 bytes; %zu bytes)",
                    len);
    if (len < 12)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in its header: %zu bytes", len);
    rbuf r = {buf, len, 8, false};
    *version = (uint32_t)get_u(&r, 4);
    if (*version > SNAP_VERSION)
        return fail(eb, ebn, SLUICE_ECORRUPT,
                    "snapshot format version %u is newer than this sluice reads (1 to %u)",
                    *version, SNAP_VERSION);
    if (*version == 0)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot format version 0 does not exist");
    *hlen = *version == 1 ? HEADER_V1 : HEADER_V2;
    if (len < *hlen + TRAILER)
        return fail(eb, ebn, SLUICE_ECORRUPT,
                    "snapshot truncated: %zu bytes, less than its header and checksum (%zu)",
                    len, (size_t)(*hlen + TRAILER));
    if (*version >= 2) {
        rbuf fr = {buf, len, FILE_LEN_AT, false};
        uint64_t want = get_u(&fr, 8);
        if (want > len)
            return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated: %zu of %llu bytes", len,
                        (unsigned long long)want);
        if (want < len)
            return fail(eb, ebn, SLUICE_ECORRUPT,
                        "snapshot has %zu bytes, %llu more than it was written with", len,
                        (unsigned long long)(len - want));
    }
    sl_hash128 h = sl_siphash128(&checksum_key, buf, len - TRAILER, 2, 4);
    rbuf tr = {buf + len - TRAILER, TRAILER, 0, false};
    uint64_t lo = get_u(&tr, 8), hi = get_u(&tr, 8);
    if (lo != h.lo || hi != h.hi)
        return fail(eb, ebn, SLUICE_ECORRUPT,
                    *version >= 2 ? "snapshot checksum mismatch: the file is damaged (%zu bytes, "
                                    "format %u)"
                                  : "snapshot checksum mismatch: the file is damaged or "
                                    "truncated (%zu bytes, format %u)",
                    len, *version);
    return SLUICE_OK;
}

/*
 * Call before the store serves decisions (the seed is replaced by the file's).
 * All or nothing: the whole buffer is validated (envelope, counts, every limiter, every
 * entry's size) before the store is touched; then entries are inserted with every shard
 * locked, and if one does not fit (capacity, or a duplicate) the store is wiped back to
 * the empty state it had.
 */
int sl_store_restore_buf(sluice_store *st, const uint8_t *buf, size_t len, sluice_time now,
                         uint64_t *skipped, char *eb, size_t ebn) {
    if (skipped != NULL) *skipped = 0;
    if (eb != NULL && ebn > 0) eb[0] = '\0';
    if (st == NULL || (buf == NULL && len > 0)) return SLUICE_EINVAL;
    uint32_t version = 0;
    size_t hlen = 0;
    int rc = check_envelope(buf, len, &version, &hlen, eb, ebn);
    if (rc != SLUICE_OK) return rc;
    rbuf r = {buf, len - TRAILER, 12, false};
    uint32_t hflags = (uint32_t)get_u(&r, 4);
    if (hflags > 1 || (hflags == 1 && version < 2))
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot: unknown flags");
    if (version >= 2) (void)get_u(&r, 8); /* file_len, checked */
    const unsigned char *seed = get_bytes(&r, 16);
    int64_t save_mono = (int64_t)get_u(&r, 8);
    int64_t save_wall = (int64_t)get_u(&r, 8);
    (void)save_mono; /* informational: the restoring host's monotonic clock is another */
    uint32_t nlim = (uint32_t)get_u(&r, 4);
    (void)get_u(&r, 4);
    uint64_t nent = get_u(&r, 8);
    if (version >= 2) (void)get_u(&r, 8);
    if (r.bad || r.off != hlen)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in header");
    if (nlim > SL_STORE_MAX_FAMILIES)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot: %u limiters is too many", nlim);
    /* each limiter takes at least 69 bytes, each entry at least 32 */
    if ((uint64_t)nlim * 69 > r.len - r.off || nent > (r.len - r.off) / 32)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot counts exceed its size");
    if (atomic_load(&st->keys) != 0)
        return fail(eb, ebn, SLUICE_EINVAL, "restore needs an empty store");

    file_lim *fl = calloc(nlim ? nlim : 1, sizeof(*fl));
    if (fl == NULL) return SLUICE_ENOMEM;
    for (uint32_t i = 0; i < nlim && rc == SLUICE_OK; i++)
        rc = parse_limit(&r, &fl[i], version, eb, ebn, i);
    if (rc != SLUICE_OK) goto out;
    size_t entries_at = r.off;
    for (uint64_t i = 0; i < nent; i++) {
        uint32_t li = (uint32_t)get_u(&r, 4);
        if (r.bad || li >= nlim) {
            rc = fail(eb, ebn, SLUICE_ECORRUPT, "snapshot entry %llu: %s", (unsigned long long)i,
                      r.bad ? "truncated" : "names no limiter");
            goto out;
        }
        get_bytes(&r, ENTRY_HDR - 4 + fl[li].file_state_size);
        if (r.bad) {
            rc = fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in entry %llu",
                      (unsigned long long)i);
            goto out;
        }
    }
    const unsigned char *ovr_at = NULL;
    size_t ovr_len = 0;
    if (hflags & 1) { /* the overrides section: validated whole before anything loads */
        uint64_t sl = get_u(&r, 8);
        if (r.bad || sl > r.len - r.off) {
            rc = fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in its overrides section");
            goto out;
        }
        ovr_at = get_bytes(&r, (size_t)sl);
        ovr_len = (size_t)sl;
        rc = sl_ovr_decode(NULL, ovr_at, ovr_len, eb, ebn);
        if (rc != SLUICE_OK) goto out;
        if (sl_ovr_count(st->ovr) + sl_ovr_slots(st->ovr) != 0) {
            rc = fail(eb, ebn, SLUICE_EINVAL, "restore needs an empty store (overrides are set)");
            goto out;
        }
    }
    if (r.off != r.len) {
        rc = fail(eb, ebn, SLUICE_ECORRUPT, "snapshot has %zu bytes after its last entry",
                  r.len - r.off);
        goto out;
    }

    /* the file is sound: now match its limiters with the registered ones */
    pthread_mutex_lock(&st->reg_lock);
    uint64_t skip = 0;
    for (uint32_t i = 0; i < nlim; i++) {
        fl[i].fam = sl_store_family_by_name(st, fl[i].name, fl[i].name_len, fl[i].index);
        if (fl[i].fam != NULL) fl[i].carry = !sl_limit_same(&fl[i].lim, &sl_family_cur(fl[i].fam)->lim);
    }
    sl_hash_key k = sl_hash_key_from_bytes(seed);
    sl_store_reseed(st, &k);
    sl_store_lock_all(st);
    r.off = entries_at;
    /* saved = mono + (save_wall - save_mono); restored = saved - save_wall + now.mono -
     * elapsed, with elapsed = now.wall - save_wall taken as 0 when negative (top). */
    __int128 elapsed = (__int128)now.wall_ns - save_wall;
    if (elapsed < 0) elapsed = 0;
    int64_t to_mono = sat64((__int128)now.mono_ns - elapsed - save_wall);
    __int128 el_units = elapsed >> SL_STAMP_SHIFT;
    uint32_t age_add = el_units > SL_STAMP_MASK ? SL_STAMP_MASK : (uint32_t)el_units;
    union {
        int64_t align;
        unsigned char b[MAX_STATE];
    } s1, s2;
    for (uint64_t i = 0; i < nent && rc == SLUICE_OK; i++) {
        uint32_t li = (uint32_t)get_u(&r, 4);
        uint32_t k1 = (uint32_t)get_u(&r, 4);
        uint64_t k0 = get_u(&r, 8);
        uint32_t age, hints;
        if (version == 1) {
            age = (uint32_t)get_u(&r, 2) << 8; /* 2^32 ns units to 2^24 */
            get_bytes(&r, 6);
            hints = SL_META_USES; /* unknown: kept as a key used more than once */
        } else {
            age = (uint32_t)get_u(&r, 4);
            hints = (uint32_t)get_u(&r, 4);
        }
        age = age > SL_STAMP_MASK - age_add ? SL_STAMP_MASK : age + age_add;
        const file_lim *f = &fl[li];
        memcpy(s1.b, get_bytes(&r, f->file_state_size), f->file_state_size);
        grow_adapt(f, s1.b);
        if (f->fam == NULL) {
            skip++;
            continue;
        }
        sl_algo_rebase(&f->lim, s1.b, to_mono);
        sl_lver *v = sl_family_cur(f->fam);
        const unsigned char *state = s1.b;
        if (f->carry) {
            sl_algo_carry(&f->lim, s1.b, &v->lim, s2.b, now);
            state = s2.b;
        }
        if (sl_algo_fresh_at(&v->lim, state, now) <= now.mono_ns) continue; /* nothing to keep */
        uint32_t meta = sl_entry_meta(&v->lim, state, now, age, hints);
        if (!sl_table_insert_raw(st, v->table, k0, (uint16_t)k1, f->fam->id, meta, state)) {
            rc = fail(eb, ebn, SLUICE_EFULL,
                      "snapshot entry %llu does not fit (store capacity or duplicate key); "
                      "nothing loaded",
                      (unsigned long long)i);
            wipe(st);
        }
    }
    if (rc == SLUICE_OK && atomic_load(&st->keys) > st->max_keys) {
        rc = fail(eb, ebn, SLUICE_EFULL,
                  "snapshot holds more keys than max_keys %llu; nothing loaded",
                  (unsigned long long)st->max_keys);
        wipe(st);
    }
    if (rc == SLUICE_OK && ovr_at != NULL) {
        rc = sl_ovr_decode(st->ovr, ovr_at, ovr_len, eb, ebn);
        if (rc != SLUICE_OK) {
            sl_ovr_clear(st->ovr);
            wipe(st);
        }
    }
    if (rc == SLUICE_OK) {
        for (unsigned ti = 0; ti < st->ntables; ti++)
            for (uint32_t s = 0; s < st->tables[ti]->nshards; s++)
                st->tables[ti]->shards[s].last_now = now;
        if (skipped != NULL) *skipped = skip;
    }
    sl_store_unlock_all(st);
    pthread_mutex_unlock(&st->reg_lock);
out:
    free(fl);
    return rc;
}

void sl_snapshot_seal(uint8_t *buf, size_t len) {
    if (buf == NULL || len < TRAILER) return;
    /* a version 2 header also says how long the file is */
    if (len >= HEADER_V2 + TRAILER && memcmp(buf, SNAP_MAGIC, 8) == 0 && buf[8] == 2 &&
        buf[9] == 0 && buf[10] == 0 && buf[11] == 0)
        for (int i = 0; i < 8; i++)
            buf[FILE_LEN_AT + (size_t)i] = (uint8_t)((uint64_t)len >> (8 * i));
    sl_hash128 h = sl_siphash128(&checksum_key, buf, len - TRAILER, 2, 4);
    for (int i = 0; i < 8; i++) {
        buf[len - TRAILER + (size_t)i] = (uint8_t)(h.lo >> (8 * i));
        buf[len - TRAILER + 8 + (size_t)i] = (uint8_t)(h.hi >> (8 * i));
    }
}

int sluice_store_restore(sluice_store *st, const char *path, sluice_time now, uint64_t *skipped,
                         char *errbuf, size_t errbuf_len) {
    if (skipped != NULL) *skipped = 0;
    if (st == NULL || path == NULL) return SLUICE_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        fail(errbuf, errbuf_len, SLUICE_EIO, "cannot open snapshot %s: %s", path, strerror(e));
        errno = e;
        return e == ENOENT ? SLUICE_ENOTFOUND : SLUICE_EIO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX / 2) {
        int e = errno;
        close(fd);
        fail(errbuf, errbuf_len, SLUICE_EIO, "cannot read snapshot %s: %s", path, strerror(e));
        errno = e;
        return SLUICE_EIO;
    }
    if (!S_ISREG(sb.st_mode)) { /* a directory or a device: a setup error, not damage */
        close(fd);
        fail(errbuf, errbuf_len, SLUICE_EIO, "snapshot %s is not a regular file", path);
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        return SLUICE_EIO;
    }
    size_t len = (size_t)sb.st_size, off = 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        close(fd);
        return fail(errbuf, errbuf_len, SLUICE_ENOMEM, "out of memory reading snapshot %s", path);
    }
    int rerr = 0;
    while (off < len) {
        ssize_t k = read(fd, buf + off, len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rerr = errno;
        if (k <= 0) break;
        off += (size_t)k;
    }
    close(fd);
    if (rerr != 0) {
        free(buf);
        fail(errbuf, errbuf_len, SLUICE_EIO, "cannot read snapshot %s: %s", path, strerror(rerr));
        errno = rerr;
        return SLUICE_EIO;
    }
    int rc = sl_store_restore_buf(st, buf, off, now, skipped, errbuf, errbuf_len);
    free(buf);
    return rc;
}

/* ---- what a server needs around the file ------------------------------------------------- */

/*
 * Why not rename(2): it replaces an existing target silently, and a damaged file must
 * never overwrite an earlier damaged one (the operator may still be looking at it).
 * renameat2(RENAME_NOREPLACE) refuses with EEXIST instead; on file systems that do not
 * support the flag (EINVAL), link + unlink gives the same guarantee.
 */
int sluice_snapshot_move_aside(const char *path, int64_t unix_s, char *aside, size_t aside_len,
                               int *sys_errno) {
    if (sys_errno != NULL) *sys_errno = 0;
    if (path == NULL) return SLUICE_EINVAL;
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        int e = errno;
        if (sys_errno != NULL) *sys_errno = e;
        errno = e;
        return e == ENOENT ? SLUICE_ENOTFOUND : SLUICE_EIO;
    }
    size_t pl = strlen(path);
    char *to = malloc(pl + 48);
    if (to == NULL) return SLUICE_ENOMEM;
    int e = EEXIST;
    for (int n = 0; n < 1000 && e == EEXIST; n++) {
        if (n == 0) snprintf(to, pl + 48, "%s.damaged-%lld", path, (long long)unix_s);
        else snprintf(to, pl + 48, "%s.damaged-%lld.%d", path, (long long)unix_s, n);
        if (renameat2(AT_FDCWD, path, AT_FDCWD, to, RENAME_NOREPLACE) == 0) {
            e = 0;
        } else if (errno == EINVAL || errno == ENOSYS) {
            e = link(path, to) == 0 ? 0 : errno;
            if (e == 0 && unlink(path) != 0) {
                e = errno;
                unlink(to); /* keep the one name it had */
            }
        } else {
            e = errno;
        }
    }
    if (e == 0) {
        char *dir = dir_of(path);
        int dfd = dir != NULL ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
        if (aside != NULL && aside_len > 0) snprintf(aside, aside_len, "%s", to);
    } else if (sys_errno != NULL) {
        *sys_errno = e;
    }
    free(to);
    errno = e;
    return e == 0 ? SLUICE_OK : SLUICE_EIO;
}

int sluice_snapshot_check_dir(const char *path, int *sys_errno, char *errbuf, size_t errbuf_len) {
    if (sys_errno != NULL) *sys_errno = 0;
    if (errbuf != NULL && errbuf_len > 0) errbuf[0] = '\0';
    if (path == NULL || path[0] == '\0')
        return fail(errbuf, errbuf_len, SLUICE_EINVAL, "no snapshot path");
    char *dir = dir_of(path);
    if (dir == NULL) return SLUICE_ENOMEM;
    int rc = SLUICE_OK;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        rc = sys_fail(sys_errno, errno, errbuf, errbuf_len, "snapshot directory", dir);
    } else if (!S_ISDIR(sb.st_mode)) {
        rc = sys_fail(sys_errno, ENOTDIR, errbuf, errbuf_len, "snapshot directory", dir);
    } else {
        /* what a snapshot does, with one byte and a name of its own (mkstemp never
         * opens an existing file): create, write, sync, remove */
        size_t pl = strlen(path);
        char *probe = malloc(pl + 16);
        int fd = -1;
        if (probe == NULL) {
            rc = SLUICE_ENOMEM;
        } else {
            snprintf(probe, pl + 16, "%s.check.XXXXXX", path);
            fd = mkstemp(probe);
            if (fd < 0)
                rc = sys_fail(sys_errno, errno, errbuf, errbuf_len, "cannot create a file in", dir);
            else if ((errno = 0, write(fd, "x", 1)) != 1)
                rc = sys_fail(sys_errno, errno ? errno : EIO, errbuf, errbuf_len, "cannot write in",
                              dir);
            else if (fsync(fd) != 0)
                rc = sys_fail(sys_errno, errno, errbuf, errbuf_len, "cannot sync a file in", dir);
            if (fd >= 0) {
                close(fd);
                unlink(probe);
            }
            free(probe);
        }
    }
    free(dir);
    return rc;
}
