/* test_bench_results.c - the parts of omni bench that need no engine: list options, percentiles, the roofline
 * arithmetic, the copy bandwidth, the table / CSV / chart made from a set of results (CSV read back by an
 * independent parser, chart pixels checked at every plotted value), and random CPU checkpoints of a config
 * (sizes, loading, a forward pass, refusal of what does not fit). */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/bench.h"
#include "app/random_model.h"
#include "llm/engine.h"
#include "bench_check.h"
#include "check.h"

static void test_lists(void) {
    int v[BENCH_MAX_LIST], n;
    CHECK(!bench_parse_counts("1,8,48", "--batch", 1, 4096, v, &n) && n == 3 && v[0] == 1 && v[1] == 8 && v[2] == 48,
          "1,8,48");
    CHECK(!bench_parse_counts("4K,32k,128K,1M", "--ctx", 1, 1 << 24, v, &n) && n == 4 && v[0] == 4096 &&
              v[1] == 32768 && v[2] == 131072 && v[3] == 1048576, "K/M suffixes");
    const char *bad[] = {"", "0", "1,,2", "4X", "1,1", "2M", "-3", "1,", ",1", "99999999999999999999",
                         "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(bench_parse_counts(bad[i], "--batch", 1, 1 << 20, v, &n) == OMNI_ERR_USAGE, "'%s' accepted", bad[i]);
        CHECK(strstr(omni_last_error(), "--batch") != NULL, "'%s': message lacks the option: %s", bad[i],
              omni_last_error());
    }
    char f[BENCH_MAX_LIST][BENCH_NAME];
    CHECK(!bench_parse_formats("bf16,int2,kivi4", "--kv", f, &n) && n == 3 && !strcmp(f[1], "int2"), "formats");
    CHECK(bench_parse_formats("bf16,int3", "--kv", f, &n) == OMNI_ERR_USAGE, "int3 accepted");
    CHECK(bench_parse_formats("int2,int2", "--kv", f, &n) == OMNI_ERR_USAGE, "repeat accepted");
    CHECK(bench_parse_formats("", "--kv", f, &n) == OMNI_ERR_USAGE, "empty accepted");
    CHECK(!bench_parse_formats("int2,int2:w32,int2:w0", "--fits-kv", f, &n) && n == 3 && !strcmp(f[1], "int2:w32"),
          "formats with windows");
    const char *bad_fmt[] = {"int2:w", "int2:w33", "int2:x32", "int2:w-32", "int2:w32x", "int2:w512", "int9:w32"};
    for (size_t i = 0; i < sizeof bad_fmt / sizeof bad_fmt[0]; i++) {
        CHECK(bench_parse_formats(bad_fmt[i], "--fits-kv", f, &n) == OMNI_ERR_USAGE, "%s accepted", bad_fmt[i]);
        CHECK(strstr(omni_last_error(), "--fits-kv") != NULL, "message names the option: %s", omni_last_error());
    }
    kv_format kf;
    CHECK(!bench_format("int2:w32", 128, 4, &kf) && kf.window == 32 && kf.n_sink == 4, "the name's window wins");
    CHECK(!bench_format("int2", 64, -1, &kf) && kf.window == 64 && kf.n_sink == 0, "--kv-window applies");
    CHECK(!bench_format("int2", -1, -1, &kf) && kf.window == 128, "default window");
}

static void test_numbers(void) {
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = 100 - i; /* 100 .. 1, unsorted on purpose */
    CHECK(bench_percentile(v, 100, 50) == 50 && bench_percentile(v, 100, 99) == 99 &&
              bench_percentile(v, 100, 100) == 100,
          "percentiles %g %g", bench_percentile(v, 100, 50), bench_percentile(v, 100, 99));
    CHECK(v[0] == 100, "input modified");
    double one = 7;
    CHECK(bench_percentile(&one, 1, 99) == 7, "one value");
    bench_point p = {0};
    p.batch = 4, p.weights_mib = 1000, p.decode_tok_s = 50;
    bench_roofline(&p, 24, 1048576.0 * 1024 / 1e9); /* 1 GiB/s: a step of 1024 MiB takes 1 s */
    CHECK(fabs(p.step_mib - 1024) < 1e-9 && fabs(p.roofline_tok_s - 4) < 1e-9 && fabs(p.roofline_pct - 1250) < 1e-6,
          "roofline %g MiB %g tok/s %g%%", p.step_mib, p.roofline_tok_s, p.roofline_pct);
    double bw = 0;
    CHECK(bench_copy_bandwidth(8 << 20, 2, &bw) == OMNI_OK && bw > 0.1 && bw < 1e4, "bandwidth %g GB/s", bw);
}

/* A plausible run: 2 formats x 3 contexts x 3 batches, int2 faster and smaller, plus fits rows. */
static void synthetic(bench_results *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "synthetic");
    snprintf(r->device, sizeof r->device, "cpu");
    r->threads = 2, r->bw_gb_s = 10.5, r->bw_mib = 64;
    const char *kv[2] = {"bf16", "int2"};
    int ctx[3] = {256, 1024, 4096}, batch[3] = {1, 4, 16};
    for (int f = 0; f < 2; f++)
        for (int c = 0; c < 3; c++) {
            for (int b = 0; b < 3; b++) {
                bench_point p = {0};
                snprintf(p.kv, sizeof p.kv, "%s", kv[f]);
                p.batch = batch[b], p.ctx = ctx[c], p.steps = 8;
                p.kv_mib = (f ? 0.2 : 1.0) * ctx[c] * batch[b] / 64.0;
                p.weights_mib = 30;
                p.decode_tok_s = batch[b] * 1000.0 / (30 + p.kv_mib) * (f ? 0.8 : 0.7);
                p.step_ms_p50 = 1000.0 * batch[b] / p.decode_tok_s, p.step_ms_p99 = 1.2 * p.step_ms_p50;
                p.prefill_tok_s = 5000 - 100 * c, p.ttft_ms = ctx[c] * batch[b] / 5.0;
                bench_roofline(&p, p.kv_mib, r->bw_gb_s);
                bench_add_point(r, &p);
            }
            bench_fit x = {0};
            snprintf(x.kv, sizeof x.kv, "%s", kv[f]);
            x.ctx = ctx[c], x.kv_mem_gib = 0.5, x.seq_kv_mib = (f ? 0.2 : 1.0) * ctx[c] / 64.0;
            x.fits = x.fits_budget = (int)(512 / x.seq_kv_mib);
            bench_add_fit(r, &x);
        }
}

static void test_outputs(const char *dir) {
    bench_results r, back;
    synthetic(&r);
    char csv[256], png[256], err[512];
    snprintf(csv, sizeof csv, "%s/b.csv", dir);
    snprintf(png, sizeof png, "%s/b.png", dir);
    CHECK(bench_write_csv(csv, &r) == OMNI_OK, "csv: %s", omni_last_error());
    CHECK(bench_csv_read(csv, &back, err, sizeof err) == 0, "csv read: %s", err);
    CHECK(back.n_points == r.n_points && back.n_fits == r.n_fits, "rows %d/%d %d/%d", back.n_points, r.n_points,
          back.n_fits, r.n_fits);
    for (int i = 0; i < back.n_points && i < r.n_points; i++) {
        const bench_point *a = &r.points[i], *b = &back.points[i];
        CHECK(!strcmp(a->kv, b->kv) && a->batch == b->batch && a->ctx == b->ctx && a->steps == b->steps,
              "row %d keys", i);
        CHECK(fabs(a->decode_tok_s - b->decode_tok_s) <= 1e-4 * a->decode_tok_s &&
                  fabs(a->kv_mib - b->kv_mib) <= 1e-4 * a->kv_mib + 1e-4 &&
                  fabs(a->roofline_pct - b->roofline_pct) <= 1e-3 &&
                  fabs(a->step_ms_p99 - b->step_ms_p99) <= 1e-4 * a->step_ms_p99, "row %d values", i);
    }
    for (int i = 0; i < back.n_fits && i < r.n_fits; i++)
        CHECK(back.fits[i].fits == r.fits[i].fits && back.fits[i].ctx == r.fits[i].ctx, "fit row %d", i);
    CHECK(fabs(back.bw_gb_s - 10.5) < 1e-9 && !strcmp(back.model, "synthetic"), "run fields");

    CHECK(bench_write_png(png, &r, 1200, 700, NULL) == OMNI_OK, "png: %s", omni_last_error());
    int v = bench_png_check(png, &back, 1200, 700, err, sizeof err);
    CHECK(v >= 2 * 3 * 3, "png check: %d markers verified: %s", v, v < 0 ? err : "");

    /* a PNG drawn from other numbers fails the check (the check can fail) */
    bench_results other;
    synthetic(&other);
    for (int i = 0; i < other.n_points; i++) other.points[i].decode_tok_s *= 1.6;
    snprintf(png, sizeof png, "%s/other.png", dir);
    CHECK(bench_write_png(png, &other, 1200, 700, NULL) == OMNI_OK, "png 2");
    CHECK(bench_png_check(png, &back, 1200, 700, err, sizeof err) < 0, "a chart of other numbers passed");
    CHECK(bench_png_check(png, &back, 1200, 701, err, sizeof err) < 0, "wrong size passed");

    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    bench_print_table(m, &r);
    fclose(m);
    int rows = 0;
    for (char *p = buf; (p = strstr(p, "\n| int2 ")); p++) rows++;
    CHECK(rows == 9 + 3, "table has %d int2 rows, want 12:\n%s", rows, buf);
    CHECK(strstr(buf, "10.5 GB/s") != NULL, "table lacks the bandwidth");
    free(buf);
    /* a fits row the engine did not count (-1): "-" in the table, an empty CSV field read back as -1 */
    bench_fit x = r.fits[0];
    x.fits = -1;
    snprintf(x.kv, sizeof x.kv, "int4:w32");
    bench_add_fit(&r, &x);
    m = open_memstream(&buf, &len);
    bench_print_table(m, &r);
    fclose(m);
    CHECK(strstr(buf, "| int4:w32 |") && strstr(buf, "|             - |"), "uncounted fits row:\n%s", buf);
    free(buf);
    snprintf(csv, sizeof csv, "%s/b2.csv", dir);
    bench_results_free(&back);
    CHECK(bench_write_csv(csv, &r) == OMNI_OK && bench_csv_read(csv, &back, err, sizeof err) == 0, "csv 2");
    CHECK(back.n_fits == r.n_fits && back.fits[back.n_fits - 1].fits == -1 &&
              back.fits[back.n_fits - 1].fits_budget == x.fits_budget && bench_fit_count(&back.fits[0]) == x.fits_budget,
          "uncounted fits row in the CSV");
    x.fits = 7;
    CHECK(bench_fit_count(&x) == 7, "bench_fit_count of a counted row");
    snprintf(csv, sizeof csv, "%s/no/such/dir.csv", dir);
    CHECK(bench_write_csv(csv, &r) == OMNI_ERR_INPUT, "unwritable csv accepted");
    bench_results_free(&r);
    bench_results_free(&back);
    bench_results_free(&other);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void test_report(const char *dir) {
    bench_results r;
    synthetic(&r);
    char base[256], rep[256];
    snprintf(base, sizeof base, "%s/hf.csv", dir);
    snprintf(rep, sizeof rep, "%s/REPORT.md", dir);
    write_text(base, "kind,batch,ctx,steps,decode_tok_s,step_ms,prefill_tok_s,ttft_ms,peak_mib,note\n"
                     "baseline,16,256,8,40.5,395.1,900,4500,2048,\n"
                     "baseline,1,4096,8,,,,,,error: CUDA out of memory, tried to allocate 2 GiB\n");
    bench_baseline *b = NULL;
    int nb = 0;
    CHECK(bench_read_baseline(base, &b, &nb) == OMNI_OK && nb == 2, "baseline: %s", omni_last_error());
    if (nb == 2) {
        CHECK(b[0].batch == 16 && b[0].ctx == 256 && b[0].decode_tok_s == 40.5 && isnan(b[1].step_ms),
              "baseline values");
        CHECK(strstr(b[1].note, "out of memory, tried") != NULL, "note with a comma: '%s'", b[1].note);
    }
    bench_report_info in = {"omni bench --kv bf16,int2", "0.1.0", "test device", "b.png", "b.csv", b, nb,
                            "transformers generate", NULL, "Method sentence."};
    CHECK(bench_write_report(rep, &r, &in) == OMNI_OK, "report: %s", omni_last_error());
    char *t = omni_read_file(rep, NULL);
    CHECK(t != NULL, "no report");
    if (t) {
        /* throughput point: batch 16 / 256; latency point: batch 1 / 4096 */
        const bench_point *t0 = &r.points[2], *t1 = &r.points[9 + 2], *l0 = &r.points[6], *l1 = &r.points[9 + 6];
        CHECK(t0->batch == 16 && t0->ctx == 256 && t1->batch == 16 && l0->batch == 1 && l0->ctx == 4096, "picks");
        char want[128];
        snprintf(want, sizeof want, "**%.2fx**", t1->decode_tok_s / t0->decode_tok_s);
        CHECK(strstr(t, want) != NULL, "throughput ratio %s missing", want);
        snprintf(want, sizeof want, "**%.2fx** faster", l0->step_ms_p50 / l1->step_ms_p50);
        CHECK(strstr(t, want) != NULL, "latency ratio %s missing", want);
        snprintf(want, sizeof want, "| omni int2 | %.1f | %.0f%% |", t1->decode_tok_s, t1->roofline_pct);
        CHECK(strstr(t, want) != NULL, "int2 throughput row '%s' missing", want);
        snprintf(want, sizeof want, "| transformers generate | 40.5 | %.0f%% |", 100 * 40.5 / t0->roofline_tok_s);
        CHECK(strstr(t, want) != NULL, "baseline row '%s' missing:\n%s", want, t);
        CHECK(strstr(t, "error: CUDA out of memory") != NULL, "baseline failure note missing");
        CHECK(strstr(t, "**5.00x** smaller") != NULL && strstr(t, "4.1x") && strstr(t, "5.3x") && strstr(t, "3.0x"),
              "memory ratio / paper numbers missing");
        CHECK(strstr(t, "![omni bench chart](b.png)") != NULL && strstr(t, "10.5 GB/s") != NULL, "chart/bandwidth");
        CHECK(strstr(t, "\n\nMethod sentence.\n\n") != NULL, "method sentence missing");
        snprintf(want, sizeof want, "| omni int2 / baseline above | **%.2fx** |", t1->decode_tok_s / 40.5);
        CHECK(strstr(t, want) != NULL, "ratio to the baseline '%s' missing", want);
        CHECK(strstr(t, "* the budget arithmetic alone") == NULL, "arithmetic-only note without such rows");
        free(t);
    }
    /* a fits-only format the device does not run (fits -1): its count is the budget arithmetic's, marked '*';
       no speed rows for it */
    bench_fit x = {0};
    snprintf(x.kv, sizeof x.kv, "int2:w0");
    x.ctx = 1024, x.kv_mem_gib = 0.5, x.seq_kv_mib = 2.5, x.fits = -1, x.fits_budget = 204;
    bench_add_fit(&r, &x);
    CHECK(bench_write_report(rep, &r, &in) == OMNI_OK, "report with a fits-only row");
    t = omni_read_file(rep, NULL);
    CHECK(t && strstr(t, "| omni int2:w0 | | | 2.50 | 204* | | |") && strstr(t, "* the budget arithmetic alone") &&
              !strstr(t, "| omni int2:w0 | not measured"), "fits-only row:\n%s", t ? t : "");
    free(t);
    r.n_fits--;
    in.baseline_error = "python3 has no torch";
    CHECK(bench_write_report(rep, &r, &in) == OMNI_OK, "report 2");
    t = omni_read_file(rep, NULL);
    CHECK(t && strstr(t, "not run: python3 has no torch") != NULL, "baseline error not shown");
    free(t);
    free(b);
    write_text(base, "kind,batch\nbaseline,1\n");
    CHECK(bench_read_baseline(base, &b, &nb) == OMNI_ERR_INPUT && b == NULL, "bad header accepted");
    write_text(base, "kind,batch,ctx,steps,decode_tok_s,step_ms,prefill_tok_s,ttft_ms,peak_mib,note\npoint,1,2\n");
    CHECK(bench_read_baseline(base, &b, &nb) == OMNI_ERR_INPUT, "bad row accepted");
    CHECK(bench_read_baseline("/nonexistent.csv", &b, &nb) == OMNI_ERR_INPUT, "missing file");
    bench_results_free(&r);
}

static void test_random_model(void) {
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/text/qvl-h64-hd128-gqa2-tied/config.json", OMNI_FIXTURES);
    int64_t bytes = 0;
    CHECK(omni_random_model_bytes(cfg, &bytes) == OMNI_OK && bytes > 0, "bytes: %s", omni_last_error());
    llm_model *m = NULL;
    CHECK(omni_random_model(cfg, 7, 0, &m) == OMNI_OK, "random model: %s", omni_last_error());
    if (m) {
        CHECK((int64_t)llm_model_weight_bytes(m) == bytes, "weights %zu, config says %lld", llm_model_weight_bytes(m),
              (long long)bytes);
        const llm_config *c = llm_model_config(m);
        kv_params kp = llm_model_kv_params(m);
        kv_cache *kv = NULL;
        int seq = -1;
        kp.fmt.k_type = kp.fmt.v_type = KV_F32;
        kv_init(&kp, &kv);
        kv_seq_add(kv, &seq);
        int32_t ids[5] = {1, 2, 3, 4, 5};
        llm_input in = {5, ids, NULL, 0, NULL};
        float *logits = malloc(sizeof(float) * c->vocab);
        CHECK(llm_forward(m, kv, seq, &in, logits) == OMNI_OK, "forward: %s", omni_last_error());
        int finite = 1, varied = 0;
        for (int i = 0; i < c->vocab; i++) finite &= isfinite(logits[i]), varied |= logits[i] != logits[0];
        CHECK(finite && varied, "logits finite %d varied %d", finite, varied);
        free(logits);
        kv_free(kv);
        llm_model_free(m);
    }
    CHECK(omni_random_model(cfg, 7, bytes - 1, &m) == OMNI_ERR_NOMEM && m == NULL, "over the limit accepted");
    CHECK(strstr(omni_last_error(), "GiB") != NULL, "message: %s", omni_last_error());
    snprintf(cfg, sizeof cfg, "%s/assets/configs/Qwen3-VL-8B-Instruct/config.json", OMNI_SOURCE_DIR);
    CHECK(omni_random_model_bytes(cfg, &bytes) == OMNI_OK && bytes > 16.0e9 && bytes < 17.0e9, "8B: %lld bytes",
          (long long)bytes); /* 8.2e9 parameters of bf16 (vision tower not included) */
    CHECK(omni_random_model_bytes("/nonexistent/config.json", &bytes) == OMNI_ERR_INPUT, "missing config");
}

/* A weightless model for the device's own random weights: its size equals the checkpoint's, the CPU refuses it. */
static void test_random_device_model(void) {
    const char *cfgs[3] = {"text/qvl-h64-hd128-gqa2-tied", "text/qvl-h64-hd64-gqa4-untied-sharded", NULL};
    char cfg[512];
    for (int i = 0; i < 4; i++) {
        if (i < 2) snprintf(cfg, sizeof cfg, "%s/%s/config.json", OMNI_FIXTURES, cfgs[i]);
        else snprintf(cfg, sizeof cfg, "%s/assets/configs/%s", OMNI_SOURCE_DIR,
                      i == 2 ? "Qwen3-VL-8B-Instruct" : "Qwen3-Omni-30B-A3B-Instruct/config.json");
        int64_t bytes = 0;
        llm_model *m = NULL;
        uint64_t seed = 0;
        CHECK(omni_random_model_bytes(cfg, &bytes) == OMNI_OK, "%s: %s", cfg, omni_last_error());
        CHECK(omni_random_model_device(cfg, 11, &m) == OMNI_OK, "%s: %s", cfg, omni_last_error());
        if (!m) continue;
        CHECK((int64_t)llm_model_weight_bytes(m) == bytes, "%s: %zu bytes, the checkpoint %lld", cfg,
              llm_model_weight_bytes(m), (long long)bytes);
        CHECK(llm_model_is_random(m, &seed) && seed == 11 && llm_model_ckpt(m) == NULL, "random flag / seed");
        CHECK(llm_model_config(m)->n_layers > 0 && llm_model_kv_params(m).n_kv_heads > 0, "config");
        llm_engine_params ep = llm_engine_default_params();
        llm_engine *e = NULL;
        CHECK(llm_engine_init(m, &ep, &e) == OMNI_ERR_UNSUPPORTED && e == NULL, "the CPU runner took no weights");
        CHECK(strstr(omni_last_error(), "--device cuda") != NULL, "message: %s", omni_last_error());
        llm_model_free(m);
    }
    llm_model *m = NULL;
    CHECK(omni_random_model_device("/nonexistent/config.json", 1, &m) == OMNI_ERR_INPUT && !m, "missing config");
    llm_model *loaded = NULL;
    snprintf(cfg, sizeof cfg, "%s/%s", OMNI_FIXTURES, cfgs[0]);
    CHECK(llm_model_load(cfg, &loaded) == OMNI_OK && !llm_model_is_random(loaded, NULL), "a loaded model is real");
    llm_model_free(loaded);
}

int main(void) {
    char dir[] = "/tmp/omni_bench_res_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_lists();
    test_numbers();
    test_outputs(dir);
    test_report(dir);
    test_random_model();
    test_random_device_model();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("OMNI_TEST_KEEP")) printf("files kept in %s\n", dir);
    else if (system(cmd)) {}
    return check_exit();
}
