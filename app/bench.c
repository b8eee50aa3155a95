/* bench.c - omni bench results: list options, percentiles, copy bandwidth, roofline, table, CSV, chart. */
#define _POSIX_C_SOURCE 200809L
#include "app/bench.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "kvcache/kvcache.h"
#ifdef OMNI_HAVE_CUDA
#include "kernels/ops_cuda.h"
#endif

/* ---- options --------------------------------------------------------------------------------------------- */

/* One count with an optional K (1024) or M (1048576) suffix. */
static omni_status parse_count(const char *s, size_t len, const char *opt, int lo, int hi, int *out) {
    char tok[32], *end;
    if (len == 0 || len >= sizeof tok) return omni_fail(OMNI_ERR_USAGE, "%s: empty or overlong entry", opt);
    memcpy(tok, s, len);
    tok[len] = 0;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (end != tok && (*end == 'K' || *end == 'k')) v *= 1024, end++;
    else if (end != tok && (*end == 'M' || *end == 'm')) v *= 1048576, end++;
    if (errno || end == tok || *end || v < lo || v > hi)
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not a count in [%d, %d] (suffix K = 1024, M = 1048576)", opt,
                         tok, lo, hi);
    *out = (int)v;
    return OMNI_OK;
}

omni_status bench_parse_counts(const char *s, const char *opt, int lo, int hi, int *out, int *n) {
    *n = 0;
    for (const char *p = s;; p++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (*n == BENCH_MAX_LIST) return omni_fail(OMNI_ERR_USAGE, "%s: more than %d entries", opt, BENCH_MAX_LIST);
        int v = 0;
        omni_status st = parse_count(p, len, opt, lo, hi, &v);
        if (st) return st;
        for (int i = 0; i < *n; i++)
            if (out[i] == v) return omni_fail(OMNI_ERR_USAGE, "%s: %d is listed twice", opt, v);
        out[(*n)++] = v;
        if (!e) return OMNI_OK;
        p = e;
    }
}

omni_status bench_format(const char *name, int window, int sink, kv_format *f) {
    char base[BENCH_NAME];
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    if (len >= sizeof base) return omni_fail(OMNI_ERR_USAGE, "KV format name too long: %s", name);
    memcpy(base, name, len);
    base[len] = 0;
    omni_status st = kv_parse_mode(base, f);
    if (st) return st;
    if (window >= 0) f->window = window;
    if (sink >= 0) f->n_sink = sink;
    if (colon) {
        char *end;
        errno = 0;
        long w = colon[1] == 'w' ? strtol(colon + 2, &end, 10) : -1;
        if (w < 0 || errno || end == colon + 2 || *end)
            return omni_fail(OMNI_ERR_USAGE, "KV format '%s': after the mode only ':wR' (window of R tokens)", name);
        f->window = (int)(w > 1 << 20 ? 1 << 20 : w);
    }
    kv_params p = kv_default_params(); /* the window and sinks are valid for this format (128-wide heads) */
    p.n_layers = 1, p.n_kv_heads = 1, p.head_dim = 128, p.fmt = *f;
    kv_budget b;
    return kv_budget_of(&p, 0, &b);
}

omni_status bench_parse_formats(const char *s, const char *opt, char out[][BENCH_NAME], int *n) {
    *n = 0;
    for (const char *p = s;; p++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (*n == BENCH_MAX_LIST) return omni_fail(OMNI_ERR_USAGE, "%s: more than %d formats", opt, BENCH_MAX_LIST);
        if (len == 0 || len >= BENCH_NAME) return omni_fail(OMNI_ERR_USAGE, "%s: empty or overlong format name", opt);
        memcpy(out[*n], p, len);
        out[*n][len] = 0;
        kv_format f;
        if (bench_format(out[*n], -1, -1, &f)) return omni_fail(OMNI_ERR_USAGE, "%s: %s", opt, omni_last_error());
        for (int i = 0; i < *n; i++)
            if (!strcmp(out[i], out[*n])) return omni_fail(OMNI_ERR_USAGE, "%s: %s is listed twice", opt, out[i]);
        (*n)++;
        if (!e) return OMNI_OK;
        p = e;
    }
}

/* ---- measurement helpers --------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *v, int n, double q) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return NAN;
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    int k = (int)ceil(q / 100.0 * n) - 1; /* nearest rank */
    double r = s[k < 0 ? 0 : k >= n ? n - 1 : k];
    free(s);
    return r;
}

static void copy_parallel(char *dst, const char *src, size_t bytes, int threads) {
    const int chunks = 256;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < chunks; i++) {
        size_t a = bytes * (size_t)i / chunks, b = bytes * (size_t)(i + 1) / chunks;
        memcpy(dst + a, src + a, b - a);
    }
}

omni_status bench_copy_bandwidth(size_t bytes, int threads, double *gb_s) {
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory (bandwidth buffers of %.0f MiB)", bytes / 1048576.0);
    }
    if (threads < 1) threads = 1;
    memset(src, 1, bytes); /* touch every page before timing */
    memset(dst, 0, bytes);
    double t[5];
    copy_parallel(dst, src, bytes, threads);
    for (int r = 0; r < 5; r++) {
        double t0 = omni_time_ms();
        copy_parallel(dst, src, bytes, threads);
        t[r] = omni_time_ms() - t0;
    }
    double ms = bench_percentile(t, 5, 50);
    int ok = dst[bytes / 2] == 1; /* the copy happened (and cannot be optimised away) */
    free(src);
    free(dst);
    if (!ok || !(ms > 0)) return omni_fail(OMNI_ERR_RUNTIME, "bandwidth measurement failed");
    *gb_s = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    return OMNI_OK;
}

#ifdef OMNI_HAVE_CUDA
omni_status bench_cuda_copy_bandwidth(size_t bytes, double *gb_s) {
    void *a = NULL, *b = NULL;
    double t[5];
    omni_status st = omni_cuda_malloc(&a, bytes);
    if (!st) st = omni_cuda_malloc(&b, bytes);
    if (!st) st = omni_cuda_memset(a, 1, bytes, NULL);
    for (int r = -1; r < 5 && !st; r++) { /* r = -1: warm-up */
        if ((st = omni_cuda_sync(NULL))) break;
        double t0 = omni_time_ms();
        for (int k = 0; k < 10 && !st; k++) st = omni_cuda_d2d(k & 1 ? a : b, k & 1 ? b : a, bytes, NULL);
        if (!st) st = omni_cuda_sync(NULL);
        if (r >= 0) t[r] = (omni_time_ms() - t0) / 10;
    }
    omni_cuda_free(a);
    omni_cuda_free(b);
    if (!st) *gb_s = 2.0 * (double)bytes / (bench_percentile(t, 5, 50) * 1e-3) / 1e9;
    return st;
}
#else
omni_status bench_cuda_copy_bandwidth(size_t bytes, double *gb_s) {
    (void)bytes, (void)gb_s;
    return omni_fail(OMNI_ERR_UNSUPPORTED, "--device cuda: this omni was built without CUDA");
}
#endif

void bench_roofline(bench_point *p, double kv_mib_decode, double bw_gb_s) {
    p->step_mib = p->weights_mib + kv_mib_decode;
    double step_s = p->step_mib * 1048576.0 / (bw_gb_s * 1e9);
    p->roofline_tok_s = step_s > 0 ? p->batch / step_s : NAN;
    p->roofline_pct = p->roofline_tok_s > 0 ? 100.0 * p->decode_tok_s / p->roofline_tok_s : NAN;
}

/* ---- results --------------------------------------------------------------------------------------------- */

static omni_status grow(void **arr, int n, size_t elem) {
    if (n & (n - 1)) return OMNI_OK; /* capacity doubles at powers of two */
    void *a = realloc(*arr, elem * (size_t)(n ? 2 * n : 1));
    if (!a) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    *arr = a;
    return OMNI_OK;
}

omni_status bench_add_point(bench_results *r, const bench_point *p) {
    omni_status st = grow((void **)&r->points, r->n_points, sizeof *p);
    if (!st) r->points[r->n_points++] = *p;
    return st;
}

omni_status bench_add_fit(bench_results *r, const bench_fit *f) {
    omni_status st = grow((void **)&r->fits, r->n_fits, sizeof *f);
    if (!st) r->fits[r->n_fits++] = *f;
    return st;
}

void bench_results_free(bench_results *r) {
    free(r->points);
    free(r->fits);
    r->points = NULL;
    r->fits = NULL;
    r->n_points = r->n_fits = 0;
}

/* ---- table and CSV --------------------------------------------------------------------------------------- */

void bench_print_table(FILE *f, const bench_results *r) {
    fprintf(f, "omni bench: %s on %s (%d threads), memory bandwidth %.1f GB/s (copy of %.0f MiB, read + write)\n\n",
            r->model, r->device, r->threads, r->bw_gb_s, r->bw_mib);
    if (r->n_points) {
        fprintf(f, "| kv       | batch |    ctx | decode tok/s | step p50 ms | step p99 ms | prefill tok/s |  TTFT ms |"
                   "    KV MiB | step MiB | roofline tok/s | %% roofline |\n");
        fprintf(f, "|----------|------:|-------:|-------------:|------------:|------------:|--------------:|---------:|"
                   "----------:|---------:|---------------:|-----------:|\n");
    }
    for (int i = 0; i < r->n_points; i++) {
        const bench_point *p = &r->points[i];
        char pre[32] = "filled", ttft[32] = "-"; /* a context of random K/V: no prefill measured */
        if (isfinite(p->prefill_tok_s)) snprintf(pre, sizeof pre, "%.1f", p->prefill_tok_s);
        if (isfinite(p->ttft_ms)) snprintf(ttft, sizeof ttft, "%.2f", p->ttft_ms);
        fprintf(f, "| %-8s | %5d | %6d | %12.2f | %11.3f | %11.3f | %13s | %8s | %9.2f | %8.1f | %14.1f "
                   "| %9.1f%% |\n",
                p->kv, p->batch, p->ctx, p->decode_tok_s, p->step_ms_p50, p->step_ms_p99, pre, ttft, p->kv_mib,
                p->step_mib, p->roofline_tok_s, p->roofline_pct);
    }
    if (r->n_fits) {
        fprintf(f, "%s| kv       |    ctx | KV budget GiB | flush rsv MiB    | KV MiB/seq | fits (engine) | fits (budget) |\n",
                r->n_points ? "\n" : "");
        fprintf(f, "|----------|-------:|--------------:|-----------------:|-----------:|--------------:|--------------:|\n");
    }
    for (int i = 0; i < r->n_fits; i++) {
        const bench_fit *x = &r->fits[i];
        char eng[16] = "-"; /* -: the device does not run this format (budget arithmetic only) */
        if (x->fits >= 0) snprintf(eng, sizeof eng, "%s%d", x->fits_limit > 0 ? ">=" : "", x->fits);
        fprintf(f, "| %-8s | %6d | %13.3f | %16.3f | %10.3f | %13s | %13d |\n", x->kv, x->ctx, x->kv_mem_gib,
                x->reserve_mib, x->seq_kv_mib, eng, x->fits_budget);
    }
    for (int i = 0; i < r->n_fits; i++)
        if (r->fits[i].fits_limit > 0) {
            fprintf(f, "\n>=N: the engine admitted all N sequences it was given, the most one step takes on this device "
                       "(%s); the budget holds fits (budget).\n", r->fits[i].limit_why[0] ? r->fits[i].limit_why
                                                                                          : "the runner's limit");
            break;
        }
}

#define CSV_HEADER                                                                                             \
    "kind,model,device,kv,batch,ctx,steps,decode_tok_s,step_ms_p50,step_ms_p99,prefill_tok_s,ttft_ms,kv_mib,"  \
    "weights_mib,step_mib,bw_gb_s,roofline_tok_s,roofline_pct,kv_mem_gib,seq_kv_mib,fits,fits_budget,reserve_mib,"  \
    "fits_limit\n"

/* A text field without commas or line breaks (replaced by ';' and ' '). */
static const char *csv_text(const char *s, char *buf, size_t cap) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) buf[i] = s[i] == ',' ? ';' : (s[i] == '\n' || s[i] == '\r') ? ' ' : s[i];
    buf[i] = 0;
    return buf;
}

omni_status bench_write_csv(const char *path, const bench_results *r) {
    FILE *f = fopen(path, "w");
    if (!f) return omni_fail(OMNI_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
    char model[sizeof r->model];
    csv_text(r->model, model, sizeof model);
    fputs(CSV_HEADER, f);
    for (int i = 0; i < r->n_points; i++) {
        const bench_point *p = &r->points[i];
        char pre[32] = "", ttft[32] = ""; /* empty: the context was filled with random K/V (no prefill) */
        if (isfinite(p->prefill_tok_s)) snprintf(pre, sizeof pre, "%.3f", p->prefill_tok_s);
        if (isfinite(p->ttft_ms)) snprintf(ttft, sizeof ttft, "%.4f", p->ttft_ms);
        fprintf(f, "point,%s,%s,%s,%d,%d,%d,%.4f,%.5f,%.5f,%s,%s,%.4f,%.4f,%.4f,%.5f,%.4f,%.3f,,,,,,\n", model,
                r->device, p->kv, p->batch, p->ctx, p->steps, p->decode_tok_s, p->step_ms_p50, p->step_ms_p99, pre,
                ttft, p->kv_mib, p->weights_mib, p->step_mib, r->bw_gb_s, p->roofline_tok_s, p->roofline_pct);
    }
    for (int i = 0; i < r->n_fits; i++) {
        const bench_fit *x = &r->fits[i];
        char eng[16] = "", lim[16] = ""; /* eng empty: not counted by the engine (the device does not run this format) */
        if (x->fits >= 0) snprintf(eng, sizeof eng, "%d", x->fits);
        if (x->fits_limit > 0) snprintf(lim, sizeof lim, "%d", x->fits_limit);
        fprintf(f, "fit,%s,%s,%s,,%d,,,,,,,,,,%.5f,,,%.4f,%.5f,%s,%d,%.5f,%s\n", model, r->device, x->kv, x->ctx,
                r->bw_gb_s, x->kv_mem_gib, x->seq_kv_mib, eng, x->fits_budget, x->reserve_mib, lim);
    }
    int bad = ferror(f);
    if (fclose(f) || bad)
        return omni_fail(OMNI_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
    return OMNI_OK;
}

/* ---- chart ----------------------------------------------------------------------------------------------- */

int bench_fit_count(const bench_fit *x) { return x->fits >= 0 ? x->fits : x->fits_budget; }

int bench_formats(const bench_results *r, const char **names) {
    int n = 0;
    for (int i = 0; i < r->n_points + r->n_fits; i++) {
        const char *k = i < r->n_points ? r->points[i].kv : r->fits[i - r->n_points].kv;
        int seen = 0;
        for (int j = 0; j < n; j++) seen |= !strcmp(names[j], k);
        if (!seen && n < BENCH_MAX_LIST) names[n++] = k;
    }
    return n;
}

typedef enum { BY_CTX, BY_BATCH } bench_axis;
typedef enum { Y_TOK_S, Y_ROOFLINE, Y_KV_MIB, Y_STEP_P50, Y_FITS } bench_y;

static double point_y(const bench_point *p, bench_y y) {
    switch (y) {
    case Y_TOK_S: return p->decode_tok_s;
    case Y_ROOFLINE: return p->roofline_tok_s;
    case Y_KV_MIB: return p->kv_mib;
    default: return p->step_ms_p50;
    }
}

typedef struct {
    double x[BENCH_MAX_LIST * BENCH_MAX_LIST], y[BENCH_MAX_LIST * BENCH_MAX_LIST];
    int n;
} xy;

static void sort_xy(xy *d) { /* insertion sort by x (a few dozen points) */
    for (int i = 1; i < d->n; i++)
        for (int j = i; j > 0 && d->x[j - 1] > d->x[j]; j--) {
            double tx = d->x[j], ty = d->y[j];
            d->x[j] = d->x[j - 1], d->y[j] = d->y[j - 1];
            d->x[j - 1] = tx, d->y[j - 1] = ty;
        }
}

/* The points of one format along one axis, the other coordinate fixed at `fixed`. */
static void gather(const bench_results *r, const char *kv, bench_axis ax, int fixed, bench_y y, xy *d) {
    d->n = 0;
    if (y == Y_FITS) {
        for (int i = 0; i < r->n_fits; i++)
            if (!strcmp(r->fits[i].kv, kv) && d->n < (int)(sizeof d->x / sizeof d->x[0]))
                d->x[d->n] = r->fits[i].ctx, d->y[d->n++] = bench_fit_count(&r->fits[i]);
    } else {
        for (int i = 0; i < r->n_points; i++) {
            const bench_point *p = &r->points[i];
            if (strcmp(p->kv, kv) || (ax == BY_CTX ? p->batch : p->ctx) != fixed) continue;
            if (d->n == (int)(sizeof d->x / sizeof d->x[0])) break;
            d->x[d->n] = ax == BY_CTX ? p->ctx : p->batch;
            d->y[d->n++] = point_y(p, y);
        }
    }
    sort_xy(d);
}

typedef struct {
    const char *title, *y_label;
    bench_axis ax;
    int fixed;
    bench_y y;
    plot_scale y_scale;
    int roofline;
} panel;

static omni_status make_panel(const bench_results *r, const panel *pn, const char *font, plot_chart **out) {
    const char *names[BENCH_MAX_LIST];
    int nf = bench_formats(r, names);
    plot_params p = plot_default_params();
    p.title = pn->title;
    p.x_label = pn->ax == BY_CTX ? "context (tokens)" : "batch (sequences)";
    p.y_label = pn->y_label;
    p.x_scale = PLOT_LOG2;
    p.x_format = pn->ax == BY_CTX ? PLOT_FMT_BINARY : PLOT_FMT_AUTO;
    p.y_scale = pn->y_scale;
    p.font_file = font;
    omni_status st = plot_init(&p, out);
    xy *d = malloc(sizeof *d);
    if (!st && !d) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int pass = pn->roofline ? 0 : 1; pass < 2 && !st; pass++) /* rooflines first: measured points on top */
        for (int i = 0; i < nf && !st; i++) {
            char name[BENCH_NAME + 16];
            gather(r, names[i], pn->ax, pn->fixed, pass ? pn->y : Y_ROOFLINE, d);
            if (!d->n) continue; /* no points of this format here (e.g. a --fits-kv format): not in the legend */
            snprintf(name, sizeof name, pass ? "%s" : "%s roofline", names[i]);
            plot_series s = plot_default_series();
            s.name = name;
            s.x = d->x, s.y = d->y, s.n = d->n;
            s.color = plot_palette(i);
            if (!pass) s.dashed = 1, s.markers = 0, s.line_width = 1.5;
            st = plot_add_series(*out, &s, NULL);
        }
    free(d);
    if (st) {
        plot_free(*out);
        *out = NULL;
    }
    return st;
}

/* Distinct values of the other coordinate among the points whose batch (by_batch) or ctx equals v. */
static int spread(const bench_results *r, int by_batch, int v) {
    int seen[BENCH_MAX_LIST * BENCH_MAX_LIST], n = 0;
    for (int i = 0; i < r->n_points; i++) {
        const bench_point *p = &r->points[i];
        if ((by_batch ? p->batch : p->ctx) != v) continue;
        int o = by_batch ? p->ctx : p->batch, dup = 0;
        for (int j = 0; j < n; j++) dup |= seen[j] == o;
        if (!dup && n < (int)(sizeof seen / sizeof seen[0])) seen[n++] = o;
    }
    return n;
}

/* The batch whose points span the most contexts (ties: the largest, or the smallest when `small`), and the context
 * whose points span the most batches (ties: the smallest): the fixed coordinates of the panels. */
static void pick_fixed(const bench_results *r, int small, int *batch, int *ctx) {
    int bs = -1, cs = -1;
    *batch = *ctx = 0;
    for (int i = 0; i < r->n_points; i++) {
        const bench_point *p = &r->points[i];
        int sb = spread(r, 1, p->batch), sc = spread(r, 0, p->ctx);
        if (sb > bs || (sb == bs && (small ? p->batch < *batch : p->batch > *batch))) bs = sb, *batch = p->batch;
        if (sc > cs || (sc == cs && p->ctx < *ctx)) cs = sc, *ctx = p->ctx;
    }
}

omni_status bench_make_charts(const bench_results *r, const char *font, plot_chart **charts) {
    int b_ctx, b_lat, c_batch; /* the fixed batch of the "vs context" panels (latency: b_lat), context of "vs batch" */
    pick_fixed(r, 0, &b_ctx, &c_batch);
    pick_fixed(r, 1, &b_lat, &c_batch);
    double gib = r->n_fits ? r->fits[0].kv_mem_gib : 0;
    char t[BENCH_CHARTS][96], cn[16];
    plot_format_value(c_batch, PLOT_FMT_BINARY, cn, sizeof cn);
    snprintf(t[0], sizeof t[0], "decode tokens/s vs context (batch %d)", b_ctx);
    snprintf(t[1], sizeof t[1], "decode tokens/s vs batch (context %s)", cn);
    snprintf(t[2], sizeof t[2], "sequences that fit in %.3g GiB of KV", gib);
    snprintf(t[3], sizeof t[3], "KV cache MiB vs context (batch %d)", b_ctx);
    snprintf(t[4], sizeof t[4], "KV cache MiB vs batch (context %s)", cn);
    snprintf(t[5], sizeof t[5], "decode step p50 vs context (batch %d)", b_lat);
    const panel pn[BENCH_CHARTS] = {
        {t[0], "tokens/s", BY_CTX, b_ctx, Y_TOK_S, PLOT_LINEAR, 1},
        {t[1], "tokens/s", BY_BATCH, c_batch, Y_TOK_S, PLOT_LINEAR, 1},
        {t[2], "sequences", BY_CTX, 0, Y_FITS, PLOT_LOG2, 0},
        {t[3], "MiB", BY_CTX, b_ctx, Y_KV_MIB, PLOT_LOG10, 0},
        {t[4], "MiB", BY_BATCH, c_batch, Y_KV_MIB, PLOT_LOG10, 0},
        {t[5], "ms", BY_CTX, b_lat, Y_STEP_P50, PLOT_LINEAR, 0},
    };
    for (int i = 0; i < BENCH_CHARTS; i++) charts[i] = NULL;
    for (int i = 0; i < BENCH_CHARTS; i++) {
        omni_status st = make_panel(r, &pn[i], font, &charts[i]);
        if (st) {
            for (int j = 0; j < i; j++) plot_free(charts[j]);
            return st;
        }
    }
    return OMNI_OK;
}

omni_status bench_write_png(const char *path, const bench_results *r, int width, int height, const char *font) {
    plot_chart *c[BENCH_CHARTS];
    omni_status st = bench_make_charts(r, font, c);
    if (st) return st;
    st = plot_write_png_grid((const plot_chart *const *)c, BENCH_CHARTS, BENCH_CHART_COLS, width, height, path);
    for (int i = 0; i < BENCH_CHARTS; i++) plot_free(c[i]);
    return st;
}
