/* SPDX-License-Identifier: Apache-2.0 */
/*
 * svg.c -- the SVG plotting behind `replay --svg` and `simulate --svg`: nice tick values
 * (1-2-5 steps, decades on log axes, clock times for traces), stacked bars and areas,
 * lines, steps, vertical marks with labels, a legend per panel. Output is plain SVG 1.1
 * that browsers and rsvg-convert render the same; everything is escaped.
 */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sl_buf_printf(sl_buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p != NULL && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + (size_t)n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (np == NULL) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

void sl_buf_xml(sl_buf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': sl_buf_printf(b, "&amp;"); break;
        case '<': sl_buf_printf(b, "&lt;"); break;
        case '>': sl_buf_printf(b, "&gt;"); break;
        case '"': sl_buf_printf(b, "&quot;"); break;
        default:
            /* XML 1.0 forbids most control characters: drop them */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') sl_buf_printf(b, "%c", *s);
        }
    }
}

void sl_buf_free(sl_buf *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}

int sl_buf_write(const sl_buf *b, const char *path) {
    if (b->oom) {
        errno = ENOMEM;
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    size_t w = b->len ? fwrite(b->p, 1, b->len, f) : 0;
    int rc = (w == b->len && fflush(f) == 0) ? 0 : -1;
    if (fclose(f) != 0) rc = -1;
    return rc;
}

/* ---- ticks ---------------------------------------------------------------------------- */

static double nice_step(double span, int want) {
    if (span <= 0) return 1;
    double raw = span / want;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    double n = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return n * mag;
}

/* "1.5k", "20", "0.25", "3M" */
static void fmt_num(char *buf, size_t len, double v) {
    double a = fabs(v);
    if (a >= 1e9) snprintf(buf, len, "%gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, len, "%gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, len, "%gk", v / 1e3);
    else snprintf(buf, len, "%g", fabs(v) < 1e-12 ? 0 : v);
}

static const double TIME_STEPS[] = {1,    2,    5,     10,    15,    30,    60,     120,
                                    300,  600,  900,   1800,  3600,  7200,  10800,  21600,
                                    43200, 86400, 172800, 604800};

static void fmt_clock(char *buf, size_t len, double epoch_s, double span) {
    time_t t = (time_t)floor(epoch_s);
    struct tm tm;
    gmtime_r(&t, &tm);
    if (span > 2 * 86400) strftime(buf, len, "%m-%d %H:%M", &tm);
    else if (span > 600) strftime(buf, len, "%H:%M", &tm);
    else strftime(buf, len, "%H:%M:%S", &tm);
}

typedef struct axis {
    double lo, hi;
    bool log;
    double px0, px1; /* pixel range */
} axis;

static double ax_map(const axis *a, double v) {
    double f;
    if (a->log) {
        if (v <= 0) v = a->lo;
        f = (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    } else {
        f = (v - a->lo) / (a->hi - a->lo);
    }
    if (f < -0.05) f = -0.05;
    if (f > 1.05) f = 1.05;
    return a->px0 + f * (a->px1 - a->px0);
}

/* ---- drawing ---------------------------------------------------------------------------- */

#define ML 78  /* left margin: y labels and the axis title */
#define MR 24
#define MT 72  /* title */
#define MB 56  /* x ticks and the x title */
#define PGAP 46 /* between panels: the panel title and legend */

static double sx(const sl_plot *p, const sl_plot_series *s, size_t i) {
    return s->x ? s->x[i] : p->x0 + p->dx * (double)i;
}

static void x_range(const sl_plot *p, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t k = 0; k < p->npanels; k++) {
        const sl_plot_panel *pn = &p->panels[k];
        for (size_t j = 0; j < pn->nseries; j++) {
            const sl_plot_series *s = &pn->series[j];
            for (size_t i = 0; i < s->n; i++) {
                double x = sx(p, s, i);
                if (p->xlog && x <= 0) continue;
                if (x < *lo) *lo = x;
                if (x > *hi) *hi = x;
            }
            /* bars span [x, x + dx) */
            if (s->kind == SL_PLOT_BARS && s->n > 0 && s->x == NULL)
                *hi = fmax(*hi, sx(p, s, s->n - 1) + p->dx);
        }
        for (size_t j = 0; j < pn->nmarks; j++) {
            if (p->xlog && pn->marks[j].x <= 0) continue;
            *lo = fmin(*lo, pn->marks[j].x);
            *hi = fmax(*hi, pn->marks[j].x);
        }
    }
    if (!isfinite(*lo)) {
        *lo = p->xlog ? 1 : 0;
        *hi = p->xlog ? 10 : 1;
    }
    if (p->xlog) {
        *lo = pow(10, floor(log10(*lo)));
        *hi = pow(10, ceil(log10(*hi * 1.0001)));
        if (*hi <= *lo) *hi = *lo * 10;
    } else if (*hi <= *lo) {
        *hi = *lo + 1;
    }
}

/* Stacked totals of the bar (or area) series at each index, for the y range. */
static double y_max(const sl_plot *p, const sl_plot_panel *pn) {
    double m = 0;
    size_t n = 0;
    for (size_t j = 0; j < pn->nseries; j++) n = pn->series[j].n > n ? pn->series[j].n : n;
    for (size_t i = 0; i < n; i++) {
        double stack_b = 0, stack_a = 0;
        for (size_t j = 0; j < pn->nseries; j++) {
            const sl_plot_series *s = &pn->series[j];
            if (i >= s->n) continue;
            double v = s->y[i];
            if (!isfinite(v)) continue;
            if (s->kind == SL_PLOT_BARS) stack_b += v;
            else if (s->kind == SL_PLOT_AREA) stack_a += v;
            else m = fmax(m, v);
        }
        m = fmax(m, fmax(stack_b, stack_a));
    }
    (void)p;
    return m;
}

static double y_min_pos(const sl_plot_panel *pn) {
    double m = INFINITY;
    for (size_t j = 0; j < pn->nseries; j++)
        for (size_t i = 0; i < pn->series[j].n; i++)
            if (pn->series[j].y[i] > 0) m = fmin(m, pn->series[j].y[i]);
    return m;
}

static void x_ticks(sl_buf *b, const sl_plot *p, const axis *ax, double ytop, double ybot,
                    bool labels) {
    char lab[64];
    if (p->xlog) {
        for (double d = ax->lo; d <= ax->hi * 1.0001; d *= 10) {
            double x = ax_map(ax, d);
            sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n",
                          x, ytop, x, ybot);
            if (labels) {
                fmt_num(lab, sizeof(lab), d);
                sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n",
                              x, ybot + 16, lab);
            }
            /* few decades: 2 and 5 get labels too */
            bool few = log10(ax->hi / ax->lo) <= 3.01;
            for (int k = 2; k <= 9 && d * k <= ax->hi; k++) {
                double xm = ax_map(ax, d * k);
                sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"minor\"/>\n",
                              xm, ytop, xm, ybot);
                if (labels && few && (k == 2 || k == 5)) {
                    fmt_num(lab, sizeof(lab), d * k);
                    sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\" "
                                     "fill-opacity=\"0.75\">%s</text>\n", xm, ybot + 16, lab);
                }
            }
        }
        return;
    }
    double span = ax->hi - ax->lo, step;
    if (p->xtime) {
        step = TIME_STEPS[sizeof(TIME_STEPS) / sizeof(TIME_STEPS[0]) - 1];
        for (size_t i = 0; i < sizeof(TIME_STEPS) / sizeof(TIME_STEPS[0]); i++)
            if (span / TIME_STEPS[i] <= 8) {
                step = TIME_STEPS[i];
                break;
            }
    } else {
        step = nice_step(span, 8);
    }
    double first = ceil(ax->lo / step - 1e-9) * step;
    for (double v = first; v <= ax->hi + step * 1e-6; v += step) {
        double x = ax_map(ax, v);
        sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", x,
                      ytop, x, ybot);
        if (!labels) continue;
        if (p->xtime) fmt_clock(lab, sizeof(lab), v, span);
        else fmt_num(lab, sizeof(lab), v);
        sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n", x,
                      ybot + 16, lab);
    }
}

static void y_ticks(sl_buf *b, const axis *ay, double xl, double xr, const char *unit) {
    char lab[64];
    if (unit == NULL) unit = "";
    if (ay->log) {
        for (double d = ay->lo; d <= ay->hi * 1.0001; d *= 10) {
            double y = ax_map(ay, d);
            sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n",
                          xl, y, xr, y);
            fmt_num(lab, sizeof(lab), d);
            sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s%s</text>\n",
                          xl - 6, y + 4, lab, unit);
        }
        return;
    }
    double step = nice_step(ay->hi - ay->lo, 4);
    for (double v = ay->lo; v <= ay->hi + step * 1e-6; v += step) {
        double y = ax_map(ay, v);
        sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", xl, y,
                      xr, y);
        fmt_num(lab, sizeof(lab), v);
        sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s%s</text>\n",
                      xl - 6, y + 4, lab, unit);
    }
}

static void legend(sl_buf *b, const sl_plot_panel *pn, double x, double y) {
    for (size_t j = 0; j < pn->nseries; j++) {
        const sl_plot_series *s = &pn->series[j];
        if (s->label == NULL) continue;
        if (s->kind == SL_PLOT_BARS || s->kind == SL_PLOT_AREA)
            sl_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>\n", x,
                          y - 9, s->color);
        else
            sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                             "stroke-width=\"2.5\"%s/>\n",
                          x, y - 4, x + 14, y - 4, s->color, s->dashed ? " stroke-dasharray=\"5,3\"" : "");
        sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">", x + 18, y);
        sl_buf_xml(b, s->label);
        sl_buf_printf(b, "</text>\n");
        x += 26 + 6.6 * (double)strlen(s->label);
    }
}

static void panel(sl_buf *b, const sl_plot *p, const sl_plot_panel *pn, const axis *ax,
                  double top, double height, bool last, size_t index) {
    double xl = ax->px0, xr = ax->px1, bottom = top + height;
    axis ay = {0, 1, pn->ylog, bottom, top};
    double ymax = y_max(p, pn);
    if (pn->ylog) {
        double lo = pn->ymin_log > 0 ? pn->ymin_log : y_min_pos(pn);
        if (!isfinite(lo) || lo <= 0) lo = 1;
        ay.lo = pow(10, floor(log10(lo)));
        ay.hi = pow(10, ceil(log10(fmax(ymax, ay.lo * 10) * 1.0001)));
        if (pn->ymax > 0) ay.hi = pn->ymax;
    } else if (pn->ymax > 0) {
        ay.hi = pn->ymax;
    } else {
        double step = nice_step(ymax > 0 ? ymax : 1, 4);
        ay.hi = ceil((ymax > 0 ? ymax : 1) / step) * step;
        if (ay.hi < ymax * 1.02) ay.hi += step;
    }
    if (pn->title) {
        sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"ptitle\">", xl, top - 26);
        sl_buf_xml(b, pn->title);
        sl_buf_printf(b, "</text>\n");
    }
    legend(b, pn, xl, top - 8);
    sl_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", xl,
                  top, xr - xl, height);
    y_ticks(b, &ay, xl, xr, pn->yunit);
    x_ticks(b, p, ax, top, bottom, last);
    if (pn->ylabel) {
        sl_buf_printf(b, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" class=\"atitle\" "
                         "text-anchor=\"middle\">", 18.0, top + height / 2);
        sl_buf_xml(b, pn->ylabel);
        sl_buf_printf(b, "</text>\n");
    }
    const char *id = p->id ? p->id : "p";
    sl_buf_printf(b, "<clipPath id=\"%s-clip%zu\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                     "height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#%s-clip%zu)\">\n",
                  id, index, xl, top - 1, xr - xl, height + 2, id, index);
    /* stacked bars and areas first, lines on top */
    size_t n = 0;
    for (size_t j = 0; j < pn->nseries; j++) n = pn->series[j].n > n ? pn->series[j].n : n;
    double *base_b = calloc(n + 1, sizeof(double)), *base_a = calloc(n + 1, sizeof(double));
    for (size_t j = 0; j < pn->nseries && base_b && base_a; j++) {
        const sl_plot_series *s = &pn->series[j];
        if (s->kind == SL_PLOT_BARS) {
            double bw = (ax_map(ax, p->x0 + p->dx) - ax_map(ax, p->x0));
            double gap = bw > 4 ? 1 : 0;
            for (size_t i = 0; i < s->n; i++) {
                if (!(s->y[i] > 0)) continue;
                double x = ax_map(ax, sx(p, s, i));
                double y0 = ax_map(&ay, base_b[i]), y1 = ax_map(&ay, base_b[i] + s->y[i]);
                sl_buf_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
                              x, y1, bw > gap ? bw - gap : bw, y0 - y1, s->color);
                base_b[i] += s->y[i];
            }
        } else if (s->kind == SL_PLOT_AREA && s->n > 0) {
            sl_buf_printf(b, "<path fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" d=\"", s->color);
            for (size_t i = 0; i < s->n; i++)
                sl_buf_printf(b, "%s%.2f,%.2f", i ? " L" : "M", ax_map(ax, sx(p, s, i)),
                              ax_map(&ay, base_a[i] + (isfinite(s->y[i]) ? s->y[i] : 0)));
            for (size_t i = s->n; i-- > 0;)
                sl_buf_printf(b, " L%.2f,%.2f", ax_map(ax, sx(p, s, i)), ax_map(&ay, base_a[i]));
            sl_buf_printf(b, " Z\"/>\n");
            for (size_t i = 0; i < s->n; i++)
                if (isfinite(s->y[i])) base_a[i] += s->y[i];
        }
    }
    free(base_b);
    free(base_a);
    /* next to bars, a line's points sit in the middle of their bar */
    bool bars = false;
    for (size_t j = 0; j < pn->nseries; j++) bars |= pn->series[j].kind == SL_PLOT_BARS;
    double shift = bars && !p->xlog ? p->dx / 2 : 0;
    for (size_t j = 0; j < pn->nseries; j++) {
        const sl_plot_series *s = &pn->series[j];
        if (s->kind != SL_PLOT_LINE && s->kind != SL_PLOT_STEP) continue;
        sl_buf_printf(b, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s d=\"", s->color,
                      s->dashed ? " stroke-dasharray=\"6,4\"" : "");
        bool pen = false;
        double prev_y = 0;
        for (size_t i = 0; i < s->n; i++) {
            double xv = sx(p, s, i), yv = s->y[i];
            if (!isfinite(yv) || (pn->ylog && yv <= 0) || (p->xlog && xv <= 0)) {
                pen = false;
                continue;
            }
            double X = ax_map(ax, xv + (s->x ? 0 : shift)), Y = ax_map(&ay, yv);
            if (!pen) sl_buf_printf(b, " M%.2f,%.2f", X, Y);
            else if (s->kind == SL_PLOT_STEP) sl_buf_printf(b, " L%.2f,%.2f L%.2f,%.2f", X, prev_y, X, Y);
            else sl_buf_printf(b, " L%.2f,%.2f", X, Y);
            pen = true;
            prev_y = Y;
        }
        sl_buf_printf(b, "\"/>\n");
    }
    sl_buf_printf(b, "</g>\n");
    for (size_t j = 0; j < pn->nmarks; j++) {
        const sl_plot_mark *m = &pn->marks[j];
        if (p->xlog && m->x <= 0) continue;
        double x = ax_map(ax, m->x);
        sl_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                         "stroke-width=\"2\"%s/>\n",
                      x, top, x, bottom, m->color, m->dashed ? " stroke-dasharray=\"6,4\"" : "");
        if (m->label) {
            /* labels right of the line, or left of it near the right edge */
            bool left = x > xl + (xr - xl) * 0.7;
            sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"mark\" fill=\"%s\" text-anchor=\"%s\">",
                          left ? x - 5 : x + 5, top + 16 + 15.0 * (double)j, m->color,
                          left ? "end" : "start");
            sl_buf_xml(b, m->label);
            sl_buf_printf(b, "</text>\n");
        }
    }
}

void sl_svg_plot(sl_buf *b, const sl_plot *p) {
    int width = p->width > 0 ? p->width : 960;
    int ph = p->panel_height > 0 ? p->panel_height : 220;
    size_t np = p->npanels ? p->npanels : 1;
    double height = MT + (double)np * ph + (double)(np - 1) * PGAP + MB + (p->subtitle ? 18 : 0);
    sl_buf_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
                     "height=\"%.0f\" viewBox=\"0 0 %d %.0f\" font-family=\"DejaVu Sans, Helvetica, "
                     "Arial, sans-serif\">\n",
                  width, height, width, height);
    sl_buf_printf(b, "<title>");
    sl_buf_xml(b, p->title ? p->title : "sluice");
    sl_buf_printf(b, "</title>\n<style>\n"
                     ".title{font-size:17px;font-weight:bold;fill:#222}\n"
                     ".subtitle{font-size:12px;fill:#555}\n"
                     ".ptitle{font-size:13px;font-weight:bold;fill:#333}\n"
                     ".tick{font-size:11px;fill:#444}\n"
                     ".legend{font-size:11.5px;fill:#333}\n"
                     ".atitle{font-size:12px;fill:#333}\n"
                     ".mark{font-size:11.5px;font-weight:bold}\n"
                     ".grid{stroke:#e3e3e3;stroke-width:1}\n"
                     ".minor{stroke:#f1f1f1;stroke-width:1}\n"
                     ".frame{fill:none;stroke:#999;stroke-width:1}\n"
                     "</style>\n"
                     "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%.0f\" fill=\"#ffffff\"/>\n",
                  width, height);
    sl_buf_printf(b, "<text x=\"%d\" y=\"24\" class=\"title\">", ML);
    sl_buf_xml(b, p->title ? p->title : "");
    sl_buf_printf(b, "</text>\n");
    double top = MT;
    if (p->subtitle) {
        sl_buf_printf(b, "<text x=\"%d\" y=\"44\" class=\"subtitle\">", ML);
        sl_buf_xml(b, p->subtitle);
        sl_buf_printf(b, "</text>\n");
        top += 18;
    }
    double lo, hi;
    x_range(p, &lo, &hi);
    axis ax = {lo, hi, p->xlog, ML, width - MR};
    for (size_t k = 0; k < p->npanels; k++) {
        panel(b, p, &p->panels[k], &ax, top, ph, k + 1 == p->npanels, k);
        top += ph + PGAP;
    }
    top -= PGAP;
    if (p->xlabel) {
        sl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"atitle\" text-anchor=\"middle\">",
                      (ML + width - MR) / 2.0, top + 40);
        sl_buf_xml(b, p->xlabel);
        sl_buf_printf(b, "</text>\n");
    }
    sl_buf_printf(b, "</svg>\n");
}
