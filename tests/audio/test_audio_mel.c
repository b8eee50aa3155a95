/* test_audio_mel.c - log-mel vs WhisperFeatureExtractor (max |d| <= 1e-4) on the 0.5 s and 1 s 16 kHz clips and on
 * prefixes of 7777 and 250 samples (not multiples of the hop; 250 is just above the reflect-pad limit), the mel frame
 * count, and the audio token count for 1..3000 frames vs the Python formula values. */
#include <string.h>

#include "audio/audio.h"
#include "check.h"
#include "util.h"

/* log-mel of the first n samples of a clip vs ref/mel_<name>_first<n>.f32 (lengths not a multiple of the hop). */
static void check_prefix(const char *name, int64_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/audio/clips/%s.wav", OMNI_FIXTURES, name);
    audio_pcm a;
    omni_status st = audio_load(path, &a);
    CHECK(st == OMNI_OK && a.n >= n, "%s: %s", name, omni_last_error());
    if (st || a.n < n) return;
    int64_t T = audio_mel_frames(n), n_ref = 0;
    snprintf(path, sizeof path, "%s/audio/ref/mel_%s_first%lld.f32", OMNI_FIXTURES, name, (long long)n);
    float *ref = read_f32(path, &n_ref), *mel = malloc(sizeof(float) * 128 * T);
    CHECK(ref && n_ref == 128 * T, "%s: reference has %lld values, expected 128 x %lld", path, (long long)n_ref,
          (long long)T);
    st = audio_log_mel(a.samples, n, mel);
    CHECK(st == OMNI_OK, "%s[:%lld]: %s", name, (long long)n, omni_last_error());
    if (ref && n_ref == 128 * T && !st) {
        double d = max_abs_diff(mel, ref, n_ref);
        printf("%s[:%lld] T=%4lld  log-mel max|d| = %.3g\n", name, (long long)n, (long long)T, d);
        CHECK(d <= 1e-4, "%s[:%lld]: log-mel max|d| = %g > 1e-4", name, (long long)n, d);
    }
    free(mel);
    free(ref);
    audio_pcm_free(&a);
}

static void check_clip(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/audio/clips/%s.wav", OMNI_FIXTURES, name);
    audio_pcm a;
    omni_status st = audio_load(path, &a);
    CHECK(st == OMNI_OK, "%s: %s", name, omni_last_error());
    if (st) return;
    CHECK(a.orig_rate == 16000 && a.orig_channels == 1, "%s: %d Hz %d ch", name, a.orig_rate, a.orig_channels);
    int64_t T = audio_mel_frames(a.n), n_ref = 0;
    snprintf(path, sizeof path, "%s/audio/ref/mel_%s.f32", OMNI_FIXTURES, name);
    float *ref = read_f32(path, &n_ref);
    CHECK(ref && n_ref == 128 * T, "%s: reference has %lld values, expected 128 x %lld", name, (long long)n_ref,
          (long long)T);
    float *mel = malloc(sizeof(float) * 128 * T);
    st = audio_log_mel(a.samples, a.n, mel);
    CHECK(st == OMNI_OK, "%s: %s", name, omni_last_error());
    if (ref && n_ref == 128 * T && !st) {
        double d = max_abs_diff(mel, ref, n_ref);
        printf("%-10s T=%4lld  log-mel max|d| = %.3g\n", name, (long long)T, d);
        CHECK(d <= 1e-4, "%s: log-mel max|d| = %g > 1e-4", name, d);
    }
    free(mel);
    free(ref);
    audio_pcm_free(&a);
}

static void check_token_counts(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/audio/ref/token_counts.json", OMNI_FIXTURES);
    cJSON *j = read_json(path);
    CHECK(j != NULL, "cannot read %s", path);
    if (!j) return;
    const cJSON *counts = cJSON_GetObjectItem(j, "counts");
    int n = cJSON_GetArraySize(counts), bad = 0;
    CHECK(n == 3000, "token_counts.json has %d entries", n);
    for (int i = 0; i < n; i++) {
        int64_t want = (int64_t)cJSON_GetArrayItem(counts, i)->valuedouble, got = audio_token_count(i + 1, 50);
        if (got != want && bad++ < 5) fprintf(stderr, "frames %d: %lld tokens, Python says %lld\n", i + 1,
                                              (long long)got, (long long)want);
    }
    CHECK(bad == 0, "%d token counts differ from the Python formula", bad);
    /* closed form from the spec and the documented examples */
    for (int64_t T = 1; T <= 100000; T += 7) {
        int64_t r = T % 100, closed = 13 * (T / 100) + (r + 7) / 8;
        if (audio_token_count(T, 50) != closed) bad++;
    }
    CHECK(bad == 0, "closed form 13*floor(T/100)+ceil((T%%100)/8) differs");
    CHECK(audio_token_count(100, 50) == 13 && audio_token_count(330, 50) == 43 && audio_token_count(3000, 50) == 390,
          "spec examples");
    CHECK(audio_token_count(0, 50) == 0, "zero frames");
    cJSON_Delete(j);
}

static void check_short_and_bad(void) {
    float w[400];
    for (int i = 0; i < 400; i++) w[i] = 0.1f * sinf(0.05f * i);
    float mel[128 * 2];
    CHECK(audio_log_mel(w, 200, mel) == OMNI_ERR_INPUT, "200 samples must be rejected (reflect pad needs > 200)");
    CHECK(audio_log_mel(w, 0, mel) == OMNI_ERR_INPUT, "0 samples must be rejected");
    CHECK(audio_log_mel(w, 320, mel) == OMNI_OK, "320 samples -> 2 frames: %s", omni_last_error());
    w[7] = NAN;
    CHECK(audio_log_mel(w, 320, mel) == OMNI_ERR_INPUT, "NaN sample must be rejected");
    CHECK(audio_mel_frames(16000) == 100 && audio_mel_frames(159) == 0, "frame count = n / 160");
}

int main(void) {
    check_clip("tone_0p5s");
    check_clip("tone_1s");
    check_prefix("tone_0p5s", 7777);
    check_prefix("tone_0p5s", 250);
    check_token_counts();
    check_short_and_bad();
    return check_exit();
}
