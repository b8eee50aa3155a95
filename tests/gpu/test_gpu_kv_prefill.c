/* test_gpu_kv_prefill.c - GPU prefill attention (kvc_prefill: a chunk over the paged history plus itself, causal)
 * and segment attention (kvc_attn_segments: non-causal, the towers) against f64 evaluations, and kvc_prefill
 * against the CPU cache's kv_forward for the same chunk.
 *
 * Prefill cases: batches of sequences (slot order reversed) with history lengths and chunk sizes cycling through
 * awkward values (history 0, 1, 31, 32, 33, 127, 1025; chunks 1, 5, 31, 33, 100, 64), every format (bf16, int2,
 * int4, kivi2, k4v2, bf16 inside a quantizing cache), windows 0 / 32 / 128, sinks 0 / 4, GQA 1 / 4 / 12, D 64 /
 * 128. The history is stored as the cache stores it (attn_test_util.h); the f64 reference attends to the
 * dequantized stored history and to the chunk's keys/values in full precision (causal), as kv_forward does.
 * Segment cases: random segment lengths (1 .. 300), 16 heads, D 64 / 72 / 128, q/k/v interleaved in one
 * buffer. Checks: outputs finite, canaries after out untouched, accuracy policy (max err <= 1e-2 max |ref|,
 * RMS <= 3e-3 RMS ref); kvc_prefill_hist (a dequantization scratch for all or some of the entries) gives
 * kvc_prefill's output bit for bit and writes nothing past its scratch. Without a GPU: SKIP (77);
 * test_emu_kv_prefill runs the short cases on the emulator.
 * --short: smaller cases (CI, memcheck); --tiny: two cases (racecheck); --full: adds long ones. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_test_util.h"
#include "check.h"

typedef struct {
    const char *mode;
    int R, S, Hq, Hkv, D, bf16q, n_seq;
    const int64_t *hist;
    int nh;
    const int *chunk;
    int nc;
    int cpu_check;
} pcase;

static int g_short = 0;

/* kv_forward of each slot's chunk over its history (CPU cache of the same format); out [T][Hq][D] in slot order. */
static void cpu_prefill(const pcase *t, int n, const int64_t *hl, const int *cn, float *const *k, float *const *v,
                        const uint16_t *qslot, float *out) {
    kv_format f;
    kv_parse_mode(t->mode, &f);
    f.window = t->R, f.n_sink = (f.k_type == KV_Q2 || f.k_type == KV_Q4) ? t->S : 0;
    kv_params p = kv_default_params();
    p.fmt = f, p.n_layers = 1, p.n_kv_heads = t->Hkv, p.head_dim = t->D, p.max_seqs = n, p.max_chunk = 2048;
    p.max_tokens = 0;
    for (int s = 0; s < n; s++) p.max_tokens += hl[s] + cn[s] + 64;
    kv_cache *c = NULL;
    if (kv_init(&p, &c)) {
        fprintf(stderr, "kv_init: %s\n", omni_last_error());
        exit(1);
    }
    const int D = t->D, Hq = t->Hq, Hkv = t->Hkv;
    float *qb = malloc((size_t)1024 * Hq * D * 4), *ob = malloc((size_t)1024 * Hq * D * 4);
    int64_t row = 0;
    for (int s = 0; s < n; s++) {
        int id;
        kv_seq_add(c, &id);
        for (int64_t t0 = 0; t0 < hl[s]; t0 += 1024) {
            int m = (int)(hl[s] - t0 < 1024 ? hl[s] - t0 : 1024);
            memset(qb, 0, (size_t)m * Hq * D * 4);
            omni_status st = kv_forward(c, 0, 1, &id, &m, qb, k[s] + (size_t)t0 * Hkv * D, v[s] + (size_t)t0 * Hkv * D, ob,
                                        Hq, 1.0f / sqrtf((float)D));
            if (!st) st = kv_commit(c, 1, &id, &m);
            if (st) {
                fprintf(stderr, "cpu history: %s\n", omni_last_error());
                exit(1);
            }
        }
        int m = cn[s];
        for (int64_t i = 0; i < (int64_t)m * Hq * D; i++) qb[i] = omni_bf16_to_f32(qslot[row * Hq * D + i]);
        if (kv_forward(c, 0, 1, &id, &m, qb, k[s] + (size_t)hl[s] * Hkv * D, v[s] + (size_t)hl[s] * Hkv * D,
                       out + (size_t)row * Hq * D, Hq, 1.0f / sqrtf((float)D))) {
            fprintf(stderr, "cpu chunk: %s\n", omni_last_error());
            exit(1);
        }
        row += m;
    }
    kv_free(c);
    free(qb), free(ob);
}

/* kvc_prefill_hist against kvc_prefill's output `ref` (bit for bit: the scratch holds the values the tiles would
 * dequantize): with a scratch for every entry that uses one and with one for about half of them (the others
 * dequantize in the tiles), or one block's worth when no entry uses it; the scratch past its size stays untouched. */
static void check_hist(const pcase *t, const kv_layer_view *view, int n, const int32_t *dslots, const int32_t *dcu,
                       int maxq, const uint16_t *dq, const uint16_t *dk, const uint16_t *dv, const int64_t *hl,
                       const int *cn, const int *slot_of, const uint16_t *ref, size_t no) {
    const int gs = t->Hq / t->Hkv;
    int64_t need = 0, first = 0; /* tokens the entries take; the first user's */
    for (int i = 0; i < n; i++) {
        const int s = slot_of[i];
        const int64_t nq = view->cache_quant && hl[s] >= t->R ? (hl[s] - t->R) / 32 : 0;
        if (view->quant && cn[s] > 64 / gs && nq > 0) need += nq * 32, first = first ? first : nq * 32;
    }
    const int64_t caps[2] = {need > 0 ? need : 32, need > first ? first + (need - first) / 2 : need / 2};
    const size_t canary = 256, hmax = kvc_prefill_hist_bytes(t->Hkv, t->D, need > 32 ? need : 32) / 2;
    uint16_t *dh, *dout, *out = malloc(no * 2), *tail = malloc(canary * 2);
    ATU_CU(cudaMalloc((void **)&dh, (hmax + canary) * 2));
    ATU_CU(cudaMalloc((void **)&dout, no * 2));
    for (int k = 0; k < (need > 0 ? 2 : 1); k++) {
        const size_t hb = kvc_prefill_hist_bytes(t->Hkv, t->D, caps[k]) / 2;
        ATU_CU(cudaMemset(dh, 0xff, (hmax + canary) * 2));
        ATU_CU(cudaMemset(dout, 0xff, no * 2));
        CHECK(kvc_prefill_hist(view, n, dslots, dcu, maxq, dq, dk, dv, dout, t->Hq, 1.0f / sqrtf((float)t->D), dh,
                               caps[k], NULL) == OMNI_OK, "kvc_prefill_hist: %s", omni_last_error());
        ATU_CU(cudaDeviceSynchronize());
        ATU_CU(cudaGetLastError());
        ATU_CU(cudaMemcpy(out, dout, no * 2, cudaMemcpyDeviceToHost));
        ATU_CU(cudaMemcpy(tail, dh + hb, canary * 2, cudaMemcpyDeviceToHost));
        size_t diff = 0, over = 0;
        for (size_t i = 0; i < no; i++) diff += out[i] != ref[i];
        for (size_t i = 0; i < canary; i++) over += tail[i] != 0xffff;
        CHECK(diff == 0, "%s: kvc_prefill_hist (scratch %lld of %lld tokens) differs from kvc_prefill in %zu values",
              t->mode, (long long)caps[k], (long long)need, diff);
        CHECK(over == 0, "%s: kvc_prefill_hist wrote %zu values past its scratch of %lld tokens", t->mode, over,
              (long long)caps[k]);
    }
    printf(" [scratch %lld tok: same bits]", (long long)need);
    cudaFree(dh), cudaFree(dout);
    free(out), free(tail);
}

static void run_prefill(const pcase *t, uint64_t seed) {
    const int n = t->n_seq, Hq = t->Hq, Hkv = t->Hkv, D = t->D, gs = Hq / Hkv;
    const atu_layout y = atu_make_layout(t->mode, Hkv, D, t->R, t->S, t->bf16q);
    int64_t *hl = malloc((size_t)n * 8);
    int *cn = malloc((size_t)n * 4), *slot_of = malloc((size_t)n * 4), maxq = 0;
    float **k = malloc((size_t)n * sizeof(float *)), **v = malloc((size_t)n * sizeof(float *));
    rng_t r = {seed};
    int64_t T = 0;
    for (int s = 0; s < n; s++) { /* per slot s: history hl[s] tokens then the chunk cn[s] tokens of data */
        hl[s] = t->hist[s % t->nh], cn[s] = t->chunk[s % t->nc];
        if (g_short && hl[s] > 300) hl[s] = 300 - (hl[s] % 97);
        maxq = cn[s] > maxq ? cn[s] : maxq, T += cn[s];
        const int64_t N = hl[s] + cn[s];
        k[s] = malloc((size_t)N * Hkv * D * 4), v[s] = malloc((size_t)N * Hkv * D * 4);
        for (int64_t i = 0; i < N * Hkv * D; i++) /* bf16 values: the chunk is given to the GPU in bf16 */
            k[s][i] = kvq_bf16_round(rng_normal(&r)), v[s][i] = kvq_bf16_round(rng_normal(&r));
    }
    for (int i = 0; i < n; i++) slot_of[i] = n - 1 - i;
    /* batch order rows: entry i = slot slot_of[i] */
    int32_t *cu = malloc((size_t)(n + 1) * 4);
    cu[0] = 0;
    for (int i = 0; i < n; i++) cu[i + 1] = cu[i] + cn[slot_of[i]];
    uint16_t *q = malloc((size_t)T * Hq * D * 2), *kc = malloc((size_t)T * Hkv * D * 2), *vc = malloc((size_t)T * Hkv * D * 2);
    atu_rand_bf16(q, (size_t)T * Hq * D, &r, 1.0f);
    for (int i = 0; i < n; i++) {
        const int s = slot_of[i];
        for (int64_t j = 0; j < (int64_t)cn[s] * Hkv * D; j++) {
            kc[(int64_t)cu[i] * Hkv * D + j] = omni_f32_to_bf16(k[s][hl[s] * Hkv * D + j]);
            vc[(int64_t)cu[i] * Hkv * D + j] = omni_f32_to_bf16(v[s][hl[s] * Hkv * D + j]);
        }
    }
    atu_cache c = atu_build(&y, n, hl, k, v, seed ^ 0x9e3779b9u); /* only the first hl[s] tokens are stored */
    kv_layer_view view;
    atu_dev dev = atu_upload(&c, &view);
    const size_t no = (size_t)T * Hq * D;
    uint16_t *dq, *dk, *dv, *dout, *out = malloc((no + 64) * 2);
    int32_t *dcu, *dslots;
    ATU_CU(cudaMalloc((void **)&dq, no * 2));
    ATU_CU(cudaMalloc((void **)&dk, (size_t)T * Hkv * D * 2 + 2));
    ATU_CU(cudaMalloc((void **)&dv, (size_t)T * Hkv * D * 2 + 2));
    ATU_CU(cudaMalloc((void **)&dout, (no + 64) * 2));
    ATU_CU(cudaMalloc((void **)&dcu, (size_t)(n + 1) * 4));
    ATU_CU(cudaMalloc((void **)&dslots, (size_t)n * 4));
    ATU_CU(cudaMemcpy(dq, q, no * 2, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dk, kc, (size_t)T * Hkv * D * 2, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dv, vc, (size_t)T * Hkv * D * 2, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dcu, cu, (size_t)(n + 1) * 4, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dslots, slot_of, (size_t)n * 4, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemset(dout, 0xff, (no + 64) * 2));
    const float scale = 1.0f / sqrtf((float)D);
    CHECK(kvc_prefill(&view, n, dslots, dcu, maxq, dq, dk, dv, dout, Hq, scale, NULL) == OMNI_OK, "kvc_prefill: %s",
          omni_last_error());
    ATU_CU(cudaDeviceSynchronize());
    ATU_CU(cudaGetLastError());
    ATU_CU(cudaMemcpy(out, dout, (no + 64) * 2, cudaMemcpyDeviceToHost));
    int canary = 0;
    for (int i = 0; i < 64; i++) canary += out[no + i] != 0xffff;
    CHECK(canary == 0, "%s: %d canary values overwritten", t->mode, canary);
    /* f64 reference: stored history + the chunk (in the stored basis: rotated like the cache would store it, but
     * at full precision), causal within the chunk */
    double *ref = malloc(no * 8);
    float *row = malloc((size_t)D * 4);
    for (int i = 0; i < n; i++) {
        const int s = slot_of[i];
        const int64_t N = hl[s] + cn[s];
        float *K = malloc((size_t)(N + 1) * D * 4), *V = malloc((size_t)(N + 1) * D * 4);
        for (int g = 0; g < Hkv; g++) {
            atu_seq_kv(&c, s, g, hl[s], K, V);
            for (int j = 0; j < cn[s]; j++) {
                memcpy(K + (size_t)(hl[s] + j) * D, k[s] + ((size_t)(hl[s] + j) * Hkv + g) * D, (size_t)D * 4);
                memcpy(V + (size_t)(hl[s] + j) * D, v[s] + ((size_t)(hl[s] + j) * Hkv + g) * D, (size_t)D * 4);
                if (y.rot) kvq_fwht(K + (size_t)(hl[s] + j) * D, D), kvq_fwht(V + (size_t)(hl[s] + j) * D, D);
            }
            for (int j = 0; j < cn[s]; j++)
                for (int h = g * gs; h < (g + 1) * gs; h++) {
                    const size_t o = ((size_t)(cu[i] + j) * Hq + h) * D;
                    atu_ref_attn(q + o, K, V, hl[s] + j + 1, D, y.rot, scale, ref + o);
                }
        }
        free(K), free(V);
    }
    atu_err e = atu_err_init();
    atu_err_add(&e, out, ref, (int64_t)no, 0);
    const int ok = atu_policy_ok(&e);
    printf("prefill %-6s%s R %3d S %d Hq %2d Hkv %d D %3d seqs %2d T %5lld: max %.2e rms %.2e", t->mode,
           t->bf16q ? "(q)" : "   ", t->R, t->S, Hq, Hkv, D, n, (long long)T, atu_max_ratio(&e), atu_rms_ratio(&e));
    if (!ok) {
        const int64_t w = e.worst < 0 ? 0 : e.worst;
        printf("\n  worst at row %lld head %lld ch %lld: got %g ref %g (nonfinite %lld)", (long long)(w / ((int64_t)Hq * D)),
               (long long)(w / D % Hq), (long long)(w % D), omni_bf16_to_f32(out[w]), ref[w], (long long)e.nonfinite);
    }
    CHECK(ok, "prefill %s R %d S %d %d/%d D %d: outside the accuracy policy", t->mode, t->R, t->S, Hq, Hkv, D);
    check_hist(t, &view, n, dslots, dcu, maxq, dq, dk, dv, hl, cn, slot_of, out, no);
    if (t->cpu_check) {
        uint16_t *qslot = malloc(no * 2);
        float *co = malloc(no * 4);
        int64_t *srow = malloc((size_t)n * 8), acc = 0; /* slot order rows */
        for (int s = 0; s < n; s++) srow[s] = acc, acc += cn[s];
        for (int i = 0; i < n; i++)
            memcpy(qslot + (size_t)srow[slot_of[i]] * Hq * D, q + (size_t)cu[i] * Hq * D, (size_t)cn[slot_of[i]] * Hq * D * 2);
        cpu_prefill(t, n, hl, cn, k, v, qslot, co);
        double *rd = malloc(no * 8);
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < (int64_t)cn[slot_of[i]] * Hq * D; j++)
                rd[(size_t)cu[i] * Hq * D + j] = co[(size_t)srow[slot_of[i]] * Hq * D + j];
        atu_err ec = atu_err_init();
        atu_err_add(&ec, out, rd, (int64_t)no, 0);
        printf(" | vs kv_forward max %.2e rms %.2e", atu_max_ratio(&ec), atu_rms_ratio(&ec));
        CHECK(atu_policy_ok(&ec), "prefill %s: vs kv_forward outside the policy", t->mode);
        free(qslot), free(co), free(srow), free(rd);
    }
    printf("\n");
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dcu), cudaFree(dslots);
    atu_dev_free(&dev);
    atu_free(&c);
    for (int s = 0; s < n; s++) free(k[s]), free(v[s]);
    free(k), free(v), free(hl), free(cn), free(slot_of), free(cu), free(q), free(kc), free(vc), free(out), free(ref);
    free(row);
}

/* Segments: q/k/v interleaved per token ([T][3][H][D]), f64 non-causal reference per segment. */
static void run_segments(int H, int D, int nseg, int maxlen, uint64_t seed) {
    rng_t r = {seed};
    int32_t *cu = malloc((size_t)(nseg + 1) * 4);
    cu[0] = 0;
    int mx = 0;
    for (int i = 0; i < nseg; i++) {
        int l = 1 + (int)(rng_next(&r) % (uint64_t)maxlen);
        if (i == 0) l = maxlen;
        cu[i + 1] = cu[i] + l, mx = l > mx ? l : mx;
    }
    const int64_t T = cu[nseg], rowe = (int64_t)3 * H * D;
    uint16_t *qkv = malloc((size_t)T * rowe * 2), *out = malloc(((size_t)T * H * D + 64) * 2);
    atu_rand_bf16(qkv, (size_t)T * rowe, &r, 1.0f);
    uint16_t *dqkv, *dout;
    int32_t *dcu;
    ATU_CU(cudaMalloc((void **)&dqkv, (size_t)T * rowe * 2));
    ATU_CU(cudaMalloc((void **)&dout, ((size_t)T * H * D + 64) * 2));
    ATU_CU(cudaMalloc((void **)&dcu, (size_t)(nseg + 1) * 4));
    ATU_CU(cudaMemcpy(dqkv, qkv, (size_t)T * rowe * 2, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dcu, cu, (size_t)(nseg + 1) * 4, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemset(dout, 0xff, ((size_t)T * H * D + 64) * 2));
    const float scale = 1.0f / sqrtf((float)D);
    CHECK(kvc_attn_segments(H, D, dcu, nseg, mx, dqkv, dqkv + (size_t)H * D, dqkv + (size_t)2 * H * D, rowe, dout, scale,
                            NULL) == OMNI_OK, "segments: %s", omni_last_error());
    ATU_CU(cudaDeviceSynchronize());
    ATU_CU(cudaGetLastError());
    ATU_CU(cudaMemcpy(out, dout, ((size_t)T * H * D + 64) * 2, cudaMemcpyDeviceToHost));
    int canary = 0;
    for (int i = 0; i < 64; i++) canary += out[(size_t)T * H * D + i] != 0xffff;
    CHECK(canary == 0, "segments: %d canary values overwritten", canary);
    double *ref = malloc((size_t)T * H * D * 8);
    for (int i = 0; i < nseg; i++) {
        const int l = cu[i + 1] - cu[i];
        float *K = malloc((size_t)l * D * 4), *V = malloc((size_t)l * D * 4);
        for (int h = 0; h < H; h++) {
            for (int j = 0; j < l; j++)
                for (int c = 0; c < D; c++) {
                    K[(size_t)j * D + c] = omni_bf16_to_f32(qkv[(cu[i] + j) * rowe + (int64_t)H * D + h * D + c]);
                    V[(size_t)j * D + c] = omni_bf16_to_f32(qkv[(cu[i] + j) * rowe + (int64_t)2 * H * D + h * D + c]);
                }
            for (int j = 0; j < l; j++)
                atu_ref_attn(qkv + (cu[i] + j) * rowe + (int64_t)h * D, K, V, l, D, 0, scale,
                             ref + ((size_t)(cu[i] + j) * H + h) * D);
        }
        free(K), free(V);
    }
    atu_err e = atu_err_init();
    atu_err_add(&e, out, ref, T * H * D, 0);
    printf("segments H %d D %3d: %d segments (longest %d), T %lld: max %.2e rms %.2e\n", H, D, nseg, mx, (long long)T,
           atu_max_ratio(&e), atu_rms_ratio(&e));
    CHECK(atu_policy_ok(&e), "segments H %d D %d: outside the accuracy policy (max %.3g rms %.3g, nonfinite %lld)", H,
          D, atu_max_ratio(&e), atu_rms_ratio(&e), (long long)e.nonfinite);
    cudaFree(dqkv), cudaFree(dout), cudaFree(dcu);
    free(cu), free(qkv), free(out), free(ref);
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    int full = 0, tiny = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--short")) g_short = 1;
        if (!strcmp(argv[i], "--full")) full = 1;
        if (!strcmp(argv[i], "--tiny")) tiny = g_short = 1;
    }
    static const int64_t hist[] = {0, 1, 31, 32, 33, 127, 1025, 300};
    static const int chunks[] = {1, 5, 31, 33, 100, 64, 17};
    static const int64_t h3[] = {33, 200, 0};
    static const int c3[] = {40, 7, 65};
    uint64_t seed = 11;
    if (tiny) { /* the 200-token history under a 65-token chunk: kvc_prefill_hist's scratch too */
        static const int c3t[] = {40, 65, 7};
        pcase t = {"int2", 32, 4, 8, 2, 128, 0, 2, h3, 3, c3t, 3, 0};
        run_prefill(&t, seed++);
        run_segments(2, 72, 3, 40, seed++);
        return check_exit();
    }
    const char *fmts[] = {"int2", "int4", "kivi2", "k4v2", "bf16"};
    for (int f = 0; f < 5; f++) {
        pcase t = {fmts[f], 128, 0, 32, 8, 128, 0, g_short ? 4 : 8, hist, 8, chunks, 7, f == 0 || f == 4};
        run_prefill(&t, seed++);
    }
    {
        pcase t = {"bf16", 32, 0, 8, 2, 64, 1, 4, hist + 4, 4, chunks, 7, 0};
        run_prefill(&t, seed++);
    }
    const int win[] = {0, 32};
    for (int w = 0; w < 2; w++)
        for (int S = 0; S <= 4; S += 4) {
            pcase t = {"int2", win[w], S, 8, 2, 64, 0, 3, h3, 3, c3, 3, 1};
            run_prefill(&t, seed++);
        }
    {
        pcase t1 = {"kivi4", 128, 4, 12, 1, 64, 0, 3, h3, 3, c3, 3, 0}; /* GQA 12 */
        run_prefill(&t1, seed++);
        pcase t2 = {"bf16", 128, 0, 4, 4, 128, 0, 3, h3, 3, c3, 3, 0}; /* MHA */
        run_prefill(&t2, seed++);
    }
    { /* long chunks over packed histories: kvc_prefill_hist's scratch for all / some / none of the entries */
        static const int64_t hq[] = {290, 0, 230, 161};
        static const int cq[] = {40, 100, 17, 64};
        pcase t1 = {"int2", 128, 0, 32, 8, 128, 0, 4, hq, 4, cq, 4, 1};
        run_prefill(&t1, seed++);
        pcase t2 = {"k4v2", 32, 4, 8, 2, 64, 0, 4, hq, 4, cq, 4, 1};
        run_prefill(&t2, seed++);
        pcase t3 = {"kivi2", 0, 0, 12, 1, 64, 0, 4, hq, 4, cq, 4, 0};
        run_prefill(&t3, seed++);
    }
    run_segments(16, 64, 5, 200, seed++);
    run_segments(16, 72, 4, 300, seed++);
    run_segments(4, 128, 3, 129, seed++);
    if (full) {
        static const int64_t hl[] = {4096, 0, 2000};
        static const int cl[] = {512, 1024, 300};
        pcase t = {"int2", 128, 0, 32, 8, 128, 0, 3, hl, 3, cl, 3, 0};
        run_prefill(&t, seed++);
        t.mode = "bf16";
        run_prefill(&t, seed++);
        run_segments(16, 72, 2, 1024, seed++);
    }
    return check_exit();
}
