#!/usr/bin/env python3
"""Train the embedded speech model: a small Qwen3-Omni thinker (Qwen3OmniMoeThinkerForConditionalGeneration: audio
tower + MoE decoder, the real checkpoint layout with the `thinker.` prefix and per-expert tensors) that transcribes
short espeak-ng utterances and answers a few fixed questions about them (speech_data.py).

    python3 tools/train/train_speech.py --out DIR --espeak ESPEAK_ROOT --minutes 7 [--resume DIR] [--toy]

Writes DIR/speech/: config.json (model_type qwen3_omni_moe, thinker_config), model.safetensors (bf16),
generation_config.json, preprocessor_config.json, tokenizer files, training_recipe.json.
"""

import copy
import json
import os
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speech_data  # noqa: E402
import util  # noqa: E402
from util import log  # noqa: E402

NAME = "speech"
# 2.83M parameters (5.7 MB bf16; the first layout of call C had 8.98M): see train_ocr.FULL.
FULL = dict(hidden=128, layers=3, heads=2, kv=1, head_dim=128, experts=4, top_k=2, moe_inter=96,
            a_d=192, a_layers=4, a_heads=3, a_ffn=640, a_conv=32)
TOY = dict(hidden=64, layers=2, heads=2, kv=1, head_dim=128, experts=4, top_k=2, moe_inter=32,
           a_d=64, a_layers=2, a_heads=2, a_ffn=128, a_conv=16)
EVAL_SEED = 900_002
REUSE = 2  # each synthesized clip is used REUSE times in a batch (other question; on the GPU: other gain and noise)
# Auxiliary CTC on the audio tower's output: characters (default since session 4: with the transcript's ~1000 BPE
# tokens as targets the CTC stayed at the label prior for 1900 steps in call A) or tokens (2 frames per token).
CTC_UPSAMPLE, CTC_WEIGHT = 2, 0.5
CTC_CHARS = " '0123456789abcdefghijklmnopqrstuvwxyz"  # --ctc-units chars: lower-cased characters (others skipped)
CTC_CHAR_UPSAMPLE = 3  # ~39 frames/s: fast speech has ~15 characters/s plus the blanks between repeated ones


def thinker_config(tok, s):
    from transformers import Qwen3OmniMoeThinkerConfig
    ids = util.special_ids(tok)
    user = tok.encode("user", add_special_tokens=False).ids[0]
    text = dict(vocab_size=util.padded_vocab(tok), hidden_size=s["hidden"], intermediate_size=2 * s["hidden"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
                head_dim=s["head_dim"], max_position_embeddings=8192, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [24, 20, 20],
                                 "interleaved": True, "mrope_interleaved": True},
                moe_intermediate_size=s["moe_inter"], num_experts=s["experts"], num_experts_per_tok=s["top_k"],
                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], initializer_range=0.02,
                tie_word_embeddings=False,
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    audio = dict(num_mel_bins=128, d_model=s["a_d"], encoder_layers=s["a_layers"],
                 encoder_attention_heads=s["a_heads"], encoder_ffn_dim=s["a_ffn"], downsample_hidden_size=s["a_conv"],
                 output_dim=s["hidden"], n_window=50, n_window_infer=800, conv_chunksize=500,
                 max_source_positions=1500, activation_function="gelu", scale_embedding=False, initializer_range=0.02)
    # The thinker always has a vision tower; this one is tiny and untrained (the speech model takes no images).
    vision = dict(util.TINY_VISION, out_hidden_size=s["hidden"], initializer_range=0.02)
    return Qwen3OmniMoeThinkerConfig(
        text_config=text, audio_config=audio, vision_config=vision, audio_token_id=ids["<|audio_pad|>"],
        audio_start_token_id=ids["<|audio_start|>"], audio_end_token_id=ids["<|audio_end|>"],
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        position_id_per_seconds=13, seconds_per_chunk=2, user_token_id=user, initializer_range=0.02)


def init_audio_convs(tower):
    """Fan-in initialisation of the audio tower's convolution stack (conv2d1..3 + conv_out). With the generic
    normal(0, 0.02) init each of the 3x3 convolutions shrinks its input ~6x, so the stack's output (std ~2e-4) is
    ~3000x smaller than the sinusoidal positions added to it: the encoder sees no audio at the start and learns it
    extremely slowly (session 3: the CTC loss stuck at the label prior). Now its output std is ~0.5, as the positions'."""
    import math
    with torch.no_grad():
        for conv in (tower.conv2d1, tower.conv2d2, tower.conv2d3):
            fan_in = conv.weight[0].numel()
            conv.weight.normal_(0.0, math.sqrt(2.0 / fan_in))  # GELU keeps about half the variance
            conv.bias.zero_()
        tower.conv_out.weight.normal_(0.0, math.sqrt(1.0 / tower.conv_out.in_features))


class Prompt:
    def __init__(self, tok):
        self.tok = tok
        self.ids = util.special_ids(tok)
        self.pre = tok.encode("<|im_start|>user\n<|audio_start|>", add_special_tokens=False).ids

    def prompt(self, n_audio, question):
        return (self.pre + [self.ids["<|audio_pad|>"]] * n_audio +
                self.tok.encode("<|audio_end|>" + question + "<|im_end|>\n<|im_start|>assistant\n",
                                add_special_tokens=False).ids)

    def answer(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids + [self.ids["<|im_end|>"]]


def collate(samples, prompt, pad_id, rate, tok, rope, chars=False):
    """samples: list of (int16 clip at `rate` Hz, question, answer, transcript) -> right-padded batch: clips (made
    into features on the device: speech_data.GpuAudio), token rows and their MRoPE position ids (rope:
    util.RopeIndex), CTC targets (transcript tokens + 1, or with chars the CTC_CHARS indices + 1)."""
    seqs, labs, ntok, frames = [], [], [], []
    for pcm, q, a, _ in samples:
        frames.append(speech_data.resampled_length(len(pcm), rate) // 160)
        ntok.append(speech_data.audio_tokens(frames[-1]))
        p = prompt.prompt(ntok[-1], q)
        an = prompt.answer(a)
        seqs.append(p + an)
        labs.append([-100] * len(p) + an)
    B, L, n = len(samples), max(len(s) for s in seqs), max(len(s[0]) for s in samples)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    labels = torch.full((B, L), -100, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    pcm = torch.zeros((B, n), dtype=torch.int16)
    for i, ((x, _, _, _), s, lb) in enumerate(zip(samples, seqs, labs)):
        ids[i, :len(s)] = torch.tensor(s)
        labels[i, :len(s)] = torch.tensor(lb)
        mask[i, :len(s)] = 1
        pcm[i, :len(x)] = torch.from_numpy(x)
    if chars:
        tg = [[CTC_CHARS.index(c) + 1 for c in tr.lower() if c in CTC_CHARS] for _, _, _, tr in samples]
    else:
        tg = [[t + 1 for t in tok.encode(tr, add_special_tokens=False).ids] for _, _, _, tr in samples]
    pos = rope(ids, attention_mask=mask, audio_seqlens=torch.tensor(frames))
    return {"input_ids": ids, "labels": labels, "attention_mask": mask, "position_ids": pos, "pcm": pcm,
            "lengths": torch.tensor([len(x) for x, _, _, _ in samples]), "frames": max(frames), "audio_tokens": ntok,
            "plan": speech_data.audio_tower_plan(frames),
            "ctc_targets": torch.tensor([c for t in tg for c in t]), "ctc_lengths": torch.tensor([len(t) for t in tg]),
            "n_tokens": int(sum(len(a) for a in labs))}


class Stream(torch.utils.data.IterableDataset):
    """Endless batches of synthesized clips (int16 at espeak-ng's rate, silence padded) with their questions."""

    def __init__(self, batch, seed, espeak_root, config, subset=None, chars=False):
        self.batch, self.seed, self.root, self.config, self.subset = batch, seed, espeak_root, config, subset
        self.chars = chars

    def __iter__(self):
        torch.set_num_threads(1)
        info = torch.utils.data.get_worker_info()
        rng = np.random.default_rng([*self.seed, info.id if info else 0])
        tok = util.load_tokenizer(NAME)
        prompt = Prompt(tok)
        pad = util.special_ids(tok)["<|endoftext|>"]
        gen = speech_data.UtteranceGen(rng, self.subset)
        es = speech_data.Espeak(self.root)
        from transformers import Qwen3OmniMoeThinkerForConditionalGeneration
        rope = util.RopeIndex(Qwen3OmniMoeThinkerForConditionalGeneration, self.config)
        pending = []
        while True:
            while len(pending) < self.batch:
                u = gen.utterance()
                vp = speech_data.voice_params(rng)
                pcm = speech_data.pad_silence(rng, es.say(u["text"], vp["voice"], vp["rate"], vp["pitch"],
                                                          vp["prange"], vp["gap"]), es.rate)
                for _ in range(REUSE):
                    q, a = gen.question(u)
                    pending.append((pcm, q, a, u["text"]))
            order = rng.permutation(len(pending))
            pending = [pending[i] for i in order]
            yield collate(pending[:self.batch], prompt, pad, es.rate, tok, rope, self.chars)
            pending = pending[self.batch:]


def eval_set(n, espeak_root, subset=None):
    """Held-out (seed EVAL_SEED): n clips with one question each -> [(wave, question, answer, utterance)]."""
    rng = np.random.default_rng(EVAL_SEED)
    gen = speech_data.UtteranceGen(rng, subset)
    syn = speech_data.Synth(espeak_root)
    out = []
    for _ in range(n):
        u = gen.utterance()
        w, _ = syn.sample(rng, u["text"])
        q, a = gen.question(u)
        out.append((w, q, a, u))
    return out


@torch.no_grad()
def answer(model, tok, waves_questions, device, batch=64, max_new=40):
    """Greedy answers (left-padded batches through transformers' generate)."""
    prompt = Prompt(tok)
    ids = util.special_ids(tok)
    pad = ids["<|endoftext|>"]
    fe = speech_data.feature_extractor()
    outs = []
    model.eval()
    for b0 in range(0, len(waves_questions), batch):
        chunk = waves_questions[b0:b0 + batch]
        mels = [speech_data.log_mel(fe, w) for w, _ in chunk]
        seqs = [prompt.prompt(speech_data.audio_tokens(m.shape[1]), q) for m, (_, q) in zip(mels, chunk)]
        L, Tm = max(len(s) for s in seqs), max(m.shape[1] for m in mels)
        inp = torch.full((len(seqs), L), pad, dtype=torch.long)
        am = torch.zeros((len(seqs), L), dtype=torch.long)
        feats = torch.zeros((len(seqs), 128, Tm))
        fm = torch.zeros((len(seqs), Tm), dtype=torch.long)
        for i, (s, m) in enumerate(zip(seqs, mels)):
            inp[i, L - len(s):] = torch.tensor(s)
            am[i, L - len(s):] = 1
            feats[i, :, :m.shape[1]] = m
            fm[i, :m.shape[1]] = 1
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out = model.generate(input_ids=inp.to(device), attention_mask=am.to(device),
                                 input_features=feats.to(device), feature_attention_mask=fm.to(device),
                                 do_sample=False, max_new_tokens=max_new, pad_token_id=pad,
                                 eos_token_id=[ids["<|im_end|>"], pad])
        for row in out[:, L:].tolist():
            if ids["<|im_end|>"] in row:
                row = row[:row.index(ids["<|im_end|>"])]
            outs.append(tok.decode([t for t in row if t != pad], skip_special_tokens=False))
    return outs


def norm_words(s):
    return "".join(c for c in s.lower() if c.isalnum() or c in " '").split()


def score(items, hyps):
    n_err = n_ref = 0
    by_q = {}
    bad = []
    for (_, q, a, u), h in zip(items, hyps):
        kind = "transcribe" if q in speech_data.QUESTIONS_TRANSCRIBE else q
        d = by_q.setdefault(kind, [0, 0])
        d[0] += h == a
        d[1] += 1
        if kind == "transcribe":
            r = norm_words(a)
            n_err += util.edit_distance(norm_words(h), r)
            n_ref += len(r)
        if h != a and len(bad) < 10:
            bad.append({"question": q, "ref": a, "hyp": h})
    return {"wer": n_err / max(1, n_ref), "transcribe_words": n_ref,
            "accuracy": {k: {"correct": v[0], "n": v[1], "rate": v[0] / v[1]} for k, v in by_q.items()},
            "examples": bad}


def evaluate(model, tok, device, n, espeak_root, subset=None):
    t = time.time()
    items = eval_set(n, espeak_root, subset)
    hyps = answer(model, tok, [(w, q) for w, q, _, _ in items], device)
    res = score(items, hyps)
    res["seconds"] = round(time.time() - t, 1)
    log("eval speech: n %d WER %.4f %s (%.1fs)" % (n, res["wer"], {k: round(v["rate"], 3) for k, v in
                                                                   res["accuracy"].items()}, res["seconds"]))
    return res


def save(thinker, out, recipe):
    """save_pretrained of the thinker (per-expert tensor names) + the real 'thinker.' prefix, Omni config.json."""
    from safetensors.torch import load_file, save_file
    tok = util.load_tokenizer(NAME)
    ids = util.special_ids(tok)
    d = os.path.join(out, NAME)
    tmp = d + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    m = copy.deepcopy(thinker).to(torch.bfloat16)
    m.save_pretrained(tmp, max_shard_size="100GB")
    del m
    sd = load_file(os.path.join(tmp, "model.safetensors"))
    assert any(".mlp.experts.0.gate_proj.weight" in k for k in sd), "expected per-expert tensors"
    save_file({"thinker." + k: v.contiguous() for k, v in sorted(sd.items())}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json")) as f:
        tcfg = json.load(f)
    shutil.rmtree(tmp)
    for k in ("architectures", "transformers_version", "dtype"):
        tcfg.pop(k, None)
    user = tok.encode("user", add_special_tokens=False).ids[0]
    config = {"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
              "enable_audio_output": False, "thinker_config": tcfg, "im_start_token_id": ids["<|im_start|>"],
              "im_end_token_id": ids["<|im_end|>"], "system_token_id": tok.encode("system").ids[0],
              "user_token_id": user, "assistant_token_id": tok.encode("assistant").ids[0], "dtype": "bfloat16",
              "transformers_version": "5.17.0"}
    util.write_json(os.path.join(d, "config.json"), config)
    util.write_json(os.path.join(d, "generation_config.json"), util.generation_config(ids))
    util.write_json(os.path.join(d, "preprocessor_config.json"), speech_data.preprocessor_config())
    util.copy_tokenizer(NAME, d)
    util.write_json(os.path.join(d, "training_recipe.json"), recipe)
    return d


class BalanceLoss:
    """Switch-style MoE load-balancing loss over the non-padding tokens, from forward hooks on the routers
    (transformers 5.17's own aux loss breaks on padded batches)."""

    def __init__(self, model, coef=0.01):
        self.coef, self.logits, self.active = coef, [], True
        tc = model.config.text_config
        self.E, self.k = tc.num_experts, tc.num_experts_per_tok
        for layer in model.model.layers:
            layer.mlp.gate.register_forward_hook(self.hook)

    def hook(self, mod, inp, out):
        if self.active:
            self.logits.append(out[0])

    def clear(self):
        self.logits = []

    def __call__(self, kw):
        mask = kw["attention_mask"].reshape(-1).float()
        total = 0.0
        for lg in self.logits:
            p = torch.softmax(lg.reshape(-1, self.E).float(), dim=-1)
            top = torch.topk(p, self.k, dim=-1).indices
            counts = torch.zeros(self.E, device=p.device).scatter_add_(0, top.reshape(-1),
                                                                       mask.repeat_interleave(self.k))
            total = total + self.E * torch.sum(counts / mask.sum() * (p * mask[:, None]).sum(0) / mask.sum())
        n = len(self.logits)
        self.logits = []
        return self.coef * total / max(1, n)


def load_thinker(d):
    from transformers import Qwen3OmniMoeForConditionalGeneration
    full = Qwen3OmniMoeForConditionalGeneration.from_pretrained(d, dtype=torch.float32)
    return full.thinker


def main():
    ap = util.train_args(NAME, seed=2, batch=128, workers=6, lr=1e-3)
    ap.add_argument("--espeak", required=True, help="root of the unpacked espeak-ng packages (setup_espeak.sh)")
    ap.add_argument("--eval-n", type=int, default=400)
    ap.add_argument("--replay", type=int, default=300, help="batches kept on the device for reuse")
    ap.add_argument("--ctc-weight", type=float, default=CTC_WEIGHT, help="weight of the auxiliary CTC loss")
    ap.add_argument("--ctc-units", choices=["tokens", "chars"], default="chars",
                    help="targets of the auxiliary CTC: the transcript's tokens or its characters")
    ap.add_argument("--no-precompute", action="store_true",
                    help="debug: let the audio tower chunk its input itself (the slow way: host syncs per clip)")
    ap.add_argument("--subset", choices=["digits"], default=None,
                    help="debug: train and evaluate on one easy subset (digits: 1..4 spoken digits, transcribed)")
    args = ap.parse_args()
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration
    tok = util.load_tokenizer(NAME)
    run = util.Run(NAME, args, load_thinker, lambda: Qwen3OmniMoeThinkerForConditionalGeneration(
        thinker_config(tok, TOY if args.toy else FULL)).float())
    model, dev = run.model, run.dev
    if run.round == 0:
        init_audio_convs(model.audio_tower)
    model.config.text_config.output_router_logits = False
    balance = BalanceLoss(model)
    util.use_varlen_attention(model.config.audio_config)
    util.use_sdpa_attention(model.config.text_config)
    it = run.batches(Stream(args.batch, run.seed, args.espeak, model.config, args.subset,
                                   args.ctc_units == "chars"), replay=args.replay)
    audio = speech_data.GpuAudio(speech_data.Espeak(args.espeak).rate, dev, args.seed * 1000 + run.round)
    chars = args.ctc_units == "chars"
    ctc_up = CTC_CHAR_UPSAMPLE if chars else CTC_UPSAMPLE
    ctc = util.CTCHead(model.audio_tower, lambda out: out.last_hidden_state, model.config.text_config.hidden_size,
                       len(CTC_CHARS) if chars else util.n_regular_tokens(tok), ctc_up, args.ctc_weight)
    ctc.proj.to(dev)
    cur = {}
    precompute = not args.no_precompute

    def to_kwargs(b):
        balance.clear()
        cur.update(b)
        x, n16 = audio.waves(b["pcm"], b["lengths"])
        feats, T = audio.log_mel(x, n16)
        F = b["frames"]
        kw = {k: b[k] for k in ("input_ids", "labels", "attention_mask", "position_ids")}
        kw["input_features"] = feats[:, :, :F]
        kw["feature_attention_mask"] = (torch.arange(F, device=dev)[None, :] < T[:, None]).long()
        if precompute:  # the audio tower's chunking from the host (no per-clip loop with device syncs)
            plan = b["plan"]
            kw.update({k: plan[k] for k in ("chunk_lengths", "valid_indices", "cu_seqlens", "max_seqlen")})
            kw["padded_feature"] = speech_data.chunk_features(kw["input_features"], plan)
            util.known_segments(plan["cu_seqlens"], plan["segments"])
        return kw, b["n_tokens"], b["input_ids"].shape[0]

    def aux_loss(kw):
        return balance(kw) + ctc.loss(cur["audio_tokens"], cur["ctc_targets"], cur["ctc_lengths"])
    warm = args.warmup or (200 if run.round == 0 else 100)
    step, secs, curve = util.train_loop(NAME, model, it, dev, args.lr, args.minutes, args.max_steps, warm,
                                        to_kwargs, log_every=5 if args.toy or args.overfit else 100,
                                        extra_loss=aux_loss,
                                        extra_modules=[ctc.proj], floor=args.lr_floor)
    ctc.remove()
    balance.active = False
    run.record(step, secs, curve, warm, "AdamW(0.9, 0.95), wd 0.05, clip 1.0, bf16 autocast, balance loss 0.01",
               reuse_per_clip=REUSE,
               aux_loss="CTC of the transcript's %s on the audio tower's output (%d frames per token), weight "
                        "%.2f; the head is not saved" % (args.ctc_units, ctc_up, args.ctc_weight),
               replay="%s (last %d batches)" % (" ".join(util.Feeder.__doc__.split()), args.replay))
    run.recipe.setdefault("sizes", TOY if args.toy else FULL)
    run.recipe.update({"parameters": run.n_params, "data": speech_data.__doc__.strip(), "eval_seed": EVAL_SEED,
                       "eval_set": "%d held-out clips, one question each" % args.eval_n,
                       "tokenizer": "tools/train/tokenizers/speech"})
    run.finish(lambda recipe: save(model, args.out, recipe),
               lambda: evaluate(model, tok, dev, args.eval_n, args.espeak, args.subset))


if __name__ == "__main__":
    util.run_main(main)
