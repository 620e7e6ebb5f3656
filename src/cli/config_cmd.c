/*
 * config_cmd.c -- `sluice config check FILE`: loads the file exactly as the server would,
 * prints every error as file:line:col: message (expected ...) on stderr and exits 1, or
 * prints a one-line summary and exits 0. Nothing else is printed on success.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "policy/policy.h"

static int usage(FILE *f) {
    fprintf(f, "usage: sluice config check FILE\n"
               "  validates FILE (sluice or envoyproxy/ratelimit format); every error is\n"
               "  printed as FILE:LINE:COL: message; exit status 1 on errors\n");
    return f == stdout ? 0 : 2;
}

static const char *store_name(sl_store_type t) {
    switch (t) {
    case SL_STORE_REDIS: return "redis";
    case SL_STORE_REDIS_CLUSTER: return "redis-cluster";
    default: return "memory";
    }
}

int sl_cli_config(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return usage(stdout);
    if (argc != 3 || strcmp(argv[1], "check") != 0) return usage(stderr);
    const char *path = argv[2];
    static sl_diag_list dl; /* large: keep it off the stack */
    sl_config *cfg = NULL;
    int rc = sl_config_load(path, &cfg, &dl);
    if (rc != SLUICE_OK) {
        char line[SL_DIAG_MSG + 300];
        for (size_t i = 0; i < dl.n; i++) {
            sl_diag_format(&dl, i, line, sizeof(line));
            fprintf(stderr, "%s\n", line);
        }
        if (dl.dropped) fprintf(stderr, "%s: ... and %zu more errors\n", path, dl.dropped);
        if (dl.n == 0) fprintf(stderr, "%s: %s\n", path, sluice_strerror(rc));
        size_t total = dl.n + dl.dropped;
        fprintf(stderr, "%s: %zu error%s\n", path, total ? total : 1, total == 1 ? "" : "s");
        return 1;
    }
    const sl_settings *st = sl_config_settings(cfg);
    bool envoy = sl_config_is_envoy(cfg);
    size_t np = sl_config_policy_count(cfg), nl = sl_config_limiter_count(cfg);
    printf("%s: ok (%s format, %zu %s, %zu limit%s, store %s)\n", path,
           envoy ? "envoyproxy/ratelimit" : "sluice", np,
           envoy ? (np == 1 ? "rule" : "rules") : (np == 1 ? "policy" : "policies"), nl,
           nl == 1 ? "" : "s", store_name(st->store.type));
    sl_config_destroy(cfg);
    return 0;
}
