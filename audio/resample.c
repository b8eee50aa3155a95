/* resample.c - the resampler of builds without FFmpeg: polyphase windowed sinc, mono f32, any rate -> 16 kHz.
 *
 * Rational ratio up/down = 16000/rate (reduced). Output sample o sits at input time t = o·rate/16000 (no delay);
 * y[o] = Σ_j x[floor(t) + j] · h(j - frac(t)), j = -HALF+1 .. HALF, with h a sinc low-passed at
 * fc = 0.97 · min(1, 16000/rate) of the input Nyquist, times a Kaiser window (beta 8) over ±HALF input samples,
 * HALF = ceil(16 / fc) (16 zero crossings of the narrower band); each phase's taps are normalised to sum 1.
 * Samples outside the input are zero. Builds with FFmpeg use libswresample instead (audio_resample). */
#include "audio/audio.h"

#include <math.h>
#include <stdlib.h>

#define RS_ZERO_CROSSINGS 16
#define RS_BETA 8.0
#define RS_PI 3.14159265358979323846

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static double bessel_i0(double x) { /* power series, converges fast for x <= 30 */
    double s = 1, term = 1;
    for (int k = 1; k < 64; k++) {
        term *= (x / (2 * k)) * (x / (2 * k));
        s += term;
        if (term < 1e-17 * s) break;
    }
    return s;
}

/* The taps of phase p: h(j - p/up) for j = -half+1 .. half (2·half floats), normalised to sum 1. */
static void phase_taps(float *h, int64_t p, int64_t up, int half, double fc, double i0b) {
    int taps = 2 * half;
    double sum = 0, frac = (double)p / up;
    for (int i = 0; i < taps; i++) {
        double t = (i - half + 1) - frac, r = t / half, v;
        double sinc = t == 0 ? 1.0 : sin(RS_PI * fc * t) / (RS_PI * fc * t);
        v = fabs(r) >= 1 ? 0 : fc * sinc * bessel_i0(RS_BETA * sqrt(1 - r * r)) / i0b;
        h[i] = (float)v;
        sum += v;
    }
    for (int i = 0; i < taps; i++) h[i] = (float)(h[i] / sum);
}

/* Filter tables: up phases x 2·half taps. */
static float *make_table(int64_t up, int half, double fc, double i0b) {
    int taps = 2 * half;
    float *tab = malloc(sizeof(float) * (size_t)up * taps);
    if (!tab) return NULL;
    for (int64_t p = 0; p < up; p++) phase_taps(tab + p * taps, p, up, half, fc, i0b);
    return tab;
}

omni_status audio_resample_sinc(const float *in, int64_t n, int rate, float **out, int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (rate <= 0 || n < 0) return omni_fail(OMNI_ERR_INPUT, "audio: invalid sample rate %d", rate);
    int64_t g = gcd64(AUDIO_SAMPLE_RATE, rate), up = AUDIO_SAMPLE_RATE / g, down = rate / g;
    if (up > 1 << 20)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "audio: sample rate %d has no small ratio to 16 kHz", rate);
    double fc = 0.97 * (rate > AUDIO_SAMPLE_RATE ? (double)AUDIO_SAMPLE_RATE / rate : 1.0);
    int half = (int)ceil(RS_ZERO_CROSSINGS / fc), taps = 2 * half;
    int64_t m = (n * up + down - 1) / down; /* ceil(n · 16000 / rate) */
    /* Fewer outputs than phases (a short input at an odd rate: up is up to 16000 and 2·half up to ~1600 taps, a
     * 100 MB table and seconds of work for a few samples): each output's taps are made when needed instead. */
    int all = m >= up;
    double i0b = bessel_i0(RS_BETA);
    float *tab = all ? make_table(up, half, fc, i0b) : malloc(sizeof(float) * (size_t)taps);
    float *y = malloc(sizeof(float) * (size_t)(m > 0 ? m : 1));
    if (!tab || !y) {
        free(tab);
        free(y);
        return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory (resampler)");
    }
    for (int64_t o = 0; o < m; o++) {
        int64_t pos = o * down, k0 = pos / up, p = pos % up, first = k0 - half + 1;
        const float *h = all ? tab + p * taps : tab;
        if (!all) phase_taps(tab, p, up, half, fc, i0b);
        double acc = 0;
        if (first >= 0 && first + taps <= n) {
            for (int i = 0; i < taps; i++) acc += h[i] * in[first + i];
        } else {
            for (int i = 0; i < taps; i++)
                if (first + i >= 0 && first + i < n) acc += h[i] * in[first + i];
        }
        y[o] = (float)acc;
    }
    free(tab);
    *out = y;
    *n_out = m;
    return OMNI_OK;
}
