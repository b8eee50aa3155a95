#!/bin/bash
# towers_gpu.sh - the GPU vision and audio towers (vision/cuda, audio/cuda) on the GPU host in ONE device call:
# their tests (test_gpu_tower_ops; test_gpu_towers = fixtures, random towers at awkward and real widths vs the CPU
# towers), compute-sanitizer memcheck of both (test_gpu_towers --short), then omni_bench_towers: the Qwen3-VL-8B
# vision tower on a 1024-token image (forward median, encode with copies, attention / GEMM split) and the
# Omni-30B-A3B AuT on 30 s of audio, random weights made on the device, outputs validated before timing.
#   here:    bash bench/towers_gpu.sh build [B]    (B = build-towers: CUDA build of the tower targets without
#                                                   FFmpeg/UI, packed with its host libraries into B/dev)
#   device:  bash bench/towers_gpu.sh run [B]      (carry B/dev; from the repository root; ~5 minutes)
# Writes $OUT/tests.log (every test's output), $OUT/memcheck_towers.log, $OUT/bench_towers.log and
# $OUT/towers.csv (rows "label,metric,value,unit"); prints the test lines, memcheck summaries and the bench table.
# Exit status: failed tests + memcheck errors + (bench failed).
# From bench/gpu.sh: add test_gpu_tower_ops test_gpu_towers omni_bench_towers to its build targets (h200_run.sh
# pack takes them) and, after `h200_run.sh run` has unpacked the libraries, call
#     timeout 300 "$D/omni_bench_towers" --csv "$CSV"
# (vision row: "vision-tower,1024-token image ms (forward, median),<ms>,ms" against the 30 ms target).
set -u
mode=${1:?build|run}
B=${2:-build-towers}
D=$B/dev
OUT=${OUT:-/tmp/omni_out}
mkdir -p "$OUT"
if [ "$mode" = build ]; then
    cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON -DOMNI_FFMPEG=OFF -DOMNI_UI=OFF > /dev/null || exit 1
    cmake --build "$B" -j2 --target test_gpu_tower_ops test_gpu_towers omni_bench_towers || exit 1
    exec bash kernels/cuda/h200_run.sh pack "$B"
fi
export OMP_WAIT_POLICY=passive
echo "== tests"
bash kernels/cuda/h200_run.sh run "$B"
failed=$?
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} # unpacked by h200_run.sh run
export OMNI_FIXTURES_DIR=${OMNI_FIXTURES_DIR:-$PWD/tests/fixtures}
echo "== memcheck"
: > "$OUT/memcheck_towers.log"
for t in "test_gpu_tower_ops" "test_gpu_towers --short"; do
    timeout 400 compute-sanitizer --tool memcheck --report-api-errors no $D/$t > /tmp/omni_mc.log 2>&1
    rc=$?
    { echo "==== $t rc=$rc"; cat /tmp/omni_mc.log; } >> "$OUT/memcheck_towers.log"
    echo "memcheck $t rc=$rc $(grep 'ERROR SUMMARY' /tmp/omni_mc.log) $(grep -E '^[0-9]+ passed' /tmp/omni_mc.log)"
    [ $rc -ne 0 ] && failed=$((failed + 1))
done
echo "== bench"
: > "$OUT/towers.csv"
timeout 300 "$D/omni_bench_towers" --csv "$OUT/towers.csv" > "$OUT/bench_towers.log" 2> "$OUT/bench_towers.err"
rc=$?
cat "$OUT/bench_towers.err" "$OUT/bench_towers.log"
echo "omni_bench_towers rc=$rc"
[ $rc -ne 0 ] && failed=$((failed + 1))
awk -F, '$1 == "vision-tower" && $2 ~ /forward, median/ {
    printf "vision tower, %s: %.2f ms (target <= 30 ms): %s\n", $2, $3, ($3 <= 30 ? "PASS" : "FAIL") }' "$OUT/towers.csv"
exit $failed
