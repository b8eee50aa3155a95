/* commands.h - the table of omni commands; each lives in its own cmd_*.c file. */
#ifndef OMNI_APP_COMMANDS_H
#define OMNI_APP_COMMANDS_H

#include "app/args.h"

typedef struct {
    const char *name;
    void (*defaults)(omni_args *a);                    /* command-specific defaults before parsing */
    omni_status (*run)(const omni_args *a, volatile int *interrupted);
} omni_command;

const omni_command *omni_find_command(const char *name);

/* Prompt text from -p, -f or the first positional argument (malloc'ed); NULL + message if none. */
omni_status omni_args_prompt(const omni_args *a, char **out);

omni_status cmd_generate(const omni_args *a, volatile int *interrupted);
omni_status cmd_chat(const omni_args *a, volatile int *interrupted);
omni_status cmd_tokenize(const omni_args *a, volatile int *interrupted);
omni_status cmd_logits(const omni_args *a, volatile int *interrupted);
omni_status cmd_eval(const omni_args *a, volatile int *interrupted);

#endif
