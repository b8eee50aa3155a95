/* test_sampler.c - llm/sampler.c draws from the distribution it documents: greedy is the argmax (first on ties);
 * otherwise p_i ∝ exp((l_i - max) / temp) over the top-k candidates (descending logit, lower id first on ties),
 * cut to the smallest prefix whose mass reaches top_p. Each case draws N tokens and compares the counts with the
 * exact probabilities: |count - N p| <= 5 sqrt(N p (1 - p)) + 1 for every token (a 5-sigma band; a wrong weight,
 * order or cut moves some count by far more), and tokens outside the support never appear. Same seed -> same
 * tokens; one uniform drawn per sampled token (none when greedy). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llm/sampler.h"

#define V 64
#define N 40000

/* Exact probabilities of the documented procedure, computed independently (double, explicit sort). */
static void expected(const float *l, float temp, int top_k, float top_p, double *p) {
    int idx[V];
    for (int i = 0; i < V; i++) idx[i] = i;
    for (int i = 1; i < V; i++) /* insertion sort: descending logit, lower id first */
        for (int j = i; j > 0 && (l[idx[j]] > l[idx[j - 1]]); j--) {
            int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
    int k = top_k > 0 && top_k < V ? top_k : V;
    double w[V], sum = 0;
    for (int i = 0; i < k; i++) w[i] = exp((double)(l[idx[i]] - l[idx[0]]) / temp), sum += w[i];
    int keep = k;
    if (top_p < 1.f) {
        double c = 0;
        for (int i = 0; i < k; i++) {
            c += w[i] / sum;
            if (c >= top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double ks = 0;
    for (int i = 0; i < keep; i++) ks += w[i];
    memset(p, 0, sizeof(double) * V);
    for (int i = 0; i < keep; i++) p[idx[i]] = w[i] / ks;
}

static void dist_case(const char *what, const float *l, float temp, int top_k, float top_p, uint64_t seed) {
    llm_sampler_params sp = {temp, top_k, top_p, seed};
    llm_sampler *s, *again;
    if (llm_sampler_init(&sp, V, &s) || llm_sampler_init(&sp, V, &again)) {
        CHECK(0, "%s: init", what);
        return;
    }
    double p[V];
    expected(l, temp, top_k, top_p, p);
    int cnt[V] = {0}, same = 1;
    for (int n = 0; n < N; n++) {
        int t = llm_sampler_sample(s, l);
        cnt[t >= 0 && t < V ? t : 0]++;
        same &= t == llm_sampler_sample(again, l);
    }
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < V; i++) {
        double e = N * p[i], band = 5 * sqrt(N * p[i] * (1 - p[i])) + 1, d = fabs(cnt[i] - e);
        if (d / band > worst) worst = d / band;
        if (d > band) {
            if (bad++ < 3) fprintf(stderr, "  %s: token %d drawn %d times, expected %.1f +- %.1f\n", what, i, cnt[i], e, band);
        }
    }
    CHECK(bad == 0, "%s: %d tokens outside the 5-sigma band", what, bad);
    CHECK(same, "%s: the same seed gave different tokens", what);
    printf("%-40s worst |count - Np| / band = %.2f\n", what, worst);
    llm_sampler_free(s), llm_sampler_free(again);
}

int main(void) {
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % 17) * 0.25f - 2.f; /* ties in every value */
    l[5] = l[9] = l[40] = 2.5f;                                                  /* a three-way tie at the top */
    dist_case("temp 1, all", l, 1.f, 0, 1.f, 1);
    dist_case("temp 0.7, top_k 20, top_p 0.8", l, 0.7f, 20, 0.8f, 2);
    dist_case("temp 1.3, top_k 5", l, 1.3f, 5, 1.f, 3);
    dist_case("temp 0.5, top_p 0.5", l, 0.5f, 0, 0.5f, 4);
    dist_case("temp 2, top_k 40, top_p 0.95", l, 2.f, 40, 0.95f, 5);
    /* greedy: the first of the tied maxima, and no uniform drawn */
    llm_sampler_params g = {0.f, 20, 0.8f, 9}, h = {0.7f, 20, 0.8f, 9};
    llm_sampler *gs, *hs, *ref;
    llm_sampler_init(&g, V, &gs), llm_sampler_init(&h, V, &hs), llm_sampler_init(&h, V, &ref);
    CHECK(llm_sampler_sample(gs, l) == 5, "greedy picks %d, want 5 (the first of the tied maxima)",
          llm_sampler_sample(gs, l));
    llm_sampler_sample(hs, l); /* one sampled token = exactly one uniform */
    llm_sampler_uniform(ref);
    CHECK(llm_sampler_uniform(hs) == llm_sampler_uniform(ref), "a sampled token draws one uniform");
    llm_sampler_free(gs), llm_sampler_free(hs), llm_sampler_free(ref);
    return check_exit();
}
