/* SPDX-License-Identifier: Apache-2.0 */
/*
 * settings.c -- the server's settings of the sluice format: listeners, workers, admin
 * tokens, forward-auth status, headers, log, observe, audit and the store (memory:
 * capacity, eviction, snapshots; Redis: address, timeout, secret, time, and the
 * connection fields of store_redis.c). Defaults are docs/config.md's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "algo/algo.h"
#include "config/compiled.h"
#include "core/path.h"
#include "core/redact.h"
#include "store/memory/memory.h"

/* ---- settings ----------------------------------------------------------------------- */

static bool addr_ok(const char *s) {
    if (strncmp(s, "unix:", 5) == 0) return s[5] == '/';
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s) return false;
    if (s[0] == '[' && colon[-1] != ']') return false;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return *end == '\0' && colon[1] != '\0' && port >= 0 && port <= 65535;
}

static void get_addr(sl__ctx *cx, const sl_ynode *n, char *out, size_t len) {
    if (n->kind == SL_YSCALAR && (n->plain && (n->len == 0 || !strcmp(n->s, "null") ||
                                               !strcmp(n->s, "~") || !strcmp(n->s, "off")))) {
        out[0] = '\0';
        return;
    }
    if (n->kind != SL_YSCALAR || !addr_ok(n->s) || n->len >= len) {
        sl__err(cx, n, "bad listen address '%.60s' (expected host:port such as 127.0.0.1:8080, "
                "[::1]:8080, unix:/path, or off)", n->kind == SL_YSCALAR ? n->s : "");
        return;
    }
    memcpy(out, n->s, n->len + 1);
}

static void copy_str(sl__ctx *cx, const sl_ynode *n, const char *what, char *out, size_t len) {
    const char *s = sl__get_str(cx, n, what);
    if (s == NULL) return;
    if (strlen(s) >= len) {
        sl__err(cx, n, "%s is too long (expected at most %zu bytes)", what, len - 1);
        return;
    }
    memcpy(out, s, strlen(s) + 1);
}

/* store.local: what on_store_error: local needs (src/store/redis/local.c). floor is a fraction
 * written as a decimal (0.1) or a ratio (1/6), kept in parts per million. */
static void parse_store_local(sl__ctx *cx, const sl_ynode *n, sl_settings *st) {
    static const char *const f[] = {"instances", "floor", "heartbeat", NULL};
    if (!sl__check_fields(cx, n, "store.local", f) && n->kind != SL_YMAP) return;
    const sl_ynode *x;
    uint64_t v = 0;
    if ((x = sl__get(n, "instances")) != NULL && sl__get_count(cx, x, "instances", 1024, &v)) {
        if (v == 0)
            sl__err(cx, x, "store.local.instances 0 shares nothing (expected at least 1, or omit "
                    "it: then, with no heartbeat view, a local policy fails closed)");
        else
            st->store.local.instances = (unsigned)v;
    }
    if ((x = sl__get(n, "floor")) != NULL) {
        bool ok = sl__is_scalar(x);
        uint64_t ppm = 0;
        if (ok) {
            const char *s = x->s, *slash = strchr(s, '/');
            char *end = NULL;
            if (slash != NULL) {
                unsigned long a = strtoul(s, &end, 10), b = 0;
                ok = end == slash && a > 0;
                if (ok) b = strtoul(slash + 1, &end, 10);
                ok = ok && *end == 0 && b >= a && b > 0;
                if (ok) ppm = (uint64_t)a * 1000000u / b;
            } else {
                double d = strtod(s, &end);
                ok = end != s && *end == 0 && d > 0 && d <= 1;
                if (ok) ppm = (uint64_t)(d * 1000000.0 + 0.5);
            }
        }
        if (!ok || ppm == 0 || ppm > 1000000)
            sl__err(cx, x, "bad store.local.floor '%.40s' (expected a fraction above 0 and at "
                    "most 1: 0.1 or 1/6; omit it for 1/(2N))", sl__is_scalar(x) ? x->s : "");
        else
            st->store.local.floor_ppm = (uint32_t)ppm;
    }
    if ((x = sl__get(n, "heartbeat")) != NULL) {
        int64_t ns = 0;
        if (sl__get_duration(cx, x, &ns)) {
            if (ns < 100 * SLUICE_NS_PER_MS || ns > 60 * SLUICE_NS_PER_S)
                sl__err(cx, x, "store.local.heartbeat must be between 100ms and 60s (expected "
                        "e.g. 1s)");
            else
                st->store.local.heartbeat_ns = ns;
        }
    }
}

static void parse_store(sl__ctx *cx, const sl_ynode *n, sl_settings *st) {
    static const char *const f[] = {"type", "max_keys", "on_full", "shards", "snapshot",
                                    "addr", "timeout", "key_secret", "time", "max_tokens",
                                    "unready_when_down", "local", SL_STORE_REDIS_FIELDS, NULL};
    if (!sl__check_fields(cx, n, "store", f) && n->kind != SL_YMAP) return;
    const sl_ynode *x = sl__get(n, "type");
    if (x != NULL) {
        if (sl__is_scalar(x) && !strcmp(x->s, "memory")) st->store.type = SL_STORE_MEMORY;
        else if (sl__is_scalar(x) && !strcmp(x->s, "redis")) st->store.type = SL_STORE_REDIS;
        else if (sl__is_scalar(x) && !strcmp(x->s, "redis-cluster"))
            st->store.type = SL_STORE_REDIS_CLUSTER;
        else {
            sl__err(cx, x, "unknown store type '%.40s' (expected memory, redis or "
                    "redis-cluster)", sl__is_scalar(x) ? x->s : "");
            return;
        }
    }
    bool mem = st->store.type == SL_STORE_MEMORY;
    static const char *const memf[] = {"max_keys", "on_full", "shards", "snapshot", NULL};
    static const char *const redf[] = {"addr", "timeout", "key_secret", "time", "unready_when_down",
                                       "local", SL_STORE_REDIS_FIELDS, NULL};
    const char *const *wrong = mem ? redf : memf;
    for (size_t i = 0; wrong[i]; i++)
        if ((x = sl__get(n, wrong[i])) != NULL)
            sl__err(cx, x, "field '%s' does not apply to a %s store (expected it only with "
                    "type: %s)", wrong[i], mem ? "memory" : "redis", mem ? "redis" : "memory");
    /* outstanding settle/release tokens (both store types; see sl_token_table) */
    if ((x = sl__get(n, "max_tokens")) != NULL &&
        sl__get_count(cx, x, "max_tokens", UINT64_C(1) << 26, &st->store.max_tokens) && st->store.max_tokens == 0)
        sl__err(cx, x, "max_tokens 0 would refuse every settle and release (expected at least "
                "1, or omit it for %d)", SL_TOKENS_DEFAULT);
    if ((x = sl__get(n, "max_keys")) != NULL && mem)
        sl__get_count(cx, x, "max_keys", UINT64_C(1) << 40, &st->store.max_keys);
    if ((x = sl__get(n, "on_full")) != NULL && mem) {
        if (sl__is_scalar(x) && !strcmp(x->s, "evict_lru")) st->store.on_full = SLUICE_EVICT_LRU;
        else if (sl__is_scalar(x) && !strcmp(x->s, "refuse_new"))
            st->store.on_full = SLUICE_REFUSE_NEW;
        else
            sl__err(cx, x, "bad on_full '%.40s' (expected evict_lru or refuse_new)",
                    sl__is_scalar(x) ? x->s : "");
    }
    if ((x = sl__get(n, "shards")) != NULL && mem) {
        uint64_t v = 0;
        if (sl__get_count(cx, x, "shards", 65536, &v)) {
            if (v == 0 || (v & (v - 1)) != 0)
                sl__err(cx, x, "shards %llu is not a power of two (expected 1, 2, 4, ... "
                        "65536)", (unsigned long long)v);
            else
                st->store.shards = (unsigned)v;
        }
    }
    if ((x = sl__get(n, "snapshot")) != NULL && mem) {
        static const char *const sf[] = {"path", "every", "on_damaged", NULL};
        if (sl__check_fields(cx, x, "store.snapshot", sf)) {
            const sl_ynode *p = sl__get(x, "path"), *e = sl__get(x, "every");
            const sl_ynode *d = sl__get(x, "on_damaged");
            if (p == NULL) {
                sl__err(cx, x, "snapshot needs a path (expected path: sluice.state)");
            } else {
                copy_str(cx, p, "snapshot path", st->store.snapshot_path, SL_PATH_MAX);
                st->store.snapshot_line = p->line;
                st->store.snapshot_col = p->col;
            }
            if (e != NULL) sl__get_duration(cx, e, &st->store.snapshot_every_ns);
            if (d != NULL) {
                if (sl__is_scalar(d) && !strcmp(d->s, "refuse")) st->store.snapshot_start_empty = false;
                else if (sl__is_scalar(d) && !strcmp(d->s, "start_empty")) st->store.snapshot_start_empty = true;
                else
                    sl__err(cx, d, "bad on_damaged '%.40s' (expected refuse, the default: do not start "
                            "on a damaged snapshot, or start_empty: move it aside and start with no "
                            "state)", sl__is_scalar(d) ? d->s : "");
            }
        }
    }
    if (!mem) {
        sl__parse_store_redis(cx, n, st); /* credentials, tls, sentinel (store_redis.c) */
        /* no addr: the command line's --store (SLUICE_STORE) gives it, so a URL holding a
         * password can come from a secret while the file keeps the rest; serve refuses to
         * start when neither does, and config check warns */
        if ((x = sl__get(n, "addr")) != NULL) {
            if (!sl__is_scalar(x) || !addr_ok(x->s) || x->len >= SL_ADDR_MAX) {
                char shown[SL_ADDR_MAX + 8]; /* redacted before it is cut to 60 */
                sl_redact_copy(sl__is_scalar(x) ? x->s : "", shown, sizeof(shown));
                sl__err(cx, x, "bad redis address '%.60s' (expected host:port)", shown);
            }
            else
                memcpy(st->store.redis_addr, x->s, x->len + 1);
        }
        if ((x = sl__get(n, "timeout")) != NULL) sl__get_duration(cx, x, &st->store.redis_timeout_ns);
        if ((x = sl__get(n, "key_secret")) != NULL)
            copy_str(cx, x, "key_secret", st->store.redis_key_secret,
                     sizeof(st->store.redis_key_secret));
        if ((x = sl__get(n, "unready_when_down")) != NULL)
            sl__get_bool(cx, x, &st->store.unready_when_down);
        if ((x = sl__get(n, "local")) != NULL) parse_store_local(cx, x, st);
        if ((x = sl__get(n, "time")) != NULL) {
            if (sl__is_scalar(x) && !strcmp(x->s, "local")) st->store.redis_time_local = true;
            else if (sl__is_scalar(x) && !strcmp(x->s, "redis")) st->store.redis_time_local = false;
            else
                sl__err(cx, x, "bad store time '%.40s' (expected redis, the Redis server's TIME, "
                        "or local, this instance's clock)", sl__is_scalar(x) ? x->s : "");
        }
    }
}

static sl_envoy_settings g_envoy; /* sl_config_set_envoy: copied into every load */

void sl_config_set_envoy(const sl_envoy_settings *e) { g_envoy = *e; }
const sl_envoy_settings *sl_config_envoy(void) { return &g_envoy; }

void sl__settings_defaults(sl_settings *st) {
    memset(st, 0, sizeof(*st));
    st->envoy = g_envoy;
    snprintf(st->listen_http, sizeof(st->listen_http), "127.0.0.1:8080");
    snprintf(st->listen_resp, sizeof(st->listen_resp), "127.0.0.1:6380");
    snprintf(st->listen_admin, sizeof(st->listen_admin), "127.0.0.1:8082");
    snprintf(st->listen_grpc, sizeof(st->listen_grpc), "127.0.0.1:8081");
    st->auth_deny_status = 429;
    snprintf(st->auth_route_header, sizeof(st->auth_route_header), "x-sluice-route");
    snprintf(st->client_ip.header, sizeof(st->client_ip.header), "x-forwarded-for");
    st->store.redis_timeout_ns = 20 * SLUICE_NS_PER_MS;
    st->store.local.heartbeat_ns = SLUICE_NS_PER_S;
    st->log.level = 2; /* info */
    st->log.decisions_rejections_only = true;
    st->log.decisions_sample_ppm = 1000000;
    st->log.decisions_per_s = 100;
    st->log.decisions_burst = 100;
    st->log.rejections_every_ns = 10 * SLUICE_NS_PER_S;
    st->log.rejections_top = 3;
    st->observe.near_limit_ppm = 800000;
    st->observe.hot_counters = 64;
    st->observe.hot_interval_ns = 10 * SLUICE_NS_PER_S;
    st->observe.hot_top = 5;
    st->observe.series_seconds = 900;
    st->observe.series_max = 64;
    st->admin_ui = true;
    st->audit.keep = 64;
}

/* A fraction 0..1 ("0.1", "1", "10%") as parts per million, exactly (no floating point:
 * at most 6 decimals). */
static bool get_ppm(sl__ctx *cx, const sl_ynode *n, const char *what, uint32_t *out) {
    const char *s = sl__is_scalar(n) ? n->s : "";
    uint64_t ppm;
    if (!sl__parse_ppm(s, 1000000, &ppm)) {
        sl__err(cx, n, "bad %s '%.40s' (expected a fraction from 0 to 1, such as 0.1, or a "
                "percentage such as 10%%)", what, s);
        return false;
    }
    *out = (uint32_t)ppm;
    return true;
}

static void parse_log(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    static const char *const f[] = {"raw_keys", "level", "format", "file", "decisions",
                                    "rejections", NULL};
    if (!sl__check_fields(cx, x, "log", f)) return;
    const sl_ynode *y;
    if ((y = sl__get(x, "raw_keys")) != NULL) sl__get_bool(cx, y, &st->log_raw_keys);
    if ((y = sl__get(x, "level")) != NULL) {
        static const char *const lv[] = {"error", "warn", "info", "debug", NULL};
        int i = 0;
        while (lv[i] && !(sl__is_scalar(y) && strcmp(y->s, lv[i]) == 0)) i++;
        if (lv[i] == NULL)
            sl__err(cx, y, "bad log level '%.40s' (expected error, warn, info or debug)",
                    sl__is_scalar(y) ? y->s : "");
        else
            st->log.level = i;
    }
    if ((y = sl__get(x, "format")) != NULL) {
        if (sl__is_scalar(y) && strcmp(y->s, "text") == 0) st->log.format = 0;
        else if (sl__is_scalar(y) && strcmp(y->s, "json") == 0) st->log.format = 1;
        else
            sl__err(cx, y, "bad log format '%.40s' (expected text or json)",
                    sl__is_scalar(y) ? y->s : "");
    }
    if ((y = sl__get(x, "file")) != NULL && !(sl__is_scalar(y) && y->plain && y->len == 0))
        copy_str(cx, y, "log file", st->log.file, sizeof(st->log.file));
    if ((y = sl__get(x, "decisions")) != NULL) {
        static const char *const df[] = {"enabled", "rejections_only", "sample", "max_per_s",
                                         "burst", NULL};
        if (!sl__check_fields(cx, y, "log.decisions", df)) return;
        const sl_ynode *z;
        uint64_t v;
        if ((z = sl__get(y, "enabled")) != NULL) sl__get_bool(cx, z, &st->log.decisions);
        if ((z = sl__get(y, "rejections_only")) != NULL)
            sl__get_bool(cx, z, &st->log.decisions_rejections_only);
        if ((z = sl__get(y, "sample")) != NULL)
            get_ppm(cx, z, "decision sample", &st->log.decisions_sample_ppm);
        if ((z = sl__get(y, "max_per_s")) != NULL && sl__get_count(cx, z, "max_per_s", 1000000, &v)) {
            if (v == 0)
                sl__err(cx, z, "max_per_s 0 would log nothing (expected at least 1, or "
                        "enabled: false)");
            else
                st->log.decisions_per_s = (uint32_t)v;
        }
        if ((z = sl__get(y, "burst")) != NULL && sl__get_count(cx, z, "burst", 1000000, &v))
            st->log.decisions_burst = (uint32_t)(v ? v : 1);
    }
    /* log.rejections: off | false | {every: 10s, top: 3} (every: 0 is off too) */
    if ((y = sl__get(x, "rejections")) != NULL) {
        if (sl__is_scalar(y) && (strcmp(y->s, "off") == 0 || strcmp(y->s, "false") == 0)) {
            st->log.rejections_every_ns = 0;
        } else if (sl__check_fields(cx, y, "log.rejections", (const char *const[]){"every", "top", NULL})) {
            const sl_ynode *z;
            uint64_t v;
            if ((z = sl__get(y, "every")) != NULL) {
                int64_t ns = 0;
                if (sl__is_scalar(z) && strcmp(z->s, "0") == 0) st->log.rejections_every_ns = 0;
                else if (sl__get_duration(cx, z, &ns)) {
                    if (ns < SLUICE_NS_PER_S)
                        sl__err(cx, z, "log.rejections.every below 1s (expected 1s or more, or "
                                "off)");
                    else
                        st->log.rejections_every_ns = ns;
                }
            }
            if ((z = sl__get(y, "top")) != NULL && sl__get_u64(cx, z, 4, &v))
                st->log.rejections_top = (uint32_t)v;
        }
    }
}

static void parse_observe(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    static const char *const f[] = {"near_limit", "hot_keys", "series", NULL};
    if (!sl__check_fields(cx, x, "observe", f)) return;
    const sl_ynode *y;
    if ((y = sl__get(x, "series")) != NULL) {
        /* the console's per-second ring: workers x seconds x series x 36 bytes */
        static const char *const sf[] = {"seconds", "series", NULL};
        if (sl__check_fields(cx, y, "observe.series", sf)) {
            const sl_ynode *z;
            uint64_t v;
            if ((z = sl__get(y, "seconds")) != NULL && sl__get_u64(cx, z, 86400, &v))
                st->observe.series_seconds = (unsigned)v;
            if ((z = sl__get(y, "series")) != NULL && sl__get_u64(cx, z, 1024, &v)) {
                if (v == 0)
                    sl__err(cx, z, "observe.series.series must be 1 to 1024 (turn the ring off "
                            "with seconds: 0)");
                else
                    st->observe.series_max = (unsigned)v;
            }
        }
    }
    if ((y = sl__get(x, "near_limit")) != NULL &&
        get_ppm(cx, y, "near_limit ratio", &st->observe.near_limit_ppm) &&
        st->observe.near_limit_ppm == 0)
        sl__err(cx, y, "near_limit 0 would count every admission (expected a ratio such as "
                "0.8)");
    if ((y = sl__get(x, "hot_keys")) != NULL) {
        if (sl__is_scalar(y) && (strcmp(y->s, "off") == 0 || strcmp(y->s, "false") == 0)) {
            st->observe.hot_counters = 0;
            return;
        }
        static const char *const hf[] = {"counters", "interval", "top", NULL};
        if (!sl__check_fields(cx, y, "observe.hot_keys", hf)) return;
        const sl_ynode *z;
        uint64_t v;
        if ((z = sl__get(y, "counters")) != NULL && sl__get_count(cx, z, "counters", 4096, &v)) {
            if (v != 0 && v < 8)
                sl__err(cx, z, "hot_keys counters %llu is too few (expected 0 to turn it "
                        "off, or 8 to 4096)", (unsigned long long)v);
            else
                st->observe.hot_counters = (unsigned)v;
        }
        if ((z = sl__get(y, "interval")) != NULL &&
            sl__get_duration(cx, z, &st->observe.hot_interval_ns) &&
            st->observe.hot_interval_ns <= 0)
            sl__err(cx, z, "hot_keys interval must be above 0 (expected e.g. 10s)");
        if ((z = sl__get(y, "top")) != NULL && sl__get_count(cx, z, "top", 20, &v))
            st->observe.hot_top = (unsigned)v;
    }
}

static void parse_audit(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    static const char *const f[] = {"file", "keep", NULL};
    if (!sl__check_fields(cx, x, "audit", f)) return;
    const sl_ynode *y;
    uint64_t v;
    if ((y = sl__get(x, "file")) != NULL && !(sl__is_scalar(y) && y->plain && y->len == 0))
        copy_str(cx, y, "audit file", st->audit.file, sizeof(st->audit.file));
    if ((y = sl__get(x, "keep")) != NULL && sl__get_count(cx, y, "keep", 4096, &v))
        st->audit.keep = (unsigned)(v ? v : 1);
}

/* admin.tokens: [{name, token}]: names say who changed the config in the audit trail. */
static void parse_admin_tokens(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    if (!sl__is_seq(x)) {
        sl__err(cx, x, "admin.tokens must be a list (expected - {name: deploy-bot, token: ...})");
        return;
    }
    if (x->n > SL_ADMIN_TOKENS) {
        sl__err(cx, x, "too many admin tokens (expected at most %d)", SL_ADMIN_TOKENS);
        return;
    }
    static const char *const tf[] = {"name", "token", "role", NULL};
    for (size_t i = 0; i < x->n; i++) {
        const sl_ynode *t = x->v[i];
        if (!sl__check_fields(cx, t, "admin token", tf)) continue;
        const sl_ynode *nm = sl__get(t, "name"), *tk = sl__get(t, "token");
        if (nm == NULL || tk == NULL) {
            sl__err(cx, t, "an admin token needs a name and a token (expected {name: "
                    "deploy-bot, token: ...})");
            continue;
        }
        unsigned k = st->n_admin_tokens;
        copy_str(cx, nm, "admin token name", st->admin_tokens[k].name,
                 sizeof(st->admin_tokens[k].name));
        copy_str(cx, tk, "admin token", st->admin_tokens[k].token,
                 sizeof(st->admin_tokens[k].token));
        if (st->admin_tokens[k].token[0] == '\0' || st->admin_tokens[k].name[0] == '\0') {
            sl__err(cx, t, "an admin token and its name must not be empty");
            continue;
        }
        const sl_ynode *rl = sl__get(t, "role");
        st->admin_tokens[k].read_only = false;
        if (rl != NULL) {
            const char *rs = sl__is_scalar(rl) ? rl->s : "";
            if (strcmp(rs, "read") == 0)
                st->admin_tokens[k].read_only = true;
            else if (strcmp(rs, "act") != 0)
                sl__err(cx, rl, "unknown admin token role '%.40s' (expected read or act)", rs);
        }
        for (unsigned j = 0; j < k; j++)
            if (strcmp(st->admin_tokens[j].name, st->admin_tokens[k].name) == 0)
                sl__err(cx, nm, "admin token name '%s' is used twice (expected unique names: "
                        "the audit trail tells callers apart by them)", st->admin_tokens[k].name);
        st->n_admin_tokens = k + 1;
    }
}

/* A header name as the config writes it, kept lowercase in out (64 bytes). */
static bool header_name(sl__ctx *cx, const sl_ynode *n, const char *what, char *out, size_t len) {
    const char *s = sl__get_str(cx, n, what);
    if (s == NULL) return false;
    size_t l = strlen(s);
    bool ok = l > 0 && l < len;
    for (size_t i = 0; ok && i < l; i++) /* an HTTP token (RFC 9110) */
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
             strchr("!#$%&'*+-.^_`|~", s[i]) != NULL;
    if (!ok) {
        sl__err(cx, n, "bad %s '%.60s' (expected a header name such as X-Forwarded-For, at most %zu bytes)",
                what, s, len - 1);
        return false;
    }
    for (size_t i = 0; i <= l; i++) out[i] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 32 : s[i]);
    return true;
}

/* client_ip: peer | HEADER | {header, trusted: [CIDR...], hops: N} (docs/config.md). */
static void parse_client_ip(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    sl_client_ip_cfg *c = &st->client_ip;
    c->line = x->line, c->col = x->col;
    if (sl__is_scalar(x)) {
        if (strcmp(x->s, "peer") == 0) {
            c->mode = SL_CIP_PEER;
        } else if (header_name(cx, x, "client_ip header", c->header, sizeof(c->header))) {
            c->mode = SL_CIP_PLAIN;
            c->forwarded = strcmp(c->header, "forwarded") == 0;
            if (c->forwarded)
                sl__err(cx, x, "client_ip: Forwarded needs trusted proxies (expected client_ip: "
                        "{header: Forwarded, trusted: [10.0.0.0/8]})");
        }
        return;
    }
    static const char *const f[] = {"header", "trusted", "hops", NULL};
    if (x->kind != SL_YMAP) {
        sl__err(cx, x, "bad client_ip (expected peer, a header name, or {header: X-Forwarded-For, "
                "trusted: [10.0.0.0/8], hops: N})");
        return;
    }
    if (!sl__check_fields(cx, x, "client_ip", f)) return;
    c->mapping = true;
    const sl_ynode *a;
    if ((a = sl__get(x, "header")) != NULL) header_name(cx, a, "client_ip header", c->header, sizeof(c->header));
    c->forwarded = strcmp(c->header, "forwarded") == 0;
    if ((a = sl__get(x, "hops")) != NULL) {
        uint64_t v;
        if (sl__get_u64(cx, a, SL_CIP_WALK_MAX, &v)) c->hops = (unsigned)v;
    }
    if ((a = sl__get(x, "trusted")) != NULL) {
        if (!sl__is_seq(a)) {
            sl__err(cx, a, "client_ip.trusted must be a list (expected trusted: [10.0.0.0/8, ::1])");
        } else if (a->n > SL_CIP_TRUSTED_MAX) {
            sl__err(cx, a, "client_ip.trusted has %zu networks (expected at most %d)", a->n, SL_CIP_TRUSTED_MAX);
        } else {
            for (size_t i = 0; i < a->n; i++) {
                const sl_ynode *e = a->v[i];
                if (!sl__is_scalar(e) || !sl_cidr_parse(e->s, e->len, &c->trusted[c->n_trusted])) {
                    sl__err(cx, e, "bad trusted proxy '%.60s' (expected an address or network such as "
                            "127.0.0.1, 10.0.0.0/8 or 2001:db8::/32)", sl__is_scalar(e) ? e->s : "");
                    continue;
                }
                c->n_trusted++;
            }
        }
    }
    c->mode = (c->n_trusted > 0 || c->hops > 0) ? SL_CIP_WALK : SL_CIP_PEER;
}

void sl__parse_settings(sl__ctx *cx, const sl_ynode *root, sl_settings *st) {
    const sl_ynode *x;
    if ((x = sl__get(root, "overrides")) != NULL) { /* per-key overrides (docs/overrides.md) */
        static const char *const f[] = {"max", NULL};
        const sl_ynode *m;
        if (sl__check_fields(cx, x, "overrides", f) && (m = sl__get(x, "max")) != NULL &&
            sl__get_u64(cx, m, UINT64_C(1) << 32, &st->overrides_max) && st->overrides_max == 0)
            sl__err(cx, m, "overrides.max must be at least 1 (leave it out for 1000000)");
    }
    if ((x = sl__get(root, "listen")) != NULL) {
        static const char *const f[] = {"http", "resp", "grpc", "admin", NULL};
        if (sl__check_fields(cx, x, "listen", f)) {
            const sl_ynode *a;
            if ((a = sl__get(x, "http")) != NULL) get_addr(cx, a, st->listen_http, SL_ADDR_MAX);
            if ((a = sl__get(x, "resp")) != NULL) get_addr(cx, a, st->listen_resp, SL_ADDR_MAX);
            if ((a = sl__get(x, "grpc")) != NULL) get_addr(cx, a, st->listen_grpc, SL_ADDR_MAX);
            if ((a = sl__get(x, "admin")) != NULL)
                get_addr(cx, a, st->listen_admin, SL_ADDR_MAX);
        }
    }
    if ((x = sl__get(root, "workers")) != NULL) {
        uint64_t v;
        if (sl__get_count(cx, x, "workers", 1024, &v)) st->workers = (unsigned)v;
    }
    if ((x = sl__get(root, "admin")) != NULL) {
        static const char *const f[] = {"token", "tokens", "ui", NULL};
        if (sl__check_fields(cx, x, "admin", f) && sl__get(x, "token") != NULL)
            copy_str(cx, sl__get(x, "token"), "admin token", st->admin_token,
                     sizeof(st->admin_token));
        if (sl__get(x, "ui") != NULL) sl__get_bool(cx, sl__get(x, "ui"), &st->admin_ui);
        if (sl__get(x, "tokens") != NULL) parse_admin_tokens(cx, sl__get(x, "tokens"), st);
    }
    if ((x = sl__get(root, "auth")) != NULL) {
        static const char *const f[] = {"deny_status", "route_header", "finish", NULL};
        uint64_t v;
        bool fields_ok = sl__check_fields(cx, x, "auth", f);
        if (fields_ok && sl__get(x, "route_header") != NULL)
            header_name(cx, sl__get(x, "route_header"), "auth.route_header", st->auth_route_header,
                        sizeof(st->auth_route_header));
        if (fields_ok && sl__get(x, "finish") != NULL)
            sl__get_bool(cx, sl__get(x, "finish"), &st->auth_finish);
        if (fields_ok && sl__get(x, "deny_status") != NULL &&
            sl__get_count(cx, sl__get(x, "deny_status"), "deny_status", 999, &v)) {
            if (v < 400 || v > 599)
                sl__err(cx, sl__get(x, "deny_status"), "deny_status %llu is not an error "
                        "status (expected 400 to 599, usually 429)", (unsigned long long)v);
            else
                st->auth_deny_status = (int)v;
        }
    }
    if ((x = sl__get(root, "headers")) != NULL) {
        static const char *const f[] = {"legacy", NULL};
        if (sl__check_fields(cx, x, "headers", f) && sl__get(x, "legacy") != NULL)
            sl__get_bool(cx, sl__get(x, "legacy"), &st->legacy_headers);
    }
    if ((x = sl__get(root, "client_ip")) != NULL) parse_client_ip(cx, x, st);
    if ((x = sl__get(root, "log")) != NULL) parse_log(cx, x, st);
    if ((x = sl__get(root, "observe")) != NULL) parse_observe(cx, x, st);
    if ((x = sl__get(root, "audit")) != NULL) parse_audit(cx, x, st);
    if ((x = sl__get(root, "store")) != NULL) parse_store(cx, x, st);
}

/* ---- load --------------------------------------------------------------------------- */

