/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_ip.c -- the client's address behind proxies: networks, chain entries of
 * X-Forwarded-For and Forwarded (RFC 7239), and the walk from the right that skips
 * trusted proxies (client_ip.h). Bounded: at most SL_CIP_WALK_MAX entries are looked at.
 */
#include "config/client_ip.h"

#include <arpa/inet.h>
#include <string.h>

static bool is_ws(char ch) { return ch == ' ' || ch == '\t'; }

static void trim(const char **s, size_t *n) {
    while (*n && is_ws(**s)) (*s)++, (*n)--;
    while (*n && is_ws((*s)[*n - 1])) (*n)--;
}

/* inet_pton on a bounded copy; IPv4 becomes ::ffff:a.b.c.d */
static bool pton(const char *s, size_t n, uint8_t out[16]) {
    char b[SL_CIP_TEXT_MAX];
    if (n == 0 || n >= sizeof(b)) return false;
    memcpy(b, s, n);
    b[n] = '\0';
    uint8_t v4[4];
    if (memchr(b, ':', n) == NULL) {
        if (inet_pton(AF_INET, b, v4) != 1) return false;
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, v4, 4);
        return true;
    }
    return inet_pton(AF_INET6, b, out) == 1;
}

static bool is_v4(const uint8_t a[16]) {
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a, pre, 12) == 0;
}

bool sl_cidr_parse(const char *s, size_t len, sl_cidr *out) {
    if (s == NULL) return false;
    const char *slash = memchr(s, '/', len);
    size_t an = slash ? (size_t)(slash - s) : len;
    if (!pton(s, an, out->addr)) return false;
    bool v4 = memchr(s, ':', an) == NULL;
    unsigned max = v4 ? 32 : 128, bits = max;
    if (slash) {
        const char *d = slash + 1;
        size_t dn = len - an - 1;
        if (dn == 0 || dn > 3) return false;
        bits = 0;
        for (size_t i = 0; i < dn; i++) {
            if (d[i] < '0' || d[i] > '9') return false;
            bits = bits * 10 + (unsigned)(d[i] - '0');
        }
        if (bits > max) return false;
    }
    out->bits = v4 ? bits + 96 : bits;
    for (unsigned i = out->bits; i < 128; i++) out->addr[i / 8] &= (uint8_t)~(0x80u >> (i % 8));
    return true;
}

bool sl_cidr_contains(const sl_cidr *c, const uint8_t a[16]) {
    unsigned full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->addr, a, full) != 0) return false;
    if (rest == 0) return true;
    uint8_t m = (uint8_t)(0xffu << (8 - rest));
    return (c->addr[full] & m) == (a[full] & m);
}

static bool port_ok(const char *s, size_t n) {
    if (n == 0 || n > 5) return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    return v <= 65535;
}

bool sl_cip_parse_addr(const char *s, size_t n, uint8_t out[16]) {
    trim(&s, &n);
    if (n == 0) return false;
    if (s[0] == '[') { /* [v6] or [v6]:port; the port may be obfuscated (_x) in Forwarded */
        const char *close = memchr(s, ']', n);
        if (close == NULL) return false;
        size_t in = (size_t)(close - s - 1), after = n - in - 2;
        if (after > 0 && (close[1] != ':' || (!port_ok(close + 2, after - 1) && close[2] != '_')))
            return false;
        return memchr(s + 1, ':', in) != NULL && pton(s + 1, in, out);
    }
    const char *c1 = memchr(s, ':', n);
    if (c1 == NULL) return pton(s, n, out);
    if (memchr(c1 + 1, ':', n - (size_t)(c1 - s) - 1) != NULL) return pton(s, n, out); /* bare v6 */
    size_t hn = (size_t)(c1 - s), pn = n - hn - 1; /* a.b.c.d:port */
    if (!port_ok(c1 + 1, pn) && !(pn > 0 && c1[1] == '_')) return false;
    return pton(s, hn, out) && is_v4(out);
}

/* ---- the chain ----------------------------------------------------------------- */

typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct ring {
    span e[SL_CIP_WALK_MAX];
    size_t n;     /* entries seen */
} ring;

static void push(ring *r, const char *p, size_t n) { r->e[r->n++ % SL_CIP_WALK_MAX] = (span){p, n}; }

/* Comma-separated entries, commas inside quoted strings kept (Forwarded) */
static void split(ring *r, const char *s, size_t n, bool quotes) {
    size_t start = 0;
    bool q = false;
    for (size_t i = 0; i < n; i++) {
        if (quotes && s[i] == '\\' && q && i + 1 < n) {
            i++;
            continue;
        }
        if (quotes && s[i] == '"') q = !q;
        else if (s[i] == ',' && !q) {
            push(r, s + start, i - start);
            start = i + 1;
        }
    }
    push(r, s + start, n - start);
}

/* The for= node of one Forwarded element, unquoted into b; false without one. */
static bool forwarded_for(const char *s, size_t n, char *b, size_t blen, size_t *out) {
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_ws(s[i]) || s[i] == ';')) i++;
        size_t k = i;
        while (i < n && s[i] != '=' && s[i] != ';') i++;
        if (i >= n || s[i] != '=') continue;
        const char *name = s + k;
        size_t nl = i - k;
        while (nl && is_ws(name[nl - 1])) nl--;
        i++;
        size_t bl = 0;
        bool is_for = nl == 3 && (name[0] | 0x20) == 'f' && (name[1] | 0x20) == 'o' && (name[2] | 0x20) == 'r';
        if (i < n && s[i] == '"') {
            for (i++; i < n && s[i] != '"'; i++) {
                if (s[i] == '\\' && i + 1 < n) i++;
                if (bl + 1 < blen) b[bl++] = s[i];
                else if (is_for) return false;
            }
            if (i < n) i++;
        } else {
            for (; i < n && s[i] != ';'; i++) {
                if (bl + 1 < blen) b[bl++] = s[i];
                else if (is_for) return false;
            }
        }
        if (is_for) {
            *out = bl;
            return true;
        }
    }
    return false;
}

static bool trusted(const sl_client_ip_cfg *c, const uint8_t a[16], unsigned pos) {
    if (pos < c->hops) return true;
    for (unsigned i = 0; i < c->n_trusted; i++)
        if (sl_cidr_contains(&c->trusted[i], a)) return true;
    return false;
}

static size_t ntop(const uint8_t a[16], char *buf) {
    if (is_v4(a)) inet_ntop(AF_INET, a + 12, buf, SL_CIP_TEXT_MAX);
    else inet_ntop(AF_INET6, a, buf, SL_CIP_TEXT_MAX);
    return strlen(buf);
}

/* The first (left-most) entry of the first value, trimmed: today's reading. */
static bool leftmost(const char *const *values, const size_t *lens, size_t nvalues, const char **p,
                     size_t *n) {
    for (size_t i = 0; i < nvalues; i++) {
        const char *s = values[i];
        size_t l = lens[i];
        const char *comma = memchr(s, ',', l);
        size_t k = comma ? (size_t)(comma - s) : l;
        trim(&s, &k);
        if (k > 0) {
            *p = s, *n = k;
            return true;
        }
    }
    return false;
}

/* Why from the right: each proxy appends the address it received the request from, so
 * the right end was written by the nearest proxy and everything left of the first
 * untrusted address was written by the client (or whoever it chose). The walk skips
 * the peer and every trusted address (or the `hops` nearest) and stops at the first
 * other one. An entry that names no address (garbage, "unknown", an obfuscated `_id`)
 * stops the walk at the proxy that passed it on; with every address trusted, the
 * left-most one is the client (nginx's real_ip_recursive). */
void sl_client_ip_pick(const sl_client_ip_cfg *c, const char *const *values, const size_t *lens,
                       size_t nvalues, const char *real_ip, size_t real_ip_len, const char *peer,
                       char *buf, const char **p, size_t *n) {
    *p = peer;
    *n = strlen(peer);
    if (c->mode == SL_CIP_PEER) return;
    if (c->mode == SL_CIP_LEGACY || c->mode == SL_CIP_PLAIN) {
        if (leftmost(values, lens, nvalues, p, n)) return;
        if (c->mode == SL_CIP_LEGACY && real_ip != NULL && real_ip_len > 0) *p = real_ip, *n = real_ip_len;
        return;
    }
    uint8_t last[16];
    if (!sl_cip_parse_addr(peer, strlen(peer), last)) {
        if (c->hops == 0) return; /* a peer with no IP address (unix socket) is trusted by hops only */
    } else if (!trusted(c, last, 0)) {
        return;
    } else {
        *n = ntop(last, buf), *p = buf;
    }
    ring r = {.n = 0};
    size_t from = nvalues > SL_CIP_VALUES_MAX ? nvalues - SL_CIP_VALUES_MAX : 0;
    for (size_t i = from; i < nvalues; i++) split(&r, values[i], lens[i], c->forwarded);
    size_t avail = r.n < SL_CIP_WALK_MAX ? r.n : SL_CIP_WALK_MAX;
    unsigned pos = 1;
    for (size_t k = 0; k < avail; k++, pos++) {
        const span *e = &r.e[(r.n - 1 - k) % SL_CIP_WALK_MAX];
        const char *s = e->p;
        size_t l = e->n;
        char fb[SL_CIP_TEXT_MAX + 16];
        if (c->forwarded) {
            size_t fl;
            if (!forwarded_for(s, l, fb, sizeof(fb), &fl)) return; /* no for=: nothing to go on */
            s = fb, l = fl;
        }
        trim(&s, &l);
        if (l == 0 && !c->forwarded) { /* "a, , b": an empty entry is no hop */
            pos--;
            continue;
        }
        uint8_t a[16];
        if (!sl_cip_parse_addr(s, l, a)) return; /* garbage, unknown or obfuscated */
        *n = ntop(a, buf), *p = buf;
        if (!trusted(c, a, pos)) return;
        memcpy(last, a, 16);
    }
    /* every address trusted (or more than SL_CIP_WALK_MAX): the left-most one looked at */
}
