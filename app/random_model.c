/* random_model.c - random bf16 checkpoints of a real config for CPU speed runs, and weightless models of a config
 * for the device's own random weights (see random_model.h). */
#define _DEFAULT_SOURCE
#include "app/random_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kernels/tensor.h"
#include "llm/config.h"

#define MAX_NAME 160

typedef struct {
    char name[MAX_NAME];
    int64_t rows, cols; /* cols 0: a vector */
} tensor_spec;

/* The decoder tensors of a config, in checkpoint order; returns the count (specs may be NULL to count). */
static int64_t list_tensors(const llm_config *c, tensor_spec *t) {
    int64_t n = 0, H = c->hidden, D = c->head_dim, qd = (int64_t)c->n_heads * D, kd = (int64_t)c->n_kv_heads * D;
#define ADD(r, k, ...)                                                                                             \
    do {                                                                                                         \
        if (t) {                                                                                                 \
            snprintf(t[n].name, MAX_NAME, __VA_ARGS__);                                                          \
            t[n].rows = (r), t[n].cols = (k);                                                                    \
        }                                                                                                        \
        n++;                                                                                                     \
    } while (0)
    ADD(c->vocab, H, "%sembed_tokens.weight", c->prefix);
    ADD(H, 0, "%snorm.weight", c->prefix);
    if (!c->tie_word_embeddings) ADD(c->vocab, H, "%s", c->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const char *p = c->prefix;
        ADD(H, 0, "%slayers.%d.input_layernorm.weight", p, l);
        ADD(H, 0, "%slayers.%d.post_attention_layernorm.weight", p, l);
        ADD(qd, H, "%slayers.%d.self_attn.q_proj.weight", p, l);
        ADD(kd, H, "%slayers.%d.self_attn.k_proj.weight", p, l);
        ADD(kd, H, "%slayers.%d.self_attn.v_proj.weight", p, l);
        ADD(H, qd, "%slayers.%d.self_attn.o_proj.weight", p, l);
        ADD(D, 0, "%slayers.%d.self_attn.q_norm.weight", p, l);
        ADD(D, 0, "%slayers.%d.self_attn.k_norm.weight", p, l);
        if (c->n_experts > 0) {
            int64_t I = c->moe_intermediate;
            ADD(c->n_experts, H, "%slayers.%d.mlp.gate.weight", p, l);
            for (int e = 0; e < c->n_experts; e++) {
                ADD(I, H, "%slayers.%d.mlp.experts.%d.gate_proj.weight", p, l, e);
                ADD(I, H, "%slayers.%d.mlp.experts.%d.up_proj.weight", p, l, e);
                ADD(H, I, "%slayers.%d.mlp.experts.%d.down_proj.weight", p, l, e);
            }
        } else {
            ADD(c->intermediate, H, "%slayers.%d.mlp.gate_proj.weight", p, l);
            ADD(c->intermediate, H, "%slayers.%d.mlp.up_proj.weight", p, l);
            ADD(H, c->intermediate, "%slayers.%d.mlp.down_proj.weight", p, l);
        }
    }
#undef ADD
    return n;
}

static int64_t spec_bytes(const tensor_spec *t) { return 2 * t->rows * (t->cols ? t->cols : 1); }

/* Copy the config file (or DIR/config.json) into dir/config.json and parse it from there. */
static omni_status stage_config(const char *config_path, const char *dir, llm_config *cfg) {
    char src[4200], dst[4200];
    struct stat st;
    if (stat(config_path, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(src, sizeof src, "%s/config.json", config_path);
    else snprintf(src, sizeof src, "%s", config_path);
    size_t len;
    char *text = omni_read_file(src, &len);
    if (!text) return omni_fail(OMNI_ERR_INPUT, "--random: cannot read %s: %s", src, strerror(errno));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    FILE *f = fopen(dst, "wb");
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    free(text);
    if (!ok) return omni_fail(OMNI_ERR_RUNTIME, "cannot write %s: %s", dst, strerror(errno));
    return llm_config_load(dir, cfg);
}

static void remove_dir(const char *dir) {
    char p[1100];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

static const char *tmp_root(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static omni_status make_dir(char *dir, size_t cap) {
    snprintf(dir, cap, "%s/omni_random_XXXXXX", tmp_root());
    if (!mkdtemp(dir))
        return omni_fail(OMNI_ERR_RUNTIME, "cannot create a directory in %s: %s", tmp_root(), strerror(errno));
    return OMNI_OK;
}

static int64_t config_bytes(const llm_config *c) {
    int64_t n = list_tensors(c, NULL), total = 0;
    tensor_spec *t = malloc(sizeof *t * (size_t)n);
    if (!t) return -1;
    list_tensors(c, t);
    for (int64_t i = 0; i < n; i++) total += spec_bytes(&t[i]);
    free(t);
    return total;
}

/* A fresh directory holding a copy of the config, parsed into cfg (on failure the directory is gone). */
static omni_status open_config(const char *config_path, char *dir, size_t cap, llm_config *cfg) {
    omni_status st = make_dir(dir, cap);
    if (!st && (st = stage_config(config_path, dir, cfg))) remove_dir(dir);
    return st;
}

omni_status omni_random_model_bytes(const char *config_path, int64_t *bytes) {
    char dir[1024];
    llm_config cfg;
    *bytes = 0;
    omni_status st = open_config(config_path, dir, sizeof dir, &cfg);
    if (!st) {
        *bytes = config_bytes(&cfg);
        llm_config_free(&cfg);
        if (*bytes < 0) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
        remove_dir(dir);
    }
    return st;
}

static int64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static omni_status check_fits(int64_t bytes, int64_t max_bytes, const char *dir) {
    int64_t mem = mem_available();
    if (max_bytes > 0 && bytes > max_bytes)
        return omni_fail(OMNI_ERR_NOMEM, "--random: %.2f GiB of bf16 weights exceed the limit of %.2f GiB",
                         bytes / 1073741824.0, max_bytes / 1073741824.0);
    struct statvfs vs;
    int64_t disk = statvfs(dir, &vs) == 0 ? (int64_t)vs.f_bavail * (int64_t)vs.f_frsize : -1;
    if (mem >= 0 && bytes > mem / 2)
        return omni_fail(OMNI_ERR_NOMEM, "--random: %.2f GiB of bf16 weights do not fit on this CPU (%.2f GiB of "
                         "memory available; at most half is used); use a smaller config or --device cuda",
                         bytes / 1073741824.0, mem / 1073741824.0);
    if (disk >= 0 && bytes > disk / 2)
        return omni_fail(OMNI_ERR_NOMEM, "--random: %.2f GiB of weights do not fit in %s (%.2f GiB free); set TMPDIR",
                         bytes / 1073741824.0, tmp_root(), disk / 1073741824.0);
    return OMNI_OK;
}

static uint64_t next_random(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One tensor's bf16 data: vectors 1, matrices uniform in +-sqrt(3 / fan_in) (variance 1 / fan_in). */
static int write_tensor(FILE *f, const tensor_spec *t, uint64_t *rng, uint16_t *buf, size_t cap) {
    int64_t n = t->rows * (t->cols ? t->cols : 1);
    float a = t->cols ? sqrtf(3.0f / (float)t->cols) : 0;
    for (int64_t i = 0; i < n;) {
        size_t m = (size_t)(n - i) < cap ? (size_t)(n - i) : cap;
        for (size_t j = 0; j < m; j++) {
            float u = (float)(next_random(rng) >> 40) / (float)(1 << 24); /* [0, 1) */
            buf[j] = omni_f32_to_bf16(t->cols ? a * (2 * u - 1) : 1.0f);
        }
        if (fwrite(buf, 2, m, f) != m) return -1;
        i += (int64_t)m;
    }
    return 0;
}

static char *header_json(const tensor_spec *t, int64_t n) {
    cJSON *h = cJSON_CreateObject();
    int64_t off = 0;
    for (int64_t i = 0; i < n && h; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        double shape[2] = {(double)t[i].rows, (double)t[i].cols};
        double offs[2] = {(double)off, (double)(off + spec_bytes(&t[i]))};
        if (!e) break;
        cJSON_AddStringToObject(e, "dtype", "BF16");
        cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(shape, t[i].cols ? 2 : 1));
        cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray(offs, 2));
        off += spec_bytes(&t[i]);
    }
    char *s = h ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    return s;
}

static omni_status write_checkpoint(const llm_config *c, const char *dir, uint64_t seed) {
    int64_t n = list_tensors(c, NULL);
    tensor_spec *t = malloc(sizeof *t * (size_t)n);
    size_t cap = 1 << 20;
    uint16_t *buf = malloc(cap * 2);
    char *js = NULL, path[1100];
    omni_status st = t && buf ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) {
        list_tensors(c, t);
        js = header_json(t, n);
        if (!js) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = st ? NULL : fopen(path, "wb");
    if (!st && !f) st = omni_fail(OMNI_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
    if (!st) {
        size_t hl = strlen(js), padded = (hl + 7) / 8 * 8;
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
        int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(js, 1, hl, f) == hl;
        for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
        uint64_t rng = seed;
        for (int64_t i = 0; ok && i < n; i++) ok = write_tensor(f, &t[i], &rng, buf, cap) == 0;
        if (fclose(f) || !ok) st = omni_fail(OMNI_ERR_RUNTIME, "write failed: %s: %s", path, strerror(errno));
    }
    free(js);
    free(buf);
    free(t);
    return st;
}

omni_status omni_random_model(const char *config_path, uint64_t seed, int64_t max_bytes, llm_model **out) {
    char dir[1024];
    llm_config cfg;
    *out = NULL;
    omni_status st = open_config(config_path, dir, sizeof dir, &cfg);
    if (st) return st;
    int64_t bytes = config_bytes(&cfg);
    st = bytes < 0 ? omni_fail(OMNI_ERR_NOMEM, "out of memory") : check_fits(bytes, max_bytes, dir);
    if (!st) {
        omni_log(1, "random weights: %.1f MiB of bf16 (%s, %d layers, seed %llu)\n", bytes / 1048576.0,
                 cfg.model_type, cfg.n_layers, (unsigned long long)seed);
        st = write_checkpoint(&cfg, dir, seed);
    }
    llm_config_free(&cfg);
    if (!st) st = llm_model_load(dir, out);
    remove_dir(dir); /* the mapping keeps the loaded data */
    return st;
}

omni_status omni_random_model_device(const char *config_path, uint64_t seed, llm_model **out) {
    char dir[1024];
    llm_config cfg;
    *out = NULL;
    omni_status st = open_config(config_path, dir, sizeof dir, &cfg);
    if (st) return st;
    llm_config_free(&cfg);
    st = llm_model_init_random(dir, seed, out); /* parses the staged copy again: same config, one code path */
    remove_dir(dir);
    return st;
}
