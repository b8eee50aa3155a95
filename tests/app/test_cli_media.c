/* test_cli_media.c - images through the program: `omni logits --raw --image A --image B` on the vision fixtures
 * matches transformers (max|d|/max|ref| <= 1e-3, same argmax) and `omni generate --temp 0 -n 16` prints the
 * reference greedy text; the templated path and `omni ocr` run; bad inputs give one stderr line and the
 * documented code (2 for a missing/corrupt image, 1 for a placeholder/image count mismatch). The fixture model
 * dirs carry no tokenizer, so each is copied next to tests/fixtures/tok-small. */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"
#include "llm/tokenizer.h"

#define VIS OMNI_FIXTURES "/vision"

static char g_tmp[4096];

static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    cli_result r = cli_run("%s", args);
    CHECK(r.code == code, "%s: exit %d, want %d (stderr: %s)", what, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1 && strstr(r.err, needle), "%s: want one stderr line with '%s':\n%s", what, needle, r.err);
    cli_free(&r);
}

/* Text of the reference greedy ids (tokenizer parity is tested on its own in test_tokenizer), plus the newline
 * generate prints at the end. */
static char *greedy_text(const cJSON *e2e) {
    llm_tokenizer *tok = NULL;
    if (llm_tokenizer_load(OMNI_FIXTURES "/tok-small/tokenizer.json", &tok)) return NULL;
    int32_t ids[64];
    int n = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(e2e, "greedy")) if (n < 64) ids[n++] = (int32_t)g->valuedouble;
    char *t = llm_tokenizer_decode(tok, ids, n, 1);
    llm_tokenizer_free(tok);
    char *r = t ? malloc(strlen(t) + 2) : NULL;
    if (r) sprintf(r, "%s\n", t);
    free(t);
    return r;
}

static void run_model(const cJSON *m) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(m, "dir"));
    const cJSON *e2e = cJSON_GetObjectItem(m, "e2e");
    char dir[4300], pf[4400], of[4400], imgs[4096] = "";
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    char src[4200];
    snprintf(src, sizeof src, "%s/%s", VIS, name);
    copy_dir(src, dir);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp %s/tok-small/tokenizer.json %s/tok-small/tokenizer_config.json '%s'/", OMNI_FIXTURES,
             OMNI_FIXTURES, dir);
    CHECK(system(cmd) == 0, "copy tokenizer");
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(e2e, "text"));
    snprintf(pf, sizeof pf, "%s/prompt.txt", g_tmp);
    write_all(pf, text, strlen(text));
    const cJSON *im;
    cJSON_ArrayForEach(im, cJSON_GetObjectItem(e2e, "images")) {
        size_t o = strlen(imgs);
        snprintf(imgs + o, sizeof imgs - o, " --image %s/%s", VIS, im->valuestring);
    }
    snprintf(of, sizeof of, "%s/logits.f32", g_tmp);
    cli_result r = cli_run("logits -m %s --raw -f %s%s -o %s --no-perf", dir, pf, imgs, of);
    CHECK(r.code == 0, "%s: logits exit %d: %s", name, r.code, r.err);
    CHECK(strstr(r.err, "visual tokens") && strstr(r.err, "encoded in"), "%s: no image stderr lines: %s", name, r.err);
    cli_free(&r);
    char ref[4400];
    snprintf(ref, sizeof ref, "%s/%s", VIS, cJSON_GetStringValue(cJSON_GetObjectItem(e2e, "logits")));
    logits_cmp lc;
    int ok = compare_logits_files(of, ref, &lc) == 0;
    CHECK(ok && lc.rel <= 1e-3f && lc.argmax_got == lc.argmax_ref, "%s: rel %.3g, argmax %d vs %d", name,
          ok ? lc.rel : -1.f, ok ? lc.argmax_got : -1, ok ? lc.argmax_ref : -1);
    /* greedy: the printed text of 16 greedy tokens equals the text of the reference ids */
    char *text_ref = greedy_text(e2e);
    r = cli_run("generate -m %s --raw -f %s%s --temp 0 -n 16 --no-perf", dir, pf, imgs);
    CHECK(r.code == 0 && text_ref && !strcmp(r.out, text_ref), "%s: greedy text '%s' != '%s'", name, r.out, text_ref);
    cli_free(&r);
    free(text_ref);
    /* templated prompt and ocr run end to end */
    r = cli_run("generate -m %s -p 'What is this?'%s --temp 0 -n 4 --no-perf", dir, imgs);
    CHECK(r.code == 0, "%s: templated image prompt exit %d: %s", name, r.code, r.err);
    cli_free(&r);
    r = cli_run("ocr %s/a_exact.png -m %s -n 4 --no-perf --image-min-tokens 4 --image-max-tokens 64", VIS, dir);
    CHECK(r.code == 0 && strlen(r.out) > 0, "%s: ocr exit %d: %s", name, r.code, r.err);
    cli_free(&r);
    /* bad inputs */
    char args[9000];
    snprintf(args, sizeof args, "generate -m %s -p hi --image /nonexistent.png", dir);
    expect_fail("missing image", 2, "nonexistent.png", args);
    snprintf(args, sizeof args, "generate -m %s --raw -f %s --image %s/a_exact.png", dir, pf, VIS);
    expect_fail("placeholder count mismatch", 1, "placeholders", args);
    snprintf(args, sizeof args, "generate -m %s -p hi --image %s/manifest.json", dir, VIS);
    expect_fail("not an image", 2, "manifest.json", args);
}

int main(void) {
    char *t = make_tmpdir();
    snprintf(g_tmp, sizeof g_tmp, "%s", t);
    free(t);
    char *txt = omni_read_file(VIS "/manifest.json", NULL);
    CHECK(txt != NULL, "no vision manifest");
    cJSON *man = cJSON_Parse(txt);
    free(txt);
    const cJSON *m;
    int n = 0;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(man, "models")) {
        run_model(m);
        n++;
    }
    CHECK(n >= 2, "only %d vision models", n);
    cJSON_Delete(man);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    return check_exit();
}
