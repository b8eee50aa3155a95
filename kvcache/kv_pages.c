/* kv_pages.c - the page allocator of the KV cache (kv_pages.h): validation, page geometry, two pools with free
 * lists, per-sequence page tables and lengths, step reservation / commit, byte accounting, the budget and the
 * change log of the tables for device mirrors. It never touches page bytes.
 *
 * Notation: G = 32 (block), R = window, S = n_sink (0 unless a layer quantizes). A sequence of committed length L
 * has nq(L) = max(0, (L - R) / 32) quantized blocks in a quantizing cache (0 otherwise); block b < nq has a quant
 * page, every block b >= nq (and block 0 when S > 0) a raw page. */
#include "kv_pages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_quant.h"

_Static_assert(KV_GROUP == KV_BLOCK && KV_GROUP == KVQ_G, "block size");

#define KV_SEQ_CAP (INT32_MAX - 64) /* most tokens of one sequence (lengths are int32 in the views) */

typedef struct {
    int quantizing, R, S;
    int64_t max_chunk, seq_cap;   /* step and sequence length limits */
    int64_t raw_page, quant_page; /* bytes (quant_page 0 when no layer quantizes) */
    int64_t raw_k_bytes, raw_v_bytes, q_k_bytes, q_v_bytes; /* K/V bytes per page */
} kv_geom;

typedef struct {
    int64_t page_bytes, n_pages, n_free;
    int32_t *free_list; /* stack of free page indices */
} kv_pool;

typedef struct {
    int active;
    int nq;       /* quantized blocks (committed) */
    int pending;  /* tokens of the step in flight (pages reserved), -1 = none */
    int nq_new;   /* quantized blocks after the step in flight */
    int nb_alloc; /* table entries [0, nb_alloc) may hold pages */
} kv_seq;

struct kv_pages {
    kv_params p;
    kv_format *fmt;         /* [n_layers] */
    kv_layer_view *lay;     /* [n_layers] geometry and tables (pools NULL) */
    kv_geom g;
    int nb_max;             /* table entries per sequence */
    kv_pool raw, qnt;
    kv_seq *seqs;           /* [max_seqs] */
    int32_t *tab;           /* [2][max_seqs][nb_max]: raw pages, then quant pages */
    int32_t *len;           /* [max_seqs] committed tokens */
    int *mark, epoch;       /* duplicate-id detection per batch */
    int64_t cells;          /* committed tokens over all sequences (<= max_tokens) */
    /* change log (kv_pages_log_enable) */
    int log_on, log_step;   /* log_step: a step was reserved since the last take */
    int cap_entry, n_entry, n_reset, n_len;
    int32_t *log_entry, *log_value, *log_reset, *log_len_slot, *log_len;
    uint8_t *reset_flag;    /* [max_seqs] */
};

static int is_q(kv_type t) { return t == KV_Q2 || t == KV_Q4; }
static int type_bits(kv_type t) { return t == KV_Q2 ? 2 : 4; }
static int raw_esz(kv_type t) { return t == KV_F32 ? 4 : 2; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---------------------------------------------------------------- validation + geometry */

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

static const kv_format *param_fmt(const kv_params *p, int l) { return p->layer_fmt ? &p->layer_fmt[l] : &p->fmt; }

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
        omni_status st = check_format(param_fmt(p, l), l, p->head_dim);
        if (st) return st;
        any_q |= is_q(param_fmt(p, l)->k_type);
    }
    for (int l = 1; any_q && p->layer_fmt && l < p->n_layers; l++)
        if (p->layer_fmt[l].window != p->layer_fmt[0].window || p->layer_fmt[l].n_sink != p->layer_fmt[0].n_sink)
            return omni_fail(OMNI_ERR_USAGE, "kv: window and n_sink must be the same in all layers (layer %d differs)",
                             l);
    return OMNI_OK;
}

/* Per-layer geometry (lay may be NULL: tables and pools are left unset) and the page geometry of validated p. */
static void plan_layout(const kv_params *p, kv_layer_view *lay, kv_geom *g) {
    const int D = p->head_dim, Hkv = p->n_kv_heads;
    const int64_t blk = (int64_t)KV_GROUP * D;
    int64_t roff = 0, qoff = 0;
    memset(g, 0, sizeof *g);
    for (int l = 0; l < p->n_layers; l++) g->quantizing |= is_q(param_fmt(p, l)->k_type);
    g->R = param_fmt(p, 0)->window;
    g->S = g->quantizing ? param_fmt(p, 0)->n_sink : 0;
    g->max_chunk = p->max_chunk;
    g->seq_cap = min64(p->max_seq_len > 0 ? p->max_seq_len : p->max_tokens, p->max_tokens);
    g->seq_cap = min64(g->seq_cap, KV_SEQ_CAP);
    for (int l = 0; l < p->n_layers; l++) {
        const kv_format *f = param_fmt(p, l);
        kv_layer_view y;
        memset(&y, 0, sizeof y);
        y.layer = l, y.n_layers = p->n_layers, y.n_kv_heads = Hkv, y.head_dim = D;
        y.quant = is_q(f->k_type);
        y.kbits = y.quant ? type_bits(f->k_type) : 0;
        y.vbits = y.quant ? type_bits(f->v_type) : 0;
        y.rotate = f->rotate, y.scale = f->scale;
        y.window = g->R, y.n_sink = g->S, y.cache_quant = g->quantizing;
        y.k_esz = y.quant ? 2 : raw_esz(f->k_type);
        y.v_esz = y.quant ? 2 : raw_esz(f->v_type);
        y.raw_kh = blk * y.k_esz, y.raw_vh = blk * y.v_esz;
        y.raw_k = roff, y.raw_v = roff + Hkv * y.raw_kh;
        roff = y.raw_v + Hkv * y.raw_vh;
        g->raw_k_bytes += Hkv * y.raw_kh;
        g->raw_v_bytes += Hkv * y.raw_vh;
        y.q_kh = y.quant ? kv_key_block_bytes(D, y.kbits, f->scale) : y.raw_kh;
        y.q_vh = y.quant ? kv_value_block_bytes(D, y.vbits) : y.raw_vh;
        y.q_k = qoff, y.q_v = qoff + Hkv * y.q_kh;
        qoff = y.q_v + Hkv * y.q_vh;
        g->q_k_bytes += Hkv * y.q_kh;
        g->q_v_bytes += Hkv * y.q_vh;
        if (lay) lay[l] = y;
    }
    g->raw_page = roff;
    g->quant_page = g->quantizing ? qoff : 0; /* no quant pages in a cache that never quantizes */
    if (!g->quantizing) g->q_k_bytes = g->q_v_bytes = 0;
    for (int l = 0; lay && l < p->n_layers; l++) lay[l].raw_page_bytes = g->raw_page, lay[l].quant_page_bytes = g->quant_page;
}

/* ---------------------------------------------------------------- budget
 * A step L0 -> L1 reserves the quant pages of blocks [nq0, nq1) and raw pages for the new blocks [nb0, nb1) that
 * stay raw; the raw pages of the flushed blocks go back at commit. So while the step is in flight the sequence
 * holds peak_raw(L0, L1) raw pages and nq1 quant pages; peak_raw(L, L) is the committed state. */

static int64_t nq_of(const kv_geom *g, int64_t L) { return g->quantizing && L >= g->R ? (L - g->R) / KV_GROUP : 0; }

static int64_t peak_raw(const kv_geom *g, int64_t L0, int64_t L1) {
    int64_t nq0 = nq_of(g, L0), nq1 = nq_of(g, L1), nb0 = ceil_div(L0, KV_GROUP), nb1 = ceil_div(L1, KV_GROUP);
    int64_t v = (nb0 - nq0) + (nb1 - (nb0 > nq1 ? nb0 : nq1));
    return v + (g->S > 0 && (nq0 > 0 || (nb0 == 0 && nq1 > 0))); /* block 0 kept raw for the sinks */
}

/* Max of peak_raw(L0, L1) over 0 <= L0 <= L1 <= N, L1 - L0 <= max_chunk. For L0 >= R + 32 the value depends only
 * on L0 mod 32 and L1 - L0 (and a smaller L0 allows longer steps), so L0 <= R + 64 covers every case; for a given
 * L0 the best L1 is the longest step or one token less (nb1 - nq1 drops by one at multiples of 32). */
static int64_t max_raw_pages(const kv_geom *g, int64_t N) {
    if (!g->quantizing) return ceil_div(N, KV_GROUP);
    int64_t best = 0, top = min64(N, g->R + 64);
    for (int64_t L0 = 0; L0 <= top; L0++) {
        int64_t L1 = N - L0 < g->max_chunk ? N : L0 + g->max_chunk, v = peak_raw(g, L0, L1);
        if (L1 > L0 && peak_raw(g, L0, L1 - 1) > v) v = peak_raw(g, L0, L1 - 1);
        best = v > best ? v : best;
    }
    return best;
}

/* The most raw pages a sequence holds while it grows to N one token per step (decode): max of peak_raw(L, L + 1)
 * over L < N, which covers every committed state on the way. For L >= R + 32 the value depends only on L mod 32. */
static int64_t decode_raw_pages(const kv_geom *g, int64_t N) {
    if (!g->quantizing) return ceil_div(N, KV_GROUP);
    int64_t best = 0, top = min64(N, g->R + 64);
    for (int64_t L = 0; L < top; L++) {
        int64_t v = peak_raw(g, L, L + 1);
        best = v > best ? v : best;
    }
    return best;
}

/* Max of peak_raw(L0, L1) - decode_raw_pages(L1) over 0 <= L0 < L1, L1 - L0 <= max_chunk: what a step holds beyond
 * the decode reservation of any sequence that reaches L1 (that reservation grows with N). Past L0 >= R + 64 and
 * L1 >= L0 + R + 64 every term repeats with period 32 in L0 and in L1, so those ranges cover every case. */
static int64_t step_extra_raw(const kv_geom *g) {
    if (!g->quantizing) return 0; /* every new page stays: decode_raw_pages(L1) = ceil(L1 / 32) */
    const int64_t n0 = g->R + 128, span = min64(g->max_chunk, g->R + 128);
    int64_t dec[2 * (KV_MAX_WINDOW + 128) + 1], best = 0, run = 0; /* dec[L] = decode_raw_pages(L) */
    dec[0] = 0;
    for (int64_t L = 1; L <= n0 + span; L++) {
        int64_t v = peak_raw(g, L - 1, L);
        run = v > run ? v : run;
        dec[L] = run;
    }
    for (int64_t L0 = 0; L0 < n0; L0++)
        for (int64_t L1 = L0 + 1; L1 <= L0 + span; L1++) {
            int64_t v = peak_raw(g, L0, L1) - dec[L1];
            best = v > best ? v : best;
        }
    return best;
}

/* Bytes a sequence holds while a step L0 -> L1 is in flight (L0 == L1: committed). */
static int64_t held_bytes(const kv_geom *g, int64_t L0, int64_t L1) {
    return peak_raw(g, L0, L1) * g->raw_page + nq_of(g, L1) * g->quant_page;
}

/* A one-token step L -> L + 1 that flushes a window block: it holds the block's raw page (returned at its commit)
 * and the block's new quant page at once. */
static int flushes(const kv_geom *g, int64_t L) { return nq_of(g, L + 1) > nq_of(g, L); }

/* The most bytes held at once while growing to N one token per step, the flushing steps excepted: max of
 * held_bytes(L, L) over L <= N and held_bytes(L, L + 1) over non-flushing L < N. For L >= R + 32 the raw pages
 * depend only on L mod 32 and the quant pages grow by one every 32 tokens, so past the first R + 64 tokens only the
 * last 64 can hold the maximum. *flush (may be NULL): the most a flushing step L < N holds beyond that (0: none). */
static int64_t promise_bytes(const kv_geom *g, int64_t N, int64_t *flush) {
    const int64_t head = min64(N, g->R + 64), tail = N - 64; /* L in (head, tail): never the maximum */
    int64_t best = 0, fl = 0;
    for (int64_t L = 0; L <= N; L = L == head && tail > head ? tail : L + 1) {
        int64_t v = held_bytes(g, L, L);
        if (L < N && !flushes(g, L) && held_bytes(g, L, L + 1) > v) v = held_bytes(g, L, L + 1);
        best = v > best ? v : best;
    }
    for (int64_t L = 0; L < N; L = L == head && tail > head ? tail : L + 1)
        if (flushes(g, L) && held_bytes(g, L, L + 1) - best > fl) fl = held_bytes(g, L, L + 1) - best;
    if (flush) *flush = fl;
    return best;
}

/* The largest excess over promise_bytes(L1) of any step L0 -> L1 (L1 - L0 <= max_chunk: *chunk) and of the
 * flushing one-token steps (*flush). Ranges as in step_extra_raw (the byte terms repeat with the same periods:
 * promise_bytes and held_bytes both gain one quant page every 32 tokens). */
static void step_extra_bytes(const kv_geom *g, int64_t *chunk, int64_t *flush) {
    *chunk = *flush = 0;
    if (!g->quantizing) return; /* every new page stays: a step holds what its end length holds */
    const int64_t n0 = g->R + 128, span = min64(g->max_chunk, g->R + 128);
    int64_t pb[2 * (KV_MAX_WINDOW + 128) + 1]; /* pb[L] = promise_bytes(L) */
    pb[0] = 0;
    for (int64_t L = 1; L <= n0 + span; L++) {
        int64_t v = held_bytes(g, L, L);
        if (!flushes(g, L - 1) && held_bytes(g, L - 1, L) > v) v = held_bytes(g, L - 1, L);
        pb[L] = v > pb[L - 1] ? v : pb[L - 1];
    }
    for (int64_t L0 = 0; L0 < n0; L0++)
        for (int64_t L1 = L0 + 1; L1 <= L0 + span; L1++) {
            int64_t v = held_bytes(g, L0, L1) - pb[L1];
            *chunk = v > *chunk ? v : *chunk;
            if (L1 == L0 + 1 && flushes(g, L0)) *flush = v > *flush ? v : *flush;
        }
}

static omni_status budget_of(const kv_geom *g, int64_t N, kv_budget *b) {
    memset(b, 0, sizeof *b);
    if (N < 0 || N > g->seq_cap)
        return omni_fail(OMNI_ERR_USAGE, "kv: a sequence of %lld tokens can never fit (at most %lld tokens per "
                         "sequence)", (long long)N, (long long)g->seq_cap);
    b->raw_page_bytes = g->raw_page;
    b->quant_page_bytes = g->quant_page;
    b->raw_pages = max_raw_pages(g, N);
    b->quant_pages = nq_of(g, N);
    b->bytes = b->raw_pages * b->raw_page_bytes + b->quant_pages * b->quant_page_bytes;
    b->decode_raw_pages = decode_raw_pages(g, N);
    b->decode_bytes = b->decode_raw_pages * b->raw_page_bytes + b->quant_pages * b->quant_page_bytes;
    b->promise_bytes = promise_bytes(g, N, &b->flush_bytes);
    b->committed_raw_pages = peak_raw(g, N, N);
    b->committed_quant_pages = b->quant_pages;
    b->committed_bytes = b->committed_raw_pages * b->raw_page_bytes + b->committed_quant_pages * b->quant_page_bytes;
    return OMNI_OK;
}

omni_status kv_budget_of(const kv_params *p, int64_t n_tokens, kv_budget *b) {
    memset(b, 0, sizeof *b);
    omni_status st = check_params(p);
    if (st) return st;
    kv_geom g;
    plan_layout(p, NULL, &g);
    return budget_of(&g, n_tokens, b);
}

omni_status kv_pages_budget(const kv_pages *a, int64_t n_tokens, kv_budget *b) { return budget_of(&a->g, n_tokens, b); }

omni_status kv_step_extra_of(const kv_params *p, int64_t *raw_pages) {
    *raw_pages = 0;
    omni_status st = check_params(p);
    if (st) return st;
    kv_geom g;
    plan_layout(p, NULL, &g);
    *raw_pages = step_extra_raw(&g);
    return OMNI_OK;
}

omni_status kv_step_extra_bytes_of(const kv_params *p, int64_t *chunk_bytes, int64_t *flush_bytes) {
    *chunk_bytes = *flush_bytes = 0;
    omni_status st = check_params(p);
    if (st) return st;
    kv_geom g;
    plan_layout(p, NULL, &g);
    step_extra_bytes(&g, chunk_bytes, flush_bytes);
    return OMNI_OK;
}

void kv_pages_step(const kv_pages *a, int64_t L0, int64_t L1, int64_t *raw_pages, int64_t *quant_pages) {
    *raw_pages = L1 >= L0 && L0 >= 0 ? peak_raw(&a->g, L0, L1) : 0;
    *quant_pages = L1 >= 0 ? nq_of(&a->g, L1) : 0;
}

/* ---------------------------------------------------------------- init */

static void pool_setup(kv_pool *pl, int32_t *list) {
    pl->free_list = list;
    pl->n_free = pl->n_pages;
    for (int64_t i = 0; i < pl->n_pages; i++) list[i] = (int32_t)(pl->n_pages - 1 - i); /* pops 0, 1, 2 ... */
}
static int32_t pool_get(kv_pool *pl) { return pl->free_list[--pl->n_free]; }
static void pool_put(kv_pool *pl, int32_t pg) { pl->free_list[pl->n_free++] = pg; }

/* Raw: a sequence holds at most ceil(L1 / 32) raw pages in flight (sum <= ceil(T / 32) + n) and at most its
 * budget; quant: sum of nq(L) <= nq(sum of L) (merging sequences never loses a block) and n * nq(M). */
static omni_status plan_pools(kv_pages *a) {
    const int64_t n = a->p.max_seqs, T = a->p.max_tokens, M = a->g.seq_cap;
    a->raw.page_bytes = a->g.raw_page;
    a->qnt.page_bytes = a->g.quant_page;
    a->raw.n_pages = min64(ceil_div(T, KV_GROUP) + n, n * max_raw_pages(&a->g, M));
    a->qnt.n_pages = min64(nq_of(&a->g, T), n * nq_of(&a->g, M));
    if (a->raw.n_pages + a->qnt.n_pages > INT32_MAX)
        return omni_fail(OMNI_ERR_USAGE, "kv: too many pages (%lld)", (long long)(a->raw.n_pages + a->qnt.n_pages));
    return OMNI_OK;
}

omni_status kv_pages_init(const kv_params *p, kv_pages **out) {
    *out = NULL;
    omni_status st = check_params(p);
    if (st) return st;
    kv_pages *a = calloc(1, sizeof *a);
    if (!a) return omni_fail(OMNI_ERR_NOMEM, "kv: out of memory");
    a->p = *p;
    a->fmt = malloc((size_t)p->n_layers * sizeof(kv_format));
    a->lay = calloc((size_t)p->n_layers, sizeof(kv_layer_view));
    a->seqs = calloc((size_t)p->max_seqs, sizeof(kv_seq));
    a->mark = calloc((size_t)p->max_seqs, sizeof(int));
    a->len = calloc((size_t)p->max_seqs, sizeof(int32_t));
    if (!a->fmt || !a->lay || !a->seqs || !a->mark || !a->len) {
        kv_pages_free(a);
        return omni_fail(OMNI_ERR_NOMEM, "kv: out of memory");
    }
    for (int l = 0; l < p->n_layers; l++) a->fmt[l] = *param_fmt(p, l);
    a->p.layer_fmt = a->fmt;
    plan_layout(&a->p, a->lay, &a->g);
    a->nb_max = (int)ceil_div(a->g.seq_cap, KV_GROUP) + 1;
    if ((st = plan_pools(a))) {
        kv_pages_free(a);
        return st;
    }
    size_t ntab = (size_t)2 * p->max_seqs * a->nb_max;
    int32_t *lists = malloc((size_t)(a->raw.n_pages + a->qnt.n_pages + 1) * sizeof(int32_t));
    a->tab = malloc(ntab * sizeof(int32_t));
    if (!lists || !a->tab) {
        free(lists);
        kv_pages_free(a);
        return omni_fail(OMNI_ERR_NOMEM, "kv: cannot allocate the page tables (%.1f MiB)",
                         ntab * 4 / 1048576.0);
    }
    pool_setup(&a->raw, lists);
    pool_setup(&a->qnt, lists + a->raw.n_pages);
    for (size_t i = 0; i < ntab; i++) a->tab[i] = -1;
    for (int l = 0; l < p->n_layers; l++) {
        a->lay[l].raw_tab = a->tab;
        a->lay[l].quant_tab = a->tab + (size_t)p->max_seqs * a->nb_max;
        a->lay[l].len = a->len;
        a->lay[l].tab_stride = a->nb_max;
        a->lay[l].max_seqs = p->max_seqs;
    }
    *out = a;
    return OMNI_OK;
}

void kv_pages_free(kv_pages *a) {
    if (!a) return;
    free(a->raw.free_list); /* one allocation holds both lists */
    free(a->tab);
    free(a->fmt);
    free(a->lay);
    free(a->seqs);
    free(a->mark);
    free(a->len);
    free(a->log_entry);
    free(a->log_value);
    free(a->log_reset);
    free(a->log_len_slot);
    free(a->log_len);
    free(a->reset_flag);
    free(a);
}

const kv_params *kv_pages_params(const kv_pages *a) { return &a->p; }

void kv_pages_pool_bytes(const kv_pages *a, int64_t *raw_bytes, int64_t *quant_bytes) {
    *raw_bytes = a->raw.n_pages * a->raw.page_bytes;
    *quant_bytes = a->qnt.n_pages * a->qnt.page_bytes;
}

void kv_pages_layer_view(const kv_pages *a, int layer, uint8_t *raw_pool, uint8_t *quant_pool, kv_layer_view *v) {
    *v = a->lay[layer];
    v->raw_pool = raw_pool;
    v->quant_pool = quant_pool;
}

/* ---------------------------------------------------------------- change log */

omni_status kv_pages_log_enable(kv_pages *a) {
    int me, mr, ml;
    kv_pages_log_caps(a, &me, &mr, &ml);
    a->cap_entry = me;
    a->log_entry = malloc((size_t)me * sizeof(int32_t));
    a->log_value = malloc((size_t)me * sizeof(int32_t));
    a->log_reset = malloc((size_t)mr * sizeof(int32_t));
    a->log_len_slot = malloc((size_t)ml * sizeof(int32_t));
    a->log_len = malloc((size_t)ml * sizeof(int32_t));
    a->reset_flag = calloc((size_t)a->p.max_seqs, 1);
    if (!a->log_entry || !a->log_value || !a->log_reset || !a->log_len_slot || !a->log_len || !a->reset_flag)
        return omni_fail(OMNI_ERR_NOMEM, "kv: out of memory (table log)");
    a->log_on = 1;
    return OMNI_OK;
}

/* A step of T tokens over k sequences touches at most 2 (T / 32 + k) entries (quant pages, raw pages of new
 * blocks), its commit T / 32 + k (flushed raw pages), k <= min(max_chunk, max_seqs). */
void kv_pages_log_caps(const kv_pages *a, int *max_entry, int *max_reset, int *max_len) {
    int64_t k = min64(a->p.max_chunk, a->p.max_seqs), e = 3 * (a->p.max_chunk / KV_GROUP + k) + 8;
    *max_entry = (int)min64(e, INT32_MAX / 8);
    *max_reset = a->p.max_seqs;
    *max_len = a->p.max_seqs;
}

void kv_pages_log_take(kv_pages *a, kv_pages_log *log) {
    log->n_reset = a->n_reset, log->n_entry = a->n_entry, log->n_len = a->n_len;
    log->reset = a->log_reset, log->entry = a->log_entry, log->value = a->log_value;
    log->len_slot = a->log_len_slot, log->len = a->log_len;
    for (int i = 0; i < a->n_reset; i++) a->reset_flag[a->log_reset[i]] = 0;
    a->n_reset = a->n_entry = a->n_len = 0;
    a->log_step = 0;
}

static int32_t *raw_e(kv_pages *a, int slot, int b) { return &a->tab[(size_t)slot * a->nb_max + b]; }
static int32_t *q_e(kv_pages *a, int slot, int b) { return &a->tab[((size_t)a->p.max_seqs + slot) * a->nb_max + b]; }

static void set_entry(kv_pages *a, int32_t *e, int32_t value) {
    *e = value;
    if (!a->log_on) return;
    a->log_entry[a->n_entry] = (int32_t)(e - a->tab);
    a->log_value[a->n_entry++] = value;
}

static void set_len(kv_pages *a, int slot, int32_t len) {
    a->len[slot] = len;
    if (!a->log_on) return;
    a->log_len_slot[a->n_len] = slot;
    a->log_len[a->n_len++] = len;
}

/* The slot's whole table and length reset: earlier entries of the slot are dropped from the log. */
static void log_reset(kv_pages *a, int slot) {
    if (!a->log_on) return;
    const int32_t lo0 = slot * a->nb_max, lo1 = (a->p.max_seqs + slot) * a->nb_max;
    int k = 0;
    for (int i = 0; i < a->n_entry; i++) {
        int32_t e = a->log_entry[i];
        if ((e >= lo0 && e < lo0 + a->nb_max) || (e >= lo1 && e < lo1 + a->nb_max)) continue;
        a->log_entry[k] = e, a->log_value[k++] = a->log_value[i];
    }
    a->n_entry = k;
    k = 0;
    for (int i = 0; i < a->n_len; i++)
        if (a->log_len_slot[i] != slot) a->log_len_slot[k] = a->log_len_slot[i], a->log_len[k++] = a->log_len[i];
    a->n_len = k;
    if (!a->reset_flag[slot]) a->reset_flag[slot] = 1, a->log_reset[a->n_reset++] = slot;
}

/* ---------------------------------------------------------------- sequences */

static kv_seq *get_seq(const kv_pages *a, int id) {
    return id >= 0 && id < a->p.max_seqs && a->seqs[id].active ? &a->seqs[id] : NULL;
}

static void seq_release_pages(kv_pages *a, int slot) {
    kv_seq *s = &a->seqs[slot];
    for (int b = 0; b < s->nb_alloc; b++) {
        int32_t *r = raw_e(a, slot, b), *q = q_e(a, slot, b);
        if (*r >= 0) pool_put(&a->raw, *r);
        if (*q >= 0) pool_put(&a->qnt, *q);
        *r = *q = -1;
    }
    s->nb_alloc = 0;
    a->cells -= a->len[slot];
    a->len[slot] = 0;
    s->nq = s->nq_new = 0;
    s->pending = -1;
    log_reset(a, slot);
}

omni_status kv_pages_seq_add(kv_pages *a, int *seq_id) {
    for (int i = 0; i < a->p.max_seqs; i++) {
        kv_seq *s = &a->seqs[i];
        if (s->active) continue;
        s->active = 1;
        s->pending = -1;
        *seq_id = i;
        return OMNI_OK;
    }
    return omni_fail(OMNI_ERR_NOMEM, "kv: all %d sequences are in use", a->p.max_seqs);
}

void kv_pages_seq_remove(kv_pages *a, int seq_id) {
    if (!a || !get_seq(a, seq_id)) return;
    seq_release_pages(a, seq_id);
    a->seqs[seq_id].active = 0;
}

void kv_pages_seq_clear(kv_pages *a, int seq_id) {
    if (a && get_seq(a, seq_id)) seq_release_pages(a, seq_id);
}

int64_t kv_pages_seq_len(const kv_pages *a, int seq_id) { return a && get_seq(a, seq_id) ? a->len[seq_id] : -1; }

int kv_pages_in_flight(const kv_pages *a, int seq_id) { return get_seq(a, seq_id) && a->seqs[seq_id].pending >= 0; }

/* ---------------------------------------------------------------- steps */

static int needs_raw(const kv_pages *a, int b, int nq) { return b >= nq || (b == 0 && a->g.S > 0); }

/* Pages a step of n tokens needs: new raw pages and new quant pages. */
static void step_pages(const kv_pages *a, int slot, int n, int64_t *nraw, int64_t *nqnt) {
    int64_t L0 = a->len[slot], L1 = L0 + n;
    int nq1 = (int)nq_of(&a->g, L1), nb0 = (int)ceil_div(L0, KV_GROUP), nb1 = (int)ceil_div(L1, KV_GROUP);
    *nqnt += nq1 - a->seqs[slot].nq;
    for (int b = nb0; b < nb1; b++) *nraw += needs_raw(a, b, nq1);
}

static void reserve_step(kv_pages *a, int slot, int n) {
    kv_seq *s = &a->seqs[slot];
    int64_t L0 = a->len[slot], L1 = L0 + n;
    int nq1 = (int)nq_of(&a->g, L1), nb0 = (int)ceil_div(L0, KV_GROUP), nb1 = (int)ceil_div(L1, KV_GROUP);
    for (int b = s->nq; b < nq1; b++) set_entry(a, q_e(a, slot, b), pool_get(&a->qnt));
    for (int b = nb0; b < nb1; b++)
        if (needs_raw(a, b, nq1)) set_entry(a, raw_e(a, slot, b), pool_get(&a->raw));
    if (nb1 > s->nb_alloc) s->nb_alloc = nb1;
    s->nq_new = nq1;
    s->pending = n;
}

/* Validates a batch; reserves its pages when none of its sequences has a step in flight (and reserve is set). */
static omni_status begin_step(kv_pages *a, int n_seq, const int *ids, const int *n_new, int reserve) {
    if (n_seq < 0 || n_seq > a->p.max_seqs) return omni_fail(OMNI_ERR_USAGE, "kv: bad batch size %d", n_seq);
    if (n_seq > 0 && (!ids || !n_new)) return omni_fail(OMNI_ERR_USAGE, "kv: NULL batch");
    int64_t T = 0, need_raw = 0, need_q = 0;
    int fresh = 0, in_flight = 0;
    int epoch = ++a->epoch;
    for (int i = 0; i < n_seq; i++) {
        kv_seq *s = get_seq(a, ids[i]);
        if (!s) return omni_fail(OMNI_ERR_USAGE, "kv: sequence id %d is not in use", ids[i]);
        if (a->mark[ids[i]] == epoch) return omni_fail(OMNI_ERR_USAGE, "kv: sequence %d twice in one batch", ids[i]);
        a->mark[ids[i]] = epoch;
        if (n_new[i] < 0) return omni_fail(OMNI_ERR_USAGE, "kv: negative token count %d", n_new[i]);
        if (a->len[ids[i]] + (int64_t)n_new[i] > a->g.seq_cap)
            return omni_fail(OMNI_ERR_NOMEM, "kv: sequence %d: %lld + %d tokens exceed max_seq_len %lld", ids[i],
                             (long long)a->len[ids[i]], n_new[i], (long long)a->g.seq_cap);
        T += n_new[i];
        if (s->pending < 0) {
            fresh++;
            step_pages(a, ids[i], n_new[i], &need_raw, &need_q);
        } else if (s->pending == n_new[i]) {
            in_flight++;
        } else {
            return omni_fail(OMNI_ERR_USAGE, "kv: sequence %d has a step of %d tokens in flight, got %d (kv_commit "
                             "first)", ids[i], s->pending, n_new[i]);
        }
    }
    if (T > a->p.max_chunk)
        return omni_fail(OMNI_ERR_USAGE, "kv: %lld new tokens in one call, more than max_chunk %d", (long long)T,
                         a->p.max_chunk);
    if (fresh && a->cells + T > a->p.max_tokens)
        return omni_fail(OMNI_ERR_NOMEM, "kv: cache full: %lld + %lld tokens exceed max_tokens %lld",
                         (long long)a->cells, (long long)T, (long long)a->p.max_tokens);
    if (fresh && in_flight) return omni_fail(OMNI_ERR_USAGE, "kv: batch mixes sequences with and without a step");
    if (!reserve || !fresh) return OMNI_OK;
    if (need_raw > a->raw.n_free || need_q > a->qnt.n_free)
        return omni_fail(OMNI_ERR_NOMEM, "kv: cache full (need %lld window + %lld quantized pages, %lld + %lld free)",
                         (long long)need_raw, (long long)need_q, (long long)a->raw.n_free, (long long)a->qnt.n_free);
    if (a->log_on && a->log_step)
        return omni_fail(OMNI_ERR_USAGE, "kv: the table changes of the previous step were not taken (one upload per "
                         "step)");
    if (a->log_on && a->n_entry + need_raw + need_q > a->cap_entry)
        return omni_fail(OMNI_ERR_USAGE, "kv: table log full (%d + %lld entries > %d)", a->n_entry,
                         (long long)(need_raw + need_q), a->cap_entry);
    for (int i = 0; i < n_seq; i++) reserve_step(a, ids[i], n_new[i]);
    a->log_step = a->log_on;
    return OMNI_OK;
}

omni_status kv_pages_begin(kv_pages *a, int n_seq, const int *seq_ids, const int *n_new) {
    return begin_step(a, n_seq, seq_ids, n_new, 1);
}

omni_status kv_pages_commit(kv_pages *a, int n_seq, const int *seq_ids, const int *n_new) {
    omni_status st = begin_step(a, n_seq, seq_ids, n_new, 0);
    if (st) return st;
    int64_t frees = 0;
    for (int i = 0; i < n_seq; i++) {
        const kv_seq *s = get_seq(a, seq_ids[i]);
        if (s->pending < 0 && n_new[i] > 0)
            return omni_fail(OMNI_ERR_USAGE, "kv: kv_commit of sequence %d without kv_forward", seq_ids[i]);
        if (s->pending >= 0) frees += s->nq_new - s->nq;
    }
    if (a->log_on && (a->n_entry + frees > a->cap_entry || a->n_len + n_seq > a->p.max_seqs))
        return omni_fail(OMNI_ERR_USAGE, "kv: table log full at commit (take it every step)");
    for (int i = 0; i < n_seq; i++) {
        const int slot = seq_ids[i];
        kv_seq *s = &a->seqs[slot];
        if (s->pending < 0) continue;
        for (int b = s->nq; b < s->nq_new; b++) {
            int32_t *r = raw_e(a, slot, b);
            if (!(b == 0 && a->g.S > 0) && *r >= 0) {
                pool_put(&a->raw, *r);
                set_entry(a, r, -1);
            }
        }
        if (s->pending > 0) set_len(a, slot, a->len[slot] + s->pending);
        a->cells += s->pending;
        s->nq = s->nq_new;
        s->pending = -1;
    }
    return OMNI_OK;
}

/* ---------------------------------------------------------------- usage */

void kv_pages_usage(const kv_pages *a, kv_usage *u) {
    memset(u, 0, sizeof *u);
    u->raw_pages = a->raw.n_pages - a->raw.n_free;
    u->quant_pages = a->qnt.n_pages - a->qnt.n_free;
    u->raw_pages_free = a->raw.n_free;
    u->quant_pages_free = a->qnt.n_free;
    u->raw_page_bytes = a->raw.page_bytes;
    u->quant_page_bytes = a->qnt.page_bytes;
    u->k_bytes = u->raw_pages * a->g.raw_k_bytes + u->quant_pages * a->g.q_k_bytes;
    u->v_bytes = u->raw_pages * a->g.raw_v_bytes + u->quant_pages * a->g.q_v_bytes;
    u->total_bytes = u->k_bytes + u->v_bytes;
    u->cells_capacity = a->p.max_tokens;
    u->n_layers = a->p.n_layers;
    u->max_seqs = a->p.max_seqs;
    u->pool_bytes = a->raw.n_pages * a->raw.page_bytes + a->qnt.n_pages * a->qnt.page_bytes;
    for (int i = 0; i < a->p.max_seqs; i++)
        if (a->seqs[i].active) {
            u->n_seqs++;
            u->cells_used += a->len[i];
        }
}

static const char *tensor_type(const kv_pages *a, int v) {
    kv_type t0 = v ? a->fmt[0].v_type : a->fmt[0].k_type;
    for (int l = 1; l < a->p.n_layers; l++)
        if ((v ? a->fmt[l].v_type : a->fmt[l].k_type) != t0) return "mixed";
    return kv_type_name(t0);
}

void kv_pages_format_line(const kv_pages *a, char *buf, int cap) {
    kv_usage u;
    kv_pages_usage(a, &u);
    const double mib = 1024.0 * 1024.0;
    snprintf(buf, (size_t)cap,
             "kv_cache: size = %7.2f MiB (%6lld cells, %3d layers, %2d/%d seqs), K (%s): %7.2f MiB, V (%s): %7.2f MiB",
             u.total_bytes / mib, (long long)u.cells_used, u.n_layers, u.n_seqs, u.max_seqs, tensor_type(a, 0),
             u.k_bytes / mib, tensor_type(a, 1), u.v_bytes / mib);
}
