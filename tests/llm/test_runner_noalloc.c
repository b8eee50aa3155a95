/* test_runner_noalloc.c - llm_runner_step and llm_engine_step allocate nothing: prefill chunks of several
 * sequences, batched decode with 8 and with 48 sequences over two caches (bf16 and int2) with sampling and
 * logits, and an engine decoding 8 requests. malloc/calloc/realloc/aligned_alloc/posix_memalign of the test and
 * the static omni libraries are wrapped at link time (-Wl,--wrap) and counted while the steps run (as
 * test_kv_noalloc does); the counter is shown to work on the init calls. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llm/engine.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
static int counting, n_alloc;
void *__wrap_malloc(size_t n) { n_alloc += counting; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { n_alloc += counting; return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { n_alloc += counting; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { n_alloc += counting; return __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { n_alloc += counting; return __real_posix_memalign(p, a, n); }

#define MODEL OMNI_FIXTURES "/text/qvl-h128-hd64-gqa2-tied"
#define NS 48

static kv_cache *make_cache(llm_runner *r, const llm_model *m, const char *mode) {
    kv_params p = llm_model_kv_params(m);
    kv_parse_mode(mode, &p.fmt);
    p.fmt.window = 32;
    p.max_tokens = 48 * 400;
    p.max_seqs = NS;
    kv_cache *kv = NULL;
    CHECK(llm_runner_cache_init(r, &p, &kv) == OMNI_OK, "%s: %s", mode, omni_last_error());
    return kv;
}

static void test_runner(const llm_model *m) {
    int V = llm_model_config(m)->vocab;
    llm_runner_params rp = llm_runner_default_params();
    rp.max_seqs = NS;
    rp.max_tokens = 256;
    llm_runner *r = NULL;
    counting = 1, n_alloc = 0;
    CHECK(llm_runner_init(m, &rp, &r) == OMNI_OK, "%s", omni_last_error());
    counting = 0;
    CHECK(r && n_alloc > 0, "llm_runner_init must allocate (%d): the counter works", n_alloc);
    if (!r) return;
    kv_cache *kv[2] = {make_cache(r, m, "bf16"), make_cache(r, m, "int2")};
    llm_sampler *smp[NS];
    int seq[NS];
    int32_t prompt[NS][60], tok[NS];
    float *logits = malloc(sizeof(float) * 4 * V);
    llm_sampler_params sp = llm_sampler_default_params();
    for (int i = 0; i < NS; i++) {
        kv_seq_add(kv[i % 2], &seq[i]);
        sp.temp = i % 3 ? 0.f : 0.8f; /* greedy and sampled */
        sp.seed = (uint64_t)i;
        llm_sampler_init(&sp, V, &smp[i]);
        for (int k = 0; k < 60; k++) prompt[i][k] = (i * 131 + k * 17) % 3000;
    }
    llm_batch_entry b[NS];
    counting = 1, n_alloc = 0;
    for (int i0 = 0; i0 < NS; i0 += 4) { /* prefill chunks: 4 sequences x 60 tokens per step */
        for (int j = 0; j < 4; j++) {
            int i = i0 + j;
            b[j] = (llm_batch_entry){kv[i % 2], seq[i], {60, prompt[i], NULL, 0, NULL}, j == 0 ? logits : NULL, 0,
                                     smp[i], -1, 0};
        }
        CHECK(llm_runner_step(r, 4, b) == OMNI_OK, "prefill: %s", omni_last_error());
        for (int j = 0; j < 4; j++) tok[i0 + j] = b[j].token;
    }
    int prefill_allocs = n_alloc;
    counting = 0;
    int saved = omp_get_max_threads(); /* a runner's thread count is its own: the caller's setting is restored */
    omp_set_num_threads(rp.n_threads + 2);
    b[0] = (llm_batch_entry){kv[0], seq[0], {1, &tok[0], NULL, 0, NULL}, NULL, 0, smp[0], -1, 0};
    CHECK(llm_runner_step(r, 1, b) == OMNI_OK && omp_get_max_threads() == rp.n_threads + 2 &&
              llm_runner_get_params(r)->n_threads >= 1,
          "caller's OpenMP threads changed by a step: %d", omp_get_max_threads());
    tok[0] = b[0].token;
    omp_set_num_threads(saved);
    counting = 1;
    n_alloc = 0;
    for (int s = 0; s < 5; s++) { /* decode, 8 sequences */
        for (int i = 0; i < 8; i++)
            b[i] = (llm_batch_entry){kv[i % 2], seq[i], {1, &tok[i], NULL, 0, NULL}, i < 4 ? logits + i * V : NULL, 0,
                                     smp[i], -1, 0};
        CHECK(llm_runner_step(r, 8, b) == OMNI_OK, "decode 8: %s", omni_last_error());
        for (int i = 0; i < 8; i++) tok[i] = b[i].token;
    }
    int dec8_allocs = n_alloc;
    n_alloc = 0;
    for (int s = 0; s < 5; s++) { /* decode, 48 sequences, both caches */
        for (int i = 0; i < NS; i++)
            b[i] = (llm_batch_entry){kv[i % 2], seq[i], {1, &tok[i], NULL, 0, NULL}, i == 7 ? logits : NULL, 0, smp[i],
                                     -1, 0};
        CHECK(llm_runner_step(r, NS, b) == OMNI_OK, "decode 48: %s", omni_last_error());
        for (int i = 0; i < NS; i++) tok[i] = b[i].token;
    }
    int dec48_allocs = n_alloc;
    counting = 0;
    printf("allocations in steps: prefill %d, decode x8 %d, decode x48 %d\n", prefill_allocs, dec8_allocs, dec48_allocs);
    CHECK(prefill_allocs == 0 && dec8_allocs == 0 && dec48_allocs == 0, "a step allocated");
    for (int i = 0; i < NS; i++) llm_sampler_free(smp[i]);
    for (int c = 0; c < 2; c++) llm_runner_cache_free(r, kv[c]);
    free(logits);
    llm_runner_free(r);
}

static void on_done(void *user, int id, const llm_request_stats *s) {
    (void)id, (void)s;
    ++*(int *)user;
}

static void test_engine(const llm_model *m, const llm_tokenizer *tok) {
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = 8;
    ep.runner.max_tokens = 128;
    ep.tok = tok;
    llm_engine *e = NULL;
    CHECK(llm_engine_init(m, &ep, &e) == OMNI_OK, "%s", omni_last_error());
    llm_cache_params cp = llm_cache_default_params();
    int c[2], done = 0, ids[8], left = 1;
    llm_engine_add_cache(e, &cp, &c[0]);
    kv_parse_mode("int2", &cp.fmt);
    llm_engine_add_cache(e, &cp, &c[1]);
    int32_t prompt[8][30];
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 30; k++) prompt[i][k] = (i * 71 + k * 5) % 3000;
        llm_request r = llm_request_default_params();
        r.tokens = prompt[i], r.n_tokens = 30, r.max_tokens = 40, r.cache = c[i % 2], r.ignore_eos = 1;
        r.cb.on_done = on_done, r.cb.user = &done;
        r.logits = i == 3 ? LLM_LOGITS_LAST : LLM_LOGITS_NONE;
        llm_engine_submit(e, &r, &ids[i]);
    }
    llm_engine_step(e, &left); /* admission + prefill */
    counting = 1, n_alloc = 0;
    int steps = 0;
    while (left) llm_engine_step(e, &left), steps++;
    counting = 0;
    printf("engine: %d allocations in %d decode steps of 8 requests\n", n_alloc, steps);
    CHECK(n_alloc == 0 && done == 8 && steps >= 39, "engine steps allocated %d times (%d done, %d steps)", n_alloc, done,
          steps);
    llm_engine_free(e);
}

int main(void) {
    llm_model *m = NULL;
    llm_tokenizer *tok = NULL;
    CHECK(llm_model_load(MODEL, &m) == OMNI_OK, "%s", omni_last_error());
    CHECK(llm_tokenizer_load(MODEL "/tokenizer.json", &tok) == OMNI_OK, "%s", omni_last_error());
    if (m && tok) {
        test_runner(m);
        test_engine(m, tok);
    }
    llm_tokenizer_free(tok);
    llm_model_free(m);
    return check_exit();
}
