/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wbuf.c -- bounded appends for the protocol encoders (see wbuf.h). No allocation.
 */
#include "proto/wbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void sl_wbuf_puts(sl_wbuf *w, const char *s) { sl_wbuf_put(w, s, strlen(s)); }

/* Two digits per step from a table: half the divisions of a digit loop (replies carry
 * several integers each). */
void sl_wbuf_u64(sl_wbuf *w, uint64_t v) {
    if (v < 10 && !w->overflow && w->len < w->cap) { /* the common small case */
        w->data[w->len++] = (char)('0' + v);
        return;
    }
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                                   "25262728293031323334353637383940414243444546474849"
                                   "50515253545556575859606162636465666768697071727374"
                                   "75767778798081828384858687888990919293949596979899";
    char tmp[24];
    size_t i = sizeof(tmp);
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        tmp[--i] = pairs[2 * r + 1];
        tmp[--i] = pairs[2 * r];
    }
    if (v >= 10) {
        tmp[--i] = pairs[2 * v + 1];
        tmp[--i] = pairs[2 * v];
    } else {
        tmp[--i] = (char)('0' + v);
    }
    sl_wbuf_put(w, tmp + i, sizeof(tmp) - i);
}

void sl_wbuf_i64(sl_wbuf *w, int64_t v) {
    if (v < 0) {
        sl_wbuf_putc(w, '-');
        /* negate in unsigned arithmetic so INT64_MIN is fine */
        sl_wbuf_u64(w, (uint64_t)0 - (uint64_t)v);
    } else {
        sl_wbuf_u64(w, (uint64_t)v);
    }
}

void sl_wbuf_printf(sl_wbuf *w, const char *fmt, ...) {
    if (w->overflow) return;
    va_list ap;
    va_start(ap, fmt);
    size_t room = w->cap - w->len;
    int n = vsnprintf(w->data + w->len, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        w->overflow = 1;
        return;
    }
    w->len += (size_t)n;
}
