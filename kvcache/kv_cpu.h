/* kv_cpu.h - internal to kvcache: attention of a chunk over the stored history plus itself, and the append /
 * flush (quantization) of the chunk into its pages, on the CPU, over a layer view with host pointers
 * (kv_layout.h). Used by kv_cache.c (kv_forward); the pages of the step must already be reserved
 * (kv_pages_begin): the view's tables hold them and its lengths are the committed ones.
 * Threading: OpenMP inside (threads = omp_get_max_threads() at kv_cpu_init); no allocation after init. */
#ifndef OMNI_KV_CPU_H
#define OMNI_KV_CPU_H

#include "kv_layout.h"
#include "kvcache.h"

typedef struct kv_cpu kv_cpu;

/* Scratch for chunks of up to max_chunk tokens and max_seqs sequences of n_kv_heads x head_dim (p validated). */
omni_status kv_cpu_init(const kv_params *p, kv_cpu **out);
void kv_cpu_free(kv_cpu *w); /* NULL is a no-op */

/* One layer: q [T][Hq][D], k/v [T][Hkv][D] (rows ordered by batch sequence, T = sum n_new), out [T][Hq][D].
 * slots[i] is the view slot (sequence id) of batch sequence i. Attends, then writes the chunk's raw rows and
 * flushes the blocks that leave the window into the view's pages. */
void kv_cpu_forward(kv_cpu *w, const kv_layer_view *v, int n_seq, const int *slots, const int *n_new, const float *q,
                    const float *k, const float *vv, float *out, int n_q_heads, float scale);

#endif
