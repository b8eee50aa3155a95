/* runner_ops.c - the CUDA device behind llm_runner (llm/runner.h): the ops table runner.c dispatches to. The
 * runner's impl is an llm_cuda (llm/cuda/llm_cuda.h) made from the model's config and checkpoint, or with random
 * weights made on the device for a model of llm_model_init_random (its seed). */
#include "llm/cuda/llm_cuda.h"
#include "llm/runner_impl.h"

static omni_status cuda_init(llm_runner *r) {
    llm_cuda_params p = llm_cuda_default_params();
    p.device = r->p.device_index, p.max_seqs = r->p.max_seqs, p.max_tokens = r->p.max_tokens;
    llm_cuda *c = NULL;
    uint64_t seed;
    omni_status st = llm_model_is_random(r->model, &seed)
                         ? llm_cuda_init_random(llm_model_config(r->model), seed, &p, &c)
                         : llm_cuda_init(llm_model_config(r->model), llm_model_ckpt(r->model), &p, &c);
    r->impl = c;
    return st;
}

static void cuda_free(llm_runner *r) {
    llm_cuda_free((llm_cuda *)r->impl);
    r->impl = NULL;
}

static omni_status cuda_cache_init(llm_runner *r, const kv_params *p, kv_cache **out) {
    return llm_cuda_cache_init((llm_cuda *)r->impl, p, out);
}

static void cuda_cache_free(llm_runner *r, kv_cache *kv) { llm_cuda_cache_free((llm_cuda *)r->impl, kv); }

static omni_status cuda_step(llm_runner *r, int n, llm_batch_entry *batch, int T) {
    (void)T;
    return llm_cuda_step((llm_cuda *)r->impl, n, batch);
}

static size_t cuda_scratch_bytes(const llm_runner *r) { return llm_cuda_workspace_bytes((const llm_cuda *)r->impl); }

static omni_status cuda_fill_random(llm_runner *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed) {
    return llm_cuda_fill_random((llm_cuda *)r->impl, kv, seq, n_tokens, seed);
}

const llm_runner_ops llm_runner_cuda_ops = {"cuda", cuda_init, cuda_free, cuda_cache_init, cuda_cache_free, cuda_step,
                                            cuda_scratch_bytes, cuda_fill_random};
