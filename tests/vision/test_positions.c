/* test_positions.c - MRoPE position ids against transformers: Qwen3-VL get_rope_index on the two-image fixture
 * prompts, Qwen3-Omni get_rope_index on a prompt with two audios and an image, the worked example of
 * spec/qwen3.md §2, text-only prompts, decode positions, and placeholder/grid mismatches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llm/positions.h"
#include "vfix.h"

static int read_grids(const cJSON *arr, llm_grid *g, int max) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (n >= max) break;
        g[n].t = cJSON_GetArrayItem(it, 0)->valueint, g[n].h = cJSON_GetArrayItem(it, 1)->valueint;
        g[n].w = cJSON_GetArrayItem(it, 2)->valueint, n++;
    }
    return n;
}

static void test_vl_fixtures(const cJSON *man) {
    const cJSON *model;
    int n_models = 0;
    cJSON_ArrayForEach(model, cJSON_GetObjectItem(man, "models")) {
        const cJSON *e = cJSON_GetObjectItem(model, "e2e");
        size_t nb = 0, np = 0;
        int32_t *ids = vfix_read(vfix_str(e, "ids"), &nb), *exp = vfix_read(vfix_str(e, "pos"), &np);
        const int n = (int)(nb / 4);
        CHECK(ids && exp && n == vfix_int(e, "n_tokens") && np == 3 * nb, "%s: e2e fixture", vfix_str(model, "dir"));
        llm_grid g[4];
        int ng = read_grids(cJSON_GetObjectItem(e, "grids"), g, 4);
        const cJSON *tid = cJSON_GetObjectItem(cJSON_GetObjectItem(man, "omni_positions"), "token_ids");
        llm_pos_config cfg = {vfix_int(tid, "<|image_pad|>"), vfix_int(tid, "<|video_pad|>"), -1, 2};
        int32_t *pos = malloc(sizeof(int32_t) * 3 * (n > 0 ? n : 1));
        int delta = 12345;
        omni_status st = ids && exp ? llm_positions_build(ids, n, &cfg, g, ng, NULL, 0, pos, &delta) : OMNI_ERR_INPUT;
        CHECK(st == OMNI_OK, "%s: %s", vfix_str(model, "dir"), omni_last_error());
        if (st == OMNI_OK) {
            int bad = 0;
            for (int i = 0; i < 3 * n; i++) bad += pos[i] != exp[i];
            CHECK(bad == 0, "%s: %d of %d position ids differ", vfix_str(model, "dir"), bad, 3 * n);
            CHECK(delta == vfix_int(e, "rope_delta"), "rope_delta %d want %d", delta, vfix_int(e, "rope_delta"));
        }
        /* one grid too few / too many */
        if (ids && ng == 2) {
            CHECK(llm_positions_build(ids, n, &cfg, g, 1, NULL, 0, pos, NULL) == OMNI_ERR_INPUT, "missing grid accepted");
            llm_grid g3[3] = {g[0], g[1], g[1]};
            CHECK(llm_positions_build(ids, n, &cfg, g3, 3, NULL, 0, pos, NULL) == OMNI_ERR_INPUT, "extra grid accepted");
            llm_grid big[2] = {g[0], {1, g[1].h + 2, g[1].w}};
            CHECK(llm_positions_build(ids, n, &cfg, big, 2, NULL, 0, pos, NULL) == OMNI_ERR_INPUT,
                  "grid larger than its placeholders accepted");
        }
        free(pos), free(ids), free(exp);
        n_models++;
    }
    CHECK(n_models >= 2, "%d fixture prompts", n_models);
}

static void test_omni_fixture(const cJSON *man) {
    const cJSON *o = cJSON_GetObjectItem(man, "omni_positions");
    CHECK(o != NULL, "omni_positions missing from the manifest");
    if (!o) return;
    const cJSON *tid = cJSON_GetObjectItem(o, "token_ids"), *it;
    const int n = cJSON_GetArraySize(cJSON_GetObjectItem(o, "ids"));
    int32_t *ids = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * 3 * n);
    int i = 0, alen[4], na = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "ids")) ids[i++] = it->valueint;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "audio_tokens")) alen[na++] = it->valueint;
    llm_grid g[2];
    int ng = read_grids(cJSON_GetObjectItem(o, "grids"), g, 2);
    llm_pos_config cfg = {vfix_int(tid, "<|image_pad|>"), vfix_int(tid, "<|video_pad|>"), vfix_int(tid, "<|audio_pad|>"), 2};
    int delta = 0;
    omni_status st = llm_positions_build(ids, n, &cfg, g, ng, alen, na, pos, &delta);
    CHECK(st == OMNI_OK, "omni: %s", omni_last_error());
    int bad = 0;
    i = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "pos")) bad += st == OMNI_OK && pos[i++] != it->valueint;
    CHECK(i == 3 * n && bad == 0, "omni: %d of %d positions differ", bad, 3 * n);
    CHECK(delta == vfix_int(o, "rope_delta"), "omni rope_delta %d want %d", delta, vfix_int(o, "rope_delta"));
    alen[0]++;
    CHECK(llm_positions_build(ids, n, &cfg, g, ng, alen, na, pos, NULL) == OMNI_ERR_INPUT, "audio length mismatch accepted");
    free(ids), free(pos);
}

/* spec §2 example: 4 text tokens, an image of 30x40 patches (15x20 merged), <|vision_end|>. */
static void test_spec_example(void) {
    enum { IMG = 7, N = 4 + 300 + 1 };
    int32_t ids[N], pos[3 * N];
    for (int i = 0; i < N; i++) ids[i] = i >= 4 && i < 304 ? IMG : 1;
    llm_pos_config cfg = {IMG, 8, -1, 2};
    llm_grid g = {1, 30, 40};
    int delta = 0;
    CHECK(llm_positions_build(ids, N, &cfg, &g, 1, NULL, 0, pos, &delta) == OMNI_OK, "%s", omni_last_error());
    CHECK(pos[4] == 4 && pos[N + 4] == 4 && pos[2 * N + 4] == 4, "first image token");
    CHECK(pos[303] == 4 && pos[N + 303] == 18 && pos[2 * N + 303] == 23, "last image token T%d H%d W%d", pos[303],
          pos[N + 303], pos[2 * N + 303]);
    CHECK(pos[304] == 24 && pos[N + 304] == 24 && pos[2 * N + 304] == 24, "<|vision_end|> at %d", pos[304]);
    CHECK(delta == 25 - N, "rope_delta %d", delta);
    int32_t dec[3];
    llm_positions_text(N, 1, delta, dec);
    CHECK(dec[0] == 25 && dec[1] == 25 && dec[2] == 25, "first decode position %d", dec[0]);
}

static void test_text_only(void) {
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, pos[27];
    llm_pos_config cfg = {100, 101, 102, 2};
    int delta = 99;
    CHECK(llm_positions_build(ids, 9, &cfg, NULL, 0, NULL, 0, pos, &delta) == OMNI_OK, "%s", omni_last_error());
    int bad = 0;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 9; i++) bad += pos[s * 9 + i] != i;
    CHECK(bad == 0 && delta == 0, "text-only positions (delta %d)", delta);
    ids[3] = 101;
    CHECK(llm_positions_build(ids, 9, &cfg, NULL, 0, NULL, 0, pos, &delta) == OMNI_ERR_UNSUPPORTED, "video accepted");
}

int main(void) {
    cJSON *man = vfix_manifest();
    CHECK(man != NULL, "manifest.json missing");
    if (man) {
        test_vl_fixtures(man);
        test_omni_fixture(man);
    }
    test_spec_example();
    test_text_only();
    cJSON_Delete(man);
    return check_exit();
}
