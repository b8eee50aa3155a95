/* test_tower.c - vision tower outputs (merger + every DeepStack merger) against transformers float32 for each
 * fixture model (vision head_dim 64 and 72) and image; max|d| / max|ref| <= 1e-3 per output.
 * Also loads the 72 tower renamed to the Qwen3-Omni layout (thinker.visual., ln_q/mlp.0/mlp.2/merger_list,
 * thinker_config.vision_config), written at test time, and expects identical outputs.
 * Usage: test_vision_tower [parity | bench]  (bench: time a 1024-token image on the largest fixture tower) */
#define _GNU_SOURCE /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kernels/safetensors.h"
#include "vfix.h"
#include "vision/vision.h"

static double rel_err(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d; /* NaN propagates */
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr > 0 ? mr : 1);
}

/* Encode one fixture image with `tower` and compare with its reference file. */
static void check_image(vision_tower *tower, const char *model, const cJSON *img, const cJSON *ref) {
    const char *file = vfix_str(img, "file");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", VFIX_DIR, file);
    vision_prep_params p = vision_prep_default_params();
    p.min_pixels = 4096, p.max_pixels = 16384;
    vision_image im;
    vision_patches pp = {0};
    vision_output out = {0};
    omni_status st = vision_image_load(path, 0, &im);
    if (!st) st = vision_preprocess(&im, &p, &pp);
    if (!st) st = vision_tower_encode(tower, &pp, &out);
    CHECK(st == OMNI_OK, "%s %s: %s", model, file, omni_last_error());
    if (!st) { /* Ctrl+C (issue 15 item 3): a set flag stops the encode before its first block, nothing returned */
        volatile int stop = 1;
        vision_output o2 = {0};
        vision_tower_set_interrupt(tower, &stop);
        omni_status s2 = vision_tower_encode(tower, &pp, &o2);
        vision_tower_set_interrupt(tower, NULL);
        CHECK(s2 == OMNI_ERR_RUNTIME && !strcmp(omni_last_error(), "interrupted") && !o2.embd, "%s %s: interrupt: %d %s",
              model, file, s2, omni_last_error());
    }
    size_t n = 0;
    float *exp = vfix_read(vfix_str(ref, "file"), &n);
    const int nt = vfix_int(ref, "n_tokens"), nds = vfix_int(ref, "n_deepstack");
    CHECK(exp && st == OMNI_OK && out.n_tokens == nt && out.n_deepstack == nds &&
              n == sizeof(float) * (size_t)(1 + nds) * nt * out.out_hidden,
          "%s %s: %d tokens %d deepstack, reference %d/%d (%zu bytes)", model, file, out.n_tokens, out.n_deepstack,
          nt, nds, n);
    if (exp && st == OMNI_OK && n == sizeof(float) * (size_t)(1 + nds) * nt * out.out_hidden) {
        const size_t per = (size_t)nt * out.out_hidden;
        double e = rel_err(out.embd, exp, per);
        CHECK(e <= 1e-3, "%s %s: merger rel err %.2e", model, file, e);
        fprintf(stderr, "%s %-12s %3d tokens  merger %.1e", model, file, nt, e);
        for (int k = 0; k < nds; k++) {
            double ek = rel_err(out.deepstack[k], exp + (k + 1) * per, per);
            CHECK(ek <= 1e-3, "%s %s: deepstack %d rel err %.2e", model, file, k, ek);
            fprintf(stderr, "  ds%d %.1e", k, ek);
        }
        fprintf(stderr, "  %.1f ms\n", out.encode_ms);
    }
    free(exp);
    vision_output_free(&out);
    vision_patches_free(&pp);
    vision_image_free(&im);
}

static void check_model(const cJSON *man, const cJSON *model, const char *dir, const char *label) {
    omni_ckpt *ck = NULL;
    vision_tower *tower = NULL;
    omni_status st = omni_ckpt_open(dir, &ck);
    if (!st) st = vision_tower_load(dir, ck, &tower);
    CHECK(st == OMNI_OK, "%s: %s", dir, omni_last_error());
    if (!st) {
        const vision_config *c = vision_tower_config(tower);
        CHECK(c->head_dim == vfix_int(model, "head_dim") && c->depth == vfix_int(model, "depth"),
              "%s: head_dim %d depth %d", label, c->head_dim, c->depth);
        const cJSON *ref;
        cJSON_ArrayForEach(ref, cJSON_GetObjectItem(model, "tower")) {
            const cJSON *img;
            cJSON_ArrayForEach(img, cJSON_GetObjectItem(man, "images"))
                if (!strcmp(vfix_str(img, "file"), vfix_str(ref, "image"))) check_image(tower, label, img, ref);
        }
    }
    vision_tower_free(tower);
    omni_ckpt_free(ck);
}

/* ---- Qwen3-Omni layout, written at test time ---------------------------------------------------------------- */

static void omni_name(const char *vl, char *out, size_t n) {
    const char *rest = vl + strlen("model.visual.");
    if (strncmp(rest, "merger.", 7) && strncmp(rest, "deepstack_merger_list.", 22)) {
        snprintf(out, n, "thinker.visual.%s", rest);
        return;
    }
    char tmp[256];
    if (!strncmp(rest, "deepstack_merger_list.", 22))
        snprintf(tmp, sizeof tmp, "merger_list.%s", rest + 22);
    else
        snprintf(tmp, sizeof tmp, "%s", rest);
    static const char *from[] = {".norm.", ".linear_fc1.", ".linear_fc2."}, *to[] = {".ln_q.", ".mlp.0.", ".mlp.2."};
    for (int i = 0; i < 3; i++) {
        char *p = strstr(tmp, from[i]);
        if (p) {
            char t2[256];
            snprintf(t2, sizeof t2, "%.*s%s%s", (int)(p - tmp), tmp, to[i], p + strlen(from[i]));
            snprintf(tmp, sizeof tmp, "%s", t2);
        }
    }
    snprintf(out, n, "thinker.visual.%s", tmp);
}

static int write_omni_checkpoint(const char *src, const char *dst) {
    omni_ckpt *ck = NULL;
    if (omni_ckpt_open(src, &ck)) return 0;
    char *hdr = malloc(1 << 20);
    size_t hl = 0, off = 0;
    hl += sprintf(hdr + hl, "{");
    int first = 1;
    for (int i = 0; i < omni_ckpt_count(ck); i++) {
        const char *name = omni_ckpt_name(ck, i);
        if (strncmp(name, "model.visual.", 13)) continue;
        const omni_tensor *t = omni_ckpt_find(ck, name);
        char nn[320];
        omni_name(name, nn, sizeof nn);
        size_t bytes = (size_t)omni_tensor_numel(t) * omni_dtype_size(t->dtype);
        hl += sprintf(hdr + hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", first ? "" : ",", nn,
                      t->dtype == OMNI_BF16 ? "BF16" : t->dtype == OMNI_F16 ? "F16" : "F32");
        for (int d = 0; d < t->ndim; d++) hl += sprintf(hdr + hl, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        hl += sprintf(hdr + hl, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes, first = 0;
    }
    hl += sprintf(hdr + hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    char path[2048];
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    FILE *f = fopen(path, "wb");
    uint64_t n = hl;
    int ok = f && fwrite(&n, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl;
    for (int i = 0; ok && i < omni_ckpt_count(ck); i++) {
        const char *name = omni_ckpt_name(ck, i);
        if (strncmp(name, "model.visual.", 13)) continue;
        const omni_tensor *t = omni_ckpt_find(ck, name);
        size_t bytes = (size_t)omni_tensor_numel(t) * omni_dtype_size(t->dtype);
        ok = fwrite(t->data, 1, bytes, f) == bytes;
    }
    if (f) fclose(f);
    free(hdr);
    omni_ckpt_free(ck);
    /* config: the Qwen3-VL vision_config under thinker_config */
    char *cfg = NULL;
    snprintf(path, sizeof path, "%s/config.json", src);
    FILE *cf = fopen(path, "rb");
    cJSON *root = NULL;
    if (cf) {
        fseek(cf, 0, SEEK_END);
        long len = ftell(cf);
        rewind(cf);
        cfg = calloc((size_t)len + 1, 1);
        if (fread(cfg, 1, (size_t)len, cf) == (size_t)len) root = cJSON_Parse(cfg);
        fclose(cf);
    }
    free(cfg);
    if (!root) return 0;
    cJSON *vc = cJSON_DetachItemFromObject(root, "vision_config");
    cJSON *omni = cJSON_CreateObject(), *th = cJSON_CreateObject();
    cJSON_AddStringToObject(omni, "model_type", "qwen3_omni_moe");
    cJSON_AddItemToObject(th, "vision_config", vc);
    cJSON_AddItemToObject(omni, "thinker_config", th);
    char *txt = cJSON_Print(omni);
    snprintf(path, sizeof path, "%s/config.json", dst);
    FILE *of = fopen(path, "wb");
    ok = ok && of && fputs(txt, of) >= 0;
    if (of) fclose(of);
    free(txt);
    cJSON_Delete(omni);
    cJSON_Delete(root);
    return ok;
}

static void test_parity(void) {
    cJSON *man = vfix_manifest();
    CHECK(man != NULL, "manifest.json missing");
    if (!man) return;
    const cJSON *model, *m72 = NULL;
    cJSON_ArrayForEach(model, cJSON_GetObjectItem(man, "models")) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", VFIX_DIR, vfix_str(model, "dir"));
        check_model(man, model, dir, vfix_str(model, "dir"));
        if (vfix_int(model, "head_dim") == 72) m72 = model;
    }
    CHECK(m72 != NULL, "no head_dim 72 model");
    char tmp[] = "/tmp/omni_vis_omni_XXXXXX";
    if (m72 && mkdtemp(tmp)) {
        char src[1024];
        snprintf(src, sizeof src, "%s/%s", VFIX_DIR, vfix_str(m72, "dir"));
        CHECK(write_omni_checkpoint(src, tmp), "writing the Omni-layout checkpoint in %s", tmp);
        check_model(man, m72, tmp, "omni-h72");
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd)) fprintf(stderr, "cannot remove %s\n", tmp);
    }
    cJSON_Delete(man);
}

/* 1024x1024 picture -> 64x64 patches = 1024 tokens through the largest fixture tower. */
static void test_bench(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vl-h72", VFIX_DIR);
    omni_ckpt *ck = NULL;
    vision_tower *tower = NULL;
    omni_status st = omni_ckpt_open(dir, &ck);
    if (!st) st = vision_tower_load(dir, ck, &tower);
    CHECK(st == OMNI_OK, "%s", omni_last_error());
    const int W = 1024, H = 1024;
    uint8_t *rgb = malloc((size_t)W * H * 3);
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)((i * 7 + (i / 3071) * 13) & 255);
    vision_image im;
    vision_patches pp = {0};
    vision_output out = {0};
    vision_prep_params p = vision_prep_default_params();
    if (!st) st = vision_image_from_rgb(rgb, W, H, &im);
    double t0 = omni_time_ms();
    if (!st) st = vision_preprocess(&im, &p, &pp);
    double t1 = omni_time_ms();
    if (!st) st = vision_tower_encode(tower, &pp, &out);
    CHECK(st == OMNI_OK && out.n_tokens == 1024, "encode: %s (%d tokens)", omni_last_error(), out.n_tokens);
    int finite = 1;
    for (size_t i = 0; st == OMNI_OK && i < (size_t)out.n_tokens * out.out_hidden; i++) finite &= isfinite(out.embd[i]);
    CHECK(finite, "non-finite embeddings");
    printf("vision tower bench: %dx%d -> %d tokens, preprocess %.1f ms, encode %.1f ms (fixture tower D=%d depth %d)\n",
           W, H, out.n_tokens, t1 - t0, out.encode_ms, vision_tower_config(tower)->hidden,
           vision_tower_config(tower)->depth);
    vision_output_free(&out);
    vision_patches_free(&pp);
    vision_image_free(&im);
    free(rgb);
    vision_tower_free(tower);
    omni_ckpt_free(ck);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bench"))
        test_bench();
    else
        test_parity();
    return check_exit();
}
