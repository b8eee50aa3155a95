/* test_omni_two_clips.c - two audio files in one prompt, as transformers encodes one processor call with two clips
 * (tools/reference/make_two_clip_fixture.py: omni-a, a 3.3 s clip then a 6437-sample clip, float32 eager).
 * transformers pads the clips to each other: the short clip gets ceil(6437/160) = 41 mel frames (40 alone), so 6
 * audio tokens (5 alone), its log-mel sees zeros past its end, and its chunk is padded to 100 frames before the
 * convs. Checks: the frame/token rule (audio_mel_frames_batched), then `omni logits --raw` with both --audio files
 * against the reference logits (max|d|/max|ref| <= 1e-3, same argmax). Before the fix (each clip encoded alone) the
 * prompt had one audio token fewer and the logits differed by O(1). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio/audio.h"
#include "check.h"
#include "kernels/ops.h"
#include "util.h"

#define FX OMNI_FIXTURES "/audio"

/* One shell word in single quotes (the prompt has no single quote). */
static void quote(char *out, size_t cap, const char *s) { snprintf(out, cap, "'%s'", s); }

int main(void) {
    cJSON *j = read_json(FX "/omni-a/two_clips.json");
    CHECK(j != NULL, "two_clips.json missing");
    if (!j) return check_exit();
    const cJSON *fr = cJSON_GetObjectItem(j, "mel_frames"), *tk = cJSON_GetObjectItem(j, "audio_tokens");
    const int64_t longest = 52800, n_short = 6437; /* samples: tone_3p3s.wav, tone_0p402s.wav */
    CHECK(audio_mel_frames_batched(longest, longest) == cJSON_GetArrayItem(fr, 0)->valueint, "long clip frames");
    CHECK(audio_mel_frames_batched(n_short, longest) == cJSON_GetArrayItem(fr, 1)->valueint &&
              audio_mel_frames_batched(n_short, n_short) == audio_mel_frames(n_short) && audio_mel_frames(n_short) == 40,
          "short clip frames: batched %lld alone %lld", (long long)audio_mel_frames_batched(n_short, longest),
          (long long)audio_mel_frames(n_short));
    CHECK(audio_token_count(audio_mel_frames_batched(n_short, longest), 50) == cJSON_GetArrayItem(tk, 1)->valueint,
          "short clip tokens");
    CHECK(audio_chunk_frames(330, 50) == 100 && audio_chunk_frames(41, 50) == 41, "audio_chunk_frames");

    char out[] = "/tmp/omni_two_clips_XXXXXX", prompt[1024], cmd[4096];
    int fd = mkstemp(out);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    quote(prompt, sizeof prompt, cJSON_GetStringValue(cJSON_GetObjectItem(j, "prompt")));
    snprintf(cmd, sizeof cmd, "'%s' logits -m '%s/omni-a' --raw --no-perf -t 2 -o '%s' --audio '%s/%s' --audio '%s/%s' "
             "-p %s", OMNI_BIN, FX, out, FX, cJSON_GetArrayItem(cJSON_GetObjectItem(j, "clips"), 0)->valuestring, FX,
             cJSON_GetArrayItem(cJSON_GetObjectItem(j, "clips"), 1)->valuestring, prompt);
    int rc = system(cmd);
    CHECK(rc == 0, "omni logits exit %d: %s", rc, cmd);
    int64_t n = 0, nr = 0;
    float *got = rc == 0 ? read_f32(out, &n) : NULL, *ref = read_f32(FX "/omni-a/two_clips.logits.f32", &nr);
    CHECK(got && ref && n == nr && n > 0, "logits: %lld values, reference %lld", (long long)n, (long long)nr);
    if (got && ref && n == nr && n > 0) {
        double rel = max_abs_diff(got, ref, n) / max_abs(ref, n);
        int am = cJSON_GetObjectItem(j, "argmax")->valueint;
        CHECK(rel <= 1e-3, "two clips: logits max|d|/max|ref| = %.3g", rel);
        CHECK(op_argmax(got, (int)n) == am && op_argmax(ref, (int)n) == am, "argmax %d, want %d",
              op_argmax(got, (int)n), am);
        fprintf(stderr, "two clips: logits rel err %.2e, argmax %d\n", rel, op_argmax(got, (int)n));
    }
    free(got), free(ref);
    unlink(out);
    cJSON_Delete(j);
    return check_exit();
}
