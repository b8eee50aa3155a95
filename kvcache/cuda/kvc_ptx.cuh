/* kvc_ptx.cuh - the PTX instructions the attention kernels use (tensor-core MMA, movmatrix, ldmatrix, mbarrier,
 * bulk and per-thread async copies, fp16/bf16 conversions, programmatic dependent launch) and the launch helper. Each has an
 * emulated twin (KVC_EMU: the CPU emulator of tests/gpu/emu) so that the same kernel source runs in CPU tests.
 *
 * Fragment conventions (mma.m16n8k16, lane = 4 g + t): A [16][16]: a0 (row g, k 2t, 2t+1), a1 (row g+8, same k),
 * a2 (row g, k 2t+8, 2t+9), a3 (row g+8, k 2t+8, 2t+9); B [16][8]: b0 (k 2t, 2t+1, col g), b1 (k 2t+8, 2t+9,
 * col g); C [16][8]: c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8). Lower k / column in the low 16 bits. */
#ifndef OMNI_KVC_PTX_CUH
#define OMNI_KVC_PTX_CUH

#include <stdint.h>

#ifndef KVC_EMU
#include <cuda_runtime.h>
#endif

/* Dynamic shared memory of the running kernel as a T pointer. */
#ifdef KVC_EMU
#define KVC_DYN_SMEM(T, name) T *name = (T *)emu::dyn_smem()
#else
#define KVC_DYN_SMEM(T, name)                                                                                  \
    extern __shared__ __align__(128) unsigned char kvc_dyn_smem_[];                                            \
    T *name = (T *)kvc_dyn_smem_
#endif

#ifndef KVC_EMU
__device__ __forceinline__ uint32_t kvc_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
#endif

/* D += A B, f16 or bf16 operands, f32 accumulators. */
__device__ __forceinline__ void kvc_mma_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef KVC_EMU
    emu::mma_16816(d, a, b0, b1, d, 0);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
__device__ __forceinline__ void kvc_mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef KVC_EMU
    emu::mma_16816(d, a, b0, b1, d, 1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* Transpose of an 8x8 b16 matrix held as fragments (row g, cols 2t, 2t+1). */
__device__ __forceinline__ uint32_t kvc_movm(uint32_t x) {
#ifdef KVC_EMU
    return emu::movmatrix_trans(x);
#else
    uint32_t r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
#endif
}

/* Four 8x8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8. trans: each
 * lane gets column fragments (rows 2t, 2t+1 of column g) instead of row fragments. */
__device__ __forceinline__ void kvc_ldsm4(uint32_t r[4], const void *row) {
#ifdef KVC_EMU
    emu::ldmatrix_x4(r, row, 0);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(kvc_smem_addr(row)));
#endif
}
__device__ __forceinline__ void kvc_ldsm4_t(uint32_t r[4], const void *row) {
#ifdef KVC_EMU
    emu::ldmatrix_x4(r, row, 1);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(kvc_smem_addr(row)));
#endif
}

/* f32 pair -> f16x2 / bf16x2 (RNE, lo in the low half); f16x2 product (RNE); f16 -> f32 (hardware cvt). */
__device__ __forceinline__ uint32_t kvc_f16x2(float lo, float hi) {
#ifdef KVC_EMU
    return (uint32_t)emu::f2h(lo) | ((uint32_t)emu::f2h(hi) << 16);
#else
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}
__device__ __forceinline__ uint32_t kvc_bf16x2(float lo, float hi) {
#ifdef KVC_EMU
    return (uint32_t)emu::f2bf(lo) | ((uint32_t)emu::f2bf(hi) << 16);
#else
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}
__device__ __forceinline__ uint32_t kvc_hmul2(uint32_t a, uint32_t b) {
#ifdef KVC_EMU
    return (uint32_t)emu::f2h(emu::h2f((uint16_t)a) * emu::h2f((uint16_t)b)) |
           ((uint32_t)emu::f2h(emu::h2f((uint16_t)(a >> 16)) * emu::h2f((uint16_t)(b >> 16))) << 16);
#else
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#endif
}
/* a * (half HI of b, broadcast to both halves): the broadcast folds into the HMUL2's operand selector. */
template <int HI> __device__ __forceinline__ uint32_t kvc_hmul2_bc(uint32_t a, uint32_t b) {
#ifdef KVC_EMU
    return kvc_hmul2(a, (HI ? b >> 16 : b & 0xffffu) * 0x10001u);
#else
    uint32_t r;
    if (HI)
        asm("{.reg .b16 l, h; .reg .b32 t; mov.b32 {l, h}, %2; mov.b32 t, {h, h}; mul.rn.f16x2 %0, %1, t;}"
            : "=r"(r) : "r"(a), "r"(b));
    else
        asm("{.reg .b16 l, h; .reg .b32 t; mov.b32 {l, h}, %2; mov.b32 t, {l, l}; mul.rn.f16x2 %0, %1, t;}"
            : "=r"(r) : "r"(a), "r"(b));
    return r;
#endif
}
__device__ __forceinline__ float kvc_hw_h2f(uint16_t h) {
#ifdef KVC_EMU
    return emu::h2f(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}
/* bf16 (RNE) of one float, as its 16 bits. */
__device__ __forceinline__ uint16_t kvc_f2bf(float x) { return (uint16_t)kvc_bf16x2(x, 0.0f); }

/* 2^x (MUFU, relative error ~2^-22; 2^-inf = 0). */
__device__ __forceinline__ float kvc_ex2(float x) {
#ifdef KVC_EMU
    return exp2f(x);
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

/* ---------------------------------------------------------------- mbarrier + bulk copies (sm_90) */

__device__ __forceinline__ void kvc_mbar_init(uint64_t *bar, int count) {
#ifdef KVC_EMU
    emu::mbar_init(bar, count);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(kvc_smem_addr(bar)), "r"(count) : "memory");
#endif
}
/* Makes initialized barriers visible to the async proxy (bulk copies). */
__device__ __forceinline__ void kvc_fence_mbar_init() {
#ifndef KVC_EMU
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
/* Generic-proxy writes to shared memory before async-proxy accesses of the same bytes. */
__device__ __forceinline__ void kvc_fence_proxy_async() {
#ifndef KVC_EMU
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void kvc_mbar_arrive_tx(uint64_t *bar, uint32_t bytes) {
#ifdef KVC_EMU
    emu::mbar_arrive_expect_tx(bar, bytes);
#else
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(
                     kvc_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}
/* Blocks until the phase of the given parity has completed. */
__device__ __forceinline__ void kvc_mbar_wait(uint64_t *bar, int parity) {
#ifdef KVC_EMU
    while (!emu::mbar_try_wait_parity(bar, parity)) emu::spin("mbarrier wait");
#else
    uint32_t ok;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(ok)
                     : "r"(kvc_smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!ok);
#endif
}
/* bytes (multiple of 16, 16-byte aligned both sides) global -> shared, completing on bar's transaction count.
 * evict_first: the streamed KV bytes are read once, so they should not push other data out of L2. */
__device__ __forceinline__ void kvc_bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar,
                                             uint64_t policy) {
#ifdef KVC_EMU
    (void)policy;
    emu::bulk_copy_g2s(dst, src, bytes, bar);
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
                 "[%3], %4;" ::"r"(kvc_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(kvc_smem_addr(bar)), "l"(policy)
                 : "memory");
#endif
}
/* 16 bytes global -> shared by this thread (cp.async, L2 cache policy). kvc_cp_arrive: bar gets one arrival once
 * this thread's earlier cp.async copies have landed (.noinc: the barrier's count includes these arrivals). */
__device__ __forceinline__ void kvc_cp16(void *dst, const void *src, uint64_t policy) {
#ifdef KVC_EMU
    (void)policy;
    emu::cp_async16(dst, src);
#else
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(kvc_smem_addr(dst)), "l"(src),
                 "l"(policy)
                 : "memory");
#endif
}
__device__ __forceinline__ void kvc_cp_arrive(uint64_t *bar) {
#ifdef KVC_EMU
    emu::mbar_arrive(bar);
#else
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(kvc_smem_addr(bar)) : "memory");
#endif
}
/* kvc_cp16 without an L2 cache hint (the plain cp.async.cg form). */
__device__ __forceinline__ void kvc_cp16_nh(void *dst, const void *src) {
#ifdef KVC_EMU
    emu::cp_async16(dst, src);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(kvc_smem_addr(dst)), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ uint64_t kvc_evict_first_policy() {
#ifdef KVC_EMU
    return 0;
#else
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
#endif
}

/* ---------------------------------------------------------------- programmatic dependent launch (sm_90)
 * A kernel launched with the programmatic-serialization attribute may start while the kernel before it runs;
 * kvc_pdl_wait blocks until that kernel has completed and its writes are visible (no-op otherwise);
 * kvc_pdl_launch lets the next kernel be scheduled early. */
__device__ __forceinline__ void kvc_pdl_wait() {
#ifndef KVC_EMU
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void kvc_pdl_launch() {
#ifndef KVC_EMU
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* ---------------------------------------------------------------- host: launches */

/* Launch of kernel k (grid, block, dynamic shared bytes, stream); pdl: programmatic stream serialization. */
template <typename... KP, typename... A>
static cudaError_t kvc_launch(void (*k)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, int pdl,
                              A... args) {
#ifdef KVC_EMU
    (void)st, (void)pdl;
    return emu::launch(grid, block, smem, [=]() { k((KP)args...); });
#else
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
    cfg.attrs = &attr, cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, (KP)args...);
#endif
}

#endif
