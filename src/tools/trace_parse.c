/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_parse.c -- one access-log line into one request: the nginx log_format matcher,
 * a flat JSON object reader (nginx escape=json formats, Envoy JSON access logs), CSV with
 * a header line, the time forms logs use, and the field -> attribute mapping (defaults
 * plus --map). Lines are modified in place (unescaping); nothing is allocated per line.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

#define NS INT64_C(1000000000)

const char *sl_trace_format_name(sl_trace_format f) {
    switch (f) {
    case SL_TF_NGINX: return "nginx";
    case SL_TF_JSON: return "json";
    case SL_TF_CSV: return "csv";
    default: return "auto";
    }
}

/* ---- time ----------------------------------------------------------------------------- */

static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool num(const char *s, size_t n, int *out) {
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int month_of(const char *s) {
    static const char m[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int i = 0; i < 12; i++)
        if (memcmp(s, m + 3 * i, 3) == 0) return i + 1;
    return 0;
}

/* "+HHMM", "+HH:MM", "Z" (or nothing): offset east of UTC in seconds */
static bool zone(const char *s, size_t n, int64_t *off) {
    *off = 0;
    if (n == 0 || (n == 1 && (s[0] == 'Z' || s[0] == 'z'))) return true;
    if (s[0] != '+' && s[0] != '-') return false;
    int h, m;
    if (n == 5 && num(s + 1, 2, &h) && num(s + 3, 2, &m)) {
    } else if (n == 6 && s[3] == ':' && num(s + 1, 2, &h) && num(s + 4, 2, &m)) {
    } else if (n == 3 && num(s + 1, 2, &h)) {
        m = 0;
    } else {
        return false;
    }
    *off = (int64_t)(h * 3600 + m * 60) * (s[0] == '-' ? -1 : 1);
    return true;
}

static bool civil_ok(int y, int mo, int d, int h, int mi, int s) {
    return y >= 1970 && y <= 9999 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 &&
           mi <= 59 && s <= 60;
}

/* seconds since the epoch (at most 9999-12-31 plus a zone: no overflow in seconds) and a
 * fraction as nanoseconds, if the sum fits: int64 nanoseconds end in April 2262, and a
 * later time (a year 9999 typo, a hostile log) is unparsable, never wrapped around. */
static bool civil_ns(int64_t secs, int64_t frac, int64_t *out_ns) {
    int64_t ns;
    if (__builtin_mul_overflow(secs, (int64_t)NS, &ns) || __builtin_add_overflow(ns, frac, &ns)) return false;
    *out_ns = ns;
    return true;
}

bool sl_trace_parse_time(const char *s, size_t len, int64_t *out_ns) {
    while (len > 0 && (*s == ' ' || *s == '"')) s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '"')) len--;
    if (len == 0) return false;
    /* epoch number: seconds, ms, us or ns by magnitude, with an optional fraction */
    if (s[0] >= '0' && s[0] <= '9') {
        size_t i = 0;
        uint64_t ip = 0;
        int idig = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (++idig > 19) return false;
            ip = ip * 10 + (uint64_t)(s[i++] - '0');
        }
        if (i == len || s[i] == '.') {
            int64_t frac_ns = 0, scale = NS;
            uint64_t unit;
            if (ip >= UINT64_C(100000000000000000)) unit = 1;
            else if (ip >= UINT64_C(100000000000000)) unit = 1000;
            else if (ip >= UINT64_C(100000000000)) unit = 1000000;
            else unit = (uint64_t)NS;
            if (i < len) {
                i++;
                if (i == len) return false;
                scale = (int64_t)unit;
                while (i < len && s[i] >= '0' && s[i] <= '9') {
                    scale /= 10;
                    frac_ns += (s[i++] - '0') * scale;
                }
                if (i != len) return false;
            }
            if (ip > (uint64_t)INT64_MAX / unit) return false;
            *out_ns = (int64_t)(ip * unit) + frac_ns;
            return true;
        }
        /* ISO 8601: 2024-01-01T00:00:00[.123][Z|+01:00] (a space instead of T too) */
        if (len >= 19 && s[4] == '-' && s[7] == '-' && (s[10] == 'T' || s[10] == ' ') &&
            s[13] == ':' && s[16] == ':') {
            int y, mo, d, h, mi, sec;
            if (!num(s, 4, &y) || !num(s + 5, 2, &mo) || !num(s + 8, 2, &d) ||
                !num(s + 11, 2, &h) || !num(s + 14, 2, &mi) || !num(s + 17, 2, &sec) ||
                !civil_ok(y, mo, d, h, mi, sec))
                return false;
            size_t j = 19;
            int64_t frac = 0, scale = NS;
            if (j < len && (s[j] == '.' || s[j] == ',')) {
                j++;
                size_t start = j;
                while (j < len && s[j] >= '0' && s[j] <= '9') {
                    if (scale > 1) {
                        scale /= 10;
                        frac += (s[j] - '0') * scale;
                    }
                    j++;
                }
                if (j == start) return false;
            }
            int64_t off;
            if (!zone(s + j, len - j, &off)) return false;
            return civil_ns(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off, frac, out_ns);
        }
        /* nginx $time_local: 10/Oct/2000:13:55:36 -0700 */
        if (len >= 20 && s[2] == '/' && s[6] == '/' && s[11] == ':' && s[14] == ':' &&
            s[17] == ':') {
            int y, mo = month_of(s + 3), d, h, mi, sec;
            if (mo == 0 || !num(s, 2, &d) || !num(s + 7, 4, &y) || !num(s + 12, 2, &h) ||
                !num(s + 15, 2, &mi) || !num(s + 18, 2, &sec) || !civil_ok(y, mo, d, h, mi, sec))
                return false;
            size_t j = 20;
            while (j < len && s[j] == ' ') j++;
            int64_t off;
            if (!zone(s + j, len - j, &off)) return false;
            return civil_ns(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off, 0, out_ns);
        }
    }
    return false;
}

/* seconds with a fraction ("0.123") or an integer in `unit_ns` units */
static bool parse_duration(const char *s, size_t len, int64_t unit_ns, int64_t *out) {
    if (len == 0 || len > 24) return false;
    int64_t ip = 0, frac = 0, scale = unit_ns;
    size_t i = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9') ip = ip * 10 + (s[i++] - '0');
    if (i == 0) return false;
    if (i < len && s[i] == '.') {
        i++;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            scale /= 10;
            frac += (s[i++] - '0') * scale;
        }
    }
    if (i != len || ip > INT64_MAX / unit_ns / 2) return false;
    *out = ip * unit_ns + frac;
    return true;
}

static bool parse_u64(const char *s, size_t len, uint64_t *out) {
    if (len == 0 || len > 19) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* ---- mapping ----------------------------------------------------------------------------- */

static const struct {
    const char *name;
    sl_attr attr;
} ATTR_NAMES[] = {
    {"time", SL_A_TIME},           {"duration", SL_A_DURATION}, {"method", SL_A_METHOD},
    {"path", SL_A_PATH},           {"host", SL_A_HOST},         {"client_ip", SL_A_CLIENT_IP},
    {"route", SL_A_ROUTE},         {"body_bytes", SL_A_BODY_BYTES}, {"cost", SL_A_COST},
    {"request", SL_A_REQUEST},
};

int sl_trace_map_add(sl_trace_map *m, const char *arg, char *err, size_t errlen) {
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg) {
        snprintf(err, errlen, "--map expects ATTR=$FIELD, ATTR=VALUE or ATTR=, got '%s'", arg);
        return -1;
    }
    if (m->n >= SL_MAP_MAX) {
        snprintf(err, errlen, "at most %d --map options", SL_MAP_MAX);
        return -1;
    }
    sl_map_entry e;
    memset(&e, 0, sizeof(e));
    size_t al = (size_t)(eq - arg);
    char attr[96];
    if (al >= sizeof(attr)) {
        snprintf(err, errlen, "--map: attribute name too long");
        return -1;
    }
    memcpy(attr, arg, al);
    attr[al] = '\0';
    char *colon = strchr(attr, ':');
    if (colon != NULL) {
        *colon = '\0';
        if (strcmp(attr, "duration") != 0 || (strcmp(colon + 1, "ms") != 0 && strcmp(colon + 1, "s") != 0 &&
                                              strcmp(colon + 1, "us") != 0)) {
            snprintf(err, errlen, "--map: only duration takes a unit (duration:s, :ms or :us), got '%s'", arg);
            return -1;
        }
        e.duration_unit_ns = colon[1] == 's' ? (int)NS : colon[1] == 'm' ? 1000000 : 1000;
    }
    if (strncmp(attr, "header.", 7) == 0 && attr[7] != '\0') {
        e.attr = SL_A_HEADER;
        if (strlen(attr + 7) >= sizeof(e.header)) {
            snprintf(err, errlen, "--map: header name too long");
            return -1;
        }
        for (size_t i = 0; attr[7 + i]; i++) e.header[i] = (char)tolower((unsigned char)attr[7 + i]);
    } else {
        for (size_t i = 0; i < sizeof(ATTR_NAMES) / sizeof(ATTR_NAMES[0]); i++)
            if (strcmp(attr, ATTR_NAMES[i].name) == 0) e.attr = ATTR_NAMES[i].attr;
        if (e.attr == SL_A_NONE) {
            snprintf(err, errlen,
                     "--map: unknown attribute '%s' (time, duration, method, path, host, "
                     "client_ip, route, body_bytes, cost, request, header.NAME)", attr);
            return -1;
        }
    }
    const char *v = eq + 1;
    if (*v == '\0') {
        e.disabled = true;
    } else if (*v == '$') {
        v++;
        if (*v == '{') v++;
        size_t n = strlen(v);
        if (n > 0 && v[n - 1] == '}' && eq[2] == '{') n--;
        if (n == 0 || n >= sizeof(e.field)) {
            snprintf(err, errlen, "--map: bad field name in '%s'", arg);
            return -1;
        }
        memcpy(e.field, v, n);
    } else {
        if (strlen(v) >= sizeof(e.literal)) {
            snprintf(err, errlen, "--map: value too long in '%s'", arg);
            return -1;
        }
        strcpy(e.literal, v);
        e.is_literal = true;
    }
    m->e[m->n++] = e;
    return 0;
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

static const struct dflt {
    const char *field;
    sl_attr attr;
    bool end_time;
    int64_t unit_ns;
} DEFAULTS[] = {
    /* nginx writes $msec, $time_local and $time_iso8601 when the request ends */
    {"msec", SL_A_TIME, true, 0},
    {"time_iso8601", SL_A_TIME, true, 0},
    {"time_local", SL_A_TIME, true, 0},
    {"start_time", SL_A_TIME, false, 0}, /* Envoy: when the request started */
    {"time", SL_A_TIME, false, 0},
    {"timestamp", SL_A_TIME, false, 0},
    {"@timestamp", SL_A_TIME, false, 0},
    {"ts", SL_A_TIME, false, 0},
    {"request_time", SL_A_DURATION, false, NS},
    {"duration", SL_A_DURATION, false, 1000000}, /* Envoy %DURATION%: ms */
    {"method", SL_A_METHOD, false, 0},
    {"request_method", SL_A_METHOD, false, 0},
    {"path", SL_A_PATH, false, 0},
    {"request_uri", SL_A_PATH, false, 0},
    {"uri", SL_A_PATH, false, 0},
    {"url", SL_A_PATH, false, 0},
    {"request", SL_A_REQUEST, false, 0},
    {"host", SL_A_HOST, false, 0},
    {"http_host", SL_A_HOST, false, 0},
    {"authority", SL_A_HOST, false, 0},
    {"server_name", SL_A_HOST, false, 0},
    {"client_ip", SL_A_CLIENT_IP, false, 0},
    {"remote_addr", SL_A_CLIENT_IP, false, 0},
    {"downstream_remote_address", SL_A_CLIENT_IP, false, 0},
    {"realip_remote_addr", SL_A_CLIENT_IP, false, 0},
    {"route", SL_A_ROUTE, false, 0},
    {"body_bytes", SL_A_BODY_BYTES, false, 0},
    {"content_length", SL_A_BODY_BYTES, false, 0},
    {"http_content_length", SL_A_BODY_BYTES, false, 0},
    {"bytes_received", SL_A_BODY_BYTES, false, 0},
    {"cost", SL_A_COST, false, 0},
};
#define NDEFAULTS (sizeof(DEFAULTS) / sizeof(DEFAULTS[0]))

static const struct {
    const char *field, *header;
} HEADER_DEFAULTS[] = {{"user_agent", "user-agent"},
                       {"x_forwarded_for", "x-forwarded-for"},
                       {"referer", "referer"}};

/* ---- layouts ----------------------------------------------------------------------------- */

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

static const char *own_name(sl_trace_layout *l, const char *s, size_t n) {
    for (size_t i = 0; i < l->n_names; i++)
        if (strlen(l->names[i]) == n && memcmp(l->names[i], s, n) == 0) return l->names[i];
    if (l->n_names >= sizeof(l->names) / sizeof(l->names[0]) || n >= sizeof(l->names[0]))
        return NULL;
    memcpy(l->names[l->n_names], s, n);
    l->names[l->n_names][n] = '\0';
    return l->names[l->n_names++];
}

static bool field_is(const char *f, size_t n, const char *want) {
    return strlen(want) == n && memcmp(f, want, n) == 0;
}

/* `--map header.NAME=` (empty): the defaults must not fill that header. */
static bool header_disabled(const sl_trace_layout *l, const char *h, size_t n) {
    for (size_t i = 0; l->map && i < l->map->n; i++) {
        const sl_map_entry *e = &l->map->e[i];
        if (e->attr == SL_A_HEADER && e->disabled && field_is(h, n, e->header)) return true;
    }
    return false;
}

static void add_target(resolved *r, target t) {
    if (r->n < MAX_TARGETS) r->t[r->n++] = t;
}

/* Every attribute a log field named `f` feeds. */
static resolved resolve(sl_trace_layout *l, const char *f, size_t n) {
    resolved r;
    memset(&r, 0, sizeof(r));
    for (size_t i = 0; l->map && i < l->map->n; i++) {
        const sl_map_entry *e = &l->map->e[i];
        if (e->disabled || e->is_literal || !field_is(f, n, e->field)) continue;
        target t = {.attr = e->attr, .rank = 0};
        if (e->attr == SL_A_TIME)
            for (size_t k = 0; k < NDEFAULTS; k++)
                if (DEFAULTS[k].attr == SL_A_TIME && field_is(f, n, DEFAULTS[k].field))
                    t.end_time = DEFAULTS[k].end_time;
        if (e->attr == SL_A_DURATION) {
            t.unit_ns = e->duration_unit_ns ? e->duration_unit_ns : NS;
            if (!e->duration_unit_ns && field_is(f, n, "duration")) t.unit_ns = 1000000;
        }
        if (e->attr == SL_A_HEADER) {
            t.header = own_name(l, e->header, strlen(e->header));
            t.header_len = (uint8_t)strlen(e->header);
            if (t.header == NULL) continue;
        }
        add_target(&r, t);
    }
    for (size_t k = 0; k < NDEFAULTS; k++) {
        if (!field_is(f, n, DEFAULTS[k].field) || l->explicit_attr[DEFAULTS[k].attr]) continue;
        add_target(&r, (target){.attr = DEFAULTS[k].attr, .rank = (uint8_t)(1 + k),
                                .end_time = DEFAULTS[k].end_time, .unit_ns = DEFAULTS[k].unit_ns});
    }
    /* headers: CSV "header.NAME", nginx/JSON "http_NAME" (underscores as dashes) */
    char h[64];
    size_t hl = 0;
    if (n > 7 && memcmp(f, "header.", 7) == 0 && n - 7 < sizeof(h)) {
        for (size_t i = 7; i < n; i++) h[hl++] = (char)tolower((unsigned char)f[i]);
    } else if (n > 5 && memcmp(f, "http_", 5) == 0 && n - 5 < sizeof(h)) {
        for (size_t i = 5; i < n; i++) h[hl++] = f[i] == '_' ? '-' : (char)tolower((unsigned char)f[i]);
    } else {
        for (size_t i = 0; i < sizeof(HEADER_DEFAULTS) / sizeof(HEADER_DEFAULTS[0]); i++)
            if (field_is(f, n, HEADER_DEFAULTS[i].field)) {
                hl = strlen(HEADER_DEFAULTS[i].header);
                memcpy(h, HEADER_DEFAULTS[i].header, hl);
            }
    }
    if (hl > 0 && !header_disabled(l, h, hl)) {
        const char *name = own_name(l, h, hl);
        if (name != NULL)
            add_target(&r, (target){.attr = SL_A_HEADER, .rank = 200, .header = name,
                                    .header_len = (uint8_t)hl});
    }
    return r;
}

static const resolved *resolve_cached(sl_trace_layout *l, const char *f, size_t n) {
    static resolved scratch; /* not cached: computed again next time */
    if (n < sizeof(l->cache[0].name)) {
        uint32_t h = 2166136261u;
        for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)f[i]) * 16777619u;
        for (size_t p = 0; p < NAME_CACHE; p++) {
            size_t s = (h + p) % NAME_CACHE;
            if (!l->cache[s].used) {
                if (l->cache_used >= NAME_CACHE * 3 / 4) break;
                l->cache[s].used = true;
                l->cache_used++;
                memcpy(l->cache[s].name, f, n);
                l->cache[s].len = (uint8_t)n;
                l->cache[s].r = resolve(l, f, n);
                return &l->cache[s].r;
            }
            if (l->cache[s].len == n && memcmp(l->cache[s].name, f, n) == 0) return &l->cache[s].r;
        }
    }
    scratch = resolve(l, f, n);
    return &scratch;
}

static bool parse_template(sl_trace_layout *l, const char *fmt, char *err, size_t errlen) {
    size_t cap = strlen(fmt) + 2;
    l->toks = calloc(cap, sizeof(ntok));
    if (l->toks == NULL) return false;
    const char *p = fmt;
    while (*p) {
        ntok *t = &l->toks[l->n_toks];
        if (*p == '$') {
            const char *s = ++p;
            bool brace = *p == '{';
            if (brace) s = ++p;
            while (*p && (isalnum((unsigned char)*p) || *p == '_')) p++;
            size_t n = (size_t)(p - s);
            if (brace) {
                if (*p != '}') {
                    snprintf(err, errlen, "log format: unterminated ${ at column %d", (int)(s - fmt));
                    return false;
                }
                p++;
            }
            if (n == 0) {
                snprintf(err, errlen, "log format: '$' without a name at column %d", (int)(s - fmt));
                return false;
            }
            if (l->n_toks > 0 && l->toks[l->n_toks - 1].var) {
                snprintf(err, errlen, "log format: two variables with nothing between them "
                                      "cannot be told apart ($%.*s)", (int)n, s);
                return false;
            }
            t->var = true;
            t->text = strndup(s, n);
            t->len = n;
            t->r = resolve(l, s, n);
        } else {
            const char *s = p;
            while (*p && *p != '$') p++;
            t->var = false;
            t->text = strndup(s, (size_t)(p - s));
            t->len = (size_t)(p - s);
        }
        if (t->text == NULL) return false;
        l->n_toks++;
    }
    if (l->n_toks == 0) {
        snprintf(err, errlen, "log format is empty");
        return false;
    }
    return true;
}

#define COMBINED                                                                             \
    "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent "      \
    "\"$http_referer\" \"$http_user_agent\""

sl_trace_layout *sl_trace_layout_create(sl_trace_format f, const char *log_format,
                                        const sl_trace_map *map, char *err, size_t errlen) {
    sl_trace_layout *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->format = f;
    l->map = map;
    /* an explicit mapping outranks the defaults (used when its field is present); an
     * empty one (ATTR=) switches the defaults off */
    for (size_t i = 0; map && i < map->n; i++)
        if (map->e[i].attr != SL_A_HEADER && map->e[i].disabled) l->explicit_attr[map->e[i].attr] = true;
    if (f == SL_TF_NGINX && !parse_template(l, log_format ? log_format : COMBINED, err, errlen)) {
        sl_trace_layout_destroy(l);
        return NULL;
    }
    return l;
}

void sl_trace_layout_destroy(sl_trace_layout *l) {
    if (l == NULL) return;
    for (size_t i = 0; i < l->n_toks; i++) free(l->toks[i].text);
    free(l->toks);
    free(l);
}

/* ---- filling a record ---------------------------------------------------------------------- */

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

static bool set_rank(fill *f, sl_attr a, int rank) {
    if (f->ranks[a] != 0 && f->ranks[a] <= rank) return false;
    f->ranks[a] = rank + 1;
    return true;
}

/* "1.2.3.4:5678" -> "1.2.3.4", "[::1]:80" -> "::1", "a, b" -> "a" */
static sl_str client_addr(const char *p, size_t n) {
    const char *comma = memchr(p, ',', n);
    if (comma) n = (size_t)(comma - p);
    while (n > 0 && p[n - 1] == ' ') n--;
    if (n > 0 && p[0] == '[') {
        const char *close = memchr(p, ']', n);
        if (close) return (sl_str){p + 1, (size_t)(close - p - 1)};
    }
    const char *colon = memchr(p, ':', n);
    if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - p)) == NULL)
        n = (size_t)(colon - p); /* one colon: IPv4 with a port */
    return (sl_str){p, n};
}

static void put(fill *f, const target *t, char *v, size_t n) {
    sl_trace_rec *r = f->rec;
    if (n == 0 || (n == 1 && v[0] == '-')) return; /* nginx writes "-" for "none" */
    switch (t->attr) {
    case SL_A_TIME:
        if (f->time_rank == 0 || t->rank + 1 < f->time_rank) {
            f->time_rank = t->rank + 1;
            f->time_p = v;
            f->time_len = n;
            f->time_end = t->end_time;
        }
        break;
    case SL_A_DURATION: {
        int64_t d;
        if (set_rank(f, SL_A_DURATION, t->rank) && parse_duration(v, n, t->unit_ns ? t->unit_ns : NS, &d)) {
            f->have_duration = true;
            f->duration_ns = d;
        }
        break;
    }
    case SL_A_METHOD:
        if (set_rank(f, SL_A_METHOD, t->rank)) r->method = (sl_str){v, n};
        break;
    case SL_A_PATH:
        if (set_rank(f, SL_A_PATH, t->rank)) r->path = (sl_str){v, n};
        break;
    case SL_A_REQUEST: {
        /* METHOD SP TARGET [SP PROTOCOL] */
        char *sp = memchr(v, ' ', n);
        if (sp == NULL || sp == v) {
            f->bad = "request line is not 'METHOD PATH PROTOCOL'";
            break;
        }
        char *tgt = sp + 1;
        size_t rest = n - (size_t)(tgt - v);
        char *sp2 = memchr(tgt, ' ', rest);
        size_t tl = sp2 ? (size_t)(sp2 - tgt) : rest;
        if (tl == 0) {
            f->bad = "request line is not 'METHOD PATH PROTOCOL'";
            break;
        }
        if (!f->off[SL_A_METHOD] && set_rank(f, SL_A_METHOD, t->rank))
            r->method = (sl_str){v, (size_t)(sp - v)};
        if (!f->off[SL_A_PATH] && set_rank(f, SL_A_PATH, t->rank)) r->path = (sl_str){tgt, tl};
        break;
    }
    case SL_A_HOST:
        if (set_rank(f, SL_A_HOST, t->rank)) r->host = (sl_str){v, n};
        break;
    case SL_A_CLIENT_IP:
        if (set_rank(f, SL_A_CLIENT_IP, t->rank)) r->client_ip = client_addr(v, n);
        break;
    case SL_A_ROUTE:
        if (set_rank(f, SL_A_ROUTE, t->rank)) r->route = (sl_str){v, n};
        break;
    case SL_A_BODY_BYTES:
        if (set_rank(f, SL_A_BODY_BYTES, t->rank) && parse_u64(v, n, &r->body_bytes))
            r->has_body_bytes = true;
        break;
    case SL_A_COST:
        if (set_rank(f, SL_A_COST, t->rank) && parse_u64(v, n, &r->cost)) r->has_cost = true;
        break;
    case SL_A_HEADER:
        for (size_t i = 0; i < r->n_headers; i++)
            if (r->headers[i].name.p == t->header) { /* fed twice: the better rank wins */
                if (t->rank < f->header_rank[i]) {
                    r->headers[i].value = (sl_str){v, n};
                    f->header_rank[i] = t->rank;
                }
                return;
            }
        if (r->n_headers < SL_TRACE_MAX_HEADERS) {
            f->header_rank[r->n_headers] = t->rank;
            r->headers[r->n_headers++] = (sl_header){{t->header, t->header_len}, {v, n}};
        }
        break;
    case SL_A_NONE: break;
    }
}

static void put_resolved(fill *f, const resolved *rs, char *v, size_t n) {
    for (size_t i = 0; i < rs->n; i++) put(f, &rs->t[i], v, n);
}

/* Literal mappings (--map host=api.example.com) and the time, once every field is in. */
static const char *finish(sl_trace_layout *l, fill *f) {
    if (f->bad) return f->bad;
    for (size_t i = 0; l->map && i < l->map->n; i++) {
        const sl_map_entry *e = &l->map->e[i];
        if (!e->is_literal) continue;
        target t = {.attr = e->attr, .rank = 0, .unit_ns = e->duration_unit_ns};
        if (e->attr == SL_A_HEADER) {
            t.header = own_name(l, e->header, strlen(e->header));
            t.header_len = (uint8_t)strlen(e->header);
            if (t.header == NULL) continue;
        }
        put(f, &t, (char *)e->literal, strlen(e->literal));
    }
    if (f->time_p == NULL) return "no time field (map one with --map time=$FIELD)";
    if (!sl_trace_parse_time(f->time_p, f->time_len, &f->rec->t_ns)) return "unreadable time";
    f->rec->duration_ns = f->have_duration ? f->duration_ns : -1;
    /* nginx logs when a request ends: it arrived request_time earlier */
    if (f->time_end && f->have_duration) f->rec->t_ns -= f->duration_ns;
    return NULL;
}

/* nginx's default escaping writes \xHH for '"', '\\' and bytes outside 0x20-0x7e */
static size_t unescape_nginx(char *v, size_t n) {
    if (memchr(v, '\\', n) == NULL) return n;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\\' && i + 3 < n + 0 && v[i + 1] == 'x' && isxdigit((unsigned char)v[i + 2]) &&
            isxdigit((unsigned char)v[i + 3])) {
            char hex[3] = {v[i + 2], v[i + 3], 0};
            v[o++] = (char)strtol(hex, NULL, 16);
            i += 3;
        } else {
            v[o++] = v[i];
        }
    }
    return o;
}

static const char *parse_nginx(sl_trace_layout *l, char *line, size_t len, fill *f) {
    char *p = line, *end = line + len;
    for (size_t i = 0; i < l->n_toks; i++) {
        const ntok *t = &l->toks[i];
        if (!t->var) {
            if ((size_t)(end - p) < t->len || memcmp(p, t->text, t->len) != 0)
                return i == 0 ? "does not match the log format" : "does not match the log format (truncated?)";
            p += t->len;
            continue;
        }
        char *vend;
        if (i + 1 < l->n_toks) {
            const ntok *lit = &l->toks[i + 1];
            vend = memmem(p, (size_t)(end - p), lit->text, lit->len);
            if (vend == NULL) return "does not match the log format (truncated?)";
        } else {
            vend = end;
        }
        size_t n = unescape_nginx(p, (size_t)(vend - p));
        put_resolved(f, &t->r, p, n);
        p = vend;
    }
    /* fields appended after the format (a later log_format) are tolerated */
    return finish(l, f);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void skip_ws(char **p, char *end) {
    while (*p < end && (**p == ' ' || **p == '\t')) (*p)++;
}

static void put_utf8(char **o, uint32_t c) {
    char *w = *o;
    if (c < 0x80) {
        *w++ = (char)c;
    } else if (c < 0x800) {
        *w++ = (char)(0xc0 | (c >> 6));
        *w++ = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
        *w++ = (char)(0xe0 | (c >> 12));
        *w++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *w++ = (char)(0x80 | (c & 0x3f));
    } else {
        *w++ = (char)(0xf0 | (c >> 18));
        *w++ = (char)(0x80 | ((c >> 12) & 0x3f));
        *w++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *w++ = (char)(0x80 | (c & 0x3f));
    }
    *o = w;
}

static bool hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return false;
    }
    *out = v;
    return true;
}

/* A JSON string at *p (after the quote) unescaped in place; the span in *s. */
static bool json_string(char **p, char *end, char **s, size_t *n) {
    char *r = *p, *w = *p;
    *s = *p;
    while (r < end) {
        char c = *r;
        if (c == '"') {
            *n = (size_t)(w - *s);
            *p = r + 1;
            return true;
        }
        if ((unsigned char)c < 0x20) return false;
        if (c != '\\') {
            *w++ = *r++;
            continue;
        }
        if (r + 1 >= end) return false;
        char e = r[1];
        r += 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (end - r < 4 || !hex4(r, &cp)) return false;
            r += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && end - r >= 6 && r[0] == '\\' && r[1] == 'u') {
                uint32_t lo;
                if (hex4(r + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    r += 6;
                }
            }
            put_utf8(&w, cp); /* never longer than its escape */
            break;
        }
        default: return false;
        }
    }
    return false;
}

/* Skips a nested value (object or array), strings inside included. */
static bool json_skip(char **p, char *end) {
    int depth = 0;
    while (*p < end) {
        char c = **p;
        if (c == '"') {
            (*p)++;
            while (*p < end && **p != '"') *p += **p == '\\' ? 2 : 1;
            if (*p >= end) return false;
        } else if (c == '{' || c == '[') {
            if (++depth > 64) return false;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) {
                (*p)++;
                return true;
            }
        }
        (*p)++;
    }
    return false;
}

static const char *parse_json(sl_trace_layout *l, char *line, size_t len, fill *f) {
    char *p = line, *end = line + len;
    skip_ws(&p, end);
    if (p >= end || *p != '{') return "not a JSON object";
    p++;
    skip_ws(&p, end);
    if (p < end && *p == '}') return finish(l, f);
    for (;;) {
        skip_ws(&p, end);
        if (p >= end) return "truncated JSON";
        if (*p != '"') return "JSON: expected a key";
        p++;
        char *k;
        size_t kn;
        if (!json_string(&p, end, &k, &kn)) return "JSON: bad key";
        skip_ws(&p, end);
        if (p >= end || *p != ':') return "JSON: expected ':'";
        p++;
        skip_ws(&p, end);
        if (p >= end) return "truncated JSON";
        char *v = NULL;
        size_t vn = 0;
        if (*p == '"') {
            p++;
            if (!json_string(&p, end, &v, &vn)) return "JSON: bad string";
        } else if (*p == '{' || *p == '[') {
            if (!json_skip(&p, end)) return "truncated JSON";
        } else {
            v = p;
            while (p < end && *p != ',' && *p != '}' && *p != ' ' && *p != '\t') p++;
            vn = (size_t)(p - v);
            if (vn == 0) return "JSON: expected a value";
            if (field_is(v, vn, "null")) v = NULL;
        }
        if (v != NULL) put_resolved(f, resolve_cached(l, k, kn), v, vn);
        skip_ws(&p, end);
        if (p >= end) return "truncated JSON";
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '}') break;
        return "JSON: expected ',' or '}'";
    }
    return finish(l, f);
}

/* ---- CSV ------------------------------------------------------------------------------------ */

/* The next field of a CSV line (RFC 4180 quoting), unquoted in place. */
static int csv_field(char **p, char *end, char **v, size_t *n) {
    char *r = *p;
    if (r < end && *r == '"') {
        char *w = ++r;
        *v = w;
        for (;;) {
            if (r >= end) return -1;
            if (*r == '"') {
                if (r + 1 < end && r[1] == '"') {
                    *w++ = '"';
                    r += 2;
                    continue;
                }
                r++;
                break;
            }
            *w++ = *r++;
        }
        *n = (size_t)(w - *v);
        if (r < end && *r != ',') return -1;
    } else {
        *v = r;
        while (r < end && *r != ',') r++;
        *n = (size_t)(r - *v);
    }
    if (r < end) {
        *p = r + 1;
        return 1; /* more follow */
    }
    *p = r;
    return 0;
}

bool sl_trace_layout_header(sl_trace_layout *l, char *line, size_t len) {
    char *p = line, *end = line + len;
    size_t n = 0;
    bool time = false;
    for (;;) {
        char *v;
        size_t vn;
        int more = csv_field(&p, end, &v, &vn);
        if (more < 0 || n >= MAX_COLUMNS || vn == 0) return false;
        while (vn > 0 && v[vn - 1] == ' ') vn--;
        while (vn > 0 && *v == ' ') v++, vn--;
        for (size_t i = 0; i < vn; i++)
            if (!(isalnum((unsigned char)v[i]) || strchr("_.-@:", v[i]))) return false;
        l->cols[n++] = resolve(l, v, vn);
        for (size_t i = 0; i < l->cols[n - 1].n; i++) time |= l->cols[n - 1].t[i].attr == SL_A_TIME;
        if (!more) break;
    }
    l->n_cols = n;
    l->have_header = time || (l->map && l->map->n > 0);
    return l->have_header;
}

static const char *parse_csv(sl_trace_layout *l, char *line, size_t len, fill *f) {
    if (!l->have_header) return "CSV without a header line";
    char *p = line, *end = line + len;
    for (size_t c = 0;; c++) {
        char *v;
        size_t vn;
        int more = csv_field(&p, end, &v, &vn);
        if (more < 0) return "CSV: unterminated or misplaced quote";
        if (c >= l->n_cols) return "CSV: more fields than the header names";
        put_resolved(f, &l->cols[c], v, vn);
        if (!more) {
            if (c + 1 < l->n_cols) return "CSV: fewer fields than the header names (truncated?)";
            break;
        }
    }
    return finish(l, f);
}

const char *sl_trace_parse_line(sl_trace_layout *l, char *line, size_t len, sl_trace_rec *rec) {
    fill f;
    memset(&f, 0, sizeof(f));
    memset(rec, 0, sizeof(*rec));
    rec->headers = l->hdrs;
    f.rec = rec;
    f.off = l->explicit_attr;
    switch (l->format) {
    case SL_TF_NGINX: return parse_nginx(l, line, len, &f);
    case SL_TF_JSON: return parse_json(l, line, len, &f);
    case SL_TF_CSV: return parse_csv(l, line, len, &f);
    default: return "no format";
    }
}
