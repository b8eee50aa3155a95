/* test_image.c - image loading: every supported container decodes to the RGB that PIL gives (alpha on white),
 * and each bad input is refused with OMNI_ERR_INPUT and a clear message.
 * Usage: test_vision_image formats | missing | empty | trunc_png | trunc_jpeg | text_png | huge | unsupported | fuzz */
#define _GNU_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "vfix.h"
#include "vision/vision.h"

static char tmpdir[256];

static const char *tmp_write(const char *name, const void *data, size_t n) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        if (n) fwrite(data, 1, n, f);
        fclose(f);
    }
    return path;
}

static void test_formats(void) {
    cJSON *man = vfix_manifest();
    CHECK(man != NULL, "manifest.json missing in %s", VFIX_DIR);
    if (!man) return;
    const cJSON *it;
    int n = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(man, "formats")) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VFIX_DIR, vfix_str(it, "file"));
        size_t nexp = 0;
        uint8_t *exp = vfix_read(vfix_str(it, "rgb"), &nexp);
        vision_image img;
        omni_status st = vision_image_load(path, 0, &img);
        CHECK(st == OMNI_OK, "%s: %s", path, omni_last_error());
        if (st == OMNI_OK && exp) {
            CHECK(img.width == vfix_int(it, "width") && img.height == vfix_int(it, "height"), "%s: size %dx%d",
                  path, img.width, img.height);
            CHECK(nexp == (size_t)img.width * img.height * 3, "%s: expected %zu bytes", path, nexp);
            int bad = 0, maxd = 0;
            for (size_t i = 0; i < nexp && nexp == (size_t)img.width * img.height * 3; i++) {
                int d = abs((int)img.rgb[i] - exp[i]);
                bad += d != 0;
                maxd = d > maxd ? d : maxd;
            }
            CHECK(bad == 0, "%s: %d of %zu bytes differ from PIL (max %d)", vfix_str(it, "file"), bad, nexp, maxd);
        }
        vision_image_free(&img);
        free(exp);
        n++;
    }
    CHECK(n >= 9, "only %d format fixtures", n);
    cJSON_Delete(man);
}

/* A little-endian ("II") EXIF segment with orientation 8 spliced into a JPEG without EXIF: the result must be the
 * plain decode rotated 90 degrees counter-clockwise (PIL ROTATE_90): out(x, y) = in(w - 1 - y, x). */
static void test_exif_le(void) {
    size_t n = 0;
    uint8_t *jpg = vfix_read("g_color.jpg", &n);
    CHECK(jpg != NULL, "g_color.jpg missing");
    if (!jpg) return;
    static const uint8_t app1[] = {0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0,
                                   1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *buf = malloc(n + sizeof app1);
    memcpy(buf, jpg, 2);
    memcpy(buf + 2, app1, sizeof app1);
    memcpy(buf + 2 + sizeof app1, jpg + 2, n - 2);
    vision_image a, b;
    omni_status sa = vision_image_load_memory(jpg, n, "plain", 0, &a);
    omni_status sb = vision_image_load_memory(buf, n + sizeof app1, "exif8", 0, &b);
    CHECK(sa == OMNI_OK && sb == OMNI_OK, "decode: %s", omni_last_error());
    if (sa == OMNI_OK && sb == OMNI_OK) {
        CHECK(b.width == a.height && b.height == a.width, "orientation 8: %dx%d from %dx%d", b.width, b.height,
              a.width, a.height);
        int bad = 0;
        for (int y = 0; y < b.height && b.width == a.height; y++)
            for (int x = 0; x < b.width; x++)
                bad += memcmp(b.rgb + ((size_t)y * b.width + x) * 3, a.rgb + ((size_t)x * a.width + a.width - 1 - y) * 3, 3) != 0;
        CHECK(bad == 0, "orientation 8 (little-endian EXIF): %d pixels differ", bad);
    }
    vision_image_free(&a), vision_image_free(&b);
    free(buf), free(jpg);
}

/* Truncated and byte-flipped copies of every fixture image: the loader returns OMNI_OK or OMNI_ERR_INPUT, never
 * crashes (run under -DOMNI_SANITIZE=ON to also catch memory errors). Deterministic LCG. */
static void test_fuzz(void) {
    static const char *files[] = {"a_exact.png", "e_rgba.png", "f_grey.jpg", "g_color.jpg", "fmt_rgb.bmp",
                                  "fmt_pal.gif", "fmt_rgb.ppm", "fmt_grey.pgm", "fmt_rgb.tga", "fmt_la.png",
                                  "fmt_rgb16.png", "fmt_orient6.jpg", "fmt_cmyk.jpg", "fmt_topdown.bmp"};
    uint32_t rng = 12345;
    int n_ok = 0, n_err = 0, n_bad = 0;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        size_t n = 0;
        uint8_t *data = vfix_read(files[f], &n), *buf = malloc(n + 1);
        CHECK(data != NULL, "%s missing", files[f]);
        for (int it = 0; data && it < 150; it++) {
            memcpy(buf, data, n);
            size_t len = n;
            rng = rng * 1664525u + 1013904223u;
            if (it < 50) len = 1 + (rng >> 8) % n;
            else
                for (int k = 0; k < 1 + it % 8; k++) rng = rng * 1664525u + 1013904223u, buf[(rng >> 8) % n] = (uint8_t)(rng >> 24);
            vision_image img;
            omni_status st = vision_image_load_memory(buf, len, files[f], 0, &img);
            if (st == OMNI_OK) n_ok++, n_bad += img.rgb == NULL || img.width <= 0;
            else n_err++, n_bad += st != OMNI_ERR_INPUT || img.rgb != NULL;
            vision_image_free(&img);
        }
        free(data), free(buf);
    }
    CHECK(n_bad == 0, "%d mutated files gave an unexpected status or output", n_bad);
    CHECK(n_err > 0, "no mutated file was refused");
    fprintf(stderr, "fuzz: %d decoded, %d refused\n", n_ok, n_err);
}

static void expect_refused(const char *path, const char *what, const char *needle) {
    vision_image img;
    double t0 = omni_time_ms();
    omni_status st = vision_image_load(path, 0, &img);
    double ms = omni_time_ms() - t0;
    CHECK(st == OMNI_ERR_INPUT, "%s: status %d (%s)", what, st, omni_last_error());
    CHECK(img.rgb == NULL, "%s: output not cleared", what);
    CHECK(strstr(omni_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, omni_last_error(), needle);
    CHECK(ms < 1000.0, "%s: took %.0f ms", what, ms);
    fprintf(stderr, "%s -> %s\n", what, omni_last_error());
    vision_image_free(&img);
}

/* A PNG whose IHDR claims w x h (valid CRC not needed by stb; IEND present). */
static size_t fake_png(uint8_t *buf, uint32_t w, uint32_t h) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    memcpy(buf, sig, 8), n = 8;
    const uint8_t ihdr[] = {0, 0, 0, 13, 'I', 'H', 'D', 'R', w >> 24, w >> 16, w >> 8, w, h >> 24, h >> 16, h >> 8,
                            h, 8, 2, 0, 0, 0, 0, 0, 0, 0};
    memcpy(buf + n, ihdr, sizeof ihdr), n += sizeof ihdr;
    const uint8_t idat[] = {0, 0, 0, 2, 'I', 'D', 'A', 'T', 0x78, 0x9c, 0, 0, 0, 0};
    memcpy(buf + n, idat, sizeof idat), n += sizeof idat;
    const uint8_t iend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    memcpy(buf + n, iend, sizeof iend), n += sizeof iend;
    return n;
}

static void test_truncated(const char *fixture, const char *name, const char *needle) {
    size_t n = 0;
    uint8_t *data = vfix_read(fixture, &n);
    CHECK(data != NULL, "fixture %s missing", fixture);
    if (!data) return;
    /* the complete file loads; half of it is refused */
    char full[1024];
    snprintf(full, sizeof full, "%s/%s", VFIX_DIR, fixture);
    vision_image img;
    CHECK(vision_image_load(full, 0, &img) == OMNI_OK, "complete %s: %s", fixture, omni_last_error());
    vision_image_free(&img);
    expect_refused(tmp_write(name, data, n / 2), name, needle);
    free(data);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "formats";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/omni_vision_test_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    if (!strcmp(mode, "formats")) {
        test_formats();
        test_exif_le();
    } else if (!strcmp(mode, "fuzz")) {
        test_fuzz();
    } else if (!strcmp(mode, "missing")) {
        expect_refused("/nonexistent/dir/none.png", "missing file", "No such file");
    } else if (!strcmp(mode, "empty")) {
        expect_refused(tmp_write("empty.png", "", 0), "0-byte file", "empty");
    } else if (!strcmp(mode, "trunc_png")) {
        test_truncated("b_down.png", "trunc.png", "truncated PNG");
    } else if (!strcmp(mode, "trunc_jpeg")) {
        test_truncated("g_color.jpg", "trunc.jpg", "truncated JPEG");
    } else if (!strcmp(mode, "text_png")) {
        const char *txt = "this is not an image, just some text\n";
        expect_refused(tmp_write("text.png", txt, strlen(txt)), "text named .png", "not a recognized image");
    } else if (!strcmp(mode, "huge")) {
        uint8_t buf[128];
        size_t n = fake_png(buf, 100000, 100000);
        expect_refused(tmp_write("huge.png", buf, n), "100000x100000 header", "over the limit");
        /* same header within a raised limit: refused later by the decoder, still an input error */
        n = fake_png(buf, 64, 64);
        expect_refused(tmp_write("bad_idat.png", buf, n), "64x64 with empty IDAT", "cannot decode");
    } else if (!strcmp(mode, "unsupported")) {
        const uint8_t webp[16] = {'R', 'I', 'F', 'F', 8, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', ' '};
        expect_refused(tmp_write("img.webp", webp, sizeof webp), "WebP", "unsupported format WebP");
        const uint8_t tiff[8] = {'I', 'I', '*', 0, 8, 0, 0, 0};
        expect_refused(tmp_write("img.tif", tiff, sizeof tiff), "TIFF", "unsupported format TIFF");
        const char *psd = "8BPS\0\1\0\0\0\0\0\0\0\3";
        expect_refused(tmp_write("img.psd", psd, 14), "PSD", "unsupported format PSD");
        /* 16-bit PNM: stb_image reads past its buffer converting it (found by fuzz_image) */
        const char *pnm16 = "P6 # comment\n2 2\n65535\n0123456789abcdef0123456789";
        expect_refused(tmp_write("img.ppm", pnm16, strlen(pnm16)), "16-bit PPM", "unsupported 16-bit PNM (maxval 65535");
        /* a JPEG (SOI after a fill byte) named .tga went to stb's JPEG decoder, which reads uninitialized Huffman
         * tables on broken files (found by fuzz_image on the GPU host: valgrind here) */
        const uint8_t fake_tga[24] = {0xFF, 0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1};
        expect_refused(tmp_write("img.tga", fake_tga, sizeof fake_tga), "JPEG named .tga", "not a TGA file");
        /* a PNG header of 2^32-1 x 2^32-1: the pixel count overflowed int64 (UBSan, found by fuzz_image) */
        uint8_t buf[128];
        size_t n = fake_png(buf, 0xffffffffu, 0xffffffffu);
        expect_refused(tmp_write("huge2.png", buf, n), "4294967295x4294967295 header", "over the limit");
        /* session 7: a video, audio or a document given as an image says what it is (an MP4 was "HEIF/AVIF", a WAV
         * or a WebM "not a recognized image file") */
        static const struct { const char *name, *head; size_t n; const char *needle; } cs[] = {
            {"clip.mp4", "\0\0\0\x20" "ftypisom\0\0\2\0isomiso2", 24, "is a video (MP4/MOV), not an image"},
            {"clip.mov", "\0\0\0\x14" "ftypqt  \0\0\2\0qt  ", 20, "is a video (MP4/MOV)"},
            {"clip.webm", "\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01", 9, "is a video (WebM/Matroska)"},
            {"song.m4a", "\0\0\0\x18" "ftypM4A \0\0\2\0M4A ", 20, "is audio (M4A/AAC), not an image (use --audio"},
            {"song.wav", "RIFF\x24\0\0\0WAVEfmt ", 16, "is audio (WAV), not an image"},
            {"song.flac", "fLaC\0\0\0\x22", 8, "is audio (FLAC)"},
            {"song.mp3", "ID3\x03\0\0\0\0\0\x10", 10, "is audio (MP3/AAC)"},
            {"photo.heic", "\0\0\0\x18" "ftypheic\0\0\0\0mif1heic", 24, "unsupported format HEIF/AVIF"},
            {"draw.svg", "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"/>", 63, "unsupported format SVG"},
            {"img.pam", "P7\nWIDTH 1\n", 11, "unsupported format PAM"},
            {"doc.pdf", "%PDF-1.7\n", 9, "unsupported format PDF"},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            expect_refused(tmp_write(cs[i].name, cs[i].head, cs[i].n), cs[i].name, cs[i].needle); /* n: NUL bytes */
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_exit();
}
