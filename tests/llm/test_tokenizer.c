/* test_tokenizer.c - byte-level BPE tokenizer: load errors, a hand-built tiny BPE, and exact parity with the
 * `tokenizers` reference on the real Qwen3 vocabulary (cases from tools/reference/make_tokenizer_cases.py in
 * tests/fixtures/tokenizer/), plus round trips, invalid UTF-8, parse_special=0, the streaming detokenizer,
 * load time and encode throughput.
 *
 * Real-vocabulary parts need ../shared/data/qwen3-tokenizer/tokenizer.json; without it they are skipped
 * (the rest still runs; exit 77 only if the rest passed). The small trained tokenizer tests/fixtures/tok-small is
 * checked as is and in a GPT-2-style variant (ByteLevel use_regex=true, ignore_merges=true). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "kernels/status.h"
#include "llm/tokenizer.h"

/* CPU time used by this process (ms). */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define QWEN_JSON OMNI_SHARED_DIR "/data/qwen3-tokenizer/tokenizer.json"

/* ---------------------------------------------------------------- helpers */

/* Write text to a fresh temporary file; returns its path in buf. */
static const char *write_temp(const char *text, char *buf) {
    strcpy(buf, "/tmp/omni_tok_XXXXXX");
    int fd = mkstemp(buf);
    if (fd < 0) return NULL;
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) buf[0] = 0;
    close(fd);
    return buf;
}

static int put_utf8(unsigned cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Decode the JSON string literal at s (opening quote) into out (UTF-8, may contain NUL); returns the length
 * or -1. *end points after the closing quote. out needs strlen(s) bytes. */
static long json_string(const char *s, const char **end, char *out) {
    long o = 0;
    if (*s++ != '"') return -1;
    while (*s && *s != '"') {
        if (*s != '\\') { out[o++] = *s++; continue; }
        s++;
        char c = *s++;
        switch (c) {
        case '"': case '\\': case '/': out[o++] = c; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        default: break;
        }
        if (c == 'u') {
            unsigned cp = (unsigned)strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            o += put_utf8(cp, out + o);
        } else {
            return -1;
        }
    }
    if (*s != '"') return -1;
    *end = s + 1;
    return o;
}

static int parse_ids(const char *s, int32_t *ids, int max) {
    int n = 0;
    while (*s && *s != '\n' && n < max) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s) break;
        ids[n++] = (int32_t)v;
        s = e;
    }
    return n;
}

/* Structural UTF-8 check (lead byte + continuation bytes, nothing cut off); enough to spot split characters. */
static int valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int k = u[i] < 0x80 ? 1 : (u[i] >> 5) == 6 ? 2 : (u[i] >> 4) == 14 ? 3 : (u[i] >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + (size_t)k > n) return 0;
        for (int j = 1; j < k; j++)
            if ((u[i + (size_t)j] >> 6) != 2) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* ---------------------------------------------------------------- load errors */

static void test_load_errors(void) {
    char path[64];
    llm_tokenizer *t = (llm_tokenizer *)1;
    omni_status st = llm_tokenizer_load("/nonexistent/omni/tokenizer.json", &t);
    CHECK(st == OMNI_ERR_MODEL && t == NULL, "missing file: status %d", st);
    CHECK(strstr(omni_last_error(), "/nonexistent/omni/tokenizer.json") != NULL, "message: %s", omni_last_error());

    static const struct { const char *json, *expect; omni_status st; } bad[] = {
        {"this is not json {", "invalid JSON near byte 0", OMNI_ERR_MODEL},
        {"[1, 2, 3]", "not a JSON", OMNI_ERR_MODEL},
        {"{\"model\": {\"type\": \"BPE\", \"merges\": []}}", "model.vocab", OMNI_ERR_MODEL},
        {"{\"version\": \"1.0\"}", "model", OMNI_ERR_MODEL},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}", "merges[0]",
         OMNI_ERR_MODEL},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "merges[0]", OMNI_ERR_MODEL},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -5}}}", "invalid id", OMNI_ERR_MODEL},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", "WordPiece", OMNI_ERR_UNSUPPORTED},
        {"{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"vocab\": {\"a\": 0}}}", "Lowercase",
         OMNI_ERR_UNSUPPORTED},
        {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"},"
         " \"model\": {\"vocab\": {\"a\": 0}}}", "regex", OMNI_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!write_temp(bad[i].json, path) || !path[0]) { CHECK(0, "cannot write temp file"); continue; }
        t = (llm_tokenizer *)1;
        st = llm_tokenizer_load(path, &t);
        CHECK(st == bad[i].st && t == NULL, "case %zu: status %d (want %d)", i, st, bad[i].st);
        CHECK(strstr(omni_last_error(), bad[i].expect) != NULL && strstr(omni_last_error(), path) != NULL,
              "case %zu: message \"%s\" should name the file and \"%s\"", i, omni_last_error(), bad[i].expect);
        unlink(path);
    }
    llm_tokenizer_free(NULL);
    llm_detok_free(NULL);
}

/* ---------------------------------------------------------------- tiny hand-built BPE */

/* Vocab: the 256 byte-level characters with id = byte value, then "he" 256, "ll" 257, "hell" 258, "Ġw" 259,
 * plus added "<|end|>" 300 (special) and "<x>" 301. Merges mix both JSON forms; ByteLevel use_regex=true. */
static char *tiny_json(void) {
    char *j = malloc(16384), *p = j;
    p += sprintf(p, "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|end|>\", \"special\": true},"
                    "{\"id\": 301, \"content\": \"<x>\", \"special\": false}],"
                    "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                    "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unsigned cp = printable ? (unsigned)b : (unsigned)(256 + n++);
        char u[8];
        int k = put_utf8(cp, u);
        if (b == '"' || b == '\\') p += sprintf(p, "\"\\%c\": %d, ", b, b);
        else p += sprintf(p, "\"%.*s\": %d, ", k, u, b);
    }
    p += sprintf(p, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"\xC4\xA0w\": 259},"
                    "\"merges\": [[\"h\", \"e\"], \"l l\", [\"he\", \"ll\"], \"\xC4\xA0 w\"]}}");
    return j;
}

static void expect_ids(const llm_tokenizer *t, const char *text, int parse_special, const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    int n = -1;
    omni_status st = llm_tokenizer_encode(t, text, strlen(text), parse_special, &ids, &n, NULL);
    int same = st == OMNI_OK && n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
    CHECK(same, "encode(\"%s\"): status %d, %d ids (want %d), first %d", text, st, n, n_want, n > 0 ? ids[0] : -1);
    free(ids);
}

static void test_tiny(void) {
    char path[64];
    char *json = tiny_json();
    llm_tokenizer *t = NULL;
    if (!write_temp(json, path)) { CHECK(0, "temp file"); free(json); return; }
    free(json);
    omni_status st = llm_tokenizer_load(path, &t);
    unlink(path);
    CHECK(st == OMNI_OK, "tiny load: %s", omni_last_error());
    if (st != OMNI_OK) return;
    CHECK(llm_tokenizer_vocab_size(t) == 302, "vocab size %d", llm_tokenizer_vocab_size(t));
    CHECK(llm_tokenizer_token_id(t, "hell") == 258 && llm_tokenizer_token_id(t, "\xC4\xA0w") == 259 &&
          llm_tokenizer_token_id(t, "<|end|>") == 300 && llm_tokenizer_token_id(t, "nope") == -1, "token_id");
    /* "hello" -> h e l l o: (h,e) rank 0, (l,l) rank 1, (he,ll) rank 2 -> hell o; " world" -> Ġw o r l d */
    expect_ids(t, "hello world", 1, (const int32_t[]){258, 'o', 259, 'o', 'r', 'l', 'd'}, 7);
    expect_ids(t, "lll", 1, (const int32_t[]){257, 'l'}, 2); /* leftmost pair first on equal rank */
    expect_ids(t, "hello<|end|><x>", 1, (const int32_t[]){258, 'o', 300, 301}, 4);
    expect_ids(t, "<|end|><x>", 0, (const int32_t[]){'<', '|', 'e', 'n', 'd', '|', '>', 301}, 8);
    expect_ids(t, "\xC3\xA9", 1, (const int32_t[]){0xC3, 0xA9}, 2);
    size_t len = 0;
    const char *b = llm_tokenizer_token_bytes(t, 259, &len);
    CHECK(b && len == 2 && memcmp(b, " w", 2) == 0, "token_bytes(259)");
    CHECK(llm_tokenizer_token_bytes(t, 280, &len) == NULL && len == 0, "hole in the vocab has no bytes");
    CHECK(llm_tokenizer_token_bytes(t, 302, &len) == NULL && llm_tokenizer_token_bytes(t, -1, &len) == NULL, "range");
    CHECK(llm_tokenizer_is_special(t, 300) && !llm_tokenizer_is_special(t, 301) && !llm_tokenizer_is_special(t, 258),
          "is_special");
    llm_tokenizer_free(t);

    /* no merges, no pre-tokenizer, an unknown byte (no unk token: dropped, as tokenizers does) */
    if (!write_temp("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"\xC4\xA0\": 2}}}", path)) return;
    st = llm_tokenizer_load(path, &t);
    unlink(path);
    CHECK(st == OMNI_OK, "vocab-only load: %s", omni_last_error());
    if (st == OMNI_OK) expect_ids(t, "ab a!", 1, (const int32_t[]){0, 1, 2, 0}, 4);
    llm_tokenizer_free(t);
}

/* ---------------------------------------------------------------- fixture parity */

typedef struct { int cases, ids_bad, rt_checked, rt_bad, inv_bad; } parity_stats;

static void check_case(const llm_tokenizer *t, char kind, const char *text, size_t len, int extra,
                       const int32_t *want, int n_want, int line, parity_stats *ps) {
    int32_t *ids = NULL;
    int n = 0, n_inv = -1;
    omni_status st = llm_tokenizer_encode(t, text, len, kind != 'P', &ids, &n, &n_inv);
    int ok = st == OMNI_OK && n == n_want && (n == 0 || memcmp(ids, want, (size_t)n * sizeof *ids) == 0);
    ps->cases++;
    if (!ok) {
        int d = 0;
        while (d < n && d < n_want && ids[d] == want[d]) d++;
        if (ps->ids_bad++ < 10)
            fprintf(stderr, "line %d (%c, %zu bytes): %d ids, want %d; first difference at %d: %d vs %d\n", line,
                    kind, len, n, n_want, d, d < n ? ids[d] : -1, d < n_want ? want[d] : -1);
    }
    if (kind == 'B' && n_inv != extra && ps->inv_bad++ < 10)
        fprintf(stderr, "line %d: n_invalid %d, want %d\n", line, n_inv, extra);
    if (kind != 'B' && extra == 1 && st == OMNI_OK && !memchr(text, 0, len)) { /* NUL ends decode's string */
        char *dec = llm_tokenizer_decode(t, ids, n, 0);
        ps->rt_checked++;
        if ((!dec || strlen(dec) != len || memcmp(dec, text, len) != 0) && ps->rt_bad++ < 10)
            fprintf(stderr, "line %d: decode(encode(s)) != s\n", line);
        free(dec);
    }
    free(ids);
}

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

/* Run every case of a fixture file. Returns the number of cases, -1 if the file is missing. */
static int run_cases(const llm_tokenizer *t, const char *path, parity_stats *ps) {
    size_t flen = 0;
    char *file = omni_read_file(path, &flen);
    if (!file) return -1;
    char *text = malloc(flen + 1);
    int32_t *want = malloc((flen + 1) * sizeof *want);
    int line = 0;
    for (char *p = file; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        line++;
        if (*p == '#' || *p == '\n') continue;
        char kind = p[0];
        const char *q = p + 2, *end = NULL;
        long len = -1;
        if (kind == 'T' || kind == 'P') {
            len = json_string(q, &end, text);
        } else if (kind == 'B') {
            for (len = 0; q[2 * len] != '\t' && q[2 * len]; len++)
                text[len] = (char)(hexval(q[2 * len]) * 16 + hexval(q[2 * len + 1]));
            end = q + 2 * len;
        }
        if (len < 0 || !end || *end != '\t') { CHECK(0, "%s:%d: malformed line", path, line); continue; }
        char *e2;
        int extra = (int)strtol(end + 1, &e2, 10);
        int n_want = parse_ids(e2, want, (int)flen);
        check_case(t, kind, text, (size_t)len, extra, want, n_want, line, ps);
    }
    free(file);
    free(text);
    free(want);
    return ps->cases;
}

static void test_parity(const llm_tokenizer *t, const char *cases_path, int min_cases) {
    parity_stats ps = {0};
    double t0 = omni_time_ms();
    int n = run_cases(t, cases_path, &ps);
    CHECK(n >= min_cases, "%s: %d cases (want >= %d)", cases_path, n, min_cases);
    CHECK(ps.ids_bad == 0, "%s: %d of %d cases differ from tokenizers", cases_path, ps.ids_bad, ps.cases);
    CHECK(ps.inv_bad == 0, "%s: %d invalid-UTF-8 counts differ", cases_path, ps.inv_bad);
    CHECK(ps.rt_bad == 0, "%s: %d of %d round trips differ", cases_path, ps.rt_bad, ps.rt_checked);
    printf("parity %s: %d cases, %d ids mismatches, %d/%d round trips ok (%.0f ms)\n", strrchr(cases_path, '/') + 1,
           ps.cases, ps.ids_bad, ps.rt_checked - ps.rt_bad, ps.rt_checked, omni_time_ms() - t0);
}

/* ---------------------------------------------------------------- real-vocabulary behaviour */

static int encode(const llm_tokenizer *t, const char *s, size_t len, int parse_special, int32_t **ids, int *n_inv) {
    int n = -1;
    omni_status st = llm_tokenizer_encode(t, s, len, parse_special, ids, &n, n_inv);
    CHECK(st == OMNI_OK, "encode failed: %s", omni_last_error());
    return st == OMNI_OK ? n : -1;
}

static void test_special_and_edges(const llm_tokenizer *t) {
    int32_t *ids = NULL;
    int n_inv = -1, n;
    const int32_t im_end = llm_tokenizer_token_id(t, "<|im_end|>");
    CHECK(im_end == 151645 && llm_tokenizer_vocab_size(t) == 151669, "im_end %d, vocab %d", im_end,
          llm_tokenizer_vocab_size(t));
    CHECK(llm_tokenizer_is_special(t, im_end) && !llm_tokenizer_is_special(t, llm_tokenizer_token_id(t, "<think>")) &&
          !llm_tokenizer_is_special(t, 9707), "is_special");

    n = encode(t, "", 0, 1, &ids, &n_inv);
    CHECK(n == 0 && ids != NULL && n_inv == 0, "empty string: %d ids", n);
    free(ids);

    const char *s = "<|im_start|>user\nhi<|im_end|>";
    n = encode(t, s, strlen(s), 1, &ids, NULL);
    CHECK(n == 5 && ids[0] == 151644 && ids[4] == im_end, "parse_special=1: %d ids", n);
    free(ids);
    n = encode(t, s, strlen(s), 0, &ids, NULL);
    int any_special = 0;
    for (int i = 0; i < n; i++) any_special |= ids[i] >= 151643;
    char *dec = llm_tokenizer_decode(t, ids, n, 1);
    CHECK(n > 5 && !any_special && dec && strcmp(dec, s) == 0, "parse_special=0 keeps <|im_end|> as text (%d ids)", n);
    free(dec);
    free(ids);

    /* invalid UTF-8: lone continuation, truncated 3-byte, surrogate, overlong, F5 */
    const char bad[] = "a\x80" "b\xE2\x82" "c\xED\xA0\x80" "d\xC0\xAF" "e\xF5";
    n = encode(t, bad, sizeof bad - 1, 1, &ids, &n_inv);
    dec = llm_tokenizer_decode(t, ids, n, 0);
    const char want[] = "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                        "d\xEF\xBF\xBD\xEF\xBF\xBD" "e\xEF\xBF\xBD";
    CHECK(n_inv == 8 && dec && strcmp(dec, want) == 0, "invalid UTF-8: %d replacements (want 8), decoded %s", n_inv,
          dec ? dec : "(null)");
    free(dec);
    free(ids);

    /* decode skip_special drops only "special" added tokens */
    const int32_t mix[] = {151644, 9707, 151667, im_end};
    dec = llm_tokenizer_decode(t, mix, 4, 1);
    CHECK(dec && strcmp(dec, "Hello<think>") == 0, "decode skip_special: %s", dec ? dec : "(null)");
    free(dec);
    dec = llm_tokenizer_decode(t, mix, 4, 0);
    CHECK(dec && strcmp(dec, "<|im_start|>Hello<think><|im_end|>") == 0, "decode: %s", dec ? dec : "(null)");
    free(dec);
}

/* Push ids one by one through a detokenizer with an output buffer of `cap` bytes; returns the joined text. */
static char *stream(const llm_tokenizer *t, const int32_t *ids, int n, int cap, int *chunks_valid) {
    llm_detok *d = llm_detok_new(t, 1);
    char *all = calloc(1, 65536), *out = malloc((size_t)cap);
    size_t o = 0;
    *chunks_valid = 1;
    for (int i = 0; i < n + 1000; i++) { /* pushes, then flushes until everything queued is out */
        int w = i < n ? llm_detok_push(d, ids[i], out, cap) : llm_detok_flush(d, out, cap);
        CHECK(w >= 0 && w < cap && out[w] == 0, "detok wrote %d bytes into cap %d", w, cap);
        if (i < n && !valid_utf8(out, (size_t)w)) *chunks_valid = 0;
        memcpy(all + o, out, (size_t)w);
        o += (size_t)w;
        if (i >= n && w == 0) break;
    }
    llm_detok_free(d);
    free(out);
    return all;
}

static void test_stream(const llm_tokenizer *t) {
    const char *s = "Grüße 👨‍👩‍👧‍👦 龘靐齉 — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ok<|im_end|>";
    int32_t *ids = NULL;
    int n = encode(t, s, strlen(s), 1, &ids, NULL), partial = 0, valid = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *b = llm_tokenizer_token_bytes(t, ids[i], &len);
        partial += b && !valid_utf8(b, len);
    }
    CHECK(partial >= 2, "the test string should have tokens that split characters (%d)", partial);
    size_t plain_len = strlen(s) - strlen("<|im_end|>");
    for (int cap = 5; cap <= 80; cap *= 2) { /* small caps queue text for later calls (5 fits any character) */
        char *got = stream(t, ids, n, cap, &valid);
        CHECK(strlen(got) == plain_len && memcmp(got, s, plain_len) == 0 && valid,
              "stream (cap %d) reassembled \"%s\", chunks valid %d", cap, got, valid);
        free(got);
    }
    free(ids);

    /* an incomplete tail is emitted as U+FFFD at flush; an invalid byte as soon as it is seen */
    llm_detok *d = llm_detok_new(t, 0);
    char out[64];
    int32_t e4 = llm_tokenizer_token_id(t, "\xC3\xA4"), b8 = llm_tokenizer_token_id(t, "\xC2\xB8"); /* bytes E4, B8 */
    int w1 = llm_detok_push(d, e4, out, sizeof out);
    int w2 = llm_detok_push(d, b8, out, sizeof out);
    int w3 = llm_detok_flush(d, out, sizeof out);
    CHECK(e4 >= 0 && b8 >= 0 && w1 == 0 && w2 == 0 && w3 == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0,
          "flush of E4 B8: %d %d %d", w1, w2, w3);
    w1 = llm_detok_push(d, b8, out, sizeof out);
    CHECK(w1 == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0, "lone continuation byte: %d", w1);
    CHECK(llm_detok_push(d, -5, out, sizeof out) == 0 && llm_detok_flush(d, out, sizeof out) == 0, "invalid id");
    llm_detok_free(d);
}

/* Seeded random byte strings (valid and invalid UTF-8, added tokens and fragments, combining marks): encode
 * must succeed, be stable (encode(decode(encode(x))) == encode(x)), and the streaming detokenizer must give
 * exactly what decode gives. */
static void test_fuzz(const llm_tokenizer *t) {
    static const char *palette[] = {"a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "7", "12", "!", "'s", "'LL", ".",
                                    "\xC3\xA9", "e\xCC\x81", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xE2\x80\x8D",
                                    "\xE1\x84\x80", "\xE1\x85\xA1", "<|im_end|>", "<|im_start|>", "<think>", "<|",
                                    "|>", "\x80", "\xE2\x82", "\xF0\x9F", "\xFF", "\xC0\xAF", "\xED\xA0\x80", "\xC2\x85"};
    const int n_pal = (int)(sizeof palette / sizeof palette[0]);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char text[512], out[256];
    int failures = 0, cases = 0;
    for (int it = 0; it < 3000; it++) {
        size_t len = 0;
        int parts = (int)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 59);
        for (int k = 0; k < parts; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *piece = palette[(rng >> 33) % (uint64_t)n_pal];
            size_t pl = strlen(piece);
            memcpy(text + len, piece, pl);
            len += pl;
        }
        int parse_special = (int)((rng >> 20) & 1), n_inv = 0, n_inv2 = -1;
        int32_t *ids = NULL, *ids2 = NULL;
        int n = encode(t, text, len, parse_special, &ids, &n_inv);
        char *dec = n >= 0 ? llm_tokenizer_decode(t, ids, n, 0) : NULL;
        int n2 = dec ? encode(t, dec, strlen(dec), parse_special, &ids2, &n_inv2) : -1;
        int ok = dec && valid_utf8(dec, strlen(dec)) && n2 == n && n_inv2 == 0 &&
                 (n == 0 || memcmp(ids, ids2, (size_t)n * sizeof *ids) == 0);
        /* streaming == whole decode */
        llm_detok *d = llm_detok_new(t, 0);
        size_t o = 0, dl = dec ? strlen(dec) : 0;
        for (int i = 0; i <= n && d; i++) {
            int w = i < n ? llm_detok_push(d, ids[i], out, sizeof out) : llm_detok_flush(d, out, sizeof out);
            ok &= dec && o + (size_t)w <= dl && memcmp(dec + o, out, (size_t)w) == 0;
            o += (size_t)w;
        }
        ok &= d && o == dl;
        llm_detok_free(d);
        if (!ok && failures++ < 5) fprintf(stderr, "fuzz case %d (%zu bytes) failed (n %d, n2 %d)\n", it, len, n, n2);
        cases++;
        free(dec);
        free(ids);
        free(ids2);
    }
    CHECK(failures == 0, "fuzz: %d of %d cases failed", failures, cases);
}

/* Encode throughput on the concatenated fixture strings (a few MB). */
static void test_speed(const llm_tokenizer *t, const char *cases_path) {
    size_t flen = 0;
    char *file = omni_read_file(cases_path, &flen);
    if (!file) return;
    size_t cap = 4 * flen, n = 0;
    char *big = malloc(cap), *tmp = malloc(flen);
    for (int rep = 0; rep < 4; rep++)
        for (char *p = file; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            const char *end;
            long len = (p[0] == 'T') ? json_string(p + 2, &end, tmp) : -1;
            if (len > 0 && n + (size_t)len + 1 < cap) { memcpy(big + n, tmp, (size_t)len); n += (size_t)len; big[n++] = '\n'; }
        }
    int32_t *ids = NULL;
    double t0 = omni_time_ms();
    int n_ids = encode(t, big, n, 1, &ids, NULL);
    double ms = omni_time_ms() - t0;
    printf("encode throughput: %.2f MB in %.1f ms = %.2f MB/s (%d tokens, %.0f tokens/ms)\n", n / 1e6, ms,
           n / 1e3 / (ms > 0 ? ms : 1e-3), n_ids, n_ids / (ms > 0 ? ms : 1e-3));
    char *dec = llm_tokenizer_decode(t, ids, n_ids, 0);
    CHECK(dec != NULL && strlen(dec) > 0, "decode of the big text");
    free(dec);
    free(ids);
    free(big);
    free(tmp);
    free(file);
}

/* tok-small edited as tools/reference/make_tokenizer_cases.py --variant gpt2 does (ByteLevel pre-tokenizer with
 * use_regex=true, ignore_merges=true, only the first half of the merges), the merges rewritten from ["a", "b"] pairs
 * to "a b" strings (same meaning), written to a temporary file; path in buf, or NULL. */
static const char *gpt2_variant(char *buf) {
    size_t len = 0;
    char *text = omni_read_file(OMNI_FIXTURES "/tok-small/tokenizer.json", &len), *out = NULL;
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *path = NULL;
    if (model) {
        cJSON *pt = cJSON_CreateObject();
        cJSON_AddStringToObject(pt, "type", "ByteLevel");
        cJSON_AddFalseToObject(pt, "add_prefix_space");
        cJSON_AddTrueToObject(pt, "use_regex");
        cJSON_ReplaceItemInObjectCaseSensitive(root, "pre_tokenizer", pt);
        cJSON_DeleteItemFromObjectCaseSensitive(model, "ignore_merges");
        cJSON_AddTrueToObject(model, "ignore_merges");
        cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
        int n = cJSON_GetArraySize(merges);
        for (int i = n - 1; i >= n / 2; i--) cJSON_DeleteItemFromArray(merges, i);
        for (int i = 0; i < n / 2; i++) {
            cJSON *m = cJSON_GetArrayItem(merges, i);
            if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2) continue;
            char pair[512];
            snprintf(pair, sizeof pair, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring,
                     cJSON_GetArrayItem(m, 1)->valuestring);
            cJSON_ReplaceItemInArray(merges, i, cJSON_CreateString(pair));
        }
        out = cJSON_PrintUnformatted(root);
        path = out ? write_temp(out, buf) : NULL;
    }
    cJSON_free(out);
    cJSON_Delete(root);
    free(text);
    return path;
}

static void test_small(void) {
    llm_tokenizer *t = NULL;
    char path[64];
    omni_status st = llm_tokenizer_load(OMNI_FIXTURES "/tok-small/tokenizer.json", &t);
    CHECK(st == OMNI_OK, "load tok-small: %s", omni_last_error());
    if (st == OMNI_OK) test_parity(t, OMNI_FIXTURES "/tokenizer/small_cases.txt", 500);
    llm_tokenizer_free(t);
    t = NULL;
    const char *p = gpt2_variant(path);
    CHECK(p != NULL, "cannot write the gpt2 variant of tok-small");
    if (!p) return;
    st = llm_tokenizer_load(p, &t);
    unlink(p);
    CHECK(st == OMNI_OK, "load tok-small gpt2 variant: %s", omni_last_error());
    if (st == OMNI_OK) test_parity(t, OMNI_FIXTURES "/tokenizer/small_gpt2_cases.txt", 300);
    llm_tokenizer_free(t);
}

int main(void) {
    test_load_errors();
    test_tiny();
    test_small();

    llm_tokenizer *t = NULL;
    if (access(QWEN_JSON, R_OK) != 0) {
        printf("SKIP real-vocabulary parts: %s not found\n", QWEN_JSON);
        if (check_fail_ == 0) { check_exit(); return 77; }
        return check_exit();
    }
    /* CPU time of this process, not wall time: the check is about the loader's work and must not fail because
     * ctest -j or other jobs share the cores (seen at load average 10-20 on the 2-core machine). */
    double t0 = cpu_ms();
    omni_status st = llm_tokenizer_load(QWEN_JSON, &t);
    double load_ms = cpu_ms() - t0;
    CHECK(st == OMNI_OK, "load %s: %s", QWEN_JSON, omni_last_error());
    if (st != OMNI_OK) return check_exit();
    printf("load qwen3 tokenizer.json: %.1f ms CPU (vocab %d)\n", load_ms, llm_tokenizer_vocab_size(t));
#if !defined(__SANITIZE_ADDRESS__) /* sanitizers slow everything down; timing is checked in plain builds */
    CHECK(load_ms < 1000.0, "load took %.0f ms of CPU (want < 1 s)", load_ms);
#endif

    test_parity(t, OMNI_FIXTURES "/tokenizer/qwen3_cases.txt", 2000);
    test_special_and_edges(t);
    test_stream(t);
    test_fuzz(t);
    test_speed(t, OMNI_FIXTURES "/tokenizer/qwen3_cases.txt");
    llm_tokenizer_free(t);
    return check_exit();
}
