/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_cluster.c -- the Redis store on a 3-master Redis Cluster created by the test
 * (redis-cli --cluster create on free loopback ports): decisions across slots agree with
 * the memory store; during a slot migration a new key is answered through ASK (ASKING,
 * once) while existing keys stay on the old node; after the migration the old node's
 * MOVED updates the slot map and the retried decision finds the migrated state.
 */
#include <stdbool.h>

#include "store/redis/redis.h"
#include "redis_t.h"
#include "core/loop.h"
#include "sluice.h"
#include "t.h"

static int ports[3];
static char ids[3][64];

static bool cluster_ok(int port) {
    redisReply *r = rt_cmd(port, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
    if (r) freeReplyObject(r);
    return ok;
}

static int owner_of(unsigned slot) {
    redisReply *r = rt_cmd(ports[0], "CLUSTER SLOTS");
    int who = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *e = r->element[i];
        if ((unsigned)e->element[0]->integer <= slot && slot <= (unsigned)e->element[1]->integer) {
            int port = (int)e->element[2]->element[1]->integer;
            for (int k = 0; k < 3; k++)
                if (ports[k] == port) who = k;
        }
    }
    if (r) freeReplyObject(r);
    return who;
}

static bool ok_reply(redisReply *r) {
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok) fprintf(stderr, "reply: %s\n", r && r->str ? r->str : "(none)");
    if (r) freeReplyObject(r);
    return ok;
}

static sluice_limiter *mk(sluice_limit_spec s) {
    int err;
    char eb[200];
    sluice_limiter *l = sluice_limiter_create(&s, &err, eb, sizeof(eb));
    if (l == NULL) T_FAIL("limiter: %s", eb);
    return l;
}

static void test_cluster(void) {
    for (int i = 0; i < 3; i++) {
        ports[i] = rt_free_port();
        if (rt_start(ports[i], 1) < 0) {
            T_FAIL("could not start cluster node %d", ports[i]);
            return;
        }
    }
    char cmd[400];
    snprintf(cmd, sizeof(cmd),
             "timeout 60 redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d --cluster-yes "
             ">/dev/null 2>&1",
             ports[0], ports[1], ports[2]);
    if (system(cmd) != 0) {
        T_FAIL("redis-cli --cluster create failed");
        return;
    }
    bool ok = false;
    for (int i = 0; i < 500 && !ok; i++) {
        ok = cluster_ok(ports[0]) && cluster_ok(ports[1]) && cluster_ok(ports[2]);
        if (!ok) rt_sleep_ms(20);
    }
    T_CHECK(ok);
    for (int i = 0; i < 3; i++) {
        redisReply *r = rt_cmd(ports[i], "CLUSTER MYID");
        if (r && r->type == REDIS_REPLY_STRING) snprintf(ids[i], sizeof(ids[i]), "%s", r->str);
        if (r) freeReplyObject(r);
    }

    sl_loop loop;
    sl_loop_init(&loop);
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    char url[100];
    snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%d", ports[0]);
    T_EQ_I(sl_redis_parse_url(url, &o), SLUICE_OK);
    T_CHECK(o.cluster);
    o.time_mode = SL_REDIS_TIME_CALLER;
    o.timeout_ns = 2 * SLUICE_NS_PER_S;
    o.cache_slots = 1;
    o.secret = "test secret";
    o.secret_len = 11;
    int err = 0;
    sl_redis *rd = sl_redis_create(&loop, &o, &err);
    T_CHECK(rd != NULL);
    if (rd == NULL) return;
    const sl_redis_stats *st = sl_redis_stats_get(rd);
    for (int i = 0; i < 300 && !(sl_redis_ready(rd) && atomic_load(&st->topology) > 0); i++) sl_redis_run(rd, 10);
    T_CHECK(atomic_load(&st->topology) > 0);

    sluice_store *mem = sluice_store_create(NULL, &err);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    sluice_limiter *lim = mk((sluice_limit_spec){.algo = SLUICE_GCRA, .name = "cl", .limit = 3,
                                                  .period_ns = 1000 * SLUICE_NS_PER_S});
    sluice_store_register(mem, lim);

    /* decisions over many keys (all three masters), same answers as the memory store */
    int differ = 0;
    for (int round = 0; round < 4; round++)
        for (int k = 0; k < 40; k++) {
            char key[16];
            snprintf(key, sizeof(key), "user%d", k);
            sluice_item it = {lim, key, strlen(key), 1};
            sluice_clock_advance(clk, SLUICE_NS_PER_MS);
            sluice_time now = sluice_clock_now(clk);
            sluice_decision dm, dr;
            sluice_decide(mem, &it, 1, now, &dm);
            int rc = sl_redis_decide_sync(rd, &it, 1, now, &dr);
            if (rc != SLUICE_OK || dr.allowed != dm.allowed || dr.results[0].remaining != dm.results[0].remaining ||
                dr.results[0].retry_after_ns != dm.results[0].retry_after_ns)
                differ++;
        }
    T_EQ_I(differ, 0);
    for (int i = 0; i < 3; i++) {
        redisReply *r = rt_cmd(ports[i], "DBSIZE");
        T_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
        if (r) freeReplyObject(r);
    }

    /* slot migration of the slot of "user0" from its owner a to b */
    sl_hash_key sk = sl_redis_secret_key("test secret", 11);
    char rk[SL_REDIS_KEY_MAX];
    size_t rl = sl_redis_key(&sk, lim, "user0", 5, rk);
    unsigned slot = sl_redis_keyslot(rk, rl);
    int a = owner_of(slot), b = (a + 1) % 3;
    T_CHECK(a >= 0);
    if (a < 0) goto out;
    /* a fresh key of the same slot */
    char fresh[32] = "";
    for (int k = 0; k < 200000; k++) {
        char cand[32];
        snprintf(cand, sizeof(cand), "fresh%d", k);
        char ck[SL_REDIS_KEY_MAX];
        size_t cl = sl_redis_key(&sk, lim, cand, strlen(cand), ck);
        if (sl_redis_keyslot(ck, cl) == slot) {
            snprintf(fresh, sizeof(fresh), "%s", cand);
            break;
        }
    }
    T_CHECK(fresh[0] != '\0');
    T_CHECK(ok_reply(rt_cmd(ports[b], "CLUSTER SETSLOT %u IMPORTING %s", slot, ids[a])));
    T_CHECK(ok_reply(rt_cmd(ports[a], "CLUSTER SETSLOT %u MIGRATING %s", slot, ids[b])));

    uint64_t ask0 = atomic_load(&st->ask), moved0 = atomic_load(&st->moved);
    {
        sluice_item it = {lim, fresh, strlen(fresh), 1};
        sluice_time now = sluice_clock_now(clk);
        sluice_decision dm, dr;
        sluice_decide(mem, &it, 1, now, &dm);
        T_EQ_I(sl_redis_decide_sync(rd, &it, 1, now, &dr), SLUICE_OK);
        T_EQ_I(dr.allowed, 1);
        T_EQ_I(dr.results[0].remaining, dm.results[0].remaining);
        T_CHECK(atomic_load(&st->ask) > ask0);
        /* an existing key is still served by the old owner: exhausted, rejected */
        sluice_item ex = {lim, "user0", 5, 1};
        sluice_decide(mem, &ex, 1, now, &dm);
        T_EQ_I(sl_redis_decide_sync(rd, &ex, 1, now, &dr), SLUICE_OK);
        T_EQ_I(dm.allowed, 0);
        T_EQ_I(dr.allowed, 0);
        T_EQ_I(dr.results[0].retry_after_ns, dm.results[0].retry_after_ns);
    }
    printf("     migration of slot %u (node %d -> %d): ASK %llu\n", slot, a, b,
           (unsigned long long)(atomic_load(&st->ask) - ask0));
    /* move the keys, then hand the slot over */
    for (int round = 0; round < 10; round++) {
        redisReply *r = rt_cmd(ports[a], "CLUSTER GETKEYSINSLOT %u 100", slot);
        size_t n = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
        for (size_t i = 0; i < n; i++) {
            redisReply *m = rt_cmd(ports[a], "MIGRATE 127.0.0.1 %d %s 0 5000", ports[b], r->element[i]->str);
            if (m) freeReplyObject(m);
        }
        if (r) freeReplyObject(r);
        if (n == 0) break;
    }
    for (int i = 0; i < 3; i++) ok_reply(rt_cmd(ports[i], "CLUSTER SETSLOT %u NODE %s", slot, ids[b]));
    {
        sluice_clock_advance(clk, SLUICE_NS_PER_MS);
        sluice_time now = sluice_clock_now(clk);
        sluice_item ex = {lim, "user0", 5, 1};
        sluice_decision dm, dr;
        sluice_decide(mem, &ex, 1, now, &dm);
        T_EQ_I(sl_redis_decide_sync(rd, &ex, 1, now, &dr), SLUICE_OK);
        T_EQ_I(dr.allowed, dm.allowed);
        T_EQ_I(dr.allowed, 0); /* the state moved with the key */
        T_EQ_I(dr.results[0].retry_after_ns, dm.results[0].retry_after_ns);
        T_CHECK(atomic_load(&st->moved) > moved0);
        uint64_t m1 = atomic_load(&st->moved);
        sluice_item fr = {lim, fresh, strlen(fresh), 1};
        sluice_decide(mem, &fr, 1, now, &dm);
        T_EQ_I(sl_redis_decide_sync(rd, &fr, 1, now, &dr), SLUICE_OK);
        T_EQ_I(dr.results[0].remaining, dm.results[0].remaining);
        /* the map was updated: no further redirection for this slot */
        T_EQ_U(atomic_load(&st->moved), m1);
        printf("     after the migration: MOVED %llu, topology refreshes %llu\n",
               (unsigned long long)(m1 - moved0), (unsigned long long)atomic_load(&st->topology));
    }
    T_EQ_U(atomic_load(&st->mismatches), 0);
out:
    sl_redis_destroy(rd);
    sluice_limiter_destroy(lim);
    sluice_store_destroy(mem);
    sluice_clock_destroy(clk);
    sl_loop_deinit(&loop);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    T_RUN(test_cluster);
    rt_kill_all();
    return T_DONE();
}
