/* plot.c - line charts with cairo (see plot.h): layout (margins from the measured tick labels, nice ticks on
 * linear / log10 / log2 axes), grid, series (lines, dashes, markers), legend, title and axis labels. */
#include "app/plot/plot.h"

#include <cairo-ft.h>
#include <cairo.h>
#include <ft2build.h>
#include FT_FREETYPE_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TICKS 64
#define PLOT_PI 3.14159265358979323846
#define DEFAULT_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

typedef struct {
    char *name;
    double *x, *y; /* [cap] */
    int n, cap;
    uint32_t color;
    double line_width;
    int dashed, markers;
} series;

struct plot_chart {
    plot_params p; /* strings point at the copies below */
    char *title, *x_label, *y_label;
    cairo_font_face_t *face; /* FreeType face from a file, or NULL = cairo's toy "sans-serif" */
    series *s;
    int n_series, cap_series;
};

typedef struct {
    double v;
    int label; /* printed (else a grid line only) */
} tick;

typedef struct { /* one drawing of a chart at w x h */
    plot_frame f;
    double fs; /* font size, pixels */
    tick xt[MAX_TICKS], yt[MAX_TICKS];
    int nxt, nyt;
} layout;

/* ---- parameters, fonts, data ----------------------------------------------------------------------------- */

plot_params plot_default_params(void) {
    plot_params p;
    memset(&p, 0, sizeof p);
    p.width = 800;
    p.height = 500;
    p.x_min = p.x_max = p.y_min = p.y_max = NAN;
    p.y_from_zero = 1;
    p.background = 0xFFFFFFFFu;
    return p;
}

plot_series plot_default_series(void) {
    plot_series s;
    memset(&s, 0, sizeof s);
    s.line_width = 2;
    s.markers = 1;
    return s;
}

uint32_t plot_palette(int i) { /* colour-blind-safe (Okabe-Ito order, strongest first) */
    static const uint32_t pal[] = {0xFF0072B2u, 0xFFD55E00u, 0xFF009E73u, 0xFFCC79A7u,
                                   0xFFE69F00u, 0xFF56B4E9u, 0xFF000000u, 0xFFF0E442u};
    return pal[(i < 0 ? -i : i) % 8];
}

typedef struct {
    FT_Library lib;
    FT_Face face;
} ft_holder;

static const cairo_user_data_key_t g_ft_key; /* address used as a key only, never written */

static void ft_release(void *p) {
    ft_holder *h = p;
    if (h->face) FT_Done_Face(h->face);
    if (h->lib) FT_Done_FreeType(h->lib);
    free(h);
}

/* A cairo face for a TrueType file; NULL when it cannot be loaded. The FreeType objects live as long as the
 * face (released by cairo through the user-data destructor). */
static cairo_font_face_t *load_face(const char *path) {
    ft_holder *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    if (FT_Init_FreeType(&h->lib) || FT_New_Face(h->lib, path, 0, &h->face)) {
        ft_release(h);
        return NULL;
    }
    cairo_font_face_t *f = cairo_ft_font_face_create_for_ft_face(h->face, 0);
    if (cairo_font_face_status(f) || cairo_font_face_set_user_data(f, &g_ft_key, h, ft_release)) {
        cairo_font_face_destroy(f);
        ft_release(h);
        return NULL;
    }
    return f;
}

static char *dup_or_null(const char *s) {
    if (!s) return NULL;
    char *d = malloc(strlen(s) + 1);
    if (d) strcpy(d, s);
    return d;
}

static omni_status check_range(double lo, double hi, plot_scale sc, const char *axis) {
    if ((!isnan(lo) && !isfinite(lo)) || (!isnan(hi) && !isfinite(hi)))
        return omni_fail(OMNI_ERR_USAGE, "plot: %s range must be finite or NaN (automatic)", axis);
    if (!isnan(lo) && !isnan(hi) && !(lo < hi))
        return omni_fail(OMNI_ERR_USAGE, "plot: %s range [%g, %g] is empty", axis, lo, hi);
    if (sc != PLOT_LINEAR && ((!isnan(lo) && lo <= 0) || (!isnan(hi) && hi <= 0)))
        return omni_fail(OMNI_ERR_USAGE, "plot: a log %s axis needs a positive range", axis);
    return OMNI_OK;
}

omni_status plot_init(const plot_params *p, plot_chart **out) {
    *out = NULL;
    if (p->width <= 0 || p->height <= 0 || p->width > 16384 || p->height > 16384)
        return omni_fail(OMNI_ERR_USAGE, "plot: size %dx%d out of range (1..16384)", p->width, p->height);
    if ((unsigned)p->x_scale > PLOT_LOG2 || (unsigned)p->y_scale > PLOT_LOG2 || (unsigned)p->legend > PLOT_LEGEND_NONE)
        return omni_fail(OMNI_ERR_USAGE, "plot: unknown axis scale or legend position");
    if (p->font_size < 0 || p->font_size > 200) return omni_fail(OMNI_ERR_USAGE, "plot: font size %g", p->font_size);
    omni_status st = check_range(p->x_min, p->x_max, p->x_scale, "x");
    if (!st) st = check_range(p->y_min, p->y_max, p->y_scale, "y");
    if (st) return st;
    plot_chart *c = calloc(1, sizeof *c);
    if (!c) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    c->p = *p;
    c->title = dup_or_null(p->title);
    c->x_label = dup_or_null(p->x_label);
    c->y_label = dup_or_null(p->y_label);
    if ((p->title && !c->title) || (p->x_label && !c->x_label) || (p->y_label && !c->y_label)) {
        plot_free(c);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    c->p.title = c->title;
    c->p.x_label = c->x_label;
    c->p.y_label = c->y_label;
    c->p.font_file = NULL;
    c->face = load_face(p->font_file ? p->font_file : DEFAULT_FONT);
    if (!c->face && p->font_file) {
        plot_free(c);
        return omni_fail(OMNI_ERR_INPUT, "plot: cannot load font %s", p->font_file);
    }
    *out = c;
    return OMNI_OK;
}

void plot_clear(plot_chart *c) {
    for (int i = 0; i < c->n_series; i++) {
        free(c->s[i].name);
        free(c->s[i].x);
        free(c->s[i].y);
    }
    c->n_series = 0;
}

void plot_free(plot_chart *c) {
    if (!c) return;
    plot_clear(c);
    free(c->s);
    free(c->title);
    free(c->x_label);
    free(c->y_label);
    if (c->face) cairo_font_face_destroy(c->face);
    free(c);
}

int plot_series_count(const plot_chart *c) { return c->n_series; }

int plot_get_series(const plot_chart *c, int i, plot_series *out) {
    if (i < 0 || i >= c->n_series) return 0;
    const series *s = &c->s[i];
    *out = (plot_series){s->name, s->x, s->y, s->n, s->color, s->line_width, s->dashed, s->markers};
    return 1;
}

omni_status plot_set_data(plot_chart *c, int index, const double *x, const double *y, int n) {
    if (index < 0 || index >= c->n_series) return omni_fail(OMNI_ERR_USAGE, "plot: no series %d", index);
    if (n < 0 || (n > 0 && (!x || !y))) return omni_fail(OMNI_ERR_USAGE, "plot: bad series data (n = %d)", n);
    series *s = &c->s[index];
    if (n > s->cap) {
        double *nx = realloc(s->x, sizeof(double) * (size_t)n);
        if (!nx) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        s->x = nx;
        double *ny = realloc(s->y, sizeof(double) * (size_t)n);
        if (!ny) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        s->y = ny;
        s->cap = n;
    }
    if (n > 0) {
        memcpy(s->x, x, sizeof(double) * (size_t)n);
        memcpy(s->y, y, sizeof(double) * (size_t)n);
    }
    s->n = n;
    return OMNI_OK;
}

omni_status plot_add_series(plot_chart *c, const plot_series *in, int *index) {
    if (in->n < 0 || (in->n > 0 && (!in->x || !in->y)) || !(in->line_width >= 0 && in->line_width <= 100))
        return omni_fail(OMNI_ERR_USAGE, "plot: bad series (n = %d, line width %g)", in->n, in->line_width);
    if (c->n_series == c->cap_series) {
        int cap = c->cap_series ? 2 * c->cap_series : 8;
        series *ns = realloc(c->s, sizeof(series) * (size_t)cap);
        if (!ns) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        c->s = ns;
        c->cap_series = cap;
    }
    series *s = &c->s[c->n_series];
    memset(s, 0, sizeof *s);
    s->name = dup_or_null(in->name);
    if (in->name && !s->name) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    s->color = in->color ? in->color : plot_palette(c->n_series);
    s->line_width = in->line_width;
    s->dashed = in->dashed;
    s->markers = in->markers;
    int idx = c->n_series++;
    omni_status st = plot_set_data(c, idx, in->x, in->y, in->n);
    if (st) {
        c->n_series--;
        free(s->name);
        free(s->x);
        free(s->y);
        return st;
    }
    if (index) *index = idx;
    return OMNI_OK;
}

/* ---- numbers and ticks ----------------------------------------------------------------------------------- */

const char *plot_format_value(double v, plot_format fmt, char *buf, int cap) {
    double a = fabs(v);
    if (fmt == PLOT_FMT_BINARY && a >= 1024 && fmod(a, 1024) == 0) {
        if (fmod(a, 1048576) == 0) snprintf(buf, (size_t)cap, "%gM", v / 1048576);
        else snprintf(buf, (size_t)cap, "%gK", v / 1024);
    } else if (a >= 1e9) {
        snprintf(buf, (size_t)cap, "%.3gG", v / 1e9);
    } else if (a >= 1e6) {
        snprintf(buf, (size_t)cap, "%.3gM", v / 1e6);
    } else if (a >= 1e4) {
        snprintf(buf, (size_t)cap, "%.3gk", v / 1e3);
    } else {
        snprintf(buf, (size_t)cap, "%.4g", a < 1e-12 ? 0.0 : v);
    }
    return buf;
}

static int usable(double v, plot_scale sc) { return isfinite(v) && (sc == PLOT_LINEAR || v > 0); }

/* Extent of the data on one axis (0 = x, 1 = y); returns 0 when no point can be shown. */
static int data_extent(const plot_chart *c, int axis, double *lo, double *hi) {
    int any = 0;
    plot_scale xs = c->p.x_scale, ys = c->p.y_scale;
    for (int i = 0; i < c->n_series; i++)
        for (int j = 0; j < c->s[i].n; j++) {
            double x = c->s[i].x[j], y = c->s[i].y[j];
            if (!usable(x, xs) || !usable(y, ys)) continue;
            double v = axis ? y : x;
            if (!any || v < *lo) *lo = v;
            if (!any || v > *hi) *hi = v;
            any = 1;
        }
    return any;
}

static double nice_step(double range, int target) {
    double raw = range / (target > 1 ? target : 1), mag = pow(10, floor(log10(raw))), n = raw / mag;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * mag;
}

/* Axis range: explicit ends win; automatic ends come from the data, rounded out to ticks (step for linear,
 * decades / powers of two for log axes). `target` = ticks that fit along the axis. */
static void axis_range(const plot_chart *c, int axis, int target, double *lo, double *hi) {
    plot_scale sc = axis ? c->p.y_scale : c->p.x_scale;
    double want_lo = axis ? c->p.y_min : c->p.x_min, want_hi = axis ? c->p.y_max : c->p.x_max;
    double a = 0, b = 0;
    if (!data_extent(c, axis, &a, &b)) a = sc == PLOT_LINEAR ? 0 : 1, b = sc == PLOT_LINEAR ? 1 : 10;
    if (!isnan(want_lo)) a = want_lo;
    if (!isnan(want_hi)) b = want_hi;
    if (sc == PLOT_LINEAR) {
        if (axis && c->p.y_from_zero) {
            if (isnan(want_lo) && a > 0) a = 0;
            if (isnan(want_hi) && b < 0) b = 0;
        }
        if (!(a < b)) { /* one value: a unit-sized window around it */
            double d = a != 0 ? fabs(a) * 0.5 : 1;
            if (isnan(want_lo)) a -= d;
            if (isnan(want_hi) || !(a < b)) b = a + 2 * d;
        }
        double step = nice_step(b - a, target);
        if (isnan(want_lo)) a = floor(a / step + 1e-9) * step;
        if (isnan(want_hi)) b = ceil(b / step - 1e-9) * step;
    } else {
        double base = sc == PLOT_LOG10 ? 10 : 2, la = log(a) / log(base), lb = log(b) / log(base);
        if (isnan(want_lo)) a = pow(base, floor(la + 1e-9));
        if (isnan(want_hi)) b = pow(base, ceil(lb - 1e-9));
        if (!(a < b)) {
            if (isnan(want_lo)) a /= base;
            if (isnan(want_hi) || !(a < b)) b = a * base * base;
        }
    }
    *lo = a;
    *hi = b;
}

static int push_tick(tick *t, int n, double v, int label) {
    if (n < MAX_TICKS) t[n++] = (tick){v, label};
    return n;
}

/* Ticks for [lo, hi]: at most about `target` labels. */
static int make_ticks(plot_scale sc, double lo, double hi, int target, tick *t) {
    int n = 0;
    if (target < 2) target = 2;
    if (sc == PLOT_LINEAR) {
        double step = nice_step(hi - lo, target);
        for (double k = ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9 && n < MAX_TICKS; k++)
            n = push_tick(t, n, fabs(k * step) < step * 1e-9 ? 0 : k * step, 1);
        return n;
    }
    double base = sc == PLOT_LOG10 ? 10 : 2;
    int k0 = (int)ceil(log(lo) / log(base) - 1e-9), k1 = (int)floor(log(hi) / log(base) + 1e-9);
    int every = (k1 - k0 + 1 + target - 1) / target;
    if (every < 1) every = 1;
    for (int k = k0; k <= k1; k++) n = push_tick(t, n, pow(base, k), (k - k0) % every == 0);
    if (sc == PLOT_LOG10) { /* 2x and 5x: labelled when few decades show, else grid lines only */
        int few = k1 - k0 <= 1;
        for (int k = k0 - 1; k <= k1; k++)
            for (int m = 2; m <= 9; m++) {
                double v = m * pow(10, k);
                if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) n = push_tick(t, n, v, few && (m == 2 || m == 5));
            }
    }
    return n;
}

/* ---- layout and mapping ---------------------------------------------------------------------------------- */

static void set_font(cairo_t *cr, const plot_chart *c, double size) {
    if (c->face) cairo_set_font_face(cr, c->face);
    else cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static double text_width(cairo_t *cr, const char *s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

static double labels_width(cairo_t *cr, const tick *t, int n, plot_format fmt) {
    double w = 0;
    char buf[64];
    for (int i = 0; i < n; i++)
        if (t[i].label) w = fmax(w, text_width(cr, plot_format_value(t[i].v, fmt, buf, sizeof buf)));
    return w;
}

static double axis_pos(double v, double lo, double hi, plot_scale sc) {
    return sc == PLOT_LINEAR ? (v - lo) / (hi - lo) : (log(v) - log(lo)) / (log(hi) - log(lo));
}

static double map_x(const plot_frame *f, double x) {
    return f->x0 + axis_pos(x, f->x_min, f->x_max, f->x_scale) * (f->x1 - f->x0);
}

static double map_y(const plot_frame *f, double y) {
    return f->y1 - axis_pos(y, f->y_min, f->y_max, f->y_scale) * (f->y1 - f->y0);
}

int plot_frame_map(const plot_frame *f, double x, double y, double *px, double *py) {
    if (!usable(x, f->x_scale) || !usable(y, f->y_scale)) return 0;
    *px = map_x(f, x);
    *py = map_y(f, y);
    return 1;
}

/* Points and line samples (16 per segment) of all series inside the box. */
static int hidden_samples(const plot_chart *c, const plot_frame *f, double x, double y, double w, double h) {
    int n = 0;
    for (int i = 0; i < c->n_series; i++) {
        const series *s = &c->s[i];
        double ax = 0, ay = 0, bx, by;
        int prev = 0;
        for (int j = 0; j < s->n; j++) {
            if (!plot_frame_map(f, s->x[j], s->y[j], &bx, &by)) { prev = 0; continue; }
            for (int k = prev ? 1 : 16; k <= 16; k++) {
                double px = ax + (bx - ax) * k / 16, py = ay + (by - ay) * k / 16;
                n += px >= x && px <= x + w && py >= y && py <= y + h;
            }
            ax = bx, ay = by, prev = 1;
        }
    }
    return n;
}

/* Legend box: the requested corner, or (AUTO) the corner hiding the fewest samples; stored in L->f. */
static void place_legend(const plot_chart *c, cairo_t *cr, layout *L) {
    int n = 0;
    double tw = 0, fs = L->fs;
    for (int i = 0; i < c->n_series; i++)
        if (c->s[i].name) n++, tw = fmax(tw, text_width(cr, c->s[i].name));
    if (!n || c->p.legend == PLOT_LEGEND_NONE) return;
    plot_frame *f = &L->f;
    double pad = 0.5 * fs, row = 1.4 * fs, sample = 2.4 * fs, m = 0.5 * fs;
    double bw = pad * 3 + sample + tw, bh = pad * 2 + row * n;
    int best = -1;
    for (int corner = PLOT_LEGEND_TOP_LEFT; corner <= PLOT_LEGEND_BOTTOM_RIGHT; corner++) {
        if (c->p.legend != PLOT_LEGEND_AUTO && corner != (int)c->p.legend) continue;
        int right = corner == PLOT_LEGEND_TOP_RIGHT || corner == PLOT_LEGEND_BOTTOM_RIGHT;
        int bottom = corner == PLOT_LEGEND_BOTTOM_LEFT || corner == PLOT_LEGEND_BOTTOM_RIGHT;
        double x = right ? f->x1 - pad - bw : f->x0 + pad, y = bottom ? f->y1 - pad - bh : f->y0 + pad;
        int hid = hidden_samples(c, f, x - m, y - m, bw + 2 * m, bh + 2 * m);
        if (best < 0 || hid < best) {
            best = hid;
            f->legend_x0 = x, f->legend_y0 = y, f->legend_x1 = x + bw, f->legend_y1 = y + bh;
        }
    }
}

static void make_layout(const plot_chart *c, cairo_t *cr, int w, int h, layout *L) {
    const plot_params *p = &c->p;
    double fs = p->font_size > 0 ? p->font_size : fmin(18, fmax(10, h / 36.0));
    set_font(cr, c, fs);
    L->fs = fs;
    double top = (p->title ? 2.2 * fs : 0.9 * fs), bottom = 1.9 * fs + (p->x_label ? 1.5 * fs : 0) + 0.3 * fs;
    double plot_h = fmax(10, h - top - bottom);
    int ytarget = (int)(plot_h / (2.6 * fs));
    double ylo, yhi;
    axis_range(c, 1, ytarget, &ylo, &yhi);
    L->nyt = make_ticks(p->y_scale, ylo, yhi, ytarget, L->yt);
    double left = labels_width(cr, L->yt, L->nyt, p->y_format) + 0.9 * fs + (p->y_label ? 1.7 * fs : 0.3 * fs);
    double right = 1.4 * fs, plot_w = fmax(10, w - left - right);
    /* x labels: a first pass with a guess of their width, then the real width */
    int xtarget = (int)(plot_w / (5 * fs));
    double xlo, xhi;
    axis_range(c, 0, xtarget, &xlo, &xhi);
    L->nxt = make_ticks(p->x_scale, xlo, xhi, xtarget, L->xt);
    double lw = labels_width(cr, L->xt, L->nxt, p->x_format);
    int fit = (int)(plot_w / (lw + 1.5 * fs));
    if (fit < xtarget) {
        axis_range(c, 0, fit, &xlo, &xhi);
        L->nxt = make_ticks(p->x_scale, xlo, xhi, fit, L->xt);
    }
    char buf[64]; /* the last x label is centred on the right end: keep it inside the drawing */
    for (int i = L->nxt - 1; i >= 0; i--)
        if (L->xt[i].label) {
            double t = axis_pos(L->xt[i].v, xlo, xhi, p->x_scale);
            double half = 0.5 * text_width(cr, plot_format_value(L->xt[i].v, p->x_format, buf, sizeof buf));
            double over = left + t * plot_w + half + 0.3 * fs - w;
            if (over > 0 && t > 0) plot_w = fmax(10, plot_w - over / t);
            break;
        }
    L->f = (plot_frame){left, top, left + plot_w, top + plot_h, xlo, xhi, ylo, yhi, p->x_scale, p->y_scale, 0, 0, 0, 0};
    place_legend(c, cr, L);
}

omni_status plot_get_frame(const plot_chart *c, int w, int h, plot_frame *f) {
    if (w <= 0 || h <= 0) return omni_fail(OMNI_ERR_USAGE, "plot: bad size %dx%d", w, h);
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    cairo_t *cr = cairo_create(s);
    omni_status st = OMNI_OK;
    if (cairo_status(cr)) {
        st = omni_fail(OMNI_ERR_NOMEM, "plot: cairo: %s", cairo_status_to_string(cairo_status(cr)));
    } else {
        layout L;
        make_layout(c, cr, w, h, &L);
        *f = L.f;
    }
    cairo_destroy(cr);
    cairo_surface_destroy(s);
    return st;
}

/* ---- drawing --------------------------------------------------------------------------------------------- */

static void set_color(cairo_t *cr, uint32_t argb) {
    cairo_set_source_rgba(cr, ((argb >> 16) & 255) / 255.0, ((argb >> 8) & 255) / 255.0, (argb & 255) / 255.0,
                          ((argb >> 24) & 255) / 255.0);
}

/* Text with its anchor at (x, y): ax 0 left / 0.5 centre / 1 right; ay 0 top / 0.5 middle / 1 bottom. */
static void text_at(cairo_t *cr, const char *s, double x, double y, double ax, double ay) {
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    double base = y + fe.ascent - ay * (fe.ascent + fe.descent);
    cairo_move_to(cr, x - ax * text_width(cr, s), base);
    cairo_show_text(cr, s);
}

static void draw_grid(cairo_t *cr, const layout *L) {
    const plot_frame *f = &L->f;
    cairo_set_line_width(cr, 1);
    for (int pass = 0; pass < 2; pass++) { /* unlabelled (minor) lines first, labelled on top */
        set_color(cr, pass ? 0xFFDDDDDDu : 0xFFF0F0F0u);
        for (int i = 0; i < L->nxt; i++)
            if (L->xt[i].label == pass) {
                double px = floor(map_x(f, L->xt[i].v)) + 0.5;
                cairo_move_to(cr, px, f->y0);
                cairo_line_to(cr, px, f->y1);
            }
        for (int i = 0; i < L->nyt; i++)
            if (L->yt[i].label == pass) {
                double py = floor(map_y(f, L->yt[i].v)) + 0.5;
                cairo_move_to(cr, f->x0, py);
                cairo_line_to(cr, f->x1, py);
            }
        cairo_stroke(cr);
    }
    set_color(cr, 0xFF404040u); /* the frame and the tick marks, under the series */
    double fx = floor(f->x0) + 0.5, fy = floor(f->y0) + 0.5;
    cairo_rectangle(cr, fx, fy, floor(f->x1) - floor(f->x0), floor(f->y1) - floor(f->y0));
    for (int i = 0; i < L->nxt; i++) {
        double px = floor(map_x(f, L->xt[i].v)) + 0.5;
        cairo_move_to(cr, px, f->y1);
        cairo_line_to(cr, px, f->y1 + (L->xt[i].label ? 0.4 : 0.2) * L->fs);
    }
    for (int i = 0; i < L->nyt; i++) {
        double py = floor(map_y(f, L->yt[i].v)) + 0.5;
        cairo_move_to(cr, f->x0 - (L->yt[i].label ? 0.4 : 0.2) * L->fs, py);
        cairo_line_to(cr, f->x0, py);
    }
    cairo_stroke(cr);
}

static void draw_axes(const plot_chart *c, cairo_t *cr, const layout *L) {
    const plot_frame *f = &L->f;
    double fs = L->fs;
    char buf[64];
    set_color(cr, 0xFF404040u);
    set_font(cr, c, fs);
    for (int i = 0; i < L->nxt; i++)
        if (L->xt[i].label)
            text_at(cr, plot_format_value(L->xt[i].v, c->p.x_format, buf, sizeof buf), map_x(f, L->xt[i].v),
                    f->y1 + 0.55 * fs, 0.5, 0);
    for (int i = 0; i < L->nyt; i++)
        if (L->yt[i].label)
            text_at(cr, plot_format_value(L->yt[i].v, c->p.y_format, buf, sizeof buf), f->x0 - 0.55 * fs,
                    map_y(f, L->yt[i].v), 1, 0.5);
    set_color(cr, 0xFF202020u);
    if (c->p.x_label) text_at(cr, c->p.x_label, (f->x0 + f->x1) / 2, f->y1 + 1.9 * fs, 0.5, 0);
    if (c->p.y_label) {
        cairo_save(cr);
        cairo_translate(cr, 0.3 * fs, (f->y0 + f->y1) / 2);
        cairo_rotate(cr, -PLOT_PI / 2);
        text_at(cr, c->p.y_label, 0, 0, 0.5, 0);
        cairo_restore(cr);
    }
    if (c->p.title) {
        set_font(cr, c, 1.2 * fs);
        text_at(cr, c->p.title, (f->x0 + f->x1) / 2, 0.5 * fs, 0.5, 0);
        set_font(cr, c, fs);
    }
}

static void line_style(cairo_t *cr, const series *s) {
    static const double dash[2] = {7, 5};
    set_color(cr, s->color);
    cairo_set_line_width(cr, s->line_width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, s->dashed ? CAIRO_LINE_CAP_BUTT : CAIRO_LINE_CAP_ROUND);
    cairo_set_dash(cr, dash, s->dashed ? 2 : 0, 0);
}

static double marker_radius(const series *s) { return fmax(3.5, 1.75 * s->line_width); }

/* Series are clipped to the plot area grown by this much (markers at the ends of the range stay whole). */
static double clip_margin(const layout *L) { return 0.5 * L->fs; }

static void draw_series(const plot_chart *c, cairo_t *cr, const layout *L) {
    const plot_frame *f = &L->f;
    double m = clip_margin(L);
    cairo_save(cr);
    cairo_rectangle(cr, f->x0 - m, f->y0 - m, f->x1 - f->x0 + 2 * m, f->y1 - f->y0 + 2 * m);
    cairo_clip(cr);
    for (int i = 0; i < c->n_series; i++) {
        const series *s = &c->s[i];
        double px, py;
        line_style(cr, s);
        if (s->line_width > 0) {
            int pen = 0; /* a point that cannot be shown breaks the line */
            for (int j = 0; j < s->n; j++) {
                if (!plot_frame_map(f, s->x[j], s->y[j], &px, &py)) { pen = 0; continue; }
                if (pen) cairo_line_to(cr, px, py);
                else cairo_move_to(cr, px, py);
                pen = 1;
            }
            cairo_stroke(cr);
        }
        if (s->markers)
            for (int j = 0; j < s->n; j++)
                if (plot_frame_map(f, s->x[j], s->y[j], &px, &py)) {
                    cairo_new_sub_path(cr);
                    cairo_arc(cr, px, py, marker_radius(s), 0, 2 * PLOT_PI);
                    cairo_fill(cr);
                }
    }
    cairo_restore(cr);
}

static void draw_legend(const plot_chart *c, cairo_t *cr, const layout *L) {
    const plot_frame *f = &L->f;
    if (f->legend_x1 <= f->legend_x0) return;
    double fs = L->fs, pad = 0.5 * fs, row = 1.4 * fs, sample = 2.4 * fs, x = f->legend_x0, y = f->legend_y0;
    cairo_rectangle(cr, floor(x) + 0.5, floor(y) + 0.5, floor(f->legend_x1 - x), floor(f->legend_y1 - y));
    set_color(cr, 0xE6FFFFFFu);
    cairo_fill_preserve(cr);
    set_color(cr, 0xFFBBBBBBu);
    cairo_set_line_width(cr, 1);
    cairo_set_dash(cr, NULL, 0, 0);
    cairo_stroke(cr);
    set_font(cr, c, fs);
    int k = 0;
    for (int i = 0; i < c->n_series; i++) {
        const series *s = &c->s[i];
        if (!s->name) continue;
        double cy = y + pad + row * (k++ + 0.5);
        line_style(cr, s);
        cairo_move_to(cr, x + pad, cy);
        cairo_line_to(cr, x + pad + sample, cy);
        if (s->line_width > 0) cairo_stroke(cr);
        else cairo_new_path(cr);
        if (s->markers) {
            cairo_arc(cr, x + pad + sample / 2, cy, marker_radius(s), 0, 2 * PLOT_PI);
            cairo_fill(cr);
        }
        set_color(cr, 0xFF202020u);
        text_at(cr, s->name, x + 2 * pad + sample, cy, 0, 0.5);
    }
}

/* The whole chart into (0, 0, w, h) of cr's user space: grid, frame and ticks, then the series, then the labels
 * and the legend on top. */
static omni_status draw_chart(const plot_chart *c, cairo_t *cr, int w, int h) {
    layout L;
    cairo_save(cr);
    cairo_rectangle(cr, 0, 0, w, h);
    cairo_clip(cr);
    set_color(cr, c->p.background);
    cairo_set_operator(cr, CAIRO_OPERATOR_SOURCE);
    cairo_paint(cr);
    cairo_set_operator(cr, CAIRO_OPERATOR_OVER);
    cairo_set_antialias(cr, CAIRO_ANTIALIAS_DEFAULT);
    make_layout(c, cr, w, h, &L);
    draw_grid(cr, &L);
    draw_series(c, cr, &L);
    draw_axes(c, cr, &L);
    draw_legend(c, cr, &L);
    cairo_restore(cr);
    cairo_status_t cs = cairo_status(cr);
    return cs ? omni_fail(OMNI_ERR_RUNTIME, "plot: cairo: %s", cairo_status_to_string(cs)) : OMNI_OK;
}

omni_status plot_draw_argb(const plot_chart *c, uint32_t *pixels, int buf_w, int buf_h, int stride, int x, int y,
                           int w, int h) {
    if (!pixels || buf_w <= 0 || buf_h <= 0 || stride < 4 * buf_w || stride % 4 || w <= 0 || h <= 0)
        return omni_fail(OMNI_ERR_USAGE, "plot: bad pixel buffer (%dx%d, stride %d) or rectangle %dx%d", buf_w, buf_h,
                         stride, w, h);
    cairo_surface_t *s =
        cairo_image_surface_create_for_data((unsigned char *)pixels, CAIRO_FORMAT_ARGB32, buf_w, buf_h, stride);
    cairo_t *cr = cairo_create(s);
    omni_status st;
    if (cairo_status(cr)) {
        st = omni_fail(OMNI_ERR_RUNTIME, "plot: cairo: %s", cairo_status_to_string(cairo_status(cr)));
    } else {
        cairo_translate(cr, x, y);
        st = draw_chart(c, cr, w, h);
    }
    cairo_destroy(cr);
    cairo_surface_flush(s);
    cairo_surface_destroy(s);
    return st;
}

void plot_grid_cell(int n, int cols, int width, int height, int i, int *x, int *y, int *w, int *h) {
    if (cols > n) cols = n;
    if (cols < 1) cols = 1;
    int rows = (n + cols - 1) / cols, r = i / cols, k = i % cols;
    if (rows < 1) rows = 1;
    *x = (int)((int64_t)k * width / cols);
    *y = (int)((int64_t)r * height / rows);
    *w = (int)((int64_t)(k + 1) * width / cols) - *x;
    *h = (int)((int64_t)(r + 1) * height / rows) - *y;
}

omni_status plot_write_png_grid(const plot_chart *const *charts, int n, int cols, int width, int height,
                                const char *path) {
    if (n <= 0 || cols <= 0 || width <= 0 || height <= 0 || width > 16384 || height > 16384)
        return omni_fail(OMNI_ERR_USAGE, "plot: bad grid (%d charts, %d columns, %dx%d pixels)", n, cols, width,
                         height);
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
    cairo_t *cr = cairo_create(s);
    omni_status st = OMNI_OK;
    if (cairo_status(cr)) st = omni_fail(OMNI_ERR_NOMEM, "plot: cairo: %s", cairo_status_to_string(cairo_status(cr)));
    if (!st) {
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_paint(cr);
    }
    for (int i = 0; i < n && !st; i++) {
        int x, y, w, h;
        plot_grid_cell(n, cols, width, height, i, &x, &y, &w, &h);
        if (w <= 0 || h <= 0) continue;
        cairo_save(cr);
        cairo_translate(cr, x, y);
        st = draw_chart(charts[i], cr, w, h);
        cairo_restore(cr);
    }
    cairo_destroy(cr);
    if (!st) {
        cairo_status_t ws = cairo_surface_write_to_png(s, path);
        if (ws) st = omni_fail(OMNI_ERR_INPUT, "cannot write %s: %s", path, cairo_status_to_string(ws));
    }
    cairo_surface_destroy(s);
    return st;
}

omni_status plot_write_png(const plot_chart *c, const char *path) {
    return plot_write_png_grid(&c, 1, 1, c->p.width, c->p.height, path);
}
