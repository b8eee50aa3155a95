#!/usr/bin/env python3
"""Small random-weight Qwen3-VL checkpoints + transformers reference outputs for the text decoder.

    python3 tools/reference/make_text_fixtures.py [--out tests/fixtures/text] [--only NAME ...]

For every model in MODELS this writes tests/fixtures/text/<name>/:
  config.json, model.safetensors (or model-0000k-of-0000n.safetensors + model.safetensors.index.json),
  generation_config.json, tokenizer.json, tokenizer_config.json (with the official Qwen3-VL chat template),
  expected.json and <case>.logits.f32 (little-endian float32, vocab_size values, last prompt position).
Checkpoints are written by Qwen3VLForConditionalGeneration.save_pretrained in bfloat16; the expected outputs come
from reloading that directory with dtype=torch.float32 (bf16 weights upcast exactly), eval mode, eager attention.
A summary of all models is written to tests/fixtures/text/index.json. Fully deterministic (seeded).
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

OUT_DIR = os.path.join(common.ROOT, "tests", "fixtures", "text")
MAX_NEW_TOKENS = 16

# name -> text config + extras. vocab_size >= tokenizer size (3033); rows >= 3033 are zeroed (see build_model).
MODELS = [
    dict(name="qvl-h64-hd128-gqa2-tied", hidden=64, heads=4, kv=2, head_dim=128, inter=128, layers=3, tied=True,
         vocab=3072, shard=None, legacy_config=True, seed=101, init=0.08,
         note="tied lm_head; 2 kv heads (GQA 2); hidden != heads*head_dim; config.json rewritten in the layout of "
              "the official Qwen3-VL config.json (text_config.rope_scaling + rope_theta)"),
    dict(name="qvl-h64-hd64-gqa4-untied-sharded", hidden=64, heads=4, kv=1, head_dim=64, inter=128, layers=3,
         tied=False, vocab=3072, shard="400KB", legacy_config=False, seed=202, init=0.08, eos_boost=5.0,
         note="untied lm_head; sharded (model.safetensors.index.json); GQA 4; hidden != heads*head_dim; "
              "config.json as written by transformers 5.17 (text_config.rope_parameters); the lm_head row of "
              "<|im_end|> is scaled x3 so that some greedy generations stop on EOS"),
    dict(name="qvl-h128-hd64-gqa2-tied", hidden=128, heads=2, kv=1, head_dim=64, inter=128, layers=3, tied=True,
         vocab=3072, shard=None, legacy_config=False, seed=303, init=0.06,
         note="tied lm_head; GQA 2; hidden == heads*head_dim"),
    dict(name="qvl-h64-hd128-gqa4-tied-sharded", hidden=64, heads=4, kv=1, head_dim=128, inter=128, layers=3,
         tied=True, vocab=3033, shard="300KB", legacy_config=True, seed=407, init=0.08,
         note="tied lm_head in a sharded checkpoint; GQA 4; vocab_size == tokenizer size (3033); "
              "hidden != heads*head_dim; official config.json layout"),
]

MIN_MARGIN = 1e-3  # every greedy step's top1-top2 logit gap must exceed this (else the next seed is tried)

SYSTEM = "You are a helpful assistant."

LONG_WORDS = ("the model reads each token of the prompt and computes attention over all previous positions "
              "before it writes the next value into the cache and samples one more token from the logits").split()


def long_prompt():
    import random
    rng = random.Random(7)
    words = [rng.choice(LONG_WORDS) for _ in range(215)]
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


PROMPTS = [
    ("en", "The quick brown fox jumps over the lazy dog."),
    ("zh", "我们今天学习中文，天气非常好。"),
    ("ja_mixed", "これは日本語のテストです。Tokyo 2025年!"),
    ("code", "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"),
    ("long", None),  # filled by long_prompt()
    ("one_token", "Hello"),
]


def mrope_section(head_dim):
    half = head_dim // 2
    return {128: [24, 20, 20], 64: [12, 10, 10]}.get(head_dim) or [half - 2 * (half * 5 // 16), half * 5 // 16,
                                                                    half * 5 // 16]


def make_config(m):
    from transformers import Qwen3VLConfig
    ids = common.special_token_ids()
    sec = mrope_section(m["head_dim"])
    assert sum(sec) == m["head_dim"] // 2
    text_config = dict(
        vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["inter"], num_hidden_layers=m["layers"],
        num_attention_heads=m["heads"], num_key_value_heads=m["kv"], head_dim=m["head_dim"], hidden_act="silu",
        max_position_embeddings=262144, initializer_range=m["init"], rms_norm_eps=1e-6, use_cache=True,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": sec,
                         "mrope_interleaved": True},
        attention_bias=False, attention_dropout=0.0,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], tie_word_embeddings=m["tied"],
    )
    vision_config = dict(depth=1, hidden_size=16, hidden_act="gelu_pytorch_tanh", intermediate_size=32, num_heads=2,
                         in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                         out_hidden_size=m["hidden"], num_position_embeddings=16, deepstack_visual_indexes=[0],
                         initializer_range=m["init"])
    cfg = Qwen3VLConfig(text_config=text_config, vision_config=vision_config,
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                        tie_word_embeddings=m["tied"])
    cfg.architectures = ["Qwen3VLForConditionalGeneration"]
    return cfg


def build_model(m):
    from transformers import Qwen3VLForConditionalGeneration
    torch.manual_seed(m["seed"])
    cfg = make_config(m)
    model = Qwen3VLForConditionalGeneration(cfg).to(torch.float32).eval()
    g = torch.Generator().manual_seed(m["seed"] + 1)
    n_tok = common.small_tokenizer_size()
    with torch.no_grad():
        lm = model.model.language_model
        # HF init leaves RMSNorm weights at 1; randomize so that norm bugs are visible.
        norms = [lm.norm] + [n for layer in lm.layers for n in (layer.input_layernorm,
                                                                 layer.post_attention_layernorm,
                                                                 layer.self_attn.q_norm, layer.self_attn.k_norm)]
        for n in norms:
            n.weight.copy_(1.0 + 0.1 * torch.randn(n.weight.shape, generator=g))
        # Re-draw embeddings/linears explicitly (independent of HF's init code paths), std = initializer_range.
        std = m["init"]
        for name, p in lm.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
        if not m["tied"]:
            model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape, generator=g) * std)
        # Rows past the tokenizer (padding ids, as in the real 151936-row checkpoints) are zero, so their logit
        # is exactly 0 and they are never produced by greedy decoding.
        lm.embed_tokens.weight[n_tok:].zero_()
        if not m["tied"]:
            model.lm_head.weight[n_tok:].zero_()
        if m.get("eos_boost"):
            assert not m["tied"]
            model.lm_head.weight[common.special_token_ids()["<|im_end|>"]] *= m["eos_boost"]
        if m["tied"]:
            assert model.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr()
    return model


def legacy_config_json(path, m):
    """Rewrite config.json in the layout of the official Qwen3-VL config.json (transformers 4.57 era):
    text_config.rope_scaling {mrope_interleaved, mrope_section, rope_type} + text_config.rope_theta."""
    with open(path) as f:
        c = json.load(f)
    tc = c["text_config"]
    rp = tc.pop("rope_parameters")
    tc["rope_scaling"] = {"mrope_interleaved": rp["mrope_interleaved"], "mrope_section": rp["mrope_section"],
                          "rope_type": rp["rope_type"]}
    tc["rope_theta"] = int(rp["rope_theta"]) if float(rp["rope_theta"]).is_integer() else rp["rope_theta"]
    tc["tie_word_embeddings"] = m["tied"]
    vc = c["vision_config"]
    vc.pop("rope_parameters", None)
    c["tie_word_embeddings"] = m["tied"]
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def write_generation_config(path):
    ids = common.special_token_ids()
    gc = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
          "pad_token_id": ids["<|endoftext|>"]}
    with open(path, "w") as f:
        json.dump(gc, f, indent=2)
        f.write("\n")


def cases_for(tokenizer):
    cases = []
    for key, text in PROMPTS:
        if text is None:
            text = long_prompt()
        cases.append(dict(name=key + "_raw", prompt=text, raw=True, system=None, text=text))
        msgs = [{"role": "user", "content": text}]
        cases.append(dict(name=key + "_chat", prompt=text, raw=False, system=None,
                          text=tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)))
    text = PROMPTS[0][1]
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    cases.append(dict(name="en_chat_system", prompt=text, raw=False, system=SYSTEM,
                      text=tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)))
    return cases


def make_one(m, out_root):
    """Write one model; if some greedy step has a near-tie (< MIN_MARGIN), retry with the next seed."""
    m = dict(m)
    for attempt in range(50):
        summary = make_one_seed(m, out_root)
        if summary["greedy_min_top2_margin"] >= MIN_MARGIN:
            return summary
        print("  seed %d: min margin %.3g < %g, trying seed %d" % (m["seed"], summary["greedy_min_top2_margin"],
                                                                  MIN_MARGIN, m["seed"] + 1), file=sys.stderr)
        m["seed"] += 1
    raise SystemExit("no seed with a clear greedy margin for " + m["name"])


def make_one_seed(m, out_root):
    from safetensors import safe_open
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration
    import transformers

    d = os.path.join(out_root, m["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model = build_model(m)
    model = model.to(torch.bfloat16)
    kw = {"max_shard_size": m["shard"]} if m["shard"] else {"max_shard_size": "100GB"}
    model.save_pretrained(d, **kw)
    if m["legacy_config"]:
        legacy_config_json(os.path.join(d, "config.json"), m)
    write_generation_config(os.path.join(d, "generation_config.json"))
    common.build_small_tokenizer(d, chat_template=common.load_chat_template(), compact=True)
    del model

    # Inspect what was saved.
    st_files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    names = {}
    for f in st_files:
        with safe_open(os.path.join(d, f), "pt") as sf:
            for k in sf.keys():
                names[k] = f
    has_lm_head = "lm_head.weight" in names
    sharded = os.path.exists(os.path.join(d, "model.safetensors.index.json"))

    tok = AutoTokenizer.from_pretrained(d)
    ref = Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    vocab = ref.config.text_config.vocab_size
    assert vocab == m["vocab"]
    # bf16 -> f32 must be exact: compare with the stored tensors.
    with safe_open(os.path.join(d, names["model.language_model.embed_tokens.weight"]), "pt") as sf:
        e = sf.get_tensor("model.language_model.embed_tokens.weight")
    assert e.dtype == torch.bfloat16
    assert torch.equal(e.float(), ref.model.language_model.embed_tokens.weight)

    ids = common.special_token_ids()
    eos = {ids["<|im_end|>"], ids["<|endoftext|>"]}
    out_cases = []
    for c in cases_for(tok):
        input_ids = tok(c["text"], add_special_tokens=False)["input_ids"]
        x = torch.tensor([input_ids])
        with torch.no_grad():
            logits = ref(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, -1].float()
        assert logits.shape[0] == vocab
        logits_file = c["name"] + ".logits.f32"
        common.write_f32(os.path.join(d, logits_file), logits.numpy())
        top = torch.topk(logits, 5)
        with torch.no_grad():
            gen = ref.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                               max_new_tokens=MAX_NEW_TOKENS, output_scores=True, return_dict_in_generate=True)
        new_ids = gen.sequences[0, len(input_ids):].tolist()
        margins = []
        for s in gen.scores:
            t2 = torch.topk(s[0].float(), 2).values
            margins.append(float(t2[0] - t2[1]))
        # The first greedy token must be the argmax of the stored logits.
        assert new_ids[0] == int(top.indices[0]), (new_ids[0], int(top.indices[0]))
        out_cases.append(dict(
            name=c["name"], prompt=c["prompt"], raw=c["raw"], system=c["system"], text=c["text"],
            input_ids=input_ids, n_input=len(input_ids), logits_file=logits_file,
            argmax=int(top.indices[0]),
            top5=[[int(i), float(v)] for i, v in zip(top.indices, top.values)],
            max_abs_logit=float(logits.abs().max()),
            generated_ids=new_ids,
            generated_text=tok.decode(new_ids, skip_special_tokens=False),
            generated_text_skip_special=tok.decode(new_ids, skip_special_tokens=True),
            stopped_by_eos=bool(new_ids and new_ids[-1] in eos),
            greedy_min_top2_margin=min(margins),
        ))

    tc = ref.config.text_config
    summary = dict(
        name=m["name"], note=m["note"],
        hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size, num_hidden_layers=tc.num_hidden_layers,
        num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
        head_dim=tc.head_dim, gqa_ratio=tc.num_attention_heads // tc.num_key_value_heads, vocab_size=vocab,
        tokenizer_size=common.small_tokenizer_size(), tie_word_embeddings=m["tied"],
        checkpoint_has_lm_head_weight=has_lm_head, sharded=sharded, safetensors_files=st_files,
        config_layout="official (rope_scaling + rope_theta)" if m["legacy_config"] else "transformers 5.17 (rope_parameters)",
        mrope_section=mrope_section(m["head_dim"]), rope_theta=5000000.0, rms_norm_eps=1e-6,
        weights_dtype="bfloat16", initializer_std=m["init"], seed=m["seed"],
        greedy_min_top2_margin=min(c["greedy_min_top2_margin"] for c in out_cases),
        n_tensors=len(names), n_text_tensors=sum(1 for k in names if not k.startswith("model.visual.")),
    )
    expected = dict(
        model=m["name"], generator="tools/reference/make_text_fixtures.py",
        transformers_version=transformers.__version__, torch_version=torch.__version__.split("+")[0],
        reference_dtype="float32", attn_implementation="eager", max_new_tokens=MAX_NEW_TOKENS,
        eos_token_ids=sorted(eos), logits_format="little-endian float32, vocab_size values, last prompt position",
        summary=summary, cases=out_cases,
    )
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    summary["dir_bytes"] = size
    print("%s: %d bytes, lm_head.weight stored: %s, sharded: %s, min margin %.4g" % (
        m["name"], size, has_lm_head, sharded, min(c["greedy_min_top2_margin"] for c in out_cases)), file=sys.stderr)
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    summaries = []
    for m in MODELS:
        if args.only and m["name"] not in args.only:
            continue
        summaries.append(make_one(m, args.out))
    if not args.only:
        with open(os.path.join(args.out, "index.json"), "w") as f:
            json.dump({"models": summaries}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
