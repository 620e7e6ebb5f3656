/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sf.h -- a structured-field List reader (RFC 9651 4.2.1) for the client helpers: one
 * member at a time, every bare-item type recognised so unknown parameters are skipped
 * exactly, nothing allocated. Spans point into the input (strings still escaped).
 */
#ifndef SL_CLIENT_SF_H
#define SL_CLIENT_SF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl_sf_type {
    SL_SF_INTEGER,
    SL_SF_DECIMAL,
    SL_SF_STRING,   /* span excludes the quotes, escapes kept */
    SL_SF_TOKEN,
    SL_SF_BYTES,    /* span excludes the colons: the base64 text */
    SL_SF_BOOLEAN,
    SL_SF_DATE,
    SL_SF_DISPLAY,  /* display string (%"..."), span excludes %" and " */
    SL_SF_INNER     /* an inner list (members skipped) */
} sl_sf_type;

typedef struct sl_sf_value {
    sl_sf_type type;
    int64_t integer;  /* INTEGER, DATE, BOOLEAN (0/1); DECIMAL: value * 1000 */
    const char *p;    /* STRING, TOKEN, BYTES, DISPLAY */
    size_t len;
} sl_sf_value;

#define SL_SF_MAX_PARAMS 16

typedef struct sl_sf_param {
    const char *key;
    size_t key_len;
    sl_sf_value v;
} sl_sf_param;

typedef struct sl_sf_member {
    sl_sf_value v;
    size_t n_params;        /* params kept (at most SL_SF_MAX_PARAMS) */
    bool params_dropped;    /* more parameters than kept */
    sl_sf_param params[SL_SF_MAX_PARAMS];
} sl_sf_member;

typedef struct sl_sf_list {
    const char *p, *end;
    bool started;
} sl_sf_list;

void sl_sf_list_init(sl_sf_list *l, const char *value, size_t len);
/* 1 with the next member in *m, 0 at the end of a valid list, -1 when the value is not a
 * valid List (the whole field is then invalid). An empty value is an empty list. */
int sl_sf_list_next(sl_sf_list *l, sl_sf_member *m);
/* The last value of parameter `key` (RFC 9651: a repeated key overrides), or NULL. */
const sl_sf_value *sl_sf_param_get(const sl_sf_member *m, const char *key);
/* Unescapes a STRING span into buf (NUL-terminated); false when it does not fit. */
bool sl_sf_string_copy(const sl_sf_value *v, char *buf, size_t cap);

#endif
