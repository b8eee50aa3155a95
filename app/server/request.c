/* request.c - OpenAI request body -> validated srv_request (see request.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/server/request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "llm/prompt.h"
#include "llm/tokenizer.h"

#define INVALID "invalid_request_error"

srv_parse_limits srv_parse_default_limits(void) {
    srv_parse_limits l = {0};
    l.max_tokens = 2048;
    l.max_media = 16;
    l.temperature = 0.7f;
    l.top_p = 0.8f;
    l.top_k = 20;
    return l;
}

omni_status srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *param,
                          const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return status == 500 ? OMNI_ERR_NOMEM : OMNI_ERR_USAGE;
}

static omni_status oom(srv_error *e) { return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory"); }

static omni_status bad(srv_error *e, const char *param, const char *fmt, const char *what) {
    return srv_error_set(e, 400, INVALID, NULL, param, fmt, what);
}

/* ---- base64 ---------------------------------------------------------------------------------------------- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int srv_base64_decode(const char *s, size_t len, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    uint8_t *o = malloc(len / 4 * 3 + 3);
    if (!o) return -2;
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0, pad = 0, group = 0; /* group: sextets in the current 4-char group */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r' || c == '\n') continue;
        if (c == '=') { /* padding: only after 2 or 3 sextets of the last group */
            if (group < 2) goto fail;
            pad++;
            if (group + pad > 4) goto fail;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pad) goto fail;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        group = (group + 1) % 4;
        if (bits >= 8) {
            bits -= 8;
            o[n++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (group == 1 || (pad && group + pad != 4)) goto fail; /* 6 dangling bits, or wrong padding length */
    *out = o;
    *out_len = n;
    return 0;
fail:
    free(o);
    return -1;
}

/* ---- the shape of a JSON text ------------------------------------------------------------------------------ */

srv_json_shape srv_json_measure(const char *s, size_t len) {
    srv_json_shape sh = {1, 0, len};
    int depth = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '"') { /* skip the string, escapes included */
            for (i++; i < len && s[i] != '"'; i++) {
                if ((unsigned char)s[i] < 0x20 && sh.ctrl == len) sh.ctrl = i;
                if (s[i] == '\\') i++;
            }
        } else if (c == '[' || c == '{') {
            sh.values++;
            if (++depth > sh.depth) sh.depth = depth;
        } else if (c == ']' || c == '}') {
            depth -= depth > 0;
        } else if (c == ',') {
            sh.values++;
        }
    }
    return sh;
}

size_t srv_json_parse_bytes(const srv_json_shape *sh, size_t len) {
    /* a cJSON node (64 bytes) + malloc's overhead + a key string per value; the strings' bytes, and the copies
     * the request keeps of them (the prompt, decoded media), are at most twice the body */
    return sh->values * 112 + 2 * len;
}

/* The shape check before parsing (the fuzz target and every endpoint go through it). */
static omni_status check_shape(const char *body, size_t len, srv_error *err) {
    srv_json_shape sh = srv_json_measure(body, len);
    if (sh.values > SRV_MAX_JSON_VALUES)
        return srv_error_set(err, 400, INVALID, NULL, NULL, "the request body holds more than %d JSON values",
                             SRV_MAX_JSON_VALUES);
    if (sh.depth > SRV_MAX_JSON_DEPTH)
        return srv_error_set(err, 400, INVALID, NULL, NULL, "the request body nests arrays and objects %d deep "
                             "(at most %d)", sh.depth, SRV_MAX_JSON_DEPTH);
    if (sh.ctrl < len)
        return srv_error_set(err, 400, INVALID, NULL, NULL, "invalid JSON: a control character (0x%02x) inside a "
                             "string at byte %zu (write it as an escape, e.g. \\n)", (unsigned char)body[sh.ctrl],
                             sh.ctrl);
    return OMNI_OK;
}

/* Names of an object's members, for the duplicate check. */
static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first member name that appears twice in an object of the tree (NULL: none; *oom on allocation failure).
 * JSON leaves duplicates undefined: cJSON would use the first, Python and most clients the last, so a request
 * could mean two things; it is refused. */
static const char *duplicate_key(const cJSON *v, int *oom) {
    if (!v || !(cJSON_IsArray(v) || cJSON_IsObject(v))) return NULL;
    if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v), k = 0;
        const char **names = n > 1 ? malloc(sizeof *names * (size_t)n) : NULL;
        if (n > 1 && !names) {
            *oom = 1;
            return NULL;
        }
        const cJSON *c;
        cJSON_ArrayForEach(c, v) if (names) names[k++] = c->string;
        const char *dup = NULL;
        if (names) {
            qsort(names, (size_t)n, sizeof *names, cmp_name);
            for (int i = 1; i < n && !dup; i++)
                if (!strcmp(names[i - 1], names[i])) dup = names[i];
            free(names);
        }
        if (dup) return dup;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, v) {
        const char *d = duplicate_key(c, oom);
        if (d || *oom) return d;
    }
    return NULL;
}

/* ---- small JSON helpers ------------------------------------------------------------------------------------ */

/* A JSON number that is an integer in [lo, hi] (hi < 2^64; one at or above 2^63, a seed, keeps its 64 bits). */
static int get_int(const cJSON *v, double lo, double hi, long long *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || floor(d) != d) return 0;
    *out = d >= 9223372036854775808.0 ? (long long)(unsigned long long)d : (long long)d;
    return 1;
}

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL; /* explicit null = absent (clients send null for defaults) */
}

/* ---- media ------------------------------------------------------------------------------------------------- */

static omni_status add_media(srv_request *r, const srv_parse_limits *lim, srv_media **m, const char *param,
                             srv_error *e) {
    if (r->n_media >= lim->max_media)
        return srv_error_set(e, 400, INVALID, NULL, param, "too many images and audio clips (at most %d)",
                             lim->max_media);
    srv_media *nm = realloc(r->media, sizeof *nm * (size_t)(r->n_media + 1));
    if (!nm) return oom(e);
    r->media = nm;
    *m = &nm[r->n_media++];
    memset(*m, 0, sizeof **m);
    return OMNI_OK;
}

/* "data:image/png;base64,...." -> bytes; a local path (allow_files) -> path. */
static omni_status image_url(srv_request *r, const srv_parse_limits *lim, const char *url, const char *param,
                             srv_error *e) {
    srv_media *m;
    if (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8))
        return bad(e, param, "%s", "remote image URLs are not fetched: send the image as a base64 data URL "
                   "(data:image/png;base64,...)");
    if (!strncmp(url, "data:", 5)) {
        const char *comma = strchr(url, ',');
        if (!comma) return bad(e, param, "%s", "malformed data URL (no ',')");
        size_t hl = (size_t)(comma - url);
        if (hl < 12 || strncmp(url + 5, "image/", 6) || strncmp(comma - 7, ";base64", 7))
            return bad(e, param, "%s", "expected a data URL of the form data:image/<type>;base64,<data>");
        omni_status st = add_media(r, lim, &m, param, e);
        if (st) return st;
        m->kind = SRV_MEDIA_IMAGE;
        size_t tl = hl - 11 - 7; /* "data:image/" ... ";base64" */
        const char *semi = memchr(url + 11, ';', tl); /* parameters before ;base64 (e.g. ;charset) */
        if (semi) tl = (size_t)(semi - (url + 11));
        snprintf(m->format, sizeof m->format, "%.*s", (int)(tl < 15 ? tl : 15), url + 11);
        int rc = srv_base64_decode(comma + 1, strlen(comma + 1), &m->data, &m->size);
        if (rc == -2) return oom(e);
        if (rc || !m->size) return bad(e, param, "%s", "invalid base64 data in the image data URL");
        r->n_images++;
        return OMNI_OK;
    }
    const char *path = !strncmp(url, "file://", 7) ? url + 7 : url;
    if (path[0] != '/')
        return bad(e, param, "%s", "image_url must be a base64 data URL (or, with --allow-files, an absolute path)");
    if (!lim->allow_files)
        return srv_error_set(e, 400, INVALID, NULL, param,
                             "local image paths are refused (start the server with --allow-files to allow them)");
    omni_status st = add_media(r, lim, &m, param, e);
    if (st) return st;
    m->kind = SRV_MEDIA_IMAGE;
    if (!(m->path = strdup(path))) return oom(e);
    r->n_images++;
    return OMNI_OK;
}

static const char *const k_audio_formats[] = {"wav", "mp3", "flac", "ogg", "opus", "m4a", "webm"};

static omni_status input_audio(srv_request *r, const srv_parse_limits *lim, const cJSON *ia, const char *param,
                               srv_error *e) {
    char p[128];
    if (!cJSON_IsObject(ia)) return bad(e, param, "%s", "input_audio must be an object {\"data\", \"format\"}");
    const cJSON *data = field(ia, "data"), *fmt = field(ia, "format");
    snprintf(p, sizeof p, "%s.data", param);
    if (!cJSON_IsString(data)) return bad(e, p, "%s", "input_audio.data must be a base64 string");
    snprintf(p, sizeof p, "%s.format", param);
    if (!cJSON_IsString(fmt)) return bad(e, p, "%s", "input_audio.format must be a string (wav, mp3, flac)");
    int known = 0;
    for (size_t i = 0; i < sizeof k_audio_formats / sizeof *k_audio_formats; i++)
        known |= !strcmp(fmt->valuestring, k_audio_formats[i]);
    if (!known) return bad(e, p, "%s", "unsupported input_audio.format (wav, mp3, flac, ogg, opus, m4a, webm)");
    srv_media *m;
    omni_status st = add_media(r, lim, &m, param, e);
    if (st) return st;
    m->kind = SRV_MEDIA_AUDIO;
    snprintf(m->format, sizeof m->format, "%s", fmt->valuestring);
    snprintf(p, sizeof p, "%s.data", param);
    int rc = srv_base64_decode(data->valuestring, strlen(data->valuestring), &m->data, &m->size);
    if (rc == -2) return oom(e);
    if (rc || !m->size) return bad(e, p, "%s", "invalid base64 audio data");
    r->n_audios++;
    return OMNI_OK;
}

/* ---- messages ---------------------------------------------------------------------------------------------- */

static omni_status content_part(srv_request *r, const srv_parse_limits *lim, const cJSON *part, int user,
                                const char *param, llm_part *out, srv_error *e) {
    char p[96];
    if (!cJSON_IsObject(part)) return bad(e, param, "%s", "each content part must be an object with a \"type\"");
    const cJSON *type = field(part, "type");
    snprintf(p, sizeof p, "%s.type", param);
    if (!cJSON_IsString(type)) return bad(e, p, "%s", "content part \"type\" must be a string");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) {
        const cJSON *text = field(part, "text");
        snprintf(p, sizeof p, "%s.text", param);
        if (!cJSON_IsString(text)) return bad(e, p, "%s", "text part needs a string \"text\"");
        *out = (llm_part){LLM_PART_TEXT, text->valuestring};
        return OMNI_OK;
    }
    int img = !strcmp(t, "image_url"), aud = !strcmp(t, "input_audio");
    if (!img && !aud) return srv_error_set(e, 400, INVALID, NULL, p, "unsupported content part type '%.64s' "
                                           "(text, image_url, input_audio)", t);
    if (!user) return bad(e, param, "%s", "images and audio are only accepted in user messages");
    if (aud) {
        snprintf(p, sizeof p, "%s.input_audio", param);
        *out = (llm_part){LLM_PART_AUDIO, NULL};
        return input_audio(r, lim, field(part, "input_audio"), p, e);
    }
    const cJSON *iu = field(part, "image_url"), *url = cJSON_IsObject(iu) ? field(iu, "url") : iu;
    snprintf(p, sizeof p, "%s.image_url%s", param, cJSON_IsObject(iu) ? ".url" : "");
    if (!cJSON_IsString(url)) return bad(e, p, "%s", "image_url needs a string \"url\"");
    *out = (llm_part){LLM_PART_IMAGE, NULL};
    return image_url(r, lim, url->valuestring, p, e);
}

/* One message -> role + parts (parts point into the JSON, which outlives the rendering). */
static omni_status message(srv_request *r, const srv_parse_limits *lim, const cJSON *msg, int idx, llm_message *out,
                           srv_error *e) {
    char p[24];
    snprintf(p, sizeof p, "messages[%d]", idx);
    if (!cJSON_IsObject(msg)) return bad(e, p, "%s", "each message must be an object with \"role\" and \"content\"");
    const cJSON *role = field(msg, "role"), *content = field(msg, "content");
    char pr[40];
    snprintf(pr, sizeof pr, "%s.role", p);
    if (!cJSON_IsString(role)) return bad(e, pr, "%s", "message \"role\" must be a string");
    const char *rl = role->valuestring;
    if (!strcmp(rl, "developer")) rl = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant"))
        return srv_error_set(e, 400, INVALID, NULL, pr, "unsupported role '%.32s' (system, developer, user, "
                             "assistant)", role->valuestring);
    if (!strcmp(rl, "system") && idx != 0)
        return bad(e, pr, "%s", "a system message is only accepted as the first message");
    if (field(msg, "tool_calls")) return bad(e, p, "%s", "tool calls are not supported");
    snprintf(pr, sizeof pr, "%s.content", p);
    int n = cJSON_IsString(content) ? 1 : cJSON_IsArray(content) ? cJSON_GetArraySize(content) : -1;
    if (n < 0) return bad(e, pr, "%s", "message \"content\" must be a string or an array of content parts");
    llm_part *parts = calloc((size_t)(n ? n : 1), sizeof *parts);
    if (!parts) return oom(e);
    *out = (llm_message){rl, n, parts};
    if (cJSON_IsString(content)) {
        parts[0] = (llm_part){LLM_PART_TEXT, content->valuestring};
        return OMNI_OK;
    }
    int i = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        char pp[56];
        snprintf(pp, sizeof pp, "%s[%d]", pr, i);
        omni_status st = content_part(r, lim, part, !strcmp(rl, "user"), pp, &parts[i++], e);
        if (st) return st;
    }
    return OMNI_OK;
}

static omni_status chat_prompt(srv_request *r, const srv_parse_limits *lim, const cJSON *root, srv_error *e) {
    const cJSON *msgs = field(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return bad(e, "messages", "%s", "\"messages\" must be a non-empty array");
    int n = cJSON_GetArraySize(msgs), i = 0;
    llm_message *m = calloc((size_t)n, sizeof *m);
    if (!m) return oom(e);
    omni_status st = OMNI_OK;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, msgs) {
        if ((st = message(r, lim, msg, i, &m[i], e))) break;
        i++;
    }
    if (!st && !strcmp(m[n - 1].role, "assistant"))
        st = bad(e, "messages", "%s", "the last message must not be an assistant message (continuing a reply is "
                 "not supported)");
    if (!st && !(r->prompt = llm_prompt_render(m, n, 1))) st = oom(e);
    for (int k = 0; k < n; k++) free((void *)m[k].parts);
    free(m);
    return st;
}

static omni_status completion_prompt(srv_request *r, const cJSON *root, srv_error *e) {
    const cJSON *p = field(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
    if (!cJSON_IsString(p)) return bad(e, "prompt", "%s", "\"prompt\" must be a string (or an array of one string)");
    if (!p->valuestring[0]) return bad(e, "prompt", "%s", "\"prompt\" is empty");
    if (field(root, "suffix")) return bad(e, "suffix", "%s", "\"suffix\" is not supported");
    if (field(root, "echo") && !cJSON_IsFalse(field(root, "echo")))
        return bad(e, "echo", "%s", "\"echo\" is not supported");
    if (!(r->prompt = strdup(p->valuestring))) return oom(e);
    return OMNI_OK;
}

/* ---- sampling and options ---------------------------------------------------------------------------------- */

static omni_status number(const cJSON *root, const char *name, double lo, double hi, int lo_open, float *out,
                          srv_error *e) {
    const cJSON *v = field(root, name);
    if (!v) return OMNI_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || (lo_open && d == lo))
        return srv_error_set(e, 400, INVALID, NULL, name, "\"%s\" must be a number in %c%g, %g]", name,
                             lo_open ? '(' : '[', lo, hi);
    *out = (float)d;
    return OMNI_OK;
}

static omni_status stops(srv_request *r, const cJSON *root, srv_error *e) {
    const cJSON *s = field(root, "stop");
    if (!s) return OMNI_OK;
    int n = cJSON_IsString(s) ? 1 : cJSON_IsArray(s) ? cJSON_GetArraySize(s) : -1;
    if (n < 0 || n > SRV_MAX_STOP)
        return srv_error_set(e, 400, INVALID, NULL, "stop", "\"stop\" must be a string or an array of up to %d "
                             "strings", SRV_MAX_STOP);
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_IsString(s) ? s : cJSON_GetArrayItem(s, i);
        if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) > SRV_MAX_STOP_LEN)
            return srv_error_set(e, 400, INVALID, NULL, "stop", "each stop sequence must be a non-empty string of "
                                 "at most %d bytes", SRV_MAX_STOP_LEN);
        if (!(r->stop[r->n_stop++] = strdup(v->valuestring))) return oom(e);
    }
    return OMNI_OK;
}

static omni_status max_tokens(srv_request *r, const srv_parse_limits *lim, const cJSON *root, srv_error *e) {
    const char *names[2] = {"max_completion_tokens", "max_tokens"};
    r->max_tokens = lim->max_tokens;
    for (int i = 0; i < 2; i++) {
        const cJSON *v = field(root, names[i]);
        long long n;
        if (!v) continue;
        if (!get_int(v, -1e18, 1e18, &n) || n < 1)
            return srv_error_set(e, 400, INVALID, NULL, names[i], "\"%s\" must be a positive integer", names[i]);
        if (n > lim->max_tokens)
            return srv_error_set(e, 400, INVALID, NULL, names[i], "\"%s\" = %lld is over this server's limit of %d",
                                 names[i], n, lim->max_tokens);
        r->max_tokens = (int)n;
        break; /* max_completion_tokens wins when both are given */
    }
    return OMNI_OK;
}

static int is_empty(const cJSON *v) { return (cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child; }

/* Features we do not implement: refuse them rather than answer something else than was asked (OpenAI's, and the
 * extras vLLM and llama-server users send). A field that asks for the default (a penalty of 0, an empty tool
 * list, tool_choice "none", output modalities ["text"]) is accepted. */
static omni_status unsupported(const cJSON *root, srv_error *e) {
    static const struct { const char *name; double neutral; } num[] = {
        {"presence_penalty", 0}, {"frequency_penalty", 0}, {"repetition_penalty", 1}, {"repeat_penalty", 1},
        {"min_p", 0}, {"top_logprobs", 0}, {"best_of", 1}, {"min_tokens", 0}};
    for (size_t i = 0; i < sizeof num / sizeof *num; i++) {
        const cJSON *v = field(root, num[i].name);
        if (v && !(cJSON_IsNumber(v) && v->valuedouble == num[i].neutral))
            return srv_error_set(e, 400, INVALID, NULL, num[i].name, "\"%s\" is not supported (only %g)",
                                 num[i].name, num[i].neutral);
    }
    static const char *const off[] = {"tools", "functions", "function_call", "logit_bias", "stop_token_ids", "audio",
                                      "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                                      "structured_outputs", "json_schema", "grammar"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        const cJSON *v = field(root, off[i]);
        if (v && !is_empty(v)) return srv_error_set(e, 400, INVALID, NULL, off[i], "\"%s\" is not supported", off[i]);
    }
    const cJSON *tc = field(root, "tool_choice");
    if (tc && !(cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")))
        return bad(e, "tool_choice", "%s", "\"tool_choice\" is not supported (tools are not)");
    const cJSON *ie = field(root, "ignore_eos");
    if (ie && !cJSON_IsFalse(ie)) return bad(e, "ignore_eos", "%s", "\"ignore_eos\" is not supported");
    const cJSON *mo = field(root, "modalities");
    if (mo && !(cJSON_GetArraySize(mo) == 1 && cJSON_IsString(mo->child) && !strcmp(mo->child->valuestring, "text")))
        return bad(e, "modalities", "%s", "only text output is supported (\"modalities\": [\"text\"])");
    const cJSON *lp = field(root, "logprobs");
    if (lp && !cJSON_IsFalse(lp)) return bad(e, "logprobs", "%s", "\"logprobs\" is not supported");
    long long n;
    const cJSON *nv = field(root, "n");
    if (nv && !(get_int(nv, 1, 1, &n)))
        return bad(e, "n", "%s", "\"n\" must be 1 (one choice per request)");
    const cJSON *rf = field(root, "response_format");
    if (rf) {
        const cJSON *t = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return bad(e, "response_format", "%s", "only response_format {\"type\": \"text\"} is supported");
    }
    return OMNI_OK;
}

static omni_status options(srv_request *r, const srv_parse_limits *lim, const cJSON *root, srv_error *e) {
    omni_status st;
    r->temperature = lim->temperature;
    r->top_p = lim->top_p;
    r->top_k = lim->top_k;
    if ((st = number(root, "temperature", 0, 2, 0, &r->temperature, e))) return st;
    if ((st = number(root, "top_p", 0, 1, 1, &r->top_p, e))) return st;
    long long v;
    const cJSON *k = field(root, "top_k");
    if (k && !get_int(k, -1, 1 << 30, &v))
        return bad(e, "top_k", "%s", "\"top_k\" must be an integer >= 0 (0 or -1: no limit)");
    if (k) r->top_k = v < 0 ? 0 : (int)v; /* vLLM's -1 and llama.cpp's 0 both mean no top-k */
    const cJSON *seed = field(root, "seed");
    if (seed && !get_int(seed, -9223372036854775808.0, 18446744073709549568.0 /* the last double < 2^64 */, &v))
        return bad(e, "seed", "%s", "\"seed\" must be an integer in [-2^63, 2^64)");
    if (seed) {
        r->seed = seed->valuedouble < 0 ? (uint64_t)(long long)seed->valuedouble : (uint64_t)seed->valuedouble;
        r->seed_set = 1;
    }
    if ((st = max_tokens(r, lim, root, e)) || (st = stops(r, root, e)) || (st = unsupported(root, e))) return st;
    const cJSON *stream = field(root, "stream"), *so = field(root, "stream_options");
    if (stream && !cJSON_IsBool(stream)) return bad(e, "stream", "%s", "\"stream\" must be a boolean");
    r->stream = cJSON_IsTrue(stream);
    if (so) {
        const cJSON *iu = cJSON_IsObject(so) ? field(so, "include_usage") : NULL;
        if (!cJSON_IsObject(so) || (iu && !cJSON_IsBool(iu)))
            return bad(e, "stream_options", "%s", "\"stream_options\" must be {\"include_usage\": bool}");
        r->include_usage = cJSON_IsTrue(iu);
    }
    return OMNI_OK;
}

static omni_status check_model(const cJSON *root, const srv_parse_limits *lim, srv_error *e) {
    const cJSON *m = field(root, "model");
    if (!m) return OMNI_OK;
    if (!cJSON_IsString(m)) return bad(e, "model", "%s", "\"model\" must be a string");
    if (lim->n_model_names == 0) return OMNI_OK;
    for (int i = 0; i < lim->n_model_names; i++)
        if (!strcmp(m->valuestring, lim->model_names[i])) return OMNI_OK;
    return srv_error_set(e, 404, INVALID, "model_not_found", "model", "The model '%.200s' does not exist (this "
                         "server serves '%.200s')", m->valuestring, lim->model_names[0]);
}

/* The offset of the first "\u0000" escape in the body (len if none): cJSON ends its strings at a NUL, so the rest
 * of that string would be dropped without a word. A backslash escapes the next character ("\\u0000" is text). */
static size_t nul_escape(const char *b, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++) {
        if (b[i] != '\\') continue;
        if (!memcmp(b + i + 1, "u0000", 5)) return i;
        i++;
    }
    return len;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_media; i++) {
        free(r->media[i].data);
        free(r->media[i].path);
    }
    free(r->media);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* The common checks of a request body -> its root object: UTF-8, no \u0000, its shape, valid JSON with nothing
 * after the value, an object. */
static omni_status parse_object(const char *body, size_t len, cJSON **root, srv_error *err) {
    *root = NULL;
    size_t valid = llm_utf8_valid_len(body, len); /* JSON is UTF-8; cJSON would pass other bytes through */
    if (valid < len)
        return srv_error_set(err, 400, INVALID, NULL, NULL, "the request body is not valid UTF-8 (at byte %zu)", valid);
    const char *zero = memchr(body, 0, len); /* a raw NUL byte in a string cuts it short too (found by fuzzing) */
    if (zero)
        return srv_error_set(err, 400, INVALID, NULL, NULL, "the request body holds a NUL byte (at byte %zu), which "
                             "is not accepted", (size_t)(zero - body));
    size_t nul = nul_escape(body, len);
    if (nul < len)
        return srv_error_set(err, 400, INVALID, NULL, NULL, "a string holds a NUL character (\\u0000 at byte %zu), "
                             "which is not accepted", nul);
    omni_status st = check_shape(body, len, err);
    if (st) return st;
    size_t ws = 0;
    while (ws < len && strchr(" \t\r\n", body[ws])) ws++;
    if (ws == len) return srv_error_set(err, 400, INVALID, NULL, NULL, "the request body is empty (a JSON object "
                                        "is expected)");
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!r) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return srv_error_set(err, 400, INVALID, NULL, NULL, "invalid JSON in the request body (near byte %zu)", at);
    }
    for (const char *p = end; p && p < body + len && !st; p++) /* only whitespace may follow the value */
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
            st = srv_error_set(err, 400, INVALID, NULL, NULL, "invalid JSON: data after the end of the value");
    if (!st && !cJSON_IsObject(r)) st = bad(err, NULL, "%s", "the request body must be a JSON object");
    int no_mem = 0;
    const char *dup = st ? NULL : duplicate_key(r, &no_mem);
    if (no_mem) st = oom(err);
    else if (dup)
        st = srv_error_set(err, 400, INVALID, NULL, NULL, "invalid JSON: the key \"%.64s\" appears twice in one "
                           "object", dup);
    if (st) cJSON_Delete(r);
    else *root = r;
    return st;
}

omni_status srv_request_parse(const char *body, size_t len, srv_endpoint ep, const srv_parse_limits *lim,
                              srv_request *out, srv_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->endpoint = ep;
    cJSON *root;
    omni_status st = parse_object(body, len, &root, err);
    if (st) return st;
    st = check_model(root, lim, err);
    if (!st) st = options(out, lim, root, err);
    if (!st) st = ep == SRV_EP_CHAT ? chat_prompt(out, lim, root, err) : completion_prompt(out, root, err);
    cJSON_Delete(root);
    if (st) srv_request_free(out);
    out->endpoint = ep;
    return st;
}

/* ---- /tokenize, /detokenize ----------------------------------------------------------------------------------- */

/* An optional boolean field (absent or null: def). */
static omni_status flag(const cJSON *root, const char *name, int def, int *out, srv_error *e) {
    const cJSON *v = field(root, name);
    if (v && !cJSON_IsBool(v))
        return srv_error_set(e, 400, INVALID, NULL, name, "\"%s\" must be a boolean", name);
    *out = v ? cJSON_IsTrue(v) : def;
    return OMNI_OK;
}

omni_status srv_tokenize_parse(const char *body, size_t len, srv_tokenize_req *out, srv_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    cJSON *root;
    omni_status st = parse_object(body, len, &root, err);
    if (st) return st;
    const cJSON *c = field(root, "content");
    int add_special = 0;
    if (!cJSON_IsString(c)) st = bad(err, "content", "%s", "\"content\" must be a string");
    if (!st) st = flag(root, "add_special", 0, &add_special, err);
    if (!st) st = flag(root, "parse_special", 1, &out->parse_special, err);
    if (!st) st = flag(root, "with_pieces", 0, &out->with_pieces, err);
    if (!st && !(out->text = strdup(c->valuestring))) st = oom(err);
    if (!st) out->text_len = strlen(out->text);
    cJSON_Delete(root);
    if (st) srv_tokenize_req_free(out);
    return st;
}

void srv_tokenize_req_free(srv_tokenize_req *r) {
    if (!r) return;
    free(r->text);
    memset(r, 0, sizeof *r);
}

omni_status srv_detokenize_parse(const char *body, size_t len, int vocab, int32_t **ids, int *n, srv_error *err) {
    *ids = NULL;
    *n = 0;
    memset(err, 0, sizeof *err);
    cJSON *root;
    omni_status st = parse_object(body, len, &root, err);
    if (st) return st;
    const cJSON *t = field(root, "tokens");
    int k = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    if (k < 0) st = bad(err, "tokens", "%s", "\"tokens\" must be an array of token ids");
    int32_t *v = st ? NULL : malloc(sizeof *v * (size_t)(k ? k : 1));
    if (!st && !v) st = oom(err);
    int i = 0;
    const cJSON *e;
    if (!st) cJSON_ArrayForEach(e, t) {
        long long id;
        if (!get_int(e, 0, vocab - 1, &id)) {
            st = srv_error_set(err, 400, INVALID, NULL, "tokens", "tokens[%d] is not a token id in [0, %d)", i,
                               vocab);
            break;
        }
        v[i++] = (int32_t)id;
    }
    cJSON_Delete(root);
    if (st) {
        free(v);
        return st;
    }
    *ids = v;
    *n = k;
    return OMNI_OK;
}
