/* demo_worker.h - the model side of `omni demo`: one model and one engine with three KV caches - A, B, and B'
 * (B's format, fed A's tokens for the online KL, exactly like `omni generate --compare`) - on two threads of its
 * own, so that the window never waits for the model:
 *   - the job thread loads models, decodes opened files for their preview, encodes the media of a request, builds
 *     the prompt and submits A, B and B' together (llm_engine_submit_n);
 *   - the engine thread runs llm_engine_run; the engine's callbacks turn into events.
 * The window posts jobs (demo_worker_load / open / run / stop: they return at once) and takes events with
 * demo_worker_poll each frame (never blocks for longer than a queue lock held by a push).
 *
 * Usage:
 *     demo_worker_params p = demo_worker_default_params();  p.args = parsed_args;  p.kv_a = "bf16"; ...
 *     demo_worker *w;  demo_worker_init(&p, &w);      (threads start; nothing is loaded yet)
 *     demo_worker_load(w, "assets/models/ocr");       (DEMO_EV_MODEL or DEMO_EV_ERROR follows)
 *     demo_worker_open(w, "page.png");                (DEMO_EV_MEDIA with a thumbnail, or DEMO_EV_ERROR)
 *     int run = demo_worker_run(w, "Read all the text in the image.", "page.png", NULL);
 *     demo_event ev;  while (demo_worker_poll(w, &ev)) { ...; demo_event_clear(&ev); }   (each frame)
 *     demo_worker_free(w);                            (cancels what runs, joins both threads)
 *
 * Events of a run carry its id: after Stop, Clear or a newer run the window ignores older ids. Pane 0 is A,
 * pane 1 is B. Times are omni_time_ms() taken where the event happened. */
#ifndef OMNI_APP_UI_DEMO_WORKER_H
#define OMNI_APP_UI_DEMO_WORKER_H

#include <stdint.h>

#include "app/args.h"
#include "llm/engine.h"

typedef struct demo_worker demo_worker;

typedef struct {
    omni_args args;   /* device, threads, sampling, -n, -c, --system, KV options, image token budget */
    const char *kv_a; /* formats of the two panes at start (kv_parse_mode names) */
    const char *kv_b;
    int nice;         /* niceness added to the two threads (and the OpenMP threads they start): a window on
                         the same cores keeps its frame rate while the model computes */
} demo_worker_params;

/* kv_a "bf16", kv_b "int2", nice 5; args: omni_args_defaults with greedy sampling. */
demo_worker_params demo_worker_default_params(void);

typedef enum {
    DEMO_EV_MESSAGE = 0, /* text: an information line */
    DEMO_EV_ERROR,       /* text: what failed (a bad file, a model that does not load, a refused request) */
    DEMO_EV_MODEL,       /* a model load ended: model, or failed = 1 and text = why */
    DEMO_EV_MEDIA,       /* a file open ended: media (path always set), or failed = 1 and text = why */
    DEMO_EV_RUN,         /* a request was submitted: run, n_prompt, t_ms (submit time), text = what it carries */
    DEMO_EV_TOKEN,       /* pane, token (-1: final held-back text), text/len, t_ms, kv_tokens/kv_bytes of the cache */
    DEMO_EV_DIVERGENCE,  /* index (generated token), kl, top_a, top_b: B' vs A at that position */
    DEMO_EV_DONE,        /* pane, stats: the pane's request ended */
} demo_event_kind;

typedef struct {
    char dir[4096];
    char name[256];       /* last path component(s) for the selector */
    char type[32];        /* model_type */
    int has_vision, has_audio;
    int n_layers;
    double weight_mib;
    char kv_a[32], kv_b[32];
    char device[16];      /* where the engine runs: "cpu" or "cuda" */
    int threads;          /* CPU threads of its steps */
} demo_model_info;

typedef struct {
    int is_audio;
    char path[4096];
    int64_t file_bytes;
    int width, height;        /* image as decoded */
    int thumb_w, thumb_h;     /* thumbnail: RGB [thumb_h, thumb_w, 3], at most DEMO_THUMB px a side */
    uint8_t *thumb;
    float *samples;           /* audio: 16 kHz mono [n_samples] (owned) */
    int64_t n_samples;
    double duration_s;
    int orig_rate, orig_channels;
} demo_media;

#define DEMO_THUMB 320

typedef struct {
    demo_event_kind kind;
    int failed;
    int run, pane;
    int32_t token;
    char *text; /* malloc'ed, NUL-terminated, or NULL */
    int len;
    double t_ms;
    int n_prompt;
    int64_t kv_tokens, kv_bytes;
    int index, top_a, top_b;
    double kl;
    llm_request_stats stats;
    demo_model_info *model; /* DEMO_EV_MODEL (owned) */
    demo_media *media;      /* DEMO_EV_MEDIA (owned, with its pixels and samples) */
} demo_event;

omni_status demo_worker_init(const demo_worker_params *p, demo_worker **out);
/* Cancels every request, stops and joins both threads, frees the model. NULL is a no-op. */
void demo_worker_free(demo_worker *w);

/* Jobs: queued for the job thread; they return at once. */
void demo_worker_load(demo_worker *w, const char *model_dir);
void demo_worker_set_formats(demo_worker *w, const char *kv_a, const char *kv_b); /* for the next run */
void demo_worker_open(demo_worker *w, const char *path);
/* A request on both panes: prompt text (chat template added), an image and/or an audio file (NULL: none).
 * Cancels the run before it. Returns the run id (> 0) its events will carry. */
int demo_worker_run(demo_worker *w, const char *prompt, const char *image, const char *audio);
/* Cancel the current run (also one still being encoded). */
void demo_worker_stop(demo_worker *w);

/* 1 and *ev filled when an event was waiting (then demo_event_clear it), else 0. */
int demo_worker_poll(demo_worker *w, demo_event *ev);
void demo_event_clear(demo_event *ev);
/* 1 while the job thread has jobs queued or in progress (loading, encoding). */
int demo_worker_busy(demo_worker *w);

#endif
