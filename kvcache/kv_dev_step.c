/* kv_dev_step.c - the host half of a device cache step (kv_dev_step.h): the step record of kv_append.h filled from
 * the page allocator after it reserved the step's pages: the batch, the blocks that leave the window, and the
 * table changes since the previous step. Plain C (no CUDA): kv_dev (kvcache/cuda) stages it in pinned memory, the
 * CPU emulation of the kernels (tests) uses it as is. */
#include "kv_dev_step.h"

#include <string.h>

int64_t kvd_step_init(kvd_step *s, const kv_pages *a) {
    const kv_params *p = kv_pages_params(a);
    int max_entry, max_reset, max_len;
    kv_pages_log_caps(a, &max_entry, &max_reset, &max_len);
    memset(s, 0, sizeof *s);
    return kvd_step_layout(s, p->max_seqs, kvd_flush_cap(a, p->max_chunk), max_reset, max_entry, max_len);
}

int kvd_flush_cap(const kv_pages *a, int t_cap) {
    const int max_seqs = kv_pages_params(a)->max_seqs;
    return t_cap / KV_BLOCK + (t_cap < max_seqs ? t_cap : max_seqs);
}

omni_status kvd_step_fill(kvd_step *s, kv_pages *a, int n_seq, const int *ids, const int *n_new) {
    kv_layer_view v0;
    kv_pages_layer_view(a, 0, NULL, NULL, &v0);
    int32_t *w = (int32_t *)s;
    int32_t *slot = w + s->o_slot, *len0 = w + s->o_len0, *nn = w + s->o_new, *row0 = w + s->o_row0;
    int32_t *fseq = w + s->o_fseq, *fblk = w + s->o_fblk;
    if (n_seq > s->cap_seq) return omni_fail(OMNI_ERR_USAGE, "kv dev: batch of %d > %d sequences", n_seq, s->cap_seq);
    int32_t T = 0, nf = 0;
    for (int i = 0; i < n_seq; i++) {
        int64_t L0 = kv_pages_seq_len(a, ids[i]);
        slot[i] = ids[i], len0[i] = (int32_t)L0, nn[i] = n_new[i], row0[i] = T;
        for (int b = kv_view_nq(&v0, L0); b < kv_view_nq(&v0, L0 + n_new[i]); b++) {
            if (nf == s->cap_flush)
                return omni_fail(OMNI_ERR_USAGE, "kv dev: more than %d blocks to flush in one step", s->cap_flush);
            fseq[nf] = i, fblk[nf++] = b;
        }
        T += n_new[i];
    }
    row0[n_seq] = T;
    s->n_seq = n_seq, s->n_tok = T, s->n_flush = nf;
    kv_pages_log log;
    kv_pages_log_take(a, &log);
    if (log.n_reset > s->cap_reset || log.n_entry > s->cap_entry || log.n_len > s->cap_len)
        return omni_fail(OMNI_ERR_RUNTIME, "kv dev: table log larger than the step record");
    memcpy(w + s->o_reset, log.reset, (size_t)log.n_reset * 4);
    memcpy(w + s->o_entry, log.entry, (size_t)log.n_entry * 4);
    memcpy(w + s->o_value, log.value, (size_t)log.n_entry * 4);
    memcpy(w + s->o_lslot, log.len_slot, (size_t)log.n_len * 4);
    memcpy(w + s->o_lval, log.len, (size_t)log.n_len * 4);
    s->n_reset = log.n_reset, s->n_entry = log.n_entry, s->n_len = log.n_len;
    return OMNI_OK;
}

void kvd_append_setup(kvd_append_args *x, const kv_layer_view *v, const kvd_step *dev_step, const void *k,
                      const void *vv, int t_cap, int f_cap) {
    memset(x, 0, sizeof *x);
    x->v = *v;
    x->step = dev_step;
    x->k = (const uint16_t *)k;
    x->vv = (const uint16_t *)vv;
    x->t_cap = t_cap;
    x->f_cap = f_cap;
    x->rs = (float)(1.0 / sqrt((double)v->head_dim));
    if (v->rotate)
        while ((1 << x->log2d) < v->head_dim) x->log2d++;
}
