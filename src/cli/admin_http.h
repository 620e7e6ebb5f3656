/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_http.h -- the CLI's one HTTP/1.1 client: a single exchange with a running
 * server's admin listener (sluice reload/status, sluice override). Connection: close,
 * one request, the whole answer read within a deadline; nothing kept between calls.
 * The token travels only in the Authorization header and never in a message.
 */
#ifndef SLUICE_CLI_ADMIN_HTTP_H
#define SLUICE_CLI_ADMIN_HTTP_H

#include <stddef.h>
#include <stdio.h>

/* The admin listener's address when nothing names one (as `listen.admin` defaults). */
#define SL_CLI_ADMIN_DEFAULT "127.0.0.1:8082"

typedef struct sl_cli_request {
    const char *addr;         /* HOST:PORT, [V6]:PORT or unix:/PATH */
    const char *token;        /* bearer token, NULL or "" for none */
    const char *method, *path;
    const char *content_type; /* NULL: no Content-Type header */
    const char *body;         /* a body in memory (body_len bytes), or NULL */
    size_t body_len;
    FILE *body_file;          /* or a file streamed as it is read (must be seekable) */
    size_t max_answer;        /* the longest answer kept (bytes; more is cut) */
    int timeout_ms;           /* for the whole answer */
} sl_cli_request;

/* Sends the request and reads the answer: the HTTP status, with *body the answer's body
 * (chunked encoding undone, NUL-terminated, malloc'd: the caller frees it); or -1 with
 * err saying why (unreachable, no answer in time, not HTTP) and *body NULL. */
int sl_cli_http(const sl_cli_request *r, char **body, char *err, size_t errlen);

#endif
