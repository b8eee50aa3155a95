/* test_cli_chat.c - `omni chat` keeps the history in the KV cache: the second answer of a two-turn chat equals
 * `omni generate --raw` on the full two-turn template text (greedy, f32 cache); /clear forgets the history
 * (the first answer comes back); /quit ends the session with exit 0. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

static char *chat(const char *tmp, const char *input, int *code) {
    char in[4200];
    snprintf(in, sizeof in, "%s/in.txt", tmp);
    write_all(in, input, strlen(input));
    /* cli_run feeds /dev/null first; the later redirect to the file wins. */
    cli_result r = cli_run("chat -m %s --temp 0 -n 8 --no-perf < %s", MODEL, in);
    *code = r.code;
    free(r.err);
    return r.out;
}

/* An image turn followed by a text turn: the text turn's positions continue after the image (rope_delta), so the
 * second answer equals a one-shot generation of the rendered two-turn history with the same image. */
static void image_then_text(const char *tmp) {
    char dir[4200], cmd[16384], in[4300], pf[4300], text[8192];
    snprintf(dir, sizeof dir, "%s/vl", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r %s/vision/vl-h64/. '%s'/ && cp %s/tok-small/tokenizer.json '%s'/",
             dir, OMNI_FIXTURES, dir, OMNI_FIXTURES, dir);
    CHECK(system(cmd) == 0, "copy vision fixture");
    const char *img = OMNI_FIXTURES "/vision/a_exact.png";
    snprintf(in, sizeof in, "%s/in.txt", tmp);
    snprintf(text, sizeof text, "/image %s\nWhat is this?\n", img);
    write_all(in, text, strlen(text));
    cli_result one = cli_run("chat -m %s --temp 0 -n 6 --no-perf < %s", dir, in);
    snprintf(text, sizeof text, "/image %s\nWhat is this?\nTell me more.\n", img);
    write_all(in, text, strlen(text));
    cli_result two = cli_run("chat -m %s --temp 0 -n 6 --no-perf < %s", dir, in);
    size_t l1 = strlen(one.out);
    CHECK(one.code == 0 && two.code == 0 && l1 > 1 && !strncmp(two.out, one.out, l1), "image chat: '%s' / '%s'",
          one.out, two.out);
    if (l1 > 1 && !strncmp(two.out, one.out, l1)) {
        snprintf(text, sizeof text,
                 "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is this?<|im_end|>\n"
                 "<|im_start|>assistant\n%.*s<|im_end|>\n<|im_start|>user\nTell me more.<|im_end|>\n"
                 "<|im_start|>assistant\n", (int)(l1 - 1), one.out);
        snprintf(pf, sizeof pf, "%s/p.txt", tmp);
        write_all(pf, text, strlen(text));
        cli_result r = cli_run("generate -m %s -f %s --raw --image %s --temp 0 -n 6 --no-perf", dir, pf, img);
        CHECK(r.code == 0 && !strcmp(r.out, two.out + l1), "after an image turn: chat '%s' != one-shot '%s'", two.out + l1,
              r.out);
        cli_free(&r);
    }
    cli_free(&one);
    cli_free(&two);
}

int main(void) {
    char *tmp = make_tmpdir(), pf[4200];
    int code;
    char *one = chat(tmp, "Hello there\n", &code);
    CHECK(code == 0 && strlen(one) > 1, "one turn: exit %d, out '%s'", code, one);
    char *two = chat(tmp, "Hello there\nWhat is your name?\n/quit\n", &code);
    CHECK(code == 0 && !strncmp(two, one, strlen(one)), "two turns: first answer differs: '%s' vs '%s'", two, one);
    /* reply1 without its trailing newline */
    size_t l1 = strlen(one);
    char *reply1 = strndup(one, l1 - 1), *reply2 = strdup(two + l1);
    /* The history as the template renders it; an answer cut by -n is closed with <|im_end|> like a finished one. */
    char text[8192];
    snprintf(text, sizeof text,
             "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n"
             "<|im_start|>user\nWhat is your name?<|im_end|>\n<|im_start|>assistant\n", reply1);
    snprintf(pf, sizeof pf, "%s/p.txt", tmp);
    write_all(pf, text, strlen(text));
    cli_result r = cli_run("generate -m %s -f %s --raw --temp 0 -n 8 --no-perf", MODEL, pf);
    CHECK(r.code == 0 && !strcmp(r.out, reply2), "second turn '%s' != one-shot '%s'", reply2, r.out);
    cli_free(&r);
    char *cleared = chat(tmp, "Something else\n/clear\nHello there\n", &code);
    size_t lc = strlen(cleared);
    CHECK(code == 0 && lc >= l1 && !strcmp(cleared + lc - l1, one), "after /clear: '%s' does not end with '%s'", cleared,
          one);
    free(one); free(two); free(reply1); free(reply2); free(cleared);
    image_then_text(tmp);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) {}
    free(tmp);
    return check_exit();
}
