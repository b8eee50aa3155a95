/* divergence.c - KL(A || B) and top-1 of two logit rows (see divergence.h). */
#include "app/divergence.h"

#include <math.h>

/* log-sum-exp of logits (double). */
static double lse(const float *x, int V) {
    float mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

static int argmax(const float *x, int V) {
    int b = 0;
    for (int i = 1; i < V; i++) b = x[i] > x[b] ? i : b;
    return b;
}

divergence_row divergence_of(const float *a, const float *b, int V) {
    double la = lse(a, V), lb = lse(b, V), kl = 0;
    for (int i = 0; i < V; i++) {
        double pa = (double)a[i] - la, p = exp(pa);
        if (p > 0) kl += p * (pa - ((double)b[i] - lb));
    }
    divergence_row r = {kl > 0 ? kl : 0, argmax(a, V), argmax(b, V)};
    return r;
}
