/* fuzz_server_request.c - what `omni serve` makes of a request body and what it writes back (app/server/request.c,
 * response.c): JSON, messages and content parts, base64 media, sampling fields, stop strings, limits, the UTF-8 and
 * NUL checks; then the stop-sequence matcher on the rendered prompt as if it were the answer, and the response,
 * chunk and error JSON of any bytes. Byte 0: bit 0 = /v1/completions, bit 1 = local files allowed.
 * Invariants: a request that parses respects the limits it was parsed with and came from a UTF-8 body without NUL
 * (a NUL would cut a string short without a word); every JSON written back is valid JSON and valid UTF-8 and
 * carries the answer text unchanged when that text is UTF-8 without NUL; the stop matcher releases valid UTF-8 in
 * order and ends exactly at the first stop sequence. Byte 0 bits 3-4 = 1: the body is a /tokenize request (then
 * tokenized, its {"tokens"} JSON with pieces checked), 2: a /detokenize request (ids in the vocabulary, the text's
 * {"content"} JSON checked). Every body: srv_json_measure bounds what cJSON builds (values, depth). The tokenizer:
 * as fuzz_tokenizer_encode finds it ($OMNI_FUZZ_TOKENIZER, data/tokenizer.json beside the binary, the fixture). */
#include "fuzz_util.h"
#include "fuzz_tokenizer.h"

#include <cjson/cJSON.h>

#include "app/server/request.h"
#include "app/server/response.h"
#include "llm/tokenizer.h"

static llm_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_tok = fuzz_tokenizer((*argv)[0], "fuzz_server_request");
    (void)argc;
    return 0;
}

/* Values and nesting depth of a parsed JSON tree. */
static void tree_size(const cJSON *v, int level, size_t *values, int *depth) {
    for (; v; v = v->next) {
        (*values)++;
        if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
            if (level + 1 > *depth) *depth = level + 1;
            tree_size(v->child, level + 1, values, depth);
        }
    }
}

/* srv_json_measure is an upper bound of what cJSON builds from the body (the server reserves memory by it). */
static void check_measure(const char *body, size_t len) {
    srv_json_shape sh = srv_json_measure(body, len);
    FUZZ_ASSERT(sh.ctrl <= len && (sh.ctrl == len || (unsigned char)body[sh.ctrl] < 0x20));
    if (sh.depth > 200) return; /* (cJSON refuses past 1000; its recursion is not what is checked here) */
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return;
    size_t values = 0;
    int depth = 0;
    tree_size(root, 0, &values, &depth);
    FUZZ_ASSERT(values <= sh.values && depth <= sh.depth);
    cJSON_Delete(root);
}

/* POST /tokenize and /detokenize bodies, and the JSON answered. */
static void check_tokenize(const char *body, size_t len, int detok) {
    srv_error e;
    int V = llm_tokenizer_vocab_size(g_tok);
    if (!detok) {
        srv_tokenize_req r;
        if (srv_tokenize_parse(body, len, &r, &e) != OMNI_OK) {
            FUZZ_ASSERT(e.status == 400 || e.status == 500);
            return;
        }
        FUZZ_ASSERT(r.text && r.text_len == strlen(r.text) && fuzz_utf8_valid(r.text, r.text_len));
        int32_t *ids = NULL;
        int n = 0, bad = 0;
        if (llm_tokenizer_encode(g_tok, r.text, r.text_len, r.parse_special, &ids, &n, &bad) == OMNI_OK) {
            char *j = srv_tokens_json(g_tok, ids, n, r.with_pieces);
            FUZZ_ASSERT(j && fuzz_utf8_valid(j, strlen(j)));
            cJSON *root = cJSON_Parse(j), *t = cJSON_GetObjectItem(root, "tokens");
            FUZZ_ASSERT(cJSON_IsArray(t) && cJSON_GetArraySize(t) == n);
            for (int i = 0; i < n; i++) {
                const cJSON *it = cJSON_GetArrayItem(t, i), *id = r.with_pieces ? cJSON_GetObjectItem(it, "id") : it;
                FUZZ_ASSERT(cJSON_IsNumber(id) && id->valueint == ids[i]);
            }
            cJSON_Delete(root);
            free(j);
        }
        free(ids);
        srv_tokenize_req_free(&r);
        return;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (srv_detokenize_parse(body, len, V, &ids, &n, &e) != OMNI_OK) {
        FUZZ_ASSERT(ids == NULL && (e.status == 400 || e.status == 500));
        return;
    }
    FUZZ_ASSERT(ids != NULL && n >= 0);
    for (int i = 0; i < n; i++) FUZZ_ASSERT(ids[i] >= 0 && ids[i] < V);
    char *text = llm_tokenizer_decode(g_tok, ids, n, 0);
    if (text) {
        char *j = srv_content_json(text, strlen(text));
        FUZZ_ASSERT(j && fuzz_utf8_valid(j, strlen(j)));
        cJSON *root = cJSON_Parse(j);
        FUZZ_ASSERT(cJSON_IsString(cJSON_GetObjectItem(root, "content")));
        if (fuzz_utf8_valid(text, strlen(text)))
            FUZZ_ASSERT(!strcmp(cJSON_GetObjectItem(root, "content")->valuestring, text));
        cJSON_Delete(root);
        free(j);
    }
    free(text);
    free(ids);
}

/* A JSON text written back: valid UTF-8, parses; its choices[0] text (when `text` is given) is `text`. */
static void check_json(const char *json, size_t skip, const srv_resp_meta *m, int chunk, const char *text,
                       size_t len) {
    FUZZ_ASSERT(json != NULL);
    size_t n = strlen(json);
    FUZZ_ASSERT(n >= skip && fuzz_utf8_valid(json, n));
    cJSON *root = cJSON_Parse(json + skip);
    FUZZ_ASSERT(root != NULL);
    if (m && text && fuzz_utf8_valid(text, len) && !memchr(text, 0, len)) {
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0), *v;
        if (m->endpoint == SRV_EP_CHAT) v = cJSON_GetObjectItem(cJSON_GetObjectItem(c, chunk ? "delta" : "message"), "content");
        else v = cJSON_GetObjectItem(c, "text");
        FUZZ_ASSERT(cJSON_IsString(v) && strlen(v->valuestring) == len && !memcmp(v->valuestring, text, len));
    }
    cJSON_Delete(root);
}

/* The answer `text` (valid UTF-8) fed to a stop matcher in pieces cut at character boundaries (sizes from `cuts`):
 * what it releases, in order, is valid UTF-8 and ends right before the first stop sequence of the text (all of
 * the text when none occurs). */
static void check_stopper(const srv_request *r, const char *text, const uint8_t *cuts, size_t n_cuts) {
    srv_stopper s;
    srv_stopper_init(&s, (const char *const *)r->stop, r->n_stop);
    size_t len = strlen(text), at = 0, got = 0, ci = 0;
    char *all = malloc(len + 1);
    FUZZ_ASSERT(all != NULL);
    int matched = 0;
    while (at < len && !matched) {
        size_t k = n_cuts ? cuts[ci++ % n_cuts] % 13 + 1 : 7;
        size_t end = at + k < len ? at + k : len;
        while (end < len && ((unsigned char)text[end] & 0xC0) == 0x80) end++; /* the engine sends whole characters */
        char *out = NULL;
        size_t on = 0;
        int rc = srv_stopper_feed(&s, text + at, end - at, &out, &on);
        FUZZ_ASSERT(rc >= 0 && out != NULL && got + on <= len && fuzz_utf8_valid(out, on));
        memcpy(all + got, out, on);
        got += on;
        free(out);
        matched = rc == 1;
        at = end;
    }
    if (!matched) {
        size_t rn;
        const char *rest = srv_stopper_rest(&s, &rn);
        FUZZ_ASSERT(got + rn <= len && fuzz_utf8_valid(rest, rn));
        memcpy(all + got, rest, rn);
        got += rn;
    }
    /* the first stop sequence of the text: its earliest start over all of them */
    size_t first = len;
    for (int i = 0; i < r->n_stop; i++) {
        const char *p = strstr(text, r->stop[i]);
        if (p && (size_t)(p - text) < first) first = (size_t)(p - text);
    }
    FUZZ_ASSERT(matched == (first < len) && got == first && !memcmp(all, text, got));
    free(all);
    srv_stopper_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    srv_parse_limits lim = srv_parse_default_limits();
    lim.allow_files = (d[0] >> 1) & 1;
    lim.max_tokens = 512;
    lim.max_media = 4;
    srv_request r;
    srv_error e;
    memset(&r, 0, sizeof r);
    const char *body = (const char *)d + 1;
    size_t len = n - 1;
    srv_endpoint ep = d[0] & 1 ? SRV_EP_COMPLETIONS : SRV_EP_CHAT;
    check_measure(body, len);
    int mode = (d[0] >> 3) & 3;
    if (mode == 1 || mode == 2) {
        check_tokenize(body, len, mode == 2);
        return 0;
    }
    omni_status st = srv_request_parse(body, len, ep, &lim, &r, &e);
    /* llm_utf8_valid_len (the body check) and this file's own UTF-8 check agree */
    FUZZ_ASSERT((llm_utf8_valid_len(body, len) == len) == fuzz_utf8_valid(body, len));
    srv_resp_meta m = {ep, "chatcmpl-1", 1, "omni"};
    if (st == OMNI_OK) {
        FUZZ_ASSERT(fuzz_utf8_valid(body, len) && !memchr(body, 0, len)); /* a NUL byte would cut a string */
        FUZZ_ASSERT(r.prompt && r.max_tokens >= 1 && r.max_tokens <= lim.max_tokens && r.n_stop <= SRV_MAX_STOP);
        FUZZ_ASSERT(r.n_media == r.n_images + r.n_audios && r.n_media <= lim.max_media);
        FUZZ_ASSERT(r.temperature >= 0 && r.temperature <= 2 && r.top_p > 0 && r.top_p <= 1 && r.top_k >= 0);
        FUZZ_ASSERT(fuzz_utf8_valid(r.prompt, strlen(r.prompt)));
        for (int i = 0; i < r.n_media; i++) FUZZ_ASSERT(r.media[i].data || (r.media[i].path && lim.allow_files));
        for (int i = 0; i < r.n_stop; i++)
            FUZZ_ASSERT(r.stop[i][0] && strlen(r.stop[i]) <= SRV_MAX_STOP_LEN &&
                        fuzz_utf8_valid(r.stop[i], strlen(r.stop[i])));
        /* the prompt as an answer: stop sequences, then the whole response and a chunk of it */
        check_stopper(&r, r.prompt, d, n);
        size_t pl = strlen(r.prompt);
        srv_usage u = {3, 4, 1.5, 2.5};
        char *j = srv_completion_json(&m, r.prompt, pl, SRV_FINISH_STOP, &u);
        check_json(j, 0, &m, 0, r.prompt, pl);
        free(j);
    } else {
        FUZZ_ASSERT(e.status >= 400 && e.status < 600 && e.type != NULL);
        char *j = srv_error_json(&e); /* the message may echo the client's strings, cut anywhere */
        check_json(j, 0, NULL, 0, NULL, 0);
        free(j);
    }
    srv_request_free(&r);
    /* the HTTP layer's 404/405 echo the client's path cut at 200 bytes (app/server/http.c admit) */
    char *url = fuzz_str(d + 1, len);
    srv_error_set(&e, 404, "not_found_error", "not_found", NULL, "no such endpoint: %s %.200s", "POST", url);
    char *j = srv_error_json(&e);
    check_json(j, 0, NULL, 0, NULL, 0);
    free(j);
    free(url);
    /* any bytes as an answer piece: a chunk (the engine's text may hold invalid UTF-8 or NUL) */
    char *c = srv_chunk_sse(&m, body, len, d[0] & 4, SRV_FINISH_NONE);
    FUZZ_ASSERT(c && !strncmp(c, "data: ", 6) && strlen(c) >= 8 && !strcmp(c + strlen(c) - 2, "\n\n"));
    c[strlen(c) - 2] = 0;
    check_json(c, 6, &m, 1, body, len);
    free(c);
    uint8_t *b = NULL;
    size_t bn = 0;
    if (srv_base64_decode((const char *)d, n, &b, &bn) == 0) free(b);
    return 0;
}
