/* common.cuh - device helpers shared by the kernels/cuda sources (internal): bf16 load/store/rounding, block
 * reductions, grid-stride loops and launch sizing. Not part of the public API (kernels/ops_cuda.h). */
#ifndef OMNI_CUDA_COMMON_CUH
#define OMNI_CUDA_COMMON_CUH

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef KVC_EMU
#include <cuda_runtime_api.h>
#else
#include <cuda_runtime.h>
#endif
#include <cuda_bf16.h>

#ifdef KVC_EMU
#include "kernels/cuda/emu_shim.h" /* the CPU emulator of tests/gpu/emu: __shared__, intrinsics, wmma */
#endif

typedef __nv_bfloat16 bf16;

/* Launch k<<<grid, block, smem, st>>>(args) (each argument converted to the kernel's parameter type); under the CPU
 * emulator (KVC_EMU) the emulator runs it. Errors surface through cudaGetLastError (OMNI_CUDA_LAUNCHED). */
template <typename... KP, typename... A>
static inline void omni_launch(void (*k)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
#ifdef KVC_EMU
    (void)st;
    emu::launch(grid, block, smem, [=]() { k((KP)args...); });
#else
    k<<<grid, block, smem, st>>>((KP)args...);
#endif
}

/* Programmatic dependent launch (sm_90) for the decode chain: a kernel started by omni_launch_pdl may begin while
 * the kernel before it in the stream still runs (once that one called omni_pdl_trigger, or as it exits). It must
 * call omni_pdl_wait before it reads anything an earlier kernel wrote and before it writes anything (the wait
 * returns when the kernel before it has completed and its writes are visible); work on inputs nobody writes
 * (weights) may come first. omni_pdl_trigger lets the next such kernel be scheduled. Both are no-ops when the
 * kernel was launched plainly, and under the emulator. */
__device__ __forceinline__ void omni_pdl_wait() {
#if !defined(KVC_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void omni_pdl_trigger() {
#if !defined(KVC_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Diagnostics: OMNI_CUDA_PDL=0 in the environment makes omni_launch_pdl launch plainly (an A/B of the chain on the
 * GPU host); read once per process (and source file), like a build option. */
static inline int omni_pdl_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("OMNI_CUDA_PDL");
        on = !(e && e[0] == '0');
    }
    return on;
}

/* omni_launch with the programmatic-serialization attribute (the kernel calls omni_pdl_wait first, see above).
 * Errors surface through cudaGetLastError as with omni_launch. */
template <typename... KP, typename... A>
static inline void omni_launch_pdl(void (*k)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
#ifdef KVC_EMU
    omni_launch(k, grid, block, smem, st, args...);
#else
    if (!omni_pdl_enabled()) {
        omni_launch(k, grid, block, smem, st, args...);
        return;
    }
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, k, (KP)args...); /* a failed launch is also the last error */
#endif
}

/* Dynamic shared memory of a kernel as a T * (extern __shared__ on the GPU, the emulator's per-CTA buffer). */
#ifdef KVC_EMU
#define OMNI_DYN_SMEM(T, name) T *name = (T *)emu::dyn_smem()
#else
#define OMNI_DYN_SMEM(T, name)                                                                                         \
    extern __shared__ __align__(16) unsigned char omni_dyn_smem_[];                                                    \
    T *name = (T *)omni_dyn_smem_
#endif

#define ROW_THREADS 256
#define EW_THREADS 256
#define EW_MAX_BLOCKS 8192

/* v rounded to bf16 (round-to-nearest-even) and back to f32. */
__device__ __forceinline__ float bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float ld_bf(const uint16_t *p, int64_t i) { return __bfloat162float(((const bf16 *)p)[i]); }
__device__ __forceinline__ void st_bf(uint16_t *p, int64_t i, float v) { ((bf16 *)p)[i] = __float2bfloat16_rn(v); }

/* Sum over the block; every thread gets the result. sh: 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* VEC consecutive bf16 moved as one 2-, 4- or 16-byte access. */
template <int VEC> struct vec_of;
template <> struct vec_of<1> { typedef uint16_t T; };
template <> struct vec_of<2> { typedef uint32_t T; };
template <> struct vec_of<4> { typedef uint2 T; };
template <> struct vec_of<8> { typedef uint4 T; };

template <int VEC> __device__ __forceinline__ void load_vec(float *f, const uint16_t *p, int i) {
    typename vec_of<VEC>::T u = ((const typename vec_of<VEC>::T *)p)[i];
    const bf16 *h = (const bf16 *)&u;
#pragma unroll
    for (int k = 0; k < VEC; k++) f[k] = __bfloat162float(h[k]);
}

template <int VEC> __device__ __forceinline__ void store_vec(uint16_t *p, int i, const float *f) {
    typename vec_of<VEC>::T u;
    bf16 *h = (bf16 *)&u;
#pragma unroll
    for (int k = 0; k < VEC; k++) h[k] = __float2bfloat16_rn(f[k]);
    ((typename vec_of<VEC>::T *)p)[i] = u;
}

/* acc += x · w over 8 bf16 pairs packed in two uint4 (a bf16 is the high half of an f32). */
__device__ __forceinline__ float dot8(float acc, uint4 xv, uint4 wv) {
    const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w}, ws[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        acc = fmaf(__uint_as_float(xs[i] << 16), __uint_as_float(ws[i] << 16), acc);
        acc = fmaf(__uint_as_float(xs[i] & 0xffff0000u), __uint_as_float(ws[i] & 0xffff0000u), acc);
    }
    return acc;
}

/* 16-byte loads of the weight-streaming GEMVs (gemv.cu, moe.cu): W streamed past L1 (read once), x through the
 * read-only path (re-read by every warp). Inline asm keeps them as plain independent loads that ptxas can hoist
 * ahead of the FMAs. */
#ifdef KVC_EMU
static inline uint4 ld_stream(const uint4 *p) { return *p; }
static inline uint4 ld_ro(const uint4 *p) { return *p; }
#else
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ld_ro(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#endif

/* Data that other blocks of the same grid wrote (past L1, which is not coherent; never the .nc path), and the
 * wait of one thread until *p >= target for a counter that other blocks raise after their writes (acquire: the
 * caller's later reads see those writes; the rest of its block follows it through a barrier). */
#ifdef KVC_EMU
static inline uint4 ld_cg(const uint4 *p) { return *p; }
static inline void wait_geq(const unsigned *p, unsigned target) {
    while (*(const volatile unsigned *)p < target) emu::spin("wait_geq (a counter of other blocks)");
}
#else
__device__ __forceinline__ uint4 ld_cg(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void wait_geq(const unsigned *p, unsigned target) {
    for (;;) {
        unsigned v;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        if (v >= target) return;
        __nanosleep(128);
    }
}
#endif

/* Hint: bring the 128-byte line holding p into L2 (no register, no L1). */
#ifdef KVC_EMU
static inline void prefetch_l2(const void *p) { (void)p; }
#else
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
#endif

static inline int ew_blocks(int64_t n) {
    int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (int)(b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS);
}

static inline int row_threads(int dim) { return dim >= ROW_THREADS ? ROW_THREADS : ((dim + 31) / 32) * 32; }

static inline int is_aligned(const void *p, unsigned a) { return ((uintptr_t)p % a) == 0; }

#define GRID_STRIDE(i, n)                                                                                      \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

#endif
