/* kvc_segments.cu - kvc_tower_attn (kvcache/kv_towers.h): non-causal attention within segments for the vision and
 * audio towers, computed as flash-attention does in bf16 (bf16 Q, K, V and P operands, f32 scores, softmax and
 * accumulators; P rounded to bf16 before P·V, the row sums taken before that rounding).
 *
 * One kernel, FlashAttention-2 on mma.m16n8k16: a CTA of 4 warps owns 64 query rows of one (segment, head), each
 * warp 16 rows whose Q fragments stay in registers. Keys and values come in tiles of 64 tokens through a
 * two-stage cp.async pipeline (the next tile loads while this one is used); S = Q·Kᵀ with ldmatrix fragments,
 * online softmax in exp2 (the scale folded into one FMA per score; the accumulators rescaled only when a row's
 * maximum moved), P·V with P taken from the S accumulators (register reuse) and V by ldmatrix.trans. Any even
 * head_dim up to 128 runs at DP = 32, 64, 80 or 128 channels: the channels past head_dim are zeros in shared memory
 * (they add nothing to a score); of the output, only NV n-tiles of 8 channels are computed (72 of 80 for the
 * Qwen3-VL towers) and the channels past head_dim are not written, so the towers need no padded copies. Rows:
 * 16-byte cp.async when head_dim, the row strides and the bases allow, else element loads. Only the last key tile
 * of a segment is masked (a second instance of the tile step).
 * Shared memory (DS = DP + 8 elements per row: conflict-free ldmatrix): Q [64][DS], K and V [2][64][DS] =
 * 56 KB at DP 80, 87 KB at DP 128. Launch shape: (ceil(max_seg / 64), n_seg * n_heads). */
#include "kvc_common.cuh"
#include "kvc_ptx.cuh"

#include <string.h>

extern "C" {
#include "kvcache/kv_towers.h"
}

#define KSG_NW 4
#define KSG_NT (KSG_NW * 32)
#define KSG_M 64 /* query rows per CTA */
#define KSG_N 64 /* keys per tile */
#define KSG_LOG2E 1.4426950408889634f

struct ksg_args {
    const int32_t *cu; /* [n_seg + 1] */
    const uint16_t *q, *k, *v;
    uint16_t *out;
    int64_t row, o_row; /* elements between consecutive tokens of q / k / v and of out */
    int H, D, vec;      /* heads, head_dim, 1: 16-byte copies */
    float qscale;       /* softmax scale * log2(e) */
};

template <int DP> struct ksg_smem {
    static constexpr int DS = DP + 8;
    uint16_t q[KSG_M][DS];
    uint16_t k[2][KSG_N][DS], v[2][KSG_N][DS];
};

#ifdef KVC_EMU /* the emulator: plain copies (every wait is then trivially satisfied) */
static inline void ksg_cp16(void *smem, const void *gmem, bool valid) {
    if (valid)
        memcpy(smem, gmem, 16);
    else
        memset(smem, 0, 16);
}
static inline void ksg_commit() {}
template <int N> static inline void ksg_wait() {}
#else
__device__ __forceinline__ void ksg_cp16(void *smem, const void *gmem, bool valid) {
    const unsigned s = kvc_smem_addr(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void ksg_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void ksg_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

/* Rows [0, n) of head h from src (token stride a.row) into dst [64][DS]; rows >= n and channels >= D are zero.
 * Vector path: asynchronous (completes at the next wait); element path: plain stores. */
template <int DP>
__device__ __forceinline__ void ksg_tile(const ksg_args &a, uint16_t (*dst)[DP + 8], const uint16_t *src, int n) {
    if (a.vec) {
        for (int i = threadIdx.x; i < KSG_N * (DP / 8); i += KSG_NT) {
            const int j = i / (DP / 8), c = 8 * (i % (DP / 8));
            const bool ok = j < n && c < a.D;
            ksg_cp16(&dst[j][c], ok ? src + (int64_t)j * a.row + c : src, ok);
        }
        return;
    }
    for (int i = threadIdx.x; i < KSG_N * DP; i += KSG_NT) {
        const int j = i / DP, c = i % DP;
        dst[j][c] = j < n && c < a.D ? src[(int64_t)j * a.row + c] : (uint16_t)0;
    }
}

/* One key tile against this warp's 16 rows: S = Q·Kᵀ, online softmax, O += P·V. MASK: only keys < n are valid
 * (the segment's last tile), else all 64. The running max m is kept in raw score units (the scale is > 0). */
template <int DP, int NV, bool MASK>
__device__ __forceinline__ void ksg_step(const uint32_t (&qa)[DP / 16][4], const uint16_t (*k)[DP + 8],
                                         const uint16_t (*v)[DP + 8], int n, float qscale, float (&o)[NV][4],
                                         float (&m)[2], float (&l)[2]) {
    const int lane = threadIdx.x & 31, t = lane & 3;
    float s[KSG_N / 8][4];
#pragma unroll
    for (int nt = 0; nt < KSG_N / 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) s[nt][i] = 0.0f;
    /* B fragments of Kᵀ: keys 16 np + (lane & 7) + 8 (lane >> 4), channels 16 ks + 8 ((lane >> 3) & 1) */
    const int bkey = (lane & 7) + 8 * (lane >> 4), bcol = 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < DP / 16; ks++)
#pragma unroll
        for (int np = 0; np < KSG_N / 16; np++) {
            uint32_t b[4];
            kvc_ldsm4(b, &k[16 * np + bkey][16 * ks + bcol]);
            kvc_mma_bf16(s[2 * np], qa[ks], b[0], b[1]);
            kvc_mma_bf16(s[2 * np + 1], qa[ks], b[2], b[3]);
        }
    /* mask the keys past n, running max of rows g (c0, c1) and g + 8 (c2, c3) */
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < KSG_N / 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (MASK && 8 * nt + 2 * t + (i & 1) >= n) s[nt][i] = -INFINITY;
            mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
        }
    float corr[2], mb[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 1));
        mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 2));
        const float mn = fmaxf(m[u], mx[u]);       /* finite: every tile has a key */
        corr[u] = kvc_ex2((m[u] - mn) * qscale);   /* m = -inf before the first tile: 0 */
        m[u] = mn, l[u] *= corr[u], mb[u] = mn * qscale;
    }
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) /* a row's max moved (warp-uniform branch) */
#pragma unroll
        for (int nt = 0; nt < NV; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[nt][i] *= corr[i >> 1];
#pragma unroll
    for (int nt = 0; nt < KSG_N / 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s[nt][i] = kvc_ex2(fmaf(s[nt][i], qscale, -mb[i >> 1]));
            l[i >> 1] += s[nt][i];
        }
    /* P as bf16 A fragments per 16 keys (n-tiles 2 ks, 2 ks + 1), V by ldmatrix.trans: keys 16 ks + (lane & 7)
     * + 8 ((lane >> 3) & 1), channels 16 np + 8 (lane >> 4) */
    const int vkey = (lane & 7) + 8 * ((lane >> 3) & 1), vcol = 8 * (lane >> 4);
#pragma unroll
    for (int ks = 0; ks < KSG_N / 16; ks++) {
        uint32_t p[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float *x = s[2 * ks + (i >> 1)] + 2 * (i & 1);
            p[i] = kvc_bf16x2(x[0], x[1]);
        }
#pragma unroll
        for (int np = 0; np < DP / 16; np++) {
            uint32_t b[4];
            kvc_ldsm4_t(b, &v[16 * ks + vkey][16 * np + vcol]);
            kvc_mma_bf16(o[2 * np], p, b[0], b[1]);
            if (2 * np + 1 < NV) kvc_mma_bf16(o[2 * np + 1], p, b[2], b[3]);
        }
    }
}

template <int DP, int NV> __global__ void __launch_bounds__(KSG_NT) ksg_kernel(const __grid_constant__ ksg_args a) {
    KVC_DYN_SMEM(uint8_t, raw);
    ksg_smem<DP> &sm = *reinterpret_cast<ksg_smem<DP> *>(raw);
    const int tile = blockIdx.x, seg = blockIdx.y / a.H, h = blockIdx.y % a.H;
    const int s0 = a.cu[seg], len = a.cu[seg + 1] - s0, q0 = tile * KSG_M;
    if (q0 >= len) return; /* whole CTA: uniform */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t hoff = (int64_t)h * a.D;
    const uint16_t *kb = a.k + (int64_t)s0 * a.row + hoff, *vb = a.v + (int64_t)s0 * a.row + hoff;
    const int n_tiles = (len + KSG_N - 1) / KSG_N;
    ksg_tile<DP>(a, sm.q, a.q + (int64_t)(s0 + q0) * a.row + hoff, min(KSG_M, len - q0));
    ksg_tile<DP>(a, sm.k[0], kb, min(KSG_N, len));
    ksg_tile<DP>(a, sm.v[0], vb, min(KSG_N, len));
    ksg_commit();
    float o[NV][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NV; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[nt][i] = 0.0f;
    uint32_t qa[DP / 16][4];
    for (int it = 0; it < n_tiles; it++) {
        const int buf = it & 1;
        if (it + 1 < n_tiles) { /* the next tile into the other buffer (consumed at it - 1: synced below) */
            const int k1 = (it + 1) * KSG_N;
            ksg_tile<DP>(a, sm.k[buf ^ 1], kb + (int64_t)k1 * a.row, min(KSG_N, len - k1));
            ksg_tile<DP>(a, sm.v[buf ^ 1], vb + (int64_t)k1 * a.row, min(KSG_N, len - k1));
            ksg_commit();
            ksg_wait<1>(); /* everything but the newest group: this tile (and Q) */
        } else {
            ksg_wait<0>();
        }
        __syncthreads();
        if (it == 0) { /* Q fragments: rows 16 warp + (lane & 15), channels 16 ks + 8 (lane >> 4) */
#pragma unroll
            for (int ks = 0; ks < DP / 16; ks++)
                kvc_ldsm4(qa[ks], &sm.q[16 * warp + (lane & 15)][16 * ks + 8 * (lane >> 4)]);
        }
        const int n = min(KSG_N, len - it * KSG_N);
        if (n < KSG_N)
            ksg_step<DP, NV, true>(qa, sm.k[buf], sm.v[buf], n, a.qscale, o, m, l);
        else
            ksg_step<DP, NV, false>(qa, sm.k[buf], sm.v[buf], n, a.qscale, o, m, l);
        __syncthreads(); /* this buffer is refilled at it + 1 */
    }
    /* out = o / l for rows g, g + 8 of this warp (channels 8 nt + 2 t, + 1; those < D) */
#pragma unroll
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int r = q0 + 16 * warp + g + 8 * u;
        if (r >= len) continue;
        const float inv = 1.0f / l[u];
        uint16_t *dst = a.out + (int64_t)(s0 + r) * a.o_row + hoff;
#pragma unroll
        for (int nt = 0; nt < NV; nt++) {
            const int c = 8 * nt + 2 * t;
            if (c < a.D) *(uint32_t *)(dst + c) = kvc_bf16x2(o[nt][2 * u] * inv, o[nt][2 * u + 1] * inv);
        }
    }
}

template <int DP, int NV> static cudaError_t ksg_launch(const ksg_args &a, int tiles, int rows, cudaStream_t st) {
    const size_t smem = sizeof(ksg_smem<DP>);
    static int ready = 0; /* the shared-memory limit is raised once (not inside a later graph capture) */
    if (!ready) {
        cudaError_t e = cudaFuncSetAttribute((const void *)ksg_kernel<DP, NV>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        ready = 1;
    }
    return kvc_launch(ksg_kernel<DP, NV>, dim3(tiles, rows), dim3(KSG_NT), smem, st, 0, a);
}

extern "C" omni_status kvc_tower_attn(int n_heads, int head_dim, const int32_t *cu_seg, int n_seg, int max_seg,
                                      const uint16_t *q, const uint16_t *k, const uint16_t *v, int64_t qkv_row,
                                      uint16_t *out, int64_t out_row, float scale, void *stream) {
    if (n_heads <= 0 || head_dim <= 0 || head_dim > 128 || head_dim % 2 || n_seg < 0 || max_seg < 0 ||
        qkv_row < (int64_t)n_heads * head_dim || out_row < (int64_t)n_heads * head_dim || out_row % 2)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda tower attention: %d heads of %d (even, <= 128), %d segments, rows "
                         "%lld / %lld", n_heads, head_dim, n_seg, (long long)qkv_row, (long long)out_row);
    if (n_seg == 0 || max_seg == 0) return OMNI_OK;
    if (!cu_seg || !q || !k || !v || !out || ((uintptr_t)out & 3))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda tower attention: NULL or misaligned pointer");
    ksg_args a;
    a.cu = cu_seg, a.q = q, a.k = k, a.v = v, a.out = out, a.row = qkv_row, a.o_row = out_row;
    a.H = n_heads, a.D = head_dim, a.qscale = scale * KSG_LOG2E;
    a.vec = head_dim % 8 == 0 && qkv_row % 8 == 0 && ((uintptr_t)q & 15) == 0 && ((uintptr_t)k & 15) == 0 &&
            ((uintptr_t)v & 15) == 0;
    const int tiles = (max_seg + KSG_M - 1) / KSG_M, rows = n_seg * n_heads;
    cudaError_t e;
    if (head_dim <= 32)
        e = ksg_launch<32, 4>(a, tiles, rows, (cudaStream_t)stream);
    else if (head_dim <= 64)
        e = ksg_launch<64, 8>(a, tiles, rows, (cudaStream_t)stream);
    else if (head_dim <= 72) /* Qwen3-VL: the P·V n-tile of channels 72..79 is skipped */
        e = ksg_launch<80, 9>(a, tiles, rows, (cudaStream_t)stream);
    else if (head_dim <= 80)
        e = ksg_launch<80, 10>(a, tiles, rows, (cudaStream_t)stream);
    else
        e = ksg_launch<128, 16>(a, tiles, rows, (cudaStream_t)stream);
    return kvc_cuda_check(e, "tower attention launch");
}
