/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override_cmd.c -- `sluice override set|get|rm|ls|import|export`: per-key overrides
 * through the running server's admin API (/v1/overrides, docs/overrides.md). The address
 * from --admin or $SLUICE_ADMIN (else 127.0.0.1:8082, listen.admin's default); the token from --token-file or
 * $SLUICE_ADMIN_TOKEN, never from the command line (it would show in ps and histories).
 * Exit status: 0 done, 1 refused (the server's problem is printed) or unreachable, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "admin_http.h"
#include "cli.h"

#define ANSWER_MAX (256u << 20) /* an export of a million overrides fits */

typedef struct otarget {
    char addr[256];
    char token[512];
} otarget;

/* One request with an optional body (a buffer, or a file streamed as it is read); the
 * status (or -1, err says why) and the answer's body (malloc'd, NUL-terminated). */
static int oexchange(const otarget *t, const char *method, const char *path, const char *body,
                     size_t body_len, FILE *body_file, char **out, char *err, size_t errlen) {
    sl_cli_request r = {.addr = t->addr, .token = t->token, .method = method, .path = path,
                        .content_type = "application/json", .body = body, .body_len = body_len,
                        .body_file = body_file, .max_answer = ANSWER_MAX, .timeout_ms = 120000};
    return sl_cli_http(&r, out, err, errlen);
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
            "  the admin address: --admin or $SLUICE_ADMIN, else 127.0.0.1:8082; the token:\n"
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
    snprintf(t.addr, sizeof(t.addr), "%s", admin && admin[0] ? admin : SL_CLI_ADMIN_DEFAULT);
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
