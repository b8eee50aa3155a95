/* test_cli_inputs.c - hostile media through the program (issue 15 items 4, 11, 13): audio limits checked from the
 * header before decoding (10 hours of silence, a WAV declaring 1 Hz), --max-audio-seconds, devices / pipes /
 * directories given as audio or image files (a clear line, not "empty file" or "size 9223372036854775807"),
 * --max-image-mpixels, and library noise (mpg123, FFmpeg) kept off stderr: one error line, FFmpeg's lines only
 * with -v. Runs are killed after 60 s so a regression cannot eat the machine's memory. */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

#define AUD OMNI_FIXTURES "/audio"
#define OMNI_MODEL AUD "/omni-a"
#define VIS OMNI_FIXTURES "/vision"
#define GUARD "timeout -s KILL 60"

static char g_tmp[4096];

static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    double t0 = omni_time_ms();
    cli_result r = cli_run_prefix(GUARD, "%s", args);
    CHECK(r.code == code, "%s: exit %d, want %d (stderr: %s)", what, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1 && strstr(r.err, needle), "%s: want one stderr line with '%s':\n%s", what, needle, r.err);
    CHECK(omni_time_ms() - t0 < 20000, "%s: took %.0f ms", what, omni_time_ms() - t0);
    cli_free(&r);
}

static void le16(uint8_t *p, unsigned v) { p[0] = v & 255, p[1] = (v >> 8) & 255; }
static void le32(uint8_t *p, uint32_t v) { le16(p, v & 0xffff), le16(p + 2, v >> 16); }

/* A 16-bit mono PCM WAV header for `data_bytes` of samples at `rate`; the file is extended to its full size
 * without writing the data (a sparse file: 10 hours cost no disk). */
static void wav_file(const char *path, uint32_t rate, uint32_t data_bytes, int sparse) {
    uint8_t h[44] = {0};
    memcpy(h, "RIFF", 4), le32(h + 4, 36 + data_bytes), memcpy(h + 8, "WAVEfmt ", 8), le32(h + 16, 16);
    le16(h + 20, 1), le16(h + 22, 1), le32(h + 24, rate), le32(h + 28, rate * 2), le16(h + 32, 2), le16(h + 34, 16);
    memcpy(h + 36, "data", 4), le32(h + 40, data_bytes);
    FILE *f = fopen(path, "wb");
    fwrite(h, 1, sizeof h, f);
    if (!sparse) {
        static uint8_t zero[4096];
        for (uint32_t o = 0; o < data_bytes; o += sizeof zero)
            fwrite(zero, 1, data_bytes - o < sizeof zero ? data_bytes - o : sizeof zero, f);
    }
    fclose(f);
    if (sparse && truncate(path, 44 + (off_t)data_bytes) != 0) CHECK(0, "truncate %s", path);
}

static void audio_limits(void) {
    char p[4200], args[9000];
    snprintf(p, sizeof p, "%s/ten_hours.wav", g_tmp);
    wav_file(p, 8000, 8000u * 2 * 36000, 1); /* 10 h of 8 kHz silence: 576 MB declared */
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, p);
    expect_fail("10 hours of audio", 2, "is 36000.0 s long, over the limit of 3600 s", args);
    snprintf(p, sizeof p, "%s/one_hz.wav", g_tmp);
    wav_file(p, 1, 32000, 0); /* 32 KB declaring 1 Hz: 16000 s, 256M samples once resampled */
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, p);
    expect_fail("1 Hz WAV", 2, "sample rate 1 Hz outside [1000, 768000]", args);
    snprintf(p, sizeof p, "%s/huge_rate.wav", g_tmp);
    wav_file(p, 2000000000u, 32000, 0); /* used to fail in the resampler with a runtime error (exit 4) */
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, p);
    expect_fail("2 GHz WAV", 2, "sample rate 2000000000 Hz outside", args);
    snprintf(args, sizeof args, "ask -m %s --audio %s/clips/tone_1s.wav --max-audio-seconds 0.5 hi", OMNI_MODEL, AUD);
    expect_fail("--max-audio-seconds", 2, "over the limit of 0.5 s", args);
    snprintf(args, sizeof args, "ask -m %s --audio %s/clips/tone_3p3s.mp3 --max-audio-seconds 2 hi", OMNI_MODEL, AUD);
    expect_fail("--max-audio-seconds (mp3, FFmpeg)", 2, "over the limit of 2 s", args);
}

static void special_files(void) {
    char args[9000];
    snprintf(args, sizeof args, "ask -m %s --audio /dev/zero hi", OMNI_MODEL);
    expect_fail("audio /dev/zero", 2, "not a regular file", args);
    char fifo[4200]; /* a named pipe: refused from stat(), never opened (opening it would wait for a writer) */
    snprintf(fifo, sizeof fifo, "%s/pipe.wav", g_tmp);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, fifo);
    expect_fail("audio from a pipe", 2, "not a regular file", args);
    snprintf(args, sizeof args, "ask -m %s --audio /dev/stdin hi", OMNI_MODEL); /* stdin is /dev/null here */
    expect_fail("audio /dev/stdin", 2, "not a regular file", args);
    snprintf(args, sizeof args, "ask -m %s --audio /tmp hi", OMNI_MODEL);
    expect_fail("audio directory", 2, "is a directory", args);
    snprintf(args, sizeof args, "generate -m %s -p hi --image /tmp", OMNI_MODEL);
    expect_fail("image directory", 2, "/tmp: is a directory", args);
    snprintf(args, sizeof args, "generate -m %s -p hi --image /dev/zero", OMNI_MODEL);
    expect_fail("image /dev/zero", 2, "not a regular file", args);
    snprintf(args, sizeof args, "generate -m %s -p hi --image %s/a_exact.png --max-image-mpixels 0.001", OMNI_MODEL, VIS);
    expect_fail("--max-image-mpixels", 2, "128x96 = 12288 pixels, over the limit of 1000 (--max-image-mpixels)",
                args); /* the message names the option that sets the limit, as the audio and text limits do */
}

/* MP3-looking garbage: libmpg123 (inside libsndfile) used to print "Note: Illegal Audio-MPEG-Header" lines and
 * FFmpeg "[mp3 @ ...]" lines around our error. Only our line now; FFmpeg's with -v. */
static void library_noise(void) {
    char p[4200], args[9000];
    snprintf(p, sizeof p, "%s/id3.mp3", g_tmp);
    write_all(p, "ID3\x03\x00\x00\x00\x00\x00\x10garbage-garbage-garbage", 33);
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, p);
    expect_fail("ID3 + garbage", 2, "id3.mp3", args);
    size_t n = 0;
    char *mp3 = omni_read_file(AUD "/clips/tone_3p3s.mp3", &n);
    CHECK(mp3 && n > 3000, "read mp3");
    if (!mp3) return;
    for (size_t i = 200; i < n; i++) mp3[i] = (char)(i * 2654435761u >> 13); /* frames after 200 bytes broken */
    snprintf(p, sizeof p, "%s/broken.mp3", g_tmp);
    write_all(p, mp3, n);
    snprintf(args, sizeof args, "ask -m %s --audio %s hi -n 1 --no-perf", OMNI_MODEL, p);
    cli_result r = cli_run_prefix(GUARD, "%s", args);
    CHECK(!strstr(r.err, "Note:") && !strstr(r.err, "Illegal") && !strstr(r.err, "[mp3") && !strstr(r.err, "@ 0x"),
          "library lines on stderr:\n%s", r.err);
    CHECK(r.code == 2 ? cli_lines(r.err) == 1 : r.code == 0, "broken mp3: exit %d\n%s", r.code, r.err);
    cli_free(&r);
    free(mp3);
    snprintf(p, sizeof p, "%s/id3.mp3", g_tmp);
    snprintf(args, sizeof args, "ask -m %s --audio %s hi -v", OMNI_MODEL, p);
    r = cli_run_prefix(GUARD, "%s", args);
    CHECK(r.code == 2 && strstr(r.err, "ffmpeg: ") && strstr(r.err, "error: audio"), "-v shows FFmpeg's lines:\n%s",
          r.err);
    cli_free(&r);
}

/* Samples the log-mel cannot take name the file and exit 2: finite float samples of 1e30 overflowed the power
 * spectrum (Inf mel, NaN logits: exit 4 blaming the weights), 100 samples were "log-mel: audio too short" with no
 * file named. */
static void audio_values(void) {
    char p[4200], args[9000];
    uint8_t h[44] = {0};
    const uint32_t n = 16000;
    memcpy(h, "RIFF", 4), le32(h + 4, 36 + 4 * n), memcpy(h + 8, "WAVEfmt ", 8), le32(h + 16, 16);
    le16(h + 20, 3), le16(h + 22, 1), le32(h + 24, 16000), le32(h + 28, 64000), le16(h + 32, 4), le16(h + 34, 32);
    memcpy(h + 36, "data", 4), le32(h + 40, 4 * n);
    snprintf(p, sizeof p, "%s/loud.wav", g_tmp);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL, "write %s", p);
    if (!f) return;
    fwrite(h, 1, sizeof h, f);
    for (uint32_t i = 0; i < n; i++) {
        float v = (i % 2 ? 1e30f : -1e30f);
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, p);
    expect_fail("float samples of 1e30", 2, "loud.wav': log-mel: the spectrum overflows (sample values up to 1e+30", args);
    snprintf(p, sizeof p, "%s/short.wav", g_tmp);
    wav_file(p, 16000, 200, 0); /* 100 samples */
    snprintf(args, sizeof args, "ask -m %s --audio %s hi", OMNI_MODEL, p);
    expect_fail("100 samples", 2, "short.wav': log-mel: audio too short (100 samples", args);
}

/* Sound and video files given as --image say what they are (the fixture MP4 was "unsupported format HEIF/AVIF", a
 * WAV "not a recognized image file"). */
static void media_as_image(void) {
    static const struct { const char *file, *needle; } cs[] = {
        {"video_1s.mp4", "video_1s.mp4' is a video (MP4/MOV), not an image: video input is not supported"},
        {"tone_1s.webm", "tone_1s.webm' is a video (WebM/Matroska), not an image"},
        {"tone_1s.wav", "tone_1s.wav' is audio (WAV), not an image (use --audio for sound files)"},
        {"tone_3p3s.m4a", "tone_3p3s.m4a' is audio (M4A/AAC), not an image"},
        {"tone_3p3s.mp3", "tone_3p3s.mp3' is audio (MP3/AAC), not an image"},
    };
    char args[9000];
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        snprintf(args, sizeof args, "generate -m %s -p hi --image %s/clips/%s", OMNI_MODEL, AUD, cs[i].file);
        expect_fail(cs[i].file, 2, cs[i].needle, args);
    }
}

/* Several audio files of one prompt are encoded as one batch padded to the longest clip: the 6437-sample clip then
 * takes 41 mel frames, 6 tokens (5 alone). -c is checked from the headers before any encoder runs, so the count
 * must be the batch's: with -c = the prompt's real length, generate refuses it (no room for an answer) and chat
 * refuses the message, both without encoding anything. Counting each clip alone, 64 < 65 passed the check, both
 * clips were encoded (two "audio:" lines each), and only then was the prompt refused. */
static void multi_clip_context(void) {
    char clips[2][4200], args[9000], script[4200];
    snprintf(clips[0], sizeof clips[0], "%s/clips/tone_3p3s.wav", AUD);
    snprintf(clips[1], sizeof clips[1], "%s/clips/tone_0p402s.wav", AUD);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 1 --temp 0 --audio %s --audio %s", OMNI_MODEL, clips[0],
             clips[1]);
    cli_result r = cli_run_prefix(GUARD, "%s", args);
    const char *pe = strstr(r.err, "prompt eval time");
    int n = 0;
    CHECK(r.code == 0 && pe && sscanf(strchr(pe, '/') + 1, "%d tokens", &n) == 1 && n > 48,
          "two clips: exit %d, prompt length %d:\n%s", r.code, n, r.err);
    cli_free(&r);
    char full[9100], want[128];
    snprintf(full, sizeof full, "%s -c %d", args, n);
    snprintf(want, sizeof want, "prompt (%d tokens incl. media) fills the context (%d)", n, n);
    expect_fail("two clips, -c = prompt length", 1, want, full);
    snprintf(script, sizeof script, "%s/chat_two_clips.txt", g_tmp);
    FILE *f = fopen(script, "w");
    CHECK(f != NULL, "write %s", script);
    if (!f) return;
    fprintf(f, "/audio %s\n/audio %s\nhi\n", clips[0], clips[1]);
    fclose(f);
    snprintf(args, sizeof args, "chat -m %s -c %d -n 1 --temp 0 --no-perf < %s", OMNI_MODEL, n, script);
    r = cli_run_prefix(GUARD, "%s", args);
    snprintf(want, sizeof want, "error: message (%d tokens incl. media) does not fit the context: 0 of %d", n, n);
    CHECK(strstr(r.err, want) && !strstr(r.err, "encoded in"), "chat, two clips, -c %d: want '%s' before any "
          "encoding:\n%s", n, want, r.err);
    cli_free(&r);
}

int main(void) {
    char *t = make_tmpdir();
    snprintf(g_tmp, sizeof g_tmp, "%s", t);
    free(t);
    audio_limits();
    special_files();
    library_noise();
    multi_clip_context();
    media_as_image();
    audio_values();
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    return check_exit();
}
