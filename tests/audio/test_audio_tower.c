/* test_audio_tower.c - the AuT audio tower vs transformers (float32) on every Omni fixture and every 16 kHz clip
 * (0.5 s partial chunk, exactly 1 s, 3.3 s with a padded last chunk, 9 s crossing a 104-token attention window):
 * token count exact, max|d| <= 1e-3 · max|ref|. Input: this library's own decode + log-mel of the clip.
 * Also times 30 s of audio through the largest fixture tower, and checks bad-config/missing-tensor errors. */
#include <string.h>

#include "audio/audio.h"
#include "check.h"
#include "kernels/status.h"
#include "util.h"

static float *clip_mel(const char *clip, int64_t *T) {
    char path[1024];
    snprintf(path, sizeof path, "%s/audio/clips/%s.wav", OMNI_FIXTURES, clip);
    audio_pcm a;
    if (audio_load(path, &a)) return NULL;
    *T = audio_mel_frames(a.n);
    float *mel = malloc(sizeof(float) * 128 * *T);
    omni_status st = audio_log_mel(a.samples, a.n, mel);
    audio_pcm_free(&a);
    if (st) {
        free(mel);
        return NULL;
    }
    return mel;
}

static void check_model(const char *name) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/audio/%s", OMNI_FIXTURES, name);
    audio_tower_config cfg;
    omni_ckpt *ck = NULL;
    audio_tower *tw = NULL;
    omni_status st = audio_tower_config_read(dir, &cfg);
    if (!st) st = omni_ckpt_open(dir, &ck);
    if (!st) st = audio_tower_load(ck, &cfg, &tw);
    CHECK(st == OMNI_OK, "%s: %s", name, omni_last_error());
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *exp = read_json(path);
    CHECK(exp != NULL, "%s: no expected.json", name);
    const cJSON *towers = exp ? cJSON_GetObjectItem(exp, "towers") : NULL;
    const cJSON *t;
    cJSON_ArrayForEach(t, towers) {
        if (st) break;
        int64_t T = 0, n_ref = 0;
        float *mel = clip_mel(t->string, &T);
        CHECK(mel != NULL, "%s: %s", t->string, omni_last_error());
        int frames = cJSON_GetObjectItem(t, "frames")->valueint, tokens = cJSON_GetObjectItem(t, "tokens")->valueint;
        CHECK(T == frames, "%s: %lld frames, reference %d", t->string, (long long)T, frames);
        int64_t N = audio_token_count(T, cfg.n_window);
        CHECK(N == tokens, "%s: %lld tokens, reference %d", t->string, (long long)N, tokens);
        snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(t, "file")->valuestring);
        float *ref = read_f32(path, &n_ref);
        CHECK(ref && n_ref == N * cfg.out_dim, "%s: reference size %lld", path, (long long)n_ref);
        if (mel && ref && n_ref == N * cfg.out_dim) {
            float *out = malloc(sizeof(float) * N * cfg.out_dim);
            double t0 = omni_time_ms();
            st = audio_tower_encode(tw, mel, T, out);
            double ms = omni_time_ms() - t0;
            CHECK(st == OMNI_OK, "%s: %s", t->string, omni_last_error());
            volatile int stop = 1; /* Ctrl+C (issue 15 item 3): stops before the next layer */
            audio_tower_set_interrupt(tw, &stop);
            omni_status s2 = audio_tower_encode(tw, mel, T, out + 0);
            audio_tower_set_interrupt(tw, NULL);
            CHECK(cfg.n_layers == 0 || (s2 == OMNI_ERR_RUNTIME && !strcmp(omni_last_error(), "interrupted")),
                  "%s: interrupt: %d %s", t->string, s2, omni_last_error());
            if (s2) st = audio_tower_encode(tw, mel, T, out); /* the output again, uninterrupted */
            double d = max_abs_diff(out, ref, n_ref), m = max_abs(ref, n_ref);
            printf("%s %-10s T=%4lld N=%3lld  max|d|/max|ref| = %.2e  (%.1f ms)\n", name, t->string, (long long)T,
                   (long long)N, d / m, ms);
            CHECK(d <= 1e-3 * m, "%s %s: max|d| %g > 1e-3 * %g", name, t->string, d, m);
            free(out);
        }
        free(ref);
        free(mel);
    }
    cJSON_Delete(exp);
    audio_tower_free(tw);
    omni_ckpt_free(ck);
}

/* 30 s of the 3.3 s clip repeated, through the largest fixture tower (omni-b). */
static void time_30s(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/audio/omni-b", OMNI_FIXTURES);
    audio_tower_config cfg;
    omni_ckpt *ck = NULL;
    audio_tower *tw = NULL;
    if (audio_tower_config_read(dir, &cfg) || omni_ckpt_open(dir, &ck) || audio_tower_load(ck, &cfg, &tw)) {
        CHECK(0, "omni-b: %s", omni_last_error());
        omni_ckpt_free(ck);
        return;
    }
    int64_t T0 = 0, T = 3000;
    float *m0 = clip_mel("tone_3p3s", &T0), *mel = malloc(sizeof(float) * 128 * T);
    for (int f = 0; m0 && f < 128; f++)
        for (int64_t t = 0; t < T; t++) mel[f * T + t] = m0[f * T0 + t % T0];
    int64_t N = audio_token_count(T, cfg.n_window);
    float *out = malloc(sizeof(float) * N * cfg.out_dim);
    double t0 = omni_time_ms();
    omni_status st = audio_tower_encode(tw, mel, T, out);
    double ms = omni_time_ms() - t0;
    CHECK(st == OMNI_OK && N == 390, "30 s: %s (N %lld)", omni_last_error(), (long long)N);
    printf("30 s of audio (3000 frames, %lld tokens) through omni-b's tower (d %d, %d layers, conv %d): %.1f ms\n",
           (long long)N, cfg.d_model, cfg.n_layers, cfg.conv_ch, ms);
    free(out);
    free(mel);
    free(m0);
    audio_tower_free(tw);
    omni_ckpt_free(ck);
}

static void check_errors(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/audio/omni-a", OMNI_FIXTURES);
    audio_tower_config cfg;
    omni_ckpt *ck = NULL;
    audio_tower *tw = NULL;
    CHECK(audio_tower_config_read("/nonexistent", &cfg) == OMNI_ERR_MODEL, "missing config.json");
    CHECK(audio_tower_config_read(dir, &cfg) == OMNI_OK && omni_ckpt_open(dir, &ck) == OMNI_OK, "open omni-a");
    audio_tower_config bad = cfg;
    bad.d_model += 4; /* shapes no longer match */
    CHECK(audio_tower_load(ck, &bad, &tw) == OMNI_ERR_MODEL && tw == NULL, "wrong d_model must fail: %s",
          omni_last_error());
    bad = cfg;
    snprintf(bad.prefix, sizeof bad.prefix, "thinker.no_such_tower.");
    CHECK(audio_tower_load(ck, &bad, &tw) == OMNI_ERR_MODEL, "wrong prefix must fail");
    bad = cfg;
    bad.n_window_infer = 50;
    CHECK(audio_tower_load(ck, &bad, &tw) == OMNI_ERR_MODEL, "n_window_infer < chunk must fail");
    audio_tower_default_config();
    audio_tower_free(NULL);
    omni_ckpt_free(ck);
}

int main(void) {
    check_model("omni-a");
    check_model("omni-b");
    time_30s();
    check_errors();
    return check_exit();
}
