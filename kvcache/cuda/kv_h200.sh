#!/bin/bash
# kv_h200.sh - run the device KV cache tests on a bare CUDA machine (the lent H200) from binaries built here
# (Debian 12, CUDA compiled): test_gpu_kv_dev (device cache vs CPU cache, byte for byte) and test_gpu_kv_quant, then
# compute-sanitizer memcheck + racecheck on test_gpu_kv_dev (its first 4 configurations) and the append bench
# (the attention kernels have their own script: bench/attn_gpu.sh). Worst case under 9 minutes (timeouts).
# The device image has the CUDA runtime but not libgomp, so `pack` bundles it next to the binaries.
#   here:    bash kvcache/cuda/kv_h200.sh pack build          -> build/kvdev/ (carry it)
#   device:  bash kvcache/cuda/kv_h200.sh run build [sanitize] [bench]   (logs under $OUT when set)
# Prints one summary line per part; full logs in $OUT/kv_*.log.
set -u
mode=${1:?pack|run}
B=${2:?build dir}
D=$B/kvdev
OUT=${OUT:-/tmp}
TESTS="test_gpu_kv_dev test_gpu_kv_quant"
if [ "$mode" = pack ]; then
    rm -rf $D && mkdir -p $D/lib
    for t in $TESTS; do cp $B/tests/gpu/$t $D/ || exit 1; done
    for l in libgomp.so.1; do
        cp -L "$(ldd $D/test_gpu_kv_dev | awk -v l=$l '$1 == l {print $3}')" $D/lib/ || exit 1
    done
    du -sh $D
    exit 0
fi
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcudart.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$D/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
for t in $TESTS; do ldd $D/$t | grep "not found"; done
rc=0
for t in $TESTS; do
    timeout 200 $D/$t > $OUT/kv_$t.log 2>&1
    r=$?
    [ $r -ne 0 ] && rc=$r
    echo "$t rc=$r: $(tail -1 $OUT/kv_$t.log)"
    grep -E "DIFFERENT|FAIL" $OUT/kv_$t.log | head -5
done
grep -E "identical|flushed" $OUT/kv_test_gpu_kv_dev.log | tail -16
shift 2
for opt in "$@"; do
    case $opt in
    sanitize)
        for tool in memcheck racecheck; do
            OMNI_KVDEV_QUICK=1 timeout 120 compute-sanitizer --tool $tool $D/test_gpu_kv_dev > $OUT/kv_$tool.log 2>&1
            echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/kv_$tool.log | tail -1)"
        done ;;
    bench) timeout 60 $D/test_gpu_kv_dev --bench 2>&1 | tee $OUT/kv_bench.log ;;
    esac
done
exit $rc
