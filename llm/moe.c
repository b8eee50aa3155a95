/* moe.c - sparse MoE MLP (see moe.h). Tokens are grouped by expert (ascending expert index, tokens ascending
 * within an expert), so each expert's three matrices are read once per call and the weighted sum is accumulated in
 * the order of transformers' index_add loop. y must not alias x.
 * Scratch layout for T tokens (E experts, k top, H hidden, I inter):
 *   probs [T, E] | sel_w [T, k] | sel_e [T, k] (int32) | rows [T] (int32) | rw [T] | xg [T, H] | g [T, I] |
 *   u [T, I] | og [T, H] */
#include "llm/moe.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/ops.h"

size_t llm_moe_scratch_floats(const llm_moe *m, int T) {
    size_t t = (size_t)T;
    return t * m->n_experts + 2 * t * m->top_k + 2 * t + 2 * t * m->hidden + 2 * t * m->inter;
}

/* Record token t's choice and margin (moe.h, trace_sel): p [E] its probabilities, pk the k-th largest. */
static void trace(const llm_moe *m, int t, const float *p, const int32_t *sel, float pk) {
    const int E = m->n_experts, k = m->top_k;
    float best = -1.f; /* the largest probability not chosen */
    for (int e = 0; e < E; e++) {
        int chosen = 0;
        for (int j = 0; j < k && !chosen; j++) chosen = sel[j] == e;
        if (!chosen && p[e] > best) best = p[e];
    }
    memcpy(m->trace_sel + (size_t)t * k, sel, sizeof(int32_t) * k);
    m->trace_margin[t] = best < 0.f ? INFINITY : best > 0.f ? logf(pk) - logf(best) : INFINITY;
}

/* Router: softmax over experts in f32, top-k (lower index first on ties, as torch.topk), optional
 * renormalisation. Writes straight into the per-token selection arrays (no bound on k). */
static void route(const llm_moe *m, const float *x, int T, float *probs, float *sel_w, int32_t *sel_e, float *ws,
                  size_t ws_floats) {
    int E = m->n_experts, k = m->top_k;
    op_linear_ws(probs, x, T, &m->router, NULL, ws, ws_floats);
    op_softmax(probs, T, E);
    for (int t = 0; t < T; t++) {
        float *w = sel_w + (size_t)t * k;
        op_topk(probs + (int64_t)t * E, E, k, (int *)(sel_e + (size_t)t * k), w);
        if (m->trace_sel && t < m->trace_cap) trace(m, t, probs + (int64_t)t * E, sel_e + (size_t)t * k, w[k - 1]);
        if (!m->norm_topk_prob) continue;
        float sum = 0;
        for (int j = 0; j < k; j++) sum += w[j];
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
}

void llm_moe_forward_ws(const llm_moe *m, float *y, const float *x, int T, float *scratch, float *ws,
                        size_t ws_floats) {
    int E = m->n_experts, k = m->top_k, H = m->hidden, I = m->inter;
    float *probs = scratch, *sel_w = probs + (size_t)T * E;
    int32_t *sel_e = (int32_t *)(sel_w + (size_t)T * k), *rows = sel_e + (size_t)T * k;
    float *rw = (float *)(rows + T), *xg = rw + T, *g = xg + (size_t)T * H, *u = g + (size_t)T * I;
    float *og = u + (size_t)T * I;
    route(m, x, T, probs, sel_w, sel_e, ws, ws_floats);
    memset(y, 0, sizeof(float) * (size_t)T * H);
    for (int e = 0; e < E; e++) {
        int n = 0; /* gather the tokens routed to expert e */
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (sel_e[t * k + j] == e) {
                    rows[n] = t;
                    rw[n] = sel_w[t * k + j];
                    memcpy(xg + (size_t)n * H, x + (size_t)t * H, sizeof(float) * H);
                    n++;
                }
        if (!n) continue;
        op_linear_ws(g, xg, n, &m->gate[e], NULL, ws, ws_floats);
        op_linear_ws(u, xg, n, &m->up[e], NULL, ws, ws_floats);
        op_silu_mul(g, g, u, (int64_t)n * I);
        op_linear_ws(og, g, n, &m->down[e], NULL, ws, ws_floats);
        for (int i = 0; i < n; i++) {
            float *yr = y + (size_t)rows[i] * H;
            const float *orow = og + (size_t)i * H;
            for (int h = 0; h < H; h++) yr[h] += rw[i] * orow[h];
        }
    }
}

void llm_moe_forward(const llm_moe *m, float *y, const float *x, int T, float *scratch) {
    llm_moe_forward_ws(m, y, x, T, scratch, NULL, 0);
}
