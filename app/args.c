/* args.c - option parsing for the omni commands: one table of options, the commands that use each, per-command
 * help, and the checks that make a command line mean one thing or fail (see args.h). */
#define _DEFAULT_SOURCE /* getentropy */
#include "app/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvcache/kvcache.h"

/* Option groups; a command takes the union of its groups. */
enum {
    G_MODEL = 1 << 0,   /* -m, -v */
    G_RUN = 1 << 1,     /* -t */
    G_PROMPT = 1 << 2,  /* -p, -f */
    G_SYSTEM = 1 << 3,  /* --system */
    G_RAW = 1 << 4,     /* --raw */
    G_SAMPLE = 1 << 5,  /* --temp, --top-k, --top-p */
    G_CTX = 1 << 6,     /* -c */
    G_KV = 1 << 7,      /* --kv-window, --kv-sink, --kv-rotate, --kv-scale */
    G_IMAGE = 1 << 8,   /* --image */
    G_AUDIO = 1 << 9,   /* --audio */
    G_BUDGET = 1 << 10, /* --image-min-tokens, --image-max-tokens */
    G_PERF = 1 << 11,   /* --no-perf */
    G_LOGITS = 1 << 12, /* -o, --top */
    G_EVAL = 1 << 13,   /* --text, --chunk, --json */
    G_TEXTLIM = 1 << 14,
    G_AUDLIM = 1 << 15,
    G_IMGLIM = 1 << 16,
    G_COMPARE = 1 << 17, /* --compare (generate) */
    G_BENCH = 1 << 18,   /* --batch, --random, --csv, --png, --png-size, --bw-mib, --report ... (omni bench) */
    G_KVMEM = 1 << 19,   /* --kv-mem (bench, serve) */
    G_SERVE = 1 << 20,   /* --host, --port, --api-key ... (omni serve) */
    G_DEMO = 1 << 21,    /* --kv-a, --kv-b, --script, --screenshot, --font, --size (omni demo) */
    G_NPRED = 1 << 22,   /* -n */
    G_SEED = 1 << 23,    /* -s */
    G_DEVICE = 1 << 24,  /* --device */
    G_KVMODE = 1 << 25,  /* --kv */
    G_KVLAYERS = 1 << 26, /* --kv-layers */
    G_ALL = (1 << 27) - 1,
    /* the usual sets */
    G_SAMPLING = G_SAMPLE | G_NPRED | G_SEED,
    G_KVALL = G_KVMODE | G_KV | G_KVLAYERS,
};

/* What the words after the options are. */
typedef enum { POS_PROMPT, POS_NONE, POS_IMAGES, POS_SUBCOMMAND } pos_kind;

typedef struct {
    const char *name;
    unsigned groups;
    pos_kind pos;
    const char *synopsis, *about;
} cmd_info;

#define GEN_GROUPS                                                                                                 \
    (G_MODEL | G_RUN | G_DEVICE | G_PROMPT | G_SYSTEM | G_RAW | G_SAMPLING | G_CTX | G_KVALL | G_IMAGE | G_AUDIO |     \
     G_BUDGET | G_PERF | G_TEXTLIM | G_AUDLIM | G_IMGLIM)

static const cmd_info g_cmds[] = {
    {"generate", GEN_GROUPS | G_COMPARE, POS_PROMPT, "-m MODEL -p TEXT [options]  (or: -m MODEL [options] WORDS...)",
     "Generate a reply (chat template unless --raw), streamed to stdout; perf block and KV line on stderr."},
    {"chat", G_MODEL | G_RUN | G_DEVICE | G_SYSTEM | G_SAMPLING | G_CTX | G_KVALL | G_BUDGET | G_PERF | G_AUDLIM | G_IMGLIM,
     POS_NONE,
     "-m MODEL [options]", "Interactive multi-turn chat; the history stays in the KV cache."},
    {"tokenize", G_MODEL | G_PROMPT | G_PERF | G_TEXTLIM, POS_PROMPT, "-m MODEL -p TEXT",
     "Print the token ids of TEXT as it is (no template; special tokens are recognised)."},
    {"logits", (GEN_GROUPS & ~G_SAMPLING) | G_LOGITS, POS_PROMPT, "-m MODEL -p TEXT (-o FILE | --top N) [options]",
     "Run the prompt and write the last position's logits (float32) to -o FILE and/or the N best to stdout."},
    {"ocr", GEN_GROUPS & ~(G_AUDIO | G_AUDLIM | G_RAW), POS_IMAGES, "IMAGE... [-m MODEL] [--prompt TEXT] [options]",
     "Read the text in each image (greedy, 1024-2048 visual tokens, up to 2048 new tokens)."},
    {"ask", GEN_GROUPS, POS_PROMPT, "[-m MODEL] --audio FILE [options] \"question\"",
     "Answer a question about an audio file with a Qwen3-Omni model (audio first, then the question)."},
    {"eval", G_MODEL | G_RUN | G_DEVICE | G_CTX | G_KVALL | G_EVAL | G_PERF | G_TEXTLIM, POS_SUBCOMMAND,
     "kl -m MODEL --kv MODE --text FILE [--ctx N] [--chunk N] [--json]",
     "KL divergence of a KV format's next-token distributions vs a BF16 cache, teacher-forced over a text."},
    {"bench", G_MODEL | G_RUN | G_DEVICE | G_NPRED | G_SEED | G_KVMODE | G_KV | G_KVMEM | G_BENCH | G_PERF, POS_NONE,
     "-m MODEL | --random CONFIG [--kv bf16,int2] [--batch 1,8,48] [--ctx 4K,32K,128K] [options]",
     "Decode/prefill speed, KV memory, % of roofline and sequences that fit, per KV format, context and batch "
     "(-n: decode steps; -s: the seed of --random's weights)."},
    {"serve", G_MODEL | G_RUN | G_SAMPLE | G_CTX | G_KVALL | G_KVMEM | G_BUDGET | G_SERVE | G_AUDLIM | G_IMGLIM, POS_NONE,
     "-m MODEL [--host H] [--port N] [--api-key K] [--max-seqs N] [--kv-mem GiB] [options]",
     "OpenAI-compatible HTTP server on the batched engine (README: endpoints, limits, --allow-files)."},
    {"demo", G_MODEL | G_RUN | G_DEVICE | G_SYSTEM | G_SAMPLING | G_CTX | G_KV | G_KVLAYERS | G_BUDGET | G_AUDLIM |
     G_IMGLIM | G_DEMO, POS_NONE,
     "[-m MODEL] [--kv-a bf16] [--kv-b int2] [--script FILE [--screenshot FILE.png]] [options]",
     "The side-by-side window: two KV formats answer the same image or audio question at once, with live KV "
     "memory, tokens/s and divergence charts (README: shortcuts, script language)."},
};

typedef enum {
    O_MODEL, O_VERBOSE, O_HELP, O_THREADS, O_DEVICE, O_PROMPT, O_FILE, O_SYSTEM, O_RAW, O_NPREDICT, O_TEMP, O_TOPK,
    O_TOPP, O_SEED, O_CTX, O_CTXLIST, O_KV, O_KVWIN, O_KVSINK, O_KVROT, O_KVSCALE, O_KVLAYERS, O_IMAGE, O_AUDIO, O_IMGMIN,
    O_IMGMAX, O_NOPERF, O_OUT, O_TOP, O_TEXT, O_CHUNK, O_JSON, O_MAXTEXT, O_MAXAUDIO, O_MAXPIX, O_COMPARE, O_BATCH,
    O_FITKV, O_FILL, O_RANDOM, O_CSV, O_PNG, O_PNGSIZE, O_KVMEM, O_BWMIB, O_REPORT, O_BASELINE, O_DEVNAME, O_HOST,
    O_PORT, O_APIKEY,
    O_ALIAS, O_MAXSEQS, O_MAXQUEUE, O_MAXTOKENS, O_MAXBODY, O_TIMEOUT, O_ALLOWFILES, O_KVA, O_KVB, O_SCRIPT,
    O_SCREENSHOT, O_FONT, O_SIZE,
} opt_id;

typedef struct {
    opt_id id;
    const char *names[3]; /* spellings; the first is shown in help */
    const char *meta;     /* value name, NULL for a flag */
    unsigned group;
    const char *help;
} opt_info;

static const opt_info g_opts[] = {
    {O_MODEL, {"-m", "--model"}, "MODEL", G_MODEL, "model directory, models--Org--Name cache dir, or Org/Name[@REV]"},
    {O_VERBOSE, {"-v", "--verbose"}, NULL, G_MODEL, "more logs on stderr (also library messages)"},
    {O_HELP, {"-h", "--help"}, NULL, G_ALL, "this help"},
    {O_THREADS, {"-t", "--threads"}, "N", G_RUN, "CPU threads"},
    {O_DEVICE, {"--device"}, "cpu|cuda", G_DEVICE, "where to run (default: cuda when a GPU is present and the KV format runs "
                                                   "there, else cpu)"},
    {O_PROMPT, {"-p", "--prompt"}, "TEXT", G_PROMPT, "prompt text"},
    {O_FILE, {"-f", "--file"}, "FILE", G_PROMPT, "read the prompt from FILE (- = standard input)"},
    {O_SYSTEM, {"--system", "-sys"}, "TEXT", G_SYSTEM, "system message"},
    {O_RAW, {"--raw"}, NULL, G_RAW, "no chat template: the prompt is fed as it is"},
    {O_NPREDICT, {"-n", "--n-predict"}, "N", G_NPRED, "tokens to generate (-1 = until EOS or the context is full)"},
    {O_TEMP, {"--temp"}, "T", G_SAMPLE, "temperature (0 = greedy)"},
    {O_TOPK, {"--top-k"}, "K", G_SAMPLE, "top-k (0 = off)"},
    {O_TOPP, {"--top-p"}, "P", G_SAMPLE, "top-p, 0..1 (1 = off, 0 = only the most likely token)"},
    {O_SEED, {"-s", "--seed"}, "S", G_SEED, "RNG seed, 0..2^64-1 (default 0; -1 = a random seed, printed)"},
    {O_CTX, {"-c", "--ctx-size", "--ctx"}, "N", G_CTX, "KV capacity in tokens, a hard cap on prompt + answer (default 4096)"},
    {O_CTXLIST, {"--ctx"}, "LIST", G_BENCH, "contexts, e.g. 4K,32K,128K (4K = 4096)"},
    {O_KV, {"--kv"}, "MODE", G_KVMODE, "KV cache format: f32 (CPU default), bf16, int2, int4, kivi2, kivi4, k4v2 ..."},
    {O_KVWIN, {"--kv-window"}, "R", G_KV, "recent tokens kept unquantized: 0..256, a multiple of 32 (default 128)"},
    {O_KVSINK, {"--kv-sink"}, "N", G_KV, "first N tokens kept in BF16: 0..32"},
    {O_KVROT, {"--kv-rotate"}, "on|off", G_KV, "Hadamard rotation of quantized keys"},
    {O_KVSCALE, {"--kv-scale"}, "on|off", G_KV, "per-token scaling of quantized keys"},
    {O_KVLAYERS, {"--kv-layers"}, "SPEC", G_KVLAYERS, "per-layer formats, e.g. 0-3:int4,27:bf16 (each layer once)"},
    {O_IMAGE, {"--image"}, "FILE", G_IMAGE, "image input (repeatable): PNG, JPEG, BMP, GIF, PNM, TGA"},
    {O_AUDIO, {"--audio"}, "FILE", G_AUDIO, "audio input (repeatable): WAV, FLAC, Ogg, Opus, MP3, m4a, ..."},
    {O_IMGMIN, {"--image-min-tokens"}, "N", G_BUDGET, "fewest visual tokens per image"},
    {O_IMGMAX, {"--image-max-tokens"}, "N", G_BUDGET, "most visual tokens per image"},
    {O_NOPERF, {"--no-perf"}, NULL, G_PERF, "no timing block on stderr"},
    {O_OUT, {"-o", "--output"}, "FILE", G_LOGITS, "write the logits (little-endian float32) to FILE"},
    {O_TOP, {"--top"}, "N", G_LOGITS, "print the N best as 'id logit' lines"},
    {O_TEXT, {"--text"}, "FILE", G_EVAL, "the text to feed (- = standard input)"},
    {O_CHUNK, {"--chunk"}, "N", G_EVAL, "tokens fed at a time (default 1)"},
    {O_JSON, {"--json"}, NULL, G_EVAL, "one JSON object on stdout"},
    {O_MAXTEXT, {"--max-text-bytes"}, "N", G_TEXTLIM, "largest prompt/text input in bytes (default 16 MiB)"},
    {O_MAXAUDIO, {"--max-audio-seconds"}, "S", G_AUDLIM, "longest audio file, from its header (default 3600; serve 1200)"},
    {O_MAXPIX, {"--max-image-mpixels"}, "MP", G_IMGLIM, "largest image in million pixels, from its header (default 134; serve 64)"},
    {O_COMPARE, {"--compare"}, "MODE", G_COMPARE, "also answer with a MODE KV cache and compare (KV bytes, KL, top-1)"},
    {O_BATCH, {"--batch"}, "LIST", G_BENCH, "batch sizes, e.g. 1,8,48"},
    {O_FITKV, {"--fits-kv"}, "LIST", G_BENCH, "more KV formats whose sequences that fit are counted (no speed points)"},
    {O_FILL, {"--fill-above"}, "N", G_BENCH, "contexts above N tokens: random K/V, no prefill (decode only)"},
    {O_RANDOM, {"--random"}, "CONFIG", G_BENCH, "random weights with the shapes of a real config.json"},
    {O_CSV, {"--csv"}, "FILE", G_BENCH, "write the results as CSV"},
    {O_PNG, {"--png"}, "FILE", G_BENCH, "write the chart as PNG"},
    {O_PNGSIZE, {"--png-size"}, "WxH", G_BENCH, "chart size in pixels (64..16384 each)"},
    {O_KVMEM, {"--kv-mem"}, "GiB", G_KVMEM,
     "KV memory budget (bench: default 4; serve: room for --max-seqs sequences of -c tokens)"},
    {O_BWMIB, {"--bw-mib"}, "N", G_BENCH, "buffer of the memory-copy bandwidth measurement (MiB)"},
    {O_REPORT, {"--report"}, "FILE", G_BENCH, "write REPORT.md"},
    {O_BASELINE, {"--baseline"}, "FILE", G_BENCH, "transformers baseline CSV (bench/hf_generate.py)"},
    {O_DEVNAME, {"--device-name"}, "TEXT", G_BENCH, "device name shown in the report"},
    {O_HOST, {"--host"}, "H", G_SERVE, "address to listen on (default 127.0.0.1)"},
    {O_PORT, {"--port"}, "N", G_SERVE, "port (default 8080)"},
    {O_APIKEY, {"--api-key"}, "K", G_SERVE, "required bearer key (or $OMNI_API_KEY)"},
    {O_ALIAS, {"--alias"}, "NAME", G_SERVE, "model id shown to clients"},
    {O_MAXSEQS, {"--max-seqs"}, "N", G_SERVE, "sequences run at once (default 8)"},
    {O_MAXQUEUE, {"--max-queue"}, "N", G_SERVE, "requests waiting before 503 (default 64)"},
    {O_MAXTOKENS, {"--max-tokens"}, "N", G_SERVE, "largest max_tokens of a request (default 2048)"},
    {O_MAXBODY, {"--max-body"}, "MiB", G_SERVE, "largest request body (default 64)"},
    {O_TIMEOUT, {"--timeout"}, "S", G_SERVE, "request timeout in seconds (default 600)"},
    {O_ALLOWFILES, {"--allow-files"}, NULL, G_SERVE, "let requests name local image files"},
    {O_KVA, {"--kv-a"}, "MODE", G_DEMO, "KV format of pane A (default bf16)"},
    {O_KVB, {"--kv-b"}, "MODE", G_DEMO, "KV format of pane B (default int2)"},
    {O_SCRIPT, {"--script"}, "FILE", G_DEMO, "drive the window with a script, headless without a display"},
    {O_SCREENSHOT, {"--screenshot"}, "FILE", G_DEMO, "save the window as PNG at the end of the script"},
    {O_FONT, {"--font"}, "FILE[:i]", G_DEMO, "a font tried before DejaVu Sans and the CJK fallbacks"},
    {O_SIZE, {"--size"}, "WxH", G_DEMO, "window size in pixels (default 1280x800)"},
};
#define N_OPTS (int)(sizeof g_opts / sizeof g_opts[0])

static const cmd_info *find_cmd(const char *name) {
    for (size_t i = 0; name && i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (!strcmp(g_cmds[i].name, name)) return &g_cmds[i];
    return NULL;
}

int omni_args_known_command(const char *cmd) { return find_cmd(cmd) != NULL; }

/* The option spelled name[0..len): the one the command `c` uses when two share a spelling (--ctx is bench's list
 * and the others' -c), else the first (NULL c: any command). */
static const opt_info *find_opt(const cmd_info *c, const char *name, size_t len) {
    const opt_info *first = NULL;
    for (int i = 0; i < N_OPTS; i++)
        for (int k = 0; k < 3 && g_opts[i].names[k]; k++)
            if (strlen(g_opts[i].names[k]) == len && !strncmp(g_opts[i].names[k], name, len)) {
                if (!c || (c->groups & g_opts[i].group)) return &g_opts[i];
                if (!first) first = &g_opts[i];
            }
    return first;
}

void omni_args_defaults(omni_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 256;
    a->temp = 0.7f;
    a->top_k = 20;
    a->top_p = 0.8f;
    a->ctx = 4096;
    a->device = NULL; /* auto: cuda when a GPU is present (and the KV format runs there), else cpu */
    a->kv = "f32";
    a->kv_window = a->kv_sink = a->kv_rotate = a->kv_scale = -1;
    a->top_n = 0;
    a->max_text_bytes = OMNI_DEFAULT_MAX_TEXT_BYTES;
    a->max_audio_s = OMNI_DEFAULT_MAX_AUDIO_SECONDS;
}

void omni_args_free(omni_args *a) {
    if (!a) return;
    free(a->owned_prompt);
    a->owned_prompt = NULL;
}

/* ---- values -------------------------------------------------------------------------------------------------- */

static omni_status to_i64(const char *s, const char *opt, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not an integer in [%lld, %lld]", opt, s, (long long)lo,
                         (long long)hi);
    *out = v;
    return OMNI_OK;
}

static omni_status to_int(const char *s, const char *opt, int lo, int hi, int *out) {
    int64_t v;
    omni_status st = to_i64(s, opt, lo, hi, &v);
    if (!st) *out = (int)v;
    return st;
}

static omni_status to_double(const char *s, const char *opt, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi))
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    *out = v;
    return OMNI_OK;
}

static omni_status to_float(const char *s, const char *opt, float lo, float hi, float *out) {
    double v;
    omni_status st = to_double(s, opt, lo, hi, &v);
    if (!st) *out = (float)v;
    return st;
}

static omni_status to_size(const char *s, const char *opt, int *w, int *h) {
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10), b = 0;
    if (!errno && end != s && *end == 'x') {
        const char *p = end + 1;
        b = strtol(p, &end, 10);
        if (end == p) b = 0;
    }
    if (errno || *end || a < 64 || a > 16384 || b < 64 || b > 16384)
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not WIDTHxHEIGHT (64..16384 pixels each)", opt, s);
    *w = (int)a;
    *h = (int)b;
    return OMNI_OK;
}

/* -s: 0..2^64-1, or -1 for a seed drawn now (printed once parsing succeeded, llama.cpp's -1). */
static omni_status to_seed(omni_args *a, const char *s, const char *opt) {
    a->seed_set = 1;
    if (!strcmp(s, "-1")) {
        uint64_t v = 0;
        if (getentropy(&v, sizeof v) != 0) v = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
        a->seed = v;
        a->seed_random = 1;
        return OMNI_OK;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || s[0] < '0' || s[0] > '9')
        return omni_fail(OMNI_ERR_USAGE, "%s: '%s' is not a seed (an integer in [0, 18446744073709551615], or -1 for "
                         "a random one)", opt, s);
    a->seed = (uint64_t)v;
    a->seed_random = 0;
    return OMNI_OK;
}

static omni_status on_off(const char *s, const char *opt, int *out) {
    if (!strcmp(s, "on") || !strcmp(s, "1")) *out = 1;
    else if (!strcmp(s, "off") || !strcmp(s, "0")) *out = 0;
    else return omni_fail(OMNI_ERR_USAGE, "%s: expected on or off, got '%s'", opt, s);
    return OMNI_OK;
}

static omni_status add_item(const char **list, int *n, const char *v, const char *what) {
    if (*n >= OMNI_MAX_MEDIA) return omni_fail(OMNI_ERR_USAGE, "too many %s (max %d)", what, OMNI_MAX_MEDIA);
    list[(*n)++] = v;
    return OMNI_OK;
}

static omni_status kv_window(const char *v, const char *o, int *out) {
    omni_status st = to_int(v, o, 0, 256, out);
    if (!st && *out % 32) st = omni_fail(OMNI_ERR_USAGE, "%s: %d is not a multiple of 32 (allowed: 0, 32, ..., 256)", o, *out);
    return st;
}

/* Options that carry the user's text or name a text input: a second one would silently replace the first. */
static omni_status set_once(const char **slot, const char *name, const char *v) {
    if (*slot)
        return omni_fail(OMNI_ERR_USAGE, "%s is given twice ('%.60s' and '%.60s'); give it once%s", name, *slot, v,
                         !strcmp(name, "-p") ? " (the words after the options are added to its text)" : "");
    *slot = v;
    return OMNI_OK;
}

/* Options whose value names a file (or the model): an empty one is a usage error, not a file "" to look for. */
static int names_file(opt_id id) {
    static const opt_id ids[] = {O_MODEL, O_FILE, O_OUT, O_TEXT, O_IMAGE, O_AUDIO, O_RANDOM, O_CSV, O_PNG, O_REPORT,
                                 O_BASELINE, O_SCRIPT, O_SCREENSHOT, O_FONT};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* Store the value of option `o` (spelled `name`). */
static omni_status set_value(omni_args *a, const opt_info *o, const char *name, const char *v) {
    if (!v[0] && names_file(o->id))
        return omni_fail(OMNI_ERR_USAGE, "%s: empty %s name", name, o->id == O_MODEL ? "model" : "file");
    switch (o->id) {
    case O_MODEL: a->model = v; return OMNI_OK;
    case O_DEVICE:
        if (strcmp(v, "cpu") && strcmp(v, "cuda"))
            return omni_fail(OMNI_ERR_USAGE, "%s: expected cpu or cuda, got '%s'", name, v);
        a->device = v;
        return OMNI_OK;
    case O_THREADS: return to_int(v, name, 1, 1024, &a->threads);
    case O_PROMPT: return set_once(&a->prompt, name, v);
    case O_FILE: return set_once(&a->prompt_file, name, v);
    case O_SYSTEM: return set_once(&a->system, name, v);
    case O_NPREDICT: return to_int(v, name, -1, 1 << 30, &a->n_predict);
    case O_TEMP: return to_float(v, name, 0.f, 100.f, &a->temp);
    case O_TOPK: return to_int(v, name, 0, 1 << 30, &a->top_k);
    case O_TOPP: return to_float(v, name, 0.f, 1.f, &a->top_p);
    case O_SEED: return to_seed(a, v, name);
    case O_CTX: a->ctx_set = 1; return to_int(v, name, 1, 1 << 24, &a->ctx);
    case O_CTXLIST: a->ctx_list = v; return OMNI_OK;
    case O_KV: a->kv_set = 1; a->kv = v; return OMNI_OK;
    case O_KVWIN: return kv_window(v, name, &a->kv_window);
    case O_KVSINK: return to_int(v, name, 0, 32, &a->kv_sink);
    case O_KVROT: return on_off(v, name, &a->kv_rotate);
    case O_KVSCALE: return on_off(v, name, &a->kv_scale);
    case O_KVLAYERS: a->kv_layers = v; return OMNI_OK;
    case O_IMAGE: return add_item(a->images, &a->n_images, v, "images");
    case O_AUDIO: return add_item(a->audios, &a->n_audios, v, "audio files");
    case O_IMGMIN: a->image_budget_preferred = 0; return to_int(v, name, 1, 1 << 20, &a->image_min_tokens);
    case O_IMGMAX: a->image_budget_preferred = 0; return to_int(v, name, 1, 1 << 20, &a->image_max_tokens);
    case O_OUT: a->out = v; return OMNI_OK;
    case O_TOP: return to_int(v, name, 1, 1 << 24, &a->top_n);
    case O_TEXT: return set_once(&a->text_file, name, v);
    case O_CHUNK: return to_int(v, name, 1, 1 << 16, &a->chunk);
    case O_MAXTEXT: return to_i64(v, name, 1, (int64_t)1 << 40, &a->max_text_bytes);
    case O_MAXAUDIO: return to_double(v, name, 0.01, 1e6, &a->max_audio_s);
    case O_MAXPIX: return to_double(v, name, 1e-6, 1e5, &a->max_image_mpix);
    case O_COMPARE: a->compare = v; return OMNI_OK;
    case O_BATCH: a->batch_list = v; return OMNI_OK;
    case O_FITKV: a->fits_kv = v; return OMNI_OK;
    case O_FILL: a->fill_above = v; return OMNI_OK;
    case O_RANDOM: a->random_config = v; return OMNI_OK;
    case O_CSV: a->csv = v; return OMNI_OK;
    case O_PNG: a->png = v; return OMNI_OK;
    case O_PNGSIZE: return to_size(v, name, &a->png_w, &a->png_h);
    case O_KVMEM: return to_double(v, name, 1e-6, 1e6, &a->kv_mem_gib);
    case O_BWMIB: return to_int(v, name, 1, 1 << 16, &a->bw_mib);
    case O_REPORT: a->report = v; return OMNI_OK;
    case O_BASELINE: a->baseline = v; return OMNI_OK;
    case O_DEVNAME: a->device_name = v; return OMNI_OK;
    case O_HOST: a->host = v; return OMNI_OK;
    case O_PORT: return to_int(v, name, 0, 65535, &a->port);
    case O_APIKEY: /* --api-key "$UNSET_VAR" must not open the server to everyone */
        if (!v[0]) return omni_fail(OMNI_ERR_USAGE, "%s: the key is empty (the server would take every request)", name);
        a->api_key = v;
        return OMNI_OK;
    case O_ALIAS: a->alias = v; return OMNI_OK;
    case O_MAXSEQS: return to_int(v, name, 1, 1024, &a->max_seqs);
    case O_MAXQUEUE: return to_int(v, name, 0, 1 << 20, &a->max_queue);
    case O_MAXTOKENS: return to_int(v, name, 1, 1 << 24, &a->max_tokens);
    case O_MAXBODY: return to_double(v, name, 1.0 / 1024, 4096, &a->max_body_mib);
    case O_TIMEOUT: return to_double(v, name, 0.01, 1e7, &a->timeout_s);
    case O_KVA: a->kv_a = v; return OMNI_OK;
    case O_KVB: a->kv_b = v; return OMNI_OK;
    case O_SCRIPT: a->script = v; return OMNI_OK;
    case O_SCREENSHOT: a->screenshot = v; return OMNI_OK;
    case O_FONT: a->font = v; return OMNI_OK;
    case O_SIZE: return to_size(v, name, &a->win_w, &a->win_h);
    default: return omni_fail(OMNI_ERR_USAGE, "internal: option %s has no value handler", name);
    }
}

static void set_flag(omni_args *a, const opt_info *o) {
    switch (o->id) {
    case O_VERBOSE: a->verbose = 1; break;
    case O_HELP: a->help = 1; break;
    case O_RAW: a->raw = 1; break;
    case O_NOPERF: a->no_perf = 1; break;
    case O_JSON: a->json = 1; break;
    case O_ALLOWFILES: a->allow_files = 1; break;
    default: break;
    }
}

/* ---- parsing ------------------------------------------------------------------------------------------------- */

/* The joined prompt: "-p TEXT" first, then the words, separated by spaces (one allocation: 10^5 words took seconds
 * when joined one at a time). */
static omni_status join_words(omni_args *a, const char **words, int n_words) {
    const char *base = a->prompt ? a->prompt : "";
    size_t len = strlen(base) + 1;
    for (int k = 0; k < n_words; k++) len += strlen(words[k]) + 1;
    char *s = malloc(len), *p = s;
    if (!s) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    p = stpcpy(p, base);
    for (int k = 0; k < n_words; k++) {
        if (p != s) *p++ = ' ';
        p = stpcpy(p, words[k]);
    }
    free(a->owned_prompt);
    a->owned_prompt = s;
    a->prompt = s;
    return OMNI_OK;
}

/* One word that is not an option. Prompt words are kept in order and joined after parsing (-p may come later). */
static omni_status positional(omni_args *a, const cmd_info *c, const char *w, const char **words, int *n_words,
                              int max_words) {
    if (c && c->pos == POS_PROMPT) {
        if (*n_words >= max_words) return omni_fail(OMNI_ERR_USAGE, "too many words on the command line");
        words[(*n_words)++] = w;
        return OMNI_OK;
    }
    if (c && c->pos == POS_NONE)
        return omni_fail(OMNI_ERR_USAGE, "unexpected argument '%s' (omni %s takes no words; see omni %s --help)", w,
                         c->name, c->name);
    return add_item(a->positional, &a->n_positional, w, "arguments");
}

/* Is `arg` an option (and not a negative number or "-")? */
static int is_option(const char *arg) { return arg[0] == '-' && arg[1] && !(arg[1] >= '0' && arg[1] <= '9'); }

static omni_status parse_one(omni_args *a, const cmd_info *c, int argc, char **argv, int *i) {
    const char *arg = argv[*i], *eq = NULL;
    size_t len = strlen(arg);
    if (arg[0] == '-' && arg[1] == '-' && (eq = strchr(arg, '='))) len = (size_t)(eq - arg);
    const opt_info *o = find_opt(c, arg, len);
    if (!o) return omni_fail(OMNI_ERR_USAGE, "unknown option: %.*s (see omni %s%s--help)", (int)len, arg,
                             c ? c->name : "", c ? " " : "");
    const char *name = o->names[0];
    if (c && !(c->groups & o->group))
        return omni_fail(OMNI_ERR_USAGE, "omni %s does not use %.*s (see omni %s --help)", c->name, (int)len, arg,
                         c->name);
    if (!o->meta) {
        if (eq) return omni_fail(OMNI_ERR_USAGE, "option %s takes no value", name);
        set_flag(a, o);
        return OMNI_OK;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
        if (*i + 1 >= argc) return omni_fail(OMNI_ERR_USAGE, "option %s needs a value (%s)", name, o->meta);
        v = argv[++*i];
    }
    return set_value(a, o, name, v);
}

/* Image budget: a bound given alone moves the other (a command default) when they would cross. */
static omni_status image_budget(omni_args *a, int min_given, int max_given) {
    if (min_given && max_given && a->image_min_tokens > a->image_max_tokens)
        return omni_fail(OMNI_ERR_USAGE, "--image-min-tokens %d is above --image-max-tokens %d", a->image_min_tokens,
                         a->image_max_tokens);
    if (max_given && !min_given && a->image_min_tokens > a->image_max_tokens) a->image_min_tokens = a->image_max_tokens;
    if (min_given && !max_given && a->image_max_tokens > 0 && a->image_max_tokens < a->image_min_tokens)
        a->image_max_tokens = a->image_min_tokens;
    return OMNI_OK;
}

/* The KV formats named on the command line (--kv, --kv-layers, --compare, --kv-a, --kv-b) are checked now, not
 * after the model has loaded and the media are encoded. bench's --kv is a list (cmd_bench.c checks it); the layer
 * numbers of --kv-layers are checked against the model once it is loaded. */
static omni_status check_kv(const omni_args *a, const cmd_info *c) {
    if (!strcmp(c->name, "bench")) return OMNI_OK;
    const char *names[] = {"--kv", "--compare", "--kv-a", "--kv-b"};
    const char *modes[] = {a->kv_set ? a->kv : NULL, a->compare, a->kv_a, a->kv_b};
    kv_format f;
    for (int i = 0; i < 4; i++)
        if (modes[i] && kv_parse_mode(modes[i], &f))
            return omni_fail(OMNI_ERR_USAGE, "%s: %s", names[i], omni_last_error());
    if (!a->kv_layers) return OMNI_OK;
    enum { MAX_LAYERS = 1024 }; /* the most kv_parse_layer_overrides takes */
    kv_format *layers = malloc(sizeof *layers * MAX_LAYERS);
    if (!layers) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    kv_parse_mode("f32", &f);
    omni_status st = kv_parse_layer_overrides(a->kv_layers, &f, MAX_LAYERS, layers);
    free(layers);
    if (st && !strstr(omni_last_error(), "out of range")) /* a layer range: against the model, once loaded */
        return omni_fail(st, "--kv-layers: %s", omni_last_error());
    return OMNI_OK;
}

/* Combinations that cannot mean what the user wants: fail, or warn when the result is still well defined. */
static omni_status check_combination(omni_args *a, const cmd_info *c, const char **words, int n_words) {
    if (a->prompt && a->prompt_file)
        return omni_fail(OMNI_ERR_USAGE, "give the prompt with -p or with -f, not both");
    if (n_words && a->prompt_file)
        return omni_fail(OMNI_ERR_USAGE, "unexpected argument '%s' (the prompt comes from -f %s)", words[0],
                         a->prompt_file);
    omni_status st = n_words ? join_words(a, words, n_words) : OMNI_OK;
    if (!st) st = check_kv(a, c);
    if (st) return st;
    if (a->raw && a->system) fprintf(stderr, "warning: --system has no effect with --raw (the prompt is used as it is)\n");
    if (c->pos == POS_SUBCOMMAND) {
        if (a->n_positional < 1 || strcmp(a->positional[0], "kl"))
            return omni_fail(OMNI_ERR_USAGE, "usage: omni %s %s", c->name, c->synopsis);
        if (a->n_positional > 1)
            return omni_fail(OMNI_ERR_USAGE, "unexpected argument '%s' (see omni %s --help)", a->positional[1], c->name);
        if (!a->kv_set)
            return omni_fail(OMNI_ERR_USAGE, "eval kl: --kv MODE is required (the cache format compared with bf16)");
        if (!a->text_file) return omni_fail(OMNI_ERR_USAGE, "eval kl: --text FILE is required");
    }
    return OMNI_OK;
}

omni_status omni_args_parse(omni_args *a, const char *cmd, int argc, char **argv, int first) {
    const cmd_info *c = find_cmd(cmd); /* NULL: a command not in the table accepts every option */
    for (int i = first; i < argc; i++) { /* -h anywhere asks for help, but not as an option's value (-p -h) */
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            a->help = 1;
            return OMNI_OK;
        }
        if (is_option(argv[i]) && !strchr(argv[i], '=')) {
            const opt_info *o = find_opt(c, argv[i], strlen(argv[i]));
            if (o && o->meta) i++;
        }
    }
    const char **words = calloc((size_t)argc + 1, sizeof *words);
    if (!words) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int n_words = 0, min_given = 0, max_given = 0, options_done = 0;
    omni_status st = OMNI_OK;
    for (int i = first; !st && i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && !strcmp(arg, "--")) options_done = 1;
        else if (!options_done && is_option(arg)) {
            min_given |= !strncmp(arg, "--image-min-tokens", 18);
            max_given |= !strncmp(arg, "--image-max-tokens", 18);
            st = parse_one(a, c, argc, argv, &i);
        } else st = positional(a, c, arg, words, &n_words, argc);
    }
    if (!st) st = image_budget(a, min_given, max_given); /* also for a command outside the table */
    if (!st && c) st = check_combination(a, c, words, n_words);
    if (!st && !c) /* unknown to the table: keep words as positionals */
        for (int k = 0; !st && k < n_words; k++) st = add_item(a->positional, &a->n_positional, words[k], "arguments");
    free(words);
    if (!st && a->seed_random) fprintf(stderr, "seed: %llu (-s -1: drawn at random)\n", (unsigned long long)a->seed);
    return st;
}

/* ---- help ---------------------------------------------------------------------------------------------------- */

/* " (default X)" for the sampling options, from the command's own defaults (ocr: greedy, ask: Qwen3-Omni's). */
static void default_note(const opt_info *o, const omni_args *d, char *buf, size_t cap) {
    buf[0] = 0;
    if (!d) return;
    if (o->id == O_NPREDICT) snprintf(buf, cap, " (default %d)", d->n_predict);
    else if (o->id == O_TEMP) snprintf(buf, cap, " (default %g)", d->temp);
    else if (o->id == O_TOPK) snprintf(buf, cap, " (default %d)", d->top_k);
    else if (o->id == O_TOPP) snprintf(buf, cap, " (default %g)", d->top_p);
}

/* The help of an option where a command gives it another meaning (bench measures: its -n, -s and --device). */
static const char *opt_help(const cmd_info *c, const opt_info *o) {
    if (strcmp(c->name, "bench")) return o->help;
    if (o->id == O_DEVICE) return "where to run (default cpu)";
    if (o->id == O_NPREDICT) return "decode steps timed per point, 1..100000";
    if (o->id == O_SEED) return "seed of --random's weights, 0..2^64-1 (default 0)";
    return o->help;
}

void omni_args_usage(FILE *f, const char *cmd, const omni_args *defaults) {
    const cmd_info *c = find_cmd(cmd);
    if (!c) return;
    fprintf(f, "usage: omni %s %s\n\n%s\n", c->name, c->synopsis, c->about);
    if (!strcmp(c->name, "chat"))
        fprintf(f, "\nat the > prompt:\n"
                   "  /image FILE      attach an image to the next message (checked now)\n"
                   "  /audio FILE      attach an audio file to the next message (checked now)\n"
                   "  /clear           forget the history (and pending attachments)\n"
                   "  /help            this list\n"
                   "  /quit or /exit   leave (also Ctrl+D)\n"
                   "  Ctrl+C           stop the current answer; the history is kept (at the prompt: leave, 130)\n"
                   "A message is one line (at most %d bytes).\n", 1 << 20);
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < N_OPTS; i++) {
        const opt_info *o = &g_opts[i];
        if (!(c->groups & o->group)) continue;
        char names[64];
        snprintf(names, sizeof names, "%s%s%s%s%s", o->names[0], o->names[1] ? ", " : "", o->names[1] ? o->names[1] : "",
                 o->meta ? " " : "", o->meta ? o->meta : "");
        char note[64];
        default_note(o, defaults, note, sizeof note);
        fprintf(f, "  %-26s %s%s\n", names, opt_help(c, o), note);
    }
    fprintf(f, "\nexit codes: 0 ok, 1 usage, 2 bad input file, 3 bad/unsupported model, 4 runtime error, 130 interrupted\n");
}
