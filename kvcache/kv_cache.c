/* kv_cache.c - the host KV cache (kvcache.h): the page allocator (kv_pages.c) + host storage for the page bytes
 * (one aligned allocation, raw pages then quant pages) + the CPU attention (kv_attn_cpu.c). Layout and semantics:
 * kvcache.h and kv_layout.h. */
#include <stdio.h>
#include <stdlib.h>

#include "kv_cpu.h"
#include "kv_pages.h"
#include "kvcache.h"

struct kv_cache {
    kv_pages *pages;      /* allocator: tables, lengths, free lists, accounting */
    kv_cpu *cpu;          /* attention scratch */
    uint8_t *mem;         /* host storage: the one pool allocation */
    uint8_t *raw, *quant; /* raw pages at mem, quant pages after them */
};

/* ---------------------------------------------------------------- host storage */

static omni_status host_storage_alloc(kv_cache *c) {
    int64_t rb, qb;
    kv_pages_pool_bytes(c->pages, &rb, &qb);
    size_t total = ((size_t)(rb + qb) + 63) & ~(size_t)63;
    c->mem = aligned_alloc(64, total ? total : 64); /* untouched pages cost no RSS */
    if (!c->mem) return omni_fail(OMNI_ERR_NOMEM, "kv: cannot allocate the KV pool (%.1f MiB)", total / 1048576.0);
    c->raw = c->mem;
    c->quant = c->mem + rb;
    return OMNI_OK;
}

/* ---------------------------------------------------------------- cache */

omni_status kv_init_accounting(const kv_params *p, kv_cache **out) {
    *out = NULL;
    kv_pages *pages = NULL;
    omni_status st = kv_pages_init(p, &pages);
    if (st) return st;
    kv_cache *c = calloc(1, sizeof *c);
    if (!c) {
        kv_pages_free(pages);
        return omni_fail(OMNI_ERR_NOMEM, "kv: out of memory");
    }
    c->pages = pages;
    *out = c;
    return OMNI_OK;
}

omni_status kv_init(const kv_params *p, kv_cache **out) {
    *out = NULL;
    kv_cache *c = NULL;
    omni_status st = kv_init_accounting(p, &c);
    if (st) return st;
    if ((st = host_storage_alloc(c)) || (st = kv_cpu_init(p, &c->cpu))) {
        kv_free(c);
        return st;
    }
    *out = c;
    return OMNI_OK;
}

void kv_free(kv_cache *c) {
    if (!c) return;
    kv_pages_free(c->pages);
    kv_cpu_free(c->cpu);
    free(c->mem);
    free(c);
}

const kv_format *kv_layer_format(const kv_cache *c, int layer) {
    const kv_params *p = kv_pages_params(c->pages);
    return layer >= 0 && layer < p->n_layers ? &p->layer_fmt[layer] : NULL;
}

omni_status kv_seq_budget(const kv_cache *c, int64_t n_tokens, kv_budget *b) {
    return kv_pages_budget(c->pages, n_tokens, b);
}

void kv_step_pages(const kv_cache *c, int64_t L0, int64_t L1, int64_t *raw_pages, int64_t *quant_pages) {
    kv_pages_step(c->pages, L0, L1, raw_pages, quant_pages);
}

omni_status kv_seq_add(kv_cache *c, int *seq_id) { return kv_pages_seq_add(c->pages, seq_id); }
void kv_seq_remove(kv_cache *c, int seq_id) {
    if (c) kv_pages_seq_remove(c->pages, seq_id);
}
void kv_seq_clear(kv_cache *c, int seq_id) {
    if (c) kv_pages_seq_clear(c->pages, seq_id);
}
int64_t kv_seq_len(const kv_cache *c, int seq_id) { return c ? kv_pages_seq_len(c->pages, seq_id) : -1; }

omni_status kv_cache_layer_view(const kv_cache *c, int layer, kv_layer_view *v) {
    if (!c || layer < 0 || layer >= kv_pages_params(c->pages)->n_layers)
        return omni_fail(OMNI_ERR_USAGE, "kv: no layer %d", layer);
    kv_pages_layer_view(c->pages, layer, c->raw, c->quant, v);
    return OMNI_OK;
}

omni_status kv_forward(kv_cache *c, int layer, int n_seq, const int *seq_ids, const int *n_new, const float *q,
                       const float *k, const float *v, float *out, int n_q_heads, float scale) {
    if (!c) return omni_fail(OMNI_ERR_USAGE, "kv: no cache");
    const kv_params *p = kv_pages_params(c->pages);
    if (layer < 0 || layer >= p->n_layers)
        return omni_fail(OMNI_ERR_USAGE, "kv: layer %d out of range (%d layers)", layer, p->n_layers);
    if (n_q_heads <= 0 || n_q_heads % p->n_kv_heads)
        return omni_fail(OMNI_ERR_USAGE, "kv: %d query heads is not a multiple of %d KV heads", n_q_heads,
                         p->n_kv_heads);
    if (n_seq > 0 && (!seq_ids || !n_new || !q || !k || !v || !out))
        return omni_fail(OMNI_ERR_USAGE, "kv: NULL argument to kv_forward");
    if (!c->mem) return omni_fail(OMNI_ERR_USAGE, "kv: kv_forward on a bookkeeping-only cache (kv_init_accounting)");
    omni_status st = kv_pages_begin(c->pages, n_seq, seq_ids, n_new);
    if (st) return st;
    kv_layer_view view;
    kv_pages_layer_view(c->pages, layer, c->raw, c->quant, &view);
    kv_cpu_forward(c->cpu, &view, n_seq, seq_ids, n_new, q, k, v, out, n_q_heads, scale);
    return OMNI_OK;
}

omni_status kv_reserve(kv_cache *c, int n_seq, const int *seq_ids, const int *n_new) {
    if (!c) return omni_fail(OMNI_ERR_USAGE, "kv: no cache");
    if (n_seq > 0 && (!seq_ids || !n_new)) return omni_fail(OMNI_ERR_USAGE, "kv: NULL argument to kv_reserve");
    return kv_pages_begin(c->pages, n_seq, seq_ids, n_new);
}

omni_status kv_commit(kv_cache *c, int n_seq, const int *seq_ids, const int *n_new) {
    return kv_pages_commit(c->pages, n_seq, seq_ids, n_new);
}

/* ---------------------------------------------------------------- usage */

void kv_get_usage(const kv_cache *c, kv_usage *u) { kv_pages_usage(c->pages, u); }

void kv_format_line(const kv_cache *c, char *buf, int cap) { kv_pages_format_line(c->pages, buf, cap); }
