/* audio.h - the audio front end of Qwen3-Omni: decode any sound file to 16 kHz mono f32, the Whisper log-mel
 * spectrogram, the audio token count, and the AuT audio tower (thinker.audio_tower.*).
 *
 * Decode: libsndfile first (WAV 8/16/24/32-bit int and float, FLAC, Ogg/Vorbis, Opus, MP3, AIFF ...); when it
 * cannot open the file and the build has FFmpeg (OMNI_HAVE_FFMPEG), libavformat/libavcodec (m4a/AAC, webm, the
 * audio track of a video ...); MP3 goes straight to FFmpeg in such builds (libsndfile's MP3 decoder, libmpg123,
 * prints to stderr by itself). FFmpeg's messages go through omni_log at level 2 (-v). Channels are averaged to mono, then every input whose rate is not 16 kHz goes
 * through the same libswresample resampler (default filter; builds without FFmpeg use a windowed-sinc resampler
 * instead, audio_resample_sinc). NaN/Inf samples, zero-length audio, audio shorter than one STFT window,
 * missing/empty/truncated/non-audio files fail with OMNI_ERR_INPUT.
 *
 * Log-mel: WhisperFeatureExtractor (n_fft 400, hop 160, 128 Slaney mel bins, periodic Hann, centred reflect-padded
 * STFT, last frame dropped, log10 clamp 1e-10, floor at global max - 8, (x + 4) / 4). No truncation at 30 s; the
 * STFT is streamed frame by frame (memory: the output plus O(n_fft)).
 *
 * Tower: chunks of 2·n_window mel frames, 3 stride-2 conv2d + GELU, conv_out, per-chunk sinusoidal positions,
 * bidirectional attention inside windows of n_window_infer frames, pre-LN encoder layers, ln_post, proj1, GELU,
 * proj2. Windows are independent, so the tower runs a group of windows at a time (memory bounded by the group,
 * not by the clip length). */
#ifndef OMNI_AUDIO_H
#define OMNI_AUDIO_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/safetensors.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AUDIO_SAMPLE_RATE 16000
#define AUDIO_N_FFT 400
#define AUDIO_HOP 160
#define AUDIO_N_MELS 128

/* ---- decode ---------------------------------------------------------------------------------------------- */

typedef struct {
    float *samples;     /* [n] mono, AUDIO_SAMPLE_RATE Hz, owned (audio_pcm_free) */
    int64_t n;          /* sample count after resampling */
    int orig_rate;      /* sample rate of the file */
    int orig_channels;  /* channel count of the file */
    int64_t orig_frames;/* frames at the original rate */
    double duration_s;  /* orig_frames / orig_rate */
    char decoder[16];   /* "sndfile" or "ffmpeg" */
} audio_pcm;

/* Limits checked from the header before any sample is decoded, and again while decoding (a header may lie or
 * say nothing): longer files, sample rates outside [min_rate, max_rate] and more channels than max_channels fail
 * with OMNI_ERR_INPUT. Memory is then bounded by max_seconds (16 kHz f32: 64 KB per second, plus the file's
 * rate while decoding). */
#define AUDIO_DEFAULT_MAX_SECONDS 3600.0
#define AUDIO_MIN_RATE 1000
#define AUDIO_MAX_RATE 768000
#define AUDIO_MAX_CHANNELS 64
typedef struct {
    double max_seconds; /* AUDIO_DEFAULT_MAX_SECONDS */
    int min_rate, max_rate; /* AUDIO_MIN_RATE, AUDIO_MAX_RATE (Hz) */
    int max_channels;   /* AUDIO_MAX_CHANNELS */
} audio_load_params;
audio_load_params audio_load_default_params(void);

/* Decode `path` (a regular file: devices, pipes and directories are refused) to 16 kHz mono with the default
 * limits. On failure *out is zeroed and the message names the file and the reason. */
omni_status audio_load(const char *path, audio_pcm *out);
/* The same with explicit limits (p NULL: the defaults). */
omni_status audio_load_ex(const char *path, const audio_load_params *p, audio_pcm *out);
/* What a file's header says, checked against the limits, nothing decoded (the errors of audio_load up to there):
 * for counting audio tokens before any decoding or encoder work. frames/duration_s are -1 when the container does
 * not state a length. */
typedef struct {
    int rate, channels;
    int64_t frames;
    double duration_s;
    char decoder[16];
} audio_info;
omni_status audio_probe(const char *path, const audio_load_params *p, audio_info *out);
/* Samples at 16 kHz of `frames` at `rate` (ceil; the resampler may give a few fewer at the end). */
int64_t audio_resampled_length(int64_t frames, int rate);
/* The same from a file held in memory (`name` is used in messages). */
omni_status audio_load_memory(const void *data, size_t size, const char *name, const audio_load_params *p,
                              audio_pcm *out);
void audio_pcm_free(audio_pcm *a); /* NULL or zeroed is a no-op */

/* 1 when this build decodes through FFmpeg and resamples with libswresample (OMNI_FFMPEG), else 0. */
int audio_has_ffmpeg(void);

/* Average `channels` interleaved channels of `frames` frames into mono (mono[i] = mean over channels). */
void audio_downmix(float *mono, const float *interleaved, int64_t frames, int channels);

/* Resample mono f32 from `rate` to 16 kHz: libswresample (default filter) in FFmpeg builds, else
 * audio_resample_sinc; a copy when rate == 16000. *out is malloc'ed (free()), *n_out its length. */
omni_status audio_resample(const float *in, int64_t n, int rate, float **out, int64_t *n_out);

/* The resampler of builds without FFmpeg (always compiled, for tests): polyphase Kaiser-windowed sinc,
 * 16 zero crossings, cutoff 0.97 of the narrower Nyquist; ceil(n · 16000 / rate) output samples. */
omni_status audio_resample_sinc(const float *in, int64_t n, int rate, float **out, int64_t *n_out);

/* ---- log-mel --------------------------------------------------------------------------------------------- */

/* Mel frames for n samples at 16 kHz: n / 160 (the STFT's last frame is dropped). */
int64_t audio_mel_frames(int64_t n_samples);

/* Whisper log-mel of `wave` [n] (16 kHz mono) into mel [AUDIO_N_MELS, T] (row-major, T = audio_mel_frames(n)).
 * Fails (OMNI_ERR_INPUT) when n <= n_fft/2 (reflect padding needs n > 200) or a sample is not finite. */
omni_status audio_log_mel(const float *wave, int64_t n, float *mel);

/* Several clips of one request, as WhisperFeatureExtractor(padding=True) treats a batch (transformers 5.17): every
 * clip is zero-extended to the longest one's `longest` samples before the STFT (its last frames see zeros, not
 * the reflection; the max - 8 floor spans the padded length), and a clip shorter than the longest keeps
 * ceil(n / 160) frames (its sample mask sub-sampled every 160 samples), at most longest / 160; the longest keeps
 * n / 160. With longest <= n both equal audio_mel_frames / audio_log_mel. mel is [AUDIO_N_MELS, frames]. */
int64_t audio_mel_frames_batched(int64_t n_samples, int64_t longest);
omni_status audio_log_mel_batched(const float *wave, int64_t n, int64_t longest, float *mel);

/* The Slaney mel filter bank [n_freq = n_fft/2 + 1][n_mels] as HF builds it (f64), for tests. */
void audio_mel_filters(double *fb, int n_freq, int n_mels, double sr, double fmin, double fmax);

/* ---- tower ----------------------------------------------------------------------------------------------- */

/* Audio tokens for `frames` mel frames (Python floor-division formula; 0 for frames <= 0).
 * n_window: half a chunk (50 for Qwen3-Omni). */
int64_t audio_token_count(int64_t frames, int n_window);

typedef struct {
    int n_mels;           /* num_mel_bins (128) */
    int d_model;          /* 1280 */
    int n_layers;         /* encoder_layers */
    int n_heads;          /* encoder_attention_heads */
    int ffn;              /* encoder_ffn_dim */
    int conv_ch;          /* downsample_hidden_size (480) */
    int out_dim;          /* output_dim (= text hidden) */
    int n_window;         /* 50: chunks of 2·n_window frames */
    int n_window_infer;   /* 800: attention windows of n_window_infer frames */
    int max_source_positions; /* rows of the sinusoidal table (1500) */
    char prefix[64];      /* tensor name prefix, "thinker.audio_tower." */
} audio_tower_config;

/* Qwen3-Omni-30B-A3B values. */
audio_tower_config audio_tower_default_config(void);

/* Read thinker_config.audio_config (or a top-level audio_config) from <model_dir>/config.json. Missing keys keep
 * the defaults. OMNI_ERR_MODEL when the file is missing or not JSON, or the values are inconsistent. */
omni_status audio_tower_config_read(const char *model_dir, audio_tower_config *cfg);
/* The same from an audio_config object already read (llm_config's audio_json); every value type- and
 * range-checked. `where` is its key path for messages (NULL: "audio_config"). */
omni_status audio_tower_config_from_json(const cJSON *ac, const char *where, audio_tower_config *cfg);

typedef struct audio_tower audio_tower;

/* The tower's tensors as bound in the checkpoint (views into the mmap; any float dtype), for device upload.
 * d = d_model, f = ffn, C = conv_ch, F3 = frequency rows after the third conv (16 for 128 mel bins). */
typedef struct {
    omni_tensor ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b; /* [d], [d, d], [d] */
    omni_tensor ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;             /* fc1 [f, d], fc2 [d, f] */
} audio_layer_weights;

typedef struct {
    omni_tensor c1_w, c1_b, c2_w, c2_b, c3_w, c3_b; /* [C, 1, 3, 3] / [C, C, 3, 3], [C] */
    omni_tensor conv_out;                           /* [d, C·F3], column c·F3 + f */
    omni_tensor lnp_w, lnp_b, p1_w, p1_b, p2_w, p2_b; /* ln_post [d]; proj1 [d, d]; proj2 [out_dim, d] */
    const audio_layer_weights *layers;              /* [n_layers] */
} audio_weights;

/* Frequency rows after the conv stem (3 convs of stride 2): 128 -> 64 -> 32 -> 16. */
int audio_stem_rows(int n_mels);

/* The sinusoidal position table (SinusoidsPositionEmbedding, f32 as torch computes it): pos[p] = [sin(p·inv),
 * cos(p·inv)], inv[i] = exp(-(ln 1e4 / (d/2 - 1)) · i), i < d/2. pos: [rows, d]. */
void audio_sinusoid_table(float *pos, int rows, int d);

/* Bind the tower's tensors in `ckpt` (not copied: keep ckpt open while the tower lives). */
omni_status audio_tower_load(const omni_ckpt *ckpt, const audio_tower_config *cfg, audio_tower **out);
void audio_tower_free(audio_tower *t); /* NULL is a no-op */
const audio_tower_config *audio_tower_get_config(const audio_tower *t);
/* While *flag is non-zero (Ctrl+C), audio_tower_encode stops before its next layer with OMNI_ERR_RUNTIME
 * "interrupted". NULL: never. */
void audio_tower_set_interrupt(audio_tower *t, volatile const int *flag);
/* The tower's weights (valid while the tower and its checkpoint live). */
void audio_tower_weights(const audio_tower *t, audio_weights *w);

/* Encode mel [n_mels, T] (row stride T) to out [audio_token_count(T), out_dim]. */
omni_status audio_tower_encode(audio_tower *t, const float *mel, int64_t T, float *out);
/* The same for one clip of a batch: transformers pads every 2·n_window-frame chunk of the batch to the longest
 * chunk of all clips, and the padding leaks into a short clip's last outputs (conv bias + GELU). chunk_pad = the
 * largest audio_chunk_frames() of the batch's clips (0 or less than the clip's own: the clip alone). */
omni_status audio_tower_encode_batched(audio_tower *t, const float *mel, int64_t T, int chunk_pad, float *out);
/* The longest chunk of a clip of T mel frames: min(T, 2·n_window). */
int audio_chunk_frames(int64_t T, int n_window);

#ifdef __cplusplus
}
#endif
#endif
