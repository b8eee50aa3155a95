/* args.h - command-line options shared by the omni commands (llama.cpp flag vocabulary). */
#ifndef OMNI_APP_ARGS_H
#define OMNI_APP_ARGS_H

#include <stdint.h>

#include "kernels/status.h"

#define OMNI_MAX_MEDIA 16

typedef struct {
    const char *model;      /* -m */
    const char *prompt;     /* -p, or positional */
    const char *prompt_file;/* -f */
    const char *system;     /* --system */
    const char *out;        /* -o (logits) */
    const char *device;     /* --device cpu|cuda; NULL: cuda when a GPU is present, else cpu */
    const char *kv;         /* --kv MODE */
    const char *kv_layers;  /* --kv-layers SPEC */
    const char *text_file;  /* --text (eval) */
    const char *compare;    /* --compare MODE (generate): a second answer on a cache of this format */
    int kv_window, kv_sink, kv_rotate, kv_scale; /* -1 = mode default */
    int n_predict;          /* -n (-1 = until EOS or context end) */
    float temp, top_p;
    int top_k;
    uint64_t seed;
    int seed_set;
    int raw;                /* --raw: no chat template */
    int ctx;                /* -c */
    int ctx_set;            /* -c was given */
    int chunk;              /* --chunk (eval) */
    int threads;            /* -t */
    int top_n;              /* --top N (logits) */
    int json;               /* --json */
    int no_perf, verbose;
    int image_min_tokens, image_max_tokens;
    int image_budget_preferred; /* set by a command's defaults (ocr); cleared by --image-*-tokens */
    const char *images[OMNI_MAX_MEDIA];
    int n_images;
    const char *audios[OMNI_MAX_MEDIA];
    int n_audios;
    const char *positional[OMNI_MAX_MEDIA];
    int n_positional;
    /* omni bench */
    int lists;              /* set by the command's defaults: --ctx takes a list (ctx_list) instead of -c's number */
    const char *ctx_list;   /* --ctx 4K,32K,128K */
    const char *batch_list; /* --batch 1,8,48 */
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
    double max_body_mib, timeout_s, max_audio_s; /* --max-body MiB, --timeout s, --max-audio-seconds s */
    double max_image_mpix;  /* --max-image-mpixels (million pixels) */
} omni_args;

/* Defaults: temp 0.7 top-k 20 top-p 0.8 (Qwen3-VL Instruct recommendation), -n 256, -c 4096, kv f32. */
void omni_args_defaults(omni_args *a);
/* Parse argv[first..argc). Unknown options are an error (OMNI_ERR_USAGE, message names the option). */
omni_status omni_args_parse(omni_args *a, int argc, char **argv, int first);

#endif
