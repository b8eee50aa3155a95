/* fuzz_image.c - image decoding and preprocessing (vision/image.c, vision/preprocess.c) on arbitrary bytes: the
 * format sniffing, truncation checks, header-only probe, EXIF orientation, stb/libjpeg decode, then smart_resize,
 * the antialiased bicubic resize and patchify at a small pixel budget (4 visual tokens at most, so runs stay
 * fast). The header probe and the full decode must agree on the image size. */
#include "fuzz_util.h"

#include "vision/vision.h"

#define MAX_PIXELS ((int64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    int pw = 0, ph = 0;
    omni_status sp = vision_image_probe_memory(d, n, "fuzz.tga", MAX_PIXELS, &pw, &ph);
    vision_image img;
    if (vision_image_load_memory(d, n, "fuzz.tga", MAX_PIXELS, &img) != OMNI_OK) return 0;
    FUZZ_ASSERT(sp == OMNI_OK && pw == img.width && ph == img.height);
    vision_prep_params p = vision_prep_default_params();
    p.min_pixels = 1024, p.max_pixels = 4096;
    vision_patches pp;
    if (vision_preprocess(&img, &p, &pp) == OMNI_OK) {
        /* (like transformers' smart_resize, a very wide image may end a little over max_pixels: not checked) */
        FUZZ_ASSERT(pp.n_patches == pp.grid_t * pp.grid_h * pp.grid_w && pp.resized_h % 32 == 0 && pp.resized_w % 32 == 0);
        int gh, gw, tok;
        FUZZ_ASSERT(vision_image_token_count(img.height, img.width, &p, &gh, &gw, &tok) == OMNI_OK &&
                    tok * 4 == pp.n_patches);
        vision_patches_free(&pp);
    }
    vision_image_free(&img);
    return 0;
}
