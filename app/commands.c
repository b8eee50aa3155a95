/* commands.c - command table and shared helpers of the command implementations. */
#define _POSIX_C_SOURCE 200809L
#include "app/commands.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "llm/config.h"

static void no_defaults(omni_args *a) { (void)a; }

static void generate_defaults(omni_args *a) { (void)a; }

void ocr_defaults(omni_args *a);
void ask_defaults(omni_args *a);
void bench_defaults(omni_args *a);
void serve_defaults(omni_args *a);

static const omni_command g_commands[] = {
    {"generate", generate_defaults, cmd_generate},
    {"chat", no_defaults, cmd_chat},
    {"tokenize", no_defaults, cmd_tokenize},
    {"logits", no_defaults, cmd_logits},
    {"eval", no_defaults, cmd_eval},
    {"ocr", ocr_defaults, cmd_ocr},
    {"ask", ask_defaults, cmd_ask},
    {"bench", bench_defaults, cmd_bench},
    {"serve", serve_defaults, cmd_serve},
};

const omni_command *omni_find_command(const char *name) {
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (!strcmp(g_commands[i].name, name)) return &g_commands[i];
    return NULL;
}

omni_status omni_args_prompt(const omni_args *a, char **out) {
    *out = NULL;
    if (a->prompt_file) {
        size_t len;
        *out = omni_read_file(a->prompt_file, &len);
        if (!*out) return omni_fail(OMNI_ERR_INPUT, "cannot read prompt file %s: %s", a->prompt_file, strerror(errno));
        if (memchr(*out, 0, len)) {
            free(*out);
            *out = NULL;
            return omni_fail(OMNI_ERR_INPUT, "prompt file %s contains NUL bytes (binary file?)", a->prompt_file);
        }
    } else if (a->prompt || a->n_positional > 0) {
        *out = strdup(a->prompt ? a->prompt : a->positional[0]);
        if (!*out) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    } else {
        return omni_fail(OMNI_ERR_USAGE, "no prompt given (-p TEXT or -f FILE)");
    }
    if (!(*out)[0]) {
        free(*out);
        *out = NULL;
        return omni_fail(OMNI_ERR_USAGE, "empty prompt");
    }
    return OMNI_OK;
}
