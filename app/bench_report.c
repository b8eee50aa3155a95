/* bench_report.c - REPORT.md from one omni bench run (+ the transformers baseline): the paper's efficiency table
 * (throughput at the largest batch / smallest context, step latency at the smallest batch / largest context, KV
 * memory per sequence, sequences that fit), each with its % of roofline and the paper's H20 ratio beside it. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/bench.h"

/* The OScaR paper's system claims (Su et al., "OScaR: The Occam's Razor for Extreme KV Cache Quantization in LLMs
 * and Beyond", arXiv 2605.19660; spec/oscar.md): INT2 against BF16 FlashDecoding-v2 on an NVIDIA H20 (the
 * system evaluation uses Llama-3.1-8B): 5.3x less KV memory, 4.1x throughput at batch 48 / 4K context, up to
 * 3.0x faster decoding at 128K context. */
#define PAPER_MEMORY 5.3
#define PAPER_THROUGHPUT 4.1
#define PAPER_LATENCY 3.0

#define BASELINE_HEADER "kind,batch,ctx,steps,decode_tok_s,step_ms,prefill_tok_s,ttft_ms,peak_mib,note"

static double field_num(const char *s) { return *s ? strtod(s, NULL) : NAN; }

/* One CSV line of the baseline into *b; the note (last field) may contain commas. Returns 0 or -1. */
static int baseline_row(char *line, bench_baseline *b) {
    char *f[10];
    int n = 0;
    for (char *p = line; n < 10;) {
        f[n++] = p;
        char *c = n < 10 ? strchr(p, ',') : NULL;
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    if (n < 9 || strcmp(f[0], "baseline")) return -1;
    memset(b, 0, sizeof *b);
    b->batch = atoi(f[1]), b->ctx = atoi(f[2]), b->steps = atoi(f[3]);
    b->decode_tok_s = field_num(f[4]), b->step_ms = field_num(f[5]), b->prefill_tok_s = field_num(f[6]);
    b->ttft_ms = field_num(f[7]), b->peak_mib = field_num(f[8]);
    if (n == 10) snprintf(b->note, sizeof b->note, "%s", f[9]);
    return b->batch > 0 && b->ctx > 0 ? 0 : -1;
}

omni_status bench_read_baseline(const char *path, bench_baseline **rows, int *n) {
    *rows = NULL;
    *n = 0;
    char *text = omni_read_file(path, NULL);
    if (!text) return omni_fail(OMNI_ERR_INPUT, "cannot read baseline %s: %s", path, strerror(errno));
    omni_status st = OMNI_OK;
    int line_no = 0, cap = 0;
    for (char *line = text, *next; line && *line && !st; line = next, line_no++) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[len - 1] = 0;
        if (line_no == 0) {
            if (strcmp(line, BASELINE_HEADER))
                st = omni_fail(OMNI_ERR_INPUT, "baseline %s: header is not '%s'", path, BASELINE_HEADER);
            continue;
        }
        if (!*line) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            bench_baseline *r = realloc(*rows, sizeof **rows * (size_t)cap);
            if (!r) { st = omni_fail(OMNI_ERR_NOMEM, "out of memory"); break; }
            *rows = r;
        }
        if (baseline_row(line, &(*rows)[*n]))
            st = omni_fail(OMNI_ERR_INPUT, "baseline %s: bad line %d", path, line_no + 1);
        else (*n)++;
    }
    free(text);
    if (st) {
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return st;
}

/* ---- picking the numbers ---------------------------------------------------------------------------------- */

static const bench_point *find_point(const bench_results *r, const char *kv, int batch, int ctx) {
    for (int i = 0; i < r->n_points; i++)
        if (!strcmp(r->points[i].kv, kv) && r->points[i].batch == batch && r->points[i].ctx == ctx)
            return &r->points[i];
    return NULL;
}

static int has_points(const bench_results *r, const char *kv) {
    for (int i = 0; i < r->n_points; i++)
        if (!strcmp(r->points[i].kv, kv)) return 1;
    return 0;
}

static const bench_fit *find_fit(const bench_results *r, const char *kv, int ctx) {
    for (int i = 0; i < r->n_fits; i++)
        if (!strcmp(r->fits[i].kv, kv) && r->fits[i].ctx == ctx) return &r->fits[i];
    return NULL;
}

static const bench_baseline *find_baseline(const bench_report_info *in, int batch, int ctx) {
    for (int i = 0; i < in->n_baseline; i++)
        if (in->baseline[i].batch == batch && in->baseline[i].ctx == ctx) return &in->baseline[i];
    return NULL;
}

/* The throughput point (largest batch, then smallest context) and the latency point (batch 1 or the smallest,
 * then the largest context) among the (batch, ctx) pairs that the first format measured. */
static void pick_points(const bench_results *r, const char *kv0, int *tb, int *tc, int *lb, int *lc) {
    *tb = *tc = *lb = *lc = 0;
    for (int i = 0; i < r->n_points; i++) {
        const bench_point *p = &r->points[i];
        if (strcmp(p->kv, kv0)) continue;
        if (!*tb || p->batch > *tb || (p->batch == *tb && p->ctx < *tc)) *tb = p->batch, *tc = p->ctx;
        if (!*lb || p->batch < *lb || (p->batch == *lb && p->ctx > *lc)) *lb = p->batch, *lc = p->ctx;
    }
}

static const char *ctx_name(int ctx, char *buf, int cap) { return plot_format_value(ctx, PLOT_FMT_BINARY, buf, cap); }

/* ---- sections --------------------------------------------------------------------------------------------- */

static void speed_table(FILE *f, const bench_results *r, const bench_report_info *in, const char **kv, int nk) {
    int tb, tc, lb, lc;
    char c1[16], c2[16];
    pick_points(r, kv[0], &tb, &tc, &lb, &lc);
    if (!tb) {
        fprintf(f, "No decode point was measured.\n\n");
        return;
    }
    fprintf(f, "| | batch %d, context %s: decode tok/s | %% of roofline | batch %d, context %s: ms per step (p50) "
               "| tok/s | %% of roofline |\n|---|---:|---:|---:|---:|---:|\n",
            tb, ctx_name(tc, c1, sizeof c1), lb, ctx_name(lc, c2, sizeof c2));
    for (int k = 0; k < nk; k++) {
        const bench_point *t = find_point(r, kv[k], tb, tc), *l = find_point(r, kv[k], lb, lc);
        fprintf(f, "| omni %s |", kv[k]);
        if (t) fprintf(f, " %.1f | %.0f%% |", t->decode_tok_s, t->roofline_pct);
        else fprintf(f, " not measured | |");
        if (l) fprintf(f, " %.3f | %.1f | %.0f%% |\n", l->step_ms_p50, l->decode_tok_s, l->roofline_pct);
        else fprintf(f, " not measured | | |\n");
    }
    const bench_point *t0 = find_point(r, kv[0], tb, tc), *l0 = find_point(r, kv[0], lb, lc);
    for (int k = 1; k < nk; k++) {
        const bench_point *t = find_point(r, kv[k], tb, tc), *l = find_point(r, kv[k], lb, lc);
        fprintf(f, "| %s / %s (omni, this run) |", kv[k], kv[0]);
        if (t && t0) fprintf(f, " **%.2fx** | |", t->decode_tok_s / t0->decode_tok_s);
        else fprintf(f, " | |");
        if (l && l0) fprintf(f, " **%.2fx** faster | | |\n", l0->step_ms_p50 / l->step_ms_p50);
        else fprintf(f, " | | |\n");
    }
    fprintf(f, "| paper (H20): INT2 / BF16 | %.1fx (batch 48, 4K) | | up to %.1fx faster (128K) | | |\n",
            PAPER_THROUGHPUT, PAPER_LATENCY);
    const char *label = in->baseline_label ? in->baseline_label : "baseline";
    if (in->baseline_error) {
        fprintf(f, "| %s | not run: %s | | | | |\n", label, in->baseline_error);
    } else if (in->n_baseline) {
        const bench_baseline *bt = find_baseline(in, tb, tc), *bl = find_baseline(in, lb, lc);
        fprintf(f, "| %s |", label);
        if (bt && isfinite(bt->decode_tok_s))
            fprintf(f, " %.1f | %.0f%% |", bt->decode_tok_s, t0 ? 100 * bt->decode_tok_s / t0->roofline_tok_s : NAN);
        else fprintf(f, " %s | |", bt && bt->note[0] ? bt->note : "not measured");
        if (bl && isfinite(bl->step_ms))
            fprintf(f, " %.3f | %.1f | %.0f%% |\n", bl->step_ms, bl->decode_tok_s,
                    l0 ? 100 * bl->decode_tok_s / l0->roofline_tok_s : NAN);
        else fprintf(f, " %s | | |\n", bl && bl->note[0] ? bl->note : "not measured");
        for (int k = 0; k < nk; k++) { /* how much faster than what users would run otherwise */
            const bench_point *t = find_point(r, kv[k], tb, tc), *l = find_point(r, kv[k], lb, lc);
            int ht = t && bt && bt->decode_tok_s > 0, hl = l && bl && bl->step_ms > 0;
            if (!ht && !hl) continue;
            fprintf(f, "| omni %s / baseline above |", kv[k]);
            if (ht) fprintf(f, " **%.2fx** | |", t->decode_tok_s / bt->decode_tok_s);
            else fprintf(f, " | |");
            if (hl) fprintf(f, " **%.2fx** faster | | |\n", bl->step_ms / l->step_ms_p50);
            else fprintf(f, " | | |\n");
        }
    }
    fprintf(f, "\n");
}

static void memory_table(FILE *f, const bench_results *r, const char **kv, int nk) {
    int ctxs[BENCH_MAX_LIST], nc = 0;
    for (int i = 0; i < r->n_fits; i++) {
        int seen = 0;
        for (int j = 0; j < nc; j++) seen |= ctxs[j] == r->fits[i].ctx;
        if (!seen && nc < BENCH_MAX_LIST) ctxs[nc++] = r->fits[i].ctx;
    }
    if (!nc) return;
    char c[16];
    int arithmetic_only = 0;
    const bench_fit *limited = NULL; /* the first count the device's sequence limit stopped */
    fprintf(f, "| |");
    for (int j = 0; j < nc; j++)
        fprintf(f, " KV MiB per sequence of %s | sequences of %s in %.3g GiB |", ctx_name(ctxs[j], c, sizeof c), c,
                r->fits[0].kv_mem_gib);
    fprintf(f, "\n|---|");
    for (int j = 0; j < nc; j++) fprintf(f, "---:|---:|");
    fprintf(f, "\n");
    for (int k = 0; k < nk; k++) {
        fprintf(f, "| omni %s |", kv[k]);
        for (int j = 0; j < nc; j++) {
            const bench_fit *x = find_fit(r, kv[k], ctxs[j]);
            if (x) fprintf(f, " %.2f | %s%d%s |", x->seq_kv_mib, x->fits_limit > 0 ? "≥ " : "", bench_fit_count(x),
                           x->fits < 0 ? "*" : x->fits_limit > 0 ? "†" : "");
            else fprintf(f, " | |");
            arithmetic_only |= x && x->fits < 0;
            if (x && x->fits_limit > 0 && !limited) limited = x;
        }
        fprintf(f, "\n");
    }
    for (int k = 1; k < nk; k++) {
        fprintf(f, "| %s vs %s (omni, this run) |", kv[k], kv[0]);
        for (int j = 0; j < nc; j++) {
            const bench_fit *a = find_fit(r, kv[0], ctxs[j]), *b = find_fit(r, kv[k], ctxs[j]);
            if (a && b && b->seq_kv_mib > 0 && bench_fit_count(a) > 0 && !a->fits_limit)
                fprintf(f, " **%.2fx** smaller | **%s%.2fx** more |", a->seq_kv_mib / b->seq_kv_mib,
                        b->fits_limit > 0 ? "≥ " : "", (double)bench_fit_count(b) / bench_fit_count(a));
            else if (a && b && b->seq_kv_mib > 0) /* the first format's count is a lower bound: no ratio of counts */
                fprintf(f, " **%.2fx** smaller | |", a->seq_kv_mib / b->seq_kv_mib);
            else fprintf(f, " | |");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "| paper (H20): INT2 vs BF16 |");
    for (int j = 0; j < nc; j++) fprintf(f, " %.1fx smaller | |", PAPER_MEMORY);
    fprintf(f, "\n\n");
    fprintf(f, "KV MiB per sequence: what the engine promises a sequence that grows to that length: the most bytes it "
               "holds at once while it decodes, the steps that flush a window block excepted (page allocator arithmetic, "
               "kv_budget_of's promise_bytes); such a step holds one quant page more, taken from bytes the engine keeps "
               "unpromised (at least one flush's worth; flushes beyond them wait a step). Sequences that fit: what the "
               "engine admitted at once within the budget%s less that flush reserve (kv_step_extra_bytes_of:",
            arithmetic_only ? " (* the budget arithmetic alone: this device does not run the format yet)" : "");
    for (int k = 0; k < nk; k++) {
        const bench_fit *x = find_fit(r, kv[k], ctxs[0]);
        fprintf(f, "%s %s %.2f MiB", k ? "," : "", kv[k], x ? x->reserve_mib : 0.0);
    }
    fprintf(f, "). A prompt longer than one prefill chunk or a conversation turn also holds the prefill step reserve "
               "while it prefills (the old window's pages beside the new window's: kv_step_extra_bytes_of, about R/32 + 1 "
               "raw pages per chunk; held only while such a request is admitted, and a chunk waits for a later step when "
               "it is used up).");
    if (limited)
        fprintf(f, " † The engine admitted every sequence it was given: %d is the most one step takes on this device "
                   "(%s), so at least that many fit; the budget arithmetic holds %d (%s at %d tokens).",
                limited->fits_limit, limited->limit_why[0] ? limited->limit_why : "the runner's sequence limit",
                limited->fits_budget, limited->kv, limited->ctx);
    fprintf(f, "\n\n");
}

static void header(FILE *f, const bench_results *r, const bench_report_info *in) {
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    fprintf(f, "# omni bench report\n\n");
    fprintf(f, "Model **%s**, device **%s%s%s%s**, omni %s, %s.\n\n", r->model, r->device,
            in->device_name ? " (" : "", in->device_name ? in->device_name : "", in->device_name ? ")" : "",
            in->version ? in->version : "?", date);
    if (in->command) fprintf(f, "Command: `%s`\n\n", in->command);
    if (in->method) fprintf(f, "%s\n\n", in->method);
    fprintf(f, "Memory bandwidth measured at the start of the run: **%.1f GB/s** (copy of %.0f MiB, read + write "
               "counted). The roofline of a decode step: it must read the weights once and every sequence's whole KV "
               "cache, so step time >= (weight bytes + sum of KV bytes) / bandwidth and tokens/s <= batch / that "
               "time; \"%% of roofline\" is measured tokens/s over that limit.\n\n",
            r->bw_gb_s, r->bw_mib);
}

omni_status bench_write_report(const char *path, const bench_results *r, const bench_report_info *in) {
    FILE *f = fopen(path, "w");
    if (!f) return omni_fail(OMNI_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
    const char *kv[BENCH_MAX_LIST];
    int nk = bench_formats(r, kv);
    header(f, r, in);
    fprintf(f, "## The paper's efficiency table, measured here\n\n");
    if (nk) {
        int np = 0; /* formats with speed points come first in bench_formats' order */
        while (np < nk && has_points(r, kv[np])) np++;
        if (np) speed_table(f, r, in, kv, np);
        memory_table(f, r, kv, nk);
    }
    fprintf(f, "The paper's rows: OScaR (Su et al., arXiv 2605.19660) against BF16 FlashDecoding-v2 on an NVIDIA "
               "H20 (5.3x KV memory, 4.1x throughput at batch 48 / 4K, up to 3.0x decode speed at 128K; its system "
               "evaluation uses Llama-3.1-8B). Ratios are comparable across machines, absolute numbers are not.\n\n");
    fprintf(f, "## All points\n\n```\n");
    bench_print_table(f, r);
    fprintf(f, "```\n\n");
    if (in->png) fprintf(f, "![omni bench chart](%s)\n\n", in->png);
    if (in->csv) fprintf(f, "Raw numbers: [%s](%s) (columns: bench/README.md).\n", in->csv, in->csv);
    int bad = ferror(f);
    if (fclose(f) || bad)
        return omni_fail(OMNI_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
    return OMNI_OK;
}
