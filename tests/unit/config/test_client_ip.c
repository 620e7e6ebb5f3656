/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_client_ip.c -- who the client is behind proxies: the walk of X-Forwarded-For and
 * Forwarded from the right over trusted networks and hops (IPv4, IPv6, mapped, ports,
 * garbage, too many entries), the legacy reading, and `client_ip:` config errors.
 */
#include "config/compiled.h"
#include "t.h"

static sl_client_ip_cfg cfg_walk(const char *const *nets, size_t n, unsigned hops, const char *header) {
    sl_client_ip_cfg c;
    memset(&c, 0, sizeof(c));
    c.mode = SL_CIP_WALK;
    snprintf(c.header, sizeof(c.header), "%s", header);
    c.forwarded = strcmp(header, "forwarded") == 0;
    c.hops = hops;
    for (size_t i = 0; i < n; i++) T_CHECK(sl_cidr_parse(nets[i], strlen(nets[i]), &c.trusted[c.n_trusted++]));
    return c;
}

static char OUT[128];

/* The address picked for these header lines (one string: lines split at '\n'). */
static const char *pick(const sl_client_ip_cfg *c, const char *lines, const char *peer) {
    const char *vals[16];
    size_t lens[16], n = 0;
    char copy[16384];
    snprintf(copy, sizeof(copy), "%s", lines ? lines : "");
    char *save = NULL;
    for (char *t = lines ? strtok_r(copy, "\n", &save) : NULL; t && n < 16; t = strtok_r(NULL, "\n", &save)) {
        vals[n] = lines + (t - copy); /* point into the caller's bytes, as a request would */
        lens[n++] = strlen(t);
    }
    char buf[SL_CIP_TEXT_MAX];
    const char *p;
    size_t l;
    sl_client_ip_pick(c, vals, lens, n, NULL, 0, peer, buf, &p, &l);
    snprintf(OUT, sizeof(OUT), "%.*s", (int)l, p);
    return OUT;
}

static void cidrs(void) {
    sl_cidr c;
    uint8_t a[16];
    T_CHECK(sl_cidr_parse("10.0.0.0/8", 10, &c) && c.bits == 104);
    T_CHECK(sl_cip_parse_addr("10.200.1.1", 10, a) && sl_cidr_contains(&c, a));
    T_CHECK(sl_cip_parse_addr("11.0.0.1", 8, a) && !sl_cidr_contains(&c, a));
    T_CHECK(sl_cip_parse_addr("::ffff:10.9.9.9", 15, a) && sl_cidr_contains(&c, a)); /* mapped = IPv4 */
    T_CHECK(sl_cidr_parse("10.1.2.3/8", 10, &c) && sl_cip_parse_addr("10.7.7.7", 8, a) && sl_cidr_contains(&c, a));
    T_CHECK(sl_cidr_parse("2001:db8::/32", 13, &c) && c.bits == 32);
    T_CHECK(sl_cip_parse_addr("2001:db8:ffff::1", 16, a) && sl_cidr_contains(&c, a));
    T_CHECK(sl_cip_parse_addr("2001:db9::1", 11, a) && !sl_cidr_contains(&c, a));
    T_CHECK(sl_cidr_parse("::1", 3, &c) && c.bits == 128);
    T_CHECK(sl_cidr_parse("0.0.0.0/0", 9, &c) && c.bits == 96);
    T_CHECK(sl_cip_parse_addr("::1", 3, a) && !sl_cidr_contains(&c, a)); /* IPv4 /0 is not every IPv6 */
    static const char *const bad[] = {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0/8", "a.b.c.d",
                                      "10.0.0.0/8x", "", "2001:db8::/-1", "10.0.0.0/08000", "1.2.3.4 /8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (sl_cidr_parse(bad[i], strlen(bad[i]), &c)) T_FAIL("'%s' parsed as a network", bad[i]);
    /* chain entries: ports, brackets */
    T_CHECK(sl_cip_parse_addr("1.2.3.4:5678", 12, a));
    T_CHECK(sl_cip_parse_addr("[2001:db8::1]:443", 17, a));
    T_CHECK(sl_cip_parse_addr("[2001:db8::1]", 13, a));
    T_CHECK(!sl_cip_parse_addr("1.2.3.4:99999", 13, a));
    T_CHECK(!sl_cip_parse_addr("[1.2.3.4]", 9, a));
    T_CHECK(!sl_cip_parse_addr("unknown", 7, a));
    T_CHECK(!sl_cip_parse_addr("_hidden", 7, a));
}

static void walk_ipv4(void) {
    static const char *const nets[] = {"127.0.0.1", "10.0.0.0/8"};
    sl_client_ip_cfg c = cfg_walk(nets, 2, 0, "x-forwarded-for");
    /* nginx appends: what the client wrote is left of the address nginx saw */
    T_EQ_S(pick(&c, "6.6.6.6, 203.0.113.7", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "6.6.6.6, 203.0.113.7, 10.1.1.1", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "203.0.113.7", "127.0.0.1"), "203.0.113.7");
    /* an untrusted peer's header is not read at all */
    T_EQ_S(pick(&c, "203.0.113.7", "198.51.100.2"), "198.51.100.2");
    /* no header: the peer */
    T_EQ_S(pick(&c, NULL, "127.0.0.1"), "127.0.0.1");
    /* every address trusted: the left-most */
    T_EQ_S(pick(&c, "10.0.0.5, 10.0.0.6", "127.0.0.1"), "10.0.0.5");
    /* several header lines: the last is the nearest proxy's */
    T_EQ_S(pick(&c, "6.6.6.6\n203.0.113.7, 10.0.0.9", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "203.0.113.9, 10.0.0.1\n10.0.0.9", "127.0.0.1"), "203.0.113.9");
    /* ports and spaces */
    T_EQ_S(pick(&c, "6.6.6.6 ,\t203.0.113.7:5555 ", "127.0.0.1"), "203.0.113.7");
    /* an empty entry is no hop */
    T_EQ_S(pick(&c, "6.6.6.6, , 203.0.113.7", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "6.6.6.6, 10.0.0.3, ,", "127.0.0.1"), "6.6.6.6");
}

static void walk_ipv6_and_mapped(void) {
    static const char *const nets[] = {"::1", "2001:db8:1::/48", "192.168.0.0/16"};
    sl_client_ip_cfg c = cfg_walk(nets, 3, 0, "x-forwarded-for");
    T_EQ_S(pick(&c, "2001:db8:1::66, 2001:db8:99::7", "::1"), "2001:db8:99::7");
    T_EQ_S(pick(&c, "[2001:db8:99::7]:8443, 2001:db8:1::2", "::1"), "2001:db8:99::7");
    T_EQ_S(pick(&c, "2001:DB8:99:0:0:0:0:7", "::1"), "2001:db8:99::7"); /* canonical text */
    /* a mapped peer is its IPv4 address; a mapped entry comes out as IPv4 */
    T_EQ_S(pick(&c, "::ffff:203.0.113.7", "::ffff:192.168.1.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "203.0.113.7, ::ffff:192.168.4.4", "::1"), "203.0.113.7");
}

static void walk_hops(void) {
    sl_client_ip_cfg c = cfg_walk(NULL, 0, 1, "x-forwarded-for");
    /* hops: 1, the peer is the one proxy: the right-most entry is the client */
    T_EQ_S(pick(&c, "6.6.6.6, 203.0.113.7", "198.51.100.2"), "203.0.113.7");
    c.hops = 2; /* a CDN in front of the gateway */
    T_EQ_S(pick(&c, "6.6.6.6, 203.0.113.7, 198.51.100.9", "198.51.100.2"), "203.0.113.7");
    T_EQ_S(pick(&c, "203.0.113.7", "198.51.100.2"), "203.0.113.7"); /* fewer entries than hops */
    c.hops = 0;
    c.mode = SL_CIP_PEER;
    T_EQ_S(pick(&c, "6.6.6.6, 203.0.113.7", "198.51.100.2"), "198.51.100.2");
    /* a peer that has no address (unix socket) is a proxy only by hops */
    c.mode = SL_CIP_WALK;
    static const char *const nets[] = {"127.0.0.1"};
    sl_client_ip_cfg d = cfg_walk(nets, 1, 0, "x-forwarded-for");
    T_EQ_S(pick(&d, "203.0.113.7", "unix"), "unix");
    d.hops = 1;
    T_EQ_S(pick(&d, "203.0.113.7", "unix"), "203.0.113.7");
}

static void walk_garbage_and_long(void) {
    static const char *const nets[] = {"127.0.0.1", "10.0.0.0/8"};
    sl_client_ip_cfg c = cfg_walk(nets, 2, 0, "x-forwarded-for");
    /* garbage right of the client stops the walk at the proxy that passed it on */
    T_EQ_S(pick(&c, "203.0.113.7, not-an-ip, 10.0.0.4", "127.0.0.1"), "10.0.0.4");
    T_EQ_S(pick(&c, "garbage", "127.0.0.1"), "127.0.0.1");
    T_EQ_S(pick(&c, "1.2.3.4.5", "127.0.0.1"), "127.0.0.1");
    T_EQ_S(pick(&c, "203.0.113.7, \x01\xff", "127.0.0.1"), "127.0.0.1");
    /* garbage the client wrote, left of its own address, changes nothing */
    T_EQ_S(pick(&c, "<script>, 999.1.1.1, 203.0.113.7", "127.0.0.1"), "203.0.113.7");
    /* far too many entries: bounded, and a client cannot push itself out of the walk */
    char many[8192];
    size_t o = 0;
    for (int i = 0; i < 500; i++) o += (size_t)snprintf(many + o, sizeof(many) - o, "10.0.%d.%d, ", i / 250, i % 250);
    snprintf(many + o, sizeof(many) - o, "203.0.113.7");
    T_EQ_S(pick(&c, many, "127.0.0.1"), "203.0.113.7");
    o = 0;
    for (int i = 0; i < 200; i++) o += (size_t)snprintf(many + o, sizeof(many) - o, "%s10.1.0.%d", i ? ", " : "", i);
    T_EQ_S(pick(&c, many, "127.0.0.1"), "10.1.0.136"); /* the SL_CIP_WALK_MAX-th from the right */
    /* an over-long entry */
    char longe[300];
    memset(longe, '1', sizeof(longe) - 1);
    longe[sizeof(longe) - 1] = '\0';
    T_EQ_S(pick(&c, longe, "127.0.0.1"), "127.0.0.1");
}

static void forwarded(void) {
    static const char *const nets[] = {"127.0.0.1", "10.0.0.0/8", "2001:db8:1::/48"};
    sl_client_ip_cfg c = cfg_walk(nets, 3, 0, "forwarded");
    T_EQ_S(pick(&c, "for=203.0.113.7", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "for=6.6.6.6, for=203.0.113.7;proto=https;by=10.0.0.1", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "For=\"[2001:db8:cafe::17]:4711\", for=10.0.0.2", "127.0.0.1"), "2001:db8:cafe::17");
    T_EQ_S(pick(&c, "proto=http;for=\"203.0.113.7:80\";host=a.example", "127.0.0.1"), "203.0.113.7");
    /* a comma inside a quoted value is not an element boundary */
    T_EQ_S(pick(&c, "for=6.6.6.6;host=\"a,b\", for=203.0.113.8", "127.0.0.1"), "203.0.113.8");
    T_EQ_S(pick(&c, "for=203.0.113.9;host=\"x,for=6.6.6.6\"", "127.0.0.1"), "203.0.113.9");
    /* unknown and obfuscated identifiers name no address: the proxy that passed them on */
    T_EQ_S(pick(&c, "for=203.0.113.7, for=unknown", "127.0.0.1"), "127.0.0.1");
    T_EQ_S(pick(&c, "for=203.0.113.7, for=_hidden, for=10.0.0.3", "127.0.0.1"), "10.0.0.3");
    T_EQ_S(pick(&c, "for=\"_gazonk\"", "127.0.0.1"), "127.0.0.1");
    /* an element without for= */
    T_EQ_S(pick(&c, "for=203.0.113.7, by=10.0.0.1", "127.0.0.1"), "127.0.0.1");
    /* an obfuscated port is still the address */
    T_EQ_S(pick(&c, "for=\"203.0.113.7:_p1\"", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "for=\"[2001:db8:1::9]\", for=\"[2001:db8:1::8]:1\"", "127.0.0.1"), "2001:db8:1::9");
    /* broken quoting is garbage, not a crash */
    T_EQ_S(pick(&c, "for=\"203.0.113.7", "127.0.0.1"), "203.0.113.7");
    T_EQ_S(pick(&c, "for=\"\\", "127.0.0.1"), "127.0.0.1");
    T_EQ_S(pick(&c, ";;;=,=;,", "127.0.0.1"), "127.0.0.1");
}

static void legacy(void) {
    sl_client_ip_cfg c;
    memset(&c, 0, sizeof(c));
    c.mode = SL_CIP_LEGACY;
    /* no setting: the left-most X-Forwarded-For, as before (config check warns) */
    T_EQ_S(pick(&c, "6.6.6.6, 203.0.113.7", "127.0.0.1"), "6.6.6.6");
    T_EQ_S(pick(&c, NULL, "127.0.0.1"), "127.0.0.1");
    const char *vals[1] = {NULL};
    size_t lens[1] = {0};
    char buf[SL_CIP_TEXT_MAX];
    const char *p;
    size_t n;
    sl_client_ip_pick(&c, vals, lens, 0, "198.51.100.4", 12, "127.0.0.1", buf, &p, &n);
    T_CHECK(n == 12 && memcmp(p, "198.51.100.4", 12) == 0); /* then X-Real-IP */
}

static void config_errors(void) {
    static const char *const bad[][2] = {
        {"client_ip: {header: X-Forwarded-For, trusted: [10.0.0.0/33]}\n", "t.yaml:1:48: bad trusted proxy '10.0.0.0/33'"},
        {"client_ip:\n  trusted:\n    - 127.0.0.1\n    - nonsense\n", "t.yaml:4:7: bad trusted proxy 'nonsense'"},
        {"client_ip: {trusted: 10.0.0.0/8}\n", "t.yaml:1:22: client_ip.trusted must be a list"},
        {"client_ip: {header: \"bad header\", hops: 1}\n", "t.yaml:1:21: bad client_ip header"},
        {"client_ip: {hops: 1, trsted: []}\n", "t.yaml:1:22: unknown field 'trsted'"},
        {"client_ip: {hops: 100}\n", "t.yaml:1:19:"},
        {"client_ip: Forwarded\n", "t.yaml:1:12: client_ip: Forwarded needs trusted proxies"},
    };
    const char *pol = "policies:\n  - { name: a, objective: fairness, key: [client_ip], algorithm: gcra, limits: [{rate: 1/s}] }\n";
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char y[1024];
        snprintf(y, sizeof(y), "%s%s", bad[i][0], pol);
        sl_config *cfg = NULL;
        static sl_diag_list dl;
        memset(&dl, 0, sizeof(dl));
        T_CHECK(sl_config_load_buffer(y, strlen(y), "t.yaml", &cfg, &dl) != SLUICE_OK);
        char m[512] = "";
        if (dl.n) sl_diag_format(&dl, 0, m, sizeof(m));
        if (strncmp(m, bad[i][1], strlen(bad[i][1])) != 0) T_FAIL("case %zu: '%s', want '%s...'", i, m, bad[i][1]);
        sl_config_destroy(cfg);
    }
    /* good forms, and the warning of config check */
    static const struct {
        const char *y;
        sl_cip_mode mode;
        bool warn;
    } good[] = {
        {"", SL_CIP_LEGACY, true},
        {"client_ip: X-Real-IP\n", SL_CIP_PLAIN, true},
        {"client_ip: peer\n", SL_CIP_PEER, false},
        {"client_ip: {header: X-Forwarded-For}\n", SL_CIP_PEER, true}, /* never read: said */
        {"client_ip: {header: X-Forwarded-For, trusted: [127.0.0.1, \"::1\", 10.0.0.0/8]}\n", SL_CIP_WALK, false},
        {"client_ip: {header: Forwarded, hops: 2}\n", SL_CIP_WALK, false},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char y[1024];
        snprintf(y, sizeof(y), "%s%s", good[i].y, pol);
        sl_config *cfg = NULL;
        static sl_diag_list dl;
        if (sl_config_load_buffer(y, strlen(y), "t.yaml", &cfg, &dl) != SLUICE_OK) {
            T_FAIL("good case %zu refused: %s", i, dl.n ? dl.items[0].msg : "?");
            continue;
        }
        T_EQ_I((int)sl_config_settings(cfg)->client_ip.mode, (int)good[i].mode);
        char m[700];
        int line = 0, col = 0;
        bool w = sl_config_client_ip_warning(cfg, m, sizeof(m), &line, &col);
        if (w != good[i].warn) T_FAIL("good case %zu: warning %d", i, w);
        if (w) T_CHECK(strstr(m, "policy 'a' keys on client_ip") != NULL && line > 0 && col > 0);
        if (w && good[i].mode == SL_CIP_PEER) T_CHECK(strstr(m, "x-forwarded-for is never read") != NULL);
        sl_config_destroy(cfg);
    }
    /* a policy that does not key on client_ip draws no warning */
    const char *y = "policies:\n  - { name: a, objective: fairness, key: [header.x-k], algorithm: gcra, limits: [{rate: 1/s}] }\n";
    sl_config *cfg = NULL;
    static sl_diag_list dl;
    T_CHECK(sl_config_load_buffer(y, strlen(y), "t.yaml", &cfg, &dl) == SLUICE_OK);
    char m[700];
    int line, col;
    T_CHECK(!sl_config_client_ip_warning(cfg, m, sizeof(m), &line, &col));
    sl_config_destroy(cfg);
}

int main(void) {
    T_RUN(cidrs);
    T_RUN(walk_ipv4);
    T_RUN(walk_ipv6_and_mapped);
    T_RUN(walk_hops);
    T_RUN(walk_garbage_and_long);
    T_RUN(forwarded);
    T_RUN(legacy);
    T_RUN(config_errors);
    return T_DONE();
}
