/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jw.h -- a small JSON writer for the engine's reports (explain, effective config): a
 * growing heap buffer, strings always escaped to valid JSON and valid UTF-8 (a byte that
 * is not part of well-formed UTF-8 becomes U+FFFD). Not on the decision path: it
 * allocates. The first allocation failure sticks (sl_jw_finish then returns NULL).
 */
#ifndef SL_ENGINE_JW_H
#define SL_ENGINE_JW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_jw {
    char *p;
    size_t len, cap;
    bool oom;
    bool comma; /* a value was written at this level: the next one needs a ',' */
} sl_jw;

void sl_jw_init(sl_jw *w);
/* The text (NUL-terminated, *len without it), handed to the caller (free()); NULL on OOM. */
char *sl_jw_finish(sl_jw *w, size_t *len);
void sl_jw_free(sl_jw *w);

void sl_jw_obj(sl_jw *w);   /* '{' */
void sl_jw_end(sl_jw *w);   /* '}' */
void sl_jw_arr(sl_jw *w);   /* '[' */
void sl_jw_aend(sl_jw *w);  /* ']' */
/* A member name inside an object (the value follows). */
void sl_jw_key(sl_jw *w, const char *k);
void sl_jw_str(sl_jw *w, const char *s);              /* NULL: null */
void sl_jw_strn(sl_jw *w, const void *s, size_t n);
void sl_jw_u64(sl_jw *w, uint64_t v);
void sl_jw_i64(sl_jw *w, int64_t v);
void sl_jw_bool(sl_jw *w, bool b);
void sl_jw_null(sl_jw *w);
/* ns as milliseconds, rounded up ("retry after this long is enough"); -1 for negatives. */
void sl_jw_ms(sl_jw *w, int64_t ns);
/* printf into a JSON string. */
void sl_jw_strf(sl_jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Shorthands: key then value. */
void sl_jw_kstr(sl_jw *w, const char *k, const char *s);
void sl_jw_ku64(sl_jw *w, const char *k, uint64_t v);
void sl_jw_ki64(sl_jw *w, const char *k, int64_t v);
void sl_jw_kbool(sl_jw *w, const char *k, bool b);

#endif /* SL_ENGINE_JW_H */
