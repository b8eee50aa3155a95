/* engine_step.c - decode step time of the CPU runner and of the engine with 1, 8 and 48 sequences, and the
 * engine's overhead per step against calling the batched forward (llm_runner_step) directly.
 *
 *     build/bench_engine_step [MODEL_DIR] [STEPS] [THREADS]      (default: the largest text fixture, 200, 1)
 *
 * Both paths run the same work: B sequences with 64-token prompts on a bf16 cache, then STEPS greedy decode steps
 * (sampling in the runner in both). The runner path is a plain loop over llm_runner_step; the engine path submits
 * B requests and calls llm_engine_step (scheduling, positions, callbacks with text pieces, stop checks, stats).
 * Timed in blocks of 20 steps alternating between the two paths (each has its own runner and cache, same sizes)
 * so that machine load hits both alike; reported: median step time of each path, the overhead
 * (engine - runner) / runner of the medians, and the overhead within the same steps: the engine steps' wall time
 * against the runner time inside them (the requests' decode_ms), which machine noise cannot skew. The tokens of
 * both paths are checked to be identical before a row is printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/engine.h"

#define PROMPT 64
#define BLOCK 20

typedef struct {
    int32_t *toks; /* [steps + 1] */
    int steps, n_tok;
    double decode_ms; /* the runner's time inside the engine's decode steps (request stats) */
} sink;

static void on_token(void *user, int id, int32_t tok, const char *p, int len) {
    sink *s = user;
    (void)id, (void)p, (void)len;
    if (tok >= 0 && s->n_tok <= s->steps) s->toks[s->n_tok++] = tok;
}

static void on_done(void *user, int id, const llm_request_stats *st) {
    (void)id;
    ((sink *)user)->decode_ms = st->decode_ms;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_d);
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

static int run(const llm_model *m, int B, int steps, int threads) {
    int V = llm_model_config(m)->vocab;
    llm_runner_params rp = llm_runner_default_params();
    rp.max_seqs = B;
    rp.max_tokens = B * PROMPT;
    rp.n_threads = threads;
    /* the runner path */
    llm_runner *r = NULL;
    if (llm_runner_init(m, &rp, &r)) return fprintf(stderr, "runner: %s\n", omni_last_error()), 1;
    kv_params kp = llm_model_kv_params(m);
    kv_parse_mode("bf16", &kp.fmt);
    kp.max_tokens = (int64_t)B * (PROMPT + steps + 2);
    kp.max_seqs = B;
    kv_cache *kv = NULL;
    if (llm_runner_cache_init(r, &kp, &kv)) return fprintf(stderr, "cache: %s\n", omni_last_error()), 1;
    int32_t *prompt = malloc(sizeof(int32_t) * B * PROMPT), *cur = malloc(sizeof(int32_t) * B);
    int32_t *rt = malloc(sizeof(int32_t) * B * (steps + 1));
    int *seq = malloc(sizeof(int) * B);
    llm_sampler **smp = malloc(sizeof *smp * B);
    llm_batch_entry *b = calloc((size_t)B, sizeof *b);
    llm_sampler_params sp = llm_sampler_default_params();
    sp.temp = 0;
    for (int i = 0; i < B; i++) {
        for (int k = 0; k < PROMPT; k++) prompt[i * PROMPT + k] = (i * 193 + k * 29) % 3000;
        kv_seq_add(kv, &seq[i]);
        llm_sampler_init(&sp, V, &smp[i]);
        b[i] = (llm_batch_entry){kv, seq[i], {PROMPT, prompt + i * PROMPT, NULL, 0, NULL}, NULL, 0, smp[i], -1, 0};
    }
    llm_runner_step(r, B, b);
    for (int i = 0; i < B; i++) rt[i * (steps + 1)] = cur[i] = b[i].token;
    /* the engine path */
    llm_engine_params ep = llm_engine_default_params();
    ep.runner = rp;
    ep.prefill_chunk = PROMPT;
    llm_engine *e = NULL;
    if (llm_engine_init(m, &ep, &e)) return fprintf(stderr, "engine: %s\n", omni_last_error()), 1;
    llm_cache_params cp = llm_cache_default_params();
    cp.ctx_tokens = PROMPT + steps + 2;
    cp.max_seqs = B;
    int c, left;
    llm_engine_add_cache(e, &cp, &c);
    sink *sk = calloc((size_t)B, sizeof *sk);
    for (int i = 0; i < B; i++) {
        sk[i].toks = malloc(sizeof(int32_t) * (steps + 1));
        sk[i].steps = steps;
        llm_request q = llm_request_default_params();
        q.tokens = prompt + i * PROMPT, q.n_tokens = PROMPT, q.max_tokens = steps + 1, q.cache = c;
        q.sampling = sp, q.ignore_eos = 1;
        q.cb = (llm_callbacks){on_token, NULL, on_done, &sk[i]};
        int id;
        llm_engine_submit(e, &q, &id);
    }
    llm_engine_step(e, &left); /* admission + prefill */
    double *tr = malloc(sizeof(double) * steps), *te = malloc(sizeof(double) * steps);
    for (int s0 = 0; s0 < steps; s0 += BLOCK) {
        int s1 = s0 + BLOCK < steps ? s0 + BLOCK : steps;
        for (int s = s0; s < s1; s++) {
            for (int i = 0; i < B; i++) b[i].in = (llm_input){1, &cur[i], NULL, 0, NULL};
            double t0 = omni_time_ms();
            llm_runner_step(r, B, b);
            tr[s] = omni_time_ms() - t0;
            for (int i = 0; i < B; i++) rt[i * (steps + 1) + s + 1] = cur[i] = b[i].token;
        }
        for (int s = s0; s < s1; s++) {
            double t0 = omni_time_ms();
            llm_engine_step(e, &left);
            te[s] = omni_time_ms() - t0;
        }
    }
    int same = 1;
    for (int i = 0; i < B; i++)
        same &= sk[i].n_tok == steps + 1 && !memcmp(sk[i].toks, rt + i * (steps + 1), sizeof(int32_t) * (steps + 1));
    double sum_e = 0;
    for (int s = 0; s < steps; s++) sum_e += te[s];
    double mr = median(tr, steps), me = median(te, steps), inside = 100.0 * (sum_e - sk[0].decode_ms) / sk[0].decode_ms;
    if (!same) fprintf(stderr, "B=%d: the engine's tokens differ from the runner's\n", B);
    else
        printf("| %4d | %8.3f | %8.3f | %+6.2f%% | %+6.2f%% | %8.0f |\n", B, mr, me, 100.0 * (me - mr) / mr, inside,
               B * 1e3 / me);
    llm_engine_free(e);
    for (int i = 0; i < B; i++) llm_sampler_free(smp[i]), free(sk[i].toks);
    llm_runner_cache_free(r, kv);
    llm_runner_free(r);
    free(prompt), free(cur), free(rt), free(seq), free(smp), free(b), free(sk), free(tr), free(te);
    return !same;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : OMNI_FIXTURES "/text/qvl-h128-hd64-gqa2-tied";
    int steps = argc > 2 ? atoi(argv[2]) : 200, threads = argc > 3 ? atoi(argv[3]) : 1;
    llm_model *m = NULL;
    if (llm_model_load(dir, &m)) return fprintf(stderr, "%s\n", omni_last_error()), 1;
    printf("%s, %d decode steps after 64-token prompts, bf16 cache, %d thread(s)\n", dir, steps, threads);
    printf("| seqs | runner ms/step | engine ms/step | overhead (medians) | overhead (same steps) | tokens/s |\n"
           "|---|---|---|---|---|---|\n");
    int bad = 0;
    int sizes[3] = {1, 8, 48};
    for (int i = 0; i < 3; i++) bad |= run(m, sizes[i], steps, threads);
    llm_model_free(m);
    return bad;
}
