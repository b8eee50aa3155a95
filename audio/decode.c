/* decode.c - sound file -> 16 kHz mono f32: libsndfile, then FFmpeg (when built with it), then downmix + resample.
 *
 * Every path ends in the same two steps so that results are consistent whatever the container: interleaved f32
 * at the file's rate -> audio_downmix (channel mean) -> audio_resample (libswresample, default filter).
 * Both decoders read through one byte source (a regular file or a memory buffer), never by path, so FFmpeg
 * cannot be made to open other files or URLs (playlists, concat lists). Limits (audio_load_params) are checked
 * from the header before any sample is decoded, and again while decoding (a header may lie). MP3 goes to FFmpeg
 * when it is built in: libsndfile decodes MP3 with libmpg123, which prints to stderr on its own; FFmpeg's log
 * is routed through omni_log (shown with -v only). */
#define _POSIX_C_SOURCE 200809L
#include "audio/audio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sndfile.h>

#ifdef OMNI_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#endif

audio_load_params audio_load_default_params(void) {
    audio_load_params p = {AUDIO_DEFAULT_MAX_SECONDS, AUDIO_MIN_RATE, AUDIO_MAX_RATE, AUDIO_MAX_CHANNELS};
    return p;
}

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
    int64_t max_frames; /* the duration limit at the file's rate (0 until the rate is known) */
    double max_seconds;
    int probe;            /* header only: stop after the limits are checked */
    int64_t header_frames;/* probe: frames the header states (-1: it does not say) */
} mono_buf;

static omni_status mono_reserve(mono_buf *b, int64_t extra) {
    if (b->n + extra <= b->cap) return OMNI_OK;
    int64_t cap = b->cap ? b->cap : 16384; /* 64 KB: 1 s at 16 kHz, then doubling */
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

/* Index of the first NaN/Inf in x[0..n), or n. */
__attribute__((noinline)) /* out of the fuzzers' coverage (tests/fuzz/coverage_ignore.txt) */
static int64_t first_nonfinite(const float *x, int64_t n) {
    int64_t i = 0;
    while (i < n && isfinite(x[i])) i++;
    return i;
}

/* Append `frames` interleaved frames as mono, rejecting NaN/Inf. */
static omni_status mono_append(mono_buf *b, const float *inter, int64_t frames, int channels, const char *path) {
    if (b->max_frames > 0 && b->n + frames > b->max_frames)
        return omni_fail(OMNI_ERR_INPUT, "audio '%s' is longer than the limit of %g s (--max-audio-seconds)", path,
                         b->max_seconds);
    int64_t bad = first_nonfinite(inter, frames * channels);
    if (bad < frames * channels)
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': non-finite sample (NaN/Inf) at frame %lld", path,
                         (long long)(b->n + bad / channels));
    omni_status st = mono_reserve(b, frames);
    if (st) return st;
    audio_downmix(b->x + b->n, inter, frames, channels);
    b->n += frames;
    return OMNI_OK;
}

/* ---- byte source: a regular file (fd) or memory, read by both decoders ------------------------------------ */

typedef struct {
    int fd;               /* -1: memory */
    const uint8_t *data;  /* memory */
    int64_t size, pos;
} src_t;

static int64_t src_read(src_t *s, void *buf, int64_t n) {
    if (n <= 0 || s->pos >= s->size) return 0;
    if (n > s->size - s->pos) n = s->size - s->pos;
    if (s->fd < 0) {
        memcpy(buf, s->data + s->pos, (size_t)n);
        s->pos += n;
        return n;
    }
    int64_t got = 0;
    while (got < n) {
        ssize_t r = pread(s->fd, (char *)buf + got, (size_t)(n - got), (off_t)(s->pos + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += r;
    }
    s->pos += got;
    return got;
}

/* whence: SEEK_SET / SEEK_CUR / SEEK_END; returns the new position or -1. */
static int64_t src_seek(src_t *s, int64_t off, int whence) {
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : s->size;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return -1;
    if (base + off < 0) return -1;
    s->pos = base + off;
    return s->pos;
}

/* Header facts checked against the limits before decoding. frames < 0: the header does not say. */
static omni_status check_header(const char *path, const audio_load_params *p, int rate, int channels,
                                int64_t frames) {
    if (rate < p->min_rate || rate > p->max_rate)
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': sample rate %d Hz outside [%d, %d] (malformed header?)", path,
                         rate, p->min_rate, p->max_rate);
    if (channels < 1 || channels > p->max_channels)
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': %d channels (1 to %d supported)", path, channels, p->max_channels);
    if (frames >= 0 && (double)frames / rate > p->max_seconds)
        return omni_fail(OMNI_ERR_INPUT, "audio '%s' is %.1f s long, over the limit of %g s (--max-audio-seconds)",
                         path, (double)frames / rate, p->max_seconds);
    return OMNI_OK;
}

static void set_frame_limit(mono_buf *b, const audio_load_params *p, int rate) {
    b->max_seconds = p->max_seconds;
    b->max_frames = (int64_t)ceil(p->max_seconds * rate);
}

/* ---- libsndfile ----------------------------------------------------------------------------------------------- */

static sf_count_t vio_len(void *u) { return ((src_t *)u)->size; }
static sf_count_t vio_seek(sf_count_t off, int whence, void *u) { return src_seek(u, off, whence); }
static sf_count_t vio_read(void *buf, sf_count_t n, void *u) { return src_read(u, buf, n); }
static sf_count_t vio_write(const void *buf, sf_count_t n, void *u) { (void)buf, (void)n, (void)u; return 0; }
static sf_count_t vio_tell(void *u) { return ((src_t *)u)->pos; }

/* libsndfile. Returns OMNI_ERR_UNSUPPORTED (no message needed) when it cannot open the file at all. */
static omni_status decode_sndfile(src_t *src, const char *path, const audio_load_params *p, mono_buf *b, int *rate,
                                  int *channels) {
    SF_VIRTUAL_IO vio = {vio_len, vio_seek, vio_read, vio_write, vio_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    src->pos = 0;
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, src);
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
    int64_t frames = info.frames > 0 && info.frames != SF_COUNT_MAX ? (int64_t)info.frames : -1;
    omni_status st = check_header(path, p, info.samplerate, info.channels, frames);
    if (st) {
        sf_close(sf);
        return st;
    }
    set_frame_limit(b, p, info.samplerate);
    *rate = info.samplerate;
    *channels = info.channels;
    if (b->probe) {
        b->header_frames = frames;
        sf_close(sf);
        return OMNI_OK;
    }
    enum { BLOCK = 4096 };
    float *tmp = malloc((size_t)BLOCK * info.channels * sizeof(float));
    if (!tmp) {
        sf_close(sf);
        return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    }
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

/* Convert every frame the decoder has ready to interleaved f32 (same rate, same channels) and append it. The
 * converter was made for the stream's first parameters: a frame with other ones (a stream that changes its
 * channel count, rate or sample format mid-way) is refused rather than misread. tmp_cap counts floats. */
static omni_status drain_decoder(AVCodecContext *dec, AVFrame *fr, SwrContext *cvt, float **tmp, int64_t *tmp_cap,
                                 mono_buf *b, const char *path) {
    const int ch = dec->ch_layout.nb_channels, rate = dec->sample_rate, fmt = dec->sample_fmt;
    for (;;) {
        int r = avcodec_receive_frame(dec, fr);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return OMNI_OK;
        if (r < 0) return av_err(path, "decode error", r);
        if (fr->ch_layout.nb_channels != ch || fr->sample_rate != rate || fr->format != fmt) {
            av_frame_unref(fr);
            return omni_fail(OMNI_ERR_INPUT, "audio '%s': the stream changes its channels, rate or sample format "
                             "mid-way (not supported)", path);
        }
        int64_t need = (int64_t)fr->nb_samples * ch;
        if (need > *tmp_cap) {
            float *t = realloc(*tmp, (size_t)need * sizeof(float));
            if (!t) return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
            *tmp = t;
            *tmp_cap = need;
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
    int64_t tmp_cap = 0;
    int r;
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

/* FFmpeg's log goes through omni_log: its warnings and errors at -v (level 2), nothing otherwise; our own error
 * line says what failed. av_log_set_callback is process-wide state in FFmpeg: set once. */
static void av_log_to_omni(void *avcl, int level, const char *fmt, va_list vl) {
    if (level > AV_LOG_WARNING || omni_log_level() < 2) return;
    char line[1024];
    int prefix = 1;
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &prefix);
    omni_log(2, "ffmpeg: %s%s", line, line[0] && line[strlen(line) - 1] == '\n' ? "" : "\n");
}

static void route_av_log(void) { av_log_set_callback(av_log_to_omni); }

static void ffmpeg_log_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, route_av_log);
}

static int avio_read_cb(void *u, uint8_t *buf, int n) {
    int64_t got = src_read(u, buf, n);
    return got > 0 ? (int)got : AVERROR_EOF;
}

static int64_t avio_seek_cb(void *u, int64_t off, int whence) {
    src_t *s = u;
    if (whence & AVSEEK_SIZE) return s->size;
    return src_seek(s, off, whence & ~AVSEEK_FORCE);
}

/* Demuxers that open further files (playlists, concat lists, image sequences) are refused. */
static int refuse_io_open(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                          AVDictionary **options) {
    (void)s, (void)pb, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}

/* The container's stated duration in seconds, or -1. */
static double ffmpeg_duration(const AVFormatContext *fmt, const AVStream *st) {
    if (st->duration > 0 && st->time_base.den > 0) return st->duration * av_q2d(st->time_base);
    if (fmt->duration > 0) return fmt->duration / (double)AV_TIME_BASE;
    return -1;
}

/* Open the container on our byte source; *avio is freed by the caller (after avformat_close_input). */
static omni_status ffmpeg_open(src_t *src, const char *path, AVFormatContext **fmt, AVIOContext **avio) {
    enum { BUF = 1 << 16 };
    src->pos = 0;
    uint8_t *buf = av_malloc(BUF);
    *fmt = avformat_alloc_context();
    *avio = buf ? avio_alloc_context(buf, BUF, 0, src, avio_read_cb, NULL, avio_seek_cb) : NULL;
    if (!*fmt || !*avio) {
        if (!*avio) av_free(buf);
        avformat_free_context(*fmt);
        *fmt = NULL;
        return omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    }
    (*fmt)->pb = *avio;
    (*fmt)->io_open = refuse_io_open;
    int r = avformat_open_input(fmt, path, NULL, NULL); /* frees *fmt on failure */
    return r < 0 ? av_err(path, "not a recognised audio file", r) : OMNI_OK;
}

static void ffmpeg_close(AVFormatContext **fmt, AVIOContext **avio) {
    avformat_close_input(fmt);
    if (*avio) av_freep(&(*avio)->buffer);
    avio_context_free(avio);
}

static omni_status decode_ffmpeg(src_t *src, const char *path, const audio_load_params *p, mono_buf *b, int *rate,
                                 int *channels) {
    AVFormatContext *fmt = NULL;
    AVIOContext *avio = NULL;
    AVCodecContext *dec = NULL;
    SwrContext *cvt = NULL;
    ffmpeg_log_once();
    omni_status st = ffmpeg_open(src, path, &fmt, &avio);
    const AVCodec *codec = NULL;
    int r, si = -1;
    if (!st && (r = avformat_find_stream_info(fmt, NULL)) < 0) st = av_err(path, "cannot read stream info", r);
    if (!st) si = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
    if (!st && (si < 0 || !codec))
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': no decodable audio stream (format %s)", path,
                       fmt->iformat ? fmt->iformat->name : "?");
    if (!st && !(dec = avcodec_alloc_context3(codec))) st = omni_fail(OMNI_ERR_NOMEM, "audio: out of memory");
    if (!st && (r = avcodec_parameters_to_context(dec, fmt->streams[si]->codecpar)) < 0)
        st = av_err(path, "codec parameters", r);
    if (!st && (r = avcodec_open2(dec, codec, NULL)) < 0) st = av_err(path, "cannot open decoder", r);
    if (!st) {
        double dur = ffmpeg_duration(fmt, fmt->streams[si]);
        int64_t frames = dur >= 0 && dec->sample_rate > 0 ? (int64_t)(dur * dec->sample_rate) : -1;
        st = check_header(path, p, dec->sample_rate, dec->ch_layout.nb_channels, frames);
        b->header_frames = frames;
    }
    if (!st && b->probe) {
        *rate = dec->sample_rate;
        *channels = dec->ch_layout.nb_channels;
        avcodec_free_context(&dec);
        ffmpeg_close(&fmt, &avio);
        return OMNI_OK;
    }
    if (!st) {
        /* Format conversion only (same rate and layout): planar/int -> interleaved f32. */
        r = swr_alloc_set_opts2(&cvt, &dec->ch_layout, AV_SAMPLE_FMT_FLT, dec->sample_rate, &dec->ch_layout,
                                dec->sample_fmt, dec->sample_rate, 0, NULL);
        if (r < 0 || (r = swr_init(cvt)) < 0) st = av_err(path, "sample format converter", r);
    }
    if (!st) {
        set_frame_limit(b, p, dec->sample_rate);
        *rate = dec->sample_rate;
        *channels = dec->ch_layout.nb_channels;
        st = ffmpeg_pump(fmt, si, dec, cvt, b, path);
    }
    swr_free(&cvt);
    avcodec_free_context(&dec);
    ffmpeg_close(&fmt, &avio);
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
    ffmpeg_log_once();
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

/* Open `path` as a byte source: a regular, non-empty file; devices, pipes and directories are refused with a
 * message that says so (a device has no size to check limits against). */
static omni_status open_file(const char *path, src_t *src) {
    struct stat s;
    src->fd = -1;
    if (!path || !*path) return omni_fail(OMNI_ERR_INPUT, "audio: no file name");
    if (stat(path, &s) != 0) return omni_fail(OMNI_ERR_INPUT, "audio '%s': %s", path, strerror(errno));
    if (S_ISDIR(s.st_mode)) return omni_fail(OMNI_ERR_INPUT, "audio '%s': is a directory", path);
    if (!S_ISREG(s.st_mode))
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': not a regular file (devices and pipes are not supported)", path);
    if (s.st_size == 0) return omni_fail(OMNI_ERR_INPUT, "audio '%s': empty file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return omni_fail(OMNI_ERR_INPUT, "audio '%s': cannot open for reading: %s", path, strerror(errno));
    struct stat fs;
    if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode)) {
        close(fd);
        return omni_fail(OMNI_ERR_INPUT, "audio '%s': not a regular file", path);
    }
    src->fd = fd;
    src->size = fs.st_size;
    src->pos = 0;
    return OMNI_OK;
}

/* MP3 as libsndfile recognises it (an ID3 tag, or an MPEG frame sync at the start). */
static int looks_mp3(src_t *src) {
    uint8_t h[3] = {0};
    src->pos = 0;
    int64_t n = src_read(src, h, 3);
    src->pos = 0;
    return (n >= 3 && !memcmp(h, "ID3", 3)) || (n >= 2 && h[0] == 0xFF && (h[1] & 0xE0) == 0xE0);
}

static omni_status decode_any(src_t *src, const char *path, const audio_load_params *p, mono_buf *b, int *rate,
                              int *ch, audio_pcm *out) {
    omni_clear_error();
    omni_status st = OMNI_ERR_UNSUPPORTED;
    if (!audio_has_ffmpeg() || !looks_mp3(src)) st = decode_sndfile(src, path, p, b, rate, ch);
    if (st != OMNI_ERR_UNSUPPORTED) {
        snprintf(out->decoder, sizeof out->decoder, "sndfile");
        return st;
    }
#ifdef OMNI_HAVE_FFMPEG
    snprintf(out->decoder, sizeof out->decoder, "ffmpeg");
    return decode_ffmpeg(src, path, p, b, rate, ch);
#else
    return omni_fail(OMNI_ERR_INPUT, "audio '%s': not a recognised audio file (%s; build without FFmpeg)", path,
                     sf_strerror(NULL));
#endif
}

static omni_status load_source(src_t *src, const char *path, const audio_load_params *p, audio_pcm *out) {
    audio_load_params def = audio_load_default_params();
    if (!p) p = &def;
    mono_buf b = {0};
    int rate = 0, ch = 0;
    audio_pcm info = {0};
    omni_status st = decode_any(src, path, p, &b, &rate, &ch, &info);
    if (!st && b.n == 0)
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': zero-length audio (no samples decoded: an empty, truncated or "
                       "corrupt file)", path);
    float *y = NULL;
    int64_t ny = 0;
    if (!st) st = audio_resample(b.x, b.n, rate, &y, &ny);
    free(b.x);
    if (!st && ny == 0) { /* a few samples at a high rate resample to none (found by fuzz_audio) */
        free(y);
        st = omni_fail(OMNI_ERR_INPUT, "audio '%s': too short (%lld samples at %d Hz, none at 16 kHz)", path,
                       (long long)b.n, rate);
    }
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

omni_status audio_load_ex(const char *path, const audio_load_params *p, audio_pcm *out) {
    memset(out, 0, sizeof *out);
    src_t src;
    omni_status st = open_file(path, &src);
    if (st) return st;
    st = load_source(&src, path, p, out);
    close(src.fd);
    return st;
}

omni_status audio_load(const char *path, audio_pcm *out) { return audio_load_ex(path, NULL, out); }

omni_status audio_probe(const char *path, const audio_load_params *p, audio_info *out) {
    memset(out, 0, sizeof *out);
    audio_load_params def = audio_load_default_params();
    if (!p) p = &def;
    src_t src;
    omni_status st = open_file(path, &src);
    if (st) return st;
    mono_buf b = {0};
    b.probe = 1;
    audio_pcm dec = {0};
    st = decode_any(&src, path, p, &b, &out->rate, &out->channels, &dec);
    close(src.fd);
    if (st) return st;
    out->frames = b.header_frames;
    out->duration_s = b.header_frames >= 0 ? (double)b.header_frames / out->rate : -1;
    snprintf(out->decoder, sizeof out->decoder, "%s", dec.decoder);
    return OMNI_OK;
}

int64_t audio_resampled_length(int64_t frames, int rate) {
    if (frames <= 0 || rate <= 0) return 0;
    return rate == AUDIO_SAMPLE_RATE ? frames : (frames * AUDIO_SAMPLE_RATE + rate - 1) / rate;
}

omni_status audio_load_memory(const void *data, size_t size, const char *name, const audio_load_params *p,
                              audio_pcm *out) {
    memset(out, 0, sizeof *out);
    if (!name) name = "<memory>";
    if (!data || size == 0) return omni_fail(OMNI_ERR_INPUT, "audio '%s': empty file", name);
    src_t src = {-1, data, (int64_t)size, 0};
    return load_source(&src, name, p, out);
}

void audio_pcm_free(audio_pcm *a) {
    if (!a) return;
    free(a->samples);
    memset(a, 0, sizeof *a);
}
