/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat.c -- `sluice serve --compat envoy-ratelimit`: envoyproxy/ratelimit's environment
 * (src/settings/settings.go there: same names, same defaults, same meanings) turned into
 * the server's options, the process-wide envoy settings (sl_config_set_envoy) and the
 * statsd sender's. Command-line flags given after it still win.
 * Every variable set in the environment is either honoured, or named in ONE warning line
 * at start (not applicable to sluice's design, or not supported yet); a variable that
 * would leave the service unable to decide (its store unreachable as configured) stops
 * the start with an error instead. A malformed value is an error, as upstream's
 * envconfig panics on it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "core/log.h"
#include "server/envoy_stats.h"
#include "server/server.h"
#include "server/statsd.h"

typedef enum { V_HONOURED = 0, V_NA, V_UNSUPPORTED } v_kind;

/* The variables sluice reads but does not act on, and why (named when set). */
static const struct {
    const char *name;
    v_kind kind;
} passive[] = {
    {"REDIS_POOL_SIZE", V_NA}, {"REDIS_PERSECOND_POOL_SIZE", V_NA},
    {"REDIS_PIPELINE_WINDOW", V_NA}, {"REDIS_PIPELINE_LIMIT", V_NA},
    {"REDIS_PERSECOND_PIPELINE_WINDOW", V_NA}, {"REDIS_PERSECOND_PIPELINE_LIMIT", V_NA},
    {"REDIS_CLUSTER_PIPELINE_PARALLELISM", V_NA},
    {"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", V_NA},
    {"REDIS_POOL_ON_EMPTY_BEHAVIOR", V_NA}, {"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", V_NA},
    {"REDIS_POOL_ON_EMPTY_WAIT_DURATION", V_NA},
    {"REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION", V_NA},
    {"REDIS_STARTUP_INITIAL_INTERVAL", V_NA}, {"REDIS_STARTUP_MAX_INTERVAL", V_NA},
    {"REDIS_STARTUP_MAX_ELAPSED_TIME", V_NA}, {"REDIS_PERSECOND_TIMEOUT", V_NA},
    {"REDIS_PERSECOND_SENTINEL_AUTH", V_UNSUPPORTED},
    {"REDIS_PERSECOND_SOCKET_TYPE", V_UNSUPPORTED}, {"REDIS_PERSECOND_TYPE", V_UNSUPPORTED},
    {"REDIS_PERSECOND_URL", V_UNSUPPORTED}, {"REDIS_PERSECOND_AUTH", V_UNSUPPORTED},
    {"REDIS_PERSECOND_TLS", V_UNSUPPORTED},
    {"GRPC_MAX_CONNECTION_AGE", V_UNSUPPORTED}, {"GRPC_MAX_CONNECTION_AGE_GRACE", V_UNSUPPORTED},
    {"USE_DOG_STATSD_MOGRIFIERS", V_UNSUPPORTED}, {"PROMETHEUS_MAPPER_YAML", V_UNSUPPORTED},
    {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", V_NA},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", V_UNSUPPORTED},
    {"TRACING_ENABLED", V_UNSUPPORTED}, {"TRACING_SERVICE_NAME", V_UNSUPPORTED},
    {"TRACING_SERVICE_NAMESPACE", V_UNSUPPORTED}, {"TRACING_SERVICE_INSTANCE_ID", V_UNSUPPORTED},
    {"TRACING_EXPORTER_PROTOCOL", V_UNSUPPORTED}, {"TRACING_SAMPLING_RATE", V_UNSUPPORTED},
    {"CONFIG_GRPC_XDS_NODE_ID", V_NA}, {"CONFIG_GRPC_XDS_NODE_METADATA", V_NA},
    {"CONFIG_GRPC_XDS_SERVER_URL", V_NA}, {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", V_NA},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", V_NA}, {"CONFIG_GRPC_XDS_SERVER_USE_TLS", V_NA},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", V_NA}, {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", V_NA},
    {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", V_NA}, {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", V_NA},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", V_NA}, {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", V_NA},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", V_NA}, {"XDS_CLIENT_BACKOFF_JITTER", V_NA},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", V_NA},
    {"MEMCACHE_HOST_PORT", V_NA}, {"MEMCACHE_MAX_IDLE_CONNS", V_NA}, {"MEMCACHE_SRV", V_NA},
    {"MEMCACHE_SRV_REFRESH", V_NA}, {"MEMCACHE_TLS", V_NA}, {"MEMCACHE_TLS_CLIENT_CERT", V_NA},
    {"MEMCACHE_TLS_CLIENT_KEY", V_NA}, {"MEMCACHE_TLS_CACERT", V_NA},
    {"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", V_NA},
};

/* LOG_FORMAT's: lines written before the logger exists use it too. */
static sl_log_format g_fmt = SL_LOG_TEXT;
static sl_log_level g_lvl = SL_LOG_WARN; /* LOG_LEVEL's: a warning under error is not said */

/* One line before the server starts (an error that stops the start, or the warning), in
 * the format LOG_FORMAT asks for. */
static void say(sl_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(sl_log_level lvl, const char *fmt, ...) {
    if (lvl > g_lvl) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sl_log_emit_once(g_fmt, lvl, lvl == SL_LOG_ERROR ? "start_failed" : "compat_env", msg);
}

static const char *env(const char *name, const char *def) {
    const char *v = getenv(name);
    return v != NULL ? v : def;
}

static int fail(const char *name, const char *value, const char *expected) {
    say(SL_LOG_ERROR, "--compat envoy-ratelimit: %s=%s is not valid (expected %s)",
            name, value, expected);
    return -1;
}

/* Go's strconv.ParseBool. */
static int get_bool(const char *name, bool def, bool *out) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') { /* envconfig: empty = the default */
        *out = def;
        return 0;
    }
    static const char *const t[] = {"1", "t", "T", "TRUE", "true", "True", NULL};
    static const char *const f[] = {"0", "f", "F", "FALSE", "false", "False", NULL};
    for (size_t i = 0; t[i]; i++)
        if (!strcmp(v, t[i])) return *out = true, 0;
    for (size_t i = 0; f[i]; i++)
        if (!strcmp(v, f[i])) return *out = false, 0;
    return fail(name, v, "true or false");
}

static int get_int(const char *name, long long def, long long min, long long max, long long *out) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || *end != '\0' || n < min || n > max) return fail(name, v, "a whole number");
    *out = n;
    return 0;
}

/* Go's time.ParseDuration for what operators write: "10s", "1m30s", "500ms", "1h". */
static int get_duration(const char *name, int64_t def_ns, int64_t *out) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        *out = def_ns;
        return 0;
    }
    static const struct {
        const char *u;
        int64_t ns;
    } units[] = {{"ns", 1}, {"us", 1000}, {"µs", 1000}, {"ms", 1000000}, {"s", 1000000000},
                 {"m", 60 * (int64_t)1000000000}, {"h", 3600 * (int64_t)1000000000}};
    int64_t total = 0;
    const char *p = v;
    if (!strcmp(p, "0")) return *out = 0, 0;
    while (*p) {
        char *end;
        errno = 0;
        double x = strtod(p, &end); /* config parsing: a duration written with a fraction */
        if (end == p || errno || x < 0) return fail(name, v, "a duration such as 10s or 500ms");
        p = end;
        int64_t mult = 0;
        size_t best = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t l = strlen(units[i].u);
            if (strncmp(p, units[i].u, l) == 0 && l > best) best = l, mult = units[i].ns;
        }
        if (best == 0) return fail(name, v, "a duration such as 10s or 500ms");
        p += best;
        total += (int64_t)(x * (double)mult);
    }
    *out = total;
    return 0;
}

static int copy_to(const char *name, const char *v, char *dst, size_t cap);

/* "user:password" or "password" (upstream cuts at the first ':') into user and pass.
 * Never echoed: a bad value is named, not shown. */
static int auth_of(const char *name, char *user, size_t ucap, char *pass, size_t pcap) {
    const char *v = env(name, "");
    if (v[0] == '\0') return 0;
    const char *colon = strchr(v, ':');
    size_t ul = colon ? (size_t)(colon - v) : 0;
    const char *pw = colon ? colon + 1 : v;
    if (ul >= ucap || strlen(pw) >= pcap || pw[0] == '\0') {
        say(SL_LOG_ERROR, "--compat envoy-ratelimit: %s is not valid (expected "
                        "'password' or 'user:password', at most %zu bytes)", name, pcap - 1);
        return -1;
    }
    memcpy(user, v, ul);
    user[ul] = '\0';
    snprintf(pass, pcap, "%s", pw);
    return 0;
}

/* The Redis connection's settings from upstream's variables: REDIS_AUTH, REDIS_TLS with
 * REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT/KEY and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION,
 * REDIS_SENTINEL_AUTH. Kept out of the store URL (a URL is visible in logs and ps). */
static int redis_conn(sl_server_opts *o) {
    sl_redis_conn_cfg *c = &o->store_conn;
    memset(c, 0, sizeof(*c));
    if (auth_of("REDIS_AUTH", c->username, sizeof(c->username), c->password, sizeof(c->password)) != 0 ||
        auth_of("REDIS_SENTINEL_AUTH", c->sentinel_username, sizeof(c->sentinel_username),
                c->sentinel_password, sizeof(c->sentinel_password)) != 0)
        return -1;
    bool tls = false, skip = false;
    if (get_bool("REDIS_TLS", false, &tls) != 0 || get_bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false, &skip) != 0)
        return -1;
    c->tls = tls;
    static const struct {
        const char *var;
        size_t off;
    } files[] = {{"REDIS_TLS_CACERT", offsetof(sl_redis_conn_cfg, tls_ca_file)},
                 {"REDIS_TLS_CLIENT_CERT", offsetof(sl_redis_conn_cfg, tls_cert_file)},
                 {"REDIS_TLS_CLIENT_KEY", offsetof(sl_redis_conn_cfg, tls_key_file)}};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const char *v = env(files[i].var, "");
        if (v[0] == '\0') continue;
        if (!tls) {
            say(SL_LOG_ERROR, "--compat envoy-ratelimit: %s is set but REDIS_TLS is not true",
                    files[i].var);
            return -1;
        }
        if (copy_to(files[i].var, v, (char *)c + files[i].off, SL_PATH_MAX) != 0) return -1;
    }
    /* sluice verifies the chain and the name together: skipping the name turns
     * verification off (said at start) */
    if (tls && skip) c->tls_insecure = true;
    o->store_conn_set = true;
    return 0;
}

static int copy_to(const char *name, const char *v, char *dst, size_t cap) {
    if (strlen(v) >= cap) return fail(name, v, "a shorter value");
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* "host:port" from a host variable and a port variable; ":port" and "0.0.0.0" listen on
 * every interface as upstream; an IPv6 host is bracketed. */
static int listen_addr(const char *hv, const char *hdef, const char *pv, long long pdef, char *out) {
    const char *h = env(hv, hdef);
    long long port;
    if (get_int(pv, pdef, 0, 65535, &port) != 0) return -1;
    if (h[0] == '\0') h = "0.0.0.0";
    bool v6 = strchr(h, ':') != NULL && h[0] != '[';
    int n = snprintf(out, SL_ADDR_MAX, "%s%s%s:%lld", v6 ? "[" : "", h, v6 ? "]" : "", port);
    if (n < 0 || n >= SL_ADDR_MAX) return fail(hv, h, "a shorter host");
    return 0;
}

/* PROMETHEUS_ADDR: Go's listen address, ":9090" = every interface. */
static int go_addr(const char *name, const char *v, char *out) {
    const char *colon = strrchr(v, ':');
    if (colon == NULL) return fail(name, v, "HOST:PORT or :PORT");
    int n = colon == v ? snprintf(out, SL_ADDR_MAX, "0.0.0.0%s", v) : snprintf(out, SL_ADDR_MAX, "%s", v);
    if (n < 0 || n >= SL_ADDR_MAX) return fail(name, v, "a shorter address");
    return 0;
}

static void join(char *out, size_t cap, const char *a, const char *b) {
    size_t l = strlen(out);
    if (a == NULL || a[0] == '\0') return;
    snprintf(out + l, cap - l, "%s%s%s", l && out[l - 1] != '/' ? "/" : "", a, b);
}

static void note(char *buf, size_t cap, const char *name) {
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "%s%s", l ? ", " : "", name);
}

/* LOG_LEVEL (logrus's names, any case; upstream's default WARN) and LOG_FORMAT ("json",
 * any case; anything else is text, as upstream; unset: the settings file's, else text)
 * into --log-level and --log-format, which flags given after still override. A level
 * logrus would not parse stops the start. */
static int log_env(sl_server_opts *o) {
    const char *f = env("LOG_FORMAT", NULL);
    g_fmt = f != NULL && strcasecmp(f, "json") == 0 ? SL_LOG_JSON : SL_LOG_TEXT;
    if (f != NULL) /* unset: upstream's text, unless a sluice settings file says json */
        snprintf(o->log_format, sizeof(o->log_format), "%s", g_fmt == SL_LOG_JSON ? "json" : "text");
    const char *l = env("LOG_LEVEL", "WARN");
    static const struct {
        const char *name, *ours;
    } lv[] = {{"panic", "error"}, {"fatal", "error"}, {"error", "error"}, {"warn", "warn"},
              {"warning", "warn"}, {"info", "info"}, {"debug", "debug"}, {"trace", "debug"}};
    for (size_t i = 0; i < sizeof(lv) / sizeof(lv[0]); i++)
        if (strcasecmp(l, lv[i].name) == 0) {
            snprintf(o->log_level, sizeof(o->log_level), "%s", lv[i].ours);
            sl_log_level_parse(lv[i].ours, &g_lvl);
            return 0;
        }
    return fail("LOG_LEVEL", l, "panic, fatal, error, warn, info, debug or trace");
}

int sl_cli_compat_envoy(sl_server_opts *o) {
    sl_envoy_settings es;
    memset(&es, 0, sizeof(es));
    es.compat = true;
    bool b;
    long long n;

    if (log_env(o) != 0) return -1; /* first: what follows is said in its format */

    /* listeners: as upstream, on every interface, HTTP 8080, gRPC 8081, debug 6070; no RESP */
    if (listen_addr("HOST", "0.0.0.0", "PORT", 8080, o->http) != 0) return -1;
    if (listen_addr("GRPC_HOST", "0.0.0.0", "GRPC_PORT", 8081, o->grpc) != 0) return -1;
    if (listen_addr("DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", 6070, o->admin) != 0) return -1;
    const char *uds = env("GRPC_UDS", "");
    if (uds[0] != '\0') {
        if (uds[0] != '/') return fail("GRPC_UDS", uds, "an absolute path");
        if (snprintf(o->grpc, SL_ADDR_MAX, "unix:%s", uds) >= SL_ADDR_MAX)
            return fail("GRPC_UDS", uds, "a shorter path");
    }
    snprintf(o->resp, SL_ADDR_MAX, "-");

    /* gRPC over TLS, with client certificates when a CA is given */
    if (get_bool("GRPC_SERVER_USE_TLS", false, &b) != 0) return -1;
    if (b) {
        const char *cert = env("GRPC_SERVER_TLS_CERT", ""), *key = env("GRPC_SERVER_TLS_KEY", "");
        if (cert[0] == '\0' || key[0] == '\0') {
            say(SL_LOG_ERROR, "--compat envoy-ratelimit: GRPC_SERVER_USE_TLS=true needs "
                            "GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY");
            return -1;
        }
        if (copy_to("GRPC_SERVER_TLS_CERT", cert, o->grpc_tls_cert, sizeof(o->grpc_tls_cert)) ||
            copy_to("GRPC_SERVER_TLS_KEY", key, o->grpc_tls_key, sizeof(o->grpc_tls_key)) ||
            copy_to("GRPC_CLIENT_TLS_CACERT", env("GRPC_CLIENT_TLS_CACERT", ""), o->grpc_tls_client_ca,
                    sizeof(o->grpc_tls_client_ca)) ||
            copy_to("GRPC_CLIENT_TLS_SAN", env("GRPC_CLIENT_TLS_SAN", ""), o->grpc_tls_client_san,
                    sizeof(o->grpc_tls_client_san)))
            return -1;
    }

    /* the config directory RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY */
    const char *ct = env("CONFIG_TYPE", "FILE");
    if (strcasecmp(ct, "FILE") != 0) {
        say(SL_LOG_ERROR, "--compat envoy-ratelimit: CONFIG_TYPE=%s is not supported "
                        "(sluice loads rules from files: CONFIG_TYPE=FILE)", ct);
        return -1;
    }
    o->config_path[0] = '\0';
    join(o->config_path, sizeof(o->config_path), env("RUNTIME_ROOT", "/srv/runtime_data/current"), "");
    join(o->config_path, sizeof(o->config_path), env("RUNTIME_SUBDIRECTORY", ""), "");
    join(o->config_path, sizeof(o->config_path), env("RUNTIME_APPDIRECTORY", "config"), "");
    if (get_bool("RUNTIME_IGNOREDOTFILES", false, &es.ignore_dotfiles) != 0) return -1;
    if (get_bool("RUNTIME_WATCH_ROOT", true, &b) != 0) return -1; /* both are watched */
    if (get_bool("MERGE_DOMAIN_CONFIG", false, &es.merge_domains) != 0) return -1;

    /* answers */
    if (get_bool("LIMIT_RESPONSE_HEADERS_ENABLED", false, &es.headers) != 0) return -1;
    if (copy_to("LIMIT_LIMIT_HEADER", env("LIMIT_LIMIT_HEADER", "RateLimit-Limit"), es.header_limit,
                sizeof(es.header_limit)) ||
        copy_to("LIMIT_REMAINING_HEADER", env("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                es.header_remaining, sizeof(es.header_remaining)) ||
        copy_to("LIMIT_RESET_HEADER", env("LIMIT_RESET_HEADER", "RateLimit-Reset"), es.header_reset,
                sizeof(es.header_reset)))
        return -1;
    if (get_bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false, &es.stop_increment) != 0 ||
        get_bool("SHADOW_MODE", false, &es.shadow) != 0 || get_bool("QUOTA_MODE", false, &es.quota) != 0 ||
        get_bool("RESPONSE_DYNAMIC_METADATA", false, &es.dynamic_metadata) != 0 ||
        get_bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false, &es.healthy_with_config) != 0 ||
        get_bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false, &es.health_active_conn) != 0)
        return -1;
    const char *nr = env("NEAR_LIMIT_RATIO", "0.8");
    char *end;
    es.near_ratio = strtof(nr, &end);
    if (nr[0] == '\0' || *end != '\0' || !(es.near_ratio >= 0)) return fail("NEAR_LIMIT_RATIO", nr, "a number such as 0.8");

    /* the store */
    if (copy_to("CACHE_KEY_PREFIX", env("CACHE_KEY_PREFIX", ""), es.key_prefix, sizeof(es.key_prefix)) != 0)
        return -1;
    if (get_int("EXPIRATION_JITTER_MAX_SECONDS", 300, 0, 86400 * 365, &n) != 0) return -1;
    es.jitter_s = n;
    if (get_int("LOCAL_CACHE_SIZE_IN_BYTES", 0, 0, (long long)1 << 40, &n) != 0) return -1;
    es.local_cache_bytes = (uint64_t)n;
    const char *backend = env("BACKEND_TYPE", "redis");
    if (strcmp(backend, "memory") == 0) { /* a sluice extension: one instance, no Redis */
        snprintf(o->store_url, sizeof(o->store_url), "memory:");
    } else if (strcmp(backend, "redis") == 0 || backend[0] == '\0') {
        const char *sock = env("REDIS_SOCKET_TYPE", "unix"), *type = env("REDIS_TYPE", "SINGLE");
        const char *url = env("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
        bool unix_sock = strcasecmp(sock, "unix") == 0, sentinel = strcasecmp(type, "sentinel") == 0,
             cluster = strcasecmp(type, "cluster") == 0;
        if (!unix_sock && strcasecmp(sock, "tcp") != 0) return fail("REDIS_SOCKET_TYPE", sock, "tcp or unix");
        if (!sentinel && !cluster && strcasecmp(type, "single") != 0)
            return fail("REDIS_TYPE", type, "single, cluster or sentinel");
        if (unix_sock && (sentinel || cluster))
            return fail("REDIS_SOCKET_TYPE", sock, "tcp with REDIS_TYPE cluster or sentinel");
        if (redis_conn(o) != 0) return -1; /* REDIS_AUTH, REDIS_TLS*, REDIS_SENTINEL_AUTH */
        if (strncmp(url, "redis://", 8) == 0) url += 8;
        int64_t to_ns = 0;
        if (get_duration("REDIS_TIMEOUT", 0, &to_ns) != 0) return -1;
        char tmo[48] = ""; /* unset: sluice's per-decision default (docs: why not 10 s) */
        if (to_ns > 0) snprintf(tmo, sizeof(tmo), "&timeout_ms=%lld", (long long)(to_ns / 1000000 ? to_ns / 1000000 : 1));
        const char *tls = o->store_conn.tls ? "s" : "";
        int w;
        if (unix_sock) {
            if (url[0] != '/') return fail("REDIS_URL", url, "an absolute socket path with REDIS_SOCKET_TYPE=unix");
            w = snprintf(o->store_url, sizeof(o->store_url), "unix://%s?time=local%s", url, tmo);
        } else if (sentinel) { /* upstream's form: MASTER,sentinel1,...,sentinelN */
            const char *comma = strchr(url, ',');
            if (comma == NULL || comma == url || comma[1] == '\0')
                return fail("REDIS_URL", url, "<master name>,<sentinel1>,...,<sentinelN> with REDIS_TYPE=sentinel");
            w = snprintf(o->store_url, sizeof(o->store_url), "redis%s-sentinel://%s/%.*s?time=local%s", tls,
                         comma + 1, (int)(comma - url), url, tmo);
        } else {
            w = snprintf(o->store_url, sizeof(o->store_url), "redis%s%s://%s?time=local%s", tls,
                         cluster ? "-cluster" : "", url, tmo);
        }
        if (w < 0 || (size_t)w >= sizeof(o->store_url)) return fail("REDIS_URL", url, "a shorter URL");
    } else {
        say(SL_LOG_ERROR, "--compat envoy-ratelimit: BACKEND_TYPE=%s is not supported "
                        "(redis, or memory for one instance)", backend);
        return -1;
    }

    /* statistics: statsd (UDP), DogStatsD, Prometheus */
    sl_statsd_opts so;
    memset(&so, 0, sizeof(so));
    bool use_statsd, use_dog, use_prom, disable;
    if (get_bool("USE_STATSD", true, &use_statsd) != 0 || get_bool("USE_DOG_STATSD", false, &use_dog) != 0 ||
        get_bool("USE_PROMETHEUS", false, &use_prom) != 0 || get_bool("DISABLE_STATS", false, &disable) != 0)
        return -1;
    if (!disable && use_dog + use_statsd + use_prom > 1) { /* upstream refuses to start too */
        say(SL_LOG_ERROR, "--compat envoy-ratelimit: unable to use more than one stats "
                        "sink at the same time (set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS; "
                        "USE_STATSD is true unless set to false)");
        return -1;
    }
    if (get_int("STATSD_PORT", 8125, 1, 65535, &n) != 0) return -1;
    so.port = (int)n;
    if (copy_to("STATSD_HOST", env("STATSD_HOST", "localhost"), so.host, sizeof(so.host)) != 0) return -1;
    if (get_duration("STATS_FLUSH_INTERVAL", 10 * (int64_t)1000000000, &so.flush_ns) != 0) return -1;
    so.dog = use_dog;
    so.on = !disable && (use_dog || use_statsd);
    sl_statsd_configure(&so);
    sl_envoy_stats_set_tags(env("EXTRA_TAGS", ""));
    if (use_prom && !disable) {
        if (go_addr("PROMETHEUS_ADDR", env("PROMETHEUS_ADDR", ":9090"), o->prom) != 0) return -1;
        const char *pp = env("PROMETHEUS_PATH", "/metrics");
        if (pp[0] != '/') return fail("PROMETHEUS_PATH", pp, "a path starting with /");
        if (copy_to("PROMETHEUS_PATH", pp, o->prom_path, sizeof(o->prom_path)) != 0) return -1;
    }

    /* one warning naming what is set and not acted on */
    char na[1024] = "", un[1024] = "";
    for (size_t i = 0; i < sizeof(passive) / sizeof(passive[0]); i++)
        if (getenv(passive[i].name) != NULL) note(passive[i].kind == V_NA ? na : un, sizeof(na), passive[i].name);
    if (get_bool("REDIS_PERSECOND", false, &b) != 0) return -1;
    if (b) note(un, sizeof(un), "REDIS_PERSECOND (per-second limits count in the main Redis)");
    if (getenv("GRPC_CLIENT_TLS_SAN") != NULL && o->grpc_tls_cert[0] == '\0')
        note(un, sizeof(un), "GRPC_CLIENT_TLS_SAN without GRPC_SERVER_USE_TLS");
    if (na[0] != '\0' || un[0] != '\0')
        say(SL_LOG_WARN, "--compat envoy-ratelimit: not acted on:%s%s%s%s%s",
                un[0] ? " not supported: " : "", un, un[0] && na[0] ? ";" : "",
                na[0] ? " not applicable (sluice's own design covers it): " : "", na);
    sl_config_set_envoy(&es);
    return 0;
}
