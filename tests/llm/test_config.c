/* test_config.c - every config value is type- and range-checked (issue 15 item 12/13): each case edits one value
 * of a fixture config.json (text, vision or audio part) or of generation_config.json / preprocessor_config.json
 * and expects a refusal with the status and a message naming the key; then the unedited files still load.
 * Also: config.json / tokenizer.json as a FIFO or a directory are refused at once (item 14). */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audio/audio.h"
#include "check.h"
#include "kernels/json.h"
#include "llm/config.h"
#include "llm/tokenizer.h"
#include "vision/vision.h"

#define VL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"
#define OMNI OMNI_FIXTURES "/audio/omni-a"

static char *g_vl, *g_omni; /* fixture config.json texts */

/* Set the value at a dotted key path ("text_config.rope_theta") to the JSON text `value` (added if absent). */
static char *edited(const char *base, const char *path, const char *value) {
    cJSON *root = cJSON_Parse(base), *o = root;
    char key[256];
    snprintf(key, sizeof key, "%s", path);
    char *k = key, *dot;
    while ((dot = strchr(k, '.'))) {
        *dot = 0;
        o = cJSON_GetObjectItemCaseSensitive(o, k);
        k = dot + 1;
    }
    cJSON *v = cJSON_Parse(value);
    if (v && cJSON_IsNumber(v) && !isfinite(v->valuedouble)) { /* cJSON would print it as null */
        cJSON_Delete(v);
        v = NULL;
    }
    if (!v) v = cJSON_CreateRaw(value); /* written as it is */
    if (cJSON_GetObjectItemCaseSensitive(o, k)) cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    else cJSON_AddItemToObject(o, k, v);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

typedef struct {
    const char *path, *value;
    omni_status st;
    const char *needle;
} edit_case;

/* Text-decoder values (llm_config_parse). */
static const edit_case g_text[] = {
    {"text_config.rope_theta", "0", OMNI_ERR_MODEL, "text_config.rope_theta: 0 is outside [1, 1e+12]"},
    {"text_config.rope_theta", "-1", OMNI_ERR_MODEL, "text_config.rope_theta: -1 is outside"},
    {"text_config.rope_theta", "1e999", OMNI_ERR_MODEL, "rope_theta: inf is not a finite number"},
    {"text_config.rope_theta", "\"5e6\"", OMNI_ERR_MODEL, "rope_theta: expected a number, got a string"},
    {"text_config.rms_norm_eps", "-1", OMNI_ERR_MODEL, "text_config.rms_norm_eps: -1 is outside"},
    {"text_config.rms_norm_eps", "0", OMNI_ERR_MODEL, "text_config.rms_norm_eps: 0 is outside"},
    {"text_config.hidden_size", "128.5", OMNI_ERR_MODEL, "text_config.hidden_size: 128.5 is not an integer"},
    {"text_config.hidden_size", "\"64\"", OMNI_ERR_MODEL, "hidden_size: expected an integer, got a string"},
    {"text_config.hidden_size", "null", OMNI_ERR_MODEL, "text_config.hidden_size: missing"},
    {"text_config.num_attention_heads", "0", OMNI_ERR_MODEL, "num_attention_heads: 0 is outside"},
    {"text_config.num_key_value_heads", "3", OMNI_ERR_MODEL, "not a multiple of num_key_value_heads 3"},
    {"text_config.num_key_value_heads", "8", OMNI_ERR_MODEL, "num_key_value_heads: 8 is outside [1, 4]"},
    {"text_config.head_dim", "3", OMNI_ERR_MODEL, "head_dim 3 is not an even number"},
    {"text_config.vocab_size", "-1", OMNI_ERR_MODEL, "vocab_size: -1 is outside"},
    {"text_config.intermediate_size", "1099511627776", OMNI_ERR_MODEL,
     "text_config.intermediate_size: 1099511627776 is outside [1, 1048576]"},
    {"text_config.intermediate_size", "null", OMNI_ERR_MODEL, "intermediate_size: missing"},
    {"text_config.rope_scaling.mrope_section", "[]", OMNI_ERR_MODEL, "mrope_section: 0 elements, expected 3"},
    {"text_config.rope_scaling.mrope_section", "[24, 20, \"x\"]", OMNI_ERR_MODEL, "mrope_section[2]: expected an integer"},
    {"text_config.rope_scaling.mrope_section", "[24, -1, 20]", OMNI_ERR_MODEL, "mrope_section[1]: -1 is outside"},
    {"text_config.rope_scaling.mrope_interleaved", "1", OMNI_ERR_MODEL, "mrope_interleaved: expected true or false"},
    {"text_config.rope_scaling.rope_type", "\"yarn\"", OMNI_ERR_UNSUPPORTED, "rope_type 'yarn' is not supported"},
    {"text_config.rope_scaling", "7", OMNI_ERR_MODEL, "text_config.rope_scaling: expected an object, got a number"},
    {"text_config.hidden_act", "\"gelu\"", OMNI_ERR_UNSUPPORTED, "hidden_act 'gelu' is not supported"},
    {"text_config.attention_bias", "true", OMNI_ERR_UNSUPPORTED, "attention_bias"},
    {"text_config.tie_word_embeddings", "\"yes\"", OMNI_ERR_MODEL, "tie_word_embeddings: expected true or false"},
    {"text_config.eos_token_id", "[3002, \"x\"]", OMNI_ERR_MODEL, "eos_token_id[1]: expected an integer"},
    {"text_config.eos_token_id", "5000", OMNI_ERR_MODEL, "eos_token_id: 5000 is outside [0, 3071]"},
    {"text_config.eos_token_id", "[1,2,3,4,5,6,7,8,9]", OMNI_ERR_MODEL, "eos_token_id: 9 elements, expected 0 to 8"},
    {"text_config.bos_token_id", "-2", OMNI_ERR_MODEL, "bos_token_id: -2 is outside"},
    {"image_token_id", "999999", OMNI_ERR_MODEL, "config.json: image_token_id: 999999 is outside [0, 3071]"},
    {"vision_start_token_id", "1.5", OMNI_ERR_MODEL, "vision_start_token_id: 1.5 is not an integer"},
    {"text_config", "[]", OMNI_ERR_MODEL, "config.json: text_config: expected an object, got an array"},
    {"vision_config", "5", OMNI_ERR_MODEL, "config.json: vision_config: expected an object, got a number"},
    {"model_type", "5", OMNI_ERR_MODEL, "config.json: model_type: expected a string, got a number"},
    {"model_type", "\"llama\"", OMNI_ERR_UNSUPPORTED, "unsupported model_type 'llama'"},
};

/* Omni thinker values. */
static const edit_case g_moe[] = {
    {"thinker_config.text_config.num_experts_per_tok", "0", OMNI_ERR_MODEL, "num_experts_per_tok: 0 is outside"},
    {"thinker_config.text_config.num_experts", "\"8\"", OMNI_ERR_MODEL, "num_experts: expected an integer"},
    {"thinker_config.text_config.decoder_sparse_step", "2", OMNI_ERR_UNSUPPORTED, "decoder_sparse_step 2"},
    {"thinker_config.text_config.mlp_only_layers", "[0]", OMNI_ERR_UNSUPPORTED, "mlp_only_layers"},
    {"thinker_config.position_id_per_seconds", "-13", OMNI_ERR_MODEL, "position_id_per_seconds: -13 is outside"},
    {"thinker_config.audio_token_id", "1e6", OMNI_ERR_MODEL, "thinker_config.audio_token_id: 1000000 is outside"},
    {"thinker_config", "null", OMNI_ERR_MODEL, "config.json: thinker_config: missing"},
};

/* Values transformers 5.17 takes when a key is absent or ignores (llm/config.c follows it): rope_theta = the class
 * default (Qwen3VLTextConfig 500000, Qwen3OmniMoeTextConfig 1000000), qwen3_vl head_dim 128, mrope_section
 * [24, 20, 20], MRoPE always interleaved (the rotary classes never read the flag), any mrope_section accepted (only
 * sections 1 and 2 are read), tie_word_embeddings from the model's own config only (default false). */
static void check_defaults(void) {
    static const struct {
        const char *base_name, *path, *value;
        int arch_omni;
    } cases[] = {
        {"vl", "text_config.rope_scaling.mrope_interleaved", "false", 0},
        {"vl", "text_config.rope_scaling.mrope_section", "[30, 21, 21]", 0},
        {"vl", "text_config.rope_theta", "null", 0},
        {"vl", "text_config.head_dim", "null", 0},
        {"omni", "thinker_config.text_config.rope_parameters.rope_theta", "null", 1},
        {"omni", "thinker_config.text_config.rope_parameters.interleaved", "false", 1},
        {"vl", "tie_word_embeddings", "null", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *txt = edited(cases[i].arch_omni ? g_omni : g_vl, cases[i].path, cases[i].value);
        cJSON *root = cJSON_Parse(txt);
        if (!strcmp(cases[i].value, "null")) { /* null = remove the key */
            char key[256];
            snprintf(key, sizeof key, "%s", cases[i].path);
            char *dot = strrchr(key, '.');
            cJSON *o = root;
            if (dot) {
                *dot = 0;
                for (char *k = strtok(key, "."); k; k = strtok(NULL, ".")) o = cJSON_GetObjectItemCaseSensitive(o, k);
            }
            cJSON_DeleteItemFromObjectCaseSensitive(o, dot ? dot + 1 : key);
        }
        char *out = cJSON_PrintUnformatted(root);
        llm_config c;
        omni_status st = llm_config_parse(out, strlen(out), &c);
        CHECK(st == OMNI_OK, "%s absent/%s: %s", cases[i].path, cases[i].value, omni_last_error());
        if (!st) {
            CHECK(c.mrope_interleaved == 1, "%s: MRoPE not interleaved", cases[i].path);
            if (strstr(cases[i].path, "rope_theta"))
                CHECK(c.rope_theta == (cases[i].arch_omni ? 1e6f : 5e5f), "%s absent: theta %g", cases[i].path,
                      c.rope_theta);
            if (strstr(cases[i].path, "head_dim")) CHECK(c.head_dim == 128, "head_dim absent: %d", c.head_dim);
            if (strstr(cases[i].path, "mrope_section"))
                CHECK(c.mrope_section[1] == 21 && c.mrope_section[2] == 21, "mrope_section [30, 21, 21] not kept");
            if (!strcmp(cases[i].path, "tie_word_embeddings"))
                CHECK(!c.tie_word_embeddings && c.tie_unset, "top-level tie flag absent: tie %d unset %d",
                      c.tie_word_embeddings, c.tie_unset);
            llm_config_free(&c);
        }
        free(out), free(txt);
        cJSON_Delete(root);
    }
    llm_config c; /* the fixture's section removed: [24, 20, 20] */
    cJSON *root = cJSON_Parse(g_vl);
    cJSON_DeleteItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "text_config"), "rope_scaling"),
        "mrope_section");
    char *out = cJSON_PrintUnformatted(root);
    CHECK(llm_config_parse(out, strlen(out), &c) == OMNI_OK, "mrope_section absent: %s", omni_last_error());
    CHECK(c.mrope_section[0] == 24 && c.mrope_section[1] == 20 && c.mrope_section[2] == 20, "mrope_section default");
    llm_config_free(&c);
    free(out);
    cJSON_Delete(root);
}

static void run_text_cases(const char *base, const edit_case *cs, int n) {
    for (int i = 0; i < n; i++) {
        char *js = edited(base, cs[i].path, cs[i].value);
        llm_config c;
        omni_status st = llm_config_parse(js, strlen(js), &c);
        CHECK(st == cs[i].st, "%s = %s: status %d, want %d (%s)", cs[i].path, cs[i].value, st, cs[i].st,
              omni_last_error());
        CHECK(strstr(omni_last_error(), cs[i].needle) != NULL, "%s = %s: message '%s' lacks '%s'", cs[i].path,
              cs[i].value, omni_last_error(), cs[i].needle);
        CHECK(c.root == NULL, "%s: nothing left to free after a failure", cs[i].path);
        if (!st) llm_config_free(&c);
        free(js);
    }
}

/* vision_config values through vision_config_from_json on the parsed section. */
static void run_vision_cases(void) {
    static const edit_case cs[] = {
        {"vision_config.deepstack_visual_indexes", "\"x\"", OMNI_ERR_MODEL,
         "vision_config.deepstack_visual_indexes: expected an array of integers, got a string"},
        {"vision_config.deepstack_visual_indexes", "[5]", OMNI_ERR_MODEL, "deepstack_visual_indexes[0]: 5 is outside [0, 0]"},
        {"vision_config.deepstack_visual_indexes", "[0,0,0,0,0]", OMNI_ERR_MODEL, "5 elements, expected 0 to 4"},
        {"vision_config.depth", "0", OMNI_ERR_MODEL, "vision_config.depth: 0 is outside"},
        {"vision_config.hidden_size", "16.5", OMNI_ERR_MODEL, "vision_config.hidden_size: 16.5 is not an integer"},
        {"vision_config.num_heads", "3", OMNI_ERR_MODEL, "not a multiple of num_heads 3"},
        {"vision_config.spatial_merge_size", "3", OMNI_ERR_MODEL, "spatial_merge_size: 3 is outside [2, 2]"},
        {"vision_config.hidden_act", "false", OMNI_ERR_MODEL, "hidden_act: expected a string"},
        {"vision_config.out_hidden_size", "null", OMNI_ERR_MODEL, "vision_config.out_hidden_size: missing"},
        /* session 7: any hidden_act but "gelu" ran as the tanh GELU; DeepStack features pair with the layers in
         * layer order, once each, in transformers: [1, 0] / [0, 0] gave other features to other decoder layers */
        {"vision_config.hidden_act", "\"relu\"", OMNI_ERR_UNSUPPORTED, "hidden_act 'relu' is not supported"},
        {"vision_config.depth", "2", OMNI_ERR_UNSUPPORTED, "deepstack_visual_indexes must be increasing (0 after 1)"},
        {"vision_config.deepstack_visual_indexes", "[0, 0]", OMNI_ERR_UNSUPPORTED,
         "deepstack_visual_indexes must be increasing (0 after 0)"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char *js = edited(g_vl, cs[i].path, cs[i].value);
        if (!strcmp(cs[i].path, "vision_config.depth")) { /* then indexes out of order within the depth */
            char *t = js;
            js = edited(t, "vision_config.deepstack_visual_indexes", "[1, 0]");
            free(t);
        }
        cJSON *root = cJSON_Parse(js);
        vision_config vc;
        omni_status st = vision_config_from_json(cJSON_GetObjectItem(root, "vision_config"), NULL, &vc);
        CHECK(st == cs[i].st && strstr(omni_last_error(), cs[i].needle), "%s = %s: status %d '%s' (want '%s')",
              cs[i].path, cs[i].value, st, omni_last_error(), cs[i].needle);
        cJSON_Delete(root);
        free(js);
    }
}

static void run_audio_cases(void) {
    static const edit_case cs[] = {
        {"thinker_config.audio_config.d_model", "\"x\"", OMNI_ERR_MODEL, "audio_config.d_model: expected an integer"},
        {"thinker_config.audio_config.n_window", "-50", OMNI_ERR_MODEL, "audio_config.n_window: -50 is outside"},
        {"thinker_config.audio_config.num_mel_bins", "80", OMNI_ERR_MODEL, "num_mel_bins: 80 is outside [128, 128]"},
        /* session 7: not read at all (any activation ran as GELU) */
        {"thinker_config.audio_config.activation_function", "\"relu\"", OMNI_ERR_UNSUPPORTED,
         "thinker_config.audio_config.activation_function 'relu' is not supported (gelu only)"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char *js = edited(g_omni, cs[i].path, cs[i].value);
        cJSON *root = cJSON_Parse(js);
        audio_tower_config ac;
        const cJSON *sec = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "thinker_config"), "audio_config");
        omni_status st = audio_tower_config_from_json(sec, "thinker_config.audio_config", &ac);
        CHECK(st == cs[i].st && strstr(omni_last_error(), cs[i].needle), "%s = %s: status %d '%s' (want '%s')",
              cs[i].path, cs[i].value, st, omni_last_error(), cs[i].needle);
        cJSON_Delete(root);
        free(js);
    }
}

/* A JSON value followed by more than whitespace (two objects, garbage, NUL bytes) is refused, as Python's json
 * does; the first object alone used to be taken. */
static void run_trailing_cases(void) {
    size_t n = strlen(g_vl);
    const char *tails[] = {" {\"model_type\": \"x\"}", "\n garbage", "  \n"};
    for (int i = 0; i < 3; i++) {
        char *js = malloc(n + strlen(tails[i]) + 1);
        memcpy(js, g_vl, n);
        strcpy(js + n, tails[i]);
        llm_config c;
        omni_status st = llm_config_parse(js, strlen(js), &c);
        if (i < 2)
            CHECK(st == OMNI_ERR_MODEL && strstr(omni_last_error(), "config.json: unexpected data after the JSON value"),
                  "trailing case %d: %d '%s'", i, st, omni_last_error());
        else CHECK(st == OMNI_OK, "trailing whitespace: %s", omni_last_error());
        if (!st) llm_config_free(&c);
        free(js);
    }
    char nul[] = "{\"eos_token_id\": 3}\0\0";
    llm_config c;
    CHECK(llm_config_parse(g_vl, n, &c) == OMNI_OK, "base");
    CHECK(llm_config_parse_generation(nul, sizeof nul - 1, &c) == OMNI_ERR_MODEL, "NUL bytes after the JSON");
    llm_config_free(&c);
}

/* generation_config.json: broken files are errors, not silently ignored. */
static void run_generation_cases(void) {
    static const struct { const char *json, *needle; } cs[] = {
        {"{\"eos_token_id\": [3002, 3001", "generation_config.json: invalid JSON"},
        {"[1]", "generation_config.json: not a JSON object"},
        {"{\"eos_token_id\": \"3002\"}", "generation_config.json: eos_token_id: expected an integer or an array"},
        {"{\"eos_token_id\": [99999]}", "eos_token_id[0]: 99999 is outside [0, 3071]"},
        {"{\"bos_token_id\": 0.5}", "bos_token_id: 0.5 is not an integer"},
    };
    llm_config c;
    CHECK(llm_config_parse(g_vl, strlen(g_vl), &c) == OMNI_OK, "base config: %s", omni_last_error());
    int eos0 = c.eos_ids[0], n0 = c.n_eos;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        omni_status st = llm_config_parse_generation(cs[i].json, strlen(cs[i].json), &c);
        CHECK(st == OMNI_ERR_MODEL && strstr(omni_last_error(), cs[i].needle), "generation case %zu: %d '%s'", i, st,
              omni_last_error());
        CHECK(c.n_eos == n0 && c.eos_ids[0] == eos0, "generation case %zu changed the config", i);
    }
    const char *ok = "{\"eos_token_id\": [3002, 3001], \"bos_token_id\": null}";
    CHECK(llm_config_parse_generation(ok, strlen(ok), &c) == OMNI_OK && c.n_eos == 2 && llm_config_is_eos(&c, 3001),
          "valid generation config: %s", omni_last_error());
    llm_config_free(&c);
}

/* preprocessor_config.json values (vision_prep_load_config reads a model dir: written to a temp dir). */
static void run_prep_cases(const char *dir) {
    static const struct { const char *json, *needle; } cs[] = {
        {"{\"image_std\": [0.5, 0, 0.5]}", "image_std[1]: 0 is outside"},
        {"{\"image_mean\": [0.5, 0.5]}", "image_mean: 2 elements, expected 3"},
        {"{\"size\": {\"longest_edge\": -1}}", "size.longest_edge: -1 is outside"},
        {"{\"min_pixels\": 100, \"max_pixels\": 50}", "min_pixels 100 is above max_pixels 50"},
        /* session 7: skipped steps and other resampling filters were ignored (preprocessed unlike transformers); a
         * minimum of 2^40 pixels was an input error on every image ("resizes to an invalid 1.2e6x908096") */
        {"{\"do_normalize\": false}", "do_normalize false is not supported"},
        {"{\"do_rescale\": false}", "do_rescale false is not supported"},
        {"{\"resample\": 0}", "resample 0 is not supported (3, bicubic)"},
        {"{\"size\": {\"shortest_edge\": 1099511627776, \"longest_edge\": 1099511627776}}",
         "size.shortest_edge: 1099511627776 is outside [0, 268435456]"},
        {"{\"patch_size\": \"16\"}", "patch_size: expected an integer"},
        {"not json", "invalid JSON"},
    };
    char path[512];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(cs[i].json, f);
        fclose(f);
        vision_prep_params p = vision_prep_default_params();
        omni_status st = vision_prep_load_config(dir, &p);
        CHECK((st == OMNI_ERR_MODEL || (st == OMNI_ERR_UNSUPPORTED && strstr(cs[i].needle, "not supported"))) &&
                  strstr(omni_last_error(), cs[i].needle), "prep case %zu: %d '%s'", i, st, omni_last_error());
    }
    unlink(path);
}

/* Model files that are FIFOs or directories are refused immediately (no hang), with the file named. */
static void run_special_files(const char *dir) {
    char path[512];
    llm_config c;
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo config.json");
    alarm(30);
    omni_status st = llm_config_load(dir, &c);
    CHECK(st == OMNI_ERR_MODEL && strstr(omni_last_error(), "not a regular file"), "FIFO config.json: %d '%s'", st,
          omni_last_error());
    unlink(path);
    CHECK(mkdir(path, 0700) == 0, "mkdir config.json");
    st = llm_config_load(dir, &c);
    CHECK(st == OMNI_ERR_MODEL && strstr(omni_last_error(), "is a directory"), "directory config.json: %d '%s'", st,
          omni_last_error());
    rmdir(path);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo tokenizer.json");
    llm_tokenizer *t = NULL;
    st = llm_tokenizer_load(path, &t);
    CHECK(st == OMNI_ERR_MODEL && t == NULL && strstr(omni_last_error(), "not a regular file"), "FIFO tokenizer: '%s'",
          omni_last_error());
    unlink(path);
    alarm(0);
}

int main(void) {
    g_vl = omni_read_file(VL "/config.json", NULL);
    g_omni = omni_read_file(OMNI "/config.json", NULL);
    if (!g_vl || !g_omni) {
        fprintf(stderr, "fixture configs missing\n");
        return 1;
    }
    llm_config c;
    CHECK(llm_config_load(VL, &c) == OMNI_OK, "fixture VL config: %s", omni_last_error());
    llm_config_free(&c);
    CHECK(llm_config_load(OMNI, &c) == OMNI_OK, "fixture Omni config: %s", omni_last_error());
    llm_config_free(&c);
    run_text_cases(g_vl, g_text, (int)(sizeof g_text / sizeof g_text[0]));
    run_text_cases(g_omni, g_moe, (int)(sizeof g_moe / sizeof g_moe[0]));
    check_defaults();
    run_vision_cases();
    run_audio_cases();
    run_generation_cases();
    run_trailing_cases();
    char dir[] = "/tmp/omni_cfg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    run_prep_cases(dir);
    run_special_files(dir);
    rmdir(dir);
    free(g_vl);
    free(g_omni);
    return check_exit();
}
