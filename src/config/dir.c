/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir.c -- a config directory: every *.yaml / *.yml file directly in it, in byte order of
 * their names, loaded into one config (several envoyproxy/ratelimit domains, sluice
 * policy files), as envoyproxy/ratelimit loads RUNTIME_ROOT/.../RUNTIME_APPDIRECTORY.
 * Invariants: one load reads each file once (a file swapped while we read is read whole
 * or not at all); a diagnostic names the file it is in; nothing here runs per request.
 * Bounds: SL_DIR_MAX_FILES files, each at most 16 MiB, names at most NAME_MAX.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/compiled.h"

#define SL_DIR_MAX_FILES 4096

static bool yaml_name(const char *n) {
    size_t l = strlen(n);
    return (l > 5 && strcmp(n + l - 5, ".yaml") == 0) || (l > 4 && strcmp(n + l - 4, ".yml") == 0);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}


/* Names the file of diagnostics [from, n): its path, or its end when the path is longer
 * than a diagnostic holds ("...<end>": the file name is the part that tells). */
static void diag_here(sl_diag_list *dl, size_t from, const char *file) {
    if (dl == NULL) return;
    size_t cap = sizeof(dl->items[0].file), len = strlen(file);
    for (size_t i = from; i < dl->n; i++) {
        char *d = dl->items[i].file;
        if (len < cap) {
            memcpy(d, file, len + 1);
        } else {
            memcpy(d, "...", 3);
            memcpy(d + 3, file + len - (cap - 4), cap - 4);
            d[cap - 1] = '\0';
        }
    }
}

/* A sluice-format document that carries server settings (listeners, store, ...): only
 * one file of a directory may, so no setting silently depends on the order of files. */
static const sl_ynode *settings_key(const sl_ynode *root) {
    static const char *const keys[] = {"listen", "workers", "admin", "auth", "client_ip", "headers", "log",
                                       "store", NULL};
    if (root == NULL || root->kind != SL_YMAP || sl__get(root, "domain") != NULL ||
        sl__get(root, "descriptors") != NULL)
        return NULL;
    for (size_t i = 0; keys[i]; i++) {
        const sl_ynode *k = NULL;
        for (size_t j = 0; j < root->n; j++)
            if (strcmp(root->v[2 * j]->s, keys[i]) == 0) k = root->v[2 * j];
        if (k != NULL) return k;
    }
    return NULL;
}

/*
 * Why one context for every file rather than a config per file merged afterwards:
 * duplicate domains, policy names and limit names are checked across files exactly as
 * inside one, and MERGE_DOMAIN_CONFIG is a domain loaded into twice (envoy.c).
 */
int sl_config_load_dir(const char *path, sl_config **out, sl_diag_list *diags) {
    if (out != NULL) *out = NULL;
    if (diags != NULL) {
        diags->n = 0;
        diags->dropped = 0;
        snprintf(diags->file, sizeof(diags->file), "%s", path ? path : "<config>");
    }
    if (path == NULL || out == NULL) return SLUICE_EINVAL;
    const sl_envoy_settings *env = sl_config_envoy();
    bool skip_dot = !env->compat || env->ignore_dotfiles;
    DIR *d = opendir(path);
    if (d == NULL) {
        if (diags != NULL) {
            diags->n = 1;
            diags->items[0] = (sl_diag){.line = 0, .col = 0};
            snprintf(diags->items[0].msg, sizeof(diags->items[0].msg),
                     "cannot read the directory: %s (expected a readable directory of YAML "
                     "files)", strerror(errno));
        }
        return SLUICE_EIO;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = SLUICE_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (skip_dot || !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")))
            continue;
        if (!yaml_name(e->d_name)) continue;
        if (n == SL_DIR_MAX_FILES) {
            rc = SLUICE_ERANGE;
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nn = realloc(names, nc * sizeof(*nn));
            if (nn == NULL) {
                rc = SLUICE_ENOMEM;
                break;
            }
            names = nn;
            cap = nc;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) {
            rc = SLUICE_ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == SLUICE_OK) qsort(names, n, sizeof(*names), by_name);

    sl_config *cfg = rc == SLUICE_OK ? calloc(1, sizeof(*cfg)) : NULL;
    if (cfg == NULL) {
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
        if (rc == SLUICE_ERANGE && diags != NULL) {
            diags->n = 1;
            diags->items[0] = (sl_diag){.line = 0, .col = 0};
            snprintf(diags->items[0].msg, sizeof(diags->items[0].msg),
                     "more than %d YAML files (expected fewer)", SL_DIR_MAX_FILES);
        }
        return rc == SLUICE_OK ? SLUICE_ENOMEM : rc;
    }
    sl__ctx cx;
    sl__load_begin(&cx, cfg, diags);
    bool parsed = false;
    char first_settings[160] = "";
    for (size_t i = 0; i < n; i++) {
        char full[SL_PATH_MAX + 256];
        snprintf(full, sizeof(full), "%s/%s", path, names[i]);
        size_t from = diags ? diags->n : 0;
        struct stat sb;
        const char *why = NULL;
        size_t len = 0;
        char *buf = NULL;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            if (stat(full, &sb) == 0) continue; /* a directory named x.yaml: not a file */
            why = "cannot open the file (it disappeared or is a broken link)";
        } else {
            buf = sl__read_file(full, &len, &why);
        }
        if (buf == NULL) {
            sl_ynode at = {.line = 0, .col = 0};
            sl__err(&cx, &at, "%s", why);
            diag_here(diags, from, full);
            continue;
        }
        sl_ynode *root = sl__yaml_parse(&cx, buf, len);
        free(buf);
        if (root != NULL) {
            parsed = true;
            const sl_ynode *sk = settings_key(root);
            if (sk != NULL && first_settings[0] != '\0') {
                sl__err(&cx, sk, "server settings ('%s') in a second file of the directory "
                        "(expected them in one file only; the first is %s)", sk->s, first_settings);
            } else {
                if (sk != NULL) snprintf(first_settings, sizeof(first_settings), "%s", names[i]);
                sl__load_root(&cx, root);
            }
        }
        diag_here(diags, from, full);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return sl__load_end(&cx, parsed, out);
}
