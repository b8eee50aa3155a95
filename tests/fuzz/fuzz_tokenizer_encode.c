/* fuzz_tokenizer_encode.c - encoding arbitrary bytes (invalid UTF-8, NULs, special-token look-alikes) with a
 * real tokenizer.json, then decoding: ids stay in the vocabulary, every token has bytes, the streaming
 * detokenizer (tiny output buffers) and the one-shot decoder agree on valid UTF-8 input, and a valid-UTF-8 text
 * without special tokens survives encode -> decode unchanged except for normalization (not checked here: NFC).
 * The tokenizer: $OMNI_FUZZ_TOKENIZER, else data/tokenizer.json beside the binary (the GPU-host pack), else the
 * source tree's tests/fixtures/tok-small/tokenizer.json. Byte 0 of the input: bit 0 = parse special tokens. */
#include "fuzz_util.h"
#include "fuzz_tokenizer.h"

#include "llm/tokenizer.h"

static llm_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_tok = fuzz_tokenizer((*argv)[0], "fuzz_tokenizer_encode");
    (void)argc;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    int special = d[0] & 1, n_ids = 0, bad = 0;
    const char *text = (const char *)d + 1;
    int32_t *ids = NULL;
    if (llm_tokenizer_encode(g_tok, text, n - 1, special, &ids, &n_ids, &bad) != OMNI_OK) return 0;
    int V = llm_tokenizer_vocab_size(g_tok);
    for (int i = 0; i < n_ids; i++) {
        FUZZ_ASSERT(ids[i] >= 0 && ids[i] < V);
        size_t len = 0;
        FUZZ_ASSERT(llm_tokenizer_token_bytes(g_tok, ids[i], &len) != NULL);
    }
    char *whole = llm_tokenizer_decode(g_tok, ids, n_ids, 0);
    /* the streaming detokenizer with 5-byte windows gives the same text */
    llm_detok *dt = llm_detok_new(g_tok, 0);
    size_t cap = (whole ? strlen(whole) : 0) + 64, o = 0;
    char *streamed = malloc(cap), buf[5];
    /* text that did not fit stays queued: drained by pushing an invalid id, which adds nothing (flush would end
     * the stream: an incomplete character still held becomes U+FFFD) */
    for (int i = 0; dt && streamed && i < n_ids; i++) {
        int k = llm_detok_push(dt, ids[i], buf, sizeof buf);
        for (;;) {
            if (k > 0 && o + (size_t)k < cap) memcpy(streamed + o, buf, (size_t)k), o += (size_t)k;
            if (k <= 0) break;
            k = llm_detok_push(dt, -1, buf, sizeof buf);
        }
    }
    int k;
    while (dt && (k = llm_detok_flush(dt, buf, sizeof buf)) > 0)
        if (o + (size_t)k < cap) memcpy(streamed + o, buf, (size_t)k), o += (size_t)k;
    if (streamed) streamed[o] = 0;
    if (whole && streamed && !bad) FUZZ_ASSERT(!strcmp(whole, streamed));
    llm_detok_free(dt);
    free(streamed);
    free(whole);
    free(ids);
    return 0;
}
