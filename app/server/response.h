/* response.h - what the server writes back: OpenAI response and chunk JSON, server-sent-event framing, the error
 * JSON, the model list, the Prometheus metrics text, and the stop-sequence matcher. Pure functions of their
 * arguments (no I/O, no global state), each returning a malloc'ed NUL-terminated string (NULL when out of memory). */
#ifndef OMNI_SERVER_RESPONSE_H
#define OMNI_SERVER_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "app/server/request.h"
#include "llm/tokenizer.h"

typedef enum { SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH } srv_finish;

/* Identity of one response (shared by all chunks of a stream). */
typedef struct {
    srv_endpoint endpoint;
    char id[48];       /* "chatcmpl-..." or "cmpl-..." */
    long long created; /* unix seconds */
    const char *model;
} srv_resp_meta;

typedef struct {
    int prompt_tokens, completion_tokens;
    double prompt_ms, predicted_ms; /* llama-server's `timings` (prefill incl. media, decode) */
} srv_usage;

/* {"error":{"message":..,"type":..,"param":..,"code":..}} */
char *srv_error_json(const srv_error *e);

/* The whole non-streamed response: chat.completion (message.content = text) or text_completion. */
char *srv_completion_json(const srv_resp_meta *m, const char *text, size_t len, srv_finish finish,
                          const srv_usage *u);

/* One SSE event "data: {...}\n\n" of a stream: a chat.completion.chunk / text_completion chunk with `text` as the
 * delta (role "assistant" when first != 0), or with finish_reason and an empty delta when finish != NONE. */
char *srv_chunk_sse(const srv_resp_meta *m, const char *text, size_t len, int first, srv_finish finish);
/* The usage chunk of stream_options.include_usage (choices: []). */
char *srv_usage_sse(const srv_resp_meta *m, const srv_usage *u);
/* An error inside a stream that already answered 200: "data: {"error":{...}}\n\n". */
char *srv_error_sse(const srv_error *e);
#define SRV_SSE_DONE "data: [DONE]\n\n"

/* GET /v1/models: {"object":"list","data":[{"id":..,"object":"model","created":..,"owned_by":"omni"}]}. */
char *srv_models_json(const char *model, long long created);

/* ---- /tokenize, /detokenize, /props (llama-server's shapes) ------------------------------------------------------ */

/* {"tokens": [ids]}, or with pieces {"tokens": [{"id": 9707, "piece": "Hello"}, ...]} where a piece that is not
 * valid UTF-8 alone (part of a character) is its byte values [229, 165]. */
char *srv_tokens_json(const llm_tokenizer *t, const int32_t *ids, int n, int with_pieces);
/* {"content": text} (len bytes; invalid UTF-8 becomes U+FFFD). */
char *srv_content_json(const char *text, size_t len);

/* GET /props: what llama-server's web UI and clients read (the context, slots, modalities, defaults). */
typedef struct {
    const char *model;        /* the served name (model_path: no file paths are given out) */
    const char *build;        /* "omni 0.7" */
    int n_ctx, total_slots;   /* tokens per request (-c), sequences generated at once */
    int vision, audio;        /* the model takes images / audio */
    float temperature, top_p; /* the defaults of requests that give none */
    int top_k, max_tokens;
} srv_props;
char *srv_props_json(const srv_props *p);

/* ---- metrics ---------------------------------------------------------------------------------------------- */

#define SRV_MAX_KV_FORMATS 4

typedef struct {
    char name[32];         /* "int2", "bf16", ... */
    int64_t pages_used, pages_free, bytes_used;
} srv_kv_stats;

typedef struct {
    int64_t requests_ok, requests_error, requests_cancelled; /* finished requests by outcome */
    int64_t http_by_status[6]; /* responses with status 200, 400, 401, 404, 413, 503 */
    int64_t http_other;        /* any other status */
    int64_t prompt_tokens, completion_tokens;
    int running, queued;       /* engine requests now running / waiting for KV pages */
    int connections;           /* open HTTP connections */
    int64_t held_bytes;        /* bytes of request bodies (and their parsing) held now */
    int64_t closed_slow, closed_evicted; /* connections closed: request too slow / to make room */
    double tokens_per_second;  /* generated tokens per second over the last seconds */
    int n_kv;
    srv_kv_stats kv[SRV_MAX_KV_FORMATS];
} srv_metrics;

/* Prometheus text exposition format (version 0.0.4), names prefixed "omni_". */
char *srv_metrics_text(const srv_metrics *m);

/* ---- stop sequences ---------------------------------------------------------------------------------------- */

/* Streams generated text through the stop sequences: text that cannot be the start of a stop sequence is released
 * at once, a possible start is held back until it is decided; at a match, everything before it is released and
 * the rest is dropped. Stop sequences must be valid UTF-8 for releases to fall on character boundaries. */
typedef struct {
    const char *const *stop; /* borrowed */
    int n_stop;
    char *held;
    size_t n_held, cap;
    int matched;
} srv_stopper;

void srv_stopper_init(srv_stopper *s, const char *const *stop, int n_stop);
/* Feed a piece; *out (malloc'ed, may be empty) receives the released text, *out_len its length. Returns 1 when a
 * stop sequence matched (then nothing more may be fed), 0 otherwise, -1 out of memory. */
int srv_stopper_feed(srv_stopper *s, const char *text, size_t len, char **out, size_t *out_len);
/* At the end (no match): the held-back text. */
const char *srv_stopper_rest(const srv_stopper *s, size_t *len);
void srv_stopper_free(srv_stopper *s);

#endif
