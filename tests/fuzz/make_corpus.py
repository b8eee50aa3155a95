#!/usr/bin/env python3
"""make_corpus.py - (re)writes the seeds of every fuzz target (tests/fuzz/corpus/TARGET/) from the committed
fixtures plus small synthetic files. Seeds stay small (<= 64 KiB, the fuzzers' -max_len) so that runs are fast.
The inputs merged from fuzzing runs (named by their 40-hex SHA-1) are kept; seeds are named by what they are (or
a 16-hex hash) and overwritten. Run from anywhere: python3 tests/fuzz/make_corpus.py (standard library only)."""
import base64, hashlib, json, os, shutil, struct, sys, wave, io

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")
ROOT = os.path.join(HERE, "..", "..")
OUT = os.path.join(HERE, "corpus")
MAX = 65536


def put(target, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX:
        return
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(*p):
    with open(os.path.join(*p), "rb") as f:
        return f.read()


def safetensors(tensors, meta=None):
    """tensors: name -> (dtype, shape, bytes)."""
    hdr, data = {}, b""
    if meta:
        hdr["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    return struct.pack("<Q", len(h)) + h + data


def seeds_safetensors():
    f32 = struct.pack("<6f", *range(6))
    one = safetensors({"a.weight": ("F32", [2, 3], f32), "b": ("BF16", [4], b"\x80\x3f" * 4),
                       "c": ("I64", [1], struct.pack("<q", 7)), "d": ("U8", [0], b""), "e": ("F16", [], b"\x00\x3c")},
                      {"format": "pt"})
    put("safetensors", b"\x00" + one, "single")
    put("safetensors", b"\x00" + safetensors({"x": ("BOOL", [3, 1], b"\x01\x00\x01")}), "bool")
    put("safetensors", b"\x00" + one[:40], "truncated")
    idx = json.dumps({"metadata": {"total_size": 24}, "weight_map": {"a.weight": "a.safetensors"}}).encode()
    put("safetensors", b"\x01" + idx + b"\n#\n" + safetensors({"a.weight": ("F32", [2, 3], f32)}), "index")
    put("safetensors", b"\x01" + idx, "index_no_shard")
    # the header of a real fixture checkpoint (data section cut)
    real = read(FIX, "text", "qvl-h64-hd128-gqa2-tied", "model.safetensors")
    hl = struct.unpack("<Q", real[:8])[0]
    put("safetensors", b"\x00" + real[:8 + hl] + real[8 + hl:8 + hl + 256], "fixture_header")


def seeds_config():
    for d in sorted(os.listdir(os.path.join(FIX, "text"))):
        p = os.path.join(FIX, "text", d)
        for f in ("config.json", "generation_config.json"):
            if os.path.exists(os.path.join(p, f)):
                put("config", read(p, f), d + "_" + f)
    for m in ("omni-a", "omni-b"):
        put("config", read(FIX, "audio", m, "config.json"), m + "_config.json")
    for d in sorted(os.listdir(os.path.join(ROOT, "assets", "configs"))):
        p = os.path.join(ROOT, "assets", "configs", d)
        if os.path.isdir(p):
            for f in sorted(os.listdir(p)):
                put("config", read(p, f), d + "_" + f)


def seeds_demo_script():
    put("demo_script", "# the README picture\nsize 1280 800\nmodel /m\nkv-a bf16\nkv-b int2\nwait model\n"
        "open a.png\ndrop b.wav\nwait media 300\nprompt Describe\\nthe picture\ntype héllo 中文\ncompose にほん\n"
        "clipboard x\\\\y\nkey ctrl+v\nclick kv-b\nrun\nwait tokens 4 300\nstop\npreset read\nwait done\n"
        "sleep 500\nscreenshot s.png\nprint\nexpect cannot open\nstate\nwait idle 0.5\nclose\n", "all_commands")
    put("demo_script", "wait model\n\n# fine so far\njump 3\n", "unknown_command")
    put("demo_script", "size 63 10000\r\nwait tokens\nclick nothing\n", "bad_values")


def seeds_generation_config():
    """generation_config.json forms (fuzz_config applies them to a fixed config when they are not a config)."""
    for name, g in (("gen_list", {"bos_token_id": 3000, "eos_token_id": [3002, 3001], "do_sample": True}),
                    ("gen_int", {"eos_token_id": 3002, "pad_token_id": 3001, "temperature": 0.7}),
                    ("gen_bad_id", {"eos_token_id": [3002, 99999]}), ("gen_empty", {}),
                    ("gen_bos_null", {"bos_token_id": None, "eos_token_id": [0]})):
        put("config", json.dumps(g), name + ".json")


def tiny_tokenizer(merges_as_pairs=False, normalizer=None, pre=None, added=True):
    alphabet = [chr(c) for c in range(33, 127)] + ["Ġ", "Ċ"]
    vocab = {t: i for i, t in enumerate(alphabet)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": len(vocab) + i, "content": c, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": s}
                            for i, (c, s) in enumerate([("<|im_start|>", True), ("<|im_end|>", True), ("<think>", False)])]
           if added else [],
           "normalizer": normalizer,
           "pre_tokenizer": pre or {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+"},
                "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab,
                     "merges": [[a, b] for a, b in merges] if merges_as_pairs else [a + " " + b for a, b in merges]}}
    return json.dumps(tok)


def seeds_tokenizer_load():
    put("tokenizer_load", tiny_tokenizer(), "strings")
    put("tokenizer_load", tiny_tokenizer(merges_as_pairs=True), "pairs")
    put("tokenizer_load", tiny_tokenizer(normalizer={"type": "NFC"}), "nfc")
    put("tokenizer_load", tiny_tokenizer(normalizer={"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFKC"}]}), "norm_seq")
    put("tokenizer_load", tiny_tokenizer(pre={"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}), "bytelevel")
    put("tokenizer_load", tiny_tokenizer(pre={"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated", "invert": False}), "split_string")
    put("tokenizer_load", tiny_tokenizer(added=False), "no_added")


def seeds_tokenizer_encode():
    n = 0
    for f in ("small_cases.txt", "qwen3_cases.txt"):
        p = os.path.join(FIX, "tokenizer", f)
        if not os.path.exists(p):
            continue
        for line in read(p).split(b"\n")[::25]:
            if line and n < 200:
                put("tokenizer_encode", bytes([n & 1]) + line[:4000])
                n += 1
    put("tokenizer_encode", b"\x01<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>", "chat")
    put("tokenizer_encode", b"\x00ab\xff\xfe\xc3\x28 \xe2\x82 \xf0\x9f\x98\x80 \x00\x00 z", "invalid_utf8")


def seeds_image():
    for f in sorted(os.listdir(os.path.join(FIX, "vision"))):
        if f.split(".")[-1] in ("png", "jpg", "bmp", "gif", "ppm", "pgm", "tga"):
            put("image", read(FIX, "vision", f), f)
    put("image", read(FIX, "audio", "clips", "pattern_64x96.png"), "pattern_64x96.png")


def wav(rate, ch, width, frames):
    b = io.BytesIO()
    w = wave.open(b, "wb")
    w.setnchannels(ch)
    w.setsampwidth(width)
    w.setframerate(rate)
    w.writeframes(bytes((i * 37) & 255 for i in range(frames * ch * width)))
    w.close()
    return b.getvalue()


def seeds_audio():
    for f in ("tone_0p5s.wav", "mono_8k.wav", "tone_1s.wav", "tone_1s.ogg", "tone_1s.opus", "tone_1s.webm",
              "tone_3p3s.m4a", "tone_3p3s.mp3", "video_1s.mp4"):
        put("audio", read(FIX, "audio", "clips", f), f)
    put("audio", read(FIX, "audio", "clips", "tone_3p3s.flac")[:MAX], "tone_cut.flac")
    put("audio", wav(44100, 2, 2, 4000), "stereo16.wav")
    put("audio", wav(8000, 1, 1, 4000), "u8.wav")
    put("audio", wav(48000, 3, 3, 2000), "s24_3ch.wav")
    # float samples near FLT_MAX at 44.1 kHz: the resampler's overshoot gives Inf, which the log-mel refuses
    data = struct.pack("<4000f", *([3.4e38] * 2000 + [-3.4e38] * 2000))
    fmt = struct.pack("<HHIIHH", 3, 1, 44100, 44100 * 4, 4, 32)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    put("audio", b"RIFF" + struct.pack("<I", len(riff)) + riff, "float_near_max_44k.wav")


def seeds_chat_line():
    for i, l in enumerate(["hello there", "/image a.png", "/audio  q.wav  ", "/image", "/clear", "/quit", "/exit",
                           "/help", "/imagery is a word", "   ", "a\r\nb\nc", "/image /tmp/x y z.png\n/quit\n",
                           "x" * 300 + "\nshort\n"]):
        put("chat_line", l, "line%02d" % i)


def seeds_args():
    cmds = ["generate", "chat", "tokenize", "logits", "ocr", "ask", "eval", "bench", "serve", "unknown", "demo"]
    sets = [(0, ["-m", "M", "-p", "hello", "world", "-n", "4", "--temp=0", "--kv", "int2", "--kv-window", "64"]),
            (0, ["-m", "M", "--raw", "--system", "s", "-f", "-", "--image", "a.png", "--", "-x"]),
            (1, ["-m", "M", "--system", "be brief", "-c", "8192", "--kv-layers", "0-3:int4"]),
            (2, ["-m", "M", "-p", "text", "--max-text-bytes", "100"]),
            (3, ["-m", "M", "-p", "hi", "-o", "out.f32", "--top", "5"]),
            (4, ["a.png", "b.png", "-m", "M", "--image-max-tokens", "64", "--prompt", "read"]),
            (5, ["-m", "M", "--audio", "q.wav", "what", "is", "this", "--max-audio-seconds", "30"]),
            (6, ["kl", "-m", "M", "--kv", "int2", "--text", "t.txt", "--ctx", "512", "--chunk", "4", "--json"]),
            (7, ["--random", "cfg.json", "--kv", "bf16,int2", "--batch", "1,8", "--ctx", "4K,32K", "--png-size", "800x600"]),
            (8, ["-m", "M", "--port", "0", "--max-seqs", "4", "--allow-files", "--max-image-mpixels", "2"]),
            (9, ["-h"]),
            (10, ["-m", "M", "--kv-a", "int2", "--kv-b", "bf16", "--size", "1280x720", "--script", "s.txt",
                  "--screenshot", "a.png", "--font", "f.ttf:1"]),
            (0, ["--help"]), (4, ["-h"]), (10, ["--help"]),
            (7, ["-m", "M", "--temp", "0.5"]),  # options a command would ignore are refused (2327e11)
            (8, ["-m", "M", "--api-key", "k", "--alias", "a", "--max-body", "1.5", "--timeout", "30",
                 "--max-queue", "2", "--max-tokens", "16", "--host", "::1"]),
            (1, ["-m", "M", "-p", "x", "--image", "a.png", "--audio", "b.wav", "--kv-sink", "4", "--kv-rotate", "1"])]
    for i, (c, argv) in enumerate(sets):
        put("args", bytes([c]) + b"\0".join(a.encode() for a in argv), "argv%02d_%s" % (i, cmds[c]))


def seeds_server_request():
    png = base64.b64encode(read(FIX, "vision", "fmt_grey.png")).decode()
    wavb = base64.b64encode(wav(16000, 1, 2, 400)).decode()
    chat = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": [
                                           {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}},
                                           {"type": "input_audio", "input_audio": {"data": wavb, "format": "wav"}},
                                           {"type": "text", "text": "what is this?"}]},
                                       {"role": "assistant", "content": "a cat"},
                                       {"role": "user", "content": "sure?"}],
            "temperature": 0.5, "top_p": 0.9, "top_k": 20, "max_tokens": 64, "seed": 7, "stop": ["\n\n", "END"],
            "stream": True, "stream_options": {"include_usage": True}}
    put("server_request", b"\x00" + json.dumps(chat).encode(), "chat_media")
    put("server_request", b"\x00" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(), "chat_min")
    put("server_request", b"\x02" + json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": "file:///tmp/x.png"}, {"type": "text", "text": "read"}]}]}).encode(), "file")
    put("server_request", b"\x01" + json.dumps({"prompt": "Once upon", "max_tokens": 16, "stop": "."}).encode(), "completion")
    put("server_request", b"\x00" + json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": [], "n": 2,
                                                "logprobs": True}).encode(), "refused")
    # session 6 (e5ca17f, ac49f82): refused unless neutral, top_k -1, UTF-8 and NUL checks
    user = [{"role": "developer", "content": "s"}, {"role": "user", "content": "é ünï 日本"}]
    put("server_request", b"\x00" + json.dumps({"messages": user, "repetition_penalty": 1, "min_p": 0, "best_of": 1,
        "top_logprobs": 0, "presence_penalty": 0, "ignore_eos": False, "modalities": ["text"], "top_k": -1,
        "response_format": {"type": "text"}, "tool_choice": "none", "logit_bias": {}, "max_completion_tokens": 8,
        "stop": ["ün", "日"]}, ensure_ascii=False).encode(), "neutral_values")
    put("server_request", b"\x00" + json.dumps({"messages": user, "min_p": 0.1, "guided_json": {"a": 1}}).encode(),
        "refused_min_p")
    put("server_request", b"\x00" + json.dumps({"messages": user, "audio": {"voice": "x"},
                                                "modalities": ["text", "audio"]}).encode(), "refused_audio_out")
    put("server_request", b'\x00{"messages":[{"role":"user","content":"a\\u0000b"}]}', "nul_escape")
    put("server_request", b'\x00{"messages":[{"role":"user","content":"a\\\\u0000b"}]}', "escaped_backslash")
    put("server_request", b'\x00{"messages":[{"role":"user","content":"a\xc3\x28b \xed\xa0\x80"}]}', "bad_utf8")
    put("server_request", b'\x01{"prompt":["the end. then more"],"stop":[". t","the end.",". "],"echo":false}',
        "completion_stops")
    # session 7 (342a229): /tokenize (byte 0 bits 3-4 = 1) and /detokenize (2) bodies, shapes, duplicates
    put("server_request", b"\x08" + json.dumps({"content": "Hello <|im_start|>wörld\n", "with_pieces": True,
                                                "parse_special": True, "add_special": False}).encode(), "tokenize")
    put("server_request", b"\x08" + json.dumps({"content": "日本 \u00e9", "with_pieces": False}).encode(),
        "tokenize_plain")
    put("server_request", b"\x10" + json.dumps({"tokens": [0, 1, 2, 100, 3000, 3071]}).encode(), "detokenize")
    put("server_request", b"\x10" + json.dumps({"tokens": [1, -1, 99999999]}).encode(), "detokenize_bad")
    put("server_request", b'\x00{"messages":[{"role":"user","content":"a"}],"messages":[]}', "duplicate_key")
    put("server_request", b'\x00{"messages":[{"role":"user","content":"tab\there"}]}', "raw_control")
    put("server_request", b"\x00" + b"[" * 70 + b"]" * 70, "deep_nesting")


def seeds_model_path():
    put("model_path", b"\x01abc123\n\n#\nabc123\nold\n", "refs_main")
    put("model_path", b"\x09main\n#\nsnap1\nsnap2", "refs_missing_snapshot")
    put("model_path", b"\x02\n#\nonly", "refs_dir")
    put("model_path", b"\x04\n#\nonly", "refs_fifo")
    put("model_path", b"\x11../..\n#\nx", "refs_dotdot_cachedir")
    put("model_path", b"\x00\n#\n\n#\nOrg/Name", "arg_org_name")
    put("model_path", b"\x00\n#\n\n#\na/" + b"b" * 1500, "arg_long_name")
    put("model_path", b"\x00\n#\n\n#\n./relative/dir", "arg_relative")
    put("model_path", b"\x09abc\n#\nabc\n#\nOrg/Name@main", "arg_revision")
    put("model_path", b"\x08\n#\ns1\ns2\n#\nhttps://huggingface.co/Org/Name/tree/main", "arg_url")


if __name__ == "__main__":
    for f in (seeds_safetensors, seeds_config, seeds_tokenizer_load, seeds_tokenizer_encode, seeds_image, seeds_audio,
              seeds_chat_line, seeds_args, seeds_server_request, seeds_model_path, seeds_generation_config,
              seeds_demo_script):
        f()
    for t in sorted(os.listdir(OUT)):
        print(t, len(os.listdir(os.path.join(OUT, t))), "seeds", file=sys.stderr)
