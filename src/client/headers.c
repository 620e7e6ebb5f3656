/* SPDX-License-Identifier: Apache-2.0 */
/*
 * headers.c -- reading what a server publishes about its limits: RateLimit-Policy and
 * RateLimit (draft-11 Lists of named items), the draft-03 RateLimit-Limit/-Remaining/-Reset
 * and X-RateLimit-* fallbacks, and Retry-After (delay-seconds or HTTP-date). Nothing is
 * allocated; malformed fields are ignored whole and flagged in `invalid`.
 */
#include <stdbool.h>
#include <string.h>

#include "sf.h"
#include "sluice_client.h"

#define NS_PER_S INT64_C(1000000000)

/* The name and partition key of a member; false when it is not a usable item. */
static bool member_ident(const sl_sf_member *m, char *name, char *partition) {
    if (m->v.type != SL_SF_STRING || !sl_sf_string_copy(&m->v, name, SLUICE_CLIENT_NAME_MAX))
        return false;
    partition[0] = '\0';
    const sl_sf_value *pk = sl_sf_param_get(m, "pk");
    if (pk != NULL) {
        if (pk->type != SL_SF_BYTES || pk->len >= SLUICE_CLIENT_NAME_MAX) return false;
        memcpy(partition, pk->p, pk->len);
        partition[pk->len] = '\0';
    }
    return true;
}

static bool nonneg_int(const sl_sf_value *v, int64_t *out) {
    if (v == NULL || v->type != SL_SF_INTEGER || v->integer < 0) return false;
    *out = v->integer;
    return true;
}

int sluice_ratelimit_parse_policy(const char *value, size_t len, sluice_ratelimit_policy *out,
                                  size_t cap) {
    if (value == NULL || (out == NULL && cap > 0)) return SLUICE_EINVAL;
    sl_sf_list l;
    sl_sf_member m;
    sl_sf_list_init(&l, value, len);
    int n = 0, rc;
    while ((rc = sl_sf_list_next(&l, &m)) == 1) {
        sluice_ratelimit_policy p;
        memset(&p, 0, sizeof(p));
        int64_t q, w = 0;
        if (!member_ident(&m, p.name, p.partition) || !nonneg_int(sl_sf_param_get(&m, "q"), &q))
            continue;
        const sl_sf_value *wv = sl_sf_param_get(&m, "w");
        if (wv != NULL && (!nonneg_int(wv, &w) || w == 0)) continue; /* w is > 0 when given */
        const sl_sf_value *qu = sl_sf_param_get(&m, "qu");
        if (qu != NULL) {
            if (qu->type != SL_SF_STRING || !sl_sf_string_copy(qu, p.unit, sizeof(p.unit)))
                continue;
        } else {
            strcpy(p.unit, "requests");
        }
        p.quota = (uint64_t)q;
        p.window_s = w;
        if ((size_t)n < cap) out[n] = p;
        n++;
    }
    return rc < 0 ? SLUICE_EINVAL : n;
}

int sluice_ratelimit_parse(const char *value, size_t len, sluice_ratelimit_item *out,
                           size_t cap) {
    if (value == NULL || (out == NULL && cap > 0)) return SLUICE_EINVAL;
    sl_sf_list l;
    sl_sf_member m;
    sl_sf_list_init(&l, value, len);
    int n = 0, rc;
    while ((rc = sl_sf_list_next(&l, &m)) == 1) {
        sluice_ratelimit_item it;
        memset(&it, 0, sizeof(it));
        int64_t r, t = -1;
        if (!member_ident(&m, it.name, it.partition) || !nonneg_int(sl_sf_param_get(&m, "r"), &r))
            continue;
        const sl_sf_value *tv = sl_sf_param_get(&m, "t");
        if (tv != NULL && !nonneg_int(tv, &t)) continue;
        it.remaining = (uint64_t)r;
        it.reset_s = t;
        if ((size_t)n < cap) out[n] = it;
        n++;
    }
    return rc < 0 ? SLUICE_EINVAL : n;
}

/* ---- Retry-After ---------------------------------------------------------------------- */

static const char *const MONTHS[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const DAYS[7] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *const LONG_DAYS[7] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                         "Friday", "Saturday", "Sunday"};

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

typedef struct cur {
    const char *p, *end;
} cur;

static bool lit(cur *c, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0) return false;
    c->p += n;
    return true;
}

static bool digits(cur *c, int n, int *out) {
    if (c->end - c->p < n) return false;
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (c->p[i] < '0' || c->p[i] > '9') return false;
        v = v * 10 + (c->p[i] - '0');
    }
    c->p += n;
    *out = v;
    return true;
}

static bool month(cur *c, int *m) {
    for (int i = 0; i < 12; i++)
        if (lit(c, MONTHS[i])) {
            *m = i + 1;
            return true;
        }
    return false;
}

static bool hms(cur *c, int *h, int *mi, int *s) {
    return digits(c, 2, h) && lit(c, ":") && digits(c, 2, mi) && lit(c, ":") && digits(c, 2, s);
}

static int day_index(cur *c, const char *const *names) {
    for (int i = 0; i < 7; i++)
        if (lit(c, names[i])) return i;
    return -1;
}

/* IMF-fixdate, RFC 850 or asctime (RFC 9110 5.6.7) into epoch seconds. */
static bool http_date(const char *v, size_t len, int64_t *epoch_s) {
    cur c = {v, v + len};
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
    cur save = c;
    if (day_index(&c, DAYS) >= 0 && lit(&c, ", ")) {
        /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
        if (!(digits(&c, 2, &d) && lit(&c, " ") && month(&c, &mo) && lit(&c, " ") &&
              digits(&c, 4, &y) && lit(&c, " ") && hms(&c, &h, &mi, &s) && lit(&c, " GMT")))
            return false;
    } else {
        c = save;
        if (day_index(&c, LONG_DAYS) >= 0 && lit(&c, ", ")) {
            /* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT; a two-digit year more than 50 years
             * ahead of now would be read in the past century (RFC 9110), here simply
             * 1970-2069, which covers every date such a header can still mean */
            if (!(digits(&c, 2, &d) && lit(&c, "-") && month(&c, &mo) && lit(&c, "-") &&
                  digits(&c, 2, &y) && lit(&c, " ") && hms(&c, &h, &mi, &s) && lit(&c, " GMT")))
                return false;
            y += y < 70 ? 2000 : 1900;
        } else {
            c = save;
            /* asctime: Sun Nov  6 08:49:37 1994 */
            if (!(day_index(&c, DAYS) >= 0 && lit(&c, " ") && month(&c, &mo) && lit(&c, " ")))
                return false;
            if (c.p < c.end && *c.p == ' ') {
                c.p++;
                if (!digits(&c, 1, &d)) return false;
            } else if (!digits(&c, 2, &d)) {
                return false;
            }
            if (!(lit(&c, " ") && hms(&c, &h, &mi, &s) && lit(&c, " ") && digits(&c, 4, &y)))
                return false;
        }
    }
    if (c.p != c.end || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return false;
    *epoch_s = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    return true;
}

int sluice_client_retry_after(const char *value, size_t len, int64_t now_wall_ns,
                              int64_t *delay_ns) {
    if (value == NULL || delay_ns == NULL) return SLUICE_EINVAL;
    while (len > 0 && (*value == ' ' || *value == '\t')) value++, len--;
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t')) len--;
    if (len == 0) return SLUICE_EINVAL;
    if (value[0] >= '0' && value[0] <= '9') {
        int64_t s = 0;
        for (size_t i = 0; i < len; i++) {
            if (value[i] < '0' || value[i] > '9') return SLUICE_EINVAL;
            /* an absurd delay is still a delay: saturate at ~292 years */
            if (s < INT64_MAX / NS_PER_S / 10) s = s * 10 + (value[i] - '0');
            else s = INT64_MAX / NS_PER_S;
        }
        *delay_ns = s * NS_PER_S;
        return SLUICE_OK;
    }
    int64_t at;
    if (!http_date(value, len, &at)) return SLUICE_EINVAL;
    int64_t now_s = now_wall_ns / NS_PER_S;
    int64_t d = at - now_s;
    if (d < 0) d = 0;
    if (d > INT64_MAX / NS_PER_S) d = INT64_MAX / NS_PER_S;
    /* the date has whole seconds: wait until it has passed, not until now's second ends */
    int64_t ns = d * NS_PER_S - (now_wall_ns - now_s * NS_PER_S);
    *delay_ns = ns > 0 ? ns : 0;
    return SLUICE_OK;
}

/* ---- one response's fields -------------------------------------------------------------- */

void sluice_client_info_init(sluice_ratelimit_info *info) {
    if (info == NULL) return;
    memset(info, 0, sizeof(*info));
    info->retry_after_ns = -1;
}

static bool name_is(const char *n, size_t len, const char *want) {
    size_t wl = strlen(want);
    if (len != wl) return false;
    for (size_t i = 0; i < len; i++) {
        char a = n[i], b = want[i];
        if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
        if (a != b) return false;
    }
    return true;
}

/* A legacy numeric field: the first list member's integer ("10, 10;w=1" -> 10 with w=1
 * from the first member that has one). Lenient on purpose: these fields predate
 * structured fields and servers write them loosely. */
static bool legacy_number(const char *v, size_t len, uint64_t *out, int64_t *window_s) {
    sl_sf_list l;
    sl_sf_member m;
    sl_sf_list_init(&l, v, len);
    bool have = false;
    int rc;
    while ((rc = sl_sf_list_next(&l, &m)) == 1) {
        if (m.v.type != SL_SF_INTEGER || m.v.integer < 0) return false;
        if (!have) *out = (uint64_t)m.v.integer;
        have = true;
        const sl_sf_value *w = sl_sf_param_get(&m, "w");
        if (window_s != NULL && w != NULL && w->type == SL_SF_INTEGER && w->integer > 0 &&
            *window_s == 0)
            *window_s = w->integer;
    }
    return rc == 0 && have;
}

/* A legacy reset: delta seconds, unless it looks like an epoch (seconds from 1e9, ms from
 * 1e12), which is turned into a delta from now. */
static int64_t legacy_reset(uint64_t v, int64_t now_wall_ns) {
    int64_t now_s = now_wall_ns / NS_PER_S;
    if (v >= UINT64_C(1000000000000)) {
        int64_t at_s = (int64_t)(v / 1000 + (v % 1000 != 0));
        return at_s > now_s ? at_s - now_s : 0;
    }
    if (v >= UINT64_C(1000000000)) return (int64_t)v > now_s ? (int64_t)v - now_s : 0;
    return (int64_t)v;
}

int sluice_client_info_header(sluice_ratelimit_info *info, const char *name, size_t name_len,
                              const char *value, size_t value_len, int64_t now_wall_ns) {
    if (info == NULL || name == NULL || value == NULL) return 0;
    if (name_is(name, name_len, "ratelimit-policy")) {
        if (info->bad_policy_line) return 1;
        size_t room = SLUICE_CLIENT_MAX_POLICIES - info->n_policies;
        int n = sluice_ratelimit_parse_policy(value, value_len,
                                              info->policies + info->n_policies, room);
        if (n < 0) {
            /* one bad line invalidates the whole (combined) field */
            info->bad_policy_line = 1;
            info->n_policies = 0;
            info->invalid |= SLUICE_RL_BAD_POLICY;
        } else {
            info->n_policies += (size_t)n < room ? (size_t)n : room;
        }
        return 1;
    }
    if (name_is(name, name_len, "ratelimit")) {
        if (info->bad_item_line) return 1;
        size_t room = SLUICE_CLIENT_MAX_POLICIES - info->n_items;
        int n = sluice_ratelimit_parse(value, value_len, info->items + info->n_items, room);
        if (n < 0) {
            info->bad_item_line = 1;
            info->n_items = 0;
            info->invalid |= SLUICE_RL_BAD_RATELIMIT;
        } else {
            info->n_items += (size_t)n < room ? (size_t)n : room;
        }
        return 1;
    }
    if (name_is(name, name_len, "retry-after")) {
        int64_t d;
        if (sluice_client_retry_after(value, value_len, now_wall_ns, &d) == SLUICE_OK) {
            info->has_retry_after = 1;
            info->retry_after_ns = d;
        } else {
            info->invalid |= SLUICE_RL_BAD_RETRY_AFTER;
        }
        return 1;
    }
    static const char *const fields[2][3][2] = {
        {{"ratelimit-limit", NULL}, {"ratelimit-remaining", NULL}, {"ratelimit-reset", NULL}},
        {{"x-ratelimit-limit", "x-rate-limit-limit"},
         {"x-ratelimit-remaining", "x-rate-limit-remaining"},
         {"x-ratelimit-reset", "x-rate-limit-reset"}}};
    for (int src = 0; src < 2; src++)
        for (int f = 0; f < 3; f++)
            for (int alt = 0; alt < 2; alt++) {
                const char *want = fields[src][f][alt];
                if (want == NULL || !name_is(name, name_len, want)) continue;
                uint64_t v = 0;
                int64_t w = info->legacy_window_s[src];
                if (!legacy_number(value, value_len, &v, f == 0 ? &w : NULL)) {
                    info->invalid |= SLUICE_RL_BAD_LEGACY;
                    return 1;
                }
                info->legacy_has[src][f] = 1;
                if (f == 0) {
                    info->legacy_limit[src] = v;
                    info->legacy_window_s[src] = w;
                } else if (f == 1) {
                    info->legacy_remaining[src] = v;
                } else {
                    info->legacy_reset_s[src] = legacy_reset(v, now_wall_ns);
                }
                return 1;
            }
    return 0;
}

void sluice_client_info_finish(sluice_ratelimit_info *info) {
    if (info == NULL) return;
    if (info->n_policies > 0 || info->n_items > 0) {
        info->source = SLUICE_RL_DRAFT11;
        return;
    }
    for (int src = 0; src < 2; src++) {
        const int *has = info->legacy_has[src];
        if (!has[0] && !has[1]) continue;
        info->source = src == 0 ? SLUICE_RL_DRAFT03 : SLUICE_RL_X;
        if (has[0]) {
            sluice_ratelimit_policy *p = &info->policies[info->n_policies++];
            memset(p, 0, sizeof(*p));
            p->quota = info->legacy_limit[src];
            p->window_s = info->legacy_window_s[src];
            strcpy(p->unit, "requests");
        }
        if (has[1]) {
            sluice_ratelimit_item *it = &info->items[info->n_items++];
            memset(it, 0, sizeof(*it));
            it->remaining = info->legacy_remaining[src];
            it->reset_s = has[2] ? info->legacy_reset_s[src] : -1;
        }
        return;
    }
    info->source = SLUICE_RL_NONE;
}
