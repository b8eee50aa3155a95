/* kv_cache.c - the KV cache: page pools (one allocation), per-sequence page tables, attention of a chunk over
 * the stored history plus itself, and appending/flushing (quantizing) blocks. Layout and semantics: kvcache.h.
 *
 * Notation: D = head_dim, Hkv = KV heads, Hq = query heads, G = 32 (block), R = window, S = n_sink.
 * A sequence of committed length L has nq quantized blocks (positions < 32 nq), nq = max(0, (L - R) / 32) in a
 * quantizing cache (0 otherwise); the other blocks live in raw pages. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_quant.h"
#include "kvcache.h"
#include "kernels/tensor.h"

_Static_assert(KV_GROUP == KVQ_G, "block size");

#define KV_HEADS_PER_PASS 8 /* query heads of one GQA group attended together (scratch is sized for this many) */
#define KV_QTILE 16         /* new tokens of one sequence attended together (share each dequantized block) */

typedef struct {
    int quant;             /* K and V quantized in blocks beyond the window */
    int kbits, vbits;      /* when quant */
    int kesz, vesz;        /* raw element bytes: 4 (f32) or 2 (bf16) */
    size_t raw_k, raw_v;   /* offsets of the layer's K and V regions in a raw page */
    size_t q_k, q_v;       /* offsets in a quant page */
    size_t q_kh, q_vh;     /* bytes per KV head of a K / V block in a quant page */
} kv_layer;

/* Page geometry of a parameter set (validated): which layers quantize, R, S and the page sizes. */
typedef struct {
    int quantizing, R, S;
    int64_t max_chunk, seq_cap;   /* step and sequence length limits */
    size_t raw_page, quant_page;  /* bytes (quant_page 0 when no layer quantizes) */
    int64_t raw_k_bytes, raw_v_bytes, q_k_bytes, q_v_bytes; /* K/V bytes per page */
} kv_geom;

typedef struct {
    uint8_t *base;
    size_t page_bytes;
    int64_t n_pages, n_free;
    int32_t *free_list; /* stack of free page indices */
} kv_pool;

typedef struct {
    int active;
    int64_t len;   /* committed tokens */
    int nq;        /* quantized blocks (committed) */
    int pending;   /* tokens of the step in flight (pages reserved), -1 = none */
    int nq_new;    /* quantized blocks after the step in flight */
    int nb_alloc;  /* table entries [0, nb_alloc) may hold pages */
    int32_t *raw, *qp; /* [nb_max] page per block or -1 */
} kv_seq;

struct kv_cache {
    kv_params p;
    kv_format *fmt;  /* [n_layers] */
    kv_layer *lay;   /* [n_layers] */
    int quantizing, R, S, D, Hkv, nb_max;
    kv_pool raw, qnt;
    void *mem;       /* the one pool allocation */
    kv_seq *seqs;    /* [max_seqs] */
    int32_t *tables; /* [max_seqs][2][nb_max] */
    kv_geom g;       /* page sizes and K/V bytes per page, limits */
    int n_threads;
    size_t thr_floats;
    float *thr;      /* [n_threads][thr_floats] */
    float *ck, *cv;  /* [max_chunk][Hkv][D] chunk keys/values (rotated when the layer rotates) */
    int *tile_seq, *tile_i0, *seq_start, *mark; /* [max_chunk], [max_chunk], [max_seqs], [max_seqs] */
    int epoch;       /* batch counter for duplicate-id detection via mark[] */
    int64_t cells;   /* committed tokens over all sequences (<= max_tokens) */
};

static size_t thr_floats_needed(int D); /* per-thread scratch, see kv_thr */

static int is_q(kv_type t) { return t == KV_Q2 || t == KV_Q4; }
static int type_bits(kv_type t) { return t == KV_Q2 ? 2 : 4; }
static int raw_esz(kv_type t) { return t == KV_F32 ? 4 : 2; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---------------------------------------------------------------- validation + init */

static omni_status check_format(const kv_format *f, int l, int D) {
    if ((unsigned)f->k_type > KV_Q2 || (unsigned)f->v_type > KV_Q2)
        return omni_fail(OMNI_ERR_USAGE, "kv: layer %d: invalid K/V storage type", l);
    if (is_q(f->k_type) != is_q(f->v_type))
        return omni_fail(OMNI_ERR_USAGE, "kv: layer %d: K and V must both be quantized or both not (got K %s, V %s)",
                         l, kv_type_name(f->k_type), kv_type_name(f->v_type));
    if (f->window < 0 || f->window > KV_MAX_WINDOW || f->window % KV_GROUP)
        return omni_fail(OMNI_ERR_USAGE, "kv: window %d is invalid (must be a multiple of %d in 0..%d)", f->window,
                         KV_GROUP, KV_MAX_WINDOW);
    if (f->n_sink < 0 || f->n_sink > KV_GROUP)
        return omni_fail(OMNI_ERR_USAGE, "kv: n_sink %d is invalid (must be in 0..%d)", f->n_sink, KV_GROUP);
    if (f->rotate && (D & (D - 1)))
        return omni_fail(OMNI_ERR_USAGE, "kv: head_dim %d is not a power of two, required by the Hadamard rotation "
                         "(use a non-rotating mode such as kivi2 or bf16)", D);
    if (is_q(f->k_type) && D % KV_GROUP)
        return omni_fail(OMNI_ERR_USAGE, "kv: head_dim %d is not a multiple of %d, required by quantized modes", D,
                         KV_GROUP);
    return OMNI_OK;
}

static omni_status check_params(const kv_params *p) {
    if (p->n_layers <= 0 || p->n_kv_heads <= 0 || p->head_dim <= 0 || p->max_tokens <= 0 || p->max_seqs <= 0 ||
        p->max_chunk <= 0)
        return omni_fail(OMNI_ERR_USAGE, "kv: n_layers (%d), n_kv_heads (%d), head_dim (%d), max_tokens (%lld), "
                         "max_seqs (%d) and max_chunk (%d) must all be > 0", p->n_layers, p->n_kv_heads, p->head_dim,
                         (long long)p->max_tokens, p->max_seqs, p->max_chunk);
    if (p->max_seq_len < 0)
        return omni_fail(OMNI_ERR_USAGE, "kv: max_seq_len %lld is negative (0 = max_tokens)", (long long)p->max_seq_len);
    if (p->max_tokens > ((int64_t)1 << 34) || p->head_dim > 4096 || p->max_chunk > (1 << 24))
        return omni_fail(OMNI_ERR_USAGE, "kv: sizes too large (max_tokens %lld, head_dim %d, max_chunk %d)",
                         (long long)p->max_tokens, p->head_dim, p->max_chunk);
    int any_q = 0;
    for (int l = 0; l < p->n_layers; l++) {
        const kv_format *f = p->layer_fmt ? &p->layer_fmt[l] : &p->fmt;
        omni_status st = check_format(f, l, p->head_dim);
        if (st) return st;
        any_q |= is_q(f->k_type);
    }
    const kv_format *f0 = p->layer_fmt ? &p->layer_fmt[0] : &p->fmt;
    for (int l = 1; any_q && p->layer_fmt && l < p->n_layers; l++)
        if (p->layer_fmt[l].window != f0->window || p->layer_fmt[l].n_sink != f0->n_sink)
            return omni_fail(OMNI_ERR_USAGE, "kv: window and n_sink must be the same in all layers (layer %d differs)",
                             l);
    return OMNI_OK;
}

static const kv_format *param_fmt(const kv_params *p, int l) { return p->layer_fmt ? &p->layer_fmt[l] : &p->fmt; }

static int64_t seq_cap(const kv_params *p) {
    return p->max_seq_len > 0 && p->max_seq_len < p->max_tokens ? p->max_seq_len : p->max_tokens;
}

/* Per-layer offsets inside raw and quant pages (lay may be NULL) and the page geometry. */
static void plan_layout(const kv_params *p, kv_layer *lay, kv_geom *g) {
    const int D = p->head_dim, Hkv = p->n_kv_heads;
    size_t roff = 0, qoff = 0, blk = (size_t)KV_GROUP * D;
    memset(g, 0, sizeof *g);
    for (int l = 0; l < p->n_layers; l++) g->quantizing |= is_q(param_fmt(p, l)->k_type);
    g->R = param_fmt(p, 0)->window;
    g->S = g->quantizing ? param_fmt(p, 0)->n_sink : 0;
    g->max_chunk = p->max_chunk;
    g->seq_cap = seq_cap(p);
    for (int l = 0; l < p->n_layers; l++) {
        const kv_format *f = param_fmt(p, l);
        kv_layer y;
        y.quant = is_q(f->k_type);
        y.kbits = y.quant ? type_bits(f->k_type) : 0;
        y.vbits = y.quant ? type_bits(f->v_type) : 0;
        y.kesz = y.quant ? 2 : raw_esz(f->k_type);
        y.vesz = y.quant ? 2 : raw_esz(f->v_type);
        y.raw_k = roff;
        y.raw_v = roff + Hkv * blk * y.kesz;
        roff = y.raw_v + Hkv * blk * y.vesz;
        g->raw_k_bytes += Hkv * blk * y.kesz;
        g->raw_v_bytes += Hkv * blk * y.vesz;
        y.q_kh = y.quant ? kvq_key_bytes(D, y.kbits, f->scale) : blk * y.kesz;
        y.q_vh = y.quant ? kvq_value_bytes(D, y.vbits) : blk * y.vesz;
        y.q_k = qoff;
        y.q_v = qoff + Hkv * y.q_kh;
        qoff = y.q_v + Hkv * y.q_vh;
        g->q_k_bytes += Hkv * y.q_kh;
        g->q_v_bytes += Hkv * y.q_vh;
        if (lay) lay[l] = y;
    }
    g->raw_page = roff;
    g->quant_page = g->quantizing ? qoff : 0; /* no quant pages in a cache that never quantizes */
    if (!g->quantizing) g->q_k_bytes = g->q_v_bytes = 0;
}

/* ---------------------------------------------------------------- budget
 * A sequence of committed length L holds quant pages for blocks < nq(L) and raw pages for the blocks >= nq(L)
 * (plus block 0 when S > 0). A step L0 -> L1 reserves the quant pages of blocks [nq0, nq1) and raw pages for the
 * new blocks [nb0, nb1) that stay raw; the raw pages of the flushed blocks go back at kv_commit. So while the step
 * is in flight the sequence holds peak_raw(L0, L1) raw pages and nq1 quant pages. */

static int64_t nq_of(const kv_geom *g, int64_t L) { return g->quantizing && L >= g->R ? (L - g->R) / KV_GROUP : 0; }

static int64_t peak_raw(const kv_geom *g, int64_t L0, int64_t L1) {
    int64_t nq0 = nq_of(g, L0), nq1 = nq_of(g, L1), nb0 = ceil_div(L0, KV_GROUP), nb1 = ceil_div(L1, KV_GROUP);
    int64_t v = (nb0 - nq0) + (nb1 - (nb0 > nq1 ? nb0 : nq1));
    return v + (g->S > 0 && (nq0 > 0 || (nb0 == 0 && nq1 > 0))); /* block 0 kept raw for the sinks */
}

/* Max of peak_raw(L0, L1) over 0 <= L0 <= L1 <= N, L1 - L0 <= max_chunk. For L0 >= R + 32 the value depends only
 * on L0 mod 32 and L1 - L0 (and a smaller L0 allows longer steps), so L0 < R + 64 covers every case; for a given
 * L0 the best L1 is the longest step or one token less (nb1 - nq1 drops by one at multiples of 32). */
static int64_t max_raw_pages(const kv_geom *g, int64_t N) {
    if (!g->quantizing) return ceil_div(N, KV_GROUP);
    int64_t best = 0, top = N < g->R + 64 ? N : g->R + 64;
    for (int64_t L0 = 0; L0 <= top; L0++) {
        int64_t L1 = N - L0 < g->max_chunk ? N : L0 + g->max_chunk, v = peak_raw(g, L0, L1);
        if (L1 > L0) v = v > peak_raw(g, L0, L1 - 1) ? v : peak_raw(g, L0, L1 - 1);
        best = v > best ? v : best;
    }
    return best;
}

static void budget_of(const kv_geom *g, int64_t N, kv_budget *b) {
    memset(b, 0, sizeof *b);
    b->raw_page_bytes = (int64_t)g->raw_page;
    b->quant_page_bytes = (int64_t)g->quant_page;
    b->raw_pages = max_raw_pages(g, N);
    b->quant_pages = nq_of(g, N);
    b->bytes = b->raw_pages * b->raw_page_bytes + b->quant_pages * b->quant_page_bytes;
    b->committed_raw_pages = peak_raw(g, N, N);
    b->committed_quant_pages = b->quant_pages;
    b->committed_bytes = b->committed_raw_pages * b->raw_page_bytes + b->committed_quant_pages * b->quant_page_bytes;
}

static omni_status check_budget_len(const kv_geom *g, int64_t N) {
    if (N < 0 || N > g->seq_cap)
        return omni_fail(OMNI_ERR_USAGE, "kv: a sequence of %lld tokens can never fit (at most %lld tokens per "
                         "sequence)", (long long)N, (long long)g->seq_cap);
    return OMNI_OK;
}

static void pool_setup(kv_pool *pl, uint8_t *base, int32_t *list) {
    pl->base = base;
    pl->free_list = list;
    pl->n_free = pl->n_pages;
    for (int64_t i = 0; i < pl->n_pages; i++) list[i] = (int32_t)(pl->n_pages - 1 - i); /* pops 0, 1, 2 ... */
}

static int32_t pool_get(kv_pool *pl) { return pl->free_list[--pl->n_free]; }
static void pool_put(kv_pool *pl, int32_t pg) { pl->free_list[pl->n_free++] = pg; }
static uint8_t *page_ptr(const kv_pool *pl, int32_t pg) { return pl->base + (size_t)pg * pl->page_bytes; }

static omni_status alloc_pools(kv_cache *c) {
    /* Raw: a sequence holds at most ceil(L1 / 32) raw pages in flight (sum <= ceil(T / 32) + n) and at most its
     * budget; quant: sum of nq(L) <= nq(sum of L) (merging sequences never loses a block) and n * nq(M). */
    const int64_t n = c->p.max_seqs, T = c->p.max_tokens, M = c->g.seq_cap;
    int64_t blocks = ceil_div(T, KV_GROUP) + n, per_seq = max_raw_pages(&c->g, M);
    c->raw.n_pages = blocks < n * per_seq ? blocks : n * per_seq;
    c->qnt.n_pages = nq_of(&c->g, T) < n * nq_of(&c->g, M) ? nq_of(&c->g, T) : n * nq_of(&c->g, M);
    if (c->raw.n_pages + c->qnt.n_pages > INT32_MAX)
        return omni_fail(OMNI_ERR_USAGE, "kv: too many pages (%lld)", (long long)(c->raw.n_pages + c->qnt.n_pages));
    size_t rb = (size_t)c->raw.n_pages * c->raw.page_bytes, qb = (size_t)c->qnt.n_pages * c->qnt.page_bytes;
    size_t total = (rb + qb + 63) & ~(size_t)63;
    c->mem = aligned_alloc(64, total ? total : 64);
    int32_t *lists = malloc((size_t)(c->raw.n_pages + c->qnt.n_pages + 1) * sizeof(int32_t));
    c->tables = malloc((size_t)c->p.max_seqs * 2 * c->nb_max * sizeof(int32_t));
    if (!c->mem || !lists || !c->tables) {
        free(lists);
        return omni_fail(OMNI_ERR_NOMEM, "kv: cannot allocate the KV pool (%.1f MiB)", total / 1048576.0);
    }
    pool_setup(&c->raw, c->mem, lists);
    pool_setup(&c->qnt, (uint8_t *)c->mem + rb, lists + c->raw.n_pages);
    for (int s = 0; s < c->p.max_seqs; s++) {
        c->seqs[s].raw = c->tables + (size_t)s * 2 * c->nb_max;
        c->seqs[s].qp = c->seqs[s].raw + c->nb_max;
    }
    return OMNI_OK;
}

static omni_status alloc_scratch(kv_cache *c) {
    int T = c->p.max_chunk, D = c->D;
    c->n_threads = omp_get_max_threads();
    if (c->n_threads < 1) c->n_threads = 1;
    c->thr_floats = thr_floats_needed(D); /* see kv_thr */
    c->thr = malloc(c->thr_floats * c->n_threads * sizeof(float));
    c->ck = malloc((size_t)T * c->Hkv * D * sizeof(float));
    c->cv = malloc((size_t)T * c->Hkv * D * sizeof(float));
    c->tile_seq = malloc((size_t)T * sizeof(int));
    c->tile_i0 = malloc((size_t)T * sizeof(int));
    c->seq_start = malloc((size_t)c->p.max_seqs * sizeof(int));
    c->mark = calloc((size_t)c->p.max_seqs, sizeof(int));
    if (!c->thr || !c->ck || !c->cv || !c->tile_seq || !c->tile_i0 || !c->seq_start || !c->mark)
        return omni_fail(OMNI_ERR_NOMEM, "kv: cannot allocate scratch");
    return OMNI_OK;
}

omni_status kv_init(const kv_params *p, kv_cache **out) {
    *out = NULL;
    omni_status st = check_params(p);
    if (st) return st;
    kv_cache *c = calloc(1, sizeof *c);
    if (!c) return omni_fail(OMNI_ERR_NOMEM, "kv: out of memory");
    c->p = *p;
    c->p.layer_fmt = NULL;
    c->D = p->head_dim;
    c->Hkv = p->n_kv_heads;
    c->fmt = malloc((size_t)p->n_layers * sizeof(kv_format));
    c->lay = calloc((size_t)p->n_layers, sizeof(kv_layer));
    c->seqs = calloc((size_t)p->max_seqs, sizeof(kv_seq));
    if (!c->fmt || !c->lay || !c->seqs) {
        kv_free(c);
        return omni_fail(OMNI_ERR_NOMEM, "kv: out of memory");
    }
    for (int l = 0; l < p->n_layers; l++) c->fmt[l] = *param_fmt(p, l);
    c->p.layer_fmt = c->fmt; /* the cache's own copy */
    plan_layout(&c->p, c->lay, &c->g);
    c->quantizing = c->g.quantizing;
    c->R = c->g.R;
    c->S = c->g.S;
    c->raw.page_bytes = c->g.raw_page;
    c->qnt.page_bytes = c->g.quant_page;
    c->nb_max = (int)ceil_div(c->g.seq_cap, KV_GROUP) + 1;
    if ((st = alloc_pools(c)) || (st = alloc_scratch(c))) {
        kv_free(c);
        return st;
    }
    *out = c;
    return OMNI_OK;
}

void kv_free(kv_cache *c) {
    if (!c) return;
    free(c->mem);
    free(c->raw.free_list); /* one allocation holds both lists */
    free(c->tables);
    free(c->fmt);
    free(c->lay);
    free(c->seqs);
    free(c->thr);
    free(c->ck);
    free(c->cv);
    free(c->tile_seq);
    free(c->tile_i0);
    free(c->seq_start);
    free(c->mark);
    free(c);
}

omni_status kv_budget_of(const kv_params *p, int64_t n_tokens, kv_budget *b) {
    memset(b, 0, sizeof *b);
    omni_status st = check_params(p);
    if (st) return st;
    kv_geom g;
    plan_layout(p, NULL, &g);
    if ((st = check_budget_len(&g, n_tokens))) return st;
    budget_of(&g, n_tokens, b);
    return OMNI_OK;
}

omni_status kv_seq_budget(const kv_cache *c, int64_t n_tokens, kv_budget *b) {
    memset(b, 0, sizeof *b);
    omni_status st = check_budget_len(&c->g, n_tokens);
    if (st) return st;
    budget_of(&c->g, n_tokens, b);
    return OMNI_OK;
}

const kv_format *kv_layer_format(const kv_cache *c, int layer) {
    return layer >= 0 && layer < c->p.n_layers ? &c->fmt[layer] : NULL;
}

/* ---------------------------------------------------------------- sequences */

static kv_seq *get_seq(const kv_cache *c, int id) {
    return id >= 0 && id < c->p.max_seqs && c->seqs[id].active ? &c->seqs[id] : NULL;
}

static void seq_release_pages(kv_cache *c, kv_seq *s) {
    for (int b = 0; b < s->nb_alloc; b++) {
        if (s->raw[b] >= 0) pool_put(&c->raw, s->raw[b]);
        if (s->qp[b] >= 0) pool_put(&c->qnt, s->qp[b]);
        s->raw[b] = s->qp[b] = -1;
    }
    s->nb_alloc = 0;
    c->cells -= s->len;
    s->len = 0;
    s->nq = s->nq_new = 0;
    s->pending = -1;
}

omni_status kv_seq_add(kv_cache *c, int *seq_id) {
    for (int i = 0; i < c->p.max_seqs; i++) {
        kv_seq *s = &c->seqs[i];
        if (s->active) continue;
        s->active = 1;
        s->nb_alloc = 0;
        for (int b = 0; b < c->nb_max; b++) s->raw[b] = s->qp[b] = -1;
        seq_release_pages(c, s);
        *seq_id = i;
        return OMNI_OK;
    }
    return omni_fail(OMNI_ERR_NOMEM, "kv: all %d sequences are in use", c->p.max_seqs);
}

void kv_seq_remove(kv_cache *c, int seq_id) {
    kv_seq *s = c ? get_seq(c, seq_id) : NULL;
    if (!s) return;
    seq_release_pages(c, s);
    s->active = 0;
}

void kv_seq_clear(kv_cache *c, int seq_id) {
    kv_seq *s = c ? get_seq(c, seq_id) : NULL;
    if (s) seq_release_pages(c, s);
}

int64_t kv_seq_len(const kv_cache *c, int seq_id) {
    const kv_seq *s = c ? get_seq(c, seq_id) : NULL;
    return s ? s->len : -1;
}

/* Quantized blocks of a sequence of length L. */
static int n_quant_blocks(const kv_cache *c, int64_t L) {
    return c->quantizing && L >= c->R ? (int)((L - c->R) / KV_GROUP) : 0;
}

/* Does block b need a raw page once the sequence holds L tokens with nq quantized blocks? */
static int needs_raw(const kv_cache *c, int b, int nq) { return b >= nq || (b == 0 && c->S > 0); }

/* Pages a step of n tokens needs: new raw pages and new quant pages. */
static void step_pages(const kv_cache *c, const kv_seq *s, int n, int64_t *nraw, int64_t *nqnt) {
    int64_t L1 = s->len + n;
    int nq1 = n_quant_blocks(c, L1), nb0 = (int)ceil_div(s->len, KV_GROUP), nb1 = (int)ceil_div(L1, KV_GROUP);
    *nqnt += nq1 - s->nq;
    for (int b = nb0; b < nb1; b++) *nraw += needs_raw(c, b, nq1);
}

static void reserve_step(kv_cache *c, kv_seq *s, int n) {
    int64_t L1 = s->len + n;
    int nq1 = n_quant_blocks(c, L1), nb0 = (int)ceil_div(s->len, KV_GROUP), nb1 = (int)ceil_div(L1, KV_GROUP);
    for (int b = s->nq; b < nq1; b++) s->qp[b] = pool_get(&c->qnt);
    for (int b = nb0; b < nb1; b++)
        if (needs_raw(c, b, nq1)) s->raw[b] = pool_get(&c->raw);
    if (nb1 > s->nb_alloc) s->nb_alloc = nb1;
    s->nq_new = nq1;
    s->pending = n;
}

/* Validates a batch; reserves its pages on the first kv_forward of the step. */
static omni_status begin_step(kv_cache *c, int n_seq, const int *ids, const int *n_new, int reserve) {
    if (n_seq < 0 || n_seq > c->p.max_seqs) return omni_fail(OMNI_ERR_USAGE, "kv: bad batch size %d", n_seq);
    int64_t T = 0, need_raw = 0, need_q = 0;
    int fresh = 0, in_flight = 0;
    int epoch = ++c->epoch;
    for (int i = 0; i < n_seq; i++) {
        kv_seq *s = get_seq(c, ids[i]);
        if (!s) return omni_fail(OMNI_ERR_USAGE, "kv: sequence id %d is not in use", ids[i]);
        if (c->mark[ids[i]] == epoch) return omni_fail(OMNI_ERR_USAGE, "kv: sequence %d twice in one batch", ids[i]);
        c->mark[ids[i]] = epoch;
        if (n_new[i] < 0) return omni_fail(OMNI_ERR_USAGE, "kv: negative token count %d", n_new[i]);
        if (s->len + n_new[i] > c->g.seq_cap)
            return omni_fail(OMNI_ERR_NOMEM, "kv: sequence %d: %lld + %d tokens exceed max_seq_len %lld", ids[i],
                             (long long)s->len, n_new[i], (long long)c->g.seq_cap);
        T += n_new[i];
        if (s->pending < 0) {
            fresh++;
            step_pages(c, s, n_new[i], &need_raw, &need_q);
        } else if (s->pending == n_new[i]) {
            in_flight++;
        } else {
            return omni_fail(OMNI_ERR_USAGE, "kv: sequence %d has a step of %d tokens in flight, got %d (kv_commit "
                             "first)", ids[i], s->pending, n_new[i]);
        }
    }
    if (T > c->p.max_chunk)
        return omni_fail(OMNI_ERR_USAGE, "kv: %lld new tokens in one call, more than max_chunk %d", (long long)T,
                         c->p.max_chunk);
    if (fresh && c->cells + T > c->p.max_tokens)
        return omni_fail(OMNI_ERR_NOMEM, "kv: cache full: %lld + %lld tokens exceed max_tokens %lld",
                         (long long)c->cells, (long long)T, (long long)c->p.max_tokens);
    if (fresh && in_flight) return omni_fail(OMNI_ERR_USAGE, "kv: batch mixes sequences with and without a step");
    if (!reserve || !fresh) return OMNI_OK;
    if (need_raw > c->raw.n_free || need_q > c->qnt.n_free)
        return omni_fail(OMNI_ERR_NOMEM, "kv: cache full (need %lld window + %lld quantized pages, %lld + %lld free)",
                         (long long)need_raw, (long long)need_q, (long long)c->raw.n_free, (long long)c->qnt.n_free);
    for (int i = 0; i < n_seq; i++) reserve_step(c, get_seq(c, ids[i]), n_new[i]);
    return OMNI_OK;
}

omni_status kv_commit(kv_cache *c, int n_seq, const int *seq_ids, const int *n_new) {
    omni_status st = begin_step(c, n_seq, seq_ids, n_new, 0);
    if (st) return st;
    for (int i = 0; i < n_seq; i++) {
        kv_seq *s = get_seq(c, seq_ids[i]);
        if (s->pending < 0 && n_new[i] > 0)
            return omni_fail(OMNI_ERR_USAGE, "kv: kv_commit of sequence %d without kv_forward", seq_ids[i]);
    }
    for (int i = 0; i < n_seq; i++) {
        kv_seq *s = get_seq(c, seq_ids[i]);
        if (s->pending < 0) continue;
        for (int b = s->nq; b < s->nq_new; b++)
            if (!(b == 0 && c->S > 0) && s->raw[b] >= 0) {
                pool_put(&c->raw, s->raw[b]);
                s->raw[b] = -1;
            }
        s->len += s->pending;
        c->cells += s->pending;
        s->nq = s->nq_new;
        s->pending = -1;
    }
    return OMNI_OK;
}

/* ---------------------------------------------------------------- usage */

void kv_get_usage(const kv_cache *c, kv_usage *u) {
    memset(u, 0, sizeof *u);
    u->raw_pages = c->raw.n_pages - c->raw.n_free;
    u->quant_pages = c->qnt.n_pages - c->qnt.n_free;
    u->raw_page_bytes = (int64_t)c->raw.page_bytes;
    u->quant_page_bytes = (int64_t)c->qnt.page_bytes;
    u->raw_pages_free = c->raw.n_free;
    u->quant_pages_free = c->qnt.n_free;
    u->k_bytes = u->raw_pages * c->g.raw_k_bytes + u->quant_pages * c->g.q_k_bytes;
    u->v_bytes = u->raw_pages * c->g.raw_v_bytes + u->quant_pages * c->g.q_v_bytes;
    u->total_bytes = u->k_bytes + u->v_bytes;
    u->cells_capacity = c->p.max_tokens;
    u->n_layers = c->p.n_layers;
    u->max_seqs = c->p.max_seqs;
    u->pool_bytes = (int64_t)(c->raw.n_pages * c->raw.page_bytes + c->qnt.n_pages * c->qnt.page_bytes);
    for (int i = 0; i < c->p.max_seqs; i++)
        if (c->seqs[i].active) {
            u->n_seqs++;
            u->cells_used += c->seqs[i].len;
        }
}

static const char *tensor_type(const kv_cache *c, int v) {
    kv_type t0 = v ? c->fmt[0].v_type : c->fmt[0].k_type;
    for (int l = 1; l < c->p.n_layers; l++)
        if ((v ? c->fmt[l].v_type : c->fmt[l].k_type) != t0) return "mixed";
    return kv_type_name(t0);
}

void kv_format_line(const kv_cache *c, char *buf, int cap) {
    kv_usage u;
    kv_get_usage(c, &u);
    const double mib = 1024.0 * 1024.0;
    snprintf(buf, (size_t)cap,
             "kv_cache: size = %7.2f MiB (%6lld cells, %3d layers, %2d/%d seqs), K (%s): %7.2f MiB, V (%s): %7.2f MiB",
             u.total_bytes / mib, (long long)u.cells_used, u.n_layers, u.n_seqs, u.max_seqs, tensor_type(c, 0),
             u.k_bytes / mib, tensor_type(c, 1), u.v_bytes / mib);
}

/* ---------------------------------------------------------------- attention
 * Flash-style, one task = a tile of up to KV_QTILE new tokens of one sequence x one KV head x up to
 * KV_HEADS_PER_PASS query heads of its GQA group. Keys are visited in blocks of 32 absolute positions (rows from
 * the stored history or from the chunk), each history block turned into f32 rows once per task (pointer into an
 * f32 page, bf16 -> f32, or dequantized into a 32 x D buffer) and used by every query of the tile. Per query row:
 * scores scale * (q~ . k_j) with dot_f32, online softmax (running max m, sum l, acc rescaled when m grows),
 * output acc / l, un-rotated. Because blocks follow absolute positions and every key uses the same dot/axpy, a
 * row's result does not depend on the chunk split or on the tile: f32 multi-turn == one prefill, bit for bit. */

/* 8 partial sums in a fixed order (deterministic; vectorizes). */
static float dot_f32(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[i & 7] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void axpy_f32(float *acc, float w, const float *x, int n) {
    for (int i = 0; i < n; i++) acc[i] += w * x[i];
}

static void scale_f32(float *acc, float w, int n) {
    for (int i = 0; i < n; i++) acc[i] *= w;
}

static void bf16_rows(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = omni_bf16_to_f32(src[i]);
}

/* Block b (K if v == 0, else V) of one layer/head in the committed state as f32 rows [32][D] (n valid rows):
 * a pointer into an f32 page or buf filled by conversion / dequantization. */
static const float *block_rows(const kv_cache *c, const kv_seq *s, int layer, int g, int b, int v, int n, float *buf) {
    const kv_layer *y = &c->lay[layer];
    const int D = c->D, esz = v ? y->vesz : y->kesz;
    const size_t head = (size_t)KV_GROUP * D * esz;
    if (y->quant && b < s->nq) {
        const uint8_t *src = page_ptr(&c->qnt, s->qp[b]) + (v ? y->q_v + (size_t)g * y->q_vh : y->q_k + (size_t)g * y->q_kh);
        if (v) kvq_dequant_values(src, D, y->vbits, buf);
        else kvq_dequant_keys(src, D, y->kbits, c->fmt[layer].scale, buf);
        if (b == 0 && c->S > 0) /* sinks: exact bf16 rows from the raw page kept for block 0 */
            bf16_rows(buf, (const uint16_t *)(page_ptr(&c->raw, s->raw[0]) + (v ? y->raw_v : y->raw_k) + (size_t)g * head),
                      (int64_t)c->S * D);
        return buf;
    }
    const uint8_t *src = b < s->nq /* a non-quantized layer inside a quantizing cache: raw layout in the quant page */
                             ? page_ptr(&c->qnt, s->qp[b]) + (v ? y->q_v : y->q_k) + (size_t)g * head
                             : page_ptr(&c->raw, s->raw[b]) + (v ? y->raw_v : y->raw_k) + (size_t)g * head;
    if (esz == 4) return (const float *)src;
    bf16_rows(buf, (const uint16_t *)src, (int64_t)n * D);
    return buf;
}

/* Scratch of one thread: q~ and acc [KV_QTILE * KV_HEADS_PER_PASS][D], m and l [same], K and V blocks [32][D],
 * row pointers [2][32]. The flush (after attention) reuses the start of it for [3][32][D]. */
typedef struct {
    float *q, *acc, *m, *l, *kb, *vb;
    const float **kr, **vr;
} kv_thr;

static size_t thr_floats_needed(int D) {
    size_t rows = (size_t)KV_QTILE * KV_HEADS_PER_PASS, att = 2 * rows * D + 2 * rows + (size_t)2 * KV_GROUP * D;
    size_t ptrs = (2 * KV_GROUP * sizeof(float *) + sizeof(float) - 1) / sizeof(float), flush = (size_t)3 * KV_GROUP * D;
    size_t n = att + ptrs > flush ? att + ptrs : flush;
    return (n + 15) & ~(size_t)15;
}

static kv_thr thr_view(const kv_cache *c, int tid) {
    kv_thr t;
    const size_t rows = (size_t)KV_QTILE * KV_HEADS_PER_PASS;
    t.q = c->thr + (size_t)tid * c->thr_floats;
    t.acc = t.q + rows * c->D;
    t.m = t.acc + rows * c->D;
    t.l = t.m + rows;
    t.kb = t.l + rows;
    t.vb = t.kb + (size_t)KV_GROUP * c->D;
    t.kr = (const float **)(void *)(t.vb + (size_t)KV_GROUP * c->D); /* float storage, pointer-aligned (16 floats) */
    t.vr = t.kr + KV_GROUP;
    return t;
}

/* Online-softmax update of one query row with keys/values kr/vr[0..n). */
static void row_update(const float *q, const float *const *kr, const float *const *vr, int n, float scale, int D,
                       float *m, float *l, float *acc) {
    float sc[KV_GROUP], mb = -INFINITY;
    for (int j = 0; j < n; j++) {
        sc[j] = scale * dot_f32(q, kr[j], D);
        mb = sc[j] > mb ? sc[j] : mb;
    }
    if (mb > *m) {
        float f = expf(*m - mb); /* 0 on the first block (m = -inf) */
        *l *= f;
        scale_f32(acc, f, D);
        *m = mb;
    }
    for (int j = 0; j < n; j++) {
        float e = expf(sc[j] - *m);
        *l += e;
        axpy_f32(acc, e, vr[j], D);
    }
}

/* Queries i0..i0+nt-1 (chunk indices) of batch sequence si, query heads h0..h0+np-1 (all of KV head g). */
static void attend_tile(kv_cache *c, int layer, const int *ids, int si, int i0, int nt, int g, int h0, int np, int Hq,
                        const float *q, float scale, float *out, const kv_thr *w) {
    const int D = c->D, Hkv = c->Hkv, rot = c->fmt[layer].rotate, t0 = c->seq_start[si] + i0;
    const kv_seq *s = &c->seqs[ids[si]];
    const int64_t L = s->len, pend = L + i0 + nt; /* keys [0, pend) are visited */
    const float *ck = c->ck + ((size_t)c->seq_start[si] * Hkv + g) * D, *cv = c->cv + ((size_t)c->seq_start[si] * Hkv + g) * D;
    for (int r = 0; r < nt * np; r++) {
        float *qr = w->q + (size_t)r * D;
        memcpy(qr, q + ((size_t)(t0 + r / np) * Hq + h0 + r % np) * D, (size_t)D * sizeof(float));
        if (rot) kvq_fwht(qr, D);
        memset(w->acc + (size_t)r * D, 0, (size_t)D * sizeof(float));
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    for (int64_t p0 = 0; p0 < pend; p0 += KV_GROUP) {
        int b = (int)(p0 / KV_GROUP), n = pend - p0 < KV_GROUP ? (int)(pend - p0) : KV_GROUP;
        int nh = L - p0 <= 0 ? 0 : L - p0 < n ? (int)(L - p0) : n; /* history rows of this block */
        const float *kh = nh ? block_rows(c, s, layer, g, b, 0, nh, w->kb) : NULL;
        const float *vh = nh ? block_rows(c, s, layer, g, b, 1, nh, w->vb) : NULL;
        for (int j = 0; j < n; j++) {
            int64_t p = p0 + j;
            w->kr[j] = p < L ? kh + (size_t)j * D : ck + (size_t)(p - L) * Hkv * D;
            w->vr[j] = p < L ? vh + (size_t)j * D : cv + (size_t)(p - L) * Hkv * D;
        }
        for (int r = 0; r < nt * np; r++) {
            int64_t pq = L + i0 + r / np; /* causal: keys 0..pq */
            int nv = pq - p0 + 1 < n ? (int)(pq - p0 + 1) : n;
            if (nv > 0)
                row_update(w->q + (size_t)r * D, w->kr, w->vr, nv, scale, D, &w->m[r], &w->l[r], w->acc + (size_t)r * D);
        }
    }
    for (int r = 0; r < nt * np; r++) {
        float *acc = w->acc + (size_t)r * D;
        scale_f32(acc, 1.0f / w->l[r], D);
        if (rot) kvq_fwht(acc, D);
        memcpy(out + ((size_t)(t0 + r / np) * Hq + h0 + r % np) * D, acc, (size_t)D * sizeof(float));
    }
}

/* ---------------------------------------------------------------- append + flush */

static void store_row(uint8_t *dst, const float *x, int esz, int n) {
    if (esz == 4) {
        memcpy(dst, x, (size_t)n * 4);
    } else {
        uint16_t *d = (uint16_t *)dst;
        for (int i = 0; i < n; i++) d[i] = omni_f32_to_bf16(x[i]);
    }
}

static void load_row(float *dst, const uint8_t *src, int esz, int n) {
    if (esz == 4) {
        memcpy(dst, src, (size_t)n * 4);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int i = 0; i < n; i++) dst[i] = omni_bf16_to_f32(s[i]);
    }
}

/* Write the new tokens of sequence si (batch index) that stay raw (window, sinks) for one layer/head. */
static void append_raw(kv_cache *c, kv_seq *s, int si, int n, int layer, int g) {
    const kv_layer *y = &c->lay[layer];
    const int D = c->D, Hkv = c->Hkv;
    for (int i = 0; i < n; i++) {
        int64_t p = s->len + i;
        int b = (int)(p / KV_GROUP), j = (int)(p % KV_GROUP);
        if (!(b >= s->nq_new || (b == 0 && p < c->S))) continue;
        uint8_t *pg = page_ptr(&c->raw, s->raw[b]);
        size_t t = (size_t)(c->seq_start[si] + i);
        store_row(pg + y->raw_k + ((size_t)g * KV_GROUP + j) * D * y->kesz, c->ck + (t * Hkv + g) * D, y->kesz, D);
        store_row(pg + y->raw_v + ((size_t)g * KV_GROUP + j) * D * y->vesz, c->cv + (t * Hkv + g) * D, y->vesz, D);
    }
}

/* Gather the 32 rows of block b (K or V) as the window stores them: committed rows from the raw page, new rows
 * from the chunk rounded to the window's element type. */
static void gather_block(const kv_cache *c, const kv_seq *s, int si, int layer, int g, int b, int v, float *dst) {
    const kv_layer *y = &c->lay[layer];
    const int D = c->D, esz = v ? y->vesz : y->kesz;
    const float *chunk = v ? c->cv : c->ck;
    for (int j = 0; j < KV_GROUP; j++) {
        int64_t p = (int64_t)b * KV_GROUP + j;
        float *row = dst + (size_t)j * D;
        if (p < s->len) {
            const uint8_t *pg = page_ptr(&c->raw, s->raw[b]) + (v ? y->raw_v : y->raw_k);
            load_row(row, pg + ((size_t)g * KV_GROUP + j) * D * esz, esz, D);
        } else {
            memcpy(row, chunk + ((size_t)(c->seq_start[si] + (p - s->len)) * c->Hkv + g) * D, (size_t)D * 4);
            if (esz == 2)
                for (int d = 0; d < D; d++) row[d] = kvq_bf16_round(row[d]);
        }
    }
}

/* Blocks [nq, nq_new) of one layer/head move to their quant pages. */
static void flush_blocks(kv_cache *c, kv_seq *s, int si, int layer, int g, float *thr) {
    const kv_layer *y = &c->lay[layer];
    const int D = c->D;
    float *kb = thr, *vb = kb + (size_t)KV_GROUP * D, *tmp = vb + (size_t)KV_GROUP * D;
    for (int b = s->nq; b < s->nq_new; b++) {
        gather_block(c, s, si, layer, g, b, 0, kb);
        gather_block(c, s, si, layer, g, b, 1, vb);
        uint8_t *kd = page_ptr(&c->qnt, s->qp[b]) + y->q_k + (size_t)g * y->q_kh;
        uint8_t *vd = page_ptr(&c->qnt, s->qp[b]) + y->q_v + (size_t)g * y->q_vh;
        if (y->quant) {
            kvq_quant_keys(kb, b == 0 ? c->S : 0, D, y->kbits, c->fmt[layer].scale, kd, tmp);
            kvq_quant_values(vb, D, y->vbits, vd);
        } else {
            for (int j = 0; j < KV_GROUP; j++) {
                store_row(kd + (size_t)j * D * y->kesz, kb + (size_t)j * D, y->kesz, D);
                store_row(vd + (size_t)j * D * y->vesz, vb + (size_t)j * D, y->vesz, D);
            }
        }
    }
}

/* ck/cv = chunk k/v, rotated when the layer rotates. */
static void load_chunk(kv_cache *c, int layer, const float *k, const float *v, int T) {
    const int D = c->D, rot = c->fmt[layer].rotate;
    const int64_t rows = (int64_t)T * c->Hkv;
    memcpy(c->ck, k, (size_t)rows * D * sizeof(float));
    memcpy(c->cv, v, (size_t)rows * D * sizeof(float));
    if (!rot) return;
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (rows * D >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        kvq_fwht(c->ck + r * D, D);
        kvq_fwht(c->cv + r * D, D);
    }
}

omni_status kv_forward(kv_cache *c, int layer, int n_seq, const int *seq_ids, const int *n_new, const float *q,
                       const float *k, const float *v, float *out, int n_q_heads, float scale) {
    if (!c) return omni_fail(OMNI_ERR_USAGE, "kv: no cache");
    if (layer < 0 || layer >= c->p.n_layers)
        return omni_fail(OMNI_ERR_USAGE, "kv: layer %d out of range (%d layers)", layer, c->p.n_layers);
    if (n_q_heads <= 0 || n_q_heads % c->Hkv)
        return omni_fail(OMNI_ERR_USAGE, "kv: %d query heads is not a multiple of %d KV heads", n_q_heads, c->Hkv);
    if (n_seq > 0 && (!seq_ids || !n_new || !q || !k || !v || !out))
        return omni_fail(OMNI_ERR_USAGE, "kv: NULL argument to kv_forward");
    omni_status st = begin_step(c, n_seq, seq_ids, n_new, 1);
    if (st) return st;
    int T = 0, ntile = 0;
    for (int i = 0; i < n_seq; i++) {
        c->seq_start[i] = T;
        for (int j = 0; j < n_new[i]; j += KV_QTILE, ntile++) {
            c->tile_seq[ntile] = i;
            c->tile_i0[ntile] = j;
        }
        T += n_new[i];
    }
    if (T == 0) return OMNI_OK;
    load_chunk(c, layer, k, v, T);
    const int gs = n_q_heads / c->Hkv, npass = (gs + KV_HEADS_PER_PASS - 1) / KV_HEADS_PER_PASS;
    const int ntask = ntile * c->Hkv * npass;
    /* Threads only when there is enough work to pay for waking them (a short decode step stays serial). */
    int64_t work = 0;
    for (int i = 0; i < n_seq; i++) work += (kv_seq_len(c, seq_ids[i]) + n_new[i]) * (int64_t)n_new[i];
    work *= (int64_t)n_q_heads * c->D;
#pragma omp parallel for num_threads(c->n_threads) schedule(dynamic, 1) if (ntask > 1 && work >= (1 << 18))
    for (int task = 0; task < ntask; task++) {
        int tile = task / (c->Hkv * npass), g = (task / npass) % c->Hkv, pass = task % npass;
        int si = c->tile_seq[tile], i0 = c->tile_i0[tile], nt = n_new[si] - i0 < KV_QTILE ? n_new[si] - i0 : KV_QTILE;
        int h0 = g * gs + pass * KV_HEADS_PER_PASS, np = gs - pass * KV_HEADS_PER_PASS;
        kv_thr w = thr_view(c, omp_get_thread_num());
        attend_tile(c, layer, seq_ids, si, i0, nt, g, h0, np < KV_HEADS_PER_PASS ? np : KV_HEADS_PER_PASS, n_q_heads, q,
                    scale, out, &w);
    }
    const int njob = n_seq * c->Hkv;
#pragma omp parallel for num_threads(c->n_threads) schedule(dynamic, 1) if ((int64_t)T * c->Hkv * c->D >= 65536)
    for (int job = 0; job < njob; job++) {
        int si = job / c->Hkv, g = job % c->Hkv;
        kv_seq *s = &c->seqs[seq_ids[si]];
        float *thr = thr_view(c, omp_get_thread_num()).q;
        append_raw(c, s, si, n_new[si], layer, g);
        flush_blocks(c, s, si, layer, g, thr);
    }
    return OMNI_OK;
}
