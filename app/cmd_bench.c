/* cmd_bench.c - `omni bench`: for each KV format, context and batch, through the engine (llm/engine.h): decode
 * tokens/s, step latency p50/p99, prefill tokens/s, time to first token, KV memory and % of the roofline; and per
 * format and context the number of sequences the engine admits within --kv-mem, checked against the page
 * allocator's budget arithmetic. Table on stdout, progress on stderr, CSV, PNG chart, REPORT.md (app/bench.h).
 *
 * A point (format f, batch B, context C): B requests of C random prompt tokens are submitted together (greedy, no
 * EOS stop) and the engine steps them: the prefill phase lasts until every request has its first token (prefill
 * tokens/s = B * C over that time; TTFT per request from submission); then W warm-up decode steps and n timed
 * decode steps, each of which must produce exactly B tokens (all sequences decoding together at context C + the
 * few tokens decoded while the others were still prefilling); then the requests are cancelled. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/bench.h"
#include "app/commands.h"
#include "app/model_path.h"
#include "app/random_model.h"
#include "kernels/ops.h"
#include "llm/engine.h"

#define WARMUP_STEPS 2
#define MAX_STEPS 100000

typedef struct {
    const omni_args *a;
    llm_model *model;
    llm_device device;
    int threads;
    char kv[BENCH_MAX_LIST][BENCH_NAME], fit_kv[BENCH_MAX_LIST][BENCH_NAME]; /* --kv, --fits-kv */
    int n_kv, n_fit_kv, batch[BENCH_MAX_LIST], n_batch, ctx[BENCH_MAX_LIST], n_ctx;
    int steps, fill_above; /* fill_above: contexts above it are filled with random K/V (0: never) */
    double kv_mem_gib;
    bench_results res;
    volatile int *intr;
} bench_run;

void bench_defaults(omni_args *a) {
    a->kv = "bf16,int2";
    a->batch_list = "1,8,48";
    a->ctx_list = "4K,32K,128K";
    a->n_predict = 32;
    a->kv_mem_gib = 4;
    a->bw_mib = 256;
    a->png_w = 1500;
    a->png_h = 900;
}

/* ---- options ---------------------------------------------------------------------------------------------- */

/* Open an output file now, so that a bad path fails before a long run; appending, so that an existing file keeps
 * its bytes until the results are there to replace them (a failed run lost the last CSV / chart / report). */
static omni_status check_output(const char *path) {
    if (!path) return OMNI_OK;
    FILE *f = fopen(path, "a");
    if (!f) return omni_fail(OMNI_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
    fclose(f);
    return OMNI_OK;
}

static omni_status parse_options(bench_run *b) {
    const omni_args *a = b->a;
    if (!!a->model == !!a->random_config)
        return omni_fail(OMNI_ERR_USAGE, "bench: give either -m MODEL or --random CONFIG");
    if (a->n_positional) return omni_fail(OMNI_ERR_USAGE, "bench: unexpected argument '%s'", a->positional[0]);
    if (a->n_predict < 1 || a->n_predict > MAX_STEPS)
        return omni_fail(OMNI_ERR_USAGE, "-n: decode steps must be in [1, %d]", MAX_STEPS);
    omni_status st = llm_device_parse(a->device ? a->device : "cpu", &b->device); /* default: the CPU */
    if (!st) st = bench_parse_formats(a->kv, "--kv", b->kv, &b->n_kv);
    if (!st && a->fits_kv) st = bench_parse_formats(a->fits_kv, "--fits-kv", b->fit_kv, &b->n_fit_kv);
    if (!st && b->n_kv + b->n_fit_kv > BENCH_MAX_LIST)
        st = omni_fail(OMNI_ERR_USAGE, "--kv and --fits-kv: more than %d formats together", BENCH_MAX_LIST);
    for (int i = 0; !st && i < b->n_fit_kv; i++)
        for (int j = 0; j < b->n_kv; j++)
            if (!strcmp(b->fit_kv[i], b->kv[j]))
                st = omni_fail(OMNI_ERR_USAGE, "--fits-kv: %s is already in --kv", b->kv[j]);
    if (!st) st = bench_parse_counts(a->batch_list, "--batch", 1, LLM_RUNNER_MAX_SEQS, b->batch, &b->n_batch);
    if (!st) st = bench_parse_counts(a->ctx_list, "--ctx", 1, 1 << 24, b->ctx, &b->n_ctx);
    if (st) return st;
    int nf = 0;
    if (a->fill_above && (st = bench_parse_counts(a->fill_above, "--fill-above", 0, 1 << 24, &b->fill_above, &nf)))
        return st;
    if (nf > 1) return omni_fail(OMNI_ERR_USAGE, "--fill-above: one count, not a list");
    b->steps = a->n_predict;
    b->kv_mem_gib = a->kv_mem_gib;
    if ((st = check_output(a->csv)) || (st = check_output(a->png)) || (st = check_output(a->report))) return st;
    return OMNI_OK;
}

/* ---- model, bandwidth ------------------------------------------------------------------------------------- */

static omni_status open_model(bench_run *b) {
    const omni_args *a = b->a;
    if (a->random_config) { /* CUDA: the runner makes the weights on the device; CPU: a mapped checkpoint */
        omni_status st = b->device == LLM_DEVICE_CUDA ? omni_random_model_device(a->random_config, a->seed, &b->model)
                                                      : omni_random_model(a->random_config, a->seed, 0, &b->model);
        snprintf(b->res.model, sizeof b->res.model, "random:%.240s", a->random_config);
        return st;
    }
    char dir[4096];
    omni_status st = omni_resolve_model(a->model, dir, sizeof dir);
    if (!st) st = llm_model_load(dir, &b->model);
    const char *base = strrchr(dir, '/');
    snprintf(b->res.model, sizeof b->res.model, "%.255s", base && base[1] ? base + 1 : dir);
    return st;
}

/* Weight bytes one decode step of `batch` sequences reads: every decoder weight once, except the rows of an
 * untied embedding table that are not looked up (counted as none) and, for MoE layers, the experts no token of
 * the batch routes to (expected count under uniform routing: E (1 - (1 - k/E)^batch)). */
static double weights_read_mib(const llm_model *m, int batch) {
    const llm_config *c = llm_model_config(m);
    const llm_weights *w = llm_model_weights(m);
    double elem = llm_model_is_random(m, NULL) ? 2.0 : (double)omni_dtype_size(w->embed.dtype); /* random: bf16 */
    double bytes = (double)llm_model_weight_bytes(m);
    if (!c->tie_word_embeddings) bytes -= (double)c->vocab * c->hidden * elem;
    if (c->n_experts > 0) {
        double expert = 3.0 * c->moe_intermediate * c->hidden * elem, e = c->n_experts;
        double used = e * (1 - pow(1 - (double)c->top_k / e, batch));
        bytes -= (double)c->n_layers * (e - used) * expert;
    }
    return bytes / 1048576.0;
}

static omni_status measure_bandwidth(bench_run *b) {
    b->res.bw_mib = b->a->bw_mib;
    size_t bytes = (size_t)b->a->bw_mib << 20;
    if (b->device == LLM_DEVICE_CUDA) return bench_cuda_copy_bandwidth(bytes, &b->res.bw_gb_s);
    return bench_copy_bandwidth(bytes, b->threads, &b->res.bw_gb_s);
}

/* ---- one point -------------------------------------------------------------------------------------------- */

typedef struct {
    int n;                 /* requests */
    int *ids;              /* [n] request ids */
    double *first_ms;      /* [n] time of the first token (0: none yet) */
    int first_count, step_tokens;
    int ended;             /* requests that finished before the bench cancelled them */
    char why[320];         /* how the first of them ended */
    double t_submit;
} point_state;

static int slot_of(const point_state *ps, int id) {
    for (int i = 0; i < ps->n; i++)
        if (ps->ids[i] == id) return i;
    return -1;
}

static void on_token(void *user, int id, int32_t token, const char *piece, int len) {
    point_state *ps = user;
    (void)piece, (void)len;
    if (token < 0) return;
    ps->step_tokens++;
    int i = slot_of(ps, id);
    if (i >= 0 && ps->first_ms[i] == 0) {
        ps->first_ms[i] = omni_time_ms();
        ps->first_count++;
    }
}

static void on_done(void *user, int id, const llm_request_stats *s) {
    point_state *ps = user;
    (void)id;
    if (s->finish == LLM_FINISH_CANCELLED) return;
    if (!ps->ended++)
        snprintf(ps->why, sizeof ps->why, "%s%s%s", llm_finish_name(s->finish), s->error[0] ? ": " : "", s->error);
}

/* Prompt tokens of one request per step: on CUDA one chunk fills the step (GEMMs of 8192 rows; a 128K prompt
 * takes 16 steps), on the CPU four requests share a step. */
static int prefill_chunk(const bench_run *b) { return b->device == LLM_DEVICE_CPU ? 512 : 8192; }

/* Tokens of one engine step: room for a decode token of every sequence and 2048 (CPU) / 8192 (CUDA) prompt
 * tokens. */
static int step_tokens(const bench_run *b, int max_seqs) {
    return max_seqs + (b->device == LLM_DEVICE_CPU ? 4 : 1) * prefill_chunk(b);
}

static llm_engine_params engine_params(const bench_run *b, int max_seqs, int max_tokens) {
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.device = b->device;
    ep.runner.n_threads = b->threads;
    ep.runner.max_seqs = max_seqs;
    ep.runner.max_tokens = max_tokens;
    ep.prefill_chunk = prefill_chunk(b);
    return ep;
}

static omni_status engine_for(const bench_run *b, int max_seqs, int max_tokens, llm_engine **e) {
    llm_engine_params ep = engine_params(b, max_seqs, max_tokens);
    return llm_engine_init(b->model, &ep, e);
}

static omni_status kv_format_of(const bench_run *b, const char *name, kv_format *f) {
    omni_status st = bench_format(name, b->a->kv_window, b->a->kv_sink, f);
    if (!st && b->a->kv_rotate >= 0) f->rotate = b->a->kv_rotate;
    if (!st && b->a->kv_scale >= 0) f->scale = b->a->kv_scale;
    return st;
}

static omni_status ended_early(const point_state *ps) {
    return omni_fail(OMNI_ERR_RUNTIME, "bench: %d request(s) ended before the measurement did (%s)", ps->ended,
                     ps->why);
}

/* Steps until every request has its first token (at most max_steps). */
static omni_status prefill_phase(const bench_run *b, llm_engine *e, point_state *ps, int64_t max_steps) {
    for (int64_t s = 0; ps->first_count < ps->n; s++) {
        if (b->intr && *b->intr) return OMNI_OK;
        if (s == max_steps)
            return omni_fail(OMNI_ERR_RUNTIME, "bench: the prefill did not end in %lld steps", (long long)s);
        omni_status st = llm_engine_step(e, NULL);
        if (st) return st;
        if (ps->ended) return ended_early(ps);
    }
    return OMNI_OK;
}

/* Warm-up and timed decode steps; times[steps]. Every step must produce one token per request. */
static omni_status decode_phase(const bench_run *b, llm_engine *e, point_state *ps, double *times) {
    for (int s = 0; s < WARMUP_STEPS + b->steps; s++) {
        if (b->intr && *b->intr) return OMNI_OK;
        ps->step_tokens = 0;
        double t0 = omni_time_ms();
        omni_status st = llm_engine_step(e, NULL);
        double dt = omni_time_ms() - t0;
        if (st) return st;
        if (ps->ended) return ended_early(ps);
        if (ps->step_tokens != ps->n)
            return omni_fail(OMNI_ERR_RUNTIME, "bench: a decode step produced %d tokens for %d sequences",
                             ps->step_tokens, ps->n);
        if (s >= WARMUP_STEPS) times[s - WARMUP_STEPS] = dt;
    }
    return OMNI_OK;
}

static double cache_mib(llm_engine *e) {
    llm_cache_stats cs;
    return llm_engine_cache_stats(e, 0, &cs) ? NAN : cs.used_bytes / 1048576.0;
}

/* Random prompt tokens (the same for every format: seeded by batch and context). */
static void random_tokens(int32_t *t, int n, int vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
}

static omni_status submit_point(const bench_run *b, llm_engine *e, int batch, int ctx, int n_ctx,
                                point_state *ps) {
    int vocab = llm_model_config(b->model)->vocab;
    llm_request *rq = calloc((size_t)batch, sizeof *rq);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)ctx * batch);
    omni_status st = rq && tok ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < batch; i++) {
        random_tokens(tok + (size_t)i * ctx, ctx, vocab, (uint64_t)i * 7919 + (uint64_t)ctx);
        rq[i] = llm_request_default_params();
        rq[i].tokens = tok + (size_t)i * ctx;
        rq[i].n_tokens = ctx;
        rq[i].max_tokens = -1;
        rq[i].n_ctx = n_ctx;
        rq[i].ignore_eos = 1;
        rq[i].sampling.temp = 0;
        rq[i].cb.on_token = on_token;
        rq[i].cb.on_done = on_done;
        rq[i].cb.user = ps;
    }
    ps->t_submit = omni_time_ms();
    if (!st) st = llm_engine_submit_n(e, rq, batch, ps->ids);
    free(rq);
    free(tok);
    return st;
}

/* Most steps the prefill of batch x ctx tokens takes (each step runs at least one chunk). */
static int64_t prefill_steps(const bench_run *b, int batch, int ctx) {
    return ((int64_t)batch * ctx + prefill_chunk(b) - 1) / prefill_chunk(b) + batch;
}

/* Room for the decode: each request may decode one token per prefill step while others prefill, then warm-up
 * and timed steps. */
static int point_n_ctx(const bench_run *b, int batch, int ctx) {
    return (int)(ctx + prefill_steps(b, batch, ctx) + WARMUP_STEPS + b->steps + 1);
}

/* The numbers of a point from its decode step times (and the prefill ones, NaN when not measured). */
static void point_numbers(const bench_run *b, const char *kv, int batch, int ctx, const double *times,
                          double kv_start, double kv_end, bench_point *p) {
    double sum = 0;
    for (int i = 0; i < b->steps; i++) sum += times[i];
    memset(p, 0, sizeof *p);
    snprintf(p->kv, sizeof p->kv, "%s", kv);
    p->batch = batch, p->ctx = ctx, p->steps = b->steps;
    p->decode_tok_s = 1e3 * batch * b->steps / sum;
    p->step_ms_p50 = bench_percentile(times, b->steps, 50);
    p->step_ms_p99 = bench_percentile(times, b->steps, 99);
    p->prefill_tok_s = p->ttft_ms = NAN;
    p->kv_mib = kv_start;
    p->weights_mib = weights_read_mib(b->model, batch);
    bench_roofline(p, (kv_start + kv_end) / 2, b->res.bw_gb_s);
    if (omni_log_level() >= 2) { /* -v: every timed step (a flush of the window every 32 steps shows here) */
        char line[4096];
        int k = snprintf(line, sizeof line, "bench: %s batch %d ctx %d step ms:", kv, batch, ctx);
        for (int i = 0; i < b->steps && k > 0 && k < (int)sizeof line - 16; i++)
            k += snprintf(line + k, sizeof line - (size_t)k, " %.3f", times[i]);
        omni_log(2, "%s\n", line);
    }
}

static double usage_mib(const kv_cache *kv) {
    kv_usage u;
    kv_get_usage(kv, &u);
    return u.total_bytes / 1048576.0;
}

/* Greedy decode steps of every entry (warm-up, then the timed ones into times[]). */
static omni_status runner_decode(const bench_run *b, llm_runner *r, llm_batch_entry *e, int32_t *ids, int batch,
                                 double *times) {
    for (int s = 0; s < WARMUP_STEPS + b->steps; s++) {
        if (b->intr && *b->intr) return OMNI_OK;
        double t0 = omni_time_ms();
        omni_status st = llm_runner_step(r, batch, e);
        if (st) return st;
        if (s >= WARMUP_STEPS) times[s - WARMUP_STEPS] = omni_time_ms() - t0;
        for (int i = 0; i < batch; i++) ids[i] = e[i].token;
    }
    return OMNI_OK;
}

/* A point whose context is random K/V appended through the runner's cache (llm_runner_fill_random) instead of a
 * prefill; the decode steps run through llm_runner_step (the engine's step without its bookkeeping, < 1% of a
 * step: bench/NOTES.md). No prefill numbers (NaN). */
static omni_status measure_filled(bench_run *b, const char *kv, int batch, int ctx, bench_point *p) {
    llm_runner_params rp = llm_runner_default_params();
    rp.device = b->device, rp.n_threads = b->threads, rp.max_seqs = batch, rp.max_tokens = step_tokens(b, batch);
    kv_params kp = llm_model_kv_params(b->model);
    kp.max_seqs = batch;
    kp.max_seq_len = ctx + WARMUP_STEPS + b->steps + 1;
    kp.max_tokens = (int64_t)batch * kp.max_seq_len;
    llm_sampler_params gp = llm_sampler_default_params();
    gp.temp = 0;
    llm_runner *r = NULL;
    kv_cache *cache = NULL;
    llm_sampler *greedy = NULL;
    llm_batch_entry *e = calloc((size_t)batch, sizeof *e);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)batch);
    double *times = malloc(sizeof(double) * (size_t)b->steps), kv_start = 0;
    omni_status st = e && ids && times ? kv_format_of(b, kv, &kp.fmt) : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = llm_runner_init(b->model, &rp, &r);
    if (!st) st = llm_runner_cache_init(r, &kp, &cache);
    if (!st) st = llm_sampler_init(&gp, llm_model_config(b->model)->vocab, &greedy);
    for (int i = 0; !st && i < batch; i++) {
        int seq = -1;
        st = kv_seq_add(cache, &seq);
        if (!st) st = llm_runner_fill_random(r, cache, seq, ctx, 1000 + (uint64_t)i);
        random_tokens(&ids[i], 1, llm_model_config(b->model)->vocab, (uint64_t)i * 7919 + (uint64_t)ctx);
        e[i] = (llm_batch_entry){.kv = cache, .seq = seq, .in = {1, &ids[i], NULL, 0, NULL}, .sampler = greedy};
    }
    if (!st) kv_start = usage_mib(cache);
    if (!st) st = runner_decode(b, r, e, ids, batch, times);
    if (!st && !(b->intr && *b->intr)) point_numbers(b, kv, batch, ctx, times, kv_start, usage_mib(cache), p);
    llm_sampler_free(greedy);
    llm_runner_cache_free(r, cache);
    llm_runner_free(r);
    free(e), free(ids), free(times);
    return st;
}

static omni_status measure_point(bench_run *b, const char *kv, int batch, int ctx, bench_point *p) {
    llm_engine *e = NULL;
    llm_cache_params cp = llm_cache_default_params();
    int n_ctx = point_n_ctx(b, batch, ctx), cache;
    point_state ps = {batch, calloc((size_t)batch, sizeof(int)), calloc((size_t)batch, sizeof(double)), 0, 0, 0, "", 0};
    double *times = malloc(sizeof(double) * (size_t)b->steps);
    omni_status st = ps.ids && ps.first_ms && times ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = kv_format_of(b, kv, &cp.fmt);
    cp.ctx_tokens = n_ctx;
    cp.max_seqs = batch;
    if (!st) st = engine_for(b, batch, step_tokens(b, batch), &e);
    if (!st) st = llm_engine_add_cache(e, &cp, &cache);
    if (!st) st = submit_point(b, e, batch, ctx, n_ctx, &ps);
    if (!st) st = prefill_phase(b, e, &ps, 2 * prefill_steps(b, batch, ctx) + 16);
    double t_prefilled = omni_time_ms(), kv_start = st ? 0 : cache_mib(e);
    if (!st) st = decode_phase(b, e, &ps, times);
    if (!st && !(b->intr && *b->intr)) {
        double ttft = 0;
        for (int i = 0; i < batch; i++) ttft += ps.first_ms[i] - ps.t_submit;
        point_numbers(b, kv, batch, ctx, times, kv_start, cache_mib(e), p);
        p->prefill_tok_s = 1e3 * (double)batch * ctx / (t_prefilled - ps.t_submit);
        p->ttft_ms = ttft / batch;
    }
    for (int i = 0; e && i < batch; i++) llm_engine_cancel(e, ps.ids[i]);
    int left = 1;
    for (int k = 0; e && left > 0 && k < 4; k++) llm_engine_step(e, &left);
    llm_engine_free(e);
    free(ps.ids);
    free(ps.first_ms);
    free(times);
    return st;
}

/* ---- sequences that fit ----------------------------------------------------------------------------------- */

/* The page allocator's arithmetic, as the engine admits the count's requests (one-token prompts, no chunk on a
 * non-empty sequence: no prefill step reserve held): sequences of ctx tokens within the budget less one flushing
 * decode step's excess kept unpromised (kv_step_extra_bytes_of), each promised the most bytes it holds at once while
 * it decodes, its flushing steps excepted (kv_budget_of(ctx).promise_bytes; steps of the engine's step size). */
static omni_status budget_fits(const bench_run *b, const kv_format *f, int ctx, int64_t budget, int64_t *seq_bytes,
                               int64_t *step_bytes, int *fits) {
    kv_params kp = llm_model_kv_params(b->model);
    kp.fmt = *f;
    kp.max_tokens = ctx;
    kp.max_seq_len = ctx;
    kp.max_chunk = step_tokens(b, LLM_RUNNER_MAX_SEQS); /* the fits engine's step size (engine_fits) */
    const llm_engine_params ep = engine_params(b, LLM_RUNNER_MAX_SEQS, kp.max_chunk);
    kv_budget kb;
    int64_t chunk_bytes = 0, flush_bytes = 0;
    omni_status st = kv_budget_of(&kp, ctx, &kb);
    if (!st) st = kv_step_extra_bytes_of(&kp, &chunk_bytes, &flush_bytes);
    if (st) return st;
    *seq_bytes = kb.promise_bytes;
    *step_bytes = flush_bytes;
    omni_log(2, "bench: allocator: %lld bytes per sequence of %d tokens (peaks %lld raw + %lld quant pages = %lld "
             "bytes, not at once), %lld kept for a flush; a prefill step reserve of %lld bytes (%d chunks) is held "
             "only for chunks on non-empty sequences\n", (long long)kb.promise_bytes, ctx,
             (long long)kb.decode_raw_pages, (long long)kb.quant_pages, (long long)kb.decode_bytes,
             (long long)flush_bytes, (long long)(chunk_bytes * llm_engine_step_chunks(&ep)),
             llm_engine_step_chunks(&ep));
    *fits = kb.promise_bytes > 0 && budget > *step_bytes ? (int)((budget - *step_bytes) / kb.promise_bytes) : 0;
    return OMNI_OK;
}

static void count_done(void *user, int id, const llm_request_stats *s) {
    (void)id, (void)s;
    (*(int *)user)++;
}

/* What the engine admits: submit fits + 1 requests whose sequences can grow to ctx tokens (a one-token prompt: the
 * engine reserves the pages of the whole sequence at admission, and the step stays cheap) to a
 * cache with the budget and step once; every request admitted at the start of that step is running after it or
 * ended during it (admission happens only at the start of a step). Then cancel everything. At most the sequences
 * one step takes on the device are submitted (llm_runner_max_seqs): when the engine admits all of them, x->fits is
 * that limit and x->fits_limit says so (more would fit the budget than the device runs at once). */
static omni_status engine_fits(const bench_run *b, const kv_format *f, int ctx, int64_t budget, int want,
                               bench_fit *x) {
    const char *why = "";
    const int most = llm_runner_max_seqs(b->model, b->device, &why);
    int n = want + 1 > most ? most : want + 1, cache, ended = 0;
    llm_engine *e = NULL;
    llm_cache_params cp = llm_cache_default_params();
    cp.fmt = *f;
    cp.budget_bytes = budget;
    cp.max_seqs = n;
    int32_t tok[1] = {0};
    int *ids = calloc((size_t)n, sizeof(int));
    llm_request *rq = calloc((size_t)n, sizeof *rq);
    omni_status st = ids && rq ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = engine_for(b, n, step_tokens(b, LLM_RUNNER_MAX_SEQS), &e);
    if (!st) st = llm_engine_add_cache(e, &cp, &cache);
    for (int i = 0; !st && i < n; i++) {
        rq[i] = llm_request_default_params();
        rq[i].tokens = tok;
        rq[i].n_tokens = 1;
        rq[i].max_tokens = ctx; /* the engine reserves prompt + max_tokens - 1 = ctx tokens (the last one sampled
                                   is never stored) */
        rq[i].n_ctx = ctx;
        rq[i].ignore_eos = 1;
        rq[i].sampling.temp = 0;
        rq[i].cb.on_done = count_done;
        rq[i].cb.user = &ended;
        st = llm_engine_submit(e, &rq[i], &ids[i]);
    }
    llm_cache_stats cs;
    if (!st) st = llm_engine_step(e, NULL);
    if (!st) st = llm_engine_cache_stats(e, cache, &cs);
    if (!st) x->fits = cs.running + ended;
    if (!st && n < want + 1 && x->fits == n) {
        x->fits_limit = n;
        snprintf(x->limit_why, sizeof x->limit_why, "%s", why);
        omni_log(1, "bench: %d sequences of %d tokens admitted: the most one step takes on %s (%s)\n", n, ctx,
                 b->res.device, why);
    }
    if (!st)
        omni_log(2, "bench: the engine reserved %lld bytes for %d running sequences\n", (long long)cs.reserved_bytes,
                 cs.running);
    for (int i = 0; e && i < n; i++)
        if (ids[i] > 0) llm_engine_cancel(e, ids[i]);
    int left = 1;
    for (int k = 0; e && left > 0 && k < 4; k++) llm_engine_step(e, &left);
    llm_engine_free(e);
    free(ids);
    free(rq);
    return st;
}

/* The fits row from the budget arithmetic (x->fits = -1 until engine_fits counts) and the format. */
static omni_status budget_row(bench_run *b, const char *kv, int ctx, kv_format *f, bench_fit *x) {
    int64_t budget = (int64_t)(b->kv_mem_gib * 1073741824.0), seq_bytes = 0, step_bytes = 0;
    omni_status st = kv_format_of(b, kv, f);
    memset(x, 0, sizeof *x);
    snprintf(x->kv, sizeof x->kv, "%s", kv);
    x->ctx = ctx;
    x->kv_mem_gib = b->kv_mem_gib;
    x->fits = -1;
    if (!st) st = budget_fits(b, f, ctx, budget, &seq_bytes, &step_bytes, &x->fits_budget);
    x->seq_kv_mib = seq_bytes / 1048576.0;
    x->reserve_mib = step_bytes / 1048576.0;
    return st;
}

/* ---- the run ---------------------------------------------------------------------------------------------- */

/* A format the device cannot run (OMNI_ERR_UNSUPPORTED, e.g. a quantized cache on a device without its kernels):
 * one line on stderr, *runs = 0; the run goes on with the budget arithmetic only. */
static omni_status unsupported(bench_run *b, const char *kv, omni_status st, int *runs) {
    if (st != OMNI_ERR_UNSUPPORTED) return st;
    omni_log(0, "bench: skip %s on %s (sequences that fit: budget arithmetic only): %s\n", kv, b->res.device,
             omni_last_error());
    *runs = 0;
    return OMNI_OK;
}

/* The fits-count and (points) every point of one format at one context; *runs: the device runs this format
 * (cleared when it turns out not to). */
static omni_status run_context(bench_run *b, const char *kv, int ctx, int points, int *runs) {
    bench_fit x;
    double tf = omni_time_ms();
    kv_format f;
    omni_status st = budget_row(b, kv, ctx, &f, &x);
    if (!st && *runs && x.fits_budget == 0) x.fits = 0; /* not one fits: the engine refuses such requests outright */
    else if (!st && *runs) {
        st = engine_fits(b, &f, ctx, (int64_t)(b->kv_mem_gib * 1073741824.0), x.fits_budget, &x);
        if (st) x.fits = -1;
        st = unsupported(b, kv, st, runs);
    }
    if (st) return st;
    if (x.fits >= 0) {
        omni_log(2, "bench: %s ctx %d: %d sequences fit (budget arithmetic %d) (%.1f s)\n", kv, ctx, x.fits,
                 x.fits_budget, (omni_time_ms() - tf) / 1e3);
        if (x.fits != x.fits_budget && !x.fits_limit)
            omni_log(0, "bench: warning: %s at %d tokens: the engine admitted %d sequences, the budget says %d\n", kv,
                     ctx, x.fits, x.fits_budget);
    }
    if ((st = bench_add_fit(&b->res, &x))) return st;
    for (int n = 0; points && n < b->n_batch && !st && *runs; n++) {
        if (b->intr && *b->intr) return OMNI_OK;
        int batch = b->batch[n];
        double need = (double)batch * x.seq_kv_mib * point_n_ctx(b, batch, ctx) / ctx / 1024;
        if (need > b->kv_mem_gib) {
            omni_log(1, "bench: skip %s batch %d ctx %d: about %.3g GiB of KV > --kv-mem %g\n", kv, batch, ctx, need,
                     b->kv_mem_gib);
            continue;
        }
        bench_point p;
        double t0 = omni_time_ms();
        st = b->fill_above > 0 && ctx > b->fill_above ? measure_filled(b, kv, batch, ctx, &p)
                                                       : measure_point(b, kv, batch, ctx, &p);
        if (st == OMNI_ERR_UNSUPPORTED) return unsupported(b, kv, st, runs);
        if (!st && !(b->intr && *b->intr)) {
            st = bench_add_point(&b->res, &p);
            omni_log(1, "bench: %-5s batch %4d ctx %7d: %9.2f tok/s (p50 %.3f ms, %.0f%% of roofline), prefill %.1f "
                     "tok/s%s, KV %.2f MiB (%.1f s)\n", p.kv, batch, ctx, p.decode_tok_s, p.step_ms_p50, p.roofline_pct,
                     p.prefill_tok_s, isfinite(p.prefill_tok_s) ? "" : " (context filled)", p.kv_mib,
                     (omni_time_ms() - t0) / 1e3);
        }
    }
    return st;
}

/* Every format and context (--fits-kv formats: fits rows only); a format the device cannot run keeps its
 * budget-arithmetic fits rows. */
static omni_status run_points(bench_run *b) {
    int ran = 0;
    omni_status first = OMNI_OK;
    char why[512] = "";
    for (int f = 0; f < b->n_kv + b->n_fit_kv; f++) {
        omni_status st = OMNI_OK;
        int runs = 1, points = f < b->n_kv;
        const char *kv = points ? b->kv[f] : b->fit_kv[f - b->n_kv];
        for (int c = 0; c < b->n_ctx && !st; c++) st = run_context(b, kv, b->ctx[c], points, &runs);
        if (st) { /* the other formats go on (one long run keeps what it can measure); the exit says it failed */
            omni_log(0, "bench: error with %s (going on with the other formats): %s\n", kv, omni_last_error());
            if (!first) first = st, snprintf(why, sizeof why, "%s: %s", kv, omni_last_error());
            continue;
        }
        ran += runs && points;
    }
    if (first) return omni_fail(first, "bench: %s", why);
    return ran ? OMNI_OK : omni_fail(OMNI_ERR_UNSUPPORTED, "bench: no KV format of --kv runs on %s", b->res.device);
}

/* How the points were measured, for the report. */
static void method_text(const bench_run *b, char *buf, size_t cap) {
    const char *w = !b->a->random_config            ? "the model's"
                    : b->device == LLM_DEVICE_CUDA ? "random bf16 of the config, made on the device"
                                                   : "random bf16 of the config (a mapped checkpoint)";
    int n = snprintf(buf, cap, "Each point: B requests of C random prompt tokens through the engine's chunked "
                     "prefill (%d tokens per request and step), then %d warm-up and %d timed greedy decode steps of "
                     "all B sequences together. Weights: %s.", prefill_chunk(b), WARMUP_STEPS, b->steps, w);
    if (b->fill_above > 0 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " Contexts above %d tokens are not prefilled: random K/V are appended "
                 "through the cache's own append path (llm_runner_fill_random; a quantized cache quantizes them) and "
                 "the same decode steps run through llm_runner_step (the engine's step without its bookkeeping, "
                 "< 1%% of a step); their prefill columns are empty.", b->fill_above);
}

static const char *base_name(const char *path) {
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path;
}

static omni_status write_report(const bench_run *b) {
    const omni_args *a = b->a;
    bench_baseline *base = NULL;
    int nb = 0;
    char method[1024];
    omni_status st = a->baseline ? bench_read_baseline(a->baseline, &base, &nb) : OMNI_OK;
    bench_report_info in = {0};
    method_text(b, method, sizeof method);
    in.command = a->command_line;
    in.version = OMNI_VERSION;
    in.device_name = a->device_name;
    in.png = base_name(a->png);
    in.csv = base_name(a->csv);
    in.baseline = base;
    in.n_baseline = nb;
    in.baseline_label = "transformers generate (BF16): what users would run otherwise";
    in.method = method;
    if (!st) st = bench_write_report(a->report, &b->res, &in);
    free(base);
    return st;
}

static omni_status write_outputs(bench_run *b) {
    const omni_args *a = b->a;
    omni_status st = OMNI_OK;
    bench_print_table(stdout, &b->res);
    fflush(stdout);
    if (a->csv) st = bench_write_csv(a->csv, &b->res);
    if (!st && a->png) st = bench_write_png(a->png, &b->res, a->png_w, a->png_h, getenv("OMNI_FONT"));
    if (!st && a->report) st = write_report(b);
    return st;
}

omni_status cmd_bench(const omni_args *a, volatile int *intr) {
    bench_run b;
    memset(&b, 0, sizeof b);
    b.a = a;
    b.intr = intr;
    omni_status st = parse_options(&b);
    if (st) return st;
    if (a->threads > 0) op_set_threads(a->threads);
    b.threads = a->threads > 0 ? a->threads : op_get_threads();
    snprintf(b.res.device, sizeof b.res.device, "%s", llm_device_name(b.device));
    b.res.threads = b.threads;
    st = open_model(&b);
    if (!st) st = measure_bandwidth(&b);
    if (!st) {
        omni_log(1, "bench: %s, %.1f MiB of weights (%.1f MiB read per decode step at batch 1), memory bandwidth "
                 "%.1f GB/s\n", b.res.model, llm_model_weight_bytes(b.model) / 1048576.0,
                 weights_read_mib(b.model, 1), b.res.bw_gb_s);
        st = run_points(&b);
    }
    /* also after Ctrl+C (exit 130) or a failed format: the outputs of what was measured until then */
    if (!st || b.res.n_points + b.res.n_fits > 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", omni_last_error());
        omni_status wst = write_outputs(&b);
        if (st) omni_fail(st, "%s", why); /* the run's error stays the one reported */
        else st = wst;
    }
    bench_results_free(&b.res);
    llm_model_free(b.model);
    return st;
}
