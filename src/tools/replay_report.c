/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay_report.c -- what `sluice replay` prints: a text report (per policy and window:
 * outcomes, per-key peak distribution, suggested limits, most affected keys), the same as
 * JSON, SVG plots (traffic by outcome over the trace; per-key peaks against the limit) and
 * one offline HTML page. Keys appear only as keyed hashes unless --raw-keys.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/json.h"
#include "replay.h"
#include "svg.h"

#define NS INT64_C(1000000000)

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0; }

/* "1,234,567" */
static const char *commas(uint64_t v, char *buf) {
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

static void fmt_dur(char *buf, size_t len, int64_t ns) {
    if (ns < 0) ns = 0;
    if (ns < NS) snprintf(buf, len, "%" PRId64 "ms", ns / 1000000);
    else if (ns < 60 * NS) snprintf(buf, len, "%.1fs", (double)ns / 1e9);
    else if (ns < 3600 * NS) snprintf(buf, len, "%" PRId64 "m%02" PRId64 "s", ns / (60 * NS), ns / NS % 60);
    else if (ns < 86400 * NS) snprintf(buf, len, "%" PRId64 "h%02" PRId64 "m", ns / (3600 * NS), ns / (60 * NS) % 60);
    else snprintf(buf, len, "%" PRId64 "d%02" PRId64 "h", ns / (86400 * NS), ns / (3600 * NS) % 24);
}

static void fmt_w(char *buf, size_t len, int64_t ns) {
    int64_t s = ns / NS;
    if (s % 86400 == 0) snprintf(buf, len, "%" PRId64 "d", s / 86400);
    else if (s % 3600 == 0) snprintf(buf, len, "%" PRId64 "h", s / 3600);
    else if (s % 60 == 0) snprintf(buf, len, "%" PRId64 "min", s / 60);
    else snprintf(buf, len, "%" PRId64 "s", s);
}

static void fmt_time(char *buf, size_t len, int64_t ns) {
    time_t t = (time_t)(ns / NS);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

const char *rp_win_algo(const rp_win *w) {
    if (w->info->limiter == NULL) return "unlimited";
    const char *n = sluice_algo_name(sluice_limiter_spec(w->info->limiter)->algo);
    return n ? n : "?";
}

/* "10/s", "1000/min", "2.5/s" */
static void fmt_rate(char *buf, size_t len, uint64_t limit, int64_t period_ns) {
    static const struct { int64_t ns; const char *u; } units[] = {
        {INT64_C(86400) * NS, "day"}, {INT64_C(3600) * NS, "h"}, {60 * NS, "min"}, {NS, "s"}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (period_ns == units[i].ns) {
            snprintf(buf, len, "%" PRIu64 "/%s", limit, units[i].u);
            return;
        }
    snprintf(buf, len, "%.4g/s", (double)limit * 1e9 / (double)period_ns);
}

void rp_win_limit(const rp_win *w, char *buf, size_t len) {
    char ws[32];
    switch (w->peak_kind) {
    case RP_PEAK_INFLIGHT: snprintf(buf, len, "%" PRIu64 " in flight", w->info->quota); return;
    case RP_PEAK_BUCKET:
        fmt_rate(ws, sizeof(ws), w->rate_limit, w->w_ns);
        snprintf(buf, len, "burst %" PRIu64 " at %s", w->info->quota, ws);
        return;
    default: break;
    }
    if (w->quota_period == SLUICE_PERIOD_MONTH || (w->info->window_s <= 0 && w->peak_kind != RP_PEAK_FIXED)) {
        snprintf(buf, len, "%" PRIu64 " per month", w->info->quota);
        return;
    }
    fmt_w(ws, sizeof(ws), w->w_ns);
    snprintf(buf, len, "%" PRIu64 " per %s", w->info->quota, ws);
}

/* What a key's peak means for this window (the column header of its row). */
static void win_metric(const rp_win *w, char *buf, size_t len) {
    char ws[32];
    switch (w->peak_kind) {
    case RP_PEAK_BUCKET:
        fmt_rate(ws, sizeof(ws), w->rate_limit, w->w_ns);
        snprintf(buf, len, "burst at %s", ws);
        return;
    case RP_PEAK_FIXED:
        if (w->quota_period == SLUICE_PERIOD_MONTH) snprintf(buf, len, "per month");
        else {
            fmt_w(ws, sizeof(ws), w->w_ns);
            snprintf(buf, len, "per %s", ws);
        }
        return;
    case RP_PEAK_SLIDING:
        fmt_w(ws, sizeof(ws), w->w_ns);
        snprintf(buf, len, "any %s", ws);
        return;
    case RP_PEAK_INFLIGHT: snprintf(buf, len, "in flight"); return;
    default: snprintf(buf, len, "-"); return;
    }
}

static void fmt_suggest(const rp_run *r, const rp_win *w, char *buf, size_t len) {
    uint64_t s = rp_hist_suggest(&w->peaks, r->target);
    char m[48];
    win_metric(w, m, sizeof(m));
    if (w->peak_kind == RP_PEAK_BUCKET) snprintf(buf, len, "%" PRIu64 " (%s)", s, m);
    else if (w->peak_kind == RP_PEAK_INFLIGHT) snprintf(buf, len, "%" PRIu64 " in flight", s);
    else snprintf(buf, len, "%" PRIu64 " %s", s, m);
}

/* The composed key's parts: a chain byte, then (tag, 16-bit length, bytes) per part. */
static bool decode_key(const unsigned char *k, size_t n, char *buf, size_t len) {
    size_t o = 0, i = 1;
    if (n < 1) return false;
    buf[0] = '\0';
    while (i < n) {
        if (i + 3 > n) return false;
        unsigned char tag = k[i];
        size_t pl = (size_t)k[i + 1] << 8 | k[i + 2];
        i += 3;
        if (i + pl > n) pl = n - i; /* truncated when kept */
        const char *name = tag == 'i' ? "ip" : tag == 'h' ? "header" : tag == 'm' ? "method"
                         : tag == 'p' ? "path" : tag == 'r' ? "route" : tag == 'o' ? "host"
                         : tag == 'd' ? "descriptor" : tag == 'k' ? "key" : tag == 'v' || tag == 'w' ? "value" : NULL;
        if (name == NULL) return false;
        int w = snprintf(buf + o, len - o, "%s%s=", o ? " " : "", name);
        if (w < 0 || (size_t)w >= len - o) return false;
        o += (size_t)w;
        if (tag == 'i' && (pl == 4 || pl == 16)) {
            char ip[INET6_ADDRSTRLEN];
            inet_ntop(pl == 4 ? AF_INET : AF_INET6, k + i, ip, sizeof(ip));
            w = snprintf(buf + o, len - o, "%s", ip);
            if (w < 0 || (size_t)w >= len - o) return false;
            o += (size_t)w;
        } else {
            for (size_t j = 0; j < pl && o + 5 < len; j++) {
                unsigned char c = k[i + j];
                if (c >= 0x21 && c < 0x7f && c != '\\') buf[o++] = (char)c;
                else o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
            }
            buf[o] = '\0';
        }
        i += pl;
    }
    return true;
}

void rp_key_label(const rp_run *r, const rp_top *t, char *buf, size_t len) {
    if (r->raw_keys && decode_key(t->key, t->key_len, buf, len)) return;
    if (r->raw_keys) {
        size_t o = 0;
        for (size_t i = 0; i < t->key_len && o + 3 < len; i++) o += (size_t)snprintf(buf + o, len - o, "%02x", t->key[i]);
        return;
    }
    snprintf(buf, len, "k-%012" PRIx64, t->h >> 16);
}

static int cmp_top(const void *a, const void *b) {
    const rp_top *x = a, *y = b;
    return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

/* The window's top keys by rejections, sorted, in `out` (at most r->top). */
static size_t top_sorted(const rp_run *r, const rp_win *w, rp_top *out) {
    memcpy(out, w->top, w->ntop * sizeof(rp_top));
    qsort(out, w->ntop, sizeof(rp_top), cmp_top);
    return w->ntop < r->top ? w->ntop : r->top;
}

static const char *short_fmt(const sl_trace_reader *tr) {
    static char buf[64];
    buf[0] = '\0';
    bool seen[4] = {0};
    for (uint32_t i = 0; i < sl_trace_file_count(tr); i++) {
        sl_trace_format f = sl_trace_file_format(tr, i);
        if (f == SL_TF_AUTO || seen[f]) continue;
        seen[f] = true;
        size_t o = strlen(buf);
        snprintf(buf + o, sizeof(buf) - o, "%s%s", o ? ", " : "", sl_trace_format_name(f));
    }
    return buf[0] ? buf : "no lines";
}

void rp_report_text(const rp_run *r, const sl_trace_reader *tr, FILE *out) {
    const sl_trace_stats *ts = sl_trace_stats_get(tr);
    char a[32], b[32], c[32], d1[32], d2[32];
    fprintf(out, "sluice replay: %s over %zu file%s (%s): %s lines, %s unparsable", r->config_path,
            sl_trace_file_count(tr), sl_trace_file_count(tr) == 1 ? "" : "s", short_fmt(tr),
            commas(ts->lines, a), commas(ts->bad, b));
    if (ts->late) {
        fmt_dur(d1, sizeof(d1), ts->max_late_ns);
        fprintf(out, ", %s out of order beyond --reorder (replayed late, up to %s)",
                commas(ts->late, c), d1);
    }
    fprintf(out, "\n");
    if (r->requests == 0) {
        fprintf(out, "no requests replayed\n");
        return;
    }
    fmt_time(d1, sizeof(d1), r->first_ns);
    fmt_time(d2, sizeof(d2), r->last_ns);
    char span[32];
    fmt_dur(span, sizeof(span), r->last_ns - r->first_ns);
    fprintf(out, "trace %s .. %s UTC (%s); %s requests replayed in %.2f s", d1, d2 + 11, span,
            commas(r->requests, a), r->seconds + r->decide_seconds);
    if (r->decide_seconds > 0)
        fprintf(out, " (read %.2f s, decided %.2f s: %.0f decisions/s; CPU %.2f s: %.0f/s)",
                r->seconds, r->decide_seconds, (double)r->bench_records / r->decide_seconds,
                r->decide_cpu_seconds, (double)r->bench_records / r->decide_cpu_seconds);
    fprintf(out, "\nall: admitted %s (%.2f%%), rejected %s (%.2f%%), delayed %s",
            commas(r->admitted, a), pct(r->admitted, r->requests), commas(r->rejected, b),
            pct(r->rejected, r->requests), commas(r->delayed, c));
    if (r->missing_key) fprintf(out, ", missing key (400) %" PRIu64, r->missing_key);
    if (r->failed) fprintf(out, ", store failures %" PRIu64, r->failed);
    if (r->errors) fprintf(out, ", errors (500) %" PRIu64, r->errors);
    if (r->unmatched) fprintf(out, ", matched no policy %" PRIu64, r->unmatched);
    fprintf(out, "\n");
    if (r->store_stats.evicted || r->store_stats.refused)
        fprintf(out, "note: the memory store was full (capacity %" PRIu64 " keys): %" PRIu64
                     " keys evicted, %" PRIu64 " refused, as the config's store would; "
                     "--store-keys changes the capacity\n",
                r->store_stats.capacity, r->store_stats.evicted, r->store_stats.refused);
    if (r->keys_evicted)
        fprintf(out, "note: %" PRIu64 " key statistics were closed early (more than --max-keys "
                     "%" PRIu64 " keys at once): such a key may count twice\n",
                r->keys_evicted, r->max_keys);
    if (r->rechecks_exhausted)
        fprintf(out, "note: %" PRIu64 " requests were still delayed after %d holds and count as "
                     "rejected\n", r->rechecks_exhausted, 16);

    fprintf(out, "\nper policy and window (rejected: by this window; delayed: held or shaped)\n");
    fprintf(out, "%-18s %-16s %-14s %-16s %12s %9s %12s %7s %9s %11s %9s\n", "policy", "window",
            "algorithm", "limit", "requests", "admitted", "rejected", "rej %", "delayed",
            "total delay", "shadow");
    for (size_t i = 0; i < r->nwin; i++) {
        const rp_win *w = r->win[i];
        char lim[48], total[32];
        rp_win_limit(w, lim, sizeof(lim));
        fmt_dur(total, sizeof(total), w->delay_ns);
        fprintf(out, "%-18.18s %-16.16s %-14.14s %-16.16s %12s %8.2f%% %12s %6.2f%% %9" PRIu64
                     " %11s %9" PRIu64 "\n",
                r->pol[w->policy].name, w->info->name ? w->info->name : "", rp_win_algo(w), lim,
                commas(w->requests, a), pct(w->admitted, w->requests), commas(w->rejected, b),
                pct(w->rejected, w->requests), w->delayed, w->delayed ? total : "-", w->shadow);
    }

    fprintf(out, "\nper-key peak, against the window's capacity (limit): buckets: the burst the key\n"
                 "needed at the configured rate; windows and quotas: most units in one window (any\n"
                 "stretch of w for sliding ones, to w/%d); concurrency: most requests in flight\n", RP_SUB);
    fprintf(out, "%-18s %-16s %-15s %9s %8s %8s %8s %8s %8s %10s %10s", "policy", "window", "peak",
            "keys", "p50", "p90", "p99", "p99.9", "max", "limit", "keys over");
    if (r->suggest) fprintf(out, "  suggested (%.3g%% of keys over)", r->target * 100);
    fprintf(out, "\n");
    for (size_t i = 0; i < r->nwin; i++) {
        const rp_win *w = r->win[i];
        if (w->peak_kind == RP_PEAK_NONE) continue;
        char metric[48];
        win_metric(w, metric, sizeof(metric));
        uint64_t over = rp_hist_above(&w->peaks, w->info->quota);
        fprintf(out, "%-18.18s %-16.16s %-15.15s %9s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64
                     " %8" PRIu64 " %10" PRIu64 " %9.2f%%",
                r->pol[w->policy].name, w->info->name ? w->info->name : "", metric,
                commas(w->keys, a), rp_hist_quantile(&w->peaks, 0.5),
                rp_hist_quantile(&w->peaks, 0.9), rp_hist_quantile(&w->peaks, 0.99),
                rp_hist_quantile(&w->peaks, 0.999), w->peaks.max, w->info->quota,
                pct(over, w->keys));
        if (r->suggest) {
            char sg[96];
            fmt_suggest(r, w, sg, sizeof(sg));
            fprintf(out, "  %s", sg);
        }
        fprintf(out, "\n");
    }
    fprintf(out, "\nwhat each limit did\n");
    for (size_t i = 0; i < r->nwin; i++) {
        const rp_win *w = r->win[i];
        char lim[48];
        rp_win_limit(w, lim, sizeof(lim));
        fprintf(out, "  %s/%s: a limit of %s rejected %.2f%% of its requests and touched %.2f%% "
                     "of its keys (%" PRIu64 " of %" PRIu64 ")%s\n",
                r->pol[w->policy].name, w->info->name ? w->info->name : "", lim,
                pct(w->rejected, w->requests), pct(w->keys_touched, w->keys), w->keys_touched,
                w->keys, w->shadow ? " [shadow: would have rejected more, see 'shadow']" : "");
    }
    bool any = false;
    for (size_t i = 0; i < r->nwin; i++) any |= r->win[i]->ntop > 0;
    if (any && r->top > 0) {
        fprintf(out, "\nmost affected keys (rejections by the window)%s\n",
                r->raw_keys ? "" : "; keys are hashed, --raw-keys shows them");
        for (size_t i = 0; i < r->nwin; i++) {
            const rp_win *w = r->win[i];
            rp_top t[RP_TOPK];
            size_t n = top_sorted(r, w, t);
            for (size_t j = 0; j < n; j++) {
                char lab[512];
                rp_key_label(r, &t[j], lab, sizeof(lab));
                fprintf(out, "  %-30.30s %-40s %12s\n", j == 0 ? w->info->name : "", lab,
                        commas(t[j].count, a));
            }
        }
    }
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void json_str(FILE *out, const char *s) {
    fputc('"', out);
    size_t n = s ? strlen(s) : 0, i = 0;
    while (i < n) {
        char u[SL_JSON_UNIT_MAX];
        size_t adv, k = sl_json_unit(s + i, n - i, 0, u, &adv);
        fwrite(u, 1, k, out);
        i += adv;
    }
    fputc('"', out);
}

static void json_series(FILE *out, const rp_run *r, const rp_series *s) {
    static const char *const names[RP_NSERIES] = {"admitted", "rejected", "delayed", "shadow",
                                                  "rejected_elsewhere"};
    fprintf(out, "{");
    for (int k = 0; k < RP_NSERIES; k++) {
        fprintf(out, "%s\"%s\":[", k ? "," : "", names[k]);
        for (uint32_t i = 0; i < r->nbuckets; i++) fprintf(out, "%s%" PRIu64, i ? "," : "", s->v[k][i]);
        fprintf(out, "]");
    }
    fprintf(out, "}");
}

void rp_report_json(const rp_run *r, const sl_trace_reader *tr, FILE *out) {
    const sl_trace_stats *ts = sl_trace_stats_get(tr);
    fprintf(out, "{\"config\":");
    json_str(out, r->config_path);
    fprintf(out, ",\"files\":[");
    for (uint32_t i = 0; i < sl_trace_file_count(tr); i++) {
        fprintf(out, "%s{\"name\":", i ? "," : "");
        json_str(out, sl_trace_file_name(tr, i));
        fprintf(out, ",\"format\":\"%s\"}", sl_trace_format_name(sl_trace_file_format(tr, i)));
    }
    fprintf(out, "],\"input\":{\"lines\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"late\":%" PRIu64
                 ",\"max_late_ms\":%" PRId64 ",\"early_flush\":%" PRIu64 ",\"bytes\":%" PRIu64
                 ",\"read_errors\":%" PRIu64 ",\"reorder_peak_bytes\":%zu}",
            ts->lines, ts->bad, ts->late, ts->max_late_ns / 1000000, ts->early_flush, ts->bytes,
            ts->read_errors, ts->held_bytes_max);
    fprintf(out, ",\"trace\":{\"first_ns\":%" PRId64 ",\"last_ns\":%" PRId64 "}", r->first_ns, r->last_ns);
    fprintf(out, ",\"seconds\":%.6f,\"decide_seconds\":%.6f,\"read_cpu_seconds\":%.6f"
                 ",\"decide_cpu_seconds\":%.6f",
            r->seconds, r->decide_seconds, r->read_cpu_seconds, r->decide_cpu_seconds);
    fprintf(out, ",\"totals\":{\"requests\":%" PRIu64 ",\"admitted\":%" PRIu64 ",\"rejected\":%" PRIu64
                 ",\"delayed\":%" PRIu64 ",\"missing_key\":%" PRIu64 ",\"failed\":%" PRIu64
                 ",\"errors\":%" PRIu64 ",\"unmatched\":%" PRIu64 ",\"rechecks\":%" PRIu64
                 ",\"settled\":%" PRIu64 ",\"released\":%" PRIu64 ",\"keys_evicted\":%" PRIu64 "}",
            r->requests, r->admitted, r->rejected, r->delayed, r->missing_key, r->failed, r->errors,
            r->unmatched, r->rechecks, r->settled, r->released, r->keys_evicted);
    fprintf(out, ",\"store\":{\"capacity\":%" PRIu64 ",\"keys\":%" PRIu64 ",\"evicted\":%" PRIu64
                 ",\"refused\":%" PRIu64 ",\"expired\":%" PRIu64 "}",
            r->store_stats.capacity, r->store_stats.keys, r->store_stats.evicted,
            r->store_stats.refused, r->store_stats.expired);
    fprintf(out, ",\"policies\":[");
    for (size_t i = 0; i < r->npol; i++) {
        const rp_policy *p = &r->pol[i];
        fprintf(out, "%s{\"name\":", i ? "," : "");
        json_str(out, p->name);
        fprintf(out, ",\"requests\":%" PRIu64 ",\"admitted\":%" PRIu64 ",\"rejected\":%" PRIu64
                     ",\"rejected_elsewhere\":%" PRIu64 ",\"delayed\":%" PRIu64 ",\"shadow\":%" PRIu64
                     ",\"missing_key\":%" PRIu64 "}",
                p->requests, p->admitted, p->rejected, p->rejected_other, p->delayed, p->shadow,
                p->missing_key);
    }
    fprintf(out, "],\"windows\":[");
    for (size_t i = 0; i < r->nwin; i++) {
        const rp_win *w = r->win[i];
        fprintf(out, "%s{\"policy\":", i ? "," : "");
        json_str(out, r->pol[w->policy].name);
        fprintf(out, ",\"window\":");
        json_str(out, w->info->name);
        static const char *const kinds[] = {"none", "burst", "aligned", "sliding", "in_flight"};
        char metric[48];
        win_metric(w, metric, sizeof(metric));
        fprintf(out, ",\"algorithm\":\"%s\",\"quota\":%" PRIu64 ",\"window_s\":%" PRId64
                     ",\"concurrency\":%s,\"peak\":{\"kind\":\"%s\",\"meaning\":\"%s\"}",
                rp_win_algo(w), w->info->quota, w->info->window_s, w->concurrency ? "true" : "false",
                kinds[w->peak_kind], metric);
        fprintf(out, ",\"requests\":%" PRIu64 ",\"units\":%" PRIu64 ",\"admitted\":%" PRIu64
                     ",\"rejected\":%" PRIu64 ",\"rejected_elsewhere\":%" PRIu64 ",\"delayed\":%" PRIu64
                     ",\"delay_total_ms\":%" PRId64 ",\"shadow\":%" PRIu64 ",\"errors\":%" PRIu64,
                w->requests, w->units, w->admitted, w->rejected, w->rejected_other, w->delayed,
                w->delay_ns / 1000000, w->shadow, w->errors);
        fprintf(out, ",\"keys\":%" PRIu64 ",\"keys_touched\":%" PRIu64 ",\"keys_over_limit\":%" PRIu64,
                w->keys, w->keys_touched, rp_hist_above(&w->peaks, w->info->quota));
        fprintf(out, ",\"key_peak\":{\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64
                     ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64 "}",
                rp_hist_quantile(&w->peaks, 0.5), rp_hist_quantile(&w->peaks, 0.9),
                rp_hist_quantile(&w->peaks, 0.99), rp_hist_quantile(&w->peaks, 0.999), w->peaks.max);
        if (r->suggest)
            fprintf(out, ",\"suggest\":{\"target_share\":%g,\"limit\":%" PRIu64 "}", r->target,
                    rp_hist_suggest(&w->peaks, r->target));
        fprintf(out, ",\"top_keys\":[");
        rp_top t[RP_TOPK];
        size_t n = top_sorted(r, w, t);
        for (size_t j = 0; j < n; j++) {
            char lab[512];
            rp_key_label(r, &t[j], lab, sizeof(lab));
            fprintf(out, "%s{\"key\":", j ? "," : "");
            json_str(out, lab);
            fprintf(out, ",\"rejected\":%" PRIu64 "}", t[j].count);
        }
        fprintf(out, "]}");
    }
    fprintf(out, "],\"series\":{\"start_ns\":%" PRId64 ",\"bucket_ms\":%" PRId64 ",\"all\":",
            r->t0_ns, r->bucket_ns / 1000000);
    json_series(out, r, r->all);
    fprintf(out, ",\"policies\":{");
    bool first = true;
    for (size_t i = 0; i < r->npol; i++) {
        if (r->pol[i].series == NULL) continue;
        fprintf(out, "%s", first ? "" : ",");
        first = false;
        json_str(out, r->pol[i].name);
        fprintf(out, ":");
        json_series(out, r, r->pol[i].series);
    }
    fprintf(out, "}}}\n");
}

/* ---- plots ------------------------------------------------------------------------------------ */

/* Per-second rates of one series (bucket counts / bucket seconds). */
static double *rates(const rp_run *r, const rp_series *s, int kind) {
    double *v = calloc(r->nbuckets ? r->nbuckets : 1, sizeof(double));
    if (v == NULL) return NULL;
    double secs = (double)r->bucket_ns / 1e9;
    for (uint32_t i = 0; i < r->nbuckets; i++) v[i] = (double)s->v[kind][i] / secs;
    return v;
}

/* Policies by requests, busiest first, at most `max`, those with a series only. */
static size_t busiest(const rp_run *r, size_t *idx, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < r->npol; i++) {
        if (r->pol[i].series == NULL || r->pol[i].requests == 0) continue;
        size_t j = n < max ? n++ : max - 1;
        if (j == max - 1 && n == max && r->pol[idx[j]].requests >= r->pol[i].requests) continue;
        idx[j] = i;
        while (j > 0 && r->pol[idx[j]].requests > r->pol[idx[j - 1]].requests) {
            size_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
            j--;
        }
    }
    return n;
}

static void traffic_plot(const rp_run *r, sl_buf *b, const char *id) {
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    static char sub[256], bucket[64], titles[SL_PLOT_PANELS][160];
    char span[32];
    fmt_dur(span, sizeof(span), r->last_ns - r->first_ns);
    double bs = (double)r->bucket_ns / 1e9;
    if (bs == 1) snprintf(bucket, sizeof(bucket), "requests/s");
    else snprintf(bucket, sizeof(bucket), "requests/s (%g s buckets)", bs);
    snprintf(sub, sizeof(sub), "%s: %" PRIu64 " requests over %s; rejected %.2f%%, delayed %.2f%%",
             r->config_path, r->requests, span, pct(r->rejected, r->requests), pct(r->delayed, r->requests));
    p.id = id;
    p.title = "sluice replay: requests per second by outcome";
    p.subtitle = sub;
    p.xlabel = "time (UTC)";
    p.xtime = true;
    p.x0 = (double)(r->t0_ns / NS);
    p.dx = bs;
    double *all[RP_NSERIES] = {0};
    double *pol[SL_PLOT_PANELS][RP_NSERIES] = {{0}};
    size_t idx[SL_PLOT_PANELS - 1];
    size_t np = busiest(r, idx, SL_PLOT_PANELS - 1 < 7 ? SL_PLOT_PANELS - 1 : 7);
    for (size_t k = 0; k <= np; k++) {
        const rp_series *s = k == 0 ? r->all : r->pol[idx[k - 1]].series;
        sl_plot_panel *pn = &p.panels[p.npanels++];
        double **v = k == 0 ? all : pol[k];
        for (int j = 0; j < RP_NSERIES; j++) v[j] = rates(r, s, j);
        if (k == 0) {
            snprintf(titles[k], sizeof(titles[k]), "all requests");
        } else {
            const rp_policy *pp = &r->pol[idx[k - 1]];
            snprintf(titles[k], sizeof(titles[k]), "policy %s: %" PRIu64 " requests, %.2f%% rejected by it",
                     pp->name, pp->requests, pct(pp->rejected, pp->requests));
        }
        pn->title = titles[k];
        pn->ylabel = bucket;
        /* admitted and rejected always (a zero is information); delayed and shadow when
         * the trace has any */
        bool any_delay = false, any_shadow = false, any_other = false;
        for (uint32_t i = 0; i < r->nbuckets; i++) {
            any_delay |= s->v[RP_DELAYED][i] > 0;
            any_shadow |= s->v[RP_SHADOW][i] > 0;
            any_other |= s->v[RP_OTHER][i] > 0;
        }
        /* few buckets: bars (a count per bucket, honestly); many: filled areas */
        sl_plot_kind kind = r->nbuckets <= 150 ? SL_PLOT_BARS : SL_PLOT_AREA;
        pn->series[pn->nseries++] = (sl_plot_series){"admitted", SL_COLOR_ADMITTED, v[RP_ADMITTED], NULL, r->nbuckets, kind, false};
        if (any_delay)
            pn->series[pn->nseries++] = (sl_plot_series){"admitted after a delay", SL_COLOR_DELAYED, v[RP_DELAYED], NULL, r->nbuckets, kind, false};
        pn->series[pn->nseries++] = (sl_plot_series){k == 0 ? "rejected" : "rejected by this policy", SL_COLOR_REJECTED, v[RP_REJECTED], NULL, r->nbuckets, kind, false};
        if (any_other && k > 0)
            pn->series[pn->nseries++] = (sl_plot_series){"rejected by another policy", SL_COLOR_OTHER, v[RP_OTHER], NULL, r->nbuckets, kind, false};
        if (any_shadow)
            pn->series[pn->nseries++] = (sl_plot_series){"shadow: would have rejected", SL_COLOR_SHADOW, v[RP_SHADOW], NULL, r->nbuckets, SL_PLOT_LINE, true};
        for (size_t j = 0; j < pn->nseries; j++)
            if (pn->series[j].y == NULL) pn->series[j].n = 0;
    }
    p.panel_height = 190;
    sl_svg_plot(b, &p);
    for (int j = 0; j < RP_NSERIES; j++) free(all[j]);
    for (size_t k = 0; k < SL_PLOT_PANELS; k++)
        for (int j = 0; j < RP_NSERIES; j++) free(pol[k][j]);
}

/* Share of keys whose peak is at least x (a complementary CDF), from the histogram. */
static size_t ccdf(const rp_hist *h, double *x, double *y) {
    size_t n = 0;
    uint64_t above = h->n;
    for (unsigned i = 0; i < RP_HIST && h->n > 0; i++) {
        if (h->c[i] == 0) continue;
        uint64_t u = rp_hist_lower(i);
        x[n] = (double)(u > h->max ? h->max : u);
        if (x[n] < 1) x[n] = 1;
        y[n] = 100.0 * (double)above / (double)h->n;
        n++;
        above -= h->c[i];
    }
    if (n > 0) { /* past the largest peak no key is left: the curve drops off the axis */
        x[n] = x[n - 1];
        y[n] = 1e-9;
        n++;
    }
    return n;
}

static void peaks_plot(const rp_run *r, sl_buf *b, const char *id) {
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    static char titles[SL_PLOT_PANELS][200], marks[SL_PLOT_PANELS][2][96];
    p.id = id;
    p.title = "sluice replay: per-key peak against the configured limit";
    p.subtitle = "share of keys whose busiest window reached at least x units (log scales); "
                 "a key right of the limit line was over it";
    p.xlabel = "per-key peak: burst needed at the rate (buckets), units in one window, or requests in flight";
    p.xlog = true;
    double *xs[SL_PLOT_PANELS] = {0}, *ys[SL_PLOT_PANELS] = {0};
    for (size_t i = 0; i < r->nwin && p.npanels < 8; i++) {
        const rp_win *w = r->win[i];
        if (w->keys == 0 || w->peak_kind == RP_PEAK_NONE) continue;
        size_t k = p.npanels++;
        sl_plot_panel *pn = &p.panels[k];
        xs[k] = calloc(RP_HIST + 1, sizeof(double));
        ys[k] = calloc(RP_HIST + 1, sizeof(double));
        if (xs[k] == NULL || ys[k] == NULL) break;
        size_t n = ccdf(&w->peaks, xs[k], ys[k]);
        char metric[48], lim[48];
        win_metric(w, metric, sizeof(metric));
        rp_win_limit(w, lim, sizeof(lim));
        snprintf(titles[k], sizeof(titles[k]), "%s/%s (%s; peak = %s): %" PRIu64 " keys, %.2f%% over the limit",
                 r->pol[w->policy].name, w->info->name, rp_win_algo(w), metric,
                 w->keys, pct(rp_hist_above(&w->peaks, w->info->quota), w->keys));
        pn->title = titles[k];
        pn->ylabel = "keys at or above x";
        pn->yunit = "%";
        pn->ymax = 100;
        pn->ylog = true;
        pn->ymin_log = w->keys >= 10000 ? 100.0 / (double)w->keys : 0.01;
        pn->series[pn->nseries++] = (sl_plot_series){NULL, "#1f5f8b", ys[k], xs[k], n, SL_PLOT_STEP, false};
        snprintf(marks[k][0], sizeof(marks[k][0]), "limit %s", lim);
        pn->marks[pn->nmarks++] = (sl_plot_mark){(double)w->info->quota, marks[k][0], SL_COLOR_LIMIT, false};
        if (r->suggest) {
            uint64_t s = rp_hist_suggest(&w->peaks, r->target);
            snprintf(marks[k][1], sizeof(marks[k][1]), "suggested %" PRIu64 " (%.3g%% of keys over it)", s, r->target * 100);
            pn->marks[pn->nmarks++] = (sl_plot_mark){(double)(s ? s : 1), marks[k][1], SL_COLOR_SUGGEST, true};
        }
    }
    p.panel_height = 200;
    sl_svg_plot(b, &p);
    for (size_t k = 0; k < SL_PLOT_PANELS; k++) {
        free(xs[k]);
        free(ys[k]);
    }
}

int rp_report_svg(const rp_run *r, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
    char path[4096];
    sl_buf b = {0};
    traffic_plot(r, &b, "traffic");
    snprintf(path, sizeof(path), "%s/replay-traffic.svg", dir);
    int rc = sl_buf_write(&b, path);
    sl_buf_free(&b);
    if (rc != 0) return rc;
    peaks_plot(r, &b, "peaks");
    snprintf(path, sizeof(path), "%s/replay-peaks.svg", dir);
    rc = sl_buf_write(&b, path);
    sl_buf_free(&b);
    return rc;
}

/* An SVG document without its XML declaration, for inlining in HTML. */
static void inline_svg(sl_buf *page, const sl_buf *svg) {
    if (svg->p == NULL) return;
    const char *s = strstr(svg->p, "<svg");
    sl_buf_printf(page, "%s", s ? s : svg->p);
}

int rp_report_html(const rp_run *r, const sl_trace_reader *tr, const char *path) {
    sl_buf page = {0}, svg = {0};
    sl_buf_printf(&page, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                         "<title>sluice replay: ");
    sl_buf_xml(&page, r->config_path);
    sl_buf_printf(&page, "</title>\n<style>\nbody{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;"
                         "margin:24px;color:#222;max-width:1100px}\n"
                         "table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}\n"
                         "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
                         "th{background:#f3f3f3}td.l,th.l{text-align:left}\n"
                         "pre{background:#f7f7f7;padding:10px;font-size:12px;overflow:auto}\n"
                         "svg{max-width:100%%;height:auto}\n</style></head><body>\n");
    sl_buf_printf(&page, "<h1>sluice replay</h1>\n<p>config <code>");
    sl_buf_xml(&page, r->config_path);
    const sl_trace_stats *ts = sl_trace_stats_get(tr);
    char d1[32], d2[32], span[32];
    fmt_time(d1, sizeof(d1), r->first_ns);
    fmt_time(d2, sizeof(d2), r->last_ns);
    fmt_dur(span, sizeof(span), r->last_ns - r->first_ns);
    sl_buf_printf(&page, "</code>; %zu file(s), %" PRIu64 " lines (%" PRIu64 " unparsable, %" PRIu64
                         " late); trace %s to %s UTC (%s); %" PRIu64 " requests: %.2f%% admitted, %.2f%% "
                         "rejected, %.2f%% delayed.</p>\n",
                  sl_trace_file_count(tr), ts->lines, ts->bad, ts->late, d1, d2, span, r->requests,
                  pct(r->admitted, r->requests), pct(r->rejected, r->requests), pct(r->delayed, r->requests));
    sl_buf_printf(&page, "<h2>Per policy and window</h2>\n<table><tr><th class=\"l\">policy</th>"
                         "<th class=\"l\">window</th><th class=\"l\">algorithm</th><th class=\"l\">limit</th>"
                         "<th>requests</th><th>admitted</th><th>rejected</th><th>rejected %%</th>"
                         "<th>delayed</th><th>shadow</th><th>keys</th><th>keys touched</th></tr>\n");
    for (size_t i = 0; i < r->nwin; i++) {
        const rp_win *w = r->win[i];
        char lim[48];
        rp_win_limit(w, lim, sizeof(lim));
        sl_buf_printf(&page, "<tr><td class=\"l\">");
        sl_buf_xml(&page, r->pol[w->policy].name);
        sl_buf_printf(&page, "</td><td class=\"l\">");
        sl_buf_xml(&page, w->info->name);
        sl_buf_printf(&page, "</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%" PRIu64 "</td><td>%" PRIu64
                             "</td><td>%" PRIu64 "</td><td>%.2f%%</td><td>%" PRIu64 "</td><td>%" PRIu64
                             "</td><td>%" PRIu64 "</td><td>%.2f%%</td></tr>\n",
                      rp_win_algo(w), lim, w->requests, w->admitted, w->rejected, pct(w->rejected, w->requests),
                      w->delayed, w->shadow, w->keys, pct(w->keys_touched, w->keys));
    }
    sl_buf_printf(&page, "</table>\n<h2>Per-key peaks</h2>\n<p>Units a key sent in its busiest window "
                         "<i>w</i> (concurrency: most requests in flight); a limit below a key's peak "
                         "would have rejected some of its requests.</p>\n<table><tr><th class=\"l\">policy</th>"
                         "<th class=\"l\">window</th><th>keys</th><th>p50</th><th>p90</th><th>p99</th>"
                         "<th>p99.9</th><th>max</th><th>limit</th><th>keys over</th>%s</tr>\n",
                  r->suggest ? "<th>suggested</th>" : "");
    for (size_t i = 0; i < r->nwin; i++) {
        const rp_win *w = r->win[i];
        sl_buf_printf(&page, "<tr><td class=\"l\">");
        sl_buf_xml(&page, r->pol[w->policy].name);
        sl_buf_printf(&page, "</td><td class=\"l\">");
        sl_buf_xml(&page, w->info->name);
        sl_buf_printf(&page, "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%" PRIu64
                             "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%.2f%%</td>",
                      w->keys, rp_hist_quantile(&w->peaks, 0.5), rp_hist_quantile(&w->peaks, 0.9),
                      rp_hist_quantile(&w->peaks, 0.99), rp_hist_quantile(&w->peaks, 0.999), w->peaks.max,
                      w->info->quota, pct(rp_hist_above(&w->peaks, w->info->quota), w->keys));
        if (r->suggest) sl_buf_printf(&page, "<td>%" PRIu64 "</td>", rp_hist_suggest(&w->peaks, r->target));
        sl_buf_printf(&page, "</tr>\n");
    }
    sl_buf_printf(&page, "</table>\n<h2>Traffic</h2>\n");
    traffic_plot(r, &svg, "traffic");
    inline_svg(&page, &svg);
    sl_buf_free(&svg);
    sl_buf_printf(&page, "<h2>Peaks against the limits</h2>\n");
    peaks_plot(r, &svg, "peaks");
    inline_svg(&page, &svg);
    sl_buf_free(&svg);
    bool any = false;
    for (size_t i = 0; i < r->nwin; i++) any |= r->win[i]->ntop > 0;
    if (any && r->top > 0) {
        sl_buf_printf(&page, "<h2>Most affected keys</h2>\n<table><tr><th class=\"l\">window</th>"
                             "<th class=\"l\">key%s</th><th>rejected</th></tr>\n",
                      r->raw_keys ? "" : " (hashed)");
        for (size_t i = 0; i < r->nwin; i++) {
            rp_top t[RP_TOPK];
            size_t n = top_sorted(r, r->win[i], t);
            for (size_t j = 0; j < n; j++) {
                char lab[512];
                rp_key_label(r, &t[j], lab, sizeof(lab));
                sl_buf_printf(&page, "<tr><td class=\"l\">");
                sl_buf_xml(&page, r->win[i]->info->name);
                sl_buf_printf(&page, "</td><td class=\"l\"><code>");
                sl_buf_xml(&page, lab);
                sl_buf_printf(&page, "</code></td><td>%" PRIu64 "</td></tr>\n", t[j].count);
            }
        }
        sl_buf_printf(&page, "</table>\n");
    }
    sl_buf_printf(&page, "<p>Generated by sluice %s. Self-contained: no scripts, no external "
                         "resources.</p>\n</body></html>\n", SLUICE_VERSION);
    int rc = sl_buf_write(&page, path);
    sl_buf_free(&page);
    return rc;
}
