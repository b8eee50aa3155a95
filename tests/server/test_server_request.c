/* test_server_request.c - the pure part of `omni serve`: request bodies -> validated requests or the right error
 * (status, param), base64, the chat template through llm_prompt_render, response/chunk/error JSON shapes (parsed
 * back with cJSON), metrics text, and the stop-sequence matcher fed byte by byte and in one piece. */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/server/request.h"
#include "app/server/response.h"
#include "check.h"

static srv_parse_limits g_lim;

static int parse(const char *body, srv_endpoint ep, srv_request *r, srv_error *e) {
    return (int)srv_request_parse(body, strlen(body), ep, &g_lim, r, e);
}

/* A body that must fail with `status` and (when non-NULL) this param. */
static void expect_error(const char *body, srv_endpoint ep, int status, const char *param) {
    srv_request r;
    srv_error e;
    int st = parse(body, ep, &r, &e);
    CHECK(st && e.status == status, "%s: status %d (rc %d), want %d: %s", body, e.status, st, status, e.message);
    if (st && param) CHECK(!strcmp(e.param, param), "%s: param '%s', want '%s'", body, e.param, param);
    CHECK(!st || (e.message[0] && e.type), "%s: empty message/type", body);
    CHECK(r.prompt == NULL && r.media == NULL, "%s: request not left empty", body);
    srv_request_free(&r);
}

static void test_base64(void) {
    const char *ok[][2] = {{"", ""}, {"TWFu", "Man"}, {"TWE=", "Ma"}, {"TWE", "Ma"}, {"TQ==", "M"}, {"TQ", "M"},
                           {"TW\r\nFu", "Man"}, {"aGVsbG8gd29ybGQ=", "hello world"}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        uint8_t *o;
        size_t n;
        int rc = srv_base64_decode(ok[i][0], strlen(ok[i][0]), &o, &n);
        CHECK(rc == 0 && n == strlen(ok[i][1]) && !memcmp(o, ok[i][1], n), "base64 '%s'", ok[i][0]);
        free(o);
    }
    const char *bad[] = {"T", "TWFuT", "TW=u", "T===", "=", "TWE==", "TWFu=", "TW!u", "TW u", "TWFu====", "-_-_"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint8_t *o;
        size_t n;
        CHECK(srv_base64_decode(bad[i], strlen(bad[i]), &o, &n) == -1 && !o, "base64 '%s' accepted", bad[i]);
    }
    /* every byte value round-trips through an encoder written here */
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t src[256];
    char enc[400];
    for (int i = 0; i < 256; i++) src[i] = (uint8_t)(i * 7 + 3);
    for (int len = 0; len <= 256; len += 37) {
        int o = 0;
        for (int i = 0; i < len; i += 3) {
            uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0) |
                         (i + 2 < len ? src[i + 2] : 0);
            enc[o++] = al[v >> 18];
            enc[o++] = al[(v >> 12) & 63];
            enc[o++] = i + 1 < len ? al[(v >> 6) & 63] : '=';
            enc[o++] = i + 2 < len ? al[v & 63] : '=';
        }
        uint8_t *d;
        size_t n;
        CHECK(srv_base64_decode(enc, (size_t)o, &d, &n) == 0 && n == (size_t)len && !memcmp(d, src, n),
              "round trip %d", len);
        free(d);
    }
}

static void test_chat_ok(void) {
    srv_request r;
    srv_error e;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
                       "\"data:image/png;base64,iVBORw0KGgo=\"}},{\"type\":\"text\",\"text\":\"What is it?\"},"
                       "{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"UklGRg==\",\"format\":\"wav\"}}]},"
                       "{\"role\":\"assistant\",\"content\":\"A cat.\"},{\"role\":\"user\",\"content\":\"Sure?\"}],"
                       "\"temperature\":0,\"top_p\":0.5,\"top_k\":3,\"seed\":-1,\"max_tokens\":7,"
                       "\"stop\":[\"\\n\",\"END\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                       "\"n\":1,\"user\":\"x\",\"presence_penalty\":0}";
    int st = parse(body, SRV_EP_CHAT, &r, &e);
    CHECK(st == 0, "chat parse: %s", e.message);
    if (st) return;
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                       "<|vision_start|><|image_pad|><|vision_end|>What is it?<|audio_start|><|audio_pad|>"
                       "<|audio_end|><|im_end|>\n<|im_start|>assistant\nA cat.<|im_end|>\n<|im_start|>user\n"
                       "Sure?<|im_end|>\n<|im_start|>assistant\n";
    CHECK(!strcmp(r.prompt, want), "prompt:\n%s", r.prompt);
    CHECK(r.n_media == 2 && r.n_images == 1 && r.n_audios == 1, "media %d", r.n_media);
    CHECK(r.n_media == 2 && r.media[0].kind == SRV_MEDIA_IMAGE && r.media[0].size == 8 &&
              !memcmp(r.media[0].data, "\x89PNG\r\n\x1a\n", 8) && !strcmp(r.media[0].format, "png"),
          "image media");
    CHECK(r.n_media == 2 && r.media[1].kind == SRV_MEDIA_AUDIO && r.media[1].size == 4 &&
              !memcmp(r.media[1].data, "RIFF", 4) && !strcmp(r.media[1].format, "wav"),
          "audio media");
    CHECK(r.temperature == 0.f && r.top_p == 0.5f && r.top_k == 3 && r.max_tokens == 7, "sampling");
    CHECK(r.seed_set && r.seed == UINT64_MAX, "seed %llu", (unsigned long long)r.seed);
    CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "\n") && !strcmp(r.stop[1], "END"), "stop");
    CHECK(r.stream && r.include_usage, "stream flags");
    srv_request_free(&r);
    srv_request_free(&r); /* second free of an emptied request is a no-op */

    /* defaults, string content, max_completion_tokens wins, a string stop */
    st = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,"
               "\"max_completion_tokens\":9,\"stop\":\"x\",\"temperature\":null}", SRV_EP_CHAT, &r, &e);
    CHECK(st == 0 && r.max_tokens == 9 && r.n_stop == 1 && !r.stream && r.temperature == g_lim.temperature &&
              r.top_k == g_lim.top_k && !r.seed_set && r.n_media == 0,
          "defaults: %s", e.message);
    CHECK(st == 0 && !strcmp(r.prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "prompt");
    srv_request_free(&r);
    st = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", SRV_EP_CHAT, &r, &e);
    CHECK(st == 0 && r.max_tokens == g_lim.max_tokens, "max_tokens default");
    srv_request_free(&r);
    /* fields that ask for the default are accepted; top_k -1 (vLLM) and 0 (llama.cpp) mean no limit */
    st = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[],\"tool_choice\":\"none\","
               "\"repetition_penalty\":1,\"min_p\":0,\"top_logprobs\":0,\"best_of\":1,\"ignore_eos\":false,"
               "\"logit_bias\":{},\"modalities\":[\"text\"],\"logprobs\":false,\"top_k\":-1}", SRV_EP_CHAT, &r, &e);
    CHECK(st == 0 && r.top_k == 0, "neutral fields: %s", e.message);
    srv_request_free(&r);
    /* developer = system; image_url as a plain string */
    st = parse("{\"messages\":[{\"role\":\"developer\",\"content\":\"S\"},{\"role\":\"user\",\"content\":"
               "[{\"type\":\"image_url\",\"image_url\":\"data:image/jpeg;base64,/9j/\"}]}]}", SRV_EP_CHAT, &r, &e);
    CHECK(st == 0 && r.n_images == 1 && !strcmp(r.media[0].format, "jpeg") &&
              !strncmp(r.prompt, "<|im_start|>system\nS<|im_end|>", 30), "developer/plain url: %s", e.message);
    srv_request_free(&r);
}

static void test_files(void) {
    srv_request r;
    srv_error e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                       "{\"url\":\"file:///tmp/x.png\"}}]}]}";
    expect_error(body, SRV_EP_CHAT, 400, "messages[0].content[0].image_url.url");
    g_lim.allow_files = 1;
    int st = parse(body, SRV_EP_CHAT, &r, &e);
    CHECK(st == 0 && r.n_media == 1 && r.media[0].path && !strcmp(r.media[0].path, "/tmp/x.png") && !r.media[0].data,
          "allow_files: %s", e.message);
    srv_request_free(&r);
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                 "{\"url\":\"x.png\"}}]}]}", SRV_EP_CHAT, 400, NULL);
    g_lim.allow_files = 0;
}

static void test_completions(void) {
    srv_request r;
    srv_error e;
    int st = parse("{\"model\":\"m\",\"prompt\":\"Once upon\",\"max_tokens\":3}", SRV_EP_COMPLETIONS, &r, &e);
    CHECK(st == 0 && !strcmp(r.prompt, "Once upon") && r.max_tokens == 3 && r.n_media == 0, "completion: %s",
          e.message);
    srv_request_free(&r);
    st = parse("{\"prompt\":\"h\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80\"}", SRV_EP_COMPLETIONS, &r, &e);
    CHECK(st == 0 && !strcmp(r.prompt, "h\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"), "UTF-8 prompt: %s", e.message);
    srv_request_free(&r);
    st = parse("{\"prompt\":\"a\\\\u0000\"}", SRV_EP_COMPLETIONS, &r, &e); /* an escaped backslash, then text */
    CHECK(st == 0 && !strcmp(r.prompt, "a\\u0000"), "escaped backslash before u0000: %s", e.message);
    srv_request_free(&r);
    st = parse("{\"prompt\":[\"a\"]}", SRV_EP_COMPLETIONS, &r, &e);
    CHECK(st == 0 && !strcmp(r.prompt, "a"), "prompt array of one");
    srv_request_free(&r);
    expect_error("{\"prompt\":[\"a\",\"b\"]}", SRV_EP_COMPLETIONS, 400, "prompt");
    expect_error("{\"prompt\":\"\"}", SRV_EP_COMPLETIONS, 400, "prompt");
    expect_error("{\"prompt\":5}", SRV_EP_COMPLETIONS, 400, "prompt");
    expect_error("{\"prompt\":\"a\",\"echo\":true}", SRV_EP_COMPLETIONS, 400, "echo");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", SRV_EP_COMPLETIONS, 400, "prompt");
}

static void test_errors(void) {
    const char *u = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[1024];
#define BODY(...) (snprintf(b, sizeof b, __VA_ARGS__), b)
    expect_error("", SRV_EP_CHAT, 400, "");
    /* JSON is UTF-8: other bytes (which cJSON would pass on into the prompt, a stop string, an echoed error) */
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a \xff b\"}]}", SRV_EP_CHAT, 400, "");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"\xa9\"}", SRV_EP_CHAT, 400, "");
    expect_error("{\"prompt\":\"cut \xe6\x97\"}", SRV_EP_COMPLETIONS, 400, "");
    expect_error("{\"prompt\":\"overlong \xc0\xaf\"}", SRV_EP_COMPLETIONS, 400, "");
    expect_error("{\"prompt\":\"surrogate \xed\xa0\x80\"}", SRV_EP_COMPLETIONS, 400, "");
    /* a \u0000 escape would end the C string: the rest of the prompt would be dropped silently */
    expect_error("{\"prompt\":\"abc\\u0000def\"}", SRV_EP_COMPLETIONS, 400, "");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\\\\\\u0000\"}]}", SRV_EP_CHAT, 400, "");
    expect_error("{", SRV_EP_CHAT, 400, "");
    expect_error("{\"messages\":[]} x", SRV_EP_CHAT, 400, "");
    expect_error("[1,2]", SRV_EP_CHAT, 400, "");
    expect_error("\"str\"", SRV_EP_CHAT, 400, "");
    expect_error("{}", SRV_EP_CHAT, 400, "messages");
    expect_error("{\"messages\":{}}", SRV_EP_CHAT, 400, "messages");
    expect_error("{\"messages\":[]}", SRV_EP_CHAT, 400, "messages");
    expect_error("{\"messages\":[1]}", SRV_EP_CHAT, 400, "messages[0]");
    expect_error("{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", SRV_EP_CHAT, 400, "messages[0].role");
    expect_error("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", SRV_EP_CHAT, 400, "messages[0].role");
    expect_error("{\"messages\":[{\"role\":\"user\"}]}", SRV_EP_CHAT, 400, "messages[0].content");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":7}]}", SRV_EP_CHAT, 400, "messages[0].content");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[7]}]}", SRV_EP_CHAT, 400, "messages[0].content[0]");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\"}]}]}", SRV_EP_CHAT, 400,
                 "messages[0].content[0].type");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", SRV_EP_CHAT,
                 400, "messages[0].content[0].text");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"s\"},"
                 "{\"role\":\"user\",\"content\":\"b\"}]}", SRV_EP_CHAT, 400, "messages[1].role");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 SRV_EP_CHAT, 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                 "{\"url\":\"data:image/png;base64,AAAA\"}}]},{\"role\":\"user\",\"content\":\"b\"}]}",
                 SRV_EP_CHAT, 400, "messages[0].content[0]");
    /* images: corrupt base64, wrong data URL, remote URL */
    const char *img = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                      "{\"url\":\"%s\"}}]}]}";
    const char *bad_urls[] = {"data:image/png;base64,iVBO!!!", "data:image/png;base64,", "data:image/png,abcd",
                              "data:text/plain;base64,AAAA", "data:image/png;base64", "http://x/y.png",
                              "https://x/y.png", "data:image/png;base64,A"};
    for (size_t i = 0; i < sizeof bad_urls / sizeof *bad_urls; i++)
        expect_error(BODY(img, bad_urls[i]), SRV_EP_CHAT, 400, "messages[0].content[0].image_url.url");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
                 SRV_EP_CHAT, 400, "messages[0].content[0].image_url.url");
    /* audio */
    const char *aud = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"input_audio\":"
                      "%s}]}]}";
    expect_error(BODY(aud, "{\"data\":\"@@@@\",\"format\":\"wav\"}"), SRV_EP_CHAT, 400,
                 "messages[0].content[0].input_audio.data");
    expect_error(BODY(aud, "{\"data\":\"UklGRg==\",\"format\":\"aiff\"}"), SRV_EP_CHAT, 400,
                 "messages[0].content[0].input_audio.format");
    expect_error(BODY(aud, "{\"data\":\"UklGRg==\"}"), SRV_EP_CHAT, 400, "messages[0].content[0].input_audio.format");
    expect_error(BODY(aud, "{\"data\":5,\"format\":\"wav\"}"), SRV_EP_CHAT, 400,
                 "messages[0].content[0].input_audio.data");
    expect_error(BODY(aud, "\"x\""), SRV_EP_CHAT, 400, "messages[0].content[0].input_audio");
    /* too many media */
    char many[4096] = "{\"messages\":[{\"role\":\"user\",\"content\":[";
    for (int i = 0; i <= g_lim.max_media; i++)
        strcat(many, i ? ",{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,AAAA\"}"
                       : "{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,AAAA\"}");
    strcat(many, "]}]}");
    expect_error(many, SRV_EP_CHAT, 400, NULL);
    /* sampling fields */
    const char *fields[][2] = {
        {"\"temperature\":\"hot\"", "temperature"}, {"\"temperature\":2.5", "temperature"},
        {"\"temperature\":-1", "temperature"},      {"\"top_p\":0", "top_p"},
        {"\"top_p\":1.5", "top_p"},                 {"\"top_k\":-2", "top_k"},
        {"\"top_k\":1.5", "top_k"},                 {"\"seed\":\"1\"", "seed"},
        {"\"seed\":0.5", "seed"},                   {"\"max_tokens\":0", "max_tokens"},
        {"\"max_tokens\":\"10\"", "max_tokens"},    {"\"max_tokens\":2.5", "max_tokens"},
        {"\"max_tokens\":100000000", "max_tokens"}, {"\"max_completion_tokens\":-3", "max_completion_tokens"},
        {"\"stop\":5", "stop"},                     {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop"},
        {"\"stop\":[\"\"]", "stop"},                {"\"stop\":[1]", "stop"},
        {"\"stream\":\"yes\"", "stream"},           {"\"stream\":1", "stream"},
        {"\"stream_options\":5", "stream_options"}, {"\"stream_options\":{\"include_usage\":1}", "stream_options"},
        {"\"n\":2", "n"},                           {"\"n\":\"1\"", "n"},
        {"\"logprobs\":true", "logprobs"},          {"\"tools\":[{\"type\":\"function\"}]", "tools"},
        {"\"presence_penalty\":0.5", "presence_penalty"}, {"\"frequency_penalty\":\"x\"", "frequency_penalty"},
        {"\"response_format\":{\"type\":\"json_object\"}", "response_format"},
        {"\"model\":7", "model"},
        /* what would change the answer and is not implemented: refused, never ignored */
        {"\"repetition_penalty\":1.1", "repetition_penalty"}, {"\"repeat_penalty\":1.3", "repeat_penalty"},
        {"\"min_p\":0.05", "min_p"},               {"\"top_logprobs\":3", "top_logprobs"},
        {"\"best_of\":2", "best_of"},              {"\"min_tokens\":5", "min_tokens"},
        {"\"ignore_eos\":true", "ignore_eos"},     {"\"stop_token_ids\":[7]", "stop_token_ids"},
        {"\"logit_bias\":{\"1\":5}", "logit_bias"}, {"\"tool_choice\":\"auto\"", "tool_choice"},
        {"\"modalities\":[\"text\",\"audio\"]", "modalities"}, {"\"audio\":{\"voice\":\"x\"}", "audio"},
        {"\"guided_json\":{\"type\":\"object\"}", "guided_json"}, {"\"grammar\":\"root ::= x\"", "grammar"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        expect_error(BODY("{\"messages\":%s,%s}", u, fields[i][0]), SRV_EP_CHAT, 400, fields[i][1]);
    /* unknown model: 404 model_not_found; the known names pass */
    const char *names[] = {"omni-model", "alias"};
    g_lim.model_names = names;
    g_lim.n_model_names = 2;
    srv_request r;
    srv_error e;
    int st = parse(BODY("{\"model\":\"gpt-4o\",\"messages\":%s}", u), SRV_EP_CHAT, &r, &e);
    CHECK(st && e.status == 404 && e.code && !strcmp(e.code, "model_not_found") && !strcmp(e.param, "model"),
          "unknown model: %d %s", e.status, e.message);
    for (int i = 0; i < 2; i++) {
        st = parse(BODY("{\"model\":\"%s\",\"messages\":%s}", names[i], u), SRV_EP_CHAT, &r, &e);
        CHECK(st == 0, "model %s refused: %s", names[i], e.message);
        srv_request_free(&r);
    }
    g_lim.n_model_names = 0;
#undef BODY
}

static cJSON *parse_json(const char *s) {
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    CHECK(j != NULL, "not JSON: %s", s ? s : "(null)");
    return j;
}

static const char *str_at(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItem(o, a);
    if (b) v = cJSON_GetObjectItem(v, b);
    return cJSON_GetStringValue(v);
}

/* "data: {...}\n\n" -> the JSON */
static cJSON *sse_json(const char *ev) {
    size_t n = ev ? strlen(ev) : 0;
    CHECK(n > 8 && !strncmp(ev, "data: ", 6) && !strcmp(ev + n - 2, "\n\n"), "SSE framing: %s", ev ? ev : "");
    if (n <= 8) return NULL;
    char *j = strndup(ev + 6, n - 8);
    cJSON *o = parse_json(j);
    free(j);
    return o;
}

static void test_responses(void) {
    srv_error e;
    srv_error_set(&e, 401, "invalid_request_error", "invalid_api_key", NULL, "bad key %d", 7);
    char *s = srv_error_json(&e);
    cJSON *o = parse_json(s);
    CHECK(o && !strcmp(str_at(o, "error", "message"), "bad key 7") &&
              !strcmp(str_at(o, "error", "type"), "invalid_request_error") &&
              !strcmp(str_at(o, "error", "code"), "invalid_api_key") &&
              cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "param")),
          "error json: %s", s);
    cJSON_Delete(o);
    free(s);

    /* what is echoed into an error (a URL path, a role cut by %.32s) may be invalid UTF-8; the JSON stays UTF-8 */
    srv_error_set(&e, 404, "not_found_error", NULL, "x\xe6", "no such endpoint: /v1/\xff\xfe %.4s", "\xe6\x97\xa5\xe6\x97\xa5");
    s = srv_error_json(&e);
    o = parse_json(s);
    CHECK(o && !strcmp(str_at(o, "error", "message"), "no such endpoint: /v1/\xEF\xBF\xBD\xEF\xBF\xBD \xe6\x97\xa5\xEF\xBF\xBD") &&
              !strcmp(str_at(o, "error", "param"), "x\xEF\xBF\xBD"), "error json with invalid UTF-8: %s", s);
    cJSON_Delete(o);
    free(s);
    s = srv_models_json("m\xc3", 5);
    CHECK(s && strstr(s, "\"id\":\"m\xEF\xBF\xBD\""), "model id with invalid UTF-8: %s", s);
    free(s);

    srv_resp_meta m = {SRV_EP_CHAT, "chatcmpl-1", 1700000000, "omni-model"};
    srv_usage u = {12, 3, 10.0, 30.0};
    const char txt[] = "a\"b\\c\n\x01z\0y";
    s = srv_completion_json(&m, txt, sizeof txt - 1, SRV_FINISH_LENGTH, &u);
    o = parse_json(s);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK(o && !strcmp(str_at(o, "object", NULL), "chat.completion") && !strcmp(str_at(o, "id", NULL), "chatcmpl-1") &&
              !strcmp(str_at(o, "model", NULL), "omni-model") &&
              !strcmp(str_at(c0, "message", "content"), "a\"b\\c\n\x01z\xEF\xBF\xBDy") &&
              !strcmp(str_at(c0, "message", "role"), "assistant") && !strcmp(str_at(c0, "finish_reason", NULL), "length") &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "total_tokens")->valueint == 15 &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(o, "timings"), "predicted_per_second")->valuedouble == 100.0,
          "completion json: %s", s);
    cJSON_Delete(o);
    free(s);

    s = srv_chunk_sse(&m, "Hi", 2, 1, SRV_FINISH_NONE);
    o = sse_json(s);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK(o && !strcmp(str_at(o, "object", NULL), "chat.completion.chunk") &&
              !strcmp(str_at(c0, "delta", "content"), "Hi") && !strcmp(str_at(c0, "delta", "role"), "assistant") &&
              cJSON_IsNull(cJSON_GetObjectItem(c0, "finish_reason")),
          "first chunk: %s", s);
    cJSON_Delete(o);
    free(s);
    s = srv_chunk_sse(&m, "", 0, 0, SRV_FINISH_STOP);
    o = sse_json(s);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK(o && !strcmp(str_at(c0, "finish_reason", NULL), "stop") && !cJSON_GetObjectItem(cJSON_GetObjectItem(c0,
          "delta"), "content"), "final chunk: %s", s);
    cJSON_Delete(o);
    free(s);
    s = srv_usage_sse(&m, &u);
    o = sse_json(s);
    CHECK(o && cJSON_GetArraySize(cJSON_GetObjectItem(o, "choices")) == 0 &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")->valueint == 12,
          "usage chunk: %s", s);
    cJSON_Delete(o);
    free(s);

    srv_resp_meta mc = {SRV_EP_COMPLETIONS, "cmpl-1", 1, "omni-model"};
    s = srv_chunk_sse(&mc, "x", 1, 1, SRV_FINISH_NONE);
    o = sse_json(s);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    CHECK(o && !strcmp(str_at(o, "object", NULL), "text_completion") && !strcmp(str_at(c0, "text", NULL), "x"),
          "completion chunk: %s", s);
    cJSON_Delete(o);
    free(s);

    s = srv_models_json("omni-model", 5);
    o = parse_json(s);
    CHECK(o && !strcmp(str_at(o, "object", NULL), "list") &&
              !strcmp(str_at(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "data"), 0), "id", NULL), "omni-model"),
          "models: %s", s);
    cJSON_Delete(o);
    free(s);

    srv_metrics mt;
    memset(&mt, 0, sizeof mt);
    mt.requests_ok = 5;
    mt.http_by_status[4] = 2;
    mt.n_kv = 1;
    snprintf(mt.kv[0].name, sizeof mt.kv[0].name, "int2");
    mt.kv[0].pages_used = 3;
    mt.kv[0].pages_free = 97;
    mt.tokens_per_second = 12.5;
    s = srv_metrics_text(&mt);
    CHECK(s && strstr(s, "omni_requests_total{outcome=\"ok\"} 5\n") &&
              strstr(s, "omni_http_responses_total{code=\"413\"} 2\n") &&
              strstr(s, "omni_kv_pages_used{format=\"int2\"} 3\n") &&
              strstr(s, "omni_kv_pages_free{format=\"int2\"} 97\n") && strstr(s, "omni_tokens_per_second 12.500\n") &&
              strstr(s, "# TYPE omni_kv_pages_used gauge\n"),
          "metrics:\n%s", s);
    free(s);
}

/* Feed `text` in pieces of `step` bytes; returns the released text and whether it matched. */
static char *stop_run(const char *const *stops, int n, const char *text, size_t step, int *matched) {
    srv_stopper st;
    srv_stopper_init(&st, stops, n);
    size_t len = strlen(text), o = 0;
    char *all = calloc(len + 1, 1);
    *matched = 0;
    for (size_t i = 0; i < len && !*matched; i += step) {
        char *out;
        size_t k;
        *matched = srv_stopper_feed(&st, text + i, i + step <= len ? step : len - i, &out, &k);
        memcpy(all + o, out, k);
        o += k;
        free(out);
    }
    if (!*matched) {
        size_t k;
        const char *r = srv_stopper_rest(&st, &k);
        memcpy(all + o, r, k);
        o += k;
    }
    all[o] = 0;
    srv_stopper_free(&st);
    return all;
}

static void test_stopper(void) {
    const char *stops[] = {"END", "\n\n", "abcabd"};
    struct { const char *text, *want; int matched; } cases[] = {
        {"hello END world", "hello ", 1}, {"no stop here", "no stop here", 0}, {"EN", "EN", 0},
        {"para\n\nnext", "para", 1},      {"xabcabcabdy", "xabc", 1},          {"ENDEND", "", 1},
        {"abcab", "abcab", 0},            {"E\nN\nD", "E\nN\nD", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t step = 1; step <= 4; step += 3) {
            int m;
            char *got = stop_run(stops, 3, cases[i].text, step, &m);
            CHECK(!strcmp(got, cases[i].want) && m == cases[i].matched, "'%s' step %zu: '%s' (%d)", cases[i].text, step,
                  got, m);
            free(got);
        }
    int m;
    char *got = stop_run(NULL, 0, "anything", 1, &m);
    CHECK(!strcmp(got, "anything") && !m, "no stops");
    free(got);
}

/* An error whose message contains `words`. */
static void expect_message(const char *body, srv_endpoint ep, const char *words) {
    srv_request r;
    srv_error e;
    int st = parse(body, ep, &r, &e);
    CHECK(st && e.status == 400 && strstr(e.message, words), "%.80s: %d '%s', want '%s'", body, e.status, e.message,
          words);
    srv_request_free(&r);
}

static int parses(const char *body, srv_endpoint ep, srv_request *r) {
    srv_error e;
    int st = parse(body, ep, r, &e);
    CHECK(st == 0, "%.80s: refused: %s", body, e.message);
    return st == 0;
}

/* What a body would cost is decided before it is parsed: values (a "[0,0,..." body is a cJSON node per 2 bytes),
 * nesting, raw control characters in strings; duplicate keys are ambiguous; the seed takes [-2^63, 2^64). */
static void test_json_edges(void) {
    srv_json_shape sh = srv_json_measure("[1,2,[3]]", 9);
    CHECK(sh.values == 5 && sh.depth == 2 && sh.ctrl == 9, "shape: %zu values, depth %d", sh.values, sh.depth);
    const char *str = "{\"a\":\"[,{\\\"\\\\\",\"b\":{}}";
    sh = srv_json_measure(str, strlen(str));
    CHECK(sh.values == 4 && sh.depth == 2 && sh.ctrl == strlen(str), "shape with strings: %zu values, depth %d",
          sh.values, sh.depth);
    sh = srv_json_measure("{\"a\":\"x\ty\"}", 11);
    CHECK(sh.ctrl == 7, "control character at %zu", sh.ctrl);
    /* nesting: 64 levels (the root included) pass, 65 do not (cJSON alone would take 1000) */
    for (int depth = 64; depth <= 65; depth++) {
        char *b = malloc(4096);
        int n = sprintf(b, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":");
        for (int i = 0; i < depth - 1; i++) b[n++] = '[';
        for (int i = 0; i < depth - 1; i++) b[n++] = ']';
        strcpy(b + n, "}");
        srv_request r;
        if (depth == 64 && parses(b, SRV_EP_CHAT, &r)) srv_request_free(&r);
        if (depth == 65) expect_message(b, SRV_EP_CHAT, "nests arrays and objects 65 deep");
        free(b);
    }
    /* more values than SRV_MAX_JSON_VALUES: refused before parsing (2 bytes each: ~2 MiB) */
    size_t nv = SRV_MAX_JSON_VALUES + 10;
    char *big = malloc(2 * nv + 128);
    int n = sprintf(big, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":[");
    for (size_t i = 0; i < nv; i++) big[n++] = '0', big[n++] = ',';
    strcpy(big + n - 1, "]}");
    expect_message(big, SRV_EP_CHAT, "JSON values");
    free(big);
    expect_message("{\"prompt\":\"a\tb\"}", SRV_EP_COMPLETIONS, "control character (0x09)");
    expect_message("{\"prompt\":\"a\nb\"}", SRV_EP_COMPLETIONS, "control character (0x0a)");
    expect_message("{\"prompt\":\"a\",\"max_tokens\":2,\"max_tokens\":9999999}", SRV_EP_COMPLETIONS,
                   "\"max_tokens\" appears twice");
    expect_message("{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"role\":\"system\"}]}",
                   SRV_EP_CHAT, "\"role\" appears twice");
    expect_message("", SRV_EP_CHAT, "empty");
    expect_message(" \r\n", SRV_EP_CHAT, "empty");
    srv_request r;
    if (parses("{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":false},\"x\":{\"include_usage\":1}}",
               SRV_EP_COMPLETIONS, &r)) /* the same key in two objects */
        srv_request_free(&r);
    if (parses("{\"prompt\":\"a\",\"seed\":-9223372036854775808}", SRV_EP_COMPLETIONS, &r)) {
        CHECK(r.seed_set && r.seed == 0x8000000000000000ull, "seed -2^63: %llu", (unsigned long long)r.seed);
        srv_request_free(&r);
    }
    if (parses("{\"prompt\":\"a\",\"seed\":18446744073709549568}", SRV_EP_COMPLETIONS, &r)) {
        CHECK(r.seed == 18446744073709549568ull, "seed 2^64 - 2048: %llu", (unsigned long long)r.seed);
        srv_request_free(&r);
    }
    expect_message("{\"prompt\":\"a\",\"seed\":18446744073709551616}", SRV_EP_COMPLETIONS, "[-2^63, 2^64)");
    expect_message("{\"prompt\":\"a\",\"seed\":-9223372036854777856}", SRV_EP_COMPLETIONS, "[-2^63, 2^64)");
    expect_message("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                   "{\"url\":\"HTTPS://example.com/a.png\"}}]}]}", SRV_EP_CHAT, "remote image URLs are not fetched");
}

/* /tokenize and /detokenize bodies (llama-server's fields). */
static void test_tokenize_bodies(void) {
    srv_tokenize_req t;
    srv_error e;
    const char *b = "{\"content\":\"Hi <|im_end|>\",\"add_special\":true,\"with_pieces\":true,\"parse_special\":false}";
    CHECK(srv_tokenize_parse(b, strlen(b), &t, &e) == 0 && !strcmp(t.text, "Hi <|im_end|>") && t.text_len == 13 &&
              t.with_pieces == 1 && t.parse_special == 0, "tokenize body: %s", e.message);
    srv_tokenize_req_free(&t);
    b = "{\"content\":\"x\"}";
    CHECK(srv_tokenize_parse(b, strlen(b), &t, &e) == 0 && t.parse_special == 1 && t.with_pieces == 0,
          "tokenize defaults");
    srv_tokenize_req_free(&t);
    srv_tokenize_req_free(NULL);
    const char *bad[] = {"{}", "{\"content\":1}", "{\"content\":\"x\",\"with_pieces\":\"yes\"}", "[]", "",
                         "{\"content\":\"a\\u0000b\"}", "{\"content\":\"x\",\"content\":\"y\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(srv_tokenize_parse(bad[i], strlen(bad[i]), &t, &e) && e.status == 400 && !t.text, "tokenize '%s'",
              bad[i]);
        srv_tokenize_req_free(&t);
    }
    int32_t *ids;
    int n;
    b = "{\"tokens\":[0,5,99]}";
    CHECK(srv_detokenize_parse(b, strlen(b), 100, &ids, &n, &e) == 0 && n == 3 && ids[0] == 0 && ids[2] == 99,
          "detokenize body: %s", e.message);
    free(ids);
    b = "{\"tokens\":[]}";
    CHECK(srv_detokenize_parse(b, strlen(b), 100, &ids, &n, &e) == 0 && n == 0 && ids, "detokenize []");
    free(ids);
    const char *badd[] = {"{\"tokens\":[100]}", "{\"tokens\":[-1]}", "{\"tokens\":[1.5]}", "{\"tokens\":[\"1\"]}",
                          "{\"tokens\":5}", "{}", "{\"tokens\":[1e30]}", "{\"tokens\":[null]}"};
    for (size_t i = 0; i < sizeof badd / sizeof *badd; i++) {
        CHECK(srv_detokenize_parse(badd[i], strlen(badd[i]), 100, &ids, &n, &e) && e.status == 400 && !ids,
              "detokenize '%s'", badd[i]);
    }
}

int main(void) {
    g_lim = srv_parse_default_limits();
    test_base64();
    test_chat_ok();
    test_files();
    test_completions();
    test_errors();
    test_responses();
    test_stopper();
    test_json_edges();
    test_tokenize_bodies();
    return check_exit();
}
