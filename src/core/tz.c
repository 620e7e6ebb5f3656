/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tz.c -- IANA time zones read from TZif files (RFC 8536, v1-v4) and calendar periods.
 * Invariants: every zone is immutable once parsed; transition times are strictly
 * ascending; every offset is within +-SL_TZ_MAXOFF. Zones are loaded at config time into
 * a process-wide cache; offsets and periods are then allocation-free and lock-free.
 * Civil dates use our own proleptic-Gregorian arithmetic (libc's localtime and the TZ
 * environment variable are process-global and not thread-safe). Units: UTC seconds.
 */
#include "tz.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tz_posix.h"

/* No real zone is more than 26 h from UTC (RFC 8536 recommends -89999..93599 s). The
 * bound keeps the searches below short and their arithmetic far from overflow. */
#define SL_TZ_MAXOFF (26 * 3600)
/* Instants are clamped to +-2^55 s (about a billion years) before any calendar math. */
#define SL_TZ_TMAX (INT64_C(1) << 55)
#define SL_TZ_FILE_MAX (1u << 20)
#define SL_TZ_NAME_MAX 255

struct sl_tz {
    const char *name;
    uint32_t timecnt;
    const int64_t *trans;  /* [timecnt] strictly ascending */
    const int32_t *off;    /* [timecnt] offset in effect from trans[i] on */
    int32_t utoff0;        /* before the first transition (time type 0) */
    int32_t maxoff;        /* the largest offset it ever uses: local(u) <= u + maxoff */
    bool has_rule;         /* footer present and non-empty: used after the last transition */
    sl_tz_posix rule;
};

/* ---- civil dates (Howard Hinnant's days_from_civil / civil_from_days) ----------- */

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t sl_days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void sl_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    int64_t era = floor_div(z, 146097);
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static unsigned month_days(int64_t y, unsigned m) {
    static const unsigned char len[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : len[m - 1];
}

static int64_t clamp_t(int64_t t) {
    return t < -SL_TZ_TMAX ? -SL_TZ_TMAX : t > SL_TZ_TMAX ? SL_TZ_TMAX : t;
}

/* ---- POSIX TZ rules ------------------------------------------------------------- */

typedef struct cursor {
    const char *s;
    size_t n, i;
} cursor;

static int cur_peek(const cursor *c) { return c->i < c->n ? (unsigned char)c->s[c->i] : -1; }
static bool is_digit(int ch) { return ch >= '0' && ch <= '9'; }
static bool is_alpha(int ch) { return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z'); }

/* A zone abbreviation: three or more letters, or <...> of letters, digits, + and -. */
static int parse_abbr(cursor *c) {
    size_t len = 0;
    if (cur_peek(c) == '<') {
        c->i++;
        for (int ch; (ch = cur_peek(c)) != '>'; c->i++, len++)
            if (!(is_alpha(ch) || is_digit(ch) || ch == '+' || ch == '-')) return -1;
        c->i++;
    } else {
        while (is_alpha(cur_peek(c))) c->i++, len++;
    }
    return len >= 3 ? 0 : -1;
}

static int parse_uint(cursor *c, int max_digits, int max, int *out) {
    int v = 0, k = 0;
    while (k < max_digits && is_digit(cur_peek(c))) v = v * 10 + (c->s[c->i++] - '0'), k++;
    if (k == 0 || v > max) return -1;
    *out = v;
    return 0;
}

/* [+|-]hh[:mm[:ss]], hours at most max_h; the result in seconds, signed as written. */
static int parse_hms(cursor *c, int max_h, int32_t *out) {
    int sign = 1, h, m = 0, s = 0;
    if (cur_peek(c) == '+' || cur_peek(c) == '-') sign = c->s[c->i++] == '-' ? -1 : 1;
    if (parse_uint(c, 3, max_h, &h) != 0) return -1;
    if (cur_peek(c) == ':') {
        c->i++;
        if (parse_uint(c, 2, 59, &m) != 0) return -1;
        if (cur_peek(c) == ':') {
            c->i++;
            if (parse_uint(c, 2, 59, &s) != 0) return -1;
        }
    }
    *out = sign * (h * 3600 + m * 60 + s);
    return 0;
}

static int parse_rule(cursor *c, sl_tz_rule *r) {
    int a, b, d;
    memset(r, 0, sizeof(*r));
    if (cur_peek(c) == 'J') {
        c->i++;
        if (parse_uint(c, 3, 365, &a) != 0 || a < 1) return -1;
        r->kind = 'J', r->day = (uint16_t)a;
    } else if (cur_peek(c) == 'M') {
        c->i++;
        if (parse_uint(c, 2, 12, &a) != 0 || a < 1 || cur_peek(c) != '.') return -1;
        c->i++;
        if (parse_uint(c, 1, 5, &b) != 0 || b < 1 || cur_peek(c) != '.') return -1;
        c->i++;
        if (parse_uint(c, 1, 6, &d) != 0) return -1;
        r->kind = 'M', r->month = (uint8_t)a, r->week = (uint8_t)b, r->wday = (uint8_t)d;
    } else {
        if (parse_uint(c, 3, 365, &a) != 0) return -1;
        r->kind = 'D', r->day = (uint16_t)a;
    }
    r->time_s = 2 * 3600;
    if (cur_peek(c) == '/') {
        c->i++;
        /* RFC 8536 3.3.1: rule times may be signed and reach 167 hours. */
        if (parse_hms(c, 167, &r->time_s) != 0) return -1;
    }
    return 0;
}

int sl_tz_posix_parse(const char *s, size_t len, sl_tz_posix *out) {
    cursor c = {s, len, 0};
    int32_t v;
    memset(out, 0, sizeof(*out));
    if (s == NULL || parse_abbr(&c) != 0 || parse_hms(&c, 24, &v) != 0) return -1;
    out->std_utoff = -v; /* POSIX counts hours west of Greenwich */
    if (c.i == c.n) return 0;
    if (parse_abbr(&c) != 0) return -1;
    out->has_dst = true;
    out->dst_utoff = out->std_utoff + 3600;
    int ch = cur_peek(&c);
    if (ch == '+' || ch == '-' || is_digit(ch)) {
        if (parse_hms(&c, 24, &v) != 0) return -1;
        out->dst_utoff = -v;
    }
    if (c.i == c.n) { /* tzcode's default rule (US since 2007) */
        out->start = (sl_tz_rule){.kind = 'M', .month = 3, .week = 2, .wday = 0, .time_s = 7200};
        out->end = (sl_tz_rule){.kind = 'M', .month = 11, .week = 1, .wday = 0, .time_s = 7200};
        return 0;
    }
    if (cur_peek(&c) != ',') return -1;
    c.i++;
    if (parse_rule(&c, &out->start) != 0 || cur_peek(&c) != ',') return -1;
    c.i++;
    if (parse_rule(&c, &out->end) != 0) return -1;
    return c.i == c.n ? 0 : -1;
}

/* The UTC instant at which rule `r` fires in year y; `utoff` is the offset in effect
 * just before it (the rule's time is wall time in that offset). */
static int64_t rule_instant(const sl_tz_rule *r, int64_t y, int32_t utoff) {
    int64_t day;
    if (r->kind == 'J') {
        day = sl_days_from_civil(y, 1, 1) + r->day - 1 + (is_leap(y) && r->day >= 60);
    } else if (r->kind == 'D') {
        day = sl_days_from_civil(y, 1, 1) + r->day;
    } else {
        int64_t first = sl_days_from_civil(y, r->month, 1);
        int wd_first = (int)(((first % 7) + 11) % 7); /* 1970-01-01 was a Thursday (4) */
        unsigned dom = 1 + (unsigned)((r->wday - wd_first + 7) % 7) + (r->week - 1u) * 7;
        if (dom > month_days(y, r->month)) dom -= 7;
        day = first + dom - 1;
    }
    return day * 86400 + r->time_s - utoff;
}

/* The rule's changes of years y-2..y+2, where y is the year of t in standard time:
 * with rule times of up to +-167 h, the change in effect at t and the next one after it
 * are always among them. Each change is (instant, into_dst). */
static int rule_events(const sl_tz_posix *p, int64_t t, int64_t ev[10], bool dst[10]) {
    int64_t y;
    unsigned m, d;
    sl_civil_from_days(floor_div(t + p->std_utoff, 86400), &y, &m, &d);
    int n = 0;
    for (int64_t yy = y - 2; yy <= y + 2; yy++) {
        ev[n] = rule_instant(&p->start, yy, p->std_utoff), dst[n++] = true;
        ev[n] = rule_instant(&p->end, yy, p->dst_utoff), dst[n++] = false;
    }
    return n;
}

/* The offset at utc_s and, in *end, the first change after it (INT64_MAX: none). */
static int32_t posix_piece(const sl_tz_posix *p, int64_t utc_s, int64_t *end) {
    *end = INT64_MAX;
    if (!p->has_dst) return p->std_utoff;
    int64_t t = clamp_t(utc_s), ev[10], best = INT64_MIN;
    bool dst[10], in_dst = false;
    int n = rule_events(p, t, ev, dst);
    /* The latest change at or before t decides; at a tie the change into DST wins, so
     * "DST all year" rules (e.g. "EST5EDT,0/0,J365/25", RFC 8536) stay in DST. */
    for (int i = 0; i < n; i++) {
        if (ev[i] <= t && (ev[i] > best || (ev[i] == best && dst[i]))) best = ev[i], in_dst = dst[i];
        if (ev[i] > t && ev[i] < *end && utc_s < SL_TZ_TMAX) *end = ev[i];
    }
    return in_dst ? p->dst_utoff : p->std_utoff;
}

int32_t sl_tz_posix_offset(const sl_tz_posix *p, int64_t utc_s) {
    int64_t end;
    return posix_piece(p, utc_s, &end);
}

int64_t sl_tz_posix_next(const sl_tz_posix *p, int64_t utc_s) {
    int64_t end;
    posix_piece(p, utc_s, &end);
    return end;
}

/* ---- TZif (RFC 8536) ----------------------------------------------------------- */

typedef struct tzif_header {
    uint8_t version; /* 0 (v1), '2', '3', '4' */
    uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
} tzif_header;

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const uint8_t *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

#define TZIF_HEADER_LEN 44

static int read_header(const uint8_t *buf, size_t len, size_t at, tzif_header *h) {
    if (len < at || len - at < TZIF_HEADER_LEN) return -1;
    const uint8_t *p = buf + at;
    if (memcmp(p, "TZif", 4) != 0) return -1;
    h->version = p[4];
    if (h->version != 0 && (h->version < '2' || h->version > '4')) return -1;
    h->isutcnt = be32(p + 20), h->isstdcnt = be32(p + 24), h->leapcnt = be32(p + 28);
    h->timecnt = be32(p + 32), h->typecnt = be32(p + 36), h->charcnt = be32(p + 40);
    return 0;
}

/* Bytes of the data block after a header; 64-bit arithmetic cannot overflow here
 * (each count < 2^32, each record <= 12 bytes). */
static uint64_t block_len(const tzif_header *h, unsigned tsize) {
    return (uint64_t)h->timecnt * (tsize + 1) + (uint64_t)h->typecnt * 6 + h->charcnt +
           (uint64_t)h->leapcnt * (tsize + 4) + h->isstdcnt + h->isutcnt;
}

sl_tz *sl_tz_parse(const uint8_t *buf, size_t len, const char *name, int *err) {
    int dummy;
    if (err == NULL) err = &dummy;
    *err = SLUICE_ECORRUPT;
    if (name == NULL) name = "";
    size_t name_len = strnlen(name, SL_TZ_NAME_MAX + 1);
    if (buf == NULL || name_len > SL_TZ_NAME_MAX) {
        *err = SLUICE_EINVAL;
        return NULL;
    }
    tzif_header h;
    if (read_header(buf, len, 0, &h) != 0) return NULL;
    unsigned tsize = 4;
    size_t at = TZIF_HEADER_LEN;
    if (h.version != 0) { /* skip the 32-bit block: v2+ readers use the 64-bit one */
        uint64_t skip = block_len(&h, 4);
        if (skip > len - at) return NULL;
        at += (size_t)skip;
        tzif_header h2;
        if (read_header(buf, len, at, &h2) != 0 || h2.version != h.version) return NULL;
        h = h2;
        at += TZIF_HEADER_LEN;
        tsize = 8;
    }
    if (h.typecnt == 0 || h.typecnt > 256 || h.charcnt == 0 ||
        (h.isutcnt != 0 && h.isutcnt != h.typecnt) || (h.isstdcnt != 0 && h.isstdcnt != h.typecnt))
        return NULL;
    uint64_t blen = block_len(&h, tsize);
    if (blen > len - at) return NULL;

    const uint8_t *times = buf + at;
    const uint8_t *idx = times + (size_t)h.timecnt * tsize;
    const uint8_t *types = idx + h.timecnt;
    const uint8_t *flags = types + (size_t)h.typecnt * 6 + h.charcnt + (size_t)h.leapcnt * (tsize + 4);
    int32_t utoff[256], maxoff = INT32_MIN;
    for (uint32_t i = 0; i < h.typecnt; i++) {
        const uint8_t *tt = types + (size_t)i * 6;
        utoff[i] = (int32_t)be32(tt);
        if (utoff[i] < -SL_TZ_MAXOFF || utoff[i] > SL_TZ_MAXOFF || tt[4] > 1 || tt[5] >= h.charcnt)
            return NULL;
        if (utoff[i] > maxoff) maxoff = utoff[i];
    }
    for (uint32_t i = 0; i < h.isstdcnt + h.isutcnt; i++)
        if (flags[i] > 1) return NULL;
    /* Leap-second records are validated for size only: sluice counts POSIX time, so
     * the "right/" zones, whose times include leap seconds, are off by those seconds. */

    sl_tz_posix rule = {0};
    bool has_rule = false;
    if (tsize == 8) { /* footer: "\n" POSIX-TZ-string "\n" */
        size_t f = at + (size_t)blen;
        if (f >= len || buf[f] != '\n') return NULL;
        const uint8_t *nl = memchr(buf + f + 1, '\n', len - f - 1);
        if (nl == NULL) return NULL;
        size_t slen = (size_t)(nl - (buf + f + 1));
        if (slen > 0) {
            if (sl_tz_posix_parse((const char *)buf + f + 1, slen, &rule) != 0) return NULL;
            has_rule = true;
            if (rule.std_utoff > maxoff) maxoff = rule.std_utoff;
            if (rule.has_dst && rule.dst_utoff > maxoff) maxoff = rule.dst_utoff;
        }
    }

    size_t n = h.timecnt;
    sl_tz *tz = malloc(sizeof(*tz) + n * (sizeof(int64_t) + sizeof(int32_t)) + name_len + 1);
    if (tz == NULL) {
        *err = SLUICE_ENOMEM;
        return NULL;
    }
    int64_t *trans = (int64_t *)(tz + 1);
    int32_t *off = (int32_t *)(trans + n);
    char *nm = (char *)(off + n);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *tp = times + i * tsize;
        trans[i] = tsize == 8 ? be64(tp) : (int64_t)(int32_t)be32(tp);
        if ((i > 0 && trans[i] <= trans[i - 1]) || idx[i] >= h.typecnt) {
            free(tz);
            return NULL;
        }
        off[i] = utoff[idx[i]];
    }
    memcpy(nm, name, name_len);
    nm[name_len] = '\0';
    *tz = (sl_tz){.name = nm, .timecnt = (uint32_t)n, .trans = trans, .off = off,
                  .utoff0 = utoff[0], .maxoff = maxoff, .has_rule = has_rule, .rule = rule};
    *err = SLUICE_OK;
    return tz;
}

void sl_tz_free(sl_tz *tz) { free(tz); }

const char *sl_tz_name(const sl_tz *tz) { return tz ? tz->name : "UTC"; }

/* ---- offsets ------------------------------------------------------------------- */

/* Index of the last transition <= t; requires trans[0] <= t. */
static uint32_t last_at_or_before(const sl_tz *tz, int64_t t) {
    uint32_t lo = 0, hi = tz->timecnt; /* trans[lo] <= t < trans[hi] (hi may be the end) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tz->trans[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* The offset in effect at t and, in *end, the first instant > t at which it may
 * change (INT64_MAX: never): one table search or one evaluation of the rule.
 * RFC 8536: type 0 before the first transition, the footer from the last one on (or,
 * with no transitions, everywhere), else the last type. */
static int32_t piece(const sl_tz *tz, int64_t t, int64_t *end) {
    uint32_t n = tz->timecnt;
    if (n == 0 || t >= tz->trans[n - 1]) {
        if (tz->has_rule) return posix_piece(&tz->rule, t, end);
        *end = INT64_MAX;
        return n ? tz->off[n - 1] : tz->utoff0;
    }
    if (t < tz->trans[0]) {
        *end = tz->trans[0];
        return tz->utoff0;
    }
    uint32_t i = last_at_or_before(tz, t);
    *end = tz->trans[i + 1];
    return tz->off[i];
}

int32_t sl_tz_offset(const sl_tz *tz, int64_t utc_s) {
    int64_t end;
    return tz ? piece(tz, utc_s, &end) : 0;
}

/* The first instant whose local time is >= the local time `L` (seconds of local
 * civil time since the epoch). Local time is not monotonic (clocks go back), so this
 * walks the offset's constant pieces from the last instant that is surely too early;
 * in each piece local time grows with UTC. Periods begin at first_local(00:00...),
 * which makes a skipped local midnight begin the day at the first instant after it
 * and makes every period contiguous with the next. */
static int64_t first_local(const sl_tz *tz, int64_t L) {
    if (tz == NULL) return L;
    int64_t u = L - tz->maxoff; /* local(u) <= L here, and < L at every earlier instant */
    for (;;) {
        int64_t end, c = L - piece(tz, u, &end);
        if (c < u) c = u;
        if (c < end) return c;
        u = end;
    }
}

/* Start (local seconds) of the local period containing local second `l`. */
static int64_t local_floor(sluice_period p, int64_t l) {
    int64_t days = floor_div(l, 86400), y;
    unsigned m, d;
    switch (p) {
    case SLUICE_PERIOD_HOUR: return floor_div(l, 3600) * 3600;
    case SLUICE_PERIOD_WEEK: return (days - (((days % 7) + 10) % 7)) * 86400; /* Monday = 0 */
    case SLUICE_PERIOD_MONTH:
        sl_civil_from_days(days, &y, &m, &d);
        return sl_days_from_civil(y, m, 1) * 86400;
    case SLUICE_PERIOD_DAY:
    default: return days * 86400;
    }
}

/* Start (local seconds) of the local period after the one starting at `l`. */
static int64_t local_next(sluice_period p, int64_t l) {
    int64_t y;
    unsigned m, d;
    switch (p) {
    case SLUICE_PERIOD_HOUR: return l + 3600;
    case SLUICE_PERIOD_WEEK: return l + 7 * 86400;
    case SLUICE_PERIOD_MONTH:
        sl_civil_from_days(floor_div(l, 86400), &y, &m, &d);
        return sl_days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) * 86400;
    case SLUICE_PERIOD_DAY:
    default: return l + 86400;
    }
}

/* Why the loop: the period containing t is the last one whose start is <= t. Its
 * local start is normally that of t's local time, but just after clocks go back,
 * t's local time can lie in a period that already ended (and a period skipped by a
 * jump forward has no instants); both are resolved by stepping forward. An unknown
 * period is treated as a day. */
static void hour_bounds(const sl_tz *tz, int64_t t, int64_t *start, int64_t *next);

static void period_bounds(const sl_tz *tz, sluice_period p, int64_t utc_s, int64_t *start,
                          int64_t *next) {
    int64_t t = clamp_t(utc_s);
    if (p == SLUICE_PERIOD_HOUR && tz != NULL) {
        hour_bounds(tz, t, start, next);
        return;
    }
    int64_t l = local_floor(p, t + sl_tz_offset(tz, t));
    int64_t s = first_local(tz, l), nx = s;
    for (int i = 0; i < 64; i++) { /* offsets within +-26 h bound the steps */
        int64_t ln = local_next(p, l);
        nx = first_local(tz, ln);
        if (nx > t) break;
        l = ln, s = nx;
    }
    *start = s;
    *next = nx;
}

/* An hour is a real hour: it begins where the local clock shows hh:00:00 in the offset
 * in force, or where the offset changes, and lasts until the next of either. So the
 * hour that repeats when clocks go back is two hours of budget (01:00 EDT and 01:00 EST,
 * 05:00-06:00Z and 06:00-07:00Z in New York), a half-hour change (Lord Howe) cuts the
 * hour it falls in into pieces no longer than an hour, and no period is ever longer than
 * 3600 s (a day or a month still follows the local calendar: 23 or 25 hours). Only a
 * change of offset cuts: a transition that keeps it (a new abbreviation) does not. */
static void hour_bounds(const sl_tz *tz, int64_t t, int64_t *start, int64_t *next) {
    int64_t end;
    int32_t off = piece(tz, t, &end);
    int64_t b = t - (((t + off) % 3600) + 3600) % 3600; /* the last hh:00:00 at this offset */
    /* the latest change of offset in (b, t]: the hour began there instead */
    int64_t s = b, pend;
    int32_t prev = piece(tz, b, &pend);
    for (int i = 0; i < 4100 && pend <= t; i++) { /* at most one change a second */
        int64_t u = pend;
        int32_t o = piece(tz, u, &pend);
        if (o != prev) s = u;
        prev = o;
    }
    /* the first change of offset in (t, b + 3600): the hour ends there */
    int64_t n = b + 3600;
    for (int i = 0; i < 4100 && end < n; i++) {
        int64_t u = end;
        if (piece(tz, u, &end) != off) {
            n = u;
            break;
        }
    }
    *start = s;
    *next = n;
}

int64_t sl_cal_period_start(const sl_tz *tz, sluice_period p, int64_t utc_s) {
    int64_t s, n;
    period_bounds(tz, p, utc_s, &s, &n);
    return s;
}

int64_t sl_cal_period_next(const sl_tz *tz, sluice_period p, int64_t utc_s) {
    int64_t s, n;
    period_bounds(tz, p, utc_s, &s, &n);
    return n;
}

/* ---- the zone cache ------------------------------------------------------------ */

static const sl_tz utc_zone = {.name = "UTC"};

typedef struct tz_entry {
    struct tz_entry *next;
    sl_tz *tz;
} tz_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static tz_entry *cache_head;

/* A relative path of components of [A-Za-z0-9_+-], none empty, "." or "..". */
static bool valid_name(const char *name) {
    size_t len = strnlen(name, SL_TZ_NAME_MAX + 1);
    if (len == 0 || len > SL_TZ_NAME_MAX || name[0] == '/' || name[len - 1] == '/') return false;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        if (!(is_alpha(ch) || is_digit(ch) || ch == '_' || ch == '+' || ch == '-' || ch == '/'))
            return false;
        if (ch == '/' && name[i + 1] == '/') return false;
    }
    return strstr(name, "..") == NULL; /* already excluded by the alphabet; kept explicit */
}

static sl_tz *load_file(const char *name, int *err) {
    const char *dir = getenv("TZDIR");
    if (dir == NULL || dir[0] == '\0') dir = "/usr/share/zoneinfo";
    size_t dlen = strlen(dir), nlen = strlen(name);
    char *path = malloc(dlen + nlen + 2);
    if (path == NULL) {
        *err = SLUICE_ENOMEM;
        return NULL;
    }
    memcpy(path, dir, dlen);
    path[dlen] = '/';
    memcpy(path + dlen + 1, name, nlen + 1);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0) {
        *err = (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) ? SLUICE_ENOTFOUND : SLUICE_EIO;
        return NULL;
    }
    struct stat st;
    uint8_t *buf = NULL;
    sl_tz *tz = NULL;
    if (fstat(fd, &st) != 0) {
        *err = SLUICE_EIO;
    } else if (!S_ISREG(st.st_mode)) {
        *err = SLUICE_ENOTFOUND;
    } else if (st.st_size > SL_TZ_FILE_MAX) {
        *err = SLUICE_ECORRUPT;
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        *err = SLUICE_ENOMEM;
    } else {
        size_t got = 0, want = (size_t)st.st_size;
        while (got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        tz = got == want ? sl_tz_parse(buf, got, name, err) : NULL;
        if (got != want) *err = SLUICE_EIO;
    }
    free(buf);
    close(fd);
    return tz;
}

const sl_tz *sl_tz_get(const char *name, int *err) {
    int dummy;
    if (err == NULL) err = &dummy;
    if (name == NULL || !valid_name(name)) {
        *err = SLUICE_ENOTFOUND;
        return NULL;
    }
    *err = SLUICE_OK;
    if (strcmp(name, "UTC") == 0) return &utc_zone; /* available without tzdata */
    pthread_mutex_lock(&cache_lock);
    for (tz_entry *e = cache_head; e != NULL; e = e->next) {
        if (strcmp(e->tz->name, name) == 0) {
            pthread_mutex_unlock(&cache_lock);
            return e->tz;
        }
    }
    /* Loading under the lock keeps one copy per name; it happens at config time only. */
    sl_tz *tz = load_file(name, err);
    tz_entry *e = tz ? malloc(sizeof(*e)) : NULL;
    if (tz != NULL && e == NULL) {
        sl_tz_free(tz);
        tz = NULL;
        *err = SLUICE_ENOMEM;
    }
    if (e != NULL) {
        e->tz = tz;
        e->next = cache_head;
        cache_head = e;
    }
    pthread_mutex_unlock(&cache_lock);
    return tz;
}
