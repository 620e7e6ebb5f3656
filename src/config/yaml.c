/* SPDX-License-Identifier: Apache-2.0 */
/*
 * yaml.c -- the loader's plumbing: an arena for everything a config owns, a YAML tree
 * built from libyaml events (with marks for file:line:col), diagnostics, and the value
 * syntaxes people write (rates "10/s", durations "30s", quotas "50000/day").
 * Bounded: nesting depth, node count and scalar length are capped so a hostile file
 * cannot exhaust the stack or memory.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/compiled.h"
#include "core/redact.h"

#define YAML_MAX_DEPTH 64
#define YAML_MAX_NODES 1000000
#define YAML_MAX_MERGED 256 /* keys of a map built with merge keys (compared pairwise) */

/* ---- arena ------------------------------------------------------------------------ */

void *sl__alloc(sl__arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    sl__arena_blk *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof(*b) + cap);
        if (b == NULL) {
            a->oom = true;
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *sl__strndup(sl__arena *a, const char *s, size_t n) {
    char *p = sl__alloc(a, n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void sl__arena_free(sl__arena *a) {
    sl__arena_blk *b = a->head;
    while (b != NULL) {
        sl__arena_blk *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---- diagnostics ------------------------------------------------------------------ */

static void diag_add(sl__ctx *cx, int line, int col, const char *msg) {
    cx->errors++;
    if (cx->dl == NULL) return;
    if (cx->dl->n >= SL_DIAG_MAX) {
        cx->dl->dropped++;
        return;
    }
    sl_diag *d = &cx->dl->items[cx->dl->n++];
    d->line = line;
    d->col = col;
    d->file[0] = '\0'; /* a directory load names the file afterwards (dir.c) */
    snprintf(d->msg, sizeof(d->msg), "%s", msg);
    sl_redact(d->msg, sizeof(d->msg)); /* a URL or field echoed may hold a password */
}

void sl__err(sl__ctx *cx, const sl_ynode *at, const char *fmt, ...) {
    char msg[SL_DIAG_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    diag_add(cx, at ? at->line : 1, at ? at->col : 1, msg);
}

size_t sl_diag_format(const sl_diag_list *dl, size_t i, char *buf, size_t len) {
    if (buf == NULL || len == 0) return 0;
    buf[0] = '\0';
    if (dl == NULL || i >= dl->n) return 0;
    const sl_diag *d = &dl->items[i];
    /* line 0: about the file as a whole (it cannot be read): no position to give */
    int n = d->line > 0 ? snprintf(buf, len, "%s:%d:%d: %s", d->file[0] ? d->file : dl->file,
                                   d->line, d->col, d->msg)
                        : snprintf(buf, len, "%s: %s", d->file[0] ? d->file : dl->file, d->msg);
    if (n < 0) return 0;
    return (size_t)n < len ? (size_t)n : len - 1;
}

/* ---- YAML tree -------------------------------------------------------------------- */

/* An anchor (&name) and the node it names; `weight` is the node's size with every alias
 * inside it expanded, which is what an alias to it adds to the document. */
typedef struct yanchor {
    const char *name;
    sl_ynode *node;
    size_t weight;
} yanchor;

typedef struct ybuild {
    sl__ctx *cx;
    yaml_parser_t parser;
    size_t nodes;
    size_t expanded; /* nodes with aliases expanded: bounded like nodes (billion laughs) */
    yanchor *anch; /* the anchors by name (anchor_slot) */
    size_t nanch, capanch;
    bool failed;
    const char *buf; /* the input, for positions of reader errors */
    size_t len;
} ybuild;

/* libyaml's reader errors (invalid UTF-8, control characters, NUL) carry only a byte
 * offset, not a mark: line and column (in characters, as marks count) from the input. */
static void offset_pos(const ybuild *b, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    if (off > b->len) off = b->len;
    for (size_t i = 0; i < off; i++) {
        unsigned char ch = (unsigned char)b->buf[i];
        if (ch == '\n') {
            l++;
            c = 1;
        } else if ((ch & 0xC0) != 0x80) {
            c++; /* a UTF-8 continuation byte is part of the previous character */
        }
    }
    *line = l;
    *col = c;
}

static void yaml_problem(ybuild *b) {
    const yaml_parser_t *p = &b->parser;
    char msg[SL_DIAG_MSG];
    if (p->context != NULL)
        snprintf(msg, sizeof(msg), "YAML syntax error: %s %s (expected well-formed YAML)",
                 p->problem ? p->problem : "error", p->context);
    else
        snprintf(msg, sizeof(msg), "YAML syntax error: %s (expected well-formed YAML)",
                 p->problem ? p->problem : "error");
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->error == YAML_READER_ERROR) offset_pos(b, p->problem_offset, &line, &col);
    /* An unclosed construct ('[', '{', a quote) is found only where something else comes:
     * the problem mark is then on a later line (or past the end), while the mistake is the
     * opening, libyaml's context mark. The error is placed there, saying where it showed. */
    bool unclosed = p->context != NULL && p->problem != NULL &&
                    (strstr(p->problem, "did not find expected ',' or") != NULL ||
                     (strstr(p->context, "quoted scalar") != NULL &&
                      strstr(p->problem, "end of stream") != NULL));
    if (unclosed && p->context_mark.line < p->problem_mark.line) {
        size_t at = strlen(msg);
        const char *tail = " (expected well-formed YAML)";
        if (at > strlen(tail)) at -= strlen(tail);
        snprintf(msg + at, sizeof(msg) - at, ", not closed (found at %d:%d; expected it closed)",
                 line, col);
        line = (int)p->context_mark.line + 1;
        col = (int)p->context_mark.column + 1;
    }
    diag_add(b->cx, line, col, msg);
    b->failed = true;
}

static sl_ynode *ynode_new(ybuild *b, sl_ykind k, const yaml_mark_t *m) {
    if (++b->nodes > YAML_MAX_NODES) {
        diag_add(b->cx, (int)m->line + 1, (int)m->column + 1,
                 "document too large (expected at most 1000000 YAML nodes)");
        b->failed = true;
        return NULL;
    }
    b->expanded++;
    sl_ynode *n = sl__alloc(&b->cx->tmp, sizeof(*n));
    if (n == NULL) {
        b->failed = true;
        return NULL;
    }
    n->kind = k;
    n->line = (int)m->line + 1;
    n->col = (int)m->column + 1;
    return n;
}

static sl_ynode *ybuild_node_in(ybuild *b, yaml_event_t *ev, int depth);

/* FNV-1a of an anchor's name (the anchor table's hash). */
static uint64_t anchor_hash(const char *s) {
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++) h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h;
}

/* The slot of `name` in the anchor table (open addressing, a power of two, at most half
 * full): its entry, or the free slot where it goes. */
static yanchor *anchor_slot(yanchor *t, size_t cap, const char *name) {
    for (size_t i = (size_t)anchor_hash(name) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (t[i].name == NULL || strcmp(t[i].name, name) == 0) return &t[i];
}

/* Keeps `node` under its anchor's name (a later anchor of the same name wins, as YAML
 * says); weight: what the node counts when expanded. A hash table: a file of many
 * anchors and aliases costs one probe per alias. */
static void anchor_add(ybuild *b, const yaml_char_t *name, sl_ynode *node, size_t weight) {
    if (name == NULL || node == NULL) return;
    if (2 * (b->nanch + 1) > b->capanch) {
        size_t nc = b->capanch ? b->capanch * 2 : 32;
        yanchor *na = calloc(nc, sizeof(*na));
        if (na == NULL) {
            b->cx->cfg->arena.oom = true;
            b->failed = true;
            return;
        }
        for (size_t i = 0; i < b->capanch; i++)
            if (b->anch[i].name != NULL) *anchor_slot(na, nc, b->anch[i].name) = b->anch[i];
        free(b->anch);
        b->anch = na;
        b->capanch = nc;
    }
    yanchor *e = anchor_slot(b->anch, b->capanch, (const char *)name);
    if (e->name == NULL) {
        const char *nm = sl__strndup(&b->cx->tmp, (const char *)name, strlen((const char *)name));
        if (nm == NULL) {
            b->failed = true;
            return;
        }
        e->name = nm;
        b->nanch++;
    }
    e->node = node;
    e->weight = weight;
}

/* *name: the anchored node itself (shared, never copied: the tree is read-only), its
 * expanded size charged to the document, so nested aliases that would multiply into a
 * billion nodes stop at YAML_MAX_NODES with an error instead. */
static sl_ynode *alias_node(ybuild *b, const yaml_event_t *ev) {
    const char *name = (const char *)ev->data.alias.anchor;
    int line = (int)ev->start_mark.line + 1, col = (int)ev->start_mark.column + 1;
    yanchor *a = b->capanch ? anchor_slot(b->anch, b->capanch, name) : NULL;
    if (a != NULL && a->name != NULL) {
        if (a->weight > YAML_MAX_NODES - b->expanded) {
            diag_add(b->cx, line, col,
                     "YAML aliases expand to more than 1000000 nodes (expected aliases that do "
                     "not multiply: each alias copies its anchor's whole value)");
            b->failed = true;
            return NULL;
        }
        b->expanded += a->weight;
        return a->node;
    }
    char msg[SL_DIAG_MSG];
    snprintf(msg, sizeof(msg), "unknown YAML alias '*%.60s' (expected an anchor &%.60s defined "
             "before it, outside its own value)", name, name);
    diag_add(b->cx, line, col, msg);
    b->failed = true;
    return NULL;
}

/* YAML 1.1 merge keys, as gopkg.in/yaml.v2 reads them: `<<: *base` (or a list of
 * aliases) adds the merged maps' pairs whose keys the map does not set itself; among
 * several merged maps the first that has a key wins. kids/cnt: key, value, key, value. */
static sl_ynode **merge_keys(ybuild *b, sl_ynode **kids, size_t *cnt) {
    bool any = false;
    for (size_t i = 0; i + 1 < *cnt; i += 2)
        if (kids[i]->plain && strcmp(kids[i]->s, "<<") == 0) any = true;
    if (!any) return kids;
    size_t total = 0;
    for (size_t i = 0; i + 1 < *cnt; i += 2) {
        const sl_ynode *v = kids[i + 1];
        if (!(kids[i]->plain && strcmp(kids[i]->s, "<<") == 0)) {
            total += 2;
            continue;
        }
        const sl_ynode *const *m = v->kind == SL_YSEQ ? (const sl_ynode *const *)v->v : &v;
        size_t nm = v->kind == SL_YSEQ ? v->n : 1;
        for (size_t j = 0; j < nm; j++) {
            if (m[j]->kind != SL_YMAP) {
                diag_add(b->cx, m[j]->line, m[j]->col,
                         "a merge key '<<' takes a mapping or a list of mappings (expected "
                         "<<: *anchor)");
                b->failed = true;
                return kids;
            }
            total += 2 * m[j]->n;
        }
    }
    /* keys are compared pairwise below: a merged map is bounded (config maps are small) */
    if (total > 2 * YAML_MAX_MERGED) {
        diag_add(b->cx, kids[0]->line, kids[0]->col,
                 "a map with merge keys '<<' has more than 256 keys (expected a smaller map)");
        b->failed = true;
        return kids;
    }
    sl_ynode **out = malloc((total ? total : 1) * sizeof(*out));
    if (out == NULL) {
        b->cx->cfg->arena.oom = true;
        b->failed = true;
        return kids;
    }
    size_t n = 0;
    for (size_t i = 0; i + 1 < *cnt; i += 2)
        if (!(kids[i]->plain && strcmp(kids[i]->s, "<<") == 0)) out[n++] = kids[i], out[n++] = kids[i + 1];
    for (size_t i = 0; i + 1 < *cnt; i += 2) {
        if (!(kids[i]->plain && strcmp(kids[i]->s, "<<") == 0)) continue;
        const sl_ynode *v = kids[i + 1];
        sl_ynode *const *m = v->kind == SL_YSEQ ? v->v : &kids[i + 1];
        size_t nm = v->kind == SL_YSEQ ? v->n : 1;
        for (size_t j = 0; j < nm; j++)
            for (size_t k = 0; k < m[j]->n; k++) {
                sl_ynode *key = m[j]->v[2 * k];
                bool have = false;
                for (size_t q = 0; q < n && !have; q += 2) have = strcmp(out[q]->s, key->s) == 0;
                if (!have) out[n++] = key, out[n++] = m[j]->v[2 * k + 1];
            }
    }
    free(kids);
    *cnt = n;
    return out;
}

/* Why recursive descent over events rather than libyaml's document API: it keeps the
 * marks we need, bounds what aliases expand to before they can multiply (billion laughs)
 * and bounds depth while parsing. `ev` is the node's first event, already read. */
static sl_ynode *ybuild_node(ybuild *b, yaml_event_t *ev, int depth) {
    size_t before = b->expanded;
    sl_ynode *n = ybuild_node_in(b, ev, depth);
    const yaml_char_t *anchor = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.anchor
                                : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.anchor
                                                                        : NULL;
    if (n != NULL && anchor != NULL) anchor_add(b, anchor, n, b->expanded - before);
    return b->failed ? NULL : n;
}

static sl_ynode *ybuild_node_in(ybuild *b, yaml_event_t *ev, int depth) {
    if (depth > YAML_MAX_DEPTH) {
        diag_add(b->cx, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1,
                 "nesting too deep (expected at most 64 levels)");
        b->failed = true;
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        sl_ynode *n = ynode_new(b, SL_YSCALAR, &ev->start_mark);
        if (n == NULL) return NULL;
        n->s = sl__strndup(&b->cx->tmp, (const char *)ev->data.scalar.value,
                           ev->data.scalar.length);
        if (n->s == NULL) {
            b->failed = true;
            return NULL;
        }
        n->len = ev->data.scalar.length;
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        return n;
    }
    case YAML_ALIAS_EVENT:
        return alias_node(b, ev);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool map = ev->type == YAML_MAPPING_START_EVENT;
        sl_ynode *n = ynode_new(b, map ? SL_YMAP : SL_YSEQ, &ev->start_mark);
        if (n == NULL) return NULL;
        size_t cap = 0, cnt = 0;
        sl_ynode **kids = NULL;
        for (;;) {
            yaml_event_t e;
            if (!yaml_parser_parse(&b->parser, &e)) {
                yaml_problem(b);
                free(kids);
                return NULL;
            }
            if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&e);
                break;
            }
            sl_ynode *k = ybuild_node(b, &e, depth + 1);
            yaml_event_delete(&e);
            if (k == NULL) {
                free(kids);
                return NULL;
            }
            if (map && cnt % 2 == 0 && k->kind != SL_YSCALAR) {
                diag_add(b->cx, k->line, k->col,
                         "a mapping key must be a plain string (expected key: value)");
                b->failed = true;
                free(kids);
                return NULL;
            }
            if (cnt == cap) {
                size_t nc = cap ? cap * 2 : 8;
                sl_ynode **nk = realloc(kids, nc * sizeof(*nk));
                if (nk == NULL) {
                    free(kids);
                    b->cx->cfg->arena.oom = true;
                    b->failed = true;
                    return NULL;
                }
                kids = nk;
                cap = nc;
            }
            kids[cnt++] = k;
        }
        if (map) kids = merge_keys(b, kids, &cnt);
        if (b->failed) {
            free(kids);
            return NULL;
        }
        n->n = map ? cnt / 2 : cnt;
        if (cnt > 0) {
            n->v = sl__alloc(&b->cx->tmp, cnt * sizeof(*n->v));
            if (n->v == NULL) {
                free(kids);
                b->failed = true;
                return NULL;
            }
            memcpy(n->v, kids, cnt * sizeof(*n->v));
        }
        free(kids);
        return n;
    }
    default:
        diag_add(b->cx, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1,
                 "unexpected YAML event (expected a value)");
        b->failed = true;
        return NULL;
    }
}

/* Parses one YAML document from buf into the context's temporary arena. NULL (with
 * diagnostics) on a syntax error, an empty stream or several documents. */
sl_ynode *sl__yaml_parse(sl__ctx *cx, const char *buf, size_t len) {
    ybuild b = {.cx = cx, .buf = buf, .len = len};
    if (!yaml_parser_initialize(&b.parser)) {
        cx->cfg->arena.oom = true;
        return NULL;
    }
    yaml_parser_set_input_string(&b.parser, (const unsigned char *)buf, len);
    sl_ynode *root = NULL;
    bool done = false;
    int docs = 0;
    while (!done && !b.failed) {
        yaml_event_t e;
        if (!yaml_parser_parse(&b.parser, &e)) {
            yaml_problem(&b);
            break;
        }
        switch (e.type) {
        case YAML_STREAM_END_EVENT: done = true; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                diag_add(cx, (int)e.start_mark.line + 1, (int)e.start_mark.column + 1,
                         "several YAML documents in one file (expected one)");
                b.failed = true;
            }
            break;
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT: break;
        default:
            root = ybuild_node(&b, &e, 0);
            if (root == NULL) b.failed = true;
            break;
        }
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&b.parser);
    free(b.anch);
    if (b.failed) return NULL;
    if (root == NULL) {
        diag_add(cx, 1, 1, "empty config (expected a mapping with 'policies' or 'domain')");
        return NULL;
    }
    return root;
}

/* ---- tree access ------------------------------------------------------------------ */

const sl_ynode *sl__get(const sl_ynode *map, const char *key) {
    if (map == NULL || map->kind != SL_YMAP) return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->v[2 * i]->s, key) == 0) return map->v[2 * i + 1];
    return NULL;
}

/* Reports every key of `map` not in `allowed` (listing what is expected) and every
 * repeated key: both would otherwise be ignored silently. */
bool sl__check_fields(sl__ctx *cx, const sl_ynode *map, const char *what,
                      const char *const *allowed) {
    if (map == NULL || map->kind != SL_YMAP) {
        sl__err(cx, map, "%s must be a mapping (expected key: value pairs)", what);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < map->n; i++) {
        const sl_ynode *k = map->v[2 * i];
        bool known = false;
        for (size_t j = 0; allowed[j] != NULL; j++)
            if (strcmp(k->s, allowed[j]) == 0) known = true;
        if (!known) {
            char list[240];
            size_t off = 0;
            list[0] = '\0';
            for (size_t j = 0; allowed[j] != NULL && off < sizeof(list); j++) {
                int w = snprintf(list + off, sizeof(list) - off, "%s%s", j ? ", " : "",
                                 allowed[j]);
                if (w < 0) break;
                off += (size_t)w;
            }
            if (off >= sizeof(list)) memcpy(list + sizeof(list) - 4, "...", 4);
            const char *dym = sl__did_you_mean(k->s, allowed);
            sl__err(cx, k, "unknown field '%.60s' in %s (%s%s%sexpected one of: %s)", k->s, what,
                    dym ? "did you mean '" : "", dym ? dym : "", dym ? "'? " : "", list);
            ok = false;
        }
    }
    ok &= sl__check_dups(cx, map, what);
    return ok;
}

/* Duplicate keys of a mapping, each reported at the repeat with the first's position.
 * Small maps compare pairs; large ones (per-client lists run to tens of thousands of
 * keys) go through a hash set, so the check stays linear. */
bool sl__check_dups(sl__ctx *cx, const sl_ynode *map, const char *what) {
    if (map == NULL || map->kind != SL_YMAP) return true;
    bool ok = true;
    if (map->n <= 8) {
        for (size_t i = 0; i < map->n; i++)
            for (size_t j = 0; j < i; j++)
                if (strcmp(map->v[2 * j]->s, map->v[2 * i]->s) == 0) {
                    const sl_ynode *k = map->v[2 * i];
                    sl__err(cx, k, "duplicate field '%.60s' in %s (first at %d:%d; expected it "
                            "once)", k->s, what, map->v[2 * j]->line, map->v[2 * j]->col);
                    ok = false;
                    break;
                }
        return ok;
    }
    sl__set set = {0};
    for (size_t i = 0; i < map->n; i++) {
        const sl_ynode *k = map->v[2 * i];
        const void *prev;
        int r = sl__set_put(&set, k->s, strlen(k->s), k, &prev);
        if (r < 0) {
            cx->cfg->arena.oom = true;
            break;
        }
        if (r == 1) {
            const sl_ynode *f = prev;
            sl__err(cx, k, "duplicate field '%.60s' in %s (first at %d:%d; expected it once)",
                    k->s, what, f->line, f->col);
            ok = false;
        }
    }
    sl__set_free(&set);
    return ok;
}

static bool is_null(const sl_ynode *n) {
    return n != NULL && n->kind == SL_YSCALAR && n->plain &&
           (n->len == 0 || strcmp(n->s, "null") == 0 || strcmp(n->s, "~") == 0);
}

const char *sl__get_str(sl__ctx *cx, const sl_ynode *n, const char *what) {
    if (n == NULL) return NULL;
    if (n->kind != SL_YSCALAR || is_null(n)) {
        sl__err(cx, n, "%s must be a string (expected a plain value)", what);
        return NULL;
    }
    return n->s;
}

bool sl__get_bool(sl__ctx *cx, const sl_ynode *n, bool *out) {
    if (n != NULL && n->kind == SL_YSCALAR) {
        if (strcmp(n->s, "true") == 0 || strcmp(n->s, "True") == 0) {
            *out = true;
            return true;
        }
        if (strcmp(n->s, "false") == 0 || strcmp(n->s, "False") == 0) {
            *out = false;
            return true;
        }
    }
    sl__err(cx, n, "bad boolean '%.40s' (expected true or false)",
            n && n->kind == SL_YSCALAR ? n->s : "");
    return false;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (*s == '\0') return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        /* 1_000_000 reads better than 1000000; an underscore stands only between digits
         * (a lone "_" or "1__0" is not a number, never a silent 0) */
        if (*p == '_') {
            if (p == s || p[-1] < '0' || p[-1] > '9' || p[1] < '0' || p[1] > '9') return false;
            continue;
        }
        if (*p < '0' || *p > '9') return false;
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

bool sl__get_u64(sl__ctx *cx, const sl_ynode *n, uint64_t max, uint64_t *out) {
    uint64_t v;
    if (n == NULL || n->kind != SL_YSCALAR || !parse_u64(n->s, &v)) {
        sl__err(cx, n, "bad number '%.40s' (expected a whole number)",
                n && n->kind == SL_YSCALAR ? n->s : "");
        return false;
    }
    if (v > max) {
        sl__err(cx, n, "number %.40s is too large (expected at most %llu)", n->s,
                (unsigned long long)max);
        return false;
    }
    *out = v;
    return true;
}

/* ---- values ----------------------------------------------------------------------- */

static const struct {
    const char *name;
    int64_t ns;
} units[] = {
    {"ns", 1},
    {"us", 1000},
    {"ms", 1000000},
    {"s", SLUICE_NS_PER_S},
    {"sec", SLUICE_NS_PER_S},
    {"second", SLUICE_NS_PER_S},
    {"seconds", SLUICE_NS_PER_S},
    {"m", 60 * SLUICE_NS_PER_S},
    {"min", 60 * SLUICE_NS_PER_S},
    {"minute", 60 * SLUICE_NS_PER_S},
    {"minutes", 60 * SLUICE_NS_PER_S},
    {"h", 3600 * SLUICE_NS_PER_S},
    {"hour", 3600 * SLUICE_NS_PER_S},
    {"hours", 3600 * SLUICE_NS_PER_S},
    {"d", 86400 * SLUICE_NS_PER_S},
    {"day", 86400 * SLUICE_NS_PER_S},
    {"days", 86400 * SLUICE_NS_PER_S},
    {"w", 7 * 86400 * SLUICE_NS_PER_S},
    {"week", 7 * 86400 * SLUICE_NS_PER_S},
    {"weeks", 7 * 86400 * SLUICE_NS_PER_S},
};

static bool unit_ns(const char *u, int64_t *ns) {
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(u, units[i].name) == 0) {
            *ns = units[i].ns;
            return true;
        }
    return false;
}

/* A fraction ("0.1", "1", "10%", at most 6 decimals) as parts per million, exactly (no
 * floating point); false when malformed or above max_ppm. */
bool sl__parse_ppm(const char *s, uint64_t max_ppm, uint64_t *out) {
    uint64_t whole = 0, frac = 0, scale = 1000000;
    const char *p = s;
    bool digits = false;
    while (*p >= '0' && *p <= '9' && whole < 10000000) whole = whole * 10 + (uint64_t)(*p++ - '0'), digits = true;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (scale > 1) {
                scale /= 10;
                frac += (uint64_t)(*p - '0') * scale;
            }
            p++;
            digits = true;
        }
    }
    uint64_t ppm = whole * 1000000 + frac;
    if (*p == '%' && p[1] == '\0') {
        ppm /= 100;
        p++;
    }
    if (!digits || *p != '\0' || ppm > max_ppm) return false;
    *out = ppm;
    return true;
}

/* "<digits><unit>", the unit mandatory: a bare 30 could be seconds or milliseconds. */
bool sl__parse_duration(const char *s, int64_t *ns) {
    const char *p = s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') {
        if (v > (uint64_t)INT64_MAX / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
    }
    while (*p == ' ') p++;
    int64_t u;
    if (!unit_ns(p, &u)) return false;
    if (v > (uint64_t)(INT64_MAX / u)) return false;
    *ns = (int64_t)v * u;
    return true;
}

/* "N/unit" or "N/<duration>" (100/5m). Months and years have no fixed length: a rate
 * over them is refused here (use a calendar quota instead). */
bool sl__parse_rate(const char *s, uint64_t *limit, int64_t *period_ns) {
    const char *slash = strchr(s, '/');
    if (slash == NULL || slash == s || slash - s > 20) return false;
    char num[24];
    size_t nl = 0;
    for (const char *p = s; p < slash; p++)
        if (*p != ' ') num[nl++] = *p;
    num[nl] = '\0';
    if (!parse_u64(num, limit)) return false;
    const char *per = slash + 1;
    while (*per == ' ') per++;
    if (unit_ns(per, period_ns)) return true;
    return sl__parse_duration(per, period_ns) && *period_ns > 0;
}

bool sl__parse_quota(const char *s, uint64_t *limit, sluice_period *p) {
    const char *slash = strchr(s, '/');
    if (slash == NULL || slash == s || slash - s > 20) return false;
    char num[24];
    size_t nl = 0;
    for (const char *q = s; q < slash; q++)
        if (*q != ' ') num[nl++] = *q;
    num[nl] = '\0';
    if (!parse_u64(num, limit)) return false;
    const char *per = slash + 1;
    while (*per == ' ') per++;
    if (!strcmp(per, "h") || !strcmp(per, "hour")) *p = SLUICE_PERIOD_HOUR;
    else if (!strcmp(per, "d") || !strcmp(per, "day")) *p = SLUICE_PERIOD_DAY;
    else if (!strcmp(per, "w") || !strcmp(per, "week")) *p = SLUICE_PERIOD_WEEK;
    else if (!strcmp(per, "mo") || !strcmp(per, "month")) *p = SLUICE_PERIOD_MONTH;
    else return false;
    return true;
}

/* ---- matching helpers ------------------------------------------------------------- */

/* Why iterative with one backtrack point: '*'-only globs match in O(n*m) worst case
 * without recursion, so a hostile path cannot blow the stack. */
bool sl__glob(const char *pat, const char *s, size_t len) {
    size_t pi = 0, si = 0, star = (size_t)-1, mark = 0;
    size_t plen = strlen(pat);
    while (si < len) {
        if (pi < plen && pat[pi] == '*') {
            star = pi++;
            mark = si;
        } else if (pi < plen && pat[pi] == s[si]) {
            pi++;
            si++;
        } else if (star != (size_t)-1) {
            pi = star + 1;
            si = ++mark;
        } else {
            return false;
        }
    }
    while (pi < plen && pat[pi] == '*') pi++;
    return pi == plen;
}

/* FNV-1a over two byte strings: stable across processes and machines, so every
 * instance puts the same client in or out of a rollout. Not a security boundary. */
uint64_t sl__hash64(const void *a, size_t alen, const void *b, size_t blen) {
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    const unsigned char *p = a;
    for (size_t i = 0; i < alen; i++) h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    h = (h ^ 0xff) * UINT64_C(0x100000001b3);
    p = b;
    for (size_t i = 0; i < blen; i++) h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return h;
}
