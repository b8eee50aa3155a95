/* model.h - what the Qwen3 text decoder IS: config + weights (dense Qwen3-VL and MoE Qwen3-Omni thinker share
 * one layer loop), immutable after load and safe to share between threads, runners and caches.
 *
 * Weights stay in the mmap'd checkpoint as stored (bf16/f16/f32). How a step runs lives in llm/runner.h (one
 * runner per device, owning the scratch); llm_engine (llm/engine.h) owns requests. The decoder takes token ids
 * plus optional spans of precomputed embeddings (from any encoder) and explicit 3-stream MRoPE positions, so it
 * does not know what produced them. Attention and the KV history live in a kv_cache (kvcache/kvcache.h); the
 * model never owns a cache, so several caches can share one model. */
#ifndef OMNI_LLM_MODEL_H
#define OMNI_LLM_MODEL_H

#include "kernels/safetensors.h"
#include "kvcache/kvcache.h"
#include "llm/config.h"
#include "llm/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llm_model llm_model;

/* Precomputed embeddings that replace the token embeddings at chunk positions [start, start+len). */
typedef struct {
    int start, len;
    const float *embd;         /* [len, hidden] */
    int n_deepstack;           /* 0..4: deepstack[k] is added after decoder layer k at these positions */
    const float *deepstack[4]; /* each [len, hidden] */
} llm_span;

typedef struct {
    int n_tokens;
    const int32_t *ids; /* [n_tokens]; ids under a span are ignored (normally the pad token) */
    const int32_t *pos; /* [3 * n_tokens]: T stream, then H, then W (pos[s*n_tokens + i]); NULL = text-only,
                           positions kv_seq_len .. + n_tokens - 1 on all streams */
    int n_spans;
    const llm_span *spans;
} llm_input;

typedef struct {
    int check_finite; /* 1: scan every decoder weight for NaN/Inf at load (reads all weights once); default 0 */
} llm_model_params;

llm_model_params llm_model_default_params(void);

/* Load config + checkpoint of a model directory. Validates every tensor's presence, dtype and shape (and, with
 * check_finite, its values: OMNI_ERR_MODEL naming the first tensor holding NaN/Inf). p NULL: defaults. */
omni_status llm_model_load_params(const char *model_dir, const llm_model_params *p, llm_model **out);
/* = llm_model_load_params(model_dir, NULL, out) */
omni_status llm_model_load(const char *model_dir, llm_model **out);
/* A model of `model_dir`/config.json without weights, for speed runs at real shapes: a runner that can make random
 * weights of the config's shapes itself (the CUDA runner, on the device: llm/cuda/llm_cuda.h llm_cuda_init_random)
 * makes them from `seed`; the CPU runner refuses it (OMNI_ERR_UNSUPPORTED). Its llm_model_ckpt is NULL, its
 * llm_model_weights hold empty views, llm_model_weight_bytes is the bf16 size of the weights the config implies. */
omni_status llm_model_init_random(const char *model_dir, uint64_t seed, llm_model **out);
/* 1 for a model of llm_model_init_random (then *seed, when seed is not NULL, is its seed), else 0. */
int llm_model_is_random(const llm_model *m, uint64_t *seed);
void llm_model_free(llm_model *m); /* NULL is a no-op */

/* Weight views of one decoder layer (checkpoint names without the "<prefix>layers.N." part). */
typedef struct {
    omni_tensor in_norm, post_norm; /* input_layernorm, post_attention_layernorm [H] */
    omni_tensor q, k, v, o;         /* self_attn.{q,k,v,o}_proj: [Hq*D, H], [Hkv*D, H], [Hkv*D, H], [H, Hq*D] */
    omni_tensor q_norm, k_norm;     /* self_attn.{q,k}_norm [D] */
    omni_tensor gate, up, down;     /* dense mlp.{gate,up,down}_proj: [I, H], [I, H], [H, I] (unset for MoE) */
    llm_moe moe;                    /* MoE layers: moe.n_experts > 0 (router + expert views) */
} llm_layer_weights;

/* Every weight a runner needs, as read-only views into the mapping, plus the RoPE tables made at load. */
typedef struct {
    omni_tensor embed;                /* embed_tokens [V, H] */
    omni_tensor norm;                 /* final norm [H] */
    omni_tensor lm_head;              /* [V, H] (== embed when tied) */
    const llm_layer_weights *layers;  /* [n_layers] */
    const float *inv_freq;            /* [D/2] as transformers computes it in fp32 */
    const int *rope_stream;           /* [D/2]: position stream (0 T, 1 H, 2 W) of frequency slot j (MRoPE) */
} llm_weights;

const llm_weights *llm_model_weights(const llm_model *m);

const llm_config *llm_model_config(const llm_model *m);
const omni_ckpt *llm_model_ckpt(const llm_model *m);
/* Bytes of decoder weights (mapped). */
size_t llm_model_weight_bytes(const llm_model *m);

/* Tests: record the MoE routing of every following forward on this model (llm_moe's trace fields, per layer):
 * sel [n_layers][cap][top_k] and margin [n_layers][cap] receive, for the first cap tokens of each call, the
 * experts chosen and the margin of the choice in log-probability (the k-th choice minus the best one not chosen).
 * Each call overwrites them; meaningful for single-sequence calls (llm_forward). NULL sel stops. The model must
 * not be used by other threads meanwhile. OMNI_ERR_USAGE on a dense model. */
omni_status llm_model_trace_routing(llm_model *m, int32_t *sel, float *margin, int cap);

/* kv_params matching this model (layers, kv heads, head_dim); the caller sets format and capacity. */
kv_params llm_model_kv_params(const llm_model *m);

/* Convenience wrappers over a temporary CPU runner (llm/runner.h), made and freed per call (so they allocate;
 * long-running code uses an llm_runner or the llm_engine). `kv` may come from kv_init directly.
 * Run one chunk of one sequence through the decoder; the chunk's K/V are appended to `seq_id` in `kv`.
 * logits: NULL, or [vocab] for the last position. */
omni_status llm_forward(const llm_model *m, kv_cache *kv, int seq_id, const llm_input *in, float *logits);
/* Several sequences in one step (continuous batching): in[i] is a chunk of sequence seq_ids[i] (distinct ids,
 * at most 1024); logits[i] (NULL entries or a NULL array: none) receives that sequence's last-position logits.
 * Equals running each sequence alone up to f32 summation order (the GEMMs see more rows). */
omni_status llm_forward_batch(const llm_model *m, kv_cache *kv, int n_seq, const int *seq_ids, const llm_input *in,
                              float *const *logits);
/* Same as llm_forward, with logits for every position of the chunk ([n_tokens, vocab]) when all_logits != 0. */
omni_status llm_forward_ex(const llm_model *m, kv_cache *kv, int seq_id, const llm_input *in, float *logits,
                           int all_logits);

#ifdef __cplusplus
}
#endif
#endif
