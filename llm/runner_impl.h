/* runner_impl.h - what a device runner implements (private to llm/ and the device runners, not a public API).
 *
 * runner.c owns struct llm_runner, validates every batch (sizes, ids, spans, duplicate sequences) before calling
 * the device's step, and dispatches through the ops table of the requested device. A device runner keeps its own
 * state behind `impl` (scratch, device weights, streams, graphs). To add a device: write an llm_runner_ops with
 * its functions, declare it here and return it from runner_ops_for() in runner.c. */
#ifndef OMNI_LLM_RUNNER_IMPL_H
#define OMNI_LLM_RUNNER_IMPL_H

#include "llm/runner.h"

typedef struct {
    const char *name;
    /* Allocate r->impl (all scratch); r->model and r->p (n_threads resolved) are set. */
    omni_status (*init)(llm_runner *r);
    void (*free)(llm_runner *r); /* frees r->impl */
    /* p already has max_chunk = r->p.max_tokens and the model's sizes. */
    omni_status (*cache_init)(llm_runner *r, const kv_params *p, kv_cache **out);
    void (*cache_free)(llm_runner *r, kv_cache *kv);
    /* The batch is valid (runner.c checked it); total tokens T = sum of n_tokens <= max_tokens. */
    omni_status (*step)(llm_runner *r, int n, llm_batch_entry *batch, int T);
    size_t (*scratch_bytes)(const llm_runner *r);
    /* llm_runner_fill_random (seq is in use, n_tokens >= 0) */
    omni_status (*fill_random)(llm_runner *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed);
} llm_runner_ops;

struct llm_runner {
    const llm_runner_ops *ops;
    const llm_model *model;
    llm_runner_params p;
    void *impl;
};

extern const llm_runner_ops llm_runner_cpu_ops;
#ifdef OMNI_HAVE_CUDA_RUNNER
extern const llm_runner_ops llm_runner_cuda_ops; /* llm/cuda (CUDA runner issue) */
#endif

#endif
