/* kv_dev.h - the KV cache in device memory (library omni_kvcache_cuda): the page allocator of the host cache
 * (kv_pages.h: same pages, same tables, same budget) with its pools, page tables and lengths in ONE device
 * allocation, and the append of each layer's new k/v rows on the GPU: bf16 rows rotated (FWHT) into the raw
 * window pages, every block that leaves the window quantized into its quant page, byte-identical to the CPU cache
 * (kv_cache) fed the same bf16 values. The attention kernels read the same pages through kv_dev_layer_view
 * (kv_layout.h) and the step's batch through kv_dev_batch_view.
 *
 * No CUDA types here: device pointers are plain pointers, a stream is a void * (cudaStream_t, NULL = default).
 * Nothing is allocated after kv_dev_init; every call returns an omni_status with a message (CUDA errors name the
 * call). One cache must not be used from two threads at once.
 *
 * A step (any mix of prefill chunks and decode tokens over up to max_seqs sequences, T <= max_chunk tokens):
 *     kv_dev_step(d, n_seq, ids, n_new)     host: reserves the pages (kv_pages), writes the step record (the batch,
 *                                            the blocks to flush, the table changes since the last step) into a
 *                                            pinned buffer; waits first until the previous upload has copied it
 *     kv_dev_upload(d, stream)               one async H2D copy of the record (fixed size) + one kernel applying
 *                                            the table and length changes to the device tables
 *     for each layer l (after its q/k norm + RoPE; before or after its attention, which reads only committed
 *     history and the chunk itself):
 *         kv_dev_append(d, l, k, v, t_cap, stream)   k, v: device bf16 [T][Hkv][D], rows in batch order
 *     kv_dev_commit(d)                       host: lengths += n_new, flushed window pages back to the free list
 * Everything kv_dev_upload and kv_dev_append enqueue can be captured in a CUDA graph and replayed for later steps:
 * their launch shapes depend only on t_cap (kv_dev_append with t_cap > 0 launches for t_cap tokens and the CTAs
 * beyond the step's tokens / flushes do nothing), the kernels read the step from the device record, and the H2D
 * copy reads the pinned buffer at replay time. Per replayed step the host calls kv_dev_step (and kv_dev_commit);
 * every step must reach the device (one upload per step, direct or replayed) before the next kv_dev_step.
 * While capturing, kv_dev_append needs no step in flight (a runner captures its graphs once, when the cache is
 * made, after an empty step's upload; the step each replay appends is the one its upload brings).
 * A step of n_seq 0 only uploads pending table changes (after remove/clear/commit: tests compare tables then).
 *
 * Device tables: [2][max_seqs][tab_stride] int32 (raw pages, then quant pages, -1 = none) and lengths
 * [max_seqs] (committed before the current step), as kv_layer_view describes; the step record's batch arrays
 * (kv_dev_batch_view) are at fixed device addresses, so a captured attention launch can read them too. */
#ifndef OMNI_KV_DEV_H
#define OMNI_KV_DEV_H

#include <stdint.h>

#include "kernels/status.h"
#include "kvcache/kv_layout.h"
#include "kvcache/kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kv_dev kv_dev;

/* Validates p like kv_init (and head_dim <= 256), then allocates the device memory on the current device: pools
 * (kv_get_usage's pool_bytes), tables, lengths and the step record, plus the pinned staging buffer. */
omni_status kv_dev_init(const kv_params *p, kv_dev **out);
void kv_dev_free(kv_dev *d); /* NULL is a no-op; synchronizes the device first */

omni_status kv_dev_seq_add(kv_dev *d, int *seq_id);
void kv_dev_seq_remove(kv_dev *d, int seq_id); /* pages back now; the device tables at the next upload */
void kv_dev_seq_clear(kv_dev *d, int seq_id);
int64_t kv_dev_seq_len(const kv_dev *d, int seq_id); /* committed tokens (-1 for an invalid id) */

omni_status kv_dev_step(kv_dev *d, int n_seq, const int *seq_ids, const int *n_new);
omni_status kv_dev_upload(kv_dev *d, void *stream);
/* t_cap: 0 = launch for exactly this step; > 0: launch for up to t_cap tokens (>= the step's T; required while
 * capturing a graph). */
omni_status kv_dev_append(kv_dev *d, int layer, const void *k, const void *v, int t_cap, void *stream);
omni_status kv_dev_commit(kv_dev *d);
/* Ends a step that will not be committed (a runner step that failed): the step's sequences are cleared (length 0,
 * pages back; the device tables follow at the next upload), as the caller clears or removes them on the host
 * (llm/runner.h), and the step's record is uploaded (again): it carries the table changes of earlier commits,
 * which must reach the device even if the failed step never uploaded it (applying a record twice is harmless).
 * No step in flight: a no-op. */
omni_status kv_dev_abort(kv_dev *d, void *stream);

/* Layer view with device pointers (pools, tables, lengths), valid for the cache's life. */
omni_status kv_dev_layer_view(const kv_dev *d, int layer, kv_layer_view *v);

/* The current step's batch on the device (fixed addresses): batch sequence i has slot[i], committed length
 * len0[i], n_new[i] new tokens at rows row0[i] .. row0[i + 1] - 1 of k/v; counts = {n_seq, T, n_flush}. */
typedef struct {
    const int32_t *counts, *slot, *len0, *n_new, *row0;
    int max_seqs;
} kv_dev_batch;
void kv_dev_batch_view(const kv_dev *d, kv_dev_batch *b);

void kv_dev_get_usage(const kv_dev *d, kv_usage *u);
omni_status kv_dev_seq_budget(const kv_dev *d, int64_t n_tokens, kv_budget *b);
void kv_dev_format_line(const kv_dev *d, char *buf, int cap);
const kv_params *kv_dev_params(const kv_dev *d);

#ifdef __cplusplus
}
#endif
#endif
