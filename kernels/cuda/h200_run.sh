#!/bin/bash
# h200_run.sh - run the kernels/cuda GPU test and benchmark on a bare CUDA machine (the lent H200) from binaries
# built here (Debian 12, -DOMNI_CUDA=ON). The device image has CUDA 13.0 (cudart, cuBLAS) but not our host
# libraries (OpenBLAS, libgfortran, libgomp), so `pack` bundles those next to the binaries.
#   here:    kernels/cuda/h200_run.sh pack build-g1      -> build-g1/dev/ (about 6 MB; carry it)
#   device:  kernels/cuda/h200_run.sh run build-g1 [bench] [memcheck]   (writes logs under $OUT when set)
set -u
mode=${1:?pack|run}
B=${2:?build dir}
D=$B/dev
OUT=${OUT:-/tmp}
if [ "$mode" = pack ]; then
    mkdir -p $D/lib
    cp $B/tests/gpu/test_gpu_ops $B/kernels/cuda/omni_bench_gpu_ops $D/
    for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libgomp.so.1; do
        cp -L "$(ldd $D/test_gpu_ops | awk -v l=$l '$1 == l {print $3}')" $D/lib/
    done
    tar -C $D -cJf $D/lib.tar.xz lib && rm -rf $D/lib
    du -sh $D
    exit 0
fi
mkdir -p /tmp/omni_lib && tar -C /tmp/omni_lib -xJf $D/lib.tar.xz
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
ldd $D/test_gpu_ops | grep "not found"
$D/test_gpu_ops > $OUT/test.log 2>&1
rc=$?
echo "test_gpu_ops rc=$rc"
grep -A13 "^op " $OUT/test.log
grep "FAIL\|passed" $OUT/test.log | tail -5
shift 2
for opt in "$@"; do
    case $opt in
    bench) timeout 150 $D/omni_bench_gpu_ops 2>&1 | tee $OUT/bench.log ;;
    memcheck)
        timeout 200 compute-sanitizer --tool memcheck --report-api-errors no $D/test_gpu_ops > $OUT/memcheck.log 2>&1
        echo "memcheck rc=$?"
        grep "ERROR SUMMARY" $OUT/memcheck.log ;;
    esac
done
exit $rc
