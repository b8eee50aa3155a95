/* test_plot.c - the chart module (app/plot): PNG of the requested size that is not blank, every plotted point
 * drawn where the data says (pixels sampled at plot_frame_map positions, read back with stb_image, an
 * independent PNG decoder), log axes placing points geometrically, dashed lines with gaps, NaN breaks, the ARGB
 * buffer path equal to the PNG and leaving pixels outside its rectangle alone, tick-label text, bad parameters. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stb_image.h>

#include "app/plot/plot.h"
#include "check.h"

typedef struct {
    unsigned char *px; /* RGBA */
    int w, h;
} image;

static image load_png(const char *path) {
    image im = {0};
    int n;
    im.px = stbi_load(path, &im.w, &im.h, &n, 4);
    return im;
}

static const unsigned char *pixel(const image *im, int x, int y) { return im->px + 4 * ((size_t)y * im->w + x); }

/* Colour distance (max channel) between an RGBA pixel and 0xAARRGGBB. */
static int dist(const unsigned char *p, uint32_t c) {
    int d = abs(p[0] - (int)((c >> 16) & 255));
    d = d > abs(p[1] - (int)((c >> 8) & 255)) ? d : abs(p[1] - (int)((c >> 8) & 255));
    return d > abs(p[2] - (int)(c & 255)) ? d : abs(p[2] - (int)(c & 255));
}

static int not_white(const image *im) {
    int n = 0;
    for (int i = 0; i < im->w * im->h; i++) n += dist(im->px + 4 * i, 0xFFFFFFFFu) > 16;
    return n;
}

/* Distinct grey/colour levels (anti-aliasing leaves intermediate values). */
static int levels(const image *im) {
    static unsigned char seen[256];
    memset(seen, 0, sizeof seen);
    int n = 0;
    for (int i = 0; i < im->w * im->h; i++) {
        unsigned char g = im->px[4 * i + 1];
        n += !seen[g];
        seen[g] = 1;
    }
    return n;
}

static char g_dir[] = "/tmp/omni_plot_XXXXXX";

static void test_linear(void) {
    plot_params p = plot_default_params();
    p.width = 640;
    p.height = 400;
    p.title = "quadratic and a dashed limit";
    p.x_label = "x";
    p.y_label = "y";
    p.x_min = -0.5, p.x_max = 3.5, p.y_min = -1, p.y_max = 10;
    plot_chart *c;
    CHECK(plot_init(&p, &c) == OMNI_OK, "init: %s", omni_last_error());
    double x[4] = {0, 1, 2, 3}, y[4] = {0, 1, 4, 9}, ry[2] = {0.5, 9.5}, rx[2] = {0, 3};
    plot_series s = plot_default_series();
    s.name = "measured";
    s.x = x, s.y = y, s.n = 4;
    s.color = 0xFF0000FFu;
    CHECK(plot_add_series(c, &s, NULL) == OMNI_OK, "add");
    plot_series r = plot_default_series();
    r.name = "limit";
    r.x = rx, r.y = ry, r.n = 2;
    r.color = 0xFFFF0000u, r.dashed = 1, r.markers = 0;
    int ri = -1;
    CHECK(plot_add_series(c, &r, &ri) == OMNI_OK && ri == 1, "add roofline (%d)", ri);
    CHECK(plot_series_count(c) == 2, "count");
    char path[256];
    snprintf(path, sizeof path, "%s/linear.png", g_dir);
    CHECK(plot_write_png(c, path) == OMNI_OK, "png: %s", omni_last_error());
    image im = load_png(path);
    CHECK(im.px && im.w == 640 && im.h == 400, "png size %dx%d", im.w, im.h);
    if (!im.px) { plot_free(c); return; }
    int nw = not_white(&im);
    CHECK(nw > 640 * 400 / 50, "blank image: %d non-white pixels", nw);
    CHECK(levels(&im) > 20, "no anti-aliasing: %d levels", levels(&im));
    plot_frame f;
    CHECK(plot_get_frame(c, 640, 400, &f) == OMNI_OK, "frame");
    CHECK(f.x0 > 20 && f.x1 < 640 && f.y0 > 10 && f.y1 < 400 && f.x1 - f.x0 > 400 && f.y1 - f.y0 > 250,
          "plot area %.0f,%.0f - %.0f,%.0f", f.x0, f.y0, f.x1, f.y1);
    CHECK(f.legend_x0 >= f.x0 && f.legend_x1 <= f.x1 && f.legend_y0 >= f.y0 && f.legend_y1 <= f.y1 &&
          f.legend_x1 - f.legend_x0 > 40 && f.legend_y1 - f.legend_y0 > 20, "legend box %.0f,%.0f - %.0f,%.0f",
          f.legend_x0, f.legend_y0, f.legend_x1, f.legend_y1);
    for (int i = 0; i < 4; i++) { /* each marker centre has the series colour */
        double px, py;
        CHECK(plot_frame_map(&f, x[i], y[i], &px, &py), "map");
        const unsigned char *q = pixel(&im, (int)px, (int)py);
        CHECK(dist(q, s.color) < 40, "point %d at (%.1f, %.1f): rgb %d %d %d", i, px, py, q[0], q[1], q[2]);
        CHECK(px < f.legend_x0 || px > f.legend_x1 || py < f.legend_y0 || py > f.legend_y1, "legend hides %d", i);
    }
    double ax, ay, bx, by; /* linear mapping: x = 1.5 halfway between 1 and 2 */
    plot_frame_map(&f, 1, 0, &ax, &ay);
    plot_frame_map(&f, 2, 0, &bx, &by);
    double mx, my;
    plot_frame_map(&f, 1.5, 0, &mx, &my);
    CHECK(fabs(mx - (ax + bx) / 2) < 1e-9 && fabs(my - ay) < 1e-9, "linear map");
    int on = 0, off = 0; /* along the dashed line: both ink and gaps */
    for (int k = 5; k < 95; k++) {
        double t = k / 100.0, px, py;
        plot_frame_map(&f, rx[0] + t * (rx[1] - rx[0]), ry[0] + t * (ry[1] - ry[0]), &px, &py);
        const unsigned char *q = pixel(&im, (int)lround(px), (int)lround(py));
        if (dist(q, r.color) < 60) on++;
        else if (dist(q, 0xFFFFFFFFu) < 40 || dist(q, 0xFFDDDDDDu) < 30) off++;
    }
    CHECK(on > 15 && off > 10, "dashed line: %d inked, %d gaps of 90 samples", on, off);
    double ex, ey; /* far from both lines: background */
    plot_frame_map(&f, 2.8, 1.0, &ex, &ey);
    CHECK(dist(pixel(&im, (int)ex, (int)ey), 0xFFFFFFFFu) < 40, "empty region is not background");

    /* the same chart into a rectangle of an ARGB buffer: identical pixels, nothing outside touched */
    int W = 700, H = 450;
    uint32_t *buf = malloc(sizeof(uint32_t) * W * H);
    for (int i = 0; i < W * H; i++) buf[i] = 0x12345678u;
    CHECK(plot_draw_argb(c, buf, W, H, 4 * W, 30, 20, 640, 400) == OMNI_OK, "argb: %s", omni_last_error());
    int diff = 0, outside = 0;
    for (int yy = 0; yy < H; yy++)
        for (int xx = 0; xx < W; xx++) {
            uint32_t v = buf[yy * W + xx];
            int in = xx >= 30 && xx < 670 && yy >= 20 && yy < 420;
            if (!in) { outside += v != 0x12345678u; continue; }
            const unsigned char *q = pixel(&im, xx - 30, yy - 20);
            uint32_t want = 0xFF000000u | (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
            diff += v != want;
        }
    CHECK(diff == 0, "ARGB drawing differs from the PNG in %d pixels", diff);
    CHECK(outside == 0, "%d pixels outside the rectangle changed", outside);
    CHECK(plot_draw_argb(c, buf, W, H, 4 * W - 4, 0, 0, 10, 10) == OMNI_ERR_USAGE, "short stride accepted");
    free(buf);
    stbi_image_free(im.px);

    /* live update: replace the points, grow, clear */
    double x2[6] = {0, 0.5, 1, 1.5, 2, 2.5}, y2[6] = {9, 8, 7, 6, 5, 4};
    CHECK(plot_set_data(c, 0, x2, y2, 6) == OMNI_OK, "set data");
    CHECK(plot_set_data(c, 5, x2, y2, 6) == OMNI_ERR_USAGE, "bad index accepted");
    snprintf(path, sizeof path, "%s/updated.png", g_dir);
    CHECK(plot_write_png(c, path) == OMNI_OK, "png 2");
    im = load_png(path);
    if (im.px) {
        for (int i = 0; i < 6; i++) {
            double px, py;
            plot_frame_map(&f, x2[i], y2[i], &px, &py);
            CHECK(dist(pixel(&im, (int)px, (int)py), s.color) < 40, "updated point %d", i);
        }
        stbi_image_free(im.px);
    }
    plot_clear(c);
    CHECK(plot_series_count(c) == 0, "clear");
    plot_free(c);
}

static void test_log_axes(void) {
    plot_params p = plot_default_params();
    p.width = 500;
    p.height = 360;
    p.x_scale = PLOT_LOG2, p.x_format = PLOT_FMT_BINARY, p.y_scale = PLOT_LOG10;
    p.x_label = "context";
    p.y_label = "tokens/s";
    p.legend = PLOT_LEGEND_BOTTOM_RIGHT;
    plot_chart *c;
    CHECK(plot_init(&p, &c) == OMNI_OK, "init log");
    double x[5] = {256, 512, 1024, NAN, 4096}, y[5] = {3, 30, 300, 5, 3000};
    plot_series s = plot_default_series();
    s.name = "int2";
    s.x = x, s.y = y, s.n = 5;
    CHECK(plot_add_series(c, &s, NULL) == OMNI_OK, "add");
    plot_frame f;
    plot_get_frame(c, 500, 360, &f);
    CHECK(f.x_min == 256 && f.x_max == 4096 && f.y_min == 1 && f.y_max == 10000, "auto log range x %g..%g y %g..%g",
          f.x_min, f.x_max, f.y_min, f.y_max);
    double px, py;
    plot_frame_map(&f, 1024, 100, &px, &py); /* 2 of 4 octaves, 2 of 4 decades */
    CHECK(fabs(px - (f.x0 + f.x1) / 2) < 1e-9 && fabs(py - (f.y0 + f.y1) / 2) < 1e-9, "log map %.2f %.2f", px, py);
    CHECK(!plot_frame_map(&f, 0, 1, &px, &py) && !plot_frame_map(&f, 1, -1, &px, &py) &&
          !plot_frame_map(&f, NAN, 1, &px, &py), "non-positive / NaN mapped on a log axis");
    char path[256];
    snprintf(path, sizeof path, "%s/log.png", g_dir);
    CHECK(plot_write_png(c, path) == OMNI_OK, "png log");
    image im = load_png(path);
    CHECK(im.px && im.w == 500 && im.h == 360, "log png size");
    if (im.px) {
        for (int i = 0; i < 5; i++) {
            if (isnan(x[i])) continue;
            plot_frame_map(&f, x[i], y[i], &px, &py);
            CHECK(dist(pixel(&im, (int)px, (int)py), plot_palette(0)) < 40, "log point %d", i);
        }
        /* the NaN breaks the line: halfway between 1024 and 4096 (no segment) is not the series colour */
        double ax, ay, bx, by;
        plot_frame_map(&f, 1024, 300, &ax, &ay);
        plot_frame_map(&f, 4096, 3000, &bx, &by);
        CHECK(dist(pixel(&im, (int)((ax + bx) / 2), (int)((ay + by) / 2)), plot_palette(0)) > 60, "NaN did not break");
        stbi_image_free(im.px);
    }
    plot_free(c);
}

static void test_grid_and_formats(void) {
    plot_params p = plot_default_params();
    plot_chart *a, *b;
    p.legend = PLOT_LEGEND_NONE;
    plot_init(&p, &a);
    p.y_scale = PLOT_LOG10;
    plot_init(&p, &b);
    double x[2] = {1, 2}, y[2] = {1, 2};
    plot_series s = plot_default_series();
    s.x = x, s.y = y, s.n = 2;
    plot_add_series(a, &s, NULL);
    plot_add_series(b, &s, NULL);
    const plot_chart *cs[3] = {a, b, a};
    char path[256];
    snprintf(path, sizeof path, "%s/grid.png", g_dir);
    CHECK(plot_write_png_grid(cs, 3, 2, 601, 400, path) == OMNI_OK, "grid: %s", omni_last_error());
    image im = load_png(path);
    CHECK(im.px && im.w == 601 && im.h == 400, "grid size %dx%d", im.w, im.h);
    int gx, gy, gw, gh;
    plot_grid_cell(3, 2, 601, 400, 2, &gx, &gy, &gw, &gh);
    CHECK(gx == 0 && gy == 200 && gw == 300 && gh == 200, "cell 2: %d %d %d %d", gx, gy, gw, gh);
    plot_grid_cell(3, 2, 601, 400, 1, &gx, &gy, &gw, &gh);
    CHECK(gx == 300 && gy == 0 && gw == 301 && gh == 200, "cell 1: %d %d %d %d", gx, gy, gw, gh);
    if (im.px) { /* the empty fourth cell stays white; the third chart starts at y = 200 */
        CHECK(dist(pixel(&im, 450, 300), 0xFFFFFFFFu) < 8, "empty cell not white");
        plot_frame f;
        plot_get_frame(a, 300, 200, &f);
        CHECK(f.legend_x0 == 0 && f.legend_x1 == 0, "legend box without a legend");
        double px, py;
        plot_frame_map(&f, 2, 2, &px, &py);
        CHECK(dist(pixel(&im, (int)px, 200 + (int)py), plot_palette(0)) < 40, "third chart's point");
    }
    stbi_image_free(im.px);
    snprintf(path, sizeof path, "%s/no/such/dir/x.png", g_dir);
    CHECK(plot_write_png(a, path) == OMNI_ERR_INPUT, "unwritable path accepted");
    plot_free(a);
    plot_free(b);

    char buf[32];
    struct { double v; plot_format f; const char *want; } cases[] = {
        {4096, PLOT_FMT_BINARY, "4K"},   {131072, PLOT_FMT_BINARY, "128K"}, {1048576, PLOT_FMT_BINARY, "1M"},
        {1000, PLOT_FMT_BINARY, "1000"}, {1500, PLOT_FMT_AUTO, "1500"},     {25000, PLOT_FMT_AUTO, "25k"},
        {3.2e6, PLOT_FMT_AUTO, "3.2M"},  {0.5, PLOT_FMT_AUTO, "0.5"},       {0, PLOT_FMT_AUTO, "0"},
        {-20, PLOT_FMT_AUTO, "-20"},     {0.30000000000000004, PLOT_FMT_AUTO, "0.3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(!strcmp(plot_format_value(cases[i].v, cases[i].f, buf, sizeof buf), cases[i].want),
              "%g -> '%s', want '%s'", cases[i].v, buf, cases[i].want);
}

static void test_bad_params(void) {
    plot_chart *c = (plot_chart *)1;
    plot_params p = plot_default_params();
    p.width = 0;
    CHECK(plot_init(&p, &c) == OMNI_ERR_USAGE && c == NULL, "zero width");
    p = plot_default_params();
    p.y_scale = PLOT_LOG10, p.y_min = 0;
    CHECK(plot_init(&p, &c) == OMNI_ERR_USAGE, "log axis from 0");
    p = plot_default_params();
    p.x_min = 5, p.x_max = 5;
    CHECK(plot_init(&p, &c) == OMNI_ERR_USAGE, "empty range");
    p = plot_default_params();
    p.font_file = "/nonexistent/font.ttf";
    CHECK(plot_init(&p, &c) == OMNI_ERR_INPUT, "missing font");
    p = plot_default_params();
    CHECK(plot_init(&p, &c) == OMNI_OK, "defaults");
    plot_series s = plot_default_series();
    s.n = 3; /* no data pointers */
    CHECK(plot_add_series(c, &s, NULL) == OMNI_ERR_USAGE && plot_series_count(c) == 0, "null data accepted");
    plot_free(c);
    plot_free(NULL);
}

int main(void) {
    if (!mkdtemp(g_dir)) return 1;
    test_linear();
    test_log_axes();
    test_grid_and_formats();
    test_bad_params();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (getenv("OMNI_TEST_KEEP")) printf("images kept in %s\n", g_dir); /* to look at them */
    else if (system(cmd)) {}
    return check_exit();
}
