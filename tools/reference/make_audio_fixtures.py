#!/usr/bin/env python3
"""make_audio_fixtures.py - audio clips, log-mel / token-count / resampling references, and small random-weight
Qwen3-Omni thinker checkpoints with expected tower outputs, logits and greedy tokens (tests/fixtures/audio/).

Run from the repository root:  python3 tools/reference/make_audio_fixtures.py
Needs: transformers==5.17.0, torch, numpy, the ffmpeg CLI (libswresample, flac, libmp3lame, aac, libvorbis,
libopus), tests/fixtures/tok-small (tools/reference/common.py). Deterministic (seeded numpy/torch).

Layout written (all little-endian; *.f32 = raw float32):
  clips/          tone_0p5s.wav (0.5 s), tone_1s.wav (exactly 1 s), tone_3p3s.wav (3.3 s), tone_9s.wav (9 s): 16 kHz
                  mono 16-bit; tone_3p3s.{flac,mp3,m4a} (same clip), tone_1s.{ogg,opus,webm}; video_1s.mp4 (video
                  track + the 1 s clip as AAC); stereo_44k.wav
                  (0.5 s, 44.1 kHz stereo 16-bit); mono_8k.wav (1 s, 8 kHz mono 16-bit)
  ref/            mel_<clip>.f32 [128, T] (WhisperFeatureExtractor, for the 0.5 s and 1 s clips, from int16/32768;
                  also mel_tone_0p5s_first<n>.f32 for its first 7777 and 250 samples);
                  resampled_<clip>.f32 (ffmpeg CLI / libswresample default filter, after a float channel mean);
                  token_counts.json (frames 1..3000 -> audio tokens, Python formula)
  omni-a/, omni-b/  model dirs: config.json (model_type qwen3_omni_moe, thinker_config{text,audio,vision}),
                  model.safetensors (bf16, real names: thinker.model.*, thinker.audio_tower.*, thinker.visual.*,
                  thinker.lm_head.weight; experts per expert: mlp.experts.E.{gate,up,down}_proj.weight),
                  generation_config.json, tokenizer.json, tokenizer_config.json, expected.json,
                  tower_<clip>.f32 [N, out_dim] (audio tower on the reference mel of each 16 kHz clip),
                  <case>.logits.f32, <case>.image_embeds.f32 / <case>.deepstack<k>.f32 (vision tower outputs).
"""
import json
import os
import shutil
import subprocess
import sys
import wave

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "audio")
TOK_DIR = os.path.join(ROOT, "tests", "fixtures", "tok-small")
N_WINDOW = 50


def write_f32(path, a):
    np.ascontiguousarray(a, dtype="<f4").tofile(path)


# ---- clips ---------------------------------------------------------------------------------------------------

def synth(seconds, sr, seed, channels=1):
    """Deterministic speech-like signal: gliding harmonic tone with syllable envelope plus a little noise."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * sr))
    t = np.arange(n) / sr
    out = []
    for c in range(channels):
        f0 = 140 + 60 * np.sin(2 * np.pi * 0.7 * t + c) + 20 * np.sin(2 * np.pi * 3.1 * t)
        phase = 2 * np.pi * np.cumsum(f0) / sr
        x = sum((0.5 / k) * np.sin(k * phase + rng.uniform(0, 6.28)) for k in range(1, 12))
        env = 0.55 + 0.45 * np.sin(2 * np.pi * 2.3 * t + c) ** 2
        x = x * env + 0.02 * rng.standard_normal(n)
        out.append(0.35 * x / np.max(np.abs(x)))
    return np.stack(out, axis=1)


def write_wav16(path, x, sr):
    """x [n, ch] float -> 16-bit PCM WAV; returns the int16 samples."""
    q = np.clip(np.round(x * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(q.shape[1])
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(q.tobytes())
    return q


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def ffmpeg_resample(mono_f32, rate):
    """Resample mono float32 to 16 kHz with the ffmpeg CLI (libswresample, default filter)."""
    src, dst = "/tmp/aud_fx_in.f32", "/tmp/aud_fx_out.f32"
    mono_f32.astype("<f4").tofile(src)
    ffmpeg("-f", "f32le", "-ar", str(rate), "-ac", "1", "-i", src, "-ar", "16000", "-f", "f32le", dst)
    return np.fromfile(dst, dtype="<f4")


def make_clips():
    clips = os.path.join(OUT, "clips")
    os.makedirs(clips, exist_ok=True)
    waves = {}
    for name, sec, seed in [("tone_0p5s", 0.5, 1), ("tone_1s", 1.0, 2), ("tone_3p3s", 3.3, 3), ("tone_9s", 9.0, 4)]:
        q = write_wav16(os.path.join(clips, name + ".wav"), synth(sec, 16000, seed), 16000)
        waves[name] = q[:, 0].astype(np.float32) / 32768.0  # libsndfile's int16 -> float normalisation
    src = os.path.join(clips, "tone_3p3s.wav")
    bx = ["-map_metadata", "-1", "-fflags", "+bitexact", "-flags:a", "+bitexact"]
    ffmpeg("-i", src, *bx, "-c:a", "flac", os.path.join(clips, "tone_3p3s.flac"))
    ffmpeg("-i", src, *bx, "-c:a", "libmp3lame", "-b:a", "64k", os.path.join(clips, "tone_3p3s.mp3"))
    ffmpeg("-i", src, *bx, "-c:a", "aac", "-b:a", "64k", os.path.join(clips, "tone_3p3s.m4a"))
    src1 = os.path.join(clips, "tone_1s.wav")
    ffmpeg("-i", src1, *bx, "-c:a", "libvorbis", "-q:a", "3", os.path.join(clips, "tone_1s.ogg"))
    ffmpeg("-i", src1, *bx, "-c:a", "libopus", "-b:a", "32k", os.path.join(clips, "tone_1s.opus"))
    ffmpeg("-i", src1, *bx, "-c:a", "libopus", "-b:a", "32k", os.path.join(clips, "tone_1s.webm"))
    # a video file whose audio track is the 1 s clip (mpeg4 video 32x32 at 5 fps + AAC)
    ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=32x32:r=5:d=1", "-i", src1, *bx, "-flags:v", "+bitexact",
           "-c:v", "mpeg4", "-q:v", "31", "-c:a", "aac", "-b:a", "32k", "-shortest",
           os.path.join(clips, "video_1s.mp4"))
    ref = os.path.join(OUT, "ref")
    os.makedirs(ref, exist_ok=True)
    for name, sec, sr, ch, seed in [("stereo_44k", 0.5, 44100, 2, 5), ("mono_8k", 1.0, 8000, 1, 6)]:
        q = write_wav16(os.path.join(clips, name + ".wav"), synth(sec, sr, seed, ch), sr)
        f = q.astype(np.float32) / np.float32(32768.0)
        mono = f[:, 0] if ch == 1 else ((f[:, 0] + f[:, 1]) * np.float32(0.5)).astype(np.float32)
        write_f32(os.path.join(ref, f"resampled_{name}.f32"), ffmpeg_resample(mono, sr))
    return waves


# ---- features ------------------------------------------------------------------------------------------------

def feature_extractor():
    from transformers import WhisperFeatureExtractor
    # Qwen3-Omni preprocessor_config.json values (spec §6.5).
    return WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=300,
                                   n_fft=400, padding_value=0.0, dither=0.0, return_attention_mask=True)


def log_mel(fe, wave16k):
    """As Qwen3OmniMoeProcessor calls it (padding=True, truncation=False): [128, T] and the mask length T."""
    r = fe(wave16k, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
           return_tensors="pt")
    feats, mask = r["input_features"][0], r["attention_mask"][0]
    T = int(mask.sum())
    return feats[:, :T].contiguous(), T


def token_count(T):
    r = T % (2 * N_WINDOW)
    a = (r - 1) // 2 + 1
    return ((a - 1) // 2 + 1 - 1) // 2 + 1 + (T // (2 * N_WINDOW)) * 13


def make_feature_refs(fe, waves):
    ref = os.path.join(OUT, "ref")
    mels = {}
    for name, w in waves.items():
        mel, T = log_mel(fe, w)
        assert T == len(w) // 160, (name, T)
        mels[name] = mel
        if name in ("tone_0p5s", "tone_1s"):  # keep fixtures small: only the short clips' mels are stored
            write_f32(os.path.join(ref, f"mel_{name}.f32"), mel.numpy())
    for n in (7777, 250):  # lengths that are not multiples of the hop; 250 is just above the reflect-pad limit
        mel, T = log_mel(fe, waves["tone_0p5s"][:n])
        assert T == n // 160
        write_f32(os.path.join(ref, f"mel_tone_0p5s_first{n}.f32"), mel.numpy())
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths
    lens = _get_feat_extract_output_lengths(torch.arange(1, 3001), N_WINDOW).tolist()
    assert lens == [token_count(t) for t in range(1, 3001)]
    with open(os.path.join(ref, "token_counts.json"), "w") as f:
        json.dump({"n_window": N_WINDOW, "first_frames": 1, "counts": lens}, f)
    return mels


# ---- models --------------------------------------------------------------------------------------------------

MODELS = {
    # audio tower 2 layers, 8 experts top-2, 3 decoder layers
    "omni-a": dict(seed=11, hidden=48, layers=3, heads=4, kv=2, head_dim=32, mrope=[6, 5, 5], experts=8, top_k=2,
                   moe_inter=32, a_d=64, a_layers=2, a_heads=4, a_ffn=128, a_conv=32,
                   v_depth=2, v_hidden=16, v_heads=2, v_inter=32, v_deepstack=[0, 1]),
    # larger tower (3 layers, head_dim 24), 8 experts top-4, 3 decoder layers, 3 deepstack mergers
    "omni-b": dict(seed=12, hidden=64, layers=3, heads=4, kv=2, head_dim=32, mrope=[6, 5, 5], experts=8, top_k=4,
                   moe_inter=32, a_d=96, a_layers=3, a_heads=4, a_ffn=192, a_conv=48,
                   v_depth=3, v_hidden=16, v_heads=2, v_inter=32, v_deepstack=[0, 1, 2]),
}
VOCAB = 3040  # >= the small tokenizer's 3033 ids


def thinker_config(p, ids):
    from transformers import Qwen3OmniMoeThinkerConfig
    text = dict(vocab_size=VOCAB, hidden_size=p["hidden"], intermediate_size=2 * p["hidden"],
                num_hidden_layers=p["layers"], num_attention_heads=p["heads"], num_key_value_heads=p["kv"],
                head_dim=p["head_dim"], max_position_embeddings=4096, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": p["mrope"],
                                 "interleaved": True, "mrope_interleaved": True},
                moe_intermediate_size=p["moe_inter"], num_experts=p["experts"], num_experts_per_tok=p["top_k"],
                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], initializer_range=0.08,
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    audio = dict(num_mel_bins=128, d_model=p["a_d"], encoder_layers=p["a_layers"],
                 encoder_attention_heads=p["a_heads"], encoder_ffn_dim=p["a_ffn"], downsample_hidden_size=p["a_conv"],
                 output_dim=p["hidden"], n_window=N_WINDOW, n_window_infer=800, conv_chunksize=500,
                 max_source_positions=1500, activation_function="gelu", scale_embedding=False,
                 initializer_range=0.08)
    vision = dict(depth=p["v_depth"], hidden_size=p["v_hidden"], num_heads=p["v_heads"],
                  intermediate_size=p["v_inter"], hidden_act="gelu_pytorch_tanh", patch_size=16,
                  temporal_patch_size=2, spatial_merge_size=2, in_channels=3, out_hidden_size=p["hidden"],
                  num_position_embeddings=256, deepstack_visual_indexes=p["v_deepstack"], initializer_range=0.08)
    return Qwen3OmniMoeThinkerConfig(
        text_config=text, audio_config=audio, vision_config=vision, audio_token_id=ids["<|audio_pad|>"],
        audio_start_token_id=ids["<|audio_start|>"], audio_end_token_id=ids["<|audio_end|>"],
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        position_id_per_seconds=13, seconds_per_chunk=2, user_token_id=ids["user"], initializer_range=0.08)


def randomize(model, seed):
    """Random weights large enough that logits are not flat; norm weights around 1 (not all 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if name.endswith("norm.weight") or "layer_norm.weight" in name or "ln_" in name and name.endswith(".weight") \
                    or name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                prm.copy_(1.0 + 0.1 * torch.randn(prm.shape, generator=g))
            elif name.endswith(".bias"):
                prm.copy_(0.05 * torch.randn(prm.shape, generator=g))
            else:
                fan_in = prm.shape[-1] if prm.dim() >= 2 else prm.numel()
                if prm.dim() == 4 or prm.dim() == 5:
                    fan_in = int(np.prod(prm.shape[1:]))
                std = 1.0 / np.sqrt(fan_in)
                if name.endswith("embed_tokens.weight") or name.endswith("pos_embed.weight"):
                    std = 0.5
                prm.copy_(std * torch.randn(prm.shape, generator=g))


def save_checkpoint(model, out_dir):
    """save_pretrained (per-expert names, no prefix) -> add the real 'thinker.' prefix."""
    from safetensors.torch import load_file, save_file
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(tmp)
    sd = load_file(os.path.join(tmp, "model.safetensors"))
    assert any(".mlp.experts.0.gate_proj.weight" in k for k in sd), "expected per-expert tensors"
    sd = {"thinker." + k: v.contiguous() for k, v in sorted(sd.items())}
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(tmp, "config.json")))
    shutil.rmtree(tmp)
    return cfg


def write_model_dir(name, p, ids):
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    torch.manual_seed(p["seed"])
    model = Qwen3OmniMoeThinkerForConditionalGeneration(thinker_config(p, ids))
    randomize(model, p["seed"])
    tcfg = save_checkpoint(model, d)
    tcfg.pop("architectures", None)
    tcfg.pop("transformers_version", None)
    tcfg.pop("dtype", None)
    config = {"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
              "enable_audio_output": False, "thinker_config": tcfg, "im_start_token_id": ids["<|im_start|>"],
              "im_end_token_id": ids["<|im_end|>"], "system_token_id": ids["system"], "user_token_id": ids["user"],
              "assistant_token_id": ids["assistant"], "dtype": "bfloat16", "transformers_version": "5.17.0"}
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
               "pad_token_id": ids["<|endoftext|>"]}, open(os.path.join(d, "generation_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK_DIR, f), os.path.join(d, f))
    return d


def load_reference(d):
    """Reload the written checkpoint in float32 through transformers' own loader of the full model (this checks
    the real tensor names and the per-expert layout), eager attention; return its thinker."""
    from transformers import Qwen3OmniMoeForConditionalGeneration
    full = Qwen3OmniMoeForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    full.eval()
    return full.thinker


def test_image():
    """64x96 RGB pattern -> Qwen2VLImageProcessor with the Omni preprocessor settings (grid 4x6 -> 6 tokens)."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    y, x = np.mgrid[0:64, 0:96]
    img = np.stack([(x * 2.6) % 256, (y * 3.9) % 256, ((x + y) * 1.7) % 256], axis=-1).astype(np.uint8)
    path = os.path.join(OUT, "clips", "pattern_64x96.png")
    Image.fromarray(img).save(path)
    proc = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=3136,
                                 max_pixels=12845056, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    r = proc(images=[Image.open(path).convert("RGB")], return_tensors="pt")
    return r["pixel_values"], r["image_grid_thw"]


def build_case(tok, fe, ids, text, audio=None, image=None):
    """Prompt (spec §5.2: audio first, then image, then the question) -> ids and model kwargs."""
    content, kw = "", {}
    if audio is not None:
        mel, T = log_mel(fe, audio)
        content += "<|audio_start|>" + "<|audio_pad|>" * token_count(T) + "<|audio_end|>"
        kw["input_features"] = mel[None]
        kw["feature_attention_mask"] = torch.ones(1, T, dtype=torch.long)
    if image is not None:
        pv, thw = image
        n_img = int(thw.prod()) // 4
        content += "<|vision_start|>" + "<|image_pad|>" * n_img + "<|vision_end|>"
        kw["pixel_values"] = pv
        kw["image_grid_thw"] = thw
    prompt = f"<|im_start|>user\n{content}{text}<|im_end|>\n<|im_start|>assistant\n"
    input_ids = tok.encode(prompt, add_special_tokens=False)
    return prompt, input_ids, kw


def run_case(model, d, case, prompt, input_ids, kw, p, ids):
    ii = torch.tensor([input_ids])
    am = torch.ones_like(ii)
    with torch.no_grad():
        pos, delta = model.get_rope_index(ii, kw.get("image_grid_thw"), None, am,
                                          audio_seqlens=kw["feature_attention_mask"].sum(-1)
                                          if "feature_attention_mask" in kw else None)
        out = model(input_ids=ii, attention_mask=am, **kw)
        logits = out.logits[0, -1].float()
        gen = model.generate(input_ids=ii, attention_mask=am, do_sample=False, max_new_tokens=16, **kw)
    write_f32(os.path.join(d, f"{case}.logits.f32"), logits.numpy())
    top = torch.topk(logits, 5)
    rec = {"name": case, "prompt": prompt, "input_ids": input_ids,
           "position_ids": pos[:, 0].tolist(), "rope_delta": int(delta.reshape(-1)[0]),
           "argmax": int(logits.argmax()), "top5": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
           "max_abs_logit": float(logits.abs().max()), "logits_file": f"{case}.logits.f32",
           "greedy": gen[0, len(input_ids):].tolist()}
    with torch.no_grad():
        if "input_features" in kw:
            T = int(kw["feature_attention_mask"].sum())
            a = model.get_audio_features(kw["input_features"], kw["feature_attention_mask"]).last_hidden_state
            rec["audio"] = {"frames": T, "tokens": token_count(T), "start": input_ids.index(ids["<|audio_pad|>"])}
            assert a.shape[0] == token_count(T)
        if "pixel_values" in kw:
            vo = model.get_image_features(kw["pixel_values"], kw["image_grid_thw"], return_dict=True)
            emb = vo.pooler_output if isinstance(vo.pooler_output, torch.Tensor) else torch.cat(vo.pooler_output)
            ds = vo.deepstack_features
            write_f32(os.path.join(d, f"{case}.image_embeds.f32"), emb.float().numpy())
            for k, t in enumerate(ds):
                write_f32(os.path.join(d, f"{case}.deepstack{k}.f32"), t.float().numpy())
            rec["image"] = {"grid_thw": kw["image_grid_thw"][0].tolist(), "tokens": int(emb.shape[0]),
                            "start": input_ids.index(ids["<|image_pad|>"]), "n_deepstack": len(ds),
                            "embeds_file": f"{case}.image_embeds.f32",
                            "deepstack_files": [f"{case}.deepstack{k}.f32" for k in range(len(ds))]}
    return rec


def make_models(fe, waves, mels):
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(TOK_DIR, "tokenizer.json"))
    ids = dict(common.special_token_ids())
    for w in ("user", "system", "assistant"):
        # role token ids (real: 872/8948/77091) are only used by the talker; the small vocab may split the word,
        # so the first piece's id is recorded.
        ids[w] = tok.encode(w, add_special_tokens=False)[0]
    image = test_image()
    for name, p in MODELS.items():
        d = write_model_dir(name, p, ids)
        model = load_reference(d)
        towers = {}
        with torch.no_grad():
            for clip, mel in mels.items():
                T = mel.shape[1]
                o = model.audio_tower(mel, feature_lens=torch.tensor([T])).last_hidden_state
                write_f32(os.path.join(d, f"tower_{clip}.f32"), o.numpy())
                towers[clip] = {"frames": T, "tokens": int(o.shape[0]), "dim": int(o.shape[1]),
                                "max_abs": float(o.abs().max()), "file": f"tower_{clip}.f32"}
        cases = [("text", "Hello! Who are you?", None, None),
                 ("audio_9s", "What can you hear?", waves["tone_9s"], None),
                 ("audio_1s", "Transcribe the audio.", waves["tone_1s"], None)]
        if name == "omni-b":
            cases.append(("audio_image", "What do you hear and see?", waves["tone_3p3s"], image))
        recs = []
        for case, text, audio, img in cases:
            prompt, input_ids, kw = build_case(tok, fe, ids, text, audio, img)
            recs.append(run_case(model, d, case, prompt, input_ids, kw, p, ids))
            recs[-1]["audio_clip"] = {"audio_9s": "tone_9s", "audio_1s": "tone_1s",
                                      "audio_image": "tone_3p3s"}.get(case)
        exp = {"model": name, "reference": "transformers 5.17.0, float32 (bf16 weights upcast), eager attention",
               "checkpoint_experts": "per-expert tensors thinker.model.layers.N.mlp.experts.E.{gate,up,down}_proj"
                                     ".weight (save_pretrained reverts the in-memory fusion; 'thinker.' prefix added)",
               "image_file": "clips/pattern_64x96.png", "towers": towers, "cases": recs}
        json.dump(exp, open(os.path.join(d, "expected.json"), "w"), indent=1)
        print(name, "done:", [(r["name"], r["argmax"], r["greedy"][:4]) for r in recs])


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    waves = make_clips()
    fe = feature_extractor()
    mels = make_feature_refs(fe, waves)
    if "--no-models" not in sys.argv:
        make_models(fe, waves, mels)


if __name__ == "__main__":
    main()
