/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simulate_cap.c -- `sluice simulate adaptive|shed|borrow|penalty`: capacity protection
 * (docs/capacity.md) on a fake clock, through the engine and the memory store exactly as
 * `sluice serve` decides, against a simulated backend or traffic: each pattern prints its
 * figures per second and, with --svg DIR / --html FILE, draws them.
 *   adaptive  the three controllers against a backend whose knee (20) halves at 20 s
 *   shed      3x overload of 100 slots, 20 % critical traffic, four classes
 *   borrow    two products sharing a platform: one busy, the other idle then active
 *   penalty   an attacker rotating addresses against one account, and its owner
 * Floating point appears only in the backend's jitter and in printing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "engine/engine.h"
#include "sluice.h"
#include "svg.h"

#define CAP_SECONDS 40
#define CAP_MAX_HELD 8192

typedef struct cap_run {
    sl_config *cfg;
    sluice_store *st;
    sl_engine *e;
    sluice_time t;
} cap_run;

static int cap_open(cap_run *r, const char *text) {
    memset(r, 0, sizeof(*r));
    sl_diag_list dl;
    if (sl_config_load_buffer(text, strlen(text), "simulate", &r->cfg, &dl) != SLUICE_OK) {
        fprintf(stderr, "simulate: built-in config: %s\n", dl.n ? dl.items[0].msg : "?");
        return -1;
    }
    int err;
    char eb[256];
    r->st = sluice_store_create(NULL, &err);
    r->e = r->st ? sl_engine_create(r->cfg, r->st, &err, eb, sizeof(eb)) : NULL;
    if (r->e == NULL) {
        fprintf(stderr, "simulate: %s\n", r->st ? eb : "no memory");
        return -1;
    }
    r->t = (sluice_time){SLUICE_NS_PER_S, INT64_C(1767225600) * SLUICE_NS_PER_S}; /* 2026-01-01 */
    return 0;
}

static void cap_close(cap_run *r) {
    sl_engine_destroy(r->e);
    sluice_store_destroy(r->st);
    sl_config_destroy(r->cfg);
}

static void cap_at(cap_run *r, int64_t ms) {
    r->t.mono_ns = SLUICE_NS_PER_S + ms * SLUICE_NS_PER_MS;
    r->t.wall_ns = INT64_C(1767225600) * SLUICE_NS_PER_S + ms * SLUICE_NS_PER_MS;
}

static uint64_t rnd(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static double unit(uint64_t *s) { return (double)(rnd(s) >> 11) / 9007199254740992.0; }

static int emit(const char *svg_dir, sl_buf *html, const char *name, const sl_buf *txt, sl_plot *p) {
    if (svg_dir == NULL && html == NULL) return 0;
    sl_buf svg = {0};
    sl_svg_plot(&svg, p);
    int rc = 0;
    if (svg_dir != NULL) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/simulate-%s.svg", svg_dir, name);
        if (sl_buf_write(&svg, path) != 0) {
            fprintf(stderr, "simulate: cannot write %s: %s\n", path, strerror(errno));
            rc = 1;
        }
    }
    if (html != NULL && svg.p != NULL) {
        sl_buf_printf(html, "<h2>%s</h2>\n<pre>", name);
        sl_buf_xml(html, txt->p ? txt->p : "");
        sl_buf_printf(html, "</pre>\n%s\n", strstr(svg.p, "<svg") ? strstr(svg.p, "<svg") : svg.p);
    }
    sl_buf_free(&svg);
    return rc;
}

/* ---- adaptive ----------------------------------------------------------------------------------- */

static const char adaptive_cfg[] =
    "policies:\n"
    "  - { name: gradient2, key: [], algorithm: adaptive_concurrency,\n"
    "      limits: [ { min: 2, max: 200, initial: 10, lease: 30s, controller: gradient2, window: 200ms } ] }\n"
    "  - { name: vegas, key: [], algorithm: adaptive_concurrency,\n"
    "      limits: [ { min: 2, max: 200, initial: 10, lease: 30s, controller: vegas, window: 200ms } ] }\n"
    "  - { name: aimd, key: [], algorithm: adaptive_concurrency,\n"
    "      limits: [ { min: 2, max: 200, initial: 10, lease: 30s, controller: aimd, timeout: 57500us, "
    "window: 200ms } ] }\n";

#define KNEE 20
#define BASE_MS 50.0
#define HALVE_MS 20000
#define RESTORE_MS 30000

static int knee_at(int64_t ms) { return ms >= HALVE_MS && ms < RESTORE_MS ? KNEE / 2 : KNEE; }

typedef struct held {
    int64_t done_ms;
    double lat_ms;
    char tok[SL_TOKEN_MAX + 1];
} held;

static held *g_held;

/* One controller: open-loop arrivals at 600/s (1.5x the backend's 400/s, 3x halved); each
 * admitted request holds its slot until the backend answers, then releases with its latency.
 * limits[i]: the limit every 100 ms. */
static void run_adaptive(cap_run *r, const char *policy, double *limits, size_t npts, double *avg_lat) {
    static sl_verdict v, tv;
    uint64_t rng = 42;
    size_t nh = 0;
    double next = 0, lat_sum = 0;
    uint64_t lat_n = 0;
    int64_t end = (int64_t)npts * 100;
    double last = 0;
    size_t pt = 0;
    while (next < (double)end) {
        /* the next event: a completion, or the arrival */
        size_t m = nh;
        for (size_t i = 0; i < nh; i++)
            if (g_held[i].done_ms <= (int64_t)next && (m == nh || g_held[i].done_ms < g_held[m].done_ms)) m = i;
        int64_t now = m < nh ? g_held[m].done_ms : (int64_t)next;
        while (pt < npts && (int64_t)pt * 100 <= now) limits[pt++] = last;
        cap_at(r, now);
        if (m < nh) {
            sl_engine_token_sample(r->e, r->st, g_held[m].tok, strlen(g_held[m].tok), SL_TOKEN_RELEASE, 0, true,
                                   (int64_t)(g_held[m].lat_ms * 1e6), SLUICE_OUTCOME_OK, r->t, &tv, NULL, NULL);
            lat_sum += g_held[m].lat_ms;
            lat_n++;
            g_held[m] = g_held[--nh];
            continue;
        }
        sl_engine_acquire(r->e, policy, "", 0, r->t, &v);
        sl_cap_info x;
        if (sl_verdict_adaptive(&v, &x, NULL)) last = x.limit;
        if (v.action == SL_ALLOW && nh < CAP_MAX_HELD) {
            int k = knee_at(now);
            double lat = BASE_MS * (double)(nh + 1 > (size_t)k ? nh + 1 : (size_t)k) / k * (0.9 + 0.2 * unit(&rng));
            held *h = &g_held[nh++];
            h->done_ms = now + (int64_t)(lat + 0.5);
            h->lat_ms = lat;
            if (sl_verdict_token(&v, h->tok, sizeof(h->tok)) <= 0) nh--;
        }
        next += unit(&rng) * 2000.0 / 600.0;
    }
    while (pt < npts) limits[pt++] = last;
    *avg_lat = lat_n ? lat_sum / (double)lat_n : 0;
}

static int cap_adaptive(const char *svg_dir, sl_buf *html) {
    enum { NPTS = CAP_SECONDS * 10 };
    static double lim[3][NPTS], knee[NPTS], xs[NPTS];
    static const char *const names[3] = {"gradient2", "vegas", "aimd"};
    sl_buf txt = {0};
    sl_buf_printf(&txt, "\n== adaptive: each controller against a backend whose knee (%d in flight at %.0f ms) "
                        "halves from %d s to %d s; offered 600 req/s (1.5x, then 3x)\n",
                  KNEE, BASE_MS, HALVE_MS / 1000, RESTORE_MS / 1000);
    sl_buf_printf(&txt, "%-10s %18s %22s %16s %22s %12s\n", "controller", "settled within 25%", "steady mean (p2p)",
                  "halving tracked", "halved mean (p2p)", "mean latency");
    g_held = calloc(CAP_MAX_HELD, sizeof(*g_held));
    if (g_held == NULL) return 1;
    for (int c = 0; c < 3; c++) {
        cap_run r;
        if (cap_open(&r, adaptive_cfg) != 0) return 1;
        double avg;
        run_adaptive(&r, names[c], lim[c], NPTS, &avg);
        cap_close(&r);
        /* settle: from a phase's start until the limit stays within 25 % of its knee */
        int64_t settle = 0, track = 0;
        double smin = 1e9, smax = 0, ssum = 0, hmin = 1e9, hmax = 0, hsum = 0;
        for (int i = 0; i < NPTS; i++) {
            int64_t ms = (int64_t)i * 100;
            int k = knee_at(ms);
            bool out = lim[c][i] < 0.75 * k || lim[c][i] > 1.25 * k;
            if (out && ms < HALVE_MS) settle = ms + 100;
            if (out && ms >= HALVE_MS && ms < RESTORE_MS) track = ms + 100 - HALVE_MS;
            if (ms >= HALVE_MS / 2 && ms < HALVE_MS) {
                smin = lim[c][i] < smin ? lim[c][i] : smin;
                smax = lim[c][i] > smax ? lim[c][i] : smax;
                ssum += lim[c][i];
            }
            if (ms >= HALVE_MS + 5000 && ms < RESTORE_MS) {
                hmin = lim[c][i] < hmin ? lim[c][i] : hmin;
                hmax = lim[c][i] > hmax ? lim[c][i] : hmax;
                hsum += lim[c][i];
            }
        }
        sl_buf_printf(&txt, "%-10s %16.1f s %12.2f (%3.0f %%) %14.1f s %12.2f (%3.0f %%) %9.1f ms\n", names[c],
                      settle / 1000.0, ssum / (HALVE_MS / 200), (smax - smin) * 100 / KNEE, track / 1000.0,
                      hsum / ((RESTORE_MS - HALVE_MS - 5000) / 100), (hmax - hmin) * 100 / (KNEE / 2), avg);
    }
    free(g_held);
    fputs(txt.p ? txt.p : "", stdout);
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    for (int i = 0; i < NPTS; i++) {
        knee[i] = knee_at((int64_t)i * 100);
        xs[i] = i / 10.0;
    }
    p.id = "adaptive";
    p.title = "sluice simulate: adaptive";
    p.subtitle = "the enforced limit of each controller (solid) against the backend's knee (dashed)";
    p.xlabel = "time (s)";
    p.dx = 0.1;
    p.panel_height = 150;
    static const char *const colors[3] = {"#1f77b4", "#2ca02c", "#d62728"};
    for (int c = 0; c < 3; c++) {
        sl_plot_panel *pn = &p.panels[p.npanels++];
        pn->title = names[c];
        pn->ylabel = "limit (slots)";
        pn->series[pn->nseries++] = (sl_plot_series){"knee", "#555555", knee, xs, NPTS, SL_PLOT_LINE, true};
        pn->series[pn->nseries++] = (sl_plot_series){"limit", colors[c], lim[c], xs, NPTS, SL_PLOT_STEP, false};
    }
    int rc = emit(svg_dir, html, "adaptive", &txt, &p);
    sl_buf_free(&txt);
    return rc;
}

/* ---- shed --------------------------------------------------------------------------------------- */

static const char shed_cfg[] =
    "policies:\n"
    "  - name: backend\n    key: []\n    algorithm: concurrency\n    limits: [ { max: 100, lease: 30s } ]\n"
    "    priority_from: header.x-priority\n"
    "    classes:\n      - { name: critical }\n      - { name: default, fill: 90% }\n"
    "      - { name: sheddable, fill: 70% }\n      - { name: batch, fill: 50% }\n";

static int cap_shed(const char *svg_dir, sl_buf *html) {
    enum { SECS = 10 };
    static const char *const cls[4] = {"critical", "default", "sheddable", "batch"};
    static const double share[4] = {0.2, 0.2, 0.4, 0.2};
    static double adm[4][SECS], off[4][SECS];
    cap_run r;
    if (cap_open(&r, shed_cfg) != 0) return 1;
    g_held = calloc(CAP_MAX_HELD, sizeof(*g_held));
    if (g_held == NULL) return 1;
    static sl_verdict v, tv;
    uint64_t rng = 7;
    size_t nh = 0;
    double next = 0;
    while (next < SECS * 1000.0) {
        int64_t now = (int64_t)next;
        cap_at(&r, now);
        for (size_t i = 0; i < nh;) {
            if (g_held[i].done_ms <= now) {
                sl_engine_token(r.e, r.st, g_held[i].tok, strlen(g_held[i].tok), SL_TOKEN_RELEASE, 0, r.t, &tv, NULL, NULL);
                g_held[i] = g_held[--nh];
            } else {
                i++;
            }
        }
        double u = unit(&rng), acc = 0;
        int c = 0;
        for (; c < 3 && u >= acc + share[c]; c++) acc += share[c];
        sl_engine_prepare_named_class(r.e, "backend", "", 0, true, 1, cls[c], &v);
        sl_engine_decide(r.e, r.st, &v, r.t, NULL, NULL);
        int s = (int)(now / 1000);
        off[c][s]++;
        if (v.action == SL_ALLOW && nh < CAP_MAX_HELD) {
            adm[c][s]++;
            held *h = &g_held[nh++];
            h->done_ms = now + 100;
            if (sl_verdict_token(&v, h->tok, sizeof(h->tok)) <= 0) nh--;
        }
        next += unit(&rng) * 2000.0 / 3000.0;
    }
    free(g_held);
    cap_close(&r);
    sl_buf txt = {0};
    sl_buf_printf(&txt, "\n== shed: 100 slots of 100 ms (1000 req/s) offered 3000 req/s: 20 %% critical, 20 %% "
                        "default, 40 %% sheddable, 20 %% batch\nadmitted per second (share of offered, after the "
                        "first second)\n%-10s", "class");
    for (int s = 0; s < SECS; s++) sl_buf_printf(&txt, "%5d", s);
    sl_buf_printf(&txt, "   admitted\n");
    for (int c = 0; c < 4; c++) {
        double a = 0, o = 0;
        sl_buf_printf(&txt, "%-10s", cls[c]);
        for (int s = 0; s < SECS; s++) {
            sl_buf_printf(&txt, "%5.0f", adm[c][s]);
            if (s >= 1) a += adm[c][s], o += off[c][s];
        }
        sl_buf_printf(&txt, "   %5.1f %%\n", o > 0 ? 100 * a / o : 0);
    }
    fputs(txt.p ? txt.p : "", stdout);
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    p.id = "shed";
    p.title = "sluice simulate: shed";
    p.subtitle = "3x overload of 100 slots: admitted (bars) and offered (line) per class";
    p.xlabel = "time (s)";
    p.dx = 1;
    p.panel_height = 110;
    static const char *const colors[4] = {"#1b9e77", "#7570b3", "#d95f02", "#e7298a"};
    for (int c = 0; c < 4; c++) {
        sl_plot_panel *pn = &p.panels[p.npanels++];
        pn->title = cls[c];
        pn->ylabel = "requests/s";
        pn->series[pn->nseries++] = (sl_plot_series){c ? NULL : "admitted", colors[c], adm[c], NULL, SECS, SL_PLOT_BARS, false};
        pn->series[pn->nseries++] = (sl_plot_series){c ? NULL : "offered", "#555555", off[c], NULL, SECS, SL_PLOT_LINE, true};
    }
    int rc = emit(svg_dir, html, "shed", &txt, &p);
    sl_buf_free(&txt);
    return rc;
}

/* ---- borrow ----------------------------------------------------------------------------------------- */

static const char borrow_cfg[] =
    "policies:\n"
    "  - name: platform\n    key: []\n    algorithm: fixed_window\n    limits: [ { rate: 100/s } ]\n"
    "    borrow:\n      tiers: [platform, product]\n"
    "      product: { from: header.x-product, share: 50/s, cap: 80/s }\n      reclaim: 2s\n";

static int cap_borrow(const char *svg_dir, sl_buf *html) {
    enum { SECS = 12 };
    static double a[SECS], b[SECS];
    cap_run r;
    if (cap_open(&r, borrow_cfg) != 0) return 1;
    static sl_verdict v;
    /* B asks 250/s all along (every 4 ms); A is idle until 5.3 s, then asks 83/s (every 12 ms) */
    for (int64_t ms = 0; ms < SECS * 1000; ms++) {
        for (int who = 0; who < 2; who++) {
            if (who == 0 ? ms % 4 != 0 : (ms < 5300 || (ms - 5300) % 12 != 0)) continue;
            cap_at(&r, ms);
            sl_header h = {{"x-product", 9}, {who == 0 ? "B" : "A", 1}};
            sl_request q = {.headers = &h, .n_headers = 1};
            sl_engine_check(r.e, &q, r.t, &v);
            if (v.action == SL_ALLOW) (who == 0 ? b : a)[ms / 1000]++;
        }
    }
    cap_close(&r);
    sl_buf txt = {0};
    sl_buf_printf(&txt, "\n== borrow: platform 100/s; products A and B, share 50/s and cap 80/s each; B asks "
                        "250/s, A idle until 5.3 s then 83/s\nadmitted per second\n%-9s", "product");
    for (int s = 0; s < SECS; s++) sl_buf_printf(&txt, "%4d", s);
    sl_buf_printf(&txt, "\n%-9s", "A");
    for (int s = 0; s < SECS; s++) sl_buf_printf(&txt, "%4.0f", a[s]);
    sl_buf_printf(&txt, "\n%-9s", "B");
    for (int s = 0; s < SECS; s++) sl_buf_printf(&txt, "%4.0f", b[s]);
    sl_buf_printf(&txt, "\n");
    fputs(txt.p, stdout);
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    p.id = "borrow";
    p.title = "sluice simulate: borrow";
    p.subtitle = "admitted per second: B borrows A's idle share up to its cap, A gets it back within a window";
    p.xlabel = "time (s)";
    p.dx = 1;
    p.panel_height = 150;
    sl_plot_panel *pn = &p.panels[p.npanels++];
    pn->title = "products A and B";
    pn->ylabel = "requests/s";
    pn->series[pn->nseries++] = (sl_plot_series){"A", "#1b9e77", a, NULL, SECS, SL_PLOT_BARS, false};
    pn->series[pn->nseries++] = (sl_plot_series){"B", "#d95f02", b, NULL, SECS, SL_PLOT_BARS, false};
    int rc = emit(svg_dir, html, "borrow", &txt, &p);
    sl_buf_free(&txt);
    return rc;
}

/* ---- penalty ------------------------------------------------------------------------------------------ */

static const char penalty_cfg[] =
    "policies:\n"
    "  - name: by-address\n    match: { method: POST, path: /login }\n    key: [client_ip]\n"
    "    algorithm: fixed_window\n    limits: [ { rate: 5/15m } ]\n"
    "    on_exceed: { penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h } }\n"
    "  - name: by-account\n    match: { method: POST, path: /login }\n    key: [header.x-user]\n"
    "    algorithm: fixed_window\n    limits: [ { rate: 20/h } ]\n"
    "    on_exceed:\n      penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h, challenge: always }\n"
    "      challenge: { status: 401, header: \"X-Challenge: captcha\" }\n";

static int cap_penalty(const char *svg_dir, sl_buf *html) {
    enum { HOURS = 10 };
    static double att_try[HOURS], att_ok[HOURS], own_ok[HOURS], own_ch[HOURS], own_bl[HOURS];
    cap_run r;
    if (cap_open(&r, penalty_cfg) != 0) return 1;
    static sl_verdict v;
    /* 1000 addresses, 6 attempts each, one attempt every 6 s; the owner every 10 minutes */
    for (int64_t n = 0; n < HOURS * 600; n++) {
        int64_t ms = n * 6000;
        int h = (int)(ms / 3600000);
        char ip[32];
        snprintf(ip, sizeof(ip), "203.0.%d.%d", (int)((n / 6) / 250), (int)((n / 6) % 250 + 1));
        for (int who = 0; who < 2; who++) {
            if (who == 1 && n % 100 != 0) continue;
            cap_at(&r, ms + who);
            const char *addr = who ? "192.0.2.1" : ip;
            sl_header hd = {{"x-user", 6}, {"alice", 5}};
            sl_request q = {.method = {"POST", 4}, .path = {"/login", 6}, .client_ip = {addr, strlen(addr)},
                            .headers = &hd, .n_headers = 1};
            sl_engine_check(r.e, &q, r.t, &v);
            if (who == 0) {
                att_try[h]++;
                att_ok[h] += v.action == SL_ALLOW;
            } else if (v.action == SL_ALLOW) {
                own_ok[h]++;
            } else if (v.challenge) {
                own_ch[h]++;
            } else {
                own_bl[h]++;
            }
        }
    }
    cap_close(&r);
    sl_buf txt = {0};
    sl_buf_printf(&txt, "\n== penalty: an attacker tries one account from 1000 rotating addresses (6 tries "
                        "each, one every 6 s); the owner logs in every 10 min from her address. Blocks are "
                        "keyed on the address, the account only challenges.\n%-5s %10s %10s %8s %11s %8s\n",
                  "hour", "attempts", "let in", "owner ok", "challenged", "blocked");
    double t[5] = {0};
    for (int hh = 0; hh < HOURS; hh++) {
        sl_buf_printf(&txt, "%-5d %10.0f %10.0f %8.0f %11.0f %8.0f\n", hh, att_try[hh], att_ok[hh], own_ok[hh],
                      own_ch[hh], own_bl[hh]);
        t[0] += att_try[hh], t[1] += att_ok[hh], t[2] += own_ok[hh], t[3] += own_ch[hh], t[4] += own_bl[hh];
    }
    sl_buf_printf(&txt, "%-5s %10.0f %10.0f %8.0f %11.0f %8.0f\n", "all", t[0], t[1], t[2], t[3], t[4]);
    fputs(txt.p, stdout);
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    p.id = "penalty";
    p.title = "sluice simulate: penalty";
    p.subtitle = "per hour: the attacker's attempts let in, and the owner's logins (never blocked)";
    p.xlabel = "time (h)";
    p.dx = 1;
    p.panel_height = 140;
    sl_plot_panel *pa = &p.panels[p.npanels++];
    pa->title = "attacker";
    pa->ylabel = "attempts/h";
    pa->series[pa->nseries++] = (sl_plot_series){"let in", "#d95f02", att_ok, NULL, HOURS, SL_PLOT_BARS, false};
    pa->series[pa->nseries++] = (sl_plot_series){"attempts", "#555555", att_try, NULL, HOURS, SL_PLOT_LINE, true};
    sl_plot_panel *po = &p.panels[p.npanels++];
    po->title = "owner";
    po->ylabel = "logins/h";
    po->series[po->nseries++] = (sl_plot_series){"ok", "#1b9e77", own_ok, NULL, HOURS, SL_PLOT_BARS, false};
    po->series[po->nseries++] = (sl_plot_series){"challenged", "#7570b3", own_ch, NULL, HOURS, SL_PLOT_BARS, false};
    po->series[po->nseries++] = (sl_plot_series){"blocked", "#e7298a", own_bl, NULL, HOURS, SL_PLOT_BARS, false};
    int rc = emit(svg_dir, html, "penalty", &txt, &p);
    sl_buf_free(&txt);
    return rc;
}

/* ---- entry -------------------------------------------------------------------------------------------- */

static const struct {
    const char *name, *what;
    int (*run)(const char *svg_dir, sl_buf *html);
} cap_patterns[] = {
    {"adaptive", "the adaptive controllers against a backend whose capacity halves (40 s)", cap_adaptive},
    {"shed", "3x overload of 100 slots shed by priority class (10 s)", cap_shed},
    {"borrow", "two products borrowing within a platform's budget (12 s)", cap_borrow},
    {"penalty", "an attacker rotating addresses against one account (10 h)", cap_penalty},
};
#define NCAP (sizeof(cap_patterns) / sizeof(cap_patterns[0]))

void sl_sim_cap_usage(FILE *f) {
    for (size_t i = 0; i < NCAP; i++) fprintf(f, "  %-11s %s\n", cap_patterns[i].name, cap_patterns[i].what);
}

bool sl_sim_cap_known(const char *name) {
    for (size_t i = 0; i < NCAP; i++)
        if (strcmp(name, cap_patterns[i].name) == 0) return true;
    return false;
}

int sl_sim_cap_run(const char *name, const char *svg_dir, sl_buf *html, int *ran) {
    int rc = 0;
    for (size_t i = 0; i < NCAP && rc == 0; i++)
        if (strcmp(name, "all") == 0 || strcmp(name, cap_patterns[i].name) == 0) {
            rc = cap_patterns[i].run(svg_dir, html);
            (*ran)++;
        }
    return rc;
}
