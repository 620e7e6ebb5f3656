/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_base.c -- the base commands redis-cli, redis-benchmark and redis-py send (PING, ECHO,
 * HELLO, QUIT, CONFIG GET, COMMAND, INFO, CLIENT, SELECT, RESET) and AUTH: the admin token a
 * connection authenticated with, kept as a keyed hash and checked again at each command.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "api/resp/resp_cmds.h"

/* Whether `given` is the admin token, in time independent of where they differ. */
static bool token_ok(const char *tok, const char *given, size_t len) {
    size_t n = strlen(tok);
    unsigned char d = (unsigned char)(n != len);
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(tok[i] ^ (i < len ? given[i] : 0));
    return d == 0;
}

/*
 * Commands that change more than the caller's own decision (SL.RESET erases anyone's
 * counters, SL.CLOCK moves time for everyone) need the admin token when one is set:
 * `AUTH <token>` or `AUTH <user> <token>` (redis-cli -a, any Redis client), or HELLO's
 * AUTH. Decisions, settles and releases carry their own authority (a key, a MAC'd token).
 */
/* Whether any admin token is configured (admin.token, the command line's, admin.tokens). */
bool sl__resp_auth_required(const sl_gen *g) {
    return g->admin_token[0] != '\0' || sl_config_settings(g->cfg)->n_admin_tokens > 0;
}

/* A keyed hash of an admin token under a per-process random key: what a connection keeps
 * of the token it authenticated with (never the token itself). */
static sl_hash_key auth_key;
static pthread_once_t auth_once = PTHREAD_ONCE_INIT;
static void auth_key_init(void) {
    if (sl_hash_random_key(&auth_key) != 0) auth_key = (sl_hash_key){UINT64_C(0x6175746873616c74), 0};
}

static void auth_tag(const char *tok, size_t len, uint64_t out[2]) {
    pthread_once(&auth_once, auth_key_init);
    sl_hash128 h = sl_siphash128(&auth_key, tok, len, 2, 4);
    out[0] = h.lo;
    out[1] = h.hi;
}

/* Whether the token the connection authenticated with is one in force now. */
static bool auth_in_force(const sl_gen *g, const uint64_t tag[2]) {
    const sl_settings *st = sl_config_settings(g->cfg);
    uint64_t t[2];
    bool ok = false;
    if (g->admin_token[0] != '\0') {
        auth_tag(g->admin_token, strlen(g->admin_token), t);
        ok |= t[0] == tag[0] && t[1] == tag[1];
    }
    for (unsigned i = 0; i < st->n_admin_tokens; i++) {
        auth_tag(st->admin_tokens[i].token, strlen(st->admin_tokens[i].token), t);
        ok |= t[0] == tag[0] && t[1] == tag[1];
    }
    return ok;
}

/* Why at each command, against the tokens of the generation in force: AUTH happened
 * under the config of its time, and a reload that removes or changes a token must end
 * what it allowed on connections already open (HTTP checks each request's header). */
bool sl__resp_authorized(resp_ctx *x) {
    const sl_gen *g = x->c->w->gen;
    if (!sl__resp_auth_required(g)) return true;
    if (x->c->authed && auth_in_force(g, x->c->auth_tag)) return true;
    if (x->c->authed) {
        x->c->authed = false;
        sl_resp_error(&x->wb, "NOAUTH the token this connection authenticated with is no longer in "
                              "force (a reload changed the admin tokens): AUTH again");
        return false;
    }
    sl_resp_error(&x->wb, "NOAUTH Authentication required.");
    return false;
}

/* AUTH [user] password, or HELLO's AUTH user password: true when accepted (reply
 * written only on failure, or when `reply_ok`). */
static bool do_auth(resp_ctx *x, size_t at, size_t n, bool reply_ok) {
    const sl_gen *g = x->c->w->gen;
    const char *tok = g->admin_token;
    const sl_settings *st = sl_config_settings(g->cfg);
    const sl_resp_cmd *cmd = x->cmd;
    if (!sl__resp_auth_required(g)) {
        sl_resp_error(&x->wb, "ERR AUTH <password> called without any password configured for the "
                              "default user. Are you sure your configuration is correct?");
        return false;
    }
    size_t pw = at + n - 1; /* the password is the last argument; a user name is ignored */
    bool ok = tok[0] != '\0' && token_ok(tok, cmd->argv[pw], cmd->argl[pw]);
    if (ok) snprintf(x->c->auth_name, sizeof(x->c->auth_name), "admin");
    for (unsigned i = 0; i < st->n_admin_tokens; i++) /* named tokens (admin.tokens) too */
        if (token_ok(st->admin_tokens[i].token, cmd->argv[pw], cmd->argl[pw]) && !ok) {
            ok = true;
            snprintf(x->c->auth_name, sizeof(x->c->auth_name), "%s", st->admin_tokens[i].name);
        }
    if (!ok) {
        x->c->authed = false;
        sl_resp_error(&x->wb, "WRONGPASS invalid username-password pair or user is disabled.");
        return false;
    }
    x->c->authed = true;
    auth_tag(cmd->argv[pw], cmd->argl[pw], x->c->auth_tag);
    if (reply_ok) sl_resp_simple(&x->wb, "OK");
    return true;
}

/* ---- base protocol ---- */

void sl__resp_cmd_hello(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    int proto = x->c->proto;
    if (cmd->argc >= 2) {
        int64_t v;
        if (sl_resp_arg_i64(cmd, 1, &v) != 0) {
            sl_resp_error(&x->wb, "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (v != 2 && v != 3) {
            sl_resp_error(&x->wb, "NOPROTO unsupported protocol version");
            return;
        }
        for (size_t i = 2; i < cmd->argc;) {
            if (sl_resp_arg_is(cmd, i, "AUTH") && i + 2 < cmd->argc) {
                /* with an admin token, HELLO's credentials must be it; without one any
                 * are accepted (there is no user to check them against) */
                if (sl__resp_auth_required(x->c->w->gen) && !do_auth(x, i + 1, 2, false)) return;
                i += 3;
            } else if (sl_resp_arg_is(cmd, i, "SETNAME") && i + 1 < cmd->argc) {
                i += 2;
            } else {
                char m[160];
                snprintf(m, sizeof(m), "ERR Syntax error in HELLO option '%.64s'", cmd->argv[i]);
                sl_resp_error(&x->wb, m);
                return;
            }
        }
        proto = (int)v;
    }
    x->c->proto = proto;
    sl_resp_map(&x->wb, proto, 7);
    sl_resp_bulk_str(&x->wb, "server");
    sl_resp_bulk_str(&x->wb, "sluice");
    sl_resp_bulk_str(&x->wb, "version");
    sl_resp_bulk_str(&x->wb, sluice_version());
    sl_resp_bulk_str(&x->wb, "proto");
    sl_resp_int(&x->wb, proto);
    sl_resp_bulk_str(&x->wb, "id");
    sl_resp_int(&x->wb, (int64_t)(uintptr_t)x->c % 1000000);
    sl_resp_bulk_str(&x->wb, "mode");
    sl_resp_bulk_str(&x->wb, "standalone");
    sl_resp_bulk_str(&x->wb, "role");
    sl_resp_bulk_str(&x->wb, "master");
    sl_resp_bulk_str(&x->wb, "modules");
    sl_resp_array(&x->wb, 0);
}

void sl__resp_cmd_config(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc < 2) {
        sl__resp_err_arity(x);
        return;
    }
    if (!sl_resp_arg_is(cmd, 1, "GET")) {
        if (sl_resp_arg_is(cmd, 1, "SET") || sl_resp_arg_is(cmd, 1, "RESETSTAT")) {
            sl_resp_simple(&x->wb, "OK");
            return;
        }
        char m[160];
        snprintf(m, sizeof(m), "ERR unknown subcommand '%.64s'. Try CONFIG HELP.", cmd->argv[1]);
        sl_resp_error(&x->wb, m);
        return;
    }
    if (cmd->argc < 3) {
        sl__resp_err_arity(x);
        return;
    }
    /* redis-benchmark asks for save and appendonly; nothing is persisted the Redis way */
    size_t pairs = 0;
    for (size_t i = 2; i < cmd->argc; i++)
        if (sl_resp_arg_is(cmd, i, "save") || sl_resp_arg_is(cmd, i, "appendonly")) pairs++;
    sl_resp_map(&x->wb, x->c->proto, pairs);
    for (size_t i = 2; i < cmd->argc; i++) {
        if (sl_resp_arg_is(cmd, i, "save")) {
            sl_resp_bulk_str(&x->wb, "save");
            sl_resp_bulk_str(&x->wb, "");
        } else if (sl_resp_arg_is(cmd, i, "appendonly")) {
            sl_resp_bulk_str(&x->wb, "appendonly");
            sl_resp_bulk_str(&x->wb, "no");
        }
    }
}

void sl__resp_cmd_info(resp_ctx *x) {
    sl_server *s = x->c->w->srv;
    char b[1024];
    sluice_store_stats st;
    sluice_store_stats_get(s->store, &st);
    int n = snprintf(b, sizeof(b),
                     "# Server\r\nredis_version:7.2.0\r\nsluice_version:%s\r\nredis_mode:standalone\r\n"
                     "process_id:%ld\r\nuptime_in_seconds:%lld\r\n\r\n# Clients\r\nconnected_clients:%u\r\n"
                     "\r\n# Keyspace\r\nkeys_held:%llu\r\n",
                     sluice_version(), (long)getpid(),
                     (long long)((sluice_clock_now(s->clock).wall_ns - s->started_wall_ns) / SLUICE_NS_PER_S),
                     atomic_load(&s->nconns), (unsigned long long)st.keys);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof(b)) n = (int)sizeof(b) - 1;
    sl_resp_verbatim(&x->wb, x->c->proto, b, (size_t)n);
}

void sl__resp_cmd_client(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc < 2) {
        sl__resp_err_arity(x);
        return;
    }
    if (sl_resp_arg_is(cmd, 1, "SETNAME") && cmd->argc >= 3) {
        /* as Redis: a name would show in CLIENT LIST, one line per client */
        for (size_t i = 0; i < cmd->argl[2]; i++)
            if ((unsigned char)cmd->argv[2][i] <= ' ' || (unsigned char)cmd->argv[2][i] >= 0x7f) {
                sl_resp_error(&x->wb, "ERR Client names cannot contain spaces, newlines or special characters.");
                return;
            }
        sl_resp_simple(&x->wb, "OK");
    } else if (sl_resp_arg_is(cmd, 1, "SETINFO") || sl_resp_arg_is(cmd, 1, "SETNAME") ||
               sl_resp_arg_is(cmd, 1, "TRACKING") || sl_resp_arg_is(cmd, 1, "REPLY")) {
        sl_resp_simple(&x->wb, "OK");
    } else if (sl_resp_arg_is(cmd, 1, "GETNAME")) {
        sl_resp_null(&x->wb, x->c->proto);
    } else if (sl_resp_arg_is(cmd, 1, "ID")) {
        sl_resp_int(&x->wb, (int64_t)(uintptr_t)x->c % 1000000);
    } else {
        char m[160];
        snprintf(m, sizeof(m), "ERR unknown subcommand '%.64s'. Try CLIENT HELP.", cmd->argv[1]);
        sl_resp_error(&x->wb, m);
    }
}

void sl__resp_cmd_ping(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc == 2) sl_resp_bulk(&x->wb, cmd->argv[1], cmd->argl[1]);
    else sl_resp_simple(&x->wb, "PONG");
}

void sl__resp_cmd_echo(resp_ctx *x) { sl_resp_bulk(&x->wb, x->cmd->argv[1], x->cmd->argl[1]); }

void sl__resp_cmd_quit(resp_ctx *x) {
    sl_resp_simple(&x->wb, "OK");
    x->c->close_after = true;
}

void sl__resp_cmd_command(resp_ctx *x) {
    const sl_resp_cmd *cmd = x->cmd;
    if (cmd->argc >= 2 && sl_resp_arg_is(cmd, 1, "COUNT")) sl_resp_int(&x->wb, 0);
    else if (cmd->argc >= 2 && sl_resp_arg_is(cmd, 1, "DOCS")) sl_resp_map(&x->wb, x->c->proto, 0);
    else sl_resp_array(&x->wb, 0);
}

void sl__resp_cmd_select(resp_ctx *x) {
    int64_t db;
    if (sl_resp_arg_i64(x->cmd, 1, &db) != 0) sl_resp_error(&x->wb, "ERR value is not an integer or out of range");
    else if (db != 0) sl_resp_error(&x->wb, "ERR DB index is out of range");
    else sl_resp_simple(&x->wb, "OK");
}

void sl__resp_cmd_auth(resp_ctx *x) { do_auth(x, 1, x->cmd->argc - 1, true); }

void sl__resp_cmd_reset_conn(resp_ctx *x) {
    x->c->proto = 2;
    sl_resp_simple(&x->wb, "RESET");
}
