/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c -- reading traces as streams: files (gzip or plain, through zlib, which reads
 * both, each opened at its first read and closed at its end) in chunks of 1 MiB (64 MiB
 * shared when there are many files, at least 64 KiB each) split into lines, each line parsed and copied into one allocation,
 * a reorder buffer per file (a FIFO of in-order records plus a min-heap of the others,
 * released once it holds `reorder_ns` of the file's traffic or its share of
 * `reorder_bytes`), and a merge of the files'
 * heads. Bounded: memory is the chunks plus the reorder buffers, whatever the file sizes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "trace.h"

#define CHUNK_MAX (1u << 20)    /* a file's read chunk: 1 MiB, less when many files share */
#define CHUNK_MIN (64u << 10)   /* BUFFERS_BYTES, down to 64 KiB */
#define BUFFERS_BYTES (64u << 20)
#define HOLD_FIRST 16           /* first capacity of a file's FIFO and heap (they double) */

typedef struct heap {
    sl_trace_rec **v;
    size_t n, cap;
} heap;

static bool rec_before(const sl_trace_rec *a, const sl_trace_rec *b) {
    return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->seq < b->seq);
}

static bool heap_push(heap *h, sl_trace_rec *r) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : HOLD_FIRST;
        sl_trace_rec **nv = realloc(h->v, nc * sizeof(*nv));
        if (nv == NULL) return false;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!rec_before(r, h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = r;
    return true;
}

static sl_trace_rec *heap_pop(heap *h) {
    if (h->n == 0) return NULL;
    sl_trace_rec *top = h->v[0], *last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && rec_before(h->v[c + 1], h->v[c])) c++;
        if (!rec_before(h->v[c], last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

/* A file's held records: those that arrived in order go to a FIFO (already sorted: O(1),
 * no cache misses), only the ones older than the FIFO's tail to the heap. The earliest is
 * the smaller of the two heads. Sorted logs never touch the heap. */
typedef struct hold {
    sl_trace_rec **q;
    size_t head, n, cap;
    heap h;
} hold;

static bool hold_push(hold *d, sl_trace_rec *r) {
    if (d->n > 0 && rec_before(r, d->q[(d->head + d->n - 1) % d->cap])) return heap_push(&d->h, r);
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : HOLD_FIRST;
        sl_trace_rec **nq = malloc(nc * sizeof(*nq));
        if (nq == NULL) return false;
        for (size_t i = 0; i < d->n; i++) nq[i] = d->q[(d->head + i) % d->cap];
        free(d->q);
        d->q = nq;
        d->head = 0;
        d->cap = nc;
    }
    d->q[(d->head + d->n++) % d->cap] = r;
    return true;
}

static size_t hold_count(const hold *d) { return d->n + d->h.n; }

static sl_trace_rec *hold_top(const hold *d) {
    sl_trace_rec *a = d->n ? d->q[d->head] : NULL, *b = d->h.n ? d->h.v[0] : NULL;
    if (a == NULL) return b;
    if (b == NULL) return a;
    return rec_before(b, a) ? b : a;
}

static sl_trace_rec *hold_pop(hold *d) {
    sl_trace_rec *top = hold_top(d);
    if (top == NULL) return NULL;
    if (d->n && top == d->q[d->head]) {
        d->head = (d->head + 1) % d->cap;
        d->n--;
        return top;
    }
    return heap_pop(&d->h);
}

typedef struct tfile {
    char *name;
    gzFile gz;
    bool eof;
    sl_trace_format format;
    sl_trace_layout *layout;
    char *buf;          /* chunk + room for one carried-over partial line; NULL before the
                           file's first read and after its end (file_start, file_end) */
    size_t len, off;    /* bytes in buf, start of the unread part */
    uint64_t line;
    bool skipping;      /* inside a line longer than SL_TRACE_MAX_LINE */
    uint64_t skip_from;
    hold held;
    size_t held_bytes;
    int64_t max_t;      /* latest time seen in this file */
    bool any;
} tfile;

struct sl_trace_reader {
    sl_trace_options o;
    tfile *f;
    size_t n;
    uint64_t seq;
    sl_trace_stats st;
    size_t held_total;
    size_t per_file_bytes;
    size_t chunk;   /* bytes read at once per file */
    bool emitted_any;
    int64_t last_t;
    unsigned shown;
    char *scratch; /* a copy of a bad line for reporting */
};

const sl_trace_stats *sl_trace_stats_get(const sl_trace_reader *r) { return &r->st; }
const char *sl_trace_file_name(const sl_trace_reader *r, uint32_t file) {
    return file < r->n ? r->f[file].name : "?";
}
sl_trace_format sl_trace_file_format(const sl_trace_reader *r, uint32_t file) {
    return file < r->n ? r->f[file].format : SL_TF_AUTO;
}
size_t sl_trace_file_count(const sl_trace_reader *r) { return r->n; }
void sl_trace_rec_free(sl_trace_rec *rec) { free(rec); }

static void report_bad(sl_trace_reader *r, tfile *f, uint64_t line, const char *why,
                       const char *text, size_t len) {
    r->st.bad++;
    if (r->shown >= r->o.show_bad) return;
    r->shown++;
    FILE *out = r->o.errors ? r->o.errors : stderr;
    if (r->o.show_bad_content && text != NULL) {
        size_t n = len > 160 ? 160 : len;
        fprintf(out, "%s:%llu: %s: ", f->name, (unsigned long long)line, why);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)text[i];
            if (c >= 0x20 && c < 0x7f) fputc(c, out);
            else fprintf(out, "\\x%02x", c);
        }
        fprintf(out, "%s\n", len > n ? "..." : "");
    } else {
        fprintf(out, "%s:%llu: %s\n", f->name, (unsigned long long)line, why);
    }
}

/* The parsed record in one allocation: the struct, then every string it points to. */
static sl_trace_rec *pack(const sl_trace_rec *src) {
    size_t need = sizeof(*src) + src->n_headers * sizeof(sl_header) + src->method.len + src->path.len + src->host.len +
                  src->client_ip.len + src->route.len;
    for (size_t i = 0; i < src->n_headers; i++)
        need += src->headers[i].name.len + src->headers[i].value.len;
    sl_trace_rec *d = malloc(need);
    if (d == NULL) return NULL;
    *d = *src;
    d->headers = (sl_header *)(d + 1);
    memcpy(d->headers, src->headers, src->n_headers * sizeof(sl_header));
    char *w = (char *)(d->headers + src->n_headers);
#define COPY(field)                                                  \
    do {                                                             \
        if (src->field.p != NULL) {                                  \
            memcpy(w, src->field.p, src->field.len);                 \
            d->field.p = w;                                          \
            w += src->field.len;                                     \
        }                                                            \
    } while (0)
    COPY(method);
    COPY(path);
    COPY(host);
    COPY(client_ip);
    COPY(route);
    for (size_t i = 0; i < src->n_headers; i++) {
        COPY(headers[i].name);
        COPY(headers[i].value);
    }
#undef COPY
    d->size = need;
    return d;
}

static sl_trace_format detect(const char *line, size_t len) {
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i < len && line[i] == '{') return SL_TF_JSON;
    /* a CSV header names columns: letters, digits, _ . - and commas, no spaces inside */
    bool comma = false;
    for (size_t k = i; k < len; k++) {
        char c = line[k];
        if (c == ',') comma = true;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || c == '.' || c == '-' || c == '@' || c == ':' || c == '"' || c == ' '))
            return SL_TF_NGINX;
    }
    return comma ? SL_TF_CSV : SL_TF_NGINX;
}

/* One complete line: parse it into a held record (or count it as bad). */
static void take_line(sl_trace_reader *r, tfile *f, char *line, size_t len) {
    while (len > 0 && (line[len - 1] == '\r')) len--;
    size_t lead = 0;
    while (lead < len && (line[lead] == ' ' || line[lead] == '\t')) lead++;
    if (lead == len) return; /* blank */
    r->st.lines++;
    char err[256];
    if (f->layout == NULL) {
        sl_trace_format fmt = r->o.format != SL_TF_AUTO ? r->o.format : detect(line, len);
        f->format = fmt;
        f->layout = sl_trace_layout_create(fmt, r->o.log_format, r->o.map, err, sizeof(err));
        if (f->layout == NULL) {
            report_bad(r, f, f->line, err, NULL, 0);
            return;
        }
        if (fmt == SL_TF_CSV) {
            if (!sl_trace_layout_header(f->layout, line, len))
                report_bad(r, f, f->line, "CSV header expected (a 'time' column at least)", line, len);
            return;
        }
    }
    /* keep the original for the report: parsing unescapes in place */
    if (r->shown < r->o.show_bad && r->o.show_bad_content) memcpy(r->scratch, line, len);
    sl_trace_rec rec;
    const char *why = sl_trace_parse_line(f->layout, line, len, &rec);
    if (why != NULL) {
        report_bad(r, f, f->line, why, r->scratch, len);
        return;
    }
    rec.seq = r->seq++;
    rec.file = (uint32_t)(f - r->f);
    rec.line = f->line;
    rec.rechecks = 0;
    rec.held_ns = 0;
    rec.first_t_ns = rec.t_ns;
    sl_trace_rec *p = pack(&rec);
    if (p == NULL || !hold_push(&f->held, p)) {
        free(p);
        report_bad(r, f, f->line, "out of memory", NULL, 0);
        return;
    }
    f->held_bytes += p->size;
    r->held_total += p->size;
    if (r->held_total > r->st.held_bytes_max) r->st.held_bytes_max = r->held_total;
    if (!f->any || rec.t_ns > f->max_t) f->max_t = rec.t_ns;
    f->any = true;
}

/* A file is opened (standard input excepted: at sl_trace_open) and given its buffer at its
 * first read, and closed with its buffer, zlib's state and its layout as soon as its last
 * line was taken: what a file that was read to its end keeps is its held records and its
 * tfile, so 10,000 small files cost about what one does (issue 27: 80 KB each, 834 MB). */
static bool file_start(sl_trace_reader *r, tfile *f) {
    f->buf = malloc(r->chunk + SL_TRACE_MAX_LINE + 1);
    if (f->buf != NULL && f->gz == NULL) {
        errno = 0;
        f->gz = gzopen(f->name, "rb");
    }
    if (f->buf == NULL || f->gz == NULL) {
        FILE *out = r->o.errors ? r->o.errors : stderr;
        fprintf(out, "%s: %s\n", f->name, f->buf == NULL ? "out of memory" : errno ? strerror(errno) : "cannot open");
        r->st.read_errors++;
        free(f->buf);
        f->buf = NULL;
        f->eof = true;
        return false;
    }
    gzbuffer(f->gz, r->chunk < 256 * 1024 ? (unsigned)r->chunk : 256 * 1024);
    return true;
}

static void file_end(tfile *f) {
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
    free(f->buf);
    f->buf = NULL;
    f->len = f->off = 0;
    sl_trace_layout_destroy(f->layout);
    f->layout = NULL;
}

/* Reads until at least one more line was taken, or the file ends. */
static void read_more(sl_trace_reader *r, tfile *f) {
    if (f->buf == NULL && (f->eof || !file_start(r, f))) return;
    for (;;) {
        /* lines already in the buffer */
        char *start = f->buf + f->off, *end = f->buf + f->len;
        char *nl = memchr(start, '\n', (size_t)(end - start));
        if (nl != NULL) {
            f->line++;
            f->off = (size_t)(nl + 1 - f->buf);
            if (f->skipping) {
                f->skipping = false;
                report_bad(r, f, f->skip_from, "line too long", NULL, 0);
                continue;
            }
            take_line(r, f, start, (size_t)(nl - start));
            return;
        }
        if (f->eof) {
            if (start < end) { /* a last line without its newline */
                f->line++;
                f->off = f->len;
                if (f->skipping) report_bad(r, f, f->skip_from, "line too long", NULL, 0);
                else take_line(r, f, start, (size_t)(end - start));
                f->skipping = false;
            }
            file_end(f);
            return;
        }
        /* keep the partial line, refill behind it */
        size_t keep = (size_t)(end - start);
        if (keep > SL_TRACE_MAX_LINE) {
            if (!f->skipping) {
                f->skipping = true;
                f->skip_from = f->line + 1;
            }
            keep = 0;
        }
        memmove(f->buf, start, keep);
        f->len = keep;
        f->off = 0;
        int got = gzread(f->gz, f->buf + f->len, (unsigned)r->chunk);
        if (got < 0) {
            int errnum;
            const char *msg = gzerror(f->gz, &errnum);
            FILE *out = r->o.errors ? r->o.errors : stderr;
            fprintf(out, "%s: read error after line %llu: %s\n", f->name,
                    (unsigned long long)f->line, errnum == Z_ERRNO ? strerror(errno) : msg);
            r->st.read_errors++;
            f->eof = true;
            continue;
        }
        if (got == 0) {
            int errnum;
            gzerror(f->gz, &errnum);
            if (errnum == Z_BUF_ERROR) { /* zlib: the gzip stream ended early */
                FILE *out = r->o.errors ? r->o.errors : stderr;
                fprintf(out, "%s: truncated gzip stream after line %llu\n", f->name,
                        (unsigned long long)f->line);
                r->st.read_errors++;
            }
            f->eof = true;
            continue;
        }
        r->st.bytes += (uint64_t)got;
        f->len += (size_t)got;
    }
}

/* The file's earliest held record once it may leave: when the file holds reorder_ns of
 * traffic behind it, its share of the memory, or nothing more will come. */
static sl_trace_rec *file_head(sl_trace_reader *r, tfile *f) {
    for (;;) {
        if (hold_count(&f->held) > 0) {
            sl_trace_rec *top = hold_top(&f->held);
            if (f->eof && f->off >= f->len) return top;
            if (f->max_t - top->t_ns >= r->o.reorder_ns) return top;
            if (f->held_bytes > r->per_file_bytes) {
                r->st.early_flush++;
                return top;
            }
        } else if (f->eof && f->off >= f->len) {
            return NULL;
        }
        read_more(r, f);
    }
}

sl_trace_rec *sl_trace_next(sl_trace_reader *r) {
    tfile *best = NULL;
    for (size_t i = 0; i < r->n; i++) {
        sl_trace_rec *h = file_head(r, &r->f[i]);
        if (h != NULL && (best == NULL || rec_before(h, hold_top(&best->held)))) best = &r->f[i];
    }
    if (best == NULL) return NULL;
    sl_trace_rec *rec = hold_pop(&best->held);
    best->held_bytes -= rec->size;
    r->held_total -= rec->size;
    r->st.records++;
    if (r->emitted_any && rec->t_ns < r->last_t) {
        /* older than what already left: beyond the reorder window (or the buffer was
         * full); the caller replays it at the time already reached */
        r->st.late++;
        if (r->last_t - rec->t_ns > r->st.max_late_ns) r->st.max_late_ns = r->last_t - rec->t_ns;
    } else {
        r->last_t = rec->t_ns;
    }
    r->emitted_any = true;
    return rec;
}

sl_trace_reader *sl_trace_open(char *const *paths, size_t n, const sl_trace_options *opt,
                               char *err, size_t errlen) {
    if (n == 0) {
        snprintf(err, errlen, "no trace files given");
        return NULL;
    }
    sl_trace_reader *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->o = *opt;
    if (r->o.reorder_ns <= 0) r->o.reorder_ns = 60 * INT64_C(1000000000);
    if (r->o.reorder_bytes == 0) r->o.reorder_bytes = (size_t)64 << 20;
    r->per_file_bytes = r->o.reorder_bytes / n;
    r->chunk = BUFFERS_BYTES / n;
    if (r->chunk > CHUNK_MAX) r->chunk = CHUNK_MAX;
    if (r->chunk < CHUNK_MIN) r->chunk = CHUNK_MIN;
    r->f = calloc(n, sizeof(tfile));
    r->scratch = malloc(SL_TRACE_MAX_LINE + 1);
    if (r->f == NULL || r->scratch == NULL) {
        snprintf(err, errlen, "out of memory");
        sl_trace_close(r);
        return NULL;
    }
    if (r->o.format == SL_TF_NGINX || (r->o.format == SL_TF_AUTO && r->o.log_format)) {
        /* check the log format once, before any file is read */
        sl_trace_layout *l = sl_trace_layout_create(SL_TF_NGINX, r->o.log_format, r->o.map, err, errlen);
        if (l == NULL) {
            sl_trace_close(r);
            return NULL;
        }
        sl_trace_layout_destroy(l);
    }
    for (size_t i = 0; i < n; i++) {
        tfile *f = &r->f[r->n];
        f->name = strdup(paths[i]);
        if (f->name == NULL) {
            snprintf(err, errlen, "out of memory");
            sl_trace_close(r);
            return NULL;
        }
        r->n++;
        /* a file that cannot be read is refused now; it is opened again at its first read
         * (file_start), so that only the files being read hold a descriptor */
        errno = 0;
        int fd = -1;
        if (strcmp(paths[i], "-") == 0) f->gz = gzdopen(0, "rb");
        else fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        if (fd >= 0) close(fd);
        if (fd < 0 && f->gz == NULL) {
            snprintf(err, errlen, "%s: %s", paths[i], errno ? strerror(errno) : "cannot open");
            sl_trace_close(r);
            return NULL;
        }
    }
    return r;
}

void sl_trace_close(sl_trace_reader *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++) {
        tfile *f = &r->f[i];
        if (f->gz) gzclose(f->gz);
        sl_trace_rec *x;
        while ((x = hold_pop(&f->held)) != NULL) free(x);
        free(f->held.h.v);
        free(f->held.q);
        sl_trace_layout_destroy(f->layout);
        free(f->buf);
        free(f->name);
    }
    free(r->f);
    free(r->scratch);
    free(r);
}
