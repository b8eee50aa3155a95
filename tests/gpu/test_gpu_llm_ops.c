/* test_gpu_llm_ops.c - the decoder ops of kernels/ops_cuda.h against the CPU references, on seeded random inputs
 * of awkward sizes: q/k norm + multi-stream RoPE (tables made on the device), SwiGLU over fused gate/up rows,
 * embedding with substituted rows, scattered adds, f32 <-> bf16, the sparse MoE pieces (router, grouping, grouped
 * and per-entry linears, combine, and the whole block against an f32 evaluation with the same routing) and the
 * sampler (greedy exact; sampled tokens equal llm/sampler.c's for the same uniform draws; deterministic).
 * Outputs are poisoned with 0xFF (NaN) and followed by canaries (gpu_test_util.h). Exit 77 without a GPU. */
#include "gpu_test_util.h"
#include "kernels/ops.h"
#include "llm/moe.h"
#include "llm/sampler.h"

enum { O_QKR, O_SWIGLU, O_GROUPED, O_ENTRY, O_MOE, O_COUNT };
static op_stats g_ops[O_COUNT] = {{.name = "qk_norm_rope"}, {.name = "swiglu"}, {.name = "moe_grouped_lin"},
                                  {.name = "moe_entry_lin"}, {.name = "moe_block"}};
static int g_exact_cases;
static int g_short; /* --short: the emulated CI run leaves out the largest cases (they run on the GPU) */

/* ---- q/k norm + RoPE ----------------------------------------------------------------------------------- */

/* Reference: per head op_rmsnorm (f32), then op_rope_neox with op_rope_tables rounded to bf16 on the host.
 * GPU error sources, per output with S = |n_d·c| + |n_pair·s|: the norm's two roundings + f32 sums
 * e_n = 2B + B² + 3u(sqrt(D) + 8) relative on each n (as test_gpu_ops' rmsnorm bound); the device cosf/sinf
 * (2 ulp) may round to a bf16 one ulp (<= 2B relative) away from the host's: 2B·S; the two products and the sum
 * rounded to bf16: B·S + B·|out|; the CPU f32 rope 2u·S. tol = B|ref| + (1 + B)(e_n + 3B + 2u)·S + ATOL_SUB.
 * The v part of the fused row and the row padding must come back bit-identical. */
static void qk_case(int T, int Hq, int Hkv, int D, int interleaved, int max_pos) {
    const int half = D / 2, W = (Hq + 2 * Hkv) * D + 8; /* fused q|k|v row + 8 elements of padding */
    const int64_t n = (int64_t)T * W;
    uint16_t *xh = xmalloc(2 * n), *qwh = xmalloc(2 * D), *kwh = xmalloc(2 * D), *gh = xmalloc(2 * n);
    float *xf = xmalloc(4 * n), *qwf = xmalloc(4 * D), *kwf = xmalloc(4 * D), *ref = xmalloc(4 * n),
          *got = xmalloc(4 * n);
    float *cs = xmalloc(4 * (size_t)T * D), *sn = xmalloc(4 * (size_t)T * D), *invf = xmalloc(4 * half);
    int32_t *pos = xmalloc(4 * 3 * (size_t)T), *slot = xmalloc(4 * half);
    double *tol = xmalloc(8 * n);
    rand_bf16(xh, xf, n, 2.f, 0.f);
    rand_bf16(qwh, qwf, D, 0.2f, 1.f);
    rand_bf16(kwh, kwf, D, 0.2f, 1.f);
    for (int j = 0; j < half; j++) { /* Qwen3-VL's interleaved sections [24, 20, 20] scaled to D, or chunked */
        invf[j] = 1.0f / powf(5e6f, (float)(2 * j) / (float)D);
        int h = half * 20 / 64, w = half * 20 / 64;
        slot[j] = interleaved ? (j % 3 == 1 && j < 3 * h ? 1 : j % 3 == 2 && j < 3 * w ? 2 : 0)
                              : (j < half - h - w ? 0 : j < half - w ? 1 : 2);
    }
    for (int i = 0; i < 3 * T; i++) pos[i] = (int32_t)(rng_u64() % (uint64_t)(max_pos + 1));
    op_rope_tables(cs, sn, pos, T, T, D, invf, slot);
    for (int i = 0; i < T * D; i++) cs[i] = omni_bf16_to_f32(omni_f32_to_bf16(cs[i])), sn[i] = omni_bf16_to_f32(omni_f32_to_bf16(sn[i]));
    memcpy(ref, xf, 4 * n);
    omni_tensor qwt = bf16_vec(qwh, D), kwt = bf16_vec(kwh, D);
    for (int t = 0; t < T; t++) {
        op_rmsnorm(ref + (int64_t)t * W, ref + (int64_t)t * W, &qwt, Hq, D, 1e-6f);
        op_rmsnorm(ref + (int64_t)t * W + Hq * D, ref + (int64_t)t * W + Hq * D, &kwt, Hkv, D, 1e-6f);
    }
    float *nrm = xmalloc(4 * n); /* normalised values before RoPE, for S */
    memcpy(nrm, ref, 4 * n);
    op_rope_neox(ref, T, Hq, D, W, cs, sn);
    op_rope_neox(ref + Hq * D, T, Hkv, D, W, cs, sn);
    const double en = 2 * B + B * B + 3 * U * (sqrt(D) + 8);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < W; c++) {
            int64_t i = (int64_t)t * W + c;
            if (c >= (Hq + Hkv) * D) {
                tol[i] = 0; /* v and padding: untouched */
                continue;
            }
            int d = c % D, pair = d < half ? d + half : d - half;
            double S = fabs(nrm[i] * cs[t * D + d]) + fabs(nrm[i - d + pair] * sn[t * D + d]);
            tol[i] = B * fabs(ref[i]) + (1 + B) * (en + 3 * B + 2 * U) * S + ATOL_SUB;
        }
    size_t xb = 2 * (size_t)n;
    uint16_t *dx = dev_buf(xh, xb), *dqw = dev_buf(qwh, 2 * D), *dkw = dev_buf(kwh, 2 * D);
    int32_t *dpos = dev_buf(pos, 4 * 3 * (size_t)T), *dslot = dev_buf(slot, 4 * half);
    float *dinv = dev_buf(invf, 4 * half);
    TRY(omni_cuda_qk_norm_rope_bf16(dx, dx + Hq * D, T, W, Hq, Hkv, D, dqw, dkw, 1e-6f, dpos, T, dinv, dslot,
                                    g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(gh, dx, xb, g_stream));
    int64_t vdiff = 0;
    for (int64_t i = 0; i < n; i++) {
        got[i] = omni_bf16_to_f32(gh[i]);
        if (i % W >= (Hq + Hkv) * D) vdiff += gh[i] != xh[i];
    }
    char what[128];
    snprintf(what, sizeof what, "qk_norm_rope T=%d Hq=%d Hkv=%d D=%d %s max_pos=%d", T, Hq, Hkv, D,
             interleaved ? "interleaved" : "chunked", max_pos);
    CHECK(vdiff == 0, "%s: %lld v/padding elements changed", what, (long long)vdiff);
    compare(&g_ops[O_QKR], what, got, ref, tol, n);
    /* the split variant (fused row in, contiguous q / k / v out) must equal the in-place result bit for bit */
    const int64_t qd = (int64_t)Hq * D, kd = (int64_t)Hkv * D;
    uint16_t *dqkv = dev_buf(xh, xb), *dq = dev_buf(NULL, 2 * (size_t)T * qd), *dk = dev_buf(NULL, 2 * (size_t)T * kd);
    uint16_t *dv = dev_buf(NULL, 2 * (size_t)T * kd);
    TRY(omni_cuda_qkv_norm_rope_bf16(dqkv, W, dq, dk, dv, T, Hq, Hkv, D, dqw, dkw, 1e-6f, dpos, T, dinv, dslot,
                                     g_stream));
    uint16_t *hq = xmalloc(2 * (size_t)T * qd), *hk = xmalloc(2 * (size_t)T * kd), *hv = xmalloc(2 * (size_t)T * kd);
    TRY(omni_cuda_d2h(hq, dq, 2 * (size_t)T * qd, g_stream));
    TRY(omni_cuda_d2h(hk, dk, 2 * (size_t)T * kd, g_stream));
    TRY(omni_cuda_d2h(hv, dv, 2 * (size_t)T * kd, g_stream));
    int64_t sdiff = 0;
    for (int t = 0; t < T; t++) {
        for (int64_t c = 0; c < qd; c++) sdiff += hq[t * qd + c] != gh[(int64_t)t * W + c];
        for (int64_t c = 0; c < kd; c++) {
            sdiff += hk[t * kd + c] != gh[(int64_t)t * W + qd + c];
            sdiff += hv[t * kd + c] != xh[(int64_t)t * W + qd + kd + c];
        }
    }
    CHECK(sdiff == 0, "%s: split q/k/v output differs in %lld elements from the in-place op", what, (long long)sdiff);
    g_exact_cases++;
    dev_done(what, dqkv, xb), dev_done(what, dq, 2 * (size_t)T * qd), dev_done(what, dk, 2 * (size_t)T * kd);
    dev_done(what, dv, 2 * (size_t)T * kd);
    free(hq), free(hk), free(hv);
    dev_done(what, dx, xb), dev_done(what, dqw, 2 * D), dev_done(what, dkw, 2 * D);
    dev_done(what, dpos, 4 * 3 * (size_t)T), dev_done(what, dslot, 4 * half), dev_done(what, dinv, 4 * half);
    free(xh), free(qwh), free(kwh), free(gh), free(xf), free(qwf), free(kwf), free(ref), free(got), free(cs);
    free(sn), free(invf), free(pos), free(slot), free(tol), free(nrm);
}

static void test_qk_norm_rope(void) {
    const int Ds[] = {32, 64, 128, 256}, Ts[] = {1, 19, 33};
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < 3; t++) qk_case(Ts[t], 4, 2, Ds[d], (d + t) % 2, t == 2 ? 300000 : 4100);
    qk_case(3, 32, 8, 128, 1, 262143); /* Qwen3-VL-8B heads, positions far out (cosf's slow argument path) */
    qk_case(19, 1, 1, 128, 1, 50);
    qk_case(2, 16, 8, 128, 0, 7);
    CHECK(omni_cuda_qk_norm_rope_bf16(NULL, NULL, 1, 96, 1, 1, 48, NULL, NULL, 1e-6f, NULL, 1, NULL, NULL,
                                      g_stream) == OMNI_ERR_USAGE, "D 48 refused");
}

/* ---- SwiGLU: bit-identical to silu_mul on the two halves, within silu_mul's bound of the CPU ------------- */

static void swiglu_case(int rows, int I) {
    int64_t n = (int64_t)rows * I;
    uint16_t *gu = xmalloc(4 * n), *g = xmalloc(2 * n), *u = xmalloc(2 * n), *y1 = xmalloc(2 * n),
             *y2 = xmalloc(2 * n);
    float *guf = xmalloc(8 * n), *gf = xmalloc(4 * n), *uf = xmalloc(4 * n), *ref = xmalloc(4 * n),
          *got = xmalloc(4 * n);
    double *tol = xmalloc(8 * n);
    rand_bf16(gu, guf, 2 * n, 3.f, 0.f);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < I; i++) {
            int64_t o = (int64_t)r * I + i, s = (int64_t)r * 2 * I + i;
            g[o] = gu[s], u[o] = gu[s + I], gf[o] = guf[s], uf[o] = guf[s + I];
        }
    op_silu_mul(ref, gf, uf, n);
    for (int64_t i = 0; i < n; i++) tol[i] = (2 * B + 0x1p-15) * fabs(ref[i]) + ATOL_SUB; /* test_gpu_ops silu */
    uint16_t *dgu = dev_buf(gu, 4 * n), *dg = dev_buf(g, 2 * n), *du = dev_buf(u, 2 * n);
    uint16_t *dy1 = dev_buf(NULL, 2 * n), *dy2 = dev_buf(NULL, 2 * n);
    TRY(omni_cuda_swiglu_bf16(dy1, dgu, rows, I, g_stream));
    TRY(omni_cuda_silu_mul_bf16(dy2, dg, du, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(y1, dy1, 2 * n, g_stream));
    TRY(omni_cuda_d2h(y2, dy2, 2 * n, g_stream));
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++) diff += y1[i] != y2[i], got[i] = omni_bf16_to_f32(y1[i]);
    char what[64];
    snprintf(what, sizeof what, "swiglu rows=%d I=%d", rows, I);
    CHECK(diff == 0, "%s: %lld outputs differ from silu_mul on the halves", what, (long long)diff);
    compare(&g_ops[O_SWIGLU], what, got, ref, tol, n);
    dev_done(what, dgu, 4 * n), dev_done(what, dg, 2 * n), dev_done(what, du, 2 * n);
    dev_done(what, dy1, 2 * n), dev_done(what, dy2, 2 * n);
    free(gu), free(g), free(u), free(y1), free(y2), free(guf), free(gf), free(uf), free(ref), free(got), free(tol);
}

static void test_swiglu(void) {
    const int rows[] = {1, 19}, Is[] = {1, 19, 128, 12296};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 4; i++) swiglu_case(rows[r], Is[i]);
    swiglu_case(33, 768);
}

/* ---- embedding with substituted rows, scattered add, conversions: exact -------------------------------- */

static void embed_rows_case(int64_t vocab, int dim, int n, int with_rows) {
    const int nr = 7;
    int64_t tn = vocab * dim, yn = (int64_t)n * dim;
    uint16_t *th = xmalloc(2 * tn), *rh = xmalloc(2 * (size_t)nr * dim), *yh = xmalloc(2 * yn), *want = xmalloc(2 * yn);
    float *tmp = xmalloc(4 * (tn > nr * dim ? tn : nr * dim));
    int32_t *ids = xmalloc(4 * (size_t)n), *src = xmalloc(4 * (size_t)n);
    rand_bf16(th, tmp, tn, 1.f, 0.f);
    rand_bf16(rh, tmp, (int64_t)nr * dim, 1.f, 3.f);
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)(rng_u64() % (uint64_t)(vocab + 2)) - 1; /* includes -1 and vocab: zero rows */
        src[i] = with_rows && rng_u64() % 3 == 0 ? (int32_t)(rng_u64() % nr) : -1;
        for (int c = 0; c < dim; c++)
            want[(int64_t)i * dim + c] = src[i] >= 0 ? rh[(int64_t)src[i] * dim + c]
                                         : ids[i] >= 0 && ids[i] < vocab ? th[(int64_t)ids[i] * dim + c] : 0;
    }
    size_t tb = 2 * (size_t)tn, rb = 2 * (size_t)nr * dim, yb = 2 * (size_t)yn, ib = 4 * (size_t)n;
    uint16_t *dt = dev_buf(th, tb), *dr = dev_buf(rh, rb), *dy = dev_buf(NULL, yb);
    int32_t *di = dev_buf(ids, ib), *ds = dev_buf(src, ib);
    TRY(omni_cuda_embed_rows_bf16(dy, dt, vocab, dim, di, with_rows ? ds : NULL, dr, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(yh, dy, yb, g_stream));
    char what[64];
    snprintf(what, sizeof what, "embed_rows vocab=%lld dim=%d n=%d rows=%d", (long long)vocab, dim, n, with_rows);
    CHECK(memcmp(yh, want, yb) == 0, "%s: output differs", what);
    g_exact_cases++;
    dev_done(what, dt, tb), dev_done(what, dr, rb), dev_done(what, dy, yb), dev_done(what, di, ib), dev_done(what, ds, ib);
    free(th), free(rh), free(yh), free(want), free(tmp), free(ids), free(src);
}

static void add_rows_case(int rows, int dim, int n) {
    int64_t xn = (int64_t)rows * dim, sn = (int64_t)n * dim;
    uint16_t *xh = xmalloc(2 * xn), *sh = xmalloc(2 * sn), *want = xmalloc(2 * xn), *got = xmalloc(2 * xn);
    float *xf = xmalloc(4 * xn), *sf = xmalloc(4 * sn);
    int32_t *dst = xmalloc(4 * (size_t)n);
    rand_bf16(xh, xf, xn, 2.f, 0.f);
    rand_bf16(sh, sf, sn, 1.f, 0.f);
    memcpy(want, xh, 2 * xn);
    for (int i = 0; i < n; i++) { /* distinct rows: every other row, from the end */
        dst[i] = rows - 1 - 2 * i;
        for (int c = 0; c < dim; c++) {
            int64_t o = (int64_t)dst[i] * dim + c;
            want[o] = omni_f32_to_bf16(xf[o] + sf[(int64_t)i * dim + c]);
        }
    }
    uint16_t *dx = dev_buf(xh, 2 * xn), *ds = dev_buf(sh, 2 * sn);
    int32_t *dd = dev_buf(dst, 4 * (size_t)n);
    TRY(omni_cuda_add_rows_bf16(dx, dim, dd, ds, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dx, 2 * xn, g_stream));
    char what[64];
    snprintf(what, sizeof what, "add_rows rows=%d dim=%d n=%d", rows, dim, n);
    CHECK(memcmp(got, want, 2 * xn) == 0, "%s: output differs from bf16(x + src)", what);
    g_exact_cases++;
    dev_done(what, dx, 2 * xn), dev_done(what, ds, 2 * sn), dev_done(what, dd, 4 * (size_t)n);
    free(xh), free(sh), free(want), free(got), free(xf), free(sf), free(dst);
}

static void convert_case(int64_t n) {
    float *x = xmalloc(4 * n), *back = xmalloc(4 * n);
    uint16_t *got = xmalloc(2 * n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)rng_u64();
        if (i % 7 == 0) b = (b & 0xffff0000u) | 0x8000u; /* exact halfway cases: ties to even */
        memcpy(&x[i], &b, 4);                             /* any bits: NaN, Inf, subnormals included */
    }
    float *dx = dev_buf(x, 4 * n), *db = dev_buf(NULL, 4 * n);
    uint16_t *dy = dev_buf(NULL, 2 * n);
    TRY(omni_cuda_f32_to_bf16(dy, dx, n, g_stream));
    TRY(omni_cuda_bf16_to_f32(db, dy, n, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(got, dy, 2 * n, g_stream));
    TRY(omni_cuda_d2h(back, db, 4 * n, g_stream));
    int64_t bad = 0, badb = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t w = omni_f32_to_bf16(x[i]);
        int nan = isnan(x[i]);
        bad += nan ? !isnan(omni_bf16_to_f32(got[i])) : got[i] != w;
        float bv = omni_bf16_to_f32(got[i]);
        badb += memcmp(&bv, &back[i], 4) != 0;
    }
    char what[64];
    snprintf(what, sizeof what, "f32<->bf16 n=%lld", (long long)n);
    CHECK(bad == 0 && badb == 0, "%s: %lld roundings, %lld widenings differ", what, (long long)bad, (long long)badb);
    g_exact_cases++;
    dev_done(what, dx, 4 * n), dev_done(what, db, 4 * n), dev_done(what, dy, 2 * n);
    free(x), free(back), free(got);
}

static void test_gather_convert(void) {
    const int dims[] = {1, 19, 128, 1032};
    for (int d = 0; d < 4; d++) {
        embed_rows_case(1001, dims[d], 33, 1);
        embed_rows_case(1001, dims[d], 19, 0);
        add_rows_case(40, dims[d], 19);
    }
    convert_case(1), convert_case(100003);
}

/* ---- MoE ----------------------------------------------------------------------------------------------- */

/* Routing on the host from the same bf16 logits: op_softmax + op_topk + renormalisation (llm/moe.c's route()),
 * weights rounded to bf16. Expert choices must be equal; weights within one bf16 rounding of the exact value
 * (GPU expf 2 ulp vs the host's, f32 sums): |w_gpu - w_cpu| <= 2B|w_cpu|. */
static void host_route(const float *logits, int T, int E, int k, int norm, int32_t *sel, float *w) {
    float *p = xmalloc(4 * (size_t)E);
    for (int t = 0; t < T; t++) {
        memcpy(p, logits + (int64_t)t * E, 4 * (size_t)E);
        op_softmax(p, 1, E);
        op_topk(p, E, k, (int *)(sel + (int64_t)t * k), w + (int64_t)t * k);
        float sum = 0;
        for (int j = 0; j < k; j++) sum += w[(int64_t)t * k + j];
        for (int j = 0; j < k; j++) w[(int64_t)t * k + j] = norm ? w[(int64_t)t * k + j] / sum : w[(int64_t)t * k + j];
    }
    free(p);
}

/* Router weights [E, H] (scale 2/sqrt(H): logits ~ N(0, 4)) with near-tied pairs (0, E-3), (2, E-1): the pair's
 * rows are equal but for column 0, 0.125 vs 0.125 + 2^-10 (x[t, 0] = ±1), so the two logits differ by ~1e-3 in
 * f32 - far above the f32 accumulation error, far below a bf16 step at |logit| > 0.25: rounding the logits to
 * bf16 before the softmax (as transformers' bf16 Linear does) merges the pair and the lower index wins, against
 * the f32 reference (llm/moe.c), which picks the larger one; x[t, 0] alternates the winner. */
static void near_tied_router(uint16_t *wh, float *wf, uint16_t *xh, float *xf, int T, int E, int H) {
    rand_bf16(wh, wf, (int64_t)E * H, 2.f / sqrtf((float)H), 0.f);
    const int pairs[2][2] = {{0, E - 3}, {2, E - 1}};
    for (int p = 0; p < 2; p++) {
        int a = pairs[p][0], b = pairs[p][1];
        if (a >= b) continue;
        memcpy(wh + (int64_t)b * H, wh + (int64_t)a * H, 2 * (size_t)H);
        wh[(int64_t)a * H] = omni_f32_to_bf16(0.125f), wh[(int64_t)b * H] = omni_f32_to_bf16(0.125f + 1.f / 1024);
        for (int h = 0; h < H; h++)
            wf[(int64_t)a * H + h] = omni_bf16_to_f32(wh[(int64_t)a * H + h]),
            wf[(int64_t)b * H + h] = omni_bf16_to_f32(wh[(int64_t)b * H + h]);
    }
    for (int t = 0; t < T; t++) {
        xh[(int64_t)t * H] = omni_f32_to_bf16(t % 2 ? 1.f : -1.f);
        xf[(int64_t)t * H] = t % 2 ? 1.f : -1.f;
    }
}

/* One MoE block: router logits given (f32, with forced ties) or made from x (router = 1: omni_cuda_linear with f32
 * output over near-tied router rows, near_tied_router), then both GPU paths (per-entry GEMVs; grouping + grouped
 * linears) against the f32 block evaluated with the GPU's routing, whose expert choices must equal the host's
 * (llm/moe.c's route() on f32 logits); with router = 1 also against llm_moe_forward itself.
 * Bound per output element h, with o_j the expert outputs and A_j = Σ_i |Wd[h,i]|·|act_i|, G_j the same for the
 * gate/up products: the GPU rounds gate/up (B), silu (B), the product (B) [3B relative on act, through down:
 * 3B·A_j + propagated gate/up rounding ~B·(A_j·...)], down's fp32 sum + rounding (B|o_j| + 4u·sqrt(K)·A_j), the
 * weighting (B) and k bf16 additions (B each on the running sum): tol = Σ_j |w_j|·(6B·A_j + 2B|o_j|) +
 * k·B·Σ_j |w_j o_j| + ATOL_SUB. A wrong expert, weight or row moves outputs by O(|o|), far beyond it. */
enum { MOE_ENTRY, MOE_GROUPED, MOE_DECODE, MOE_PREFILL }; /* moe_case paths */

/* omni_cuda_moe_decode_res (the block with the residual adds around it) against the unfused sequence it stands for
 * (add_rmsnorm, omni_cuda_moe_decode, add_rmsnorm or add), bit for bit in x, h and the block's output, with and
 * without the second norm, twice each (the counters must come back to zero); weights as the caller's. */
static void moe_res_case(int T, int E, int k, int H, int I, int norm, const uint16_t *drw, const uint16_t *dgu,
                         const uint16_t *ddn, const char *what) {
    const size_t th = (size_t)T * H, nE = (size_t)T * k;
    uint16_t *xh = xmalloc(2 * th), *ah = xmalloc(2 * th), *wph = xmalloc(2 * (size_t)H), *wnh = xmalloc(2 * (size_t)H);
    float *tmp = xmalloc(4 * th);
    rand_bf16(xh, tmp, (int64_t)th, 2.f, 0.f);
    rand_bf16(ah, tmp, (int64_t)th, 1.f, 0.f);
    rand_bf16(wph, tmp, H, 0.3f, 1.f);
    rand_bf16(wnh, tmp, H, 0.3f, 1.f);
    uint16_t *da = dev_buf(ah, 2 * th), *dwp = dev_buf(wph, 2 * (size_t)H), *dwn = dev_buf(wnh, 2 * (size_t)H);
    uint16_t *dx[2], *dh[2], *dout[2], *got[2][3];
    float *dlg = dev_buf(NULL, 4 * (size_t)T * E), *dw = dev_buf(NULL, 4 * nE);
    int32_t *dsel = dev_buf(NULL, 4 * nE);
    uint16_t *dact = dev_buf(NULL, 2 * nE * I);
    unsigned *dticket = dev_buf(NULL, OMNI_CUDA_MOE_CTL_BYTES), ctl[OMNI_CUDA_MOE_CTL_BYTES / 4];
    for (int v = 0; v < 2; v++) {
        dx[v] = dev_buf(NULL, 2 * th), dh[v] = dev_buf(NULL, 2 * th), dout[v] = dev_buf(NULL, 2 * th);
        for (int b = 0; b < 3; b++) got[v][b] = xmalloc(2 * th);
    }
    TRY(omni_cuda_memset(dticket, 0, OMNI_CUDA_MOE_CTL_BYTES, g_stream));
    for (int next = 1; next >= 0; next--)
        for (int rep = 0; rep < 2; rep++) {
            for (int v = 0; v < 2; v++) { /* v 0: the unfused sequence, v 1: omni_cuda_moe_decode_res */
                const omni_cuda_moe_scratch sc = {dlg, dsel, dw, dact, dticket, dout[v]};
                TRY(omni_cuda_h2d(dx[v], xh, 2 * th, g_stream));
                TRY(omni_cuda_memset(dh[v], 0xff, 2 * th, g_stream)); /* NaN until written */
                TRY(omni_cuda_memset(dout[v], 0xff, 2 * th, g_stream));
                if (v == 0) {
                    TRY(omni_cuda_add_rmsnorm_bf16(dh[0], dx[0], da, dwp, T, H, 1e-6f, g_stream));
                    TRY(omni_cuda_moe_decode(dout[0], dh[0], H, drw, dgu, ddn, T, E, k, H, I, norm, &sc, g_stream));
                    if (next) TRY(omni_cuda_add_rmsnorm_bf16(dh[0], dx[0], dout[0], dwn, T, H, 1e-6f, g_stream));
                    else TRY(omni_cuda_add_bf16(dx[0], dx[0], dout[0], (int64_t)th, g_stream));
                } else {
                    TRY(omni_cuda_moe_decode_res(dx[1], dh[1], da, dwp, next ? dwn : NULL, 1e-6f, drw, dgu, ddn, T,
                                                 E, k, H, I, norm, &sc, g_stream));
                }
                TRY(omni_cuda_d2h(got[v][0], dx[v], 2 * th, g_stream));
                TRY(omni_cuda_d2h(got[v][1], dh[v], 2 * th, g_stream));
                TRY(omni_cuda_d2h(got[v][2], dout[v], 2 * th, g_stream));
            }
            TRY(omni_cuda_d2h(ctl, dticket, sizeof ctl, g_stream));
            static const char *names[3] = {"x", "h", "out"};
            for (int b = 0; b < 3; b++) {
                int64_t diff = 0, bad = 0;
                for (size_t i = 0; i < th; i++) {
                    diff += got[0][b][i] != got[1][b][i];
                    bad += !isfinite(omni_bf16_to_f32(got[1][b][i]));
                }
                CHECK(diff == 0 && bad == 0, "%s res (next norm %d, call %d): %s differs from the unfused sequence in "
                      "%lld of %zu values, %lld not finite", what, next, rep + 1, names[b], (long long)diff, th,
                      (long long)bad);
            }
            int nz = 0;
            for (int c = 0; c < OMNI_CUDA_MOE_CTL_BYTES / 4; c++) nz += ctl[c] != 0;
            CHECK(nz == 0, "%s res: %d counters left non-zero", what, nz);
        }
    dev_done(what, da, 2 * th), dev_done(what, dwp, 2 * (size_t)H), dev_done(what, dwn, 2 * (size_t)H);
    dev_done(what, dlg, 4 * (size_t)T * E), dev_done(what, dw, 4 * nE), dev_done(what, dsel, 4 * nE);
    dev_done(what, dact, 2 * nE * I), dev_done(what, dticket, OMNI_CUDA_MOE_CTL_BYTES);
    for (int v = 0; v < 2; v++) {
        dev_done(what, dx[v], 2 * th), dev_done(what, dh[v], 2 * th), dev_done(what, dout[v], 2 * th);
        for (int b = 0; b < 3; b++) free(got[v][b]);
    }
    free(xh), free(ah), free(wph), free(wnh), free(tmp);
}

static void moe_case(int T, int E, int k, int H, int I, int norm, int path, int router) {
    const int64_t nE = (int64_t)T * k;
    const int grouped = path == MOE_GROUPED, decode = path == MOE_DECODE, prefill = path == MOE_PREFILL;
    const int whole = decode || prefill; /* the block from x in one call */
    if (whole && !router) router = 1;
    size_t gub = 2 * (size_t)E * 2 * I * H, dnb = 2 * (size_t)E * H * I;
    uint16_t *guh = xmalloc(gub), *dnh = xmalloc(dnb), *xh = xmalloc(2 * (size_t)T * H), *rwh = xmalloc(2 * (size_t)E * H);
    float *guf = xmalloc(2 * gub), *dnf = xmalloc(2 * dnb), *xf = xmalloc(4 * (size_t)T * H), *lgf = xmalloc(4 * (size_t)T * E);
    float *rwf = xmalloc(4 * (size_t)E * H);
    rand_bf16(guh, guf, (int64_t)E * 2 * I * H, 1.f / sqrtf((float)H), 0.f);
    rand_bf16(dnh, dnf, (int64_t)E * H * I, 1.f / sqrtf((float)I), 0.f);
    rand_bf16(xh, xf, (int64_t)T * H, 1.f, 0.f);
    if (router) { /* host logits in f32 as llm/moe.c computes them */
        near_tied_router(rwh, rwf, xh, xf, T, E, H);
        if (router == 2 && E > 4 && H > 1) /* skewed: expert 1 first for every token (x[t, 1] = 1, W[1, 1] = 8) */
            for (int t = 0; t < T; t++) {
                xh[(int64_t)t * H + 1] = omni_f32_to_bf16(1.f), xf[(int64_t)t * H + 1] = 1.f;
                rwh[H + 1] = omni_f32_to_bf16(8.f), rwf[H + 1] = 8.f;
            }
        int64_t rs[2] = {E, H};
        omni_tensor rt = omni_tensor_make(rwf, OMNI_F32, 2, rs);
        op_linear(lgf, xf, T, &rt, NULL);
    } else {
        for (int64_t i = 0; i < (int64_t)T * E; i++) lgf[i] = 1.5f * (float)rng_normal();
        for (int t = 0; t < T; t += 3) lgf[(int64_t)t * E + E - 1] = lgf[(int64_t)t * E + 1]; /* exact ties */
    }
    /* device */
    uint16_t *dgu = dev_buf(guh, gub), *ddn = dev_buf(dnh, dnb), *dx = dev_buf(xh, 2 * (size_t)T * H);
    float *dlg = dev_buf(router ? NULL : lgf, 4 * (size_t)T * E);
    uint16_t *drw = dev_buf(rwh, 2 * (size_t)E * H), *dgo = dev_buf(NULL, 2 * (size_t)nE * 2 * I);
    uint16_t *dact = dev_buf(NULL, 2 * (size_t)nE * I), *dout = dev_buf(NULL, 2 * (size_t)nE * H);
    uint16_t *dy = dev_buf(NULL, 2 * (size_t)T * H);
    int32_t *dsel = dev_buf(NULL, 4 * (size_t)nE), *doff = dev_buf(NULL, 4 * (size_t)(E + 1));
    int32_t *dperm = dev_buf(NULL, 4 * (size_t)nE), *dslot = dev_buf(NULL, 4 * (size_t)nE);
    float *dw = dev_buf(NULL, 4 * (size_t)nE);
    unsigned *dticket = dev_buf(NULL, OMNI_CUDA_MOE_CTL_BYTES);
    uint16_t *yh = xmalloc(2 * (size_t)T * H), *yh2 = xmalloc(2 * (size_t)T * H), *yh3 = xmalloc(2 * (size_t)T * H);
    unsigned ctl[OMNI_CUDA_MOE_CTL_BYTES / 4];
    if (decode) { /* omni_cuda_moe_decode (three kernels), then the one kernel twice: the counters must come back
                   * to zero and every call give the same bits; the routing checked below is the last call's
                   * (poisoned before it) */
        const omni_cuda_moe_scratch sc = {dlg, dsel, dw, dact, dticket, NULL};
        TRY(omni_cuda_memset(dticket, 0, OMNI_CUDA_MOE_CTL_BYTES, g_stream));
        TRY(omni_cuda_moe_decode(dy, dx, H, drw, dgu, ddn, T, E, k, H, I, norm, &sc, g_stream));
        TRY(omni_cuda_d2h(yh3, dy, 2 * (size_t)T * H, g_stream));
        TRY(omni_cuda_memset(dy, 0xff, 2 * (size_t)T * H, g_stream));
        TRY(omni_cuda_moe_decode_fused(dy, dx, H, drw, dgu, ddn, T, E, k, H, I, norm, &sc, g_stream));
        TRY(omni_cuda_d2h(yh2, dy, 2 * (size_t)T * H, g_stream));
        TRY(omni_cuda_memset(dy, 0xff, 2 * (size_t)T * H, g_stream));
        TRY(omni_cuda_memset(dsel, 0xff, 4 * (size_t)nE, g_stream));
        TRY(omni_cuda_memset(dw, 0xff, 4 * (size_t)nE, g_stream));
        TRY(omni_cuda_moe_decode_fused(dy, dx, H, drw, dgu, ddn, T, E, k, H, I, norm, &sc, g_stream));
        TRY(omni_cuda_d2h(ctl, dticket, sizeof ctl, g_stream));
    } else if (prefill) { /* scratch starts as NaN, canary behind it; twice (reuse; rows may change path: no bits) */
        size_t sb = omni_cuda_moe_prefill_scratch(T, E, k, H, I);
        void *ws = dev_buf(NULL, sb);
        TRY(omni_cuda_moe_prefill(g_ctx, dy, dx, drw, dgu, ddn, T, E, k, H, I, norm, ws, sb));
        TRY(omni_cuda_d2h(yh2, dy, 2 * (size_t)T * H, g_stream));
        TRY(omni_cuda_moe_prefill(g_ctx, dy, dx, drw, dgu, ddn, T, E, k, H, I, norm, ws, sb));
        /* the routing for the checks below: the same kernels on the same logits */
        TRY(omni_cuda_linear(g_ctx, dlg, OMNI_F32, dx, drw, NULL, T, E, H));
        TRY(omni_cuda_moe_route(dsel, dw, dlg, T, E, k, norm, g_stream));
        TRY(omni_cuda_sync(g_stream));
        dev_done("moe prefill scratch", ws, sb);
    } else if (router) {
        TRY(omni_cuda_linear(g_ctx, dlg, OMNI_F32, dx, drw, NULL, T, E, H));
    }
    if (!whole) TRY(omni_cuda_moe_route(dsel, dw, dlg, T, E, k, norm, g_stream));
    if (whole) {
    } else if (grouped) {
        TRY(omni_cuda_moe_group(doff, dperm, dslot, dsel, T, E, k, g_stream));
        TRY(omni_cuda_moe_grouped_linear(dgo, dx, H, dperm, dgu, doff, E, (int)nE, 2 * I, H, g_stream));
        TRY(omni_cuda_swiglu_bf16(dact, dgo, (int)nE, I, g_stream));
        TRY(omni_cuda_moe_grouped_linear(dout, dact, I, NULL, ddn, doff, E, (int)nE, H, I, g_stream));
    } else {
        TRY(omni_cuda_moe_entry_linear(dgo, dx, H, k, dgu, dsel, (int)nE, 2 * I, H, g_stream));
        TRY(omni_cuda_swiglu_bf16(dact, dgo, (int)nE, I, g_stream));
        TRY(omni_cuda_moe_entry_linear(dout, dact, I, 1, ddn, dsel, (int)nE, H, I, g_stream));
    }
    if (!whole) TRY(omni_cuda_moe_combine(dy, dout, grouped ? dslot : NULL, dsel, dw, T, k, H, g_stream));
    TRY(omni_cuda_sync(g_stream));
    int32_t *sel = xmalloc(4 * nE), *hsel = xmalloc(4 * nE), *off = xmalloc(4 * (size_t)(E + 1));
    int32_t *perm = xmalloc(4 * nE), *slot = xmalloc(4 * nE);
    float *w = xmalloc(4 * nE), *hw = xmalloc(4 * nE), *y = xmalloc(4 * (size_t)T * H);
    uint16_t *outh = xmalloc(2 * (size_t)nE * H);
    TRY(omni_cuda_d2h(sel, dsel, 4 * nE, g_stream));
    TRY(omni_cuda_d2h(w, dw, 4 * nE, g_stream));
    if (!whole) TRY(omni_cuda_d2h(outh, dout, 2 * (size_t)nE * H, g_stream));
    TRY(omni_cuda_d2h(yh, dy, 2 * (size_t)T * H, g_stream));
    char what[128];
    snprintf(what, sizeof what, "moe T=%d E=%d k=%d H=%d I=%d norm=%d %s%s", T, E, k, H, I, norm,
             decode ? "decode" : prefill ? "prefill" : grouped ? "grouped" : "entry",
             router == 2 ? " skewed" : router && !whole ? " router" : "");
    if (decode) {
        moe_res_case(T, E, k, H, I, norm, drw, dgu, ddn, what);
        CHECK(memcmp(yh, yh2, 2 * (size_t)T * H) == 0, "%s: a second call gives other bits (the ticket?)", what);
        CHECK(memcmp(yh, yh3, 2 * (size_t)T * H) == 0, "%s: one kernel and three kernels give other bits", what);
        int nz = 0;
        for (int c = 0; c < OMNI_CUDA_MOE_CTL_BYTES / 4; c++) nz += ctl[c] != 0;
        CHECK(nz == 0, "%s: %d decode counters left non-zero", what, nz);
    }
    /* routing */
    host_route(lgf, T, E, k, norm, hsel, hw);
    int64_t esel = 0, ew = 0;
    for (int64_t i = 0; i < nE; i++) {
        esel += sel[i] != hsel[i];
        ew += !(fabsf(w[i] - hw[i]) <= 2 * B * fabsf(hw[i])) || omni_bf16_to_f32(omni_f32_to_bf16(w[i])) != w[i];
    }
    CHECK(esel == 0, "%s: %lld expert choices differ from the host routing", what, (long long)esel);
    CHECK(ew == 0, "%s: %lld routing weights off (or not bf16 values)", what, (long long)ew);
    /* grouping invariants */
    if (grouped) {
        TRY(omni_cuda_d2h(off, doff, 4 * (size_t)(E + 1), g_stream));
        TRY(omni_cuda_d2h(perm, dperm, 4 * nE, g_stream));
        TRY(omni_cuda_d2h(slot, dslot, 4 * nE, g_stream));
        int64_t bad = off[0] != 0 || off[E] != nE;
        int *cnt = xmalloc(sizeof(int) * E), *seen = xmalloc(sizeof(int) * nE);
        for (int64_t i = 0; i < nE; i++) cnt[sel[i]]++;
        for (int e = 0; e < E; e++) bad += off[e + 1] - off[e] != cnt[e];
        for (int64_t i = 0; i < nE; i++) {
            int r = slot[i], e = sel[i];
            bad += r < off[e] || r >= off[e + 1] || perm[r] != (int)(i / k) || seen[r]++;
        }
        CHECK(bad == 0, "%s: %lld grouping invariants broken", what, (long long)bad);
        free(cnt), free(seen);
    }
    /* per-entry expert outputs and the block vs f32 with the GPU's routing */
    float *g = xmalloc(4 * (size_t)2 * I), *a = xmalloc(4 * (size_t)I), *o = xmalloc(4 * (size_t)H),
          *oa = xmalloc(4 * (size_t)H), *aa = xmalloc(4 * (size_t)I), *absw = xmalloc(4 * (size_t)H * I);
    double *tol = xmalloc(8 * (size_t)T * H);
    float *got = xmalloc(4 * (size_t)T * H);
    memset(y, 0, 4 * (size_t)T * H);
    int64_t gus[2] = {2 * I, H}, dns[2] = {H, I};
    for (int64_t i = 0; i < nE; i++) {
        int t = (int)(i / k), e = sel[i];
        omni_tensor gw = omni_tensor_make(guf + (int64_t)e * 2 * I * H, OMNI_F32, 2, gus);
        omni_tensor dwt = omni_tensor_make(dnf + (int64_t)e * H * I, OMNI_F32, 2, dns);
        op_linear(g, xf + (int64_t)t * H, 1, &gw, NULL);
        op_silu_mul(a, g, g + I, I);
        op_linear(o, a, 1, &dwt, NULL);
        for (int c = 0; c < I; c++) aa[c] = fabsf(a[c]);
        for (int64_t c = 0; c < (int64_t)H * I; c++) absw[c] = fabsf(dnf[(int64_t)e * H * I + c]);
        omni_tensor awt = omni_tensor_make(absw, OMNI_F32, 2, dns);
        op_linear(oa, aa, 1, &awt, NULL);
        for (int h = 0; h < H; h++) {
            int64_t yi = (int64_t)t * H + h;
            double wj = fabs(w[i]);
            if (i % k == 0) tol[yi] = ATOL_SUB;
            y[yi] += w[i] * o[h];
            tol[yi] += wj * (10 * B * oa[h] + 2 * B * fabs(o[h])) + k * B * wj * fabs(o[h]);
        }
    }
    for (int64_t i = 0; i < (int64_t)T * H; i++) got[i] = omni_bf16_to_f32(yh[i]);
    compare(&g_ops[O_MOE], what, got, y, tol, (int64_t)T * H);
    if (router) { /* the CPU reference itself (f32 routing weights: within the bound's weighting terms) */
        omni_tensor *views = xmalloc(sizeof(omni_tensor) * 3 * (size_t)E);
        int64_t gs[2] = {I, H}, rs[2] = {E, H};
        for (int e = 0; e < E; e++) {
            views[e] = omni_tensor_make(guf + (int64_t)e * 2 * I * H, OMNI_F32, 2, gs);
            views[E + e] = omni_tensor_make(guf + ((int64_t)e * 2 + 1) * I * H, OMNI_F32, 2, gs);
            views[2 * E + e] = omni_tensor_make(dnf + (int64_t)e * H * I, OMNI_F32, 2, dns);
        }
        llm_moe m = {omni_tensor_make(rwf, OMNI_F32, 2, rs), views, views + E, views + 2 * E, E, k, I, H, norm,
                     NULL, NULL, 0};
        float *yref = xmalloc(4 * (size_t)T * H), *scr = xmalloc(sizeof(float) * llm_moe_scratch_floats(&m, T));
        llm_moe_forward(&m, yref, xf, T, scr);
        char w2[160];
        snprintf(w2, sizeof w2, "%s vs llm_moe_forward", what);
        compare(&g_ops[O_MOE], w2, got, yref, tol, (int64_t)T * H);
        free(views), free(yref), free(scr);
    }
    /* the combine alone: exact emulation of the bf16 accumulation in expert order from the GPU's expert outputs */
    int64_t cdiff = 0;
    for (int t = 0; t < T && !whole; t++) {
        int ord[32];
        for (int j = 0; j < k; j++) { /* ascending expert */
            int q = j;
            while (q > 0 && sel[(int64_t)t * k + ord[q - 1]] > sel[(int64_t)t * k + j]) ord[q] = ord[q - 1], q--;
            ord[q] = j;
        }
        for (int h = 0; h < H; h++) {
            float acc = 0;
            for (int j = 0; j < k; j++) {
                int64_t ent = (int64_t)t * k + ord[j], row = grouped ? slot[ent] : ent;
                float prod = omni_bf16_to_f32(omni_f32_to_bf16(omni_bf16_to_f32(outh[row * H + h]) * w[ent]));
                acc = omni_bf16_to_f32(omni_f32_to_bf16(acc + prod));
            }
            cdiff += omni_f32_to_bf16(acc) != yh[(int64_t)t * H + h];
        }
    }
    CHECK(cdiff == 0, "%s: combine differs from the bf16 expert-order sum in %lld elements", what, (long long)cdiff);
    g_exact_cases += !whole;
    dev_done(what, dticket, OMNI_CUDA_MOE_CTL_BYTES), dev_done(what, dgu, gub), dev_done(what, ddn, dnb);
    dev_done(what, dx, 2 * (size_t)T * H);
    dev_done(what, dlg, 4 * (size_t)T * E), dev_done(what, drw, 2 * (size_t)E * H), dev_done(what, dgo, 2 * (size_t)nE * 2 * I);
    dev_done(what, dact, 2 * (size_t)nE * I), dev_done(what, dout, 2 * (size_t)nE * H);
    dev_done(what, dy, 2 * (size_t)T * H), dev_done(what, dsel, 4 * (size_t)nE), dev_done(what, doff, 4 * (size_t)(E + 1));
    dev_done(what, dperm, 4 * (size_t)nE), dev_done(what, dslot, 4 * (size_t)nE), dev_done(what, dw, 4 * (size_t)nE);
    free(guh), free(dnh), free(xh), free(rwh), free(rwf), free(guf), free(dnf), free(xf), free(lgf), free(sel), free(hsel);
    free(off), free(perm), free(slot), free(w), free(hw), free(y), free(outh), free(yh), free(yh2), free(yh3), free(g);
    free(a), free(o);
    free(oa), free(aa), free(absw), free(tol), free(got);
}

/* The grouped linear alone against op_linear per expert (test_gpu_ops' linear bound with bf16 output):
 * tol = B|ref| + (1 + B)·6u(sqrt(K) + 1)·A + ATOL_SUB, A = Σ|x w|. Rows of each group in any order. */
static void grouped_case(int E, int rows, int N, int K, int gather) {
    const int nx = rows + 5;
    uint16_t *xh = xmalloc(2 * (size_t)nx * K), *wh = xmalloc(2 * (size_t)E * N * K), *yh = xmalloc(2 * (size_t)rows * N);
    float *xf = xmalloc(4 * (size_t)nx * K), *wf = xmalloc(4 * (size_t)E * N * K);
    int32_t *off = xmalloc(4 * (size_t)(E + 1)), *perm = xmalloc(4 * (size_t)rows);
    rand_bf16(xh, xf, (int64_t)nx * K, 1.f, 0.f);
    rand_bf16(wh, wf, (int64_t)E * N * K, 0.05f, 0.f);
    off[0] = 0; /* uneven groups: empty ones, one row, more than a tile */
    for (int e = 0; e < E; e++) {
        int left = rows - off[e], c = e == E - 1 ? left : (int)(rng_u64() % (uint64_t)(left / 2 + 2));
        off[e + 1] = off[e] + (c < left ? c : left);
    }
    for (int r = 0; r < rows; r++) perm[r] = (int32_t)(rng_u64() % (uint64_t)nx);
    uint16_t *dx = dev_buf(xh, 2 * (size_t)nx * K), *dwt = dev_buf(wh, 2 * (size_t)E * N * K),
             *dy = dev_buf(NULL, 2 * (size_t)rows * N);
    int32_t *doff = dev_buf(off, 4 * (size_t)(E + 1)), *dperm = dev_buf(perm, 4 * (size_t)rows);
    TRY(omni_cuda_moe_grouped_linear(dy, dx, K, gather ? dperm : NULL, dwt, doff, E, rows, N, K, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(yh, dy, 2 * (size_t)rows * N, g_stream));
    float *ref = xmalloc(4 * (size_t)N), *mag = xmalloc(4 * (size_t)N), *xa = xmalloc(4 * (size_t)K);
    float *wa = xmalloc(4 * (size_t)N * K), *got = xmalloc(4 * (size_t)rows * N), *refall = xmalloc(4 * (size_t)rows * N);
    double *tol = xmalloc(8 * (size_t)rows * N);
    int64_t ws[2] = {N, K};
    for (int e = 0; e < E; e++) {
        omni_tensor wt = omni_tensor_make(wf + (int64_t)e * N * K, OMNI_F32, 2, ws);
        for (int64_t c = 0; c < (int64_t)N * K; c++) wa[c] = fabsf(wf[(int64_t)e * N * K + c]);
        omni_tensor wat = omni_tensor_make(wa, OMNI_F32, 2, ws);
        for (int r = off[e]; r < off[e + 1]; r++) {
            const float *xr = xf + (int64_t)(gather ? perm[r] : r) * K;
            op_linear(ref, xr, 1, &wt, NULL);
            for (int c = 0; c < K; c++) xa[c] = fabsf(xr[c]);
            op_linear(mag, xa, 1, &wat, NULL);
            for (int n = 0; n < N; n++) {
                int64_t i = (int64_t)r * N + n;
                refall[i] = ref[n];
                tol[i] = B * fabs(ref[n]) + (1 + B) * 6 * U * (sqrt(K) + 1) * mag[n] + ATOL_SUB;
            }
        }
    }
    for (int64_t i = 0; i < (int64_t)rows * N; i++) got[i] = omni_bf16_to_f32(yh[i]);
    char what[96];
    snprintf(what, sizeof what, "moe_grouped_linear E=%d rows=%d N=%d K=%d gather=%d", E, rows, N, K, gather);
    compare(&g_ops[O_GROUPED], what, got, refall, tol, (int64_t)rows * N);
    dev_done(what, dx, 2 * (size_t)nx * K), dev_done(what, dwt, 2 * (size_t)E * N * K);
    dev_done(what, dy, 2 * (size_t)rows * N), dev_done(what, doff, 4 * (size_t)(E + 1)), dev_done(what, dperm, 4 * (size_t)rows);
    free(xh), free(wh), free(yh), free(xf), free(wf), free(off), free(perm), free(ref), free(mag), free(xa), free(wa);
    free(got), free(refall), free(tol);
}

/* Per-entry linear against op_linear with the same bound. */
static void entry_case(int n, int xdiv, int E, int N, int K) {
    const int nx = (n + xdiv - 1) / xdiv;
    uint16_t *xh = xmalloc(2 * (size_t)nx * K), *wh = xmalloc(2 * (size_t)E * N * K), *yh = xmalloc(2 * (size_t)n * N);
    float *xf = xmalloc(4 * (size_t)nx * K), *wf = xmalloc(4 * (size_t)E * N * K);
    int32_t *sel = xmalloc(4 * (size_t)n);
    rand_bf16(xh, xf, (int64_t)nx * K, 1.f, 0.f);
    rand_bf16(wh, wf, (int64_t)E * N * K, 0.05f, 0.f);
    for (int i = 0; i < n; i++) sel[i] = (int32_t)(rng_u64() % (uint64_t)E);
    uint16_t *dx = dev_buf(xh, 2 * (size_t)nx * K), *dwt = dev_buf(wh, 2 * (size_t)E * N * K),
             *dy = dev_buf(NULL, 2 * (size_t)n * N);
    int32_t *dsel = dev_buf(sel, 4 * (size_t)n);
    TRY(omni_cuda_moe_entry_linear(dy, dx, K, xdiv, dwt, dsel, n, N, K, g_stream));
    TRY(omni_cuda_sync(g_stream));
    TRY(omni_cuda_d2h(yh, dy, 2 * (size_t)n * N, g_stream));
    float *ref = xmalloc(4 * (size_t)n * N), *mag = xmalloc(4 * (size_t)N), *xa = xmalloc(4 * (size_t)K);
    float *wa = xmalloc(4 * (size_t)N * K), *got = xmalloc(4 * (size_t)n * N);
    double *tol = xmalloc(8 * (size_t)n * N);
    int64_t ws[2] = {N, K};
    for (int i = 0; i < n; i++) {
        const float *xr = xf + (int64_t)(i / xdiv) * K, *we = wf + (int64_t)sel[i] * N * K;
        omni_tensor wt = omni_tensor_make((void *)we, OMNI_F32, 2, ws);
        op_linear(ref + (int64_t)i * N, xr, 1, &wt, NULL);
        for (int64_t c = 0; c < (int64_t)N * K; c++) wa[c] = fabsf(we[c]);
        for (int c = 0; c < K; c++) xa[c] = fabsf(xr[c]);
        omni_tensor wat = omni_tensor_make(wa, OMNI_F32, 2, ws);
        op_linear(mag, xa, 1, &wat, NULL);
        for (int c = 0; c < N; c++) {
            int64_t j = (int64_t)i * N + c;
            tol[j] = B * fabs(ref[j]) + (1 + B) * 6 * U * (sqrt(K) + 1) * mag[c] + ATOL_SUB;
        }
    }
    for (int64_t i = 0; i < (int64_t)n * N; i++) got[i] = omni_bf16_to_f32(yh[i]);
    char what[96];
    snprintf(what, sizeof what, "moe_entry_linear n=%d xdiv=%d E=%d N=%d K=%d", n, xdiv, E, N, K);
    compare(&g_ops[O_ENTRY], what, got, ref, tol, (int64_t)n * N);
    dev_done(what, dx, 2 * (size_t)nx * K), dev_done(what, dwt, 2 * (size_t)E * N * K);
    dev_done(what, dy, 2 * (size_t)n * N), dev_done(what, dsel, 4 * (size_t)n);
    free(xh), free(wh), free(yh), free(xf), free(wf), free(sel), free(ref), free(mag), free(xa), free(wa), free(got);
    free(tol);
}

static void test_moe(void) {
    grouped_case(5, 200, 72, 48, 1);
    grouped_case(8, 19, 64, 32, 0);
    if (!g_short) grouped_case(128, 1500, 136, 264, 1);
    grouped_case(3, 1, 8, 8, 1);
    if (!g_short) entry_case(8, 8, 16, 1536, 2048); /* Omni decode shapes (16 of the 128 experts), one token */
    entry_case(16, 1, 16, 2048, 768); /* two tokens: down */
    entry_case(7, 3, 5, 19, 40);
    const int cfg[][5] = {/* T, E, k, H, I */ {1, 8, 2, 48, 32}, {19, 8, 4, 64, 32}, {33, 128, 8, 256, 96},
                          {130, 16, 3, 40, 24}, {2, 16, 8, 2048, 768}};
    for (int c = 0; c < (g_short ? 4 : 5); c++) {
        for (int g = 0; g < 2; g++)
            for (int router = 0; router < 2; router++)
                moe_case(cfg[c][0], cfg[c][1], cfg[c][2], cfg[c][3], cfg[c][4], (c + g) % 2 == 0 || c == 4, g, router);
        moe_case(cfg[c][0], cfg[c][1], cfg[c][2], cfg[c][3], cfg[c][4], c % 2, MOE_DECODE, 1);
        moe_case(cfg[c][0], cfg[c][1], cfg[c][2], cfg[c][3], cfg[c][4], c % 2 == 0, MOE_PREFILL, 1);
    }
    /* prefill with every token on expert 1: the rows past the capacity go through the grouped kernel */
    moe_case(130, 16, 3, 40, 24, 1, MOE_PREFILL, 2), moe_case(19, 8, 4, 64, 32, 0, MOE_PREFILL, 2);
    if (!g_short) moe_case(200, 32, 8, 2048, 768, 1, MOE_PREFILL, 2);
    /* decode at Omni's matrix sizes (k 8, H 2048, I 768; 32 experts) with 1 and 3 tokens; K = 40 (one partial pass) */
    if (!g_short) moe_case(1, 32, 8, 2048, 768, 1, MOE_DECODE, 1), moe_case(3, 32, 8, 2048, 768, 0, MOE_DECODE, 1);
    moe_case(4, 12, 5, 40, 264, 1, MOE_DECODE, 1);
    /* the one-kernel decode at its edges: gate/up rows in two passes (H / 8 = 257), down rows in two passes
     * (I / 8 = 129), 13 tokens (more than the block's warps route at once), 64 entries and 512 experts (its
     * limits); 520 experts and 76 entries take the three kernels */
    moe_case(1, 4, 2, 2056, 72, 1, MOE_DECODE, 1), moe_case(3, 4, 3, 64, 1032, 0, MOE_DECODE, 1);
    moe_case(13, 8, 4, 48, 32, 1, MOE_DECODE, 1), moe_case(8, 64, 8, 136, 72, 0, MOE_DECODE, 1);
    moe_case(2, 512, 3, 1032, 40, 1, MOE_DECODE, 1), moe_case(1, 520, 2, 64, 48, 1, MOE_DECODE, 1);
    CHECK(omni_cuda_moe_route(NULL, NULL, NULL, 1, 8, 9, 1, g_stream) == OMNI_ERR_USAGE, "k > E refused");
    CHECK(omni_cuda_moe_grouped_linear(NULL, NULL, 12, NULL, NULL, NULL, 8, 1, 8, 12, g_stream) == OMNI_ERR_USAGE,
          "K %% 8 refused");
}

/* ---- sampler ------------------------------------------------------------------------------------------- */

/* Logits: N(0, scale²) with runs of exact ties (including at the top), so that the tie order matters. */
static void sample_logits(float *l, int vocab, float scale) {
    for (int i = 0; i < vocab; i++) l[i] = scale * rng_normal();
    for (int i = 0; i + 9 < vocab; i += 37) l[i + 9] = l[i];
    if (vocab > 20) l[vocab - 1] = l[3] = l[11] = 4 * scale; /* a three-way tie for the maximum */
}

/* rows rows x steps draws; row r has its own pair of CPU samplers seeded 1000 + r: one picks the reference token
 * (llm_sampler_sample), the other draws the GPU's uniforms (llm_sampler_uniform, once per sampled token, as a
 * device runner does), so both see the same stream. Mismatches are allowed only at floating-point boundaries
 * (~1e-9 per draw): more than max(1, draws/1000) fails; greedy must match exactly. The same uniforms run again
 * must repeat every token (deterministic). */
static void sample_case(int vocab, float temp, int top_k, float top_p, int rows, int steps, float scale) {
    const int64_t ld = vocab + 3;
    float *l = xmalloc(4 * (size_t)rows * ld);
    for (int r = 0; r < rows; r++) sample_logits(l + r * ld, vocab, scale);
    if (rows > 1) memcpy(l + ld, l, 4 * (size_t)vocab); /* two rows with equal logits, different draws */
    omni_cuda_sample_params *p = xmalloc(sizeof *p * rows);
    llm_sampler **ref = xmalloc(sizeof *ref * rows), **gen = xmalloc(sizeof *gen * rows);
    double *u = xmalloc(sizeof(double) * (size_t)rows * steps);
    for (int r = 0; r < rows; r++) {
        p[r].temp = temp, p[r].top_k = top_k, p[r].top_p = top_p, p[r].reserved = 0;
        llm_sampler_params sp = {temp, top_k, top_p, 1000 + (uint64_t)r};
        TRY(llm_sampler_init(&sp, vocab, &ref[r]));
        TRY(llm_sampler_init(&sp, vocab, &gen[r]));
        for (int s = 0; s < steps; s++) u[(int64_t)s * rows + r] = temp > 0 ? llm_sampler_uniform(gen[r]) : 0.5;
    }
    float *dl = dev_buf(l, 4 * (size_t)rows * ld);
    omni_cuda_sample_params *dp = dev_buf(p, sizeof *p * rows);
    double *du = dev_buf(u, sizeof(double) * (size_t)rows * steps);
    int32_t *dout = dev_buf(NULL, 4 * (size_t)rows), *got = xmalloc(4 * (size_t)rows * steps),
            *again = xmalloc(4 * (size_t)rows * steps);
    for (int pass = 0; pass < 2; pass++)
        for (int s = 0; s < steps; s++) {
            TRY(omni_cuda_sample(dout, dl, ld, rows, vocab, dp, du + (int64_t)s * rows, g_stream));
            TRY(omni_cuda_d2h((pass ? again : got) + (int64_t)s * rows, dout, 4 * (size_t)rows, g_stream));
        }
    int64_t mism = 0, rep = 0, draws = (int64_t)rows * steps;
    for (int r = 0; r < rows; r++)
        for (int s = 0; s < steps; s++) {
            int want = llm_sampler_sample(ref[r], l + r * ld), g = got[(int64_t)s * rows + r];
            if (g != want && mism++ < 3)
                fprintf(stderr, "  sample vocab=%d temp=%g k=%d p=%g row %d step %d: gpu %d cpu %d (u %.17g)\n", vocab,
                        temp, top_k, top_p, r, s, g, want, u[(int64_t)s * rows + r]);
            rep += again[(int64_t)s * rows + r] != g;
        }
    char what[96];
    snprintf(what, sizeof what, "sample vocab=%d temp=%g top_k=%d top_p=%g", vocab, temp, top_k, top_p);
    int64_t allow = draws / 1000 > 1 ? draws / 1000 : 1;
    CHECK(mism <= (temp > 0 ? allow : 0), "%s: %lld of %lld tokens differ from llm_sampler", what, (long long)mism,
          (long long)draws);
    CHECK(rep == 0, "%s: %lld tokens differ between two runs with the same draws", what, (long long)rep);
    printf("%-52s %6lld draws, %lld differ from the CPU\n", what, (long long)draws, (long long)mism);
    dev_done(what, dl, 4 * (size_t)rows * ld), dev_done(what, dp, sizeof *p * rows);
    dev_done(what, du, sizeof(double) * (size_t)rows * steps), dev_done(what, dout, 4 * (size_t)rows);
    for (int r = 0; r < rows; r++) llm_sampler_free(ref[r]), llm_sampler_free(gen[r]);
    free(l), free(p), free(ref), free(gen), free(u), free(got), free(again);
}

static void test_sampler(void) {
    const int q = g_short ? 4 : 1; /* --short: a quarter of the draws */
    sample_case(1, 0.f, 0, 1.f, 3, 2, 1.f);          /* greedy, vocab 1 */
    sample_case(1001, 0.f, 20, 0.8f, 33, 2, 1.f);    /* greedy ignores k/p */
    sample_case(151936, 0.f, 0, 1.f, 8, 1, 1.f);
    sample_case(1, 0.7f, 20, 0.8f, 3, 4, 1.f);       /* sampled, vocab 1 */
    sample_case(1001, 0.7f, 20, 0.8f, 64 / q, 16, 2.f);  /* Qwen3-VL defaults */
    sample_case(1001, 1.0f, 0, 1.f, 64 / q, 16, 1.f);    /* full softmax (vocab <= 1024: shared-memory path) */
    sample_case(1001, 1.3f, 1, 1.f, 16, 4, 1.f);     /* top-1 */
    sample_case(3000, 0.6f, 1024, 0.95f, 32 / q, 8, 2.f); /* the largest shared-memory k */
    sample_case(3000, 0.9f, 1500, 0.9f, 32 / q, 8, 2.f); /* radix path with top-k and top-p */
    if (!g_short) sample_case(151936, 1.0f, 0, 1.f, 8, 4, 3.f); /* radix path, whole vocabulary */
    sample_case(151936, 0.7f, 0, 0.8f, 8 / q, 4 / q, 3.f);     /* radix path, top-p only */
    sample_case(151936, 0.7f, 20, 0.8f, 16 / q, 8 / q, 3.f);
    CHECK(omni_cuda_sample(NULL, NULL, 10, 1, 0, NULL, NULL, g_stream) == OMNI_ERR_USAGE, "vocab 0 refused");
}

/* Runs one group of cases and says how long it took (stderr). */
static void timed(const char *name, void (*fn)(void)) {
    double t = omni_time_ms();
    fn();
    fprintf(stderr, "[%s: %.0f ms]\n", name, omni_time_ms() - t);
}

int main(int argc, char **argv) {
    g_short = argc > 1 && strcmp(argv[1], "--short") == 0;
    if (!gpu_test_open()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    double t0 = omni_time_ms();
    timed("qk_norm_rope", test_qk_norm_rope);
    timed("swiglu", test_swiglu);
    timed("gather/convert", test_gather_convert);
    timed("moe", test_moe);
    timed("sampler", test_sampler);
    stats_print(g_ops, O_COUNT);
    printf("(%d exact cases: embed_rows, add_rows, conversions, moe combine) %.0f ms\n", g_exact_cases,
           omni_time_ms() - t0);
    omni_cuda_ctx_free(g_ctx);
    return check_exit();
}
