/* safetensors.h - read-only checkpoint access: mmap every *.safetensors shard of a model directory and look
 * tensors up by name.
 *
 * A directory with `model.safetensors.index.json` uses the shards its weight_map names; otherwise every
 * `*.safetensors` file in the directory is opened. Every header is validated (length within the file, JSON,
 * dtype known, offsets in range and not overlapping, size == numel * dtype size); any violation fails the open
 * with OMNI_ERR_MODEL and a message naming the file and tensor. Data stays mapped until omni_ckpt_free. */
#ifndef OMNI_SAFETENSORS_H
#define OMNI_SAFETENSORS_H

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct omni_ckpt omni_ckpt;

/* Open the checkpoint in `dir`. On failure *out is NULL and the message says why. */
omni_status omni_ckpt_open(const char *dir, omni_ckpt **out);
void omni_ckpt_free(omni_ckpt *c); /* NULL is a no-op */

/* The tensor called `name`, or NULL. The view points into the mapping (read-only memory). */
const omni_tensor *omni_ckpt_find(const omni_ckpt *c, const char *name);

/* Look up `name` and check it: floating dtype (f32/bf16/f16) and, when ndim > 0, exactly this shape.
 * Fails with OMNI_ERR_MODEL ("missing tensor 'x'" / "tensor 'x' has shape [..], expected [..]"). */
omni_status omni_ckpt_get(const omni_ckpt *c, const char *name, int ndim, const int64_t *shape, omni_tensor *out);

/* printf-style name formatting variant of omni_ckpt_get: omni_ckpt_getf(c, &t, 2, shape, "layers.%d.w", i). */
omni_status omni_ckpt_getf(const omni_ckpt *c, omni_tensor *out, int ndim, const int64_t *shape, const char *fmt,
                           ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* 1 when some tensor's name starts with `prefix` (a layer beyond the config's count, "x.layers.3."), else 0. */
int omni_ckpt_has_prefix(const omni_ckpt *c, const char *prefix);
/* The same with a printf-style prefix; on 1, a model error saying that the checkpoint has `prefix` tensors that
 * the config (`what`) does not use: config and checkpoint disagree (a silently smaller model otherwise). */
omni_status omni_ckpt_check_unused(const omni_ckpt *c, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

int omni_ckpt_count(const omni_ckpt *c);
const char *omni_ckpt_name(const omni_ckpt *c, int i);
/* Total bytes of tensor data mapped. */
size_t omni_ckpt_bytes(const omni_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif
