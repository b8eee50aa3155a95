/* logit_cmp.h - comparing GPU logits with the CPU's, shared by the GPU end-to-end tests (test_gpu_decoder,
 * test_gpu_media_e2e; include once per test program, everything is static): the KL divergence of two logit rows
 * and the CPU row's top-2 gap, which decides whether an argmax must agree. */
#ifndef OMNI_LOGIT_CMP_H
#define OMNI_LOGIT_CMP_H

#include <math.h>

#include "kernels/ops.h"

/* KL(softmax(p) || softmax(q)) of two logit rows of V entries, in nats. */
static double kl_div(const float *p_logits, const float *q_logits, int V) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
    for (int i = 0; i < V; i++) mp = fmax(mp, p_logits[i]), mq = fmax(mq, q_logits[i]);
    for (int i = 0; i < V; i++) sp += exp(p_logits[i] - mp), sq += exp(q_logits[i] - mq);
    for (int i = 0; i < V; i++) {
        const double lp = p_logits[i] - mp - log(sp), lq = q_logits[i] - mq - log(sq);
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

/* The CPU's top-2 gap relative to its largest |logit| (infinite for one entry). */
static double top2_gap(const float *cpu, int V) {
    int idx[2];
    float val[2];
    if (V < 2) return INFINITY;
    op_topk(cpu, V, 2, idx, val);
    double mx = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, fabs(cpu[i]));
    return (val[0] - val[1]) / mx;
}

#endif
