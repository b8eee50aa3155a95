/* test_ui_text.c - the demo window's text module (app/ui/ui_text.c) on SDL's software renderer, no display:
 *  - font fallback: a CJK face is found after DejaVu Sans (scripts/setup.sh installs fonts-droid-fallback), every
 *    Chinese / Japanese test character has a glyph, and the glyphs drawn are the characters' own (each has ink, no
 *    two are the same bitmap: the .notdef box a face without them draws would be), full width;
 *  - the line cache: a line drawn from it has the pixels of the same line drawn glyph by glyph (within 3 of 255
 *    per channel, as many inked pixels within 2%: the 8-bit blend is rounded twice, into the line's texture and
 *    from it; a glyph misplaced or missing differs by far more);
 *  - wrapping: Latin text breaks at spaces, CJK text between any two characters, '\n' always; no line is wider
 *    than asked; a text that grows piece by piece (split UTF-8 included) wraps as a whole; bad UTF-8 bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <SDL.h>

#include "app/ui/ui_text.h"
#include "check.h"

#define SW 400
#define SH 60

static SDL_Surface *g_surf;
static SDL_Renderer *g_r;

static void clear(void) {
    SDL_SetRenderDrawColor(g_r, 255, 255, 255, 255);
    SDL_RenderClear(g_r);
}

/* The rendered pixels (ABGR) after drawing; malloc'ed. */
static uint32_t *pixels(void) {
    uint32_t *px = malloc(sizeof(uint32_t) * SW * SH);
    if (px && SDL_RenderReadPixels(g_r, NULL, SDL_PIXELFORMAT_ABGR8888, px, SW * 4)) {
        free(px);
        return NULL;
    }
    return px;
}

static int ink(const uint32_t *px) {
    int n = 0;
    for (int i = 0; px && i < SW * SH; i++) n += (px[i] & 0xFFFFFF) != 0xFFFFFF;
    return n;
}

static void test_cjk(ui_text *t) {
    const char *faces = ui_text_faces(t);
    printf("faces: %s\n", faces);
    CHECK(strstr(faces, "DejaVuSans.ttf") != NULL, "DejaVu Sans is not among the faces: %s", faces);
    CHECK(strstr(faces, "DroidSansFallback") || strstr(faces, "NotoSansCJK") || strstr(faces, "wqy"),
          "no CJK face after DejaVu Sans (install fonts-droid-fallback): %s", faces);
    static const char *const chars[] = {"中", "文", "日", "本", "語", "あ", "カ", "字"};
    enum { N = sizeof chars / sizeof chars[0] };
    uint32_t *bmp[N];
    SDL_Color black = {0, 0, 0, 255};
    int wide_i = ui_text_width(t, UI_BODY, "i", -1);
    for (int i = 0; i < N; i++) {
        int k = 0;
        uint32_t cp = ui_utf8_next(chars[i], (int)strlen(chars[i]), &k);
        CHECK(ui_text_has_glyph(t, cp), "no face has a glyph for U+%04X", cp);
        int w = ui_text_width(t, UI_BODY, chars[i], -1);
        CHECK(w >= ui_text_line_height(t, UI_BODY) * 2 / 3 && w > 2 * wide_i, "U+%04X is %d px wide (full width "
              "expected; 'i' is %d)", cp, w, wide_i);
        clear();
        ui_text_draw(t, UI_BODY, chars[i], -1, 4, 4, black);
        bmp[i] = pixels();
        CHECK(bmp[i] && ink(bmp[i]) > 20, "U+%04X drew %d pixels", cp, ink(bmp[i]));
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            CHECK(bmp[i] && bmp[j] && memcmp(bmp[i], bmp[j], sizeof(uint32_t) * SW * SH),
                  "%s and %s drew the same bitmap (a missing-glyph box?)", chars[i], chars[j]);
    for (int i = 0; i < N; i++) free(bmp[i]);
}

/* A line drawn through the line cache (a texture made once, drawn again from it) has the pixels of the same line
 * drawn glyph by glyph: a styled line (marks with backgrounds), a one-colour label, an opaque line. */
static void test_line_cache(ui_text *t) {
    static const ui_style pal[2] = {{{28, 32, 38, 255}, {0, 0, 0, 0}, 0},
                                    {{120, 0, 0, 255}, {255, 205, 200, 255}, 1}},
                          opaque[2] = {{{28, 32, 38, 255}, {255, 255, 255, 255}, 1}, /* the surface's white */
                                       {{120, 0, 0, 255}, {255, 205, 200, 255}, 1}};
    static const char *const kinds[3] = {"styled line", "label", "opaque styled line"};
    const char *s = "mixed 中文 text, marked tokens: ✓ αβγ (jgy)";
    int len = (int)strlen(s);
    uint8_t style[128];
    for (int i = 0; i < len; i++) style[i] = i >= 6 && i < 12;
    ui_lines l = {0};
    CHECK(ui_text_wrap(t, UI_BODY, s, len, SW - 8, &l) == OMNI_OK && l.n == 1, "one line expected, got %d", l.n);
    SDL_Color c = {0, 114, 178, 255};
    for (int kind = 0; kind < 3; kind++) {
        ui_text_set_cache(t, 0);
        clear();
        if (kind == 1) ui_text_draw(t, UI_TITLE, s, len, 4, 4, c);
        else ui_text_draw_lines(t, UI_BODY, s, len, &l, 4, 4, 0, 1, style, kind ? opaque : pal);
        uint32_t *direct = pixels();
        ui_text_set_cache(t, 1);
        for (int pass = 0; pass < 2; pass++) { /* the first makes the line's texture, the second draws it again */
            clear();
            if (kind == 1) ui_text_draw(t, UI_TITLE, s, len, 4, 4, c);
            else ui_text_draw_lines(t, UI_BODY, s, len, &l, 4, 4, 0, 1, style, kind ? opaque : pal);
            uint32_t *cached = pixels();
            int diff = 0, maxd = 0;
            for (int i = 0; direct && cached && i < SW * SH; i++)
                for (int b = 0; b < 24; b += 8) {
                    int dv = abs((int)(direct[i] >> b & 255) - (int)(cached[i] >> b & 255));
                    diff += dv > 0, maxd = dv > maxd ? dv : maxd;
                }
            int di = abs(ink(cached) - ink(direct));
            CHECK(direct && cached && ink(cached) > 100 && di * 50 <= ink(direct) && maxd <= 3,
                  "%s, pass %d: the cached line differs in %d channels by up to %d (ink %d vs %d)",
                  kinds[kind], pass, diff, maxd, ink(cached), ink(direct));
            free(cached);
        }
        free(direct);
    }
    ui_lines_free(&l);
}

static void test_wrap(ui_text *t) {
    ui_lines l = {0};
    const char *latin = "hello world again and again";
    int w = ui_text_width(t, UI_BODY, "hello world", -1);
    CHECK(ui_text_wrap(t, UI_BODY, latin, (int)strlen(latin), w, &l) == OMNI_OK, "wrap latin");
    CHECK(l.n >= 2 && l.start[1] == 12, "latin: %d lines, the second starts at %d (want 12: after the space)", l.n,
          l.n > 1 ? l.start[1] : -1);
    const char *cjk = "中文中文中文中文中文中文";
    int cw = ui_text_width(t, UI_BODY, "中", -1);
    CHECK(ui_text_wrap(t, UI_BODY, cjk, (int)strlen(cjk), cw * 5 + cw / 2, &l) == OMNI_OK, "wrap cjk");
    CHECK(l.n == 3 && l.start[1] == 15 && l.start[2] == 30, "cjk: %d lines, starts %d %d (want 3 lines of 5)", l.n,
          l.n > 1 ? l.start[1] : -1, l.n > 2 ? l.start[2] : -1);
    for (int i = 0; i < l.n; i++) {
        int a = l.start[i], b = i + 1 < l.n ? l.start[i + 1] : (int)strlen(cjk);
        CHECK(ui_text_width(t, UI_BODY, cjk + a, b - a) <= cw * 5 + cw / 2, "cjk line %d too wide", i);
    }
    const char *nl = "a\nb";
    CHECK(ui_text_wrap(t, UI_BODY, nl, 3, 1000, &l) == OMNI_OK && l.n == 2 && l.start[1] == 2, "newline: %d lines",
          l.n);
    ui_lines_free(&l);
    /* a streamed answer: wrapping what grew gives the full wrap's lines at every step */
    const char *pieces[] = {"The ", "answer", " streams", " in", " pieces", ": 中文", "中文中", "文, ", "then\n", "more",
                            " words", " after", " a", " newline", " and", " a", " very", "longwordwithoutspaces",
                            "thatmustbreak", " 日本語の", "テキスト", "。", "\xe4", "\xb8\xad end"};
    char buf[512] = "";
    ui_lines g = {0}, f = {0};
    int gw = ui_text_width(t, UI_BODY, "The answer str", -1), bad_steps = 0;
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        strcat(buf, pieces[k]);
        int n = (int)strlen(buf);
        ui_text_wrap_grown(t, UI_BODY, buf, n, gw, &g);
        ui_text_wrap(t, UI_BODY, buf, n, gw, &f);
        int same = g.n == f.n;
        for (int i = 0; same && i < f.n; i++) same = g.start[i] == f.start[i];
        bad_steps += !same;
    }
    CHECK(bad_steps == 0 && f.n > 5, "grown wrap differs from the full wrap at %d steps (%d lines)", bad_steps, f.n);
    ui_lines_free(&g);
    ui_lines_free(&f);
    const char bad[] = "a\xff\xe4\xb8";
    int i = 1;
    CHECK(ui_utf8_next(bad, 4, &i) == 0xFFFD && i == 2, "bad byte: U+FFFD, one byte");
    CHECK(ui_utf8_next(bad, 4, &i) == 0xFFFD && i == 3, "truncated sequence: U+FFFD, one byte");
    CHECK(ui_utf8_prev("a中", 4) == 1, "previous code point");
}

int main(void) {
    g_surf = SDL_CreateRGBSurfaceWithFormat(0, SW, SH, 32, SDL_PIXELFORMAT_ARGB8888);
    g_r = g_surf ? SDL_CreateSoftwareRenderer(g_surf) : NULL;
    CHECK(g_r != NULL, "software renderer: %s", SDL_GetError());
    ui_text *t = NULL;
    if (g_r) CHECK(ui_text_init(g_r, NULL, &t) == OMNI_OK, "ui_text_init: %s", omni_last_error());
    if (t) {
        test_cjk(t);
        test_line_cache(t);
        test_wrap(t);
        ui_text_set_scale(t, 2.f); /* HiDPI: twice the pixels */
        CHECK(ui_text_line_height(t, UI_BODY) >= 30, "line height at scale 2: %d", ui_text_line_height(t, UI_BODY));
        test_cjk(t);
    }
    ui_text_free(t);
    if (g_r) SDL_DestroyRenderer(g_r);
    SDL_FreeSurface(g_surf);
    SDL_Quit();
    return check_exit();
}
