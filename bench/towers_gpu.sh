#!/bin/bash
# towers_gpu.sh - the GPU vision and audio towers (vision/cuda, audio/cuda) on the GPU host in ONE device call:
# their tests (test_gpu_tower_ops; test_gpu_towers = fixtures, random towers at awkward and real widths vs the CPU
# towers; test_gpu_media_e2e = fixture images and clips through app/media.c's GPU towers into the CUDA runner vs
# the CPU f32 path, KL and argmax), compute-sanitizer memcheck (test_gpu_tower_ops, the other two with --short),
# then omni_bench_towers: the Qwen3-VL-8B vision tower on a 1024-token image (forward median, encode with copies,
# per-op split) and the Omni-30B-A3B AuT on 30 s of audio, random weights made on the device, outputs validated
# before timing.
#   here:    bash bench/towers_gpu.sh build [B]    (B = build-towers: CUDA build of these targets without FFmpeg/UI;
#                                                   B/dev/towers.tar.xz = the stripped binaries + host libraries)
#            or take B = build after `kernels/cuda/h200_run.sh pack build` (it packs the tower binaries too)
#   device:  bash bench/towers_gpu.sh run [B]      (carry B/dev; from the repository root; about 1.5 minutes,
#                                                   each step under its own timeout, 8 minutes at most)
# Runs only the tower binaries (not the other test_gpu_* a shared pack holds).
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
TARGETS="test_gpu_tower_ops test_gpu_towers test_gpu_media_e2e omni_bench_towers"
mkdir -p "$OUT"
if [ "$mode" = build ]; then
    cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON -DOMNI_FFMPEG=OFF -DOMNI_UI=OFF > /dev/null || exit 1
    nice cmake --build "$B" -j2 --target $TARGETS || exit 1
    bash kernels/cuda/h200_run.sh pack "$B" > /dev/null || exit 1
    # one xz of the stripped tower binaries and the host libraries (B/dev/towers.tar.xz, nothing else in B/dev)
    mkdir -p "$D/towers" && tar -C "$D/towers" -xJf "$D/lib.tar.xz" || exit 1
    for t in $TARGETS; do strip -o "$D/towers/$t" "$D/$t" || exit 1; done
    tar -C "$D" -cJf "$D/towers.tar.xz.tmp" towers && find "$D" -mindepth 1 -maxdepth 1 ! -name towers.tar.xz.tmp \
        -exec rm -rf {} + && mv "$D/towers.tar.xz.tmp" "$D/towers.tar.xz" || exit 1
    ls -l "$D"
    exit 0
fi
export OMP_WAIT_POLICY=passive
if [ -f "$D/towers.tar.xz" ]; then # this script's pack: binaries and libraries in one xz
    rm -rf /tmp/omni_towers && mkdir -p /tmp/omni_towers && tar -C /tmp/omni_towers -xJf "$D/towers.tar.xz" || exit 1
    D=/tmp/omni_towers/towers
    mkdir -p /tmp/omni_lib && cp -r "$D/lib" /tmp/omni_lib/
else # a shared pack of kernels/cuda/h200_run.sh
    mkdir -p /tmp/omni_lib && tar -C /tmp/omni_lib -xJf "$D/lib.tar.xz" || exit 1
fi
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-}
export OMNI_FIXTURES_DIR=${OMNI_FIXTURES_DIR:-$PWD/tests/fixtures}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv,noheader
failed=0
# step LIMIT_S LOG NAME ARGS...: one binary under a timeout; its output appended to $OUT/LOG; a line per step.
step() {
    local lim=$1 log=$2 name=$3
    shift 3
    local t0=$(date +%s%N)
    timeout "$lim" "$@" > /tmp/omni_step.log 2>&1
    local rc=$? ms=$((($(date +%s%N) - t0) / 1000000))
    { echo "==== $name rc=$rc ${ms} ms"; cat /tmp/omni_step.log; } >> "$OUT/$log"
    printf '%-34s rc=%-3d %-22s %6d ms %s\n' "$name" $rc "$(grep -E '^[0-9]+ passed' /tmp/omni_step.log | tail -1)" \
        $ms "$(grep 'ERROR SUMMARY' /tmp/omni_step.log)"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && failed=$((failed + 1)) && grep -E "FAIL|FATAL|Invalid|error" /tmp/omni_step.log |
        head -20
    return 0
}
: > "$OUT/tests.log"
: > "$OUT/memcheck_towers.log"
echo "== tests"
step 30 tests.log test_gpu_tower_ops "$D/test_gpu_tower_ops"
step 75 tests.log test_gpu_towers "$D/test_gpu_towers"
step 90 tests.log test_gpu_media_e2e "$D/test_gpu_media_e2e"
grep -E "^worst error|positions compared" "$OUT/tests.log"
echo "== memcheck"
MC="compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99"
step 40 memcheck_towers.log "memcheck test_gpu_tower_ops" $MC "$D/test_gpu_tower_ops"
step 60 memcheck_towers.log "memcheck test_gpu_towers --short" $MC "$D/test_gpu_towers" --short
step 90 memcheck_towers.log "memcheck test_gpu_media_e2e --short" $MC "$D/test_gpu_media_e2e" --short
echo "== bench"
: > "$OUT/towers.csv"
timeout 60 "$D/omni_bench_towers" --iters 10 --csv "$OUT/towers.csv" > "$OUT/bench_towers.log" \
    2> "$OUT/bench_towers.err"
rc=$?
cat "$OUT/bench_towers.err" "$OUT/bench_towers.log"
echo "omni_bench_towers rc=$rc"
[ $rc -ne 0 ] && failed=$((failed + 1))
awk -F, '$1 == "vision-tower" && $2 ~ /forward, median/ {
    printf "vision tower, %s: %.2f ms (target <= 30 ms): %s\n", $2, $3, ($3 <= 30 ? "PASS" : "FAIL") }' "$OUT/towers.csv"
exit $failed
