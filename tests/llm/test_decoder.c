/* test_decoder.c - the CPU decoder against transformers (float32, eager) on every text fixture
 * (tests/fixtures/text/<model>/expected.json from tools/reference/make_text_fixtures.py):
 * tokenizer ids equal, last-position logits max|d|/max|ref| <= 1e-3, same argmax and top-5 set, and 16 greedy
 * tokens identical. The 1e-3 bound: f32 accumulation-order differences over a few layers are ~1e-6 relative;
 * anything structural (norm, RoPE, GQA, tie) moves logits by O(1). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/model.h"
#include "llm/tokenizer.h"

static float *read_f32(const char *path, int n) {
    FILE *f = fopen(path, "rb");
    float *v = malloc(sizeof(float) * n);
    if (!f || !v || fread(v, sizeof(float), n, f) != (size_t)n) {
        free(v);
        v = NULL;
    }
    if (f) fclose(f);
    return v;
}

static int *json_ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int *v = malloc(sizeof(int) * (*n > 0 ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = (int)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

static kv_cache *new_cache(llm_model *m, int ctx, int *seq) {
    kv_params p = llm_model_kv_params(m);
    kv_parse_mode("f32", &p.fmt);
    p.max_tokens = ctx;
    p.max_seqs = 1;
    kv_cache *kv = NULL;
    if (kv_init(&p, &kv) || kv_seq_add(kv, seq)) {
        fprintf(stderr, "kv: %s\n", omni_last_error());
        kv_free(kv);
        return NULL;
    }
    return kv;
}

static void compare_logits(const char *name, const float *got, const float *ref, int V, const cJSON *c) {
    float maxd = 0, maxr = 0;
    for (int i = 0; i < V; i++) {
        maxd = fmaxf(maxd, fabsf(got[i] - ref[i]));
        maxr = fmaxf(maxr, fabsf(ref[i]));
    }
    CHECK(maxd / maxr <= 1e-3f, "%s: max|d|/max|ref| = %.3g", name, maxd / maxr);
    int am = (int)cJSON_GetObjectItem(c, "argmax")->valuedouble;
    CHECK(op_argmax(got, V) == am, "%s: argmax %d, want %d", name, op_argmax(got, V), am);
    int idx[5];
    float val[5];
    op_topk(got, V, 5, idx, val);
    const cJSON *top5 = cJSON_GetObjectItem(c, "top5"), *e;
    int same = 0;
    cJSON_ArrayForEach(e, top5) {
        int id = (int)cJSON_GetArrayItem(e, 0)->valuedouble;
        for (int j = 0; j < 5; j++) same += idx[j] == id;
    }
    CHECK(same == 5, "%s: top-5 sets differ (%d common)", name, same);
    if (omni_log_level() >= 2) fprintf(stderr, "  %s: rel %.2e\n", name, maxd / maxr);
}

/* Greedy continuation with the same stop rule as generate(): stop after an EOS or max tokens. */
static void check_greedy(const char *name, llm_model *m, kv_cache *kv, int seq, float *logits, const cJSON *c) {
    int n_want, *want = json_ints(cJSON_GetObjectItem(c, "generated_ids"), &n_want);
    int max_new = 16, n = 0, ok = 1;
    const llm_config *cfg = llm_model_config(m);
    while (n < max_new) {
        int id = op_argmax(logits, cfg->vocab);
        ok = ok && n < n_want && id == want[n];
        n++;
        if (llm_config_is_eos(cfg, id) || n == max_new) break;
        llm_input in = {1, &id, NULL, 0, NULL};
        if (llm_forward(m, kv, seq, &in, logits)) break;
    }
    CHECK(ok && n == n_want, "%s: greedy tokens differ (got %d tokens, want %d)", name, n, n_want);
    free(want);
}

static void run_case(llm_model *m, llm_tokenizer *tok, const char *dir, const cJSON *c, float *logits) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text"));
    int n_want, *want = json_ints(cJSON_GetObjectItem(c, "input_ids"), &n_want);
    int32_t *ids = NULL;
    int n = 0;
    CHECK(llm_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n, NULL) == OMNI_OK, "%s: encode", name);
    int same = n == n_want;
    for (int i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECK(same, "%s/%s: token ids differ from the reference tokenizer", dir, name);
    int V = llm_model_config(m)->vocab, seq;
    kv_cache *kv = new_cache(m, n_want + 32, &seq);
    int32_t *in_ids = malloc(sizeof(int32_t) * n_want);
    for (int i = 0; i < n_want; i++) in_ids[i] = want[i];
    llm_input in = {n_want, in_ids, NULL, 0, NULL};
    omni_status st = kv ? llm_forward(m, kv, seq, &in, logits) : OMNI_ERR_RUNTIME;
    CHECK(st == OMNI_OK, "%s: forward: %s", name, omni_last_error());
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(c, "logits_file")));
    float *ref = read_f32(path, V);
    CHECK(ref != NULL, "cannot read %s", path);
    if (!st && ref) {
        compare_logits(name, logits, ref, V, c);
        check_greedy(name, m, kv, seq, logits, c);
    }
    free(ref);
    free(in_ids);
    free(ids);
    free(want);
    kv_free(kv);
}

static void run_model(const char *dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *txt = omni_read_file(path, NULL);
    if (!txt) return; /* not a fixture dir */
    cJSON *exp = cJSON_Parse(txt);
    free(txt);
    llm_model *m = NULL;
    llm_tokenizer *tok = NULL;
    double t0 = omni_time_ms();
    omni_status st = llm_model_load(dir, &m);
    CHECK(st == OMNI_OK, "%s: load: %s", dir, omni_last_error());
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!st) st = llm_tokenizer_load(path, &tok);
    CHECK(st == OMNI_OK, "%s: tokenizer: %s", dir, omni_last_error());
    if (!st) {
        float *logits = malloc(sizeof(float) * llm_model_config(m)->vocab);
        const cJSON *c;
        int n = 0;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "cases")) {
            run_case(m, tok, dir, c, logits);
            n++;
        }
        CHECK(n >= 4, "%s: only %d cases", dir, n);
        free(logits);
        printf("%s: %d cases in %.0f ms\n", strrchr(dir, '/') + 1, n, omni_time_ms() - t0);
    }
    llm_tokenizer_free(tok);
    llm_model_free(m);
    cJSON_Delete(exp);
}

int main(void) {
    DIR *d = opendir(OMNI_FIXTURES "/text");
    CHECK(d != NULL, "no fixtures dir");
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/text/%s", OMNI_FIXTURES, de->d_name);
        int before = check_pass_ + check_fail_;
        run_model(dir);
        n += check_pass_ + check_fail_ > before;
    }
    if (d) closedir(d);
    CHECK(n >= 4, "only %d fixture models found", n);
    return check_exit();
}
