#!/bin/bash
# bench/dec6_gpu.sh - session 7 (dec6) GPU check of the decode step's append / flush / GEMV changes, one command on
# the H200 host from the repository root: P=<unpacked pack>/dev OUT=<log dir> bash bench/dec6_gpu.sh PART...
# quiet (alone on the GPU, <= 70 s; ~5-15 s per run): Qwen3-VL-8B random weights, bf16 + int2, 64 timed steps (2
#   flushes per int2 sequence), new (defaults) vs old (OMNI_KV_EARLY_FLUSH=0 OMNI_KV_APPEND_PDL=0
#   OMNI_CUDA_SIDE_APPEND=0: main's behaviour before session 7) at bs1 4K + 128K, then at bs48/4K; rows: median
#   tok/s and "mean tok/s" (its note: the slowest step, the int2 flush). (OMNI_CUDA_GEMV=4: the bulk-copy GEMV.)
# tests (beside other load, <= 200 s): test_gpu_kv_quant, test_gpu_kv_dev, test_gpu_ops, test_gpu_decoder,
#   test_gpu_decoder --short with OMNI_CUDA_SIDE_APPEND=2, compute-sanitizer memcheck of test_gpu_kv_dev (quick) and
#   test_gpu_decoder --short, then test_gpu_kv_dev --bench (append per layer, slowest step, upload incl. the early
#   flush: indicative under load).
# Any other PART does nothing. Writes $OUT/*.log; prints one line per test and the decode rows. Exit: failed tests.
set -u
P=${P:?set P to the unpacked pack dev folder}
OUT=${OUT:-/tmp/dec6_out}
mkdir -p "$OUT" /tmp/dec6_lib && tar -C /tmp/dec6_lib -xJf "$P/lib.tar.xz"
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/dec6_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export OMNI_FIXTURES_DIR=${OMNI_FIXTURES_DIR:-$PWD/tests/fixtures}
fails=0
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,utilization.gpu --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for part in "$@"; do
    case $part in
    tests)
        for t in test_gpu_kv_quant test_gpu_kv_dev test_gpu_ops test_gpu_decoder; do
            s=$(date +%s)
            timeout 150 "$P/$t" > "$OUT/$t.log" 2>&1
            rc=$?
            echo "$t rc=$rc $(grep -E '^[0-9]+ passed' "$OUT/$t.log" | tail -1) ($(( $(date +%s) - s )) s)"
            [ $rc -ne 0 ] && fails=$((fails + 1)) && grep -E "FAIL|FATAL" "$OUT/$t.log" | head -10
        done
        OMNI_CUDA_SIDE_APPEND=2 timeout 120 "$P/test_gpu_decoder" --short > "$OUT/decoder_side2.log" 2>&1
        rc=$?
        echo "test_gpu_decoder --short OMNI_CUDA_SIDE_APPEND=2 rc=$rc $(grep -E '^[0-9]+ passed' "$OUT/decoder_side2.log")"
        [ $rc -ne 0 ] && fails=$((fails + 1)) && grep -E "FAIL|FATAL" "$OUT/decoder_side2.log" | head -10
        OMNI_KVDEV_QUICK=1 timeout 120 compute-sanitizer --tool memcheck "$P/test_gpu_kv_dev" \
            > "$OUT/memcheck_kvdev.log" 2>&1
        echo "memcheck test_gpu_kv_dev (quick) rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_kvdev.log")"
        timeout 150 compute-sanitizer --tool memcheck --report-api-errors no "$P/test_gpu_decoder" --short \
            > "$OUT/memcheck_decoder.log" 2>&1
        echo "memcheck test_gpu_decoder --short rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_decoder.log")"
        timeout 60 "$P/test_gpu_kv_dev" --bench > "$OUT/kvdev_bench.log" 2>&1
        echo "kv_dev bench rc=$? (indicative: beside other load)"; cat "$OUT/kvdev_bench.log" ;;
    quiet)
        q0=$(date +%s)
        for c in new old new48 old48; do
            [ $(( $(date +%s) - q0 )) -gt 50 ] && echo "== $c skipped (time)" && continue
            case $c in
            new*) envs="" ;;
            old*) envs="OMNI_KV_EARLY_FLUSH=0 OMNI_KV_APPEND_PDL=0 OMNI_CUDA_SIDE_APPEND=0" ;;
            esac
            case $c in
            *48) pts="--bs 48 --ctx 4096" ;;
            *) pts="--bs 1 --ctx 4096,131072" ;;
            esac
            env $envs timeout 40 "$P/omni_bench_llm_cuda" assets/configs/Qwen3-VL-8B-Instruct $pts --kv bf16,int2 \
                --prefill 0 --steps 64 --split-steps 1 --label "8B $c" > "$OUT/ab_$c.log" 2>&1
            echo "== $c ($envs) rc=$? $(( $(date +%s) - q0 )) s"
            grep -E "copy|decode .*tok/s" "$OUT/ab_$c.log"
        done ;;
    esac
done
echo "dec6_gpu.sh: $fails failed, $(( $(date +%s) - t0 )) s"
exit $fails
