/* ops.c - plain-C reference implementations of the dense ops in kernels/ops.h (f32 math, OpenMP, OpenBLAS).
 *
 * These are the semantics every accelerated version is tested against. Accumulations are in f32 except where a
 * comment says otherwise. */
#include "kernels/ops.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* The calling thread's OpenMP thread count (an ICV of that thread, not library-wide state); OpenBLAS stays
 * single-threaded (see ops_init). */
void op_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}

int op_get_threads(void) { return omp_get_max_threads(); }

/* ---- GEMM ---------------------------------------------------------------------------------------------- */
/* OpenBLAS runs single-threaded: its pthreads busy-wait and fight OpenMP's threads on small machines (measured
 * 100x slower prefill on 2 cores). We parallelise GEMMs ourselves by splitting the output columns. */
__attribute__((constructor)) static void ops_init(void) { openblas_set_num_threads(1); }

/* Columns per parallel task: enough tasks for every thread, at most 256 weight rows converted at a time. */
static int col_block(int N) {
    int nt = omp_get_max_threads(), b = (N + 2 * nt - 1) / (2 * nt);
    b = b < 16 ? 16 : b > 256 ? 256 : b;
    return b;
}

void op_matmul_f32(float *y, const float *x, const float *w, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    int B = col_block(N), tiles = (N + B - 1) / B;
#pragma omp parallel for schedule(dynamic, 1) if ((double)M * N * K > 1e6)
    for (int t = 0; t < tiles; t++) {
        int n0 = t * B, nt = N - n0 < B ? N - n0 : B;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nt, K, 1.f, x, K, w + (int64_t)n0 * K, K, 0.f,
                    y + n0, N);
    }
}

/* Dot product of an f32 row with a bf16/f16 row, f32 accumulation in 8 lanes (vectorisable). */
static float dot_half(const float *x, const uint16_t *w, int K, omni_dtype dt) {
    float acc[8] = {0};
    int k = 0;
    if (dt == OMNI_BF16) {
        for (; k + 8 <= K; k += 8)
            for (int l = 0; l < 8; l++) acc[l] += x[k + l] * omni_bf16_to_f32(w[k + l]);
        for (; k < K; k++) acc[0] += x[k] * omni_bf16_to_f32(w[k]);
    } else {
        for (; k < K; k++) acc[0] += x[k] * omni_f16_to_f32(w[k]);
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Few rows: stream the half-precision weight once, converting on the fly (memory bound). */
static void linear_half_gemv(float *y, const float *x, int M, const omni_tensor *w, int N, int K) {
    const uint16_t *W = w->data;
#pragma omp parallel for schedule(static) if ((double)N * K > 65536)
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) y[(int64_t)m * N + n] = dot_half(x + (int64_t)m * K, W + (int64_t)n * K, K, w->dtype);
}

/* Many rows: each task converts a block of weight rows to f32 and runs sgemm into its output columns. The tiles
 * come from ws ([threads][B*K], see op_linear_ws_floats) or, without one, are allocated per call. */
static void linear_half_tiled(float *y, const float *x, int M, const omni_tensor *w, int N, int K, float *ws,
                              size_t ws_floats) {
    const uint16_t *W = w->data;
    int B = col_block(N), tiles = (N + B - 1) / B, fail = 0;
    int own = !ws || ws_floats < (size_t)omp_get_max_threads() * B * K; /* too small: allocate as before */
#pragma omp parallel if ((double)M * N * K > 1e6)
    {
        float *tile = own ? malloc(sizeof(float) * (size_t)B * K) : ws + (size_t)omp_get_thread_num() * B * K;
        if (!tile) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < tiles; t++) {
            if (!tile) continue;
            int n0 = t * B, nt = N - n0 < B ? N - n0 : B;
            omni_to_f32(tile, W + (int64_t)n0 * K, w->dtype, (int64_t)nt * K);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nt, K, 1.f, x, K, tile, K, 0.f, y + n0, N);
        }
        if (own) free(tile);
    }
    if (fail) linear_half_gemv(y, x, M, w, N, K); /* out of memory for a tile: slow but correct */
}

size_t op_linear_ws_floats(int max_k, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return (size_t)n_threads * 256 * (size_t)(max_k > 0 ? max_k : 1); /* col_block() <= 256 rows per tile */
}

void op_linear_ws(float *y, const float *x, int M, const omni_tensor *w, const omni_tensor *b, float *ws,
                  size_t ws_floats) {
    int N = (int)w->shape[0];
    int K = (int)(omni_tensor_numel(w) / w->shape[0]);
    if (M <= 0) return;
    if (w->dtype == OMNI_F32)
        op_matmul_f32(y, x, w->data, M, N, K);
    else if (M <= 4)
        linear_half_gemv(y, x, M, w, N, K);
    else
        linear_half_tiled(y, x, M, w, N, K, ws, ws_floats);
    if (b) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) y[(int64_t)m * N + n] += omni_get_f32(b->data, b->dtype, n);
    }
}

void op_linear(float *y, const float *x, int M, const omni_tensor *w, const omni_tensor *b) {
    op_linear_ws(y, x, M, w, b, NULL, 0);
}

/* ---- norms and activations ----------------------------------------------------------------------------- */

void op_rmsnorm(float *y, const float *x, const omni_tensor *w, int rows, int dim, float eps) {
#pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        float *yr = y + (int64_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = 1.f / sqrtf((float)(ss / dim) + eps);
        for (int i = 0; i < dim; i++) yr[i] = xr[i] * inv * omni_get_f32(w->data, w->dtype, i);
    }
}

void op_layernorm(float *y, const float *x, const omni_tensor *w, const omni_tensor *b, int rows, int dim,
                  float eps) {
#pragma omp parallel for schedule(static) if (rows > 16)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        float *yr = y + (int64_t)r * dim;
        double s = 0, ss = 0;
        for (int i = 0; i < dim; i++) s += xr[i];
        double mean = s / dim;
        for (int i = 0; i < dim; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        float mf = (float)mean;
        for (int i = 0; i < dim; i++) {
            float v = (xr[i] - mf) * inv * omni_get_f32(w->data, w->dtype, i);
            yr[i] = b ? v + omni_get_f32(b->data, b->dtype, i) : v;
        }
    }
}

void op_silu_mul(float *y, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.f + expf(-g)) * up[i];
    }
}

void op_silu(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1.f + expf(-x[i]));
}

void op_gelu_erf(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678118654752f));
}

void op_gelu_tanh(float *x, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

void op_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void op_scale(float *y, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}

static void softmax_row(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) { /* fully masked row: define as zeros */
        for (int i = 0; i < n; i++) x[i] = 0.f;
        return;
    }
    double s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void op_softmax(float *x, int rows, int n) {
    for (int r = 0; r < rows; r++) softmax_row(x + (int64_t)r * n, n);
}

/* ---- RoPE, embedding, selection ------------------------------------------------------------------------ */

void op_rope_neox(float *x, int T, int H, int D, int64_t ld, const float *cos, const float *sin) {
    int half = D / 2;
    for (int t = 0; t < T; t++) {
        const float *c = cos + (int64_t)t * D, *s = sin + (int64_t)t * D;
        for (int h = 0; h < H; h++) {
            float *v = x + (int64_t)t * ld + (int64_t)h * D;
            for (int d = 0; d < half; d++) {
                float a = v[d], b = v[d + half];
                v[d] = a * c[d] - b * s[d];
                v[d + half] = b * c[d + half] + a * s[d + half];
            }
        }
    }
}

void op_rope_tables(float *cos, float *sin, const int32_t *pos, int64_t pos_stride, int T, int D,
                    const float *inv_freq, const int *slot_stream) {
    int half = D / 2;
    for (int t = 0; t < T; t++) {
        float *c = cos + (int64_t)t * D, *s = sin + (int64_t)t * D;
        for (int j = 0; j < half; j++) {
            float f = (float)pos[slot_stream[j] * pos_stride + t] * inv_freq[j];
            c[j] = c[j + half] = cosf(f);
            s[j] = s[j + half] = sinf(f);
        }
    }
}

void op_rope2d_tables(float *cos, float *sin, const int32_t *row, const int32_t *col, int T, int D,
                      const float *inv_freq) {
    int nf = D / 4, half = D / 2;
    for (int t = 0; t < T; t++) {
        float *c = cos + (int64_t)t * D, *s = sin + (int64_t)t * D;
        for (int k = 0; k < nf; k++) {
            float ar = (float)row[t] * inv_freq[k], ac = (float)col[t] * inv_freq[k];
            c[k] = c[k + half] = cosf(ar), s[k] = s[k + half] = sinf(ar);
            c[nf + k] = c[nf + k + half] = cosf(ac), s[nf + k] = s[nf + k + half] = sinf(ac);
        }
    }
}

/* One axis of the align_corners=True bilinear taps: source coordinate index·(side-1)/(size-1) in float. */
static void axis_taps(int index, int size, int side, int tap[2], float wt[2]) {
    float src = (float)index * (float)(side - 1) / (float)(size - 1 > 1 ? size - 1 : 1);
    float fl = floorf(src), frac = src - fl;
    for (int o = 0; o < 2; o++) {
        int tp = (int)fl + o;
        tap[o] = tp < 0 ? 0 : tp > side - 1 ? side - 1 : tp;
        float w = 1.0f - fabsf(frac - (float)o);
        wt[o] = w > 0.0f ? w : 0.0f;
    }
}

void op_pos_embed_bilinear(float *x, const float *table, int side, const int32_t *row, const int32_t *col, int N,
                           int D, int gh, int gw) {
#pragma omp parallel for schedule(static) if ((int64_t)N * D > 65536)
    for (int n = 0; n < N; n++) {
        int th[2], tw[2];
        float wh[2], ww[2];
        axis_taps(row[n], gh, side, th, wh);
        axis_taps(col[n], gw, side, tw, ww);
        const float *e[4];
        float w[4];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                e[2 * a + b] = table + (size_t)(th[a] * side + tw[b]) * D, w[2 * a + b] = wh[a] * ww[b];
        float *xr = x + (size_t)n * D;
        for (int d = 0; d < D; d++) {
            float p = e[0][d] * w[0];
            p += e[1][d] * w[1];
            p += e[2][d] * w[2];
            p += e[3][d] * w[3];
            xr[d] += p;
        }
    }
}

void op_im2col_3x3s2(float *col, const float *x, int nb, int H, int W, int C) {
    int Ho = (H - 1) / 2 + 1, Wo = (W - 1) / 2 + 1;
#pragma omp parallel for schedule(static) if ((int64_t)nb * Ho * Wo * C > (1 << 16))
    for (int bh = 0; bh < nb * Ho; bh++) {
        int b = bh / Ho, ho = bh % Ho;
        const float *xb = x + (size_t)b * H * W * C;
        for (int wo = 0; wo < Wo; wo++) {
            float *cr = col + ((size_t)bh * Wo + wo) * C * 9;
            for (int kh = 0; kh < 3; kh++)
                for (int kw = 0; kw < 3; kw++) {
                    int hi = 2 * ho - 1 + kh, wi = 2 * wo - 1 + kw, j = kh * 3 + kw;
                    const float *src = (hi >= 0 && hi < H && wi >= 0 && wi < W) ? xb + ((size_t)hi * W + wi) * C : NULL;
                    for (int c = 0; c < C; c++) cr[c * 9 + j] = src ? src[c] : 0.0f;
                }
        }
    }
}

void op_embed(float *y, const omni_tensor *table, const int32_t *ids, int n) {
    int64_t dim = table->shape[1];
    size_t es = omni_dtype_size(table->dtype);
    for (int i = 0; i < n; i++)
        omni_to_f32(y + (int64_t)i * dim, (const char *)table->data + (size_t)ids[i] * dim * es, table->dtype, dim);
}

int op_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int64_t op_count_nonfinite(const float *x, int64_t n, int64_t *first) {
    int64_t cnt = 0, f = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            if (f < 0) f = i;
            cnt++;
        }
    if (first) *first = f;
    return cnt;
}

void op_topk(const float *x, int n, int k, int *idx, float *val) {
    if (k <= 0) return; /* k == 0 would read and write val[-1] below */
    int m = 0; /* insertion into a sorted list of size k: fine for small k */
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (m == k && !(v > val[k - 1])) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && v > val[j - 1]) {
            val[j] = val[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        val[j] = v;
        idx[j] = i;
    }
}

/* ---- attention ----------------------------------------------------------------------------------------- */

/* Long sequences: per (head, block of ATT_QB queries) S = Q Kᵀ·scale and O = softmax(S) V with sgemm, masked
 * entries -inf. Returns 0 if the scratch could not be allocated (the caller then uses the streaming loop). */
#define ATT_QB 128
static int attention_blocked(float *out, int64_t ldo, const float *q, int64_t ldq, const float *k, int64_t ldk,
                             const float *v, int64_t ldv, int Tq, int Tk, int Hq, int Hkv, int D, float scale,
                             int causal_offset) {
    int group = Hq / Hkv, nqb = (Tq + ATT_QB - 1) / ATT_QB, ok = 1;
#pragma omp parallel
    {
        float *S = malloc(sizeof(float) * (size_t)ATT_QB * Tk);
        if (!S) {
#pragma omp atomic write
            ok = 0;
        }
#pragma omp barrier
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int h = 0; h < Hq; h++) {
            for (int b = 0; b < nqb; b++) {
                if (!ok) continue;
                int i0 = b * ATT_QB, nq = Tq - i0 < ATT_QB ? Tq - i0 : ATT_QB, kh = h / group;
                int nk = causal_offset < 0 ? Tk : i0 + nq + causal_offset; /* keys any row of the block sees */
                if (nk > Tk) nk = Tk;
                if (nk <= 0) {
                    for (int r = 0; r < nq; r++) memset(out + (int64_t)(i0 + r) * ldo + (int64_t)h * D, 0, sizeof(float) * D);
                    continue;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, D, scale, q + (int64_t)i0 * ldq + (int64_t)h * D,
                            (int)ldq, k + (int64_t)kh * D, (int)ldk, 0.f, S, nk);
                for (int r = 0; r < nq; r++) {
                    float *row = S + (int64_t)r * nk;
                    if (causal_offset >= 0)
                        for (int j = i0 + r + causal_offset + 1; j < nk; j++) row[j] = -INFINITY;
                    softmax_row(row, nk);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, D, nk, 1.f, S, nk, v + (int64_t)kh * D, (int)ldv,
                            0.f, out + (int64_t)i0 * ldo + (int64_t)h * D, (int)ldo);
            }
        }
        free(S);
    }
    return ok;
}

void op_attention(float *out, int64_t ldo, const float *q, int64_t ldq, const float *k, int64_t ldk,
                  const float *v, int64_t ldv, int Tq, int Tk, int Hq, int Hkv, int D, float scale,
                  int causal_offset) {
    int group = Hq / Hkv;
    if (Tq >= 16 && Tk >= 64 &&
        attention_blocked(out, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, Hq, Hkv, D, scale, causal_offset))
        return;
    /* One pass with an online softmax (running max m, running sum l, output rescaled when m grows): no scratch. */
#pragma omp parallel for collapse(2) schedule(dynamic, 4) if ((double)Tq * Tk * Hq * D > 262144.0)
    for (int h = 0; h < Hq; h++) {
        for (int i = 0; i < Tq; i++) {
            const float *qi = q + (int64_t)i * ldq + (int64_t)h * D;
            float *oi = out + (int64_t)i * ldo + (int64_t)h * D;
            int kh = h / group;
            int n = causal_offset < 0 ? Tk : i + causal_offset + 1;
            if (n > Tk) n = Tk;
            float m = -INFINITY, l = 0.f;
            for (int d = 0; d < D; d++) oi[d] = 0;
            for (int j = 0; j < n; j++) {
                const float *kj = k + (int64_t)j * ldk + (int64_t)kh * D;
                const float *vj = v + (int64_t)j * ldv + (int64_t)kh * D;
                float s = 0;
                for (int d = 0; d < D; d++) s += qi[d] * kj[d];
                s *= scale;
                if (s > m) { /* new maximum: rescale what was accumulated */
                    float r = expf(m - s);
                    l *= r;
                    for (int d = 0; d < D; d++) oi[d] *= r;
                    m = s;
                }
                float w = expf(s - m);
                l += w;
                for (int d = 0; d < D; d++) oi[d] += w * vj[d];
            }
            float inv = l > 0 ? 1.f / l : 0.f;
            for (int d = 0; d < D; d++) oi[d] *= inv;
        }
    }
}
