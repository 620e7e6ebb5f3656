/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_redis_slots.c -- the Redis store's parsers on arbitrary bytes: the first byte picks
 * CLUSTER SHARDS or CLUSTER SLOTS, the rest is read as RESP by hiredis's reader and every
 * reply is parsed as a topology (ranges must be inside the slot space, ports valid, hosts
 * terminated); the same bytes are parsed as a MOVED/ASK redirection, as a stored state of
 * every algorithm, and their key slot computed (always below 16384, tag rule respected).
 */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "store/redis/redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sluice_limiter *lims[8];

static void init_limiters(void) {
    static const sluice_limit_spec specs[8] = {
        {.algo = SLUICE_GCRA, .name = "g", .limit = 10, .period_ns = SLUICE_NS_PER_S},
        {.algo = SLUICE_TOKEN_BUCKET, .name = "t", .limit = 10, .period_ns = SLUICE_NS_PER_S},
        {.algo = SLUICE_FIXED_WINDOW, .name = "f", .limit = 10, .period_ns = SLUICE_NS_PER_S},
        {.algo = SLUICE_SLIDING_WINDOW, .name = "s", .limit = 10, .period_ns = SLUICE_NS_PER_S},
        {.algo = SLUICE_CONCURRENCY, .name = "c", .limit = 10, .lease_ns = SLUICE_NS_PER_S},
        {.algo = SLUICE_QUOTA, .name = "q", .limit = 10, .quota_period = SLUICE_PERIOD_DAY},
        {.algo = SLUICE_LEAKY_BUCKET, .name = "l", .limit = 10, .period_ns = SLUICE_NS_PER_S},
        {.algo = SLUICE_SLIDING_LOG, .name = "sl", .limit = 16, .period_ns = SLUICE_NS_PER_S},
    };
    for (int i = 0; i < 8; i++) {
        int err;
        lims[i] = sluice_limiter_create(&specs[i], &err, NULL, 0);
        if (lims[i] == NULL) abort();
    }
}

static void check_ranges(const sl_redis_range *r, int n, int cap) {
    if (n > cap) abort();
    for (int i = 0; i < n; i++) {
        if (r[i].lo > r[i].hi || r[i].hi >= SL_REDIS_SLOTS) abort();
        if (r[i].port <= 0 || r[i].port > 65535) abort();
        if (memchr(r[i].host, '\0', sizeof(r[i].host)) == NULL) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (lims[0] == NULL) init_limiters();
    if (size == 0) return 0;
    bool shards = data[0] & 1;
    static sl_redis_range ranges[64];

    redisReader *rd = redisReaderCreate();
    if (rd == NULL) return 0;
    sl_redis_reader_guard(rd); /* as every client connection's reader */
    if (redisReaderFeed(rd, (const char *)data + 1, size - 1) == REDIS_OK) {
        for (int k = 0; k < 16; k++) {
            void *rep = NULL;
            if (redisReaderGetReply(rd, &rep) != REDIS_OK || rep == NULL) break;
            int n = sl_redis_parse_topology(rep, shards, ranges, 64);
            check_ranges(ranges, n, 64);
            n = sl_redis_parse_topology(rep, !shards, ranges, 3);
            check_ranges(ranges, n, 3);
            freeReplyObject(rep);
        }
    }
    redisReaderFree(rd);

    unsigned slot = 99999;
    char host[SL_REDIS_HOST_MAX];
    int port = 0;
    int kind = sl_redis_parse_redirect((const char *)data, size, &slot, host, sizeof(host), &port);
    if (kind != 0 && (slot >= SL_REDIS_SLOTS || port <= 0 || port > 65535 || memchr(host, 0, sizeof(host)) == NULL))
        abort();

    unsigned s = sl_redis_keyslot(data, size);
    if (s >= SL_REDIS_SLOTS) abort();
    /* a key "{<bytes>}x" hashes like <bytes> when they hold no '}' and are not empty */
    if (size > 0 && size < 200 && memchr(data, '}', size) == NULL) {
        char k[256];
        k[0] = '{';
        memcpy(k + 1, data, size);
        k[size + 1] = '}';
        k[size + 2] = 'x';
        if (sl_redis_keyslot(k, size + 3) != sl_redis_keyslot(data, size)) abort();
    }

    static uint64_t state[1 + SL_SLIDING_LOG_MAX];
    for (int i = 0; i < 8; i++) {
        int r = sl_redis_state_parse(lims[i], (const char *)data, size, state);
        if (r < -1 || r > 1) abort();
    }
    return 0;
}
