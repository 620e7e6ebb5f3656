/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redact.h -- credentials out of every text sluice shows (answers, logs, the audit trail,
 * config check): one function, applied where messages are made and where they leave.
 * No allocation; the text is rewritten in place within its buffer.
 */
#ifndef SL_CORE_REDACT_H
#define SL_CORE_REDACT_H

#include <stddef.h>

#define SL_REDACTED "***"

/* Rewrites the NUL-terminated text s (a buffer of `cap` bytes) so that no credential it
 * carries is left: the password of every URL's userinfo (scheme://user:PW@host
 * becomes scheme://user:R@host and scheme://PW@host scheme://R@host, R being SL_REDACTED;
 * user:PW@host with no scheme too), and the value of every password=, sentinel_password=, token=, auth_token=
 * parameter. A text that would grow past cap is cut (still NUL-terminated). Returns the
 * number of credentials redacted. */
size_t sl_redact(char *s, size_t cap);

/* sl_redact into `out` (cap bytes) of a copy of `in`; returns out. */
char *sl_redact_copy(const char *in, char *out, size_t cap);

#endif
