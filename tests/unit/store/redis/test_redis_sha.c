/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_sha.c -- the script's EVALSHA name: SHA1 (OpenSSL's) of exactly the bytes
 * sent with SCRIPT LOAD, as Redis computes it: FIPS 180-1 vectors and sha1sum(1) over the
 * composed script itself.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store/redis/redis.h"
#include "t.h"

static void vectors(void) {
    char h[41];
    sl_redis_sha1_hex("abc", 3, h);
    T_EQ_S(h, "a9993e364706816aba3e25717850c26c9cd0d89d");
    sl_redis_sha1_hex("", 0, h);
    T_EQ_S(h, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sl_redis_sha1_hex(m, strlen(m), h);
    T_EQ_S(h, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

/* The script as loaded, hashed by sha1sum(1): what Redis answers to SCRIPT LOAD. */
static void script_name_is_its_sha1(void) {
    size_t len = 0;
    const char *s = sl_redis_script(&len);
    T_CHECK(s != NULL && len > 1000);
    char path[] = "/tmp/sluice-script-XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    if (fd < 0) return;
    T_EQ_I(write(fd, s, len), (long long)len);
    close(fd);
    char cmd[128], want[48] = "";
    snprintf(cmd, sizeof(cmd), "sha1sum %s", path);
    FILE *pf = popen(cmd, "r");
    if (pf != NULL) {
        if (fscanf(pf, "%40s", want) != 1) want[0] = 0;
        pclose(pf);
    }
    unlink(path);
    T_EQ_S(sl_redis_script_sha(), want);
}

int main(void) {
    T_RUN(vectors);
    T_RUN(script_name_is_its_sha1);
    return T_DONE();
}
