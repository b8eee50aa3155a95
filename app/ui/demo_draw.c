/* demo_draw.c - the demo window's layout and drawing: top bar (model and format pickers), media box (thumbnail or
 * waveform with a play button), prompt box and buttons, the two answer panes with their live numbers, four live
 * charts drawn with app/plot into an ARGB buffer shown as one texture, the status bar, pop-up lists and the help
 * overlay. Light theme; every size is design units x d->scale. UI thread, except the chart thread, which draws
 * one chart cell at a time with cairo so that no frame waits for a chart.
 * With the software renderer (scripts, no GPU) the window's pixels stay from one frame to the next: each region
 * (top bar, input row, pane A, pane B, captions, charts, status bar) is drawn again only when what it shows changed
 * (a hash of it), and a frame where nothing changed draws nothing. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "app/ui/demo_impl.h"

static const SDL_Color C_BG = {244, 245, 248, 255}, C_PANEL = {255, 255, 255, 255}, C_BORDER = {208, 213, 221, 255},
                       C_TEXT = {28, 32, 38, 255}, C_MUTED = {105, 113, 124, 255}, C_BUTTON = {233, 237, 242, 255},
                       C_HOVER = {218, 225, 234, 255}, C_ERR = {190, 30, 30, 255}, C_WHITE = {255, 255, 255, 255},
                       C_ACCENT = {0, 114, 178, 255};

#define CHART_REDRAW_MS 150

int demo_px(const demo *d, double units) { return (int)(units * d->scale + 0.5); }

/* ---- regions: drawn again only when what they show changed --------------------------------------------------- */

static uint64_t h_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static uint64_t h_str(uint64_t h, const char *s) { return h_bytes(h, s, strlen(s) + 1); }

static uint64_t h_int(uint64_t h, int64_t v) { return h_bytes(h, &v, sizeof v); }

static uint64_t h_rect(uint64_t h, SDL_Rect r) { return h_bytes(h, &r, sizeof r); }

/* Hover and press state (buttons look different under the mouse). */
static uint64_t h_mouse(const demo *d, uint64_t h) {
    return h_int(h_int(h_int(h, d->mouse_x), d->mouse_y), d->press_id);
}

/* 1 when region i must be drawn this frame: everything is drawn again, or what it shows changed (sig). */
static int region(demo *d, int i, uint64_t sig) {
    if (!d->redraw_all && d->sig[i] == sig) return 0;
    d->sig[i] = sig;
    d->n_drawn++;
    return 1;
}

static SDL_Color argb(uint32_t c) {
    SDL_Color s = {(c >> 16) & 255, (c >> 8) & 255, c & 255, 255};
    return s;
}

/* Opaque fills without blending: the software renderer's fast path (blending is per pixel even at alpha 255). */
static void fill(demo *d, SDL_Rect r, SDL_Color c) {
    SDL_SetRenderDrawBlendMode(d->r, c.a == 255 ? SDL_BLENDMODE_NONE : SDL_BLENDMODE_BLEND);
    SDL_SetRenderDrawColor(d->r, c.r, c.g, c.b, c.a);
    SDL_RenderFillRect(d->r, &r);
}

static void frame(demo *d, SDL_Rect r, SDL_Color c) {
    SDL_SetRenderDrawBlendMode(d->r, c.a == 255 ? SDL_BLENDMODE_NONE : SDL_BLENDMODE_BLEND);
    SDL_SetRenderDrawColor(d->r, c.r, c.g, c.b, c.a);
    SDL_RenderDrawRect(d->r, &r);
}

static SDL_Rect rect(int x, int y, int w, int h) {
    SDL_Rect r = {x, y, w > 0 ? w : 0, h > 0 ? h : 0};
    return r;
}

static int lh(const demo *d, ui_size s) { return ui_text_line_height(d->txt, s); }

/* Text clipped to a rectangle, vertically centred. */
static void label(demo *d, SDL_Rect r, ui_size s, const char *t, SDL_Color c, int center) {
    SDL_Rect old, clip = rect(r.x, r.y - r.h / 4, r.w, r.h + r.h / 2); /* room for descenders */
    SDL_RenderGetClipRect(d->r, &old);
    int had = SDL_RenderIsClipEnabled(d->r);
    SDL_RenderSetClipRect(d->r, &clip);
    char cut[1024];
    int w = ui_text_width(d->txt, s, t, -1);
    if (w > r.w && r.w > 0) { /* too long: whole characters and an ellipsis */
        int n = 0, ell = ui_text_width(d->txt, s, "…", -1), len = (int)strlen(t);
        for (int i = 0, x = 0; i < len && n < (int)sizeof cut - 4;) {
            int j = i;
            ui_utf8_next(t, len, &j);
            x += ui_text_width(d->txt, s, t + i, j - i);
            if (x + ell > r.w || j > (int)sizeof cut - 4) break;
            n = i = j;
        }
        memcpy(cut, t, (size_t)n);
        memcpy(cut + n, "…", sizeof "…");
        t = cut;
        w = ui_text_width(d->txt, s, t, -1);
    }
    int x = center ? r.x + (r.w - w) / 2 : r.x;
    ui_text_draw(d->txt, s, t, -1, x, r.y + (r.h - lh(d, s)) / 2, c);
    SDL_RenderSetClipRect(d->r, had ? &old : NULL);
}

static int hover(const demo *d, widget_id id) {
    const SDL_Rect *r = &d->wr[id];
    return !d->pop && d->mouse_x >= r->x && d->mouse_x < r->x + r->w && d->mouse_y >= r->y && d->mouse_y < r->y + r->h;
}

static void button(demo *d, widget_id id, const char *text, int primary) {
    SDL_Rect r = d->wr[id];
    int on = d->enabled[id];
    SDL_Color bg = primary && on ? C_ACCENT : hover(d, id) && on ? C_HOVER : C_BUTTON;
    if (d->press_id == (int)id && on) bg = C_HOVER;
    fill(d, r, bg);
    frame(d, r, C_BORDER);
    SDL_Rect in = rect(r.x + demo_px(d, 6), r.y, r.w - demo_px(d, 12), r.h);
    label(d, in, UI_BODY, text, primary && on ? C_WHITE : on ? C_TEXT : C_MUTED, 1);
}

/* ---- layout ------------------------------------------------------------------------------------------------ */

/* A row of buttons from x, each as wide as its text plus padding; returns the x after the last. */
static int row(demo *d, const widget_id *ids, const char *const *texts, int n, int x, int y, int h) {
    for (int i = 0; i < n; i++) {
        int w = ui_text_width(d->txt, UI_BODY, texts[i], -1) + demo_px(d, 22);
        d->wr[ids[i]] = rect(x, y, w, h);
        x += w + demo_px(d, 6);
    }
    return x;
}

static const widget_id g_left_ids[] = {W_OPEN, W_READ, W_AUDIO};
static const char *const g_left_txt[] = {"Open file…", "Read the text", "Ask about the audio"};
static const widget_id g_right_ids[] = {W_RUN, W_STOP, W_CLEAR};
static const char *const g_right_txt[] = {"Run", "Stop", "Clear"};

void demo_layout(demo *d) {
    int pad = demo_px(d, 8), W = d->W, H = d->H;
    memset(d->wr, 0, sizeof d->wr);
    int top_h = lh(d, UI_TITLE) + demo_px(d, 16), bh = lh(d, UI_BODY) + demo_px(d, 10);
    d->r_top = rect(0, 0, W, top_h);
    int x = pad + ui_text_width(d->txt, UI_TITLE, "omni demo", -1) + demo_px(d, 18);
    d->wr[W_MODEL] = rect(x, (top_h - bh) / 2, demo_px(d, 300), bh);
    x += d->wr[W_MODEL].w + pad;
    d->wr[W_KVA] = rect(x, (top_h - bh) / 2, demo_px(d, 120), bh);
    x += d->wr[W_KVA].w + pad;
    d->wr[W_KVB] = rect(x, (top_h - bh) / 2, demo_px(d, 120), bh);
    d->wr[W_HELP] = rect(W - pad - bh, (top_h - bh) / 2, bh, bh);
    /* input row: media box | prompt box over the buttons */
    int in_y = top_h + pad, in_h = demo_px(d, 132), media_w = demo_px(d, 230);
    d->wr[W_MEDIA] = rect(pad, in_y, media_w, in_h);
    d->r_wave = rect(0, 0, 0, 0);
    if (d->samples) {
        int wh = d->thumb ? in_h * 2 / 5 : in_h - lh(d, UI_SMALL) - demo_px(d, 8);
        d->r_wave = rect(pad + 1, in_y + in_h - wh - 1, media_w - 2, wh);
        d->wr[W_PLAY] = rect(pad + media_w - demo_px(d, 74), in_y + in_h - bh - demo_px(d, 4), demo_px(d, 70), bh);
    }
    int px0 = pad * 2 + media_w, pw = W - px0 - pad;
    d->wr[W_PROMPT] = rect(px0, in_y, pw, in_h - bh - demo_px(d, 6));
    d->r_prompt_text = rect(px0 + pad, in_y + demo_px(d, 5), pw - 2 * pad, d->wr[W_PROMPT].h - demo_px(d, 10));
    int by = in_y + in_h - bh;
    row(d, g_left_ids, g_left_txt, 3, px0, by, bh);
    int rw = 0;
    for (int i = 0; i < 3; i++) rw += ui_text_width(d->txt, UI_BODY, g_right_txt[i], -1) + demo_px(d, 28);
    row(d, g_right_ids, g_right_txt, 3, W - pad - rw + demo_px(d, 6), by, bh);
    /* status bar, charts, panes from the bottom up */
    int st_h = lh(d, UI_SMALL) + demo_px(d, 8);
    d->r_status = rect(0, H - st_h, W, st_h);
    int cap_h = lh(d, UI_SMALL) + demo_px(d, 6);
    int ch_h = (int)(H * 0.28);
    if (ch_h < demo_px(d, 150)) ch_h = demo_px(d, 150);
    if (ch_h > demo_px(d, 330)) ch_h = demo_px(d, 330);
    d->r_charts = rect(pad, H - st_h - pad - ch_h, W - 2 * pad, ch_h);
    d->r_caps = rect(pad, d->r_charts.y - cap_h, W - 2 * pad, cap_h);
    int pane_y = in_y + in_h + pad, pane_h = d->r_caps.y - pad - pane_y, pane_w = (W - 3 * pad) / 2;
    int head = lh(d, UI_TITLE) + 2 * lh(d, UI_SMALL) + demo_px(d, 12);
    for (int k = 0; k < 2; k++) {
        SDL_Rect pr = rect(pad + k * (pane_w + pad), pane_y, pane_w, pane_h);
        d->wr[k ? W_PANE_B : W_PANE_A] = pr;
        d->r_text[k] = rect(pr.x + pad, pr.y + head, pr.w - 2 * pad, pr.h - head - pad);
    }
    for (int i = 0; i < W_COUNT; i++) d->enabled[i] = 1;
    d->enabled[W_STOP] = demo_generating(d);
    d->enabled[W_RUN] = d->model_ready;
    d->enabled[W_READ] = d->image_path[0] != 0;
    d->enabled[W_AUDIO] = d->audio_path[0] != 0;
    d->enabled[W_PLAY] = d->samples != NULL;
}

/* ---- top bar, media, prompt -------------------------------------------------------------------------------- */

static void top_bar(demo *d) {
    fill(d, d->r_top, C_PANEL);
    SDL_Rect line = rect(0, d->r_top.h - 1, d->W, 1);
    fill(d, line, C_BORDER);
    int pad = demo_px(d, 8);
    label(d, rect(pad, 0, d->W, d->r_top.h), UI_TITLE, "omni demo", C_TEXT, 0);
    char t[600];
    const char *name = d->cur_model >= 0 ? d->models[d->cur_model].label : "(none)";
    snprintf(t, sizeof t, "Model: %s%s ▾", name, d->loading ? " (loading…)" : d->model_ready ? "" : " (not loaded)");
    button(d, W_MODEL, t, 0);
    snprintf(t, sizeof t, "A: %s ▾", d->kv_a);
    button(d, W_KVA, t, 0);
    snprintf(t, sizeof t, "B: %s ▾", d->kv_b);
    button(d, W_KVB, t, 0);
    button(d, W_HELP, "?", 0);
    if (d->model_ready && !strcmp(d->info.device, "cpu"))
        snprintf(t, sizeof t, "cpu · %d thread%s", d->info.threads, d->info.threads == 1 ? "" : "s");
    else snprintf(t, sizeof t, "%s", d->model_ready ? d->info.device : "");
    int w = ui_text_width(d->txt, UI_SMALL, t, -1);
    label(d, rect(d->wr[W_HELP].x - pad - w, 0, w, d->r_top.h), UI_SMALL, t, C_MUTED, 0);
}

/* min/max of the samples under each column of the waveform box (recomputed when the box or the audio changes). */
static void make_peaks(demo *d, int cols) {
    if (d->peaks && d->peaks_cols == cols && d->peaks_src == d->samples) return;
    free(d->peaks);
    d->peaks = malloc(sizeof(float) * 2 * (size_t)(cols > 0 ? cols : 1));
    d->peaks_cols = d->peaks ? cols : 0;
    d->peaks_src = d->samples;
    for (int c = 0; d->peaks && c < cols; c++) {
        int64_t a = d->n_samples * c / cols, b = d->n_samples * (c + 1) / cols;
        float lo = 0, hi = 0;
        for (int64_t i = a; i < b; i++) {
            float v = d->samples[i];
            lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        }
        d->peaks[2 * c] = lo, d->peaks[2 * c + 1] = hi;
    }
}

static void waveform(demo *d) {
    SDL_Rect r = d->r_wave;
    fill(d, r, (SDL_Color){236, 242, 248, 255});
    make_peaks(d, r.w);
    SDL_Color c = argb(plot_palette(0));
    SDL_SetRenderDrawBlendMode(d->r, SDL_BLENDMODE_NONE);
    SDL_SetRenderDrawColor(d->r, c.r, c.g, c.b, 255);
    int mid = r.y + r.h / 2;
    for (int i = 0; d->peaks && i < d->peaks_cols; i++) {
        float lo = d->peaks[2 * i] < -1 ? -1 : d->peaks[2 * i], hi = d->peaks[2 * i + 1] > 1 ? 1 : d->peaks[2 * i + 1];
        SDL_RenderDrawLine(d->r, r.x + i, mid - (int)(hi * r.h / 2), r.x + i, mid - (int)(lo * r.h / 2));
    }
    if (d->playing) { /* play head */
        double done = demo_play_progress(d);
        if (d->playing) fill(d, rect(r.x + (int)(done * r.w), r.y, 2, r.h), C_ERR);
    }
    button(d, W_PLAY, d->playing ? "■ Stop" : "▶ Play", 0);
}

static const char *base(const char *p) { return strrchr(p, '/') ? strrchr(p, '/') + 1 : p; }

static void media_box(demo *d) {
    SDL_Rect r = d->wr[W_MEDIA];
    fill(d, r, C_PANEL);
    frame(d, r, C_BORDER);
    int sl = lh(d, UI_SMALL);
    char t[600];
    if (!d->thumb && !d->samples) {
        label(d, rect(r.x, r.y + r.h / 2 - sl, r.w, sl), UI_SMALL, "Drop an image or audio file", C_MUTED, 1);
        label(d, rect(r.x, r.y + r.h / 2, r.w, sl), UI_SMALL, "here, or press Open (Ctrl+O)", C_MUTED, 1);
        return;
    }
    if (d->thumb) {
        int area_h = (d->samples ? r.y + r.h - d->r_wave.h - 1 : r.y + r.h) - r.y - sl - demo_px(d, 6);
        double s = fmin((double)(r.w - 4) / d->thumb_w, (double)area_h / d->thumb_h);
        int w = (int)(d->thumb_w * s), h = (int)(d->thumb_h * s);
        SDL_Rect dst = rect(r.x + (r.w - w) / 2, r.y + 2 + (area_h - h) / 2, w, h);
        SDL_RenderCopy(d->r, d->thumb, NULL, &dst);
        snprintf(t, sizeof t, "%.200s · %dx%d", base(d->image_path), d->img_w, d->img_h);
        label(d, rect(r.x + 4, r.y + area_h + demo_px(d, 3), r.w - 8, sl), UI_SMALL, t, C_MUTED, 1);
    }
    if (d->samples) {
        if (!d->thumb) {
            snprintf(t, sizeof t, "%.200s · %.1f s", base(d->audio_path), d->audio_s);
            label(d, rect(r.x + 4, r.y + demo_px(d, 3), r.w - 8, sl), UI_SMALL, t, C_MUTED, 1);
        }
        waveform(d);
    }
}

/* The prompt with the IME composition at the cursor, wrapped, a caret, scrolled to keep the caret in view. */
static void prompt_box(demo *d, int blink_on) {
    SDL_Rect r = d->wr[W_PROMPT], tr = d->r_prompt_text;
    fill(d, r, C_PANEL);
    frame(d, r, d->pop ? C_BORDER : C_ACCENT);
    int il = (int)strlen(d->ime);
    static char buf[DEMO_PROMPT_CAP + 160];
    memcpy(buf, d->prompt, (size_t)d->cursor);
    memcpy(buf + d->cursor, d->ime, (size_t)il);
    memcpy(buf + d->cursor + il, d->prompt + d->cursor, (size_t)(d->plen - d->cursor) + 1);
    int len = d->plen + il, caret = d->cursor + il, line_h = lh(d, UI_BODY);
    if (!len)
        label(d, rect(tr.x, tr.y, tr.w, line_h), UI_BODY,
              "Ask something, or pick a preset (Enter runs, Shift+Enter: new line)", C_MUTED, 0);
    if (ui_text_wrap(d->txt, UI_BODY, buf, len, tr.w, &d->plines)) return;
    int cl = 0;
    while (cl + 1 < d->plines.n && d->plines.start[cl + 1] <= caret) cl++;
    int vis = tr.h / line_h > 0 ? tr.h / line_h : 1, first = cl - vis + 1 > 0 ? cl - vis + 1 : 0;
    SDL_RenderSetClipRect(d->r, &tr);
    static const ui_style pal[2] = {{{28, 32, 38, 255}, {255, 255, 255, 255}, 1},
                                    {{0, 90, 150, 255}, {220, 234, 248, 255}, 1}};
    static uint8_t style[DEMO_PROMPT_CAP + 160];
    memset(style, 0, (size_t)len);
    memset(style + d->cursor, 1, (size_t)il); /* the composition, marked */
    ui_text_draw_lines(d->txt, UI_BODY, buf, len, &d->plines, tr.x, tr.y, first, first + vis, style, pal);
    int cx = tr.x + ui_text_width(d->txt, UI_BODY, buf + d->plines.start[cl], caret - d->plines.start[cl]);
    int cy = tr.y + (cl - first) * line_h;
    if (!d->pop && blink_on) fill(d, rect(cx, cy, demo_px(d, 2), line_h), C_TEXT);
    SDL_RenderSetClipRect(d->r, NULL);
    SDL_Rect ir = rect((int)(cx / d->hidpi), (int)(cy / d->hidpi), 1, (int)(line_h / d->hidpi)); /* IME window */
    SDL_SetTextInputRect(&ir);
}

/* ---- panes ------------------------------------------------------------------------------------------------- */

static const ui_style g_pane_pal[3] = {
    {{28, 32, 38, 255}, {255, 255, 255, 255}, 1}, /* on the panel's white: opaque lines */
    {{120, 0, 0, 255}, {255, 205, 200, 255}, 1}, /* top-1 differs */
    {{90, 60, 0, 255}, {255, 236, 190, 255}, 1}, /* KL >= 0.1 */
};

static void pane_state(const demo *d, int k, char *t, int cap) {
    const pane *p = &d->p[k];
    if (!d->run) snprintf(t, (size_t)cap, "idle");
    else if (p->done) snprintf(t, (size_t)cap, "done: %s", llm_finish_name(p->st.finish));
    else if (d->run_failed) snprintf(t, (size_t)cap, "failed");
    else if (!d->t_submit) snprintf(t, (size_t)cap, "preparing the prompt…");
    else if (!p->n_tok) snprintf(t, (size_t)cap, "reading the prompt (%d tokens)…", d->n_prompt);
    else snprintf(t, (size_t)cap, "generating…");
}

static void pane_stats(const demo *d, int k, char *t, int cap) {
    const pane *p = &d->p[k];
    double rate = 0, ttft = 0;
    if (p->done) rate = p->st.tokens_per_s, ttft = p->st.ttft_ms;
    else if (p->n_tok >= 2) rate = (p->n_tok - 1) * 1000.0 / (p->t_last - p->t_first + 1e-9);
    if (!p->done && p->n_tok) ttft = p->t_first - d->t_submit;
    int n = snprintf(t, (size_t)cap, "%.1f tokens/s · TTFT %.0f ms · %d tokens · KV %.3f MiB", rate, ttft, p->n_tok,
                     p->kv_bytes / 1048576.0);
    if (p->kv_tokens > 0 && n < cap)
        n += snprintf(t + n, (size_t)(cap - n), " (%.0f B/token)", (double)p->kv_bytes / p->kv_tokens);
    if (k == 1 && d->p[0].kv_bytes > 0 && p->kv_bytes > 0 && n < cap)
        snprintf(t + n, (size_t)(cap - n), " · %.2fx of A", (double)p->kv_bytes / d->p[0].kv_bytes);
}

static void pane_draw(demo *d, int k) {
    pane *p = &d->p[k];
    SDL_Rect r = d->wr[k ? W_PANE_B : W_PANE_A], tr = d->r_text[k];
    fill(d, r, C_PANEL);
    frame(d, r, C_BORDER);
    int pad = demo_px(d, 8), y = r.y + demo_px(d, 4);
    SDL_Color col = argb(plot_palette(k));
    fill(d, rect(r.x, r.y, demo_px(d, 4), r.h), col);
    char t[600];
    snprintf(t, sizeof t, "%s · %s", k ? "B" : "A", d->run ? d->run_kv[k] : k ? d->kv_b : d->kv_a);
    int w = ui_text_draw(d->txt, UI_TITLE, t, -1, r.x + pad, y, col);
    pane_state(d, k, t, sizeof t);
    label(d, rect(r.x + pad + w + pad, y, r.w - w - 3 * pad, lh(d, UI_TITLE)), UI_SMALL, t, C_MUTED, 0);
    y += lh(d, UI_TITLE) + demo_px(d, 2);
    pane_stats(d, k, t, sizeof t);
    label(d, rect(r.x + pad, y, r.w - 2 * pad, lh(d, UI_SMALL)), UI_SMALL, t, C_TEXT, 0);
    y += lh(d, UI_SMALL);
    const char *legend = k ? "marked: B's top token differs from A's (red) or KL >= 0.1 (amber), fed A's tokens"
                           : "the reference answer";
    label(d, rect(r.x + pad, y, r.w - 2 * pad, lh(d, UI_SMALL)), UI_SMALL, legend, C_MUTED, 0);
    if (!p->text) return;
    if (p->lines.len != p->len || p->lines.width != tr.w)
        ui_text_wrap_grown(d->txt, UI_BODY, p->text, p->len, tr.w, &p->lines); /* answers only grow */
    int line_h = lh(d, UI_BODY), total = p->lines.n * line_h, max_scroll = total > tr.h ? total - tr.h : 0;
    max_scroll = (max_scroll + line_h - 1) / line_h * line_h; /* whole lines at the top when at the end */
    if (p->follow || p->scroll > max_scroll) p->scroll = max_scroll;
    if (p->scroll == max_scroll) p->follow = 1;
    int first = p->scroll / line_h;
    SDL_RenderSetClipRect(d->r, &tr);
    ui_text_draw_lines(d->txt, UI_BODY, p->text, p->len, &p->lines, tr.x, tr.y - p->scroll % line_h, first,
                       first + tr.h / line_h + 2, k ? p->style : NULL, g_pane_pal);
    SDL_RenderSetClipRect(d->r, NULL);
}

/* ---- charts ------------------------------------------------------------------------------------------------ */

void demo_charts_free(demo *d) {
    if (d->cthread_on) { /* the chart thread finishes its cell and ends */
        pthread_mutex_lock(&d->cmu);
        d->cjob_quit = 1;
        pthread_cond_signal(&d->ccv);
        pthread_mutex_unlock(&d->cmu);
        pthread_join(d->cthread, NULL);
        pthread_mutex_destroy(&d->cmu);
        pthread_cond_destroy(&d->ccv);
        d->cthread_on = 0;
    }
    for (int i = 0; i < 4; i++) plot_free(d->ch[i]), d->ch[i] = NULL;
    if (d->chart_tex) SDL_DestroyTexture(d->chart_tex);
    d->chart_tex = NULL;
    free(d->chart_px);
    d->chart_px = NULL;
    d->chart_w = d->chart_h = 0;
}

static omni_status chart(demo *d, int i, const char *title, const char *xl, const char *yl, const char *const *names,
                         const uint32_t *colors, const int *markers, int n) {
    plot_params p = plot_default_params();
    p.title = title, p.x_label = xl, p.y_label = yl;
    p.font_size = 11 * d->scale;
    p.background = 0xFFFFFFFFu;
    omni_status st = plot_init(&p, &d->ch[i]);
    for (int s = 0; !st && s < n; s++) {
        plot_series se = plot_default_series();
        se.name = names[s], se.color = colors[s], se.markers = markers[s];
        se.line_width = markers[s] ? 0 : 2 * d->scale;
        st = plot_add_series(d->ch[i], &se, NULL);
    }
    return st;
}

omni_status demo_charts_init(demo *d) {
    for (int i = 0; i < 4; i++) plot_free(d->ch[i]), d->ch[i] = NULL;
    d->chart_scale = d->scale;
    const char *ab[2] = {"A", "B"}, *mem[2] = {"process RSS", "GPU in use"}, *kl[2] = {"KL(A||B)", "top-1 differs"};
    const uint32_t cab[2] = {plot_palette(0), plot_palette(1)}, cmem[2] = {plot_palette(2), plot_palette(4)},
                   ckl[2] = {plot_palette(6), 0xFFCC2222u};
    const int lines[2] = {0, 0}, klm[2] = {0, 1};
    int gpu = d->gpu;
    omni_status st = chart(d, 0, "KV cache vs generated tokens", "generated tokens", "MiB", ab, cab, lines, 2);
    if (!st) st = chart(d, 1, "decode speed", "seconds since the request", "tokens/s", ab, cab, lines, 2);
    if (!st) st = chart(d, 2, "memory", "seconds", "MiB", mem, cmem, lines, gpu ? 2 : 1);
    if (!st) st = chart(d, 3, "B fed A's tokens: divergence", "generated token", "KL (nats)", kl, ckl, klm, 2);
    d->charts_dirty = 1;
    return st;
}

/* At most DEMO_DEC points: the largest y of each of DEMO_DEC runs of consecutive points (a chart a few hundred
 * pixels wide shows the same, and cairo's time grows with the points). Returns the count written. */
static int decimate(const double *x, const double *y, int n, double *ox, double *oy) {
    if (n <= 0) return 0;
    if (n <= DEMO_DEC) {
        memcpy(ox, x, sizeof(double) * (size_t)n);
        memcpy(oy, y, sizeof(double) * (size_t)n);
        return n;
    }
    for (int b = 0; b < DEMO_DEC; b++) {
        int a = (int)((int64_t)n * b / DEMO_DEC), e = (int)((int64_t)n * (b + 1) / DEMO_DEC), best = a;
        for (int i = a + 1; i < e; i++) best = y[i] > y[best] ? i : best;
        ox[b] = x[best], oy[b] = y[best];
    }
    return DEMO_DEC;
}

static void set_series(demo *d, int chart, int k, const double *x, const double *y, int n) {
    double *ox = d->dec[2 * k], *oy = d->dec[2 * k + 1];
    plot_set_data(d->ch[chart], k, ox, oy, decimate(x, y, n, ox, oy));
}

/* Chart i's series from the state. */
static void chart_data(demo *d, int i) {
    if (i < 2)
        for (int k = 0; k < 2; k++) {
            const series *s = i == 0 ? &d->p[k].kv : &d->p[k].rate;
            set_series(d, i, k, s->x, s->y, s->n);
        }
    if (i == 2) {
        set_series(d, 2, 0, d->mem_rss.x, d->mem_rss.y, d->mem_rss.n);
        if (plot_series_count(d->ch[2]) > 1) set_series(d, 2, 1, d->mem_gpu.x, d->mem_gpu.y, d->mem_gpu.n);
    }
    if (i != 3) return;
    /* KL per generated token, and markers where the top tokens differ: [4][kl_cap] scratch */
    if (d->n_div > d->kl_cap) {
        double *p = realloc(d->kl_xy, sizeof(double) * 4 * (size_t)d->n_div * 2);
        if (!p) return;
        d->kl_xy = p, d->kl_cap = d->n_div * 2;
    }
    double *x = d->kl_xy, *y = x + d->kl_cap, *dx = y + d->kl_cap, *dy = dx + d->kl_cap;
    int n = 0, m = 0;
    for (int j = 0; j < d->n_div; j++) {
        if (d->kl[j] < 0) continue;
        x[n] = j, y[n++] = d->kl[j];
        if (d->dis[j]) dx[m] = j, dy[m++] = d->kl[j];
    }
    set_series(d, 3, 0, x, y, n);
    set_series(d, 3, 1, dx, dy, m);
}

/* Cell i of the chart buffer drawn (background of the gaps, then the chart). Chart thread, or UI thread while the
 * chart thread is idle. */
static void draw_cell(demo *d, const chart_job *j) {
    uint32_t bg = 0xFF000000u | (uint32_t)C_BG.r << 16 | (uint32_t)C_BG.g << 8 | C_BG.b; /* the gaps */
    for (int row = j->y; row < j->y + j->h; row++)
        for (int col = j->x; col < j->x + j->w; col++) d->chart_px[(size_t)row * j->bw + col] = bg;
    plot_draw_argb(d->ch[j->cell], d->chart_px, j->bw, j->bh, j->bw * 4, j->x, j->y, j->w - j->inset, j->h);
}

/* The cell's pixels into the charts' texture. UI thread. */
static void upload_cell(demo *d, const chart_job *j) {
    SDL_Rect cell = {j->x, j->y, j->w, j->h};
    if (d->chart_tex) SDL_UpdateTexture(d->chart_tex, &cell, d->chart_px + (size_t)j->y * j->bw + j->x, j->bw * 4);
    d->chart_serial++;
}

/* The chart thread: cairo draws the cell the UI posted, so that a frame never waits for a chart. While it draws
 * (busy), the UI touches neither the charts nor their buffer. */
static void *chart_main(void *arg) {
    demo *d = arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 2); /* after the UI thread's frames */
    pthread_mutex_lock(&d->cmu);
    for (;;) {
        while (!d->cjob.go && !d->cjob_quit) pthread_cond_wait(&d->ccv, &d->cmu);
        if (d->cjob_quit) break;
        d->cjob.go = 0;
        chart_job j = d->cjob;
        pthread_mutex_unlock(&d->cmu);
        draw_cell(d, &j);
        pthread_mutex_lock(&d->cmu);
        d->cjob_busy = 0, d->cjob_done = j.cell;
        pthread_cond_broadcast(&d->ccv);
    }
    pthread_mutex_unlock(&d->cmu);
    return NULL;
}

/* 0 while the chart thread draws (wait: until it is done); then its cell goes into the texture. */
static int charts_idle(demo *d, int wait) {
    if (!d->cthread_on) return 1;
    pthread_mutex_lock(&d->cmu);
    while (wait && d->cjob_busy) pthread_cond_wait(&d->ccv, &d->cmu);
    int busy = d->cjob_busy, done = d->cjob_done;
    d->cjob_done = -1;
    pthread_mutex_unlock(&d->cmu);
    if (!busy && done >= 0) upload_cell(d, &d->cjob);
    return !busy;
}

static void charts_post(demo *d, const chart_job *j) {
    if (!d->cthread_on) {
        pthread_mutex_init(&d->cmu, NULL);
        pthread_cond_init(&d->ccv, NULL);
        d->cjob_done = -1;
        if (pthread_create(&d->cthread, NULL, chart_main, d)) {
            pthread_mutex_destroy(&d->cmu);
            pthread_cond_destroy(&d->ccv);
            draw_cell(d, j); /* no thread: drawn here */
            upload_cell(d, j);
            return;
        }
        d->cthread_on = 1;
    }
    pthread_mutex_lock(&d->cmu);
    d->cjob = *j;
    d->cjob.go = 1;
    d->cjob_busy = 1;
    pthread_cond_signal(&d->ccv);
    pthread_mutex_unlock(&d->cmu);
}

/* The charts' texture on the window when a cell changed since it was shown (or everything is drawn again). */
static void show_charts(demo *d) {
    if (region(d, R_CHARTS, h_int(h_rect(0xCBF29CE484222325ull, d->r_charts), d->chart_serial)) && d->chart_tex)
        SDL_RenderCopy(d->r, d->chart_tex, NULL, &d->r_charts);
}

static void charts(demo *d) {
    SDL_Rect r = d->r_charts;
    if (r.w <= 0 || r.h <= 0) return;
    int resized = d->chart_w != r.w || d->chart_h != r.h, all = resized || d->shot_pending;
    if (!charts_idle(d, all || !d->ch[0] || d->chart_scale != d->scale)) { /* a cell is being drawn */
        show_charts(d);
        return;
    }
    if (!d->ch[0] || d->chart_scale != d->scale) {
        if (demo_charts_init(d)) {
            label(d, r, UI_SMALL, omni_last_error(), C_ERR, 1);
            return;
        }
    }
    if (resized) {
        d->charts_dirty = 1;
        if (d->chart_tex) SDL_DestroyTexture(d->chart_tex);
        free(d->chart_px);
        d->chart_px = malloc(sizeof(uint32_t) * (size_t)r.w * r.h);
        d->chart_tex = SDL_CreateTexture(d->r, SDL_PIXELFORMAT_ARGB8888, SDL_TEXTUREACCESS_STREAMING, r.w, r.h);
        if (d->chart_tex) SDL_SetTextureBlendMode(d->chart_tex, SDL_BLENDMODE_NONE); /* opaque: a plain copy */
        d->chart_w = d->chart_px && d->chart_tex ? r.w : 0, d->chart_h = d->chart_w ? r.h : 0;
        if (!d->chart_w) return;
    }
    /* New data marks all four charts stale; the chart thread draws one at a time (round robin) - except for a
     * resize and a screenshot, which need them all now (drawn here). */
    double now = omni_time_ms();
    if (d->charts_dirty && (all || now - d->t_charts >= CHART_REDRAW_MS)) {
        d->chart_stale = 15;
        d->charts_dirty = 0;
        d->t_charts = now;
    }
    for (int k = 0, first = d->chart_next; k < 4; k++) {
        int i = (first + k) % 4;
        if (!(d->chart_stale & 1 << i)) continue;
        chart_job j = {i, 0, 0, 0, 0, r.w, r.h, i < 3 ? demo_px(d, 6) : 0, 0};
        plot_grid_cell(4, 4, r.w, r.h, i, &j.x, &j.y, &j.w, &j.h);
        chart_data(d, i);
        d->chart_stale &= ~(1 << i);
        d->chart_next = (i + 1) % 4;
        if (!all) {
            charts_post(d, &j);
            break;
        }
        draw_cell(d, &j);
        upload_cell(d, &j);
    }
    show_charts(d);
}

/* One line of live numbers over each chart. */
static void captions(demo *d) {
    char t[4][300];
    const pane *a = &d->p[0], *b = &d->p[1];
    snprintf(t[0], sizeof t[0], "A %.3f MiB · B %.3f MiB%s", a->kv_bytes / 1048576.0, b->kv_bytes / 1048576.0, "");
    if (a->kv_bytes > 0 && b->kv_bytes > 0)
        snprintf(t[0], sizeof t[0], "A %.3f · B %.3f MiB · B/A %.2fx", a->kv_bytes / 1048576.0, b->kv_bytes / 1048576.0,
                 (double)b->kv_bytes / a->kv_bytes);
    double ra = a->rate.n ? a->rate.y[a->rate.n - 1] : 0, rb = b->rate.n ? b->rate.y[b->rate.n - 1] : 0;
    snprintf(t[1], sizeof t[1], "now: A %.1f · B %.1f tokens/s", ra, rb);
    double rss = d->mem_rss.n ? d->mem_rss.y[d->mem_rss.n - 1] : 0;
    if (d->mem_gpu.n) snprintf(t[2], sizeof t[2], "RSS %.0f MiB · GPU %.0f MiB", rss, d->mem_gpu.y[d->mem_gpu.n - 1]);
    else snprintf(t[2], sizeof t[2], "RSS %.0f MiB%s", rss, d->gpu ? " · GPU: n/a" : "");
    int n = 0, same = 0;
    for (int i = 0; i < d->n_div; i++) n += d->kl[i] >= 0;
    while (same < a->n_tok && same < b->n_tok && a->toks[same] == b->toks[same]) same++;
    snprintf(t[3], sizeof t[3], "mean KL %.4f · top-1 %.1f%% · same for %d tokens", n ? d->kl_sum / n : 0.0,
             n ? 100.0 * d->n_agree / n : 0.0, same);
    uint64_t h = h_rect(0xCBF29CE484222325ull, d->r_caps);
    for (int i = 0; i < 4; i++) h = h_str(h, t[i]);
    if (!region(d, R_CAPS, h)) return;
    fill(d, d->r_caps, C_BG);
    for (int i = 0; i < 4; i++) {
        int x, y, w, h;
        plot_grid_cell(4, 4, d->r_caps.w, d->r_caps.h, i, &x, &y, &w, &h);
        label(d, rect(d->r_caps.x + x + demo_px(d, 4), d->r_caps.y, w - demo_px(d, 8), d->r_caps.h), UI_SMALL, t[i],
              C_TEXT, 0);
    }
}

/* ---- status, pop-ups, help --------------------------------------------------------------------------------- */

static void status_bar(demo *d) {
    SDL_Rect r = d->r_status;
    char t[160];
    double now = omni_time_ms();
    if (now - d->t_frame_shown >= 500 || !d->frame_shown) /* twice a second at most: readable */
        d->frame_shown = d->last_frame_ms, d->t_frame_shown = now;
    snprintf(t, sizeof t, "frame %.1f ms · F1: shortcuts", d->frame_shown);
    if (!region(d, R_STATUS, h_int(h_str(h_str(h_rect(0xCBF29CE484222325ull, r), t), d->msg), d->msg_err))) return;
    fill(d, r, C_PANEL);
    fill(d, rect(0, r.y, d->W, 1), C_BORDER);
    int w = ui_text_width(d->txt, UI_SMALL, t, -1), pad = demo_px(d, 8);
    label(d, rect(r.x + r.w - w - pad, r.y, w, r.h), UI_SMALL, t, C_MUTED, 0);
    label(d, rect(r.x + pad, r.y, r.w - w - 3 * pad, r.h), UI_SMALL, d->msg, d->msg_err ? C_ERR : C_TEXT, 0);
}

static const char *pop_item(const demo *d, int i, char *buf, int cap) {
    switch (d->pop) {
    case POP_MODEL:
        snprintf(buf, (size_t)cap, "%s%s%s", d->models[i].label, d->models[i].has_vision ? "  [image]" : "",
                 d->models[i].has_audio ? "  [audio]" : "");
        return buf;
    case POP_KVA:
    case POP_KVB: return demo_formats[i];
    case POP_FILES: snprintf(buf, (size_t)cap, "%s%s", d->files[i].name, d->files[i].is_dir ? "/" : ""); return buf;
    default: return "";
    }
}

static void popup_list(demo *d) {
    int n = d->pop == POP_MODEL ? d->n_models : d->pop == POP_FILES ? d->n_files : demo_n_formats;
    int ih = lh(d, UI_BODY) + demo_px(d, 8), pad = demo_px(d, 8);
    SDL_Rect r;
    if (d->pop == POP_FILES) {
        r = rect(d->W / 6, d->H / 8, d->W * 2 / 3, d->H * 3 / 4);
        r.h = r.h / ih * ih;
    } else {
        SDL_Rect a = d->wr[d->pop == POP_MODEL ? W_MODEL : d->pop == POP_KVA ? W_KVA : W_KVB];
        int w = d->pop == POP_MODEL ? demo_px(d, 480) : a.w;
        r = rect(a.x, a.y + a.h + 2, w, ih * (n < 12 ? (n > 0 ? n : 1) : 12));
    }
    d->pop_rect = r;
    fill(d, rect(r.x + 3, r.y + 3, r.w, r.h), (SDL_Color){0, 0, 0, 40}); /* shadow */
    fill(d, r, C_PANEL);
    frame(d, r, C_ACCENT);
    int y = r.y, rows = r.h / ih;
    char buf[1200];
    if (d->pop == POP_FILES) {
        snprintf(buf, sizeof buf, "%.1000s   (Enter opens, Backspace goes up, Esc closes)", d->cwd);
        fill(d, rect(r.x, y, r.w, ih), C_BUTTON);
        label(d, rect(r.x + pad, y, r.w - 2 * pad, ih), UI_SMALL, buf, C_TEXT, 0);
        y += ih, rows--;
    }
    if (!n) label(d, rect(r.x + pad, y, r.w - 2 * pad, ih), UI_BODY, "(nothing here)", C_MUTED, 0);
    for (int i = d->pop_scroll; i < n && i < d->pop_scroll + rows; i++, y += ih) {
        if (i == d->pop_hover) fill(d, rect(r.x + 1, y, r.w - 2, ih), C_HOVER);
        int cur = (d->pop == POP_MODEL && i == d->cur_model) ||
                  (d->pop == POP_KVA && !strcmp(demo_formats[i], d->kv_a)) ||
                  (d->pop == POP_KVB && !strcmp(demo_formats[i], d->kv_b));
        label(d, rect(r.x + pad, y, r.w - 2 * pad, ih), UI_BODY, pop_item(d, i, buf, sizeof buf),
              cur ? C_ACCENT : C_TEXT, 0);
    }
}

static const char *const g_help[] = {
    "Enter / Ctrl+Enter  run the prompt on both panes",
    "Shift+Enter  new line in the prompt",
    "Ctrl+1  preset \"Read the text\" (the image)",
    "Ctrl+2  preset \"Ask about the audio\"",
    "Esc  stop both answers",
    "Ctrl+L  clear the answers, charts and media",
    "Ctrl+O  open an image or audio file (or drop one on the window)",
    "Ctrl+P  play / stop the audio",
    "Ctrl+M  choose the model",
    "Ctrl+V  paste   Ctrl+U  empty the prompt",
    "PageUp / PageDown, mouse wheel  scroll the answers",
    "Ctrl+ + / Ctrl+ - / Ctrl+0  zoom",
    "Ctrl+S  save a screenshot (omni-demo-DATE.png)",
    "F1  this help   Ctrl+Q  quit",
};

static void help(demo *d) {
    int n = (int)(sizeof g_help / sizeof g_help[0]), l = lh(d, UI_BODY), pad = demo_px(d, 16);
    int h = (n + 2) * l + 2 * pad;
    SDL_Rect r = rect(d->W / 2 - demo_px(d, 300), d->H / 2 - h / 2, demo_px(d, 600), h);
    d->pop_rect = r;
    fill(d, rect(r.x + 4, r.y + 4, r.w, r.h), (SDL_Color){0, 0, 0, 50});
    fill(d, r, C_PANEL);
    frame(d, r, C_ACCENT);
    ui_text_draw(d->txt, UI_TITLE, "Keyboard shortcuts", -1, r.x + pad, r.y + pad, C_TEXT);
    for (int i = 0; i < n; i++)
        ui_text_draw(d->txt, UI_BODY, g_help[i], -1, r.x + pad, r.y + pad + (i + 2) * l, C_TEXT);
}

static uint64_t sig_top(const demo *d) {
    uint64_t h = h_mouse(d, 0xCBF29CE484222325ull);
    h = h_str(h, d->cur_model >= 0 ? d->models[d->cur_model].label : "");
    h = h_int(h_int(h_int(h, d->loading), d->model_ready), d->info.threads);
    return h_str(h_str(h_str(h, d->kv_a), d->kv_b), d->info.device);
}

static uint64_t sig_input(const demo *d, int blink_on) {
    uint64_t h = h_mouse(d, 0xCBF29CE484222325ull);
    h = h_bytes(h, d->enabled, sizeof d->enabled);
    h = h_str(h_str(h, d->image_path), d->audio_path);
    h = h_int(h_int(h_int(h, (intptr_t)d->thumb), (intptr_t)d->samples), d->playing);
    h = h_bytes(h_str(h_str(h, d->prompt), d->ime), &d->cursor, sizeof d->cursor);
    return h_int(h, blink_on);
}

static uint64_t sig_pane(demo *d, int k) {
    const pane *p = &d->p[k];
    char t[600];
    uint64_t h = h_int(h_int(0xCBF29CE484222325ull, d->run), p->len);
    h = h_str(h_str(h, d->run ? d->run_kv[k] : k ? d->kv_b : d->kv_a), d->run_info);
    pane_state(d, k, t, sizeof t);
    h = h_str(h, t);
    pane_stats(d, k, t, sizeof t);
    h = h_str(h, t);
    if (p->style) h = h_bytes(h, p->style, (size_t)p->len); /* B's divergence marks come after its tokens */
    return h_int(h_int(h_rect(h, d->r_text[k]), p->scroll), p->follow);
}

void demo_draw(demo *d) {
    int full = d->redraw_all = !d->partial || d->pop || d->pop != d->pop_drawn || d->W != d->drawn_w ||
                               d->H != d->drawn_h || d->scale != d->drawn_scale || d->expose;
    d->pop_drawn = d->pop, d->drawn_w = d->W, d->drawn_h = d->H, d->drawn_scale = d->scale, d->expose = 0;
    d->n_drawn = 0;
    if (full) {
        SDL_SetRenderDrawColor(d->r, C_BG.r, C_BG.g, C_BG.b, 255);
        SDL_RenderClear(d->r);
    }
    if (region(d, R_TOP, sig_top(d))) top_bar(d);
    int blink_on = (int)(omni_time_ms() / 530) % 2 == 0 || d->sc_active; /* scripts: always on (stable pictures) */
    if (region(d, R_INPUT, d->playing ? (uint64_t)d->iterations : sig_input(d, blink_on))) { /* playing: the play head */
        fill(d, rect(0, d->wr[W_MEDIA].y, d->W, d->wr[W_MEDIA].h), C_BG);
        media_box(d);
        prompt_box(d, blink_on);
        for (int i = 0; i < 3; i++) button(d, g_left_ids[i], g_left_txt[i], 0);
        for (int i = 0; i < 3; i++) button(d, g_right_ids[i], g_right_txt[i], g_right_ids[i] == W_RUN);
    }
    for (int k = 0; k < 2; k++)
        if (region(d, R_PANE_A + k, sig_pane(d, k))) pane_draw(d, k);
    captions(d);
    charts(d);
    status_bar(d);
    if (d->pop == POP_HELP) help(d);
    else if (d->pop) popup_list(d);
}
