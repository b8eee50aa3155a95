/* cmd_serve.c - `omni serve -m MODEL`: the OpenAI-compatible HTTP server (app/server) on the batched engine.
 *
 * The engine steps on a worker thread; libmicrohttpd's connection threads submit requests and receive tokens
 * through the engine's callbacks (app/server/backend.c). Ctrl+C or SIGTERM stops the server: connections in
 * flight are answered 503 / their streams end, the engine stops, everything is freed (exit 130 / 0). While the
 * model loads, either stops the start after the step under way, before anything listens (same exit codes). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "app/commands.h"
#include "app/media.h"
#include "app/model_path.h"
#include "app/server/backend.h"
#include "app/server/server.h"
#include "llm/engine.h"

static volatile sig_atomic_t g_term = 0;

static void on_sigterm(int sig) {
    (void)sig;
    g_term = 1;
}

/* Server defaults (README): 127.0.0.1:8080, 8 sequences at once, 64 waiting, 2048 tokens per answer, 64 MiB
 * bodies, 10 minutes per request, 20 min of audio and 64 Mpixel images per item. */
void serve_defaults(omni_args *a) {
    a->host = "127.0.0.1";
    a->port = 8080;
    a->max_seqs = 8;
    a->max_queue = 64;
    a->max_tokens = 2048;
    a->max_body_mib = 64;
    a->timeout_s = 600;
    a->max_audio_s = 1200;
    a->max_image_mpix = 64;
}

/* The name clients use: the repo id as given (Org/Name), or a directory's last component. */
static void model_name(const char *arg, char *out, size_t cap) {
    size_t n = strlen(arg);
    while (n > 1 && arg[n - 1] == '/') n--;
    const char *b = arg;
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
        for (size_t i = 0; i + 1 < n; i++)
            if (arg[i] == '/') b = arg + i + 1;
    snprintf(out, cap, "%.*s", (int)(n - (size_t)(b - arg)), b);
}

/* --kv MODE and the --kv-* switches (as the other commands read them). */
static omni_status cache_params(const omni_args *a, const llm_model *m, llm_cache_params *cp, kv_format **layers) {
    *layers = NULL;
    omni_status st = kv_parse_mode(a->kv, &cp->fmt);
    if (st) return st;
    if (a->kv_window >= 0) cp->fmt.window = a->kv_window;
    if (a->kv_sink >= 0) cp->fmt.n_sink = a->kv_sink;
    if (a->kv_rotate >= 0) cp->fmt.rotate = a->kv_rotate;
    if (a->kv_scale >= 0) cp->fmt.scale = a->kv_scale;
    if (a->kv_layers) {
        int nl = llm_model_config(m)->n_layers;
        if (!(*layers = malloc(sizeof **layers * (size_t)nl))) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        if ((st = kv_parse_layer_overrides(a->kv_layers, &cp->fmt, nl, *layers))) return st;
        cp->layer_fmt = *layers;
    }
    cp->budget_bytes = (int64_t)(a->kv_mem_gib * 1073741824.0);
    cp->ctx_tokens = a->ctx;
    cp->max_seqs = a->max_seqs;
    return OMNI_OK;
}

static void *engine_thread(void *e) {
    if (llm_engine_run(e)) omni_log(0, "error: engine: %s\n", omni_last_error());
    return NULL;
}

typedef struct {
    char dir[4096], name[512];
    llm_model *model;
    llm_tokenizer *tok;
    llm_engine *engine;
    int cache;
} serve_state;

/* SIGTERM or Ctrl+C: the server stops (while it starts: after the step under way, before it listens). */
static int stop_asked(volatile int *intr) { return *intr || g_term; }

/* Load the model, its tokenizer, the engine and its cache; a stop asked in between leaves OMNI_OK with what was
 * loaded (the caller frees it and does not serve). */
static omni_status open_engine(const omni_args *a, serve_state *s, volatile int *intr) {
    omni_status st = omni_resolve_model(a->model, s->dir, sizeof s->dir);
    if (!st && !stop_asked(intr)) st = llm_model_load(s->dir, &s->model);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", s->dir);
    if (!st && !stop_asked(intr)) st = llm_tokenizer_load(path, &s->tok);
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.max_seqs = a->max_seqs;
    if (a->threads > 0) ep.runner.n_threads = a->threads;
    ep.tok = s->tok;
    if (!st && !stop_asked(intr)) st = llm_engine_init(s->model, &ep, &s->engine);
    llm_cache_params cp = llm_cache_default_params();
    kv_format *layers = NULL;
    if (!st && !stop_asked(intr)) st = cache_params(a, s->model, &cp, &layers);
    if (!st && !stop_asked(intr)) st = llm_engine_add_cache(s->engine, &cp, &s->cache);
    free(layers);
    return st;
}

static void log_ready(const omni_args *a, const serve_state *s, int keyed, int port) {
    llm_cache_stats cs;
    if (llm_engine_cache_stats(s->engine, s->cache, &cs) == OMNI_OK)
        omni_log(1, "serve: model '%s', KV %s, budget %.2f MiB, up to %d sequences of %d tokens\n", s->name,
                 cs.format, cs.budget_bytes / 1048576.0, a->max_seqs, a->ctx);
    const char *h = a->host;
    int v6 = strchr(h, ':') != NULL;
    omni_log(0, "serve: listening on http://%s%s%s:%d%s\n", v6 ? "[" : "", h, v6 ? "]" : "", port,
             keyed ? " (API key required)" : "");
}

/* Serve until Ctrl+C (*intr) or SIGTERM. */
static omni_status serve(const omni_args *a, serve_state *s, srv_engine_backend *be, volatile int *intr) {
    srv_params p = srv_default_params();
    p.host = a->host;
    p.port = a->port;
    p.api_key = a->api_key ? a->api_key : getenv("OMNI_API_KEY"); /* neither empty (cmd_serve) */
    p.model_id = a->alias ? a->alias : s->name;
    p.model_alias = a->alias ? s->name : NULL;
    p.parse.max_tokens = a->max_tokens;
    p.parse.temperature = a->temp; /* defaults of requests that give none: --temp, --top-p, --top-k */
    p.parse.top_p = a->top_p;
    p.parse.top_k = a->top_k;
    p.parse.allow_files = a->allow_files;
    p.max_body = (size_t)(a->max_body_mib * 1048576.0);
    p.timeout_s = a->timeout_s;
    p.max_queue = a->max_queue;
    p.tok = s->tok;
    p.props.n_ctx = a->ctx;
    p.props.total_slots = a->max_seqs;
    p.props.vision = media_check_support(s->model, 1, 0) == OMNI_OK;
    p.props.audio = media_check_support(s->model, 0, 1) == OMNI_OK;
    p.props.build = "omni " OMNI_VERSION;
    srv_backend api = srv_engine_backend_api(be);
    srv_server *srv = NULL;
    omni_status st = srv_start(&p, &api, &srv);
    if (st) return st;
    log_ready(a, s, p.api_key != NULL, srv_port(srv));
    while (!*intr && !g_term) nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    omni_log(1, "serve: stopping\n");
    srv_stop(srv);
    return OMNI_OK;
}

omni_status cmd_serve(const omni_args *a, volatile int *intr) {
    if (!a->model) return omni_fail(OMNI_ERR_USAGE, "usage: omni serve -m MODEL [--host H] [--port N] ...");
    const char *env_key = getenv("OMNI_API_KEY");
    if (!a->api_key && env_key && !env_key[0]) /* set but empty: the key meant to guard the server is missing */
        return omni_fail(OMNI_ERR_USAGE, "OMNI_API_KEY is set but empty (the server would take every request; unset "
                         "it to serve without a key)");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that left must not kill the server */
    serve_state s;
    memset(&s, 0, sizeof s);
    model_name(a->model, s.name, sizeof s.name);
    omni_log(1, "serve: loading %s\n", a->model);
    omni_status st = open_engine(a, &s, intr);
    srv_engine_backend *be = NULL;
    srv_engine_params bp = {s.dir, s.model, s.tok, s.engine, s.cache, a->ctx, (int64_t)(a->max_image_mpix * 1e6),
                            a->max_audio_s, a->image_min_tokens, a->image_max_tokens};
    if (!st && !stop_asked(intr)) st = srv_engine_backend_init(&bp, &be);
    int stopped = !st && stop_asked(intr); /* before serving: nothing to answer */
    if (stopped) omni_log(0, "serve: stopped while loading the model (%s)\n", g_term ? "SIGTERM" : "Ctrl+C");
    pthread_t th;
    int running = !st && !stopped && pthread_create(&th, NULL, engine_thread, s.engine) == 0;
    if (!st && !stopped && !running) st = omni_fail(OMNI_ERR_RUNTIME, "cannot start the engine thread");
    if (!st && !stopped) st = serve(a, &s, be, intr);
    if (running) {
        llm_engine_stop(s.engine);
        pthread_join(th, NULL);
    }
    srv_engine_backend_free(be);
    llm_engine_free(s.engine);
    llm_tokenizer_free(s.tok);
    llm_model_free(s.model);
    return st;
}
