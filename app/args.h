/* args.h - command-line options of the omni commands (llama.cpp flag vocabulary).
 *
 * One table describes every option: its names, whether it takes a value, the commands that use it and a help
 * line. Parsing is strict: an unknown option, an option the command does not use, a bad value, or a stray word a
 * command cannot use is a usage error naming it; `--opt=value` and `--opt value` are the same; `--` ends the
 * options. `-h`/`--help` after a command asks for that command's help. Words after the options form the prompt
 * of the commands that take one (generate, ask, logits, tokenize: joined with spaces, after -p's text if given),
 * are the images of `ocr`, the subcommand of `eval`. */
#ifndef OMNI_APP_ARGS_H
#define OMNI_APP_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/status.h"

#define OMNI_MAX_MEDIA 16

/* Default limits (README "Limits"). */
#define OMNI_DEFAULT_MAX_TEXT_BYTES ((int64_t)16 << 20) /* -p / -f / --text / stdin */
#define OMNI_DEFAULT_MAX_AUDIO_SECONDS 3600.0           /* per audio file, from its header */

typedef struct {
    const char *model;      /* -m */
    const char *prompt;     /* -p, or the positional words (joined) */
    const char *prompt_file;/* -f ("-" = stdin) */
    const char *system;     /* --system */
    const char *out;        /* -o (logits) */
    const char *device;     /* --device cpu|cuda; NULL: cuda when a GPU is present, else cpu */
    const char *kv;         /* --kv MODE */
    const char *kv_layers;  /* --kv-layers SPEC */
    const char *text_file;  /* --text (eval) */
    const char *compare;    /* --compare MODE (generate): a second answer on a cache of this format */
    int kv_window, kv_sink, kv_rotate, kv_scale; /* -1 = mode default */
    int kv_set;             /* --kv was given */
    int n_predict;          /* -n (-1 = until EOS or context end) */
    float temp, top_p;
    int top_k;
    uint64_t seed;
    int seed_set;
    int seed_random;        /* -s -1: seed drawn at parse time (printed) */
    int raw;                /* --raw: no chat template */
    int ctx;                /* -c */
    int ctx_set;            /* -c was given */
    int chunk;              /* --chunk (eval) */
    int threads;            /* -t */
    int top_n;              /* --top N (logits) */
    int json;               /* --json */
    int no_perf, verbose;
    int help;               /* -h / --help was given: print omni_args_usage and exit 0 */
    int image_min_tokens, image_max_tokens;
    int image_budget_preferred; /* set by a command's defaults (ocr); cleared by --image-*-tokens */
    int64_t max_text_bytes; /* --max-text-bytes */
    double max_audio_s;     /* --max-audio-seconds: longest audio file, from its header */
    double max_image_mpix;  /* --max-image-mpixels: largest image in million pixels (0 = the library default) */
    const char *images[OMNI_MAX_MEDIA];
    int n_images;
    const char *audios[OMNI_MAX_MEDIA];
    int n_audios;
    const char *positional[OMNI_MAX_MEDIA];
    int n_positional;
    char *owned_prompt;     /* storage of a joined prompt (omni_args_free) */
    /* omni bench */
    const char *ctx_list;   /* --ctx 4K,32K,128K (omni bench; the other commands' --ctx is -c) */
    const char *batch_list; /* --batch 1,8,48 */
    const char *fits_kv;    /* --fits-kv int4,int2:w32 (omni bench: formats counted for fits only) */
    const char *fill_above; /* --fill-above 32K (omni bench: longer contexts filled with random K/V) */
    const char *random_config; /* --random CONFIG (config.json of a real model; random weights) */
    const char *csv, *png;  /* --csv FILE, --png FILE */
    int png_w, png_h;       /* --png-size WxH */
    double kv_mem_gib;      /* --kv-mem GiB (0 = command default) */
    int bw_mib;             /* --bw-mib N: memory-copy buffer of the bandwidth measurement */
    const char *report;     /* --report FILE (REPORT.md) */
    const char *baseline;   /* --baseline FILE (bench/hf_generate.py's CSV) */
    const char *device_name;/* --device-name TEXT (shown in the report) */
    const char *command_line; /* set by main: the whole command line (shown in the report) */
    /* omni serve */
    const char *host, *api_key, *alias; /* --host, --api-key, --alias */
    int port, allow_files;  /* --port, --allow-files */
    int max_seqs, max_queue, max_tokens; /* --max-seqs, --max-queue, --max-tokens */
    double max_body_mib, timeout_s; /* --max-body MiB, --timeout s */
    /* omni demo */
    const char *kv_a, *kv_b;  /* --kv-a MODE, --kv-b MODE: the two panes' KV formats */
    const char *script;       /* --script FILE */
    const char *screenshot;   /* --screenshot FILE.png */
    const char *font;         /* --font FILE[:index] */
    int win_w, win_h;         /* --size WxH */
} omni_args;

/* Defaults: temp 0.7 top-k 20 top-p 0.8 (Qwen3-VL Instruct recommendation), -n 256, -c 4096, kv f32, limits. */
void omni_args_defaults(omni_args *a);
/* Parse argv[first..argc) for command `cmd` ("generate", "chat", ...; the command's own defaults already set).
 * Errors are OMNI_ERR_USAGE with a message naming the option or word. Warnings (an option with no effect in this
 * combination, e.g. --system with --raw) go to stderr. With -h/--help, a->help is set and nothing else is
 * checked. */
omni_status omni_args_parse(omni_args *a, const char *cmd, int argc, char **argv, int first);
/* Frees what parsing allocated (the joined prompt); a copy of the struct must not outlive it. */
void omni_args_free(omni_args *a);
/* `omni CMD --help`: synopsis, what it does, the options it takes (and chat's REPL commands); `defaults` (the
 * command's defaults, may be NULL) adds the sampling defaults of this command. */
void omni_args_usage(FILE *f, const char *cmd, const omni_args *defaults);
/* 1 when `cmd` is a command the option table knows. */
int omni_args_known_command(const char *cmd);

#endif
