/* llm_cuda.h - the Qwen3 decoder (dense Qwen3-VL and the MoE Qwen3-Omni thinker) on one CUDA GPU in bf16, as
 * transformers computes it (bf16 activations between ops, fp32 accumulation, fp32 norms and softmax, RoPE tables
 * in fp32 cast to bf16; DESIGN.md §4). Library omni_llm_cuda, built only with CUDA; no CUDA types here.
 * llm_runner (llm/runner.h) with device LLM_DEVICE_CUDA is this module behind the runner's ops table; the
 * functions below are also usable directly (the benchmark runs random weights made on the device).
 *
 * What it owns, all sized at init and never grown: the weights (one device allocation, fused QKV and gate/up made
 * at load, or random weights of the config's shapes made on the device), a workspace for max_tokens rows and
 * max_seqs entries, pinned host buffers for the step inputs, a stream, and the CUDA graphs of the decode steps
 * (one per batch-size bucket 1, 2, 4, ... max_seqs; a decode batch is padded to its bucket with rows that repeat
 * the batch's first sequence, results unused). Graphs belong to a cache and are captured when the cache is made;
 * a decode step runs as a graph when all its sequences are in one cache. Nothing is allocated inside a step.
 *
 * A step (llm_cuda_step) takes llm_batch_entry's (llm/runner.h): one chunk of each of several sequences, of one
 * or several caches, prefill chunks and single decode tokens mixed, with the inputs of llm/model.h (token ids,
 * 3-stream positions, embedding spans with DeepStack rows). Logits reach the host only for entries that ask;
 * tokens are sampled on the device (omni_cuda_sample) with the entry's llm_sampler parameters and one
 * llm_sampler_uniform per sampled token drawn on the host, so token streams equal the CPU runner's for a seed.
 *
 * KV caches (llm_cuda_cache_init): the pages live on the device in a kv_dev (kvcache/kv_dev.h: bf16 or OScaR /
 * KIVI formats, append and quantized flush on the GPU); the kv_cache handed to the caller keeps the same page
 * bookkeeping on the host (kv_init_accounting: sequences, lengths, budget, usage) and is the handle the engine
 * uses (kv_seq_add / remove / clear act on it; the device cache follows at the next step). An f32 cache is
 * stored in bf16 (the GPU computes in bf16); every other format (int2, int4, kivi2/4, K/V mixes, per-layer
 * overrides, window, sinks) is stored and read as on the CPU: packed bytes equal kv_cache's for equal k/v. A
 * quantizing cache also owns the scratch of its prefill attention (kvc_prefill_hist: one layer's packed history
 * dequantized once per step instead of once per attention tile; 2·Hkv·D f16 per token for its longest sequence, at
 * most 128K tokens: 512 MiB for Qwen3-VL-8B at 128K).
 * Attention: kvc_prefill / kvc_decode (kvcache/kv_cuda.h) for head_dim 64 and 128, a plain SIMT kernel (attn_ref.h)
 * for other head dims (the small fixture models); a prefill chunk attends to the packed / bf16 history and to
 * itself in full bf16 (as kv_forward), a decode token to the pages after its append (a block it flushes is read
 * packed).
 * Errors: a model or cache that does not fit in free GPU memory fails with OMNI_ERR_NOMEM and one line
 * "... needs X GiB on cuda:N (...), Y GiB free" (the CLI's exit code 4); a CUDA error in a step returns
 * OMNI_ERR_RUNTIME (OMNI_ERR_NOMEM when the device is out of memory) naming the call and file:line; the step is
 * then dropped on the device (its sequences cleared there) and the caller clears or removes them on the host
 * (kv_seq_clear / kv_seq_remove, as llm/runner.h says; llm_engine does): later steps run normally.
 * Thread safety: one llm_cuda belongs to one thread at a time. */
#ifndef OMNI_LLM_CUDA_H
#define OMNI_LLM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/safetensors.h"
#include "kvcache/kvcache.h"
#include "llm/config.h"
#include "llm/runner.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llm_cuda llm_cuda;

typedef struct {
    int device;     /* CUDA device ordinal (0) */
    int max_seqs;   /* entries per step (64) */
    int max_tokens; /* tokens per step, prefill chunks included (512) */
    int graphs;     /* capture decode-only steps as CUDA graphs (1) */
    int progress;   /* weight-copy progress on stderr: -1 for models over 1 GiB (default), 0 never, 1 always */
    int profile;    /* make the events of per-op timing (llm_cuda_profile_enable); 0 */
    int simt_attention; /* attention through the plain SIMT kernel for every head dim (tests: the oracle of the
                           tensor-core kernels inside the whole step); 0 */
} llm_cuda_params;

llm_cuda_params llm_cuda_default_params(void);
/* The most sequences one step takes for cfg (max_seqs above it: OMNI_ERR_UNSUPPORTED at init); *why: what sets it. */
int llm_cuda_max_seqs(const llm_config *cfg, const char **why);

/* Copy the decoder of `cfg` from the checkpoint (tensor names as llm/model.c) to the GPU. cfg and ckpt are read
 * during the call only. */
omni_status llm_cuda_init(const llm_config *cfg, const omni_ckpt *ckpt, const llm_cuda_params *p, llm_cuda **out);
/* Random bf16 weights with the shapes of `cfg`, made on the device (speed work); prints one stderr line saying so. */
omni_status llm_cuda_init_random(const llm_config *cfg, uint64_t seed, const llm_cuda_params *p, llm_cuda **out);
void llm_cuda_free(llm_cuda *r); /* NULL is a no-op; its caches must be freed before */

/* A KV cache whose K/V live on this GPU (p as for kv_init; max_chunk is set to max_tokens). */
omni_status llm_cuda_cache_init(llm_cuda *r, const kv_params *p, kv_cache **out);
void llm_cuda_cache_free(llm_cuda *r, kv_cache *kv); /* NULL kv is a no-op */

/* One step (the rules of llm_runner_step; entries are validated here too). */
omni_status llm_cuda_step(llm_cuda *r, int n, llm_batch_entry *batch);

/* Bytes on the device: the weights; the runner's workspace; peak in use on the device since init (cudaMemGetInfo,
 * every process). */
size_t llm_cuda_weight_bytes(const llm_cuda *r);
size_t llm_cuda_workspace_bytes(const llm_cuda *r);
size_t llm_cuda_peak_bytes(llm_cuda *r);
/* CUDA graphs ready for decode steps (0 when graphs are off or their capture failed at init). */
int llm_cuda_graphs(const llm_cuda *r);

/* Tests: the n-th following step (n >= 1) fails with OMNI_ERR_NOMEM after its pages are reserved, as a device out
 * of memory in the middle of a step would; 0 cancels. */
void llm_cuda_inject_failure(llm_cuda *r, int n);

/* Tests (MoE models): the following steps take their expert choice from sel [n_layers][T][top_k] (the experts of
 * each of the step's T rows, e.g. the CPU's, llm_model_trace_routing) instead of the router's top-k; the routing
 * weights are still the device's (its router softmax at those experts, renormalised as configured). Such a step
 * runs eagerly, through the per-entry expert kernels, and must have exactly T rows. NULL sel stops. */
omni_status llm_cuda_force_routing(llm_cuda *r, const int32_t *sel, int T);

/* Tests: make sequence `seq` of this runner's cache `kv` hold the committed history of sequence src_seq of a host
 * cache `src` (kv_init, the same format and length): packed blocks byte for byte, raw (window, sink) rows rounded to
 * bf16. The GPU then attends to exactly the CPU's quantization codes (its own differ wherever a bf16 k/v value and
 * the CPU's f32 one fall on both sides of a rounding boundary). */
omni_status llm_cuda_cache_copy_history(llm_cuda *r, kv_cache *kv, int seq, const kv_cache *src, int src_seq);

/* Benchmarks: append n_tokens positions of random bf16 K/V (values ~ N(0,1)-like) to sequence `seq` of a cache of
 * this runner, with the cache's bookkeeping (kv_reserve / kv_commit in max_tokens pieces) - a long context
 * without running its prefill. */
omni_status llm_cuda_fill_random(llm_cuda *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed);

/* Per-op timing (needs params.profile): while enabled, steps run eagerly (no graphs) with CUDA events around every
 * op; enabling clears the totals. llm_cuda_profile gives the milliseconds per op kind, in this fixed order:
 * "embed", "norm", "qkv", "qk_norm_rope", "kv_append", "attention", "o_proj", "mlp_gemm", "swiglu", "moe_route",
 * "moe_experts", "residual", "lm_head", "sample". Returns the number of kinds written (<= cap). */
omni_status llm_cuda_profile_enable(llm_cuda *r, int on);
int llm_cuda_profile(const llm_cuda *r, const char **names, double *ms, int cap);

#ifdef __cplusplus
}
#endif
#endif
