/* moe.h - the sparse MoE MLP of the Qwen3-Omni thinker (router softmax in f32, top-k, optional renormalisation,
 * per-expert SwiGLU, weighted sum accumulated in expert-index order as transformers' index_add does). */
#ifndef OMNI_LLM_MOE_H
#define OMNI_LLM_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    omni_tensor router;              /* [E, H] (mlp.gate.weight) */
    omni_tensor *gate, *up, *down;   /* arrays of E views: gate/up [I, H], down [H, I] */
    int n_experts, top_k, inter, hidden, norm_topk_prob;
    /* Tests (llm_model_trace_routing): when trace_sel is set, every forward records for each of its first
     * trace_cap tokens the chosen experts (trace_sel [cap][top_k], top-k order) and the routing margin
     * (trace_margin [cap]: log p of the k-th choice minus log p of the best expert not chosen; INFINITY when
     * top_k == n_experts). NULL (the default): nothing recorded. */
    int32_t *trace_sel;
    float *trace_margin;
    int trace_cap;
} llm_moe;

/* Floats of scratch llm_moe_forward needs for T tokens (the caller allocates once and reuses). */
size_t llm_moe_scratch_floats(const llm_moe *m, int T);

/* y[T, H] = MoE(x[T, H]) (y must not alias x). Tokens are grouped by expert so each expert's weights are read once
 * per call; 1 <= top_k <= n_experts. */
void llm_moe_forward(const llm_moe *m, float *y, const float *x, int T, float *scratch);
/* Same, with op_linear_ws scratch (ws, ws_floats; see kernels/ops.h) so that it never allocates. */
void llm_moe_forward_ws(const llm_moe *m, float *y, const float *x, int T, float *scratch, float *ws,
                        size_t ws_floats);

#ifdef __cplusplus
}
#endif
#endif
