/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity_sim.c -- prints the figures of the capacity mechanisms (adaptive concurrency,
 * priority shedding, borrowing between tiers, progressive penalties) from the same
 * simulations the unit tests assert on (tests/sim/sim_*.h), and draws them as SVG.
 *   capacity_sim [-o DIR] [-s SEED]     DIR receives capacity-*.svg; SEED as SLUICE_SEED
 * Built and run by bench/run_capacity.sh. Floating point appears only here, in printing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_adaptive.h"
#include "sim_borrow.h"
#include "sim_penalty.h"
#include "sim_shed.h"
#include "svg.h"

static sim_adapt_run runs[3];
static sim_shed_run shed;

static const char *ctl_name(int c) {
    return c == SL_ADAPT_GRADIENT2 ? "gradient2" : c == SL_ADAPT_VEGAS ? "vegas" : "aimd";
}

static FILE *open_out(const char *dir, const char *name) {
    if (dir == NULL) return NULL;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) perror(path);
    return f;
}

static void adaptive_figures(const sim_adapt_run *r, const char *label) {
    sim_adapt_figures f;
    sim_adapt_measure(r, &f);
    uint32_t k = r->backend.knee;
    printf("%-10s knee %3u | settle %4.1f s | steady mean %6.2f (%+5.1f %%) range %3u..%-3u p2p %4.1f %% | "
           "halving tracked in %4.1f s, mean %6.2f (%+5.1f %% of %u) p2p %4.1f %% | recovered in %4.1f s, mean %6.2f | "
           "latency %5.2f / %5.2f ms (base %.0f)\n",
           label, k, f.settle_ns / 1e9, f.steady_mean_milli / 1e3, (f.steady_mean_milli / 1e3 - k) * 100.0 / k,
           f.steady_min, f.steady_max, (f.steady_max - f.steady_min) * 100.0 / k, f.track_ns / 1e9,
           f.halved_mean_milli / 1e3, (f.halved_mean_milli / 1e3 - k / 2.0) * 100.0 / (k / 2.0), k / 2,
           (f.halved_max - f.halved_min) * 100.0 / (k / 2.0), f.recover_ns / 1e9, f.recovered_mean_milli / 1e3,
           f.steady_latency_ns / 1e6, f.halved_latency_ns / 1e6, r->backend.base_ns / 1e6);
}

static void adaptive_svg(FILE *f) {
    static double xs[SIM_TRACE_MAX], ys[SIM_TRACE_MAX], ks[SIM_TRACE_MAX];
    static const char *colors[3] = {"#1f77b4", "#2ca02c", "#d62728"};
    const int W = 900, PH = 150, GAP = 60, TOP = 50;
    svg_begin(f, W, TOP + 4 * (PH + GAP));
    svg_text(f, 20, 24, "start", 15, "#000",
             "Adaptive concurrency: limit vs the backend's knee (20, halved 40-60 s), offered 3000 req/s");
    for (int c = 0; c < 3; c++) {
        const sim_adapt_run *r = &runs[c];
        svg_panel p = {f, 70, TOP + c * (PH + GAP), W - 100, PH, 0, 80, 0, 40};
        char title[128];
        snprintf(title, sizeof(title), "%s (dashed: knee; +-25 %% band shaded)", ctl_name(c + 1));
        /* the +-25 % band around the knee */
        for (int phase = 0; phase < 3; phase++) {
            double t0 = phase == 0 ? 0 : phase == 1 ? 40 : 60, t1 = phase == 0 ? 40 : phase == 1 ? 60 : 80;
            double k = phase == 1 ? 10 : 20;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f2f2f2\"/>\n",
                    svg_px(&p, t0), svg_py(&p, k * 1.25), svg_px(&p, t1) - svg_px(&p, t0),
                    svg_py(&p, k * 0.75) - svg_py(&p, k * 1.25));
        }
        svg_axes(&p, 10, 10, c == 2 ? "time (s)" : NULL, "limit (slots)", title);
        for (uint32_t i = 0; i < r->npoints; i++) {
            xs[i] = r->trace[i].t_ns / 1e9;
            ys[i] = r->trace[i].limit;
            ks[i] = r->trace[i].knee;
        }
        svg_line(&p, xs, ks, (int)r->npoints, "#555", 1.5, "6,4");
        svg_line(&p, xs, ys, (int)r->npoints, colors[c], 1.8, NULL);
        for (uint32_t i = 0; i < r->npoints; i++)
            if (r->trace[i].probing)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"none\" stroke=\"#ff7f0e\"/>\n",
                        svg_px(&p, xs[i]), svg_py(&p, ys[i]));
    }
    svg_panel p = {f, 70, TOP + 3 * (PH + GAP), W - 100, PH, 0, 80, 0, 30};
    svg_axes(&p, 10, 5, "time (s)", "latency (ms)", "average latency per 100 ms (base 10 ms)");
    for (int c = 0; c < 3; c++) {
        const sim_adapt_run *r = &runs[c];
        for (uint32_t i = 0; i < r->npoints; i++) {
            xs[i] = r->trace[i].t_ns / 1e9;
            ys[i] = r->trace[i].avg_ns / 1e6;
        }
        svg_line(&p, xs, ys, (int)r->npoints, colors[c], 1.2, NULL);
        svg_legend(f, p.x + 10 + c * 110, p.y + 16, colors[c], NULL, 0, ctl_name(c + 1));
    }
    svg_legend(f, p.x + 340, p.y + 16, "#ff7f0e", NULL, 0, "o = no-load probe (limit at min)");
    svg_end(f);
}

typedef struct shed_row {
    const char *label;
    uint64_t permille[4];
} shed_row;

static void shed_figures(const sim_shed_run *r, const char *label, shed_row *row) {
    static const char *names[4] = {"critical", "default", "sheddable", "batch"};
    printf("%-22s", label);
    for (uint32_t c = 0; c < r->nclasses; c++) {
        row->permille[c] = sim_shed_admit_permille(r, c);
        printf(" | %-9s %5.1f %% of %6llu", names[c], row->permille[c] / 10.0, (unsigned long long)r->offered[c]);
    }
    row->label = label;
    printf("\n");
}

static void shed_svg(FILE *f, const shed_row *rows, int n, double res_with, double res_without) {
    static const char *colors[4] = {"#d62728", "#1f77b4", "#ff7f0e", "#7f7f7f"};
    static const char *names[4] = {"critical (20 %)", "default (20 %)", "sheddable (40 %)", "batch (20 %)"};
    const int W = 900, H = 420;
    svg_begin(f, W, H);
    svg_text(f, 20, 24, "start", 15, "#000",
             "Priority shedding at 3x overload: admission per class (fill shares 100/90/70/50 %)");
    svg_panel p = {f, 70, 60, 560, 280, 0, (double)n, 0, 100};
    svg_axes(&p, 0, 20, NULL, "admitted (%)", NULL);
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < 4; c++) svg_bar(&p, i + 0.2 + c * 0.2, 0.18, rows[i].permille[c] / 10.0, colors[c]);
        svg_text(f, svg_px(&p, i + 0.5), p.y + p.h + 16, "middle", 11, "#000", rows[i].label);
    }
    for (int c = 0; c < 4; c++) svg_legend(f, 80 + c * 140, H - 30, colors[c], NULL, 1, names[c]);
    svg_panel q = {f, 720, 60, 150, 280, 0, 2, 0, 70};
    svg_axes(&q, 0, 10, NULL, "critical slots held (mean)", "reserve 30 %");
    svg_bar(&q, 0.5, 0.6, res_with, "#d62728");
    svg_bar(&q, 1.5, 0.6, res_without, "#f4a6a6");
    svg_text(f, svg_px(&q, 0.5), q.y + q.h + 16, "middle", 11, "#000", "with");
    svg_text(f, svg_px(&q, 1.5), q.y + q.h + 16, "middle", 11, "#000", "without");
    double xs[2] = {0, 2}, ys[2] = {30, 30};
    svg_line(&q, xs, ys, 2, "#000", 1, "4,3");
    svg_end(f);
}

static void borrow_svg(FILE *f, const sim_borrow_run *r) {
    const int W = 900, H = 380;
    svg_begin(f, W, H);
    svg_text(f, 20, 24, "start", 15, "#000",
             "Borrowing: platform 100/s; A and B share 50 each, cap 80; A idle until 5.3 s");
    svg_panel p = {f, 70, 60, 780, 250, 0, SIM_BORROW_WINDOWS, 0, 100};
    svg_axes(&p, 1, 20, "window (1 s)", "admitted per window", NULL);
    for (int w = 0; w < SIM_BORROW_WINDOWS; w++) {
        svg_bar(&p, w + 0.3, 0.35, (double)r->got_a[w], "#1f77b4");
        svg_bar(&p, w + 0.7, 0.35, (double)r->got_b[w], "#ff7f0e");
    }
    double xs[2] = {0, SIM_BORROW_WINDOWS}, share[2] = {50, 50}, cap[2] = {80, 80};
    svg_line(&p, xs, share, 2, "#000", 1, "6,4");
    svg_line(&p, xs, cap, 2, "#d62728", 1, "2,3");
    double ref[2] = {r->a_from_ns / 1e9, r->a_from_ns / 1e9}, yy[2] = {0, 100};
    svg_line(&p, ref, yy, 2, "#1f77b4", 1, "3,3");
    svg_legend(f, 80, H - 20, "#1f77b4", NULL, 1, "A");
    svg_legend(f, 140, H - 20, "#ff7f0e", NULL, 1, "B");
    svg_legend(f, 200, H - 20, "#000", "6,4", 0, "share (50)");
    svg_legend(f, 310, H - 20, "#d62728", "2,3", 0, "cap (80)");
    svg_legend(f, 410, H - 20, "#1f77b4", "3,3", 0, "A wakes up");
    svg_end(f);
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    const char *e = getenv("SLUICE_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 0) : UINT64_C(0x5eed5eed12345678);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) dir = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [-o DIR] [-s SEED]\n", argv[0]);
            return 2;
        }
    }
    printf("# capacity simulations (tests/sim, seed %llu): fake clock, deterministic\n", (unsigned long long)seed);

    printf("\n## adaptive concurrency: backend knee K at 10 ms, halved 40-60 s, offered 1.5 x K/10ms, 80 s\n");
    printf("# settle: until the limit stays within 25 %% of the knee; steady: 20-40 s; halved: 50-60 s;\n"
           "# p2p: peak-to-peak of the enforced limit / knee; latency: mean over steady / halved\n");
    for (int knee = 20; knee <= 100; knee += 80) {
        for (int c = 1; c <= 3; c++) {
            sim_adapt_run *r = &runs[c - 1];
            sim_adapt_default(r, (sl_adapt_ctl)c, seed);
            r->backend.knee = (uint32_t)knee;
            r->rate_per_s = 150 * (uint64_t)knee;
            r->params.initial = (uint32_t)knee / 2;
            r->params.max = 20 * (uint32_t)knee;
            sim_adapt(r);
            adaptive_figures(r, ctl_name(c));
        }
        if (knee == 20) {
            FILE *f = open_out(dir, "capacity-adaptive.svg");
            if (f) {
                adaptive_svg(f);
                fclose(f);
            }
        }
    }

    printf("\n## priority shedding: 3 x capacity, 20 %% critical / 20 %% default / 40 %% sheddable / 20 %% batch,\n"
           "# fill shares 100/90/70/50 %%, 20 s, counted after 2 s\n");
    shed_row rows[4];
    sim_shed_default(&shed, SIM_FIXED, 100, seed);
    sim_shed(&shed);
    shed_figures(&shed, "fixed 100 slots", &rows[0]);
    sim_shed_default(&shed, SIM_ADAPTIVE, 100, seed);
    sim_shed(&shed);
    shed_figures(&shed, "adaptive knee 100", &rows[1]);
    sim_shed_default(&shed, SIM_ADAPTIVE, 20, seed);
    sim_shed(&shed);
    shed_figures(&shed, "adaptive knee 20", &rows[2]);
    sim_shed_default(&shed, SIM_BUCKET, 100, seed);
    sim_shed(&shed);
    shed_figures(&shed, "token bucket 1000/s", &rows[3]);
    double with, without;
    sim_shed_reserve(&shed, 300000, seed);
    sim_shed(&shed);
    with = (double)shed.inflight_sum[0] / (double)shed.inflight_samples;
    printf("reserve 30 %%, sheddable first: critical holds %.1f slots on average (min share 30), admitted %.1f %% "
           "(demand 60 slots); first 25 ms: %llu of %llu admitted; sheddable at most %u slots\n",
           with, sim_shed_admit_permille(&shed, 0) / 10.0, (unsigned long long)shed.early_admitted[0],
           (unsigned long long)shed.early_offered[0], shed.inflight_max[1]);
    sim_shed_reserve(&shed, 0, seed);
    sim_shed(&shed);
    without = (double)shed.inflight_sum[0] / (double)shed.inflight_samples;
    printf("no reserve, sheddable first: critical holds %.1f slots on average, admitted %.1f %%; first 25 ms: %llu "
           "of %llu admitted\n",
           without, sim_shed_admit_permille(&shed, 0) / 10.0, (unsigned long long)shed.early_admitted[0],
           (unsigned long long)shed.early_offered[0]);
    FILE *f = open_out(dir, "capacity-shed.svg");
    if (f) {
        shed_svg(f, rows, 4, with, without);
        fclose(f);
    }

    printf("\n## borrowing: platform 100/s (1 s windows), A and B share 50, cap 80; B asks 250/s, A 83/s from 5.3 s\n");
    static sim_borrow_run br;
    sim_borrow_default(&br);
    sim_borrow(&br);
    printf("window      ");
    for (int w = 0; w < SIM_BORROW_WINDOWS; w++) printf(" %4d", w);
    printf("\nA admitted  ");
    for (int w = 0; w < SIM_BORROW_WINDOWS; w++) printf(" %4llu", (unsigned long long)br.got_a[w]);
    printf("\nB admitted  ");
    for (int w = 0; w < SIM_BORROW_WINDOWS; w++) printf(" %4llu", (unsigned long long)br.got_b[w]);
    printf("\nB max use   ");
    for (int w = 0; w < SIM_BORROW_WINDOWS; w++) printf(" %4llu", (unsigned long long)br.max_use_b[w]);
    printf("\nA refused within its share %llu times, from %.3f s to %.3f s (window boundary at %d s)\n",
           (unsigned long long)br.refused_a_owner, br.first_owner_refusal_ns / 1e9, br.last_owner_refusal_ns / 1e9,
           (int)(br.a_from_ns / SLUICE_NS_PER_S) + 1);
    f = open_out(dir, "capacity-borrow.svg");
    if (f) {
        borrow_svg(f, &br);
        fclose(f);
    }

    printf("\n## progressive penalties: first 1m, factor 2, max 1h, forgive_after 24h\n");
    sl_penalty_params pp;
    sl_penalty_params_default(&pp);
    printf("block per repeated violation:");
    for (uint32_t l = 1; l <= 8; l++) printf(" %lldm", (long long)(sl_penalty_period(&pp, l) / SIM_MIN));
    printf("\n");
    static sim_attack at;
    for (int anti = 0; anti <= 1; anti++) {
        sim_attack_setup(&at, anti);
        sim_attack_run(&at);
        printf("%s: attacker %llu attempts over 1000 addresses in 10 h, %llu refused (%llu challenged), %llu passwords "
               "tried; owner %llu logins, %llu blocked, %llu challenged\n",
               anti ? "account blocked (anti-pattern)  " : "address blocked, account challenged",
               (unsigned long long)at.attacker_attempts, (unsigned long long)at.attacker_refused,
               (unsigned long long)at.attacker_challenged, (unsigned long long)at.attacker_tries_checked,
               (unsigned long long)at.owner_logins, (unsigned long long)at.owner_refused,
               (unsigned long long)at.owner_challenged);
    }
    return 0;
}
