/* demo_impl.h - the demo window's state, shared by its parts (private to app/ui/):
 *   demo.c        entry, SDL set-up, the frame loop, frame timing, the script runner, screenshots
 *   demo_state.c  worker events -> panes, series and messages; the actions (run, stop, clear, presets, pickers)
 *   demo_input.c  SDL events: keys, text input / IME, paste, mouse, drops, pop-up lists, the file browser
 *   demo_draw.c   layout and drawing: bars, media box, prompt, panes, live charts (app/plot, on the chart thread),
 *                 pop-ups, help; regions drawn again only when they changed
 * Sizes are in pixels of the renderer's output; `scale` (HiDPI factor x zoom) turns design units into pixels. */
#ifndef OMNI_APP_UI_DEMO_IMPL_H
#define OMNI_APP_UI_DEMO_IMPL_H

#include <SDL.h>
#include <pthread.h>
#include <stdint.h>

#include "app/plot/plot.h"
#include "app/ui/demo.h"
#include "app/ui/demo_script.h"
#include "app/ui/demo_worker.h"
#include "app/ui/ui_text.h"

#define DEMO_MAX_MODELS 16
#define DEMO_PROMPT_CAP 8192
#define DEMO_LOG 256
#define DEMO_DEC 400 /* most points per chart series */

/* Clickable things (their rectangles are laid out every frame). Areas first: a widget lies on top of those before
 * it (the play button in the media box). */
typedef enum {
    W_NONE = 0, W_MEDIA, W_PROMPT, W_PANE_A, W_PANE_B, W_MODEL, W_KVA, W_KVB, W_OPEN, W_READ, W_AUDIO, W_RUN, W_STOP,
    W_CLEAR, W_PLAY, W_HELP, W_COUNT
} widget_id;

typedef enum { POP_NONE = 0, POP_MODEL, POP_KVA, POP_KVB, POP_FILES, POP_HELP } popup_kind;

/* Parts of the window drawn again only when what they show changed (with a software renderer, whose pixels stay
 * from one frame to the next; other renderers draw everything every frame). */
enum { R_TOP = 0, R_INPUT, R_PANE_A, R_PANE_B, R_CAPS, R_CHARTS, R_STATUS, R_N };

typedef struct {
    double *x, *y;
    int n, cap;
} series;

/* A chart cell for the chart thread: chart `cell` into (x, y, w - inset, h) of the bw x bh buffer. */
typedef struct {
    int cell, x, y, w, h, bw, bh, inset, go;
} chart_job;

typedef struct {
    char *text;        /* streamed answer (NUL-terminated) */
    uint8_t *style;    /* palette index per byte (pane B: divergence marks) */
    int len, cap;
    int *tok_end;      /* byte end of each generated token's text */
    int32_t *toks;
    double *tok_t;     /* arrival time of each token (ms) */
    int n_tok, tok_cap;
    double t_first, t_last;
    int done;
    llm_request_stats st;
    int64_t kv_bytes, kv_tokens;
    series kv, rate;   /* KV MiB vs generated tokens; tokens/s vs seconds */
    ui_lines lines;
    int scroll, follow; /* pixels scrolled; 1 = stick to the end */
} pane;

typedef struct {
    char dir[4096];
    char label[256];
    int has_vision, has_audio;
} model_entry;

typedef struct {
    char name[1024];
    int is_dir;
} file_entry;

typedef struct demo {
    demo_options o;
    volatile int *interrupted;
    SDL_Window *win;
    SDL_Renderer *r;
    ui_text *txt;
    demo_worker *w;
    int W, H;          /* output pixels */
    int vsync;         /* presenting waits for the display */
    float hidpi, zoom, scale;
    int quit, exit_status;
    double t0;
    /* models */
    model_entry models[DEMO_MAX_MODELS];
    int n_models, cur_model, loading;
    demo_model_info info;
    int model_ready, gpu; /* gpu: the model runs on CUDA (the memory chart shows the device's memory) */
    char kv_a[32], kv_b[32];
    /* media */
    char image_path[4096], audio_path[4096];
    SDL_Texture *thumb;
    int thumb_w, thumb_h, img_w, img_h;
    int64_t img_bytes, audio_bytes;
    float *samples;
    int64_t n_samples;
    double audio_s;
    int audio_rate, audio_ch;
    SDL_AudioDeviceID adev;
    int playing, opens_pending;
    const float *play_src; /* what the audio callback plays (under the device lock) */
    int64_t play_n, play_pos;
    /* prompt */
    char prompt[DEMO_PROMPT_CAP];
    int plen, cursor;
    char ime[128];
    ui_lines plines;
    /* the run shown */
    int run, run_failed, n_prompt, pending_preset;
    double t_submit;
    char run_kv[2][32], run_info[512];
    pane p[2];
    double *kl;
    uint8_t *dis;      /* top-1 differs at that generated token */
    int n_div, div_cap, n_agree;
    double kl_sum;
    series mem_rss, mem_gpu;
    double t_mem;
    /* charts */
    plot_chart *ch[4];
    float chart_scale;
    double *kl_xy;     /* chart scratch: 4 x kl_cap */
    int kl_cap;
    double dec[4][DEMO_DEC]; /* the points a chart gets (x, y of two series) */
    uint64_t sig[R_N];  /* what each region showed when it was drawn last */
    int partial;        /* the renderer keeps its pixels: unchanged regions are not drawn again */
    int redraw_all, expose, n_drawn;
    popup_kind pop_drawn;
    int drawn_w, drawn_h;
    float drawn_scale;
    int chart_serial;   /* + 1 for every chart cell drawn */
    pthread_t cthread;  /* the chart thread (started with the first cell it draws) */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    int cthread_on, cjob_busy, cjob_done, cjob_quit;
    chart_job cjob;
    double frame_shown, t_frame_shown; /* the status bar's frame time (changed twice a second at most) */
    uint32_t *chart_px;
    SDL_Texture *chart_tex;
    int chart_w, chart_h, charts_dirty;
    int chart_stale, chart_next; /* bit i: chart i needs drawing; the next to draw */
    double t_charts;
    /* messages */
    char msg[1024];
    int msg_err;
    char *log[DEMO_LOG];
    int n_log;
    /* layout + input */
    SDL_Rect wr[W_COUNT];
    SDL_Rect r_top, r_text[2], r_caps, r_charts, r_status, r_prompt_text, r_wave;
    float *peaks;      /* waveform: min, max per column of r_wave */
    int peaks_cols;
    const float *peaks_src;
    int enabled[W_COUNT];
    int mouse_x, mouse_y, press_id;
    popup_kind pop;
    SDL_Rect pop_rect;
    int pop_scroll, pop_hover;
    char cwd[4096];
    file_entry *files;
    int n_files;
    /* frame timing (while both panes generate) */
    double *frame_ms;
    int n_frames, frame_cap, frames_total;
    double last_frame_ms;
    int iterations;      /* passes of the frame loop */
    int state_frames;    /* passes since the script's last `state`, and the longest of them (ms) */
    double state_max_ms;
    /* script */
    demo_script sc;
    int sc_pc, sc_active;
    double sc_until;
    char shot_path[4096];
    int shot_pending;
} demo;

/* demo_state.c */
void demo_log(demo *d, int is_error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void demo_drain(demo *d);
void demo_clear(demo *d);
void demo_run(demo *d, int preset); /* 0 = the prompt as typed; 1 = "Read the text"; 2 = "Ask about the audio" */
void demo_stop(demo *d);
void demo_select_model(demo *d, int i);
void demo_set_format(demo *d, int pane, const char *fmt);
void demo_open(demo *d, const char *path);
void demo_toggle_play(demo *d);
double demo_play_progress(demo *d); /* 0..1; stops the playing state at the end */
int demo_generating(const demo *d);
void demo_sample_memory(demo *d);
void demo_free_state(demo *d);
int demo_series_add(series *s, double x, double y);
extern const char *const demo_formats[];
extern const int demo_n_formats;

/* demo_input.c */
void demo_handle_event(demo *d, const SDL_Event *e);
void demo_prompt_set(demo *d, const char *text);
void demo_list_files(demo *d, const char *dir);

/* demo_draw.c */
void demo_layout(demo *d);
void demo_draw(demo *d);
omni_status demo_charts_init(demo *d);
void demo_charts_free(demo *d);
int demo_px(const demo *d, double units); /* design units -> pixels */

#endif
