"""attn_table.py - the decode-attention tables of bench/attn_gpu.sh from one run's CSVs.

    python3 bench/attn_table.py bench.csv sdpa.csv [config]

bench.csv (omni_bench_attn): fmt,bs,ctx,config,us_median,us_b2b,bytes,kv_bytes,copy_tbs,ok,ctas
sdpa.csv (bench/sdpa_bench.py): sdpa,bs,ctx,us_median,bytes
Prints (stdout): the variant matrix (us per kernel configuration, geometric mean against "base" per format, the
winner), then the issue-10 table for the chosen configuration (argument; default: the int2 winner) and for "base":
us, MB moved, GB/s, % of the copy measured in the same run, SDPA time / ours; KV MiB per format; the targets with
PASS / FAIL."""
import csv
import math
import sys

SHAPES = [(1, 4096), (1, 32768), (1, 131072), (8, 32768), (48, 4096)]
FMTS = ["bf16", "int2", "int4", "kivi2"]


def load(path_bench, path_sdpa):
    ours, cfgs = {}, []
    for r in csv.reader(open(path_bench)):
        key = (r[0], int(r[1]), int(r[2]), r[3])
        ours[key] = dict(us=float(r[4]), b2b=float(r[5]), bytes=float(r[6]), kv=float(r[7]), copy=float(r[8]),
                         ok=r[9] == "1", ctas=int(r[10]))
        if r[3] not in cfgs:
            cfgs.append(r[3])
    sdpa = {}
    try:
        for r in csv.reader(open(path_sdpa)):
            sdpa[(int(r[1]), int(r[2]))] = dict(us=float(r[3]), bytes=float(r[4]))
    except (FileNotFoundError, IndexError, ValueError):
        pass
    return ours, cfgs, sdpa


def shape_name(bs, ctx):
    return f"bs{bs}/{ctx // 1024}K"


def geomean_vs(ours, fmt, cfg, ref):
    logs = [math.log(ours[(fmt, bs, ctx, cfg)]["us"] / ours[(fmt, bs, ctx, ref)]["us"])
            for bs, ctx in SHAPES if (fmt, bs, ctx, cfg) in ours and (fmt, bs, ctx, ref) in ours]
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def matrix(ours, cfgs, sdpa):
    print("kernel configurations (us, median of 200; * = fastest of the row; FAIL = outside the accuracy policy)")
    w = max(9, max(len(c) for c in cfgs) + 1)
    print(f"{'format':>6} {'shape':>9} |" + "".join(f"{c:>{w}}" for c in cfgs))
    winners = {}
    for f in FMTS:
        for bs, ctx in SHAPES:
            row = [ours.get((f, bs, ctx, c)) for c in cfgs]
            if not any(row):
                continue
            best = min((x["us"] for x in row if x and x["ok"]), default=None)
            cells = ""
            for x in row:
                if not x:
                    cells += " " * w
                    continue
                mark = "!" if not x["ok"] else "*" if x["us"] == best else " "
                cells += f"{x['us']:{w - 1}.1f}{mark}"
            print(f"{f:>6} {shape_name(bs, ctx):>9} |" + cells)
        ref = "base" if "base" in cfgs else cfgs[0] # the reference: base, else the first configuration
        g = {c: geomean_vs(ours, f, c, ref) for c in cfgs}
        if any(not math.isnan(x) for x in g.values()):
            ok = [c for c in cfgs if all(ours[k]["ok"] for k in ours if k[0] == f and k[3] == c)]
            print(f"{f:>6} {'vs ' + ref:>9} |" + "".join(f"{g[c]:{w - 1}.3f} " for c in cfgs))
            cand = [c for c in ok if not math.isnan(g[c])]
            if cand:
                winners[f] = min(cand, key=lambda c: g[c])
        if f == "bf16" and sdpa: # time / SDPA's time per configuration (issue 9: <= 1.10 at every shape)
            for bs, ctx in SHAPES:
                sd = sdpa.get((bs, ctx))
                row = [ours.get((f, bs, ctx, c)) for c in cfgs]
                if sd and any(row):
                    print(f"{'/ SDPA':>6} {shape_name(bs, ctx):>9} |" +
                          "".join(f"{x['us'] / sd['us']:{w - 1}.3f} " if x else " " * w for x in row))
    print(f"winners (geometric mean of the five shapes against {'base' if 'base' in cfgs else cfgs[0]}): " +
          ", ".join(f"{f} {c}" for f, c in winners.items()))
    return winners


def table(ours, sdpa, cfg):
    copy = next((x["copy"] for k, x in ours.items() if k[3] == cfg), 0.0)
    print(f"\ndecode attention, config {cfg}: 32 query / 8 KV heads, D 128, window 128, caches rotated beyond L2; "
          f"device-to-device copy {copy:.2f} TB/s (read + write) in this run")
    print(f"{'shape':>9} | {'kernel':>9} | {'us':>8} | {'MB moved':>9} | {'GB/s':>6} | {'% copy':>6} | "
          f"{'SDPA/ours':>9} | ok")
    res = {}
    for bs, ctx in SHAPES:
        s = sdpa.get((bs, ctx))
        rows = []
        if s:
            rows.append(("sdpa bf16", s["us"], s["bytes"], True))
        for f in FMTS:
            x = ours.get((f, bs, ctx, cfg))
            if x:
                rows.append((f, x["us"], x["bytes"], x["ok"]))
        for i, (name, us, byt, ok) in enumerate(rows):
            gbs = byt / us / 1e3
            pct = 100 * gbs / 1e3 / copy if copy else float("nan")
            ratio = s["us"] / us if s else float("nan")
            res[(name, bs, ctx)] = (us, pct, ratio)
            print(f"{shape_name(bs, ctx) if i == 0 else '':>9} | {name:>9} | {us:8.1f} | {byt / 1e6:9.2f} | "
                  f"{gbs:6.0f} | {pct:5.1f}% | {ratio:8.2f}x | {'ok' if ok else 'FAIL'}")
    return res


def kv_mib(ours, cfg):
    if len({k[0] for k in ours if k[3] == cfg}) < 2:
        return # one format in the run (OMNI_BENCH_ONLY): nothing to compare
    print("\nKV cache MiB per format (one layer, 8 KV heads, D 128, window 128 bf16)")
    print(f"{'shape':>9} |" + "".join(f"{f:>9}" for f in FMTS) + " | int2/bf16")
    for bs, ctx in SHAPES:
        v = {f: ours[(f, bs, ctx, cfg)]["kv"] / 2**20 for f in FMTS if (f, bs, ctx, cfg) in ours}
        ratio = v["int2"] / v["bf16"] if "int2" in v and "bf16" in v else float("nan")
        print(f"{shape_name(bs, ctx):>9} |" + "".join(f"{v[f]:9.1f}" if f in v else " " * 9 for f in FMTS) +
              f" | {ratio:9.3f}")


def targets(res):
    def get(name, bs, ctx):
        return res.get((name, bs, ctx))

    lines = []
    x = get("int2", 1, 131072)
    if x:
        lines.append(("int2 bs1/128K <= 33 us", f"{x[0]:.1f} us", x[0] <= 33))
        if not math.isnan(x[2]):
            lines.append(("int2 bs1/128K >= 4.5x SDPA bf16", f"{x[2]:.2f}x", x[2] >= 4.5))
    for bs, ctx in [(1, 131072), (8, 32768), (48, 4096)]:
        x = get("int2", bs, ctx)
        if x:
            lines.append((f"int2 {shape_name(bs, ctx)} >= 80% of copy", f"{x[1]:.1f}%", x[1] >= 80))
    for bs, ctx in SHAPES:
        x = get("bf16", bs, ctx)
        if x and not math.isnan(x[2]):
            lines.append((f"bf16 {shape_name(bs, ctx)} within 10% of SDPA", f"time {1 / x[2]:.3f}x SDPA",
                          1 / x[2] <= 1.10))
    for name, val, ok in lines:
        print(f"  {name:<34} {val:>16}  {'PASS' if ok else 'FAIL'}")
    if not lines:
        print("  (no bf16 / int2 rows of this configuration at the target shapes)")


def main():
    ours, cfgs, sdpa = load(sys.argv[1], sys.argv[2])
    if not ours:
        print("no decode-attention rows")
        return
    winners = matrix(ours, cfgs, sdpa) if len(cfgs) > 1 else {}
    pick = sys.argv[3] if len(sys.argv) > 3 else winners.get("int2", cfgs[0])
    for cfg in dict.fromkeys([pick, "base"] if "base" in cfgs else [pick]):
        res = table(ours, sdpa, cfg)
        print(f"targets (config {cfg}):")
        targets(res)
    kv_mib(ours, pick)


if __name__ == "__main__":
    main()
