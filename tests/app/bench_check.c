/* bench_check.c - see bench_check.h. */
#define _DEFAULT_SOURCE
#include "bench_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb_image.h>

#include "kernels/status.h"

const char *const bench_csv_columns[] = {
    "kind",        "model",          "device",       "kv",         "batch",      "ctx",
    "steps",       "decode_tok_s",   "step_ms_p50",  "step_ms_p99", "prefill_tok_s", "ttft_ms",
    "kv_mib",      "weights_mib",    "step_mib",     "bw_gb_s",    "roofline_tok_s", "roofline_pct",
    "kv_mem_gib",  "seq_kv_mib",     "fits",         "fits_budget", "reserve_mib",   "fits_limit",
};
const int bench_csv_n_columns = (int)(sizeof bench_csv_columns / sizeof bench_csv_columns[0]);

#define MAXF 32

/* Split a line at commas in place; returns the field count. */
static int split(char *line, char **f) {
    int n = 0;
    for (char *p = line; n < MAXF;) {
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    return n;
}

static double num(char **f, int i) { return f[i][0] ? strtod(f[i], NULL) : NAN; }

static void copy_name(char *dst, const char *src, size_t cap) {
    snprintf(dst, cap, "%s", src);
}

static int read_row(char **f, bench_results *r) {
    if (!strcmp(f[0], "point")) {
        bench_point p = {0};
        copy_name(p.kv, f[3], sizeof p.kv);
        p.batch = atoi(f[4]), p.ctx = atoi(f[5]), p.steps = atoi(f[6]);
        p.decode_tok_s = num(f, 7), p.step_ms_p50 = num(f, 8), p.step_ms_p99 = num(f, 9);
        p.prefill_tok_s = num(f, 10), p.ttft_ms = num(f, 11), p.kv_mib = num(f, 12), p.weights_mib = num(f, 13);
        p.step_mib = num(f, 14), p.roofline_tok_s = num(f, 16), p.roofline_pct = num(f, 17);
        return bench_add_point(r, &p) ? -1 : 0;
    }
    if (!strcmp(f[0], "fit")) {
        bench_fit x = {0};
        copy_name(x.kv, f[3], sizeof x.kv);
        x.ctx = atoi(f[5]);
        x.kv_mem_gib = num(f, 18), x.seq_kv_mib = num(f, 19), x.fits = *f[20] ? atoi(f[20]) : -1, x.fits_budget = atoi(f[21]);
        x.reserve_mib = num(f, 22), x.fits_limit = atoi(f[23]);
        return bench_add_fit(r, &x) ? -1 : 0;
    }
    return -1;
}

int bench_csv_read(const char *path, bench_results *r, char *err, int cap) {
    memset(r, 0, sizeof *r);
    char *text = omni_read_file(path, NULL), *f[MAXF];
    if (!text) return snprintf(err, cap, "cannot read %s", path), -1;
    int line_no = 0, rc = 0;
    for (char *line = text, *next; line && *line && !rc; line = next, line_no++) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        int n = split(line, f);
        if (n != bench_csv_n_columns) {
            snprintf(err, cap, "line %d: %d fields, want %d", line_no + 1, n, bench_csv_n_columns);
            rc = -1;
        } else if (line_no == 0) {
            for (int i = 0; i < n && !rc; i++)
                if (strcmp(f[i], bench_csv_columns[i]))
                    rc = -1, snprintf(err, cap, "header column %d is '%s', want '%s'", i, f[i], bench_csv_columns[i]);
        } else {
            if (!r->model[0]) {
                copy_name(r->model, f[1], sizeof r->model);
                copy_name(r->device, f[2], sizeof r->device);
                r->bw_gb_s = num(f, 15);
            }
            if (read_row(f, r)) rc = -1, snprintf(err, cap, "line %d: unknown kind '%s'", line_no + 1, f[0]);
        }
    }
    free(text);
    if (!rc && line_no < 2) rc = -1, snprintf(err, cap, "no rows");
    return rc;
}

static int color_dist(const unsigned char *p, uint32_t c) {
    int d = 0, ch[3] = {(int)((c >> 16) & 255), (int)((c >> 8) & 255), (int)(c & 255)};
    for (int k = 0; k < 3; k++) d = abs(p[k] - ch[k]) > d ? abs(p[k] - ch[k]) : d;
    return d;
}

static double seg_dist(double px, double py, double ax, double ay, double bx, double by) {
    double dx = bx - ax, dy = by - ay, l2 = dx * dx + dy * dy, t = l2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / l2 : 0;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    return hypot(px - ax - t * dx, py - ay - t * dy);
}

/* Does a series drawn after series `si` cover the pixel (px, py) (its marker or its line)? */
static int covered_later(const plot_chart *c, const plot_frame *f, int si, double px, double py, uint32_t *col) {
    plot_series s;
    for (int j = si + 1; plot_get_series(c, j, &s); j++) {
        double ax = 0, ay = 0, bx, by;
        int prev = 0;
        for (int k = 0; k < s.n; k++) {
            if (!plot_frame_map(f, s.x[k], s.y[k], &bx, &by)) { prev = 0; continue; }
            int hit = (s.markers && hypot(bx - px, by - py) <= fmax(3.5, 1.75 * s.line_width) + 1.5) ||
                      (prev && s.line_width > 0 && seg_dist(px, py, ax, ay, bx, by) <= s.line_width / 2 + 1.5);
            if (hit) {
                *col = s.color;
                return 1;
            }
            ax = bx, ay = by, prev = 1;
        }
    }
    return 0;
}

/* Markers of one panel; returns markers verified or -1. */
static int check_panel(const unsigned char *img, int width, const plot_chart *c, int cx, int cy, int cw, int ch,
                       char *err, int cap) {
    plot_frame f;
    plot_series s;
    int verified = 0;
    if (plot_get_frame(c, cw, ch, &f)) return snprintf(err, cap, "frame: %s", omni_last_error()), -1;
    for (int i = 0; plot_get_series(c, i, &s); i++) {
        if (!s.markers) continue;
        for (int k = 0; k < s.n; k++) {
            double px, py;
            if (!plot_frame_map(&f, s.x[k], s.y[k], &px, &py)) continue;
            double m = 6; /* legend box grown by a marker */
            if (px > f.legend_x0 - m && px < f.legend_x1 + m && py > f.legend_y0 - m && py < f.legend_y1 + m) continue;
            int x = cx + (int)px, y = cy + (int)py;
            if (px < 0 || py < 0 || x >= cx + cw || y >= cy + ch)
                return snprintf(err, cap, "'%s' point %d (%g, %g) maps outside its panel", s.name, k, s.x[k],
                                s.y[k]),
                       -1;
            const unsigned char *p = img + 4 * ((size_t)y * width + x);
            uint32_t later = 0; /* a later series drawn over the point: its colour or a blend, not checked */
            if (color_dist(p, s.color) < 40) verified++;
            else if (!covered_later(c, &f, i, px, py, &later))
                return snprintf(err, cap, "'%s' point %d (%g, %g) at pixel (%d, %d): rgb %d %d %d, want %06x",
                                s.name ? s.name : "?", k, s.x[k], s.y[k], x, y, p[0], p[1], p[2], s.color & 0xFFFFFF),
                       -1;
        }
    }
    return verified;
}

int bench_png_check(const char *path, const bench_results *r, int width, int height, char *err, int cap) {
    int w, h, n;
    unsigned char *img = stbi_load(path, &w, &h, &n, 4);
    if (!img) return snprintf(err, cap, "cannot read PNG %s", path), -1;
    int rc = 0, ink = 0;
    if (w != width || h != height) rc = -1, snprintf(err, cap, "PNG is %dx%d, asked %dx%d", w, h, width, height);
    for (int i = 0; !rc && i < w * h; i++) ink += color_dist(img + 4 * i, 0xFFFFFFu) > 16;
    if (!rc && ink < w * h / 50) rc = -1, snprintf(err, cap, "PNG nearly blank (%d inked pixels)", ink);
    plot_chart *charts[BENCH_CHARTS];
    int made = 0, verified = 0;
    if (!rc && bench_make_charts(r, NULL, charts)) rc = -1, snprintf(err, cap, "charts: %s", omni_last_error());
    else made = !rc;
    for (int i = 0; !rc && i < BENCH_CHARTS; i++) {
        int cx, cy, cw, ch;
        plot_grid_cell(BENCH_CHARTS, BENCH_CHART_COLS, width, height, i, &cx, &cy, &cw, &ch);
        int v = check_panel(img, w, charts[i], cx, cy, cw, ch, err, cap);
        if (v < 0) rc = -1;
        else verified += v;
    }
    for (int i = 0; made && i < BENCH_CHARTS; i++) plot_free(charts[i]);
    stbi_image_free(img);
    return rc ? -1 : verified;
}
