/* test_model_params.c - llm_model_params: with check_finite a checkpoint holding a NaN (or an Inf) in one decoder
 * weight is refused at load with OMNI_ERR_MODEL naming that tensor; without it (the default) the same checkpoint
 * loads; a clean checkpoint loads either way. The fixture is copied and one bf16 element patched in place. */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llm/model.h"

#define SRC OMNI_FIXTURES "/text/qvl-h128-hd64-gqa2-tied"
#define TENSOR "model.language_model.layers.1.mlp.down_proj.weight"

/* Overwrite element `idx` of bf16 tensor `name` in a safetensors file with `bits`. */
static int patch(const char *path, const char *name, long idx, uint16_t bits) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    uint64_t hl = 0;
    int ok = fread(&hl, 8, 1, f) == 1 && hl < (1u << 24);
    char *h = ok ? calloc(1, hl + 1) : NULL;
    ok = ok && h && fread(h, 1, hl, f) == hl;
    cJSON *j = ok ? cJSON_Parse(h) : NULL, *t = j ? cJSON_GetObjectItem(j, name) : NULL;
    const cJSON *off = t ? cJSON_GetObjectItem(t, "data_offsets") : NULL;
    ok = ok && off && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(t, "dtype")), "BF16");
    if (ok) {
        long pos = 8 + (long)hl + (long)cJSON_GetArrayItem(off, 0)->valuedouble + 2 * idx;
        ok = fseek(f, pos, SEEK_SET) == 0 && fwrite(&bits, 2, 1, f) == 1;
    }
    cJSON_Delete(j);
    free(h);
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void expect(const char *dir, int check, omni_status want, const char *what) {
    llm_model_params p = llm_model_default_params();
    p.check_finite = check;
    llm_model *m = NULL;
    omni_status st = llm_model_load_params(dir, &p, &m);
    CHECK(st == want, "%s: status %d (%s), want %d", what, st, omni_last_error(), want);
    if (want) CHECK(strstr(omni_last_error(), TENSOR) != NULL, "%s: message names the tensor: %s", what, omni_last_error());
    llm_model_free(m);
}

int main(void) {
    CHECK(llm_model_default_params().check_finite == 0, "check_finite is off by default");
    char tmp[] = "/tmp/omni_model_params_XXXXXX", cmd[512], st_path[400];
    if (!mkdtemp(tmp)) return 1;
    snprintf(cmd, sizeof cmd, "cp -r %s/. %s/", SRC, tmp);
    CHECK(system(cmd) == 0, "copy fixture");
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", tmp);
    expect(tmp, 1, OMNI_OK, "clean, checked");
    CHECK(patch(st_path, TENSOR, 77, 0x7fc0) == 0, "patch NaN");
    expect(tmp, 0, OMNI_OK, "NaN, unchecked");
    expect(tmp, 1, OMNI_ERR_MODEL, "NaN, checked");
    CHECK(patch(st_path, TENSOR, 77, 0x3f80) == 0 && patch(st_path, TENSOR, 5, 0xff80) == 0, "patch -Inf");
    expect(tmp, 1, OMNI_ERR_MODEL, "-Inf, checked");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) {}
    return check_exit();
}
