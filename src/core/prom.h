/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prom.h -- a writer for the Prometheus text exposition format (0.0.4) that cannot emit a
 * sample without its family's HELP and TYPE, escapes label values (and repairs invalid
 * UTF-8), renders histograms (cumulative buckets, _sum, _count) from per-worker atomics,
 * and adds the standard process_* metrics (from /proc/self) and a build info gauge.
 * Invariants: a family is declared once; names and label names are checked; the first
 * misuse or allocation failure sticks (sl_prom_finish then returns NULL with the reason).
 * Runs at scrape time: it allocates; histogram observation (the hot part) does not.
 */
#ifndef SL_PROM_H
#define SL_PROM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl_prom_type {
    SL_PROM_COUNTER,   /* the family name must end in _total */
    SL_PROM_GAUGE,     /* must not end in _total */
    SL_PROM_HISTOGRAM, /* samples only through sl_prom_histogram */
    SL_PROM_UNTYPED
} sl_prom_type;

typedef struct sl_prom {
    char *buf;
    size_t len, cap;
    int err;           /* sticky */
    char errmsg[160];  /* why, when err */
    char family[128];  /* the family samples go to ("" before the first) */
    sl_prom_type type;
    char **seen; /* families declared so far */
    size_t nseen, capseen;
} sl_prom;

void sl_prom_init(sl_prom *p);
/* Frees what sl_prom_finish did not hand over. */
void sl_prom_deinit(sl_prom *p);

/* Starts a family: "# HELP name help" and "# TYPE name type". The name must match
 * [a-zA-Z_:][a-zA-Z0-9_:]*, help must be non-empty (escaped: '\\' and newlines), and the
 * family must not have been declared before. 0, or -1 (sticky error). */
int sl_prom_family(sl_prom *p, const char *name, sl_prom_type type, const char *help);

/* One sample of the current (counter, gauge or untyped) family. labels: NULL, or a
 * NULL-terminated list of name/value pairs {"policy", "api", "result", "allowed", NULL};
 * names must be valid and not reserved ("le", "quantile", "__*"); values are escaped. */
void sl_prom_u64(sl_prom *p, const char *const *labels, uint64_t v);
void sl_prom_i64(sl_prom *p, const char *const *labels, int64_t v);
void sl_prom_f64(sl_prom *p, const char *const *labels, double v); /* NaN, +Inf, -Inf ok */
/* v / scale as a decimal, exactly (scale a power of ten: 1e9 renders ns as seconds). */
void sl_prom_fixed(sl_prom *p, const char *const *labels, int64_t v, int64_t scale);

/* Appends already rendered exposition text as is (for renderers not yet ported); the
 * caller answers for its HELP and TYPE. */
void sl_prom_raw(sl_prom *p, const char *text, size_t len);

/* The exposition (NUL-terminated, *len without the NUL), handed to the caller (free());
 * NULL on error, the reason in p->errmsg. */
char *sl_prom_finish(sl_prom *p, size_t *len);

/* ---- histograms ------------------------------------------------------------------------ */

#define SL_PROM_HIST_MAX 32 /* bounds per histogram */

/* One worker's histogram: counts per bucket (not cumulative; the last is above every
 * bound) and the sum of observed values, in the caller's unit (e.g. ns). */
typedef struct sl_prom_hist {
    _Atomic uint64_t bucket[SL_PROM_HIST_MAX + 1];
    _Atomic uint64_t sum;
} sl_prom_hist;

/* Single writer per histogram (its worker): a relaxed load and store, no RMW. bounds:
 * nb ascending upper bounds (inclusive, as Prometheus' le). Negative values count as 0. */
void sl_prom_hist_observe(sl_prom_hist *h, const int64_t *bounds, unsigned nb, int64_t v);
/* The same for a histogram several threads write (atomic adds). */
void sl_prom_hist_observe_shared(sl_prom_hist *h, const int64_t *bounds, unsigned nb, int64_t v);

/* Renders one labelled histogram of the current (histogram) family: the nh per-worker
 * histograms summed, cumulative _bucket{le=...} lines (then +Inf), _sum (divided by
 * scale, a power of ten) and _count (equal to the +Inf bucket). */
void sl_prom_histogram(sl_prom *p, const char *const *labels, const int64_t *bounds, unsigned nb,
                       const sl_prom_hist *const *hs, size_t nh, int64_t scale);

/* ---- process and build ------------------------------------------------------------------ */

/* process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds, process_start_time_seconds (Linux /proc/self).
 * A value that cannot be read leaves its family without a sample. 0, or -1 (sticky). */
int sl_prom_process(sl_prom *p);

/* <prefix>_build_info{version="...",commit="..."} 1 (a gauge). */
void sl_prom_build_info(sl_prom *p, const char *prefix, const char *version, const char *commit);

#endif /* SL_PROM_H */
