/* cmd_media.c - the media commands: `omni ocr IMAGE...` and `omni ask --audio FILE "question"`. */
#include <stdio.h>
#include <string.h>

#include "app/commands.h"

#define OCR_PROMPT "Read all the text in the image."

/* OCR defaults (spec/ux.md): greedy, a 1024-2048 visual-token budget, room for a full page of text. */
void ocr_defaults(omni_args *a) {
    a->temp = 0.f;
    a->n_predict = 2048;
    a->image_min_tokens = 1024;
    a->image_max_tokens = 2048;
}

/* Each positional argument (and --image) is one image, answered on its own: its text on stdout, a blank line
 * between answers; a header naming the file goes to stderr when there are several. */
omni_status cmd_ocr(const omni_args *a, volatile int *intr) {
    const char *imgs[2 * OMNI_MAX_MEDIA];
    int n = 0;
    for (int i = 0; i < a->n_images; i++) imgs[n++] = a->images[i];
    for (int i = 0; i < a->n_positional; i++) imgs[n++] = a->positional[i];
    if (!n) return omni_fail(OMNI_ERR_USAGE, "usage: omni ocr IMAGE... -m MODEL [--prompt TEXT]");
    omni_status st = OMNI_OK;
    for (int i = 0; !st && i < n && !*intr; i++) {
        omni_args one = *a;
        one.images[0] = imgs[i];
        one.n_images = 1;
        one.n_positional = 0;
        if (!one.prompt && !one.prompt_file) one.prompt = OCR_PROMPT;
        if (n > 1) fprintf(stderr, "==> %s <==\n", imgs[i]);
        omni_session s;
        media_prompt p;
        media_item items[2 * OMNI_MAX_MEDIA] = {{0}};
        st = omni_open_prompt(&s, &one, a->n_predict, 1, intr, &p, items);
        if (!st) st = session_turn(&s, &p, a->n_predict, 0, NULL, NULL, NULL);
        if (!st) {
            fputs(i + 1 < n ? "\n\n" : "\n", stdout);
            fflush(stdout);
            session_print_perf(&s);
        }
        media_prompt_free(&p);
        omni_free_items(items, one.n_images + one.n_audios);
        session_close(&s);
    }
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
omni_status cmd_ask(const omni_args *a, volatile int *intr) {
    if (a->n_audios == 0) return omni_fail(OMNI_ERR_USAGE, "usage: omni ask -m MODEL --audio FILE \"question\"");
    return cmd_generate(a, intr);
}
