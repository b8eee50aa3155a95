/* response.c - response JSON, SSE framing, metrics text and the stop-sequence matcher (see response.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/server/response.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer.h"

/* cJSON takes C strings and writes their bytes as they are, and JSON must be UTF-8: a copy of `len` bytes with
 * NUL bytes and invalid UTF-8 (an echoed client string, a name cut by %.Ns) replaced by U+FFFD. */
static char *cstr(const char *text, size_t len) {
    char *s = malloc(3 * len + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < len;) {
        const char *nul = memchr(text + i, 0, len - i);
        size_t run = nul ? (size_t)(nul - (text + i)) : len - i;
        o += llm_utf8_sanitize(text + i, run, o);
        i += run;
        if (nul) {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = 0;
    return s;
}

static cJSON *add_text(cJSON *obj, const char *name, const char *text, size_t len) {
    char *s = cstr(text ? text : "", text ? len : 0);
    cJSON *v = s ? cJSON_AddStringToObject(obj, name, s) : NULL;
    free(s);
    return v;
}

static cJSON *add_str(cJSON *obj, const char *name, const char *text) {
    return add_text(obj, name, text, text ? strlen(text) : 0);
}

/* Print and delete; NULL if anything failed while building (cJSON returns NULL down the chain). */
static char *finish_json(cJSON *root, int ok) {
    char *s = root && ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

static char *sse(char *json) {
    if (!json) return NULL;
    size_t n = strlen(json) + 9;
    char *s = malloc(n);
    if (s) snprintf(s, n, "data: %s\n\n", json);
    free(json);
    return s;
}

static cJSON *error_obj(const srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    int ok = err && add_str(err, "message", e->message) && add_str(err, "type", e->type ? e->type : "server_error") &&
             (e->param[0] ? add_str(err, "param", e->param) : cJSON_AddNullToObject(err, "param")) &&
             (e->code ? add_str(err, "code", e->code) : cJSON_AddNullToObject(err, "code"));
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

char *srv_error_json(const srv_error *e) { return finish_json(error_obj(e), 1); }

char *srv_error_sse(const srv_error *e) { return sse(srv_error_json(e)); }

static const char *finish_name(srv_finish f) {
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL;
}

static cJSON *head(const srv_resp_meta *m, int chunk) {
    cJSON *root = cJSON_CreateObject();
    const char *obj = m->endpoint == SRV_EP_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                 : "text_completion";
    if (!root || !cJSON_AddStringToObject(root, "id", m->id) || !cJSON_AddStringToObject(root, "object", obj) ||
        !cJSON_AddNumberToObject(root, "created", (double)m->created) ||
        !add_str(root, "model", m->model)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static int add_usage(cJSON *root, const srv_usage *u) {
    cJSON *us = cJSON_AddObjectToObject(root, "usage"), *t;
    if (!us || !cJSON_AddNumberToObject(us, "prompt_tokens", u->prompt_tokens) ||
        !cJSON_AddNumberToObject(us, "completion_tokens", u->completion_tokens) ||
        !cJSON_AddNumberToObject(us, "total_tokens", u->prompt_tokens + u->completion_tokens))
        return 0;
    /* llama-server's timings object (spec/ux.md 1.3) */
    if (!(t = cJSON_AddObjectToObject(root, "timings"))) return 0;
    double pn = u->prompt_tokens, gn = u->completion_tokens;
    return cJSON_AddNumberToObject(t, "prompt_n", pn) && cJSON_AddNumberToObject(t, "prompt_ms", u->prompt_ms) &&
           cJSON_AddNumberToObject(t, "prompt_per_token_ms", pn > 0 ? u->prompt_ms / pn : 0) &&
           cJSON_AddNumberToObject(t, "prompt_per_second", u->prompt_ms > 0 ? 1e3 * pn / u->prompt_ms : 0) &&
           cJSON_AddNumberToObject(t, "predicted_n", gn) &&
           cJSON_AddNumberToObject(t, "predicted_ms", u->predicted_ms) &&
           cJSON_AddNumberToObject(t, "predicted_per_token_ms", gn > 0 ? u->predicted_ms / gn : 0) &&
           cJSON_AddNumberToObject(t, "predicted_per_second", u->predicted_ms > 0 ? 1e3 * gn / u->predicted_ms : 0);
}

/* choices[0] with either message/delta/text and finish_reason. */
static int add_choice(cJSON *root, const srv_resp_meta *m, const char *text, size_t len, int chunk, int first,
                      srv_finish finish) {
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    if (!choices || !c) {
        cJSON_Delete(c);
        return 0;
    }
    cJSON_AddItemToArray(choices, c);
    int ok = cJSON_AddNumberToObject(c, "index", 0) != NULL;
    if (m->endpoint == SRV_EP_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        ok = ok && msg;
        if (ok && (!chunk || first)) ok = cJSON_AddStringToObject(msg, "role", "assistant") != NULL;
        if (ok && (!chunk || !finish)) ok = add_text(msg, "content", text, len) != NULL;
    } else {
        ok = ok && add_text(c, "text", text, len);
    }
    ok = ok && cJSON_AddNullToObject(c, "logprobs");
    const char *fr = finish_name(finish);
    return ok && (fr ? cJSON_AddStringToObject(c, "finish_reason", fr) : cJSON_AddNullToObject(c, "finish_reason"));
}

char *srv_completion_json(const srv_resp_meta *m, const char *text, size_t len, srv_finish finish,
                          const srv_usage *u) {
    cJSON *root = head(m, 0);
    int ok = root && add_choice(root, m, text, len, 0, 1, finish) && add_usage(root, u);
    return finish_json(root, ok);
}

char *srv_chunk_sse(const srv_resp_meta *m, const char *text, size_t len, int first, srv_finish finish) {
    cJSON *root = head(m, 1);
    int ok = root && add_choice(root, m, finish ? "" : text, finish ? 0 : len, 1, first, finish);
    return sse(finish_json(root, ok));
}

char *srv_usage_sse(const srv_resp_meta *m, const srv_usage *u) {
    cJSON *root = head(m, 1);
    int ok = root && cJSON_AddArrayToObject(root, "choices") && add_usage(root, u);
    return sse(finish_json(root, ok));
}

char *srv_models_json(const char *model, long long created) {
    cJSON *root = cJSON_CreateObject(), *data = root ? cJSON_AddArrayToObject(root, "data") : NULL;
    cJSON *m = cJSON_CreateObject();
    int ok = data && m && cJSON_AddStringToObject(root, "object", "list") && add_str(m, "id", model) &&
             cJSON_AddStringToObject(m, "object", "model") && cJSON_AddNumberToObject(m, "created", (double)created) &&
             cJSON_AddStringToObject(m, "owned_by", "omni");
    if (ok) cJSON_AddItemToArray(data, m);
    else cJSON_Delete(m);
    return finish_json(root, ok);
}

/* ---- /tokenize, /detokenize, /props ---------------------------------------------------------------------------- */

char *srv_content_json(const char *text, size_t len) {
    cJSON *root = cJSON_CreateObject();
    return finish_json(root, root && add_text(root, "content", text, len));
}

char *srv_props_json(const srv_props *p) {
    cJSON *root = cJSON_CreateObject(), *d = root ? cJSON_AddObjectToObject(root, "default_generation_settings") : NULL;
    cJSON *par = d ? cJSON_AddObjectToObject(d, "params") : NULL, *mod = NULL;
    int ok = par && cJSON_AddNumberToObject(d, "n_ctx", p->n_ctx) &&
             cJSON_AddNumberToObject(par, "n_predict", p->max_tokens) &&
             cJSON_AddNumberToObject(par, "temperature", p->temperature) &&
             cJSON_AddNumberToObject(par, "top_k", p->top_k) && cJSON_AddNumberToObject(par, "top_p", p->top_p) &&
             cJSON_AddNumberToObject(root, "total_slots", p->total_slots) &&
             add_str(root, "model_path", p->model) && (mod = cJSON_AddObjectToObject(root, "modalities")) &&
             cJSON_AddBoolToObject(mod, "vision", p->vision) && cJSON_AddBoolToObject(mod, "audio", p->audio) &&
             add_str(root, "build_info", p->build);
    return finish_json(root, ok);
}

/* ---- metrics ------------------------------------------------------------------------------------------------ */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} textbuf;

static void tb_printf(textbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = 1; return; }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) { b->oom = 1; return; }
        b->s = s;
        b->cap = cap;
    }
}

static void metric(textbuf *b, const char *name, const char *type, const char *help) {
    tb_printf(b, "# HELP omni_%s %s\n# TYPE omni_%s %s\n", name, help, name, type);
}

char *srv_metrics_text(const srv_metrics *m) {
    static const int codes[6] = {200, 400, 401, 404, 413, 503};
    textbuf b = {0};
    metric(&b, "requests_total", "counter", "Finished generation requests by outcome.");
    tb_printf(&b, "omni_requests_total{outcome=\"ok\"} %lld\n", (long long)m->requests_ok);
    tb_printf(&b, "omni_requests_total{outcome=\"error\"} %lld\n", (long long)m->requests_error);
    tb_printf(&b, "omni_requests_total{outcome=\"cancelled\"} %lld\n", (long long)m->requests_cancelled);
    metric(&b, "http_responses_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < 6; i++)
        tb_printf(&b, "omni_http_responses_total{code=\"%d\"} %lld\n", codes[i], (long long)m->http_by_status[i]);
    tb_printf(&b, "omni_http_responses_total{code=\"other\"} %lld\n", (long long)m->http_other);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens processed (media tokens included).");
    tb_printf(&b, "omni_prompt_tokens_total %lld\n", (long long)m->prompt_tokens);
    metric(&b, "generated_tokens_total", "counter", "Tokens generated.");
    tb_printf(&b, "omni_generated_tokens_total %lld\n", (long long)m->completion_tokens);
    metric(&b, "requests_running", "gauge", "Requests being generated.");
    tb_printf(&b, "omni_requests_running %d\n", m->running);
    metric(&b, "requests_queued", "gauge", "Requests waiting for KV cache pages.");
    tb_printf(&b, "omni_requests_queued %d\n", m->queued);
    metric(&b, "connections_open", "gauge", "Open HTTP connections.");
    tb_printf(&b, "omni_connections_open %d\n", m->connections);
    metric(&b, "connections_closed_total", "counter", "Connections the server closed: a request too slow to "
           "arrive, or the oldest waiting one to make room past the connection limit.");
    tb_printf(&b, "omni_connections_closed_total{reason=\"slow\"} %lld\n", (long long)m->closed_slow);
    tb_printf(&b, "omni_connections_closed_total{reason=\"evicted\"} %lld\n", (long long)m->closed_evicted);
    metric(&b, "request_bytes_held", "gauge", "Bytes of request bodies (and their parsing) held in memory now.");
    tb_printf(&b, "omni_request_bytes_held %lld\n", (long long)m->held_bytes);
    metric(&b, "tokens_per_second", "gauge", "Generated tokens per second over the last 10 seconds.");
    tb_printf(&b, "omni_tokens_per_second %.3f\n", m->tokens_per_second);
    metric(&b, "kv_pages_used", "gauge", "KV cache pages in use, per cache format.");
    for (int i = 0; i < m->n_kv; i++)
        tb_printf(&b, "omni_kv_pages_used{format=\"%s\"} %lld\n", m->kv[i].name, (long long)m->kv[i].pages_used);
    metric(&b, "kv_pages_free", "gauge", "KV cache pages free, per cache format.");
    for (int i = 0; i < m->n_kv; i++)
        tb_printf(&b, "omni_kv_pages_free{format=\"%s\"} %lld\n", m->kv[i].name, (long long)m->kv[i].pages_free);
    metric(&b, "kv_bytes_used", "gauge", "Bytes of KV cache pages in use, per cache format.");
    for (int i = 0; i < m->n_kv; i++)
        tb_printf(&b, "omni_kv_bytes_used{format=\"%s\"} %lld\n", m->kv[i].name, (long long)m->kv[i].bytes_used);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- /tokenize's answer (written directly: a cJSON tree of a million tokens with pieces would take ~250 MB) ---- */

static void tb_add(textbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

/* A piece: a JSON string when it is valid UTF-8 without NUL, else its byte values. */
static void tb_piece(textbuf *b, const char *s, size_t n) {
    if (llm_utf8_valid_len(s, n) != n || memchr(s, 0, n)) {
        tb_add(b, "[", 1);
        for (size_t i = 0; i < n; i++) tb_printf(b, i ? ",%u" : "%u", (unsigned char)s[i]);
        tb_add(b, "]", 1);
        return;
    }
    tb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            tb_add(b, e, 2);
        } else if (c < 0x20) {
            tb_printf(b, "\\u%04x", c);
        } else {
            tb_add(b, s + i, 1);
        }
    }
    tb_add(b, "\"", 1);
}

char *srv_tokens_json(const llm_tokenizer *t, const int32_t *ids, int n, int with_pieces) {
    textbuf b = {0};
    tb_add(&b, "{\"tokens\":[", 11);
    for (int i = 0; i < n && !b.oom; i++) {
        if (!with_pieces) {
            tb_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
            continue;
        }
        size_t len = 0;
        const char *p = llm_tokenizer_token_bytes(t, ids[i], &len);
        tb_printf(&b, "%s{\"id\":%d,\"piece\":", i ? "," : "", (int)ids[i]);
        tb_piece(&b, p ? p : "", p ? len : 0);
        tb_add(&b, "}", 1);
    }
    tb_add(&b, "]}", 2);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- stop sequences ----------------------------------------------------------------------------------------- */

void srv_stopper_init(srv_stopper *s, const char *const *stop, int n_stop) {
    memset(s, 0, sizeof *s);
    s->stop = stop;
    s->n_stop = n_stop;
}

void srv_stopper_free(srv_stopper *s) {
    free(s->held);
    memset(s, 0, sizeof *s);
}

const char *srv_stopper_rest(const srv_stopper *s, size_t *len) {
    *len = s->matched ? 0 : s->n_held;
    return s->held ? s->held : "";
}

/* Longest k < |stop| such that buf ends with stop[0..k). */
static size_t partial_suffix(const char *buf, size_t n, const char *stop) {
    size_t sl = strlen(stop);
    for (size_t k = sl - 1 < n ? sl - 1 : n; k > 0; k--)
        if (!memcmp(buf + n - k, stop, k)) return k;
    return 0;
}

int srv_stopper_feed(srv_stopper *s, const char *text, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (s->matched) return 1;
    size_t n = s->n_held + len;
    if (n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < n + 1) cap *= 2;
        char *h = realloc(s->held, cap);
        if (!h) return -1;
        s->held = h;
        s->cap = cap;
    }
    memcpy(s->held + s->n_held, text, len);
    s->n_held = n;
    size_t cut = n, keep = 0; /* release [0, cut); keep the last `keep` bytes */
    for (int i = 0; i < s->n_stop; i++) { /* earliest full match over all stop sequences */
        size_t sl = strlen(s->stop[i]);
        for (size_t p = 0; p + sl <= n && p < cut; p++)
            if (!memcmp(s->held + p, s->stop[i], sl)) {
                cut = p;
                s->matched = 1;
                break;
            }
    }
    if (!s->matched)
        for (int i = 0; i < s->n_stop; i++) {
            size_t k = partial_suffix(s->held, n, s->stop[i]);
            if (k > keep) keep = k;
        }
    if (!s->matched) cut = n - keep;
    char *o = malloc(cut + 1);
    if (!o) return -1;
    memcpy(o, s->held, cut);
    o[cut] = 0;
    if (!s->matched) memmove(s->held, s->held + cut, keep);
    s->n_held = s->matched ? 0 : keep;
    *out = o;
    *out_len = cut;
    return s->matched;
}
