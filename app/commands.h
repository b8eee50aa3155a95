/* commands.h - the table of omni commands; each lives in its own cmd_*.c file. */
#ifndef OMNI_APP_COMMANDS_H
#define OMNI_APP_COMMANDS_H

#include "app/args.h"
#include "app/media.h"
#include "app/session.h"

typedef struct {
    const char *name;
    void (*defaults)(omni_args *a);                    /* command-specific defaults before parsing */
    omni_status (*run)(const omni_args *a, volatile int *interrupted);
} omni_command;

const omni_command *omni_find_command(const char *name);
/* The command a mistyped word most likely meant ("generat", "Chat", "gen"), or NULL. */
const char *omni_suggest_command(const char *word);

/* Prompt text from -p, -f or the first positional argument (malloc'ed); NULL + message if none. */
omni_status omni_args_prompt(const omni_args *a, char **out);

/* Shared by generate/logits/ocr/ask: session_open (n_seqs sequences at once), the (templated) prompt tokenized,
 * the args' media encoded into items[] (room for 2 * OMNI_MAX_MEDIA), the expanded prompt in *p, and the main
 * cache made for the prompt + `extra` tokens (at least -c). The caller frees p, the items and the session. */
omni_status omni_open_prompt(omni_session *s, const omni_args *a, int extra, int n_seqs, volatile int *interrupted,
                             media_prompt *p, media_item *items);
/* The next prompt of `a` on a session omni_open_prompt opened (same model, media settings and -c; omni ocr's next
 * image): the main cache's conversation is cleared first. */
omni_status omni_next_prompt(omni_session *s, const omni_args *a, int extra, media_prompt *p, media_item *items);
void omni_free_items(media_item *items, int n);

omni_status cmd_generate(const omni_args *a, volatile int *interrupted);
omni_status cmd_generate_compare(const omni_args *a, volatile int *interrupted); /* generate --compare MODE */
omni_status cmd_chat(const omni_args *a, volatile int *interrupted);
omni_status cmd_tokenize(const omni_args *a, volatile int *interrupted);
omni_status cmd_logits(const omni_args *a, volatile int *interrupted);
omni_status cmd_eval(const omni_args *a, volatile int *interrupted);
omni_status cmd_ocr(const omni_args *a, volatile int *interrupted);
omni_status cmd_ask(const omni_args *a, volatile int *interrupted);
omni_status cmd_bench(const omni_args *a, volatile int *interrupted);
omni_status cmd_serve(const omni_args *a, volatile int *interrupted);
omni_status cmd_demo(const omni_args *a, volatile int *interrupted); /* app/cmd_demo.c */

#endif
