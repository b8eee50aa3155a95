"""sdpa_bench.py - torch scaled_dot_product_attention (bf16 KV, decode: one query token) at the shapes of
omni_bench_attn, for the same-run comparison in bench/attn_gpu.sh.

32 query / 8 KV heads (enable_gqa), head_dim 128, bs1 x {4K, 32K, 128K}, bs8 x 32K, bs48 x 4K. K/V are
replicated over enough copies that successive calls touch more than 2 x the 60 MB L2 (calls rotate through them).
Timing: 20 warm-up calls, then 200 calls each between two CUDA events; median. Prints a CSV on stdout:
    sdpa,bs,ctx,us_median,bytes
bytes = K + V + q + out in bf16 (what the kernel must read and write)."""
import math
import sys

import torch
import torch.nn.functional as F


def bench(bs, ctx, hq=32, hkv=8, d=128, reps=200):
    kv_bytes = 2 * bs * hkv * ctx * d * 2
    sets = max(1, min(64, math.ceil(120e6 / kv_bytes)))
    g = torch.Generator(device="cuda").manual_seed(bs * 1000003 + ctx)
    q = torch.randn(bs, hq, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
    ks = [torch.randn(bs, hkv, ctx, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(sets)]
    vs = [torch.randn(bs, hkv, ctx, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(sets)]
    out = F.scaled_dot_product_attention(q, ks[0], vs[0], enable_gqa=True)
    ref = F.scaled_dot_product_attention(q.float(), ks[0].float(), vs[0].float(), enable_gqa=True)
    err = (out.float() - ref).abs().max().item() / ref.abs().max().item()
    for i in range(20):
        F.scaled_dot_product_attention(q, ks[i % sets], vs[i % sets], enable_gqa=True)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i in range(reps):
        ev[i][0].record()
        F.scaled_dot_product_attention(q, ks[i % sets], vs[i % sets], enable_gqa=True)
        ev[i][1].record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    us = t[reps // 2] * 1e3
    total = kv_bytes + 2 * bs * hq * d * 2
    print(f"sdpa,{bs},{ctx},{us:.2f},{total:.0f}", flush=True)
    print(f"sdpa bs {bs:2d} ctx {ctx:6d}: {us:8.1f} us, {total / us / 1e6:5.2f} TB/s, max err {err:.1e} vs f32, "
          f"{sets} sets", file=sys.stderr, flush=True)
    del ks, vs
    torch.cuda.empty_cache()


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", file=sys.stderr)
    for bs, ctx in [(1, 4096), (1, 32768), (1, 131072), (8, 32768), (48, 4096)]:
        bench(bs, ctx)


if __name__ == "__main__":
    main()
