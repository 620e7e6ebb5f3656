/*
 * slot.c -- Redis Cluster addressing: CRC16/XMODEM key slots with hash tags, topology
 * replies (CLUSTER SHARDS, CLUSTER SLOTS) and MOVED/ASK redirections. Pure functions over
 * bytes and hiredis reply trees: no I/O, no allocation, never trusts the shape of a reply.
 */
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "redis/redis.h"

/* Bitwise CRC16 is fast enough: keys are ~40 bytes and hashed once per item. */
uint16_t sl_redis_crc16(const void *p, size_t len) {
    const unsigned char *b = p;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(b[i] << 8);
        for (int k = 0; k < 8; k++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
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
