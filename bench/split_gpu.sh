#!/bin/bash
# bench/split_gpu.sh - where a batch-48 / 4K decode step of Qwen3-VL-8B (random weights) goes, bf16 vs int2, in one
# command on the GPU host (repository root): the numbers the attention and runner owners need for issue 11's
# bs48/4K int2/bf16 target (1.9x).
#   1. omni_bench_llm_cuda (the CUDA runner alone, history = random K/V): decode tok/s with graphs, then the per-op
#      split of 32 eager steps one at a time (mean ms per step and the slowest step per op: a quantizing cache
#      flushes one window block per sequence every 32 steps, so kv_append's slowest step is the flush step).
#   2. omni bench through the engine (prompts prefilled by the engine's chunked prefill) and, in the same binary,
#      through the runner alone on random K/V (--fill-above): the engine's cost per step is the difference; -v logs
#      every timed step's time (p50 vs mean, flush steps).
#   here:   binaries omni + omni_bench_llm_cuda from a CUDA build, packed with .gpu/pack.sh or kernels/cuda/h200_run.sh
#   device: bash bench/split_gpu.sh PACKDIR          (PACKDIR holds omni, omni_bench_llm_cuda, lib.tar.xz)
# Writes $OUT/{llm_split.log, llm_split.csv, engine.txt, engine.log, runner.txt, runner.log, summary.txt}; prints
# summary.txt (the tok/s rows, the splits, the engine-vs-runner table). Wall ~60-90 s on the H200.
set -u
P=${1:?pack dir}
OUT=${OUT:-/tmp/omni_split}
CONFIG=${CONFIG:-assets/configs/Qwen3-VL-8B-Instruct}
mkdir -p "$OUT" /tmp/omni_split_lib && tar -C /tmp/omni_split_lib -xJf "$P/lib.tar.xz"
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_split_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
S=$OUT/summary.txt
: > "$S"
t0=$SECONDS
timeout 120 "$P/omni_bench_llm_cuda" "$CONFIG" --ctx 4096 --bs 48 --kv bf16,int2 --steps 64 --prefill 0 \
    --split-steps 32 --label "8B bs48" --csv "$OUT/llm_split.csv" > "$OUT/llm_split.log" 2>&1
echo "== runner alone (omni_bench_llm_cuda): rc=$? $((SECONDS - t0)) s" >> "$S"
grep -E "copy|decode .*tok/s|split of an eager|ms per eager" "$OUT/llm_split.log" | cut -c1-400 >> "$S"
run_bench() { # name, extra options: bs1 + bs48 at 4K, bf16 + int2, 64 timed steps (two window flushes)
    local name=$1
    shift
    t0=$SECONDS
    timeout 150 "$P/omni" bench --random "$CONFIG/config.json" --device cuda --kv bf16,int2 --batch 1,48 --ctx 4K \
        -n 64 --kv-mem 30 -v "$@" > "$OUT/$name.txt" 2> "$OUT/$name.log"
    echo "== $name (omni bench $*): rc=$? $((SECONDS - t0)) s" >> "$S"
    grep -E "^\| (bf16|int2) " "$OUT/$name.txt" >> "$S"
    grep -E "step ms:" "$OUT/$name.log" | cut -c1-300 >> "$S"
}
run_bench engine --fits-kv int2:w32
run_bench runner --fill-above 2K
cat "$S"
