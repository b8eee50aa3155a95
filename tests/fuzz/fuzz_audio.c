/* fuzz_audio.c - audio decoding (audio/decode.c) on arbitrary bytes, in memory: the sniffing, libsndfile (WAV,
 * FLAC, Ogg, Opus, AIFF ...), FFmpeg (MP3, m4a, webm, anything else), the limits from the header and while
 * decoding (10 s, so runs stay fast), downmix and resampling to 16 kHz, then the log-mel spectrogram of the
 * first 0.2 s. */
#include "fuzz_util.h"

#include "audio/audio.h"

/* Per-sample loops are left out of the coverage instrumentation (coverage_ignore.txt). */
__attribute__((noinline)) /* out of the fuzzers' coverage (tests/fuzz/coverage_ignore.txt) */
static int no_nan(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] != x[i]) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size) {
    omni_log_set_level(0);
    audio_load_params p = audio_load_default_params();
    p.max_seconds = 10;
    audio_pcm a;
    if (audio_load_memory(d, size, "fuzz", &p, &a) != OMNI_OK) return 0;
    FUZZ_ASSERT(a.n > 0 && a.orig_rate >= p.min_rate && a.orig_rate <= p.max_rate && a.duration_s <= p.max_seconds);
    FUZZ_ASSERT(no_nan(a.samples, a.n)); /* no NaN out of the resampler */
    int64_t n = a.n < 3200 ? a.n : 3200; /* the log-mel's edges (too short, padding) on the first 0.2 s */
    int64_t T = audio_mel_frames(n);
    float *mel = T > 0 ? malloc(sizeof(float) * AUDIO_N_MELS * (size_t)T) : NULL;
    if (mel) audio_log_mel(a.samples, n, mel);
    free(mel);
    audio_pcm_free(&a);
    return 0;
}
