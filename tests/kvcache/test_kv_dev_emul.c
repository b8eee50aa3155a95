/* test_kv_dev_emul.c - the device cache's CTA programs (kvcache/kv_append.h: table update, append, quantized
 * flush) run on the CPU by an emulation of their kernels, against the CPU cache, byte for byte (kv_dev_check.h:
 * random steps, every format / window / sink / head size / per-layer mix, tables, lengths, raw rows, packed
 * blocks, untouched pages). The emulation is what the CUDA kernels of kvcache/cuda/kv_dev.cu run, phase by phase:
 * all threads of a phase run (in a shuffled order, with varying thread counts, since a phase must not depend on
 * it) before the next phase; the host part of each step (kv_pages + kvd_step_fill) is the real one; the launch is
 * sized for the step (t_cap = T) or larger (a graph-style launch with idle CTAs). Steps pick at random whether the
 * blocks whose rows were all committed are flushed early for every layer at the upload (kvd_flush_old_kernel,
 * KVD_FLUSH_OLD, CTAs looping over items) and the appends run the rest (KVD_FLUSH_NEW), or the appends run every
 * flush (KVD_FLUSH_ALL); both kinds of item must occur. No GPU needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kv_dev_check.h"
#include "kvcache/kv_dev_step.h"

typedef struct {
    kv_pages *a;
    uint8_t *mem, *raw, *quant; /* "device" pools, poisoned with 0xff */
    int64_t n_raw, n_quant;
    int32_t *tab, *len;         /* "device" mirror of the tables and lengths */
    kvd_step *staging, *dev;    /* the step record: host staging, "device" copy */
    int64_t step_bytes;
    float *sm;                  /* shared memory of one CTA */
    int n_seq, ids[64], nn[64]; /* the step in flight */
    int nthr, extra_cap, calls;
    int early;                  /* this step flushes its fully committed blocks at the upload */
    int64_t n_early, n_late;    /* flush items run by the early program / by the appends */
    kvd_append_args *old_args;  /* per layer: the early program's arguments */
    rng_t r;
    int *order;                 /* thread order of a phase */
} emu;

static omni_status emu_seq_add(void *x, int *id) { return kv_pages_seq_add(((emu *)x)->a, id); }
static void emu_seq_remove(void *x, int id) { kv_pages_seq_remove(((emu *)x)->a, id); }
static void emu_seq_clear(void *x, int id) { kv_pages_seq_clear(((emu *)x)->a, id); }

static void emu_view(const emu *e, int layer, kv_layer_view *v);
static void emu_flush_old(emu *e, int n_items, int x);

/* Threads of one phase in a random order. */
static void shuffle_order(emu *e) {
    for (int i = 0; i < e->nthr; i++) e->order[i] = i;
    for (int i = e->nthr - 1; i > 0; i--) {
        int j = (int)(rng_next(&e->r) % (uint64_t)(i + 1)), t = e->order[i];
        e->order[i] = e->order[j], e->order[j] = t;
    }
}

static omni_status emu_step(void *x, int n_seq, const int *ids, const int *n_new) {
    emu *e = x;
    omni_status st = n_seq ? kv_pages_begin(e->a, n_seq, ids, n_new) : OMNI_OK;
    if (!st) st = kvd_step_fill(e->staging, e->a, n_seq, ids, n_new);
    if (st) return st;
    memcpy(e->dev, e->staging, (size_t)e->step_bytes); /* the upload */
    const kv_params *p = kv_pages_params(e->a);
    kv_layer_view v;
    kv_pages_layer_view(e->a, 0, NULL, NULL, &v);
    for (int ph = 0; ph < KVD_APPLY_PHASES; ph++) {
        shuffle_order(e);
        for (int i = 0; i < e->nthr; i++)
            kvd_apply_phase(e->dev, e->tab, e->len, v.tab_stride, p->max_seqs, ph, e->order[i], e->nthr);
    }
    e->n_seq = n_seq;
    for (int i = 0; i < n_seq; i++) e->ids[i] = ids[i], e->nn[i] = n_new[i];
    e->early = (int)(rng_next(&e->r) % 3) != 0;
    if (e->early && kvd_old_flushes(e->dev) > 0) { /* sized for the step, or for the capacity (a captured upload) */
        const int cap = e->dev->cap_flush, graph = (int)(rng_next(&e->r) & 1);
        const int n = graph ? cap : e->dev->n_flush, x = graph ? (cap < 3 ? cap : 3) : n;
        emu_flush_old(e, n, x);
    }
    return OMNI_OK;
}

/* One CTA of a program: every phase, its threads in a shuffled order; returns its kind (kvd_cta.kind). */
static int emu_cta(emu *e, const kvd_append_args *a, int cta) {
    kvd_cta c;
    kvd_cta_setup(a, cta, &c);
    for (int ph = 0; ph < c.nph; ph++) {
        shuffle_order(e);
        for (int i = 0; i < e->nthr; i++) kvd_cta_phase(a, &c, ph, e->order[i], e->nthr, e->sm);
    }
    return c.kind;
}

/* The early flush as kvd_flush_old_kernel runs it: per layer, a grid of x CTAs looping over n_items * Hkv. */
static void emu_flush_old(emu *e, int n_items, int x) {
    const kv_params *p = kv_pages_params(e->a);
    for (int l = 0; l < p->n_layers; l++) {
        kvd_append_args *a = &e->old_args[l];
        kv_layer_view v;
        emu_view(e, l, &v);
        kvd_append_setup(a, &v, e->dev, NULL, NULL, 0, e->dev->cap_flush);
        a->flush = KVD_FLUSH_OLD;
        for (int b = 0; b < x; b++)
            for (int cta = b; cta < n_items * v.n_kv_heads; cta += x) e->n_early += emu_cta(e, a, cta) == 2;
    }
}

static void emu_view(const emu *e, int layer, kv_layer_view *v) {
    kv_pages_layer_view(e->a, layer, e->raw, e->quant, v);
    v->raw_tab = e->tab; /* the device reads its mirror */
    v->quant_tab = e->tab + (int64_t)v->max_seqs * v->tab_stride;
    v->len = e->len;
}

static omni_status emu_append(void *x, int layer, const uint16_t *k, const uint16_t *vv, int T) {
    emu *e = x;
    kv_layer_view v;
    emu_view(e, layer, &v);
    /* launch sized for the step, or for more tokens than the step has (idle CTAs, as in a CUDA graph) */
    int t_cap = T + (e->calls++ % 3 == 2 ? e->extra_cap : 0), f_cap = kvd_flush_cap(e->a, t_cap);
    if (t_cap == T && e->dev->n_flush < f_cap) f_cap = e->dev->n_flush;
    kvd_append_args args;
    kvd_append_setup(&args, &v, e->dev, k, vv, t_cap, f_cap);
    args.flush = e->early ? KVD_FLUSH_NEW : KVD_FLUSH_ALL;
    const int n_cta = (t_cap + f_cap) * v.n_kv_heads;
    for (int cta = 0; cta < n_cta; cta++) e->n_late += emu_cta(e, &args, cta) == 2;
    return OMNI_OK;
}

static omni_status emu_commit(void *x) {
    emu *e = x;
    return kv_pages_commit(e->a, e->n_seq, e->ids, e->nn);
}

static omni_status emu_snapshot(void *x, int layer, kv_layer_view *v, int64_t *raw_pages, int64_t *quant_pages) {
    emu *e = x;
    emu_view(e, layer, v);
    *raw_pages = e->n_raw, *quant_pages = e->n_quant;
    return OMNI_OK;
}

static emu *emu_make(const kv_params *p, int nthr, int extra_cap, uint64_t seed) {
    emu *e = calloc(1, sizeof *e);
    if (kv_pages_init(p, &e->a) || kv_pages_log_enable(e->a)) return NULL;
    int64_t rb, qb;
    kv_pages_pool_bytes(e->a, &rb, &qb);
    kv_layer_view v;
    kv_pages_layer_view(e->a, 0, NULL, NULL, &v);
    e->n_raw = rb / v.raw_page_bytes, e->n_quant = v.quant_page_bytes ? qb / v.quant_page_bytes : 0;
    e->mem = aligned_alloc(64, (size_t)((rb + qb + 63) & ~63) + 64);
    memset(e->mem, 0xff, (size_t)(rb + qb));
    e->raw = e->mem, e->quant = e->mem + rb;
    int64_t ntab = 2 * (int64_t)p->max_seqs * v.tab_stride;
    e->tab = malloc((size_t)ntab * 4);
    e->len = calloc((size_t)p->max_seqs, 4);
    for (int64_t i = 0; i < ntab; i++) e->tab[i] = -1;
    kvd_step tmp;
    e->step_bytes = kvd_step_init(&tmp, e->a);
    e->staging = aligned_alloc(16, (size_t)e->step_bytes);
    e->dev = aligned_alloc(16, (size_t)e->step_bytes);
    memset(e->staging, 0, (size_t)e->step_bytes);
    *e->staging = tmp;
    e->sm = malloc((size_t)kvd_smem_floats(p->head_dim) * 4);
    e->nthr = nthr, e->extra_cap = extra_cap;
    e->order = malloc((size_t)nthr * sizeof(int));
    e->old_args = malloc((size_t)p->n_layers * sizeof *e->old_args);
    e->r.s = seed;
    return e;
}

static void emu_free(emu *e) {
    if (!e) return;
    kv_pages_free(e->a);
    free(e->mem), free(e->tab), free(e->len), free(e->staging), free(e->dev), free(e->sm), free(e->order), free(e->old_args);
    free(e);
}

/* The step record's layout and the capacity rules, independently of the caches. */
static void test_record(void) {
    kv_params p = kv_default_params();
    kv_parse_mode("int2", &p.fmt);
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 64, p.max_tokens = 5000, p.max_seqs = 7, p.max_chunk = 300;
    kv_pages *a = NULL;
    CHECK(kv_pages_init(&p, &a) == OMNI_OK && kv_pages_log_enable(a) == OMNI_OK, "%s", omni_last_error());
    kvd_step s;
    int64_t bytes = kvd_step_init(&s, a);
    CHECK(bytes % 16 == 0 && bytes == (int64_t)s.n_words * 4 && s.o_lval + s.cap_len <= s.n_words &&
              s.cap_flush == 300 / 32 + 7 && s.cap_seq == 7,
          "record layout: %lld bytes, cap_flush %d", (long long)bytes, s.cap_flush);
    /* a step longer than one log between takes is refused, not overflowed */
    int id, n = 40;
    kv_pages_seq_add(a, &id);
    CHECK(kv_pages_begin(a, 1, &id, &n) == OMNI_OK && kv_pages_commit(a, 1, &id, &n) == OMNI_OK, "step");
    CHECK(kv_pages_begin(a, 1, &id, &n) == OMNI_ERR_USAGE, "second step without taking the log accepted");
    kv_pages_free(a);
}

int main(void) {
    test_record();
    int flushed = 0;
    int64_t n_early = 0, n_late = 0;
    const int nthr[3] = {128, 37, 256};
    for (int i = 0; i < KVDC_NCFG; i++) {
        kv_format lf[4];
        kv_params p = kvdc_params(&kvdc_cfgs[i], lf);
        emu *e = emu_make(&p, nthr[i % 3], 1 + i * 7, 1000 + i);
        CHECK(e != NULL, "emu: %s", omni_last_error());
        if (!e) continue;
        kvdc_ops ops = {e, emu_seq_add, emu_seq_remove, emu_seq_clear, emu_step, emu_append, emu_commit, emu_snapshot};
        int bad = kvdc_run(&kvdc_cfgs[i], &ops, 77 + i, &flushed);
        char extra[32];
        snprintf(extra, sizeof extra, " (%d threads)", nthr[i % 3]);
        kvdc_print(&kvdc_cfgs[i], bad, extra);
        n_early += e->n_early, n_late += e->n_late;
        emu_free(e);
    }
    printf("%d blocks flushed by the emulated kernels, all compared (flush items: %lld at the upload, %lld in the "
           "appends)\n", flushed, (long long)n_early, (long long)n_late);
    CHECK(n_early > 100 && n_late > 100, "flush items at the upload %lld / in the appends %lld: both must occur",
          (long long)n_early, (long long)n_late);
    CHECK(flushed > 100, "too few flushes (%d) to test the quantizer", flushed);
    return check_exit();
}
