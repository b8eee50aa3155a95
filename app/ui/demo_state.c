/* demo_state.c - the demo's state: worker events into panes, series and messages; the actions behind the buttons
 * and shortcuts (run, stop, clear, presets, model and format pickers, open, play). UI thread only. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/ui/demo_impl.h"

#ifdef OMNI_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PRESET_READ "Read all the text in the image."
#define PRESET_AUDIO "Transcribe the audio."
#define MEM_POINTS 600 /* memory chart: the last 600 samples (2.5 minutes at 4 per second) */

const char *const demo_formats[] = {"bf16", "f32", "int4", "int2", "kivi4", "kivi2", "k4v2"};
const int demo_n_formats = (int)(sizeof demo_formats / sizeof demo_formats[0]);

/* ---- messages ---------------------------------------------------------------------------------------------- */

void demo_log(demo *d, int is_error, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->msg_err = is_error;
    fprintf(stderr, "demo: %s%s\n", is_error ? "error: " : "", d->msg);
    if (d->n_log == DEMO_LOG) { /* keep the newest */
        free(d->log[0]);
        memmove(d->log, d->log + 1, sizeof d->log[0] * (DEMO_LOG - 1));
        d->n_log--;
    }
    d->log[d->n_log] = strdup(d->msg);
    if (d->log[d->n_log]) d->n_log++;
}

/* ---- growing arrays ---------------------------------------------------------------------------------------- */

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

int demo_series_add(series *s, double x, double y) {
    int cap = s->cap, cx = cap;
    if (grow((void **)&s->x, &cx, s->n + 1, sizeof(double)) || grow((void **)&s->y, &cap, s->n + 1, sizeof(double)))
        return -1;
    s->cap = cap < cx ? cap : cx;
    s->x[s->n] = x, s->y[s->n] = y;
    s->n++;
    return 0;
}

static void series_free(series *s) {
    free(s->x), free(s->y);
    memset(s, 0, sizeof *s);
}

/* ---- panes ------------------------------------------------------------------------------------------------- */

static void pane_reset(pane *p) {
    free(p->text), free(p->style), free(p->tok_end), free(p->toks), free(p->tok_t);
    series_free(&p->kv), series_free(&p->rate);
    ui_lines_free(&p->lines);
    memset(p, 0, sizeof *p);
    p->follow = 1;
}

static void reset_run(demo *d) {
    for (int i = 0; i < 2; i++) pane_reset(&d->p[i]);
    free(d->kl), free(d->dis);
    d->kl = NULL, d->dis = NULL;
    d->n_div = d->div_cap = d->n_agree = 0;
    d->kl_sum = 0;
    d->run_failed = 0;
    d->n_prompt = 0;
    d->t_submit = 0;
    d->run_info[0] = 0;
    d->charts_dirty = 1;
}

/* Palette index of B's bytes for generated token i: 1 top-1 differs, 2 large KL, 0 otherwise. */
static uint8_t div_style(const demo *d, int i) {
    if (i >= d->n_div || d->kl[i] < 0) return 0;
    return d->dis[i] ? 1 : d->kl[i] >= 0.1 ? 2 : 0;
}

static void mark_token(demo *d, int i) {
    pane *b = &d->p[1];
    if (i >= b->n_tok) return;
    int a = i ? b->tok_end[i - 1] : 0;
    memset(b->style + a, div_style(d, i), (size_t)(b->tok_end[i] - a));
}

static void pane_token(demo *d, int k, const demo_event *ev) {
    pane *p = &d->p[k];
    int need = p->len + ev->len + 1, cap = p->cap, cs = p->cap;
    if (grow((void **)&p->text, &cap, need, 1) || grow((void **)&p->style, &cs, need, 1)) return;
    p->cap = cap < cs ? cap : cs;
    memcpy(p->text + p->len, ev->text ? ev->text : "", (size_t)ev->len);
    memset(p->style + p->len, 0, (size_t)ev->len);
    p->len += ev->len;
    p->text[p->len] = 0;
    if (ev->token >= 0) {
        int c1 = p->tok_cap, c2 = p->tok_cap, c3 = p->tok_cap;
        if (grow((void **)&p->tok_end, &c1, p->n_tok + 1, sizeof(int)) ||
            grow((void **)&p->toks, &c2, p->n_tok + 1, sizeof(int32_t)) ||
            grow((void **)&p->tok_t, &c3, p->n_tok + 1, sizeof(double)))
            return;
        p->tok_cap = c1;
        p->tok_end[p->n_tok] = p->len;
        p->toks[p->n_tok] = ev->token;
        p->tok_t[p->n_tok] = ev->t_ms;
        if (p->n_tok++ == 0) p->t_first = ev->t_ms;
        p->t_last = ev->t_ms;
        if (k == 1) mark_token(d, p->n_tok - 1);
    }
    if (ev->kv_tokens >= d->n_prompt && d->n_prompt > 0) { /* the snapshot may predate this run's prefill */
        double x = (double)(ev->kv_tokens - d->n_prompt);
        if (!p->kv.n || x > p->kv.x[p->kv.n - 1]) demo_series_add(&p->kv, x, ev->kv_bytes / 1048576.0);
        p->kv_bytes = ev->kv_bytes, p->kv_tokens = ev->kv_tokens;
    }
    d->charts_dirty = 1;
}

/* Tokens per second over the last second of a pane (over what there is, early on). */
static double recent_rate(const pane *p, double now) {
    if (p->n_tok < 2) return 0;
    double from = now - 1000 > p->t_first ? now - 1000 : p->t_first, end = p->done ? p->t_last : now;
    int n = 0;
    for (int i = p->n_tok - 1; i >= 0 && p->tok_t[i] >= from; i--) n++;
    double span = end - from;
    if (from == p->t_first) n--; /* intervals, not tokens */
    return span > 1 ? n * 1000.0 / span : 0;
}

static void pane_done(demo *d, int k, const demo_event *ev) {
    pane *p = &d->p[k];
    p->done = 1;
    p->st = ev->stats;
    if (ev->kv_tokens >= d->n_prompt && d->n_prompt > 0) {
        double x = (double)(ev->kv_tokens - d->n_prompt);
        if (!p->kv.n || x > p->kv.x[p->kv.n - 1]) demo_series_add(&p->kv, x, ev->kv_bytes / 1048576.0);
        p->kv_bytes = ev->kv_bytes, p->kv_tokens = ev->kv_tokens;
    }
    if (p->n_tok >= 2) {
        double r = recent_rate(p, p->t_last);
        if (!p->rate.n) /* a short answer that came between two samples: its rate from the first token on */
            demo_series_add(&p->rate, (p->t_first - d->t_submit) / 1000.0, r);
        demo_series_add(&p->rate, (p->t_last - d->t_submit) / 1000.0, r);
    }
    const llm_request_stats *s = &ev->stats;
    if (s->finish == LLM_FINISH_ERROR) d->run_failed = 1;
    demo_log(d, s->finish == LLM_FINISH_ERROR, "%s (%s) %s: %d tokens, %.1f tokens/s, first token after %.0f ms%s%s",
             k ? "B" : "A", d->run_kv[k], llm_finish_name(s->finish), s->n_gen, s->tokens_per_s, s->ttft_ms,
             s->error[0] ? ": " : "", s->error);
    d->charts_dirty = 1;
}

static void divergence(demo *d, const demo_event *ev) {
    int i = ev->index;
    if (i < 0 || i > 1 << 24) return;
    int c1 = d->div_cap, c2 = d->div_cap;
    if (grow((void **)&d->kl, &c1, i + 1, sizeof(double)) || grow((void **)&d->dis, &c2, i + 1, 1)) return;
    d->div_cap = c1;
    for (int j = d->n_div; j < i; j++) d->kl[j] = -1, d->dis[j] = 0;
    if (i >= d->n_div) d->n_div = i + 1;
    d->kl[i] = ev->kl;
    d->dis[i] = ev->top_a != ev->top_b;
    d->kl_sum += ev->kl;
    d->n_agree += ev->top_a == ev->top_b;
    mark_token(d, i);
    d->charts_dirty = 1;
}

/* ---- media ------------------------------------------------------------------------------------------------- */

/* Playback stops and the callback lets go of the samples. */
static void stop_playing(demo *d) {
    if (d->adev) {
        SDL_PauseAudioDevice(d->adev, 1);
        SDL_LockAudioDevice(d->adev);
        d->play_src = NULL;
        SDL_UnlockAudioDevice(d->adev);
    }
    d->playing = 0;
}

static void drop_audio(demo *d) {
    stop_playing(d);
    free(d->samples);
    d->samples = NULL;
    d->n_samples = 0;
    d->audio_path[0] = 0;
}

static void drop_image(demo *d) {
    if (d->thumb) SDL_DestroyTexture(d->thumb);
    d->thumb = NULL;
    d->image_path[0] = 0;
}

static void media(demo *d, demo_event *ev) {
    d->opens_pending -= d->opens_pending > 0;
    if (ev->failed) {
        demo_log(d, 1, "%s", ev->text ? ev->text : "cannot open the file");
        return;
    }
    demo_media *m = ev->media;
    const char *base = strrchr(m->path, '/') ? strrchr(m->path, '/') + 1 : m->path;
    if (m->is_audio) {
        drop_audio(d);
        d->samples = m->samples, d->n_samples = m->n_samples;
        m->samples = NULL;
        snprintf(d->audio_path, sizeof d->audio_path, "%s", m->path);
        d->audio_s = m->duration_s, d->audio_rate = m->orig_rate, d->audio_ch = m->orig_channels;
        d->audio_bytes = m->file_bytes;
        demo_log(d, 0, "audio '%s': %.2f s, %d Hz, %d channel%s%s", base, m->duration_s, m->orig_rate,
                 m->orig_channels, m->orig_channels == 1 ? "" : "s",
                 m->duration_s > 30 ? " (long audio: answers are best on clips under 30 s)" : "");
        return;
    }
    drop_image(d);
    d->thumb = SDL_CreateTexture(d->r, SDL_PIXELFORMAT_RGB24, SDL_TEXTUREACCESS_STATIC, m->thumb_w, m->thumb_h);
    if (d->thumb) SDL_UpdateTexture(d->thumb, NULL, m->thumb, m->thumb_w * 3);
    d->thumb_w = m->thumb_w, d->thumb_h = m->thumb_h, d->img_w = m->width, d->img_h = m->height;
    d->img_bytes = m->file_bytes;
    snprintf(d->image_path, sizeof d->image_path, "%s", m->path);
    demo_log(d, 0, "image '%s': %dx%d, %.1f MiB%s", base, m->width, m->height, m->file_bytes / 1048576.0,
             (int64_t)m->width * m->height > 4000000 ? " (large: it is scaled to the visual-token budget)" : "");
}

/* ---- events ------------------------------------------------------------------------------------------------ */

static void model_event(demo *d, demo_event *ev) {
    d->loading -= d->loading > 0;
    if (ev->failed) {
        demo_log(d, 1, "%s", ev->text ? ev->text : "the model did not load");
        d->model_ready = 0;
        d->pending_preset = 0;
        return;
    }
    d->info = *ev->model;
    d->model_ready = 1;
    int gpu = !strcmp(d->info.device, "cuda");
    if (gpu != d->gpu) d->gpu = gpu, d->chart_scale = 0; /* the memory chart gains or loses its GPU series */
    demo_log(d, 0, "model %s (%s, %d layers, %.1f MiB of weights, on %s)%s%s", d->info.name, d->info.type,
             d->info.n_layers, d->info.weight_mib, d->info.device, d->info.has_vision ? ", reads images" : "",
             d->info.has_audio ? ", hears audio" : "");
    if (d->pending_preset) {
        int p = d->pending_preset;
        d->pending_preset = 0;
        demo_run(d, p);
    }
}

static void one_event(demo *d, demo_event *ev) {
    int mine = ev->run == d->run && d->run > 0;
    switch (ev->kind) {
    case DEMO_EV_MESSAGE:
        if (!ev->run || mine) demo_log(d, 0, "%s", ev->text ? ev->text : "");
        break;
    case DEMO_EV_ERROR:
        if (!ev->run || mine) demo_log(d, 1, "%s", ev->text ? ev->text : "");
        if (mine) d->run_failed = 1;
        break;
    case DEMO_EV_MODEL: model_event(d, ev); break;
    case DEMO_EV_MEDIA: media(d, ev); break;
    case DEMO_EV_RUN:
        if (!mine) break;
        d->t_submit = ev->t_ms, d->n_prompt = ev->n_prompt;
        snprintf(d->run_info, sizeof d->run_info, "%s", ev->text ? ev->text : "");
        demo_log(d, 0, "%s", d->run_info);
        break;
    case DEMO_EV_TOKEN:
        if (mine && ev->pane >= 0 && ev->pane < 2) pane_token(d, ev->pane, ev);
        break;
    case DEMO_EV_DIVERGENCE:
        if (mine) divergence(d, ev);
        break;
    case DEMO_EV_DONE:
        if (mine && ev->pane >= 0 && ev->pane < 2) pane_done(d, ev->pane, ev);
        break;
    }
}

void demo_drain(demo *d) {
    demo_event ev;
    for (int n = 0; n < 4096 && demo_worker_poll(d->w, &ev); n++) { /* bounded: the frame goes on */
        one_event(d, &ev);
        demo_event_clear(&ev);
    }
    double now = omni_time_ms();
    if (demo_generating(d) && d->t_submit > 0 && now - d->t_mem >= 250) {
        for (int k = 0; k < 2; k++) {
            pane *p = &d->p[k];
            if (!p->done && p->n_tok >= 2) demo_series_add(&p->rate, (now - d->t_submit) / 1000.0, recent_rate(p, now));
        }
    }
    if (now - d->t_mem >= 250) {
        demo_sample_memory(d);
        d->t_mem = now;
    }
}

int demo_generating(const demo *d) {
    return d->run > 0 && !d->run_failed && !(d->p[0].done && d->p[1].done);
}

/* ---- memory ------------------------------------------------------------------------------------------------ */

static void keep_last(series *s, int n) {
    if (s->n <= n) return;
    memmove(s->x, s->x + (s->n - n), sizeof(double) * (size_t)n);
    memmove(s->y, s->y + (s->n - n), sizeof(double) * (size_t)n);
    s->n = n;
}

void demo_sample_memory(demo *d) {
    double t = (omni_time_ms() - d->t0) / 1000.0;
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lld %lld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    if (res > 0) demo_series_add(&d->mem_rss, t, res * (double)sysconf(_SC_PAGESIZE) / 1048576.0);
    keep_last(&d->mem_rss, MEM_POINTS);
#ifdef OMNI_HAVE_CUDA
    if (d->gpu && d->model_ready) { /* the device as a whole, as nvidia-smi shows it */
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) demo_series_add(&d->mem_gpu, t, (tot - fr) / 1048576.0);
        keep_last(&d->mem_gpu, MEM_POINTS);
    }
#endif
    d->charts_dirty = 1;
}

/* ---- actions ----------------------------------------------------------------------------------------------- */

static int find_model(const demo *d, int vision, int audio) {
    for (int i = 0; i < d->n_models; i++)
        if ((!vision || d->models[i].has_vision) && (!audio || d->models[i].has_audio)) return i;
    return -1;
}

/* For a preset the model needs a tower: switch to a model that has it (the run starts once it is loaded). */
static int ensure_modality(demo *d, int preset) {
    int vision = preset == 1, audio = preset == 2;
    if ((vision && d->info.has_vision) || (audio && d->info.has_audio)) return 1;
    int i = find_model(d, vision, audio);
    if (i < 0 || i == d->cur_model) {
        demo_log(d, 1, "this model (%s) has no %s tower and no other model here has one", d->info.type,
                 vision ? "vision" : "audio");
        return 0;
    }
    demo_log(d, 0, "switching to %s, which %s", d->models[i].label, vision ? "reads images" : "hears audio");
    demo_select_model(d, i);
    d->pending_preset = preset;
    return 0;
}

void demo_run(demo *d, int preset) {
    if (preset && ((preset == 1 && !d->image_path[0]) || (preset == 2 && !d->audio_path[0]))) {
        demo_log(d, 1, "open %s first (drop it on the window or press Open)",
                 preset == 1 ? "an image" : "an audio file");
        return;
    }
    if (!d->model_ready) {
        if (d->loading && preset) d->pending_preset = preset;
        demo_log(d, !d->loading, d->loading ? "the model is still loading: the run starts when it is ready"
                                           : "no model loaded: pick one in the model selector");
        return;
    }
    if (preset && !ensure_modality(d, preset)) return;
    if (preset) demo_prompt_set(d, preset == 1 ? PRESET_READ : PRESET_AUDIO);
    const char *s = d->prompt;
    while (*s == ' ' || *s == '\n' || *s == '\t') s++;
    if (!*s) {
        demo_log(d, 1, "type a question first");
        return;
    }
    const char *img = preset == 2 ? NULL : d->image_path[0] ? d->image_path : NULL;
    const char *aud = preset == 1 ? NULL : d->audio_path[0] ? d->audio_path : NULL;
    if (img && !d->info.has_vision) {
        demo_log(d, 0, "the image is left out: this model has no vision tower");
        img = NULL;
    }
    if (aud && !d->info.has_audio) {
        demo_log(d, 0, "the audio is left out: this model has no audio tower");
        aud = NULL;
    }
    reset_run(d);
    snprintf(d->run_kv[0], sizeof d->run_kv[0], "%s", d->kv_a);
    snprintf(d->run_kv[1], sizeof d->run_kv[1], "%s", d->kv_b);
    d->run = demo_worker_run(d->w, d->prompt, img, aud);
    if (d->run <= 0) demo_log(d, 1, "out of memory");
}

void demo_stop(demo *d) {
    if (!demo_generating(d)) return;
    demo_worker_stop(d->w);
    demo_log(d, 0, "stopping");
}

void demo_clear(demo *d) {
    if (demo_generating(d)) demo_worker_stop(d->w);
    d->run = 0; /* events of the run before are ignored from now on */
    reset_run(d);
    drop_audio(d);
    drop_image(d);
    demo_log(d, 0, "cleared");
}

void demo_select_model(demo *d, int i) {
    if (i < 0 || i >= d->n_models) return;
    if (i == d->cur_model && (d->model_ready || d->loading)) return;
    d->cur_model = i;
    d->model_ready = 0;
    d->loading++;
    d->run = 0;
    reset_run(d);
    demo_worker_load(d->w, d->models[i].dir);
}

void demo_set_format(demo *d, int k, const char *fmt) {
    kv_format f;
    if (kv_parse_mode(fmt, &f)) {
        demo_log(d, 1, "%s", omni_last_error());
        return;
    }
    snprintf(k ? d->kv_b : d->kv_a, sizeof d->kv_a, "%s", fmt);
    demo_worker_set_formats(d->w, d->kv_a, d->kv_b);
    demo_log(d, 0, "%s: %s KV cache from the next run", k ? "B" : "A", fmt);
}

void demo_open(demo *d, const char *path) {
    d->opens_pending++;
    demo_log(d, 0, "opening %s", path);
    demo_worker_open(d->w, path);
}

/* The audio thread's callback: the next samples of the clip, silence after it. (A callback rather than
 * SDL_QueueAudio: SDL gives its own queue thread a 64 KiB stack, too small for this program's thread-local data.) */
static void play_cb(void *user, Uint8 *stream, int len) {
    demo *d = user;
    float *out = (float *)stream;
    int64_t n = len / (int)sizeof(float), k = 0;
    if (d->play_src) {
        k = d->play_n - d->play_pos < n ? d->play_n - d->play_pos : n;
        memcpy(out, d->play_src + d->play_pos, sizeof(float) * (size_t)k);
        d->play_pos += k;
    }
    memset(out + k, 0, sizeof(float) * (size_t)(n - k));
}

double demo_play_progress(demo *d) {
    if (!d->playing || !d->adev) return 0;
    SDL_LockAudioDevice(d->adev);
    double f = d->play_n ? (double)d->play_pos / d->play_n : 1;
    SDL_UnlockAudioDevice(d->adev);
    if (f >= 1) stop_playing(d);
    return f;
}

void demo_toggle_play(demo *d) {
    if (d->playing) {
        stop_playing(d);
        return;
    }
    if (!d->samples) {
        demo_log(d, 1, "no audio to play: open an audio file first");
        return;
    }
    if (!d->adev) {
        if (!SDL_WasInit(SDL_INIT_AUDIO) && SDL_InitSubSystem(SDL_INIT_AUDIO)) {
            demo_log(d, 1, "no audio output: %s", SDL_GetError());
            return;
        }
        SDL_AudioSpec want, have;
        SDL_zero(want);
        want.freq = 16000, want.format = AUDIO_F32SYS, want.channels = 1, want.samples = 1024;
        want.callback = play_cb, want.userdata = d;
        d->adev = SDL_OpenAudioDevice(NULL, 0, &want, &have, 0); /* SDL converts 16 kHz mono to the device */
        if (!d->adev) {
            demo_log(d, 1, "no audio output: %s", SDL_GetError());
            return;
        }
    }
    SDL_LockAudioDevice(d->adev);
    d->play_src = d->samples, d->play_n = d->n_samples, d->play_pos = 0;
    SDL_UnlockAudioDevice(d->adev);
    SDL_PauseAudioDevice(d->adev, 0);
    d->playing = 1;
    demo_log(d, 0, "playing %.1f s of audio", d->audio_s);
}

void demo_free_state(demo *d) {
    reset_run(d);
    drop_audio(d);
    drop_image(d);
    if (d->adev) SDL_CloseAudioDevice(d->adev);
    d->adev = 0;
    series_free(&d->mem_rss), series_free(&d->mem_gpu);
    for (int i = 0; i < d->n_log; i++) free(d->log[i]);
    d->n_log = 0;
    free(d->files);
    d->files = NULL;
    ui_lines_free(&d->plines);
}
