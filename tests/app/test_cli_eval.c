/* test_cli_eval.c - `omni eval kl`: bf16 against itself gives KL 0 and 100% top-1 agreement; int2 with no window
 * gives KL > 0 and a lower bound on agreement; --json prints one object with the documented keys; a window that is
 * not a multiple of 32 is refused before any work (exit 1, one line). */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

static cJSON *run_json(const char *mode, const char *text) {
    cli_result r = cli_run("eval kl -m %s --kv %s --kv-window 0 --text %s --json --no-perf", MODEL, mode, text);
    CHECK(r.code == 0, "%s: exit %d: %s", mode, r.code, r.err);
    cJSON *j = cJSON_Parse(r.out);
    CHECK(j != NULL, "%s: not JSON: %s", mode, r.out);
    cli_free(&r);
    return j;
}

static double num(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(j, k);
    CHECK(cJSON_IsNumber(v), "missing key %s", k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int main(void) {
    char *tmp = make_tmpdir(), text[4200];
    snprintf(text, sizeof text, "%s/t.txt", tmp);
    const char *s = "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times, "
                    "it was the age of wisdom, it was the age of foolishness, it was the epoch of belief.";
    write_all(text, s, strlen(s));
    cJSON *b = run_json("bf16", text), *q = run_json("int2", text);
    CHECK(num(b, "mean_kl") == 0 && num(b, "top1_agree") == 1.0 && num(b, "ppl_ref") == num(b, "ppl_mode"),
          "bf16 vs bf16 must be identical");
    CHECK(num(q, "mean_kl") > 0 && num(q, "p99_kl") > 0, "int2 with no window: kl %g", num(q, "mean_kl"));
    CHECK(num(q, "top1_agree") >= 0 && num(q, "top1_agree") <= 1, "agreement %g", num(q, "top1_agree"));
    CHECK(num(q, "tokens") > 30 && num(q, "ppl_ref") > 1, "tokens %g", num(q, "tokens"));
    cJSON_Delete(b);
    cJSON_Delete(q);
    cli_result r = cli_run("eval kl -m %s --kv int2 --text %s", MODEL, text);
    CHECK(r.code == 0 && strstr(r.out, "| mode |") && strstr(r.out, "| int2 |"), "table: %s %s", r.out, r.err);
    cli_free(&r);
    r = cli_run("eval kl -m %s --kv int2 --kv-window 40 --text %s", MODEL, text);
    CHECK(r.code == 1 && cli_lines(r.err) == 1 && strstr(r.err, "32"), "window 40: %d %s", r.code, r.err);
    cli_free(&r);
    r = cli_run("generate -m %s -p hi --kv int3", MODEL);
    CHECK(r.code == 1 && cli_lines(r.err) == 1 && strstr(r.err, "int3"), "unknown mode: %d %s", r.code, r.err);
    cli_free(&r);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) {}
    free(tmp);
    return check_exit();
}
