/* dev_layout.h - one-allocation device layouts for modules that own a weights block and a workspace block (the
 * GPU towers): a walk over the tensors assigns 256-byte aligned offsets, first with no base (to size the block),
 * then with the allocated base (to set the pointers), so both passes share one list of tensors; a device
 * allocation that checks free memory first and says "needs X MiB, Y MiB of Z MiB free"; a uniform fill with a
 * given mean and standard deviation (random weights made on the device). Header-only, on kernels/ops_cuda.h. */
#ifndef OMNI_DEV_LAYOUT_H
#define OMNI_DEV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops_cuda.h"

#define OMNI_LAYOUT_ALIGN 256

typedef struct {
    char *base; /* NULL: sizing pass */
    size_t off; /* bytes taken so far (the block's size after a sizing pass) */
} omni_layout;

/* The next `bytes` of the block, aligned; NULL in a sizing pass. */
static inline void *omni_layout_take(omni_layout *k, size_t bytes) {
    const size_t o = (k->off + OMNI_LAYOUT_ALIGN - 1) / OMNI_LAYOUT_ALIGN * OMNI_LAYOUT_ALIGN;
    k->off = o + bytes;
    return k->base ? k->base + o : NULL;
}

/* n bf16 values. */
#define OMNI_TAKE16(k, n) ((uint16_t *)omni_layout_take(k, 2 * (size_t)(n)))

/* cudaMalloc of `bytes` after checking free memory: OMNI_ERR_NOMEM with "<who>: the <what> need X MiB, Y MiB of
 * Z MiB are free" when it cannot fit. */
static inline omni_status omni_cuda_malloc_fit(void **p, size_t bytes, const char *who, const char *what) {
    size_t free_b = 0, total = 0;
    omni_status st = omni_cuda_mem_info(&free_b, &total);
    if (st) return st;
    if (bytes > free_b)
        return omni_fail(OMNI_ERR_NOMEM, "%s: the %s need %.1f MiB, %.1f MiB of %.1f MiB are free", who, what,
                         bytes / 1048576.0, free_b / 1048576.0, total / 1048576.0);
    return omni_cuda_malloc(p, bytes);
}

/* n bf16 values uniform with the given mean and standard deviation (std 0: the constant mean). */
static inline omni_status omni_cuda_fill_std_bf16(uint16_t *p, size_t n, uint64_t seed, float mean, float std,
                                                  void *stream) {
    const float a = std * 1.7320508f; /* uniform on [-a, a] has standard deviation a / sqrt(3) */
    return omni_cuda_fill_uniform_bf16(p, (int64_t)n, seed, mean - a, mean + a, stream);
}

#endif
