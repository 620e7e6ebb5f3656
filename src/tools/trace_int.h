/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_int.h -- what the access-log readers share (trace_parse.c: the field mapping,
 * the layouts, the nginx matcher and filling a record; trace_formats.c: the JSON and CSV
 * readers; trace_time.c: times, durations and counts as logs write them). Private to
 * src/tools.
 */
#ifndef SLUICE_TRACE_INT_H
#define SLUICE_TRACE_INT_H

#include <string.h>

#include "trace.h"

#define NS INT64_C(1000000000)

/* Whether field name f (n bytes) is `want`. */
static inline bool field_is(const char *f, size_t n, const char *want) {
    return strlen(want) == n && memcmp(f, want, n) == 0;
}

/* What a field feeds: up to 4 targets, each with a rank (lower wins when several fields
 * feed one attribute: explicit mappings first, then the defaults in table order). */
typedef struct target {
    sl_attr attr;
    uint8_t rank;
    bool end_time;       /* SL_A_TIME: the log writes it when the request ends */
    int64_t unit_ns;     /* SL_A_DURATION */
    const char *header;  /* SL_A_HEADER: lower-case name (owned by the layout) */
    uint8_t header_len;
} target;

#define MAX_TARGETS 4

typedef struct resolved {
    uint8_t n;
    target t[MAX_TARGETS];
} resolved;

typedef struct ntok {
    bool var;
    char *text; /* literal text or variable name */
    size_t len;
    resolved r;
} ntok;

#define MAX_COLUMNS 128
#define NAME_CACHE 256

struct sl_trace_layout {
    sl_trace_format format;
    const sl_trace_map *map;
    bool explicit_attr[SL_A_HEADER + 1]; /* ATTR= given: no default feeds ATTR */
    /* header names produced by mappings, owned here */
    char names[MAX_COLUMNS + SL_MAP_MAX + 8][64];
    size_t n_names;
    /* nginx */
    ntok *toks;
    size_t n_toks;
    /* csv */
    size_t n_cols;
    resolved cols[MAX_COLUMNS];
    bool have_header;
    /* json: resolved names, cached */
    struct {
        char name[48];
        uint8_t len;
        resolved r;
        bool used;
    } cache[NAME_CACHE];
    size_t cache_used;
    sl_header hdrs[SL_TRACE_MAX_HEADERS]; /* the headers of the line being parsed */
};

typedef struct fill {
    sl_trace_rec *rec;
    const bool *off; /* the layout's explicit_attr */
    uint8_t header_rank[SL_TRACE_MAX_HEADERS];
    const char *time_p;
    size_t time_len;
    int time_rank;
    bool time_end;
    int ranks[SL_A_HEADER];
    bool have_duration;
    int64_t duration_ns;
    const char *bad;
} fill;

/* trace_time.c: seconds with a fraction ("0.123") or an integer in unit_ns units; a
 * decimal count */
bool sl__trace_duration(const char *s, size_t len, int64_t unit_ns, int64_t *out);
bool sl__trace_u64(const char *s, size_t len, uint64_t *out);

/* trace_parse.c: what a field name feeds (cached per layout: the JSON reader's names),
 * a value to every target of it, and the record completed once every field is in */
resolved sl__trace_resolve(sl_trace_layout *l, const char *f, size_t n);
const resolved *sl__trace_resolve_cached(sl_trace_layout *l, const char *f, size_t n);
void sl__trace_put_resolved(fill *f, const resolved *rs, char *v, size_t n);
const char *sl__trace_finish(sl_trace_layout *l, fill *f);

/* trace_formats.c: one line of a flat JSON object or of CSV (after its header line) */
const char *sl__trace_parse_json(sl_trace_layout *l, char *line, size_t len, fill *f);
const char *sl__trace_parse_csv(sl_trace_layout *l, char *line, size_t len, fill *f);

#endif
