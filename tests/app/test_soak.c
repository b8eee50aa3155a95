/* test_soak.c - a long run of the engine (issue 15): 10 000 requests (OMNI_SOAK_REQUESTS to change) on the CPU
 * through one engine on the Omni fixture model, with random chat prompts (text, images, audio: cached encodings
 * and fresh ones), six KV formats with small byte budgets (so requests queue and pages are reused), greedy and
 * sampled decoding, stop strings, next-token logits, cancellations and multi-turn conversations. Checks: every
 * request ends exactly once and none fails, every KV page is back in its pool at the end, and from the end of the
 * first thousand requests to the end of the last the resident memory and the heap in use (mallinfo2) grow by at
 * most 1%, measured when nothing is in flight and after malloc_trim(0) (free heap pages given back: the heap
 * holds tens of MB of free space after the fill below, and reusing other parts of it touches pages again without
 * any growth of what is allocated): nothing leaks per request. The KV pools' pages cost resident memory
 * only once touched: before the first request every cache is filled to its capacity once, so RSS starts at its
 * working size instead of creeping up to it as rarer peaks of use reach pages not touched before. */
#define _DEFAULT_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/media.h"
#include "check.h"
#include "llm/engine.h"
#include "llm/prompt.h"
#include "llm/tokenizer.h"

#define MODEL OMNI_FIXTURES "/audio/omni-a"
#define NFMT 6
#define IN_FLIGHT 40
#define NCONV 4

static const char *g_modes[NFMT] = {"f32", "bf16", "int2", "int4", "kivi2", "k4v2"};
static const char *g_words[] = {"the", "cat", "reads", "a", "long", "page", "of", "text", "and", "sings", "while",
                                "rain", "falls", "on", "old", "roofs", "quickly", "日本", "ünïcödé", "42"};
static const char *g_images[] = {OMNI_FIXTURES "/vision/a_exact.png", OMNI_FIXTURES "/vision/c_up.png"};
static const char *g_audio[] = {OMNI_FIXTURES "/audio/clips/tone_0p5s.wav", OMNI_FIXTURES "/audio/clips/tone_1s.wav"};

static uint64_t g_rng = 20261201;
static int rnd(int n) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((g_rng >> 33) % (uint64_t)n);
}

static long rss_kib(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    if (f) fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* One request in flight: its prompt and media live until it ends. */
typedef struct {
    int used, id, conv_slot, n_tok, n_logits, done;
    media_prompt p;
    media_item fresh[2];
    int n_fresh;
} job;

typedef struct {
    int done, errors, by_finish[8], tokens, logits;
} tally;

static job g_jobs[IN_FLIGHT];
static tally g_t;
static int g_conv[NCONV], g_conv_busy[NCONV];

static void on_token(void *user, int id, int32_t tok, const char *piece, int len) {
    job *j = user;
    (void)id, (void)piece, (void)len;
    if (tok >= 0) j->n_tok++, g_t.tokens++;
}

static void on_logits(void *user, int id, int pos, const float *logits, int vocab) {
    job *j = user;
    (void)id, (void)pos;
    float m = logits[0];
    for (int i = 1; i < vocab; i++) m = logits[i] > m ? logits[i] : m;
    CHECK(m == m, "NaN logits");
    j->n_logits++, g_t.logits++;
}

static void on_done(void *user, int id, const llm_request_stats *s) {
    job *j = user;
    (void)id;
    j->done++;
    g_t.done++;
    g_t.by_finish[s->finish]++;
    if (s->finish == LLM_FINISH_ERROR) {
        g_t.errors++;
        fprintf(stderr, "request error: %s\n", s->error);
    }
}

/* A random chat turn: text words, maybe images and audio (cached encodings, or encoded now). */
static omni_status make_prompt(media_encoder *enc, const llm_tokenizer *tok, media_item *cached, job *j) {
    int n_img = rnd(4) == 0 ? 1 + rnd(2) : 0, n_aud = rnd(4) == 0 ? 1 : 0, n_words = 1 + rnd(40);
    char text[1024] = "";
    for (int i = 0; i < n_words; i++) {
        size_t o = strlen(text);
        snprintf(text + o, sizeof text - o, "%s%s", i ? " " : "", g_words[rnd(20)]);
    }
    char *body = llm_prompt_simple(rnd(3) ? NULL : "You are terse.", text, n_img, n_aud);
    int32_t *ids = NULL;
    int n = 0;
    omni_status st = body ? llm_tokenizer_encode(tok, body, strlen(body), 1, &ids, &n, NULL)
                          : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    free(body);
    media_item items[3];
    int k = 0;
    j->n_fresh = 0;
    for (int i = 0; !st && i < n_img; i++) { /* one request in 8 encodes its image now */
        if (rnd(8) == 0 && !(st = media_encode_image(enc, g_images[rnd(2)], &j->fresh[j->n_fresh])))
            items[k++] = j->fresh[j->n_fresh++];
        else if (!st) items[k++] = cached[rnd(2)];
    }
    if (!st && n_aud) {
        if (rnd(8) == 0 && j->n_fresh < 2 && !(st = media_encode_audio(enc, g_audio[rnd(2)], &j->fresh[j->n_fresh])))
            items[k++] = j->fresh[j->n_fresh++];
        else if (!st) items[k++] = cached[2 + rnd(2)];
    }
    if (!st) st = media_prompt_build(enc, ids, n, items, k, &j->p);
    free(ids);
    return st;
}

static void job_end(job *j) {
    media_prompt_free(&j->p);
    for (int i = 0; i < j->n_fresh; i++) media_item_clear(&j->fresh[i]);
    if (j->conv_slot >= 0) g_conv_busy[j->conv_slot] = 0;
    memset(j, 0, sizeof *j);
}

static omni_status submit(llm_engine *e, media_encoder *enc, const llm_tokenizer *tok, media_item *cached, job *j,
                          int n_caches) {
    static const char *stops[] = {"the", "\n\n"};
    memset(j, 0, sizeof *j);
    j->conv_slot = -1;
    omni_status st = make_prompt(enc, tok, cached, j);
    if (st) return st;
    llm_request r = llm_request_default_params();
    media_prompt_request(&j->p, &r);
    r.cache = rnd(n_caches);
    r.max_tokens = 1 + rnd(24);
    r.sampling.temp = rnd(2) ? 0.f : 0.8f;
    r.sampling.seed = (uint64_t)rnd(1 << 30);
    if (rnd(6) == 0) r.stop = stops, r.n_stop = 2;
    if (rnd(8) == 0) r.logits = LLM_LOGITS_LAST;
    int c = rnd(NCONV * 8); /* a conversation turn now and then (its cache, one turn at a time) */
    if (c < NCONV && !g_conv_busy[c]) {
        if (llm_engine_conv_len(e, g_conv[c]) > 400) llm_engine_conv_clear(e, g_conv[c]);
        r.conv = g_conv[c], r.cache = c % n_caches, r.keep_eos = 1;
        j->conv_slot = c;
        g_conv_busy[c] = 1;
    }
    r.cb = (llm_callbacks){on_token, on_logits, on_done, j};
    st = llm_engine_submit(e, &r, &j->id);
    if (st) {
        job_end(j);
        return st;
    }
    j->used = 1;
    return OMNI_OK;
}

/* Fill each cache to capacity once (max_seqs sequences of ctx_tokens - 8 tokens, one answer token each). */
static void fill_caches(llm_engine *e, const llm_tokenizer *tok, const int *caches, int max_seqs, int ctx) {
    int32_t *ids = NULL, *prompt = malloc(sizeof(int32_t) * (size_t)ctx);
    int n = 0;
    CHECK(llm_tokenizer_encode(tok, "rain falls on old roofs", 23, 0, &ids, &n, NULL) == OMNI_OK && n > 0 && prompt,
          "fill: encode");
    for (int i = 0; n > 0 && prompt && i < ctx; i++) prompt[i] = ids[i % n];
    static job fill[64];
    for (int c = 0; n > 0 && prompt && c < NFMT; c++) {
        for (int s = 0; s < max_seqs && s < 64; s++) {
            llm_request r = llm_request_default_params();
            r.tokens = prompt, r.n_tokens = ctx - 8, r.cache = caches[c], r.max_tokens = 1;
            r.cb = (llm_callbacks){on_token, NULL, NULL, &fill[s]};
            CHECK(llm_engine_submit(e, &r, &fill[s].id) == OMNI_OK, "fill submit: %s", omni_last_error());
        }
        int left = 1;
        while (left > 0) llm_engine_step(e, &left);
    }
    free(ids);
    free(prompt);
}

int main(void) {
    const char *env = getenv("OMNI_SOAK_REQUESTS");
    int total = env ? atoi(env) : 10000;
    llm_model *m = NULL;
    llm_tokenizer *tok = NULL;
    media_encoder *enc = NULL;
    llm_engine *e = NULL;
    omni_status st = llm_model_load(MODEL, &m);
    if (!st) st = llm_tokenizer_load(MODEL "/tokenizer.json", &tok);
    media_params mp = media_default_params();
    mp.image_min_tokens = 4, mp.image_max_tokens = 16;
    if (!st) st = media_encoder_init(m, MODEL, &mp, &enc);
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = IN_FLIGHT;
    ep.runner.n_threads = 2;
    ep.prefill_chunk = 64;
    ep.tok = tok;
    if (!st) st = llm_engine_init(m, &ep, &e);
    int caches[NFMT];
    for (int i = 0; !st && i < NFMT; i++) {
        llm_cache_params cp = llm_cache_default_params();
        st = kv_parse_mode(g_modes[i], &cp.fmt);
        cp.fmt.window = i % 2 ? 32 : 0;
        cp.ctx_tokens = 1024;
        cp.max_seqs = 12; /* smaller than what is submitted: requests wait for pages */
        if (!st) st = llm_engine_add_cache(e, &cp, &caches[i]);
    }
    for (int c = 0; !st && c < NCONV; c++) st = llm_engine_conv_new(e, caches[c % NFMT], 1024, &g_conv[c]);
    media_item cached[4] = {{0}};
    for (int i = 0; !st && i < 2; i++) st = media_encode_image(enc, g_images[i], &cached[i]);
    for (int i = 0; !st && i < 2; i++) st = media_encode_audio(enc, g_audio[i], &cached[2 + i]);
    CHECK(st == OMNI_OK, "setup: %s", omni_last_error());
    if (st) return check_exit();
    omni_log_set_level(0);
    double tf = omni_time_ms();
    long rss_empty = rss_kib();
    fill_caches(e, tok, caches, 12, 1024);
    fprintf(stderr, "soak: caches filled once in %.1f s: RSS %.1f -> %.1f MiB\n", (omni_time_ms() - tf) / 1000,
            rss_empty / 1024.0, rss_kib() / 1024.0);
    int submitted = 0, cancels = 0, steps = 0, last_k = 0, snap = 0;
    const int marks[3] = {total >= 2000 ? 1000 : total / 10, total / 2, total};
    long rss[3] = {0}, rss_raw[3] = {0};
    size_t heap[3] = {0};
    double t0 = omni_time_ms();
    while (g_t.done < total) {
        int limit = marks[snap < 3 ? snap : 2]; /* submissions pause at each mark until all are done */
        for (int s = 0; s < IN_FLIGHT && submitted < limit; s++) {
            if (g_jobs[s].used) continue;
            CHECK((st = submit(e, enc, tok, cached, &g_jobs[s], NFMT)) == OMNI_OK, "submit: %s", omni_last_error());
            if (st) return check_exit();
            submitted++;
        }
        if (rnd(10) == 0) { /* cancel a running request now and then */
            job *j = &g_jobs[rnd(IN_FLIGHT)];
            if (j->used && !j->done && llm_engine_cancel(e, j->id) == OMNI_OK) cancels++;
        }
        int left = 0;
        CHECK(llm_engine_step(e, &left) == OMNI_OK, "step: %s", omni_last_error());
        steps++;
        for (int s = 0; s < IN_FLIGHT; s++)
            if (g_jobs[s].used && g_jobs[s].done) {
                CHECK(g_jobs[s].done == 1, "request ended %d times", g_jobs[s].done);
                job_end(&g_jobs[s]);
            }
        if (snap < 2 && g_t.done == marks[snap]) { /* quiescent: nothing in flight */
            struct mallinfo2 mi = mallinfo2();
            rss_raw[snap] = rss_kib(), heap[snap] = mi.uordblks + mi.hblkhd;
            malloc_trim(0);
            rss[snap] = rss_kib();
            if (getenv("OMNI_SOAK_SMAPS")) { /* debugging: where resident memory grows */
                char cmd[512];
                snprintf(cmd, sizeof cmd, "cp /proc/%d/smaps %s.%d", (int)getpid(), getenv("OMNI_SOAK_SMAPS"), snap);
                if (system(cmd)) {}
            }
            snap++;
        }
        if (getenv("OMNI_SOAK_TRACE") && g_t.done / 1000 != last_k) {
            last_k = g_t.done / 1000;
            struct mallinfo2 mi = mallinfo2();
            fprintf(stderr, "soak: %d done, RSS %.1f MiB, heap in use %zu B, arena %zu B, mmap %zu B\n", g_t.done,
                    rss_kib() / 1024.0, mi.uordblks, mi.arena, mi.hblkhd);
        }
    }
    int left = 1;
    while (left > 0) llm_engine_step(e, &left);
    struct mallinfo2 mi = mallinfo2();
    rss_raw[2] = rss_kib(), heap[2] = mi.uordblks + mi.hblkhd;
    malloc_trim(0);
    rss[2] = rss_kib();
    double s = (omni_time_ms() - t0) / 1000;
    for (int c = 0; c < NCONV; c++) llm_engine_conv_free(e, g_conv[c]);
    llm_engine_step(e, &left);
    for (int i = 0; i < NFMT; i++) {
        llm_cache_stats cs;
        llm_engine_cache_stats(e, caches[i], &cs);
        CHECK(cs.used_bytes == 0 && cs.reserved_bytes == 0 && cs.n_seqs == 0 && cs.raw_pages == 0 &&
                  cs.quant_pages == 0 && cs.raw_pages_free > 0,
              "%s: pages not returned: used %lld reserved %lld seqs %d, raw pages in use %lld (free %lld), quant %lld "
              "(free %lld)", g_modes[i], (long long)cs.used_bytes, (long long)cs.reserved_bytes, cs.n_seqs,
              (long long)cs.raw_pages, (long long)cs.raw_pages_free, (long long)cs.quant_pages,
              (long long)cs.quant_pages_free);
    }
    double growth = rss[0] > 0 ? 100.0 * (rss[2] - rss[0]) / rss[0] : 0;
    double hgrowth = heap[0] > 0 ? 100.0 * ((double)heap[2] - (double)heap[0]) / (double)heap[0] : 0;
    printf("soak: %d requests in %.1f s (%d steps, %d tokens, %d logits rows, %d cancel calls): eos %d, stop %d, "
           "length %d, context %d, cancelled %d, error %d\n", g_t.done, s, steps, g_t.tokens, g_t.logits, cancels,
           g_t.by_finish[LLM_FINISH_EOS], g_t.by_finish[LLM_FINISH_STOP], g_t.by_finish[LLM_FINISH_LENGTH],
           g_t.by_finish[LLM_FINISH_CONTEXT], g_t.by_finish[LLM_FINISH_CANCELLED], g_t.by_finish[LLM_FINISH_ERROR]);
    printf("soak: RSS after %d / %d / %d requests: %.1f / %.1f / %.1f MiB (first to last %+.2f%%); heap in use %.2f / "
           "%.2f / %.2f MiB (first to last %+.2f%%)\n", marks[0], marks[1], marks[2], rss[0] / 1024.0, rss[1] / 1024.0,
           rss[2] / 1024.0, growth, heap[0] / 1048576.0, heap[1] / 1048576.0, heap[2] / 1048576.0, hgrowth);
    printf("soak: RSS before malloc_trim (free heap pages touched again count too): %.1f / %.1f / %.1f MiB\n",
           rss_raw[0] / 1024.0, rss_raw[1] / 1024.0, rss_raw[2] / 1024.0);
    CHECK(g_t.done == total && g_t.errors == 0, "%d of %d requests ended, %d errors", g_t.done, total, g_t.errors);
    CHECK(growth <= 1.0, "RSS grew %.2f%% from the first thousand requests to the last", growth);
    CHECK(hgrowth <= 1.0, "heap in use grew %.2f%% from the first thousand requests to the last", hgrowth);
    for (int i = 0; i < 4; i++) media_item_clear(&cached[i]);
    llm_engine_free(e);
    media_encoder_free(enc);
    llm_tokenizer_free(tok);
    llm_model_free(m);
    return check_exit();
}
