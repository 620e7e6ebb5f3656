/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.c -- the Redis client's nodes: one connection each (conn.c), its state and
 * health, reconnection with backoff, the script loaded on every connection, node 0
 * following the primary a sentinel names, and the cluster's slot map (CLUSTER SHARDS,
 * or CLUSTER SLOTS over TLS), refreshed when a node is lost or a MOVED arrives.
 */
#include "store/redis/client_int.h"

/* ---- connections (conn.c) ---------------------------------------------------------- */


static void node_log(sl_redis_node *nd, const char *line) {
    sl_redis *r = nd->r;
    if (r->o.log != NULL) r->o.log(r->o.log_ud, line);
}

static void node_down(sl_redis_node *nd) {
    if (nd->state == 0) return;
    sl_redis *r = nd->r;
    pthread_mutex_lock(&r->hmu);
    nd->state = 0;
    pthread_mutex_unlock(&r->hmu);
    nd->backoff = nd->backoff == 0 ? r->o.backoff_min_ns : nd->backoff * 2;
    if (nd->backoff > r->o.backoff_max_ns) nd->backoff = r->o.backoff_max_ns;
    nd->retry_at = mono_now() + nd->backoff;
    sl__redis_arm(r, nd->retry_at);
    update_ready(r);
}

/* Keeps why a node failed (for the metrics and readiness), counts it by cause, and logs
 * it when it differs from what was logged last (every reconnection would repeat it). */
static void node_error(sl_redis_node *nd, sl_rconn_why why, const char *msg) {
    sl_redis *r = nd->r;
    pthread_mutex_lock(&r->hmu);
    bool same = strncmp(nd->err, msg, sizeof(nd->err) - 1) == 0;
    snprintf(nd->err, sizeof(nd->err), "%.199s", msg);
    if (why == SL_CONN_EAUTH) nd->auth_failures++;
    if (why == SL_CONN_ETLS) nd->tls_failures++;
    pthread_mutex_unlock(&r->hmu);
    if (why == SL_CONN_EAUTH) inc(&r->st.auth_failures);
    else if (why == SL_CONN_ETLS) inc(&r->st.tls_failures);
    else if (nd->state != 2) inc(&r->st.connect_failures);
    snprintf(r->last_error, sizeof(r->last_error), "%.127s", msg);
    if (!same || !nd->logged) node_log(nd, msg);
    nd->logged = true;
}

static void on_conn_state(void *owner, sl_rconn *c, bool up, sl_rconn_why why, const char *msg) {
    sl_redis_node *nd = owner;
    sl_redis *r = nd->r;
    if (c != nd->c) return;
    if (up) {
        pthread_mutex_lock(&r->hmu);
        nd->state = 2;
        nd->err[0] = '\0';
        nd->open_pub = false; /* a fresh connection closes its breaker (below) */
        pthread_mutex_unlock(&r->hmu);
        nd->backoff = 0;
        inc(&r->st.reconnects);
        if (nd->logged) {
            char line[200];
            snprintf(line, sizeof(line), "%s:%d: connected", nd->host[0] ? nd->host : r->o.unix_path, nd->port);
            node_log(nd, line);
            nd->logged = false;
        }
        /* a fresh connection closes its breaker (failures count again from zero) */
        nd->open_until = 0, nd->half_open = false, nd->fails = 0;
        update_ready(r);
        return;
    }
    node_error(nd, why, msg);
    nd->c = NULL;
    sl_rconn_close(c);
    node_down(nd);
    /* in a cluster, a lost node may have been failed over: ask a live one for the map
     * (and again at each reconnection attempt, see sl__redis_node_connect) */
    if (r->o.cluster) sl__redis_refresh_topology(r, false);
    /* behind sentinels: whatever went wrong with the primary, ask where it is now */
    if (r->sen != NULL && nd->idx == 0 && !r->switching) sl_sentinel_refresh(r->sen);
}

static void on_script_load(void *owner, redisReply *rep, void *priv) {
    (void)priv;
    sl_redis_node *nd = owner;
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
        snprintf(nd->r->last_error, sizeof(nd->r->last_error), "SCRIPT LOAD: %.100s", rep->str);
}

void sl__redis_queue_script_load(sl_redis_node *nd) {
    const char *argv[3] = {"SCRIPT", "LOAD", nd->r->script};
    size_t len[3] = {6, 4, nd->r->script_len};
    sl_rconn_command(nd->c, on_script_load, NULL, 3, argv, len);
}

/* FUNCTION LOAD's answer. Decisions go as FCALL from the connection's start, queued
 * behind the load (optimistic: one load per connection, nothing else to wait for). An
 * error (Redis 6: unknown command; FUNCTION renamed away or denied by an ACL; a managed
 * offering forbidding it) turns the connection to EVALSHA of the same code as one
 * script, loaded now: every behaviour is kept, only Redis's CPU per call differs. The
 * FCALLs already sent behind the failed load fail without running and go again as
 * EVALSHA (request.c). */
static void on_function_load(void *owner, redisReply *rep, void *priv) {
    sl_redis_node *nd = owner;
    if (nd->c == NULL || priv != (void *)nd->c) return; /* a reply for an older connection */
    nd->fn_ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
    if (nd->fn_ok) {
        nd->fcall = true;
    } else if (nd->fcall) {
        nd->fcall = false;
        sl__redis_queue_script_load(nd);
    }
}

void sl__redis_queue_function_load(sl_redis_node *nd) {
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", nd->r->lib};
    size_t len[4] = {8, 4, 7, nd->r->lib_len};
    sl_rconn_command(nd->c, on_function_load, nd->c, 4, argv, len);
}

/* Starts a non-blocking connection (its handshake queued by conn.c); FUNCTION LOAD is
 * queued first so every FCALL sent on this connection finds the library (or, without
 * FUNCTION, SCRIPT LOAD before the EVALSHAs; "Function not found" and NOSCRIPT stay
 * possible after FUNCTION/SCRIPT FLUSH: request.c loads again). */
void sl__redis_node_connect(sl_redis_node *nd) {
    sl_redis *r = nd->r;
    if (nd->host[0] == '\0' && r->o.unix_path[0] == '\0') { /* sentinel: no primary yet */
        nd->retry_at = mono_now() + SLUICE_NS_PER_S;           /* (on_primary connects) */
        return;
    }
    sl_rconn_opts co = {.host = nd->host, .port = nd->port, .unix_path = r->o.unix_path, .attempt = nd->attempt++,
                       .tls = r->tls, .username = r->o.username, .password = r->o.password, .db = r->o.db,
                       .want_primary = r->o.sentinel};
    char err[300];
    pthread_mutex_lock(&r->hmu);
    nd->state = 1;
    pthread_mutex_unlock(&r->hmu);
    nd->c = sl_rconn_open(r->loop, &co, nd, on_conn_state, err, sizeof(err));
    if (nd->c == NULL) {
        node_error(nd, SL_CONN_EIO, err);
        node_down(nd);
        return;
    }
    nd->connect_by = mono_now() + 4 * r->o.timeout_ns + 100 * SLUICE_NS_PER_MS;
    sl__redis_arm(r, nd->connect_by);
    nd->fcall = true, nd->fn_ok = false;
    sl__redis_queue_function_load(nd);
    if (r->o.cluster && !r->topo_pending) sl__redis_refresh_topology(r, true);
}

int sl__redis_node_find(sl_redis *r, const char *host, int port, bool create) {
    for (int i = 0; i < r->nnodes; i++)
        if (r->nodes[i].port == port && strcmp(r->nodes[i].host, host) == 0) return i;
    if (!create || r->nnodes >= MAX_NODES || strlen(host) >= SL_REDIS_HOST_MAX) return -1;
    sl_redis_node *nd = &r->nodes[r->nnodes];
    pthread_mutex_lock(&r->hmu);
    memset(nd, 0, sizeof(*nd));
    nd->r = r;
    nd->idx = r->nnodes;
    snprintf(nd->host, sizeof(nd->host), "%s", host);
    nd->port = port;
    r->nnodes++;
    atomic_store(&r->nnodes_pub, r->nnodes);
    pthread_mutex_unlock(&r->hmu);
    sl__redis_node_connect(nd);
    return nd->idx;
}

/* ---- sentinel: node 0 follows the primary ------------------------------------------- */

/* The sentinel reports where the primary is: a new address replaces node 0's (its
 * connection is failed: pending calls fail now, the breaker is reset by the new
 * connection) and is connected at once. */
void sl__redis_on_primary(void *ud, const char *host, int port) {
    sl_redis *r = ud;
    sl_redis_node *nd = &r->nodes[0];
    bool same = nd->port == port && strcmp(nd->host, host) == 0;
    if (same && nd->state != 0) return;
    if (!same) {
        if (nd->host[0]) inc(&r->st.failovers);
        if (nd->c != NULL) {
            char why[160];
            snprintf(why, sizeof(why), "the primary moved to %.64s:%d", host, port);
            r->switching = true; /* (no need to ask the sentinel again) */
            sl_rconn_fail(nd->c, SL_CONN_EIO, why); /* -> on_conn_state: closed, node down */
            r->switching = false;
        }
        pthread_mutex_lock(&r->hmu);
        snprintf(nd->host, sizeof(nd->host), "%s", host);
        nd->port = port;
        pthread_mutex_unlock(&r->hmu);
        nd->backoff = 0;
        nd->attempt = 0;
    }
    if (nd->c == NULL && (!same || mono_now() >= nd->retry_at)) sl__redis_node_connect(nd);
}

/* ---- topology --------------------------------------------------------------------- */

static void apply_topology(sl_redis *r, sl_redis_node *from, const redisReply *rep, bool shards) {
    /* off the decision path: a topology reply is parsed into a temporary array */
    sl_redis_range *ranges = malloc(MAX_RANGES * sizeof(*ranges));
    if (ranges == NULL) return;
    int n = sl_redis_parse_topology(rep, shards, ranges, MAX_RANGES);
    if (n <= 0) {
        free(ranges);
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *host = ranges[i].host[0] ? ranges[i].host : from->host;
        int idx = sl__redis_node_find(r, host, ranges[i].port, true);
        if (idx < 0) continue;
        memset(r->slotmap + ranges[i].lo, idx, (size_t)ranges[i].hi - ranges[i].lo + 1);
    }
    free(ranges);
    inc(&r->st.topology);
}

static void on_slots(void *owner, redisReply *reply, void *priv) {
    (void)priv;
    sl_redis_node *nd = owner;
    nd->r->topo_pending = false;
    if (reply != NULL) apply_topology(nd->r, nd, reply, false);
}

static void ask_slots(sl_redis_node *nd) {
    static const char *const argv[2] = {"CLUSTER", "SLOTS"};
    static const size_t lens[2] = {7, 5};
    if (sl_rconn_command(nd->c, on_slots, NULL, 2, argv, lens) != 0) nd->r->topo_pending = false;
}

static void on_shards(void *owner, redisReply *rep, void *priv) {
    (void)priv;
    sl_redis_node *nd = owner;
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR && nd->c != NULL) {
        /* before Redis 7: CLUSTER SHARDS is unknown, ask CLUSTER SLOTS */
        ask_slots(nd);
        return;
    }
    nd->r->topo_pending = false;
    if (rep != NULL) apply_topology(nd->r, nd, rep, true);
}

/* Asks a connected (or connecting) node for the slot map, at most every 100 ms unless
 * forced. Over TLS, CLUSTER SLOTS: it answers each node's TLS port to a TLS client
 * (tls-cluster), where CLUSTER SHARDS lists "port" and "tls-port" and Redis 7.0 fills
 * them inconsistently; MOVED/ASK likewise name the port the client's kind of
 * connection uses. */
void sl__redis_refresh_topology(sl_redis *r, bool force) {
    int64_t t = mono_now();
    if (!force && (r->topo_pending || t - r->topo_at < 100 * SLUICE_NS_PER_MS)) return;
    /* a node that is up answers now; a connecting one may be the one that died */
    int pick = -1;
    for (int i = 0; i < r->nnodes; i++) {
        if (r->nodes[i].c == NULL) continue;
        if (pick < 0 || (r->nodes[i].state == 2 && r->nodes[pick].state != 2)) pick = i;
    }
    if (pick < 0) return;
    sl_redis_node *nd = &r->nodes[pick];
    r->topo_pending = true;
    r->topo_at = t;
    if (r->tls != NULL) {
        ask_slots(nd);
        return;
    }
    static const char *const argv[2] = {"CLUSTER", "SHARDS"};
    static const size_t lens[2] = {7, 6};
    if (sl_rconn_command(nd->c, on_shards, NULL, 2, argv, lens) != 0) r->topo_pending = false;
}
