/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_resp.c -- the RESP parser on arbitrary bytes: no out-of-bounds reads, consumed
 * bytes within the input, arguments inside the input or the scratch buffer, every error
 * worded as a "Protocol error: ...", and pipelines parsed to the end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char scratch[SL_RESP_MAX_INLINE + 16];
    static sl_resp_cmd cmd;
    char *buf = malloc(size ? size : 1);
    if (buf == NULL) return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    while (off < size) {
        int n = sl_resp_parse(buf + off, size - off, &cmd, scratch, sizeof(scratch));
        if (n == SL_RESP_INCOMPLETE) break;
        if (n == SL_RESP_ERROR) {
            if (strncmp(cmd.err, "Protocol error: ", 16) != 0) abort();
            break;
        }
        if (n < 0 || (size_t)n > size - off) abort();
        if (cmd.argc > SL_RESP_MAX_ARGS) abort();
        for (size_t i = 0; i < cmd.argc; i++) {
            const char *a = cmd.argv[i];
            int in_buf = a >= buf && a + cmd.argl[i] <= buf + size;
            int in_scratch = a >= scratch && a + cmd.argl[i] <= scratch + sizeof(scratch);
            if (!in_buf && !in_scratch) abort();
        }
        off += (size_t)n;
    }
    free(buf);
    return 0;
}
