/* ui_text.h - text for the demo window: SDL2_ttf faces with fallback per code point (the first face that has the
 * glyph: a --font file, DejaVu Sans, then the CJK fonts found on the machine - Noto Sans CJK SC, Droid Sans
 * Fallback, WenQuanYi Micro Hei - so Chinese and Japanese OCR output renders), a cache of glyph textures (one
 * per colour: the software renderer then blends them without colour modulation), single-line drawing and a
 * wrapped layout (words break at spaces; CJK text anywhere) drawn with one style per byte (colour and optional
 * background: the demo marks diverging tokens with it).
 *
 * Usage:
 *     ui_text *t;  ui_text_init(renderer, NULL, &t);   ui_text_set_scale(t, 2.0f);   (HiDPI: pixel sizes x2)
 *     ui_text_draw(t, UI_BODY, "tokens/s", -1, x, y, color);
 *     ui_lines l = {0};  ui_text_wrap(t, UI_BODY, s, len, width, &l);
 *     ui_text_draw_lines(t, UI_BODY, s, len, &l, x, y, first_line, end_line, styles, palette);
 *     ui_lines_free(&l);  ui_text_free(t);
 * Kerning and shaping are not applied (glyph by glyph); fine for Latin, CJK and the like, not for Arabic or
 * Indic scripts. One thread (the UI's). */
#ifndef OMNI_APP_UI_TEXT_H
#define OMNI_APP_UI_TEXT_H

#include <SDL.h>
#include <stdint.h>

#include "kernels/status.h"

typedef enum { UI_SMALL = 0, UI_BODY, UI_TITLE, UI_N_SIZES } ui_size;

typedef struct ui_text ui_text;

/* user_font: a TrueType/OpenType file tried first ("path" or "path:index"), or NULL. Fails with a message when
 * no face at all can be opened. */
omni_status ui_text_init(SDL_Renderer *r, const char *user_font, ui_text **out);
void ui_text_free(ui_text *t); /* NULL is a no-op */
/* Pixel sizes = base sizes (12, 14, 17) x scale; reopens the faces and empties the glyph cache when it changes. */
omni_status ui_text_set_scale(ui_text *t, float scale);
/* The faces in fallback order, "DejaVuSans.ttf, DroidSansFallbackFull.ttf" (for the log). */
const char *ui_text_faces(const ui_text *t);
/* 1 when some face has a glyph for code point cp. */
int ui_text_has_glyph(ui_text *t, uint32_t cp);

int ui_text_line_height(const ui_text *t, ui_size size);
/* Width in pixels of len bytes (len < 0: strlen) on one line. */
int ui_text_width(ui_text *t, ui_size size, const char *s, int len);
/* One line at (x, y) = top-left; returns the width drawn. */
int ui_text_draw(ui_text *t, ui_size size, const char *s, int len, int x, int y, SDL_Color c);

/* Line starts of a wrapped text: line i is bytes [start[i], start[i + 1]) (the last ends at the text's end). */
typedef struct {
    int *start;
    int n, cap;
    int width;  /* the width it was made for */
    int len;    /* the text length it was made for */
    int size;   /* the ui_size it was made for */
} ui_lines;

/* Wrap len bytes into lines of at most `width` pixels ('\n' ends a line). out is reused (grown as needed). */
omni_status ui_text_wrap(ui_text *t, ui_size size, const char *s, int len, int width, ui_lines *out);
/* The same for a text that only grew at its end since out was made for it (a streamed answer): the lines before
 * the last are kept, the rest wrapped again (the result is ui_text_wrap's). */
omni_status ui_text_wrap_grown(ui_text *t, ui_size size, const char *s, int len, int width, ui_lines *out);
void ui_lines_free(ui_lines *l);

typedef struct {
    SDL_Color fg, bg;
    int has_bg;
} ui_style;

/* Draw lines [first, end) of a wrapped text, line `first` at y. style: NULL (all palette[0]) or one palette index
 * per byte of s. A style with has_bg fills its glyphs' boxes (advance x line height); when palette[0] has an opaque
 * background, each line is an opaque box as wide as its text (what glyphs draw outside the line's box is cut):
 * the cheapest to draw again. Bytes in a colour other than palette[0]'s should have a background. */
void ui_text_draw_lines(ui_text *t, ui_size size, const char *s, int len, const ui_lines *l, int x, int y, int first,
                        int end, const uint8_t *style, const ui_style *palette);

/* Lines and single-line text are drawn through a cache of line textures (one copy per line; the least recently
 * drawn are evicted): on by default; 0 draws glyph by glyph (tests compare the two). */
void ui_text_set_cache(ui_text *t, int on);

/* Next code point of s[*i..len) (invalid bytes give U+FFFD and advance one byte). */
uint32_t ui_utf8_next(const char *s, int len, int *i);
/* Byte offset of the code point before position i (0 at the start). */
int ui_utf8_prev(const char *s, int i);

#endif
