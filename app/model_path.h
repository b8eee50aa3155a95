/* model_path.h - resolve the -m argument to a model directory.
 *
 * Accepts: a model directory (has config.json); a Hugging Face cache dir `.../models--Org--Name` (snapshot named by
 * refs/main, else the only/newest snapshot); or `Org/Name`, looked up as models--Org--Name in $HF_HUB_CACHE,
 * $HF_HOME/hub and ~/.cache/huggingface/hub, in that order. Nothing is downloaded. */
#ifndef OMNI_APP_MODEL_PATH_H
#define OMNI_APP_MODEL_PATH_H

#include <stddef.h>

#include "kernels/status.h"

omni_status omni_resolve_model(const char *arg, char *out, size_t cap);

#endif
