/* test_cli_demo.c - `omni demo --script` headless (SDL's offscreen video driver, software renderer) on the Omni
 * fixture (images and audio, random weights). One case per CTest (argv[1]; none: all):
 *  - read: the text of an image on both panes: the PNG has the requested size and is not blank; the two answers
 *    the demo prints are exactly `omni generate --kv bf16 --compare int2` for the same request (and its compare
 *    line: KV bytes, common prefix, KL, top-1 - the same numbers); each pane's text area has ink after the run
 *    and none before it; B's text carries divergence marks exactly when its top-1 agreement is below 100%;
 *    frame times were measured while both panes generated: p50 and UI thread CPU p95 <= 33 ms, and wall p95 <= 33 ms
 *    unless the load average exceeds the CPUs (then printed only);
 *  - speech: the embedded speech model answers "Ask about the audio" exactly as the engine does;
 *  - ocr: the embedded OCR model reads assets/samples/receipt.png with "Read the text" exactly as the engine does;
 *  - close: the window closed mid-generation with audio playing: a message, exit 0, partial answers printed;
 *  - corrupt: a corrupt PNG, a text file, an empty file, a cut WAV and a folder dropped: a red message each in the
 *    status bar, then the window still answers about a good image;
 *  - big: a 50 MB image dropped: the window keeps drawing while it is decoded, a message, an answer about it;
 *  - ui: typing (UTF-8, CJK), an input method's composition, paste, the KV format selector, the file browser,
 *    play, help, zoom, resize, Enter / Esc / Ctrl+1 / Stop / Ctrl+L, the model selector (the `state` lines);
 *  - switch: a model without a vision tower (a text fixture's copy): "Read the text" switches to one that has it;
 *  - bad: an unknown script command (exit 1, its line), a missing script (2), --screenshot without --script
 *    (1), an unknown KV format (1), `wait done` with nothing running (4). */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stb_image.h>

#include "check.h"
#include "cli_util.h"

#define OMNI_A OMNI_FIXTURES "/audio/omni-a"
#define TEXT_MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"
#define IMAGE OMNI_FIXTURES "/vision/a_exact.png"
#define AUDIO OMNI_FIXTURES "/audio/clips/tone_1s.wav"
#define BUDGET "--image-min-tokens 64 --image-max-tokens 256"
#define SAMPLES OMNI_SOURCE_DIR "/assets/samples"
#define EMBEDDED OMNI_SOURCE_DIR "/assets/models"
#define W 1100
#define H 720

static char *g_tmp;

static void write_file(const char *name, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", g_tmp, name);
    write_all(path, text, strlen(text));
}

/* A 24-bit BMP of 4096 x 4096 pixels: 50 331 702 bytes. */
static void write_big_bmp(const char *path) {
    const int w = 4096, h = 4096, row = w * 3;
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint8_t hdr[54] = {'B', 'M'};
    uint32_t v[] = {54 + (uint32_t)row * h, 0, 54, 40, (uint32_t)w, (uint32_t)h};
    memcpy(hdr + 2, &v[0], 4), memcpy(hdr + 10, &v[2], 4), memcpy(hdr + 14, &v[3], 4);
    memcpy(hdr + 18, &v[4], 4), memcpy(hdr + 22, &v[5], 4);
    hdr[26] = 1, hdr[28] = 24;
    uint32_t img = (uint32_t)row * h;
    memcpy(hdr + 34, &img, 4);
    fwrite(hdr, 1, sizeof hdr, f);
    uint8_t *line = malloc((size_t)row);
    for (int y = 0; line && y < h; y++) {
        for (int x = 0; x < row; x++) line[x] = (uint8_t)((x * 7 + y * 3) & 255);
        fwrite(line, 1, (size_t)row, f);
    }
    free(line);
    fclose(f);
}

typedef struct {
    double p50, p95, mx, cpu50, cpu95;
    int n;
} frames;

static frames parse_frames(const char *err) {
    frames f = {0, 0, 0, 0, 0, 0};
    const char *l = strstr(err, "demo: frame time while both panes generated: ");
    if (l && sscanf(l, "demo: frame time while both panes generated: p50 %lf ms, p95 %lf ms, max %lf ms over %d",
                    &f.p50, &f.p95, &f.mx, &f.n) == 4) {
        const char *c = strstr(l, "UI thread CPU per frame p50 ");
        if (c) sscanf(c, "UI thread CPU per frame p50 %lf ms, p95 %lf ms", &f.cpu50, &f.cpu95);
    }
    return f;
}

/* The pane's text rectangle as the demo reports it. */
static int pane_rect(const char *err, char pane, int *r) {
    char key[64];
    snprintf(key, sizeof key, "demo: pane %c text area ", pane);
    const char *l = strstr(err, key);
    return l && sscanf(l + strlen(key), "%d %d %d %d", &r[0], &r[1], &r[2], &r[3]) == 4 ? 0 : -1;
}

/* Pixels in r darker than the panel (text), and pixels of exactly the colour B's divergence marks use. */
static void count_ink(const uint8_t *px, int w, const int *r, int *dark, int *marked) {
    *dark = *marked = 0;
    for (int y = r[1]; y < r[1] + r[3] && y < H; y++)
        for (int x = r[0]; x < r[0] + r[2] && x < w; x++) {
            const uint8_t *p = px + ((size_t)y * w + x) * 4;
            *dark += p[0] + p[1] + p[2] < 300;
            *marked += p[0] == 255 && p[1] == 205 && p[2] == 200;
        }
}

static int distinct_colours(const uint8_t *px, int n) {
    static uint8_t seen[1 << 21];
    memset(seen, 0, sizeof seen);
    int k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t c = (uint32_t)px[4 * i] << 16 | (uint32_t)px[4 * i + 1] << 8 | px[4 * i + 2];
        if (!(seen[c >> 3] & 1 << (c & 7))) seen[c >> 3] |= (uint8_t)(1 << (c & 7)), k++;
    }
    return k;
}

/* One scripted run: MEDIA dropped on the window, PRESET ("read" or "audio", whose prompt is PROMPT) on both panes,
 * with DEMO_OPTS (the model: -m DIR, or none for the default model). Checks the PNG (size, not blank, each pane's
 * text area empty before the run and inked after, B's divergence marks exactly when its top-1 agreement is below
 * 100%), that the two answers and the compare line are exactly `omni generate -m MODEL --temp 0 --kv bf16 --compare
 * int2` for the same request (GEN_MEDIA: --image or --audio, GEN_OPTS its other options), the frame times while both
 * panes generated, and when EXPECT_A is given that pane A answered exactly it. */
typedef struct {
    const char *name, *media, *preset, *prompt, *demo_opts, *model, *gen_media, *gen_opts, *expect_a;
    int min_frames; /* frames drawn while both panes generated, at least; 0: frame times not checked (a short
                       answer may come whole between two frames) */
} scripted;

/* need: the fewest dark pixels each pane's text must have after the run (about 10 per character of the answer). */
static void check_panes(const char *shot, const char *before, const char *err, double agree, int need) {
    int w = 0, h = 0, c = 0, w0 = 0, h0 = 0;
    uint8_t *px = stbi_load(shot, &w, &h, &c, 4), *px0 = stbi_load(before, &w0, &h0, &c, 4);
    CHECK(px && w == W && h == H, "screenshot %s: %dx%d, want %dx%d", shot, w, h, W, H);
    CHECK(px0 && w0 == W && h0 == H, "screenshot before the run: %dx%d", w0, h0);
    if (px && px0 && w == W && h == H && w0 == W && h0 == H) {
        int colours = distinct_colours(px, W * H);
        CHECK(colours > 200, "the screenshot looks blank: %d colours", colours);
        for (char k = 'A'; k <= 'B'; k++) {
            int r[4], ink, ink0, marks, marks0;
            CHECK(pane_rect(err, k, r) == 0 && r[2] > 100 && r[3] > 50, "pane %c: no text area reported", k);
            count_ink(px, W, r, &ink, &marks);
            count_ink(px0, W, r, &ink0, &marks0);
            CHECK(ink0 == 0 && ink > need, "pane %c: %d text pixels before the run, %d after (want > %d)", k, ink0, ink,
                  need);
            if (k == 'B')
                CHECK((marks > 0) == (agree < 100), "pane B: %d marked pixels at %.2f%% agreement", marks, agree);
            if (k == 'A') CHECK(marks == 0, "pane A has no marks, got %d", marks);
        }
    }
    stbi_image_free(px);
    stbi_image_free(px0);
}

static void test_scripted(const scripted *t) {
    char script[4096], before[4096], shot[4096], name[256];
    snprintf(before, sizeof before, "%s/%s-before.png", g_tmp, t->name);
    snprintf(shot, sizeof shot, "%s/%s.png", g_tmp, t->name);
    char text[8192];
    snprintf(text, sizeof text,
             "# %s: preset '%s' on both panes\n"
             "wait model\n"
             "drop %s\n"
             "wait media\n"
             "screenshot %s\n"
             "preset %s\n"
             "wait done 600\n",
             t->name, t->preset, t->media, before, t->preset);
    snprintf(name, sizeof name, "%s.demo", t->name);
    write_file(name, text, script, sizeof script);
    cli_result d = cli_run("demo %s --script %s --screenshot %s --size %dx%d", t->demo_opts, script, shot, W, H);
    CHECK(d.code == 0, "%s: demo: exit %d\n%s", t->name, d.code, d.err);
    cli_result g = cli_run("generate -m %s %s %s -p '%s' --temp 0 --kv bf16 --compare int2 %s", t->model, t->gen_media,
                           t->media, t->prompt, t->gen_opts);
    CHECK(g.code == 0, "%s: generate: exit %d %s", t->name, g.code, g.err);
    CHECK(d.out && g.out && strlen(d.out) > 4 && !strcmp(d.out, g.out),
          "%s: the demo's answers differ from the engine's:\n--- demo\n%s\n--- generate --compare\n%s", t->name,
          d.out, g.out);
    if (t->expect_a) {
        size_t n = strlen(t->expect_a);
        CHECK(d.out && !strncmp(d.out, t->expect_a, n) && d.out[n] == '\n', "%s: pane A answered '%.200s', want '%s'",
              t->name, d.out ? d.out : "", t->expect_a);
    }
    const char *dl = strstr(d.err, "compare: "), *gl = strstr(g.err, "compare: ");
    CHECK(dl && gl && !strncmp(dl, gl, strcspn(gl, "\n")), "%s: compare lines differ:\n%.300s\n%.300s", t->name,
          dl ? dl : "-", gl ? gl : "-");
    double agree = 100;
    if (gl) sscanf(strstr(gl, "top-1 agreement ") ? strstr(gl, "top-1 agreement ") : "", "top-1 agreement %lf", &agree);
    frames f = parse_frames(d.err);
    printf("%s: answers '%.*s' / ...; frames while both panes generated: %d, p50 %.2f ms, p95 %.2f ms, max %.2f ms; "
           "UI CPU p50 %.2f p95 %.2f ms\n", t->name, d.out ? (int)strcspn(d.out, "\n") : 0, d.out ? d.out : "", f.n,
           f.p50, f.p95, f.mx, f.cpu50, f.cpu95);
    if (t->min_frames)
        CHECK(f.n >= t->min_frames && f.p50 > 0 && f.p50 <= 33 && f.cpu95 > 0 && f.cpu95 <= 33, "%s: frame times: %d "
              "frames (want >= %d), p50 %.2f, CPU p95 %.2f ms (budget 33 ms)", t->name, f.n, t->min_frames, f.p50,
              f.cpu95);
#ifndef __SANITIZE_ADDRESS__ /* the budget is the real build's (sanitizers make every frame several times slower) */
    /* Wall time per frame measures the UI only while the machine has a free core for it: with more runnable work
     * than CPUs (load 13-20 on 2 cores while several builds run) p95 measured the scheduler (38-126 ms) while the UI
     * thread's own CPU time per frame stayed ~2 ms. The CPU check above always holds; the wall check then waits. */
    double load = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(&load, 1) != 1) load = 0;
    if (t->min_frames && load > (double)(ncpu > 0 ? ncpu : 1))
        printf("%s: frame time p95 %.2f ms not held to 33 ms: load average %.1f on %ld CPUs\n", t->name, f.p95, load,
               ncpu);
    else if (t->min_frames)
        CHECK(f.p95 > 0 && f.p95 <= 33, "%s: frame time p95 %.2f ms (budget 33 ms)", t->name, f.p95);
#endif
    int chars = d.out ? (int)strcspn(d.out, "\n") : 0;
    check_panes(shot, before, d.err, agree, chars * 10 < 500 ? chars * 10 : 500);
    cli_free(&d);
    cli_free(&g);
}

/* The fixture (random weights) reads the text of an image: long answers that diverge. */
static void test_read(void) {
    const scripted t = {"read", IMAGE, "read", "Read all the text in the image.", "-m " OMNI_A " -n 400 -c 8192 " BUDGET,
                        OMNI_A, "--image", "-n 400 -c 8192 " BUDGET, NULL, 3};
    test_scripted(&t);
}

/* The embedded speech model (the default model that hears audio, no -m) answers "Ask about the audio" on a sample
 * clip: the sample's transcript, on both panes, as the engine answers it. */
static void test_embedded_audio(void) {
    if (access(EMBEDDED "/speech/config.json", R_OK)) {
        printf("SKIP embedded audio: no %s/speech\n", EMBEDDED);
        return;
    }
    const scripted t = {"speech", SAMPLES "/call.wav", "audio", "Transcribe the audio.", "-n 64", EMBEDDED "/speech",
                        "--audio", "-n 64", "please call me at 415", 0};
    test_scripted(&t);
}

/* Runs `omni demo OPTS --script` with the script text (named NAME.demo) from directory CWD (NULL: the test's). */
static cli_result run_script(const char *name, const char *text, const char *cwd, const char *opts) {
    char script[4096], file[300];
    snprintf(file, sizeof file, "%s.demo", name);
    write_file(file, text, script, sizeof script);
    char prefix[4200] = "";
    if (cwd) snprintf(prefix, sizeof prefix, "cd '%s' &&", cwd);
    return cli_run_prefix(prefix, "demo %s --script %s", opts, script);
}

/* The value of KEY in the demo's n-th (0-based) `state` line ("demo: state ... KEY=VALUE ..."), [bracketed] values
 * without brackets; "" when missing. */
static const char *state_of(const char *err, int n, const char *key) {
    static char val[2048];
    val[0] = 0;
    const char *l = err;
    for (int i = 0; l && (l = strstr(l, "demo: state ")) && i < n; i++) l += 12;
    if (!l) return val;
    const char *end = strchr(l, '\n') ? strchr(l, '\n') : l + strlen(l);
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *k = strstr(l, pat);
    if (!k || k > end) return val;
    k += strlen(pat);
    const char *e = *k == '[' ? strstr(k, "] ") : k + strcspn(k, " \n");
    if (*k == '[') k++;
    if (!e || e > end) e = end;
    snprintf(val, sizeof val, "%.*s", (int)(e - k), k);
    return val;
}

/* Pixels of colour (r, g, b) in rows y0..y1 (negative: from the bottom); r < 0: every reddish pixel. */
static int count_colour(const char *png, int y0, int y1, int r, int g, int b, int *w_out, int *h_out) {
    int w = 0, h = 0, c = 0, n = 0;
    uint8_t *px = stbi_load(png, &w, &h, &c, 4);
    for (int y = y0 < 0 ? h + y0 : y0; px && y < (y1 <= 0 ? h + y1 : y1) && y < h; y++)
        for (int x = 0; x < w; x++) {
            const uint8_t *p = px + ((size_t)y * w + x) * 4;
            n += r < 0 ? p[0] >= 120 && p[0] - p[1] >= 80 && p[0] - p[2] >= 80 /* reddish, anti-aliased too */
                       : p[0] == r && p[1] == g && p[2] == b;
        }
    if (w_out) *w_out = w, *h_out = h;
    stbi_image_free(px);
    return n;
}

/* Closing the window mid-generation (with audio playing): a message, exit 0, the partial answers printed. */
/* The embedded OCR model (the default model that reads images, no -m) reads a committed sample with "Read the
 * text": the sample's text, on both panes, as the engine answers it. */
static void test_embedded_ocr(void) {
    if (access(EMBEDDED "/ocr/config.json", R_OK)) {
        printf("SKIP embedded OCR: no %s/ocr\n", EMBEDDED);
        return;
    }
    const scripted t = {"ocr", SAMPLES "/receipt.png", "read", "Read all the text in the image.", "-n 64",
                        EMBEDDED "/ocr", "--image", "-n 64", "Total: $38.50 Date: 2026-11-30", 0};
    test_scripted(&t);
}

static void test_close(void) {
    char text[8192];
    snprintf(text, sizeof text,
             "wait model\ndrop %s\nwait media\npreset audio\nwait tokens 4 300\nclick play\nstate\nclose\n",
             OMNI_FIXTURES "/audio/clips/tone_3p3s.wav");
    cli_result d = run_script("close", text, NULL, "-m " OMNI_A " -n 5000 -c 8192");
    CHECK(d.code == 0, "close: exit %d\n%s", d.code, d.err);
    CHECK(!strcmp(state_of(d.err, 0, "generating"), "1") && !strcmp(state_of(d.err, 0, "playing"), "1"),
          "close: not generating / playing when closed:\n%s", d.err);
    CHECK(strstr(d.err, "closing the window: both answers stopped (A "), "close: no message:\n%s", d.err);
    CHECK(strstr(d.err, "audio 'tone_3p3s.wav'") && strstr(d.err, "playing 3.3 s of audio"),
          "no message for the audio file or its playback:\n%s", d.err);
    int lines = 0; /* A's and B's partial answers, one line each at least */
    for (const char *p = d.out; p && *p; p++) lines += *p == '\n';
    CHECK(lines >= 2 && strstr(d.err, "==> B: int2 <=="), "closed mid-generation: %d lines\n%s", lines, d.out);
    cli_free(&d);
}

/* Bad files dropped on the window: each gets a message (red, in the status bar), the window goes on and answers.
 * The screenshot waits 0.5 s after the failed load so that a frame with the message has been drawn (under ASan on a
 * loaded machine the shot once came from a frame before it: 18 red pixels). */
static void test_corrupt(void) {
    char corrupt[4096], notmedia[4096], empty[4096], trunc[4096], shot[4096], text[16384];
    snprintf(corrupt, sizeof corrupt, "%s/corrupt.png", g_tmp);
    char junk[3000] = "\x89PNG\r\n\x1a\n";
    for (int i = 8; i < (int)sizeof junk; i++) junk[i] = (char)(i * 37 + 11);
    write_all(corrupt, junk, sizeof junk);
    snprintf(notmedia, sizeof notmedia, "%s/notes.txt", g_tmp);
    write_all(notmedia, "not an image\n", 13);
    snprintf(empty, sizeof empty, "%s/empty.wav", g_tmp);
    write_all(empty, "", 0);
    snprintf(trunc, sizeof trunc, "%s/cut.wav", g_tmp);
    static const char cut[] = "RIFF\x24\x08\x00\x00WAVEfmt \x10\x00";
    write_all(trunc, cut, sizeof cut - 1);
    snprintf(shot, sizeof shot, "%s/corrupt-shot.png", g_tmp);
    snprintf(text, sizeof text,
             "wait model\ndrop %s\nwait media\nsleep 500\nscreenshot %s\nexpect cannot open\n"
             "drop %s\nwait media\ndrop %s\nwait media\ndrop %s\nwait media\ndrop %s\nwait media\n"
             "drop %s\nwait media\npreset read\nwait done 300\n",
             corrupt, shot, notmedia, empty, trunc, g_tmp, IMAGE);
    cli_result d = run_script("corrupt", text, NULL, "-m " OMNI_A " -n 4 " BUDGET);
    CHECK(d.code == 0, "corrupt: exit %d\n%s", d.code, d.err);
    const char *names[] = {"corrupt.png", "notes.txt", "empty.wav", "cut.wav", g_tmp};
    for (int i = 0; i < 5; i++) {
        char needle[4200];
        snprintf(needle, sizeof needle, "error: cannot open '%s%s%s': ", i < 4 ? g_tmp : "", i < 4 ? "/" : "",
                 names[i]);
        CHECK(strstr(d.err, needle), "corrupt: no message for %s:\n%s", names[i], d.err);
    }
    int w = 0, h = 0, red = count_colour(shot, -30, 0, -1, 0, 0, &w, &h); /* the text's exact colour alone was
                                                                           18-25 pixels, by the path's glyphs */
    CHECK(w == 1280 && h == 800 && red > 20, "corrupt: the status bar shows no red message (%d pixels, %dx%d)", red, w,
          h);
    CHECK(strstr(d.err, "image 'a_exact.png'") && strstr(d.err, "A (bf16) length: 4 tokens") &&
              strstr(d.err, "B (int2) length: 4 tokens"), "corrupt: the window did not answer after the bad files:\n%s",
          d.err);
    cli_free(&d);
}

/* A 50 MB image: decoded on the job thread while the window keeps drawing (frames during the wait, none of them
 * long), a message with its size, a thumbnail, and "Read the text" on it answers. */
static void test_big(void) {
    char big[4096], shot[4096], text[8192];
    snprintf(big, sizeof big, "%s/big.bmp", g_tmp);
    write_big_bmp(big);
    snprintf(shot, sizeof shot, "%s/big-shot.png", g_tmp);
    snprintf(text, sizeof text,
             "wait model\nstate\ndrop %s\nwait media 300\nstate\nexpect big.bmp\nscreenshot %s\npreset read\n"
             "wait done 600\n", big, shot);
    cli_result d = run_script("big", text, NULL, "-m " OMNI_A " -n 2 -c 8192 " BUDGET);
    CHECK(d.code == 0, "big: exit %d\n%s", d.code, d.err);
    CHECK(strstr(d.err, "image 'big.bmp': 4096x4096, 48.0 MiB (large: "), "no message for the 50 MB image:\n%s",
          d.err);
    int frames = atoi(state_of(d.err, 1, "frames"));
    double longest = atof(state_of(d.err, 1, "max-frame-ms"));
    printf("big: %d frames drawn while the 50 MB image was decoded, the longest %.1f ms\n", frames, longest);
    CHECK(frames >= 10 && longest < 250, "big: the window waited for the decoder: %d frames, longest %.1f ms", frames,
          longest);
    int w = 0, h = 0, c = 0;
    uint8_t *px = stbi_load(shot, &w, &h, &c, 4);
    CHECK(px && w == 1280 && h == 800, "big: screenshot %dx%d", w, h);
    int grey = 0; /* the thumbnail: the pattern averaged down is mid grey, in the media box (x < 238, y 40..180) */
    for (int y = 40; px && y < 180; y++)
        for (int x = 9; x < 237; x++) {
            const uint8_t *q = px + ((size_t)y * w + x) * 4;
            grey += q[0] >= 90 && q[0] <= 170 && q[1] >= 90 && q[1] <= 170 && q[2] >= 90 && q[2] <= 170;
        }
    CHECK(grey > 3000, "big: no thumbnail in the media box (%d mid-grey pixels; the empty box's hint has a few "
          "hundred)", grey);
    stbi_image_free(px);
    CHECK(strstr(d.err, "A (bf16) length: 2 tokens") && strstr(d.err, "B (int2) length: 2 tokens"),
          "big: no answer about the 50 MB image:\n%s", d.err);
    cli_free(&d);
    unlink(big);
}

/* Everything a person does with the window, by keys and clicks: typing UTF-8 (CJK), an input method's composition,
 * paste, the format selector, the file browser (Open), play, help, zoom (HiDPI scale), resize, Enter runs, Esc
 * stops, Ctrl+1 preset, Stop, Ctrl+L clears, the model selector. */
static void test_ui(void) {
    char dir[4096], pic[4200], wav[4200], shot[4096], text[16384];
    snprintf(dir, sizeof dir, "%s/browse", g_tmp);
    snprintf(pic, sizeof pic, "%s/pic.png", dir);
    snprintf(wav, sizeof wav, "%s/sound.wav", dir);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s' && cp '%s' '%s'", dir, IMAGE, pic, AUDIO, wav);
    CHECK(system(cmd) == 0, "%s", cmd);
    char media[4096];
    snprintf(shot, sizeof shot, "%s/ui-cleared.png", g_tmp);
    snprintf(media, sizeof media, "%s/ui-media.png", g_tmp);
    snprintf(text, sizeof text,
             "wait model\n"
             "state\n"                                         /* 0 */
             "size 900 640\nsleep 50\n"
             "type héllo 中文,\ncompose にほん\n"
             "state\n"                                         /* 1 */
             "type 日本\nclipboard , pasted ✓\nkey ctrl+v\n"
             "state\n"                                         /* 2 */
             "key BackSpace\nkey Left\nkey Delete\n"
             "state\n"                                         /* 3 */
             "key ctrl+u\nclick kv-b\n"
             "state\n"                                         /* 4 */
             "key Down\nkey Down\nkey Return\n"
             "state\n"                                         /* 5 */
             "expect B: int4 KV cache from the next run\n"
             "key ctrl+o\n"
             "state\n"                                         /* 6 */
             "key Down\nkey Return\nwait media\nclick open\nkey Down\nkey Down\nkey Return\nwait media\n"
             "screenshot %s\nkey ctrl+p\n"
             "state\n"                                         /* 7 */
             "key ctrl+p\nkey F1\n"
             "state\n"                                         /* 8 */
             "key Escape\nkey ctrl+=\nsleep 50\n"
             "state\n"                                         /* 9 */
             "key ctrl+0\nprompt Describe what you see and hear.\nkey Return\nwait tokens 2 300\nkey Escape\n"
             "wait done 300\nexpect stopping\n"
             "state\n"                                         /* 10 */
             "key ctrl+1\nwait tokens 1 300\nstop\nwait done 300\nkey ctrl+l\n"
             "expect cleared\n"
             "state\n"                                         /* 11 */
             "screenshot %s\n"
             "key ctrl+m\n"
             "state\n"                                         /* 12 */
             "key Escape\n",
             media, shot);
    cli_result d = run_script("ui", text, dir, "-m " OMNI_A " -n 5000 -c 8192 " BUDGET);
    CHECK(d.code == 0, "ui: exit %d\n%s", d.code, d.err);
    struct {
        int n;
        const char *key, *want;
    } want[] = {
        {0, "prompt", ""}, {0, "model", "omni-a"}, {0, "ready", "1"}, {0, "kv-a", "bf16"}, {0, "kv-b", "int2"},
        {0, "window", "1280x800"}, {0, "scale", "1.00"},
        {1, "prompt", "héllo 中文,"}, {1, "ime", "にほん"}, {1, "window", "900x640"},
        {2, "prompt", "héllo 中文,日本, pasted ✓"}, {2, "ime", ""},
        {3, "prompt", "héllo 中文,日本, pasted"},
        {4, "prompt", ""}, {4, "popup", "kv-b"},
        {5, "kv-b", "int4"}, {5, "popup", "none"},
        {6, "popup", "files"},
        {7, "image", pic}, {7, "audio", wav}, {7, "playing", "1"},
        {8, "playing", "0"}, {8, "popup", "help"},
        {9, "popup", "none"}, {9, "scale", "1.10"},
        {10, "generating", "0"}, {10, "prompt", "Describe what you see and hear."},
        {11, "image", ""}, {11, "prompt", "Read all the text in the image."}, {11, "audio", ""}, {11, "run", "0"}, {11, "generating", "0"},
        {12, "popup", "model"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *got = state_of(d.err, want[i].n, want[i].key);
        CHECK(!strcmp(got, want[i].want), "ui: state %d: %s=[%s], want [%s]", want[i].n, want[i].key, got,
              want[i].want);
    }
    int h0 = 0, h1 = 0, x;
    sscanf(state_of(d.err, 0, "run-button"), "%d,%d,%d,%d", &x, &x, &x, &h0);
    sscanf(state_of(d.err, 9, "run-button"), "%d,%d,%d,%d", &x, &x, &x, &h1);
    CHECK(h0 > 10 && h1 > h0, "ui: zoom 1.1 made the Run button %d px high, %d at 1.0", h1, h0);
    int a = 0, b = 0;
    sscanf(state_of(d.err, 10, "tokens"), "%d,%d", &a, &b);
    CHECK(a >= 2 && a < 5000 && b >= 2 && b < 5000, "ui: Esc did not stop the run: %d, %d tokens", a, b);
    CHECK(strstr(d.err, "A bf16, B int4: ") && strstr(d.err, "A (bf16) cancelled") && strstr(d.err, "B (int4) cancelled"),
          "ui: the run with B in int4, stopped:\n%s", d.err);
    int w = 0, h = 0, c = 0, r[4] = {0, 0, 0, 0};
    uint8_t *px = stbi_load(media, &w, &h, &c, 4);
    int wave = 0; /* the waveform under the thumbnail in the media box (x < 238 at this size), palette colour 0 */
    for (int y = 40; px && y < 180 && y < h; y++)
        for (int x = 9; x < 237 && x < w; x++) {
            const uint8_t *q = px + ((size_t)y * w + x) * 4;
            wave += q[0] == 0 && q[1] == 114 && q[2] == 178;
        }
    CHECK(px && wave > 100, "ui: no waveform in the media box after opening sound.wav (%d pixels)", wave);
    stbi_image_free(px);
    px = stbi_load(shot, &w, &h, &c, 4);
    CHECK(px && w == 900 && h == 640, "ui: the screenshot after the resize is %dx%d, want 900x640", w, h);
    for (char k = 'A'; px && w == 900 && h == 640 && k <= 'B'; k++) { /* Ctrl+L emptied both panes on the screen */
        int dark = 0;
        CHECK(pane_rect(d.err, k, r) == 0 && r[0] + r[2] <= w && r[1] + r[3] <= h && r[2] > 50, "ui: pane %c", k);
        for (int y = r[1]; y < r[1] + r[3] && y < h; y++)
            for (int x = r[0]; x < r[0] + r[2] && x < w; x++) {
                const uint8_t *q = px + ((size_t)y * w + x) * 4;
                dark += q[0] + q[1] + q[2] < 300;
            }
        CHECK(dark == 0, "ui: pane %c still shows text after Ctrl+L (%d dark pixels)", k, dark);
    }
    stbi_image_free(px);
    cli_free(&d);
}

/* A copy of a text fixture whose config has no vision tower. */
static int text_only_model(char *dir, size_t cap) {
    snprintf(dir, cap, "%s/text-only", g_tmp);
    if (copy_dir(TEXT_MODEL, dir)) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *json = omni_read_file(path, NULL);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!root) return -1;
    cJSON_DeleteItemFromObject(root, "vision_config");
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    int rc = out ? write_all(path, out, strlen(out)) : -1;
    free(out);
    return rc;
}

static void test_switch(void) {
    char script[4096], text[8192], model[4096];
    CHECK(text_only_model(model, sizeof model) == 0, "text-only copy of %s", TEXT_MODEL);
    snprintf(text, sizeof text, "wait model\ndrop %s\nwait media\npreset read\nwait done 600\nexpect switching to\n",
             IMAGE);
    write_file("switch.demo", text, script, sizeof script);
    cli_result d = cli_run("demo -m %s --script %s -n 8 " BUDGET, model, script);
    CHECK(d.code == 0 && strstr(d.err, "reads images"), "switch: exit %d\n%s", d.code, d.err);
    cli_free(&d);
}

static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    cli_result r = cli_run("%s", args);
    CHECK(r.code == code && strstr(r.err, needle), "%s: exit %d (want %d), stderr:\n%s", what, r.code, code, r.err);
    cli_free(&r);
}

static void test_bad(void) {
    char script[4096], args[8192];
    write_file("bad.demo", "wait model\n\n# fine so far\njump 3\n", script, sizeof script);
    snprintf(args, sizeof args, "demo -m %s --script %s", OMNI_A, script);
    expect_fail("unknown command", 1, "line 4: unknown command 'jump'", args);
    snprintf(args, sizeof args, "demo -m %s --script %s/none.demo", OMNI_A, g_tmp);
    expect_fail("missing script", 2, "cannot read script", args);
    snprintf(args, sizeof args, "demo -m %s --screenshot %s/x.png", OMNI_A, g_tmp);
    expect_fail("screenshot without script", 1, "--screenshot needs --script", args);
    write_file("ok.demo", "wait model\n", script, sizeof script);
    snprintf(args, sizeof args, "demo -m %s --script %s --kv-b int3", OMNI_A, script);
    expect_fail("bad format", 1, "int3", args);
    write_file("idle.demo", "wait model\nwait done 5\n", script, sizeof script);
    snprintf(args, sizeof args, "demo -m %s --script %s", OMNI_A, script);
    expect_fail("wait without a run", 4, "line 2: wait: nothing is running", args);
}

int main(int argc, char **argv) {
    setenv("SDL_VIDEODRIVER", "offscreen", 1); /* no display needed (CI) */
    setenv("SDL_AUDIODRIVER", "dummy", 1);
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"read", test_read},     {"speech", test_embedded_audio}, {"ocr", test_embedded_ocr},
                 {"close", test_close},   {"corrupt", test_corrupt},       {"big", test_big},
                 {"ui", test_ui},         {"switch", test_switch},         {"bad", test_bad}};
    int n = (int)(sizeof cases / sizeof cases[0]), ran = 0;
    g_tmp = make_tmpdir();
    if (!g_tmp) return 1;
    for (int i = 0; i < n; i++) /* the case named on the command line (CTest runs one per test), or all */
        if (argc < 2 || !strcmp(argv[1], cases[i].name)) cases[i].fn(), ran++;
    CHECK(ran > 0, "no case '%s' (read speech ocr close corrupt big ui switch bad)", argc > 1 ? argv[1] : "");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_exit();
}
