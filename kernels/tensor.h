/* tensor.h - dtypes, bf16/f16 conversion and the omni_tensor view used by every op.
 *
 * A view does not own its data. Shapes are outermost-first (PyTorch order): a Linear weight is [out, in].
 * Strides are in elements; contiguous views have stride[ndim-1] == 1. */
#ifndef OMNI_TENSOR_H
#define OMNI_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OMNI_F32 = 0, OMNI_BF16, OMNI_F16, OMNI_I32, OMNI_I64, OMNI_U8, OMNI_DTYPE_COUNT } omni_dtype;

typedef enum { OMNI_DEV_CPU = 0, OMNI_DEV_CUDA = 1 } omni_device;

#define OMNI_MAX_DIMS 5

typedef struct {
    void *data;
    omni_dtype dtype;
    omni_device device;
    int ndim;
    int64_t shape[OMNI_MAX_DIMS];
    int64_t stride[OMNI_MAX_DIMS];
} omni_tensor;

size_t omni_dtype_size(omni_dtype dt);
const char *omni_dtype_name(omni_dtype dt);
int64_t omni_tensor_numel(const omni_tensor *t);
/* Contiguous view over `data` with the given shape. */
omni_tensor omni_tensor_make(void *data, omni_dtype dt, int ndim, const int64_t *shape);

static inline float omni_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round-to-nearest-even, NaN preserved (as torch does). */
static inline uint16_t omni_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float omni_f16_to_f32(uint16_t h);
uint16_t omni_f32_to_f16(float f); /* round-to-nearest-even */

/* Convert n elements of `src` (f32/bf16/f16) to f32. */
void omni_to_f32(float *dst, const void *src, omni_dtype dt, int64_t n);
/* Element i of a contiguous f32/bf16/f16 buffer as f32. */
float omni_get_f32(const void *src, omni_dtype dt, int64_t i);

#ifdef __cplusplus
}
#endif
#endif
