/* demo.h - `omni demo`: the side-by-side window. Two panes answer the same request at the same time from one copy
 * of the weights (one engine, two KV caches: A, default BF16, and B, default INT2), each streaming its answer with
 * tokens/s, time to first token, token count and KV bytes; live charts show KV MiB vs generated tokens, tokens/s
 * over time, process (and GPU) memory, and B's KL divergence and top-1 agreement against A token by token (B's
 * format fed A's tokens, as `omni generate --compare` does), with B's diverging tokens marked in its text.
 * Images and audio come by drag and drop or the Open button; presets "Read the text" and "Ask about the audio".
 * The model runs on worker threads (app/ui/demo_worker.h); the window never waits for it.
 *
 * Models: -m MODEL, then the embedded models assets/models/{ocr,speech,text} (omni_embedded_model), else the test
 * fixture tests/fixtures/audio/omni-a (random weights: images and audio, noise for answers).
 * --script FILE drives the window headlessly (app/ui/demo_script.h) and --screenshot FILE.png saves it at the end;
 * without a display the script mode uses SDL's offscreen video driver and the software renderer. */
#ifndef OMNI_APP_UI_DEMO_H
#define OMNI_APP_UI_DEMO_H

#include "app/args.h"

typedef struct {
    omni_args args;          /* -m, sampling, -n, -c, -t, --device, KV options (window ...), image budget */
    const char *kv_a, *kv_b; /* pane formats (default bf16, int2) */
    const char *script;      /* --script FILE, or NULL (interactive) */
    const char *screenshot;  /* --screenshot FILE.png (at the end of the script) */
    const char *font;        /* --font FILE[:index] tried before the built-in list */
    int width, height;       /* window size (default 1280 x 800) */
} demo_options;

omni_status demo_main(const demo_options *o, volatile int *interrupted);

#endif
