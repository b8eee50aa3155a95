/* test_runner_threads.c - one llm_model shared by runners on several threads at once: each thread has its own
 * runner (its own thread count, 1 or 2) and cache (bf16 or int2) and generates greedily; the tokens equal those of
 * the same runs done one after the other on the main thread, and the main thread's OpenMP setting is untouched.
 * (The model is immutable after load; runners hold all mutable state.) */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "llm/runner.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd64-gqa4-untied-sharded"
#define NT 4
#define STEPS 24

typedef struct {
    const llm_model *m;
    int k;             /* which job: mode and prompt */
    int32_t toks[STEPS];
    omni_status st;
} job;

static void *run(void *arg) {
    job *j = arg;
    const llm_config *c = llm_model_config(j->m);
    llm_runner_params rp = llm_runner_default_params();
    rp.max_seqs = 1, rp.max_tokens = 64, rp.n_threads = 1 + j->k % 2;
    llm_runner *r = NULL;
    kv_cache *kv = NULL;
    llm_sampler *s = NULL;
    llm_sampler_params sp = llm_sampler_default_params();
    sp.temp = 0;
    kv_params kp = llm_model_kv_params(j->m);
    kv_parse_mode(j->k < 2 ? "bf16" : "int2", &kp.fmt);
    kp.fmt.window = 0;
    kp.max_tokens = 128;
    int seq = 0;
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (i * 31 + j->k * 7) % 3000;
    if ((j->st = llm_runner_init(j->m, &rp, &r)) || (j->st = llm_runner_cache_init(r, &kp, &kv)) ||
        (j->st = kv_seq_add(kv, &seq)) || (j->st = llm_sampler_init(&sp, c->vocab, &s)))
        goto out;
    llm_batch_entry b = {kv, seq, {40, prompt, NULL, 0, NULL}, NULL, 0, s, -1, 0};
    for (int i = 0; i < STEPS && !j->st; i++) {
        j->st = llm_runner_step(r, 1, &b);
        j->toks[i] = b.token;
        b.in = (llm_input){1, &j->toks[i], NULL, 0, NULL};
    }
out:
    llm_sampler_free(s);
    llm_runner_cache_free(r, kv);
    llm_runner_free(r);
    return NULL;
}

int main(void) {
    llm_model *m = NULL;
    CHECK(llm_model_load(MODEL, &m) == OMNI_OK, "%s", omni_last_error());
    if (!m) return check_exit();
    job seqj[NT], par[NT];
    for (int k = 0; k < NT; k++) {
        seqj[k] = (job){m, k, {0}, OMNI_OK};
        run(&seqj[k]);
        CHECK(seqj[k].st == OMNI_OK, "job %d: %s", k, omni_last_error());
    }
    omp_set_num_threads(3);
    pthread_t th[NT];
    for (int k = 0; k < NT; k++) {
        par[k] = (job){m, k, {0}, OMNI_OK};
        pthread_create(&th[k], NULL, run, &par[k]);
    }
    for (int k = 0; k < NT; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < NT; k++)
        CHECK(par[k].st == OMNI_OK && !memcmp(par[k].toks, seqj[k].toks, sizeof par[k].toks),
              "job %d on its own thread differs from the sequential run", k);
    CHECK(omp_get_max_threads() == 3, "the main thread's OpenMP setting changed: %d", omp_get_max_threads());
    llm_model_free(m);
    return check_exit();
}
