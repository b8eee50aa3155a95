/* cmd_text.c - the text commands: generate, tokenize, logits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/media.h"
#include "app/model_path.h"
#include "app/session.h"
#include "kernels/ops.h"
#include "llm/prompt.h"

/* Prompt text as the model sees it: chat template unless --raw. */
static omni_status build_prompt(const omni_args *a, char **text) {
    char *user;
    omni_status st = omni_args_prompt(a, &user);
    if (st) return st;
    if (a->raw) {
        *text = user;
        return OMNI_OK;
    }
    *text = llm_prompt_simple(a->system, user, a->n_images, a->n_audios);
    free(user);
    return *text ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
}

/* Open a session, encode --image/--audio, tokenize the prompt, size the cache and prefill. */
/* Placeholder tokens must match the media given, checked before any encoder runs. */
static omni_status check_placeholders(const omni_session *s, const int32_t *ids, int n, const omni_args *a) {
    int n_img = 0, n_aud = 0;
    for (int i = 0; i < n; i++) {
        n_img += ids[i] == s->cfg->image_token_id;
        n_aud += s->cfg->audio_token_id >= 0 && ids[i] == s->cfg->audio_token_id;
    }
    if (n_img != a->n_images || n_aud != a->n_audios)
        return omni_fail(OMNI_ERR_USAGE, "the prompt has %d <|image_pad|> and %d <|audio_pad|> placeholders but %d "
                         "image(s) and %d audio file(s) were given", n_img, n_aud, a->n_images, a->n_audios);
    return OMNI_OK;
}

omni_status omni_open_and_prefill(omni_session *s, const omni_args *a, int extra, volatile int *intr) {
    char *text = NULL;
    int32_t *ids = NULL;
    int n = 0, n_media = 0, media_tokens = 0;
    omni_media *media = NULL;
    omni_status st = build_prompt(a, &text);
    if (!st) st = session_open(s, a);
    s->interrupted = intr;
    if (!st) st = media_check_support(s, a->n_images, a->n_audios);
    if (!st) st = session_tokenize(s, text, &ids, &n);
    if (!st && n == 0) st = omni_fail(OMNI_ERR_USAGE, "empty prompt");
    if (!st) st = check_placeholders(s, ids, n, a);
    if (!st) st = media_encode_args(s, &media, &n_media);
    for (int i = 0; i < n_media; i++) media_tokens += media[i].n_tokens - 1;
    if (!st) {
        int need = n + media_tokens + (extra > 0 ? extra : 0);
        st = session_kv_init(s, need > a->ctx ? need : a->ctx);
    }
    if (!st) st = session_eval_prompt(s, ids, n, media, n_media);
    media_free(media, n_media);
    free(text);
    free(ids);
    return st;
}

omni_status cmd_generate(const omni_args *a, volatile int *intr) {
    omni_session s;
    omni_status st = omni_open_and_prefill(&s, a, a->n_predict, intr);
    if (!st) st = session_generate(&s, a->n_predict, 0, NULL, NULL);
    if (!st) {
        fputc('\n', stdout);
        fflush(stdout);
        session_print_perf(&s);
    }
    session_close(&s);
    return st;
}

omni_status cmd_logits(const omni_args *a, volatile int *intr) {
    if (!a->out && a->top_n <= 0) return omni_fail(OMNI_ERR_USAGE, "logits: give -o FILE and/or --top N");
    omni_session s;
    omni_status st = omni_open_and_prefill(&s, a, 0, intr);
    int V = st ? 0 : s.cfg->vocab;
    if (!st && a->out) {
        FILE *f = fopen(a->out, "wb");
        if (!f) st = omni_fail(OMNI_ERR_INPUT, "cannot write %s", a->out);
        else {
            if (fwrite(s.logits, sizeof(float), (size_t)V, f) != (size_t)V) st = omni_fail(OMNI_ERR_RUNTIME, "write failed: %s", a->out);
            if (fclose(f) != 0 && !st) st = omni_fail(OMNI_ERR_RUNTIME, "write failed: %s", a->out);
        }
    }
    if (!st && a->top_n > 0) {
        int k = a->top_n < V ? a->top_n : V;
        int *idx = malloc(sizeof(int) * k);
        float *val = malloc(sizeof(float) * k);
        if (!idx || !val) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
        else {
            op_topk(s.logits, V, k, idx, val);
            for (int i = 0; i < k; i++) printf("%d %.6f\n", idx[i], val[i]);
        }
        free(idx);
        free(val);
    }
    if (!st) session_print_perf(&s);
    session_close(&s);
    return st;
}

omni_status cmd_tokenize(const omni_args *a, volatile int *intr) {
    (void)intr;
    char dir[4096], path[4200], *text = NULL;
    llm_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n = 0, bad = 0;
    omni_status st = omni_args_prompt(a, &text);
    if (!st) st = omni_resolve_model(a->model, dir, sizeof dir);
    if (!st) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        st = llm_tokenizer_load(path, &tok);
    }
    if (!st) st = llm_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n, &bad);
    if (!st) {
        if (bad) fprintf(stderr, "warning: input contains %d invalid UTF-8 sequence(s), replaced by U+FFFD\n", bad);
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    free(text);
    llm_tokenizer_free(tok);
    return st;
}
