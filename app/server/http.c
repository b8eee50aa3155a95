/* http.c - the HTTP layer of `omni serve` on libmicrohttpd (see server.h): routing, API key, body limit, jobs
 * handed to the backend, streamed (SSE) or whole responses, disconnect and timeout handling, metrics counters.
 *
 * Threads: libmicrohttpd runs one thread per connection; a connection thread parses the request, submits the
 * job and then waits on the job's condition variable for what the backend's thread (srv_job_token/srv_job_done)
 * produces. A job has two owners (the connection and the backend) and is freed by the last one. */
#define _GNU_SOURCE
#include "app/server/server.h"

#include "app/server/guard.h"

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
#define CONN_SPARE 16       /* connections libmicrohttpd takes past max_connections (answered 503 or making room) */

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
    srv_guard *guard;   /* connections, slow clients, bytes of bodies held */
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
    struct MHD_Connection *conn; /* a stream's connection (its idle clock, see touch) */
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
    srv_guard_stats g;
    srv_guard_get_stats(s->guard, &g);
    c.connections = g.open;
    c.held_bytes = (int64_t)g.held;
    c.closed_slow = g.slow;
    c.closed_evicted = g.evicted;
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
        srv_cond_wait_ms(&j->cv, &j->mu, WAIT_SLICE_MS);
        if (ready(j) || j->want_cancel || !client_gone(j->fd)) continue;
        pthread_mutex_unlock(&j->mu);
        cancel_job(j);
        pthread_mutex_lock(&j->mu);
        return WAIT_GONE;
    }
}

static int is_finished(const srv_job *j) { return j->finished; }
static int has_output(const srv_job *j) { return j->finished || j->out.n > j->sent; }

/* libmicrohttpd closes a connection unanswered when control comes back to it more than the idle timeout after its
 * last read or write: time spent waiting for the engine (a whole answer, a stream's next token, media encoding)
 * is not the client's idleness. This restarts the clock (a timeout of 0 first is what makes it restart). Called on
 * the connection's thread. */
static void touch(const srv_server *s, struct MHD_Connection *c) {
    unsigned idle = s->p.idle_timeout_s > 0 ? (unsigned)(s->p.idle_timeout_s + 0.999) : 0;
    if (!c || !idle) return;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, idle);
}

/* ---- responses -------------------------------------------------------------------------------------------------- */

/* Headers of every answer: CORS, a 405's or a preflight's Allow, a 401's challenge, a 503's Retry-After. */
static void add_headers(const srv_server *s, struct MHD_Response *r, int status, const char *allow) {
    if (s->p.cors_origin && s->p.cors_origin[0])
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, s->p.cors_origin);
    if ((status == 405 || status == 204) && allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
}

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
    add_headers(s, r, status, allow);
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
    double t0 = now_ms();
    for (;;) {
        if (wait_job(j, has_output) == WAIT_GONE) {
            rc = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (j->out.n > j->sent) {
            size_t n = j->out.n - j->sent < max ? j->out.n - j->sent : max;
            memcpy(out, j->out.s + j->sent, n);
            j->sent += n;
            if (j->sent >= 65536 && 2 * j->sent >= j->out.n) { /* drop what was sent: memory is what is unsent */
                memmove(j->out.s, j->out.s + j->sent, j->out.n - j->sent + 1);
                j->out.n -= j->sent;
                j->sent = 0;
            }
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
    if (now_ms() - t0 > 100) touch(j->srv, j->conn);
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
    j->conn = c;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_headers(s, r, 200, NULL);
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

/* ---- per-request state ------------------------------------------------------------------------------------------------ */

typedef enum { R_NONE = 0, R_HEALTH, R_MODELS, R_METRICS, R_PROPS, R_CHAT, R_COMPLETIONS, R_TOKENIZE, R_DETOKENIZE,
               R_PREFLIGHT } route;

/* Per-request state kept between the calls of the access handler. */
typedef struct {
    route r;
    int error;          /* an error decided before the body was read (sent once the body is consumed) */
    srv_error err;
    const char *allow;  /* the methods of a known path (a 405's and a preflight's Allow) */
    buf body;
    size_t seen;        /* body bytes received (kept or not) */
    size_t held;        /* bytes reserved with the guard (the body, then its parsing) */
    int framing;        /* the body cannot be delimited: answered at once, then closed */
    srv_conn *conn;     /* the connection's guard entry (NULL: not watched) */
} conn_state;

/* Reserve `want` bytes in all for this request (from what it holds already); on failure the request gets a 503
 * (busy now) or a 413 (more than the server ever holds) and its body is dropped. Returns 0 when held. */
static int hold_total(srv_server *s, conn_state *cs, size_t want) {
    if (want <= cs->held) return 0;
    int rc = srv_guard_hold(s->guard, want - cs->held);
    if (!rc) {
        cs->held = want;
        return 0;
    }
    cs->error = 1;
    if (rc == 2)
        srv_error_set(&cs->err, 413, "invalid_request_error", "request_too_large", NULL, "the request needs %zu bytes "
                      "of memory to parse; this server holds at most %zu for all requests", want, s->p.max_held);
    else
        srv_error_set(&cs->err, 503, "server_error", "server_busy", NULL, "the server holds too many request bodies "
                      "at once (%zu bytes); retry later", s->p.max_held);
    free(cs->body.s);
    cs->body = (buf){0};
    srv_guard_release(s->guard, cs->held);
    cs->held = 0;
    return -1;
}

static void release_all(srv_server *s, conn_state *cs) {
    free(cs->body.s);
    cs->body = (buf){0};
    srv_guard_release(s->guard, cs->held);
    cs->held = 0;
}

/* The body's parse memory reserved (400 for a body of too many values, before any is spent): 0 to go on. */
static int hold_parse(srv_server *s, conn_state *cs) {
    srv_json_shape sh = srv_json_measure(cs->body.s ? cs->body.s : "", cs->body.n);
    if (sh.values > SRV_MAX_JSON_VALUES) return 0; /* the parser refuses it at once */
    return hold_total(s, cs, cs->body.n + srv_json_parse_bytes(&sh, cs->body.n));
}

static enum MHD_Result generate(srv_server *s, struct MHD_Connection *c, srv_endpoint ep, conn_state *cs) {
    srv_request req;
    srv_error err;
    omni_status st = srv_request_parse(cs->body.s ? cs->body.s : "", cs->body.n, ep, &s->p.parse, &req, &err);
    free(cs->body.s); /* the request holds what it needs (the reservation stays until it is submitted) */
    cs->body = (buf){0};
    if (st) return send_error(s, c, &err);
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
    st = s->be.submit(s->be.ctx, &req, j, &prompt_tokens, &err);
    srv_request_free(&req);
    release_all(s, cs); /* the engine has its own copy of what it needs */
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

/* ---- llama-server's /tokenize, /detokenize, /props ------------------------------------------------------------------ */

static enum MHD_Result tokenize(srv_server *s, struct MHD_Connection *c, conn_state *cs) {
    srv_tokenize_req tr;
    srv_error err;
    omni_status st = srv_tokenize_parse(cs->body.s ? cs->body.s : "", cs->body.n, &tr, &err);
    free(cs->body.s);
    cs->body = (buf){0};
    if (st) return send_error(s, c, &err);
    /* ids (at most one per byte) and the answer (at most SRV_MAX_JSON_VALUES tokens, ~40 bytes each with pieces) */
    size_t nmax = tr.text_len < SRV_MAX_JSON_VALUES ? tr.text_len : SRV_MAX_JSON_VALUES;
    if (hold_total(s, cs, cs->held + 4 * tr.text_len + (tr.with_pieces ? 48 : 12) * nmax)) {
        srv_tokenize_req_free(&tr);
        return send_error(s, c, &cs->err);
    }
    int32_t *ids = NULL;
    int n = 0;
    st = llm_tokenizer_encode(s->p.tok, tr.text, tr.text_len, tr.parse_special, &ids, &n, NULL);
    char *body = NULL;
    if (st) srv_error_set(&err, 500, "server_error", NULL, NULL, "%s", omni_last_error());
    else if (n > SRV_MAX_JSON_VALUES)
        st = srv_error_set(&err, 400, "invalid_request_error", NULL, "content", "the content has %d tokens (at most "
                           "%d per request)", n, SRV_MAX_JSON_VALUES);
    else body = srv_tokens_json(s->p.tok, ids, n, tr.with_pieces);
    free(ids);
    srv_tokenize_req_free(&tr);
    release_all(s, cs);
    if (st) return send_error(s, c, &err);
    return send_text(s, c, 200, "application/json", body);
}

static enum MHD_Result detokenize(srv_server *s, struct MHD_Connection *c, conn_state *cs) {
    int32_t *ids = NULL;
    int n = 0;
    srv_error err;
    omni_status st = srv_detokenize_parse(cs->body.s ? cs->body.s : "", cs->body.n,
                                          llm_tokenizer_vocab_size(s->p.tok), &ids, &n, &err);
    free(cs->body.s);
    cs->body = (buf){0};
    if (st) return send_error(s, c, &err);
    size_t bytes = 0, len; /* the text, and its JSON (escaped: up to 6 bytes per byte) */
    for (int i = 0; i < n; i++) bytes += llm_tokenizer_token_bytes(s->p.tok, ids[i], &len) ? len : 0;
    if (hold_total(s, cs, cs->held + 8 * bytes)) {
        free(ids);
        return send_error(s, c, &cs->err);
    }
    char *text = llm_tokenizer_decode(s->p.tok, ids, n, 0);
    char *body = text ? srv_content_json(text, strlen(text)) : NULL;
    free(text);
    free(ids);
    release_all(s, cs);
    return send_text(s, c, 200, "application/json", body);
}

static enum MHD_Result props(srv_server *s, struct MHD_Connection *c) {
    srv_props p = s->p.props;
    p.model = s->p.model_id;
    p.temperature = s->p.parse.temperature;
    p.top_p = s->p.parse.top_p;
    p.top_k = s->p.parse.top_k;
    p.max_tokens = s->p.parse.max_tokens;
    return send_text(s, c, 200, "application/json", srv_props_json(&p));
}

/* A CORS preflight: 204 with what may be sent (no API key: browsers never send one with a preflight). */
static enum MHD_Result preflight(srv_server *s, struct MHD_Connection *c, const conn_state *cs) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_headers(s, r, 204, cs->allow);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS, "GET, HEAD, POST, OPTIONS");
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    int plain = h && h[0] && strlen(h) < 1024;
    for (const char *p = h; plain && *p; p++) /* echo a list of header names, nothing else */
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("-_, ", *p);
    MHD_add_response_header(r, "Access-Control-Allow-Headers", plain ? h : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    count_status(s, 204);
    return rc;
}

/* ---- routing -------------------------------------------------------------------------------------------------------- */

/* The route of (url, method); R_NONE with *allow set when the path exists but takes other methods. OPTIONS on a
 * known path is a CORS preflight. */
static route find_route(const srv_server *s, const char *url, const char *method, const char **allow) {
    static const struct { const char *path; route r; int post; } t[] = {
        {"/health", R_HEALTH, 0},      {"/v1/health", R_HEALTH, 0}, {"/v1/models", R_MODELS, 0},
        {"/models", R_MODELS, 0},      {"/metrics", R_METRICS, 0},  {"/props", R_PROPS, 0},
        {"/v1/chat/completions", R_CHAT, 1}, {"/chat/completions", R_CHAT, 1}, {"/v1/completions", R_COMPLETIONS, 1},
        {"/completions", R_COMPLETIONS, 1}, {"/tokenize", R_TOKENIZE, 1}, {"/detokenize", R_DETOKENIZE, 1},
    };
    *allow = NULL;
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        if (strcmp(url, t[i].path)) continue;
        if ((t[i].r == R_TOKENIZE || t[i].r == R_DETOKENIZE) && !s->p.tok) return R_NONE;
        int is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        *allow = t[i].post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
        if (!strcmp(method, "OPTIONS")) return R_PREFLIGHT;
        if ((t[i].post && is_post) || (!t[i].post && is_get)) return t[i].r;
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

/* The headers that frame a body (request smuggling, RFC 9112 6.3): Content-Length given twice with different
 * values, or together with Transfer-Encoding, makes the body's end ambiguous (400); a transfer coding other than
 * chunked cannot be read (501). */
typedef struct {
    int n_cl, cl_differ, n_te;
    const char *cl, *te;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    framing *f = cls;
    (void)kind;
    if (!key || !value) return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (f->n_cl++ && strcmp(f->cl, value)) f->cl_differ = 1;
        f->cl = value;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->n_te++;
        f->te = value;
    }
    return MHD_YES;
}

/* 0, or the framing error filled in cs (answered before the body, which cannot be delimited). */
static int bad_framing(struct MHD_Connection *c, conn_state *cs) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &f);
    if (f.cl_differ)
        srv_error_set(&cs->err, 400, "invalid_request_error", "bad_request", NULL, "conflicting Content-Length headers");
    else if (f.n_cl && f.n_te)
        srv_error_set(&cs->err, 400, "invalid_request_error", "bad_request", NULL, "both Content-Length and "
                      "Transfer-Encoding are given: the body's length is ambiguous");
    else if (f.n_te > 1 || (f.te && strcasecmp(f.te, "chunked")))
        srv_error_set(&cs->err, 501, "invalid_request_error", "bad_request", NULL, "Transfer-Encoding '%.64s' is not "
                      "supported (only chunked)", f.te);
    else
        return 0;
    cs->error = cs->framing = 1;
    return 1;
}

/* First call of a request: route, authenticate, check the declared size and reserve it. */
static void admit(srv_server *s, struct MHD_Connection *c, const char *url, const char *method, conn_state *cs) {
    cs->r = find_route(s, url, method, &cs->allow);
    if (cs->r == R_NONE) {
        cs->error = 1;
        if (cs->allow) srv_error_set(&cs->err, 405, "invalid_request_error", "method_not_allowed", NULL,
                                      "%.32s is not allowed on %.200s", method, url);
        else srv_error_set(&cs->err, 404, "not_found_error", "not_found", NULL, "no such endpoint: %.32s %.200s",
                           method, url);
        return;
    }
    if (cs->r == R_PREFLIGHT || bad_framing(c, cs)) return;
    if (srv_guard_crowded(s->guard)) {
        cs->error = 1;
        srv_error_set(&cs->err, 503, "server_error", "too_many_connections", NULL, "the server has too many open "
                      "connections (at most %d); retry later", s->p.max_connections);
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
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (n > s->p.max_body) {
        cs->error = 1;
        srv_error_set(&cs->err, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body (%.32s bytes) is over this server's limit of %zu bytes", cl, s->p.max_body);
        return;
    }
    hold_total(s, cs, (size_t)n); /* the declared body: held now, or refused before it is read */
}

/* Body bytes past which a refused body is no longer read: the connection is closed. */
static size_t body_cap(const srv_server *s) { return 4 * s->p.max_body + (1u << 20); }

/* A request refused before its body (401, 404, 405, 413 by its Content-Length, 503) is answered at once, without
 * reading the body, when the client waits for "100 Continue" before sending it (curl does for bodies over 1 MiB;
 * it would otherwise send it all) or when the declared body is past body_cap (it would be closed unanswered). */
static int refuse_now(const srv_server *s, struct MHD_Connection *c, const conn_state *cs) {
    if (cs->framing) return 1;
    const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (ex && strcasestr(ex, "100-continue")) || (cl && strtoull(cl, NULL, 10) > body_cap(s));
}

/* Room for n more body bytes, reserved before it is allocated (the buffer never holds more than is reserved): a
 * declared length at once, a chunked body by doubling. -1: refused (cs->err). */
static int body_room(srv_server *s, conn_state *cs, size_t n) {
    size_t need = cs->body.n + n + 1;
    if (need <= cs->body.cap) return 0;
    size_t want = cs->held + 1 > need ? cs->held + 1 : 2 * need < s->p.max_body + 1 ? 2 * need : s->p.max_body + 1;
    if (want < need) want = need;
    if (hold_total(s, cs, want)) return -1;
    char *b = realloc(cs->body.s, want);
    if (!b) {
        cs->error = 1;
        srv_error_set(&cs->err, 500, "server_error", NULL, NULL, "out of memory");
        release_all(s, cs);
        return -1;
    }
    cs->body.s = b;
    cs->body.cap = want;
    return 0;
}

/* Body bytes: kept up to the limit (each chunk reserved with the guard), then only counted (413 at the end); a body
 * far over the limit closes the connection, and so does a body still arriving at shutdown. Returns 0 to go on, -1
 * to close. */
static int take_body(srv_server *s, conn_state *cs, const char *data, size_t n) {
    cs->seen += n;
    srv_guard_body(s->guard, cs->conn, n);
    if (cs->seen > body_cap(s) || s->stopping) return -1;
    if (cs->error) return 0;
    if (cs->seen > s->p.max_body) {
        cs->error = 1;
        srv_error_set(&cs->err, 413, "invalid_request_error", "request_too_large", NULL,
                      "the request body is over this server's limit of %zu bytes", s->p.max_body);
        release_all(s, cs);
        return 0;
    }
    if (body_room(s, cs, n)) return 0;
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

static enum MHD_Result answer(srv_server *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->error) return send_refusal(s, c, cs);
    if (cs->r == R_CHAT || cs->r == R_COMPLETIONS || cs->r == R_TOKENIZE || cs->r == R_DETOKENIZE) {
        if (hold_parse(s, cs)) return send_refusal(s, c, cs);
    }
    switch (cs->r) {
    case R_HEALTH:
        return send_text(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    case R_MODELS:
        return send_text(s, c, 200, "application/json", srv_models_json(s->p.model_id, (long long)time(NULL)));
    case R_METRICS:
        return send_text(s, c, 200, "text/plain; version=0.0.4", metrics_now(s));
    case R_PROPS:
        return props(s, c);
    case R_CHAT:
    case R_COMPLETIONS:
        return generate(s, c, cs->r == R_CHAT ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, cs);
    case R_TOKENIZE:
        return tokenize(s, c, cs);
    case R_DETOKENIZE:
        return detokenize(s, c, cs);
    case R_PREFLIGHT:
        return preflight(s, c, cs);
    default:
        return MHD_NO;
    }
}

static enum MHD_Result dispatch(srv_server *s, struct MHD_Connection *c, conn_state *cs) {
    srv_guard_busy(s->guard, cs->conn);
    enum MHD_Result rc = answer(s, c, cs);
    touch(s, c);
    return rc;
}

/* An absolute-form request target ("http://host:port/v1/models", which servers must accept) -> its path. */
static const char *origin_form(const char *url) {
    const char *p = !strncasecmp(url, "http://", 7) ? url + 7 : !strncasecmp(url, "https://", 8) ? url + 8 : NULL;
    if (!p) return url;
    p = strchr(p, '/');
    return p ? p : "/";
}

static srv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
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
        cs->conn = conn_of(c);
        srv_guard_head_done(s->guard, cs->conn);
        admit(s, c, origin_form(url), method, cs);
        if (cs->error && refuse_now(s, c, cs)) {
            srv_guard_busy(s->guard, cs->conn);
            return send_refusal(s, c, cs);
        }
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
    (void)toe;
    conn_state *cs = *con_cls;
    if (!cs) return;
    srv_guard_idle(s->guard, cs->conn);
    release_all(s, cs);
    free(cs);
    *con_cls = NULL;
    (void)c;
    pthread_mutex_lock(&s->mu);
    if (--s->in_flight == 0) pthread_cond_broadcast(&s->jobs_cv);
    pthread_mutex_unlock(&s->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? srv_guard_open(s->guard, ci->connect_fd) : NULL;
    } else {
        srv_guard_close(s->guard, *socket_context);
        *socket_context = NULL;
    }
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
    p.cors_origin = "*";
    p.max_body = 64u << 20;
    p.timeout_s = 600;
    p.head_timeout_s = 30;
    p.body_min_rate = 16384;
    p.idle_timeout_s = 30;
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
    if (!s->p.max_held) s->p.max_held = 4 * p->max_body + (128u << 20);
    srv_guard_params gp = {p->head_timeout_s, p->body_min_rate, p->max_connections, s->p.max_held};
    if ((st = srv_guard_start(&gp, &s->guard))) {
        free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->jobs_cv, NULL);
    unsigned idle = p->idle_timeout_s > 0 ? (unsigned)(p->idle_timeout_s + 0.999) : 0;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC /* for MHD_quiesce_daemon */ | MHD_USE_ERROR_LOG | (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            /* past max_connections the guard closes waiting ones or answers 503: a few more */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(p->max_connections + CONN_SPARE),
                            MHD_OPTION_CONNECTION_TIMEOUT, idle,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!s->d) {
        int e = errno;
        srv_guard_free(s->guard);
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
    srv_guard_free(s->guard); /* every connection is closed */
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
