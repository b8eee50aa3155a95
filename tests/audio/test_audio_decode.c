/* test_audio_decode.c - decoding every supported container (and a video file's audio track) to 16 kHz mono,
 * resampling parity with the ffmpeg CLI (same libswresample default filter), codec tolerances on log-mel
 * features, WAV bit depths, and bad inputs.
 *
 * Codec tolerances (log-mel units, where features span about [-1.5, 1.5]; compared on the common frames with the
 * 16-bit WAV of the same clip, on the mel bins below 7.5 kHz (0..123): the lossy encoders low-pass the top 4 bins
 * of a 16 kHz signal away, which moves them to the floor): FLAC exact (all bins); MP3 / AAC (m4a) at 64 kb/s
 * mean |d| <= 0.03 and 99th percentile <= 0.15; Vorbis / Opus (ogg, opus, webm) and the AAC 32 kb/s audio track
 * of a video file (mp4) mean |d| <= 0.06 and 99th percentile <= 0.4. The lengths may differ by at most one codec
 * frame (AAC: 1024 samples of end padding). */
#define _POSIX_C_SOURCE 200809L
#define LOSSY_BINS 124
#include <sndfile.h>
#include <string.h>
#include <unistd.h>

#include "audio/audio.h"
#include "check.h"
#include "util.h"

static char g_path[1024];
static const char *clip(const char *name) {
    snprintf(g_path, sizeof g_path, "%s/audio/clips/%s", OMNI_FIXTURES, name);
    return g_path;
}

/* Decode + log-mel; returns mel (malloc) and *T, or NULL. */
static float *decode_mel(const char *path, int64_t *T, audio_pcm *keep) {
    audio_pcm a;
    omni_status st = audio_load(path, &a);
    CHECK(st == OMNI_OK, "%s: %s", path, omni_last_error());
    if (st) return NULL;
    *T = audio_mel_frames(a.n);
    float *mel = malloc(sizeof(float) * 128 * (*T > 0 ? *T : 1));
    st = audio_log_mel(a.samples, a.n, mel);
    CHECK(st == OMNI_OK, "%s: %s", path, omni_last_error());
    if (keep) *keep = a;
    else audio_pcm_free(&a);
    if (st) {
        free(mel);
        return NULL;
    }
    return mel;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* mean and 99th percentile of |a - b| over mel bins [0, bins) and the first common frames of [128, Ta], [128, Tb]. */
static void mel_diff(const float *a, int64_t Ta, const float *b, int64_t Tb, int bins, double *mean, double *p99) {
    int64_t T = Ta < Tb ? Ta : Tb, n = bins * T;
    float *d = malloc(sizeof(float) * n);
    double s = 0;
    for (int m = 0; m < bins; m++)
        for (int64_t t = 0; t < T; t++) {
            float v = fabsf(a[m * Ta + t] - b[m * Tb + t]);
            d[m * T + t] = v;
            s += v;
        }
    qsort(d, n, sizeof(float), cmp_float);
    *mean = s / n;
    *p99 = d[(int64_t)(0.99 * (n - 1))];
    free(d);
}

static void check_codecs(const char *base, const char **others, const double (*tol)[2]) {
    int64_t Tr = 0;
    float *ref = decode_mel(clip(base), &Tr, NULL);
    if (!ref) return;
    for (int i = 0; others[i]; i++) {
        int64_t T = 0;
        audio_pcm a;
        const char *ext = strrchr(others[i], '.');
        int ff_only = !strcmp(ext, ".m4a") || !strcmp(ext, ".webm") || !strcmp(ext, ".mp4");
        if (!audio_has_ffmpeg() && ff_only) {
            CHECK(audio_load(clip(others[i]), &a) == OMNI_ERR_INPUT, "%s without FFmpeg must fail", others[i]);
            printf("%-16s not decodable without FFmpeg: %s\n", others[i], omni_last_error());
            continue;
        }
        float *mel = decode_mel(clip(others[i]), &T, &a);
        if (!mel) continue;
        double mean, p99, mean_all, p99_all;
        mel_diff(mel, T, ref, Tr, LOSSY_BINS, &mean, &p99);
        mel_diff(mel, T, ref, Tr, 128, &mean_all, &p99_all);
        printf("%-16s %-7s %5d Hz %lld frames vs %lld: bins < 7.5 kHz mean|d| %.4f p99 %.4f; all bins mean %.4f "
               "p99 %.4f\n", others[i], a.decoder, a.orig_rate, (long long)T, (long long)Tr, mean, p99, mean_all,
               p99_all);
        CHECK(T >= Tr && T <= Tr + 7, "%s: %lld frames, WAV has %lld", others[i], (long long)T, (long long)Tr);
        if (tol[i][0] == 0) CHECK(mean_all == 0 && p99_all == 0, "%s: lossless differs", others[i]);
        CHECK(mean <= tol[i][0] && p99 <= tol[i][1], "%s: mean %g (tol %g), p99 %g (tol %g)", others[i], mean,
              tol[i][0], p99, tol[i][1]);
        audio_pcm_free(&a);
        free(mel);
    }
    free(ref);
}

/* 44.1 kHz stereo and 8 kHz mono vs the ffmpeg CLI's resampling of the same channel mean. */
static void check_resampled(const char *name) {
    char wav[256], refp[1024];
    snprintf(wav, sizeof wav, "%s.wav", name);
    snprintf(refp, sizeof refp, "%s/audio/ref/resampled_%s.f32", OMNI_FIXTURES, name);
    int64_t nr = 0;
    float *ref = read_f32(refp, &nr);
    audio_pcm a;
    omni_status st = audio_load(clip(wav), &a);
    if (!audio_has_ffmpeg()) { /* the sinc resampler: accuracy checked in check_sinc */
        CHECK(st == OMNI_OK && a.n == nr, "%s: %s (%lld samples)", name, omni_last_error(), (long long)a.n);
        printf("%-16s %d Hz -> %lld samples (sinc resampler, no FFmpeg)\n", name, a.orig_rate, (long long)a.n);
        audio_pcm_free(&a);
        free(ref);
        return;
    }
    CHECK(st == OMNI_OK && ref, "%s: %s", name, omni_last_error());
    if (st || !ref) {
        free(ref);
        return;
    }
    double d = max_abs_diff(a.samples, ref, a.n < nr ? a.n : nr);
    printf("%-16s %d Hz %d ch %.2f s -> %lld samples (ffmpeg CLI: %lld), max|d| %.3g\n", name, a.orig_rate,
           a.orig_channels, a.duration_s, (long long)a.n, (long long)nr, d);
    CHECK(a.n == nr, "%s: %lld samples, reference %lld", name, (long long)a.n, (long long)nr);
    CHECK(d <= 1e-6, "%s: resampled max|d| = %g", name, d);
    int64_t T = audio_mel_frames(a.n);
    float *m1 = malloc(sizeof(float) * 128 * T), *m2 = malloc(sizeof(float) * 128 * T);
    CHECK(audio_log_mel(a.samples, a.n, m1) == OMNI_OK && audio_log_mel(ref, a.n, m2) == OMNI_OK, "mel");
    double dm = max_abs_diff(m1, m2, 128 * T);
    CHECK(dm <= 1e-4, "%s: features of resampled input differ by %g", name, dm);
    free(m1);
    free(m2);
    free(ref);
    audio_pcm_free(&a);
}

/* Mel bins whose filter lies entirely below f_hz. */
static int bins_below(double f_hz) {
    static double fb[201 * 128];
    audio_mel_filters(fb, 201, 128, 16000, 0, 8000);
    int m = 0;
    for (; m < 128; m++) {
        int top = 0;
        for (int k = 0; k < 201; k++)
            if (fb[k * 128 + m] > 0) top = k;
        if (top * 40.0 >= f_hz) break;
    }
    return m;
}

/* The sinc resampler of builds without FFmpeg vs the ffmpeg CLI's libswresample on the same channel mean: the
 * filters differ (stop bands most), so log-mel features are compared on the bins below 0.95 of the lower
 * Nyquist (8 kHz in, 44.1 kHz in: 4 / 8 kHz): mean |d| <= 0.01, 99th percentile <= 0.05. */
static void check_sinc(const char *name) {
    char wav[256], refp[1024];
    snprintf(wav, sizeof wav, "%s.wav", name);
    snprintf(refp, sizeof refp, "%s/audio/ref/resampled_%s.f32", OMNI_FIXTURES, name);
    SF_INFO info = {0};
    SNDFILE *f = sf_open(clip(wav), SFM_READ, &info);
    int64_t nr = 0;
    float *ref = read_f32(refp, &nr);
    CHECK(f && ref, "%s: open", name);
    if (!f || !ref) {
        if (f) sf_close(f);
        free(ref);
        return;
    }
    float *inter = malloc(sizeof(float) * info.frames * info.channels), *mono = malloc(sizeof(float) * info.frames);
    sf_readf_float(f, inter, info.frames);
    sf_close(f);
    audio_downmix(mono, inter, info.frames, info.channels);
    float *y = NULL;
    int64_t ny = 0;
    omni_status st = audio_resample_sinc(mono, info.frames, info.samplerate, &y, &ny);
    CHECK(st == OMNI_OK && ny == nr, "%s: sinc resampler: %s (%lld samples, ref %lld)", name, omni_last_error(),
          (long long)ny, (long long)nr);
    if (!st && ny == nr) {
        double d = max_abs_diff(y, ref, ny), mean, p99;
        int64_t T = audio_mel_frames(ny);
        float *m1 = malloc(sizeof(float) * 128 * T), *m2 = malloc(sizeof(float) * 128 * T);
        CHECK(audio_log_mel(y, ny, m1) == OMNI_OK && audio_log_mel(ref, ny, m2) == OMNI_OK, "mel");
        int bins = bins_below(0.95 * (info.samplerate < 16000 ? info.samplerate : 16000) / 2);
        mel_diff(m1, T, m2, T, bins, &mean, &p99);
        printf("%-16s sinc resampler vs swresample: wave max|d| %.2e, mel (%d bins) mean|d| %.4f p99 %.4f\n", name,
               d, bins, mean, p99);
        CHECK(mean <= 0.01 && p99 <= 0.05, "%s: sinc resampler features: mean %g p99 %g", name, mean, p99);
        free(m1);
        free(m2);
    }
    free(y), free(inter), free(mono), free(ref);
}

/* A short input at an odd rate (fewer outputs than filter phases) makes each output's taps on the fly instead of
 * the whole table (up to 16000 phases x ~1600 taps): the same outputs as the table path, which a zero-padded
 * longer input takes (samples outside the input are zero). */
static void check_sinc_short(void) {
    const int rates[] = {44101, 1001};
    for (int r = 0; r < 2; r++) {
        int rate = rates[r], n_short = 97, n_long = rate + 64; /* n_long: >= 1 s, so every phase is used */
        float *x = calloc((size_t)n_long, sizeof(float)), *y1 = NULL, *y2 = NULL;
        int64_t m1 = 0, m2 = 0;
        for (int i = 0; i < n_short; i++) x[i] = sinf(0.37f * (float)i) + 0.25f * (float)(i % 7) - 0.5f;
        CHECK(audio_resample_sinc(x, n_short, rate, &y1, &m1) == OMNI_OK, "sinc short %d Hz", rate);
        CHECK(audio_resample_sinc(x, n_long, rate, &y2, &m2) == OMNI_OK, "sinc padded %d Hz", rate);
        double d = 0;
        for (int64_t o = 0; y1 && y2 && o < m1 && o < m2; o++) d = fmax(d, fabs((double)y1[o] - y2[o]));
        CHECK(m1 > 0 && m1 < m2 && d == 0, "sinc %d Hz: %lld short outputs differ from the table path by %g", rate,
              (long long)m1, d);
        free(x), free(y1), free(y2);
    }
    float x[5] = {1, 2, 3, 4, 5}, *y = NULL; /* 5 samples at 767999 Hz: 1 output (its table: 100 MB) */
    int64_t m = 0;
    CHECK(audio_resample_sinc(x, 5, 767999, &y, &m) == OMNI_OK && m == 1 && isfinite(y[0]), "sinc 5 samples");
    free(y);
}

/* Write a 16 kHz WAV with libsndfile in the given subformat. */
static int write_wav(const char *path, int format, const float *x, int n, int channels, int rate) {
    SF_INFO info = {.samplerate = rate, .channels = channels, .format = SF_FORMAT_WAV | format};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) return -1;
    sf_command(f, SFC_SET_CLIPPING, NULL, SF_TRUE);
    sf_writef_float(f, x, n);
    sf_close(f);
    return 0;
}

/* 8/16/24/32-bit int and float WAVs written at test time decode to the signal within one quantisation step. */
static void check_bit_depths(void) {
    enum { N = 8000 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = 0.5f * sinf(0.0371f * i) + 0.2f * sinf(0.29f * i);
    struct { int fmt; const char *name; double step; } f[] = {
        {SF_FORMAT_PCM_U8, "u8", 1.0 / 128}, {SF_FORMAT_PCM_16, "s16", 1.0 / 32768},
        {SF_FORMAT_PCM_24, "s24", 1.0 / 8388608}, {SF_FORMAT_PCM_32, "s32", 1e-7}, {SF_FORMAT_FLOAT, "f32", 0}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/omni_aud_test_%d_%s.wav", (int)getpid(), f[i].name);
        CHECK(write_wav(path, f[i].fmt, x, N, 1, 16000) == 0, "write %s", path);
        audio_pcm a;
        omni_status st = audio_load(path, &a);
        CHECK(st == OMNI_OK && a.n == N, "%s: %s (n %lld)", f[i].name, omni_last_error(), (long long)a.n);
        if (!st && a.n == N) {
            double d = max_abs_diff(a.samples, x, N);
            CHECK(d <= f[i].step + 1e-7, "%s: max|d| %g > step %g", f[i].name, d, f[i].step);
        }
        audio_pcm_free(&a);
        unlink(path);
    }
}

static void expect_input_error(const char *what, const char *path) {
    audio_pcm a;
    omni_status st = audio_load(path, &a);
    printf("bad input %-22s -> %s: %s\n", what, omni_status_name(st), omni_last_error());
    CHECK(st == OMNI_ERR_INPUT, "%s: status %d, want OMNI_ERR_INPUT", what, st);
    CHECK(strlen(omni_last_error()) > 0, "%s: no message", what);
    CHECK(a.samples == NULL && a.n == 0, "%s: output not cleared", what);
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static void check_bad_inputs(void) {
    char p[256];
    int pid = (int)getpid();
    expect_input_error("missing file", "/nonexistent/omni/q.wav");
    snprintf(p, sizeof p, "/tmp/omni_aud_empty_%d.wav", pid);
    write_bytes(p, "", 0);
    expect_input_error("empty file", p);
    unlink(p);
    size_t n = 0;
    char *wav = omni_read_file(clip("tone_1s.wav"), &n);
    CHECK(wav && n > 1000, "read tone_1s.wav");
    if (wav) {
        snprintf(p, sizeof p, "/tmp/omni_aud_trunc_%d.wav", pid);
        write_bytes(p, wav, n / 2); /* data chunk promises twice what is there */
        expect_input_error("truncated data", p);
        write_bytes(p, wav, 20); /* cut inside the header */
        expect_input_error("truncated header", p);
        unlink(p);
    }
    free(wav);
    static const unsigned char png[] = { /* 1x1 RGBA PNG */
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00,
        0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05,
        0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42,
        0x60, 0x82};
    snprintf(p, sizeof p, "/tmp/omni_aud_png_%d.wav", pid);
    write_bytes(p, png, sizeof png);
    expect_input_error("PNG named .wav", p);
    unlink(p);
    snprintf(p, sizeof p, "/tmp/omni_aud_zero_%d.wav", pid);
    CHECK(write_wav(p, SF_FORMAT_PCM_16, NULL, 0, 1, 16000) == 0, "write zero-length wav");
    expect_input_error("zero-length audio", p);
    unlink(p);
    float x[1600];
    for (int i = 0; i < 1600; i++) x[i] = 0.1f * sinf(0.1f * i);
    x[777] = NAN;
    snprintf(p, sizeof p, "/tmp/omni_aud_nan_%d.wav", pid);
    CHECK(write_wav(p, SF_FORMAT_FLOAT, x, 1600, 1, 16000) == 0, "write NaN wav");
    expect_input_error("NaN in float WAV", p);
    x[777] = INFINITY;
    CHECK(write_wav(p, SF_FORMAT_FLOAT, x, 1600, 1, 16000) == 0, "write Inf wav");
    expect_input_error("Inf in float WAV", p);
    unlink(p);
    expect_input_error("directory", "/tmp");
    audio_pcm_free(NULL);
}

/* audio_load_memory decodes exactly what audio_load decodes (both decoders), and the limits of
 * audio_load_params are applied from the header (issue 15 item 4). */
static void check_memory_and_limits(void) {
    static const char *files[] = {"tone_1s.wav", "tone_3p3s.mp3", "tone_3p3s.flac", "tone_3p3s.m4a", "stereo_44k.wav"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (!audio_has_ffmpeg() && strstr(files[i], ".m4a")) continue;
        size_t n = 0;
        char *data = omni_read_file(clip(files[i]), &n);
        audio_pcm a, b;
        CHECK(data && audio_load(clip(files[i]), &a) == OMNI_OK, "%s: %s", files[i], omni_last_error());
        CHECK(audio_load_memory(data, n, files[i], NULL, &b) == OMNI_OK, "%s from memory: %s", files[i],
              omni_last_error());
        CHECK(a.n == b.n && a.n > 0 && !memcmp(a.samples, b.samples, sizeof(float) * (size_t)a.n) &&
                  !strcmp(a.decoder, b.decoder), "%s: memory decode differs (%lld vs %lld samples)", files[i],
              (long long)a.n, (long long)b.n);
        audio_pcm_free(&a);
        audio_pcm_free(&b);
        audio_load_params p = audio_load_default_params();
        p.max_seconds = 0.25;
        CHECK(audio_load_memory(data, n, files[i], &p, &b) == OMNI_ERR_INPUT && strstr(omni_last_error(), "limit of 0.25 s"),
              "%s: max 0.25 s: %s", files[i], omni_last_error());
        p = audio_load_default_params();
        p.min_rate = 50000;
        CHECK(audio_load_ex(clip(files[i]), &p, &b) == OMNI_ERR_INPUT && strstr(omni_last_error(), "sample rate") &&
                  b.samples == NULL, "%s: min rate 50 kHz: %s", files[i], omni_last_error());
        p = audio_load_default_params();
        p.max_channels = 1;
        omni_status st = audio_load_ex(clip(files[i]), &p, &b);
        CHECK(strstr(files[i], "stereo") ? st == OMNI_ERR_INPUT && strstr(omni_last_error(), "2 channels") : st == OMNI_OK,
              "%s: max 1 channel: %d %s", files[i], st, omni_last_error());
        audio_pcm_free(&b);
        free(data);
    }
    audio_pcm b;
    CHECK(audio_load_memory("", 0, "empty", NULL, &b) == OMNI_ERR_INPUT, "empty memory");
    CHECK(audio_load_memory("RIFF1234WAVEfmt ", 16, "cut", NULL, &b) == OMNI_ERR_INPUT, "truncated header in memory");
}

int main(void) {
    check_memory_and_limits();
    const char *c3[] = {"tone_3p3s.flac", "tone_3p3s.mp3", "tone_3p3s.m4a", NULL};
    const double t3[][2] = {{0, 0}, {0.03, 0.15}, {0.03, 0.15}};
    check_codecs("tone_3p3s.wav", c3, t3);
    const char *c1[] = {"tone_1s.ogg", "tone_1s.opus", "tone_1s.webm", "video_1s.mp4", NULL};
    const double t1[][2] = {{0.06, 0.4}, {0.06, 0.4}, {0.06, 0.4}, {0.06, 0.4}};
    check_codecs("tone_1s.wav", c1, t1);
    check_resampled("stereo_44k");
    check_resampled("mono_8k");
    check_sinc("stereo_44k");
    check_sinc("mono_8k");
    check_sinc_short();
    check_bit_depths();
    check_bad_inputs();
    return check_exit();
}
