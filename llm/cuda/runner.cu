/* runner.cu - the CUDA decoder step (llm_cuda.h): device weights, workspace, KV caches on the device, step inputs,
 * the layer loop on kernels/cuda ops, logits and device sampling, CUDA graphs of decode steps per batch bucket.
 *
 * Dimension letters: T rows of the step, H hidden, Hq/Hkv heads, D head_dim, Q = (Hq + 2·Hkv)·D fused QKV width,
 * I intermediate (MoE: moe_intermediate), E experts, k experts per token, V vocab, S max_seqs, O output rows.
 * One layer (rows in entry order; the residual x stays bf16 as in transformers):
 *   h = rmsnorm(x) (fused with the previous residual add) -> qkv = h·Wqkvᵀ -> q/k norm + MRoPE in place ->
 *   append k, v -> att = attention -> o = att·Woᵀ -> x += o, h = rmsnorm(x) -> MLP (dense: gu = h·Wguᵀ,
 *   act = swiglu(gu), m = act·Wdᵀ; MoE: router, top-k, experts, combine) -> x += m (-> DeepStack rows).
 * Decode-sized steps (T <= 4) fuse the dense chain (OMNI_CUDA_FUSE=0 at init: off): "x += o, h = rmsnorm(x)" runs
 * in the gate/up GEMV's prologue, SwiGLU in the down GEMV's, "x += m, h = the next input norm" in the next qkv
 * GEMV's (omni_cuda_add_rmsnorm_linear / omni_cuda_swiglu_linear, bit for bit the separate ops at H >= 2048); each
 * fused add writes the residual into the other of two buffers (x, x2: other blocks still read the old one).
 * Decode-sized MoE steps fold both add + RMSNorm around the block into its kernels (omni_cuda_moe_decode_res, the
 * same bits; OMNI_CUDA_MOE=split or =fused at init: the separate launches around omni_cuda_moe_decode_split /
 * _fused, for A/B timing).
 * Attention and KV: each cache is a kv_dev (kvcache/kv_dev.h: pages on the device, append with quantization)
 * plus a kv_cache on the host for the bookkeeping the engine reads (kv_reserve / kv_commit keep both in step).
 * Rows are grouped by cache; per layer and cache: head_dim 64/128 -> kvc_prefill_hist (a quantizing cache's
 * packed history dequantized once per layer into the cache's scratch) then kv_dev_append for steps with a chunk;
 * kv_dev_append then kvc_decode for decode steps of bf16 layers, kvc_decode_step for quantized layers (the new token
 * from the step's rows as kv_forward takes it, a block leaving the window in this step read from its window page;
 * kvcache/kv_cuda.h); other head dims (small test models) -> kv_dev_append and the SIMT attention of attn_ref.h
 * (committed pages + the step's own rows).
 * Step inputs travel in pinned buffers: int32 [ids T | pos 3T | src_row T | row_slot T | row_pos T | out_row T |
 * ent_slot T | ent_new T | ent_row0 T + 1 | ds_dst 4T] (offsets depend on T only, so a graph of bucket T always
 * reads the same addresses), bf16 span rows [n_sp][H] and DeepStack rows [level][n][H], and per output row the
 * sampling parameters and uniform.
 * The small kernels and the decode GEMVs are programmatic dependent launches (each may start while the one before
 * finishes; kernels/cuda/common.cuh). Decode-sized steps (T <= max_seqs) also fork a side branch (stream s2,
 * after the qkv GEMV, joined before o_proj) that prefetches o_proj's weights into L2 while a short-context attention leaves
 * HBM idle (omni_cuda_l2_prefetch) when OMNI_CUDA_PREFETCH=1 at init: OFF by default since session 5 call B (8B bs1/4K:
 * bf16 -2.4%, int2 -15%: its reads compete with the attention's).
 * Decode steps of a quantized layer run its append on the side stream (kvc_decode_step reads the new token from
 * k/v and the history as committed, so nothing of this step waits for the append): forked after q/k norm + RoPE,
 * joined before the next layer's q/k norm + RoPE (it rewrites k/v) and at the end of the step, so the append leaves
 * the chain of dependent kernels (OMNI_CUDA_SIDE_APPEND=0 at init: in the chain, A/B timing; profiled steps keep
 * it in the chain). OMNI_CUDA_SIDE_APPEND=2: bf16 layers too, their attention through kvc_decode_step (the new
 * token from k/v in f32 instead of from the pages; the split family instead of a dedicated bf16 kernel). */
#include "llm/cuda/llm_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVC_EMU
#include <cuda_runtime.h>
#endif

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/ops_cuda.h"
#include "kvcache/kv_cuda.h"
#include "kvcache/kv_dev.h"
#include "llm/cuda/attn_ref.h"
#include "llm/cuda/weights.h"
#include "llm/sampler.h"

#define MAX_DS 4       /* DeepStack levels */
#define SPLIT_LEN 256  /* attention keys per split in graphs */
#define ENTRY_MAX 64   /* MoE entries (T·k) up to which omni_cuda_moe_decode runs (omni_cuda_moe_prefill past it) */
#define N_BUCKETS 12   /* decode graph buckets: 1, 2, 4, ..., max_seqs */
#define MAX_CACHES 16  /* KV caches per runner (index 0 unused) */
#define OUT_MIN 64     /* output rows per lm_head pass: max(max_seqs, OUT_MIN) */
#define HIST_MAX 131072 /* packed history tokens dequantized once per layer and prefill step (kvc_prefill_hist) */
#define PF_BYTES (24 << 20) /* o_proj weights prefetched into L2 during a short-context attention (of ~50 MB) */
#define PF_KEYS 8192        /* ... when the step's rows attend to at most this many keys in all */

typedef struct {
    int T;            /* bucket */
    int64_t max_keys; /* longest attended prefix the graph's attention covers (SIMT path: its fixed splits) */
    cudaGraphExec_t exec;
} graph_slot;

enum { P_EMBED, P_NORM, P_QKV, P_QKR, P_APPEND, P_ATTN, P_O, P_MLP, P_SWIGLU, P_ROUTE, P_EXPERTS, P_RESID, P_HEAD,
       P_SAMPLE, P_COUNT };
static const char *g_prof_names[P_COUNT] = {"embed",     "norm",      "qkv",    "qk_norm_rope", "kv_append",
                                            "attention", "o_proj",    "mlp_gemm", "swiglu",     "moe_route",
                                            "moe_experts", "residual", "lm_head", "sample"};
#define PROF_EVENTS 4096

/* Decode MoE paths: omni_cuda_moe_decode_res (the block with the residual adds around it; default),
 * omni_cuda_moe_decode_split (three kernels) or omni_cuda_moe_decode_fused (one kernel) between add_rmsnorm launches. */
enum { MOE_RES, MOE_SPLIT, MOE_FUSED };

typedef struct {
    kv_cache *kv;  /* host bookkeeping, the handle callers use (NULL: free table entry) */
    kv_dev *dev;   /* the pages on the device */
    int slots;     /* max_seqs */
    int fast;      /* attention through kvc_prefill / kvc_decode (head_dim 64/128); else attn_ref.h */
    kv_layer_view *views; /* [L] device views (pointers fixed for the cache's life) */
    uint16_t *hist;       /* kvc_prefill_hist's scratch (quantizing caches on the fast path), hist_tokens tokens */
    int64_t hist_tokens;
    graph_slot graphs[N_BUCKETS];
    int n_graphs;
} dev_cache;

struct llm_cuda {
    llm_cuda_params p;
    int H, L, Hq, Hkv, D, Q, I, V, E, K, norm_topk, T_max, S, O;
    float eps;
    omni_cuda_ctx *ctx;
    cudaStream_t s;
    cudaStream_t s2;            /* side stream: L2 prefetch of o_proj's weights beside the attention (decode) */
    cudaEvent_t ev_fork, ev_join;
    cudaEvent_t ev_afork, ev_ajoin; /* the side append's fork and join */
    int side_append;            /* decode layers that append on s2: 0 none, 1 quantized (default), 2 all */
    int apend;                  /* a side append is in flight: join before k/v are rewritten and at the step's end */
    int prefetch;               /* OMNI_CUDA_PREFETCH=1 at init turns the side-stream prefetch on (A/B timing) */
    int fuse;                   /* decode: norms / SwiGLU in the GEMVs' prologues (OMNI_CUDA_FUSE=0 at init: off) */
    uint16_t *xc;               /* the step's residual: x or x2 (a fused add writes the other buffer) */
    int pend;                   /* xc += hb and the next input norm are left to the next layer's qkv GEMV */
    int moe_mode;               /* decode MoE (OMNI_CUDA_MOE at init, A/B timing): MOE_RES, MOE_SPLIT, MOE_FUSED */
    lcw_weights w;
    dev_cache caches[MAX_CACHES + 1];
    kvc_attn *attn; /* tensor-core attention workspace (head_dim 64/128) */
    /* workspace (one allocation) */
    void *ws;
    size_t ws_bytes;
    uint16_t *x, *x2, *ha, *hb, *qkv, *q, *k, *v, *att, *gu, *act, *hl, *kvfill;
    float *logits, *attn_ws;
    int64_t attn_ws_floats;
    omni_cuda_moe_scratch moe;  /* omni_cuda_moe_decode's (ticket zeroed at init) */
    void *moe_ws;               /* omni_cuda_moe_prefill's scratch */
    size_t moe_ws_bytes;
    int32_t *tok;
    omni_cuda_sample_params *sp_dev;
    double *u_dev;
    int32_t *in_dev;    /* the packed int32 inputs */
    uint16_t *rows_dev; /* span rows [T_max][H], then DeepStack rows [MAX_DS][T_max][H] */
    /* pinned host mirrors */
    int32_t *in_host, *tok_host;
    uint16_t *rows_host;
    omni_cuda_sample_params *sp_host;
    double *u_host;
    /* per-step host scratch (sized at init) */
    int *ent_cache, *grp_seq, *grp_new, *out_ent, *order; /* order: entries grouped by cache (row order) */
    int grp_c[MAX_CACHES + 1], grp_e0[MAX_CACHES + 2], grp_r0[MAX_CACHES + 2], n_grp; /* this step's cache groups */
    int grp_maxq[MAX_CACHES + 1];
    size_t peak;
    int fail_in; /* llm_cuda_inject_failure: steps until an injected failure (0: none) */
    /* llm_cuda_force_routing (tests): one device block [forced sel L·T·k | sel_e T·k | sel_w T·k | logits T·E |
     * gu T·k·2I | act T·k·I | out T·k·H]; force_T 0: off */
    void *force;
    int force_T;
    /* profiling (params.profile): event pairs of the step in flight and the totals per kind */
    cudaEvent_t *ev;
    int prof_on, n_ev, ev_kind[PROF_EVENTS / 2];
    double prof_ms[P_COUNT];
};

/* Run `call` as op kind `k`: with profiling, between two recorded events. */
#define OP(r, k, call)                                                                                          \
    do {                                                                                                       \
        int pe_ = (r)->prof_on && (r)->n_ev + 2 <= PROF_EVENTS;                                                \
        if (pe_) cudaEventRecord((r)->ev[(r)->n_ev], (r)->s);                                                  \
        omni_status st_ = (call);                                                                              \
        if (pe_) cudaEventRecord((r)->ev[(r)->n_ev + 1], (r)->s), (r)->ev_kind[(r)->n_ev / 2] = (k),           \
                 (r)->n_ev += 2;                                                                               \
        if (st_) return st_;                                                                                   \
    } while (0)

/* ---- sizes and the workspace -------------------------------------------------------------------------------- */

typedef struct {
    char *base;
    size_t off;
} carver;

static void *carve(carver *c, size_t bytes) {
    size_t o = (c->off + 255) / 256 * 256;
    c->off = o + bytes;
    return c->base ? c->base + o : NULL;
}

static int64_t ints_per_step(const llm_cuda *r) { return (10 + MAX_DS) * (int64_t)r->T_max + 1; }

/* One walk assigns every workspace pointer (base NULL: size only). */
static size_t carve_ws(llm_cuda *r, char *base) {
    carver c = {base, 0};
    const size_t T = r->T_max, H = r->H, O = r->O;
    r->x = (uint16_t *)carve(&c, 2 * T * H);
    r->x2 = (uint16_t *)carve(&c, 2 * T * H);
    r->ha = (uint16_t *)carve(&c, 2 * T * H);
    r->hb = (uint16_t *)carve(&c, 2 * T * H);
    r->qkv = (uint16_t *)carve(&c, 2 * T * r->Q);
    r->q = (uint16_t *)carve(&c, 2 * T * r->Hq * r->D);
    r->k = (uint16_t *)carve(&c, 2 * T * r->Hkv * r->D);
    r->v = (uint16_t *)carve(&c, 2 * T * r->Hkv * r->D);
    r->att = (uint16_t *)carve(&c, 2 * T * r->Hq * r->D);
    r->hl = (uint16_t *)carve(&c, 2 * O * H);
    r->logits = (float *)carve(&c, 4 * O * r->V);
    r->attn_ws = (float *)carve(&c, 4 * (size_t)r->attn_ws_floats);
    if (r->E) {
        const size_t n = ENTRY_MAX; /* decode entries */
        r->moe.logits = (float *)carve(&c, 4 * n * r->E);
        r->moe.sel_e = (int32_t *)carve(&c, 4 * n);
        r->moe.sel_w = (float *)carve(&c, 4 * n);
        r->moe.act = (uint16_t *)carve(&c, 2 * n * r->I);
        r->moe.ticket = (unsigned *)carve(&c, OMNI_CUDA_MOE_CTL_BYTES);
        r->moe.out = (uint16_t *)carve(&c, 2 * n * H); /* T <= n rows */
        r->moe_ws_bytes = omni_cuda_moe_prefill_scratch(r->T_max, r->E, r->K, r->H, r->I);
        r->moe_ws = carve(&c, r->moe_ws_bytes);
    } else {
        r->gu = (uint16_t *)carve(&c, 2 * T * 2 * r->I);
        r->act = (uint16_t *)carve(&c, 2 * T * r->I);
    }
    r->tok = (int32_t *)carve(&c, 4 * O);
    r->sp_dev = (omni_cuda_sample_params *)carve(&c, sizeof(omni_cuda_sample_params) * O);
    r->u_dev = (double *)carve(&c, sizeof(double) * O);
    r->in_dev = (int32_t *)carve(&c, 4 * (size_t)ints_per_step(r));
    r->rows_dev = (uint16_t *)carve(&c, 2 * (1 + MAX_DS) * T * H);
    return (c.off + 255) / 256 * 256;
}

static size_t carve_pinned(llm_cuda *r, char *base) {
    carver c = {base, 0};
    r->in_host = (int32_t *)carve(&c, 4 * (size_t)ints_per_step(r));
    r->rows_host = (uint16_t *)carve(&c, 2 * (1 + MAX_DS) * (size_t)r->T_max * r->H);
    r->tok_host = (int32_t *)carve(&c, 4 * (size_t)r->O);
    r->sp_host = (omni_cuda_sample_params *)carve(&c, sizeof(omni_cuda_sample_params) * r->O);
    r->u_host = (double *)carve(&c, sizeof(double) * r->O);
    return c.off;
}

/* SIMT attention workspace (head dims the tensor-core kernels do not take): decode of max_seqs rows with every
 * split of max_cap keys, or T_max rows with two splits. */
static int64_t attn_floats(const llm_cuda *r, int64_t max_cap) {
    if ((r->D == 64 || r->D == 128) && !r->p.simt_attention) return 1;
    int64_t splits = (max_cap + SPLIT_LEN - 1) / SPLIT_LEN;
    int64_t dec = lca_workspace_floats(r->S, r->Hq, r->D, (int)splits);
    int64_t pre = lca_workspace_floats(r->T_max, r->Hq, r->D, 2);
    return dec > pre ? dec : pre;
}

/* ---- init / free --------------------------------------------------------------------------------------------- */

llm_cuda_params llm_cuda_default_params(void) {
    llm_cuda_params p = {0, 64, 512, 1, -1};
    return p;
}

int llm_cuda_max_seqs(const llm_config *c, const char **why) {
    const int attn = c->head_dim == 64 || c->head_dim == 128; /* the tensor-core decode attention's batch */
    if (why) *why = attn ? "the sequence limit of the CUDA attention" : "the runner's sequence limit";
    return attn && KVC_MAX_SEQS < LLM_RUNNER_MAX_SEQS ? KVC_MAX_SEQS : LLM_RUNNER_MAX_SEQS;
}

static omni_status check_params(const llm_config *c, const llm_cuda_params *p) {
    if (p->max_seqs < 1 || p->max_seqs > LLM_RUNNER_MAX_SEQS || p->max_tokens < 1 || p->max_tokens > (1 << 20))
        return omni_fail(OMNI_ERR_USAGE, "llm_cuda: max_seqs %d (1..%d), max_tokens %d (1..%d)", p->max_seqs,
                         LLM_RUNNER_MAX_SEQS, p->max_tokens, 1 << 20);
    if (c->head_dim != 32 && c->head_dim != 64 && c->head_dim != 128 && c->head_dim != 256)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "llm_cuda: head_dim %d (32, 64, 128 or 256)", c->head_dim);
    if (c->n_heads % c->n_kv_heads || c->n_heads / c->n_kv_heads > 8)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "llm_cuda: %d query heads per kv head (at most 8)",
                         c->n_heads / c->n_kv_heads);
    const char *why;
    const int most = llm_cuda_max_seqs(c, &why);
    if (p->max_seqs > most)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "llm_cuda: max_seqs %d > %d (%s)", p->max_seqs, most, why);
    if (c->hidden % 8 || (c->n_experts ? c->moe_intermediate : c->intermediate) % 8)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "llm_cuda: hidden %d / intermediate not multiples of 8", c->hidden);
    return OMNI_OK;
}

static void set_dims(llm_cuda *r, const llm_config *c, const llm_cuda_params *p) {
    r->p = *p;
    r->H = c->hidden, r->L = c->n_layers, r->Hq = c->n_heads, r->Hkv = c->n_kv_heads, r->D = c->head_dim;
    r->Q = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim, r->V = c->vocab, r->E = c->n_experts;
    r->I = r->E ? c->moe_intermediate : c->intermediate, r->K = r->E ? c->top_k : 0;
    r->norm_topk = c->norm_topk_prob, r->eps = c->rms_eps, r->S = p->max_seqs;
    r->T_max = p->max_tokens > p->max_seqs ? p->max_tokens : p->max_seqs; /* a decode step of every entry fits */
    r->O = r->S > OUT_MIN ? r->S : OUT_MIN;
}

static omni_status gib_check(const char *what, int device, size_t need, const char *detail) {
    size_t fr = 0, total = 0;
    OMNI_CUDA_TRY(cudaMemGetInfo(&fr, &total));
    if (need > fr)
        return omni_fail(OMNI_ERR_NOMEM, "%s needs %.2f GiB on cuda:%d (%s), %.2f GiB free", what,
                         need / 1073741824.0, device, detail, fr / 1073741824.0);
    return OMNI_OK;
}

/* Everything but the weights and the caches, after the memory check. */
static omni_status init_common(llm_cuda *r, size_t weight_bytes) {
    int n_dev = 0;
    omni_status st = omni_cuda_available(&n_dev);
    if (!st && r->p.device >= n_dev)
        return omni_fail(OMNI_ERR_RUNTIME, "--device cuda: no CUDA device %d (%d found); use --device cpu",
                         r->p.device, n_dev);
    if ((st = omni_cuda_ctx_init(&r->ctx, r->p.device))) return st;
    r->s = (cudaStream_t)omni_cuda_ctx_stream(r->ctx);
    OMNI_CUDA_TRY(cudaStreamCreateWithFlags(&r->s2, cudaStreamNonBlocking));
    OMNI_CUDA_TRY(cudaEventCreateWithFlags(&r->ev_fork, cudaEventDisableTiming));
    OMNI_CUDA_TRY(cudaEventCreateWithFlags(&r->ev_join, cudaEventDisableTiming));
    OMNI_CUDA_TRY(cudaEventCreateWithFlags(&r->ev_afork, cudaEventDisableTiming));
    OMNI_CUDA_TRY(cudaEventCreateWithFlags(&r->ev_ajoin, cudaEventDisableTiming));
    const char *sa = getenv("OMNI_CUDA_SIDE_APPEND");
    r->side_append = sa && !strcmp(sa, "0") ? 0 : sa && !strcmp(sa, "2") ? 2 : 1;
    const char *pf = getenv("OMNI_CUDA_PREFETCH");
    r->prefetch = pf && !strcmp(pf, "1");
    const char *fu = getenv("OMNI_CUDA_FUSE");
    r->fuse = !(fu && !strcmp(fu, "0"));
    const char *mm = getenv("OMNI_CUDA_MOE");
    r->moe_mode = mm && !strcmp(mm, "split") ? MOE_SPLIT : mm && !strcmp(mm, "fused") ? MOE_FUSED : MOE_RES;
    r->attn_ws_floats = attn_floats(r, 32768); /* decode graphs cover 32K keys; longer histories run eagerly */
    r->ws_bytes = carve_ws(r, NULL);
    char detail[160];
    snprintf(detail, sizeof detail, "weights %.2f + workspace %.2f GiB", weight_bytes / 1073741824.0,
             r->ws_bytes / 1073741824.0);
    if ((st = gib_check("the model", r->p.device, weight_bytes + r->ws_bytes + ((size_t)64 << 20), detail)))
        return st;
    if ((st = omni_cuda_malloc(&r->ws, r->ws_bytes))) return st;
    carve_ws(r, (char *)r->ws);
    if (r->E) OMNI_CUDA_TRY(cudaMemset(r->moe.ticket, 0, OMNI_CUDA_MOE_CTL_BYTES));
    void *pin = NULL;
    OMNI_CUDA_TRY(cudaHostAlloc(&pin, carve_pinned(r, NULL), cudaHostAllocDefault));
    carve_pinned(r, (char *)pin);
    const size_t S = (size_t)r->S;
    r->ent_cache = (int *)calloc(S, sizeof(int)), r->order = (int *)calloc(S, sizeof(int));
    r->grp_seq = (int *)calloc(S, sizeof(int)), r->grp_new = (int *)calloc(S, sizeof(int));
    r->out_ent = (int *)calloc((size_t)r->O, sizeof(int));
    if (!r->ent_cache || !r->order || !r->grp_seq || !r->grp_new || !r->out_ent)
        return omni_fail(OMNI_ERR_NOMEM, "llm_cuda: out of host memory");
    if ((st = lca_init())) return st;
    if ((r->D == 64 || r->D == 128) && !r->p.simt_attention &&
        (st = kvc_attn_init(r->S, r->Hq, r->Hkv, r->D, &r->attn)))
        return st;
    if (r->p.profile) {
        r->ev = (cudaEvent_t *)calloc(PROF_EVENTS, sizeof(cudaEvent_t));
        if (!r->ev) return omni_fail(OMNI_ERR_NOMEM, "llm_cuda: out of host memory");
        for (int i = 0; i < PROF_EVENTS; i++) OMNI_CUDA_TRY(cudaEventCreate(&r->ev[i]));
    }
    return OMNI_OK;
}

static omni_status init_any(const llm_config *cfg, const omni_ckpt *ck, uint64_t seed, const llm_cuda_params *p,
                            llm_cuda **out) {
    *out = NULL;
    llm_cuda_params dp = llm_cuda_default_params();
    if (!p) p = &dp;
    omni_status st = check_params(cfg, p);
    if (st) return st;
    llm_cuda *r = (llm_cuda *)calloc(1, sizeof *r);
    if (!r) return omni_fail(OMNI_ERR_NOMEM, "llm_cuda: out of host memory");
    set_dims(r, cfg, p);
    const size_t wb = lcw_bytes(cfg);
    st = init_common(r, wb);
    const double t0 = omni_time_ms();
    if (!st && ck) {
        int progress = p->progress < 0 ? wb > ((size_t)1 << 30) : p->progress;
        st = lcw_load(&r->w, cfg, ck, progress, r->s);
        if (!st && progress)
            fprintf(stderr, "weights: %.2f GiB on cuda:%d in %.1f s\n", wb / 1073741824.0, p->device,
                    (omni_time_ms() - t0) / 1000.0);
    } else if (!st) {
        st = lcw_random(&r->w, cfg, seed, r->s);
        if (!st)
            fprintf(stderr, "weights: RANDOM bf16 weights (seed %llu) with the shapes of %s: %.2f GiB made on cuda:%d\n",
                    (unsigned long long)seed, cfg->model_type, wb / 1073741824.0, p->device);
    }
    if (!st) {
        cudaError_t e = cudaStreamSynchronize(r->s);
        if (e != cudaSuccess)
            st = omni_fail(OMNI_ERR_RUNTIME, "llm_cuda: init (%s:%d): %s", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    if (st) {
        llm_cuda_free(r);
        return st;
    }
    llm_cuda_peak_bytes(r);
    *out = r;
    return OMNI_OK;
}

omni_status llm_cuda_init(const llm_config *cfg, const omni_ckpt *ckpt, const llm_cuda_params *p, llm_cuda **out) {
    if (!cfg || !ckpt || !out) return omni_fail(OMNI_ERR_USAGE, "llm_cuda_init: NULL argument");
    return init_any(cfg, ckpt, 0, p, out);
}

omni_status llm_cuda_init_random(const llm_config *cfg, uint64_t seed, const llm_cuda_params *p, llm_cuda **out) {
    if (!cfg || !out) return omni_fail(OMNI_ERR_USAGE, "llm_cuda_init_random: NULL argument");
    return init_any(cfg, NULL, seed, p, out);
}

void llm_cuda_free(llm_cuda *r) {
    if (!r) return;
    if (r->s) cudaStreamSynchronize(r->s);
    for (int i = 1; i <= MAX_CACHES; i++)
        if (r->caches[i].kv) llm_cuda_cache_free(r, r->caches[i].kv);
    kvc_attn_free(r->attn);
    lcw_free(&r->w);
    omni_cuda_free(r->ws);
    omni_cuda_free(r->force);
    if (r->in_host) cudaFreeHost(r->in_host); /* the first carve of the pinned block */
    for (int i = 0; r->ev && i < PROF_EVENTS; i++)
        if (r->ev[i]) cudaEventDestroy(r->ev[i]);
    free(r->ev);
    if (r->ev_fork) cudaEventDestroy(r->ev_fork);
    if (r->ev_join) cudaEventDestroy(r->ev_join);
    if (r->ev_afork) cudaEventDestroy(r->ev_afork);
    if (r->ev_ajoin) cudaEventDestroy(r->ev_ajoin);
    if (r->s2) cudaStreamDestroy(r->s2);
    omni_cuda_ctx_free(r->ctx);
    free(r->ent_cache), free(r->order), free(r->grp_seq), free(r->grp_new), free(r->out_ent);
    free(r);
}

size_t llm_cuda_weight_bytes(const llm_cuda *r) { return r ? r->w.bytes : 0; }
size_t llm_cuda_workspace_bytes(const llm_cuda *r) { return r ? r->ws_bytes : 0; }

size_t llm_cuda_peak_bytes(llm_cuda *r) {
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) == cudaSuccess && total - fr > r->peak) r->peak = total - fr;
    return r->peak;
}

/* ---- caches -------------------------------------------------------------------------------------------------- */

static omni_status capture_cache(llm_cuda *r, int c);

static int cache_index(const llm_cuda *r, const kv_cache *kv) {
    for (int i = 1; i <= MAX_CACHES; i++)
        if (kv && r->caches[i].kv == kv) return i;
    return 0;
}

void llm_cuda_cache_free(llm_cuda *r, kv_cache *kv) {
    const int i = r ? cache_index(r, kv) : 0;
    if (!i) return;
    dev_cache *c = &r->caches[i];
    cudaStreamSynchronize(r->s); /* no step may still read the pages */
    for (int g = 0; g < c->n_graphs; g++) cudaGraphExecDestroy(c->graphs[g].exec);
    kv_dev_free(c->dev);
    kv_free(c->kv);
    free(c->views);
    omni_cuda_free(c->hist);
    memset(c, 0, sizeof *c);
}

/* The dequantization scratch of a quantizing cache's prefill (kvc_prefill_hist): the packed history of one layer
 * for up to the longest sequence (at most HIST_MAX tokens; entries past it dequantize in the attention tiles). */
static omni_status hist_scratch(llm_cuda *r, dev_cache *c, const kv_params *q) {
    const int64_t cap = q->max_seq_len > 0 ? q->max_seq_len : q->max_tokens;
    c->hist_tokens = (cap < HIST_MAX ? cap : HIST_MAX) / KV_GROUP * KV_GROUP;
    const size_t bytes = kvc_prefill_hist_bytes(r->Hkv, r->D, c->hist_tokens);
    char detail[64];
    snprintf(detail, sizeof detail, "%lld history tokens in f16", (long long)c->hist_tokens);
    omni_status st = gib_check("the prefill scratch of the KV cache", r->p.device, bytes + ((size_t)64 << 20), detail);
    if (!st && bytes) st = omni_cuda_malloc((void **)&c->hist, bytes);
    if (st) c->hist_tokens = 0;
    return st;
}

omni_status llm_cuda_cache_init(llm_cuda *r, const kv_params *p, kv_cache **out) {
    *out = NULL;
    if (p->n_layers != r->L || p->n_kv_heads != r->Hkv || p->head_dim != r->D)
        return omni_fail(OMNI_ERR_USAGE, "llm_cuda: cache of %d layers x %d KV heads x %d does not match the model",
                         p->n_layers, p->n_kv_heads, p->head_dim);
    kv_params q = *p;
    q.max_chunk = r->T_max;
    /* an f32 cache is kept in bf16 on the device (the GPU computes in bf16); the host bookkeeping matches it */
    kv_format *lf = NULL;
    if (q.fmt.k_type == KV_F32) q.fmt.k_type = KV_BF16;
    if (q.fmt.v_type == KV_F32) q.fmt.v_type = KV_BF16;
    if (p->layer_fmt) {
        lf = (kv_format *)malloc(sizeof *lf * p->n_layers);
        if (!lf) return omni_fail(OMNI_ERR_NOMEM, "llm_cuda: out of host memory");
        for (int l = 0; l < p->n_layers; l++) {
            lf[l] = p->layer_fmt[l];
            if (lf[l].k_type == KV_F32) lf[l].k_type = KV_BF16;
            if (lf[l].v_type == KV_F32) lf[l].v_type = KV_BF16;
        }
        q.layer_fmt = lf;
    }
    const int fast = r->attn != NULL;
    omni_status st = OMNI_OK;
    int slot = 0;
    for (int i = 1; i <= MAX_CACHES && !slot; i++)
        if (!r->caches[i].kv) slot = i;
    if (!st && !slot) st = omni_fail(OMNI_ERR_USAGE, "llm_cuda: more than %d KV caches on one runner", MAX_CACHES);
    dev_cache *c = slot ? &r->caches[slot] : NULL;
    if (!st) st = kv_init_accounting(&q, &c->kv); /* the bookkeeping callers see; the pages live on the device */
    if (!st) { /* the device pool has the accounting's pool size (same pages); refuse with one line if it cannot fit */
        kv_usage u;
        kv_get_usage(c->kv, &u);
        char detail[160];
        snprintf(detail, sizeof detail, "%d sequences, %lld tokens", q.max_seqs, (long long)q.max_tokens);
        st = gib_check("the KV cache", r->p.device, (size_t)u.pool_bytes + ((size_t)64 << 20), detail);
    }
    if (!st) st = kv_dev_init(&q, &c->dev);
    free(lf);
    if (!st) {
        c->slots = q.max_seqs, c->fast = fast;
        c->views = (kv_layer_view *)calloc((size_t)r->L, sizeof(kv_layer_view));
        if (!c->views) st = omni_fail(OMNI_ERR_NOMEM, "llm_cuda: out of host memory");
        for (int l = 0; !st && l < r->L; l++) st = kv_dev_layer_view(c->dev, l, &c->views[l]);
    }
    if (!st && fast && c->views[0].cache_quant) st = hist_scratch(r, c, &q);
    if (!st && r->p.graphs && capture_cache(r, slot)) { /* graphs are an optimisation: run eagerly if capture fails */
        fprintf(stderr, "warning: CUDA graphs disabled for this cache: %s\n", omni_last_error());
        for (int g = 0; g < c->n_graphs; g++) cudaGraphExecDestroy(c->graphs[g].exec);
        c->n_graphs = 0;
    }
    if (st) {
        if (c) {
            kv_dev_free(c->dev);
            kv_free(c->kv);
            free(c->views);
            omni_cuda_free(c->hist);
            memset(c, 0, sizeof *c);
        }
        return st;
    }
    *out = c->kv;
    return OMNI_OK;
}

/* Bring the device cache's sequences in line with the host's (the engine adds, clears and removes sequences on
 * the host kv_cache only): a slot free on the host is freed on the device; a slot new on the host is taken on the
 * device (ids are the lowest free slot on both sides, so extras taken on the way are given back); a shorter host
 * sequence was cleared. Lengths otherwise move together (kv_reserve / kv_dev_step, then both commits). */
static omni_status mirror_slots(dev_cache *c) {
    int extra[64], n_extra = 0;
    omni_status st = OMNI_OK;
    for (int s = 0; s < c->slots && !st; s++) {
        const int64_t hl = kv_seq_len(c->kv, s), dl = kv_dev_seq_len(c->dev, s);
        if (hl < 0 && dl >= 0) kv_dev_seq_remove(c->dev, s);
        if (hl >= 0 && dl >= 0 && hl != dl) {
            if (hl != 0) return omni_fail(OMNI_ERR_RUNTIME, "llm_cuda: sequence %d: %lld tokens on the host, %lld on the "
                                          "device", s, (long long)hl, (long long)dl);
            kv_dev_seq_clear(c->dev, s);
        }
        if (hl >= 0 && dl < 0) {
            int got = -1;
            while (!st && got != s) {
                st = kv_dev_seq_add(c->dev, &got);
                if (!st && got != s) {
                    if (n_extra == 64) st = omni_fail(OMNI_ERR_RUNTIME, "llm_cuda: cannot mirror sequence %d", s);
                    else extra[n_extra++] = got;
                }
            }
        }
    }
    for (int i = 0; i < n_extra; i++) kv_dev_seq_remove(c->dev, extra[i]);
    return st;
}

/* ---- step inputs --------------------------------------------------------------------------------------------- */

typedef struct {
    int T;            /* rows (bucket size in graphs) */
    int n_out;        /* output rows of the first lm_head pass */
    int n_sp;         /* substituted rows */
    int n_ds[MAX_DS]; /* DeepStack rows per level */
    int max_len;      /* longest attended prefix among the rows */
    int chunked;      /* some entry has more than one token: kvc_prefill for the step */
} step_shape;

/* Views of the packed int32 inputs for T rows (host or device). Per row: ids, pos (3 streams), src (substituted
 * row or -1), slot, rpos (absolute position); per output row: out (the row); per entry in row order: eslot, enew
 * (tokens this step), erow0 (first row; erow0[n] = rows); per DeepStack level: dsdst. */
typedef struct {
    int32_t *ids, *pos, *src, *slot, *rpos, *out, *eslot, *enew, *erow0, *dsdst;
} step_in;

static step_in in_views(int32_t *base, int T) {
    step_in v = {base,         base + T,     base + 4 * T, base + 5 * T,  base + 6 * T,
                 base + 7 * T, base + 8 * T, base + 9 * T, base + 10 * T, base + 11 * T + 1};
    return v;
}

static void put_rows(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = omni_f32_to_bf16(src[i]);
}

/* Spans of entry input x at step rows [row0, row0 + n_tokens): substituted rows and DeepStack rows per level. */
static void pack_spans(llm_cuda *r, const llm_input *x, int row0, step_in *v, step_shape *sh) {
    const int H = r->H, T = sh->T;
    uint16_t *ds_rows = r->rows_host + (size_t)r->T_max * H;
    for (int sp = 0; sp < x->n_spans; sp++) {
        const llm_span *s = &x->spans[sp];
        for (int t = 0; t < s->len; t++) {
            const int rr = row0 + s->start + t;
            v->src[rr] = sh->n_sp;
            put_rows(r->rows_host + (size_t)sh->n_sp * H, s->embd + (size_t)t * H, H);
            for (int k = 0; k < s->n_deepstack && k < MAX_DS; k++) {
                if (!s->deepstack[k]) continue;
                v->dsdst[k * T + sh->n_ds[k]] = rr;
                put_rows(ds_rows + ((size_t)k * r->T_max + sh->n_ds[k]) * H, s->deepstack[k] + (size_t)t * H, H);
                sh->n_ds[k]++;
            }
            sh->n_sp++;
        }
    }
}

/* Sampling parameters and uniform of output row o for entry b (greedy without a sampler; one host draw per
 * sampled token, exactly when llm_sampler_sample would draw). */
static void pack_sampling(llm_cuda *r, int o, llm_batch_entry *b) {
    omni_cuda_sample_params q = {0.f, 0, 1.f, 0};
    double u = 0.0;
    if (b && b->sampler) {
        const llm_sampler_params *sp = llm_sampler_get_params(b->sampler);
        q.temp = sp->temp, q.top_k = sp->top_k, q.top_p = sp->top_p;
        if (sp->temp > 0.f) u = llm_sampler_uniform(b->sampler);
    }
    r->sp_host[o] = q, r->u_host[o] = u;
}

/* Fill the pinned inputs, entries in r->order (grouped by cache). Rows [rows, T) pad a graph bucket: the entries'
 * first sequence again, attending to its committed history only (enew 0), greedy, results unused. First output
 * pass: the last row of every entry that wants logits (last position) or a token; in a graph every row. */
static step_shape pack_inputs(llm_cuda *r, int n, llm_batch_entry *b, int T, int graph) {
    step_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.T = T;
    step_in v = in_views(r->in_host, T);
    int row = 0;
    for (int j = 0; j < n; j++) {
        const int i = r->order[j];
        const llm_input *x = &b[i].in;
        const int q = b[i].seq, nt = x->n_tokens;
        const int64_t base = kv_seq_len(b[i].kv, q);
        v.eslot[j] = q, v.enew[j] = nt, v.erow0[j] = row;
        for (int t = 0; t < nt; t++, row++) {
            v.ids[row] = x->ids[t], v.src[row] = -1, v.slot[row] = q, v.rpos[row] = (int32_t)(base + t);
            for (int s = 0; s < 3; s++) v.pos[s * T + row] = x->pos ? x->pos[s * nt + t] : (int32_t)(base + t);
        }
        if (base + nt > sh.max_len) sh.max_len = (int)(base + nt);
        sh.chunked |= nt > 1;
        pack_spans(r, x, row - nt, &v, &sh);
        if (graph || (b[i].logits && !b[i].logits_all) || b[i].sampler) {
            v.out[sh.n_out] = row - 1, r->out_ent[sh.n_out] = i;
            pack_sampling(r, sh.n_out++, &b[i]);
        }
    }
    const int n_ent = graph ? T : n; /* a graph of bucket T has T one-row entries */
    for (int j = n; j < n_ent; j++, row++) {
        v.eslot[j] = v.eslot[0], v.enew[j] = 0, v.erow0[j] = row;
        v.ids[row] = 0, v.src[row] = -1, v.slot[row] = v.eslot[0], v.rpos[row] = 0;
        for (int s = 0; s < 3; s++) v.pos[s * T + row] = 0;
        v.out[sh.n_out] = row, r->out_ent[sh.n_out] = -1, pack_sampling(r, sh.n_out++, NULL);
    }
    v.erow0[n_ent] = row;
    return sh;
}

/* Upload the packed inputs of this step (only the parts in use). */
static omni_status upload_inputs(llm_cuda *r, const step_shape *sh) {
    const int T = sh->T, H = r->H;
    OMNI_CUDA_TRY(cudaMemcpyAsync(r->in_dev, r->in_host, 4 * (size_t)ints_per_step(r) / r->T_max * T + 4,
                                  cudaMemcpyHostToDevice, r->s));
    if (sh->n_out) {
        OMNI_CUDA_TRY(cudaMemcpyAsync(r->sp_dev, r->sp_host, sizeof(omni_cuda_sample_params) * sh->n_out,
                                      cudaMemcpyHostToDevice, r->s));
        OMNI_CUDA_TRY(cudaMemcpyAsync(r->u_dev, r->u_host, sizeof(double) * sh->n_out, cudaMemcpyHostToDevice, r->s));
    }
    if (sh->n_sp)
        OMNI_CUDA_TRY(cudaMemcpyAsync(r->rows_dev, r->rows_host, 2 * (size_t)sh->n_sp * H, cudaMemcpyHostToDevice, r->s));
    for (int k = 0; k < MAX_DS; k++)
        if (sh->n_ds[k]) {
            size_t o = ((size_t)(1 + k) * r->T_max) * H;
            OMNI_CUDA_TRY(cudaMemcpyAsync(r->rows_dev + o, r->rows_host + o, 2 * (size_t)sh->n_ds[k] * H,
                                          cudaMemcpyHostToDevice, r->s));
        }
    return OMNI_OK;
}

/* ---- the forward ---------------------------------------------------------------------------------------------- */

#define RUN(call)                                                                                              \
    do {                                                                                                       \
        omni_status st_ = (call);                                                                              \
        if (st_) return st_;                                                                                   \
    } while (0)

/* ---- forced routing (tests) ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t *forced, *sel_e;
    float *sel_w, *logits;
    uint16_t *gu, *act, *out;
} force_ws;

static size_t force_carve(const llm_cuda *r, char *base, int T, force_ws *w) {
    carver c = {base, 0};
    const size_t n = (size_t)T * r->K;
    w->forced = (int32_t *)carve(&c, 4 * n * r->L);
    w->sel_e = (int32_t *)carve(&c, 4 * n);
    w->sel_w = (float *)carve(&c, 4 * n);
    w->logits = (float *)carve(&c, 4 * (size_t)T * r->E);
    w->gu = (uint16_t *)carve(&c, 2 * n * 2 * r->I);
    w->act = (uint16_t *)carve(&c, 2 * n * r->I);
    w->out = (uint16_t *)carve(&c, 2 * n * r->H);
    return c.off;
}

omni_status llm_cuda_force_routing(llm_cuda *r, const int32_t *sel, int T) {
    if (!r->E) return omni_fail(OMNI_ERR_USAGE, "llm_cuda_force_routing: not a MoE model");
    OMNI_CUDA_TRY(cudaStreamSynchronize(r->s));
    omni_cuda_free(r->force);
    r->force = NULL, r->force_T = 0;
    if (!sel) return OMNI_OK;
    if (T < 1 || T > r->T_max) return omni_fail(OMNI_ERR_USAGE, "llm_cuda_force_routing: T %d", T);
    for (int64_t i = 0; i < (int64_t)r->L * T * r->K; i++)
        if (sel[i] < 0 || sel[i] >= r->E)
            return omni_fail(OMNI_ERR_USAGE, "llm_cuda_force_routing: expert %d (of %d)", sel[i], r->E);
    force_ws w;
    RUN(omni_cuda_malloc(&r->force, force_carve(r, NULL, T, &w)));
    force_carve(r, (char *)r->force, T, &w);
    OMNI_CUDA_TRY(cudaMemcpy(w.forced, sel, 4 * (size_t)r->L * T * r->K, cudaMemcpyHostToDevice));
    r->force_T = T;
    return OMNI_OK;
}

/* The routing weights of forced experts, one thread per token: p = softmax(logits[t]) in fp32 at forced[t, j],
 * renormalised over the k (norm), rounded to bf16 (as omni_cuda_moe_route). */
__global__ void forced_route_kernel(int32_t *sel_e, float *sel_w, const float *logits, const int32_t *forced, int T,
                                    int E, int k, int norm) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float *l = logits + (int64_t)t * E;
    float mx = -INFINITY, s = 0.f, sum = 0.f;
    for (int e = 0; e < E; e++) mx = fmaxf(mx, l[e]);
    for (int e = 0; e < E; e++) s += expf(l[e] - mx);
    for (int j = 0; j < k; j++) sum += expf(l[forced[(int64_t)t * k + j]] - mx) / s;
    for (int j = 0; j < k; j++) {
        const int e = forced[(int64_t)t * k + j];
        const float p = expf(l[e] - mx) / s;
        sel_e[(int64_t)t * k + j] = e, sel_w[(int64_t)t * k + j] = bf(norm ? p / sum : p);
    }
}

/* The MoE block of layer l with the forced experts: router logits, forced weights, per-entry gate/up, SwiGLU,
 * per-entry down, combine. */
static omni_status mlp_moe_forced(llm_cuda *r, int l, const lcw_layer *L, int T) {
    const int H = r->H, I = r->I, E = r->E, K = r->K, n = T * K;
    if (T != r->force_T)
        return omni_fail(OMNI_ERR_USAGE, "llm_cuda: forced routing for %d rows, step of %d", r->force_T, T);
    force_ws w;
    force_carve(r, (char *)r->force, T, &w);
    OP(r, P_ROUTE, omni_cuda_linear(r->ctx, w.logits, OMNI_F32, r->ha, L->router, NULL, T, E, H));
    omni_launch(forced_route_kernel, (T + 127) / 128, 128, 0, r->s, w.sel_e, w.sel_w, w.logits,
                w.forced + (size_t)l * n, T, E, K, r->norm_topk);
    OMNI_CUDA_LAUNCHED();
    OP(r, P_EXPERTS, omni_cuda_moe_entry_linear(w.gu, r->ha, H, K, L->gate_up, w.sel_e, n, 2 * I, H, r->s));
    OP(r, P_EXPERTS, omni_cuda_swiglu_bf16(w.act, w.gu, n, I, r->s));
    OP(r, P_EXPERTS, omni_cuda_moe_entry_linear(w.out, w.act, I, 1, L->down, w.sel_e, n, H, I, r->s));
    OP(r, P_EXPERTS, omni_cuda_moe_combine(r->hb, w.out, NULL, w.sel_e, w.sel_w, T, K, H, r->s));
    return OMNI_OK;
}

static omni_status mlp_moe(llm_cuda *r, int l, const lcw_layer *L, int T) {
    const int H = r->H, I = r->I, E = r->E, K = r->K;
    if (r->force_T) return mlp_moe_forced(r, l, L, T);
    if (T * K <= ENTRY_MAX && r->moe_mode == MOE_FUSED)
        OP(r, P_EXPERTS, omni_cuda_moe_decode_fused(r->hb, r->ha, H, L->router, L->gate_up, L->down, T, E, K, H, I,
                                                    r->norm_topk, &r->moe, r->s));
    else if (T * K <= ENTRY_MAX) /* router, gate/up + SwiGLU, down + combine: three kernels */
        OP(r, P_EXPERTS, omni_cuda_moe_decode(r->hb, r->ha, H, L->router, L->gate_up, L->down, T, E, K, H, I,
                                              r->norm_topk, &r->moe, r->s));
    else
        OP(r, P_EXPERTS, omni_cuda_moe_prefill(r->ctx, r->hb, r->ha, L->router, L->gate_up, L->down, T, E, K, H, I,
                                               r->norm_topk, r->moe_ws, r->moe_ws_bytes));
    return OMNI_OK;
}

/* SIMT attention splits (attn_ref.h): graphs take every split of the workspace (blocks past a row's length exit
 * at once); eager steps split the longest row over the workspace, or not at all when rows fill the GPU. */
static void simt_splits(const llm_cuda *r, const step_shape *sh, int graph, int *splits, int *split_len) {
    const int64_t most = r->attn_ws_floats / lca_workspace_floats(sh->T, r->Hq, r->D, 1);
    if (graph) {
        *split_len = SPLIT_LEN;
        *splits = (int)(most < 32768 / SPLIT_LEN ? most : 32768 / SPLIT_LEN);
        return;
    }
    int sp = (sh->max_len + SPLIT_LEN - 1) / SPLIT_LEN;
    if (sh->T * r->Hkv >= 264) sp = 1;
    if (sp > most) sp = (int)most;
    if (sp < 1) sp = 1;
    *splits = sp;
    *split_len = ((sh->max_len + sp - 1) / sp + 31) / 32 * 32;
}

/* The append of a quantized decode layer on the side stream (see the top); joined by join_append. */
static omni_status side_append(llm_cuda *r, dev_cache *c, int l, const uint16_t *k, const uint16_t *vv, int t_cap) {
    OMNI_CUDA_TRY(cudaEventRecord(r->ev_afork, r->s));
    OMNI_CUDA_TRY(cudaStreamWaitEvent(r->s2, r->ev_afork, 0));
    RUN(kv_dev_append(c->dev, l, k, vv, t_cap, r->s2));
    OMNI_CUDA_TRY(cudaEventRecord(r->ev_ajoin, r->s2));
    r->apend = 1;
    return OMNI_OK;
}

static omni_status join_append(llm_cuda *r) {
    if (r->apend) OMNI_CUDA_TRY(cudaStreamWaitEvent(r->s, r->ev_ajoin, 0));
    r->apend = 0;
    return OMNI_OK;
}

/* Attention of layer l for every cache group of the step: append the new k/v and attend (see the top). */
static omni_status attention(llm_cuda *r, int l, const step_in *in, const step_shape *sh, int graph) {
    const int qd = r->Hq * r->D, kd = r->Hkv * r->D;
    const float scale = 1.f / sqrtf((float)r->D);
    for (int g = 0; g < r->n_grp; g++) {
        dev_cache *c = &r->caches[r->grp_c[g]];
        const int e0 = r->grp_e0[g], ne = r->grp_e0[g + 1] - e0, r0 = r->grp_r0[g], nr = r->grp_r0[g + 1] - r0;
        const kv_layer_view *v = &c->views[l];
        uint16_t *k = r->k + (size_t)r0 * kd, *vv = r->v + (size_t)r0 * kd;
        if (c->fast && sh->chunked) { /* the chunk attends to the committed history and itself, then is appended */
            OP(r, P_ATTN, kvc_prefill_hist(v, ne, in->eslot + e0, in->erow0 + e0, r->grp_maxq[g], r->q, r->k, r->v,
                                           r->att, r->Hq, scale, c->hist, c->hist_tokens, r->s));
            OP(r, P_APPEND, kv_dev_append(c->dev, l, k, vv, 0, r->s));
        } else if (c->fast && (v->quant || r->side_append == 2)) { /* decode: committed pages + the own rows */
            if (r->side_append && !r->prof_on)
                RUN(side_append(r, c, l, k, vv, graph ? sh->T : 0));
            else
                OP(r, P_APPEND, kv_dev_append(c->dev, l, k, vv, graph ? sh->T : 0, r->s));
            OP(r, P_ATTN, kvc_decode_step(r->attn, v, graph ? sh->T : ne, in->eslot + e0, in->enew + e0,
                                          r->q + (size_t)r0 * qd, k, vv, r->att + (size_t)r0 * qd, scale, r->s));
        } else if (c->fast) { /* decode of a bf16 layer: the new token goes into the pages first */
            OP(r, P_APPEND, kv_dev_append(c->dev, l, k, vv, graph ? sh->T : 0, r->s));
            OP(r, P_ATTN, kvc_decode(r->attn, v, graph ? sh->T : ne, in->eslot + e0, in->enew + e0,
                                     r->q + (size_t)r0 * qd, r->att + (size_t)r0 * qd, scale, r->s));
        } else {
            int splits, split_len;
            simt_splits(r, sh, graph, &splits, &split_len);
            OP(r, P_APPEND, kv_dev_append(c->dev, l, k, vv, graph ? sh->T : 0, r->s));
            OP(r, P_ATTN, lca_attend_view(v, r->q + (size_t)r0 * qd, qd, k, vv, kd, r->att + (size_t)r0 * qd, qd,
                                          in->slot + r0, in->rpos + r0, graph ? sh->T : nr, r->Hq, scale, splits,
                                          split_len, r->attn_ws, r->s));
        }
    }
    return OMNI_OK;
}

/* Fork: on the side stream, after the qkv GEMV, o_proj's first PF_BYTES into L2 when the step attends to at most
 * PF_KEYS keys (read on the device: graphs replay it for any length); the layer joins before o_proj. */
static omni_status prefetch_o(llm_cuda *r, const lcw_layer *L, const step_in *in, int T) {
    const size_t bytes = (size_t)r->H * r->Hq * r->D * 2;
    OMNI_CUDA_TRY(cudaEventRecord(r->ev_fork, r->s));
    OMNI_CUDA_TRY(cudaStreamWaitEvent(r->s2, r->ev_fork, 0));
    RUN(omni_cuda_l2_prefetch(L->o, bytes < PF_BYTES ? bytes : PF_BYTES, in->rpos, T, PF_KEYS, r->s2));
    OMNI_CUDA_TRY(cudaEventRecord(r->ev_join, r->s2));
    return OMNI_OK;
}

/* After x += mlp on the last layer or a DeepStack layer: the DeepStack rows, the next layer's input norm. */
static omni_status layer_tail(llm_cuda *r, int l, const step_in *in, const step_shape *sh, int ds) {
    const int T = sh->T, H = r->H;
    if (ds)
        OP(r, P_RESID, omni_cuda_add_rows_bf16(r->xc, H, in->dsdst + l * T,
                                               r->rows_dev + ((size_t)(1 + l) * r->T_max) * H, sh->n_ds[l], r->s));
    if (l + 1 < r->L) OP(r, P_NORM, omni_cuda_rmsnorm_bf16(r->ha, r->xc, r->w.layers[l + 1].in_norm, T, H, r->eps, r->s));
    return OMNI_OK;
}

/* Fused (decode): x' = x + hb into the other residual buffer and h = rmsnorm(x') * nw in the prologue of y = h W^T. */
static omni_status add_norm_linear(llm_cuda *r, int kind, uint16_t *y, const uint16_t *nw, const uint16_t *w, int T,
                                   int N) {
    uint16_t *xo = r->xc == r->x ? r->x2 : r->x;
    OP(r, kind, omni_cuda_add_rmsnorm_linear(y, xo, r->xc, r->hb, nw, r->eps, w, T, N, r->H, r->s));
    r->xc = xo;
    return OMNI_OK;
}

static omni_status layer(llm_cuda *r, int l, const step_in *in, const step_shape *sh, int graph) {
    const lcw_layer *L = &r->w.layers[l];
    const int T = sh->T, H = r->H, qd = r->Hq * r->D;
    const int fuse = r->fuse && omni_cuda_fused_linear_ok(T, H); /* decode-sized steps (T <= 4) */
    if (r->pend) { /* the previous layer's x += mlp and this layer's input norm */
        RUN(add_norm_linear(r, P_QKV, r->qkv, L->in_norm, L->qkv, T, r->Q));
        r->pend = 0;
    } else {
        OP(r, P_QKV, omni_cuda_linear(r->ctx, r->qkv, OMNI_BF16, r->ha, L->qkv, NULL, T, r->Q, H));
    }
    const int pf = r->prefetch && T <= r->S; /* decode-sized steps: o_proj's weights into L2 beside the attention (a side branch) */
    if (pf) RUN(prefetch_o(r, L, in, T));
    RUN(join_append(r)); /* the previous layer's side append reads k/v */
    OP(r, P_QKR, omni_cuda_qkv_norm_rope_bf16(r->qkv, r->Q, r->q, r->k, r->v, T, r->Hq, r->Hkv, r->D, L->q_norm,
                                              L->k_norm, r->eps, in->pos, T, r->w.inv_freq, r->w.slot_stream, r->s));
    RUN(attention(r, l, in, sh, graph));
    if (pf) OMNI_CUDA_TRY(cudaStreamWaitEvent(r->s, r->ev_join, 0));
    OP(r, P_O, omni_cuda_linear(r->ctx, r->hb, OMNI_BF16, r->att, L->o, NULL, T, H, qd));
    const int ds = l < MAX_DS && sh->n_ds[l] > 0;
    if (r->E && !r->force_T && T * r->K <= ENTRY_MAX && r->moe_mode == MOE_RES) {
        /* x += o, h = norm(x), the MoE block into moe.out, x += out, h = the next layer's norm(x): three kernels */
        const uint16_t *wn = l + 1 < r->L && !ds ? r->w.layers[l + 1].in_norm : NULL;
        OP(r, P_EXPERTS, omni_cuda_moe_decode_res(r->xc, r->ha, r->hb, L->post_norm, wn, r->eps, L->router,
                                                  L->gate_up, L->down, T, r->E, r->K, H, r->I, r->norm_topk, &r->moe,
                                                  r->s));
        if (wn) return OMNI_OK;
        return layer_tail(r, l, in, sh, ds);
    }
    if (r->E) {
        OP(r, P_RESID, omni_cuda_add_rmsnorm_bf16(r->ha, r->xc, r->hb, L->post_norm, T, H, r->eps, r->s));
        RUN(mlp_moe(r, l, L, T));
    } else {
        if (fuse) { /* x += o and the post-attention norm in the gate/up GEMV's prologue */
            RUN(add_norm_linear(r, P_MLP, r->gu, L->post_norm, L->gate_up, T, 2 * r->I));
        } else {
            OP(r, P_RESID, omni_cuda_add_rmsnorm_bf16(r->ha, r->xc, r->hb, L->post_norm, T, H, r->eps, r->s));
            OP(r, P_MLP, omni_cuda_linear(r->ctx, r->gu, OMNI_BF16, r->ha, L->gate_up, NULL, T, 2 * r->I, H));
        }
        if (r->fuse && omni_cuda_fused_linear_ok(T, r->I)) { /* SwiGLU in the down GEMV's prologue */
            OP(r, P_MLP, omni_cuda_swiglu_linear(r->hb, r->gu, L->down, T, H, r->I, r->s));
        } else {
            OP(r, P_SWIGLU, omni_cuda_swiglu_bf16(r->act, r->gu, T, r->I, r->s));
            OP(r, P_MLP, omni_cuda_linear(r->ctx, r->hb, OMNI_BF16, r->act, L->down, NULL, T, H, r->I));
        }
    }
    /* x += mlp; DeepStack rows after layers 0..levels-1; the next layer's input norm */
    if (l + 1 < r->L && !ds) {
        if (fuse) { /* both in the next layer's qkv GEMV */
            r->pend = 1;
            return OMNI_OK;
        }
        OP(r, P_RESID, omni_cuda_add_rmsnorm_bf16(r->ha, r->xc, r->hb, r->w.layers[l + 1].in_norm, T, H, r->eps, r->s));
        return OMNI_OK;
    }
    OP(r, P_RESID, omni_cuda_add_bf16(r->xc, r->xc, r->hb, (int64_t)T * H, r->s));
    return layer_tail(r, l, in, sh, ds);
}

/* lm_head over n output rows of x (row indices at out_rows, device): final norm, f32 logits [n][V]. */
static omni_status head(llm_cuda *r, const int32_t *out_rows, int T, int n) {
    OP(r, P_HEAD, omni_cuda_embed_rows_bf16(r->hl, r->xc, T, r->H, out_rows, NULL, NULL, n, r->s)); /* gather rows */
    OP(r, P_HEAD, omni_cuda_rmsnorm_bf16(r->hl, r->hl, r->w.norm, n, r->H, r->eps, r->s));
    OP(r, P_HEAD, omni_cuda_linear(r->ctx, r->logits, OMNI_F32, r->hl, r->w.lm_head, NULL, n, r->V, r->H));
    return OMNI_OK;
}

/* The step on the stream up to the first output pass: embed, layers, logits and sampling of sh->n_out rows. */
static omni_status forward(llm_cuda *r, const step_shape *sh, int graph) {
    const int T = sh->T, H = r->H;
    step_in in = in_views(r->in_dev, T);
    r->xc = r->x, r->pend = 0, r->apend = 0;
    OP(r, P_EMBED, omni_cuda_embed_rows_bf16(r->x, r->w.embed, r->V, H, in.ids, in.src, r->rows_dev, T, r->s));
    OP(r, P_NORM, omni_cuda_rmsnorm_bf16(r->ha, r->x, r->w.layers[0].in_norm, T, H, r->eps, r->s));
    for (int l = 0; l < r->L; l++) RUN(layer(r, l, &in, sh, graph));
    if (!sh->n_out) return join_append(r);
    RUN(head(r, in.out, T, sh->n_out));
    OP(r, P_SAMPLE, omni_cuda_sample(r->tok, r->logits, r->V, sh->n_out, r->V, r->sp_dev, r->u_dev, r->s));
    return join_append(r);
}

/* ---- graphs ---------------------------------------------------------------------------------------------------- */

/* Decode buckets: powers of two below max_seqs, then max_seqs. */
static int bucket_of(int S, int n) {
    int b = 1;
    while (b < n) b *= 2;
    return b < S ? b : S;
}

/* The graph of a decode step of bucket T on cache c: captured after an empty device-cache step (no step in flight:
 * the append's launch shape depends on t_cap only, the replayed upload brings each step), the cache as the step's
 * only group. */
static omni_status capture(llm_cuda *r, int c, int T) {
    dev_cache *dc = &r->caches[c];
    step_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.T = T, sh.n_out = T;
    r->n_grp = 1, r->grp_c[0] = c, r->grp_e0[0] = 0, r->grp_e0[1] = T, r->grp_r0[0] = 0, r->grp_r0[1] = T;
    RUN(kv_dev_step(dc->dev, 0, NULL, NULL));
    omni_status st = kv_dev_upload(dc->dev, r->s);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaSuccess;
    if (!st) e = cudaStreamBeginCapture(r->s, cudaStreamCaptureModeThreadLocal);
    if (!st && e == cudaSuccess) {
        st = forward(r, &sh, 1);
        e = cudaStreamEndCapture(r->s, &g);
    }
    if (st || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return st ? st : omni_fail(OMNI_ERR_RUNTIME, "llm_cuda: graph capture (%s:%d): %s", __FILE__, __LINE__,
                                   cudaGetErrorString(e));
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return omni_fail(e == cudaErrorMemoryAllocation ? OMNI_ERR_NOMEM : OMNI_ERR_RUNTIME,
                         "llm_cuda: cudaGraphInstantiate (%s:%d): %s", __FILE__, __LINE__, cudaGetErrorString(e));
    int splits = 0, split_len = 0;
    if (!dc->fast) simt_splits(r, &sh, 1, &splits, &split_len);
    graph_slot gs = {T, dc->fast ? INT64_MAX : (int64_t)splits * split_len, exec};
    dc->graphs[dc->n_graphs++] = gs;
    return OMNI_OK;
}

/* Every decode bucket of a cache, captured when the cache is made (no graph is made inside a step). */
static omni_status capture_cache(llm_cuda *r, int c) {
    const int S = r->caches[c].slots < r->S ? r->caches[c].slots : r->S;
    for (int T = 1;; T = T * 2 < S ? T * 2 : S) {
        RUN(capture(r, c, T));
        if (T == S) break;
    }
    return OMNI_OK;
}

int llm_cuda_graphs(const llm_cuda *r) {
    int n = 0;
    for (int i = 1; r && i <= MAX_CACHES; i++) n += r->caches[i].n_graphs;
    return r && r->p.graphs ? n : 0;
}

/* ---- the step ------------------------------------------------------------------------------------------------- */

/* Validate the entries against this runner's caches, group them by cache (r->order, groups), mirror each cache's
 * sequences to its device cache, then reserve the step's pages on both (kv_reserve, kv_dev_step). */
static omni_status begin(llm_cuda *r, int n, llm_batch_entry *b, int *rows) {
    if (n < 1 || n > r->S || !b) return omni_fail(OMNI_ERR_USAGE, "llm_cuda: batch of %d entries (1..%d)", n, r->S);
    int64_t T = 0;
    for (int i = 0; i < n; i++) {
        const int c = cache_index(r, b[i].kv);
        if (!c) return omni_fail(OMNI_ERR_USAGE, "entry %d: cache not made by this CUDA runner", i);
        if (b[i].seq < 0 || b[i].seq >= r->caches[c].slots || kv_seq_len(b[i].kv, b[i].seq) < 0)
            return omni_fail(OMNI_ERR_USAGE, "entry %d: sequence %d is not in use in its cache", i, b[i].seq);
        const llm_input *x = &b[i].in;
        if (x->n_tokens <= 0 || !x->ids) return omni_fail(OMNI_ERR_USAGE, "empty input chunk (entry %d)", i);
        for (int t = 0; t < x->n_tokens; t++)
            if (x->ids[t] < 0 || x->ids[t] >= r->V)
                return omni_fail(OMNI_ERR_USAGE, "token id %d out of range (vocab %d)", x->ids[t], r->V);
        for (int s = 0; s < x->n_spans; s++) {
            const llm_span *sp = &x->spans[s];
            if (sp->start < 0 || sp->len < 0 || sp->start + sp->len > x->n_tokens || sp->n_deepstack < 0 ||
                sp->n_deepstack > MAX_DS || (sp->len > 0 && !sp->embd))
                return omni_fail(OMNI_ERR_USAGE, "embedding span %d [%d, +%d) outside the chunk", s, sp->start, sp->len);
        }
        if (b[i].logits_all && !b[i].logits) return omni_fail(OMNI_ERR_USAGE, "entry %d: logits_all without logits", i);
        r->ent_cache[i] = c;
        T += x->n_tokens;
    }
    if (T > r->T_max)
        return omni_fail(OMNI_ERR_USAGE, "step of %lld tokens, more than max_tokens %d", (long long)T, r->T_max);
    *rows = (int)T;
    int j = 0, row = 0;
    r->n_grp = 0;
    for (int c = 1; c <= MAX_CACHES; c++) {
        int m = 0, maxq = 0;
        for (int i = 0; i < n; i++)
            if (r->ent_cache[i] == c) {
                r->grp_seq[m] = b[i].seq, r->grp_new[m++] = b[i].in.n_tokens;
                if (b[i].in.n_tokens > maxq) maxq = b[i].in.n_tokens;
            }
        if (!m) continue;
        dev_cache *dc = &r->caches[c];
        RUN(mirror_slots(dc));
        RUN(kv_reserve(dc->kv, m, r->grp_seq, r->grp_new)); /* validation (duplicates, capacity) and pages */
        RUN(kv_dev_step(dc->dev, m, r->grp_seq, r->grp_new));
        const int g = r->n_grp++;
        r->grp_c[g] = c, r->grp_e0[g] = j, r->grp_r0[g] = row, r->grp_maxq[g] = maxq;
        for (int i = 0; i < n; i++)
            if (r->ent_cache[i] == c) r->order[j++] = i, row += b[i].in.n_tokens;
    }
    r->grp_e0[r->n_grp] = j, r->grp_r0[r->n_grp] = row;
    return OMNI_OK;
}

static omni_status commit(llm_cuda *r, int n, const llm_batch_entry *b) {
    for (int g = 0; g < r->n_grp; g++) {
        dev_cache *c = &r->caches[r->grp_c[g]];
        int m = 0;
        for (int j = r->grp_e0[g]; j < r->grp_e0[g + 1]; j++) {
            const int i = r->order[j];
            r->grp_seq[m] = b[i].seq, r->grp_new[m++] = b[i].in.n_tokens;
        }
        RUN(kv_commit(c->kv, m, r->grp_seq, r->grp_new));
        RUN(kv_dev_commit(c->dev));
    }
    (void)n;
    return OMNI_OK;
}

/* Add the timed ops of the finished work to the totals (profiling). */
static void prof_collect(llm_cuda *r) {
    for (int i = 0; r->ev && i < r->n_ev; i += 2) {
        float ms = 0.f;
        if (cudaEventElapsedTime(&ms, r->ev[i], r->ev[i + 1]) == cudaSuccess) r->prof_ms[r->ev_kind[i / 2]] += ms;
    }
    r->n_ev = 0;
}

int llm_cuda_profile(const llm_cuda *r, const char **names, double *ms, int cap) {
    int n = 0;
    for (; n < P_COUNT && n < cap; n++) names[n] = g_prof_names[n], ms[n] = r->prof_ms[n];
    return n;
}

omni_status llm_cuda_profile_enable(llm_cuda *r, int on) {
    if (on && !r->ev) return omni_fail(OMNI_ERR_USAGE, "llm_cuda: profiling needs params.profile at init");
    r->prof_on = on;
    r->n_ev = 0;
    memset(r->prof_ms, 0, sizeof r->prof_ms);
    return OMNI_OK;
}

/* Later lm_head passes: every row of the logits_all entries, O rows at a time, straight into their buffers. */
static omni_status logits_all_passes(llm_cuda *r, int n, llm_batch_entry *b) {
    int row0 = 0;
    for (int j = 0; j < n; j++) {
        const int i = r->order[j], nt = b[i].in.n_tokens;
        for (int a = 0; b[i].logits_all && a < nt; a += r->O) {
            const int m = nt - a < r->O ? nt - a : r->O;
            int32_t *rows = r->in_dev + (size_t)ints_per_step(r) - r->O; /* free tail of the input block */
            for (int t = 0; t < m; t++) r->tok_host[t] = row0 + a + t;
            OMNI_CUDA_TRY(cudaMemcpyAsync(rows, r->tok_host, 4 * (size_t)m, cudaMemcpyHostToDevice, r->s));
            RUN(head(r, rows, r->T_max, m));
            OMNI_CUDA_TRY(cudaMemcpyAsync(b[i].logits + (size_t)a * r->V, r->logits, 4 * (size_t)m * r->V,
                                          cudaMemcpyDeviceToHost, r->s));
            OMNI_CUDA_TRY(cudaStreamSynchronize(r->s)); /* tok_host and rows are reused by the next pass */
            prof_collect(r);
        }
        row0 += nt;
    }
    return OMNI_OK;
}

static const graph_slot *graph_of(const dev_cache *c, int T) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].T == T) return &c->graphs[i];
    return NULL;
}

void llm_cuda_inject_failure(llm_cuda *r, int n) {
    if (r) r->fail_in = n > 0 ? n : 0;
}

/* A failed step: let the stream drain (a non-sticky error such as out of memory leaves the context usable) and
 * drop the step on every device cache that began it. */
static void abort_step(llm_cuda *r) {
    cudaStreamSynchronize(r->s2); /* a side append of the failed step */
    cudaStreamSynchronize(r->s);
    (void)cudaGetLastError();
    for (int g = 0; g < r->n_grp; g++)
        if (kv_dev_abort(r->caches[r->grp_c[g]].dev, r->s))
            fprintf(stderr, "llm_cuda: dropping the failed step: %s\n", omni_last_error());
}

static omni_status step_run(llm_cuda *r, int n, llm_batch_entry *b) {
    int rows = 0;
    RUN(begin(r, n, b, &rows));
    if (r->fail_in > 0 && --r->fail_in == 0)
        return omni_fail(OMNI_ERR_NOMEM, "llm_cuda: step (%s:%d): out of memory (injected)", __FILE__, __LINE__);
    /* a graph: decode only (one token per entry), one cache, no spans, no logits_all, every history covered */
    const graph_slot *g = NULL;
    if (r->p.graphs && rows == n && r->n_grp == 1 && !r->prof_on && !r->force_T) {
        const dev_cache *c = &r->caches[r->grp_c[0]];
        g = graph_of(c, bucket_of(c->slots < r->S ? c->slots : r->S, n));
        for (int i = 0; i < n && g; i++)
            if (b[i].logits_all || b[i].in.n_spans || kv_seq_len(b[i].kv, b[i].seq) + 1 > g->max_keys) g = NULL;
    }
    for (int i = 0; i < n; i++) b[i].token = -1;
    step_shape sh = pack_inputs(r, n, b, g ? g->T : rows, g != NULL);
    RUN(upload_inputs(r, &sh));
    for (int k = 0; k < r->n_grp; k++) RUN(kv_dev_upload(r->caches[r->grp_c[k]].dev, r->s));
    if (g)
        OMNI_CUDA_TRY(cudaGraphLaunch(g->exec, r->s));
    else
        RUN(forward(r, &sh, 0));
    OMNI_CUDA_TRY(cudaMemcpyAsync(r->tok_host, r->tok, 4 * (size_t)sh.n_out, cudaMemcpyDeviceToHost, r->s));
    for (int o = 0; o < sh.n_out; o++) {
        const int i = r->out_ent[o];
        if (i >= 0 && b[i].logits && !b[i].logits_all)
            OMNI_CUDA_TRY(cudaMemcpyAsync(b[i].logits, r->logits + (size_t)o * r->V, 4 * (size_t)r->V,
                                          cudaMemcpyDeviceToHost, r->s));
    }
    OMNI_CUDA_TRY(cudaStreamSynchronize(r->s));
    prof_collect(r);
    for (int o = 0; o < sh.n_out; o++) {
        const int i = r->out_ent[o];
        if (i >= 0 && b[i].sampler) b[i].token = r->tok_host[o];
    }
    RUN(logits_all_passes(r, n, b));
    return commit(r, n, b);
}

omni_status llm_cuda_step(llm_cuda *r, int n, llm_batch_entry *b) {
    r->n_grp = 0;
    omni_status st = step_run(r, n, b);
    if (st) abort_step(r);
    return st;
}

/* ---- tests: a host cache's history on the device ----------------------------------------------------------- */

/* n rows of D elements (src element size se: 4 f32 / 2 bf16) to device rows of element size de, through buf. */
static omni_status copy_rows(uint8_t *dst, int de, const uint8_t *src, int se, int n, int D, uint16_t *buf) {
    if (se == de) {
        OMNI_CUDA_TRY(cudaMemcpy(dst, src, (size_t)n * D * se, cudaMemcpyHostToDevice));
        return OMNI_OK;
    }
    if (se != 4 || de != 2) return omni_fail(OMNI_ERR_USAGE, "llm_cuda: raw rows of %d bytes into %d", se, de);
    for (int64_t i = 0; i < (int64_t)n * D; i++) buf[i] = omni_f32_to_bf16(((const float *)src)[i]);
    OMNI_CUDA_TRY(cudaMemcpy(dst, buf, (size_t)n * D * 2, cudaMemcpyHostToDevice));
    return OMNI_OK;
}

/* The history of one layer (see llm_cuda_cache_copy_history); rtab / qtab: the device table rows of seq. */
static omni_status copy_layer(const kv_layer_view *dv, const kv_layer_view *hv, int hslot, const int32_t *rtab,
                              const int32_t *qtab, int64_t L, uint16_t *buf) {
    const int D = dv->head_dim, nq = kv_view_nq(hv, L), nb = (int)((L + KV_BLOCK - 1) / KV_BLOCK);
    if (dv->quant != hv->quant || dv->kbits != hv->kbits || dv->vbits != hv->vbits || dv->window != hv->window ||
        dv->n_sink != hv->n_sink || dv->rotate != hv->rotate || dv->scale != hv->scale || kv_view_nq(dv, L) != nq)
        return omni_fail(OMNI_ERR_USAGE, "llm_cuda_cache_copy_history: layer %d formats differ", dv->layer);
    for (int b = 0; b < nb; b++) {
        const int n = L - (int64_t)b * KV_BLOCK < KV_BLOCK ? (int)(L - (int64_t)b * KV_BLOCK) : KV_BLOCK;
        for (int g = 0; g < dv->n_kv_heads; g++)
            for (int is_v = 0; is_v < 2; is_v++) {
                const int de = is_v ? dv->v_esz : dv->k_esz, se = is_v ? hv->v_esz : hv->k_esz;
                if (b < nq) { /* packed (or the raw layout of a layer that does not quantize) */
                    const int32_t hp = kv_view_quant_page(hv, hslot, b);
                    uint8_t *d = kv_view_quant_block(dv, qtab[b], g, is_v);
                    const uint8_t *h = kv_view_quant_block(hv, hp, g, is_v);
                    if (!dv->quant) {
                        RUN(copy_rows(d, de, h, se, n, D, buf));
                        continue;
                    }
                    const int64_t bytes = is_v ? kv_value_block_bytes(D, dv->vbits)
                                               : kv_key_block_bytes(D, dv->kbits, dv->scale);
                    OMNI_CUDA_TRY(cudaMemcpy(d, h, (size_t)bytes, cudaMemcpyHostToDevice));
                    if (b > 0 || dv->n_sink == 0) continue;
                }
                const int rows = b < nq ? dv->n_sink : n; /* block 0's sinks stay raw */
                RUN(copy_rows(kv_view_raw_rows(dv, rtab[b], g, is_v), de,
                              kv_view_raw_rows(hv, kv_view_raw_page(hv, hslot, b), g, is_v), se, rows, D, buf));
            }
    }
    return OMNI_OK;
}

omni_status llm_cuda_cache_copy_history(llm_cuda *r, kv_cache *kv, int seq, const kv_cache *src, int src_seq) {
    const int c = cache_index(r, kv);
    const int64_t L = kv_seq_len(kv, seq);
    if (!c || !src || L < 0 || L != kv_seq_len(src, src_seq))
        return omni_fail(OMNI_ERR_USAGE, "llm_cuda_cache_copy_history: sequence %d (%lld tokens) vs %d", seq,
                         (long long)L, src_seq);
    dev_cache *dc = &r->caches[c];
    RUN(mirror_slots(dc));
    RUN(kv_dev_step(dc->dev, 0, NULL, NULL)); /* pending table changes to the device (no step: nothing to commit) */
    RUN(kv_dev_upload(dc->dev, r->s));
    OMNI_CUDA_TRY(cudaStreamSynchronize(r->s));
    const kv_layer_view *v0 = &dc->views[0];
    const size_t ts = (size_t)v0->tab_stride;
    int32_t *tabs = (int32_t *)malloc(sizeof(int32_t) * 2 * ts);
    uint16_t *buf = (uint16_t *)malloc(sizeof(uint16_t) * KV_BLOCK * v0->head_dim);
    omni_status st = tabs && buf ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "llm_cuda: out of host memory");
    if (!st && cudaMemcpy(tabs, v0->raw_tab + seq * ts, 4 * ts, cudaMemcpyDeviceToHost) != cudaSuccess)
        st = omni_fail(OMNI_ERR_RUNTIME, "llm_cuda_cache_copy_history: table read");
    if (!st && cudaMemcpy(tabs + ts, v0->quant_tab + seq * ts, 4 * ts, cudaMemcpyDeviceToHost) != cudaSuccess)
        st = omni_fail(OMNI_ERR_RUNTIME, "llm_cuda_cache_copy_history: table read");
    for (int l = 0; l < r->L && !st; l++) {
        kv_layer_view hv;
        st = kv_cache_layer_view(src, l, &hv);
        if (!st) st = copy_layer(&dc->views[l], &hv, src_seq, tabs, tabs + ts, L, buf);
    }
    free(tabs), free(buf);
    return st;
}

/* ---- benchmarks: a long context without its prefill -------------------------------------------------------- */

/* n rows of random bf16 k and v (a sum of 4 uniforms: mean 0, variance 1/3) for the append of a fill step. */
__global__ void fill_rows_kernel(uint16_t *k, uint16_t *v, int64_t n, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 2 * n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = (seed * 0x9e3779b97f4a7c15ull + (uint64_t)i) ^ 0x94d049bb133111ebull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
        float u = ((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48)) * (1.f / 65536.f) - 2.f;
        __nv_bfloat16 b = __float2bfloat16_rn(u);
        (i < n ? k : v)[i < n ? i : i - n] = *(uint16_t *)&b;
    }
}

omni_status llm_cuda_fill_random(llm_cuda *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed) {
    const int c = cache_index(r, kv);
    if (!c || kv_seq_len(kv, seq) < 0 || n_tokens < 0)
        return omni_fail(OMNI_ERR_USAGE, "llm_cuda_fill_random: cache %p sequence %d", (void *)kv, seq);
    dev_cache *dc = &r->caches[c];
    RUN(mirror_slots(dc));
    const int kd = r->Hkv * r->D;
    while (n_tokens > 0) { /* steps of up to max_tokens rows through the device cache's own append (and flush) */
        const int n = (int)(n_tokens < r->T_max ? n_tokens : r->T_max);
        RUN(kv_reserve(kv, 1, &seq, &n));
        RUN(kv_dev_step(dc->dev, 1, &seq, &n));
        RUN(kv_dev_upload(dc->dev, r->s));
        for (int l = 0; l < r->L; l++) {
            const int64_t m = (int64_t)n * kd;
            omni_launch(fill_rows_kernel, (unsigned)(m / 512 + 1 < 1024 ? m / 512 + 1 : 1024), 256, 0, r->s, r->k,
                        r->v, m, seed + (uint64_t)l * 7919u + (uint64_t)kv_seq_len(kv, seq));
            OMNI_CUDA_LAUNCHED();
            RUN(kv_dev_append(dc->dev, l, r->k, r->v, 0, r->s));
        }
        OMNI_CUDA_TRY(cudaStreamSynchronize(r->s));
        RUN(kv_commit(kv, 1, &seq, &n));
        RUN(kv_dev_commit(dc->dev));
        n_tokens -= n;
    }
    return OMNI_OK;
}
