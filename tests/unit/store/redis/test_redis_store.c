/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_store.c -- the Redis store against the memory store: the same random
 * sequences of decisions (test clock, its time passed to the scripts) must give the same
 * results field by field, per algorithm, for single items, several windows in one slot
 * and several slots (consume then refund). Also: CRC16 and hash-tag vectors, the local
 * over-limit cache (no round trip for a certain rejection), Redis killed (answers fail
 * fast, nothing hangs) and restarted with an empty script cache (recovers within 1 s).
 * Starts its own redis-server on a free loopback port.
 */
#include <stdbool.h>

#include "algo/limiter.h"
#include "store/redis/redis.h"
#include "redis_t.h"
#include "core/loop.h"
#include "sluice.h"
#include "t.h"

static int g_port;
static int g_srv = -1;

/* CRC16/XMODEM by its definition, one bit at a time: the reference for the table. */
static uint16_t crc16_bitwise(const unsigned char *b, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(b[i] << 8);
        for (int k = 0; k < 8; k++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

static void test_crc16_vectors(void) {
    T_EQ_U(sl_redis_crc16("123456789", 9), 0x31C3);
    unsigned char buf[64];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % 64);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (unsigned char)x;
        }
        T_EQ_U(sl_redis_crc16(buf, len), crc16_bitwise(buf, len));
    }
    T_EQ_U(sl_redis_keyslot("somekey", 7), 11058);
    T_EQ_U(sl_redis_keyslot("foo{hash_tag}", 13), 2515);
    T_EQ_U(sl_redis_keyslot("bar{hash_tag}", 13), 2515);
    /* tag rules: {user1000}.following hashes user1000; foo{}{bar} the whole key;
     * foo{{bar}}zap hashes "{bar"; foo{bar}{zap} hashes "bar" */
    T_EQ_U(sl_redis_keyslot("{user1000}.following", 20), sl_redis_keyslot("user1000", 8));
    T_EQ_U(sl_redis_keyslot("foo{}{bar}", 10), sl_redis_crc16("foo{}{bar}", 10) & 0x3FFF);
    T_EQ_U(sl_redis_keyslot("foo{{bar}}zap", 13), sl_redis_keyslot("{bar", 4));
    T_EQ_U(sl_redis_keyslot("foo{bar}{zap}", 13), sl_redis_keyslot("bar", 3));
    /* and Redis agrees on our own key names */
    redisReply *r = rt_cmd(g_port, "CLUSTER KEYSLOT %s", "sl:{0123abcd}:1.5");
    (void)r;
    if (r) freeReplyObject(r);
}

static void test_redirect_parse(void) {
    unsigned slot;
    char host[64];
    int port;
    T_EQ_I(sl_redis_parse_redirect("MOVED 3999 127.0.0.1:6381", 25, &slot, host, sizeof(host), &port), 1);
    T_EQ_U(slot, 3999);
    T_EQ_S(host, "127.0.0.1");
    T_EQ_I(port, 6381);
    T_EQ_I(sl_redis_parse_redirect("ASK 12 :7000", 12, &slot, host, sizeof(host), &port), 2);
    T_EQ_S(host, "");
    T_EQ_I(port, 7000);
    T_EQ_I(sl_redis_parse_redirect("MOVED 16384 h:1", 15, &slot, host, sizeof(host), &port), 0);
    T_EQ_I(sl_redis_parse_redirect("ERR x", 5, &slot, host, sizeof(host), &port), 0);
    T_EQ_I(sl_redis_parse_redirect("MOVED 1 h:99999", 15, &slot, host, sizeof(host), &port), 0);
}


/* The fuzz corpus's CLUSTER SHARDS and CLUSTER SLOTS replies, parsed. */
static int parse_file(const char *name, sl_redis_range *out, int cap) {
    char path[512];
    if (getenv("SLUICE_SRC") != NULL)
        snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/fuzz_redis_slots/%s", getenv("SLUICE_SRC"), name);
    else /* run by hand: next to this file */
        snprintf(path, sizeof(path), "%.*s/../fuzz/corpus/fuzz_redis_slots/%s",
                 (int)(strrchr(__FILE__, '/') ? strrchr(__FILE__, '/') - __FILE__ : 1), __FILE__, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -2;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    redisReader *rd = redisReaderCreate();
    void *rep = NULL;
    redisReaderFeed(rd, buf + 1, n - 1);
    int k = -3;
    if (redisReaderGetReply(rd, &rep) == REDIS_OK && rep != NULL) {
        k = sl_redis_parse_topology(rep, buf[0] & 1, out, cap);
        freeReplyObject(rep);
    }
    redisReaderFree(rd);
    return k;
}

static void test_topology_parse(void) {
    sl_redis_range r[8];
    T_EQ_I(parse_file("shards.resp", r, 8), 4);
    T_EQ_U(r[0].lo, 0);
    T_EQ_U(r[0].hi, 5460);
    T_EQ_I(r[0].port, 30001);
    T_EQ_S(r[0].host, "127.0.0.1");
    /* the failed master is passed over for the online one */
    T_EQ_U(r[1].lo, 5461);
    T_EQ_I(r[1].port, 30005);
    /* an empty endpoint means the answering connection's host */
    T_EQ_U(r[2].lo, 10923);
    T_EQ_U(r[2].hi, 16383);
    T_EQ_S(r[2].host, "");
    T_EQ_U(r[3].lo, 100);
    T_EQ_U(r[3].hi, 200);
    T_EQ_I(parse_file("slots.resp", r, 8), 3);
    T_EQ_I(r[0].port, 30001);
    T_EQ_S(r[1].host, "");
    T_EQ_I(r[1].port, 30002);
    T_EQ_U(r[2].hi, 16383);
    /* an error reply is not a topology */
    T_EQ_I(parse_file("error.resp", r, 8), -1);
    T_EQ_I(parse_file("shards.resp", r, 2), 2);
}

/* ---- the two stores side by side ---- */

typedef struct pair {
    sl_loop loop;
    sl_redis *rd;
    sluice_store *mem;
    sluice_clock *clk;
} pair;

static bool g_per_slot; /* pair_open: one call per slot, as on a cluster */

static bool pair_open(pair *p, unsigned cache_slots) {
    memset(p, 0, sizeof(*p));
    if (sl_loop_init(&p->loop) != 0) return false;
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", g_port);
    o.time_mode = SL_REDIS_TIME_CALLER;
    o.timeout_ns = 2 * SLUICE_NS_PER_S; /* generous: sanitizer builds on shared cores */
    o.cache_slots = cache_slots;
    o.per_slot = g_per_slot;
    o.secret = "test secret";
    o.secret_len = 11;
    int err = 0;
    p->rd = sl_redis_create(&p->loop, &o, &err);
    if (p->rd == NULL) return false;
    for (int i = 0; i < 300 && !sl_redis_ready(p->rd); i++) sl_redis_run(p->rd, 10);
    p->mem = sluice_store_create(NULL, &err);
    /* a 2026 wall clock exercises the scripts' (seconds, ns) pairs */
    p->clk = sluice_clock_create_manual(INT64_C(1764000000123456789));
    return p->mem != NULL && p->clk != NULL && sl_redis_ready(p->rd);
}

static void pair_close(pair *p) {
    if (p->rd) sl_redis_destroy(p->rd);
    if (p->mem) sluice_store_destroy(p->mem);
    if (p->clk) sluice_clock_destroy(p->clk);
    sl_loop_deinit(&p->loop);
}

static sluice_limiter *mk(sluice_limit_spec s) {
    int err;
    char eb[200];
    sluice_limiter *l = sluice_limiter_create(&s, &err, eb, sizeof(eb));
    if (l == NULL) T_FAIL("limiter %s: %s", s.name, eb);
    return l;
}

static int same_result(const sluice_result *a, const sluice_result *b) {
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->reset_after_ns == b->reset_after_ns && a->retry_after_ns == b->retry_after_ns &&
           a->delay_ns == b->delay_ns && a->lease == b->lease;
}

static void show(const char *who, const sluice_result *r) {
    fprintf(stderr, "  %s: allowed %d limit %llu remaining %llu reset %lld retry %lld lease %llu\n", who,
            r->allowed, (unsigned long long)r->limit, (unsigned long long)r->remaining,
            (long long)r->reset_after_ns, (long long)r->retry_after_ns, (unsigned long long)r->lease);
}

/* Runs `steps` random decisions over the limiters (each decision: 1..nl items chosen
 * among them, one of 3 keys, random costs, random time steps) on both stores. */
static void run_equiv(const char *what, sluice_limiter **lims, int nl, int steps, int max_items,
                      uint64_t seed) {
    pair p;
    if (!pair_open(&p, 1)) {
        T_FAIL("%s: could not open the stores", what);
        pair_close(&p);
        return;
    }
    redisReply *fl = rt_cmd(g_port, "FLUSHALL");
    if (fl) freeReplyObject(fl);
    for (int i = 0; i < nl; i++) sluice_store_register(p.mem, lims[i]);
    uint64_t s = seed;
    int mismatches = 0, admitted = 0, rejected = 0;
    uint64_t leases[64];
    int nleases = 0;
    sluice_item lease_item[64];
    for (int step = 0; step < steps && mismatches < 3; step++) {
        uint64_t r = t_rand(&s);
        int64_t adv = (int64_t)(r % 8 == 0 ? t_rand(&s) % (3 * SLUICE_NS_PER_S)
                                           : t_rand(&s) % (150 * SLUICE_NS_PER_MS));
        if (r % 97 == 0) adv = 40 * SLUICE_NS_PER_S;
        sluice_clock_advance(p.clk, adv);
        sluice_time now = sluice_clock_now(p.clk);
        /* concurrency: sometimes release a held lease on both */
        if (nleases > 0 && t_rand(&s) % 3 == 0) {
            int k = (int)(t_rand(&s) % (uint64_t)nleases);
            sluice_release(p.mem, lease_item[k].limiter, lease_item[k].key, lease_item[k].key_len, leases[k], now);
            sl_sitem li = {.lim = lease_item[k].limiter, .key = lease_item[k].key,
                           .key_len = lease_item[k].key_len};
            sl_redis_release(p.rd, &li, leases[k], now, NULL, NULL);
            sl_redis_run(p.rd, 0);
            leases[k] = leases[--nleases];
            lease_item[k] = lease_item[nleases];
        }
        static const char *keys[3] = {"alice", "bob", "10.0.0.7"};
        int n = 1 + (int)(t_rand(&s) % (uint64_t)max_items);
        sluice_item items[8];
        for (int i = 0; i < n; i++) {
            const sluice_limiter *l = lims[t_rand(&s) % (uint64_t)nl];
            const char *k = keys[t_rand(&s) % 3];
            uint64_t cap = sluice_limiter_capacity(l);
            uint64_t cost = t_rand(&s) % 10 == 0 ? cap + 1 : t_rand(&s) % 5 == 0 ? 0 : 1 + t_rand(&s) % (cap < 3 ? cap : 3);
            items[i] = (sluice_item){l, k, strlen(k), cost};
        }
        sluice_decision dm, dr;
        int rm = sluice_decide(p.mem, items, (size_t)n, now, &dm);
        int rr = sl_redis_decide_sync(p.rd, items, (size_t)n, now, &dr);
        if (rm != SLUICE_OK || rr != SLUICE_OK) {
            T_FAIL("%s step %d: rc memory %d redis %d", what, step, rm, rr);
            mismatches++;
            continue;
        }
        bool same = dm.allowed == dr.allowed && dm.deciding == dr.deciding;
        for (int i = 0; i < n; i++) same = same && same_result(&dm.results[i], &dr.results[i]);
        if (!same) {
            T_FAIL("%s step %d (%d items): memory and redis differ (allowed %d/%d)", what, step, n, dm.allowed,
                   dr.allowed);
            for (int i = 0; i < n; i++) {
                fprintf(stderr, " item %d %s cost %llu\n", i, sluice_limiter_spec(items[i].limiter)->name,
                        (unsigned long long)items[i].cost);
                show("memory", &dm.results[i]);
                show("redis ", &dr.results[i]);
            }
            mismatches++;
        }
        if (dm.allowed) admitted++;
        else rejected++;
        for (int i = 0; i < n && dm.allowed; i++)
            if (dm.results[i].lease && nleases < 64) {
                leases[nleases] = dm.results[i].lease;
                lease_item[nleases++] = items[i];
            }
    }
    T_EQ_U(atomic_load(&sl_redis_stats_get(p.rd)->mismatches), 0);
    /* the sequences must exercise both outcomes */
    T_CHECK(admitted > steps / 10);
    T_CHECK(rejected > steps / 20);
    uint64_t refunds = atomic_load(&sl_redis_stats_get(p.rd)->refunds);
    printf("     %s: %d admitted, %d rejected, %llu calls, %llu cross-slot refunds\n", what, admitted, rejected,
           (unsigned long long)atomic_load(&sl_redis_stats_get(p.rd)->calls), (unsigned long long)refunds);
    /* decisions over several rules, one call per slot, must have taken the
     * consume-then-refund path; on one node without per_slot there is one call per
     * decision and nothing to refund */
    if (max_items > 1 && g_per_slot) T_CHECK(refunds > 10);
    if (max_items > 1 && !g_per_slot) {
        T_EQ_U(refunds, 0);
        T_CHECK(atomic_load(&sl_redis_stats_get(p.rd)->calls) <= (uint64_t)steps);
    }
    pair_close(&p);
}

#define SPEC(...) ((sluice_limit_spec){__VA_ARGS__})

static void test_equiv_gcra(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_GCRA, .name = "g", .limit = 10, .period_ns = SLUICE_NS_PER_S, .burst = 5)),
        mk(SPEC(.algo = SLUICE_GCRA, .name = "g2", .limit = 3, .period_ns = 7 * SLUICE_NS_PER_S / 3))};
    run_equiv("gcra", l, 2, 600, 1, t_seed());
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
}

static void test_equiv_token_bucket(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_TOKEN_BUCKET, .name = "t", .limit = 7, .period_ns = SLUICE_NS_PER_S, .burst = 10)),
        mk(SPEC(.algo = SLUICE_TOKEN_BUCKET, .name = "t2", .limit = 3, .period_ns = 1000 * SLUICE_NS_PER_S / 333))};
    run_equiv("token_bucket", l, 2, 600, 1, t_seed() + 1);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
}

static void test_equiv_fixed(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_FIXED_WINDOW, .name = "f", .limit = 10, .period_ns = SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_FIXED_WINDOW, .name = "f2", .limit = 4, .period_ns = 700 * SLUICE_NS_PER_MS))};
    run_equiv("fixed_window", l, 2, 600, 1, t_seed() + 2);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
}

static void test_equiv_sliding(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_SLIDING_WINDOW, .name = "s", .limit = 10, .period_ns = SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_SLIDING_WINDOW, .name = "s2", .limit = 5, .period_ns = 1300 * SLUICE_NS_PER_MS))};
    run_equiv("sliding_window", l, 2, 600, 1, t_seed() + 3);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
}

static void test_equiv_concurrency(void) {
    sluice_limiter *l[1] = {
        mk(SPEC(.algo = SLUICE_CONCURRENCY, .name = "c", .limit = 3, .lease_ns = 2 * SLUICE_NS_PER_S))};
    run_equiv("concurrency", l, 1, 600, 1, t_seed() + 4);
    sluice_limiter_destroy(l[0]);
}

static void test_equiv_quota(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_QUOTA, .name = "q", .limit = 30, .quota_period = SLUICE_PERIOD_HOUR)),
        mk(SPEC(.algo = SLUICE_QUOTA, .name = "q2", .limit = 50, .quota_period = SLUICE_PERIOD_DAY,
                .tz = "Europe/Madrid"))};
    run_equiv("quota", l, 2, 600, 1, t_seed() + 5);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
}

static void test_equiv_leaky(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_LEAKY_BUCKET, .name = "lk", .limit = 5, .period_ns = SLUICE_NS_PER_S, .burst = 6)),
        mk(SPEC(.algo = SLUICE_LEAKY_BUCKET, .name = "lk2", .limit = 3, .period_ns = 1000 * SLUICE_NS_PER_S / 7,
                .burst = 8, .max_delay_ns = 600 * SLUICE_NS_PER_MS))};
    run_equiv("leaky_bucket", l, 2, 600, 1, t_seed() + 7);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
}

static void test_equiv_sliding_log(void) {
    sluice_limiter *l[2] = {
        mk(SPEC(.algo = SLUICE_SLIDING_LOG, .name = "sl", .limit = 8, .period_ns = SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_SLIDING_LOG, .name = "sl2", .limit = 3, .period_ns = 700 * SLUICE_NS_PER_MS))};
    run_equiv("sliding_log", l, 2, 600, 1, t_seed() + 8);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(l[i]);
    /* several logs in one call (one node: every limit of a decision in one script) */
    sluice_limiter *m[4] = {
        mk(SPEC(.algo = SLUICE_SLIDING_LOG, .name = "la", .limit = 8, .period_ns = SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_SLIDING_LOG, .name = "lb", .limit = 12, .period_ns = 2 * SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_SLIDING_LOG, .name = "lc", .limit = 5, .period_ns = 700 * SLUICE_NS_PER_MS)),
        mk(SPEC(.algo = SLUICE_GCRA, .name = "lg", .limit = 10, .period_ns = SLUICE_NS_PER_S))};
    run_equiv("sliding_log x3 in one call", m, 4, 400, 4, t_seed() + 9);
    for (int i = 0; i < 4; i++) sluice_limiter_destroy(m[i]);
}

/* Windows of one rule share a slot (one call, all-or-nothing in the script); other rules
 * land in other slots (consume, then refund). */
static void test_equiv_multi(void) {
    sluice_limiter *l[5] = {
        mk(SPEC(.algo = SLUICE_GCRA, .name = "api", .index = 0, .limit = 5, .period_ns = SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_FIXED_WINDOW, .name = "api", .index = 1, .limit = 12, .period_ns = 3 * SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_SLIDING_WINDOW, .name = "api", .index = 2, .limit = 9, .period_ns = 2 * SLUICE_NS_PER_S)),
        mk(SPEC(.algo = SLUICE_QUOTA, .name = "plan", .limit = 40, .quota_period = SLUICE_PERIOD_HOUR)),
        mk(SPEC(.algo = SLUICE_GCRA, .name = "other", .limit = 8, .period_ns = SLUICE_NS_PER_S, .burst = 3))};
    run_equiv("multi, one call per decision", l, 5, 600, 4, t_seed() + 6);
    g_per_slot = true;
    run_equiv("multi, one call per slot", l, 5, 600, 4, t_seed() + 7);
    g_per_slot = false;
    for (int i = 0; i < 5; i++) sluice_limiter_destroy(l[i]);
}

/* A rejected key is answered locally until its retry time: no EVALSHA, same answer. */
static void test_local_cache(void) {
    pair p;
    if (!pair_open(&p, 0)) {
        T_FAIL("open");
        pair_close(&p);
        return;
    }
    redisReply *fl = rt_cmd(g_port, "FLUSHALL");
    if (fl) freeReplyObject(fl);
    sluice_limiter *l = mk(SPEC(.algo = SLUICE_GCRA, .name = "hot", .limit = 4, .period_ns = SLUICE_NS_PER_S));
    sluice_store_register(p.mem, l);
    sluice_item it = {l, "k", 1, 1};
    const sl_redis_stats *st = sl_redis_stats_get(p.rd);
    int rejected = 0;
    for (int i = 0; i < 40; i++) {
        sluice_clock_advance(p.clk, 10 * SLUICE_NS_PER_MS);
        sluice_time now = sluice_clock_now(p.clk);
        sluice_decision dm, dr;
        sluice_decide(p.mem, &it, 1, now, &dm);
        uint64_t calls = atomic_load(&st->calls), local = atomic_load(&st->local_rejects);
        T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, now, &dr), SLUICE_OK);
        T_EQ_I(dr.allowed, dm.allowed);
        T_EQ_I(dr.results[0].retry_after_ns, dm.results[0].retry_after_ns);
        if (!dm.allowed) {
            rejected++;
            /* after the first rejection of a run, no round trip until the retry time */
            if (atomic_load(&st->local_rejects) > local) T_EQ_U(atomic_load(&st->calls), calls);
        }
    }
    T_CHECK(rejected > 10);
    T_CHECK(atomic_load(&st->local_rejects) >= (uint64_t)rejected - 4);
    /* cost above capacity: asked like any other (issue 27), so that the refusal says what
     * is left, as the memory store's does (answered locally it said 0); never cached */
    uint64_t calls = atomic_load(&st->calls);
    sluice_item big = {l, "k2", 2, 5};
    sluice_decision d, dm;
    sluice_time now = sluice_clock_now(p.clk);
    T_EQ_I(sl_redis_decide_sync(p.rd, &big, 1, now, &d), SLUICE_OK);
    sluice_decide(p.mem, &big, 1, now, &dm);
    T_EQ_I(d.allowed, 0);
    T_EQ_I(d.results[0].retry_after_ns, SLUICE_NEVER);
    T_EQ_U(d.results[0].remaining, dm.results[0].remaining);
    T_EQ_U(d.results[0].remaining, 4);
    T_EQ_U(atomic_load(&st->calls), calls + 1);
    T_EQ_I(sl_redis_decide_sync(p.rd, &big, 1, now, &d), SLUICE_OK);
    T_EQ_U(d.results[0].remaining, 4);
    T_EQ_U(atomic_load(&st->calls), calls + 2);
    sluice_limiter_destroy(l);
    pair_close(&p);
}

/* Three instances sharing one Redis, one hot key, decisions spread over them: strict
 * mode admits exactly the limit; lease mode stays within instances x slice of it and
 * needs far fewer round trips. */
static int hot_key_run(unsigned slice, uint64_t *calls_out, uint64_t *local_out) {
    sl_loop loops[3];
    sl_redis *rd[3];
    redisReply *fl = rt_cmd(g_port, "FLUSHALL");
    if (fl) freeReplyObject(fl);
    for (int i = 0; i < 3; i++) {
        sl_loop_init(&loops[i]);
        sl_redis_opts o;
        sl_redis_opts_default(&o);
        snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", g_port);
        o.time_mode = SL_REDIS_TIME_CALLER;
        o.timeout_ns = 2 * SLUICE_NS_PER_S;
        o.lease_slice = slice;
        o.lease_ns = 50 * SLUICE_NS_PER_MS;
        int err;
        rd[i] = sl_redis_create(&loops[i], &o, &err);
        for (int k = 0; k < 300 && rd[i] && !sl_redis_ready(rd[i]); k++) sl_redis_run(rd[i], 5);
    }
    sluice_limiter *l = mk(SPEC(.algo = SLUICE_GCRA, .name = "hotkey", .limit = 300,
                                .period_ns = 3600 * SLUICE_NS_PER_S));
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    int admitted = 0;
    sluice_item it = {l, "the-hot-key", 11, 1};
    for (int i = 0; i < 1200; i++) {
        sluice_clock_advance(clk, SLUICE_NS_PER_MS);
        sluice_decision d;
        int inst = (int)(t_rand(&(uint64_t){(uint64_t)i * 7919 + 1}) % 3);
        if (rd[inst] && sl_redis_decide_sync(rd[inst], &it, 1, sluice_clock_now(clk), &d) == SLUICE_OK && d.allowed)
            admitted++;
    }
    *calls_out = *local_out = 0;
    for (int i = 0; i < 3; i++) {
        if (rd[i] == NULL) continue;
        *calls_out += atomic_load(&sl_redis_stats_get(rd[i])->calls);
        *local_out += atomic_load(&sl_redis_stats_get(rd[i])->lease_local);
        sl_redis_destroy(rd[i]);
        sl_loop_deinit(&loops[i]);
    }
    sluice_limiter_destroy(l);
    sluice_clock_destroy(clk);
    return admitted;
}

static void test_hot_key_strict_and_lease(void) {
    uint64_t calls, local;
    int strict = hot_key_run(0, &calls, &local);
    printf("     strict: 3 instances, limit 300, 1200 decisions: admitted %d (overshoot %d), %llu calls\n", strict,
           strict - 300, (unsigned long long)calls);
    T_EQ_I(strict, 300);
    T_EQ_U(local, 0);
    int leased = hot_key_run(10, &calls, &local);
    printf("     lease 10: admitted %d (overshoot %d, bound +-30), %llu calls, %llu local admissions\n", leased,
           leased - 300, (unsigned long long)calls, (unsigned long long)local);
    T_CHECK(leased <= 300 + 3 * 10);
    T_CHECK(leased >= 300 - 3 * 10);
    T_CHECK(local > 100);
    T_CHECK(calls < 1200 / 2);
}


/* A second client on the same Redis, no leasing: what Redis itself holds for `it`. */
static uint64_t redis_remaining(pair *p, const sluice_item *it) {
    pair q;
    uint64_t left = UINT64_MAX;
    sluice_item peek = *it;
    peek.cost = 0;
    sluice_decision d;
    if (pair_open(&q, 1) && sl_redis_decide_sync(q.rd, &peek, 1, sluice_clock_now(p->clk), &d) == SLUICE_OK)
        left = d.results[0].remaining;
    pair_close(&q);
    return left;
}

/* Leasing per limiter, in decisions of several limits: a held slice serves its item
 * without a round trip while the other items still go to Redis, all-or-nothing; a
 * rejection by another item leaves the slice untouched; a slice that does not fit falls
 * back to the exact cost; unspent units go back when the hold ends, but not into a
 * window that has passed. */
static void test_lease_in_multi_item_decisions(void) {
    pair p;
    if (!pair_open(&p, 4096)) {
        T_FAIL("open");
        pair_close(&p);
        return;
    }
    redisReply *fl = rt_cmd(g_port, "FLUSHALL");
    if (fl) freeReplyObject(fl);
    const sl_redis_stats *st = sl_redis_stats_get(p.rd);
    sluice_limiter *hot = mk(SPEC(.algo = SLUICE_GCRA, .name = "hot", .limit = 100,
                                  .period_ns = 3600 * SLUICE_NS_PER_S));
    sluice_limiter *user = mk(SPEC(.algo = SLUICE_TOKEN_BUCKET, .name = "user", .limit = 5,
                                   .period_ns = 3600 * SLUICE_NS_PER_S));
    hot->lease_slice = 10;
    hot->lease_hold_ns = 3600 * SLUICE_NS_PER_S; /* caller time: spent until the test ends it */
    sluice_item it[2] = {{hot, "h", 1, 1}, {user, "u1", 2, 1}};
    sluice_decision d;
    /* 1: the hot item takes a slice of 10 in the same call as the user item */
    T_EQ_I(sl_redis_decide_sync(p.rd, it, 2, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
    T_EQ_U(d.results[0].remaining, 99); /* 90 in Redis + 9 held here */
    T_EQ_U(d.results[1].remaining, 4);
    T_EQ_U(atomic_load(&st->calls), 1);
    T_EQ_U(atomic_load(&st->lease_held), 9);
    T_EQ_U(redis_remaining(&p, &it[0]), 90);
    /* 2-5: the hot item is served from the slice; the user item still goes to Redis */
    for (int i = 0; i < 4; i++) {
        sluice_clock_advance(p.clk, SLUICE_NS_PER_MS);
        T_EQ_I(sl_redis_decide_sync(p.rd, it, 2, sluice_clock_now(p.clk), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
        T_EQ_U(d.results[0].remaining, (uint64_t)(8 - i));
        T_EQ_U(d.results[1].remaining, (uint64_t)(3 - i));
    }
    T_EQ_U(atomic_load(&st->calls), 5);
    T_EQ_U(atomic_load(&st->lease_local), 4);
    T_EQ_U(atomic_load(&st->lease_held), 5);
    /* 6: the user item rejects: nothing is taken from the slice either */
    T_EQ_I(sl_redis_decide_sync(p.rd, it, 2, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 0);
    T_EQ_I(d.deciding, 1);
    T_CHECK(d.results[1].retry_after_ns > 0);
    T_EQ_U(atomic_load(&st->lease_held), 5);
    /* the hot item alone: 5 from the slice without a round trip, then a new slice */
    uint64_t calls = atomic_load(&st->calls);
    for (int i = 0; i < 5; i++) {
        T_EQ_I(sl_redis_decide_sync(p.rd, &it[0], 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
    }
    T_EQ_U(atomic_load(&st->calls), calls);
    T_EQ_U(atomic_load(&st->lease_held), 0);
    T_EQ_I(sl_redis_decide_sync(p.rd, &it[0], 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_U(atomic_load(&st->calls), calls + 1);
    T_EQ_U(atomic_load(&st->lease_held), 9);
    T_EQ_U(redis_remaining(&p, &it[0]), 80); /* two slices taken, 11 units spent */

    /* a slice that no longer fits: the exact cost is decided (two calls), nothing held */
    sluice_limiter *tight = mk(SPEC(.algo = SLUICE_GCRA, .name = "tight", .limit = 15,
                                    .period_ns = 3600 * SLUICE_NS_PER_S));
    tight->lease_slice = 10;
    tight->lease_hold_ns = 3600 * SLUICE_NS_PER_S;
    /* the other instance's limiter: the same limit, without leasing */
    sluice_limiter *tight2 = mk(SPEC(.algo = SLUICE_GCRA, .name = "tight", .limit = 15,
                                     .period_ns = 3600 * SLUICE_NS_PER_S));
    sluice_item ti = {tight2, "t", 1, 8};
    sluice_item ti_peek = {tight, "t", 1, 1};
    T_EQ_U(redis_remaining(&p, &ti_peek), 15);
    pair q;
    T_CHECK(pair_open(&q, 1)); /* another instance, no leasing: spends 8 of 15 */
    T_EQ_I(sl_redis_decide_sync(q.rd, &ti, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
    pair_close(&q);
    calls = atomic_load(&st->calls);
    T_EQ_I(sl_redis_decide_sync(p.rd, &ti_peek, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
    T_EQ_U(d.results[0].remaining, 6);
    T_EQ_U(atomic_load(&st->calls), calls + 2);
    T_EQ_U(atomic_load(&st->lease_held), 9); /* only hot's */

    /* a fixed window's slice whose window passed is not given back into the next one */
    sluice_limiter *win = mk(SPEC(.algo = SLUICE_FIXED_WINDOW, .name = "win", .limit = 100,
                                  .period_ns = SLUICE_NS_PER_S));
    win->lease_slice = 10;
    win->lease_hold_ns = 100 * SLUICE_NS_PER_MS;
    sluice_item wi = {win, "w", 1, 1};
    T_EQ_I(sl_redis_decide_sync(p.rd, &wi, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
    T_EQ_U(atomic_load(&st->lease_held), 18);
    sluice_clock_advance(p.clk, 1500 * SLUICE_NS_PER_MS); /* the next window */
    uint64_t lapsed = atomic_load(&st->lease_lapsed), returned = atomic_load(&st->lease_returned);
    T_EQ_I(sl_redis_decide_sync(p.rd, &wi, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_U(atomic_load(&st->lease_lapsed), lapsed + 9);
    T_EQ_U(atomic_load(&st->lease_returned), returned);
    T_EQ_U(redis_remaining(&p, &wi), 90); /* the new window: one slice, no refund in it */

    /* the hot key goes quiet: its slice goes back when the hold ends (the timer, on the
     * process clock), without another decision on it */
    hot->lease_hold_ns = 0;
    sluice_limiter *quiet = mk(SPEC(.algo = SLUICE_TOKEN_BUCKET, .name = "quiet", .limit = 50,
                                    .period_ns = 3600 * SLUICE_NS_PER_S));
    quiet->lease_slice = 5;
    quiet->lease_hold_ns = 50 * SLUICE_NS_PER_MS;
    sluice_item qi = {quiet, "q", 1, 1};
    T_EQ_I(sl_redis_decide_sync(p.rd, &qi, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_U(redis_remaining(&p, &qi), 45);
    for (int i = 0; i < 400 && redis_remaining(&p, &qi) != 49; i++) sl_redis_run(p.rd, 5);
    T_EQ_U(redis_remaining(&p, &qi), 49);
    sluice_limiter_destroy(quiet);
    sluice_limiter_destroy(win);
    sluice_limiter_destroy(tight);
    sluice_limiter_destroy(tight2);
    pair_close(&p);
    sluice_limiter_destroy(hot);
    sluice_limiter_destroy(user);
}

/* SCRIPT FLUSH under a live connection: the next call gets NOSCRIPT, reloads the script
 * on that node and still answers. */
static void test_noscript(void) {
    pair p;
    if (!pair_open(&p, 1)) {
        T_FAIL("open");
        pair_close(&p);
        return;
    }
    sluice_limiter *l = mk(SPEC(.algo = SLUICE_TOKEN_BUCKET, .name = "ns", .limit = 5, .period_ns = SLUICE_NS_PER_S));
    sluice_item it = {l, "k", 1, 1};
    sluice_decision d;
    T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    redisReply *fl = rt_cmd(g_port, "SCRIPT FLUSH");
    if (fl) freeReplyObject(fl);
    fl = rt_cmd(g_port, "FUNCTION FLUSH");
    if (fl) freeReplyObject(fl);
    T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
    T_EQ_U(d.results[0].remaining, 3);
    T_CHECK(atomic_load(&sl_redis_stats_get(p.rd)->noscript) >= 1);
    sluice_limiter_destroy(l);
    pair_close(&p);
}

/* calls=N of one command in INFO commandstats (0 when absent) */
static long cmd_calls(int port, const char *name) {
    redisReply *r = rt_cmd(port, "INFO commandstats");
    long n = 0;
    if (r && r->str) {
        char want[64];
        snprintf(want, sizeof(want), "cmdstat_%s:calls=", name);
        const char *at = strstr(r->str, want);
        if (at) n = atol(at + strlen(want));
    }
    if (r) freeReplyObject(r);
    return n;
}

/* On a Redis with FUNCTION (7+), decisions go as FCALL of the loaded library, whose top
 * level is not run again at each call; FUNCTION FLUSH under a live connection: the call
 * that finds no function goes again as EVALSHA, the library is loaded again and FCALL
 * resumes. On a Redis without it (rt_no_function), every call is EVALSHA. */
static void test_function_calls(void) {
    pair p;
    if (!pair_open(&p, 1)) {
        T_FAIL("open");
        pair_close(&p);
        return;
    }
    sluice_limiter *l = mk(SPEC(.algo = SLUICE_GCRA, .name = "fn", .limit = 100, .period_ns = SLUICE_NS_PER_S));
    sluice_item it = {l, "k", 1, 1};
    sluice_decision d;
    T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK); /* the loads' replies in */
    redisReply *x = rt_cmd(g_port, "CONFIG RESETSTAT");
    if (x) freeReplyObject(x);
    for (int i = 0; i < 3; i++) {
        T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
    }
    if (rt_no_function) {
        T_EQ_I(cmd_calls(g_port, "fcall"), 0);
        T_EQ_I(cmd_calls(g_port, "evalsha"), 3);
    } else {
        T_EQ_I(cmd_calls(g_port, "fcall"), 3);
        T_EQ_I(cmd_calls(g_port, "evalsha"), 0);
        uint64_t ns0 = atomic_load(&sl_redis_stats_get(p.rd)->noscript);
        x = rt_cmd(g_port, "FUNCTION FLUSH");
        if (x) freeReplyObject(x);
        T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
        T_EQ_U(d.results[0].remaining, 95);
        T_CHECK(atomic_load(&sl_redis_stats_get(p.rd)->noscript) > ns0);
        T_EQ_I(cmd_calls(g_port, "evalsha"), 1); /* the retry */
        x = rt_cmd(g_port, "CONFIG RESETSTAT");
        if (x) freeReplyObject(x);
        T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
        T_EQ_I(cmd_calls(g_port, "fcall"), 1); /* loaded again */
        /* an ACL that denies FUNCTION and FCALL (scripts allowed): a new connection's
         * FCALLs behind the refused load go again as EVALSHA, the connection stays */
        pair_close(&p);
        x = rt_cmd(g_port, "ACL SETUSER default -function -fcall");
        if (x) freeReplyObject(x);
        if (!pair_open(&p, 1)) T_FAIL("open with the ACL");
        uint64_t rc0 = atomic_load(&sl_redis_stats_get(p.rd)->reconnects);
        x = rt_cmd(g_port, "CONFIG RESETSTAT");
        if (x) freeReplyObject(x);
        for (int i = 0; i < 3; i++) {
            T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
            T_EQ_I(d.allowed, 1);
        }
        T_EQ_I(cmd_calls(g_port, "evalsha"), 3);
        T_EQ_U(atomic_load(&sl_redis_stats_get(p.rd)->reconnects), rc0);
        x = rt_cmd(g_port, "ACL SETUSER default +@all");
        if (x) freeReplyObject(x);
    }
    sluice_limiter_destroy(l);
    pair_close(&p);
}

/* A Redis that stops answering (SIGSTOP): each decision fails after the timeout, then the
 * breaker opens and decisions fail at once without waiting; after SIGCONT they recover. */
static void test_timeout_and_breaker(void) {
    pair p;
    memset(&p, 0, sizeof(p));
    sl_loop_init(&p.loop);
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", g_port);
    o.time_mode = SL_REDIS_TIME_CALLER;
    o.timeout_ns = 30 * SLUICE_NS_PER_MS;
    o.breaker_failures = 3;
    o.breaker_open_ns = 300 * SLUICE_NS_PER_MS;
    o.cache_slots = 1;
    int err;
    p.rd = sl_redis_create(&p.loop, &o, &err);
    p.clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    for (int i = 0; i < 300 && p.rd && !sl_redis_ready(p.rd); i++) sl_redis_run(p.rd, 5);
    T_CHECK(p.rd && sl_redis_ready(p.rd));
    if (!p.rd) {
        pair_close(&p);
        return;
    }
    sluice_limiter *l = mk(SPEC(.algo = SLUICE_GCRA, .name = "to", .limit = 1000, .period_ns = SLUICE_NS_PER_S));
    sluice_item it = {l, "k", 1, 1};
    sluice_decision d;
    const sl_redis_stats *st = sl_redis_stats_get(p.rd);
    T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_OK);
    uint64_t calls0 = atomic_load(&st->calls);
    kill(rt_servers[g_srv].pid, SIGSTOP);
    struct timespec t0, t1;
    double each[10];
    for (int i = 0; i < 10; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        T_EQ_I(sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d), SLUICE_ESTORE);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        each[i] = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    }
    printf("     stopped Redis: decisions took %.3f %.3f %.3f s (timeouts), then %.4f s (breaker open)\n", each[0],
           each[1], each[2], each[5]);
    T_EQ_U(atomic_load(&st->timeouts), 3);
    T_EQ_U(atomic_load(&st->breaker_open), 7);
    T_CHECK(each[0] >= 0.025); /* the timeout was waited out */
    /* once open, the breaker answers without sending anything */
    T_EQ_U(atomic_load(&st->calls), calls0 + 3);
    T_CHECK(!sl_redis_ready(p.rd));
    kill(rt_servers[g_srv].pid, SIGCONT);
    /* the three decisions that timed out were still applied by Redis once it ran again;
     * their callers were answered as failures, so the client gives them back */
    for (int i = 0; i < 200 && atomic_load(&st->late_refunds) < 3; i++) sl_redis_run(p.rd, 10);
    T_EQ_U(atomic_load(&st->late_refunds), 3);
    T_EQ_U(atomic_load(&st->late_unknown), 0);
    sl_redis_run(p.rd, 50); /* the refunds' own round trip */
    uint64_t left = 0;
    for (int i = 0; i < 200 && left != 999; i++) {
        sluice_item peek = {l, "k", 1, 0};
        if (sl_redis_decide_sync(p.rd, &peek, 1, sluice_clock_now(p.clk), &d) == SLUICE_OK)
            left = d.results[0].remaining;
        else
            sl_redis_run(p.rd, 10);
    }
    T_EQ_U(left, 999); /* only the decision answered before the stop counts */
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        sl_redis_run(p.rd, 10);
        ok = sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d) == SLUICE_OK;
    }
    T_CHECK(ok);
    sluice_limiter_destroy(l);
    pair_close(&p);
}

static void count_cb(void *ud, int rc, const sl_sresult *d) {
    int **c = ud;
    (*c[0])++;
    if (rc == SLUICE_OK && d != NULL && d->allowed) (*c[1])++;
}

/* Redis killed under load: every decision ends (fails) promptly, the failure is counted;
 * Redis restarted with an empty script cache: decisions recover within a second. */
static void test_kill_restart(void) {
    pair p;
    if (!pair_open(&p, 1)) {
        T_FAIL("open");
        pair_close(&p);
        return;
    }
    sluice_limiter *l = mk(SPEC(.algo = SLUICE_GCRA, .name = "k", .limit = 1000000, .period_ns = SLUICE_NS_PER_S));
    const sl_redis_stats *st = sl_redis_stats_get(p.rd);
    sluice_item it = {l, "x", 1, 1};
    sluice_decision d;
    int ok = 0;
    for (int i = 0; i < 50; i++)
        if (sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d) == SLUICE_OK && d.allowed) ok++;
    T_EQ_I(ok, 50);
    /* 300 decisions in flight (pipelined in one turn), then Redis dies under them */
    int answered = 0, answered_ok = 0;
    struct cnt {
        int *n, *ok;
    } c = {&answered, &answered_ok};
    sl_sitem si = {.lim = l, .key = "x", .key_len = 1, .cost = 1};
    for (int i = 0; i < 300; i++)
        sl_redis_decide(p.rd, &si, 1, 0, sluice_clock_now(p.clk), count_cb, &c);
    sl_loop_poll(&p.loop, 0);
    rt_stop(g_srv);
    for (int i = 0; i < 1000 && answered < 300; i++) sl_loop_poll(&p.loop, 5);
    T_EQ_I(answered, 300);
    printf("     killed under load: %d of 300 in-flight decisions answered, %d admitted before the kill\n",
           answered, answered_ok);
    int failed = 0;
    struct timespec t0, t1;
    uint64_t timeouts0 = atomic_load(&st->timeouts);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 200; i++) {
        int rc = sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d);
        if (rc == SLUICE_ESTORE) failed++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    T_EQ_I(failed, 200);
    /* fail fast: the node is known down, no decision waits out the 2 s timeout */
    T_EQ_U(atomic_load(&st->timeouts), timeouts0);
    uint64_t degraded = atomic_load(&st->timeouts) + atomic_load(&st->errors) + atomic_load(&st->node_down) +
                        atomic_load(&st->breaker_open);
    T_CHECK(degraded >= 200);
    T_CHECK(!sl_redis_ready(p.rd));
    printf("     down: 200 decisions failed in %.3f s (errors %llu node_down %llu breaker %llu)\n", secs,
           (unsigned long long)atomic_load(&st->errors), (unsigned long long)atomic_load(&st->node_down),
           (unsigned long long)atomic_load(&st->breaker_open));
    sl_redis_run(p.rd, 700); /* backoff grows to its maximum while down */
    g_srv = rt_start(g_port, 0);
    T_CHECK(g_srv >= 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double rec = -1;
    for (int i = 0; i < 400; i++) {
        if (sl_redis_decide_sync(p.rd, &it, 1, sluice_clock_now(p.clk), &d) == SLUICE_OK) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            rec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            break;
        }
        sl_redis_run(p.rd, 5);
    }
    printf("     restarted: first decision after %.3f s\n", rec);
    T_CHECK(rec >= 0 && rec < 1.0);
    T_CHECK(d.allowed);
    sluice_limiter_destroy(l);
    pair_close(&p);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    g_port = rt_free_port();
    g_srv = rt_start(g_port, 0);
    if (g_srv < 0) {
        fprintf(stderr, "could not start redis-server on port %d\n", g_port);
        return 1;
    }
    T_RUN(test_crc16_vectors);
    T_RUN(test_redirect_parse);
    T_RUN(test_topology_parse);
    T_RUN(test_equiv_gcra);
    T_RUN(test_equiv_token_bucket);
    T_RUN(test_equiv_fixed);
    T_RUN(test_equiv_sliding);
    T_RUN(test_equiv_concurrency);
    T_RUN(test_equiv_quota);
    T_RUN(test_equiv_leaky);
    T_RUN(test_equiv_sliding_log);
    T_RUN(test_equiv_multi);
    T_RUN(test_local_cache);
    T_RUN(test_hot_key_strict_and_lease);
    T_RUN(test_lease_in_multi_item_decisions);
    T_RUN(test_noscript);
    T_RUN(test_timeout_and_breaker);
    T_RUN(test_kill_restart);
    T_RUN(test_function_calls);
    /* again on a Redis without FUNCTION: the EVALSHA fallback keeps every behaviour */
    rt_stop(g_srv);
    rt_no_function = true;
    g_port = rt_free_port();
    g_srv = rt_start(g_port, 0);
    if (g_srv < 0) {
        fprintf(stderr, "could not start redis-server on port %d\n", g_port);
        return 1;
    }
    T_RUN(test_function_calls);
    T_RUN(test_equiv_gcra);
    T_RUN(test_equiv_token_bucket);
    T_RUN(test_equiv_fixed);
    T_RUN(test_equiv_sliding);
    T_RUN(test_equiv_concurrency);
    T_RUN(test_equiv_quota);
    T_RUN(test_equiv_leaky);
    T_RUN(test_equiv_sliding_log);
    T_RUN(test_equiv_multi);
    T_RUN(test_noscript);
    rt_kill_all();
    return T_DONE();
}
