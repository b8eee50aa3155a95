/* test_config_variants.c - committed text fixtures under edited config.json files (tests/variant_dir.h): config
 * flags that transformers 5.17 reads differently from what their names suggest. Each reference is the unedited
 * fixture's logits, which is what transformers computes for the edited directory (checked with
 * tools/reference/fidelity_sweep.py on fresh checkpoints and on these very variants: max|d| ~2e-6):
 *  - tie_word_embeddings is read from the model's own config (the top level of a qwen3_vl config.json), not from
 *    text_config: an untied checkpoint whose only flag says true in text_config stays untied;
 *  - no flag anywhere and no lm_head.weight stored: the embedding is the head (transformers would leave the head
 *    randomly initialised; omni's documented choice);
 *  - tie_word_embeddings false at the top level and no lm_head.weight: refused, naming the tensor and the flag. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/model.h"
#include "variant_dir.h"

#define UNTIED OMNI_FIXTURES "/text/qvl-h64-hd64-gqa4-untied-sharded"
#define TIED OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

static void tie_text_only(cJSON *root, const void *u) {
    (void)u;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "tie_word_embeddings");
    cJSON *tc = variant_obj(root, "text_config");
    cJSON_DeleteItemFromObjectCaseSensitive(tc, "tie_word_embeddings");
    cJSON_AddBoolToObject(tc, "tie_word_embeddings", 1);
}

static void tie_nowhere(cJSON *root, const void *u) {
    (void)u;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "tie_word_embeddings");
    cJSON_DeleteItemFromObjectCaseSensitive(variant_obj(root, "text_config"), "tie_word_embeddings");
}

static void tie_false_top(cJSON *root, const void *u) {
    (void)u;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "tie_word_embeddings");
    cJSON_AddBoolToObject(root, "tie_word_embeddings", 0);
}

/* Logits of the fixture case `name` (input_ids from expected.json) through the model in dir vs src's logits. */
static void check_case(const char *label, const char *dir, const char *src, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/expected.json", src);
    char *txt = variant_read_text(path);
    cJSON *exp = txt ? cJSON_Parse(txt) : NULL, *c = NULL, *it;
    free(txt);
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(exp, "cases"))
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), name)) c = it;
    CHECK(c != NULL, "%s: no case %s", src, name);
    llm_model *m = NULL;
    omni_status st = c ? llm_model_load(dir, &m) : OMNI_ERR_INPUT;
    CHECK(st == OMNI_OK, "%s: load: %s", label, omni_last_error());
    if (!st) {
        const cJSON *ids = cJSON_GetObjectItem(c, "input_ids");
        const int n = cJSON_GetArraySize(ids), V = llm_model_config(m)->vocab;
        int32_t *tok = malloc(sizeof(int32_t) * n);
        float *got = malloc(sizeof(float) * V), *ref = malloc(sizeof(float) * V);
        for (int i = 0; i < n; i++) tok[i] = cJSON_GetArrayItem(ids, i)->valueint;
        kv_params kp = llm_model_kv_params(m);
        kv_parse_mode("f32", &kp.fmt);
        kp.max_tokens = n + 8, kp.max_seqs = 1;
        kv_cache *kv = NULL;
        int seq = 0;
        llm_input in = {n, tok, NULL, 0, NULL};
        st = kv_init(&kp, &kv);
        if (!st) st = kv_seq_add(kv, &seq);
        if (!st) st = llm_forward(m, kv, seq, &in, got);
        CHECK(st == OMNI_OK, "%s: forward: %s", label, omni_last_error());
        snprintf(path, sizeof path, "%s/%s", src, cJSON_GetStringValue(cJSON_GetObjectItem(c, "logits_file")));
        FILE *f = fopen(path, "rb");
        int have = f && fread(ref, sizeof(float), V, f) == (size_t)V;
        if (f) fclose(f);
        CHECK(have, "cannot read %s", path);
        if (!st && have) {
            double md = 0, mr = 0;
            for (int i = 0; i < V; i++) md = fmax(md, fabs((double)got[i] - ref[i])), mr = fmax(mr, fabs(ref[i]));
            CHECK(md / mr <= 1e-3 && op_argmax(got, V) == op_argmax(ref, V), "%s: max|d|/max|ref| %.3g, argmax %d/%d",
                  label, md / mr, op_argmax(got, V), op_argmax(ref, V));
            fprintf(stderr, "%s: %s rel err %.2e\n", label, name, md / mr);
        }
        kv_free(kv);
        free(tok), free(got), free(ref);
    }
    llm_model_free(m);
    cJSON_Delete(exp);
}

int main(void) {
    char *d = variant_dir(UNTIED, tie_text_only, NULL);
    check_case("untied, tie only in text_config", d, UNTIED, "en_chat");
    llm_model *m = NULL;
    if (llm_model_load(d, &m) == OMNI_OK)
        CHECK(!llm_model_config(m)->tie_word_embeddings, "text_config's flag must not tie an untied checkpoint");
    llm_model_free(m);
    variant_dir_remove(d);

    d = variant_dir(TIED, tie_nowhere, NULL);
    check_case("no tie flag, no lm_head", d, TIED, "en_chat");
    m = NULL;
    if (llm_model_load(d, &m) == OMNI_OK)
        CHECK(llm_model_config(m)->tie_word_embeddings, "no flag and no lm_head.weight: the embedding is the head");
    llm_model_free(m);
    variant_dir_remove(d);

    d = variant_dir(TIED, tie_false_top, NULL);
    m = NULL;
    omni_status st = llm_model_load(d, &m);
    CHECK(st == OMNI_ERR_MODEL && strstr(omni_last_error(), "no lm_head.weight") &&
              strstr(omni_last_error(), "tie_word_embeddings false"),
          "tie false without lm_head.weight: status %d '%s'", st, omni_last_error());
    llm_model_free(m);
    variant_dir_remove(d);
    return check_exit();
}
