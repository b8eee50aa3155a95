/* test_real_configs.c - the configuration files of the released checkpoints (assets/configs) parse into the
 * values of spec/qwen3.md: text decoder shapes, interleaved MRoPE sections, theta, tie flags, EOS ids from
 * generation_config.json, token ids, MoE fields, the audio tower config and the image budgets. */
#include <string.h>

#include "audio/audio.h"
#include "check.h"
#include "llm/config.h"
#include "vision/vision.h"

#define CFG OMNI_SOURCE_DIR "/assets/configs/"

typedef struct {
    const char *dir;
    int hidden, layers, heads, kv, inter, vocab, tie, experts, top_k;
    float theta;
} want_t;

static void check_text(const want_t *w) {
    llm_config c;
    omni_status st = llm_config_load(w->dir, &c);
    CHECK(st == OMNI_OK, "%s: %s", w->dir, omni_last_error());
    if (st) return;
    CHECK(c.hidden == w->hidden && c.n_layers == w->layers && c.n_heads == w->heads && c.n_kv_heads == w->kv,
          "%s: shape %d %d %d %d", w->dir, c.hidden, c.n_layers, c.n_heads, c.n_kv_heads);
    CHECK(c.head_dim == 128 && c.vocab == w->vocab && c.tie_word_embeddings == w->tie, "%s: head_dim %d vocab %d tie %d",
          w->dir, c.head_dim, c.vocab, c.tie_word_embeddings);
    CHECK(c.mrope_interleaved && c.mrope_section[0] == 24 && c.mrope_section[1] == 20 && c.mrope_section[2] == 20,
          "%s: mrope", w->dir);
    CHECK(c.rope_theta == w->theta && c.rms_eps == 1e-6f, "%s: theta %g eps %g", w->dir, c.rope_theta, c.rms_eps);
    CHECK(c.n_experts == w->experts && c.top_k == w->top_k, "%s: experts %d top %d", w->dir, c.n_experts, c.top_k);
    if (!w->experts) CHECK(c.intermediate == w->inter, "%s: intermediate %d", w->dir, c.intermediate);
    else CHECK(c.moe_intermediate == w->inter && c.norm_topk_prob, "%s: moe inter %d", w->dir, c.moe_intermediate);
    CHECK(c.image_token_id == 151655 && c.vision_start_id == 151652 && c.vision_end_id == 151653, "%s: vision ids",
          w->dir);
    CHECK(c.vision_json != NULL, "%s: no vision config", w->dir);
    if (w->experts) {
        CHECK(c.audio_token_id == 151675 && c.audio_start_id == 151669 && c.audio_end_id == 151670,
              "%s: audio ids %d %d %d", w->dir, c.audio_token_id, c.audio_start_id, c.audio_end_id);
        CHECK(!strcmp(c.prefix, "thinker.model.") && !strcmp(c.lm_head, "thinker.lm_head.weight"), "%s: names", w->dir);
    } else {
        CHECK(c.n_eos == 2 && llm_config_is_eos(&c, 151645) && llm_config_is_eos(&c, 151643), "%s: eos", w->dir);
        CHECK(!strcmp(c.prefix, "model.language_model."), "%s: prefix %s", w->dir, c.prefix);
    }
    llm_config_free(&c);
}

int main(void) {
    const want_t models[] = {
        {CFG "Qwen3-VL-2B-Instruct", 2048, 28, 16, 8, 6144, 151936, 1, 0, 0, 5e6f},
        {CFG "Qwen3-VL-4B-Instruct", 2560, 36, 32, 8, 9728, 151936, 1, 0, 0, 5e6f},
        {CFG "Qwen3-VL-8B-Instruct", 4096, 36, 32, 8, 12288, 151936, 0, 0, 0, 5e6f},
        {CFG "Qwen3-Omni-30B-A3B-Instruct", 2048, 48, 32, 4, 768, 152064, 0, 128, 8, 1e6f},
    };
    for (int i = 0; i < 4; i++) check_text(&models[i]);

    audio_tower_config ac;
    CHECK(audio_tower_config_read(CFG "Qwen3-Omni-30B-A3B-Instruct", &ac) == OMNI_OK, "audio: %s", omni_last_error());
    CHECK(ac.d_model == 1280 && ac.n_layers == 32 && ac.n_heads == 20 && ac.ffn == 5120 && ac.conv_ch == 480 &&
              ac.out_dim == 2048 && ac.n_window == 50 && ac.n_window_infer == 800,
          "audio config %d %d %d %d %d %d %d %d", ac.d_model, ac.n_layers, ac.n_heads, ac.ffn, ac.conv_ch, ac.out_dim,
          ac.n_window, ac.n_window_infer);
    vision_prep_params p = vision_prep_default_params();
    CHECK(vision_prep_load_config(CFG "Qwen3-VL-8B-Instruct", &p) == OMNI_OK && p.min_pixels == 65536 &&
              p.max_pixels == 16777216, "VL pixels %lld %lld", (long long)p.min_pixels, (long long)p.max_pixels);
    p = vision_prep_default_params();
    CHECK(vision_prep_load_config(CFG "Qwen3-Omni-30B-A3B-Instruct", &p) == OMNI_OK && p.min_pixels == 3136 &&
              p.max_pixels == 12845056, "Omni pixels %lld %lld", (long long)p.min_pixels, (long long)p.max_pixels);
    int gh, gw, n;
    CHECK(vision_image_token_count(480, 640, &p, &gh, &gw, &n) == OMNI_OK && n == 300, "640x480: %d tokens", n);
    return check_exit();
}
