/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_url.c -- store URLs as people write them (src/store/redis/url.c): every form of
 * docs/redis.md read into the client's options, bad URLs refused with the column of the
 * problem and without repeating a password, the config file's settings under the URL,
 * and descriptions that never carry a credential.
 */
#include "config/config.h"
#include "store/redis/redis.h"
#include "t.h"

static sl_redis_opts parse_ok(const char *url) {
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    char err[300] = "";
    int rc = sl_redis_url_parse(url, &o, err, sizeof(err));
    if (rc != SLUICE_OK) T_FAIL("%s refused: %s", url, err);
    return o;
}

static void good_urls(void) {
    static const struct {
        const char *url, *seeds, *user, *pass, *unix_path, *master;
        unsigned db;
        bool tls, cluster, sentinel;
    } ok[] = {
        {"redis://127.0.0.1:6379", "127.0.0.1:6379", "", "", "", "", 0, false, false, false},
        {"redis://localhost", "localhost:6379", "", "", "", "", 0, false, false, false},
        {"redis://localhost/", "localhost:6379", "", "", "", "", 0, false, false, false},
        {"redis://h:7000/3", "h:7000", "", "", "", "", 3, false, false, false},
        {"redis://:secret@127.0.0.1:16379", "127.0.0.1:16379", "", "secret", "", "", 0, false, false, false},
        {"redis://alice:s3cr3t@h:1/15", "h:1", "alice", "s3cr3t", "", "", 15, false, false, false},
        {"redis://alice@h", "h:6379", "alice", "", "", "", 0, false, false, false},
        {"redis://al%40ice:p%3Aw%2F%25@h:2", "h:2", "al@ice", "p:w/%", "", "", 0, false, false, false},
        {"redis://u:p@ss:w@rd@h:3", "h:3", "u", "p@ss:w@rd", "", "", 0, false, false, false},
        {"redis://u:a/b@h:3", "h:3", "u", "a/b", "", "", 0, false, false, false},
        {"REDIS://h:4", "h:4", "", "", "", "", 0, false, false, false},
        {"rediss://h.example.com:6380", "h.example.com:6380", "", "", "", "", 0, true, false, false},
        {"redis://h:5?tls=1", "h:5", "", "", "", "", 0, true, false, false},
        {"redis://[::1]:6379", "[::1]:6379", "", "", "", "", 0, false, false, false},
        {"redis://[::1]", "[::1]:6379", "", "", "", "", 0, false, false, false},
        {"rediss://u:p@[2001:db8::1]:7", "[2001:db8::1]:7", "u", "p", "", "", 0, true, false, false},
        {"redis://h:6?db=9", "h:6", "", "", "", "", 9, false, false, false},
        {"unix:///run/redis.sock", "", "", "", "/run/redis.sock", "", 0, false, false, false},
        {"unix:/run/redis.sock?db=2", "", "", "", "/run/redis.sock", "", 2, false, false, false},
        {"redis+unix:///tmp/r%20x.sock", "", "", "", "/tmp/r x.sock", "", 0, false, false, false},
        {"redis+unix://:pw@/tmp/r.sock?db=1", "", "", "pw", "/tmp/r.sock", "", 1, false, false, false},
        {"redis-cluster://a:1,b:2,[::1]:3", "a:1,b:2,[::1]:3", "", "", "", "", 0, false, true, false},
        {"redis-cluster://:pw@a:1", "a:1", "", "pw", "", "", 0, false, true, false},
        {"rediss-cluster://a:1,b:2", "a:1,b:2", "", "", "", "", 0, true, true, false},
        {"redis-cluster://a:1?tls=true", "a:1", "", "", "", "", 0, true, true, false},
        {"redis-sentinel://s1:26379,s2/mymaster", "s1:26379,s2:26379", "", "", "", "mymaster", 0, false, false, true},
        {"redis-sentinel://u:p@s1:1/m/4", "s1:1", "u", "p", "", "m", 4, false, false, true},
        {"rediss-sentinel://s:1/m?db=2", "s:1", "", "", "", "m", 2, true, false, true},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        sl_redis_opts o = parse_ok(ok[i].url);
        T_EQ_S(o.seeds, ok[i].seeds);
        T_EQ_S(o.username, ok[i].user);
        T_EQ_S(o.password, ok[i].pass);
        T_EQ_S(o.unix_path, ok[i].unix_path);
        T_EQ_S(o.master, ok[i].master);
        T_EQ_U(o.db, ok[i].db);
        T_EQ_I(o.tls.on, ok[i].tls);
        T_EQ_I(o.cluster, ok[i].cluster);
        T_EQ_I(o.sentinel, ok[i].sentinel);
        T_CHECK(sl_redis_url_is_redis(ok[i].url));
    }
}

static void query_options(void) {
    sl_redis_opts o = parse_ok("rediss://h:1?timeout_ms=50&time=local&lease=10&tls_verify=0"
                               "&tls_ca_file=/etc/ca%20x.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem"
                               "&tls_server_name=redis.internal");
    T_EQ_I(o.timeout_ns, 50 * SLUICE_NS_PER_MS);
    T_EQ_I(o.time_mode, SL_REDIS_TIME_CALLER);
    T_EQ_U(o.lease_slice, 10);
    T_CHECK(o.tls.on && o.tls.insecure);
    T_EQ_S(o.tls.ca_file, "/etc/ca x.pem");
    T_EQ_S(o.tls.cert_file, "/c.pem");
    T_EQ_S(o.tls.key_file, "/k.pem");
    T_EQ_S(o.tls.server_name, "redis.internal");
    o = parse_ok("rediss://h?ca_file=/a&cert_file=/b&key_file=/c&sni=n&verify=true");
    T_CHECK(!o.tls.insecure);
    T_EQ_S(o.tls.ca_file, "/a");
    T_EQ_S(o.tls.server_name, "n");
    o = parse_ok("redis-sentinel://s:1/m?sentinel_password=s%26p&sentinel_username=sen");
    T_EQ_S(o.sentinel_password, "s&p");
    T_EQ_S(o.sentinel_username, "sen");
    o = parse_ok("redis://h?time=redis");
    T_EQ_I(o.time_mode, SL_REDIS_TIME_SERVER);
    /* the old forms still mean what they meant */
    o = parse_ok("redis://127.0.0.1:6379?time=local&timeout_ms=30");
    T_EQ_I(o.time_mode, SL_REDIS_TIME_CALLER);
    T_EQ_I(o.timeout_ns, 30 * SLUICE_NS_PER_MS);
}

/* A refused URL: the message starts with "column N:" and contains `want`. */
static void bad(const char *url, int col, const char *want) {
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    char err[300] = "";
    int rc = sl_redis_url_parse(url, &o, err, sizeof(err));
    if (rc != SLUICE_EINVAL) {
        T_FAIL("%s accepted", url);
        return;
    }
    char head[32];
    snprintf(head, sizeof(head), "column %d: ", col);
    if (strncmp(err, head, strlen(head)) != 0 || strstr(err, want) == NULL)
        T_FAIL("%s: got '%s', want '%s...%s'", url, err, head, want);
    if (strstr(err, "hunter2") != NULL) T_FAIL("%s: the password is in the message: %s", url, err);
}

static void bad_urls(void) {
    bad("http://h:1", 1, "unknown scheme 'http'");
    bad("redis", 1, "unknown scheme");
    bad("redis:h:1", 7, "expected '//'");
    bad("redis://", 9, "missing host");
    bad("redis://:hunter2@", 18, "missing host");
    bad("redis://h:", 11, "missing port");
    bad("redis://h:0", 11, "port 0");
    bad("redis://h:99999", 11, "port too large");
    bad("redis://h:12x", 13, "bad port");
    bad("redis://:hunter2@h:1x", 21, "bad port");
    bad("redis://h a:1", 10, "unexpected ' ' in the host name");
    bad("redis://::1:6379", 9, "IPv6 address must be in brackets");
    bad("redis://[::1:6379", 9, "unclosed '['");
    bad("redis://[zz]:1", 10, "bad IPv6 address");
    bad("redis://[::1]x", 14, "unexpected 'x'");
    bad("redis://a:1,b:2", 12, "names one host");
    bad("redis://h:1/x", 13, "bad database number");
    bad("redis://h:1/2/3", 14, "unexpected path");
    bad("redis://h:1?bogus=1", 13, "unknown option 'bogus'");
    bad("redis://h:1?timeout_ms=0", 24, "timeout_ms 0");
    bad("redis://h:1?timeout_ms", 23, "needs a value");
    bad("redis://h:1?time=sometimes", 18, "bad time");
    bad("redis://h:1?tls=maybe", 17, "bad tls");
    bad("redis://u:hunter%2@h:1", 17, "bad percent escape in the password");
    bad("redis://u:hunter2%00@h:1", 18, "%00");
    bad("redis://h:1#frag", 12, "unexpected '#'");
    bad("redis-cluster://a:1/0", 21, "only database 0");
    bad("redis-cluster://a:1?db=2", 24, "only database 0");
    bad("redis-cluster://a:1,,b:2", 21, "missing host");
    bad("redis-sentinel://s:1", 21, "missing primary name");
    bad("redis-sentinel://s:1/", 22, "missing primary name");
    bad("redis-sentinel://s:1/m/x", 24, "bad database number");
    bad("redis://h:1?sentinel_password=x", 13, "only to redis-sentinel");
    bad("unix://", 8, "absolute socket path");
    bad("unix:///", 8, "missing socket path");
    bad("rediss+unix:///x", 1, "unknown scheme");
    bad("unix:///tmp/x?tls=1", 1, "TLS over a unix socket");
}

static void passwords_and_descriptions(void) {
    T_CHECK(sl_redis_url_has_password("redis://:hunter2@h:1"));
    T_CHECK(sl_redis_url_has_password("redis://u:hunter2@h:1"));
    T_CHECK(sl_redis_url_has_password("redis-sentinel://s/m?sentinel_password=hunter2"));
    T_CHECK(!sl_redis_url_has_password("redis://u@h:1"));
    T_CHECK(!sl_redis_url_has_password("redis://h:1"));
    T_CHECK(!sl_redis_url_has_password("unix:///x"));
    const char *urls[] = {"redis://alice:hunter2@h:1/2", "rediss://:hunter2@h:1",
                          "redis-sentinel://u:hunter2@s:1/m?sentinel_password=hunter2",
                          "redis+unix://:hunter2@/tmp/r.sock", "rediss-cluster://:hunter2@a:1,b:2?tls_verify=0"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        sl_redis_opts o = parse_ok(urls[i]);
        char d[700];
        sl_redis_opts_describe(&o, d, sizeof(d));
        if (strstr(d, "hunter2") != NULL) T_FAIL("description shows the password: %s", d);
        T_CHECK(strstr(d, "password set") != NULL);
    }
    sl_redis_opts o = parse_ok("rediss://alice:hunter2@h:1/2");
    char d[700];
    sl_redis_opts_describe(&o, d, sizeof(d));
    T_EQ_S(d, "redis h:1 db 2 (TLS, user alice, password set)");
    o = parse_ok("redis-sentinel://s1:1,s2:2/mymaster");
    sl_redis_opts_describe(&o, d, sizeof(d));
    T_EQ_S(d, "redis-sentinel primary 'mymaster' via s1:1,s2:2");
    o = parse_ok("unix:///run/redis.sock");
    sl_redis_opts_describe(&o, d, sizeof(d));
    T_EQ_S(d, "redis unix:/run/redis.sock");
}

static int logged;
static char last_log[400];
static void capture(void *ud, const char *line) {
    (void)ud;
    logged++;
    snprintf(last_log, sizeof(last_log), "%s", line);
}

/* The config file's settings, then the URL over them; checks that cannot wait. */
static void configure(void) {
    sl_redis_conn_cfg cs;
    memset(&cs, 0, sizeof(cs));
    snprintf(cs.username, sizeof(cs.username), "cfguser");
    snprintf(cs.password, sizeof(cs.password), "cfgpass");
    cs.db = 3;
    sl_redis_opts o;
    char err[300];
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, "", "127.0.0.1:7000", false, &cs, err, sizeof(err)), SLUICE_OK);
    T_EQ_S(o.seeds, "127.0.0.1:7000");
    T_EQ_S(o.username, "cfguser");
    T_EQ_S(o.password, "cfgpass");
    T_EQ_U(o.db, 3);
    /* the URL's credentials win; what it does not name stays */
    sl_redis_opts_default(&o);
    o.log = capture;
    logged = 0;
    T_EQ_I(sl_redis_opts_configure(&o, "redis://:hunter2@h:1", NULL, false, &cs, err, sizeof(err)), SLUICE_OK);
    T_EQ_S(o.password, "hunter2");
    T_EQ_S(o.username, "cfguser");
    T_EQ_I(logged, 1); /* visible in ps: warned, without the password */
    T_CHECK(strstr(last_log, "ps") != NULL && strstr(last_log, "hunter2") == NULL);
    /* addr forms of the config file */
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, NULL, "unix:/run/r.sock", false, NULL, err, sizeof(err)), SLUICE_OK);
    T_EQ_S(o.unix_path, "/run/r.sock");
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, NULL, "[::1]:7001", false, NULL, err, sizeof(err)), SLUICE_OK);
    T_EQ_S(o.seeds, "[::1]:7001");
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, NULL, "a:1,b:2", true, NULL, err, sizeof(err)), SLUICE_OK);
    T_EQ_S(o.seeds, "a:1,b:2");
    T_CHECK(o.cluster);
    /* sentinel from the config file */
    memset(&cs, 0, sizeof(cs));
    snprintf(cs.sentinel_master, sizeof(cs.sentinel_master), "mymaster");
    snprintf(cs.sentinel_addrs, sizeof(cs.sentinel_addrs), "127.0.0.1:26379,127.0.0.1:26380");
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, "redis:", "", false, &cs, err, sizeof(err)), SLUICE_OK);
    T_CHECK(o.sentinel);
    T_EQ_S(o.seeds, "127.0.0.1:26379,127.0.0.1:26380");
    T_EQ_S(o.master, "mymaster");
    /* refused before connecting: a bad URL (the password not repeated), a cluster with a
     * database, a CA file that is not there */
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, "redis://:hunter2@h:x", NULL, false, NULL, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strncmp(err, "bad store URL: column 20", 24) == 0 && strstr(err, "hunter2") == NULL);
    sl_redis_opts_default(&o);
    memset(&cs, 0, sizeof(cs));
    cs.db = 2;
    T_EQ_I(sl_redis_opts_configure(&o, NULL, "a:1", true, &cs, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "database 0") != NULL);
    sl_redis_opts_default(&o);
    T_EQ_I(sl_redis_opts_configure(&o, "rediss://h:1?tls_ca_file=/nonexistent/ca.pem", NULL, false, NULL, err,
                                   sizeof(err)),
           SLUICE_EINVAL);
    T_CHECK(strstr(err, "/nonexistent/ca.pem") != NULL);
    /* verification off: accepted, warned */
    sl_redis_opts_default(&o);
    o.log = capture;
    logged = 0;
    T_EQ_I(sl_redis_opts_configure(&o, "rediss://h:1?tls_verify=0", NULL, false, NULL, err, sizeof(err)), SLUICE_OK);
    T_EQ_I(logged, 1);
    T_CHECK(strstr(last_log, "verification is off") != NULL);
}

int main(void) {
    T_RUN(good_urls);
    T_RUN(query_options);
    T_RUN(bad_urls);
    T_RUN(passwords_and_descriptions);
    T_RUN(configure);
    return T_DONE();
}
