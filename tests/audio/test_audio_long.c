/* test_audio_long.c - one hour of silence (8 kHz 16-bit WAV written to /tmp at test time): decode + resample,
 * log-mel without truncation, the token count, and (when the omni-a fixture exists) the audio tower; checks the
 * values, and that peak memory stays bounded (<= 1 GB; measured about 430 MB: 230 MB of 16 kHz samples + 184 MB
 * of mel). */
#define _POSIX_C_SOURCE 200809L
#include <sndfile.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "audio/audio.h"
#include "check.h"
#include "kernels/status.h"
#include "util.h"

static double peak_rss_mb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}

static int write_silence(const char *path, int rate, int seconds) {
    SF_INFO info = {.samplerate = rate, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) return -1;
    static short zero[8000];
    for (int s = 0; s < seconds; s++)
        for (int k = 0; k < rate / 8000; k++) sf_writef_short(f, zero, 8000);
    sf_close(f);
    return 0;
}

static void run_tower(const float *mel, int64_t T) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/audio/omni-a", OMNI_FIXTURES);
    omni_ckpt *ck = NULL;
    audio_tower_config cfg;
    audio_tower *tw = NULL;
    if (audio_tower_config_read(dir, &cfg) || omni_ckpt_open(dir, &ck) || audio_tower_load(ck, &cfg, &tw)) {
        printf("tower: skipped (%s)\n", omni_last_error());
        omni_ckpt_free(ck);
        return;
    }
    int64_t N = audio_token_count(T, cfg.n_window);
    float *out = malloc(sizeof(float) * N * cfg.out_dim);
    double t0 = omni_time_ms();
    omni_status st = audio_tower_encode(tw, mel, T, out);
    double ms = omni_time_ms() - t0;
    CHECK(st == OMNI_OK, "tower: %s", omni_last_error());
    /* every full chunk of silence gives the same 13 rows; windows of 104 tokens are identical too */
    double d = max_abs_diff(out, out + 104 * cfg.out_dim, (N - 104) * cfg.out_dim);
    CHECK(d <= 1e-4 * (max_abs(out, 104 * cfg.out_dim) + 1e-6), "tower rows of identical windows differ by %g", d);
    printf("tower (omni-a, %d layers, d %d): %lld tokens in %.1f s, peak RSS %.0f MB\n", cfg.n_layers, cfg.d_model,
           (long long)N, ms / 1000, peak_rss_mb());
    free(out);
    audio_tower_free(tw);
    omni_ckpt_free(ck);
}

int main(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/omni_aud_hour_%d.wav", (int)getpid());
    const int rate = 8000; /* exercises the resampler */
    CHECK(write_silence(path, rate, 3600) == 0, "write %s", path);
    double t0 = omni_time_ms();
    audio_pcm a;
    omni_status st = audio_load(path, &a);
    unlink(path);
    double t_dec = omni_time_ms() - t0;
    CHECK(st == OMNI_OK, "decode: %s", omni_last_error());
    if (st) return check_exit();
    CHECK(a.n == 3600LL * 16000 && a.orig_rate == rate && a.duration_s == 3600.0, "n %lld rate %d dur %g",
          (long long)a.n, a.orig_rate, a.duration_s);
    int64_t T = audio_mel_frames(a.n);
    CHECK(T == 360000, "T = %lld", (long long)T);
    float *mel = malloc(sizeof(float) * 128 * T);
    t0 = omni_time_ms();
    st = audio_log_mel(a.samples, a.n, mel);
    double t_mel = omni_time_ms() - t0;
    audio_pcm_free(&a);
    CHECK(st == OMNI_OK, "mel: %s", omni_last_error());
    int64_t bad = 0;
    for (int64_t i = 0; i < 128 * T; i++) bad += mel[i] != -1.5f; /* log10(1e-10) = -10 -> (-10 + 4) / 4 */
    CHECK(bad == 0, "%lld mel values of silence are not -1.5", (long long)bad);
    CHECK(audio_token_count(T, 50) == 46800, "tokens %lld", (long long)audio_token_count(T, 50));
    printf("1 h silence: decode+resample %.1f s, log-mel %.1f s, %lld frames, %lld audio tokens, peak RSS %.0f MB\n",
           t_dec / 1000, t_mel / 1000, (long long)T, (long long)audio_token_count(T, 50), peak_rss_mb());
    run_tower(mel, T);
    free(mel);
    CHECK(peak_rss_mb() <= 1024, "peak RSS %.0f MB", peak_rss_mb());
    return check_exit();
}
