/* bench.h - results of `omni bench` and everything made from them: the table (stdout), the CSV, the chart
 * (PNG, app/plot), plus the pieces of the measurement that need no model: list options, percentiles, the
 * memory-copy bandwidth that the roofline is taken against, and the weight bytes one decode step reads.
 * The measurement loop itself (through the engine) is app/cmd_bench.c.
 *
 * CSV (one header line, then one row per measured point and one per fits-count; columns in this order, empty
 * where a column does not apply to the row's kind; documented in README.md and bench/README.md):
 *   kind            "point" (a decode/prefill measurement) or "fit" (sequences that fit in the KV budget)
 *   model, device   model directory name or "random:<config dir>"; cpu | cuda
 *   kv              KV cache format (bf16, int2, ...)
 *   batch, ctx      sequences decoding together; tokens in each sequence's cache when decoding starts
 *   steps           decode steps measured
 *   decode_tok_s    batch * steps / decode time
 *   step_ms_p50, step_ms_p99   decode step latency percentiles (nearest rank)
 *   prefill_tok_s   prompt tokens / prefill time (all batch * ctx tokens)
 *   ttft_ms         time to first token: request submitted -> its first sampled token, mean over the batch
 *   kv_mib          KV bytes in use (pages, all sequences) once the prompts are in the cache
 *   weights_mib     weight bytes one decode step reads (embedding rows excluded unless tied; MoE: expected
 *                   distinct experts under uniform routing)
 *   step_mib        weights_mib + mean KV MiB in use during the decode (the bytes a step must read)
 *   bw_gb_s         memory bandwidth measured at start (copy, read + write counted), 1e9 B/s
 *   roofline_tok_s  batch / (step bytes / bandwidth): the speed limit of this point
 *   roofline_pct    100 * decode_tok_s / roofline_tok_s
 *   kv_mem_gib      the KV budget of the fits-count (GiB = 2^30 B)
 *   seq_kv_mib      KV bytes one sequence of ctx tokens is promised: the most it holds at once while it decodes,
 *                   the steps that flush a window block excepted (page allocator arithmetic, kv_budget_of's
 *                   promise_bytes; a flushing step's extra quant page comes from unpromised bytes)
 *   fits            sequences of ctx tokens the engine admitted at once within kv_mem_gib (empty when the device
 *                   does not run the format: then only fits_budget is known)
 *   fits_budget     the same count from the page allocator's budget arithmetic: (kv_mem_gib - reserve_mib) /
 *                   seq_kv_mib, rounded down (must equal fits)
 *   reserve_mib     what the engine keeps unpromised while it counts: one flushing decode step's excess (a quant
 *                   page, kv_step_extra_bytes_of); the count's one-token prompts hold no prefill step reserve
 *                   (held only for chunks on non-empty sequences: prompts over one chunk, conversation turns)
 *   fits_limit      set when the engine's count stopped at the most sequences one step takes on the device
 *                   (llm_runner_max_seqs, e.g. 256 for the CUDA attention): then fits = fits_limit and at least
 *                   that many fit (fits_budget says how many the budget holds); empty otherwise
 */
#ifndef OMNI_APP_BENCH_H
#define OMNI_APP_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include "app/plot/plot.h"
#include "kernels/status.h"
#include "kvcache/kvcache.h"

#define BENCH_MAX_LIST 16 /* entries per --kv / --batch / --ctx list */
#define BENCH_NAME 32

typedef struct {
    char kv[BENCH_NAME];
    int batch, ctx, steps;
    double decode_tok_s, step_ms_p50, step_ms_p99, prefill_tok_s, ttft_ms;
    double kv_mib, weights_mib, step_mib, roofline_tok_s, roofline_pct;
} bench_point;

typedef struct {
    char kv[BENCH_NAME];
    int ctx;
    double kv_mem_gib, seq_kv_mib;
    int fits, fits_budget; /* fits -1: not counted by the engine (format not run on the device) */
    double reserve_mib;    /* kept unpromised during the count (one flush's excess) */
    int fits_limit;        /* > 0: the engine's count stopped at the most sequences one step takes on the device
                              (fits == fits_limit < fits_budget: at least that many fit); 0: no limit reached */
    char limit_why[64];    /* what sets fits_limit (llm_runner_max_seqs), "" when not known */
} bench_fit;

typedef struct {
    char model[256], device[16];
    int threads;
    double bw_gb_s;  /* measured memory bandwidth (read + write), 1e9 B/s */
    double bw_mib;   /* buffer size of that measurement */
    int n_points, n_fits;
    bench_point *points; /* [n_points] (owned) */
    bench_fit *fits;     /* [n_fits] (owned) */
} bench_results;

/* "1,8,48" / "4K,32K,128K" (K = 1024, M = 1048576) -> values in [lo, hi], at most BENCH_MAX_LIST, no repeats,
 * kept in the given order. Errors name the option. */
omni_status bench_parse_counts(const char *s, const char *opt, int lo, int hi, int *out, int *n);
/* One bench format: a --kv mode, optionally with its own window, "int2:w32" (R = 32 recent tokens in BF16) ->
 * the format; window / sink >= 0 (--kv-window / --kv-sink) are applied before the name's own window (-1: keep).
 * OMNI_ERR_USAGE with a message for an unknown mode or a window / sinks the cache refuses. */
omni_status bench_format(const char *name, int window, int sink, kv_format *f);
/* "bf16,int2,int2:w32" -> format names (each valid for bench_format, none twice); errors name the option. */
omni_status bench_parse_formats(const char *s, const char *opt, char out[][BENCH_NAME], int *n);

/* Nearest-rank percentile (q in [0, 100]) of v[n] (n > 0); v is not modified. */
double bench_percentile(const double *v, int n, double q);

/* CPU memory bandwidth: copies a `bytes` buffer to another with `threads` OpenMP threads (warm-up, then the
 * median of 5), counting read + write: 2 * bytes / time, in 1e9 B/s. OMNI_ERR_NOMEM when the buffers cannot be
 * allocated. */
omni_status bench_copy_bandwidth(size_t bytes, int threads, double *gb_s);
/* The same on CUDA device 0: device-to-device copies of `bytes` (batches of 10 between synchronisations, median of
 * 5 batches after a warm-up). OMNI_ERR_UNSUPPORTED in a build without CUDA. */
omni_status bench_cuda_copy_bandwidth(size_t bytes, double *gb_s);

/* Roofline of a point: decode steps cannot be faster than step_bytes / bandwidth. Fills step_mib, roofline_tok_s
 * and roofline_pct from weights_mib, the mean KV MiB during the decode, decode_tok_s and bw_gb_s. */
void bench_roofline(bench_point *p, double kv_mib_decode, double bw_gb_s);

/* Appends a point / a fits row (grows the arrays). */
omni_status bench_add_point(bench_results *r, const bench_point *p);
omni_status bench_add_fit(bench_results *r, const bench_fit *f);
void bench_results_free(bench_results *r);

/* The engine's count of a fits row, or the budget arithmetic's where the engine did not count (fits < 0); a count
 * stopped at the device's sequence limit (fits_limit) is that limit (a lower bound). */
int bench_fit_count(const bench_fit *x);

/* KV formats in order of first appearance (points, then fits), at most BENCH_MAX_LIST; returns the count. The
 * index of a format picks its colour in the chart and its row in the report. */
int bench_formats(const bench_results *r, const char **names);

/* The table (markdown, readable as text) on f: header line, points, fits. */
void bench_print_table(FILE *f, const bench_results *r);
/* The CSV described above. */
omni_status bench_write_csv(const char *path, const bench_results *r);

/* The chart: BENCH_CHARTS panels in a grid of BENCH_CHART_COLS columns: decode tokens/s vs context and vs batch
 * with dashed rooflines, sequences that fit vs context, KV MiB vs context and vs batch, step latency p50 vs
 * context. "vs context" panels show the batch measured at the most contexts (ties: the largest; for the latency
 * panel the smallest), "vs batch" panels the context measured at the most batches (ties: the smallest). One colour per KV format (plot_palette(index in
 * the run's order of formats)). font: a TrueType file or NULL (plot.h's default). charts[] receives the panels
 * (caller frees each with plot_free). */
/* ---- REPORT.md (bench/report.sh): the paper's efficiency table from one run ----
 * A baseline row comes from bench/hf_generate.py (transformers' generate on random weights of the same config):
 * CSV with the header "kind,batch,ctx,steps,decode_tok_s,step_ms,prefill_tok_s,ttft_ms,peak_mib,note", kind
 * "baseline"; a point that failed has empty numbers and a note. */
typedef struct {
    int batch, ctx, steps;
    double decode_tok_s, step_ms, prefill_tok_s, ttft_ms, peak_mib; /* NaN when not measured */
    char note[160];
} bench_baseline;

typedef struct {
    const char *command;   /* the command line of the run (shown) */
    const char *version;   /* omni version */
    const char *device_name; /* e.g. the GPU's name; NULL = device kind only */
    const char *png, *csv; /* file names of the chart and CSV next to the report (NULL: not linked) */
    const bench_baseline *baseline;
    int n_baseline;
    const char *baseline_label; /* e.g. "transformers 5.17 generate (BF16, sdpa)" */
    const char *baseline_error; /* the baseline could not run: why (shown instead of its numbers) */
    const char *method;         /* how the points were measured (a sentence, shown under the header) or NULL */
} bench_report_info;

/* Reads a baseline CSV (OMNI_ERR_INPUT with a message for a missing or malformed file). *rows is malloc'ed. */
omni_status bench_read_baseline(const char *path, bench_baseline **rows, int *n);
/* Writes the markdown report: the throughput point (largest batch, smallest context) and the latency point
 * (smallest batch, largest context) of every format with % of roofline and ratios to the first format, the
 * paper's H20 ratios beside them, the baseline row, KV memory and sequences that fit, all points, the chart. */
omni_status bench_write_report(const char *path, const bench_results *r, const bench_report_info *info);

#define BENCH_CHARTS 6
#define BENCH_CHART_COLS 3
omni_status bench_make_charts(const bench_results *r, const char *font, plot_chart **charts);
omni_status bench_write_png(const char *path, const bench_results *r, int width, int height, const char *font);

#endif
