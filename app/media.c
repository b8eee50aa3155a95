/* media.c - image/audio files -> embeddings, spans and MRoPE positions for the decoder (see media.h). */
#include "app/media.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/audio.h"
#include "llm/positions.h"
#include "vision/vision.h"
#ifdef OMNI_HAVE_CUDA_TOWERS
#include "audio/cuda/audio_cuda.h"
#include "vision/cuda/vision_cuda.h"
#endif

#define MEDIA_MAX_ITEMS 64

struct media_encoder {
    const llm_model *m;
    const llm_config *cfg;
    char dir[4096];
    media_params p;
    vision_tower *vt;       /* loaded on the first image */
    vision_prep_params prep;
    audio_tower *at;        /* loaded on the first audio file */
    volatile const int *interrupt; /* Ctrl+C: the towers stop within one block / layer */
#ifdef OMNI_HAVE_CUDA_TOWERS
    vision_tower_cuda *vg;  /* the GPU towers (params.gpu), made from the CPU towers' weights */
    audio_tower_cuda *ag;
    int max_patches;        /* vg's workspace */
#endif
    double ms;
};

media_params media_default_params(void) {
    media_params p = {0};
    return p;
}

omni_status media_encoder_init(const llm_model *m, const char *model_dir, const media_params *p, media_encoder **out) {
    *out = NULL;
    media_encoder *e = calloc(1, sizeof *e);
    if (!e) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    e->m = m;
    e->cfg = llm_model_config(m);
    snprintf(e->dir, sizeof e->dir, "%s", model_dir);
    e->p = p ? *p : media_default_params();
    *out = e;
    return OMNI_OK;
}

void media_encoder_free(media_encoder *e) {
    if (!e) return;
    vision_tower_free(e->vt);
    audio_tower_free(e->at);
#ifdef OMNI_HAVE_CUDA_TOWERS
    vision_tower_cuda_free(e->vg);
    audio_tower_cuda_free(e->ag);
#endif
    free(e);
}

double media_encoder_ms(const media_encoder *e) { return e->ms; }

void media_encoder_set_interrupt(media_encoder *e, volatile const int *flag) {
    e->interrupt = flag;
    if (e->vt) vision_tower_set_interrupt(e->vt, flag);
    if (e->at) audio_tower_set_interrupt(e->at, flag);
}

static const char *base_name(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

omni_status media_check_support(const llm_model *m, int n_images, int n_audios) {
    const llm_config *c = llm_model_config(m);
    if (n_images && !c->vision_json)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "this model (%s) has no vision tower: images are not supported",
                         c->model_type);
    if (n_audios && !c->audio_json)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "this model (%s) has no audio tower: audio input needs Qwen3-Omni",
                         c->model_type);
    return OMNI_OK;
}

/* preprocessor_config.json's patch geometry must be the tower's (pixel_values of another width, or another merge of
 * the grid, were refused only at encode time as bad input, or with a placeholder count blaming the prompt). */
static omni_status check_prep(const vision_prep_params *p, const vision_config *c) {
    const struct { const char *key; int prep, tower; } v[] = {{"patch_size", p->patch_size, c->patch_size},
        {"temporal_patch_size", p->temporal_patch_size, c->temporal_patch_size},
        {"merge_size", p->merge_size, c->merge_size}};
    for (int i = 0; i < 3; i++)
        if (v[i].prep != v[i].tower)
            return omni_fail(OMNI_ERR_MODEL, "preprocessor_config.json: %s %d but config.json's vision_config says %d "
                             "(they disagree)", v[i].key, v[i].prep, v[i].tower);
    return OMNI_OK;
}

static omni_status ensure_vision(media_encoder *e) {
    if (e->vt) return OMNI_OK;
    omni_status st = media_check_support(e->m, 1, 0);
    if (st) return st;
    e->prep = vision_prep_default_params();
    if (e->cfg->arch == LLM_ARCH_QWEN3_OMNI_MOE) { /* Qwen3-Omni's preprocessor_config.json values (spec §6.7) */
        e->prep.min_pixels = 3136;
        e->prep.max_pixels = 12845056;
    }
    st = vision_prep_load_config(e->dir, &e->prep);
    if (!st)
        st = e->p.budget_preferred
                 ? vision_prep_prefer_token_limits(&e->prep, e->p.image_min_tokens, e->p.image_max_tokens)
                 : vision_prep_set_token_limits(&e->prep, e->p.image_min_tokens, e->p.image_max_tokens);
    if (!st) st = vision_tower_load(e->dir, llm_model_ckpt(e->m), &e->vt);
    if (!st) vision_tower_set_interrupt(e->vt, e->interrupt);
    if (!st && vision_tower_config(e->vt)->out_hidden != e->cfg->hidden)
        st = omni_fail(OMNI_ERR_MODEL, "vision out_hidden_size %d != text hidden %d",
                       vision_tower_config(e->vt)->out_hidden, e->cfg->hidden);
    if (!st) st = check_prep(&e->prep, vision_tower_config(e->vt));
#ifdef OMNI_HAVE_CUDA_TOWERS
    if (!st && e->p.gpu) { /* workspace for the largest image the pixel limits allow (a multiple of 4 patches) */
        vision_cuda_params vp = vision_cuda_default_params();
        const int64_t pp = e->prep.max_pixels / ((int64_t)e->prep.patch_size * e->prep.patch_size) / 4 * 4;
        vp.max_patches = e->max_patches = (int)(pp < (1 << 30) ? pp : (1 << 30));
        vp.max_images = 1;
        st = vision_tower_cuda_init(e->vt, &vp, &e->vg);
        if (!st)
            omni_log(2, "image: vision tower on the GPU (%.1f MiB of weights, %.1f MiB of workspace)\n",
                     vision_tower_cuda_weight_bytes(e->vg) / 1048576.0,
                     vision_tower_cuda_workspace_bytes(e->vg) / 1048576.0);
    }
#endif
    if (st) {
        vision_tower_free(e->vt);
        e->vt = NULL;
    }
    return st;
}

/* The tower that encodes this image: the GPU's when it has one and the image fits its workspace. */
static omni_status tower_encode(media_encoder *e, const vision_patches *pp, vision_output *vo) {
#ifdef OMNI_HAVE_CUDA_TOWERS
    if (e->vg && pp->n_patches <= e->max_patches) return vision_tower_cuda_encode(e->vg, pp, 1, vo);
#endif
    return vision_tower_encode(e->vt, pp, vo);
}

/* Preprocess and encode a loaded image. */
static omni_status encode_rgb(media_encoder *e, const vision_image *img, const char *name, media_item *out) {
    vision_patches pp = {0};
    vision_output vo = {0};
    omni_status st = vision_preprocess(img, &e->prep, &pp);
    if (!st) {
        omni_log(1, "image: '%s' %dx%d -> %dx%d (%d visual tokens)\n", name, img->width, img->height, pp.resized_w,
                 pp.resized_h, pp.n_patches / (e->prep.merge_size * e->prep.merge_size));
        st = tower_encode(e, &pp, &vo);
    }
    if (!st) {
        omni_log(1, "image: encoded in %.2f ms\n", vo.encode_ms);
        e->ms += vo.encode_ms;
        out->n_tokens = vo.n_tokens;
        out->grid_t = vo.grid_t;
        out->grid_h = vo.grid_h;
        out->grid_w = vo.grid_w;
        out->embd = vo.embd;
        out->n_deepstack = vo.n_deepstack < 4 ? vo.n_deepstack : 4;
        for (int i = 0; i < out->n_deepstack; i++) out->deepstack[i] = vo.deepstack[i];
        for (int i = out->n_deepstack; i < VISION_MAX_DEEPSTACK; i++) free(vo.deepstack[i]);
    }
    vision_patches_free(&pp);
    return st;
}

omni_status media_encode_image(media_encoder *e, const char *path, media_item *out) {
    memset(out, 0, sizeof *out);
    omni_status st = ensure_vision(e);
    if (st) return st;
    vision_image img = {0};
    if ((st = vision_image_load(path, e->p.max_image_pixels, &img))) return st;
    st = encode_rgb(e, &img, base_name(path), out);
    vision_image_free(&img);
    return st;
}

omni_status media_encode_image_data(media_encoder *e, const uint8_t *data, size_t size, const char *name,
                                    media_item *out) {
    memset(out, 0, sizeof *out);
    omni_status st = ensure_vision(e);
    if (st) return st;
    vision_image img = {0};
    if ((st = vision_image_load_memory(data, size, name, e->p.max_image_pixels, &img))) return st;
    st = encode_rgb(e, &img, name, out);
    vision_image_free(&img);
    return st;
}

static omni_status ensure_audio(media_encoder *e) {
    if (e->at) return OMNI_OK;
    omni_status st = media_check_support(e->m, 0, 1);
    if (st) return st;
    audio_tower_config ac;
    st = audio_tower_config_read(e->dir, &ac);
    if (!st) st = audio_tower_load(llm_model_ckpt(e->m), &ac, &e->at);
    if (!st) audio_tower_set_interrupt(e->at, e->interrupt);
    if (!st && ac.out_dim != e->cfg->hidden)
        st = omni_fail(OMNI_ERR_MODEL, "audio output_dim %d != text hidden %d", ac.out_dim, e->cfg->hidden);
#ifdef OMNI_HAVE_CUDA_TOWERS
    if (!st && e->p.gpu) {
        st = audio_tower_cuda_init(e->at, NULL, &e->ag);
        if (!st)
            omni_log(2, "audio: audio tower on the GPU (%.1f MiB of weights, %.1f MiB of workspace)\n",
                     audio_tower_cuda_weight_bytes(e->ag) / 1048576.0,
                     audio_tower_cuda_workspace_bytes(e->ag) / 1048576.0);
    }
#endif
    if (st) {
        audio_tower_free(e->at);
        e->at = NULL;
    }
    return st;
}

/* chunk_pad > the clip's own longest chunk (a clip under 2·n_window frames beside a longer one) runs on the CPU
 * tower: the CUDA tower pads a clip's chunks to its own longest only (such a clip is a few tokens). */
static omni_status audio_encode(media_encoder *e, const float *mel, int64_t T, int chunk_pad, float *emb) {
#ifdef OMNI_HAVE_CUDA_TOWERS
    if (e->ag && chunk_pad <= audio_chunk_frames(T, audio_tower_get_config(e->at)->n_window))
        return audio_tower_cuda_encode(e->ag, mel, T, emb);
#endif
    return audio_tower_encode_batched(e->at, mel, T, chunk_pad, emb);
}

omni_status media_encode_pcm(media_encoder *e, const audio_pcm *pcm, const char *name, media_item *out) {
    return media_encode_pcm_batched(e, pcm, name, 0, 0, out);
}

omni_status media_encode_pcm_batched(media_encoder *e, const audio_pcm *pcm, const char *name, int64_t longest,
                                     int chunk_pad, media_item *out) {
    memset(out, 0, sizeof *out);
    omni_status st = ensure_audio(e);
    if (st) return st;
    const audio_tower_config *ac = audio_tower_get_config(e->at);
    int64_t T = audio_mel_frames_batched(pcm->n, longest), n_tok = audio_token_count(T, ac->n_window);
    float *mel = malloc(sizeof(float) * (size_t)AUDIO_N_MELS * (size_t)(T > 0 ? T : 1));
    float *emb = malloc(sizeof(float) * (size_t)(n_tok > 0 ? n_tok : 1) * ac->out_dim);
    if (!mel || !emb) st = omni_fail(OMNI_ERR_NOMEM, "out of memory for %.0f s of audio", pcm->duration_s);
    double t0 = omni_time_ms();
    if (!st && (st = audio_log_mel_batched(pcm->samples, pcm->n, longest, mel))) /* too short, non-finite, overflow */
        st = omni_fail(st, "audio '%s': %s", name, omni_last_error());
    if (!st)
        omni_log(1, "audio: '%s' %d Hz %d ch %.2f s -> 16000 Hz mono (%lld samples)\n", name, pcm->orig_rate,
                 pcm->orig_channels, pcm->duration_s, (long long)pcm->n);
    if (!st) st = audio_encode(e, mel, T, chunk_pad, emb);
    if (!st) {
        double ms = omni_time_ms() - t0;
        omni_log(1, "audio: %lld mel frames -> %lld audio tokens, encoded in %.2f ms\n", (long long)T,
                 (long long)n_tok, ms);
        e->ms += ms;
        out->is_audio = 1;
        out->n_tokens = (int)n_tok;
        out->embd = emb;
        emb = NULL;
    }
    free(emb);
    free(mel);
    return st;
}

omni_status media_encode_audio(media_encoder *e, const char *path, media_item *out) {
    memset(out, 0, sizeof *out);
    omni_status st = ensure_audio(e); /* a model without an audio tower is refused before the file is read */
    if (st) return st;
    audio_pcm pcm = {0};
    audio_load_params lp = audio_load_default_params();
    if (e->p.max_audio_seconds > 0) lp.max_seconds = e->p.max_audio_seconds;
    if ((st = audio_load_ex(path, &lp, &pcm))) return st;
    st = media_encode_pcm(e, &pcm, base_name(path), out);
    audio_pcm_free(&pcm);
    return st;
}

omni_status media_encode_pcms(media_encoder *e, const audio_pcm *const *pcm, const char *const *names, int n,
                              media_item *const *out) {
    for (int i = 0; i < n; i++) memset(out[i], 0, sizeof *out[i]);
    omni_status st = ensure_audio(e);
    if (st || n <= 0) return st;
    int64_t longest = 0;
    for (int i = 0; i < n; i++)
        if (pcm[i]->n > longest) longest = pcm[i]->n;
    int chunk_pad = 0, nw = audio_tower_get_config(e->at)->n_window;
    for (int i = 0; i < n; i++) {
        int c = audio_chunk_frames(audio_mel_frames_batched(pcm[i]->n, longest), nw);
        if (c > chunk_pad) chunk_pad = c;
    }
    for (int i = 0; !st && i < n; i++) st = media_encode_pcm_batched(e, pcm[i], names[i], longest, chunk_pad, out[i]);
    return st;
}

omni_status media_encode_audios(media_encoder *e, const char *const *paths, int n, media_item *out) {
    if (n <= 0) return OMNI_OK;
    for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
    omni_status st = ensure_audio(e);
    if (st) return st;
    audio_pcm *pcm = calloc((size_t)n, sizeof *pcm);
    const audio_pcm **pp = calloc((size_t)n, sizeof *pp);
    const char **names = calloc((size_t)n, sizeof *names);
    media_item **po = calloc((size_t)n, sizeof *po);
    if (!pcm || !pp || !names || !po) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    audio_load_params lp = audio_load_default_params();
    if (e->p.max_audio_seconds > 0) lp.max_seconds = e->p.max_audio_seconds;
    for (int i = 0; !st && i < n; i++) { /* every clip decoded first: the batch pads to the longest */
        st = audio_load_ex(paths[i], &lp, &pcm[i]);
        pp[i] = &pcm[i], names[i] = base_name(paths[i]), po[i] = &out[i];
    }
    if (!st) st = media_encode_pcms(e, pp, names, n, po);
    for (int i = 0; pcm && i < n; i++) audio_pcm_free(&pcm[i]);
    free(pcm), free(pp), free(names), free(po);
    return st;
}

omni_status media_count_image(media_encoder *e, const char *path, int *n_tokens) {
    *n_tokens = 0;
    omni_status st = ensure_vision(e);
    int w = 0, h = 0, gh, gw;
    if (!st) st = vision_image_probe(path, e->p.max_image_pixels, &w, &h);
    if (!st) st = vision_image_token_count(h, w, &e->prep, &gh, &gw, n_tokens);
    return st;
}

omni_status media_count_image_data(media_encoder *e, const uint8_t *data, size_t size, const char *name,
                                   int *n_tokens) {
    *n_tokens = 0;
    omni_status st = ensure_vision(e);
    int w = 0, h = 0, gh, gw;
    if (!st) st = vision_image_probe_memory(data, size, name, e->p.max_image_pixels, &w, &h);
    if (!st) st = vision_image_token_count(h, w, &e->prep, &gh, &gw, n_tokens);
    return st;
}

/* Audio tokens of clips of len[i] samples (16 kHz) encoded as one batch (media_encode_pcms pads every clip to the
 * longest: a shorter clip keeps ceil(len / 160) mel frames). len[i] < 0: unknown, n_tokens[i] = -1 (the others are
 * then counted against the longest known clip). */
static void batch_token_counts(const media_encoder *e, const int64_t *len, int n, int *n_tokens) {
    int64_t longest = 0;
    for (int i = 0; i < n; i++)
        if (len[i] > longest) longest = len[i];
    const int nw = audio_tower_get_config(e->at)->n_window;
    for (int i = 0; i < n; i++) {
        int64_t t = len[i] < 0 ? -1 : audio_token_count(audio_mel_frames_batched(len[i], longest), nw);
        n_tokens[i] = t > INT_MAX ? INT_MAX : (int)t;
    }
}

omni_status media_count_pcms(media_encoder *e, const audio_pcm *const *pcm, int n, int *n_tokens) {
    for (int i = 0; i < n; i++) n_tokens[i] = 0;
    omni_status st = ensure_audio(e);
    if (st || n <= 0) return st;
    int64_t *len = malloc(sizeof *len * (size_t)n);
    if (!len) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) len[i] = pcm[i]->n;
    batch_token_counts(e, len, n, n_tokens);
    free(len);
    return OMNI_OK;
}

omni_status media_count_pcm(media_encoder *e, const audio_pcm *pcm, int *n_tokens) {
    return media_count_pcms(e, &pcm, 1, n_tokens);
}

omni_status media_count_audios(media_encoder *e, const char *const *paths, int n, int *n_tokens) {
    for (int i = 0; i < n; i++) n_tokens[i] = -1;
    omni_status st = ensure_audio(e);
    if (st || n <= 0) return st;
    audio_load_params lp = audio_load_default_params();
    if (e->p.max_audio_seconds > 0) lp.max_seconds = e->p.max_audio_seconds;
    int64_t *len = malloc(sizeof *len * (size_t)n);
    if (!len) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < n; i++) {
        audio_info ai;
        if (!(st = audio_probe(paths[i], &lp, &ai))) len[i] = ai.frames >= 0 ? audio_resampled_length(ai.frames, ai.rate) : -1;
    }
    if (!st) batch_token_counts(e, len, n, n_tokens);
    free(len);
    return st;
}

omni_status media_count_audio(media_encoder *e, const char *path, int *n_tokens) {
    return media_count_audios(e, &path, 1, n_tokens);
}

void media_item_clear(media_item *it) {
    if (!it) return;
    free(it->embd);
    for (int d = 0; d < it->n_deepstack; d++) free(it->deepstack[d]);
    memset(it, 0, sizeof *it);
}

/* ---- prompts -------------------------------------------------------------------------------------------- */

static int is_img_pad(const llm_config *c, int32_t id) { return id == c->image_token_id; }
static int is_aud_pad(const llm_config *c, int32_t id) { return c->audio_token_id >= 0 && id == c->audio_token_id; }

omni_status media_check_placeholders(const llm_model *m, const int32_t *ids, int n, int n_images, int n_audios) {
    const llm_config *c = llm_model_config(m);
    if ((n_images && c->image_token_id < 0) || (n_audios && c->audio_token_id < 0))
        return omni_fail(OMNI_ERR_MODEL, "config.json has no %s: this model cannot place %s in a prompt",
                         n_images && c->image_token_id < 0 ? "image_token_id" : "audio_token_id",
                         n_images && c->image_token_id < 0 ? "images" : "audio");
    int n_img = 0, n_aud = 0;
    for (int i = 0; i < n; i++) n_img += is_img_pad(c, ids[i]), n_aud += is_aud_pad(c, ids[i]);
    if (n_img != n_images || n_aud != n_audios)
        return omni_fail(OMNI_ERR_USAGE, "the prompt has %d <|image_pad|> and %d <|audio_pad|> placeholders but %d "
                         "image(s) and %d audio file(s) were given", n_img, n_aud, n_images, n_audios);
    return OMNI_OK;
}

/* Expanded ids and spans: each placeholder becomes n_tokens copies of itself, in item order per kind. */
static omni_status expand(const llm_config *c, const int32_t *ids, int n, const media_item *items, int n_items,
                          media_prompt *o, llm_grid *grids, int *n_grids, int *audio_lens, int *n_audio) {
    int total = n;
    for (int i = 0; i < n_items; i++) total += items[i].n_tokens - 1;
    o->tokens = malloc(sizeof(int32_t) * (size_t)total);
    o->spans = calloc((size_t)(n_items > 0 ? n_items : 1), sizeof(llm_span));
    if (!o->tokens || !o->spans) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int next_img = 0, next_aud = 0, k = 0;
    for (int i = 0; i < n; i++) {
        int img = is_img_pad(c, ids[i]), aud = is_aud_pad(c, ids[i]);
        if (!img && !aud) {
            o->tokens[k++] = ids[i];
            continue;
        }
        int *next = img ? &next_img : &next_aud;
        while (*next < n_items && items[*next].is_audio != aud) (*next)++;
        if (*next >= n_items) return omni_fail(OMNI_ERR_RUNTIME, "internal: no media item for placeholder %d", i);
        const media_item *it = &items[(*next)++];
        llm_span *sp = &o->spans[o->n_spans++];
        *sp = (llm_span){k, it->n_tokens, it->embd, it->n_deepstack, {0}};
        for (int d = 0; d < it->n_deepstack; d++) sp->deepstack[d] = it->deepstack[d];
        if (img) grids[(*n_grids)++] = (llm_grid){it->grid_t, it->grid_h, it->grid_w};
        else audio_lens[(*n_audio)++] = it->n_tokens;
        for (int t = 0; t < it->n_tokens; t++) o->tokens[k++] = ids[i];
    }
    o->n_tokens = k;
    return OMNI_OK;
}

omni_status media_prompt_build(const media_encoder *e, const int32_t *ids, int n, const media_item *items,
                               int n_items, media_prompt *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return omni_fail(OMNI_ERR_USAGE, "empty prompt");
    if (n_items > MEDIA_MAX_ITEMS) return omni_fail(OMNI_ERR_USAGE, "too many media items (%d)", n_items);
    int n_img = 0;
    for (int i = 0; i < n_items; i++) n_img += !items[i].is_audio;
    omni_status st = media_check_placeholders(e->m, ids, n, n_img, n_items - n_img);
    if (st) return st;
    llm_grid grids[MEDIA_MAX_ITEMS];
    int audio_lens[MEDIA_MAX_ITEMS], n_grids = 0, n_audio = 0;
    st = expand(e->cfg, ids, n, items, n_items, out, grids, &n_grids, audio_lens, &n_audio);
    if (!st && n_items > 0) {
        /* merge size: the vision preprocessor's (loaded with the first image) */
        llm_pos_config pc = {e->cfg->image_token_id, e->cfg->video_token_id, e->cfg->audio_token_id,
                             e->vt ? e->prep.merge_size : 2};
        out->pos = malloc(sizeof(int32_t) * 3 * (size_t)out->n_tokens);
        if (!out->pos) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
        if (!st) st = llm_positions_build(out->tokens, out->n_tokens, &pc, grids, n_grids, audio_lens, n_audio,
                                          out->pos, &out->rope_delta);
    }
    if (st) media_prompt_free(out);
    return st;
}

void media_prompt_free(media_prompt *p) {
    if (!p) return;
    free(p->tokens);
    free(p->pos);
    free(p->spans);
    memset(p, 0, sizeof *p);
}

void media_prompt_request(const media_prompt *p, llm_request *r) {
    r->tokens = p->tokens;
    r->n_tokens = p->n_tokens;
    r->pos = p->pos;
    r->rope_delta = p->rope_delta;
    r->spans = p->spans;
    r->n_spans = p->n_spans;
}
