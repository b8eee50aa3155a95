/* media.c - image/audio encoding for the session (see media.h). */
#include "app/media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/audio.h"
#include "vision/vision.h"

static const char *base_name(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

omni_status media_check_support(const omni_session *s, int n_images, int n_audios) {
    if (n_images && !s->cfg->vision_json)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "this model (%s) has no vision tower: images are not supported",
                         s->cfg->model_type);
    if (n_audios && !s->cfg->audio_json)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "this model (%s) has no audio tower: audio input needs Qwen3-Omni",
                         s->cfg->model_type);
    return OMNI_OK;
}

static omni_status ensure_vision(omni_session *s) {
    if (s->vtower) return OMNI_OK;
    omni_status st = media_check_support(s, 1, 0);
    if (st) return st;
    s->vprep = vision_prep_default_params();
    if (s->cfg->arch == LLM_ARCH_QWEN3_OMNI_MOE) { /* Qwen3-Omni's preprocessor_config.json values (spec §6.7) */
        s->vprep.min_pixels = 3136;
        s->vprep.max_pixels = 12845056;
    }
    st = vision_prep_load_config(s->model_dir, &s->vprep);
    if (!st) st = vision_prep_set_token_limits(&s->vprep, s->args.image_min_tokens, s->args.image_max_tokens);
    if (!st) st = vision_tower_load(s->model_dir, llm_model_ckpt(s->model), &s->vtower);
    if (!st && vision_tower_config(s->vtower)->out_hidden != s->cfg->hidden)
        st = omni_fail(OMNI_ERR_MODEL, "vision out_hidden_size %d != text hidden %d",
                       vision_tower_config(s->vtower)->out_hidden, s->cfg->hidden);
    return st;
}

omni_status media_encode_image(omni_session *s, const char *path, omni_media *out) {
    memset(out, 0, sizeof *out);
    omni_status st = ensure_vision(s);
    if (st) return st;
    vision_image img = {0};
    vision_patches pp = {0};
    vision_output vo = {0};
    if ((st = vision_image_load(path, 0, &img))) return st;
    st = vision_preprocess(&img, &s->vprep, &pp);
    if (!st) {
        omni_log(1, "image: '%s' %dx%d -> %dx%d (%d visual tokens)\n", base_name(path), img.width, img.height,
                 pp.resized_w, pp.resized_h, pp.n_patches / (s->vprep.merge_size * s->vprep.merge_size));
        st = vision_tower_encode(s->vtower, &pp, &vo);
    }
    if (!st) {
        omni_log(1, "image: encoded in %.2f ms\n", vo.encode_ms);
        s->t_encode_ms += vo.encode_ms;
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
    vision_image_free(&img);
    return st;
}

static omni_status ensure_audio(omni_session *s) {
    if (s->atower) return OMNI_OK;
    omni_status st = media_check_support(s, 0, 1);
    if (st) return st;
    audio_tower_config ac;
    st = audio_tower_config_read(s->model_dir, &ac);
    if (!st) st = audio_tower_load(llm_model_ckpt(s->model), &ac, &s->atower);
    if (!st && ac.out_dim != s->cfg->hidden)
        st = omni_fail(OMNI_ERR_MODEL, "audio output_dim %d != text hidden %d", ac.out_dim, s->cfg->hidden);
    return st;
}

omni_status media_encode_audio(omni_session *s, const char *path, omni_media *out) {
    memset(out, 0, sizeof *out);
    omni_status st = ensure_audio(s);
    if (st) return st;
    audio_pcm pcm = {0};
    if ((st = audio_load(path, &pcm))) return st;
    const audio_tower_config *ac = audio_tower_get_config(s->atower);
    int64_t T = audio_mel_frames(pcm.n), n_tok = audio_token_count(T, ac->n_window);
    float *mel = malloc(sizeof(float) * (size_t)AUDIO_N_MELS * (size_t)(T > 0 ? T : 1));
    float *emb = malloc(sizeof(float) * (size_t)(n_tok > 0 ? n_tok : 1) * ac->out_dim);
    if (!mel || !emb) st = omni_fail(OMNI_ERR_NOMEM, "out of memory for %.0f s of audio", pcm.duration_s);
    double t0 = omni_time_ms();
    if (!st) st = audio_log_mel(pcm.samples, pcm.n, mel); /* refuses too-short or non-finite audio first */
    if (!st)
        omni_log(1, "audio: '%s' %d Hz %d ch %.2f s -> 16000 Hz mono (%lld samples)\n", base_name(path),
                 pcm.orig_rate, pcm.orig_channels, pcm.duration_s, (long long)pcm.n);
    if (!st) st = audio_tower_encode(s->atower, mel, T, emb);
    if (!st) {
        double ms = omni_time_ms() - t0;
        omni_log(1, "audio: %lld mel frames -> %lld audio tokens, encoded in %.2f ms\n", (long long)T,
                 (long long)n_tok, ms);
        s->t_encode_ms += ms;
        out->is_audio = 1;
        out->n_tokens = (int)n_tok;
        out->embd = emb;
        emb = NULL;
    }
    free(emb);
    free(mel);
    audio_pcm_free(&pcm);
    return st;
}


void media_free(omni_media *m, int n) {
    if (!m) return;
    for (int i = 0; i < n; i++) {
        free(m[i].embd);
        for (int d = 0; d < m[i].n_deepstack; d++) free(m[i].deepstack[d]);
    }
    free(m);
}

omni_status media_encode_args(omni_session *s, omni_media **out, int *n_out) {
    int n = s->args.n_images + s->args.n_audios;
    *out = NULL;
    *n_out = 0;
    if (!n) return OMNI_OK;
    omni_media *m = calloc((size_t)n, sizeof *m);
    if (!m) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = OMNI_OK;
    int k = 0;
    for (int i = 0; !st && i < s->args.n_images; i++, k++) st = media_encode_image(s, s->args.images[i], &m[k]);
    for (int i = 0; !st && i < s->args.n_audios; i++, k++) st = media_encode_audio(s, s->args.audios[i], &m[k]);
    if (st) {
        media_free(m, n);
        return st;
    }
    *out = m;
    *n_out = n;
    return OMNI_OK;
}
