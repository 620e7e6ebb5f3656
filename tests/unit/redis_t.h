/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_t.h -- helpers for the Redis store tests: start and stop real redis-server
 * processes on free loopback ports (temporary directory, no persistence, killed with the
 * test through PR_SET_PDEATHSIG and at exit), and a blocking admin connection.
 * Every wait is bounded in time.
 */
#ifndef SL_REDIS_T_H
#define SL_REDIS_T_H

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RT_MAX 8

typedef struct rt_server {
    pid_t pid;
    int port;
} rt_server;

static rt_server rt_servers[RT_MAX];
static char rt_dir[256];
static bool rt_no_function; /* rt_start: FUNCTION renamed away (the client's EVALSHA fallback) */

static void rt_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int rt_port_free(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A port p with p and p + 10000 (the cluster bus) free. */
static int rt_free_port(void) {
    static unsigned seed;
    if (seed == 0) seed = (unsigned)getpid() * 2654435761u;
    for (int i = 0; i < 200; i++) {
        seed = seed * 1103515245u + 12345u;
        int p = 20000 + (int)((seed >> 8) % 20000);
        int taken = 0;
        for (int k = 0; k < RT_MAX; k++)
            if (rt_servers[k].pid && (rt_servers[k].port == p)) taken = 1;
        if (!taken && rt_port_free(p) && rt_port_free(p + 10000)) return p;
    }
    return -1;
}

static void rt_kill_all(void) {
    for (int i = 0; i < RT_MAX; i++)
        if (rt_servers[i].pid > 0) {
            kill(rt_servers[i].pid, SIGKILL);
            waitpid(rt_servers[i].pid, NULL, 0);
            rt_servers[i].pid = 0;
        }
    if (rt_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rt_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", rt_dir);
        rt_dir[0] = '\0';
    }
}

static inline redisContext *rt_connect(int port) {
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* Starts redis-server on `port` (cluster mode when asked); waits until it answers PING
 * (at most 5 s). Returns the slot in rt_servers or -1. */
static int rt_start(int port, int cluster) {
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
    char ports[16], conf[300];
    snprintf(ports, sizeof(ports), "%d", port);
    snprintf(conf, sizeof(conf), "nodes-%d.conf", port);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (chdir(rt_dir) != 0) _exit(127);
        FILE *devnull = freopen("/dev/null", "w", stdout);
        (void)devnull;
        if (cluster)
            execlp("redis-server", "redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", conf,
                   "--cluster-node-timeout", "2000", (char *)NULL);
        else if (rt_no_function) /* a Redis without FUNCTION (Redis 6, managed offerings) */
            execlp("redis-server", "redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--rename-command", "FUNCTION", "", (char *)NULL);
        else
            execlp("redis-server", "redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    rt_servers[slot].pid = pid;
    rt_servers[slot].port = port;
    for (int i = 0; i < 500; i++) {
        redisContext *c = rt_connect(port);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return slot;
        }
        rt_sleep_ms(10);
    }
    return -1;
}

static inline void rt_stop(int slot) {
    if (slot < 0 || rt_servers[slot].pid <= 0) return;
    kill(rt_servers[slot].pid, SIGKILL);
    waitpid(rt_servers[slot].pid, NULL, 0);
    rt_servers[slot].pid = 0;
}

/* One admin command; returns the reply (caller frees) or NULL. */
static inline redisReply *rt_cmd(int port, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline redisReply *rt_cmd(int port, const char *fmt, ...) {
    redisContext *c = rt_connect(port);
    if (c == NULL) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

#endif
