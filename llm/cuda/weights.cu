/* weights.cu - the decoder's weights on the device (see weights.h): one allocation, fused layouts, loading through
 * pinned staging buffers, random weights made on the device. */
#include "llm/cuda/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KVC_EMU
#include <cuda_runtime.h>
#endif

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/tensor.h"

#define ALIGN 256
#define STAGE_BYTES ((size_t)64 << 20) /* per staging buffer */

/* ---- layout: one walk over the tensors assigns aligned offsets (and pointers when base is given) --------- */

typedef struct {
    char *base; /* NULL: only count */
    size_t off;
} walker;

static void *take(walker *k, size_t bytes) {
    size_t o = (k->off + ALIGN - 1) / ALIGN * ALIGN;
    k->off = o + bytes;
    return k->base ? k->base + o : NULL;
}

static void walk(const llm_config *c, walker *k, lcw_weights *w) {
    const size_t H = c->hidden, D = c->head_dim, V = c->vocab, qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * D;
    const size_t qd = (size_t)c->n_heads * D, E = c->n_experts;
    const size_t I = E ? (size_t)c->moe_intermediate : (size_t)c->intermediate;
    uint16_t *embed = (uint16_t *)take(k, 2 * V * H), *norm = (uint16_t *)take(k, 2 * H);
    uint16_t *head = c->tie_word_embeddings ? embed : (uint16_t *)take(k, 2 * V * H);
    float *inv = (float *)take(k, 4 * (D / 2));
    int32_t *slot = (int32_t *)take(k, 4 * (D / 2));
    if (w) w->embed = embed, w->norm = norm, w->lm_head = head, w->inv_freq = inv, w->slot_stream = slot;
    for (int l = 0; l < c->n_layers; l++) {
        lcw_layer L;
        memset(&L, 0, sizeof L);
        L.in_norm = (uint16_t *)take(k, 2 * H);
        L.post_norm = (uint16_t *)take(k, 2 * H);
        L.q_norm = (uint16_t *)take(k, 2 * D);
        L.k_norm = (uint16_t *)take(k, 2 * D);
        L.qkv = (uint16_t *)take(k, 2 * qkv * H);
        L.o = (uint16_t *)take(k, 2 * H * qd);
        if (E) L.router = (uint16_t *)take(k, 2 * E * H);
        L.gate_up = (uint16_t *)take(k, 2 * (E ? E : 1) * 2 * I * H);
        L.down = (uint16_t *)take(k, 2 * (E ? E : 1) * H * I);
        if (w) w->layers[l] = L;
    }
}

size_t lcw_bytes(const llm_config *cfg) {
    walker k = {NULL, 0};
    walk(cfg, &k, NULL);
    return (k.off + ALIGN - 1) / ALIGN * ALIGN;
}

/* inv_freq as transformers computes it in fp32, and the MRoPE slot -> stream map (llm/model.c's init_rope). */
static void rope_host(const llm_config *c, float *inv, int32_t *slot) {
    const int half = c->head_dim / 2;
    for (int j = 0; j < half; j++) {
        inv[j] = 1.0f / powf(c->rope_theta, (float)(2 * j) / (float)c->head_dim);
        int s = 0;
        if (c->mrope_interleaved) {
            if (j % 3 == 1 && j < 3 * c->mrope_section[1]) s = 1;
            else if (j % 3 == 2 && j < 3 * c->mrope_section[2]) s = 2;
        } else if (j >= c->mrope_section[0]) {
            s = j < c->mrope_section[0] + c->mrope_section[1] ? 1 : 2;
        }
        slot[j] = s;
    }
}

static omni_status alloc(lcw_weights *w, const llm_config *cfg) {
    memset(w, 0, sizeof *w);
    w->layers = (lcw_layer *)calloc((size_t)cfg->n_layers, sizeof(lcw_layer));
    if (!w->layers) return omni_fail(OMNI_ERR_NOMEM, "weights: out of host memory");
    w->bytes = lcw_bytes(cfg);
    cudaError_t e = cudaMalloc(&w->base, w->bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        w->base = NULL;
        lcw_free(w);
        return omni_fail(OMNI_ERR_NOMEM, "weights: cudaMalloc of %.2f GiB (%s:%d): %s", w->bytes / 1073741824.0,
                         __FILE__, __LINE__, cudaGetErrorString(e));
    }
    walker k = {(char *)w->base, 0};
    walk(cfg, &k, w);
    return OMNI_OK;
}

void lcw_free(lcw_weights *w) {
    if (!w) return;
    if (w->base) cudaFree(w->base);
    free(w->layers);
    memset(w, 0, sizeof *w);
}

/* ---- loading through pinned staging buffers ------------------------------------------------------------ */

typedef struct {
    void *buf[2];
    cudaEvent_t ev[2];
    int cur;
    cudaStream_t s;
    size_t done, total; /* bytes copied / to copy (for progress) */
    int progress, next_pct;
} stager;

static omni_status stager_init(stager *g, cudaStream_t s, size_t total, int progress) {
    memset(g, 0, sizeof *g);
    g->s = s, g->total = total, g->progress = progress, g->next_pct = 10;
    for (int i = 0; i < 2; i++) {
        OMNI_CUDA_TRY(cudaHostAlloc(&g->buf[i], STAGE_BYTES, cudaHostAllocDefault));
        OMNI_CUDA_TRY(cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming));
    }
    return OMNI_OK;
}

static void stager_free(stager *g) {
    for (int i = 0; i < 2; i++) {
        if (g->ev[i]) cudaEventSynchronize(g->ev[i]), cudaEventDestroy(g->ev[i]);
        if (g->buf[i]) cudaFreeHost(g->buf[i]);
    }
}

/* Copy tensor t (any float dtype) as bf16 to device dst, in staging-buffer chunks. */
static omni_status stage_tensor(stager *g, uint16_t *dst, const omni_tensor *t) {
    const int64_t n = omni_tensor_numel(t), per = (int64_t)(STAGE_BYTES / 2);
    const size_t es = omni_dtype_size(t->dtype);
    for (int64_t i0 = 0; i0 < n; i0 += per) {
        const int64_t m = n - i0 < per ? n - i0 : per;
        OMNI_CUDA_TRY(cudaEventSynchronize(g->ev[g->cur])); /* the previous copy out of this buffer is done */
        uint16_t *b = (uint16_t *)g->buf[g->cur];
        const char *src = (const char *)t->data + (size_t)i0 * es;
        if (t->dtype == OMNI_BF16) {
            memcpy(b, src, (size_t)m * 2);
        } else {
            for (int64_t j = 0; j < m; j++) b[j] = omni_f32_to_bf16(omni_get_f32(src, t->dtype, j));
        }
        OMNI_CUDA_TRY(cudaMemcpyAsync(dst + i0, b, (size_t)m * 2, cudaMemcpyHostToDevice, g->s));
        OMNI_CUDA_TRY(cudaEventRecord(g->ev[g->cur], g->s));
        g->cur ^= 1;
        g->done += (size_t)m * 2;
        if (g->progress && g->total && g->done * 100 >= (size_t)g->next_pct * g->total) {
            fprintf(stderr, "weights: %.2f / %.2f GiB on the GPU\n", g->done / 1073741824.0, g->total / 1073741824.0);
            while (g->done * 100 >= (size_t)g->next_pct * g->total) g->next_pct += 10;
        }
    }
    return OMNI_OK;
}

/* Look up "<prefix><name>" with the given shape (1 or 2 dims; b <= 0: 1-D) and stage it to dst. */
static omni_status stage_named(stager *g, const omni_ckpt *ck, uint16_t *dst, int64_t a, int64_t b, const char *fmt,
                               const char *prefix, int l, int e) {
    char name[256];
    if (e >= 0)
        snprintf(name, sizeof name, fmt, prefix, l, e);
    else
        snprintf(name, sizeof name, fmt, prefix, l);
    int64_t shape[2] = {a, b};
    omni_tensor t;
    omni_status st = omni_ckpt_get(ck, name, b > 0 ? 2 : 1, shape, &t);
    return st ? st : stage_tensor(g, dst, &t);
}

static omni_status load_moe(stager *g, const llm_config *c, const omni_ckpt *ck, const lcw_layer *L, int l) {
    const int64_t E = c->n_experts, I = c->moe_intermediate, H = c->hidden;
    const char *p = c->prefix;
    omni_status st = stage_named(g, ck, L->router, E, H, "%slayers.%d.mlp.gate.weight", p, l, -1);
    if (st) return st;
    char name[256];
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.gate_up_proj", p, l);
    if (omni_ckpt_find(ck, name)) { /* fused layout (transformers v5 names): gate_up [E, 2I, H], down [E, H, I] */
        int64_t s3[3] = {E, 2 * I, H}, d3[3] = {E, H, I};
        omni_tensor gu, dn;
        if ((st = omni_ckpt_get(ck, name, 3, s3, &gu)) || (st = stage_tensor(g, L->gate_up, &gu))) return st;
        if ((st = omni_ckpt_getf(ck, &dn, 3, d3, "%slayers.%d.mlp.experts.down_proj", p, l))) return st;
        return stage_tensor(g, L->down, &dn);
    }
    for (int e = 0; e < E && !st; e++) {
        uint16_t *gu = L->gate_up + (size_t)e * 2 * I * H;
        if (!st) st = stage_named(g, ck, gu, I, H, "%slayers.%d.mlp.experts.%d.gate_proj.weight", p, l, e);
        if (!st) st = stage_named(g, ck, gu + (size_t)I * H, I, H, "%slayers.%d.mlp.experts.%d.up_proj.weight", p, l, e);
        if (!st) st = stage_named(g, ck, L->down + (size_t)e * H * I, H, I, "%slayers.%d.mlp.experts.%d.down_proj.weight", p, l, e);
    }
    return st;
}

static omni_status load_layer(stager *g, const llm_config *c, const omni_ckpt *ck, const lcw_layer *L, int l) {
    const int64_t H = c->hidden, D = c->head_dim, qd = (int64_t)c->n_heads * D, kd = (int64_t)c->n_kv_heads * D;
    const char *p = c->prefix;
    omni_status st;
    if ((st = stage_named(g, ck, L->in_norm, H, 0, "%slayers.%d.input_layernorm.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->post_norm, H, 0, "%slayers.%d.post_attention_layernorm.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->q_norm, D, 0, "%slayers.%d.self_attn.q_norm.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->k_norm, D, 0, "%slayers.%d.self_attn.k_norm.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->qkv, qd, H, "%slayers.%d.self_attn.q_proj.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->qkv + qd * H, kd, H, "%slayers.%d.self_attn.k_proj.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->qkv + (qd + kd) * H, kd, H, "%slayers.%d.self_attn.v_proj.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->o, H, qd, "%slayers.%d.self_attn.o_proj.weight", p, l, -1)))
        return st;
    if (c->n_experts) return load_moe(g, c, ck, L, l);
    const int64_t I = c->intermediate;
    if ((st = stage_named(g, ck, L->gate_up, I, H, "%slayers.%d.mlp.gate_proj.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->gate_up + I * H, I, H, "%slayers.%d.mlp.up_proj.weight", p, l, -1)) ||
        (st = stage_named(g, ck, L->down, H, I, "%slayers.%d.mlp.down_proj.weight", p, l, -1)))
        return st;
    return OMNI_OK;
}

static omni_status upload_rope(const llm_config *c, lcw_weights *w, cudaStream_t s) {
    const int half = c->head_dim / 2;
    float *inv = (float *)malloc(sizeof(float) * half);
    int32_t *slot = (int32_t *)malloc(sizeof(int32_t) * half);
    if (!inv || !slot) {
        free(inv), free(slot);
        return omni_fail(OMNI_ERR_NOMEM, "weights: out of host memory");
    }
    rope_host(c, inv, slot);
    cudaError_t e = cudaMemcpyAsync(w->inv_freq, inv, sizeof(float) * half, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(w->slot_stream, slot, sizeof(int32_t) * half, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    free(inv), free(slot);
    if (e != cudaSuccess)
        return omni_fail(OMNI_ERR_RUNTIME, "weights: rope tables (%s:%d): %s", __FILE__, __LINE__, cudaGetErrorString(e));
    return OMNI_OK;
}

omni_status lcw_load(lcw_weights *w, const llm_config *cfg, const omni_ckpt *ck, int progress, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    omni_status st = alloc(w, cfg);
    if (st) return st;
    stager g;
    st = stager_init(&g, s, w->bytes, progress);
    const int64_t H = cfg->hidden, V = cfg->vocab;
    char name[256];
    if (!st) st = stage_named(&g, ck, w->embed, V, H, "%sembed_tokens.weight", cfg->prefix, 0, -1);
    if (!st) st = stage_named(&g, ck, w->norm, H, 0, "%snorm.weight", cfg->prefix, 0, -1);
    if (!st && !cfg->tie_word_embeddings) {
        snprintf(name, sizeof name, "%s", cfg->lm_head);
        st = stage_named(&g, ck, w->lm_head, V, H, "%s", name, 0, -1);
    }
    for (int l = 0; !st && l < cfg->n_layers; l++) st = load_layer(&g, cfg, ck, &w->layers[l], l);
    stager_free(&g);
    if (!st) st = upload_rope(cfg, w, s);
    if (!st) {
        cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            st = omni_fail(OMNI_ERR_RUNTIME, "weights: copy (%s:%d): %s", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    if (st) lcw_free(w);
    return st;
}

/* ---- random weights ------------------------------------------------------------------------------------ */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* p[i] = bf16(uniform(-a, a)) from a hash of (seed, i); a = 0 fills `one` (norm weights: 1.0). */
__global__ void rand_fill_kernel(uint16_t *p, size_t n, uint64_t seed, float a, uint16_t one) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (a == 0.f) {
            p[i] = one;
            continue;
        }
        uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
        float u = (float)(h >> 40) * 0x1p-24f; /* [0, 1) */
        __nv_bfloat16 v = __float2bfloat16_rn((2.f * u - 1.f) * a);
        p[i] = *(uint16_t *)&v;
    }
}

static omni_status fill(uint16_t *p, size_t n, uint64_t seed, float a, cudaStream_t s) {
    const size_t blocks = n / 256 + 1 < 4096 ? n / 256 + 1 : 4096;
    omni_launch(rand_fill_kernel, (unsigned)blocks, 256, 0, s, p, n, seed, a, omni_f32_to_bf16(1.f));
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

omni_status lcw_random(lcw_weights *w, const llm_config *c, uint64_t seed, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    omni_status st = alloc(w, c);
    if (st) return st;
    const size_t H = c->hidden, D = c->head_dim, V = c->vocab, E = c->n_experts;
    const size_t qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * D, qd = (size_t)c->n_heads * D;
    const size_t I = E ? (size_t)c->moe_intermediate : (size_t)c->intermediate;
    const float a = 0.02f * 1.7320508f; /* uniform with std 0.02 */
    uint64_t k = seed * 1000003;
    if (!st) st = fill(w->embed, V * H, k++, a, s);
    if (!st) st = fill(w->norm, H, k++, 0.f, s);
    if (!st && !c->tie_word_embeddings) st = fill(w->lm_head, V * H, k++, a, s);
    for (int l = 0; !st && l < c->n_layers; l++) {
        const lcw_layer *L = &w->layers[l];
        if (!st) st = fill(L->in_norm, H, k++, 0.f, s);
        if (!st) st = fill(L->post_norm, H, k++, 0.f, s);
        if (!st) st = fill(L->q_norm, D, k++, 0.f, s);
        if (!st) st = fill(L->k_norm, D, k++, 0.f, s);
        if (!st) st = fill(L->qkv, qkv * H, k++, a, s);
        if (!st) st = fill(L->o, H * qd, k++, a, s);
        if (!st && E) st = fill(L->router, E * H, k++, a, s);
        if (!st) st = fill(L->gate_up, (E ? E : 1) * 2 * I * H, k++, a, s);
        if (!st) st = fill(L->down, (E ? E : 1) * H * I, k++, a, s);
    }
    if (!st) st = upload_rope(c, w, s);
    if (st) lcw_free(w);
    return st;
}
