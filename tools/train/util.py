"""Shared helpers of the training scripts in tools/train/ (see README.md there).

Logging, the wall-clock budget and learning-rate schedule, the varlen attention used by the vision/audio towers
during training, tokenizer/checkpoint helpers and the packing of results into at most a few <=16 MiB files.
"""

import argparse
import json
import math
import os
import sys
import tarfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TRAIN_DIR = os.path.join(ROOT, "tools", "train")
TOKENIZER_DIR = os.path.join(TRAIN_DIR, "tokenizers")
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import common as refcommon  # noqa: E402  (tools/reference/common.py: Qwen tokenizer structure, special tokens)

VARLEN_ATTN = "flash_varlen_sdpa"  # name contains "flash" so the towers pass cu_seqlens (one batched SDPA call)

T0 = time.time()


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


class Budget:
    """Wall-clock training budget; frac() in [0, 1] drives the learning-rate schedule."""

    def __init__(self, minutes, max_steps=0):
        self.seconds = minutes * 60.0
        self.max_steps = max_steps
        self.start = time.time()

    def elapsed(self):
        return time.time() - self.start

    def frac(self, step):
        f = self.elapsed() / self.seconds if self.seconds > 0 else 1.0
        if self.max_steps:
            f = max(f, step / self.max_steps)
        return min(f, 1.0)

    def done(self, step):
        return self.frac(step) >= 1.0


def lr_at(frac, step, peak, warmup_steps, floor=0.05):
    """Linear warmup over warmup_steps, then cosine decay over the wall-clock budget down to floor * peak."""
    w = min(1.0, (step + 1) / max(1, warmup_steps))
    return peak * w * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


_SEGMENTS = [None, None, None]  # [cu_seqlens tensor, its segment lengths as Python ints, their gather layout]


def known_segments(cu, lens):
    """Tell the varlen attention the segment lengths (host ints) of the cu_seqlens tensor cu (on the device) that
    the next forward passes, so that it needs no host sync."""
    _SEGMENTS[:] = [cu, list(lens), None]


def _segment_layout(lens, dev):
    """Segment lengths (host ints) -> (B, L, gather [B*L] (packed row of each padded slot, 0 for padding), scatter
    [N] (padded slot of each packed row), key mask [B, 1, 1, L]), built on the host and copied asynchronously."""
    import torch
    n = torch.tensor([k for k in lens if k > 0])  # (torch ops on the host: a batch of 1024 images has ~10^5 slots)
    B, L = len(n), int(n.max())
    t = torch.arange(L)[None, :]  # [1, L]
    valid = t < n[:, None]  # [B, L]
    gather = ((torch.cumsum(n, 0) - n)[:, None] + t).masked_fill(~valid, 0).reshape(-1)
    scatter = valid.reshape(-1).nonzero().reshape(-1)
    mask = valid[:, None, None, :]

    def put(x):
        return (x.pin_memory() if dev.type == "cuda" else x).to(dev, non_blocking=True)
    return B, L, put(gather), put(scatter), put(mask)


def _varlen_sdpa(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, cu_seq_lens_q=None,
                 cu_seq_lens_k=None, is_causal=False, **kwargs):
    """Bidirectional attention inside each cu_seqlens segment of a packed sequence, as one batched SDPA call.
    query/key/value [1, H, N, d]; returns ([1, N, H, d], None) like transformers' flash-attention functions.
    Unequal segments are padded with index_select (its backward is an index_add: advanced indexing's backward, a
    sorting index_put with a long run of duplicate padding indices, took 92% of the OCR step's GPU time)."""
    import torch.nn.functional as F
    cu = cu_seq_lens_q
    if _SEGMENTS[0] is not cu:  # (one host sync; every layer of a forward passes the same cu tensor)
        _SEGMENTS[:] = [cu, (cu[1:] - cu[:-1]).tolist(), None]
    lens = _SEGMENTS[1]
    H, N, d = query.shape[1], query.shape[2], query.shape[3]
    q, k, v = query[0], key[0], value[0]  # [H, N, d]
    lens_nz = [n for n in lens if n > 0]
    B, L = len(lens_nz), max(lens_nz)
    if all(n == L for n in lens_nz):  # equal segments: a plain reshape
        def split(x):
            return x.reshape(H, B, L, d).transpose(0, 1)
        o = F.scaled_dot_product_attention(split(q), split(k), split(v), scale=scaling, dropout_p=dropout)
        return o.permute(0, 2, 1, 3).reshape(1, N, H, d), None
    if _SEGMENTS[2] is None:
        _SEGMENTS[2] = _segment_layout(lens, query.device)
    B, L, gather, scatter, mask = _SEGMENTS[2]

    def pad(x):
        return x.index_select(1, gather).reshape(H, B, L, d).transpose(0, 1)  # [B, H, L, d]
    o = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=mask, scale=scaling, dropout_p=dropout)
    o = o.permute(0, 2, 1, 3).reshape(B * L, H, d).index_select(0, scatter)  # [N, H, d], segments in order
    return o.reshape(1, N, H, d), None


def register_varlen_attention():
    from transformers import AttentionInterface
    AttentionInterface.register(VARLEN_ATTN, _varlen_sdpa)


def use_varlen_attention(sub_config):
    """Switch one tower's config (vision_config / audio_config object of a built model) to the varlen path."""
    register_varlen_attention()
    sub_config._attn_implementation = VARLEN_ATTN


def use_sdpa_attention(sub_config):
    sub_config._attn_implementation = "sdpa"


def tokenizer_path(name):
    return os.path.join(TOKENIZER_DIR, name)


def load_tokenizer(name):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(tokenizer_path(name), "tokenizer.json"))


def load_tokenizer_dir(d):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def n_regular_tokens(tok):
    """Number of regular tokens = id of <|endoftext|> (the first added token)."""
    return tok.token_to_id("<|endoftext|>")


def special_ids(tok):
    ids = refcommon.special_token_ids(n_regular_tokens(tok))
    for name, i in ids.items():
        assert tok.token_to_id(name) == i, (name, i)
    return ids


def padded_vocab(tok, multiple=64):
    n = tok.get_vocab_size()
    return (n + multiple - 1) // multiple * multiple


def build_tokenizer(out_dir, corpus, n_regular):
    """Qwen-structured byte-level BPE (tools/reference/common.py) with n_regular regular tokens, trained on corpus,
    written compactly with the official chat template in tokenizer_config.json."""
    return refcommon.build_small_tokenizer(out_dir, chat_template=refcommon.load_chat_template(), compact=True,
                                           corpus=corpus, n_regular=n_regular)


def copy_tokenizer(name, dst):
    import shutil
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_path(name), f), os.path.join(dst, f))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def generation_config(ids, **extra):
    g = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
         "pad_token_id": ids["<|endoftext|>"]}
    g.update(extra)
    return g


def qwen3vl_config(tok, s, max_pos, vision):
    """Qwen3VLConfig with the released layout (interleaved MRoPE [24, 20, 20], theta 5e6, tied embeddings, the
    tokenizer's special ids); s: hidden/layers/heads/kv/head_dim/inter; vision: the vision_config dict."""
    from transformers import Qwen3VLConfig
    ids = special_ids(tok)
    text = dict(vocab_size=padded_vocab(tok), hidden_size=s["hidden"], intermediate_size=s["inter"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
                head_dim=s["head_dim"], hidden_act="silu", max_position_embeddings=max_pos, initializer_range=0.02,
                rms_norm_eps=1e-6, use_cache=True,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                 "mrope_interleaved": True},
                attention_bias=False, attention_dropout=0.0, bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"], tie_word_embeddings=True)
    cfg = Qwen3VLConfig(text_config=text, vision_config=dict(vision, initializer_range=0.02),
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                        tie_word_embeddings=True)
    cfg.architectures = ["Qwen3VLForConditionalGeneration"]
    return cfg


# A vision tower that is part of the layout but unused (the text model; the speech thinker has the same sizes).
TINY_VISION = dict(depth=1, hidden_size=16, hidden_act="gelu_pytorch_tanh", intermediate_size=32, num_heads=2,
                   in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                   num_position_embeddings=64, deepstack_visual_indexes=[0])


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))


def edit_distance(a, b):
    """Levenshtein distance between two sequences."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def pack_dirs(items, out_dir, prefix="models", part_bytes=16 * 1024 * 1024 - 4096):
    """tar + xz (preset 1: bf16 weights shrink to ~75%) the (arcname, path) items into out_dir/prefix.tar.xz.partNN
    files of at most part_bytes each. Unpack with: cat prefix.tar.xz.part* | tar -xJ -C DEST."""
    prefix += ".tar.xz"
    tmp = os.path.join(out_dir, prefix + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=1) as t:
        for arc, path in items:
            if os.path.exists(path):
                t.add(path, arcname=arc)
    size = os.path.getsize(tmp)
    parts = []
    with open(tmp, "rb") as f:
        k = 0
        while True:
            chunk = f.read(part_bytes)
            if not chunk:
                break
            p = os.path.join(out_dir, "%s.part%02d" % (prefix, k))
            with open(p, "wb") as g:
                g.write(chunk)
            parts.append(p)
            k += 1
    os.remove(tmp)
    return size, parts


def train_loop(name, model, batches, dev, peak_lr, minutes, max_steps, warmup, to_kwargs, log_every=100,
               weight_decay=0.05, extra_loss=None, extra_modules=(), floor=0.05, autocast=None, checkpoint=None,
               checkpoint_minutes=0.0):
    """AdamW + bf16 autocast (autocast None: on CUDA only; True/False: on/off on any device) + grad clip 1.0 +
    linear warmup / cosine-over-wall-clock schedule (down to floor * peak_lr at the end).
    checkpoint(steps, seconds, curve) is called every checkpoint_minutes of training (0: never), e.g. to save the
    model so that a crash or a deadline loses little.
    batches: iterator of batch dicts; to_kwargs(batch) -> (model kwargs on dev, n_target_tokens, n_items);
    extra_loss(kwargs) -> a term added to the model's loss after each forward (e.g. a MoE balance loss or an
    auxiliary CTC loss; logged apart as `aux`); extra_modules: training-only modules (e.g. CTC heads) optimised
    with the model. Returns (steps, seconds, loss curve [[step, seconds, mean model loss, lr], ...])."""
    import torch
    params = [(n, p) for m in [model, *extra_modules] for n, p in m.named_parameters()]
    decay = [p for n, p in params if p.dim() >= 2]
    no_decay = [p for n, p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=peak_lr, betas=(0.9, 0.95), fused=dev.type == "cuda")
    if dev.type == "cuda":  # cuDNN attention builds a plan for every new shape (every batch here): 6-7 ms of CPU
        torch.backends.cuda.enable_cudnn_sdp(False)  # per call in call A's speech profile; flash/efficient have none
    if autocast is None:
        autocast = dev.type == "cuda"
    budget = Budget(minutes, max_steps)
    t_ckpt = time.time()
    step, curve, t_last, n_tok, n_items, acc, acc_aux, n_acc, s_last = 0, [], time.time(), 0, 0, 0.0, 0.0, 0, 0
    model.train()
    prof = StepProfiler(name, int(os.environ.get("OMNI_TRAIN_PROFILE", "0")))
    while not budget.done(step):
        prof.at(step)
        b = next(batches)
        prof.mark("data")
        kw, nt, ni = to_kwargs(b)
        prof.mark("prepare")
        lr = lr_at(budget.frac(step), step, peak_lr, warmup, floor)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(**kw).loss
            prof.mark("forward")
            aux = extra_loss(kw) if extra_loss is not None else torch.zeros((), device=dev)
            prof.mark("aux_loss")
        opt.zero_grad(set_to_none=True)
        (loss + aux).backward()
        prof.mark("backward")
        torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        prof.mark("optimizer")
        step += 1
        n_tok += nt
        n_items += ni
        if step % 10 == 0 or log_every < 10:  # .item() syncs: sample the loss every 10 steps
            acc += loss.item()
            acc_aux += aux.item()
            n_acc += 1
        if step % log_every == 0 or budget.done(step):
            dt = max(1e-6, time.time() - t_last)
            avg = acc / max(1, n_acc)
            curve.append([step, round(budget.elapsed(), 1), round(avg, 5), lr])
            log("%s step %d loss %.4f%s lr %.2e %.1f items/s %.0f target tok/s %.2f steps/s%s" % (
                name, step, avg, " aux %.4f" % (acc_aux / max(1, n_acc)) if extra_loss else "", lr, n_items / dt,
                n_tok / dt, (step - s_last) / dt,
                getattr(batches, "status", lambda: "")()))
            t_last, n_tok, n_items, acc, acc_aux, n_acc, s_last = time.time(), 0, 0, 0.0, 0.0, 0, step
        if checkpoint is not None and checkpoint_minutes > 0 and time.time() - t_ckpt >= checkpoint_minutes * 60 \
                and not budget.done(step):
            checkpoint(step, budget.elapsed(), curve)
            model.train()
            t_ckpt = time.time()
        prof.mark("log")
    return step, budget.elapsed(), curve


class StepProfiler:
    """OMNI_TRAIN_PROFILE=N: where a training step's time goes, in three windows of N steps from step 20:
    1. plain steps: the wall time per step as training runs it (asynchronous launches);
    2. the same steps with a device synchronisation after each phase (data = waiting for the next batch, prepare =
       to_kwargs, forward, aux_loss, backward, optimizer = clip + AdamW, log): the per-phase time split;
    3. torch.profiler: operators, kernel launches and host-device synchronisations per step, then the top
       operators by self CPU and by self CUDA time."""

    SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMalloc",
                "cudaFree", "cudaHostAlloc")
    LAUNCH_OPS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")

    def __init__(self, name, n, start=20):
        import torch
        self.torch, self.name, self.n, self.start, self.p = torch, name, n, start, None
        self.cuda = torch.cuda.is_available()
        self.timing, self.split, self.t_mark = False, {}, 0.0

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def mark(self, phase):
        """End of a phase of the current step (only measured in window 2)."""
        if self.timing:
            self._sync()
            t = time.perf_counter()
            self.split[phase] = self.split.get(phase, 0.0) + t - self.t_mark
            self.t_mark = t

    def at(self, step):
        if not self.n:
            return
        s0, n = self.start, self.n
        if step == s0:
            self._sync()
            self.t0 = time.perf_counter()
        elif step == s0 + n:
            self._sync()
            self.plain = (time.perf_counter() - self.t0) / n
            self.timing, self.t0 = True, time.perf_counter()
            self.t_mark = self.t0
        elif step == s0 + 2 * n:
            self.timing = False
            synced = (time.perf_counter() - self.t0) / n
            parts = " ".join("%s %.1f" % (k, v / n * 1e3) for k, v in self.split.items())
            log("%s profile: %.1f ms per step (%.2f steps/s) over %d steps; with a sync after each phase %.1f ms: %s "
                "(ms per step)" % (self.name, self.plain * 1e3, 1 / self.plain, n, synced * 1e3, parts))
            acts = [self.torch.profiler.ProfilerActivity.CPU]
            if self.cuda:
                acts.append(self.torch.profiler.ProfilerActivity.CUDA)
            self.p = self.torch.profiler.profile(activities=acts)
            self.p.__enter__()
        elif step == s0 + 3 * n and self.p is not None:
            self._sync()
            self.p.__exit__(None, None, None)
            ka = self.p.key_averages()
            ops = sum(e.count for e in ka if e.key.startswith("aten::"))
            launches = sum(e.count for e in ka if e.key in self.LAUNCH_OPS)
            syncs = {e.key: e.count / n for e in ka if e.key.startswith(self.SYNC_OPS)}
            gpu = sum(e.self_device_time_total for e in ka if e.device_type != self.torch.autograd.DeviceType.CPU)
            log("%s profile: per step %.0f aten operator calls, %.0f kernel launches, %.1f ms of kernel time (the "
                "device is busy that long), syncs/allocations %s" % (
                    self.name, ops / n, launches / n, gpu / n / 1e3, {k: round(v, 1) for k, v in syncs.items()}))
            for key in ("count", "self_cpu_time_total", "self_device_time_total"):
                try:
                    log("%s profile by %s:\n%s" % (self.name, key, ka.table(sort_by=key, row_limit=30)))
                except Exception as e:  # noqa: BLE001 - a profiler without that column (e.g. no CUDA)
                    log("%s profile by %s: %s" % (self.name, key, e))
            self.p, self.n = None, 0


def to_device(b, dev):
    """A batch dict (tensors, nested dicts, other values) with its tensors on dev (asynchronous copies)."""
    if isinstance(b, dict):
        return {k: to_device(v, dev) for k, v in b.items()}
    return b.to(dev, non_blocking=True) if hasattr(b, "to") else b


class Feeder:
    """Training batches on the device: a fresh one from the DataLoader whenever one is ready (a thread waits for
    the CPU workers), else one of the last `keep` batches again, so the GPU never waits for the CPU. The first
    batch is waited for. Replayed batches can be varied on the device by the caller (e.g. new noise)."""

    def __init__(self, it, dev, keep, seed):
        import queue
        import random
        import threading
        self.dev, self.keep, self.buf, self.n_fresh, self.n_replay = dev, keep, [], 0, 0
        self.q = queue.Queue(maxsize=4)
        self.rng = random.Random(repr(seed))
        self.empty = queue.Empty
        threading.Thread(target=self._pull, args=(it,), daemon=True).start()

    def _pull(self, it):
        try:
            for b in it:
                self.q.put(b)
        except BaseException as e:  # noqa: BLE001 - handed to the training thread, which raises it
            self.q.put(e)

    def to_dev(self, b):
        return to_device(b, self.dev)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            b = self.q.get(block=not self.buf, timeout=600)
            if isinstance(b, BaseException):
                raise RuntimeError("the data loader failed: %r" % b) from b
            if not self.n_fresh and not self.buf:
                check_pinnable(b)
            b = self.to_dev(b)
        except self.empty:
            self.n_replay += 1
            b = self.buf[self.rng.randrange(len(self.buf))]
            return dict(b, fresh=False)
        self.n_fresh += 1
        if len(self.buf) < self.keep:
            self.buf.append(b)
        else:
            self.buf[self.n_fresh % self.keep] = b
        return dict(b, fresh=True)

    def status(self):
        s = " (fresh %d, replayed %d)" % (self.n_fresh, self.n_replay)
        self.n_fresh = self.n_replay = 0
        return s


class CTCHead:
    """Auxiliary CTC loss on a tower's output tokens during training (joint CTC-attention training: it gives the
    tower a direct, alignment-free signal, so the decoder gets useful features much sooner). The head is a
    training-only Linear, never saved; a forward hook on the tower catches its output tokens.
    Each token is read as `upsample` CTC frames (more frames than tokens when a token covers several symbols)."""

    def __init__(self, tower, pick, dim, n_classes, upsample, weight):
        import torch
        self.torch, self.pick, self.C, self.up, self.weight = torch, pick, n_classes + 1, upsample, weight
        self.proj = torch.nn.Linear(dim, upsample * self.C)  # class 0 = blank
        self.feats = None
        self.handle = tower.register_forward_hook(self.hook)

    def remove(self):
        """Detach from the tower (before saving: the model must not keep the hook)."""
        self.handle.remove()

    def hook(self, mod, inp, out):
        self.feats = self.pick(out)

    def loss(self, lengths, targets, target_lengths):
        """lengths [B] (python ints: tokens per item, in the tower's output order), targets [sum] (classes
        1..n_classes), target_lengths [B] -> weight * mean CTC loss per target symbol."""
        torch = self.torch
        lp = self.proj(self.feats.float()).reshape(-1, self.C).log_softmax(-1)  # [tokens * up, C]
        il = torch.tensor(lengths, device=lp.device) * self.up
        t = torch.arange(max(lengths) * self.up, device=lp.device)
        # [T, B, C] without a copy per item: frame t of item b, clamped (ctc_loss ignores frames past il[b])
        rows = (torch.cumsum(il, 0) - il + t[:, None]).clamp(max=lp.shape[0] - 1)  # [T, B]
        lp = lp.index_select(0, rows.reshape(-1)).reshape(*rows.shape, self.C)  # (index_add backward, see above)
        with torch.autocast(lp.device.type, enabled=False):
            ctc = torch.nn.functional.ctc_loss(lp.float(), targets, il, target_lengths, blank=0, reduction="mean",
                                               zero_infinity=True)
        self.feats = None
        return self.weight * ctc

def check_pinnable(batch):
    """Refuse batch tensors with repeated memory (expanded views): the CUDA DataLoader's pin-memory thread cannot
    copy them (checked on every device, so a CPU test run catches it)."""
    for k, v in batch.items():
        if hasattr(v, "stride") and v.numel() > 1:
            if not v.is_contiguous() or 0 in [s for s, n in zip(v.stride(), v.shape) if n > 1]:
                raise ValueError("batch tensor %r %s has overlapping memory (strides %s)" % (k, tuple(v.shape),
                                                                                          v.stride()))


def _lower_priority(_worker_id):
    """Data workers yield the CPU to the training process, whose kernel launches keep the GPU busy."""
    os.nice(5)


def linear_patch_embed(visual):
    """Run the vision tower's patch embedding (a Conv3d whose kernel equals its stride and input) as the equal
    F.linear on the same weight: cuDNN's bf16 Conv3d for this shape is pathologically slow on Hopper (~0.3 s per
    training step here; transformers issue #45750). Parameters and checkpoint are unchanged."""
    import torch.nn.functional as F
    pe = visual.patch_embed
    w = pe.proj.weight  # [embed, C, T, P, P]

    def forward(hidden_states):
        return F.linear(hidden_states.reshape(-1, w[0].numel()).to(w.dtype), w.reshape(w.shape[0], -1), pe.proj.bias)
    pe.forward = forward


class RopeIndex:
    """The model class's own get_rope_index (MRoPE position ids) without a model: it reads only the config, so the
    CPU data workers compute the position ids of a batch (a Python loop per sample: ~1 ms each) and the training
    step passes them as position_ids (the model then skips its own, identical, computation)."""

    def __init__(self, model_cls, config):
        import types
        self.ns = types.SimpleNamespace(config=config, rope_deltas=None,  # (the Omni thinker reads its own copy)
                                        spatial_merge_size=config.vision_config.spatial_merge_size)
        for name in ("get_vision_position_ids", "get_llm_pos_ids_for_vision"):
            if hasattr(model_cls, name):
                setattr(self.ns, name, types.MethodType(getattr(model_cls, name), self.ns))
        self.fn = model_cls.get_rope_index

    def __call__(self, *args, **kw):
        """-> position_ids [3, B, L] (the model's get_rope_index arguments)."""
        return self.fn(self.ns, *args, **kw)[0].contiguous()  # (an expanded view cannot be pinned)


def train_args(name, seed, batch, workers, lr):
    """The command-line options every train_*.py takes (defaults per model)."""
    import torch
    ap = argparse.ArgumentParser(description="train the embedded %s model (see tools/train/README.md)" % name)
    ap.add_argument("--out", required=True, help="output folder; the model is written to OUT/%s" % name)
    ap.add_argument("--minutes", type=float, default=7.0, help="wall-clock training budget")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: budget only)")
    ap.add_argument("--resume", default=None, help="a previous output folder: continue from its %s/" % name)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--workers", type=int, default=workers, help="CPU data workers")
    ap.add_argument("--lr", type=float, default=lr, help="peak learning rate")
    ap.add_argument("--warmup", type=int, default=0, help="warmup steps (0: 200 fresh, 100 resumed)")
    ap.add_argument("--lr-floor", type=float, default=0.05,
                    help="the cosine ends at this fraction of the peak (e.g. 0.3 for a round that another follows)")
    ap.add_argument("--toy", action="store_true", help="tiny sizes for CPU tests")
    ap.add_argument("--overfit", action="store_true",
                    help="debug: train on the first batch only, again and again (the loss must go to ~0)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the training process on the CPU")
    ap.add_argument("--autocast", choices=["auto", "bf16", "off"], default="auto",
                    help="bf16 autocast: auto = on CUDA only; bf16 = also on the CPU (fast where the CPU has "
                         "AVX512-BF16/AMX); off = float32")
    ap.add_argument("--checkpoint-minutes", type=float, default=0.0,
                    help="save the model every this many minutes of training (0: only at the end)")
    return ap


def autocast_flag(args):
    """--autocast -> train_loop's autocast argument (None: on CUDA only)."""
    return {"auto": None, "bf16": True, "off": False}[args.autocast]


class Run:
    """One training round of one model: fresh (build()) or resumed (load(dir) of args.resume/NAME with its
    training_recipe.json), the device, the data loader, and the record of the round."""

    def __init__(self, name, args, load, build):
        import torch
        self.torch, self.name, self.args = torch, name, args
        torch.manual_seed(args.seed)
        self.recipe = {"model": name, "history": []}
        if args.resume:
            rd = os.path.join(args.resume, name)
            self.model = load(rd)
            self.recipe = read_json(os.path.join(rd, "training_recipe.json"))
            log("resumed from %s (%d earlier rounds)" % (rd, len(self.recipe["history"])))
        else:
            self.model = build()
        self.round = len(self.recipe["history"])
        self.seed = [args.seed, self.round]
        self.dev = torch.device(args.device)
        if self.dev.type == "cpu":  # a small shared CPU: few threads (one is faster than contended ones)
            torch.set_num_threads(max(1, args.threads))
        self.n_params = count_params(self.model)
        log("%s model: %.2fM parameters (%.1f MB bf16), round %d" % (name, self.n_params / 1e6,
                                                                     self.n_params * 2 / 1e6, self.round))

    def batches(self, stream, replay=0):
        """Iterator over the stream's batches; the workers fork before CUDA is initialised, then the model moves.
        replay > 0: a Feeder (batches on the device; the last `replay` batches are reused while the CPU is busy)."""
        torch = self.torch
        if self.args.overfit:
            self.model.to(self.dev)
            one = next(iter(stream))
            one = to_device(one, self.dev)
            return iter(lambda: one, None)
        self.loader = torch.utils.data.DataLoader(
            stream, batch_size=None, num_workers=self.args.workers,
            prefetch_factor=4 if self.args.workers else None, persistent_workers=self.args.workers > 0,
            pin_memory=self.dev.type == "cuda", worker_init_fn=_lower_priority)
        it = iter(self.loader)
        self.model.to(self.dev)
        return Feeder(it, self.dev, replay, self.seed) if replay else it

    def record(self, steps, seconds, curve, warmup, optimizer, **extra):
        h = {"round": self.round, "seed": self.seed, "steps": steps, "seconds": round(seconds, 1),
             "batch": self.args.batch, "peak_lr": self.args.lr, "warmup_steps": warmup, "optimizer": optimizer,
             "schedule": "linear warmup, cosine over the wall-clock budget to %g%%" % (100 * self.args.lr_floor), "loss_curve": curve,
             "device": self.torch.cuda.get_device_name(0) if self.dev.type == "cuda" else "cpu"}
        h.update(extra)
        self.recipe["history"].append(h)

    def finish(self, save, evaluate):
        """save(recipe) -> folder, written before the evaluation (which could run out of time); then the held-out
        evaluation goes into the record."""
        self.model.eval()
        d = save(self.recipe)
        log("saved", d, "%.1f MB" % (dir_bytes(d) / 1e6))
        self.recipe["history"][-1]["eval"] = evaluate()
        write_json(os.path.join(d, "training_recipe.json"), self.recipe)
        log("done")


def run_main(main):
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the slow interpreter teardown (DataLoader/tokenizer threads); everything is written
