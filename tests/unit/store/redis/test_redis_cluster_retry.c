/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_cluster_retry.c -- TRYAGAIN during a slot migration, on a 3-master cluster
 * the test creates: a decision whose two keys (two windows of one rule: one slot) are
 * split between the old and the new owner is retried with a bounded backoff inside its
 * deadline, and answered once the migration completes (the state moved with the keys);
 * decisions that run out of time fail as store errors without opening the breaker, so
 * other slots keep being decided; CLUSTERDOWN (a slot nobody serves) is retried the same
 * way and the decision is answered once the slot is served again; a master that stops
 * answering opens its own breaker, not the other masters'.
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "core/loop.h"
#include "store/redis/redis.h"
#include "redis_t.h"
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

static bool make_cluster(void) {
    for (int i = 0; i < 3; i++) {
        ports[i] = rt_free_port();
        if (rt_start(ports[i], 1) < 0) return false;
    }
    char cmd[400];
    snprintf(cmd, sizeof(cmd),
             "timeout 60 redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d --cluster-yes "
             ">/dev/null 2>&1",
             ports[0], ports[1], ports[2]);
    if (system(cmd) != 0) return false;
    bool ok = false;
    for (int i = 0; i < 500 && !ok; i++) {
        ok = cluster_ok(ports[0]) && cluster_ok(ports[1]) && cluster_ok(ports[2]);
        if (!ok) rt_sleep_ms(20);
    }
    for (int i = 0; i < 3; i++) {
        redisReply *r = rt_cmd(ports[i], "CLUSTER MYID");
        if (r && r->type == REDIS_REPLY_STRING) snprintf(ids[i], sizeof(ids[i]), "%s", r->str);
        if (r) freeReplyObject(r);
    }
    return ok;
}

static sluice_limiter *lim[2];
static sl_hash_key sk;

typedef struct wait_t {
    bool done;
    int rc;
    sl_sresult d;
} wait_t;

static void on_answer(void *ud, int rc, const sl_sresult *d) {
    wait_t *w = ud;
    w->done = true;
    w->rc = rc;
    if (d) w->d = *d;
}

static sl_redis *client(sl_loop *loop, int64_t timeout_ns) {
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", ports[0]);
    o.cluster = true;
    o.time_mode = SL_REDIS_TIME_CALLER;
    o.timeout_ns = timeout_ns;
    o.cache_slots = 1;
    o.secret = "retry secret";
    o.secret_len = 12;
    int err = 0;
    sl_redis *rd = sl_redis_create(loop, &o, &err);
    if (rd == NULL) return NULL;
    const sl_redis_stats *st = sl_redis_stats_get(rd);
    for (int i = 0; i < 300 && !(sl_redis_ready(rd) && atomic_load(&st->topology) > 0); i++) sl_redis_run(rd, 10);
    return rd;
}

/* Starts moving the slot of `key` from its owner to the next node, with only the first
 * window's key moved: the old owner then holds one key of the two (TRYAGAIN). */
static unsigned half_migrate(const char *key, int *from, int *to) {
    char k0[SL_REDIS_KEY_MAX + 1];
    size_t l0 = sl_redis_key(&sk, lim[0], key, strlen(key), k0);
    k0[l0] = '\0';
    unsigned slot = sl_redis_keyslot(k0, l0);
    int a = owner_of(slot), b = (a + 1) % 3;
    *from = a, *to = b;
    if (a < 0) return slot;
    ok_reply(rt_cmd(ports[b], "CLUSTER SETSLOT %u IMPORTING %s", slot, ids[a]));
    ok_reply(rt_cmd(ports[a], "CLUSTER SETSLOT %u MIGRATING %s", slot, ids[b]));
    ok_reply(rt_cmd(ports[a], "MIGRATE 127.0.0.1 %d %s 0 5000", ports[b], k0));
    return slot;
}

static void finish_migration(unsigned slot, int a, int b) {
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
}

static void tryagain_then_answered(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    sl_redis *rd = client(&loop, 2 * SLUICE_NS_PER_S);
    T_CHECK(rd != NULL);
    if (rd == NULL) return;
    const sl_redis_stats *st = sl_redis_stats_get(rd);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    sluice_item items[2] = {{lim[0], "k", 1, 1}, {lim[1], "k", 1, 1}};
    sluice_decision d;
    T_EQ_I(sl_redis_decide_sync(rd, items, 2, sluice_clock_now(clk), &d), SLUICE_OK);
    int a, b;
    unsigned slot = half_migrate("k", &a, &b);
    T_CHECK(a >= 0);
    if (a < 0) goto out;
    wait_t w = {0};
    sluice_clock_advance(clk, SLUICE_NS_PER_MS);
    sl_sitem si[2] = {{.lim = lim[0], .key = "k", .key_len = 1, .cost = 1},
                      {.lim = lim[1], .key = "k", .key_len = 1, .cost = 1}};
    T_EQ_I(sl_redis_decide(rd, si, 2, 0, sluice_clock_now(clk), on_answer, &w), SLUICE_OK);
    sl_redis_flush(rd);
    /* up to ~1 s (the request's deadline is 2 s): a loaded machine runs the retries late */
    for (int i = 0; i < 500 && atomic_load(&st->tryagain) < 2; i++) sl_loop_poll(&loop, 2);
    T_CHECK(atomic_load(&st->tryagain) >= 2); /* retried, still split */
    T_CHECK(!w.done);                          /* ... and still waiting, inside its deadline */
    finish_migration(slot, a, b);
    for (int i = 0; i < 1000 && !w.done; i++) sl_loop_poll(&loop, 2);
    T_CHECK(w.done);
    T_EQ_I(w.rc, SLUICE_OK);
    T_EQ_I(w.d.allowed, 1);
    T_EQ_U(w.d.r[0].remaining, 98); /* the state moved with the keys */
    T_EQ_U(w.d.r[1].remaining, 98);
    T_CHECK(atomic_load(&st->cluster_retries) >= 2);
    T_EQ_U(atomic_load(&st->breaker_open), 0);
    T_EQ_U(atomic_load(&st->errors), 0);
    printf("     TRYAGAIN %llu, retries %llu, MOVED %llu, then answered\n",
           (unsigned long long)atomic_load(&st->tryagain), (unsigned long long)atomic_load(&st->cluster_retries),
           (unsigned long long)atomic_load(&st->moved));
out:
    sl_redis_destroy(rd);
    sluice_clock_destroy(clk);
    sl_loop_deinit(&loop);
}

static void tryagain_out_of_time_keeps_breaker_closed(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    sl_redis *rd = client(&loop, 60 * SLUICE_NS_PER_MS);
    T_CHECK(rd != NULL);
    if (rd == NULL) return;
    const sl_redis_stats *st = sl_redis_stats_get(rd);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    sluice_item items[2] = {{lim[0], "stuck", 5, 1}, {lim[1], "stuck", 5, 1}};
    sluice_decision d;
    T_EQ_I(sl_redis_decide_sync(rd, items, 2, sluice_clock_now(clk), &d), SLUICE_OK);
    int a, b;
    unsigned slot = half_migrate("stuck", &a, &b);
    if (a < 0) goto out;
    /* twice as many failures as open the breaker */
    for (int i = 0; i < 10; i++) {
        sluice_clock_advance(clk, SLUICE_NS_PER_MS);
        T_EQ_I(sl_redis_decide_sync(rd, items, 2, sluice_clock_now(clk), &d), SLUICE_ESTORE);
    }
    T_CHECK(atomic_load(&st->tryagain) >= 20);
    /* given up before the deadline (a loaded machine may let the last retry's answer
     * miss it now and then: that one counts as a timeout) */
    T_CHECK(atomic_load(&st->timeouts) <= 2);
    T_EQ_U(atomic_load(&st->breaker_open), 0);
    /* another key (any slot) is still decided: the breaker is closed */
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "free-%d", i);
        sluice_item one = {lim[0], key, strlen(key), 1};
        T_EQ_I(sl_redis_decide_sync(rd, &one, 1, sluice_clock_now(clk), &d), SLUICE_OK);
    }
    T_EQ_U(atomic_load(&st->breaker_open), 0);
    finish_migration(slot, a, b);
    T_EQ_I(sl_redis_decide_sync(rd, items, 2, sluice_clock_now(clk), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
out:
    sl_redis_destroy(rd);
    sluice_clock_destroy(clk);
    sl_loop_deinit(&loop);
}

static void clusterdown_then_answered(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    sl_redis *rd = client(&loop, 2 * SLUICE_NS_PER_S);
    T_CHECK(rd != NULL);
    if (rd == NULL) return;
    const sl_redis_stats *st = sl_redis_stats_get(rd);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    sluice_item it = {lim[0], "down", 4, 1};
    sluice_decision d;
    T_EQ_I(sl_redis_decide_sync(rd, &it, 1, sluice_clock_now(clk), &d), SLUICE_OK);
    char k0[SL_REDIS_KEY_MAX];
    size_t l0 = sl_redis_key(&sk, lim[0], "down", 4, k0);
    unsigned slot = sl_redis_keyslot(k0, l0);
    int a = owner_of(slot);
    T_CHECK(a >= 0);
    if (a < 0) goto out;
    /* the owner stops serving the slot: the cluster is down (full coverage) */
    T_CHECK(ok_reply(rt_cmd(ports[a], "CLUSTER DELSLOTS %u", slot)));
    wait_t w = {0};
    sluice_clock_advance(clk, SLUICE_NS_PER_MS);
    sl_sitem si = {.lim = lim[0], .key = "down", .key_len = 4, .cost = 1};
    T_EQ_I(sl_redis_decide(rd, &si, 1, 0, sluice_clock_now(clk), on_answer, &w), SLUICE_OK);
    sl_redis_flush(rd);
    for (int i = 0; i < 100 && atomic_load(&st->clusterdown) < 1; i++) sl_loop_poll(&loop, 2);
    T_CHECK(atomic_load(&st->clusterdown) >= 1);
    T_CHECK(!w.done);
    T_CHECK(ok_reply(rt_cmd(ports[a], "CLUSTER ADDSLOTS %u", slot)));
    for (int i = 0; i < 1000 && !w.done; i++) sl_loop_poll(&loop, 2);
    T_CHECK(w.done);
    T_EQ_I(w.rc, SLUICE_OK);
    T_EQ_I(w.d.allowed, 1);
    T_EQ_U(w.d.r[0].remaining, 98);
    T_EQ_U(atomic_load(&st->breaker_open), 0);
    printf("     CLUSTERDOWN %llu, retries %llu, then answered\n", (unsigned long long)atomic_load(&st->clusterdown),
           (unsigned long long)atomic_load(&st->cluster_retries));
    for (int i = 0; i < 500; i++) { /* the cluster agrees again before the next test */
        bool ok = true;
        for (int k = 0; k < 3; k++) ok = ok && cluster_ok(ports[k]);
        if (ok) break;
        rt_sleep_ms(10);
    }
out:
    sl_redis_destroy(rd);
    sluice_clock_destroy(clk);
    sl_loop_deinit(&loop);
}

/* A key (of lim[0]) whose slot node `want` serves, or that serves none of `avoid`. */
static void key_on(int want, char *key, size_t cap) {
    for (int i = 0; i < 10000; i++) {
        snprintf(key, cap, "n%d-%d", want, i);
        char k0[SL_REDIS_KEY_MAX];
        size_t l0 = sl_redis_key(&sk, lim[0], key, strlen(key), k0);
        if (owner_of(sl_redis_keyslot(k0, l0)) == want) return;
    }
    key[0] = '\0';
}

/* One master stops answering (CLIENT PAUSE): its decisions time out until its breaker
 * opens, then are refused at once; every other master's keys keep being decided (with one
 * breaker per client they were refused too, 200 ms at a time). */
static void paused_master_opens_only_its_breaker(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    sl_redis *rd = client(&loop, 30 * SLUICE_NS_PER_MS);
    T_CHECK(rd != NULL);
    if (rd == NULL) return;
    const sl_redis_stats *st = sl_redis_stats_get(rd);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    char slow[32], fast[2][32];
    key_on(0, slow, sizeof(slow));
    key_on(1, fast[0], sizeof(fast[0]));
    key_on(2, fast[1], sizeof(fast[1]));
    T_CHECK(slow[0] && fast[0][0] && fast[1][0]);
    sluice_decision d;
    sluice_item it = {lim[0], slow, strlen(slow), 1};
    T_EQ_I(sl_redis_decide_sync(rd, &it, 1, sluice_clock_now(clk), &d), SLUICE_OK);
    redisReply *pr = rt_cmd(ports[0], "CLIENT PAUSE 1500 ALL");
    T_CHECK(ok_reply(pr));
    for (int i = 0; i < 8; i++) /* the breaker opens after 5 consecutive timeouts */
        T_EQ_I(sl_redis_decide_sync(rd, &it, 1, sluice_clock_now(clk), &d), SLUICE_ESTORE);
    T_CHECK(atomic_load(&st->timeouts) >= 5);
    T_CHECK(atomic_load(&st->breaker_open) >= 1); /* the last ones were refused at once */
    uint64_t refused = atomic_load(&st->breaker_open);
    for (int i = 0; i < 20; i++) {
        sluice_item f = {lim[0], fast[i % 2], strlen(fast[i % 2]), 1};
        T_EQ_I(sl_redis_decide_sync(rd, &f, 1, sluice_clock_now(clk), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
    }
    T_EQ_U(atomic_load(&st->breaker_open), refused); /* no other slot was refused */
    T_CHECK(!sl_redis_ready(rd));                      /* an open breaker is not ready */
    rt_sleep_ms(1600);                                 /* the pause ends */
    int rc = SLUICE_ESTORE;
    for (int i = 0; i < 100 && rc != SLUICE_OK; i++) {
        rc = sl_redis_decide_sync(rd, &it, 1, sluice_clock_now(clk), &d);
        if (rc != SLUICE_OK) sl_redis_run(rd, 20); /* the probe after the open period */
    }
    T_EQ_I(rc, SLUICE_OK);
    printf("     paused master: %llu timeouts, %llu refused by its breaker; 20 of 20 on the others "
           "decided\n", (unsigned long long)atomic_load(&st->timeouts), (unsigned long long)refused);
    sl_redis_destroy(rd);
    sluice_clock_destroy(clk);
    sl_loop_deinit(&loop);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    int err = 0;
    for (int i = 0; i < 2; i++) {
        sluice_limit_spec sp = {.algo = SLUICE_GCRA, .name = "tg", .index = (uint32_t)i, .limit = 100,
                                .period_ns = 1000 * SLUICE_NS_PER_S};
        lim[i] = sluice_limiter_create(&sp, &err, NULL, 0);
    }
    sk = sl_redis_secret_key("retry secret", 12);
    if (!make_cluster()) {
        T_FAIL("could not create the cluster");
        rt_kill_all();
        return T_DONE();
    }
    T_RUN(tryagain_then_answered);
    T_RUN(tryagain_out_of_time_keeps_breaker_closed);
    T_RUN(clusterdown_then_answered);
    T_RUN(paused_master_opens_only_its_breaker);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(lim[i]);
    rt_kill_all();
    return T_DONE();
}
