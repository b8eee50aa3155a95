/* prompt.c - renders the Qwen3-VL/Omni chat template (see prompt.h) with a small growable buffer. */
#include "llm/prompt.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} strbuf;

static void sb_add(strbuf *b, const char *t) {
    size_t l = strlen(t);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + l + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) { b->oom = 1; return; }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, l + 1);
    b->n += l;
}

static void add_parts(strbuf *b, const llm_message *m, int media) {
    for (int i = 0; i < m->n_parts; i++) {
        const llm_part *p = &m->parts[i];
        if (p->type == LLM_PART_TEXT) sb_add(b, p->text ? p->text : "");
        else if (!media) continue;
        else if (p->type == LLM_PART_IMAGE) sb_add(b, "<|vision_start|><|image_pad|><|vision_end|>");
        else if (p->type == LLM_PART_VIDEO) sb_add(b, "<|vision_start|><|video_pad|><|vision_end|>");
        else if (p->type == LLM_PART_AUDIO) sb_add(b, "<|audio_start|><|audio_pad|><|audio_end|>");
    }
}

char *llm_prompt_render(const llm_message *msgs, int n, int add_generation_prompt) {
    strbuf b = {0};
    sb_add(&b, "");
    for (int i = 0; i < n; i++) {
        const llm_message *m = &msgs[i];
        int is_system = !strcmp(m->role, "system");
        if (is_system && i != 0) continue;
        sb_add(&b, "<|im_start|>");
        sb_add(&b, m->role);
        sb_add(&b, "\n");
        add_parts(&b, m, !strcmp(m->role, "user"));
        sb_add(&b, "<|im_end|>\n");
    }
    if (add_generation_prompt) sb_add(&b, "<|im_start|>assistant\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

char *llm_prompt_simple(const char *system, const char *user_text, int n_images, int n_audio) {
    int np = n_images + n_audio + 1;
    llm_part *parts = calloc((size_t)np, sizeof *parts);
    if (!parts) return NULL;
    int k = 0;
    for (int i = 0; i < n_audio; i++) parts[k++].type = LLM_PART_AUDIO;
    for (int i = 0; i < n_images; i++) parts[k++].type = LLM_PART_IMAGE;
    parts[k].type = LLM_PART_TEXT;
    parts[k++].text = user_text;
    llm_part sys = {LLM_PART_TEXT, system};
    llm_message msgs[2] = {{"system", 1, &sys}, {"user", k, parts}};
    char *s = system ? llm_prompt_render(msgs, 2, 1) : llm_prompt_render(msgs + 1, 1, 1);
    free(parts);
    return s;
}

omni_status llm_prompt_check_tokens(const llm_config *c, const llm_tokenizer *t) {
    if (llm_tokenizer_vocab_size(t) > c->vocab) /* ids the embedding has no row for */
        return omni_fail(OMNI_ERR_MODEL, "tokenizer.json has token ids up to %d but config.json's vocab_size is %d "
                         "(tokenizer and config disagree)", llm_tokenizer_vocab_size(t) - 1, c->vocab);
    static const char *markers[] = {"<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < 2; i++)
        if (llm_tokenizer_token_id(t, markers[i]) < 0)
            return omni_fail(OMNI_ERR_MODEL, "tokenizer.json has no %s token: the chat template's turns would be "
                             "read as plain text", markers[i]);
    const struct { const char *key, *str; int id; } ids[] = {
        {"image_token_id", "<|image_pad|>", c->image_token_id},
        {"video_token_id", "<|video_pad|>", c->video_token_id},
        {"vision_start_token_id", "<|vision_start|>", c->vision_start_id},
        {"vision_end_token_id", "<|vision_end|>", c->vision_end_id},
        {"audio_token_id", "<|audio_pad|>", c->audio_token_id},
        {"audio_start_token_id", "<|audio_start|>", c->audio_start_id},
        {"audio_end_token_id", "<|audio_end|>", c->audio_end_id},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int32_t tid = ids[i].id >= 0 ? llm_tokenizer_token_id(t, ids[i].str) : -1;
        if (tid >= 0 && tid != ids[i].id)
            return omni_fail(OMNI_ERR_MODEL, "config.json: %s is %d but tokenizer.json's %s is %d (config and tokenizer "
                             "disagree)", ids[i].key, ids[i].id, ids[i].str, tid);
    }
    return OMNI_OK;
}
