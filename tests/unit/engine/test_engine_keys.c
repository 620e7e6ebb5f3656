/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_keys.c -- key composition as a property: over random part values (drawn
 * from a tiny alphabet full of separators, so collisions would show), two requests get
 * the same key exactly when their part tuples are equal -- the reference model is the
 * tuple itself. Also: IPv6 grouping against a bit-level reference, and many threads
 * checking through one engine admitting exactly what one thread would.
 */
#include <arpa/inet.h>
#include <pthread.h>

#include "engine/engine.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static sl_str S(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

typedef struct fx {
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static bool fx_open(fx *f, const char *yaml) {
    memset(f, 0, sizeof(*f));
    static sl_diag_list dl;
    if (sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &f->cfg, &dl) != SLUICE_OK) {
        T_FAIL("load: %s", dl.n ? dl.items[0].msg : "?");
        return false;
    }
    int err;
    f->st = sluice_store_create(NULL, &err);
    f->e = sl_engine_create(f->cfg, f->st, &err, NULL, 0);
    T_CHECK(f->e != NULL);
    return f->e != NULL;
}

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
}

static const sluice_time NOW = {SEC, INT64_C(1767225600) * SEC};

/* The composed key of the (only) item, as bytes. */
static size_t key_of(const sl_engine *e, const sl_request *r, unsigned char *out) {
    static sl_verdict v;
    sl_engine_check(e, r, NOW, &v);
    if (v.n != 1) return 0;
    memcpy(out, v.keys + v.items[0].key_off, v.items[0].key_len);
    return v.items[0].key_len;
}

static void random_value(uint64_t *rng, char *buf) {
    static const char alphabet[] = "a_:|/\\0 ";
    size_t n = 1 + t_rand(rng) % 2;
    for (size_t i = 0; i < n; i++) buf[i] = alphabet[t_rand(rng) % (sizeof(alphabet) - 1)];
    buf[n] = '\0';
}

static void keys_injective(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: k, objective: fairness, algorithm: gcra, limits: [{rate: 1/s}],\n"
                     "      key: [header.a, header.b, method] }\n"))
        return;
    uint64_t rng = t_seed();
    enum { N = 300 };
    static char vals[N][3][8];
    static unsigned char keys[N][256];
    static size_t klen[N];
    static const char *methods[] = {"GET", "G", "ET", "GETa"};
    for (int i = 0; i < N; i++) {
        random_value(&rng, vals[i][0]);
        random_value(&rng, vals[i][1]);
        snprintf(vals[i][2], 8, "%s", methods[t_rand(&rng) % 4]);
        sl_header h[2] = {{S("a"), S(vals[i][0])}, {S("b"), S(vals[i][1])}};
        sl_request r = {.method = S(vals[i][2]), .path = S("/"), .headers = h, .n_headers = 2};
        klen[i] = key_of(f.e, &r, keys[i]);
        T_CHECK(klen[i] > 0);
    }
    int same = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < i; j++) {
            bool tuple_eq = !strcmp(vals[i][0], vals[j][0]) && !strcmp(vals[i][1], vals[j][1]) &&
                            !strcmp(vals[i][2], vals[j][2]);
            bool key_eq = klen[i] == klen[j] && memcmp(keys[i], keys[j], klen[i]) == 0;
            if (tuple_eq != key_eq)
                T_FAIL("(%s,%s,%s) vs (%s,%s,%s): keys %s", vals[i][0], vals[i][1], vals[i][2],
                       vals[j][0], vals[j][1], vals[j][2], key_eq ? "equal" : "differ");
            same += tuple_eq;
        }
    T_CHECK(same > 0); /* the alphabet is small enough that equal tuples do occur */
    fx_close(&f);
}

/* client_ip/N keeps exactly the first N bits of an IPv6 address and all of IPv4. */
static void ipv6_grouping(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: k, objective: fairness, algorithm: gcra, limits: [{rate: 1/s}],\n"
                     "      key: [client_ip/56] }\n"))
        return;
    uint64_t rng = t_seed() ^ 0x1234;
    for (int i = 0; i < 300; i++) {
        unsigned char a[16], b[16];
        for (int k = 0; k < 16; k++) a[k] = (unsigned char)t_rand(&rng);
        memcpy(b, a, 16);
        int bit = (int)(t_rand(&rng) % 128);
        b[bit / 8] ^= (unsigned char)(0x80u >> (bit % 8));
        if (a[0] == 0 && a[1] == 0) a[0] = b[0] = 0x20; /* stay clear of mapped IPv4 */
        char ta[64], tb[64];
        inet_ntop(AF_INET6, a, ta, sizeof(ta));
        inet_ntop(AF_INET6, b, tb, sizeof(tb));
        unsigned char ka[64], kb[64];
        sl_request ra = {.client_ip = S(ta)}, rb = {.client_ip = S(tb)};
        size_t la = key_of(f.e, &ra, ka), lb = key_of(f.e, &rb, kb);
        bool same = la == lb && memcmp(ka, kb, la) == 0;
        if (same != (bit >= 56)) T_FAIL("%s vs %s (bit %d): %s", ta, tb, bit, same ? "same" : "differ");
    }
    /* IPv4 and its mapped IPv6 form are one client; bracketed and zoned forms parse */
    unsigned char k1[64], k2[64], k3[64];
    sl_request r1 = {.client_ip = S("192.0.2.1")}, r2 = {.client_ip = S("::ffff:192.0.2.1")},
               r3 = {.client_ip = S("[fe80::1%eth0]")};
    size_t l1 = key_of(f.e, &r1, k1), l2 = key_of(f.e, &r2, k2), l3 = key_of(f.e, &r3, k3);
    T_CHECK(l1 > 0 && l1 == l2 && memcmp(k1, k2, l1) == 0);
    T_CHECK(l3 > 0);
    /* garbage is a missing part (rejected: on_missing_key defaults to reject) */
    static sl_verdict v;
    sl_request bad = {.client_ip = S("not-an-ip")};
    sl_engine_check(f.e, &bad, NOW, &v);
    T_EQ_I(v.status, 400);
    fx_close(&f);
}

typedef struct worker {
    const sl_engine *e;
    int admitted;
} worker;

static void *run(void *arg) {
    worker *w = arg;
    sl_verdict *v = malloc(sizeof(*v));
    sl_header h = {S("x-k"), S("shared")};
    sl_request r = {.method = S("GET"), .path = S("/"), .headers = &h, .n_headers = 1};
    for (int i = 0; i < 500; i++) {
        sl_engine_check(w->e, &r, NOW, v);
        w->admitted += v->action == SL_ALLOW;
    }
    free(v);
    return NULL;
}

/* Four threads on one engine and one key at one instant: exactly the burst is admitted,
 * no more (all-or-nothing under concurrency, across two windows). */
static void threads_share_one_engine(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: k, objective: fairness, algorithm: gcra, key: [header.x-k],\n"
                     "      limits: [{rate: 10/s, burst: 700}, {rate: 1000/min, burst: 1000}] }\n"))
        return;
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){f.e, 0};
        pthread_create(&th[i], NULL, run, &w[i]);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += w[i].admitted;
    }
    T_EQ_I(total, 700);
    fx_close(&f);
}

int main(void) {
    T_RUN(keys_injective);
    T_RUN(ipv6_grouping);
    T_RUN(threads_share_one_engine);
    return T_DONE();
}
