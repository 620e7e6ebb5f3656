/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_cmd.c -- `sluice config check FILE`: loads the file exactly as the server would,
 * prints every error as file:line:col: message (expected ...) on stderr and exits 1, or
 * prints a one-line summary and exits 0. Nothing else is printed on success.
 * "Exactly as the server would": after loading, it also creates a memory store with the
 * config's store settings and an engine on it (then destroys both), so every error the
 * server reports at start (store options, limiter registration) is reported here too,
 * and so are a snapshot directory it could not write and a damaged snapshot it would
 * refuse. Policies that need the gateway to call /v1/finish get a warning (exit 0).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"
#include "engine/engine.h"

static int usage(FILE *f) {
    fprintf(f, "usage: sluice config check [--no-state] FILE\n"
               "  validates FILE (sluice or envoyproxy/ratelimit format); every error is\n"
               "  printed as FILE:LINE:COL: message; exit status 1 on errors. Also checks, as\n"
               "  serve would at start, that snapshots can be written where the file says and\n"
               "  that the snapshot there is whole; --no-state skips that (a file checked away\n"
               "  from the machine it runs on). Warnings (exit 0) name policies that need the\n"
               "  gateway to call /v1/finish.\n");
    return f == stdout ? 0 : 2;
}

/* The system clock, created once (restoring a snapshot needs the time). */
static sluice_clock *clock_sys(void) {
    static sluice_clock *c;
    if (c == NULL) c = sluice_clock_create_system();
    return c;
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
    if (argc < 2 || strcmp(argv[1], "check") != 0) return usage(stderr);
    /* `check`'s options, anywhere around FILE */
    enum { O_NO_STATE = 256 };
    static const struct option lo[] = {{"no-state", no_argument, NULL, O_NO_STATE},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    sl_opts op;
    sl_opts_init(&op, "config check", lo, "h", false);
    bool state = true;
    for (;;) {
        const char *v;
        int ch = sl_opts_next(&op, argc - 1, argv + 1, &v);
        if (ch == SL_OPT_END) break;
        if (ch == SL_OPT_ERR) return 2;
        if (ch == 'h') return usage(stdout);
        if (ch == O_NO_STATE) state = false;
    }
    int first = optind + 1; /* in argv (the parse ran on argv + 1) */
    if (first >= argc) {
        fprintf(stderr, "sluice config check: a FILE to check is required (sluice config check --help)\n");
        return 2;
    }
    if (first + 1 < argc) return sl_opts_usage_error(&op, "unexpected argument", argv[first + 1]);
    const char *path = argv[first];
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
    /* what serve checks at start: that snapshots can be written there, and that the one
     * there (if any) is whole (serve refuses to start on a damaged one by default) */
    int errors = 0;
    if (state && st->store.type == SL_STORE_MEMORY && st->store.snapshot_path[0] != '\0') {
        int e = 0;
        char msg[256] = "";
        if (sluice_snapshot_check_dir(st->store.snapshot_path, &e, msg, sizeof(msg)) != SLUICE_OK) {
            fprintf(stderr, "%s:%d:%d: snapshots cannot be written at '%s': %s (expected a directory "
                            "that exists and this user can write)\n",
                    path, st->store.snapshot_line, st->store.snapshot_col, st->store.snapshot_path, msg);
            errors++;
        } else if (access(st->store.snapshot_path, F_OK) == 0) {
            uint64_t skipped = 0;
            msg[0] = '\0';
            int r = sluice_store_restore(store, st->store.snapshot_path, sluice_clock_now(clock_sys()),
                                         &skipped, msg, sizeof(msg));
            if (r != SLUICE_OK) {
                fprintf(stderr, "%s:%d:%d: the snapshot '%s' is %s: %s (serve %s)\n", path,
                        st->store.snapshot_line, st->store.snapshot_col, st->store.snapshot_path,
                        r == SLUICE_ECORRUPT ? "damaged" : "unreadable", msg[0] ? msg : sluice_strerror(r),
                        st->store.snapshot_start_empty ? "would move it aside and start with no state"
                                                       : "would refuse to start: store.snapshot.on_damaged");
                if (!st->store.snapshot_start_empty) errors++;
            }
        }
    }
    sl_engine_destroy(eng);
    sluice_store_destroy(store);
    if (errors > 0) {
        fprintf(stderr, "%s: %d error%s\n", path, errors, errors == 1 ? "" : "s");
        sl_config_destroy(cfg);
        return 1;
    }
    if (st->store.type != SL_STORE_MEMORY && st->store.redis_addr[0] == '\0' &&
        st->store.redis.sentinel_master[0] == '\0')
        fprintf(stderr, "%s: warning: the redis store has no addr: `sluice serve` needs --store "
                        "URL (or SLUICE_STORE) to start\n", path);
    /* warnings: valid, but not what the author may think behind a forward-auth gateway */
    for (size_t i = 0; i < sl_config_policy_count(cfg); i++) {
        char msg[600];
        int line = 0, col = 0;
        if (!st->auth_finish && sl_config_policy_needs_finish(cfg, i, msg, sizeof(msg), &line, &col))
            fprintf(stderr, "%s:%d:%d: warning: %s\n", path, line, col, msg);
        if (sl_config_policy_grpc_shaping(cfg, i, msg, sizeof(msg), &line, &col))
            fprintf(stderr, "%s:%d:%d: warning: %s\n", path, line, col, msg);
    }
    {
        char msg[700];
        int line = 0, col = 0;
        if (sl_config_client_ip_warning(cfg, msg, sizeof(msg), &line, &col))
            fprintf(stderr, "%s:%d:%d: warning: %s\n", path, line, col, msg);
    }
    bool envoy = sl_config_is_envoy(cfg);
    size_t np = sl_config_policy_count(cfg), nl = sl_config_limiter_count(cfg);
    printf("%s: ok (%s format, %zu %s, %zu limit%s, store %s)\n", path,
           envoy ? "envoyproxy/ratelimit" : "sluice", np,
           envoy ? (np == 1 ? "rule" : "rules") : (np == 1 ? "policy" : "policies"), nl,
           nl == 1 ? "" : "s", store_name(st->store.type));
    sl_config_destroy(cfg);
    return 0;
}
