/* cuda_emu.h - a CPU emulator for this project's CUDA kernels, for tests on machines without a GPU.
 *
 * A .cu file compiled by g++ with -DKVC_EMU and `-include cuda_emu.h` runs its kernels here: every CUDA thread
 * is a fiber (user-space context, switched cooperatively), the threads of one CTA run on one OS thread, CTAs run
 * one after another. Barriers (__syncthreads, __syncwarp) and warp collectives (shuffles, votes, and the matrix
 * instructions that kernels reach through kvcache/cuda/kvc_ptx.cuh) switch fibers until every participating
 * lane has arrived, so divergent use of a collective deadlocks here as it is undefined on the GPU: the
 * emulator reports a deadlock (which fibers wait where) and aborts. Device memory is host memory; cudaMalloc
 * fills new buffers with 0xff bytes (NaN in f32, f16 and bf16) so that outputs never written show up.
 *
 * What it checks: indexing, fragment layouts, barriers/phases of the kernels' own logic, numerics close to the
 * hardware's (fp16/bf16 rounding RNE, f32 accumulation of exact products in MMAs, exp2 exact instead of
 * approximate). What it does not: timing, memory-model races between CTAs or proxies, bank conflicts, register
 * limits - those need the GPU (compute-sanitizer racecheck/memcheck, the benchmark).
 *
 * Kernel code constraints (so that one source serves both): dynamic shared memory only (KVC_DYN_SMEM), launches
 * through kvc_launch (kvc_ptx.cuh), inline PTX only inside kvc_ptx.cuh (with an emulated twin). */
#ifndef OMNI_CUDA_EMU_H
#define OMNI_CUDA_EMU_H

#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __launch_bounds__(...)

namespace emu {
const uint3 &thread_idx();
const uint3 &block_idx();
const dim3 &block_dim();
const dim3 &grid_dim();
void *dyn_smem();
int lane_id();
void sync_threads();
void sync_warp();
/* A wait loop's body: lets the other fibers run; aborts when nothing progresses for very long. */
void spin(const char *what);
/* Warp-wide exchange: every active lane deposits n (<= 16) words; returns the table [32][16] of all lanes'
 * words. The caller reads it, then calls exchange_done() (a second warp barrier). */
const uint32_t (*exchange(const uint32_t *mine, int n))[16];
void exchange_done();
/* Launch: runs body once per thread of grid x block; dynamic shared memory of smem bytes. During a stream
 * capture (cudaStreamBeginCapture .. EndCapture) the launch is recorded instead and runs at each cudaGraphLaunch of
 * the graph (as are cudaMemcpyAsync / cudaMemsetAsync: memory is read at replay time). */
cudaError_t launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body);
int capturing();
void record(std::function<void()> op);

/* The matrix and barrier instructions (semantics of PTX ISA 8.x, sm_90). */
void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4], int bf16);
uint32_t movmatrix_trans(uint32_t x);
void ldmatrix_x4(uint32_t r[4], const void *row_addr, int trans);
void mbar_init(uint64_t *bar, int count);
void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes);
void mbar_arrive(uint64_t *bar);
int mbar_try_wait_parity(uint64_t *bar, int parity);
void bulk_copy_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar);
void cp_async16(void *dst, const void *src); /* cp.async of 16 bytes: lands at once */

/* Conversions with the hardware's rounding (RNE) and fp16 products. */
uint16_t f2h(float f);
float h2f(uint16_t h);
uint16_t f2bf(float f);
float bf2f(uint16_t b);
} // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx())
#define blockDim (emu::block_dim())
#define gridDim (emu::grid_dim())

static inline void __syncthreads() { emu::sync_threads(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
static inline void __threadfence() {}
static inline void __threadfence_block() {}

static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __int_as_float(int i) { return __uint_as_float((uint32_t)i); }
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
}
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline int atomicAdd(int *p, int v) {
    int o = *p;
    *p = o + v;
    return o;
}
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    unsigned o = *p;
    *p = o + v;
    return o;
}
static inline float atomicAdd(float *p, float v) {
    float o = *p;
    *p = o + v;
    return o;
}
static inline int atomicExch(int *p, int v) {
    int o = *p;
    *p = v;
    return o;
}

/* Shuffle of a 4- or 8-byte value: every lane deposits its words, reads lane src's (its own when src is out of
 * its width segment, as the hardware does for up/down/xor). */
template <class T> static inline T emu_shfl_(T v, int src, int width) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit shuffles only");
    uint32_t m[2] = {0, 0};
    memcpy(m, &v, sizeof(T));
    const uint32_t(*t)[16] = emu::exchange(m, 2);
    const int lane = emu::lane_id();
    if (src < 0 || (src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
    uint32_t r[2] = {t[src][0], t[src][1]};
    emu::exchange_done();
    T out;
    memcpy(&out, r, sizeof(T));
    return out;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    const int lane = emu::lane_id();
    return emu_shfl_(v, (lane & ~(width - 1)) + (src & (width - 1)), width);
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    return emu_shfl_(v, emu::lane_id() ^ mask, width);
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    return emu_shfl_(v, emu::lane_id() + (int)d, width);
}
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    return emu_shfl_(v, emu::lane_id() - (int)d, width);
}
static inline unsigned __ballot_sync(unsigned, int p) {
    uint32_t m = p != 0;
    const uint32_t(*t)[16] = emu::exchange(&m, 1);
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= t[i][0] ? 1u << i : 0u;
    emu::exchange_done();
    return r;
}
static inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == 0xffffffffu; }

#endif
