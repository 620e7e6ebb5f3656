/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_conn.c -- the connection layer (src/store/redis/conn.c) against a real
 * redis-server: replies reach their callbacks in command order across a pipeline that
 * overflows socket buffers; a connection the server drops answers every pending callback
 * with NULL, in order, then reports DOWN once; commands queued while connecting leave
 * after the handshake; a subscription's callback sees every message; closing a
 * connection from another's callback in the same loop turn is safe (its pending event
 * is ignored, its memory freed by sl_rconn_reap).
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "core/loop.h"
#include "store/redis/conn.h"
#include "redis_conn_t.h"
#include "t.h"

static int g_port;

typedef struct owner {
    sl_rconn *c;
    int ups, downs;
    sl_rconn_why why;
    char msg[300];
    long next;     /* the reply number expected next */
    long got, nulls, disorder;
} owner;

static void on_state(void *ud, sl_rconn *c, bool up, sl_rconn_why why, const char *msg) {
    owner *o = ud;
    (void)c;
    if (up) {
        o->ups++;
        return;
    }
    o->downs++;
    o->why = why;
    snprintf(o->msg, sizeof(o->msg), "%s", msg);
}

/* Replies to "ECHO <n>": each must carry the next number. */
static void on_echo(void *ud, redisReply *rep, void *priv) {
    owner *o = ud;
    long n = (long)(intptr_t)priv;
    if (rep == NULL) {
        o->nulls++;
        if (n != o->next) o->disorder++;
        o->next = n + 1;
        return;
    }
    if (rep->type != REDIS_REPLY_STRING || atol(rep->str) != n || n != o->next) o->disorder++;
    o->next = n + 1;
    o->got++;
}

static sl_rconn *open_conn(sl_loop *loop, owner *o) {
    memset(o, 0, sizeof(*o));
    sl_rconn_opts co = {.host = "127.0.0.1", .port = g_port};
    char err[200];
    o->c = sl_rconn_open(loop, &co, o, on_state, err, sizeof(err));
    if (o->c == NULL) T_FAIL("open: %s", err);
    return o->c;
}

static void echo(sl_rconn *c, long n, size_t pad) {
    static char big[70000];
    memset(big, 'x', sizeof(big));
    char num[24];
    int len = snprintf(num, sizeof(num), "%ld", n);
    /* "<n>" followed by padding so that the pipeline is megabytes long */
    char arg[70032];
    memcpy(arg, num, (size_t)len);
    arg[len] = ' ';
    memcpy(arg + len + 1, big, pad);
    const char *argv[2] = {"ECHO", arg};
    size_t lens[2] = {4, (size_t)len + 1 + pad};
    T_EQ_I(sl_rconn_command(c, on_echo, (void *)(intptr_t)n, 2, argv, lens), 0);
}

static void run(sl_loop *loop, int ms, bool (*done)(void *), void *ud) {
    for (int i = 0; i < ms && !(done && done(ud)); i++) {
        sl_loop_poll(loop, 1);
        sl_rconn_reap();
    }
}

static bool all_back(void *ud) {
    owner *o = ud;
    return o->got + o->nulls >= 2000;
}

static void pipeline_order(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    owner o;
    sl_rconn *c = open_conn(&loop, &o);
    if (c == NULL) return;
    /* queued while connecting: they wait for the handshake (PING), then leave in order */
    for (long n = 0; n < 2000; n++) echo(c, n, n % 7 == 0 ? 60000 : 10);
    T_CHECK(sl_rconn_unsent(c) > 4 * 1024 * 1024); /* more than socket buffers hold */
    run(&loop, 10000, all_back, &o);
    T_EQ_I(o.ups, 1);
    T_EQ_I(o.got, 2000);
    T_EQ_I(o.disorder, 0);
    T_EQ_I(o.downs, 0);
    T_EQ_U(sl_rconn_unsent(c), 0);
    sl_rconn_close(c);
    sl_rconn_reap();
    sl_loop_deinit(&loop);
}

static void dropped_by_server(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    owner o;
    sl_rconn *c = open_conn(&loop, &o);
    if (c == NULL) return;
    run(&loop, 2000, NULL, NULL);
    for (int i = 0; i < 2000 && o.ups == 0; i++) sl_loop_poll(&loop, 1);
    T_EQ_I(o.ups, 1);
    /* the server closes our connection after answering this; what we queued after it is
     * never answered */
    const char *argv[6] = {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no"};
    size_t lens[6] = {6, 4, 4, 6, 6, 2};
    o.next = -1;
    T_EQ_I(sl_rconn_command(c, on_echo, (void *)(intptr_t)-1, 6, argv, lens), 0);
    for (long n = 0; n < 5; n++) echo(c, n, 1);
    sl_rconn_flush(c);
    run(&loop, 2000, all_back, &o);
    T_EQ_I(o.downs, 1);
    T_EQ_I(o.why, SL_CONN_EIO);
    T_EQ_I(o.got + o.nulls, 6); /* each callback once: answered or NULL */
    T_CHECK(o.nulls >= 5);
    T_EQ_I(o.disorder, 1); /* (only the CLIENT KILL reply, which is not an echo) */
    char peer[40];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d: ", g_port);
    T_CHECK(strncmp(o.msg, peer, strlen(peer)) == 0);
    T_EQ_I(sl_rconn_command(c, on_echo, NULL, 6, argv, lens), -1); /* failed: refuses */
    sl_rconn_close(c);
    sl_rconn_reap();
    sl_loop_deinit(&loop);
}

/* Two connections whose replies arrive in the same loop turn; whichever callback runs
 * first closes the other: the other's event of that turn must be ignored. */
static owner *pair[2];
static int closes_seen;
static void close_other(void *ud, redisReply *rep, void *priv) {
    (void)rep;
    owner *o = ud;
    o->got++;
    int me = (int)(intptr_t)priv;
    owner *other = pair[1 - me];
    if (other->c != NULL) {
        sl_rconn_close(other->c);
        other->c = NULL;
        closes_seen++;
    }
}

static void close_from_another_callback(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    owner a, b;
    pair[0] = &a, pair[1] = &b;
    open_conn(&loop, &a);
    open_conn(&loop, &b);
    if (a.c == NULL || b.c == NULL) return;
    for (int i = 0; i < 2000 && (a.ups == 0 || b.ups == 0); i++) sl_loop_poll(&loop, 1);
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    closes_seen = 0;
    T_EQ_I(sl_rconn_command(a.c, close_other, (void *)(intptr_t)0, 1, argv, lens), 0);
    T_EQ_I(sl_rconn_command(b.c, close_other, (void *)(intptr_t)1, 1, argv, lens), 0);
    sl_rconn_flush(a.c);
    sl_rconn_flush(b.c);
    rt_sleep_ms(50); /* both replies are in: one epoll batch holds both connections */
    sl_loop_poll(&loop, 100);
    T_EQ_I(closes_seen, 1);
    T_EQ_I(a.got + b.got, 1); /* the closed one's event was not handled */
    sl_rconn_reap();
    if (a.c) sl_rconn_close(a.c);
    if (b.c) sl_rconn_close(b.c);
    sl_rconn_reap();
    sl_loop_deinit(&loop);
}

static long messages;
static void on_sub(void *ud, redisReply *rep, void *priv) {
    (void)ud, (void)priv;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 && rep->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(rep->element[0]->str, "message") == 0)
        messages++;
}

static void subscription(void) {
    sl_loop loop;
    sl_loop_init(&loop);
    owner o;
    sl_rconn *c = open_conn(&loop, &o);
    if (c == NULL) return;
    messages = 0;
    T_EQ_I(sl_rconn_subscribe(c, "chan", on_sub, NULL), 0);
    sl_rconn_flush(c);
    for (int i = 0; i < 500; i++) sl_loop_poll(&loop, 1);
    for (int i = 0; i < 3; i++) {
        redisReply *r = rt_cmd(g_port, "PUBLISH chan m%d", i);
        if (r) freeReplyObject(r);
    }
    for (int i = 0; i < 1000 && messages < 3; i++) sl_loop_poll(&loop, 1);
    T_EQ_I(messages, 3);
    sl_rconn_close(c);
    sl_rconn_reap();
    sl_loop_deinit(&loop);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    g_port = rc_port();
    char p[16];
    snprintf(p, sizeof(p), "%d", g_port);
    const char *args[] = {"--port", p, NULL};
    if (rc_start(g_port, args) < 0) {
        T_FAIL("redis-server did not start");
        return T_DONE();
    }
    T_RUN(pipeline_order);
    T_RUN(dropped_by_server);
    T_RUN(close_from_another_callback);
    T_RUN(subscription);
    rt_kill_all();
    return T_DONE();
}
