/* tokenizer.c - byte-level BPE tokenizer (Hugging Face tokenizer.json subset; see tokenizer.h).
 *
 * Layout of a loaded tokenizer:
 *   arena            all token strings, back to back (spans below are offsets into it)
 *   tok_str[V]       token spelling: byte-level form ("Ġthe") for model tokens, content for added tokens
 *   tok_bytes[V]     raw bytes the token decodes to
 *   str_hash         open-addressing table spelling -> id
 *   merge_hash       open-addressing table (left id, right id) -> (rank, merged id)
 *   byte_id[256]     id of the one-byte token of each byte (-1 if absent)
 *   added[]          added tokens sorted by length (longest first), for leftmost-longest matching
 *   regex[n_stages]  pre-tokenizer regexes applied one after the other ("Isolated": matches and gaps are pieces)
 * V = vocab size (max id + 1). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "llm/tokenizer.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_STAGES 4 /* pre-tokenizer regexes */
#define MAX_NORMS 4  /* normalizer steps */
#define MAX_ID (1 << 24)
#define FLAG_USED 1
#define FLAG_ADDED 2
#define FLAG_SPECIAL 4

/* GPT-2 regex used by ByteLevel with use_regex = true. */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Unicode White_Space, which is what \s means in the Oniguruma engine used by tokenizers
 * (PCRE2's UCP \s differs, e.g. it matches U+180E). */
static const char WS_CLASS[] = "\\t\\n\\x0b\\f\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
                               "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

typedef struct { uint32_t off, len; } span;
typedef struct { uint64_t key; int32_t rank, new_id; } merge_slot; /* key 0 = empty (ids stored + 1) */
typedef struct { int32_t id; int special; uint32_t off, len; } added_tok;

struct llm_tokenizer {
    int n_ids;
    char *arena;
    size_t arena_len, arena_cap;
    span *tok_str, *tok_bytes; /* [n_ids] */
    uint8_t *flags;            /* [n_ids] FLAG_* */
    int32_t *str_hash;         /* [str_mask + 1], -1 = empty */
    uint32_t str_mask;
    merge_slot *merge_hash; /* [merge_mask + 1] */
    uint32_t merge_mask;
    int32_t byte_id[256];
    uint32_t byte_cp[256]; /* byte -> code point of its byte-level character */
    int n_added;
    added_tok *added;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */
    int n_norms, norm_opts[MAX_NORMS];
    int n_stages;
    pcre2_code *regex[MAX_STAGES];
    int ignore_merges;
};

/* ---------------------------------------------------------------- byte-level alphabet */

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100 + n in byte order. */
static void byte_level_tables(uint32_t byte_cp[256], int16_t cp_byte[512]) {
    int n = 0;
    for (int i = 0; i < 512; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

static int utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Scan one UTF-8 sequence at s[0..n) (n >= 1), following the Unicode "maximal subpart" rule.
 * Returns its length k > 0 when valid (*cp set), or -k for an invalid maximal subpart of k bytes;
 * *incomplete is set when that subpart is a valid prefix cut off by the end of the buffer. */
static int utf8_scan(const uint8_t *s, size_t n, uint32_t *cp, int *incomplete) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    int need;
    uint32_t c;
    *incomplete = 0;
    if (b < 0x80) { *cp = b; return 1; }
    if (b >= 0xC2 && b <= 0xDF) { need = 1; c = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { need = 2; c = b & 0x0F; lo = b == 0xE0 ? 0xA0 : 0x80; hi = b == 0xED ? 0x9F : 0xBF; }
    else if (b >= 0xF0 && b <= 0xF4) { need = 3; c = b & 0x07; lo = b == 0xF0 ? 0x90 : 0x80; hi = b == 0xF4 ? 0x8F : 0xBF; }
    else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) { *incomplete = 1; return -i; }
        if (s[i] < lo || s[i] > hi) return -i;
        c = (c << 6) | (s[i] & 0x3F);
        lo = 0x80; hi = 0xBF;
    }
    *cp = c;
    return need + 1;
}

/* Copy src[0..n) to dst replacing each invalid maximal subpart by U+FFFD (dst holds >= 3n bytes).
 * Returns the output length; *n_bad counts replacements. A cut-off tail is replaced too. */
static size_t utf8_sanitize(const uint8_t *src, size_t n, char *dst, int *n_bad) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int inc, k = utf8_scan(src + i, n - i, &cp, &inc);
        if (k > 0) { memcpy(dst + o, src + i, (size_t)k); o += (size_t)k; i += (size_t)k; continue; }
        memcpy(dst + o, "\xEF\xBF\xBD", 3);
        o += 3; i += (size_t)-k; (*n_bad)++;
    }
    return o;
}

/* Number of invalid subparts in s[0..n) (0 means the text is valid UTF-8). */
static int utf8_count_invalid(const uint8_t *s, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int inc, k;
        if (s[i] < 0x80) { i++; continue; }
        k = utf8_scan(s + i, n - i, &cp, &inc);
        if (k < 0) { bad++; k = -k; }
        i += (size_t)k;
    }
    return bad;
}

/* ---------------------------------------------------------------- hash tables */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h ^ (h >> 15);
}

static uint32_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32);
}

static uint32_t table_size(size_t n) {
    uint32_t s = 1024;
    while (s < 2 * n) s <<= 1;
    return s;
}

/* Slot of spelling s[0..n) in str_hash: the slot holding it, or the empty slot where it would go. */
static uint32_t str_slot(const llm_tokenizer *t, const char *s, size_t n) {
    uint32_t i = hash_bytes(s, n) & t->str_mask;
    for (;; i = (i + 1) & t->str_mask) {
        int32_t id = t->str_hash[i];
        if (id < 0) return i;
        span sp = t->tok_str[id];
        if (sp.len == n && memcmp(t->arena + sp.off, s, n) == 0) return i;
    }
}

static int32_t str_lookup(const llm_tokenizer *t, const char *s, size_t n) {
    return t->str_hash[str_slot(t, s, n)];
}

static const merge_slot *merge_lookup(const llm_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
    for (uint32_t i = hash_pair(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *m = &t->merge_hash[i];
        if (m->key == key) return m;
        if (m->key == 0) return NULL;
    }
}

/* Insert or overwrite (later merges of the same pair win, as in tokenizers). */
static void merge_insert(llm_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    uint64_t key = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
    uint32_t i = hash_pair(key) & t->merge_mask;
    while (t->merge_hash[i].key != 0 && t->merge_hash[i].key != key) i = (i + 1) & t->merge_mask;
    t->merge_hash[i] = (merge_slot){key, rank, new_id};
}

/* ---------------------------------------------------------------- loading */

static omni_status arena_add(llm_tokenizer *t, const char *s, size_t n, span *out) {
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 20;
        while (cap < t->arena_len + n + 1) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
        t->arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = 0;
    *out = (span){(uint32_t)t->arena_len, (uint32_t)n};
    t->arena_len += n + 1;
    return OMNI_OK;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
        else { buf[n] = 0; *len = (size_t)n; }
    }
    fclose(f);
    return buf;
}

/* Largest id in model.vocab and added_tokens, or -1 with an error set. */
static int max_token_id(const cJSON *vocab, const cJSON *added, const char *path) {
    int max_id = -1;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_ID) {
            omni_fail(OMNI_ERR_MODEL, "%s: model.vocab entry \"%s\" has an invalid id", path, e->string);
            return -1;
        }
        if (e->valueint > max_id) max_id = e->valueint;
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_ID ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "content"))) {
            omni_fail(OMNI_ERR_MODEL, "%s: added_tokens entry without a valid id/content", path);
            return -1;
        }
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) omni_fail(OMNI_ERR_MODEL, "%s: model.vocab is empty", path);
    return max_id;
}

/* Raw bytes of a byte-level spelling (written to out, >= n bytes); a spelling with a character outside the
 * byte alphabet decodes to its own UTF-8 bytes, as the ByteLevel decoder does. */
static size_t byte_level_decode(const char *s, size_t n, const int16_t cp_byte[512], char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int inc, k = utf8_scan((const uint8_t *)s + i, n - i, &cp, &inc);
        if (k < 0 || cp >= 512 || cp_byte[cp] < 0) { memcpy(out, s, n); return n; }
        out[o++] = (char)cp_byte[cp];
        i += (size_t)k;
    }
    return o;
}

static omni_status set_token(llm_tokenizer *t, int32_t id, const char *str, size_t n, const char *bytes,
                             size_t nb, uint8_t flags) {
    omni_status st = arena_add(t, str, n, &t->tok_str[id]);
    if (st == OMNI_OK) st = arena_add(t, bytes, nb, &t->tok_bytes[id]);
    t->flags[id] = flags;
    if (st != OMNI_OK) return st;
    uint32_t slot = str_slot(t, str, n);
    int32_t old = t->str_hash[slot];
    if (old < 0 || (flags & FLAG_ADDED) || !(t->flags[old] & FLAG_ADDED)) t->str_hash[slot] = id;
    return OMNI_OK;
}

static omni_status load_vocab(llm_tokenizer *t, const cJSON *vocab) {
    int16_t cp_byte[512];
    char buf[1024];
    byte_level_tables(t->byte_cp, cp_byte);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        size_t n = strlen(e->string);
        char *tmp = n <= sizeof buf ? buf : malloc(n);
        if (!tmp) return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
        size_t nb = byte_level_decode(e->string, n, cp_byte, tmp);
        omni_status st = set_token(t, e->valueint, e->string, n, tmp, nb, FLAG_USED);
        if (tmp != buf) free(tmp);
        if (st != OMNI_OK) return st;
    }
    for (int b = 0; b < 256; b++) {
        int k = utf8_put(t->byte_cp[b], buf);
        t->byte_id[b] = str_lookup(t, buf, (size_t)k);
    }
    return OMNI_OK;
}

/* Split one merges entry ("a b" or ["a","b"]) into its two spellings. */
static int merge_parts(const cJSON *m, const char **a, size_t *na, const char **b, size_t *nb) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return 0;
        *a = s; *na = (size_t)(sp - s); *b = sp + 1; *nb = strlen(sp + 1);
        return 1;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring; *na = strlen(*a);
        *b = m->child->next->valuestring; *nb = strlen(*b);
        return 1;
    }
    return 0;
}

static omni_status load_merges(llm_tokenizer *t, const cJSON *merges, const char *path) {
    int n = cJSON_GetArraySize(merges), rank = 0;
    char buf[2048];
    t->merge_mask = table_size((size_t)n) - 1;
    t->merge_hash = calloc((size_t)t->merge_mask + 1, sizeof *t->merge_hash);
    if (!t->merge_hash) return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t na, nb;
        if (!merge_parts(m, &a, &na, &b, &nb))
            return omni_fail(OMNI_ERR_MODEL, "%s: model.merges[%d] is not \"a b\" or [\"a\", \"b\"]", path, rank);
        int32_t ia = str_lookup(t, a, na), ib = str_lookup(t, b, nb), im = -1;
        if (na + nb <= sizeof buf) {
            memcpy(buf, a, na);
            memcpy(buf + na, b, nb);
            im = str_lookup(t, buf, na + nb);
        }
        if (ia < 0 || ib < 0 || im < 0)
            return omni_fail(OMNI_ERR_MODEL, "%s: model.merges[%d] (\"%.*s\" \"%.*s\") uses a token not in model.vocab",
                             path, rank, (int)na, a, (int)nb, b);
        merge_insert(t, ia, ib, rank, im);
    }
    return OMNI_OK;
}

static int cmp_added(const void *x, const void *y) {
    const added_tok *a = x, *b = y;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id - b->id;
}

static omni_status load_added(llm_tokenizer *t, const cJSON *added) {
    int n = cJSON_GetArraySize(added);
    if (n == 0) return OMNI_OK;
    t->added = calloc((size_t)n, sizeof *t->added);
    if (!t->added) return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    for (const cJSON *a = added->child; a; a = a->next) {
        const char *s = cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
        int32_t id = cJSON_GetObjectItemCaseSensitive(a, "id")->valueint;
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        size_t len = strlen(s);
        if (len == 0) continue;
        omni_status st = set_token(t, id, s, len, s, len, FLAG_USED | FLAG_ADDED | (special ? FLAG_SPECIAL : 0));
        if (st != OMNI_OK) return st;
        t->added[t->n_added++] = (added_tok){id, special, t->tok_str[id].off, (uint32_t)len};
        t->added_first[(uint8_t)s[0]] = 1;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    return OMNI_OK;
}

/* ---------------------------------------------------------------- normalizer / pre-tokenizer config */

static omni_status parse_normalizer(llm_tokenizer *t, const cJSON *nz, const char *path) {
    if (!nz || cJSON_IsNull(nz)) return OMNI_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(nz, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
        for (const cJSON *e = list ? list->child : NULL; e; e = e->next) {
            omni_status st = parse_normalizer(t, e, path);
            if (st != OMNI_OK) return st;
        }
        return OMNI_OK;
    }
    int opts = UTF8PROC_STABLE;
    if (strcmp(ty, "NFC") == 0) opts |= UTF8PROC_COMPOSE;
    else if (strcmp(ty, "NFD") == 0) opts |= UTF8PROC_DECOMPOSE;
    else if (strcmp(ty, "NFKC") == 0) opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (strcmp(ty, "NFKD") == 0) opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: normalizer type \"%s\" is not supported (NFC/NFD/NFKC/NFKD/Sequence)", path, ty);
    if (t->n_norms == MAX_NORMS) return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: too many normalizer steps", path);
    t->norm_opts[t->n_norms++] = opts;
    return OMNI_OK;
}

/* Rewrite an Oniguruma-style pattern for PCRE2: \s -> White_Space class, \S -> its complement (outside
 * character classes; inside a class \s gets the same members, \S is kept). out has room for
 * strlen(p) * sizeof WS_CLASS + 256 bytes. */
static void translate_regex(const char *p, char *out) {
    int in_class = 0;
    size_t o = 0;
    for (size_t i = 0; p[i]; i++) {
        if (p[i] == '\\' && p[i + 1]) {
            char c = p[i + 1];
            if (c == 's' || (c == 'S' && !in_class)) {
                o += (size_t)sprintf(out + o, "%s%s%s", in_class ? "" : (c == 's' ? "[" : "[^"), WS_CLASS,
                                     in_class ? "" : "]");
            } else {
                out[o++] = p[i];
                out[o++] = c;
            }
            i++;
            continue;
        }
        if (p[i] == '[' && !in_class) in_class = 1;
        else if (p[i] == ']' && in_class) in_class = 0;
        out[o++] = p[i];
    }
    out[o] = 0;
}

static omni_status add_stage(llm_tokenizer *t, const char *pattern, int literal, const char *path) {
    if (t->n_stages == MAX_STAGES) return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: too many pre-tokenizer splits", path);
    size_t n = strlen(pattern);
    char *pat = malloc(n * sizeof WS_CLASS + 256); /* each \s grows to the class */
    if (!pat) return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    if (literal) memcpy(pat, pattern, n + 1);
    else translate_regex(pattern, pat);
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &err, &eoff, NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: pre-tokenizer regex does not compile (%s at %zu)", path,
                         (const char *)msg, (size_t)eoff);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    t->regex[t->n_stages++] = re;
    return OMNI_OK;
}

static omni_status parse_split(llm_tokenizer *t, const cJSON *pt, const char *path) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
    const cJSON *re = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
    const cJSON *str = pat ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "invert")))
        return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: only Split with behavior \"Isolated\" and invert false is supported", path);
    if (cJSON_IsString(re)) return add_stage(t, re->valuestring, 0, path);
    if (cJSON_IsString(str)) return add_stage(t, str->valuestring, 1, path);
    return omni_fail(OMNI_ERR_MODEL, "%s: Split pre-tokenizer without a Regex or String pattern", path);
}

static omni_status parse_pretok(llm_tokenizer *t, const cJSON *pt, const char *path) {
    if (!pt || cJSON_IsNull(pt)) return OMNI_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        for (const cJSON *e = list ? list->child : NULL; e; e = e->next) {
            omni_status st = parse_pretok(t, e, path);
            if (st != OMNI_OK) return st;
        }
        return OMNI_OK;
    }
    if (strcmp(ty, "Split") == 0) return parse_split(t, pt, path);
    if (strcmp(ty, "ByteLevel") == 0) {
        const cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "add_prefix_space")))
            return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: ByteLevel add_prefix_space=true is not supported", path);
        if (!use_regex || cJSON_IsTrue(use_regex)) return add_stage(t, GPT2_REGEX, 0, path);
        return OMNI_OK;
    }
    return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: pre_tokenizer type \"%s\" is not supported (Split/ByteLevel/Sequence)", path, ty);
}

/* ---------------------------------------------------------------- load / free */

static omni_status check_model(const cJSON *model, const char *path) {
    if (!cJSON_IsObject(model)) return omni_fail(OMNI_ERR_MODEL, "%s: no \"model\" object", path);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE") != 0)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: model type \"%s\" is not supported (BPE only)", path, type->valuestring);
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(model, "vocab")))
        return omni_fail(OMNI_ERR_MODEL, "%s: model.vocab is missing or not an object", path);
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && !cJSON_IsArray(merges)) return omni_fail(OMNI_ERR_MODEL, "%s: model.merges is not an array", path);
    return OMNI_OK;
}

static omni_status alloc_tables(llm_tokenizer *t, int max_id) {
    t->n_ids = max_id + 1;
    t->tok_str = calloc((size_t)t->n_ids, sizeof *t->tok_str);
    t->tok_bytes = calloc((size_t)t->n_ids, sizeof *t->tok_bytes);
    t->flags = calloc((size_t)t->n_ids, 1);
    t->str_mask = table_size((size_t)t->n_ids) - 1;
    t->str_hash = malloc(((size_t)t->str_mask + 1) * sizeof *t->str_hash);
    if (!t->tok_str || !t->tok_bytes || !t->flags || !t->str_hash)
        return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->str_hash, 0xFF, ((size_t)t->str_mask + 1) * sizeof *t->str_hash);
    return OMNI_OK;
}

static omni_status load_json(llm_tokenizer *t, const cJSON *root, const char *path) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    omni_status st = check_model(model, path);
    if (st != OMNI_OK) return st;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsArray(added)) return omni_fail(OMNI_ERR_MODEL, "%s: added_tokens is not an array", path);
    int max_id = max_token_id(vocab, added, path);
    if (max_id < 0) return OMNI_ERR_MODEL;
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    if ((st = alloc_tables(t, max_id)) != OMNI_OK) return st;
    if ((st = load_vocab(t, vocab)) != OMNI_OK) return st;
    if (merges && (st = load_merges(t, merges, path)) != OMNI_OK) return st;
    if (added && (st = load_added(t, added)) != OMNI_OK) return st;
    if ((st = parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), path)) != OMNI_OK) return st;
    return parse_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path);
}

omni_status llm_tokenizer_load(const char *path, llm_tokenizer **out) {
    size_t len = 0;
    *out = NULL;
    char *text = read_file(path, &len);
    if (!text) return omni_fail(OMNI_ERR_MODEL, "%s: cannot read tokenizer file", path);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return omni_fail(OMNI_ERR_MODEL, "%s: not a JSON object (tokenizer.json expected)", path);
    }
    llm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { cJSON_Delete(root); return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory"); }
    omni_status st = load_json(t, root, path);
    cJSON_Delete(root);
    if (st != OMNI_OK) { llm_tokenizer_free(t); return st; }
    *out = t;
    return OMNI_OK;
}

void llm_tokenizer_free(llm_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->regex[i]);
    free(t->arena);
    free(t->tok_str);
    free(t->tok_bytes);
    free(t->flags);
    free(t->str_hash);
    free(t->merge_hash);
    free(t->added);
    free(t);
}

/* ---------------------------------------------------------------- queries */

int llm_tokenizer_vocab_size(const llm_tokenizer *t) { return t->n_ids; }

int32_t llm_tokenizer_token_id(const llm_tokenizer *t, const char *token) {
    return token ? str_lookup(t, token, strlen(token)) : -1;
}

const char *llm_tokenizer_token_bytes(const llm_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !(t->flags[id] & FLAG_USED)) { if (len) *len = 0; return NULL; }
    if (len) *len = t->tok_bytes[id].len;
    return t->arena + t->tok_bytes[id].off;
}

int llm_tokenizer_is_special(const llm_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & FLAG_SPECIAL) != 0;
}

/* ---------------------------------------------------------------- encoding */

/* Per-call cache of short pieces -> ids (direct-mapped; enabled for long texts, where words repeat). */
#define CACHE_SLOTS 4096
#define CACHE_KEY 14
#define CACHE_IDS 6
#define CACHE_MIN_TEXT 4096
typedef struct { uint8_t klen, nids; char key[CACHE_KEY]; int32_t ids[CACHE_IDS]; } cache_slot;

typedef struct { int32_t id, prev, next, alive; } bpe_sym;
typedef struct { int32_t rank, pos, new_id; } bpe_merge;

/* Per-call state of llm_tokenizer_encode: output ids and scratch buffers grown on demand. */
typedef struct {
    const llm_tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    bpe_sym *sym;
    bpe_merge *heap;
    size_t sym_cap;
    char *bl; /* byte-level spelling of a piece (ignore_merges lookups) */
    cache_slot *cache; /* [CACHE_SLOTS] or NULL */
    pcre2_match_data *md[MAX_STAGES];
    omni_status st;
} enc_ctx;

static int push_id(enc_ctx *c, int32_t id) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        int32_t *p = realloc(c->ids, cap * sizeof *p);
        if (!p) { c->st = omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory"); return 0; }
        c->ids = p;
        c->cap = cap;
    }
    c->ids[c->n++] = id;
    return 1;
}

static int grow_scratch(enc_ctx *c, size_t n) {
    if (n <= c->sym_cap) return 1;
    size_t cap = n < 64 ? 64 : n * 2;
    free(c->sym); free(c->heap); free(c->bl);
    c->sym = malloc(cap * sizeof *c->sym);
    c->heap = malloc(3 * cap * sizeof *c->heap);
    c->bl = malloc(2 * cap);
    c->sym_cap = c->sym && c->heap && c->bl ? cap : 0;
    if (!c->sym_cap) c->st = omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    return c->sym_cap != 0;
}

/* Min-heap on (rank, pos): the lowest rank merges first, the leftmost one on ties (as tokenizers). */
static int merge_less(bpe_merge a, bpe_merge b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(bpe_merge *h, size_t *n, bpe_merge m) {
    size_t i = (*n)++;
    while (i > 0 && merge_less(m, h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = m;
}

static bpe_merge heap_pop(bpe_merge *h, size_t *n) {
    bpe_merge top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        bpe_merge bm = last;
        if (l < *n && merge_less(h[l], bm)) { best = l; bm = h[l]; }
        if (l + 1 < *n && merge_less(h[l + 1], bm)) best = l + 1;
        if (best == i) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = last;
    return top;
}

static void push_pair(const llm_tokenizer *t, bpe_sym *s, bpe_merge *h, size_t *nh, int32_t pos) {
    const merge_slot *m = merge_lookup(t, s[pos].id, s[s[pos].next].id);
    if (m) heap_push(h, nh, (bpe_merge){m->rank, pos, m->new_id});
}

/* BPE of one pre-tokenized piece p[0..n) (raw bytes): ids appended to c. */
static void bpe_piece(enc_ctx *c, const uint8_t *p, size_t n) {
    const llm_tokenizer *t = c->t;
    if (n == 1 && t->byte_id[p[0]] >= 0) { push_id(c, t->byte_id[p[0]]); return; }
    if (!grow_scratch(c, n)) return;
    bpe_sym *s = c->sym;
    bpe_merge *h = c->heap;
    size_t nh = 0;
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        if (t->byte_id[p[i]] < 0) continue; /* unknown byte, no unk token: dropped as in tokenizers */
        s[ns] = (bpe_sym){t->byte_id[p[i]], ns - 1, ns + 1, 1};
        ns++;
    }
    if (ns == 0) return;
    s[ns - 1].next = -1;
    for (int32_t i = 0; i + 1 < ns; i++) push_pair(t, s, h, &nh, i);
    while (nh > 0) {
        bpe_merge m = heap_pop(h, &nh);
        if (!s[m.pos].alive || s[m.pos].next < 0) continue;
        int32_t r = s[m.pos].next;
        const merge_slot *cur = merge_lookup(t, s[m.pos].id, s[r].id);
        if (!cur || cur->new_id != m.new_id) continue; /* stale entry */
        s[m.pos].id = m.new_id;
        s[m.pos].next = s[r].next;
        s[r].alive = 0;
        if (s[r].next >= 0) s[s[r].next].prev = m.pos;
        if (s[m.pos].prev >= 0) push_pair(t, s, h, &nh, s[m.pos].prev);
        if (s[m.pos].next >= 0) push_pair(t, s, h, &nh, m.pos);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (!push_id(c, s[i].id)) return;
}

/* With ignore_merges, a piece that is itself a vocabulary token is emitted whole. */
static int whole_word(enc_ctx *c, const uint8_t *p, size_t n) {
    if (!grow_scratch(c, n)) return 1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)utf8_put(c->t->byte_cp[p[i]], c->bl + o);
    int32_t id = str_lookup(c->t, c->bl, o);
    if (id < 0 || (c->t->flags[id] & FLAG_ADDED)) return 0;
    push_id(c, id);
    return 1;
}

static void encode_piece(enc_ctx *c, const uint8_t *p, size_t n) {
    if (n == 0 || c->st != OMNI_OK) return;
    cache_slot *slot = NULL;
    if (c->cache && n <= CACHE_KEY && n > 1) {
        slot = &c->cache[hash_bytes((const char *)p, n) & (CACHE_SLOTS - 1)];
        if (slot->klen == n && memcmp(slot->key, p, n) == 0) {
            for (int i = 0; i < slot->nids; i++) push_id(c, slot->ids[i]);
            return;
        }
    }
    size_t first = c->n;
    if (!(c->t->ignore_merges && whole_word(c, p, n))) bpe_piece(c, p, n);
    if (slot && c->st == OMNI_OK && c->n - first <= CACHE_IDS) {
        slot->klen = (uint8_t)n;
        slot->nids = (uint8_t)(c->n - first);
        memcpy(slot->key, p, n);
        memcpy(slot->ids, c->ids + first, (c->n - first) * sizeof *c->ids);
    }
}

/* Pre-tokenizer stage k on s[0..n): regex matches and the gaps between them are pieces for stage k+1. */
static void split_stage(enc_ctx *c, int k, const uint8_t *s, size_t n) {
    if (k == c->t->n_stages) { encode_piece(c, s, n); return; }
    size_t last = 0, pos = 0;
    while (pos < n && c->st == OMNI_OK) {
        int rc = pcre2_match(c->t->regex[k], s, n, pos, PCRE2_NO_UTF_CHECK, c->md[k], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) { c->st = omni_fail(OMNI_ERR_RUNTIME, "tokenizer: pre-tokenizer regex failed (PCRE2 error %d)", rc); return; }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md[k]);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            pos = ms + 1;
            while (pos < n && (s[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (ms > last) split_stage(c, k + 1, s + last, ms - last);
        split_stage(c, k + 1, s + ms, me - ms);
        last = pos = me;
    }
    if (last < n) split_stage(c, k + 1, s + last, n - last);
}

/* True when NFC cannot change s (no code point >= U+0300, whose lead bytes are >= 0xCC). */
static int nfc_trivial(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0xCC) return 0;
    return 1;
}

/* Normalize then pre-tokenize and BPE one segment of text without added tokens. */
static void encode_segment(enc_ctx *c, const uint8_t *s, size_t n) {
    const llm_tokenizer *t = c->t;
    uint8_t *norm = NULL;
    for (int i = 0; i < t->n_norms && n > 0; i++) {
        int nfc = t->norm_opts[i] == (UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (nfc && nfc_trivial(s, n)) continue;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map(s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)t->norm_opts[i]);
        if (r < 0) { c->st = omni_fail(OMNI_ERR_RUNTIME, "tokenizer: normalization failed (%s)", utf8proc_errmsg(r)); free(norm); return; }
        free(norm);
        norm = dst;
        s = dst;
        n = (size_t)r;
    }
    split_stage(c, 0, s, n);
    free(norm);
}

/* Leftmost-longest added token starting at s[0..n); returns its index in t->added or -1. */
static int match_added(const llm_tokenizer *t, const uint8_t *s, size_t n, int parse_special) {
    for (int i = 0; i < t->n_added; i++) {
        const added_tok *a = &t->added[i];
        if (a->len <= n && (parse_special || !a->special) && memcmp(s, t->arena + a->off, a->len) == 0) return i;
    }
    return -1;
}

static void encode_text(enc_ctx *c, const uint8_t *s, size_t n, int parse_special) {
    const llm_tokenizer *t = c->t;
    size_t seg = 0;
    for (size_t i = 0; i < n && c->st == OMNI_OK;) {
        int a = t->added_first[s[i]] ? match_added(t, s + i, n - i, parse_special) : -1;
        if (a < 0) { i++; continue; }
        if (i > seg) encode_segment(c, s + seg, i - seg);
        push_id(c, t->added[a].id);
        i += t->added[a].len;
        seg = i;
    }
    if (seg < n && c->st == OMNI_OK) encode_segment(c, s + seg, n - seg);
}

static void enc_ctx_free(enc_ctx *c) {
    for (int k = 0; k < MAX_STAGES; k++) pcre2_match_data_free(c->md[k]);
    free(c->sym);
    free(c->heap);
    free(c->bl);
    free(c->cache);
}

omni_status llm_tokenizer_encode(const llm_tokenizer *t, const char *text, size_t len, int parse_special,
                                 int32_t **ids, int *n_ids, int *n_invalid) {
    enc_ctx c = {.t = t};
    char *clean = NULL;
    const uint8_t *s = (const uint8_t *)text;
    int bad = len ? utf8_count_invalid(s, len) : 0;
    *ids = NULL;
    *n_ids = 0;
    if (n_invalid) *n_invalid = bad;
    if (len > (size_t)1 << 30) return omni_fail(OMNI_ERR_INPUT, "tokenizer: text too long (%zu bytes)", len);
    if (bad) {
        int b2 = 0;
        if (!(clean = malloc(3 * len))) return omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
        len = utf8_sanitize(s, len, clean, &b2);
        s = (const uint8_t *)clean;
    }
    for (int k = 0; k < t->n_stages && c.st == OMNI_OK; k++)
        if (!(c.md[k] = pcre2_match_data_create_from_pattern(t->regex[k], NULL)))
            c.st = omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    if (len >= CACHE_MIN_TEXT && !(c.cache = calloc(CACHE_SLOTS, sizeof *c.cache)))
        c.st = omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    c.cap = 64; /* *ids is non-NULL even for an empty result */
    if (c.st == OMNI_OK && !(c.ids = malloc(c.cap * sizeof *c.ids)))
        c.st = omni_fail(OMNI_ERR_NOMEM, "tokenizer: out of memory");
    if (c.st == OMNI_OK) encode_text(&c, s, len, parse_special);
    enc_ctx_free(&c);
    free(clean);
    if (c.st != OMNI_OK) { free(c.ids); return c.st; }
    *ids = c.ids;
    *n_ids = (int)c.n;
    return OMNI_OK;
}

/* ---------------------------------------------------------------- decoding */

struct llm_detok {
    const llm_tokenizer *t;
    int skip_special;
    uint8_t *buf; /* bytes received but not yet emitted */
    size_t len, cap;
};

llm_detok *llm_detok_new(const llm_tokenizer *t, int skip_special) {
    llm_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->t = t;
    d->skip_special = skip_special;
    return d;
}

void llm_detok_free(llm_detok *d) {
    if (!d) return;
    free(d->buf);
    free(d);
}

/* Move complete UTF-8 from d->buf to out (invalid subparts as U+FFFD; an incomplete tail only when final). */
static int detok_emit(llm_detok *d, char *out, int cap, int final) {
    size_t i = 0, o = 0, room = cap > 0 ? (size_t)cap - 1 : 0;
    while (i < d->len) {
        uint32_t cp;
        int inc, k = utf8_scan(d->buf + i, d->len - i, &cp, &inc);
        if (k < 0 && inc && !final) break;
        size_t w = k > 0 ? (size_t)k : 3;
        if (o + w > room) break;
        if (k > 0) memcpy(out + o, d->buf + i, w);
        else memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += w;
        i += (size_t)(k > 0 ? k : -k);
    }
    if (i > 0) {
        memmove(d->buf, d->buf + i, d->len - i);
        d->len -= i;
    }
    if (cap > 0) out[o] = 0;
    return (int)o;
}

int llm_detok_push(llm_detok *d, int32_t id, char *out, int cap) {
    size_t n = 0;
    const char *b = llm_tokenizer_token_bytes(d->t, id, &n);
    if (b && !(d->skip_special && llm_tokenizer_is_special(d->t, id))) {
        if (d->len + n > d->cap) {
            size_t nc = d->cap ? d->cap : 64;
            while (nc < d->len + n) nc *= 2;
            uint8_t *p = realloc(d->buf, nc);
            if (!p) n = 0; /* out of memory: the token is dropped */
            else { d->buf = p; d->cap = nc; }
        }
        if (n > 0) memcpy(d->buf + d->len, b, n);
        d->len += n;
    }
    return detok_emit(d, out, cap, 0);
}

int llm_detok_flush(llm_detok *d, char *out, int cap) { return detok_emit(d, out, cap, 1); }

char *llm_tokenizer_decode(const llm_tokenizer *t, const int32_t *ids, int n, int skip_special) {
    size_t total = 0, o = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        if (llm_tokenizer_token_bytes(t, ids[i], &k) && !(skip_special && llm_tokenizer_is_special(t, ids[i])))
            total += k;
    }
    char *raw = malloc(total + 1), *out = malloc(3 * total + 1);
    if (!raw || !out) { free(raw); free(out); return NULL; }
    for (int i = 0; i < n; i++) {
        size_t k;
        const char *b = llm_tokenizer_token_bytes(t, ids[i], &k);
        if (b && !(skip_special && llm_tokenizer_is_special(t, ids[i]))) { memcpy(raw + o, b, k); o += k; }
    }
    int bad = 0;
    size_t m = utf8_sanitize((const uint8_t *)raw, o, out, &bad);
    out[m] = 0;
    free(raw);
    return out;
}
