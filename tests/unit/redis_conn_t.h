/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_conn_t.h -- helpers for the connection tests (auth, TLS, sockets): redis-server
 * started with any arguments (ready when its log says so, at most 5 s; killed with the
 * test as in redis_t.h), certificates made with the openssl command, and a log sink that
 * keeps everything the client reported so tests can look for credentials in it.
 */
#ifndef SL_REDIS_CONN_T_H
#define SL_REDIS_CONN_T_H

#include "redis_t.h"

/* Starts redis-server with `args` (NULL-terminated, after --bind/--save/--appendonly);
 * `port` only names its log. Returns the slot in rt_servers or -1. */
static inline int rc_start(int port, const char *const *args) {
    if (rt_dir[0] == '\0') {
        snprintf(rt_dir, sizeof(rt_dir), "/tmp/sluice-redis-test-XXXXXX");
        if (mkdtemp(rt_dir) == NULL) return -1;
        atexit(rt_kill_all);
    }
    int slot = -1;
    for (int i = 0; i < RT_MAX; i++)
        if (rt_servers[i].pid == 0) {
            slot = i;
            break;
        }
    if (slot < 0) return -1;
    char logf[400];
    snprintf(logf, sizeof(logf), "%s/redis-%d.log", rt_dir, port);
    unlink(logf);
    const char *argv[64];
    int n = 0;
    argv[n++] = "redis-server";
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "::1";
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--appendonly";
    argv[n++] = "no";
    argv[n++] = "--logfile";
    argv[n++] = logf;
    for (int i = 0; args[i] != NULL && n < 62; i++) argv[n++] = args[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (chdir(rt_dir) != 0) _exit(127);
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    rt_servers[slot].pid = pid;
    rt_servers[slot].port = port;
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(logf, "r");
        if (f != NULL) {
            char line[600];
            bool ready = false;
            while (fgets(line, sizeof(line), f))
                if (strstr(line, "Ready to accept connections")) ready = true;
            fclose(f);
            if (ready) return slot;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            rt_servers[slot].pid = 0;
            return -1;
        }
        rt_sleep_ms(10);
    }
    return -1;
}

/* A fresh port (and port + 10000) free on 127.0.0.1. */
static inline int rc_port(void) { return rt_free_port(); }

/* Certificates in rt_dir/tls: ca.crt (our CA), other-ca.crt (a CA nobody used),
 * server.crt/.key (CN localhost, SAN IP:127.0.0.1, IP:::1, DNS:localhost, by ca),
 * expired.crt (the same key, expired yesterday), client.crt/.key (by ca). */
static inline bool rc_certs(char *dir, size_t cap) {
    if (rt_dir[0] == '\0') {
        snprintf(rt_dir, sizeof(rt_dir), "/tmp/sluice-redis-test-XXXXXX");
        if (mkdtemp(rt_dir) == NULL) return false;
        atexit(rt_kill_all);
    }
    snprintf(dir, cap, "%s/tls", rt_dir);
    char cmd[3000];
    snprintf(cmd, sizeof(cmd),
             "set -e; mkdir -p '%s'; cd '%s'; "
             "k() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out $1 2>/dev/null; }; "
             "k ca.key; openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj /CN=sluice-test-ca 2>/dev/null; "
             "k other-ca.key; openssl req -x509 -new -key other-ca.key -out other-ca.crt -days 2 "
             "-subj /CN=other-ca 2>/dev/null; "
             "k server.key; openssl req -new -key server.key -out server.csr -subj /CN=localhost 2>/dev/null; "
             "printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\\n' > server.ext; "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 "
             "-extfile server.ext 2>/dev/null; "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out expired.crt -days -1 "
             "-extfile server.ext 2>/dev/null; "
             "k client.key; openssl req -new -key client.key -out client.csr -subj /CN=sluice-client 2>/dev/null; "
             "printf 'extendedKeyUsage=clientAuth\\n' > client.ext; "
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 "
             "-extfile client.ext 2>/dev/null",
             dir, dir);
    return system(cmd) == 0;
}

/* Everything the client logged, for "the password appears nowhere". */
static char rc_logbuf[16384];
static size_t rc_loglen;
static inline void rc_log(void *ud, const char *line) {
    (void)ud;
    int w = snprintf(rc_logbuf + rc_loglen, sizeof(rc_logbuf) - rc_loglen, "%s\n", line);
    if (w > 0 && (size_t)w < sizeof(rc_logbuf) - rc_loglen) rc_loglen += (size_t)w;
}

/* (redis_t.h's helpers some tests do not call) */
static inline void rc_unused_(void) { (void)rt_start; }

#endif
