/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_log.c -- the structured logger: JSON escaping against a slow reference (control
 * bytes, quotes, invalid UTF-8 of every kind, random bytes), text and JSON lines with every
 * field type, levels, truncation, reopen after rename (logrotate) through sl_log_reopen and
 * through a real SIGUSR1 handler, per-event rate limits and summaries on a fake clock, and
 * the decision log (off by default, sampling, rate, no raw key unless allowed).
 */
#include "t.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

#define S(x) ((int64_t)(x) * 1000000000)

/* ---- helpers -------------------------------------------------------------------------- */

typedef struct fclock {
    _Atomic int64_t mono, wall;
} fclock;

static int64_t f_mono(void *ud) {
    return atomic_load(&((fclock *)ud)->mono);
}

static int64_t f_wall(void *ud) {
    return atomic_load(&((fclock *)ud)->wall);
}

static char tmpdir[256];

static void mk_tmpdir(void) {
    if (tmpdir[0]) return;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sluice_test_log_XXXXXX");
    if (mkdtemp(tmpdir) == NULL) T_FAIL("mkdtemp: %s", strerror(errno));
}

static void tpath(char *out, size_t n, const char *name) {
    mk_tmpdir();
    snprintf(out, n, "%s/%s", tmpdir, name);
}

/* The whole file, NUL-terminated (caller frees); "" when missing. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The i-th line (0-based) as a JSON object, or NULL. */
static json_t *line_json(const char *all, int i) {
    const char *p = all;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (p == NULL || *p == 0) return NULL;
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    json_error_t err;
    json_t *j = json_loadb(p, n, JSON_ALLOW_NUL, &err);
    if (j == NULL) T_FAIL("line %d is not JSON (%s): %.*s", i, err.text, (int)n, p);
    return j;
}

static sl_log *mk(sl_log_config *c, const char *file, fclock *fc) {
    char path[512];
    tpath(path, sizeof(path), file);
    unlink(path);
    c->path = strdup(path);
    if (fc) {
        c->mono_ns = f_mono, c->wall_ns = f_wall, c->clock_ud = fc;
    }
    sl_log *l = NULL;
    int rc = sl_log_create(&l, c);
    T_EQ_I(rc, 0);
    return l;
}

static char *finish(sl_log *l, sl_log_config *c) {
    sl_log_destroy(l);
    char *s = slurp(c->path);
    unlink(c->path);
    free((char *)c->path);
    c->path = NULL;
    return s;
}

/* ---- escaping against a reference ------------------------------------------------------ */

/* Reference: decode code points one at a time; well-formed sequences are kept, every
 * other byte becomes U+FFFD. (A different method from log.c's range checks.) */
static size_t ref_sanitize(const unsigned char *in, size_t n, unsigned char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = in[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            if ((in[i + k] & 0xC0) != 0x80) ok = 0;
            cp = (cp << 6) | (in[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (ok && (cp < min_cp[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) ok = 0;
        if (ok) {
            memcpy(out + o, in + i, len);
            o += len, i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i += 1;
        }
    }
    return o;
}

/* Escapes `in`, checks the output is one valid JSON string (jansson rejects invalid UTF-8)
 * whose value is the reference's sanitised input. */
static void check_escape(const void *in, size_t n) {
    char buf[8192];
    sl_lbuf b = {buf, 0, sizeof(buf), 0};
    sl_log_json_str(&b, in, n);
    T_CHECK(!b.over);
    json_error_t err;
    json_t *j = json_loadb(buf, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (j == NULL || !json_is_string(j)) {
        T_FAIL("not a JSON string (%s): %.*s", err.text, (int)b.len, buf);
        json_decref(j);
        return;
    }
    unsigned char want[8192];
    size_t wn = ref_sanitize(in, n, want);
    T_EQ_U(json_string_length(j), wn);
    T_CHECK(wn == json_string_length(j) && memcmp(json_string_value(j), want, wn) == 0);
    /* no raw control byte, DEL or U+2028/9 in the output */
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 || c == 0x7F) T_FAIL("raw control byte 0x%02x in output", c);
        if (i + 2 < b.len && c == 0xE2 && (unsigned char)buf[i + 1] == 0x80 &&
            ((unsigned char)buf[i + 2] & 0xFE) == 0xA8)
            T_FAIL("raw U+2028/U+2029 in output");
    }
    json_decref(j);
}

static void test_escape_cases(void) {
    static const char *const cases[] = {
        "plain", "", "a\"b\\c", "tab\there\nnewline\r\b\f", "\x01\x1f\x7f",
        "caf\xC3\xA9", "\xE2\x82\xAC euro", "\xF0\x9F\x98\x80 emoji", "line\xE2\x80\xA8sep\xE2\x80\xA9",
        "\x80 stray continuation", "\xC0\xAF overlong slash", "\xC1\xBF", "\xE0\x80\xAF overlong3",
        "\xED\xA0\x80 surrogate", "\xED\x9F\xBF ok below", "\xF4\x90\x80\x80 too big",
        "\xF4\x8F\xBF\xBF max", "\xF5\x80\x80\x80", "\xFF\xFE", "cut at end \xE2\x82", "cut \xF0\x9F\x98",
        "\xC3", "</script>",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_escape(cases[i], strlen(cases[i]));
    check_escape("nul\0inside", 10);
    unsigned char all[256];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    check_escape(all, 256);
}

static void test_escape_random(void) {
    uint64_t s = t_seed();
    unsigned char in[200];
    for (int round = 0; round < 5000; round++) {
        size_t n = t_rand(&s) % sizeof(in);
        int mode = (int)(t_rand(&s) % 3);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = t_rand(&s);
            /* mode 0: any byte; 1: mostly high bytes (UTF-8-ish); 2: mostly ASCII */
            in[i] = mode == 0 ? (unsigned char)r : mode == 1 ? (unsigned char)(0x80 | (r & 0x7F) | ((r >> 8) & 0x40))
                                                             : (unsigned char)(r % 5 ? 0x20 + r % 95 : r % 32);
        }
        check_escape(in, n);
    }
}

/* A string that does not fit is cut at a character and still closed. */
static void test_escape_truncates_valid(void) {
    const char *s = "\xE2\x82\xAC\xE2\x82\xAC\"\"\x01\x01 abcdefgh";
    for (size_t cap = 1; cap < 40; cap++) {
        char buf[64];
        sl_lbuf b = {buf, 0, cap, 0};
        sl_log_json_str(&b, s, strlen(s));
        T_CHECK(b.len <= cap);
        if (b.len == 0) continue; /* not even the opening quote fitted */
        json_t *j = json_loadb(buf, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (j == NULL || !json_is_string(j)) T_FAIL("cap %zu: %.*s", cap, (int)b.len, buf);
        json_decref(j);
    }
}

static void test_time_format(void) {
    uint64_t s = t_seed();
    for (int i = 0; i < 20000; i++) {
        int64_t ns = (int64_t)(t_rand(&s) % (uint64_t)INT64_MAX); /* 1970 .. 2262 */
        if (i == 0) ns = 0;
        if (i == 1) ns = S(951782400); /* 2000-02-29 */
        char got[28], want[64];
        sl_log_time(ns, got);
        time_t sec = (time_t)(ns / 1000000000);
        struct tm tm;
        gmtime_r(&sec, &tm);
        size_t k = strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(want + k, sizeof(want) - k, ".%06dZ", (int)(ns % 1000000000 / 1000));
        if (strcmp(got, want) != 0) {
            T_FAIL("%lld: %s != %s", (long long)ns, got, want);
            break;
        }
    }
}

/* ---- lines ---------------------------------------------------------------------------- */

static void test_json_line_fields(void) {
    fclock fc = {S(10), S(1700000000) + 123456789};
    sl_log_config c;
    sl_log_config_default(&c);
    c.format = SL_LOG_JSON;
    sl_log *l = mk(&c, "fields.json", &fc);
    const char *key = "alice@example.com";
    SL_LOG(l, SL_LOG_WARN, "store_down", "redis \"unreachable\"\n", SL_LOG_STR("node", "127.0.0.1:6379"),
           SL_LOG_INT("n", -42), SL_LOG_UINT("u", 1234567890123ull), SL_LOG_DUR("after", 12500000),
           SL_LOG_DUR("whole", S(2)), SL_LOG_BOOL("open", 1), SL_LOG_KEY("key", key, strlen(key)),
           SL_LOG_STRN("bytes", "a\0b", 3));
    char hash[19];
    sl_log_key_hash(l, key, strlen(key), hash);
    char *out = finish(l, &c);
    T_EQ_I(count_lines(out), 1);
    json_t *j = line_json(out, 0);
    if (j) {
        T_EQ_S(json_string_value(json_object_get(j, "ts")), "2023-11-14T22:13:20.123456Z");
        T_EQ_S(json_string_value(json_object_get(j, "level")), "warn");
        T_EQ_S(json_string_value(json_object_get(j, "event")), "store_down");
        T_EQ_S(json_string_value(json_object_get(j, "msg")), "redis \"unreachable\"\n");
        T_EQ_S(json_string_value(json_object_get(j, "node")), "127.0.0.1:6379");
        T_EQ_I(json_integer_value(json_object_get(j, "n")), -42);
        T_EQ_I(json_integer_value(json_object_get(j, "u")), 1234567890123ll);
        T_CHECK(json_is_real(json_object_get(j, "after")) && json_real_value(json_object_get(j, "after")) == 0.0125);
        T_EQ_I(json_integer_value(json_object_get(j, "whole")), 2);
        T_CHECK(json_is_true(json_object_get(j, "open")));
        T_EQ_S(json_string_value(json_object_get(j, "key")), hash);
        T_EQ_U(json_string_length(json_object_get(j, "bytes")), 3);
        T_CHECK(json_object_get(j, "truncated") == NULL);
        json_decref(j);
    }
    T_CHECK(strlen(hash) == 18 && strncmp(hash, "k:", 2) == 0);
    T_CHECK(strstr(out, key) == NULL);
    free(out);
}

static void test_text_line(void) {
    fclock fc = {S(10), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    sl_log *l = mk(&c, "line.txt", &fc);
    SL_LOG(l, SL_LOG_INFO, "reload", "config reloaded", SL_LOG_STR("source", "sighup"),
           SL_LOG_STR("path", "/etc/sluice dir/s.yaml"), SL_LOG_DUR("took", 1500000), SL_LOG_INT("policies", 3),
           SL_LOG_STR("empty", ""));
    sl_log_write(l, SL_LOG_ERROR, "bad", "two\nlines \"quoted\"", NULL, 0);
    char *out = finish(l, &c);
    const char *want =
        "2023-11-14T22:13:20.000000Z info reload: config reloaded source=sighup "
        "path=\"/etc/sluice dir/s.yaml\" took=0.0015s policies=3 empty=\"\"\n"
        "2023-11-14T22:13:20.000000Z error bad: two\\nlines \"quoted\"\n";
    T_EQ_S(out, want);
    free(out);
}

static void test_levels(void) {
    fclock fc = {S(10), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    c.format = SL_LOG_JSON;
    sl_log *l = mk(&c, "levels.json", &fc);
    T_CHECK(sl_log_enabled(l, SL_LOG_INFO) && !sl_log_enabled(l, SL_LOG_DEBUG));
    T_CHECK(!sl_log_enabled(NULL, SL_LOG_ERROR));
    const sl_log_level lv[4] = {SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR};
    for (int i = 0; i < 4; i++) sl_log_printf(l, lv[i], "e1", "at %s", sl_log_level_name(lv[i]));
    sl_log_set_level(l, SL_LOG_DEBUG);
    sl_log_printf(l, SL_LOG_DEBUG, "e2", "now debug");
    sl_log_set_level(l, SL_LOG_ERROR);
    sl_log_printf(l, SL_LOG_WARN, "e3", "hidden");
    sl_log_printf(l, SL_LOG_ERROR, "e3", "shown");
    char *out = finish(l, &c);
    T_EQ_I(count_lines(out), 5);
    const char *want[5][2] = {{"info", "at info"}, {"warn", "at warn"}, {"error", "at error"},
                              {"debug", "now debug"}, {"error", "shown"}};
    for (int i = 0; i < 5; i++) {
        json_t *j = line_json(out, i);
        if (!j) continue;
        T_EQ_S(json_string_value(json_object_get(j, "level")), want[i][0]);
        T_EQ_S(json_string_value(json_object_get(j, "msg")), want[i][1]);
        json_decref(j);
    }
    free(out);
    sl_log_level lvl;
    sl_log_format fmt;
    T_CHECK(sl_log_level_parse("debug", &lvl) == 0 && lvl == SL_LOG_DEBUG);
    T_CHECK(sl_log_level_parse("warning", &lvl) == 0 && lvl == SL_LOG_WARN);
    T_CHECK(sl_log_level_parse("loud", &lvl) == -1);
    T_CHECK(sl_log_format_parse("json", &fmt) == 0 && fmt == SL_LOG_JSON);
    T_CHECK(sl_log_format_parse("xml", &fmt) == -1);
}

/* Too much for one line: the line stays within SL_LOG_LINE_MAX, whole fields are left
 * out, and JSON stays valid and says truncated. */
static void test_truncation(void) {
    fclock fc = {S(10), S(1700000000)};
    for (int fmt = 0; fmt < 2; fmt++) {
        sl_log_config c;
        sl_log_config_default(&c);
        c.format = fmt ? SL_LOG_JSON : SL_LOG_TEXT;
        sl_log *l = mk(&c, "trunc.log", &fc);
        char big[3000];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        char quotes[900];
        memset(quotes, '"', sizeof(quotes) - 1);
        quotes[sizeof(quotes) - 1] = 0;
        SL_LOG(l, SL_LOG_INFO, "a", "short", SL_LOG_INT("first", 1), SL_LOG_STR("big", big), SL_LOG_INT("after", 2));
        sl_log_write(l, SL_LOG_INFO, "b", big, NULL, 0);
        SL_LOG(l, SL_LOG_INFO, "c", "quotes", SL_LOG_STR("q", quotes));
        char *out = finish(l, &c);
        T_EQ_I(count_lines(out), 3);
        const char *p = out;
        for (int i = 0; i < 3; i++) {
            const char *e = strchr(p, '\n');
            T_CHECK(e && (size_t)(e - p) + 1 <= SL_LOG_LINE_MAX);
            T_CHECK(e && memmem(p, (size_t)(e - p), "truncated", 9) != NULL);
            p = e ? e + 1 : p;
        }
        if (fmt) {
            json_t *j = line_json(out, 0);
            if (j) {
                T_EQ_I(json_integer_value(json_object_get(j, "first")), 1);
                T_CHECK(json_object_get(j, "big") == NULL && json_object_get(j, "after") == NULL);
                T_CHECK(json_is_true(json_object_get(j, "truncated")));
                json_decref(j);
            }
            for (int i = 1; i < 3; i++) json_decref(line_json(out, i));
        }
        free(out);
    }
}

/* ---- reopen (logrotate) ------------------------------------------------------------------ */

static sl_log *g_sig_log;

static void on_usr1(int sig) {
    (void)sig;
    sl_log_reopen_request(g_sig_log);
}

static void test_reopen_after_rename(void) {
    fclock fc = {S(10), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    sl_log *l = mk(&c, "rot.log", &fc);
    char p1[600], p2[600];
    snprintf(p1, sizeof(p1), "%s.1", c.path);
    snprintf(p2, sizeof(p2), "%s.2", c.path);
    sl_log_write(l, SL_LOG_INFO, "one", "line 1", NULL, 0);
    T_EQ_I(sl_log_flush(l, S(5)), 0);
    T_EQ_I(rename(c.path, p1), 0); /* logrotate moves the file ... */
    sl_log_write(l, SL_LOG_INFO, "two", "line 2", NULL, 0);
    T_EQ_I(sl_log_flush(l, S(5)), 0);
    T_EQ_I(sl_log_reopen(l), 0); /* ... then tells us */
    sl_log_write(l, SL_LOG_INFO, "three", "line 3", NULL, 0);
    T_EQ_I(sl_log_flush(l, S(5)), 0);

    /* the same through a real signal handler (async-signal-safe request) */
    g_sig_log = l;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, &old);
    T_EQ_I(rename(c.path, p2), 0);
    sl_log_stats st;
    sl_log_stats_get(l, &st);
    uint64_t before = st.reopens;
    raise(SIGUSR1);
    for (int i = 0; i < 5000 && st.reopens == before; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        sl_log_stats_get(l, &st);
    }
    T_EQ_U(st.reopens, before + 1);
    sl_log_write(l, SL_LOG_INFO, "four", "line 4", NULL, 0);
    sigaction(SIGUSR1, &old, NULL);
    char *cur = finish(l, &c);
    char *r1 = slurp(p1), *r2 = slurp(p2);
    T_CHECK(strstr(r1, "line 1") && strstr(r1, "line 2") && count_lines(r1) == 2);
    T_CHECK(strstr(r2, "line 3") && count_lines(r2) == 1);
    T_CHECK(strstr(cur, "line 4") && count_lines(cur) == 1);
    free(cur), free(r1), free(r2);
    unlink(p1), unlink(p2);
}

/* The directory is gone: reopen fails with its errno, the old file keeps the lines. */
static void test_reopen_failure_keeps_old_file(void) {
    char dir[512], path[600], moved[600];
    tpath(dir, sizeof(dir), "gone");
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/x.log", dir);
    tpath(moved, sizeof(moved), "x.log.moved");
    sl_log_config c;
    sl_log_config_default(&c);
    c.path = path;
    sl_log *l = NULL;
    T_EQ_I(sl_log_create(&l, &c), 0);
    if (!l) return;
    T_EQ_I(rename(path, moved), 0);
    T_EQ_I(rmdir(dir), 0);
    T_EQ_I(sl_log_reopen(l), -ENOENT);
    sl_log_write(l, SL_LOG_INFO, "after", "still written", NULL, 0);
    sl_log_stats st;
    sl_log_flush(l, S(5));
    sl_log_stats_get(l, &st);
    T_EQ_U(st.reopen_errors, 1);
    sl_log_destroy(l);
    char *m = slurp(moved);
    T_CHECK(strstr(m, "still written") != NULL && strstr(m, "log_reopen_failed") != NULL);
    free(m);
    unlink(moved);
}

/* ---- rate limits and summaries --------------------------------------------------------- */

static void test_rate_limit_per_event(void) {
    fclock fc = {S(100), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    c.format = SL_LOG_JSON;
    sl_log *l = mk(&c, "rate.json", &fc);
    T_EQ_I(sl_log_kind_set(l, "noisy", SL_LOG_WARN, 10, 5, NULL), 0);
    for (int i = 0; i < 100; i++) sl_log_write(l, SL_LOG_WARN, "noisy", "flood", NULL, 0);
    sl_log_write(l, SL_LOG_INFO, "quiet", "not affected", NULL, 0);
    atomic_fetch_add(&fc.mono, S(1));
    for (int i = 0; i < 100; i++) sl_log_write(l, SL_LOG_WARN, "noisy", "flood", NULL, 0);
    /* default limit (20/s burst 100) for names not configured */
    for (int i = 0; i < 150; i++) sl_log_write(l, SL_LOG_INFO, "other_event", "x", NULL, 0);
    sl_log_stats st;
    sl_log_flush(l, S(5));
    sl_log_stats_get(l, &st);
    /* burst 5 at once, then (a second later) the bucket holds 5 again, not 10: a burst
     * is the most there can be; names without a setting: burst 100 */
    T_EQ_U(st.dropped_rate, (100 - 5) + (100 - 5) + (150 - 100));
    atomic_fetch_add(&fc.mono, S(10)); /* a summary interval later */
    sl_log_flush(l, S(5));
    char *out = finish(l, &c);
    int noisy = 0, quiet = 0, other = 0, summaries = 0;
    for (int i = 0, n = count_lines(out); i < n; i++) {
        json_t *j = line_json(out, i);
        if (!j) continue;
        const char *ev = json_string_value(json_object_get(j, "event"));
        json_t *sup = json_object_get(j, "suppressed");
        if (sup) {
            summaries++;
            if (strcmp(ev, "noisy") == 0) {
                T_EQ_I(json_integer_value(sup), 190);
                T_EQ_S(json_string_value(json_object_get(j, "level")), "warn");
            }
            if (strcmp(ev, "other_event") == 0) T_EQ_I(json_integer_value(sup), 50);
        } else {
            noisy += strcmp(ev, "noisy") == 0;
            quiet += strcmp(ev, "quiet") == 0;
            other += strcmp(ev, "other_event") == 0;
        }
        json_decref(j);
    }
    T_EQ_I(noisy, 10);
    T_EQ_I(quiet, 1);
    T_EQ_I(other, 100);
    T_EQ_I(summaries, 2);
    free(out);
}

/* Refused connections: never a line each, one summary per interval with the count. */
static void test_count_only_summary(void) {
    fclock fc = {S(100), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    sl_log *l = mk(&c, "count.txt", &fc);
    T_EQ_I(sl_log_kind_set(l, "conn_refused", SL_LOG_WARN, 0, 0, "connections refused"), 0);
    for (int i = 0; i < 37; i++) sl_log_count(l, "conn_refused");
    for (int i = 0; i < 3; i++) sl_log_write(l, SL_LOG_WARN, "conn_refused", "refused", NULL, 0);
    sl_log_flush(l, S(5));
    sl_log_stats st;
    sl_log_stats_get(l, &st);
    T_EQ_U(st.written, 0);
    T_EQ_U(sl_log_dropped(l), 0); /* summarised, not dropped */
    atomic_fetch_add(&fc.mono, S(10));
    sl_log_flush(l, S(5));
    atomic_fetch_add(&fc.mono, S(10)); /* nothing new: no second line */
    sl_log_flush(l, S(5));
    char *out = finish(l, &c);
    T_EQ_I(count_lines(out), 1);
    T_CHECK(strstr(out, " warn conn_refused: 40 connections refused in the last 10 s count=40 interval=10s\n") !=
            NULL);
    free(out);
}

/* ---- the decision log ------------------------------------------------------------------ */

static sl_log_dec dec(const char *key, int rejected) {
    sl_log_dec d;
    memset(&d, 0, sizeof(d));
    d.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    d.policy = "api-by-key";
    d.window = "10/s";
    d.verdict = rejected ? "limited" : "allowed";
    d.rejected = rejected;
    d.cost = 1, d.remaining = rejected ? 0 : 7, d.limit = 20;
    d.retry_after_ns = rejected ? 250000000 : -1;
    d.key = key, d.key_len = strlen(key);
    return d;
}

static void test_decision_log_off_by_default(void) {
    sl_log_config c;
    sl_log_config_default(&c);
    T_EQ_I(c.decisions, 0);
    sl_log *l = mk(&c, "dec_off.log", NULL);
    for (int i = 0; i < 1000; i++) {
        sl_log_dec d = dec("user-1", i & 1);
        sl_log_decision(l, &d);
    }
    sl_log_stats st;
    sl_log_flush(l, S(5));
    sl_log_stats_get(l, &st);
    T_EQ_U(st.decisions_logged, 0);
    char *out = finish(l, &c);
    T_EQ_S(out, "");
    free(out);
}

static void test_decision_log_fields_and_hashed_key(void) {
    fclock fc = {S(100), S(1700000000)};
    for (int raw = 0; raw < 2; raw++) {
        sl_log_config c;
        sl_log_config_default(&c);
        c.format = SL_LOG_JSON;
        c.decisions = 1;
        c.raw_keys = raw;
        sl_log *l = mk(&c, "dec.json", &fc);
        const char *key = "secret-user-42@example.com";
        sl_log_dec d = dec(key, 1);
        sl_log_decision(l, &d);
        SL_LOG(l, SL_LOG_WARN, "key_event", "a key in a field", SL_LOG_KEY("key", key, strlen(key)));
        char hash[19];
        sl_log_key_hash(l, key, strlen(key), hash);
        char *out = finish(l, &c);
        T_EQ_I(count_lines(out), 2);
        json_t *j = line_json(out, 0);
        if (j) {
            T_EQ_S(json_string_value(json_object_get(j, "event")), "decision");
            T_EQ_S(json_string_value(json_object_get(j, "trace_id")), "4bf92f3577b34da6a3ce929d0e0e4736");
            T_EQ_S(json_string_value(json_object_get(j, "policy")), "api-by-key");
            T_EQ_S(json_string_value(json_object_get(j, "window")), "10/s");
            T_EQ_S(json_string_value(json_object_get(j, "verdict")), "limited");
            T_EQ_I(json_integer_value(json_object_get(j, "cost")), 1);
            T_EQ_I(json_integer_value(json_object_get(j, "remaining")), 0);
            T_EQ_I(json_integer_value(json_object_get(j, "limit")), 20);
            T_CHECK(json_real_value(json_object_get(j, "retry_after")) == 0.25);
            T_CHECK(json_string_value(json_object_get(j, "ts")) != NULL);
            if (raw) {
                T_EQ_S(json_string_value(json_object_get(j, "key")), key);
                T_CHECK(json_object_get(j, "key_hash") == NULL);
            } else {
                T_EQ_S(json_string_value(json_object_get(j, "key_hash")), hash);
                T_CHECK(json_object_get(j, "key") == NULL);
            }
            json_decref(j);
        }
        if (raw)
            T_CHECK(strstr(out, key) != NULL);
        else
            T_CHECK(strstr(out, "secret-user") == NULL);
        free(out);
    }
}

/* Decision lines are info lines: under warn (or error) they are not written, nor counted
 * as logged; a rejection at info is. */
static void test_decision_log_obeys_the_level(void) {
    for (int lvl = SL_LOG_ERROR; lvl <= SL_LOG_INFO; lvl++) {
        sl_log_config c;
        sl_log_config_default(&c);
        c.decisions = 1;
        c.level = (sl_log_level)lvl;
        sl_log *l = mk(&c, "dec_level.log", NULL);
        sl_log_dec d = dec("user-9", 1);
        sl_log_decision(l, &d);
        sl_log_flush(l, S(5));
        sl_log_stats st;
        sl_log_stats_get(l, &st);
        char *out = finish(l, &c);
        T_EQ_U(st.decisions_logged, lvl == SL_LOG_INFO ? 1 : 0);
        T_EQ_I(count_lines(out), lvl == SL_LOG_INFO ? 1 : 0);
        free(out);
    }
}

/* journal: 1 puts sd-daemon's <N> in front of every line, in both formats (JSON stays one
 * object after it); JOURNAL_STREAM must name the descriptor itself. */
static void test_journal_prefix(void) {
    for (int json = 0; json < 2; json++) {
        char path[512];
        tpath(path, sizeof(path), "journal.log");
        unlink(path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        T_CHECK(fd >= 0);
        struct stat st;
        T_CHECK(fstat(fd, &st) == 0);
        char js[64];
        snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", js, 1);
        T_EQ_I(sl_log_fd_is_journal(fd), 1);
        sl_log_config c;
        sl_log_config_default(&c);
        c.fd = fd;
        c.format = json ? SL_LOG_JSON : SL_LOG_TEXT;
        c.level = SL_LOG_DEBUG;
        sl_log *l = NULL;
        T_EQ_I(sl_log_create(&l, &c), 0);
        const sl_log_level lv[4] = {SL_LOG_ERROR, SL_LOG_WARN, SL_LOG_INFO, SL_LOG_DEBUG};
        for (int i = 0; i < 4; i++) SL_LOG(l, lv[i], "ev", "m", SL_LOG_INT("i", i));
        sl_log_destroy(l);
        close(fd);
        unsetenv("JOURNAL_STREAM");
        char *out = slurp(path);
        const char *pri = "3467";
        const char *p = out;
        for (int i = 0; i < 4; i++) {
            T_CHECK(p[0] == '<' && p[1] == pri[i] && p[2] == '>');
            if (json) T_CHECK(p[3] == '{');
            p = strchr(p, '\n');
            T_CHECK(p != NULL);
            if (p == NULL) break;
            p++;
        }
        free(out);
        /* the variable naming another stream: no prefix */
        fd = open(path, O_WRONLY | O_TRUNC);
        snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino + 1);
        setenv("JOURNAL_STREAM", js, 1);
        T_EQ_I(sl_log_fd_is_journal(fd), 0);
        unsetenv("JOURNAL_STREAM");
        close(fd);
        unlink(path);
    }
}

/* Two loggers with one process key show one key under one hash; other keys differ. */
static void test_key_hash_shared_process_key(void) {
    sl_hash_key k = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    sl_log_config c;
    sl_log_config_default(&c);
    c.hash_key = &k;
    sl_log *b1 = NULL, *b2 = NULL;
    c.fd = 2;
    T_EQ_I(sl_log_create(&b1, &c), 0);
    T_EQ_I(sl_log_create(&b2, &c), 0);
    char h1[19], h2[19], h3[19];
    sl_log_key_hash(b1, "k1", 2, h1);
    sl_log_key_hash(b2, "k1", 2, h2);
    sl_log_key_hash(b2, "k2", 2, h3);
    T_EQ_S(h1, h2);
    T_CHECK(strcmp(h1, h3) != 0);
    char want[19];
    snprintf(want, sizeof(want), "k:%016llx", (unsigned long long)sl_hash128_of(&k, "k1", 2).lo);
    T_EQ_S(h1, want);
    sl_log_destroy(b1);
    sl_log_destroy(b2);
}

static void test_decision_sampling(void) {
    fclock fc = {S(100), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    c.format = SL_LOG_JSON;
    c.decisions = 1;
    c.decisions_rejections_only = 1;
    c.decisions_sample_ppm = 250000;
    c.decisions_per_s = 1000000;
    c.decisions_burst = 1000000;
    c.queue_lines = 4096;
    sl_log *l = mk(&c, "sample.json", &fc);
    const int keys = 20000;
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < keys; i++) {
            if (i % 1000 == 0) sl_log_flush(l, S(10)); /* keep the queue from filling */
            char k[32];
            snprintf(k, sizeof(k), "key-%d", i);
            sl_log_dec a = dec(k, 0), r = dec(k, 1);
            sl_log_decision(l, &a); /* allowed: never eligible here */
            sl_log_decision(l, &r);
        }
    }
    sl_log_stats st;
    sl_log_flush(l, S(10));
    sl_log_stats_get(l, &st);
    T_EQ_U(st.decisions_logged + st.decisions_sampled_out, 2 * keys);
    T_EQ_U(st.dropped_full, 0);
    double frac = (double)st.decisions_logged / (2.0 * keys);
    T_CHECK(frac > 0.22 && frac < 0.28);
    char *out = finish(l, &c);
    /* deterministic per key: each key sampled in appears twice, as a rejection */
    T_EQ_I(count_lines(out), (int)st.decisions_logged);
    T_CHECK(st.decisions_logged % 2 == 0);
    T_CHECK(strstr(out, "\"verdict\":\"allowed\"") == NULL);
    T_CHECK(strstr(out, "key-") == NULL);
    free(out);
}

/* 1000 decisions/s for 3 s against 50 lines/s burst 10: with GCRA (T = 20 ms, tolerance
 * 10 T) the n-th line (from 0) is admitted at the first event at t >= 20 (n - 9) ms, so by
 * t = 2999 ms 10 + 2999 / 20 lines were admitted. */
static void test_decision_rate_limit(void) {
    fclock fc = {S(100), S(1700000000)};
    sl_log_config c;
    sl_log_config_default(&c);
    c.decisions = 1;
    c.decisions_per_s = 50;
    c.decisions_burst = 10;
    sl_log *l = mk(&c, "drate.log", &fc);
    for (int i = 0; i < 3000; i++) {
        sl_log_dec d = dec("k", 1);
        sl_log_decision(l, &d);
        atomic_fetch_add(&fc.mono, 1000000);
        if (i % 500 == 0) sl_log_flush(l, S(5));
    }
    sl_log_stats st;
    sl_log_flush(l, S(5));
    sl_log_stats_get(l, &st);
    T_EQ_U(st.decisions_logged, 10 + 2999 / 20);
    T_EQ_U(st.decisions_rate_limited, 3000 - (10 + 2999 / 20));
    T_EQ_U(st.dropped_full, 0);
    T_EQ_U(sl_log_dropped(l), st.decisions_rate_limited);
    sl_log_decisions_set(l, 0, 0, 1000000, 50, 10, 0); /* switched off at run time */
    atomic_fetch_add(&fc.mono, S(10));
    sl_log_dec d = dec("k", 1);
    sl_log_decision(l, &d);
    sl_log_stats_get(l, &st);
    T_EQ_U(st.decisions_logged + st.decisions_rate_limited, 3000);
    char *out = finish(l, &c);
    T_EQ_I(count_lines(out), (int)st.decisions_logged + 1);
    T_CHECK(strstr(out, "decision lines over the rate limit") != NULL);
    free(out);
}

static void test_default_logger(void) {
    T_CHECK(sl_log_default() == NULL);
    sl_log_config c;
    sl_log_config_default(&c);
    sl_log *l = mk(&c, "def.log", NULL);
    sl_log_set_default(l);
    T_CHECK(sl_log_default() == l);
    sl_log_printf(sl_log_default(), SL_LOG_INFO, "x", "via default %d", 7);
    char *out = finish(l, &c);
    T_CHECK(sl_log_default() == NULL); /* destroy forgets it */
    T_CHECK(strstr(out, "via default 7") != NULL);
    free(out);
    sl_log_printf(sl_log_default(), SL_LOG_ERROR, "x", "nowhere"); /* NULL logger: no-op */
}

int main(void) {
    T_RUN(test_escape_cases);
    T_RUN(test_escape_random);
    T_RUN(test_escape_truncates_valid);
    T_RUN(test_time_format);
    T_RUN(test_json_line_fields);
    T_RUN(test_text_line);
    T_RUN(test_levels);
    T_RUN(test_truncation);
    T_RUN(test_reopen_after_rename);
    T_RUN(test_reopen_failure_keeps_old_file);
    T_RUN(test_rate_limit_per_event);
    T_RUN(test_count_only_summary);
    T_RUN(test_decision_log_off_by_default);
    T_RUN(test_decision_log_fields_and_hashed_key);
    T_RUN(test_key_hash_shared_process_key);
    T_RUN(test_decision_sampling);
    T_RUN(test_decision_rate_limit);
    T_RUN(test_decision_log_obeys_the_level);
    T_RUN(test_journal_prefix);
    T_RUN(test_default_logger);
    rmdir(tmpdir);
    return T_DONE();
}
