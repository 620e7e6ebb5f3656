/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wbuf.h -- a bounded output buffer shared by the HTTP/1.1 and RESP encoders.
 * Invariant: len <= cap; an append that does not fit sets `overflow` (sticky) and
 * writes nothing, so a caller checks once after composing a whole reply.
 */
#ifndef SL_WBUF_H
#define SL_WBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct sl_wbuf {
    char *data;
    size_t len, cap;
    int overflow;
} sl_wbuf;

static inline void sl_wbuf_init(sl_wbuf *w, char *data, size_t cap) {
    w->data = data;
    w->len = 0;
    w->cap = cap;
    w->overflow = 0;
}

/* Inline: the encoders call these several times per reply on the hot path. */
static inline void sl_wbuf_put(sl_wbuf *w, const void *p, size_t n) {
    if (w->overflow || n > w->cap - w->len) {
        w->overflow = 1;
        return;
    }
    if (n) memcpy(w->data + w->len, p, n);
    w->len += n;
}

static inline void sl_wbuf_putc(sl_wbuf *w, char c) {
    if (w->overflow || w->len >= w->cap) {
        w->overflow = 1;
        return;
    }
    w->data[w->len++] = c;
}

void sl_wbuf_puts(sl_wbuf *w, const char *s);
void sl_wbuf_i64(sl_wbuf *w, int64_t v);
void sl_wbuf_u64(sl_wbuf *w, uint64_t v);
/* printf-style; sets overflow when truncated. */
void sl_wbuf_printf(sl_wbuf *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* SL_WBUF_H */
