/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override.c -- one window of a per-key override, written in the config's syntax
 * ({"rate": "3000/min"}, {"quota": "1M/month", "name": "monthly"}): parsed with the very
 * parser of a policy's `limits:` entries, so an override accepts exactly what a config does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/compiled.h"

int sl_config_override_window(const char *text, size_t len, sluice_algo algo, sl_cwindow *out,
                              char *label, size_t label_len, char *err, size_t errlen) {
    if (label_len > 0) label[0] = '\0';
    if (errlen > 0) err[0] = '\0';
    sl_config *cfg = calloc(1, sizeof(*cfg));
    sl_diag_list *dl = calloc(1, sizeof(*dl));
    if (cfg == NULL || dl == NULL) {
        free(cfg);
        free(dl);
        snprintf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    sl__ctx cx;
    sl__load_begin(&cx, cfg, dl);
    int rc = SLUICE_OK;
    const sl_ynode *root = sl__yaml_parse(&cx, text, len);
    if (root == NULL || cx.errors > 0 || root->kind != SL_YMAP) {
        rc = SLUICE_EINVAL;
        if (dl->n == 0) snprintf(err, errlen, "a window is an object such as {\"rate\": \"10/s\"}");
    } else if (!sl__parse_window(&cx, root, algo, true, out) || cx.errors > 0) {
        rc = SLUICE_EINVAL;
    } else {
        if (out->named && out->label != NULL && label_len > 0)
            snprintf(label, label_len, "%s", out->label);
        out->label = NULL;
        out->adapt = NULL;
    }
    if (rc != SLUICE_OK && dl->n > 0 && errlen > 0) snprintf(err, errlen, "%s", dl->items[0].msg);
    sl__arena_free(&cx.tmp);
    sl__set_free(&cx.names);
    free(cx.pol);
    free(cx.dom);
    sl__arena_free(&cfg->arena);
    free(cfg);
    free(dl);
    return rc;
}
