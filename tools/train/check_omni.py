#!/usr/bin/env python3
"""Check that a checkpoint written by the training scripts runs in omni exactly as in transformers: the greedy
answer of `omni` (f32 KV cache) must equal transformers' greedy answer (float32 weights, eager attention).

    python3 tools/train/check_omni.py ocr    MODEL_DIR IMAGE...          [--omni build/omni] [-n 64]
    python3 tools/train/check_omni.py speech MODEL_DIR WAV:QUESTION...
    python3 tools/train/check_omni.py text   MODEL_DIR PROMPT_FILE...

Prints one line per input (omni's text, transformers' text, same/DIFF) and exits 1 on any difference.
"""

import argparse
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

QUIET = ["--no-perf"]


def run_omni(omni, args):
    r = subprocess.run([omni] + args + QUIET, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("omni failed (%d): %s" % (r.returncode, r.stderr.strip().splitlines()[-1:]))
    return r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout  # the newline omni adds after the answer


def decode_until_eos(tok, ids, eos):
    out = []
    for t in ids:
        if t in eos:
            break
        out.append(t)
    return tok.decode(out, skip_special_tokens=False)


def load_reference(model_dir, omni_moe=False):
    """(tokenizer, float32 eager model (the thinker for Qwen3-Omni), special ids, EOS ids)."""
    tok = util.load_tokenizer_dir(model_dir)
    if omni_moe:
        from transformers import Qwen3OmniMoeForConditionalGeneration
        m = Qwen3OmniMoeForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32,
                                                                 attn_implementation="eager").thinker
    else:
        from transformers import Qwen3VLForConditionalGeneration
        m = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32,
                                                            attn_implementation="eager")
    ids = util.special_ids(tok)
    return tok, m.eval(), ids, {ids["<|im_end|>"], ids["<|endoftext|>"]}


def hf_ocr(model_dir, images, n):
    import ocr_data
    from PIL import Image
    from train_ocr import Prompt
    tok, m, ids, eos = load_reference(model_dir)
    p = Prompt(tok)
    outs = []
    for path in images:
        pv, g, _ = ocr_data.preprocess(Image.open(path).convert("RGB"))
        inp = torch.tensor([p.prompt(g[1] * g[2] // 4)])
        with torch.no_grad():
            o = m.generate(input_ids=inp, attention_mask=torch.ones_like(inp), pixel_values=pv,
                           image_grid_thw=torch.tensor([list(g)]),
                           mm_token_type_ids=(inp == ids["<|image_pad|>"]).int(), do_sample=False,
                           max_new_tokens=n, eos_token_id=sorted(eos), pad_token_id=ids["<|endoftext|>"])
        outs.append(decode_until_eos(tok, o[0, inp.shape[1]:].tolist(), eos))
    return outs


def hf_speech(model_dir, items, n):
    import speech_data
    tok, m, ids, eos = load_reference(model_dir, omni_moe=True)
    fe = speech_data.feature_extractor()
    outs = []
    for wav, q in items:
        mel = speech_data.log_mel(fe, speech_data.read_wav(wav))
        T = mel.shape[1]
        text = ("<|im_start|>user\n<|audio_start|>" + "<|audio_pad|>" * speech_data.audio_tokens(T) +
                "<|audio_end|>" + q + "<|im_end|>\n<|im_start|>assistant\n")
        inp = torch.tensor([tok.encode(text, add_special_tokens=False).ids])
        with torch.no_grad():
            o = m.generate(input_ids=inp, attention_mask=torch.ones_like(inp), input_features=mel[None],
                           feature_attention_mask=torch.ones(1, T, dtype=torch.long), do_sample=False,
                           max_new_tokens=n, eos_token_id=sorted(eos), pad_token_id=ids["<|endoftext|>"])
        outs.append(decode_until_eos(tok, o[0, inp.shape[1]:].tolist(), eos))
    return outs


def hf_text(model_dir, files, n):
    tok, m, ids, eos = load_reference(model_dir)
    outs = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            inp = torch.tensor([tok.encode(fh.read(), add_special_tokens=False).ids])
        with torch.no_grad():
            o = m.generate(input_ids=inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=n,
                           eos_token_id=sorted(eos), pad_token_id=ids["<|endoftext|>"])
        outs.append(decode_until_eos(tok, o[0, inp.shape[1]:].tolist(), eos))
    return outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["ocr", "speech", "text"])
    ap.add_argument("model")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--omni", default=os.path.join(util.ROOT, "build", "omni"))
    ap.add_argument("-n", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(2)
    if a.kind == "ocr":
        ref = hf_ocr(a.model, a.inputs, a.n)
        got = [run_omni(a.omni, ["generate", "-m", a.model, "--image", p, "-p", "Read all the text in the image.",
                                 "--temp", "0", "-n", str(a.n), "--kv", "f32"]) for p in a.inputs]
    elif a.kind == "speech":
        items = [tuple(s.split(":", 1)) for s in a.inputs]
        ref = hf_speech(a.model, items, a.n)
        got = [run_omni(a.omni, ["ask", "-m", a.model, "--audio", w, q, "--temp", "0", "-n", str(a.n), "--kv",
                                 "f32"]) for w, q in items]
    else:
        ref = hf_text(a.model, a.inputs, a.n)
        got = [run_omni(a.omni, ["generate", "-m", a.model, "--raw", "-f", f, "--temp", "0", "-n", str(a.n),
                                 "--kv", "f32"]) for f in a.inputs]
    bad = 0
    for inp, g, r in zip(a.inputs, got, ref):
        same = g == r
        bad += not same
        print("%s: %s\n  omni:         %r\n  transformers: %r" % (inp, "same" if same else "DIFF", g, r))
    print("%d of %d identical" % (len(ref) - bad, len(ref)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
