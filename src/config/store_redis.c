/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_redis.c -- the Redis store's connection settings in the config file's `store:`
 * section: username, password | password_file | password_env, db, tls: {...},
 * sentinel: {...}. Passwords are read (file, environment) while the config loads, so a
 * missing one is a config error with line:col; no message ever contains a password.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/redact.h"
#include "config/compiled.h"

#define SECRET_FILE_MAX 4096

/* Copies a string field; false (and an error at n) when it does not fit. */
static bool copy_field(sl__ctx *cx, const sl_ynode *n, const char *what, char *out, size_t cap) {
    const char *s = sl__get_str(cx, n, what);
    if (s == NULL) return false;
    size_t len = strlen(s);
    if (len >= cap) {
        sl__err(cx, n, "%s is too long (expected at most %zu bytes)", what, cap - 1);
        return false;
    }
    memcpy(out, s, len + 1);
    return true;
}

/* A password given one of three ways: the value, a file holding it (one trailing newline
 * dropped: `echo pw > file` works), or an environment variable's name. `what` names the
 * section in messages ("store", "store.sentinel"). */
static void get_password(sl__ctx *cx, const sl_ynode *map, const char *what, char *out, size_t cap) {
    const sl_ynode *v = sl__get(map, "password"), *f = sl__get(map, "password_file"),
                   *e = sl__get(map, "password_env");
    int given = (v != NULL) + (f != NULL) + (e != NULL);
    if (given > 1) {
        sl__err(cx, f != NULL && v != NULL ? f : e, "%s: give one of password, password_file or password_env",
                what);
        return;
    }
    if (v != NULL) {
        const char *s = sl__get_str(cx, v, "password");
        if (s == NULL) return;
        if (strlen(s) >= cap) {
            sl__err(cx, v, "%s.password is too long (expected at most %zu bytes)", what, cap - 1);
            return;
        }
        memcpy(out, s, strlen(s) + 1);
    } else if (f != NULL) {
        const char *path = sl__get_str(cx, f, "password_file");
        if (path == NULL) return;
        /* a regular file only: a FIFO or a device would block or never end */
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            sl__err(cx, f, "cannot read password_file '%.200s': %s", path,
                    fd < 0 ? strerror(errno) : "not a regular file");
            if (fd >= 0) close(fd);
            return;
        }
        char buf[SECRET_FILE_MAX];
        ssize_t got = read(fd, buf, sizeof(buf));
        close(fd);
        size_t n = got > 0 ? (size_t)got : 0;
        bool more = n == sizeof(buf);
        if (n > 0 && buf[n - 1] == '\n') n--;
        if (n > 0 && buf[n - 1] == '\r') n--;
        if (more || n >= cap) {
            sl__err(cx, f, "password_file '%.200s' holds more than a password (expected at most %zu bytes)", path,
                    cap - 1);
        } else if (n == 0) {
            sl__err(cx, f, "password_file '%.200s' is empty", path);
        } else if (memchr(buf, '\0', n) != NULL || memchr(buf, '\n', n) != NULL) {
            sl__err(cx, f, "password_file '%.200s' holds more than one line", path);
        } else {
            memcpy(out, buf, n);
            out[n] = '\0';
        }
        memset(buf, 0, sizeof(buf));
    } else if (e != NULL) {
        const char *name = sl__get_str(cx, e, "password_env");
        if (name == NULL) return;
        const char *s = getenv(name);
        if (s == NULL || s[0] == '\0')
            sl__err(cx, e, "environment variable %.100s (password_env) is %s", name, s ? "empty" : "not set");
        else if (strlen(s) >= cap)
            sl__err(cx, e, "environment variable %.100s is too long for a password (at most %zu bytes)", name,
                    cap - 1);
        else
            memcpy(out, s, strlen(s) + 1);
    }
}

/* One sentinel address: host:port, [v6]:port, or a host alone (port 26379). */
static bool sentinel_addr(const char *s, char *out, size_t cap) {
    const char *colon = strrchr(s, ':'), *host_end = s + strlen(s);
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (rb == NULL || rb == s + 1) return false;
        colon = rb[1] == ':' ? rb + 1 : NULL;
        if (rb[1] != '\0' && rb[1] != ':') return false;
        host_end = rb + 1;
    } else if (colon != NULL) {
        if (strchr(s, ':') != colon) return false; /* a bare IPv6 address needs brackets */
        host_end = colon;
    }
    if (host_end == s) return false;
    long port = 26379;
    if (colon != NULL) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (*end != '\0' || colon[1] == '\0' || port <= 0 || port > 65535) return false;
    }
    for (const char *p = s; p < host_end; p++)
        if (*p == ',' || *p == ' ' || *p == '/' || *p == '@') return false;
    int w = snprintf(out, cap, "%.*s:%ld", (int)(host_end - s), s, port);
    return w > 0 && (size_t)w < cap;
}

static void parse_sentinel(sl__ctx *cx, const sl_ynode *n, sl_settings *st) {
    static const char *const f[] = {"master", "addrs", "username", "password", "password_file", "password_env",
                                    NULL};
    if (!sl__check_fields(cx, n, "store.sentinel", f)) return;
    sl_redis_conn_cfg *c = &st->store.redis;
    const sl_ynode *x = sl__get(n, "master");
    if (x == NULL) sl__err(cx, n, "sentinel needs master (expected master: mymaster, the name sentinels monitor)");
    else copy_field(cx, x, "sentinel.master", c->sentinel_master, sizeof(c->sentinel_master));
    if ((x = sl__get(n, "addrs")) == NULL) {
        sl__err(cx, n, "sentinel needs addrs (expected addrs: [127.0.0.1:26379, ...])");
    } else {
        /* a list, or one string of comma-separated addresses */
        const sl_ynode *items[16];
        size_t ni = 0;
        if (x->kind == SL_YSEQ) {
            for (size_t i = 0; i < x->n && ni < 16; i++) items[ni++] = x->v[i];
            if (x->n > 16) sl__err(cx, x, "too many sentinels (expected at most 16)");
        } else {
            items[ni++] = x;
        }
        size_t off = 0;
        for (size_t i = 0; i < ni; i++) {
            const char *s = sl__get_str(cx, items[i], "sentinel address");
            if (s == NULL) continue;
            for (const char *p = s; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                while (len > 0 && *p == ' ') p++, len--;
                char addr[200], norm[200];
                if (len == 0 || len >= sizeof(addr)) {
                    sl__err(cx, items[i], "bad sentinel address (expected host:port)");
                    break;
                }
                memcpy(addr, p, len);
                addr[len] = '\0';
                while (len > 0 && addr[len - 1] == ' ') addr[--len] = '\0';
                if (!sentinel_addr(addr, norm, sizeof(norm))) {
                    char shown[sizeof(addr) + 8]; /* redacted before it is cut to 60 */
                    sl_redact_copy(addr, shown, sizeof(shown));
                    sl__err(cx, items[i], "bad sentinel address '%.60s' (expected host:port such as "
                            "127.0.0.1:26379 or [::1]:26379)", shown);
                    break;
                }
                int w = snprintf(c->sentinel_addrs + off, sizeof(c->sentinel_addrs) - off, "%s%s", off ? "," : "",
                                 norm);
                if (w < 0 || (size_t)w >= sizeof(c->sentinel_addrs) - off) {
                    sl__err(cx, items[i], "too many sentinel addresses (at most %zu bytes)",
                            sizeof(c->sentinel_addrs) - 1);
                    break;
                }
                off += (size_t)w;
                if (comma == NULL) break;
                p = comma + 1;
            }
        }
    }
    if ((x = sl__get(n, "username")) != NULL)
        copy_field(cx, x, "sentinel.username", c->sentinel_username, sizeof(c->sentinel_username));
    get_password(cx, n, "store.sentinel", c->sentinel_password, sizeof(c->sentinel_password));
}

static void parse_tls(sl__ctx *cx, const sl_ynode *n, sl_settings *st) {
    sl_redis_conn_cfg *c = &st->store.redis;
    if (n->kind == SL_YSCALAR) { /* tls: true | false */
        bool on = false;
        if (sl__get_bool(cx, n, &on)) c->tls = on;
        return;
    }
    static const char *const f[] = {"ca_file", "cert_file", "key_file", "server_name", "verify", NULL};
    if (!sl__check_fields(cx, n, "store.tls", f)) return;
    c->tls = true;
    const sl_ynode *x;
    if ((x = sl__get(n, "ca_file")) != NULL) copy_field(cx, x, "tls.ca_file", c->tls_ca_file, sizeof(c->tls_ca_file));
    if ((x = sl__get(n, "cert_file")) != NULL)
        copy_field(cx, x, "tls.cert_file", c->tls_cert_file, sizeof(c->tls_cert_file));
    if ((x = sl__get(n, "key_file")) != NULL) copy_field(cx, x, "tls.key_file", c->tls_key_file, sizeof(c->tls_key_file));
    if ((x = sl__get(n, "server_name")) != NULL)
        copy_field(cx, x, "tls.server_name", c->tls_server_name, sizeof(c->tls_server_name));
    if ((x = sl__get(n, "verify")) != NULL) {
        bool v = true;
        if (sl__get_bool(cx, x, &v)) c->tls_insecure = !v;
    }
    if (c->tls_key_file[0] && !c->tls_cert_file[0])
        sl__err(cx, sl__get(n, "key_file"), "tls.key_file needs tls.cert_file (the client certificate)");
}

void sl__parse_store_redis(sl__ctx *cx, const sl_ynode *n, sl_settings *st) {
    sl_redis_conn_cfg *c = &st->store.redis;
    memset(c, 0, sizeof(*c));
    const sl_ynode *x;
    if ((x = sl__get(n, "username")) != NULL) copy_field(cx, x, "username", c->username, sizeof(c->username));
    get_password(cx, n, "store", c->password, sizeof(c->password));
    if ((x = sl__get(n, "db")) != NULL) {
        uint64_t v = 0;
        if (sl__get_count(cx, x, "db", 1000000, &v)) {
            if (v != 0 && st->store.type == SL_STORE_REDIS_CLUSTER)
                sl__err(cx, x, "a Redis Cluster has only database 0 (remove db)");
            else
                c->db = (unsigned)v;
        }
    }
    if ((x = sl__get(n, "tls")) != NULL) parse_tls(cx, x, st);
    if ((x = sl__get(n, "sentinel")) != NULL) {
        if (st->store.type == SL_STORE_REDIS_CLUSTER)
            sl__err(cx, x, "sentinel does not apply to a redis-cluster store (expected type: redis)");
        else if (sl__get(n, "addr") != NULL)
            sl__err(cx, sl__get(n, "addr"), "addr does not apply with sentinel (the sentinels name the primary)");
        else
            parse_sentinel(cx, x, st);
    }
}
