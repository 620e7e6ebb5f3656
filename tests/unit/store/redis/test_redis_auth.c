/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_auth.c -- the Redis client against real servers that want credentials
 * (requirepass, ACL users) and reached in every way an address can be written (a
 * database, a unix socket, IPv6, a host name): the right credentials decide; wrong or
 * missing ones fail every decision with SLUICE_ESTORE (the caller's failure mode), are
 * counted, and leave a clear error on the node (its address and Redis's own words) that,
 * like everything the client logged, never contains the password.
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "core/loop.h"
#include "store/redis/redis.h"
#include "redis_conn_t.h"
#include "sluice.h"
#include "t.h"

#define PASS "hunter2-requirepass"
#define APP_PASS "hunter2-app-user"
#define WRONG "hunter2-wrong-guess"

static int g_pass_port, g_acl_port, g_plain_port;
static char g_sock[300];
static sluice_limiter *g_lim;
static sluice_clock *g_clk;

typedef struct cli {
    sl_loop loop;
    sl_redis *r;
} cli;

/* A client with o's connection settings; runs its loop until it is ready or a node has
 * reported an error (at most 3 s). */
static bool cli_open(cli *c, const sl_redis_opts *o) {
    memset(c, 0, sizeof(*c));
    sl_loop_init(&c->loop);
    int err = 0;
    c->r = sl_redis_create(&c->loop, o, &err);
    if (c->r == NULL) return false;
    sl_redis_node_health h;
    for (int i = 0; i < 300; i++) {
        if (sl_redis_ready(c->r)) return true;
        if (sl_redis_health(c->r, &h, 1) == 1 && h.last_error[0] && i > 20) return false;
        sl_redis_run(c->r, 10);
    }
    return sl_redis_ready(c->r);
}

static void cli_close(cli *c) {
    if (c->r) sl_redis_destroy(c->r);
    sl_loop_deinit(&c->loop);
}

static sl_redis_opts opts_for(int port) {
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", port);
    o.timeout_ns = 500 * SLUICE_NS_PER_MS;
    o.time_mode = SL_REDIS_TIME_CALLER;
    o.cache_slots = 1;
    o.backoff_max_ns = 50 * SLUICE_NS_PER_MS;
    o.log = rc_log;
    return o;
}

static int decide(cli *c, const char *key) {
    sluice_item it = {g_lim, key, strlen(key), 1};
    sluice_clock_advance(g_clk, SLUICE_NS_PER_MS);
    sluice_decision d;
    int rc = sl_redis_decide_sync(c->r, &it, 1, sluice_clock_now(g_clk), &d);
    if (rc == SLUICE_OK && !d.allowed) return 1; /* (never: the limit is large) */
    return rc;
}

static void no_secret_in(const char *what, const char *text) {
    if (strstr(text, "hunter2") != NULL) T_FAIL("%s shows a password: %s", what, text);
}

/* The client's view of a failed node: not ready, decisions fail as store errors, the
 * error names the node and holds `words`, counters moved. */
static void expect_refused(const sl_redis_opts *o, int port, const char *words) {
    cli c;
    rc_loglen = 0;
    T_CHECK(!cli_open(&c, o));
    if (c.r == NULL) return;
    sl_redis_run(c.r, 100); /* a few reconnections: counted, logged once */
    T_EQ_I(decide(&c, "k"), SLUICE_ESTORE);
    const sl_redis_stats *st = sl_redis_stats_get(c.r);
    T_CHECK(atomic_load(&st->auth_failures) >= 2);
    T_EQ_U(atomic_load(&st->tls_failures), 0);
    T_CHECK(atomic_load(&st->node_down) + atomic_load(&st->errors) >= 1);
    sl_redis_node_health h;
    T_EQ_I(sl_redis_health(c.r, &h, 1), 1);
    char addr[40];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    T_EQ_S(h.addr, addr);
    T_CHECK(h.state != 2);
    T_CHECK(h.auth_failures >= 2);
    if (strstr(h.last_error, addr) == NULL || strstr(h.last_error, words) == NULL)
        T_FAIL("error '%s' lacks '%s' or '%s'", h.last_error, addr, words);
    no_secret_in("the node's error", h.last_error);
    no_secret_in("the log", rc_logbuf);
    printf("     node error: %s\n", h.last_error);
    /* one line for the failure however often it repeats */
    int lines = 0;
    for (const char *p = rc_logbuf; (p = strstr(p, words)) != NULL; p++) lines++;
    T_EQ_I(lines, 1);
    cli_close(&c);
}

static void requirepass(void) {
    sl_redis_opts o = opts_for(g_pass_port);
    snprintf(o.password, sizeof(o.password), "%s", PASS);
    cli c;
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    T_EQ_U(atomic_load(&sl_redis_stats_get(c.r)->auth_failures), 0);
    cli_close(&c);

    snprintf(o.password, sizeof(o.password), "%s", WRONG);
    expect_refused(&o, g_pass_port, "WRONGPASS");
    o.password[0] = '\0';
    expect_refused(&o, g_pass_port, "NOAUTH");
}

static void acl_user(void) {
    sl_redis_opts o = opts_for(g_acl_port);
    snprintf(o.username, sizeof(o.username), "app");
    snprintf(o.password, sizeof(o.password), "%s", APP_PASS);
    cli c;
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    cli_close(&c);

    snprintf(o.password, sizeof(o.password), "%s", WRONG);
    expect_refused(&o, g_acl_port, "WRONGPASS");
    snprintf(o.username, sizeof(o.username), "nobody");
    snprintf(o.password, sizeof(o.password), "%s", APP_PASS);
    expect_refused(&o, g_acl_port, "WRONGPASS");
    /* the default user is off on this server: no credentials at all */
    o.username[0] = o.password[0] = '\0';
    expect_refused(&o, g_acl_port, "NOAUTH");

    /* a user that may log in but not run scripts: every call is refused (NOPERM), the
     * connection is dropped as an authentication failure and the decision fails */
    snprintf(o.username, sizeof(o.username), "noscripts");
    snprintf(o.password, sizeof(o.password), "%s", APP_PASS);
    rc_loglen = 0;
    T_CHECK(cli_open(&c, &o)); /* AUTH itself succeeds */
    if (c.r != NULL) {
        T_EQ_I(decide(&c, "k"), SLUICE_ESTORE);
        sl_redis_node_health h;
        sl_redis_health(c.r, &h, 1);
        T_CHECK(strstr(h.last_error, "NOPERM") != NULL);
        T_CHECK(atomic_load(&sl_redis_stats_get(c.r)->auth_failures) >= 1);
        no_secret_in("the log", rc_logbuf);
    }
    cli_close(&c);
}

static long long dbsize(int db) {
    redisContext *c = rt_connect(g_plain_port);
    if (c == NULL) return -1;
    redisReply *r = redisCommand(c, "SELECT %d", db);
    if (r) freeReplyObject(r);
    r = redisCommand(c, "DBSIZE");
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return n;
}

static void addresses(void) {
    redisReply *fl = rt_cmd(g_plain_port, "FLUSHALL");
    if (fl) freeReplyObject(fl);
    /* a database: the state lands there, not in 0 */
    sl_redis_opts o = opts_for(g_plain_port);
    char url[400], err[200];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/4", g_plain_port);
    T_EQ_I(sl_redis_url_parse(url, &o, err, sizeof(err)), SLUICE_OK);
    cli c;
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "in-db-4"), SLUICE_OK);
    cli_close(&c);
    T_EQ_I(dbsize(4), 1);
    T_EQ_I(dbsize(0), 0);
    /* a database that does not exist: a clear error, no decision made elsewhere */
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/99", g_plain_port);
    o = opts_for(g_plain_port);
    T_EQ_I(sl_redis_url_parse(url, &o, err, sizeof(err)), SLUICE_OK);
    T_CHECK(!cli_open(&c, &o));
    if (c.r) {
        T_EQ_I(decide(&c, "nowhere"), SLUICE_ESTORE);
        sl_redis_node_health h;
        sl_redis_health(c.r, &h, 1);
        T_CHECK(strstr(h.last_error, "SELECT") != NULL);
        T_CHECK(atomic_load(&sl_redis_stats_get(c.r)->connect_failures) >= 1);
    }
    cli_close(&c);
    T_EQ_I(dbsize(0), 0);
    /* a unix socket, IPv6, a host name */
    const char *forms[3] = {"unix://%s", "redis://[::1]:%d", "redis://localhost:%d"};
    for (int i = 0; i < 3; i++) {
        o = opts_for(g_plain_port);
        if (i == 0) snprintf(url, sizeof(url), forms[i], g_sock);
        else snprintf(url, sizeof(url), forms[i], g_plain_port);
        T_EQ_I(sl_redis_url_parse(url, &o, err, sizeof(err)), SLUICE_OK);
        if (!cli_open(&c, &o)) T_FAIL("%s: not ready", url);
        else T_EQ_I(decide(&c, url), SLUICE_OK);
        cli_close(&c);
    }
    /* nobody listening: a connection failure, counted, not an auth failure */
    o = opts_for(rc_port());
    T_CHECK(!cli_open(&c, &o));
    if (c.r) {
        sl_redis_run(c.r, 60);
        T_EQ_I(decide(&c, "k"), SLUICE_ESTORE);
        const sl_redis_stats *st = sl_redis_stats_get(c.r);
        T_CHECK(atomic_load(&st->connect_failures) >= 1);
        T_EQ_U(atomic_load(&st->auth_failures), 0);
        sl_redis_node_health h;
        sl_redis_health(c.r, &h, 1);
        T_CHECK(strstr(h.last_error, "refused") != NULL);
    }
    cli_close(&c);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    int err = 0;
    sluice_limit_spec sp = {.algo = SLUICE_GCRA, .name = "auth", .limit = 1000000, .period_ns = SLUICE_NS_PER_S};
    g_lim = sluice_limiter_create(&sp, &err, NULL, 0);
    g_clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    char ps[3][16];
    g_pass_port = rc_port();
    snprintf(ps[0], sizeof(ps[0]), "%d", g_pass_port);
    const char *a1[] = {"--port", ps[0], "--requirepass", PASS, NULL};
    if (rc_start(g_pass_port, a1) < 0) T_FAIL("redis-server --requirepass did not start");
    g_acl_port = rc_port();
    snprintf(ps[1], sizeof(ps[1]), "%d", g_acl_port);
    const char *a2[] = {"--port", ps[1], "--user", "default", "off", "--user", "app", "on", ">" APP_PASS, "~*",
                        "&*", "+@all", "--user", "noscripts", "on", ">" APP_PASS, "~*", "+@all", "-@scripting",
                        NULL};
    if (rc_start(g_acl_port, a2) < 0) T_FAIL("redis-server with ACL users did not start");
    g_plain_port = rc_port();
    snprintf(ps[2], sizeof(ps[2]), "%d", g_plain_port);
    snprintf(g_sock, sizeof(g_sock), "%s/redis.sock", rt_dir);
    const char *a3[] = {"--port", ps[2], "--unixsocket", g_sock, "--unixsocketperm", "700", NULL};
    if (rc_start(g_plain_port, a3) < 0) T_FAIL("redis-server with a unix socket did not start");
    T_RUN(requirepass);
    T_RUN(acl_user);
    T_RUN(addresses);
    sluice_limiter_destroy(g_lim);
    sluice_clock_destroy(g_clk);
    rt_kill_all();
    return T_DONE();
}
