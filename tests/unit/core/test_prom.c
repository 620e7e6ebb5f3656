/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_prom.c -- the Prometheus writer: every family gets HELP and TYPE before its samples
 * and misuse is refused (a sample outside a family, a counter without _total, a family
 * twice, reserved or invalid label names, no HELP); label values are escaped and invalid
 * UTF-8 repaired; histograms from several workers add up (cumulative buckets, _count ==
 * +Inf, _sum exact); process metrics agree with what the process sees; and a whole
 * exposition passes `promtool check metrics` (Debian's prometheus) and parses with
 * python3-prometheus-client into exactly the samples written.
 */
#include "t.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/prom.h"

static char *render(sl_prom *p) {
    size_t len = 0;
    char *s = sl_prom_finish(p, &len);
    if (s == NULL) T_FAIL("finish failed: %s", p->errmsg);
    if (s) T_EQ_U(strlen(s), len);
    return s;
}

/* Every sample line's family (its name, minus a histogram suffix) was declared by a
 * "# HELP" then "# TYPE" pair earlier; returns the number of families. */
static int check_help_type(const char *text) {
    char fams[256][128];
    int nf = 0;
    const char *p = text;
    char pending_help[128] = "";
    while (*p) {
        const char *e = strchr(p, '\n');
        if (!e) {
            T_FAIL("last line without newline");
            break;
        }
        char line[4096];
        size_t n = (size_t)(e - p) < sizeof(line) - 1 ? (size_t)(e - p) : sizeof(line) - 1;
        memcpy(line, p, n);
        line[n] = 0;
        if (strncmp(line, "# HELP ", 7) == 0) {
            sscanf(line + 7, "%127s", pending_help);
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[128];
            sscanf(line + 7, "%127s", name);
            if (strcmp(name, pending_help) != 0) T_FAIL("TYPE without HELP: %s", line);
            if (nf < 256) snprintf(fams[nf++], 128, "%s", name);
        } else {
            char name[128];
            size_t k = strcspn(line, "{ ");
            snprintf(name, sizeof(name), "%.*s", (int)k, line);
            int found = 0;
            for (int i = 0; i < nf && !found; i++) {
                size_t fl = strlen(fams[i]);
                if (strncmp(name, fams[i], fl) == 0 &&
                    (name[fl] == 0 || !strcmp(name + fl, "_bucket") || !strcmp(name + fl, "_sum") ||
                     !strcmp(name + fl, "_count")))
                    found = 1;
            }
            if (!found) T_FAIL("sample without HELP/TYPE: %s", line);
        }
        p = e + 1;
    }
    return nf;
}

static void test_family_and_samples(void) {
    sl_prom p;
    sl_prom_init(&p);
    T_EQ_I(sl_prom_family(&p, "sluice_decisions_total", SL_PROM_COUNTER, "Decisions by policy and result."), 0);
    const char *l1[] = {"policy", "api", "result", "allowed", NULL};
    sl_prom_u64(&p, l1, 3);
    sl_prom_family(&p, "sluice_keys", SL_PROM_GAUGE, "Keys held.\nSecond line with a \\ backslash.");
    sl_prom_i64(&p, NULL, -5);
    sl_prom_family(&p, "sluice_ratio", SL_PROM_GAUGE, "A ratio.");
    const char *nan[] = {"v", "nan", NULL}, *inf[] = {"v", "inf", NULL}, *ninf[] = {"v", "-inf", NULL},
               *half[] = {"v", "half", NULL};
    sl_prom_f64(&p, nan, NAN);
    sl_prom_f64(&p, inf, INFINITY);
    sl_prom_f64(&p, ninf, -INFINITY);
    sl_prom_f64(&p, half, 0.5);
    sl_prom_family(&p, "sluice_seconds", SL_PROM_GAUGE, "Fixed point.");
    const char *a[] = {"c", "a", NULL}, *b[] = {"c", "b", NULL}, *c[] = {"c", "c", NULL};
    sl_prom_fixed(&p, a, 1500000, 1000000000);
    sl_prom_fixed(&p, b, -2000000000, 1000000000);
    sl_prom_fixed(&p, c, 7, 1);
    char *s = render(&p);
    if (s) {
        const char *want =
            "# HELP sluice_decisions_total Decisions by policy and result.\n"
            "# TYPE sluice_decisions_total counter\n"
            "sluice_decisions_total{policy=\"api\",result=\"allowed\"} 3\n"
            "# HELP sluice_keys Keys held.\\nSecond line with a \\\\ backslash.\n"
            "# TYPE sluice_keys gauge\n"
            "sluice_keys -5\n"
            "# HELP sluice_ratio A ratio.\n# TYPE sluice_ratio gauge\n"
            "sluice_ratio{v=\"nan\"} NaN\nsluice_ratio{v=\"inf\"} +Inf\nsluice_ratio{v=\"-inf\"} -Inf\n"
            "sluice_ratio{v=\"half\"} 0.5\n"
            "# HELP sluice_seconds Fixed point.\n# TYPE sluice_seconds gauge\n"
            "sluice_seconds{c=\"a\"} 0.0015\nsluice_seconds{c=\"b\"} -2\nsluice_seconds{c=\"c\"} 7\n";
        T_EQ_S(s, want);
        T_EQ_I(check_help_type(s), 4);
    }
    free(s);
    sl_prom_deinit(&p);
}

static void test_misuse_is_refused(void) {
    struct {
        const char *why;
        int step;
    } cases[] = {{"sample before any family", 0}, {"counter without _total", 1}, {"gauge with _total", 2},
                 {"family twice", 3},            {"no help", 4},                {"invalid name", 5},
                 {"label le", 6},                {"label __x", 7},              {"label twice", 8},
                 {"bad label name", 9},          {"u64 in a histogram", 10},    {"label without value", 11},
                 {"scale not power of 10", 12},  {"histogram bounds not ascending", 13}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_prom p;
        sl_prom_init(&p);
        const char *ok[] = {"a", "b", NULL};
        if (cases[i].step != 0) sl_prom_family(&p, "x_total", SL_PROM_COUNTER, "help");
        switch (cases[i].step) {
        case 0: sl_prom_u64(&p, NULL, 1); break;
        case 1: sl_prom_family(&p, "y", SL_PROM_COUNTER, "help"); break;
        case 2: sl_prom_family(&p, "y_total", SL_PROM_GAUGE, "help"); break;
        case 3: sl_prom_family(&p, "x_total", SL_PROM_COUNTER, "help"); break;
        case 4: sl_prom_family(&p, "y", SL_PROM_GAUGE, ""); break;
        case 5: sl_prom_family(&p, "9y", SL_PROM_GAUGE, "help"); break;
        case 6: {
            const char *l[] = {"le", "1", NULL};
            sl_prom_u64(&p, l, 1);
            break;
        }
        case 7: {
            const char *l[] = {"__name__", "1", NULL};
            sl_prom_u64(&p, l, 1);
            break;
        }
        case 8: {
            const char *l[] = {"a", "1", "a", "2", NULL};
            sl_prom_u64(&p, l, 1);
            break;
        }
        case 9: {
            const char *l[] = {"a-b", "1", NULL};
            sl_prom_u64(&p, l, 1);
            break;
        }
        case 10:
            sl_prom_family(&p, "h_seconds", SL_PROM_HISTOGRAM, "help");
            sl_prom_u64(&p, ok, 1);
            break;
        case 11: {
            const char *l[] = {"a", NULL};
            sl_prom_u64(&p, l, 1);
            break;
        }
        case 12: sl_prom_fixed(&p, ok, 1, 3); break;
        case 13: {
            int64_t bounds[3] = {1, 3, 2};
            sl_prom_hist h;
            memset(&h, 0, sizeof(h));
            const sl_prom_hist *hs[1] = {&h};
            sl_prom_family(&p, "h_seconds", SL_PROM_HISTOGRAM, "help");
            sl_prom_histogram(&p, NULL, bounds, 3, hs, 1, 1);
            break;
        }
        }
        sl_prom_u64(&p, ok, 1); /* nothing after an error gets out either */
        size_t len;
        char *s = sl_prom_finish(&p, &len);
        if (s != NULL) T_FAIL("%s: accepted", cases[i].why);
        T_CHECK(p.err && p.errmsg[0]);
        free(s);
        sl_prom_deinit(&p);
    }
}

/* Label values: backslash, quote and newline escaped; invalid UTF-8 becomes U+FFFD;
 * valid UTF-8 passes. */
static void test_label_escaping(void) {
    sl_prom p;
    sl_prom_init(&p);
    sl_prom_family(&p, "esc", SL_PROM_GAUGE, "Escapes.");
    const char *l[] = {"v", "a\\b\"c\nd", "w", "caf\xC3\xA9 \xFF\xC0\xAF end", NULL};
    sl_prom_u64(&p, l, 1);
    char *s = render(&p);
    if (s) T_CHECK(strstr(s, "esc{v=\"a\\\\b\\\"c\\nd\",w=\"caf\xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end\"} 1\n"));
    free(s);
    sl_prom_deinit(&p);
}

/* Two workers' histograms, observations drawn at random, compared with a direct count. */
static void test_histogram_from_workers(void) {
    static const int64_t bounds[] = {100000, 500000, 1000000, 5000000, 25000000, 100000000};
    const unsigned nb = sizeof(bounds) / sizeof(bounds[0]);
    sl_prom_hist w[2];
    memset(w, 0, sizeof(w));
    uint64_t s = t_seed();
    uint64_t want_le[7] = {0}, sum = 0, n = 20000;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)(t_rand(&s) % 200000000);
        if (i % 100 == 0) v = bounds[i / 100 % nb]; /* exactly on a bound: counted in it */
        if (i % 1000 == 1) v = -5;                  /* a negative reading counts as 0 */
        sum += (uint64_t)(v < 0 ? 0 : v);
        for (unsigned k = 0; k < nb; k++)
            if ((v < 0 ? 0 : v) <= bounds[k]) want_le[k]++;
        if (i & 1)
            sl_prom_hist_observe(&w[i & 1], bounds, nb, v);
        else
            sl_prom_hist_observe_shared(&w[i & 1], bounds, nb, v);
    }
    sl_prom p;
    sl_prom_init(&p);
    sl_prom_family(&p, "sluice_store_latency_seconds", SL_PROM_HISTOGRAM, "Store latency.");
    const sl_prom_hist *hs[2] = {&w[0], &w[1]};
    const char *l[] = {"store", "redis", "op", "decide", NULL};
    sl_prom_histogram(&p, l, bounds, nb, hs, 2, 1000000000);
    char *out = render(&p);
    if (out) {
        static const char *const les[] = {"0.0001", "0.0005", "0.001", "0.005", "0.025", "0.1"};
        for (unsigned k = 0; k < nb; k++) {
            char line[200];
            snprintf(line, sizeof(line), "sluice_store_latency_seconds_bucket{store=\"redis\",op=\"decide\",le=\"%s\"} %llu\n",
                     les[k], (unsigned long long)want_le[k]);
            if (!strstr(out, line)) T_FAIL("missing %s", line);
        }
        char line[200];
        snprintf(line, sizeof(line), "le=\"+Inf\"} %llu\n", (unsigned long long)n);
        T_CHECK(strstr(out, line) != NULL);
        snprintf(line, sizeof(line), "sluice_store_latency_seconds_count{store=\"redis\",op=\"decide\"} %llu\n",
                 (unsigned long long)n);
        T_CHECK(strstr(out, line) != NULL);
        snprintf(line, sizeof(line), "sluice_store_latency_seconds_sum{store=\"redis\",op=\"decide\"} %llu.%09llu",
                 (unsigned long long)(sum / 1000000000), (unsigned long long)(sum % 1000000000));
        while (line[strlen(line) - 1] == '0') line[strlen(line) - 1] = 0; /* trailing zeros are dropped */
        if (line[strlen(line) - 1] == '.') line[strlen(line) - 1] = 0;
        T_CHECK(strstr(out, line) != NULL);
        check_help_type(out);
    }
    free(out);
    sl_prom_deinit(&p);
}

static double sample_value(const char *text, const char *name) {
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

static void test_process_metrics(void) {
    sl_prom p;
    sl_prom_init(&p);
    T_EQ_I(sl_prom_process(&p), 0);
    sl_prom_build_info(&p, "sluice", "0.1.0", "abc123");
    char *s = render(&p);
    if (!s) return;
    T_EQ_I(check_help_type(s), 7);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    T_CHECK(sample_value(s, "process_max_fds") == (double)rl.rlim_cur);
    int fds = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) fds += e->d_name[0] != '.';
    if (d) closedir(d);
    double open_fds = sample_value(s, "process_open_fds");
    T_CHECK(open_fds == fds - 1); /* minus the directory listed just now */
    T_CHECK(sample_value(s, "process_resident_memory_bytes") > 100000);
    T_CHECK(sample_value(s, "process_virtual_memory_bytes") >= sample_value(s, "process_resident_memory_bytes"));
    double start = sample_value(s, "process_start_time_seconds");
    T_CHECK(start <= (double)time(NULL) + 1 && start > (double)time(NULL) - 600);
    T_CHECK(sample_value(s, "process_cpu_seconds_total") >= 0);
    T_CHECK(strstr(s, "sluice_build_info{version=\"0.1.0\",commit=\"abc123\"} 1\n") != NULL);
    free(s);
    sl_prom_deinit(&p);
}

/* ---- the real validators ------------------------------------------------------------------ */

static char *run_cmd(const char *cmd, int *status) {
    FILE *f = popen(cmd, "r");
    if (f == NULL) {
        *status = -1;
        return strdup("");
    }
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t n;
    while ((n = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 4096) b = realloc(b, cap *= 2);
    }
    b[len] = 0;
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return b;
}

static const char py_parser[] =
    "import sys, json\n"
    "from prometheus_client.parser import text_string_to_metric_families\n"
    "for f in text_string_to_metric_families(open(sys.argv[1], encoding='utf-8').read()):\n"
    "    print('F', f.name, f.type, json.dumps(f.documentation))\n"
    "    for s in f.samples:\n"
    "        l = ','.join('%s=%s' % (k, json.dumps(v)) for k, v in sorted(s.labels.items()))\n"
    "        print('S', s.name, l, repr(s.value))\n";

static void test_promtool_and_python_parser(void) {
    static const int64_t bounds[] = {1000000, 5000000, 25000000};
    sl_prom_hist h[2];
    memset(h, 0, sizeof(h));
    sl_prom_hist_observe(&h[0], bounds, 3, 2000000);
    sl_prom_hist_observe(&h[1], bounds, 3, 30000000);
    sl_prom p;
    sl_prom_init(&p);
    sl_prom_family(&p, "sluice_decisions_total", SL_PROM_COUNTER, "Decisions by policy, result and window.");
    const char *l1[] = {"policy", "api", "result", "allowed", "window", "10/s", NULL};
    const char *l2[] = {"policy", "we\"ird\\name\n", "result", "shadow_limited", "window", "1000/min", NULL};
    const char *l3[] = {"policy", "bad \xFF utf8", "result", "limited", "window", "", NULL};
    sl_prom_u64(&p, l1, 12);
    sl_prom_u64(&p, l2, 3);
    sl_prom_u64(&p, l3, 1);
    sl_prom_family(&p, "sluice_store_latency_seconds", SL_PROM_HISTOGRAM, "Store round trips.");
    const sl_prom_hist *hs[2] = {&h[0], &h[1]};
    const char *hl[] = {"store", "redis", "op", "decide", NULL};
    sl_prom_histogram(&p, hl, bounds, 3, hs, 2, 1000000000);
    sl_prom_family(&p, "sluice_hot_key_share", SL_PROM_GAUGE, "Share of the top keys.");
    const char *hk[] = {"policy", "api", "rank", "1", "key", "k:0123456789abcdef", NULL};
    sl_prom_f64(&p, hk, 0.25);
    sl_prom_process(&p);
    sl_prom_build_info(&p, "sluice", "0.1.0", "deadbeef");
    char *s = render(&p);
    sl_prom_deinit(&p);
    if (!s) return;
    char path[] = "/tmp/sluice_prom_XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    if (fd < 0) return;
    T_EQ_I(write(fd, s, strlen(s)), (long long)strlen(s));
    close(fd);

    char cmd[512];
    int st;
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
    char *out = run_cmd(cmd, &st);
    if (st != 0 || out[0]) T_FAIL("promtool check metrics (exit %d): %s\n%s", st, out, s);
    free(out);

    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c \"$SLUICE_PY\" %s 2>&1", path);
    setenv("SLUICE_PY", py_parser, 1);
    out = run_cmd(cmd, &st);
    T_EQ_I(st, 0);
    static const char *const want[] = {
        "F sluice_decisions counter \"Decisions by policy, result and window.\"\n",
        "S sluice_decisions_total policy=\"api\",result=\"allowed\",window=\"10/s\" 12.0\n",
        "S sluice_decisions_total policy=\"we\\\"ird\\\\name\\n\",result=\"shadow_limited\",window=\"1000/min\" 3.0\n",
        "S sluice_decisions_total policy=\"bad \\ufffd utf8\",result=\"limited\",window=\"\" 1.0\n",
        "F sluice_store_latency_seconds histogram \"Store round trips.\"\n",
        "S sluice_store_latency_seconds_bucket le=\"0.001\",op=\"decide\",store=\"redis\" 0.0\n",
        "S sluice_store_latency_seconds_bucket le=\"0.005\",op=\"decide\",store=\"redis\" 1.0\n",
        "S sluice_store_latency_seconds_bucket le=\"0.025\",op=\"decide\",store=\"redis\" 1.0\n",
        "S sluice_store_latency_seconds_bucket le=\"+Inf\",op=\"decide\",store=\"redis\" 2.0\n",
        "S sluice_store_latency_seconds_sum op=\"decide\",store=\"redis\" 0.032\n",
        "S sluice_store_latency_seconds_count op=\"decide\",store=\"redis\" 2.0\n",
        "S sluice_hot_key_share key=\"k:0123456789abcdef\",policy=\"api\",rank=\"1\" 0.25\n",
        "F process_cpu_seconds counter",
        "F process_open_fds gauge",
        "F process_start_time_seconds gauge",
        "S sluice_build_info commit=\"deadbeef\",version=\"0.1.0\" 1.0\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(out, want[i])) T_FAIL("the parser did not see: %s\nit saw:\n%s", want[i], out);
    int samples = 0;
    for (const char *q = out; (q = strstr(q, "\nS ")); q++) samples++;
    T_EQ_I(samples, 3 + 6 + 1 + 6 + 1); /* exactly what was written, no more */
    free(out);
    unlink(path);
    free(s);
}

int main(void) {
    T_RUN(test_family_and_samples);
    T_RUN(test_misuse_is_refused);
    T_RUN(test_label_escaping);
    T_RUN(test_histogram_from_workers);
    T_RUN(test_process_metrics);
    T_RUN(test_promtool_and_python_parser);
    return T_DONE();
}
