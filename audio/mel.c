/* mel.c - Whisper log-mel spectrogram (as WhisperFeatureExtractor's torch path) with FFTW3, streamed.
 *
 * wave [n] -> centred STFT (reflect pad n_fft/2, periodic Hann 400, hop 160) -> |X|² [201] per frame
 * -> mel = filters · power (128 Slaney filters, f64-built, used as f32; each filter is a triangle over a few
 * bins, so only its non-zero range is summed) -> log10(max(mel, 1e-10))
 * -> second pass over the output: max(x, global_max - 8), (x + 4) / 4.
 * Single-threaded and allocation-free per frame; memory is the output [128, T] plus O(n_fft). */
#include "audio/audio.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>


#define N_FREQ (AUDIO_N_FFT / 2 + 1)

static pthread_mutex_t fftw_lock = PTHREAD_MUTEX_INITIALIZER; /* the FFTW planner is not thread-safe */

int64_t audio_mel_frames(int64_t n_samples) { return n_samples > 0 ? n_samples / AUDIO_HOP : 0; }

static double hz_to_mel(double f) { /* Slaney */
    const double logstep = 27.0 / log(6.4);
    return f >= 1000.0 ? 15.0 + log(f / 1000.0) * logstep : 3.0 * f / 200.0;
}

static double mel_to_hz(double m) {
    const double logstep = log(6.4) / 27.0;
    return m >= 15.0 ? 1000.0 * exp(logstep * (m - 15.0)) : 200.0 * m / 3.0;
}

/* transformers.audio_utils.mel_filter_bank(norm="slaney", mel_scale="slaney"), fb[k * n_mels + m]. */
/* Corner frequency i of the bank (0 .. n_mels + 1), evenly spaced on the mel scale. */
static double mel_corner(int i, int n_mels, double mmin, double mmax) {
    return mel_to_hz(i == n_mels + 1 ? mmax : mmin + i * ((mmax - mmin) / (n_mels + 1)));
}

/* No allocation: a failed one used to leave an all-zero bank (a silently wrong spectrogram). */
void audio_mel_filters(double *fb, int n_freq, int n_mels, double sr, double fmin, double fmax) {
    double mmin = hz_to_mel(fmin), mmax = hz_to_mel(fmax);
    double fstep = (double)((int)sr / 2) / (n_freq - 1);
    for (int m = 0; m < n_mels; m++) {
        double f0 = mel_corner(m, n_mels, mmin, mmax), f1 = mel_corner(m + 1, n_mels, mmin, mmax);
        double f2 = mel_corner(m + 2, n_mels, mmin, mmax);
        for (int k = 0; k < n_freq; k++) {
            double f = k == n_freq - 1 ? (double)((int)sr / 2) : k * fstep;
            double down = -(f0 - f) / (f1 - f0), up = (f2 - f) / (f2 - f1);
            double v = down < up ? down : up;
            if (v < 0.0) v = 0.0;
            fb[(size_t)k * n_mels + m] = v * (2.0 / (f2 - f0));
        }
    }
}

/* Sample j of the signal x [n] zero-extended to N >= n samples (a clip of a batch padded to the longest), then
 * reflect-padded (pad = n_fft/2 on both sides, no edge repeat). */
static inline float padded_at(const float *x, int64_t n, int64_t N, int64_t j) {
    j -= AUDIO_N_FFT / 2;
    if (j < 0) j = -j;
    if (j >= N) j = 2 * (N - 1) - j;
    return j < n ? x[j] : 0.0f;
}

typedef struct {
    float *frame;        /* [400] fftw-aligned */
    fftwf_complex *spec; /* [201] */
    fftwf_plan plan;
    float window[AUDIO_N_FFT];
    float *fb;    /* [128, 201] */
    int lo[AUDIO_N_MELS], hi[AUDIO_N_MELS]; /* non-zero bins of filter m: [lo, hi) */
    float power[N_FREQ];
} mel_state;

static void mel_state_free(mel_state *s) {
    pthread_mutex_lock(&fftw_lock);
    if (s->plan) fftwf_destroy_plan(s->plan);
    pthread_mutex_unlock(&fftw_lock);
    fftwf_free(s->frame);
    fftwf_free(s->spec);
    free(s->fb);
}

static omni_status mel_state_init(mel_state *s) {
    memset(s, 0, sizeof *s);
    s->frame = fftwf_malloc(sizeof(float) * AUDIO_N_FFT);
    s->spec = fftwf_malloc(sizeof(fftwf_complex) * N_FREQ);
    s->fb = malloc(sizeof(float) * AUDIO_N_MELS * N_FREQ);
    double *fb = malloc(sizeof(double) * AUDIO_N_MELS * N_FREQ);
    if (!s->frame || !s->spec || !s->fb || !fb) {
        free(fb);
        mel_state_free(s);
        return omni_fail(OMNI_ERR_NOMEM, "log-mel: out of memory");
    }
    audio_mel_filters(fb, N_FREQ, AUDIO_N_MELS, AUDIO_SAMPLE_RATE, 0.0, 8000.0);
    for (int k = 0; k < N_FREQ; k++)
        for (int m = 0; m < AUDIO_N_MELS; m++) s->fb[m * N_FREQ + k] = (float)fb[k * AUDIO_N_MELS + m];
    free(fb);
    for (int m = 0; m < AUDIO_N_MELS; m++) {
        const float *f = s->fb + m * N_FREQ;
        int lo = 0, hi = N_FREQ;
        while (lo < N_FREQ && f[lo] == 0.0f) lo++;
        while (hi > lo && f[hi - 1] == 0.0f) hi--;
        s->lo[m] = lo;
        s->hi[m] = hi;
    }
    for (int i = 0; i < AUDIO_N_FFT; i++) /* periodic Hann, as torch.hann_window(400) */
        s->window[i] = (float)(0.5 - 0.5 * cos(2.0 * 3.14159265358979323846 * i / AUDIO_N_FFT));
    pthread_mutex_lock(&fftw_lock);
    s->plan = fftwf_plan_dft_r2c_1d(AUDIO_N_FFT, s->frame, s->spec, FFTW_ESTIMATE);
    pthread_mutex_unlock(&fftw_lock);
    if (!s->plan) {
        mel_state_free(s);
        return omni_fail(OMNI_ERR_RUNTIME, "log-mel: FFTW plan failed");
    }
    return OMNI_OK;
}

/* Power spectrum of frame f of x [n] zero-extended to N samples into s->power. */
static void stft_frame(mel_state *s, const float *x, int64_t n, int64_t N, int64_t f) {
    int64_t start = f * AUDIO_HOP;
    int interior = start >= AUDIO_N_FFT / 2 && start + AUDIO_N_FFT / 2 <= n;
    for (int i = 0; i < AUDIO_N_FFT; i++)
        s->frame[i] = s->window[i] * (interior ? x[start - AUDIO_N_FFT / 2 + i] : padded_at(x, n, N, start + i));
    fftwf_execute(s->plan);
    for (int k = 0; k < N_FREQ; k++) s->power[k] = s->spec[k][0] * s->spec[k][0] + s->spec[k][1] * s->spec[k][1];
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* log-mel of x [n] zero-extended to N samples: all N/160 frames count for the max - 8 floor, the first T are
 * stored (out [128, T]). */
static omni_status log_mel(const float *wave, int64_t n, int64_t N, int64_t T, float *out) {
    if (n <= AUDIO_N_FFT / 2)
        return omni_fail(OMNI_ERR_INPUT, "log-mel: audio too short (%lld samples; need more than %d)", (long long)n,
                         AUDIO_N_FFT / 2);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(wave[i]))
            return omni_fail(OMNI_ERR_INPUT, "log-mel: non-finite sample at %lld", (long long)i);
    mel_state s;
    omni_status st = mel_state_init(&s);
    if (st) return st;
    const int64_t T_all = audio_mel_frames(N);
    float mx = -INFINITY;
    for (int64_t f = 0; f < T_all; f++) {
        if (f >= T && (f * AUDIO_HOP - AUDIO_N_FFT / 2 >= n && f * AUDIO_HOP + AUDIO_N_FFT / 2 < N)) {
            mx = fmaxf(mx, log10f(1e-10f)); /* a frame of padding only: power 0 */
            continue;
        }
        stft_frame(&s, wave, n, N, f);
        for (int m = 0; m < AUDIO_N_MELS; m++) {
            const float *fb = s.fb + m * N_FREQ;
            float acc = 0.0f;
            for (int k = s.lo[m]; k < s.hi[m]; k++) acc += fb[k] * s.power[k];
            float v = log10f(fmaxf(acc, 1e-10f));
            if (f < T) out[(size_t)m * T + f] = v;
            mx = fmaxf(mx, v);
        }
    }
    if (!isfinite(mx)) { /* finite samples far outside [-1, 1] (1e30 in a float WAV): the power overflows f32 */
        mel_state_free(&s);
        return omni_fail(OMNI_ERR_INPUT, "log-mel: the spectrum overflows (sample values up to %g; audio samples are "
                         "expected in [-1, 1])", max_abs(wave, n));
    }
    const float floor_v = mx - 8.0f;
    for (int64_t i = 0; i < (int64_t)AUDIO_N_MELS * T; i++) out[i] = (fmaxf(out[i], floor_v) + 4.0f) / 4.0f;
    mel_state_free(&s);
    return OMNI_OK;
}

omni_status audio_log_mel(const float *wave, int64_t n, float *out) {
    return log_mel(wave, n, n, audio_mel_frames(n), out);
}

int64_t audio_mel_frames_batched(int64_t n_samples, int64_t longest) {
    if (n_samples <= 0) return 0;
    if (n_samples >= longest) return audio_mel_frames(n_samples);
    int64_t ceil_frames = (n_samples + AUDIO_HOP - 1) / AUDIO_HOP, all = audio_mel_frames(longest);
    return ceil_frames < all ? ceil_frames : all;
}

omni_status audio_log_mel_batched(const float *wave, int64_t n, int64_t longest, float *mel) {
    if (longest < n) longest = n;
    return log_mel(wave, n, longest, audio_mel_frames_batched(n, longest), mel);
}
