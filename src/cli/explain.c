/* SPDX-License-Identifier: Apache-2.0 */
/*
 * explain.c -- `sluice explain -c FILE [attributes]`: the server's explanation of a request
 * (src/engine/explain.c), offline: the config loaded as the server would, a memory store
 * (empty, or restored from a snapshot to see real window states), one explanation printed
 * as JSON on stdout. Nothing is consumed, even in the snapshot (it is only read).
 * Keys are hashed under a key of this run (so hashes do not match a server's) unless
 * --raw-keys or the config's log.raw_keys.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/explain.h"
#include "opts.h"

#define MAX_HEADERS 64
/* the client address when --ip is not given (see below) */
#define DEFAULT_IP "127.0.0.1"

static int usage(FILE *f) {
    fprintf(f,
            "usage: sluice explain -c FILE [--method M] [--path P] [--host H] [--ip ADDR]\n"
            "                      [--route R] [--header 'Name: value']... [--bytes N] [--cost N]\n"
            "       sluice explain -c FILE --policy NAME --key KEY [--cost N]\n"
            "  prints, as JSON, every policy of FILE considered for the request, matched or not\n"
            "  and why, the key composed (and the fallback chain), the cost and its source, each\n"
            "  window's state, and the answer with the deciding window. Nothing is consumed.\n"
            "  --ip ADDR        the client address (IPv4 or IPv6; default 127.0.0.1, as from a\n"
            "                   gateway on this host: the server always has the peer's)\n"
            "  --snapshot PATH  window states from a memory store snapshot (default: all fresh)\n"
            "  --raw-keys       show keys as they are (default: the config's log.raw_keys)\n"
            "  --compact        one line of JSON\n");
    return f == stdout ? 0 : 2;
}

static int bad(const char *msg, const char *arg) {
    fprintf(stderr, "sluice explain: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (s == NULL || *s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') return false;
    *out = v;
    return true;
}

static sl_str str(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

static void done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    *(int *)ud = rc;
}

int sl_cli_explain(int argc, char **argv) {
    const char *path = NULL, *policy = NULL, *key = NULL, *snapshot = NULL;
    bool raw = false, compact = false, has_cost = false;
    uint64_t cost = 0, bytes = 0;
    bool has_bytes = false;
    sl_request r;
    memset(&r, 0, sizeof(r));
    static sl_header hdrs[MAX_HEADERS];
    size_t nh = 0;
    enum { O_METHOD = 256, O_PATH, O_HOST, O_IP, O_ROUTE, O_POLICY, O_KEY, O_SNAPSHOT, O_COST,
           O_BYTES, O_HEADER, O_RAW, O_COMPACT };
    static const struct option lo[] = {
        {"config", required_argument, NULL, 'c'}, {"method", required_argument, NULL, O_METHOD},
        {"path", required_argument, NULL, O_PATH}, {"host", required_argument, NULL, O_HOST},
        {"ip", required_argument, NULL, O_IP}, {"route", required_argument, NULL, O_ROUTE},
        {"policy", required_argument, NULL, O_POLICY}, {"key", required_argument, NULL, O_KEY},
        {"snapshot", required_argument, NULL, O_SNAPSHOT}, {"cost", required_argument, NULL, O_COST},
        {"bytes", required_argument, NULL, O_BYTES}, {"header", required_argument, NULL, O_HEADER},
        {"raw-keys", no_argument, NULL, O_RAW}, {"compact", no_argument, NULL, O_COMPACT},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    sl_opts op;
    sl_opts_init(&op, "explain", lo, "c:h", false);
    bool has_ip = false;
    for (;;) {
        const char *v;
        int ch = sl_opts_next(&op, argc, argv, &v);
        if (ch == SL_OPT_END) break;
        if (ch == SL_OPT_ERR) return 2;
        switch (ch) {
        case 'h': return usage(stdout);
        case O_RAW: raw = true; break;
        case O_COMPACT: compact = true; break;
        case 'c': path = v; break;
        case O_METHOD: r.method = str(v); break;
        case O_PATH: r.path = str(v); break;
        case O_HOST: r.host = str(v); break;
        case O_IP:
            if (!sl_cli_is_ip(v)) return bad("--ip expects an IPv4 or IPv6 address, got", v);
            r.client_ip = str(v);
            has_ip = true;
            break;
        case O_ROUTE: r.route = str(v); break;
        case O_POLICY: policy = v; break;
        case O_KEY: key = v; break;
        case O_SNAPSHOT: snapshot = v; break;
        case O_COST:
            if (!parse_u64(v, &cost)) return bad("--cost expects a non-negative number, got", v);
            has_cost = true;
            break;
        case O_BYTES:
            if (!parse_u64(v, &bytes)) return bad("--bytes expects a non-negative number, got", v);
            has_bytes = true;
            break;
        case O_HEADER: {
            const char *colon = strchr(v, ':');
            if (colon == NULL || colon == v) return bad("--header expects 'Name: value', got", v);
            if (nh >= MAX_HEADERS) return bad("too many --header", NULL);
            const char *val = colon + 1;
            while (*val == ' ' || *val == '\t') val++;
            hdrs[nh].name = (sl_str){v, (size_t)(colon - v)};
            hdrs[nh].value = str(val);
            nh++;
            break;
        }
        default: return 2;
        }
    }
    if (optind < argc) return sl_opts_usage_error(&op, "unexpected argument", argv[optind]);
    /* No --ip: the server always has one (the peer's, or the gateway's header), so a
     * request without it would blame the first policy keyed on the address for a missing
     * key, which the server never does. The address of a gateway on this host stands in,
     * and the echo says so. */
    if (!has_ip && policy == NULL) r.client_ip = str(DEFAULT_IP);
    if (path == NULL) return bad("a config file is required (-c FILE)", NULL);
    if ((policy == NULL) != (key == NULL)) return bad("--policy and --key go together", NULL);
    r.headers = hdrs;
    r.n_headers = nh;
    r.has_body_bytes = has_bytes;
    r.body_bytes = bytes;
    if (has_cost) r.hits_addend = r.cost = cost, r.has_cost = true;

    static sl_diag_list dl;
    sl_config *cfg = NULL;
    int rc = sl_config_load(path, &cfg, &dl);
    if (rc != SLUICE_OK) {
        char line[SL_DIAG_MSG + 300];
        for (size_t i = 0; i < dl.n; i++) {
            sl_diag_format(&dl, i, line, sizeof(line));
            fprintf(stderr, "%s\n", line);
        }
        if (dl.n == 0) fprintf(stderr, "%s: %s\n", path, sluice_strerror(rc));
        return 1;
    }
    const sl_settings *st = sl_config_settings(cfg);
    int err = 0;
    sluice_store *store = sluice_store_create(NULL, &err);
    sluice_clock *clock = sluice_clock_create_system();
    char ebuf[512] = "";
    sl_engine *e = store ? sl_engine_create(cfg, store, &err, ebuf, sizeof(ebuf)) : NULL;
    int status = 1;
    sl_explain *x = NULL;
    if (e == NULL || clock == NULL) {
        fprintf(stderr, "sluice explain: %s\n", ebuf[0] ? ebuf : sluice_strerror(err));
        goto out;
    }
    sluice_time now = sluice_clock_now(clock);
    if (snapshot != NULL) {
        uint64_t skipped = 0;
        int sr = sluice_store_restore(store, snapshot, now, &skipped, ebuf, sizeof(ebuf));
        if (sr != SLUICE_OK) {
            fprintf(stderr, "sluice explain: snapshot %s: %s\n", snapshot,
                    ebuf[0] ? ebuf : sluice_strerror(sr));
            goto out;
        }
    }
    x = policy ? sl_explain_named(e, policy, key, strlen(key), has_cost, cost)
               : sl_explain_request(e, &r);
    if (x == NULL) {
        fprintf(stderr, "sluice explain: out of memory\n");
        goto out;
    }
    int drc = SLUICE_EINVAL;
    sl_engine_decide(e, store, sl_explain_verdict(x), now, done, &drc); /* memory: at once */
    sl_hash_key hk;
    if (sl_hash_random_key(&hk) != 0) memset(&hk, 0, sizeof(hk));
    sl_explain_opts o = {.raw_keys = raw || st->log_raw_keys, .hash_key = &hk, .store = "memory"};
    size_t len = 0;
    char *json = sl_explain_render(x, drc, &o, &len);
    if (json == NULL) {
        fprintf(stderr, "sluice explain: out of memory\n");
        goto out;
    }
    json_t *j = json_loadb(json, len, 0, NULL);
    json_t *rq = j ? json_object_get(j, "request") : NULL;
    if (rq != NULL && !has_ip && policy == NULL)
        json_object_set_new(rq, "ip_default",
                            json_string(DEFAULT_IP " (no --ip: the address of a gateway on this host)"));
    char *pretty = j ? json_dumps(j, (compact ? JSON_COMPACT : JSON_INDENT(2)) | JSON_PRESERVE_ORDER)
                     : NULL;
    printf("%s\n", pretty ? pretty : json);
    free(pretty);
    if (j) json_decref(j);
    free(json);
    status = 0;
out:
    sl_explain_free(x);
    sl_engine_destroy(e);
    if (store) sluice_store_destroy(store);
    if (clock) sluice_clock_destroy(clock);
    sl_config_destroy(cfg);
    return status;
}
