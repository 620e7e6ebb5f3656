/*
 * config_cmd.c -- `sluice config check FILE`: loads the file exactly as the server would,
 * prints every error as file:line:col: message (expected ...) on stderr and exits 1, or
 * prints a one-line summary and exits 0. Nothing else is printed on success.
 * "Exactly as the server would": after loading, it also creates a memory store with the
 * config's store settings and an engine on it (then destroys both), so every error the
 * server reports at start (store options, limiter registration) is reported here too.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "engine/engine.h"

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
    /* A Redis store registers the same limiters; the memory store stands in for it (no
     * connection is made by a check). */
    sluice_store_options so = {0};
    if (st->store.type == SL_STORE_MEMORY) {
        so.max_keys = st->store.max_keys;
        so.on_full = st->store.on_full;
        so.shards = st->store.shards;
    }
    int err = 0;
    sluice_store *store = sluice_store_create(&so, &err);
    if (store == NULL) {
        fprintf(stderr, "%s: store: %s\n%s: 1 error\n", path, sluice_strerror(err), path);
        sl_config_destroy(cfg);
        return 1;
    }
    char ebuf[512] = "";
    sl_engine *eng = sl_engine_create(cfg, store, &err, ebuf, sizeof(ebuf));
    if (eng == NULL) {
        fprintf(stderr, "%s: %s\n%s: 1 error\n", path, ebuf[0] ? ebuf : sluice_strerror(err),
                path);
        sluice_store_destroy(store);
        sl_config_destroy(cfg);
        return 1;
    }
    sl_engine_destroy(eng);
    sluice_store_destroy(store);
    bool envoy = sl_config_is_envoy(cfg);
    size_t np = sl_config_policy_count(cfg), nl = sl_config_limiter_count(cfg);
    printf("%s: ok (%s format, %zu %s, %zu limit%s, store %s)\n", path,
           envoy ? "envoyproxy/ratelimit" : "sluice", np,
           envoy ? (np == 1 ? "rule" : "rules") : (np == 1 ? "policy" : "policies"), nl,
           nl == 1 ? "" : "s", store_name(st->store.type));
    sl_config_destroy(cfg);
    return 0;
}
