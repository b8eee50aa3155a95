/* main.c - the `omni` program: command dispatch, usage, exit codes.
 *
 * Exit codes: 0 ok, 1 usage, 2 input file missing/unsupported, 3 model missing/invalid/unsupported,
 * 4 runtime error or out of memory, 130 interrupted (Ctrl+C). Answers go to stdout; logs, timings to stderr. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/commands.h"

static volatile int g_interrupted = 0;

/* First Ctrl+C: the running command stops within one prefill chunk, decode step, or encoder block/layer,
 * prints what it did (perf block) and the program exits 130 (chat: only the current answer stops). A second
 * Ctrl+C before that leaves at once, saying so. */
/* The checkpoint is mapped, not read: a model file truncated (or replaced in place) while omni runs makes the next
 * read of a missing page a bus error. One line and the model's exit code instead of a core dump. */
static void on_sigbus(int sig) {
    (void)sig;
    static const char msg[] = "\nerror: a memory-mapped model file was truncated or changed while omni used it "
                              "(bus error); restore the file and run again\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {}
    _exit(3);
}

static void on_sigint(int sig) {
    (void)sig;
    if (g_interrupted) {
        static const char msg[] = "\nInterrupted by user (second Ctrl+C)\n";
        if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {}
        _exit(130);
    }
    g_interrupted = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: omni <command> [options]      (omni --version)\n"
            "\n"
            "commands:\n"
            "  generate  -m MODEL -p TEXT    generate a reply (chat template unless --raw), streamed to stdout\n"
            "            ... --compare MODE  also answer with a MODE KV cache and compare (KV bytes, KL, top-1)\n"
            "  chat      -m MODEL            interactive multi-turn chat (/image, /audio, /clear, /quit)\n"
            "  tokenize  -m MODEL -p TEXT    print token ids of TEXT (no template)\n"
            "  logits    -m MODEL -p TEXT -o FILE [--top N]  last-position logits as float32\n"
            "  ocr       IMAGE... [-m MODEL] [--prompt TEXT]  read the text in images (greedy, 1024-2048 tokens\n"
            "                                within the model's limits; no -m: the embedded assets/models/ocr)\n"
            "  ask       [-m MODEL] --audio FILE \"question\"  answer a question about an audio file (Qwen3-Omni;\n"
            "                                no -m: the embedded assets/models/speech)\n"
            "  eval kl   -m MODEL --kv MODE --text FILE [--ctx N] [--chunk N] [--json]\n"
            "                                KL of a KV format's next-token distributions vs a BF16 cache\n"
            "  bench     -m MODEL | --random CONFIG [--kv bf16,int2] [--batch 1,8,48] [--ctx 4K,32K,128K]\n"
            "            [--kv-mem GiB] [-n STEPS] [--csv F] [--png F] [--png-size WxH] [--report F] [--baseline F]\n"
            "                                decode/prefill speed, KV memory, %% of roofline, sequences that fit\n"
            "  serve     -m MODEL [--host H] [--port N] [--api-key K] [--max-seqs N] [--kv-mem GiB]\n"
            "                                OpenAI-compatible HTTP server (see README: limits, --allow-files)\n"
            "  demo      [-m MODEL] [--kv-a bf16] [--kv-b int2] [--script FILE [--screenshot FILE.png]] [--size WxH]\n"
            "                                the side-by-side window: two KV formats answer at once, live charts\n"
            "\n"
            "omni COMMAND --help lists the options of one command.\n"
            "\n"
            "options:\n"
            "  -m, --model M      model directory, models--Org--Name cache dir, or Org/Name in the HF cache\n"
            "  -p, --prompt TEXT  prompt text            -f, --file F     read the prompt from a file (- = stdin)\n"
            "  -n, --n-predict N  tokens to generate (default 256, -1 = until EOS)\n"
            "  --temp T           temperature (default 0.7; 0 = greedy)\n"
            "  --top-k K          top-k (default 20; 0 = off)   --top-p P   top-p (default 0.8; 1 = off)\n"
            "  -s, --seed S       RNG seed (default 0; -1 = a random seed, printed)\n"
            "  --system TEXT      system message             --raw      no chat template\n"
            "  -c, --ctx-size N   KV capacity in tokens (default 4096)\n"
            "  -t, --threads N    CPU threads\n"
            "  --device cpu|cuda  (default cuda when a GPU is present and --kv is f32 or bf16, else cpu)\n"
            "  --image FILE       image input (repeatable)   --audio FILE   audio input (repeatable)\n"
            "  --image-min-tokens N, --image-max-tokens N   visual-token budget per image\n"
            "  --kv MODE          KV cache: f32 (default on CPU), bf16, int2, int4, kivi2, kivi4, k4v2 ...\n"
            "  --kv-window R      recent tokens kept unquantized (multiple of 32, 0..256; default 128)\n"
            "  --kv-sink N        first N tokens kept in BF16   --kv-rotate on|off   --kv-scale on|off\n"
            "  --kv-layers SPEC   per-layer KV formats, e.g. 0-3:int4,27:bf16\n"
            "  --no-perf          no timing block on stderr    -v, --verbose\n"
            "  --max-text-bytes N, --max-audio-seconds S, --max-image-mpixels MP   input limits (README)\n"
            "  --opt=value is the same as --opt value; -- ends the options\n"
            "\n"
            "exit codes: 0 ok, 1 usage, 2 bad input file, 3 bad/unsupported model, 4 runtime error, 130 interrupted\n");
}

/* OpenMP threads that spin between parallel regions halve prefill speed here (measured on 2 cores: 37 vs 69
 * tok/s at Qwen3-VL-2B shapes, bench/NOTES.md). libgomp reads OMP_WAIT_POLICY once, in its constructor, so the
 * passive policy is set from the executable's .preinit_array: those functions run before the initializers of
 * every shared library (libgomp included), in this process, so it also holds under valgrind, ld.so, or any
 * wrapper (no re-exec). A policy the user set is kept. */
static void prefer_passive_omp(int argc, char **argv, char **envp) {
    (void)argc, (void)argv, (void)envp;
    setenv("OMP_WAIT_POLICY", "passive", 0);
}
__attribute__((section(".preinit_array"), used)) static void (*const g_preinit)(int, char **, char **) =
    prefer_passive_omp;

/* A standard stream closed by the caller (`omni ... >&-`) would hand its number to the next file opened (-o FILE
 * would then also get the answer): each is held by /dev/null - read-only for stdout, so that writing the answer
 * still fails and is reported. */
static void hold_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            int got = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY); /* the lowest free number: fd */
            if (got > fd) close(got);
        }
}

/* The answer reached stdout? A full disk or a closed pipe (with SIGPIPE ignored) is an error, not a silent 0. */
static int stdout_failed(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    if (errno) fprintf(stderr, "error: cannot write to standard output: %s\n", strerror(errno));
    else fprintf(stderr, "error: cannot write to standard output\n");
    return 1;
}

/* One error line for a first word that is not a command: an option typed before the command, or a near miss. */
static int unknown_command(int argc, char **argv, int at) {
    const char *w = argv[at], *cmd = NULL, *like = omni_suggest_command(w);
    if (w[0] == '-' && w[1]) {
        for (int i = at + 1; i < argc && !cmd; i++)
            if (omni_find_command(argv[i])) cmd = argv[i];
        if (cmd) fprintf(stderr, "error: the command comes first: omni %s %s ... (see omni %s --help)\n", cmd, w, cmd);
        else fprintf(stderr, "error: '%s' is an option; the command comes first: omni COMMAND [options] (see omni "
                     "--help)\n", w);
    } else if (like) {
        fprintf(stderr, "error: unknown command '%s'; did you mean '%s'? (see omni --help)\n", w, like);
    } else {
        fprintf(stderr, "error: unknown command '%s' (see omni --help)\n", w);
    }
    return 1;
}

static int extra_word(const char *w, const char *why) {
    fprintf(stderr, "error: unexpected argument '%s' (%s)\n", w, why);
    return 1;
}

int main(int argc, char **argv) {
    hold_std_fds();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        if (argc >= 3 && omni_args_known_command(argv[2]) && omni_find_command(argv[2])) { /* omni help CMD */
            if (argc > 3) return extra_word(argv[3], "omni help takes one command");
            omni_args d;
            omni_args_defaults(&d);
            omni_find_command(argv[2])->defaults(&d);
            omni_args_usage(stdout, argv[2], &d);
            return stdout_failed() ? 4 : 0;
        }
        if (argc >= 3) return unknown_command(argc, argv, 2);
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : stdout_failed() ? 4 : 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, NULL);

    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        if (argc > 2) return extra_word(argv[2], "omni --version takes no arguments");
        printf("omni %s\n", OMNI_VERSION);
        return stdout_failed() ? 4 : 0;
    }
    const omni_command *cmd = omni_find_command(argv[1]);
    if (!cmd) return unknown_command(argc, argv, 1);
    omni_args a;
    omni_args_defaults(&a);
    cmd->defaults(&a);
    char cmdline[4096] = "omni"; /* the whole command line, for reports (cut at 4 KiB) */
    for (int i = 1; i < argc; i++) {
        size_t used = strlen(cmdline);
        snprintf(cmdline + used, sizeof cmdline - used, " %s", argv[i]);
    }
    a.command_line = cmdline;
    omni_status st = omni_args_parse(&a, cmd->name, argc, argv, 2);
    if (!st && a.help) {
        omni_args_usage(stdout, cmd->name, &a); /* parsing stopped at -h: the command's defaults */
        omni_args_free(&a);
        return stdout_failed() ? 4 : 0;
    }
    if (st) {
        fprintf(stderr, "error: %s\n", omni_last_error());
        omni_args_free(&a);
        return omni_status_exit_code(st);
    }
    if (a.verbose) omni_log_set_level(2);
    st = cmd->run(&a, &g_interrupted);
    omni_args_free(&a);
    if (g_interrupted) {
        fprintf(stderr, "\nInterrupted by user\n");
        return 130;
    }
    if (st) {
        fprintf(stderr, "error: %s\n", omni_last_error());
        return omni_status_exit_code(st);
    }
    return stdout_failed() ? 4 : 0;
}
