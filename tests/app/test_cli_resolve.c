/* test_cli_resolve.c - the -m argument: a model dir, a models--Org--Name cache dir (snapshot named by
 * refs/main; the newest snapshot when refs/main is missing), or Org/Name looked up in $HF_HUB_CACHE, then
 * $HF_HOME/hub, then ~/.cache/huggingface/hub. A missing repo id fails with one line naming `hf download`. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

/* A Hugging Face cache layout under `hub` for repo Org/Name with snapshot `sha` (files copied). */
static void make_cache(const char *hub, const char *sha, int with_ref) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/models--Org--Name/snapshots/%s' '%s/models--Org--Name/refs' && "
             "cp %s/config.json %s/tokenizer.json '%s/models--Org--Name/snapshots/%s/'",
             hub, sha, hub, MODEL, MODEL, hub, sha);
    CHECK(system(cmd) == 0, "make cache");
    if (with_ref) {
        snprintf(cmd, sizeof cmd, "printf '%s' > '%s/models--Org--Name/refs/main'", sha, hub);
        CHECK(system(cmd) == 0, "refs/main");
    }
}

static char *expected_ids(void) {
    cli_result r = cli_run("tokenize -m %s -p 'Hello world'", MODEL);
    char *s = strdup(r.out);
    cli_free(&r);
    return s;
}

static void expect_ids(const char *what, const char *model, const char *want) {
    cli_result r = cli_run("tokenize -m %s -p 'Hello world'", model);
    CHECK(r.code == 0 && !strcmp(r.out, want), "%s: exit %d out '%s' err '%s'", what, r.code, r.out, r.err);
    cli_free(&r);
}

int main(void) {
    char *tmp = make_tmpdir(), hub[4200], home[4000], dir[4300];
    char *want = expected_ids();
    CHECK(strlen(want) > 1, "reference tokenize failed");
    /* $HF_HUB_CACHE */
    snprintf(hub, sizeof hub, "%s/hubcache", tmp);
    make_cache(hub, "abc123", 1);
    setenv("HF_HUB_CACHE", hub, 1);
    unsetenv("HF_HOME");
    expect_ids("HF_HUB_CACHE", "Org/Name", want);
    /* the cache dir itself */
    snprintf(dir, sizeof dir, "%s/models--Org--Name", hub);
    expect_ids("models-- dir", dir, want);
    /* $HF_HOME/hub, newest snapshot without refs/main */
    unsetenv("HF_HUB_CACHE");
    snprintf(home, sizeof home, "%s/hfhome", tmp);
    snprintf(hub, sizeof hub, "%s/hub", home);
    make_cache(hub, "def456", 0);
    setenv("HF_HOME", home, 1);
    expect_ids("HF_HOME/hub", "Org/Name", want);
    /* ~/.cache/huggingface/hub */
    unsetenv("HF_HOME");
    snprintf(hub, sizeof hub, "%s/home/.cache/huggingface/hub", tmp);
    make_cache(hub, "0a1b2c", 1);
    snprintf(home, sizeof home, "%s/home", tmp);
    setenv("HOME", home, 1);
    expect_ids("~/.cache", "Org/Name", want);
    /* not found anywhere */
    cli_result r = cli_run("tokenize -m Nobody/Nothing -p hi");
    CHECK(r.code == 3 && cli_lines(r.err) == 1 && strstr(r.err, "hf download Nobody/Nothing"), "missing repo: %d %s",
          r.code, r.err);
    cli_free(&r);
    free(want);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) {}
    free(tmp);
    return check_exit();
}
