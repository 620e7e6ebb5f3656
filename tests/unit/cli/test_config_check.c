/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config_check.c -- `sluice config check` on every broken file in tests/config/bad/:
 * each file states, in its leading "# expect: LINE:COL: message" comments, exactly the
 * errors the command must print (in order, as FILE:LINE:COL: message) before exiting 1.
 * The example configs must pass with exit status 0 and a one-line summary.
 * The command's source is included so its real output is what is checked.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/config_cmd.c"
#include "cli/opts.c"
#include "config/compiled.h"
#include "t.h"

/* Runs `sluice config check path`, capturing stdout and stderr. */
static int run_check_args(int argc, char **argv, char *out, size_t outlen, char *err, size_t errlen);

static int run_check(const char *path, char *out, size_t outlen, char *err, size_t errlen) {
    char *argv[] = {"config", "check", (char *)path, NULL};
    return run_check_args(3, argv, out, outlen, err, errlen);
}

/* Every stderr line is a warning (or there is none). */
static bool only_warnings(const char *err) {
    for (const char *l = err; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        if (strstr(l, ": warning: ") == NULL || strstr(l, ": warning: ") > strchr(l, '\n')) return false;
    return true;
}

static int run_check_args(int argc, char **argv, char *out, size_t outlen, char *err, size_t errlen) {
    fflush(stdout);
    fflush(stderr);
    FILE *fo = tmpfile(), *fe = tmpfile();
    int so = dup(1), se = dup(2);
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    int rc = sl_cli_config(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    rewind(fo);
    rewind(fe);
    size_t n = fread(out, 1, outlen - 1, fo);
    out[n] = '\0';
    n = fread(err, 1, errlen - 1, fe);
    err[n] = '\0';
    fclose(fo);
    fclose(fe);
    return rc;
}

static char OUT[65536], ERR[65536];

static void bad_files(void) {
    const char *src = getenv("SLUICE_SRC");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/tests/config/bad", src ? src : ".");
    DIR *d = opendir(dir);
    T_CHECK(d != NULL);
    if (d == NULL) return;
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 6 || strcmp(de->d_name + nl - 5, ".yaml") != 0) continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        /* the expected lines, from the file's own comments */
        char expected[8192] = "";
        size_t nexp = 0;
        FILE *f = fopen(path, "r");
        char line[1024];
        while (f && fgets(line, sizeof(line), f)) {
            if (strncmp(line, "# expect: ", 10) != 0) break;
            size_t off = strlen(expected);
            snprintf(expected + off, sizeof(expected) - off, "%s:%s", path, line + 10);
            nexp++;
        }
        if (f) fclose(f);
        if (nexp == 0) {
            T_FAIL("%s states no expected error", path);
            continue;
        }
        int rc = run_check(path, OUT, sizeof(OUT), ERR, sizeof(ERR));
        if (rc != 1) T_FAIL("%s: exit %d, expected 1", path, rc);
        T_EQ_S(OUT, "");
        /* every error line, in order, then the count */
        static char want[16384];
        snprintf(want, sizeof(want), "%s%s: %zu error%s\n", expected, path, nexp,
                 nexp == 1 ? "" : "s");
        if (strcmp(ERR, want) != 0) T_FAIL("%s:\n--- got\n%s--- want\n%s", path, ERR, want);
        files++;
    }
    closedir(d);
    T_CHECK(files >= 20);
}

static void good_files(void) {
    static const char *const files[] = {
        "examples/sluice.yaml",       "examples/bank.yaml",
        "examples/open-finance.yaml", "examples/ai-platform.yaml",
        "examples/envoy/01-mongo-cps.yaml", "examples/envoy/10-sluice-extensions.yaml",
    };
    const char *src = getenv("SLUICE_SRC");
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", src ? src : ".", files[i]);
        /* the examples name their production snapshot paths (/var/lib/sluice): checked
         * here away from that machine, with --no-state */
        char *argv[] = {"config", "check", "--no-state", path, NULL};
        int rc = run_check_args(4, argv, OUT, sizeof(OUT), ERR, sizeof(ERR));
        if (rc != 0) T_FAIL("%s: exit %d: %s", path, rc, ERR);
        T_CHECK(only_warnings(ERR));
        char prefix[1100];
        snprintf(prefix, sizeof(prefix), "%s: ok (", path);
        T_CHECK(strncmp(OUT, prefix, strlen(prefix)) == 0);
        T_CHECK(strchr(OUT, '\n') == OUT + strlen(OUT) - 1); /* one line */
    }
}

static void usage_and_missing_file(void) {
    char *argv[] = {"config", "lint", NULL};
    fflush(stderr);
    int se = dup(2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    int rc = sl_cli_config(2, argv);
    fflush(stderr);
    dup2(se, 2);
    close(se);
    close(devnull);
    T_EQ_I(rc, 2);
    rc = run_check("/nonexistent/sluice.yaml", OUT, sizeof(OUT), ERR, sizeof(ERR));
    T_EQ_I(rc, 1);
    /* the reason, and no 0:0 position for the file as a whole */
    T_CHECK(strstr(ERR, "/nonexistent/sluice.yaml: cannot open the file: No such file or directory") != NULL);
    T_CHECK(strstr(ERR, ":0:0") == NULL);
    if (geteuid() != 0) { /* root reads anything */
        char path[] = "/tmp/sluice-unreadable-XXXXXX";
        int fd = mkstemp(path);
        T_CHECK(fd >= 0);
        close(fd);
        chmod(path, 0);
        rc = run_check(path, OUT, sizeof(OUT), ERR, sizeof(ERR));
        T_EQ_I(rc, 1);
        T_CHECK(strstr(ERR, "cannot open the file: Permission denied") != NULL);
        unlink(path);
    }
}

/* The spelt-out units (10/sec, 10/second, 30 minutes) are documented and mean what their
 * short forms do: the same config as 10/s and 30m. */
static void long_units(void) {
    static const char *const pairs[][2] = {
        {"rate: 10/sec", "rate: 10/s"}, {"rate: 10/second", "rate: 10/s"},
        {"rate: 600/minutes", "rate: 600/min"}, {"rate: 5/hour", "rate: 5/h"},
        {"rate: 3/days", "rate: 3/day"}, {"rate: 2/weeks", "rate: 2/week"},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        uint64_t lim[2];
        int64_t per[2];
        for (int k = 0; k < 2; k++) {
            char y[512];
            snprintf(y, sizeof(y), "policies:\n  - name: a\n    objective: fairness\n    key: [client_ip]\n"
                     "    algorithm: gcra\n    limits: [ { %s } ]\n", pairs[i][k]);
            static sl_diag_list dl;
            sl_config *c = NULL;
            T_EQ_I(sl_config_load_buffer(y, strlen(y), "u.yaml", &c, &dl), SLUICE_OK);
            if (c == NULL) return;
            const sl_cwindow *w = &c->pol[0].win[0];
            lim[k] = w->spec.limit;
            per[k] = w->spec.period_ns;
            sl_config_destroy(c);
        }
        T_EQ_U(lim[0], lim[1]);
        T_EQ_I(per[0], per[1]);
    }
    int64_t a = 0, b = 0;
    T_CHECK(sl__parse_duration("30 minutes", &a) && sl__parse_duration("30m", &b) && a == b);
}

/* Did-you-mean: one edit (a transposition counts as one) on short names, about a third of
 * a long one; nothing when two names are as close or none is close. */
static void did_you_mean(void) {
    static const char *const f[] = {"name", "rate", "burst", "lease", "max_delay", "algorithm", NULL};
    T_EQ_S(sl__did_you_mean("burts", f), "burst");
    T_EQ_S(sl__did_you_mean("bursts", f), "burst");
    T_EQ_S(sl__did_you_mean("algoritm", f), "algorithm");
    T_EQ_S(sl__did_you_mean("max-delay", f), "max_delay");
    T_CHECK(sl__did_you_mean("colour", f) == NULL);
    T_CHECK(sl__did_you_mean("burst", f) == NULL); /* known: nothing to suggest */
    static const char *const g[] = {"abcd", "abce", NULL};
    T_CHECK(sl__did_you_mean("abcf", g) == NULL); /* a tie */
}

int main(void) {
    T_RUN(bad_files);
    T_RUN(good_files);
    T_RUN(usage_and_missing_file);
    T_RUN(long_units);
    T_RUN(did_you_mean);
    return T_DONE();
}
