/* runner.h - how a decoder step RUNS on one device: llm_runner_step() evaluates one mixed prefill/decode step for
 * a batch of sequences (of one or several KV caches) over one immutable llm_model.
 *
 * Roles (DESIGN.md §3): llm_model = weights + config (immutable, shared); llm_runner = one per device: its
 * scratch (sized once at init from max_seqs and max_tokens), its thread count, later device weights, streams and
 * graphs, and the KV caches it creates; llm_engine (engine.h) = requests, scheduling, sampling policy, callbacks.
 *
 * A step: entry i feeds in[i].n_tokens tokens of sequence `seq` of cache `kv` (a prefill chunk, or one decode
 * token). Each new token attends to its sequence's stored history plus the chunk (causal); afterwards the chunk
 * is part of the sequence. The GEMMs see the rows of all entries at once; attention runs per cache (entries are
 * grouped by cache inside the step), so a BF16 cache and an INT2 cache over the same weights step together.
 * Per entry the caller may ask for
 *   - logits:  the last position's logits copied to `logits` ([vocab] host floats), or with logits_all every
 *              position's ([n_tokens, vocab]);
 *   - a token: `sampler` != NULL: the runner samples the next token from the last position into `token`
 *              (CPU: llm_sampler_sample; a device runner samples on the device: it reads the sampler's params with
 *              llm_sampler_get_params and draws its one uniform per sampled token with llm_sampler_uniform, so the
 *              host RNG stream stays the same on every device).
 * Logits leave the device only for entries that ask for them.
 *
 * Usage:
 *     llm_runner_params rp = llm_runner_default_params();
 *     rp.max_seqs = 48; rp.max_tokens = 512; rp.n_threads = 8;
 *     llm_runner *r;  llm_runner_init(model, &rp, &r);
 *     kv_params kp = llm_model_kv_params(model);  kv_parse_mode("int2", &kp.fmt);  kp.max_tokens = ...;
 *     kv_cache *kv;   llm_runner_cache_init(r, &kp, &kv);   kv_seq_add(kv, &seq);
 *     llm_batch_entry b[2] = {{.kv = kv, .seq = seq, .in = {n, ids, NULL, 0, NULL}, .sampler = s}, ...};
 *     llm_runner_step(r, 2, b);          (b[0].token is the next token of that sequence)
 *     llm_runner_cache_free(r, kv);  llm_runner_free(r);
 *
 * Rules: at most max_seqs entries and max_tokens tokens (summed) per step; a (kv, seq) pair at most once per
 * step; each entry has >= 1 token; the tokens of one cache in one step must fit that cache's max_chunk (caches
 * made by llm_runner_cache_init get max_chunk = max_tokens). A step allocates nothing (CPU: scratch, op_linear
 * tiles and MoE scratch made at init; the KV caches never allocate in a step either).
 * Errors: bad entries are refused before any work (OMNI_ERR_USAGE, nothing changed). A failure inside the step
 * (a cache out of pages) returns its status; the sequences of that step may then hold an unfinished step: clear
 * or remove them (kv_seq_clear / kv_seq_remove) before using them again.
 * Threads: a runner is used by one thread at a time (any thread). Its thread count applies to its own work only
 * (CPU: the OpenMP thread count of the calling thread is set for the step and restored afterwards); no
 * library-wide state is touched. Several runners may share one model and run at the same time.
 *
 * Plugging in a device (CUDA): runner.c dispatches through an ops table (llm/runner_impl.h): init, free,
 * cache_init, cache_free, step. A device runner fills that table; validation of the batch is shared.
 * The kv_cache handle is the cache's bookkeeping (page allocator, tables, lengths, budget); on a device the page
 * bytes may live in device memory (the runner reserves pages with the host bookkeeping and keeps the data on the
 * device). Callers of a runner (the engine) only use kv_seq_add/remove/clear/len, kv_get_usage, kv_seq_budget,
 * kv_format_line and kv_layer_format on it, never kv_forward. */
#ifndef OMNI_LLM_RUNNER_H
#define OMNI_LLM_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/kvcache.h"
#include "llm/model.h"
#include "llm/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LLM_DEVICE_CPU = 0, LLM_DEVICE_CUDA = 1 } llm_device;

typedef struct {
    llm_device device; /* default LLM_DEVICE_CPU */
    int device_index;  /* CUDA device ordinal (default 0); ignored on the CPU */
    int n_threads;     /* CPU threads of this runner's steps; <= 0: the calling thread's OpenMP default at init */
    int max_seqs;      /* most entries in one step (default 64, at most LLM_RUNNER_MAX_SEQS) */
    int max_tokens;    /* most tokens summed over one step's entries (default 512) */
} llm_runner_params;

#define LLM_RUNNER_MAX_SEQS 1024

/* One sequence's part of a step. Inputs: kv, seq, in, logits, logits_all, sampler. Output: token. */
typedef struct {
    kv_cache *kv;         /* the sequence's cache (made by llm_runner_cache_init of this runner) */
    int seq;              /* sequence id in kv */
    llm_input in;         /* this step's tokens, positions (NULL: kv_seq_len + i on all streams) and spans */
    float *logits;        /* NULL, or host [vocab] for the last position (with logits_all: [in.n_tokens, vocab]) */
    int logits_all;       /* 1: logits of every position of the chunk (logits must be set) */
    llm_sampler *sampler; /* NULL, or sample the next token from the last position into `token` */
    int32_t token;        /* out: the sampled token (-1 when sampler is NULL) */
    int nonfinite;        /* out: 1 when the logits this entry delivered or sampled from hold NaN/Inf (corrupt
                             weights or config, overflow): the token is meaningless and the request must fail */
} llm_batch_entry;

typedef struct llm_runner llm_runner;

/* CPU, device 0, threads from the caller's OpenMP default, 64 sequences, 512 tokens per step. */
llm_runner_params llm_runner_default_params(void);

/* Make a runner for `m` (the model must outlive it). Allocates all scratch now. Errors: OMNI_ERR_USAGE for bad
 * params, OMNI_ERR_UNSUPPORTED for a device this build lacks, OMNI_ERR_NOMEM. */
omni_status llm_runner_init(const llm_model *m, const llm_runner_params *p, llm_runner **out);
void llm_runner_free(llm_runner *r); /* NULL is a no-op; caches made by the runner must be freed before */

const llm_runner_params *llm_runner_get_params(const llm_runner *r); /* n_threads resolved (>= 1) */
const llm_model *llm_runner_model(const llm_runner *r);
size_t llm_runner_scratch_bytes(const llm_runner *r); /* bytes of step scratch held by the runner */

/* A KV cache on this runner's device. p is as for kv_init except max_chunk, which the runner sets to its
 * max_tokens; layers/heads/head_dim must match the model (llm_model_kv_params). Free with llm_runner_cache_free. */
omni_status llm_runner_cache_init(llm_runner *r, const kv_params *p, kv_cache **out);
void llm_runner_cache_free(llm_runner *r, kv_cache *kv); /* NULL kv is a no-op */

/* One step for n entries (see the rules above). Entries may belong to different caches of this runner. */
omni_status llm_runner_step(llm_runner *r, int n, llm_batch_entry *batch);

/* Benchmarks: append n_tokens positions of random K/V (values ~ N(0,1)-like, not what the model would compute) to
 * sequence `seq` of a cache of this runner through the cache's own append path (a quantized cache quantizes them
 * as after a prefill): a long context without the compute of its prefill. CPU: kv_forward per layer in chunks of
 * max_tokens (its attention is computed and discarded); CUDA: llm_cuda_fill_random. OMNI_ERR_USAGE for a bad
 * sequence or count. */
omni_status llm_runner_fill_random(llm_runner *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed);

/* "cpu" / "cuda"; parse accepts the same names (OMNI_ERR_USAGE otherwise). */
const char *llm_device_name(llm_device d);
omni_status llm_device_parse(const char *name, llm_device *out);
/* The most sequences one step of a runner on device d takes for model m: LLM_RUNNER_MAX_SEQS, or fewer where the
 * device's kernels take fewer (the CUDA attention: KVC_MAX_SEQS per call at head_dim 64 and 128). *why (may be
 * NULL) gets what sets the limit, e.g. "the sequence limit of the CUDA attention" (static text). */
int llm_runner_max_seqs(const llm_model *m, llm_device d, const char **why);

#ifdef __cplusplus
}
#endif
#endif
