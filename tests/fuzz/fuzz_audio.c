/* fuzz_audio.c - audio decoding (audio/decode.c) on arbitrary bytes, in memory: the sniffing, libsndfile (WAV,
 * FLAC, Ogg, Opus, AIFF ...), FFmpeg (MP3, m4a, webm, anything else), the limits from the header and while
 * decoding (10 s, so runs stay fast), downmix and resampling to 16 kHz, then the log-mel spectrogram of the
 * first 0.2 s, alone and as a clip of a batch padded to a longer one (audio_log_mel_batched). The same bytes as a
 * file through the header-only probe (audio_probe: what -c and chat count tokens from) must agree with the
 * decode: a file that decodes probes, with its rate and channels, and with libsndfile its stated length is the
 * decoded length (so the token count from the header is the real one, never less). */
#include "fuzz_util.h"

#include "audio/audio.h"

/* Per-sample loops are left out of the coverage instrumentation (coverage_ignore.txt). */
__attribute__((noinline)) /* out of the fuzzers' coverage (tests/fuzz/coverage_ignore.txt) */
static int all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(x[i] - x[i] == 0.0f)) return 0; /* NaN and Inf */
    return 1;
}

/* The log-mel of x[n] alone, the same as a batch's longest clip (equal), and as the shorter clip of a batch
 * whose longest has `longest` samples: a log-mel that is computed is finite (samples too loud for the f32 power
 * spectrum are refused, 7275390). */
static void check_mel(const float *x, int64_t n, int64_t longest) {
    int64_t T = audio_mel_frames(n), Tb = audio_mel_frames_batched(n, longest);
    FUZZ_ASSERT(audio_mel_frames_batched(n, n) == T && Tb >= T && Tb <= audio_mel_frames(longest));
    if (T <= 0) return;
    size_t bytes = sizeof(float) * AUDIO_N_MELS * (size_t)T;
    float *mel = malloc(bytes), *same = malloc(bytes), *pad = malloc(sizeof(float) * AUDIO_N_MELS * (size_t)Tb);
    FUZZ_ASSERT(mel && same && pad);
    omni_status a = audio_log_mel(x, n, mel), b = audio_log_mel_batched(x, n, n, same);
    FUZZ_ASSERT(a == b && (a || (!memcmp(mel, same, bytes) && all_finite(mel, AUDIO_N_MELS * T))));
    if (!a && audio_log_mel_batched(x, n, longest, pad) == OMNI_OK) FUZZ_ASSERT(all_finite(pad, AUDIO_N_MELS * Tb));
    free(mel), free(same), free(pad);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size) {
    omni_log_set_level(0);
    audio_load_params p = audio_load_default_params();
    p.max_seconds = 10;
    char path[1024];
    snprintf(path, sizeof path, "%s/clip", fuzz_dir());
    audio_info info;
    omni_status probed = size && fuzz_write(fuzz_dir(), "clip", d, size) == 0 ? audio_probe(path, &p, &info)
                                                                              : OMNI_ERR_INPUT;
    audio_pcm a;
    if (audio_load_memory(d, size, "fuzz", &p, &a) != OMNI_OK) return 0;
    FUZZ_ASSERT(a.n > 0 && a.orig_rate >= p.min_rate && a.orig_rate <= p.max_rate && a.duration_s <= p.max_seconds);
    if (!all_finite(a.samples, a.n)) { /* finite samples near FLT_MAX: the resampler's overshoot makes Inf ... */
        float *mel = malloc(sizeof(float) * AUDIO_N_MELS * (size_t)(audio_mel_frames(a.n) + 1));
        FUZZ_ASSERT(mel && audio_log_mel(a.samples, a.n, mel) != OMNI_OK); /* ... which the log-mel refuses */
        free(mel);
        audio_pcm_free(&a);
        return 0;
    }
    if (!strcmp(a.decoder, "sndfile")) { /* (FFmpeg's header facts are estimates: a length from the bit rate) */
        FUZZ_ASSERT(probed == OMNI_OK && info.rate == a.orig_rate && info.channels == a.orig_channels);
        if (info.frames >= 0)
            FUZZ_ASSERT(info.frames == a.orig_frames && a.n <= audio_resampled_length(info.frames, info.rate));
    }
    int64_t n = a.n < 3200 ? a.n : 3200; /* the log-mel's edges (too short, padding) on the first 0.2 s */
    check_mel(a.samples, n, n + d[size - 1] % 5 * 97); /* a batch's longest: up to 388 samples more */
    audio_pcm_free(&a);
    return 0;
}
