/* test_omni_e2e.c - Qwen3-Omni thinker end to end on every Omni fixture (omni-a, omni-b) and case (text only,
 * audio only 1 s and 9 s, audio + image): decode the clip -> log-mel -> AuT tower -> spans over the
 * <|audio_pad|> run (image: the stored transformers vision-tower outputs + DeepStack) -> llm_positions_build
 * (checked against transformers' get_rope_index) -> llm_forward over an f32 KV cache.
 * Checks vs transformers (float32): last-position logits max|d| / max|ref| <= 1e-3, same argmax, same top-5 set,
 * and the 16 greedy tokens identical. */
#include <string.h>

#include "audio/audio.h"
#include "check.h"
#include "kernels/ops.h"
#include "kvcache/kvcache.h"
#include "llm/model.h"
#include "llm/positions.h"
#include "util.h"

#define MAX_TOK 1024

typedef struct {
    char dir[1024];
    llm_model *m;
    audio_tower *tower;
    int hidden, vocab;
} omni_fx;

/* Audio embeddings of a 16 kHz fixture clip through this library's decode, log-mel and tower. */
static float *encode_clip(omni_fx *fx, const char *clip, int *n_tok) {
    char path[1200];
    snprintf(path, sizeof path, "%s/audio/clips/%s.wav", OMNI_FIXTURES, clip);
    audio_pcm a;
    if (audio_load(path, &a)) return NULL;
    int64_t T = audio_mel_frames(a.n);
    float *mel = malloc(sizeof(float) * 128 * T);
    omni_status st = audio_log_mel(a.samples, a.n, mel);
    audio_pcm_free(&a);
    const audio_tower_config *ac = audio_tower_get_config(fx->tower);
    *n_tok = (int)audio_token_count(T, ac->n_window);
    float *emb = malloc(sizeof(float) * *n_tok * ac->out_dim);
    if (!st) st = audio_tower_encode(fx->tower, mel, T, emb);
    free(mel);
    if (st) {
        free(emb);
        return NULL;
    }
    return emb;
}

static float *read_rel(const omni_fx *fx, const char *file, int64_t want) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", fx->dir, file);
    int64_t n = 0;
    float *x = read_f32(path, &n);
    if (x && n != want) {
        free(x);
        return NULL;
    }
    return x;
}

static int in_top5(const cJSON *top5, int id) {
    const cJSON *e;
    cJSON_ArrayForEach(e, top5) if (cJSON_GetArrayItem(e, 0)->valueint == id) return 1;
    return 0;
}

static void compare_logits(const char *name, const float *logits, const float *ref, int V, const cJSON *c) {
    double d = max_abs_diff(logits, ref, V), m = max_abs(ref, V);
    int am = op_argmax(logits, V), top[5];
    float val[5];
    op_topk(logits, V, 5, top, val);
    int same5 = 1;
    for (int j = 0; j < 5; j++) same5 &= in_top5(cJSON_GetObjectItem(c, "top5"), top[j]);
    printf("%-22s logits max|d|/max|ref| = %.2e  argmax %d (ref %d)\n", name, d / m, am,
           cJSON_GetObjectItem(c, "argmax")->valueint);
    CHECK(d <= 1e-3 * m, "%s: logits max|d| %g > 1e-3 * %g", name, d, m);
    CHECK(am == cJSON_GetObjectItem(c, "argmax")->valueint, "%s: argmax %d", name, am);
    CHECK(same5, "%s: top-5 set differs", name);
}

static void greedy(const char *name, omni_fx *fx, kv_cache *kv, int seq, int delta, float *logits, const cJSON *want) {
    const llm_config *cfg = llm_model_config(fx->m);
    int n_want = cJSON_GetArraySize(want), n = 0, ok = 1;
    for (; n < n_want && ok; n++) {
        int32_t id = op_argmax(logits, fx->vocab), pos[3];
        ok = id == cJSON_GetArrayItem(want, n)->valueint;
        if (!ok) fprintf(stderr, "%s: greedy token %d is %d, want %d\n", name, n, id,
                         cJSON_GetArrayItem(want, n)->valueint);
        if (!ok || llm_config_is_eos(cfg, id) || n + 1 == n_want) continue;
        llm_positions_text((int)kv_seq_len(kv, seq), 1, delta, pos);
        llm_input in = {1, &id, pos, 0, NULL};
        if (llm_forward(fx->m, kv, seq, &in, logits) != OMNI_OK) ok = 0;
    }
    CHECK(ok && n == n_want && n_want > 0, "%s: greedy tokens differ (%d of %d matched)", name, n - !ok, n_want);
}

/* Positions for the prompt; checked against the fixture's get_rope_index output. */
static omni_status build_positions(const char *name, omni_fx *fx, const int32_t *ids, int n, const cJSON *c,
                                   int n_audio_tok, int32_t *pos, int *delta) {
    const llm_config *cfg = llm_model_config(fx->m);
    llm_pos_config pc = {cfg->image_token_id, cfg->video_token_id, cfg->audio_token_id, 2};
    const cJSON *img = cJSON_GetObjectItem(c, "image");
    llm_grid g = {0};
    if (img) {
        const cJSON *thw = cJSON_GetObjectItem(img, "grid_thw");
        g = (llm_grid){cJSON_GetArrayItem(thw, 0)->valueint, cJSON_GetArrayItem(thw, 1)->valueint,
                       cJSON_GetArrayItem(thw, 2)->valueint};
    }
    omni_status st = llm_positions_build(ids, n, &pc, &g, img ? 1 : 0, n_audio_tok ? &n_audio_tok : NULL,
                                         n_audio_tok ? 1 : 0, pos, delta);
    CHECK(st == OMNI_OK, "%s: positions: %s", name, omni_last_error());
    const cJSON *want = cJSON_GetObjectItem(c, "position_ids");
    int bad = 0;
    for (int s = 0; s < 3 && !st; s++)
        for (int i = 0; i < n; i++)
            bad += pos[s * n + i] != (int)cJSON_GetArrayItem(cJSON_GetArrayItem(want, s), i)->valuedouble;
    CHECK(!st && bad == 0, "%s: %d position ids differ from get_rope_index", name, bad);
    CHECK(!st && *delta == cJSON_GetObjectItem(c, "rope_delta")->valueint, "%s: rope_delta %d", name, *delta);
    return st;
}

static void run_case(omni_fx *fx, const char *model, const cJSON *c) {
    char name[128];
    snprintf(name, sizeof name, "%s/%s", model, cJSON_GetObjectItem(c, "name")->valuestring);
    const cJSON *jids = cJSON_GetObjectItem(c, "input_ids"), *au = cJSON_GetObjectItem(c, "audio"),
                *img = cJSON_GetObjectItem(c, "image");
    int n = cJSON_GetArraySize(jids), ns = 0, n_audio = 0, delta = 0, seq = -1;
    static int32_t ids[MAX_TOK], pos[3 * MAX_TOK];
    CHECK(n <= MAX_TOK, "%s: prompt too long", name);
    for (int i = 0; i < n && i < MAX_TOK; i++) ids[i] = cJSON_GetArrayItem(jids, i)->valueint;
    llm_span spans[2];
    memset(spans, 0, sizeof spans);
    float *aemb = NULL, *iemb = NULL, *ds[4] = {0};
    if (au) {
        aemb = encode_clip(fx, cJSON_GetObjectItem(c, "audio_clip")->valuestring, &n_audio);
        CHECK(aemb && n_audio == cJSON_GetObjectItem(au, "tokens")->valueint, "%s: audio: %s (%d tokens)", name,
              omni_last_error(), n_audio);
        spans[ns++] = (llm_span){.start = cJSON_GetObjectItem(au, "start")->valueint, .len = n_audio, .embd = aemb};
    }
    if (img) {
        int len = cJSON_GetObjectItem(img, "tokens")->valueint, nd = cJSON_GetObjectItem(img, "n_deepstack")->valueint;
        iemb = read_rel(fx, cJSON_GetObjectItem(img, "embeds_file")->valuestring, (int64_t)len * fx->hidden);
        llm_span s = {.start = cJSON_GetObjectItem(img, "start")->valueint, .len = len, .embd = iemb,
                      .n_deepstack = nd};
        for (int k = 0; k < nd && k < 4; k++) {
            ds[k] = read_rel(fx, cJSON_GetArrayItem(cJSON_GetObjectItem(img, "deepstack_files"), k)->valuestring,
                             (int64_t)len * fx->hidden);
            s.deepstack[k] = ds[k];
            CHECK(ds[k] != NULL, "%s: deepstack %d", name, k);
        }
        CHECK(iemb != NULL, "%s: image embeddings", name);
        spans[ns++] = s;
    }
    int64_t nref = 0;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", fx->dir, cJSON_GetObjectItem(c, "logits_file")->valuestring);
    float *ref = read_f32(path, &nref), *logits = malloc(sizeof(float) * fx->vocab);
    CHECK(ref && nref == fx->vocab, "%s: reference logits", name);
    kv_cache *kv = NULL;
    omni_status st = (!au || aemb) && (!img || iemb) && ref ? OMNI_OK : OMNI_ERR_INPUT;
    if (!st) st = build_positions(name, fx, ids, n, c, n_audio, pos, &delta);
    if (!st) {
        kv_params kp = llm_model_kv_params(fx->m);
        kv_parse_mode("f32", &kp.fmt);
        kp.max_tokens = 2048;
        st = kv_init(&kp, &kv);
        if (!st) st = kv_seq_add(kv, &seq);
    }
    if (!st) {
        llm_input in = {n, ids, pos, ns, spans};
        double t0 = omni_time_ms();
        st = llm_forward(fx->m, kv, seq, &in, logits);
        printf("%-22s %d tokens (%d audio) prefill %.1f ms\n", name, n, n_audio, omni_time_ms() - t0);
        CHECK(st == OMNI_OK, "%s: llm_forward: %s", name, omni_last_error());
    }
    if (!st) compare_logits(name, logits, ref, fx->vocab, c);
    if (!st) greedy(name, fx, kv, seq, delta, logits, cJSON_GetObjectItem(c, "greedy"));
    kv_free(kv);
    free(ref), free(logits), free(aemb), free(iemb);
    for (int k = 0; k < 4; k++) free(ds[k]);
}

static void run_model(const char *model) {
    omni_fx fx = {0};
    snprintf(fx.dir, sizeof fx.dir, "%s/audio/%s", OMNI_FIXTURES, model);
    char path[1200];
    snprintf(path, sizeof path, "%s/expected.json", fx.dir);
    cJSON *exp = read_json(path);
    audio_tower_config ac;
    omni_status st = exp ? llm_model_load(fx.dir, &fx.m) : OMNI_ERR_INPUT;
    if (!st) st = audio_tower_config_read(fx.dir, &ac);
    if (!st) st = audio_tower_load(llm_model_ckpt(fx.m), &ac, &fx.tower);
    CHECK(st == OMNI_OK, "%s: %s", model, omni_last_error());
    if (!st) {
        fx.hidden = llm_model_config(fx.m)->hidden;
        fx.vocab = llm_model_config(fx.m)->vocab;
        CHECK(llm_model_config(fx.m)->arch == LLM_ARCH_QWEN3_OMNI_MOE, "%s: arch", model);
        CHECK(ac.out_dim == fx.hidden, "%s: audio output_dim %d != hidden %d", model, ac.out_dim, fx.hidden);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "cases")) run_case(&fx, model, c);
    }
    audio_tower_free(fx.tower);
    llm_model_free(fx.m);
    cJSON_Delete(exp);
}

int main(void) {
    run_model("omni-a");
    run_model("omni-b");
    return check_exit();
}
