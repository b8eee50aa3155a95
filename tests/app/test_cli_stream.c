/* test_cli_stream.c - `omni generate` streams: with stdout on a pipe, answer bytes arrive while the program is
 * still generating (read them, then interrupt it with SIGINT: it must stop, print "Interrupted by user" and exit
 * 130). A normal run ends with the llama.cpp-shaped perf block and the KV line on stderr, nothing else on stdout.
 * An answer that cannot be written (full disk, closed stdout or pipe) fails with exit 4 and one error line. */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

static void interrupted_stream(void) {
    int out[2], err[2];
    if (pipe(out) || pipe(err)) return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        /* effectively endless: no EOS in this model's greedy path for this prompt, large -n and context */
        execl(OMNI_BIN, OMNI_BIN, "generate", "-m", MODEL, "-p", "Tell me everything.", "--raw", "-n", "200000",
              "-c", "200100", "--temp", "1.0", "--top-k", "0", "--top-p", "1", "-s", "7", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    char buf[256];
    ssize_t got = 0, r;
    while (got < 64 && (r = read(out[0], buf, sizeof buf)) > 0) got += r; /* tokens arrive while it runs */
    int still_running = waitpid(pid, NULL, WNOHANG) == 0;
    CHECK(got >= 64 && still_running, "streamed %zd bytes before exit (running: %d)", got, still_running);
    kill(pid, SIGINT);
    while (read(out[0], buf, sizeof buf) > 0) {}
    char ebuf[65536];
    ssize_t en = 0;
    while (en < (ssize_t)sizeof ebuf - 1 && (r = read(err[0], ebuf + en, sizeof ebuf - 1 - en)) > 0) en += r;
    ebuf[en] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130, "exit status %d after SIGINT", status);
    CHECK(strstr(ebuf, "Interrupted by user") != NULL, "no interruption message: %s", ebuf);
    close(out[0]);
    close(err[0]);
}

/* `sh -c "SCRIPT"` with "OMNI" in it standing for the binary and stderr kept in *err: the shell's exit code. */
static int sh(const char *script, char **err) {
    char cmd[8192], path[64], bin[4096];
    snprintf(path, sizeof path, "/tmp/omni_stream_%d.err", (int)getpid());
    snprintf(bin, sizeof bin, "%s", OMNI_BIN);
    char *q = cmd;
    for (const char *p = script; *p && q < cmd + sizeof cmd - 4200;)
        if (!strncmp(p, "OMNI", 4)) q += snprintf(q, 4200, "%s", bin), p += 4;
        else *q++ = *p++;
    *q = 0;
    char full[9000];
    snprintf(full, sizeof full, "( %s ) </dev/null 2>%s", cmd, path);
    int st = system(full);
    *err = omni_read_file(path, NULL);
    if (!*err) *err = calloc(1, 1);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Exit code of OMNI generate on a long answer piped into `head -c1`; `pre` runs first in the same shell. */
static int early_close(const char *pre, char **err) {
    char script[4096], rc_path[64];
    snprintf(rc_path, sizeof rc_path, "/tmp/omni_stream_%d.rc", (int)getpid());
    snprintf(script, sizeof script, "%s { OMNI generate -m %s -p hi -n 3000 -c 4096 --temp 0; echo $? > %s; } | "
             "head -c1 >/dev/null", pre, MODEL, rc_path);
    sh(script, err);
    char *rc = omni_read_file(rc_path, NULL);
    int code = rc ? atoi(rc) : -1;
    free(rc);
    unlink(rc_path);
    return code;
}

/* The answer that cannot be written is an error (exit 4, one line naming stdout), never a silent 0: a full disk,
 * a closed stdout, a pipe closed early with SIGPIPE ignored (the generation stops: cancelled at the first failed
 * write). With SIGPIPE at its default the program ends by it, as `yes | head -c1` does, without error lines. A
 * closed stdout does not hand its number to the -o file (the logits file is the same as with stdout open). */
static void output_errors(void) {
    static const char *cases[] = {
        "OMNI generate -m " MODEL " -p hi -n 4 --temp 0 >/dev/full",
        "OMNI tokenize -m " MODEL " -p hello >/dev/full",
        "OMNI --version >/dev/full",
        "OMNI generate --help >/dev/full",
        "echo hi | OMNI chat -m " MODEL " -n 4 --temp 0 >/dev/full",
        "OMNI generate -m " MODEL " -p hi -n 4 --temp 0 >&-",
        /* session 7: --compare stops both answers at the first failed write (they ran to the end, then failed) */
        "OMNI generate -m " MODEL " -p hi -n 64 --temp 0 --kv bf16 --compare int2 >/dev/full",
        NULL, /* SIGPIPE ignored, pipe closed early */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err;
        int code = cases[i] ? sh(cases[i], &err) : early_close("trap '' PIPE;", &err);
        const char *what = cases[i] ? cases[i] : "SIGPIPE ignored | head -c1";
        CHECK(code == 4, "%s: exit %d, want 4 (stderr: %s)", what, code, err);
        const char *e = strstr(err, "error: ");
        CHECK(e && strstr(e, "standard output") && !strstr(e + 1, "error: ") && !strstr(err, "omni_perf"),
              "%s: want one error line about stdout, no perf block:\n%s", what, err);
        free(err);
    }
    char *err;
    int code = early_close("", &err);
    CHECK(code == 128 + SIGPIPE && !strstr(err, "error"), "default SIGPIPE: exit %d, stderr %s", code, err);
    free(err);
    char script[4096], ref_path[64], out_path[64];
    snprintf(ref_path, sizeof ref_path, "/tmp/omni_stream_%d.ref", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/omni_stream_%d.f32", (int)getpid());
    snprintf(script, sizeof script, "OMNI logits -m %s -p hi -o %s --no-perf", MODEL, ref_path);
    CHECK(sh(script, &err) == 0, "logits -o: %s", err);
    free(err);
    snprintf(script, sizeof script, "OMNI logits -m %s -p hi -o %s --top 3 --no-perf >&-", MODEL, out_path);
    code = sh(script, &err);
    size_t n = 0, n_ref = 0;
    char *lg = omni_read_file(out_path, &n), *ref = omni_read_file(ref_path, &n_ref);
    CHECK(code == 4 && lg && ref && n == n_ref && n > 0 && !memcmp(lg, ref, n),
          "logits -o with stdout closed: exit %d, %zu bytes (want %zu, same): %s", code, n, n_ref, err);
    free(lg), free(ref), free(err);
    unlink(out_path);
    unlink(ref_path);
}

int main(void) {
    signal(SIGPIPE, SIG_DFL); /* the children's default (a shell cannot reset a signal ignored when it started) */
    cli_result r = cli_run("generate -m %s -p 'Hello' -n 8 --temp 0", MODEL);
    CHECK(r.code == 0, "exit %d: %s", r.code, r.err);
    const char *lines[] = {"load time =", "prompt eval time =", "tokens per second)", "eval time =", "runs   (",
                           "total time =", "kv_cache: size =", "cells,", "layers,", "K (f32):", "V (f32):"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        CHECK(strstr(r.err, lines[i]) != NULL, "perf/KV block lacks '%s':\n%s", lines[i], r.err);
    CHECK(strstr(r.out, "omni_perf") == NULL && strstr(r.out, "kv_cache") == NULL, "logs on stdout: %s", r.out);
    cli_free(&r);
    r = cli_run("generate -m %s -p 'Hello' -n 8 --temp 0 --kv int2 --kv-window 0", MODEL);
    CHECK(r.code == 0 && strstr(r.err, "K (int2):") && strstr(r.err, "V (int2):"), "int2 KV line: %s", r.err);
    cli_free(&r);
    interrupted_stream();
    output_errors();
    return check_exit();
}
