/* commands.c - command table and shared helpers of the command implementations. */
#define _POSIX_C_SOURCE 200809L
#include "app/commands.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "llm/config.h"

static void no_defaults(omni_args *a) { (void)a; }

static void generate_defaults(omni_args *a) { (void)a; }

void ocr_defaults(omni_args *a);
void ask_defaults(omni_args *a);
void bench_defaults(omni_args *a);
void serve_defaults(omni_args *a);
void demo_defaults(omni_args *a);

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
    {"demo", demo_defaults, cmd_demo},
};

const omni_command *omni_find_command(const char *name) {
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (!strcmp(g_commands[i].name, name)) return &g_commands[i];
    return NULL;
}

/* Edit distance of a and b (case-insensitive), capped at 3. */
static int distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 32 || nb > 32) return 3;
    int row[33];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int best = diag + !same;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb] < 3 ? row[nb] : 3;
}

const char *omni_suggest_command(const char *word) {
    const char *best = NULL;
    int best_d = 3;
    for (size_t i = 0; word && i < sizeof g_commands / sizeof g_commands[0]; i++) {
        const char *name = g_commands[i].name;
        int d = distance(word, name);
        if (strlen(word) >= 3 && !strncasecmp(name, word, strlen(word))) d = 1; /* a prefix: "gen" */
        if (d < best_d) best = name, best_d = d;
    }
    return best;
}

omni_status omni_args_prompt(const omni_args *a, char **out) {
    *out = NULL;
    if (a->prompt_file) { /* size cap, NUL bytes refused as they arrive: /dev/zero or /dev/urandom end at once */
        omni_read_params p = omni_read_default_params();
        p.max_bytes = a->max_text_bytes > 0 ? (size_t)a->max_text_bytes : 0;
        p.reject_nul = 1;
        p.allow_stdin = 1;
        omni_status st = omni_read_file_ex(a->prompt_file, &p, OMNI_ERR_INPUT, out, NULL);
        if (st) return st;
    } else if (a->prompt && a->max_text_bytes > 0 && strlen(a->prompt) > (size_t)a->max_text_bytes) {
        return omni_fail(OMNI_ERR_USAGE, "the prompt is %zu bytes, over the limit of %lld (--max-text-bytes)",
                         strlen(a->prompt), (long long)a->max_text_bytes);
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
