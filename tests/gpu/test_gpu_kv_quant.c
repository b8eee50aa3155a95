/* test_gpu_kv_quant.c - the GPU block quantizer (kvcache/kv_cuda.h) produces bytes identical to the CPU reference
 * (kvq_quant_keys / kvq_quant_values) for int2/int4, OScaR (rotate + norm) and KIVI, D = 64 and 128, f32 sources
 * (with/without FWHT and bf16 rounding, padded row strides) and bf16 sources, sink-excluded key tokens (t0), on
 * blocks of awkward content: random normal, constant groups, zeros, huge (saturating fp16) and tiny (fp16
 * subnormal) magnitudes, signed zeros, |mean| >> range. Packed blocks are compared with memcmp; canary bytes
 * between and after the blocks must stay untouched; every fp16 field written must be finite.
 * No GPU: prints SKIP and exits 77. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/tensor.h"
#include "kvcache/kv_cuda.h"
#include "kvcache/kv_layout.h"
#include "kvcache/kv_quant.h"
#include "kvcache/kv_test_util.h"

#define NBLK 19
#define CANARY 0xA5

/* Block b's content kind (b % 8): 0 normal, 1 constant groups, 2 zeros, 3 huge, 4 tiny, 5 signed zeros + ties,
 * 6 offset mean, 7 uniform small-integer values (exact ties at code boundaries). Layout [rows][row_stride]. */
static void fill_block(float *x, int D, int64_t rs, int b, int values, rng_t *r) {
    int kind = b % 8;
    for (int j = 0; j < 32; j++)
        for (int c = 0; c < D; c++) {
            float v = rng_normal(r), *p = x + j * rs + c;
            switch (kind) {
            case 0: *p = v; break;
            case 1: *p = values ? (float)(c / 32) * 0.37f - 1.0f : (float)c * 0.013f - 0.5f; break; /* const groups */
            case 2: *p = 0.0f; break;
            case 3: *p = v * (c % 3 == 0 ? 1e5f : 3e4f); break;
            case 4: *p = v * 1e-6f; break;
            case 5: *p = (rng_next(r) & 1) ? 0.0f : -0.0f; if (c % 5 == 0) *p = v; break;
            case 6: *p = 1000.0f + v * 0.01f; break;
            default: *p = (float)((int)(rng_next(r) % 7) - 3) * 0.5f; break;
            }
        }
}

static int fp16_fields_finite(const uint8_t *blk, size_t off, int n) {
    for (int i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, blk + off + 2 * i, 2);
        if (((h >> 10) & 0x1f) == 0x1f) return 0;
    }
    return 1;
}

/* One configuration: quantize NBLK blocks on the CPU and the GPU, compare. Returns the number of mismatches. */
static int run_case(int D, int bits, int keys, int use_norm, int rotate, int round_bf16, int src_bf16, int pad,
                    int t0, uint64_t seed) {
    const int64_t rs = D + pad, bs = 32 * rs, n = (int64_t)NBLK * bs;
    const size_t bb = (size_t)(keys ? kv_key_block_bytes(D, bits, use_norm) : kv_value_block_bytes(D, bits)), stride = bb + 12;
    rng_t r = {seed};
    float *x = malloc(n * 4), *rows = malloc(32 * D * 4), *tmp = malloc(32 * D * 4);
    uint16_t *xb = malloc(n * 2);
    uint8_t *ref = malloc(NBLK * stride), *got = malloc(NBLK * stride + 64);
    for (int b = 0; b < NBLK; b++) fill_block(x + b * bs, D, rs, b, !keys, &r);
    for (int64_t i = 0; i < n; i++) xb[i] = omni_f32_to_bf16(x[i]);
    memset(ref, CANARY, NBLK * stride);
    for (int b = 0; b < NBLK; b++) {
        for (int j = 0; j < 32; j++)
            for (int c = 0; c < D; c++) {
                int64_t i = b * bs + j * rs + c;
                rows[j * D + c] = src_bf16 ? omni_bf16_to_f32(xb[i]) : x[i];
            }
        for (int j = 0; j < 32; j++) {
            if (rotate) kvq_fwht(rows + j * D, D);
            if (round_bf16)
                for (int c = 0; c < D; c++) rows[j * D + c] = kvq_bf16_round(rows[j * D + c]);
        }
        if (keys) kvq_quant_keys(rows, t0, D, bits, use_norm, ref + b * stride, tmp);
        else kvq_quant_values(rows, D, bits, ref + b * stride);
    }
    void *dsrc = NULL;
    uint8_t *ddst = NULL;
    size_t src_bytes = src_bf16 ? n * 2 : n * 4, dst_bytes = NBLK * stride + 64;
    int bad = 0;
    if (cudaMalloc(&dsrc, src_bytes) || cudaMalloc((void **)&ddst, dst_bytes) ||
        cudaMemcpy(dsrc, src_bf16 ? (void *)xb : (void *)x, src_bytes, cudaMemcpyHostToDevice) ||
        cudaMemset(ddst, CANARY, dst_bytes)) {
        CHECK(0, "cuda alloc/copy failed");
        bad = 1;
        goto done;
    }
    kvc_quant_desc d = {D, bits, use_norm, rotate, round_bf16, src_bf16, rs, bs, (int64_t)stride};
    omni_status st = keys ? kvc_quant_keys(&d, dsrc, NBLK, t0, ddst, NULL) : kvc_quant_values(&d, dsrc, NBLK, ddst, NULL);
    CHECK(st == OMNI_OK, "launch: %s", omni_last_error());
    cudaError_t ce = cudaDeviceSynchronize();
    CHECK(ce == cudaSuccess, "kernel: %s", cudaGetErrorString(ce));
    cudaMemcpy(got, ddst, dst_bytes, cudaMemcpyDeviceToHost);
    /* fp16 fields (scale, min, norms) from the first one to the end of the block (kv_layout.h) */
    size_t hoff = (size_t)(keys ? kv_key_scale_off(D, bits) : kv_value_scale_off(D, bits));
    int nhalf = (int)((bb - hoff) / 2);
    for (int b = 0; b < NBLK; b++) {
        const uint8_t *g = got + b * stride, *e = ref + b * stride;
        if (memcmp(g, e, bb)) {
            size_t i = 0;
            while (g[i] == e[i]) i++;
            if (bad < 3)
                fprintf(stderr, "  D %d bits %d %s norm %d rot %d rnd %d bf16src %d t0 %d: block %d (kind %d) byte %zu: "
                        "gpu %02x cpu %02x\n", D, bits, keys ? "K" : "V", use_norm, rotate, round_bf16, src_bf16, t0, b,
                        b % 8, i, g[i], e[i]);
            bad++;
        }
        for (size_t i = bb; i < stride; i++) bad += g[i] != CANARY;
        if (!fp16_fields_finite(g, hoff, nhalf)) bad++;
    }
    for (int i = 0; i < 64; i++) bad += got[NBLK * stride + i] != CANARY;
done:
    cudaFree(dsrc);
    cudaFree(ddst);
    free(x), free(xb), free(rows), free(tmp), free(ref), free(got);
    return bad;
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    uint64_t seed = 1;
    for (int D = 64; D <= 128; D *= 2)
        for (int bits = 2; bits <= 4; bits += 2) {
            int total = 0, cases = 0;
            /* OScaR keys/values as the cache flushes them: f32 -> FWHT -> bf16; also the bf16 window source */
            for (int keys = 0; keys <= 1; keys++) {
                total += run_case(D, bits, keys, keys, 1, 1, 0, 0, 0, seed++), cases++;
                total += run_case(D, bits, keys, keys, 0, 0, 1, 0, 0, seed++), cases++;
                /* KIVI (no rotation, no norm), exact f32 inputs, padded rows */
                total += run_case(D, bits, keys, 0, 0, 0, 0, 24, 0, seed++), cases++;
                total += run_case(D, bits, keys, 0, 0, 1, 0, 8, 0, seed++), cases++;
                /* rotation without rounding, norm without rotation */
                total += run_case(D, bits, keys, keys, 1, 0, 0, 0, 0, seed++), cases++;
                total += run_case(D, bits, keys, keys, 0, 0, 0, 4, 0, seed++), cases++;
            }
            int sinks[3] = {1, 5, 31};
            for (int i = 0; i < 3; i++) { /* sink-excluded key tokens, with and without norms */
                total += run_case(D, bits, 1, 1, 1, 1, 0, 0, sinks[i], seed++), cases++;
                total += run_case(D, bits, 1, 0, 0, 0, 0, 0, sinks[i], seed++), cases++;
            }
            CHECK(total == 0, "D %d int%d: %d mismatching blocks/canaries over %d cases", D, bits, total, cases);
            printf("D %3d int%d: %d cases x %d blocks, %d mismatches\n", D, bits, cases, NBLK, total);
        }
    /* bad arguments are rejected before any launch */
    kvc_quant_desc d = {96, 2, 1, 0, 0, 0, 96, 96 * 32, 4096};
    CHECK(kvc_quant_keys(&d, (void *)16, 1, 0, (uint8_t *)16, NULL) == OMNI_ERR_USAGE, "head_dim 96 rejected");
    d.head_dim = 128, d.row_stride = 128, d.dst_stride = 100;
    CHECK(kvc_quant_values(&d, (void *)16, 1, (uint8_t *)16, NULL) == OMNI_ERR_USAGE, "short dst stride rejected");
    return check_exit();
}
