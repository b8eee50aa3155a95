/* request.h - the body of an OpenAI-style request (POST /v1/chat/completions or /v1/completions) -> a validated
 * request, or an error carrying the HTTP status and the OpenAI error fields.
 *
 * Pure: no model, no file or network access (a local image path is only recorded, and only when allowed), no
 * global state, thread-safe. This is the function the fuzz target drives with arbitrary bytes.
 *
 * Chat messages become the prompt text through the official chat template (llm/prompt.h): text parts as they
 * are, each image_url part one <|vision_start|><|image_pad|><|vision_end|>, each input_audio part one
 * <|audio_start|><|audio_pad|><|audio_end|>, in the order given; media are collected in the same order.
 * Accepted content parts:
 *   {"type":"text","text":"..."}
 *   {"type":"image_url","image_url":{"url":"data:image/png;base64,..."}}   (or "url" as a plain string;
 *        a local path "/x.png" or "file:///x.png" only with allow_files; http(s) URLs are refused)
 *   {"type":"input_audio","input_audio":{"data":"<base64>","format":"wav"|"mp3"|"flac"|...}}
 * The body must be UTF-8 (JSON is) without NUL characters (a 0 byte or \u0000: cJSON would end the string there).
 * Sampling fields: temperature [0, 2], top_p (0, 1], top_k >= -1 (0 and -1: no limit), seed, max_tokens /
 * max_completion_tokens (1..limit), stop (a string or up to 4), stream, stream_options.include_usage; n must be 1;
 * unsupported features (tools, logprobs, penalties, min_p, best_of, ignore_eos, logit_bias, guided decoding, audio
 * output, response_format other than text) are refused, never ignored, unless they ask for the default. */
#ifndef OMNI_SERVER_REQUEST_H
#define OMNI_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_LEN 256

typedef enum { SRV_EP_CHAT = 0, SRV_EP_COMPLETIONS } srv_endpoint;
typedef enum { SRV_MEDIA_IMAGE = 0, SRV_MEDIA_AUDIO } srv_media_kind;

typedef struct {
    srv_media_kind kind;
    uint8_t *data;  /* decoded bytes (owned); NULL when path is set */
    size_t size;
    char *path;     /* local image file (allow_files only), owned; NULL otherwise */
    char format[16];/* audio: the declared format ("wav"); image: the data URL subtype ("png") or "" */
} srv_media;

/* An error as the client sees it: {"error":{"message","type","param","code"}} with HTTP `status`. */
typedef struct {
    int status;       /* 400, 401, 404, 405, 408, 413, 500, 503 */
    const char *type; /* "invalid_request_error", "authentication_error", "not_found_error", "server_error" */
    const char *code; /* NULL or a short code: "model_not_found", "invalid_api_key", "request_too_large" ... */
    char param[96];   /* the offending field ("messages[1].content[0].image_url.url"), "" when none */
    char message[512];
} srv_error;

typedef struct {
    const char *const *model_names; /* accepted values of "model" (a missing "model" is accepted) */
    int n_model_names;              /* 0: any value */
    int max_tokens;                 /* cap of max_tokens, and the value when a request gives none */
    int allow_files;                /* image_url may name a local file */
    int max_media;                  /* most images + audio clips in one request */
    float temperature, top_p;       /* defaults for requests that give none */
    int top_k;
} srv_parse_limits;

typedef struct {
    srv_endpoint endpoint;
    char *prompt;         /* chat: the rendered template incl. the generation prompt; completions: the raw prompt */
    srv_media *media;     /* [n_media] in prompt order */
    int n_media, n_images, n_audios;
    float temperature, top_p;
    int top_k;
    uint64_t seed;
    int seed_set;
    int max_tokens;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int stream, include_usage;
} srv_request;

/* max_tokens 2048, no local files, 16 media, Qwen3-VL Instruct sampling (temperature 0.7, top_p 0.8, top_k 20),
 * any model name. */
srv_parse_limits srv_parse_default_limits(void);

/* Parse and validate `len` bytes (not NUL-terminated). OMNI_OK and *out filled (free with srv_request_free), or
 * OMNI_ERR_USAGE with *err filled (out left empty); OMNI_ERR_NOMEM (err: 500) on allocation failure. */
omni_status srv_request_parse(const char *body, size_t len, srv_endpoint ep, const srv_parse_limits *lim,
                              srv_request *out, srv_error *err);
void srv_request_free(srv_request *r); /* NULL and an empty request are no-ops */

/* Fill an error (printf-style message); returns OMNI_ERR_USAGE so that `return srv_error_set(...)` works. */
omni_status srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *param,
                          const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

/* ---- the shape of a JSON text, before parsing it ---------------------------------------------------------- */

#define SRV_MAX_JSON_VALUES (1 << 20) /* most values in one body: cJSON spends ~64 bytes on each */
#define SRV_MAX_JSON_DEPTH 64         /* deepest nesting of arrays and objects (a request needs 5) */

typedef struct {
    size_t values; /* an upper bound of the values (1 + commas + '[' + '{' outside strings) */
    int depth;     /* the deepest nesting of arrays and objects */
    size_t ctrl;   /* offset of the first control character (< 0x20) inside a string, which JSON forbids (cJSON
                    * takes it); the length when none */
} srv_json_shape;

/* One pass over `len` bytes, strings skipped (escapes honoured): what parsing them would build. A body of
 * "[0,0,0,..." holds a value per 2 bytes (64 MiB -> 33M values, ~2.5 GB as cJSON nodes), so srv_request_parse
 * refuses a body over SRV_MAX_JSON_VALUES or SRV_MAX_JSON_DEPTH before parsing it, and the server reserves the
 * parse's memory from this bound. */
srv_json_shape srv_json_measure(const char *s, size_t len);

/* Host memory parsing a body of `len` bytes with this shape may take (cJSON nodes, their strings, the copies
 * the request keeps: decoded media, the rendered prompt). */
size_t srv_json_parse_bytes(const srv_json_shape *sh, size_t len);

/* ---- /tokenize and /detokenize (llama-server's shapes) ------------------------------------------------------ */

/* POST /tokenize {"content": "text", "add_special": bool, "parse_special": bool (default true),
 * "with_pieces": bool}: *text (malloc'ed, NUL-terminated, *text_len bytes). add_special adds nothing here (these
 * tokenizers have no BOS). Errors as srv_request_parse (400 with param). */
typedef struct {
    char *text;
    size_t text_len;
    int parse_special, with_pieces;
} srv_tokenize_req;
omni_status srv_tokenize_parse(const char *body, size_t len, srv_tokenize_req *out, srv_error *err);
void srv_tokenize_req_free(srv_tokenize_req *r); /* NULL and an empty one are no-ops */

/* POST /detokenize {"tokens": [ids]}: ids in [0, vocab) -> *ids (malloc'ed; non-NULL even when *n is 0). */
omni_status srv_detokenize_parse(const char *body, size_t len, int vocab, int32_t **ids, int *n, srv_error *err);

/* Standard base64 (RFC 4648, '=' padding optional, CR/LF ignored) -> malloc'ed bytes. -1 on any other byte, a
 * misplaced '=' or a dangling 6-bit group; -2 on allocation failure. */
int srv_base64_decode(const char *s, size_t len, uint8_t **out, size_t *out_len);

#endif
