/* emu_shim.h - what the kernels of kernels/cuda need beyond tests/gpu/emu/cuda_emu.h to run on the CPU emulator
 * (compiled with -DKVC_EMU -include cuda_emu.h by g++; included from common.cuh only then): static shared memory,
 * a few intrinsics and atomics, and nvcuda::wmma with the whole 16 x 16 tile in every lane (each emulated thread
 * computes the full fragment product; the stores of the 32 lanes write the same values), so fragment indexing in
 * our code is exercised but not the hardware's lane layout, which wmma hides anyway. */
#ifndef OMNI_CUDA_EMU_SHIM_H
#define OMNI_CUDA_EMU_SHIM_H

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The emulator runs a CTA's threads as fibers of one OS thread and CTAs one after another: a function-static
 * array is the CTA's shared memory. */
#undef __shared__
#define __shared__ static

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
template <class T> static inline T __ldcs(const T *p) { return *p; }
static inline int atomicMin(int *p, int v) {
    int o = *p;
    *p = v < o ? v : o;
    return o;
}
static inline int atomicMax(int *p, int v) {
    int o = *p;
    *p = v > o ? v : o;
    return o;
}
static inline unsigned atomicMax(unsigned *p, unsigned v) {
    unsigned o = *p;
    *p = v > o ? v : o;
    return o;
}
static inline unsigned atomicInc(unsigned *p, unsigned v) {
    unsigned o = *p;
    *p = o >= v ? 0u : o + 1u;
    return o;
}
static inline unsigned atomicExch(unsigned *p, unsigned v) {
    unsigned o = *p;
    *p = v;
    return o;
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
static inline unsigned long long __double2ull_rn(double x) { return (unsigned long long)llrint(x); }

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    float x[16 * 16]; /* [row][col] of the tile this fragment holds */
};

template <class Use, class T, class L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    for (int i = 0; i < 256; i++) f.x[i] = v;
}
/* A: row_major, element (m, k) at p[m * ldm + k]. */
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) f.x[m * 16 + k] = __bfloat162float(p[m * ldm + k]);
}
/* B: col_major, element (k, n) at p[n * ldm + k]. */
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    for (int n = 0; n < 16; n++)
        for (int k = 0; k < 16; k++) f.x[k * 16 + n] = __bfloat162float(p[n * ldm + k]);
}
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    float r[256];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float s = c.x[m * 16 + n];
            for (int k = 0; k < 16; k++) s += a.x[m * 16 + k] * b.x[k * 16 + n];
            r[m * 16 + n] = s;
        }
    memcpy(d.x, r, sizeof r);
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                     layout_t layout) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            if (layout == mem_row_major)
                p[m * ldm + n] = f.x[m * 16 + n];
            else
                p[n * ldm + m] = f.x[m * 16 + n];
        }
}
} // namespace wmma
} // namespace nvcuda

#endif
