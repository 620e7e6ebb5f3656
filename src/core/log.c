/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c -- the structured logger (see log.h). Callers format a line on their stack and copy
 * it into a bounded multi-producer ring (per-slot sequence numbers, one CAS to claim a slot,
 * never a lock, never a wait); one writer thread drains the ring into the destination in
 * batches. Invariants: a line is at most SL_LOG_LINE_MAX bytes and always ends in '\n'; a
 * JSON line is always one valid JSON object; nothing allocates after sl_log_create; every
 * line not written is counted in exactly one of dropped_full/dropped_rate/dropped_write or
 * decisions_rate_limited.
 */
#include "core/log.h"
#include "core/redact.h"
#include "core/tz.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/json.h"

#define NS_PER_S INT64_C(1000000000)
#define OUT_CAP (64 * 1024) /* the writer's batch buffer */
#define CHUNK_MAX 4096      /* one write to a pipe or socket: PIPE_BUF, atomic, whole lines */
#define RESERVE 24          /* room kept for the truncation mark and the line's end */

typedef struct sl_log_slot {
    _Atomic uint64_t seq; /* == position + 1: full; == position: free for that lap */
    uint32_t len;
    char line[SL_LOG_LINE_MAX];
} sl_log_slot;

/* A GCRA limiter shared by all threads (one CAS per admitted line). */
typedef struct gcra {
    _Atomic int64_t tat;
    _Atomic int64_t t_ns;   /* emission interval: 1 s / rate */
    _Atomic int64_t tau_ns; /* burst * t_ns */
} gcra;

typedef struct kind {
    _Atomic uint64_t h; /* hash of the name (never 0); 0: free */
    _Atomic int named;  /* name and settings below are published */
    char name[SL_LOG_EVENT_MAX + 1];
    char summary[64];
    _Atomic int count_only;
    _Atomic int level; /* count-only summaries */
    gcra lim;
    _Atomic uint64_t suppressed; /* since the last summary */
    _Atomic int last_level;
    _Atomic uint64_t counted; /* count-only occurrences since the last summary */
} kind;

struct sl_log {
    /* producers */
    _Atomic uint64_t tail __attribute__((aligned(64)));
    _Atomic int sleeping __attribute__((aligned(64)));
    _Atomic int level;
    int format;
    int journal; /* stderr is the journal: lines start with sd-daemon's <N> priority */
    sl_log_slot *ring;
    uint64_t mask;
    int efd;
    sl_hash_key hkey;
    int64_t (*mono_fn)(void *);
    int64_t (*wall_fn)(void *);
    void *clock_ud;
    uint32_t def_rate, def_burst;

    /* decision log */
    _Atomic int dec_on, dec_rej_only, raw_keys;
    _Atomic uint32_t dec_ppm;
    gcra dec_lim;

    kind kinds[SL_LOG_KINDS + 1]; /* the last one: names that found no free entry */

    /* counters */
    _Atomic uint64_t written __attribute__((aligned(64)));
    _Atomic uint64_t dropped_full, dropped_rate, dropped_write;
    _Atomic uint64_t dec_logged, dec_sampled_out, dec_rate_limited;
    _Atomic uint64_t reopens, reopen_errors;

    /* writer thread */
    pthread_t thread;
    int fd, own_fd, fd_is_reg;
    char *path;
    char *out;
    int64_t write_timeout_ns, summary_ns;
    uint64_t head;
    _Atomic int stop;
    _Atomic int reopen_flag;
    _Atomic uint64_t reopen_seq, reopen_done;
    _Atomic int reopen_result;
    _Atomic uint64_t flush_req, flush_ack;
    uint64_t last_full, last_dec_rate; /* counter values at the last summary */
};

static _Atomic(sl_log *) g_default;

/* ---- clocks ----------------------------------------------------------------------------- */

static int64_t sys_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t mono_now(const sl_log *l) {
    return l->mono_fn ? l->mono_fn(l->clock_ud) : sys_clock(CLOCK_MONOTONIC);
}

static int64_t wall_now(const sl_log *l) {
    return l->wall_fn ? l->wall_fn(l->clock_ud) : sys_clock(CLOCK_REALTIME);
}

void sl_log_time(int64_t wall_ns, char out[28]) {
    int64_t s = wall_ns / NS_PER_S, ns = wall_ns % NS_PER_S;
    if (ns < 0) ns += NS_PER_S, s--;
    int64_t days = s / 86400, sod = s % 86400;
    if (sod < 0) sod += 86400, days--;
    int64_t y;
    unsigned mo, d;
    sl_civil_from_days(days, &y, &mo, &d);
    if (y < 0) y = 0;
    if (y > 9999) y = 9999;
    /* digits by hand: no locale, no format parsing, every field fixed width */
    unsigned v[7] = {(unsigned)y, mo, d, (unsigned)(sod / 3600), (unsigned)(sod / 60 % 60),
                     (unsigned)(sod % 60), (unsigned)(ns / 1000)};
    static const unsigned width[7] = {4, 2, 2, 2, 2, 2, 6};
    static const char sep[7] = {'-', '-', 'T', ':', ':', '.', 'Z'};
    char *p = out;
    for (int i = 0; i < 7; i++) {
        for (unsigned k = width[i], x = v[i]; k > 0; k--, x /= 10) p[k - 1] = (char)('0' + x % 10);
        p += width[i];
        *p++ = sep[i];
    }
    *p = 0;
}

/* ---- bounded buffer and escaping ------------------------------------------------------ */

static void lb_put(sl_lbuf *b, const void *p, size_t n) {
    if (b->over || n > b->cap - b->len) {
        b->over = 1;
        return;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void lb_puts(sl_lbuf *b, const char *s) {
    lb_put(b, s, strlen(s));
}

static void lb_u64(sl_lbuf *b, uint64_t v) {
    char t[24];
    int i = 24;
    do t[--i] = (char)('0' + v % 10); while ((v /= 10) != 0);
    lb_put(b, t + i, (size_t)(24 - i));
}

static void lb_i64(sl_lbuf *b, int64_t v) {
    if (v < 0) {
        lb_put(b, "-", 1);
        lb_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        lb_u64(b, (uint64_t)v);
    }
}

/* Seconds from ns without floating point: 12500000 -> "0.0125", 2e9 -> "2". */
static void lb_seconds(sl_lbuf *b, int64_t ns) {
    uint64_t u = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0) lb_put(b, "-", 1);
    lb_u64(b, u / 1000000000u);
    uint64_t f = u % 1000000000u;
    if (f == 0) return;
    char t[10];
    t[0] = '.';
    for (int i = 9; i >= 1; i--, f /= 10) t[i] = (char)('0' + f % 10);
    int n = 10;
    while (t[n - 1] == '0') n--;
    lb_put(b, t, (size_t)n);
}

/* The escaper behind JSON strings and text messages (core/json.c's rules). quoted:
 * surrounding quotes and '"' escaped (JSON); otherwise a bare text (a message on a text
 * line: control bytes and '\\' still escaped so that one event stays one line). Stops at
 * a whole unit when the rest does not fit, keeping one byte for the closing quote. */
static void escape(sl_lbuf *b, const void *src, size_t n, int quoted) {
    const unsigned char *s = src;
    unsigned flags = quoted ? 0 : SL_JSON_BARE;
    size_t room_for_close = quoted ? 1 : 0;
    if (b->over) return;
    if (quoted) {
        if (b->cap - b->len < 2) { /* not even "" fits */
            b->over = 1;
            return;
        }
        b->p[b->len++] = '"';
    }
    size_t i = 0;
    while (i < n) {
        size_t run = sl_json_plain(s + i, n - i, flags); /* the common case: plain ASCII */
        if (run > 0) {
            size_t room = b->cap - b->len;
            if (run + room_for_close > room) {
                run = room > room_for_close ? room - room_for_close : 0;
                memcpy(b->p + b->len, s + i, run);
                b->len += run;
                goto full;
            }
            memcpy(b->p + b->len, s + i, run);
            b->len += run;
            i += run;
            continue;
        }
        char unit[SL_JSON_UNIT_MAX];
        size_t adv, ulen = sl_json_unit(s + i, n - i, flags, unit, &adv);
        if (ulen + room_for_close > b->cap - b->len) goto full;
        memcpy(b->p + b->len, unit, ulen);
        b->len += ulen;
        i += adv;
    }
    if (quoted) lb_put(b, "\"", 1);
    return;
full:
    if (quoted) b->p[b->len++] = '"';
    b->over = 1;
}


void sl_log_json_str(sl_lbuf *b, const void *s, size_t n) {
    escape(b, s, n, 1);
}

/* A text field value needs no quotes when it is a plain token. */
static int text_plain(const char *s, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("-._:/@+,%", c) != NULL) || c == 0)
            return 0;
    }
    return 1;
}

/* ---- line formatting --------------------------------------------------------------------- */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *sl_log_level_name(sl_log_level lvl) {
    return (unsigned)lvl <= SL_LOG_DEBUG ? level_names[lvl] : "info";
}

int sl_log_level_parse(const char *s, sl_log_level *out) {
    for (int i = 0; i <= SL_LOG_DEBUG; i++)
        if (s && strcmp(s, level_names[i]) == 0) return *out = (sl_log_level)i, 0;
    if (s && strcmp(s, "warning") == 0) return *out = SL_LOG_WARN, 0;
    return -1;
}

int sl_log_format_parse(const char *s, sl_log_format *out) {
    if (s && strcmp(s, "text") == 0) return *out = SL_LOG_TEXT, 0;
    if (s && strcmp(s, "json") == 0) return *out = SL_LOG_JSON, 0;
    return -1;
}

static void hash_hex(const sl_hash_key *k, const void *key, size_t len, char out[19]) {
    static const char hex[] = "0123456789abcdef";
    uint64_t v = sl_hash128_of(k, key, len).lo;
    out[0] = 'k', out[1] = ':';
    for (int i = 0; i < 16; i++) out[2 + i] = hex[(v >> (60 - 4 * i)) & 15];
    out[18] = 0;
}

void sl_log_key_hash(const sl_log *l, const void *key, size_t len, char out[19]) {
    hash_hex(&l->hkey, key, len, out);
}

static void put_value(const sl_log *l, sl_lbuf *b, const sl_log_field *f, int json) {
    switch (f->type) {
    case SL_LF_INT: lb_i64(b, f->v.i); return;
    case SL_LF_UINT: lb_u64(b, f->v.u); return;
    case SL_LF_BOOL: lb_puts(b, f->v.i ? "true" : "false"); return;
    case SL_LF_DUR:
        lb_seconds(b, f->v.i);
        if (!json) lb_put(b, "s", 1);
        return;
    case SL_LF_KEY:
        if (!atomic_load_explicit(&l->raw_keys, memory_order_relaxed)) {
            char h[19];
            hash_hex(&l->hkey, f->v.s ? f->v.s : "", f->v.s ? f->len : 0, h);
            if (json) lb_put(b, "\"", 1);
            lb_put(b, h, 18);
            if (json) lb_put(b, "\"", 1);
            return;
        }
        /* raw keys allowed: shown as a string */
        /* fall through */
    case SL_LF_STR:
    default: {
        const char *s = f->v.s ? f->v.s : "";
        size_t n = f->v.s ? (f->len == SIZE_MAX ? strlen(s) : f->len) : 0;
        if (!json && text_plain(s, n))
            lb_put(b, s, n);
        else
            escape(b, s, n, 1);
    }
    }
}

/* Formats one whole line into buf (SL_LOG_LINE_MAX bytes); returns its length. Fields that
 * do not fit are left out whole and the line says truncated. */
/* Why every line, whatever wrote it: a message or a field may echo a URL or a parameter
 * holding a password (a store address, a reload's error); the line is rewritten with it
 * redacted (sl_redact) before it is queued. Only lines with a '@' or a '=' are looked at. */
static size_t redact_line(char *buf, size_t len) {
    if (len == 0 || (memchr(buf, '@', len) == NULL && memchr(buf, '=', len) == NULL)) return len;
    char tmp[SL_LOG_LINE_MAX + 1];
    size_t body = buf[len - 1] == '\n' ? len - 1 : len;
    memcpy(tmp, buf, body);
    tmp[body] = '\0';
    if (sl_redact(tmp, SL_LOG_LINE_MAX) == 0) return len;
    size_t n = strlen(tmp);
    memcpy(buf, tmp, n);
    buf[n++] = '\n';
    return n;
}

static size_t format_line(const sl_log *l, char *buf, sl_log_level lvl, const char *event,
                          const char *msg, const sl_log_field *f, size_t n, int64_t wall_ns) {
    int json = l->format == SL_LOG_JSON;
    sl_lbuf b = {buf, 0, SL_LOG_LINE_MAX - RESERVE, 0};
    char ts[28];
    sl_log_time(wall_ns, ts);
    if (!event) event = "log";
    int truncated = 0;
    if (l->journal) {
        /* sd-daemon(3): journald strips "<N>" and stores N as PRIORITY (3 err, 4 warning,
         * 6 info, 7 debug), in both formats: a JSON line stays one JSON object after it */
        static const char pri[4] = {'3', '4', '6', '7'};
        char pfx[3] = {'<', pri[(unsigned)lvl <= SL_LOG_DEBUG ? lvl : SL_LOG_INFO], '>'};
        lb_put(&b, pfx, 3);
    }
    if (json) {
        lb_puts(&b, "{\"ts\":\"");
        lb_puts(&b, ts);
        lb_puts(&b, "\",\"level\":\"");
        lb_puts(&b, sl_log_level_name(lvl));
        lb_puts(&b, "\",\"event\":");
        escape(&b, event, strlen(event), 1);
        if (msg && !b.over) {
            lb_puts(&b, ",\"msg\":");
            escape(&b, msg, strlen(msg), 1);
        }
    } else {
        lb_puts(&b, ts);
        lb_put(&b, " ", 1);
        lb_puts(&b, sl_log_level_name(lvl));
        lb_put(&b, " ", 1);
        escape(&b, event, strlen(event), 0);
        if (msg && !b.over) {
            lb_put(&b, ": ", 2);
            escape(&b, msg, strlen(msg), 0);
        }
    }
    if (b.over) { /* the message itself was cut: keep what fits */
        b.over = 0;
        truncated = 1;
    }
    for (size_t i = 0; i < n && !truncated; i++) {
        size_t mark = b.len;
        const char *k = f[i].key ? f[i].key : "field";
        if (json) {
            lb_put(&b, ",", 1);
            escape(&b, k, strlen(k), 1);
            lb_put(&b, ":", 1);
        } else {
            lb_put(&b, " ", 1);
            escape(&b, k, strlen(k), 0);
            lb_put(&b, "=", 1);
        }
        put_value(l, &b, &f[i], json);
        if (b.over) {
            b.len = mark;
            b.over = 0;
            truncated = 1;
        }
    }
    b.cap = SL_LOG_LINE_MAX; /* the reserve is for what follows */
    if (truncated) lb_puts(&b, json ? ",\"truncated\":true" : " truncated=true");
    lb_puts(&b, json ? "}\n" : "\n");
    return redact_line(buf, b.len);
}

/* systemd.exec(5): JOURNAL_STREAM is "<device>:<inode>" of the stream the service's
 * stderr was connected to; it names this descriptor only when both match (a child whose
 * stderr was redirected elsewhere inherits the variable but not the stream). */
int sl_log_fd_is_journal(int fd) {
    const char *js = getenv("JOURNAL_STREAM");
    if (js == NULL || js[0] == '\0') return 0;
    char *end;
    unsigned long long dev = strtoull(js, &end, 10);
    if (end == js || *end != ':') return 0;
    const char *p = end + 1;
    unsigned long long ino = strtoull(p, &end, 10);
    if (end == p || *end != '\0') return 0;
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void sl_log_emit_once(sl_log_format fmt, sl_log_level lvl, const char *event, const char *msg) {
    static sl_log one; /* only format and journal are read by format_line (no key fields) */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    one.format = fmt;
    one.journal = sl_log_fd_is_journal(2);
    char line[SL_LOG_LINE_MAX];
    size_t len = format_line(&one, line, lvl, event, msg, NULL, 0, sys_clock(CLOCK_REALTIME));
    pthread_mutex_unlock(&mu);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(2, line + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
}

/* ---- the queue ---------------------------------------------------------------------------- */

static void wake(sl_log *l) {
    uint64_t one = 1;
    ssize_t r = write(l->efd, &one, sizeof(one)); /* async-signal-safe */
    (void)r;
}

/* Claims a slot (one CAS), copies the line, publishes it. A full ring drops the line: the
 * writer is behind (slow disk, blocked pipe) and the caller must not wait for it. */
static int enqueue(sl_log *l, const char *line, size_t len) {
    uint64_t pos = atomic_load_explicit(&l->tail, memory_order_relaxed);
    sl_log_slot *s;
    for (;;) {
        s = &l->ring[pos & l->mask];
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&l->tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed))
                break;
        } else if (dif < 0) {
            atomic_fetch_add_explicit(&l->dropped_full, 1, memory_order_relaxed);
            return -1;
        } else {
            pos = atomic_load_explicit(&l->tail, memory_order_relaxed);
        }
    }
    memcpy(s->line, line, len);
    s->len = (uint32_t)len;
    atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
    /* Pairs with the writer's store to `sleeping` then re-check of the ring: either it sees
     * this slot, or this thread sees it asleep and wakes it. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&l->sleeping, memory_order_relaxed) &&
        atomic_exchange_explicit(&l->sleeping, 0, memory_order_relaxed))
        wake(l);
    return 0;
}

/* ---- rate limits ---------------------------------------------------------------------------- */

static void gcra_set(gcra *g, uint32_t per_s, uint32_t burst) {
    int64_t t = per_s ? NS_PER_S / per_s : 0;
    atomic_store(&g->t_ns, t);
    atomic_store(&g->tau_ns, t * (int64_t)(burst ? burst : 1));
}

/* 1 when one more line fits the rate (and takes its place). */
static int gcra_allow(gcra *g, int64_t now) {
    int64_t t = atomic_load_explicit(&g->t_ns, memory_order_relaxed);
    int64_t tau = atomic_load_explicit(&g->tau_ns, memory_order_relaxed);
    if (t == 0) return 1;
    int64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
    for (;;) {
        int64_t nt = (tat > now ? tat : now) + t;
        if (nt - now > tau) return 0;
        if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, nt, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 1;
    }
}

static uint64_t name_hash(const char *s) {
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++) h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h ? h : 1;
}

/* The entry of an event name: found, or claimed (CAS on the hash) and initialised with the
 * default rate. A full table sends every new name to the shared overflow entry. */
static kind *kind_get(sl_log *l, const char *name) {
    uint64_t h = name_hash(name);
    for (unsigned i = 0; i < SL_LOG_KINDS; i++) {
        kind *k = &l->kinds[(h + i) & (SL_LOG_KINDS - 1)];
        uint64_t cur = atomic_load_explicit(&k->h, memory_order_acquire);
        if (cur == 0) {
            uint64_t zero = 0;
            if (atomic_compare_exchange_strong(&k->h, &zero, h)) {
                snprintf(k->name, sizeof(k->name), "%s", name);
                gcra_set(&k->lim, l->def_rate, l->def_burst);
                atomic_store_explicit(&k->named, 1, memory_order_release);
                return k;
            }
            cur = zero;
        }
        if (cur == h) {
            /* a 64-bit collision between two names would share a limiter: harmless */
            return k;
        }
    }
    return &l->kinds[SL_LOG_KINDS];
}

int sl_log_kind_set(sl_log *l, const char *event, sl_log_level lvl, uint32_t per_s,
                    uint32_t burst, const char *summary) {
    if (l == NULL || event == NULL) return -EINVAL;
    kind *k = kind_get(l, event);
    if (k == &l->kinds[SL_LOG_KINDS]) return -ENOSPC;
    while (!atomic_load_explicit(&k->named, memory_order_acquire)) sched_yield();
    snprintf(k->summary, sizeof(k->summary), "%s", summary ? summary : event);
    atomic_store(&k->level, (int)lvl);
    gcra_set(&k->lim, per_s, burst);
    atomic_store(&k->count_only, per_s == 0);
    return 0;
}

void sl_log_count(sl_log *l, const char *event) {
    if (l == NULL || event == NULL) return;
    kind *k = kind_get(l, event);
    atomic_fetch_add_explicit(&k->counted, 1, memory_order_relaxed);
}

/* ---- writing ------------------------------------------------------------------------------ */

int sl_log_enabled(const sl_log *l, sl_log_level lvl) {
    return l != NULL && (int)lvl <= atomic_load_explicit(&l->level, memory_order_relaxed);
}

void sl_log_set_level(sl_log *l, sl_log_level lvl) {
    if (l) atomic_store(&l->level, (int)lvl);
}

void sl_log_write(sl_log *l, sl_log_level lvl, const char *event, const char *msg,
                  const sl_log_field *f, size_t n) {
    if (!sl_log_enabled(l, lvl)) return;
    if (event == NULL) event = "log";
    kind *k = kind_get(l, event);
    if (atomic_load_explicit(&k->count_only, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&k->counted, 1, memory_order_relaxed);
        return;
    }
    if (!gcra_allow(&k->lim, mono_now(l))) {
        atomic_fetch_add_explicit(&k->suppressed, 1, memory_order_relaxed);
        atomic_store_explicit(&k->last_level, (int)lvl, memory_order_relaxed);
        atomic_fetch_add_explicit(&l->dropped_rate, 1, memory_order_relaxed);
        return;
    }
    char line[SL_LOG_LINE_MAX];
    size_t len = format_line(l, line, lvl, event, msg, f, n, wall_now(l));
    enqueue(l, line, len);
}

void sl_log_printf(sl_log *l, sl_log_level lvl, const char *event, const char *fmt, ...) {
    if (!sl_log_enabled(l, lvl)) return;
    char msg[SL_LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sl_log_write(l, lvl, event, msg, NULL, 0);
}

/* ---- the decision log ------------------------------------------------------------------ */

void sl_log_decisions_set(sl_log *l, int on, int rejections_only, uint32_t sample_ppm,
                          uint32_t per_s, uint32_t burst, int raw_keys) {
    if (l == NULL) return;
    atomic_store(&l->dec_rej_only, rejections_only != 0);
    atomic_store(&l->dec_ppm, sample_ppm > 1000000 ? 1000000 : sample_ppm);
    atomic_store(&l->raw_keys, raw_keys != 0);
    gcra_set(&l->dec_lim, per_s ? per_s : 1, burst);
    atomic_store(&l->dec_on, on != 0);
}

/* Sampling keys on the key's keyed hash: a key is either always in the sample or never
 * (for one fraction), so a sampled key's history is complete, and the hash that decides
 * is the one shown, computed once. The limiter comes last: a line over the rate is a drop. */
void sl_log_decision(sl_log *l, const sl_log_dec *d) {
    if (l == NULL || !atomic_load_explicit(&l->dec_on, memory_order_relaxed)) return;
    /* decision lines are info lines: log.level warn or error leaves them out */
    if (!sl_log_enabled(l, SL_LOG_INFO)) return;
    if (!d->rejected && atomic_load_explicit(&l->dec_rej_only, memory_order_relaxed)) return;
    int raw = atomic_load_explicit(&l->raw_keys, memory_order_relaxed);
    uint32_t ppm = atomic_load_explicit(&l->dec_ppm, memory_order_relaxed);
    const void *key = d->key ? d->key : "";
    size_t klen = d->key ? d->key_len : 0;
    sl_hash128 h = {0, 0};
    int hashed = 0;
    if (ppm < 1000000) {
        h = sl_hash128_of(&l->hkey, key, klen);
        hashed = 1;
        if (h.hi % 1000000u >= ppm) {
            atomic_fetch_add_explicit(&l->dec_sampled_out, 1, memory_order_relaxed);
            return;
        }
    }
    if (!gcra_allow(&l->dec_lim, mono_now(l))) {
        atomic_fetch_add_explicit(&l->dec_rate_limited, 1, memory_order_relaxed);
        return;
    }
    if (!hashed && !raw) h = sl_hash128_of(&l->hkey, key, klen);
    char hx[19];
    static const char hex[] = "0123456789abcdef";
    hx[0] = 'k', hx[1] = ':';
    for (int i = 0; i < 16; i++) hx[2 + i] = hex[(h.lo >> (60 - 4 * i)) & 15];
    hx[18] = 0;

    sl_log_field f[10];
    size_t n = 0;
    if (d->trace_id) f[n++] = SL_LOG_STR("trace_id", d->trace_id);
    f[n++] = SL_LOG_STR("policy", d->policy ? d->policy : "");
    if (d->window) f[n++] = SL_LOG_STR("window", d->window);
    f[n++] = SL_LOG_STR("verdict", d->verdict ? d->verdict : "");
    f[n++] = SL_LOG_INT("cost", d->cost);
    f[n++] = SL_LOG_INT("remaining", d->remaining);
    f[n++] = SL_LOG_INT("limit", d->limit);
    if (d->retry_after_ns >= 0) f[n++] = SL_LOG_DUR("retry_after", d->retry_after_ns);
    if (raw)
        f[n++] = SL_LOG_STRN("key", (const char *)key, klen);
    else
        f[n++] = SL_LOG_STRN("key_hash", hx, 18);
    char line[SL_LOG_LINE_MAX];
    size_t len = format_line(l, line, SL_LOG_INFO, "decision", NULL, f, n, wall_now(l));
    if (enqueue(l, line, len) == 0)
        atomic_fetch_add_explicit(&l->dec_logged, 1, memory_order_relaxed);
}

/* ---- the writer thread -------------------------------------------------------------------- */

static int64_t real_mono(void) {
    return sys_clock(CLOCK_MONOTONIC);
}

static uint64_t count_lines(const char *p, size_t n) {
    uint64_t c = 0;
    for (const char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++) c++;
    return c;
}

/* Writes a batch of whole lines. A pipe or socket gets chunks of whole lines of at most
 * PIPE_BUF bytes, each after poll() said it is writable, so the writer never blocks past
 * write_timeout_ns and drops happen at line boundaries; a regular file gets one write. */
static void out_write(sl_log *l, const char *p, size_t n) {
    uint64_t lines = count_lines(p, n);
    size_t off = 0;
    int64_t deadline = real_mono() + l->write_timeout_ns;
    while (off < n) {
        size_t take = n - off;
        if (!l->fd_is_reg) {
            if (take > CHUNK_MAX) {
                const char *nl = memrchr(p + off, '\n', CHUNK_MAX);
                take = nl ? (size_t)(nl - (p + off)) + 1 : CHUNK_MAX;
            }
            int64_t left = deadline - real_mono();
            struct pollfd pf = {l->fd, POLLOUT, 0};
            int pr = left > 0 ? poll(&pf, 1, (int)((left + 999999) / 1000000)) : 0;
            if (pr < 0 && errno == EINTR) continue;
            if (pr <= 0 || (pf.revents & (POLLERR | POLLNVAL))) break;
        }
        ssize_t w = write(l->fd, p + off, take);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN && real_mono() < deadline) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        } else {
            break;
        }
    }
    uint64_t lost = off < n ? count_lines(p + off, n - off) : 0;
    if (lost) atomic_fetch_add_explicit(&l->dropped_write, lost, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->written, lines - lost, memory_order_relaxed);
}

static int open_path(const char *path, int *is_reg) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) return -errno;
    struct stat st;
    *is_reg = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    return fd;
}

static int do_reopen(sl_log *l) {
    if (l->path == NULL) return 0;
    int reg = 0;
    int fd = open_path(l->path, &reg);
    if (fd < 0) {
        atomic_fetch_add(&l->reopen_errors, 1);
        char line[SL_LOG_LINE_MAX];
        sl_log_field f[2] = {SL_LOG_STR("path", l->path), SL_LOG_STR("error", strerror(-fd))};
        size_t len = format_line(l, line, SL_LOG_ERROR, "log_reopen_failed",
                                 "cannot reopen the log file, still writing to the old one", f,
                                 2, wall_now(l));
        out_write(l, line, len);
        return fd;
    }
    if (l->own_fd) close(l->fd);
    l->fd = fd, l->own_fd = 1, l->fd_is_reg = reg;
    atomic_fetch_add(&l->reopens, 1);
    return 0;
}

static size_t summary_line(sl_log *l, char *buf, sl_log_level lvl, const char *event,
                           const char *msg, uint64_t count, const char *count_key) {
    sl_log_field f[2] = {SL_LOG_UINT(count_key, count), SL_LOG_DUR("interval", l->summary_ns)};
    return format_line(l, buf, lvl, event, msg, f, 2, wall_now(l));
}

/* Every summary interval: one line per event name that was suppressed or counted, and
 * one for lines lost to a full queue, so a flood becomes a handful of lines. */
static void summaries(sl_log *l, char *out, size_t *olen) {
    char line[SL_LOG_LINE_MAX], msg[256];
    char iv[32];
    sl_lbuf ib = {iv, 0, sizeof(iv) - 1, 0};
    lb_seconds(&ib, l->summary_ns);
    iv[ib.len] = 0;
#define EMIT(len_)                                                   \
    do {                                                             \
        size_t n_ = (len_);                                          \
        if (*olen + n_ > OUT_CAP) out_write(l, out, *olen), *olen = 0; \
        memcpy(out + *olen, line, n_);                               \
        *olen += n_;                                                 \
    } while (0)
    for (unsigned i = 0; i <= SL_LOG_KINDS; i++) {
        kind *k = &l->kinds[i];
        if (i < SL_LOG_KINDS && !atomic_load_explicit(&k->named, memory_order_acquire)) continue;
        const char *name = i < SL_LOG_KINDS ? k->name : "other";
        uint64_t c = atomic_exchange_explicit(&k->counted, 0, memory_order_relaxed);
        if (c) {
            snprintf(msg, sizeof(msg), "%llu %s in the last %s s", (unsigned long long)c,
                     k->summary[0] ? k->summary : name, iv);
            EMIT(summary_line(l, line, (sl_log_level)atomic_load(&k->level), name, msg, c, "count"));
        }
        uint64_t s = atomic_exchange_explicit(&k->suppressed, 0, memory_order_relaxed);
        if (s) {
            snprintf(msg, sizeof(msg), "%llu lines suppressed by the rate limit in the last %s s",
                     (unsigned long long)s, iv);
            EMIT(summary_line(l, line, (sl_log_level)atomic_load(&k->last_level), name, msg, s,
                              "suppressed"));
        }
    }
    uint64_t full = atomic_load(&l->dropped_full);
    if (full != l->last_full) {
        snprintf(msg, sizeof(msg), "%llu log lines dropped (queue full) in the last %s s",
                 (unsigned long long)(full - l->last_full), iv);
        EMIT(summary_line(l, line, SL_LOG_WARN, "log_dropped", msg, full - l->last_full, "dropped"));
        l->last_full = full;
    }
    uint64_t dr = atomic_load(&l->dec_rate_limited);
    if (dr != l->last_dec_rate) {
        snprintf(msg, sizeof(msg), "%llu decision lines over the rate limit in the last %s s",
                 (unsigned long long)(dr - l->last_dec_rate), iv);
        EMIT(summary_line(l, line, SL_LOG_INFO, "decision_log", msg, dr - l->last_dec_rate,
                          "suppressed"));
        l->last_dec_rate = dr;
    }
#undef EMIT
}

static int ring_ready(sl_log *l) {
    sl_log_slot *s = &l->ring[l->head & l->mask];
    return atomic_load_explicit(&s->seq, memory_order_acquire) == l->head + 1;
}

static void *writer_main(void *arg) {
    sl_log *l = arg;
    int64_t next_summary = mono_now(l) + l->summary_ns;
    for (;;) {
        uint64_t freq = atomic_load_explicit(&l->flush_req, memory_order_acquire);
        int stopping = atomic_load_explicit(&l->stop, memory_order_acquire);
        size_t olen = 0, got = 0;
        while (got <= l->mask && ring_ready(l)) {
            sl_log_slot *s = &l->ring[l->head & l->mask];
            if (olen + s->len > OUT_CAP) out_write(l, l->out, olen), olen = 0;
            memcpy(l->out + olen, s->line, s->len);
            olen += s->len;
            atomic_store_explicit(&s->seq, l->head + l->mask + 1, memory_order_release);
            l->head++;
            got++;
        }
        if (olen) out_write(l, l->out, olen), olen = 0;
        if (atomic_exchange(&l->reopen_flag, 0)) {
            uint64_t seq = atomic_load(&l->reopen_seq);
            atomic_store(&l->reopen_result, do_reopen(l));
            atomic_store(&l->reopen_done, seq);
        }
        int64_t now = mono_now(l);
        if (now >= next_summary || (stopping && !got)) {
            summaries(l, l->out, &olen);
            if (olen) out_write(l, l->out, olen), olen = 0;
            next_summary = now + l->summary_ns;
        }
        atomic_store_explicit(&l->flush_ack, freq, memory_order_release);
        if (stopping && !got) break;
        if (got) continue;
        /* Nothing to do: sleep on the eventfd until a producer, a flush, a reopen request or
         * the next summary (bounded, so a missed wake-up only delays). */
        atomic_store(&l->sleeping, 1);
        if (ring_ready(l) || atomic_load(&l->reopen_flag) || atomic_load(&l->stop) ||
            atomic_load(&l->flush_req) != freq) {
            atomic_store(&l->sleeping, 0);
            continue;
        }
        int ms = 50;
        if (!l->mono_fn) {
            int64_t left = next_summary - now;
            ms = left <= 0 ? 1 : left >= NS_PER_S ? 1000 : (int)(left / 1000000) + 1;
        }
        struct pollfd pf = {l->efd, POLLIN, 0};
        if (poll(&pf, 1, ms) > 0) {
            uint64_t v;
            ssize_t r = read(l->efd, &v, sizeof(v));
            (void)r;
        }
        atomic_store(&l->sleeping, 0);
    }
    return NULL;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

void sl_log_config_default(sl_log_config *c) {
    memset(c, 0, sizeof(*c));
    c->level = SL_LOG_INFO;
    c->format = SL_LOG_TEXT;
    c->fd = -1;
    c->queue_lines = 2048;
    c->write_timeout_ns = 2 * NS_PER_S;
    c->rate_per_s = 20;
    c->burst = 100;
    c->summary_ns = 10 * NS_PER_S;
    c->decisions_sample_ppm = 1000000;
    c->decisions_per_s = 100;
    c->decisions_burst = 100;
    c->journal = -1;
}

int sl_log_create(sl_log **out, const sl_log_config *c) {
    *out = NULL;
    sl_log *l = calloc(1, sizeof(*l));
    if (l == NULL) return -ENOMEM;
    unsigned cap = 16;
    while (cap < c->queue_lines && cap < (1u << 20)) cap <<= 1;
    l->mask = cap - 1;
    l->ring = calloc(cap, sizeof(sl_log_slot));
    l->out = malloc(OUT_CAP);
    l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = -ENOMEM;
    if (l->ring == NULL || l->out == NULL) goto fail;
    if (l->efd < 0) {
        rc = -errno;
        goto fail;
    }
    for (uint64_t i = 0; i < cap; i++) atomic_init(&l->ring[i].seq, i);
    if (c->hash_key) {
        l->hkey = *c->hash_key;
    } else if (sl_hash_random_key(&l->hkey) != 0) {
        rc = -EIO;
        goto fail;
    }
    atomic_init(&l->level, (int)c->level);
    l->format = c->format;
    l->mono_fn = c->mono_ns, l->wall_fn = c->wall_ns, l->clock_ud = c->clock_ud;
    l->def_rate = c->rate_per_s, l->def_burst = c->burst;
    l->write_timeout_ns = c->write_timeout_ns > 0 ? c->write_timeout_ns : 2 * NS_PER_S;
    l->summary_ns = c->summary_ns > 0 ? c->summary_ns : 10 * NS_PER_S;
    kind *ov = &l->kinds[SL_LOG_KINDS];
    snprintf(ov->name, sizeof(ov->name), "other");
    gcra_set(&ov->lim, c->rate_per_s, c->burst);
    if (c->path && c->path[0] && strcmp(c->path, "-") != 0) {
        l->path = strdup(c->path);
        if (l->path == NULL) goto fail;
        int fd = open_path(l->path, &l->fd_is_reg);
        if (fd < 0) {
            rc = fd;
            goto fail;
        }
        l->fd = fd, l->own_fd = 1;
    } else {
        l->fd = c->fd >= 0 ? c->fd : 2;
        struct stat st;
        l->fd_is_reg = fstat(l->fd, &st) == 0 && S_ISREG(st.st_mode);
        l->journal = c->journal > 0 || (c->journal < 0 && sl_log_fd_is_journal(l->fd));
    }
    sl_log_decisions_set(l, c->decisions, c->decisions_rejections_only, c->decisions_sample_ppm,
                         c->decisions_per_s, c->decisions_burst, c->raw_keys);
    rc = pthread_create(&l->thread, NULL, writer_main, l);
    if (rc != 0) {
        rc = -rc;
        goto fail;
    }
    *out = l;
    return 0;
fail:
    if (l->own_fd) close(l->fd);
    if (l->efd >= 0) close(l->efd);
    free(l->path);
    free(l->out);
    free(l->ring);
    free(l);
    return rc;
}

void sl_log_destroy(sl_log *l) {
    if (l == NULL) return;
    sl_log *cur = l;
    atomic_compare_exchange_strong(&g_default, &cur, NULL);
    atomic_store(&l->stop, 1);
    wake(l);
    pthread_join(l->thread, NULL);
    if (l->own_fd) close(l->fd);
    close(l->efd);
    free(l->path);
    free(l->out);
    free(l->ring);
    free(l);
}

void sl_log_set_default(sl_log *l) {
    atomic_store(&g_default, l);
}

sl_log *sl_log_default(void) {
    return atomic_load(&g_default);
}

void sl_log_reopen_request(sl_log *l) {
    if (l == NULL) return;
    atomic_store(&l->reopen_flag, 1);
    wake(l);
}

static int wait_until(_Atomic uint64_t *v, uint64_t target, int64_t timeout_ns) {
    int64_t end = real_mono() + timeout_ns;
    while (atomic_load_explicit(v, memory_order_acquire) < target) {
        if (real_mono() >= end) return -ETIMEDOUT;
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int sl_log_reopen(sl_log *l) {
    if (l == NULL) return 0;
    uint64_t seq = atomic_fetch_add(&l->reopen_seq, 1) + 1;
    sl_log_reopen_request(l);
    int rc = wait_until(&l->reopen_done, seq, 5 * NS_PER_S);
    return rc ? rc : atomic_load(&l->reopen_result);
}

int sl_log_flush(sl_log *l, int64_t timeout_ns) {
    if (l == NULL) return 0;
    uint64_t r = atomic_fetch_add(&l->flush_req, 1) + 1;
    wake(l);
    return wait_until(&l->flush_ack, r, timeout_ns);
}

void sl_log_stats_get(const sl_log *l, sl_log_stats *st) {
    memset(st, 0, sizeof(*st));
    if (l == NULL) return;
    st->written = atomic_load(&l->written);
    st->dropped_full = atomic_load(&l->dropped_full);
    st->dropped_rate = atomic_load(&l->dropped_rate);
    st->dropped_write = atomic_load(&l->dropped_write);
    st->decisions_logged = atomic_load(&l->dec_logged);
    st->decisions_sampled_out = atomic_load(&l->dec_sampled_out);
    st->decisions_rate_limited = atomic_load(&l->dec_rate_limited);
    st->reopens = atomic_load(&l->reopens);
    st->reopen_errors = atomic_load(&l->reopen_errors);
}

uint64_t sl_log_dropped(const sl_log *l) {
    sl_log_stats st;
    sl_log_stats_get(l, &st);
    return st.dropped_full + st.dropped_rate + st.dropped_write + st.decisions_rate_limited;
}
