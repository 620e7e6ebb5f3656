/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h -- the server's structured logger. Levels error/warn/info/debug; one line per event,
 * text or JSON; stderr or a file reopened on request (logrotate). A caller never blocks: it
 * formats its line on its own stack and copies it into a bounded lock-free queue that one
 * writer thread drains; a full queue drops the line and counts it. Every event name has its
 * own rate limit (lines over it are counted and summarised every interval), and "count-only"
 * events (refused connections) never make a line of their own, only the summary
 * "N connections refused in the last 10 s". The decision log (off by default) is sampled,
 * rate-limited and shows keys as keyed hashes unless raw keys are allowed. Nothing here
 * allocates after sl_log_create. Times: wall clock (ns) in lines, monotonic ns for limits.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"

typedef enum sl_log_level {
    SL_LOG_ERROR = 0,
    SL_LOG_WARN = 1,
    SL_LOG_INFO = 2,
    SL_LOG_DEBUG = 3
} sl_log_level;

typedef enum sl_log_format { SL_LOG_TEXT = 0, SL_LOG_JSON = 1 } sl_log_format;

/* One line's maximum size in bytes, newline included. Longer lines are cut at a field
 * boundary (or inside the message) and marked truncated; JSON stays valid. */
#define SL_LOG_LINE_MAX 1024
/* Event names (rate-limit kinds) longer than this are cut for the summary lines. */
#define SL_LOG_EVENT_MAX 47
/* Distinct event names with their own rate limit; more share one overflow limiter. */
#define SL_LOG_KINDS 128

/* ---- structured fields ------------------------------------------------------------- */

typedef enum sl_log_ftype {
    SL_LF_STR,  /* v.s, len bytes (SIZE_MAX: NUL-terminated); escaped */
    SL_LF_INT,  /* v.i */
    SL_LF_UINT, /* v.u */
    SL_LF_DUR,  /* v.i nanoseconds, shown in seconds: 0.0125 (JSON number), 0.0125s (text) */
    SL_LF_BOOL, /* v.i != 0 */
    SL_LF_KEY   /* v.s, len: a rate-limit key: shown as its keyed hash unless raw keys */
} sl_log_ftype;

typedef struct sl_log_field {
    const char *key; /* a field name (letters, digits, '_'); escaped anyway */
    sl_log_ftype type;
    size_t len;
    union {
        const char *s;
        int64_t i;
        uint64_t u;
    } v;
} sl_log_field;

#define SL_LOG_STR(k_, s_) ((sl_log_field){(k_), SL_LF_STR, SIZE_MAX, {.s = (s_)}})
#define SL_LOG_STRN(k_, s_, n_) ((sl_log_field){(k_), SL_LF_STR, (size_t)(n_), {.s = (s_)}})
#define SL_LOG_INT(k_, x_) ((sl_log_field){(k_), SL_LF_INT, 0, {.i = (int64_t)(x_)}})
#define SL_LOG_UINT(k_, x_) ((sl_log_field){(k_), SL_LF_UINT, 0, {.u = (uint64_t)(x_)}})
#define SL_LOG_DUR(k_, ns_) ((sl_log_field){(k_), SL_LF_DUR, 0, {.i = (int64_t)(ns_)}})
#define SL_LOG_BOOL(k_, b_) ((sl_log_field){(k_), SL_LF_BOOL, 0, {.i = (b_) ? 1 : 0}})
#define SL_LOG_KEY(k_, p_, n_) \
    ((sl_log_field){(k_), SL_LF_KEY, (size_t)(n_), {.s = (const char *)(p_)}})

/* ---- configuration and lifetime ------------------------------------------------------ */

typedef struct sl_log sl_log;

typedef struct sl_log_config {
    sl_log_level level;   /* lines above it are not formatted at all (default info) */
    sl_log_format format; /* default text */
    const char *path;     /* a file (appended, created 0640); NULL, "" or "-": stderr */
    int fd;               /* >= 0 and no path: write to this descriptor (not closed) */
    unsigned queue_lines; /* queue capacity in lines, rounded up to a power of two (2048) */
    int64_t write_timeout_ns; /* a destination not writable this long: batch dropped (2 s) */
    /* Default rate limit of every event name (sl_log_kind_set overrides one). */
    uint32_t rate_per_s; /* default 20 lines/s per event name */
    uint32_t burst;      /* default 100 lines */
    int64_t summary_ns;  /* summaries of suppressed/counted events every (10 s) */
    /* Decision log. */
    int decisions;                /* 0: off (the default) */
    int decisions_rejections_only; /* only verdicts with `rejected` set are eligible */
    uint32_t decisions_sample_ppm; /* eligible decisions logged, per million (1000000) */
    uint32_t decisions_per_s;      /* at most this many lines/s (100) */
    uint32_t decisions_burst;      /* (100) */
    int raw_keys;                  /* 1: keys appear raw (log.raw_keys: true) */
    /* The process key for key hashes; NULL: a random one. Pass the key the hot-key
     * sketches use so the same key shows the same hash in /v1/top and in logs. */
    const sl_hash_key *hash_key;
    /* Lines start with sd-daemon's "<N>" priority prefix (journald then files them at
     * that priority): 1 yes, 0 no, -1 (the default) when the destination is stderr or a
     * descriptor and JOURNAL_STREAM names it (sl_log_fd_is_journal). */
    int journal;
    /* Clocks (tests); NULL: CLOCK_MONOTONIC and CLOCK_REALTIME. */
    int64_t (*mono_ns)(void *ud);
    int64_t (*wall_ns)(void *ud);
    void *clock_ud;
} sl_log_config;

void sl_log_config_default(sl_log_config *c);

/* Opens the destination and starts the writer thread. 0, or -errno (the file cannot be
 * opened, no memory, no thread). */
int sl_log_create(sl_log **out, const sl_log_config *c);
/* Writes what is queued (bounded by write_timeout_ns), stops the writer, frees. */
void sl_log_destroy(sl_log *l);

/* A process-wide logger for code that is not handed one (NULL: nothing is logged). */
void sl_log_set_default(sl_log *l);
sl_log *sl_log_default(void);

/* 1 when JOURNAL_STREAM ("<dev>:<ino>", set by systemd) names the stream fd writes to. */
int sl_log_fd_is_journal(int fd);
/* One line straight to stderr in `fmt`, for what must be said before a logger exists (or
 * after it failed to start): the same line format, the journal prefix when stderr is the
 * journal. Blocking, unqueued, unlimited: for start-up and fatal lines only. */
void sl_log_emit_once(sl_log_format fmt, sl_log_level lvl, const char *event, const char *msg);

/* ---- writing ----------------------------------------------------------------------------- */

/* 1 when lines at `lvl` are written (one relaxed load; NULL logger: 0). */
int sl_log_enabled(const sl_log *l, sl_log_level lvl);
void sl_log_set_level(sl_log *l, sl_log_level lvl);

/* One event: `event` names its kind (rate-limited per name), `msg` is free text (may be
 * NULL), then the fields. Never blocks; the line may be dropped (counted). */
void sl_log_write(sl_log *l, sl_log_level lvl, const char *event, const char *msg,
                  const sl_log_field *f, size_t n);
/* The same with a printf-formatted message and no fields. */
void sl_log_printf(sl_log *l, sl_log_level lvl, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* SL_LOG(l, SL_LOG_WARN, "store_down", "redis unreachable", SL_LOG_STR("node", n), ...):
 * fields are formatted only when the level is enabled. At least one field. */
#define SL_LOG(l, lvl, event, msg, ...)                                                    \
    do {                                                                                   \
        if (sl_log_enabled((l), (lvl))) {                                                  \
            const sl_log_field sl_lf_[] = {__VA_ARGS__};                                   \
            sl_log_write((l), (lvl), (event), (msg), sl_lf_, sizeof(sl_lf_) / sizeof(sl_lf_[0])); \
        }                                                                                  \
    } while (0)

/* Sets the rate limit of one event name: per_s lines/s with `burst`; per_s == 0 makes it
 * count-only: sl_log_write/sl_log_count only count it, and every summary interval with a
 * non-zero count writes one line at `lvl`: "<N> <summary> in the last <interval>" (e.g.
 * summary "connections refused"). Call at start, before the name is used elsewhere
 * (0, or -ENOSPC when SL_LOG_KINDS names are taken). */
int sl_log_kind_set(sl_log *l, const char *event, sl_log_level lvl, uint32_t per_s,
                    uint32_t burst, const char *summary);
/* Counts one occurrence of a count-only event (no line; one atomic add). */
void sl_log_count(sl_log *l, const char *event);

/* ---- the decision log ---------------------------------------------------------------------- */

typedef struct sl_log_dec {
    const char *trace_id; /* NULL: none */
    const char *policy;   /* the policy this line is about */
    const char *window;   /* the deciding window, e.g. "10/s" (NULL: none) */
    const char *verdict;  /* allowed | limited | shadow_limited | rollout_limited | ... */
    int rejected;         /* 1 when this verdict refused (or would have refused) */
    int64_t cost, remaining, limit;
    int64_t retry_after_ns; /* < 0: none */
    const void *key;        /* the composed key (hashed unless raw keys) */
    size_t key_len;
} sl_log_dec;

/* Logs one decision if the decision log is on, it is eligible (rejections only?), the
 * sample keeps it (a keyed hash of the key: the same key is always in or always out for a
 * given fraction) and the rate allows. When off: one relaxed load. */
void sl_log_decision(sl_log *l, const sl_log_dec *d);
/* Changes the decision log settings at run time (reload). */
void sl_log_decisions_set(sl_log *l, int on, int rejections_only, uint32_t sample_ppm,
                          uint32_t per_s, uint32_t burst, int raw_keys);

/* The displayed form of a key: "k:" and 16 hex digits of its keyed SipHash under the
 * logger's process key (out: at least 19 bytes). */
void sl_log_key_hash(const sl_log *l, const void *key, size_t len, char out[19]);

/* ---- reopening (logrotate) ------------------------------------------------------------ */

/* Async-signal-safe (an atomic store and an eventfd write): asks the writer thread to
 * reopen the file; call it from the SIGUSR1 handler. */
void sl_log_reopen_request(sl_log *l);
/* Reopens now (from a normal thread; waits for the writer, bounded by 5 s). 0, or
 * -errno (the old file stays in use). A logger on stderr or a descriptor: 0. */
int sl_log_reopen(sl_log *l);

/* Waits until everything queued before the call is written (bounded). 0, or -ETIMEDOUT. */
int sl_log_flush(sl_log *l, int64_t timeout_ns);

/* ---- counters (for /metrics) ----------------------------------------------------------- */

typedef struct sl_log_stats {
    uint64_t written;           /* lines written to the destination */
    uint64_t dropped_full;      /* the queue was full */
    uint64_t dropped_rate;      /* over the event's rate limit (summarised) */
    uint64_t dropped_write;     /* the destination failed or stayed blocked */
    uint64_t decisions_logged;  /* decision lines queued */
    uint64_t decisions_sampled_out; /* eligible but not in the sample (not a drop) */
    uint64_t decisions_rate_limited; /* in the sample, over decisions_per_s (a drop) */
    uint64_t reopens, reopen_errors;
} sl_log_stats;

void sl_log_stats_get(const sl_log *l, sl_log_stats *st);
/* sluice_log_dropped_total: lines lost for any reason (full + rate + write + decisions
 * over their rate). */
uint64_t sl_log_dropped(const sl_log *l);

/* ---- helpers shared with the audit trail --------------------------------------------- */

const char *sl_log_level_name(sl_log_level lvl);
int sl_log_level_parse(const char *s, sl_log_level *out);   /* 0 or -1 */
int sl_log_format_parse(const char *s, sl_log_format *out); /* "text" | "json"; 0 or -1 */

/* A bounded output buffer: an append that does not fit sets `over` and writes nothing
 * more (sticky), so one check after composing is enough. */
typedef struct sl_lbuf {
    char *p;
    size_t len, cap;
    int over;
} sl_lbuf;

/* Appends `s` (n bytes) as a JSON string with its quotes: '"' '\\' and control bytes
 * escaped (\n \t \r \b \f, others \u00XX, DEL as \u007f), U+2028/U+2029 escaped, and
 * every byte that is not part of well-formed UTF-8 (stray continuation, overlong form,
 * surrogate, above U+10FFFF, cut sequence) replaced by U+FFFD, so the output is always
 * valid JSON and valid UTF-8. When it does not fit, as much as fits is written, the
 * string is closed, and `over` is set. */
void sl_log_json_str(sl_lbuf *b, const void *s, size_t n);

/* Formats wall-clock ns as RFC 3339 UTC with microseconds ("2025-01-02T03:04:05.123456Z",
 * 27 bytes + NUL). */
void sl_log_time(int64_t wall_ns, char out[28]);

#endif /* SL_LOG_H */
