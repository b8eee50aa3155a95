/* test_cli_bench.c - `omni bench` on a fixture model (CPU, seconds): the CSV has the documented columns and one
 * row per point and per fits-count; every fits-count equals the page allocator's budget arithmetic, computed here
 * with kv_budget_of; the PNG has the asked size, is not blank and shows the CSV's numbers (bench_png_check); the
 * table and the report are written; --random works on a small config; bad arguments give one line and exit 1. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_check.h"
#include "check.h"
#include "cli_util.h"
#include "kvcache/kvcache.h"
#include "llm/model.h"
#include "llm/runner.h"

static char g_model[1024];
static const double KV_MEM_GIB = 0.01;

static void expect_usage(const char *args, int code, const char *needle) {
    cli_result r = cli_run("bench %s", args);
    CHECK(r.code == code, "'%s': exit %d, want %d (stderr: %s)", args, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1, "'%s': %d stderr lines, want 1:\n%s", args, cli_lines(r.err), r.err);
    CHECK(strstr(r.err, needle) != NULL, "'%s': stderr lacks '%s': %s", args, needle, r.err);
    CHECK(r.out[0] == 0, "'%s': stdout: %s", args, r.out);
    cli_free(&r);
}

static void test_bad_args(const char *dir) {
    char a[4096];
    expect_usage("", 1, "-m MODEL or --random");
    snprintf(a, sizeof a, "-m %s --random %s/config.json", g_model, g_model);
    expect_usage(a, 1, "either -m MODEL or --random");
    struct { const char *opt, *needle; } bad[] = { /* list syntax in detail: test_bench_results */
        {"--kv bf16,int3", "--kv"},      {"--batch 0", "--batch"},         {"--batch 1,1", "twice"},
        {"--ctx 4Q", "--ctx"},           {"--kv-mem -1", "--kv-mem"},      {"--png-size 10x10", "--png-size"},
        {"-n 0", "-n"},                  {"--device tpu", "tpu"},          {"--frobnicate 3", "unknown option"},
        {"extra", "unexpected argument"}, {"--batch", "needs a value"},   {"--kv int2:w33", "window 33"},
        {"--fits-kv bf16", "already in --kv"}, {"--fits-kv int4:q", "--fits-kv"}, {"--fill-above 1,2", "one count"},
        {"--fill-above x", "--fill-above"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(a, sizeof a, "-m %s %s", g_model, bad[i].opt);
        expect_usage(a, 1, bad[i].needle);
    }
    expect_usage("--random /nonexistent/config.json --batch 1 --ctx 8", 2, "/nonexistent/config.json");
    snprintf(a, sizeof a, "-m %s --csv %s/no/such/dir/b.csv", g_model, dir);
    expect_usage(a, 2, "b.csv: No such file or directory");
    expect_usage("-m /nonexistent/model", 3, "/nonexistent/model");
    /* session 7: a CSV that cannot be written says why (it said "write failed: /dev/full") */
    cli_result r = cli_run("bench -m %s --kv f32 --batch 1 --ctx 16 -n 1 --csv /dev/full", g_model);
    CHECK(r.code == 4 && strstr(r.err, "error: cannot write /dev/full: No space left on device"),
          "--csv /dev/full: exit %d: %s", r.code, r.err);
    cli_free(&r);
    /* a run that fails leaves the last CSV as it was (the early path check truncated it) */
    char keep[2048];
    snprintf(keep, sizeof keep, "%.2000s/keep.csv", dir);
    write_all(keep, "last,run\n", 9);
    snprintf(a, sizeof a, "--random /nonexistent/config.json --batch 1 --ctx 8 --csv %s", keep);
    expect_usage(a, 2, "/nonexistent/config.json");
    size_t n = 0;
    char *back = omni_read_file(keep, &n);
    CHECK(back && n == 9 && !memcmp(back, "last,run\n", 9), "a failed bench kept the CSV: %zu bytes", n);
    free(back);
}

/* Every fits-count against kv_budget_of for the same format, computed here (window: --kv-window or -1); a budget
 * for more sequences than one CPU step takes (LLM_RUNNER_MAX_SEQS): the engine admits all it is given and says so. */
static void check_fits_mem(const bench_results *r, int window, double kv_mem_gib) {
    llm_model *m = NULL;
    CHECK(llm_model_load(g_model, &m) == OMNI_OK, "load: %s", omni_last_error());
    if (!m) return;
    for (int i = 0; i < r->n_fits; i++) {
        const bench_fit *x = &r->fits[i];
        kv_params kp = llm_model_kv_params(m);
        kv_budget kb;
        CHECK(bench_format(x->kv, window, -1, &kp.fmt) == OMNI_OK, "mode %s", x->kv);
        kp.max_tokens = kp.max_seq_len = x->ctx;
        int64_t chunk = 0, flush = 0;
        CHECK(kv_budget_of(&kp, x->ctx, &kb) == OMNI_OK && kv_step_extra_bytes_of(&kp, &chunk, &flush) == OMNI_OK,
              "budget: %s", omni_last_error());
        /* kept unpromised during the count: one flushing decode step's excess (one-token prompts hold no prefill
         * step reserve); each sequence is promised its joint peak */
        CHECK(fabs(x->reserve_mib - flush / 1048576.0) < 1e-4, "%s ctx %d: reserve %g MiB, a flush %g MiB", x->kv,
              x->ctx, x->reserve_mib, flush / 1048576.0);
        int want = (int)(((int64_t)(kv_mem_gib * 1073741824.0) - flush) / kb.promise_bytes);
        CHECK(fabs(x->seq_kv_mib - kb.promise_bytes / 1048576.0) < 1e-4, "%s ctx %d: seq_kv_mib %g, allocator %g",
              x->kv, x->ctx, x->seq_kv_mib, kb.promise_bytes / 1048576.0);
        if (want >= LLM_RUNNER_MAX_SEQS) /* the count stops at the sequences one step takes */
            CHECK(x->fits_budget == want && x->fits == LLM_RUNNER_MAX_SEQS && x->fits_limit == LLM_RUNNER_MAX_SEQS,
                  "%s ctx %d: engine admitted %d (limit %d), CSV budget %d, allocator %d", x->kv, x->ctx, x->fits,
                  x->fits_limit, x->fits_budget, want);
        else
            CHECK(x->fits_budget == want && x->fits == want && x->fits_limit == 0,
                  "%s ctx %d: engine admitted %d (limit %d), CSV budget %d, allocator %d", x->kv, x->ctx, x->fits,
                  x->fits_limit, x->fits_budget, want);
        CHECK(want >= 2, "%s ctx %d: %d sequences (pick another --kv-mem)", x->kv, x->ctx, want);
        CHECK(fabs(x->kv_mem_gib - kv_mem_gib) < 1e-4, "kv_mem_gib %g", x->kv_mem_gib); /* CSV: 4 decimals */
    }
    llm_model_free(m);
}

static void check_fits(const bench_results *r, int window) { check_fits_mem(r, window, KV_MEM_GIB); }

static void check_points(const bench_results *r, int steps, int fill_above) {
    for (int i = 0; i < r->n_points; i++) {
        const bench_point *p = &r->points[i];
        int filled = p->ctx > fill_above && fill_above > 0; /* no prefill numbers: empty CSV fields */
        CHECK(p->steps == steps && p->decode_tok_s > 0 && p->step_ms_p50 > 0 && p->step_ms_p99 >= p->step_ms_p50 &&
                  (filled ? isnan(p->prefill_tok_s) && isnan(p->ttft_ms) : p->prefill_tok_s > 0 && p->ttft_ms > 0) &&
                  p->kv_mib > 0,
              "%s b%d c%d: implausible numbers", p->kv, p->batch, p->ctx);
        CHECK(isfinite(p->roofline_pct) && p->roofline_pct > 0 && p->roofline_tok_s > 0, "roofline %g",
              p->roofline_pct);
        CHECK(fabs(p->step_mib - p->weights_mib - p->kv_mib) < 0.5 * p->kv_mib + 0.01, "step_mib %g", p->step_mib);
        /* roofline_tok_s = batch / (step bytes / bandwidth), from the CSV's own columns */
        double want = p->batch / (p->step_mib * 1048576.0 / (r->bw_gb_s * 1e9));
        CHECK(fabs(p->roofline_tok_s - want) < 1e-3 * want, "roofline_tok_s %g, want %g", p->roofline_tok_s, want);
        /* decode tok/s agrees with the step times: batch / mean step <= ... the p50 is a step time */
        CHECK(p->decode_tok_s > 0.2 * 1e3 * p->batch / p->step_ms_p99, "tok/s vs step times");
    }
    for (int i = 0; i < r->n_points; i++) /* int2 keeps less than bf16 beyond its window */
        for (int j = 0; j < r->n_points; j++) {
            const bench_point *a = &r->points[i], *b = &r->points[j];
            if (!strcmp(a->kv, "bf16") && !strcmp(b->kv, "int2") && a->batch == b->batch && a->ctx == b->ctx &&
                a->ctx >= 160)
                CHECK(b->kv_mib < 0.6 * a->kv_mib, "b%d c%d: int2 %g MiB vs bf16 %g", a->batch, a->ctx, b->kv_mib,
                      a->kv_mib);
        }
}

static void test_run(const char *dir) {
    char csv[512], png[512], rep[512], err[512];
    snprintf(csv, sizeof csv, "%s/b.csv", dir);
    snprintf(png, sizeof png, "%s/b.png", dir);
    snprintf(rep, sizeof rep, "%s/REPORT.md", dir);
    cli_result r = cli_run("bench -m %s --kv bf16,int2 --batch 1,2 --ctx 48,160 --kv-window 32 -n 4 --kv-mem %g "
                           "--bw-mib 8 -t 2 --csv %s --png %s --png-size 900x600 --report %s",
                           g_model, KV_MEM_GIB, csv, png, rep);
    CHECK(r.code == 0, "exit %d: %s", r.code, r.err);
    int rows = 0;
    for (const char *p = r.out; (p = strstr(p, "\n| ")); p++) rows++;
    CHECK(rows == 1 + 8 + 1 + 4, "stdout has %d table rows, want 14:\n%s", rows, r.out);
    CHECK(strstr(r.out, "GB/s") != NULL && strstr(r.err, "bench:") != NULL, "bandwidth / progress lines");
    bench_results res;
    CHECK(bench_csv_read(csv, &res, err, sizeof err) == 0, "csv: %s", err);
    CHECK(res.n_points == 8 && res.n_fits == 4, "%d points, %d fits", res.n_points, res.n_fits);
    CHECK(!strcmp(res.device, "cpu") && res.bw_gb_s > 0, "device %s bw %g", res.device, res.bw_gb_s);
    check_points(&res, 4, 0);
    check_fits(&res, 32); /* --kv-window 32 */
    int v = bench_png_check(png, &res, 900, 600, err, sizeof err);
    CHECK(v >= 8, "png: %d markers verified: %s", v, v < 0 ? err : "");
    char *t = omni_read_file(rep, NULL);
    CHECK(t && strstr(t, "int2 / bf16") && strstr(t, "![omni bench chart](b.png)"), "report");
    free(t);
    bench_results_free(&res);
    cli_free(&r);
}

/* A finished run's CSV into res (0 when the run failed or the CSV is unreadable; res is then empty). */
static int run_csv(const cli_result *r, const char *what, const char *csv, bench_results *res) {
    char err[512] = "";
    CHECK(r->code == 0, "%s: exit %d: %s", what, r->code, r->err);
    int ok = bench_csv_read(csv, res, err, sizeof err) == 0;
    CHECK(ok, "%s: csv: %s", what, err);
    return ok;
}

static void test_random(const char *dir) {
    char csv[512];
    snprintf(csv, sizeof csv, "%s/r.csv", dir);
    cli_result r = cli_run("bench --random %s/config.json --kv int2 --batch 2 --ctx 40 -n 2 --kv-mem 0.01 --bw-mib 4 "
                           "--csv %s", g_model, csv);
    bench_results res;
    run_csv(&r, "--random", csv, &res);
    CHECK(res.n_points == 1 && strstr(res.model, "random:") == res.model, "random run: %d points, model %s",
          res.n_points, res.model);
    bench_results_free(&res);
    cli_free(&r);
}

/* --fits-kv: fits rows only (engine count == allocator arithmetic), a format's own window. */
static void test_fits_only(const char *dir) {
    char csv[512];
    snprintf(csv, sizeof csv, "%s/f.csv", dir);
    cli_result r = cli_run("bench -m %s --kv bf16 --fits-kv int2,int2:w0 --batch 1 --ctx 160 -n 2 --kv-mem %g "
                           "--bw-mib 4 -t 2 --csv %s", g_model, KV_MEM_GIB, csv);
    bench_results res;
    run_csv(&r, "--fits-kv", csv, &res);
    CHECK(res.n_points == 1 && res.n_fits == 3 && !strcmp(res.fits[2].kv, "int2:w0"), "%d points, %d fits",
          res.n_points, res.n_fits);
    check_fits(&res, -1);
    if (res.n_fits == 3) /* 160 tokens: int2 keeps them raw in its 128-token window (+ a group) as bf16 does (its
                            first flush's quant page comes from the one flush kept free): no more fit; with no
                            window they are quantized */
        CHECK(res.fits[2].fits > res.fits[0].fits && res.fits[1].fits <= res.fits[0].fits,
              "fits bf16 %d int2 %d int2:w0 %d", res.fits[0].fits, res.fits[1].fits, res.fits[2].fits);
    bench_results_free(&res);
    cli_free(&r);
}

/* A budget for more sequences than one step takes: the engine admits every one it is given (LLM_RUNNER_MAX_SEQS on
 * the CPU), the CSV's fits_limit says so, the table marks the count ">=" and the report says why. */
static void test_fits_limit(const char *dir) {
    char csv[512], rep[512], mem[64];
    snprintf(csv, sizeof csv, "%s/lim.csv", dir);
    snprintf(rep, sizeof rep, "%s/LIM.md", dir);
    llm_model *m = NULL;
    CHECK(llm_model_load(g_model, &m) == OMNI_OK, "load");
    if (!m) return;
    kv_params kp = llm_model_kv_params(m);
    kv_budget kb;
    CHECK(bench_format("bf16", -1, -1, &kp.fmt) == OMNI_OK, "format");
    kp.max_tokens = kp.max_seq_len = 32;
    CHECK(kv_budget_of(&kp, 32, &kb) == OMNI_OK, "budget");
    llm_model_free(m);
    snprintf(mem, sizeof mem, "%.9g", (LLM_RUNNER_MAX_SEQS + 40.5) * kb.promise_bytes / 1073741824.0);
    cli_result r = cli_run("bench -m %s --kv bf16 --batch 1 --ctx 32 -n 2 --kv-mem %s --bw-mib 4 -t 2 --csv %s "
                           "--report %s", g_model, mem, csv, rep);
    bench_results res;
    if (run_csv(&r, "limit", csv, &res)) {
        CHECK(res.n_fits == 1, "%d fits rows", res.n_fits);
        check_fits_mem(&res, -1, strtod(mem, NULL));
        CHECK(res.n_fits == 1 && res.fits[0].fits_budget == LLM_RUNNER_MAX_SEQS + 40, "budget %d",
              res.n_fits ? res.fits[0].fits_budget : -1);
        CHECK(strstr(r.out, "|         >=1024 |") != NULL || strstr(r.out, ">=1024") != NULL, "table:\n%s", r.out);
        char *t = omni_read_file(rep, NULL);
        CHECK(t && strstr(t, "| ≥ 1024† |") && strstr(t, "the runner's sequence limit"), "report:\n%s", t ? t : "");
        free(t);
        bench_results_free(&res);
    }
    cli_free(&r);
}

/* --fill-above: contexts above it are random K/V appended through the runner's cache (no prefill numbers); the KV
 * they hold is exactly what the allocator says such sequences commit, quantized beyond the window. */
static void test_filled(const char *dir) {
    char csv[512];
    snprintf(csv, sizeof csv, "%s/fill.csv", dir);
    cli_result r = cli_run("bench -m %s --kv bf16,int2 --batch 1,2 --ctx 48,200 --fill-above 64 --kv-window 32 -n 3 "
                           "--kv-mem %g --bw-mib 4 -t 2 --csv %s", g_model, KV_MEM_GIB, csv);
    bench_results res;
    run_csv(&r, "--fill-above", csv, &res);
    CHECK(res.n_points == 8, "%d points", res.n_points);
    check_points(&res, 3, 64);
    llm_model *m = NULL;
    CHECK(llm_model_load(g_model, &m) == OMNI_OK, "load");
    for (int i = 0; m && i < res.n_points; i++) {
        const bench_point *p = &res.points[i];
        if (p->ctx <= 64) continue;
        kv_params kp = llm_model_kv_params(m);
        kv_budget kb;
        CHECK(bench_format(p->kv, 32, -1, &kp.fmt) == OMNI_OK, "format");
        kp.max_tokens = kp.max_seq_len = p->ctx;
        CHECK(kv_budget_of(&kp, p->ctx, &kb) == OMNI_OK, "budget");
        double want = p->batch * kb.committed_bytes / 1048576.0;
        CHECK(fabs(p->kv_mib - want) < 1e-3, "%s b%d c%d filled: KV %g MiB, committed pages %g", p->kv, p->batch,
              p->ctx, p->kv_mib, want);
    }
    llm_model_free(m);
    bench_results_free(&res);
    cli_free(&r);
}

int main(void) {
    snprintf(g_model, sizeof g_model, "%s/text/qvl-h64-hd128-gqa2-tied", OMNI_FIXTURES);
    char *dir = make_tmpdir();
    if (!dir) return 1;
    test_bad_args(dir);
    test_run(dir);
    test_random(dir);
    test_fits_only(dir);
    test_fits_limit(dir);
    test_filled(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("OMNI_TEST_KEEP")) printf("files kept in %s\n", dir);
    else if (system(cmd)) {}
    free(dir);
    return check_exit();
}
