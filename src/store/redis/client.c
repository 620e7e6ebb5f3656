/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c -- the Redis store's client: one per worker, bound to the worker's sl_loop.
 * Each node gets one connection of conn.c (our socket, TLS, handshake; hiredis's reply
 * reader); commands issued during one loop turn are written together (sl_redis_flush,
 * or the next writable event), so concurrent decisions share round trips. With
 * sentinels, node 0 is the primary sentinel.c reports.
 * A decision is split by cluster slot into groups, one EVALSHA each; replies are decoded
 * into the C algorithms' results. Failure handling: a deadline per decision (a timerfd
 * in the same loop), a circuit breaker over consecutive failures, reconnection with
 * exponential backoff, MOVED/ASK/NOSCRIPT recovery, every degraded answer counted.
 *
 * Allocation: requests live in a fixed pool created with the client; a connection's
 * output buffer and callback FIFO grow to the deepest pipeline seen and are reused;
 * hiredis's reader allocates per reply (the reply tree).
 * Cross-slot decisions: every group consumes in its own call; if one rejects, the groups
 * that admitted are refunded by a second call. Between the two calls (one round trip) the
 * refunded units look consumed to other decisions (under-admission, never over-admission);
 * a refund that is lost (Redis fails in between) leaves those units consumed until the
 * window or bucket refills on its own.
 */
#include "store/redis/client_int.h"

void sl_redis_opts_default(sl_redis_opts *o) {
    memset(o, 0, sizeof(*o));
    snprintf(o->seeds, sizeof(o->seeds), "127.0.0.1:6379");
}

/* ---- timer ------------------------------------------------------------------------ */

void sl__redis_arm(sl_redis *r, int64_t at) {
    if (r->armed != 0 && r->armed <= at) return;
    struct itimerspec its = {0};
    if (at <= 0) at = 1;
    its.it_value.tv_sec = at / SLUICE_NS_PER_S;
    its.it_value.tv_nsec = at % SLUICE_NS_PER_S;
    timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    r->armed = at;
}

/* ---- breaker ---------------------------------------------------------------------- */

/* The breaker's state as sl_redis_health shows it (only at a change: rare). */
static void publish_open(sl_redis *r, sl_redis_node *nd, bool open) {
    if (nd->open_pub == open) return;
    pthread_mutex_lock(&r->hmu);
    nd->open_pub = open;
    pthread_mutex_unlock(&r->hmu);
}

void sl__redis_note_ok(sl_redis *r, sl_redis_node *nd) {
    bool was = nd->open_until != 0;
    nd->fails = 0;
    nd->open_until = 0;
    nd->half_open = false;
    if (was) {
        publish_open(r, nd, false);
        update_ready(r);
    }
}

void sl__redis_note_fail(sl_redis *r, sl_redis_node *nd) {
    nd->fails++;
    if (nd->half_open || nd->fails >= r->o.breaker_failures) {
        nd->open_until = mono_now() + r->o.breaker_open_ns;
        nd->half_open = false;
        sl__redis_arm(r, nd->open_until);
        publish_open(r, nd, true);
        update_ready(r);
    }
}

/* The outcome of a group that was handed to a node, for that node's breaker. */
void sl__redis_group_outcome(sl_redis *r, const rq_group *gr, bool ok) {
    if (gr->node < 0 || gr->node >= r->nnodes) return;
    if (ok) sl__redis_note_ok(r, &r->nodes[gr->node]);
    else sl__redis_note_fail(r, &r->nodes[gr->node]);
}

/* Whether a new decision may go to this node now. After the open period, one probe goes
 * through (half-open); its outcome closes or reopens the node's breaker, and if no
 * outcome is ever heard (the node was down, the decision ended elsewhere) another probe
 * goes after one more period. */
bool sl__redis_breaker_allows(sl_redis *r, sl_redis_node *nd) {
    if (nd->open_until == 0) return true;
    int64_t now = mono_now();
    if (now < nd->open_until) return false;
    nd->half_open = true;
    nd->open_until = now + r->o.breaker_open_ns;
    return true;
}

/* ---- timer: deadlines, reconnection, connect timeouts ------------------------------- */

/* Sends the groups whose TRYAGAIN/CLUSTERDOWN pause is over (to the slot's node now:
 * the map may have changed meanwhile); returns the earliest pause still running. */
static int64_t send_retries(sl_redis *r, int64_t t) {
    int64_t next = 0;
    for (unsigned i = 0; i < r->nretries;) {
        retry_ent e = r->retries[i];
        if (e.at > t) {
            if (next == 0 || e.at < next) next = e.at;
            i++;
            continue;
        }
        r->retries[i] = r->retries[--r->nretries];
        rq *q = e.q;
        if (!q->busy || q->gen != e.gen || e.g >= q->ngroups || q->g[e.g].done || q->g[e.g].late) continue;
        sl_redis_node *nd = sl__redis_route(r, q->g[e.g].slot);
        inc(&r->st.cluster_retries);
        if (nd->state == 0 || !sl__redis_send_group(r, q, e.g, nd, false)) {
            inc(&r->st.node_down);
            sl__redis_group_fail(r, q, e.g);
        }
    }
    return next;
}

static void on_timer(void *ud, uint32_t ev) {
    (void)ev;
    sl_redis *r = ud;
    uint64_t x;
    while (read(r->tfd, &x, sizeof(x)) > 0) {
    }
    r->armed = 0;
    int64_t t = mono_now();
    sl__redis_lease_sweep(r, t);
    int64_t next = send_retries(r, t); /* before the deadlines: a retry due sends first */
    sl_dnode *d;
    while ((d = sl_dlist_expired(&r->orphans, t)) != NULL) {
        rq *q = (rq *)((char *)d - offsetof(rq, dl));
        add(&r->st.late_unknown, q->orphans); /* no reply within ORPHAN_NS */
        q->orphans = 0;
        sl__redis_rq_put(r, q);
    }
    while ((d = sl_dlist_expired(&r->deadlines, t)) != NULL) {
        rq *q = (rq *)((char *)d - offsetof(rq, dl));
        sl_dnode_disarm(d);
        if (q->cb != NULL) inc(&r->st.timeouts);
        q->failed = true;
        for (int g = 0; g < q->ngroups; g++) {
            rq_group *gr = &q->g[g];
            if (gr->done) continue;
            sl__redis_group_outcome(r, gr, false); /* the node it waited on */
            gr->done = gr->failed = true;
            if (q->op == 'd' && gr->sent) gr->late = true, q->orphans++;
        }
        q->pending = 0;
        sl__redis_finish(r, q, SLUICE_ESTORE);
    }
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (nd->state == 1 && nd->c != NULL && t >= nd->connect_by)
            sl_rconn_fail(nd->c, SL_CONN_EIO, "connect timed out"); /* -> on_conn_state: down */
        if (nd->state == 0 && nd->c == NULL && t >= nd->retry_at) sl__redis_node_connect(nd);
        int64_t at = nd->state == 0 ? nd->retry_at : nd->state == 1 ? nd->connect_by : 0;
        if (at && (next == 0 || at < next)) next = at;
    }
    sl_dnode *h = r->deadlines.head.next;
    if (h != &r->deadlines.head && (next == 0 || h->deadline_ns < next)) next = h->deadline_ns;
    h = r->orphans.head.next;
    if (h != &r->orphans.head && (next == 0 || h->deadline_ns < next)) next = h->deadline_ns;
    for (int i = 0; i < r->nnodes; i++) {
        int64_t o = r->nodes[i].open_until;
        if (o && (next == 0 || o < next) && o > t) next = o;
    }
    if (r->lease_sweep_at && (next == 0 || r->lease_sweep_at < next)) next = r->lease_sweep_at;
    int64_t hb = sl__redis_local_tick(r, t); /* on_store_error: local: heartbeats */
    if (hb && (next == 0 || hb < next)) next = hb;
    if (next) sl__redis_arm(r, next);
}

/* ---- public ----------------------------------------------------------------------- */

sl_redis *sl_redis_create(sl_loop *loop, const sl_redis_opts *o, int *err) {
    int e = SLUICE_OK;
    sl_redis *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    pthread_mutex_init(&r->hmu, NULL);
    r->loop = loop;
    r->o = *o;
    r->tfd = -1;
    if (r->o.timeout_ns <= 0) r->o.timeout_ns = 20 * SLUICE_NS_PER_MS;
    if (r->o.expiry_slack_ms <= 0)
        r->o.expiry_slack_ms = r->o.time_mode == SL_REDIS_TIME_SERVER ? 1000 : 3600 * 1000;
    if (r->o.breaker_failures == 0) r->o.breaker_failures = 5;
    if (r->o.breaker_open_ns <= 0) r->o.breaker_open_ns = 200 * SLUICE_NS_PER_MS;
    if (r->o.backoff_min_ns <= 0) r->o.backoff_min_ns = 20 * SLUICE_NS_PER_MS;
    if (r->o.backoff_max_ns <= 0) r->o.backoff_max_ns = 320 * SLUICE_NS_PER_MS;
    if (r->o.max_pending == 0) r->o.max_pending = 1024;
    if (r->o.cache_max_ns <= 0) r->o.cache_max_ns = SLUICE_NS_PER_S;
    unsigned cs = r->o.cache_slots ? r->o.cache_slots : 4096;
    r->o.secret = NULL; /* not kept: only the derived key */
    r->sk = sl_redis_secret_key(o->secret, o->secret_len);
    r->script = sl_redis_script(&r->script_len);
    r->sha = sl_redis_script_sha();
    r->lib = sl_redis_library(&r->lib_len);
    r->fname = sl_redis_function_name();
    if (r->script == NULL || r->lib == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    r->npool = r->o.max_pending;
    r->pool = calloc(r->npool, sizeof(rq));
    if (r->pool == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    for (unsigned i = r->npool; i-- > 0;) {
        r->pool[i].next_free = r->free;
        r->free = &r->pool[i];
    }
    if (r->o.envoy_keys) { /* envoy compat key arenas: one per pooled request + scratch */
        r->xk_all = malloc((size_t)(r->npool + 1) * XKEY_ARENA);
        if (r->xk_all == NULL) {
            e = SLUICE_ENOMEM;
            goto fail;
        }
        for (unsigned i = 0; i < r->npool; i++) r->pool[i].xk = r->xk_all + (size_t)i * XKEY_ARENA;
        r->scratch.xk = r->xk_all + (size_t)r->npool * XKEY_ARENA;
        r->jitter_rng = (uint64_t)mono_now() * 0x9e3779b97f4a7c15ull | 1;
    }
    if (cs > 1) {
        if (cs & (cs - 1)) {
            e = SLUICE_EINVAL;
            goto fail;
        }
        r->cache = calloc(cs, sizeof(cache_ent));
        if (r->cache == NULL) {
            e = SLUICE_ENOMEM;
            goto fail;
        }
        r->cache_mask = cs - 1;
    }
    if (r->o.lease_ns <= 0) r->o.lease_ns = 100 * SLUICE_NS_PER_MS;
    r->leases = calloc(LEASE_SLOTS, sizeof(lease_ent)); /* policies may lease on their own */
    if (r->leases == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    memset(r->slotmap, 0xFF, sizeof(r->slotmap));
    sl_dlist_init(&r->deadlines, 0, r->o.timeout_ns);
    sl_dlist_init(&r->orphans, 1, ORPHAN_NS);
    r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (r->tfd < 0) {
        e = SLUICE_EIO;
        goto fail;
    }
    r->tio = (sl_io){r->tfd, on_timer, r};
    if (sl_loop_add(loop, &r->tio, EPOLLIN) != 0) {
        e = SLUICE_EIO;
        goto fail;
    }
    if (r->o.tls.on) {
        char msg[300];
        r->tls = sl_rconn_tls_create(&r->o.tls, msg, sizeof(msg));
        if (r->tls == NULL) {
            snprintf(r->last_error, sizeof(r->last_error), "%.127s", msg);
            e = SLUICE_EINVAL;
            goto fail;
        }
    }
    if (r->o.unix_path[0] || r->o.sentinel) {
        /* one node: the socket, or the primary (its address comes from the sentinel) */
        sl__redis_node_find(r, "", 0, true);
        if (r->o.sentinel) {
            r->sen = sl_sentinel_create(loop, &r->o, r->tls, &r->hmu, sl__redis_on_primary, r);
            if (r->sen == NULL) {
                e = SLUICE_EINVAL;
                goto fail;
            }
        }
        return r;
    }
    /* seeds: "h:p,[v6]:p,..." */
    char buf[sizeof(r->o.seeds)];
    snprintf(buf, sizeof(buf), "%s", r->o.seeds);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *c = strrchr(tok, ':');
        if (c == NULL || c == tok) {
            e = SLUICE_EINVAL;
            goto fail;
        }
        *c = '\0';
        int port = atoi(c + 1);
        if (port <= 0 || port > 65535) {
            e = SLUICE_EINVAL;
            goto fail;
        }
        if (tok[0] == '[' && c[-1] == ']') tok++, c[-1] = '\0';
        sl__redis_node_find(r, tok, port, true);
        if (!r->o.cluster) break;
    }
    if (r->nnodes == 0) {
        e = SLUICE_EINVAL;
        goto fail;
    }
    return r;
fail:
    if (err) *err = e;
    sl_redis_destroy(r);
    return NULL;
}

void sl_redis_destroy(sl_redis *r) {
    if (r == NULL) return;
    sl__redis_local_forget(r);
    sl_sentinel_destroy(r->sen);
    r->sen = NULL;
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (nd->c != NULL) {
            sl_rconn_close(nd->c); /* its pending callbacks are not called */
            nd->c = NULL;
        }
    }
    /* decisions still in flight are answered (failed) so their owners can clean up */
    for (unsigned i = 0; r->pool && i < r->npool; i++) {
        rq *q = &r->pool[i];
        if (!q->busy) continue;
        q->failed = true;
        q->ngroups = 0;
        sl_redis_cb cb = q->cb;
        q->cb = NULL;
        if (cb) cb(q->ud, SLUICE_ESTORE, NULL);
        if (q->held)
            for (int k = 0; k < q->n; k++) sl_limiter_unref(q->it[k].lim);
        q->held = false;
        q->busy = false;
    }
    /* slices held: their units stay taken until their window ends (nothing to give them
     * back with); the references go */
    for (unsigned i = 0; r->leases != NULL && i < LEASE_SLOTS; i++)
        if (r->leases[i].lim != NULL) sl_limiter_unref(r->leases[i].lim);
    if (r->tfd >= 0) {
        sl_loop_del(r->loop, &r->tio);
        close(r->tfd);
    }
    sl_rconn_reap();
    sl_rconn_tls_destroy(r->tls);
    pthread_mutex_destroy(&r->hmu);
    free(r->cache);
    free(r->leases);
    free(r->pool);
    free(r->xk_all);
    memset(r->o.password, 0, sizeof(r->o.password));
    memset(r->o.sentinel_password, 0, sizeof(r->o.sentinel_password));
    free(r);
}

const sl_redis_stats *sl_redis_stats_get(const sl_redis *r) { return &r->st; }

bool sl_redis_ready(const sl_redis *r) {
    return atomic_load_explicit(&((sl_redis *)r)->ready, memory_order_relaxed);
}

/* Writes what this loop turn queued on every connected node now, instead of in the
 * next turn's EPOLLOUT: one write per node per turn, and the round trip starts before
 * the loop sleeps. conn.c arms EPOLLOUT when a turn's first command is queued, so a
 * caller that never flushes still gets its commands sent (one turn later). */
void sl_redis_flush(sl_redis *r) {
    sl_rconn_reap(); /* the turn is over: what it closed can go */
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (nd->c != NULL && nd->state == 2) sl_rconn_flush(nd->c);
    }
}

int sl_redis_health(const sl_redis *cr, sl_redis_node_health *out, int cap) {
    sl_redis *r = (sl_redis *)cr;
    int n = 0;
    pthread_mutex_lock(&r->hmu);
    int nn = atomic_load(&r->nnodes_pub);
    for (int i = 0; i < nn && n < cap; i++) {
        const sl_redis_node *nd = &r->nodes[i];
        sl_redis_node_health *h = &out[n];
        memset(h, 0, sizeof(*h));
        if (r->o.unix_path[0]) snprintf(h->addr, sizeof(h->addr), "%s", r->o.unix_path);
        else if (nd->host[0] == '\0') snprintf(h->addr, sizeof(h->addr), "primary '%.64s' (not known yet)", r->o.master);
        else snprintf(h->addr, sizeof(h->addr), strchr(nd->host, ':') ? "[%s]:%d" : "%s:%d", nd->host, nd->port);
        h->state = nd->state;
        h->not_answering = nd->state == 2 && nd->open_pub;
        h->auth_failures = nd->auth_failures;
        h->tls_failures = nd->tls_failures;
        memcpy(h->last_error, nd->err, sizeof(h->last_error));
        n++;
    }
    if (r->sen != NULL && n < cap) {
        sl_sentinel_health(r->sen, &out[n]);
        n++;
    }
    pthread_mutex_unlock(&r->hmu);
    return n;
}

typedef struct sync_wait {
    bool done;
    int rc;
    sluice_decision *out;
} sync_wait;

static void sync_cb(void *ud, int rc, const sl_sresult *d) {
    sync_wait *w = ud;
    w->done = true;
    w->rc = rc;
    if (d != NULL && w->out != NULL) {
        w->out->n = d->n;
        w->out->allowed = d->allowed;
        memcpy(w->out->results, d->r, d->n * sizeof(d->r[0]));
        w->out->deciding = d->n ? sl_decision_deciding(w->out) : -1;
    }
}

int sl_redis_decide_sync(sl_redis *r, const sluice_item *items, size_t n, sluice_time now,
                         sluice_decision *out) {
    sl_redis_args a = {.op = 'd', .items = items, .n = n};
    return sl_redis_wait(r, sl_redis_issue, &a, now, out);
}

int sl_redis_issue(sl_redis *r, const void *args, sluice_time now, sl_redis_cb cb, void *ud) {
    const sl_redis_args *a = args;
    sl_sitem si[SLUICE_MAX_ITEMS];
    if (a->n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    for (size_t i = 0; i < a->n; i++)
        si[i] = (sl_sitem){.lim = a->items[i].limiter, .key = a->items[i].key,
                           .key_len = a->items[i].key_len, .cost = a->items[i].cost};
    switch (a->op) {
    case 'd': return sl_redis_decide(r, si, a->n, 0, now, cb, ud);
    case 'x': return sl_redis_reset(r, si, a->n, now, cb, ud);
    case 'c': return sl_redis_claim(r, a->id, a->bit, a->ttl_ns, now, cb, ud);
    default: return SLUICE_EINVAL;
    }
}

int sl_redis_wait(sl_redis *r, sl_redis_issue_fn issue, const void *arg, sluice_time now,
                  sluice_decision *out) {
    sync_wait w = {false, SLUICE_OK, out};
    int rc = issue(r, arg, now, sync_cb, &w);
    if (rc != SLUICE_OK) return rc;
    sl_redis_flush(r);
    int64_t until = mono_now() + 2 * r->o.timeout_ns + 50 * SLUICE_NS_PER_MS;
    while (!w.done && mono_now() < until) {
        sl_loop_poll(r->loop, 1);
        sl_rconn_reap();
    }
    return w.done ? w.rc : SLUICE_ESTORE;
}

void sl_redis_run(sl_redis *r, int ms) {
    int64_t until = mono_now() + (int64_t)ms * SLUICE_NS_PER_MS;
    while (mono_now() < until) {
        sl_loop_poll(r->loop, 2);
        sl_rconn_reap();
    }
}
