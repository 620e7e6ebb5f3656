/*
 * serve.c -- `sluice serve`: parses the command line (flags override the config file),
 * then runs the server until SIGTERM/SIGINT. Any startup problem (bad flag, unreadable or
 * invalid config, port in use) is one line on stderr and exit status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: sluice serve [-c FILE] [--http ADDR:PORT] [--resp ADDR:PORT] [--grpc ADDR:PORT]\n"
            "                    [--admin ADDR:PORT] [--store URL] [--workers N] [--test-clock]\n"
            "                    [--compat envoy-ratelimit]\n"
            "  -c, --config FILE   policies and settings (default examples/sluice.yaml); a\n"
            "                      directory loads its *.yaml files and reloads on change\n"
            "  --http ADDR:PORT    HTTP/1.1 decisions (default 127.0.0.1:8080; 'off' disables)\n"
            "  --resp ADDR:PORT    RESP2/3 decisions (default 127.0.0.1:6380; 'off' disables)\n"
            "  --grpc ADDR:PORT    Envoy RLS over gRPC/h2c (default 127.0.0.1:8081; 'off' disables)\n"
            "  --admin ADDR:PORT   metrics, health, reload (default 127.0.0.1:9090; 'off' disables)\n"
            "  --store URL         memory: (default), redis://HOST:PORT or redis-cluster://H:P,H:P\n"
            "                      (?time=local: the instances' clock instead of Redis TIME)\n"
            "  --workers N         event loop threads (default: one per CPU)\n"
            "  --test-clock        a manual clock moved only by SL.CLOCK and POST /v1/clock\n"
            "  --log-level LEVEL   error, warn, info or debug (default: the config's log.level, info)\n"
            "  --log-format FMT    text or json (default: the config's log.format, text)\n"
            "  --log-file PATH     append logs there, reopened on SIGUSR1 ('-': stderr)\n"
            "  --compat envoy-ratelimit  a drop-in for envoyproxy/ratelimit: its environment\n"
            "                      variables, config directory, answers, metrics and Redis keys\n"
            "advanced: --read-timeout MS (10000), --idle-timeout MS (60000), --max-conns N (10000),\n"
            "          --auth-deny-status N (the config's, else 429), --drain-timeout MS (10000)\n");
}

static int bad(const char *msg, const char *arg) {
    fprintf(stderr, "sluice serve: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
    if (s == NULL || *s == '\0') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || s[0] == '-' || v > max) return -1;
    *out = v;
    return 0;
}

static void set_addr(char *dst, const char *v) {
    if (strcmp(v, "off") == 0 || strcmp(v, "none") == 0)
        snprintf(dst, SL_ADDR_MAX, "-");
    else
        snprintf(dst, SL_ADDR_MAX, "%s", v);
}

int sl_cli_serve(int argc, char **argv) {
    sl_server_opts o;
    sl_server_opts_default(&o);
    snprintf(o.config_path, sizeof(o.config_path), "examples/sluice.yaml");
    /* --compat first, wherever it is: its environment sets defaults the flags override */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--compat") == 0) {
            if (strcmp(argv[i + 1], "envoy-ratelimit") != 0)
                return bad("--compat expects envoy-ratelimit, got", argv[i + 1]);
            if (sl_cli_compat_envoy(&o) != 0) return 1;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            serve_usage(stdout);
            return 0;
        } else if (strcmp(a, "--test-clock") == 0) {
            o.test_clock = true;
            continue;
        }
        static const char *const with_value[] = {
            "-c", "--config", "--http", "--resp", "--admin", "--grpc", "--store", "--workers",
            "--read-timeout", "--idle-timeout", "--drain-timeout", "--max-conns",
            "--auth-deny-status", "--log-level", "--log-format", "--log-file", "--compat", NULL};
        bool known = false;
        for (int k = 0; with_value[k]; k++)
            if (strcmp(a, with_value[k]) == 0) known = true;
        if (!known) {
            fprintf(stderr, "sluice serve: unknown option '%s' (sluice serve --help)\n", a);
            return 1;
        }
        if (v == NULL) return bad("missing value after", a);
        i++;
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            if (strlen(v) >= sizeof(o.config_path)) return bad("path too long", v);
            snprintf(o.config_path, sizeof(o.config_path), "%s", v);
        } else if (strcmp(a, "--http") == 0) {
            set_addr(o.http, v);
        } else if (strcmp(a, "--resp") == 0) {
            set_addr(o.resp, v);
        } else if (strcmp(a, "--admin") == 0) {
            set_addr(o.admin, v);
        } else if (strcmp(a, "--grpc") == 0) {
            set_addr(o.grpc, v);
        } else if (strcmp(a, "--store") == 0) {
            snprintf(o.store_url, sizeof(o.store_url), "%s", v);
        } else if (strcmp(a, "--workers") == 0) {
            if (parse_u64(v, SL_MAX_WORKERS, &n) != 0 || n == 0)
                return bad("--workers expects a number from 1 to 64, got", v);
            o.workers = (unsigned)n;
        } else if (strcmp(a, "--read-timeout") == 0 || strcmp(a, "--idle-timeout") == 0 ||
                   strcmp(a, "--drain-timeout") == 0) {
            if (parse_u64(v, 86400000, &n) != 0 || n == 0) return bad("expected milliseconds, got", v);
            int64_t ns = (int64_t)n * SLUICE_NS_PER_MS;
            if (a[2] == 'r') o.read_timeout_ns = ns;
            else if (a[2] == 'i') o.idle_timeout_ns = ns;
            else o.drain_timeout_ns = ns;
        } else if (strcmp(a, "--max-conns") == 0) {
            if (parse_u64(v, 1000000, &n) != 0 || n == 0) return bad("--max-conns expects a positive number, got", v);
            o.max_conns = (unsigned)n;
        } else if (strcmp(a, "--log-level") == 0) {
            if (strlen(v) >= sizeof(o.log_level)) return bad("--log-level expects error, warn, info or debug, got", v);
            snprintf(o.log_level, sizeof(o.log_level), "%s", v);
        } else if (strcmp(a, "--log-format") == 0) {
            if (strlen(v) >= sizeof(o.log_format)) return bad("--log-format expects text or json, got", v);
            snprintf(o.log_format, sizeof(o.log_format), "%s", v);
        } else if (strcmp(a, "--log-file") == 0) {
            if (strlen(v) >= sizeof(o.log_file)) return bad("path too long", v);
            snprintf(o.log_file, sizeof(o.log_file), "%s", v);
        } else if (strcmp(a, "--compat") == 0) {
            continue; /* applied before the other flags */
        } else if (strcmp(a, "--auth-deny-status") == 0) {
            if (parse_u64(v, 599, &n) != 0 || n < 400) return bad("--auth-deny-status expects 400-599, got", v);
            o.auth_deny_status = (int)n;
        } else {
            fprintf(stderr, "sluice serve: unknown option '%s' (sluice serve --help)\n", a);
            return 1;
        }
    }
    if (access(o.config_path, R_OK) != 0) {
        fprintf(stderr, "sluice serve: cannot read config file %s: %s\n", o.config_path, strerror(errno));
        return 1;
    }
    char err[8192];
    sl_server *s = NULL;
    if (sl_server_create(&o, &s, err, sizeof(err)) != 0) {
        /* one line: the first error (config files may report several) */
        char *nl = strchr(err, '\n');
        if (nl) *nl = '\0';
        fprintf(stderr, "sluice serve: %s\n", err);
        return 1;
    }
    int rc = sl_server_run(s);
    sl_server_destroy(s);
    return rc;
}
