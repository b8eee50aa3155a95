/* json.h - the one reader of omni's JSON inputs (config.json, generation_config.json, preprocessor_config.json,
 * tokenizer.json, model.safetensors.index.json): bounded reading of regular files only (a FIFO or a device in a
 * model directory is refused, never waited on), parsing that reports where the syntax breaks, and typed,
 * range-checked access to values. Every failure is one line naming the file and the key path, e.g.
 *   "config.json: text_config.hidden_size: 128.5 is not an integer"
 *   "config.json: text_config.rope_theta: -1 is outside [1, 1e+12]". */
#ifndef OMNI_JSON_H
#define OMNI_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest JSON file read (real tokenizer.json files are ~10 MB, configs a few KB). */
#define OMNI_JSON_MAX_BYTES ((size_t)256 << 20)

/* Most values one document may hold (cJSON spends ~64 bytes on each: "[0,0,0,...]" is 32x its size in memory, a
 * 120 MB config.json took 4.8 GB and two minutes). Real model files: tokenizer.json ~1M values, a checkpoint
 * header ~200k. */
#define OMNI_JSON_MAX_VALUES ((int64_t)8 << 20)

/* An upper bound of the values in `len` bytes of JSON text (openers and commas outside strings, + 1), read without
 * parsing: checked against OMNI_JSON_MAX_VALUES before cJSON allocates them. */
int64_t omni_json_count_values(const char *text, size_t len);

/* Read and parse `path` (regular file, at most OMNI_JSON_MAX_BYTES). Failures have status `kind` (the caller's:
 * OMNI_ERR_MODEL for model files), or OMNI_ERR_NOMEM. *out is the parsed document (cJSON_Delete) or NULL. */
omni_status omni_json_load(const char *path, omni_status kind, cJSON **out);
/* Parse `len` bytes; `name` is used in messages ("x.json: invalid JSON near byte 120 (line 4)"). One value only:
 * anything but whitespace after it (a second object, garbage, NUL bytes) is an error, as for Python's json. */
omni_status omni_json_parse(const char *text, size_t len, const char *name, omni_status kind, cJSON **out);
/* Offset of the first byte after a parsed value (`end`, cJSON's parse end) that is not JSON whitespace, or -1. */
int64_t omni_json_trailing(const char *text, size_t len, const char *end);

/* For cJSON calls made directly (a parse failing with NULL): omni_json_watch_memory() before the call, then
 * omni_json_out_of_memory() says whether one of its allocations failed on this thread since (out of memory, not
 * bad input). */
void omni_json_watch_memory(void);
int omni_json_out_of_memory(void);

/* Where the values come from, for messages: file name, key path of the object read ("" or "text_config",
 * "thinker_config.audio_config"), status of a bad value. */
typedef struct {
    const char *file;
    const char *path;
    omni_status kind;
} omni_json_ctx;

enum { OMNI_JSON_OPTIONAL = 0, OMNI_JSON_REQUIRED = 1 };

/* Typed getters on object `o` (NULL: every key absent). An absent key, or a JSON null, leaves *out unchanged and
 * returns OMNI_OK unless `required` ("missing"). A value of the wrong type, a non-integer where an integer is
 * expected, a non-finite number or a value outside [lo, hi] fails with ctx->kind. */
omni_status omni_json_int(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int64_t lo,
                          int64_t hi, int *out);
omni_status omni_json_i64(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int64_t lo,
                          int64_t hi, int64_t *out);
omni_status omni_json_float(const omni_json_ctx *c, const cJSON *o, const char *key, int required, double lo,
                            double hi, float *out);
omni_status omni_json_double(const omni_json_ctx *c, const cJSON *o, const char *key, int required, double lo,
                             double hi, double *out);
omni_status omni_json_bool(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int *out);
/* A string value (borrowed from the document). */
omni_status omni_json_string(const omni_json_ctx *c, const cJSON *o, const char *key, int required,
                             const char **out);
/* An object value (borrowed); absent/null -> *out = NULL when optional. */
omni_status omni_json_object(const omni_json_ctx *c, const cJSON *o, const char *key, int required,
                             const cJSON **out);
/* An array of n integers, min_n <= n <= max_n, each in [lo, hi], into out[max_n]; *n receives the count (left
 * unchanged with out when absent and optional). */
omni_status omni_json_ints(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int min_n,
                           int max_n, int64_t lo, int64_t hi, int *out, int *n);
/* An integer or an array of integers (eos_token_id): same rules as omni_json_ints. */
omni_status omni_json_int_or_ints(const omni_json_ctx *c, const cJSON *o, const char *key, int required,
                                  int min_n, int max_n, int64_t lo, int64_t hi, int *out, int *n);
/* An array of exactly n finite numbers in [lo, hi], or one number used n times (image_mean / image_std). */
omni_status omni_json_floats(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int n,
                             double lo, double hi, float *out);

#ifdef __cplusplus
}
#endif
#endif
