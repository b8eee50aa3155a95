/* test_cli_session.c - what a session does with the context and with Ctrl+C (issue 15 items 1, 2, 3, 6, 7, 10,
 * and ocr from item 15): -c is a hard cap decided before any encoder or prefill; Ctrl+C during prefill stops
 * within a chunk with the perf block and exit 130, a second one leaves at once saying so; Ctrl+C in chat stops
 * the answer and keeps the REPL and its history; one chat line is one message however long (or one clear error);
 * a failed first turn keeps --system; a chat line with a NUL byte is refused whole, so are mistyped commands;
 * endless input (/dev/zero) stops chat, so does unreadable input (a directory);
 * /image checks its file when given and keeps the other attachments; ocr reads every good image of a list, with
 * "==> FILE <==" headers on stdout, and exits with the first failure's code; eval kl stopped by Ctrl+C prints its perf
 * block; tokenize stopped by Ctrl+C prints no ids; ocr of several images loads the model once. */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

#define TEXT_MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"
#define VIS OMNI_FIXTURES "/vision"
#define GUARD "timeout -s KILL 120"

static char g_tmp[4096], g_vl[4300];

/* A running omni with pipes on stdin, stdout, stderr. */
typedef struct {
    pid_t pid;
    int in, out, err;
    char obuf[1 << 16], ebuf[1 << 16];
    size_t on, en;
} proc;

static void spawn(proc *p, char *const argv[]) {
    int i[2], o[2], e[2];
    memset(p, 0, sizeof *p);
    if (pipe(i) || pipe(o) || pipe(e)) return;
    p->pid = fork();
    if (p->pid == 0) {
        dup2(i[0], 0), dup2(o[1], 1), dup2(e[1], 2);
        close(i[1]), close(o[0]), close(e[0]);
        execv(OMNI_BIN, argv);
        _exit(127);
    }
    close(i[0]), close(o[1]), close(e[1]);
    p->in = i[1], p->out = o[0], p->err = e[0];
    fcntl(p->out, F_SETFL, O_NONBLOCK);
    fcntl(p->err, F_SETFL, O_NONBLOCK);
}

/* Read what is available for up to ms milliseconds, or until stdout holds `until` bytes more than `base`. */
static void pump(proc *p, int ms, size_t base, size_t until) {
    double t0 = omni_time_ms();
    while (omni_time_ms() - t0 < ms && (!until || p->on < base + until)) {
        struct pollfd f[2] = {{p->out, POLLIN, 0}, {p->err, POLLIN, 0}};
        if (poll(f, 2, 50) <= 0) continue;
        ssize_t r;
        if ((r = read(p->out, p->obuf + p->on, sizeof p->obuf - 1 - p->on)) > 0) p->on += (size_t)r;
        if ((r = read(p->err, p->ebuf + p->en, sizeof p->ebuf - 1 - p->en)) > 0) p->en += (size_t)r;
        p->obuf[p->on] = p->ebuf[p->en] = 0;
    }
}

/* Still running? (Does not reap it: finish() gets the exit status.) */
static int alive(pid_t pid) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

/* Read until stderr holds `needle` (or ms pass); 1 if it does. */
static int pump_err(proc *p, int ms, const char *needle) {
    double t0 = omni_time_ms();
    while (!strstr(p->ebuf, needle) && omni_time_ms() - t0 < ms && alive(p->pid))
        pump(p, 50, 0, 0);
    pump(p, 50, 0, 0);
    return strstr(p->ebuf, needle) != NULL;
}

/* Has the process installed its SIGINT handler (bit 2 of SigCgt in /proc/PID/status)? */
static int catches_sigint(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long mask = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "SigCgt: %llx", &mask) == 1) break;
    if (f) fclose(f);
    return (mask >> (SIGINT - 1)) & 1;
}

static void say(proc *p, const char *line) {
    if (write(p->in, line, strlen(line)) < 0) CHECK(0, "write to omni");
}

/* Wait for exit (reading everything), at most ms; returns the exit code (-1: killed / timed out). */
static int finish(proc *p, int ms) {
    close(p->in);
    double t0 = omni_time_ms();
    int status = 0;
    while (waitpid(p->pid, &status, WNOHANG) == 0) {
        if (omni_time_ms() - t0 > ms) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            break;
        }
        pump(p, 50, 0, 0);
    }
    pump(p, 100, 0, 0);
    close(p->out), close(p->err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    cli_result r = cli_run_prefix(GUARD, "%s", args);
    CHECK(r.code == code, "%s: exit %d, want %d (stderr: %s)", what, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1 && strstr(r.err, needle), "%s: want one stderr line with '%s':\n%s", what, needle, r.err);
    cli_free(&r);
}

/* A prompt file of n words. */
static const char *words_file(const char *name, int n) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) fprintf(f, "word%d ", i % 97);
    fclose(f);
    return path;
}

/* Item 1: -c is a hard cap, decided before encoders and prefill. */
static void context_cap(void) {
    char args[9000];
    snprintf(args, sizeof args, "generate -m %s -f %s -c 16 -n 4", TEXT_MODEL, words_file("p100.txt", 100));
    expect_fail("100 words with -c 16", 1, "longer than the context (16", args);
    /* the image's tokens (from its header) push the prompt over: refused before the image is decoded or encoded */
    snprintf(args, sizeof args, "generate -m %s -p hi --image %s/a_exact.png -c 20 -n 1", g_vl, VIS);
    expect_fail("image over the context", 1, "incl. media) longer than the context (20", args);
    /* generation stops at the cap: never more cells than -c */
    cli_result r = cli_run_prefix(GUARD, "generate -m %s -p hi -c 40 -n 200 --temp 0", TEXT_MODEL);
    const char *kv = strstr(r.err, "kv_cache: size =");
    int cells = -1;
    if (kv) sscanf(strchr(kv, '(') + 1, "%d", &cells);
    CHECK(r.code == 0 && cells > 0 && cells <= 40, "-c 40: exit %d, %d cells:\n%s", r.code, cells, r.err);
    cli_free(&r);
}

/* Item 3: Ctrl+C during a long prefill stops within a chunk, prints the perf block, exits 130. The signal is sent
 * once the prefill starts (the KV line is printed just before it), not after a fixed delay that a fast machine
 * could spend on the whole prompt; the perf block then shows where it stopped: a chunk boundary (512 tokens),
 * a few chunks in, far from the prompt's end. */
static void interrupt_prefill(void) {
    char *argv[] = {"omni", "generate", "-m", TEXT_MODEL, "-f", (char *)words_file("long.txt", 4000), "-c", "16384",
                    "-n", "4", "--raw", NULL};
    proc p;
    spawn(&p, argv);
    CHECK(pump_err(&p, 60000, "kv_cache:"), "no KV line before the prefill:\n%s", p.ebuf);
    CHECK(alive(p.pid), "finished before the interrupt (prefill too short?)");
    double t0 = omni_time_ms();
    kill(p.pid, SIGINT);
    int code = finish(&p, 60000);
    double ms = omni_time_ms() - t0;
    CHECK(code == 130, "exit %d after Ctrl+C during prefill:\n%s", code, p.ebuf);
    CHECK(ms < 30000, "took %.0f ms to stop (one chunk is 512 tokens)", ms);
    CHECK(strstr(p.ebuf, "prompt eval time") && strstr(p.ebuf, "Interrupted by user"), "no perf block / message:\n%s",
          p.ebuf);
    const char *pe = strstr(p.ebuf, "prompt eval time");
    double pms = 0;
    int done = -1;
    if (pe) sscanf(pe, "prompt eval time = %lf ms / %d tokens", &pms, &done);
    CHECK(done > 0 && done % 512 == 0 && done <= 4096, "stopped after %d prompt tokens (want a few 512-token chunks "
          "of the ~11600):\n%s", done, p.ebuf);
}

/* Item 3: a second Ctrl+C before the first has taken effect leaves at once and says so (it used to exit with no
 * message). The first one lands while the program waits for its prompt on stdin (-f -, kept open), where it
 * cannot take effect however long the test waits: no race with a prefill chunk ending first. */
static void interrupt_twice(void) {
    char *argv[] = {"omni", "generate", "-m", TEXT_MODEL, "-f", "-", "-n", "4", NULL};
    proc p;
    spawn(&p, argv);
    double t0 = omni_time_ms();
    while (!catches_sigint(p.pid) && omni_time_ms() - t0 < 30000) usleep(10000); /* its handler is in place */
    kill(p.pid, SIGINT);
    pump(&p, 300, 0, 0);
    CHECK(alive(p.pid), "the first Ctrl+C ended it before the second:\n%s", p.ebuf);
    for (int i = 0; i < 100 && alive(p.pid); i++) { /* the second (repeated: never merged) */
        kill(p.pid, SIGINT);
        pump(&p, 100, 0, 0);
    }
    int code = finish(&p, 60000);
    CHECK(code == 130 && strstr(p.ebuf, "Interrupted by user (second Ctrl+C)"), "two Ctrl+C: exit %d:\n%s", code,
          p.ebuf);
}

/* Run argv with Ctrl+C sent as soon as its handler is in place; the exit code (what it wrote in *p). */
static int interrupt_early(proc *p, char *const argv[]) {
    spawn(p, argv);
    double t0 = omni_time_ms();
    while (!catches_sigint(p->pid) && omni_time_ms() - t0 < 30000) usleep(10000);
    kill(p->pid, SIGINT);
    return finish(p, 120000);
}

/* Session 7: Ctrl+C stops eval kl with its perf block and exit 130 (it printed no perf block); from the load on,
 * every phase ends in the perf block. */
static void interrupt_eval(void) {
    char *argv[] = {"omni", "eval", "kl", "-m", TEXT_MODEL, "--kv", "int2", "--text",
                    (char *)words_file("eval.txt", 4000), NULL};
    proc p;
    int code = interrupt_early(&p, argv);
    CHECK(code == 130 && strstr(p.ebuf, "prompt eval time") && strstr(p.ebuf, "Interrupted by user") && !p.obuf[0],
          "eval kl + Ctrl+C: exit %d, out '%s':\n%s", code, p.obuf, p.ebuf);
}

/* Session 7: Ctrl+C while tokenize encodes a large file: exit 130 and no ids (it printed every id, then 130). */
static void interrupt_tokenize(void) {
    char *argv[] = {"omni", "tokenize", "-m", TEXT_MODEL, "-f", (char *)words_file("tok.txt", 150000), NULL};
    proc p;
    int code = interrupt_early(&p, argv);
    CHECK(code == 130 && !p.obuf[0] && strstr(p.ebuf, "Interrupted by user"), "tokenize + Ctrl+C: exit %d, out '%.60s'",
          code, p.obuf);
}

/* Item 2: Ctrl+C in chat stops the answer; the REPL goes on with its history. */
static void interrupt_chat(void) {
    char *argv[] = {"omni", "chat", "-m", TEXT_MODEL, "-n", "-1", "-c", "4096", "--temp", "1", "--top-k", "0",
                    "--top-p", "1", NULL};
    proc p;
    spawn(&p, argv);
    say(&p, "Tell me everything.\n");
    pump(&p, 30000, 0, 64); /* the answer streams */
    size_t first = p.on;
    CHECK(first >= 64 && alive(p.pid), "no streaming answer (%zu bytes)", first);
    kill(p.pid, SIGINT);
    CHECK(pump_err(&p, 30000, "[answer stopped]"), "no stop notice:\n%s", p.ebuf);
    size_t before = p.on;
    say(&p, "And then?\n");
    pump(&p, 30000, before, 16); /* a second answer streams: the REPL is alive */
    CHECK(p.on >= before + 16, "no second answer");
    size_t en = p.en;
    kill(p.pid, SIGINT);
    double t0 = omni_time_ms(); /* the second notice, then /quit at the prompt */
    while (!strstr(p.ebuf + en, "[answer stopped]") && omni_time_ms() - t0 < 30000 && alive(p.pid)) pump(&p, 50, 0, 0);
    say(&p, "/quit\n");
    int code = finish(&p, 30000);
    CHECK(code == 0, "chat exit %d after two stopped answers and /quit:\n%s", code, p.ebuf);
    const char *kv = strstr(p.ebuf, "kv_cache: size =");
    int cells = -1;
    if (kv) sscanf(strchr(kv, '(') + 1, "%d", &cells);
    CHECK(cells > 30, "the history is kept: %d cells at the end", cells); /* both turns and their answers */
}

/* Run chat with `input` on stdin; returns the result (stdin from a file). */
static cli_result chat(const char *model, const char *input, const char *extra) {
    char path[4200];
    snprintf(path, sizeof path, "%s/chat_in.txt", g_tmp);
    write_all(path, input, strlen(input));
    return cli_run_prefix(GUARD, "chat -m %s -n 2 --temp 0 %s < %s", model, extra, path);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *q = s; (q = strstr(q, needle)); q++) n++;
    return n;
}

/* Items 6 and 7: one line is one message; a failed first turn keeps --system. */
static void chat_lines(void) {
    size_t n = 200000; /* longer than the old 64 KiB line buffer: used to become 4 turns */
    char *in = malloc(n + 64);
    for (size_t i = 0; i < n; i++) in[i] = "abcdefgh "[i % 9];
    snprintf(in + n, 64, "\n/quit\n");
    cli_result r = chat(TEXT_MODEL, in, "");
    CHECK(r.code == 0 && count(r.err, "error:") == 1 && strstr(r.err, "does not fit the context"),
          "200 KB line: exit %d, %d errors (one message, one error):\n%.2000s", r.code, count(r.err, "error:"), r.err);
    cli_free(&r);
    free(in);
    n = (1 << 20) + 10; /* over the limit: refused as a whole, said once */
    in = malloc(n + 64);
    memset(in, 'x', n);
    snprintf(in + n, 64, "\nhi\n/quit\n");
    r = chat(TEXT_MODEL, in, "");
    CHECK(r.code == 0 && count(r.err, "error:") == 1 && strstr(r.err, "over the limit"), "2 MB line:\n%.1000s", r.err);
    cli_free(&r);
    free(in);
    /* a NUL byte in a line: refused whole, not cut at the NUL (found by review of the chat_line fuzz target) */
    char path[4200];
    snprintf(path, sizeof path, "%s/chat_nul.txt", g_tmp);
    write_all(path, "hi\0there\n/quit\n", 16);
    r = cli_run_prefix(GUARD, "chat -m %s -n 2 --temp 0 < %s", TEXT_MODEL, path);
    CHECK(r.code == 0 && count(r.err, "error:") == 1 && strstr(r.err, "holds a NUL byte at byte 2"),
          "NUL in a line:\n%.1000s", r.err);
    cli_free(&r);
    /* --system survives a first turn that fails (too long): the next turn's prompt has it */
    const char *sys = "--system 'You are a terse assistant who answers in one word.'";
    char longline[12000];
    for (int i = 0; i < 11990; i++) longline[i] = "abcdefgh "[i % 9];
    snprintf(longline + 11990, 10, "\n");
    char script[13000];
    snprintf(script, sizeof script, "%shi\n/quit\n", longline);
    cli_result a = chat(TEXT_MODEL, script, sys), b = chat(TEXT_MODEL, "hi\n/quit\n", sys);
    int pa = -1, pb = -1;
    const char *x = strstr(a.err, "prompt eval time"), *y = strstr(b.err, "prompt eval time");
    if (x) sscanf(strchr(x, '/') + 1, "%d", &pa);
    if (y) sscanf(strchr(y, '/') + 1, "%d", &pb);
    CHECK(a.code == 0 && pa > 0 && pa == pb, "prompt tokens after a failed first turn %d, alone %d (system lost?)", pa,
          pb);
    cli_free(&a);
    cli_free(&b);
}

/* Session 7: input that never ends a line, input that cannot be read, mistyped chat commands. */
static void chat_input(void) {
    cli_result r;
    /* input with no end of line (/dev/zero) stops with one error, exit 2 (it was read for ever at 100% CPU, and
     * Ctrl+C could not stop it) */
    r = cli_run_prefix(GUARD, "chat -m %s -n 2 --temp 0 < /dev/zero", TEXT_MODEL);
    CHECK(r.code == 2 && count(r.err, "error:") == 1 && strstr(r.err, "with no end"), "chat < /dev/zero: exit %d:\n%s",
          r.code, r.err);
    cli_free(&r);
    /* standard input that cannot be read (a directory) is an error, not a quiet end of input with exit 0 */
    r = cli_run_prefix(GUARD, "chat -m %s -n 2 < /", TEXT_MODEL);
    CHECK(r.code == 2 && count(r.err, "error:") == 1 && strstr(r.err, "cannot read standard input: Is a directory"),
          "chat < /: exit %d:\n%s", r.code, r.err);
    cli_free(&r);
    /* words after /clear, /quit or /help, and a lone mistyped command, are errors: not ignored, not sent to the
     * model (/quit now used to quit; /Quit was answered as a message) */
    r = chat(TEXT_MODEL, "/Quit\n/exti\n/clear all\n/help me\n/quit now\n/quit\n", "");
    CHECK(r.code == 0 && count(r.err, "error:") == 5 && strstr(r.err, "'/Quit': unknown command") &&
              strstr(r.err, "'/quit now': /quit takes no argument") &&
              strstr(r.err, "prompt eval time =       0.00 ms /     0 tokens") && !r.out[0] &&
              !strstr(r.err, "Chat history cleared"),
          "mistyped commands: exit %d, out '%s':\n%s", r.code, r.out, r.err);
    cli_free(&r);
}

/* Item 10: /image checks the file at once; the good attachments stay. */
static void chat_attach(void) {
    char script[9000];
    snprintf(script, sizeof script, "/image %s/a_exact.png\n/image /nonexistent.png\nwhat is it\n/quit\n", VIS);
    cli_result r = chat(g_vl, script, "");
    const char *bad = strstr(r.err, "/nonexistent.png"), *loaded = strstr(r.err, "a_exact.png image loaded");
    CHECK(r.code == 0 && loaded && bad && !strstr(r.err, "nonexistent.png image loaded"), "attach:\n%s", r.err);
    CHECK(count(r.err, "visual tokens)") >= 1 && count(r.err, "encoded in") == 1 && count(r.err, "error:") == 1,
          "the good image is encoded with the message, one error at /image time:\n%s", r.err);
    cli_free(&r);
}

/* ocr of a list with a bad file in the middle. */
static void ocr_list(void) {
    cli_result r = cli_run_prefix(GUARD, "ocr %s/a_exact.png /nonexistent.png %s/b_down.png -m %s -n 3 --no-perf", VIS,
                                  VIS, g_vl);
    const char *ha = strstr(r.out, "==> " VIS "/a_exact.png <=="), *hb = strstr(r.out, "==> " VIS "/b_down.png <==");
    CHECK(r.code == 2, "ocr with a bad file: exit %d", r.code);
    CHECK(ha && hb && ha < hb && strstr(r.out, "==> /nonexistent.png <=="), "headers on stdout:\n%s", r.out);
    CHECK(strstr(r.err, "error: image: cannot read /nonexistent.png") &&
              strstr(r.err, "1 of 3 images could not be read"), "errors:\n%s", r.err);
    cli_free(&r);
    /* one image: one error line, not the error and a "1 of 1" summary */
    expect_fail("ocr one bad image", 2, "cannot read /nonexistent.png", "ocr /nonexistent.png -m " TEXT_MODEL);
}

/* The answer after the `n`-th "==> ... <==" header line of ocr's stdout (malloc'ed). */
static char *section(const char *out, int n) {
    const char *p = out;
    for (int i = 0; i <= n && p; i++)
        if ((p = strstr(p, "==> "))) p = strchr(p, '\n');
    if (!p) return strdup("");
    const char *end = strstr(++p, "\n==> ");
    return strndup(p, end ? (size_t)(end - p) : strlen(p));
}

/* Session 7: ocr of several images loads the model once (it was loaded again for every image) and reads -f - once
 * (the second image got an empty prompt); the same image twice answers the same (nothing of the first image's
 * conversation is left in the cache), and as it does alone. */
static void ocr_once(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ocr_prompt.txt", g_tmp);
    write_all(path, "Read it.", 8);
    cli_result r = cli_run_prefix(GUARD, "ocr %s/a_exact.png %s/b_down.png %s/a_exact.png -m %s -n 6 -v -f - < %s", VIS,
                                  VIS, VIS, g_vl, path);
    cli_result one = cli_run_prefix(GUARD, "ocr %s/a_exact.png -m %s -n 6 -f - < %s", VIS, g_vl, path);
    char *a = section(r.out, 0), *c = section(r.out, 2);
    CHECK(r.code == 0 && count(r.err, "layers, hidden") == 1 && count(r.out, "==> ") == 3 &&
              count(r.err, "prompt eval time") == 3 && count(r.err, "load time") == 3,
          "ocr of 3 images: exit %d, %d model loads:\n%s", r.code, count(r.err, "layers, hidden"), r.err);
    CHECK(one.code == 0 && a[0] && !strcmp(a, c) && !strcmp(a, one.out), "answers '%s', '%s', alone '%s'", a, c, one.out);
    free(a), free(c);
    cli_free(&r);
    cli_free(&one);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN); /* an omni that exited early must fail a check, not kill the test */
    char *t = make_tmpdir();
    snprintf(g_tmp, sizeof g_tmp, "%s", t);
    free(t);
    snprintf(g_vl, sizeof g_vl, "%s/vl", g_tmp);
    copy_dir(VIS "/vl-h64", g_vl);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp %s/tok-small/tokenizer.json %s/tok-small/tokenizer_config.json '%s'/", OMNI_FIXTURES,
             OMNI_FIXTURES, g_vl);
    CHECK(system(cmd) == 0, "copy tokenizer");
    context_cap();
    chat_lines();
    chat_input();
    chat_attach();
    ocr_list();
    ocr_once();
    interrupt_prefill();
    interrupt_twice();
    interrupt_chat();
    interrupt_eval();
    interrupt_tokenize();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    return check_exit();
}
