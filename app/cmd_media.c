/* cmd_media.c - the media commands: `omni ocr IMAGE...` and `omni ask --audio FILE "question"`; without -m they
 * use the embedded models assets/models/ocr and assets/models/speech (trained by tools/train). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/model_path.h"

#define OCR_PROMPT "Read all the text in the image."

/* OCR defaults (spec/ux.md): greedy, a 1024-2048 visual-token budget (kept inside the model's own pixel limits:
 * the small embedded model reads 4-256 tokens), room for a full page of text. */
void ocr_defaults(omni_args *a) {
    a->temp = 0.f;
    a->n_predict = 2048;
    a->image_min_tokens = 1024;
    a->image_max_tokens = 2048;
    a->image_budget_preferred = 1;
}

/* -m, or the embedded model `name` (dir: storage for the path). */
static omni_status model_or_embedded(omni_args *a, const char *name, char *dir, size_t cap) {
    if (a->model) return OMNI_OK;
    omni_status st = omni_embedded_model(name, dir, cap);
    if (!st) {
        a->model = dir;
        omni_log(1, "model: embedded %s\n", dir);
    }
    return st;
}

/* One image answered: its text on stdout (after a "==> FILE <==" header line when there are several). The model
 * loads for the first image (s->engine still NULL) and stays for the others. */
static omni_status ocr_one(omni_session *s, omni_args *a, const char *img, int several, int first,
                           volatile int *intr) {
    omni_args one = *a;
    one.images[0] = img;
    one.n_images = 1;
    one.n_positional = 0;
    if (!one.prompt) one.prompt = OCR_PROMPT;
    if (several) {
        printf("%s==> %s <==\n", first ? "" : "\n", img);
        fflush(stdout);
    }
    media_prompt p;
    media_item items[2 * OMNI_MAX_MEDIA] = {{0}};
    omni_status st;
    if (s->engine) {
        session_reset_perf(s);
        st = omni_next_prompt(s, &one, a->n_predict, &p, items);
    } else {
        session_close(s); /* what a first image that failed before the engine was made left */
        st = omni_open_prompt(s, &one, a->n_predict, 1, intr, &p, items);
    }
    if (!st) st = session_turn(s, &p, a->n_predict, 0, NULL, NULL, NULL);
    if (!st || *intr) {
        fputc('\n', stdout);
        fflush(stdout);
        session_print_perf(s);
    }
    media_prompt_free(&p);
    omni_free_items(items, one.n_images + one.n_audios);
    return st;
}

/* Each positional argument (and --image) is one image, answered on its own by one loaded model. A bad image of
 * several is reported (one error line) and the others are still read; the exit code is then the first failure's,
 * with a summary line. A model error stops. The prompt (-p, -f FILE or -f - read once) is the same for all. */
omni_status cmd_ocr(const omni_args *args, volatile int *intr) {
    const char *imgs[2 * OMNI_MAX_MEDIA];
    int n = 0;
    for (int i = 0; i < args->n_images; i++) imgs[n++] = args->images[i];
    for (int i = 0; i < args->n_positional; i++) imgs[n++] = args->positional[i];
    if (!n) return omni_fail(OMNI_ERR_USAGE, "usage: omni ocr IMAGE... [-m MODEL] [--prompt TEXT]");
    omni_args with_model = *args, *a = &with_model;
    char dir[4096], first_err[512] = "", *prompt = NULL;
    omni_status st = model_or_embedded(a, "ocr", dir, sizeof dir), worst = OMNI_OK;
    if (!st && a->prompt_file && !(st = omni_args_prompt(a, &prompt))) a->prompt = prompt, a->prompt_file = NULL;
    omni_session s;
    memset(&s, 0, sizeof s);
    int failed = 0;
    for (int i = 0; !st && i < n && !*intr; i++) {
        omni_status one = ocr_one(&s, a, imgs[i], n > 1, i == 0, intr);
        if (!one || *intr) continue;
        if (n == 1) st = one; /* one image: its error is the only line */
        else if (one != OMNI_ERR_INPUT && one != OMNI_ERR_USAGE) st = one; /* the model, memory...: every image fails */
        else {
            fprintf(stderr, "error: %s\n", omni_last_error());
            if (!failed++) snprintf(first_err, sizeof first_err, "%s", omni_last_error()), worst = one;
        }
    }
    session_close(&s);
    free(prompt);
    if (!st && failed)
        st = omni_fail(worst, "%d of %d images could not be read (first: %.400s)", failed, n, first_err);
    return st;
}

/* Qwen3-Omni's recommended sampling (README: temperature 0.6, top-p 0.95, top-k 20). */
void ask_defaults(omni_args *a) {
    a->temp = 0.6f;
    a->top_p = 0.95f;
    a->top_k = 20;
    a->n_predict = 1024;
}

/* generate with the Omni defaults; audio is required. */
omni_status cmd_ask(const omni_args *args, volatile int *intr) {
    if (args->n_audios == 0)
        return omni_fail(OMNI_ERR_USAGE, "usage: omni ask [-m MODEL] --audio FILE \"question\"");
    if (!args->prompt && !args->prompt_file) /* before the model loads */
        return omni_fail(OMNI_ERR_USAGE, "no question given (omni ask --audio FILE \"question\", or -p / -f)");
    omni_args a = *args;
    char dir[4096];
    omni_status st = model_or_embedded(&a, "speech", dir, sizeof dir);
    return st ? st : cmd_generate(&a, intr);
}
