/* test_prompt.c - llm_prompt_render equals the official Qwen3-VL chat template as rendered by jinja2
 * (tests/fixtures/chat/cases.json, made by tools/reference/make_chat_template_cases.py). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "llm/config.h"
#include "llm/prompt.h"

/* Convert one JSON message to parts (content string or list of {type,text}). */
static int to_parts(const cJSON *msg, llm_part *parts, int cap) {
    const cJSON *content = cJSON_GetObjectItem(msg, "content");
    if (cJSON_IsString(content)) {
        parts[0].type = LLM_PART_TEXT;
        parts[0].text = content->valuestring;
        return 1;
    }
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, content) {
        if (n == cap) break;
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(it, "type"));
        if (type && !strcmp(type, "image")) parts[n++].type = LLM_PART_IMAGE;
        else if (type && !strcmp(type, "audio")) parts[n++].type = LLM_PART_AUDIO;
        else if (type && !strcmp(type, "video")) parts[n++].type = LLM_PART_VIDEO;
        else {
            parts[n].type = LLM_PART_TEXT;
            parts[n++].text = cJSON_GetStringValue(cJSON_GetObjectItem(it, "text"));
        }
    }
    return n;
}

static void run_file(const char *path) {
    char *txt = omni_read_file(path, NULL);
    CHECK(txt != NULL, "cannot read %s", path);
    if (!txt) return;
    cJSON *cases = cJSON_Parse(txt);
    free(txt);
    CHECK(cJSON_GetArraySize(cases) >= 8, "%s: too few cases", path);
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        const cJSON *msgs = cJSON_GetObjectItem(c, "messages");
        int n = cJSON_GetArraySize(msgs);
        llm_message m[16];
        llm_part parts[16][16];
        for (int i = 0; i < n && i < 16; i++) {
            const cJSON *mj = cJSON_GetArrayItem(msgs, i);
            m[i].role = cJSON_GetStringValue(cJSON_GetObjectItem(mj, "role"));
            m[i].parts = parts[i];
            m[i].n_parts = to_parts(mj, parts[i], 16);
        }
        int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        char *got = llm_prompt_render(m, n, gen);
        const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "expected"));
        CHECK(got && want && !strcmp(got, want), "case %s:\n--- got:\n%s\n--- want:\n%s", name, got, want);
        free(got);
    }
    cJSON_Delete(cases);
}

int main(void) {
    run_file(OMNI_FIXTURES "/chat/cases.json");
    /* the convenience form equals the general one */
    char *a = llm_prompt_simple("sys", "hi", 1, 0);
    CHECK(a && !strcmp(a, "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|>"
                          "<|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n"), "simple: %s", a);
    free(a);
    return check_exit();
}
