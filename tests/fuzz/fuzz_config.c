/* fuzz_config.c - config.json reading (llm/config.c through kernels/json.c): the text decoder's values, the
 * vision_config and audio_config sections (vision/tower.c, audio/tower.c), and the same bytes read as a
 * generation_config.json and a preprocessor_config.json. A config that loads must hold values the decoder can
 * use (the ranges promised by config.c). */
#include "fuzz_util.h"

#include "audio/audio.h"
#include "kernels/status.h"
#include "llm/config.h"
#include "vision/vision.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    omni_log_set_level(0);
    llm_config c;
    if (llm_config_parse((const char *)d, n, &c) == OMNI_OK) {
        FUZZ_ASSERT(c.hidden > 0 && c.n_layers > 0 && c.n_heads > 0 && c.vocab > 0 && c.head_dim >= 2 &&
                    c.head_dim % 2 == 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0);
        FUZZ_ASSERT(c.rope_theta >= 1 && c.rms_eps > 0 && c.n_eos >= 0 && c.n_eos <= LLM_MAX_EOS);
        FUZZ_ASSERT(c.mrope_interleaved == 1 && c.mrope_section[0] >= 0 && c.mrope_section[1] >= 0 &&
                    c.mrope_section[2] >= 0 && c.mrope_section[1] <= 65536 && c.mrope_section[2] <= 65536);
        FUZZ_ASSERT(c.image_token_id < c.vocab && c.audio_token_id < c.vocab);
        FUZZ_ASSERT(c.n_experts > 0 ? c.top_k >= 1 && c.top_k <= c.n_experts : c.intermediate > 0);
        vision_config vc;
        if (c.vision_json && vision_config_from_json(c.vision_json, NULL, &vc) == OMNI_OK)
            FUZZ_ASSERT(vc.depth > 0 && vc.hidden % vc.n_heads == 0 && vc.head_dim % 4 == 0 && vc.n_deepstack <= 4);
        audio_tower_config ac;
        if (c.audio_json) audio_tower_config_from_json(c.audio_json, NULL, &ac);
        llm_config_parse_generation((const char *)d, n, &c);
        FUZZ_ASSERT(c.n_eos <= LLM_MAX_EOS);
        llm_config_free(&c);
    }
    vision_prep_params p = vision_prep_default_params();
    if (vision_prep_parse_json((const char *)d, n, &p) == OMNI_OK)
        FUZZ_ASSERT(p.min_pixels <= p.max_pixels && p.patch_size > 0 && p.merge_size > 0);
    return 0;
}
