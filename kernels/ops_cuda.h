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

/* ---- decoder fusions ------------------------------------------------------------------------------------ */

/* Per-head RMSNorm of q and k (q_norm / k_norm) followed by multi-stream RoPE (interleaved MRoPE), in place, with
 * the RoPE tables made on the device as transformers makes them: f = (float)pos[stream(j)][t] · inv_freq[j] in
 * fp32, c = bf16(cosf(f)), s = bf16(sinf(f)) for slot j < D/2 (and j + D/2). Per head (the same
 * rounding points as omni_cuda_rmsnorm_bf16 then omni_cuda_rope_neox_bf16 with those tables; the fp32 sum of
 * squares may be added in another order):
 *     n = bf16(bf16(x · rsqrt(mean(x²) + eps)) · w);  n'_d = bf16(bf16(n_d·c) + bf16(-n_{d+D/2}·s)),
 *     n'_{d+D/2} = bf16(bf16(n_{d+D/2}·c) + bf16(n_d·s)).
 * q: T tokens of Hq heads, k: T tokens of Hkv heads, both with token row stride ld elements (q and k may be the
 * two parts of one fused QKV row). q_w, k_w: [D] bf16. pos: device int32, stream s of token t at
 * pos[s·pos_stride + t]; inv_freq: device [D/2] f32; slot_stream: device [D/2] int32 (stream of each slot).
 * D must be 32, 64, 128 or 256. */
omni_status omni_cuda_qk_norm_rope_bf16(uint16_t *q, uint16_t *k, int T, int64_t ld, int Hq, int Hkv, int D,
                                       const uint16_t *q_w, const uint16_t *k_w, float eps, const int32_t *pos,
                                       int64_t pos_stride, const float *inv_freq, const int32_t *slot_stream,
                                       void *stream);

/* The same on a fused QKV row (q heads, k heads, v heads; row stride ld) written out to three contiguous
 * buffers, as the attention kernels take them: q [T][Hq·D], k and v [T][Hkv·D] (v copied unchanged). The
 * results equal omni_cuda_qk_norm_rope_bf16 in place, bit for bit. */
omni_status omni_cuda_qkv_norm_rope_bf16(const uint16_t *qkv, int64_t ld, uint16_t *q, uint16_t *k, uint16_t *v,
                                        int T, int Hq, int Hkv, int D, const uint16_t *q_w, const uint16_t *k_w,
                                        float eps, const int32_t *pos, int64_t pos_stride, const float *inv_freq,
                                        const int32_t *slot_stream, void *stream);

/* SwiGLU over a fused gate/up row: y[r, i] = bf16(bf16(silu(gu[r, i])) · gu[r, I + i]) (omni_cuda_silu_mul_bf16's
 * arithmetic). gu: [rows, 2I] (gate columns, then up columns), y: [rows, I]; y must not alias gu. */
omni_status omni_cuda_swiglu_bf16(uint16_t *y, const uint16_t *gu, int rows, int I, void *stream);

/* Embedding gather with substituted rows: y[i, :] = src_row[i] >= 0 ? rows[src_row[i], :] : table[ids[i], :]
 * (an id outside [0, vocab) gives zeros). table: [vocab, dim], rows: [*, dim] bf16 (the encoders' embeddings);
 * ids, src_row: device [n] int32; src_row may be NULL (no substitution). */
omni_status omni_cuda_embed_rows_bf16(uint16_t *y, const uint16_t *table, int64_t vocab, int dim, const int32_t *ids,
                                     const int32_t *src_row, const uint16_t *rows, int n, void *stream);

/* Scattered residual add (DeepStack): x[dst_row[i], :] = bf16(x[dst_row[i], :] + src[i, :]) for i < n.
 * x: [*, dim], src: [n, dim] bf16, dst_row: device [n] int32, distinct rows. */
omni_status omni_cuda_add_rows_bf16(uint16_t *x, int dim, const int32_t *dst_row, const uint16_t *src, int n,
                                   void *stream);

/* y = bf16(x), round-to-nearest-even, n elements (f32 inputs from the host side: pixels, encoder outputs). */
omni_status omni_cuda_f32_to_bf16(uint16_t *y, const float *x, int64_t n, void *stream);
/* y = (float)x, n elements (bf16 logits or hidden states to f32). */
omni_status omni_cuda_bf16_to_f32(float *y, const uint16_t *x, int64_t n, void *stream);

/* Hint (no result): bring [p, p + bytes) into the L2 cache, when the step's rows attend to few keys in all
 * (Σ_i (row_pos[i] + 1) <= max_keys over row_pos [n], device; NULL: always) - i.e. while a short-context decode
 * attention leaves HBM idle, the next weights can stream in. Launched on a side stream by the runner. */
omni_status omni_cuda_l2_prefetch(const void *p, size_t bytes, const int32_t *row_pos, int n, int64_t max_keys,
                                  void *stream);

/* ---- sparse MoE (Qwen3-Omni thinker), no host round trip --------------------------------------------------
 * A step: router logits (omni_cuda_linear, f32 out) -> omni_cuda_moe_route -> either the per-entry GEMVs (few
 * tokens: omni_cuda_moe_entry_linear for gate/up, omni_cuda_swiglu_bf16, entry_linear for down) or the grouped
 * path (omni_cuda_moe_group, omni_cuda_moe_grouped_linear twice with swiglu between) -> omni_cuda_moe_combine.
 * "Entries" are the T·k (token, choice) pairs, entry e = t·k + j. Expert weights live in one allocation per
 * matrix kind: gate/up fused [E][2I][H] (gate rows, then up rows), down [E][H][I]. */

/* Router: p = softmax(logits[t, :]) in fp32; the k largest p (descending; the lower expert index first on ties,
 * as llm/moe.c); with norm, w_j = p_j / Σ p (summed in that order in fp32); w rounded to bf16 (transformers casts
 * the routing weights to the activation dtype). logits: [T, E] f32, as the CPU reference computes them (logits
 * rounded to bf16, as transformers' bf16 Linear gives them, merge near-tied experts: a bf16 step at |logit| ~ 3 is
 * 0.016, and on the Omni fixture that flipped expert choices against the f32 reference); sel_e: [T, k] int32;
 * sel_w: [T, k] f32 holding bf16 values. 1 <= k <= min(E, 32), E <= 4096. */
omni_status omni_cuda_moe_route(int32_t *sel_e, float *sel_w, const float *logits, int T, int E, int k, int norm,
                                void *stream);

/* Group the entries by expert: offsets[e] .. offsets[e + 1] are the grouped rows of expert e (offsets: [E + 1]
 * int32), perm_tok[r] the token of grouped row r, slot_pos[t·k + j] the grouped row of entry (t, j) ([T·k] each).
 * The order of the rows inside a group is unspecified (it does not change any result: rows are independent).
 * One block; T·k <= 1 << 20. */
omni_status omni_cuda_moe_group(int32_t *offsets, int32_t *perm_tok, int32_t *slot_pos, const int32_t *sel_e, int T,
                                int E, int k, void *stream);

/* Grouped linear (tensor cores, fp32 accumulation, one rounding): for every expert e and grouped row
 * r in [offsets[e], offsets[e + 1]): y[r, :] = A[r, :] · W[e]ᵀ with A[r] = x[perm ? perm[r] : r] (row stride ldx).
 * W: [E][N][K] bf16; y: [rows, N] bf16 with rows = offsets[E] <= max_rows (sizes the launch). K % 8 == 0,
 * N % 8 == 0, 16-byte aligned x, W and ldx. */
omni_status omni_cuda_moe_grouped_linear(uint16_t *y, const uint16_t *x, int64_t ldx, const int32_t *perm,
                                         const uint16_t *w, const int32_t *offsets, int E, int max_rows, int N, int K,
                                         void *stream);

/* Per-entry linear (decode, few entries): y[e, :] = x[e / xdiv, :] · W[sel_e[e]]ᵀ for e < n (xdiv = k for the
 * gate/up of token rows, 1 for the down projection of entry rows). W: [E][N][K]; y: [n, N] bf16. K % 8 == 0,
 * 16-byte aligned x (row stride ldx) and W. */
omni_status omni_cuda_moe_entry_linear(uint16_t *y, const uint16_t *x, int64_t ldx, int xdiv, const uint16_t *w,
                                       const int32_t *sel_e, int n, int N, int K, void *stream);

/* Combine: y[t, :] = the bf16 sum, from zero in ascending expert order, of bf16(out[row(t, j), :] · sel_w[t, j])
 * (transformers' index_add loop over experts), row(t, j) = slot_pos ? slot_pos[t·k + j] : t·k + j.
 * out: [T·k, H] bf16; y: [T, H] bf16. Experts of one token are distinct. */
omni_status omni_cuda_moe_combine(uint16_t *y, const uint16_t *out, const int32_t *slot_pos, const int32_t *sel_e,
                                  const float *sel_w, int T, int k, int H, void *stream);

/* Scratch of omni_cuda_moe_decode (device memory): logits [T·E] f32, sel_e and sel_w [T·k], act [T·k·I] bf16
 * (16-byte aligned), ticket: OMNI_CUDA_MOE_CTL_BYTES of counters, zero before the first call (calls leave them 0);
 * out: [T·H] bf16, the block's output for omni_cuda_moe_decode_res (NULL for the others). */
#define OMNI_CUDA_MOE_CTL_BYTES 512
typedef struct {
    float *logits;
    int32_t *sel_e;
    float *sel_w;
    uint16_t *act;
    unsigned *ticket;
    uint16_t *out;
} omni_cuda_moe_scratch;

/* The whole block for few tokens (decode), graph-capturable: y[T, H] = MoE(x[T, :]) with the router in fp32 and
 * omni_cuda_moe_route's routing (also left in s->sel_e / s->sel_w), gate/up rounded to bf16,
 * omni_cuda_swiglu_bf16's SwiGLU, down rounded to bf16 and omni_cuda_moe_combine's sum: the values of the
 * per-entry path up to fp32 summation order. Every weight row an entry needs is streamed once per entry (tokens
 * sharing an expert read it again, from L2). Three kernels (router + routing by its last block; gate/up + SwiGLU;
 * down + combine): omni_cuda_moe_decode_split.
 * x: [T] rows of stride ldx; router [E, H]; gate_up [E][2I][H]; down [E][H][I]; y: [T, H] bf16, not aliasing x.
 * H, I, ldx multiples of 8, x and the weights 16-byte aligned; 1 <= k <= min(E, 32), T·k <= 65535. One call at
 * a time per scratch (the counters). */
omni_status omni_cuda_moe_decode(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                 const uint16_t *gate_up, const uint16_t *down, int T, int E, int k, int H, int I,
                                 int norm, const omni_cuda_moe_scratch *s, void *stream);
/* The same in one kernel (router, gate/up, down as ordered work items of a grid of resident blocks; a programmatic
 * dependent launch) for T·k <= 64 and E <= 512, else the three kernels; the same bits. Slower than the three
 * kernels on the H200 so far (bench/NOTES.md); kept for tests and omni_bench_moe. */
omni_status omni_cuda_moe_decode_fused(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                       const uint16_t *gate_up, const uint16_t *down, int T, int E, int k, int H,
                                       int I, int norm, const omni_cuda_moe_scratch *s, void *stream);
/* The three kernels behind omni_cuda_moe_decode. */
omni_status omni_cuda_moe_decode_split(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                       const uint16_t *gate_up, const uint16_t *down, int T, int E, int k, int H,
                                       int I, int norm, const omni_cuda_moe_scratch *s, void *stream);

/* The MoE half of a decode layer with the residual adds around it, as the unfused sequence gives it bit for bit:
 *   omni_cuda_add_rmsnorm_bf16(h, x, a, w_post)       x = x + a, h = rmsnorm(x)·w_post
 *   omni_cuda_moe_decode(s->out, h, H, ...)            the block on h (routing left in s->sel_e / s->sel_w)
 *   omni_cuda_add_rmsnorm_bf16(h, x, s->out, w_next)   x = x + out, h = rmsnorm(x)·w_next (the next layer's input)
 *   (w_next NULL: omni_cuda_add_bf16(x, x, s->out), h then holds the block's input)
 * in three programmatic dependent kernels (router with the first add + norm; gate/up; down with the second add +
 * norm), so that neither norm is a launch of its own and each kernel's start overlaps the one before. x, h, a:
 * [T, H] bf16 (row stride H; a not aliasing x, h or s->out); eps as omni_cuda_rmsnorm_bf16; other arguments as
 * omni_cuda_moe_decode. Past 8192 hidden values or with unaligned rows: the unfused sequence itself. */
omni_status omni_cuda_moe_decode_res(uint16_t *x, uint16_t *h, const uint16_t *a, const uint16_t *w_post,
                                     const uint16_t *w_next, float eps, const uint16_t *router, const uint16_t *gate_up,
                                     const uint16_t *down, int T, int E, int k, int H, int I, int norm,
                                     const omni_cuda_moe_scratch *s, void *stream);

/* The whole block for many tokens (prefill): router (f32) and routing as omni_cuda_moe_route, grouping; each
 * expert's first C rows (C = mean + 2 standard deviations of a uniform routing of T·k entries over E, a multiple
 * of 16) gathered into a zero-padded block and multiplied by cuBLAS strided batched GEMMs (omni_cuda_linear_batched),
 * the rows past C (skewed routing) by omni_cuda_moe_grouped_linear; SwiGLU and combine as omni_cuda_swiglu_bf16 and
 * omni_cuda_moe_combine. No host round trip. x: [T, H]; weights as omni_cuda_moe_decode; y: [T, H], not aliasing x.
 * scratch: device memory of omni_cuda_moe_prefill_scratch(T, E, k, H, I) bytes or more (for any smaller T too). */
size_t omni_cuda_moe_prefill_scratch(int T, int E, int k, int H, int I);
omni_status omni_cuda_moe_prefill(omni_cuda_ctx *ctx, uint16_t *y, const uint16_t *x, const uint16_t *router,
                                  const uint16_t *gate_up, const uint16_t *down, int T, int E, int k, int H, int I,
                                  int norm, void *scratch, size_t scratch_bytes);

/* ---- softmax, selection ---------------------------------------------------------------------------------- */

/* Row softmax in place, fp32, max-subtracted; a row of all -inf becomes zeros (as op_softmax). x: [rows, n]. */
omni_status omni_cuda_softmax_f32(float *x, int rows, int n, void *stream);

/* idx[r] = index of the largest x[r, :] (first on ties). x: [rows, n] fp32, idx: [rows] int32 (device). */
omni_status omni_cuda_argmax_f32(int32_t *idx, const float *x, int rows, int n, void *stream);

/* ---- sampling on the device ------------------------------------------------------------------------------ */

/* Per-row sampling parameters (llm/sampler.h semantics): temp <= 0 greedy; top_k <= 0 or >= vocab: no limit;
 * top_p >= 1: no limit. */
typedef struct {
    float temp;
    int top_k;
    float top_p;
    int reserved; /* 0 */
} omni_cuda_sample_params;

/* Next token of each row, on the device; logits never leave it. The uniform draw of each sampled row comes from
 * the host (u[row], drawn with llm_sampler_uniform), so the generator stream is the same on every device.
 * What "equals the CPU sampler" (llm_sampler_sample) means:
 *  - greedy rows (temp <= 0): the same index exactly (first on ties); u is not used (the CPU draws nothing);
 *  - other rows: the same candidate set (top-k by logit, ties to the lower id; then the smallest prefix of the
 *    temperature softmax in descending order whose mass reaches top_p), the same order of the cumulative scan
 *    (descending logit, lower id first) and the same draw u·Σ. So for equal logits and u the token equals the
 *    CPU's, except when u·Σ falls within floating-point rounding (~1e-9 relative) of a cumulative boundary, or
 *    the top-p mass lies that close to top_p. Results are deterministic (no floating-point atomics).
 * Rows with top_k in 1..1024 (or a vocabulary <= 1024) sort their candidates in shared memory; larger or no top_k
 * takes the radix path (several passes over the row). NaN logits count as -inf; -0 equals +0.
 * out: device [rows] int32; logits: [rows][ld] f32; params, u: device [rows]. One block per row. */
omni_status omni_cuda_sample(int32_t *out, const float *logits, int64_t ld, int rows, int vocab,
                             const omni_cuda_sample_params *params, const double *u, void *stream);

/* ---- vision / audio towers (kernels/cuda/ops_towers.cu) -------------------------------------------------- */

/* Weights to the device: dst[i] = bf16(src[i]) for the numel(src) values of a host tensor (bf16 copied as is, f16 /
 * f32 converted on the host in bounded chunks). Returns once the copy is complete. */
omni_status omni_cuda_upload_bf16(uint16_t *dst, const omni_tensor *src, void *stream);
/* Free and total memory of the current device (for "needs X, Y free" messages before large allocations). */
omni_status omni_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Strided device-to-device copy of `height` rows of `width` bytes (row pitches in bytes), ordered on `stream`,
 * asynchronous (padding heads to the widths the attention kernels take, and back). */
omni_status omni_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                             void *stream);

/* Learned position embedding resampled bilinearly (align_corners=True) and added, as the Qwen3-VL vision tower
 * does in bf16 (transformers v5): p = the fp32 sum of op_pos_embed_bilinear's 4 weighted taps (same taps,
 * weights and order, no fused multiply-add), x[n, :] = bf16(x[n, :] + bf16(p)). x: [N, D] bf16 (one image, patch
 * n at full-grid coordinates (row[n], col[n]) of a gh x gw grid); table: [side², D] bf16; row, col: device [N]. */
omni_status omni_cuda_pos_embed_bilinear_bf16(uint16_t *x, const uint16_t *table, int side, const int32_t *row,
                                              const int32_t *col, int N, int D, int gh, int gw, void *stream);

/* op_rope2d_tables on the device: cos, sin [T, D] f32 (duplicated halves), angle (float)row[t]·inv_freq[k]
 * (slots k < D/4) or (float)col[t]·inv_freq[k - D/4], cosf/sinf (CUDA's, within 2 ulp of the C library's).
 * row, col: device [T]; inv_freq: device [D/4]. D % 4 == 0. */
omni_status omni_cuda_rope2d_tables_f32(float *cos, float *sin, const int32_t *row, const int32_t *col, int T, int D,
                                        const float *inv_freq, void *stream);

/* NeoX (rotate-half) RoPE computed in fp32, as the vision towers do (transformers upcasts q, k and the tables):
 * x'_d = bf16(x_d·c_d - x_{d+D/2}·s_d), x'_{d+D/2} = bf16(x_{d+D/2}·c_{d+D/2} + x_d·s_{d+D/2}), each product and
 * the sum rounded to fp32 separately (op_rope_neox's arithmetic, then one bf16 rounding). In place; x: T tokens of
 * H heads of D dims with token stride ld elements (q and k heads adjacent in a fused qkv row: H = 2·heads);
 * cos, sin: [T, D] f32 device tables. */
omni_status omni_cuda_rope_neox_f32_bf16(uint16_t *x, int T, int H, int D, int64_t ld, const float *cos,
                                         const float *sin, void *stream);

/* op_im2col_3x3s2 on bf16: nb channel-last images x [nb][H, W, C] -> col rows of ldc elements, column
 * c·9 + kh·3 + kw (zero outside the image), columns [9C, ldc) zero (a K padded for aligned GEMMs). Row order
 * (b, ho, wo) or, with wmajor, (b, wo, ho) (the transposed spatial order the audio stem feeds to conv_out).
 * Ho = (H-1)/2+1, Wo = (W-1)/2+1; ldc >= 9C. */
omni_status omni_cuda_im2col_3x3s2_bf16(uint16_t *col, int64_t ldc, const uint16_t *x, int nb, int H, int W, int C,
                                        int wmajor, void *stream);

/* y[r, :] = bf16(y[r, :] + table[r % period, :]) for r < rows (positions that restart every `period` rows).
 * y: [rows, dim], table: [period, dim] bf16. */
omni_status omni_cuda_add_periodic_bf16(uint16_t *y, const uint16_t *table, int period, int rows, int dim,
                                        void *stream);

/* Deterministic uniform fill (random weights made on the device): y[i] = bf16(lo + (hi - lo)·u_i) with
 * u_i = (h >> 40) · 2^-24, h = splitmix64(seed ^ (i · 0x9e3779b97f4a7c15)) (the plain-C formula in the test). */
omni_status omni_cuda_fill_uniform_bf16(uint16_t *y, int64_t n, uint64_t seed, float lo, float hi, void *stream);

/* ---- linear (cuBLAS) ------------------------------------------------------------------------------------- */

/* y[M, N] = x[M, K] · W[N, K]ᵀ (+ b[N]) on the context's stream: bf16 x, W, b; fp32 accumulation (reductions in
 * fp32, no reduced-precision split-K); y_dtype OMNI_BF16 (exactly one rounding of the fp32 x·Wᵀ + b) or OMNI_F32
 * (logits). All row-major contiguous; b may be NULL; y must not alias x or W. M <= 8 with K % 8 == 0 and 16-byte
 * aligned x and W (decode) runs a weight-streaming GEMV kernel (bias added in fp32 before the one rounding);
 * larger M runs cuBLAS. With cuBLAS, a bias with bf16 output goes through
 * the context's fp32 scratch (M·N floats; see omni_cuda_ctx_reserve), because cuBLAS's own bias paths (beta = 1
 * on a bf16 C, cuBLASLt's bias epilogue) were seen rounding twice on the H200. */
omni_status omni_cuda_linear(omni_cuda_ctx *ctx, void *y, omni_dtype y_dtype, const uint16_t *x, const uint16_t *w,
                             const uint16_t *b, int M, int N, int K);

/* Decode linears with the small op before them done in their prologue (one kernel instead of two: each block
 * rebuilds its x rows in shared memory from L2), y = x·Wᵀ bf16 [M, N] with omni_cuda_linear's GEMV arithmetic:
 *   omni_cuda_add_rmsnorm_linear: x_out = bf16(x_in + add), x = rmsnorm(x_out)·norm_w (omni_cuda_add_rmsnorm_bf16's
 *     arithmetic: bit for bit its result when K >= 2048, where its block reduction has the same shape; smaller K
 *     sums the squares in another order); x_in, add, x_out [M, K], x_out aliasing neither (other blocks still read
 *     x_in while block 0 writes x_out);
 *   omni_cuda_swiglu_linear: x = swiglu(gu) (omni_cuda_swiglu_bf16, bit for bit), gu [M, 2K].
 * Taken shapes: omni_cuda_fused_linear_ok (M <= 4, K % 8 == 0, M·K bf16 within 48 KiB of shared memory), all
 * pointers 16-byte aligned, on `stream` (programmatic dependent launch as the GEMVs); else OMNI_ERR_USAGE. */
int omni_cuda_fused_linear_ok(int M, int K);
omni_status omni_cuda_add_rmsnorm_linear(uint16_t *y, uint16_t *x_out, const uint16_t *x_in, const uint16_t *add,
                                         const uint16_t *norm_w, float eps, const uint16_t *w, int M, int N, int K,
                                         void *stream);
omni_status omni_cuda_swiglu_linear(uint16_t *y, const uint16_t *gu, const uint16_t *w, int M, int N, int K,
                                    void *stream);

/* Batched linear (cuBLAS strided batched, no bias): y[b] = x[b] · W[b]ᵀ for b < batch, bf16 in and out, fp32
 * accumulation, one rounding. x[b] = x + b·sx ([M, K]), W[b] = w + b·sw ([N, K]), y[b] = y + b·sy ([M, N]), all
 * row-major, strides in elements. */
omni_status omni_cuda_linear_batched(omni_cuda_ctx *ctx, uint16_t *y, int64_t sy, const uint16_t *x, int64_t sx,
                                     const uint16_t *w, int64_t sw, int batch, int M, int N, int K);

#ifdef __cplusplus
}
#endif
#endif
