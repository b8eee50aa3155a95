/* test_cli_audio.c - audio through the program on the Qwen3-Omni thinker fixtures (tests/fixtures/audio/omni-*):
 * `omni logits --audio CLIP [--image IMG] -p QUESTION` (templated: audio, then image, then text) matches
 * transformers (max|d|/max|ref| <= 1e-3, same argmax), `omni ask --temp 0 -n 16` prints the reference greedy text;
 * text-only prompts too; bad audio inputs give one stderr line and exit 2 (3 for a model without an audio tower). */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"
#include "llm/tokenizer.h"

#define AUD OMNI_FIXTURES "/audio"

static char g_tmp[4096];

/* The user's question: the text between the last media end tag (or "user\n") and <|im_end|>. */
static char *question(const char *prompt) {
    const char *s = strstr(prompt, "user\n") + 5, *e;
    const char *tags[] = {"<|audio_end|>", "<|vision_end|>"};
    for (int t = 0; t < 2; t++) {
        const char *p = prompt, *q;
        while ((q = strstr(p, tags[t]))) { if (q + strlen(tags[t]) > s) s = q + strlen(tags[t]); p = q + 1; }
    }
    e = strstr(s, "<|im_end|>");
    return strndup(s, (size_t)(e - s));
}

static char *greedy_text(const char *dir, const cJSON *c) {
    char path[4400];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    llm_tokenizer *tok = NULL;
    if (llm_tokenizer_load(path, &tok)) return NULL;
    int32_t ids[64];
    int n = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(c, "greedy")) if (n < 64) ids[n++] = (int32_t)g->valuedouble;
    char *t = llm_tokenizer_decode(tok, ids, n, 1), *r = t ? malloc(strlen(t) + 2) : NULL;
    if (r) sprintf(r, "%s\n", t);
    free(t);
    llm_tokenizer_free(tok);
    return r;
}

static void compare(const char *name, const char *got_path, const char *ref_path) {
    logits_cmp c;
    int ok = compare_logits_files(got_path, ref_path, &c) == 0;
    CHECK(ok && c.rel <= 1e-3f && c.argmax_got == c.argmax_ref, "%s: rel %.3g, argmax %d vs %d", name, ok ? c.rel : -1.f,
          ok ? c.argmax_got : -1, ok ? c.argmax_ref : -1);
}

static void run_case(const char *dir, const cJSON *c, const char *image) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *clip = cJSON_GetStringValue(cJSON_GetObjectItem(c, "audio_clip"));
    int has_img = cJSON_GetObjectItem(c, "image") && !cJSON_IsNull(cJSON_GetObjectItem(c, "image"));
    char *q = question(cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt")));
    char media[4096] = "", pf[4400], of[4400], ref[4400];
    if (clip) snprintf(media, sizeof media, " --audio %s/clips/%s.wav", AUD, clip);
    if (has_img) {
        size_t o = strlen(media);
        snprintf(media + o, sizeof media - o, " --image %s/%s", AUD, image);
    }
    snprintf(pf, sizeof pf, "%s/q.txt", g_tmp);
    snprintf(of, sizeof of, "%s/l.f32", g_tmp);
    write_all(pf, q, strlen(q));
    cli_result r = cli_run("logits -m %s -f %s%s -o %s --no-perf", dir, pf, media, of);
    CHECK(r.code == 0, "%s: logits exit %d: %s", name, r.code, r.err);
    if (clip) CHECK(strstr(r.err, "16000 Hz mono") && strstr(r.err, "audio tokens"), "%s: audio lines: %s", name, r.err);
    cli_free(&r);
    snprintf(ref, sizeof ref, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(c, "logits_file")));
    compare(name, of, ref);
    char *want = greedy_text(dir, c);
    r = cli_run("%s -m %s -f %s%s --temp 0 -n 16 --no-perf", clip ? "ask" : "generate", dir, pf, media);
    CHECK(r.code == 0 && want && !strcmp(r.out, want), "%s: greedy '%s' != '%s' (%s)", name, r.out, want, r.err);
    cli_free(&r);
    free(want);
    free(q);
}

static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    cli_result r = cli_run("%s", args);
    CHECK(r.code == code, "%s: exit %d, want %d (stderr: %s)", what, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1 && strstr(r.err, needle), "%s: want one stderr line with '%s':\n%s", what, needle, r.err);
    cli_free(&r);
}

/* A 16 kHz mono 16-bit PCM WAV of n samples (a sine), written by hand. */
static void write_wav(const char *path, int n) {
    unsigned char h[44] = "RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data";
    unsigned data = (unsigned)n * 2, riff = 36 + data;
    for (int i = 0; i < 4; i++) h[4 + i] = (unsigned char)(riff >> (8 * i)), h[40 + i] = (unsigned char)(data >> (8 * i));
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(h, 1, 44, f);
    for (int i = 0; i < n; i++) {
        short v = (short)(8000 * sin(i * 0.1));
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
}

int main(void) {
    char *t = make_tmpdir();
    snprintf(g_tmp, sizeof g_tmp, "%s", t);
    free(t);
    const char *models[] = {"omni-a", "omni-b"};
    int n = 0;
    for (int m = 0; m < 2; m++) {
        char dir[4200], path[4300];
        snprintf(dir, sizeof dir, "%s/%s", AUD, models[m]);
        snprintf(path, sizeof path, "%s/expected.json", dir);
        char *txt = omni_read_file(path, NULL);
        CHECK(txt != NULL, "missing %s", path);
        if (!txt) continue;
        cJSON *e = cJSON_Parse(txt);
        free(txt);
        const cJSON *c;
        const char *image = cJSON_GetStringValue(cJSON_GetObjectItem(e, "image_file"));
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(e, "cases")) {
            run_case(dir, c, image);
            n++;
        }
        cJSON_Delete(e);
    }
    CHECK(n >= 6, "only %d cases", n);
    char args[8192];
    snprintf(args, sizeof args, "ask -m %s/omni-a --audio /nonexistent.wav hi", AUD);
    expect_fail("missing audio", 2, "nonexistent.wav", args);
    snprintf(args, sizeof args, "ask -m %s/omni-a --audio %s/clips/pattern_64x96.png hi", AUD, AUD);
    expect_fail("png as audio", 2, "pattern_64x96.png", args);
    snprintf(args, sizeof args, "ask -m %s/text/qvl-h64-hd128-gqa2-tied --audio %s/clips/tone_1s.wav hi", OMNI_FIXTURES,
             AUD);
    expect_fail("no audio tower", 3, "no audio tower", args);
    char tiny[4300];
    snprintf(tiny, sizeof tiny, "%s/tiny.wav", g_tmp);
    write_wav(tiny, 80); /* 5 ms: shorter than one STFT window */
    snprintf(args, sizeof args, "ask -m %s/omni-a --audio %s hi", AUD, tiny);
    expect_fail("80-sample audio", 2, "too short", args);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    return check_exit();
}
