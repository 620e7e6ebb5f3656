/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.h -- the one JSON string escaper (RFC 8259), used by the log, the audit trail, the
 * admin and explain JSON, rendered verdicts and problem details, and replay reports.
 * From arbitrary bytes: '"' and '\\' escaped; control bytes as \n \r \t \b \f or \u00XX;
 * U+2028 and U+2029 escaped (they end a line in JavaScript); valid UTF-8 copied; an
 * invalid byte becomes U+FFFD, or with SL_JSON_BYTES every byte >= 0x80 is \u00XX (raw
 * keys are bytes: each one stays visible and distinct).
 */
#ifndef SL_CORE_JSON_H
#define SL_CORE_JSON_H

#include <stddef.h>

#define SL_JSON_BYTES 1u /* bytes >= 0x80 as \u00XX, never decoded as UTF-8 */
#define SL_JSON_BARE 2u  /* '"' left as it is: text for a log line, not a JSON string */
#define SL_JSON_UNIT_MAX 6 /* the longest escaped unit: \u00XX */

/* Length of the well-formed UTF-8 sequence starting at s (1..4), or 0 when the byte at s
 * does not start one (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). */
size_t sl_utf8_len(const void *s, size_t n);

/* How many bytes at the start of s[0..n) are plain ASCII that need no escaping. */
size_t sl_json_plain(const void *s, size_t n, unsigned flags);

/* The escaped form of the unit starting at s (n > 0) into out (1..SL_JSON_UNIT_MAX bytes,
 * or a whole UTF-8 sequence of up to 4); returns its length, and in *adv how many input
 * bytes it stands for. */
size_t sl_json_unit(const void *s, size_t n, unsigned flags, char out[SL_JSON_UNIT_MAX], size_t *adv);

/* Escapes s[0..n) into dst (no quotes added), whole units only, at most cap bytes;
 * returns the bytes written and in *used (may be NULL) the input consumed (n when it all
 * fit). */
size_t sl_json_escape(char *dst, size_t cap, const void *s, size_t n, unsigned flags, size_t *used);

#endif /* SL_CORE_JSON_H */
