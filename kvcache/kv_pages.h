/* kv_pages.h - the device-agnostic page allocator of the KV cache (used by the host cache kv_cache and the device
 * cache kv_dev; not needed by their users): parameter validation and page geometry, two pools of fixed-size pages
 * (raw, quant) with a free list each, per-sequence page tables and lengths, the reservation of a step's pages and
 * their release at commit, exact byte accounting and the budget. It never touches page bytes: a storage backend
 * (host memory: kv_cache; device memory: kv_dev) holds them, at the offsets kv_pages_pool_bytes gives.
 *
 * Step protocol (one step = one batch of sequences, each with n_new tokens):
 *   kv_pages_begin(ids, n_new)   validates the batch and reserves its pages (the first call of a step) or checks
 *                                that it is the step in flight (later calls: every layer calls it)
 *   ... storage writes pages ...
 *   kv_pages_commit(ids, n_new)  lengths += n_new; raw pages of the blocks flushed by the step go back.
 * Table changes can be logged (kv_pages_log_enable) so that a device mirror replays them (kv_dev). */
#ifndef OMNI_KV_PAGES_H
#define OMNI_KV_PAGES_H

#include <stdint.h>

#include "kv_layout.h"
#include "kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kv_pages kv_pages;

omni_status kv_pages_init(const kv_params *p, kv_pages **out); /* validates p (messages as kv_init) */
void kv_pages_free(kv_pages *a);                                /* NULL is a no-op */

/* The parameters (layer_fmt points to the allocator's own copy of every layer's format). */
const kv_params *kv_pages_params(const kv_pages *a);
/* Pool geometry: raw pages at byte 0 of the storage, quant pages at *raw_bytes; total *raw_bytes + *quant_bytes. */
void kv_pages_pool_bytes(const kv_pages *a, int64_t *raw_bytes, int64_t *quant_bytes);

omni_status kv_pages_seq_add(kv_pages *a, int *seq_id);
void kv_pages_seq_remove(kv_pages *a, int seq_id);
void kv_pages_seq_clear(kv_pages *a, int seq_id);
int64_t kv_pages_seq_len(const kv_pages *a, int seq_id); /* -1 for an invalid id */

omni_status kv_pages_begin(kv_pages *a, int n_seq, const int *seq_ids, const int *n_new);
omni_status kv_pages_commit(kv_pages *a, int n_seq, const int *seq_ids, const int *n_new);
/* 1 while seq_id has a step in flight (between its begin and commit). */
int kv_pages_in_flight(const kv_pages *a, int seq_id);

void kv_pages_usage(const kv_pages *a, kv_usage *u);
void kv_pages_format_line(const kv_pages *a, char *buf, int cap); /* the KV line of kv_format_line */
omni_status kv_pages_budget(const kv_pages *a, int64_t n_tokens, kv_budget *b);
void kv_pages_step(const kv_pages *a, int64_t L0, int64_t L1, int64_t *raw_pages, int64_t *quant_pages);

/* View of one layer over storage at raw_pool / quant_pool (page tables and lengths: the allocator's, host). */
void kv_pages_layer_view(const kv_pages *a, int layer, uint8_t *raw_pool, uint8_t *quant_pool, kv_layer_view *v);

/* ---- change log for mirrors of the tables (device caches)
 * When enabled, every table and length change since the last kv_pages_log_take is recorded: a sequence whose
 * pages all went back (remove / clear) as a reset of its slot (all entries -1, length 0), the others as
 * (entry, value) pairs over the tables [2][max_seqs][tab_stride] (raw table first, then quant) and lengths as
 * (slot, len) pairs. Entries of a slot logged before its reset are dropped, so applying resets first, then the
 * entries, then the lengths reproduces the host tables. Capacity: one step and one commit between takes (a
 * step longer than that fails with OMNI_ERR_USAGE: take the log every step). */
typedef struct {
    int n_reset, n_entry, n_len;
    const int32_t *reset;            /* [n_reset] slots */
    const int32_t *entry, *value;    /* [n_entry] table index and page (or -1) */
    const int32_t *len_slot, *len;   /* [n_len] */
} kv_pages_log;
omni_status kv_pages_log_enable(kv_pages *a);
/* The changes since the last take (valid until the next allocator call); the log is then empty. */
void kv_pages_log_take(kv_pages *a, kv_pages_log *log);
/* Most entries / resets / lengths a log can hold (sizes of a mirror's staging buffer). */
void kv_pages_log_caps(const kv_pages *a, int *max_entry, int *max_reset, int *max_len);

#ifdef __cplusplus
}
#endif
#endif
