/* decode.c - sound file -> 16 kHz mono f32: libsndfile, then FFmpeg (when built with it), then downmix + resample.
 *
 * Every path ends in the same two steps so that results are consistent whatever the container: interleaved f32
 * at the file's rate -> audio_downmix (channel mean) -> audio_resample (libswresample, default filter). */
#define _POSIX_C_SOURCE 200809L
#include "audio/audio.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sndfile.h>

#ifdef OMNI_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#endif

int audio_has_ffmpeg(void) {
#ifdef OMNI_HAVE_FFMPEG
    return 1;
#else
    return 0;
#endif
}

/* A growing mono buffer filled by the decoders (frames at the original rate). */
typedef struct {
    float *x;
    int64_t n, cap;
} mono_buf;

static omni_status mono_reserve(mono_buf *b, int64_t extra) {
    if (b->n + extra <= b->cap) return OMNI_OK;
    int64_t cap = b->cap ? b->cap : 65536;
    while (cap < b->n + extra) cap *= 2;
    float *x = realloc(b->x, (size_t)cap * sizeof(float));
    if (!x) return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory (%lld samples)", (long long)cap);
    b->x = x;
    b->cap = cap;
    return OMNI_OK;
}

void audio_downmix(float *mono, const float *inter, int64_t frames, int channels) {
    if (channels == 1) {
        memmove(mono, inter, (size_t)frames * sizeof(float));
        return;
    }
    float inv = 1.0f / (float)channels;
    for (int64_t i = 0; i < frames; i++) {
        float s = 0.0f;
        for (int c = 0; c < channels; c++) s += inter[i * channels + c];
        mono[i] = s * inv;
    }
}

/* Append `frames` interleaved frames as mono, rejecting NaN/Inf. */
static omni_status mono_append(mono_buf *b, const float *inter, int64_t frames, int channels, const char *path) {
    for (int64_t i = 0; i < frames * channels; i++)
        if (!isfinite(inter[i]))
            return omni_fail(OMNI_ERR_INPUT, "audio '%s': non-finite sample (NaN/Inf) at frame %lld", path,
                             (long long)(b->n + i / channels));
    omni_status st = mono_reserve(b, frames);
    if (st) return st;
    audio_downmix(b->x + b->n, inter, frames, channels);
    b->n += frames;
    return OMNI_OK;
}

/* libsndfile. Returns OMNI_ERR_UNSUPPORTED (no message needed) when it cannot open the file at all. */
static omni_status decode_sndfile(const char *path, mono_buf *b, int *rate, int *channels) {
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf) return OMNI_ERR_UNSUPPORTED;
    if (info.channels <= 0 || info.samplerate <= 0) {
        sf_close(sf);
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': invalid header (%d ch, %d Hz)", path, info.channels,
                         info.samplerate);
    }
    /* A WAV whose data chunk promises more than the file holds is truncated: libsndfile clips the length
     * silently and only says so in its log ("data : 32000 (should be 15978)"). */
    char log[4096];
    sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
    const char *dl = strstr(log, "data : ");
    long long said = 0, real = 0;
    if (dl && sscanf(dl, "data : %lld (should be %lld)", &said, &real) == 2 && real < said) {
        sf_close(sf);
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': truncated file (data chunk of %lld bytes, %lld present)", path,
                         said, real);
    }
    *rate = info.samplerate;
    *channels = info.channels;
    enum { BLOCK = 4096 };
    float *tmp = malloc((size_t)BLOCK * info.channels * sizeof(float));
    if (!tmp) {
        sf_close(sf);
        return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    }
    omni_status st = OMNI_OK;
    sf_count_t got;
    while ((got = sf_readf_float(sf, tmp, BLOCK)) > 0)
        if ((st = mono_append(b, tmp, got, info.channels, path))) break;
    if (!st && sf_error(sf) != SF_ERR_NO_ERROR)
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': decode error: %s", path, sf_strerror(sf));
    if (!st && info.frames > 0 && info.frames != SF_COUNT_MAX && b->n < info.frames)
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': truncated file (%lld of %lld frames)", path, (long long)b->n,
                       (long long)info.frames);
    free(tmp);
    sf_close(sf);
    return st;
}

#ifdef OMNI_HAVE_FFMPEG
static omni_status av_err(const char *path, const char *what, int err) {
    char msg[128];
    av_strerror(err, msg, sizeof msg);
    return omni_fail(OMNI_ERR_INPUT, "audio '%s': %s: %s", path, what, msg);
}

/* Convert every frame the decoder has ready to interleaved f32 (same rate, same channels) and append it. */
static omni_status drain_decoder(AVCodecContext *dec, AVFrame *fr, SwrContext *cvt, float **tmp, int *tmp_cap,
                                 mono_buf *b, const char *path) {
    for (;;) {
        int r = avcodec_receive_frame(dec, fr);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return OMNI_OK;
        if (r < 0) return av_err(path, "decode error", r);
        int ch = dec->ch_layout.nb_channels;
        if (fr->nb_samples > *tmp_cap) {
            float *t = realloc(*tmp, (size_t)fr->nb_samples * ch * sizeof(float));
            if (!t) return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
            *tmp = t;
            *tmp_cap = fr->nb_samples;
        }
        uint8_t *outp[1] = {(uint8_t *)*tmp};
        int got = swr_convert(cvt, outp, fr->nb_samples, (const uint8_t **)fr->extended_data, fr->nb_samples);
        av_frame_unref(fr);
        if (got < 0) return av_err(path, "sample format conversion", got);
        omni_status st = mono_append(b, *tmp, got, ch, path);
        if (st) return st;
    }
}

/* Read packets of the best audio stream until EOF, decoding into b. */
static omni_status ffmpeg_pump(AVFormatContext *fmt, int si, AVCodecContext *dec, SwrContext *cvt, mono_buf *b,
                               const char *path) {
    AVPacket *pkt = av_packet_alloc();
    AVFrame *fr = av_frame_alloc();
    float *tmp = NULL;
    int tmp_cap = 0, r;
    omni_status st = (pkt && fr) ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    while (!st && (r = av_read_frame(fmt, pkt)) >= 0) {
        if (pkt->stream_index == si) {
            r = avcodec_send_packet(dec, pkt);
            if (r < 0 && r != AVERROR(EAGAIN)) st = av_err(path, "decode error", r);
            if (!st) st = drain_decoder(dec, fr, cvt, &tmp, &tmp_cap, b, path);
        }
        av_packet_unref(pkt);
    }
    if (!st) {
        avcodec_send_packet(dec, NULL);
        st = drain_decoder(dec, fr, cvt, &tmp, &tmp_cap, b, path);
    }
    free(tmp);
    av_frame_free(&fr);
    av_packet_free(&pkt);
    return st;
}

static omni_status decode_ffmpeg(const char *path, mono_buf *b, int *rate, int *channels) {
    AVFormatContext *fmt = NULL;
    AVCodecContext *dec = NULL;
    SwrContext *cvt = NULL;
    av_log_set_level(AV_LOG_QUIET);
    int r = avformat_open_input(&fmt, path, NULL, NULL);
    if (r < 0) return av_err(path, "not a recognised audio file", r);
    omni_status st = OMNI_OK;
    const AVCodec *codec = NULL;
    if ((r = avformat_find_stream_info(fmt, NULL)) < 0) st = av_err(path, "cannot read stream info", r);
    int si = st ? -1 : av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
    if (!st && (si < 0 || !codec))
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': no decodable audio stream (format %s)", path,
                       fmt->iformat ? fmt->iformat->name : "?");
    if (!st && !(dec = avcodec_alloc_context3(codec))) st = omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    if (!st && (r = avcodec_parameters_to_context(dec, fmt->streams[si]->codecpar)) < 0)
        st = av_err(path, "codec parameters", r);
    if (!st && (r = avcodec_open2(dec, codec, NULL)) < 0) st = av_err(path, "cannot open decoder", r);
    if (!st && (dec->sample_rate <= 0 || dec->ch_layout.nb_channels <= 0))
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': invalid stream (%d Hz, %d ch)", path, dec->sample_rate,
                       dec->ch_layout.nb_channels);
    if (!st) {
        /* Format conversion only (same rate and layout): planar/int -> interleaved f32. */
        r = swr_alloc_set_opts2(&cvt, &dec->ch_layout, AV_SAMPLE_FMT_FLT, dec->sample_rate, &dec->ch_layout,
                                dec->sample_fmt, dec->sample_rate, 0, NULL);
        if (r < 0 || (r = swr_init(cvt)) < 0) st = av_err(path, "sample format converter", r);
    }
    if (!st) {
        *rate = dec->sample_rate;
        *channels = dec->ch_layout.nb_channels;
        st = ffmpeg_pump(fmt, si, dec, cvt, b, path);
    }
    swr_free(&cvt);
    avcodec_free_context(&dec);
    avformat_close_input(&fmt);
    return st;
}

omni_status audio_resample(const float *in, int64_t n, int rate, float **out, int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (rate == AUDIO_SAMPLE_RATE) {
        float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        if (!y) return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
        memcpy(y, in, (size_t)n * sizeof(float));
        *out = y;
        *n_out = n;
        return OMNI_OK;
    }
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    SwrContext *swr = NULL;
    int r = swr_alloc_set_opts2(&swr, &mono, AV_SAMPLE_FMT_FLT, AUDIO_SAMPLE_RATE, &mono, AV_SAMPLE_FMT_FLT, rate, 0,
                                NULL);
    if (r < 0 || (r = swr_init(swr)) < 0) {
        swr_free(&swr);
        return omni_fail(OMNI_ERR_RUNTIME, "audio: cannot create a resampler %d -> %d Hz", rate, AUDIO_SAMPLE_RATE);
    }
    int64_t cap = av_rescale_rnd(n, AUDIO_SAMPLE_RATE, rate, AV_ROUND_UP) + 1024;
    float *y = malloc((size_t)cap * sizeof(float));
    if (!y) {
        swr_free(&swr);
        return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    }
    /* Feed blocks and bound each call's output count by swr_get_out_samples: swr sizes internal buffers by the
     * output count it is given, so passing the whole remaining capacity costs gigabytes on long inputs. */
    int64_t got = 0;
    const int64_t step = 1 << 16;
    for (int64_t i = 0; r >= 0; i += step) {
        int64_t m = n - i < step ? n - i : step;
        if (m < 0) m = 0;
        const uint8_t *ip[1] = {(const uint8_t *)(in + i)};
        uint8_t *op[1] = {(uint8_t *)(y + got)};
        int want = swr_get_out_samples(swr, (int)m);
        if (want > cap - got) want = (int)(cap - got);
        r = swr_convert(swr, op, want, m > 0 ? ip : NULL, (int)m); /* m == 0: flush */
        if (r > 0) got += r;
        if (m == 0) break;
    }
    swr_free(&swr);
    if (r < 0) {
        free(y);
        return omni_fail(OMNI_ERR_RUNTIME, "audio: resampling failed");
    }
    *out = y;
    *n_out = got;
    return OMNI_OK;
}
#else
omni_status audio_resample(const float *in, int64_t n, int rate, float **out, int64_t *n_out) {
    if (rate != AUDIO_SAMPLE_RATE) return audio_resample_sinc(in, n, rate, out, n_out);
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    *n_out = *out ? n : 0;
    if (!*out) return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    memcpy(*out, in, (size_t)n * sizeof(float));
    return OMNI_OK;
}
#endif

/* Existence / emptiness checks with clear messages before any decoder sees the file. */
static omni_status check_file(const char *path) {
    struct stat s;
    if (!path || !*path) return omni_fail(OMNI_ERR_INPUT, "audio: no file name");
    if (stat(path, &s) != 0) return omni_fail(OMNI_ERR_INPUT, "audio '%s': file not found", path);
    if (S_ISDIR(s.st_mode)) return omni_fail(OMNI_ERR_INPUT, "audio '%s': is a directory", path);
    FILE *f = fopen(path, "rb");
    if (!f) return omni_fail(OMNI_ERR_INPUT, "audio '%s': cannot open for reading", path);
    fclose(f);
    if (s.st_size == 0) return omni_fail(OMNI_ERR_INPUT, "audio '%s': empty file", path);
    return OMNI_OK;
}

static omni_status decode_any(const char *path, mono_buf *b, int *rate, int *ch, audio_pcm *out) {
    omni_clear_error();
    omni_status st = decode_sndfile(path, b, rate, ch);
    if (st != OMNI_ERR_UNSUPPORTED) {
        snprintf(out->decoder, sizeof out->decoder, "sndfile");
        return st;
    }
#ifdef OMNI_HAVE_FFMPEG
    snprintf(out->decoder, sizeof out->decoder, "ffmpeg");
    return decode_ffmpeg(path, b, rate, ch);
#else
    return omni_fail(OMNI_ERR_INPUT, "audio '%s': not a recognised audio file (%s; build without FFmpeg)", path,
                     sf_strerror(NULL));
#endif
}

omni_status audio_load(const char *path, audio_pcm *out) {
    memset(out, 0, sizeof *out);
    omni_status st = check_file(path);
    if (st) return st;
    mono_buf b = {0};
    int rate = 0, ch = 0;
    audio_pcm info = {0};
    st = decode_any(path, &b, &rate, &ch, &info);
    if (!st && b.n == 0) st = omni_fail(OMNI_ERR_INPUT, "audio '%s': zero-length audio (no samples)", path);
    float *y = NULL;
    int64_t ny = 0;
    if (!st) st = audio_resample(b.x, b.n, rate, &y, &ny);
    free(b.x);
    if (st) return st;
    info.samples = y;
    info.n = ny;
    info.orig_rate = rate;
    info.orig_channels = ch;
    info.orig_frames = b.n;
    info.duration_s = (double)b.n / rate;
    *out = info;
    return OMNI_OK;
}

void audio_pcm_free(audio_pcm *a) {
    if (!a) return;
    free(a->samples);
    memset(a, 0, sizeof *a);
}
