/* sampler.h - next-token selection: greedy, or temperature + top-k + top-p with a seeded RNG.
 *
 * Order (as llama.cpp / HF): top-k, then softmax at temperature, then top-p (smallest set with cumulative
 * probability >= p), then a draw. temp <= 0 means greedy (argmax, first index on ties). */
#ifndef OMNI_LLM_SAMPLER_H
#define OMNI_LLM_SAMPLER_H

#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float temp;     /* <= 0: greedy */
    int top_k;      /* <= 0: no limit */
    float top_p;    /* >= 1: no limit; 0: only the most likely token is kept */
    uint64_t seed;
} llm_sampler_params;

typedef struct llm_sampler llm_sampler;

llm_sampler_params llm_sampler_default_params(void); /* temp 0.7, top_k 20, top_p 0.8 (Qwen3-VL Instruct) */
omni_status llm_sampler_init(const llm_sampler_params *p, int vocab, llm_sampler **out);
void llm_sampler_free(llm_sampler *s);
/* Pick the next token from logits [vocab] (not modified). Greedy (temp <= 0) draws nothing from the RNG; any
 * other setting draws exactly one llm_sampler_uniform per call (a device sampler does the same, so that the
 * token streams of a seed match across devices). */
int llm_sampler_sample(llm_sampler *s, const float *logits);
const llm_sampler_params *llm_sampler_get_params(const llm_sampler *s);
/* Refuse logits [rows, vocab] that hold NaN or Inf (corrupt weights or config values, overflow): OMNI_ERR_RUNTIME
 * with a message giving the count and the first row/id, so a run stops with exit 4 instead of sampling token 0.
 * Call it on every logits row before sampling (one pass over vocab floats: negligible next to the forward). */
omni_status llm_logits_check(const float *logits, int rows, int vocab);
/* Uniform float in [0, 1) from the sampler's RNG (exposed for tests). */
double llm_sampler_uniform(llm_sampler *s);

#ifdef __cplusplus
}
#endif
#endif
