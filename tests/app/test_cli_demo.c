/* test_cli_demo.c - `omni demo --script` headless (SDL's offscreen video driver, software renderer) on the Omni
 * fixture (images and audio, random weights):
 *  - read the text of an image on both panes: the PNG has the requested size and is not blank; the two answers
 *    the demo prints are exactly `omni generate --kv bf16 --compare int2` for the same request (and its compare
 *    line: KV bytes, common prefix, KL, top-1 - the same numbers); each pane's text area has ink after the run
 *    and none before it; B's text carries divergence marks exactly when its top-1 agreement is below 100%;
 *    frame times were measured while both panes generated: median <= 33 ms, UI thread CPU p95 <= 33 ms;
 *  - a corrupt PNG, a 50 MB image, an audio file played (SDL's dummy audio driver) and asked about, then the
 *    window closed mid-generation: messages in the UI, no crash, exit 0, partial answers printed;
 *  - a model without a vision tower (a text fixture's copy): "Read the text" switches to one that has it;
 *  - bad use: an unknown script command (exit 1, its line), a missing script (2), --screenshot without --script
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

static void test_robust(void) {
    char script[4096], corrupt[4096], big[4096], text[16384];
    snprintf(corrupt, sizeof corrupt, "%s/corrupt.png", g_tmp);
    char junk[3000] = "\x89PNG\r\n\x1a\n";
    for (int i = 8; i < (int)sizeof junk; i++) junk[i] = (char)(i * 37 + 11);
    write_all(corrupt, junk, sizeof junk);
    snprintf(big, sizeof big, "%s/big.bmp", g_tmp);
    write_big_bmp(big);
    snprintf(text, sizeof text,
             "wait model\n"
             "drop %s\n"
             "wait media\n"
             "expect cannot open\n"
             "drop %s\n"
             "wait media 300\n"
             "expect big.bmp\n"
             "drop %s\n"
             "wait media\n"
             "click play\n"
             "preset audio\n"
             "wait tokens 4 300\n"
             "close\n",
             corrupt, big, AUDIO);
    write_file("robust.demo", text, script, sizeof script);
    cli_result d = cli_run("demo -m %s --script %s -n 5000 -c 8192", OMNI_A, script);
    CHECK(d.code == 0, "robust: exit %d\n%s", d.code, d.err);
    CHECK(strstr(d.err, "error: cannot open '") && strstr(d.err, "corrupt.png"), "no message for the corrupt PNG:\n%s",
          d.err);
    CHECK(strstr(d.err, "image 'big.bmp': 4096x4096, 48.0 MiB"), "no message for the 50 MB image:\n%s", d.err);
    CHECK(strstr(d.err, "audio 'tone_1s.wav'") && strstr(d.err, "playing 1.0 s of audio"),
          "no message for the audio file or its playback:\n%s", d.err);
    int lines = 0; /* A's and B's partial answers, one line each at least */
    for (const char *p = d.out; p && *p; p++) lines += *p == '\n';
    CHECK(lines >= 2 && strstr(d.err, "==> B: int2 <=="), "closed mid-generation: %d lines\n%s", lines, d.out);
    cli_free(&d);
    unlink(big);
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

int main(void) {
    setenv("SDL_VIDEODRIVER", "offscreen", 1); /* no display needed (CI) */
    setenv("SDL_AUDIODRIVER", "dummy", 1);
    g_tmp = make_tmpdir();
    if (!g_tmp) return 1;
    test_read();
    test_embedded_audio();
    test_robust();
    test_switch();
    test_bad();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_exit();
}
