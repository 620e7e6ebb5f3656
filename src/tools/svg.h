/* SPDX-License-Identifier: Apache-2.0 */
/*
 * svg.h -- plots drawn by sluice itself as self-contained SVG (no scripts, no fonts, no
 * external references): one or more panels over a shared x axis, each with its own y axis,
 * line/step/bar/stacked-area series, vertical marks (a configured limit) and a legend.
 * Coordinates are doubles: this is presentation, not rate math.
 */
#ifndef SL_SVG_H
#define SL_SVG_H

#include <stdbool.h>
#include <stddef.h>

/* A growable text buffer; `oom` sticks once an allocation failed. */
typedef struct sl_buf {
    char *p;
    size_t len, cap;
    bool oom;
} sl_buf;

void sl_buf_printf(sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sl_buf_xml(sl_buf *b, const char *s); /* s with & < > " escaped */
void sl_buf_free(sl_buf *b);
/* Writes the buffer to path; 0 or -1 (errno set). */
int sl_buf_write(const sl_buf *b, const char *path);

typedef enum sl_plot_kind {
    SL_PLOT_LINE = 0,
    SL_PLOT_STEP = 1, /* a step function (distributions) */
    SL_PLOT_BARS = 2, /* stacked with the panel's other bar series */
    SL_PLOT_AREA = 3  /* stacked with the panel's other area series */
} sl_plot_kind;

typedef struct sl_plot_series {
    const char *label;
    const char *color;   /* "#1b9e77" */
    const double *y;
    const double *x;     /* NULL: the plot's x0 + i*dx */
    size_t n;
    sl_plot_kind kind;
    bool dashed;
} sl_plot_series;

typedef struct sl_plot_mark {
    double x;
    const char *label;
    const char *color;
    bool dashed;
} sl_plot_mark;

#define SL_PLOT_SERIES 8
#define SL_PLOT_MARKS 4
#define SL_PLOT_PANELS 16

typedef struct sl_plot_panel {
    const char *title;
    const char *ylabel;
    bool ylog;             /* decades; values <= 0 are left out */
    double ymin_log;       /* ylog: the lowest decade shown (e.g. 0.01); 0 = from the data */
    double ymax;           /* the top of the y axis; 0 = from the data */
    const char *yunit;     /* appended to the y tick labels ("%"); NULL = none */
    size_t nseries;
    sl_plot_series series[SL_PLOT_SERIES];
    size_t nmarks;
    sl_plot_mark marks[SL_PLOT_MARKS];
} sl_plot_panel;

typedef struct sl_plot {
    const char *id;        /* prefix of element ids, unique per page (several plots inline) */
    const char *title;
    const char *subtitle;  /* a second line under the title */
    const char *xlabel;
    double x0, dx;
    bool xlog;
    bool xtime;            /* x is seconds since the epoch: ticks are clock times (UTC) */
    int width;             /* px; default 960 */
    int panel_height;      /* px per panel; default 220 */
    size_t npanels;
    sl_plot_panel panels[SL_PLOT_PANELS];
} sl_plot;

/* The plot as a standalone SVG document appended to b. */
void sl_svg_plot(sl_buf *b, const sl_plot *p);

/* Fixed colours used across sluice's plots, so a series reads the same everywhere. */
#define SL_COLOR_ADMITTED "#2a9d55"
#define SL_COLOR_REJECTED "#d1495b"
#define SL_COLOR_DELAYED "#edae49"
#define SL_COLOR_SHADOW "#6a4c93"
#define SL_COLOR_SENT "#555555"
#define SL_COLOR_OTHER "#a8a8a8"
#define SL_COLOR_LIMIT "#d1495b"
#define SL_COLOR_SUGGEST "#2a9d55"

#endif
