/* session.h - what every CLI command shares: model + tokenizer + media encoder + one llm_engine stepped on the
 * command's own thread, the main KV cache (--kv and friends) with a conversation in it, turns streamed to stdout,
 * and the llama.cpp-shaped perf block. The commands are thin clients of the engine (llm/engine.h). */
#ifndef OMNI_APP_SESSION_H
#define OMNI_APP_SESSION_H

#include "app/args.h"
#include "app/media.h"
#include "llm/engine.h"
#include "llm/model.h"
#include "llm/tokenizer.h"

typedef struct {
    omni_args args;
    char model_dir[4096];
    llm_model *model;
    const llm_config *cfg;
    llm_tokenizer *tok;
    media_encoder *media;
    llm_engine *engine;
    int cache;            /* the --kv cache (-1 until session_kv_init) */
    int conv;             /* the conversation in it */
    int ctx;              /* its capacity in tokens */
    /* perf */
    double t_start, t_load_ms, t_prompt_ms, t_eval_ms, t_encode0_ms;
    int n_prompt, n_eval;
    volatile int *interrupted;
} omni_session;

/* Resolve and load model + tokenizer, make the media encoder and the engine. n_seqs: sequences the command runs
 * at once (1 for one answer); chunk: prompt tokens per step (0: 512); logits_rows: host rows for LLM_LOGITS_ALL
 * requests per step (0: the engine's default). */
omni_status session_open(omni_session *s, const omni_args *a, int n_seqs, int chunk, int logits_rows);
/* The main cache (format from --kv and friends) for one conversation of `ctx` tokens; prints the KV line. */
omni_status session_kv_init(omni_session *s, int ctx);
/* Another cache: `mode` overrides --kv (the other --kv-* options apply), room for n_seqs sequences of ctx. */
omni_status session_add_cache(omni_session *s, const char *mode, int ctx, int n_seqs, int *cache);
void session_close(omni_session *s);

/* Text -> ids (special tokens recognised). Invalid UTF-8 is replaced by U+FFFD with a warning. */
omni_status session_tokenize(omni_session *s, const char *text, int32_t **ids, int *n);

/* One turn of the conversation: prompt (expanded, with media), then up to n_predict tokens (-1: until EOS or
 * the context is full) streamed to stdout. keep_eos: the final EOS stays in the history (chat). Tokens
 * generated: *ids_out (malloc'ed, may be NULL) and *n_out; *finish how it ended. Ctrl+C (s->interrupted)
 * cancels the turn. A prompt that does not fit the context fails with OMNI_ERR_USAGE before any work. */
omni_status session_turn(omni_session *s, const media_prompt *p, int n_predict, int keep_eos, int32_t **ids_out,
                         int *n_out, llm_finish *finish);

/* Step the engine until no request is left, cancelling `ids` when Ctrl+C is pressed. */
void session_run(omni_session *s, const int *ids, int n_ids);

/* Add one finished request's timings to the perf block. */
void session_add_stats(omni_session *s, const llm_request_stats *st);
/* Start a new perf block (omni ocr: one per image): counters and the clock restart, load time 0. */
void session_reset_perf(omni_session *s);

/* llama.cpp-shaped perf block and the KV line on stderr. */
void session_print_perf(const omni_session *s);

/* The sampling options of the args (temp, top-k, top-p, seed). */
llm_sampler_params session_sampling(const omni_session *s);

#endif
