/* server.h - `omni serve`: an OpenAI-compatible HTTP server (libmicrohttpd, one thread per connection).
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics
 * (the same without the /v1 prefix too), llama-server's POST /tokenize, POST /detokenize and GET /props; OPTIONS
 * on any of them is a CORS preflight (204). Errors use the OpenAI error JSON with statuses 400 (bad JSON or
 * parameters), 401 (missing or wrong API key), 404 (unknown path or model), 405, 408 (request timeout, or a
 * request that arrives too slowly), 413 (body over the limit), 503 (queue full, too many request bodies held at
 * once, too many connections, shutting down).
 *
 * Slow and idle clients (one thread per connection): a request's head must arrive within head_timeout_s, its body
 * at body_min_rate, a connection that makes no progress either way is closed after idle_timeout_s, and past
 * max_connections the oldest connection still waiting for a request is closed first. A watchdog thread enforces
 * the first two by shutting the socket down.
 *
 * Generation is not done here: every request is handed to a backend (the batched engine in production, see
 * app/server/backend.h) that reports tokens and the end of each job through srv_job_token / srv_job_done, from
 * any thread. Streams interleave; a client that goes away (checked every 100 ms while waiting, and on every
 * write) gets its job cancelled at once; stop sequences are matched here and cancel the job too. */
#ifndef OMNI_SERVER_SERVER_H
#define OMNI_SERVER_SERVER_H

#include "app/server/request.h"
#include "app/server/response.h"

typedef struct srv_job srv_job;
typedef struct srv_server srv_server;

/* How a job ended, from the backend's view. */
typedef struct {
    srv_finish finish;              /* STOP (end of sequence) or LENGTH (max_tokens / context); NONE if cancelled */
    int failed;                     /* 1: err says why (the client gets err.status) */
    srv_error err;
    double prompt_ms, predicted_ms; /* prefill (incl. media encoding) and decode time */
} srv_job_end;

typedef struct {
    void *ctx;
    /* Queue a job for `req` (called on a connection thread). On success set *prompt_tokens (the prompt length
     * incl. media tokens) and later call srv_job_token for each generated token and srv_job_done exactly once
     * (srv_job_done may come from any thread, even before submit returns). On failure fill err (400 for bad
     * media or a prompt that does not fit, 503 when overloaded) and call nothing. */
    omni_status (*submit)(void *ctx, const srv_request *req, srv_job *job, int *prompt_tokens, srv_error *err);
    /* Ask for a job to stop early (client gone, stop sequence, timeout, shutdown); srv_job_done still follows.
     * May be called after srv_job_done; must then do nothing. */
    void (*cancel)(void *ctx, srv_job *job);
    /* Fill running, queued and the KV fields of *m (the server fills the rest). */
    void (*stats)(void *ctx, srv_metrics *m);
} srv_backend;

/* For the backend: one value of its own per job (its request handle). */
void srv_job_set_backend_data(srv_job *j, void *data);
void *srv_job_backend_data(const srv_job *j);
/* One generated token and its text (len may be 0 while a UTF-8 character is incomplete). */
void srv_job_token(srv_job *j, const char *text, size_t len);
/* Text that belongs to no new token (e.g. held-back bytes released at the end). */
void srv_job_text(srv_job *j, const char *text, size_t len);
/* The end of the job; the backend must not touch `j` afterwards. */
void srv_job_done(srv_job *j, const srv_job_end *end);

typedef struct {
    const char *host;         /* bind address; default 127.0.0.1 */
    int port;                 /* default 8080; 0 = any free port (see srv_port) */
    const char *api_key;      /* NULL: no authentication; else "Authorization: Bearer KEY" on all but /health and
                               * CORS preflights (OPTIONS) */
    const char *model_id;     /* the name in /v1/models and in responses */
    const char *model_alias;  /* another accepted "model" value (NULL: none) */
    srv_parse_limits parse;   /* max_tokens, allow_files, max media, sampling defaults (model names are set here) */
    const llm_tokenizer *tok; /* for /tokenize and /detokenize (NULL: those answer 404) */
    srv_props props;          /* GET /props: n_ctx, total_slots, vision, audio, build (the rest is filled here) */
    const char *cors_origin;  /* Access-Control-Allow-Origin on every answer; default "*" (NULL or "": no CORS) */
    size_t max_body;          /* bytes; default 64 MiB */
    size_t max_held;          /* bytes of request bodies (and their parsing) held at once, all connections
                               * together; over it a request gets 503 server_busy. 0: 4 * max_body + 128 MiB */
    double timeout_s;         /* per request, from arrival to the last byte; default 600 */
    double head_timeout_s;    /* a request's line and headers must arrive within this, counted from the connection's
                               * start or the end of the previous answer (so also the keep-alive idle limit);
                               * default 30 */
    double body_min_rate;     /* bytes/s: a body must arrive within head_timeout_s + size / rate; default 16384 */
    double idle_timeout_s;    /* a connection with no progress either way (e.g. a client that does not read its
                               * answer) is closed after this; default 30 */
    int max_queue;            /* requests waiting for KV pages before new ones get 503; default 64 */
    int max_connections;      /* default 256: past it the oldest connection still waiting for a request is closed,
                               * or, when none is, the new request gets 503 */
} srv_params;

srv_params srv_default_params(void);

/* Bind and start serving (threads of its own). The backend must outlive the server. */
omni_status srv_start(const srv_params *p, const srv_backend *backend, srv_server **out);
int srv_port(const srv_server *s); /* the bound port (useful with port 0) */
/* Stop accepting connections, cancel the jobs in flight and let their connections answer (503, or a stream's
 * error event and [DONE]; at most 10 s), close the connections, wait for the backend to end every job it was
 * given (srv_job_done; at most 60 s), free. The backend must keep running until this returns. NULL is a no-op. */
void srv_stop(srv_server *s);

#endif
