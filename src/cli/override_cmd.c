/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override_cmd.c -- `sluice override set|get|rm|ls|import|export`: per-key overrides
 * through the running server's admin API (/v1/overrides, docs/overrides.md). The address
 * from --admin or $SLUICE_ADMIN (else 127.0.0.1:9090); the token from --token-file or
 * $SLUICE_ADMIN_TOKEN, never from the command line (it would show in ps and histories).
 * Exit status: 0 done, 1 refused (the server's problem is printed) or unreachable, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define ANSWER_MAX (256u << 20) /* an export of a million overrides fits */

typedef struct otarget {
    char addr[256];
    char token[512];
} otarget;

static int64_t mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int odial(const char *addr, char *err, size_t errlen) {
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr) {
        snprintf(err, errlen, "expected HOST:PORT");
        return -1;
    }
    size_t hl = (size_t)(colon - addr);
    if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') addr++, hl -= 2;
    if (hl >= sizeof(host)) hl = sizeof(host) - 1;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &res);
    if (g != 0) {
        snprintf(err, errlen, "%s", gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            snprintf(err, errlen, "%s", strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static bool send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

/* One request with an optional body (a buffer, or a file streamed as it is read); the
 * status (or -1, err says why) and the answer's body (malloc'd, NUL-terminated). */
static int oexchange(const otarget *t, const char *method, const char *path, const char *body,
                     size_t body_len, FILE *body_file, char **out, char *err, size_t errlen) {
    *out = NULL;
    long flen = 0;
    if (body_file != NULL) {
        if (fseek(body_file, 0, SEEK_END) != 0 || (flen = ftell(body_file)) < 0 ||
            fseek(body_file, 0, SEEK_SET) != 0) {
            snprintf(err, errlen, "the file cannot be read from start to end (a pipe? give a file)");
            return -1;
        }
        body_len = (size_t)flen;
    }
    int fd = odial(t->addr, err, errlen);
    if (fd < 0) return -1;
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\nContent-Length: %zu\r\n"
                     "Content-Type: application/json\r\n%s%s%s\r\n",
                     method, path, body_len, t->token[0] ? "Authorization: Bearer " : "", t->token,
                     t->token[0] ? "\r\n" : "");
    bool ok = n > 0 && (size_t)n < sizeof(head) && send_all(fd, head, (size_t)n);
    if (ok && body != NULL) ok = send_all(fd, body, body_len);
    if (ok && body_file != NULL) {
        char chunk[65536];
        size_t k;
        while (ok && (k = fread(chunk, 1, sizeof(chunk), body_file)) > 0) ok = send_all(fd, chunk, k);
    }
    if (!ok) {
        snprintf(err, errlen, "cannot send the request");
        close(fd);
        return -1;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    int64_t deadline = mono_ms() + 120000;
    while (buf != NULL) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = deadline - mono_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            snprintf(err, errlen, "no answer within 120 s");
            free(buf);
            close(fd);
            return -1;
        }
        if (len == cap) {
            if (cap >= ANSWER_MAX) break;
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    buf[len] = '\0';
    int status = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || sep == NULL) {
        snprintf(err, errlen, "not an HTTP answer");
        free(buf);
        return -1;
    }
    bool chunked = false;
    for (char *h = buf; h < sep; h++)
        if (strncasecmp(h, "\r\ntransfer-encoding: chunked", 28) == 0) chunked = true;
    memmove(buf, sep + 4, len - (size_t)(sep + 4 - buf) + 1);
    if (chunked) { /* a streamed export: its chunks joined in place */
        size_t in = 0, o = 0, n = strlen(buf);
        while (in < n) {
            char *end = NULL;
            unsigned long k = strtoul(buf + in, &end, 16);
            char *crlf = strstr(buf + in, "\r\n");
            if (crlf == NULL || end == buf + in || k == 0 || (size_t)(crlf + 2 - buf) + k > n) break;
            memmove(buf + o, crlf + 2, k);
            o += k;
            in = (size_t)(crlf + 2 - buf) + k + 2;
        }
        buf[o] = '\0';
    }
    *out = buf;
    return status;
}

/* Percent-encodes s; `keep` lists bytes kept as they are besides the unreserved ones. */
static void penc(const char *s, const char *keep, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < cap; p++) {
        bool unres = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                     *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep && strchr(keep, *p));
        if (unres) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
}

static void override_usage(FILE *f) {
    fprintf(f,
            "usage: sluice override [--admin ADDR] [--token-file FILE] COMMAND ...\n"
            "  set POLICY KEY JSON|-   set an override ({\"plan\": \"enterprise\"},\n"
            "                          {\"limits\": [{\"rate\": \"3000/min\"}]}, {\"block\": true},\n"
            "                          {\"exempt\": true}; expires_at, reason, label)\n"
            "  get POLICY KEY          print it (exit 1 when there is none)\n"
            "  rm POLICY KEY           remove it\n"
            "  ls [--policy P] [--orphaned]   every override, one JSON object a line\n"
            "  import FILE             NDJSON, one override a line (policy, key or key_hash)\n"
            "  export                  every override as NDJSON, re-importable\n"
            "  KEY: the key as the policy composes it; a composite key's parts joined by '|'.\n"
            "  the admin address: --admin or $SLUICE_ADMIN, else 127.0.0.1:9090; the token:\n"
            "  --token-file FILE or $SLUICE_ADMIN_TOKEN (never on the command line).\n"
            "  exit status: 0 done, 1 refused or unreachable, 2 usage\n");
}

static int report(const char *what, int status, const char *body) {
    json_t *j = json_loads(body, 0, NULL);
    const char *detail = j ? json_string_value(json_object_get(j, "detail")) : NULL;
    const char *field = j ? json_string_value(json_object_get(j, "field")) : NULL;
    if (status == 401)
        fprintf(stderr, "sluice override %s: the admin token was refused (--token-file, "
                        "$SLUICE_ADMIN_TOKEN)\n", what);
    else
        fprintf(stderr, "sluice override %s: refused (%d)%s%s: %s\n", what, status,
                field ? " at " : "", field ? field : "", detail ? detail : body);
    json_decref(j);
    return 1;
}

static bool read_token_file(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ')) out[--n] = '\0';
    return true;
}

static char *read_all(FILE *f) {
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    size_t k;
    while (b != NULL && (k = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (len + 1 == cap) {
            char *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
    }
    if (b) b[len] = '\0';
    return b;
}

int sl_cli_override(int argc, char **argv) {
    otarget t;
    const char *admin = getenv("SLUICE_ADMIN"), *tokfile = NULL, *pol = NULL;
    bool orphaned = false;
    static const struct option lo[] = {{"admin", required_argument, NULL, 'a'},
                                       {"token-file", required_argument, NULL, 'T'},
                                       {"policy", required_argument, NULL, 'p'},
                                       {"orphaned", no_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    opterr = 0;
    optind = 1;
    for (int ch; (ch = getopt_long(argc, argv, ":h", lo, NULL)) != -1;) {
        if (ch == 'a') admin = optarg;
        else if (ch == 'T') tokfile = optarg;
        else if (ch == 'p') pol = optarg;
        else if (ch == 'o') orphaned = true;
        else if (ch == 'h') return override_usage(stdout), 0;
        else {
            fprintf(stderr, "sluice override: %s '%s' (sluice override --help)\n",
                    ch == ':' ? "missing value after" : "unknown option", argv[optind - 1]);
            return 2;
        }
    }
    if (optind >= argc) {
        override_usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    char **a = argv + optind + 1;
    int na = argc - optind - 1;
    snprintf(t.addr, sizeof(t.addr), "%s", admin && admin[0] ? admin : "127.0.0.1:9090");
    t.token[0] = '\0';
    if (tokfile != NULL) {
        if (!read_token_file(tokfile, t.token, sizeof(t.token))) {
            fprintf(stderr, "sluice override: cannot read the token file %s: %s\n", tokfile, strerror(errno));
            return 1;
        }
    } else if (getenv("SLUICE_ADMIN_TOKEN") != NULL) {
        snprintf(t.token, sizeof(t.token), "%s", getenv("SLUICE_ADMIN_TOKEN"));
    }
    char path[8192], err[256] = "", *body = NULL;
    int want = strcmp(cmd, "set") == 0 ? 3 : strcmp(cmd, "get") == 0 || strcmp(cmd, "rm") == 0 ? 2
             : strcmp(cmd, "import") == 0 ? 1 : strcmp(cmd, "ls") == 0 || strcmp(cmd, "export") == 0 ? 0 : -1;
    if (want < 0 || na != want) {
        fprintf(stderr, want < 0 ? "sluice override: unknown command '%s'\n"
                                 : "sluice override %s: wrong number of arguments\n", cmd);
        override_usage(stderr);
        return 2;
    }
    if (want >= 2) {
        char pe[1024], ke[6144];
        penc(a[0], NULL, pe, sizeof(pe));
        penc(a[1], "|%", ke, sizeof(ke));
        snprintf(path, sizeof(path), "/v1/overrides/%s/%s", pe, ke);
    }
    int status;
    if (strcmp(cmd, "set") == 0) {
        char *json = strcmp(a[2], "-") == 0 ? read_all(stdin) : strdup(a[2]);
        if (json == NULL) return 1;
        status = oexchange(&t, "PUT", path, json, strlen(json), NULL, &body, err, sizeof(err));
        free(json);
    } else if (strcmp(cmd, "get") == 0) {
        status = oexchange(&t, "GET", path, NULL, 0, NULL, &body, err, sizeof(err));
    } else if (strcmp(cmd, "rm") == 0) {
        status = oexchange(&t, "DELETE", path, NULL, 0, NULL, &body, err, sizeof(err));
    } else if (strcmp(cmd, "import") == 0) {
        FILE *f = fopen(a[0], "rb");
        if (f == NULL) {
            fprintf(stderr, "sluice override import: cannot open %s: %s\n", a[0], strerror(errno));
            return 1;
        }
        status = oexchange(&t, "POST", "/v1/overrides/import", NULL, 0, f, &body, err, sizeof(err));
        fclose(f);
    } else if (strcmp(cmd, "export") == 0) {
        status = oexchange(&t, "GET", "/v1/overrides/export", NULL, 0, NULL, &body, err, sizeof(err));
    } else { /* ls: every page */
        char cursor[64] = "";
        for (int pages = 0; pages < 1000000; pages++) {
            char pe[1024] = "";
            if (pol) penc(pol, NULL, pe, sizeof(pe));
            snprintf(path, sizeof(path), "/v1/overrides?limit=1000%s%s%s%s%s", pol ? "&policy=" : "", pe,
                     orphaned ? "&orphaned=1" : "", cursor[0] ? "&cursor=" : "", cursor);
            status = oexchange(&t, "GET", path, NULL, 0, NULL, &body, err, sizeof(err));
            if (status != 200) break;
            json_t *j = json_loads(body, 0, NULL);
            json_t *items = json_object_get(j, "items");
            for (size_t i = 0; i < json_array_size(items); i++) {
                char *line = json_dumps(json_array_get(items, i), JSON_COMPACT);
                if (line) printf("%s\n", line);
                free(line);
            }
            const char *next = json_string_value(json_object_get(j, "next_cursor"));
            snprintf(cursor, sizeof(cursor), "%s", next ? next : "");
            json_decref(j);
            free(body);
            body = NULL;
            if (cursor[0] == '\0') return 0;
        }
    }
    if (status < 0) {
        fprintf(stderr, "sluice override %s: cannot reach the admin listener at %s: %s\n", cmd, t.addr, err);
        free(body);
        return 1;
    }
    int rc = 0;
    if (status >= 300) {
        rc = report(cmd, status, body ? body : "");
    } else if (strcmp(cmd, "import") == 0) {
        json_t *j = json_loads(body, 0, NULL);
        json_t *ref = json_object_get(j, "refused");
        printf("applied: %lld, refused: %zu\n",
               (long long)json_integer_value(json_object_get(j, "applied")), json_array_size(ref));
        for (size_t i = 0; i < json_array_size(ref); i++) {
            json_t *r = json_array_get(ref, i);
            fprintf(stderr, "%s:%lld: %s\n", a[0], (long long)json_integer_value(json_object_get(r, "line")),
                    json_string_value(json_object_get(r, "reason")));
        }
        rc = json_array_size(ref) > 0 ? 1 : 0;
        json_decref(j);
    } else if (body != NULL && body[0]) {
        fputs(body, stdout);
        if (body[strlen(body) - 1] != '\n') fputc('\n', stdout);
    }
    free(body);
    return rc;
}
