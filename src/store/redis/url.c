/* SPDX-License-Identifier: Apache-2.0 */
/*
 * url.c -- Redis store addresses as people write them (see redis.h for the forms) and
 * the options a store is opened with: URL + the config file's store section, checked
 * before anything connects. Errors name the 1-based column of the problem and never
 * repeat the URL (it may hold a password); descriptions never carry a credential.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "store/redis/conn.h"
#include "store/redis/redis.h"

#define DEFAULT_PORT 6379
#define DEFAULT_SENTINEL_PORT 26379

enum { K_REDIS, K_UNIX, K_CLUSTER, K_SENTINEL };

typedef struct scheme {
    const char *name;
    int kind;
    bool tls;
} scheme;

static const scheme schemes[] = {
    {"redis", K_REDIS, false},          {"rediss", K_REDIS, true},
    {"redis+unix", K_UNIX, false},      {"unix", K_UNIX, false},
    {"redis-cluster", K_CLUSTER, false}, {"rediss-cluster", K_CLUSTER, true},
    {"redis-sentinel", K_SENTINEL, false}, {"rediss-sentinel", K_SENTINEL, true},
};

typedef struct ctx {
    const char *url;
    char *err;
    size_t errlen;
} ctx;

static int bad(ctx *x, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(ctx *x, const char *at, const char *fmt, ...) {
    if (x->err != NULL && x->errlen > 0) {
        int n = snprintf(x->err, x->errlen, "column %d: ", (int)(at - x->url) + 1);
        if (n > 0 && (size_t)n < x->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return SLUICE_EINVAL;
}

static const scheme *scheme_of(const char *url, size_t *len) {
    const char *c = strchr(url, ':');
    if (c == NULL) return NULL;
    size_t n = (size_t)(c - url);
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (strlen(schemes[i].name) == n && strncasecmp(url, schemes[i].name, n) == 0) {
            *len = n;
            return &schemes[i];
        }
    return NULL;
}

bool sl_redis_url_is_redis(const char *url) {
    size_t n;
    return url != NULL && scheme_of(url, &n) != NULL;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes [p, end) into out (cap bytes with the NUL). */
static int decode(ctx *x, const char *p, const char *end, char *out, size_t cap, const char *what) {
    size_t n = 0;
    for (const char *s = p; s < end; s++) {
        char ch = *s;
        if (ch == '%') {
            int hi = s + 1 < end ? hexval(s[1]) : -1, lo = s + 2 < end ? hexval(s[2]) : -1;
            if (hi < 0 || lo < 0) return bad(x, s, "bad percent escape in the %s (expected %%XX, two hex digits)", what);
            ch = (char)(hi * 16 + lo);
            if (ch == '\0') return bad(x, s, "%%00 in the %s", what);
            s += 2;
        }
        if (n + 1 >= cap) return bad(x, p, "%s too long (at most %zu bytes)", what, cap - 1);
        out[n++] = ch;
    }
    out[n] = '\0';
    return SLUICE_OK;
}

static int number(ctx *x, const char *p, const char *end, unsigned long max, unsigned long *out,
                  const char *what) {
    if (p == end) return bad(x, p, "missing %s (expected a number)", what);
    unsigned long v = 0;
    for (const char *s = p; s < end; s++) {
        if (*s < '0' || *s > '9') return bad(x, s, "bad %s (expected digits)", what);
        v = v * 10 + (unsigned long)(*s - '0');
        if (v > max) return bad(x, p, "%s too large (at most %lu)", what, max);
    }
    *out = v;
    return SLUICE_OK;
}

/* Copies s into dst (cap bytes with the NUL), cut if it must be (callers check lengths
 * where a cut would matter). */
static void set_str(char *dst, size_t cap, const char *s) {
    size_t n = strlen(s);
    if (n >= cap) n = cap - 1;
    memmove(dst, s, n);
    dst[n] = '\0';
}

static bool host_char(char c) { return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_'; }

/* One "host[:port]" or "[v6][:port]" in [p, end), appended to seeds. */
static int one_host(ctx *x, const char *p, const char *end, int defport, char *seeds, size_t cap) {
    char host[SL_REDIS_HOST_MAX];
    const char *ps = NULL;
    bool v6 = false;
    if (p == end) return bad(x, p, "missing host");
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (rb == NULL) return bad(x, p, "unclosed '[' (expected [IPv6 address]:port)");
        size_t n = (size_t)(rb - p - 1);
        if (n == 0 || n >= sizeof(host)) return bad(x, p + 1, "bad IPv6 address");
        memcpy(host, p + 1, n);
        host[n] = '\0';
        unsigned char b[16];
        if (inet_pton(AF_INET6, host, b) != 1) return bad(x, p + 1, "bad IPv6 address '%s'", host);
        v6 = true;
        if (rb + 1 < end) {
            if (rb[1] != ':') return bad(x, rb + 1, "unexpected '%c' after the IPv6 address (expected :port)", rb[1]);
            ps = rb + 2;
        }
    } else {
        const char *c = memchr(p, ':', (size_t)(end - p));
        const char *he = c ? c : end;
        if (c != NULL && memchr(c + 1, ':', (size_t)(end - c - 1)) != NULL)
            return bad(x, p, "an IPv6 address must be in brackets (expected [::1]:6379)");
        size_t n = (size_t)(he - p);
        if (n == 0) return bad(x, p, "missing host");
        if (n >= sizeof(host)) return bad(x, p, "host name too long (at most %d bytes)", SL_REDIS_HOST_MAX - 1);
        for (const char *s = p; s < he; s++)
            if (!host_char(*s)) return bad(x, s, "unexpected '%c' in the host name", *s);
        memcpy(host, p, n);
        host[n] = '\0';
        if (c != NULL) ps = c + 1;
    }
    unsigned long port = (unsigned long)defport;
    if (ps != NULL) {
        if (number(x, ps, end, 65535, &port, "port") != SLUICE_OK) return SLUICE_EINVAL;
        if (port == 0) return bad(x, ps, "port 0 (expected 1-65535)");
    }
    size_t used = strlen(seeds);
    int w = snprintf(seeds + used, cap - used, "%s%s%s%s:%lu", used ? "," : "", v6 ? "[" : "", host, v6 ? "]" : "",
                     port);
    if (w < 0 || (size_t)w >= cap - used) return bad(x, p, "too many hosts (at most %zu bytes of addresses)", cap - 1);
    return SLUICE_OK;
}

static bool bool_of(const char *v, bool *out) {
    static const char *const t[] = {"1", "true", "yes", "on"}, *const f[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, t[i]) == 0) return *out = true, true;
        if (strcasecmp(v, f[i]) == 0) return *out = false, true;
    }
    return false;
}

static int option(ctx *x, const char *k, const char *ke, const char *v, const char *ve, int kind, sl_redis_opts *o) {
    char key[32], val[SL_REDIS_FILE_MAX];
    size_t kl = (size_t)(ke - k);
    if (kl == 0) return bad(x, k, "empty option name");
    if (kl >= sizeof(key)) return bad(x, k, "unknown option");
    memcpy(key, k, kl);
    key[kl] = '\0';
    if (v == NULL) return bad(x, ke, "option '%s' needs a value (expected %s=...)", key, key);
    if (decode(x, v, ve, val, sizeof(val), "option value") != SLUICE_OK) return SLUICE_EINVAL;
    unsigned long n = 0;
    bool b;
#define IS(s) (strcmp(key, s) == 0)
    if (IS("time")) {
        if (!strcmp(val, "local")) o->time_mode = SL_REDIS_TIME_CALLER;
        else if (!strcmp(val, "redis")) o->time_mode = SL_REDIS_TIME_SERVER;
        else return bad(x, v, "bad time '%.20s' (expected local or redis)", val);
    } else if (IS("timeout_ms")) {
        if (number(x, v, ve, 100000, &n, "timeout_ms") != SLUICE_OK) return SLUICE_EINVAL;
        if (n == 0) return bad(x, v, "timeout_ms 0 (expected 1-100000)");
        o->timeout_ns = (int64_t)n * SLUICE_NS_PER_MS;
    } else if (IS("lease")) {
        if (number(x, v, ve, 1000000, &n, "lease") != SLUICE_OK) return SLUICE_EINVAL;
        o->lease_slice = (unsigned)n;
    } else if (IS("db")) {
        if (number(x, v, ve, 1000000, &n, "db") != SLUICE_OK) return SLUICE_EINVAL;
        if (kind == K_CLUSTER && n != 0) return bad(x, v, "a cluster has only database 0");
        o->db = (unsigned)n;
    } else if (IS("tls") || IS("ssl")) {
        if (!bool_of(val, &b)) return bad(x, v, "bad %s '%.10s' (expected 1 or 0)", key, val);
        o->tls.on = b;
    } else if (IS("tls_verify") || IS("verify") || IS("ssl_cert_reqs")) {
        if (IS("ssl_cert_reqs")) b = strcasecmp(val, "none") != 0;
        else if (!bool_of(val, &b)) return bad(x, v, "bad %s '%.10s' (expected 1 or 0)", key, val);
        o->tls.insecure = !b;
    } else if (IS("tls_ca_file") || IS("ca_file") || IS("ssl_ca_certs")) {
        set_str(o->tls.ca_file, sizeof(o->tls.ca_file), val);
    } else if (IS("tls_cert_file") || IS("cert_file") || IS("ssl_certfile")) {
        set_str(o->tls.cert_file, sizeof(o->tls.cert_file), val);
    } else if (IS("tls_key_file") || IS("key_file") || IS("ssl_keyfile")) {
        set_str(o->tls.key_file, sizeof(o->tls.key_file), val);
    } else if (IS("tls_server_name") || IS("server_name") || IS("sni")) {
        if (strlen(val) >= sizeof(o->tls.server_name)) return bad(x, v, "server_name too long");
        set_str(o->tls.server_name, sizeof(o->tls.server_name), val);
    } else if (IS("sentinel_password") || IS("sentinel_username")) {
        if (kind != K_SENTINEL) return bad(x, k, "%s applies only to redis-sentinel:// URLs", key);
        char *dst = IS("sentinel_password") ? o->sentinel_password : o->sentinel_username;
        size_t cap = IS("sentinel_password") ? sizeof(o->sentinel_password) : sizeof(o->sentinel_username);
        if (strlen(val) >= cap) return bad(x, v, "%s too long", key);
        set_str(dst, cap, val);
    } else {
        return bad(x, k, "unknown option '%s' (expected timeout_ms, time, lease, db, tls, tls_verify, "
                         "tls_ca_file, tls_cert_file, tls_key_file, tls_server_name, sentinel_password, "
                         "sentinel_username)", key);
    }
#undef IS
    return SLUICE_OK;
}

int sl_redis_url_parse(const char *url, sl_redis_opts *o, char *err, size_t errlen) {
    ctx x = {url, err, errlen};
    if (err && errlen) err[0] = '\0';
    if (url == NULL || o == NULL) return SLUICE_EINVAL;
    size_t sl;
    const scheme *sc = scheme_of(url, &sl);
    if (sc == NULL) {
        const char *c = strchr(url, ':');
        return bad(&x, url, "unknown scheme '%.*s' (expected redis://, rediss://, redis+unix://, unix://, "
                            "redis-cluster://, rediss-cluster:// or redis-sentinel://)",
                   c ? (int)(c - url > 20 ? 20 : c - url) : 20, url);
    }
    const char *p = url + sl + 1;
    if (strncmp(p, "//", 2) == 0) p += 2;
    else if (sc->kind != K_UNIX || *p != '/') return bad(&x, p, "expected '//' after '%s:'", sc->name);
    const char *end = url + strlen(url);
    if (memchr(url, '#', (size_t)(end - url)) != NULL)
        return bad(&x, strchr(url, '#'), "unexpected '#' (a '#' in a password is written %%23)");
    const char *q = strchr(p, '?');
    const char *main_end = q ? q : end;
    /* userinfo: up to the last '@' before the query (a password may hold '/' and '@') */
    const char *at = NULL;
    for (const char *s = p; s < main_end; s++)
        if (*s == '@') at = s;
    char user[SL_REDIS_USER_MAX] = "", pass[SL_REDIS_PASS_MAX] = "";
    bool has_user = false, has_pass = false;
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *ue = colon ? colon : at;
        if (decode(&x, p, ue, user, sizeof(user), "user name") != SLUICE_OK) return SLUICE_EINVAL;
        has_user = ue > p;
        if (colon) {
            if (decode(&x, colon + 1, at, pass, sizeof(pass), "password") != SLUICE_OK) return SLUICE_EINVAL;
            has_pass = true;
        }
        p = at + 1;
    }
    /* the address part is the URL's: what came from elsewhere is replaced */
    o->seeds[0] = '\0';
    o->unix_path[0] = '\0';
    o->cluster = sc->kind == K_CLUSTER;
    o->sentinel = sc->kind == K_SENTINEL;
    o->master[0] = '\0';
    o->tls.on = sc->tls;
    if (sc->kind == K_UNIX) {
        if (*p != '/') return bad(&x, p, "expected an absolute socket path (unix:///run/redis.sock)");
        if (decode(&x, p, main_end, o->unix_path, sizeof(o->unix_path), "socket path") != SLUICE_OK)
            return SLUICE_EINVAL;
        if (o->unix_path[1] == '\0') return bad(&x, p, "missing socket path");
    } else {
        const char *he = p;
        while (he < main_end && *he != '/') he++;
        if (he == p) return bad(&x, p, "missing host (expected %s://host:port)", sc->name);
        int defport = sc->kind == K_SENTINEL ? DEFAULT_SENTINEL_PORT : DEFAULT_PORT;
        int nhosts = 0;
        for (const char *s = p; s <= he;) {
            const char *comma = memchr(s, ',', (size_t)(he - s));
            const char *e = comma ? comma : he;
            if (nhosts == 1 && sc->kind == K_REDIS)
                return bad(&x, s - 1, "a %s:// URL names one host (several: redis-cluster:// or "
                                      "redis-sentinel://)", sc->name);
            if (one_host(&x, s, e, defport, o->seeds, sizeof(o->seeds)) != SLUICE_OK) return SLUICE_EINVAL;
            nhosts++;
            s = e + 1;
            if (comma == NULL) break;
        }
        /* path: /db (redis), /master[/db] (sentinel), nothing (cluster) */
        const char *pp = he;
        if (pp < main_end) {
            pp++; /* '/' */
            const char *seg_end = memchr(pp, '/', (size_t)(main_end - pp));
            if (seg_end == NULL) seg_end = main_end;
            unsigned long n = 0;
            if (sc->kind == K_SENTINEL) {
                if (seg_end == pp) return bad(&x, pp, "missing primary name (expected .../mymaster)");
                if (decode(&x, pp, seg_end, o->master, sizeof(o->master), "primary name") != SLUICE_OK)
                    return SLUICE_EINVAL;
                if (seg_end < main_end) {
                    if (number(&x, seg_end + 1, main_end, 1000000, &n, "database number") != SLUICE_OK)
                        return SLUICE_EINVAL;
                    o->db = (unsigned)n;
                }
            } else if (sc->kind == K_CLUSTER) {
                if (pp < main_end) return bad(&x, pp, "a cluster has only database 0 (expected no path)");
            } else {
                if (seg_end != main_end) return bad(&x, seg_end, "unexpected path after the database number");
                if (pp < main_end) {
                    if (number(&x, pp, main_end, 1000000, &n, "database number") != SLUICE_OK) return SLUICE_EINVAL;
                    o->db = (unsigned)n;
                }
            }
        }
        if (sc->kind == K_SENTINEL && o->master[0] == '\0')
            return bad(&x, main_end, "missing primary name (expected redis-sentinel://h:p,h:p/mymaster)");
    }
    if (q != NULL) {
        for (const char *s = q + 1; s <= end;) {
            const char *amp = strchr(s, '&');
            const char *e = amp ? amp : end;
            if (e > s) {
                const char *eq = memchr(s, '=', (size_t)(e - s));
                if (option(&x, s, eq ? eq : e, eq ? eq + 1 : NULL, e, sc->kind, o) != SLUICE_OK) return SLUICE_EINVAL;
            }
            if (amp == NULL) break;
            s = amp + 1;
        }
    }
    if (has_user) set_str(o->username, sizeof(o->username), user);
    if (has_pass) set_str(o->password, sizeof(o->password), pass);
    memset(pass, 0, sizeof(pass));
    if (o->tls.on && sc->kind == K_UNIX) return bad(&x, url, "TLS over a unix socket is not supported");
    return SLUICE_OK;
}

int sl_redis_parse_url(const char *url, sl_redis_opts *o) { return sl_redis_url_parse(url, o, NULL, 0); }

bool sl_redis_url_has_password(const char *url) {
    size_t sl;
    if (url == NULL || scheme_of(url, &sl) == NULL) return false;
    const char *p = url + sl + 1, *q = strchr(p, '?');
    const char *end = q ? q : p + strlen(p), *at = NULL;
    for (const char *s = p; s < end; s++)
        if (*s == '@') at = s;
    if (q != NULL && strstr(q, "password=") != NULL) return true;
    if (at == NULL) return false;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    return colon != NULL && colon + 1 < at;
}

void sl_redis_opts_describe(const sl_redis_opts *o, char *out, size_t cap) {
    int n;
    if (o->unix_path[0]) n = snprintf(out, cap, "redis unix:%s", o->unix_path);
    else if (o->sentinel) n = snprintf(out, cap, "redis-sentinel primary '%s' via %s", o->master, o->seeds);
    else n = snprintf(out, cap, "%s %s", o->cluster ? "redis-cluster" : "redis", o->seeds);
    if (n < 0 || (size_t)n >= cap) return;
    size_t off = (size_t)n;
#define PUT(...)                                                                      \
    do {                                                                              \
        int w_ = snprintf(out + off, cap - off, __VA_ARGS__);                         \
        if (w_ > 0 && (size_t)w_ < cap - off) off += (size_t)w_;                      \
    } while (0)
    if (o->db) PUT(" db %u", o->db);
    bool any = false;
    if (o->tls.on) {
        PUT(" (TLS%s", o->tls.insecure ? " without verification" : "");
        any = true;
    }
    if (o->username[0]) {
        PUT("%suser %s", any ? ", " : " (", o->username);
        any = true;
    }
    if (o->password[0]) {
        PUT("%spassword set", any ? ", " : " (");
        any = true;
    }
    if (any) PUT(")");
#undef PUT
}

/* Parses the config file's `addr` (host:port, [v6]:port, unix:/path, or a URL). */
static int parse_addr(sl_redis_opts *o, const char *addr, bool cluster, char *err, size_t errlen) {
    if (sl_redis_url_is_redis(addr)) {
        char e[200];
        if (sl_redis_url_parse(addr, o, e, sizeof(e)) != SLUICE_OK) {
            snprintf(err, errlen, "bad store addr: %s", e);
            return SLUICE_EINVAL;
        }
        return SLUICE_OK;
    }
    if (strncmp(addr, "unix:", 5) == 0) {
        const char *p = addr + 5;
        while (p[0] == '/' && p[1] == '/') p++;
        if (p[0] != '/' || strlen(p) >= sizeof(o->unix_path)) {
            snprintf(err, errlen, "bad store addr: expected unix:/path/to/redis.sock");
            return SLUICE_EINVAL;
        }
        set_str(o->unix_path, sizeof(o->unix_path), p);
        o->seeds[0] = '\0';
        return SLUICE_OK;
    }
    char url[600];
    snprintf(url, sizeof(url), "%s://%s", cluster ? "redis-cluster" : "redis", addr);
    char e[200];
    ctx x = {url, e, sizeof(e)};
    o->seeds[0] = '\0';
    o->cluster = cluster;
    /* "h:p" (or several, comma-separated, for a cluster) */
    const char *p = url + strlen(cluster ? "redis-cluster://" : "redis://");
    const char *end = p + strlen(p);
    for (const char *s = p; s <= end;) {
        const char *comma = strchr(s, ',');
        const char *e2 = comma ? comma : end;
        if (one_host(&x, s, e2, DEFAULT_PORT, o->seeds, sizeof(o->seeds)) != SLUICE_OK) {
            snprintf(err, errlen, "bad store addr: %s", e);
            return SLUICE_EINVAL;
        }
        if (comma == NULL) break;
        s = comma + 1;
    }
    return SLUICE_OK;
}

/* The config file's connection settings into o (before the URL, which overrides). */
static void apply_cfg(sl_redis_opts *o, const sl_redis_conn_cfg *cs) {
    set_str(o->username, sizeof(o->username), cs->username);
    set_str(o->password, sizeof(o->password), cs->password);
    o->db = cs->db;
    o->tls.on = cs->tls;
    o->tls.insecure = cs->tls_insecure;
    set_str(o->tls.ca_file, sizeof(o->tls.ca_file), cs->tls_ca_file);
    set_str(o->tls.cert_file, sizeof(o->tls.cert_file), cs->tls_cert_file);
    set_str(o->tls.key_file, sizeof(o->tls.key_file), cs->tls_key_file);
    set_str(o->tls.server_name, sizeof(o->tls.server_name), cs->tls_server_name);
    set_str(o->sentinel_username, sizeof(o->sentinel_username), cs->sentinel_username);
    set_str(o->sentinel_password, sizeof(o->sentinel_password), cs->sentinel_password);
    if (cs->sentinel_master[0]) {
        o->sentinel = true;
        set_str(o->master, sizeof(o->master), cs->sentinel_master);
    }
}

int sl_redis_opts_check(const sl_redis_opts *o, char *err, size_t errlen) {
    if (o->cluster && o->db != 0) {
        snprintf(err, errlen, "a Redis Cluster has only database 0 (remove db)");
        return SLUICE_EINVAL;
    }
    if (o->cluster && o->sentinel) {
        snprintf(err, errlen, "a store is either a cluster or behind sentinels, not both");
        return SLUICE_EINVAL;
    }
    if (o->sentinel && (o->master[0] == '\0' || o->seeds[0] == '\0')) {
        snprintf(err, errlen, "a sentinel store needs the primary's name and the sentinels' addresses");
        return SLUICE_EINVAL;
    }
    if (o->unix_path[0] == '\0' && o->seeds[0] == '\0') {
        snprintf(err, errlen, "a redis store needs an address");
        return SLUICE_EINVAL;
    }
    if (o->tls.on && o->unix_path[0]) {
        snprintf(err, errlen, "TLS over a unix socket is not supported");
        return SLUICE_EINVAL;
    }
    if (o->tls.on) { /* the files load now, not at the first connection */
        sl_rconn_tls *t = sl_rconn_tls_create(&o->tls, err, errlen);
        if (t == NULL) return SLUICE_EINVAL;
        sl_rconn_tls_destroy(t);
    }
    return SLUICE_OK;
}

int sl_redis_opts_configure(sl_redis_opts *o, const char *url, const char *addr, bool cluster,
                            const struct sl_redis_conn_cfg *cs, char *err, size_t errlen) {
    if (cs != NULL) apply_cfg(o, cs);
    char e[240];
    if (url != NULL && url[0] != '\0' && strcmp(url, "redis:") != 0) {
        if (sl_redis_url_parse(url, o, e, sizeof(e)) != SLUICE_OK) {
            snprintf(err, errlen, "bad store URL: %s", e);
            return SLUICE_EINVAL;
        }
        if (sl_redis_url_has_password(url) && o->log != NULL)
            o->log(o->log_ud, "warning: the store URL holds a password, which any user of this machine can "
                              "read in ps or /proc (use store.password_file or store.password_env)");
    } else if (o->sentinel && cs != NULL) {
        set_str(o->seeds, sizeof(o->seeds), cs->sentinel_addrs);
    } else if (addr == NULL || addr[0] == '\0') {
        snprintf(err, errlen, "a redis store needs an address (expected store.addr in the config, "
                              "or --store redis://HOST:PORT, or SLUICE_STORE)");
        return SLUICE_EINVAL;
    } else if (parse_addr(o, addr, cluster, err, errlen) != SLUICE_OK) {
        return SLUICE_EINVAL;
    }
    if (sl_redis_opts_check(o, err, errlen) != SLUICE_OK) return SLUICE_EINVAL;
    if (o->tls.on && o->tls.insecure && o->log != NULL)
        o->log(o->log_ud, "warning: TLS certificate verification is off (tls.verify: false): anyone on the "
                          "path can impersonate Redis and read the credentials");
    return SLUICE_OK;
}
