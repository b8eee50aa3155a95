/* sample.cu - next-token sampling on the device with llm/sampler.c's semantics (see omni_cuda_sample in
 * kernels/ops_cuda.h for what "equal" means). One block of 512 threads per row; the uniform draw of a row comes
 * from the host (llm_sampler_uniform), so the generator stream stays on the host.
 *
 * Order of candidates = descending logit, lower id first on ties; a logit's radix key (32-bit, larger float ->
 * larger key, -0 -> +0, NaN -> -inf) gives that order with the index as tiebreak.
 *  - greedy: block argmax.
 *  - top_k in 1..1024 (or a vocabulary <= 1024): a 4-pass radix select (8 bits per pass, integer histograms)
 *    finds the k-th key, the candidates (ties at the k-th key taken in index order) are gathered and bitonic-sorted
 *    in shared memory, and thread 0 runs llm/sampler.c's loop (expf at temperature, double sums, top-p cut, draw).
 *  - otherwise: the same selection, then two weighted radix descents over the row (weights expf((l - max)/temp)
 *    in 2^-44 fixed point, summed with integer atomics: exact, order-independent, deterministic) find the top-p cut
 *    and the drawn element. */
#include <stdint.h>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels/ops_cuda.h"

#define SB 512            /* threads per block (<= 1024, a multiple of 32) */
#define FAST_MAX 1024     /* candidates sorted in shared memory */
#define FIX_ONE 0x1p44    /* fixed-point scale of the weights: every weight <= 1, vocab < 2^19 -> sums < 2^63 */

/* ---- keys and block scans ---------------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t fkey(float f) {
    if (!(f == f)) f = -INFINITY;
    if (f == 0.f) f = 0.f;
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Exclusive scan of one value per thread over the block (SB threads); *total gets the sum. ws: 33 T in smem. */
template <typename T> __device__ T block_scan_excl(T v, T *ws, T *total) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = SB / 32;
    T incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    __syncthreads();
    if (lane == 31) ws[wid] = incl;
    __syncthreads();
    if (wid == 0) {
        T s = lane < nw ? ws[lane] : (T)0, si = s;
        for (int o = 1; o < 32; o <<= 1) {
            T y = __shfl_up_sync(0xffffffffu, si, o);
            if (lane >= o) si += y;
        }
        ws[lane] = si - s;
        if (lane == 31) ws[32] = si;
    }
    __syncthreads();
    *total = ws[32];
    return ws[wid] + incl - v;
}

struct samp_smem {
    uint32_t hist[256];
    unsigned long long whist[256];
    unsigned long long ws64[33];
    int ws32[33];
    uint64_t sortk[FAST_MAX];
    float ev[FAST_MAX];
    int s_int[4];
    uint32_t s_u32[2];
    unsigned long long s_u64[2];
    float s_f;
};

/* The candidate set after top-k: key > tau, or key == tau and index <= cut. */
struct topk_set {
    uint32_t tau;
    int cut;
    __device__ bool has(uint32_t key, int i) const { return key > tau || (key == tau && i <= cut); }
};

/* Radix select: the k-th largest key tau and rem >= 1 such that #(key > tau) = k - rem (k <= n). */
__device__ void radix_kth(const float *l, int n, int k, samp_smem *sm, uint32_t *tau, int *rem) {
    uint32_t prefix = 0, mask = 0;
    int need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += SB) sm->hist[d] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += SB) {
            uint32_t key = fkey(l[i]);
            if ((key & mask) == prefix) atomicAdd(&sm->hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = 255;
            for (; d > 0; d--) {
                if ((int)sm->hist[d] >= need) break;
                need -= sm->hist[d];
            }
            sm->s_int[0] = d, sm->s_int[1] = need;
        }
        __syncthreads();
        prefix |= (uint32_t)sm->s_int[0] << shift, mask |= 255u << shift, need = sm->s_int[1];
        __syncthreads();
    }
    *tau = prefix, *rem = need;
}

/* Index of the rem-th element (in index order) whose key equals tau. */
__device__ int tie_cut(const float *l, int n, uint32_t tau, int rem, samp_smem *sm) {
    int base = 0;
    if (threadIdx.x == 0) sm->s_int[2] = n - 1;
    for (int c0 = 0; c0 < n; c0 += SB) {
        int i = c0 + threadIdx.x, f = i < n && fkey(l[i]) == tau, tot;
        int ex = block_scan_excl<int>(f, sm->ws32, &tot);
        if (f && base + ex + 1 == rem) sm->s_int[2] = i;
        base += tot;
        if (base >= rem) break;
    }
    __syncthreads();
    return sm->s_int[2];
}

__device__ __forceinline__ unsigned long long fix_weight(float v, float mx, float temp) {
    if (!(v == v)) return 0; /* NaN counts as -inf */
    return __double2ull_rn((double)expf((v - mx) / temp) * FIX_ONE);
}

/* In descending order over the elements of `in` (optionally also limited by `in2`), the first element whose
 * inclusive cumulative weight is >= target (strict = 0) or > target (strict = 1); the last element if none. */
__device__ int weighted_find(const float *l, int n, topk_set in, const topk_set *in2, float mx, float temp,
                             unsigned long long target, int strict, samp_smem *sm) {
    uint32_t prefix = 0, mask = 0;
    unsigned long long before = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += SB) sm->whist[d] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += SB) {
            float v = l[i];
            uint32_t key = fkey(v);
            if ((key & mask) == prefix && in.has(key, i) && (!in2 || in2->has(key, i)))
                atomicAdd(&sm->whist[(key >> shift) & 255], fix_weight(v, mx, temp));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = 255, last = -1;
            for (; d >= 0; d--) {
                unsigned long long h = sm->whist[d];
                if (!h) continue;
                if (strict ? before + h > target : before + h >= target) break;
                before += h, last = d;
            }
            if (d < 0) { /* rounding: nothing crossed; take the last bin that has weight */
                d = last < 0 ? 0 : last;
                before -= last < 0 ? 0 : sm->whist[d];
            }
            sm->s_int[0] = d;
            sm->s_u64[0] = before;
        }
        __syncthreads();
        prefix |= (uint32_t)sm->s_int[0] << shift, mask |= 255u << shift, before = sm->s_u64[0];
        __syncthreads();
    }
    /* ties at the final key, in index order: the first crossing in a chunk is the lowest crossing index */
    if (threadIdx.x == 0) sm->s_int[2] = INT32_MAX, sm->s_int[3] = -1;
    for (int c0 = 0; c0 < n; c0 += SB) {
        int i = c0 + threadIdx.x;
        bool ok = false;
        unsigned long long w = 0;
        if (i < n) {
            float v = l[i];
            uint32_t key = fkey(v);
            ok = key == prefix && in.has(key, i) && (!in2 || in2->has(key, i));
            if (ok) w = fix_weight(v, mx, temp);
        }
        unsigned long long tot, ex = block_scan_excl<unsigned long long>(w, sm->ws64, &tot); /* syncs first */
        unsigned long long cum = before + ex + w;
        if (ok && (strict ? cum > target : cum >= target)) atomicMin(&sm->s_int[2], i);
        if (ok) atomicMax(&sm->s_int[3], i);
        __syncthreads();
        if (sm->s_int[2] != INT32_MAX) break;
        before += tot;
    }
    __syncthreads();
    int r = sm->s_int[2] != INT32_MAX ? sm->s_int[2] : sm->s_int[3];
    __syncthreads();
    return r < 0 ? 0 : r;
}

/* Bitonic sort of sm->sortk[0..FAST_MAX) in descending order. */
__device__ void sort_desc(samp_smem *sm) {
    for (int size = 2; size <= FAST_MAX; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int i = threadIdx.x; i < FAST_MAX; i += SB) {
                int j = i ^ stride;
                if (j <= i) continue;
                uint64_t a = sm->sortk[i], b = sm->sortk[j];
                bool desc = (i & size) == 0;
                if (desc ? a < b : a > b) sm->sortk[i] = b, sm->sortk[j] = a;
            }
        }
    __syncthreads();
}

/* Greedy: index of the largest logit, the first on ties. */
__device__ int block_argmax(const float *l, int n, samp_smem *sm) {
    uint64_t best = 0; /* (key << 32) | ~index: the maximum is the answer */
    for (int i = threadIdx.x; i < n; i += SB) {
        uint64_t c = ((uint64_t)fkey(l[i]) << 32) | (uint32_t)~(uint32_t)i;
        best = c > best ? c : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        uint64_t y = __shfl_xor_sync(0xffffffffu, best, o);
        best = y > best ? y : best;
    }
    if ((threadIdx.x & 31) == 0) sm->sortk[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x < 32) {
        best = threadIdx.x < SB / 32 ? sm->sortk[threadIdx.x] : 0;
        for (int o = 16; o > 0; o >>= 1) {
            uint64_t y = __shfl_xor_sync(0xffffffffu, best, o);
            best = y > best ? y : best;
        }
        if (threadIdx.x == 0) sm->s_int[0] = (int)~(uint32_t)best;
    }
    __syncthreads();
    return sm->s_int[0];
}

/* Few candidates: gather the top-k set, sort it, weights in parallel, then llm/sampler.c's loop in thread 0. */
__device__ int sample_fast(const float *l, int n, int k, topk_set set, float temp, float top_p, double u,
                           samp_smem *sm) {
    for (int i = threadIdx.x; i < FAST_MAX; i += SB) sm->sortk[i] = 0;
    if (threadIdx.x == 0) sm->s_int[0] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += SB) {
        uint32_t key = fkey(l[i]);
        if (set.has(key, i)) sm->sortk[atomicAdd(&sm->s_int[0], 1)] = ((uint64_t)key << 32) | (uint32_t)~(uint32_t)i;
    }
    sort_desc(sm);
    const float v0 = l[~(uint32_t)sm->sortk[0]];
    for (int i = threadIdx.x; i < k; i += SB) sm->ev[i] = expf((l[~(uint32_t)sm->sortk[i]] - v0) / temp);
    __syncthreads();
    if (threadIdx.x == 0) { /* llm_sampler_sample after sort_candidates, in the same order and precision */
        const float *val = sm->ev;
        double sum = 0;
        for (int i = 0; i < k; i++) sum += val[i];
        int keep = k;
        if (top_p < 1.f) {
            double c = 0;
            for (int i = 0; i < k; i++) {
                c += val[i] / sum;
                if (c >= top_p) {
                    keep = i + 1;
                    break;
                }
            }
            sum = 0;
            for (int i = 0; i < keep; i++) sum += val[i];
        }
        double r = u * sum, acc = 0;
        int pick = keep - 1;
        for (int i = 0; i < keep; i++) {
            acc += val[i];
            if (r < acc) {
                pick = i;
                break;
            }
        }
        sm->s_int[1] = (int)~(uint32_t)sm->sortk[pick];
    }
    __syncthreads();
    return sm->s_int[1];
}

/* Many candidates: weighted radix descents for the top-p cut and for the draw. */
__device__ int sample_radix(const float *l, int n, topk_set set, float temp, float top_p, double u, samp_smem *sm) {
    /* max logit (the first candidate) */
    uint32_t mk = 0;
    for (int i = threadIdx.x; i < n; i += SB) mk = max(mk, fkey(l[i]));
    for (int o = 16; o > 0; o >>= 1) mk = max(mk, __shfl_xor_sync(0xffffffffu, mk, o));
    if ((threadIdx.x & 31) == 0) atomicMax(&sm->s_u32[0], mk);
    __syncthreads();
    mk = sm->s_u32[0];
    const float mx = __uint_as_float((mk & 0x80000000u) ? (mk & 0x7fffffffu) : ~mk);
    /* total weight of the top-k set */
    unsigned long long part = 0;
    for (int i = threadIdx.x; i < n; i += SB) {
        float v = l[i];
        if (set.has(fkey(v), i)) part += fix_weight(v, mx, temp);
    }
    unsigned long long total;
    (void)block_scan_excl<unsigned long long>(part, sm->ws64, &total);
    topk_set keep = {0, n}; /* everything */
    unsigned long long keep_sum = total;
    if (top_p < 1.f) {
        unsigned long long target = (unsigned long long)ceil((double)top_p * (double)total);
        int cut = weighted_find(l, n, set, NULL, mx, temp, target, 0, sm);
        keep.tau = fkey(l[cut]), keep.cut = cut;
        part = 0;
        for (int i = threadIdx.x; i < n; i += SB) {
            float v = l[i];
            uint32_t key = fkey(v);
            if (set.has(key, i) && keep.has(key, i)) part += fix_weight(v, mx, temp);
        }
        (void)block_scan_excl<unsigned long long>(part, sm->ws64, &keep_sum);
    }
    unsigned long long r = (unsigned long long)floor(u * (double)keep_sum);
    return weighted_find(l, n, set, &keep, mx, temp, r, 1, sm);
}

__global__ void __launch_bounds__(SB)
sample_kernel(int32_t *out, const float *logits, int64_t ld, int vocab, const omni_cuda_sample_params *params,
              const double *uu) {
    __shared__ samp_smem sm;
    const float *l = logits + (int64_t)blockIdx.x * ld;
    const omni_cuda_sample_params p = params[blockIdx.x];
    if (threadIdx.x == 0) sm.s_u32[0] = 0;
    if (!(p.temp > 0.f)) {
        int a = block_argmax(l, vocab, &sm);
        if (threadIdx.x == 0) out[blockIdx.x] = a;
        return;
    }
    const double u = uu[blockIdx.x];
    const int k = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
    topk_set set;
    int rem;
    radix_kth(l, vocab, k, &sm, &set.tau, &rem);
    set.cut = tie_cut(l, vocab, set.tau, rem, &sm);
    const int tok = k <= FAST_MAX ? sample_fast(l, vocab, k, set, p.temp, p.top_p, u, &sm)
                                  : sample_radix(l, vocab, set, p.temp, p.top_p, u, &sm);
    if (threadIdx.x == 0) out[blockIdx.x] = tok;
}

extern "C" omni_status omni_cuda_sample(int32_t *out, const float *logits, int64_t ld, int rows, int vocab,
                                        const omni_cuda_sample_params *params, const double *u, void *stream) {
    if (rows < 0 || vocab <= 0 || vocab >= (1 << 19) || ld < vocab)
        return omni_fail(OMNI_ERR_USAGE, "%s: rows %d vocab %d ld %lld", __func__, rows, vocab, (long long)ld);
    if (rows == 0) return OMNI_OK;
    omni_launch(sample_kernel, rows, SB, 0, (cudaStream_t)stream, out, logits, ld, vocab, params, u);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}
