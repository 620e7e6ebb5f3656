/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_client_ip.c -- the trusted-proxy walk (config/client_ip.c) over arbitrary header
 * lines, as X-Forwarded-For and as Forwarded, and sl_cidr_parse over the same bytes. The
 * address picked is the peer as given, or canonical text that parses back to an address,
 * or (legacy forms) a slice of a header line; aborts otherwise.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/client_ip.h"

static const char REAL_IP[] = "198.51.100.1";

static void check(const sl_client_ip_cfg *c, const char *const *vals, const size_t *lens, size_t n,
                  const char *peer) {
    char buf[SL_CIP_TEXT_MAX];
    const char *p = NULL;
    size_t l = 0;
    sl_client_ip_pick(c, vals, lens, n, REAL_IP, sizeof(REAL_IP) - 1, peer, buf, &p, &l);
    if (p == NULL) abort();
    if (p == buf) {
        uint8_t a[16];
        if (l == 0 || l >= SL_CIP_TEXT_MAX || !sl_cip_parse_addr(buf, l, a)) abort();
        return;
    }
    if (p == peer && l == strlen(peer)) return;
    if (c->mode == SL_CIP_LEGACY && p == REAL_IP && l == sizeof(REAL_IP) - 1) return; /* X-Real-IP */
    for (size_t i = 0; i < n; i++) /* else a slice of one header line */
        if (p >= vals[i] && p + l <= vals[i] + lens[i]) return;
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    sl_cidr cidr;
    if (sl_cidr_parse(s, size, &cidr) && cidr.bits > 128) abort();
    /* header lines: the input split at '\n' (at most 12) */
    const char *vals[12];
    size_t lens[12], n = 0, start = 0;
    for (size_t i = 0; i <= size && n < 12; i++)
        if (i == size || s[i] == '\n') {
            vals[n] = s + start;
            lens[n++] = i - start;
            start = i + 1;
        }
    static const char *const nets[] = {"127.0.0.1", "10.0.0.0/8", "::1", "2001:db8::/32", "0.0.0.0/0"};
    sl_client_ip_cfg c;
    memset(&c, 0, sizeof(c));
    for (size_t i = 0; i < 4; i++) sl_cidr_parse(nets[i], strlen(nets[i]), &c.trusted[c.n_trusted++]);
    static const char *const peers[] = {"127.0.0.1", "::1", "203.0.113.5", "unix"};
    for (int mode = SL_CIP_LEGACY; mode <= SL_CIP_WALK; mode++)
        for (int fw = 0; fw < 2; fw++)
            for (unsigned hops = 0; hops < 3; hops++)
                for (size_t pi = 0; pi < 4; pi++) {
                    c.mode = (sl_cip_mode)mode;
                    c.forwarded = fw != 0;
                    c.hops = hops;
                    check(&c, vals, lens, n, peers[pi]);
                }
    /* everything trusted: the walk ends at the left-most address it looked at */
    sl_cidr_parse(nets[4], strlen(nets[4]), &c.trusted[c.n_trusted++]);
    c.mode = SL_CIP_WALK;
    c.forwarded = false;
    check(&c, vals, lens, n, "127.0.0.1");
    return 0;
}
