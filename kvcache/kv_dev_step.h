/* kv_dev_step.h - internal to kvcache: the host half of a device cache step (record layout and CTA programs in
 * kv_append.h). Used by kvcache/cuda/kv_dev.cu and by the CPU emulation of its kernels in the tests. */
#ifndef OMNI_KV_DEV_STEP_H
#define OMNI_KV_DEV_STEP_H

#include "kv_append.h"
#include "kv_pages.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layout of the step record of a cache (capacities from its parameters and its table log); returns its bytes. */
int64_t kvd_step_init(kvd_step *s, const kv_pages *a);
/* Most blocks a step of t_cap tokens can flush: t_cap / 32 + min(t_cap, max_seqs). */
int kvd_flush_cap(const kv_pages *a, int t_cap);
/* After kv_pages_begin reserved the step (or with n_seq 0: no step, table changes only): the batch, the flush
 * list and the table log (taken from the allocator) into s (laid out by kvd_step_init). */
omni_status kvd_step_fill(kvd_step *s, kv_pages *a, int n_seq, const int *ids, const int *n_new);
/* Arguments of the append programs for layer view v (device pointers on the device). */
void kvd_append_setup(kvd_append_args *x, const kv_layer_view *v, const kvd_step *dev_step, const void *k,
                      const void *vv, int t_cap, int f_cap);

#ifdef __cplusplus
}
#endif
#endif
