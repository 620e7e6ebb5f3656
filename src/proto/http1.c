/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http1.c -- stateless HTTP/1.1 request parsing (RFC 9112) and response writing.
 * Invariants: no allocation, no I/O, every loop bounded by the input length and the
 * limits; the parser never reads past buf[len). Re-parsing from the start on every
 * feed costs O(head) per read, which the head limit (default 8 KiB) keeps small.
 * Strictness trade-off: requests that could be read two ways by a proxy and by us
 * (obs-fold, Content-Length with Transfer-Encoding, differing Content-Lengths,
 * whitespace before the colon) are refused with 400 rather than guessed.
 */
#include "proto/http1.h"

#include <stddef.h>
#include <string.h>

void sl_http1_limits_default(sl_http_limits *lim) {
    lim->max_target = 4096;
    lim->max_head = 8192;
    lim->max_headers = SL_HTTP_MAX_HEADERS;
    lim->max_body = 65536;
}

/* RFC 9110 tchar */
static int is_tchar(unsigned char c) {
    if (c >= '0' && c <= '9') return 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

static int ieq(const char *a, size_t alen, const char *b) {
    size_t blen = strlen(b);
    if (alen != blen) return 0;
    for (size_t i = 0; i < alen; i++)
        if (lower((unsigned char)a[i]) != lower((unsigned char)b[i])) return 0;
    return 1;
}

/* Finds the next line starting at `pos`: sets *line and *line_len (CR stripped) and returns
 * the position after the LF, or 0 when no LF is in the buffer yet. */
static size_t next_line(const char *buf, size_t len, size_t pos, const char **line,
                        size_t *line_len) {
    const char *lf = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
    if (lf == NULL) return 0;
    size_t end = (size_t)(lf - buf);
    size_t n = end - pos;
    if (n > 0 && buf[end - 1] == '\r') n--;
    *line = buf + pos;
    *line_len = n;
    return end + 1;
}

static int known_method(const char *m, size_t n) {
    static const char *const methods[] = {"GET",     "HEAD",  "POST",    "PUT",  "DELETE",
                                          "OPTIONS", "PATCH", "CONNECT", "TRACE"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strlen(methods[i]) == n && memcmp(methods[i], m, n) == 0) return 1;
    return 0;
}

/* Parses "METHOD SP target SP HTTP/x.y" into req; returns 0 or -status. */
static int parse_request_line(const char *l, size_t n, const sl_http_limits *lim,
                              sl_http_req *req) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i])) i++;
    if (i == 0 || i > 32 || i >= n || l[i] != ' ') return -400;
    req->method = l;
    req->method_len = i;
    size_t t0 = ++i;
    while (i < n && (unsigned char)l[i] > 0x20 && (unsigned char)l[i] < 0x7f) i++;
    if (i == t0) return -400;
    if (i - t0 > lim->max_target) return -414;
    if (i >= n || l[i] != ' ') return -400;
    req->target = l + t0;
    req->target_len = i - t0;
    i++;
    if (n - i != 8 || memcmp(l + i, "HTTP/", 5) != 0) return -400;
    char maj = l[i + 5], dot = l[i + 6], min = l[i + 7];
    if (maj < '0' || maj > '9' || dot != '.' || min < '0' || min > '9') return -400;
    if (maj != '1') return -505;
    req->minor = min == '0' ? 0 : 1;
    if (!known_method(req->method, req->method_len)) return -501;
    return 0;
}

/* Parses "name: value" into h; returns 0 or -400. */
static int parse_header(const char *l, size_t n, sl_http_header *h) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i])) i++;
    if (i == 0 || i >= n || l[i] != ':') return -400; /* also "name : value" */
    h->name = l;
    h->name_len = i;
    i++;
    while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
    size_t e = n;
    while (e > i && (l[e - 1] == ' ' || l[e - 1] == '\t')) e--;
    for (size_t k = i; k < e; k++) {
        unsigned char c = (unsigned char)l[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f) return -400;
    }
    h->value = l + i;
    h->value_len = e - i;
    return 0;
}

const sl_http_header *sl_http1_header(const sl_http_req *req, const char *name) {
    for (size_t i = 0; i < req->nheaders; i++)
        if (ieq(req->headers[i].name, req->headers[i].name_len, name)) return &req->headers[i];
    return NULL;
}

int sl_http1_header_has_token(const sl_http_header *h, const char *token) {
    if (h == NULL) return 0;
    const char *p = h->value, *end = h->value + h->value_len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
        const char *s = p;
        while (p < end && *p != ',') p++;
        const char *e = p;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
        if (e > s && ieq(s, (size_t)(e - s), token)) return 1;
    }
    return 0;
}

/* Parses a Content-Length value; -400 for anything but digits, -413 when huge. */
static int parse_length(const char *v, size_t n, uint64_t *out) {
    if (n == 0) return -400;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return -400;
        if (x > (UINT64_MAX - 9) / 10) return -413;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

/* Decodes a chunked body starting at `pos`. Returns the position after the trailers,
 * 0 when incomplete, or -status. */
static long parse_chunked(const char *buf, size_t len, size_t pos, const sl_http_limits *lim,
                          sl_http_req *req, char *body_buf, size_t body_cap) {
    size_t total = 0;
    for (;;) {
        const char *l;
        size_t n;
        size_t next = next_line(buf, len, pos, &l, &n);
        if (next == 0) return (len - pos > 1024) ? -400 : 0;
        uint64_t size = 0;
        size_t i = 0;
        while (i < n) {
            int c = lower((unsigned char)l[i]);
            int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
            if (d < 0) break;
            if (i >= 15) return -413; /* more than 15 hex digits: far beyond any limit */
            size = size * 16 + (uint64_t)d;
            i++;
        }
        if (i == 0) return -400;
        while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
        if (i < n && l[i] != ';') return -400; /* chunk extensions are ignored */
        pos = next;
        if (size == 0) break;
        if (size > lim->max_body - total || size > body_cap - total) return -413;
        if (len - pos < size + 1) return 0;
        memcpy(body_buf + total, buf + pos, (size_t)size);
        total += (size_t)size;
        pos += (size_t)size;
        if (buf[pos] == '\r') {
            if (len - pos < 2) return 0;
            if (buf[pos + 1] != '\n') return -400;
            pos += 2;
        } else if (buf[pos] == '\n') {
            pos += 1;
        } else {
            return -400;
        }
    }
    /* trailer section: ignored, bounded */
    size_t t0 = pos;
    for (;;) {
        const char *l;
        size_t n;
        size_t next = next_line(buf, len, pos, &l, &n);
        if (next == 0) return (len - t0 > lim->max_head) ? -431 : 0;
        if (next - t0 > lim->max_head) return -431;
        pos = next;
        if (n == 0) break;
        sl_http_header tmp;
        if (parse_header(l, n, &tmp) != 0) return -400;
    }
    req->body = body_buf;
    req->body_len = total;
    return (long)pos;
}

int sl_http1_parse(const char *buf, size_t len, const sl_http_limits *lim, sl_http_req *req,
                   char *body_buf, size_t body_cap) {
    memset(req, 0, offsetof(sl_http_req, headers));
    req->minor = 1; /* errors before the version is known are answered in HTTP/1.1 */
    size_t pos = 0;
    /* RFC 9112 2.2: ignore a few empty lines before the request line (clients that
     * send CRLF after a POST body). */
    for (int k = 0; k < 4 && pos < len && (buf[pos] == '\r' || buf[pos] == '\n'); k++) {
        if (buf[pos] == '\r') {
            if (pos + 1 >= len) return SL_HTTP_INCOMPLETE;
            if (buf[pos + 1] != '\n') return -400;
            pos += 2;
        } else {
            pos += 1;
        }
    }
    size_t start = pos;
    const char *l;
    size_t n;
    size_t next = next_line(buf, len, pos, &l, &n);
    if (next == 0) {
        /* No request line yet: refuse as early as the limits allow. */
        size_t have = len - start;
        const char *sp = memchr(buf + start, ' ', have);
        if (sp != NULL && (size_t)(buf + len - sp) > lim->max_target + 1) return -414;
        if (sp == NULL && have > 32) return -400; /* no method token fits this */
        if (have > lim->max_head) return -431;
        return SL_HTTP_INCOMPLETE;
    }
    int rc = parse_request_line(l, n, lim, req);
    if (rc != 0) return rc;
    pos = next;
    int ended = 0;
    while (!ended) {
        next = next_line(buf, len, pos, &l, &n);
        if (next == 0) {
            if (len - start > lim->max_head) return -431;
            return SL_HTTP_INCOMPLETE;
        }
        if (next - start > lim->max_head) return -431;
        pos = next;
        if (n == 0) {
            ended = 1;
            break;
        }
        if (l[0] == ' ' || l[0] == '\t') return -400; /* obs-fold */
        if (req->nheaders >= lim->max_headers || req->nheaders >= SL_HTTP_MAX_HEADERS)
            return -431;
        rc = parse_header(l, n, &req->headers[req->nheaders]);
        if (rc != 0) return rc;
        req->nheaders++;
    }
    req->head_done = 1;

    /* Semantics of the framing headers. */
    int hosts = 0, have_cl = 0, have_te = 0;
    uint64_t cl = 0;
    for (size_t i = 0; i < req->nheaders; i++) {
        const sl_http_header *h = &req->headers[i];
        if (ieq(h->name, h->name_len, "host")) {
            hosts++;
        } else if (ieq(h->name, h->name_len, "content-length")) {
            uint64_t v;
            rc = parse_length(h->value, h->value_len, &v);
            if (rc != 0) return rc;
            if (have_cl && v != cl) return -400;
            have_cl = 1;
            cl = v;
        } else if (ieq(h->name, h->name_len, "transfer-encoding")) {
            if (have_te) return -400;
            have_te = 1;
            if (!ieq(h->value, h->value_len, "chunked")) return -501;
        } else if (ieq(h->name, h->name_len, "expect")) {
            if (ieq(h->value, h->value_len, "100-continue")) req->expect_continue = 1;
        }
    }
    if (req->minor == 1 && hosts != 1) return -400;
    if (hosts > 1) return -400;
    if (have_te && (have_cl || req->minor == 0)) return -400;
    const sl_http_header *conn = sl_http1_header(req, "connection");
    req->keep_alive = req->minor == 1 ? !sl_http1_header_has_token(conn, "close")
                                      : sl_http1_header_has_token(conn, "keep-alive");
    if (have_te) {
        req->chunked = 1;
        long r = parse_chunked(buf, len, pos, lim, req, body_buf, body_cap);
        if (r <= 0) return (int)r;
        return (int)r;
    }
    if (have_cl) {
        if (cl > lim->max_body) return -413;
        if (len - pos < cl) return SL_HTTP_INCOMPLETE;
        req->body = buf + pos;
        req->body_len = (size_t)cl;
        pos += (size_t)cl;
    }
    return (int)pos;
}

const char *sl_http1_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

void sl_http1_begin(sl_wbuf *w, int minor, int status) {
    sl_wbuf_puts(w, minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ");
    sl_wbuf_i64(w, status);
    sl_wbuf_putc(w, ' ');
    sl_wbuf_puts(w, sl_http1_reason(status));
    sl_wbuf_put(w, "\r\n", 2);
}

void sl_http1_hdr(sl_wbuf *w, const char *name, const char *value) {
    sl_wbuf_puts(w, name);
    sl_wbuf_put(w, ": ", 2);
    sl_wbuf_puts(w, value);
    sl_wbuf_put(w, "\r\n", 2);
}

void sl_http1_hdr_i64(sl_wbuf *w, const char *name, int64_t value) {
    sl_wbuf_puts(w, name);
    sl_wbuf_put(w, ": ", 2);
    sl_wbuf_i64(w, value);
    sl_wbuf_put(w, "\r\n", 2);
}

void sl_http1_end(sl_wbuf *w, int keep_alive, int minor, const char *content_type,
                  const void *body, size_t body_len, int send_body) {
    if (content_type != NULL) sl_http1_hdr(w, "Content-Type", content_type);
    sl_http1_hdr_i64(w, "Content-Length", (int64_t)body_len);
    if (!keep_alive)
        sl_http1_hdr(w, "Connection", "close");
    else if (minor == 0)
        sl_http1_hdr(w, "Connection", "keep-alive");
    sl_wbuf_put(w, "\r\n", 2);
    if (send_body && body_len) sl_wbuf_put(w, body, body_len);
}
