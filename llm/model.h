/* model.h - the Qwen3 text decoder (dense Qwen3-VL and MoE Qwen3-Omni thinker share one layer loop).
 *
 * Weights stay in the mmap'd checkpoint as stored (bf16/f16/f32); the CPU path computes in f32.
 * The decoder takes token ids plus optional spans of precomputed embeddings (from any encoder) and explicit
 * 3-stream MRoPE positions, so it does not know what produced them. Attention and the KV history live in a
 * kv_cache (kvcache/kvcache.h); the model never owns a cache, so several caches can share one model. */
#ifndef OMNI_LLM_MODEL_H
#define OMNI_LLM_MODEL_H

#include "kernels/safetensors.h"
#include "kvcache/kvcache.h"
#include "llm/config.h"

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

/* Load config + checkpoint of a model directory. Validates every tensor's presence, dtype and shape. */
omni_status llm_model_load(const char *model_dir, llm_model **out);
void llm_model_free(llm_model *m);

const llm_config *llm_model_config(const llm_model *m);
const omni_ckpt *llm_model_ckpt(const llm_model *m);
/* Bytes of decoder weights (mapped). */
size_t llm_model_weight_bytes(const llm_model *m);

/* kv_params matching this model (layers, kv heads, head_dim); the caller sets format and capacity. */
kv_params llm_model_kv_params(const llm_model *m);

/* Run one chunk of one sequence through the decoder; the chunk's K/V are appended to `seq_id` in `kv`.
 * logits: NULL, or [vocab] for the last position. */
omni_status llm_forward(llm_model *m, kv_cache *kv, int seq_id, const llm_input *in, float *logits);
/* Several sequences in one step (continuous batching): in[i] is a chunk of sequence seq_ids[i] (distinct ids,
 * at most 256); logits[i] (NULL entries or a NULL array: none) receives that sequence's last-position logits.
 * Equals running each sequence alone up to f32 summation order (the GEMMs see more rows). */
omni_status llm_forward_batch(llm_model *m, kv_cache *kv, int n_seq, const int *seq_ids, const llm_input *in,
                              float *const *logits);
/* Same as llm_forward, with logits for every position of the chunk ([n_tokens, vocab]) when all_logits != 0. */
omni_status llm_forward_ex(llm_model *m, kv_cache *kv, int seq_id, const llm_input *in, float *logits,
                           int all_logits);

#ifdef __cplusplus
}
#endif
#endif
