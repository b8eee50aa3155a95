/* http.c - the HTTP layer of `omni serve` on libmicrohttpd (see server.h): routing, API key, body limit, jobs
 * handed to the backend, streamed (SSE) or whole responses, disconnect and timeout handling, metrics counters.
 *
 * Threads: libmicrohttpd runs one thread per connection; a connection thread parses the request, submits the
 * job and then waits on the job's condition variable for what the backend's thread (srv_job_token/srv_job_done)
 * produces. A job has two owners (the connection and the backend) and is freed by the last one. */
#define _GNU_SOURCE
#include "app/server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 100   /* how often a waiting connection checks its client and its deadline */
#define DRAIN_S 10          /* at shutdown, how long the requests in flight get to send their last bytes */
#define TPS_WINDOW 10       /* seconds of the tokens/s gauge */

typedef struct {
    char *s;
    size_t n, cap;
} buf;

static int buf_add(buf *b, const char *t, size_t len) {
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) return -1;
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, len);
    b->n += len;
    b->s[b->n] = 0;
    return 0;
}

/* Append a malloc'ed string and free it; -1 if it is NULL (allocation failed upstream) or on OOM. */
static int buf_take(buf *b, char *s) {
    int rc = s ? buf_add(b, s, strlen(s)) : -1;
    free(s);
    return rc;
}

struct srv_server {
    srv_params p;
    srv_backend be;
    struct MHD_Daemon *d;
    int port;
    const char *names[2];
    volatile int stopping;
    pthread_mutex_t mu; /* counters below */
    pthread_cond_t jobs_cv;
    int live_jobs;      /* jobs not yet freed (srv_stop waits for the backend to end them all) */
    int in_flight;      /* HTTP requests begun and not completed (srv_stop lets them finish their answers) */
    srv_metrics m;
    int64_t tps_sec[TPS_WINDOW], tps_n[TPS_WINDOW];
    long long next_id;
};

struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    srv_server *srv;
    void *backend_data;
    srv_resp_meta meta;
    char model[256];
    int stream, include_usage;
    char *stops[SRV_MAX_STOP];
    srv_stopper stopper;
    buf out;            /* stream: SSE bytes; otherwise the answer text */
    size_t sent;        /* stream: bytes handed to the connection */
    int first_sent, tail_done;
    int counted;        /* count_end ran: a request is counted once */
    int prompt_tokens, n_tokens;
    int finished;       /* the answer is complete (engine end, stop sequence, timeout, failure) */
    int engine_done;
    int want_cancel;    /* a stop sequence matched: the connection thread cancels the backend job */
    int cancelled;      /* cancel was sent to the backend */
    srv_finish finish;
    int failed;
    srv_error err;
    double prompt_ms, predicted_ms, deadline_ms, t_start;
    double t_first, t_last; /* arrival of the first and the last token (timings of an answer cut by a stop) */
    int fd;             /* the client's socket, to notice a disconnect */
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- counters ------------------------------------------------------------------------------------------------ */

static void count_status(srv_server *s, int status) {
    static const int codes[6] = {200, 400, 401, 404, 413, 503};
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < 6 && codes[i] != status) i++;
    if (i < 6) s->m.http_by_status[i]++;
    else s->m.http_other++;
    pthread_mutex_unlock(&s->mu);
}

static void count_token(srv_server *s) {
    int64_t sec = (int64_t)(now_ms() / 1e3);
    pthread_mutex_lock(&s->mu);
    int i = (int)(sec % TPS_WINDOW);
    if (s->tps_sec[i] != sec) {
        s->tps_sec[i] = sec;
        s->tps_n[i] = 0;
    }
    s->tps_n[i]++;
    s->m.completion_tokens++;
    pthread_mutex_unlock(&s->mu);
}

/* A finished job: counters and one log line (llama-server prints one per request too); once per job. */
static void count_end(srv_server *s, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->counted) {
        pthread_mutex_unlock(&j->mu);
        return;
    }
    j->counted = 1;
    int failed = j->failed, cancelled = j->cancelled && j->finish == SRV_FINISH_NONE;
    int np = j->prompt_tokens, ng = j->n_tokens;
    double ms = now_ms() - j->t_start;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->mu);
    if (failed) s->m.requests_error++;
    else if (cancelled) s->m.requests_cancelled++;
    else s->m.requests_ok++;
    pthread_mutex_unlock(&s->mu);
    omni_log(1, "serve: %s %s: %d prompt + %d generated tokens, %.1f ms%s\n", j->meta.id,
             failed ? "failed" : cancelled ? "cancelled" : "done", np, ng, ms, j->stream ? " (stream)" : "");
}

static char *metrics_now(srv_server *s) {
    srv_metrics m;
    memset(&m, 0, sizeof m);
    if (s->be.stats) s->be.stats(s->be.ctx, &m);
    int64_t sec = (int64_t)(now_ms() / 1e3), n = 0;
    pthread_mutex_lock(&s->mu);
    srv_metrics c = s->m;
    for (int i = 0; i < TPS_WINDOW; i++)
        if (s->tps_sec[i] > sec - TPS_WINDOW && s->tps_sec[i] <= sec) n += s->tps_n[i];
    pthread_mutex_unlock(&s->mu);
    c.running = m.running;
    c.queued = m.queued;
    c.n_kv = m.n_kv;
    memcpy(c.kv, m.kv, sizeof c.kv);
    c.tokens_per_second = (double)n / TPS_WINDOW;
    return srv_metrics_text(&c);
}

/* ---- jobs (called by the backend) ------------------------------------------------------------------------------ */

void srv_job_set_backend_data(srv_job *j, void *data) { j->backend_data = data; }
void *srv_job_backend_data(const srv_job *j) { return j->backend_data; }

static void job_unref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    srv_server *s = j->srv;
    srv_stopper_free(&j->stopper);
    for (int i = 0; i < SRV_MAX_STOP; i++) free(j->stops[i]);
    free(j->out.s);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
    pthread_mutex_lock(&s->mu);
    if (--s->live_jobs == 0) pthread_cond_broadcast(&s->jobs_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Released answer text -> the job's output (an SSE chunk when streaming). Caller holds j->mu. */
static int emit_text(srv_job *j, const char *text, size_t len) {
    if (!len) return 0;
    if (!j->stream) return buf_add(&j->out, text, len);
    int rc = buf_take(&j->out, srv_chunk_sse(&j->meta, text, len, !j->first_sent, SRV_FINISH_NONE));
    j->first_sent = 1;
    return rc;
}

static void job_fail_locked(srv_job *j, int status, const char *type, const char *msg) {
    if (j->finished) return;
    srv_error_set(&j->err, status, type, NULL, NULL, "%s", msg);
    j->failed = j->finished = 1;
}

static void job_text(srv_job *j, const char *text, size_t len, int is_token) {
    pthread_mutex_lock(&j->mu);
    if (!j->finished) {
        j->n_tokens += is_token;
        if (is_token) j->t_last = now_ms();
        if (is_token && !j->t_first) j->t_first = j->t_last;
        char *out = NULL;
        size_t n = 0;
        int rc = srv_stopper_feed(&j->stopper, text, len, &out, &n);
        if (rc < 0 || emit_text(j, out, n)) {
            job_fail_locked(j, 500, "server_error", "out of memory");
            j->want_cancel = 1;
        } else if (rc == 1) {
            j->finish = SRV_FINISH_STOP;
            j->finished = j->want_cancel = 1;
        }
        free(out);
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
}

void srv_job_token(srv_job *j, const char *text, size_t len) {
    job_text(j, text, len, 1);
    count_token(j->srv);
}

void srv_job_text(srv_job *j, const char *text, size_t len) { job_text(j, text, len, 0); }

void srv_job_done(srv_job *j, const srv_job_end *end) {
    pthread_mutex_lock(&j->mu);
    j->engine_done = 1;
    j->prompt_ms = end->prompt_ms;
    j->predicted_ms = end->predicted_ms;
    if (!j->finished) {
        if (end->failed) {
            j->err = end->err;
            j->failed = 1;
        } else {
            size_t n;
            const char *rest = srv_stopper_rest(&j->stopper, &n);
            if (emit_text(j, rest, n)) job_fail_locked(j, 500, "server_error", "out of memory");
            j->finish = end->finish;
        }
        j->finished = 1;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}

/* ---- waiting for a job ------------------------------------------------------------------------------------------ */

/* 1 when the client closed its end (or the socket failed). */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void cancel_job(srv_job *j) {
    srv_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    int send = !j->cancelled && !j->engine_done;
    j->cancelled = 1;
    j->want_cancel = 0;
    pthread_mutex_unlock(&j->mu);
    if (send) s->be.cancel(s->be.ctx, j);
}

typedef enum { WAIT_PROGRESS, WAIT_GONE } wait_result;

/* Wait (j->mu held) until `ready(j)` or the client leaves; handles stop-sequence cancels, the deadline and
 * shutdown (checked on every call, so that a stream whose tokens keep coming is still held to them; a client that
 * left is noticed by polling its socket while nothing is ready, and by the failed write otherwise). Returns with
 * j->mu held. */
static wait_result wait_job(srv_job *j, int (*ready)(const srv_job *)) {
    for (;;) {
        if (j->want_cancel) { /* a stop sequence matched (the answer may be complete): the engine must not go on */
            pthread_mutex_unlock(&j->mu);
            cancel_job(j);
            pthread_mutex_lock(&j->mu);
            continue;
        }
        int late = now_ms() > j->deadline_ms, stop = j->srv->stopping;
        if (!j->finished && (late || stop)) {
            pthread_mutex_unlock(&j->mu);
            cancel_job(j);
            pthread_mutex_lock(&j->mu);
            if (late) job_fail_locked(j, 408, "timeout_error", "the request took longer than the server's timeout");
            else job_fail_locked(j, 503, "server_error", "the server is shutting down");
            continue;
        }
        if (ready(j)) return WAIT_PROGRESS;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (ready(j) || j->want_cancel || !client_gone(j->fd)) continue;
        pthread_mutex_unlock(&j->mu);
        cancel_job(j);
        pthread_mutex_lock(&j->mu);
        return WAIT_GONE;
    }
}

static int is_finished(const srv_job *j) { return j->finished; }
static int has_output(const srv_job *j) { return j->finished || j->out.n > j->sent; }

/* ---- responses -------------------------------------------------------------------------------------------------- */

/* Queue `body` (malloc'ed, taken; NULL: allocation failed upstream -> 500); `allow`: a 405's Allow header. */
static enum MHD_Result respond(srv_server *s, struct MHD_Connection *c, int status, const char *ctype, char *body,
                               const char *allow) {
    if (!body) { /* allocation failed while building it */
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        if (!body) return MHD_NO;
        ctype = "application/json";
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 405 && allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(s, status);
    return rc;
}

static enum MHD_Result send_text(srv_server *s, struct MHD_Connection *c, int status, const char *ctype, char *body) {
    return respond(s, c, status, ctype, body, NULL);
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *c, const srv_error *e) {
    return send_text(s, c, e->status, "application/json", srv_error_json(e));
}

/* Usage and timings: the engine's, or, for an answer that ended before the engine did (a stop sequence), the
 * server's own clock (prefill = arrival to the first token, incl. media encoding and any wait for KV memory). */
static srv_usage job_usage(const srv_job *j) {
    if (j->engine_done || !j->t_first) return (srv_usage){j->prompt_tokens, j->n_tokens, j->prompt_ms, j->predicted_ms};
    return (srv_usage){j->prompt_tokens, j->n_tokens, j->t_first - j->t_start, j->t_last - j->t_first};
}

/* The end of a stream: the final chunk (+ usage), or an error event, then [DONE]. Caller holds j->mu. */
static int stream_tail(srv_job *j) {
    int rc = 0;
    if (j->failed) {
        rc = buf_take(&j->out, srv_error_sse(&j->err));
    } else {
        srv_usage u = job_usage(j);
        srv_finish f = j->finish ? j->finish : SRV_FINISH_STOP;
        rc = buf_take(&j->out, srv_chunk_sse(&j->meta, "", 0, !j->first_sent, f));
        if (!rc && j->include_usage) rc = buf_take(&j->out, srv_usage_sse(&j->meta, &u));
    }
    if (!rc) rc = buf_add(&j->out, SRV_SSE_DONE, strlen(SRV_SSE_DONE));
    j->tail_done = 1;
    return rc;
}

/* Copies the next SSE bytes to the connection. The request is counted in /metrics as soon as its tail is queued,
   before the client can read [DONE], so that a client never sees its answer end before the counters do. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    srv_job *j = cls;
    (void)pos;
    pthread_mutex_lock(&j->mu);
    ssize_t rc;
    int tail_now = 0;
    for (;;) {
        if (wait_job(j, has_output) == WAIT_GONE) {
            rc = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (j->out.n > j->sent) {
            size_t n = j->out.n - j->sent < max ? j->out.n - j->sent : max;
            memcpy(out, j->out.s + j->sent, n);
            j->sent += n;
            rc = (ssize_t)n;
            break;
        }
        if (j->tail_done) { /* everything sent */
            rc = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (stream_tail(j)) { /* out of memory: nothing sensible can follow */
            rc = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        tail_now = 1;
    }
    pthread_mutex_unlock(&j->mu);
    if (tail_now) count_end(j->srv, j);
    return rc;
}

/* The response of a stream is gone (sent, or the client left): cancel whatever still runs, drop our ref. */
static void stream_free(void *cls) {
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    int running = !j->engine_done;
    pthread_mutex_unlock(&j->mu);
    if (running) cancel_job(j);
    count_end(j->srv, j); /* a client that left before the tail: counted here */
    job_unref(j);
}

static enum MHD_Result send_stream(srv_server *s, struct MHD_Connection *c, srv_job *j) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
    if (!r) {
        stream_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    count_status(s, 200);
    return rc;
}

/* Wait for the whole answer and send it as one JSON object (or the job's error). */
static enum MHD_Result send_whole(srv_server *s, struct MHD_Connection *c, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    wait_result w = wait_job(j, is_finished);
    char *body = NULL;
    srv_error err;
    int failed = j->failed;
    if (w == WAIT_PROGRESS && failed) err = j->err;
    if (w == WAIT_PROGRESS && !failed) {
        srv_usage u = job_usage(j);
        body = srv_completion_json(&j->meta, j->out.s ? j->out.s : "", j->out.n, j->finish ? j->finish :
                                   SRV_FINISH_STOP, &u);
    }
    pthread_mutex_unlock(&j->mu);
    count_end(s, j);
    job_unref(j);
    if (w == WAIT_GONE) return MHD_NO; /* the client left: close */
    if (failed) return send_error(s, c, &err);
    return send_text(s, c, 200, "application/json", body);
}

/* ---- generation endpoints ------------------------------------------------------------------------------------------ */

static srv_job *job_new(srv_server *s, const srv_request *req, int fd) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 2; /* the connection and the backend */
    j->srv = s;
    pthread_mutex_lock(&s->mu);
    s->live_jobs++;
    pthread_mutex_unlock(&s->mu);
    j->fd = fd;
    j->stream = req->stream;
    j->include_usage = req->include_usage;
    for (int i = 0; i < req->n_stop; i++)
        if (!(j->stops[i] = strdup(req->stop[i]))) {
            j->refs = 1;
            job_unref(j);
            return NULL;
        }
    srv_stopper_init(&j->stopper, (const char *const *)j->stops, req->n_stop);
    snprintf(j->model, sizeof j->model, "%s", s->p.model_id);
    pthread_mutex_lock(&s->mu);
    long long id = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    j->meta = (srv_resp_meta){req->endpoint, "", (long long)time(NULL), j->model};
    snprintf(j->meta.id, sizeof j->meta.id, "%s-%lld%06lld", req->endpoint == SRV_EP_CHAT ? "chatcmpl" : "cmpl",
             (long long)time(NULL), id);
    j->t_start = now_ms();
    j->deadline_ms = j->t_start + s->p.timeout_s * 1e3;
    return j;
}

static enum MHD_Result generate(srv_server *s, struct MHD_Connection *c, srv_endpoint ep, const char *body,
                                size_t len) {
    srv_request req;
    srv_error err;
    if (srv_request_parse(body, len, ep, &s->p.parse, &req, &err)) return send_error(s, c, &err);
    srv_metrics m;
    memset(&m, 0, sizeof m);
    if (s->be.stats) s->be.stats(s->be.ctx, &m);
    if (s->stopping || m.queued >= s->p.max_queue) {
        srv_request_free(&req);
        srv_error_set(&err, 503, "server_error", "overloaded", NULL, s->stopping ? "the server is shutting down" :
                      "the server is overloaded (%d requests waiting); retry later", m.queued);
        return send_error(s, c, &err);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_job *j = job_new(s, &req, ci ? ci->connect_fd : -1);
    if (!j) {
        srv_request_free(&req);
        srv_error_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        return send_error(s, c, &err);
    }
    int prompt_tokens = 0;
    omni_status st = s->be.submit(s->be.ctx, &req, j, &prompt_tokens, &err);
    srv_request_free(&req);
    if (st) {
        j->refs = 1; /* the backend keeps no reference on failure */
        job_unref(j);
        return send_error(s, c, &err);
    }
    pthread_mutex_lock(&j->mu);
    j->prompt_tokens = prompt_tokens;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->mu);
    s->m.prompt_tokens += prompt_tokens;
    pthread_mutex_unlock(&s->mu);
    return j->stream ? send_stream(s, c, j) : send_whole(s, c, j);
}

/* ---- routing -------------------------------------------------------------------------------------------------------- */

typedef enum { R_NONE = 0, R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETIONS } route;

/* Per-request state kept between the calls of the access handler. */
typedef struct {
    route r;
    int error;          /* an error decided before the body was read (sent once the body is consumed) */
    srv_error err;
    const char *allow;  /* the methods of a known path asked with another (405) */
    buf body;
    size_t seen;        /* body bytes received (kept or not) */
} conn_state;

/* The route of (url, method); R_NONE with *allow set when the path exists but takes other methods. */
static route find_route(const char *url, const char *method, const char **allow) {
    static const struct { const char *path; route r; int post; } t[] = {
        {"/health", R_HEALTH, 0},      {"/v1/health", R_HEALTH, 0}, {"/v1/models", R_MODELS, 0},
        {"/models", R_MODELS, 0},      {"/metrics", R_METRICS, 0},  {"/v1/chat/completions", R_CHAT, 1},
        {"/chat/completions", R_CHAT, 1}, {"/v1/completions", R_COMPLETIONS, 1}, {"/completions", R_COMPLETIONS, 1},
    };
    *allow = NULL;
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        if (strcmp(url, t[i].path)) continue;
        int is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if ((t[i].post && is_post) || (!t[i].post && is_get)) return t[i].r;
        *allow = t[i].post ? "POST" : "GET, HEAD";
        return R_NONE;
    }
    return R_NONE;
}

/* Constant-time comparison of the bearer token with the key. */
static int key_ok(const srv_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key || !s->p.api_key[0]) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    size_t a = strlen(h), b = strlen(s->p.api_key);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)(h[i] ^ s->p.api_key[i % (b ? b : 1)]);
    return diff == 0;
}

/* First call of a request: route, authenticate, check the declared size. */
static void admit(srv_server *s, struct MHD_Connection *c, const char *url, const char *method, conn_state *cs) {
    cs->r = find_route(url, method, &cs->allow);
    if (cs->r == R_NONE) {
        cs->error = 1;
        if (cs->allow) srv_error_set(&cs->err, 405, "invalid_request_error", "method_not_allowed", NULL,
                                      "%s is not allowed on %.200s", method, url);
        else srv_error_set(&cs->err, 404, "not_found_error", "not_found", NULL, "no such endpoint: %s %.200s",
                           method, url);
        return;
    }
    if (cs->r != R_HEALTH && !key_ok(s, c)) {
        cs->error = 1;
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        srv_error_set(&cs->err, 401, "invalid_request_error", "invalid_api_key", NULL, h ?
                      "Incorrect API key provided" : "Missing API key: send \"Authorization: Bearer <key>\"");
        return;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->p.max_body) {
        cs->error = 1;
        srv_error_set(&cs->err, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body (%s bytes) is over this server's limit of %zu bytes", cl, s->p.max_body);
    }
}

/* Body bytes past which a refused body is no longer read: the connection is closed. */
static size_t body_cap(const srv_server *s) { return 4 * s->p.max_body + (1u << 20); }

/* A request refused before its body (401, 404, 405, 413 by its Content-Length) is answered at once, without
 * reading the body, when the client waits for "100 Continue" before sending it (curl does for bodies over 1 MiB;
 * it would otherwise send it all) or when the declared body is past body_cap (it would be closed unanswered). */
static int refuse_now(const srv_server *s, struct MHD_Connection *c) {
    const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (ex && strcasestr(ex, "100-continue")) || (cl && strtoull(cl, NULL, 10) > body_cap(s));
}

/* Body bytes: kept up to the limit, then only counted (413 at the end); a body far over the limit closes the
 * connection, and so does a body still arriving at shutdown. Returns 0 to go on, -1 to close. */
static int take_body(srv_server *s, conn_state *cs, const char *data, size_t n) {
    cs->seen += n;
    if (cs->seen > body_cap(s) || s->stopping) return -1;
    if (cs->error) return 0;
    if (cs->seen > s->p.max_body) {
        cs->error = 1;
        srv_error_set(&cs->err, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body is over this server's limit of %zu bytes", s->p.max_body);
        free(cs->body.s);
        cs->body = (buf){0};
        return 0;
    }
    if (buf_add(&cs->body, data, n)) {
        cs->error = 1;
        srv_error_set(&cs->err, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

/* An error decided before the body (admit, take_body). */
static enum MHD_Result send_refusal(srv_server *s, struct MHD_Connection *c, const conn_state *cs) {
    return respond(s, c, cs->err.status, "application/json", srv_error_json(&cs->err), cs->allow);
}

static enum MHD_Result dispatch(srv_server *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->error) return send_refusal(s, c, cs);
    switch (cs->r) {
    case R_HEALTH:
        return send_text(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    case R_MODELS:
        return send_text(s, c, 200, "application/json", srv_models_json(s->p.model_id, (long long)time(NULL)));
    case R_METRICS:
        return send_text(s, c, 200, "text/plain; version=0.0.4", metrics_now(s));
    case R_CHAT:
    case R_COMPLETIONS:
        return generate(s, c, cs->r == R_CHAT ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, cs->body.s ? cs->body.s : "",
                        cs->body.n);
    default:
        return MHD_NO;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    srv_server *s = cls;
    (void)version;
    conn_state *cs = *con_cls;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        pthread_mutex_lock(&s->mu);
        s->in_flight++;
        pthread_mutex_unlock(&s->mu);
        admit(s, c, url, method, cs);
        if (cs->error && refuse_now(s, c)) return send_refusal(s, c, cs);
        return MHD_YES;
    }
    if (*data_size) {
        int rc = take_body(s, cs, data, *data_size);
        *data_size = 0;
        return rc ? MHD_NO : MHD_YES;
    }
    return dispatch(s, c, cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    (void)c;
    (void)toe;
    conn_state *cs = *con_cls;
    if (!cs) return;
    free(cs->body.s);
    free(cs);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    if (--s->in_flight == 0) pthread_cond_broadcast(&s->jobs_cv);
    pthread_mutex_unlock(&s->mu);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    omni_log(2, "serve: http: %s", line);
}

/* ---- lifetime --------------------------------------------------------------------------------------------------------- */

srv_params srv_default_params(void) {
    srv_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.model_id = "omni";
    p.parse = srv_parse_default_limits();
    p.max_body = 64u << 20;
    p.timeout_s = 600;
    p.max_queue = 64;
    p.max_connections = 256;
    return p;
}

static omni_status resolve(const char *host, int port, struct sockaddr_storage *sa, socklen_t *len) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc || !res) return omni_fail(OMNI_ERR_USAGE, "--host %s: %s", host, rc ? gai_strerror(rc) : "no address");
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return OMNI_OK;
}

omni_status srv_start(const srv_params *p, const srv_backend *backend, srv_server **out) {
    *out = NULL;
    if (p->port < 0 || p->port > 65535) return omni_fail(OMNI_ERR_USAGE, "--port %d: not in [0, 65535]", p->port);
    struct sockaddr_storage sa;
    socklen_t salen;
    omni_status st = resolve(p->host ? p->host : "127.0.0.1", p->port, &sa, &salen);
    if (st) return st;
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->be = *backend;
    s->names[0] = p->model_id;
    s->names[1] = p->model_alias;
    s->p.parse.model_names = s->names;
    s->p.parse.n_model_names = p->model_alias ? 2 : 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->jobs_cv, NULL);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC /* for MHD_quiesce_daemon */ | MHD_USE_ERROR_LOG | (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, 30u /* idle seconds (slow or silent clients) */,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!s->d) {
        int e = errno;
        pthread_cond_destroy(&s->jobs_cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return omni_fail(OMNI_ERR_RUNTIME, "cannot listen on %s:%d: %s", p->host ? p->host : "127.0.0.1", p->port,
                         e ? strerror(e) : "libmicrohttpd refused to start");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    *out = s;
    return OMNI_OK;
}

int srv_port(const srv_server *s) { return s->port; }

/* Wait (s->mu held) until *count is 0 or `seconds` have passed; returns what is left. */
static int wait_zero(srv_server *s, const int *count, int seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += seconds;
    int rc = 0;
    while (*count > 0 && rc == 0) rc = pthread_cond_timedwait(&s->jobs_cv, &s->mu, &ts);
    return *count;
}

void srv_stop(srv_server *s) {
    if (!s) return;
    /* No new connections; the requests in flight see `stopping` within WAIT_SLICE_MS, cancel their jobs and end
     * (a 503, or a stream's error event and [DONE]): let them send that before the connections are closed. */
    s->stopping = 1;
    MHD_socket lfd = MHD_quiesce_daemon(s->d);
    pthread_mutex_lock(&s->mu);
    wait_zero(s, &s->in_flight, DRAIN_S);
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    /* The backend still owns the jobs it has not ended (their srv_job_done comes at its next step): wait, so
     * that no callback reaches a freed server. */
    pthread_mutex_lock(&s->mu);
    wait_zero(s, &s->live_jobs, 60);
    int left = s->live_jobs;
    pthread_mutex_unlock(&s->mu);
    if (left) { /* a backend that never ends its jobs: keep the server alive rather than free it under them */
        omni_log(0, "serve: %d request(s) still held by the engine at shutdown\n", left);
        return;
    }
    pthread_cond_destroy(&s->jobs_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
