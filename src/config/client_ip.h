/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_ip.h -- who the client is behind proxies (`client_ip:` in the config): the
 * trusted-proxy walk of X-Forwarded-For / Forwarded (RFC 7239) from the right, as nginx's
 * realip and Envoy's xff_num_trusted_hops do. No allocation; addresses are 16 bytes
 * (IPv4 as ::ffff:a.b.c.d, so mapped and plain IPv4 are the same client).
 */
#ifndef SL_CONFIG_CLIENT_IP_H
#define SL_CONFIG_CLIENT_IP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_CIP_TRUSTED_MAX 64 /* trusted networks in one config */
#define SL_CIP_WALK_MAX 64    /* addresses of one chain looked at, at most */
#define SL_CIP_VALUES_MAX 8   /* header lines of that name read (the last ones) */
#define SL_CIP_TEXT_MAX 48    /* INET6_ADDRSTRLEN and a NUL */

typedef enum sl_cip_mode {
    SL_CIP_LEGACY = 0, /* no setting: left-most X-Forwarded-For, else X-Real-IP, else the peer */
    SL_CIP_PLAIN,      /* `client_ip: HEADER`: that header's left-most address, else the peer */
    SL_CIP_PEER,       /* `client_ip: peer`, or a mapping that trusts nothing: the peer only */
    SL_CIP_WALK        /* a mapping with trusted: and/or hops: the walk from the right */
} sl_cip_mode;

typedef struct sl_cidr {
    uint8_t addr[16];
    unsigned bits; /* 0..128 (IPv4 networks: 96 + their prefix) */
} sl_cidr;

typedef struct sl_client_ip_cfg {
    sl_cip_mode mode;
    char header[64];   /* lowercase; "x-forwarded-for" unless configured */
    bool forwarded;    /* the header is RFC 7239 `Forwarded` */
    bool mapping;      /* written as a mapping (a header with nothing trusted is never read) */
    unsigned hops;     /* the N nearest addresses (the peer first) are proxies whatever they are */
    unsigned n_trusted;
    sl_cidr trusted[SL_CIP_TRUSTED_MAX];
    int line, col;     /* where `client_ip:` is written (0: absent) */
} sl_client_ip_cfg;

/* Parses an address ("10.1.2.3", "2001:db8::1", "::ffff:10.1.2.3") or network
 * ("10.0.0.0/8", "2001:db8::/32") of `len` bytes; host bits are cleared. */
bool sl_cidr_parse(const char *s, size_t len, sl_cidr *out);
/* An address of a chain entry: bare IPv4/IPv6, IPv4:port, [IPv6], [IPv6]:port. */
bool sl_cip_parse_addr(const char *s, size_t len, uint8_t out[16]);
bool sl_cidr_contains(const sl_cidr *c, const uint8_t a[16]);

/* The client's address for one request: `values` are the header lines named c->header
 * (in their order in the request; for SL_CIP_LEGACY the X-Forwarded-For ones, with
 * `real_ip` the X-Real-IP value or NULL), `peer` the connection's address. Writes the
 * address to *p and *n: into `buf` (SL_CIP_TEXT_MAX bytes, canonical text) when it came out
 * of a walk, else pointing into a value or `peer` as given. */
void sl_client_ip_pick(const sl_client_ip_cfg *c, const char *const *values, const size_t *lens,
                       size_t nvalues, const char *real_ip, size_t real_ip_len, const char *peer,
                       char *buf, const char **p, size_t *n);

#endif /* SL_CONFIG_CLIENT_IP_H */
