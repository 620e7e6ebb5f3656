/* SPDX-License-Identifier: Apache-2.0 */
/*
 * strset.c -- a small open-addressing hash set of byte strings for the config loader's
 * duplicate checks (map keys, policy names, limit names), so a file with n entries is
 * checked in O(n) rather than O(n^2). Keys are borrowed (they live in the YAML tree or
 * the config arena, which outlive the set); the table is malloc'd and doubles at 1/2 load.
 */
#include <stdlib.h>
#include <string.h>

#include "config/compiled.h"

static uint64_t set_hash(const char *k, size_t len) {
    /* FNV-1a: the keys come from the operator's own file, so flooding is not a concern */
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)k[i];
        h *= UINT64_C(1099511628211);
    }
    return h ^ (h >> 29);
}

void sl__set_free(sl__set *s) {
    free(s->slot);
    memset(s, 0, sizeof(*s));
}

static bool set_grow(sl__set *s) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    sl__set_slot *ns = calloc(nc, sizeof(*ns));
    if (ns == NULL) return false;
    for (size_t i = 0; i < s->cap; i++) {
        if (s->slot[i].key == NULL) continue;
        size_t j = (size_t)s->slot[i].hash & (nc - 1);
        while (ns[j].key != NULL) j = (j + 1) & (nc - 1);
        ns[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = ns;
    s->cap = nc;
    return true;
}

/* Why one call for lookup and insert: every use is "report a duplicate, else remember". */
int sl__set_put(sl__set *s, const char *key, size_t len, const void *val, const void **prev) {
    if (prev != NULL) *prev = NULL;
    if ((s->n + 1) * 2 > s->cap && !set_grow(s)) return -1;
    uint64_t h = set_hash(key, len);
    size_t j = (size_t)h & (s->cap - 1);
    while (s->slot[j].key != NULL) {
        if (s->slot[j].hash == h && s->slot[j].len == len && memcmp(s->slot[j].key, key, len) == 0) {
            if (prev != NULL) *prev = s->slot[j].val;
            return 1;
        }
        j = (j + 1) & (s->cap - 1);
    }
    s->slot[j] = (sl__set_slot){key, len, h, val};
    s->n++;
    return 0;
}
