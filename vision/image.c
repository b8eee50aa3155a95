/* image.c - image file loading through stb_image (Debian libstb; the implementation lives in -lstb).
 *
 * Accepted: PNG, JPEG, BMP, GIF (first frame), PNM (P5/P6), TGA. The format is recognised from the first bytes
 * (TGA, which has no signature, from the file extension); anything else is refused with a message naming it.
 * The header is read with stbi_info first and width*height is checked against a limit before any pixel is
 * decoded. Truncated PNG (no IEND) and JPEG (no EOI after the scan) are refused explicitly because stb decodes
 * some truncated files without complaint. Output: RGB uint8, alpha composited on white.
 * When built with libjpeg(-turbo) (OMNI_HAVE_LIBJPEG), JPEG pixels come from it (islow IDCT, fancy upsampling:
 * the same pixels as PIL/transformers); stb's JPEG decoder differs by a few levels on chroma-subsampled files.
 * A JPEG's EXIF orientation is applied as PIL.ImageOps.exif_transpose does (transformers' load_image). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stb_image.h>
#ifdef OMNI_HAVE_LIBJPEG
#include <jpeglib.h>
#include <setjmp.h>
#endif

#include "vision/vision.h"

#define MAX_FILE_BYTES ((size_t)1 << 30)

typedef enum { FMT_UNKNOWN, FMT_PNG, FMT_JPEG, FMT_BMP, FMT_GIF, FMT_PNM, FMT_TGA } img_format;

static int has_ext(const char *name, const char *ext) {
    size_t n = strlen(name), e = strlen(ext);
    return n >= e && strcasecmp(name + n - e, ext) == 0;
}

/* A common non-image file given as an image: what it is, for the error message (NULL: not recognised). */
static const char *media_kind(const uint8_t *d, size_t n) {
    if (n >= 12 && !memcmp(d + 4, "ftyp", 4)) {
        static const char *heif[] = {"heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1", "avif", "avis"};
        for (size_t i = 0; i < sizeof heif / sizeof heif[0]; i++)
            if (!memcmp(d + 8, heif[i], 4)) return NULL; /* an image format (unsupported_name) */
        if (!memcmp(d + 8, "M4A ", 4) || !memcmp(d + 8, "M4B ", 4) || !memcmp(d + 8, "M4P ", 4))
            return "audio (M4A/AAC)";
        return "a video (MP4/MOV)";
    }
    if (n >= 4 && !memcmp(d, "\x1a\x45\xdf\xa3", 4)) return "a video (WebM/Matroska)";
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "AVI ", 4)) return "a video (AVI)";
    if (n >= 12 && (!memcmp(d, "RIFF", 4) || !memcmp(d, "RF64", 4)) && !memcmp(d + 8, "WAVE", 4)) return "audio (WAV)";
    if (n >= 12 && !memcmp(d, "FORM", 4) && (!memcmp(d + 8, "AIFF", 4) || !memcmp(d + 8, "AIFC", 4)))
        return "audio (AIFF)";
    if (n >= 4 && !memcmp(d, "fLaC", 4)) return "audio (FLAC)";
    if (n >= 4 && !memcmp(d, "OggS", 4)) return "audio or video (Ogg)";
    if ((n >= 3 && !memcmp(d, "ID3", 3)) || (n >= 2 && d[0] == 0xFF && (d[1] & 0xE0) == 0xE0)) return "audio (MP3/AAC)";
    return NULL;
}

/* Names of common image (and document) formats stb does not (or we do not) accept, for the error message. */
static const char *unsupported_name(const uint8_t *d, size_t n) {
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return "WebP";
    if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) return "TIFF";
    if (n >= 4 && !memcmp(d, "8BPS", 4)) return "PSD";
    if (n >= 10 && !memcmp(d, "#?RADIANCE", 10)) return "HDR";
    if (n >= 12 && !memcmp(d + 4, "ftyp", 4)) return "HEIF/AVIF";
    if (n >= 4 && (!memcmp(d, "\0\0\1\0", 4) || !memcmp(d, "\0\0\2\0", 4))) return "ICO/CUR";
    if (n >= 2 && d[0] == 'P' && (d[1] == '1' || d[1] == '2' || d[1] == '3' || d[1] == '4')) return "ASCII/bitmap PNM";
    if (n >= 2 && d[0] == 'P' && d[1] == '7') return "PAM";
    if ((n >= 2 && d[0] == 0xFF && d[1] == 0x0A) || (n >= 12 && !memcmp(d, "\0\0\0\x0cJXL \r\n\x87\n", 12)))
        return "JPEG XL";
    if (n >= 12 && !memcmp(d, "\0\0\0\x0cjP  \r\n\x87\n", 12)) return "JPEG 2000";
    if (n >= 4 && !memcmp(d, "qoif", 4)) return "QOI";
    if (n >= 4 && !memcmp(d, "\x76\x2f\x31\x01", 4)) return "OpenEXR";
    if (n >= 4 && !memcmp(d, "DDS ", 4)) return "DDS";
    if (n >= 5 && !memcmp(d, "%PDF-", 5)) return "PDF (a document)";
    size_t i = 0; /* SVG: XML text whose first element is <svg */
    if (n >= 3 && !memcmp(d, "\xef\xbb\xbf", 3)) i = 3;
    while (i < n && (d[i] == ' ' || (d[i] >= '\t' && d[i] <= '\r'))) i++;
    if (i + 1 < n && d[i] == '<' && (d[i + 1] == '?' || d[i + 1] == '!' || d[i + 1] == 's')) {
        size_t lim = n < i + 4096 ? n : i + 4096;
        for (size_t k = i; k + 4 <= lim; k++)
            if (!memcmp(d + k, "<svg", 4)) return "SVG";
    }
    return NULL;
}

static img_format detect_format(const uint8_t *d, size_t n, const char *name) {
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) return FMT_PNG;
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return FMT_JPEG;
    if (n >= 2 && d[0] == 'B' && d[1] == 'M') return FMT_BMP;
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) return FMT_GIF;
    if (n >= 2 && d[0] == 'P' && (d[1] == '5' || d[1] == '6')) return FMT_PNM;
    if (has_ext(name, ".tga") || has_ext(name, ".tpic")) return FMT_TGA;
    return FMT_UNKNOWN;
}

/* A complete PNG ends with an IEND chunk (allow a little trailing garbage). */
static int png_complete(const uint8_t *d, size_t n) {
    if (n < 20) return 0;
    for (size_t i = n > 72 ? n - 72 : 8; i + 8 <= n; i++)
        if (!memcmp(d + i, "IEND", 4)) return 1;
    return 0;
}

/* Walk JPEG segments (skipping APPn payloads, which may hold thumbnails) to the first SOS, then require an EOI
 * marker somewhere after it. */
static int jpeg_complete(const uint8_t *d, size_t n) {
    size_t i = 2;
    while (i + 4 <= n) {
        if (d[i] != 0xFF) return 0;
        uint8_t m = d[i + 1];
        if (m == 0xFF) { i++; continue; }
        if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) { i += 2; continue; }
        if (m == 0xD9) return 0; /* EOI before any scan */
        size_t len = ((size_t)d[i + 2] << 8) | d[i + 3];
        if (m == 0xDA) { i += 2 + len; break; }
        i += 2 + len;
    }
    for (; i + 1 < n; i++)
        if (d[i] == 0xFF && d[i + 1] == 0xD9) return 1;
    return 0;
}

/* stb's reason for the last failure ("corrupt data" when it gives none). */
static const char *failure_reason(void) {
    const char *r = stbi_failure_reason();
    return r && *r ? r : "corrupt data";
}

static const char *format_name(img_format f) {
    static const char *names[] = {"unknown", "PNG", "JPEG", "BMP", "GIF", "PNM", "TGA"};
    return names[f];
}

/* PIL Image.alpha_composite(white, src) for one channel value (AlphaComposite.c, PRECISION_BITS 7). */
static uint8_t over_white(uint32_t c, uint32_t a) {
    if (a == 0) return 255;
    uint32_t coef1 = a * 255u * 255u * 128u / (255u * 255u); /* dst alpha 255: outa255 = 255*255 */
    uint32_t coef2 = 255u * 128u - coef1;
    uint32_t tmp = c * coef1 + 255u * coef2 + (0x80u << 7);
    return (uint8_t)(((((tmp >> 8) + tmp) >> 8)) >> 7);
}

/* RGBA (stb, 4 channels requested) -> RGB composited on white. noinline, as the other per-pixel loops: by name
 * they are kept out of the fuzzers' coverage instrumentation (tests/fuzz/coverage_ignore.txt); an inlined copy
 * would not be. */
__attribute__((noinline))
static void rgba_to_rgb(const uint8_t *rgba, int64_t n, int has_alpha, uint8_t *rgb) {
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *s = rgba + 4 * i;
        uint8_t *o = rgb + 3 * i;
        if (!has_alpha || s[3] == 255) {
            o[0] = s[0], o[1] = s[1], o[2] = s[2];
        } else {
            o[0] = over_white(s[0], s[3]), o[1] = over_white(s[1], s[3]), o[2] = over_white(s[2], s[3]);
        }
    }
}

/* A binary PNM header ("P5"/"P6", then width, height and maxval as decimal numbers separated by whitespace and
 * '#' comments). Returns 0 when it cannot be parsed here. */
static int pnm_header(const uint8_t *d, size_t n, int64_t v[3]) {
    size_t i = 2;
    for (int k = 0; k < 3; k++) {
        for (;;) { /* whitespace and comments */
            while (i < n && (d[i] == ' ' || (d[i] >= '\t' && d[i] <= '\r'))) i++;
            if (i < n && d[i] == '#')
                while (i < n && d[i] != '\n') i++;
            else break;
        }
        if (i >= n || d[i] < '0' || d[i] > '9') return 0;
        for (v[k] = 0; i < n && d[i] >= '0' && d[i] <= '9'; i++)
            if ((v[k] = v[k] * 10 + (d[i] - '0')) > ((int64_t)1 << 40)) return 0;
    }
    return 1;
}

static omni_status check_container(const uint8_t *data, size_t size, const char *name, img_format *fmt) {
    if (size == 0) return omni_fail(OMNI_ERR_INPUT, "image '%s' is an empty file", name);
    *fmt = detect_format(data, size, name);
    if (*fmt == FMT_UNKNOWN) {
        const char *k = media_kind(data, size);
        if (k && !strncmp(k, "audio", 5))
            return omni_fail(OMNI_ERR_INPUT, "image '%s' is %s, not an image (use --audio for sound files)", name, k);
        if (k)
            return omni_fail(OMNI_ERR_INPUT, "image '%s' is %s, not an image: video input is not supported (give a "
                             "frame as PNG or JPEG)", name, k);
        const char *u = unsupported_name(data, size);
        if (u)
            return omni_fail(OMNI_ERR_INPUT, "image '%s': unsupported format %s (use PNG, JPEG, BMP, GIF, PNM or TGA)",
                             name, u);
        return omni_fail(OMNI_ERR_INPUT,
                         "image '%s': not a recognized image file (expected PNG, JPEG, BMP, GIF, PNM or TGA)", name);
    }
    if (*fmt == FMT_PNG && !png_complete(data, size))
        return omni_fail(OMNI_ERR_INPUT, "image '%s': truncated PNG (no IEND chunk)", name);
    if (*fmt == FMT_JPEG && !jpeg_complete(data, size))
        return omni_fail(OMNI_ERR_INPUT, "image '%s': truncated JPEG (no end-of-image marker after the scan)", name);
    /* TGA has no signature and stb_image tries every format it knows before TGA: a ".tga" holding a JPEG (even one
     * whose SOI follows fill bytes, FF FF D8, which is no JPEG to us) went to stb's JPEG decoder, which reads
     * uninitialized Huffman tables on broken files (found by fuzz_image; valgrind), not to libjpeg and not past
     * the checks above. Byte 1 of a TGA, the colour map type, is 0 or 1; every other format stb recognises has
     * another byte there, so none of them can be decoded under a TGA name. */
    if (*fmt == FMT_TGA && (size < 18 || data[1] > 1))
        return omni_fail(OMNI_ERR_INPUT, "image '%s': not a TGA file (%s)", name,
                         size < 18 ? "shorter than a TGA header" : "byte 1, the colour map type, is not 0 or 1");
    int64_t v[3];
    if (*fmt == FMT_PNM && pnm_header(data, size, v) && v[2] > 255) /* stb reads past its buffer for these */
        return omni_fail(OMNI_ERR_INPUT, "image '%s': unsupported 16-bit PNM (maxval %lld; use 8-bit or PNG)", name,
                         (long long)v[2]);
    return OMNI_OK;
}

#ifdef OMNI_HAVE_LIBJPEG
typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_error_exit(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jmp, 1);
}

static void jpeg_quiet(j_common_ptr cinfo, int level) {
    (void)cinfo, (void)level;
}

/* PIL's CMYK JPEG -> RGB, as transformers gets it: Pillow reads every CMYK JPEG as Adobe-inverted ("CMYK;I"), then
 * Convert.c cmyk2rgb: nk = 255 - k, out = nk - nk·c / 255 (its rounding), c, k the inverted values. So from the
 * file's raw values: nk = raw k, c = 255 - raw c. rgb may alias cmyk (written behind the read). */
static void cmyk_to_rgb(const uint8_t *cmyk, int64_t n, uint8_t *rgb) {
    for (int64_t i = 0; i < n; i++) {
        const int nk = cmyk[4 * i + 3];
        for (int ch = 0; ch < 3; ch++) {
            int t = (255 - cmyk[4 * i + ch]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            rgb[3 * i + ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* Decode a JPEG to RGB with libjpeg (CMYK / YCCK files through cmyk_to_rgb, as PIL converts them). */
static omni_status decode_jpeg(const uint8_t *data, size_t size, const char *name, vision_image *out) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err err;
    uint8_t *volatile rgb = NULL;
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_error_exit;
    err.mgr.emit_message = jpeg_quiet;
    if (setjmp(err.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        free(rgb);
        return omni_fail(OMNI_ERR_INPUT, "image '%s': cannot decode JPEG (%s)", name, err.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    const int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK, px = cmyk ? 4 : 3;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const int w = (int)cinfo.output_width, h = (int)cinfo.output_height;
    rgb = malloc((size_t)w * h * px);
    if (!rgb) {
        jpeg_destroy_decompress(&cinfo);
        return omni_fail(OMNI_ERR_NOMEM, "image '%s': out of memory for %dx%d", name, w, h);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = rgb + (size_t)cinfo.output_scanline * w * px;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    const int comps = cinfo.num_components;
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (cmyk) cmyk_to_rgb(rgb, (int64_t)w * h, rgb); /* in place, then shrink */
    uint8_t *fit = cmyk ? realloc(rgb, (size_t)w * h * 3) : rgb;
    out->rgb = fit ? fit : rgb, out->width = w, out->height = h, out->src_channels = comps;
    return OMNI_OK;
}
#endif

static uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static uint32_t be32(const uint8_t *p) { return (be16(p) << 16) | be16(p + 2); }
static uint32_t le16(const uint8_t *p) { return ((uint32_t)p[1] << 8) | p[0]; }

/* Width and height as the header states them, read without stb (whose info call refuses very large images
 * with a generic message). Returns 0 when the header cannot be parsed here. */
static int header_dims(const uint8_t *d, size_t n, img_format f, int64_t *w, int64_t *h) {
    if (f == FMT_PNG && n >= 24 && !memcmp(d + 12, "IHDR", 4)) {
        *w = be32(d + 16), *h = be32(d + 20);
        return 1;
    }
    if (f == FMT_GIF && n >= 10) {
        *w = le16(d + 6), *h = le16(d + 8);
        return 1;
    }
    if (f == FMT_BMP && n >= 26) {
        int32_t bw, bh;
        memcpy(&bw, d + 18, 4), memcpy(&bh, d + 22, 4);
        *w = bw < 0 ? -(int64_t)bw : bw, *h = bh < 0 ? -(int64_t)bh : bh;
        return 1;
    }
    if (f == FMT_TGA && n >= 16) {
        *w = le16(d + 12), *h = le16(d + 14);
        return 1;
    }
    int64_t v[3];
    if (f == FMT_PNM && pnm_header(d, n, v)) {
        *w = v[0], *h = v[1];
        return 1;
    }
    if (f == FMT_JPEG) {
        for (size_t i = 2; i + 9 < n;) {
            if (d[i] != 0xFF) return 0;
            uint8_t m = d[i + 1];
            if (m == 0xFF) { i++; continue; }
            if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
                *h = be16(d + i + 5), *w = be16(d + i + 7);
                return 1;
            }
            i += 2 + be16(d + i + 2);
        }
    }
    return 0;
}

static uint32_t tiff16(const uint8_t *p, int le) { return le ? le16(p) : be16(p); }
static uint32_t tiff32(const uint8_t *p, int le) { return le ? le16(p) | (le16(p + 2) << 16) : be32(p); }

/* EXIF orientation (tag 0x0112) of a JPEG's APP1 "Exif" segment: 1..8, 1 when absent or unreadable. */
static int jpeg_exif_orientation(const uint8_t *d, size_t n) {
    for (size_t i = 2; i + 4 <= n;) {
        if (d[i] != 0xFF) return 1;
        uint8_t m = d[i + 1];
        if (m == 0xFF) { i++; continue; }
        if (m == 0xDA || m == 0xD9) return 1;
        size_t len = be16(d + i + 2);
        if (m == 0xE1 && len >= 16 && i + 2 + len <= n && !memcmp(d + i + 4, "Exif\0\0", 6)) {
            const uint8_t *t = d + i + 10; /* TIFF header */
            const size_t tn = len - 8;
            const int le = t[0] == 'I';
            size_t ifd = tiff32(t + 4, le);
            if (ifd + 2 > tn) return 1;
            unsigned cnt = tiff16(t + ifd, le);
            for (unsigned k = 0; k < cnt && ifd + 2 + 12 * (k + 1) <= tn; k++) {
                const uint8_t *e = t + ifd + 2 + 12 * k;
                if (tiff16(e, le) == 0x0112) {
                    unsigned v = tiff16(e + 8, le); /* SHORT value, left-justified in the value field */
                    return v >= 1 && v <= 8 ? (int)v : 1;
                }
            }
            return 1;
        }
        i += 2 + len;
    }
    return 1;
}

/* Apply an EXIF orientation like PIL.ImageOps.exif_transpose (which transformers' load_image calls).
 * Output pixel (x, y) of the W' x H' result takes input pixel src_xy(x, y). */
__attribute__((noinline)) /* out of the fuzzers' coverage (tests/fuzz/coverage_ignore.txt) */
static omni_status apply_orientation(vision_image *img, int o) {
    if (o <= 1 || o > 8) return OMNI_OK;
    const int w = img->width, h = img->height, swap = o >= 5;
    const int W = swap ? h : w, H = swap ? w : h;
    uint8_t *out = malloc((size_t)w * h * 3);
    if (!out) return omni_fail(OMNI_ERR_NOMEM, "out of memory rotating a %dx%d image", w, h);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int sx, sy;
            switch (o) {
            case 2: sx = w - 1 - x, sy = y; break;
            case 3: sx = w - 1 - x, sy = h - 1 - y; break;
            case 4: sx = x, sy = h - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = h - 1 - x; break;
            case 7: sx = w - 1 - y, sy = h - 1 - x; break;
            default: sx = w - 1 - y, sy = x; break; /* 8 */
            }
            memcpy(out + ((size_t)y * W + x) * 3, img->rgb + ((size_t)sy * w + sx) * 3, 3);
        }
    free(img->rgb);
    img->rgb = out, img->width = W, img->height = H;
    return OMNI_OK;
}

/* Format, size and channels from the header, checked against the pixel limit; no pixel decoded. */
static omni_status read_header(const uint8_t *data, size_t size, const char *name, int64_t max_pixels,
                               img_format *fmt, int *w, int *h, int *comp) {
    if (max_pixels <= 0) max_pixels = VISION_DEFAULT_MAX_IMAGE_PIXELS;
    *fmt = FMT_UNKNOWN;
    omni_status st = check_container(data, size, name, fmt);
    if (st != OMNI_OK) return st;
    if (size > (size_t)0x7fffffff) return omni_fail(OMNI_ERR_INPUT, "image '%s' is too large (%zu bytes)", name, size);
    int64_t hw, hh; /* up to 2^40 each: compared by division, never multiplied */
    if (header_dims(data, size, *fmt, &hw, &hh) && hw > 0 && hh > max_pixels / hw)
        return omni_fail(OMNI_ERR_INPUT, "image '%s' is %lldx%lld = %.0f pixels, over the limit of %lld (--max-image-mpixels)", name,
                         (long long)hw, (long long)hh, (double)hw * (double)hh, (long long)max_pixels);
    if (!stbi_info_from_memory(data, (int)size, w, h, comp))
        return omni_fail(OMNI_ERR_INPUT, "image '%s': cannot read the %s header (%s)", name, format_name(*fmt),
                         failure_reason());
    if (*fmt == FMT_BMP && *h < 0 && *h > INT_MIN) *h = -*h; /* a top-down BMP: stb's info keeps the sign */
    if (*w <= 0 || *h <= 0) return omni_fail(OMNI_ERR_INPUT, "image '%s' has size %dx%d", name, *w, *h);
    if ((int64_t)*w * *h > max_pixels)
        return omni_fail(OMNI_ERR_INPUT, "image '%s' is %dx%d = %lld pixels, over the limit of %lld (--max-image-mpixels)", name, *w, *h,
                         (long long)*w * *h, (long long)max_pixels);
    return OMNI_OK;
}

static omni_status decode_image(const uint8_t *data, size_t size, const char *name, int64_t max_pixels,
                                vision_image *out) {
    memset(out, 0, sizeof(*out));
    img_format fmt;
    int w = 0, h = 0, comp = 0;
    omni_status st = read_header(data, size, name, max_pixels, &fmt, &w, &h, &comp);
    if (st != OMNI_OK) return st;

#ifdef OMNI_HAVE_LIBJPEG
    if (fmt == FMT_JPEG) return decode_jpeg(data, size, name, out);
#endif
    int w2, h2, c2;
    uint8_t *rgba = stbi_load_from_memory(data, (int)size, &w2, &h2, &c2, 4);
    if (!rgba && !strcmp(failure_reason(), "outofmem"))
        return omni_fail(OMNI_ERR_NOMEM, "image '%s': out of memory decoding %dx%d %s", name, w, h, format_name(fmt));
    if (!rgba)
        return omni_fail(OMNI_ERR_INPUT, "image '%s': cannot decode %s (%s)", name, format_name(fmt), failure_reason());
    if (w2 != w || h2 != h) {
        stbi_image_free(rgba);
        return omni_fail(OMNI_ERR_INPUT, "image '%s': header says %dx%d, decoder %dx%d", name, w, h, w2, h2);
    }
    out->rgb = malloc((size_t)w * h * 3);
    if (!out->rgb) {
        stbi_image_free(rgba);
        return omni_fail(OMNI_ERR_NOMEM, "image '%s': out of memory for %dx%d", name, w, h);
    }
    rgba_to_rgb(rgba, (int64_t)w * h, c2 == 2 || c2 == 4, out->rgb);
    stbi_image_free(rgba);
    out->width = w, out->height = h, out->src_channels = c2;
    return OMNI_OK;
}

omni_status vision_image_load_memory(const uint8_t *data, size_t size, const char *name, int64_t max_pixels,
                                     vision_image *out) {
    if (!name) name = "<memory>";
    omni_status st = decode_image(data, size, name, max_pixels, out);
    if (st == OMNI_OK && size >= 3 && data[0] == 0xFF && data[1] == 0xD8) st = apply_orientation(out, jpeg_exif_orientation(data, size));
    if (st != OMNI_OK) vision_image_free(out);
    return st;
}

/* The whole file: a regular file of at most MAX_FILE_BYTES (a directory, device or FIFO is refused by name). */
static omni_status read_file(const char *path, uint8_t **data, size_t *size) {
    *data = NULL, *size = 0;
    omni_read_params p = omni_read_default_params();
    p.max_bytes = MAX_FILE_BYTES;
    p.regular_only = 1;
    char *buf = NULL;
    omni_status st = omni_read_file_ex(path, &p, OMNI_ERR_INPUT, &buf, size);
    if (st) return omni_fail(st, "image: %s", omni_last_error());
    *data = (uint8_t *)buf;
    return OMNI_OK;
}

omni_status vision_image_load(const char *path, int64_t max_pixels, vision_image *out) {
    memset(out, 0, sizeof(*out));
    uint8_t *data;
    size_t size;
    omni_status st = read_file(path, &data, &size);
    if (st != OMNI_OK) return st;
    st = vision_image_load_memory(data, size, path, max_pixels, out);
    free(data);
    return st;
}

omni_status vision_image_probe_memory(const uint8_t *data, size_t size, const char *name, int64_t max_pixels,
                                      int *width, int *height) {
    if (!name) name = "<memory>";
    img_format fmt;
    int w = 0, h = 0, comp = 0;
    omni_status st = read_header(data, size, name, max_pixels, &fmt, &w, &h, &comp);
    if (st) return st;
    int o = fmt == FMT_JPEG ? jpeg_exif_orientation(data, size) : 1;
    *width = o >= 5 && o <= 8 ? h : w; /* orientations 5-8 swap the axes */
    *height = o >= 5 && o <= 8 ? w : h;
    return OMNI_OK;
}

omni_status vision_image_probe(const char *path, int64_t max_pixels, int *width, int *height) {
    uint8_t *data;
    size_t size;
    omni_status st = read_file(path, &data, &size);
    if (st != OMNI_OK) return st;
    st = vision_image_probe_memory(data, size, path, max_pixels, width, height);
    free(data);
    return st;
}

omni_status vision_image_from_rgb(const uint8_t *rgb, int width, int height, vision_image *out) {
    memset(out, 0, sizeof(*out));
    if (width <= 0 || height <= 0) return omni_fail(OMNI_ERR_INPUT, "image size %dx%d", width, height);
    out->rgb = malloc((size_t)width * height * 3);
    if (!out->rgb) return omni_fail(OMNI_ERR_NOMEM, "out of memory for a %dx%d image", width, height);
    memcpy(out->rgb, rgb, (size_t)width * height * 3);
    out->width = width, out->height = height, out->src_channels = 3;
    return OMNI_OK;
}

void vision_image_free(vision_image *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof(*img));
}
