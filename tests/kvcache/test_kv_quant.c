/* test_kv_quant.c - the OScaR/KIVI block quantizer and the Walsh-Hadamard transform:
 * fp16 rounding (vs kernels' converter, directed variants), round-trip error <= step/2, constant groups exact,
 * step 0 -> 1, sink tokens excluded from key groups, folded scores/values equal dequantize-then-dot, FWHT
 * self-inverse / norm-preserving / equal to the dense Sylvester matrix (d = 32, 64, 128, 256), and the packed
 * bytes of a fixed input equal the committed golden file tests/fixtures/kvcache/quant_golden.bin.
 * Regenerate the golden file (only when the format changes on purpose): test_kv_quant --write-golden PATH; then
 * confirm it with the independent numpy implementation of the documented format:
 * python3 tests/fixtures/kvcache/check_golden.py (it matched byte for byte when the file was committed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/tensor.h"
#include "kv_test_util.h"
#include "kvcache/kv_quant.h"

#define G KVQ_G

static void test_fp16(void) {
    rng_t r = {7};
    int bad = 0, bad_dir = 0;
    for (int i = 0; i < 200000; i++) {
        float x = rng_uniform(&r) * ldexpf(1.0f, (int)(rng_next(&r) % 40) - 26);
        if (kvq_f2h(x) != omni_f32_to_f16(x)) bad++;
        float lo = kvq_h2f(kvq_f2h_down(x)), hi = kvq_h2f(kvq_f2h_up(x));
        if (!(lo <= x && hi >= x && (lo == hi) == (kvq_h2f(kvq_f2h(x)) == x))) bad_dir++;
        if (kvq_h2f(kvq_f2h(x)) != omni_f16_to_f32(kvq_f2h(x))) bad++;
    }
    CHECK(bad == 0, "%d fp16 conversions differ from kernels/tensor", bad);
    CHECK(bad_dir == 0, "%d directed fp16 roundings wrong", bad_dir);
    CHECK(kvq_f2h(1e6f) == 0x7bff && kvq_f2h(-1e6f) == 0xfbff, "fp16 saturation");
    CHECK(kvq_f2h(0.0f) == 0 && kvq_f2h_down(0.0f) == 0 && kvq_f2h_up(1e-9f) == 1, "fp16 zero / tiny");
}

/* Fill a [32][D] block: uniform values times amp plus offset. */
static void fill(rng_t *r, float *x, int D, float amp, float off) {
    for (int i = 0; i < G * D; i++) x[i] = rng_uniform(r) * amp + off;
}

static void test_roundtrip(void) {
    const int D = 64;
    static float x[G * 64], y[G * 64], tmp[G * 64];
    static uint8_t buf[8192];
    const float amps[] = {1.0f, 1e-3f, 0.01f, 30.0f}, offs[] = {0.0f, 0.5f, 100.0f, -7.0f};
    rng_t r = {11};
    int worst_k = 0, worst_v = 0;
    for (int bits = 2; bits <= 4; bits += 2)
        for (int a = 0; a < 4; a++)
            for (int o = 0; o < 4; o++) {
                fill(&r, x, D, amps[a], offs[o]);
                /* keys, no norm: per channel */
                kvq_quant_keys(x, 0, D, bits, 0, buf, tmp);
                kvq_dequant_keys(buf, D, bits, 0, y);
                const uint16_t *sc = (const uint16_t *)(buf + D * G * bits / 8);
                for (int j = 0; j < G; j++)
                    for (int c = 0; c < D; c++) {
                        float s = kvq_h2f(sc[c]), e = fabsf(x[j * D + c] - y[j * D + c]);
                        if (e > s * 0.5f * (1 + 1e-6f) + 1e-7f * fabsf(x[j * D + c])) worst_k++;
                    }
                /* values: per token, 32-channel groups */
                kvq_quant_values(x, D, bits, buf);
                kvq_dequant_values(buf, D, bits, y);
                const uint16_t *vs = (const uint16_t *)(buf + G * D * bits / 8);
                for (int j = 0; j < G; j++)
                    for (int c = 0; c < D; c++) {
                        float s = kvq_h2f(vs[j * (D / G) + c / G]), e = fabsf(x[j * D + c] - y[j * D + c]);
                        if (e > s * 0.5f * (1 + 1e-6f) + 1e-7f * fabsf(x[j * D + c])) worst_v++;
                    }
            }
    CHECK(worst_k == 0, "%d key elements with round-trip error > step/2", worst_k);
    CHECK(worst_v == 0, "%d value elements with round-trip error > step/2", worst_v);

    /* with norms: error <= norm * step / 2 */
    int bad = 0;
    for (int bits = 2; bits <= 4; bits += 2) {
        fill(&r, x, D, 3.0f, 0.2f);
        for (int c = 0; c < D; c++) x[5 * D + c] *= 0.02f; /* one small-norm (sink-like) token */
        kvq_quant_keys(x, 0, D, bits, 1, buf, tmp);
        kvq_dequant_keys(buf, D, bits, 1, y);
        const uint16_t *sc = (const uint16_t *)(buf + D * G * bits / 8), *nr = sc + 2 * D;
        for (int j = 0; j < G; j++) {
            double n2 = 0;
            for (int c = 0; c < D; c++) n2 += (double)x[j * D + c] * x[j * D + c];
            if (fabs(kvq_h2f(nr[j]) - sqrt(n2)) > sqrt(n2) * 4.9e-4) bad++;
            for (int c = 0; c < D; c++)
                if (fabsf(x[j * D + c] - y[j * D + c]) > kvq_h2f(nr[j]) * kvq_h2f(sc[c]) * 0.5f * (1 + 1e-5f) + 1e-6f)
                    bad++;
        }
    }
    CHECK(bad == 0, "%d normalized-key errors > norm*step/2 (or norm not fp16 of the l2 norm)", bad);
}

static void test_constant_and_zero_step(void) {
    const int D = 64;
    static float x[G * 64], y[G * 64], tmp[G * 64];
    static uint8_t buf[8192];
    const float consts[] = {0.0f, 0.375f, -2.5f, 1000.0f, -0.0078125f};
    int bad = 0, bad_step = 0, bad_codes = 0;
    for (int bits = 2; bits <= 4; bits += 2)
        for (int i = 0; i < 5; i++) {
            for (int j = 0; j < G; j++)
                for (int c = 0; c < D; c++) x[j * D + c] = consts[(i + c) % 5]; /* each channel constant */
            kvq_quant_keys(x, 0, D, bits, 0, buf, tmp);
            kvq_dequant_keys(buf, D, bits, 0, y);
            bad += memcmp(x, y, sizeof x) != 0;
            const uint16_t *sc = (const uint16_t *)(buf + D * G * bits / 8);
            for (int c = 0; c < D; c++) bad_step += sc[c] != 0x3c00; /* step 0 -> 1.0 */
            for (int b = 0; b < D * G * bits / 8; b++) bad_codes += buf[b] != 0;
            for (int j = 0; j < G; j++)
                for (int c = 0; c < D; c++) x[j * D + c] = consts[(i + j + c / G) % 5]; /* each value group constant */
            kvq_quant_values(x, D, bits, buf);
            kvq_dequant_values(buf, D, bits, y);
            bad += memcmp(x, y, sizeof x) != 0;
            const uint16_t *vs = (const uint16_t *)(buf + G * D * bits / 8);
            for (int k = 0; k < G * D / G; k++) bad_step += vs[k] != 0x3c00;
        }
    CHECK(bad == 0, "%d constant blocks not reconstructed exactly", bad);
    CHECK(bad_step == 0, "%d zero steps not stored as 1.0", bad_step);
    CHECK(bad_codes == 0, "%d nonzero code bytes for constant groups", bad_codes);
}

static void test_sinks_excluded(void) {
    const int D = 64, t0 = 4;
    static float x[G * 64], x2[G * 64], tmp[G * 64];
    static uint8_t a[8192], b[8192];
    rng_t r = {5};
    fill(&r, x, D, 1.0f, 0.0f);
    memcpy(x2, x, sizeof x);
    for (int j = 0; j < t0; j++)
        for (int c = 0; c < D; c++) x2[j * D + c] = 500.0f * (c % 2 ? 1 : -1); /* huge sink rows */
    size_t kb = kvq_key_bytes(D, 2, 1);
    kvq_quant_keys(x, t0, D, 2, 1, a, tmp);
    kvq_quant_keys(x2, t0, D, 2, 1, b, tmp);
    CHECK(memcmp(a, b, kb) == 0, "sink tokens changed the key groups of block 0");
    const uint16_t *nr = (const uint16_t *)(a + D * G * 2 / 8) + 2 * D;
    int zero = 1;
    for (int j = 0; j < t0; j++) zero &= nr[j] == 0;
    CHECK(zero, "sink token norms must be stored as 0");
}

static void test_folded_paths(void) {
    const int D = 128;
    static float x[G * 128], y[G * 128], tmp[G * 128], q[128], w[G], acc[128];
    static uint8_t buf[16384];
    rng_t r = {9};
    double worst = 0.0;
    for (int bits = 2; bits <= 4; bits += 2)
        for (int norm = 0; norm <= 1; norm++) {
            fill(&r, x, D, 2.0f, 0.3f);
            for (int d = 0; d < D; d++) q[d] = rng_uniform(&r);
            kvq_quant_keys(x, 0, D, bits, norm, buf, tmp);
            kvq_dequant_keys(buf, D, bits, norm, y);
            float s[G];
            kvq_key_scores(buf, D, bits, norm, q, s);
            for (int j = 0; j < G; j++) {
                double ref = 0, mag = 0;
                for (int d = 0; d < D; d++) ref += (double)q[d] * y[j * D + d], mag += fabs((double)q[d] * y[j * D + d]);
                double e = fabs(s[j] - ref) / (mag + 1e-30);
                if (e > worst) worst = e;
            }
            kvq_quant_values(x, D, bits, buf);
            kvq_dequant_values(buf, D, bits, y);
            for (int j = 0; j < G; j++) w[j] = j % 7 == 3 ? 0.0f : fabsf(rng_uniform(&r));
            memset(acc, 0, sizeof acc);
            kvq_value_accum(buf, D, bits, w, acc);
            for (int d = 0; d < D; d++) {
                double ref = 0, mag = 0;
                for (int j = 0; j < G; j++) ref += (double)w[j] * y[j * D + d], mag += fabs((double)w[j] * y[j * D + d]);
                double e = fabs(acc[d] - ref) / (mag + 1e-30);
                if (e > worst) worst = e;
            }
        }
    printf("folded score/value paths vs dequantize+dot: worst relative error %.2e\n", worst);
    CHECK(worst < 1e-5, "folded paths differ from dequantize+dot by %.2e", worst);
}

static void test_fwht(void) {
    rng_t r = {3};
    for (int d = 32; d <= 256; d *= 2) {
        float x[256], y[256];
        double dense[256], nx = 0, ny = 0, e_inv = 0, e_dense = 0;
        for (int i = 0; i < d; i++) x[i] = rng_normal(&r);
        memcpy(y, x, sizeof(float) * d);
        kvq_fwht(y, d);
        for (int i = 0; i < d; i++) {
            dense[i] = 0;
            for (int j = 0; j < d; j++) dense[i] += (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0) * x[j];
            dense[i] /= sqrt((double)d);
            e_dense = fmax(e_dense, fabs(y[i] - dense[i]));
            nx += (double)x[i] * x[i];
            ny += (double)y[i] * y[i];
        }
        kvq_fwht(y, d);
        for (int i = 0; i < d; i++) e_inv = fmax(e_inv, fabs(y[i] - x[i]));
        CHECK(e_dense < 1e-5, "d=%d: FWHT differs from the dense Hadamard product by %.2e", d, e_dense);
        CHECK(e_inv < 1e-5, "d=%d: H(Hx) differs from x by %.2e", d, e_inv);
        CHECK(fabs(sqrt(ny) - sqrt(nx)) < 1e-6 * sqrt(nx), "d=%d: norm %.9f -> %.9f", d, sqrt(nx), sqrt(ny));
    }
}

/* Fixed input -> packed bytes of several configurations (pins the format). Input uses only exact float math. */
static size_t golden_bytes(uint8_t *out) {
    const int D = 64;
    static float k[G * 64], v[G * 64], tmp[G * 64];
    rng_t r = {20260530};
    for (int i = 0; i < G * D; i++) k[i] = rng_uniform(&r), v[i] = rng_uniform(&r);
    for (int j = 0; j < G; j++) {
        k[j * D + 3] = k[j * D + 3] * 8.0f + 4.0f; /* a channel outlier */
        if (j == 0 || j == 17)
            for (int c = 0; c < D; c++) k[j * D + c] *= 0.03125f; /* small-norm tokens */
    }
    for (int j = 0; j < G; j++) {
        kvq_fwht(k + j * D, D); /* d = 64: exact scaling by 1/8 */
        kvq_fwht(v + j * D, D);
        for (int c = 0; c < D; c++) k[j * D + c] = kvq_bf16_round(k[j * D + c]), v[j * D + c] = kvq_bf16_round(v[j * D + c]);
    }
    size_t n = 0;
    const int cfg[][3] = {{2, 1, 0}, {4, 1, 0}, {2, 0, 0}, {4, 0, 0}, {2, 1, 3}}; /* bits, norm, t0 */
    for (int i = 0; i < 5; i++) {
        kvq_quant_keys(k, cfg[i][2], D, cfg[i][0], cfg[i][1], out + n, tmp);
        n += kvq_key_bytes(D, cfg[i][0], cfg[i][1]);
        kvq_quant_values(v, D, cfg[i][0], out + n);
        n += kvq_value_bytes(D, cfg[i][0]);
    }
    return n;
}

static void test_golden(void) {
    static uint8_t got[65536], want[65536];
    size_t n = golden_bytes(got);
    FILE *f = fopen(OMNI_FIXTURES "/kvcache/quant_golden.bin", "rb");
    CHECK(f != NULL, "missing %s", OMNI_FIXTURES "/kvcache/quant_golden.bin");
    if (!f) return;
    size_t m = fread(want, 1, sizeof want, f);
    fclose(f);
    CHECK(m == n, "golden file has %zu bytes, expected %zu", m, n);
    size_t first = n;
    for (size_t i = 0; i < n && i < m; i++)
        if (got[i] != want[i]) {
            first = i;
            break;
        }
    CHECK(first == n, "packed bytes differ from the golden file at byte %zu", first);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-golden")) {
        static uint8_t buf[65536];
        size_t n = golden_bytes(buf);
        FILE *f = fopen(argv[2], "wb");
        if (!f || fwrite(buf, 1, n, f) != n) return 1;
        fclose(f);
        printf("wrote %zu bytes to %s\n", n, argv[2]);
        return 0;
    }
    test_fp16();
    test_roundtrip();
    test_constant_and_zero_step();
    test_sinks_excluded();
    test_folded_paths();
    test_fwht();
    test_golden();
    return check_exit();
}
