/* prompt.h - chat prompt text exactly as the official Qwen3-VL / Qwen3-Omni chat templates render it.
 *
 *   [<|im_start|>system\n{system}<|im_end|>\n]
 *   <|im_start|>user\n{parts}<|im_end|>\n <|im_start|>assistant\n{text}<|im_end|>\n ... [<|im_start|>assistant\n]
 * where an image part is <|vision_start|><|image_pad|><|vision_end|> and an audio part
 * <|audio_start|><|audio_pad|><|audio_end|> (one pad each; the caller expands pads to the encoder's count). */
#ifndef OMNI_LLM_PROMPT_H
#define OMNI_LLM_PROMPT_H

#include "kernels/status.h"
#include "llm/config.h"
#include "llm/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LLM_PART_TEXT = 0, LLM_PART_IMAGE, LLM_PART_AUDIO, LLM_PART_VIDEO } llm_part_type;

typedef struct {
    llm_part_type type;
    const char *text; /* LLM_PART_TEXT only */
} llm_part;

typedef struct {
    const char *role; /* "system", "user", "assistant" */
    int n_parts;
    const llm_part *parts;
} llm_message;

/* Render a conversation. A system message is only honoured as the first message (as the template does).
 * Returns a malloc'ed string (NULL on allocation failure). */
char *llm_prompt_render(const llm_message *msgs, int n, int add_generation_prompt);

/* Convenience: one user turn with optional system text, n_images image parts and n_audio audio parts placed
 * before the text (the order the official examples use), plus the generation prompt. */
char *llm_prompt_simple(const char *system, const char *user_text, int n_images, int n_audio);

/* The tokenizer must fit the model: no token id at or above config.json's vocab_size, <|im_start|> and <|im_end|>
 * present (the template's turn markers). The config's placeholder and marker ids (image_token_id, vision_start_token_id, audio_token_id, ...) must be the
 * ids the tokenizer gives the strings the template writes (<|image_pad|>, <|vision_start|>, <|audio_pad|>, ...):
 * otherwise a prompt's placeholders are not found (or an ordinary token is taken for one). OMNI_ERR_MODEL naming
 * both when they disagree; a string the tokenizer lacks is not checked here. */
omni_status llm_prompt_check_tokens(const llm_config *c, const llm_tokenizer *t);

#ifdef __cplusplus
}
#endif
#endif
