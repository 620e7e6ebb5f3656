/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.h -- request paths as policies see them (RFC 3986 section 6.2.2 normalisation,
 * query and fragment removed). Shared by the config loader (paths in the config) and the
 * engine (paths in requests), so both compare the same way. No allocation.
 */
#ifndef SL_CORE_PATH_H
#define SL_CORE_PATH_H

#include <stddef.h>

/* Length of `p` up to its query ('?') or fragment ('#'). */
size_t sl_path_len(const char *p, size_t len);

/* Normalises in[0..len) into `out` (at least sl_path_len(in, len) bytes: the result is
 * never longer) and returns the result's length; *res points at the result, which is
 * `in` itself (unchanged, query cut) for a path not starting with '/'. */
size_t sl_path_norm(const char *in, size_t len, char *out, const char **res);

#endif
