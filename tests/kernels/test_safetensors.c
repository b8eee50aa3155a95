/* test_safetensors.c - the checkpoint reader (kernels/safetensors.h) on tiny checkpoints written at test time.
 *
 * A small writer below produces safetensors files (u64 LE header length, JSON header padded with spaces to
 * 8 bytes, data) and index files in a fresh mkdtemp directory, one sub-directory per case. Valid cases check
 * find/get/getf/count/name/bytes and the data bytes (single file, sharded with an index, several shards without
 * one). Every corrupt case must fail with OMNI_ERR_MODEL, leave *out NULL and give a one-line message that names
 * the problem (the tensor or file); run under ASan (OMNI_SANITIZE) this also checks for crashes and leaks. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "kernels/safetensors.h"

static char g_root[1024];

/* ---- writer -------------------------------------------------------------------------------------------- */

/* "<root>/<dir>/<file>" (file may be NULL); a few rotating buffers so two paths can be live at once. */
static const char *path_of(const char *dir, const char *file) {
    static char buf[4][2048];
    static int next = 0;
    char *p = buf[next++ & 3];
    if (file) snprintf(p, sizeof buf[0], "%s/%s/%s", g_root, dir, file);
    else snprintf(p, sizeof buf[0], "%s/%s", g_root, dir);
    return p;
}

/* Create the case directory "<root>/<dir>"; the returned path stays valid until the next make_case. */
static const char *make_case(const char *dir) {
    static char p[2048];
    snprintf(p, sizeof p, "%s/%s", g_root, dir);
    if (mkdir(p, 0700) != 0) fprintf(stderr, "cannot create %s\n", p);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) fprintf(stderr, "cannot write %s\n", path);
    if (f) fclose(f);
}

/* A safetensors file with an explicit header length (which may lie), `body` and `data` after the 8 bytes. */
static void write_raw(const char *path, uint64_t hlen, const char *body, size_t nbody, const void *data, size_t ndata) {
    size_t n = 8 + nbody + ndata;
    unsigned char *buf = malloc(n);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, body, nbody);
    if (ndata) memcpy(buf + 8 + nbody, data, ndata);
    write_bytes(path, buf, n);
    free(buf);
}

/* A well-formed file: header padded with spaces so that the data section starts 8-byte aligned. */
static void write_st(const char *path, const char *header, const void *data, size_t ndata) {
    size_t len = strlen(header), padded = (len + 7) / 8 * 8;
    char *h = malloc(padded + 1);
    memcpy(h, header, len);
    memset(h + len, ' ', padded - len);
    write_raw(path, padded, h, padded, data, ndata);
    free(h);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* ---- valid checkpoints ---------------------------------------------------------------------------------- */

/* Data of the single-file checkpoint: a F32 [2,3] @0, b BF16 [4] @24, c F16 [1,2,2] @32, i I32 [3] @40,
 * s F32 [] @52, e F32 [0,3] @56 (empty), layers.3.w F16 [2] @56. 60 bytes. */
static const char *k_single_header =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"c\":{\"dtype\":\"F16\",\"shape\":[1,2,2],\"data_offsets\":[32,40]},"
    "\"i\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[40,52]},"
    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[52,56]},"
    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[56,56]},"
    "\"layers.3.w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[56,60]}}";

static void single_data(unsigned char *d) {
    float a[6] = {-1.f, -0.5f, 0.f, 0.5f, 1.f, 1.5f}, s = 42.f;
    uint16_t b[4] = {0x3f80, 0xc000, 0x3f00, 0x4040}; /* bf16 1, -2, 0.5, 3 */
    uint16_t c[4] = {0x3c00, 0xc000, 0x3800, 0x4200}; /* f16 1, -2, 0.5, 3 */
    int32_t i[3] = {7, -8, 9};
    uint16_t w[2] = {0x4400, 0xbc00}; /* f16 4, -1 */
    memcpy(d, a, 24), memcpy(d + 24, b, 8), memcpy(d + 32, c, 8), memcpy(d + 40, i, 12), memcpy(d + 52, &s, 4);
    memcpy(d + 56, w, 4);
}

static int shape_is(const omni_tensor *t, int nd, const int64_t *shape) {
    if (t->ndim != nd) return 0;
    for (int i = 0; i < nd; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

static void check_single_values(const omni_ckpt *c) {
    const omni_tensor *a = omni_ckpt_find(c, "a"), *b = omni_ckpt_find(c, "b"), *h = omni_ckpt_find(c, "c");
    const omni_tensor *i = omni_ckpt_find(c, "i"), *s = omni_ckpt_find(c, "s"), *e = omni_ckpt_find(c, "e");
    CHECK(a && b && h && i && s && e, "every tensor is found");
    if (!(a && b && h && i && s && e)) return;
    CHECK(a->dtype == OMNI_F32 && shape_is(a, 2, (int64_t[]){2, 3}) && a->stride[0] == 3 && a->stride[1] == 1,
          "a: F32 [2,3] contiguous");
    const float *af = a->data;
    CHECK(af[0] == -1.f && af[5] == 1.5f, "a data: %g %g", af[0], af[5]);
    CHECK(b->dtype == OMNI_BF16 && omni_get_f32(b->data, OMNI_BF16, 1) == -2.f && omni_get_f32(b->data, OMNI_BF16, 3) == 3.f,
          "b: BF16 values");
    CHECK(h->dtype == OMNI_F16 && shape_is(h, 3, (int64_t[]){1, 2, 2}) && omni_get_f32(h->data, OMNI_F16, 2) == 0.5f,
          "c: F16 [1,2,2] values");
    CHECK(i->dtype == OMNI_I32 && ((const int32_t *)i->data)[1] == -8, "i: I32 values");
    CHECK(s->ndim == 0 && omni_tensor_numel(s) == 1 && *(const float *)s->data == 42.f, "s: scalar");
    CHECK(e->ndim == 2 && omni_tensor_numel(e) == 0, "e: empty [0,3]");
    CHECK((const char *)b->data - (const char *)a->data == 24 && (const char *)s->data - (const char *)a->data == 52,
          "data pointers follow data_offsets");
}

static void check_single_get(const omni_ckpt *c) {
    omni_tensor t;
    CHECK(omni_ckpt_get(c, "a", 2, (int64_t[]){2, 3}, &t) == OMNI_OK && t.data == omni_ckpt_find(c, "a")->data,
          "get a [2,3]: %s", omni_last_error());
    CHECK(omni_ckpt_get(c, "b", 0, NULL, &t) == OMNI_OK && t.shape[0] == 4, "get b with ndim 0 accepts any shape");
    CHECK(omni_ckpt_get(c, "a", 2, (int64_t[]){3, 2}, &t) == OMNI_ERR_MODEL, "get a as [3,2] must fail");
    const char *m = omni_last_error();
    CHECK(strstr(m, "'a'") && strstr(m, "[2, 3]") && strstr(m, "[3, 2]"), "shape message names both: %s", m);
    CHECK(omni_ckpt_get(c, "a", 1, (int64_t[]){6}, &t) == OMNI_ERR_MODEL, "get a as [6] must fail (rank)");
    CHECK(omni_ckpt_get(c, "a", 1, (int64_t[]){2}, &t) == OMNI_ERR_MODEL, "get a as [2] must fail (rank, prefix)");
    CHECK(omni_ckpt_get(c, "c", 2, (int64_t[]){1, 2}, &t) == OMNI_ERR_MODEL, "get c as [1,2] must fail (rank)");
    CHECK(omni_ckpt_get(c, "i", 1, (int64_t[]){3}, &t) == OMNI_ERR_MODEL, "get of an I32 tensor must fail");
    m = omni_last_error();
    CHECK(strstr(m, "'i'") && strstr(m, "dtype"), "dtype message: %s", m);
    CHECK(omni_ckpt_get(c, "nope", 1, (int64_t[]){3}, &t) == OMNI_ERR_MODEL, "missing tensor must fail");
    CHECK(strstr(omni_last_error(), "'nope'") != NULL, "missing message: %s", omni_last_error());
    CHECK(omni_ckpt_find(c, "nope") == NULL && omni_ckpt_find(c, "") == NULL, "find of a missing name is NULL");
    CHECK(omni_ckpt_getf(c, &t, 1, (int64_t[]){2}, "layers.%d.w", 3) == OMNI_OK &&
              omni_get_f32(t.data, t.dtype, 0) == 4.f,
          "getf layers.3.w: %s", omni_last_error());
    CHECK(omni_ckpt_getf(c, &t, 1, (int64_t[]){2}, "layers.%d.w", 4) == OMNI_ERR_MODEL &&
              strstr(omni_last_error(), "layers.4.w"),
          "getf layers.4.w must fail naming it: %s", omni_last_error());
}

static void test_single(void) {
    const char *dir = make_case("single");
    unsigned char data[60];
    single_data(data);
    write_st(path_of("single", "model.safetensors"), k_single_header, data, sizeof data);
    write_bytes(path_of("single", "config.json"), "{}", 2); /* other files are ignored */
    omni_ckpt *c = NULL;
    omni_status st = omni_ckpt_open(dir, &c);
    CHECK(st == OMNI_OK && c, "open single: %s", omni_last_error());
    if (!c) return;
    CHECK(omni_ckpt_count(c) == 7, "count %d", omni_ckpt_count(c));
    CHECK(omni_ckpt_bytes(c) == 60, "bytes %zu", omni_ckpt_bytes(c));
    static const char *names[] = {"a", "b", "c", "i", "s", "e", "layers.3.w"};
    int seen[7] = {0};
    for (int i = 0; i < omni_ckpt_count(c) && i < 7; i++)
        for (int j = 0; j < 7; j++) seen[j] += !strcmp(omni_ckpt_name(c, i), names[j]);
    int once = 1;
    for (int j = 0; j < 7; j++) once &= seen[j] == 1;
    CHECK(once, "omni_ckpt_name lists every tensor once (not __metadata__)");
    check_single_values(c);
    check_single_get(c);
    omni_ckpt_free(c);
}

/* Two shards named by model.safetensors.index.json, plus a corrupt stray *.safetensors that the index does not
 * name (it must not be opened). */
static void test_sharded(void) {
    const char *dir = make_case("sharded");
    float xw[4] = {1.f, 2.f, 3.f, 4.f};
    unsigned char d1[20], d2[14];
    uint16_t xb[2] = {0x4000, 0xc040}; /* bf16 2, -3 */
    uint16_t yw[3] = {0x3c00, 0x4000, 0x4200}; /* f16 1, 2, 3 */
    int64_t yi = -5;
    memcpy(d1, xw, 16), memcpy(d1 + 16, xb, 4), memcpy(d2, yw, 6), memcpy(d2 + 6, &yi, 8);
    write_st(path_of("sharded", "model-00001-of-00002.safetensors"),
             "{\"x.w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"x.b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]}}", d1, sizeof d1);
    write_st(path_of("sharded", "model-00002-of-00002.safetensors"),
             "{\"y.w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
             "\"y.i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[6,14]}}", d2, sizeof d2);
    const char *index = "{\"metadata\":{\"total_size\":34},\"weight_map\":{"
                        "\"x.w\":\"model-00001-of-00002.safetensors\",\"x.b\":\"model-00001-of-00002.safetensors\","
                        "\"y.w\":\"model-00002-of-00002.safetensors\",\"y.i\":\"model-00002-of-00002.safetensors\"}}";
    write_bytes(path_of("sharded", "model.safetensors.index.json"), index, strlen(index));
    write_bytes(path_of("sharded", "stray.safetensors"), "bad", 3);
    omni_ckpt *c = NULL;
    CHECK(omni_ckpt_open(dir, &c) == OMNI_OK && c, "open sharded: %s", omni_last_error());
    if (!c) return;
    CHECK(omni_ckpt_count(c) == 4 && omni_ckpt_bytes(c) == 34, "count %d bytes %zu", omni_ckpt_count(c),
          omni_ckpt_bytes(c));
    omni_tensor t;
    CHECK(omni_ckpt_get(c, "x.w", 1, (int64_t[]){4}, &t) == OMNI_OK && ((const float *)t.data)[3] == 4.f, "x.w");
    CHECK(omni_ckpt_get(c, "x.b", 1, (int64_t[]){2}, &t) == OMNI_OK && omni_get_f32(t.data, t.dtype, 1) == -3.f, "x.b");
    CHECK(omni_ckpt_get(c, "y.w", 1, (int64_t[]){3}, &t) == OMNI_OK && omni_get_f32(t.data, t.dtype, 2) == 3.f, "y.w");
    const omni_tensor *yi_t = omni_ckpt_find(c, "y.i");
    int64_t yv = 0;
    if (yi_t) memcpy(&yv, yi_t->data, 8);
    CHECK(yi_t && yi_t->dtype == OMNI_I64 && yv == -5, "y.i (I64, unaligned in its shard)");
    omni_ckpt_free(c);
}

/* Without an index, every *.safetensors of the directory is opened. */
static void test_multi_noindex(void) {
    const char *dir = make_case("multi");
    float v[2] = {5.f, 6.f};
    write_st(path_of("multi", "part-a.safetensors"), "{\"p\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             v, 4);
    write_st(path_of("multi", "part-b.safetensors"), "{\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             v + 1, 4);
    write_bytes(path_of("multi", "notes.safetensors.txt"), "x", 1);
    omni_ckpt *c = NULL;
    CHECK(omni_ckpt_open(dir, &c) == OMNI_OK && c, "open multi: %s", omni_last_error());
    if (!c) return;
    const omni_tensor *p = omni_ckpt_find(c, "p"), *q = omni_ckpt_find(c, "q");
    CHECK(omni_ckpt_count(c) == 2 && p && q && *(const float *)p->data == 5.f && *(const float *)q->data == 6.f,
          "both shards are read");
    omni_ckpt_free(c);
    omni_ckpt_free(NULL);
    CHECK(omni_ckpt_find(NULL, "p") == NULL && omni_ckpt_count(NULL) == 0 && omni_ckpt_bytes(NULL) == 0,
          "NULL checkpoint accessors");
}

/* ---- corrupt checkpoints -------------------------------------------------------------------------------- */

/* Opening `dir` must fail with OMNI_ERR_MODEL, *out NULL, a one-line message containing n1 and n2. */
static void expect_fail(const char *dir, const char *what, const char *n1, const char *n2) {
    omni_ckpt *c = (omni_ckpt *)&g_root; /* must be overwritten with NULL */
    omni_clear_error();
    omni_status st = omni_ckpt_open(dir, &c);
    const char *m = omni_last_error();
    fprintf(stderr, "  %-34s -> %s: %s\n", what, omni_status_name(st), m);
    CHECK(st == OMNI_ERR_MODEL, "%s: status %s", what, omni_status_name(st));
    CHECK(c == NULL, "%s: *out must be NULL on failure", what);
    if (st == OMNI_OK) omni_ckpt_free(c);
    CHECK(m[0] && !strchr(m, '\n'), "%s: one-line message expected: '%s'", what, m);
    CHECK(!n1 || strstr(m, n1), "%s: message lacks '%s': %s", what, n1, m);
    CHECK(!n2 || strstr(m, n2), "%s: message lacks '%s': %s", what, n2, m);
}

/* A case directory holding one model.safetensors with the given header and `ndata` bytes of data. */
static const char *bad_single(const char *name, const char *header, size_t ndata) {
    const char *dir = make_case(name);
    unsigned char data[64] = {0};
    write_st(path_of(name, "model.safetensors"), header, data, ndata);
    return dir;
}

static void test_bad_paths(void) {
    expect_fail(path_of("does-not-exist", NULL), "missing directory", "does-not-exist", NULL);
    make_case("isfile");
    write_bytes(path_of("isfile", "weights.bin"), "x", 1);
    expect_fail(path_of("isfile", "weights.bin"), "path is a file", "weights.bin", "directory");
    expect_fail(make_case("empty"), "empty directory", ".safetensors", "empty");
    const char *d = make_case("shard-is-dir");
    mkdir(path_of("shard-is-dir", "model.safetensors"), 0700);
    expect_fail(d, "shard is a directory", "model.safetensors", NULL);
}

static void test_bad_sizes(void) {
    const char *d = make_case("short5");
    write_bytes(path_of("short5", "model.safetensors"), "\x10\0\0\0\0", 5);
    expect_fail(d, "shard of 5 bytes", "model.safetensors", NULL);
    d = make_case("short0");
    write_bytes(path_of("short0", "model.safetensors"), "", 0);
    expect_fail(d, "shard of 0 bytes", "model.safetensors", NULL);
    d = make_case("hlen-beyond");
    write_raw(path_of("hlen-beyond", "model.safetensors"), 1000, "{}      ", 8, NULL, 0);
    expect_fail(d, "header length beyond the file", "model.safetensors", "header");
    d = make_case("hlen-plus1"); /* header length = file size - 8 + 1: one byte beyond */
    write_raw(path_of("hlen-plus1", "model.safetensors"), 9, "{}      ", 8, NULL, 0);
    expect_fail(d, "header length one byte beyond", "model.safetensors", "header");
    d = make_case("hlen-huge");
    write_raw(path_of("hlen-huge", "model.safetensors"), UINT64_MAX - 3, "{}      ", 8, NULL, 0);
    expect_fail(d, "header length 2^64-4", "model.safetensors", "header");
    expect_fail(bad_single("data-cut", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8),
                "data cut short", "'a'", "model.safetensors");
    expect_fail(bad_single("data-cut1", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 15),
                "data one byte short", "'a'", NULL);
}

static void test_bad_headers(void) {
    expect_fail(bad_single("not-json", "{\"a\": {\"dtype\": \"F32\", oops", 4), "header not JSON", "JSON",
                "model.safetensors");
    expect_fail(bad_single("json-array", "[1, 2, 3]", 0), "header is a JSON array", "model.safetensors", NULL);
    expect_fail(bad_single("entry-number", "{\"a\": 5}", 0), "tensor entry is a number", "'a'", NULL);
    expect_fail(bad_single("no-shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), "entry without shape",
                "'a'", NULL);
    expect_fail(bad_single("dtype-f64", "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8),
                "unsupported dtype F64", "'a'", "F64");
    expect_fail(bad_single("dtype-f8", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4),
                "unsupported dtype F8_E4M3", "'w'", "F8_E4M3");
    expect_fail(bad_single("six-dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4),
                "six dimensions", "'a'", NULL);
    expect_fail(bad_single("neg-dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
                "negative dimension", "'a'", NULL);
    expect_fail(bad_single("dim-1e30", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", 4),
                "dimension 1e30", "'a'", "shape");
    expect_fail(bad_single("size-mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24),
                "bytes != shape * dtype", "'a'", NULL);
    expect_fail(bad_single("dup-in-file", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
                "same name twice in one header", "'a'", NULL);
}

static void test_bad_offsets(void) {
    expect_fail(bad_single("off-range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[100,108]}}", 8),
                "offsets beyond the data", "'a'", NULL);
    expect_fail(bad_single("off-reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8),
                "offsets reversed", "'a'", NULL);
    expect_fail(bad_single("off-negative", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8),
                "negative offset", "'a'", NULL);
    expect_fail(bad_single("off-1e30", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e30]}}", 8),
                "offset 1e30", "'a'", "data_offsets");
    expect_fail(bad_single("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16),
                "overlapping tensors", "'a'", "'b'");
    /* An empty tensor sorted between the two overlapping ones must not hide the overlap. */
    expect_fail(bad_single("overlap-empty", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                                            "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                                            "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16),
                "overlap around an empty tensor", "'c'", "overlap");
}

/* A two-shard directory with shard 1 = {a}, shard 2 = {b} (or {a} when dup) and the given index text. */
static const char *sharded_case(const char *name, const char *index, int dup) {
    const char *dir = make_case(name);
    float v[2] = {1.f, 2.f};
    write_st(path_of(name, "s1.safetensors"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v, 4);
    write_st(path_of(name, "s2.safetensors"),
             dup ? "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
                 : "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             v + 1, 4);
    if (index) write_bytes(path_of(name, "model.safetensors.index.json"), index, strlen(index));
    return dir;
}

static void test_bad_index(void) {
    expect_fail(sharded_case("idx-missing-shard",
                             "{\"weight_map\":{\"a\":\"s1.safetensors\",\"z\":\"s3-missing.safetensors\"}}", 0),
                "index names a missing shard", "s3-missing.safetensors", NULL);
    expect_fail(sharded_case("idx-missing-tensor",
                             "{\"weight_map\":{\"a\":\"s1.safetensors\",\"zz\":\"s1.safetensors\","
                             "\"b\":\"s2.safetensors\"}}", 0),
                "index names a tensor not in its shard", "'zz'", NULL);
    expect_fail(sharded_case("dup-noindex", NULL, 1), "duplicate tensor across shards", "'a'", "s2.safetensors");
    expect_fail(sharded_case("dup-index", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}", 1),
                "duplicate tensor, indexed shards", "'a'", NULL);
    expect_fail(sharded_case("idx-not-json", "{\"weight_map\": {", 0), "index not JSON",
                "model.safetensors.index.json", NULL);
    expect_fail(sharded_case("idx-no-map", "{\"metadata\":{}}", 0), "index without weight_map", "weight_map", NULL);
    expect_fail(sharded_case("idx-escape", "{\"weight_map\":{\"a\":\"../idx-missing-shard/s1.safetensors\"}}", 0),
                "index shard path leaves the dir", "'a'", NULL);
    expect_fail(sharded_case("idx-nonstring", "{\"weight_map\":{\"a\":7}}", 0), "index shard name not a string",
                "'a'", NULL);
}

/* What the format's own reader refuses (session 7): JSON followed by anything but spaces, fractional sizes or
 * offsets (were truncated), data bytes no tensor covers (a hole, trailing bytes: a header that does not describe
 * its file), a name given twice (was "'a' and 'a' overlap"), a broken link as the index (was silently taken as "no
 * index"). */
static void test_strict_format(void) {
    expect_fail(bad_single("json-trailing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4),
                "garbage after the header's JSON", "model.safetensors", "JSON object");
    const char *d = make_case("json-nul");
    write_raw(path_of("json-nul", "model.safetensors"), 8, "{}\0\0\0\0\0\0", 8, NULL, 0);
    expect_fail(d, "NUL bytes after the header's JSON", "model.safetensors", "JSON object");
    expect_fail(bad_single("shape-frac", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5,2],\"data_offsets\":[0,12]}}", 12),
                "fractional dimension", "'a'", "bad shape");
    expect_fail(bad_single("off-frac", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0.5,4.5]}}", 8),
                "fractional offsets", "'a'", "data_offsets");
    expect_fail(bad_single("hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12),
                "a hole between tensors", "[4, 8)", "'b'");
    expect_fail(bad_single("trailing-data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 16),
                "bytes after the last tensor", "12 bytes after the last tensor", "model.safetensors");
    expect_fail(bad_single("dup-same-range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "same name twice, same bytes", "'a' appears twice in the header", NULL);
    expect_fail(bad_single("dup-two-ranges", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
                "same name twice, two ranges", "'a' appears twice in the header", NULL);
    d = sharded_case("idx-broken-link", NULL, 0);
    if (symlink("/nonexistent/model.safetensors.index.json", path_of("idx-broken-link", "model.safetensors.index.json")))
        CHECK(0, "symlink");
    expect_fail(d, "index is a broken link", "model.safetensors.index.json", NULL);
}

/* A header whose length is not a multiple of 8 puts the data at odd addresses; the kernels read float / uint16
 * arrays (UBSan: misaligned load, a crash in the sanitizer build). Such tensors are copied: same values, aligned. */
static void test_unaligned(void) {
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                    "\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]}}";
    size_t n = strlen(h);
    unsigned char data[18];
    float w[3] = {1.5f, -2.25f, 3.0f};
    uint16_t bf[3] = {0x3f80, 0xc000, 0x4040};
    memcpy(data, w, 12), memcpy(data + 12, bf, 6);
    make_case("unaligned");
    write_raw(path_of("unaligned", "model.safetensors"), n, h, n, data, sizeof data);
    omni_ckpt *c = NULL;
    CHECK(omni_ckpt_open(path_of("unaligned", NULL), &c) == OMNI_OK, "unaligned header: %s", omni_last_error());
    if (!c) return;
    const omni_tensor *tw = omni_ckpt_find(c, "w"), *th = omni_ckpt_find(c, "h");
    CHECK(tw && th && (uintptr_t)tw->data % 4 == 0 && (uintptr_t)th->data % 2 == 0, "unaligned data not copied");
    if (tw && th) {
        const float *fw = tw->data;
        const uint16_t *fh = th->data;
        CHECK(fw[0] == 1.5f && fw[1] == -2.25f && fw[2] == 3.0f, "f32 values");
        CHECK(fh[0] == 0x3f80 && fh[1] == 0xc000 && fh[2] == 0x4040, "bf16 values");
    }
    CHECK(omni_ckpt_bytes(c) == 18, "bytes %zu", omni_ckpt_bytes(c));
    omni_ckpt_free(c);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/omni-st-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_single();
    test_sharded();
    test_multi_noindex();
    test_bad_paths();
    test_bad_sizes();
    test_bad_headers();
    test_bad_offsets();
    test_bad_index();
    test_strict_format();
    test_unaligned();
    nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_exit();
}
