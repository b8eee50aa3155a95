/* kv_dev.cu - the KV cache in device memory (kvcache/kv_dev.h): the host page allocator (kv_pages) mirrored on the
 * device, the per-step upload of its table changes, and the append / flush kernels. The kernels run the CTA
 * programs of kvcache/kv_append.h (the same code the CPU emulation in tests/kvcache checks byte for byte against
 * the CPU cache): `for each phase: program(phase, threadIdx.x); __syncthreads()`.
 *
 * Device memory (one cudaMalloc, regions 256-byte aligned): raw pool | quant pool | tables [2][max_seqs][stride]
 * | lengths [max_seqs] | step record | early-flush arguments [n_layers]. Host: a pinned copy of the step record
 * (staging) and an event recorded after each upload's copy (kv_dev_step waits on it before it rewrites the staging).
 * Launches: the upload's table update (plain) and, when the step flushes blocks whose rows were all committed,
 * kvd_flush_old_kernel for every layer at once (plain; kv_append.h "Early flush"); each layer's append is a
 * programmatic dependent launch (it waits for the kernel before it, q/k norm + RoPE, before reading anything).
 * OMNI_KV_EARLY_FLUSH=0 / OMNI_KV_APPEND_PDL=0 (or OMNI_CUDA_PDL=0) at kv_dev_init: every flush in the per-layer
 * append / a plain append launch, the session-5 behaviour (A/B timing). */
#ifndef KVC_EMU
#include <cuda_runtime.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache/kv_append.h"
#include "kvcache/kv_dev.h"
#include "kvcache/kv_dev_step.h"
#include "kvc_ptx.cuh"

#define KVD_APPLY_THREADS 1024
#define KVD_OLD_THREADS 256 /* threads per CTA of the early flush (the programs take any count) */
#define KVD_OLD_ITEMS 16    /* flush items per layer in the grid of a captured early flush (CTAs loop over more) */

struct kv_dev {
    kv_pages *pages;
    uint8_t *mem;              /* the one device allocation */
    uint8_t *raw, *quant;      /* pools */
    int32_t *tab, *len;        /* device tables and lengths */
    kvd_step *dstep;           /* device step record */
    kvd_step *staging;         /* pinned host step record */
    int64_t step_bytes, mem_bytes;
    cudaEvent_t uploaded;      /* recorded after each upload's copy */
    kvd_append_args *dargs;    /* device: early-flush arguments of each layer (KVD_FLUSH_OLD, t_cap 0) */
    int n_layers, n_kv_heads;
    int early, pdl;            /* early flush at the upload; append as a programmatic dependent launch */
    int n_seq, *ids, *n_new;   /* the step in flight (host) */
    int t_step;                /* its tokens; -1 = no step */
    int n_flush_step;          /* its flushes */
    int n_old_step;            /* of which all rows were committed before the step */
};

static int env_off(const char *name) {
    const char *e = getenv(name);
    return e && e[0] == '0';
}

#define KVD_CHECK(call)                                                                                        \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess)                                                                                 \
            return omni_fail(OMNI_ERR_RUNTIME, "kv dev: %s failed at %s:%d: %s", #call, __FILE__, __LINE__,    \
                             cudaGetErrorString(e_));                                                          \
    } while (0)

__global__ void __launch_bounds__(KVD_APPLY_THREADS) kvd_apply_kernel(const kvd_step *s, int32_t *tab, int32_t *len,
                                                                      int tab_stride, int max_seqs) {
    for (int ph = 0; ph < KVD_APPLY_PHASES; ph++) {
        kvd_apply_phase(s, tab, len, tab_stride, max_seqs, ph, threadIdx.x, blockDim.x);
        __syncthreads();
    }
}

__global__ void __launch_bounds__(KVD_THREADS) kvd_append_kernel(const kvd_append_args a) {
    KVC_DYN_SMEM(float, kvd_sm);
    /* The setup reads the step record and the tables, written by the upload at the step's start: complete before
     * the kernel before this one started (every kernel of the decode chain waits before it triggers its
     * dependents), so its dependent loads overlap that kernel. k and v come from it: read after the wait. */
    kvd_cta c;
    kvd_cta_setup(&a, (int)blockIdx.x, &c);
    kvc_pdl_wait();
    kvc_pdl_launch(); /* the attention may be scheduled; it waits for this grid to complete */
    for (int ph = 0; ph < c.nph; ph++) { /* nph is the same for every thread of the CTA */
        kvd_cta_phase(&a, &c, ph, (int)threadIdx.x, (int)blockDim.x, kvd_sm);
        __syncthreads();
    }
}

/* The early flush: CTA (x, layer blockIdx.y) runs flush items x, x + gridDim.x, ... below n_items * Hkv of that
 * layer's KVD_FLUSH_OLD program (items of other kinds and beyond the step's flushes do nothing). */
__global__ void __launch_bounds__(KVD_OLD_THREADS) kvd_flush_old_kernel(const kvd_append_args *args, int n_items) {
    KVC_DYN_SMEM(float, kvd_sm);
    const kvd_append_args *a = args + blockIdx.y;
    const int n_cta = n_items * a->v.n_kv_heads;
    for (int cta = (int)blockIdx.x; cta < n_cta; cta += (int)gridDim.x) {
        kvd_cta c;
        kvd_cta_setup(a, cta, &c);
        for (int ph = 0; ph < c.nph; ph++) {
            kvd_cta_phase(a, &c, ph, (int)threadIdx.x, (int)blockDim.x, kvd_sm);
            __syncthreads();
        }
    }
}

static int64_t align256(int64_t x) { return (x + 255) & ~(int64_t)255; }

extern "C" omni_status kv_dev_init(const kv_params *p, kv_dev **out) {
    *out = NULL;
    if (p && p->head_dim > 256)
        return omni_fail(OMNI_ERR_USAGE, "kv dev: head_dim %d is larger than 256 (device cache limit)", p->head_dim);
    kv_pages *pages = NULL;
    omni_status st = kv_pages_init(p, &pages);
    if (st) return st;
    kv_dev *d = (kv_dev *)calloc(1, sizeof *d);
    if (!d) {
        kv_pages_free(pages);
        return omni_fail(OMNI_ERR_NOMEM, "kv dev: out of memory");
    }
    d->pages = pages;
    d->t_step = -1;
    d->ids = (int *)malloc((size_t)p->max_seqs * sizeof(int));
    d->n_new = (int *)malloc((size_t)p->max_seqs * sizeof(int));
    if (!d->ids || !d->n_new || (st = kv_pages_log_enable(pages))) {
        kv_dev_free(d);
        return st ? st : omni_fail(OMNI_ERR_NOMEM, "kv dev: out of memory");
    }
    kvd_step layout;
    d->step_bytes = kvd_step_init(&layout, pages);
    kv_layer_view v;
    kv_pages_layer_view(pages, 0, NULL, NULL, &v);
    int64_t rb, qb, ntab = 2 * (int64_t)p->max_seqs * v.tab_stride;
    kv_pages_pool_bytes(pages, &rb, &qb);
    const int64_t o_quant = align256(rb), o_tab = o_quant + align256(qb), o_len = o_tab + align256(ntab * 4);
    const int64_t o_step = o_len + align256((int64_t)p->max_seqs * 4), o_args = o_step + align256(d->step_bytes);
    d->n_layers = p->n_layers, d->n_kv_heads = p->n_kv_heads;
    d->early = !env_off("OMNI_KV_EARLY_FLUSH");
    d->pdl = !env_off("OMNI_KV_APPEND_PDL") && !env_off("OMNI_CUDA_PDL");
    d->mem_bytes = o_args + align256((int64_t)p->n_layers * (int64_t)sizeof(kvd_append_args));
    cudaError_t e = cudaMalloc((void **)&d->mem, (size_t)d->mem_bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        const double need = d->mem_bytes / 1048576.0;
        d->mem = NULL;
        kv_dev_free(d);
        return omni_fail(OMNI_ERR_NOMEM, "kv dev: cannot allocate the KV cache on the GPU: %.1f MiB needed, %.1f MiB "
                         "free (cudaMalloc: %s)", need, free_b / 1048576.0, cudaGetErrorString(e));
    }
    d->raw = d->mem;
    d->quant = d->mem + o_quant;
    d->tab = (int32_t *)(d->mem + o_tab);
    d->len = (int32_t *)(d->mem + o_len);
    d->dstep = (kvd_step *)(d->mem + o_step);
    d->dargs = (kvd_append_args *)(d->mem + o_args);
    if ((e = cudaHostAlloc((void **)&d->staging, (size_t)d->step_bytes, cudaHostAllocDefault)) != cudaSuccess) {
        d->staging = NULL;
        kv_dev_free(d);
        return omni_fail(OMNI_ERR_NOMEM, "kv dev: cudaHostAlloc of %lld bytes failed: %s", (long long)d->step_bytes,
                         cudaGetErrorString(e));
    }
    memset(d->staging, 0, (size_t)d->step_bytes);
    *d->staging = layout;
    kvd_append_args *hargs = (kvd_append_args *)calloc((size_t)p->n_layers, sizeof *hargs);
    if (!hargs) {
        kv_dev_free(d);
        return omni_fail(OMNI_ERR_NOMEM, "kv dev: out of memory");
    }
    for (int l = 0; l < p->n_layers; l++) {
        kv_layer_view lv;
        kv_dev_layer_view(d, l, &lv);
        kvd_append_setup(&hargs[l], &lv, d->dstep, NULL, NULL, 0, layout.cap_flush);
        hargs[l].flush = KVD_FLUSH_OLD;
    }
    e = cudaMemcpy(d->dargs, hargs, (size_t)p->n_layers * sizeof *hargs, cudaMemcpyHostToDevice);
    free(hargs);
    if (e != cudaSuccess || (e = cudaEventCreateWithFlags(&d->uploaded, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMemset(d->tab, 0xff, (size_t)ntab * 4)) != cudaSuccess ||
        (e = cudaMemset(d->len, 0, (size_t)p->max_seqs * 4)) != cudaSuccess ||
        (e = cudaMemcpy(d->dstep, d->staging, (size_t)d->step_bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        kv_dev_free(d);
        return omni_fail(OMNI_ERR_RUNTIME, "kv dev: device setup failed: %s", cudaGetErrorString(e));
    }
    *out = d;
    return OMNI_OK;
}

extern "C" void kv_dev_free(kv_dev *d) {
    if (!d) return;
    if (d->mem) {
        cudaDeviceSynchronize();
        cudaFree(d->mem);
    }
    if (d->staging) cudaFreeHost(d->staging);
    if (d->uploaded) cudaEventDestroy(d->uploaded);
    kv_pages_free(d->pages);
    free(d->ids);
    free(d->n_new);
    free(d);
}

extern "C" omni_status kv_dev_seq_add(kv_dev *d, int *seq_id) { return kv_pages_seq_add(d->pages, seq_id); }
extern "C" void kv_dev_seq_remove(kv_dev *d, int seq_id) {
    if (d) kv_pages_seq_remove(d->pages, seq_id);
}
extern "C" void kv_dev_seq_clear(kv_dev *d, int seq_id) {
    if (d) kv_pages_seq_clear(d->pages, seq_id);
}
extern "C" int64_t kv_dev_seq_len(const kv_dev *d, int seq_id) { return d ? kv_pages_seq_len(d->pages, seq_id) : -1; }

extern "C" omni_status kv_dev_step(kv_dev *d, int n_seq, const int *seq_ids, const int *n_new) {
    if (!d) return omni_fail(OMNI_ERR_USAGE, "kv dev: no cache");
    if (d->t_step >= 0) return omni_fail(OMNI_ERR_USAGE, "kv dev: a step is in flight (kv_dev_commit first)");
    KVD_CHECK(cudaEventSynchronize(d->uploaded)); /* the previous upload has read the staging buffer */
    omni_status st = n_seq > 0 ? kv_pages_begin(d->pages, n_seq, seq_ids, n_new) : OMNI_OK;
    if (!st) st = kvd_step_fill(d->staging, d->pages, n_seq, seq_ids, n_new);
    if (st) return st;
    if (n_seq > 0) {
        d->n_seq = n_seq;
        memcpy(d->ids, seq_ids, (size_t)n_seq * sizeof(int));
        memcpy(d->n_new, n_new, (size_t)n_seq * sizeof(int));
        d->t_step = d->staging->n_tok;
        d->n_flush_step = d->staging->n_flush;
        d->n_old_step = d->early ? kvd_old_flushes(d->staging) : 0;
    }
    return OMNI_OK;
}

extern "C" omni_status kv_dev_upload(kv_dev *d, void *stream) {
    if (!d) return omni_fail(OMNI_ERR_USAGE, "kv dev: no cache");
    cudaStream_t st = (cudaStream_t)stream;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    KVD_CHECK(cudaStreamIsCapturing(st, &cap));
    KVD_CHECK(cudaMemcpyAsync(d->dstep, d->staging, (size_t)d->step_bytes, cudaMemcpyHostToDevice, st));
    if (cap == cudaStreamCaptureStatusActive)
        KVD_CHECK(cudaEventRecordWithFlags(d->uploaded, st, cudaEventRecordExternal));
    else
        KVD_CHECK(cudaEventRecord(d->uploaded, st));
    kv_layer_view v;
    kv_pages_layer_view(d->pages, 0, NULL, NULL, &v);
    KVD_CHECK(kvc_launch(kvd_apply_kernel, dim3(1), dim3(KVD_APPLY_THREADS), 0, st, 0, (const kvd_step *)d->dstep,
                         d->tab, d->len, v.tab_stride, v.max_seqs));
    /* the early flush: sized for this step, or (captured: any replayed step) for the record's flush capacity */
    const size_t smem = (size_t)kvd_smem_floats(v.head_dim) * 4;
    if (d->early && cap == cudaStreamCaptureStatusActive && d->staging->cap_flush > 0) {
        const int n = d->staging->cap_flush, x = n < KVD_OLD_ITEMS ? n : KVD_OLD_ITEMS;
        KVD_CHECK(kvc_launch(kvd_flush_old_kernel, dim3((unsigned)(x * d->n_kv_heads), (unsigned)d->n_layers),
                             dim3(KVD_OLD_THREADS), smem, st, 0, (const kvd_append_args *)d->dargs, n));
    } else if (d->early && cap == cudaStreamCaptureStatusNone && d->t_step >= 0 && d->n_old_step > 0) {
        const int n = d->n_flush_step;
        KVD_CHECK(kvc_launch(kvd_flush_old_kernel, dim3((unsigned)(n * d->n_kv_heads), (unsigned)d->n_layers),
                             dim3(KVD_OLD_THREADS), smem, st, 0, (const kvd_append_args *)d->dargs, n));
    }
    return OMNI_OK;
}

extern "C" omni_status kv_dev_layer_view(const kv_dev *d, int layer, kv_layer_view *v) {
    if (!d || layer < 0 || layer >= kv_pages_params(d->pages)->n_layers)
        return omni_fail(OMNI_ERR_USAGE, "kv dev: no layer %d", layer);
    kv_pages_layer_view(d->pages, layer, d->raw, d->quant, v);
    v->raw_tab = d->tab;
    v->quant_tab = d->tab + (int64_t)v->max_seqs * v->tab_stride;
    v->len = d->len;
    return OMNI_OK;
}

extern "C" omni_status kv_dev_append(kv_dev *d, int layer, const void *k, const void *v, int t_cap, void *stream) {
    if (!d) return omni_fail(OMNI_ERR_USAGE, "kv dev: no cache");
    cudaStream_t st = (cudaStream_t)stream;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    KVD_CHECK(cudaStreamIsCapturing(st, &cap));
    if (d->t_step < 0 && cap == cudaStreamCaptureStatusNone)
        return omni_fail(OMNI_ERR_USAGE, "kv dev: kv_dev_append without kv_dev_step");
    if (t_cap < 0 || (t_cap == 0 && cap != cudaStreamCaptureStatusNone))
        return omni_fail(OMNI_ERR_USAGE, "kv dev: t_cap %d (> 0 required while capturing a graph)", t_cap);
    if (t_cap > 0 && t_cap < d->t_step)
        return omni_fail(OMNI_ERR_USAGE, "kv dev: step of %d tokens, launch capacity t_cap %d", d->t_step, t_cap);
    if (t_cap > kv_pages_params(d->pages)->max_chunk)
        return omni_fail(OMNI_ERR_USAGE, "kv dev: t_cap %d > max_chunk %d", t_cap, kv_pages_params(d->pages)->max_chunk);
    if (d->t_step > 0 && (!k || !v)) return omni_fail(OMNI_ERR_USAGE, "kv dev: NULL k/v");
    kv_layer_view view;
    omni_status s = kv_dev_layer_view(d, layer, &view);
    if (s) return s;
    /* eager: the step's flush items (none when the upload ran them all) */
    const int tc = t_cap ? t_cap : d->t_step;
    const int fc = t_cap ? kvd_flush_cap(d->pages, t_cap) : d->n_old_step == d->n_flush_step ? 0 : d->n_flush_step;
    const int64_t n_cta = (int64_t)(tc + fc) * view.n_kv_heads;
    if (n_cta == 0) return OMNI_OK;
    kvd_append_args a;
    kvd_append_setup(&a, &view, d->dstep, k, v, tc, fc);
    a.flush = d->early ? KVD_FLUSH_NEW : KVD_FLUSH_ALL;
    KVD_CHECK(kvc_launch(kvd_append_kernel, dim3((unsigned)n_cta), dim3(KVD_THREADS),
                         (size_t)kvd_smem_floats(view.head_dim) * 4, st, d->pdl, a));
    return OMNI_OK;
}

extern "C" omni_status kv_dev_commit(kv_dev *d) {
    if (!d || d->t_step < 0) return omni_fail(OMNI_ERR_USAGE, "kv dev: kv_dev_commit without a step");
    omni_status st = kv_pages_commit(d->pages, d->n_seq, d->ids, d->n_new);
    if (st) return st;
    d->t_step = -1;
    return OMNI_OK;
}

extern "C" omni_status kv_dev_abort(kv_dev *d, void *stream) {
    if (!d || d->t_step < 0) return OMNI_OK;
    for (int i = 0; i < d->n_seq; i++) kv_pages_seq_clear(d->pages, d->ids[i]);
    d->t_step = -1;
    d->staging->n_seq = d->staging->n_tok = d->staging->n_flush = 0; /* the re-sent record carries no step */
    return kv_dev_upload(d, stream);
}

extern "C" void kv_dev_batch_view(const kv_dev *d, kv_dev_batch *b) {
    const kvd_step *s = d->staging; /* same layout as the device copy */
    const int32_t *w = (const int32_t *)d->dstep;
    b->counts = w; /* n_seq, n_tok, n_flush: the first words of the record */
    b->slot = w + s->o_slot;
    b->len0 = w + s->o_len0;
    b->n_new = w + s->o_new;
    b->row0 = w + s->o_row0;
    b->max_seqs = s->cap_seq;
}

extern "C" void kv_dev_get_usage(const kv_dev *d, kv_usage *u) { kv_pages_usage(d->pages, u); }
extern "C" omni_status kv_dev_seq_budget(const kv_dev *d, int64_t n_tokens, kv_budget *b) {
    return kv_pages_budget(d->pages, n_tokens, b);
}
extern "C" void kv_dev_format_line(const kv_dev *d, char *buf, int cap) { kv_pages_format_line(d->pages, buf, cap); }
extern "C" const kv_params *kv_dev_params(const kv_dev *d) { return kv_pages_params(d->pages); }
