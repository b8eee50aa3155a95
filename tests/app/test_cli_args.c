/* test_cli_args.c - the command line means one thing or fails (issue 15 items 5, 8, 9, 15): per-command --help,
 * --opt=value, stray words joined into the prompt or refused, options a command does not use refused, -p with -f,
 * --system with --raw warned, eval kl without --kv, --kv-window / --kv-sink ranges, a lone --image-max-tokens,
 * -f - (stdin), text inputs that never end (/dev/zero, /dev/urandom) or are too large, and the passive OpenMP
 * wait policy set without re-executing the program (works through ld.so and other wrappers); options a command
 * would ignore refused (bench --temp, serve -n, demo --kv), -p --help taken as the prompt, -s -1 (a random seed,
 * printed), --top-p 0; session 7: KV format names checked before the model loads, -p/-f/--system/--text given
 * twice refused, hints for a mistyped command or an option before the command, empty file names refused. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

#define TEXT_MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"
#define VIS OMNI_FIXTURES "/vision"

static char g_tmp[4096];

/* Killed after 60 s: inputs that never end (/dev/zero) must not run the machine out of memory if a bug returns. */
#define GUARD "timeout -s KILL 60"

static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    double t0 = omni_time_ms();
    cli_result r = cli_run_prefix(GUARD, "%s", args);
    CHECK(r.code == code, "%s: exit %d, want %d (stderr: %s)", what, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1 && strstr(r.err, needle), "%s: want one stderr line with '%s':\n%s", what, needle, r.err);
    CHECK(r.out[0] == 0, "%s: unexpected stdout: %s", what, r.out);
    CHECK(omni_time_ms() - t0 < 20000, "%s: took %.0f ms", what, omni_time_ms() - t0);
    cli_free(&r);
}

/* stdout of a successful run. */
static char *ok_out(const char *what, const char *args) {
    cli_result r = cli_run("%s", args);
    CHECK(r.code == 0, "%s: exit %d: %s", what, r.code, r.err);
    free(r.err);
    return r.out;
}

static void test_help(void) {
    static const char *cmds[] = {"generate", "chat", "tokenize", "logits", "ocr", "ask", "eval"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        for (int h = 0; h < 2; h++) {
            cli_result r = cli_run("%s %s", cmds[i], h ? "-h" : "--help");
            char want[64];
            snprintf(want, sizeof want, "usage: omni %s", cmds[i]);
            CHECK(r.code == 0 && strstr(r.out, want) && r.err[0] == 0, "%s %s: exit %d, out '%.80s', err '%s'", cmds[i],
                  h ? "-h" : "--help", r.code, r.out, r.err);
            cli_free(&r);
        }
    }
    cli_result r = cli_run("chat --help");
    CHECK(strstr(r.out, "/image") && strstr(r.out, "/audio") && strstr(r.out, "/clear") && strstr(r.out, "/quit") &&
              strstr(r.out, "/exit") && strstr(r.out, "Ctrl+C"),
          "chat --help lists every REPL command: %s", r.out);
    cli_free(&r);
    r = cli_run("tokenize --help");
    CHECK(!strstr(r.out, "--image") && !strstr(r.out, "--raw") && strstr(r.out, "-p, --prompt"),
          "tokenize --help lists only its options: %s", r.out);
    cli_free(&r);
    r = cli_run("help ocr");
    CHECK(r.code == 0 && strstr(r.out, "usage: omni ocr"), "omni help ocr: %d %s", r.code, r.out);
    CHECK(strstr(r.out, "(0 = greedy) (default 0)") && strstr(r.out, "(default 2048)"), "ocr's defaults: %s", r.out);
    cli_free(&r);
    /* each command's help shows its own sampling defaults (ask: Qwen3-Omni's 0.6 / 0.95 / 20) */
    r = cli_run("ask --help");
    CHECK(strstr(r.out, "(default 0.6)") && strstr(r.out, "(default 0.95)") && strstr(r.out, "(default 20)"),
          "ask's defaults: %s", r.out);
    cli_free(&r);
    r = cli_run("generate --help");
    CHECK(strstr(r.out, "(default 0.7)") && strstr(r.out, "(default 0.8)") && strstr(r.out, "(default 256)"),
          "generate's defaults: %s", r.out);
    CHECK(!strstr(r.out, "bench") && strstr(r.out, "Org/Name[@REV]"), "generate's --device / -m help: %s", r.out);
    cli_free(&r);
    /* help as the commands behave (docs6): ocr and ask take the embedded model without -m; chat has /help and
     * Ctrl+C at the prompt leaves; serve shows its limits' defaults; bench's -n / -s / --device mean its own */
    r = cli_run("ocr --help");
    CHECK(strstr(r.out, "usage: omni ocr IMAGE... [-m MODEL]"), "ocr: -m is optional: %s", r.out);
    cli_free(&r);
    r = cli_run("ask --help");
    CHECK(strstr(r.out, "usage: omni ask [-m MODEL]"), "ask: -m is optional: %s", r.out);
    cli_free(&r);
    r = cli_run("chat --help");
    CHECK(strstr(r.out, "/help") && strstr(r.out, "at the prompt: leave, 130"), "chat's /help and Ctrl+C: %s", r.out);
    cli_free(&r);
    r = cli_run("serve --help");
    CHECK(strstr(r.out, "once (default 8)") && strstr(r.out, "503 (default 64)") &&
              strstr(r.out, "request (default 2048)") && strstr(r.out, "body (default 64)") &&
              strstr(r.out, "seconds (default 600)"),
          "serve's limits' defaults: %s", r.out);
    cli_free(&r);
    r = cli_run("bench --help");
    CHECK(strstr(r.out, "decode steps timed per point, 1..100000 (default 32)") &&
              strstr(r.out, "where to run (default cpu)") && strstr(r.out, "seed of --random's weights") &&
              !strstr(r.out, "until EOS"),
          "bench's -n / -s / --device: %s", r.out);
    cli_free(&r);
}

/* Words after the options join the prompt (tokenize shows exactly what the model gets). */
static void test_words(void) {
    char *ref = ok_out("tokenize -p", "tokenize -m " TEXT_MODEL " -p 'hello big world'");
    char *a = ok_out("-p + words", "tokenize -m " TEXT_MODEL " -p hello big world");
    char *b = ok_out("words only", "tokenize -m " TEXT_MODEL " hello big world");
    char *c = ok_out("--prompt=", "tokenize -m " TEXT_MODEL " --prompt='hello big' world");
    char *d = ok_out("--model=", "tokenize --model=" TEXT_MODEL " -- hello big world");
    CHECK(ref[0] && !strcmp(a, ref) && !strcmp(b, ref) && !strcmp(c, ref) && !strcmp(d, ref),
          "joined prompts differ: '%s' '%s' '%s' '%s' vs '%s'", a, b, c, d, ref);
    free(ref), free(a), free(b), free(c), free(d);
    /* generate: `-p hi extra words` answers "hi extra words", not "hi" */
    char *g1 = ok_out("generate joined", "generate -m " TEXT_MODEL " -p 'hi extra words' --temp 0 -n 4 --no-perf");
    char *g2 = ok_out("generate words", "generate -m " TEXT_MODEL " -p hi extra words --temp 0 -n 4 --no-perf");
    char *g3 = ok_out("generate -p hi", "generate -m " TEXT_MODEL " -p hi --temp 0 -n 4 --no-perf");
    CHECK(!strcmp(g1, g2), "generate: '%s' vs '%s'", g1, g2);
    CHECK(strcmp(g1, g3), "the extra words changed nothing: '%s'", g3);
    free(g1), free(g2), free(g3);
    char args[8400];
    snprintf(args, sizeof args, "generate -m %s -f %s/p.txt extra", TEXT_MODEL, g_tmp);
    expect_fail("words with -f", 1, "unexpected argument 'extra'", args);
    expect_fail("chat words", 1, "unexpected argument 'hello'", "chat -m " TEXT_MODEL " hello");
    expect_fail("eval extra word", 1, "unexpected argument 'more'",
                "eval kl more -m " TEXT_MODEL " --kv int2 --text /dev/null");
}

/* Options a command does not use are refused (they used to be ignored without a word). */
static void test_unused(void) {
    expect_fail("tokenize --raw", 1, "omni tokenize does not use --raw", "tokenize -m " TEXT_MODEL " -p hi --raw");
    expect_fail("tokenize --image", 1, "does not use --image", "tokenize -m " TEXT_MODEL " -p hi --image a.png");
    expect_fail("tokenize -n", 1, "does not use -n", "tokenize -m " TEXT_MODEL " -p hi -n 3");
    expect_fail("eval -n", 1, "omni eval does not use -n",
                "eval kl -m " TEXT_MODEL " --kv int2 --text /dev/null -n 3");
    expect_fail("eval --image", 1, "does not use --image",
                "eval kl -m " TEXT_MODEL " --kv int2 --text /dev/null --image a.png");
    expect_fail("chat -p", 1, "omni chat does not use -p", "chat -m " TEXT_MODEL " -p hi");
    expect_fail("-p and -f", 1, "-p or with -f, not both", "generate -m " TEXT_MODEL " -p hi -f /dev/null");
    expect_fail("eval without --kv", 1, "--kv MODE is required", "eval kl -m " TEXT_MODEL " --text /dev/null");
    expect_fail("flag with a value", 1, "--raw takes no value", "generate -m " TEXT_MODEL " -p hi --raw=yes");
    expect_fail("unknown --opt=", 1, "unknown option: --bogus", "generate --bogus=1");
    expect_fail("--device", 1, "expected cpu or cuda", "generate -m " TEXT_MODEL " -p hi --device tpu");
    /* --system with --raw: a warning, the run goes on */
    cli_result r = cli_run("generate -m %s --raw -p hi --system sys -n 1 --temp 0 --no-perf", TEXT_MODEL);
    CHECK(r.code == 0 && strstr(r.err, "warning: --system has no effect with --raw"), "--system --raw: %d %s", r.code,
          r.err);
    cli_free(&r);
}

static void test_ranges(void) {
    expect_fail("--kv-window 100", 1, "not a multiple of 32", "generate -m " TEXT_MODEL " -p hi --kv-window 100");
    expect_fail("--kv-window 512", 1, "[0, 256]", "generate -m " TEXT_MODEL " -p hi --kv-window 512");
    expect_fail("--kv-sink 40", 1, "[0, 32]", "generate -m " TEXT_MODEL " -p hi --kv-sink 40");
    expect_fail("--kv-layers twice", 1, "layer 0 is already given",
                "generate -m " TEXT_MODEL " -p hi --kv int2 --kv-layers 0:int2,0:int4");
    cli_result k = cli_run("generate -m %s -p hi -n 1 --kv int2 --kv-layers 0:int4", TEXT_MODEL);
    CHECK(k.code == 0 && strstr(k.err, "kv_cache: mixed") && !strstr(k.err, "kv_cache: int4"),
          "mixed cache named as layer 0's format: %s", k.err);
    cli_free(&k);
    expect_fail("image budget crossed", 1, "--image-min-tokens 100 is above --image-max-tokens 50",
                "ocr x.png -m " TEXT_MODEL " --image-min-tokens 100 --image-max-tokens 50");
    /* ocr's default budget is 1024-2048 tokens: a lone --image-max-tokens 64 lowers the minimum with it */
    char dir[4200], cmd[9000];
    snprintf(dir, sizeof dir, "%s/vl", g_tmp);
    copy_dir(VIS "/vl-h64", dir);
    snprintf(cmd, sizeof cmd, "cp %s/tok-small/tokenizer.json %s/tok-small/tokenizer_config.json '%s'/", OMNI_FIXTURES,
             OMNI_FIXTURES, dir);
    CHECK(system(cmd) == 0, "copy tokenizer");
    cli_result r = cli_run("ocr %s/a_exact.png -m %s -n 2 --no-perf --image-max-tokens 64", VIS, dir);
    CHECK(r.code == 0 && strstr(r.err, "visual tokens"), "ocr --image-max-tokens 64 alone: exit %d: %s", r.code, r.err);
    cli_free(&r);
}

/* Text inputs: stdin, devices that never end, size limits. */
static void test_text_inputs(void) {
    char args[8400], path[4200];
    snprintf(path, sizeof path, "%s/p.txt", g_tmp);
    write_all(path, "hello big world", 15);
    char *ref = ok_out("tokenize -f", "tokenize -m " TEXT_MODEL " -p 'hello big world'");
    snprintf(args, sizeof args, "tokenize -m %s -f - < %s", TEXT_MODEL, path);
    char *in = ok_out("-f -", args);
    CHECK(!strcmp(in, ref), "-f - gave '%s', want '%s'", in, ref);
    free(in), free(ref);
    expect_fail("-f /dev/zero", 2, "NUL byte", "tokenize -m " TEXT_MODEL " -f /dev/zero");
    expect_fail("-f /dev/urandom", 2, "NUL byte", "tokenize -m " TEXT_MODEL " -f /dev/urandom");
    expect_fail("eval --text /dev/urandom", 2, "NUL byte", "eval kl -m " TEXT_MODEL " --kv int2 --text /dev/urandom");
    snprintf(args, sizeof args, "tokenize -m %s -f %s --max-text-bytes 10", TEXT_MODEL, path);
    expect_fail("--max-text-bytes", 2, "over the limit of 10 bytes", args);
    expect_fail("-f directory", 2, "is a directory", "tokenize -m " TEXT_MODEL " -f /tmp");
    expect_fail("-f missing", 2, "/nonexistent/p.txt", "tokenize -m " TEXT_MODEL " -f /nonexistent/p.txt");
}

/* Each command refuses the options it would ignore (bench's sampling and -c, serve's -n/-s/--device, demo's --kv);
 * bench's --ctx is its list, the others' --ctx is -c. */
static void test_ignored(void) {
    expect_fail("bench --temp", 1, "omni bench does not use --temp", "bench -m " TEXT_MODEL " --temp 0.5");
    expect_fail("bench --top-p", 1, "omni bench does not use --top-p", "bench -m " TEXT_MODEL " --top-p 0.5");
    expect_fail("bench -c", 1, "omni bench does not use -c", "bench -m " TEXT_MODEL " -c 64");
    expect_fail("bench --kv-layers", 1, "omni bench does not use --kv-layers", "bench -m " TEXT_MODEL " --kv-layers 0:f32");
    expect_fail("bench --ctx list", 1, "--ctx", "bench -m " TEXT_MODEL " --ctx 64,x");
    expect_fail("serve -n", 1, "omni serve does not use -n", "serve -m " TEXT_MODEL " -n 5");
    expect_fail("serve -s", 1, "omni serve does not use -s", "serve -m " TEXT_MODEL " -s 5");
    expect_fail("serve --device", 1, "omni serve does not use --device", "serve -m " TEXT_MODEL " --device cpu");
    expect_fail("demo --kv", 1, "omni demo does not use --kv", "demo --kv int2");
    expect_fail("generate --ctx", 1, "longer than the context (5", "generate -m " TEXT_MODEL " -p hi --ctx 5");
}

/* eval kl prints the perf block like the other commands that run the model (--no-perf: none). */
static void test_eval_perf(void) {
    char args[8400];
    snprintf(args, sizeof args, "eval kl -m %s --kv int2 --text %s/p.txt", TEXT_MODEL, g_tmp);
    cli_result r = cli_run("%s", args);
    CHECK(r.code == 0 && strstr(r.out, "| int2 |") && strstr(r.err, "prompt eval time") && !strstr(r.out, "omni_perf"),
          "eval kl perf block: exit %d, out %s, err %s", r.code, r.out, r.err);
    cli_free(&r);
    r = cli_run("%s --no-perf", args);
    CHECK(r.code == 0 && !strstr(r.err, "omni_perf"), "eval kl --no-perf: exit %d: %s", r.code, r.err);
    cli_free(&r);
}

/* An option's value is never taken for -h (a prompt "--help"); `omni help X` of an unknown X is an error. */
static void test_help_values(void) {
    char *a = ok_out("-p --help", "tokenize -m " TEXT_MODEL " -p --help");
    char *b = ok_out("-- --help", "tokenize -m " TEXT_MODEL " -- --help");
    CHECK(a[0] >= '0' && a[0] <= '9' && !strcmp(a, b), "-p --help is the prompt: '%s' vs '%s'", a, b);
    free(a), free(b);
    a = ok_out("--system -h", "generate -m " TEXT_MODEL " --system -h -p hi -n 1 --no-perf");
    CHECK(!strstr(a, "usage:"), "--system -h printed the help: %s", a);
    free(a);
    a = ok_out("-p x -h", "tokenize -m " TEXT_MODEL " -p x -h");
    CHECK(strstr(a, "usage: omni tokenize") != NULL, "-h after a value still asks for help: %s", a);
    free(a);
    expect_fail("help bogus", 1, "unknown command 'bogus'", "help bogus");
    expect_fail("ask without a question", 1, "no question given",
                "ask -m " TEXT_MODEL " --audio " OMNI_FIXTURES "/audio/clips/tone_1s.wav");
    char args[8400];
    snprintf(args, sizeof args, "eval kl -m %s --kv int2 --text %s/p.txt --ctx 1", TEXT_MODEL, g_tmp);
    expect_fail("eval --ctx 1", 1, "--ctx 1 keeps 1 of the text's", args);
    /* a file given as the model, a bad -o path found before the model runs (one line: no KV line before it) */
    expect_fail("-m a file", 3, "not a directory", "generate -m " TEXT_MODEL "/config.json -p hi");
    expect_fail("logits -o bad path", 2, "cannot write /nonexistent/x.f32: No such file",
                "logits -m " TEXT_MODEL " -p hi -o /nonexistent/x.f32");
}

/* Session 7: a KV format name is checked while parsing, before the model loads (a typo used to cost the whole
 * load, and ocr's image encoding, before the error): with a missing model the KV error comes first. */
static void test_kv_early(void) {
    expect_fail("--kv typo", 1, "--kv: unknown KV cache mode 'int3'", "generate -m /nonexistent/model -p hi --kv int3");
    expect_fail("--kv-layers typo", 1, "--kv-layers: unknown KV cache mode 'in2'",
                "generate -m /nonexistent/model -p hi --kv-layers 0:in2");
    expect_fail("--kv-layers syntax", 1, "--kv-layers: bad KV layer override",
                "chat -m /nonexistent/model --kv-layers 0-:int4");
    expect_fail("--compare typo", 1, "--compare: unknown KV cache mode", "generate -m /nonexistent/model -p hi --compare k3");
    expect_fail("chat --kv", 1, "--kv: unknown KV cache mode", "chat -m /nonexistent/model --kv bogus");
    expect_fail("ocr --kv", 1, "--kv: unknown KV cache mode", "ocr " VIS "/a_exact.png -m /nonexistent/model --kv x");
    expect_fail("eval --kv", 1, "--kv: unknown KV cache mode",
                "eval kl -m /nonexistent/model --kv int8 --text /dev/null");
    expect_fail("serve --kv", 1, "--kv: unknown KV cache mode", "serve -m /nonexistent/model --kv bf8");
    expect_fail("demo --kv-b", 1, "--kv-b: unknown KV cache mode", "demo -m /nonexistent/model --kv-b int3");
    /* a layer number is checked against the model once it is loaded */
    expect_fail("--kv-layers range", 1, "out of range (model has",
                "generate -m " TEXT_MODEL " -p hi --kv-layers 2000:int2");
}

/* Session 7: -p, -f, --system and --text given twice: the first used to be dropped without a word. */
static void test_repeated(void) {
    expect_fail("-p twice", 1, "-p is given twice ('hello' and 'world')", "generate -m " TEXT_MODEL " -p hello -p world");
    expect_fail("--prompt twice", 1, "-p is given twice", "tokenize -m " TEXT_MODEL " --prompt=a --prompt b");
    expect_fail("-f twice", 1, "-f is given twice", "generate -m " TEXT_MODEL " -f a.txt -f b.txt");
    expect_fail("--system twice", 1, "--system is given twice", "generate -m " TEXT_MODEL " -p x --system a --system b");
    expect_fail("--text twice", 1, "--text is given twice",
                "eval kl -m " TEXT_MODEL " --kv int2 --text /dev/null --text /dev/null");
    /* repeatable inputs and flags stay as they were */
    char *a = ok_out("--no-perf twice", "tokenize -m " TEXT_MODEL " -p hi --no-perf --no-perf");
    CHECK(a[0] >= '0' && a[0] <= '9', "a repeated flag: '%s'", a);
    free(a);
}

/* Session 7: an empty file or model name (or API key) is a usage error naming the option (it was "no file name
 * given", exit 2, or "cannot write : No such file"); a logits file that cannot be written says why. */
static void test_empty_names(void) {
    expect_fail("-f ''", 1, "-f: empty file name", "generate -m " TEXT_MODEL " -f ''");
    expect_fail("--image ''", 1, "--image: empty file name", "ocr --image '' -m " TEXT_MODEL);
    expect_fail("-o ''", 1, "-o: empty file name", "logits -m " TEXT_MODEL " -p hi -o ''");
    expect_fail("--text ''", 1, "--text: empty file name", "eval kl -m " TEXT_MODEL " --kv int2 --text ''");
    expect_fail("-m ''", 1, "-m: empty model name", "ocr x.png -m ''");
    /* an empty API key (--api-key "$UNSET", or OMNI_API_KEY="") opened the server to every client, the log said
     * "(API key required)" for the empty variable */
    expect_fail("--api-key ''", 1, "--api-key: the key is empty", "serve -m /nonexistent/model --api-key ''");
    cli_result k = cli_run_prefix("OMNI_API_KEY=", "serve -m /nonexistent/model");
    CHECK(k.code == 1 && cli_lines(k.err) == 1 && strstr(k.err, "OMNI_API_KEY is set but empty"),
          "OMNI_API_KEY='': exit %d: %s", k.code, k.err);
    cli_free(&k);
    cli_result r = cli_run("logits -m %s -p hi -o /dev/full", TEXT_MODEL);
    CHECK(r.code == 4 && strstr(r.err, "error: cannot write /dev/full: No space left on device"),
          "logits -o /dev/full: exit %d: %s", r.code, r.err);
    cli_free(&r);
    /* a run that fails (here: no model) leaves an existing -o file as it was (the probe truncated it) and no new
     * empty file */
    char *t = make_tmpdir(), keep[4200], fresh[4200], cmd[9000];
    snprintf(keep, sizeof keep, "%s/keep.f32", t);
    snprintf(fresh, sizeof fresh, "%s/fresh.f32", t);
    write_all(keep, "earlier logits", 14);
    r = cli_run("logits -m /nonexistent/model -p hi -o %s", keep);
    size_t n = 0;
    char *back = omni_read_file(keep, &n);
    CHECK(r.code == 3 && back && n == 14 && !memcmp(back, "earlier logits", 14),
          "a failed logits run kept the -o file: exit %d, %zu bytes: %s", r.code, n, r.err);
    free(back);
    cli_free(&r);
    r = cli_run("logits -m /nonexistent/model -p hi -o %s", fresh);
    CHECK(r.code == 3 && access(fresh, F_OK) != 0, "a failed logits run left a new -o file: exit %d", r.code);
    cli_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t);
    if (system(cmd)) {}
    free(t);
}

/* Session 7: a first word that is not a command gets a hint (a near miss, an option before the command); words
 * after --version or `help CMD` are refused, not ignored. */
static void test_commands(void) {
    expect_fail("near miss", 1, "unknown command 'generat'; did you mean 'generate'?", "generat -p hi");
    expect_fail("capitalised", 1, "did you mean 'chat'?", "Chat");
    expect_fail("prefix", 1, "did you mean 'tokenize'?", "tok");
    expect_fail("option first", 1, "the command comes first: omni generate -m", "-m x generate -p hi");
    expect_fail("option alone", 1, "'-v' is an option; the command comes first", "-v");
    expect_fail("far word", 1, "unknown command 'zzzzzz' (see omni --help)", "zzzzzz");
    expect_fail("help near miss", 1, "did you mean 'ocr'?", "help ocrr");
    expect_fail("help extra", 1, "unexpected argument 'extra'", "help generate extra");
    expect_fail("--version extra", 1, "unexpected argument 'x'", "--version x");
}

/* -s: 0..2^64-1, -1 draws one and prints it (the printed seed reproduces the answer, llama.cpp's convention);
 * --top-p 0 keeps only the most likely token (= greedy). */
static void test_seed_top_p(void) {
    cli_result r = cli_run("generate -m %s -p hi -n 8 -s -1 --no-perf", TEXT_MODEL);
    unsigned long long seed = 0;
    const char *line = strstr(r.err, "seed: ");
    CHECK(r.code == 0 && line && sscanf(line, "seed: %llu", &seed) == 1, "-s -1: exit %d: %s", r.code, r.err);
    char args[512];
    snprintf(args, sizeof args, "generate -m %s -p hi -n 8 -s %llu --no-perf", TEXT_MODEL, seed);
    char *again = ok_out("-s printed seed", args);
    CHECK(!strcmp(again, r.out), "the printed seed %llu gives '%s', -s -1 gave '%s'", seed, again, r.out);
    free(again);
    cli_free(&r);
    free(ok_out("-s 2^64-1", "generate -m " TEXT_MODEL " -p hi -n 1 -s 18446744073709551615 --no-perf"));
    expect_fail("-s 2^64", 1, "is not a seed", "generate -m " TEXT_MODEL " -p hi -s 18446744073709551616");
    expect_fail("-s -2", 1, "is not a seed", "generate -m " TEXT_MODEL " -p hi -s -2");
    char *g = ok_out("--temp 0", "generate -m " TEXT_MODEL " -p hi -n 8 --temp 0 --no-perf");
    char *p0 = ok_out("--top-p 0", "generate -m " TEXT_MODEL " -p hi -n 8 --temp 0.9 --top-p 0 -s 3 --no-perf");
    CHECK(!strcmp(g, p0), "--top-p 0 is not greedy: '%s' vs '%s'", p0, g);
    free(g), free(p0);
    expect_fail("--top-p 1.5", 1, "--top-p", "generate -m " TEXT_MODEL " -p hi --top-p 1.5");
}

/* `OMNI_BIN --version` with OMP_DISPLAY_ENV=true through `wrapper`; returns stdout+stderr (malloc'ed). ctest sets
 * OMP_WAIT_POLICY for every test: it is unset so the program's own default shows. */
static char *version_through(const char *wrapper, const char *policy) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "env -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=true %s %s", policy ? policy : "", wrapper);
    cli_result r = cli_run_prefix(prefix, "--version");
    CHECK(r.code == 0, "%s --version: exit %d", prefix, r.code);
    size_t n = strlen(r.out) + strlen(r.err) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s", r.out, r.err);
    cli_free(&r);
    return s;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* The passive wait policy is in place in the first (only) process, also when started through ld.so, and a
 * policy the user chose is kept. */
static void test_omp_policy(void) {
    char *s = version_through("", NULL);
    CHECK(count(s, "OMP_WAIT_POLICY = 'PASSIVE'") == 1 && count(s, "omni ") == 1,
          "one process, passive policy:\n%s", s);
    free(s);
    const char *ldso = access("/lib64/ld-linux-x86-64.so.2", X_OK) == 0 ? "/lib64/ld-linux-x86-64.so.2" : NULL;
    if (ldso) {
        s = version_through(ldso, NULL);
        CHECK(strstr(s, "omni 0") && count(s, "OMP_WAIT_POLICY = 'PASSIVE'") == 1 && !strstr(s, "ld.so"),
              "through ld.so:\n%s", s);
        free(s);
    }
    s = version_through("", "OMP_WAIT_POLICY=active");
    CHECK(count(s, "OMP_WAIT_POLICY = 'ACTIVE'") == 1, "the user's policy is kept:\n%s", s);
    free(s);
}

int main(void) {
    char *t = make_tmpdir();
    snprintf(g_tmp, sizeof g_tmp, "%s", t);
    free(t);
    char p[4200];
    snprintf(p, sizeof p, "%s/p.txt", g_tmp);
    write_all(p, "hello", 5);
    test_help();
    test_words();
    test_unused();
    test_ranges();
    test_text_inputs();
    test_ignored();
    test_help_values();
    test_eval_perf();
    test_seed_top_p();
    test_kv_early();
    test_repeated();
    test_commands();
    test_empty_names();
    test_omp_policy();
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    return check_exit();
}
