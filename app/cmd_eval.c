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

/* Both requests score the same text in the same steps (same chunks, admitted together): the reference's rows of
 * a step arrive first and wait in `ref` (row p at p % chunk) until the mode's row p comes. */
typedef struct {
    kl_stats *k;
    const int32_t *ids;
    int n, V, chunk, ref_id, lost;
    float *ref, *tmp;  /* [chunk][V], [V] */
    int *ref_pos;      /* [chunk] position held in each ref row (-1 none) */
    llm_request_stats st[2];
} kl_run;

static void kl_logits(void *user, int id, int pos, const float *lg, int V) {
    kl_run *r = user;
    int slot = pos % r->chunk;
    if (id == r->ref_id) {
        memcpy(r->ref + (size_t)slot * V, lg, sizeof(float) * V);
        r->ref_pos[slot] = pos;
        return;
    }
    if (r->ref_pos[slot] != pos) {
        r->lost++;
        return;
    }
    float *lr = r->ref + (size_t)slot * V;
    memcpy(r->tmp, lg, sizeof(float) * V);
    log_softmax(lr, V);
    log_softmax(r->tmp, V);
    add_position(r->k, lr, r->tmp, V, pos + 1 < r->n ? r->ids[pos + 1] : -1);
    r->ref_pos[slot] = -1;
}

static void kl_done(void *user, int id, const llm_request_stats *st) {
    kl_run *r = user;
    r->st[id == r->ref_id ? 0 : 1] = *st;
}

/* Score ids[0..n) on the reference cache (ref) and the mode's cache (mode) chunk by chunk. */
static omni_status run_kl(omni_session *s, int ref, int mode, const int32_t *ids, int n, int chunk, kl_stats *k) {
    int V = s->cfg->vocab, rid[2];
    kl_run r = {k, ids, n, V, chunk, 0, 0, malloc(sizeof(float) * (size_t)chunk * V), malloc(sizeof(float) * V),
                malloc(sizeof(int) * chunk), {{0}}};
    omni_status st = r.ref && r.tmp && r.ref_pos ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < chunk; i++) r.ref_pos[i] = -1;
    llm_request q[2];
    for (int i = 0; i < 2; i++) {
        q[i] = llm_request_default_params();
        q[i].tokens = ids, q[i].n_tokens = n, q[i].max_tokens = 0, q[i].cache = i ? mode : ref;
        q[i].logits = LLM_LOGITS_ALL, q[i].prefill_chunk = chunk;
        q[i].cb = (llm_callbacks){NULL, kl_logits, kl_done, &r};
    }
    if (!st) st = llm_engine_submit_n(s->engine, q, 2, rid);
    if (!st) {
        r.ref_id = rid[0];
        session_run(s, rid, 2);
        for (int i = 0; i < 2 && !st; i++)
            if (r.st[i].status) st = omni_fail(r.st[i].status, "%s", r.st[i].error);
        if (!st && r.lost) st = omni_fail(OMNI_ERR_RUNTIME, "internal: %d positions lost their reference row", r.lost);
        session_add_stats(s, &r.st[1]);
    }
    free(r.ref);
    free(r.tmp);
    free(r.ref_pos);
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
    int n = 0, chunk = a->chunk > 0 ? a->chunk : 1;
    omni_session s;
    memset(&s, 0, sizeof s);
    omni_status st = omni_args_prompt(&args, &text);
    if (!st) st = session_open(&s, &args, 2, chunk, 2 * chunk);
    s.interrupted = intr;
    if (!st) st = session_tokenize(&s, text, &ids, &n);
    int ctx = a->ctx_set ? a->ctx : n, n_text = n;
    if (n > ctx) n = ctx;
    if (!st && n < 2)
        st = n < n_text ? omni_fail(OMNI_ERR_USAGE, "eval kl: --ctx %d keeps %d of the text's %d tokens; need at least 2",
                                    ctx, n, n_text)
                        : omni_fail(OMNI_ERR_USAGE, "eval kl: the text has %d token%s; need at least 2", n,
                                    n == 1 ? "" : "s");
    int ref = 0, mode = 0;
    if (!st) st = session_add_cache(&s, "bf16", n, 1, &ref);
    if (!st) st = session_add_cache(&s, NULL, n, 1, &mode);
    kl_stats k = {0};
    k.kl = st ? NULL : malloc(sizeof(double) * n);
    if (!st && !k.kl) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = run_kl(&s, ref, mode, ids, n, chunk, &k);
    if (!st && !*intr) {
        llm_cache_stats cs;
        llm_engine_cache_stats(s.engine, mode, &cs);
        report(&args, cs.format, &k, n, chunk);
        session_print_perf(&s);
    } else if (!st) {
        session_print_perf(&s); /* Ctrl+C: what was done (exit 130) */
    }
    free(k.kl);
    free(ids);
    free(text);
    session_close(&s);
    return st;
}
