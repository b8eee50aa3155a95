/* cmd_demo.c - `omni demo`: options to the SDL2 window (app/ui/demo.h), or one clear line when this build has no
 * window (configured without SDL2/SDL2_ttf or with -DOMNI_UI=OFF). */
#include <string.h>

#include "app/commands.h"
#ifdef OMNI_HAVE_UI
#include "app/ui/demo.h"
#endif

void ocr_defaults(omni_args *a); /* app/cmd_media.c */

/* `omni ocr`'s: greedy (the two panes then differ only by their caches), Qwen's OCR image budget kept inside the
 * model's own pixel limits; 512 new tokens (a page of text, and a run that ends in time on a CPU). */
void demo_defaults(omni_args *a) {
    ocr_defaults(a);
    a->n_predict = 512;
}

omni_status cmd_demo(const omni_args *a, volatile int *intr) {
    if (a->n_positional)
        return omni_fail(OMNI_ERR_USAGE, "demo: unexpected argument '%s' (usage: omni demo [-m MODEL] [--kv-a MODE] "
                                         "[--kv-b MODE] [--script FILE --screenshot FILE.png])", a->positional[0]);
    if (a->screenshot && !a->script)
        return omni_fail(OMNI_ERR_USAGE, "demo: --screenshot needs --script (or press Ctrl+S in the window)");
#ifdef OMNI_HAVE_UI
    demo_options o;
    memset(&o, 0, sizeof o);
    o.args = *a;
    o.kv_a = a->kv_a ? a->kv_a : "bf16";
    o.kv_b = a->kv_b ? a->kv_b : "int2";
    o.script = a->script, o.screenshot = a->screenshot, o.font = a->font;
    o.width = a->win_w ? a->win_w : 1280;
    o.height = a->win_h ? a->win_h : 800;
    return demo_main(&o, intr);
#else
    (void)intr;
    return omni_fail(OMNI_ERR_UNSUPPORTED, "this omni was built without the demo window (install libsdl2-dev and "
                                           "libsdl2-ttf-dev, configure with -DOMNI_UI=ON)");
#endif
}
