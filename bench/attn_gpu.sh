#!/bin/bash
# attn_gpu.sh - every GPU attention test and the attention benchmark on the H200 in one command, from binaries
# built here (Debian 12, CUDA 13.0). The device image has CUDA (cudart) and torch but not our host libraries
# (OpenBLAS, libgfortran, libgomp), so `pack` bundles those next to the binaries.
#   here:    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON && cmake --build build -j2 \
#              --target test_gpu_kv_attn test_gpu_kv_quant test_gpu_kv_prefill omni_bench_attn
#            bench/attn_gpu.sh pack build            -> build/dev-attn/ (~10 MB; carry it)
#   device:  bench/attn_gpu.sh run build [tests] [sanitize] [bench]   (repo root; logs + CSVs in $OUT/attn_logs.tgz;
#            no part named = all three, ~10 min: split into "tests sanitize" (~6 min) and "bench" (~4 min) calls
#            to stay inside one call's 10-minute limit)
# parts: tests = decode (--full, and --short with OMNI_KVC_MAGIC=1), prefill/segments, quantizer; sanitize =
# compute-sanitizer memcheck and racecheck on the --tiny cases; bench = omni_bench_attn (validates, then times
# ours: bf16 / int2 / int4 / kivi2 with a device copy; int2 again with OMNI_KVC_MAGIC=1), ncu of the int2 split
# kernel at bs1/128K, bench/sdpa_bench.py (torch SDPA, same shapes), and one summary table (last lines).
set -u
mode=${1:?pack|run}
B=${2:?build dir}
D=$B/dev-attn
OUT=${OUT:-/tmp/attn_out}
BINS="test_gpu_kv_attn test_gpu_kv_quant test_gpu_kv_prefill omni_bench_attn"
if [ "$mode" = pack ]; then
    rm -rf $D && mkdir -p $D/lib
    for b in $BINS; do [ -f $B/tests/gpu/$b ] && cp $B/tests/gpu/$b $D/; done
    for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libgomp.so.1; do
        f=$(for b in $D/test_*; do ldd $b; done | awk -v l=$l '$1 == l {print $3}' | head -1)
        [ -n "$f" ] && cp -L "$f" $D/lib/
    done
    tar -C $D -cJf $D/lib.tar.xz lib && rm -rf $D/lib
    du -sh $D
    exit 0
fi
RES=$OUT                      # what comes back: one tarball of the logs (the device returns at most 8 files)
OUT=$RES/logs
mkdir -p $OUT /tmp/omni_lib && tar -C /tmp/omni_lib -xJf $D/lib.tar.xz
trap 'tar -C $OUT -czf $RES/attn_logs.tgz . && rm -rf $OUT' EXIT
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/local /usr/lib /opt -name 'libcudart.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee $OUT/gpu.txt
ldd $D/test_gpu_kv_attn | grep "not found"
status=""
step() { # name timeout command...: runs, logs to $OUT/name.log, records rc (skipped: binary not packed)
    local name=$1 t=$2
    shift 2
    local bin
    for bin in "$@"; do case $bin in $D/*) [ -x $bin ] || { status="$status$name: not packed\n"; return; } ;; esac; done
    local t0=$(date +%s)
    timeout $t "$@" > $OUT/$name.log 2>&1
    local rc=$?
    status="$status$(printf '%-22s rc %3d  %4d s  %s' $name $rc $(($(date +%s) - t0)) "$(grep -h 'passed,' $OUT/$name.log | tail -1)")\n"
    echo "== $name rc=$rc"
    grep -h "FAIL\|ERROR SUMMARY\|passed,\|DEADLOCK\|error" $OUT/$name.log | head -20
}
parts=${*:3}
[ -z "$parts" ] && parts="tests sanitize bench"
if [[ " $parts " == *" tests "* ]]; then
    step test_decode 300 $D/test_gpu_kv_attn --full
    OMNI_KVC_MAGIC=1 step test_decode_magic 120 $D/test_gpu_kv_attn --short
    step test_prefill 200 $D/test_gpu_kv_prefill
    step test_quant 60 $D/test_gpu_kv_quant
fi
if [[ " $parts " == *" sanitize "* ]]; then
    SAN="compute-sanitizer --report-api-errors no --error-exitcode 1"
    step memcheck_decode 150 $SAN --tool memcheck $D/test_gpu_kv_attn --tiny
    step memcheck_prefill 150 $SAN --tool memcheck $D/test_gpu_kv_prefill --tiny
    step racecheck_decode 150 $SAN --tool racecheck $D/test_gpu_kv_attn --tiny
    step racecheck_prefill 150 $SAN --tool racecheck $D/test_gpu_kv_prefill --tiny
fi
if [[ " $parts " == *" bench "* ]]; then
    step bench 300 $D/omni_bench_attn $OUT/bench.csv
    OMNI_KVC_MAGIC=1 OMNI_BENCH_ONLY=int2 step bench_magic 120 $D/omni_bench_attn $OUT/bench_magic.csv
    # hardware counters of the int2 split kernel at bs1/128K (one launch after warm-up)
    OMNI_BENCH_ONLY=int2 OMNI_BENCH_SHAPE=1x131072 step ncu_int2 120 ncu --clock-control none \
        --kernel-name regex:kvc_split --launch-skip 30 --launch-count 1 --section SpeedOfLight \
        --section LaunchStats --section Occupancy --section WarpStateStats --section InstructionStats \
        $D/omni_bench_attn
    timeout 200 python3 bench/sdpa_bench.py > $OUT/sdpa.csv 2> $OUT/sdpa.log
    echo "== sdpa rc=$?"
    cat $OUT/sdpa.log
    echo
fi
printf "$status"
[ -f $OUT/bench.csv ] || exit 0
python3 - $OUT/bench.csv $OUT/sdpa.csv <<'EOF'
import csv, sys
ours = {}
for r in csv.reader(open(sys.argv[1])):
    ours[(r[0], int(r[1]), int(r[2]))] = (float(r[3]), float(r[5]), float(r[6]), r[7] == "1")
sdpa = {}
try:
    for r in csv.reader(open(sys.argv[2])):
        sdpa[(int(r[1]), int(r[2]))] = (float(r[3]), float(r[4]))
except FileNotFoundError:
    pass
copy = next(iter(ours.values()))[2] if ours else 0
print(f"decode attention, 32/8 heads, D 128, window 128 (us; TB/s = bytes read / time; copy {copy:.2f} TB/s)")
hdr = f"{'shape':>10} | {'SDPA':>14} | {'bf16':>21} | {'int2':>26} | {'int4':>21} | {'kivi2':>21}"
print(hdr)
print("-" * len(hdr))
for bs, ctx in [(1, 4096), (1, 32768), (1, 131072), (8, 32768), (48, 4096)]:
    s = sdpa.get((bs, ctx))
    row = f"bs{bs}/{ctx // 1024}K".rjust(10) + " | "
    row += (f"{s[0]:7.1f} {s[1] / s[0] / 1e6:4.2f}TB/s" if s else " " * 14) + " | "
    for f in ["bf16", "int2", "int4", "kivi2"]:
        o = ours.get((f, bs, ctx))
        if not o:
            row += " " * (26 if f == "int2" else 21) + " | "
            continue
        us, byt, cp, ok = o
        tbs = byt / us / 1e6
        cell = f"{us:7.1f} {tbs:4.2f} {100 * tbs / cp:3.0f}%"
        if f == "bf16" and s: cell += f" {us / s[0]:4.2f}x"
        elif f == "bf16": cell += "      "
        if f == "int2": cell += f" {s[0] / us:4.2f}xSDPA" if s else " " * 10
        if f in ("int4", "kivi2"): cell += "      "
        row += cell + ("" if ok else " FAIL") + " | "
    print(row)
print("bf16 column: time / SDPA (target <= 1.10); int2: SDPA / time (target >= 4.5 at bs1/128K, <= 33 us);"
      " % = of copy (int2 target >= 80% at bs1/128K, bs8/32K, bs48/4K)")
EOF
grep -h "^prefill\|^segments" $OUT/bench.log
[ -f $OUT/bench_magic.csv ] && echo "int2 with OMNI_KVC_MAGIC=1 (bs,ctx,us): $(cut -d, -f2,3,4 $OUT/bench_magic.csv | tr '\n' ' ')"
