/* model_path.h - resolve the -m argument to a model directory.
 *
 * Accepts: a model directory (has config.json); a Hugging Face cache folder `.../models--Org--Name` (or any folder
 * with snapshots/ and refs/): the snapshot named by refs/main, else the only snapshot (several without refs/main:
 * an error listing them); or `Org/Name[@REV]`, looked up as models--Org--Name in $HF_HUB_CACHE, $HF_HOME/hub (else
 * $XDG_CACHE_HOME/huggingface/hub, as huggingface_hub does) and ~/.cache/huggingface/hub, in that order, REV
 * being a name under refs/ (v1.0, pr/1) or a snapshot's commit hash. Nothing is downloaded. The folder found must
 * hold config.json, every shard of its model.safetensors.index.json, no link to a missing blob and no Git LFS pointer
 * (an unfinished `hf download`, a pruned cache, a `git clone` without git-lfs). Errors: OMNI_ERR_MODEL
 * (OMNI_ERR_UNSUPPORTED for GGUF, OMNI_ERR_USAGE for an empty or malformed argument) with one message naming where
 * it looked and what to do (`hf download ...`). */
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
