/* cmd_chat.c - `omni chat`: multi-turn REPL; the conversation history stays in the KV cache, each turn only
 * feeds its new tokens. Commands: /clear (forget history), /quit or /exit. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/media.h"
#include "app/session.h"
#include "llm/prompt.h"

/* Text of one user turn; `prefix` closes the previous assistant turn as the template would have it. */
static char *turn_text(const char *prefix, const char *system, const char *user, int n_img, int n_aud) {
    char *body = llm_prompt_simple(system, user, n_img, n_aud);
    if (!body) return NULL;
    size_t n = strlen(prefix) + strlen(body) + 1;
    char *t = malloc(n);
    if (t) snprintf(t, n, "%s%s", prefix, body);
    free(body);
    return t;
}

/* Media attached with /image and /audio since the last turn (paths are owned copies). */
typedef struct {
    char *img[OMNI_MAX_MEDIA], *aud[OMNI_MAX_MEDIA];
    int n_img, n_aud;
} pending_media;

static void pending_clear(pending_media *p) {
    for (int i = 0; i < p->n_img; i++) free(p->img[i]);
    for (int i = 0; i < p->n_aud; i++) free(p->aud[i]);
    p->n_img = p->n_aud = 0;
}

/* Encode the pending media: images first, then audio, matching the turn's part order (audio, images, text) by
 * kind, which is all that pad expansion needs. */
static omni_status encode_pending(omni_session *s, pending_media *p, media_item *m) {
    omni_status st = OMNI_OK;
    int k = 0;
    for (int i = 0; !st && i < p->n_img; i++) st = media_encode_image(s->media, p->img[i], &m[k++]);
    for (int i = 0; !st && i < p->n_aud; i++) st = media_encode_audio(s->media, p->aud[i], &m[k++]);
    return st;
}

static omni_status chat_turn(omni_session *s, const char *line, int first, const char **prefix, pending_media *pm) {
    int n_media = pm->n_img + pm->n_aud;
    media_item media[2 * OMNI_MAX_MEDIA] = {{0}};
    omni_status st = encode_pending(s, pm, media);
    char *text = st ? NULL : turn_text(*prefix, first ? s->args.system : NULL, line, pm->n_img, pm->n_aud);
    pending_clear(pm);
    if (!st && !text) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int32_t *ids = NULL;
    int n = 0;
    llm_finish fin = LLM_FINISH_NONE;
    media_prompt p = {0};
    if (!st) st = session_tokenize(s, text, &ids, &n);
    free(text);
    if (!st) st = media_prompt_build(s->media, ids, n, media, n_media, &p);
    free(ids);
    if (!st) st = session_turn(s, &p, s->args.n_predict, 1, NULL, NULL, &fin);
    media_prompt_free(&p);
    omni_free_items(media, n_media);
    if (!st) {
        *prefix = fin == LLM_FINISH_EOS ? "\n" : "<|im_end|>\n"; /* close the assistant turn if it was cut short */
        fputc('\n', stdout);
        fflush(stdout);
    }
    return st;
}

omni_status cmd_chat(const omni_args *a, volatile int *intr) {
    omni_session s;
    omni_status st = session_open(&s, a, 1, 0, 0);
    s.interrupted = intr;
    if (!st) st = session_kv_init(&s, a->ctx);
    if (st) {
        session_close(&s);
        return st;
    }
    fprintf(stderr, "Running in chat mode, available commands:\n  /image <path>    attach an image to the next message\n"
                    "  /audio <path>    attach an audio file to the next message\n  /clear           clear the chat history\n"
                    "  /quit or /exit   leave\n");
    char line[65536];
    const char *prefix = "";
    int first = 1;
    pending_media pm = {0};
    while (!st && !*intr) {
        fprintf(stderr, "\n> ");
        fflush(stderr);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strncmp(line, "/image", 6) || !strncmp(line, "/audio", 6)) {
            int img = line[1] == 'i';
            const char *path = line + 6;
            while (*path == ' ') path++;
            if (!*path || (line[6] && line[6] != ' ')) {
                fprintf(stderr, "ERR: Missing media filename\n");
                continue;
            }
            int *cnt = img ? &pm.n_img : &pm.n_aud;
            if (*cnt >= OMNI_MAX_MEDIA) {
                fprintf(stderr, "ERR: too many media items for one turn\n");
                continue;
            }
            (img ? pm.img : pm.aud)[(*cnt)++] = strdup(path);
            fprintf(stderr, "%s %s loaded\n", path, img ? "image" : "audio");
            continue;
        }
        if (!strcmp(line, "/clear")) {
            llm_engine_conv_clear(s.engine, s.conv);
            pending_clear(&pm);
            prefix = "";
            first = 1;
            fprintf(stderr, "Chat history cleared\n");
            continue;
        }
        st = chat_turn(&s, line, first, &prefix, &pm);
        first = 0;
        if (st == OMNI_ERR_USAGE || st == OMNI_ERR_INPUT || st == OMNI_ERR_UNSUPPORTED) {
            /* context full, a bad media file...: report, keep the REPL alive */
            fprintf(stderr, "error: %s\n", omni_last_error());
            st = OMNI_OK;
        }
    }
    pending_clear(&pm);
    if (!st) session_print_perf(&s);
    session_close(&s);
    return st;
}
