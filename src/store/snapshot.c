/*
 * snapshot.c -- the memory store to and from a file, so long windows and quotas survive
 * a restart. Format (all integers little-endian), version 1:
 *   header   "SLUICEST" u32 version u32 flags=0 seed[16] i64 mono_ns i64 wall_ns
 *            u32 nlim u32 0 u64 nentries                                  (64 bytes)
 *   limiter  u16 name_len name u32 index u32 algo u32 state_size u32 quota_period
 *            u64 limit u64 capacity i64 period_ns i64 max_delay_ns i64 lease_ns
 *            i64 emission_ns u16 tz_len tz                                (x nlim)
 *   entry    u32 lim u32 k1 u64 k0 u16 age u16 0 u32 0 state[state_size]  (x nentries)
 *   trailer  SipHash-2-4-128 under a fixed key of every byte before it (a checksum, not
 *            a MAC: the file holds the store's secret seed and is written 0600)
 * States are saved with their monotonic timestamps rebased onto the wall clock of the
 * save (sl_algo_rebase by wall - mono) and rebased back onto the restoring process's
 * monotonic clock, so remaining times continue across the restart.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tz.h"
#include "store/memory.h"

#define SNAP_MAGIC "SLUICEST"
#define SNAP_VERSION 1u
#define HEADER_LEN 64u
#define ENTRY_HDR 24u
#define TRAILER 16u
#define MAX_STATE (sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX)

static const sl_hash_key checksum_key = {UINT64_C(0x736c756963652d63), UINT64_C(0x6865636b73756d31)};

/* ---- encoding --------------------------------------------------------------------- */

typedef struct wbuf {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} wbuf;

static void put(wbuf *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n) cap *= 2;
        unsigned char *p = realloc(w->p, cap);
        if (p == NULL) {
            w->oom = true;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void put_u(wbuf *w, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

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

static void put_limit(wbuf *w, const sl_family *f, const sl_limit *l) {
    put_u(w, f->name_len, 2);
    put(w, f->name, f->name_len);
    put_u(w, f->index, 4);
    put_u(w, (uint32_t)l->algo, 4);
    put_u(w, l->state_size, 4);
    put_u(w, (uint32_t)l->quota_period, 4);
    put_u(w, l->limit, 8);
    put_u(w, l->capacity, 8);
    put_u(w, (uint64_t)l->period_ns, 8);
    put_u(w, (uint64_t)l->max_delay_ns, 8);
    put_u(w, (uint64_t)l->lease_ns, 8);
    put_u(w, (uint64_t)l->emission_ns, 8);
    const char *tz = l->tz != NULL ? sl_tz_name(l->tz) : "";
    size_t tzl = tz != NULL ? strnlen(tz, 127) : 0;
    put_u(w, tzl, 2);
    put(w, tz, tzl);
}

/* ---- snapshot ----------------------------------------------------------------------- */

/* Writes `w` to path via a temporary file in the same directory: fsync, rename, fsync
 * of the directory, so a crash leaves either the old snapshot or the new one. */
static int write_atomically(const char *path, const wbuf *w) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (tmp == NULL) return SLUICE_ENOMEM;
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp); /* mode 0600: the file holds the hash seed */
    if (fd < 0) {
        free(tmp);
        return SLUICE_EIO;
    }
    size_t off = 0;
    int rc = SLUICE_OK;
    while (off < w->len) {
        ssize_t k = write(fd, w->p + off, w->len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rc = SLUICE_EIO;
            break;
        }
        off += (size_t)k;
    }
    if (rc == SLUICE_OK && fsync(fd) != 0) rc = SLUICE_EIO;
    if (close(fd) != 0 && rc == SLUICE_OK) rc = SLUICE_EIO;
    if (rc == SLUICE_OK && rename(tmp, path) != 0) rc = SLUICE_EIO;
    if (rc != SLUICE_OK) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
    } else {
        char *dir = strdup(path);
        if (dir != NULL) {
            char *slash = strrchr(dir, '/');
            const char *d = ".";
            if (slash == dir) d = "/";
            else if (slash != NULL) *slash = '\0', d = dir;
            int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                if (fsync(dfd) != 0) rc = SLUICE_EIO;
                close(dfd);
            }
            free(dir);
        }
    }
    free(tmp);
    return rc;
}

/*
 * Consistency: each shard is copied under its own lock, one after another, so the file is
 * consistent per key (and per shard), not a global instant: decisions running meanwhile
 * land in the snapshot or not depending on their shard. Registration is held off.
 */
int sluice_store_snapshot(sluice_store *st, const char *path, sluice_time now) {
    if (st == NULL || path == NULL) return SLUICE_EINVAL;
    wbuf w = {0};
    pthread_mutex_lock(&st->reg_lock);
    put(&w, SNAP_MAGIC, 8);
    put_u(&w, SNAP_VERSION, 4);
    put_u(&w, 0, 4);
    uint8_t seed[16];
    sl_hash_key_to_bytes(&st->seed, seed);
    put(&w, seed, 16);
    put_u(&w, (uint64_t)now.mono_ns, 8);
    put_u(&w, (uint64_t)now.wall_ns, 8);
    put_u(&w, st->nfams, 4);
    put_u(&w, 0, 4);
    size_t count_at = w.len;
    put_u(&w, 0, 8);
    for (unsigned i = 1; i <= st->nfams; i++) {
        sl_family *f = sl_store_family(st, (uint16_t)i);
        if (f != NULL) put_limit(&w, f, &sl_family_cur(f)->lim);
    }
    uint64_t n = 0;
    int64_t to_wall = now.wall_ns - now.mono_ns;
    uint16_t stamp = SL_TOUCH(now);
    union {
        int64_t align;
        unsigned char b[MAX_STATE];
    } tmp;
    for (unsigned ti = 0; ti < st->ntables && !w.oom; ti++) {
        sl_table *t = st->tables[ti];
        for (uint32_t s = 0; s < t->nshards; s++) {
            sl_shard_lock(&t->shards[s]);
            unsigned char *base = t->slots + (size_t)s * t->nslots * t->esize;
            for (uint64_t i = 0; i < t->nslots; i++) {
                sl_ehdr *e = (sl_ehdr *)(base + i * t->esize);
                sl_family *f = e->fam != 0 ? sl_store_family(st, e->fam) : NULL;
                if (f == NULL) continue;
                const sl_limit *l = &sl_family_cur(f)->lim;
                memcpy(tmp.b, sl_entry_state(e), t->ssize);
                sl_algo_rebase(l, tmp.b, to_wall);
                put_u(&w, (uint32_t)(e->fam - 1), 4);
                put_u(&w, e->k1, 4);
                put_u(&w, e->k0, 8);
                put_u(&w, (uint16_t)(stamp - e->touch), 2);
                put_u(&w, 0, 2);
                put_u(&w, 0, 4);
                put(&w, tmp.b, t->ssize);
                n++;
            }
            sl_shard_unlock(&t->shards[s]);
        }
    }
    pthread_mutex_unlock(&st->reg_lock);
    if (w.oom) {
        free(w.p);
        return SLUICE_ENOMEM;
    }
    for (int i = 0; i < 8; i++) w.p[count_at + (size_t)i] = (unsigned char)(n >> (8 * i));
    sl_hash128 h = sl_siphash128(&checksum_key, w.p, w.len, 2, 4);
    put_u(&w, h.lo, 8);
    put_u(&w, h.hi, 8);
    int rc = w.oom ? SLUICE_ENOMEM : write_atomically(path, &w);
    free(w.p);
    return rc;
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
} file_lim;

/* Rebuilds the saved limit through sl_limit_init and checks it matches what the file
 * says (so a state size or derived value that does not belong to its algorithm is
 * corruption, not something to feed to the algorithm). */
static int parse_limit(rbuf *r, file_lim *fl, char *eb, size_t ebn, uint32_t li) {
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
    if (r->bad) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in limiter %u", li);
    if (tzl >= sizeof(fl->tz))
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %u: bad time zone", li);
    memcpy(fl->tz, tz, tzl);
    fl->tz[tzl] = '\0';
    if (sluice_algo_name(want.algo) == NULL)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %s: unknown algorithm %u",
                    fl->name, (unsigned)want.algo);
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
    char why[160] = "";
    if (sl_limit_init(&fl->lim, &spec, z, why, sizeof(why)) != SLUICE_OK)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot limiter %s: invalid parameters (%s)",
                    fl->name, why);
    want.tz = fl->lim.tz;
    if (!sl_limit_same(&fl->lim, &want))
        return fail(eb, ebn, SLUICE_ECORRUPT,
                    "snapshot limiter %s: parameters inconsistent (state size %u for %s)",
                    fl->name, want.state_size, sluice_algo_name(want.algo));
    return SLUICE_OK;
}

static void wipe(sluice_store *st) {
    for (unsigned ti = 0; ti < st->ntables; ti++) {
        sl_table *t = st->tables[ti];
        memset(t->slots, 0, t->slots_bytes);
        for (uint32_t s = 0; s < t->nshards; s++) t->shards[s].count = 0;
    }
    atomic_store(&st->keys, 0);
}

/*
 * Call before the store serves decisions (the seed is replaced by the file's).
 * All or nothing: the whole buffer is validated (checksum, counts, every limiter, every
 * entry's size) before the store is touched; then entries are inserted with every shard
 * locked, and if one does not fit (capacity, or a duplicate) the store is wiped back to
 * the empty state it had.
 */
int sl_store_restore_buf(sluice_store *st, const uint8_t *buf, size_t len, sluice_time now,
                         uint64_t *skipped, char *eb, size_t ebn) {
    if (skipped != NULL) *skipped = 0;
    if (eb != NULL && ebn > 0) eb[0] = '\0';
    if (st == NULL || (buf == NULL && len > 0)) return SLUICE_EINVAL;
    if (len < HEADER_LEN + TRAILER)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated: %zu bytes", len);
    if (memcmp(buf, SNAP_MAGIC, 8) != 0)
        return fail(eb, ebn, SLUICE_ECORRUPT, "not a sluice snapshot (bad magic)");
    rbuf r = {buf, len - TRAILER, 8, false};
    uint32_t version = (uint32_t)get_u(&r, 4);
    if (version != SNAP_VERSION)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot version %u not supported (want %u)",
                    version, SNAP_VERSION);
    sl_hash128 h = sl_siphash128(&checksum_key, buf, len - TRAILER, 2, 4);
    rbuf tr = {buf + len - TRAILER, TRAILER, 0, false};
    uint64_t lo = get_u(&tr, 8), hi = get_u(&tr, 8);
    if (lo != h.lo || hi != h.hi)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot checksum mismatch (corrupt or truncated)");
    if (get_u(&r, 4) != 0) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot: unknown flags");
    const unsigned char *seed = get_bytes(&r, 16);
    (void)get_u(&r, 8); /* mono and wall time of the save: informational */
    (void)get_u(&r, 8);
    uint32_t nlim = (uint32_t)get_u(&r, 4);
    (void)get_u(&r, 4);
    uint64_t nent = get_u(&r, 8);
    if (r.bad) return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in header");
    if (nlim > SL_STORE_MAX_FAMILIES)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot: %u limiters is too many", nlim);
    /* each limiter takes at least 63 bytes, each entry at least 32 */
    if ((uint64_t)nlim * 63 > r.len - r.off || nent > (r.len - r.off) / 32)
        return fail(eb, ebn, SLUICE_ECORRUPT, "snapshot counts exceed its size");
    if (atomic_load(&st->keys) != 0)
        return fail(eb, ebn, SLUICE_EINVAL, "restore needs an empty store");

    file_lim *fl = calloc(nlim ? nlim : 1, sizeof(*fl));
    if (fl == NULL) return SLUICE_ENOMEM;
    int rc = SLUICE_OK;
    for (uint32_t i = 0; i < nlim && rc == SLUICE_OK; i++) rc = parse_limit(&r, &fl[i], eb, ebn, i);
    if (rc != SLUICE_OK) goto out;
    size_t entries_at = r.off;
    for (uint64_t i = 0; i < nent; i++) {
        uint32_t li = (uint32_t)get_u(&r, 4);
        if (r.bad || li >= nlim) {
            rc = fail(eb, ebn, SLUICE_ECORRUPT, "snapshot entry %llu: %s", (unsigned long long)i,
                      r.bad ? "truncated" : "names no limiter");
            goto out;
        }
        get_bytes(&r, ENTRY_HDR - 4 + fl[li].lim.state_size);
        if (r.bad) {
            rc = fail(eb, ebn, SLUICE_ECORRUPT, "snapshot truncated in entry %llu",
                      (unsigned long long)i);
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
    int64_t to_mono = now.mono_ns - now.wall_ns;
    uint16_t stamp = SL_TOUCH(now);
    union {
        int64_t align;
        unsigned char b[MAX_STATE];
    } s1, s2;
    for (uint64_t i = 0; i < nent && rc == SLUICE_OK; i++) {
        uint32_t li = (uint32_t)get_u(&r, 4);
        uint32_t k1 = (uint32_t)get_u(&r, 4);
        uint64_t k0 = get_u(&r, 8);
        uint16_t age = (uint16_t)get_u(&r, 2);
        get_bytes(&r, 6);
        const file_lim *f = &fl[li];
        memcpy(s1.b, get_bytes(&r, f->lim.state_size), f->lim.state_size);
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
        if (!sl_table_insert_raw(st, v->table, k0, k1, f->fam->id, (uint16_t)(stamp - age), state)) {
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
        close(fd);
        return fail(errbuf, errbuf_len, SLUICE_EIO, "cannot read snapshot %s", path);
    }
    size_t len = (size_t)sb.st_size, off = 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        close(fd);
        return SLUICE_ENOMEM;
    }
    while (off < len) {
        ssize_t k = read(fd, buf + off, len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        off += (size_t)k;
    }
    close(fd);
    int rc = sl_store_restore_buf(st, buf, off, now, skipped, errbuf, errbuf_len);
    free(buf);
    return rc;
}
