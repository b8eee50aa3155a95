/* ops_cuda.h - the dense CUDA ops (bf16 activations, as transformers computes them) with a plain C API.
 *
 * No CUDA types here: streams are `void *` (a cudaStream_t; NULL = the legacy default stream), buffers are device
 * pointers, bf16 values are stored as uint16_t (the bit pattern of tensor.h's omni_f32_to_bf16).
 * Numerics follow DESIGN.md §4 and spec/qwen3.md §1.3-1.4: every op reads bf16, computes in fp32 and rounds to
 * bf16 (round-to-nearest-even) exactly where PyTorch does; norms and softmax accumulate in fp32; the GEMM is
 * cuBLAS with fp32 accumulation. The CPU reference for each op is the same-named op_* in kernels/ops.h.
 *
 * Every launcher validates its sizes (rows/n == 0 is a no-op), enqueues work on `stream` and returns OMNI_OK, or
 * an omni_status with omni_last_error() set to "function: CUDA error text". Launchers are asynchronous (they do
 * not wait for the GPU) and allocate nothing. Unless a function says so, outputs must not alias inputs.
 * Thread safety: launchers are reentrant; an omni_cuda_ctx (stream + cuBLAS handle) belongs to one thread at a
 * time. Built only with -DOMNI_CUDA=ON/AUTO (library omni_kernels_cuda). */
#ifndef OMNI_OPS_CUDA_H
#define OMNI_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices, contexts, memory ------------------------------------------------------------------------- */

/* Number of usable CUDA devices. Never fails for a missing GPU or driver: *n_devices = 0 and OMNI_OK. */
omni_status omni_cuda_available(int *n_devices);

/* A context owns one non-blocking stream, one cuBLAS handle bound to it (fp32 reductions only) and an fp32
 * scratch for biased bf16 linears, on `device`. */
typedef struct omni_cuda_ctx omni_cuda_ctx;
omni_status omni_cuda_ctx_init(omni_cuda_ctx **ctx, int device);
void omni_cuda_ctx_free(omni_cuda_ctx *ctx); /* waits for the stream; NULL is a no-op */
void *omni_cuda_ctx_stream(const omni_cuda_ctx *ctx);
/* Size the scratch for biased bf16 linears up to M·N = max_mn outputs now (else it grows inside omni_cuda_linear,
 * with a stream sync and a cudaMalloc: call this at load time, before any per-token loop or graph capture). */
omni_status omni_cuda_ctx_reserve(omni_cuda_ctx *ctx, int64_t max_mn);

/* Wait until all work on `stream` is done; reports any asynchronous kernel error. */
omni_status omni_cuda_sync(void *stream);

/* Device memory. omni_cuda_free(NULL) is a no-op. */
omni_status omni_cuda_malloc(void **ptr, size_t bytes);
void omni_cuda_free(void *ptr);
/* Copies ordered on `stream`. h2d and d2h return once the copy is complete (the host buffer may be reused or
 * read); d2d and memset are asynchronous. */
omni_status omni_cuda_h2d(void *dst, const void *src, size_t bytes, void *stream);
omni_status omni_cuda_d2h(void *dst, const void *src, size_t bytes, void *stream);
omni_status omni_cuda_d2d(void *dst, const void *src, size_t bytes, void *stream);
omni_status omni_cuda_memset(void *dst, int byte, size_t bytes, void *stream);

/* ---- norms ----------------------------------------------------------------------------------------------- */

/* RMSNorm over the last dim (Qwen3 RMSNorm): h = bf16(x * rsqrt(mean(x²) + eps)) in fp32, y = bf16(h * w).
 * x, y: [rows, dim] bf16, w: [dim] bf16. y may alias x. Per-head q_norm/k_norm: rows = tokens*heads, dim = D. */
omni_status omni_cuda_rmsnorm_bf16(uint16_t *y, const uint16_t *x, const uint16_t *w, int rows, int dim, float eps,
                                   void *stream);

/* Residual add fused with the next RMSNorm (decoder: x = x + attn; h = norm(x)): x = bf16(x + a) in place, then
 * h = rmsnorm(x) exactly as omni_cuda_add_bf16 followed by omni_cuda_rmsnorm_bf16 (bit-identical), in one pass.
 * x, a, h: [rows, dim] bf16; w: [dim]. h must not alias x or a. */
omni_status omni_cuda_add_rmsnorm_bf16(uint16_t *h, uint16_t *x, const uint16_t *a, const uint16_t *w, int rows,
                                       int dim, float eps, void *stream);

/* LayerNorm (biased variance, two-pass fp32): y = bf16((x - mean) * rsqrt(var + eps) * w + b).
 * x, y: [rows, dim] bf16; w, b: [dim] bf16, b may be NULL. y may alias x. */
omni_status omni_cuda_layernorm_bf16(uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b, int rows,
                                     int dim, float eps, void *stream);

/* ---- position, activations, residual ------------------------------------------------------------------- */

/* NeoX (rotate-half) RoPE in place, as HF: c = bf16(cos), s = bf16(sin), x' = bf16(bf16(x*c) + bf16(rot(x)*s))
 * with rot(x) = concat(-x[D/2:], x[:D/2]). x: T tokens of H heads of D dims (D even), token row stride ld
 * (elements); cos/sin: [T, D] fp32 device tables (duplicated halves, as op_rope_neox). */
omni_status omni_cuda_rope_neox_bf16(uint16_t *x, int T, int H, int D, int64_t ld, const float *cos,
                                     const float *sin, void *stream);

/* y = bf16(bf16(silu(gate)) * up), n elements. y may alias gate or up. */
omni_status omni_cuda_silu_mul_bf16(uint16_t *y, const uint16_t *gate, const uint16_t *up, int64_t n, void *stream);
/* y = bf16(gelu(x)): exact erf form and tanh approximation. y may alias x. */
omni_status omni_cuda_gelu_erf_bf16(uint16_t *y, const uint16_t *x, int64_t n, void *stream);
omni_status omni_cuda_gelu_tanh_bf16(uint16_t *y, const uint16_t *x, int64_t n, void *stream);
/* Residual add: y = bf16(a + b). y may alias a or b. */
omni_status omni_cuda_add_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, int64_t n, void *stream);

/* Embedding gather: y[i, :] = table[ids[i], :]. table: [vocab, dim] bf16, ids: [n] int32 (device), y: [n, dim].
 * An id outside [0, vocab) gives a row of zeros (the caller validates ids; no out-of-bounds read happens). */
omni_status omni_cuda_embed_bf16(uint16_t *y, const uint16_t *table, int64_t vocab, int dim, const int32_t *ids,
                                 int n, void *stream);

/* ---- softmax, selection ---------------------------------------------------------------------------------- */

/* Row softmax in place, fp32, max-subtracted; a row of all -inf becomes zeros (as op_softmax). x: [rows, n]. */
omni_status omni_cuda_softmax_f32(float *x, int rows, int n, void *stream);

/* idx[r] = index of the largest x[r, :] (first on ties). x: [rows, n] fp32, idx: [rows] int32 (device). */
omni_status omni_cuda_argmax_f32(int32_t *idx, const float *x, int rows, int n, void *stream);

/* ---- linear (cuBLAS) ------------------------------------------------------------------------------------- */

/* y[M, N] = x[M, K] · W[N, K]ᵀ (+ b[N]) on the context's stream: bf16 x, W, b; fp32 accumulation (reductions in
 * fp32, no reduced-precision split-K); y_dtype OMNI_BF16 (exactly one rounding of the fp32 x·Wᵀ + b) or OMNI_F32
 * (logits). All row-major contiguous; b may be NULL; y must not alias x or W. A bias with bf16 output goes through
 * the context's fp32 scratch (M·N floats; see omni_cuda_ctx_reserve), because cuBLAS's own bias paths (beta = 1
 * on a bf16 C, cuBLASLt's bias epilogue) were seen rounding twice on the H200. */
omni_status omni_cuda_linear(omni_cuda_ctx *ctx, void *y, omni_dtype y_dtype, const uint16_t *x, const uint16_t *w,
                             const uint16_t *b, int M, int N, int K);

#ifdef __cplusplus
}
#endif
#endif
