#!/usr/bin/env python3
"""hf_generate.py - what users would run otherwise: transformers' generate() on random bf16 weights of a real
config, timed the way `omni bench` times its points (the baseline row of bench/REPORT.md).

For each point BxC (batch B, context C): B random prompts of C tokens, greedy, no EOS stop, one generate call of
1 + steps new tokens. A logits processor notes the time (after a device synchronisation) each time the model has
produced a step's logits: the first note is the time to first token (the prefill), the `steps` later ones are
the decode steps (so each point costs one prefill, not two). Writes CSV rows (header below) that `omni bench --baseline FILE` reads; a point that
fails (out of memory, ...) gets a row with empty numbers and the error in the note, and the others go on.

    python3 bench/hf_generate.py --config assets/configs/Qwen3-VL-8B-Instruct/config.json \\
        --points 48x4K,1x128K --steps 32 --out transformers.csv

Needs torch and transformers (5.17 on the H200 host); the weights are made on the device (nothing downloaded).
"""
import argparse
import csv
import os
import sys
import time

HEADER = ["kind", "batch", "ctx", "steps", "decode_tok_s", "step_ms", "prefill_tok_s", "ttft_ms", "peak_mib", "note"]


def parse_count(s):
    s = s.strip()
    mult = {"k": 1024, "m": 1048576}.get(s[-1:].lower(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def parse_points(text):
    pts = []
    for item in text.split(","):
        b, c = item.lower().split("x")
        pts.append((parse_count(b), parse_count(c)))
    return pts


def build_model(config_path, device):
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg_dir = config_path if os.path.isdir(config_path) else os.path.dirname(os.path.abspath(config_path))
    cfg = AutoConfig.from_pretrained(cfg_dir)
    torch.manual_seed(0)
    with torch.device(device):
        try:
            model = AutoModelForImageTextToText.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:  # older transformers: torch_dtype
            model = AutoModelForImageTextToText.from_config(cfg, torch_dtype=torch.bfloat16)
    return model.eval(), cfg


def sync(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class StepClock:
    """A logits processor that notes when each step's logits exist (scores unchanged)."""

    def __init__(self, device):
        self.device, self.times = device, []

    def __call__(self, input_ids, scores):
        sync(self.device)
        self.times.append(time.perf_counter())
        return scores


def timed_generate(model, ids, new_tokens, device):
    """Generate new_tokens greedy tokens; returns (start time, [time each step's logits were ready])."""
    import torch
    from transformers import LogitsProcessorList

    clock = StepClock(device)
    sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0,
                             logits_processor=LogitsProcessorList([clock]))
    sync(device)
    assert out.shape[1] == ids.shape[1] + new_tokens, out.shape
    assert len(clock.times) == new_tokens, (len(clock.times), new_tokens)
    return t0, clock.times


def run_point(model, vocab, batch, ctx, steps, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(batch * 1000003 + ctx)
    ids = torch.randint(1000, vocab - 1000, (batch, ctx), generator=g).to(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0, times = timed_generate(model, ids, 1 + steps, device)
    t_first = times[0] - t0
    decode = max(times[-1] - times[0], 1e-9)
    peak = torch.cuda.max_memory_allocated() / 1048576 if device.startswith("cuda") else float("nan")
    return {"decode_tok_s": batch * steps / decode, "step_ms": 1e3 * decode / steps,
            "prefill_tok_s": batch * ctx / t_first, "ttft_ms": 1e3 * t_first, "peak_mib": peak}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="config.json of the model (or its directory)")
    ap.add_argument("--points", default="48x4K,1x128K", help="BATCHxCONTEXT list (K = 1024)")
    ap.add_argument("--steps", type=int, default=32, help="decode steps timed per point")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, help="CSV to write")
    args = ap.parse_args()

    rows = []
    try:
        import torch
        import transformers

        model, cfg = build_model(args.config, args.device)
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        vocab = text.vocab_size
        print(f"hf_generate: transformers {transformers.__version__}, torch {torch.__version__}, "
              f"attention {getattr(model.config, '_attn_implementation', '?')}", file=sys.stderr)
        timed_generate(model, torch.randint(1000, 2000, (1, 64)).to(args.device), 4, args.device)  # warm-up
    except Exception as ex:  # no torch, no GPU, bad config: every point reports it
        model, vocab, setup_error = None, 0, f"error: {type(ex).__name__}: {ex}"
    else:
        setup_error = None
    for batch, ctx in parse_points(args.points):
        row = {"kind": "baseline", "batch": batch, "ctx": ctx, "steps": args.steps, "note": ""}
        if setup_error:
            row["note"] = setup_error
        else:
            try:
                row.update(run_point(model, vocab, batch, ctx, args.steps, args.device))
            except Exception as ex:
                row["note"] = f"error: {type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}"
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
        row["note"] = row["note"].replace(",", ";")  # one CSV field, no quoting needed
        print(f"hf_generate: batch {batch} ctx {ctx}: " +
              (row["note"] or f"{row['decode_tok_s']:.1f} tok/s, {row['step_ms']:.2f} ms/step, "
                              f"TTFT {row['ttft_ms']:.0f} ms"), file=sys.stderr)
        rows.append(row)
        write_rows(args.out, rows)  # after every point: a run stopped by a time limit keeps what it measured
    return 0


def write_rows(path, rows):
    with open(path + ".part", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    os.replace(path + ".part", path)


if __name__ == "__main__":
    sys.exit(main())
