/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_tls.c -- the Redis client over TLS against real redis-server --tls-port
 * processes with certificates the test makes (openssl): the right CA decides, with a
 * password and a database too; a wrong CA, an expired certificate, a name that does not
 * match, a server that wants a client certificate we do not send: each is a TLS failure
 * with OpenSSL's reason on the node, counted, and the decision gets SLUICE_ESTORE;
 * verify: false connects anyway; a deep pipeline crosses TLS records and partial writes
 * and every decision is answered in order.
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "core/loop.h"
#include "store/redis/redis.h"
#include "redis_conn_t.h"
#include "sluice.h"
#include "t.h"

#define PASS "hunter2-tls-pass"

static char g_dir[300];
static int g_port, g_expired_port, g_mtls_port;
static sluice_limiter *g_lim;
static sluice_clock *g_clk;

typedef struct cli {
    sl_loop loop;
    sl_redis *r;
} cli;

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

static sl_redis_opts tls_opts(int port, const char *ca) {
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", port);
    o.timeout_ns = 500 * SLUICE_NS_PER_MS;
    o.time_mode = SL_REDIS_TIME_CALLER;
    o.cache_slots = 1;
    o.backoff_max_ns = 50 * SLUICE_NS_PER_MS;
    o.log = rc_log;
    o.tls.on = true;
    if (ca) snprintf(o.tls.ca_file, sizeof(o.tls.ca_file), "%s/%s", g_dir, ca);
    snprintf(o.password, sizeof(o.password), "%s", PASS);
    return o;
}

static int decide(cli *c, const char *key) {
    sluice_item it = {g_lim, key, strlen(key), 1};
    sluice_clock_advance(g_clk, SLUICE_NS_PER_MS);
    sluice_decision d;
    return sl_redis_decide_sync(c->r, &it, 1, sluice_clock_now(g_clk), &d);
}

static void right_ca(void) {
    sl_redis_opts o = tls_opts(g_port, "ca.crt");
    o.db = 2;
    cli c;
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    T_EQ_U(atomic_load(&sl_redis_stats_get(c.r)->tls_failures), 0);
    cli_close(&c);
    /* the name checked is the one given (SNI too), not only the address */
    o = tls_opts(g_port, "ca.crt");
    snprintf(o.tls.server_name, sizeof(o.tls.server_name), "localhost");
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    cli_close(&c);
    /* IPv6 and a host name, checked against the certificate's IP and DNS names */
    o = tls_opts(g_port, "ca.crt");
    snprintf(o.seeds, sizeof(o.seeds), "[::1]:%d", g_port);
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    cli_close(&c);
    o = tls_opts(g_port, "ca.crt");
    snprintf(o.seeds, sizeof(o.seeds), "localhost:%d", g_port);
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    cli_close(&c);
}

/* Refused at the TLS layer: not ready, decisions fail, the reason is on the node. */
static void expect_tls_failure(const sl_redis_opts *o, int port, const char *words) {
    cli c;
    rc_loglen = 0;
    T_CHECK(!cli_open(&c, o));
    if (c.r == NULL) {
        T_FAIL("no client");
        return;
    }
    sl_redis_run(c.r, 100);
    T_EQ_I(decide(&c, "k"), SLUICE_ESTORE);
    const sl_redis_stats *st = sl_redis_stats_get(c.r);
    T_CHECK(atomic_load(&st->tls_failures) >= 2);
    T_EQ_U(atomic_load(&st->auth_failures), 0);
    sl_redis_node_health h;
    T_EQ_I(sl_redis_health(c.r, &h, 1), 1);
    char addr[40];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    if (strstr(h.last_error, addr) == NULL || strstr(h.last_error, words) == NULL)
        T_FAIL("error '%s' lacks '%s' or '%s'", h.last_error, addr, words);
    T_CHECK(h.tls_failures >= 2);
    if (strstr(rc_logbuf, "hunter2") != NULL) T_FAIL("the log shows the password: %s", rc_logbuf);
    printf("     node error: %s\n", h.last_error);
    cli_close(&c);
}

static void refused(void) {
    sl_redis_opts o = tls_opts(g_port, "other-ca.crt");
    /* (redis sends its CA with the chain: OpenSSL names the untrusted root) */
    expect_tls_failure(&o, g_port, "certificate verify failed: self-signed certificate in certificate chain");
    o = tls_opts(g_expired_port, "ca.crt");
    expect_tls_failure(&o, g_expired_port, "certificate verify failed: certificate has expired");
    o = tls_opts(g_port, "ca.crt");
    snprintf(o.tls.server_name, sizeof(o.tls.server_name), "redis.example.com");
    expect_tls_failure(&o, g_port, "hostname mismatch");
    o = tls_opts(g_mtls_port, "ca.crt"); /* no client certificate */
    expect_tls_failure(&o, g_mtls_port, "certificate required");
    /* the system's trust store does not know our CA either */
    o = tls_opts(g_port, NULL);
    expect_tls_failure(&o, g_port, "certificate verify failed");
    /* plain text to a TLS port: the server drops it (not a TLS failure: an I/O one) */
    o = tls_opts(g_port, NULL);
    o.tls.on = false;
    cli c;
    T_CHECK(!cli_open(&c, &o));
    if (c.r) T_EQ_I(decide(&c, "k"), SLUICE_ESTORE);
    cli_close(&c);
}

static void client_certificate(void) {
    sl_redis_opts o = tls_opts(g_mtls_port, "ca.crt");
    snprintf(o.tls.cert_file, sizeof(o.tls.cert_file), "%s/client.crt", g_dir);
    snprintf(o.tls.key_file, sizeof(o.tls.key_file), "%s/client.key", g_dir);
    cli c;
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    cli_close(&c);
    /* a key that is not the certificate's: refused before connecting */
    snprintf(o.tls.key_file, sizeof(o.tls.key_file), "%s/server.key", g_dir);
    char err[300];
    T_EQ_I(sl_redis_opts_check(&o, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "client key") != NULL);
    int e = 0;
    T_CHECK(sl_redis_create(&c.loop, &o, &e) == NULL);
}

static void no_verification(void) {
    sl_redis_opts o = tls_opts(g_expired_port, "other-ca.crt");
    o.tls.insecure = true;
    cli c;
    T_CHECK(cli_open(&c, &o));
    T_EQ_I(decide(&c, "k"), SLUICE_OK);
    cli_close(&c);
}

static long outstanding, answered_ok;
static void count_cb(void *ud, int rc, const sl_sresult *d) {
    (void)d;
    long *order = ud;
    (void)order;
    outstanding--;
    if (rc == SLUICE_OK) answered_ok++;
}

/* 5000 decisions in flight at once: about 1 MB of commands leave through TLS records
 * and partial writes; every one is answered. */
static void deep_pipeline(void) {
    sl_redis_opts o = tls_opts(g_port, "ca.crt");
    o.max_pending = 8192;
    o.timeout_ns = 10 * SLUICE_NS_PER_S;
    cli c;
    if (!cli_open(&c, &o)) {
        T_FAIL("not ready");
        cli_close(&c);
        return;
    }
    outstanding = answered_ok = 0;
    sluice_time now = sluice_clock_now(g_clk);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "deep-%d", i);
        sl_sitem it = {.lim = g_lim, .key = key, .key_len = strlen(key), .cost = 1};
        outstanding++;
        T_EQ_I(sl_redis_decide(c.r, &it, 1, 0, now, count_cb, NULL), SLUICE_OK);
    }
    sl_redis_flush(c.r);
    for (int i = 0; i < 2000 && outstanding > 0; i++) sl_loop_poll(&c.loop, 5);
    T_EQ_I(outstanding, 0);
    T_EQ_I(answered_ok, 5000);
    T_EQ_U(atomic_load(&sl_redis_stats_get(c.r)->errors), 0);
    cli_close(&c);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    int err = 0;
    sluice_limit_spec sp = {.algo = SLUICE_GCRA, .name = "tls", .limit = 1000000, .period_ns = SLUICE_NS_PER_S};
    g_lim = sluice_limiter_create(&sp, &err, NULL, 0);
    g_clk = sluice_clock_create_manual(INT64_C(1764000000000000000));
    if (!rc_certs(g_dir, sizeof(g_dir))) {
        T_FAIL("openssl could not make the certificates");
        return T_DONE();
    }
    char ports[3][16], f[6][400];
    snprintf(f[0], sizeof(f[0]), "%s/server.crt", g_dir);
    snprintf(f[1], sizeof(f[1]), "%s/server.key", g_dir);
    snprintf(f[2], sizeof(f[2]), "%s/ca.crt", g_dir);
    snprintf(f[3], sizeof(f[3]), "%s/expired.crt", g_dir);
    g_port = rc_port();
    snprintf(ports[0], sizeof(ports[0]), "%d", g_port);
    const char *a1[] = {"--port", "0", "--tls-port", ports[0], "--tls-cert-file", f[0], "--tls-key-file", f[1],
                        "--tls-ca-cert-file", f[2], "--tls-auth-clients", "no", "--requirepass", PASS, NULL};
    if (rc_start(g_port, a1) < 0) T_FAIL("redis-server --tls-port did not start");
    g_expired_port = rc_port();
    snprintf(ports[1], sizeof(ports[1]), "%d", g_expired_port);
    const char *a2[] = {"--port", "0", "--tls-port", ports[1], "--tls-cert-file", f[3], "--tls-key-file", f[1],
                        "--tls-ca-cert-file", f[2], "--tls-auth-clients", "no", "--requirepass", PASS, NULL};
    if (rc_start(g_expired_port, a2) < 0) T_FAIL("redis-server with an expired certificate did not start");
    g_mtls_port = rc_port();
    snprintf(ports[2], sizeof(ports[2]), "%d", g_mtls_port);
    const char *a3[] = {"--port", "0", "--tls-port", ports[2], "--tls-cert-file", f[0], "--tls-key-file", f[1],
                        "--tls-ca-cert-file", f[2], "--tls-auth-clients", "yes", "--requirepass", PASS, NULL};
    if (rc_start(g_mtls_port, a3) < 0) T_FAIL("redis-server --tls-auth-clients yes did not start");
    T_RUN(right_ca);
    T_RUN(refused);
    T_RUN(client_certificate);
    T_RUN(no_verification);
    T_RUN(deep_pipeline);
    sluice_limiter_destroy(g_lim);
    sluice_clock_destroy(g_clk);
    rt_kill_all();
    return T_DONE();
}
