/* bench_timing.h - what the kernels/cuda benchmark programs (bench_gpu_ops.c, bench_moe.c) share: BENCH_CK (a
 * failed omni call ends the program with its message) and the event timing: the median milliseconds of one call
 * over `runs` calls, each between two events on stream s, after 5 warm-ups; call r uses input buffer r % nbuf.
 * Header-only (static functions), for benchmark executables only (they exit on errors). */
#ifndef OMNI_CUDA_BENCH_TIMING_H
#define OMNI_CUDA_BENCH_TIMING_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "kernels/status.h"

#define BENCH_CK(call)                                                                                         \
    do {                                                                                                       \
        if ((call) != 0) {                                                                                     \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, omni_last_error());            \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static int bench_cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median ms of fn(buffer) over runs (>= 1) timed calls; a CUDA error or no host memory ends the program. */
static float bench_time_ms(void (*fn)(int buf), int nbuf, int runs, cudaStream_t s) {
    cudaEvent_t *ev = (cudaEvent_t *)calloc(2 * (size_t)runs, sizeof *ev);
    float *ms = (float *)malloc(sizeof(float) * (size_t)runs), med = -1.f;
    int made = 0, ok = ev && ms;
    while (ok && made < 2 * runs) ok = cudaEventCreate(&ev[made++]) == cudaSuccess;
    for (int i = 0; ok && i < 5; i++) fn(i % nbuf);
    for (int r = 0; ok && r < runs; r++) {
        ok = cudaEventRecord(ev[2 * r], s) == cudaSuccess;
        fn(r % nbuf);
        ok = ok && cudaEventRecord(ev[2 * r + 1], s) == cudaSuccess;
    }
    ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
    for (int r = 0; ok && r < runs; r++) ok = cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]) == cudaSuccess;
    if (ok) {
        qsort(ms, (size_t)runs, sizeof(float), bench_cmp_f);
        med = ms[runs / 2];
    }
    for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
    free(ev), free(ms);
    if (!ok) {
        fprintf(stderr, "FATAL: event timing failed\n");
        exit(1);
    }
    return med;
}

#endif
