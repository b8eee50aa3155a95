/* random_model.h - random bf16 decoder weights with the shapes of a real config.json, for speed measurements
 * (`omni bench --random CONFIG`): on the CPU a checkpoint (below); for the CUDA runner a model that holds only the
 * config (llm_model_init_random), whose weights the runner makes on the device.
 *
 * The checkpoint (every decoder tensor the config implies, the real names, bf16; norms 1, matrices uniform with
 * variance 1 / fan-in so activations keep their scale through the layers) is written into a fresh directory
 * under $TMPDIR (default /tmp) next to a copy of the config, loaded with llm_model_load (mmap), and the files are
 * removed at once: the mapping keeps the data until llm_model_free. Sizes that do not fit are refused before
 * anything is written: more than half of the available memory (MemAvailable) or of the free space in $TMPDIR,
 * or more than max_bytes when max_bytes > 0. */
#ifndef OMNI_APP_RANDOM_MODEL_H
#define OMNI_APP_RANDOM_MODEL_H

#include <stdint.h>

#include "llm/model.h"

/* Bytes of bf16 decoder weights a config implies (0 with a message when the config cannot be read). */
omni_status omni_random_model_bytes(const char *config_path, int64_t *bytes);
/* Write, load and unlink as described above. Errors: OMNI_ERR_INPUT (config unreadable), OMNI_ERR_MODEL /
 * OMNI_ERR_UNSUPPORTED (config invalid), OMNI_ERR_NOMEM (does not fit: the message gives bytes needed vs
 * available), OMNI_ERR_RUNTIME (write failed). */
omni_status omni_random_model(const char *config_path, uint64_t seed, int64_t max_bytes, llm_model **out);
/* The config (a config.json or its directory) without weights: llm_model_init_random (llm/model.h) with `seed`; the
 * CUDA runner makes the weights on the device, the CPU runner refuses the model. Errors as omni_random_model's
 * (no size limit: nothing is written). */
omni_status omni_random_model_device(const char *config_path, uint64_t seed, llm_model **out);

#endif
