/* cmd_chat.c - `omni chat`: multi-turn REPL; the conversation history stays in the KV cache, each turn only
 * feeds its new tokens. Commands: /clear (forget history), /quit or /exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/session.h"
#include "llm/prompt.h"

/* Text of one user turn; `prefix` closes the previous assistant turn as the template would have it. */
static char *turn_text(const char *prefix, const char *system, const char *user) {
    char *body = llm_prompt_simple(system, user, 0, 0);
    if (!body) return NULL;
    size_t n = strlen(prefix) + strlen(body) + 1;
    char *t = malloc(n);
    if (t) snprintf(t, n, "%s%s", prefix, body);
    free(body);
    return t;
}

static omni_status chat_turn(omni_session *s, const char *line, int first, const char **prefix) {
    char *text = turn_text(*prefix, first ? s->args.system : NULL, line);
    if (!text) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int32_t *ids = NULL, *out = NULL;
    int n = 0, n_out = 0;
    omni_status st = session_tokenize(s, text, &ids, &n);
    free(text);
    if (!st) st = session_eval_prompt(s, ids, n, NULL, 0);
    free(ids);
    if (!st) st = session_generate(s, s->args.n_predict, 1, &out, &n_out);
    if (!st) {
        int ended = n_out > 0 && llm_config_is_eos(s->cfg, out[n_out - 1]);
        *prefix = ended ? "\n" : "<|im_end|>\n"; /* close the assistant turn if it was cut short */
        fputc('\n', stdout);
        fflush(stdout);
    }
    free(out);
    return st;
}

omni_status cmd_chat(const omni_args *a, volatile int *intr) {
    omni_session s;
    omni_status st = session_open(&s, a);
    s.interrupted = intr;
    if (!st) st = session_kv_init(&s, a->ctx);
    if (st) {
        session_close(&s);
        return st;
    }
    fprintf(stderr, "Running in chat mode, available commands:\n  /clear      clear the chat history\n"
                    "  /quit or /exit  leave\n");
    char line[65536];
    const char *prefix = "";
    int first = 1;
    while (!st && !*intr) {
        fprintf(stderr, "\n> ");
        fflush(stderr);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/clear")) {
            kv_seq_clear(s.kv, s.seq);
            prefix = "";
            first = 1;
            fprintf(stderr, "Chat history cleared\n");
            continue;
        }
        st = chat_turn(&s, line, first, &prefix);
        first = 0;
        if (st == OMNI_ERR_USAGE) { /* e.g. context full or bad input: report, keep the REPL alive */
            fprintf(stderr, "error: %s\n", omni_last_error());
            st = OMNI_OK;
        }
    }
    if (!st) session_print_perf(&s);
    session_close(&s);
    return st;
}
