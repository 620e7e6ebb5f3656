/* SPDX-License-Identifier: Apache-2.0 */
/*
 * svg.h -- a tiny SVG writer for the simulation plots (tests/sim/capacity_sim.c): panels with
 * linear axes, polylines, bars and text. No dependency; output is plain SVG 1.1 that
 * rsvg-convert and browsers render. Coordinates in pixels; data mapped by a panel.
 */
#ifndef SL_SIM_SVG_H
#define SL_SIM_SVG_H

#include <stdio.h>

typedef struct svg_panel {
    FILE *f;
    double x, y, w, h;          /* plot area in pixels */
    double x0, x1, y0, y1;      /* data ranges */
} svg_panel;

static inline void svg_begin(FILE *f, int w, int h) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
               "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            w, h, w, h, w, h);
}

static inline void svg_end(FILE *f) {
    fputs("</svg>\n", f);
}

/* Text; anchor is "start", "middle" or "end". The string must not need escaping. */
static inline void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *fill,
                            const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\" fill=\"%s\">%s</text>\n", x, y,
            anchor, size, fill, s);
}

static inline double svg_px(const svg_panel *p, double v) {
    return p->x + (v - p->x0) / (p->x1 - p->x0) * p->w;
}

static inline double svg_py(const svg_panel *p, double v) {
    return p->y + p->h - (v - p->y0) / (p->y1 - p->y0) * p->h;
}

/* Frame, grid lines and tick labels every xstep / ystep (xstep 0: no x ticks, for bar
 * charts that label their own groups), axis titles and a panel title. */
static inline void svg_axes(const svg_panel *p, double xstep, double ystep, const char *xtitle,
                            const char *ytitle, const char *title) {
    char buf[64];
    fprintf(p->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
            p->x, p->y, p->w, p->h);
    for (double v = p->x0; xstep > 0 && v <= p->x1 + 1e-9; v += xstep) {
        double x = svg_px(p, v);
        fprintf(p->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, p->y, x,
                p->y + p->h);
        snprintf(buf, sizeof(buf), "%g", v);
        svg_text(p->f, x, p->y + p->h + 14, "middle", 11, "#333", buf);
    }
    for (double v = p->y0; v <= p->y1 + 1e-9; v += ystep) {
        double y = svg_py(p, v);
        fprintf(p->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", p->x, y,
                p->x + p->w, y);
        snprintf(buf, sizeof(buf), "%g", v);
        svg_text(p->f, p->x - 5, y + 4, "end", 11, "#333", buf);
    }
    if (xtitle) svg_text(p->f, p->x + p->w / 2, p->y + p->h + 30, "middle", 12, "#000", xtitle);
    if (ytitle)
        fprintf(p->f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" "
                "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
                p->x - 38, p->y + p->h / 2, p->x - 38, p->y + p->h / 2, ytitle);
    if (title) svg_text(p->f, p->x, p->y - 8, "start", 13, "#000", title);
}

/* A polyline through n points (xs[i], ys[i]); dash NULL for a solid line. */
static inline void svg_line(const svg_panel *p, const double *xs, const double *ys, int n, const char *color,
                            double width, const char *dash) {
    fprintf(p->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s points=\"", color, width,
            dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    for (int i = 0; i < n; i++) {
        double y = ys[i] < p->y0 ? p->y0 : ys[i] > p->y1 ? p->y1 : ys[i];
        fprintf(p->f, "%.1f,%.1f ", svg_px(p, xs[i]), svg_py(p, y));
    }
    fputs("\"/>\n", p->f);
}

/* A bar from y0 up to v, centred on x with width bw (data units on x). */
static inline void svg_bar(const svg_panel *p, double x, double bw, double v, const char *color) {
    double l = svg_px(p, x - bw / 2), r = svg_px(p, x + bw / 2), top = svg_py(p, v), base = svg_py(p, p->y0);
    fprintf(p->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", l, top, r - l,
            base - top, color);
}

/* A legend entry: a short line (or a square when square != 0) and its label. */
static inline void svg_legend(FILE *f, double x, double y, const char *color, const char *dash, int square,
                              const char *label) {
    if (square)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>\n", x, y - 9, color);
    else
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>\n",
                x, y - 4, x + 18, y - 4, color, dash ? " stroke-dasharray=\"" : "", dash ? dash : "",
                dash ? "\"" : "");
    svg_text(f, x + 22, y, "start", 11, "#000", label);
}

#endif /* SL_SIM_SVG_H */
