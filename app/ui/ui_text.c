/* ui_text.c - SDL2_ttf faces with per-code-point fallback, glyph texture cache, wrapped layout (see ui_text.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/ui/ui_text.h"

#include <SDL_ttf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FACES 6
#define CACHE_BITS 14 /* 16384 glyph slots (code point x size x colour); emptied when 3/4 full */
#define LINE_SETS 32  /* line cache: 32 sets of 8 textures, least recently drawn evicted */
#define LINE_WAYS 8

static const int g_base_px[UI_N_SIZES] = {12, 14, 17};

/* Fallback order after a --font file: Latin/Greek/Cyrillic first, then CJK families Debian packages. */
static const struct {
    const char *path;
    long index;
} g_faces[] = {
    {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 0},
    {"/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2}, /* fonts-noto-cjk: face 2 = SC */
    {"/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf", 0},
    {"/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0},
};

typedef struct {
    uint64_t key; /* colour << 23 | size << 21 | cp, + 1; 0 = empty */
    int face;
    int adv, w, h;
    SDL_Texture *tex; /* NULL for blank glyphs */
} glyph;

/* A line of text drawn once into a texture (transparent outside its glyphs and backgrounds, with a margin of
 * half a line around it for what glyphs draw outside their box), drawn again from there while it stays the same:
 * one copy per line instead of one per glyph. */
typedef struct {
    uint64_t key; /* hash of size, bytes and colours; 0 = empty */
    int len, adv, w, h, mx, my;
    uint32_t used;
    SDL_Texture *tex; /* NULL: nothing to draw (spaces) */
} line_tex;

typedef struct {
    char path[4096];
    long index;
    TTF_Font *font[UI_N_SIZES];
    int ascent[UI_N_SIZES];
} face;

struct ui_text {
    SDL_Renderer *r;
    face faces[MAX_FACES];
    int n_faces;
    float scale;
    glyph *cache;
    int n_cached;
    char names[1024];
    line_tex lines[LINE_SETS][LINE_WAYS];
    uint32_t stamp;
    int line_cache; /* 1: draw lines through the line cache */
};

/* ---- UTF-8 ------------------------------------------------------------------------------------------------- */

uint32_t ui_utf8_next(const char *s, int len, int *i) {
    const unsigned char *u = (const unsigned char *)s + *i;
    int left = len - *i, n = 0;
    uint32_t c = u[0], min = 0;
    if (c < 0x80) n = 1;
    else if ((c & 0xE0) == 0xC0) n = 2, c &= 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, c &= 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, c &= 0x07, min = 0x10000;
    if (n == 0 || n > left) {
        (*i)++;
        return 0xFFFD;
    }
    for (int k = 1; k < n; k++) {
        if ((u[k] & 0xC0) != 0x80) {
            (*i)++;
            return 0xFFFD;
        }
        c = c << 6 | (u[k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        (*i)++;
        return 0xFFFD;
    }
    *i += n;
    return c;
}

int ui_utf8_prev(const char *s, int i) {
    if (i <= 0) return 0;
    int j = i - 1, k = 0;
    while (j > 0 && k < 3 && ((unsigned char)s[j] & 0xC0) == 0x80) j--, k++;
    return j;
}

/* Scripts written without spaces: a line may break before or after any of their characters. */
static int is_wide(uint32_t c) {
    return (c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) || (c >= 0xF900 && c <= 0xFAFF) ||
           (c >= 0xFF00 && c <= 0xFFEF) || (c >= 0x20000 && c <= 0x3FFFF);
}

/* ---- faces ------------------------------------------------------------------------------------------------- */

static void close_faces(ui_text *t) {
    for (int f = 0; f < t->n_faces; f++)
        for (int s = 0; s < UI_N_SIZES; s++) {
            if (t->faces[f].font[s]) TTF_CloseFont(t->faces[f].font[s]);
            t->faces[f].font[s] = NULL;
        }
}

static void clear_cache(ui_text *t) {
    if (!t->cache) return;
    for (int i = 0; i < 1 << CACHE_BITS; i++)
        if (t->cache[i].tex) SDL_DestroyTexture(t->cache[i].tex);
    memset(t->cache, 0, sizeof(glyph) << CACHE_BITS);
    t->n_cached = 0;
}

static void clear_lines(ui_text *t) {
    for (int i = 0; i < LINE_SETS; i++)
        for (int j = 0; j < LINE_WAYS; j++)
            if (t->lines[i][j].tex) SDL_DestroyTexture(t->lines[i][j].tex);
    memset(t->lines, 0, sizeof t->lines);
}

static int open_face(face *f, float scale) {
    for (int s = 0; s < UI_N_SIZES; s++) {
        int px = (int)(g_base_px[s] * scale + 0.5f);
        f->font[s] = TTF_OpenFontIndex(f->path, px < 6 ? 6 : px, f->index);
        if (!f->font[s]) return -1;
        TTF_SetFontHinting(f->font[s], TTF_HINTING_LIGHT);
        f->ascent[s] = TTF_FontAscent(f->font[s]);
    }
    return 0;
}

static void add_face(ui_text *t, const char *path, long index) {
    if (t->n_faces == MAX_FACES) return;
    FILE *probe = fopen(path, "rb");
    if (!probe) return;
    fclose(probe);
    face *f = &t->faces[t->n_faces];
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->index = index;
    if (open_face(f, t->scale)) {
        for (int s = 0; s < UI_N_SIZES; s++)
            if (f->font[s]) TTF_CloseFont(f->font[s]);
        return;
    }
    const char *b = strrchr(path, '/');
    size_t used = strlen(t->names);
    snprintf(t->names + used, sizeof t->names - used, "%s%s", used ? ", " : "", b ? b + 1 : path);
    t->n_faces++;
}

omni_status ui_text_init(SDL_Renderer *r, const char *user_font, ui_text **out) {
    *out = NULL;
    if (!TTF_WasInit() && TTF_Init()) return omni_fail(OMNI_ERR_RUNTIME, "SDL_ttf: %s", TTF_GetError());
    ui_text *t = calloc(1, sizeof *t);
    if (!t || !(t->cache = calloc((size_t)1 << CACHE_BITS, sizeof(glyph)))) {
        free(t);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    t->r = r;
    t->scale = 1.f;
    t->line_cache = 1;
    if (user_font) { /* "path" or "path:index" */
        char path[4096];
        snprintf(path, sizeof path, "%s", user_font);
        long index = 0;
        char *colon = strrchr(path, ':');
        if (colon && colon[1] >= '0' && colon[1] <= '9') index = strtol(colon + 1, NULL, 10), *colon = 0;
        add_face(t, path, index);
        if (!t->n_faces) {
            ui_text_free(t);
            return omni_fail(OMNI_ERR_INPUT, "--font %s: cannot open this font", user_font);
        }
    }
    for (size_t i = 0; i < sizeof g_faces / sizeof g_faces[0]; i++) add_face(t, g_faces[i].path, g_faces[i].index);
    if (!t->n_faces) {
        ui_text_free(t);
        return omni_fail(OMNI_ERR_INPUT, "no font found (install fonts-dejavu-core, or give --font FILE)");
    }
    *out = t;
    return OMNI_OK;
}

void ui_text_free(ui_text *t) {
    if (!t) return;
    clear_lines(t);
    clear_cache(t);
    close_faces(t);
    free(t->cache);
    free(t);
}

omni_status ui_text_set_scale(ui_text *t, float scale) {
    if (scale < 0.5f) scale = 0.5f;
    if (scale > 4.f) scale = 4.f;
    if (scale == t->scale) return OMNI_OK;
    clear_lines(t);
    clear_cache(t);
    close_faces(t);
    t->scale = scale;
    for (int f = 0; f < t->n_faces; f++)
        if (open_face(&t->faces[f], scale))
            return omni_fail(OMNI_ERR_RUNTIME, "font %s: %s", t->faces[f].path, TTF_GetError());
    return OMNI_OK;
}

const char *ui_text_faces(const ui_text *t) { return t->names; }

int ui_text_line_height(const ui_text *t, ui_size size) { return TTF_FontLineSkip(t->faces[0].font[size]); }

/* ---- glyphs ------------------------------------------------------------------------------------------------ */

/* The glyph of cp drawn in colour c (pre-coloured: blending it needs no colour modulation, the software
 * renderer's fast path). */
static glyph *get_glyph(ui_text *t, ui_size size, uint32_t cp, SDL_Color c) {
    uint64_t rgba = (uint64_t)c.r << 24 | (uint64_t)c.g << 16 | (uint64_t)c.b << 8 | c.a;
    uint64_t key = (rgba << 23 | (uint64_t)size << 21 | cp) + 1;
    uint32_t mask = (1u << CACHE_BITS) - 1, h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - CACHE_BITS));
    for (;; h = (h + 1) & mask) {
        glyph *g = &t->cache[h];
        if (g->key == key) return g;
        if (g->key) continue;
        if (t->n_cached >= (3 << CACHE_BITS) / 4) { /* full: start over (the next frame re-renders what it needs) */
            clear_cache(t);
            return get_glyph(t, size, cp, c);
        }
        g->key = key;
        t->n_cached++;
        g->face = 0;
        for (int f = 0; f < t->n_faces; f++)
            if (TTF_GlyphIsProvided32(t->faces[f].font[size], cp)) {
                g->face = f;
                break;
            }
        TTF_Font *font = t->faces[g->face].font[size];
        int minx, maxx, miny, maxy, adv = 0;
        if (TTF_GlyphMetrics32(font, cp, &minx, &maxx, &miny, &maxy, &adv)) adv = 0;
        g->adv = adv;
        SDL_Surface *s = cp > ' ' ? TTF_RenderGlyph32_Blended(font, cp, c) : NULL;
        if (s) {
            g->tex = SDL_CreateTextureFromSurface(t->r, s);
            g->w = s->w, g->h = s->h;
            if (g->tex) SDL_SetTextureBlendMode(g->tex, SDL_BLENDMODE_BLEND);
            SDL_FreeSurface(s);
        }
        return g;
    }
}

int ui_text_has_glyph(ui_text *t, uint32_t cp) {
    for (int f = 0; f < t->n_faces; f++)
        if (TTF_GlyphIsProvided32(t->faces[f].font[UI_BODY], cp)) return 1;
    return 0;
}

/* Metrics come from the glyph in the measuring colour (black): one entry per code point for layout. */
static int advance(ui_text *t, ui_size size, uint32_t cp) {
    static const SDL_Color k = {0, 0, 0, 255};
    if (cp == '\t') return 4 * get_glyph(t, size, ' ', k)->adv;
    if (cp < ' ') return 0;
    return get_glyph(t, size, cp, k)->adv;
}

int ui_text_width(ui_text *t, ui_size size, const char *s, int len) {
    if (len < 0) len = (int)strlen(s);
    int w = 0;
    for (int i = 0; i < len;) w += advance(t, size, ui_utf8_next(s, len, &i));
    return w;
}

/* One glyph with its baseline on the line's (the faces' ascents differ). */
static int draw_glyph(ui_text *t, ui_size size, uint32_t cp, int x, int y, SDL_Color c) {
    if (cp < ' ') return advance(t, size, cp);
    glyph *g = get_glyph(t, size, cp, c);
    if (g->tex) {
        SDL_Rect d = {x, y + t->faces[0].ascent[size] - t->faces[g->face].ascent[size], g->w, g->h};
        SDL_RenderCopy(t->r, g->tex, NULL, &d);
    }
    return g->adv;
}

/* ---- lines (direct, or through the line cache) ---------------------------------------------------------- */

/* What a run of bytes is drawn with: a palette index per byte, or style NULL: pal[0] for all. */
typedef struct {
    const uint8_t *style;
    const ui_style *pal;
} paint;

/* Bytes [a, b) glyph by glyph from (x, y) up to the first '\n'; returns the width advanced. */
static int run_direct(ui_text *t, ui_size size, const char *s, int a, int b, int x, int y, const paint *p) {
    int lh = ui_text_line_height(t, size), px = x;
    for (int i = a; i < b;) {
        int at = i;
        uint32_t cp = ui_utf8_next(s, b, &i);
        if (cp == '\n') break;
        const ui_style *st = &p->pal[p->style ? p->style[at] : 0];
        if (st->has_bg) {
            SDL_Rect bg = {px, y, advance(t, size, cp), lh};
            SDL_SetRenderDrawBlendMode(t->r, st->bg.a == 255 ? SDL_BLENDMODE_NONE : SDL_BLENDMODE_BLEND);
            SDL_SetRenderDrawColor(t->r, st->bg.r, st->bg.g, st->bg.b, st->bg.a);
            SDL_RenderFillRect(t->r, &bg);
        }
        px += draw_glyph(t, size, cp, px, y, st->fg);
    }
    return px - x;
}

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull; }

static uint32_t rgba(SDL_Color c) { return (uint32_t)c.r << 24 | (uint32_t)c.g << 16 | (uint32_t)c.b << 8 | c.a; }

static uint64_t run_key(ui_size size, const char *s, int a, int b, const paint *p) {
    uint64_t h = mix(0xCBF29CE484222325ull, (uint64_t)size << 32 | (uint32_t)(b - a));
    const ui_style *st = &p->pal[0];
    if (!p->style) h = mix(mix(h, (uint64_t)rgba(st->fg) << 32 | rgba(st->bg)), (uint64_t)st->has_bg);
    for (int i = a; i < b; i++) {
        h = mix(h, (unsigned char)s[i]);
        if (p->style) {
            st = &p->pal[p->style[i]];
            h = mix(mix(h, (uint64_t)rgba(st->fg) << 32 | rgba(st->bg)), (uint64_t)st->has_bg);
        }
    }
    return h ? h : 1;
}

/* The cached texture of a run (made now if missing), or NULL when it cannot be cached (then draw directly). */
static line_tex *run_cached(ui_text *t, ui_size size, const char *s, int a, int b, const paint *p) {
    uint64_t key = run_key(size, s, a, b, p);
    line_tex *set = t->lines[key % LINE_SETS], *e = &set[0];
    t->stamp++;
    for (int j = 0; j < LINE_WAYS; j++) {
        if (set[j].key == key && set[j].len == b - a) {
            set[j].used = t->stamp;
            return &set[j];
        }
        if (set[j].used < e->used) e = &set[j];
    }
    if (e->tex) SDL_DestroyTexture(e->tex);
    memset(e, 0, sizeof *e);
    int lh = ui_text_line_height(t, size), adv = 0;
    for (int i = a; i < b;) {
        uint32_t cp = ui_utf8_next(s, b, &i);
        if (cp == '\n') break;
        adv += advance(t, size, cp);
    }
    /* Style 0 with an opaque background: an opaque box of the line (copied, not blended: the cheap case),
     * else transparent with a margin of half a line for what glyphs draw outside their box. */
    int opaque = p->pal[0].has_bg && p->pal[0].bg.a == 255;
    e->adv = adv, e->mx = opaque ? 0 : lh / 2, e->my = opaque ? 0 : lh / 2;
    e->w = adv + 2 * e->mx, e->h = lh + 2 * e->my;
    if (adv > 0) {
        e->tex = SDL_CreateTexture(t->r, SDL_PIXELFORMAT_ARGB8888, SDL_TEXTUREACCESS_TARGET, e->w, e->h);
        SDL_Texture *old = SDL_GetRenderTarget(t->r);
        if (!e->tex || SDL_SetRenderTarget(t->r, e->tex)) {
            if (e->tex) SDL_DestroyTexture(e->tex);
            e->tex = NULL;
            return NULL;
        }
        /* Transparent in the colour of the text: a glyph blended on it keeps its colour and coverage, so the
         * texture blended on anything gives what the glyph blended there would. (A byte whose colour is not
         * style 0's should have a background.) */
        SDL_Color base = opaque ? p->pal[0].bg : p->pal[0].fg;
        SDL_SetRenderDrawBlendMode(t->r, SDL_BLENDMODE_NONE);
        SDL_SetRenderDrawColor(t->r, base.r, base.g, base.b, opaque ? 255 : 0);
        SDL_RenderClear(t->r);
        run_direct(t, size, s, a, b, e->mx, e->my, p);
        SDL_SetRenderTarget(t->r, old);
        SDL_SetTextureBlendMode(e->tex, opaque ? SDL_BLENDMODE_NONE : SDL_BLENDMODE_BLEND);
    }
    e->key = key, e->len = b - a, e->used = t->stamp;
    return e;
}

static int run_draw(ui_text *t, ui_size size, const char *s, int a, int b, int x, int y, const paint *p) {
    line_tex *e = t->line_cache && b > a ? run_cached(t, size, s, a, b, p) : NULL;
    if (!e) return run_direct(t, size, s, a, b, x, y, p);
    if (e->tex) {
        SDL_Rect d = {x - e->mx, y - e->my, e->w, e->h};
        SDL_RenderCopy(t->r, e->tex, NULL, &d);
    }
    return e->adv;
}

void ui_text_set_cache(ui_text *t, int on) {
    t->line_cache = on != 0;
    if (!on) clear_lines(t);
}

int ui_text_draw(ui_text *t, ui_size size, const char *s, int len, int x, int y, SDL_Color c) {
    if (len < 0) len = (int)strlen(s);
    ui_style one = {c, {0, 0, 0, 0}, 0};
    paint p = {NULL, &one};
    return run_draw(t, size, s, 0, len, x, y, &p);
}

/* ---- wrapping ---------------------------------------------------------------------------------------------- */

static omni_status add_line(ui_lines *l, int start) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        int *p = realloc(l->start, sizeof(int) * (size_t)cap);
        if (!p) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        l->start = p, l->cap = cap;
    }
    l->start[l->n++] = start;
    return OMNI_OK;
}

/* Lines from line `keep` on (lines before it stay; keep = 0: all). */
static omni_status wrap_from(ui_text *t, ui_size size, const char *s, int len, int width, int keep, ui_lines *out) {
    int ls = keep ? out->start[keep - 1] : 0;
    out->n = keep ? keep - 1 : 0;
    out->width = width, out->len = len, out->size = size;
    omni_status st = add_line(out, ls);
    int brk = -1, x = 0;
    for (int i = ls, nx = ls; !st && i < len; i = nx) {
        nx = i;
        uint32_t cp = ui_utf8_next(s, len, &nx);
        if (cp == '\n') {
            st = add_line(out, ls = nx);
            x = 0, brk = -1;
            continue;
        }
        if (is_wide(cp) && i > ls) brk = i;
        int adv = advance(t, size, cp);
        if (x + adv > width && i > ls && cp != ' ') {
            int ns = brk > ls ? brk : i;
            st = add_line(out, ls = ns);
            x = ui_text_width(t, size, s + ns, i - ns);
            brk = -1;
        }
        x += adv;
        if (cp == ' ' || cp == '\t' || is_wide(cp)) brk = nx;
    }
    return st;
}

omni_status ui_text_wrap(ui_text *t, ui_size size, const char *s, int len, int width, ui_lines *out) {
    return wrap_from(t, size, s, len, width, 0, out);
}

/* Where the last line starts nothing before it can change when text is added at the end: wrapping again from
 * there gives the lines a full wrap would. */
omni_status ui_text_wrap_grown(ui_text *t, ui_size size, const char *s, int len, int width, ui_lines *out) {
    if (out->n < 1 || out->width != width || out->size != size || len < out->len || out->start[out->n - 1] > len)
        return wrap_from(t, size, s, len, width, 0, out);
    return wrap_from(t, size, s, len, width, out->n, out);
}

void ui_lines_free(ui_lines *l) {
    free(l->start);
    memset(l, 0, sizeof *l);
}

void ui_text_draw_lines(ui_text *t, ui_size size, const char *s, int len, const ui_lines *l, int x, int y, int first,
                        int end, const uint8_t *style, const ui_style *palette) {
    int lh = ui_text_line_height(t, size);
    paint p = {style, palette};
    for (int k = first < 0 ? 0 : first; k < end && k < l->n; k++, y += lh) {
        int a = l->start[k], b = k + 1 < l->n ? l->start[k + 1] : len;
        run_draw(t, size, s, a, b, x, y, &p);
    }
}
