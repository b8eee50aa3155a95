/* fuzz_tokenizer_load.c - tokenizer.json loading (llm/tokenizer.c) on arbitrary bytes; a tokenizer that loads
 * then encodes, decodes and stream-decodes a fixed text with special tokens. Seeds: small tokenizer.json files
 * (corpus/tokenizer_load), so mutations stay fast. */
#include "fuzz_util.h"

#include "llm/tokenizer.h"

static const char TEXT[] = "Hello <|im_start|>user\nwörld 123  tabs\t\tand\r\nnewlines ü 日本語 <think>x</think>\xff";

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    llm_tokenizer *t = NULL;
    if (llm_tokenizer_load_json((const char *)d, n, "fuzz.json", &t) != OMNI_OK) return 0;
    int32_t *ids = NULL;
    int n_ids = 0, bad = 0;
    for (int special = 0; special < 2; special++) {
        if (llm_tokenizer_encode(t, TEXT, sizeof TEXT - 1, special, &ids, &n_ids, &bad) == OMNI_OK) {
            int V = llm_tokenizer_vocab_size(t);
            for (int i = 0; i < n_ids; i++) FUZZ_ASSERT(ids[i] >= 0 && ids[i] < V);
            free(llm_tokenizer_decode(t, ids, n_ids, special));
            llm_detok *dt = llm_detok_new(t, special);
            char buf[8];
            for (int i = 0; dt && i < n_ids; i++) llm_detok_push(dt, ids[i], buf, sizeof buf);
            while (dt && llm_detok_flush(dt, buf, sizeof buf) > 0) {}
            llm_detok_free(dt);
        }
        free(ids);
        ids = NULL;
    }
    llm_tokenizer_free(t);
    return 0;
}
