/* sampler.c - greedy / top-k / top-p sampling with a splitmix64-seeded xoshiro256** RNG. */
#define _GNU_SOURCE
#include "llm/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/ops.h"

struct llm_sampler {
    llm_sampler_params p;
    int vocab;
    uint64_t s[4];
    int *idx;   /* [vocab] candidate ids */
    float *val; /* [vocab] candidate logits / probabilities */
};

llm_sampler_params llm_sampler_default_params(void) {
    llm_sampler_params p = {0.7f, 20, 0.8f, 0};
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(llm_sampler *s) {
    uint64_t r = rotl(s->s[1] * 5, 7) * 9, t = s->s[1] << 17;
    s->s[2] ^= s->s[0];
    s->s[3] ^= s->s[1];
    s->s[1] ^= s->s[2];
    s->s[0] ^= s->s[3];
    s->s[2] ^= t;
    s->s[3] = rotl(s->s[3], 45);
    return r;
}

const llm_sampler_params *llm_sampler_get_params(const llm_sampler *s) { return &s->p; }

double llm_sampler_uniform(llm_sampler *s) { return (next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

omni_status llm_sampler_init(const llm_sampler_params *p, int vocab, llm_sampler **out) {
    *out = NULL;
    if (vocab <= 0) return omni_fail(OMNI_ERR_USAGE, "sampler: vocab must be positive");
    if (!(p->top_p >= 0.f)) return omni_fail(OMNI_ERR_USAGE, "top-p must be in [0, 1]");
    llm_sampler *s = calloc(1, sizeof *s);
    if (!s) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->vocab = vocab;
    s->idx = malloc(sizeof(int) * vocab);
    s->val = malloc(sizeof(float) * vocab);
    if (!s->idx || !s->val) {
        llm_sampler_free(s);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    *out = s;
    return OMNI_OK;
}

void llm_sampler_free(llm_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->val);
    free(s);
}

static int cmp_desc(const void *a, const void *b, void *v) {
    const float *val = v;
    int x = *(const int *)a, y = *(const int *)b;
    return val[x] < val[y] ? 1 : val[x] > val[y] ? -1 : (x > y) - (x < y);
}

/* Sort candidate ids by logit descending (ties: lower id first). */
static int sort_candidates(llm_sampler *s, const float *logits) {
    int n = s->vocab, k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    if (k < n) {
        op_topk(logits, n, k, s->idx, s->val);
        return k;
    }
    for (int i = 0; i < n; i++) s->idx[i] = i;
    qsort_r(s->idx, n, sizeof(int), cmp_desc, (void *)logits);
    for (int i = 0; i < n; i++) s->val[i] = logits[s->idx[i]];
    return n;
}

int llm_sampler_sample(llm_sampler *s, const float *logits) {
    if (s->p.temp <= 0.f) return op_argmax(logits, s->vocab);
    int n = sort_candidates(s, logits);
    const float v0 = s->val[0]; /* the largest logit (val[0] itself is overwritten first below) */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->val[i] = expf((s->val[i] - v0) / s->p.temp);
        sum += s->val[i];
    }
    int keep = n;
    if (s->p.top_p < 1.f) {
        double c = 0;
        for (int i = 0; i < n; i++) {
            c += s->val[i] / sum;
            if (c >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < keep; i++) sum += s->val[i];
    }
    double r = llm_sampler_uniform(s) * sum, acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += s->val[i];
        if (r < acc) return s->idx[i];
    }
    return s->idx[keep - 1];
}

omni_status llm_logits_check(const float *logits, int rows, int vocab) {
    int64_t first = -1, n = op_count_nonfinite(logits, (int64_t)rows * vocab, &first);
    if (n == 0) return OMNI_OK;
    return omni_fail(OMNI_ERR_RUNTIME,
                     "the model produced %lld non-finite logits (NaN/Inf; first at position %lld, token %lld): "
                     "corrupt weights or config values?", (long long)n, (long long)(first / vocab),
                     (long long)(first % vocab));
}
