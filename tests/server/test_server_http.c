/* test_server_http.c - the HTTP layer of `omni serve` (app/server/http.c) against a scripted backend, through raw
 * sockets on 127.0.0.1 (port 0: a free one): routing (404/405), API key (401), body limit (413), bad JSON (400),
 * whole and streamed (SSE, chunked) answers with usage, stop sequences (cut + backend job cancelled), 16
 * concurrent streams interleaving, a client leaving mid-stream (its job cancelled, its "pages" back in /metrics),
 * the queue limit (503), the request timeout (408) of a whole answer and of a stream whose tokens keep coming, a
 * stop sequence cancelling the backend job at once (whole and streamed), shutdown with requests in flight (a 503,
 * a stream's error event and [DONE]), an early 413 for a client waiting for "100 Continue", error JSON that stays
 * UTF-8 when the path is not; the server answers /health after every failure.
 * Every wait polls for the state it needs with a generous deadline (CI runs this under ASan beside other tests).
 *
 * The scripted backend plays the engine: a worker thread runs up to MAX_RUNNING (16) jobs round-robin, one token per
 * job per step ("t0 ", "t1 ", ... 1 ms apart), holds PAGES_PER_JOB pages per running job, queues the rest, and
 * honours cancel within one step. The real engine is tested through the program in test_serve_openai. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "app/server/server.h"
#include "check.h"
#include "llm/tokenizer.h"

#define MAX_RUNNING 16
#define MAX_JOBS 64
#define PAGES_PER_JOB 3
#define TOTAL_PAGES 100

/* ---- scripted backend ------------------------------------------------------------------------------------------ */

typedef struct {
    srv_job *job;
    int max_tokens, emitted, cancelled, used;
    int big; /* the prompt asked for BIGTOKENS: 4000 bytes per token (to fill a socket that is not read) */
} fake_job;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    fake_job jobs[MAX_JOBS];
    int n, stop, hold; /* hold: queued jobs are not started (to fill the queue) */
    int cancels;       /* jobs that ended by cancel */
} fake_backend;

/* Job slots 0..n-1 in arrival order; the first MAX_RUNNING live ones run (unless held). */
static int is_running(fake_backend *b, int k) {
    if (b->hold) return 0;
    int rank = 0;
    for (int i = 0; i < k; i++) rank += b->jobs[i].job != NULL;
    return rank < MAX_RUNNING;
}

static void *fake_worker(void *arg) {
    fake_backend *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        int any = 0;
        for (int i = 0; i < b->n; i++) {
            fake_job *f = &b->jobs[i];
            if (!f->job || (!is_running(b, i) && !f->cancelled)) continue;
            any = 1;
            srv_job *j = f->job;
            if (f->cancelled || f->emitted >= f->max_tokens) {
                srv_job_end end = {f->cancelled ? SRV_FINISH_NONE : SRV_FINISH_LENGTH, 0, {0}, 1.0, 2.0};
                b->cancels += f->cancelled;
                f->job = NULL;
                srv_job_done(j, &end);
                continue;
            }
            char t[4096];
            if (f->big) {
                memset(t, 'x', 4000);
                t[4000] = 0;
                f->emitted++;
            } else {
                snprintf(t, sizeof t, "t%d ", f->emitted++);
            }
            srv_job_token(j, t, strlen(t));
        }
        while (b->n > 0 && !b->jobs[b->n - 1].job) b->n--; /* compact the tail */
        if (any) {
            pthread_mutex_unlock(&b->mu);
            usleep(1000);
            pthread_mutex_lock(&b->mu);
        } else {
            pthread_cond_wait(&b->cv, &b->mu);
        }
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static omni_status fake_submit(void *ctx, const srv_request *req, srv_job *job, int *prompt_tokens, srv_error *err) {
    fake_backend *b = ctx;
    if (strstr(req->prompt, "FAILME"))
        return srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "the backend refused it");
    pthread_mutex_lock(&b->mu);
    if (b->n == MAX_JOBS) {
        pthread_mutex_unlock(&b->mu);
        return srv_error_set(err, 503, "server_error", NULL, NULL, "full");
    }
    int k = b->n++;
    b->jobs[k] = (fake_job){job, req->max_tokens, 0, 0, 1, strstr(req->prompt, "BIGTOKENS") != NULL};
    srv_job_set_backend_data(job, &b->jobs[k]);
    *prompt_tokens = (int)strlen(req->prompt);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return OMNI_OK;
}

static void fake_cancel(void *ctx, srv_job *job) {
    fake_backend *b = ctx;
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->n; i++)
        if (b->jobs[i].job == job) b->jobs[i].cancelled = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void fake_stats(void *ctx, srv_metrics *m) {
    fake_backend *b = ctx;
    pthread_mutex_lock(&b->mu);
    int live = 0, run = 0;
    for (int i = 0; i < b->n; i++)
        if (b->jobs[i].job) {
            live++;
            run += is_running(b, i);
        }
    pthread_mutex_unlock(&b->mu);
    m->running = run;
    m->queued = live - run;
    m->n_kv = 1;
    snprintf(m->kv[0].name, sizeof m->kv[0].name, "int2");
    m->kv[0].pages_used = (int64_t)run * PAGES_PER_JOB;
    m->kv[0].pages_free = TOTAL_PAGES - m->kv[0].pages_used;
}

/* ---- a tiny HTTP client ------------------------------------------------------------------------------------------- */

static int g_port;

static int connect_server(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {20, 0}; /* never hang: every read gives up after 20 s */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_request(int fd, const char *method, const char *path, const char *key, const char *body, size_t blen) {
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method, path,
                     key ? "Authorization: Bearer " : "", key ? key : "", key ? "\r\n" : "", blen);
    if (write(fd, head, (size_t)n) != n) return -1;
    size_t o = 0;
    while (o < blen) {
        ssize_t w = write(fd, body + o, blen - o);
        if (w <= 0) return -1;
        o += (size_t)w;
    }
    return 0;
}

typedef struct {
    int status;
    char *body;   /* de-chunked */
    size_t len;
} http_resp;

static void dechunk(http_resp *r, char *raw, size_t n) {
    char *out = malloc(n + 1), *p = raw, *end = raw + n;
    size_t o = 0;
    while (p < end) {
        size_t sz = strtoul(p, NULL, 16);
        char *nl = strstr(p, "\r\n");
        if (!nl || sz == 0) break;
        p = nl + 2;
        if (p + sz > end) sz = (size_t)(end - p);
        memcpy(out + o, p, sz);
        o += sz;
        p += sz + 2;
    }
    out[o] = 0;
    r->body = out;
    r->len = o;
}

static http_resp read_response(int fd) {
    http_resp r = {0};
    size_t cap = 4096, n = 0;
    char *raw = malloc(cap);
    for (;;) {
        if (n + 1024 > cap) raw = realloc(raw, cap *= 2);
        ssize_t k = read(fd, raw + n, cap - n - 1);
        if (k <= 0) break;
        n += (size_t)k;
    }
    raw[n] = 0;
    close(fd);
    char *hend = strstr(raw, "\r\n\r\n");
    if (sscanf(raw, "HTTP/1.%*d %d", &r.status) != 1 || !hend) {
        r.status = -1;
        r.body = strdup("");
        free(raw);
        return r;
    }
    *hend = 0;
    char *b = hend + 4;
    if (strcasestr(raw, "Transfer-Encoding: chunked")) dechunk(&r, b, n - (size_t)(b - raw));
    else {
        r.len = n - (size_t)(b - raw);
        r.body = malloc(r.len + 1);
        memcpy(r.body, b, r.len);
        r.body[r.len] = 0;
    }
    free(raw);
    return r;
}

/* Raw bytes until the server closes (or the 20 s read timeout), NUL-terminated; returns the length. */
static size_t read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)k;
    buf[n] = 0;
    return n;
}

static http_resp request(const char *method, const char *path, const char *key, const char *body) {
    int fd = connect_server();
    if (fd < 0 || send_request(fd, method, path, key, body ? body : "", body ? strlen(body) : 0)) {
        if (fd >= 0) close(fd);
        return (http_resp){-1, strdup(""), 0};
    }
    return read_response(fd);
}

#define KEY "sekret"

static void expect_error(const char *what, http_resp r, int status, const char *code) {
    cJSON *j = cJSON_Parse(r.body), *e = cJSON_GetObjectItem(j, "error");
    CHECK(r.status == status, "%s: status %d, want %d: %s", what, r.status, status, r.body);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(e, "message")) && cJSON_IsString(cJSON_GetObjectItem(e, "type")) &&
              cJSON_GetObjectItem(e, "param") && cJSON_GetObjectItem(e, "code"),
          "%s: not an OpenAI error JSON: %s", what, r.body);
    if (code) CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "code")) ?: "", code), "%s: code: %s", what,
                    r.body);
    cJSON_Delete(j);
    free(r.body);
}

static void expect_health(const char *after) {
    http_resp r = request("GET", "/health", NULL, NULL);
    CHECK(r.status == 200 && strstr(r.body, "ok"), "health after %s: %d %s", after, r.status, r.body);
    free(r.body);
}

/* Body of a chat request with max_tokens n (and extra fields). */
static char *chat_body(int n, int stream, const char *extra) {
    char *b = malloc(512);
    snprintf(b, 512, "{\"model\":\"fake\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":%d,"
             "\"stream\":%s%s%s}", n, stream ? "true" : "false", extra ? "," : "", extra ? extra : "");
    return b;
}

static char *expected_text(int n) {
    char *t = calloc((size_t)n * 8 + 1, 1);
    for (int i = 0; i < n; i++) sprintf(t + strlen(t), "t%d ", i);
    return t;
}

/* Concatenate the deltas of an SSE body; check the framing, [DONE] at the end, the finish reason and usage.
 * Called from several threads: problems are reported through *ok (0) and stderr, not CHECK. */
static char *stream_text(const char *body, char *finish, int *usage_total, int *ok) {
    char *text = calloc(strlen(body) + 1, 1);
    const char *p = body;
    int done = 0;
    finish[0] = 0;
    *usage_total = -1;
    while (*p) {
        const char *e = strstr(p, "\n\n");
        if (strncmp(p, "data: ", 6) || !e) {
            fprintf(stderr, "bad SSE framing at: %.40s\n", p);
            break;
        }
        if (!strncmp(p, "data: [DONE]\n\n", 14)) {
            done = p[14] == 0;
            break;
        }
        char *js = strndup(p + 6, (size_t)(e - p - 6));
        cJSON *j = cJSON_Parse(js), *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (!j || strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")) ?: "", "chat.completion.chunk")) {
            fprintf(stderr, "not a chunk: %s\n", js);
            done = -1;
        }
        const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content"));
        if (d) strcat(text, d);
        const char *f = cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason"));
        if (f) snprintf(finish, 16, "%s", f);
        cJSON *u = cJSON_GetObjectItem(j, "usage");
        if (u) *usage_total = cJSON_GetObjectItem(u, "total_tokens")->valueint;
        cJSON_Delete(j);
        free(js);
        p = e + 2;
    }
    if (done != 1) fprintf(stderr, "stream without [DONE] at its end, or a bad chunk\n");
    *ok = done == 1;
    return text;
}

/* ---- the tests --------------------------------------------------------------------------------------------------- */

static void test_routes(void) {
    http_resp r = request("GET", "/health", NULL, NULL);
    CHECK(r.status == 200, "health %d", r.status);
    free(r.body);
    expect_error("no key", request("GET", "/v1/models", NULL, NULL), 401, "invalid_api_key");
    expect_error("wrong key", request("GET", "/v1/models", "sekreT", NULL), 401, "invalid_api_key");
    expect_error("longer key", request("GET", "/v1/models", KEY "x", NULL), 401, "invalid_api_key");
    char *b = chat_body(2, 0, NULL);
    expect_error("chat without key", request("POST", "/v1/chat/completions", NULL, b), 401, "invalid_api_key");
    free(b);
    r = request("GET", "/v1/models", KEY, NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":\"fake\""), "models: %d %s", r.status, r.body);
    free(r.body);
    r = request("GET", "/metrics", KEY, NULL);
    CHECK(r.status == 200 && strstr(r.body, "omni_kv_pages_free{format=\"int2\"}"), "metrics: %s", r.body);
    free(r.body);
    expect_error("unknown path", request("GET", "/v2/nothing", KEY, NULL), 404, NULL);
    expect_error("wrong method", request("GET", "/v1/chat/completions", KEY, NULL), 405, NULL);
    /* a 405 names the methods of that path */
    const char *allow[][3] = {{"GET", "/v1/chat/completions", "Allow: POST, OPTIONS\r\n"},
                              {"POST", "/v1/models", "Allow: GET, HEAD, OPTIONS\r\n"},
                              {"PUT", "/health", "Allow: GET, HEAD, OPTIONS\r\n"}};
    for (int i = 0; i < 3; i++) {
        int fd = connect_server();
        char raw[2048] = "";
        if (fd >= 0 && !send_request(fd, allow[i][0], allow[i][1], KEY, "", 0)) read_all(fd, raw, sizeof raw);
        if (fd >= 0) close(fd);
        CHECK(!strncmp(raw, "HTTP/1.1 405", 12) && strstr(raw, allow[i][2]), "%s %s: %.300s", allow[i][0], allow[i][1],
              raw);
    }
    expect_error("invalid JSON", request("POST", "/v1/chat/completions", KEY, "{\"messages\": [}"), 400, NULL);
    expect_error("wrong type", request("POST", "/v1/chat/completions", KEY, "{\"messages\":\"hi\"}"), 400, NULL);
    expect_error("unknown model", request("POST", "/v1/chat/completions", KEY,
                 "{\"model\":\"gpt-9\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"), 404, "model_not_found");
    expect_error("backend refusal", request("POST", "/v1/chat/completions", KEY,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"FAILME\"}]}"), 400, NULL);
    /* body over the limit (8 KiB): declared, and far over */
    size_t big = 20000;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    memcpy(body, "{\"prompt\":\"", 11);
    body[big - 2] = '"';
    body[big - 1] = '}';
    body[big] = 0;
    expect_error("body over limit", request("POST", "/v1/completions", KEY, body), 413, "request_too_large");
    free(body);
    expect_health("the errors");
}

static void test_whole_and_stream(void) {
    char *b = chat_body(5, 0, NULL), *want = expected_text(5);
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    cJSON *j = cJSON_Parse(r.body), *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content"));
    CHECK(r.status == 200 && content && !strcmp(content, want), "whole: %d %s", r.status, r.body);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason")) ?: "", "length"), "finish: %s", r.body);
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK(u && cJSON_GetObjectItem(u, "completion_tokens")->valueint == 5 &&
              cJSON_GetObjectItem(u, "prompt_tokens")->valueint > 0, "usage: %s", r.body);
    cJSON_Delete(j);
    free(r.body);
    free(b);

    b = chat_body(5, 1, "\"stream_options\":{\"include_usage\":true}");
    r = request("POST", "/v1/chat/completions", KEY, b);
    char finish[16];
    int total;
    int ok;
    char *got = stream_text(r.body, finish, &total, &ok);
    CHECK(ok && r.status == 200 && !strcmp(got, want) && !strcmp(finish, "length") && total > 5, "stream: '%s' %s %d",
          got, finish, total);
    free(got);
    free(r.body);
    free(b);
    free(want);

    /* stop sequence: cut before it, finish "stop", and the backend job is cancelled (not run to 50 tokens) */
    b = chat_body(50, 1, "\"stop\":[\"t3 \"]");
    r = request("POST", "/v1/chat/completions", KEY, b);
    got = stream_text(r.body, finish, &total, &ok);
    CHECK(ok && !strcmp(got, "t0 t1 t2 ") && !strcmp(finish, "stop"), "stop stream: '%s' %s", got, finish);
    free(got);
    free(r.body);
    free(b);
    b = chat_body(50, 0, "\"stop\":\"1 t\"");
    r = request("POST", "/v1/chat/completions", KEY, b);
    CHECK(r.status == 200 && strstr(r.body, "\"content\":\"t0 t\"") && strstr(r.body, "\"finish_reason\":\"stop\""),
          "stop whole: %s", r.body);
    free(r.body);
    free(b);
    /* completions endpoint */
    r = request("POST", "/v1/completions", KEY, "{\"prompt\":\"x\",\"max_tokens\":2}");
    CHECK(r.status == 200 && strstr(r.body, "\"text\":\"t0 t1 \"") && strstr(r.body, "text_completion"),
          "completions: %s", r.body);
    free(r.body);
}

typedef struct {
    int n, ok;
} stream_arg;

static void *stream_client(void *p) {
    stream_arg *a = p;
    char *b = chat_body(a->n, 1, NULL), *want = expected_text(a->n), finish[16];
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    int total, ok;
    char *got = stream_text(r.body, finish, &total, &ok);
    a->ok = ok && r.status == 200 && !strcmp(got, want) && !strcmp(finish, "length");
    free(got);
    free(want);
    free(r.body);
    free(b);
    return NULL;
}

static void test_concurrent(void) {
    pthread_t th[16];
    stream_arg a[16];
    for (int i = 0; i < 16; i++) {
        a[i] = (stream_arg){20 + 7 * i, 0};
        pthread_create(&th[i], NULL, stream_client, &a[i]);
    }
    int ok = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(th[i], NULL);
        ok += a[i].ok;
    }
    CHECK(ok == 16, "%d of 16 concurrent streams correct", ok);
}

/* The value of a /metrics sample: the line that starts with `name` (not the # HELP line that names it too). */
static long metric(const char *name) {
    http_resp r = request("GET", "/metrics", KEY, NULL);
    const char *p = r.body;
    while (p && strncmp(p, name, strlen(name))) p = (p = strchr(p, '\n')) ? p + 1 : NULL;
    long v = p ? strtol(p + strlen(name), NULL, 10) : -1;
    free(r.body);
    return v;
}

static void test_disconnect(fake_backend *fb) {
    pthread_mutex_lock(&fb->mu);
    int cancels0 = fb->cancels;
    pthread_mutex_unlock(&fb->mu);
    char *b = chat_body(100000, 1, NULL);
    int fd = connect_server();
    send_request(fd, "POST", "/v1/chat/completions", KEY, b, strlen(b));
    free(b);
    char tmp[2048];
    ssize_t k = read(fd, tmp, sizeof tmp - 1); /* the headers and the first chunks */
    tmp[k > 0 ? k : 0] = 0;
    CHECK(k > 0 && strstr(tmp, "200"), "disconnect: no start");
    CHECK(metric("omni_kv_pages_used{format=\"int2\"} ") == PAGES_PER_JOB, "pages not in use while streaming");
    close(fd);
    long used = -1;
    int waited = 0;
    for (; waited < 500 && used != 0; waited++) { /* <= 10 s */
        usleep(20000);
        used = metric("omni_kv_pages_used{format=\"int2\"} ");
    }
    pthread_mutex_lock(&fb->mu);
    int cancels = fb->cancels - cancels0;
    pthread_mutex_unlock(&fb->mu);
    CHECK(used == 0 && cancels == 1, "after disconnect: %ld pages used, %d cancels (waited %d ms)", used, cancels,
          waited * 20);
    printf("disconnect: pages back after %d ms\n", waited * 20);
    expect_health("a disconnect");
}

typedef struct {
    int status;
} whole_arg;

static void *whole_client(void *p) {
    whole_arg *a = p;
    char *b = chat_body(3, 0, NULL);
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    a->status = r.status;
    free(r.body);
    free(b);
    return NULL;
}

/* max_queue is 2: with the backend holding jobs, two wait and the third gets 503. */
static void test_queue(fake_backend *fb) {
    pthread_mutex_lock(&fb->mu);
    fb->hold = 1;
    pthread_mutex_unlock(&fb->mu);
    pthread_t th[2];
    whole_arg a[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, whole_client, &a[i]);
    for (int w = 0; w < 1000 && metric("omni_requests_queued ") < 2; w++) usleep(10000);
    char *b = chat_body(3, 0, NULL);
    expect_error("queue full", request("POST", "/v1/chat/completions", KEY, b), 503, NULL);
    free(b);
    pthread_mutex_lock(&fb->mu);
    fb->hold = 0;
    pthread_cond_broadcast(&fb->cv);
    pthread_mutex_unlock(&fb->mu);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].status == 200, "queued request %d: %d", i, a[i].status);
    }
}

static int cancels_now(fake_backend *fb) {
    pthread_mutex_lock(&fb->mu);
    int n = fb->cancels;
    pthread_mutex_unlock(&fb->mu);
    return n;
}

/* Polls until the backend has ended `want` cancelled jobs (<= 10 s); returns how many it has. */
static int wait_cancels(fake_backend *fb, int want) {
    for (int w = 0; w < 1000 && cancels_now(fb) < want; w++) usleep(10000);
    return cancels_now(fb);
}

/* A stop sequence ends the answer, and the backend job (100000 tokens: it cannot end by itself within the test)
 * is cancelled at once, whole or streamed: the engine must not generate on for an answer already sent. */
static void test_stop_cancels(fake_backend *fb) {
    int c0 = cancels_now(fb);
    char *b = chat_body(100000, 0, "\"stop\":\"t2 \"");
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    CHECK(r.status == 200 && strstr(r.body, "\"content\":\"t0 t1 \"") && strstr(r.body, "\"finish_reason\":\"stop\""),
          "stop whole: %s", r.body);
    /* the engine's timings are not in yet: the server's clock gives them (3 tokens 1 ms apart) */
    cJSON *j = cJSON_Parse(r.body), *t = cJSON_GetObjectItem(j, "timings");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(t, "prompt_ms")) > 0 &&
              cJSON_GetNumberValue(cJSON_GetObjectItem(t, "predicted_ms")) >= 1.0, "stop whole timings: %s", r.body);
    cJSON_Delete(j);
    free(r.body);
    free(b);
    int c = wait_cancels(fb, c0 + 1);
    CHECK(c == c0 + 1, "a whole answer cut by a stop sequence: %d backend jobs cancelled, want 1", c - c0);
    b = chat_body(100000, 1, "\"stop\":[\"t4 \"]");
    r = request("POST", "/v1/chat/completions", KEY, b);
    char finish[16];
    int total, ok;
    char *got = stream_text(r.body, finish, &total, &ok);
    CHECK(ok && !strcmp(got, "t0 t1 t2 t3 ") && !strcmp(finish, "stop"), "stop stream: '%s' %s", got, finish);
    free(got);
    free(r.body);
    free(b);
    c = wait_cancels(fb, c0 + 2);
    CHECK(c == c0 + 2, "a stream cut by a stop sequence: %d backend jobs cancelled, want 1", c - c0 - 1);
    long used = -1;
    for (int w = 0; w < 1000 && used != 0; w++) {
        used = metric("omni_kv_pages_used{format=\"int2\"} ");
        if (used) usleep(10000);
    }
    CHECK(used == 0, "pages in use after the stop-sequence answers: %ld", used);
}

/* A client that waits for "100 Continue" before sending a body over the limit gets the 413 at once. */
static void test_expect_continue(void) {
    int fd = connect_server();
    char head[512];
    int n = snprintf(head, sizeof head, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     KEY "\r\nContent-Type: application/json\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n");
    CHECK(fd >= 0 && write(fd, head, (size_t)n) == n, "expect: send");
    char buf[2048] = "";
    if (fd >= 0) read_all(fd, buf, sizeof buf); /* the server must answer (and close) without the body */
    CHECK(!strncmp(buf, "HTTP/1.1 413", 12) && strstr(buf, "request_too_large"),
          "Expect: 100-continue over the limit: %.200s", buf);
    if (fd >= 0) close(fd);
    /* an unknown path with bytes that are not UTF-8: the 404's JSON stays UTF-8 */
    http_resp r = request("GET", "/v1/%FF%FEx", KEY, NULL);
    cJSON *j = cJSON_Parse(r.body);
    CHECK(r.status == 404 && llm_utf8_valid_len(r.body, r.len) == r.len && j, "404 JSON for a non-UTF-8 path: %s",
          r.body);
    cJSON_Delete(j);
    free(r.body);
    expect_health("Expect: 100-continue");
}

typedef struct {
    int stream;
    http_resp r;
} inflight_arg;

static void *inflight_client(void *p) {
    inflight_arg *a = p;
    char *b = chat_body(100000, a->stream, NULL);
    a->r = request("POST", "/v1/chat/completions", KEY, b);
    free(b);
    return NULL;
}

/* Shutdown with a whole and a streamed request in flight: srv_stop answers both (503; the stream's error event and
 * [DONE]) before it closes their connections, and cancels their jobs. */
static void test_shutdown(srv_server *s, fake_backend *fb) {
    int c0 = cancels_now(fb);
    pthread_t th[2];
    inflight_arg a[2] = {{0, {0}}, {1, {0}}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, inflight_client, &a[i]);
    for (int w = 0; w < 1000 && metric("omni_requests_running ") < 2; w++) usleep(10000);
    CHECK(metric("omni_requests_running ") == 2, "shutdown: the two requests are not running");
    srv_stop(s);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    expect_error("whole request at shutdown", a[0].r, 503, NULL);
    http_resp *r = &a[1].r;
    CHECK(r->status == 200 && strstr(r->body, "data: {\"error\":") && strstr(r->body, "shutting down") &&
              r->len >= 14 && !strcmp(r->body + r->len - 14, "data: [DONE]\n\n"),
          "stream at shutdown: %d ...%s", r->status, r->len > 300 ? r->body + r->len - 300 : r->body);
    free(r->body);
    int c = wait_cancels(fb, c0 + 2);
    CHECK(c == c0 + 2, "shutdown: %d jobs cancelled, want 2", c - c0);
}

/* ---- CORS, llama-server's endpoints ------------------------------------------------------------------------------ */

/* `req` sent on a new connection; what comes back until the server closes (or the 20 s read timeout). */
static size_t exchange(const char *req, char *out, size_t cap) {
    out[0] = 0;
    int fd = connect_server();
    if (fd < 0) return 0;
    size_t n = strlen(req);
    size_t got = write(fd, req, n) == (ssize_t)n ? read_all(fd, out, cap) : 0;
    close(fd);
    return got;
}

/* Every answer carries Access-Control-Allow-Origin (errors and streams too, or a browser cannot read them); an
 * OPTIONS preflight is answered 204 without the API key, with the methods and the headers asked for. */
static void test_cors(void) {
    char raw[8192];
    exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 200", 12) && strstr(raw, "Access-Control-Allow-Origin: *\r\n"), "CORS on /health: %.300s",
          raw);
    exchange("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 401", 12) && strstr(raw, "Access-Control-Allow-Origin: *\r\n"), "CORS on a 401: %.300s",
          raw);
    exchange("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://example.com\r\n"
             "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n"
             "Connection: close\r\n\r\n", raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 204", 12) && strstr(raw, "Access-Control-Allow-Origin: *\r\n") &&
              strstr(raw, "Access-Control-Allow-Headers: authorization, content-type\r\n") &&
              strstr(raw, "Access-Control-Allow-Methods: GET, HEAD, POST, OPTIONS\r\n") &&
              strstr(raw, "Allow: POST, OPTIONS\r\n") && strstr(raw, "Access-Control-Max-Age: "),
          "preflight: %.600s", raw);
    /* a header list that is not one is not echoed */
    exchange("OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: http://example.com\r\n"
             "Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: x\"<y>\r\nConnection: close\r\n\r\n",
             raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 204", 12) && strstr(raw, "Access-Control-Allow-Headers: Authorization, Content-Type\r\n"),
          "preflight with odd headers: %.600s", raw);
    exchange("OPTIONS /v2/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 404", 12), "preflight of an unknown path: %.300s", raw);
    char *b = chat_body(3, 1, NULL);
    int fd = connect_server();
    raw[0] = 0;
    if (fd >= 0 && !send_request(fd, "POST", "/v1/chat/completions", KEY, b, strlen(b))) read_all(fd, raw, sizeof raw);
    if (fd >= 0) close(fd);
    free(b);
    CHECK(!strncmp(raw, "HTTP/1.1 200", 12) && strstr(raw, "text/event-stream") &&
              strstr(raw, "Access-Control-Allow-Origin: *\r\n"), "CORS on a stream: %.300s", raw);
}

/* Bodies whose length is ambiguous (request smuggling) are refused before they are read: Content-Length twice
 * with different values or beside Transfer-Encoding (400), a transfer coding other than chunked (501); an
 * absolute-form target ("GET http://host/health", which HTTP/1.1 servers must accept) is served. */
static void test_framing(void) {
    const char *b = "{\"prompt\":\"x\",\"max_tokens\":2}";
    char req[1024], raw[4096];
    const char *bad[][2] = {{"Content-Length: 30\r\nContent-Length: 5\r\n", "HTTP/1.1 400"},
                            {"Content-Length: 30\r\nTransfer-Encoding: chunked\r\n", "HTTP/1.1 400"},
                            {"Transfer-Encoding: gzip\r\n", "HTTP/1.1 501"},
                            {"Transfer-Encoding: gzip, chunked\r\n", "HTTP/1.1 501"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n%s"
                 "Connection: close\r\n\r\n%s", bad[i][0], b);
        exchange(req, raw, sizeof raw);
        CHECK(!strncmp(raw, bad[i][1], 12) && strstr(raw, "\"code\":\"bad_request\""), "%s: %.300s", bad[i][0], raw);
    }
    snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n"
             "Content-Length: %zu\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(b), strlen(b), b);
    exchange(req, raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 200", 12), "the same Content-Length twice: %.300s", raw);
    exchange("GET http://127.0.0.1:9/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 200", 12) && strstr(raw, "\"ok\""), "absolute-form target: %.300s", raw);
    exchange("GET HTTPS://h/v1/models?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\nConnection: close"
             "\r\n\r\n", raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 200", 12) && strstr(raw, "\"fake\""), "absolute-form https target: %.300s", raw);
    expect_health("framing errors");
}

static cJSON *json_of(http_resp r, int status, const char *what) {
    cJSON *j = cJSON_Parse(r.body);
    CHECK(r.status == status && j, "%s: %d %s", what, r.status, r.body);
    free(r.body);
    return j;
}

/* /tokenize and /detokenize (llama-server's shapes) give the tokenizer's ids and text; /props the context, slots
 * and modalities. */
static void test_tokenize(const llm_tokenizer *tok) {
    const char *text = "Hello world, ünïcödé <|im_start|>";
    int32_t *want;
    int nw;
    CHECK(llm_tokenizer_encode(tok, text, strlen(text), 1, &want, &nw, NULL) == 0 && nw > 3, "encode");
    char body[512];
    snprintf(body, sizeof body, "{\"content\":\"%s\"}", text);
    cJSON *j = json_of(request("POST", "/tokenize", KEY, body), 200, "tokenize");
    cJSON *t = cJSON_GetObjectItem(j, "tokens");
    int same = cJSON_GetArraySize(t) == nw;
    for (int i = 0; same && i < nw; i++) same = cJSON_GetArrayItem(t, i)->valueint == want[i];
    CHECK(same, "tokenize: not the tokenizer's %d ids", nw);
    /* detokenize them back */
    char ids[2048] = "{\"tokens\":[";
    for (int i = 0; i < nw; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", want[i]);
    strcat(ids, "]}");
    cJSON_Delete(j);
    j = json_of(request("POST", "/detokenize", KEY, ids), 200, "detokenize");
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "content")) ?: "", text), "detokenize round trip: %s",
          cJSON_GetStringValue(cJSON_GetObjectItem(j, "content")));
    cJSON_Delete(j);
    /* pieces: their bytes (strings, or byte arrays for part of a character) concatenate to the text */
    snprintf(body, sizeof body, "{\"content\":\"%s\",\"with_pieces\":true,\"add_special\":false}", text);
    j = json_of(request("POST", "/tokenize", KEY, body), 200, "tokenize with pieces");
    char cat[512] = "";
    size_t o = 0;
    cJSON *it;
    int k = 0, ids_ok = 1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "tokens")) {
        cJSON *pc = cJSON_GetObjectItem(it, "piece");
        ids_ok &= k < nw && cJSON_GetObjectItem(it, "id")->valueint == want[k++];
        if (cJSON_IsString(pc)) o += (size_t)snprintf(cat + o, sizeof cat - o, "%s", pc->valuestring);
        cJSON *bv;
        if (cJSON_IsArray(pc)) cJSON_ArrayForEach(bv, pc) cat[o++] = (char)bv->valueint;
        cat[o] = 0;
    }
    CHECK(ids_ok && k == nw && !strcmp(cat, text), "pieces: '%s'", cat);
    cJSON_Delete(j);
    /* parse_special false: <|im_start|> is text */
    j = json_of(request("POST", "/tokenize", KEY, "{\"content\":\"<|im_start|>\",\"parse_special\":false}"), 200,
                "tokenize parse_special false");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) > 1, "parse_special false kept the special token");
    cJSON_Delete(j);
    free(want);
    const char *bad[][2] = {{"/tokenize", "{}"}, {"/tokenize", "{\"content\":5}"},
                            {"/tokenize", "{\"content\":\"x\",\"with_pieces\":1}"}, {"/tokenize", "[\"x\"]"},
                            {"/detokenize", "{\"tokens\":[-1]}"}, {"/detokenize", "{\"tokens\":[1.5]}"},
                            {"/detokenize", "{\"tokens\":[99999999]}"}, {"/detokenize", "{\"tokens\":\"1 2\"}"},
                            {"/detokenize", "{\"tokens\":[\"1\"]}"}, {"/detokenize", "{}"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s %s", bad[i][0], bad[i][1]);
        expect_error(what, request("POST", bad[i][0], KEY, bad[i][1]), 400, NULL);
    }
    expect_error("tokenize without key", request("POST", "/tokenize", NULL, "{\"content\":\"x\"}"), 401, NULL);
    expect_error("GET /tokenize", request("GET", "/tokenize", KEY, NULL), 405, NULL);
    j = json_of(request("POST", "/detokenize", KEY, "{\"tokens\":[]}"), 200, "detokenize []");
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "content")) ?: "x", ""), "detokenize []");
    cJSON_Delete(j);
    j = json_of(request("GET", "/props", KEY, NULL), 200, "props");
    cJSON *d = cJSON_GetObjectItem(j, "default_generation_settings"), *m = cJSON_GetObjectItem(j, "modalities");
    CHECK(cJSON_GetObjectItem(d, "n_ctx") && cJSON_GetObjectItem(d, "n_ctx")->valueint == 1234 &&
              cJSON_GetObjectItem(j, "total_slots")->valueint == 7 &&
              cJSON_IsTrue(cJSON_GetObjectItem(m, "vision")) && cJSON_IsFalse(cJSON_GetObjectItem(m, "audio")) &&
              !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "model_path")) ?: "", "fake") &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(d, "params"), "temperature"),
          "props: %s", cJSON_PrintUnformatted(j));
    cJSON_Delete(j);
}

/* ---- what clients may hold --------------------------------------------------------------------------------------- */

static srv_server *restart(srv_server *old, const srv_params *p, fake_backend *fb) {
    if (old) srv_stop(old);
    srv_backend be = {fb, fake_submit, fake_cancel, fake_stats};
    srv_server *s = NULL;
    CHECK(srv_start(p, &be, &s) == 0, "restart: %s", omni_last_error());
    g_port = s ? srv_port(s) : 0;
    return s;
}

/* A whole answer and a stream's first token that take longer than idle_timeout_s (1 s) to come are still sent:
 * waiting for the engine is not a client's idleness (libmicrohttpd closed such connections unanswered). */
static void test_long_whole(fake_backend *fb, srv_params p) {
    p.idle_timeout_s = 1;
    srv_server *s = restart(NULL, &p, fb);
    char *b = chat_body(2500, 0, NULL); /* 2500 tokens 1 ms apart: > 2.5 s */
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    CHECK(r.status == 200 && strstr(r.body, "t2499 "), "a whole answer slower than the idle timeout: %d %.200s",
          r.status, r.body);
    free(r.body);
    free(b);
    /* a stream held by the backend for 2 s before its first token */
    pthread_mutex_lock(&fb->mu);
    fb->hold = 1;
    pthread_mutex_unlock(&fb->mu);
    b = chat_body(3, 1, NULL);
    int fd = connect_server();
    int sent = fd >= 0 && !send_request(fd, "POST", "/v1/chat/completions", KEY, b, strlen(b));
    free(b);
    usleep(2000000);
    pthread_mutex_lock(&fb->mu);
    fb->hold = 0;
    pthread_cond_broadcast(&fb->cv);
    pthread_mutex_unlock(&fb->mu);
    r = sent ? read_response(fd) : (http_resp){-1, strdup(""), 0};
    CHECK(r.status == 200 && strstr(r.body, "t2 ") && strstr(r.body, "[DONE]"), "a stream whose first token came "
          "after the idle timeout: %d %.300s", r.status, r.body);
    free(r.body);
    srv_stop(s);
}

/* A connection that has sent headers and part of a body of `cl` bytes (the rest never comes). */
static int partial_body(int cl) {
    int fd = connect_server();
    char head[512];
    int n = snprintf(head, sizeof head, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY
                     "\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"messages\":", cl);
    if (fd >= 0 && write(fd, head, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A body of exactly n bytes: a chat request padded with spaces. */
static char *padded_body(size_t n) {
    char *b = chat_body(2, 0, NULL);
    size_t k = strlen(b);
    b = realloc(b, n + 1);
    memset(b + k, ' ', n - k);
    b[n] = 0;
    return b;
}

/* Many clients each sending a body under the per-request limit cannot make the server hold more than max_held:
 * the request that would go past it gets 503 server_busy (declared length or chunked), the others go on, and
 * every byte is given back when their clients leave. */
static void test_held(fake_backend *fb, srv_params p) {
    p.max_body = 8192;
    p.max_held = 30000;
    srv_server *s = restart(NULL, &p, fb);
    int fd[4];
    for (int i = 0; i < 4; i++) fd[i] = partial_body(7000);
    long held = 0;
    for (int w = 0; w < 500 && held != 28004; w++) { /* 4 x 7000 and their NULs */
        held = metric("omni_request_bytes_held ");
        if (held != 28004) usleep(10000);
    }
    CHECK(held == 28004, "bytes held with 4 bodies of 7000 on the way: %ld", held);
    char *b = padded_body(7000);
    expect_error("a body past the memory cap", request("POST", "/v1/chat/completions", KEY, b), 503, "server_busy");
    char raw[4096], chunked[4096]; /* a chunk of 3000 bytes: past the 1996 left */
    int n = snprintf(chunked, sizeof chunked, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                     "Bearer " KEY "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nbb8\r\n");
    memset(chunked + n, ' ', 3000);
    strcpy(chunked + n + 3000, "\r\n0\r\n\r\n");
    exchange(chunked, raw, sizeof raw);
    CHECK(!strncmp(raw, "HTTP/1.1 503", 12) && strstr(raw, "server_busy") && strstr(raw, "Retry-After: 1"),
          "a chunked body past the memory cap: %.300s", raw);
    expect_health("the memory cap");
    for (int i = 0; i < 4; i++)
        if (fd[i] >= 0) close(fd[i]);
    for (int w = 0; w < 500 && (held = metric("omni_request_bytes_held ")) != 0; w++) usleep(10000);
    CHECK(held == 0, "bytes held after the clients left: %ld", held);
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    CHECK(r.status == 200, "a body of 7000 after the others left: %d %s", r.status, r.body);
    free(r.body);
    free(b);
    CHECK(metric("omni_request_bytes_held ") == 0, "bytes held after an answer");
    srv_stop(s);
}

typedef struct {
    const char *first;  /* sent at once */
    const char *drip;   /* then one byte of it every 100 ms (cycled) */
    double seconds;     /* until the server closes */
    char reply[1024];
} slow_arg;

static void *slow_client(void *p) {
    slow_arg *a = p;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    a->seconds = -1;
    a->reply[0] = 0;
    int fd = connect_server();
    if (fd < 0) return NULL;
    if (a->first[0] && write(fd, a->first, strlen(a->first)) < 0) {
        close(fd);
        return NULL;
    }
    size_t k = 0, n = strlen(a->drip);
    for (int i = 0; i < 150; i++) { /* <= 15 s */
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) > 0) break; /* an answer, or the close */
        if (n && send(fd, a->drip + k++ % n, 1, MSG_NOSIGNAL) < 0) break;
    }
    read_all(fd, a->reply, sizeof a->reply);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    a->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    close(fd);
    return NULL;
}

/* Slow clients (head_timeout_s 1, body_min_rate 1000): a silent connection, a head trickled byte by byte and a body
 * trickled at 10 bytes/s are closed after ~1 s (the body with a 408), while other clients are answered at once;
 * a body that keeps a good rate, and a keep-alive connection used twice, are not cut. */
static void test_slow(fake_backend *fb, srv_params p) {
    p.head_timeout_s = 1;
    p.body_min_rate = 1000;
    srv_server *s = restart(NULL, &p, fb);
    slow_arg a[3] = {{"", "", 0, ""},
                     {"GET /health HTTP/1.1\r\nHost: x\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaa\r\n", 0, ""},
                     {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n"
                      "Content-Length: 5000\r\n\r\n", "{", 0, ""}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, slow_client, &a[i]);
    for (int i = 0; i < 5; i++) { /* the others meanwhile */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        expect_health("slow clients");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        CHECK(dt < 5, "a request beside slow clients took %.2f s", dt);
        usleep(100000);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    const char *what[3] = {"silent connection", "trickled head", "trickled body"};
    for (int i = 0; i < 3; i++)
        CHECK(a[i].seconds >= 0.8 && a[i].seconds < 8, "%s closed after %.2f s", what[i], a[i].seconds);
    CHECK(a[0].reply[0] == 0 && a[1].reply[0] == 0, "a slow head got an answer: '%.100s' '%.100s'", a[0].reply,
          a[1].reply);
    CHECK(!strncmp(a[2].reply, "HTTP/1.1 408", 12) && strstr(a[2].reply, "request_timeout"), "trickled body: %.300s",
          a[2].reply);
    CHECK(metric("omni_connections_closed_total{reason=\"slow\"} ") == 3, "slow closes in /metrics");
    /* a body at a good rate (3 pieces 0.4 s apart: 1.2 s in all, over head_timeout_s) is not cut */
    char *b = padded_body(3000);
    int fd = connect_server();
    char head[256];
    int n = snprintf(head, sizeof head, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY
                     "\r\nConnection: close\r\nContent-Length: 3000\r\n\r\n");
    int ok = fd >= 0 && write(fd, head, (size_t)n) == n;
    for (int i = 0; ok && i < 3; i++) {
        usleep(400000);
        ok = write(fd, b + i * 1000, 1000) == 1000;
    }
    char raw[4096] = "";
    if (ok) read_all(fd, raw, sizeof raw);
    if (fd >= 0) close(fd);
    CHECK(!strncmp(raw, "HTTP/1.1 200", 12), "a body at 2500 bytes/s: %.300s", raw);
    free(b);
    /* keep-alive: two requests 0.6 s apart on one connection (the head timer restarts after each answer) */
    fd = connect_server();
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    int got = 0;
    for (int i = 0; fd >= 0 && i < 2; i++) {
        if (i) usleep(600000);
        if (write(fd, get, strlen(get)) != (ssize_t)strlen(get)) break;
        ssize_t k = read(fd, raw, sizeof raw - 1);
        raw[k > 0 ? k : 0] = 0;
        got += !strncmp(raw, "HTTP/1.1 200", 12);
    }
    if (fd >= 0) close(fd);
    CHECK(got == 2, "keep-alive requests answered: %d of 2", got);
    srv_stop(s);
}

/* max_connections 4: a fifth connection closes the oldest idle one; when every connection is busy, the new
 * request gets 503 too_many_connections; once they end, requests are served again. */
static void test_connections(fake_backend *fb, srv_params p) {
    p.max_connections = 4;
    p.max_queue = 64;
    srv_server *s = restart(NULL, &p, fb);
    int idle[4];
    for (int i = 0; i < 4; i++) idle[i] = connect_server();
    usleep(200000);
    expect_health("4 idle connections"); /* closes the oldest idle one */
    char c;
    struct timeval tv = {5, 0};
    setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    CHECK(read(idle[0], &c, 1) == 0, "the oldest idle connection was not closed to make room");
    for (int i = 0; i < 4; i++) close(idle[i]);
    /* 4 streams held by the backend: nothing to close */
    pthread_mutex_lock(&fb->mu);
    fb->hold = 1;
    pthread_mutex_unlock(&fb->mu);
    int fd[4];
    char *b = chat_body(3, 1, NULL);
    for (int i = 0; i < 4; i++) {
        fd[i] = connect_server();
        if (fd[i] >= 0) send_request(fd[i], "POST", "/v1/chat/completions", KEY, b, strlen(b));
    }
    free(b);
    int live = 0; /* (not through /metrics: a fifth connection now gets 503) */
    for (int w = 0; w < 1000 && live < 4; w++) {
        pthread_mutex_lock(&fb->mu);
        live = 0;
        for (int i = 0; i < fb->n; i++) live += fb->jobs[i].job != NULL;
        pthread_mutex_unlock(&fb->mu);
        if (live < 4) usleep(10000);
    }
    CHECK(live == 4, "held streams: %d of 4", live);
    expect_error("a fifth connection", request("GET", "/health", NULL, NULL), 503, "too_many_connections");
    pthread_mutex_lock(&fb->mu);
    fb->hold = 0;
    pthread_cond_broadcast(&fb->cv);
    pthread_mutex_unlock(&fb->mu);
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        http_resp r = fd[i] >= 0 ? read_response(fd[i]) : (http_resp){-1, strdup(""), 0};
        ok += r.status == 200 && strstr(r.body, "[DONE]") != NULL;
        free(r.body);
    }
    CHECK(ok == 4, "%d of 4 held streams answered", ok);
    expect_health("the connection limit");
    srv_stop(s);
}

/* A client that never reads its stream: once the socket is full, the connection is closed after idle_timeout_s and
 * the job cancelled (its pages back), while others are served. */
static void test_unread(fake_backend *fb, srv_params p) {
    p.idle_timeout_s = 1;
    srv_server *s = restart(NULL, &p, fb);
    int c0 = cancels_now(fb);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"BIGTOKENS\"}],\"max_tokens\":100000,"
                       "\"stream\":true}";
    int ok = !connect(fd, (struct sockaddr *)&a, sizeof a) &&
             !send_request(fd, "POST", "/v1/chat/completions", KEY, body, strlen(body));
    CHECK(ok, "unread stream: send");
    int c = wait_cancels(fb, c0 + 1); /* <= 10 s */
    for (int w = 0; w < 2000 && c < c0 + 1; w++) { /* a slow machine: up to 20 s more */
        usleep(10000);
        c = cancels_now(fb);
    }
    CHECK(c == c0 + 1, "the job of an unread stream was not cancelled");
    expect_health("an unread stream");
    long used = -1;
    for (int w = 0; w < 500 && used != 0; w++) {
        used = metric("omni_kv_pages_used{format=\"int2\"} ");
        if (used) usleep(10000);
    }
    CHECK(used == 0, "pages in use after an unread stream: %ld", used);
    close(fd);
    srv_stop(s);
}

int main(void) {
    if (getenv("OMNI_TEST_VERBOSE")) omni_log_set_level(2); /* libmicrohttpd's messages too */
    fake_backend fb;
    memset(&fb, 0, sizeof fb);
    pthread_mutex_init(&fb.mu, NULL);
    pthread_cond_init(&fb.cv, NULL);
    pthread_create(&fb.th, NULL, fake_worker, &fb);
    srv_backend be = {&fb, fake_submit, fake_cancel, fake_stats};
    llm_tokenizer *tok = NULL;
    CHECK(llm_tokenizer_load(OMNI_FIXTURES "/tok-small/tokenizer.json", &tok) == 0, "tokenizer: %s", omni_last_error());
    srv_params p = srv_default_params();
    p.port = 0;
    p.api_key = KEY;
    p.model_id = "fake";
    p.max_body = 8192;
    p.max_queue = 2;
    p.parse.max_tokens = 100000;
    p.tok = tok;
    p.props = (srv_props){NULL, "omni test", 1234, 7, 1, 0, 0, 0, 0, 0};
    srv_params base = p;
    srv_server *s = NULL;
    omni_status st = srv_start(&p, &be, &s);
    CHECK(st == 0 && s, "start: %s", omni_last_error());
    if (st) return check_exit();
    g_port = srv_port(s);
    CHECK(g_port > 0, "port %d", g_port);
    test_routes();
    test_whole_and_stream();
    test_concurrent();
    test_disconnect(&fb);
    test_queue(&fb);
    test_stop_cancels(&fb);
    test_expect_continue();
    test_cors();
    test_framing();
    test_tokenize(tok);
    test_shutdown(s, &fb);

    /* a request timeout: a 0.3 s limit on a 100000-token job gives 408 and cancels it */
    p.timeout_s = 0.3;
    p.port = 0;
    CHECK(srv_start(&p, &be, &s) == 0, "restart: %s", omni_last_error());
    g_port = srv_port(s);
    char *b = chat_body(100000, 0, NULL);
    expect_error("timeout", request("POST", "/v1/chat/completions", KEY, b), 408, NULL);
    free(b);
    /* a stream is held to it too, although its tokens keep coming (one every ms) */
    b = chat_body(100000, 1, NULL);
    http_resp r = request("POST", "/v1/chat/completions", KEY, b);
    CHECK(r.status == 200 && strstr(r.body, "\"type\":\"timeout_error\"") && r.len >= 14 &&
              !strcmp(r.body + r.len - 14, "data: [DONE]\n\n"),
          "stream timeout: %d ...%s", r.status, r.len > 300 ? r.body + r.len - 300 : r.body);
    free(r.body);
    free(b);
    expect_health("a timeout");
    srv_stop(s);
    srv_stop(NULL);
    test_long_whole(&fb, base);
    test_held(&fb, base);
    test_slow(&fb, base);
    test_connections(&fb, base);
    test_unread(&fb, base);
    llm_tokenizer_free(tok);

    /* every job the server handed over is ended by the backend (cancelled ones too) before the worker stops */
    int live = 1;
    for (int w = 0; w < 500 && live; w++) {
        pthread_mutex_lock(&fb.mu);
        live = fb.n;
        pthread_mutex_unlock(&fb.mu);
        if (live) usleep(10000);
    }
    CHECK(live == 0, "%d jobs never ended", live);
    pthread_mutex_lock(&fb.mu);
    fb.stop = 1;
    pthread_cond_broadcast(&fb.cv);
    pthread_mutex_unlock(&fb.mu);
    pthread_join(fb.th, NULL);
    return check_exit();
}
