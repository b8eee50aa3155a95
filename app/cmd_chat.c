/* cmd_chat.c - `omni chat`: multi-turn REPL; the conversation history stays in the KV cache, each turn only
 * feeds its new tokens. One line is one message (app/chat_line.h). /image and /audio check their file when they
 * are given (header only) and attach it to the next message; /clear forgets the history; /quit, /exit or end of
 * input leave. Ctrl+C during an answer stops that answer and keeps the history; at the prompt it leaves (130). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat_line.h"
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

/* Media attached with /image and /audio since the last turn (paths are owned copies; tokens from the headers,
 * -1 for audio whose length the container does not state). */
typedef struct {
    char *img[OMNI_MAX_MEDIA], *aud[OMNI_MAX_MEDIA];
    int img_tok[OMNI_MAX_MEDIA], aud_tok[OMNI_MAX_MEDIA];
    int n_img, n_aud;
} pending_media;

static void pending_clear(pending_media *p) {
    for (int i = 0; i < p->n_img; i++) free(p->img[i]);
    for (int i = 0; i < p->n_aud; i++) free(p->aud[i]);
    p->n_img = p->n_aud = 0;
}

/* /image FILE, /audio FILE: the file is checked now (exists, readable, a supported format, within the limits), so
 * a bad one is reported at once and the others stay attached. */
static void attach(omni_session *s, pending_media *pm, int img, const char *path) {
    int *cnt = img ? &pm->n_img : &pm->n_aud, tok = 0;
    if (*cnt >= OMNI_MAX_MEDIA) {
        fprintf(stderr, "error: too many %s for one message (max %d)\n", img ? "images" : "audio files", OMNI_MAX_MEDIA);
        return;
    }
    omni_status st = img ? media_count_image(s->media, path, &tok) : media_count_audio(s->media, path, &tok);
    char *copy = st ? NULL : strdup(path);
    if (st || !copy) {
        fprintf(stderr, "error: %s\n", st ? omni_last_error() : "out of memory");
        return;
    }
    (img ? pm->img : pm->aud)[*cnt] = copy;
    (img ? pm->img_tok : pm->aud_tok)[(*cnt)++] = tok;
    if (tok >= 0) fprintf(stderr, "%s %s loaded (%d %s tokens)\n", path, img ? "image" : "audio", tok,
                          img ? "visual" : "audio");
    else fprintf(stderr, "%s audio loaded\n", path);
}

/* Encode the pending media: images first, then audio, matching the turn's part order (audio, images, text) by
 * kind, which is all that pad expansion needs. */
static omni_status encode_pending(omni_session *s, pending_media *p, media_item *m) {
    omni_status st = OMNI_OK;
    int k = 0;
    for (int i = 0; !st && i < p->n_img; i++) st = media_encode_image(s->media, p->img[i], &m[k++]);
    if (!st) st = media_encode_audios(s->media, (const char *const *)p->aud, p->n_aud, &m[k]); /* one batch */
    return st;
}

/* The turn must fit what is left of the context (tokens from the text and the media headers), checked before
 * any encoder or prefill runs. */
static omni_status check_room(omni_session *s, int n_ids, const pending_media *pm) {
    int64_t total = n_ids - pm->n_img - pm->n_aud, used = llm_engine_conv_len(s->engine, s->conv);
    int aud_tok[OMNI_MAX_MEDIA]; /* the clips as encode_pending encodes them: one batch padded to the longest */
    omni_status st = pm->n_aud ? media_count_audios(s->media, (const char *const *)pm->aud, pm->n_aud, aud_tok) : OMNI_OK;
    if (st) return st;
    for (int i = 0; i < pm->n_img; i++) total += pm->img_tok[i];
    for (int i = 0; i < pm->n_aud; i++) total += aud_tok[i] > 0 ? aud_tok[i] : 1;
    if (used + total + 1 > s->ctx)
        return omni_fail(OMNI_ERR_USAGE, "message (%lld tokens incl. media) does not fit the context: %lld of %d "
                         "tokens used (/clear, or raise -c)", (long long)total, (long long)used, s->ctx);
    return OMNI_OK;
}

/* One turn. *in_history: the turn reached the conversation (the system message is then in it). */
static omni_status chat_turn(omni_session *s, const char *line, int first, const char **prefix, pending_media *pm,
                             int *in_history) {
    int n_media = pm->n_img + pm->n_aud, n = 0;
    media_item media[2 * OMNI_MAX_MEDIA] = {{0}};
    media_prompt p = {0};
    int32_t *ids = NULL;
    llm_finish fin = LLM_FINISH_NONE;
    *in_history = 0;
    char *text = turn_text(*prefix, first ? s->args.system : NULL, line, pm->n_img, pm->n_aud);
    omni_status st = text ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = session_tokenize(s, text, &ids, &n);
    free(text);
    if (!st) st = check_room(s, n, pm);
    if (!st) st = encode_pending(s, pm, media);
    pending_clear(pm);
    if (!st) st = media_prompt_build(s->media, ids, n, media, n_media, &p);
    free(ids);
    if (!st) {
        st = session_turn(s, &p, s->args.n_predict, 1, NULL, NULL, &fin);
        *in_history = !st;
    }
    media_prompt_free(&p);
    omni_free_items(media, n_media);
    if (*in_history) {
        *prefix = fin == LLM_FINISH_EOS ? "\n" : "<|im_end|>\n"; /* close the assistant turn if it was cut short */
        fputc('\n', stdout);
        fflush(stdout);
    }
    return st;
}

static void print_help(void) {
    fprintf(stderr, "Running in chat mode, available commands:\n"
                    "  /image <path>    attach an image to the next message\n"
                    "  /audio <path>    attach an audio file to the next message\n"
                    "  /clear           clear the chat history\n"
                    "  /help            this list\n"
                    "  /quit or /exit   leave\n"
                    "  Ctrl+C stops an answer (the history is kept); at the prompt it leaves\n");
}

omni_status cmd_chat(const omni_args *a, volatile int *intr) {
    omni_session s;
    omni_status st = session_open(&s, a, 1, 0, 0);
    s.interrupted = intr;
    if (!st) media_encoder_set_interrupt(s.media, intr);
    if (!st) st = session_kv_init(&s, a->ctx);
    char *line = st ? NULL : malloc(CHAT_MAX_LINE);
    if (!st && !line) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (st) {
        session_close(&s);
        return st;
    }
    print_help();
    const char *prefix = "";
    int first = 1;
    pending_media pm = {0};
    while (!st && !*intr) {
        fprintf(stderr, "\n> ");
        fflush(stderr);
        size_t len = 0;
        chat_read r = chat_read_line(stdin, line, CHAT_MAX_LINE, &len);
        if (r == CHAT_READ_ERROR) { /* stdin a directory, a read error: not a quiet end of input */
            st = omni_fail(OMNI_ERR_INPUT, "cannot read standard input: %s", strerror(errno ? errno : EIO));
            break;
        }
        if (r == CHAT_READ_EOF || r == CHAT_READ_INTERRUPTED) break;
        if (r == CHAT_READ_TOO_LONG) {
            fprintf(stderr, "error: the message is %zu bytes, over the limit of %zu (one line is one message); "
                    "not sent\n", len, CHAT_MAX_LINE - 1);
            continue;
        }
        if (r == CHAT_READ_ENDLESS) {
            st = omni_fail(OMNI_ERR_INPUT, "standard input: a line of more than %zu bytes with no end (binary data?); "
                           "stopping", len);
            break;
        }
        if (r == CHAT_READ_BINARY) { /* a NUL byte (binary input) would cut the message there without a word */
            fprintf(stderr, "error: the message holds a NUL byte at byte %zu; not sent\n", len);
            continue;
        }
        chat_cmd c = chat_parse_line(line);
        if (c.kind == CHAT_EMPTY) continue;
        if (c.kind == CHAT_QUIT) break;
        if (c.kind == CHAT_HELP) print_help();
        else if (c.kind == CHAT_BAD) fprintf(stderr, "error: '%.60s': %s\n", line + strspn(line, " \t"), c.arg);
        else if (c.kind == CHAT_IMAGE || c.kind == CHAT_AUDIO) attach(&s, &pm, c.kind == CHAT_IMAGE, c.arg);
        else if (c.kind == CHAT_CLEAR) {
            llm_engine_conv_clear(s.engine, s.conv);
            pending_clear(&pm);
            prefix = "";
            first = 1;
            fprintf(stderr, "Chat history cleared\n");
        } else {
            int in_history = 0;
            st = chat_turn(&s, c.arg, first, &prefix, &pm, &in_history);
            if (in_history) first = 0; /* --system stays until a turn gets into the history */
            if (*intr) { /* Ctrl+C stopped this answer (or its encoding): the REPL goes on */
                fprintf(stderr, "\n[answer stopped]\n");
                *intr = 0;
                st = OMNI_OK;
            } else if (st == OMNI_ERR_USAGE || st == OMNI_ERR_INPUT || st == OMNI_ERR_UNSUPPORTED) {
                fprintf(stderr, "error: %s\n", omni_last_error()); /* context full, a bad media file...: go on */
                st = OMNI_OK;
            }
        }
    }
    pending_clear(&pm);
    free(line);
    if (!st) session_print_perf(&s);
    session_close(&s);
    return st;
}
