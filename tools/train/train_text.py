#!/usr/bin/env python3
"""Train the embedded text model: a small Qwen3-VL-layout decoder (Qwen3VLForConditionalGeneration with a tiny
untrained vision tower; head_dim 128, GQA 2) on Python sources with SEQ_LEN-token context (text_data.py), for the
KV-cache quantization quality measurements at length.

    python3 tools/train/train_text.py --out DIR --minutes 7 [--resume DIR] [--toy]

Writes DIR/text/: config.json, model.safetensors (bf16), generation_config.json, tokenizer files,
training_recipe.json (with held-out perplexity and passkey retrieval at the end).
"""

import copy
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import text_data  # noqa: E402
import util  # noqa: E402
from util import log  # noqa: E402

NAME = "text"
FULL = dict(hidden=256, layers=5, heads=4, kv=2, head_dim=128, inter=640, seq=text_data.SEQ_LEN)
TOY = dict(hidden=64, layers=2, heads=2, kv=1, head_dim=128, inter=128, seq=256)
EVAL_SEED = 900_003


def make_config(tok, s):
    return util.qwen3vl_config(tok, s, s["seq"], dict(util.TINY_VISION, out_hidden_size=s["hidden"]))


class Stream(torch.utils.data.IterableDataset):
    """Rows of seq+1 tokens from the training files (each worker reads its own shard of the shuffled list)."""

    def __init__(self, batch, seq, seed):
        self.batch, self.seq, self.seed = batch, seq, seed

    def __iter__(self):
        torch.set_num_threads(1)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rng = np.random.default_rng([*self.seed, wid])
        tok = util.load_tokenizer(NAME)
        eot = util.special_ids(tok)["<|endoftext|>"]
        files = text_data.training_files()
        order = np.random.default_rng(self.seed).permutation(len(files))
        mine = [files[i] for i in order[wid::nw]]
        buf, rows, fi, n = [], [], 0, self.seq + 1
        while True:
            while len(buf) < 4 * n:
                texts = []
                while len(texts) < 16:
                    s = text_data.read(mine[fi % len(mine)])
                    fi += 1
                    if s:
                        texts.append(s)
                for e in tok.encode_batch(texts, add_special_tokens=False):
                    buf.extend(e.ids)
                    buf.append(eot)
            if rng.random() < text_data.PASSKEY_FRACTION:
                row, _ = text_data.passkey_row(rng, buf[:n], tok, self.seq)
            else:
                row = buf[:n]
            del buf[:n]
            rows.append(row)
            if len(rows) == self.batch:
                yield torch.tensor(rows, dtype=torch.long)
                rows = []


def heldout_texts(limit_chars=None):
    out = []
    for p in text_data.stdlib_files(heldout=True):
        s = text_data.read(p)
        if s:
            out.append(s)
    return out


@torch.no_grad()
def perplexity(model, tok, device, seq, n_rows=64):
    """Mean next-token loss over n_rows windows of seq tokens from the held-out files (all positions)."""
    eot = util.special_ids(tok)["<|endoftext|>"]
    ids = []
    for s in heldout_texts():
        ids += tok.encode(s, add_special_tokens=False).ids + [eot]
        if len(ids) > n_rows * (seq + 1):
            break
    rows = [ids[i * (seq + 1):(i + 1) * (seq + 1)] for i in range(min(n_rows, len(ids) // (seq + 1)))]
    x = torch.tensor(rows, device=device)
    tot, cnt = 0.0, 0
    for b in range(0, len(rows), 8):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out = model(input_ids=x[b:b + 8, :-1], labels=x[b:b + 8, :-1].clone())
        tot += out.loss.item() * (x[b:b + 8].shape[0])
        cnt += x[b:b + 8].shape[0]
    return float(np.exp(tot / max(1, cnt))), len(rows)


@torch.no_grad()
def passkey(model, tok, device, lengths, depths, per_cell=4):
    rng = np.random.default_rng(EVAL_SEED)
    filler = "\n".join(heldout_texts()[:40])
    res = {}
    for L in lengths:
        for d in depths:
            ok = 0
            for _ in range(per_cell):
                key = str(rng.integers(10000, 100000))
                start = int(rng.integers(0, len(filler) // 2))
                prompt = text_data.passkey_prompt(tok, filler[start:], key, d, L)
                inp = torch.tensor([tok.encode(prompt, add_special_tokens=False).ids], device=device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                    o = model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                       max_new_tokens=8)
                ans = tok.decode(o[0, inp.shape[1]:].tolist())
                ok += ans.strip().startswith(key)
            res["%d@%.2f" % (L, d)] = ok / per_cell
    return res


def evaluate(model, tok, dev, seq, toy):
    t = time.time()
    ppl = {}
    for L in sorted({512, 2048, seq}):
        if L <= seq:
            ppl[str(L)] = perplexity(model, tok, dev, L, n_rows=8 if toy else 64)[0]
    lengths = [L for L in (1024, 2048, 4096) if L <= seq] or [seq]
    pk = passkey(model, tok, dev, lengths, [0.1, 0.5, 0.9], per_cell=1 if toy else 8)
    ev = {"perplexity_heldout": ppl, "passkey": pk, "seconds": round(time.time() - t, 1)}
    log("eval text: ppl %s passkey %s" % ({k: round(v, 3) for k, v in ppl.items()}, pk))
    return ev


def save(model, out, recipe):
    d = os.path.join(out, NAME)
    os.makedirs(d, exist_ok=True)
    m = copy.deepcopy(model).to(torch.bfloat16)
    m.save_pretrained(d, max_shard_size="100GB")
    del m
    tok = util.load_tokenizer(NAME)
    util.write_json(os.path.join(d, "generation_config.json"), util.generation_config(util.special_ids(tok)))
    util.copy_tokenizer(NAME, d)
    util.write_json(os.path.join(d, "training_recipe.json"), recipe)
    return d


def main():
    args = util.train_args(NAME, seed=3, batch=16, workers=3, lr=2e-3).parse_args()
    from transformers import Qwen3VLForConditionalGeneration
    tok = util.load_tokenizer(NAME)
    run = util.Run(NAME, args, lambda d: Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32),
                   lambda: Qwen3VLForConditionalGeneration(make_config(tok, TOY if args.toy else FULL)).float())
    model, dev = run.model, run.dev
    seq = model.config.text_config.max_position_embeddings
    util.use_sdpa_attention(model.config.text_config)
    it = run.batches(Stream(args.batch, seq, run.seed))

    def to_kwargs(b):
        x = b.to(dev, non_blocking=True)
        return {"input_ids": x[:, :-1], "labels": x[:, :-1]}, x.numel(), x.shape[0]
    warm = 200 if run.round == 0 else 50
    step, secs, curve = util.train_loop(NAME, model, it, dev, args.lr, args.minutes, args.max_steps, warm,
                                        to_kwargs, log_every=5 if args.toy else 50, weight_decay=0.1, floor=args.lr_floor)
    run.record(step, secs, curve, warm, "AdamW(0.9, 0.95), wd 0.1, clip 1.0, bf16 autocast", context=seq,
               training_files=len(text_data.training_files()))
    run.recipe.setdefault("sizes", TOY if args.toy else FULL)
    run.recipe.update({"parameters": run.n_params, "data": text_data.__doc__.strip(), "eval_seed": EVAL_SEED,
                       "tokenizer": "tools/train/tokenizers/text"})
    run.finish(lambda recipe: save(model, args.out, recipe), lambda: evaluate(model, tok, dev, seq, args.toy))


if __name__ == "__main__":
    util.run_main(main)
