/* demo_worker.c - the demo's model side: job thread, engine thread, event queue (see demo_worker.h). */
#define _GNU_SOURCE /* gettid */
#include "app/ui/demo_worker.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/divergence.h"
#include "app/media.h"
#include "app/session.h"
#include "audio/audio.h"
#include "llm/prompt.h"
#include "vision/vision.h"

#define RING 16 /* A's distributions waiting for B''s at the same position (the two run in lock-step) */

enum { ROLE_A = 0, ROLE_B = 1, ROLE_B2 = 2 };

typedef enum { JOB_LOAD, JOB_OPEN, JOB_RUN, JOB_STOP } job_kind;

typedef struct job {
    job_kind kind;
    char *path, *prompt, *image, *audio;
    int run, serial;
    struct job *next;
} job;

typedef struct run_ctx run_ctx;
typedef struct {
    run_ctx *rc;
    int role;
} rq_user;

/* One run: three requests over three caches; freed when all three ended (or by the job thread when the engine
 * goes away first). */
struct run_ctx {
    demo_worker *w;
    llm_engine *e;
    int run, n_prompt, V, ndone, lost;
    int ids[3], cache[3];
    rq_user users[3];
    float *ring; /* [RING][V] */
    int ring_pos[RING];
    run_ctx *next;
};

struct demo_worker {
    demo_worker_params p;
    char kv_a[32], kv_b[32];
    pthread_t job_thread, eng_thread;
    int eng_running;
    /* jobs (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    int quit, busy, stop_serial, next_run;
    /* events (qmu) */
    pthread_mutex_t qmu;
    demo_event *q;
    int q_head, q_n, q_cap;
    /* live runs (rmu): the engine thread frees them, the job thread cancels them */
    pthread_mutex_t rmu;
    run_ctx *runs;
    /* job thread only */
    omni_session s;
    int loaded;
    struct {
        char fmt[32];
        int idx;
    } caches[LLM_ENGINE_MAX_CACHES];
    int n_caches;
};

demo_worker_params demo_worker_default_params(void) {
    demo_worker_params p;
    memset(&p, 0, sizeof p);
    omni_args_defaults(&p.args);
    p.args.temp = 0.f;
    p.kv_a = "bf16";
    p.kv_b = "int2";
    p.nice = 5;
    return p;
}

/* ---- events ------------------------------------------------------------------------------------------------ */

static void push(demo_worker *w, const demo_event *ev) {
    pthread_mutex_lock(&w->qmu);
    if (w->q_n == w->q_cap) {
        int cap = w->q_cap ? 2 * w->q_cap : 256;
        demo_event *q = malloc(sizeof *q * (size_t)cap);
        if (!q) { /* out of memory: the event is dropped (its contents freed) */
            pthread_mutex_unlock(&w->qmu);
            demo_event tmp = *ev;
            demo_event_clear(&tmp);
            return;
        }
        for (int i = 0; i < w->q_n; i++) q[i] = w->q[(w->q_head + i) % w->q_cap];
        free(w->q);
        w->q = q, w->q_cap = cap, w->q_head = 0;
    }
    w->q[(w->q_head + w->q_n++) % w->q_cap] = *ev;
    pthread_mutex_unlock(&w->qmu);
}

static char *dup_n(const char *s, int n) {
    char *d = malloc((size_t)n + 1);
    if (d) {
        memcpy(d, s, (size_t)n);
        d[n] = 0;
    }
    return d;
}

static void push_text(demo_worker *w, demo_event_kind k, int run, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void push_text(demo_worker *w, demo_event_kind k, int run, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    demo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = k, ev.run = run, ev.t_ms = omni_time_ms();
    ev.text = dup_n(buf, (int)strlen(buf));
    ev.len = ev.text ? (int)strlen(buf) : 0;
    push(w, &ev);
}

int demo_worker_poll(demo_worker *w, demo_event *ev) {
    pthread_mutex_lock(&w->qmu);
    int got = w->q_n > 0;
    if (got) {
        *ev = w->q[w->q_head];
        w->q_head = (w->q_head + 1) % w->q_cap;
        w->q_n--;
    }
    pthread_mutex_unlock(&w->qmu);
    return got;
}

void demo_event_clear(demo_event *ev) {
    if (!ev) return;
    free(ev->text);
    if (ev->media) free(ev->media->thumb), free(ev->media->samples);
    free(ev->media);
    free(ev->model);
    memset(ev, 0, sizeof *ev);
}

/* ---- engine callbacks (engine thread) ---------------------------------------------------------------------- */

static void cb_token(void *user, int id, int32_t tok, const char *piece, int len) {
    rq_user *u = user;
    run_ctx *rc = u->rc;
    (void)id;
    demo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DEMO_EV_TOKEN, ev.run = rc->run, ev.pane = u->role, ev.token = tok, ev.t_ms = omni_time_ms();
    if (len > 0 && (ev.text = dup_n(piece, len))) ev.len = len;
    llm_cache_stats cs;
    if (!llm_engine_cache_stats(rc->e, rc->cache[u->role], &cs))
        ev.kv_tokens = cs.used_tokens, ev.kv_bytes = cs.used_bytes;
    push(rc->w, &ev);
}

static void cb_logits(void *user, int id, int pos, const float *lg, int V) {
    rq_user *u = user;
    run_ctx *rc = u->rc;
    (void)id;
    int slot = pos % RING;
    if (u->role == ROLE_A) {
        memcpy(rc->ring + (size_t)slot * V, lg, sizeof(float) * (size_t)V);
        rc->ring_pos[slot] = pos;
        return;
    }
    if (rc->ring_pos[slot] != pos) {
        rc->lost++;
        return;
    }
    divergence_row d = divergence_of(rc->ring + (size_t)slot * V, lg, V);
    rc->ring_pos[slot] = -1;
    demo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DEMO_EV_DIVERGENCE, ev.run = rc->run, ev.pane = ROLE_B, ev.t_ms = omni_time_ms();
    ev.index = pos - (rc->n_prompt - 1), ev.kl = d.kl, ev.top_a = d.top_a, ev.top_b = d.top_b;
    push(rc->w, &ev);
}

static void run_free(run_ctx *rc) {
    if (!rc) return;
    free(rc->ring);
    free(rc);
}

/* Unlink rc from the live runs (under rmu). */
static void run_unlink(demo_worker *w, run_ctx *rc) {
    for (run_ctx **pp = &w->runs; *pp; pp = &(*pp)->next)
        if (*pp == rc) {
            *pp = rc->next;
            return;
        }
}

static void cb_done(void *user, int id, const llm_request_stats *st) {
    rq_user *u = user;
    run_ctx *rc = u->rc;
    demo_worker *w = rc->w;
    (void)id;
    if (u->role != ROLE_B2) {
        demo_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = DEMO_EV_DONE, ev.run = rc->run, ev.pane = u->role, ev.t_ms = omni_time_ms(), ev.stats = *st;
        ev.kv_tokens = st->kv_tokens, ev.kv_bytes = st->kv_bytes;
        push(w, &ev);
    } else if (rc->lost) {
        push_text(w, DEMO_EV_ERROR, rc->run, "internal: %d positions lost A's distribution", rc->lost);
    }
    pthread_mutex_lock(&w->rmu);
    int last = ++rc->ndone == 3;
    if (last) run_unlink(w, rc);
    pthread_mutex_unlock(&w->rmu);
    if (last) run_free(rc);
}

/* ---- engine thread ----------------------------------------------------------------------------------------- */

/* Lower this thread's priority (Linux: niceness is per thread and inherited by the threads it starts). */
static void lower_priority(int nice) {
    if (nice > 0) setpriority(PRIO_PROCESS, (id_t)gettid(), nice);
}

static void *engine_main(void *arg) {
    demo_worker *w = arg;
    lower_priority(w->p.nice);
    llm_engine_run(w->s.engine);
    return NULL;
}

static int engine_start(demo_worker *w) {
    if (w->eng_running || !w->s.engine) return 0;
    if (pthread_create(&w->eng_thread, NULL, engine_main, w)) return -1;
    w->eng_running = 1;
    return 0;
}

static void engine_halt(demo_worker *w) {
    if (!w->eng_running) return;
    llm_engine_stop(w->s.engine);
    pthread_join(w->eng_thread, NULL);
    w->eng_running = 0;
}

static void cancel_runs(demo_worker *w) {
    pthread_mutex_lock(&w->rmu);
    for (run_ctx *rc = w->runs; rc; rc = rc->next)
        for (int i = 0; i < 3; i++) llm_engine_cancel(rc->e, rc->ids[i]);
    pthread_mutex_unlock(&w->rmu);
}

/* The engine goes away: runs still listed get no more callbacks. */
static void close_model(demo_worker *w) {
    cancel_runs(w);
    engine_halt(w);
    if (w->loaded) session_close(&w->s);
    memset(&w->s, 0, sizeof w->s);
    pthread_mutex_lock(&w->rmu);
    while (w->runs) {
        run_ctx *rc = w->runs;
        w->runs = rc->next;
        run_free(rc);
    }
    pthread_mutex_unlock(&w->rmu);
    w->loaded = 0;
    w->n_caches = 0;
}

/* ---- jobs (job thread) ------------------------------------------------------------------------------------- */

static void model_name(const char *dir, char *out, int cap) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    char *last = strrchr(tmp, '/');
    if (!last) {
        snprintf(out, (size_t)cap, "%s", tmp);
        return;
    }
    *last = 0;
    char *prev = strrchr(tmp, '/'); /* parent/name: assets/models/ocr -> models/ocr */
    snprintf(out, (size_t)cap, "%s/%s", prev ? prev + 1 : tmp, last + 1);
}

static void do_load(demo_worker *w, const char *dir) {
    close_model(w);
    push_text(w, DEMO_EV_MESSAGE, 0, "loading %s ...", dir);
    omni_args a = w->p.args;
    a.model = dir;
    pthread_mutex_lock(&w->mu);
    char fa[32], fb[32];
    snprintf(fa, sizeof fa, "%s", w->kv_a);
    snprintf(fb, sizeof fb, "%s", w->kv_b);
    pthread_mutex_unlock(&w->mu);
    a.kv = fa, a.compare = fb; /* two formats compared: the session's device choice (--device unset) knows it */
    omni_status st = session_open(&w->s, &a, 3, 0, 0);
    if (!st && engine_start(w)) st = omni_fail(OMNI_ERR_RUNTIME, "cannot start the engine thread");
    demo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DEMO_EV_MODEL, ev.t_ms = omni_time_ms();
    demo_model_info *mi = ev.model = calloc(1, sizeof *mi);
    if (!mi) return; /* out of memory: no event (the window shows the model as loading) */
    snprintf(mi->dir, sizeof mi->dir, "%s", dir);
    if (st) {
        char msg[1024];
        int len = snprintf(msg, sizeof msg, "model %s: %s", dir, omni_last_error());
        ev.failed = 1;
        ev.text = dup_n(msg, len < (int)sizeof msg ? len : (int)sizeof msg - 1);
        ev.len = ev.text ? (int)strlen(ev.text) : 0;
        push(w, &ev);
        session_close(&w->s);
        memset(&w->s, 0, sizeof w->s);
        return;
    }
    w->loaded = 1;
    snprintf(mi->dir, sizeof mi->dir, "%s", w->s.model_dir);
    model_name(dir, mi->name, sizeof mi->name);
    snprintf(mi->type, sizeof mi->type, "%s", w->s.cfg->model_type);
    mi->has_vision = w->s.cfg->vision_json != NULL;
    mi->has_audio = w->s.cfg->audio_json != NULL;
    mi->n_layers = w->s.cfg->n_layers;
    mi->weight_mib = llm_model_weight_bytes(w->s.model) / 1048576.0;
    const llm_runner_params *rp = llm_runner_get_params(llm_engine_runner(w->s.engine));
    snprintf(mi->device, sizeof mi->device, "%s", llm_device_name(rp->device));
    mi->threads = rp->n_threads;
    pthread_mutex_lock(&w->mu);
    snprintf(mi->kv_a, sizeof mi->kv_a, "%s", w->kv_a);
    snprintf(mi->kv_b, sizeof mi->kv_b, "%s", w->kv_b);
    pthread_mutex_unlock(&w->mu);
    push(w, &ev);
}

/* A cache of format `fmt` that is none of the `n_ex` caches in `ex`; made when missing (the engine thread is
 * paused for it: caches are added while nothing steps). */
static omni_status get_cache(demo_worker *w, const char *fmt, const int *ex, int n_ex, int *out) {
    for (int i = 0; i < w->n_caches; i++) {
        if (strcmp(w->caches[i].fmt, fmt)) continue;
        int used = 0;
        for (int j = 0; j < n_ex; j++) used |= ex[j] == w->caches[i].idx;
        if (!used) return *out = w->caches[i].idx, OMNI_OK;
    }
    if (w->n_caches == LLM_ENGINE_MAX_CACHES)
        return omni_fail(OMNI_ERR_USAGE, "too many KV formats in one session: reload the model to try more");
    engine_halt(w);
    int ctx = w->p.args.ctx;
    omni_status st = session_add_cache(&w->s, fmt, ctx, 1, out);
    if (!st) {
        snprintf(w->caches[w->n_caches].fmt, sizeof w->caches[0].fmt, "%s", fmt);
        w->caches[w->n_caches++].idx = *out;
    }
    if (engine_start(w) && !st) st = omni_fail(OMNI_ERR_RUNTIME, "cannot restart the engine thread");
    return st;
}

static int stopped_since(demo_worker *w, int serial) {
    pthread_mutex_lock(&w->mu);
    int s = w->stop_serial != serial;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Media of a run, encoded in order (images first, then audio, as the CLI does). */
static omni_status encode_media(demo_worker *w, const job *j, media_item *items, int *n) {
    omni_status st = OMNI_OK;
    *n = 0;
    if (j->image && !(st = media_encode_image(w->s.media, j->image, &items[*n]))) (*n)++;
    if (!st && j->audio && !(st = media_encode_audio(w->s.media, j->audio, &items[*n]))) (*n)++;
    return st;
}

/* The three requests of a run, as `omni generate --compare` makes them. */
static omni_status submit_run(demo_worker *w, run_ctx *rc, const media_prompt *mp) {
    const omni_args *a = &w->p.args;
    llm_request r[3];
    r[0] = llm_request_default_params(); /* A */
    media_prompt_request(mp, &r[0]);
    r[0].sampling = session_sampling(&w->s);
    r[0].max_tokens = a->n_predict, r[0].cache = rc->cache[ROLE_A], r[0].logits = LLM_LOGITS_LAST;
    r[0].n_ctx = a->ctx;
    r[0].cb = (llm_callbacks){cb_token, cb_logits, cb_done, &rc->users[ROLE_A]};
    r[1] = r[0]; /* B': cache of B's format fed A's tokens */
    r[1].cache = rc->cache[ROLE_B2], r[1].teacher = -1, r[1].max_tokens = -1;
    r[1].cb = (llm_callbacks){NULL, cb_logits, cb_done, &rc->users[ROLE_B2]};
    r[2] = r[0]; /* B: answering freely */
    r[2].cache = rc->cache[ROLE_B], r[2].logits = LLM_LOGITS_NONE;
    r[2].cb = (llm_callbacks){cb_token, NULL, cb_done, &rc->users[ROLE_B]};
    for (int i = 0; i < 3; i++) rc->users[i] = (rq_user){rc, i};
    int ids[3];
    pthread_mutex_lock(&w->rmu); /* listed before any callback can end it */
    omni_status st = llm_engine_submit_n(w->s.engine, r, 3, ids);
    if (!st) {
        rc->ids[ROLE_A] = ids[0], rc->ids[ROLE_B2] = ids[1], rc->ids[ROLE_B] = ids[2];
        rc->next = w->runs;
        w->runs = rc;
    }
    pthread_mutex_unlock(&w->rmu);
    return st;
}

static void do_run(demo_worker *w, const job *j) {
    if (!w->loaded) {
        push_text(w, DEMO_EV_ERROR, j->run, "no model loaded (choose one in the model selector)");
        return;
    }
    cancel_runs(w);
    int n_img = j->image != NULL, n_aud = j->audio != NULL, n_items = 0;
    int32_t *ids = NULL;
    int n = 0;
    char *text = NULL;
    media_item items[2];
    memset(items, 0, sizeof items);
    media_prompt mp;
    memset(&mp, 0, sizeof mp);
    run_ctx *rc = NULL;
    char fa[32], fb[32];
    pthread_mutex_lock(&w->mu);
    snprintf(fa, sizeof fa, "%s", w->kv_a);
    snprintf(fb, sizeof fb, "%s", w->kv_b);
    pthread_mutex_unlock(&w->mu);
    omni_status st = media_check_support(w->s.model, n_img, n_aud);
    if (!st && !(text = llm_prompt_simple(w->p.args.system, j->prompt, n_img, n_aud)))
        st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = session_tokenize(&w->s, text, &ids, &n);
    if (!st) st = media_check_placeholders(w->s.model, ids, n, n_img, n_aud);
    if (!st && (n_img || n_aud)) push_text(w, DEMO_EV_MESSAGE, j->run, "encoding %s%s%s ...", n_img ? "the image" : "",
                                           n_img && n_aud ? " and " : "", n_aud ? "the audio" : "");
    double t0 = omni_time_ms();
    if (!st) st = encode_media(w, j, items, &n_items);
    double enc_ms = omni_time_ms() - t0;
    if (!st) st = media_prompt_build(w->s.media, ids, n, items, n_items, &mp);
    if (!st && !(rc = calloc(1, sizeof *rc))) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) {
        rc->w = w, rc->e = w->s.engine, rc->run = j->run, rc->n_prompt = mp.n_tokens, rc->V = w->s.cfg->vocab;
        for (int i = 0; i < RING; i++) rc->ring_pos[i] = -1;
        if (!(rc->ring = malloc(sizeof(float) * RING * (size_t)rc->V))) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    if (!st) st = get_cache(w, fa, NULL, 0, &rc->cache[ROLE_A]);
    if (!st) st = get_cache(w, fb, rc->cache, 1, &rc->cache[ROLE_B]);
    if (!st) st = get_cache(w, fb, rc->cache, 2, &rc->cache[ROLE_B2]);
    int visual = 0;
    for (int i = 0; i < n_items; i++) visual += items[i].n_tokens;
    if (!st && stopped_since(w, j->serial)) {
        push_text(w, DEMO_EV_MESSAGE, j->run, "stopped before the answer started");
    } else if (!st) { /* the window hears of the run before any of its tokens */
        demo_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = DEMO_EV_RUN, ev.run = j->run, ev.t_ms = omni_time_ms(), ev.n_prompt = mp.n_tokens;
        char buf[512];
        int len = snprintf(buf, sizeof buf, "A %s, B %s: %d prompt tokens", fa, fb, mp.n_tokens);
        if (n_items)
            len += snprintf(buf + len, sizeof buf - (size_t)len, " (%d from media, encoded in %.0f ms)", visual,
                            enc_ms);
        ev.text = dup_n(buf, len), ev.len = ev.text ? len : 0;
        push(w, &ev);
        st = submit_run(w, rc, &mp);
        if (!st) rc = NULL; /* owned by the engine's callbacks now */
    }
    if (st) push_text(w, DEMO_EV_ERROR, j->run, "%s", omni_last_error());
    run_free(rc);
    media_prompt_free(&mp);
    for (int i = 0; i < n_items; i++) media_item_clear(&items[i]);
    free(ids);
    free(text);
}

/* ---- opening files (preview) ------------------------------------------------------------------------------- */

typedef enum { KIND_UNKNOWN = 0, KIND_IMAGE, KIND_AUDIO } file_kind;

/* By the first bytes, as libmtmd does (not by the name). */
static file_kind sniff(const uint8_t *h, size_t n) {
    if (n >= 8 && !memcmp(h, "\x89PNG\r\n\x1a\n", 8)) return KIND_IMAGE;
    if (n >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF) return KIND_IMAGE;
    if (n >= 4 && (!memcmp(h, "GIF8", 4))) return KIND_IMAGE;
    if (n >= 2 && h[0] == 'B' && h[1] == 'M') return KIND_IMAGE;
    if (n >= 2 && h[0] == 'P' && h[1] >= '1' && h[1] <= '6') return KIND_IMAGE;
    if (n >= 12 && !memcmp(h, "RIFF", 4) && !memcmp(h + 8, "WAVE", 4)) return KIND_AUDIO;
    if (n >= 4 && (!memcmp(h, "fLaC", 4) || !memcmp(h, "OggS", 4) || !memcmp(h, "ID3", 3))) return KIND_AUDIO;
    if (n >= 2 && h[0] == 0xFF && (h[1] & 0xE0) == 0xE0) return KIND_AUDIO; /* MPEG audio frame sync */
    if (n >= 12 && !memcmp(h + 4, "ftyp", 4)) return KIND_AUDIO;                /* mp4 / m4a: its audio track */
    if (n >= 4 && !memcmp(h, "\x1a\x45\xdf\xa3", 4)) return KIND_AUDIO;         /* webm / mkv */
    if (n >= 12 && !memcmp(h, "FORM", 4) && (!memcmp(h + 8, "AIFF", 4) || !memcmp(h + 8, "AIFC", 4))) return KIND_AUDIO;
    return KIND_UNKNOWN;
}

/* The limits are the command's (--max-image-mpixels, --max-audio-seconds): checked from the header first. */
static omni_status open_image(const demo_worker *w, const char *path, demo_media *m) {
    vision_image img;
    omni_status st = vision_image_load(path, (int64_t)(w->p.args.max_image_mpix * 1e6), &img);
    if (st) return st;
    m->width = img.width, m->height = img.height;
    double s = (double)DEMO_THUMB / (img.width > img.height ? img.width : img.height);
    if (s > 1) s = 1;
    m->thumb_w = (int)(img.width * s + 0.5), m->thumb_h = (int)(img.height * s + 0.5);
    m->thumb_w = m->thumb_w < 1 ? 1 : m->thumb_w, m->thumb_h = m->thumb_h < 1 ? 1 : m->thumb_h;
    m->thumb = malloc((size_t)m->thumb_w * m->thumb_h * 3);
    if (!m->thumb) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    else st = vision_resize_bicubic_aa(img.rgb, img.height, img.width, 3, m->thumb, m->thumb_h, m->thumb_w);
    vision_image_free(&img);
    return st;
}

static omni_status open_audio(const demo_worker *w, const char *path, demo_media *m) {
    audio_pcm pcm;
    audio_load_params lp = audio_load_default_params();
    if (w->p.args.max_audio_s > 0) lp.max_seconds = w->p.args.max_audio_s;
    omni_status st = audio_load_ex(path, &lp, &pcm);
    if (st) return st;
    m->is_audio = 1;
    m->samples = pcm.samples, m->n_samples = pcm.n;
    m->duration_s = pcm.duration_s, m->orig_rate = pcm.orig_rate, m->orig_channels = pcm.orig_channels;
    return OMNI_OK;
}

static void do_open(demo_worker *w, const char *path) {
    demo_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DEMO_EV_MEDIA;
    demo_media *m = ev.media = calloc(1, sizeof *m);
    if (!m) return;
    snprintf(m->path, sizeof m->path, "%s", path);
    struct stat sb;
    omni_status st = OMNI_OK;
    uint8_t head[16] = {0};
    size_t nh = 0;
    if (stat(path, &sb)) st = omni_fail(OMNI_ERR_INPUT, "%s", strerror(errno));
    else if (S_ISDIR(sb.st_mode)) st = omni_fail(OMNI_ERR_INPUT, "it is a folder");
    else if (!S_ISREG(sb.st_mode)) st = omni_fail(OMNI_ERR_INPUT, "not a regular file");
    else if (sb.st_size == 0) st = omni_fail(OMNI_ERR_INPUT, "the file is empty");
    if (!st) {
        m->file_bytes = sb.st_size;
        FILE *f = fopen(path, "rb");
        if (!f) st = omni_fail(OMNI_ERR_INPUT, "%s", strerror(errno));
        else {
            nh = fread(head, 1, sizeof head, f);
            fclose(f);
        }
    }
    file_kind k = st ? KIND_UNKNOWN : sniff(head, nh);
    if (!st && k == KIND_IMAGE) st = open_image(w, path, m);
    else if (!st && k == KIND_AUDIO) st = open_audio(w, path, m);
    else if (!st && open_image(w, path, m) && open_audio(w, path, m)) /* no magic: TGA, what else decoders know */
        st = omni_fail(OMNI_ERR_INPUT, "not an image or audio file omni reads (PNG, JPEG, BMP, GIF, PNM, TGA; WAV, "
                                       "FLAC, Ogg, Opus, MP3, M4A ...)");
    ev.t_ms = omni_time_ms();
    if (st) {
        char msg[1024];
        int len = snprintf(msg, sizeof msg, "cannot open '%s': %s", path, omni_last_error());
        free(m->thumb), free(m->samples);
        m->thumb = NULL, m->samples = NULL;
        ev.failed = 1;
        ev.text = dup_n(msg, len < (int)sizeof msg ? len : (int)sizeof msg - 1);
        ev.len = ev.text ? (int)strlen(ev.text) : 0;
    }
    push(w, &ev);
}

/* ---- the job thread ---------------------------------------------------------------------------------------- */

static void job_free(job *j) {
    if (!j) return;
    free(j->path), free(j->prompt), free(j->image), free(j->audio);
    free(j);
}

static void *job_main(void *arg) {
    demo_worker *w = arg;
    lower_priority(w->p.nice);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        job *j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        w->busy = 1;
        pthread_mutex_unlock(&w->mu);
        switch (j->kind) {
        case JOB_LOAD: do_load(w, j->path); break;
        case JOB_OPEN: do_open(w, j->path); break;
        case JOB_RUN: do_run(w, j); break;
        case JOB_STOP: cancel_runs(w); break;
        }
        job_free(j);
        pthread_mutex_lock(&w->mu);
        w->busy = 0;
        pthread_mutex_unlock(&w->mu);
    }
    close_model(w);
    return NULL;
}

static void post(demo_worker *w, job *j) {
    pthread_mutex_lock(&w->mu);
    if (w->tail) w->tail->next = j;
    else w->head = j;
    w->tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static job *new_job(job_kind k, const char *path) {
    job *j = calloc(1, sizeof *j);
    if (j) j->kind = k;
    if (j && path && !(j->path = strdup(path))) {
        free(j);
        return NULL;
    }
    return j;
}

omni_status demo_worker_init(const demo_worker_params *p, demo_worker **out) {
    *out = NULL;
    kv_format f;
    omni_status st = kv_parse_mode(p->kv_a, &f);
    if (!st) st = kv_parse_mode(p->kv_b, &f);
    if (st) return st;
    demo_worker *w = calloc(1, sizeof *w);
    if (!w) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    w->p = *p;
    snprintf(w->kv_a, sizeof w->kv_a, "%s", p->kv_a);
    snprintf(w->kv_b, sizeof w->kv_b, "%s", p->kv_b);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    pthread_mutex_init(&w->qmu, NULL);
    pthread_mutex_init(&w->rmu, NULL);
    if (pthread_create(&w->job_thread, NULL, job_main, w)) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->qmu);
        pthread_mutex_destroy(&w->rmu);
        free(w);
        return omni_fail(OMNI_ERR_RUNTIME, "cannot start the demo's job thread");
    }
    *out = w;
    return OMNI_OK;
}

void demo_worker_free(demo_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    w->stop_serial++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->job_thread, NULL); /* it cancels the runs, stops the engine and frees the model */
    while (w->head) {
        job *j = w->head;
        w->head = j->next;
        job_free(j);
    }
    demo_event ev;
    while (demo_worker_poll(w, &ev)) demo_event_clear(&ev);
    free(w->q);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->qmu);
    pthread_mutex_destroy(&w->rmu);
    free(w);
}

void demo_worker_load(demo_worker *w, const char *model_dir) {
    job *j = new_job(JOB_LOAD, model_dir);
    if (j) post(w, j);
}

void demo_worker_set_formats(demo_worker *w, const char *kv_a, const char *kv_b) {
    pthread_mutex_lock(&w->mu);
    if (kv_a) snprintf(w->kv_a, sizeof w->kv_a, "%s", kv_a);
    if (kv_b) snprintf(w->kv_b, sizeof w->kv_b, "%s", kv_b);
    pthread_mutex_unlock(&w->mu);
}

void demo_worker_open(demo_worker *w, const char *path) {
    job *j = new_job(JOB_OPEN, path);
    if (j) post(w, j);
}

int demo_worker_run(demo_worker *w, const char *prompt, const char *image, const char *audio) {
    job *j = new_job(JOB_RUN, NULL);
    if (!j) return 0;
    j->prompt = strdup(prompt ? prompt : "");
    j->image = image ? strdup(image) : NULL;
    j->audio = audio ? strdup(audio) : NULL;
    if (!j->prompt || (image && !j->image) || (audio && !j->audio)) {
        job_free(j);
        return 0;
    }
    pthread_mutex_lock(&w->mu);
    j->run = ++w->next_run;
    j->serial = ++w->stop_serial; /* a run replaces the one before: it is stopped */
    pthread_mutex_unlock(&w->mu);
    post(w, j);
    return j->run;
}

void demo_worker_stop(demo_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->stop_serial++;
    pthread_mutex_unlock(&w->mu);
    job *j = new_job(JOB_STOP, NULL);
    if (j) post(w, j);
}

int demo_worker_busy(demo_worker *w) {
    pthread_mutex_lock(&w->mu);
    int b = w->busy || w->head != NULL;
    pthread_mutex_unlock(&w->mu);
    return b;
}
