/* test_cli_resolve.c - the -m argument: a model dir, a models--Org--Name cache dir (snapshot named by refs/main;
 * the only snapshot when refs/main is missing), or Org/Name[@REV] looked up in $HF_HUB_CACHE, then $HF_HOME/hub
 * (else $XDG_CACHE_HOME/huggingface/hub), then ~/.cache/huggingface/hub. The caches are laid out as `hf download`
 * lays them out (snapshot files are links into blobs/). Broken caches and odd paths - a partial download (links to
 * missing blobs, *.incomplete blobs, a shard of the index missing), refs/main naming a missing snapshot, two
 * snapshots and no refs/main, an unknown revision, a repo id found nowhere, a model dir that is a link (or a
 * dangling one), non-ASCII and very long paths - each give one error line and exit 3 naming what to do. */
#define _DEFAULT_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

static char g_want[256]; /* the token ids of "Hello world" */

static void sh(const char *what, const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    CHECK(system(cmd) == 0, "%s: %s", what, cmd);
}

/* hub/models--Org--Name with snapshot `sha` as `hf download` leaves it: config.json and tokenizer.json stored in
 * blobs/ (named after sha + file) and linked from snapshots/sha/; refs/main = sha when with_ref. */
static void make_cache(const char *hub, const char *sha, int with_ref) {
    sh("make cache",
       "c='%s/models--Org--Name' && mkdir -p \"$c/blobs\" \"$c/refs\" \"$c/snapshots/%s\" && "
       "for f in config.json tokenizer.json; do cp '%s'/$f \"$c/blobs/%s-$f\" && "
       "ln -sfn ../../blobs/%s-$f \"$c/snapshots/%s/$f\"; done",
       hub, sha, MODEL, sha, sha, sha);
    if (with_ref) sh("refs/main", "printf '%s' > '%s/models--Org--Name/refs/main'", sha, hub);
}

static void expect_ids(const char *what, const char *model) {
    cli_result r = cli_run("tokenize -m '%s' -p 'Hello world'", model);
    CHECK(r.code == 0 && !strcmp(r.out, g_want), "%s: exit %d out '%s' err '%s'", what, r.code, r.out, r.err);
    cli_free(&r);
}

/* Exit 3 (or `code`) with one stderr line holding every one of the NULL-terminated strings. */
static void expect_error(const char *what, int code, const char *model, ...) {
    cli_result r = cli_run("tokenize -m '%s' -p 'Hello world'", model);
    int ok = r.code == code && cli_lines(r.err) == 1 && !strncmp(r.err, "error: ", 7) && !r.out[0];
    va_list ap;
    va_start(ap, model);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(r.err, s)) ok = 0, fprintf(stderr, "  %s: missing '%s'\n", what, s);
    va_end(ap);
    CHECK(ok, "%s: exit %d (want %d) err '%s'", what, r.code, code, r.err);
    cli_free(&r);
}

static void hub_lookups(const char *tmp) {
    char hub[4200], home[4000], dir[4300];
    /* $HF_HUB_CACHE */
    snprintf(hub, sizeof hub, "%s/hubcache", tmp);
    make_cache(hub, "abc123", 1);
    setenv("HF_HUB_CACHE", hub, 1);
    unsetenv("HF_HOME");
    unsetenv("XDG_CACHE_HOME");
    expect_ids("HF_HUB_CACHE", "Org/Name");
    /* the cache dir itself, also with the slash tab completion adds, and through a link of another name */
    snprintf(dir, sizeof dir, "%s/models--Org--Name", hub);
    expect_ids("models-- dir", dir);
    snprintf(dir, sizeof dir, "%s/models--Org--Name/", hub);
    expect_ids("models-- dir/", dir);
    sh("link", "ln -sfn '%s/models--Org--Name' '%s/mymodel'", hub, tmp);
    snprintf(dir, sizeof dir, "%s/mymodel", tmp);
    expect_ids("link to a models-- dir", dir);
    /* a revision by name (refs/v1) or by commit hash; an unknown one lists what there is */
    make_cache(hub, "fed987", 0);
    sh("refs/v1", "printf fed987 > '%s/models--Org--Name/refs/v1'", hub);
    expect_ids("Org/Name@v1", "Org/Name@v1");
    expect_ids("Org/Name@hash", "Org/Name@fed987");
    expect_error("unknown revision", 3, "Org/Name@v2", "no revision 'v2'", "main", "v1", "abc123", "fed987",
                 "hf download Org/Name --revision v2", NULL);
    /* two snapshots: refs/main picks one; without refs/main it is an error naming both */
    expect_ids("refs/main of two snapshots", "Org/Name");
    sh("rm refs/main", "rm '%s/models--Org--Name/refs/main'", hub);
    expect_error("two snapshots, no refs/main", 3, "Org/Name", "2 snapshots", "abc123", "fed987", "snapshots/HASH",
                 NULL);
    /* refs/main naming a snapshot that is not there */
    sh("refs/main", "printf 0ddba11 > '%s/models--Org--Name/refs/main'", hub);
    expect_error("refs/main to a missing snapshot", 3, "Org/Name", "refs/main names snapshot 0ddba11",
                 "hf download Org/Name", NULL);
    /* $HF_HOME/hub, the only snapshot without refs/main */
    unsetenv("HF_HUB_CACHE");
    snprintf(home, sizeof home, "%s/hfhome", tmp);
    snprintf(hub, sizeof hub, "%s/hub", home);
    make_cache(hub, "def456", 0);
    setenv("HF_HOME", home, 1);
    expect_ids("HF_HOME/hub", "Org/Name");
    /* $XDG_CACHE_HOME/huggingface/hub when HF_HOME is unset (huggingface_hub's default) */
    unsetenv("HF_HOME");
    snprintf(home, sizeof home, "%s/xdg", tmp);
    snprintf(hub, sizeof hub, "%s/huggingface/hub", home);
    make_cache(hub, "789abc", 1);
    setenv("XDG_CACHE_HOME", home, 1);
    expect_ids("XDG_CACHE_HOME", "Org/Name");
    unsetenv("XDG_CACHE_HOME");
    /* ~/.cache/huggingface/hub */
    snprintf(hub, sizeof hub, "%s/home/.cache/huggingface/hub", tmp);
    make_cache(hub, "0a1b2c", 1);
    snprintf(home, sizeof home, "%s/home", tmp);
    setenv("HOME", home, 1);
    expect_ids("~/.cache", "Org/Name");
    /* a partial download: a link to a missing blob; a shard of the index missing while a blob is *.incomplete */
    sh("prune", "rm '%s/models--Org--Name/blobs/0a1b2c-config.json'", hub);
    expect_error("link to a missing blob", 3, "Org/Name", "config.json is a link to a missing file",
                 "hf download Org/Name", NULL);
    make_cache(hub, "0a1b2c", 1);
    sh("index", "c='%s/models--Org--Name' && printf '{\"weight_map\": {\"a.weight\": "
       "\"model-00001-of-00002.safetensors\", \"b.weight\": \"model-00002-of-00002.safetensors\"}}' "
       "> \"$c/blobs/idx\" && ln -sfn ../../blobs/idx \"$c/snapshots/0a1b2c/model.safetensors.index.json\" "
       "&& : > \"$c/blobs/ffff.incomplete\" && cp '%s/model.safetensors' \"$c/blobs/s1\" && ln -sfn ../../blobs/s1 "
       "\"$c/snapshots/0a1b2c/model-00001-of-00002.safetensors\"", hub, MODEL);
    expect_error("unfinished shard", 3, "Org/Name", "lacks model-00002-of-00002.safetensors", "unfinished download",
                 "hf download Org/Name", NULL);
    /* not found anywhere: the places looked at */
    expect_error("missing repo", 3, "Nobody/Nothing", "models--Nobody--Nothing", hub, "~/.cache/huggingface/hub",
                 "hf download Nobody/Nothing", NULL);
}

static void odd_paths(const char *tmp) {
    char dir[4400], arg[6000];
    /* a model dir that is a link, one whose target is gone, a folder with no config.json */
    snprintf(dir, sizeof dir, "%s/link", tmp);
    sh("link", "ln -sfn '%s' '%s'", MODEL, dir);
    expect_ids("model dir link", dir);
    snprintf(dir, sizeof dir, "%s/dangling", tmp);
    sh("dangling", "ln -sfn '%s/gone' '%s'", tmp, dir);
    expect_error("dangling link", 3, dir, "link to a missing target", NULL);
    expect_error("no config.json", 3, tmp, "no config.json", NULL);
    /* an interrupted `hf download --local-dir`: a shard of the index missing, its .incomplete file left */
    snprintf(dir, sizeof dir, "%s/localdir", tmp);
    sh("local-dir", "mkdir -p '%s/.cache/huggingface/download' && cp '%s'/*.json '%s/' && "
       "cp '%s/model.safetensors' '%s/model-00001-of-00002.safetensors' && printf '{\"weight_map\": {\"a\": "
       "\"model-00001-of-00002.safetensors\", \"b\": \"model-00002-of-00002.safetensors\"}}' > "
       "'%s/model.safetensors.index.json' && : > '%s/.cache/huggingface/download/abc.incomplete'",
       dir, MODEL, dir, MODEL, dir, dir, dir);
    expect_error("unfinished --local-dir", 3, dir, "lacks model-00002-of-00002.safetensors", "--local-dir", NULL);
    /* a `git clone` without git-lfs: pointers instead of the weights */
    snprintf(dir, sizeof dir, "%s/lfs", tmp);
    sh("lfs", "mkdir -p '%s' && cp '%s/config.json' '%s/tokenizer.json' '%s/' && printf 'version "
       "https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 4967215360\n' > '%s/model.safetensors'",
       dir, MODEL, MODEL, dir, dir);
    expect_error("LFS pointer", 3, dir, "model.safetensors is a Git LFS pointer", "git lfs pull", NULL);
    /* a URL pasted from the browser */
    expect_error("URL", 3, "https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct/tree/main", "downloads nothing",
                 "hf download Qwen/Qwen3-VL-2B-Instruct`", "-m Qwen/Qwen3-VL-2B-Instruct", NULL);
    /* llama.cpp's GGUF: a file, or a folder of them */
    snprintf(dir, sizeof dir, "%s/gguf", tmp);
    sh("gguf", "mkdir -p '%s' && printf GGUF > '%s/model-Q4_K_M.gguf'", dir, dir);
    expect_error("gguf folder", 3, dir, "GGUF is not supported", "safetensors", NULL);
    strcat(dir, "/model-Q4_K_M.gguf");
    expect_error("gguf file", 3, dir, "GGUF is not supported", NULL);
    /* non-ASCII paths: a model dir, and a cache */
    snprintf(dir, sizeof dir, "%s/模型 ü/Qwen ✓", tmp);
    sh("utf-8 dir", "mkdir -p '%s/模型 ü' && ln -sfn '%s' '%s'", tmp, MODEL, dir);
    expect_ids("non-ASCII dir", dir);
    snprintf(dir, sizeof dir, "%s/缓存 é", tmp);
    make_cache(dir, "cafe01", 1);
    setenv("HF_HUB_CACHE", dir, 1);
    expect_ids("non-ASCII cache", "Org/Name");
    unsetenv("HF_HUB_CACHE");
    /* a long path that works (~3800 bytes, within PATH_MAX), one over PATH_MAX, a component over NAME_MAX */
    snprintf(dir, sizeof dir, "%s", tmp);
    while (strlen(dir) < 3790) strcat(dir, "/dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd");
    sh("long dir", "mkdir -p '%s' && ln -sfn '%s' '%s/m'", dir, MODEL, dir);
    strcat(dir, "/m");
    expect_ids("long path", dir);
    memset(arg, 'x', 5000);
    arg[5000] = 0;
    expect_error("path over PATH_MAX", 3, arg, "path too long", NULL);
    snprintf(arg, sizeof arg, "%s/", tmp);
    memset(arg + strlen(arg), 'y', 300);
    arg[strlen(tmp) + 301] = 0;
    expect_error("component over NAME_MAX", 3, arg, "not found", NULL);
}

int main(void) {
    cli_result r = cli_run("tokenize -m %s -p 'Hello world'", MODEL);
    snprintf(g_want, sizeof g_want, "%s", r.out);
    cli_free(&r);
    CHECK(strlen(g_want) > 1, "reference tokenize failed");
    char *tmp = make_tmpdir();
    hub_lookups(tmp);
    odd_paths(tmp);
    sh("clean", "rm -rf '%s'", tmp);
    free(tmp);
    return check_exit();
}
