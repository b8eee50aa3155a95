/* demo_input.c - the demo's SDL events: keyboard shortcuts, the prompt box (UTF-8 text input, IME composition,
 * paste), mouse clicks on the laid-out widgets, wheel scrolling, dropped files, the pop-up lists (model, KV
 * formats, file browser) and the help overlay. UI thread only; nothing here waits for the model. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "app/ui/demo_impl.h"

/* ---- prompt box -------------------------------------------------------------------------------------------- */

void demo_prompt_set(demo *d, const char *text) {
    snprintf(d->prompt, sizeof d->prompt, "%s", text);
    d->plen = d->cursor = (int)strlen(d->prompt);
    d->ime[0] = 0;
}

static void prompt_insert(demo *d, const char *s) {
    char clean[DEMO_PROMPT_CAP];
    int n = 0;
    for (const char *p = s; *p && n < (int)sizeof clean - 1; p++)
        if (*p != '\r') clean[n++] = *p;
    clean[n] = 0;
    if (d->plen + n >= DEMO_PROMPT_CAP) {
        demo_log(d, 1, "the prompt box holds at most %d bytes", DEMO_PROMPT_CAP - 1);
        n = DEMO_PROMPT_CAP - 1 - d->plen;
        while (n > 0 && ((unsigned char)clean[n] & 0xC0) == 0x80) n--; /* whole characters only */
    }
    memmove(d->prompt + d->cursor + n, d->prompt + d->cursor, (size_t)(d->plen - d->cursor + 1));
    memcpy(d->prompt + d->cursor, clean, (size_t)n);
    d->plen += n, d->cursor += n;
}

static void prompt_delete(demo *d, int from, int to) {
    if (from < 0 || to > d->plen || from >= to) return;
    memmove(d->prompt + from, d->prompt + to, (size_t)(d->plen - to + 1));
    d->plen -= to - from;
    d->cursor = from;
}

static void prompt_key(demo *d, SDL_Keycode k) {
    int next = d->cursor;
    switch (k) {
    case SDLK_BACKSPACE: prompt_delete(d, ui_utf8_prev(d->prompt, d->cursor), d->cursor); break;
    case SDLK_DELETE:
        if (d->cursor < d->plen) ui_utf8_next(d->prompt, d->plen, &next);
        prompt_delete(d, d->cursor, next);
        break;
    case SDLK_LEFT: d->cursor = ui_utf8_prev(d->prompt, d->cursor); break;
    case SDLK_RIGHT:
        if (d->cursor < d->plen) ui_utf8_next(d->prompt, d->plen, &d->cursor);
        break;
    case SDLK_HOME: d->cursor = 0; break;
    case SDLK_END: d->cursor = d->plen; break;
    default: break;
    }
}

/* ---- pop-ups ----------------------------------------------------------------------------------------------- */

static int media_name(const char *n) {
    static const char *ext[] = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".pgm", ".ppm", ".pnm", ".tga", ".wav",
                                ".flac", ".ogg", ".opus", ".mp3", ".m4a", ".aac", ".webm", ".mp4", ".mkv", ".aiff"};
    const char *dot = strrchr(n, '.');
    if (!dot) return 0;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

static int cmp_files(const void *a, const void *b) {
    const file_entry *x = a, *y = b;
    if (!strcmp(x->name, "..")) return -1;
    if (!strcmp(y->name, "..")) return 1;
    if (x->is_dir != y->is_dir) return y->is_dir - x->is_dir;
    return strcmp(x->name, y->name);
}

/* The file browser's listing: "..", folders, then image and audio files (by name; the worker checks contents). */
void demo_list_files(demo *d, const char *dir) {
    char real[4096];
    if (!realpath(dir, real)) {
        demo_log(d, 1, "cannot open folder %s", dir);
        return;
    }
    DIR *dh = opendir(real);
    if (!dh) {
        demo_log(d, 1, "cannot open folder %s", real);
        return;
    }
    snprintf(d->cwd, sizeof d->cwd, "%s", real);
    d->n_files = 0;
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        if (de->d_name[0] == '.' && strcmp(de->d_name, "..")) continue;
        char p[8192];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", real, de->d_name);
        int is_dir = stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (!is_dir && !media_name(de->d_name)) continue;
        if (d->n_files == cap) {
            cap = cap ? 2 * cap : 64;
            file_entry *f = realloc(d->files, sizeof *f * (size_t)cap);
            if (!f) break;
            d->files = f;
        }
        snprintf(d->files[d->n_files].name, sizeof d->files[0].name, "%s", de->d_name);
        d->files[d->n_files++].is_dir = is_dir;
    }
    closedir(dh);
    qsort(d->files, (size_t)d->n_files, sizeof *d->files, cmp_files);
    d->pop_scroll = 0;
    d->pop_hover = 0;
}

static int pop_count(const demo *d) {
    switch (d->pop) {
    case POP_MODEL: return d->n_models;
    case POP_KVA:
    case POP_KVB: return demo_n_formats;
    case POP_FILES: return d->n_files;
    default: return 0;
    }
}

static void open_popup(demo *d, popup_kind k) {
    d->pop = k;
    d->pop_scroll = 0;
    d->pop_hover = 0;
    if (k == POP_FILES) demo_list_files(d, d->cwd[0] ? d->cwd : ".");
}

static void pop_choose(demo *d, int i) {
    if (i < 0 || i >= pop_count(d)) return;
    popup_kind k = d->pop;
    if (k == POP_FILES && d->files[i].is_dir) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", d->cwd, d->files[i].name);
        demo_list_files(d, p);
        return;
    }
    d->pop = POP_NONE;
    if (k == POP_MODEL) demo_select_model(d, i);
    else if (k == POP_KVA || k == POP_KVB) demo_set_format(d, k == POP_KVB, demo_formats[i]);
    else if (k == POP_FILES) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", d->cwd, d->files[i].name);
        demo_open(d, p);
    }
}

static int pop_item_h(const demo *d) { return ui_text_line_height(d->txt, UI_BODY) + demo_px(d, 8); }

/* Item index under (x, y), -1 outside the list. */
static int pop_hit(const demo *d, int x, int y) {
    const SDL_Rect *r = &d->pop_rect;
    int top = r->y + (d->pop == POP_FILES ? pop_item_h(d) : 0); /* the browser's first row shows the folder */
    if (x < r->x || x >= r->x + r->w || y < top || y >= r->y + r->h) return -1;
    int i = d->pop_scroll + (y - top) / pop_item_h(d);
    return i < pop_count(d) ? i : -1;
}

static void pop_key(demo *d, SDL_Keycode k) {
    int n = pop_count(d), vis = (d->pop_rect.h / pop_item_h(d)) - (d->pop == POP_FILES);
    if (k == SDLK_ESCAPE) d->pop = POP_NONE;
    else if (k == SDLK_DOWN && d->pop_hover + 1 < n) d->pop_hover++;
    else if (k == SDLK_UP && d->pop_hover > 0) d->pop_hover--;
    else if (k == SDLK_PAGEDOWN) d->pop_hover = d->pop_hover + vis < n ? d->pop_hover + vis : n - 1;
    else if (k == SDLK_PAGEUP) d->pop_hover = d->pop_hover > vis ? d->pop_hover - vis : 0;
    else if (k == SDLK_RETURN || k == SDLK_KP_ENTER) pop_choose(d, d->pop_hover);
    else if (k == SDLK_BACKSPACE && d->pop == POP_FILES) {
        char p[8192];
        snprintf(p, sizeof p, "%s/..", d->cwd);
        demo_list_files(d, p);
    }
    if (vis > 0 && d->pop_hover < d->pop_scroll) d->pop_scroll = d->pop_hover;
    if (vis > 0 && d->pop_hover >= d->pop_scroll + vis) d->pop_scroll = d->pop_hover - vis + 1;
}

/* ---- clicks and keys --------------------------------------------------------------------------------------- */

static void screenshot_now(demo *d) {
    char name[64];
    time_t t = time(NULL);
    strftime(name, sizeof name, "omni-demo-%Y%m%d-%H%M%S.png", localtime(&t));
    snprintf(d->shot_path, sizeof d->shot_path, "%s", name);
    d->shot_pending = 1;
}

static void click(demo *d, widget_id id) {
    if (id <= W_NONE || id >= W_COUNT || !d->enabled[id]) return;
    switch (id) {
    case W_MODEL: open_popup(d, POP_MODEL); break;
    case W_KVA: open_popup(d, POP_KVA); break;
    case W_KVB: open_popup(d, POP_KVB); break;
    case W_OPEN:
    case W_MEDIA: open_popup(d, POP_FILES); break;
    case W_READ: demo_run(d, 1); break;
    case W_AUDIO: demo_run(d, 2); break;
    case W_RUN: demo_run(d, 0); break;
    case W_STOP: demo_stop(d); break;
    case W_CLEAR: demo_clear(d); break;
    case W_PLAY: demo_toggle_play(d); break;
    case W_HELP: open_popup(d, POP_HELP); break;
    case W_PROMPT: d->cursor = d->plen; break;
    default: break;
    }
}

static widget_id hit(const demo *d, int x, int y) {
    for (int i = W_COUNT - 1; i > W_NONE; i--) { /* later widgets lie on top (the play button in the media box) */
        const SDL_Rect *r = &d->wr[i];
        if (r->w > 0 && x >= r->x && x < r->x + r->w && y >= r->y && y < r->y + r->h) return (widget_id)i;
    }
    return W_NONE;
}

static void zoom(demo *d, float z) {
    d->zoom = z < 0.5f ? 0.5f : z > 3.f ? 3.f : z;
}

static void scroll_panes(demo *d, int dy) {
    for (int k = 0; k < 2; k++) {
        d->p[k].scroll += dy;
        if (d->p[k].scroll < 0) d->p[k].scroll = 0;
        d->p[k].follow = 0;
    }
}

/* The window's close button (or Ctrl+Q): the answers in progress stop; the program prints what they had. */
static void close_window(demo *d) {
    if (demo_generating(d))
        demo_log(d, 0, "closing the window: both answers stopped (A %d tokens, B %d tokens so far)", d->p[0].n_tok,
                 d->p[1].n_tok);
    d->quit = 1;
}

/* Ctrl+key shortcuts; returns 1 when handled. */
static int ctrl_key(demo *d, SDL_Keycode k) {
    switch (k) {
    case SDLK_q: close_window(d); return 1;
    case SDLK_o: open_popup(d, POP_FILES); return 1;
    case SDLK_l: demo_clear(d); return 1;
    case SDLK_1: demo_run(d, 1); return 1;
    case SDLK_2: demo_run(d, 2); return 1;
    case SDLK_p: demo_toggle_play(d); return 1;
    case SDLK_m: open_popup(d, POP_MODEL); return 1;
    case SDLK_s: screenshot_now(d); return 1;
    case SDLK_u: demo_prompt_set(d, ""); return 1;
    case SDLK_EQUALS:
    case SDLK_PLUS:
    case SDLK_KP_PLUS: zoom(d, d->zoom * 1.1f); return 1;
    case SDLK_MINUS:
    case SDLK_KP_MINUS: zoom(d, d->zoom / 1.1f); return 1;
    case SDLK_0: zoom(d, 1.f); return 1;
    case SDLK_RETURN: demo_run(d, 0); return 1;
    case SDLK_v: {
        char *c = SDL_HasClipboardText() ? SDL_GetClipboardText() : NULL;
        if (c) prompt_insert(d, c);
        SDL_free(c);
        return 1;
    }
    default: return 0;
    }
}

static void key_down(demo *d, const SDL_KeyboardEvent *e) {
    SDL_Keycode k = e->keysym.sym;
    int ctrl = (e->keysym.mod & KMOD_CTRL) != 0, shift = (e->keysym.mod & KMOD_SHIFT) != 0;
    if (d->pop == POP_HELP) {
        d->pop = POP_NONE;
        return;
    }
    if (d->pop) {
        pop_key(d, k);
        return;
    }
    if (ctrl && ctrl_key(d, k)) return;
    if (k == SDLK_F1) open_popup(d, POP_HELP);
    else if (k == SDLK_ESCAPE) demo_stop(d);
    else if ((k == SDLK_RETURN || k == SDLK_KP_ENTER) && shift) prompt_insert(d, "\n");
    else if (k == SDLK_RETURN || k == SDLK_KP_ENTER) demo_run(d, 0);
    else if (k == SDLK_PAGEUP) scroll_panes(d, -demo_px(d, 200));
    else if (k == SDLK_PAGEDOWN) scroll_panes(d, demo_px(d, 200));
    else if (!ctrl && !d->ime[0]) prompt_key(d, k);
}

/* Window coordinates -> output pixels (HiDPI windows have more pixels than points). */
static void to_px(const demo *d, int x, int y, int *px, int *py) {
    *px = (int)(x * d->hidpi + 0.5f);
    *py = (int)(y * d->hidpi + 0.5f);
}

static void mouse(demo *d, const SDL_Event *e) {
    int x, y;
    if (e->type == SDL_MOUSEWHEEL) {
        SDL_GetMouseState(&x, &y);
        to_px(d, x, y, &x, &y);
        int dy = -e->wheel.y * demo_px(d, 40);
        if (d->pop && d->pop != POP_HELP) {
            int n = pop_count(d);
            d->pop_scroll += e->wheel.y < 0 ? 3 : -3;
            if (d->pop_scroll > n - 1) d->pop_scroll = n - 1;
            if (d->pop_scroll < 0) d->pop_scroll = 0;
            return;
        }
        widget_id w = hit(d, x, y);
        if (w == W_PANE_A || w == W_PANE_B) {
            pane *p = &d->p[w == W_PANE_B];
            p->scroll = p->scroll + dy < 0 ? 0 : p->scroll + dy;
            p->follow = 0;
        }
        return;
    }
    to_px(d, e->button.x, e->button.y, &x, &y);
    if (e->type == SDL_MOUSEMOTION) {
        to_px(d, e->motion.x, e->motion.y, &d->mouse_x, &d->mouse_y);
        if (d->pop && d->pop != POP_HELP) {
            int i = pop_hit(d, d->mouse_x, d->mouse_y);
            if (i >= 0) d->pop_hover = i;
        }
        return;
    }
    d->mouse_x = x, d->mouse_y = y;
    if (e->button.button != SDL_BUTTON_LEFT) return;
    if (d->pop) { /* a click chooses an item or closes the pop-up */
        if (e->type == SDL_MOUSEBUTTONUP) {
            int i = d->pop == POP_HELP ? -1 : pop_hit(d, x, y);
            const SDL_Rect *r = &d->pop_rect;
            int inside = x >= r->x && x < r->x + r->w && y >= r->y && y < r->y + r->h;
            if (i >= 0) pop_choose(d, i);
            else if (!inside || d->pop == POP_HELP) d->pop = POP_NONE;
        }
        return;
    }
    if (e->type == SDL_MOUSEBUTTONDOWN) d->press_id = hit(d, x, y);
    else if (e->type == SDL_MOUSEBUTTONUP) {
        widget_id w = hit(d, x, y);
        if (w == (widget_id)d->press_id) click(d, w);
        d->press_id = W_NONE;
    }
}

void demo_handle_event(demo *d, const SDL_Event *e) {
    switch (e->type) {
    case SDL_QUIT: close_window(d); break;
    case SDL_WINDOWEVENT:
        if (e->window.event == SDL_WINDOWEVENT_CLOSE) close_window(d);
        if (e->window.event == SDL_WINDOWEVENT_EXPOSED || e->window.event == SDL_WINDOWEVENT_RESTORED) d->expose = 1;
        break;
    case SDL_DROPFILE:
        if (e->drop.file) demo_open(d, e->drop.file);
        SDL_free(e->drop.file);
        break;
    case SDL_DROPTEXT:
        if (e->drop.file && !d->pop) prompt_insert(d, e->drop.file);
        SDL_free(e->drop.file);
        break;
    case SDL_TEXTINPUT:
        if (!d->pop) prompt_insert(d, e->text.text);
        d->ime[0] = 0;
        break;
    case SDL_TEXTEDITING: snprintf(d->ime, sizeof d->ime, "%s", e->edit.text); break;
    case SDL_TEXTEDITING_EXT: /* long compositions (SDL_HINT_IME_SUPPORT_EXTENDED_TEXT) */
        snprintf(d->ime, sizeof d->ime, "%s", e->editExt.text ? e->editExt.text : "");
        SDL_free(e->editExt.text);
        break;
    case SDL_KEYDOWN: key_down(d, &e->key); break;
    case SDL_MOUSEMOTION:
    case SDL_MOUSEBUTTONDOWN:
    case SDL_MOUSEBUTTONUP:
    case SDL_MOUSEWHEEL: mouse(d, e); break;
    default: break;
    }
}
