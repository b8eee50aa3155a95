/* ops.h - the dense CPU reference ops (f32 activations; weights f32/bf16/f16 as stored).
 *
 * Conventions: activations are row-major f32 `[rows, cols]`; weights are omni_tensor views in PyTorch layout
 * (Linear: [N_out, K_in]); every op may be called with rows == 0. Ops never allocate per call except where noted
 * (op_linear allocates weight tiles per call when M > 4, op_linear_ws takes them from the caller; op_attention).
 * Model knowledge stays out of this file.
 * Threading: OpenMP inside ops, OpenBLAS for GEMM. */
#ifndef OMNI_OPS_H
#define OMNI_OPS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[M,N] = x[M,K] · W[N,K]ᵀ (+ b[N]). W, b: f32/bf16/f16 contiguous. y must not alias x. */
void op_linear(float *y, const float *x, int M, const omni_tensor *w, const omni_tensor *b);

/* op_linear with caller-owned scratch, so that it never allocates: ws holds op_linear_ws_floats(K, threads)
 * floats for K >= the weight's input size and threads >= omp_get_max_threads() at the call (a smaller or NULL
 * ws: allocates per call like op_linear). Same results as op_linear. */
void op_linear_ws(float *y, const float *x, int M, const omni_tensor *w, const omni_tensor *b, float *ws,
                  size_t ws_floats);
size_t op_linear_ws_floats(int max_k, int n_threads);

/* Same with a plain f32 weight pointer [N,K]. */
void op_matmul_f32(float *y, const float *x, const float *w, int M, int N, int K);

/* RMSNorm over the last dim: y = x * rsqrt(mean(x²) + eps) * w. y may alias x. */
void op_rmsnorm(float *y, const float *x, const omni_tensor *w, int rows, int dim, float eps);

/* LayerNorm over the last dim (biased variance, as PyTorch): y = (x-mean)/sqrt(var+eps)*w + b. y may alias x.
 * b may be NULL. */
void op_layernorm(float *y, const float *x, const omni_tensor *w, const omni_tensor *b, int rows, int dim,
                  float eps);

/* y[i] = silu(gate[i]) * up[i]. y may alias gate or up. */
void op_silu_mul(float *y, const float *gate, const float *up, int64_t n);
/* In-place activations. */
void op_gelu_erf(float *x, int64_t n);  /* exact GELU: x/2 (1 + erf(x/√2)) */
void op_gelu_tanh(float *x, int64_t n); /* tanh approximation (gelu_pytorch_tanh) */
void op_silu(float *x, int64_t n);

/* y[i] += x[i]. */
void op_add(float *y, const float *x, int64_t n);
/* y[i] *= s. */
void op_scale(float *y, float s, int64_t n);

/* Row-wise softmax, in place, max-subtracted. */
void op_softmax(float *x, int rows, int n);

/* NeoX (rotate-half) RoPE in place. x: T tokens, each H heads of D dims, token row stride ld (elements).
 * cos/sin: [T, D] per-token tables (already duplicated: cos[t][d] == cos[t][d + D/2]).
 * x[d]' = x[d]·cos[d] - x[d+D/2]·sin[d];  x[d+D/2]' = x[d+D/2]·cos[d+D/2] + x[d]·sin[d+D/2]. */
void op_rope_neox(float *x, int T, int H, int D, int64_t ld, const float *cos, const float *sin);

/* Multi-stream RoPE tables (interleaved MRoPE of Qwen3-VL/Omni, plain RoPE when all streams agree), as
 * transformers computes them in fp32: angle f = (float)pos[stream(j)][t] · inv_freq[j] for frequency slot
 * j < D/2, where stream(j) = slot_stream[j] selects a position stream; cos[t][j] = cos[t][j + D/2] = cosf(f),
 * likewise sin. pos: [n_streams][T] (row s at pos + s·pos_stride); cos, sin: [T, D]. */
void op_rope_tables(float *cos, float *sin, const int32_t *pos, int64_t pos_stride, int T, int D,
                    const float *inv_freq, const int *slot_stream);

/* 2D RoPE tables of the ViT (Qwen3-VL vision tower): with nf = D/4 frequencies, slot j < nf takes the angle
 * row[t]·inv_freq[j], slot nf + j takes col[t]·inv_freq[j] (fp32 products), and the D/2 slots are duplicated:
 * cos[t][j] = cos[t][j + D/2]. D % 4 == 0. cos, sin: [T, D]. */
void op_rope2d_tables(float *cos, float *sin, const int32_t *row, const int32_t *col, int T, int D,
                      const float *inv_freq);

/* Learned position embedding resampled bilinearly with align_corners=True (transformers v5's interpolation, fp32
 * weights, the 4 taps summed in fp32 in the order (fy,fx), (fy,cx), (cy,fx), (cy,cx)): for patch n at full grid
 * coordinates (row[n], col[n]) of a gh x gw grid, x[n, :] += Σ w · table[tap, :]. table: [side², D] f32. */
void op_pos_embed_bilinear(float *x, const float *table, int side, const int32_t *row, const int32_t *col, int N,
                           int D, int gh, int gw);

/* im2col of a 3x3 convolution with stride 2 and padding 1 over nb channel-last images x [nb][H, W, C]:
 * col [nb·Ho·Wo, C·9] with Ho = (H-1)/2+1, Wo = (W-1)/2+1, column c·9 + kh·3 + kw (the flattening of a PyTorch
 * [C_out, C_in, 3, 3] weight), zero outside the image. */
void op_im2col_3x3s2(float *col, const float *x, int nb, int H, int W, int C);

/* y[i,:] = table[ids[i], :] as f32. table: [vocab, dim]. Caller validates ids. */
void op_embed(float *y, const omni_tensor *table, const int32_t *ids, int n);

/* Index of the largest value (first on ties). */
int op_argmax(const float *x, int n);
/* Number of NaN/Inf values in x[n]; *first (may be NULL) gets the index of the first, or -1. */
int64_t op_count_nonfinite(const float *x, int64_t n, int64_t *first);
/* The k largest values, sorted descending (ties: lower index first). idx/val have room for k. k <= n. */
void op_topk(const float *x, int n, int k, int *idx, float *val);

/* Scaled dot-product attention, f32, GQA.
 * q: [Tq, Hq, D] (token row stride ldq), k/v: [Tk, Hkv, D] (row strides ldk/ldv), out: [Tq, Hq, D] (ldo).
 * Query head h uses kv head h / (Hq/Hkv).
 * causal_offset < 0: every query sees every key (bidirectional).
 * causal_offset >= 0: query i sees keys j <= i + causal_offset (pass Tk - Tq for a chunk appended to history).
 * Scratch is allocated per call (Tk floats per thread). */
void op_attention(float *out, int64_t ldo, const float *q, int64_t ldq, const float *k, int64_t ldk,
                  const float *v, int64_t ldv, int Tq, int Tk, int Hq, int Hkv, int D, float scale,
                  int causal_offset);

/* Threads used by ops called from the calling thread (its OpenMP thread count; other threads keep theirs).
 * n <= 0: leave it. */
void op_set_threads(int n);
int op_get_threads(void);

#ifdef __cplusplus
}
#endif
#endif
