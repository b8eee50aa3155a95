/* args.c - option parsing for the omni commands. */
#include "app/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void omni_args_defaults(omni_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 256;
    a->temp = 0.7f;
    a->top_k = 20;
    a->top_p = 0.8f;
    a->ctx = 4096;
    a->device = NULL; /* auto: cuda when a GPU is present (and the KV format runs there), else cpu */
    a->kv = "f32";
    a->kv_window = a->kv_sink = a->kv_rotate = a->kv_scale = -1;
    a->top_n = 0;
}

static omni_status need(int i, int argc, const char *opt) {
    return i + 1 < argc ? OMNI_OK : omni_fail(OMNI_ERR_USAGE, "option %s needs a value", opt);
}

static omni_status to_int(const char *s, const char *opt, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not an integer in [%d, %d]", opt, s, lo, hi);
    *out = (int)v;
    return OMNI_OK;
}

static omni_status to_float(const char *s, const char *opt, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi))
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    *out = v;
    return OMNI_OK;
}

static omni_status to_size(const char *s, const char *opt, int *w, int *h) {
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10), b = 0;
    if (!errno && end != s && *end == 'x') {
        const char *p = end + 1;
        b = strtol(p, &end, 10);
        if (end == p) b = 0;
    }
    if (errno || *end || a < 64 || a > 16384 || b < 64 || b > 16384)
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not WIDTHxHEIGHT (64..16384 pixels each)", opt, s);
    *w = (int)a;
    *h = (int)b;
    return OMNI_OK;
}

static omni_status to_double(const char *s, const char *opt, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi))
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    *out = v;
    return OMNI_OK;
}

static omni_status on_off(const char *s, const char *opt, int *out) {
    if (!strcmp(s, "on") || !strcmp(s, "1")) *out = 1;
    else if (!strcmp(s, "off") || !strcmp(s, "0")) *out = 0;
    else return omni_fail(OMNI_ERR_USAGE, "%s: expected on or off, got '%s'", opt, s);
    return OMNI_OK;
}

static omni_status add_media(const char **list, int *n, const char *v, const char *opt) {
    if (*n >= OMNI_MAX_MEDIA) return omni_fail(OMNI_ERR_USAGE, "too many %s (max %d)", opt, OMNI_MAX_MEDIA);
    list[(*n)++] = v;
    return OMNI_OK;
}

/* Options that take a value. Returns 1 if `o` was handled (consuming argv[i+1]). */
static int value_opt(omni_args *a, const char *o, const char *v, omni_status *st) {
    int seed;
    if (!strcmp(o, "-m") || !strcmp(o, "--model")) a->model = v;
    else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) a->prompt = v;
    else if (!strcmp(o, "-f") || !strcmp(o, "--file")) a->prompt_file = v;
    else if (!strcmp(o, "--system") || !strcmp(o, "-sys")) a->system = v;
    else if (!strcmp(o, "-o") || !strcmp(o, "--output")) a->out = v;
    else if (!strcmp(o, "--device")) a->device = v;
    else if (!strcmp(o, "--kv")) a->kv = v;
    else if (!strcmp(o, "--kv-layers")) a->kv_layers = v;
    else if (!strcmp(o, "--text")) a->text_file = v;
    else if (!strcmp(o, "--compare")) a->compare = v;
    else if (!strcmp(o, "--kv-window")) *st = to_int(v, o, 0, 1 << 20, &a->kv_window);
    else if (!strcmp(o, "--kv-sink")) *st = to_int(v, o, 0, 1 << 20, &a->kv_sink);
    else if (!strcmp(o, "--kv-rotate")) *st = on_off(v, o, &a->kv_rotate);
    else if (!strcmp(o, "--kv-scale")) *st = on_off(v, o, &a->kv_scale);
    else if (!strcmp(o, "-n") || !strcmp(o, "--n-predict")) *st = to_int(v, o, -1, 1 << 30, &a->n_predict);
    else if (!strcmp(o, "--temp")) *st = to_float(v, o, 0.f, 100.f, &a->temp);
    else if (!strcmp(o, "--top-p")) *st = to_float(v, o, 1e-6f, 1.f, &a->top_p);
    else if (!strcmp(o, "--top-k")) *st = to_int(v, o, 0, 1 << 30, &a->top_k);
    else if (!strcmp(o, "-s") || !strcmp(o, "--seed")) {
        *st = to_int(v, o, 0, 2147483647, &seed);
        a->seed = (uint64_t)seed;
        a->seed_set = 1;
    } else if (a->lists && !strcmp(o, "--ctx")) {
        a->ctx_list = v;
    } else if (!strcmp(o, "-c") || !strcmp(o, "--ctx-size") || !strcmp(o, "--ctx")) {
        *st = to_int(v, o, 1, 1 << 24, &a->ctx);
        a->ctx_set = 1;
    } else if (!strcmp(o, "--chunk")) *st = to_int(v, o, 1, 1 << 16, &a->chunk);
    else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) *st = to_int(v, o, 1, 1024, &a->threads);
    else if (!strcmp(o, "--top")) *st = to_int(v, o, 1, 1 << 24, &a->top_n);
    else if (!strcmp(o, "--image-min-tokens")) {
        *st = to_int(v, o, 1, 1 << 20, &a->image_min_tokens);
        a->image_budget_preferred = 0;
    } else if (!strcmp(o, "--image-max-tokens")) {
        *st = to_int(v, o, 1, 1 << 20, &a->image_max_tokens);
        a->image_budget_preferred = 0;
    } else if (!strcmp(o, "--batch")) a->batch_list = v;
    else if (!strcmp(o, "--random")) a->random_config = v;
    else if (!strcmp(o, "--csv")) a->csv = v;
    else if (!strcmp(o, "--png")) a->png = v;
    else if (!strcmp(o, "--png-size")) *st = to_size(v, o, &a->png_w, &a->png_h);
    else if (!strcmp(o, "--kv-mem")) *st = to_double(v, o, 1e-6, 1e6, &a->kv_mem_gib);
    else if (!strcmp(o, "--bw-mib")) *st = to_int(v, o, 1, 1 << 16, &a->bw_mib);
    else if (!strcmp(o, "--report")) a->report = v;
    else if (!strcmp(o, "--baseline")) a->baseline = v;
    else if (!strcmp(o, "--device-name")) a->device_name = v;
    else if (!strcmp(o, "--host")) a->host = v;
    else if (!strcmp(o, "--port")) *st = to_int(v, o, 0, 65535, &a->port);
    else if (!strcmp(o, "--api-key")) a->api_key = v;
    else if (!strcmp(o, "--alias")) a->alias = v;
    else if (!strcmp(o, "--max-seqs")) *st = to_int(v, o, 1, 1024, &a->max_seqs);
    else if (!strcmp(o, "--max-queue")) *st = to_int(v, o, 0, 1 << 20, &a->max_queue);
    else if (!strcmp(o, "--max-tokens")) *st = to_int(v, o, 1, 1 << 24, &a->max_tokens);
    else if (!strcmp(o, "--max-body")) *st = to_double(v, o, 1.0 / 1024, 4096, &a->max_body_mib);
    else if (!strcmp(o, "--timeout")) *st = to_double(v, o, 0.01, 1e7, &a->timeout_s);
    else if (!strcmp(o, "--max-audio-seconds")) *st = to_double(v, o, 0.01, 1e6, &a->max_audio_s);
    else if (!strcmp(o, "--max-image-mpixels")) *st = to_double(v, o, 1e-6, 1e5, &a->max_image_mpix);
    else if (!strcmp(o, "--image")) *st = add_media(a->images, &a->n_images, v, "images");
    else if (!strcmp(o, "--audio")) *st = add_media(a->audios, &a->n_audios, v, "audio files");
    else return 0;
    return 1;
}

omni_status omni_args_parse(omni_args *a, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *o = argv[i];
        omni_status st = OMNI_OK;
        if (!strcmp(o, "--raw")) a->raw = 1;
        else if (!strcmp(o, "--allow-files")) a->allow_files = 1;
        else if (!strcmp(o, "--json")) a->json = 1;
        else if (!strcmp(o, "--no-perf")) a->no_perf = 1;
        else if (!strcmp(o, "-v") || !strcmp(o, "--verbose")) a->verbose = 1;
        else if (o[0] == '-' && o[1]) {
            omni_args probe = *a; /* is it a known option at all? (so a bare unknown flag says so) */
            if (!value_opt(&probe, o, "0", &st)) return omni_fail(OMNI_ERR_USAGE, "unknown option: %s", o);
            st = OMNI_OK;
            if ((st = need(i, argc, o))) return st;
            value_opt(a, o, argv[i + 1], &st);
            if (st) return st;
            i++;
        } else if ((st = add_media(a->positional, &a->n_positional, o, "arguments"))) {
            return st;
        }
    }
    return OMNI_OK;
}
