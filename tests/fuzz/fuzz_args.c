/* fuzz_args.c - the command line (app/args.c): byte 0 picks the command (every command, and one the table does
 * not know), the rest is argv split at NUL bytes. Parsing either fails with a message or gives consistent args (the
 * prompt joined from the words); -h/--help prints the command's help. */
#include "fuzz_util.h"

#include "app/args.h"

static const char *CMDS[] = {"generate", "chat", "tokenize", "logits", "ocr", "ask", "eval", "bench", "serve",
                             "unknown", "demo"};
#define N_CMDS (int)(sizeof CMDS / sizeof *CMDS)
#define UNKNOWN 9 /* not in the option table: unchecked */

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    char *buf = fuzz_str(d + 1, n - 1);
    char *argv[66];
    int argc = 0;
    argv[argc++] = "omni";
    int cmd = d[0] % N_CMDS;
    argv[argc++] = (char *)CMDS[cmd];
    for (size_t i = 0; i < n - 1 && argc < 65;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    omni_args a;
    omni_args_defaults(&a);
    omni_status st = omni_args_parse(&a, argv[1], argc, argv, 2);
    if (st == OMNI_OK && !a.help) {
        FUZZ_ASSERT(a.n_images <= OMNI_MAX_MEDIA && a.n_audios <= OMNI_MAX_MEDIA && a.n_positional <= OMNI_MAX_MEDIA);
        FUZZ_ASSERT(cmd == UNKNOWN || !(a.prompt && a.prompt_file));
        FUZZ_ASSERT(a.ctx >= 1 && (a.kv_window < 0 || (a.kv_window <= 256 && a.kv_window % 32 == 0)));
        FUZZ_ASSERT(a.image_min_tokens <= a.image_max_tokens || !a.image_max_tokens);
        FUZZ_ASSERT(a.top_p >= 0.f && a.top_p <= 1.f && a.temp >= 0.f && a.n_predict >= -1);
        if (a.prompt) (void)strlen(a.prompt);
    }
    if (st == OMNI_OK && a.help) { /* the command's help, as `omni CMD --help` prints it */
        static FILE *null_out;
        if (!null_out) null_out = fopen("/dev/null", "w");
        if (null_out) omni_args_usage(null_out, argv[1], &a);
    }
    omni_args_free(&a);
    free(buf);
    return 0;
}
