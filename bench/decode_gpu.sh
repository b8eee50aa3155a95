#!/bin/bash
# bench/decode_gpu.sh - the CUDA runner's decode work on the GPU host in one command (repository root): the tests of
# the decode chain, memcheck of the short decoder test, and the Qwen3-VL-8B random-weight decode timings with the
# o_proj L2 prefetch on and off (OMNI_CUDA_PREFETCH=0), from binaries packed here by kernels/cuda/h200_run.sh.
#   here:    cmake -S . -B build-h200 -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON -DOMNI_FFMPEG=OFF -DOMNI_UI=OFF
#            cmake --build build-h200 -j2 --target test_gpu_ops test_gpu_llm_ops test_gpu_kv_dev test_gpu_decoder \
#                omni_bench_llm_cuda && bash kernels/cuda/h200_run.sh pack build-h200      (carry build-h200/dev)
#   device:  bash bench/decode_gpu.sh build-h200 [tests] [memcheck] [bench]     (default: all three; logs: $OUT)
# Prints one line per test, the memcheck summary and the decode tok/s rows; writes $OUT/<test>.log,
# $OUT/memcheck_decoder.log, $OUT/bench_pf1.log, $OUT/bench_pf0.log. Exit status: failed tests.
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
    esac
done
exit $fails
