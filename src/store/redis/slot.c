/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slot.c -- Redis Cluster addressing: CRC16/XMODEM key slots with hash tags, topology
 * replies (CLUSTER SHARDS, CLUSTER SLOTS) and MOVED/ASK redirections. Pure functions over
 * bytes and hiredis reply trees: no I/O, no allocation, never trusts the shape of a reply.
 */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis/redis.h"

/* CRC16/XMODEM one byte at a time: crc16_tab[i] is the CRC of the byte i shifted in
 * from the top (generated from poly 0x1021; test_redis_store checks it against the
 * bitwise definition). Every decision hashes one 32-character tag per item. */
static const uint16_t crc16_tab[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50A5, 0x60C6, 0x70E7,
    0x8108, 0x9129, 0xA14A, 0xB16B, 0xC18C, 0xD1AD, 0xE1CE, 0xF1EF,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52B5, 0x4294, 0x72F7, 0x62D6,
    0x9339, 0x8318, 0xB37B, 0xA35A, 0xD3BD, 0xC39C, 0xF3FF, 0xE3DE,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64E6, 0x74C7, 0x44A4, 0x5485,
    0xA56A, 0xB54B, 0x8528, 0x9509, 0xE5EE, 0xF5CF, 0xC5AC, 0xD58D,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76D7, 0x66F6, 0x5695, 0x46B4,
    0xB75B, 0xA77A, 0x9719, 0x8738, 0xF7DF, 0xE7FE, 0xD79D, 0xC7BC,
    0x48C4, 0x58E5, 0x6886, 0x78A7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xC9CC, 0xD9ED, 0xE98E, 0xF9AF, 0x8948, 0x9969, 0xA90A, 0xB92B,
    0x5AF5, 0x4AD4, 0x7AB7, 0x6A96, 0x1A71, 0x0A50, 0x3A33, 0x2A12,
    0xDBFD, 0xCBDC, 0xFBBF, 0xEB9E, 0x9B79, 0x8B58, 0xBB3B, 0xAB1A,
    0x6CA6, 0x7C87, 0x4CE4, 0x5CC5, 0x2C22, 0x3C03, 0x0C60, 0x1C41,
    0xEDAE, 0xFD8F, 0xCDEC, 0xDDCD, 0xAD2A, 0xBD0B, 0x8D68, 0x9D49,
    0x7E97, 0x6EB6, 0x5ED5, 0x4EF4, 0x3E13, 0x2E32, 0x1E51, 0x0E70,
    0xFF9F, 0xEFBE, 0xDFDD, 0xCFFC, 0xBF1B, 0xAF3A, 0x9F59, 0x8F78,
    0x9188, 0x81A9, 0xB1CA, 0xA1EB, 0xD10C, 0xC12D, 0xF14E, 0xE16F,
    0x1080, 0x00A1, 0x30C2, 0x20E3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83B9, 0x9398, 0xA3FB, 0xB3DA, 0xC33D, 0xD31C, 0xE37F, 0xF35E,
    0x02B1, 0x1290, 0x22F3, 0x32D2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xB5EA, 0xA5CB, 0x95A8, 0x8589, 0xF56E, 0xE54F, 0xD52C, 0xC50D,
    0x34E2, 0x24C3, 0x14A0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xA7DB, 0xB7FA, 0x8799, 0x97B8, 0xE75F, 0xF77E, 0xC71D, 0xD73C,
    0x26D3, 0x36F2, 0x0691, 0x16B0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xD94C, 0xC96D, 0xF90E, 0xE92F, 0x99C8, 0x89E9, 0xB98A, 0xA9AB,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18C0, 0x08E1, 0x3882, 0x28A3,
    0xCB7D, 0xDB5C, 0xEB3F, 0xFB1E, 0x8BF9, 0x9BD8, 0xABBB, 0xBB9A,
    0x4A75, 0x5A54, 0x6A37, 0x7A16, 0x0AF1, 0x1AD0, 0x2AB3, 0x3A92,
    0xFD2E, 0xED0F, 0xDD6C, 0xCD4D, 0xBDAA, 0xAD8B, 0x9DE8, 0x8DC9,
    0x7C26, 0x6C07, 0x5C64, 0x4C45, 0x3CA2, 0x2C83, 0x1CE0, 0x0CC1,
    0xEF1F, 0xFF3E, 0xCF5D, 0xDF7C, 0xAF9B, 0xBFBA, 0x8FD9, 0x9FF8,
    0x6E17, 0x7E36, 0x4E55, 0x5E74, 0x2E93, 0x3EB2, 0x0ED1, 0x1EF0,
};

uint16_t sl_redis_crc16(const void *p, size_t len) {
    const unsigned char *b = p;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) crc = (uint16_t)((crc << 8) ^ crc16_tab[((crc >> 8) ^ b[i]) & 0xFF]);
    return crc;
}

/* The bytes between the first '{' and the first '}' after it, when there is at least
 * one; otherwise the whole key. */
unsigned sl_redis_keyslot(const void *key, size_t len) {
    const char *k = key;
    const char *open = len ? memchr(k, '{', len) : NULL;
    if (open != NULL) {
        size_t from = (size_t)(open - k) + 1;
        const char *close = from < len ? memchr(k + from, '}', len - from) : NULL;
        if (close != NULL && close > k + from)
            return sl_redis_crc16(k + from, (size_t)(close - (k + from))) & 0x3FFF;
    }
    return sl_redis_crc16(k, len) & 0x3FFF;
}

/* ---- reader guard -------------------------------------------------------------------
 * hiredis 0.14 allocates an array's element table as soon as it reads the header, so a
 * broken or hostile peer announcing "*2000000000" would make us allocate gigabytes. The
 * guard refuses arrays above SL_REDIS_MAX_ELEMENTS: the reader fails (the connection is
 * dropped and reopened, its decisions fail as store errors) instead. The largest reply we
 * read legitimately is a topology of 16384 slot ranges. */
static redisReplyObjectFunctions guarded_fns;
static void *(*default_create_array)(const redisReadTask *, int);
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static const redisReplyObjectFunctions *guard_from;

static void *guarded_array(const redisReadTask *t, int n) {
    if (n < 0 || n > SL_REDIS_MAX_ELEMENTS) return NULL; /* the reader reports an error */
    return default_create_array(t, n);
}

static void guard_init(void) {
    guarded_fns = *guard_from;
    default_create_array = guard_from->createArray;
    guarded_fns.createArray = guarded_array;
}

void sl_redis_reader_guard(redisReader *rd) {
    if (rd == NULL || rd->fn == NULL) return;
    if (rd->fn == &guarded_fns) return;
    guard_from = rd->fn;
    pthread_once(&guard_once, guard_init);
    if (default_create_array != NULL) rd->fn = &guarded_fns;
}

static bool is_str(const redisReply *r) {
    return r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static bool str_eq(const redisReply *r, const char *s) {
    size_t n = strlen(s);
    return is_str(r) && r->len == n && memcmp(r->str, s, n) == 0;
}

/* An integer reply, or a string of digits (some proxies answer slots as strings). */
static bool int_of(const redisReply *r, long long *out) {
    if (r == NULL) return false;
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return true;
    }
    if (!is_str(r) || r->len == 0 || r->len > 18) return false;
    long long v = 0;
    for (size_t i = 0; i < r->len; i++) {
        if (r->str[i] < '0' || r->str[i] > '9') return false;
        v = v * 10 + (r->str[i] - '0');
    }
    *out = v;
    return true;
}

/* NULL, "" -> "" (same host); "?" -> unusable; else copied if it fits. */
static bool endpoint_of(const redisReply *r, char *host) {
    host[0] = '\0';
    if (r == NULL || r->type == REDIS_REPLY_NIL) return true;
    if (!is_str(r)) return false;
    if (r->len == 1 && r->str[0] == '?') return false;
    if (r->len >= SL_REDIS_HOST_MAX) return false;
    memcpy(host, r->str, r->len);
    host[r->len] = '\0';
    return true;
}

static bool add_range(sl_redis_range *out, int cap, int *n, long long lo, long long hi,
                      const char *host, long long port) {
    if (lo < 0 || hi < lo || hi >= SL_REDIS_SLOTS || port <= 0 || port > 65535) return false;
    if (*n >= cap) return false;
    sl_redis_range *g = &out[(*n)++];
    g->lo = (uint16_t)lo;
    g->hi = (uint16_t)hi;
    g->port = (int)port;
    memcpy(g->host, host, strlen(host) + 1);
    return true;
}

/* CLUSTER SLOTS: [[start, end, [endpoint, port, id, ...], replicas...], ...] */
static int parse_slots(const redisReply *rep, sl_redis_range *out, int cap) {
    int n = 0;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
        long long lo, hi, port;
        const redisReply *m = e->element[2];
        if (!int_of(e->element[0], &lo) || !int_of(e->element[1], &hi)) continue;
        if (m == NULL || m->type != REDIS_REPLY_ARRAY || m->elements < 2) continue;
        char host[SL_REDIS_HOST_MAX];
        if (!endpoint_of(m->element[0], host) || !int_of(m->element[1], &port)) continue;
        add_range(out, cap, &n, lo, hi, host, port);
    }
    return n;
}

/* A flat key/value array (RESP2 map): the value of `key`, or NULL. */
static const redisReply *field(const redisReply *map, const char *key) {
    if (map == NULL || map->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < map->elements; i += 2)
        if (str_eq(map->element[i], key)) return map->element[i + 1];
    return NULL;
}

/* CLUSTER SHARDS: [["slots", [s, e, ...], "nodes", [[k, v, ...], ...]], ...]; the master
 * that is online (else any master) serves the shard's ranges. */
static int parse_shards(const redisReply *rep, sl_redis_range *out, int cap) {
    int n = 0;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *sh = rep->element[i];
        const redisReply *slots = field(sh, "slots"), *nodes = field(sh, "nodes");
        if (slots == NULL || nodes == NULL || slots->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY)
            continue;
        char host[SL_REDIS_HOST_MAX];
        long long port = 0;
        bool found = false;
        for (int pass = 0; pass < 2 && !found; pass++) {
            for (size_t j = 0; j < nodes->elements && !found; j++) {
                const redisReply *nd = nodes->element[j];
                if (!str_eq(field(nd, "role"), "master")) continue;
                if (pass == 0 && !str_eq(field(nd, "health"), "online")) continue;
                const redisReply *ep = field(nd, "endpoint");
                if (ep == NULL) ep = field(nd, "ip");
                if (!endpoint_of(ep, host)) continue;
                if (!int_of(field(nd, "port"), &port)) continue;
                found = true;
            }
        }
        if (!found) continue;
        for (size_t k = 0; k + 1 < slots->elements; k += 2) {
            long long lo, hi;
            if (!int_of(slots->element[k], &lo) || !int_of(slots->element[k + 1], &hi)) continue;
            add_range(out, cap, &n, lo, hi, host, port);
        }
    }
    return n;
}

int sl_redis_parse_topology(const redisReply *rep, bool shards, sl_redis_range *out, int cap) {
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || out == NULL || cap <= 0) return -1;
    return shards ? parse_shards(rep, out, cap) : parse_slots(rep, out, cap);
}

int sl_redis_parse_redirect(const char *s, size_t len, unsigned *slot, char *host,
                            size_t host_cap, int *port) {
    int kind;
    size_t i;
    if (len > 6 && memcmp(s, "MOVED ", 6) == 0) kind = 1, i = 6;
    else if (len > 4 && memcmp(s, "ASK ", 4) == 0) kind = 2, i = 4;
    else return 0;
    unsigned v = 0;
    size_t d = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9' && d < 6) v = v * 10 + (unsigned)(s[i++] - '0'), d++;
    if (d == 0 || v >= SL_REDIS_SLOTS || i >= len || s[i] != ' ') return 0;
    i++;
    /* host:port, the port after the last ':' (IPv6 endpoints contain colons) */
    size_t end = len, colon = len;
    for (size_t k = i; k < len; k++) {
        if (s[k] == ' ' || s[k] == '\r' || s[k] == '\n') {
            end = k;
            break;
        }
    }
    for (size_t k = end; k > i; k--)
        if (s[k - 1] == ':') {
            colon = k - 1;
            break;
        }
    if (colon == len || colon + 1 >= end || colon - i >= host_cap) return 0;
    long p = 0;
    for (size_t k = colon + 1; k < end; k++) {
        if (s[k] < '0' || s[k] > '9' || p > 65535) return 0;
        p = p * 10 + (s[k] - '0');
    }
    if (p <= 0 || p > 65535) return 0;
    memcpy(host, s + i, colon - i);
    host[colon - i] = '\0';
    *slot = v;
    *port = (int)p;
    return kind;
}
