/* kvc_attn_bf16.cuh - the dedicated decode attention for bf16 layers (kvcache/cuda/kvc_attn_bf16.cu), as
 * kvc_attn.cu's kvc_decode dispatches to it: a workspace per kvc_attn, made at kvc_attn_init_ex when the
 * configuration selects a bf16 kernel variant (kvc_attn_params.bf16 > 0), and the call itself (the contract of
 * kvc_decode in kvcache/kv_cuda.h, for views with quant == 0). Internal to omni_kvcache_cuda. */
#ifndef OMNI_KVC_ATTN_BF16_CUH
#define OMNI_KVC_ATTN_BF16_CUH

#include <stdint.h>

#include "kernels/status.h"
#include "kvcache/kv_layout.h"

#define KVC_B16_NVAR 4 /* compiled variants (warps per CTA x ring stages per warp) */

struct kvc_b16;

/* Workspace for variant var (0..KVC_B16_NVAR-1) and calls of up to max_seqs sequences; n_pass / HP as in
 * kvc_attn.cu (query-head passes of 8 per KV head, head rows). */
omni_status kvc_b16_init(int var, int max_seqs, int Hq, int Hkv, int D, int n_pass, int n_sm, kvc_b16 **out);
void kvc_b16_free(kvc_b16 *b); /* NULL is a no-op */
/* kvc_decode for a bf16 layer (arguments checked by the caller). */
omni_status kvc_b16_decode(kvc_b16 *b, const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *n_new,
                           const uint16_t *q, uint16_t *out, float scale, void *stream);
int kvc_b16_ctas(const kvc_b16 *b); /* CTAs of the streaming kernel */

#endif
