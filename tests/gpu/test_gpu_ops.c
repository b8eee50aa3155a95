/* test_gpu_ops.c - every op of kernels/ops_cuda.h against the CPU f32 reference (kernels/ops.h) in the same
 * process, on seeded random bf16-rounded inputs of awkward sizes. Exit 77 (SKIP) when no GPU is present.
 *
 * Notation: u = 2^-24 (f32 unit roundoff), B = 2^-8 (bf16 unit roundoff: one round-to-nearest-even to bf16 moves a
 * value by at most B·|value|). Each tolerance is (error of the GPU's bf16/fp32 arithmetic) + (error of the CPU's
 * f32 arithmetic), derived next to it; reductions over K terms use the probabilistic bound lambda·sqrt(K)·u·Σ|terms|
 * (Higham & Mary 2019, lambda = 2), as tests/kernels/test_ops.c does. The worst error/tolerance ratio and the worst
 * absolute error per op are printed at the end, so a bound that is much too loose shows up in the log.
 * Outputs are poisoned (0xFF bytes: NaN for bf16/f32) before each launch, so an unwritten element fails the NaN
 * parity check, and every device buffer has CANARY_BYTES of a known pattern behind it that must survive. */
#include "gpu_test_util.h"
#include "kernels/ops.h"

enum { O_RMS, O_ADD_RMS, O_LN, O_ROPE, O_SILU, O_GELU_ERF, O_GELU_TANH, O_ADD, O_EMBED, O_SOFTMAX, O_ARGMAX, O_LINEAR,
       O_LINEAR32, O_FUSED, O_COUNT };
static op_stats g_ops[O_COUNT] = {
    {.name = "rmsnorm"},   {.name = "add_rmsnorm"}, {.name = "layernorm"}, {.name = "rope_neox"},
    {.name = "silu_mul"},  {.name = "gelu_erf"},    {.name = "gelu_tanh"}, {.name = "add"},
    {.name = "embed"},     {.name = "softmax"},     {.name = "argmax"},    {.name = "linear_bf16out"},
    {.name = "linear_f32out"}, {.name = "fused_linear"}};
#define compare(op, ...) compare(&g_ops[op], __VA_ARGS__)

/* ---- rmsnorm (also per-head q_norm/k_norm shapes) ------------------------------------------------------ */

/* GPU: h = bf16(x·inv) (B), y = bf16(h·w) (B): 2B + B² relative; fp32 sum of squares (all terms positive) and
 * rsqrtf (2 ulp) add <= 2u(sqrt(dim) + 8) relative; the CPU f32 reference adds u(sqrt(dim) + 8).
 * tol = (2B + B² + 3u(sqrt(dim) + 8))·|ref| + ATOL_SUB. `offset` = 1 element misaligns x/y (scalar path). */
static void rmsnorm_case(int rows, int dim, int inplace, int offset) {
    int64_t n = (int64_t)rows * dim;
    uint16_t *xh = xmalloc(2 * (n + 1)), *wh = xmalloc(2 * dim);
    float *xf = xmalloc(4 * n), *wf = xmalloc(4 * dim), *ref = xmalloc(4 * n), *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(xh + offset, xf, n, 2.f, 0.f);
    rand_bf16(wh, wf, dim, 0.2f, 1.f);
    omni_tensor wt = bf16_vec(wh, dim);
    op_rmsnorm(ref, xf, &wt, rows, dim, 1e-6f);
    for (int64_t i = 0; i < n; i++) tol[i] = (2 * B + B * B + 3 * U * (sqrt(dim) + 8)) * fabs(ref[i]) + ATOL_SUB;

    size_t xb = 2 * (size_t)(n + offset);
    uint16_t *dx = dev_buf(xh, xb), *dw = dev_buf(wh, 2 * (size_t)dim);
    uint16_t *dy = inplace ? dx : dev_buf(NULL, xb);
    TRY(omni_cuda_rmsnorm_bf16(dy + offset, dx + offset, dw, rows, dim, 1e-6f, g_stream));
    TRY(omni_cuda_sync(g_stream));
    fetch_bf16(got, dy + offset, n);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm rows=%d dim=%d inplace=%d offset=%d", rows, dim, inplace, offset);
    compare(O_RMS, what, got, ref, tol, n);
    dev_done(what, dx, xb), dev_done(what, dw, 2 * (size_t)dim);
    if (!inplace) dev_done(what, dy, xb);
    free(xh), free(wh), free(xf), free(wf), free(ref), free(got), free(tol);
}

static void test_rmsnorm(void) {
    /* paths: 16 or 32 lanes per row (dim <= 1024) or a block per row; 1-, 2- or 8-element accesses */
    const int rows[] = {1, 19, 33}, dims[] = {1, 19, 34, 128, 130, 1024, 1025, 2050, 4096};
    for (int r = 0; r < 3; r++)
        for (int d = 0; d < 9; d++) rmsnorm_case(rows[r], dims[d], 0, 0);
    rmsnorm_case(19 * 16, 128, 0, 0); /* q_norm: 19 tokens x 16 heads, D = 128 */
    rmsnorm_case(33 * 8, 128, 1, 0);  /* k_norm in place (vector path) */
    rmsnorm_case(19, 4096, 1, 1);     /* in place, misaligned (scalar path) */
    rmsnorm_case(19, 128, 0, 1);
}

/* add_rmsnorm must equal omni_cuda_add_bf16 then omni_cuda_rmsnorm_bf16 bit for bit (x and h), and h must be
 * within the rmsnorm bound of the CPU reference fed xs = bf16(x + a): tol as rmsnorm_case. */
static void add_rmsnorm_case(int rows, int dim, int offset) {
    int64_t n = (int64_t)rows * dim;
    size_t xb = 2 * (size_t)(n + offset), wb = 2 * (size_t)dim;
    uint16_t *xh = xmalloc(xb), *ah = xmalloc(xb), *wh = xmalloc(wb);
    uint16_t *x1 = xmalloc(xb), *x2 = xmalloc(xb), *h1 = xmalloc(xb), *h2 = xmalloc(xb);
    float *xf = xmalloc(4 * n), *af = xmalloc(4 * n), *wf = xmalloc(4 * dim), *ref = xmalloc(4 * n);
    float *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(xh + offset, xf, n, 2.f, 0.f);
    rand_bf16(ah + offset, af, n, 1.f, 0.f);
    rand_bf16(wh, wf, dim, 0.2f, 1.f);
    for (int64_t i = 0; i < n; i++) xf[i] = omni_bf16_to_f32(omni_f32_to_bf16(xf[i] + af[i]));
    omni_tensor wt = bf16_vec(wh, dim);
    op_rmsnorm(ref, xf, &wt, rows, dim, 1e-6f);
    for (int64_t i = 0; i < n; i++) tol[i] = (2 * B + B * B + 3 * U * (sqrt(dim) + 8)) * fabs(ref[i]) + ATOL_SUB;

    uint16_t *dx1 = dev_buf(xh, xb), *dx2 = dev_buf(xh, xb), *da = dev_buf(ah, xb), *dw = dev_buf(wh, wb);
    uint16_t *dh1 = dev_buf(NULL, xb), *dh2 = dev_buf(NULL, xb);
    TRY(omni_cuda_add_bf16(dx1 + offset, dx1 + offset, da + offset, n, g_stream));
    TRY(omni_cuda_rmsnorm_bf16(dh1 + offset, dx1 + offset, dw, rows, dim, 1e-6f, g_stream));
    TRY(omni_cuda_add_rmsnorm_bf16(dh2 + offset, dx2 + offset, da + offset, dw, rows, dim, 1e-6f, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(x1, dx1, xb, g_stream));
    TRY(omni_cuda_d2h(x2, dx2, xb, g_stream));
    TRY(omni_cuda_d2h(h1, dh1, xb, g_stream));
    TRY(omni_cuda_d2h(h2, dh2, xb, g_stream));
    int64_t dx = 0, dh = 0;
    for (int64_t i = offset; i < n + offset; i++) dx += x1[i] != x2[i], dh += h1[i] != h2[i];
    for (int64_t i = 0; i < n; i++) got[i] = omni_bf16_to_f32(h2[i + offset]);
    char what[96];
    snprintf(what, sizeof what, "add_rmsnorm rows=%d dim=%d offset=%d", rows, dim, offset);
    CHECK(dx == 0 && dh == 0, "%s: %lld x and %lld h differ from add + rmsnorm", what, (long long)dx, (long long)dh);
    compare(O_ADD_RMS, what, got, ref, tol, n);
    dev_done(what, dx1, xb), dev_done(what, dx2, xb), dev_done(what, da, xb), dev_done(what, dw, wb);
    dev_done(what, dh1, xb), dev_done(what, dh2, xb);
    free(xh), free(ah), free(wh), free(x1), free(x2), free(h1), free(h2);
    free(xf), free(af), free(wf), free(ref), free(got), free(tol);
}

static void test_add_rmsnorm(void) {
    const int rows[] = {1, 19, 33}, dims[] = {19, 128, 130, 4096};
    for (int r = 0; r < 3; r++)
        for (int d = 0; d < 4; d++) add_rmsnorm_case(rows[r], dims[d], 0);
    add_rmsnorm_case(19, 4096, 1);
    add_rmsnorm_case(33, 128, 1);
}

/* ---- layernorm ----------------------------------------------------------------------------------------- */

/* GPU and CPU each: mean/variance over dim terms <= u(sqrt(dim) + 8)(|x| + |mean|)|w|/sd, final products and
 * bias add <= 2u(|ref| + |b|) (test_ops.c's bound, counted twice); then one bf16 rounding of the output: B|ref|.
 * tol = B|ref| + (1 + B)·2·[u(sqrt(dim) + 8)(|x| + |mean|)|w|/sd + 2u(|ref| + |b|)] + ATOL_SUB. */
static void layernorm_case(int rows, int dim, int bias) {
    int64_t n = (int64_t)rows * dim;
    uint16_t *xh = xmalloc(2 * n), *wh = xmalloc(2 * dim), *bh = xmalloc(2 * dim);
    float *xf = xmalloc(4 * n), *wf = xmalloc(4 * dim), *bf = xmalloc(4 * dim), *ref = xmalloc(4 * n),
          *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(xh, xf, n, 3.f, 0.7f);
    rand_bf16(wh, wf, dim, 0.3f, 1.f);
    rand_bf16(bh, bf, dim, 0.5f, 0.f);
    omni_tensor wt = bf16_vec(wh, dim), bt = bf16_vec(bh, dim);
    op_layernorm(ref, xf, &wt, bias ? &bt : NULL, rows, dim, 1e-5f);
    for (int r = 0; r < rows; r++) {
        const float *xr = xf + (int64_t)r * dim;
        double s = 0, ss = 0;
        for (int i = 0; i < dim; i++) s += xr[i];
        double mean = s / dim;
        for (int i = 0; i < dim; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        double sd = sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; i++) {
            int64_t k = (int64_t)r * dim + i;
            double b = bias ? fabs(bf[i]) : 0;
            double e = U * (sqrt(dim) + 8) * (fabs(xr[i]) + fabs(mean)) * fabs(wf[i]) / sd + 2 * U * (fabs(ref[k]) + b);
            tol[k] = B * fabs(ref[k]) + (1 + B) * 2 * e + ATOL_SUB;
        }
    }
    size_t xb = 2 * (size_t)n, vb = 2 * (size_t)dim;
    uint16_t *dx = dev_buf(xh, xb), *dw = dev_buf(wh, vb), *db = dev_buf(bh, vb), *dy = dev_buf(NULL, xb);
    TRY(omni_cuda_layernorm_bf16(dy, dx, dw, bias ? db : NULL, rows, dim, 1e-5f, g_stream));
    TRY(omni_cuda_sync(g_stream));
    fetch_bf16(got, dy, n);
    char what[96];
    snprintf(what, sizeof what, "layernorm rows=%d dim=%d bias=%d", rows, dim, bias);
    compare(O_LN, what, got, ref, tol, n);
    dev_done(what, dx, xb), dev_done(what, dw, vb), dev_done(what, db, vb), dev_done(what, dy, xb);
    free(xh), free(wh), free(bh), free(xf), free(wf), free(bf), free(ref), free(got), free(tol);
}

static void test_layernorm(void) {
    const int rows[] = {1, 19, 33}, dims[] = {1, 19, 127, 1152, 1025};
    for (int r = 0; r < 3; r++)
        for (int d = 0; d < 5; d++) layernorm_case(rows[r], dims[d], (r + d) % 2);
    layernorm_case(33, 1152, 1);
}

/* ---- RoPE ---------------------------------------------------------------------------------------------- */

/* The CPU reference gets the bf16-rounded tables (HF casts cos/sin to bf16), the GPU the fp32 tables (it casts).
 * Per output: GPU p = bf16(x·c), q = bf16(±x'·s), out = bf16(p + q). With S = |x·c| + |x'·s|:
 * |p + q - exact| <= B·S, |out - (p + q)| <= B(|exact| + B·S); CPU f32: <= 2u·S.
 * tol = B(|ref| + 1.01·S) + ATOL_SUB (1.01 covers B + 2u/B + B²). Padding between rows must stay untouched. */
static void rope_case(int T, int H, int D, int pad) {
    int64_t ld = (int64_t)H * D + pad, n = T * ld;
    int half = D / 2;
    uint16_t *xh = xmalloc(2 * n);
    float *xf = xmalloc(4 * n), *ref = xmalloc(4 * n), *got = xmalloc(4 * n);
    float *cs = xmalloc(4 * (size_t)T * D), *sn = xmalloc(4 * (size_t)T * D);
    float *csb = xmalloc(4 * (size_t)T * D), *snb = xmalloc(4 * (size_t)T * D);
    double *tol = xmalloc(8 * n);
    rand_bf16(xh, xf, n, 1.5f, 0.f);
    for (int t = 0; t < T; t++) {
        float pos = (float)(t * 37 + 5);
        for (int j = 0; j < half; j++) {
            float inv = (float)(1.0 / pow(5e6, (double)(2 * j) / D)), f = pos * inv;
            for (int k = 0; k < 2; k++) {
                int64_t i = (int64_t)t * D + j + k * half;
                cs[i] = cosf(f), sn[i] = sinf(f);
                csb[i] = omni_bf16_to_f32(omni_f32_to_bf16(cs[i]));
                snb[i] = omni_bf16_to_f32(omni_f32_to_bf16(sn[i]));
            }
        }
    }
    memcpy(ref, xf, 4 * n);
    op_rope_neox(ref, T, H, D, ld, csb, snb);
    for (int t = 0; t < T; t++)
        for (int64_t c = 0; c < ld; c++) {
            int64_t i = t * ld + c;
            if (c >= (int64_t)H * D) {
                tol[i] = 0; /* padding: must be bit-identical */
                continue;
            }
            int d = (int)(c % D), pair = d < half ? d + half : d - half;
            double S = fabs(xf[i] * csb[(int64_t)t * D + d]) + fabs(xf[i - d + pair] * snb[(int64_t)t * D + d]);
            tol[i] = B * (fabs(ref[i]) + 1.01 * S) + ATOL_SUB;
        }
    size_t xb = 2 * (size_t)n, tb = 4 * (size_t)T * D;
    uint16_t *dx = dev_buf(xh, xb);
    float *dc = dev_buf(cs, tb), *ds = dev_buf(sn, tb);
    TRY(omni_cuda_rope_neox_bf16(dx, T, H, D, ld, dc, ds, g_stream));
    TRY(omni_cuda_sync(g_stream));
    fetch_bf16(got, dx, n);
    char what[96];
    snprintf(what, sizeof what, "rope T=%d H=%d D=%d pad=%d", T, H, D, pad);
    compare(O_ROPE, what, got, ref, tol, n);
    dev_done(what, dx, xb), dev_done(what, dc, tb), dev_done(what, ds, tb);
    free(xh), free(xf), free(ref), free(got), free(cs), free(sn), free(csb), free(snb), free(tol);
}

static void test_rope(void) {
    const int Ts[] = {1, 19, 33}, Hs[] = {1, 3, 16}, Ds[] = {2, 18, 128};
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < 3; h++)
            for (int d = 0; d < 3; d++) rope_case(Ts[t], Hs[h], Ds[d], (t + h + d) % 2 ? 0 : 2 * Ds[d] + 3);
}

/* ---- element-wise: silu*mul, gelu, add ----------------------------------------------------------------- */

/* silu(g) in fp32 (expf 2 ulp, 1+e, IEEE division) differs from the CPU's by < 2^-20 relative; bf16(silu) (B),
 * times up, bf16 again (B): tol = ((1 + B)²(1 + 2^-20) - 1 + u)|ref| <= (2B + 2^-15)|ref| + ATOL_SUB (B² = 2^-16). */
static void silu_case(int64_t n, int alias) {
    uint16_t *gh = xmalloc(2 * n), *uh = xmalloc(2 * n);
    float *gf = xmalloc(4 * n), *uf = xmalloc(4 * n), *ref = xmalloc(4 * n), *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(gh, gf, n, 3.f, 0.f);
    rand_bf16(uh, uf, n, 2.f, 0.f);
    op_silu_mul(ref, gf, uf, n);
    for (int64_t i = 0; i < n; i++) tol[i] = (2 * B + 0x1p-15) * fabs(ref[i]) + ATOL_SUB;
    size_t bytes = 2 * (size_t)n;
    uint16_t *dg = dev_buf(gh, bytes), *du = dev_buf(uh, bytes), *dy = alias ? dg : dev_buf(NULL, bytes);
    TRY(omni_cuda_silu_mul_bf16(dy, dg, du, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    fetch_bf16(got, dy, n);
    char what[64];
    snprintf(what, sizeof what, "silu_mul n=%lld alias=%d", (long long)n, alias);
    compare(O_SILU, what, got, ref, tol, n);
    dev_done(what, dg, bytes), dev_done(what, du, bytes);
    if (!alias) dev_done(what, dy, bytes);
    free(gh), free(uh), free(gf), free(uf), free(ref), free(got), free(tol);
}

/* gelu in fp32 on each side: erf form <= 2^-23(|x| + |g|) absolute (erff 2 ulp of a value <= 1, 1 + erf, two
 * products); tanh form adds the argument's rounding through sech² <= 1: <= 2^-22·|x|(1 + |x| + 0.05|x|³).
 * Both sides, then one bf16 rounding: erf tol = (B + 2^-21)|ref| + 2^-21|x|;
 * tanh tol = (B + 2^-21)|ref| + 2^-21|x|(1 + |x| + 0.05|x|³); + ATOL_SUB. */
static void gelu_case(int64_t n, int tanh_form, int inplace) {
    uint16_t *xh = xmalloc(2 * n);
    float *xf = xmalloc(4 * n), *ref = xmalloc(4 * n), *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(xh, xf, n, 3.f, 0.f);
    memcpy(ref, xf, 4 * n);
    if (tanh_form)
        op_gelu_tanh(ref, n);
    else
        op_gelu_erf(ref, n);
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(xf[i]), extra = tanh_form ? (1 + a + 0.05 * a * a * a) : 1;
        tol[i] = (B + 0x1p-21) * fabs(ref[i]) + 0x1p-21 * a * extra + ATOL_SUB;
    }
    size_t bytes = 2 * (size_t)n;
    uint16_t *dx = dev_buf(xh, bytes), *dy = inplace ? dx : dev_buf(NULL, bytes);
    TRY((tanh_form ? omni_cuda_gelu_tanh_bf16 : omni_cuda_gelu_erf_bf16)(dy, dx, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    fetch_bf16(got, dy, n);
    char what[64];
    snprintf(what, sizeof what, "gelu_%s n=%lld inplace=%d", tanh_form ? "tanh" : "erf", (long long)n, inplace);
    compare(tanh_form ? O_GELU_TANH : O_GELU_ERF, what, got, ref, tol, n);
    dev_done(what, dx, bytes);
    if (!inplace) dev_done(what, dy, bytes);
    free(xh), free(xf), free(ref), free(got), free(tol);
}

/* bf16 + bf16 in fp32 is one IEEE add on both sides, then the GPU rounds to bf16 (B|ref|); the result must also
 * equal omni_f32_to_bf16 of the CPU sum bit for bit. tol = B|ref| + ATOL_SUB. */
static void add_case(int64_t n, int inplace) {
    uint16_t *ah = xmalloc(2 * n), *bh = xmalloc(2 * n), *gh = xmalloc(2 * n);
    float *af = xmalloc(4 * n), *bf = xmalloc(4 * n), *ref = xmalloc(4 * n), *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(ah, af, n, 4.f, 0.f);
    rand_bf16(bh, bf, n, 1.f, 0.f);
    memcpy(ref, af, 4 * n);
    op_add(ref, bf, n);
    for (int64_t i = 0; i < n; i++) tol[i] = B * fabs(ref[i]) + ATOL_SUB;
    size_t bytes = 2 * (size_t)n;
    uint16_t *da = dev_buf(ah, bytes), *db = dev_buf(bh, bytes), *dy = inplace ? da : dev_buf(NULL, bytes);
    TRY(omni_cuda_add_bf16(dy, da, db, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(gh, dy, bytes, g_stream));
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++) {
        got[i] = omni_bf16_to_f32(gh[i]);
        diff += gh[i] != omni_f32_to_bf16(ref[i]);
    }
    char what[64];
    snprintf(what, sizeof what, "add n=%lld inplace=%d", (long long)n, inplace);
    compare(O_ADD, what, got, ref, tol, n);
    CHECK(diff == 0, "%s: %lld results differ from bf16(a + b)", what, (long long)diff);
    dev_done(what, da, bytes), dev_done(what, db, bytes);
    if (!inplace) dev_done(what, dy, bytes);
    free(ah), free(bh), free(gh), free(af), free(bf), free(ref), free(got), free(tol);
}

static void test_elementwise(void) {
    const int64_t ns[] = {1, 19, 1025, 3 * 12288 + 5};
    for (int i = 0; i < 4; i++) {
        silu_case(ns[i], 0);
        gelu_case(ns[i], 0, 0);
        gelu_case(ns[i], 1, 0);
        add_case(ns[i], 0);
    }
    silu_case(1025, 1), gelu_case(1025, 0, 1), gelu_case(1025, 1, 1), add_case(1025, 1);
}

/* ---- embedding: exact ---------------------------------------------------------------------------------- */

static void embed_case(int64_t vocab, int dim, int n) {
    int64_t tn = vocab * dim, yn = (int64_t)n * dim;
    uint16_t *th = xmalloc(2 * tn), *yh = xmalloc(2 * yn);
    float *tf = xmalloc(4 * tn), *ref = xmalloc(4 * yn);
    int32_t *ids = xmalloc(4 * (size_t)n);
    rand_bf16(th, tf, tn, 1.f, 0.f);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(rng_u64() % (uint64_t)vocab);
    ids[0] = (int32_t)(vocab - 1);
    if (n > 2) ids[n - 1] = 0;
    int64_t shape[2] = {vocab, dim};
    omni_tensor t = omni_tensor_make(th, OMNI_BF16, 2, shape);
    op_embed(ref, &t, ids, n);
    if (n > 3) { /* out-of-range ids give zero rows (contract of omni_cuda_embed_bf16) */
        ids[1] = (int32_t)vocab, ids[2] = -1;
        memset(ref + dim, 0, 8 * (size_t)dim);
    }
    size_t tb = 2 * (size_t)tn, yb = 2 * (size_t)yn, ib = 4 * (size_t)n;
    uint16_t *dt = dev_buf(th, tb), *dy = dev_buf(NULL, yb);
    int32_t *di = dev_buf(ids, ib);
    TRY(omni_cuda_embed_bf16(dy, dt, vocab, dim, di, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(yh, dy, yb, g_stream));
    int64_t diff = 0;
    for (int64_t i = 0; i < yn; i++) diff += yh[i] != omni_f32_to_bf16(ref[i]);
    char what[64];
    snprintf(what, sizeof what, "embed vocab=%lld dim=%d n=%d", (long long)vocab, dim, n);
    CHECK(diff == 0, "%s: %lld elements differ", what, (long long)diff);
    g_ops[O_EMBED].cases++;
    dev_done(what, dt, tb), dev_done(what, dy, yb), dev_done(what, di, ib);
    free(th), free(yh), free(tf), free(ref), free(ids);
}

static void test_embed(void) {
    const int dims[] = {1, 19, 128, 1025}, ns[] = {1, 19, 33};
    for (int d = 0; d < 4; d++)
        for (int i = 0; i < 3; i++) embed_case(1001, dims[d], ns[i]);
}

/* ---- softmax ------------------------------------------------------------------------------------------- */

/* GPU: expf (2 ulp <= 4u), sum of n positive terms (2u·sqrt(n)), 1/s and the product (2u): 2u(sqrt(n) + 3)
 * relative; CPU: expf 1 ulp, double sum, 1/s, product: 4u. tol = 2u(sqrt(n) + 5)|ref| + ATOL_SUB.
 * Row 0 (when rows > 2) is fully masked (-inf, expect zeros); row 1 has every third entry masked. */
static void softmax_case(int rows, int n) {
    int64_t tn = (int64_t)rows * n;
    float *x = xmalloc(4 * tn), *ref = xmalloc(4 * tn), *got = xmalloc(4 * tn);
    double *tol = xmalloc(8 * tn);
    for (int64_t i = 0; i < tn; i++) x[i] = 4.f * rng_normal();
    if (rows > 2) {
        for (int j = 0; j < n; j++) x[j] = -INFINITY;
        for (int j = 0; j < n; j += 3) x[n + j] = -INFINITY;
    }
    memcpy(ref, x, 4 * tn);
    op_softmax(ref, rows, n);
    for (int64_t i = 0; i < tn; i++) tol[i] = 2 * U * (sqrt(n) + 5) * fabs(ref[i]) + ATOL_SUB;
    size_t bytes = 4 * (size_t)tn;
    float *dx = dev_buf(x, bytes);
    TRY(omni_cuda_softmax_f32(dx, rows, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dx, bytes, g_stream));
    char what[64];
    snprintf(what, sizeof what, "softmax rows=%d n=%d", rows, n);
    compare(O_SOFTMAX, what, got, ref, tol, tn);
    dev_done(what, dx, bytes);
    free(x), free(ref), free(got), free(tol);
}

static void test_softmax(void) {
    const int rows[] = {1, 19, 33}, ns[] = {1, 19, 1025, 32775};
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 4; i++) softmax_case(rows[r], ns[i]);
}

/* ---- argmax: exact, first on ties ---------------------------------------------------------------------- */

static void argmax_case(int rows, int n) {
    int64_t tn = (int64_t)rows * n;
    float *x = xmalloc(4 * tn);
    int32_t *got = xmalloc(4 * (size_t)rows);
    for (int64_t i = 0; i < tn; i++) x[i] = rng_normal();
    for (int r = 0; r < rows; r++) {
        float *xr = x + (int64_t)r * n;
        if (r % 3 == 1 && n > 1) { /* a tie for the maximum: the lower index wins */
            int a = (int)(rng_u64() % (uint64_t)n), b = (int)(rng_u64() % (uint64_t)n);
            xr[a] = xr[b] = 10.f;
        }
        if (r % 5 == 4)
            for (int j = 0; j < n; j++) xr[j] = -INFINITY; /* all -inf: index 0 */
    }
    size_t bytes = 4 * (size_t)tn, ib = 4 * (size_t)rows;
    float *dx = dev_buf(x, bytes);
    int32_t *di = dev_buf(NULL, ib);
    TRY(omni_cuda_argmax_f32(di, dx, rows, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, di, ib, g_stream));
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        int want = op_argmax(x + (int64_t)r * n, n);
        if (got[r] != want && bad++ < 3) fprintf(stderr, "  argmax row %d: got %d want %d\n", r, got[r], want);
    }
    char what[64];
    snprintf(what, sizeof what, "argmax rows=%d n=%d", rows, n);
    CHECK(bad == 0, "%s: %d rows differ", what, bad);
    g_ops[O_ARGMAX].cases++;
    dev_done(what, dx, bytes), dev_done(what, di, ib);
    free(x), free(got);
}

static void test_argmax(void) {
    const int rows[] = {1, 19, 33}, ns[] = {1, 19, 1025, 151936};
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 4; i++) argmax_case(rows[r], ns[i]);
}

/* ---- linear (cuBLAS) ----------------------------------------------------------------------------------- */

/* With A = Σ_k |x_k w_nk| + |b_n|: GPU fp32 accumulation on tensor cores (assume truncation, unit 2u) within
 * 2·2u(sqrt(K) + 1)·A; the CPU f32 reference within 2u(sqrt(K) + 1)·A; together E = 6u(sqrt(K) + 1)·A.
 * f32 output: tol = E; bf16 output adds one rounding: tol = B|ref| + (1 + B)·E. Both + ATOL_SUB. */
static void linear_case(int M, int N, int K, int bias, omni_dtype ydt) {
    int64_t xn = (int64_t)M * K, wn = (int64_t)N * K, yn = (int64_t)M * N;
    uint16_t *xh = xmalloc(2 * xn), *wh = xmalloc(2 * wn), *bh = xmalloc(2 * (size_t)N);
    float *xf = xmalloc(4 * xn), *wf = xmalloc(4 * wn), *bf = xmalloc(4 * (size_t)N), *ref = xmalloc(4 * yn),
          *mag = xmalloc(4 * yn), *got = xmalloc(4 * yn);
    double *tol = xmalloc(8 * yn);
    rand_bf16(xh, xf, xn, 1.f, 0.f);
    rand_bf16(wh, wf, wn, 0.05f, 0.f);
    rand_bf16(bh, bf, N, 0.5f, 0.f);
    int64_t ws[2] = {N, K}, bs = N;
    omni_tensor wt = omni_tensor_make(wh, OMNI_BF16, 2, ws), bt = omni_tensor_make(bh, OMNI_BF16, 1, &bs);
    op_linear(ref, xf, M, &wt, bias ? &bt : NULL);
    /* A from the same op on absolute values (f32; its own relative error is far below the bound's slack) */
    for (int64_t i = 0; i < xn; i++) xf[i] = fabsf(xf[i]);
    for (int64_t i = 0; i < wn; i++) wf[i] = fabsf(wf[i]);
    for (int64_t i = 0; i < N; i++) bf[i] = fabsf(bf[i]);
    omni_tensor wa = omni_tensor_make(wf, OMNI_F32, 2, ws), ba = omni_tensor_make(bf, OMNI_F32, 1, &bs);
    op_linear(mag, xf, M, &wa, bias ? &ba : NULL);
    for (int64_t i = 0; i < yn; i++) {
        double E = 6 * U * (sqrt(K) + 1) * mag[i];
        tol[i] = (ydt == OMNI_F32 ? E : B * fabs(ref[i]) + (1 + B) * E) + ATOL_SUB;
    }
    size_t es = omni_dtype_size(ydt), yb = es * (size_t)yn;
    uint16_t *dx = dev_buf(xh, 2 * (size_t)xn), *dw = dev_buf(wh, 2 * (size_t)wn), *db = dev_buf(bh, 2 * (size_t)N);
    void *dy = dev_buf(NULL, yb);
    TRY(omni_cuda_linear(g_ctx, dy, ydt, dx, dw, bias ? db : NULL, M, N, K));
    TRY(omni_cuda_sync(g_stream));
    if (ydt == OMNI_F32)
        TRY(omni_cuda_d2h(got, dy, yb, g_stream));
    else
        fetch_bf16(got, dy, yn);
    char what[96];
    snprintf(what, sizeof what, "linear M=%d N=%d K=%d bias=%d out=%s", M, N, K, bias, omni_dtype_name(ydt));
    compare(ydt == OMNI_F32 ? O_LINEAR32 : O_LINEAR, what, got, ref, tol, yn);
    dev_done(what, dx, 2 * (size_t)xn), dev_done(what, dw, 2 * (size_t)wn), dev_done(what, db, 2 * (size_t)N);
    dev_done(what, dy, yb);
    free(xh), free(wh), free(bh), free(xf), free(wf), free(bf), free(ref), free(mag), free(got), free(tol);
}

/* M <= 8 with K % 8 == 0 runs the GEMV kernel (every M, N tails of its 2-row warps, K tails of its 4-chunk
 * steps), everything else cuBLAS. With OMNI_CUDA_GEMV=4, M <= 4 with rows of at most 32 KB (K <= 16384) takes the
 * bulk-copy version (off by default): stages of 8 / 4 / 1 rows (K 2048, 4096, 12288), a partial last stage (N 151, 3,
 * 20001), one row of exactly 32 KB (K 16384), more stages per block than ring slots (the ring wraps: 4096 and
 * 20001 rows over the SMs), and K 16392 falls back to version 1. */
static void test_linear(void) {
    const int shapes[][3] = {{1, 19, 33},   {19, 127, 1025}, {33, 1025, 128},  {1, 1, 1},     {1, 4096, 4096},
                             {127, 259, 4096}, {5, 12288, 4096}, {2, 19, 12288}, {3, 1, 8},     {7, 33, 264},
                             {8, 1025, 4104}, {4, 3, 2056},    {6, 19, 48},     {9, 127, 1024}, {1, 151, 2048},
                             {1, 20001, 1032}, {2, 300, 16384}, {1, 37, 16392}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int v = 0; v < 4; v++)
            linear_case(shapes[s][0], shapes[s][1], shapes[s][2], v & 1, v & 2 ? OMNI_F32 : OMNI_BF16);
}

/* ---- fused decode linears ----------------------------------------------------------------------------- */

/* omni_cuda_add_rmsnorm_linear (kind 1) / omni_cuda_swiglu_linear (kind 2) against the two ops they replace, run
 * on the GPU on the same inputs: x_out equals add_rmsnorm's x bit for bit, y equals linear(h) bit for bit for SwiGLU
 * and for the norm when K >= 2048 (the same reduction shape). Smaller K sums the squares in another order: h may
 * move by one bf16 step (B|h|), so |dy| <= B|y| + (1 + B)(B + 6u(sqrt(K) + 1))·A with A = sum |h_k w_nk|, y the
 * two-op result, + ATOL_SUB. */
static void fused_case(int kind, int M, int N, int K) {
    const int64_t xn = (int64_t)M * K, gn = kind == 2 ? 2 * xn : xn, wn = (int64_t)N * K, yn = (int64_t)M * N;
    uint16_t *xh = xmalloc(2 * gn), *ah = xmalloc(2 * xn), *nh = xmalloc(2 * (size_t)K), *wh = xmalloc(2 * wn);
    uint16_t *x1 = xmalloc(2 * xn), *x2 = xmalloc(2 * xn), *hh = xmalloc(2 * xn);
    float *xf = xmalloc(4 * gn), *af = xmalloc(4 * xn), *nf = xmalloc(4 * (size_t)K), *wf = xmalloc(4 * wn);
    float *y1 = xmalloc(4 * yn), *y2 = xmalloc(4 * yn);
    double *tol = xmalloc(8 * yn);
    rand_bf16(xh, xf, gn, 2.f, 0.f);
    rand_bf16(ah, af, xn, 1.f, 0.f);
    rand_bf16(nh, nf, K, 0.2f, 1.f);
    rand_bf16(wh, wf, wn, 0.05f, 0.f);
    uint16_t *dx = dev_buf(xh, 2 * gn), *da = dev_buf(ah, 2 * xn), *dn = dev_buf(nh, 2 * (size_t)K);
    uint16_t *dw = dev_buf(wh, 2 * wn), *dx1 = dev_buf(xh, 2 * xn), *dh = dev_buf(NULL, 2 * xn);
    uint16_t *dxo = dev_buf(NULL, 2 * xn), *dy1 = dev_buf(NULL, 2 * yn), *dy2 = dev_buf(NULL, 2 * yn);
    if (kind == 1) {
        TRY(omni_cuda_add_rmsnorm_bf16(dh, dx1, da, dn, M, K, 1e-6f, g_stream));
        TRY(omni_cuda_add_rmsnorm_linear(dy2, dxo, dx, da, dn, 1e-6f, dw, M, N, K, g_stream));
    } else {
        TRY(omni_cuda_swiglu_bf16(dh, dx, M, K, g_stream));
        TRY(omni_cuda_swiglu_linear(dy2, dx, dw, M, N, K, g_stream));
    }
    TRY(omni_cuda_linear(g_ctx, dy1, OMNI_BF16, dh, dw, NULL, M, N, K));
    TRY(omni_cuda_sync(g_stream));
    fetch_bf16(y1, dy1, yn);
    fetch_bf16(y2, dy2, yn);
    TRY(omni_cuda_d2h(hh, dh, 2 * xn, g_stream));
    int64_t dxn = 0, dyn = 0;
    if (kind == 1) {
        TRY(omni_cuda_d2h(x1, dx1, 2 * xn, g_stream));
        TRY(omni_cuda_d2h(x2, dxo, 2 * xn, g_stream));
        for (int64_t i = 0; i < xn; i++) dxn += x1[i] != x2[i];
    }
    for (int64_t i = 0; i < yn; i++) dyn += y1[i] != y2[i];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double A = 0;
            for (int k = 0; k < K; k++)
                A += fabs((double)omni_bf16_to_f32(hh[(int64_t)m * K + k]) * omni_bf16_to_f32(wh[(int64_t)n * K + k]));
            tol[(int64_t)m * N + n] = B * fabs(y1[(int64_t)m * N + n]) + (1 + B) * (B + 6 * U * (sqrt(K) + 1)) * A +
                                      ATOL_SUB;
        }
    const int exact = kind == 2 || K >= 2048;
    char what[96];
    snprintf(what, sizeof what, "%s_linear M=%d N=%d K=%d", kind == 1 ? "add_rmsnorm" : "swiglu", M, N, K);
    CHECK(dxn == 0, "%s: %lld x_out values differ from add_rmsnorm's x", what, (long long)dxn);
    CHECK(!exact || dyn == 0, "%s: %lld of %lld outputs differ from the two ops", what, (long long)dyn, (long long)yn);
    compare(O_FUSED, what, y2, y1, tol, yn);
    dev_done(what, dx, 2 * gn), dev_done(what, da, 2 * xn), dev_done(what, dn, 2 * (size_t)K);
    dev_done(what, dw, 2 * wn), dev_done(what, dx1, 2 * xn), dev_done(what, dh, 2 * xn);
    dev_done(what, dxo, 2 * xn), dev_done(what, dy1, 2 * yn), dev_done(what, dy2, 2 * yn);
    free(xh), free(ah), free(nh), free(wh), free(x1), free(x2), free(hh);
    free(xf), free(af), free(nf), free(wf), free(y1), free(y2), free(tol);
}

static void test_fused(void) {
    const int shapes[][3] = {{1, 19, 8}, {2, 1025, 264}, {3, 33, 2056}, {4, 127, 4096}, {1, 4096, 4096}, {1, 7, 1032}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int kind = 1; kind <= 2; kind++) fused_case(kind, shapes[s][0], shapes[s][1], shapes[s][2]);
    fused_case(2, 1, 259, 12288); /* the 8B down projection's K */
    fused_case(2, 2, 33, 12288);
    uint16_t *d = dev_buf(NULL, 2 * 4096);
    CHECK(!omni_cuda_fused_linear_ok(5, 8) && !omni_cuda_fused_linear_ok(4, 8192) && omni_cuda_fused_linear_ok(4, 6144),
          "fused shapes: M <= 4 within 48 KiB");
    CHECK(omni_cuda_add_rmsnorm_linear(d, d, d, d, d, 1e-6f, d, 1, 8, 8, g_stream) == OMNI_ERR_USAGE,
          "x_out aliasing x_in refused");
    CHECK(omni_cuda_swiglu_linear(d, d, d, 5, 8, 8, g_stream) == OMNI_ERR_USAGE, "5 rows refused");
    CHECK(omni_cuda_swiglu_linear(d, d + 1, d, 1, 8, 8, g_stream) == OMNI_ERR_USAGE, "misaligned gu refused");
    dev_done("fused contracts", d, 2 * 4096);
}

/* ---- API contracts ------------------------------------------------------------------------------------- */

static void test_contracts(void) {
    CHECK(omni_cuda_rmsnorm_bf16(NULL, NULL, NULL, 0, 8, 1e-6f, g_stream) == OMNI_OK, "rows == 0 is a no-op");
    CHECK(omni_cuda_rmsnorm_bf16(NULL, NULL, NULL, -1, 8, 1e-6f, g_stream) == OMNI_ERR_USAGE, "rows < 0");
    CHECK(omni_cuda_rope_neox_bf16(NULL, 1, 1, 3, 3, NULL, NULL, g_stream) == OMNI_ERR_USAGE, "odd D");
    CHECK(omni_cuda_linear(g_ctx, NULL, OMNI_F16, NULL, NULL, NULL, 1, 1, 1) == OMNI_ERR_UNSUPPORTED, "f16 out");
    CHECK(strstr(omni_last_error(), "omni_cuda_linear") != NULL, "message names the function: %s", omni_last_error());
    CHECK(omni_cuda_ctx_reserve(g_ctx, -1) == OMNI_ERR_USAGE, "negative reserve");
    CHECK(omni_cuda_ctx_reserve(g_ctx, 1 << 20) == OMNI_OK, "reserve 4 MiB of scratch");
    void *p = NULL;
    CHECK(omni_cuda_malloc(&p, (size_t)1 << 50) == OMNI_ERR_NOMEM, "1 PiB allocation fails cleanly");
    CHECK(p == NULL, "failed allocation leaves NULL");
    omni_cuda_free(NULL);
    omni_cuda_ctx_free(NULL);
    CHECK(omni_cuda_sync(g_stream) == OMNI_OK, "no sticky error after the failures above");
}

int main(void) {
    if (!gpu_test_open()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    double t0 = omni_time_ms();
    test_contracts();
    test_rmsnorm();
    test_add_rmsnorm();
    test_layernorm();
    test_rope();
    test_elementwise();
    test_embed();
    test_softmax();
    test_argmax();
    test_linear();
    test_fused();
    stats_print(g_ops, O_COUNT);
    printf("(embed, argmax, add: exact comparisons) %.0f ms\n", omni_time_ms() - t0);
    omni_cuda_ctx_free(g_ctx);
    return check_exit();
}
