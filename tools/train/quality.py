#!/usr/bin/env python3
"""bench/QUALITY.md: INT2 (OScaR) vs BF16 and the other KV-cache formats on the embedded trained models, measured
by running omni itself on held-out synthetic sets, plus key/value norms and attention sinks of the models.

    .venv/bin/python tools/train/quality.py [--models assets/models] [--omni build/omni] [--quick]
                                            [--out bench/QUALITY.md] [--work /tmp/omni-quality]

Needs the Python packages of tools/train (torch, transformers 5.17.0, tokenizers, pillow, matplotlib, torchaudio)
and espeak-ng unpacked by tools/train/prepare_carry.sh + setup_espeak.sh (for the held-out speech set).
Held-out sets are the same generators and seeds as the end-of-training evaluation (train_*.py EVAL_SEED):
  OCR     the first N single-line images (<= 40 characters) of each held-out set (word-list text; out-of-list
          text), `omni ocr` greedy (the model's own pixel limits);
  speech  the first N clips with their question, `omni ask --temp 0`;
  text    held-out standard-library files (text_data.is_heldout), `omni eval kl` at 512, 2048 and 4096 tokens
          (--kl-chunk tokens at a time, default 32; BF16 cache as the reference), and passkey retrieval with
          `omni generate --temp 0`.
Every KV mode runs with the recent window R in {0, 128} (the newest R tokens kept in BF16).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402
from util import log  # noqa: E402

MODES = [  # name, omni flags
    ("bf16", ["--kv", "bf16"]),
    ("int2", ["--kv", "int2"]),
    ("kivi2", ["--kv", "kivi2"]),
    ("int4", ["--kv", "int4"]),
    ("int2 no rotation", ["--kv", "int2", "--kv-rotate", "off"]),
    ("int2 no scaling", ["--kv", "int2", "--kv-scale", "off"]),
]
WINDOWS = [0, 128]


OCR_SETS = {"single_line_le40": "word-list text", "out_of_list_le40": "out-of-list text"}  # train_ocr.EVAL_SETS
SHORT_NOTE = ("R=128 is measured for int2 only: an OCR or speech prompt + answer is at most ~130 tokens, so with a "
              "128-token BF16 window (almost) the whole cache stays BF16 and every R=128 row equals BF16.")


def sample_text(kind, file):
    """The expected answer of a committed sample (assets/samples/expected.json)."""
    exp = util.read_json(os.path.join(util.ROOT, "assets", "samples", "expected.json"))
    return [it["text"] for it in exp[kind] if it["file"] == file][0]


def mode_runs():
    """(label, flags) for every measured configuration; bf16 has no window."""
    out = [("bf16", MODES[0][1])]
    for name, flags in MODES[1:]:
        for r in WINDOWS:
            out.append(("%s R=%d" % (name, r), flags + ["--kv-window", str(r)]))
    return out


class Omni:
    def __init__(self, path, threads, jobs):
        import threading
        self.path, self.threads, self.jobs = path, threads, jobs
        self.calls, self.seconds = 0, 0.0
        self.lock = threading.Lock()

    def map(self, fn, items):
        """[fn(x) for x in items], `jobs` omni processes at a time."""
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(self.jobs) as ex:
            return list(ex.map(fn, items))

    def __call__(self, args, check=True):
        t = time.time()
        r = subprocess.run([self.path] + args + ["--no-perf", "-t", str(self.threads)], capture_output=True,
                           text=True)
        with self.lock:
            self.calls += 1
            self.seconds += time.time() - t
        if check and r.returncode != 0:
            raise RuntimeError("omni %s failed (%d): %s" % (" ".join(args[:3]), r.returncode, r.stderr[-500:]))
        return r.stdout


# ---- held-out sets ----------------------------------------------------------------------------------------------

def ocr_set(work, n):
    """The first n images of each held-out OCR set (train_ocr.EVAL_SETS)."""
    import train_ocr
    d = os.path.join(work, "ocr")
    os.makedirs(d, exist_ok=True)
    items = []
    for name, oov in train_ocr.EVAL_SETS.items():
        for k, (img, text) in enumerate(train_ocr.eval_set(n, oov=oov)):
            p = os.path.join(d, "%s_%03d.png" % (name, k))
            img.save(p)
            items.append({"file": p, "text": text, "set": name})
    return items


def speech_set(work, n, espeak):
    import speech_data
    import train_speech
    d = os.path.join(work, "speech")
    os.makedirs(d, exist_ok=True)
    items = []
    for k, (w, q, a, u) in enumerate(train_speech.eval_set(n, espeak)):
        p = os.path.join(d, "%03d.wav" % k)
        speech_data.write_wav(p, w)
        items.append({"file": p, "question": q, "answer": a})
    return items


def text_set(work, model_dir, lengths, per_length, passkey_lengths, depths, keys_per_cell):
    import text_data
    tok = util.load_tokenizer_dir(model_dir)
    d = os.path.join(work, "text")
    os.makedirs(d, exist_ok=True)
    files = text_data.stdlib_files(heldout=True)
    texts = [s for s in (text_data.read(p) for p in files) if s]
    big = "\n".join(texts)[:2_000_000]  # ~0.5M tokens of held-out source is plenty (the whole takes minutes)
    ids = tok.encode(big, add_special_tokens=False).ids
    kl, k = [], 0
    for L in lengths:
        for j in range(per_length):
            start = (k * 7919 * 13) % max(1, len(ids) - L - 64)
            k += 1
            p = os.path.join(d, "kl_%d_%d.txt" % (L, j))
            with open(p, "w", encoding="utf-8") as f:
                f.write(tok.decode(ids[start:start + L + 32]))
            kl.append({"file": p, "ctx": L})
    rng = np.random.default_rng(424242)
    pk = []
    for L in passkey_lengths:
        for dep in depths:
            for j in range(keys_per_cell):
                key = str(rng.integers(10000, 100000))
                start = int(rng.integers(0, len(big) // 2))
                prompt = text_data.passkey_prompt(tok, big[start:], key, dep, L)
                p = os.path.join(d, "passkey_%d_%.2f_%d.txt" % (L, dep, j))
                with open(p, "w", encoding="utf-8") as f:
                    f.write(prompt)
                pk.append({"file": p, "ctx": L, "depth": dep, "key": key})
    return kl, pk


# ---- measurements --------------------------------------------------------------------------------------------------

def run_ocr(omni, model, items, flags):
    """One omni process per 16 images, `omni.jobs` at a time; the answers of a process follow `==> FILE <==` lines
    (several images) and contain no blank lines."""
    def one(part):
        out = omni(["ocr"] + [it["file"] for it in part] + ["-m", model, "-n", "200"] + flags)
        h = out[:-1].split("\n\n") if out.endswith("\n") else out.split("\n\n")
        if len(part) > 1:  # "==> FILE <==\nANSWER" per image
            h = [x.split("\n", 1)[1] if x.startswith("==> ") and "\n" in x else "" for x in h]
        if len(h) != len(part):
            raise RuntimeError("ocr: %d answers for %d images" % (len(h), len(part)))
        return h
    parts = [items[i:i + 16] for i in range(0, len(items), 16)]  # omni takes at most 16 file arguments
    hyps = [h for hs in omni.map(one, parts) for h in hs]
    res = {}
    for name in OCR_SETS:
        pairs = [(h, it["text"]) for h, it in zip(hyps, items) if it["set"] == name]
        if pairs:
            res[name] = {"n": len(pairs), "exact": sum(h == r for h, r in pairs) / len(pairs),
                         "cer": sum(util.edit_distance(h, r) for h, r in pairs) / sum(len(r) for _, r in pairs)}
    return res, hyps


def run_speech(omni, model, items, flags):
    import speech_data
    import train_speech
    def one(it):
        out = omni(["ask", "-m", model, "--audio", it["file"], it["question"], "--temp", "0", "-n", "40"] + flags)
        return out[:-1] if out.endswith("\n") else out
    hyps = omni.map(one, items)
    fake = [(None, it["question"], it["answer"], None) for it in items]
    s = train_speech.score(fake, hyps)
    acc = s["accuracy"]
    other = [v for k, v in acc.items() if k != "transcribe"]
    return {"wer": s["wer"], "transcribe_exact": acc.get("transcribe", {}).get("rate"),
            "answers": sum(v["correct"] for v in other) / max(1, sum(v["n"] for v in other)),
            "n": len(items), "per_question": {k: round(v["rate"], 4) for k, v in acc.items()},
            "questions": [q for q in speech_data.QUESTIONS_TRANSCRIBE]}, hyps


def run_kl(omni, model, kl_items, flags, chunk):
    res = {}
    outs = omni.map(lambda it: omni(["eval", "kl", "-m", model, "--text", it["file"], "--ctx", str(it["ctx"]),
                                     "--chunk", str(chunk), "--json"] + flags), kl_items)
    for it, out in zip(kl_items, outs):
        j = json.loads(out.strip().splitlines()[-1])
        r = res.setdefault(str(it["ctx"]), {"mean_kl": [], "p99_kl": [], "top1": [], "ppl_ref": [], "ppl": []})
        r["mean_kl"].append(j["mean_kl"])
        r["p99_kl"].append(j["p99_kl"])
        r["top1"].append(j["top1_agree"])
        r["ppl_ref"].append(j["ppl_ref"])
        r["ppl"].append(j["ppl_mode"])
    return {L: {k: float(np.mean(v)) for k, v in r.items()} for L, r in res.items()}


def run_passkey(omni, model, pk_items, flags):
    res = {}
    outs = omni.map(lambda it: omni(["generate", "-m", model, "--raw", "-f", it["file"], "--temp", "0", "-n", "8",
                                     "-c", str(it["ctx"] + 64)] + flags), pk_items)
    for it, out in zip(pk_items, outs):
        ok = out.strip().startswith(it["key"])
        r = res.setdefault(str(it["ctx"]), [0, 0])
        r[0] += ok
        r[1] += 1
    return {L: v[0] / v[1] for L, v in res.items()}


# ---- key / value norms and attention sinks (transformers, float32) ------------------------------------------------

def kv_stats(model_dir, kind, work, plot_path=None, n_tokens=2048):
    """Post-RoPE key and value L2 norms per position (from the KV cache of one forward pass) and the attention
    mass on the first token, per decoder layer, over a held-out input of the model's own kind."""
    import torch
    torch.set_num_threads(2)
    tok = util.load_tokenizer_dir(model_dir)
    kw = {}
    if kind == "text":
        from transformers import Qwen3VLForConditionalGeneration
        import text_data
        m = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
        big = "\n".join(s for s in (text_data.read(p) for p in text_data.stdlib_files(heldout=True)) if s)
        ids = tok.encode(big[:40 * n_tokens], add_special_tokens=False).ids[:n_tokens]
        inp = torch.tensor([ids])
        what = "%d tokens of held-out Python source" % len(ids)
        lm = m
    elif kind == "ocr":
        from transformers import Qwen3VLForConditionalGeneration
        from PIL import Image
        import ocr_data
        from train_ocr import Prompt
        m = Qwen3VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
        img = Image.open(os.path.join(util.ROOT, "assets", "samples", "receipt.png")).convert("RGB")
        pv, g, _ = ocr_data.preprocess(img)
        p = Prompt(tok)
        inp = torch.tensor([p.prompt(g[1] * g[2] // 4) + p.answer(sample_text("ocr", "receipt.png"))])
        kw = dict(pixel_values=pv, image_grid_thw=torch.tensor([list(g)]),
                  mm_token_type_ids=(inp == util.special_ids(tok)["<|image_pad|>"]).int())
        what = "the receipt.png prompt and answer (%d tokens)" % inp.shape[1]
        lm = m
    else:
        from transformers import Qwen3OmniMoeForConditionalGeneration
        import speech_data
        from train_speech import Prompt
        full = Qwen3OmniMoeForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32,
                                                                    attn_implementation="eager")
        m = full.thinker.eval()
        fe = speech_data.feature_extractor()
        mel = speech_data.log_mel(fe, speech_data.read_wav(os.path.join(util.ROOT, "assets", "samples", "call.wav")))
        p = Prompt(tok)
        inp = torch.tensor([p.prompt(speech_data.audio_tokens(mel.shape[1]), "Transcribe the audio.") +
                            p.answer("please call me at 415")])
        kw = dict(input_features=mel[None], feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long))
        what = "the call.wav prompt and answer (%d tokens)" % inp.shape[1]
        lm = m
    with torch.no_grad():
        out = lm(input_ids=inp, attention_mask=torch.ones_like(inp), use_cache=True, output_attentions=True, **kw)
    cache = out.past_key_values
    layers = []
    knorm_curves, vnorm_curves = [], []
    for li, att in enumerate(out.attentions):
        k = cache.layers[li].keys[0]    # [kv_heads, T, d] post-RoPE
        v = cache.layers[li].values[0]
        kn, vn = k.norm(dim=-1), v.norm(dim=-1)  # [kv_heads, T]
        kc, vc = kn.mean(0), vn.mean(0)
        knorm_curves.append(kc.numpy())
        vnorm_curves.append(vc.numpy())
        T = kn.shape[1]
        a = att[0]  # [heads, T, T]
        q0 = min(16, T - 1)
        layers.append({
            "layer": li,
            "k_norm_pos0_over_median": float(kc[0] / kc[1:].median()),
            "k_norm_max_over_median": float(kn.max() / kn.median()),
            "k_norm_cv": float(kn.std() / kn.mean()),
            "v_norm_pos0_over_median": float(vc[0] / vc[1:].median()),
            "v_norm_max_over_median": float(vn.max() / vn.median()),
            "attn_to_token0": float(a[:, q0:, 0].mean()),
            "attn_to_first4": float(a[:, q0:, :4].sum(-1).mean()),
        })
    if plot_path:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))
        for li, (kc, vc) in enumerate(zip(knorm_curves, vnorm_curves)):
            ax[0].plot(np.arange(1, len(kc) + 1), kc, lw=0.7, label="layer %d" % li)
            ax[1].plot(np.arange(1, len(vc) + 1), vc, lw=0.7, label="layer %d" % li)
        for a_, t in zip(ax, ("key L2 norm (post-RoPE, mean over KV heads)", "value L2 norm (mean over KV heads)")):
            a_.set_xscale("log")
            a_.set_xlabel("position + 1")
            a_.set_title(t, fontsize=9)
            a_.grid(alpha=0.3)
        ax[1].legend(fontsize=7, ncol=2)
        fig.suptitle("%s model: %s" % (kind, what), fontsize=9)
        fig.tight_layout()
        fig.savefig(plot_path, dpi=90)
        plt.close(fig)
    return {"input": what, "layers": layers}


# ---- report -----------------------------------------------------------------------------------------------------

def fmt(x, p=4):
    return "-" if x is None else ("%.*f" % (p, x))


def pct(x):
    return "-" if x is None else "%.1f%%" % (100 * x)


def report(res, args, recipes):
    L = []
    w = L.append
    w("# KV-cache quality on the embedded trained models (INT2 OScaR vs BF16 and others)\n")
    w("Generated by `%s` on %s (%d omni calls, %.0f s). Models: `%s/{ocr,speech,text}` (trained by "
      "tools/train/gpu_train.sh; recipes in each folder's training_recipe.json). Every number below is omni's own "
      "output on the CPU; `R` is the recent window kept in BF16 (`--kv-window`).\n" % (
          res["command"], res["date"], res["omni_calls"], res["omni_seconds"], args.models))
    if args.note:
        w("**Note:** %s\n" % args.note)
    if res.get("merged"):
        w("(This file joins runs of the same command with `--only PARTS --merge EARLIER.json`, which measure the "
          "parts separately; the plain command measures everything in one run.)\n")
    w("## Models\n")
    w("| model | layout | parameters | training | held-out eval at the end of training (transformers, bf16) |")
    w("|---|---|---|---|---|")
    for name, r in recipes.items():
        if not r:
            continue
        hist = r["history"]
        steps = sum(h["steps"] for h in hist)
        secs = {}  # seconds per device, in the order of the rounds (a round may have run on the CPU)
        for h in hist:
            secs[h.get("device", "?")] = secs.get(h.get("device", "?"), 0.0) + h["seconds"]
        ev = hist[-1].get("eval", {})
        if name == "ocr":
            e = "; ".join("%s <= 40: exact %s, CER %s" % (OCR_SETS[k], pct(ev[k].get("exact_match")),
                                                          pct(ev[k].get("cer"))) for k in OCR_SETS if k in ev)
        elif name == "speech":
            e = "WER %s" % pct(ev.get("wer"))
        else:
            e = "PPL %s" % ", ".join("%s: %.2f" % (k, v) for k, v in ev.get("perplexity_heldout", {}).items())
        lay = {"ocr": "Qwen3-VL", "speech": "Qwen3-Omni thinker (MoE)", "text": "Qwen3-VL text"}[name]
        where = " + ".join("%.0f s on %s" % (t, d) for d, t in secs.items())
        w("| %s | %s | %.2fM | %d steps, %s, %d round(s) | %s |" % (
            name, lay, r.get("parameters", 0) / 1e6, steps, where, len(hist), e))
    w("")
    if "ocr" in res:
        w("## OCR (`omni ocr`, greedy)\n")
        any_ = next(iter(res["ocr"].values()))
        sets = [k for k in OCR_SETS if k in any_]
        w("Held-out images: %s single lines of <= 40 characters (training fonts, random damage): %s. %s\n" % (
            " + ".join(str(any_[k]["n"]) for k in sets), "; ".join(
                {"single_line_le40": "text from the training word list (data/words.txt) as in training",
                 "out_of_list_le40": "out-of-list text (pseudo-words, random letters, identifiers, code; lines "
                                     "training never draws)"}[k] for k in sets), SHORT_NOTE))
        w("| KV mode | %s |" % " | ".join("exact (%s) | CER (%s)" % (OCR_SETS[k], OCR_SETS[k]) for k in sets))
        w("|---|%s" % ("---|---|" * len(sets)))
        for label, r in res["ocr"].items():
            w("| %s | %s |" % (label, " | ".join("%s | %s" % (pct(r.get(k, {}).get("exact")),
                                                           pct(r.get(k, {}).get("cer"))) for k in sets)))
        w("")
    if "speech" in res:
        w("## Speech (`omni ask --temp 0`)\n")
        n = next(iter(res["speech"].values()))["n"]
        w("%d held-out clips (espeak-ng voices, noise), one question each. %s\n" % (n, SHORT_NOTE))
        w("| KV mode | transcription WER | transcription exact | other answers correct |")
        w("|---|---|---|---|")
        for label, r in res["speech"].items():
            w("| %s | %s | %s | %s |" % (label, pct(r["wer"]), pct(r["transcribe_exact"]), pct(r["answers"])))
        w("")
    if "kl" in res:
        w("## Text model: next-token distributions vs BF16 (`omni eval kl --chunk %d`)\n" % args.kl_chunk)
        w("The text is fed %d tokens at a time (each chunk attends to the quantized cache of all earlier chunks); "
          "token by token costs 3x more CPU and gave the same numbers within a few percent (int2 at 2048 tokens: "
          "mean KL 0.0188 token by token, 0.0193 in chunks of 32).\n" % args.kl_chunk)
        ctxs = sorted({int(c) for r in res["kl"].values() for c in r})
        w("Mean over %d held-out texts per length. PPL of the BF16 cache: %s.\n" % (
            args.kl_texts, ", ".join("%d: %.3f" % (c, res["kl"]["bf16"][str(c)]["ppl_ref"]) for c in ctxs)))
        w("| KV mode | " + " | ".join("mean KL @%d | top-1 @%d | PPL @%d" % (c, c, c) for c in ctxs) + " |")
        w("|---|" + "---|" * (3 * len(ctxs)))
        for label, r in res["kl"].items():
            w("| %s | " % label + " | ".join("%s | %s | %s" % (fmt(r[str(c)]["mean_kl"], 5), pct(r[str(c)]["top1"]),
                                                             fmt(r[str(c)]["ppl"], 3)) for c in ctxs) + " |")
        w("")
    if "passkey" in res:
        w("## Text model: passkey retrieval (`omni generate --raw --temp 0`)\n")
        ctxs = sorted({int(c) for r in res["passkey"].values() for c in r})
        w("Key sentence at depths %s, %d keys per depth and length; a hit = the 5-digit key comes first.\n" % (
            args.depths, args.keys))
        w("| KV mode | " + " | ".join("%d tokens" % c for c in ctxs) + " |")
        w("|---|" + "---|" * len(ctxs))
        for label, r in res["passkey"].items():
            w("| %s | " % label + " | ".join(pct(r[str(c)]) for c in ctxs) + " |")
        w("")
    if "kv_stats" in res:
        w("## Do the keys show attention sinks and token-norm imbalance?\n")
        w("Post-RoPE key and value L2 norms per position from the KV cache of one transformers forward pass "
          "(float32), and the attention mass that queries at positions >= 16 put on token 0 / on the first 4 "
          "tokens (mean over heads). A ratio of 1 means no imbalance.\n")
        for kind, st in res["kv_stats"].items():
            w("**%s model** (%s)%s\n" % (kind, st["input"], "" if kind not in res.get("plots", {}) else
                                          " - plot: `%s`" % res["plots"][kind]))
            w("| layer | K norm pos0 / median | K max / median | K norm CV | V norm pos0 / median | V max / median "
              "| attention on token 0 | on first 4 |")
            w("|---|---|---|---|---|---|---|---|")
            for ly in st["layers"]:
                w("| %d | %.2f | %.2f | %.3f | %.2f | %.2f | %s | %s |" % (
                    ly["layer"], ly["k_norm_pos0_over_median"], ly["k_norm_max_over_median"], ly["k_norm_cv"],
                    ly["v_norm_pos0_over_median"], ly["v_norm_max_over_median"], pct(ly["attn_to_token0"]),
                    pct(ly["attn_to_first4"])))
            w("")
    w("## Where INT2 loses\n")
    w(findings(res))
    w("")
    return "\n".join(L)


def findings(res):
    """Plain statements computed from the numbers (no hand-written claims)."""
    out = []
    if "kl" in res:
        ctx = max(int(c) for c in res["kl"]["bf16"])
        for r in WINDOWS:
            a = res["kl"].get("int2 R=%d" % r, {}).get(str(ctx))
            b = res["kl"].get("kivi2 R=%d" % r, {}).get(str(ctx))
            if a and b:
                verdict = "better" if a["mean_kl"] < b["mean_kl"] else "NOT better"
                out.append("- Text, %d tokens, R=%d: OScaR-2 mean KL %.5f vs KIVI-2 %.5f (%.2fx): OScaR-2 is %s "
                           "than KIVI-2; top-1 agreement %.1f%% vs %.1f%%; PPL %.3f vs %.3f (BF16 %.3f)." % (
                               ctx, r, a["mean_kl"], b["mean_kl"], b["mean_kl"] / max(a["mean_kl"], 1e-12), verdict,
                               100 * a["top1"], 100 * b["top1"], a["ppl"], b["ppl"], a["ppl_ref"]))
            for abl in ("no rotation", "no scaling"):
                c = res["kl"].get("int2 %s R=%d" % (abl, r), {}).get(str(ctx))
                if a and c:
                    out.append("  - int2 %s, R=%d: mean KL %.5f (%.2fx the full OScaR-2)." % (
                        abl, r, c["mean_kl"], c["mean_kl"] / max(a["mean_kl"], 1e-12)))
    for task, key, better_low in (("ocr", "single_line_le40", False), ("speech", None, True)):
        if task not in res:
            continue
        base = res[task]["bf16"]
        for r in WINDOWS:
            q = res[task].get("int2 R=%d" % r)
            if not q:
                continue
            if task == "ocr":
                out.append("- OCR, R=%d: %s." % (r, "; ".join(
                    "int2 exact %.1f%% / CER %.2f%% vs BF16 %.1f%% / %.2f%% (%s)" % (
                        100 * q[k]["exact"], 100 * q[k]["cer"], 100 * base[k]["exact"], 100 * base[k]["cer"],
                        OCR_SETS[k]) for k in OCR_SETS if k in q and k in base)))
            else:
                out.append("- Speech, R=%d: int2 WER %.2f%% vs BF16 %.2f%%; other answers %.1f%% vs %.1f%%." % (
                    r, 100 * q["wer"], 100 * base["wer"], 100 * q["answers"], 100 * base["answers"]))
    for task in ("ocr", "speech"):  # OScaR-2 vs KIVI-2 and the ablations on the short tasks (R=0: quantized)
        if task not in res or "int2 R=0" not in res[task] or "kivi2 R=0" not in res[task]:
            continue
        if task == "ocr":
            val = lambda m: res["ocr"][m]["single_line_le40"]["exact"]  # noqa: E731
            what, better = "exact match", lambda a, b: a > b  # noqa: E731
        else:
            val = lambda m: res["speech"][m]["wer"]  # noqa: E731
            what, better = "WER", lambda a, b: a < b  # noqa: E731
        a, b = val("int2 R=0"), val("kivi2 R=0")
        verdict = "better than" if better(a, b) else ("the same as" if a == b else "NOT better than")
        abl = ", ".join("%s %.1f%%" % (m[5:-4], 100 * val(m)) for m in ("int2 no rotation R=0", "int2 no scaling R=0")
                        if m in res[task])
        out.append("- %s, R=0: OScaR-2 %s %.1f%% vs KIVI-2 %.1f%%: OScaR-2 is %s KIVI-2 (ablations: %s; BF16 %.1f%%)."
                   % ("OCR" if task == "ocr" else "Speech", what, 100 * a, 100 * b, verdict, abl, 100 * val("bf16")))
    if "kv_stats" in res:  # why: are there attention sinks / token-norm imbalance for the scaling to remove?
        for kind, st in res["kv_stats"].items():
            ly = st["layers"]
            out.append("- %s model keys: max K norm / median %.2f, K norm CV <= %.3f, attention on token 0 <= %.1f%% "
                       "(over layers): %s." % (
                           kind, max(x["k_norm_max_over_median"] for x in ly), max(x["k_norm_cv"] for x in ly),
                           100 * max(x["attn_to_token0"] for x in ly),
                           "no attention sink and no token-norm imbalance for OScaR's per-token scaling to remove"
                           if max(x["k_norm_max_over_median"] for x in ly) < 2 and
                           max(x["attn_to_token0"] for x in ly) < 0.2 else "imbalance present"))
    if "passkey" in res:
        for r in WINDOWS:
            q = res["passkey"].get("int2 R=%d" % r)
            if q:
                out.append("- Passkey, R=%d: int2 %s vs BF16 %s." % (r, ", ".join(
                    "%s tokens %s" % (c, pct(v)) for c, v in sorted(q.items(), key=lambda x: int(x[0]))), ", ".join(
                    "%s" % pct(v) for c, v in sorted(res["passkey"]["bf16"].items(), key=lambda x: int(x[0])))))
    return "\n".join(out) if out else "(no measurements)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(util.ROOT, "assets", "models"))
    ap.add_argument("--omni", default=os.path.join(util.ROOT, "build", "omni"))
    ap.add_argument("--out", default=os.path.join(util.ROOT, "bench", "QUALITY.md"))
    ap.add_argument("--json", default=None, help="also write all numbers here (default: next to --out)")
    ap.add_argument("--work", default="/tmp/omni-quality")
    ap.add_argument("--espeak", default=os.path.join(util.ROOT, ".train", "espeak"))
    ap.add_argument("--threads", type=int, default=1, help="threads per omni process")
    ap.add_argument("--jobs", type=int, default=2, help="omni processes at a time")
    ap.add_argument("--note", default="", help="a paragraph printed under the title (e.g. which models these are)")
    ap.add_argument("--ocr-n", type=int, default=0, help="held-out OCR images per KV mode (default 120)")
    ap.add_argument("--speech-n", type=int, default=0, help="held-out clips per KV mode (default 100)")
    ap.add_argument("--kl-chunk", type=int, default=32, help="tokens per step of `omni eval kl` (1: token by token)")
    ap.add_argument("--quick", action="store_true", help="small sets (a smoke test of this script)")
    ap.add_argument("--only", nargs="*", default=["ocr", "speech", "text", "stats"])
    ap.add_argument("--modes", nargs="*", default=None, help="only these KV-mode labels (e.g. 'bf16' 'int2 R=0')")
    ap.add_argument("--merge", nargs="*", default=[], help="a QUALITY.json of an earlier run: keep its numbers for the parts "
                                                  "not measured now (--only)")
    args = ap.parse_args()
    q = args.quick
    args.ocr_n = args.ocr_n or (6 if q else 120)
    args.speech_n = args.speech_n or (6 if q else 100)
    args.kl_texts = 1
    args.depths = [0.5]
    args.keys = 1
    os.makedirs(args.work, exist_ok=True)
    omni = Omni(args.omni, args.threads, args.jobs)
    res = {"command": "python3 tools/train/quality.py" + (" --quick" if q else ""),
           "date": time.strftime("%Y-%m-%d"), "modes": [m for m, _ in mode_runs()]}
    merged_calls, merged_seconds = 0, 0.0
    for m in args.merge:
        old = util.read_json(m)
        merged_calls += old.get("omni_calls", 0)
        merged_seconds += old.get("omni_seconds", 0.0)
        for k, v in old.items():
            if k in ("command", "date", "modes", "omni_calls", "omni_seconds", "merged"):
                continue
            res[k] = dict(res.get(k, {}), **v) if isinstance(v, dict) else v
        res["merged"] = res.get("merged", []) + [m]
    recipes = {}
    for name in ("ocr", "speech", "text"):
        p = os.path.join(args.models, name, "training_recipe.json")
        recipes[name] = util.read_json(p) if os.path.exists(p) else None
    runs = [r for r in mode_runs() if args.modes is None or r[0] in args.modes]
    short = [r for r in runs if not r[0].endswith("R=128") or r[0] == "int2 R=128"]  # see SHORT_NOTE
    md = lambda n: os.path.join(args.models, n)  # noqa: E731
    if "ocr" in args.only and recipes["ocr"]:
        items = ocr_set(args.work, args.ocr_n)
        res.setdefault("ocr", {})
        for label, flags in short:
            res["ocr"][label], _ = run_ocr(omni, md("ocr"), items, flags)
            log("ocr", label, res["ocr"][label])
    if "speech" in args.only and recipes["speech"]:
        items = speech_set(args.work, args.speech_n, args.espeak)
        res.setdefault("speech", {})
        for label, flags in short:
            res["speech"][label], _ = run_speech(omni, md("speech"), items, flags)
            log("speech", label, {k: v for k, v in res["speech"][label].items() if k != "questions"})
    if "text" in args.only and recipes["text"]:
        seq = util.read_json(os.path.join(md("text"), "config.json"))["text_config"]["max_position_embeddings"]
        lengths = [L for L in (512, 2048, 4096) if L <= seq] or [seq]
        if q:
            lengths = lengths[:1]
        kl_items, pk_items = text_set(args.work, md("text"), lengths, args.kl_texts,
                                      [L for L in (1024, 2048, 4096) if L <= seq][:1 if q else 3] or [seq],
                                      args.depths, args.keys)
        res.setdefault("kl", {})
        res.setdefault("passkey", {})
        for label, flags in runs:
            res["kl"][label] = run_kl(omni, md("text"), kl_items, flags, args.kl_chunk)
            res["passkey"][label] = run_passkey(omni, md("text"), pk_items, flags)
            log("text", label, res["kl"][label], res["passkey"][label])
    if "stats" in args.only:
        res["kv_stats"], res["plots"] = {}, {}
        for name in ("text", "ocr", "speech"):
            if recipes[name]:
                plot = os.path.join(os.path.dirname(args.out), "quality_kv_norms_%s.png" % name)
                res["kv_stats"][name] = kv_stats(md(name), name, args.work, plot_path=plot,
                                                 n_tokens=256 if q else 2048)
                res["plots"][name] = os.path.relpath(plot, os.path.dirname(args.out))
    res["omni_calls"], res["omni_seconds"] = omni.calls + merged_calls, omni.seconds + merged_seconds
    order = [m for m, _ in mode_runs()]
    for k in ("ocr", "speech", "kl", "passkey"):
        if k in res:
            res[k] = {m: res[k][m] for m in order if m in res[k]}
    util.write_json(args.json or os.path.splitext(args.out)[0] + ".json", res)
    if args.modes is not None:  # a partial run: its numbers go into a later --merge
        log("wrote", args.json or os.path.splitext(args.out)[0] + ".json")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(report(res, args, recipes))
    log("wrote", args.out)


if __name__ == "__main__":
    main()
