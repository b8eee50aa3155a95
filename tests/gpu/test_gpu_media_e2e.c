/* test_gpu_media_e2e.c - media end to end on the GPU, as `omni ocr/ask --device cuda` runs it: images and audio
 * files through app/media.c's encoder with the GPU towers (media_params.gpu: vision/cuda, audio/cuda, bf16) into
 * llm_runner on LLM_DEVICE_CUDA (bf16), against the CPU f32 path (the same encoder with the CPU towers into
 * llm_forward on an f32 cache) on every media fixture: the Qwen3-VL vision models (tests/fixtures/vision: the e2e
 * prompt with its two images, and the same prompt with other fixture images) and the Qwen3-Omni fixtures
 * (tests/fixtures/audio/omni-a, omni-b: every case with an audio clip, the image of audio_image through the Omni
 * vision tower).
 * Per prompt: the expanded tokens and MRoPE positions equal the fixture's (the app builds the prompt as
 * transformers does); prefill in one step and in two chunks (cut at a span end), then N_DECODE teacher-forced
 * decode steps (both sides fed the CPU's greedy token); then all prompts of a model as one batch: one step that
 * prefills every sequence, then decode steps of the whole batch.
 * Acceptance (issue 9, spec/performance.md §4): at every compared position no NaN/Inf, KL(cpu‖gpu) <= 1e-3 and
 * the same argmax wherever the CPU's top-2 gap exceeds 1% of the largest |logit|. The towers' own outputs (GPU vs
 * CPU, relative RMS) are printed; test_gpu_towers bounds them.
 * Exit 77 without a GPU. --short: the first vision model and omni-a only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "app/media.h"
#include "check.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"
#include "llm/model.h"
#include "llm/positions.h"
#include "llm/runner.h"

#include "logit_cmp.h"

#define KL_MAX 1e-3
#define GAP 0.01
#define N_DECODE 6
#define MAX_ITEMS 4
#define MAX_PROMPTS 4

static int g_short;
static double g_worst_kl, g_worst_tower;
static int g_positions, g_argmax_checked, g_argmax_skipped;

static const char *fixtures(void) {
    const char *e = getenv("OMNI_FIXTURES_DIR"); /* the GPU host runs binaries built elsewhere */
    return e && *e ? e : OMNI_FIXTURES;
}

static cJSON *read_json(const char *path) {
    char *s = omni_read_file(path, NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

/* ---- comparison ------------------------------------------------------------------------------------------ */

static void cmp_logits(const char *what, const float *cpu, const float *gpu, int V) {
    int bad = 0;
    for (int i = 0; i < V; i++) bad += !isfinite(gpu[i]);
    const double kl = bad ? INFINITY : kl_div(cpu, gpu, V);
    g_positions++;
    if (kl > g_worst_kl) g_worst_kl = kl;
    CHECK(bad == 0 && kl <= KL_MAX, "%s: KL(cpu||gpu) = %.3g (%d non-finite logits)", what, kl, bad);
    if (top2_gap(cpu, V) > GAP) {
        g_argmax_checked++;
        CHECK(op_argmax(gpu, V) == op_argmax(cpu, V), "%s: argmax %d, cpu %d (KL %.3g)", what, op_argmax(gpu, V),
              op_argmax(cpu, V), kl);
    } else {
        g_argmax_skipped++;
    }
}

/* Relative RMS of a GPU tower output against the CPU's (printed; bounded by test_gpu_towers). */
static double rel_rms(const float *got, const float *ref, int64_t n) {
    double se = 0, sr = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = (double)got[i] - ref[i];
        se += isfinite(got[i]) ? e * e : INFINITY;
        sr += (double)ref[i] * ref[i];
    }
    return sr > 0 ? sqrt(se / sr) : sqrt(se);
}

/* ---- a model on both sides ------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    llm_model *m;
    llm_runner *g;      /* LLM_DEVICE_CUDA */
    kv_cache *gkv;      /* bf16 on the device, MAX_PROMPTS sequences */
    media_encoder *enc[2]; /* [0] CPU towers, [1] GPU towers */
    int V;
} pair;

static omni_status open_pair(pair *pr, const char *dir, const char *name) {
    memset(pr, 0, sizeof *pr);
    pr->name = name;
    omni_status st = llm_model_load(dir, &pr->m);
    if (st) return st;
    pr->V = llm_model_config(pr->m)->vocab;
    llm_runner_params rp = llm_runner_default_params();
    rp.device = LLM_DEVICE_CUDA, rp.max_seqs = MAX_PROMPTS, rp.max_tokens = 1024;
    if ((st = llm_runner_init(pr->m, &rp, &pr->g))) return st;
    kv_params kp = llm_model_kv_params(pr->m);
    if ((st = kv_parse_mode("bf16", &kp.fmt))) return st;
    kp.max_tokens = 4096, kp.max_seqs = MAX_PROMPTS, kp.max_seq_len = 1024;
    if ((st = llm_runner_cache_init(pr->g, &kp, &pr->gkv))) return st;
    for (int s = 0; s < 2 && !st; s++) {
        media_params mp = media_default_params();
        mp.gpu = s;
        st = media_encoder_init(pr->m, dir, &mp, &pr->enc[s]);
    }
    return st;
}

static void close_pair(pair *pr) {
    for (int s = 0; s < 2; s++) media_encoder_free(pr->enc[s]);
    if (pr->g) llm_runner_cache_free(pr->g, pr->gkv);
    llm_runner_free(pr->g);
    llm_model_free(pr->m);
}

/* One prompt with its media, encoded on both sides: p[0] CPU, p[1] GPU (same tokens and positions). */
typedef struct {
    char label[96];
    media_item items[2][MAX_ITEMS];
    int n_items;
    media_prompt p[2];
} case_t;

static void case_free(case_t *c) {
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < c->n_items; i++) media_item_clear(&c->items[s][i]);
        media_prompt_free(&c->p[s]);
    }
}

/* Encode the media files (paths, audio flags) with both encoders and build both prompts from ids (one pad token
 * per item); the GPU side must give the CPU side's tokens and positions, and exp_ids / exp_pos (the fixture's,
 * may be NULL) when given. Returns 0 on success. */
static int case_build(pair *pr, case_t *c, const int32_t *ids, int n, char paths[][1024], const int *audio,
                      int n_items, const int32_t *exp_ids, const int32_t *exp_pos, int exp_n) {
    omni_status st = OMNI_OK;
    c->n_items = n_items;
    for (int s = 0; s < 2 && !st; s++) {
        for (int i = 0; i < n_items && !st; i++)
            st = audio[i] ? media_encode_audio(pr->enc[s], paths[i], &c->items[s][i])
                          : media_encode_image(pr->enc[s], paths[i], &c->items[s][i]);
        if (!st) st = media_prompt_build(pr->enc[s], ids, n, c->items[s], n_items, &c->p[s]);
    }
    CHECK(st == OMNI_OK, "%s/%s: media: %s", pr->name, c->label, omni_last_error());
    if (st) return 1;
    const media_prompt *a = &c->p[0], *b = &c->p[1];
    int same = a->n_tokens == b->n_tokens && a->rope_delta == b->rope_delta && !!a->pos == !!b->pos &&
               !memcmp(a->tokens, b->tokens, sizeof(int32_t) * a->n_tokens) &&
               (!a->pos || !memcmp(a->pos, b->pos, sizeof(int32_t) * 3 * a->n_tokens));
    CHECK(same, "%s/%s: the GPU encoder's prompt differs from the CPU's", pr->name, c->label);
    if (exp_ids) {
        CHECK(a->n_tokens == exp_n && !memcmp(a->tokens, exp_ids, sizeof(int32_t) * exp_n),
              "%s/%s: %d tokens, the fixture has %d (or other ids)", pr->name, c->label, a->n_tokens, exp_n);
        if (exp_pos && a->n_tokens == exp_n)
            CHECK(a->pos && !memcmp(a->pos, exp_pos, sizeof(int32_t) * 3 * exp_n), "%s/%s: positions differ from "
                  "the fixture's", pr->name, c->label);
    }
    const int H = llm_model_config(pr->m)->hidden;
    for (int i = 0; i < n_items; i++) {
        const media_item *x = &c->items[0][i], *y = &c->items[1][i];
        CHECK(x->n_tokens == y->n_tokens && x->n_deepstack == y->n_deepstack, "%s/%s item %d: shapes", pr->name,
              c->label, i);
        if (x->n_tokens != y->n_tokens || x->n_deepstack != y->n_deepstack) return 1;
        double r = rel_rms(y->embd, x->embd, (int64_t)x->n_tokens * H);
        for (int k = 0; k < x->n_deepstack; k++) r = fmax(r, rel_rms(y->deepstack[k], x->deepstack[k],
                                                                     (int64_t)x->n_tokens * H));
        printf("  %s/%s item %d (%s, %d tokens, %d deepstack): GPU tower vs CPU rel_rms %.2e\n", pr->name, c->label,
               i, x->is_audio ? "audio" : "image", x->n_tokens, x->n_deepstack, r);
        CHECK(isfinite(r), "%s/%s item %d: non-finite tower output", pr->name, c->label, i);
        g_worst_tower = fmax(g_worst_tower, r);
    }
    return !same;
}

/* The media_prompt as one llm_input chunk [a, b) (positions and spans sliced; spans never straddle a cut). */
static llm_input slice(const media_prompt *p, int a, int b, int32_t *pos_buf, llm_span *sp_buf) {
    llm_input in = {b - a, p->tokens + a, NULL, 0, sp_buf};
    if (p->pos) {
        for (int s = 0; s < 3; s++)
            for (int i = a; i < b; i++) pos_buf[s * (b - a) + i - a] = p->pos[s * p->n_tokens + i];
        in.pos = pos_buf;
    }
    for (int k = 0; k < p->n_spans; k++)
        if (p->spans[k].start >= a && p->spans[k].start + p->spans[k].len <= b) {
            sp_buf[in.n_spans] = p->spans[k];
            sp_buf[in.n_spans++].start -= a;
        }
    return in;
}

/* A cut near the middle moved forward past any span it would split. */
static int cut_point(const media_prompt *p) {
    int b = p->n_tokens / 2;
    for (int k = 0; k < p->n_spans; k++)
        if (p->spans[k].start < b && p->spans[k].start + p->spans[k].len > b) b = p->spans[k].start + p->spans[k].len;
    return b;
}

static kv_cache *cpu_cache(const pair *pr, int ctx, int *seq) {
    kv_params p = llm_model_kv_params(pr->m);
    kv_cache *kv = NULL;
    p.max_tokens = ctx, p.max_seqs = 1;
    if (kv_parse_mode("f32", &p.fmt) || kv_init(&p, &kv) || kv_seq_add(kv, seq)) {
        kv_free(kv);
        return NULL;
    }
    return kv;
}

/* The CPU side of a prompt: prefill + N_DECODE teacher-forced steps; logits [N_DECODE + 1][V], tokens fed
 * [N_DECODE] (the CPU's argmax after each position). */
static omni_status cpu_run(const pair *pr, const media_prompt *p, float *logits, int32_t *fed) {
    int seq = 0;
    kv_cache *kv = cpu_cache(pr, p->n_tokens + N_DECODE + 4, &seq);
    if (!kv) return omni_fail(OMNI_ERR_NOMEM, "cpu cache");
    llm_input all = {p->n_tokens, p->tokens, p->pos, p->n_spans, p->spans};
    omni_status st = llm_forward(pr->m, kv, seq, &all, logits);
    for (int d = 0; d < N_DECODE && !st; d++) {
        int32_t pos[3];
        fed[d] = op_argmax(logits + (size_t)d * pr->V, pr->V);
        llm_input in = {1, &fed[d], NULL, 0, NULL};
        if (p->pos) {
            llm_positions_text((int)kv_seq_len(kv, seq), 1, p->rope_delta, pos);
            in.pos = pos;
        }
        st = llm_forward(pr->m, kv, seq, &in, logits + (size_t)(d + 1) * pr->V);
    }
    kv_free(kv);
    return st;
}

/* Decode input d of a prompt (token fed[d] at the position after the prefill and d earlier decodes). */
static llm_input decode_input(const media_prompt *p, const int32_t *fed, int d, int32_t *pos) {
    llm_input in = {1, &fed[d], NULL, 0, NULL};
    if (p->pos) {
        llm_positions_text(p->n_tokens + d, 1, p->rope_delta, pos);
        in.pos = pos;
    }
    return in;
}

/* Prompts alone: prefill in `chunks` (1 or 2) GPU steps, then the teacher-forced decode steps. */
static void run_single(pair *pr, case_t *c, const float *ref, const int32_t *fed, int chunks) {
    const media_prompt *p = &c->p[1];
    const int V = pr->V;
    float *lg = malloc(sizeof(float) * V);
    int32_t *pos_buf = malloc(sizeof(int32_t) * 3 * (p->n_tokens + 1));
    llm_span sp_buf[MAX_ITEMS];
    int seq = -1;
    char what[256];
    omni_status st = kv_seq_add(pr->gkv, &seq);
    const int cut = chunks == 2 ? cut_point(p) : p->n_tokens;
    for (int a = 0, b = cut; a < p->n_tokens && !st; a = b, b = p->n_tokens) {
        llm_input in = slice(p, a, b, pos_buf, sp_buf);
        llm_batch_entry e = {.kv = pr->gkv, .seq = seq, .in = in, .logits = b == p->n_tokens ? lg : NULL};
        st = llm_runner_step(pr->g, 1, &e);
    }
    CHECK(st == OMNI_OK, "%s/%s: gpu prefill: %s", pr->name, c->label, omni_last_error());
    if (!st) {
        snprintf(what, sizeof what, "%s/%s prefill (%d tokens, %d chunk%s)", pr->name, c->label, p->n_tokens,
                 cut < p->n_tokens ? 2 : 1, cut < p->n_tokens ? "s" : "");
        cmp_logits(what, ref, lg, V);
    }
    for (int d = 0; d < N_DECODE && !st; d++) {
        int32_t pos[3];
        llm_batch_entry e = {.kv = pr->gkv, .seq = seq, .in = decode_input(p, fed, d, pos), .logits = lg};
        if ((st = llm_runner_step(pr->g, 1, &e))) break;
        snprintf(what, sizeof what, "%s/%s decode %d", pr->name, c->label, d);
        cmp_logits(what, ref + (size_t)(d + 1) * V, lg, V);
    }
    CHECK(st == OMNI_OK, "%s/%s: gpu decode: %s", pr->name, c->label, omni_last_error());
    if (seq >= 0) kv_seq_remove(pr->gkv, seq);
    free(lg), free(pos_buf);
}

/* All prompts of a model as one batch: one step prefills every sequence, then N_DECODE steps decode them all. */
static void run_batch(pair *pr, case_t *cs, int n, float *const *ref, int32_t *const *fed) {
    const int V = pr->V;
    int seq[MAX_PROMPTS];
    float *lg[MAX_PROMPTS];
    llm_batch_entry e[MAX_PROMPTS];
    int32_t pos[MAX_PROMPTS][3];
    char what[256];
    omni_status st = OMNI_OK;
    for (int i = 0; i < n; i++) {
        seq[i] = -1, lg[i] = malloc(sizeof(float) * V);
        const media_prompt *p = &cs[i].p[1];
        if (!st) st = kv_seq_add(pr->gkv, &seq[i]);
        e[i] = (llm_batch_entry){.kv = pr->gkv, .seq = seq[i], .logits = lg[i],
                                 .in = {p->n_tokens, p->tokens, p->pos, p->n_spans, p->spans}};
    }
    for (int d = -1; d < N_DECODE && !st; d++) { /* d = -1: the prefill step */
        for (int i = 0; i < n && d >= 0; i++) e[i].in = decode_input(&cs[i].p[1], fed[i], d, pos[i]);
        if ((st = llm_runner_step(pr->g, n, e))) break;
        for (int i = 0; i < n; i++) {
            snprintf(what, sizeof what, "%s batch of %d: %s %s %d", pr->name, n, cs[i].label,
                     d < 0 ? "prefill" : "decode", d);
            cmp_logits(what, ref[i] + (size_t)(d + 1) * V, lg[i], V);
        }
    }
    CHECK(st == OMNI_OK, "%s batch of %d: %s", pr->name, n, omni_last_error());
    for (int i = 0; i < n; i++) {
        if (seq[i] >= 0) kv_seq_remove(pr->gkv, seq[i]);
        free(lg[i]);
    }
}

/* Every prompt of a model: the CPU reference once, then alone (1 and 2 chunks) and all as one batch. */
static void run_cases(pair *pr, case_t *cs, int n) {
    float *ref[MAX_PROMPTS] = {0};
    int32_t *fed[MAX_PROMPTS] = {0};
    int ok = 1;
    for (int i = 0; i < n; i++) {
        ref[i] = malloc(sizeof(float) * pr->V * (N_DECODE + 1));
        fed[i] = malloc(sizeof(int32_t) * N_DECODE);
        omni_status st = cpu_run(pr, &cs[i].p[0], ref[i], fed[i]);
        CHECK(st == OMNI_OK, "%s/%s: cpu: %s", pr->name, cs[i].label, omni_last_error());
        ok &= st == OMNI_OK;
    }
    for (int i = 0; i < n && ok; i++) {
        run_single(pr, &cs[i], ref[i], fed[i], 1);
        run_single(pr, &cs[i], ref[i], fed[i], 2);
    }
    if (ok && n > 1) run_batch(pr, cs, n, ref, fed);
    for (int i = 0; i < n; i++) free(ref[i]), free(fed[i]);
}

/* ---- fixtures ---------------------------------------------------------------------------------------------- */

/* ids with every run of `pad` collapsed to one token (what the CLI's template gives before media_prompt_build). */
static int collapse_pads(const int32_t *ids, int n, const int32_t *pads, int n_pads, int32_t *out) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        int is_pad = 0;
        for (int k = 0; k < n_pads; k++) is_pad |= ids[i] == pads[k];
        if (!is_pad || m == 0 || out[m - 1] != ids[i]) out[m++] = ids[i];
    }
    return m;
}

/* A Qwen3-VL vision fixture: the e2e prompt with its images (tokens and positions checked against the fixture),
 * then the same text with other pairs of fixture images. */
static void vision_model(const cJSON *model) {
    static const char *other[][2] = {{"d_wide.png", "g_color.jpg"}, {"e_rgba.png", "b_down.png"}};
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(model, "dir"));
    const cJSON *e = cJSON_GetObjectItem(model, "e2e");
    char dir[2048], path[2400];
    snprintf(dir, sizeof dir, "%s/vision/%s", fixtures(), name);
    pair pr;
    omni_status st = open_pair(&pr, dir, name);
    CHECK(st == OMNI_OK, "%s: %s", name, omni_last_error());
    size_t nb = 0, pb = 0;
    snprintf(path, sizeof path, "%s/vision/%s", fixtures(), cJSON_GetStringValue(cJSON_GetObjectItem(e, "ids")));
    int32_t *ids = st ? NULL : (int32_t *)(void *)omni_read_file(path, &nb);
    snprintf(path, sizeof path, "%s/vision/%s", fixtures(), cJSON_GetStringValue(cJSON_GetObjectItem(e, "pos")));
    int32_t *pos = st ? NULL : (int32_t *)(void *)omni_read_file(path, &pb);
    const int n = (int)(nb / 4);
    CHECK(st || (ids && pos && pb == 3 * nb), "%s: cannot read the e2e ids / positions", name);
    case_t cs[3];
    memset(cs, 0, sizeof cs);
    int nc = 0;
    if (!st && ids && pos && pb == 3 * nb) {
        const int32_t pad = llm_model_config(pr.m)->image_token_id;
        int32_t *c_ids = malloc(sizeof(int32_t) * n);
        const int cn = collapse_pads(ids, n, &pad, 1, c_ids);
        char paths[MAX_ITEMS][1024];
        const int audio[MAX_ITEMS] = {0};
        for (int v = 0; v < 3; v++) {
            int ni = 0;
            const cJSON *f;
            cJSON_ArrayForEach(f, cJSON_GetObjectItem(e, "images")) {
                if (ni == MAX_ITEMS) break;
                snprintf(paths[ni], sizeof paths[ni], "%s/vision/%s", fixtures(),
                         v == 0 ? f->valuestring : other[v - 1][ni % 2]);
                ni++;
            }
            snprintf(cs[nc].label, sizeof cs[nc].label, "images %s", v == 0 ? "(fixture)" : v == 1 ? "d+g" : "e+b");
            if (case_build(&pr, &cs[nc], c_ids, cn, paths, audio, ni, v == 0 ? ids : NULL, pos, n)) {
                case_free(&cs[nc]);
                continue;
            }
            nc++;
            if (g_short) break;
        }
        free(c_ids);
        run_cases(&pr, cs, nc);
    }
    for (int i = 0; i < nc; i++) case_free(&cs[i]);
    free(ids), free(pos);
    close_pair(&pr);
}

/* A Qwen3-Omni fixture: every case with an audio clip (and the image of audio_image), tokens and positions as in
 * expected.json. */
static void omni_model(const char *model) {
    char dir[2048], path[2400];
    snprintf(dir, sizeof dir, "%s/audio/%s", fixtures(), model);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *exp = read_json(path);
    pair pr;
    memset(&pr, 0, sizeof pr);
    omni_status st = exp ? open_pair(&pr, dir, model) : omni_fail(OMNI_ERR_INPUT, "cannot read %s", path);
    CHECK(st == OMNI_OK, "%s: %s", model, omni_last_error());
    case_t cs[MAX_PROMPTS];
    memset(cs, 0, sizeof cs);
    int nc = 0;
    const cJSON *c;
    const char *image_file = cJSON_GetStringValue(cJSON_GetObjectItem(exp, "image_file"));
    const cJSON *cases = st ? NULL : cJSON_GetObjectItem(exp, "cases");
    cJSON_ArrayForEach(c, cases) {
        const char *clip = cJSON_GetStringValue(cJSON_GetObjectItem(c, "audio_clip"));
        if (!clip || nc == MAX_PROMPTS) continue; /* text-only cases: test_gpu_decoder */
        const cJSON *jids = cJSON_GetObjectItem(c, "input_ids"), *jpos = cJSON_GetObjectItem(c, "position_ids");
        const int n = cJSON_GetArraySize(jids);
        int32_t *ids = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * 3 * n);
        int32_t *c_ids = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(jids, i)->valuedouble;
        for (int s = 0; s < 3; s++)
            for (int i = 0; i < n; i++)
                pos[s * n + i] = (int32_t)cJSON_GetArrayItem(cJSON_GetArrayItem(jpos, s), i)->valuedouble;
        const llm_config *cfg = llm_model_config(pr.m);
        const int32_t pads[2] = {cfg->audio_token_id, cfg->image_token_id};
        const int cn = collapse_pads(ids, n, pads, 2, c_ids);
        /* items in prompt order: the audio pad and the image pad */
        char paths[MAX_ITEMS][1024];
        int audio[MAX_ITEMS], ni = 0;
        for (int i = 0; i < cn && ni < MAX_ITEMS; i++) {
            if (c_ids[i] != pads[0] && c_ids[i] != pads[1]) continue;
            audio[ni] = c_ids[i] == pads[0];
            if (audio[ni])
                snprintf(paths[ni], sizeof paths[ni], "%s/audio/clips/%s.wav", fixtures(), clip);
            else
                snprintf(paths[ni], sizeof paths[ni], "%s/audio/%s", fixtures(), image_file ? image_file : "?");
            ni++;
        }
        snprintf(cs[nc].label, sizeof cs[nc].label, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")));
        if (!case_build(&pr, &cs[nc], c_ids, cn, paths, audio, ni, ids, pos, n))
            nc++;
        else
            case_free(&cs[nc]);
        free(ids), free(pos), free(c_ids);
    }
    CHECK(st || nc >= 2, "%s: %d media cases", model, nc);
    if (!st) run_cases(&pr, cs, nc);
    for (int i = 0; i < nc; i++) case_free(&cs[i]);
    close_pair(&pr);
    cJSON_Delete(exp);
}

int main(int argc, char **argv) {
    g_short = argc > 1 && !strcmp(argv[1], "--short");
    int ndev = 0;
    omni_cuda_available(&ndev);
    if (ndev <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    omni_log_set_level(0);
    const double t0 = omni_time_ms();
    char path[2048];
    snprintf(path, sizeof path, "%s/vision/manifest.json", fixtures());
    cJSON *man = read_json(path);
    const cJSON *model, *models = man ? cJSON_GetObjectItem(man, "models") : NULL;
    int n_vis = 0;
    cJSON_ArrayForEach(model, models) {
        if (g_short && n_vis) break;
        vision_model(model), n_vis++;
    }
    CHECK(n_vis >= (g_short ? 1 : 2), "%d vision fixture models", n_vis);
    cJSON_Delete(man);
    omni_model("omni-a");
    if (!g_short) omni_model("omni-b");
    printf("%d positions compared: worst KL(cpu||gpu) %.3g (bound %g); argmax checked at %d, skipped at %d "
           "(top-2 gap <= %g of max|logit|); worst GPU tower rel_rms %.2e; %.0f ms\n",
           g_positions, g_worst_kl, KL_MAX, g_argmax_checked, g_argmax_skipped, GAP, g_worst_tower,
           omni_time_ms() - t0);
    return check_exit();
}
