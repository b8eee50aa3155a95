/* test_gpu_tower_ops.c - the tower kernels of kernels/ops_cuda.h ("vision / audio towers") against their plain-C
 * references on seeded random inputs of awkward sizes: bilinear position embedding (exact: same f32 taps, weights
 * and sum order, then the two bf16 roundings), 2D RoPE tables (within 2.5 ulp: CUDA's cosf/sinf vs the C
 * library's), fp32-math RoPE (exact, given the same tables), 3x3 stride-2 im2col in both row orders with a padded
 * K (exact: a copy), periodic row add (exact), uniform fill (exact: the formula in C); the towers' attention
 * (kvcache/kv_towers.h) vs f64 on segments of 1..200 tokens at head_dim 8..128 (bf16 bound). Outputs are poisoned
 * with 0xFF (NaN) and followed by canaries (gpu_test_util.h); argument errors are refused before any launch.
 * Exit 77 without a GPU. */
#include "gpu_test_util.h"
#include "kernels/ops.h"
#include "kvcache/kv_towers.h"
#include "vision/vision.h"

enum { O_TABLES, O_ATTN, O_COUNT };
static op_stats g_ops[O_COUNT] = {{.name = "rope2d_tables"}, {.name = "tower_attn"}};
static int g_exact_cases;

static uint16_t *bits_of(const float *f, int64_t n) {
    uint16_t *h = xmalloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = omni_f32_to_bf16(f[i]);
    return h;
}

/* Exact comparison of bf16 bit patterns; prints the first differences. */
static void expect_bits(const char *what, const uint16_t *got, const uint16_t *want, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ < 3)
            fprintf(stderr, "  %s: [%lld] got 0x%04x (%.6g) want 0x%04x (%.6g)\n", what, (long long)i, got[i],
                    omni_bf16_to_f32(got[i]), want[i], omni_bf16_to_f32(want[i]));
    CHECK(bad == 0, "%s: %lld of %lld elements differ", what, (long long)bad, (long long)n);
    g_exact_cases++;
}

/* ---- bilinear position embedding ------------------------------------------------------------------------ */

/* Reference: p from op_pos_embed_bilinear over zeros (f32 table = the bf16 values), want = bf16(x + bf16(p)).
 * merge_order: coordinates from vision_patch_coords (the tower's order), else random cells of the grid. */
static void pos_case(int side, int gh, int gw, int D, int merge_order) {
    const int N = gh * gw;
    const int64_t tn = (int64_t)side * side * D, xn = (int64_t)N * D;
    uint16_t *th = xmalloc(2 * tn), *xh = xmalloc(2 * xn), *got = xmalloc(2 * xn), *want = xmalloc(2 * xn);
    float *tf = xmalloc(4 * tn), *xf = xmalloc(4 * xn), *p = xmalloc(4 * xn);
    int32_t *row = xmalloc(4 * (size_t)N), *col = xmalloc(4 * (size_t)N);
    rand_bf16(th, tf, tn, 1.f, 0.f);
    rand_bf16(xh, xf, xn, 2.f, 0.5f);
    if (merge_order) {
        vision_patch_coords(1, gh, gw, row, col);
    } else {
        for (int n = 0; n < N; n++) row[n] = (int32_t)(rng_u64() % gh), col[n] = (int32_t)(rng_u64() % gw);
    }
    op_pos_embed_bilinear(p, tf, side, row, col, N, D, gh, gw); /* p was zeroed by xmalloc */
    for (int64_t i = 0; i < xn; i++) want[i] = omni_f32_to_bf16(xf[i] + omni_bf16_to_f32(omni_f32_to_bf16(p[i])));
    uint16_t *dt = dev_buf(th, 2 * tn), *dx = dev_buf(xh, 2 * xn);
    int32_t *dr = dev_buf(row, 4 * (size_t)N), *dc = dev_buf(col, 4 * (size_t)N);
    TRY(omni_cuda_pos_embed_bilinear_bf16(dx, dt, side, dr, dc, N, D, gh, gw, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dx, 2 * xn, g_stream));
    char what[96];
    snprintf(what, sizeof what, "pos_embed side=%d grid=%dx%d D=%d %s", side, gh, gw, D, merge_order ? "merge" : "rand");
    expect_bits(what, got, want, xn);
    dev_done(what, dt, 2 * tn), dev_done(what, dx, 2 * xn), dev_done(what, dr, 4 * (size_t)N);
    dev_done(what, dc, 4 * (size_t)N);
    free(th), free(xh), free(got), free(want), free(tf), free(xf), free(p), free(row), free(col);
}

static void test_pos_embed(void) {
    pos_case(48, 64, 64, 1152, 1); /* a 1024-token image of Qwen3-VL-8B: upsampled 48 -> 64 */
    pos_case(48, 2, 2, 72, 1);     /* one merged token */
    pos_case(16, 6, 10, 19, 1);    /* 15 tokens, odd D */
    pos_case(16, 96, 2, 1, 0);     /* tall: rows upsampled 6x, columns at the two corners */
    pos_case(4, 14, 8, 64, 0);
    pos_case(48, 30, 46, 33, 1);   /* downsampled 48 -> 30 x 46 */
    pos_case(48, 48, 48, 8, 0);    /* the table itself: weights 1 and 0 */
}

/* ---- 2D RoPE --------------------------------------------------------------------------------------------- */

/* Tables: the angle is the same f32 product on both sides; CUDA's cosf/sinf are within 2 ulp, the C library's
 * within 0.5 ulp, so |got - ref| <= 2.5 ulp <= 2.5·2^-24 for values of magnitude <= 1: tol = 2^-22. */
static void tables_case(int T, int D, int max_pos, float **cs_out, float **sn_out, int32_t **row_out,
                        int32_t **col_out) {
    const int64_t n = (int64_t)T * D;
    vision_config c = {.head_dim = D, .rope_theta = 10000.0f};
    float *inv = xmalloc(4 * (size_t)(D / 4)), *cs = xmalloc(4 * n), *sn = xmalloc(4 * n), *gc = xmalloc(4 * n),
          *gs = xmalloc(4 * n);
    int32_t *row = xmalloc(4 * (size_t)T), *col = xmalloc(4 * (size_t)T);
    double *tol = xmalloc(8 * n);
    vision_rope_inv_freq(&c, inv);
    for (int t = 0; t < T; t++) row[t] = (int32_t)(rng_u64() % max_pos), col[t] = (int32_t)(rng_u64() % max_pos);
    op_rope2d_tables(cs, sn, row, col, T, D, inv);
    for (int64_t i = 0; i < n; i++) tol[i] = 0x1p-22;
    float *dinv = dev_buf(inv, 4 * (size_t)(D / 4)), *dcs = dev_buf(NULL, 4 * n), *dsn = dev_buf(NULL, 4 * n);
    int32_t *dr = dev_buf(row, 4 * (size_t)T), *dc = dev_buf(col, 4 * (size_t)T);
    TRY(omni_cuda_rope2d_tables_f32(dcs, dsn, dr, dc, T, D, dinv, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(gc, dcs, 4 * n, g_stream));
    TRY(omni_cuda_d2h(gs, dsn, 4 * n, g_stream));
    char what[64];
    snprintf(what, sizeof what, "rope2d_tables T=%d D=%d cos", T, D);
    compare(&g_ops[O_TABLES], what, gc, cs, tol, n);
    snprintf(what, sizeof what, "rope2d_tables T=%d D=%d sin", T, D);
    compare(&g_ops[O_TABLES], what, gs, sn, tol, n);
    dev_done(what, dinv, 4 * (size_t)(D / 4)), dev_done(what, dcs, 4 * n), dev_done(what, dsn, 4 * n);
    dev_done(what, dr, 4 * (size_t)T), dev_done(what, dc, 4 * (size_t)T);
    free(inv), free(cs), free(sn), free(tol);
    *cs_out = gc, *sn_out = gs, *row_out = row, *col_out = col;
}

/* Apply: q and k heads (2H) of a fused row [q | k | v] + 8 padding elements, with the GPU tables; the reference
 * op_rope_neox on the f32 values rounded once to bf16 must match to the bit; v and padding stay untouched. */
static void rope_case(int T, int H, int D) {
    float *cs, *sn;
    int32_t *row, *col;
    tables_case(T, D, 300, &cs, &sn, &row, &col);
    const int64_t W = 3 * (int64_t)H * D + 8, n = (int64_t)T * W;
    uint16_t *xh = xmalloc(2 * n), *got = xmalloc(2 * n), *want;
    float *xf = xmalloc(4 * n), *ref = xmalloc(4 * n);
    rand_bf16(xh, xf, n, 1.5f, 0.f);
    memcpy(ref, xf, 4 * n);
    op_rope_neox(ref, T, 2 * H, D, W, cs, sn);
    want = bits_of(ref, n);
    float *dcs = dev_buf(cs, 4 * (size_t)T * D), *dsn = dev_buf(sn, 4 * (size_t)T * D);
    uint16_t *dx = dev_buf(xh, 2 * n);
    TRY(omni_cuda_rope_neox_f32_bf16(dx, T, 2 * H, D, W, dcs, dsn, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dx, 2 * n, g_stream));
    char what[64];
    snprintf(what, sizeof what, "rope_neox_f32 T=%d heads=2x%d D=%d", T, H, D);
    expect_bits(what, got, want, n);
    dev_done(what, dcs, 4 * (size_t)T * D), dev_done(what, dsn, 4 * (size_t)T * D), dev_done(what, dx, 2 * n);
    free(cs), free(sn), free(row), free(col), free(xh), free(got), free(want), free(xf), free(ref);
}

static void test_rope(void) {
    rope_case(1, 1, 8);
    rope_case(33, 3, 64);
    rope_case(257, 16, 72); /* Qwen3-VL-8B heads */
    rope_case(19, 2, 128);
    rope_case(1025, 1, 16);
}

/* ---- im2col ------------------------------------------------------------------------------------------- */

/* Reference: op_im2col_3x3s2 on the f32 values (exact copies), rows reordered to (b, wo, ho) for wmajor and padded
 * with zero columns to ldc. */
static void im2col_case(int nb, int H, int W, int C, int ldc, int wmajor) {
    const int Ho = (H - 1) / 2 + 1, Wo = (W - 1) / 2 + 1, K = 9 * C;
    const int64_t xn = (int64_t)nb * H * W * C, rows = (int64_t)nb * Ho * Wo, cn = rows * ldc;
    uint16_t *xh = xmalloc(2 * xn), *got = xmalloc(2 * cn), *want = xmalloc(2 * cn);
    float *xf = xmalloc(4 * xn), *ref = xmalloc(4 * rows * K);
    rand_bf16(xh, xf, xn, 1.f, 0.25f);
    op_im2col_3x3s2(ref, xf, nb, H, W, C);
    for (int b = 0; b < nb; b++)
        for (int ho = 0; ho < Ho; ho++)
            for (int wo = 0; wo < Wo; wo++) {
                const int64_t src = ((int64_t)b * Ho + ho) * Wo + wo;
                const int64_t dst = wmajor ? ((int64_t)b * Wo + wo) * Ho + ho : src;
                for (int j = 0; j < ldc; j++)
                    want[dst * ldc + j] = j < K ? omni_f32_to_bf16(ref[src * K + j]) : 0;
            }
    uint16_t *dx = dev_buf(xh, 2 * xn), *dc = dev_buf(NULL, 2 * cn);
    TRY(omni_cuda_im2col_3x3s2_bf16(dc, ldc, dx, nb, H, W, C, wmajor, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dc, 2 * cn, g_stream));
    char what[96];
    snprintf(what, sizeof what, "im2col nb=%d %dx%d C=%d ldc=%d %s", nb, H, W, C, ldc, wmajor ? "wmajor" : "hmajor");
    expect_bits(what, got, want, cn);
    dev_done(what, dx, 2 * xn), dev_done(what, dc, 2 * cn);
    free(xh), free(got), free(want), free(xf), free(ref);
}

static void test_im2col(void) {
    im2col_case(3, 128, 100, 1, 16, 0); /* the audio stem's first conv: K 9 padded to 16 */
    im2col_case(1, 128, 37, 1, 9, 1);   /* a short single chunk */
    im2col_case(2, 64, 50, 40, 360, 0);
    im2col_case(2, 32, 25, 40, 368, 1); /* padded K on the shared-memory path */
    im2col_case(1, 7, 5, 3, 27, 0);     /* odd everything, small path */
    im2col_case(2, 16, 13, 480, 4320, 1); /* the real third conv */
    im2col_case(1, 1, 1, 7, 63, 0);     /* a single pixel: only the centre tap is inside */
}

/* ---- periodic add, uniform fill ------------------------------------------------------------------------ */

static void periodic_case(int rows, int period, int dim) {
    const int64_t yn = (int64_t)rows * dim, tn = (int64_t)period * dim;
    uint16_t *yh = xmalloc(2 * yn), *th = xmalloc(2 * tn), *got = xmalloc(2 * yn), *want = xmalloc(2 * yn);
    float *yf = xmalloc(4 * yn), *tf = xmalloc(4 * tn);
    rand_bf16(yh, yf, yn, 3.f, 0.f);
    rand_bf16(th, tf, tn, 1.f, 0.f);
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < dim; d++)
            want[(int64_t)r * dim + d] = omni_f32_to_bf16(yf[(int64_t)r * dim + d] + tf[(int64_t)(r % period) * dim + d]);
    uint16_t *dy = dev_buf(yh, 2 * yn), *dt = dev_buf(th, 2 * tn);
    TRY(omni_cuda_add_periodic_bf16(dy, dt, period, rows, dim, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dy, 2 * yn, g_stream));
    char what[64];
    snprintf(what, sizeof what, "add_periodic rows=%d period=%d dim=%d", rows, period, dim);
    expect_bits(what, got, want, yn);
    dev_done(what, dy, 2 * yn), dev_done(what, dt, 2 * tn);
    free(yh), free(th), free(got), free(want), free(yf), free(tf);
}

static uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_case(int64_t n, uint64_t seed, float lo, float hi) {
    uint16_t *got = xmalloc(2 * n), *want = xmalloc(2 * n);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float u = (float)(splitmix64(seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull)) >> 40) * 0x1p-24f;
        want[i] = omni_f32_to_bf16(lo + (hi - lo) * u);
        sum += u;
    }
    uint16_t *dy = dev_buf(NULL, 2 * n);
    TRY(omni_cuda_fill_uniform_bf16(dy, n, seed, lo, hi, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dy, 2 * n, g_stream));
    char what[64];
    snprintf(what, sizeof what, "fill_uniform n=%lld seed=%llu", (long long)n, (unsigned long long)seed);
    expect_bits(what, got, want, n);
    if (n > 100000) /* the generator itself: mean of u within 5 sigma of 1/2 */
        CHECK(fabs(sum / n - 0.5) < 5 * sqrt(1.0 / 12 / n), "%s: mean u %.6f", what, sum / n);
    dev_done(what, dy, 2 * n);
    free(got), free(want);
}

static void test_periodic_fill(void) {
    periodic_case(1, 13, 1280);
    periodic_case(390, 13, 19);
    periodic_case(1000, 7, 64);
    periodic_case(5, 1, 3);
    fill_case(1, 7, -0.05f, 0.05f);
    fill_case(1000003, 12345, -0.0346f, 0.0346f);
    fill_case(4099, 99, 1.f, 1.f);
}

/* ---- tower attention (kvcache/cuda kvc_tower_attn) ------------------------------------------------------ */

/* Segments of the given lengths, H heads of hd, q/k/v in rows of `row` elements (q | k | v of a fused buffer at
 * +0, +H·hd, +2H·hd), out rows of `orow`. Reference in f64 from the bf16 inputs; bound per element
 * B·(|ref| + max|v| of the segment and head): the output's bf16 rounding (≤ B/2 |out|) plus P rounded to bf16
 * (each weight within B/2, so ≤ B/2 · max|v|). Channels past H·hd of each out row must keep their poison. */
static void tower_attn_case(int H, int hd, const int *lens, int n_seg, int64_t row, int64_t orow) {
    int T = 0, max_seg = 0;
    int32_t cu[17];
    for (int s = 0; s < n_seg; s++) cu[s] = T, T += lens[s], max_seg = lens[s] > max_seg ? lens[s] : max_seg;
    cu[n_seg] = T;
    const int64_t n_in = (int64_t)T * row, n_out = (int64_t)T * orow, D = (int64_t)H * hd;
    uint16_t *qh = xmalloc(2 * n_in), *oh = xmalloc(2 * n_out);
    float *qf = xmalloc(4 * n_in), *got = xmalloc(4 * n_out), *ref = xmalloc(4 * n_out);
    double *tol = xmalloc(8 * n_out), *p = xmalloc(8 * (size_t)(max_seg > 0 ? max_seg : 1));
    rand_bf16(qh, qf, n_in, 1.5f, 0.1f);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int s = 0; s < n_seg; s++)
        for (int h = 0; h < H; h++) {
            double vmax = 0;
            for (int j = cu[s]; j < cu[s + 1]; j++)
                for (int c = 0; c < hd; c++) vmax = fmax(vmax, fabs(qf[j * row + 2 * D + h * hd + c]));
            for (int i = cu[s]; i < cu[s + 1]; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = cu[s]; j < cu[s + 1]; j++) {
                    double d = 0;
                    for (int c = 0; c < hd; c++) d += (double)qf[i * row + h * hd + c] * qf[j * row + D + h * hd + c];
                    p[j - cu[s]] = d * scale, mx = fmax(mx, d * scale);
                }
                for (int j = 0; j < lens[s]; j++) p[j] = exp(p[j] - mx), sum += p[j];
                for (int c = 0; c < hd; c++) {
                    double o = 0;
                    for (int j = cu[s]; j < cu[s + 1]; j++) o += p[j - cu[s]] * qf[j * row + 2 * D + h * hd + c];
                    ref[i * orow + h * hd + c] = (float)(o / sum);
                    tol[i * orow + h * hd + c] = B * (fabs(o / sum) + vmax);
                }
            }
        }
    uint16_t *dq = dev_buf(qh, 2 * n_in), *dout = dev_buf(NULL, 2 * n_out);
    int32_t *dcu = dev_buf(cu, 4 * (size_t)(n_seg + 1));
    TRY(kvc_tower_attn(H, hd, dcu, n_seg, max_seg, dq, dq + D, dq + 2 * D, row, dout, orow, scale, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(oh, dout, 2 * n_out, g_stream));
    int64_t poison = 0, n_cmp = 0;
    for (int64_t i = 0; i < T; i++) {
        for (int64_t c = 0; c < D; c++) got[n_cmp] = omni_bf16_to_f32(oh[i * orow + c]), ref[n_cmp] = ref[i * orow + c],
                                        tol[n_cmp] = tol[i * orow + c], n_cmp++;
        for (int64_t c = D; c < orow; c++) poison += oh[i * orow + c] != 0xffff;
    }
    char what[128];
    snprintf(what, sizeof what, "tower_attn H=%d hd=%d segs=%d T=%d row=%lld orow=%lld", H, hd, n_seg, T,
             (long long)row, (long long)orow);
    compare(&g_ops[O_ATTN], what, got, ref, tol, n_cmp);
    CHECK(poison == 0, "%s: %lld values written past the heads of an out row", what, (long long)poison);
    dev_done(what, dq, 2 * n_in), dev_done(what, dout, 2 * n_out), dev_done(what, dcu, 4 * (size_t)(n_seg + 1));
    free(qh), free(oh), free(qf), free(got), free(ref), free(tol), free(p);
}

static void test_tower_attn(void) {
    static const int a[] = {1, 63, 64, 65, 130}, b[] = {200}, c[] = {7, 129, 3};
    tower_attn_case(2, 72, a, 5, 3 * 2 * 72, 2 * 72);              /* the Qwen3-VL head_dim: DP 80 */
    tower_attn_case(3, 64, c, 3, 3 * 3 * 64 + 8, 3 * 64 + 8);      /* padded rows */
    tower_attn_case(1, 128, b, 1, 3 * 128, 128);
    tower_attn_case(2, 80, c, 3, 3 * 2 * 80, 2 * 80);
    tower_attn_case(3, 8, a, 5, 3 * 3 * 8, 3 * 8);                 /* Omni fixture widths: DP 32 */
    tower_attn_case(2, 20, c, 3, 3 * 2 * 20, 2 * 20);              /* not a multiple of 8: element loads */
    tower_attn_case(2, 24, b, 1, 3 * 2 * 24 + 2, 2 * 24 + 2);
    tower_attn_case(1, 96, a, 5, 3 * 96, 96);                      /* DP 128 with zero channels */
    CHECK(kvc_tower_attn(2, 130, (int32_t *)g_stream, 1, 4, NULL, NULL, NULL, 780, NULL, 260, 1.f, g_stream) ==
              OMNI_ERR_USAGE, "head_dim > 128 refused");
    CHECK(kvc_tower_attn(2, 7, (int32_t *)g_stream, 1, 4, NULL, NULL, NULL, 42, NULL, 14, 1.f, g_stream) ==
              OMNI_ERR_USAGE, "odd head_dim refused");
    CHECK(kvc_tower_attn(2, 64, NULL, 0, 0, NULL, NULL, NULL, 384, NULL, 128, 1.f, g_stream) == OMNI_OK,
          "no segments is a no-op");
}

/* ---- arguments -------------------------------------------------------------------------------------------- */

static void test_bad_args(void) {
    uint16_t *d = dev_buf(NULL, 4096);
    CHECK(omni_cuda_im2col_3x3s2_bf16(d, 8, d, 1, 4, 4, 1, 0, g_stream) == OMNI_ERR_USAGE, "ldc < 9C refused");
    CHECK(omni_cuda_rope2d_tables_f32((float *)d, (float *)d, (int32_t *)d, (int32_t *)d, 4, 6, (float *)d,
                                      g_stream) == OMNI_ERR_USAGE, "D %% 4 != 0 refused");
    CHECK(omni_cuda_rope_neox_f32_bf16(d, 2, 4, 64, 100, (float *)d, (float *)d, g_stream) == OMNI_ERR_USAGE,
          "ld < H*D refused");
    CHECK(omni_cuda_add_periodic_bf16(d, d, 0, 4, 4, g_stream) == OMNI_ERR_USAGE, "period 0 refused");
    CHECK(omni_cuda_fill_uniform_bf16(d, 4, 1, 1.f, 0.f, g_stream) == OMNI_ERR_USAGE, "hi < lo refused");
    CHECK(omni_cuda_pos_embed_bilinear_bf16(d, NULL, 4, (int32_t *)d, (int32_t *)d, 4, 4, 2, 2, g_stream) ==
              OMNI_ERR_USAGE, "NULL table refused");
    CHECK(omni_cuda_im2col_3x3s2_bf16(d, 9, d, 0, 4, 4, 1, 0, g_stream) == OMNI_OK, "nb 0 is a no-op");
    TRY(omni_cuda_sync(g_stream));
    dev_done("bad args", d, 4096);
}

int main(void) {
    if (!gpu_test_open()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    double t0 = omni_time_ms();
    test_pos_embed();
    test_rope();
    test_im2col();
    test_periodic_fill();
    test_tower_attn();
    test_bad_args();
    stats_print(g_ops, O_COUNT);
    printf("(%d exact cases: pos_embed, rope apply, im2col, add_periodic, fill) %.0f ms\n", g_exact_cases,
           omni_time_ms() - t0);
    omni_cuda_ctx_free(g_ctx);
    return check_exit();
}
