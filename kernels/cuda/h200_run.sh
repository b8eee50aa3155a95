#!/bin/bash
# h200_run.sh - run the GPU tests (every tests/gpu binary) and the op benchmark on a bare CUDA host (the lent H200)
# from binaries built here (Debian 12, CUDA 13.0, -DOMNI_CUDA=ON). The device image has the CUDA runtime and
# cuBLAS but not our host libraries (OpenBLAS, cJSON, PCRE2, ...), so `pack` bundles every shared library the
# binaries load except the C runtime and CUDA's own.
#   here:    kernels/cuda/h200_run.sh pack build          -> build/dev/ (binaries + lib.tar.xz; carry build/dev)
#   device:  kernels/cuda/h200_run.sh run build [bench] [memcheck] [memcheck-short]   (repository root; logs: $OUT)
# memcheck runs every test under compute-sanitizer; memcheck-short only the decoder and its ops with --short (the
# whole CUDA runner on one text model and the Omni fixture, bf16 / int2 / kivi2 caches, graphs; a few minutes).
# `run` prints one line per test (rc, passed/failed counts, time) and the op tables, writes $OUT/tests.log (every
# test's output), $OUT/memcheck.log and $OUT/bench_ops.log; exit status = number of failed tests. Tests read fixtures from $OMNI_FIXTURES_DIR (set here to tests/fixtures of the working tree).
set -u
mode=${1:?pack|run}
B=${2:?build dir}
D=$B/dev
OUT=${OUT:-/tmp}
if [ "$mode" = pack ]; then
    rm -rf "$D" && mkdir -p "$D/lib"
    for f in "$B"/tests/gpu/test_gpu_* "$B"/kernels/cuda/omni_bench_gpu_ops "$B"/kernels/cuda/omni_bench_moe \
        "$B"/llm/cuda/omni_bench_llm_cuda "$B"/tests/gpu/omni_bench_towers; do
        [ -x "$f" ] && [ -f "$f" ] && cp "$f" "$D/"
    done
    # every library outside the C runtime and CUDA, for every binary (transitive: ldd resolves the closure)
    for f in "$D"/*; do
        [ -f "$f" ] || continue
        ldd "$f" | awk '$3 ~ /^\// {print $3}'
    done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt)\.so' |
        while read -r l; do cp -L "$l" "$D/lib/"; done
    tar -C "$D" -cJf "$D/lib.tar.xz" lib && rm -rf "$D/lib"
    ls "$D"
    du -sh "$D"
    exit 0
fi
mkdir -p /tmp/omni_lib && tar -C /tmp/omni_lib -xJf "$D/lib.tar.xz"
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export OMNI_FIXTURES_DIR=${OMNI_FIXTURES_DIR:-$PWD/tests/fixtures}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv,noheader
fails=0
: > "$OUT/tests.log"
for t in "$D"/test_gpu_*; do
    n=$(basename "$t")
    ldd "$t" | grep "not found"
    t0=$(date +%s%N)
    "$t" > /tmp/omni_test.log 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    { echo "==== $n rc=$rc ${ms} ms"; cat /tmp/omni_test.log; } >> "$OUT/tests.log"
    printf '%-24s rc=%d  %-22s %6d ms\n' "$n" $rc "$(grep -E '^[0-9]+ passed' /tmp/omni_test.log | tail -1)" $ms
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && fails=$((fails + 1)) && grep -E "FAIL|FATAL" /tmp/omni_test.log | head -20
    sed -n '/^op /,/^(/p' /tmp/omni_test.log
done
shift 2
for opt in "$@"; do
    case $opt in
    bench) [ -x "$D/omni_bench_gpu_ops" ] && timeout 150 "$D/omni_bench_gpu_ops" 2>&1 | tee "$OUT/bench_ops.log" ;;
    memcheck)
        : > "$OUT/memcheck.log"
        for t in "$D"/test_gpu_*; do
            n=$(basename "$t")
            timeout 300 compute-sanitizer --tool memcheck --report-api-errors no "$t" > /tmp/omni_mc.log 2>&1
            rc=$?
            { echo "==== $n rc=$rc"; cat /tmp/omni_mc.log; } >> "$OUT/memcheck.log"
            echo "memcheck $n rc=$rc $(grep 'ERROR SUMMARY' /tmp/omni_mc.log)"
        done ;;
    memcheck-short)
        for n in test_gpu_decoder test_gpu_llm_ops; do
            [ -x "$D/$n" ] || continue
            timeout 420 compute-sanitizer --tool memcheck --report-api-errors no "$D/$n" --short > /tmp/omni_mc.log 2>&1
            rc=$?
            { echo "==== $n --short rc=$rc"; cat /tmp/omni_mc.log; } >> "$OUT/memcheck_short.log"
            echo "memcheck $n --short rc=$rc $(grep 'ERROR SUMMARY' /tmp/omni_mc.log) $(grep -E '^[0-9]+ passed' /tmp/omni_mc.log)"
        done ;;
    esac
done
exit $fails
