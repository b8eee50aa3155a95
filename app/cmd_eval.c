/* cmd_eval.c - `omni eval kl`: teacher-forced comparison of a KV cache format against a BF16 cache in one run.
 *
 * The text is fed in chunks of --chunk tokens (default 1, i.e. exactly as generation feeds tokens, so every
 * query attends to the stored - possibly quantized - history). At every position both caches give next-token
 * distributions P (bf16) and Q (mode); reported: mean and 99th-percentile KL(P||Q), top-1 agreement, and the
 * perplexity of the text under both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/session.h"
#include "llm/config.h"

typedef struct {
    double *kl;   /* [n] per position */
    int n, agree;
    double nll_ref, nll_mode;
} kl_stats;

/* log-softmax in place (double accumulation). */
static void log_softmax(float *x, int V) {
    float mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)x[i] - mx);
    float lse = mx + (float)log(s);
    for (int i = 0; i < V; i++) x[i] -= lse;
}

static int argmax(const float *x, int V) {
    int b = 0;
    for (int i = 1; i < V; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* Accumulate one position: lp/lq are log-probabilities, next is the actual next token (-1 at the end). */
static void add_position(kl_stats *k, const float *lp, const float *lq, int V, int next) {
    double kl = 0;
    for (int i = 0; i < V; i++) {
        double p = exp((double)lp[i]);
        if (p > 0) kl += p * ((double)lp[i] - lq[i]);
    }
    k->kl[k->n++] = kl > 0 ? kl : 0;
    k->agree += argmax(lp, V) == argmax(lq, V);
    if (next >= 0) {
        k->nll_ref -= lp[next];
        k->nll_mode -= lq[next];
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const omni_args *a, const char *mode, kl_stats *k, int n_tokens, int chunk) {
    double mean = 0;
    for (int i = 0; i < k->n; i++) mean += k->kl[i];
    mean /= k->n;
    qsort(k->kl, k->n, sizeof(double), cmp_double);
    double p99 = k->kl[(int)floor(0.99 * (k->n - 1))];
    int npred = n_tokens - 1;
    double ppl_ref = exp(k->nll_ref / npred), ppl_mode = exp(k->nll_mode / npred);
    if (a->json) {
        printf("{\"mode\": \"%s\", \"ref\": \"bf16\", \"tokens\": %d, \"chunk\": %d, \"mean_kl\": %.6g, "
               "\"p99_kl\": %.6g, \"top1_agree\": %.6f, \"ppl_ref\": %.6g, \"ppl_mode\": %.6g}\n",
               mode, n_tokens, chunk, mean, p99, (double)k->agree / k->n, ppl_ref, ppl_mode);
        return;
    }
    printf("| mode | tokens | mean KL | p99 KL | top-1 agree | PPL bf16 | PPL mode |\n");
    printf("|---|---|---|---|---|---|---|\n");
    printf("| %s | %d | %.6f | %.6f | %.2f%% | %.4f | %.4f |\n", mode, n_tokens, mean, p99,
           100.0 * k->agree / k->n, ppl_ref, ppl_mode);
}

/* Feed ids[0..n) through both caches chunk by chunk, collecting statistics. */
static omni_status run_kl(omni_session *s, kv_cache *ref, int rseq, kv_cache *kv, int seq, const int32_t *ids, int n,
                          int chunk, kl_stats *k) {
    int V = s->cfg->vocab;
    float *lr = malloc(sizeof(float) * (size_t)chunk * V), *lm = malloc(sizeof(float) * (size_t)chunk * V);
    omni_status st = lr && lm ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int c0 = 0; !st && c0 < n; c0 += chunk) {
        int T = n - c0 < chunk ? n - c0 : chunk;
        llm_input in = {T, ids + c0, NULL, 0, NULL};
        if ((st = llm_forward_ex(s->model, ref, rseq, &in, lr, 1))) break;
        if ((st = llm_forward_ex(s->model, kv, seq, &in, lm, 1))) break;
        for (int t = 0; t < T; t++) {
            log_softmax(lr + (size_t)t * V, V);
            log_softmax(lm + (size_t)t * V, V);
            add_position(k, lr + (size_t)t * V, lm + (size_t)t * V, V, c0 + t + 1 < n ? ids[c0 + t + 1] : -1);
        }
        if (s->interrupted && *s->interrupted) break;
    }
    free(lr);
    free(lm);
    return st;
}

omni_status cmd_eval(const omni_args *a, volatile int *intr) {
    if (a->n_positional < 1 || strcmp(a->positional[0], "kl"))
        return omni_fail(OMNI_ERR_USAGE, "usage: omni eval kl -m MODEL --kv MODE --text FILE [--ctx N] [--chunk N]");
    if (!a->text_file) return omni_fail(OMNI_ERR_USAGE, "eval kl: --text FILE is required");
    omni_args args = *a;
    args.prompt_file = a->text_file;
    args.prompt = NULL;
    args.n_positional = 0;
    char *text = NULL;
    int32_t *ids = NULL;
    int n = 0;
    omni_session s;
    memset(&s, 0, sizeof s);
    omni_status st = omni_args_prompt(&args, &text);
    if (!st) st = session_open(&s, &args);
    s.interrupted = intr;
    if (!st) st = session_tokenize(&s, text, &ids, &n);
    int ctx = a->ctx_set ? a->ctx : n;
    if (n > ctx) n = ctx;
    if (!st && n < 2) st = omni_fail(OMNI_ERR_USAGE, "eval kl: the text has %d tokens; need at least 2", n);
    kv_cache *ref = NULL, *kv = NULL;
    int rseq = 0, seq = 0;
    if (!st) st = session_new_cache(&s, "bf16", n, &ref, &rseq);
    if (!st) st = session_new_cache(&s, NULL, n, &kv, &seq);
    kl_stats k = {0};
    k.kl = st ? NULL : malloc(sizeof(double) * n);
    if (!st && !k.kl) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int chunk = a->chunk > 0 ? a->chunk : 1;
    if (!st) st = run_kl(&s, ref, rseq, kv, seq, ids, n, chunk, &k);
    if (!st && !*intr) {
        char name[64];
        kv_format_name(kv_layer_format(kv, 0), name, sizeof name);
        report(&args, name, &k, n, chunk);
    }
    free(k.kl);
    kv_free(ref);
    kv_free(kv);
    free(ids);
    free(text);
    session_close(&s);
    return st;
}
