#!/usr/bin/env python3
"""make_two_clip_fixture.py - two audio clips in one prompt through the Qwen3-Omni processor path, on the committed
omni-a checkpoint (tests/fixtures/audio/omni-a), transformers 5.17.0 float32 eager.

transformers encodes the clips of one processor call as a batch: WhisperFeatureExtractor(padding=True) zero-pads
every waveform to the longest before the log-mel (a shorter clip keeps ceil(n/160) frames, not n/160, and its last
frames see zeros instead of the reflection), and the audio encoder pads every 100-frame chunk to the longest chunk
of all clips (the padding leaks into a short clip's last conv outputs). The short clip here (6437 samples: 40
frames alone, 41 in the batch -> 5 vs 6 audio tokens) is placed after a 3.3 s clip.

Writes (small): tests/fixtures/audio/clips/tone_0p402s.wav (16 kHz mono 16-bit, 6437 samples),
tests/fixtures/audio/omni-a/two_clips.logits.f32 (last-position logits), two_clips.json (prompt, clips, ids,
audio token counts, argmax, top5, greedy 8 tokens).
Run from the repository root:  python3 tools/reference/make_two_clip_fixture.py
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_audio_fixtures as maf  # noqa: E402

OMNI_A = os.path.join(maf.OUT, "omni-a")
CLIPS = os.path.join(maf.OUT, "clips")
SHORT = "tone_0p402s"
N_SHORT = 6437


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    short = maf.synth(N_SHORT / 16000, 16000, 7)[:N_SHORT]
    q = maf.write_wav16(os.path.join(CLIPS, SHORT + ".wav"), short, 16000)
    waves = []
    for name in ("tone_3p3s", SHORT):
        import wave
        with wave.open(os.path.join(CLIPS, name + ".wav")) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        waves.append(pcm.astype(np.float32) / 32768.0)
    assert len(waves[1]) == N_SHORT and np.array_equal(q[:, 0], (waves[1] * 32768).astype("<i2"))
    fe = maf.feature_extractor()
    r = fe(waves, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
           return_tensors="pt")
    lens = r["attention_mask"].sum(-1).tolist()
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(maf.TOK_DIR, "tokenizer.json"))
    ntok = [int(_get_feat_extract_output_lengths(torch.tensor(t))) for t in lens]
    raw = ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|> and <|audio_start|><|audio_pad|>"
           "<|audio_end|>Which is longer?<|im_end|>\n<|im_start|>assistant\n")
    parts = raw.split("<|audio_pad|>")
    text = parts[0] + "<|audio_pad|>" * ntok[0] + parts[1] + "<|audio_pad|>" * ntok[1] + parts[2]
    ids = tok.encode(text, add_special_tokens=False)
    model = maf.load_reference(OMNI_A)
    ii = torch.tensor([ids])
    kw = dict(input_features=r["input_features"], feature_attention_mask=r["attention_mask"])
    with torch.no_grad():
        out = model(input_ids=ii, attention_mask=torch.ones_like(ii), **kw)
        logits = out.logits[0, -1].float()
        gen = model.generate(input_ids=ii, attention_mask=torch.ones_like(ii), do_sample=False, max_new_tokens=8,
                             **kw)
    maf.write_f32(os.path.join(OMNI_A, "two_clips.logits.f32"), logits.numpy())
    top = torch.topk(logits, 5)
    alone = [int(_get_feat_extract_output_lengths(torch.tensor(len(w) // 160))) for w in waves]
    rec = {"prompt": raw, "clips": ["clips/tone_3p3s.wav", f"clips/{SHORT}.wav"], "mel_frames": lens,
           "audio_tokens": ntok, "audio_tokens_alone": alone, "input_ids": ids, "n_input": len(ids),
           "argmax": int(logits.argmax()), "top5": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
           "max_abs_logit": float(logits.abs().max()), "logits_file": "two_clips.logits.f32",
           "greedy": gen[0, len(ids):].tolist(),
           "reference": "transformers 5.17.0 float32 eager; processor path: WhisperFeatureExtractor(padding=True) on "
                        "both clips at once"}
    json.dump(rec, open(os.path.join(OMNI_A, "two_clips.json"), "w"), indent=1)
    print("frames", lens, "tokens", ntok, "alone", alone, "argmax", rec["argmax"], "greedy", rec["greedy"])


if __name__ == "__main__":
    main()
