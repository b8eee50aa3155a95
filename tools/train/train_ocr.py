#!/usr/bin/env python3
"""Train the embedded OCR model: a small Qwen3-VL (Qwen3VLForConditionalGeneration, the real checkpoint layout and
config keys) that answers "Read all the text in the image." with the exact text of rendered lines (ocr_data.py).

    python3 tools/train/train_ocr.py --out DIR --minutes 7 [--resume DIR] [--seed 1] [--toy]

Writes DIR/ocr/: config.json, model.safetensors (bf16), generation_config.json, preprocessor_config.json,
tokenizer.json, tokenizer_config.json, training_recipe.json (seeds, sizes, data recipe, steps, loss curve, eval).
--resume loads the weights of a previous DIR/ocr (a fresh optimizer with a short warmup) and adds to its record.
"""

import copy
import itertools
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ocr_data  # noqa: E402
import util  # noqa: E402
from util import log  # noqa: E402

NAME = "ocr"
# 3.38M parameters (6.8 MB bf16): small enough to travel to the GPU host for resuming and to commit (the OCR and
# speech models share ~12 MB of the repository; the first, 12.2M-parameter layout of call B/C was 24.5 MB).
FULL = dict(hidden=192, layers=3, heads=2, kv=1, head_dim=128, inter=512,
            v_depth=4, v_hidden=128, v_heads=2, v_inter=512, v_pos=1024, v_deepstack=[2])
TOY = dict(hidden=64, layers=2, heads=2, kv=1, head_dim=128, inter=128,
           v_depth=2, v_hidden=64, v_heads=2, v_inter=128, v_pos=64, v_deepstack=[0])
EVAL_SEED = 900_001  # held-out sets: seeds never used by training workers (those are < 900_000)
EVAL_SEED_OOV = 900_002  # the out-of-list held-out set (its lines are ocr_data.reserved(): training never draws them)
CTC_UPSAMPLE, CTC_WEIGHT = 6, 0.3  # auxiliary CTC on the merged visual tokens: 6 frames per token (<= ~5 chars)


def make_config(tok, s):
    vision = dict(depth=s["v_depth"], hidden_size=s["v_hidden"], hidden_act="gelu_pytorch_tanh",
                  intermediate_size=s["v_inter"], num_heads=s["v_heads"], in_channels=3, patch_size=ocr_data.PATCH,
                  spatial_merge_size=ocr_data.MERGE, temporal_patch_size=ocr_data.TPATCH, out_hidden_size=s["hidden"],
                  num_position_embeddings=s["v_pos"], deepstack_visual_indexes=s["v_deepstack"])
    return util.qwen3vl_config(tok, s, 8192, vision)


class Prompt:
    """Token ids of the official template around n image tokens; answers end with <|im_end|>."""

    def __init__(self, tok):
        self.tok = tok
        self.ids = util.special_ids(tok)
        self.pre = tok.encode("<|im_start|>user\n<|vision_start|>", add_special_tokens=False).ids
        self.post = tok.encode("<|vision_end|>" + ocr_data.PROMPT + "<|im_end|>\n<|im_start|>assistant\n",
                               add_special_tokens=False).ids

    def prompt(self, n_img):
        return self.pre + [self.ids["<|image_pad|>"]] * n_img + self.post

    def answer(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids + [self.ids["<|im_end|>"]]


def ctc_targets(text):
    return [ocr_data.PRINTABLE.index(c) + 1 for c in text]


def collate(samples, prompt, pad_id, rope):
    """samples: list of (uint8 [3, 32, w], text) -> training batch: right-padded token rows, their MRoPE position ids
    (rope: util.RopeIndex) and the vision tower's patch positions (no per-image loop in the training step), the
    images side by side (one-row images of widths that are multiples of 32: their merge blocks in a row are the
    images' blocks one after the other; the pixel values are made on the device: ocr_data.patchify_batch), CTC
    targets, visual tokens per image."""
    seqs, labs, ntok = [], [], []
    for x, text in samples:
        assert x.shape[1] == ocr_data.LINE_H, "one row of merge blocks per image (packed side by side)"
        ntok.append(x.shape[1] * x.shape[2] // (32 * 32))
        p = prompt.prompt(ntok[-1])
        a = prompt.answer(text)
        seqs.append(p + a)
        labs.append([-100] * len(p) + a)
    B, L = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    labels = torch.full((B, L), -100, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for i, (s, lb) in enumerate(zip(seqs, labs)):
        ids[i, :len(s)] = torch.tensor(s)
        labels[i, :len(s)] = torch.tensor(lb)
        mask[i, :len(s)] = 1
    images = torch.cat([x for x, _ in samples], 2)  # [3, 32, sum of widths]: no padding to copy, keep or replay
    tg = [ctc_targets(t) for _, t in samples]
    widths = torch.tensor([x.shape[2] for x, _ in samples])
    pos = rope(ids, mm_token_type_ids=(ids == prompt.ids["<|image_pad|>"]).int(), image_grid_thw=grid_thw(widths),
               attention_mask=mask)
    from transformers.vision_utils import get_vision_position_ids
    vpos = get_vision_position_ids(grid_thw(widths), ocr_data.MERGE)  # the tower's 2D RoPE positions [patches, 2]
    return {"input_ids": ids, "labels": labels, "attention_mask": mask, "position_ids": pos,
            "image_position_ids": vpos, "images": images,
            "widths": widths, "vis_tokens": ntok,
            "ctc_targets": torch.tensor([c for t in tg for c in t]), "ctc_lengths": torch.tensor([len(t) for t in tg]),
            "n_tokens": int(sum(len(a) for a in labs))}


def grid_thw(widths):
    """image_grid_thw [B, 3] of one-row images of these pixel widths (multiples of 32)."""
    return torch.stack([torch.ones_like(widths), torch.full_like(widths, ocr_data.LINE_H // ocr_data.PATCH),
                        widths // ocr_data.PATCH], 1)


class Stream(torch.utils.data.IterableDataset):
    """Endless training batches; each DataLoader worker has its own seed (base_seed, round, worker)."""

    def __init__(self, batch, seed, tok_name, config, small=0.0, stix=1.0, oov=0.0):
        self.batch, self.seed, self.tok_name, self.config, self.oov = batch, seed, tok_name, config, oov
        self.small = small  # training emphasis on the hard cases (ocr_data.make_sample)
        w = np.array([stix if n.startswith("STIX") else 1.0 for n in ocr_data.FONT_NAMES])
        self.font_p = None if stix == 1.0 else w / w.sum()

    def __iter__(self):
        torch.set_num_threads(1)
        info = torch.utils.data.get_worker_info()
        rng = np.random.default_rng([*self.seed, info.id if info else 0])
        tok = util.load_tokenizer(self.tok_name)
        prompt = Prompt(tok)
        gen = ocr_data.TextGen(rng, ocr_data.load_words(), oov=self.oov, reserve="train")
        fonts = ocr_data.Fonts()
        pad = util.special_ids(tok)["<|endoftext|>"]
        from transformers import Qwen3VLModel
        rope = util.RopeIndex(Qwen3VLModel, self.config)
        while True:
            samples = []
            for _ in range(self.batch):
                img, text, _ = ocr_data.make_sample(rng, gen, fonts, small=self.small, font_p=self.font_p)
                samples.append((ocr_data.resize(img), text))
            yield collate(samples, prompt, pad, rope)


def eval_set(n, meta=False, oov=False):
    """Held-out single-line images (deterministic, the training fonts and rendering) -> [(image, text)]
    (meta: [(image, text, {font, size})]). oov False: seed EVAL_SEED, the word-list text recipe (the set of
    sessions 1-5); True: seed EVAL_SEED_OOV, out-of-list lines only (TextGen oov 1), each a reserved() line that
    training never draws."""
    rng = np.random.default_rng(EVAL_SEED_OOV if oov else EVAL_SEED)
    gen = ocr_data.TextGen(rng, ocr_data.load_words(), oov=1.0 if oov else 0.0, reserve="heldout" if oov else None)
    fonts = ocr_data.Fonts()
    return [ocr_data.make_sample(rng, gen, fonts)[:3 if meta else 2] for _ in range(n)]


@torch.no_grad()
def transcribe(model, tok, images, device, batch=64, max_new=160):
    """Greedy answers for PIL images (left-padded batches through transformers' generate)."""
    prompt = Prompt(tok)
    ids = util.special_ids(tok)
    pad = ids["<|endoftext|>"]
    outs = []
    model.eval()
    for b0 in range(0, len(images), batch):
        chunk = [ocr_data.preprocess(im)[:2] for im in images[b0:b0 + batch]]
        seqs = [prompt.prompt(g[1] * g[2] // 4) for _, g in chunk]
        L = max(len(s) for s in seqs)
        inp = torch.full((len(seqs), L), pad, dtype=torch.long)
        am = torch.zeros((len(seqs), L), dtype=torch.long)
        for i, s in enumerate(seqs):
            inp[i, L - len(s):] = torch.tensor(s)
            am[i, L - len(s):] = 1
        kw = dict(input_ids=inp.to(device), attention_mask=am.to(device),
                  pixel_values=torch.cat([c[0] for c in chunk]).to(device),
                  image_grid_thw=torch.tensor([list(c[1]) for c in chunk]).to(device))
        kw["mm_token_type_ids"] = (kw["input_ids"] == ids["<|image_pad|>"]).int()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out = model.generate(**kw, do_sample=False, max_new_tokens=max_new, pad_token_id=pad,
                                 eos_token_id=[ids["<|im_end|>"], pad])
        for row in out[:, L:].tolist():
            row = [t for t in row if t not in (pad,)]
            if ids["<|im_end|>"] in row:
                row = row[:row.index(ids["<|im_end|>"])]
            outs.append(tok.decode(row, skip_special_tokens=False))
    return outs


def score(pairs, hyps):
    refs = [t for _, t in pairs]
    em = sum(h == r for h, r in zip(hyps, refs)) / max(1, len(refs))
    errs = sum(util.edit_distance(h, r) for h, r in zip(hyps, refs))
    cer = errs / max(1, sum(len(r) for r in refs))
    return {"n": len(refs), "exact_match": em, "cer": cer,
            "examples": [{"ref": r, "hyp": h} for h, r in list(zip(hyps, refs))[:12] if h != r][:8]}


def breakdown(items, hyps):
    """Exact match and CER of the held-out lines by length, font family and font size: where the errors are."""
    groups = {}
    for (_, text, meta), h in zip(items, hyps):
        fam = meta["font"].split("-")[0].split(".")[0].replace("Bol", "").replace("Ita", "").replace("lic", "")
        for key in ("length %02d-%02d" % ((len(text) - 1) // 10 * 10 + 1, (len(text) - 1) // 10 * 10 + 10),
                    "font %s" % fam, "size %d-%d" % (meta["size"] // 5 * 5, meta["size"] // 5 * 5 + 4)):
            g = groups.setdefault(key, [0, 0, 0, 0])  # lines, exact, edits, characters
            g[0] += 1
            g[1] += h == text
            g[2] += util.edit_distance(h, text)
            g[3] += len(text)
    return {k: {"n": n, "exact_match": round(e / n, 4), "cer": round(d / max(1, c), 4)}
            for k, (n, e, d, c) in sorted(groups.items())}


EVAL_SETS = {"single_line_le40": False, "out_of_list_le40": True}  # name -> eval_set(oov=)


def evaluate(model, tok, device, n, n_oov=0):
    """Both held-out sets: single_line_le40 (n lines, word-list recipe) and out_of_list_le40 (n_oov lines)."""
    res = {}
    for name, oov in EVAL_SETS.items():
        k = n_oov if oov else n
        if not k:
            continue
        items = eval_set(k, meta=True, oov=oov)
        pairs = [(im, text) for im, text, _ in items]
        t = time.time()
        hyps = transcribe(model, tok, [im for im, _ in pairs], device)
        r = res[name] = score(pairs, hyps)
        r["seconds"] = round(time.time() - t, 1)
        log("eval %s: n %d exact %.4f CER %.4f (%.1fs)" % (name, r["n"], r["exact_match"], r["cer"], r["seconds"]))
        r["by"] = breakdown(items, hyps)
        log("eval %s by " % name + "; ".join("%s: n %d exact %.3f CER %.4f" % (k, v["n"], v["exact_match"], v["cer"])
                                             for k, v in r["by"].items()))
    return res


def save(model, tok_name, out, recipe):
    d = os.path.join(out, NAME)
    os.makedirs(d, exist_ok=True)
    m = copy.deepcopy(model).to(torch.bfloat16)
    m.save_pretrained(d, max_shard_size="100GB")
    del m
    tok = util.load_tokenizer(tok_name)
    ids = util.special_ids(tok)
    util.write_json(os.path.join(d, "generation_config.json"), util.generation_config(ids))
    util.write_json(os.path.join(d, "preprocessor_config.json"), ocr_data.preprocessor_config())
    util.copy_tokenizer(tok_name, d)
    util.write_json(os.path.join(d, "training_recipe.json"), recipe)
    return d


def eval_only(args, tok):
    from transformers import Qwen3VLForConditionalGeneration
    d = os.path.join(args.resume, NAME)
    torch.set_num_threads(max(1, args.threads))
    model = Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32).to(args.device)
    recipe = util.read_json(os.path.join(d, "training_recipe.json"))
    recipe["history"][-1]["eval"] = evaluate(model, tok, torch.device(args.device), args.eval_n, args.eval_oov_n)
    util.write_json(os.path.join(d, "training_recipe.json"), recipe)
    log("wrote the evaluation into %s" % os.path.join(d, "training_recipe.json"))


def main():
    ap = util.train_args(NAME, seed=1, batch=256, workers=8, lr=1.5e-3)
    ap.add_argument("--eval-n", type=int, default=400)
    ap.add_argument("--eval-oov-n", type=int, default=400, help="lines of the out-of-list held-out set")
    ap.add_argument("--oov", type=float, default=0.5,
                    help="probability that a training line is out-of-list text (ocr_data.TextGen.line_oov: "
                         "pseudo-words, random letters, identifiers, numbers, code, punctuation) instead of the "
                         "word-list recipe (0: the recipe of sessions 1-5)")
    ap.add_argument("--replay", type=int, default=400, help="batches kept on the device for reuse")
    ap.add_argument("--ctc-weight", type=float, default=CTC_WEIGHT, help="weight of the auxiliary CTC loss")
    ap.add_argument("--small-sizes", type=float, default=0.0,
                    help="training emphasis: probability that a line's font size is drawn from ocr_data.SMALL_SIZES "
                         "(16..21 px, the worst read) instead of 16..30 (the held-out sets keep 16..30)")
    ap.add_argument("--stix-weight", type=float, default=1.0,
                    help="training emphasis: relative probability of the 4 STIX fonts (the worst read; held-out: 1)")
    ap.add_argument("--no-precompute", action="store_true",
                    help="debug: let the vision tower compute its attention segments itself (with host syncs)")
    ap.add_argument("--eval-only", action="store_true",
                    help="no training: evaluate the --resume model on the held-out sets and write the results into "
                         "the last round of its training_recipe.json (e.g. after a CPU round trained with --eval-n 0)")
    args = ap.parse_args()
    from transformers import Qwen3VLForConditionalGeneration
    tok = util.load_tokenizer(NAME)
    if args.eval_only:
        return eval_only(args, tok)
    run = util.Run(NAME, args, lambda d: Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32),
                   lambda: Qwen3VLForConditionalGeneration(make_config(tok, TOY if args.toy else FULL)).float())
    model, dev = run.model, run.dev
    util.use_varlen_attention(model.config.vision_config)
    util.linear_patch_embed(model.model.visual)
    util.use_sdpa_attention(model.config.text_config)
    it = run.batches(Stream(args.batch, run.seed, NAME, model.config, args.small_sizes, args.stix_weight, args.oov),
                     replay=args.replay)
    ctc = util.CTCHead(model.model.visual, lambda out: out.pooler_output, model.config.text_config.hidden_size,
                       len(ocr_data.PRINTABLE), CTC_UPSAMPLE, args.ctc_weight)
    ctc.proj.to(dev)
    image_pad = util.special_ids(tok)["<|image_pad|>"]
    cur = {}

    def to_kwargs(b):
        cur.update(b)
        w = b["widths"]
        kw = {k: b[k] for k in ("input_ids", "labels", "attention_mask", "position_ids", "image_position_ids")}
        kw["pixel_values"] = ocr_data.patchify_batch(b["images"][None])  # the packed images as one wide image
        kw["image_grid_thw"] = grid_thw(w)
        kw["mm_token_type_ids"] = (kw["input_ids"] == image_pad).int()
        if not args.no_precompute:  # the tower's attention segments from the host: no device syncs for them
            segs = [4 * n for n in b["vis_tokens"]]  # patches per image (one row of merged 2x2 blocks)
            cu = torch.tensor([0] + list(itertools.accumulate(segs)), dtype=torch.int32).to(dev, non_blocking=True)
            kw.update(cu_seqlens=cu, max_seqlen=max(segs))
            util.known_segments(cu, segs)
        return kw, b["n_tokens"], len(b["vis_tokens"])

    def ctc_loss(kw):
        return ctc.loss(cur["vis_tokens"], cur["ctc_targets"], cur["ctc_lengths"])
    warm = args.warmup or (200 if run.round == 0 else 100)
    autocast = util.autocast_flag(args)
    bf16 = autocast if autocast is not None else dev.type == "cuda"

    def record(step, secs, curve, recipe):
        run.record(step, secs, curve, warm, "AdamW(0.9, 0.95), wd 0.05, clip 1.0, %s" % (
                       "bf16 autocast" if bf16 else "float32"),
                   aux_loss="CTC over printable characters on the merged visual tokens (%d frames per token), weight "
                            "%.2f; the head is not saved" % (CTC_UPSAMPLE, args.ctc_weight),
                   replay="%s (last %d batches)" % (" ".join(util.Feeder.__doc__.split()), args.replay)
                   if args.replay else "none: every batch fresh from the data workers",
                   emphasis="font size %d..%d with probability %g (else 16..30); STIX fonts weight %g" % (
                       ocr_data.SMALL_SIZES[0], ocr_data.SMALL_SIZES[1] - 1, args.small_sizes, args.stix_weight),
                   text_mix="out-of-list lines (TextGen.line_oov) with probability %g, else the word-list recipe; "
                            "reserved() lines (crc32 %% %d == 0) redrawn" % (args.oov, ocr_data.OOV_MOD),
                   workers=args.workers, threads=args.threads if dev.type == "cpu" else None)
        run.recipe.setdefault("sizes", TOY if args.toy else FULL)
        run.recipe.update({"parameters": run.n_params, "data": ocr_data.__doc__.strip(), "eval_seed": EVAL_SEED,
                           "eval_seed_out_of_list": EVAL_SEED_OOV,
                           "eval_sets": "single_line_le40: %d held-out one-line images (<= 40 chars, the word-list "
                                        "recipe); out_of_list_le40: %d held-out one-line images of out-of-list text "
                                        "(reserved() lines, never drawn in training)" % (args.eval_n, args.eval_oov_n),
                           "preprocessor": ocr_data.preprocessor_config(), "tokenizer": "tools/train/tokenizers/ocr"})

    def checkpoint(step, secs, curve):  # the model so far, with this round recorded as far as it went
        keep = copy.deepcopy(run.recipe)
        record(step, secs, curve, run.recipe)
        run.recipe["history"][-1]["checkpoint"] = "saved during training (the round went on)"
        ctc.remove()  # (save deep-copies the model: without the CTC head's hook)
        try:
            d = save(model, NAME, args.out, run.recipe)
        finally:
            ctc.handle = model.model.visual.register_forward_hook(ctc.hook)
            run.recipe = keep
        log("checkpoint step %d saved %s" % (step, d))

    step, secs, curve = util.train_loop(NAME, model, it, dev, args.lr, args.minutes, args.max_steps, warm,
                                        to_kwargs, log_every=5 if args.toy or args.overfit else
                                        (20 if dev.type == "cpu" else 100),
                                        extra_loss=ctc_loss, extra_modules=[ctc.proj], floor=args.lr_floor,
                                        autocast=autocast, checkpoint=checkpoint,
                                        checkpoint_minutes=args.checkpoint_minutes)
    ctc.remove()
    record(step, secs, curve, run.recipe)
    run.finish(lambda recipe: save(model, NAME, args.out, recipe),
               lambda: evaluate(model, tok, dev, args.eval_n, args.eval_oov_n))


if __name__ == "__main__":
    util.run_main(main)
