/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llm_http.c -- see llm_http.h. A body given as a string is scanned as is (the bytes the
 * gateway received: the input estimate counts them); one given as an object, or `llm`,
 * is serialised compactly first. Only JSON content types are read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/http/llm_http.h"

static int json_type_ok(const char *ct) {
    size_t n = strcspn(ct, ";");
    while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    return (n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
           (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0);
}

int sl_http_llm_request(const json_t *j, sl_llm_request *out, char *err, size_t errcap) {
    const json_t *a = json_object_get(j, "request");
    const json_t *body = json_is_object(a) ? json_object_get(a, "body") : NULL;
    const json_t *llm = json_object_get(j, "llm");
    if (body == NULL && llm == NULL) return 0;
    if (body != NULL) {
        const json_t *ct = json_object_get(a, "content_type");
        if (ct != NULL && (!json_is_string(ct) || !json_type_ok(json_string_value(ct)))) {
            snprintf(err, errcap, "request.content_type must be application/json (an LLM request body)");
            return -1;
        }
    }
    const json_t *src = body ? body : llm;
    sl_llm_api hint = SL_LLM_API_UNKNOWN;
    const json_t *path = json_is_object(a) ? json_object_get(a, "path") : NULL;
    if (json_is_string(path)) hint = sl_llm_api_from_path(json_string_value(path), json_string_length(path));
    int r;
    char why[128];
    if (json_is_string(src)) {
        r = sl_llm_parse_request(json_string_value(src), json_string_length(src), hint, out, why, sizeof(why));
    } else if (json_is_object(src)) {
        char *s = json_dumps(src, JSON_COMPACT);
        if (s == NULL) {
            snprintf(err, errcap, "out of memory");
            return -1;
        }
        r = sl_llm_parse_request(s, strlen(s), hint, out, why, sizeof(why));
        free(s);
    } else {
        snprintf(err, errcap, "%s must be the LLM request body (a string or an object)",
                 body ? "request.body" : "llm");
        return -1;
    }
    if (r != 0) {
        snprintf(err, errcap, "%s: %s", body ? "request.body" : "llm", why);
        return -1;
    }
    return 1;
}

int sl_http_llm_usage(const json_t *j, sl_llm_usage *out, char *err, size_t errcap) {
    const json_t *u = json_object_get(j, "usage");
    if (u == NULL) u = json_object_get(j, "response");
    if (u == NULL || json_is_null(u)) return 0;
    char *s = json_is_string(u) ? NULL : json_dumps(u, JSON_COMPACT | JSON_ENCODE_ANY);
    const char *t = s ? s : json_string_value(u);
    if (t == NULL) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    memset(out, 0, sizeof(*out));
    char why[128];
    int r = sl_llm_parse_usage(t, strlen(t), out, why, sizeof(why));
    free(s);
    if (r < 0) {
        snprintf(err, errcap, "usage: %s", why);
        return -1;
    }
    if (r == 0) {
        snprintf(err, errcap, "usage: no token counts found (expected the provider's usage object: "
                 "prompt_tokens/completion_tokens or input_tokens/output_tokens)");
        return -1;
    }
    return 1;
}
