/* test_oom.c - the host runs out of memory (issue 15): every allocation of loading (model, tokenizer, media encoder
 * with its towers, engine with its KV caches) and of a request mid-run (tokenizing, image and audio decoding and
 * encoding, the prompt, the submit, the steps) is made to fail in turn by a failing-allocation hook: this program's
 * malloc family, over glibc's (__libc_malloc ...), fails the k-th allocation made on the test's thread while armed.
 * Each failure must end in a clear error (OMNI_ERR_NOMEM or a message that says memory), never a crash, and leak
 * nothing (the live allocations come back to where they were). Mid-run, the engine goes on: the request that hit
 * the failure ends with an error and the requests running beside it give the same tokens as without it.
 * Allocations made inside libgomp / OpenBLAS are never failed (those libraries abort on them by design; they
 * allocate once, at start). Sanitizer builds own malloc: the test reports SKIP there. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/media.h"
#include "check.h"
#include "llm/engine.h"
#include "llm/model.h"
#include "llm/prompt.h"
#include "llm/tokenizer.h"

#if defined(__SANITIZE_ADDRESS__)
#define OOM_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OOM_HOOK 0
#endif
#endif
#ifndef OOM_HOOK
#define OOM_HOOK 1
#endif

#define MODEL OMNI_FIXTURES "/audio/omni-a"
#define IMAGE OMNI_FIXTURES "/vision/a_exact.png"
#define AUDIO OMNI_FIXTURES "/audio/clips/tone_0p5s.wav"

#if OOM_HOOK
/* ---- the hook ------------------------------------------------------------------------------------------ */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);
void *__libc_memalign(size_t align, size_t n);

static atomic_long g_live;         /* blocks handed out and not yet freed (all threads) */
static long g_seen, g_fail_at = -1; /* armed allocations so far; the index to fail */
static int g_failed;
static __thread int t_armed, t_inside;

/* Whether the caller may see a failure: not from libraries that abort on NULL (libgomp's gomp_malloc,
 * OpenBLAS, libgfortran, FFTW, the dynamic loader), nor inside the media decoders that do not survive it (libsndfile
 * crashes; stb_image sometimes fails without a reason and leaves the previous one). Cached per loaded object. */
static int may_fail(const void *caller) {
    static struct { const void *base; int ok; } cache[64];
    static int n_cache;
    Dl_info di;
    if (!dladdr(caller, &di)) return 1;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].base == di.dli_fbase) return cache[i].ok;
    const char *f = di.dli_fname ? di.dli_fname : "";
    static const char *never[] = {"libgomp", "openblas", "gfortran", "ld-linux", "libstdc++", "libcuda", "libcublas",
                                  "libsndfile", "libstb", "libfftw3"};
    int ok = 1;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) ok &= !strstr(f, never[i]);
    if (n_cache < 64) cache[n_cache].base = di.dli_fbase, cache[n_cache++].ok = ok;
    return ok;
}

static int fail_now(const void *caller) {
    if (!t_armed || t_inside) return 0;
    t_inside = 1;
    int f = may_fail(caller) && g_seen++ == g_fail_at;
    t_inside = 0;
    if (f) g_failed = 1, errno = ENOMEM;
    if (f && getenv("OOM_BT_AT") && atol(getenv("OOM_BT_AT")) == g_fail_at) { /* debugging: who allocated */
        void *bt[16];
        t_inside = 1;
        backtrace_symbols_fd(bt, backtrace(bt, 16), 2);
        t_inside = 0;
    }
    return f;
}

static void *counted(void *p) {
    if (p) atomic_fetch_add(&g_live, 1);
    return p;
}

void *malloc(size_t n) { return fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_malloc(n)); }
void *calloc(size_t n, size_t m) { return fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_calloc(n, m)); }
void free(void *p) {
    if (p) atomic_fetch_sub(&g_live, 1);
    __libc_free(p);
}
void *realloc(void *p, size_t n) {
    if (!p) return fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_realloc(NULL, n));
    if (n == 0) { /* glibc: frees */
        free(p);
        return NULL;
    }
    return fail_now(__builtin_return_address(0)) ? NULL : __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n) { return fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = fail_now(__builtin_return_address(0)) ? NULL : counted(__libc_memalign(a, n));
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void *valloc(size_t n) { return memalign(4096, n); }
void *pvalloc(size_t n) { return memalign(4096, (n + 4095) & ~(size_t)4095); }

/* ---- sweeping ------------------------------------------------------------------------------------------- */

/* A scenario: run() does the work (its status), undo() frees what a successful run made; digest() (optional) sums
 * up a successful run's result: a run that got around a failed allocation must give the clean run's result. */
typedef struct {
    const char *name;
    omni_status (*run)(void *ctx);
    void (*undo)(void *ctx);
    void *ctx;
    uint64_t (*digest)(void *ctx);
} scenario;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static int clear_error(omni_status st) {
    const char *m = omni_last_error();
    return st == OMNI_ERR_NOMEM || (m && (strstr(m, "memory") || strstr(m, "Cannot allocate")));
}

/* One armed run failing allocation k (-1: none); returns the blocks leaked, *st the status, *seen the armed
 * allocations it made, *hit whether allocation k was reached. */
static long attempt(const scenario *s, long k, omni_status *st, long *seen, int *hit, uint64_t *dig) {
    long live0 = atomic_load(&g_live);
    g_seen = 0, g_fail_at = k, g_failed = 0;
    t_armed = 1;
    *st = s->run(s->ctx);
    t_armed = 0;
    *seen = g_seen, *hit = g_failed;
    *dig = !*st && s->digest ? s->digest(s->ctx) : 0;
    if (!*st) s->undo(s->ctx);
    return atomic_load(&g_live) - live0;
}

/* Count the scenario's allocations in a clean run, then fail each in turn (every one when they are <= 3000;
 * beyond, an even sample of about 3000). */
static void sweep(const scenario *s) {
    double t0 = omni_time_ms();
    omni_status st;
    long total = 0, tried = 0, errors = 0, seen;
    int hit;
    uint64_t ref, dig;
    long leaked = attempt(s, -1, &st, &total, &hit, &ref);
    CHECK(st == OMNI_OK && leaked == 0, "%s: clean run: %s, %ld blocks leaked", s->name, st ? omni_last_error() : "ok",
          leaked);
    long step = total > 3000 ? total / 3000 : 1;
    for (long k = 0, f0 = check_fail_; k < total && check_fail_ - f0 <= 12; k += step, tried++) {
        leaked = attempt(s, k, &st, &seen, &hit, &dig);
        CHECK(st || dig == ref, "%s: allocation %ld failed, the call succeeded with a different result", s->name, k);
        CHECK(hit, "%s: allocation %ld of %ld not reached (the run is not deterministic)", s->name, k, total);
        if (st) {
            errors++;
            CHECK(clear_error(st), "%s: allocation %ld failed: unclear error (status %d): %s", s->name, k, (int)st,
                  omni_last_error());
        }
        CHECK(leaked == 0, "%s: allocation %ld failed (%s): %ld blocks leaked", s->name, k,
              st ? omni_last_error() : "the call succeeded", leaked);
    }
    fprintf(stderr, "oom: %-22s %6ld allocations, %5ld failed in turn (every %ld), %5ld errors, %.1f s\n", s->name,
            total, tried, step, errors, (omni_time_ms() - t0) / 1000);
}

/* ---- load scenarios -------------------------------------------------------------------------------------- */

typedef struct {
    llm_model *m;
    llm_tokenizer *tok;
    media_encoder *enc;
    media_item it;
    llm_engine *e;
    float *ref; /* the clean run's embeddings (digest_media) */
    size_t ref_n;
} load_ctx;

static omni_status run_model(void *c) { return llm_model_load(MODEL, &((load_ctx *)c)->m); }
static void undo_model(void *c) { llm_model_free(((load_ctx *)c)->m), ((load_ctx *)c)->m = NULL; }
static omni_status run_tok(void *c) { return llm_tokenizer_load(MODEL "/tokenizer.json", &((load_ctx *)c)->tok); }
static void undo_tok(void *c) { llm_tokenizer_free(((load_ctx *)c)->tok), ((load_ctx *)c)->tok = NULL; }
static uint64_t digest_tok(void *c) { /* ids and decoded text of a mixed string */
    static const char text[] = "<|im_start|>user\nHello wörld 42, 日本語 ok?<|im_end|>";
    int32_t *ids = NULL;
    int n = 0;
    if (llm_tokenizer_encode(((load_ctx *)c)->tok, text, sizeof text - 1, 1, &ids, &n, NULL)) return 1;
    uint64_t h = fnv(14695981039346656037ull, ids, sizeof(int32_t) * (size_t)n);
    char *s = llm_tokenizer_decode(((load_ctx *)c)->tok, ids, n, 0);
    free(ids);
    h = s ? fnv(h, s, strlen(s)) : 1;
    free(s);
    return h;
}

/* encoder + first image (the vision tower loads on first use) */
static omni_status run_image(void *c) {
    load_ctx *x = c;
    media_params mp = media_default_params();
    mp.image_min_tokens = 4, mp.image_max_tokens = 16;
    omni_status st = media_encoder_init(x->m, MODEL, &mp, &x->enc);
    if (!st) st = media_encode_image(x->enc, IMAGE, &x->it);
    if (st) media_encoder_free(x->enc), x->enc = NULL;
    return st;
}
static void undo_media(void *c) {
    load_ctx *x = c;
    media_item_clear(&x->it);
    media_encoder_free(x->enc), x->enc = NULL;
}
/* 0 when the embeddings match the clean run's (kept on the first call): a fallback path may sum in another order
 * (e.g. op_linear without a tile buffer), so within 1e-4 of the largest value, not bit for bit. */
static uint64_t digest_media(void *c) {
    load_ctx *x = c;
    size_t n = (size_t)x->it.n_tokens * llm_model_config(x->m)->hidden;
    if (!x->ref) {
        x->ref = __libc_malloc(sizeof(float) * n); /* not counted: outside the leak check */
        memcpy(x->ref, x->it.embd, sizeof(float) * n);
        x->ref_n = n;
        return 0;
    }
    if (n != x->ref_n) return 1;
    float big = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        big = fabsf(x->ref[i]) > big ? fabsf(x->ref[i]) : big;
        err = fabsf(x->ref[i] - x->it.embd[i]) > err ? fabsf(x->ref[i] - x->it.embd[i]) : err;
    }
    return !(err <= 1e-4f * big);
}

static omni_status run_audio(void *c) {
    load_ctx *x = c;
    media_params mp = media_default_params();
    omni_status st = media_encoder_init(x->m, MODEL, &mp, &x->enc);
    if (!st) st = media_encode_audio(x->enc, AUDIO, &x->it);
    if (st) media_encoder_free(x->enc), x->enc = NULL;
    return st;
}

static omni_status run_engine(void *c) {
    load_ctx *x = c;
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = 4, ep.runner.n_threads = 1, ep.prefill_chunk = 32, ep.tok = x->tok;
    omni_status st = llm_engine_init(x->m, &ep, &x->e);
    static const char *modes[] = {"int2", "bf16"};
    int cache, conv;
    for (int i = 0; !st && i < 2; i++) {
        llm_cache_params cp = llm_cache_default_params();
        st = kv_parse_mode(modes[i], &cp.fmt);
        cp.ctx_tokens = 256, cp.max_seqs = 4;
        if (!st) st = llm_engine_add_cache(x->e, &cp, &cache);
    }
    if (!st) st = llm_engine_conv_new(x->e, cache, 256, &conv);
    if (st) llm_engine_free(x->e), x->e = NULL;
    return st;
}
static void undo_engine(void *c) { llm_engine_free(((load_ctx *)c)->e), ((load_ctx *)c)->e = NULL; }

/* ---- mid-run ------------------------------------------------------------------------------------------------ */

#define N_BG 3
#define N_GEN 12

typedef struct {
    int id, n, done, finish;
    int32_t toks[64];
    char error[256];
} req;

static void on_token(void *u, int id, int32_t t, const char *s, int n) {
    req *r = u;
    (void)id, (void)s, (void)n;
    if (t >= 0 && r->n < 64) r->toks[r->n++] = t;
}
static void on_done(void *u, int id, const llm_request_stats *s) {
    req *r = u;
    (void)id;
    r->done++, r->finish = s->finish;
    snprintf(r->error, sizeof r->error, "%s", s->error);
}

typedef struct {
    llm_model *m;
    llm_tokenizer *tok;
    media_encoder *enc;
    llm_engine *e;
    int cache;
    req bg[N_BG], ref[N_BG], fg, fg_ref;
} run_ctx;

static omni_status submit_text(run_ctx *x, const char *text, req *r, int max_tokens) {
    memset(r, 0, sizeof *r);
    int32_t *ids = NULL;
    int n = 0;
    omni_status st = llm_tokenizer_encode(x->tok, text, strlen(text), 0, &ids, &n, NULL);
    if (st) return st;
    llm_request q = llm_request_default_params();
    q.tokens = ids, q.n_tokens = n, q.cache = x->cache, q.max_tokens = max_tokens, q.ignore_eos = 1;
    q.sampling.temp = 0;
    q.cb = (llm_callbacks){on_token, NULL, on_done, r};
    st = llm_engine_submit(x->e, &q, &r->id);
    free(ids);
    return st;
}

/* The armed part: a chat turn with an image and an audio clip, encoded now, submitted while the background
 * requests run, then steps until everything has ended. */
static omni_status armed_request(run_ctx *x) {
    memset(&x->fg, 0, sizeof x->fg);
    char *body = llm_prompt_simple(NULL, "what do you see and hear", 1, 1);
    int32_t *ids = NULL;
    int n = 0;
    media_item it[2];
    memset(it, 0, sizeof it);
    media_prompt p;
    memset(&p, 0, sizeof p);
    omni_status st = body ? llm_tokenizer_encode(x->tok, body, strlen(body), 1, &ids, &n, NULL)
                          : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    free(body);
    if (!st) st = media_encode_image(x->enc, IMAGE, &it[0]);
    if (!st) st = media_encode_audio(x->enc, AUDIO, &it[1]);
    if (!st) st = media_prompt_build(x->enc, ids, n, it, 2, &p);
    free(ids);
    if (!st) {
        llm_request q = llm_request_default_params();
        media_prompt_request(&p, &q);
        q.cache = x->cache, q.max_tokens = N_GEN, q.ignore_eos = 1, q.sampling.temp = 0;
        q.cb = (llm_callbacks){on_token, NULL, on_done, &x->fg};
        st = llm_engine_submit(x->e, &q, &x->fg.id);
    }
    media_prompt_free(&p);
    media_item_clear(&it[0]);
    media_item_clear(&it[1]);
    int left = 1;
    for (int guard = 0; left > 0 && guard < 10000; guard++) llm_engine_step(x->e, &left);
    return st;
}

static const char *g_bg_text[N_BG] = {"the cat reads a long page", "rain falls on old roofs", "sing a song of 42"};

/* One round: background requests first (unarmed), then the armed request and the steps; checks after. */
static void mid_run_round(run_ctx *x, long fail_at, int *failed, int *hit, long *seen) {
    for (int i = 0; i < N_BG; i++) CHECK(submit_text(x, g_bg_text[i], &x->bg[i], N_GEN) == OMNI_OK, "bg submit");
    int left = 0;
    llm_engine_step(x->e, &left); /* the background requests are running when the failure comes */
    long live0 = atomic_load(&g_live);
    (void)live0;
    g_seen = 0, g_fail_at = fail_at, g_failed = 0;
    t_armed = 1;
    omni_status st = armed_request(x);
    t_armed = 0;
    *seen = g_seen, *hit = g_failed;
    *failed = st != OMNI_OK || x->fg.finish == LLM_FINISH_ERROR;
    if (st) CHECK(clear_error(st), "mid-run: allocation %ld failed: unclear error (status %d): %s", fail_at, (int)st,
                  omni_last_error());
    else CHECK(x->fg.done == 1, "mid-run: the armed request ended %d times", x->fg.done);
    if (!st && x->fg.finish == LLM_FINISH_ERROR)
        CHECK(strstr(x->fg.error, "memory"), "mid-run: allocation %ld: request error unclear: %s", fail_at, x->fg.error);
    if (!*failed && x->fg_ref.n) /* a failure the code got around: the answer must still be the same */
        CHECK(x->fg.n == x->fg_ref.n && !memcmp(x->fg.toks, x->fg_ref.toks, sizeof(int32_t) * x->fg.n),
              "mid-run: allocation %ld failed, the request went on but answered differently (%d tokens)", fail_at,
              x->fg.n);
    for (int i = 0; i < N_BG; i++) { /* the others: untouched */
        CHECK(x->bg[i].done == 1 && x->bg[i].finish == LLM_FINISH_LENGTH && x->bg[i].n == N_GEN &&
                  !memcmp(x->bg[i].toks, x->ref[i].toks, sizeof(int32_t) * N_GEN),
              "mid-run: allocation %ld failed: background request %d ended %d times, finish %d, %d tokens (%s)",
              fail_at, i, x->bg[i].done, x->bg[i].finish, x->bg[i].n, x->bg[i].error);
    }
}

static void mid_run(load_ctx *lc) {
    run_ctx x;
    memset(&x, 0, sizeof x);
    x.m = lc->m, x.tok = lc->tok;
    media_params mp = media_default_params();
    mp.image_min_tokens = 4, mp.image_max_tokens = 16;
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = 8, ep.runner.n_threads = 1, ep.prefill_chunk = 16, ep.tok = x.tok;
    omni_status st = media_encoder_init(x.m, MODEL, &mp, &x.enc);
    if (!st) st = llm_engine_init(x.m, &ep, &x.e);
    llm_cache_params cp = llm_cache_default_params();
    if (!st) st = kv_parse_mode("int2", &cp.fmt);
    cp.ctx_tokens = 256, cp.max_seqs = 8;
    if (!st) st = llm_engine_add_cache(x.e, &cp, &x.cache);
    CHECK(st == OMNI_OK, "mid-run setup: %s", omni_last_error());
    if (st) return;
    /* reference tokens of the background requests; warm-up of everything the rounds touch */
    int failed, hit;
    long seen = 0;
    for (int i = 0; i < N_BG; i++) submit_text(&x, g_bg_text[i], &x.ref[i], N_GEN);
    int left = 1;
    while (left > 0) llm_engine_step(x.e, &left);
    mid_run_round(&x, -1, &failed, &hit, &seen);
    x.fg_ref = x.fg;
    CHECK(!failed && x.fg.n == N_GEN, "mid-run: the clean request gave %d tokens", x.fg.n);
    mid_run_round(&x, -1, &failed, &hit, &seen);
    long live0 = atomic_load(&g_live), total = seen, step = total > 2000 ? total / 2000 : 1, tried = 0, errors = 0;
    double t0 = omni_time_ms();
    for (long k = 0, f0 = check_fail_; k <= total; k += step) {
        mid_run_round(&x, k, &failed, &hit, &seen);
        tried++, errors += failed;
        long leaked = atomic_load(&g_live) - live0;
        CHECK(leaked == 0, "mid-run: allocation %ld failed: %ld blocks leaked", k, leaked);
        if (!hit) break;
        if (check_fail_ - f0 > 12) break;
    }
    /* the engine still serves a full request afterwards */
    mid_run_round(&x, -1, &failed, &hit, &seen);
    CHECK(!failed && x.fg.n == N_GEN, "after the failures: a clean request gave %d tokens (failed %d)", x.fg.n,
          failed);
    fprintf(stderr, "oom: %-22s %6ld allocations, %5ld failed in turn (every %ld), %5ld request errors, %.1f s\n",
            "mid-run request", total, tried, step, errors, (omni_time_ms() - t0) / 1000);
    llm_engine_free(x.e);
    media_encoder_free(x.enc);
}

int main(void) {
    omni_log_set_level(0);
    load_ctx lc;
    memset(&lc, 0, sizeof lc);
    /* warm-up: the libraries' one-time allocations (OpenMP pool, BLAS) happen before counting */
    omni_status st = llm_model_load(MODEL, &lc.m);
    if (!st) st = llm_tokenizer_load(MODEL "/tokenizer.json", &lc.tok);
    if (!st) st = run_image(&lc);
    if (!st) undo_media(&lc);
    if (!st) st = run_audio(&lc);
    if (!st) undo_media(&lc);
    if (!st) st = run_engine(&lc);
    if (!st) undo_engine(&lc);
    CHECK(st == OMNI_OK, "warm-up: %s", omni_last_error());
    if (st) return check_exit();
    llm_model *keep_m = lc.m;
    llm_tokenizer *keep_tok = lc.tok;
    lc.m = NULL, lc.tok = NULL;
    scenario s[] = {{"model load", run_model, undo_model, &lc, NULL}, {"tokenizer load", run_tok, undo_tok, &lc, digest_tok}};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) sweep(&s[i]);
    lc.m = keep_m, lc.tok = keep_tok;
    scenario t[] = {{"encoder + image", run_image, undo_media, &lc, digest_media},
                    {"encoder + audio", run_audio, undo_media, &lc, digest_media},
                    {"engine + caches", run_engine, undo_engine, &lc, NULL}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sweep(&t[i]);
        __libc_free(lc.ref), lc.ref = NULL;
    }
    mid_run(&lc);
    llm_tokenizer_free(lc.tok);
    llm_model_free(lc.m);
    return check_exit();
}
#else
int main(void) {
    printf("SKIP: sanitizer builds own malloc (no failing-allocation hook)\n");
    return 77;
}
#endif
