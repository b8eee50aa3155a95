"""Shared helpers for the reference-fixture generators in tools/reference/.

Main entry points (import them from other generators):

    from common import build_small_tokenizer, special_token_ids, SMALL_VOCAB_REGULAR

    build_small_tokenizer(out_dir)   # writes out_dir/tokenizer.json + tokenizer_config.json, returns the
                                     # tokenizers.Tokenizer object
    special_token_ids()              # {"<|endoftext|>": 3000, "<|im_start|>": 3001, ...} (dict, name -> id)

The small tokenizer has exactly the structure of the real Qwen3 tokenizer.json
(/work/shared/data/qwen3-tokenizer/tokenizer.json): NFC normalizer, pre_tokenizer
Sequence[Split(<Qwen regex>, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)], ByteLevel
post_processor and decoder, a BPE model (no unk token, no byte_fallback) whose first 256 ids are the byte-level
alphabet, trained to SMALL_VOCAB_REGULAR (3000) regular tokens; after the regular vocabulary come the Qwen3-VL
added tokens in Qwen's order (ids 3000..3025, same flags as the real file) and then the Qwen3-Omni audio/TTS tokens
(ids 3026..3032). Total tokenizer size 3033.

Everything is deterministic: the training corpus is built from a fixed list of CPython standard-library source
files plus seeded, generated English/Chinese/Japanese sentences (see training_corpus()).
"""

import json
import os
import random
import sys

# Qwen pre-tokenizer regex, byte-identical to the real tokenizer.json.
QWEN_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SMALL_VOCAB_REGULAR = 3000

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CHAT_TEMPLATE_PATH = os.path.join(ROOT, "tests", "fixtures", "chat", "qwen3_vl_chat_template.jinja")


def load_chat_template(path=CHAT_TEMPLATE_PATH):
    """The exact official Qwen3-VL Instruct chat template text (committed fixture)."""
    with open(path, encoding="utf-8") as f:
        return f.read()

# (content, special) in Qwen's order. All have single_word/lstrip/rstrip/normalized = false, as in the real file.
QWEN3_VL_ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]

# Qwen3-Omni additions (real ids 151669..151675), in Omni's order; flagged special like the other
# control tokens (Qwen2.5-Omni/Qwen3-Omni tokenizer_config marks them special, not normalized).
QWEN3_OMNI_ADDED_TOKENS = [
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]

ALL_ADDED_TOKENS = QWEN3_VL_ADDED_TOKENS + QWEN3_OMNI_ADDED_TOKENS

# Same list as the real tokenizer_config.json "additional_special_tokens".
ADDITIONAL_SPECIAL_TOKENS = [
    "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
    "<|video_pad|>",
]


def special_token_ids(n_regular=SMALL_VOCAB_REGULAR):
    """Name -> id of every added token of a tokenizer with n_regular regular tokens (regular vocab first, then
    these in order)."""
    return {name: n_regular + i for i, (name, _) in enumerate(ALL_ADDED_TOKENS)}


def small_tokenizer_size(n_regular=SMALL_VOCAB_REGULAR):
    return n_regular + len(ALL_ADDED_TOKENS)


# Fixed list of CPython stdlib files (present in every 3.11/3.12 install) used as English/code training text.
_STDLIB_FILES = [
    "textwrap.py", "argparse.py", "json/__init__.py", "json/decoder.py", "json/encoder.py", "string.py",
    "shlex.py", "difflib.py", "csv.py", "fractions.py", "calendar.py", "heapq.py", "bisect.py", "pprint.py",
    "enum.py", "dataclasses.py", "functools.py", "contextlib.py", "getopt.py", "colorsys.py", "this.py",
    "base64.py", "random.py", "statistics.py",
]

_ZH_PHRASES = [
    "我们", "今天", "明天", "昨天", "天气", "很好", "非常", "学习", "中文", "语言", "模型", "计算机", "程序",
    "数据", "图像", "文字", "识别", "问题", "回答", "人工智能", "机器学习", "神经网络", "北京", "上海", "中国",
    "世界", "朋友", "时间", "工作", "生活", "可以", "需要", "因为", "所以", "但是", "如果", "这个", "那个",
    "一个", "我的", "你的", "他们", "喜欢", "看书", "写字", "吃饭", "喝茶", "东西", "地方", "大家", "知道",
]
_ZH_END = ["。", "，", "？", "！", "；"]
_JA_PHRASES = [
    "これは", "それは", "私は", "日本語", "です", "ます", "でした", "ません", "ください", "ありがとう",
    "こんにちは", "東京", "大阪", "学生", "先生", "勉強", "します", "しました", "画像", "文字", "認識",
    "モデル", "コンピュータ", "プログラム", "データ", "テスト", "今日", "明日", "天気", "とても", "いい",
    "の", "を", "に", "が", "は", "で", "と", "も", "から", "まで", "ソフトウェア", "ネットワーク",
]
_JA_END = ["。", "、", "？", "！"]
_EN_WORDS = (
    "the quick brown fox jumps over lazy dog model token image text vision language decoder layer attention "
    "cache memory compute weight tensor matrix vector value key query head hidden state output input batch "
    "sequence position rotary embedding norm scale softmax logits sample greedy temperature probability "
    "hello world test file read write open close number string list dict python engine inference fast small"
).split()


def _generated_text(rng):
    parts = []
    for _ in range(2500):
        n = rng.randint(3, 12)
        parts.append("".join(rng.choice(_ZH_PHRASES) for _ in range(n)) + rng.choice(_ZH_END))
        if rng.random() < 0.15:
            parts.append("\n")
    for _ in range(2500):
        n = rng.randint(3, 12)
        parts.append("".join(rng.choice(_JA_PHRASES) for _ in range(n)) + rng.choice(_JA_END))
        if rng.random() < 0.15:
            parts.append("\n")
    for _ in range(2500):
        n = rng.randint(4, 14)
        w = " ".join(rng.choice(_EN_WORDS) for _ in range(n))
        parts.append(w[0].upper() + w[1:] + rng.choice([". ", "! ", "? ", ", ", ".\n"]))
        if rng.random() < 0.1:
            parts.append("%d %0.2f %s\n" % (rng.randint(0, 99999), rng.random() * 100, rng.choice(["kg", "MB", "ms"])))
    return "".join(parts)


def training_corpus():
    """Deterministic list of training strings (a few hundred KB in total)."""
    libdir = os.path.dirname(os.__file__)
    texts = []
    for rel in _STDLIB_FILES:
        p = os.path.join(libdir, rel)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                texts.append(f.read())
        else:
            print("warning: %s missing, tokenizer will differ" % p, file=sys.stderr)
    texts.append(_generated_text(random.Random(1234)))
    return texts


def build_small_tokenizer(out_dir, chat_template=None, compact=False, corpus=None, n_regular=SMALL_VOCAB_REGULAR):
    """Train the small Qwen-structured byte-level BPE tokenizer and write tokenizer.json + tokenizer_config.json
    to out_dir. chat_template (str or None) goes into tokenizer_config.json; compact=True writes tokenizer.json
    without indentation (same content). corpus (list of str, default training_corpus()) and n_regular (number of
    regular tokens, >= 256) let tools/train build the embedded models' own tokenizers with the same structure.
    Returns the tokenizers.Tokenizer."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=n_regular, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(training_corpus() if corpus is None else corpus, trainer=trainer)
    assert tok.get_vocab_size() == n_regular, tok.get_vocab_size()
    for name, special in ALL_ADDED_TOKENS:
        t = AddedToken(name, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    ids = special_token_ids(n_regular)
    for name, i in ids.items():
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name), i)

    os.makedirs(out_dir, exist_ok=True)
    # Re-serialize through json so the layout matches the real file (model.merges as [a, b] pairs).
    data = json.loads(tok.to_str())
    # The Python bindings do not carry these options into the JSON; set them as in the real Qwen3 file.
    data["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    data["model"]["continuing_subword_prefix"] = ""
    data["model"]["end_of_word_suffix"] = ""
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        if compact:  # same content, no indentation (the model fixture dirs use this to stay small)
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(data, f, ensure_ascii=False, indent=2)
        f.write("\n")
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    assert tok.get_vocab_size() == small_tokenizer_size(n_regular)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(chat_template, n_regular), f, ensure_ascii=False, indent=2)
        f.write("\n")
    return tok


def tokenizer_config(chat_template=None, n_regular=SMALL_VOCAB_REGULAR):
    """tokenizer_config.json contents mirroring the real Qwen3 one (ids remapped to the small vocab)."""
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": special}
            for i, (name, special) in zip(range(n_regular, small_tokenizer_size(n_regular)), ALL_ADDED_TOKENS)
        },
        "additional_special_tokens": list(ADDITIONAL_SPECIAL_TOKENS),
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    return cfg


def write_f32(path, array):
    """Write a little-endian float32 raw file."""
    import numpy as np
    np.asarray(array, dtype="<f4").tofile(path)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "tok-small")
    t = build_small_tokenizer(out, chat_template=load_chat_template())
    print("wrote", out, "size", t.get_vocab_size())
