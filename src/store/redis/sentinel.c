/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sentinel.c -- the primary behind sentinels (see sentinel.h). A session is one
 * connection to one sentinel: AUTH with the sentinel's own credentials, SENTINEL
 * get-master-addr-by-name, then SUBSCRIBE +switch-master on the same connection (RESP2
 * allows the query before the subscription, and one connection per client is enough).
 * Sentinels are tried in the configured order; a session that fails moves to the next.
 *
 * Why subscribe and not poll: a failover is announced by +switch-master the moment the
 * sentinels agree, so decisions resume within a reconnection (about a millisecond on a
 * LAN) instead of a polling period; polling every 100 ms would add 10 queries per second
 * per worker forever. A message lost while our sentinel connection was down is covered
 * by the next session's query, and by the client: it verifies ROLE on every connection
 * to the primary, and asks again (sl_sentinel_refresh) whenever the primary refuses
 * writes, answers ROLE with "slave" or cannot be reached.
 */
#include "store/redis/sentinel.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_SENTINELS 16
#define CONNECT_NS (1000 * SLUICE_NS_PER_MS) /* a session must answer within this */
#define REFRESH_GAP_NS (100 * SLUICE_NS_PER_MS)
#define BACKOFF_MAX_NS (1000 * SLUICE_NS_PER_MS)

struct sl_sentinel {
    sl_loop *loop;
    const sl_redis_opts *o;
    sl_rconn_tls *tls;
    pthread_mutex_t *mu;
    sl_sentinel_fn fn;
    void *ud;
    struct {
        char host[SL_REDIS_HOST_MAX];
        int port;
    } addr[MAX_SENTINELS];
    int n, cur;
    sl_rconn *c;
    bool answered;       /* this session's query was answered */
    unsigned fails;      /* sessions in a row that failed */
    int64_t started;     /* when this session started (monotonic ns) */
    int64_t next_at;     /* start a session then (0: none planned) */
    int tfd;
    sl_io tio;
    /* health (under mu) */
    int state;
    char err[200];
    uint64_t auth_failures, tls_failures;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_S + ts.tv_nsec;
}

/* The timer watches two instants: the next session's start, and the answer the current
 * session owes (a sentinel that accepts and never answers is left after CONNECT_NS). */
static void rearm(sl_sentinel *s) {
    int64_t t = s->next_at;
    if (s->c != NULL && !s->answered && (t == 0 || s->started + CONNECT_NS < t)) t = s->started + CONNECT_NS;
    struct itimerspec its = {0};
    if (t != 0) {
        its.it_value.tv_sec = t / SLUICE_NS_PER_S;
        its.it_value.tv_nsec = t % SLUICE_NS_PER_S;
    }
    timerfd_settime(s->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void plan(sl_sentinel *s, int64_t at) {
    if (s->next_at == 0 || at < s->next_at) s->next_at = at;
    rearm(s);
}

static void set_health(sl_sentinel *s, int state, const char *err) {
    pthread_mutex_lock(s->mu);
    s->state = state;
    if (err != NULL) snprintf(s->err, sizeof(s->err), "%.199s", err);
    pthread_mutex_unlock(s->mu);
}

/* Ends the session (no callbacks) and plans the next one on the next sentinel: at once
 * while some sentinel has not been tried, then with a growing pause. */
static void next_session(sl_sentinel *s) {
    if (s->c != NULL) {
        sl_rconn_close(s->c);
        s->c = NULL;
    }
    s->fails++;
    s->cur = (s->cur + 1) % s->n;
    int64_t wait = SLUICE_NS_PER_MS;
    if (s->fails >= (unsigned)s->n) {
        unsigned rounds = s->fails / (unsigned)s->n;
        wait = 50 * SLUICE_NS_PER_MS << (rounds > 5 ? 5 : rounds);
        if (wait > BACKOFF_MAX_NS) wait = BACKOFF_MAX_NS;
    }
    set_health(s, 0, NULL);
    plan(s, now_ns() + wait);
}

static void on_query(void *owner, redisReply *rep, void *priv) {
    (void)priv;
    sl_sentinel *s = owner;
    if (rep == NULL) return; /* the connection failed: on_state moves on */
    char msg[200];
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
        rep->element[1]->type == REDIS_REPLY_STRING && rep->element[0]->len < SL_REDIS_HOST_MAX) {
        int port = atoi(rep->element[1]->str);
        if (port > 0 && port <= 65535) {
            s->answered = true;
            s->fails = 0;
            set_health(s, 2, "");
            s->fn(s->ud, rep->element[0]->str, port);
            return;
        }
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof(msg), "SENTINEL get-master-addr-by-name: %.150s", rep->str);
        sl_rconn_fail(s->c, strncmp(rep->str, "NOAUTH", 6) == 0 ? SL_CONN_EAUTH : SL_CONN_ESETUP, msg);
    } else {
        snprintf(msg, sizeof(msg), "does not know a primary named '%.60s'", s->o->master);
        sl_rconn_fail(s->c, SL_CONN_ESETUP, msg);
    }
}

/* +switch-master: "<name> <old ip> <old port> <new ip> <new port>". */
static void on_message(void *owner, redisReply *rep, void *priv) {
    (void)priv;
    sl_sentinel *s = owner;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3) return;
    const redisReply *kind = rep->element[0], *text = rep->element[2];
    if (kind->type != REDIS_REPLY_STRING || strcmp(kind->str, "message") != 0 || text->type != REDIS_REPLY_STRING)
        return;
    char name[128], oldh[SL_REDIS_HOST_MAX], newh[SL_REDIS_HOST_MAX];
    int oldp, newp;
    if (sscanf(text->str, "%127s %63s %d %63s %d", name, oldh, &oldp, newh, &newp) != 5) return;
    if (strcmp(name, s->o->master) != 0 || newp <= 0 || newp > 65535) return;
    s->fn(s->ud, newh, newp);
}

static void on_state(void *owner, sl_rconn *c, bool up, sl_rconn_why why, const char *msg) {
    sl_sentinel *s = owner;
    if (c != s->c) return;
    if (up) {
        set_health(s, 1, NULL);
        return;
    }
    pthread_mutex_lock(s->mu);
    snprintf(s->err, sizeof(s->err), "sentinel %.180s", msg);
    if (why == SL_CONN_EAUTH) s->auth_failures++;
    if (why == SL_CONN_ETLS) s->tls_failures++;
    pthread_mutex_unlock(s->mu);
    if (s->o->log != NULL) {
        char line[260];
        snprintf(line, sizeof(line), "sentinel %.240s", msg);
        s->o->log(s->o->log_ud, line);
    }
    next_session(s);
}

static void start_session(sl_sentinel *s) {
    if (s->c != NULL) sl_rconn_close(s->c);
    s->c = NULL;
    s->answered = false;
    s->started = now_ns();
    sl_rconn_opts co = {.host = s->addr[s->cur].host, .port = s->addr[s->cur].port, .tls = s->tls,
                       .username = s->o->sentinel_username, .password = s->o->sentinel_password};
    char err[256];
    s->c = sl_rconn_open(s->loop, &co, s, on_state, err, sizeof(err));
    if (s->c == NULL) {
        set_health(s, 0, err);
        next_session(s);
        return;
    }
    set_health(s, 1, NULL);
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->o->master};
    size_t lens[3] = {8, 23, strlen(s->o->master)};
    if (sl_rconn_command(s->c, on_query, NULL, 3, argv, lens) != 0 ||
        sl_rconn_subscribe(s->c, "+switch-master", on_message, NULL) != 0) {
        next_session(s);
        return;
    }
    rearm(s);
}

static void on_timer(void *ud, uint32_t ev) {
    (void)ev;
    sl_sentinel *s = ud;
    uint64_t x;
    while (read(s->tfd, &x, sizeof(x)) > 0) {
    }
    int64_t t = now_ns();
    if (s->c != NULL && !s->answered && t >= s->started + CONNECT_NS) {
        sl_rconn_fail(s->c, SL_CONN_EIO, "no answer within 1 s"); /* -> on_state -> next */
        t = now_ns();
    }
    if (s->next_at != 0 && t >= s->next_at) {
        s->next_at = 0;
        start_session(s);
    } else {
        rearm(s);
    }
}

sl_sentinel *sl_sentinel_create(sl_loop *loop, const sl_redis_opts *o, sl_rconn_tls *tls, pthread_mutex_t *mu,
                                sl_sentinel_fn fn, void *ud) {
    sl_sentinel *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->loop = loop, s->o = o, s->tls = tls, s->mu = mu, s->fn = fn, s->ud = ud;
    s->tfd = -1;
    /* seeds: "h:p,[v6]:p,..." as url.c writes them */
    const char *p = o->seeds;
    while (*p && s->n < MAX_SENTINELS) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *colon = NULL;
        for (size_t i = 0; i < len; i++)
            if (p[i] == ':') colon = p + i;
        if (colon == NULL) goto fail;
        const char *hs = p, *he = colon;
        if (*hs == '[') hs++, he--;
        if (he <= hs || (size_t)(he - hs) >= SL_REDIS_HOST_MAX) goto fail;
        memcpy(s->addr[s->n].host, hs, (size_t)(he - hs));
        s->addr[s->n].host[he - hs] = '\0';
        s->addr[s->n].port = atoi(colon + 1);
        if (s->addr[s->n].port <= 0 || s->addr[s->n].port > 65535) goto fail;
        s->n++;
        if (e == NULL) break;
        p = e + 1;
    }
    if (s->n == 0) goto fail;
    s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->tfd < 0) goto fail;
    s->tio = (sl_io){s->tfd, on_timer, s};
    if (sl_loop_add(loop, &s->tio, EPOLLIN) != 0) {
        close(s->tfd);
        s->tfd = -1;
        goto fail;
    }
    start_session(s);
    return s;
fail:
    free(s);
    return NULL;
}

void sl_sentinel_destroy(sl_sentinel *s) {
    if (s == NULL) return;
    if (s->c != NULL) sl_rconn_close(s->c);
    if (s->tfd >= 0) {
        sl_loop_del(s->loop, &s->tio);
        close(s->tfd);
    }
    free(s);
}

void sl_sentinel_refresh(sl_sentinel *s) {
    if (s == NULL) return;
    int64_t at = s->started + REFRESH_GAP_NS, t = now_ns();
    if (at < t) at = t;
    plan(s, at);
}

void sl_sentinel_health(const sl_sentinel *s, sl_redis_node_health *out) {
    memset(out, 0, sizeof(*out));
    const char *h = s->addr[s->cur].host;
    snprintf(out->addr, sizeof(out->addr), strchr(h, ':') ? "[%s]:%d" : "%s:%d", h, s->addr[s->cur].port);
    out->state = s->state;
    out->auth_failures = s->auth_failures;
    out->tls_failures = s->tls_failures;
    memcpy(out->last_error, s->err, sizeof(out->last_error));
}
