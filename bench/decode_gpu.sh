#!/bin/bash
# bench/decode_gpu.sh - the CUDA runner's decode work on the GPU host in one command (repository root): the tests of
# the decode chain, memcheck of the short decoder test, and the Qwen3-VL-8B random-weight decode timings with the
# o_proj L2 prefetch on and off (OMNI_CUDA_PREFETCH=1 / 0; off by default), from binaries packed here by kernels/cuda/h200_run.sh.
#   here:    cmake -S . -B build-h200 -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON -DOMNI_FFMPEG=OFF -DOMNI_UI=OFF
#            cmake --build build-h200 -j2 --target test_gpu_ops test_gpu_llm_ops test_gpu_kv_dev test_gpu_decoder \
#                omni_bench_llm_cuda && bash kernels/cuda/h200_run.sh pack build-h200      (carry build-h200/dev)
#   device:  bash bench/decode_gpu.sh build-h200 [tests] [memcheck] [bench] [ab] [chain] [ncu]
#            (default: tests memcheck bench; logs: $OUT)
# Prints one line per test, the memcheck summary and the decode tok/s rows; writes $OUT/<test>.log,
# $OUT/memcheck_decoder.log, $OUT/bench_pf1.log, $OUT/bench_pf0.log. Exit status: failed tests.
# ab: 8B bs1/4K bf16 + int2 decode with programmatic dependent launches on / off (OMNI_CUDA_PDL=0), the o_proj
#     L2 prefetch on / off and the fused decode linears on / off (OMNI_CUDA_FUSE=0): AB="pdl pf fuse,..." triples
#     (default AB="1 0 1,1 0 0,0 0 1,1 1 1"; $OUT/ab_*.log, ~20 s each); chain: omni_bench_gpu_ops --chain (decode-shaped GEMVs alone,
#     the 36-layer decode chain without attention eager and as a graph) with PDL on and off ($OUT/chain_pdl*.log);
# ncu: per-kernel times (graph nodes profiled one at a time) of ~one bf16 bs1/4K decode step ($OUT/ncu_step.csv).
set -u
B=${1:?build dir}
shift
D=$B/dev
OUT=${OUT:-/tmp/omni_out}
mkdir -p "$OUT" /tmp/omni_lib && tar -C /tmp/omni_lib -xJf "$D/lib.tar.xz"
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export OMNI_FIXTURES_DIR=${OMNI_FIXTURES_DIR:-$PWD/tests/fixtures}
parts=${*:-tests memcheck bench}
fails=0
for part in $parts; do
    case $part in
    tests)
        for t in test_gpu_ops test_gpu_llm_ops test_gpu_kv_dev test_gpu_decoder; do
            [ -x "$D/$t" ] || continue
            timeout 420 "$D/$t" > "$OUT/$t.log" 2>&1
            rc=$?
            echo "$t rc=$rc $(grep -E '^[0-9]+ passed' "$OUT/$t.log" | tail -1)"
            [ $rc -ne 0 ] && fails=$((fails + 1)) && grep -E "FAIL|FATAL" "$OUT/$t.log" | head -10
        done
        grep -E "^MoE routing|positions of a second GPU sequence|positions compared" "$OUT/test_gpu_decoder.log" ;;
    memcheck)
        timeout 300 compute-sanitizer --tool memcheck --report-api-errors no "$D/test_gpu_decoder" --short \
            > "$OUT/memcheck_decoder.log" 2>&1
        echo "memcheck test_gpu_decoder --short rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_decoder.log")" ;;
    bench)
        for pf in 1 0; do
            OMNI_CUDA_PREFETCH=$pf timeout 150 "$D/omni_bench_llm_cuda" assets/configs/Qwen3-VL-8B-Instruct \
                --ctx 4096,32768 --kv bf16,int2 --prefill 0 --steps 64 --label "Qwen3-VL-8B prefetch=$pf" \
                > "$OUT/bench_pf$pf.log" 2>&1
            echo "== prefetch $pf (rc=$?)"
            grep -E "decode .*tok/s|split of an eager" "$OUT/bench_pf$pf.log"
        done ;;
    ab)
        combos=("1 0 1" "1 0 0" "0 0 1" "1 1 1")
        [ -n "${AB:-}" ] && IFS=',' read -ra combos <<< "$AB"
        for c in "${combos[@]}"; do
            set -- $c
            OMNI_CUDA_PDL=$1 OMNI_CUDA_PREFETCH=$2 OMNI_CUDA_FUSE=$3 timeout 40 "$D/omni_bench_llm_cuda" \
                assets/configs/Qwen3-VL-8B-Instruct --ctx 4096 --kv bf16,int2 --prefill 0 --steps 64 \
                --label "Qwen3-VL-8B pdl=$1 prefetch=$2 fuse=$3" > "$OUT/ab_pdl$1_pf$2_fu$3.log" 2>&1
            echo "== pdl $1 prefetch $2 fuse $3 (rc=$?)"
            grep -E "decode .*tok/s|split of an eager" "$OUT/ab_pdl$1_pf$2_fu$3.log"
        done ;;
    chain)
        for pdl in 1 0; do
            OMNI_CUDA_PDL=$pdl timeout 60 "$D/omni_bench_gpu_ops" --chain > "$OUT/chain_pdl$pdl.log" 2>&1
            echo "== chain pdl $pdl (rc=$?)"
            cat "$OUT/chain_pdl$pdl.log"
        done ;;
    ncu)
        NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
        [ -n "$NCU" ] || { echo "ncu: not found"; continue; }
        OMNI_CUDA_PREFETCH=0 timeout 150 "$NCU" --graph-profiling node --csv --print-units base \
            -k regex:'gemv|rmsnorm|swiglu|qk|kvc_|kvd_append' --launch-skip 800 --launch-count 400 \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
            "$D/omni_bench_llm_cuda" assets/configs/Qwen3-VL-8B-Instruct --ctx 4096 --kv bf16 --prefill 0 \
            --steps 8 > "$OUT/ncu_step.csv" 2> "$OUT/ncu_step.err"
        echo "== ncu rc=$? $(wc -l < "$OUT/ncu_step.csv") lines"
        python3 - "$OUT/ncu_step.csv" <<'PY' || tail -5 "$OUT/ncu_step.err"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ik, im, iv = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
t = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows[1:]:
    try: t[r[ik].split("(")[0][:60]][r[im]].append(float(r[iv].replace(",", "")))
    except ValueError: pass
for k, m in sorted(t.items(), key=lambda kv: -sum(kv[1]["gpu__time_duration.sum"])):
    d = m["gpu__time_duration.sum"]; b = m["dram__bytes_read.sum"]; p = m["dram__throughput.avg.pct_of_peak_sustained_elapsed"]
    print("%-60s n %4d  mean %8.2f us  sum %9.1f us  read %7.2f MB/call  dram %5.1f%%" % (k, len(d), sum(d) / len(d) / 1e3,
          sum(d) / 1e3, sum(b) / max(len(b), 1) / 1e6, sum(p) / max(len(p), 1)))
PY
        ;;
    esac
done
exit $fails
