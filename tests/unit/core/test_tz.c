/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tz.c -- time zones: known DST changes of Europe/Madrid and America/New_York,
 * instants past the TZif table (the POSIX footer), every offset against glibc's own
 * reading of the same files (the test is single-threaded, so TZ/localtime_r are fine
 * here), hand-built v1 and v2 files, malformed files and names refused, POSIX rule
 * strings, and calendar periods across DST, skipped days and repeated midnights.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "t.h"
#include "tz.h"
#include "tz_posix.h"

#define H 3600
#define DAY 86400

/* ---- an obviously-correct civil calendar (loops, no cleverness) ---------------- */

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
static int mdays(int y, int m) {
    static const int len[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : len[m - 1];
}
static int64_t days_of(int y, int m, int d) {
    int64_t days = 0;
    for (int yy = 1970; yy < y; yy++) days += leap(yy) ? 366 : 365;
    for (int yy = y; yy < 1970; yy++) days -= leap(yy) ? 366 : 365;
    for (int mm = 1; mm < m; mm++) days += mdays(y, mm);
    return days + d - 1;
}
/* UTC seconds of a civil UTC time. */
static int64_t U(int y, int m, int d, int hh, int mi, int ss) {
    return days_of(y, m, d) * DAY + hh * H + mi * 60 + ss;
}
/* Day of month of the `week`-th (5 = last) weekday `wd` (0 = Sunday) of y-m. */
static int nth_wday(int y, int m, int week, int wd) {
    int last = 0, n = 0;
    for (int d = 1; d <= mdays(y, m); d++) {
        int w = (int)(((days_of(y, m, d) % 7) + 4 + 7) % 7);
        if (w == wd) {
            last = d;
            if (++n == week) return d;
        }
    }
    return last;
}

static const sl_tz *zone(const char *name) {
    int err = 0;
    const sl_tz *tz = sl_tz_get(name, &err);
    if (tz == NULL) T_FAIL("sl_tz_get(%s): %d (is tzdata installed?)", name, err);
    return tz;
}

/* ---- hand-built TZif files ----------------------------------------------------- */

typedef struct buf {
    uint8_t b[4096];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t n) {
    if (n > 0) memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put32(buf *o, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(o, x, 4);
}
static void put64(buf *o, int64_t v) {
    put32(o, (uint32_t)((uint64_t)v >> 32));
    put32(o, (uint32_t)v);
}
static void put8(buf *o, uint8_t v) { put(o, &v, 1); }

typedef struct ttype {
    int32_t utoff;
    uint8_t isdst, idx;
} ttype;

/* One header + data block: times of size tsize (4 or 8), no leap seconds, no flags. */
static void put_block(buf *o, char version, unsigned tsize, const int64_t *times, const uint8_t *idx,
                      uint32_t timecnt, const ttype *types, uint32_t typecnt, const char *chars,
                      uint32_t charcnt) {
    put(o, "TZif", 4);
    put8(o, (uint8_t)version);
    for (int i = 0; i < 15; i++) put8(o, 0);
    put32(o, 0), put32(o, 0), put32(o, 0);
    put32(o, timecnt), put32(o, typecnt), put32(o, charcnt);
    for (uint32_t i = 0; i < timecnt; i++) {
        if (tsize == 8) put64(o, times[i]);
        else put32(o, (uint32_t)(int32_t)times[i]);
    }
    put(o, idx, timecnt);
    for (uint32_t i = 0; i < typecnt; i++) {
        put32(o, (uint32_t)types[i].utoff);
        put8(o, types[i].isdst);
        put8(o, types[i].idx);
    }
    put(o, chars, charcnt);
}

/* A v2+ file: a minimal v1 block, the 64-bit block, the footer. */
static void put_v2(buf *o, char version, const int64_t *times, const uint8_t *idx, uint32_t timecnt,
                   const ttype *types, uint32_t typecnt, const char *footer) {
    static const ttype utc = {0, 0, 0};
    o->n = 0;
    put_block(o, version, 4, NULL, NULL, 0, &utc, 1, "", 1);
    put_block(o, version, 8, times, idx, timecnt, types, typecnt, "AAA\0BBB", 8);
    put8(o, '\n');
    put(o, footer, strlen(footer));
    put8(o, '\n');
}

static sl_tz *parse(const buf *o, int *err) { return sl_tz_parse(o->b, o->n, "test", err); }

static void test_madrid(void) {
    const sl_tz *tz = zone("Europe/Madrid");
    if (tz == NULL) return;
    T_EQ_S(sl_tz_name(tz), "Europe/Madrid");
    T_EQ_I(sl_tz_offset(tz, U(2026, 3, 29, 0, 59, 59)), 1 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 3, 29, 1, 0, 0)), 2 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 10, 25, 0, 59, 59)), 2 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 10, 25, 1, 0, 0)), 1 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 7, 1, 12, 0, 0)), 2 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 1, 1, 0, 0, 0)), 1 * H);
    /* Spain kept CET through 1945-46 and used "double summer time" in 1942 (+2). */
    T_EQ_I(sl_tz_offset(tz, U(1942, 7, 1, 0, 0, 0)), 2 * H);
    /* Before 1901, local mean time (-0:14:44). */
    T_EQ_I(sl_tz_offset(tz, U(1890, 1, 1, 0, 0, 0)), -884);
}

static void test_new_york(void) {
    const sl_tz *tz = zone("America/New_York");
    if (tz == NULL) return;
    T_EQ_I(sl_tz_offset(tz, U(2026, 3, 8, 6, 59, 59)), -5 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 3, 8, 7, 0, 0)), -4 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 11, 1, 5, 59, 59)), -4 * H);
    T_EQ_I(sl_tz_offset(tz, U(2026, 11, 1, 6, 0, 0)), -5 * H);
    /* 2006 still used the old rule (first Sunday of April). */
    T_EQ_I(sl_tz_offset(tz, U(2006, 4, 2, 6, 59, 59)), -5 * H);
    T_EQ_I(sl_tz_offset(tz, U(2006, 4, 2, 7, 0, 0)), -4 * H);
}

/* 2090 is past the tables of these files: only the footer knows. */
static void test_far_future(void) {
    const sl_tz *mad = zone("Europe/Madrid"), *ny = zone("America/New_York");
    if (mad == NULL || ny == NULL) return;
    int d = nth_wday(2090, 3, 5, 0);
    T_EQ_I(sl_tz_offset(mad, U(2090, 3, d, 0, 59, 59)), 1 * H);
    T_EQ_I(sl_tz_offset(mad, U(2090, 3, d, 1, 0, 0)), 2 * H);
    d = nth_wday(2090, 10, 5, 0);
    T_EQ_I(sl_tz_offset(mad, U(2090, 10, d, 0, 59, 59)), 2 * H);
    T_EQ_I(sl_tz_offset(mad, U(2090, 10, d, 1, 0, 0)), 1 * H);
    d = nth_wday(2090, 3, 2, 0);
    T_EQ_I(sl_tz_offset(ny, U(2090, 3, d, 6, 59, 59)), -5 * H);
    T_EQ_I(sl_tz_offset(ny, U(2090, 3, d, 7, 0, 0)), -4 * H);
    d = nth_wday(2090, 11, 1, 0);
    T_EQ_I(sl_tz_offset(ny, U(2090, 11, d, 5, 59, 59)), -4 * H);
    T_EQ_I(sl_tz_offset(ny, U(2090, 11, d, 6, 0, 0)), -5 * H);
    /* Extremes neither crash nor overflow (UBSan watches). */
    (void)sl_tz_offset(mad, INT64_MAX);
    (void)sl_tz_offset(mad, INT64_MIN);
    (void)sl_cal_period_start(ny, SLUICE_PERIOD_MONTH, INT64_MAX);
    (void)sl_cal_period_next(ny, SLUICE_PERIOD_WEEK, INT64_MIN);
}

/* Whether sl_tz_offset agrees with glibc (TZ already set to `name`) at t. */
static bool agrees(const sl_tz *tz, const char *name, int64_t t) {
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    if (tm.tm_gmtoff == sl_tz_offset(tz, t)) return true;
    T_FAIL("%s at %lld: glibc %ld, sluice %d", name, (long long)t, tm.tm_gmtoff, sl_tz_offset(tz, t));
    return false;
}

/* glibc reads the same TZif files (64-bit data and footer): every offset must agree,
 * from 1850 to 2150, at random instants and around each DST change. */
static void test_against_glibc(void) {
    static const char *zones[] = {"Europe/Madrid", "America/New_York", "Australia/Lord_Howe",
                                  "Asia/Kathmandu", "Pacific/Apia", "America/Havana",
                                  "America/Santiago", "Africa/Casablanca", "Europe/London",
                                  "Asia/Tehran", "Pacific/Chatham", "America/St_Johns"};
    uint64_t seed = t_seed();
    const char *saved = getenv("TZ");
    char *saved_copy = saved ? strdup(saved) : NULL;
    for (size_t z = 0; z < sizeof(zones) / sizeof(zones[0]); z++) {
        const sl_tz *tz = zone(zones[z]);
        if (tz == NULL) continue;
        setenv("TZ", zones[z], 1);
        tzset();
        int bad = 0;
        int64_t lo = U(1850, 1, 1, 0, 0, 0), hi = U(2150, 1, 1, 0, 0, 0);
        for (int i = 0; i < 20000 && bad < 5; i++)
            bad += !agrees(tz, zones[z], lo + (int64_t)(t_rand(&seed) % (uint64_t)(hi - lo)));
        /* every half hour of 2020..2040 (so each side of each change) */
        for (int64_t t = U(2020, 1, 1, 0, 0, 0); t < U(2040, 1, 1, 0, 0, 0) && bad < 5; t += 1800)
            bad += !agrees(tz, zones[z], t);
    }
    if (saved_copy) setenv("TZ", saved_copy, 1);
    else unsetenv("TZ");
    free(saved_copy);
    tzset();
}

static void test_v1_only(void) {
    static const int64_t times[] = {1000, 2000, 3000};
    static const uint8_t idx[] = {1, 0, 1};
    static const ttype types[] = {{3600, 0, 0}, {7200, 1, 4}};
    buf o = {.n = 0};
    put_block(&o, 0, 4, times, idx, 3, types, 2, "AAA\0BBB", 8);
    int err = 0;
    sl_tz *tz = parse(&o, &err);
    T_CHECK(tz != NULL);
    T_EQ_I(err, SLUICE_OK);
    if (tz == NULL) return;
    T_EQ_S(sl_tz_name(tz), "test");
    T_EQ_I(sl_tz_offset(tz, -5000000000), 3600); /* before the first: type 0 */
    T_EQ_I(sl_tz_offset(tz, 999), 3600);
    T_EQ_I(sl_tz_offset(tz, 1000), 7200);
    T_EQ_I(sl_tz_offset(tz, 1999), 7200);
    T_EQ_I(sl_tz_offset(tz, 2000), 3600);
    T_EQ_I(sl_tz_offset(tz, 3000), 7200); /* no footer: the last type forever */
    T_EQ_I(sl_tz_offset(tz, 5000000000), 7200);
    /* local time jumps from 01:16:40 to 02:16:40 at 1000: that is where hour 2 starts;
     * the offset changes back at 2000, which ends it (an hour is never longer than one) */
    T_EQ_I(sl_cal_period_start(tz, SLUICE_PERIOD_HOUR, 1500), 1000);
    T_EQ_I(sl_cal_period_next(tz, SLUICE_PERIOD_HOUR, 1500), 2000);
    sl_tz_free(tz);
}

static void test_v2_footer(void) {
    /* one old transition, then New York's rule from the footer */
    static const int64_t times[] = {-1000000000};
    static const uint8_t idx[] = {1};
    static const ttype types[] = {{-17762, 0, 0}, {-18000, 0, 4}};
    buf o;
    for (char v = '2'; v <= '4'; v++) {
        put_v2(&o, v, times, idx, 1, types, 2, "EST5EDT,M3.2.0,M11.1.0");
        int err = 0;
        sl_tz *tz = parse(&o, &err);
        T_CHECK(tz != NULL);
        if (tz == NULL) continue;
        T_EQ_I(sl_tz_offset(tz, -1000000001), -17762);
        T_EQ_I(sl_tz_offset(tz, U(2026, 3, 8, 6, 59, 59)), -5 * H);
        T_EQ_I(sl_tz_offset(tz, U(2026, 3, 8, 7, 0, 0)), -4 * H);
        T_EQ_I(sl_tz_offset(tz, U(2026, 11, 1, 5, 59, 59)), -4 * H);
        T_EQ_I(sl_tz_offset(tz, U(2026, 11, 1, 6, 0, 0)), -5 * H);
        sl_tz_free(tz);
    }
    /* no transitions at all: the footer rules everywhere */
    put_v2(&o, '3', NULL, NULL, 0, types, 1, "CET-1CEST,M3.5.0,M10.5.0/3");
    sl_tz *tz = parse(&o, NULL);
    T_CHECK(tz != NULL);
    if (tz != NULL) {
        T_EQ_I(sl_tz_offset(tz, U(2026, 3, 29, 0, 59, 59)), 1 * H);
        T_EQ_I(sl_tz_offset(tz, U(2026, 3, 29, 1, 0, 0)), 2 * H);
        T_EQ_I(sl_tz_offset(tz, U(1900, 7, 1, 0, 0, 0)), 2 * H);
        sl_tz_free(tz);
    }
    /* an empty footer: the last type after the table */
    put_v2(&o, '2', times, idx, 1, types, 2, "");
    tz = parse(&o, NULL);
    T_CHECK(tz != NULL);
    if (tz != NULL) {
        T_EQ_I(sl_tz_offset(tz, U(2026, 7, 1, 0, 0, 0)), -5 * H);
        sl_tz_free(tz);
    }
    /* the v1 block of a v2 file is skipped, not trusted */
    put_v2(&o, '2', times, idx, 1, types, 2, "EST5");
    o.b[44 + 0] = 0xff; /* the v1 block's only ttinfo: garbage */
    tz = parse(&o, NULL);
    T_CHECK(tz != NULL);
    if (tz != NULL) {
        T_EQ_I(sl_tz_offset(tz, U(2026, 7, 1, 0, 0, 0)), -5 * H);
        sl_tz_free(tz);
    }
}

static void expect_corrupt(const uint8_t *b, size_t n, const char *what) {
    int err = 0;
    sl_tz *tz = sl_tz_parse(b, n, "bad", &err);
    if (tz != NULL || err != SLUICE_ECORRUPT) T_FAIL("%s: accepted (err %d)", what, err);
    sl_tz_free(tz);
}

static void test_malformed(void) {
    static const int64_t times[] = {1000, 2000};
    static const uint8_t idx[] = {1, 0};
    static const ttype types[] = {{3600, 0, 0}, {7200, 1, 4}};
    buf good, o;
    put_v2(&good, '2', times, idx, 2, types, 2, "CET-1CEST,M3.5.0,M10.5.0/3");
    sl_tz *ok = parse(&good, NULL);
    T_CHECK(ok != NULL);
    sl_tz_free(ok);

    /* every truncation */
    for (size_t n = 0; n < good.n; n++) expect_corrupt(good.b, n, "truncated");
    o = good, o.b[0] = 'X', expect_corrupt(o.b, o.n, "bad magic");
    o = good, o.b[4] = '5', expect_corrupt(o.b, o.n, "unknown version");
    o = good, o.b[4] = '1', expect_corrupt(o.b, o.n, "version '1'");
    size_t h2 = 44 + 6 + 1; /* second header: after the minimal v1 block */
    o = good, o.b[h2 + 4] = '3', expect_corrupt(o.b, o.n, "versions differ");
    o = good, o.b[h2 + 32] = 0x7f, expect_corrupt(o.b, o.n, "timecnt past the end");
    o = good, o.b[h2 + 36] = 0x7f, expect_corrupt(o.b, o.n, "typecnt past the end");
    o = good, o.b[h2 + 43] = 0, o.b[h2 + 42] = 0, expect_corrupt(o.b, o.n, "charcnt 0");
    o = good, o.b[h2 + 39] = 0, expect_corrupt(o.b, o.n, "typecnt 0");
    o = good, o.b[h2 + 31] = 1, expect_corrupt(o.b, o.n, "leapcnt past the end");
    o = good, o.b[h2 + 23] = 1, expect_corrupt(o.b, o.n, "isutcnt not 0 nor typecnt");
    o = good, o.b[36] = 0x7f, expect_corrupt(o.b, o.n, "v1 typecnt past the end");
    size_t data = h2 + 44;
    o = good, o.b[data + 16] = 2, expect_corrupt(o.b, o.n, "type index out of range");
    o = good, o.b[data + 15] = 0xe8, o.b[data + 14] = 0x03, o.b[data + 7] = 0xd0,
    o.b[data + 6] = 0x07, expect_corrupt(o.b, o.n, "times not ascending");
    o = good, o.b[data + 18] = 0x7f, expect_corrupt(o.b, o.n, "utoff out of range");
    o = good, o.b[data + 18 + 4] = 2, expect_corrupt(o.b, o.n, "isdst not 0/1");
    o = good, o.b[data + 18 + 5] = 8, expect_corrupt(o.b, o.n, "designation index past chars");
    size_t foot = data + 16 + 2 + 12 + 8;
    o = good, o.b[foot] = 'x', expect_corrupt(o.b, o.n, "footer without newline");
    o = good, o.b[foot + 1] = '?', expect_corrupt(o.b, o.n, "footer not a TZ string");
    o = good, o.n--, expect_corrupt(o.b, o.n, "footer unterminated");
    expect_corrupt((const uint8_t *)"TZif", 4, "magic only");

    /* every single-byte truncation and bit flip of a real file: never a crash */
    FILE *f = fopen("/usr/share/zoneinfo/America/New_York", "rb");
    if (f != NULL) {
        static uint8_t real[8192];
        size_t n = fread(real, 1, sizeof(real), f);
        fclose(f);
        for (size_t k = 0; k < n; k++) expect_corrupt(real, k, "truncated New_York");
        for (size_t k = 0; k < n; k += 7) {
            real[k] ^= 0x40;
            sl_tz_free(sl_tz_parse(real, n, "flip", NULL));
            real[k] ^= 0x40;
        }
    }
}

static void test_names(void) {
    static const char *bad[] = {"",          "/etc/passwd", "../etc/passwd", "Europe/../../etc/passwd",
                                "Europe//Madrid", "Europe/Madrid/", "Europe/Ma drid", "Europe\\Madrid",
                                "Europe/Madrid.bak", ".", "..", "./UTC", "Europe/Madrid\n",
                                "NoSuch/Zone", "Europe"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int err = 0;
        if (sl_tz_get(bad[i], &err) != NULL || err != SLUICE_ENOTFOUND)
            T_FAIL("name \"%s\" accepted (err %d)", bad[i], err);
    }
    char longname[400];
    memset(longname, 'A', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    int err = 0;
    T_CHECK(sl_tz_get(longname, &err) == NULL && err == SLUICE_ENOTFOUND);
    T_CHECK(sl_tz_get(NULL, &err) == NULL && err == SLUICE_ENOTFOUND);
    /* allowed characters */
    T_CHECK(sl_tz_get("Etc/GMT+5", &err) != NULL);
    T_CHECK(sl_tz_get("America/Port-au-Prince", &err) != NULL);
    T_CHECK(sl_tz_get("America/Argentina/Buenos_Aires", &err) != NULL);
}

static void write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    T_CHECK(f != NULL);
    if (f == NULL) return;
    T_CHECK(fwrite(b, 1, n, f) == n);
    fclose(f);
}

/* TZDIR is honoured, UTC is there without any tzdata, bad files are ECORRUPT and
 * zones are cached (one object per name, shared by threads). */
static void *get_madrid(void *arg) {
    (void)arg;
    return (void *)sl_tz_get("Europe/Madrid", NULL);
}

static void test_tzdir_and_cache(void) {
    char dir[] = "/tmp/sluice-tz-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/Test", dir);
    T_CHECK(mkdir(path, 0700) == 0);
    static const ttype types[] = {{5 * H + 1800, 0, 0}};
    buf o;
    put_v2(&o, '2', NULL, NULL, 0, types, 1, "<+0530>-5:30");
    snprintf(path, sizeof(path), "%s/Test/Zone", dir);
    write_file(path, o.b, o.n);
    snprintf(path, sizeof(path), "%s/Test/Bad", dir);
    write_file(path, o.b, 30);

    const sl_tz *first = get_madrid(NULL); /* cached before TZDIR moves */
    setenv("TZDIR", dir, 1);
    int err = 0;
    const sl_tz *tz = sl_tz_get("Test/Zone", &err);
    T_CHECK(tz != NULL);
    if (tz != NULL) T_EQ_I(sl_tz_offset(tz, 0), 5 * H + 1800);
    T_CHECK(sl_tz_get("Test/Zone", &err) == tz);
    T_CHECK(sl_tz_get("Test/Bad", &err) == NULL);
    T_EQ_I(err, SLUICE_ECORRUPT);
    T_CHECK(sl_tz_get("Asia/Tokyo", &err) == NULL); /* not in this TZDIR */
    T_EQ_I(err, SLUICE_ENOTFOUND);
    const sl_tz *utc = sl_tz_get("UTC", &err);
    T_CHECK(utc != NULL);
    T_EQ_I(err, SLUICE_OK);
    T_EQ_I(sl_tz_offset(utc, 1700000000), 0);
    T_EQ_S(sl_tz_name(utc), "UTC");
    T_EQ_S(sl_tz_name(NULL), "UTC");
    T_CHECK(get_madrid(NULL) == first);
    unsetenv("TZDIR");

    pthread_t th[4];
    void *got[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, get_madrid, NULL);
    for (int i = 0; i < 4; i++) pthread_join(th[i], &got[i]);
    for (int i = 0; i < 4; i++) T_CHECK(got[i] == first && first != NULL);

    snprintf(path, sizeof(path), "%s/Test/Zone", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/Test/Bad", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/Test", dir);
    rmdir(path);
    rmdir(dir);
}

/* ---- POSIX TZ strings ---------------------------------------------------------- */

static int32_t posix_off(const char *s, int64_t t) {
    sl_tz_posix p;
    if (sl_tz_posix_parse(s, strlen(s), &p) != 0) {
        T_FAIL("\"%s\" refused", s);
        return INT32_MIN;
    }
    return sl_tz_posix_offset(&p, t);
}

static void test_posix(void) {
    const char *cet = "CET-1CEST,M3.5.0,M10.5.0/3";
    T_EQ_I(posix_off(cet, U(2026, 3, 29, 0, 59, 59)), 1 * H);
    T_EQ_I(posix_off(cet, U(2026, 3, 29, 1, 0, 0)), 2 * H);
    T_EQ_I(posix_off(cet, U(2026, 10, 25, 0, 59, 59)), 2 * H);
    T_EQ_I(posix_off(cet, U(2026, 10, 25, 1, 0, 0)), 1 * H);
    const char *est = "EST5EDT,M3.2.0,M11.1.0";
    T_EQ_I(posix_off(est, U(2026, 3, 8, 6, 59, 59)), -5 * H);
    T_EQ_I(posix_off(est, U(2026, 3, 8, 7, 0, 0)), -4 * H);
    T_EQ_I(posix_off(est, U(2026, 11, 1, 5, 59, 59)), -4 * H);
    T_EQ_I(posix_off(est, U(2026, 11, 1, 6, 0, 0)), -5 * H);
    T_EQ_I(posix_off("EST5EDT", U(2026, 3, 8, 7, 0, 0)), -4 * H); /* default rule */
    /* southern hemisphere: DST across the new year */
    const char *syd = "AEST-10AEDT,M10.1.0,M4.1.0/3";
    T_EQ_I(posix_off(syd, U(2026, 1, 1, 0, 0, 0)), 11 * H);
    T_EQ_I(posix_off(syd, U(2026, 4, 4, 15, 59, 59)), 11 * H);
    T_EQ_I(posix_off(syd, U(2026, 4, 4, 16, 0, 0)), 10 * H);
    T_EQ_I(posix_off(syd, U(2026, 10, 3, 15, 59, 59)), 10 * H);
    T_EQ_I(posix_off(syd, U(2026, 10, 3, 16, 0, 0)), 11 * H);
    /* quoted names, minutes and seconds, no DST */
    T_EQ_I(posix_off("<+0330>-3:30", 0), 3 * H + 1800);
    T_EQ_I(posix_off("<-03>3", 0), -3 * H);
    T_EQ_I(posix_off("<+0545>-05:45:00", 0), 5 * H + 2700);
    T_EQ_I(posix_off("XXX+1:02:03", 0), -(3600 + 120 + 3));
    /* Jn never counts Feb 29, n counts it; signed and long rule times (RFC 8536 v3) */
    const char *jn = "AAA-2:30:15BBB-3,J60/1:00:00,300/-1";
    for (int y = 2027; y <= 2028; y++) {
        int64_t start = U(y, 3, 1, 1, 0, 0) - (2 * H + 1800 + 15);
        int64_t end = (days_of(y, 1, 1) + 300) * DAY - 1 * H - 3 * H;
        T_EQ_I(posix_off(jn, start - 1), 2 * H + 1815);
        T_EQ_I(posix_off(jn, start), 3 * H);
        T_EQ_I(posix_off(jn, end - 1), 3 * H);
        T_EQ_I(posix_off(jn, end), 2 * H + 1815);
    }
    /* "DST all year" (RFC 8536 3.3.1 example) */
    const char *all = "EST5EDT,0/0,J365/25";
    T_EQ_I(posix_off(all, U(2026, 1, 1, 5, 30, 0)), -4 * H);
    T_EQ_I(posix_off(all, U(2026, 7, 1, 0, 0, 0)), -4 * H);
    T_EQ_I(posix_off(all, U(2026, 12, 31, 23, 0, 0)), -4 * H);
    /* Hour 167 and -167 are accepted, 168 is not. */
    T_CHECK(posix_off("AAA0BBB,M3.5.0/167,M10.5.0/-167", 0) != INT32_MIN);

    sl_tz_posix p;
    T_CHECK(sl_tz_posix_parse(cet, strlen(cet), &p) == 0);
    T_EQ_I(sl_tz_posix_next(&p, U(2026, 1, 1, 0, 0, 0)), U(2026, 3, 29, 1, 0, 0));
    T_EQ_I(sl_tz_posix_next(&p, U(2026, 3, 29, 1, 0, 0)), U(2026, 10, 25, 1, 0, 0));
    T_CHECK(sl_tz_posix_parse("UTC0", 4, &p) == 0);
    T_EQ_I(sl_tz_posix_next(&p, 0), INT64_MAX);
    /* not NUL-terminated: exactly len bytes are read */
    T_CHECK(sl_tz_posix_parse("CET-1CEST,M3.5.0,M10.5.0/3garbage", 26, &p) == 0);

    static const char *bad[] = {
        "",  "CE-1", "CET", "CET-", "CET-1CEST,M3.5.0", "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M3.6.0,M10.5.0", "CET-1CEST,M3.5.7,M10.5.0", "CET-1CEST,M0.5.0,M10.5.0",
        "CET-25", "CET-1CEST,J0,J10", "CET-1CEST,366,J10", "CET-1CEST,M3.5.0/168,M10.5.0",
        "<AB>-1", "<ABC-1", "<AB C>-1", "CET-1 ", "CET-1CEST,M3.5.0,M10.5.0x", "CET-1:60",
        "CET-1:30:60", "CET-1CEST,M3.5.0,", "CET-1CEST,,M10.5.0", "CET-1CEST-25",
        "CET-1CEST;M3.5.0,M10.5.0", "CET-1CEST,M3.5,M10.5.0", "CET-1CEST,M3.5.0/,M10.5.0",
        "CET-1111",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (sl_tz_posix_parse(bad[i], strlen(bad[i]), &p) == 0) T_FAIL("\"%s\" accepted", bad[i]);
    T_CHECK(sl_tz_posix_parse(NULL, 0, &p) != 0);
}

/* ---- calendar periods ---------------------------------------------------------- */

static void check_period(const sl_tz *tz, sluice_period p, int64_t t, int64_t start, int64_t next) {
    int64_t s = sl_cal_period_start(tz, p, t), n = sl_cal_period_next(tz, p, t);
    if (s != start || n != next)
        T_FAIL("period %d at %lld: [%lld, %lld) != [%lld, %lld)", (int)p, (long long)t, (long long)s,
               (long long)n, (long long)start, (long long)next);
}

static void test_periods(void) {
    const sl_tz *mad = zone("Europe/Madrid"), *ny = zone("America/New_York");
    if (mad == NULL || ny == NULL) return;
    /* Madrid: a 23-hour and a 25-hour day */
    check_period(mad, SLUICE_PERIOD_DAY, U(2026, 3, 29, 12, 0, 0), U(2026, 3, 28, 23, 0, 0), U(2026, 3, 29, 22, 0, 0));
    check_period(mad, SLUICE_PERIOD_DAY, U(2026, 10, 25, 12, 0, 0), U(2026, 10, 24, 22, 0, 0), U(2026, 10, 25, 23, 0, 0));
    /* a local hour is a real hour: the hour that repeats is two periods of one hour (CEST
     * then CET); the skipped one does not exist */
    check_period(mad, SLUICE_PERIOD_HOUR, U(2026, 10, 25, 0, 30, 0), U(2026, 10, 25, 0, 0, 0), U(2026, 10, 25, 1, 0, 0));
    check_period(mad, SLUICE_PERIOD_HOUR, U(2026, 10, 25, 1, 30, 0), U(2026, 10, 25, 1, 0, 0), U(2026, 10, 25, 2, 0, 0));
    /* New York 2024-11-03 01:30 EDT (05:30Z) is 05:00-06:00Z, 01:30 EST (06:30Z) 06:00-07:00Z */
    check_period(ny, SLUICE_PERIOD_HOUR, U(2024, 11, 3, 5, 30, 0), U(2024, 11, 3, 5, 0, 0), U(2024, 11, 3, 6, 0, 0));
    check_period(ny, SLUICE_PERIOD_HOUR, U(2024, 11, 3, 6, 30, 0), U(2024, 11, 3, 6, 0, 0), U(2024, 11, 3, 7, 0, 0));
    check_period(ny, SLUICE_PERIOD_HOUR, U(2024, 3, 10, 6, 30, 0), U(2024, 3, 10, 6, 0, 0), U(2024, 3, 10, 7, 0, 0));
    /* Lord Howe goes back half an hour (2024-04-07 02:00 +11 = 15:00Z to 01:30 +10:30): the
     * local hour 01:00 is 14:00-15:00Z, then 01:30-02:00 again (15:00-15:30Z), then 02:00 */
    const sl_tz *lh = zone("Australia/Lord_Howe");
    if (lh != NULL) {
        check_period(lh, SLUICE_PERIOD_HOUR, U(2024, 4, 6, 14, 45, 0), U(2024, 4, 6, 14, 0, 0), U(2024, 4, 6, 15, 0, 0));
        check_period(lh, SLUICE_PERIOD_HOUR, U(2024, 4, 6, 15, 10, 0), U(2024, 4, 6, 15, 0, 0), U(2024, 4, 6, 15, 30, 0));
        check_period(lh, SLUICE_PERIOD_HOUR, U(2024, 4, 6, 15, 30, 0), U(2024, 4, 6, 15, 30, 0), U(2024, 4, 6, 16, 30, 0));
        /* and forward (2024-10-06 02:00 +10:30 = 15:30Z to 02:30 +11): 02:30-03:00 is 30 min */
        check_period(lh, SLUICE_PERIOD_HOUR, U(2024, 10, 5, 15, 0, 0), U(2024, 10, 5, 14, 30, 0), U(2024, 10, 5, 15, 30, 0));
        check_period(lh, SLUICE_PERIOD_HOUR, U(2024, 10, 5, 15, 40, 0), U(2024, 10, 5, 15, 30, 0), U(2024, 10, 5, 16, 0, 0));
        /* no hour in 2024 lasts longer than a real hour */
        int64_t longest = 0;
        for (int64_t u = U(2024, 1, 1, 0, 0, 0); u < U(2025, 1, 1, 0, 0, 0); u += 1800) {
            int64_t len = sl_cal_period_next(lh, SLUICE_PERIOD_HOUR, u) - sl_cal_period_start(lh, SLUICE_PERIOD_HOUR, u);
            if (len > longest) longest = len;
        }
        T_EQ_I(longest, 3600);
    }
    check_period(mad, SLUICE_PERIOD_HOUR, U(2026, 3, 29, 1, 0, 0), U(2026, 3, 29, 1, 0, 0), U(2026, 3, 29, 2, 0, 0));
    check_period(mad, SLUICE_PERIOD_HOUR, U(2026, 3, 29, 0, 59, 59), U(2026, 3, 29, 0, 0, 0), U(2026, 3, 29, 1, 0, 0));
    /* New York */
    check_period(ny, SLUICE_PERIOD_DAY, U(2026, 3, 8, 5, 0, 0), U(2026, 3, 8, 5, 0, 0), U(2026, 3, 9, 4, 0, 0));
    check_period(ny, SLUICE_PERIOD_DAY, U(2026, 3, 8, 4, 59, 59), U(2026, 3, 7, 5, 0, 0), U(2026, 3, 8, 5, 0, 0));
    check_period(ny, SLUICE_PERIOD_DAY, U(2026, 11, 1, 12, 0, 0), U(2026, 11, 1, 4, 0, 0), U(2026, 11, 2, 5, 0, 0));
    /* ISO week across the new year (2026-12-31 is a Thursday) */
    check_period(ny, SLUICE_PERIOD_WEEK, U(2027, 1, 1, 12, 0, 0), U(2026, 12, 28, 5, 0, 0), U(2027, 1, 4, 5, 0, 0));
    check_period(mad, SLUICE_PERIOD_WEEK, U(2026, 3, 29, 12, 0, 0), U(2026, 3, 22, 23, 0, 0), U(2026, 3, 29, 22, 0, 0));
    /* months: leap and non-leap February, December */
    check_period(mad, SLUICE_PERIOD_MONTH, U(2028, 2, 29, 22, 59, 59), U(2028, 1, 31, 23, 0, 0), U(2028, 2, 29, 23, 0, 0));
    check_period(mad, SLUICE_PERIOD_MONTH, U(2027, 2, 28, 23, 0, 0), U(2027, 2, 28, 23, 0, 0), U(2027, 3, 31, 22, 0, 0));
    check_period(ny, SLUICE_PERIOD_MONTH, U(2026, 12, 31, 12, 0, 0), U(2026, 12, 1, 5, 0, 0), U(2027, 1, 1, 5, 0, 0));
    /* UTC (NULL) */
    check_period(NULL, SLUICE_PERIOD_MONTH, U(2100, 2, 28, 1, 0, 0), U(2100, 2, 1, 0, 0, 0), U(2100, 3, 1, 0, 0, 0));
    check_period(NULL, SLUICE_PERIOD_WEEK, U(1969, 12, 31, 0, 0, 0), U(1969, 12, 29, 0, 0, 0), U(1970, 1, 5, 0, 0, 0));
    /* 2090, from the footer */
    int d = nth_wday(2090, 3, 5, 0);
    check_period(mad, SLUICE_PERIOD_DAY, U(2090, 3, d, 12, 0, 0), U(2090, 3, d - 1, 23, 0, 0), U(2090, 3, d, 22, 0, 0));
}

/* Local midnights that do not exist, that come twice, and a day that never was. */
static void test_odd_midnights(void) {
    /* Havana: clocks go from 23:59:59 to 01:00 on the second Sunday of March, so that
     * day starts at the first instant after 00:00 local: 05:00 UTC. */
    const sl_tz *hav = zone("America/Havana");
    if (hav != NULL) {
        check_period(hav, SLUICE_PERIOD_DAY, U(2026, 3, 8, 12, 0, 0), U(2026, 3, 8, 5, 0, 0), U(2026, 3, 9, 4, 0, 0));
        check_period(hav, SLUICE_PERIOD_DAY, U(2026, 3, 8, 4, 59, 59), U(2026, 3, 7, 5, 0, 0), U(2026, 3, 8, 5, 0, 0));
    }
    /* Apia skipped 2011-12-30: the 29th ends when the 31st begins. */
    const sl_tz *apia = zone("Pacific/Apia");
    if (apia != NULL) {
        check_period(apia, SLUICE_PERIOD_DAY, U(2011, 12, 30, 9, 59, 59), U(2011, 12, 29, 10, 0, 0), U(2011, 12, 30, 10, 0, 0));
        check_period(apia, SLUICE_PERIOD_DAY, U(2011, 12, 30, 10, 0, 0), U(2011, 12, 30, 10, 0, 0), U(2011, 12, 31, 10, 0, 0));
    }
    /* Clocks back from 00:30 to 23:30: the day has already begun at the first midnight,
     * and the half hour of "yesterday" that follows belongs to it. */
    static const ttype types[] = {{-3 * H, 0, 0}};
    buf o;
    put_v2(&o, '2', NULL, NULL, 0, types, 1, "AAA3BBB,M3.2.0,M11.1.0/0:30");
    sl_tz *tz = parse(&o, NULL);
    T_CHECK(tz != NULL);
    if (tz != NULL) {
        T_EQ_I(sl_tz_offset(tz, U(2026, 11, 1, 2, 29, 59)), -2 * H);
        T_EQ_I(sl_tz_offset(tz, U(2026, 11, 1, 2, 30, 0)), -3 * H);
        for (int64_t t = U(2026, 11, 1, 2, 0, 0); t < U(2026, 11, 1, 3, 30, 0); t += 300)
            check_period(tz, SLUICE_PERIOD_DAY, t, U(2026, 11, 1, 2, 0, 0), U(2026, 11, 2, 3, 0, 0));
        check_period(tz, SLUICE_PERIOD_DAY, U(2026, 11, 1, 1, 59, 59), U(2026, 10, 31, 2, 0, 0), U(2026, 11, 1, 2, 0, 0));
        sl_tz_free(tz);
    }
}

int main(void) {
    T_RUN(test_madrid);
    T_RUN(test_new_york);
    T_RUN(test_far_future);
    T_RUN(test_against_glibc);
    T_RUN(test_v1_only);
    T_RUN(test_v2_footer);
    T_RUN(test_malformed);
    T_RUN(test_names);
    T_RUN(test_tzdir_and_cache);
    T_RUN(test_posix);
    T_RUN(test_periods);
    T_RUN(test_odd_midnights);
    return T_DONE();
}
