/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.h -- recorded traffic for `sluice replay`: access logs (nginx log_format, nginx or
 * Envoy JSON, CSV), plain or gzip, read as streams, mapped to request attributes,
 * and merged from several files in time order through a bounded reorder buffer.
 * Times are wall-clock nanoseconds since the Unix epoch; memory is bounded by the reorder
 * buffer's byte cap, never by the size of a file.
 */
#ifndef SL_TRACE_H
#define SL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

typedef enum sl_trace_format {
    SL_TF_AUTO = 0, /* per file, from its first line: '{' JSON, a CSV header, else nginx */
    SL_TF_NGINX,    /* nginx log_format (default: combined) */
    SL_TF_JSON,     /* one JSON object per line: nginx escape=json formats, Envoy JSON logs */
    SL_TF_CSV       /* a header line naming the columns, then one request per line */
} sl_trace_format;

const char *sl_trace_format_name(sl_trace_format f);

#define SL_TRACE_MAX_HEADERS 32
#define SL_TRACE_MAX_LINE 65536 /* longer lines are counted as unparsable */

/* One request as replay needs it. Strings are NOT NUL-terminated. */
typedef struct sl_trace_rec {
    int64_t t_ns;          /* arrival (wall clock) */
    int64_t duration_ns;   /* how long the request took; -1 when the log does not say */
    sl_str method, path, host, client_ip, route;
    bool has_body_bytes;
    uint64_t body_bytes;
    bool has_cost;
    uint64_t cost;         /* the request's actual cost: settles `settle: true` reservations */
    size_t n_headers;
    sl_header *headers;    /* n_headers of them (at most SL_TRACE_MAX_HEADERS) */
    /* bookkeeping for the merge and for replay */
    uint64_t seq;          /* arrival order, ties broken by it */
    uint32_t file;         /* index into the reader's files */
    uint64_t line;
    uint32_t rechecks;     /* replay: times this request was held and checked again */
    int64_t held_ns;       /* replay: delay accumulated by those holds */
    int64_t first_t_ns;    /* replay: the arrival before any hold */
    size_t size;           /* bytes of this record's allocation */
} sl_trace_rec;

/* ---- attribute mapping --------------------------------------------------------------- */

/* What a log field becomes. */
typedef enum sl_attr {
    SL_A_NONE = 0,
    SL_A_TIME,       /* epoch s/ms/us/ns, nginx $time_local, ISO 8601 */
    SL_A_DURATION,   /* seconds (decimal) unless the source says ms */
    SL_A_METHOD,
    SL_A_PATH,
    SL_A_HOST,
    SL_A_CLIENT_IP,  /* "a.b.c.d:port", "[v6]:port" and "a, b" lists are reduced */
    SL_A_ROUTE,
    SL_A_BODY_BYTES,
    SL_A_COST,
    SL_A_REQUEST,    /* "METHOD PATH PROTOCOL" (nginx $request) */
    SL_A_HEADER      /* a header; name in the map entry */
} sl_attr;

#define SL_MAP_MAX 64

typedef struct sl_map_entry {
    sl_attr attr;
    char header[64];        /* SL_A_HEADER: lower-case name */
    char field[64];         /* the log field ("" when `literal` is used) */
    char literal[128];      /* a constant value instead of a field */
    bool is_literal;
    bool disabled;          /* --map ATTR= : no default for this attribute */
    int duration_unit_ns;   /* SL_A_DURATION: 1e9 (s) or 1e6 (ms); 0 = by field name */
} sl_map_entry;

typedef struct sl_trace_map {
    size_t n;
    sl_map_entry e[SL_MAP_MAX];
} sl_trace_map;

/* Parses one --map argument: ATTR=$FIELD, ATTR=VALUE (a constant) or ATTR= (no mapping).
 * ATTR is time, duration[:ms], method, path, host, client_ip, route, body_bytes, cost,
 * request or header.NAME. Returns 0, or -1 with a message in err. */
int sl_trace_map_add(sl_trace_map *m, const char *arg, char *err, size_t errlen);

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct sl_trace_reader sl_trace_reader;

typedef struct sl_trace_options {
    sl_trace_format format;
    const char *log_format;    /* nginx log_format; NULL = combined */
    const sl_trace_map *map;   /* explicit mappings (override the defaults) */
    int64_t reorder_ns;        /* how far out of order records may arrive; default 60 s */
    size_t reorder_bytes;      /* memory for held records, all files; default 64 MiB */
    unsigned show_bad;         /* unparsable lines reported on `errors`; default 5 */
    bool show_bad_content;     /* include the line's content (it may hold personal data) */
    FILE *errors;              /* where they are reported; NULL = stderr */
} sl_trace_options;

typedef struct sl_trace_stats {
    uint64_t lines;           /* non-empty lines read */
    uint64_t records;         /* requests handed out */
    uint64_t bad;             /* unparsable lines (counted, skipped) */
    uint64_t late;            /* records older than one already handed out (see reorder) */
    int64_t max_late_ns;      /* the largest such lateness */
    uint64_t early_flush;     /* records handed out early because the buffer was full */
    uint64_t bytes;           /* uncompressed bytes read */
    uint64_t read_errors;     /* files that could not be read to their end */
    size_t held_bytes_max;    /* the reorder buffer's high-water mark */
} sl_trace_stats;

/* Opens every path ("-" = standard input); NULL with a message in err when one cannot be
 * opened or the options are invalid. */
sl_trace_reader *sl_trace_open(char *const *paths, size_t n, const sl_trace_options *opt,
                               char *err, size_t errlen);
/* The next request in time order, owned by the caller (free with sl_trace_rec_free), or
 * NULL at the end of every file. Never fails on a bad line (it is counted). */
sl_trace_rec *sl_trace_next(sl_trace_reader *r);
void sl_trace_rec_free(sl_trace_rec *rec);
const sl_trace_stats *sl_trace_stats_get(const sl_trace_reader *r);
const char *sl_trace_file_name(const sl_trace_reader *r, uint32_t file);
sl_trace_format sl_trace_file_format(const sl_trace_reader *r, uint32_t file);
size_t sl_trace_file_count(const sl_trace_reader *r);
void sl_trace_close(sl_trace_reader *r);

/* ---- pieces, exposed for the unit tests -------------------------------------------------- */

/* A time value in any of the accepted forms into ns; false when it is none of them. */
bool sl_trace_parse_time(const char *s, size_t len, int64_t *out_ns);
/* One line (modified in place) of the given format into `rec` with strings pointing into
 * the line; for SL_TF_CSV `ctx` is the reader state holding the header. Returns NULL on
 * success, else the reason it is unparsable. */
typedef struct sl_trace_layout sl_trace_layout;
sl_trace_layout *sl_trace_layout_create(sl_trace_format f, const char *log_format,
                                        const sl_trace_map *map, char *err, size_t errlen);
/* CSV: the header line; false when it is not one. */
bool sl_trace_layout_header(sl_trace_layout *l, char *line, size_t len);
const char *sl_trace_parse_line(sl_trace_layout *l, char *line, size_t len, sl_trace_rec *rec);
void sl_trace_layout_destroy(sl_trace_layout *l);

#endif
