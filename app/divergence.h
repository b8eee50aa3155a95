/* divergence.h - how far one next-token distribution is from another: KL(A || B) of the softmax distributions of
 * two logit rows (double precision) and the top token of each. `omni generate --compare` averages it over an
 * answer; the demo charts it token by token. */
#ifndef OMNI_APP_DIVERGENCE_H
#define OMNI_APP_DIVERGENCE_H

typedef struct {
    double kl;        /* KL(softmax(a) || softmax(b)) in nats, >= 0 */
    int top_a, top_b; /* argmax of each row (first index on ties) */
} divergence_row;

/* a, b: [V] logits. */
divergence_row divergence_of(const float *a, const float *b, int V);

#endif
