/* kvc_quant.cu - GPU block quantizer for the KV cache: one CTA per block of 32 tokens x D channels (one KV head),
 * producing bytes identical to kvq_quant_keys / kvq_quant_values (kvcache/kv_quant.c; format in kvcache.h).
 *
 * Exactness: every thread follows the CPU's sequential order for what is order-dependent (the per-token key norm
 * is summed in double over c = 0..D-1 by one thread; the min/max of a group are scanned in the CPU's order, so
 * ties such as -0/+0 resolve the same way), and every rounding step is an explicit IEEE _rn operation.
 * Shared memory: x [32][D + 1] f32 (+1 pad: row- and column-wise access are both bank-conflict free), norms [32]. */
#include "kvc_common.cuh"
#include "kvcache/kv_append.h" /* kvd_quant_group: the group quantizer shared with the device cache */

extern "C" {
#include "kvcache/kv_cuda.h"
}

#define KVC_QTHREADS 128

/* Load block b's 32 rows into xs [32][D+1]; FWHT and bf16 rounding when asked. */
__device__ void kvc_load_block(const kvc_quant_desc d, const void *src, int b, float *xs) {
    const int D = d.head_dim, ld = D + 1, tid = threadIdx.x, nthr = blockDim.x;
    const int64_t base = (int64_t)b * d.blk_stride;
    for (int t = tid; t < KVC_G * D; t += nthr) {
        int r = t / D, c = t % D;
        int64_t i = base + r * d.row_stride + c;
        xs[r * ld + c] = d.src_bf16 ? kvc_bf2f(((const uint16_t *)src)[i]) : ((const float *)src)[i];
    }
    if (d.rotate) kvc_fwht_rows(xs, KVC_G, ld, D, tid, nthr);
    if (d.round_bf16)
        for (int t = tid; t < KVC_G * D; t += nthr) xs[(t / D) * ld + t % D] = kvc_bf16_round(xs[(t / D) * ld + t % D]);
    __syncthreads();
}

__global__ void kvc_quant_keys_kernel(const kvc_quant_desc d, const void *src, int t0, uint8_t *dst) {
    extern __shared__ float kvc_smem[];
    const int D = d.head_dim, ld = D + 1, b = blockIdx.x, tid = threadIdx.x;
    float *xs = kvc_smem;
    __shared__ float s_norm[KVC_G];
    kvc_load_block(d, src, b, xs);
    uint8_t *out = dst + (int64_t)b * d.dst_stride;
    const int bpc = KVC_G * d.bits / 8;
    uint16_t *scale = (uint16_t *)(out + (size_t)D * bpc), *mnv = scale + D, *norm = mnv + D;
    if (d.use_norm && tid < KVC_G) {
        uint16_t h = 0;
        float s = 1.0f;
        if (tid >= t0) {
            h = kv_key_norm(xs + tid * ld, D);
            s = kvc_h2f(h);
        }
        norm[tid] = h;
        s_norm[tid] = s;
    }
    __syncthreads();
    if (d.use_norm)
        for (int t = tid; t < KVC_G * D; t += blockDim.x) {
            int r = t / D, c = t % D;
            if (r >= t0) xs[r * ld + c] = __fdiv_rn(xs[r * ld + c], s_norm[r]);
        }
    __syncthreads();
    for (int c = tid; c < D; c += blockDim.x)
        kvd_quant_group(xs + c, ld, t0, d.bits, (uint32_t *)(out + (size_t)c * bpc), &scale[c], &mnv[c]);
}

__global__ void kvc_quant_values_kernel(const kvc_quant_desc d, const void *src, uint8_t *dst) {
    extern __shared__ float kvc_smem[];
    const int D = d.head_dim, ld = D + 1, b = blockIdx.x, ng = D / KVC_G;
    float *xs = kvc_smem;
    kvc_load_block(d, src, b, xs);
    uint8_t *out = dst + (int64_t)b * d.dst_stride;
    const int bpt = D * d.bits / 8, bpg = KVC_G * d.bits / 8;
    uint16_t *scale = (uint16_t *)(out + (size_t)KVC_G * bpt), *mnv = scale + KVC_G * ng;
    for (int t = threadIdx.x; t < KVC_G * ng; t += blockDim.x) {
        int j = t / ng, g = t % ng;
        kvd_quant_group(xs + j * ld + g * KVC_G, 1, 0, d.bits, (uint32_t *)(out + (size_t)j * bpt + g * bpg),
                        &scale[j * ng + g], &mnv[j * ng + g]);
    }
}

static omni_status check_desc(const kvc_quant_desc *d, const void *src, int n_blk, const uint8_t *dst, int keys) {
    if (!d || (n_blk > 0 && (!src || !dst)))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda quant: NULL argument");
    if (d->head_dim != 64 && d->head_dim != 128)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda quant: head_dim %d (64 or 128 supported)", d->head_dim);
    if (d->bits != 2 && d->bits != 4) return omni_fail(OMNI_ERR_USAGE, "kv cuda quant: bits %d (2 or 4)", d->bits);
    if (d->src_bf16 && (d->rotate || d->round_bf16))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda quant: a bf16 source is already rotated and rounded");
    int64_t need = keys ? (int64_t)d->head_dim * KVC_G * d->bits / 8 + d->head_dim * 4 + (d->use_norm ? 64 : 0)
                        : (int64_t)KVC_G * d->head_dim * d->bits / 8 + (int64_t)d->head_dim * 4;
    if (d->row_stride < d->head_dim || d->blk_stride < 0 || d->dst_stride < need || d->dst_stride % 4 ||
        ((uintptr_t)dst & 3u))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda quant: bad strides (row %lld, block %lld, dst %lld for %lld-byte "
                         "blocks) or dst not 4-byte aligned", (long long)d->row_stride, (long long)d->blk_stride,
                         (long long)d->dst_stride, (long long)need);
    return OMNI_OK;
}

extern "C" omni_status kvc_quant_keys(const kvc_quant_desc *d, const void *src, int n_blk, int t0, uint8_t *dst,
                                      void *stream) {
    omni_status st = check_desc(d, src, n_blk, dst, 1);
    if (st) return st;
    if (t0 < 0 || t0 >= KVC_G) return omni_fail(OMNI_ERR_USAGE, "kv cuda quant: t0 %d out of 0..31", t0);
    if (n_blk <= 0) return OMNI_OK;
    size_t smem = (size_t)KVC_G * (d->head_dim + 1) * sizeof(float);
    kvc_quant_keys_kernel<<<n_blk, KVC_QTHREADS, smem, (cudaStream_t)stream>>>(*d, src, t0, dst);
    return kvc_cuda_check(cudaGetLastError(), "quant keys launch");
}

extern "C" omni_status kvc_quant_values(const kvc_quant_desc *d, const void *src, int n_blk, uint8_t *dst,
                                        void *stream) {
    omni_status st = check_desc(d, src, n_blk, dst, 0);
    if (st) return st;
    if (n_blk <= 0) return OMNI_OK;
    size_t smem = (size_t)KVC_G * (d->head_dim + 1) * sizeof(float);
    kvc_quant_values_kernel<<<n_blk, KVC_QTHREADS, smem, (cudaStream_t)stream>>>(*d, src, dst);
    return kvc_cuda_check(cudaGetLastError(), "quant values launch");
}
