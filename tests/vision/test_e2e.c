/* test_e2e.c - image prompt end to end against transformers float32 (eager): two fixture images are loaded,
 * preprocessed and encoded by the vision tower; their embeddings and DeepStack features replace the
 * <|image_pad|> tokens of the fixture prompt (spans); positions come from llm_positions_build. Checks:
 * last-position logits max|d|/max|ref| <= 1e-3, same argmax and top-5 set, and 16 greedy tokens identical
 * (decode positions = cache index + rope_delta; no EOS stop, as the reference loop); the same prompt prefilled
 * in two chunks gives the same last logits.
 * Config variants of the first model (tests/variant_dir.h), same references: transformers 5.17 interleaves the
 * MRoPE slots whether text_config.rope_parameters.mrope_interleaved is true, false or absent, and an absent
 * mrope_section is [24, 20, 20] (for head_dim 32 the same slot map as the fixture's [6, 5, 5]); checked with
 * transformers on these variant directories (max|d| 2.3e-6 vs the fixture, same greedy tokens). */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/model.h"
#include "llm/positions.h"
#include "variant_dir.h"
#include "vfix.h"
#include "vision/vision.h"

#define MAX_IMG 4

typedef struct {
    vision_output out[MAX_IMG];
    llm_grid grids[MAX_IMG];
    int n;
} encoded;

static omni_status encode_images(const char *dir, vision_tower *tower, const cJSON *files, encoded *enc) {
    vision_prep_params p = vision_prep_default_params();
    omni_status st = vision_prep_load_config(dir, &p);
    const cJSON *f;
    memset(enc, 0, sizeof(*enc));
    cJSON_ArrayForEach(f, files) {
        if (st || enc->n >= MAX_IMG) break;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VFIX_DIR, f->valuestring);
        vision_image_info info;
        st = vision_encode_file(tower, &p, path, 0, &enc->out[enc->n], &info);
        if (!st) {
            const vision_output *o = &enc->out[enc->n];
            enc->grids[enc->n] = (llm_grid){o->grid_t, o->grid_h, o->grid_w};
            CHECK(info.n_tokens == o->n_tokens && info.resized_w == o->grid_w * 16 && info.resized_h == o->grid_h * 16,
                  "%s: image info", path);
            fprintf(stderr, "image %s: %dx%d -> %dx%d, %d visual tokens, encode %.1f ms\n", f->valuestring, info.width,
                    info.height, info.resized_w, info.resized_h, info.n_tokens, info.encode_ms);
            enc->n++;
        }
    }
    return st;
}

/* One span per run of image tokens, in order. */
static int make_spans(const int32_t *ids, int n, int image_id, const encoded *enc, llm_span *spans) {
    int k = 0;
    for (int i = 0; i < n && k < enc->n;) {
        if (ids[i] != image_id) {
            i++;
            continue;
        }
        const vision_output *o = &enc->out[k];
        llm_span *s = &spans[k];
        memset(s, 0, sizeof(*s));
        s->start = i, s->len = o->n_tokens, s->embd = o->embd, s->n_deepstack = o->n_deepstack;
        for (int d = 0; d < o->n_deepstack; d++) s->deepstack[d] = o->deepstack[d];
        i += o->n_tokens, k++;
    }
    return k;
}

static void compare_logits(const char *name, const float *got, const float *ref, int V) {
    double md = 0, mr = 0;
    for (int i = 0; i < V; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    CHECK(md / mr <= 1e-3, "%s: logits max|d|/max|ref| = %.3g", name, md / mr);
    CHECK(op_argmax(got, V) == op_argmax(ref, V), "%s: argmax %d want %d", name, op_argmax(got, V), op_argmax(ref, V));
    int ig[5], ir[5], same = 0;
    float vg[5], vr[5];
    op_topk(got, V, 5, ig, vg);
    op_topk(ref, V, 5, ir, vr);
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) same += ig[a] == ir[b];
    CHECK(same == 5, "%s: top-5 sets differ (%d common)", name, same);
    fprintf(stderr, "%s: logits rel err %.2e, argmax %d\n", name, md / mr, op_argmax(got, V));
}

static void greedy(const char *name, llm_model *m, kv_cache *kv, int seq, int delta, float *logits, const cJSON *want) {
    const int V = llm_model_config(m)->vocab, n_want = cJSON_GetArraySize(want);
    int ok = 1, n = 0;
    for (; n < n_want && ok; n++) {
        int32_t id = op_argmax(logits, V), pos[3];
        ok = id == cJSON_GetArrayItem(want, n)->valueint;
        if (!ok) fprintf(stderr, "%s: greedy token %d is %d, want %d\n", name, n, id, cJSON_GetArrayItem(want, n)->valueint);
        llm_positions_text((int)kv_seq_len(kv, seq), 1, delta, pos);
        llm_input in = {1, &id, pos, 0, NULL};
        if (n + 1 < n_want && llm_forward(m, kv, seq, &in, logits) != OMNI_OK) ok = 0;
    }
    CHECK(ok && n == n_want && n == 16, "%s: greedy tokens differ (%d matched of %d)", name, n - !ok, n_want);
}

/* Same prompt in two chunks split between the two images (after the first image's span): chunk positions are
 * slices of the whole-prompt streams, span starts are chunk-relative. */
static void two_chunks(const char *name, llm_model *m, const int32_t *ids, const int32_t *pos, int n,
                       const llm_span *spans, const float *ref) {
    const int V = llm_model_config(m)->vocab, cut = spans[0].start + spans[0].len + 1;
    kv_params kp = llm_model_kv_params(m);
    kv_parse_mode("f32", &kp.fmt);
    kp.max_tokens = n + 32, kp.max_seqs = 1;
    kv_cache *kv = NULL;
    int seq = 0;
    float *logits = malloc(sizeof(float) * V);
    int32_t *cpos = malloc(sizeof(int32_t) * 3 * n);
    omni_status st = kv_init(&kp, &kv);
    if (!st) st = kv_seq_add(kv, &seq);
    for (int c = 0; c < 2 && !st; c++) {
        const int a = c ? cut : 0, len = c ? n - cut : cut;
        for (int s3 = 0; s3 < 3; s3++)
            for (int i = 0; i < len; i++) cpos[s3 * len + i] = pos[s3 * n + a + i];
        llm_span sp = spans[c];
        sp.start -= a;
        llm_input in = {len, ids + a, cpos, 1, &sp};
        st = llm_forward(m, kv, seq, &in, c ? logits : NULL);
    }
    CHECK(st == OMNI_OK, "%s chunked: %s", name, omni_last_error());
    if (!st) {
        char label[128];
        snprintf(label, sizeof label, "%s (2 chunks)", name);
        compare_logits(label, logits, ref, V);
    }
    free(cpos), free(logits);
    kv_free(kv);
}

/* The e2e case of a manifest model, with its model directory (or `variant`, a directory of the same weights). */
static void run_model(const cJSON *model, const char *variant, const char *label) {
    const char *name = label ? label : vfix_str(model, "dir");
    const cJSON *e = cJSON_GetObjectItem(model, "e2e");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", VFIX_DIR, vfix_str(model, "dir"));
    if (variant) snprintf(dir, sizeof dir, "%s", variant);
    llm_model *m = NULL;
    vision_tower *tower = NULL;
    kv_cache *kv = NULL;
    encoded enc = {0};
    int seq = 0, delta = 0;
    size_t nb = 0, nl = 0;
    int32_t *ids = vfix_read(vfix_str(e, "ids"), &nb);
    float *ref = vfix_read(vfix_str(e, "logits"), &nl), *logits = NULL;
    const int n = (int)(nb / 4);
    int32_t *pos = malloc(sizeof(int32_t) * 3 * (n + 1));
    omni_status st = ids && ref ? llm_model_load(dir, &m) : OMNI_ERR_INPUT;
    if (!st) st = vision_tower_load(dir, llm_model_ckpt(m), &tower);
    if (!st) st = encode_images(dir, tower, cJSON_GetObjectItem(e, "images"), &enc);
    const llm_config *cfg = m ? llm_model_config(m) : NULL;
    if (!st) {
        llm_pos_config pc = {cfg->image_token_id, cfg->video_token_id, -1, 2};
        st = llm_positions_build(ids, n, &pc, enc.grids, enc.n, NULL, 0, pos, &delta);
    }
    if (!st) {
        kv_params kp = llm_model_kv_params(m);
        kv_parse_mode("f32", &kp.fmt);
        kp.max_tokens = n + 32, kp.max_seqs = 1;
        st = kv_init(&kp, &kv);
        if (!st) st = kv_seq_add(kv, &seq);
    }
    CHECK(st == OMNI_OK, "%s: %s", name, omni_last_error());
    if (!st) {
        CHECK(nl == sizeof(float) * (size_t)cfg->vocab, "%s: logits fixture has %zu bytes", name, nl);
        CHECK(delta == vfix_int(e, "rope_delta"), "%s: rope_delta %d", name, delta);
        llm_span spans[MAX_IMG];
        int ns = make_spans(ids, n, cfg->image_token_id, &enc, spans);
        CHECK(ns == enc.n && ns == 2, "%s: %d spans for %d images", name, ns, enc.n);
        logits = malloc(sizeof(float) * cfg->vocab);
        llm_input in = {n, ids, pos, ns, spans};
        double t0 = omni_time_ms();
        st = llm_forward(m, kv, seq, &in, logits);
        CHECK(st == OMNI_OK, "%s: forward: %s", name, omni_last_error());
        fprintf(stderr, "%s: %d tokens (%d visual) prefill %.1f ms\n", name, n, spans[0].len + spans[1].len,
                omni_time_ms() - t0);
        if (!st && nl == sizeof(float) * (size_t)cfg->vocab) {
            compare_logits(name, logits, ref, cfg->vocab);
            greedy(name, m, kv, seq, delta, logits, cJSON_GetObjectItem(e, "greedy"));
            two_chunks(name, m, ids, pos, n, spans, ref);
        }
    }
    for (int i = 0; i < enc.n; i++) vision_output_free(&enc.out[i]);
    free(logits), free(pos), free(ids), free(ref);
    kv_free(kv);
    vision_tower_free(tower);
    llm_model_free(m);
}

/* Edits of text_config.rope_parameters: "drop KEY" or "KEY=JSON". */
static void edit_rope(cJSON *root, const void *user) {
    cJSON *rp = variant_obj(root, "text_config.rope_parameters");
    for (const char *const *e = user; *e; e++) {
        char key[64];
        const char *eq = strchr(*e, '=');
        if (!eq) {
            cJSON_DeleteItemFromObjectCaseSensitive(rp, *e + 5);
            continue;
        }
        snprintf(key, sizeof key, "%.*s", (int)(eq - *e), *e);
        cJSON_DeleteItemFromObjectCaseSensitive(rp, key);
        cJSON_AddItemToObject(rp, key, cJSON_Parse(eq + 1));
    }
}

static void run_variants(const cJSON *model) {
    static const char *no_flag[] = {"drop mrope_interleaved", NULL};
    static const char *flag_false[] = {"mrope_interleaved=false", NULL};
    static const char *no_section[] = {"drop mrope_section", "drop mrope_interleaved", NULL};
    static const struct {
        const char *label, *const *edits;
    } v[] = {{"mrope_interleaved absent", no_flag},
             {"mrope_interleaved false", flag_false},
             {"mrope_section absent", no_section}};
    CHECK(model != NULL, "no manifest model for the variants");
    for (size_t i = 0; model && i < sizeof v / sizeof v[0]; i++) {
        char src[1024];
        snprintf(src, sizeof src, "%s/%s", VFIX_DIR, vfix_str(model, "dir"));
        char *dir = variant_dir(src, edit_rope, v[i].edits);
        run_model(model, dir, v[i].label);
        variant_dir_remove(dir);
    }
}

int main(void) {
    cJSON *man = vfix_manifest();
    CHECK(man != NULL, "manifest.json missing");
    const cJSON *model;
    int n = 0;
    if (man)
        cJSON_ArrayForEach(model, cJSON_GetObjectItem(man, "models")) run_model(model, NULL, NULL), n++;
    CHECK(n >= 2, "%d models", n);
    run_variants(man ? cJSON_GetArrayItem(cJSON_GetObjectItem(man, "models"), 0) : NULL);
    cJSON_Delete(man);
    return check_exit();
}
