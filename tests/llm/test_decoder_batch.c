/* test_decoder_batch.c - llm_forward_batch (continuous batching on the CPU): several sequences of different
 * lengths in one step, prefill and decode mixed, give the same logits as each sequence run alone (to f32
 * summation order: the GEMMs see more rows; bound 1e-5 of max|logit|) and the same greedy tokens; on the dense
 * text fixtures and the MoE Omni thinker fixture. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/model.h"

#define NSEQ 3
#define STEPS 6

typedef struct {
    int32_t *ids;
    int n;
} prompt_t;

static kv_cache *cache(llm_model *m, int n_seqs, int *seqs) {
    kv_params p = llm_model_kv_params(m);
    kv_parse_mode("f32", &p.fmt);
    p.max_tokens = 4096;
    p.max_seqs = n_seqs;
    kv_cache *kv = NULL;
    if (kv_init(&p, &kv)) return NULL;
    for (int i = 0; i < n_seqs; i++)
        if (kv_seq_add(kv, &seqs[i])) return NULL;
    return kv;
}

static float rel(const float *a, const float *b, int V) {
    float md = 0, mr = 0;
    for (int i = 0; i < V; i++) {
        md = fmaxf(md, fabsf(a[i] - b[i]));
        mr = fmaxf(mr, fabsf(b[i]));
    }
    return md / mr;
}

/* Reference: each prompt alone, then STEPS greedy tokens; logits after the prompt and after the last step. */
static void alone(llm_model *m, const prompt_t *p, float *first, float *last, int32_t *toks) {
    int V = llm_model_config(m)->vocab, seq;
    kv_cache *kv = cache(m, 1, &seq);
    llm_input in = {p->n, p->ids, NULL, 0, NULL};
    CHECK(kv && llm_forward(m, kv, seq, &in, first) == OMNI_OK, "alone prefill: %s", omni_last_error());
    memcpy(last, first, sizeof(float) * V);
    for (int s = 0; s < STEPS; s++) {
        toks[s] = op_argmax(last, V);
        llm_input d = {1, &toks[s], NULL, 0, NULL};
        CHECK(llm_forward(m, kv, seq, &d, last) == OMNI_OK, "alone step");
    }
    kv_free(kv);
}

/* Batched: sequences 0 and 1 prefill together; then each step decodes the running ones while sequence 2
 * prefills in the first step (a mixed prefill + decode step) and decodes afterwards. */
static void batched(llm_model *m, const prompt_t *p, float **first, float **last, int32_t toks[NSEQ][STEPS]) {
    int V = llm_model_config(m)->vocab, seqs[NSEQ], step[NSEQ] = {0};
    kv_cache *kv = cache(m, NSEQ, seqs);
    CHECK(kv != NULL, "kv");
    if (!kv) return;
    llm_input in[NSEQ] = {{p[0].n, p[0].ids, NULL, 0, NULL}, {p[1].n, p[1].ids, NULL, 0, NULL}};
    float *lg[NSEQ] = {first[0], first[1]};
    CHECK(llm_forward_batch(m, kv, 2, seqs, in, lg) == OMNI_OK, "batch prefill: %s", omni_last_error());
    memcpy(last[0], first[0], sizeof(float) * V);
    memcpy(last[1], first[1], sizeof(float) * V);
    int32_t cur[NSEQ];
    for (int it = 0; it <= STEPS; it++) {
        int ids[NSEQ], n = 0;
        float *out[NSEQ];
        for (int i = 0; i < NSEQ; i++) {
            if (i == 2 && it == 0) { /* joins with its whole prompt */
                in[n] = (llm_input){p[2].n, p[2].ids, NULL, 0, NULL};
                out[n] = first[2];
            } else if (i < 2 ? it < STEPS : (it >= 1 && step[2] < STEPS)) {
                if (i == 2 && it == 1) memcpy(last[2], first[2], sizeof(float) * V);
                cur[i] = toks[i][step[i]++] = op_argmax(last[i], V);
                in[n] = (llm_input){1, &cur[i], NULL, 0, NULL};
                out[n] = last[i];
            } else {
                continue;
            }
            ids[n++] = seqs[i];
        }
        if (n) CHECK(llm_forward_batch(m, kv, n, ids, in, out) == OMNI_OK, "batch step %d: %s", it, omni_last_error());
    }
    kv_free(kv);
}

static void run_model(const char *dir, const char *case_names[NSEQ]) {
    llm_model *m = NULL;
    CHECK(llm_model_load(dir, &m) == OMNI_OK, "%s: %s", dir, omni_last_error());
    if (!m) return;
    char path[4300];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *txt = omni_read_file(path, NULL);
    cJSON *e = cJSON_Parse(txt);
    free(txt);
    prompt_t p[NSEQ] = {{0}};
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(e, "cases")) {
        for (int i = 0; i < NSEQ; i++)
            if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), case_names[i])) {
                const cJSON *ids = cJSON_GetObjectItem(c, "input_ids");
                p[i].n = cJSON_GetArraySize(ids);
                p[i].ids = malloc(sizeof(int32_t) * p[i].n);
                for (int k = 0; k < p[i].n; k++) p[i].ids[k] = (int32_t)cJSON_GetArrayItem(ids, k)->valuedouble;
            }
    }
    int V = llm_model_config(m)->vocab;
    float *af[NSEQ], *al[NSEQ], *bf[NSEQ], *bl[NSEQ];
    int32_t at[NSEQ][STEPS], bt[NSEQ][STEPS];
    for (int i = 0; i < NSEQ; i++) {
        CHECK(p[i].n > 0, "%s: case %s missing", dir, case_names[i]);
        af[i] = malloc(sizeof(float) * V), al[i] = malloc(sizeof(float) * V);
        bf[i] = malloc(sizeof(float) * V), bl[i] = malloc(sizeof(float) * V);
        if (p[i].n > 0) alone(m, &p[i], af[i], al[i], at[i]);
    }
    batched(m, p, bf, bl, bt);
    for (int i = 0; i < NSEQ; i++) {
        CHECK(rel(bf[i], af[i], V) <= 1e-5f, "%s seq %d prefill rel %.3g", dir, i, rel(bf[i], af[i], V));
        CHECK(rel(bl[i], al[i], V) <= 1e-5f, "%s seq %d after %d steps rel %.3g", dir, i, STEPS, rel(bl[i], al[i], V));
        CHECK(!memcmp(at[i], bt[i], sizeof at[i]), "%s seq %d: greedy tokens differ", dir, i);
        free(af[i]), free(al[i]), free(bf[i]), free(bl[i]), free(p[i].ids);
    }
    cJSON_Delete(e);
    llm_model_free(m);
}

int main(void) {
    const char *text_cases[NSEQ] = {"en_raw", "long_raw", "code_chat"};
    run_model(OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied", text_cases);
    run_model(OMNI_FIXTURES "/text/qvl-h64-hd64-gqa4-untied-sharded", text_cases);
    const char *omni_cases[NSEQ] = {"text", "audio_1s", "audio_9s"}; /* ids only: audio pads embed as tokens */
    run_model(OMNI_FIXTURES "/audio/omni-a", omni_cases);
    return check_exit();
}
