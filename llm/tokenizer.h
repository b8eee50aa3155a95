/* tokenizer.h - byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen3 / GPT-2 style).
 *
 * Encoding pipeline (identical to the `tokenizers` library for the files we support):
 *   bytes -> invalid UTF-8 replaced by U+FFFD (maximal subparts, as Python errors="replace")
 *         -> added tokens split out (leftmost-longest match on the raw text)
 *         -> each remaining segment: normalizer (NFC/NFD/NFKC/NFKD via utf8proc, or none)
 *         -> pre-tokenizer regexes (PCRE2, UTF + UCP; Split "Isolated" and/or ByteLevel use_regex)
 *         -> each piece: byte-level BPE, merges applied by rank (lowest first, leftmost on ties).
 * Decoding maps ids back to raw bytes (ByteLevel decoder); added tokens decode to their content.
 * The regex classes (\s, \p{L}, \p{N}) and NFC are adjusted to the reference's own Unicode data (tokenizers 0.23:
 * Oniguruma White_Space, Unicode 16 letters/digits, an older normalizer), so ids match it on any input, not only on
 * common text (checked on ~90k generated strings incl. random code points and combining-mark soup).
 *
 * Supported tokenizer.json subset: model.type "BPE" (vocab + merges as "a b" strings or ["a","b"] pairs,
 * ignore_merges honoured, no unk/byte_fallback), normalizer null / NFC / NFD / NFKC / NFKD / Sequence of those,
 * pre_tokenizer null / Split(Regex|String, Isolated, invert false) / ByteLevel / Sequence of those, decoder
 * ByteLevel. Added tokens are matched as whole strings on the un-normalized text (all Qwen tokens have
 * single_word = lstrip = rstrip = normalized = false; other values of these flags are not applied).
 *
 * Thread safety: a loaded tokenizer is read-only; encode/decode may run concurrently on one tokenizer.
 * Each llm_detok belongs to one thread. */
#ifndef OMNI_LLM_TOKENIZER_H
#define OMNI_LLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llm_tokenizer llm_tokenizer;

/* Load tokenizer.json. On success *out owns the tokenizer (free with llm_tokenizer_free). Errors:
 * OMNI_ERR_MODEL (missing/unreadable file, not JSON, missing or invalid model.vocab / merges, merge referring to
 * an unknown token), OMNI_ERR_UNSUPPORTED (model, normalizer or pre-tokenizer type not handled), OMNI_ERR_NOMEM.
 * The message (omni_last_error) names the file and the problem. *out is NULL on error. */
omni_status llm_tokenizer_load(const char *tokenizer_json_path, llm_tokenizer **out);
/* The same from the text of a tokenizer.json held in memory; `name` is used in messages. */
omni_status llm_tokenizer_load_json(const char *json, size_t len, const char *name, llm_tokenizer **out);

/* Free a tokenizer; NULL is a no-op. */
void llm_tokenizer_free(llm_tokenizer *t);

/* Max id + 1, added tokens included. */
int llm_tokenizer_vocab_size(const llm_tokenizer *t);

/* Exact token string -> id, or -1. Regular tokens are spelled in their byte-level form ("Ġthe"), added tokens
 * by their content ("<|im_end|>"); an added token wins when both spellings exist. */
int32_t llm_tokenizer_token_id(const llm_tokenizer *t, const char *token);

/* Encode `len` bytes of UTF-8 (text may be NULL when len is 0; embedded NUL bytes are ordinary characters).
 * Invalid UTF-8 sequences are replaced by U+FFFD (each maximal invalid subpart, as Python's errors="replace")
 * and *n_invalid (if non-NULL) receives the number of replacements.
 * parse_special != 0: every added token in the text becomes its id (tokenizers' default).
 * parse_special == 0: tokens marked "special" (<|im_start|>, <|endoftext|>, ...) are encoded as plain text;
 *   non-special added tokens (<think>, <tool_call>, ...) are still recognised, as tokenizers does with
 *   encode_special_tokens = True.
 * *ids is malloc'ed (caller frees; non-NULL even when *n_ids is 0), *n_ids its length. */
omni_status llm_tokenizer_encode(const llm_tokenizer *t, const char *text, size_t len, int parse_special,
                                 int32_t **ids, int *n_ids, int *n_invalid);

/* The raw bytes of one token (after ByteLevel decoding; may be a partial UTF-8 sequence), *len its length.
 * Owned by the tokenizer. NULL (and *len = 0) if the id is invalid. */
const char *llm_tokenizer_token_bytes(const llm_tokenizer *t, int32_t id, size_t *len);

/* 1 if id is an added token marked "special", else 0. */
int llm_tokenizer_is_special(const llm_tokenizer *t, int32_t id);

/* Streaming detokenizer: feed ids one at a time, get back only complete UTF-8 (held-back partial bytes are
 * emitted once complete; invalid bytes become U+FFFD as soon as they are known to be invalid; llm_detok_flush
 * emits the rest, an incomplete tail as U+FFFD). Text that does not fit in `cap` stays queued for the next call
 * (characters are never cut, so cap must be >= 5 for progress; call flush until it returns 0 to drain).
 * skip_special != 0: special tokens produce no text. Invalid ids produce no text. */
typedef struct llm_detok llm_detok;

/* NULL on allocation failure. The tokenizer must outlive the detokenizer. */
llm_detok *llm_detok_new(const llm_tokenizer *t, int skip_special);

/* Appends the printable text for `id` to out (NUL-terminated, at most cap-1 bytes; returns bytes written). */
int llm_detok_push(llm_detok *d, int32_t id, char *out, int cap);

/* Emits everything still held (incomplete UTF-8 as U+FFFD) and resets the state; returns bytes written. */
int llm_detok_flush(llm_detok *d, char *out, int cap);

/* NULL is a no-op. */
void llm_detok_free(llm_detok *d);

/* UTF-8 checks with the rules above (maximal subparts, as Python's errors="replace"):
 * llm_utf8_valid_len = the length of the longest valid prefix of s[0..n) (n when it is all valid; a character
 * cut off at the end is invalid); llm_utf8_sanitize writes s[0..n) to dst (room for 3n bytes, not terminated)
 * with each invalid subpart as U+FFFD and returns the bytes written. */
size_t llm_utf8_valid_len(const char *s, size_t n);
size_t llm_utf8_sanitize(const char *s, size_t n, char *dst);

/* Decode a whole id list to a malloc'ed NUL-terminated string (skip_special as above; invalid UTF-8 in the
 * concatenated bytes becomes U+FFFD, as tokenizers' decode does). NULL on allocation failure. */
char *llm_tokenizer_decode(const llm_tokenizer *t, const int32_t *ids, int n, int skip_special);

#ifdef __cplusplus
}
#endif
#endif
