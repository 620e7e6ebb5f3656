/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_cmd.c -- `sluice reload` and `sluice status`: the running server's admin API from
 * the command line (POST /v1/reload, GET /readyz and /v1/policies). The address comes
 * from --admin, $SLUICE_ADMIN, the config file's listen.admin (-c or the search path of
 * serve), else 127.0.0.1:8082; the token from --token, $SLUICE_ADMIN_TOKEN or the
 * config's admin.token. One short HTTP/1.1 exchange, a 5 s deadline, nothing kept.
 * Exit status: 0 done (status: ready or degraded), 1 refused, unready or unreachable,
 * 2 usage.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin_http.h"
#include "cli.h"
#include "opts.h"
#include "config/config.h"

#ifndef SLUICE_INSTALLED_CONFIG
#define SLUICE_INSTALLED_CONFIG "/etc/sluice/sluice.yaml"
#endif

#define RESP_MAX (1 << 20)

typedef struct target {
    char addr[SL_ADDR_MAX];
    char token[256];
} target;

/* One request without a body; the status (or -1, err said why) and the body (malloc'd). */
static int exchange(const target *t, const char *method, const char *path, char **body, char *err,
                    size_t errlen) {
    sl_cli_request r = {.addr = t->addr, .token = t->token, .method = method, .path = path,
                        .max_answer = RESP_MAX, .timeout_ms = 5000};
    return sl_cli_http(&r, body, err, errlen);
}

/* The admin address and token: flags, then variables, then the config file. */
static int resolve(int argc, char **argv, const char *cmd, target *t) {
    const char *config = NULL, *admin = getenv("SLUICE_ADMIN"), *token = getenv("SLUICE_ADMIN_TOKEN");
    static const struct option lo[] = {{"config", required_argument, NULL, 'c'},
                                       {"admin", required_argument, NULL, 'a'},
                                       {"token", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    sl_opts op;
    sl_opts_init(&op, cmd, lo, "c:h", true);
    for (;;) {
        const char *v;
        int ch = sl_opts_next(&op, argc, argv, &v);
        if (ch == SL_OPT_END) break;
        if (ch == SL_OPT_ERR) return 2;
        if (ch == 'c') config = v;
        else if (ch == 'a') admin = v;
        else if (ch == 't') token = v;
        else if (ch == 'h') return 3;
    }
    if (optind < argc) return sl_opts_usage_error(&op, "unexpected argument", argv[optind]);
    if (config == NULL) { /* serve's search path, quietly */
        const char *env = getenv("SLUICE_CONFIG");
        const char *cands[] = {"sluice.yaml", env && env[0] ? env : NULL, SLUICE_INSTALLED_CONFIG};
        for (size_t i = 0; i < 3 && config == NULL; i++)
            if (cands[i] && access(cands[i], R_OK) == 0) config = cands[i];
    }
    const sl_settings *st = NULL;
    sl_config *cfg = NULL;
    static sl_diag_list dl;
    if (config != NULL && (admin == NULL || token == NULL) && sl_config_load(config, &cfg, &dl) == 0)
        st = sl_config_settings(cfg);
    snprintf(t->addr, sizeof(t->addr), "%s",
             admin && admin[0] ? admin : st && st->listen_admin[0] ? st->listen_admin : SL_CLI_ADMIN_DEFAULT);
    snprintf(t->token, sizeof(t->token), "%s", token ? token : st ? st->admin_token : "");
    if (cfg) sl_config_destroy(cfg);
    if (strcmp(t->addr, "-") == 0) {
        fprintf(stderr, "sluice %s: the admin listener is off in %s\n", cmd, config ? config : "the config");
        return 1;
    }
    return 0;
}

static void admin_usage(FILE *f, const char *cmd) {
    fprintf(f,
            "usage: sluice %s [-c FILE] [--admin ADDR] [--token TOKEN]\n"
            "  %s\n"
            "  the admin address: --admin, $SLUICE_ADMIN, listen.admin of -c FILE (or of the\n"
            "  config serve would find), else 127.0.0.1:8082; the token: --token,\n"
            "  $SLUICE_ADMIN_TOKEN or the config's admin.token.\n"
            "  exit status: 0 %s, 1 %s, 2 usage\n",
            cmd,
            strcmp(cmd, "reload") == 0 ? "asks the running server to load its config again (POST /v1/reload)"
                                       : "prints the running server's readiness and policies",
            strcmp(cmd, "reload") == 0 ? "reloaded" : "ready or degraded",
            strcmp(cmd, "reload") == 0 ? "refused (the old config stays) or unreachable"
                                       : "unready or unreachable");
}

int sl_cli_reload(int argc, char **argv) {
    target t;
    int rc = resolve(argc, argv, "reload", &t);
    if (rc == 3) return admin_usage(stdout, "reload"), 0;
    if (rc != 0) return rc;
    char err[256] = "", *body = NULL;
    int status = exchange(&t, "POST", "/v1/reload", &body, err, sizeof(err));
    if (status < 0) {
        fprintf(stderr, "sluice reload: cannot reach the admin listener at %s: %s\n", t.addr, err);
        return 1;
    }
    json_t *j = json_loads(body, 0, NULL);
    if (status == 200 && j != NULL) {
        printf("reloaded: generation %lld", (long long)json_integer_value(json_object_get(j, "generation")));
        json_t *rn = json_object_get(j, "restart_needed");
        if (json_array_size(rn) > 0) {
            printf("; take effect at the next start:");
            for (size_t i = 0; i < json_array_size(rn); i++)
                printf("%s %s", i ? "," : "", json_string_value(json_array_get(rn, i)));
        }
        printf("\n");
        rc = 0;
    } else if (status == 401) {
        fprintf(stderr, "sluice reload: the admin token was refused (--token, $SLUICE_ADMIN_TOKEN)\n");
        rc = 1;
    } else {
        const char *detail = j ? json_string_value(json_object_get(j, "detail")) : NULL;
        json_t *errs = j ? json_object_get(j, "errors") : NULL;
        fprintf(stderr, "sluice reload: refused (%d): %s\n", status, detail ? detail : body);
        for (size_t i = 0; i < json_array_size(errs); i++) /* each as file:line:col: message */
            fprintf(stderr, "%s\n", json_string_value(json_array_get(errs, i)));
        rc = 1;
    }
    json_decref(j);
    free(body);
    return rc;
}

int sl_cli_status(int argc, char **argv) {
    target t;
    int rc = resolve(argc, argv, "status", &t);
    if (rc == 3) return admin_usage(stdout, "status"), 0;
    if (rc != 0) return rc;
    char err[256] = "", *body = NULL;
    int status = exchange(&t, "GET", "/readyz", &body, err, sizeof(err));
    if (status < 0) {
        fprintf(stderr, "sluice status: not running? cannot reach the admin listener at %s: %s\n", t.addr, err);
        return 1;
    }
    printf("%s: %s", t.addr, body);
    if (body[0] == '\0' || body[strlen(body) - 1] != '\n') printf("\n");
    rc = status == 200 ? 0 : 1;
    free(body);
    status = exchange(&t, "GET", "/v1/policies", &body, err, sizeof(err));
    json_t *j = status == 200 ? json_loads(body, 0, NULL) : NULL;
    json_t *pols = j ? (json_is_array(j) ? j : json_object_get(j, "policies")) : NULL;
    if (pols != NULL) {
        printf("policies: %zu\n", json_array_size(pols));
        for (size_t i = 0; i < json_array_size(pols); i++) {
            json_t *p = json_array_get(pols, i);
            const char *name = json_string_value(json_object_get(p, "name"));
            const char *mode = json_string_value(json_object_get(p, "mode"));
            printf("  %s%s%s\n", name ? name : "?", mode ? "  " : "", mode ? mode : "");
        }
    } else if (status == 401) {
        printf("policies: (the admin token is needed: --token or $SLUICE_ADMIN_TOKEN)\n");
    }
    json_decref(j);
    free(body);
    return rc;
}
