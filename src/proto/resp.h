/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp.h -- RESP2/RESP3 request parsing and reply encoding, no I/O, no allocation.
 * The parser is stateless like http1.h: feed everything received so far, get one
 * command (its arguments point into the input, or into `scratch` for quoted inline
 * arguments), "incomplete", or a protocol error worded as Redis words it (the caller
 * answers "-ERR <text>" and closes). Hard limits on argument count and lengths.
 */
#ifndef SL_RESP_H
#define SL_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "proto/wbuf.h"

#define SL_RESP_MAX_ARGS 128
#define SL_RESP_MAX_BULK (64 * 1024)   /* one argument */
#define SL_RESP_MAX_INLINE (64 * 1024) /* Redis PROTO_INLINE_MAX_SIZE */

typedef struct sl_resp_cmd {
    size_t argc; /* 0: an empty request (no reply is due) */
    const char *argv[SL_RESP_MAX_ARGS];
    size_t argl[SL_RESP_MAX_ARGS];
    int inline_form;
    char err[80]; /* the protocol error text when SL_RESP_ERROR is returned */
} sl_resp_cmd;

#define SL_RESP_INCOMPLETE 0
#define SL_RESP_ERROR (-1)

/* Returns bytes consumed (> 0), SL_RESP_INCOMPLETE, or SL_RESP_ERROR with cmd->err set
 * to "Protocol error: ..." (Redis's wording). `scratch` (scratch_cap bytes, at least
 * SL_RESP_MAX_INLINE) receives unescaped inline arguments. */
int sl_resp_parse(const char *buf, size_t len, sl_resp_cmd *cmd, char *scratch,
                  size_t scratch_cap);

/* Case-insensitive comparison of an argument with a command or option name. */
int sl_resp_arg_is(const sl_resp_cmd *cmd, size_t i, const char *name);
/* Parses argument i as a signed 64-bit decimal integer (Redis rules: no spaces, no
 * '+'); returns 0 or -1. */
int sl_resp_arg_i64(const sl_resp_cmd *cmd, size_t i, int64_t *out);

/* Encoders. `proto` is 2 or 3: maps, nulls, doubles and booleans use the RESP3 types
 * when proto == 3 and their RESP2 equivalents otherwise. */
void sl_resp_simple(sl_wbuf *w, const char *s);
void sl_resp_error(sl_wbuf *w, const char *s); /* s includes the prefix: "ERR ..." */
void sl_resp_int(sl_wbuf *w, int64_t v);
void sl_resp_bulk(sl_wbuf *w, const void *p, size_t n);
void sl_resp_bulk_str(sl_wbuf *w, const char *s);
void sl_resp_null(sl_wbuf *w, int proto);
void sl_resp_array(sl_wbuf *w, size_t n);
void sl_resp_map(sl_wbuf *w, int proto, size_t npairs);
void sl_resp_bool(sl_wbuf *w, int proto, int v);
/* A double: RESP3 ",<v>", RESP2 a bulk string; value given as an integer count of
 * `scale`ths (e.g. ms with scale 1000) so no floating point is needed. */
void sl_resp_fixed(sl_wbuf *w, int proto, int64_t units, int64_t scale);
/* A verbatim text string (RESP3 "=") or a bulk string (RESP2). */
void sl_resp_verbatim(sl_wbuf *w, int proto, const char *s, size_t n);

#endif /* SL_RESP_H */
