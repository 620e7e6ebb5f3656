/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_parse.c -- one access-log line into one request: the field -> attribute mapping
 * (defaults plus --map), the layouts, the nginx log_format matcher and filling a record
 * (the JSON and CSV readers are in trace_formats.c, the time forms in trace_time.c).
 * Lines are modified in place (unescaping); nothing is allocated per line.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

const char *sl_trace_format_name(sl_trace_format f) {
    switch (f) {
    case SL_TF_NGINX: return "nginx";
    case SL_TF_JSON: return "json";
    case SL_TF_CSV: return "csv";
    default: return "auto";
    }
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

static const char *own_name(sl_trace_layout *l, const char *s, size_t n) {
    for (size_t i = 0; i < l->n_names; i++)
        if (strlen(l->names[i]) == n && memcmp(l->names[i], s, n) == 0) return l->names[i];
    if (l->n_names >= sizeof(l->names) / sizeof(l->names[0]) || n >= sizeof(l->names[0]))
        return NULL;
    memcpy(l->names[l->n_names], s, n);
    l->names[l->n_names][n] = '\0';
    return l->names[l->n_names++];
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
resolved sl__trace_resolve(sl_trace_layout *l, const char *f, size_t n) {
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

const resolved *sl__trace_resolve_cached(sl_trace_layout *l, const char *f, size_t n) {
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
                l->cache[s].r = sl__trace_resolve(l, f, n);
                return &l->cache[s].r;
            }
            if (l->cache[s].len == n && memcmp(l->cache[s].name, f, n) == 0) return &l->cache[s].r;
        }
    }
    scratch = sl__trace_resolve(l, f, n);
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
            t->r = sl__trace_resolve(l, s, n);
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
        if (set_rank(f, SL_A_DURATION, t->rank) && sl__trace_duration(v, n, t->unit_ns ? t->unit_ns : NS, &d)) {
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
        if (set_rank(f, SL_A_BODY_BYTES, t->rank) && sl__trace_u64(v, n, &r->body_bytes))
            r->has_body_bytes = true;
        break;
    case SL_A_COST:
        if (set_rank(f, SL_A_COST, t->rank) && sl__trace_u64(v, n, &r->cost)) r->has_cost = true;
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

void sl__trace_put_resolved(fill *f, const resolved *rs, char *v, size_t n) {
    for (size_t i = 0; i < rs->n; i++) put(f, &rs->t[i], v, n);
}

/* Literal mappings (--map host=api.example.com) and the time, once every field is in. */
const char *sl__trace_finish(sl_trace_layout *l, fill *f) {
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
        sl__trace_put_resolved(f, &t->r, p, n);
        p = vend;
    }
    /* fields appended after the format (a later log_format) are tolerated */
    return sl__trace_finish(l, f);
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
    case SL_TF_JSON: return sl__trace_parse_json(l, line, len, &f);
    case SL_TF_CSV: return sl__trace_parse_csv(l, line, len, &f);
    default: return "no format";
    }
}
