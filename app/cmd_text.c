/* cmd_text.c - the text commands: generate (and --compare), tokenize, logits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Encode every --image and --audio of the args: images first, then audio (all clips as one batch, as
 * transformers' processor takes them), each in the order given. */
static omni_status encode_args(omni_session *s, const omni_args *a, media_item *items) {
    omni_status st = OMNI_OK;
    int k = 0;
    for (int i = 0; !st && i < a->n_images; i++) st = media_encode_image(s->media, a->images[i], &items[k++]);
    if (!st) st = media_encode_audios(s->media, (const char *const *)a->audios, a->n_audios, &items[k]);
    return st;
}

/* -c is a hard cap: the prompt (media tokens counted from the files' headers) must fit the context, with room
 * for one answer token when the command generates. Decided before any encoder or prefill runs. */
static omni_status check_context(int n_tokens, int ctx, int generating) {
    if (n_tokens > ctx)
        return omni_fail(OMNI_ERR_USAGE, "prompt (%d tokens incl. media) longer than the context (%d; raise -c)",
                         n_tokens, ctx);
    if (generating && n_tokens == ctx)
        return omni_fail(OMNI_ERR_USAGE, "prompt (%d tokens incl. media) fills the context (%d): no room for an "
                         "answer (raise -c)", n_tokens, ctx);
    return OMNI_OK;
}

/* Tokens of the prompt once each placeholder is replaced by its file's tokens, from the headers. Audio whose
 * container does not state its length counts one token here (checked again after encoding). */
static omni_status count_prompt(omni_session *s, const omni_args *a, int n_ids, int *total) {
    *total = n_ids;
    omni_status st = OMNI_OK;
    for (int i = 0; !st && i < a->n_images; i++) {
        int k = 0;
        if (!(st = media_count_image(s->media, a->images[i], &k))) *total += k - 1;
    }
    int k[OMNI_MAX_MEDIA]; /* the clips as encode_args encodes them: one batch padded to the longest */
    if (!st && a->n_audios > 0) st = media_count_audios(s->media, a->audios, a->n_audios, k);
    for (int i = 0; !st && i < a->n_audios; i++) *total += k[i] > 0 ? k[i] - 1 : 0;
    return st;
}

/* The prompt `text` of `a` on an open session: tokenized, checked against the context (media counted from their
 * headers first), media encoded, expanded into *p; the main cache made on the first prompt, else its conversation
 * cleared (the next image of omni ocr). */
static omni_status session_prompt(omni_session *s, const omni_args *a, const char *text, int extra, media_prompt *p,
                                  media_item *items) {
    int32_t *ids = NULL;
    int n = 0, total = 0;
    omni_status st = media_check_support(s->model, a->n_images, a->n_audios);
    if (!st) st = session_tokenize(s, text, &ids, &n);
    if (!st && n == 0) st = omni_fail(OMNI_ERR_USAGE, "empty prompt");
    if (!st) st = media_check_placeholders(s->model, ids, n, a->n_images, a->n_audios);
    if (!st) st = count_prompt(s, a, n, &total);
    if (!st) st = check_context(total, a->ctx, extra != 0);
    if (!st) st = encode_args(s, a, items);
    if (!st) st = media_prompt_build(s->media, ids, n, items, a->n_images + a->n_audios, p);
    if (!st) st = check_context(p->n_tokens, a->ctx, extra != 0);
    if (!st) st = s->cache < 0 ? session_kv_init(s, a->ctx) : llm_engine_conv_clear(s->engine, s->conv);
    free(ids);
    return st;
}

omni_status omni_open_prompt(omni_session *s, const omni_args *a, int extra, int n_seqs, volatile int *intr,
                             media_prompt *p, media_item *items) {
    char *text = NULL;
    memset(p, 0, sizeof *p);
    memset(s, 0, sizeof *s); /* session_close must be safe when the prompt fails before session_open */
    omni_status st = build_prompt(a, &text);
    if (!st) st = session_open(s, a, n_seqs, 0, 0);
    s->interrupted = intr;
    if (!st) media_encoder_set_interrupt(s->media, intr);
    if (!st) st = session_prompt(s, a, text, extra, p, items);
    free(text);
    return st;
}

omni_status omni_next_prompt(omni_session *s, const omni_args *a, int extra, media_prompt *p, media_item *items) {
    char *text = NULL;
    memset(p, 0, sizeof *p);
    omni_status st = build_prompt(a, &text);
    if (!st) st = session_prompt(s, a, text, extra, p, items);
    free(text);
    return st;
}

void omni_free_items(media_item *items, int n) {
    for (int i = 0; i < n; i++) media_item_clear(&items[i]);
}

omni_status cmd_generate(const omni_args *a, volatile int *intr) {
    if (a->compare) return cmd_generate_compare(a, intr);
    omni_session s;
    media_prompt p;
    media_item items[2 * OMNI_MAX_MEDIA] = {{0}};
    omni_status st = omni_open_prompt(&s, a, a->n_predict, 1, intr, &p, items);
    if (!st) st = session_turn(&s, &p, a->n_predict, 0, NULL, NULL, NULL);
    if (!st || *intr) { /* Ctrl+C (encode, prefill or decode): what was done, then exit 130 */
        fputc('\n', stdout);
        fflush(stdout);
        session_print_perf(&s);
    }
    media_prompt_free(&p);
    omni_free_items(items, a->n_images + a->n_audios);
    session_close(&s);
    return st;
}

/* ---- logits ---------------------------------------------------------------------------------------------- */

typedef struct {
    float *logits;
    int got;
    llm_request_stats st;
} last_logits;

static void keep_logits(void *user, int id, int pos, const float *lg, int V) {
    last_logits *l = user;
    (void)id, (void)pos;
    memcpy(l->logits, lg, sizeof(float) * V);
    l->got = 1;
}

static void logits_done(void *user, int id, const llm_request_stats *st) {
    (void)id;
    ((last_logits *)user)->st = *st;
}

static omni_status write_logits(const omni_args *a, const float *lg, int V) {
    omni_status st = OMNI_OK;
    if (a->out) {
        FILE *f = fopen(a->out, "wb");
        if (!f) return omni_fail(OMNI_ERR_INPUT, "cannot write %s: %s", a->out, strerror(errno));
        errno = 0;
        if (fwrite(lg, sizeof(float), (size_t)V, f) != (size_t)V || fflush(f) != 0)
            st = omni_fail(OMNI_ERR_RUNTIME, "cannot write %s: %s", a->out, strerror(errno ? errno : EIO));
        if (fclose(f) != 0 && !st)
            st = omni_fail(OMNI_ERR_RUNTIME, "cannot write %s: %s", a->out, strerror(errno ? errno : EIO));
    }
    if (!st && a->top_n > 0) {
        int k = a->top_n < V ? a->top_n : V;
        int *idx = malloc(sizeof(int) * k);
        float *val = malloc(sizeof(float) * k);
        if (!idx || !val) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
        else {
            op_topk(lg, V, k, idx, val);
            for (int i = 0; i < k; i++) printf("%d %.6f\n", idx[i], val[i]);
        }
        free(idx);
        free(val);
    }
    return st;
}

omni_status cmd_logits(const omni_args *a, volatile int *intr) {
    if (!a->out && a->top_n <= 0) return omni_fail(OMNI_ERR_USAGE, "logits: give -o FILE and/or --top N");
    /* A bad -o path fails before the model runs; the probe appends (an existing file keeps its bytes until the
     * logits are there to replace them) and a file it created goes again when the run fails. */
    struct stat sb;
    int existed = a->out && stat(a->out, &sb) == 0;
    FILE *probe = a->out ? fopen(a->out, "ab") : NULL;
    if (a->out && !probe) return omni_fail(OMNI_ERR_INPUT, "cannot write %s: %s", a->out, strerror(errno));
    if (probe) fclose(probe);
    omni_session s;
    media_prompt p;
    media_item items[2 * OMNI_MAX_MEDIA] = {{0}};
    last_logits l = {NULL, 0, {0}};
    omni_status st = omni_open_prompt(&s, a, 0, 1, intr, &p, items);
    int id = 0;
    if (!st && !(l.logits = malloc(sizeof(float) * s.cfg->vocab))) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) {
        llm_request r = llm_request_default_params();
        media_prompt_request(&p, &r);
        r.max_tokens = 0, r.cache = s.cache, r.conv = s.conv, r.logits = LLM_LOGITS_LAST;
        r.cb = (llm_callbacks){NULL, keep_logits, logits_done, &l};
        st = llm_engine_submit(s.engine, &r, &id);
    }
    if (!st) {
        session_run(&s, &id, 1);
        session_add_stats(&s, &l.st);
        if (l.st.status) st = omni_fail(l.st.status, "%s", l.st.error);
    }
    if (!st && !*intr) st = l.got ? write_logits(a, l.logits, s.cfg->vocab) : omni_fail(OMNI_ERR_RUNTIME, "no logits");
    if (!st) session_print_perf(&s);
    if ((st || *intr) && a->out && !existed) unlink(a->out); /* no logits: no new empty file left behind */
    free(l.logits);
    media_prompt_free(&p);
    omni_free_items(items, a->n_images + a->n_audios);
    session_close(&s);
    return st;
}

omni_status cmd_tokenize(const omni_args *a, volatile int *intr) {
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
    if (!st && !*intr) { /* Ctrl+C while encoding (a large -f): no ids, exit 130 */
        if (bad) fprintf(stderr, "warning: input contains %d invalid UTF-8 sequence(s), replaced by U+FFFD\n", bad);
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    free(text);
    llm_tokenizer_free(tok);
    return st;
}
