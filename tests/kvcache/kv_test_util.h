/* kv_test_util.h - helpers for the kvcache tests: a deterministic PRNG, synthetic q/k/v data, feeding a cache
 * in chunks (one or several sequences per step), and fp64 reference attention.
 *
 * Data layout: q [n_layers][N][Hq][D], k/v [n_layers][N][Hkv][D] (N tokens of one sequence). */
#ifndef KV_TEST_UTIL_H
#define KV_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache/kvcache.h"

typedef struct {
    uint64_t s;
} rng_t;

static inline uint64_t rng_next(rng_t *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline float rng_uniform(rng_t *r) { return (float)((rng_next(r) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static inline float rng_normal(rng_t *r) {
    double u1 = ((rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0), u2 = (rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

typedef struct {
    int n_layers, Hq, Hkv, D;
    int64_t N;
    float *q, *k, *v;
} kv_data;

static inline float *kvd_q(const kv_data *d, int l, int64_t t) { return d->q + ((size_t)l * d->N + t) * d->Hq * d->D; }
static inline float *kvd_k(const kv_data *d, int l, int64_t t) { return d->k + ((size_t)l * d->N + t) * d->Hkv * d->D; }
static inline float *kvd_v(const kv_data *d, int l, int64_t t) { return d->v + ((size_t)l * d->N + t) * d->Hkv * d->D; }

static inline kv_data kvd_make(int n_layers, int Hq, int Hkv, int D, int64_t N, uint64_t seed) {
    kv_data d = {n_layers, Hq, Hkv, D, N, NULL, NULL, NULL};
    size_t nq = (size_t)n_layers * N * Hq * D, nk = (size_t)n_layers * N * Hkv * D;
    d.q = malloc(nq * sizeof(float));
    d.k = malloc(nk * sizeof(float));
    d.v = malloc(nk * sizeof(float));
    rng_t r = {seed};
    for (size_t i = 0; i < nq; i++) d.q[i] = rng_normal(&r);
    for (size_t i = 0; i < nk; i++) d.k[i] = rng_normal(&r);
    for (size_t i = 0; i < nk; i++) d.v[i] = rng_normal(&r);
    return d;
}
static inline void kvd_free(kv_data *d) {
    free(d->q);
    free(d->k);
    free(d->v);
}

/* Feed several sequences step by step: at step s sequence i gets steps[i][s] new tokens (0 allowed) of its data,
 * every layer runs kv_forward on the batch, then kv_commit. outs[i]: [n_layers][N_i][Hq][D]. Returns status. */
static inline omni_status kvt_feed_batch(kv_cache *c, int nseq, const int *ids, const kv_data *const *data,
                                         const int *const *steps, int nsteps, float *const *outs) {
    const kv_data *d0 = data[0];
    int Hq = d0->Hq, Hkv = d0->Hkv, D = d0->D, L = d0->n_layers;
    int64_t Tmax = 0, *pos = calloc((size_t)nseq, sizeof(int64_t));
    for (int s = 0; s < nsteps; s++) {
        int64_t t = 0;
        for (int i = 0; i < nseq; i++) t += steps[i][s];
        if (t > Tmax) Tmax = t;
    }
    float *q = malloc((size_t)(Tmax + 1) * Hq * D * 4), *k = malloc((size_t)(Tmax + 1) * Hkv * D * 4);
    float *v = malloc((size_t)(Tmax + 1) * Hkv * D * 4), *o = malloc((size_t)(Tmax + 1) * Hq * D * 4);
    int *n_new = malloc((size_t)nseq * sizeof(int));
    omni_status st = OMNI_OK;
    for (int s = 0; s < nsteps && !st; s++) {
        for (int i = 0; i < nseq; i++) n_new[i] = steps[i][s];
        for (int l = 0; l < L && !st; l++) {
            int64_t row = 0;
            for (int i = 0; i < nseq; i++)
                for (int j = 0; j < n_new[i]; j++, row++) {
                    memcpy(q + row * Hq * D, kvd_q(data[i], l, pos[i] + j), (size_t)Hq * D * 4);
                    memcpy(k + row * Hkv * D, kvd_k(data[i], l, pos[i] + j), (size_t)Hkv * D * 4);
                    memcpy(v + row * Hkv * D, kvd_v(data[i], l, pos[i] + j), (size_t)Hkv * D * 4);
                }
            st = kv_forward(c, l, nseq, ids, n_new, q, k, v, o, Hq, 1.0f / sqrtf((float)D));
            row = 0;
            for (int i = 0; i < nseq && !st; i++)
                for (int j = 0; j < n_new[i]; j++, row++)
                    memcpy(outs[i] + (((size_t)l * data[i]->N) + pos[i] + j) * Hq * D, o + row * Hq * D,
                           (size_t)Hq * D * 4);
        }
        if (!st) st = kv_commit(c, nseq, ids, n_new);
        for (int i = 0; i < nseq; i++) pos[i] += n_new[i];
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(n_new);
    free(pos);
    return st;
}

/* One sequence fed with the given chunk sizes. */
static inline omni_status kvt_feed(kv_cache *c, int id, const kv_data *d, const int *splits, int nsplit, float *out) {
    const kv_data *dd[1] = {d};
    const int *ss[1] = {splits};
    float *oo[1] = {out};
    return kvt_feed_batch(c, 1, &id, dd, ss, nsplit, oo);
}

/* fp64 attention of query q[D] (head h) over keys/values 0..n-1 of layer l; key/value j comes from kf/vf
 * (arrays [N][Hkv][D] of float) . out[D] in double. */
static inline void ref_attention(const float *q, const float *kf, const float *vf, int64_t n, int Hkv, int D, int g,
                                 double scale, double *out, double *sc) {
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        const float *kr = kf + ((size_t)j * Hkv + g) * D;
        double s = 0.0;
        for (int d = 0; d < D; d++) s += (double)q[d] * kr[d];
        sc[j] = s * scale;
        if (sc[j] > m) m = sc[j];
    }
    for (int d = 0; d < D; d++) out[d] = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double w = exp(sc[j] - m);
        sum += w;
        const float *vr = vf + ((size_t)j * Hkv + g) * D;
        for (int d = 0; d < D; d++) out[d] += w * vr[d];
    }
    for (int d = 0; d < D; d++) out[d] /= sum;
}

/* ||a - ref|| / ||ref|| for one row. */
static inline double rel_err(const float *a, const double *ref, int D) {
    double num = 0.0, den = 0.0;
    for (int d = 0; d < D; d++) {
        num += (a[d] - ref[d]) * (a[d] - ref[d]);
        den += ref[d] * ref[d];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

static inline kv_cache *kvt_cache(const char *mode, int window, int n_sink, int n_layers, int Hkv, int D,
                                  int64_t max_tokens, int max_seqs, int max_chunk) {
    kv_params p = kv_default_params();
    if (kv_parse_mode(mode, &p.fmt)) return NULL;
    p.fmt.window = window;
    p.fmt.n_sink = n_sink;
    p.n_layers = n_layers;
    p.n_kv_heads = Hkv;
    p.head_dim = D;
    p.max_tokens = max_tokens;
    p.max_seqs = max_seqs;
    p.max_chunk = max_chunk;
    kv_cache *c = NULL;
    return kv_init(&p, &c) ? NULL : c;
}

#endif
