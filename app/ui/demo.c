/* demo.c - `omni demo` (see demo.h): models found, SDL set-up (HiDPI, software renderer when headless), the
 * frame loop (events, worker events, script, layout, drawing, screenshot, frame timing), the script runner and
 * what is printed at the end (both answers on stdout; comparison and frame times on stderr). */
#define _DEFAULT_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <SDL_ttf.h>
#include <stb_image_write.h>

#include "app/model_path.h"
#include "app/ui/demo_impl.h"
#include "llm/config.h"

#define FRAME_BUDGET_MS 33.0

/* ---- models ------------------------------------------------------------------------------------------------ */

static int add_model(demo *d, const char *dir, const char *label) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return -1;
    for (int i = 0; i < d->n_models; i++)
        if (!strcmp(d->models[i].dir, real)) return i;
    if (d->n_models == DEMO_MAX_MODELS) return -1;
    llm_config cfg;
    if (llm_config_load(real, &cfg)) return -1; /* not a model we can load: not listed */
    model_entry *m = &d->models[d->n_models];
    snprintf(m->dir, sizeof m->dir, "%s", real);
    snprintf(m->label, sizeof m->label, "%s", label);
    m->has_vision = cfg.vision_json != NULL;
    m->has_audio = cfg.audio_json != NULL;
    llm_config_free(&cfg);
    return d->n_models++;
}

/* The embedded models (assets/models/{ocr,speech,text}, found as `omni ocr` finds them: $OMNI_MODELS, beside the
 * program, the source tree), else the Omni test fixture (images and audio, random weights) beside the program or
 * in the source tree. */
static void find_models(demo *d) {
    static const char *const names[] = {"ocr", "speech", "text"};
    char dir[PATH_MAX], label[64];
    int before = d->n_models;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!omni_embedded_model(names[i], dir, sizeof dir)) {
            snprintf(label, sizeof label, "assets/models/%s", names[i]);
            add_model(d, dir, label);
        }
    omni_clear_error();
    if (d->n_models > before) return;
    char exe[PATH_MAX - 64];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(dir, sizeof dir, "%s/../tests/fixtures/audio/omni-a", exe);
        add_model(d, dir, "omni-a (test fixture)");
    }
#ifdef OMNI_SOURCE_DIR
    if (d->n_models == before) add_model(d, OMNI_SOURCE_DIR "/tests/fixtures/audio/omni-a", "omni-a (test fixture)");
#endif
}

/* -m first when given; else the first model that reads images (the OCR model), else the first. */
static omni_status pick_model(demo *d, int *first) {
    *first = -1;
    if (d->o.args.model) {
        char dir[4096];
        omni_status st = omni_resolve_model(d->o.args.model, dir, sizeof dir);
        if (st) return st;
        const char *b = strrchr(d->o.args.model, '/');
        *first = add_model(d, dir, b && b[1] ? b + 1 : d->o.args.model);
        if (*first < 0) {
            llm_config cfg;
            st = llm_config_load(dir, &cfg); /* its message says why */
            if (!st) llm_config_free(&cfg);
            return st ? st : omni_fail(OMNI_ERR_MODEL, "too many models");
        }
    }
    find_models(d);
    for (int i = 0; *first < 0 && i < d->n_models; i++)
        if (d->models[i].has_vision) *first = i;
    if (*first < 0 && d->n_models) *first = 0;
    return OMNI_OK;
}

/* ---- frame helpers ----------------------------------------------------------------------------------------- */

static void update_scale(demo *d) {
    int ww, wh;
    SDL_GetRendererOutputSize(d->r, &d->W, &d->H);
    SDL_GetWindowSize(d->win, &ww, &wh);
    d->hidpi = ww > 0 ? (float)d->W / ww : 1.f;
    float scale = d->hidpi * d->zoom;
    if (scale != d->scale) /* glyphs change size: the answers are wrapped again */
        for (int k = 0; k < 2; k++) d->p[k].lines.n = 0;
    d->scale = scale;
    ui_text_set_scale(d->txt, d->scale);
}

static omni_status save_png(demo *d, const char *path) {
    uint8_t *px = malloc((size_t)d->W * d->H * 4);
    if (!px) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = OMNI_OK;
    if (SDL_RenderReadPixels(d->r, NULL, SDL_PIXELFORMAT_RGBA32, px, d->W * 4))
        st = omni_fail(OMNI_ERR_RUNTIME, "screenshot: %s", SDL_GetError());
    else if (!stbi_write_png(path, d->W, d->H, 4, px, d->W * 4))
        st = omni_fail(OMNI_ERR_INPUT, "cannot write %s", path);
    free(px);
    return st;
}

/* CPU time of the calling thread (the UI's), ms. */
static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void record_frame(demo *d, double ms, double cpu_ms) {
    d->last_frame_ms = ms;
    d->frames_total++;
    if (!demo_generating(d) || !d->t_submit) return;
    if (d->n_frames == d->frame_cap) {
        int cap = d->frame_cap ? 2 * d->frame_cap : 1024;
        double *p = realloc(d->frame_ms, sizeof(double) * 2 * (size_t)cap);
        if (!p) return;
        memmove(p + cap, p + d->frame_cap, sizeof(double) * (size_t)d->n_frames); /* [wall][cpu] halves */
        d->frame_ms = p, d->frame_cap = cap;
    }
    d->frame_ms[d->n_frames] = ms;
    d->frame_ms[d->frame_cap + d->n_frames++] = cpu_ms;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_frames(demo *d) {
    if (!d->n_frames) {
        fprintf(stderr, "demo: no frame was drawn while both panes generated (%d frames in all)\n", d->frames_total);
        return;
    }
    double *w = d->frame_ms, *c = d->frame_ms + d->frame_cap;
    int n = d->n_frames, i95 = (int)(0.95 * (n - 1));
    qsort(w, (size_t)n, sizeof(double), cmp_double);
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    fprintf(stderr, "demo: frame time while both panes generated: p50 %.2f ms, p95 %.2f ms, max %.2f ms over %d "
            "frames (budget %.0f ms: %s); UI thread CPU per frame p50 %.2f ms, p95 %.2f ms\n", w[n / 2], w[i95],
            w[n - 1], n, FRAME_BUDGET_MS, w[i95] <= FRAME_BUDGET_MS ? "met" : "MISSED", c[n / 2], c[i95]);
}

/* Both answers on stdout (A, then B, each ending with a newline, as `omni generate --compare` prints them), the
 * comparison line on stderr in --compare's words. */
static void print_answers(demo *d) {
    for (int k = 0; k < 2; k++) {
        fprintf(stderr, "==> %s: %s <==\n", k ? "B" : "A", d->run ? d->run_kv[k] : k ? d->kv_b : d->kv_a);
        if (d->p[k].len) fwrite(d->p[k].text, 1, (size_t)d->p[k].len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    const pane *a = &d->p[0], *b = &d->p[1];
    int64_t ka = a->done ? a->st.kv_bytes : a->kv_bytes, kb = b->done ? b->st.kv_bytes : b->kv_bytes;
    int same = 0, n = 0;
    while (same < a->n_tok && same < b->n_tok && a->toks[same] == b->toks[same]) same++;
    for (int i = 0; i < d->n_div; i++) n += d->kl[i] >= 0;
    double mib = 1048576.0;
    fprintf(stderr, "compare: KV A %s %.2f MiB, B %s %.2f MiB (%.3fx); tokens identical up to %d (A %d, B %d); "
            "B teacher-forced on A: mean KL %.6f, top-1 agreement %.2f%% over %d positions\n",
            d->run ? d->run_kv[0] : d->kv_a, ka / mib, d->run ? d->run_kv[1] : d->kv_b, kb / mib,
            ka > 0 ? (double)kb / ka : 0.0, same, a->n_tok, b->n_tok, n ? d->kl_sum / n : 0.0,
            n ? 100.0 * d->n_agree / n : 0.0, n);
    for (int k = 0; k < 2; k++) /* where the answers are drawn (tests look at those pixels) */
        fprintf(stderr, "demo: pane %s text area %d %d %d %d\n", k ? "B" : "A", d->r_text[k].x, d->r_text[k].y,
                d->r_text[k].w, d->r_text[k].h);
}

/* ---- script ------------------------------------------------------------------------------------------------ */

static void script_fail(demo *d, const demo_cmd *c, const char *why) {
    omni_fail(OMNI_ERR_RUNTIME, "script %s line %d: %s", d->sc.name, c->line, why);
    demo_log(d, 1, "%s", omni_last_error());
    d->exit_status = OMNI_ERR_RUNTIME;
    d->quit = 1;
}

static void push_click(demo *d, const demo_cmd *c) {
    static const struct {
        const char *name;
        widget_id id;
    } map[] = {{"run", W_RUN},     {"stop", W_STOP},   {"clear", W_CLEAR}, {"open", W_OPEN},
               {"read", W_READ},   {"audio", W_AUDIO}, {"play", W_PLAY},   {"model", W_MODEL},
               {"kv-a", W_KVA},    {"kv-b", W_KVB},    {"help", W_HELP}};
    widget_id id = W_NONE;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(c->arg, map[i].name)) id = map[i].id;
    SDL_Rect r = d->wr[id];
    if (id == W_NONE || r.w <= 0) return script_fail(d, c, "that button is not on the screen");
    if (!d->enabled[id]) return script_fail(d, c, "that button is disabled now");
    int x = (int)((r.x + r.w / 2) / d->hidpi), y = (int)((r.y + r.h / 2) / d->hidpi);
    Uint32 win = SDL_GetWindowID(d->win);
    SDL_Event e;
    SDL_zero(e);
    e.type = SDL_MOUSEMOTION, e.motion.windowID = win, e.motion.x = x, e.motion.y = y;
    SDL_PushEvent(&e);
    for (int k = 0; k < 2; k++) {
        SDL_zero(e);
        e.type = k ? SDL_MOUSEBUTTONUP : SDL_MOUSEBUTTONDOWN;
        e.button.windowID = win, e.button.button = SDL_BUTTON_LEFT, e.button.state = k ? SDL_RELEASED : SDL_PRESSED;
        e.button.clicks = 1, e.button.x = x, e.button.y = y;
        SDL_PushEvent(&e);
    }
}

static void push_key(demo *d, const demo_cmd *c) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", c->arg);
    Uint16 mod = 0;
    char *name = buf, *plus;
    while ((plus = strchr(name, '+')) && plus[1]) {
        *plus = 0;
        if (!strcasecmp(name, "ctrl")) mod |= KMOD_LCTRL;
        else if (!strcasecmp(name, "shift")) mod |= KMOD_LSHIFT;
        else if (!strcasecmp(name, "alt")) mod |= KMOD_LALT;
        else return script_fail(d, c, "key: modifiers are ctrl, shift and alt");
        name = plus + 1;
    }
    SDL_Keycode k = SDL_GetKeyFromName(name);
    if (k == SDLK_UNKNOWN) return script_fail(d, c, "key: unknown key name (SDL names: Return, Escape, F1, a ...)");
    SDL_Event e;
    SDL_zero(e);
    e.type = SDL_KEYDOWN, e.key.windowID = SDL_GetWindowID(d->win), e.key.state = SDL_PRESSED;
    e.key.keysym.sym = k, e.key.keysym.mod = mod, e.key.keysym.scancode = SDL_GetScancodeFromKey(k);
    SDL_PushEvent(&e);
    e.type = SDL_KEYUP, e.key.state = SDL_RELEASED;
    SDL_PushEvent(&e);
}

/* Text input events of at most SDL_TEXTINPUTEVENT_TEXT_SIZE - 1 bytes, cut between characters. */
static void push_text(demo *d, const char *s) {
    int len = (int)strlen(s);
    for (int i = 0; i < len;) {
        int n = 0;
        while (i + n < len) {
            int j = i + n;
            ui_utf8_next(s, len, &j);
            if (j - i > SDL_TEXTINPUTEVENT_TEXT_SIZE - 1) break;
            n = j - i;
        }
        if (n == 0) n = 1;
        SDL_Event e;
        SDL_zero(e);
        e.type = SDL_TEXTINPUT, e.text.windowID = SDL_GetWindowID(d->win);
        memcpy(e.text.text, s + i, (size_t)n);
        SDL_PushEvent(&e);
        i += n;
    }
}

/* An input method's composition in progress: SDL_TEXTEDITING, or the extended event for a long one. */
static void push_compose(demo *d, const char *s) {
    SDL_Event e;
    SDL_zero(e);
    size_t len = strlen(s);
    if (len < SDL_TEXTEDITINGEVENT_TEXT_SIZE) {
        e.type = SDL_TEXTEDITING, e.edit.windowID = SDL_GetWindowID(d->win);
        memcpy(e.edit.text, s, len + 1);
        e.edit.start = (Sint32)len;
    } else {
        e.type = SDL_TEXTEDITING_EXT, e.editExt.windowID = SDL_GetWindowID(d->win);
        if (!(e.editExt.text = SDL_strdup(s))) return;
        e.editExt.start = (Sint32)len;
    }
    SDL_PushEvent(&e);
}

/* One line of the window's state for tests: frames = passes of the frame loop (drawn or not: a pass where nothing
 * changed draws nothing) since the last `state`, and the longest of them, without its sleep. */
static void print_state(demo *d) {
    static const char *const pops[] = {"none", "model", "kv-a", "kv-b", "files", "help"};
    const SDL_Rect *rb = &d->wr[W_RUN];
    fprintf(stderr, "demo: state prompt=[%s] ime=[%s] model=[%s] ready=%d kv-a=%s kv-b=%s image=[%s] audio=[%s] "
            "playing=%d run=%d generating=%d tokens=%d,%d popup=%s window=%dx%d scale=%.2f run-button=%d,%d,%d,%d "
            "frames=%d max-frame-ms=%.1f\n", d->prompt, d->ime, d->cur_model >= 0 ? d->models[d->cur_model].label : "",
            d->model_ready, d->kv_a, d->kv_b, d->image_path, d->audio_path, d->playing, d->run, demo_generating(d),
            d->p[0].n_tok, d->p[1].n_tok, pops[d->pop], d->W, d->H, d->scale, rb->x, rb->y, rb->w, rb->h,
            d->state_frames, d->state_max_ms);
    d->state_frames = 0, d->state_max_ms = 0;
}

static int log_has(const demo *d, const char *needle) {
    for (int i = 0; i < d->n_log; i++)
        if (strstr(d->log[i], needle)) return 1;
    return 0;
}

/* 1 when the wait is over, 0 to keep waiting, -1 when it can never be over. */
static int wait_ready(demo *d, const demo_cmd *c) {
    const pane *a = &d->p[0], *b = &d->p[1];
    switch (c->wait) {
    case WAIT_MODEL: return !d->loading;
    case WAIT_MEDIA: return !d->opens_pending;
    case WAIT_IDLE: return !d->loading && !d->opens_pending && !demo_worker_busy(d->w);
    case WAIT_DONE:
    case WAIT_TOKENS:
        if (!d->run) return d->pending_preset || d->loading ? 0 : -1;
        if (d->run_failed) return 1;
        if (c->wait == WAIT_DONE) return a->done && b->done;
        return (a->done || a->n_tok >= c->a) && (b->done || b->n_tok >= c->a);
    }
    return -1;
}

static void script_step(demo *d) {
    if (!d->sc_active || d->quit) return;
    double now = omni_time_ms();
    if (d->sc_pc >= d->sc.n) { /* the end: the screenshot, then close */
        if (d->o.screenshot && !d->shot_pending && d->sc_until == 0) {
            snprintf(d->shot_path, sizeof d->shot_path, "%s", d->o.screenshot);
            d->shot_pending = 1;
            d->sc_until = now;
        } else if (!d->shot_pending) {
            d->quit = 1;
        }
        return;
    }
    demo_cmd *c = &d->sc.cmds[d->sc_pc];
    int next = 1;
    switch (c->kind) {
    case SC_SIZE: SDL_SetWindowSize(d->win, c->a, c->b); break;
    case SC_MODEL: {
        int i = add_model(d, c->arg, c->arg);
        if (i < 0) return script_fail(d, c, "model: not a model folder (config.json missing or unsupported)");
        demo_select_model(d, i);
        break;
    }
    case SC_KV_A:
    case SC_KV_B: {
        kv_format f;
        if (kv_parse_mode(c->arg, &f)) return script_fail(d, c, omni_last_error());
        demo_set_format(d, c->kind == SC_KV_B, c->arg);
        break;
    }
    case SC_OPEN: demo_open(d, c->arg); break;
    case SC_DROP: {
        SDL_Event e;
        SDL_zero(e);
        e.type = SDL_DROPFILE, e.drop.windowID = SDL_GetWindowID(d->win), e.drop.file = SDL_strdup(c->arg);
        if (e.drop.file) SDL_PushEvent(&e);
        break;
    }
    case SC_PROMPT: demo_prompt_set(d, c->arg); break;
    case SC_TYPE: push_text(d, c->arg); break;
    case SC_KEY: push_key(d, c); break;
    case SC_CLICK: push_click(d, c); break;
    case SC_WAIT: {
        if (d->sc_until == 0) d->sc_until = now + c->seconds * 1000;
        int ok = wait_ready(d, c);
        if (ok < 0) return script_fail(d, c, "wait: nothing is running (did the click start a run?)");
        if (!ok && now > d->sc_until) return script_fail(d, c, "wait: timed out");
        next = ok;
        break;
    }
    case SC_SLEEP:
        if (d->sc_until == 0) d->sc_until = now + c->a;
        next = now >= d->sc_until;
        break;
    case SC_SCREENSHOT:
        snprintf(d->shot_path, sizeof d->shot_path, "%s", c->arg);
        d->shot_pending = 1;
        break;
    case SC_PRINT: print_answers(d); break;
    case SC_EXPECT:
        if (!log_has(d, c->arg)) return script_fail(d, c, "expect: no message shown contains that text");
        break;
    case SC_COMPOSE: push_compose(d, c->arg); break;
    case SC_CLIPBOARD:
        if (SDL_SetClipboardText(c->arg)) return script_fail(d, c, SDL_GetError());
        break;
    case SC_STATE: print_state(d); break;
    case SC_CLOSE: {
        SDL_Event e;
        SDL_zero(e);
        e.type = SDL_QUIT;
        SDL_PushEvent(&e);
        break;
    }
    }
    if (next) d->sc_pc++, d->sc_until = 0;
}

/* ---- the loop ---------------------------------------------------------------------------------------------- */

static int busy(demo *d) {
    return demo_generating(d) || d->loading || d->opens_pending || d->playing || d->sc_active ||
           demo_worker_busy(d->w) || d->shot_pending;
}

static void one_frame(demo *d) {
    double f0 = omni_time_ms(), c0 = thread_cpu_ms();
    SDL_Event e;
    int got = SDL_PollEvent(&e);
    if (!got && !busy(d)) { /* idle: sleep until input */
        got = SDL_WaitEventTimeout(&e, 100);
        f0 = omni_time_ms(), c0 = thread_cpu_ms();
    }
    for (; got; got = SDL_PollEvent(&e)) demo_handle_event(d, &e);
    if (d->interrupted && *d->interrupted) d->quit = 1;
    demo_drain(d);
    script_step(d);
    update_scale(d);
    demo_layout(d);
    demo_draw(d);
    double shot0 = omni_time_ms(), shot_c0 = thread_cpu_ms();
    if (d->shot_pending) {
        d->shot_pending = 0;
        omni_status st = save_png(d, d->shot_path);
        if (st) {
            demo_log(d, 1, "%s", omni_last_error());
            if (d->sc_active) d->exit_status = st, d->quit = 1;
        } else {
            demo_log(d, 0, "screenshot %s (%dx%d)", d->shot_path, d->W, d->H);
        }
    }
    double shot_ms = omni_time_ms() - shot0, shot_cpu = thread_cpu_ms() - shot_c0; /* not part of the frame */
    if (d->n_drawn) SDL_RenderPresent(d->r); /* nothing changed: nothing to show */
    double ms = omni_time_ms() - f0 - shot_ms;
    if (d->n_drawn) record_frame(d, ms, thread_cpu_ms() - c0 - shot_cpu);
    d->iterations++, d->state_frames++; /* every pass of the loop, drawn or not */
    if (ms > d->state_max_ms) d->state_max_ms = ms;
    if ((!d->vsync || !d->n_drawn) && ms < 16) /* ~60 frames per second at most (vsync: presenting waits) */
        SDL_Delay((Uint32)(16 - ms));
}

static omni_status open_window(demo *d) {
    if (d->o.script && !getenv("SDL_VIDEODRIVER") && !getenv("DISPLAY") && !getenv("WAYLAND_DISPLAY"))
        setenv("SDL_VIDEODRIVER", "offscreen", 1); /* headless: no display needed */
    if (d->o.script) /* the software renderer's pixels go straight to the window: no GL (llvmpipe) behind it */
        SDL_SetHint(SDL_HINT_FRAMEBUFFER_ACCELERATION, "0");
    SDL_SetHint(SDL_HINT_IME_SHOW_UI, "1");
    SDL_SetHint(SDL_HINT_IME_SUPPORT_EXTENDED_TEXT, "1");
    SDL_SetHint(SDL_HINT_VIDEO_X11_NET_WM_BYPASS_COMPOSITOR, "0");
    if (SDL_Init(SDL_INIT_VIDEO | SDL_INIT_EVENTS))
        return omni_fail(OMNI_ERR_RUNTIME, "cannot open a window: %s (no display? use --script with "
                                           "SDL_VIDEODRIVER=offscreen, or xvfb-run)", SDL_GetError());
    Uint32 flags = SDL_WINDOW_RESIZABLE | SDL_WINDOW_ALLOW_HIGHDPI;
    d->win = SDL_CreateWindow("omni demo", SDL_WINDOWPOS_CENTERED, SDL_WINDOWPOS_CENTERED, d->o.width, d->o.height,
                              flags);
    if (!d->win) return omni_fail(OMNI_ERR_RUNTIME, "cannot open a window: %s", SDL_GetError());
    SDL_SetWindowMinimumSize(d->win, 720, 520);
    if (!d->o.script) d->r = SDL_CreateRenderer(d->win, -1, SDL_RENDERER_ACCELERATED | SDL_RENDERER_PRESENTVSYNC);
    if (!d->r) d->r = SDL_CreateRenderer(d->win, -1, SDL_RENDERER_SOFTWARE); /* scripts: the same pixels anywhere */
    if (!d->r) return omni_fail(OMNI_ERR_RUNTIME, "cannot make a renderer: %s", SDL_GetError());
    SDL_RendererInfo ri;
    SDL_GetRendererInfo(d->r, &ri);
    /* The software renderer says "vsync" but its window framebuffer (offscreen, X11) never waits: without the
     * frame loop's own sleep the UI thread would spin, and a thread that never sleeps is the first one the
     * scheduler makes wait when the cores are busy (session 5's 35.5 ms p95 under load). */
    d->vsync = (ri.flags & SDL_RENDERER_PRESENTVSYNC) && !(ri.flags & SDL_RENDERER_SOFTWARE);
    d->partial = (ri.flags & SDL_RENDERER_SOFTWARE) != 0; /* draws into the window's pixels, which stay */
    float ddpi = 0;
    int ww, wh, ow, oh;
    SDL_GetWindowSize(d->win, &ww, &wh);
    SDL_GetRendererOutputSize(d->r, &ow, &oh);
    d->zoom = 1.f; /* X11 reports no HiDPI scaling: take the display's DPI instead */
    if (!d->o.script && ow == ww && !SDL_GetDisplayDPI(SDL_GetWindowDisplayIndex(d->win), &ddpi, NULL, NULL) &&
        ddpi > 130)
        d->zoom = ddpi / 96.f > 2.5f ? 2.5f : ddpi / 96.f;
    omni_status st = ui_text_init(d->r, d->o.font, &d->txt);
    if (st) return st;
    fprintf(stderr, "demo: video %s, renderer %s%s, %dx%d pixels, fonts: %s\n", SDL_GetCurrentVideoDriver(), ri.name,
            d->vsync ? " (vsync)" : "", ow, oh, ui_text_faces(d->txt));
    SDL_StartTextInput();
    return OMNI_OK;
}

static void close_all(demo *d) {
    if (d->win) SDL_HideWindow(d->win); /* gone at once; the threads finish behind it */
    demo_worker_free(d->w);
    d->w = NULL;
    demo_free_state(d);
    demo_charts_free(d);
    free(d->frame_ms), free(d->peaks), free(d->kl_xy);
    ui_text_free(d->txt);
    if (d->r) SDL_DestroyRenderer(d->r);
    if (d->win) SDL_DestroyWindow(d->win);
    if (TTF_WasInit()) TTF_Quit();
    SDL_Quit();
    demo_script_free(&d->sc);
}

omni_status demo_main(const demo_options *o, volatile int *interrupted) {
    demo *d = calloc(1, sizeof *d);
    if (!d) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    d->o = *o;
    d->interrupted = interrupted;
    d->t0 = omni_time_ms();
    d->cur_model = -1;
    snprintf(d->kv_a, sizeof d->kv_a, "%s", o->kv_a);
    snprintf(d->kv_b, sizeof d->kv_b, "%s", o->kv_b);
    int first = -1;
    demo_worker_params wp = demo_worker_default_params();
    wp.args = o->args, wp.kv_a = o->kv_a, wp.kv_b = o->kv_b;
    omni_status st = o->script ? demo_script_load(o->script, &d->sc) : OMNI_OK;
    d->sc_active = o->script != NULL;
    if (!st) st = pick_model(d, &first);
    if (!st) st = demo_worker_init(&wp, &d->w); /* checks both formats */
    if (!st) st = open_window(d);
    if (!st) {
        demo_prompt_set(d, "");
        if (first >= 0) demo_select_model(d, first);
        else demo_log(d, 1, "no model found: give -m MODEL (assets/models/ is empty)");
        if (d->o.script) demo_log(d, 0, "running script %s (%d commands)", d->sc.name, d->sc.n);
        while (!d->quit) one_frame(d);
        if (d->sc_active) print_answers(d);
        print_frames(d);
        if (d->exit_status) st = omni_fail(d->exit_status, "%s", d->msg);
    }
    char err[1024];
    snprintf(err, sizeof err, "%s", omni_last_error());
    close_all(d);
    free(d);
    if (st) omni_fail(st, "%s", err);
    return st;
}
