/* config.c - config.json (+ generation_config.json) of qwen3_vl and qwen3_omni_moe checkpoints (see config.h).
 *
 * Every value the engine uses is read through kernels/json's typed getters: a value of the wrong type, a
 * non-integer size, a non-finite or out-of-range number, or a token id outside the vocabulary fails the load with
 * OMNI_ERR_MODEL and a message naming the key; features the decoder does not implement (attention biases, sliding
 * windows, other rope types or activations, dense layers inside an MoE model) fail with OMNI_ERR_UNSUPPORTED
 * instead of giving silently wrong answers. Ranges are generous bounds on real models, not tight fits. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/json.h"

#define MAX_DIM (1 << 16)        /* hidden, heads*head_dim ... */
#define MAX_FFN (1 << 20)        /* intermediate sizes */
#define MAX_VOCAB (1 << 24)
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_EXPERTS 4096

/* A getter result chain: stop at the first failure. */
#define TRY(x)                                                                                                     \
    do {                                                                                                           \
        omni_status st_ = (x);                                                                                     \
        if (st_) return st_;                                                                                       \
    } while (0)

static omni_json_ctx ctx_of(const char *path) { return (omni_json_ctx){"config.json", path, OMNI_ERR_MODEL}; }

/* Heads, head_dim and the norm epsilon. */
static omni_status read_shape(const omni_json_ctx *j, const cJSON *tc, llm_config *c) {
    TRY(omni_json_int(j, tc, "hidden_size", OMNI_JSON_REQUIRED, 1, MAX_DIM, &c->hidden));
    TRY(omni_json_int(j, tc, "num_hidden_layers", OMNI_JSON_REQUIRED, 1, MAX_LAYERS, &c->n_layers));
    TRY(omni_json_int(j, tc, "num_attention_heads", OMNI_JSON_REQUIRED, 1, MAX_HEADS, &c->n_heads));
    TRY(omni_json_int(j, tc, "vocab_size", OMNI_JSON_REQUIRED, 1, MAX_VOCAB, &c->vocab));
    c->n_kv_heads = c->n_heads;
    TRY(omni_json_int(j, tc, "num_key_value_heads", OMNI_JSON_OPTIONAL, 1, c->n_heads, &c->n_kv_heads));
    if (c->n_heads % c->n_kv_heads)
        return omni_fail(OMNI_ERR_MODEL, "config.json: num_attention_heads %d is not a multiple of "
                         "num_key_value_heads %d", c->n_heads, c->n_kv_heads);
    /* absent head_dim: Qwen3VLTextConfig's default 128; the Omni text config has no such field (hidden/heads) */
    c->head_dim = c->arch == LLM_ARCH_QWEN3_VL ? 128 : c->hidden / c->n_heads;
    TRY(omni_json_int(j, tc, "head_dim", OMNI_JSON_OPTIONAL, 2, 1024, &c->head_dim));
    if (c->head_dim < 2 || c->head_dim % 2)
        return omni_fail(OMNI_ERR_MODEL, "config.json: head_dim %d is not an even number >= 2", c->head_dim);
    c->rms_eps = 1e-6f;
    TRY(omni_json_float(j, tc, "rms_norm_eps", OMNI_JSON_OPTIONAL, 1e-30, 1.0, &c->rms_eps));
    c->intermediate = 0;
    TRY(omni_json_int(j, tc, "intermediate_size", OMNI_JSON_OPTIONAL, 1, MAX_FFN, &c->intermediate));
    int text_tie = 0; /* type-checked only: transformers reads the flag of the model's own config (below) */
    TRY(omni_json_bool(j, tc, "tie_word_embeddings", OMNI_JSON_OPTIONAL, &text_tie));
    return OMNI_OK;
}

/* Settings of transformers' Qwen3 family that this decoder does not implement: refuse rather than run wrong. */
static omni_status check_features(const omni_json_ctx *j, const cJSON *tc) {
    const char *act = "silu";
    int flag = 0, n = 0, layers[MAX_LAYERS];
    TRY(omni_json_string(j, tc, "hidden_act", OMNI_JSON_OPTIONAL, &act));
    if (strcmp(act, "silu"))
        return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: hidden_act '%s' is not supported (silu only)", act);
    TRY(omni_json_bool(j, tc, "attention_bias", OMNI_JSON_OPTIONAL, &flag));
    if (flag) return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: attention_bias true is not supported");
    TRY(omni_json_bool(j, tc, "use_sliding_window", OMNI_JSON_OPTIONAL, &flag));
    if (flag) return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: use_sliding_window true is not supported");
    TRY(omni_json_ints(j, tc, "mlp_only_layers", OMNI_JSON_OPTIONAL, 0, MAX_LAYERS, 0, MAX_LAYERS, layers, &n));
    if (n) return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: mlp_only_layers (dense layers in an MoE model) is not supported");
    return OMNI_OK;
}

/* MoE (qwen3_omni_moe); num_experts absent or 0 = dense. */
static omni_status read_moe(const omni_json_ctx *j, const cJSON *tc, llm_config *c) {
    c->n_experts = 0;
    TRY(omni_json_int(j, tc, "num_experts", OMNI_JSON_OPTIONAL, 0, MAX_EXPERTS, &c->n_experts));
    if (c->n_experts == 0) {
        if (c->intermediate <= 0) return omni_fail(OMNI_ERR_MODEL, "config.json: text_config.intermediate_size: missing");
        return OMNI_OK;
    }
    TRY(omni_json_int(j, tc, "num_experts_per_tok", OMNI_JSON_REQUIRED, 1, c->n_experts < 256 ? c->n_experts : 256,
                      &c->top_k));
    TRY(omni_json_int(j, tc, "moe_intermediate_size", OMNI_JSON_REQUIRED, 1, MAX_FFN, &c->moe_intermediate));
    c->norm_topk_prob = 1;
    TRY(omni_json_bool(j, tc, "norm_topk_prob", OMNI_JSON_OPTIONAL, &c->norm_topk_prob));
    c->decoder_sparse_step = 1;
    TRY(omni_json_int(j, tc, "decoder_sparse_step", OMNI_JSON_OPTIONAL, 1, MAX_LAYERS, &c->decoder_sparse_step));
    if (c->decoder_sparse_step != 1)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: decoder_sparse_step %d is not supported (every layer MoE)",
                         c->decoder_sparse_step);
    return OMNI_OK;
}

/* rope: v5 `rope_parameters` {rope_theta, mrope_section, mrope_interleaved}, v4 `rope_theta` + `rope_scaling`.
 * As transformers 5.17 computes it (Qwen3VLTextRotaryEmbedding, Qwen3OmniMoeThinkerTextRotaryEmbedding): the
 * frequency slots are ALWAYS interleaved T H W T H W ... whatever `mrope_interleaved`/`interleaved` say (the flags
 * are only type-checked), only mrope_section[1] and [2] matter (H: slots j%3 == 1 below 3*section[1], W: j%3 == 2
 * below 3*section[2], T: the rest), an absent mrope_section is [24, 20, 20], and an absent rope_theta is the class
 * default (500000 for qwen3_vl, 1000000 for qwen3_omni_moe). */
static omni_status read_rope(const cJSON *tc, llm_config *c) {
    omni_json_ctx j = ctx_of("text_config");
    const cJSON *rp = NULL;
    TRY(omni_json_object(&j, tc, "rope_parameters", OMNI_JSON_OPTIONAL, &rp));
    omni_json_ctx jr = ctx_of(rp ? "text_config.rope_parameters" : "text_config.rope_scaling");
    if (!rp) TRY(omni_json_object(&j, tc, "rope_scaling", OMNI_JSON_OPTIONAL, &rp));
    const char *type = "default";
    TRY(omni_json_string(&jr, rp, "rope_type", OMNI_JSON_OPTIONAL, &type));
    if (strcmp(type, "default"))
        return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: rope_type '%s' is not supported (default only)", type);
    c->rope_theta = c->arch == LLM_ARCH_QWEN3_OMNI_MOE ? 1e6f : 5e5f;
    TRY(omni_json_float(&j, tc, "rope_theta", OMNI_JSON_OPTIONAL, 1.0, 1e12, &c->rope_theta));
    TRY(omni_json_float(&jr, rp, "rope_theta", OMNI_JSON_OPTIONAL, 1.0, 1e12, &c->rope_theta));
    int n = 0;
    c->mrope_section[0] = 24, c->mrope_section[1] = 20, c->mrope_section[2] = 20;
    TRY(omni_json_ints(&jr, rp, "mrope_section", OMNI_JSON_OPTIONAL, 3, 3, 0, MAX_DIM, c->mrope_section, &n));
    int flag = 1;
    TRY(omni_json_bool(&jr, rp, "mrope_interleaved", OMNI_JSON_OPTIONAL, &flag));
    TRY(omni_json_bool(&jr, rp, "interleaved", OMNI_JSON_OPTIONAL, &flag));
    c->mrope_interleaved = 1;
    return OMNI_OK;
}

static omni_status read_text(const cJSON *tc, llm_config *c) {
    omni_json_ctx j = ctx_of("text_config");
    TRY(read_shape(&j, tc, c));
    TRY(check_features(&j, tc));
    TRY(read_moe(&j, tc, c));
    return read_rope(tc, c);
}

/* Special token ids: each in [0, vocab). */
static omni_status read_token_ids(const omni_json_ctx *j, const cJSON *o, llm_config *c) {
    const int64_t hi = c->vocab - 1;
    TRY(omni_json_int(j, o, "image_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->image_token_id));
    TRY(omni_json_int(j, o, "video_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->video_token_id));
    TRY(omni_json_int(j, o, "vision_start_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->vision_start_id));
    TRY(omni_json_int(j, o, "vision_end_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->vision_end_id));
    TRY(omni_json_int(j, o, "audio_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->audio_token_id));
    TRY(omni_json_int(j, o, "audio_start_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->audio_start_id));
    TRY(omni_json_int(j, o, "audio_end_token_id", OMNI_JSON_OPTIONAL, 0, hi, &c->audio_end_id));
    return omni_json_float(j, o, "position_id_per_seconds", OMNI_JSON_OPTIONAL, 1e-3, 1e4, &c->position_id_per_seconds);
}

/* bos_token_id and eos_token_id (an int or a list) of an object, ids in [0, vocab). */
static omni_status read_bos_eos(const omni_json_ctx *j, const cJSON *o, llm_config *c) {
    TRY(omni_json_int(j, o, "bos_token_id", OMNI_JSON_OPTIONAL, 0, c->vocab - 1, &c->bos_id));
    return omni_json_int_or_ints(j, o, "eos_token_id", OMNI_JSON_OPTIONAL, 0, LLM_MAX_EOS, 0, c->vocab - 1, c->eos_ids,
                                 &c->n_eos);
}

/* The sub-config of an encoder: an object, or absent. */
static omni_status sub_config(const omni_json_ctx *j, const cJSON *holder, const char *key, cJSON **out) {
    const cJSON *v = NULL;
    TRY(omni_json_object(j, holder, key, OMNI_JSON_OPTIONAL, &v));
    *out = (cJSON *)v;
    return OMNI_OK;
}

static omni_status select_arch(const cJSON *root, llm_config *c, const cJSON **holder) {
    omni_json_ctx j = ctx_of("");
    const char *mt = NULL;
    TRY(omni_json_string(&j, root, "model_type", OMNI_JSON_REQUIRED, &mt));
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    if (!strcmp(mt, "qwen3_vl")) {
        c->arch = LLM_ARCH_QWEN3_VL;
        *holder = root;
        strcpy(c->prefix, "model.language_model.");
        strcpy(c->lm_head, "lm_head.weight");
        strcpy(c->visual_prefix, "model.visual.");
        return OMNI_OK;
    }
    if (!strcmp(mt, "qwen3_omni_moe")) {
        c->arch = LLM_ARCH_QWEN3_OMNI_MOE;
        TRY(omni_json_object(&j, root, "thinker_config", OMNI_JSON_REQUIRED, holder));
        strcpy(c->prefix, "thinker.model.");
        strcpy(c->lm_head, "thinker.lm_head.weight");
        strcpy(c->visual_prefix, "thinker.visual.");
        strcpy(c->audio_prefix, "thinker.audio_tower.");
        return OMNI_OK;
    }
    return omni_fail(OMNI_ERR_UNSUPPORTED, "unsupported model_type '%s' (supported: qwen3_vl, qwen3_omni_moe)", mt);
}

/* tie_word_embeddings as transformers 5.17 reads it: the flag of the config the model class is built from (the
 * top level for qwen3_vl, thinker_config for qwen3_omni_moe; text_config's copy is ignored), default false. When
 * that flag is absent, a checkpoint without lm_head.weight uses the embedding (tie_unset; llm/model.c decides). */
static omni_status read_tie(const omni_json_ctx *jr, const cJSON *root, const omni_json_ctx *jh, const cJSON *holder,
                            llm_config *c) {
    int other = 0;
    if (holder != root) TRY(omni_json_bool(jr, root, "tie_word_embeddings", OMNI_JSON_OPTIONAL, &other));
    c->tie_word_embeddings = 0;
    c->tie_unset = cJSON_GetObjectItemCaseSensitive(holder, "tie_word_embeddings") == NULL;
    return omni_json_bool(jh, holder, "tie_word_embeddings", OMNI_JSON_OPTIONAL, &c->tie_word_embeddings);
}

static omni_status parse_root(cJSON *root, llm_config *c) {
    const cJSON *holder = NULL, *tc = NULL;
    TRY(select_arch(root, c, &holder));
    const char *hp = c->arch == LLM_ARCH_QWEN3_OMNI_MOE ? "thinker_config" : "";
    omni_json_ctx jr = ctx_of(""), jh = ctx_of(hp), jt = ctx_of("text_config");
    TRY(omni_json_object(&jh, holder, "text_config", OMNI_JSON_REQUIRED, &tc));
    TRY(read_text(tc, c));
    TRY(read_bos_eos(&jt, tc, c));
    TRY(read_tie(&jr, root, &jh, holder, c));
    TRY(read_token_ids(&jh, holder, c));
    if (c->n_eos == 0) {
        int bos = c->bos_id;
        TRY(read_bos_eos(&jh, holder, c));
        c->bos_id = bos;
    }
    TRY(sub_config(&jh, holder, "vision_config", &c->vision_json));
    TRY(sub_config(&jh, holder, "audio_config", &c->audio_json));
    if (c->arch == LLM_ARCH_QWEN3_VL && c->n_experts > 0)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "qwen3_vl with experts (Qwen3-VL MoE) is not supported");
    if (c->arch == LLM_ARCH_QWEN3_OMNI_MOE && c->n_experts == 0)
        return omni_fail(OMNI_ERR_MODEL, "config.json: qwen3_omni_moe text_config has no num_experts");
    return OMNI_OK;
}

static void set_defaults(llm_config *c) {
    memset(c, 0, sizeof *c);
    c->bos_id = c->image_token_id = c->video_token_id = c->vision_start_id = c->vision_end_id = -1;
    c->audio_token_id = c->audio_start_id = c->audio_end_id = -1;
    c->position_id_per_seconds = 13.f;
}

omni_status llm_config_parse(const char *json, size_t len, llm_config *c) {
    set_defaults(c);
    cJSON *root = NULL;
    omni_status st = omni_json_parse(json, len, "config.json", OMNI_ERR_MODEL, &root);
    if (st) return st;
    c->root = root;
    if (!cJSON_IsObject(root)) st = omni_fail(OMNI_ERR_MODEL, "config.json: not a JSON object");
    if (!st) st = parse_root(root, c);
    if (st) llm_config_free(c);
    return st;
}

/* generation_config.json (optional) overrides the eos/bos ids: it is what generate() uses. Present but broken
 * (not JSON, wrong types, ids outside the vocabulary) is an error, not silently ignored. */
omni_status llm_config_parse_generation(const char *json, size_t len, llm_config *c) {
    cJSON *g = NULL;
    omni_status st = omni_json_parse(json, len, "generation_config.json", OMNI_ERR_MODEL, &g);
    if (st) return st;
    omni_json_ctx j = {"generation_config.json", "", OMNI_ERR_MODEL};
    if (!cJSON_IsObject(g)) st = omni_fail(OMNI_ERR_MODEL, "generation_config.json: not a JSON object");
    llm_config t = *c; /* all or nothing */
    if (!st) st = read_bos_eos(&j, g, &t);
    cJSON_Delete(g);
    if (!st) {
        memcpy(c->eos_ids, t.eos_ids, sizeof c->eos_ids);
        c->n_eos = t.n_eos;
        c->bos_id = t.bos_id;
    }
    return st;
}

static omni_status load_generation_config(const char *dir, llm_config *c) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (stat(path, &sb) != 0 && errno == ENOENT) return OMNI_OK;
    omni_read_params p = omni_read_default_params();
    p.max_bytes = OMNI_JSON_MAX_BYTES;
    p.regular_only = 1;
    char *txt = NULL;
    size_t len = 0;
    omni_status st = omni_read_file_ex(path, &p, OMNI_ERR_MODEL, &txt, &len);
    if (!st) st = llm_config_parse_generation(txt, len, c);
    free(txt);
    return st;
}

omni_status llm_config_load(const char *dir, llm_config *c) {
    set_defaults(c);
    struct stat st;
    if (stat(dir, &st) != 0) return omni_fail(OMNI_ERR_MODEL, "model directory not found: %s", dir);
    if (!S_ISDIR(st.st_mode)) return omni_fail(OMNI_ERR_MODEL, "model path is not a directory: %s", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    omni_read_params p = omni_read_default_params();
    p.max_bytes = OMNI_JSON_MAX_BYTES;
    p.regular_only = 1;
    char *txt = NULL;
    size_t len = 0;
    omni_status s = omni_read_file_ex(path, &p, OMNI_ERR_MODEL, &txt, &len);
    if (!s) s = llm_config_parse(txt, len, c);
    free(txt);
    if (!s) s = load_generation_config(dir, c);
    if (s) llm_config_free(c);
    return s;
}

void llm_config_free(llm_config *c) {
    if (!c) return;
    cJSON_Delete(c->root);
    c->root = c->vision_json = c->audio_json = NULL;
}

int llm_config_is_eos(const llm_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}
