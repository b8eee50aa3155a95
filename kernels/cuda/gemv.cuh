/* gemv.cuh - internal to kernels/cuda: the weight-streaming kernel for linears with few rows (decode),
 * y[b][m, n] = Σ_k x[b][m, k] · W[b][n, k] (+ bias[b][n]) for m < M <= 8, with optional per-batch selection of
 * the weight (an expert) and of the x row (a token). Used by omni_cuda_linear for M <= 8 and by the MoE decode
 * path. Requirements: K % 8 == 0, x and W rows 16-byte aligned (ldx, K multiples of 8). */
#ifndef OMNI_CUDA_GEMV_CUH
#define OMNI_CUDA_GEMV_CUH

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/status.h"

typedef struct {
    void *y;                 /* [batch][M][ldy] bf16 (or f32 with f32_out) */
    int64_t ldy, y_bstride;  /* elements */
    const uint16_t *x;       /* x rows of batch b start at x + (xsel ? xsel[b] : b / xdiv) * x_bstride */
    int64_t ldx, x_bstride;
    const int32_t *xsel;     /* device [batch] or NULL */
    int xdiv;                /* batch entries per x row when xsel is NULL (0 means 1) */
    const uint16_t *w;       /* W of batch b at w + (wsel ? wsel[b] : b) * w_bstride, [N, K] row-major */
    int64_t w_bstride;
    const int32_t *wsel;     /* device [batch] or NULL */
    const uint16_t *bias;    /* NULL or [*, N] bf16, row (wsel ? wsel[b] : b) * bias_bstride */
    int64_t bias_bstride;
    int M, N, K, batch;
    int f32_out;
    /* Prologue (batch 1, no selections, bf16 out; omni_cuda_add_rmsnorm_linear / omni_cuda_swiglu_linear): x is not
     * read; each block builds its M rows of K in shared memory first. pro 1: rows = rmsnorm(pin + padd) * pnorm
     * with add_rmsnorm's arithmetic, pout = bf16(pin + padd) written by block 0; pro 2: rows = swiglu(pin), pin
     * rows of 2K (gate, up). Rows [M][K] contiguous. */
    int pro;
    const uint16_t *pin, *padd, *pnorm;
    uint16_t *pout;
    float eps;
} omni_gemv_args;

/* 1 if the GEMV kernel takes these sizes and alignments. */
int omni_gemv_ok(int M, int K, const void *x, int64_t ldx, const void *w);
/* Enqueue the kernel on stream s (no allocation, no sync). */
omni_status omni_gemv_launch(const omni_gemv_args *a, cudaStream_t s);
/* Kernel attributes of the bulk-copy version (once per process, before a graph capture: omni_cuda_ctx_init). */
void omni_gemv_init(void);

#endif
