/* safetensors.c - mmap'd, validated reader of Hugging Face safetensors checkpoints (one or many shards).
 *
 * File format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]}},
 * then the data section; offsets are relative to the data section. As the format's own reader requires, the JSON
 * may be followed only by whitespace (padding), sizes and offsets are integers, and the tensors cover the data
 * section exactly (no overlap, no hole, nothing after the last one). A tensor whose bytes are not aligned to its
 * dtype (a header whose length is not padded to 8) is copied to aligned memory: the kernels read it as float /
 * uint16_t arrays. */
#define _DEFAULT_SOURCE
#include "safetensors.h"

#include "json.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (256u << 20) /* refuse absurd header lengths before allocating */

typedef struct {
    char *name;
    omni_tensor t;
    int shard;
    uint64_t begin, end; /* offsets in the data section, for validation */
    void *copy;          /* aligned copy of misaligned data (owned) or NULL */
} ckpt_entry;

typedef struct {
    char *path;
    void *map;
    size_t size;
} ckpt_shard;

struct omni_ckpt {
    ckpt_shard *shards;
    int n_shards;
    ckpt_entry *entries;
    int n_entries, cap_entries;
    int *table; /* open-addressing hash: index into entries or -1 */
    int table_size;
    size_t bytes;
};

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int parse_dtype(const char *s, omni_dtype *dt) {
    static const struct { const char *name; omni_dtype dt; } map[] = {
        {"F32", OMNI_F32}, {"BF16", OMNI_BF16}, {"F16", OMNI_F16}, {"I32", OMNI_I32}, {"I64", OMNI_I64},
        {"U8", OMNI_U8}, {"BOOL", OMNI_U8}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(s, map[i].name)) { *dt = map[i].dt; return 1; }
    return 0;
}

static omni_status add_entry(omni_ckpt *c, ckpt_entry *e) {
    if (c->n_entries == c->cap_entries) {
        int cap = c->cap_entries ? c->cap_entries * 2 : 256;
        ckpt_entry *ne = realloc(c->entries, sizeof *ne * cap);
        if (!ne) return omni_fail(OMNI_ERR_NOMEM, "out of memory reading checkpoint header");
        c->entries = ne;
        c->cap_entries = cap;
    }
    c->entries[c->n_entries++] = *e;
    return OMNI_OK;
}

/* A size or an offset: an integer in [0, 2^53] (exact in a double; larger values do not convert to uint64_t
 * exactly, or at all). */
static int is_count(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 0x1p53 && v->valuedouble == floor(v->valuedouble);
}

/* Parse one tensor record of a header. */
static omni_status parse_tensor(omni_ckpt *c, int shard, const cJSON *item, uint64_t data_size) {
    const char *file = c->shards[shard].path;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    ckpt_entry e = {0};
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': malformed header entry", file, item->string);
    if (!parse_dtype(dt->valuestring, &e.t.dtype))
        return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': unsupported dtype %s", file, item->string, dt->valuestring);
    int nd = cJSON_GetArraySize(shape);
    if (nd > OMNI_MAX_DIMS)
        return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': %d dims (max %d)", file, item->string, nd, OMNI_MAX_DIMS);
    int64_t shp[OMNI_MAX_DIMS];
    double numel = 1;
    for (int i = 0; i < nd; i++) {
        const cJSON *d = cJSON_GetArrayItem(shape, i);
        if (!is_count(d))
            return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': bad shape", file, item->string);
        shp[i] = (int64_t)d->valuedouble;
        numel *= d->valuedouble;
    }
    const cJSON *b = cJSON_GetArrayItem(offs, 0), *en = cJSON_GetArrayItem(offs, 1);
    if (!is_count(b) || !is_count(en) || en->valuedouble < b->valuedouble)
        return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': bad data_offsets", file, item->string);
    e.begin = (uint64_t)b->valuedouble;
    e.end = (uint64_t)en->valuedouble;
    if (e.end > data_size)
        return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': data_offsets [%llu, %llu] beyond the file (data %llu bytes)",
                         file, item->string, (unsigned long long)e.begin, (unsigned long long)e.end,
                         (unsigned long long)data_size);
    if ((double)(e.end - e.begin) != numel * omni_dtype_size(e.t.dtype))
        return omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s': %llu bytes for %.0f elements of %s", file, item->string,
                         (unsigned long long)(e.end - e.begin), numel, dt->valuestring);
    e.t = omni_tensor_make(NULL, e.t.dtype, nd, shp);
    e.shard = shard;
    e.name = strdup(item->string);
    if (!e.name) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = add_entry(c, &e);
    if (st) free(e.name);
    return st;
}

static int cmp_begin(const void *a, const void *b) {
    const ckpt_entry *x = *(ckpt_entry *const *)a, *y = *(ckpt_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The tensors of one shard, in offset order, must cover its data section exactly: no overlap, no hole, nothing
 * after the last one (the format's rule; it also catches a header that belongs to another file). */
static omni_status check_layout(omni_ckpt *c, int first, int last, const char *file, uint64_t data_size) {
    int n = last - first;
    ckpt_entry **v = malloc(sizeof *v * (n > 0 ? n : 1));
    if (!v) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) v[i] = &c->entries[first + i];
    qsort(v, n, sizeof *v, cmp_begin);
    omni_status st = OMNI_OK;
    const ckpt_entry *far = NULL; /* the entry reaching furthest so far (an empty one must not hide an overlap) */
    uint64_t pos = 0;
    for (int i = 0; i < n && !st; i++) { /* overlaps first (the more telling error), then holes */
        if (v[i]->end == v[i]->begin) continue; /* empty: anywhere in range */
        if (v[i]->begin < pos)
            st = !strcmp(far->name, v[i]->name)
                     ? omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s' appears twice in the header", file, v[i]->name)
                     : omni_fail(OMNI_ERR_MODEL, "%s: tensors '%s' and '%s' overlap", file, far->name, v[i]->name);
        if (v[i]->end > pos) pos = v[i]->end, far = v[i];
    }
    pos = 0;
    for (int i = 0; i < n && !st; i++) {
        if (v[i]->begin > pos && v[i]->end > v[i]->begin)
            st = omni_fail(OMNI_ERR_MODEL, "%s: bytes [%llu, %llu) of the data section belong to no tensor (before "
                           "'%s'): corrupt header", file, (unsigned long long)pos, (unsigned long long)v[i]->begin,
                           v[i]->name);
        if (v[i]->end > pos) pos = v[i]->end;
    }
    if (!st && pos != data_size)
        st = omni_fail(OMNI_ERR_MODEL, "%s: %llu bytes after the last tensor's data (the header does not describe this "
                       "file: corrupt or mismatched)", file, (unsigned long long)(data_size - pos));
    free(v);
    return st;
}

/* Point each tensor of a shard at its data; a tensor misaligned for its dtype is copied (see the top). */
static omni_status place_data(omni_ckpt *c, int first, int last, const char *base) {
    for (int i = first; i < last; i++) {
        ckpt_entry *e = &c->entries[i];
        const char *p = base + e->begin;
        size_t n = e->end - e->begin, a = omni_dtype_size(e->t.dtype);
        if (n && (uintptr_t)p % a) {
            if (!(e->copy = malloc(n))) return omni_fail(OMNI_ERR_NOMEM, "out of memory copying tensor '%s'", e->name);
            memcpy(e->copy, p, n);
            p = e->copy;
        }
        e->t.data = (void *)p;
        c->bytes += n;
    }
    return OMNI_OK;
}

static omni_status map_shard(omni_ckpt *c, int s) {
    ckpt_shard *sh = &c->shards[s];
    int fd = open(sh->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO named *.safetensors must not block */
    if (fd < 0) return omni_fail(OMNI_ERR_MODEL, "cannot open %s: %s", sh->path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0 || !S_ISREG(stt.st_mode)) {
        close(fd);
        return omni_fail(OMNI_ERR_MODEL, "%s: not a regular file", sh->path);
    }
    sh->size = (size_t)stt.st_size;
    if (sh->size < 8) {
        close(fd);
        return omni_fail(OMNI_ERR_MODEL, "%s: truncated (%zu bytes, no header)", sh->path, sh->size);
    }
    sh->map = mmap(NULL, sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (sh->map == MAP_FAILED) {
        sh->map = NULL;
        return omni_fail(OMNI_ERR_MODEL, "%s: mmap failed: %s", sh->path, strerror(errno));
    }
    return OMNI_OK;
}

static omni_status load_shard(omni_ckpt *c, int s) {
    omni_status st = map_shard(c, s);
    if (st) return st;
    ckpt_shard *sh = &c->shards[s];
    uint64_t hlen = 0;
    const unsigned char *p = sh->map;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)p[i] << (8 * i);
    if (hlen > sh->size - 8 || hlen > MAX_HEADER)
        return omni_fail(OMNI_ERR_MODEL, "%s: header length %llu beyond the file (%zu bytes): truncated or corrupt",
                         sh->path, (unsigned long long)hlen, sh->size);
    const char *text = (const char *)p + 8, *end = NULL;
    int64_t nv = omni_json_count_values(text, (size_t)hlen);
    if (nv > OMNI_JSON_MAX_VALUES)
        return omni_fail(OMNI_ERR_MODEL, "%s: header of about %lld JSON values, over the limit of %lld: corrupt",
                         sh->path, (long long)nv, (long long)OMNI_JSON_MAX_VALUES);
    omni_json_watch_memory();
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    if (!root && omni_json_out_of_memory())
        return omni_fail(OMNI_ERR_NOMEM, "%s: out of memory parsing the %llu-byte header", sh->path,
                         (unsigned long long)hlen);
    if (!cJSON_IsObject(root) || omni_json_trailing(text, (size_t)hlen, end) >= 0) {
        cJSON_Delete(root);
        return omni_fail(OMNI_ERR_MODEL, "%s: header is not %s", sh->path,
                         root ? "one JSON object (padded with spaces)" : "valid JSON");
    }
    uint64_t data_size = sh->size - 8 - hlen;
    int first = c->n_entries;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (!strcmp(item->string, "__metadata__")) continue;
        if ((st = parse_tensor(c, s, item, data_size))) break;
    }
    cJSON_Delete(root);
    if (!st) st = check_layout(c, first, c->n_entries, sh->path, data_size);
    if (!st) st = place_data(c, first, c->n_entries, (const char *)sh->map + 8 + hlen);
    return st;
}

static omni_status build_table(omni_ckpt *c) {
    c->table_size = 16;
    while (c->table_size < 2 * c->n_entries) c->table_size *= 2;
    c->table = malloc(sizeof(int) * c->table_size);
    if (!c->table) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; i < c->table_size; i++) c->table[i] = -1;
    for (int i = 0; i < c->n_entries; i++) {
        uint64_t h = fnv1a(c->entries[i].name) & (c->table_size - 1);
        while (c->table[h] >= 0) {
            const ckpt_entry *o = &c->entries[c->table[h]];
            if (!strcmp(o->name, c->entries[i].name))
                return o->shard == c->entries[i].shard
                           ? omni_fail(OMNI_ERR_MODEL, "%s: tensor '%s' appears twice in the header",
                                       c->shards[o->shard].path, o->name)
                           : omni_fail(OMNI_ERR_MODEL, "tensor '%s' appears in two shards (%s, %s)", o->name,
                                       c->shards[o->shard].path, c->shards[c->entries[i].shard].path);
            h = (h + 1) & (c->table_size - 1);
        }
        c->table[h] = i;
    }
    return OMNI_OK;
}

static omni_status add_shard_path(omni_ckpt *c, const char *dir, const char *file) {
    for (int i = 0; i < c->n_shards; i++) {
        const char *base = strrchr(c->shards[i].path, '/');
        if (base && !strcmp(base + 1, file)) return OMNI_OK;
    }
    ckpt_shard *ns = realloc(c->shards, sizeof *ns * (c->n_shards + 1));
    if (!ns) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    c->shards = ns;
    size_t n = strlen(dir) + strlen(file) + 2;
    char *path = malloc(n);
    if (!path) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    snprintf(path, n, "%s/%s", dir, file);
    c->shards[c->n_shards++] = (ckpt_shard){path, NULL, 0};
    return OMNI_OK;
}

/* Shards named by model.safetensors.index.json; also returns the parsed weight_map to verify later. */
static omni_status shards_from_index(omni_ckpt *c, const char *dir, const char *index_path, cJSON **map_out) {
    cJSON *root = NULL;
    omni_status st = omni_json_load(index_path, OMNI_ERR_MODEL, &root);
    if (st) return st;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return omni_fail(OMNI_ERR_MODEL, "%s: no weight_map object", index_path);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, wm) {
        if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
            st = omni_fail(OMNI_ERR_MODEL, "%s: bad shard name for '%s'", index_path, it->string);
            break;
        }
        if ((st = add_shard_path(c, dir, it->valuestring))) break;
    }
    *map_out = root;
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static omni_status shards_from_dir(omni_ckpt *c, const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return omni_fail(errno == ENOMEM ? OMNI_ERR_NOMEM : OMNI_ERR_MODEL, "cannot open model directory %s: %s", dir,
                         strerror(errno));
    char *names[4096];
    int n = 0;
    struct dirent *de;
    int nomem = 0;
    while ((de = readdir(d)) && n < 4096) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors") && !(names[n++] = strdup(de->d_name))) nomem = 1;
    }
    closedir(d);
    omni_status st = nomem ? omni_fail(OMNI_ERR_NOMEM, "out of memory listing %s", dir) : OMNI_OK;
    if (!st) qsort(names, n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        if (!st) st = add_shard_path(c, dir, names[i]);
        free(names[i]);
    }
    if (!st && n == 0) st = omni_fail(OMNI_ERR_MODEL, "no *.safetensors files in %s", dir);
    return st;
}

/* Every name listed in the index must exist in the shard the index names. */
static omni_status verify_index(omni_ckpt *c, const cJSON *root) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "weight_map")) {
        if (!omni_ckpt_find(c, it->string))
            return omni_fail(OMNI_ERR_MODEL, "tensor '%s' listed in the index is missing from %s", it->string,
                             it->valuestring);
    }
    return OMNI_OK;
}

omni_status omni_ckpt_open(const char *dir, omni_ckpt **out) {
    *out = NULL;
    struct stat stt;
    if (stat(dir, &stt) != 0) return omni_fail(OMNI_ERR_MODEL, "model directory not found: %s", dir);
    if (!S_ISDIR(stt.st_mode)) return omni_fail(OMNI_ERR_MODEL, "not a directory: %s", dir);
    omni_ckpt *c = calloc(1, sizeof *c);
    if (!c) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    char index_path[4096];
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    cJSON *index = NULL;
    struct stat ist; /* lstat: a broken link to the index (an incomplete download) is an error, not "no index" */
    omni_status st = lstat(index_path, &ist) == 0 ? shards_from_index(c, dir, index_path, &index)
                                                   : shards_from_dir(c, dir);
    for (int s = 0; s < c->n_shards && !st; s++) st = load_shard(c, s);
    if (!st) st = build_table(c);
    if (!st && index) st = verify_index(c, index);
    cJSON_Delete(index);
    if (st) {
        omni_ckpt_free(c);
        return st;
    }
    *out = c;
    return OMNI_OK;
}

void omni_ckpt_free(omni_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->n_shards; i++) {
        if (c->shards[i].map) munmap(c->shards[i].map, c->shards[i].size);
        free(c->shards[i].path);
    }
    for (int i = 0; i < c->n_entries; i++) free(c->entries[i].name), free(c->entries[i].copy);
    free(c->shards);
    free(c->entries);
    free(c->table);
    free(c);
}

const omni_tensor *omni_ckpt_find(const omni_ckpt *c, const char *name) {
    if (!c || !c->table) return NULL;
    uint64_t h = fnv1a(name) & (c->table_size - 1);
    while (c->table[h] >= 0) {
        const ckpt_entry *e = &c->entries[c->table[h]];
        if (!strcmp(e->name, name)) return &e->t;
        h = (h + 1) & (c->table_size - 1);
    }
    return NULL;
}

static void shape_str(char *buf, size_t cap, int nd, const int64_t *shape) {
    size_t o = snprintf(buf, cap, "[");
    for (int i = 0; i < nd && o < cap; i++) o += snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

omni_status omni_ckpt_get(const omni_ckpt *c, const char *name, int ndim, const int64_t *shape, omni_tensor *out) {
    const omni_tensor *t = omni_ckpt_find(c, name);
    if (!t) return omni_fail(OMNI_ERR_MODEL, "missing tensor '%s'", name);
    if (t->dtype != OMNI_F32 && t->dtype != OMNI_BF16 && t->dtype != OMNI_F16)
        return omni_fail(OMNI_ERR_MODEL, "tensor '%s' has dtype %s, expected a float type", name,
                         omni_dtype_name(t->dtype));
    int ok = ndim <= 0 || t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char a[128], b[128];
        shape_str(a, sizeof a, t->ndim, t->shape);
        shape_str(b, sizeof b, ndim, shape);
        return omni_fail(OMNI_ERR_MODEL, "tensor '%s' has shape %s, expected %s (config and checkpoint disagree)",
                         name, a, b);
    }
    *out = *t;
    return OMNI_OK;
}

omni_status omni_ckpt_getf(const omni_ckpt *c, omni_tensor *out, int ndim, const int64_t *shape, const char *fmt,
                           ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return omni_ckpt_get(c, name, ndim, shape, out);
}

int omni_ckpt_has_prefix(const omni_ckpt *c, const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; c && i < c->n_entries; i++)
        if (!strncmp(c->entries[i].name, prefix, n)) return 1;
    return 0;
}

omni_status omni_ckpt_check_unused(const omni_ckpt *c, const char *what, const char *fmt, ...) {
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (!omni_ckpt_has_prefix(c, prefix)) return OMNI_OK;
    return omni_fail(OMNI_ERR_MODEL, "the checkpoint has tensors '%s*' that config.json's %s leaves out (config and "
                     "checkpoint disagree)", prefix, what);
}

int omni_ckpt_count(const omni_ckpt *c) { return c ? c->n_entries : 0; }
const char *omni_ckpt_name(const omni_ckpt *c, int i) { return c->entries[i].name; }
size_t omni_ckpt_bytes(const omni_ckpt *c) { return c ? c->bytes : 0; }
