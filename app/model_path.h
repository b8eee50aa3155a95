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

/* The embedded model NAME ("ocr", "speech": assets/models/NAME, trained by tools/train) that `omni ocr` and
 * `omni ask` use without -m: $OMNI_MODELS/NAME if OMNI_MODELS is set, else assets/models/NAME beside the program
 * (its directory's parent, e.g. build/omni -> ./assets, or its own directory), else in the source tree the
 * program was built from. OMNI_ERR_MODEL naming the places tried when none has a config.json. */
omni_status omni_embedded_model(const char *name, char *out, size_t cap);

#endif
