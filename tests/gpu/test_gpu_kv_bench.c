/* test_gpu_kv_bench.c - timing of kvc_decode (test_gpu_kv_attn --bench; not a test): bs1, 32 query / 8 KV heads,
 * D 128, OScaR int2, window 128, contexts 4K / 32K / 128K. Pages hold random codes with finite fp16 scales/mins/
 * norms (speed does not depend on the values; the output is checked finite first), in shuffled page order. The
 * cache is replicated over enough page sets to exceed 2x the 60 MB L2 and calls rotate through them.
 * Reports the median of per-call CUDA-event times and the bytes the kernel must read (quant blocks + bf16 window
 * rows + q/k/v/out), as % of 4.3 TB/s. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache/kv_cuda.h"
#include "kvcache/kv_quant.h"
#include "kvcache/kv_test_util.h"

#define BCU(x)                                                                                                 \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);           \
            return 1;                                                                                          \
        }                                                                                                      \
    } while (0)

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void fill_quant_page(uint8_t *pg, int Hkv, int D, size_t kh, size_t vh, rng_t *r) {
    for (size_t i = 0; i < Hkv * (kh + vh); i++) pg[i] = (uint8_t)rng_next(r);
    for (int g = 0; g < Hkv; g++) {
        uint16_t *ks = (uint16_t *)(pg + g * kh + (size_t)D * 8); /* scale [D], min [D], norm [32] */
        for (int c = 0; c < D; c++) ks[c] = kvq_f2h(0.05f + 0.01f * (c % 7)), ks[D + c] = kvq_f2h(-0.1f);
        for (int j = 0; j < 32; j++) ks[2 * D + j] = kvq_f2h(8.0f + (j % 5));
        uint16_t *vs = (uint16_t *)(pg + Hkv * kh + g * vh + (size_t)32 * D / 4);
        for (int i = 0; i < 32 * (D / 32); i++) vs[i] = kvq_f2h(0.5f), vs[32 * (D / 32) + i] = kvq_f2h(-0.75f);
    }
}

static int bench_one(int64_t L, FILE *csv) {
    const int Hq = 32, Hkv = 8, D = 128, R = 128, reps = 200;
    const size_t kh = kvq_key_bytes(D, 2, 1), vh = kvq_value_bytes(D, 2), qpage = Hkv * (kh + vh);
    const size_t rpage = (size_t)2 * Hkv * 32 * D * 2;
    const int nb = (int)((L + 31) / 32), nq = (int)((L - R) / 32), nr = nb - nq;
    const double bytes = (double)nq * qpage + (double)(L - 32LL * nq) * Hkv * D * 2 * 2 + (Hq * 2 + Hkv * 2) * D * 4.0;
    int copies = (int)ceil(120e6 / bytes);
    if (copies < 1) copies = 1;
    rng_t r = {(uint64_t)L};
    uint8_t *hq = malloc((size_t)copies * nq * qpage), *hr = malloc((size_t)copies * nr * rpage);
    for (int64_t i = 0; i < (int64_t)copies * nq; i++) fill_quant_page(hq + i * qpage, Hkv, D, kh, vh, &r);
    uint16_t *rw = (uint16_t *)hr;
    for (int64_t i = 0; i < (int64_t)copies * nr * rpage / 2; i++) rw[i] = (uint16_t)(0x3c00 + (rng_next(&r) & 0x1ff)); /* finite bf16 */
    int32_t *qtab = malloc((size_t)copies * nb * 4), *rtab = malloc((size_t)copies * nb * 4);
    int32_t *qperm = malloc((size_t)copies * (nq + 1) * 4), *rperm = malloc((size_t)copies * nr * 4);
    for (int i = 0; i < copies * nq; i++) qperm[i] = i;
    for (int i = copies * nq - 1; i > 0; i--) {
        int j = (int)(rng_next(&r) % (uint64_t)(i + 1)), t = qperm[i];
        qperm[i] = qperm[j], qperm[j] = t;
    }
    for (int i = 0; i < copies * nr; i++) rperm[i] = i;
    for (int cp = 0; cp < copies; cp++)
        for (int b = 0; b < nb; b++) {
            qtab[cp * nb + b] = b < nq ? qperm[cp * nq + b] : -1;
            rtab[cp * nb + b] = b >= nq ? rperm[cp * nr + b - nq] : -1;
        }
    uint8_t *dq, *dr;
    int32_t *dqt, *drt, *dlen, len32 = (int32_t)L;
    float *dqv, *dk, *dv, *dout, *hout = malloc((size_t)Hq * D * 4);
    BCU(cudaMalloc((void **)&dq, (size_t)copies * nq * qpage));
    BCU(cudaMalloc((void **)&dr, (size_t)copies * nr * rpage));
    BCU(cudaMalloc((void **)&dqt, (size_t)copies * nb * 4));
    BCU(cudaMalloc((void **)&drt, (size_t)copies * nb * 4));
    BCU(cudaMalloc((void **)&dlen, 4));
    BCU(cudaMalloc((void **)&dqv, (size_t)Hq * D * 4));
    BCU(cudaMalloc((void **)&dk, (size_t)Hkv * D * 4));
    BCU(cudaMalloc((void **)&dv, (size_t)Hkv * D * 4));
    BCU(cudaMalloc((void **)&dout, (size_t)Hq * D * 4));
    BCU(cudaMemcpy(dq, hq, (size_t)copies * nq * qpage, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(dr, hr, (size_t)copies * nr * rpage, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(dqt, qtab, (size_t)copies * nb * 4, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(drt, rtab, (size_t)copies * nb * 4, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(dlen, &len32, 4, cudaMemcpyHostToDevice));
    float *hv = malloc((size_t)Hq * D * 4);
    for (int i = 0; i < Hq * D; i++) hv[i] = rng_normal(&r);
    BCU(cudaMemcpy(dqv, hv, (size_t)Hq * D * 4, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(dk, hv, (size_t)Hkv * D * 4, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(dv, hv + Hkv * D, (size_t)Hkv * D * 4, cudaMemcpyHostToDevice));
    kvc_attn *a = NULL;
    if (kvc_attn_init(1, Hq, Hkv, D, &a)) {
        fprintf(stderr, "init: %s\n", omni_last_error());
        return 1;
    }
    kvc_layer_view *views = malloc(copies * sizeof *views);
    for (int cp = 0; cp < copies; cp++) {
        kvc_layer_view v = {Hkv, D, 2, 2, 1, 1, R, dq, (int64_t)qpage, 0, (int64_t)(Hkv * kh), dr, (int64_t)rpage, 0,
                            (int64_t)Hkv * 32 * D * 2, dqt + cp * nb, drt + cp * nb, nb, dlen};
        views[cp] = v;
    }
    const float scale = 1.0f / sqrtf((float)D);
    for (int i = 0; i < 20; i++)
        if (kvc_decode(a, &views[i % copies], 1, L, dqv, dk, dv, dout, Hq, scale, NULL)) {
            fprintf(stderr, "decode: %s\n", omni_last_error());
            return 1;
        }
    BCU(cudaDeviceSynchronize());
    BCU(cudaMemcpy(hout, dout, (size_t)Hq * D * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < Hq * D; i++) bad += !isfinite(hout[i]);
    cudaEvent_t ev[2 * 200 + 2];
    for (int i = 0; i < 2 * reps + 2; i++) BCU(cudaEventCreate(&ev[i]));
    float t[200];
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(ev[2 * i], NULL);
        kvc_decode(a, &views[i % copies], 1, L, dqv, dk, dv, dout, Hq, scale, NULL);
        cudaEventRecord(ev[2 * i + 1], NULL);
    }
    BCU(cudaDeviceSynchronize());
    for (int i = 0; i < reps; i++) cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]);
    cudaEventRecord(ev[2 * reps], NULL);
    for (int i = 0; i < reps; i++) kvc_decode(a, &views[i % copies], 1, L, dqv, dk, dv, dout, Hq, scale, NULL);
    cudaEventRecord(ev[2 * reps + 1], NULL);
    BCU(cudaDeviceSynchronize());
    float total = 0.0f;
    cudaEventElapsedTime(&total, ev[2 * reps], ev[2 * reps + 1]);
    qsort(t, reps, sizeof(float), cmp_f);
    double us = t[reps / 2] * 1000.0, us_b2b = total * 1000.0 / reps;
    printf("bs1 L %6lld int2 32/8 D128 R128: %3d splits, %8.1f us median (%8.1f us back-to-back), %7.2f MB read, "
           "%5.1f%% of 4.3 TB/s (b2b %5.1f%%)%s\n", (long long)L, kvc_attn_splits(a, 1, L), us, us_b2b, bytes / 1e6,
           100.0 * bytes / (us * 1e-6) / 4.3e12, 100.0 * bytes / (us_b2b * 1e-6) / 4.3e12,
           bad ? "  NON-FINITE OUTPUT" : "");
    if (csv) fprintf(csv, "%lld,%.2f,%.2f,%.0f\n", (long long)L, us, us_b2b, bytes);
    for (int i = 0; i < 2 * reps + 2; i++) cudaEventDestroy(ev[i]);
    kvc_attn_free(a);
    cudaFree(dq), cudaFree(dr), cudaFree(dqt), cudaFree(drt), cudaFree(dlen), cudaFree(dqv), cudaFree(dk);
    cudaFree(dv), cudaFree(dout);
    free(hq), free(hr), free(qtab), free(rtab), free(qperm), free(rperm), free(hout), free(hv), free(views);
    return bad != 0;
}

int bench_main(void) {
    int64_t lens[3] = {4096, 32768, 131072};
    const char *only = getenv("OMNI_BENCH_LEN"); /* one context length only (for profilers) */
    int rc = 0;
    for (int i = 0; i < 3; i++)
        if (!only || atoll(only) == lens[i]) rc |= bench_one(lens[i], NULL);
    return rc;
}
