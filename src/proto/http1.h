/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http1.h -- an HTTP/1.1 request parser that does no I/O and allocates nothing, and a
 * response writer into a bounded buffer. The parser is stateless: call it with all the
 * bytes received so far; it answers "complete, N bytes consumed", "incomplete" or an
 * error carrying the status to answer. Every size it accepts is bounded (sl_http_limits).
 * Pointers in sl_http_req point into the caller's input buffer (or body buffer).
 */
#ifndef SL_HTTP1_H
#define SL_HTTP1_H

#include <stddef.h>
#include <stdint.h>

#include "proto/wbuf.h"

#define SL_HTTP_MAX_HEADERS 64

typedef struct sl_http_header {
    const char *name;
    size_t name_len;
    const char *value; /* leading and trailing whitespace removed */
    size_t value_len;
} sl_http_header;

typedef struct sl_http_limits {
    size_t max_target;   /* request-target bytes; beyond: 414 */
    size_t max_head;     /* request line + headers bytes; beyond: 431 */
    size_t max_headers;  /* header lines (<= SL_HTTP_MAX_HEADERS); beyond: 431 */
    size_t max_body;     /* decoded body bytes; beyond: 413 */
} sl_http_limits;

typedef struct sl_http_req {
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
    int minor;             /* HTTP/1.<minor>: 0 or 1 */
    size_t nheaders;
    const char *body;      /* Content-Length: into the input; chunked: into body_buf */
    size_t body_len;
    int keep_alive;        /* the connection may carry another request after this one */
    int head_done;         /* set even on "incomplete": the header section is complete */
    int expect_continue;   /* "Expect: 100-continue" */
    int chunked;
    sl_http_header headers[SL_HTTP_MAX_HEADERS]; /* last: the parser clears what is above */
} sl_http_req;

/* Return values of sl_http1_parse other than a positive byte count. */
#define SL_HTTP_INCOMPLETE 0
/* Errors are the negated status: -400, -413, -414, -431, -501, -505. */

void sl_http1_limits_default(sl_http_limits *lim);

/* Parses one request from buf[0..len). Returns the bytes it occupies (> 0) when complete,
 * SL_HTTP_INCOMPLETE, or -status. A chunked body is decoded into body_buf (body_cap
 * bytes, at least lim->max_body to honour the limit). */
int sl_http1_parse(const char *buf, size_t len, const sl_http_limits *lim, sl_http_req *req,
                   char *body_buf, size_t body_cap);

/* Case-insensitive header lookup; NULL when absent. */
const sl_http_header *sl_http1_header(const sl_http_req *req, const char *name);
/* 1 when the header's comma-separated value holds `token` (case-insensitive). */
int sl_http1_header_has_token(const sl_http_header *h, const char *token);

/* The reason phrase of a status ("Too Many Requests"). */
const char *sl_http1_reason(int status);

/* Response writer: begin writes the status line; add headers with sl_http1_hdr; end
 * writes Content-Length (and Connection: close when !keep_alive), the blank line and
 * the body. For HEAD requests pass send_body = 0 (Content-Length still announced). */
void sl_http1_begin(sl_wbuf *w, int minor, int status);
void sl_http1_hdr(sl_wbuf *w, const char *name, const char *value);
void sl_http1_hdr_i64(sl_wbuf *w, const char *name, int64_t value);
void sl_http1_end(sl_wbuf *w, int keep_alive, int minor, const char *content_type,
                  const void *body, size_t body_len, int send_body);

#endif /* SL_HTTP1_H */
