/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_config.c -- the Redis store's connection settings in the config file
 * (src/config/store_redis.c): credentials from the file, a password file or the
 * environment, db, tls and sentinel sections read into sl_settings; mistakes are errors
 * with line:col that never show a password; these fields are refused on a memory store.
 */
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>

#include "config/config.h"
#include "t.h"

static sl_diag_list DL;
static const char *TAIL = "policies: []\n";

static sl_config *load(const char *store, bool want_ok) {
    char yaml[4096];
    snprintf(yaml, sizeof(yaml), "%s%s", store, TAIL);
    sl_config *cfg = NULL;
    int rc = sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &cfg, &DL);
    char line[600];
    for (size_t i = 0; i < DL.n; i++) {
        sl_diag_format(&DL, i, line, sizeof(line));
        if (strstr(line, "hunter2") != NULL) T_FAIL("a diagnostic shows the password: %s", line);
        if (want_ok) fprintf(stderr, "  %s\n", line);
    }
    if (want_ok && rc != SLUICE_OK) T_FAIL("did not load:\n%s", store);
    if (!want_ok && rc == SLUICE_OK) T_FAIL("loaded:\n%s", store);
    return cfg;
}

static void err_is(const char *store, const char *want) {
    sl_config *cfg = load(store, false);
    if (cfg) sl_config_destroy(cfg);
    char line[600], first[600] = "";
    for (size_t i = 0; i < DL.n; i++) {
        sl_diag_format(&DL, i, line, sizeof(line));
        if (i == 0) snprintf(first, sizeof(first), "%s", line);
        if (strstr(line, want) != NULL) return;
    }
    T_FAIL("no diagnostic '%s' (first: %s)", want, first);
}

static void fields(void) {
    sl_config *cfg = load("store:\n"
                          "  type: redis\n"
                          "  addr: 127.0.0.1:6379\n"
                          "  username: alice\n"
                          "  password: hunter2\n"
                          "  db: 5\n"
                          "  tls:\n"
                          "    ca_file: /etc/ca.pem\n"
                          "    cert_file: /etc/client.pem\n"
                          "    key_file: /etc/client.key\n"
                          "    server_name: redis.internal\n"
                          "    verify: false\n",
                          true);
    if (cfg == NULL) return;
    const sl_redis_conn_cfg *c = &sl_config_settings(cfg)->store.redis;
    T_EQ_S(c->username, "alice");
    T_EQ_S(c->password, "hunter2");
    T_EQ_U(c->db, 5);
    T_CHECK(c->tls && c->tls_insecure);
    T_EQ_S(c->tls_ca_file, "/etc/ca.pem");
    T_EQ_S(c->tls_cert_file, "/etc/client.pem");
    T_EQ_S(c->tls_key_file, "/etc/client.key");
    T_EQ_S(c->tls_server_name, "redis.internal");
    sl_config_destroy(cfg);
    cfg = load("store:\n  type: redis\n  addr: h:1\n  tls: true\n", true);
    if (cfg) {
        T_CHECK(sl_config_settings(cfg)->store.redis.tls);
        T_CHECK(!sl_config_settings(cfg)->store.redis.tls_insecure); /* verification by default */
        sl_config_destroy(cfg);
    }
    cfg = load("store:\n  type: redis\n  addr: h:1\n", true);
    if (cfg) {
        T_CHECK(!sl_config_settings(cfg)->store.redis.tls);
        T_EQ_S(sl_config_settings(cfg)->store.redis.password, "");
        sl_config_destroy(cfg);
    }
}

static void password_sources(void) {
    char path[64] = "/tmp/sluice-pw-XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    T_CHECK(write(fd, "hunter2\n", 8) == 8);
    close(fd);
    char store[300];
    snprintf(store, sizeof(store), "store:\n  type: redis\n  addr: h:1\n  password_file: %s\n", path);
    sl_config *cfg = load(store, true);
    if (cfg) {
        T_EQ_S(sl_config_settings(cfg)->store.redis.password, "hunter2"); /* newline dropped */
        sl_config_destroy(cfg);
    }
    setenv("SLUICE_TEST_REDIS_PW", "hunter2", 1);
    cfg = load("store:\n  type: redis\n  addr: h:1\n  password_env: SLUICE_TEST_REDIS_PW\n", true);
    if (cfg) {
        T_EQ_S(sl_config_settings(cfg)->store.redis.password, "hunter2");
        sl_config_destroy(cfg);
    }
    err_is("store:\n  type: redis\n  addr: h:1\n  password_env: SLUICE_TEST_NOT_SET_X\n",
           "4:17: environment variable SLUICE_TEST_NOT_SET_X (password_env) is not set");
    err_is("store:\n  type: redis\n  addr: h:1\n  password_file: /nonexistent/pw\n",
           "4:18: cannot read password_file '/nonexistent/pw'");
    err_is("store:\n  type: redis\n  addr: h:1\n  password_file: /dev/zero\n", "not a regular file");
    err_is("store:\n  type: redis\n  addr: h:1\n  password_file: /tmp\n", "not a regular file");
    snprintf(store, sizeof(store), "store:\n  type: redis\n  addr: h:1\n  password: x\n  password_file: %s\n", path);
    err_is(store, "5:18: store: give one of password, password_file or password_env");
    /* a file of two lines is not a password (the message shows neither line) */
    fd = open(path, O_WRONLY | O_TRUNC);
    T_CHECK(write(fd, "hunter2\nhunter2\n", 16) == 16);
    close(fd);
    snprintf(store, sizeof(store), "store:\n  type: redis\n  addr: h:1\n  password_file: %s\n", path);
    err_is(store, "holds more than one line");
    unlink(path);
}

static void sentinel(void) {
    sl_config *cfg = load("store:\n"
                          "  type: redis\n"
                          "  password: hunter2\n"
                          "  sentinel:\n"
                          "    master: mymaster\n"
                          "    addrs: [127.0.0.1:26379, '[::1]:26380', sentinel-3]\n"
                          "    username: sen\n"
                          "    password: hunter2\n",
                          true);
    if (cfg) {
        const sl_redis_conn_cfg *c = &sl_config_settings(cfg)->store.redis;
        T_EQ_S(c->sentinel_master, "mymaster");
        T_EQ_S(c->sentinel_addrs, "127.0.0.1:26379,[::1]:26380,sentinel-3:26379");
        T_EQ_S(c->sentinel_username, "sen");
        T_EQ_S(c->sentinel_password, "hunter2");
        sl_config_destroy(cfg);
    }
    cfg = load("store:\n  type: redis\n  sentinel: { master: m, addrs: 'a:1, b:2' }\n", true);
    if (cfg) {
        T_EQ_S(sl_config_settings(cfg)->store.redis.sentinel_addrs, "a:1,b:2");
        sl_config_destroy(cfg);
    }
    err_is("store:\n  type: redis\n  sentinel: { addrs: [a:1] }\n", "3:13: sentinel needs master");
    err_is("store:\n  type: redis\n  sentinel: { master: m }\n", "3:13: sentinel needs addrs");
    err_is("store:\n  type: redis\n  sentinel: { master: m, addrs: ['::1:5'] }\n", "bad sentinel address '::1:5'");
    err_is("store:\n  type: redis\n  sentinel: { master: m, addrs: [a:0] }\n", "bad sentinel address 'a:0'");
    err_is("store:\n  type: redis\n  addr: h:1\n  sentinel: { master: m, addrs: [a:1] }\n",
           "3:9: addr does not apply with sentinel");
    err_is("store:\n  type: redis-cluster\n  addr: h:1\n  sentinel: { master: m, addrs: [a:1] }\n",
           "4:13: sentinel does not apply to a redis-cluster store");
    err_is("store:\n  type: redis\n  sentinel: { master: m, addrs: [a:1], bogus: 1 }\n", "unknown field 'bogus'");
}

static void mistakes(void) {
    err_is("store:\n  type: redis-cluster\n  addr: h:1\n  db: 2\n", "4:7: a Redis Cluster has only database 0");
    err_is("store:\n  type: redis\n  addr: h:1\n  db: lots\n", "4:7: bad number 'lots'");
    err_is("store:\n  type: redis\n  addr: h:1\n  tls: { verify: maybe }\n", "bad boolean 'maybe'");
    err_is("store:\n  type: redis\n  addr: h:1\n  tls: { key_file: /k }\n", "tls.key_file needs tls.cert_file");
    err_is("store:\n  type: redis\n  addr: h:1\n  tls: { ca: /x }\n", "unknown field 'ca'");
    err_is("store:\n  type: memory\n  password: hunter2\n",
           "3:13: field 'password' does not apply to a memory store");
    err_is("store:\n  type: memory\n  tls: true\n", "field 'tls' does not apply to a memory store");
    err_is("store:\n  type: redis\n  addr: h:1\n  passwd: x\n", "unknown field 'passwd'");
}

int main(void) {
    T_RUN(fields);
    T_RUN(password_sources);
    T_RUN(sentinel);
    T_RUN(mistakes);
    return T_DONE();
}
