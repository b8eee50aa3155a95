/* test_preprocess.c - smart_resize grids/token counts for many sizes and pixel_values against transformers'
 * Qwen2VLImageProcessor (fixtures from tools/reference/make_vision_fixtures.py).
 * pixel_values: PNG fixtures must match exactly (resized or not); JPEGs decoded from the file are within
 * mean |d| <= 0.5/255 and max |d| <= 2/255 of the reference (exact when built with libjpeg), and exact from
 * the pixels PIL decoded. The resampler alone is compared byte for byte with torch on awkward size pairs. */
#define _GNU_SOURCE /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "vfix.h"
#include "vision/vision.h"

static void test_sizes(const cJSON *man) {
    const cJSON *row;
    int n = 0, n_ok = 0, n_err = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(man, "sizes")) {
        vision_prep_params p = vision_prep_default_params();
        p.min_pixels = (int64_t)vfix_num(row, "min_pixels"), p.max_pixels = (int64_t)vfix_num(row, "max_pixels");
        int w = vfix_int(row, "width"), h = vfix_int(row, "height"), gh = 0, gw = 0, tok = 0;
        omni_status st = vision_image_token_count(h, w, &p, &gh, &gw, &tok);
        int ok = cJSON_IsTrue(cJSON_GetObjectItem(row, "ok"));
        CHECK((st == OMNI_OK) == ok, "%dx%d (%s): status %d, transformers %s (%s)", w, h, vfix_str(row, "budget"), st,
              ok ? "accepts" : "refuses", omni_last_error());
        if (ok && st == OMNI_OK) {
            const cJSON *g = cJSON_GetObjectItem(row, "grid");
            int egh = cJSON_GetArrayItem(g, 1)->valueint, egw = cJSON_GetArrayItem(g, 2)->valueint;
            CHECK(gh == egh && gw == egw && tok == vfix_int(row, "tokens"), "%dx%d (%s): grid %dx%d tokens %d, want %dx%d %d",
                  w, h, vfix_str(row, "budget"), gh, gw, tok, egh, egw, vfix_int(row, "tokens"));
            n_ok++;
        } else if (!ok) {
            n_err++;
        }
        n++;
    }
    CHECK(n >= 40 && n_ok >= 20 && n_err >= 4, "size table too small: %d rows (%d ok, %d refused)", n, n_ok, n_err);
}

/* Reference pixel value of patch row r, column k, rebuilt from the processor's resized uint8 image. */
static float ref_value(const uint8_t *u8, int W, int gw, int r, int k) {
    int block = r / 4, i = (r % 4) / 2, j = r % 2, R = block / (gw / 2), C = block % (gw / 2);
    int c = k / 512, y = (k / 16) % 16, x = k % 16;
    int py = (2 * R + i) * 16 + y, px = (2 * C + j) * 16 + x;
    return ((float)u8[((size_t)py * W + px) * 3 + c] - 127.5f) / 127.5f;
}

/* Compare pixel_values with the reference; returns max |d| in 0..255 units, writes the mean. */
static double compare_pixels(const vision_patches *pp, const uint8_t *u8, int W, double *mean) {
    double sum = 0, mx = 0;
    for (int r = 0; r < pp->n_patches; r++)
        for (int k = 0; k < pp->patch_dim; k++) {
            double d = fabs(pp->pixels[(size_t)r * pp->patch_dim + k] - ref_value(u8, W, pp->grid_w, r, k)) * 127.5;
            sum += d;
            mx = d > mx ? d : mx;
        }
    *mean = sum / ((double)pp->n_patches * pp->patch_dim);
    return mx;
}

static void check_image(const cJSON *e, const vision_prep_params *p, const vision_image *img, int exact,
                        const char *how) {
    const char *file = vfix_str(e, "file");
    const cJSON *g = cJSON_GetObjectItem(e, "grid");
    vision_patches pp;
    omni_status st = vision_preprocess(img, p, &pp);
    CHECK(st == OMNI_OK, "%s: %s", file, omni_last_error());
    if (st != OMNI_OK) return;
    int gh = cJSON_GetArrayItem(g, 1)->valueint, gw = cJSON_GetArrayItem(g, 2)->valueint;
    CHECK(pp.grid_t == 1 && pp.grid_h == gh && pp.grid_w == gw, "%s: grid %dx%d want %dx%d", file, pp.grid_h,
          pp.grid_w, gh, gw);
    CHECK(pp.patch_dim == 1536, "%s: patch dim %d", file, pp.patch_dim);
    size_t n = 0;
    char name[512];
    snprintf(name, sizeof name, "%s", vfix_str(e, "resized"));
    uint8_t *u8 = vfix_read(name, &n);
    CHECK(u8 && n == (size_t)gh * 16 * gw * 16 * 3, "%s: resized reference missing or wrong size", file);
    if (u8 && n == (size_t)gh * 16 * gw * 16 * 3 && pp.grid_h == gh && pp.grid_w == gw) {
        double mean, mx = compare_pixels(&pp, u8, gw * 16, &mean);
        fprintf(stderr, "%-12s %-10s %4dx%-4d -> %4dx%-4d  mean|d| %.4f/255  max|d| %.1f/255\n", file, how,
                img->width, img->height, pp.resized_w, pp.resized_h, mean, mx);
        if (exact)
            CHECK(mx == 0.0, "%s (%s): pixel_values differ (max %.3f/255)", file, how, mx);
        else
            CHECK(mean <= 0.5 && mx <= 2.0, "%s (%s): mean %.3f/255 max %.3f/255", file, how, mean, mx);
    }
    free(u8);
    vision_patches_free(&pp);
}

static void test_images(const cJSON *man) {
    vision_prep_params p = vision_prep_default_params();
    CHECK(vision_prep_load_config(VFIX_DIR "/vl-h64", &p) == OMNI_OK, "%s", omni_last_error());
    CHECK(p.min_pixels == vfix_int(man, "fixture_min_pixels") && p.max_pixels == vfix_int(man, "fixture_max_pixels"),
          "preprocessor_config.json: min %lld max %lld", (long long)p.min_pixels, (long long)p.max_pixels);
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(man, "images")) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VFIX_DIR, vfix_str(e, "file"));
        vision_image img;
        omni_status st = vision_image_load(path, 0, &img);
        CHECK(st == OMNI_OK, "%s: %s", path, omni_last_error());
        if (st == OMNI_OK) check_image(e, &p, &img, cJSON_IsTrue(cJSON_GetObjectItem(e, "exact")), "file");
        vision_image_free(&img);
        if (vfix_str(e, "rgb")) { /* JPEG: the decoder's pixels as PIL saw them must preprocess exactly */
            size_t nb = 0;
            uint8_t *rgb = vfix_read(vfix_str(e, "rgb"), &nb);
            int w = vfix_int(e, "width"), h = vfix_int(e, "height");
            CHECK(rgb && nb == (size_t)w * h * 3, "%s: rgb fixture", path);
            if (rgb && vision_image_from_rgb(rgb, w, h, &img) == OMNI_OK) check_image(e, &p, &img, 1, "PIL-pixels");
            vision_image_free(&img);
            free(rgb);
        }
        n++;
    }
    CHECK(n >= 6, "only %d images", n);
}

/* vision_resize_bicubic_aa must equal torch's uint8 bicubic antialias resize byte for byte. */
static void test_resize(const cJSON *man) {
    const cJSON *r = cJSON_GetObjectItem(man, "resize"), *t;
    size_t ns = 0, no = 0, off = 0;
    uint8_t *src = vfix_read(vfix_str(r, "src"), &ns), *ref = vfix_read(vfix_str(r, "out"), &no);
    const int w = vfix_int(r, "width"), h = vfix_int(r, "height");
    CHECK(src && ref && ns == (size_t)w * h * 3, "resize fixtures missing");
    int n = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(r, "targets")) {
        if (!src || !ref) break;
        const int ow = vfix_int(t, "width"), oh = vfix_int(t, "height");
        const size_t sz = (size_t)ow * oh * 3;
        uint8_t *out = malloc(sz);
        CHECK(off + sz <= no, "resize_out too short");
        if (off + sz <= no && vision_resize_bicubic_aa(src, h, w, 3, out, oh, ow) == OMNI_OK) {
            int bad = 0;
            for (size_t i = 0; i < sz; i++) bad += out[i] != ref[off + i];
            CHECK(bad == 0, "resize %dx%d -> %dx%d: %d of %zu bytes differ from torch", w, h, ow, oh, bad, sz);
        }
        off += sz, n++;
        free(out);
    }
    CHECK(n >= 8 && off == no, "%d resize cases", n);
    free(src), free(ref);
}

/* Qwen3-Omni style config: min_pixels/max_pixels at the top level override size (as the processor's __init__). */
static void test_omni_config(void) {
    char dir[] = "/tmp/omni_vis_pp_XXXXXX", path[64];
    if (!mkdtemp(dir)) return;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{\"image_processor_type\": \"Qwen2VLImageProcessor\", \"size\": {\"shortest_edge\": 1, "
              "\"longest_edge\": 2}, \"min_pixels\": 3136, \"max_pixels\": 12845056, \"patch_size\": 16, "
              "\"image_mean\": [0.25, 0.5, 0.75], \"image_std\": 0.5}", f);
        fclose(f);
    }
    vision_prep_params p = vision_prep_default_params();
    CHECK(vision_prep_load_config(dir, &p) == OMNI_OK, "%s", omni_last_error());
    CHECK(p.min_pixels == 3136 && p.max_pixels == 12845056, "min %lld max %lld", (long long)p.min_pixels,
          (long long)p.max_pixels);
    CHECK(p.mean[0] == 0.25f && p.mean[2] == 0.75f && p.std[1] == 0.5f, "mean/std");
    remove(path);
    rmdir(dir);
}

static void test_token_limits(void) {
    vision_prep_params p = vision_prep_default_params();
    CHECK(vision_prep_set_token_limits(&p, 1024, 2048) == OMNI_OK, "limits");
    CHECK(p.min_pixels == 1024 * 1024 && p.max_pixels == 2048 * 1024, "min %lld max %lld", (long long)p.min_pixels,
          (long long)p.max_pixels);
    int gh, gw, tok;
    CHECK(vision_image_token_count(480, 640, &p, &gh, &gw, &tok) == OMNI_OK && tok >= 1024 && tok <= 2048,
          "640x480 with 1024..2048 tokens gives %d", tok);
    CHECK(vision_prep_set_token_limits(&p, 3000, 2000) == OMNI_ERR_USAGE, "min > max accepted");
    /* a bound given alone below/above the default other bound moves it (issue 15: --image-max-tokens 32 alone) */
    p = vision_prep_default_params(); /* 64..16384 tokens */
    CHECK(vision_prep_set_token_limits(&p, 0, 32) == OMNI_OK && p.min_pixels == 32 * 1024 && p.max_pixels == 32 * 1024,
          "max 32 alone: %lld..%lld (%s)", (long long)p.min_pixels, (long long)p.max_pixels, omni_last_error());
    p = vision_prep_default_params();
    CHECK(vision_prep_set_token_limits(&p, 20000, 0) == OMNI_OK && p.min_pixels == 20000 * 1024 &&
              p.max_pixels == 20000 * 1024, "min 20000 alone: %lld..%lld", (long long)p.min_pixels, (long long)p.max_pixels);
}

/* A preferred budget is narrowed to the model's own pixel limits, and dropped when the ranges do not overlap. */
static void test_preferred_limits(void) {
    vision_prep_params p = vision_prep_default_params(); /* Qwen3-VL: 64..16384 tokens */
    CHECK(vision_prep_prefer_token_limits(&p, 1024, 2048) == OMNI_OK && p.min_pixels == 1024 * 1024 &&
              p.max_pixels == 2048 * 1024, "inside: min %lld max %lld", (long long)p.min_pixels,
          (long long)p.max_pixels);
    p = vision_prep_default_params();
    p.min_pixels = 4 * 1024, p.max_pixels = 256 * 1024; /* a small model trained for 4..256 tokens */
    CHECK(vision_prep_prefer_token_limits(&p, 1024, 2048) == OMNI_OK && p.min_pixels == 4 * 1024 &&
              p.max_pixels == 256 * 1024, "disjoint: min %lld max %lld", (long long)p.min_pixels,
          (long long)p.max_pixels);
    CHECK(vision_prep_prefer_token_limits(&p, 100, 2048) == OMNI_OK && p.min_pixels == 100 * 1024 &&
              p.max_pixels == 256 * 1024, "overlap: min %lld max %lld", (long long)p.min_pixels,
          (long long)p.max_pixels);
    CHECK(vision_prep_prefer_token_limits(&p, 300, 200) == OMNI_ERR_USAGE, "min > max accepted");
}

int main(void) {
    cJSON *man = vfix_manifest();
    CHECK(man != NULL, "manifest.json missing in %s", VFIX_DIR);
    if (man) {
        test_sizes(man);
        test_images(man);
        test_resize(man);
    }
    test_token_limits();
    test_preferred_limits();
    test_omni_config();
    cJSON_Delete(man);
    return check_exit();
}
