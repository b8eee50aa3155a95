#!/usr/bin/env python3
"""Build the three embedded models' tokenizers into tools/train/tokenizers/{ocr,speech,text}/ (committed).

    python3 tools/train/make_tokenizers.py [ocr] [speech] [text]

Each is a byte-level BPE with exactly the structure of the real Qwen3 tokenizer.json (tools/reference/common.py:
NFC, the Qwen split regex, ByteLevel, ids 0..255 = the byte alphabet, then the Qwen3-VL and Qwen3-Omni added tokens
after the regular vocabulary) and the official chat template in tokenizer_config.json. Deterministic corpora:
  ocr     80,000 lines from ocr_data.TextGen (seed 12345) + the OCR prompt; 1024 regular tokens.
  speech  60,000 prompts/answers from speech_data (seed 12345); 1024 regular tokens.
  text    the CPython standard library sources of this machine with text_data.is_heldout() == False, first
          24 MB in sorted path order; 4096 regular tokens.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # byte-for-byte reproducible BPE training


def ocr_corpus():
    import ocr_data
    rng = np.random.default_rng(12345)
    gen = ocr_data.TextGen(rng, ocr_data.load_words())
    lines = [gen.line() for _ in range(80000)]
    return ["\n".join(lines[i:i + 50]) for i in range(0, len(lines), 50)] + [ocr_data.PROMPT] * 200


def speech_corpus():
    import speech_data
    rng = np.random.default_rng(12345)
    gen = speech_data.UtteranceGen(rng)
    out = []
    for _ in range(60000):
        u = gen.utterance()
        q, a = gen.question(u)
        out.append(q + "\n" + a)
    return out


def text_corpus():
    import text_data
    texts, total = [], 0
    for p in text_data.stdlib_files(heldout=False):
        try:
            with open(p, encoding="utf-8") as f:
                s = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(s)
        total += len(s)
        if total > 24_000_000:
            break
    return texts


def main():
    which = sys.argv[1:] or ["ocr", "speech", "text"]
    sizes = {"ocr": 1024, "speech": 1024, "text": 4096}
    corpora = {"ocr": ocr_corpus, "speech": speech_corpus, "text": text_corpus}
    for name in which:
        d = util.tokenizer_path(name)
        tok = util.build_tokenizer(d, corpora[name](), sizes[name])
        print(name, "->", d, "size", tok.get_vocab_size())


if __name__ == "__main__":
    main()
