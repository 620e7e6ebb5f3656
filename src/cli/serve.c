/* SPDX-License-Identifier: Apache-2.0 */
/*
 * serve.c -- `sluice serve`: the command line (getopt_long: --opt value and --opt=value,
 * short forms for the common flags), an environment variable for every flag (SLUICE_HTTP,
 * ...; a flag wins over its variable, both over the config file), the config file's
 * search path, then the server until SIGTERM/SIGINT. Exit status: 0 after a clean stop,
 * 1 for a runtime problem (unreadable or invalid config, port in use), 2 for a usage
 * error (unknown flag, bad value), each said in one line on stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/admin/overrides.h"
#include "cli.h"
#include "core/log.h"
#include "server/observe.h"
#include "opts.h"
#include "server/server.h"

#ifndef SLUICE_INSTALLED_CONFIG
#define SLUICE_INSTALLED_CONFIG "/etc/sluice/sluice.yaml"
#endif

enum {
    O_CONFIG = 'c', O_WORKERS = 'w', O_STORE = 's', O_HELP = 'h',
    O_HTTP = 256, O_RESP, O_GRPC, O_ADMIN, O_TEST_CLOCK, O_READ_TIMEOUT, O_IDLE_TIMEOUT,
    O_DRAIN_TIMEOUT, O_MAX_CONNS, O_MAX_BUFFERED, O_DENY_STATUS, O_LOG_LEVEL, O_LOG_FORMAT, O_LOG_FILE, O_COMPAT
};

/* Every flag, its environment variable (NULL: none) and whether it takes a value. */
static const struct {
    struct option lo;
    const char *env;
} flags[] = {
    {{"config", required_argument, NULL, O_CONFIG}, NULL /* SLUICE_CONFIG: the search path */},
    {{"http", required_argument, NULL, O_HTTP}, "SLUICE_HTTP"},
    {{"resp", required_argument, NULL, O_RESP}, "SLUICE_RESP"},
    {{"grpc", required_argument, NULL, O_GRPC}, "SLUICE_GRPC"},
    {{"admin", required_argument, NULL, O_ADMIN}, "SLUICE_ADMIN"},
    {{"store", required_argument, NULL, O_STORE}, "SLUICE_STORE"},
    {{"workers", required_argument, NULL, O_WORKERS}, "SLUICE_WORKERS"},
    {{"test-clock", no_argument, NULL, O_TEST_CLOCK}, "SLUICE_TEST_CLOCK"},
    {{"read-timeout", required_argument, NULL, O_READ_TIMEOUT}, "SLUICE_READ_TIMEOUT"},
    {{"idle-timeout", required_argument, NULL, O_IDLE_TIMEOUT}, "SLUICE_IDLE_TIMEOUT"},
    {{"drain-timeout", required_argument, NULL, O_DRAIN_TIMEOUT}, "SLUICE_DRAIN_TIMEOUT"},
    {{"max-conns", required_argument, NULL, O_MAX_CONNS}, "SLUICE_MAX_CONNS"},
    {{"max-buffered", required_argument, NULL, O_MAX_BUFFERED}, "SLUICE_MAX_BUFFERED"},
    {{"auth-deny-status", required_argument, NULL, O_DENY_STATUS}, "SLUICE_AUTH_DENY_STATUS"},
    {{"log-level", required_argument, NULL, O_LOG_LEVEL}, "SLUICE_LOG_LEVEL"},
    {{"log-format", required_argument, NULL, O_LOG_FORMAT}, "SLUICE_LOG_FORMAT"},
    {{"log-file", required_argument, NULL, O_LOG_FILE}, "SLUICE_LOG_FILE"},
    {{"compat", required_argument, NULL, O_COMPAT}, "SLUICE_COMPAT"},
    {{"help", no_argument, NULL, O_HELP}, NULL},
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: sluice serve [-c FILE] [--http ADDR] [--resp ADDR] [--grpc ADDR] [--admin ADDR]\n"
            "                    [-s URL] [-w N] [--test-clock] [--compat envoy-ratelimit]\n"
            "  -c, --config FILE   policies and settings; a directory loads its *.yaml files and\n"
            "                      reloads on change. Without it: ./sluice.yaml, then $SLUICE_CONFIG,\n"
            "                      then " SLUICE_INSTALLED_CONFIG "\n"
            "  --http ADDR         HTTP/1.1 decisions (default 127.0.0.1:8080; 'off' disables)\n"
            "  --resp ADDR         RESP2/3 decisions (default 127.0.0.1:6380; 'off' disables)\n"
            "  --grpc ADDR         Envoy RLS over gRPC/h2c (default 127.0.0.1:8081; 'off' disables)\n"
            "  --admin ADDR        metrics, health, reload (default 127.0.0.1:8082; 'off' disables)\n"
            "                      (ADDR: HOST:PORT, [IPv6]:PORT or unix:/PATH)\n"
            "  -s, --store URL     memory: (default), redis://[USER:PASS@]HOST:PORT[/DB], rediss://,\n"
            "                      unix:///PATH, redis-cluster://H:P,H:P, redis-sentinel://H:P,H:P/MASTER\n"
            "                      (?time=local: the instances' clock instead of Redis TIME)\n"
            "  -w, --workers N     event loop threads (default: the config's; 0: one per CPU)\n"
            "  --test-clock        a manual clock moved only by SL.CLOCK and POST /v1/clock\n"
            "  --log-level LEVEL   error, warn, info or debug (default: the config's log.level, info)\n"
            "  --log-format FMT    text or json (default: the config's log.format, text)\n"
            "  --log-file PATH     append logs there, reopened on SIGUSR1 ('-': stderr)\n"
            "  --compat envoy-ratelimit  a drop-in for envoyproxy/ratelimit: its environment\n"
            "                      variables, config directory, answers, metrics and Redis keys\n"
            "advanced: --read-timeout MS (10000), --idle-timeout MS (60000), --max-conns N (10000),\n"
            "          --max-buffered MIB (256: connection buffers, all together; 0: no budget),\n"
            "          --auth-deny-status N (the config's, else 429), --drain-timeout MS (10000)\n"
            "Every flag FLAG-NAME also comes from SLUICE_FLAG_NAME (SLUICE_HTTP, SLUICE_LOG_LEVEL...;\n"
            "SLUICE_TEST_CLOCK=1); a flag wins over its variable. Exit status: 0 stopped cleanly,\n"
            "1 runtime error, 2 usage error.\n");
}

/* A usage error: exit status 2. `from` names where the value came from. */
static int usage_err(const char *from, const char *what, const char *value) {
    fprintf(stderr, "sluice serve: %s: %s%s%s%s (sluice serve --help)\n", from, what,
            value ? " '" : "", value ? value : "", value ? "'" : "");
    return 2;
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

static int set_str(char *dst, size_t cap, const char *v, const char *from) {
    if (strlen(v) >= cap) return usage_err(from, "too long", NULL);
    snprintf(dst, cap, "%s", v);
    return 0;
}

static int set_addr(char *dst, const char *v, const char *from) {
    if (strcmp(v, "off") == 0 || strcmp(v, "none") == 0) v = "-";
    if (v[0] == '\0') return usage_err(from, "expected an address or off, got nothing", NULL);
    return set_str(dst, SL_ADDR_MAX, v, from);
}

static bool truthy(const char *v) {
    return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on");
}

/* Applies one flag's value (from the command line or its variable); 0 or 2. */
static int apply(sl_server_opts *o, int id, const char *v, const char *from) {
    uint64_t n;
    switch (id) {
    case O_CONFIG: return set_str(o->config_path, sizeof(o->config_path), v, from);
    case O_HTTP: return set_addr(o->http, v, from);
    case O_RESP: return set_addr(o->resp, v, from);
    case O_GRPC: return set_addr(o->grpc, v, from);
    case O_ADMIN: return set_addr(o->admin, v, from);
    case O_STORE: return set_str(o->store_url, sizeof(o->store_url), v, from);
    case O_WORKERS:
        /* 0 means one per CPU, as the config's workers: 0 */
        if (parse_u64(v, SL_MAX_WORKERS, &n) != 0) return usage_err(from, "expected 0 (one per CPU) to 64, got", v);
        o->workers = (unsigned)n;
        return 0;
    case O_TEST_CLOCK: o->test_clock = v == NULL || truthy(v); return 0;
    case O_READ_TIMEOUT:
    case O_IDLE_TIMEOUT:
    case O_DRAIN_TIMEOUT:
        if (parse_u64(v, 86400000, &n) != 0 || n == 0)
            return usage_err(from, "expected milliseconds (1 to 86400000), got", v);
        *(id == O_READ_TIMEOUT ? &o->read_timeout_ns : id == O_IDLE_TIMEOUT ? &o->idle_timeout_ns
                                                                            : &o->drain_timeout_ns) =
            (int64_t)n * SLUICE_NS_PER_MS;
        return 0;
    case O_MAX_CONNS:
        if (parse_u64(v, 1000000, &n) != 0 || n == 0) return usage_err(from, "expected 1 to 1000000, got", v);
        o->max_conns = (unsigned)n;
        return 0;
    case O_MAX_BUFFERED:
        if (parse_u64(v, 1048576, &n) != 0) return usage_err(from, "expected MiB, 0 (no budget) to 1048576, got", v);
        o->max_buffered = (uint64_t)n << 20;
        return 0;
    case O_DENY_STATUS:
        if (parse_u64(v, 599, &n) != 0 || n < 400) return usage_err(from, "expected 400 to 599, got", v);
        o->auth_deny_status = (int)n;
        return 0;
    case O_LOG_LEVEL:
        if (strcmp(v, "error") && strcmp(v, "warn") && strcmp(v, "info") && strcmp(v, "debug"))
            return usage_err(from, "expected error, warn, info or debug, got", v);
        return set_str(o->log_level, sizeof(o->log_level), v, from);
    case O_LOG_FORMAT:
        if (strcmp(v, "text") && strcmp(v, "json")) return usage_err(from, "expected text or json, got", v);
        return set_str(o->log_format, sizeof(o->log_format), v, from);
    case O_LOG_FILE: return set_str(o->log_file, sizeof(o->log_file), v, from);
    case O_COMPAT: /* applied first (see sl_cli_serve) */
        if (strcmp(v, "envoy-ratelimit") != 0) return usage_err(from, "expected envoy-ratelimit, got", v);
        return 0;
    default: return usage_err(from, "unknown option", NULL);
    }
}

/* The log format for lines written before the logger exists: --log-format (or its
 * variable, or LOG_FORMAT in compat mode) when given, else text (the config's log.format
 * is not known yet). */
static sl_log_format flag_format(const sl_server_opts *o) {
    sl_log_format f = SL_LOG_TEXT;
    if (o->log_format[0] && sl_log_format_parse(o->log_format, &f) != 0) f = SL_LOG_TEXT;
    return f;
}

/* The config file when no -c names one: ./sluice.yaml, $SLUICE_CONFIG, the installed one. */
static int find_config(sl_server_opts *o) {
    const char *env = getenv("SLUICE_CONFIG");
    const struct {
        const char *path, *why;
    } tried[] = {{"sluice.yaml", "the working directory's"},
                 {env && env[0] ? env : NULL, "$SLUICE_CONFIG's"},
                 {SLUICE_INSTALLED_CONFIG, "the installed"}};
    for (size_t i = 0; i < sizeof(tried) / sizeof(tried[0]); i++) {
        if (tried[i].path == NULL || access(tried[i].path, F_OK) != 0) continue;
        snprintf(o->config_path, sizeof(o->config_path), "%s", tried[i].path);
        char msg[SL_PATH_MAX + 64];
        snprintf(msg, sizeof(msg), "using %s config %s", tried[i].why, tried[i].path);
        sl_log_level lv = SL_LOG_INFO; /* --log-level (or its variable) when given */
        if (!o->log_level[0] || sl_log_level_parse(o->log_level, &lv) != 0 || lv >= SL_LOG_INFO)
            sl_log_emit_once(flag_format(o), SL_LOG_INFO, "config_found", msg);
        return 0;
    }
    char msg[2 * SL_PATH_MAX + 200];
    snprintf(msg, sizeof(msg), "no config file: none of ./sluice.yaml, $SLUICE_CONFIG (%s), %s exists "
             "(expected -c FILE; examples/sluice.yaml in the source tree is a start)",
             env && env[0] ? env : "unset", SLUICE_INSTALLED_CONFIG);
    sl_log_emit_once(flag_format(o), SL_LOG_ERROR, "start_failed", msg);
    return 1;
}

int sl_cli_serve(int argc, char **argv) {
    /* Signals are the server's from the first instant: SIGHUP, SIGTERM, SIGINT and SIGUSR1
     * wait (blocked) until the server's signal loop takes them, so a reload asked for
     * during the start reloads once it runs, a stop asked for stops, and none kills. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    sl_server_opts o;
    sl_server_opts_default(&o);
    struct option lo[NFLAGS + 1];
    for (size_t i = 0; i < NFLAGS; i++) lo[i] = flags[i].lo;
    memset(&lo[NFLAGS], 0, sizeof(lo[0]));
    static const char shorts[] = "+:c:w:s:h"; /* leading colon: a missing value is told apart */

    /* --compat first, wherever it is (flag or SLUICE_COMPAT): its environment sets
     * defaults that the other variables and flags override */
    const char *compat = getenv("SLUICE_COMPAT");
    opterr = 0;
    optind = 1;
    for (int ch; (ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1;)
        if (ch == O_COMPAT) compat = optarg;
    if (compat != NULL && compat[0] != '\0') {
        if (apply(&o, O_COMPAT, compat, "--compat") != 0) return 2;
        if (sl_cli_compat_envoy(&o) != 0) return 1;
    }
    /* then the variables, then the flags */
    for (size_t i = 0; i < NFLAGS; i++) {
        const char *v = flags[i].env ? getenv(flags[i].env) : NULL;
        if (v == NULL || v[0] == '\0' || flags[i].lo.val == O_COMPAT) continue;
        if (apply(&o, flags[i].lo.val, v, flags[i].env) != 0) return 2;
    }
    bool have_config = false;
    sl_opts op;
    sl_opts_init(&op, "serve", lo, shorts + 2, true); /* the shared parser: same messages */
    for (;;) {
        const char *v;
        int ch = sl_opts_next(&op, argc, argv, &v);
        if (ch == SL_OPT_END) break;
        if (ch == SL_OPT_ERR) return 2;
        if (ch == O_HELP) {
            serve_usage(stdout);
            return 0;
        }
        if (ch == O_CONFIG) have_config = true;
        if (apply(&o, ch, v, op.from) != 0) return 2;
    }
    if (optind < argc) return sl_opts_usage_error(&op, "unexpected argument", argv[optind]);
    if (!have_config && o.config_path[0] == '\0' && find_config(&o) != 0) return 1; /* compat sets its own */
    if (access(o.config_path, R_OK) != 0) {
        char msg[SL_PATH_MAX + 128];
        snprintf(msg, sizeof(msg), "cannot read config file %s: %s", o.config_path, strerror(errno));
        sl_log_emit_once(flag_format(&o), SL_LOG_ERROR, "start_failed", msg);
        return 1;
    }
    char err[8192];
    sl_server *s = NULL;
    int created = sl_server_create(&o, &s, err, sizeof(err));
    if (created == 0 && sl_ovr_redis_start(s, err, sizeof(err)) != 0) { /* overrides in Redis */
        sl_server_destroy(s);
        created = -1;
    }
    if (created != 0) {
        /* one line: the first error (config files may report several) */
        char *nl = strchr(err, '\n');
        if (nl) *nl = '\0';
        /* in the format the logger would have used (the config's, once it was read) */
        int lf = sl_obs_last_format();
        sl_log_emit_once(o.log_format[0] || lf < 0 ? flag_format(&o) : (sl_log_format)lf, SL_LOG_ERROR,
                         "start_failed", err);
        return 1;
    }
    int rc = sl_server_run(s);
    sl_server_destroy(s);
    return rc;
}
