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
#include <unistd.h>

#include "../../src/cli/config_cmd.c"
#include "../../src/cli/opts.c"
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
    T_CHECK(strstr(ERR, "/nonexistent/sluice.yaml:0:0: cannot open the file") != NULL);
}

int main(void) {
    T_RUN(bad_files);
    T_RUN(good_files);
    T_RUN(usage_and_missing_file);
    return T_DONE();
}
