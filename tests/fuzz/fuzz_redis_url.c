/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_redis_url.c -- store URLs (src/store/redis/url.c) from arbitrary bytes: a URL is either
 * accepted, with every field NUL-terminated and an address to connect to, or refused
 * with "column N: ..." where N points inside the URL (or just past it); a description
 * does not depend on the password the URL held.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis/redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 2048) return 0;
    char *url = malloc(size + 1);
    if (url == NULL) return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    size_t len = strlen(url);
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    char err[300];
    int rc = sl_redis_url_parse(url, &o, err, sizeof(err));
    if (rc == SLUICE_OK) {
        if (memchr(o.seeds, 0, sizeof(o.seeds)) == NULL || memchr(o.unix_path, 0, sizeof(o.unix_path)) == NULL ||
            memchr(o.password, 0, sizeof(o.password)) == NULL || memchr(o.master, 0, sizeof(o.master)) == NULL)
            abort();
        if (o.seeds[0] == '\0' && o.unix_path[0] == '\0') abort();
        if (o.sentinel && o.master[0] == '\0') abort();
        if (o.cluster && o.db != 0) abort();
        /* the description cannot depend on the password's content */
        char d[800], d2[800];
        sl_redis_opts_describe(&o, d, sizeof(d));
        if (o.password[0] != '\0') {
            sl_redis_opts o2 = o;
            memcpy(o2.password, "x", 2);
            sl_redis_opts_describe(&o2, d2, sizeof(d2));
            if (strcmp(d, d2) != 0) abort();
        }
    } else {
        if (rc != SLUICE_EINVAL || strncmp(err, "column ", 7) != 0) abort();
        long col = strtol(err + 7, NULL, 10);
        if (col < 1 || (size_t)col > len + 1) abort();
    }
    (void)sl_redis_url_has_password(url);
    (void)sl_redis_url_is_redis(url);
    free(url);
    return 0;
}
