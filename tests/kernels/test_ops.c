/* test_ops.c - every op of kernels/ops.h and the conversions of kernels/tensor.h against independent fp64
 * references, on seeded random inputs of awkward sizes.
 *
 * Notation: u = 2^-24 is the f32 unit roundoff (FLT_EPSILON / 2). Every tolerance below is an error bound
 * derived from the f32 arithmetic the op has to do; the derivation is written next to it. Reductions over K
 * terms are bounded "eps * sqrt(K) style" (random-walk growth of rounding errors, with a constant margin),
 * which holds for any summation order (sequential, 8-lane, BLAS-blocked) on random data. The worst observed
 * error/tolerance ratio per op is printed at the end, so a bound that is much too loose shows up in the log.
 * Outputs are written into buffers with canary values behind them (and inside row paddings) that must survive. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "kernels/status.h"
#include "kernels/tensor.h"

#define U 0x1p-24 /* f32 unit roundoff */
#define CANARY 1234.5f
#define NCANARY 8

/* ---- random numbers (splitmix64, fixed seed) ------------------------------------------------------------ */

static uint64_t g_rng = 0x0123456789abcdefull;

static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; } /* [0, 1) */
static float rng_sym(double a) { return (float)((2 * rng_unit() - 1) * a); }  /* [-a, a) */
static void fill_sym(float *x, int64_t n, double a) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_sym(a);
}

/* ---- independent references for the 16-bit formats ----------------------------------------------------- */

/* f16 code -> value, from the IEEE definition: subnormal m * 2^-24, normal (1024 + m) * 2^(e-25). */
static double ref_f16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* bf16 code -> value: subnormal m * 2^-133, normal (128 + m) * 2^(e-134). */
static double ref_bf16(uint16_t h) {
    int e = (h >> 7) & 255, m = h & 127;
    double v = e == 255 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

/* Round |f| to a multiple of its ulp in the target format with rint() (round-half-even), then encode.
 * frac_bits: 10 (f16) or 7 (bf16); emin: -14 or -126; emax: 15 or 127; exp_bias: 15 or 127.
 * The encoding ((e + bias) << frac_bits) + r - 2^frac_bits carries a rounded-up mantissa into the exponent
 * (and into infinity above emax) by itself. NaN is not handled here. */
static uint16_t ref_round(float f, int frac_bits, int emin, int emax, int bias) {
    uint16_t sign = signbit(f) ? 0x8000 : 0, inf = (uint16_t)(((2 * bias + 1) << frac_bits));
    double x = fabs((double)f);
    if (isinf(x)) return sign | inf;
    if (x == 0) return sign;
    int E;
    frexp(x, &E);
    int e = E - 1; /* x in [2^e, 2^(e+1)) */
    if (e > emax) return sign | inf;
    int sub = e < emin;
    double r = rint(ldexp(x, -((sub ? emin : e) - frac_bits))); /* exact scaling, then RNE */
    uint32_t code = sub ? (uint32_t)r : (uint32_t)(((e + bias) << frac_bits) + (uint32_t)r - (1u << frac_bits));
    return (uint16_t)(sign | code);
}
static uint16_t ref_to_f16(float f) { return ref_round(f, 10, -14, 15, 15); }
static uint16_t ref_to_bf16(float f) { return ref_round(f, 7, -126, 127, 127); }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- comparison helpers -------------------------------------------------------------------------------- */

enum { W_LINEAR, W_RMS, W_LN, W_ACT, W_SOFTMAX, W_ROPE, W_ATTN, W_COUNT };
static const char *g_wname[W_COUNT] = {"linear", "rmsnorm", "layernorm", "activations", "softmax", "rope",
                                       "attention"};
static double g_worst[W_COUNT]; /* max err/tol seen per op family */

/* Number of i with |got[i] - ref[i]| > tol[i] (NaN counts as bad); reports the first one. */
static int64_t compare(const char *what, int w, const float *got, const double *ref, const double *tol, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        if (ref[i] == got[i]) err = 0; /* equal infinities */
        if (!(err <= tol[i])) {
            if (!bad)
                fprintf(stderr, "  %s: [%lld] got %.9g ref %.9g err %.3g tol %.3g\n", what, (long long)i, got[i],
                        ref[i], err, tol[i]);
            bad++;
        }
        double r = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0);
        if (r > g_worst[w]) g_worst[w] = r;
    }
    return bad;
}

static void put_canary(float *p, int n) {
    for (int i = 0; i < n; i++) p[i] = CANARY;
}
static int canary_ok(const float *p, int n) {
    for (int i = 0; i < n; i++)
        if (p[i] != CANARY) return 0;
    return 1;
}

/* Random weight tensor data of dtype dt (values in [-a, a)), plus its exact values as double. */
static void *make_weights(omni_dtype dt, int64_t n, double a, double *exact) {
    void *p = malloc((size_t)(n ? n : 1) * omni_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        float v = rng_sym(a);
        if (dt == OMNI_F32) {
            ((float *)p)[i] = v;
            exact[i] = v;
        } else if (dt == OMNI_BF16) {
            ((uint16_t *)p)[i] = omni_f32_to_bf16(v);
            exact[i] = ref_bf16(((uint16_t *)p)[i]);
        } else {
            ((uint16_t *)p)[i] = omni_f32_to_f16(v);
            exact[i] = ref_f16(((uint16_t *)p)[i]);
        }
    }
    return p;
}

/* ---- tensor.c: conversions and helpers ----------------------------------------------------------------- */

/* All 65536 f16 codes decode to the IEEE value; all non-NaN codes survive f16 -> f32 -> f16. */
static void test_f16_exhaustive(void) {
    int bad_dec = 0, bad_rt = 0, bad_nan = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = omni_f16_to_f32((uint16_t)h);
        double r = ref_f16((uint16_t)h);
        uint16_t back = omni_f32_to_f16(f);
        if (isnan(r)) {
            int back_nan = (back & 0x7c00) == 0x7c00 && (back & 0x3ff);
            if (!isnan(f) || !!signbit(f) != !!(h & 0x8000) || !back_nan || (back & 0x8000) != (h & 0x8000)) bad_nan++;
            continue;
        }
        if ((double)f != r || !!signbit(f) != !!(h & 0x8000)) {
            if (!bad_dec++) fprintf(stderr, "  f16 %04x -> %g, want %g\n", h, f, r);
        }
        if (back != h) {
            if (!bad_rt++) fprintf(stderr, "  f16 %04x -> %g -> %04x\n", h, f, back);
        }
    }
    CHECK(bad_dec == 0, "%d f16 codes decode wrongly", bad_dec);
    CHECK(bad_rt == 0, "%d f16 codes do not round-trip through f32", bad_rt);
    CHECK(bad_nan == 0, "%d f16 NaN codes lose NaN-ness or sign", bad_nan);
}

/* All 65536 bf16 codes decode to the IEEE value (NaN stays NaN with its sign). */
static void test_bf16_decode(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = omni_bf16_to_f32((uint16_t)h);
        double r = ref_bf16((uint16_t)h);
        int ok = isnan(r) ? isnan(f) != 0 : (double)f == r;
        if (!ok || !!signbit(f) != !!(h & 0x8000)) bad++;
    }
    CHECK(bad == 0, "%d bf16 codes decode wrongly", bad);
}

typedef uint16_t (*conv_fn)(float);

/* Check conv == ref on f and -f; returns the number of mismatches (reports the first few). */
static int conv_pair(conv_fn conv, conv_fn ref, const char *name, float f) {
    int bad = 0;
    for (int s = 0; s < 2; s++, f = -f) {
        uint16_t got = conv(f), want = ref(f);
        if (got != want) {
            static int reported = 0;
            if (reported++ < 5) fprintf(stderr, "  %s(%a) = %04x, want %04x\n", name, f, got, want);
            bad++;
        }
    }
    return bad;
}

/* f32 -> 16-bit rounding at every rounding boundary of the target format: each representable value, the exact
 * midpoint to the next one (a tie: must go to the even code) and the f32 neighbours of both; then random f32
 * bit patterns of every exponent. decode maps a code to its value (the code above the largest finite value
 * stands for 2^(emax+1), so the last midpoint is the overflow threshold). */
static int conv_boundaries(conv_fn conv, conv_fn ref, double (*decode)(uint16_t), uint16_t inf_code, double top,
                           const char *name) {
    int bad = 0;
    for (uint32_t k = 0; k < inf_code; k++) {
        double v = decode((uint16_t)k), next = k + 1 == inf_code ? top : decode((uint16_t)(k + 1));
        float mid = (float)((v + next) / 2); /* exact: one more significant bit than the format */
        float pts[6] = {(float)v, nextafterf((float)v, INFINITY), nextafterf((float)v, 0), mid,
                        nextafterf(mid, INFINITY), nextafterf(mid, 0)};
        for (int i = 0; i < 6; i++) bad += conv_pair(conv, ref, name, pts[i]);
    }
    for (int i = 0; i < (1 << 22); i++) {
        float f = bits_f32((uint32_t)rng_u64());
        if (!isnan(f)) bad += conv_pair(conv, ref, name, f);
    }
    return bad;
}

/* NaN inputs (quiet, signalling, payload only in the low bits) must give a NaN of the same sign. */
static int conv_nans(conv_fn conv, int is_bf16) {
    uint32_t pats[] = {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fffffffu, 0x7f800100u, 0x7f802000u};
    int bad = 0;
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
        for (uint32_t s = 0; s < 2; s++) {
            uint16_t c = conv(bits_f32(pats[i] | (s << 31)));
            double d = is_bf16 ? ref_bf16(c) : ref_f16(c);
            if (!isnan(d) || (c >> 15) != s) bad++;
        }
    return bad;
}

static void test_conversions(void) {
    test_f16_exhaustive();
    test_bf16_decode();
    int b = conv_boundaries(omni_f32_to_f16, ref_to_f16, ref_f16, 0x7c00, 0x1p16, "f32_to_f16");
    CHECK(b == 0, "%d f32->f16 roundings differ from round-to-nearest-even", b);
    b = conv_boundaries(omni_f32_to_bf16, ref_to_bf16, ref_bf16, 0x7f80, 0x1p128, "f32_to_bf16");
    CHECK(b == 0, "%d f32->bf16 roundings differ from round-to-nearest-even", b);
    CHECK(conv_nans(omni_f32_to_f16, 0) == 0, "f32->f16 turns a NaN into a non-NaN or flips its sign");
    CHECK(conv_nans(omni_f32_to_bf16, 1) == 0, "f32->bf16 turns a NaN into a non-NaN or flips its sign");
    /* Spot values with known encodings (independent of the reference rounding above). */
    CHECK(omni_f32_to_f16(65504.f) == 0x7bff, "max f16");
    CHECK(omni_f32_to_f16(65520.f) == 0x7c00, "65520 must round (tie, odd) to inf");
    CHECK(omni_f32_to_f16(0x1p-24f) == 0x0001, "smallest f16 subnormal");
    CHECK(omni_f32_to_f16(0x1p-25f) == 0x0000, "half the smallest subnormal: tie to even (0)");
    CHECK(omni_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 * 2^-24: tie to even (2)");
    CHECK(omni_f32_to_f16(-0.f) == 0x8000, "-0");
    CHECK(omni_f32_to_bf16(FLT_MAX) == 0x7f80, "FLT_MAX rounds to bf16 inf");
    CHECK(omni_f32_to_bf16(1.f + 0x1p-8f) == 0x3f80, "1 + 2^-8: tie to even (1.0)");
    CHECK(omni_f32_to_bf16(1.f + 0x3p-8f) == 0x3f82, "1 + 3*2^-8: tie to even (up)");
    CHECK(omni_f32_to_bf16(0x1p-149f) == 0x0000, "smallest f32 subnormal rounds to bf16 0");
}

/* omni_to_f32 / omni_get_f32 / dtype helpers / omni_tensor_make. */
static void test_tensor_helpers(void) {
    enum { N = 1031 };
    double exact[N];
    float out[N + NCANARY];
    omni_dtype dts[3] = {OMNI_F32, OMNI_BF16, OMNI_F16};
    for (int d = 0; d < 3; d++) {
        void *w = make_weights(dts[d], N, 100.0, exact);
        put_canary(out + N, NCANARY);
        omni_to_f32(out, w, dts[d], N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += (double)out[i] != exact[i] || (double)omni_get_f32(w, dts[d], i) != exact[i];
        CHECK(bad == 0, "omni_to_f32/omni_get_f32 %s: %d wrong", omni_dtype_name(dts[d]), bad);
        CHECK(canary_ok(out + N, NCANARY), "omni_to_f32 %s wrote past n", omni_dtype_name(dts[d]));
        free(w);
    }
    size_t sizes[OMNI_DTYPE_COUNT] = {4, 2, 2, 4, 8, 1};
    for (int d = 0; d < OMNI_DTYPE_COUNT; d++)
        CHECK(omni_dtype_size((omni_dtype)d) == sizes[d], "dtype %d size %zu", d, omni_dtype_size((omni_dtype)d));
    CHECK(!strcmp(omni_dtype_name(OMNI_BF16), "bf16"), "bf16 name '%s'", omni_dtype_name(OMNI_BF16));
    int64_t shape[4] = {2, 3, 5, 7};
    omni_tensor t = omni_tensor_make(out, OMNI_F16, 4, shape);
    CHECK(t.ndim == 4 && t.dtype == OMNI_F16 && t.data == out && t.device == OMNI_DEV_CPU, "tensor_make fields");
    CHECK(t.stride[0] == 105 && t.stride[1] == 35 && t.stride[2] == 7 && t.stride[3] == 1, "tensor_make strides");
    CHECK(omni_tensor_numel(&t) == 210, "numel %lld", (long long)omni_tensor_numel(&t));
    omni_tensor s = omni_tensor_make(out, OMNI_F32, 0, shape);
    CHECK(omni_tensor_numel(&s) == 1, "a 0-dim tensor has one element");
}

/* ---- op_linear / op_matmul_f32 ------------------------------------------------------------------------- */

/* y = x W^T + b against fp64 on the exact weight values. Bound per output: the K products and the bias are
 * summed with rounding errors that grow like sqrt(K) (the probabilistic bound of Higham & Mary 2019,
 * lambda sqrt(K) u sum |terms|, here with lambda = 2 and one extra u per term for the product):
 * |err| <= 2u (sqrt(K) + 1) (sum_k |x_k w_nk| + |b_n|). */
static void linear_case(int M, int N, int K, omni_dtype wdt, int bias) {
    double *we = malloc(sizeof(double) * N * K), *be = malloc(sizeof(double) * N);
    double *ref = malloc(sizeof(double) * ((size_t)M * N + 1)), *tol = malloc(sizeof(double) * ((size_t)M * N + 1));
    float *x = malloc(sizeof(float) * ((size_t)M * K + 1)), *y = malloc(sizeof(float) * ((size_t)M * N + NCANARY));
    void *w = make_weights(wdt, (int64_t)N * K, 1.0, we);
    omni_dtype bdt = bias == 2 ? OMNI_F32 : wdt; /* bias 1: same dtype as W; bias 2: f32 */
    void *b = make_weights(bdt, N, 1.0, be);
    fill_sym(x, (int64_t)M * K, 1.0);
    int64_t ws[2] = {N, K}, bs[1] = {N};
    omni_tensor wt = omni_tensor_make(w, wdt, 2, ws), bt = omni_tensor_make(b, bdt, 1, bs);
    put_canary(y, M * N + NCANARY);
    op_linear(y, x, M, &wt, bias ? &bt : NULL);
    for (int m = 0; m < M; m++) {
        const float *xm = x + (int64_t)m * K;
        for (int n = 0; n < N; n++) {
            const double *wr = we + (int64_t)n * K;
            double s = bias ? be[n] : 0, mag = bias ? fabs(be[n]) : 0;
            for (int k = 0; k < K; k++) s += xm[k] * wr[k], mag += fabs(xm[k] * wr[k]);
            ref[(int64_t)m * N + n] = s;
            tol[(int64_t)m * N + n] = 2 * U * (sqrt(K) + 1) * mag;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "linear M=%d N=%d K=%d w=%s bias=%d", M, N, K, omni_dtype_name(wdt), bias);
    CHECK(compare(what, W_LINEAR, y, ref, tol, (int64_t)M * N) == 0, "%s", what);
    CHECK(canary_ok(y + (int64_t)M * N, NCANARY), "%s: wrote past y", what);
    free(we), free(be), free(ref), free(tol), free(x), free(y), free(w), free(b);
}

static void test_linear(void) {
    /* M <= 4 takes the streaming GEMV path for 16-bit weights, M >= 5 the tiled sgemm path (column blocks of
     * 16..256 rows of W: N = 1025 and 100 leave a partial last block; M N K > 1e6 runs the blocks in parallel). */
    static const int Ms[] = {0, 1, 2, 3, 4, 5, 17, 300};
    static const int NK[][2] = {{1, 1}, {7, 1025}, {64, 7}, {100, 100}, {1025, 64}, {19, 33}};
    omni_dtype dts[3] = {OMNI_F32, OMNI_BF16, OMNI_F16};
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++)
            for (int d = 0; d < 3; d++)
                for (int bias = 0; bias < 3; bias++) {
                    if (Ms[mi] == 300 && bias != d) continue; /* time: one bias variant per dtype at M=300 */
                    linear_case(Ms[mi], NK[s][0], NK[s][1], dts[d], bias);
                }
}

/* op_matmul_f32 is op_linear without the tensor wrapper: same bound. */
static void test_matmul_f32(void) {
    static const int cases[][3] = {{1, 7, 1025}, {3, 64, 1}, {19, 33, 127}, {300, 100, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int M = cases[c][0], N = cases[c][1], K = cases[c][2];
        float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
        float *y = malloc(sizeof(float) * (M * N + NCANARY));
        double *ref = malloc(sizeof(double) * M * N), *tol = malloc(sizeof(double) * M * N);
        fill_sym(x, (int64_t)M * K, 2.0);
        fill_sym(w, (int64_t)N * K, 0.5);
        put_canary(y, M * N + NCANARY);
        op_matmul_f32(y, x, w, M, N, K);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double t = (double)x[m * K + k] * w[n * K + k];
                    s += t, mag += fabs(t);
                }
                ref[m * N + n] = s;
                tol[m * N + n] = 2 * U * (sqrt(K) + 1) * mag;
            }
        CHECK(compare("matmul_f32", W_LINEAR, y, ref, tol, (int64_t)M * N) == 0, "matmul_f32 M=%d N=%d K=%d", M, N, K);
        CHECK(canary_ok(y + M * N, NCANARY), "matmul_f32 M=%d N=%d K=%d wrote past y", M, N, K);
        free(x), free(w), free(y), free(ref), free(tol);
    }
}

/* ---- norms ---------------------------------------------------------------------------------------------- */

static const int g_rows[] = {0, 1, 19, 33, 127};
static const int g_dims[] = {1, 7, 64, 100, 1025};
#define NROWS (int)(sizeof g_rows / sizeof g_rows[0])
#define NDIMS (int)(sizeof g_dims / sizeof g_dims[0])

/* Row r gets a scale that varies over 6 decades, so eps matters on some rows; row 3 is all zeros. */
static void fill_rows(float *x, int rows, int dim, double offset) {
    for (int r = 0; r < rows; r++) {
        double scale = pow(10.0, (r % 7) - 3.0);
        for (int i = 0; i < dim; i++) x[(int64_t)r * dim + i] = r == 3 ? 0.f : (float)(offset * scale + rng_sym(scale));
    }
}

/* RMSNorm: y = x w / sqrt(mean(x^2) + eps). All steps are multiplicative, so the bound is relative:
 * mean(x^2) summed in f32 has relative error <= u sqrt(dim) (random walk, positive terms), the sqrt halves it;
 * + eps, sqrt, 1/, and the two products add <= 6u.  tol = u (sqrt(dim) + 8) |ref|. */
static void rmsnorm_case(int rows, int dim, omni_dtype wdt, int inplace) {
    int64_t n = (int64_t)rows * dim;
    float *x = malloc(sizeof(float) * (n + 1)), *y = malloc(sizeof(float) * (n + NCANARY));
    double *we = malloc(sizeof(double) * dim), *ref = malloc(sizeof(double) * (n + 1)), *tol = malloc(sizeof(double) * (n + 1));
    void *w = make_weights(wdt, dim, 2.0, we);
    int64_t ws[1] = {dim};
    omni_tensor wt = omni_tensor_make(w, wdt, 1, ws);
    const float eps = 1e-6f;
    fill_rows(x, rows, dim, 0.0);
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        double inv = 1 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) {
            ref[r * dim + i] = x[r * dim + i] * inv * we[i];
            tol[r * dim + i] = U * (sqrt(dim) + 8) * fabs(ref[r * dim + i]);
        }
    }
    put_canary(y, (int)(n + NCANARY));
    if (inplace) memcpy(y, x, sizeof(float) * n);
    op_rmsnorm(y, inplace ? y : x, &wt, rows, dim, eps);
    char what[80];
    snprintf(what, sizeof what, "rmsnorm rows=%d dim=%d w=%s%s", rows, dim, omni_dtype_name(wdt), inplace ? " in place" : "");
    CHECK(compare(what, W_RMS, y, ref, tol, n) == 0, "%s", what);
    CHECK(canary_ok(y + n, NCANARY), "%s: wrote past y", what);
    free(x), free(y), free(we), free(ref), free(tol), free(w);
}

/* LayerNorm: y = (x - mean) / sqrt(var + eps) w + b, inputs offset from 0 so that x - mean cancels.
 * x - mean costs u (|x| + |mean|) absolutely (mean rounded, then the subtraction); var relative error
 * u sqrt(dim) as for RMSNorm, halved by the sqrt; then the product with w and the + b round.
 * tol = u (sqrt(dim) + 8) (|x| + |mean|) |w| / sqrt(var + eps) + 2u (|ref| + |b|). */
static void layernorm_case(int rows, int dim, omni_dtype wdt, int with_b, int inplace) {
    int64_t n = (int64_t)rows * dim;
    float *x = malloc(sizeof(float) * (n + 1)), *y = malloc(sizeof(float) * (n + NCANARY));
    double *we = malloc(sizeof(double) * dim), *be = malloc(sizeof(double) * dim);
    double *ref = malloc(sizeof(double) * (n + 1)), *tol = malloc(sizeof(double) * (n + 1));
    void *w = make_weights(wdt, dim, 2.0, we), *b = make_weights(wdt, dim, 1.0, be);
    int64_t ws[1] = {dim};
    omni_tensor wt = omni_tensor_make(w, wdt, 1, ws), bt = omni_tensor_make(b, wdt, 1, ws);
    const float eps = 1e-5f;
    fill_rows(x, rows, dim, 3.0);
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        double s = 0, ss = 0;
        for (int i = 0; i < dim; i++) s += xr[i];
        double mean = s / dim;
        for (int i = 0; i < dim; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        double sd = sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) {
            double bi = with_b ? be[i] : 0, v = (xr[i] - mean) / sd * we[i] + bi;
            ref[r * dim + i] = v;
            tol[r * dim + i] = U * (sqrt(dim) + 8) * (fabs(xr[i]) + fabs(mean)) * fabs(we[i]) / sd + 2 * U * (fabs(v) + fabs(bi));
        }
    }
    put_canary(y, (int)(n + NCANARY));
    if (inplace) memcpy(y, x, sizeof(float) * n);
    op_layernorm(y, inplace ? y : x, &wt, with_b ? &bt : NULL, rows, dim, eps);
    char what[96];
    snprintf(what, sizeof what, "layernorm rows=%d dim=%d w=%s b=%d%s", rows, dim, omni_dtype_name(wdt), with_b,
             inplace ? " in place" : "");
    CHECK(compare(what, W_LN, y, ref, tol, n) == 0, "%s", what);
    CHECK(canary_ok(y + n, NCANARY), "%s: wrote past y", what);
    free(x), free(y), free(we), free(be), free(ref), free(tol), free(w), free(b);
}

static void test_norms(void) {
    omni_dtype dts[3] = {OMNI_F32, OMNI_BF16, OMNI_F16};
    for (int r = 0; r < NROWS; r++)
        for (int d = 0; d < NDIMS; d++)
            for (int t = 0; t < 3; t++) {
                int variant = (r + d + t) & 1; /* alternate in-place and bias-less variants over the grid */
                rmsnorm_case(g_rows[r], g_dims[d], dts[t], variant);
                layernorm_case(g_rows[r], g_dims[d], dts[t], !variant, variant);
                layernorm_case(g_rows[r], g_dims[d], dts[t], variant, !variant);
            }
}

/* ---- element-wise ops ----------------------------------------------------------------------------------- */

static const int64_t g_lens[] = {0, 1, 7, 64, 100, 1025, 70001}; /* 70001 > 65536 takes the OpenMP path */
#define NLENS (int)(sizeof g_lens / sizeof g_lens[0])

/* Inputs in [-12, 12] plus special values that stress the tails (exp overflow, erf cancellation). */
static void fill_act(float *x, int64_t n) {
    static const float sp[] = {0.f, -0.f, 1e-30f, -1e-30f, 30.f, -30.f, 100.f, -100.f, 9.f, -9.f, 0.5f, -0.5f};
    for (int64_t i = 0; i < n; i++) x[i] = i < 12 ? sp[i] : rng_sym(12.0);
}

typedef enum { ACT_SILU, ACT_GELU_ERF, ACT_GELU_TANH } act_kind;

/* fp64 reference and tolerance of one activation value.
 * silu x/(1+e^-x): expf <= 2u, +1, /, (and *up for silu_mul) each u -> tol 8u |ref| + FLT_MIN (below the
 *   smallest normal f32 a flush or an overflowing exp giving 0 is accepted).
 * gelu_erf 0.5x(1+erf(x/sqrt2)): erff's absolute error <= 2u plus 0.73u from the rounded argument, 1+erf rounds
 *   <= 2u, times 0.5|x|; the final product u|ref|  -> tol 4u (|x| + |ref|) (absolute: 1+erf cancels for x<0).
 * gelu_tanh: the cubic argument has relative error <= 5u, tanh' * a <= 0.45, tanhf <= 2u -> tanh abs error
 *   <= 4.3u, 1+tanh rounds <= 2u, times 0.5|x|, product u|ref| -> tol 4u (|x| + |ref|). */
static double act_ref(act_kind k, double x, double *tol) {
    double r;
    if (k == ACT_SILU) {
        r = x / (1 + exp(-x));
        *tol = 8 * U * fabs(r) + FLT_MIN;
    } else if (k == ACT_GELU_ERF) {
        r = 0.5 * x * erfc(-x / sqrt(2.0));
        *tol = 4 * U * (fabs(x) + fabs(r)) + FLT_MIN;
    } else {
        r = 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
        *tol = 4 * U * (fabs(x) + fabs(r)) + FLT_MIN;
    }
    return r;
}

static void act_case(act_kind k, int64_t n) {
    static const char *names[] = {"silu", "gelu_erf", "gelu_tanh"};
    float *x = malloc(sizeof(float) * (n + NCANARY));
    double *ref = malloc(sizeof(double) * (n + 1)), *tol = malloc(sizeof(double) * (n + 1));
    fill_act(x, n);
    for (int64_t i = 0; i < n; i++) ref[i] = act_ref(k, x[i], &tol[i]);
    put_canary(x + n, NCANARY);
    if (k == ACT_SILU) op_silu(x, n);
    else if (k == ACT_GELU_ERF) op_gelu_erf(x, n);
    else op_gelu_tanh(x, n);
    char what[64];
    snprintf(what, sizeof what, "%s n=%lld", names[k], (long long)n);
    CHECK(compare(what, W_ACT, x, ref, tol, n) == 0, "%s", what);
    CHECK(canary_ok(x + n, NCANARY), "%s: wrote past x", what);
    free(x), free(ref), free(tol);
}

/* silu_mul: y = silu(gate) * up; alias 0: separate y, 1: y == gate, 2: y == up. */
static void silu_mul_case(int64_t n, int alias) {
    float *g = malloc(sizeof(float) * (n + NCANARY)), *up = malloc(sizeof(float) * (n + NCANARY));
    float *y = malloc(sizeof(float) * (n + NCANARY));
    double *ref = malloc(sizeof(double) * (n + 1)), *tol = malloc(sizeof(double) * (n + 1));
    fill_act(g, n);
    fill_sym(up, n, 3.0);
    for (int64_t i = 0; i < n; i++) {
        double t;
        ref[i] = act_ref(ACT_SILU, g[i], &t) * up[i];
        tol[i] = 8 * U * fabs(ref[i]) + FLT_MIN;
    }
    float *dst = alias == 1 ? g : alias == 2 ? up : y;
    put_canary(dst + n, NCANARY);
    op_silu_mul(dst, g, up, n);
    char what[64];
    snprintf(what, sizeof what, "silu_mul n=%lld alias=%d", (long long)n, alias);
    CHECK(compare(what, W_ACT, dst, ref, tol, n) == 0, "%s", what);
    CHECK(canary_ok(dst + n, NCANARY), "%s: wrote past y", what);
    free(g), free(up), free(y), free(ref), free(tol);
}

/* op_add and op_scale do one IEEE operation per element: the result must be the correctly rounded fp64 value
 * (tol 0). */
static void add_scale_case(int64_t n) {
    float *y = malloc(sizeof(float) * (n + NCANARY)), *x = malloc(sizeof(float) * (n + 1));
    float *y0 = malloc(sizeof(float) * (n + 1));
    fill_sym(y, n, 5.0);
    fill_sym(x, n, 5.0);
    memcpy(y0, y, sizeof(float) * n);
    put_canary(y + n, NCANARY);
    op_add(y, x, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += y[i] != (float)((double)y0[i] + x[i]);
    CHECK(bad == 0 && canary_ok(y + n, NCANARY), "op_add n=%lld: %lld wrong", (long long)n, (long long)bad);
    const float s = 0.0883883476f; /* 1/sqrt(128) in f32 */
    memcpy(y0, y, sizeof(float) * n);
    op_scale(y, s, n);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += y[i] != (float)((double)y0[i] * s);
    CHECK(bad == 0 && canary_ok(y + n, NCANARY), "op_scale n=%lld: %lld wrong", (long long)n, (long long)bad);
    free(y), free(x), free(y0);
}

static void test_elementwise(void) {
    for (int i = 0; i < NLENS; i++) {
        for (int k = 0; k < 3; k++) act_case((act_kind)k, g_lens[i]);
        for (int a = 0; a < 3; a++) silu_mul_case(g_lens[i], a);
        add_scale_case(g_lens[i]);
    }
}

/* ---- softmax -------------------------------------------------------------------------------------------- */

/* p_i = exp(x_i - max) / sum. x_i - max rounds by u|x_i - max|, which exp turns into that relative error;
 * expf <= 2u; the sum (f32 or better) <= u sqrt(n); 1/sum and the product 2u.
 * tol = u (|x_i - max| + 4 + sqrt(n)) p_i; masked (-inf) entries must be exactly 0. A fully masked row is
 * all zeros (kernels/cpu/ops.c defines it so; no NaN). Rows 3, 7, .. sit near 300, where exp without the max
 * subtraction overflows. */
static void softmax_case(int rows, int n) {
    int64_t tot = (int64_t)rows * n;
    float *x = malloc(sizeof(float) * (tot + NCANARY));
    double *ref = malloc(sizeof(double) * (tot + 1)), *tol = malloc(sizeof(double) * (tot + 1));
    for (int r = 0; r < rows; r++) {
        float *xr = x + (int64_t)r * n;
        for (int i = 0; i < n; i++) {
            int masked = r == 2 || (r % 3 == 1 && rng_unit() < 0.3); /* row 2: fully masked */
            xr[i] = masked ? -INFINITY : (r % 4 == 3 ? 300.f : 0.f) + rng_sym(10.0); /* e^300 overflows f32 */
        }
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < n; i++) mx = xr[i] > mx ? xr[i] : mx;
        for (int i = 0; i < n; i++) s += isinf(xr[i]) ? 0 : exp(xr[i] - mx);
        for (int i = 0; i < n; i++) {
            double p = mx == -INFINITY || isinf(xr[i]) ? 0 : exp(xr[i] - mx) / s;
            ref[(int64_t)r * n + i] = p;
            tol[(int64_t)r * n + i] = isinf(xr[i]) ? 0 : U * (fabs(xr[i] - mx) + 4 + sqrt(n)) * p;
        }
    }
    put_canary(x + tot, NCANARY);
    op_softmax(x, rows, n);
    char what[48];
    snprintf(what, sizeof what, "softmax rows=%d n=%d", rows, n);
    CHECK(compare(what, W_SOFTMAX, x, ref, tol, tot) == 0, "%s", what);
    CHECK(canary_ok(x + tot, NCANARY), "%s: wrote past x", what);
    free(x), free(ref), free(tol);
}

static void test_softmax(void) {
    for (int r = 0; r < NROWS; r++)
        for (int d = 0; d < NDIMS; d++) softmax_case(g_rows[r], g_dims[d]);
    /* One finite value among -inf: exactly 1 there. */
    float v[5] = {-INFINITY, -INFINITY, 3.f, -INFINITY, -INFINITY};
    op_softmax(v, 1, 5);
    CHECK(v[2] == 1.f && v[0] == 0.f && v[4] == 0.f, "softmax of one finite value: %g %g %g", v[0], v[2], v[4]);
}

/* ---- RoPE ----------------------------------------------------------------------------------------------- */

/* x[d]' = x[d] c[d] - x[d+D/2] s[d]; x[d+D/2]' = x[d+D/2] c[d+D/2] + x[d] s[d+D/2] (the header's formula).
 * Random, non-duplicated tables make any wrong pairing or table index visible; real tables (pos * theta^(-2i/D),
 * duplicated) check the intended use. Two products and one sum: tol = 2u (|a c| + |b s|). Row padding
 * (ld > H*D) must not be touched. */
static void rope_case(int T, int H, int D, int pad, int real_tables) {
    int64_t ld = (int64_t)H * D + pad, n = T * ld;
    float *x = malloc(sizeof(float) * (n + NCANARY)), *c = malloc(sizeof(float) * (T * D + 1));
    float *s = malloc(sizeof(float) * (T * D + 1));
    double *ref = malloc(sizeof(double) * (n + 1)), *tol = malloc(sizeof(double) * (n + 1));
    int half = D / 2;
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            double ang = (t + 5) * pow(10000.0, -2.0 * (d % half) / D);
            c[t * D + d] = real_tables ? (float)cos(ang) : rng_sym(1.0);
            s[t * D + d] = real_tables ? (float)sin(ang) : rng_sym(1.0);
        }
    fill_sym(x, n, 4.0);
    for (int t = 0; t < T; t++) {
        for (int64_t i = (int64_t)H * D; i < ld; i++) x[t * ld + i] = CANARY, ref[t * ld + i] = CANARY, tol[t * ld + i] = 0;
        for (int h = 0; h < H; h++)
            for (int d = 0; d < half; d++) {
                int64_t o = t * ld + (int64_t)h * D;
                double a = x[o + d], b = x[o + d + half];
                double c0 = c[t * D + d], s0 = s[t * D + d], c1 = c[t * D + d + half], s1 = s[t * D + d + half];
                ref[o + d] = a * c0 - b * s0;
                ref[o + d + half] = b * c1 + a * s1;
                tol[o + d] = 2 * U * (fabs(a * c0) + fabs(b * s0));
                tol[o + d + half] = 2 * U * (fabs(b * c1) + fabs(a * s1));
            }
    }
    put_canary(x + n, NCANARY);
    op_rope_neox(x, T, H, D, ld, c, s);
    char what[80];
    snprintf(what, sizeof what, "rope T=%d H=%d D=%d pad=%d real=%d", T, H, D, pad, real_tables);
    CHECK(compare(what, W_ROPE, x, ref, tol, n) == 0, "%s", what);
    CHECK(canary_ok(x + n, NCANARY), "%s: wrote past x", what);
    free(x), free(c), free(s), free(ref), free(tol);
}

static void test_rope(void) {
    static const int TS[] = {0, 1, 19, 33}, HS[] = {1, 2, 5}, DS[] = {2, 6, 64, 128};
    for (int t = 0; t < 4; t++)
        for (int h = 0; h < 3; h++)
            for (int d = 0; d < 4; d++)
                for (int real = 0; real < 2; real++) rope_case(TS[t], HS[h], DS[d], (t + d) % 2 ? 3 : 0, real);
}

/* op_rope_tables: slot j of token t uses stream slot_stream[j] (angle (float)pos·inv_freq[j]), both halves equal.
 * op_rope2d_tables: slots [0, D/4) from row, [D/4, D/2) from col, duplicated. Values vs double cos/sin of the same
 * f32 angle: tol 2u (libm's cosf/sinf are within 1 ulp of a value <= 1). */
static void test_rope_tables(void) {
    enum { T = 19, D = 128, HALF = 64 };
    int32_t pos[3 * T], row[T], col[T];
    int slot[HALF];
    float inv[HALF], c[T * D], s[T * D];
    for (int i = 0; i < 3 * T; i++) pos[i] = (int32_t)(rng_u64() % 300000);
    for (int j = 0; j < HALF; j++) inv[j] = 1.0f / powf(5e6f, (float)(2 * j) / D), slot[j] = (int)(rng_u64() % 3);
    op_rope_tables(c, s, pos, T, T, D, inv, slot);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < HALF; j++) {
            float f = (float)pos[slot[j] * T + t] * inv[j];
            bad += fabs(c[t * D + j] - cos(f)) > 2 * U || fabs(s[t * D + j] - sin(f)) > 2 * U;
            bad += c[t * D + j] != c[t * D + j + HALF] || s[t * D + j] != s[t * D + j + HALF];
        }
    CHECK(bad == 0, "rope_tables: %d wrong entries", bad);
    for (int t = 0; t < T; t++) row[t] = (int32_t)(rng_u64() % 100), col[t] = (int32_t)(rng_u64() % 100);
    op_rope2d_tables(c, s, row, col, T, D, inv);
    bad = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < HALF; j++) {
            float f = (float)(j < D / 4 ? row[t] : col[t]) * inv[j % (D / 4)];
            bad += fabs(c[t * D + j] - cos(f)) > 2 * U || fabs(s[t * D + j] - sin(f)) > 2 * U;
            bad += c[t * D + j] != c[t * D + j + HALF] || s[t * D + j] != s[t * D + j + HALF];
        }
    CHECK(bad == 0, "rope2d_tables: %d wrong entries", bad);
}

/* ---- embedding, argmax, top-k --------------------------------------------------------------------------- */

/* Rows are copied and converted exactly (every 16-bit value is an f32). */
static void test_embed(void) {
    omni_dtype dts[3] = {OMNI_F32, OMNI_BF16, OMNI_F16};
    const int vocab = 37;
    static const int ns[] = {0, 1, 19};
    for (int di = 0; di < NDIMS; di++)
        for (int t = 0; t < 3; t++)
            for (int ni = 0; ni < 3; ni++) {
                int dim = g_dims[di], n = ns[ni];
                double *ex = malloc(sizeof(double) * vocab * dim);
                void *tab = make_weights(dts[t], (int64_t)vocab * dim, 50.0, ex);
                int64_t shape[2] = {vocab, dim};
                omni_tensor tt = omni_tensor_make(tab, dts[t], 2, shape);
                int32_t ids[19];
                for (int i = 0; i < n; i++) ids[i] = i == 0 ? vocab - 1 : i == 1 ? 0 : (int32_t)(rng_u64() % vocab);
                float *y = malloc(sizeof(float) * (n * dim + NCANARY));
                put_canary(y, n * dim + NCANARY);
                op_embed(y, &tt, ids, n);
                int bad = 0;
                for (int i = 0; i < n; i++)
                    for (int d = 0; d < dim; d++) bad += (double)y[i * dim + d] != ex[(int64_t)ids[i] * dim + d];
                CHECK(bad == 0 && canary_ok(y + n * dim, NCANARY), "embed dim=%d %s n=%d: %d wrong", dim,
                      omni_dtype_name(dts[t]), n, bad);
                free(ex), free(tab), free(y);
            }
}

static void test_argmax(void) {
    static const int ns[] = {1, 2, 7, 64, 1025};
    for (int c = 0; c < 5; c++) {
        int n = ns[c];
        float *x = malloc(sizeof(float) * n);
        for (int trial = 0; trial < 4; trial++) {
            for (int i = 0; i < n; i++) x[i] = trial == 3 ? 2.5f : (float)(rng_u64() % 13) - 6.f; /* many ties */
            if (trial == 1) x[0] = -INFINITY;
            if (trial == 2) x[n - 1] = 100.f;
            int want = 0; /* first index of the maximum, found by a different scan than op_argmax's */
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
            while (x[want] != mx) want++;
            int got = op_argmax(x, n);
            CHECK(got == want, "argmax n=%d trial=%d: %d, want %d", n, trial, got, want);
        }
        free(x);
    }
    float allinf[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(op_argmax(allinf, 3) == 0, "argmax of all -inf is the first index");
}

/* Total order used by the reference top-k: larger value first, then lower index. */
static const float *g_topk_x;
static int topk_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float xi = g_topk_x[i], xj = g_topk_x[j];
    if (xi != xj) return xi > xj ? -1 : 1;
    return (i > j) - (i < j);
}

static void topk_case(int n, int k, int ties) {
    float *x = malloc(sizeof(float) * n), *val = malloc(sizeof(float) * (k + NCANARY));
    int *idx = malloc(sizeof(int) * (k + NCANARY)), *order = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) x[i] = ties ? (float)(rng_u64() % 5) : rng_sym(1.0);
    if (n > 3) x[3] = -INFINITY;
    for (int i = 0; i < n; i++) order[i] = i;
    g_topk_x = x;
    qsort(order, n, sizeof(int), topk_cmp);
    put_canary(val + k, NCANARY);
    for (int i = 0; i < NCANARY; i++) idx[k + i] = -7;
    op_topk(x, n, k, idx, val);
    int bad = 0;
    for (int i = 0; i < k; i++) bad += idx[i] != order[i] || val[i] != x[order[i]];
    int canary = canary_ok(val + k, NCANARY);
    for (int i = 0; i < NCANARY; i++) canary &= idx[k + i] == -7;
    CHECK(bad == 0, "topk n=%d k=%d ties=%d: %d positions differ (first: idx %d val %g, want %d)", n, k, ties, bad,
          k ? idx[0] : -1, k ? val[0] : 0.f, k ? order[0] : -1);
    CHECK(canary, "topk n=%d k=%d wrote past k", n, k);
    free(x), free(val), free(idx), free(order);
}

static void test_topk(void) {
    static const int ns[] = {1, 7, 64, 1025};
    for (int c = 0; c < 4; c++) {
        int n = ns[c];
        int ks[4] = {1, 2 < n ? 2 : n, 5 < n ? 5 : n, n}; /* includes k == n */
        for (int j = 0; j < 4; j++)
            for (int ties = 0; ties < 2; ties++) topk_case(n, ks[j], ties);
    }
    topk_case(7, 0, 1); /* k == 0: must write nothing */
}

/* ---- attention ------------------------------------------------------------------------------------------ */

typedef struct { int Tq, Tk, Hq, Hkv, D, causal; } attn_cfg;

/* fp64 reference for one (query i, head h) and the per-element tolerance.
 * Scores: a D-term dot product, error <= 2u (sqrt(D)+1) sum_d |q_d k_jd| times |scale| (as for op_linear),
 * plus u|s_j| for the scaling;
 * dS = max over j. Softmax weights then have relative error <= 2 dS + u (R + 4 + sqrt(n)) (R = max |s_j - max|,
 * as for op_softmax), and the weighted sum of values adds u (sqrt(n) + 2) relative to sum_j p_j |v_jd|.
 * tol_d = (2 dS + u (R + 6 + 2 sqrt(n))) sum_j p_j |v_jd|. */
static void attn_ref_row(const attn_cfg *a, const float *qi, const float *k, int64_t ldk, const float *v,
                         int64_t ldv, int kh, int i, float scale, double *p, double *out, double *tol) {
    int n = a->causal < 0 ? a->Tk : i + a->causal + 1;
    if (n > a->Tk) n = a->Tk;
    double mx = -INFINITY, ds = 0, sum = 0, R = 0;
    for (int j = 0; j < n; j++) {
        const float *kj = k + j * ldk + (int64_t)kh * a->D;
        double s = 0, mag = 0;
        for (int d = 0; d < a->D; d++) s += (double)qi[d] * kj[d], mag += fabs((double)qi[d] * kj[d]);
        p[j] = s * scale;
        ds = fmax(ds, 2 * U * (sqrt(a->D) + 1) * mag * fabs(scale) + U * fabs(p[j]));
        mx = fmax(mx, p[j]);
    }
    for (int j = 0; j < n; j++) R = fmax(R, mx - p[j]), p[j] = exp(p[j] - mx), sum += p[j];
    double rel = 2 * ds + U * (R + 6 + 2 * sqrt(n));
    for (int d = 0; d < a->D; d++) {
        double o = 0, mag = 0;
        for (int j = 0; j < n; j++) {
            double vj = v[j * ldv + (int64_t)kh * a->D + d];
            o += p[j] / sum * vj, mag += p[j] / sum * fabs(vj);
        }
        out[d] = o;
        tol[d] = rel * mag;
    }
}

static void attn_case(attn_cfg a) {
    int pad = 3;
    int64_t ldq = (int64_t)a.Hq * a.D + pad, ldk = (int64_t)a.Hkv * a.D + 1, ldv = (int64_t)a.Hkv * a.D + 2;
    int64_t ldo = (int64_t)a.Hq * a.D + pad, no = a.Tq * ldo;
    float *q = malloc(sizeof(float) * (a.Tq * ldq + 1)), *k = malloc(sizeof(float) * (a.Tk * ldk + 1));
    float *v = malloc(sizeof(float) * (a.Tk * ldv + 1)), *o = malloc(sizeof(float) * (no + NCANARY));
    double *ref = malloc(sizeof(double) * (no + 1)), *tol = malloc(sizeof(double) * (no + 1));
    double *p = malloc(sizeof(double) * (a.Tk + 1));
    fill_sym(q, a.Tq * ldq, 2.0);
    fill_sym(k, a.Tk * ldk, 2.0);
    fill_sym(v, a.Tk * ldv, 1.0);
    float scale = 1.f / sqrtf((float)a.D);
    int group = a.Hq / a.Hkv;
    for (int i = 0; i < a.Tq; i++) {
        for (int64_t e = (int64_t)a.Hq * a.D; e < ldo; e++) ref[i * ldo + e] = CANARY, tol[i * ldo + e] = 0;
        for (int h = 0; h < a.Hq; h++)
            attn_ref_row(&a, q + i * ldq + (int64_t)h * a.D, k, ldk, v, ldv, h / group, i, scale, p,
                         ref + i * ldo + (int64_t)h * a.D, tol + i * ldo + (int64_t)h * a.D);
    }
    put_canary(o, (int)(no + NCANARY));
    op_attention(o, ldo, q, ldq, k, ldk, v, ldv, a.Tq, a.Tk, a.Hq, a.Hkv, a.D, scale, a.causal);
    char what[96];
    snprintf(what, sizeof what, "attention Tq=%d Tk=%d Hq=%d Hkv=%d D=%d causal=%d", a.Tq, a.Tk, a.Hq, a.Hkv, a.D,
             a.causal);
    CHECK(compare(what, W_ATTN, o, ref, tol, no) == 0, "%s", what);
    CHECK(canary_ok(o + no, NCANARY), "%s: wrote past out", what);
    free(q), free(k), free(v), free(o), free(ref), free(tol), free(p);
}

static void test_attention(void) {
    /* the last three take the blocked sgemm path (Tq >= 16, Tk >= 64), 150 spans two query blocks of 128 */
    static const int T[][2] = {{1, 1}, {1, 19}, {19, 19}, {5, 33}, {33, 33}, {7, 127}, {0, 5}, {17, 64}, {150, 150},
                               {20, 300}};
    static const int H[][2] = {{2, 2}, {4, 2}, {4, 1}, {8, 2}}; /* GQA ratios 1, 2, 4, 4 */
    static const int Ds[] = {7, 64, 128};
    for (int t = 0; t < 10; t++)
        for (int h = 0; h < 4; h++)
            for (int d = 0; d < 3; d++) {
                int Tq = T[t][0], Tk = T[t][1];
                int offs[3] = {-1, 0, Tk - Tq};
                for (int c = 0; c < 3; c++) {
                    if (c == 2 && offs[2] == 0) continue; /* same as offset 0 */
                    attn_case((attn_cfg){Tq, Tk, H[h][0], H[h][1], Ds[d], offs[c]});
                }
            }
}

static void test_threads(void) {
    int before = op_get_threads();
    CHECK(before >= 1, "op_get_threads() = %d", before);
    op_set_threads(1);
    CHECK(op_get_threads() == 1, "after op_set_threads(1): %d", op_get_threads());
    linear_case(17, 300, 256, OMNI_BF16, 1); /* the tiled path (M N K > 1e6: parallel region), one thread */
    op_set_threads(0);
    CHECK(op_get_threads() == 1, "op_set_threads(0) must leave the setting: %d", op_get_threads());
    op_set_threads(before);
}

/* Runs one test group and logs its time (stderr). */
static void run(const char *name, void (*fn)(void)) {
    double t0 = omni_time_ms();
    fn();
    fprintf(stderr, "%-18s %7.0f ms\n", name, omni_time_ms() - t0);
}

int main(void) {
    run("conversions", test_conversions);
    run("tensor helpers", test_tensor_helpers);
    run("linear", test_linear);
    run("matmul_f32", test_matmul_f32);
    run("norms", test_norms);
    run("elementwise", test_elementwise);
    run("softmax", test_softmax);
    run("rope", test_rope);
    run("rope tables", test_rope_tables);
    run("embed", test_embed);
    run("argmax", test_argmax);
    run("topk", test_topk);
    run("attention", test_attention);
    run("threads", test_threads);
    fprintf(stderr, "worst err/tol:");
    for (int w = 0; w < W_COUNT; w++) fprintf(stderr, " %s %.3g", g_wname[w], g_worst[w]);
    fprintf(stderr, "\n");
    return check_exit();
}
