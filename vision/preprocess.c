/* preprocess.c - Qwen2VLImageProcessor (transformers 5.17.0, torchvision backend) in C.
 *
 * smart_resize -> bicubic antialiased resize on uint8 (bit-exact with ATen's CPU uint8 kernel, see
 * resize_axis_weights) -> (x - mean*255) / (std*255) in fp32 -> patches in merge-block order:
 *   pixel_values[N = gt*gh*gw, 3*T*P*P], row index = ((R*(gw/2) + C)*2 + i)*2 + j for merged block (R, C) and
 *   intra-block (i, j); columns ordered (channel, time, y, x); the single frame repeated T times. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "kernels/json.h"
#include "vision/vision.h"

vision_prep_params vision_prep_default_params(void) {
    vision_prep_params p;
    p.patch_size = 16;
    p.temporal_patch_size = 2;
    p.merge_size = 2;
    p.min_pixels = 65536;
    p.max_pixels = 16777216;
    for (int c = 0; c < 3; c++) p.mean[c] = 0.5f, p.std[c] = 0.5f;
    p.rescale_factor = 1.0 / 255.0;
    return p;
}

/* The values of one preprocessor_config.json over *p (type- and range-checked). */
static omni_status read_prep(const cJSON *root, const char *file, vision_prep_params *p) {
    omni_json_ctx j = {file, "", OMNI_ERR_MODEL}, js = {file, "size", OMNI_ERR_MODEL};
    const cJSON *size = NULL;
    const int64_t max_px = (int64_t)1 << 40, max_min = (int64_t)1 << 28; /* a minimum above 268 MP upscales every
                                                                             image past any limit */
    omni_status st = omni_json_object(&j, root, "size", OMNI_JSON_OPTIONAL, &size);
    if (!st) st = omni_json_i64(&js, size, "shortest_edge", OMNI_JSON_OPTIONAL, 0, max_min, &p->min_pixels);
    if (!st) st = omni_json_i64(&js, size, "longest_edge", OMNI_JSON_OPTIONAL, 1, max_px, &p->max_pixels);
    if (!st) st = omni_json_i64(&j, root, "min_pixels", OMNI_JSON_OPTIONAL, 0, max_min, &p->min_pixels);
    if (!st) st = omni_json_i64(&j, root, "max_pixels", OMNI_JSON_OPTIONAL, 1, max_px, &p->max_pixels);
    if (!st) st = omni_json_int(&j, root, "patch_size", OMNI_JSON_OPTIONAL, 1, 64, &p->patch_size);
    if (!st) st = omni_json_int(&j, root, "temporal_patch_size", OMNI_JSON_OPTIONAL, 1, 8, &p->temporal_patch_size);
    if (!st) st = omni_json_int(&j, root, "merge_size", OMNI_JSON_OPTIONAL, 1, 8, &p->merge_size);
    if (!st) st = omni_json_floats(&j, root, "image_mean", OMNI_JSON_OPTIONAL, 3, -1e3, 1e3, p->mean);
    if (!st) st = omni_json_floats(&j, root, "image_std", OMNI_JSON_OPTIONAL, 3, 1e-6, 1e3, p->std);
    if (!st) st = omni_json_double(&j, root, "rescale_factor", OMNI_JSON_OPTIONAL, 1e-9, 1e3, &p->rescale_factor);
    /* steps the processor can skip or do otherwise, which this pipeline always does one way: refused rather than
     * preprocessed differently from transformers (do_convert_rgb only matters for non-RGB input: ours is RGB) */
    static const char *steps[] = {"do_resize", "do_rescale", "do_normalize"};
    for (int i = 0; !st && i < 3; i++) {
        int on = 1;
        if (!(st = omni_json_bool(&j, root, steps[i], OMNI_JSON_OPTIONAL, &on)) && !on)
            st = omni_fail(OMNI_ERR_UNSUPPORTED, "%s: %s false is not supported", file, steps[i]);
    }
    int resample = 3; /* PIL.Image.BICUBIC */
    if (!st && !(st = omni_json_int(&j, root, "resample", OMNI_JSON_OPTIONAL, 0, 5, &resample)) && resample != 3)
        st = omni_fail(OMNI_ERR_UNSUPPORTED, "%s: resample %d is not supported (3, bicubic)", file, resample);
    if (!st && p->min_pixels > p->max_pixels)
        st = omni_fail(OMNI_ERR_MODEL, "%s: min_pixels %lld is above max_pixels %lld", file,
                       (long long)p->min_pixels, (long long)p->max_pixels);
    return st;
}

omni_status vision_prep_parse_json(const char *json, size_t len, vision_prep_params *p) {
    cJSON *root = NULL;
    omni_status st = omni_json_parse(json, len, "preprocessor_config.json", OMNI_ERR_MODEL, &root);
    if (!st && !cJSON_IsObject(root)) st = omni_fail(OMNI_ERR_MODEL, "preprocessor_config.json: not a JSON object");
    vision_prep_params t = *p; /* all or nothing */
    if (!st) st = read_prep(root, "preprocessor_config.json", &t);
    cJSON_Delete(root);
    if (!st) *p = t;
    return st;
}

omni_status vision_prep_load_config(const char *model_dir, vision_prep_params *p) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/preprocessor_config.json", model_dir);
    if (stat(path, &sb) != 0 && errno == ENOENT) return OMNI_OK; /* optional: the defaults stand */
    cJSON *root = NULL;
    omni_status st = omni_json_load(path, OMNI_ERR_MODEL, &root);
    if (!st && !cJSON_IsObject(root)) st = omni_fail(OMNI_ERR_MODEL, "%s: not a JSON object", path);
    if (!st) st = read_prep(root, "preprocessor_config.json", p);
    cJSON_Delete(root);
    return st;
}

omni_status vision_prep_set_token_limits(vision_prep_params *p, int min_tokens, int max_tokens) {
    int64_t unit = (int64_t)p->patch_size * p->merge_size * p->patch_size * p->merge_size;
    int64_t lo = min_tokens > 0 ? min_tokens * unit : p->min_pixels;
    int64_t hi = max_tokens > 0 ? max_tokens * unit : p->max_pixels;
    if (min_tokens <= 0 && lo > hi) lo = hi; /* a bound given alone moves the default one it would cross */
    if (max_tokens <= 0 && lo > hi) hi = lo;
    if (lo > hi)
        return omni_fail(OMNI_ERR_USAGE, "image token limits: min %lld tokens is above max %lld tokens",
                         (long long)(lo / unit), (long long)(hi / unit));
    p->min_pixels = lo, p->max_pixels = hi;
    return OMNI_OK;
}

omni_status vision_prep_prefer_token_limits(vision_prep_params *p, int min_tokens, int max_tokens) {
    vision_prep_params want = *p;
    omni_status st = vision_prep_set_token_limits(&want, min_tokens, max_tokens);
    if (st) return st;
    int64_t lo = want.min_pixels > p->min_pixels ? want.min_pixels : p->min_pixels;
    int64_t hi = want.max_pixels < p->max_pixels ? want.max_pixels : p->max_pixels;
    if (lo <= hi) p->min_pixels = lo, p->max_pixels = hi; /* no overlap: the model's own limits stay */
    return OMNI_OK;
}

/* transformers' smart_resize; Python round() is half-to-even = nearbyint() in the default rounding mode. */
omni_status vision_smart_resize(int height, int width, const vision_prep_params *p, int *out_h, int *out_w) {
    const int factor = p->patch_size * p->merge_size;
    if (height <= 0 || width <= 0) return omni_fail(OMNI_ERR_INPUT, "image has size %dx%d", width, height);
    double hi = height > width ? height : width, lo = height > width ? width : height;
    if (hi / lo > 200.0)
        return omni_fail(OMNI_ERR_INPUT, "image %dx%d: aspect ratio %.1f is over the limit of 200", width, height,
                         hi / lo);
    double h_bar = nearbyint((double)height / factor) * factor;
    double w_bar = nearbyint((double)width / factor) * factor;
    if (h_bar * w_bar > (double)p->max_pixels) {
        double beta = sqrt((double)height * width / (double)p->max_pixels);
        h_bar = fmax(factor, floor(height / beta / factor) * factor);
        w_bar = fmax(factor, floor(width / beta / factor) * factor);
    } else if (h_bar * w_bar < (double)p->min_pixels) {
        double beta = sqrt((double)p->min_pixels / ((double)height * width));
        h_bar = ceil(height * beta / factor) * factor;
        w_bar = ceil(width * beta / factor) * factor;
    }
    if (h_bar < factor || w_bar < factor || h_bar > 1 << 20 || w_bar > 1 << 20)
        return omni_fail(OMNI_ERR_INPUT, "image %dx%d resizes to an invalid %gx%g", width, height, w_bar, h_bar);
    *out_h = (int)h_bar, *out_w = (int)w_bar;
    return OMNI_OK;
}

omni_status vision_image_token_count(int height, int width, const vision_prep_params *p, int *grid_h, int *grid_w,
                                     int *n_tokens) {
    int rh, rw;
    *n_tokens = 0;
    omni_status st = vision_smart_resize(height, width, p, &rh, &rw);
    if (st != OMNI_OK) return st;
    int gh = rh / p->patch_size, gw = rw / p->patch_size;
    if (grid_h) *grid_h = gh;
    if (grid_w) *grid_w = gw;
    *n_tokens = gh * gw / (p->merge_size * p->merge_size);
    return OMNI_OK;
}

/* ---- bicubic antialiased resampling ------------------------------------------------------------------------ */

typedef struct {
    int ksize;       /* weights per output (max_interp_size) */
    int precision;   /* fixed-point bits */
    int *xmin;       /* [out] first input index */
    int *xsize;      /* [out] number of taps */
    int32_t *w;      /* [out, ksize] int16-range weights */
} axis_weights;

/* Keys cubic convolution with a = -0.5 (ATen HelperInterpCubic::aa_filter for antialias=True). */
static double cubic_aa(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

static void axis_weights_free(axis_weights *aw) {
    free(aw->xmin), free(aw->xsize), free(aw->w);
    memset(aw, 0, sizeof(*aw));
}

/* ATen _compute_index_ranges_weights (antialias, double) + _compute_index_ranges_int16_weights. */
static omni_status resize_axis_weights(int in, int out, axis_weights *aw) {
    memset(aw, 0, sizeof(*aw));
    double scale = (double)in / out;
    double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    int ks = (int)ceil(support) * 2 + 1;
    double *wf = calloc((size_t)out * ks, sizeof(double));
    aw->xmin = malloc(sizeof(int) * out), aw->xsize = malloc(sizeof(int) * out);
    aw->w = calloc((size_t)out * ks, sizeof(int32_t));
    if (!wf || !aw->xmin || !aw->xsize || !aw->w) {
        free(wf);
        axis_weights_free(aw);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory for resize weights");
    }
    aw->ksize = ks;
    double wt_max = 0.0, invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    for (int i = 0; i < out; i++) {
        double center = scale * (i + 0.5), total = 0.0;
        int64_t xmin = (int64_t)(center - support + 0.5), xmax = (int64_t)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xsize = (xmax < in ? xmax : in) - xmin;
        if (xsize < 0) xsize = 0;
        if (xsize > ks) xsize = ks;
        double *w = wf + (size_t)i * ks;
        for (int j = 0; j < xsize; j++) {
            w[j] = cubic_aa((j + xmin - center + 0.5) * invscale);
            total += w[j];
        }
        if (total != 0.0)
            for (int j = 0; j < xsize; j++) {
                w[j] /= total;
                if (w[j] > wt_max) wt_max = w[j];
            }
        aw->xmin[i] = (int)xmin, aw->xsize[i] = (int)xsize;
    }
    int prec;
    for (prec = 0; prec < 22; prec++)
        if ((int)(0.5 + wt_max * (1 << (prec + 1))) >= (1 << 15)) break;
    aw->precision = prec;
    for (size_t k = 0; k < (size_t)out * ks; k++) {
        double v = wf[k] * (1 << prec);
        aw->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(wf);
    return OMNI_OK;
}

static inline uint8_t clamp_shift(int64_t acc, int prec) {
    if (acc < 0) return 0;
    acc >>= prec;
    return acc > 255 ? 255 : (uint8_t)acc;
}

/* Resample along x: src [h, w, c] -> dst [h, ow, c]. */
static void resample_h(const uint8_t *src, int h, int w, int c, uint8_t *dst, int ow, const axis_weights *aw) {
    const int64_t half = (int64_t)1 << (aw->precision - 1);
#pragma omp parallel for schedule(static) if ((int64_t)h * ow * c > 65536)
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * w * c;
        for (int x = 0; x < ow; x++) {
            const int32_t *wt = aw->w + (size_t)x * aw->ksize;
            const uint8_t *s = row + (size_t)aw->xmin[x] * c;
            for (int ch = 0; ch < c; ch++) {
                int64_t acc = half;
                for (int j = 0; j < aw->xsize[x]; j++) acc += (int64_t)s[j * c + ch] * wt[j];
                dst[((size_t)y * ow + x) * c + ch] = clamp_shift(acc, aw->precision);
            }
        }
    }
}

/* Resample along y: src [h, w, c] -> dst [oh, w, c]. */
static void resample_v(const uint8_t *src, int w, int c, uint8_t *dst, int oh, const axis_weights *aw) {
    const int64_t half = (int64_t)1 << (aw->precision - 1);
    const size_t stride = (size_t)w * c;
#pragma omp parallel for schedule(static) if ((int64_t)oh * w * c > 65536)
    for (int y = 0; y < oh; y++) {
        const int32_t *wt = aw->w + (size_t)y * aw->ksize;
        const uint8_t *s = src + (size_t)aw->xmin[y] * stride;
        for (size_t k = 0; k < stride; k++) {
            int64_t acc = half;
            for (int j = 0; j < aw->xsize[y]; j++) acc += (int64_t)s[j * stride + k] * wt[j];
            dst[(size_t)y * stride + k] = clamp_shift(acc, aw->precision);
        }
    }
}

omni_status vision_resize_bicubic_aa(const uint8_t *src, int h, int w, int c, uint8_t *dst, int oh, int ow) {
    if (h <= 0 || w <= 0 || oh <= 0 || ow <= 0 || c <= 0)
        return omni_fail(OMNI_ERR_INPUT, "resize %dx%d -> %dx%d: bad size", w, h, ow, oh);
    if (h == oh && w == ow) {
        memcpy(dst, src, (size_t)h * w * c);
        return OMNI_OK;
    }
    axis_weights ax = {0}, ay = {0};
    uint8_t *tmp = NULL;
    omni_status st = OMNI_OK;
    if (w != ow && h != oh) {
        tmp = malloc((size_t)h * ow * c);
        if (!tmp) return omni_fail(OMNI_ERR_NOMEM, "out of memory resizing %dx%d", w, h);
    }
    if (w != ow) {
        if ((st = resize_axis_weights(w, ow, &ax)) != OMNI_OK) goto done;
        resample_h(src, h, w, c, tmp ? tmp : dst, ow, &ax);
    }
    if (h != oh) {
        if ((st = resize_axis_weights(h, oh, &ay)) != OMNI_OK) goto done;
        resample_v(tmp ? tmp : src, ow, c, dst, oh, &ay);
    }
done:
    free(tmp);
    axis_weights_free(&ax);
    axis_weights_free(&ay);
    return st;
}

/* ---- normalize + patchify ---------------------------------------------------------------------------------- */

__attribute__((noinline)) /* out of the fuzzers' coverage (tests/fuzz/coverage_ignore.txt) */
static void patchify(const uint8_t *img, int H, int W, const vision_prep_params *p, float *out) {
    const int P = p->patch_size, M = p->merge_size, T = p->temporal_patch_size;
    const int gh = H / P, gw = W / P, dim = 3 * T * P * P;
    float mean[3], stdv[3];
    const float inv = (float)(1.0 / p->rescale_factor);
    for (int c = 0; c < 3; c++) mean[c] = p->mean[c] * inv, stdv[c] = p->std[c] * inv;
    int row = 0;
    for (int R = 0; R < gh / M; R++)
        for (int C = 0; C < gw / M; C++)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < M; j++, row++) {
                    const int py = (R * M + i) * P, px = (C * M + j) * P;
                    float *o = out + (size_t)row * dim;
                    for (int c = 0; c < 3; c++)
                        for (int t = 0; t < T; t++)
                            for (int y = 0; y < P; y++)
                                for (int x = 0; x < P; x++) {
                                    float v = img[((size_t)(py + y) * W + px + x) * 3 + c];
                                    *o++ = (v - mean[c]) / stdv[c];
                                }
                }
}

omni_status vision_preprocess(const vision_image *img, const vision_prep_params *p, vision_patches *out) {
    memset(out, 0, sizeof(*out));
    int rh, rw;
    omni_status st = vision_smart_resize(img->height, img->width, p, &rh, &rw);
    if (st != OMNI_OK) return st;
    uint8_t *resized = malloc((size_t)rh * rw * 3);
    if (!resized) return omni_fail(OMNI_ERR_NOMEM, "out of memory for a %dx%d image", rw, rh);
    st = vision_resize_bicubic_aa(img->rgb, img->height, img->width, 3, resized, rh, rw);
    if (st != OMNI_OK) {
        free(resized);
        return st;
    }
    const int P = p->patch_size;
    out->grid_t = 1, out->grid_h = rh / P, out->grid_w = rw / P;
    out->resized_h = rh, out->resized_w = rw;
    out->n_patches = out->grid_h * out->grid_w;
    out->patch_dim = 3 * p->temporal_patch_size * P * P;
    out->pixels = malloc(sizeof(float) * (size_t)out->n_patches * out->patch_dim);
    if (!out->pixels) {
        free(resized);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory for %d patches", out->n_patches);
    }
    patchify(resized, rh, rw, p, out->pixels);
    free(resized);
    return OMNI_OK;
}

void vision_patches_free(vision_patches *pp) {
    if (!pp) return;
    free(pp->pixels);
    memset(pp, 0, sizeof(*pp));
}
