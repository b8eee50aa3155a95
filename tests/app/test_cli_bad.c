/* test_cli_bad.c - bad inputs to `omni`: each gives exactly one line on stderr naming the problem and the
 * documented exit code (1 usage, 3 model), never a crash. Corrupt checkpoints are made from a fixture copy. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

static char g_model[4096]; /* a single-file fixture model */

/* The hidden-64 / head_dim-128 fixture: no square weights, so a transposed shape is always detectable. */
static int find_model(void) {
    struct stat st;
    snprintf(g_model, sizeof g_model, "%s/text/qvl-h64-hd128-gqa2-tied", OMNI_FIXTURES);
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", g_model);
    return stat(p, &st) == 0;
}

/* Expect exit `code`, exactly one stderr line containing `needle`, nothing on stdout. */
static void expect_fail(const char *what, int code, const char *needle, const char *args) {
    cli_result r = cli_run("%s", args);
    CHECK(r.code == code, "%s: exit %d, want %d (stderr: %s)", what, r.code, code, r.err);
    CHECK(cli_lines(r.err) == 1, "%s: %d stderr lines, want 1:\n%s", what, cli_lines(r.err), r.err);
    CHECK(strstr(r.err, needle) != NULL, "%s: stderr lacks '%s': %s", what, needle, r.err);
    CHECK(r.out[0] == 0, "%s: unexpected stdout: %s", what, r.out);
    cli_free(&r);
}

/* Copy the fixture, apply `edit` to its safetensors header, expect a model error naming `needle`. */
static void corrupt_case(const char *what, void (*edit)(cJSON *, void *), void *ctx, const char *needle) {
    char *dir = make_tmpdir();
    char path[4200], args[8400];
    copy_dir(g_model, dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(rewrite_header(path, edit, ctx) == 0, "%s: rewrite failed", what);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 1", dir);
    expect_fail(what, 3, needle, args);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    free(dir);
}

static cJSON *first_tensor(cJSON *h, const char *suffix) {
    cJSON *it;
    cJSON_ArrayForEach(it, h) {
        size_t l = strlen(it->string), s = strlen(suffix);
        if (l >= s && !strcmp(it->string + l - s, suffix)) return it;
    }
    return NULL;
}

static void edit_offsets_beyond(cJSON *h, void *c) {
    cJSON *t = first_tensor(h, "q_proj.weight"), *o = cJSON_GetObjectItem(t, "data_offsets");
    double b = cJSON_GetArrayItem(o, 0)->valuedouble, e = cJSON_GetArrayItem(o, 1)->valuedouble;
    cJSON_ReplaceItemInArray(o, 0, cJSON_CreateNumber(b + 1e9));
    cJSON_ReplaceItemInArray(o, 1, cJSON_CreateNumber(e + 1e9));
}

static void edit_overlap(cJSON *h, void *c) { /* point k_proj at the bytes of q_proj's start */
    cJSON *q = first_tensor(h, "layers.0.self_attn.q_proj.weight"), *k = first_tensor(h, "layers.0.self_attn.k_proj.weight");
    cJSON *qo = cJSON_GetObjectItem(q, "data_offsets"), *ko = cJSON_GetObjectItem(k, "data_offsets");
    double kb = cJSON_GetArrayItem(ko, 0)->valuedouble, ke = cJSON_GetArrayItem(ko, 1)->valuedouble;
    double qb = cJSON_GetArrayItem(qo, 0)->valuedouble;
    cJSON_ReplaceItemInArray(ko, 0, cJSON_CreateNumber(qb));
    cJSON_ReplaceItemInArray(ko, 1, cJSON_CreateNumber(qb + (ke - kb)));
}

static void edit_rename(cJSON *h, void *c) {
    cJSON *t = first_tensor(h, "layers.1.mlp.up_proj.weight");
    cJSON *copy = cJSON_Duplicate(t, 1);
    cJSON_DeleteItemFromObject(h, t->string);
    cJSON_AddItemToObject(h, "renamed.weight", copy);
}

static void edit_shape_swap(cJSON *h, void *c) { /* same bytes, transposed shape */
    cJSON *t = first_tensor(h, "layers.0.mlp.down_proj.weight"), *s = cJSON_GetObjectItem(t, "shape");
    double a = cJSON_GetArrayItem(s, 0)->valuedouble, b = cJSON_GetArrayItem(s, 1)->valuedouble;
    cJSON_ReplaceItemInArray(s, 0, cJSON_CreateNumber(b));
    cJSON_ReplaceItemInArray(s, 1, cJSON_CreateNumber(a));
}

static void edit_dtype_int(cJSON *h, void *c) { /* BF16 [N, K] -> I32 [N, K/2]: same bytes, wrong kind */
    cJSON *t = first_tensor(h, "layers.0.self_attn.o_proj.weight"), *s = cJSON_GetObjectItem(t, "shape");
    double b = cJSON_GetArrayItem(s, 1)->valuedouble;
    cJSON_ReplaceItemInObject(t, "dtype", cJSON_CreateString("I32"));
    cJSON_ReplaceItemInArray(s, 1, cJSON_CreateNumber(b / 2));
}

static void edit_header_len(const char *dir) { /* header length field larger than the file */
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    unsigned char big[8] = {0, 0, 0, 0, 1, 0, 0, 0};
    if (f) { fwrite(big, 1, 8, f); fclose(f); }
}

static void file_cases(void) {
    char *dir = make_tmpdir(), args[8400], path[4300];
    /* missing config.json */
    copy_dir(g_model, dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(args, sizeof args, "generate -m %s -p hi", dir);
    expect_fail("missing config.json", 3, "config.json", args);
    /* unknown model_type */
    write_all(path, "{\"model_type\": \"llama\"}", 23);
    expect_fail("unknown model_type", 3, "unsupported model_type 'llama' (supported: qwen3_vl, qwen3_omni_moe)", args);
    /* truncated shard: restore config, cut the safetensors file */
    copy_dir(g_model, dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (truncate(path, 4) != 0) {}
    expect_fail("truncated shard (4 bytes)", 3, "truncated", args);
    copy_dir(g_model, dir);
    struct stat st;
    stat(path, &st);
    if (truncate(path, st.st_size / 2) != 0) {}
    expect_fail("truncated shard (half)", 3, "beyond the file", args);
    copy_dir(g_model, dir);
    edit_header_len(dir);
    expect_fail("header length beyond file", 3, "header length", args);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    free(dir);
}

int main(void) {
    if (!find_model()) {
        fprintf(stderr, "no single-file fixture model under %s/text\n", OMNI_FIXTURES);
        return 1;
    }
    char args[8400];
    expect_fail("missing dir", 3, "not found", "generate -m /nonexistent/model -p hi");
    expect_fail("unknown option", 1, "unknown option", "generate --bogus");
    expect_fail("no prompt", 1, "no prompt", "generate -m /nonexistent/model");
    snprintf(args, sizeof args, "generate -m %s -p ''", g_model);
    expect_fail("empty prompt", 1, "empty prompt", args);
    /* no GPU (or no CUDA in this build): a device error, exit 4 - not a bad model (issue 15 item 13) */
    snprintf(args, sizeof args, "generate -m %s -p hi --device cuda", g_model);
    if (access("/dev/nvidiactl", F_OK) != 0) expect_fail("cuda without a GPU", 4, "CUDA", args);
    file_cases();
    corrupt_case("offsets out of range", edit_offsets_beyond, NULL, "beyond the file");
    corrupt_case("overlapping tensors", edit_overlap, NULL, "overlap");
    corrupt_case("missing tensor", edit_rename, NULL, "missing tensor");
    corrupt_case("shape mismatch", edit_shape_swap, NULL, "has shape");
    corrupt_case("dtype mismatch", edit_dtype_int, NULL, "dtype i32");
    /* invalid UTF-8 in the prompt: replaced by U+FFFD with a warning, still answers */
    snprintf(args, sizeof args, "generate -m %s -p \"$(printf 'ab\\377\\376cd')\" -n 2 --temp 0 --no-perf", g_model);
    cli_result r = cli_run("%s", args);
    CHECK(r.code == 0, "invalid UTF-8: exit %d: %s", r.code, r.err);
    CHECK(strstr(r.err, "invalid UTF-8") != NULL, "invalid UTF-8: no warning: %s", r.err);
    cli_free(&r);
    return check_exit();
}
