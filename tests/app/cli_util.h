/* cli_util.h - helpers for tests that run the omni binary: run a command line capturing exit code, stdout and
 * stderr into files, read files back, copy fixture dirs, rewrite safetensors headers. */
#ifndef OMNI_TEST_CLI_UTIL_H
#define OMNI_TEST_CLI_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kernels/status.h" /* omni_read_file */

typedef struct {
    int code;      /* exit code (-1 if it did not exit normally, e.g. crashed) */
    char *out;     /* stdout (malloc'ed) */
    char *err;     /* stderr (malloc'ed) */
} cli_result;

/* Run `OMNI_BIN <args>` through /bin/sh with stdin from /dev/null. */
cli_result cli_run(const char *fmt, ...);
/* The same with `prefix` before the binary (env settings, `timeout -s KILL 60` for runs that could hang or eat
 * memory if a bug came back, a wrapper such as ld.so). */
cli_result cli_run_prefix(const char *prefix, const char *fmt, ...);
void cli_free(cli_result *r);
int cli_lines(const char *s); /* number of non-empty lines */

int write_all(const char *path, const void *data, size_t len);
/* A fresh temp dir (mkdtemp under /tmp); returns a static-lifetime malloc'ed path. */
char *make_tmpdir(void);
/* Compare two little-endian f32 logits files: returns 0 and fills max|got-ref|/max|ref| and both argmaxes, or -1
 * when a file is missing or the sizes differ. */
typedef struct {
    int n;
    float rel;
    int argmax_got, argmax_ref;
} logits_cmp;
int compare_logits_files(const char *got_path, const char *ref_path, logits_cmp *out);

/* Copy the model directory `src` into `dst` (created). */
int copy_dir(const char *src, const char *dst);
/* Parse the header of a safetensors file, let `edit` change it, and write the file back with the same data. */
int rewrite_header(const char *path, void (*edit)(cJSON *hdr, void *ctx), void *ctx);

#endif
