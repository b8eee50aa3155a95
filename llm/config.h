/* config.h - the model configuration read from config.json (+ generation_config.json) of a Hugging Face dir.
 *
 * Supported model types: qwen3_vl (Qwen3VLForConditionalGeneration, dense decoder) and qwen3_omni_moe (the
 * thinker of Qwen3-Omni: MoE decoder). Class defaults in transformers do not match released checkpoints, so
 * every field the engine uses must be present in the file (or have a documented default). */
#ifndef OMNI_LLM_CONFIG_H
#define OMNI_LLM_CONFIG_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LLM_ARCH_QWEN3_VL = 0, LLM_ARCH_QWEN3_OMNI_MOE = 1 } llm_arch;

#define LLM_MAX_EOS 8

typedef struct {
    llm_arch arch;
    char model_type[32];
    /* text decoder */
    int hidden, n_layers, n_heads, n_kv_heads, head_dim, intermediate, vocab;
    float rope_theta, rms_eps;
    int mrope_section[3];
    int mrope_interleaved;
    int tie_word_embeddings; /* the model config's flag (top level / thinker_config), as transformers reads it */
    int tie_unset;           /* that flag is absent: lm_head.weight if stored, else the embedding (llm/model.c) */
    /* MoE (qwen3_omni_moe); n_experts == 0 for dense */
    int n_experts, top_k, moe_intermediate, norm_topk_prob, decoder_sparse_step;
    /* special token ids (-1 when absent) */
    int bos_id, eos_ids[LLM_MAX_EOS], n_eos;
    int image_token_id, video_token_id, vision_start_id, vision_end_id;
    int audio_token_id, audio_start_id, audio_end_id;
    float position_id_per_seconds;
    /* tensor name prefixes: "model.language_model." / "thinker.model.", lm_head name */
    char prefix[64], lm_head[64], visual_prefix[64], audio_prefix[64];
    /* Sub-configs for the encoders (owned by the config; NULL when absent). */
    cJSON *root, *vision_json, *audio_json;
} llm_config;

/* Parse `dir`/config.json (and generation_config.json if present). Every value is type- and range-checked
 * (kernels/json.h); model files must be regular files. On failure returns OMNI_ERR_MODEL (missing, malformed or
 * out-of-range values, ids outside the vocabulary) or OMNI_ERR_UNSUPPORTED (other model types, features the
 * decoder does not implement) with a message naming the key; nothing to free. */
omni_status llm_config_load(const char *dir, llm_config *cfg);
/* The same from the text of a config.json (no generation_config.json). */
omni_status llm_config_parse(const char *json, size_t len, llm_config *cfg);
/* Apply the text of a generation_config.json (eos/bos ids) to a parsed config; all or nothing. */
omni_status llm_config_parse_generation(const char *json, size_t len, llm_config *cfg);
void llm_config_free(llm_config *cfg);

int llm_config_is_eos(const llm_config *cfg, int id);

#ifdef __cplusplus
}
#endif
#endif
