/* config.c - config.json parsing for qwen3_vl and qwen3_omni_moe (see config.h). */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const cJSON *obj(const cJSON *o, const char *k) { return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }

static int get_int(const cJSON *o, const char *k, int *out) {
    const cJSON *v = obj(o, k);
    if (!cJSON_IsNumber(v)) return 0;
    *out = (int)v->valuedouble;
    return 1;
}

static int get_float(const cJSON *o, const char *k, float *out) {
    const cJSON *v = obj(o, k);
    if (!cJSON_IsNumber(v)) return 0;
    *out = (float)v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *o, const char *k, int *out) {
    const cJSON *v = obj(o, k);
    if (!cJSON_IsBool(v)) return 0;
    *out = cJSON_IsTrue(v);
    return 1;
}

static omni_status need_int(const cJSON *o, const char *k, int *out, const char *where) {
    if (!get_int(o, k, out) || *out <= 0)
        return omni_fail(OMNI_ERR_MODEL, "config.json: %s.%s missing or not a positive integer", where, k);
    return OMNI_OK;
}

/* eos_token_id may be an int or a list. */
static void read_eos(const cJSON *v, llm_config *c) {
    if (cJSON_IsNumber(v)) {
        c->eos_ids[0] = (int)v->valuedouble;
        c->n_eos = 1;
    } else if (cJSON_IsArray(v)) {
        c->n_eos = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) if (cJSON_IsNumber(e) && c->n_eos < LLM_MAX_EOS) c->eos_ids[c->n_eos++] =
            (int)e->valuedouble;
    }
}

/* rope: v5 `rope_parameters` {rope_theta, mrope_section, mrope_interleaved}, v4 `rope_theta` + `rope_scaling`. */
static omni_status read_rope(const cJSON *tc, llm_config *c) {
    const cJSON *rp = obj(tc, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = obj(tc, "rope_scaling");
    if (!get_float(tc, "rope_theta", &c->rope_theta) && !get_float(rp, "rope_theta", &c->rope_theta))
        return omni_fail(OMNI_ERR_MODEL, "config.json: rope_theta missing");
    const cJSON *sec = obj(rp, "mrope_section");
    if (cJSON_IsArray(sec) && cJSON_GetArraySize(sec) == 3) {
        for (int i = 0; i < 3; i++) c->mrope_section[i] = (int)cJSON_GetArrayItem(sec, i)->valuedouble;
    } else { /* text-only use: plain RoPE on the T stream */
        c->mrope_section[0] = c->head_dim / 2;
        c->mrope_section[1] = c->mrope_section[2] = 0;
    }
    c->mrope_interleaved = 0;
    get_bool(rp, "mrope_interleaved", &c->mrope_interleaved);
    get_bool(rp, "interleaved", &c->mrope_interleaved);
    int sum = c->mrope_section[0] + c->mrope_section[1] + c->mrope_section[2];
    if (sum != c->head_dim / 2)
        return omni_fail(OMNI_ERR_MODEL, "config.json: mrope_section sums to %d, expected head_dim/2 = %d", sum,
                         c->head_dim / 2);
    return OMNI_OK;
}

static omni_status read_text(const cJSON *tc, llm_config *c) {
    omni_status st;
    if ((st = need_int(tc, "hidden_size", &c->hidden, "text_config")) ||
        (st = need_int(tc, "num_hidden_layers", &c->n_layers, "text_config")) ||
        (st = need_int(tc, "num_attention_heads", &c->n_heads, "text_config")) ||
        (st = need_int(tc, "vocab_size", &c->vocab, "text_config")))
        return st;
    c->n_kv_heads = c->n_heads;
    get_int(tc, "num_key_value_heads", &c->n_kv_heads);
    c->head_dim = c->hidden / c->n_heads;
    get_int(tc, "head_dim", &c->head_dim);
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads || c->head_dim <= 0 || c->head_dim % 2)
        return omni_fail(OMNI_ERR_MODEL, "config.json: inconsistent heads (%d q, %d kv, head_dim %d)", c->n_heads,
                         c->n_kv_heads, c->head_dim);
    c->rms_eps = 1e-6f;
    get_float(tc, "rms_norm_eps", &c->rms_eps);
    get_int(tc, "intermediate_size", &c->intermediate);
    get_bool(tc, "tie_word_embeddings", &c->tie_word_embeddings);
    int bos;
    if (get_int(tc, "bos_token_id", &bos)) c->bos_id = bos;
    read_eos(obj(tc, "eos_token_id"), c);
    if (get_int(tc, "num_experts", &c->n_experts) && c->n_experts > 0) {
        if ((st = need_int(tc, "num_experts_per_tok", &c->top_k, "text_config")) ||
            (st = need_int(tc, "moe_intermediate_size", &c->moe_intermediate, "text_config")))
            return st;
        if (c->top_k > c->n_experts || c->top_k > 256)
            return omni_fail(OMNI_ERR_MODEL, "config.json: num_experts_per_tok %d > num_experts %d (or > 256)", c->top_k,
                             c->n_experts);
        c->norm_topk_prob = 1;
        get_bool(tc, "norm_topk_prob", &c->norm_topk_prob);
        c->decoder_sparse_step = 1;
        get_int(tc, "decoder_sparse_step", &c->decoder_sparse_step);
    } else {
        c->n_experts = 0;
        if (c->intermediate <= 0) return omni_fail(OMNI_ERR_MODEL, "config.json: text_config.intermediate_size missing");
    }
    return read_rope(tc, c);
}

static void read_token_ids(const cJSON *o, llm_config *c) {
    get_int(o, "image_token_id", &c->image_token_id);
    get_int(o, "video_token_id", &c->video_token_id);
    get_int(o, "vision_start_token_id", &c->vision_start_id);
    get_int(o, "vision_end_token_id", &c->vision_end_id);
    get_int(o, "audio_token_id", &c->audio_token_id);
    get_int(o, "audio_start_token_id", &c->audio_start_id);
    get_int(o, "audio_end_token_id", &c->audio_end_id);
    get_float(o, "position_id_per_seconds", &c->position_id_per_seconds);
}

static omni_status parse_root(cJSON *root, llm_config *c) {
    const cJSON *mt = obj(root, "model_type");
    if (!cJSON_IsString(mt)) return omni_fail(OMNI_ERR_MODEL, "config.json: no model_type");
    snprintf(c->model_type, sizeof c->model_type, "%s", mt->valuestring);
    const cJSON *holder;
    if (!strcmp(mt->valuestring, "qwen3_vl")) {
        c->arch = LLM_ARCH_QWEN3_VL;
        holder = root;
        strcpy(c->prefix, "model.language_model.");
        strcpy(c->lm_head, "lm_head.weight");
        strcpy(c->visual_prefix, "model.visual.");
    } else if (!strcmp(mt->valuestring, "qwen3_omni_moe")) {
        c->arch = LLM_ARCH_QWEN3_OMNI_MOE;
        holder = obj(root, "thinker_config");
        if (!cJSON_IsObject(holder)) return omni_fail(OMNI_ERR_MODEL, "config.json: qwen3_omni_moe without thinker_config");
        strcpy(c->prefix, "thinker.model.");
        strcpy(c->lm_head, "thinker.lm_head.weight");
        strcpy(c->visual_prefix, "thinker.visual.");
        strcpy(c->audio_prefix, "thinker.audio_tower.");
    } else {
        return omni_fail(OMNI_ERR_UNSUPPORTED, "unsupported model_type '%s' (supported: qwen3_vl, qwen3_omni_moe)",
                         mt->valuestring);
    }
    const cJSON *tc = obj(holder, "text_config");
    if (!cJSON_IsObject(tc)) return omni_fail(OMNI_ERR_MODEL, "config.json: text_config missing");
    omni_status st = read_text(tc, c);
    if (st) return st;
    get_bool(root, "tie_word_embeddings", &c->tie_word_embeddings);
    get_bool(holder, "tie_word_embeddings", &c->tie_word_embeddings);
    read_token_ids(holder, c);
    if (c->n_eos == 0) read_eos(obj(holder, "eos_token_id"), c);
    c->vision_json = (cJSON *)obj(holder, "vision_config");
    c->audio_json = (cJSON *)obj(holder, "audio_config");
    if (!cJSON_IsObject(c->vision_json)) c->vision_json = NULL;
    if (!cJSON_IsObject(c->audio_json)) c->audio_json = NULL;
    if (c->arch == LLM_ARCH_QWEN3_VL && c->n_experts > 0)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "qwen3_vl with experts (Qwen3-VL MoE) is not supported");
    if (c->arch == LLM_ARCH_QWEN3_OMNI_MOE && c->n_experts == 0)
        return omni_fail(OMNI_ERR_MODEL, "config.json: qwen3_omni_moe text_config has no num_experts");
    return OMNI_OK;
}

/* generation_config.json overrides eos ids (it is what generate() uses). */
static void read_generation_config(const char *dir, llm_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    char *txt = omni_read_file(path, NULL);
    if (!txt) return;
    cJSON *g = cJSON_Parse(txt);
    free(txt);
    const cJSON *eos = obj(g, "eos_token_id");
    if (eos) read_eos(eos, c);
    int bos;
    if (get_int(g, "bos_token_id", &bos)) c->bos_id = bos;
    cJSON_Delete(g);
}

omni_status llm_config_load(const char *dir, llm_config *c) {
    memset(c, 0, sizeof *c);
    c->bos_id = c->image_token_id = c->video_token_id = c->vision_start_id = c->vision_end_id = -1;
    c->audio_token_id = c->audio_start_id = c->audio_end_id = -1;
    c->position_id_per_seconds = 13.f;
    struct stat st;
    if (stat(dir, &st) != 0) return omni_fail(OMNI_ERR_MODEL, "model directory not found: %s", dir);
    if (!S_ISDIR(st.st_mode)) return omni_fail(OMNI_ERR_MODEL, "model path is not a directory: %s", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *txt = omni_read_file(path, &len);
    if (!txt) return omni_fail(OMNI_ERR_MODEL, "cannot read %s: %s", path, strerror(errno));
    c->root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!cJSON_IsObject(c->root)) {
        llm_config_free(c);
        return omni_fail(OMNI_ERR_MODEL, "%s: not valid JSON", path);
    }
    omni_status s = parse_root(c->root, c);
    if (s) {
        llm_config_free(c);
        return s;
    }
    read_generation_config(dir, c);
    return OMNI_OK;
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
