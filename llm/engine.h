/* engine.h - who asks for work: the generation engine. Requests (prompt tokens + embedding spans + positions +
 * sampling + stop conditions + max tokens + the KV cache to use) are batched continuously over one model and one
 * runner (llm/runner.h): requests join and leave between steps, prefill chunks are interleaved with decode tokens
 * under a per-step token budget, and a KV memory budget per cache admits a request only when every page it can
 * ever need is free (nothing is over-committed; a request that can never fit is refused at submit). What a request
 * is promised is the most bytes its sequence holds at once while it decodes to its longest length, the decode steps
 * that flush a window block excepted (kv_budget's promise_bytes; pages of each kind's peak for the pools). What a
 * step holds beyond the promises comes from two shared reserves per cache: a flushing decode step (the flushed
 * block's raw page and its new quant page at once: one quant page more) takes unpromised bytes, of which admission
 * always keeps one flush's worth (kv_step_extra_bytes_of), and waits a step when this step's flushes used them up;
 * a prefill chunk on a non-empty sequence (the second chunk of a long prompt, a conversation turn) holds the old
 * window beside the new one and takes the step reserve (kv_step_extra_bytes_of / kv_step_extra_of, ~R / 32 + 1
 * raw pages, for each of llm_engine_step_chunks chunks), held only while a request that can run such a chunk is
 * admitted; a chunk waits for a later step when the chunks of this step used it up.
 *
 * ---- Tutorial ----
 * 1. Make an engine and at least one cache (a KV format + a byte budget):
 *        llm_engine_params ep = llm_engine_default_params();
 *        ep.runner.max_seqs = 48;  ep.runner.n_threads = 8;  ep.tok = tokenizer;   (tok: text pieces, stop strings)
 *        llm_engine *e;  llm_engine_init(model, &ep, &e);
 *        llm_cache_params cp = llm_cache_default_params();  kv_parse_mode("int2", &cp.fmt);
 *        cp.budget_bytes = 2LL << 30;
 *        int c_int2;  llm_engine_add_cache(e, &cp, &c_int2);
 *    A second cache (e.g. bf16) is added the same way; requests on both run in the same steps over one copy of the
 *    weights (the side-by-side demo, `omni generate --compare`).
 * 2. Submit requests (any thread). Everything a request points to is copied; the call returns its id (>= 1):
 *        llm_request rq = llm_request_default_params();
 *        rq.tokens = ids;  rq.n_tokens = n;  rq.max_tokens = 256;  rq.cache = c_int2;
 *        rq.sampling.temp = 0;                       (greedy)
 *        rq.cb.on_token = print_piece;  rq.cb.on_done = finished;  rq.cb.user = ctx;
 *        int id;  if (llm_engine_submit(e, &rq, &id)) fprintf(stderr, "%s\n", omni_last_error());
 *    Media: tokens are the expanded prompt (one pad id per embedding row), spans carry the embeddings and pos the
 *    3-stream MRoPE positions with rope_delta (app/media.h builds all three from image/audio files).
 * 3. Step. Either from your own loop (the CLI):
 *        int left;  do llm_engine_step(e, &left); while (left > 0);
 *    or on a worker thread (server, demo): pthread_create(..., run_fn, e) where run_fn calls llm_engine_run(e),
 *    which steps while there is work and sleeps otherwise, until llm_engine_stop(e).
 * 4. Callbacks run on the stepping thread, without engine locks held (they may call submit/cancel, not step):
 *        on_token(user, id, token, piece, len)   every generated token with its text (UTF-8, complete characters;
 *                                                 a stop string is never shown); token -1 carries the final text
 *                                                 held back at the end
 *        on_logits(user, id, pos, logits, vocab) when the request asked for logits (see llm_logits_mode)
 *        on_done(user, id, stats)                exactly once per accepted request: finish reason, time to first
 *                                                 token, tokens/s, token counts, KV bytes, error message
 *    After on_done the id is forgotten and its pages are back in the pool.
 * 5. Cancel from any thread: llm_engine_cancel(e, id). The request stops at the start of the next step (so within
 *    one step), its pages are freed and on_done reports LLM_FINISH_CANCELLED.
 * 6. Conversations (omni chat): a sequence kept between requests. llm_engine_conv_new(e, cache, n_ctx, &conv);
 *    each turn is a request with rq.conv = conv whose tokens are only the new turn; positions continue after the
 *    history (including the MRoPE rope_delta of earlier image turns). Every generated token stays in the history
 *    (the final EOS too when keep_eos). One request per conversation at a time. llm_engine_conv_clear forgets
 *    the history, llm_engine_conv_free releases it.
 * 7. Comparisons: rq.logits = LLM_LOGITS_LAST delivers each next-token distribution; a request with
 *    rq.teacher = id of another request is teacher-forced: it feeds that request's sampled tokens instead of its
 *    own (same number of distributions, position by position) - e.g. A on bf16, B on int2 with teacher A, both
 *    with LLM_LOGITS_LAST: KL(A||B) per token. Submit both with llm_engine_submit_n (teacher = -1 refers to the
 *    first request of that call) so that they are admitted together.
 *
 * Threading: submit, submit_n, cancel, conv_*, cache_stats, stop and the stats getters are thread-safe. step and
 * run must be called by one thread at a time (the "stepping thread"); add_cache and cache_line only from the
 * stepping thread or while nothing steps. llm_engine_free: after the stepping thread stopped.
 * Memory: the runner's scratch and the host logits rows are allocated at init, per-request buffers at submit;
 * a steady-state step allocates nothing. */
#ifndef OMNI_LLM_ENGINE_H
#define OMNI_LLM_ENGINE_H

#include <stdint.h>

#include "kvcache/kvcache.h"
#include "llm/model.h"
#include "llm/runner.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llm_engine llm_engine;

typedef enum {
    LLM_FINISH_NONE = 0,
    LLM_FINISH_EOS,       /* an end-of-sequence token of the model (config) */
    LLM_FINISH_STOP,      /* a stop token id or stop string of the request */
    LLM_FINISH_LENGTH,    /* max_tokens generated */
    LLM_FINISH_CONTEXT,   /* the sequence reached its capacity (n_ctx / the conversation's n_ctx) */
    LLM_FINISH_CANCELLED, /* llm_engine_cancel, or its teacher ended without tokens to give */
    LLM_FINISH_ERROR,     /* a runner error (stats.status, stats.error) */
} llm_finish;

const char *llm_finish_name(llm_finish f); /* "eos", "stop", "length", "context", "cancelled", "error" */

typedef enum {
    LLM_LOGITS_NONE = 0,
    LLM_LOGITS_LAST, /* each next-token distribution: after the prompt and after each fed token */
    LLM_LOGITS_ALL,  /* every prompt position too (scoring a text; prefill chunks are then at most
                        llm_engine_params.max_logits_rows tokens) */
} llm_logits_mode;

typedef struct {
    llm_finish finish;
    omni_status status;   /* OMNI_OK unless finish == LLM_FINISH_ERROR */
    char error[256];      /* message of a failed request */
    int n_prompt;         /* prompt tokens evaluated */
    int n_gen;            /* tokens generated (sampled; a teacher-forced request: tokens consumed + 1) */
    int n_decode;         /* decode evaluations (generated tokens fed back) */
    double queue_ms;      /* submit -> admission */
    double ttft_ms;       /* submit -> first generated token (0: none) */
    double prompt_ms;     /* wall time of the steps that evaluated the prompt */
    double decode_ms;     /* wall time of the steps that evaluated generated tokens */
    double tokens_per_s;  /* n_gen over the time from the first to the last token (0 with fewer than 2) */
    int64_t kv_tokens;    /* tokens the sequence held at the end */
    int64_t kv_bytes;     /* bytes of KV pages the sequence held at the end */
} llm_request_stats;

typedef struct {
    void (*on_token)(void *user, int id, int32_t token, const char *piece, int len);
    void (*on_logits)(void *user, int id, int pos, const float *logits, int vocab); /* pos: token position within
                                              the request (0 = first prompt token) whose next token is predicted */
    void (*on_done)(void *user, int id, const llm_request_stats *stats);
    void *user;
} llm_callbacks;

typedef struct {
    const int32_t *tokens;  /* [n_tokens] prompt (expanded: one id per position; pads under spans ignored) */
    int n_tokens;
    const int32_t *pos;     /* NULL (text positions), or [3 * n_tokens] MRoPE positions T, H, W from 0 */
    int rope_delta;         /* with pos: max position + 1 - n_tokens (llm_positions_build) */
    const llm_span *spans;  /* [n_spans] embeddings at prompt positions (start relative to tokens) */
    int n_spans;
    llm_sampler_params sampling;
    int max_tokens;         /* most tokens to generate; -1: until a stop condition or the capacity */
    int n_ctx;              /* capacity of the sequence in tokens (prompt + generated); 0: prompt + max_tokens.
                               Ignored for conversation turns (the conversation's n_ctx applies) */
    int ignore_eos;         /* 1: the model's EOS ids do not stop */
    const int32_t *stop_ids; /* extra stop token ids */
    int n_stop_ids;
    const char *const *stop; /* stop strings (need ep.tok); the text up to the match is delivered, not the match */
    int n_stop;
    int cache;              /* cache index (llm_engine_add_cache) */
    int conv;               /* 0: a one-shot sequence; else a conversation id (llm_engine_conv_new) */
    int keep_eos;           /* conversation turns: append a final EOS / stop token to the history (chat) */
    int teacher;            /* 0: none; > 0: id of a running request; < 0: the (-teacher)-th request of the same
                               llm_engine_submit_n call. Feeds the teacher's tokens, ends with it; no on_token */
    llm_logits_mode logits;
    int prefill_chunk;      /* prompt tokens per step for this request; 0: the engine's */
    llm_callbacks cb;
} llm_request;

/* Defaults: sampling = llm_sampler_default_params() (temperature 0.7; temp 0 is greedy), max_tokens 256,
 * cache 0, no conversation, no teacher, no logits, no callbacks. */
llm_request llm_request_default_params(void);

typedef struct {
    llm_runner_params runner;  /* device, threads, max_seqs (batch), max_tokens (token budget of one step) */
    int prefill_chunk;         /* prompt tokens of one request per step (default 512). A prompt is always split at
                                  multiples of its chunk, whatever else runs, so that a request's results do not
                                  depend on the batch (a quantizing cache attends to earlier chunks quantized);
                                  at most runner.max_tokens - runner.max_seqs + 1 (clamped) */
    int max_logits_rows;       /* host logits rows for LLM_LOGITS_ALL requests per step (default 64) */
    const llm_tokenizer *tok;  /* text pieces and stop strings; NULL: pieces are empty, stop strings refused */
} llm_engine_params;

llm_engine_params llm_engine_default_params(void);

/* The model (and tokenizer) must outlive the engine. Allocates the runner (scratch) and the logits buffer. */
omni_status llm_engine_init(const llm_model *m, const llm_engine_params *p, llm_engine **out);
/* Cancels what is left (no callbacks), frees caches, runner and requests. NULL is a no-op. */
void llm_engine_free(llm_engine *e);

typedef struct {
    kv_format fmt;               /* default for all layers (kv_parse_mode) */
    const kv_format *layer_fmt;  /* optional [n_layers] per-layer formats (copied) */
    int64_t budget_bytes;        /* most bytes of KV pages in use at any time; 0: room for max_seqs sequences of
                                    ctx_tokens each (and the step reserve) */
    int ctx_tokens;              /* with budget_bytes == 0 (default 4096) */
    int max_seqs;                /* sequences at once in this cache; 0: the runner's max_seqs */
} llm_cache_params;

/* bf16, window 128, budget 0 with ctx_tokens 4096, max_seqs 0. */
llm_cache_params llm_cache_default_params(void);
/* Prefill chunks of prefill_chunk tokens one step holds (runner.max_tokens / prefill_chunk, at least 1): the step
 * reserve of each quantizing cache is kv_step_extra_of raw pages per chunk. */
int llm_engine_step_chunks(const llm_engine_params *p);

/* A KV cache on the engine's device; *cache is its index (0, 1, ...). At most LLM_ENGINE_MAX_CACHES. */
#define LLM_ENGINE_MAX_CACHES 8
omni_status llm_engine_add_cache(llm_engine *e, const llm_cache_params *p, int *cache);

/* Submit a request (copied). Refused with a message (nothing else happens) when invalid, when it can never fit
 * its cache's budget, or for a busy conversation; otherwise *id >= 1 and on_done will be called once. */
omni_status llm_engine_submit(llm_engine *e, const llm_request *r, int *id);
/* Several requests at once (all or none; admitted in order, together when they fit): ids[n]. */
omni_status llm_engine_submit_n(llm_engine *e, const llm_request *r, int n, int *ids);
/* Ask a request to stop (finish CANCELLED at the next step). OMNI_ERR_USAGE for an unknown or finished id. */
omni_status llm_engine_cancel(llm_engine *e, int id);

/* One step: admits waiting requests, runs one batch (decode tokens first, then prefill chunks), delivers
 * callbacks, frees finished requests. *left (may be NULL): requests queued or running afterwards. Runner
 * failures end the requests of that step with LLM_FINISH_ERROR and the engine goes on (returns OMNI_OK). */
omni_status llm_engine_step(llm_engine *e, int *left);
/* Step until llm_engine_stop (sleeping while there is nothing to do). Returns after the step in flight. */
omni_status llm_engine_run(llm_engine *e);
void llm_engine_stop(llm_engine *e);

/* Conversations: a sequence of `cache` kept between requests, at most n_ctx tokens. */
omni_status llm_engine_conv_new(llm_engine *e, int cache, int n_ctx, int *conv);
omni_status llm_engine_conv_clear(llm_engine *e, int conv); /* OMNI_ERR_USAGE while a turn runs */
void llm_engine_conv_free(llm_engine *e, int conv);         /* a running turn is cancelled first */
int64_t llm_engine_conv_len(llm_engine *e, int conv);       /* tokens held (-1: unknown conversation) */

typedef struct {
    int64_t budget_bytes;   /* the cache's budget */
    int64_t reserved_bytes; /* bytes promised to admitted requests and conversations */
    int64_t step_reserve_bytes; /* bytes kept unpromised now: the prefill step reserve (while a request holding it
                                   is admitted) and one flushing decode step's excess */
    int64_t peak_bytes;     /* the most bytes of pages held during any step so far, steps in flight included (the
                               allocator's arithmetic): never above budget_bytes */
    int64_t used_bytes;     /* bytes of pages in use (after the last step) */
    int64_t used_tokens;    /* tokens the cache's sequences hold (after the last step): with used_bytes, the
                               KV-memory-vs-tokens curve of a cache (the demo's chart) */
    int64_t raw_pages, quant_pages, raw_pages_free, quant_pages_free;
    int n_seqs, max_seqs;
    int waiting, running;   /* requests queued for / running on this cache */
    char format[32];        /* kv_format_name */
} llm_cache_stats;

/* Snapshot taken after the last step (thread-safe). */
omni_status llm_engine_cache_stats(llm_engine *e, int cache, llm_cache_stats *out);
/* kv_format_line of the cache (the llama.cpp-shaped KV line); stepping thread only. */
void llm_engine_cache_line(llm_engine *e, int cache, char *buf, int cap);
/* The runner (e.g. its params); stepping thread only for anything but reading params. */
llm_runner *llm_engine_runner(llm_engine *e);

#ifdef __cplusplus
}
#endif
#endif
