#!/bin/bash
# moe_gpu.sh - the decode MoE work of issue 9 on the H200 in one command, from binaries packed here by
# kernels/cuda/h200_run.sh (build/dev: test_gpu_llm_ops, omni_bench_moe, omni_bench_llm_cuda, lib.tar.xz).
#   here:    kernels/cuda/h200_run.sh pack build
#   device:  OUT=$OUT bash kernels/cuda/moe_gpu.sh build [tests] [short] [racecheck] [bench] [bench-decode] [omni]
#            [omni-ab] [decoder] [ncu] [ncu3]
# tests: test_gpu_llm_ops (every op vs its C reference; the MoE decode one kernel vs three kernels bit for bit),
#        then test_gpu_llm_ops --short under compute-sanitizer memcheck; racecheck: the same under racecheck;
# short: test_gpu_llm_ops --short alone (~10 s); bench: omni_bench_moe (decode T = 1/2/4/8: one kernel vs three
#        kernels vs per-entry, eager and in graphs; prefill); bench-decode: the same for decode T = 1, 2 only; omni: omni_bench_llm_cuda on the Omni-30B-A3B config at bs1/4K (random weights made on the
#        device); omni-ab: the same decode only (no prefill) with each decode MoE path (OMNI_CUDA_MOE=res,
#        split, fused; MOES="res split" picks some); decoder: test_gpu_decoder (the runner end to end, Omni fixtures on the default path);
#        ncu: one launch of the one-kernel decode at T = 1 under Nsight Compute (clocks left alone); ncu3: every
#        kernel of three T = 1 calls of each decode path (omni_bench_moe --profile: durations, DRAM, occupancy).
# Logs: $OUT/moe_tests.log, moe_sanitizer.log, bench_moe.log, omni30b.log (+ .csv), ncu_moe.log. Each step has
# its own time cap; one summary line per step on stdout.
set -u
B=${1:?build dir}
shift
D=$B/dev
OUT=${OUT:-/tmp}
mkdir -p "$OUT" /tmp/omni_lib && tar -C /tmp/omni_lib -xJf "$D/lib.tar.xz"
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export OMNI_FIXTURES_DIR=${OMNI_FIXTURES_DIR:-$PWD/tests/fixtures}
T0=$(date +%s)
el() { echo "== $1 at $(($(date +%s) - T0)) s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,utilization.gpu,memory.used --format=csv,noheader
for step in "$@"; do
    case $step in
    tests)
        el tests
        timeout 150 "$D/test_gpu_llm_ops" > "$OUT/moe_tests.log" 2>&1
        echo "test_gpu_llm_ops rc=$? $(grep -E '^[0-9]+ passed' "$OUT/moe_tests.log" | tail -1)"
        grep -E "FAIL|FATAL" "$OUT/moe_tests.log" | head -10
        ;&
    racecheck)
        tools=memcheck
        [ "$step" = racecheck ] && tools=racecheck
        for tool in $tools; do
            timeout 200 compute-sanitizer --tool $tool --report-api-errors no "$D/test_gpu_llm_ops" --short \
                > /tmp/moe_san.log 2>&1
            rc=$?
            { echo "==== $tool rc=$rc"; cat /tmp/moe_san.log; } >> "$OUT/moe_sanitizer.log"
            echo "$tool test_gpu_llm_ops --short rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/moe_san.log | head -1) $(grep -E '^[0-9]+ passed' /tmp/moe_san.log | tail -1)"
        done ;;
    short)
        el short
        timeout 60 "$D/test_gpu_llm_ops" --short > "$OUT/moe_tests_short.log" 2>&1
        echo "test_gpu_llm_ops --short rc=$? $(grep -E '^[0-9]+ passed' "$OUT/moe_tests_short.log" | tail -1)"
        grep -E "FAIL|FATAL" "$OUT/moe_tests_short.log" | head -10 ;;
    bench | bench-decode)
        el "$step"
        arg=
        [ "$step" = bench-decode ] && arg=--decode
        timeout 90 "$D/omni_bench_moe" $arg > "$OUT/bench_moe.log" 2>&1
        echo "omni_bench_moe rc=$?"
        cut -c1-260 "$OUT/bench_moe.log" ;;
    omni)
        el omni
        timeout ${OMNI_CAP:-60} "$D/omni_bench_llm_cuda" assets/configs/Qwen3-Omni-30B-A3B-Instruct --ctx 4096 --prefill 4096 \
            --label Omni-30B-A3B --csv "$OUT/omni30b.csv" > "$OUT/omni30b.log" 2>&1
        echo "omni_bench_llm_cuda rc=$?"
        grep -E "decode|prefill|split|peak|roofline" "$OUT/omni30b.log" | cut -c1-260 | head -12 ;;
    omni-ab)
        el omni-ab
        for m in ${MOES:-res split fused}; do
            OMNI_CUDA_MOE=$m timeout ${OMNI_CAP:-40} "$D/omni_bench_llm_cuda" assets/configs/Qwen3-Omni-30B-A3B-Instruct \
                --ctx 4096 --prefill 0 --label "Omni-30B-A3B moe=$m" --csv "$OUT/omni30b_ab.csv" > "$OUT/omni30b_$m.log" 2>&1
            echo "OMNI_CUDA_MOE=$m omni_bench_llm_cuda rc=$?"
            grep -E "decode bs1/4K tok/s|split of" "$OUT/omni30b_$m.log" | cut -c1-260
        done ;;
    decoder)
        el decoder
        timeout 300 "$D/test_gpu_decoder" > "$OUT/moe_decoder.log" 2>&1
        echo "test_gpu_decoder rc=$? $(grep -E '^[0-9]+ passed' "$OUT/moe_decoder.log" | tail -1)"
        grep -E "FAIL|FATAL|MoE routing" "$OUT/moe_decoder.log" | head -12 | cut -c1-300 ;;
    ncu3)
        el ncu3
        timeout 150 ncu --clock-control none -k regex:'moe_|rmsnorm' --section SpeedOfLight \
            --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats "$D/omni_bench_moe" --profile \
            > "$OUT/ncu3_moe.log" 2>&1
        echo "ncu3 rc=$?"
        grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy" "$OUT/ncu3_moe.log" | \
            sed -E 's/\(unsigned short.*\) \(/(/' | cut -c1-150 | head -120 ;;
    ncu)
        el ncu
        timeout 120 ncu --clock-control none -k regex:moe_dec_fused --launch-skip 12 --launch-count 1 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
            --section WarpStateStats --section SchedulerStats "$D/omni_bench_moe" > "$OUT/ncu_moe.log" 2>&1
        echo "ncu rc=$?"
        grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers|Grid Size|Stall|Eligible" \
            "$OUT/ncu_moe.log" | head -24 ;;
    *) echo "unknown step $step" ;;
    esac
done
el end
