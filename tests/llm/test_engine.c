/* test_engine.c - the generation engine (llm/engine.h) on the largest text fixture:
 *  - 50 requests with random prompts (1..300 tokens), random max tokens, staggered arrival and four KV formats
 *    (f32, bf16, int2, kivi4) through one engine with small byte budgets (so requests queue): each request's
 *    greedy tokens equal the same request run alone (llm_forward, a cache of its own); after every step each
 *    cache's pages in use and its promised pages stay within its budget; every page is back at the end; a request
 *    larger than a whole budget is refused at submit with one error while the others finish;
 *  - synchronised int2 sequences promised their joint peak (kv_budget's promise_bytes) in a budget that keeps one
 *    flush free: more fit than decode_bytes allows, their final flushes wait for free bytes, the pages in flight
 *    (llm_cache_stats.peak_bytes) never exceed the budget here or in the mixed run, results equal alone;
 *  - a teacher-forced request (int2 fed bf16's tokens) gives one distribution per teacher token, and on a cache of
 *    the teacher's own format exactly the teacher's logits;
 *  - a conversation of two turns equals the one-shot prompt of both turns; stop strings cut the text;
 *  - the engine on a worker thread, cancelled from another thread: it stops within one step and frees the pages. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/engine.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h128-hd64-gqa2-tied"
#define NREQ 50
#define NFMT 4

static const char *g_modes[NFMT] = {"f32", "bf16", "int2", "kivi4"};

static uint64_t g_rng = 12345;
static int rnd(int n) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((g_rng >> 33) % (uint64_t)n);
}

typedef struct {
    int32_t prompt[300];
    int n_prompt, max_tokens, fmt, arrive, ignore_eos;
    int id, done, n_out;
    int32_t out[64];
    llm_request_stats st;
} job;

static void on_token(void *user, int id, int32_t tok, const char *piece, int len) {
    job *j = user;
    (void)id, (void)piece, (void)len;
    if (tok >= 0 && j->n_out < 64) j->out[j->n_out++] = tok;
}

static void on_done(void *user, int id, const llm_request_stats *s) {
    job *j = user;
    (void)id;
    j->done++;
    j->st = *s;
}

/* The reference: the request alone, llm_forward on a fresh cache of its format, greedy. */
static int alone(const llm_model *m, const job *j, int32_t *out) {
    const llm_config *c = llm_model_config(m);
    kv_params p = llm_model_kv_params(m);
    kv_parse_mode(g_modes[j->fmt], &p.fmt);
    p.fmt.window = 32;
    p.max_tokens = 512;
    kv_cache *kv = NULL;
    int seq, n = 0;
    float *lg = malloc(sizeof(float) * c->vocab);
    if (kv_init(&p, &kv) || kv_seq_add(kv, &seq)) return -1;
    for (int c0 = 0; c0 < j->n_prompt; c0 += 64) { /* the engine splits prompts at multiples of prefill_chunk */
        llm_input in = {j->n_prompt - c0 < 64 ? j->n_prompt - c0 : 64, j->prompt + c0, NULL, 0, NULL};
        CHECK(llm_forward(m, kv, seq, &in, lg) == OMNI_OK, "alone: %s", omni_last_error());
    }
    while (n < j->max_tokens) {
        int32_t t = op_argmax(lg, c->vocab);
        out[n++] = t;
        if ((!j->ignore_eos && llm_config_is_eos(c, t)) || n == j->max_tokens) break;
        llm_input d = {1, &t, NULL, 0, NULL};
        CHECK(llm_forward(m, kv, seq, &d, lg) == OMNI_OK, "alone step: %s", omni_last_error());
    }
    kv_free(kv);
    free(lg);
    return n;
}

static void check_budgets(llm_engine *e, int n_caches, int step) {
    for (int c = 0; c < n_caches; c++) {
        llm_cache_stats s;
        llm_engine_cache_stats(e, c, &s);
        CHECK(s.used_bytes <= s.budget_bytes && s.reserved_bytes <= s.budget_bytes && s.used_bytes <= s.reserved_bytes &&
                  s.peak_bytes <= s.budget_bytes && s.reserved_bytes + s.step_reserve_bytes <= s.budget_bytes,
              "step %d cache %d: used %lld reserved %lld (+%lld kept) peak in flight %lld budget %lld", step, c,
              (long long)s.used_bytes, (long long)s.reserved_bytes, (long long)s.step_reserve_bytes,
              (long long)s.peak_bytes, (long long)s.budget_bytes);
    }
}

static void test_mixed(const llm_model *m) {
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = 12;
    ep.runner.max_tokens = 96;
    ep.prefill_chunk = 64;
    llm_engine *e = NULL;
    CHECK(llm_engine_init(m, &ep, &e) == OMNI_OK, "init: %s", omni_last_error());
    if (!e) return;
    int cache[NFMT];
    for (int f = 0; f < NFMT; f++) { /* room for ~3 long requests at once: the rest waits */
        llm_cache_params cp = llm_cache_default_params();
        kv_parse_mode(g_modes[f], &cp.fmt);
        cp.fmt.window = 32;
        cp.budget_bytes = 0;
        cp.ctx_tokens = 340;
        cp.max_seqs = 3;
        CHECK(llm_engine_add_cache(e, &cp, &cache[f]) == OMNI_OK, "cache %s: %s", g_modes[f], omni_last_error());
    }
    static job jobs[NREQ];
    for (int i = 0; i < NREQ; i++) {
        job *j = &jobs[i];
        j->n_prompt = 1 + rnd(300);
        for (int k = 0; k < j->n_prompt; k++) j->prompt[k] = rnd(3000);
        j->max_tokens = 1 + rnd(40);
        j->fmt = rnd(NFMT);
        j->arrive = rnd(120);
    }
    /* a request that can never fit: its own budget is a whole cache */
    llm_request big = llm_request_default_params();
    int32_t one = 5, big_id = 0;
    big.tokens = &one, big.n_tokens = 1, big.max_tokens = 100000, big.cache = cache[2];
    int rejected = 0, left = 0, step = 0;
    for (step = 0; step < 100000; step++) {
        for (int i = 0; i < NREQ; i++) {
            job *j = &jobs[i];
            if (j->arrive != step) continue;
            llm_request r = llm_request_default_params();
            r.tokens = j->prompt, r.n_tokens = j->n_prompt, r.max_tokens = j->max_tokens, r.cache = cache[j->fmt];
            r.sampling.temp = 0;
            r.cb = (llm_callbacks){on_token, NULL, on_done, j};
            CHECK(llm_engine_submit(e, &r, &j->id) == OMNI_OK, "submit %d: %s", i, omni_last_error());
        }
        if (step == 7) {
            omni_status st = llm_engine_submit(e, &big, &big_id);
            rejected += st != OMNI_OK;
            CHECK(st == OMNI_ERR_NOMEM && strstr(omni_last_error(), "budget"), "huge request: %d %s", st,
                  omni_last_error());
        }
        llm_engine_step(e, &left);
        check_budgets(e, NFMT, step);
        if (left == 0 && step > 120) break;
    }
    CHECK(rejected == 1, "one rejection, got %d", rejected);
    int same = 0, waited = 0;
    for (int i = 0; i < NREQ; i++) {
        job *j = &jobs[i];
        int32_t ref[64];
        int n = alone(m, j, ref);
        CHECK(j->done == 1 && j->st.status == OMNI_OK, "job %d: done %d status %d", i, j->done, j->st.status);
        int eq = n == j->n_out && !memcmp(ref, j->out, sizeof(int32_t) * n);
        CHECK(eq, "job %d (%s, prompt %d, max %d): %d tokens vs %d alone", i, g_modes[j->fmt], j->n_prompt, j->max_tokens,
              j->n_out, n);
        same += eq;
        waited += j->st.queue_ms > 0 && j->st.n_prompt == j->n_prompt;
        CHECK(j->st.n_gen == j->n_out && j->st.kv_tokens == j->n_prompt + j->n_out - 1 && j->st.kv_bytes > 0,
              "job %d stats: gen %d kv %lld", i, j->st.n_gen, (long long)j->st.kv_tokens);
    }
    printf("mixed: %d/%d requests equal alone, %d steps\n", same, NREQ, step);
    for (int c = 0; c < NFMT; c++) {
        llm_cache_stats s;
        llm_engine_cache_stats(e, c, &s);
        CHECK(s.used_bytes == 0 && s.reserved_bytes == 0 && s.n_seqs == 0 && s.raw_pages == 0 && s.quant_pages == 0,
              "cache %d not empty at the end: %lld bytes, %d seqs", c, (long long)s.used_bytes, s.n_seqs);
    }
    llm_engine_free(e);
}

/* ---- flushes wait for unpromised bytes -------------------------------------------------------------------- */

/* Sequences are promised their joint peak (promise_bytes: a flushing step's raw + new quant page at once excepted;
 * only a sequence's last flush, the one that reaches nq of its length, holds more) and the budget keeps exactly one
 * flush's excess free: NSYNC synchronised int2 sequences of 64 tokens (window 32 + one block: their last step
 * flushes) fit where decode_bytes would admit one less, their final flushes run one per step (the others wait a
 * step), the pages in flight never exceed the budget, and every result equals the request alone (EOS ignored). One
 * more request waits until a sequence ends. */
#define NSYNC 6
static void test_flush_wait(const llm_model *m) {
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = NSYNC + 1;
    ep.runner.max_tokens = 96;
    ep.prefill_chunk = 64;
    llm_engine *e = NULL;
    CHECK(llm_engine_init(m, &ep, &e) == OMNI_OK, "init: %s", omni_last_error());
    if (!e) return;
    kv_params kp = llm_model_kv_params(m);
    kv_parse_mode("int2", &kp.fmt);
    kp.fmt.window = 32;
    kp.max_tokens = kp.max_seq_len = 64;
    kp.max_chunk = ep.runner.max_tokens;
    kv_budget b;
    int64_t chunk = 0, flush = 0;
    CHECK(kv_budget_of(&kp, 64, &b) == OMNI_OK && kv_step_extra_bytes_of(&kp, &chunk, &flush) == OMNI_OK, "%s",
          omni_last_error());
    CHECK(flush == b.quant_page_bytes && b.promise_bytes + flush == b.decode_bytes && b.flush_bytes == flush,
          "promise %lld + flush %lld vs decode %lld", (long long)b.promise_bytes, (long long)flush,
          (long long)b.decode_bytes);
    llm_cache_params cp = llm_cache_default_params();
    cp.fmt = kp.fmt;
    cp.budget_bytes = NSYNC * b.promise_bytes + flush;
    cp.max_seqs = NSYNC + 1;
    CHECK(NSYNC * b.decode_bytes > cp.budget_bytes, "the old promise would admit all %d", NSYNC);
    int cache = -1;
    CHECK(llm_engine_add_cache(e, &cp, &cache) == OMNI_OK, "cache: %s", omni_last_error());
    static job jobs[NSYNC + 1];
    for (int i = 0; i <= NSYNC; i++) {
        job *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->n_prompt = 1, j->prompt[0] = 100 + 37 * i, j->max_tokens = 64, j->fmt = 2, j->ignore_eos = 1; /* int2 */
        llm_request r = llm_request_default_params();
        r.tokens = j->prompt, r.n_tokens = 1, r.max_tokens = 64, r.cache = cache, r.ignore_eos = 1;
        r.sampling.temp = 0;
        r.cb = (llm_callbacks){on_token, NULL, on_done, j};
        CHECK(llm_engine_submit(e, &r, &j->id) == OMNI_OK, "submit %d: %s", i, omni_last_error());
    }
    int left = 1, step = 0, first = -1; /* the NSYNC jobs that ended in the first step any ended */
    for (; left > 0 && step < 1000; step++) {
        int before = 0, after = 0;
        for (int i = 0; i < NSYNC; i++) before += jobs[i].done;
        llm_engine_step(e, &left);
        for (int i = 0; i < NSYNC; i++) after += jobs[i].done;
        if (first < 0 && after > before) first = after - before;
        llm_cache_stats s;
        llm_engine_cache_stats(e, cache, &s);
        check_budgets(e, 1, step);
        if (step == 0)
            CHECK(s.running == NSYNC && s.waiting == 1, "first step: %d running, %d waiting", s.running, s.waiting);
    }
    for (int i = 0; i <= NSYNC; i++) {
        job *j = &jobs[i];
        int32_t ref[64];
        int n = alone(m, j, ref);
        CHECK(j->done == 1 && j->st.status == OMNI_OK && n == j->n_out && !memcmp(ref, j->out, sizeof(int32_t) * n),
              "sync job %d: done %d, %d tokens vs %d alone", i, j->done, j->n_out, n);
    }
    /* their last step flushes a block at length 64 (its quant page beyond the promise): one fits the free bytes,
     * the others wait; once a sequence ended, its promise is free bytes too */
    CHECK(first == 1, "%d synchronised sequences ended in the first step, want 1 (the others' flushes wait)", first);
    llm_cache_stats s;
    llm_engine_cache_stats(e, cache, &s);
    printf("flush wait: %d sequences of 64 tokens in %lld bytes (decode_bytes would admit %lld), %d steps, peak %lld\n",
           NSYNC, (long long)cp.budget_bytes, (long long)((cp.budget_bytes) / b.decode_bytes), step,
           (long long)s.peak_bytes);
    CHECK(s.used_bytes == 0 && s.reserved_bytes == 0 && s.n_seqs == 0, "pages back");
    llm_engine_free(e);
}

/* ---- teacher forcing and logits ------------------------------------------------------------------------ */

typedef struct {
    float *rows; /* [64][V] */
    int n, first_pos, V;
    int32_t toks[64];
    int n_tok;
    llm_request_stats st;
} logit_sink;

static void sink_logits(void *user, int id, int pos, const float *lg, int V) {
    logit_sink *s = user;
    (void)id;
    if (s->n == 0) s->first_pos = pos;
    if (s->n < 64) memcpy(s->rows + (size_t)s->n * V, lg, sizeof(float) * V);
    s->n++;
}
static void sink_token(void *user, int id, int32_t tok, const char *p, int len) {
    logit_sink *s = user;
    (void)id, (void)p, (void)len;
    if (tok >= 0 && s->n_tok < 64) s->toks[s->n_tok++] = tok;
}
static void sink_done(void *user, int id, const llm_request_stats *st) {
    (void)id;
    ((logit_sink *)user)->st = *st;
}

static void teacher_case(const llm_model *m, const char *student_mode, int exact) {
    int V = llm_model_config(m)->vocab;
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = 4;
    llm_engine *e = NULL;
    llm_engine_init(m, &ep, &e);
    llm_cache_params cp = llm_cache_default_params();
    int ca, cb;
    llm_engine_add_cache(e, &cp, &ca);
    kv_parse_mode(student_mode, &cp.fmt);
    cp.fmt.window = 0;
    llm_engine_add_cache(e, &cp, &cb);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (i * 37 + 11) % 3000;
    logit_sink a = {calloc(64 * (size_t)V, 4), 0, 0, V, {0}, 0, {0}}, b = {calloc(64 * (size_t)V, 4), 0, 0, V, {0}, 0, {0}};
    llm_request r[2] = {llm_request_default_params(), llm_request_default_params()};
    r[0].tokens = prompt, r[0].n_tokens = 40, r[0].max_tokens = 12, r[0].cache = ca, r[0].sampling.temp = 0;
    r[0].logits = LLM_LOGITS_LAST, r[0].ignore_eos = 1;
    r[0].cb = (llm_callbacks){sink_token, sink_logits, sink_done, &a};
    r[1] = r[0];
    r[1].cache = cb, r[1].teacher = -1;
    r[1].cb = (llm_callbacks){sink_token, sink_logits, sink_done, &b};
    int ids[2], left = 1;
    CHECK(llm_engine_submit_n(e, r, 2, ids) == OMNI_OK, "submit_n: %s", omni_last_error());
    while (left) {
        llm_engine_step(e, &left);
        llm_cache_stats s; /* the teacher's cache holds its prompt and every token fed back so far */
        llm_engine_cache_stats(e, ca, &s);
        int64_t want = a.st.finish ? 0 : 40 + a.n_tok - 1;
        CHECK(s.used_tokens == want && (s.used_bytes > 0) == (want > 0), "%s: cache holds %lld tokens (%lld bytes), "
              "want %lld", student_mode, (long long)s.used_tokens, (long long)s.used_bytes, (long long)want);
    }
    CHECK(a.n == 12 && b.n == 12 && a.first_pos == 39 && b.first_pos == 39, "%s: %d and %d distributions (pos %d/%d)",
          student_mode, a.n, b.n, a.first_pos, b.first_pos);
    CHECK(a.n_tok == 12 && b.n_tok == 0 && a.st.finish == LLM_FINISH_LENGTH && b.st.finish == LLM_FINISH_LENGTH,
          "%s: teacher %d tokens, student %d tokens, finish %s/%s", student_mode, a.n_tok, b.n_tok,
          llm_finish_name(a.st.finish), llm_finish_name(b.st.finish));
    double maxd = 0;
    for (size_t i = 0; i < 12 * (size_t)V; i++) maxd = fmax(maxd, fabs(a.rows[i] - b.rows[i]));
    if (exact) CHECK(maxd == 0, "%s student == teacher: max|d| %g", student_mode, maxd);
    else CHECK(maxd > 0, "%s differs from bf16", student_mode);
    printf("teacher forcing %s: max|logit diff| %.3g over %d positions\n", student_mode, maxd, a.n);
    free(a.rows);
    free(b.rows);
    llm_engine_free(e);
}

/* ---- conversations and stop strings -------------------------------------------------------------------- */

static void test_conversation(const llm_model *m) {
    llm_engine_params ep = llm_engine_default_params();
    llm_engine *e = NULL;
    llm_engine_init(m, &ep, &e);
    llm_cache_params cp = llm_cache_default_params();
    kv_parse_mode("f32", &cp.fmt);
    cp.max_seqs = 2;
    int c, conv, id, left = 1;
    llm_engine_add_cache(e, &cp, &c);
    CHECK(llm_engine_conv_new(e, c, 200, &conv) == OMNI_OK, "conv: %s", omni_last_error());
    int32_t t1[10], t2[7];
    for (int i = 0; i < 10; i++) t1[i] = 100 + i * 13;
    for (int i = 0; i < 7; i++) t2[i] = 900 + i * 7;
    logit_sink a = {NULL, 0, 0, 0, {0}, 0, {0}}, b = a, one = a;
    llm_request r = llm_request_default_params();
    r.sampling.temp = 0, r.max_tokens = 6, r.ignore_eos = 1, r.cache = c, r.conv = conv;
    r.tokens = t1, r.n_tokens = 10, r.cb = (llm_callbacks){sink_token, NULL, sink_done, &a};
    CHECK(llm_engine_submit(e, &r, &id) == OMNI_OK, "turn 1: %s", omni_last_error());
    CHECK(llm_engine_submit(e, &r, &id) != OMNI_OK, "a second turn while one runs is refused");
    while (left) llm_engine_step(e, &left);
    CHECK(llm_engine_conv_len(e, conv) == 16, "history after turn 1: %lld (10 + 6 fed)", (long long)llm_engine_conv_len(e, conv));
    r.tokens = t2, r.n_tokens = 7, r.cb.user = &b;
    CHECK(llm_engine_submit(e, &r, &id) == OMNI_OK, "turn 2: %s", omni_last_error());
    left = 1;
    while (left) llm_engine_step(e, &left);
    int32_t all[40];
    int n = 0;
    memcpy(all, t1, sizeof t1), n = 10;
    memcpy(all + n, a.toks, sizeof(int32_t) * 6), n += 6;
    memcpy(all + n, t2, sizeof t2), n += 7;
    llm_request o = llm_request_default_params();
    o.sampling.temp = 0, o.max_tokens = 6, o.ignore_eos = 1, o.cache = c, o.tokens = all, o.n_tokens = n;
    o.cb = (llm_callbacks){sink_token, NULL, sink_done, &one};
    llm_engine_submit(e, &o, &id);
    left = 1;
    while (left) llm_engine_step(e, &left);
    CHECK(b.n_tok == 6 && !memcmp(b.toks, one.toks, sizeof(int32_t) * 6), "turn 2 != one-shot of both turns");
    CHECK(llm_engine_conv_clear(e, conv) == OMNI_OK && llm_engine_conv_len(e, conv) == 0, "clear");
    logit_sink c3 = a;
    r.tokens = t1, r.n_tokens = 10, r.max_tokens = 100, r.cb.user = &c3; /* freed while its turn runs */
    CHECK(llm_engine_submit(e, &r, &id) == OMNI_OK, "turn 3: %s", omni_last_error());
    for (int i = 0; i < 3; i++) llm_engine_step(e, &left);
    CHECK(llm_engine_conv_clear(e, conv) != OMNI_OK, "clear refused while a turn runs");
    llm_engine_conv_free(e, conv);
    left = 1;
    while (left) llm_engine_step(e, &left);
    llm_engine_step(e, &left);
    CHECK(c3.st.finish == LLM_FINISH_CANCELLED && c3.n_tok >= 2 && c3.n_tok < 100, "turn of a freed conversation: %s "
          "after %d tokens", llm_finish_name(c3.st.finish), c3.n_tok);
    CHECK(llm_engine_conv_len(e, conv) == -1, "freed conversation is gone");
    llm_cache_stats s;
    llm_engine_cache_stats(e, c, &s);
    CHECK(s.used_bytes == 0 && s.n_seqs == 0 && s.reserved_bytes == 0, "conversation freed: %lld bytes %d seqs",
          (long long)s.used_bytes, s.n_seqs);
    llm_engine_free(e);
}

typedef struct {
    char text[4096];
    int len;
    llm_request_stats st;
} text_sink;
static void text_token(void *user, int id, int32_t tok, const char *p, int len) {
    text_sink *s = user;
    (void)id, (void)tok;
    memcpy(s->text + s->len, p, (size_t)len);
    s->len += len;
    s->text[s->len] = 0;
}
static void text_done(void *user, int id, const llm_request_stats *st) {
    (void)id;
    ((text_sink *)user)->st = *st;
}

static void test_stop_strings(const llm_model *m, const llm_tokenizer *tok) {
    llm_engine_params ep = llm_engine_default_params();
    ep.tok = tok;
    llm_engine *e = NULL;
    llm_engine_init(m, &ep, &e);
    llm_cache_params cp = llm_cache_default_params();
    int c, id, left = 1;
    llm_engine_add_cache(e, &cp, &c);
    int32_t prompt[5] = {10, 200, 300, 400, 500};
    text_sink full = {{0}, 0, {0}}, cut = full;
    llm_request r = llm_request_default_params();
    r.sampling.temp = 0, r.max_tokens = 24, r.ignore_eos = 1, r.cache = c, r.tokens = prompt, r.n_tokens = 5;
    r.cb = (llm_callbacks){text_token, NULL, text_done, &full};
    llm_engine_submit(e, &r, &id);
    while (left) llm_engine_step(e, &left);
    CHECK(full.len > 6, "some text: '%s'", full.text);
    if (full.len > 6) {
        char stop[4];
        int at = full.len / 2;
        memcpy(stop, full.text + at, 3); /* a 3-byte stop string from the middle of the answer */
        stop[3] = 0;
        const char *stops[1] = {stop};
        r.stop = stops, r.n_stop = 1, r.cb.user = &cut;
        llm_engine_submit(e, &r, &id);
        left = 1;
        while (left) llm_engine_step(e, &left);
        int first = (int)(strstr(full.text, stop) - full.text);
        CHECK(cut.st.finish == LLM_FINISH_STOP && cut.len == first && !strncmp(cut.text, full.text, (size_t)first),
              "stop '%s': got '%s' (%s), full '%s'", stop, cut.text, llm_finish_name(cut.st.finish), full.text);
    }
    llm_engine_free(e);
}

/* ---- worker thread + cancel ---------------------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    int tokens, done, tokens_at_cancel, cancelled;
    llm_request_stats st;
} live_req;

static void live_token(void *user, int id, int32_t tok, const char *p, int len) {
    live_req *l = user;
    (void)id, (void)p, (void)len;
    pthread_mutex_lock(&l->mu);
    if (tok >= 0) l->tokens++;
    pthread_mutex_unlock(&l->mu);
}
static void live_done(void *user, int id, const llm_request_stats *st) {
    live_req *l = user;
    (void)id;
    pthread_mutex_lock(&l->mu);
    l->done++;
    l->st = *st;
    pthread_mutex_unlock(&l->mu);
}
static void *run_engine(void *e) {
    llm_engine_run(e);
    return NULL;
}
static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_worker_cancel(const llm_model *m) {
    llm_engine_params ep = llm_engine_default_params();
    llm_engine *e = NULL;
    llm_engine_init(m, &ep, &e);
    llm_cache_params cp = llm_cache_default_params();
    kv_parse_mode("int2", &cp.fmt);
    cp.ctx_tokens = 20000;
    cp.max_seqs = 2;
    int c, id, id2;
    llm_engine_add_cache(e, &cp, &c);
    pthread_t th;
    pthread_create(&th, NULL, run_engine, e);
    live_req a = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, {0}}, b = a;
    int32_t prompt[3] = {7, 8, 9};
    llm_request r = llm_request_default_params();
    r.tokens = prompt, r.n_tokens = 3, r.max_tokens = 19000, r.ignore_eos = 1, r.cache = c;
    r.sampling.seed = 3;
    r.cb = (llm_callbacks){live_token, NULL, live_done, &a};
    CHECK(llm_engine_submit(e, &r, &id) == OMNI_OK, "submit: %s", omni_last_error());
    r.max_tokens = 8, r.cb.user = &b; /* a short one alongside: it finishes normally */
    CHECK(llm_engine_submit(e, &r, &id2) == OMNI_OK, "submit 2: %s", omni_last_error());
    for (int w = 0; w < 20000; w++) { /* let it run a while */
        pthread_mutex_lock(&a.mu);
        int t = a.tokens;
        pthread_mutex_unlock(&a.mu);
        if (t >= 300) break;
        sleep_ms(1);
    }
    pthread_mutex_lock(&a.mu); /* the step thread cannot deliver tokens while we hold this */
    int at = a.tokens;
    CHECK(llm_engine_cancel(e, id) == OMNI_OK, "cancel: %s", omni_last_error());
    pthread_mutex_unlock(&a.mu);
    for (int w = 0; w < 20000; w++) {
        pthread_mutex_lock(&a.mu);
        int d = a.done;
        pthread_mutex_unlock(&a.mu);
        if (d) break;
        sleep_ms(1);
    }
    llm_engine_stop(e);
    pthread_join(th, NULL);
    printf("cancel: %d tokens before, %d after; finish %s\n", at, a.tokens - at, llm_finish_name(a.st.finish));
    CHECK(at >= 300 && a.done == 1 && a.st.finish == LLM_FINISH_CANCELLED, "cancelled after %d tokens: done %d %s", at,
          a.done, llm_finish_name(a.st.finish));
    CHECK(a.tokens - at <= 1, "%d tokens after cancel (at most the step in flight)", a.tokens - at);
    CHECK(b.done == 1 && b.st.finish == LLM_FINISH_LENGTH && b.tokens == 8, "the other request: %d tokens, %s", b.tokens,
          llm_finish_name(b.st.finish));
    CHECK(llm_engine_cancel(e, id) != OMNI_OK, "cancel of a finished request is refused");
    llm_cache_stats s;
    llm_engine_cache_stats(e, c, &s);
    char line[512];
    llm_engine_cache_line(e, c, line, sizeof line);
    CHECK(s.used_bytes == 0 && s.reserved_bytes == 0 && s.n_seqs == 0, "pages back: %s", line);
    llm_engine_free(e);
}

int main(void) {
    llm_model *m = NULL;
    CHECK(llm_model_load(MODEL, &m) == OMNI_OK, "%s", omni_last_error());
    llm_tokenizer *tok = NULL;
    CHECK(llm_tokenizer_load(MODEL "/tokenizer.json", &tok) == OMNI_OK, "%s", omni_last_error());
    if (!m || !tok) return check_exit();
    test_mixed(m);
    test_flush_wait(m);
    teacher_case(m, "bf16", 1);
    teacher_case(m, "int2", 0);
    test_conversation(m);
    test_stop_strings(m, tok);
    test_worker_cancel(m);
    llm_tokenizer_free(tok);
    llm_model_free(m);
    return check_exit();
}
