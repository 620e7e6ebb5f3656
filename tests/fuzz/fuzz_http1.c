/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_http1.c -- the HTTP/1.1 parser on arbitrary bytes: it must never read out of
 * bounds, must consume at most what it was given, must return only the documented
 * statuses, and must parse pipelined input to the end without looping.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char body[65536];
    sl_http_limits lim;
    sl_http1_limits_default(&lim);
    lim.max_body = sizeof(body);
    /* a private copy so reads past the end are caught by ASan */
    char *buf = malloc(size ? size : 1);
    if (buf == NULL) return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    while (off < size) {
        sl_http_req r;
        int n = sl_http1_parse(buf + off, size - off, &lim, &r, body, sizeof(body));
        if (n == SL_HTTP_INCOMPLETE) break;
        if (n < 0) {
            int st = -n;
            if (st != 400 && st != 413 && st != 414 && st != 431 && st != 501 && st != 505) abort();
            break;
        }
        if ((size_t)n > size - off) abort();
        if (r.body_len > lim.max_body) abort();
        for (size_t i = 0; i < r.nheaders; i++)
            if (r.headers[i].name < buf || r.headers[i].value + r.headers[i].value_len > buf + size) abort();
        off += (size_t)n;
    }
    free(buf);
    return 0;
}
