#!/usr/bin/env python3
"""fidelity_sweep.py - `omni logits` vs transformers 5.17.0 on random tiny checkpoints of many configurations.

Not a fixture generator: a sweep that looks for discrepancies in places the committed fixtures do not reach
(other head_dim / GQA ratios / tie flags / rope settings / DeepStack taps / vision and audio tower shapes, odd
image sizes, several images, audio of awkward lengths, audio + image). Each case builds a random-weight checkpoint
with the real tensor names in a scratch directory, runs transformers in float32 (eager attention) on it, runs
`build/omni logits` on the same files and prints max|d|/max|ref| of the last-position logits and the two argmaxes.

Run from the repository root (needs transformers==5.17.0, torch, pillow, numpy; build/omni built):
    python3 tools/reference/fidelity_sweep.py [--omni build/omni] [--work /tmp/fidsweep] [CASE_PREFIX ...]
Exit status 1 when a case exceeds 1e-3 or the argmaxes differ.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import wave

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = common.ROOT
TOK_DIR = os.path.join(ROOT, "tests", "fixtures", "tok-small")
IDS = common.special_token_ids()
VOCAB = 3040
GREEDY = 0          # --greedy N: also compare N greedy tokens (omni generate --temp 0 vs transformers generate)
GREEDY_OUT = [None]


# ---- checkpoints ----------------------------------------------------------------------------------------------

def randomize(model, seed):
    """Weights large enough that logits are not flat; norm weights around 1; small biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, prm in model.named_parameters():
            leaf = name.rsplit(".", 1)[0]
            if name.endswith(".weight") and prm.dim() == 1:  # every 1-D weight is a norm scale
                prm.copy_(1.0 + 0.1 * torch.randn(prm.shape, generator=g))
            elif name.endswith(".bias"):
                prm.copy_(0.05 * torch.randn(prm.shape, generator=g))
            else:
                fan_in = int(np.prod(prm.shape[1:])) if prm.dim() >= 2 else prm.numel()
                if "experts" in name and prm.dim() == 3:  # fused experts [E, out, in]
                    fan_in = prm.shape[-1]
                std = 1.0 / np.sqrt(fan_in)
                if leaf.endswith("embed_tokens") or leaf.endswith("pos_embed"):
                    std = 0.5
                prm.copy_(std * torch.randn(prm.shape, generator=g))


def copy_tokenizer(d):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK_DIR, f), os.path.join(d, f))
    json.dump({"bos_token_id": IDS["<|endoftext|>"], "eos_token_id": [IDS["<|im_end|>"], IDS["<|endoftext|>"]],
               "pad_token_id": IDS["<|endoftext|>"]}, open(os.path.join(d, "generation_config.json"), "w"))


def write_preprocessor(d, prep):
    json.dump({"image_processor_type": "Qwen2VLImageProcessor", "do_convert_rgb": True, "do_normalize": True,
               "do_rescale": True, "do_resize": True, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
               "merge_size": prep["merge"], "patch_size": prep["patch"], "temporal_patch_size": prep["tps"],
               "resample": 3, "rescale_factor": 1 / 255,
               "size": {"shortest_edge": prep["min_pixels"], "longest_edge": prep["max_pixels"]}},
              open(os.path.join(d, "preprocessor_config.json"), "w"), indent=1)


def vl_model(d, s):
    """Qwen3VLForConditionalGeneration with spec s -> saved bf16 dir d; returns the float32 reload."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    rope = dict(rope_type="default", rope_theta=s.get("theta", 5e6))
    if "mrope" in s:
        rope["mrope_section"] = s["mrope"]
    if s.get("interleaved", True) is not None:
        rope["mrope_interleaved"] = s.get("interleaved", True)
    text = dict(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=s.get("inter", 2 * s["hidden"]),
                num_hidden_layers=s.get("layers", 2), num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
                head_dim=s["head_dim"], hidden_act="silu", max_position_embeddings=s.get("max_pos", 4096),
                rms_norm_eps=s.get("eps", 1e-6), rope_parameters=rope, bos_token_id=IDS["<|endoftext|>"],
                eos_token_id=IDS["<|im_end|>"])
    vision = dict(depth=s.get("v_depth", 2), hidden_size=s.get("v_hidden", 16), hidden_act="gelu_pytorch_tanh",
                  intermediate_size=s.get("v_inter", 32), num_heads=s.get("v_heads", 2), in_channels=3,
                  patch_size=s.get("patch", 16), spatial_merge_size=s.get("merge", 2),
                  temporal_patch_size=s.get("tps", 2), out_hidden_size=s["hidden"],
                  num_position_embeddings=s.get("n_pos", 64), deepstack_visual_indexes=s.get("deepstack", [0]))
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IDS["<|image_pad|>"],
                        video_token_id=IDS["<|video_pad|>"], vision_start_token_id=IDS["<|vision_start|>"],
                        vision_end_token_id=IDS["<|vision_end|>"], tie_word_embeddings=s.get("tie", True))
    torch.manual_seed(s["seed"])
    model = Qwen3VLForConditionalGeneration(cfg)
    randomize(model, s["seed"])
    shutil.rmtree(d, ignore_errors=True)
    model.to(s.get("dtype", torch.bfloat16)).save_pretrained(d)
    if "edit_config" in s:  # rewrite config.json the way another writer would
        c = json.load(open(os.path.join(d, "config.json")))
        s["edit_config"](c)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
    copy_tokenizer(d)
    write_preprocessor(d, dict(merge=s.get("merge", 2), patch=s.get("patch", 16), tps=s.get("tps", 2),
                               min_pixels=s.get("min_pixels", 4096), max_pixels=s.get("max_pixels", 65536)))
    m = Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def omni_model(d, s):
    """Qwen3-Omni thinker with spec s, saved as a qwen3_omni_moe dir (thinker. prefix, per-expert tensors)."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3OmniMoeForConditionalGeneration, Qwen3OmniMoeThinkerConfig
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration
    rope = dict(rope_type="default", rope_theta=s.get("theta", 1e6), mrope_section=s["mrope"],
                interleaved=True, mrope_interleaved=True)
    text = dict(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=2 * s["hidden"],
                num_hidden_layers=s.get("layers", 2), num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
                head_dim=s["head_dim"], max_position_embeddings=4096, rms_norm_eps=1e-6, rope_parameters=rope,
                moe_intermediate_size=s.get("moe_inter", 16), num_experts=s["experts"],
                num_experts_per_tok=s["top_k"], norm_topk_prob=s.get("norm_topk", True), decoder_sparse_step=1,
                mlp_only_layers=[], bos_token_id=IDS["<|endoftext|>"], eos_token_id=IDS["<|im_end|>"])
    audio = dict(num_mel_bins=128, d_model=s.get("a_d", 32), encoder_layers=s.get("a_layers", 1),
                 encoder_attention_heads=s.get("a_heads", 2), encoder_ffn_dim=s.get("a_ffn", 64),
                 downsample_hidden_size=s.get("a_conv", 8), output_dim=s["hidden"], n_window=s.get("n_window", 50),
                 n_window_infer=s.get("n_window_infer", 800), conv_chunksize=s.get("conv_chunksize", 500),
                 max_source_positions=1500, activation_function="gelu", scale_embedding=False)
    vision = dict(depth=s.get("v_depth", 2), hidden_size=16, num_heads=2, intermediate_size=32,
                  hidden_act="gelu_pytorch_tanh", patch_size=16, temporal_patch_size=2, spatial_merge_size=2,
                  in_channels=3, out_hidden_size=s["hidden"], num_position_embeddings=64,
                  deepstack_visual_indexes=s.get("deepstack", [0, 1]))
    tc = Qwen3OmniMoeThinkerConfig(
        text_config=text, audio_config=audio, vision_config=vision, audio_token_id=IDS["<|audio_pad|>"],
        audio_start_token_id=IDS["<|audio_start|>"], audio_end_token_id=IDS["<|audio_end|>"],
        image_token_id=IDS["<|image_pad|>"], video_token_id=IDS["<|video_pad|>"],
        vision_start_token_id=IDS["<|vision_start|>"], vision_end_token_id=IDS["<|vision_end|>"],
        position_id_per_seconds=13, seconds_per_chunk=2, user_token_id=872 % VOCAB)
    torch.manual_seed(s["seed"])
    model = Qwen3OmniMoeThinkerForConditionalGeneration(tc)
    randomize(model, s["seed"])
    shutil.rmtree(d, ignore_errors=True)
    tmp = d + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(s.get("dtype", torch.bfloat16)).save_pretrained(tmp)
    sd = load_file(os.path.join(tmp, "model.safetensors"))
    os.makedirs(d)
    save_file({"thinker." + k: v.contiguous() for k, v in sorted(sd.items())}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    tcfg = json.load(open(os.path.join(tmp, "config.json")))
    shutil.rmtree(tmp)
    for k in ("architectures", "transformers_version", "dtype"):
        tcfg.pop(k, None)
    json.dump({"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
               "enable_audio_output": False, "thinker_config": tcfg, "dtype": "bfloat16"},
              open(os.path.join(d, "config.json"), "w"), indent=1)
    copy_tokenizer(d)
    write_preprocessor(d, dict(merge=2, patch=16, tps=2, min_pixels=3136, max_pixels=12845056))
    full = Qwen3OmniMoeForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return full.eval().thinker


# ---- inputs ---------------------------------------------------------------------------------------------------

def picture(w, h, seed):
    """The vision fixtures' structured picture (make_vision_fixtures.picture) with stronger noise."""
    from make_vision_fixtures import picture as fixture_picture
    return fixture_picture(w, h, seed, noise=12)


def image_file(work, w, h, seed):
    p = os.path.join(work, f"img_{w}x{h}_{seed}.png")
    if not os.path.exists(p):
        Image.fromarray(picture(w, h, seed), "RGB").save(p)
    return p


def wav_file(work, seconds, seed):
    p = os.path.join(work, f"wav_{seconds}_{seed}.wav")
    n = int(round(seconds * 16000))
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    x = sum((0.4 / k) * np.sin(2 * np.pi * (150 + 40 * np.sin(2 * np.pi * 0.9 * t)) * k * t + k) for k in range(1, 8))
    x = x * (0.6 + 0.4 * np.sin(2 * np.pi * 2.1 * t) ** 2) + 0.03 * rng.standard_normal(n)
    q = np.clip(np.round(0.4 * x / np.max(np.abs(x)) * 32767), -32768, 32767).astype("<i2")
    with wave.open(p, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(q.tobytes())
    return p, q.astype(np.float32) / 32768.0


# ---- references -----------------------------------------------------------------------------------------------

def image_processor(d):
    from transformers import Qwen2VLImageProcessor
    c = json.load(open(os.path.join(d, "preprocessor_config.json")))
    return Qwen2VLImageProcessor(size=c["size"], patch_size=c["patch_size"],
                                 temporal_patch_size=c["temporal_patch_size"], merge_size=c["merge_size"],
                                 image_mean=c["image_mean"], image_std=c["image_std"])


@torch.no_grad()
def vl_reference(m, d, text, images):
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
    kw = {}
    s = text
    if images:
        ip = image_processor(d)
        merge = json.load(open(os.path.join(d, "preprocessor_config.json")))["merge_size"]
        o = ip(images=[Image.open(p).convert("RGB") for p in images], return_tensors="pt")
        grids = o["image_grid_thw"]
        parts = text.split("<|image_pad|>")
        s = parts[0]
        for g, part in zip(grids.tolist(), parts[1:]):
            s += "<|image_pad|>" * (g[0] * g[1] * g[2] // (merge * merge)) + part
        kw = dict(pixel_values=o["pixel_values"], image_grid_thw=grids)
    ids = torch.tensor([tok(s, add_special_tokens=False)["input_ids"]])
    if images:
        kw["mm_token_type_ids"] = (ids == IDS["<|image_pad|>"]).int()
    m.model.rope_deltas = None
    out = m(input_ids=ids, **kw)
    if GREEDY:
        m.model.rope_deltas = None
        gen = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=GREEDY,
                         **kw)[0, ids.shape[1]:].tolist()
        GREEDY_OUT[0] = gen
    return out.logits[0, -1].float().numpy(), ids.shape[1]


@torch.no_grad()
def omni_reference(m, d, text, images, audios):
    from transformers import PreTrainedTokenizerFast, WhisperFeatureExtractor
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=300,
                                 n_fft=400, padding_value=0.0, dither=0.0, return_attention_mask=True)
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths
    kw, s = {}, text
    if audios:  # as Qwen3OmniMoeProcessor calls the feature extractor: the batch padded to the longest clip
        r = fe(audios, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
               return_tensors="pt")
        kw["input_features"] = r["input_features"]
        kw["feature_attention_mask"] = r["attention_mask"]
        lens = r["attention_mask"].sum(-1).tolist()
        parts = s.split("<|audio_pad|>")
        s = parts[0]
        for t, part in zip(lens, parts[1:]):
            s += "<|audio_pad|>" * int(_get_feat_extract_output_lengths(torch.tensor(t))) + part
    if images:
        ip = image_processor(d)
        o = ip(images=[Image.open(p).convert("RGB") for p in images], return_tensors="pt")
        grids = o["image_grid_thw"]
        parts = s.split("<|image_pad|>")
        s = parts[0]
        for g, part in zip(grids.tolist(), parts[1:]):
            s += "<|image_pad|>" * (g[0] * g[1] * g[2] // 4) + part
        kw.update(pixel_values=o["pixel_values"], image_grid_thw=grids)
    ids = torch.tensor([tok(s, add_special_tokens=False)["input_ids"]])
    m.model.rope_deltas = None if hasattr(m, "model") else None
    m.rope_deltas = None
    out = m(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
    if GREEDY:
        m.rope_deltas = None
        gen = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=GREEDY,
                         **kw)[0, ids.shape[1]:].tolist()
        GREEDY_OUT[0] = gen
    return out.logits[0, -1].float().numpy(), ids.shape[1]


def greedy_check(name, omni, d, text, images, audios, rows):
    """omni generate --temp 0 -n GREEDY (text on stdout) vs the decoded transformers greedy tokens (EOS dropped)."""
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
    ids = GREEDY_OUT[0]
    if ids and ids[-1] in (IDS["<|im_end|>"], IDS["<|endoftext|>"]):
        ids = ids[:-1]
    want = tok.decode(ids, skip_special_tokens=False)
    cmd = [omni, "generate", "-m", d, "--raw", "--temp", "0", "-n", str(GREEDY), "--no-perf", "-t", "1",
           "-c", "16384"]
    for p in images:
        cmd += ["--image", p]
    for p in audios:
        cmd += ["--audio", p]
    r = subprocess.run(cmd + ["-p", text], capture_output=True)
    got = r.stdout.decode("utf-8", "replace").rstrip("\n")
    ok = r.returncode == 0 and got == want.rstrip("\n")
    print(f"{name + ' greedy':28s} {len(ids)} tokens {'same' if ok else 'DIFFER'}"
          + ("" if ok else f": omni {got!r} transformers {want!r}"), flush=True)
    rows.append((name + " greedy", 0.0 if ok else None))
    return ok


def run_omni(omni, d, text, images, audios, out):
    cmd = [omni, "logits", "-m", d, "--raw", "-o", out, "-t", "1", "-c", "16384"]
    for p in images:
        cmd += ["--image", p]
    for p in audios:
        cmd += ["--audio", p]
    cmd += ["-p", text]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    return np.fromfile(out, dtype="<f4"), ""


# ---- cases ----------------------------------------------------------------------------------------------------

T_TEXT = "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n"


def img_prompt(n, text="Describe."):
    return "<|im_start|>user\n" + "<|vision_start|><|image_pad|><|vision_end|>" * n + text + \
        "<|im_end|>\n<|im_start|>assistant\n"


VL_SPECS = {
    # head_dim 32, GQA 4, untied, theta 1e4, deepstack taps [0, 2] of depth 3
    "vl-a": dict(seed=1, hidden=32, heads=4, kv=1, head_dim=32, mrope=[6, 5, 5], tie=False, theta=1e4,
                 v_depth=3, deepstack=[0, 2]),
    # head_dim 16, no GQA, tied, mrope section other than the [24,20,20] ratio, 3 layers, no deepstack
    "vl-b": dict(seed=2, hidden=48, heads=3, kv=3, head_dim=16, mrope=[2, 3, 3], tie=True, theta=1e6, layers=3,
                 v_depth=1, deepstack=[]),
    # head_dim 64 GQA 2, config without mrope_interleaved (transformers interleaves regardless)
    "vl-c": dict(seed=3, hidden=32, heads=4, kv=2, head_dim=64, mrope=[12, 10, 10], interleaved=None,
                 v_depth=2, deepstack=[1]),
    # no mrope_section in the config (transformers defaults to [24, 20, 20])
    "vl-d": dict(seed=4, hidden=32, heads=2, kv=1, head_dim=128, interleaved=None, v_depth=2, deepstack=[0, 1],
                 v_hidden=24, v_heads=3, v_inter=40),
    # patch 14 (Qwen2-VL-like grid factor 28), 4 deepstack taps, vision head_dim 8, eps 1e-5
    "vl-e": dict(seed=5, hidden=32, heads=2, kv=1, head_dim=32, mrope=[6, 5, 5], patch=14, v_depth=4,
                 deepstack=[0, 1, 2, 3], v_hidden=16, v_heads=2, eps=1e-5),
    # temporal_patch_size 1, tie flag only in text_config (transformers reads the top-level one: untied)
    "vl-f": dict(seed=6, hidden=32, heads=2, kv=2, head_dim=32, mrope=[6, 5, 5], tps=1, tie=False,
                 edit_config=lambda c: (c.pop("tie_word_embeddings", None),
                                        c["text_config"].__setitem__("tie_word_embeddings", True))),
    # float16 checkpoint, GQA 3 (6 heads / 2 kv), 1 layer
    "vl-g": dict(seed=7, hidden=48, heads=6, kv=2, head_dim=16, mrope=[2, 3, 3], layers=1, dtype=torch.float16),
    # float32 checkpoint, untied, 4 layers
    "vl-h": dict(seed=8, hidden=32, heads=2, kv=1, head_dim=32, mrope=[6, 5, 5], layers=4, tie=False,
                 dtype=torch.float32),
}

LONG = " ".join(f"item {i} costs {i * 37 % 101} coins; the {['red', 'blue', 'green'][i % 3]} one is here." for i in range(170))

VL_INPUTS = {
    "text": (T_TEXT, []),
    "long": ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n" + LONG + "<|im_end|>\n"
             "<|im_start|>assistant\nSure.<|im_end|>\n<|im_start|>user\nAnd the last one?<|im_end|>\n"
             "<|im_start|>assistant\n", []),
    "long_img": (img_prompt(1, LONG[:3000]), [(300, 200, 13)]),
    "img_exact": (img_prompt(1), [(128, 64, 1)]),
    "img_tiny": (img_prompt(1), [(3, 2, 2)]),
    "img_wide": (img_prompt(1), [(600, 7, 3)]),
    "img_tall": (img_prompt(1), [(9, 500, 4)]),
    "img_odd": (img_prompt(1), [(101, 77, 5)]),
    "img_ar150": (img_prompt(1), [(300, 2, 14)]),
    "img_ar190": (img_prompt(1), [(2, 380, 15)]),
    "img_big": (img_prompt(1), [(700, 500, 6)]),
    "img_two": (img_prompt(2), [(64, 96, 7), (90, 40, 8)]),
    "img_interleave": ("<|im_start|>user\nFirst <|vision_start|><|image_pad|><|vision_end|> then "
                       "<|vision_start|><|image_pad|><|vision_end|> and text after.<|im_end|>\n"
                       "<|im_start|>assistant\n", [(50, 50, 9), (120, 33, 10)]),
}

OMNI_SPECS = {
    # 4 experts top-1, norm_topk_prob false
    "om-a": dict(seed=21, hidden=32, heads=4, kv=2, head_dim=16, mrope=[2, 3, 3], experts=4, top_k=1,
                 norm_topk=False),
    # 16 experts top-8 (norm), 3 layers, 2 audio layers, window 400 (52 tokens)
    "om-b": dict(seed=22, hidden=32, heads=2, kv=1, head_dim=32, mrope=[6, 5, 5], experts=16, top_k=8, layers=3,
                 a_layers=2, n_window_infer=400),
    # 6 experts top-3 unnormalised, head_dim 64, theta 1e4, deepstack 3 taps
    "om-c": dict(seed=23, hidden=48, heads=2, kv=2, head_dim=64, mrope=[12, 10, 10], experts=6, top_k=3,
                 norm_topk=False, theta=1e4, v_depth=3, deepstack=[0, 1, 2]),
    # float16 checkpoint, 32 experts top-4, 1 layer, 3 audio layers
    "om-d": dict(seed=24, hidden=32, heads=4, kv=1, head_dim=16, mrope=[2, 3, 3], experts=32, top_k=4, layers=1,
                 a_layers=3, dtype=torch.float16),
}

OMNI_INPUTS = {
    "text": (T_TEXT, [], []),
    "a_0p2s": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What?<|im_end|>\n<|im_start|>assistant\n",
               [], [0.2]),
    "a_1s": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What?<|im_end|>\n<|im_start|>assistant\n",
             [], [1.0]),
    "a_1p01s": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What?<|im_end|>\n"
                "<|im_start|>assistant\n", [], [1.01]),
    "a_8s": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What?<|im_end|>\n<|im_start|>assistant\n",
             [], [8.0]),
    "a_8p5s": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What?<|im_end|>\n<|im_start|>assistant\n",
               [], [8.5]),
    "a_31s": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What?<|im_end|>\n<|im_start|>assistant\n",
              [], [31.0]),
    "a_two": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>and<|audio_start|><|audio_pad|>"
              "<|audio_end|>Compare.<|im_end|>\n<|im_start|>assistant\n", [], [2.3, 0.7]),
    "a_img": ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|><|vision_start|><|image_pad|>"
              "<|vision_end|>What?<|im_end|>\n<|im_start|>assistant\n", [(70, 45, 11)], [1.7]),
    "img_a": ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|audio_start|><|audio_pad|>"
              "<|audio_end|>What?<|im_end|>\n<|im_start|>assistant\n", [(40, 90, 12)], [0.9]),
}


def ref_path(d, case):
    return os.path.join(d, f"ref.{case}.f32")


def cached(d, case, m, make):
    """Reference logits of a case: made with the model m, or read back from an earlier run (m None)."""
    p = ref_path(d, case)
    if m is None:
        meta = json.load(open(p + ".json"))
        return np.fromfile(p, dtype="<f4"), meta["n_tokens"]
    ref, n = make()
    ref.astype("<f4").tofile(p)
    json.dump({"n_tokens": n}, open(p + ".json", "w"))
    return ref, n


def compare(name, ref, got, err, n_tok, rows):
    if got is None:
        print(f"{name:28s} omni refused: {err}", flush=True)
        rows.append((name, None))
        return False
    if got.shape != ref.shape:
        print(f"{name:28s} shape {got.shape} vs {ref.shape}", flush=True)
        rows.append((name, None))
        return False
    d = float(np.max(np.abs(got - ref)))
    rel = d / float(np.max(np.abs(ref)))
    ok = rel <= 1e-3 and int(got.argmax()) == int(ref.argmax())
    print(f"{name:28s} tokens {n_tok:5d}  max|d| {d:.3e}  rel {rel:.3e}  argmax {int(ref.argmax())}/"
          f"{int(got.argmax())}  {'ok' if ok else 'MISMATCH'}", flush=True)
    rows.append((name, rel))
    return ok


def run_case(a, rows, m, d, name, case, inp, reference):
    """One input on one checkpoint: transformers (or its cached logits) vs omni. Returns the number of failures."""
    text, imgs, auds = inp
    paths = [image_file(a.work, *i) for i in imgs]
    wavs = [wav_file(a.work, sec, 100 + i) for i, sec in enumerate(auds)]
    try:
        ref, n = cached(d, case, m, lambda: reference(m, d, text, paths, [w for _, w in wavs]))
    except Exception as e:  # noqa: BLE001
        print(f"{name:28s} transformers failed: {type(e).__name__}: {e}", flush=True)
        return 0
    if a.refs_only:
        return 0
    got, err = run_omni(a.omni, d, text, paths, [p for p, _ in wavs], os.path.join(a.work, "out.f32"))
    bad = not compare(name, ref, got, err, n, rows)
    if GREEDY:
        bad += not greedy_check(name, a.omni, d, text, paths, [p for p, _ in wavs], rows)
    return int(bad)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omni", default=os.path.join(ROOT, "build", "omni"))
    ap.add_argument("--work", default="/tmp/fidsweep")
    ap.add_argument("--reuse", action="store_true", help="reuse the checkpoints and references of --work")
    ap.add_argument("--greedy", type=int, default=0, help="also compare N greedy tokens (references made anew)")
    ap.add_argument("--refs-only", action="store_true", help="make the references, do not run omni")
    ap.add_argument("only", nargs="*")
    a = ap.parse_args()
    torch.set_num_threads(1)
    global GREEDY
    GREEDY = a.greedy
    if GREEDY:
        a.reuse = False
    os.makedirs(a.work, exist_ok=True)
    want = lambda n: not a.only or any(n.startswith(o) for o in a.only)  # noqa: E731
    bad, rows = 0, []
    families = [(VL_SPECS, {k: (t, i, []) for k, (t, i) in VL_INPUTS.items()}, vl_model,
                 lambda m, d, t, p, w: vl_reference(m, d, t, p)),
                (OMNI_SPECS, OMNI_INPUTS, omni_model, omni_reference)]
    for specs, inputs, make_model, reference in families:
        for mname, spec in specs.items():
            todo = [k for k in inputs if want(f"{mname}/{k}")]
            if not todo:
                continue
            d = os.path.join(a.work, mname)
            m = None if a.reuse and all(os.path.exists(ref_path(d, k)) for k in todo) else make_model(d, dict(spec))
            for k in todo:
                bad += run_case(a, rows, m, d, f"{mname}/{k}", k, inputs[k], reference)
    print(f"{len(rows) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
