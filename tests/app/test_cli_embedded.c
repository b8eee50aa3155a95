/* test_cli_embedded.c - `omni ocr` and `omni ask` without -m use the embedded models assets/models/{ocr,speech}.
 *
 * Always: the lookup ($OMNI_MODELS/NAME; beside the program; the source tree) with fixture models, OCR's
 * 1024-2048 token budget kept inside the model's own pixel limits (the vl-h64 fixture allows 4-16 tokens), an
 * explicit --image-*-tokens still overriding them, a missing embedded model = one stderr line and exit 3.
 * For each trained model committed (assets/models/{ocr,speech}/config.json) also the acceptance of issue 13:
 * each sample image of assets/samples/expected.json is read exactly by the README's command (`omni ocr IMAGE`, no
 * -m) with --kv bf16 and --kv int2 in <= 2 s on 2 cores (-t 2; see ocr_timed for how that is measured on a busy
 * machine), and each sample clip's questions are answered exactly by `omni ask --audio FILE QUESTION` with the
 * default sampling and with --temp 0. */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "cli_util.h"

#define SAMPLES OMNI_SOURCE_DIR "/assets/samples"
#define EMBEDDED OMNI_SOURCE_DIR "/assets/models"
#define VIS OMNI_FIXTURES "/vision"

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* user + system CPU seconds of all waited-for children so far (cli_run's shell and the omni it waits for) */
static double children_cpu_s(void) {
    struct rusage u;
    if (getrusage(RUSAGE_CHILDREN, &u) != 0) return 0;
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

/* Sanitizer builds run everything several times slower: there only the answers are checked, not the time. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define OCR_LIMIT_S 2.0 /* issue 13: the README command reads a sample in <= 2 s on 2 cores */
#define OCR_TRIES 3

typedef struct {
    double wall, cpu; /* the best (smallest) of the tries */
} ocr_time;

/* visual tokens from the stderr line `image: 'x' WxH -> wxh (N visual tokens)`, -1 if absent */
static int visual_tokens(const char *err) {
    const char *p = strstr(err, " visual tokens)");
    if (!p) return -1;
    while (p > err && p[-1] != '(') p--;
    return atoi(p);
}

static void lookup(const char *tmp) {
    char cmd[16384], models[4200];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/ocr' '%s/speech' && cp %s/vl-h64/* %s/tok-small/tokenizer*.json '%s/ocr/'",
             models, models, VIS, OMNI_FIXTURES, models);
    CHECK(system(cmd) == 0, "copy the vision fixture model");
    snprintf(cmd, sizeof cmd, "cd %s/audio/omni-a && cp config.json generation_config.json model.safetensors "
             "tokenizer.json tokenizer_config.json '%s/speech/'", OMNI_FIXTURES, models);
    CHECK(system(cmd) == 0, "copy the audio fixture model");
    setenv("OMNI_MODELS", models, 1);
    /* the preferred OCR budget (1024-2048) does not overlap the fixture's 4-16 tokens: the model's limits stay */
    cli_result r = cli_run("ocr %s/a_exact.png -n 4 --no-perf -v", VIS);
    CHECK(r.code == 0 && strstr(r.err, "model: embedded") && strstr(r.err, "/models/ocr"),
          "ocr without -m: exit %d: %s", r.code, r.err);
    int n = visual_tokens(r.err);
    CHECK(n >= 4 && n <= 16, "ocr default budget inside the model's limits: %d visual tokens (%s)", n, r.err);
    cli_free(&r);
    r = cli_run("ocr %s/a_exact.png -n 4 --no-perf --image-min-tokens 20 --image-max-tokens 40", VIS);
    n = visual_tokens(r.err);
    CHECK(r.code == 0 && n >= 20 && n <= 40, "explicit budget overrides: exit %d, %d tokens", r.code, n);
    cli_free(&r);
    r = cli_run("ask --audio %s/audio/clips/tone_1s.wav 'What can you hear?' -n 3 --no-perf -v", OMNI_FIXTURES);
    CHECK(r.code == 0 && strstr(r.err, "/models/speech") && strstr(r.err, "audio tokens"),
          "ask without -m: exit %d: %s", r.code, r.err);
    cli_free(&r);
    snprintf(cmd, sizeof cmd, "%s/none", tmp);
    setenv("OMNI_MODELS", cmd, 1);
    r = cli_run("ocr %s/a_exact.png --no-perf", VIS);
    CHECK(r.code == 3 && cli_lines(r.err) == 1 && strstr(r.err, "OMNI_MODELS"), "missing embedded: exit %d: %s",
          r.code, r.err);
    cli_free(&r);
    unsetenv("OMNI_MODELS");
}

/* One README command: the answer must be exactly `text`; returns its time. On a machine of its own (CI: ctest -j2
 * on 2 cores, this test RUN_SERIAL) the wall time is the measure. Where other work shares the cores, the wall time
 * also counts the time omni waited for a core, so a run over the limit is tried again (up to OCR_TRIES) and its
 * CPU time (user + system of the child) is the fallback: a run that never waits on anything but the CPU finishes
 * within its CPU time on 2 free cores, and a run that really takes more than 2 s there also uses more than 2 s of
 * CPU (one thread: the same; two threads: up to twice as much), so it still fails. */
static ocr_time ocr_timed(const char *file, const char *kv, const char *text) {
    ocr_time best = {1e9, 1e9};
    for (int k = 0; k < OCR_TRIES; k++) {
        double c0 = children_cpu_s(), t0 = now_s();
        cli_result r = cli_run("ocr %s/%s --kv %s -t 2 --no-perf", SAMPLES, file, kv);
        double wall = now_s() - t0, cpu = children_cpu_s() - c0;
        size_t n = strlen(text);
        int same = r.code == 0 && strlen(r.out) == n + 1 && !strncmp(r.out, text, n) && r.out[n] == '\n';
        CHECK(same, "ocr %s --kv %s: exit %d, got '%s', want '%s' (%s)", file, kv, r.code, r.out, text, r.err);
        printf("ocr %s --kv %s: %.2f s wall, %.2f s CPU%s\n", file, kv, wall, cpu, same ? "" : " (WRONG)");
        cli_free(&r);
        if (wall < best.wall) best.wall = wall;
        if (cpu < best.cpu) best.cpu = cpu;
        if (!same || SANITIZED || wall <= OCR_LIMIT_S) break;
    }
    return best;
}

static void ocr_samples(const cJSON *exp) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(exp, "ocr")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(it, "file"));
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(it, "text"));
        const char *modes[] = {"bf16", "int2"};
        for (int m = 0; m < 2; m++) {
            ocr_time t = ocr_timed(file, modes[m], text);
            if (SANITIZED) continue;
            CHECK(t.wall <= OCR_LIMIT_S || t.cpu <= OCR_LIMIT_S,
                  "ocr %s --kv %s: best of %d runs %.2f s wall, %.2f s CPU (limit %.1f s)", file, modes[m],
                  OCR_TRIES, t.wall, t.cpu, OCR_LIMIT_S);
        }
    }
}

static void speech_samples(const cJSON *exp) {
    const cJSON *it, *qa;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(exp, "speech")) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(it, "file"));
        cJSON_ArrayForEach(qa, cJSON_GetObjectItem(it, "qa")) {
            const char *q = cJSON_GetStringValue(cJSON_GetObjectItem(qa, "question"));
            const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(qa, "answer"));
            const char *extra[] = {"", "--temp 0"};
            for (int k = 0; k < 2; k++) {
                cli_result r = cli_run("ask --audio %s/%s '%s' %s --no-perf", SAMPLES, file, q, extra[k]);
                size_t n = strlen(a);
                int same = r.code == 0 && strlen(r.out) == n + 1 && !strncmp(r.out, a, n) && r.out[n] == '\n';
                CHECK(same, "ask %s '%s' %s: exit %d, got '%s', want '%s' (%s)", file, q, extra[k], r.code, r.out, a,
                      r.err);
                cli_free(&r);
            }
        }
    }
}

int main(void) {
    char *tmp = make_tmpdir();
    lookup(tmp);
    int have_ocr = exists(EMBEDDED "/ocr/config.json"), have_speech = exists(EMBEDDED "/speech/config.json");
    if (!have_ocr || !have_speech)
        printf("SKIP acceptance of%s%s: not in assets/models yet (tools/train/gpu_train.sh)\n",
               have_ocr ? "" : " ocr", have_speech ? "" : " speech");
    if (have_ocr || have_speech) {
        size_t len;
        char *txt = omni_read_file(SAMPLES "/expected.json", &len);
        cJSON *exp = txt ? cJSON_Parse(txt) : NULL;
        CHECK(exp != NULL, "assets/samples/expected.json");
        if (exp && have_ocr) ocr_samples(exp);
        if (exp && have_speech) speech_samples(exp);
        cJSON_Delete(exp);
        free(txt);
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    free(tmp);
    return check_exit();
}
