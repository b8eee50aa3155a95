#!/usr/bin/env python3
"""Generate tokenizer parity cases (expected ids from the `tokenizers` reference) for tests/llm/test_tokenizer.c.

Usage:
    python3 tools/reference/make_tokenizer_cases.py \
        [--tokenizer ../shared/data/qwen3-tokenizer/tokenizer.json] \
        [--out tests/fixtures/tokenizer/qwen3_cases.txt] [--seed 20261130] [--scale 1.0]

The small trained tokenizer's cases (fewer generated strings) are made with
    python3 tools/reference/make_tokenizer_cases.py --tokenizer tests/fixtures/tok-small/tokenizer.json \
        --out tests/fixtures/tokenizer/small_cases.txt --scale 0.2
and the GPT-2-style variant of it (pre_tokenizer ByteLevel with use_regex=true, model.ignore_merges=true, merges
cut to the first half so that whole-word vocabulary hits matter; the C test applies the same edit to tok-small)
    python3 tools/reference/make_tokenizer_cases.py --tokenizer tests/fixtures/tok-small/tokenizer.json \
        --out tests/fixtures/tokenizer/small_gpt2_cases.txt --scale 0.1 --variant gpt2

Everything is deterministic (one seeded random.Random). Output: one case per line, tab-separated:

    T <text as JSON, ASCII-only> <rt> <ids>   encode(text) with added tokens parsed (the default)
    P <text as JSON, ASCII-only> <rt> <ids>   same with encode_special_tokens = True ("special" tokens as text)
    B <raw bytes as hex>         <n_invalid> <ids>
                                               bytes.decode("utf-8", "replace") then encode; n_invalid = number
                                               of U+FFFD replacements (maximal invalid subparts)

--unicode-tables prints the C tables of llm/tokenizer.c that make PCRE2/utf8proc agree with tokenizers' own Unicode
data (tokenizers' regex engine knows newer letters/digits than PCRE2 10.42; its normalizer is older than utf8proc 2.8);
it asks the reference tokenizer about every code point (about a minute).

<rt> is 1 when tokenizers' decode(ids) gives the text back exactly (false e.g. for NFD input), else 0.
<ids> are space-separated (empty for an empty result). Lines starting with '#' are comments.
Expected ids come from Tokenizer.from_file(...).encode(s, add_special_tokens=False).ids.
"""

import argparse
import codecs
import json
import os
import random
import unicodedata

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
            "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
            "</tool_response>", "<think>", "</think>"]

# Hand-written tricky strings.
HAND = [
    "", " ", "  ", "\n", "\n\n", "\r\n", "\t", "a", "A", "Hello world", "Hello, world!", " Hello", "Hello ",
    "hello  world", "hello   world   ", "  leading and trailing  ", "line1\nline2\r\nline3\rline4",
    "tab\tseparated\tvalues\t", "\t\t\tindent", "\n\n\n\nmany newlines\n\n", " \n \n ", "\r\n\r\n\r\n",
    "a \n b", "x  \n  y", "end with spaces   ", "end with newline\n", "   \t  \n", "word\u00a0nbsp",
    "ideographic\u3000space", "line\u2028sep\u2029para", "nel\x85x", "mongolian\u180evs", "zwsp\u200bhere",
    "bom\ufeffhere", "vt\x0bff\x0cend", "\x1c\x1d\x1e\x1f!", "ws\x85!", "\u180e!", " \u00a0\u2000\u3000 !",
    "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "it's", "IT'S", "don't", "DON'T", "he'll", "HE'LL",
    "she'd", "SHE'D", "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d", "''s", "'ss", "'sa", "x's y'S z'Ll",
    "'\u017f", "it'\u017f", "'\u212a", "stra\u00dfe 'SS", "O'Neil's", "rock 'n' roll", "'tis", "'em", "y'all'd",
    "123", "1234567890", "3.14159", "1,000,000", "0x1F", "1e-9", "-42", "+7", "12abc34", "abc123def",
    "\uff11\uff12\uff13", "\u0663\u0664\u0665", "\u00b2\u00b3\u00b9", "\u2460\u2461", "\u2167", "\u0f33",
    "9" * 100, "12345678901234567890123456789012345678901234567890",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\u30ab\u30bf\u30ab\u30ca", "\uc548\ub155\ud558\uc138\uc694",
    "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
    "\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8", "1\ufe0f\u20e3", "\u2764\ufe0f", "\U0001F3F3\ufe0f\u200d\U0001F308",
    "\U0001F9D1\U0001F3FB\u200d\U0001F4BB", "emoji\U0001F600in\U0001F600text",
    "caf\u0065\u0301", "e\u0301e\u0301e\u0301", "A\u030a", "\u1e9b\u0323", "n\u0303o", "a\u0328\u0301",
    "\u0041\u0308\u0304", "q\u0307\u0323", "\u00e9", "\u212b", "\u2126", "\u0344", "\u0958", "\ufb01", "\u1e0b\u0323",
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\n", "<|im_end|><|im_end|>", "<|im_end|", "|im_end|>", "<<|im_end|>>", "<|im_start",
    "x<|endoftext|>y", "<think>\n\n</think>\n\n", "<tool_call>{\"a\":1}</tool_call>",
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>Describe.", " <|im_end|> ", "\n<|im_start|>\n",
    "<|IM_END|>", "< |im_end|>", "<|im_end|>" * 5, "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "def foo(x):\n    return x * 2\n", "int main(void) {\n\treturn 0;\n}\n", "if (a && b || !c) { x += 1; }",
    "for i in range(10):\n        print(i)\n\n\n", "    ", "        x", "#include <stdio.h>", "a->b", "a::b",
    "x = [1, 2, 3]; y = {'k': \"v\"}", "SELECT * FROM t WHERE id = 1;", "<div class=\"x\">hi</div>",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "$HOME/.bashrc",
    "!!!", "???!!!...", "...", "\u2026", "---", "--->", "====", "*_*", "(^_^)", "\"quoted\"", "\u201csmart\u201d",
    "\u00bfQu\u00e9?", "\u00a1Hola!", "a.b.c", "a,b,c", "!!!\n\n", "?!\r\n", ".\n.\n.",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0393\u03b5\u03b9\u03ac", "\u0645\u0631\u062d\u0628\u0627",
    "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "abc\u4e2d\u6587def", "Hello\u4e16\u754c123",
    "\ufffd", "\ufffd\ufffd", "\U0010ffff", "\ue000", "\uffff", "\ufffe", "\x00", "a\x00b", "\x7f", "\x01\x02",
    "a" * 1000, "ab" * 500, "\u4e2d" * 300, "\U0001F600" * 50, " " * 100, "\n" * 50, "\t" * 30, "x" + " " * 64 + "y",
    "Supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "Donaudampfschifffahrtsgesellschaftskapit\u00e4n", "a\u0301" * 40,
]
# Contexts in which a character's membership in \s changes the pre-tokenizer split (Oniguruma's \s is Unicode
# White_Space: it includes U+0085 and excludes U+180E, unlike PCRE2's UCP \s).
SPACE_CANDIDATES = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680, 0x180E, 0x2000,
                    0x2005, 0x200A, 0x200B, 0x2028, 0x2029, 0x202F, 0x205F, 0x2060, 0x3000, 0xFEFF]
# Unicode-version edges: letters/digits newer than Unicode 14 (tokenizers' regex knows them), combining marks and a
# composition newer than tokenizers' normalizer data (it leaves them alone).
HAND += ["a\u1c89b", "x\U000105c0\U000105c1y 1", "!\U00013460\U00013461", "\uA7CB\uA7CC's", "\U00010d40\U00010d41",
         "!\U000116d0\U000116d1", "a\U0001e4f0b", "a\u0301\u1abf\u0316", "e\u1ac0\u0301\u0323", "o\u0898\u0308\u0331",
         "\U00011935\U00011930", "\U00011938", "\u0915\u093c\u0c3c\u0301", "\U0001e4ec\u0301\u0334a"]
HAND += [ctx.format(c=chr(cp)) for cp in SPACE_CANDIDATES
         for ctx in ("a {c}b", "a {c}!", "{c}{c}!", "!{c} !", "x{c}\n", "{c} {c}", "1{c}{c}2 ")]

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long down day did "
         "get come made may part model token cache quantize tensor kernel matrix vector attention decoder encoder "
         "inference latency throughput memory bandwidth gradient").split()

PUNCT = list("!@#$%^&*()_+-=[]{};:'\",.<>/?\\|`~") + ["\u2026", "\u2014", "\u2013", "\u00ab", "\u00bb", "\u201e",
                                                         "\u201c", "\u201d", "\u2018", "\u2019", "\u3002", "\uff0c"]
WS = [" ", " ", " ", "\t", "\n", "\r\n", "\r", "\u3000", "\u00a0", "\x0b", "\x0c", "\x85", "\u2028", "\u2009"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
CJK_ZH = "\u7684\u4e00\u662f\u5728\u4e0d\u4e86\u6709\u548c\u4eba\u8fd9\u4e2d\u5927\u4e3a\u4e0a\u4e2a\u56fd\u6211" \
         "\u4ee5\u8981\u4ed6\u65f6\u6765\u7528\u4eec\u751f\u5230\u4f5c\u5730\u4e8e\u51fa\u5c31\u5206\u5bf9\u6210" \
         "\u4f1a\u53ef\u4e3b\u53d1\u5e74\u52a8\u540c\u5de5\u4e5f\u80fd\u4e0b\u8fc7\u5b50\u8bf4\u4ea7\u79cd\u9762" \
         "\u800c\u65b9\u540e\u591a\u5b9a\u884c\u5b66\u6cd5\u6240\u6c11\u5f97\u7ecf\u5341\u4e09\u4e4b\u8fdb\u7740" \
         "\u7b49\u90e8\u5ea6\u5bb6\u7535\u529b\u91cc\u5982\u6c34\u5316\u9ad8\u81ea\u4e8c\u7406\u8d77\u5c0f\u7269" \
         "\u9f98\u9750\u9f49\u9a6b\u9c7c\u9e1f\u9f99\u9f8d\u7e41\u9ad4\u5b57"
ZH_PUNCT = "\uff0c\u3002\uff01\uff1f\u3001\uff1b\uff1a\u201c\u201d\uff08\uff09\u300a\u300b"
EMOJI = ["\U0001F600", "\U0001F602", "\U0001F60D", "\U0001F914", "\U0001F44D", "\U0001F44B", "\U0001F525", "\u2728",
         "\U0001F680", "\U0001F389", "\u2764\ufe0f", "\u263a\ufe0f", "\U0001F4A9", "\U0001F916", "\U0001F9E0",
         "\U0001F30D", "\U0001F431", "\U0001F436", "\U0001F34E", "\u26bd", "\U0001FAE0", "\U0001F972"]
SKIN = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
ZWJ_PARTS = ["\U0001F468", "\U0001F469", "\U0001F467", "\U0001F466", "\U0001F9D1", "\u2764\ufe0f", "\U0001F48B",
             "\U0001F4BB", "\U0001F52C", "\U0001F680", "\U0001F692", "\u2695\ufe0f", "\U0001F308", "\U0001F9AF"]
SCRIPTS = [  # (start, end) code point ranges of letters of various scripts
    (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F), (0x391, 0x3C9), (0x410, 0x44F), (0x5D0, 0x5EA),
    (0x627, 0x64A), (0x905, 0x939), (0xE01, 0xE2E), (0x10D0, 0x10F0), (0x3041, 0x3096), (0x30A1, 0x30FA),
    (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x1E00, 0x1EFF), (0x0531, 0x0556), (0x1200, 0x1248)]
ACCENTED = ("caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber M\u00fcller Stra\u00dfe fa\u00e7ade co\u00f6perate "
            "Vi\u1ec7t Nam ti\u1ebfng Vi\u1ec7t \u0111\u1eb9p \u1ee9ng d\u1ee5ng Ni\u00f1o a\u00f1o S\u00e3o Paulo "
            "\u00c5ngstr\u00f6m \u00e9l\u00e8ve \u00c9cole \u0159e\u0161en\u00ed \u017elu\u0165ou\u010dk\u00fd "
            "\u0142\u00f3d\u017a \u011f\u00fc\u015f\u0131\u00f6\u00e7 \u1f08\u03b8\u03ae\u03bd\u03b1\u03b9").split()
ADDED_FRAGMENTS = ["<|", "|>", "<", ">", "im_", "<|im_end", "im_end|>", "</", "think", "<think", "/think>"]


def rand_word(r):
    return r.choice(WORDS)


def english(r):
    out = []
    for i in range(r.randint(1, 25)):
        w = rand_word(r)
        c = r.random()
        if c < 0.1:
            w = w.upper()
        elif c < 0.3:
            w = w.capitalize()
        if r.random() < 0.1:
            w += r.choice(CONTRACTIONS)
        out.append(w)
        if r.random() < 0.15:
            out.append(r.choice(",.;:!?"))
    sep = r.choice([" ", " ", " ", "  ", "\n"])
    s = sep.join(out)
    return s + r.choice(["", ".", "!", "?", " ", "\n", "  "])


def contractions(r):
    parts = []
    for _ in range(r.randint(1, 6)):
        c = r.choice(CONTRACTIONS)
        c = "".join(ch.upper() if r.random() < 0.5 else ch for ch in c)
        parts.append(r.choice(["", rand_word(r), rand_word(r).upper(), "I", "1", " ", "'"]) + c +
                     r.choice(["", " ", "x", "s", "ll", "!", "'", "\n"]))
    return r.choice(["", " "]).join(parts)


def chinese(r):
    s = "".join(r.choice(CJK_ZH) if r.random() < 0.85 else r.choice(ZH_PUNCT) for _ in range(r.randint(1, 60)))
    if r.random() < 0.3:
        s += str(r.randint(0, 10 ** 6)) + r.choice(CJK_ZH)
    if r.random() < 0.3:
        s = rand_word(r) + s + " " + rand_word(r)
    return s


def japanese(r):
    pools = [(0x3041, 0x3096), (0x30A1, 0x30FA), (0x4E00, 0x9FA5)]
    out = []
    for _ in range(r.randint(1, 50)):
        if r.random() < 0.08:
            out.append(r.choice("\u3002\u3001\u300c\u300d\u30fc\u30fb\uff01"))
        else:
            a, b = r.choice(pools)
            out.append(chr(r.randint(a, b)))
    return "".join(out)


def korean(r):
    out = []
    for _ in range(r.randint(1, 12)):
        out.append("".join(chr(r.randint(0xAC00, 0xD7A3)) for _ in range(r.randint(1, 5))))
    s = " ".join(out)
    if r.random() < 0.3:  # conjoining jamo: NFC composes them into syllables
        s += " " + "".join(chr(0x1100 + r.randint(0, 18)) + chr(0x1161 + r.randint(0, 20)) +
                           (chr(0x11A8 + r.randint(0, 26)) if r.random() < 0.5 else "") for _ in range(r.randint(1, 4)))
    return s + r.choice(["", ".", "?", "!", " "])


def emoji(r):
    out = []
    for _ in range(r.randint(1, 8)):
        c = r.random()
        if c < 0.35:
            e = r.choice(EMOJI)
        elif c < 0.55:
            e = r.choice(["\U0001F44D", "\U0001F44B", "\U0001F9D1", "\U0001F469", "\u270b"]) + r.choice(SKIN)
        elif c < 0.8:
            e = "\u200d".join(r.choice(ZWJ_PARTS) for _ in range(r.randint(2, 4)))
        elif c < 0.9:
            e = chr(0x1F1E6 + r.randint(0, 25)) + chr(0x1F1E6 + r.randint(0, 25))
        else:
            e = r.choice("0123456789#*") + "\ufe0f\u20e3"
        out.append(e)
        if r.random() < 0.4:
            out.append(r.choice([" ", rand_word(r), " " + rand_word(r) + " ", "\n", "!"]))
    return "".join(out)


CODE_SNIPPETS = [
    "def {f}({a}, {b}=None):\n    \"\"\"Doc.\"\"\"\n    if {b} is None:\n        return {a}\n    return {a} + {b}\n",
    "static int {f}(const char *{a}, size_t {b}) {{\n\tfor (size_t i = 0; i < {b}; i++)\n\t\tif ({a}[i] == '\\0') return -1;\n\treturn 0;\n}}\n",
    "const {f} = ({a}) => {{\r\n  return {a}.map(x => x * 2);\r\n}};\r\n",
    "{{\"{f}\": [{n}, {n}, \"{a}\"], \"{b}\": {{\"nested\": true, \"v\": null}}}}",
    "<html>\n  <body class=\"{a}\">\n    <p>{f} &amp; {b}</p>\n  </body>\n</html>",
    "for {a} in range({n}):\n\tprint(f\"{{{a}:>{n}}}\")  # {f}\n",
    "SELECT {a}, COUNT(*) FROM {f} WHERE {b} >= {n} GROUP BY {a};",
    "#define {f}(x) ((x) << {n})\n#include <{a}.h>\n",
    "    {a} = {b}[{n}:{n}] if {a} != {b} else {a}//{n}**2\n\n\n",
    "fn {f}(&mut self, {a}: u32) -> Result<(), Box<dyn Error>> {{ Ok(()) }}",
    "$ ./{f} --{a}={n} -v 2>&1 | grep -E '^[a-z]+$' > /tmp/{b}.log",
    "matrix[i][j] += a[i][k] * b[k][j]; // {f} {n}\n",
]


def code(r):
    t = r.choice(CODE_SNIPPETS)
    s = t.format(f=rand_word(r) + "_" + rand_word(r), a=rand_word(r), b=rand_word(r), n=r.randint(0, 99999))
    if r.random() < 0.3:
        s = s.replace("    ", "\t")
    if r.random() < 0.2:
        s = s.replace("\n", "\r\n")
    return s


def digits(r):
    c = r.random()
    if c < 0.3:
        return "".join(r.choice("0123456789") for _ in range(r.randint(1, 400)))
    if c < 0.5:
        return " ".join(str(r.randint(0, 10 ** r.randint(1, 15))) for _ in range(r.randint(1, 10)))
    if c < 0.65:
        return f"{r.uniform(-1e6, 1e6):.{r.randint(0, 12)}f}" + r.choice(["", "%", " kg", "e-5", "\n"])
    if c < 0.8:
        return "".join(r.choice(["\uff10", "\uff15", "\u0661", "\u0967", "\u00b2", "\u2153", "\u2160", "7", "x", " "])
                       for _ in range(r.randint(1, 20)))
    return f"{r.randint(1, 31):02d}/{r.randint(1, 12):02d}/{r.randint(1900, 2100)} {r.randint(0, 23)}:{r.randint(0, 59):02d}"


def whitespace(r):
    out = []
    for _ in range(r.randint(1, 12)):
        out.append("".join(r.choice(WS) for _ in range(r.randint(1, 8))))
        if r.random() < 0.6:
            out.append(r.choice([rand_word(r), r.choice(PUNCT), str(r.randint(0, 99)), r.choice(CJK_ZH), "'s"]))
    return "".join(out)


def specials_in_text(r):
    out = []
    for _ in range(r.randint(1, 10)):
        c = r.random()
        if c < 0.4:
            out.append(r.choice(SPECIALS))
        elif c < 0.55:
            out.append(r.choice(ADDED_FRAGMENTS))
        elif c < 0.8:
            out.append(r.choice([rand_word(r), " " + rand_word(r), "\n", " ", "user\n", "assistant\n", chinese(r)]))
        else:
            out.append(english(r))
    return "".join(out)


def long_word(r):
    c = r.random()
    n = r.randint(100, 2500)
    if c < 0.3:
        return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    if c < 0.45:
        return r.choice("aAzZ.-_ ") * n
    if c < 0.6:
        return "".join(r.choice(["ab", "abc", "the", "ing", "tion"]) for _ in range(n // 3))
    if c < 0.7:
        return "".join(r.choice(CJK_ZH) for _ in range(n // 4))
    if c < 0.8:
        return "".join(r.choice("0123456789") for _ in range(n))
    if c < 0.9:
        return "".join(chr(r.randint(0x430, 0x44F)) for _ in range(n // 2))
    return (rand_word(r) * (n // 4))[:n]


def nfd_accented(r):
    c = r.random()
    if c < 0.6:
        s = " ".join(r.choice(ACCENTED) for _ in range(r.randint(1, 8)))
        return unicodedata.normalize(r.choice(["NFD", "NFD", "NFC", "NFKD"]), s)
    marks = [chr(x) for x in (0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x323, 0x327, 0x328, 0x31B, 0x345, 0x5B0,
                              0x94D, 0x1AB0)]
    return "".join(r.choice("aeiouAEIOUnscz\u03b1\u0430") + "".join(r.choice(marks) for _ in range(r.randint(0, 4)))
                   for _ in range(r.randint(1, 12)))


def punctuation(r):
    out = []
    for _ in range(r.randint(1, 15)):
        out.append("".join(r.choice(PUNCT) for _ in range(r.randint(1, 6))))
        out.append(r.choice(["", "", " ", "\n", "\r\n", "\n\n", rand_word(r), " " + rand_word(r)]))
    return "".join(out)


def mixed_scripts(r):
    out = []
    for _ in range(r.randint(1, 10)):
        a, b = r.choice(SCRIPTS)
        out.append("".join(chr(r.randint(a, b)) for _ in range(r.randint(1, 8))))
        out.append(r.choice(["", " ", " ", "\n", r.choice(PUNCT), str(r.randint(0, 999)), r.choice(EMOJI)]))
    return "".join(out)


def random_unicode(r):
    ranges = [(0x20, 0x7E, 3), (0x0, 0x1F, 1), (0x80, 0x24F, 2), (0x250, 0x2FFF, 3), (0x3000, 0x9FFF, 2),
              (0xA000, 0xD7FF, 2), (0xE000, 0xFFFF, 1), (0x10000, 0x1FFFF, 2), (0x20000, 0x3FFFF, 1),
              (0xE0000, 0x10FFFF, 1)]
    weights = [w for _, _, w in ranges]
    out = []
    for _ in range(r.randint(1, 40)):
        a, b, _ = r.choices(ranges, weights)[0]
        out.append(chr(r.randint(a, b)))
    return "".join(out)


def long_doc(r):
    """4.5-12 KB of mixed text: long inputs take the encoder's per-call piece cache, which must not change ids."""
    out, size, target = [], 0, r.randint(4500, 12000)
    while size < target:
        part = r.choice([english, english, english, code, chinese, whitespace, specials_in_text, emoji, digits])(r)
        out.append(part + r.choice([" ", "\n", "\n\n", ""]))
        size += len(part.encode())
    return "".join(out)


CATEGORIES = [  # (generator, count)
    (english, 300), (contractions, 120), (chinese, 150), (japanese, 100), (korean, 100), (emoji, 150), (code, 150),
    (digits, 120), (whitespace, 180), (specials_in_text, 150), (long_word, 40), (nfd_accented, 120),
    (punctuation, 120), (mixed_scripts, 150), (random_unicode, 400), (long_doc, 10),
]

BAD_BYTES = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
             b"\xf0\x80\x80\xaf", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xe2\x82", b"\xf0\x9f\x98",
             b"\xf0\x9f", b"\xc3", b"\xe4\xb8", b"\xc3\x28", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc"]


def bad_bytes_case(r):
    out = b""
    for _ in range(r.randint(1, 8)):
        c = r.random()
        if c < 0.4:
            out += r.choice(BAD_BYTES)
        elif c < 0.7:
            out += r.choice([english, chinese, emoji, whitespace])(r).encode()
        else:
            out += bytes(r.randint(0, 255) for _ in range(r.randint(1, 6)))
    return out


def decode_counting(b):
    count = [0]

    def handler(exc):
        count[0] += 1
        return ("\ufffd", exc.end)

    codecs.register_error("omni_count", handler)
    return b.decode("utf-8", "omni_count"), count[0]


def to_ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def unicode_tables(tokenizer_path):
    """Print EXTRA_L / EXTRA_N and NORM_OPAQUE (code point ranges) for llm/tokenizer.c.

    EXTRA_L/N: code points the reference pre-tokenizer treats as \\p{L} / \\p{N} although Python's unicodedata
    (Unicode 14.0, the version of Debian 12's PCRE2 10.42) does not. Found by splitting probe strings.
    NORM_OPAQUE: code points that utf8proc's NFC treats as combining (ccc > 0) or composing while the reference
    normalizer does not know them; the C side normalizes around them, as the reference does."""
    import ctypes
    import ctypes.util
    tok = Tokenizer.from_file(tokenizer_path)
    pt = tok.pre_tokenizer
    extra = {"L": [], "N": []}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if len(pt.pre_tokenize_str("a" + c)) == 1:
            k = "L"
        elif cp not in (10, 13) and len(pt.pre_tokenize_str(c + c)) == 2:
            k = "N"
        else:
            continue
        if not unicodedata.category(c).startswith(k):
            extra[k].append(cp)

    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc"))

    class Prop(ctypes.Structure):
        _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]

    lib.utf8proc_get_property.restype = ctypes.POINTER(Prop)
    for fn in (lib.utf8proc_NFC, lib.utf8proc_NFD):
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]

    def u8p(fn, s):
        ptr = fn(s.encode())
        r = ctypes.string_at(ptr).decode()
        libc.free(ptr)
        return r

    def u8p_nfc(s):
        return u8p(lib.utf8proc_NFC, s)

    from tokenizers import normalizers
    nfc, nfd = normalizers.NFC(), normalizers.NFD()
    opaque = set()
    for cp in range(0x300, 0x110000):
        if 0xD800 <= cp < 0xE000 or lib.utf8proc_get_property(cp).contents.combining_class == 0:
            continue
        for m in ("\u0334", "\u05b0", "\u0301", "\u0345", "\u0316"):
            if any(nfc.normalize_str(s) != u8p_nfc(s) for s in ("a" + chr(cp) + m, "a" + m + chr(cp))):
                opaque.add(cp)
                break
    for cp in range(0xC0, 0x110000):  # decompositions the reference lacks: block their later characters
        if 0xD800 <= cp < 0xE000:
            continue
        dec = u8p(lib.utf8proc_NFD, chr(cp))
        if dec != chr(cp) and nfd.normalize_str(chr(cp)) == chr(cp):
            opaque.update(ord(x) for x in dec[1:])

    print(f"/* generated by tools/reference/make_tokenizer_cases.py --unicode-tables (tokenizers {tokenizers_version()}) */")
    for name, cps in (("EXTRA_L", extra["L"]), ("EXTRA_N", extra["N"]), ("NORM_OPAQUE", sorted(opaque))):
        print(f"static const uint32_t {name}[][2] = {{")
        rs = to_ranges(cps)
        for i in range(0, len(rs), 6):
            print("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in rs[i:i + 6]))
        print("};")


def tokenizers_version():
    import tokenizers
    return tokenizers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "..", "shared", "data", "qwen3-tokenizer", "tokenizer.json"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "tokenizer", "qwen3_cases.txt"))
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the number of generated strings")
    ap.add_argument("--variant", choices=["none", "gpt2"], default="none",
                    help="gpt2: pre_tokenizer ByteLevel(use_regex=true), ignore_merges, first half of the merges")
    ap.add_argument("--unicode-tables", action="store_true", help="print the Unicode tables of llm/tokenizer.c")
    args = ap.parse_args()
    if args.unicode_tables:
        unicode_tables(args.tokenizer)
        return

    r = random.Random(args.seed)
    if args.variant == "gpt2":
        with open(args.tokenizer, encoding="utf-8") as f:
            d = json.load(f)
        d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        d["model"]["ignore_merges"] = True
        d["model"]["merges"] = d["model"]["merges"][:len(d["model"]["merges"]) // 2]
        tok = Tokenizer.from_str(json.dumps(d))
    else:
        tok = Tokenizer.from_file(args.tokenizer)
    texts = list(HAND)
    for gen, count in CATEGORIES:
        texts += [gen(r) for _ in range(max(1, round(count * args.scale)))]
    plain = HAND[HAND.index("<|im_start|>user\nhi<|im_end|>"):HAND.index("def foo(x):\n    return x * 2\n")]
    plain += [specials_in_text(r) for _ in range(round(120 * args.scale))]
    bad = [bad_bytes_case(r) for _ in range(round(150 * args.scale))] + BAD_BYTES

    lines = [f"# generated by tools/reference/make_tokenizer_cases.py (seed {args.seed}, scale {args.scale}, variant {args.variant}) from "
             f"{os.path.relpath(os.path.abspath(args.tokenizer), REPO)}"]

    def emit(kind, s, enc):
        ids = enc.ids
        rt = int(tok.decode(ids, skip_special_tokens=False) == s)
        lines.append(f"{kind}\t{json.dumps(s, ensure_ascii=True)}\t{rt}\t{' '.join(map(str, ids))}")

    for s in texts:
        emit("T", s, tok.encode(s, add_special_tokens=False))
    tok.encode_special_tokens = True
    for s in plain:
        emit("P", s, tok.encode(s, add_special_tokens=False))
    tok.encode_special_tokens = False
    for b in bad:
        s, n_bad = decode_counting(b)
        ids = tok.encode(s, add_special_tokens=False).ids
        lines.append(f"B\t{b.hex()}\t{n_bad}\t{' '.join(map(str, ids))}")

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{args.out}: {len(texts)} T, {len(plain)} P, {len(bad)} B cases, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
