/* fuzz_config.c - config.json reading (llm/config.c through kernels/json.c): the text decoder's values, the
 * vision_config and audio_config sections (vision/tower.c, audio/tower.c), and the same bytes read as a
 * generation_config.json (applied to the config they make when it loads, else to a fixed small Qwen3-VL config,
 * so that every input reaches that parser) and a preprocessor_config.json. A config that loads must hold values
 * the decoder can use (the ranges promised by config.c), token ids inside the vocabulary included. */
#include "fuzz_util.h"

#include "audio/audio.h"
#include "kernels/status.h"
#include "llm/config.h"
#include "vision/vision.h"

/* A small valid config.json (the shape of tests/fixtures/text/qvl-*): the base of generation_config.json inputs. */
static const char BASE[] =
    "{\"model_type\":\"qwen3_vl\",\"image_token_id\":3012,\"video_token_id\":3013,\"vision_start_token_id\":3009,"
    "\"vision_end_token_id\":3010,\"tie_word_embeddings\":true,\"text_config\":{\"bos_token_id\":3000,"
    "\"eos_token_id\":3002,\"head_dim\":128,\"hidden_size\":64,\"intermediate_size\":128,\"num_attention_heads\":4,"
    "\"num_hidden_layers\":3,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_scaling\":{\"mrope_interleaved\":"
    "true,\"mrope_section\":[24,20,20],\"rope_type\":\"default\"},\"rope_theta\":5000000,\"vocab_size\":3072}}";

/* The token ids of a loaded config lie inside its vocabulary (-1: absent). */
static void check_ids(const llm_config *c) {
    FUZZ_ASSERT(c->n_eos >= 0 && c->n_eos <= LLM_MAX_EOS && c->bos_id >= -1 && c->bos_id < c->vocab);
    for (int i = 0; i < c->n_eos; i++) FUZZ_ASSERT(c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab);
}

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
        FUZZ_ASSERT((c.tie_word_embeddings == 0 || c.tie_word_embeddings == 1) && (c.tie_unset == 0 || c.tie_unset == 1));
        check_ids(&c);
        vision_config vc;
        if (c.vision_json && vision_config_from_json(c.vision_json, NULL, &vc) == OMNI_OK)
            FUZZ_ASSERT(vc.depth > 0 && vc.hidden % vc.n_heads == 0 && vc.head_dim % 4 == 0 && vc.n_deepstack <= 4);
        audio_tower_config ac;
        if (c.audio_json) audio_tower_config_from_json(c.audio_json, NULL, &ac);
        llm_config_parse_generation((const char *)d, n, &c);
        check_ids(&c);
        llm_config_free(&c);
    } else if (llm_config_parse(BASE, sizeof BASE - 1, &c) == OMNI_OK) {
        llm_config before = c;
        if (llm_config_parse_generation((const char *)d, n, &c) != OMNI_OK) /* all or nothing */
            FUZZ_ASSERT(c.bos_id == before.bos_id && c.n_eos == before.n_eos &&
                        !memcmp(c.eos_ids, before.eos_ids, sizeof c.eos_ids));
        check_ids(&c);
        llm_config_free(&c);
    } else {
        FUZZ_ASSERT(!"the fixed base config loads");
    }
    vision_prep_params p = vision_prep_default_params();
    if (vision_prep_parse_json((const char *)d, n, &p) == OMNI_OK)
        FUZZ_ASSERT(p.min_pixels <= p.max_pixels && p.patch_size > 0 && p.merge_size > 0);
    return 0;
}
