/* plot.h - line charts drawn with cairo: several series, linear / log10 / log2 axes, dashed series (e.g. a
 * roofline), markers, a legend, a title and axis labels, anti-aliased, into a PNG file or into a caller's
 * 32-bit ARGB pixel buffer (the format of an SDL_PIXELFORMAT_ARGB8888 surface). `omni bench` draws its chart
 * with it and the SDL demo draws its live charts (KV MiB vs tokens, tokens/s over time) with the same code.
 *
 * Usage:
 *     plot_params p = plot_default_params();
 *     p.title = "decode tokens/s vs context"; p.x_label = "context (tokens)"; p.x_scale = PLOT_LOG2;
 *     plot_chart *c;  plot_init(&p, &c);
 *     plot_series s = plot_default_series();  s.name = "int2"; s.x = xs; s.y = ys; s.n = 4;
 *     plot_add_series(c, &s);                       // data is copied; xs/ys may be freed afterwards
 *     plot_write_png(c, "chart.png");               // p.width x p.height pixels
 *     plot_draw_argb(c, pixels, W, H, stride, x, y, w, h);  // or into a rectangle of a pixel buffer
 *     plot_free(c);
 * Live charts keep the series and replace their points each frame with plot_set_data (no allocation once the
 * capacity suffices). Several charts make one figure with plot_write_png_grid.
 *
 * Geometry: plot_get_frame(c, w, h, &f) gives the plot area (pixels, relative to the chart's top-left corner)
 * and the axis ranges that a w x h drawing of the chart uses; plot_frame_map turns a data point into the pixel
 * where it is drawn (tests and hit-testing use this). Points that a log axis cannot show (<= 0) and NaN/Inf
 * values are skipped, breaking the line there. Series are clipped a few pixels outside the plot area, so markers
 * on the axis ends stay whole.
 *
 * Text uses a TrueType file through FreeType (default: DejaVu Sans from Debian's fonts-dejavu-core, so no
 * fontconfig set-up is needed on bare machines); when that file is missing, cairo's "sans-serif" is used.
 * No global state: every chart owns its font and data; charts may be drawn from different threads as long as
 * one chart is not used by two threads at once. Errors: omni_status with omni_last_error() (kernels/status.h). */
#ifndef OMNI_APP_PLOT_H
#define OMNI_APP_PLOT_H

#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PLOT_LINEAR = 0, PLOT_LOG10, PLOT_LOG2 } plot_scale;

/* Tick labels: PLOT_FMT_AUTO prints 0.5, 12, 1500, 25k, 3.2M (SI above 10000); PLOT_FMT_BINARY prints
 * multiples of 1024 as 4K, 128K, 1M (context sizes). */
typedef enum { PLOT_FMT_AUTO = 0, PLOT_FMT_BINARY } plot_format;

/* Legend corner inside the plot area; AUTO takes the corner that hides the fewest points and line samples. */
typedef enum { PLOT_LEGEND_AUTO = 0, PLOT_LEGEND_TOP_LEFT, PLOT_LEGEND_TOP_RIGHT, PLOT_LEGEND_BOTTOM_LEFT,
               PLOT_LEGEND_BOTTOM_RIGHT, PLOT_LEGEND_NONE } plot_legend;

typedef struct {
    int width, height;            /* size of plot_write_png's image, pixels (default 800 x 500) */
    const char *title;            /* NULL = none (strings are copied by plot_init) */
    const char *x_label, *y_label;
    plot_scale x_scale, y_scale;  /* default linear */
    plot_format x_format, y_format;
    double x_min, x_max, y_min, y_max; /* axis range; NaN = from the data (rounded out to ticks) */
    int y_from_zero;              /* linear y: include 0 in the automatic range (default 1) */
    plot_legend legend;           /* default AUTO */
    const char *font_file;        /* TrueType file; NULL = DejaVuSans.ttf, then cairo's "sans-serif" */
    double font_size;             /* pixels; 0 = from the drawing height (h / 36, within 10..18) */
    uint32_t background;          /* 0xAARRGGBB (default opaque white) */
} plot_params;

typedef struct {
    const char *name;   /* legend text; NULL = not in the legend (copied) */
    const double *x, *y;/* [n] points, in order of drawing (copied by plot_add_series / plot_set_data) */
    int n;
    uint32_t color;     /* 0xAARRGGBB; 0 = the palette colour of the series index */
    double line_width;  /* pixels (default 2); 0 = no line (markers only) */
    int dashed;         /* 1 = dashed line (rooflines, limits) */
    int markers;        /* 1 = a filled circle at each point (default 1) */
} plot_series;

/* Pixel rectangle of the plot area (x0 < x1, y0 < y1, y grows downwards), the axis ranges in data units, and
 * the legend's box (drawn over the area; all 0 when there is no legend). */
typedef struct {
    double x0, y0, x1, y1;
    double x_min, x_max, y_min, y_max;
    plot_scale x_scale, y_scale;
    double legend_x0, legend_y0, legend_x1, legend_y1;
} plot_frame;

typedef struct plot_chart plot_chart;

plot_params plot_default_params(void);
plot_series plot_default_series(void);

/* Checks the parameters (sizes > 0, log axis ranges > 0, min < max when both set) and loads the font. */
omni_status plot_init(const plot_params *p, plot_chart **out);
void plot_free(plot_chart *c); /* NULL is a no-op */

/* Appends a series (data copied); *index (may be NULL) receives its index. */
omni_status plot_add_series(plot_chart *c, const plot_series *s, int *index);
/* Replaces the points of series `index` (grows its storage only when n exceeds what it held). */
omni_status plot_set_data(plot_chart *c, int index, const double *x, const double *y, int n);
int plot_series_count(const plot_chart *c);
/* Series i as stored (name, points, resolved colour, style; pointers valid until the series changes). Returns 0
 * for a bad index. */
int plot_get_series(const plot_chart *c, int i, plot_series *out);
void plot_clear(plot_chart *c); /* removes every series */

/* Default palette colour i (0xFFRRGGBB); bench and demo use the same colours for the same formats. */
uint32_t plot_palette(int i);

/* Layout of a w x h drawing of the chart (see the header comment). */
omni_status plot_get_frame(const plot_chart *c, int w, int h, plot_frame *f);
/* Data point -> pixel (relative to the chart's top-left corner). Returns 0 when the point cannot be shown on
 * these axes (NaN, or <= 0 on a log axis); points outside the range map outside the area. */
int plot_frame_map(const plot_frame *f, double x, double y, double *px, double *py);

/* Draws the chart into the rectangle (x, y, w, h) of a pixel buffer: buf_w x buf_h pixels of 32-bit
 * premultiplied ARGB in native byte order (0xAARRGGBB words; SDL_PIXELFORMAT_ARGB8888 on little-endian), rows
 * `stride` bytes apart (a multiple of 4). Pixels outside the rectangle are not touched. */
omni_status plot_draw_argb(const plot_chart *c, uint32_t *pixels, int buf_w, int buf_h, int stride, int x, int y,
                           int w, int h);

/* The chart alone as a width x height PNG (plot_params). */
omni_status plot_write_png(const plot_chart *c, const char *path);
/* n charts in a grid of `cols` columns as one width x height PNG; chart i fills cell i (row-major), see
 * plot_grid_cell. */
omni_status plot_write_png_grid(const plot_chart *const *charts, int n, int cols, int width, int height,
                                const char *path);
/* Cell i of an n-chart grid of `cols` columns over width x height pixels: (x, y, w, h); cells split the size
 * as evenly as integers allow. */
void plot_grid_cell(int n, int cols, int width, int height, int i, int *x, int *y, int *w, int *h);

/* Tick label text of value v with a format (what the axes print; exposed for tables and tests). */
const char *plot_format_value(double v, plot_format fmt, char *buf, int cap);

#ifdef __cplusplus
}
#endif
#endif
